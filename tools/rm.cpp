// pvfs-rm: removes files (and with -r directory trees) from a pvfs file system.
#include <fmt/format.h>

#include "common.hpp"

using namespace pvfs;

namespace {

// NOLINTNEXTLINE(misc-no-recursion): one level per directory of the tree
int remove_tree(client::Client &c, Handle dir, const std::string &path)
{
    // Each pass lists from the start: removals do not disturb the cookies
    // of what is left, but restarting keeps the walk simple and complete.
    for (;;) {
        std::vector<client::DirEntry> page;
        bool eof = false;
        if (const int rc = c.readdir(dir, 0, 0, page, eof); rc != 0)
            return rc;
        if (page.empty())
            return 0;
        for (const client::DirEntry &e : page) {
            int rc = 0;
            if (e.type == ObjectType::directory) {
                rc = remove_tree(c, e.handle, path + "/" + e.name);
                if (rc == 0)
                    rc = c.rmdir(dir, e.name);
            } else {
                rc = c.unlink(dir, e.name);
            }
            if (rc != 0 && rc != -ENOENT) {
                tools::report("pvfs-rm", path + "/" + e.name, rc);
                return rc;
            }
        }
    }
}

} // namespace

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-rm: remove files or directories from a pvfs file system"};
    tools::Target target;
    bool recursive = false;
    bool force = false;
    std::vector<std::string> paths;
    tools::add_target_options(app, target);
    app.flag("-r,-R,--recursive", recursive, "remove directories and their contents");
    app.flag("-f,--force", force, "ignore nonexistent files");
    app.option("paths", paths, "paths to remove").required();
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    const auto client = tools::connect_or_exit("pvfs-rm", target);
    int status = 0;
    for (const std::string &arg : paths) {
        const std::string path = tools::pvfs_path(arg);
        Attr parent;
        std::string name;
        int rc = tools::resolve_parent(*client, path, parent, name);
        Attr a;
        if (rc == 0)
            rc = client->lookup(parent.handle, name, a);
        if (rc == 0 && a.type == ObjectType::directory) {
            if (!recursive) {
                fmt::print(stderr, "pvfs-rm: {}: is a directory (use -r)\n", path);
                status = tools::exit_failure;
                continue;
            }
            rc = remove_tree(*client, a.handle, path);
            if (rc == 0)
                rc = client->rmdir(parent.handle, name);
        } else if (rc == 0) {
            rc = client->unlink(parent.handle, name);
        }
        if (rc == -ENOENT && force)
            continue;
        if (rc != 0) {
            tools::report("pvfs-rm", path, rc);
            status = tools::exit_failure;
        }
    }
    return status;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-rm", [&] { return run(argc, argv); });
}
