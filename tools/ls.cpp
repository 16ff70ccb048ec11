// pvfs-ls: lists directories of a pvfs file system.
//   pvfs-ls [-l] [--json] [PATH...]      (default PATH: /)
#include <algorithm>
#include <iostream>

#include <fmt/format.h>

#include "common.hpp"

using namespace pvfs;

namespace {

struct Item {
    std::string name;
    Attr attr;
};

void print(const std::vector<Item> &items, bool long_format)
{
    for (const Item &i : items) {
        if (!long_format) {
            fmt::print("{}\n", i.name);
            continue;
        }
        fmt::print("{} {:>3} {:>6} {:>6} {:>12} {} {}\n", tools::mode_string(i.attr), i.attr.nlink,
                   i.attr.uid, i.attr.gid, i.attr.size,
                   tools::time_string(i.attr.mtime).substr(0, 19), i.name);
    }
}

} // namespace

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-ls: list directory contents in a pvfs file system"};
    tools::Target target;
    bool long_format = false;
    bool json = false;
    std::vector<std::string> paths;
    tools::add_target_options(app, target);
    app.flag("-l,--long", long_format, "mode, links, owner, size, mtime");
    app.flag("--json", json, "print entries with all attributes as JSON");
    app.option("paths", paths, "paths inside the file system (default: /)");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;
    if (paths.empty())
        paths.emplace_back("/");

    const auto client = tools::connect_or_exit("pvfs-ls", target);
    int status = 0;
    cli::Json out = cli::Json::object();
    for (const std::string &arg : paths) {
        const std::string path = tools::pvfs_path(arg);
        Attr a;
        if (const int rc = client->resolve(path, a); rc != 0) {
            tools::report("pvfs-ls", path, rc);
            status = tools::exit_failure;
            continue;
        }
        std::vector<Item> items;
        if (a.type != ObjectType::directory) {
            items.push_back({path, a});
        } else {
            std::uint64_t cookie = 0;
            bool eof = false;
            while (!eof) {
                std::vector<client::DirEntry> page;
                if (const int rc = client->readdir(a.handle, cookie, 0, page, eof); rc != 0) {
                    tools::report("pvfs-ls", path, rc);
                    status = tools::exit_failure;
                    break;
                }
                for (client::DirEntry &e : page) {
                    cookie = e.cookie;
                    Item it{std::move(e.name), {}};
                    it.attr.handle = e.handle;
                    it.attr.type = e.type;
                    if (long_format || json) {
                        if (const int rc = client->getattr(e.handle, it.attr); rc != 0) {
                            // Removed meanwhile: not an error of this listing.
                            if (rc == -ENOENT)
                                continue;
                            tools::report("pvfs-ls", path + "/" + it.name, rc);
                            status = tools::exit_failure;
                            continue;
                        }
                    }
                    items.push_back(std::move(it));
                }
            }
        }
        std::sort(items.begin(), items.end(),
                  [](const Item &x, const Item &y) { return x.name < y.name; });
        if (json) {
            cli::Json list = cli::Json::array();
            for (const Item &i : items) {
                cli::Json j = tools::attr_json(i.attr);
                j.set("name", i.name);
                list.push(j);
            }
            out.set(path, list);
            continue;
        }
        if (paths.size() > 1)
            fmt::print("{}:\n", path);
        print(items, long_format);
    }
    if (json)
        std::cout << out.dump(2) << "\n";
    return status;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-ls", [&] { return run(argc, argv); });
}
