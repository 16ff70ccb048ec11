// pvfs-setstripe: sets how a file is striped (it must be empty; a missing
// file is created) or what new files in a directory get.
//   pvfs-setstripe -S 4MiB -n 2 -i 1 /dir/file
#include <fmt/format.h>

#include "common.hpp"
#include "pvfs/config.hpp"

using namespace pvfs;

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-setstripe: set the striping of a new or empty file, or a directory's "
                    "default for new files"};
    tools::Target target;
    std::string size_text;
    std::uint32_t count = 0;
    std::int64_t first = -1;
    std::string path_arg;
    tools::add_target_options(app, target);
    app.option("-S,--stripe-size", size_text, "bytes per stripe, e.g. 1MiB (default: keep)");
    app.option("-n,--stripe-count", count, "data servers to stripe over (0: keep)");
    app.option("-i,--first-server", first, "index of the first data server (default: keep)");
    app.option("path", path_arg, "file or directory").required();
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    const auto client = tools::connect_or_exit("pvfs-setstripe", target);
    const std::string path = tools::pvfs_path(path_arg);
    Attr parent;
    std::string name;
    Attr a;
    int rc =
        path == "/" ? client->resolve(path, a) : tools::resolve_parent(*client, path, parent, name);
    if (rc == 0 && path != "/")
        rc = client->lookup(parent.handle, name, a);
    const bool create = rc == -ENOENT && path != "/";
    Layout l = client->cluster().defaults.default_layout;
    if (rc == 0) {
        if (const int got = client->layout_get(a.handle, l); got != 0) {
            tools::report("pvfs-setstripe", path, got);
            return tools::exit_failure;
        }
    } else if (!create) {
        tools::report("pvfs-setstripe", path, rc);
        return tools::exit_failure;
    }
    if (!size_text.empty()) {
        const config::Quantity q = config::parse_size(size_text);
        if (!q.ok() || q.value > UINT32_MAX) {
            fmt::print(stderr, "pvfs-setstripe: stripe size '{}': {}\n", size_text,
                       q.ok() ? "too large" : q.error);
            return tools::exit_usage;
        }
        l.stripe_size = static_cast<std::uint32_t>(q.value);
    }
    if (count != 0)
        l.stripe_count = count;
    if (first >= 0)
        l.first_server = static_cast<std::uint32_t>(first);
    if (create) {
        Attr made;
        rc = client->create(parent.handle, name, 0644, true, l, made);
    } else {
        rc = client->layout_set(a.handle, l);
    }
    if (rc != 0) {
        if (rc == -EBUSY)
            fmt::print(stderr,
                       "pvfs-setstripe: {}: the file has data; its layout can change only "
                       "while it is empty\n",
                       path);
        else
            tools::report("pvfs-setstripe", path, rc);
        return tools::exit_failure;
    }
    return 0;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-setstripe", [&] { return run(argc, argv); });
}
