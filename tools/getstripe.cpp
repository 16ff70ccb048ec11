// pvfs-getstripe: shows how files are striped (directories: what new files get).
#include <iostream>

#include <fmt/format.h>

#include "common.hpp"

using namespace pvfs;

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-getstripe: show the striping of files and directories in pvfs"};
    tools::Target target;
    bool json = false;
    std::vector<std::string> paths;
    tools::add_target_options(app, target);
    app.flag("--json", json, "print as JSON");
    app.option("paths", paths, "files or directories").required();
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    const auto client = tools::connect_or_exit("pvfs-getstripe", target);
    const auto data = client->cluster().data_servers();
    int status = 0;
    cli::Json out = cli::Json::object();
    for (const std::string &arg : paths) {
        const std::string path = tools::pvfs_path(arg);
        Attr a;
        int rc = client->resolve(path, a);
        Layout l;
        if (rc == 0)
            rc = client->layout_get(a.handle, l);
        if (rc != 0) {
            tools::report("pvfs-getstripe", path, rc);
            status = tools::exit_failure;
            continue;
        }
        std::vector<std::string> servers;
        for (std::uint32_t slot = 0; slot < l.stripe_count && !data.empty(); ++slot)
            servers.push_back(
                client->cluster().servers.at(data.at((l.first_server + slot) % data.size())).name);
        if (json) {
            cli::Json names = cli::Json::array();
            for (const std::string &s : servers)
                names.push(s);
            cli::Json j = tools::layout_json(l);
            j.set("servers", names);
            out.set(path, j);
            continue;
        }
        std::string list;
        for (const std::string &s : servers)
            list += (list.empty() ? "" : " ") + s;
        fmt::print("{}: stripe_size {} stripe_count {} first_server {} servers [{}]\n", path,
                   l.stripe_size, l.stripe_count, l.first_server, list);
    }
    if (json)
        std::cout << out.dump(2) << "\n";
    return status;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-getstripe", [&] { return run(argc, argv); });
}
