// pvfs-stat: shows the attributes (and layout) of pvfs paths.
#include <iostream>

#include <fmt/format.h>

#include "common.hpp"

using namespace pvfs;

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-stat: show attributes of files in a pvfs file system"};
    tools::Target target;
    bool json = false;
    bool no_follow = false;
    std::vector<std::string> paths;
    tools::add_target_options(app, target);
    app.flag("--json", json, "print the attributes as JSON");
    app.flag("-L,--no-follow", no_follow, "do not follow a final symlink");
    app.option("paths", paths, "paths inside the file system").required();
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    const auto client = tools::connect_or_exit("pvfs-stat", target);
    int status = 0;
    cli::Json out = cli::Json::object();
    for (const std::string &arg : paths) {
        const std::string path = tools::pvfs_path(arg);
        Attr a;
        if (const int rc = client->resolve(path, a, !no_follow); rc != 0) {
            tools::report("pvfs-stat", path, rc);
            status = tools::exit_failure;
            continue;
        }
        if (json) {
            out.set(path, tools::attr_json(a));
            continue;
        }
        fmt::print("  File: {}\n", path);
        fmt::print("  Type: {}  Size: {}  Links: {}  Handle: {:016x}\n", tools::type_name(a.type),
                   a.size, a.nlink, a.handle);
        fmt::print("Access: ({:04o}/{})  Uid: {}  Gid: {}\n", a.mode, tools::mode_string(a), a.uid,
                   a.gid);
        if (a.type == ObjectType::regular || a.type == ObjectType::directory)
            fmt::print("Layout: stripe size {}, stripe count {}, first data server {}\n",
                       a.layout.stripe_size, a.layout.stripe_count, a.layout.first_server);
        fmt::print("Access: {}\nModify: {}\nChange: {}\n", tools::time_string(a.atime),
                   tools::time_string(a.mtime), tools::time_string(a.ctime));
    }
    if (json)
        std::cout << out.dump(2) << "\n";
    return status;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-stat", [&] { return run(argc, argv); });
}
