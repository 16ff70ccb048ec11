// pvfs-mkdir: makes directories in a pvfs file system; with --meta-server,
// remote directories (docs/metadata.md "Remote directories").
#include <fmt/format.h>

#include "common.hpp"

using namespace pvfs;

namespace {

// meta_server < 0: each directory on its parent's metadata server.  Else
// the named directory (not the parents -p makes) on that one.
// NOLINTNEXTLINE(misc-no-recursion): one level per missing parent, bounded by the path
int make(client::Client &c, const std::string &path, std::uint32_t mode, bool parents,
         int meta_server)
{
    Attr parent;
    std::string name;
    int rc = tools::resolve_parent(c, path, parent, name);
    if (rc == -ENOENT && parents) {
        const std::string p = tools::pvfs_path(path);
        const std::string up = p.substr(0, p.find_last_not_of('/') + 1);
        rc = make(c, up.substr(0, up.rfind('/')), mode | 0300U, true, -1);
        if (rc == 0)
            rc = tools::resolve_parent(c, path, parent, name);
    }
    if (rc != 0)
        return rc;
    Attr made;
    rc = meta_server < 0
             ? c.mkdir(parent.handle, name, mode, made)
             : c.mkdir(parent.handle, name, mode, made, static_cast<std::uint32_t>(meta_server));
    if (rc == -EEXIST && parents) {
        Attr existing;
        if (c.lookup(parent.handle, name, existing) == 0 && existing.type == ObjectType::directory)
            return 0;
    }
    return rc;
}

} // namespace

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-mkdir: make directories in a pvfs file system"};
    tools::Target target;
    bool parents = false;
    std::string mode_text = "755";
    std::vector<std::string> paths;
    tools::add_target_options(app, target);
    app.flag("-p,--parents", parents, "make parent directories as needed; no error if existing");
    app.option("-m,--mode", mode_text, "permission bits, octal (default 755)");
    int meta_server = -1;
    app.option("--meta-server", meta_server,
               "make each named directory on metadata server N (its index among the "
               "config's metadata servers; a remote directory: what is made inside it lives "
               "there too).  Only directories of server 0 may have remote children; -p "
               "parents stay on their parent's server")
        .non_negative();
    app.option("paths", paths, "directories to make").required();
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;
    std::uint32_t mode = 0;
    try {
        std::size_t used = 0;
        mode = static_cast<std::uint32_t>(std::stoul(mode_text, &used, 8));
        if (used != mode_text.size() || mode > 07777)
            throw std::invalid_argument("mode");
    } catch (const std::exception &) {
        fmt::print(stderr, "pvfs-mkdir: bad mode '{}' (octal, e.g. 755)\n", mode_text);
        return tools::exit_usage;
    }
    const auto client = tools::connect_or_exit("pvfs-mkdir", target);
    int status = 0;
    for (const std::string &p : paths) {
        if (const int rc = make(*client, p, mode, parents, meta_server); rc != 0) {
            tools::report("pvfs-mkdir", tools::pvfs_path(p), rc);
            status = tools::exit_failure;
        }
    }
    return status;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-mkdir", [&] { return run(argc, argv); });
}
