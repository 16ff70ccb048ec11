// pvfs-meta-dump: online snapshots of a metadata server's store, their
// check, and their restore (docs/metadata.md "Snapshots").
//
//   pvfs-meta-dump /backup/meta0-2026-12-04.snap        (the server running)
//   pvfs-meta-dump --verify /backup/meta0-2026-12-04.snap
//   pvfs-meta-dump --restore /backup/meta0-2026-12-04.snap   (the server stopped)
//
// It runs on the metadata server's node, as the user the server runs as:
// it reads the store's files beside the running server (LMDB's lock file
// makes it one more reader), never through the network.  The store is the
// one -s SERVER's storage holds (<storage>/meta; the config's only metadata
// server when there is one), or --store DIR.  Exit status: 0 done, 1
// failure, 2 bad arguments.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <sodium.h>

#include "meta_snapshot.hpp"
#include "pvfs/cli.hpp"
#include "pvfs/config.hpp"

namespace config = pvfs::config;
namespace meta = pvfs::meta;

namespace {

constexpr int exit_failure = 1;

// An error that ends the program with its own exit status.
class Exit : public std::runtime_error {
public:
    Exit(int status, const std::string &message) : std::runtime_error(message), status_(status) {}
    [[nodiscard]] int status() const noexcept { return status_; }

private:
    int status_;
};

// The store directory (--store, else the named or only metadata server's)
// and, when a config named it, that server's metadata index.
struct Target {
    std::string dir;
    std::optional<std::uint64_t> server_index;
};

Target find_target(const std::string &store, std::string config_path, const std::string &server)
{
    if (!store.empty())
        return Target{store, std::nullopt};
    if (config_path.empty()) {
        const char *env = std::getenv("PVFS_CONFIG"); // NOLINT(concurrency-mt-unsafe)
        config_path = env != nullptr ? env : "";
    }
    if (config_path.empty())
        throw Exit{pvfs::cli::exit_usage,
                   "no store named: give --store DIR, or -c CONFIG (or $PVFS_CONFIG) with -s "
                   "SERVER"};
    const config::Result loaded = config::load_file(config_path);
    if (!loaded.ok())
        throw Exit{exit_failure, loaded.error};
    const std::vector<std::size_t> metas = loaded.cluster.metadata_servers();
    std::vector<std::size_t> candidates; // positions in metas
    for (std::size_t i = 0; i < metas.size(); ++i) {
        if (server.empty() || loaded.cluster.servers.at(metas[i]).name == server)
            candidates.push_back(i);
    }
    if (!server.empty() && candidates.empty())
        throw Exit{exit_failure,
                   fmt::format("{} has no metadata server named '{}'", config_path, server)};
    if (candidates.empty())
        throw Exit{exit_failure, fmt::format("{} has no metadata server", config_path)};
    if (candidates.size() > 1) {
        std::string names;
        for (const std::size_t i : candidates)
            names += (names.empty() ? "" : ", ") + loaded.cluster.servers.at(metas[i]).name;
        throw Exit{pvfs::cli::exit_usage,
                   fmt::format("{} has {} metadata servers ({}): name one with -s SERVER",
                               config_path, candidates.size(), names)};
    }
    const config::Server &chosen = loaded.cluster.servers.at(metas[candidates.front()]);
    return Target{(std::filesystem::path(chosen.storage) / "meta").string(), candidates.front()};
}

void report(const char *done, const std::string &file, const meta::SnapshotInfo &info, bool json)
{
    if (json) {
        pvfs::cli::Json out = pvfs::cli::Json::object({{"file", file},
                                                       {"bytes", info.bytes},
                                                       {"server_index", info.server_index},
                                                       {"inodes", info.inodes},
                                                       {"entries", info.entries},
                                                       {"next_id", info.next_id}});
        fmt::print("{}\n", out.dump());
        return;
    }
    fmt::print("{} {}: metadata server {}'s store, {} inodes, {} directory entries, {} bytes\n",
               done, file, info.server_index, info.inodes, info.entries, info.bytes);
}

int run(int argc, char **argv)
{
    pvfs::cli::Parser app{
        "pvfs-meta-dump: writes an online snapshot of a pvfs metadata server's store to FILE "
        "(compacted, hashed, mode 0600), checks one, or restores one.\n"
        "  pvfs-meta-dump [-c CONFIG] [-s SERVER | --store DIR] FILE\n"
        "  pvfs-meta-dump --verify FILE\n"
        "  pvfs-meta-dump --restore [-c CONFIG] [-s SERVER | --store DIR] [--skip-ids N] FILE\n"
        "Run it on the metadata server's node.  A snapshot is taken while the server runs; a "
        "restore needs the server stopped and its old store moved away."};
    std::string file;
    std::string config_path;
    std::string server;
    std::string store;
    bool verify = false;
    bool restore = false;
    bool json = false;
    std::uint64_t skip_ids = meta::default_restore_skip_ids;
    app.option("file", file, "the snapshot file (a new file when taking one)").required();
    app.option("-c,--config", config_path,
               "the cluster config naming the metadata server's storage (default: $PVFS_CONFIG)");
    app.option("-s,--server", server,
               "the metadata server whose store to use (default: the config's only one)");
    app.option("--store", store,
               "the store directory itself (a metadata server's <storage>/meta), instead of the "
               "config's");
    app.flag("--verify", verify,
             "check FILE: its hash, its format, every inode and directory entry; no store used");
    app.flag("--restore", restore,
             "make the store FILE's copy (the server stopped, no store in its place)");
    app.option("--skip-ids", skip_ids,
               fmt::format("with --restore: ids the restored store skips, so that no new file "
                           "takes the id of a file made after the snapshot (default {})",
                           meta::default_restore_skip_ids));
    app.flag("--json", json, "print the result as one JSON object");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;
    if (verify && restore)
        throw Exit{pvfs::cli::exit_usage, "--verify and --restore exclude each other"};
    if (verify && (!store.empty() || !server.empty() || !config_path.empty()))
        throw Exit{pvfs::cli::exit_usage, "--verify reads FILE only: no -c, -s or --store"};
    if (!store.empty() && !server.empty())
        throw Exit{pvfs::cli::exit_usage, "--store and -s exclude each other"};

    meta::SnapshotInfo info;
    std::string error;
    if (verify) {
        if (meta::verify_snapshot(file, info, error) != 0)
            throw Exit{exit_failure, error};
        report("verified", file, info, json);
        return 0;
    }
    const Target target = find_target(store, config_path, server);
    const std::string &dir = target.dir;
    if (restore) {
        // A store opens only under the index it was made for: refuse here,
        // before writing, what the server would refuse at start.
        if (meta::verify_snapshot(file, info, error) != 0)
            throw Exit{exit_failure, error};
        if (target.server_index && *target.server_index != info.server_index)
            throw Exit{exit_failure,
                       fmt::format("{} is metadata server {}'s snapshot; {} is server {}'s store",
                                   file, info.server_index, dir, *target.server_index)};
        if (meta::restore_snapshot(file, dir, skip_ids, info, error) != 0)
            throw Exit{exit_failure, error};
        report("restored", file, info, json);
        if (!json)
            fmt::print("the store in {} now holds it: start the metadata server, then run "
                       "pvfs-fsck (files made after the snapshot are orphans now)\n",
                       dir);
        return 0;
    }
    if (meta::snapshot(dir, file, info, error) != 0)
        throw Exit{exit_failure, error};
    report("wrote", file, info, json);
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    try {
        if (sodium_init() < 0)
            throw Exit{exit_failure, "libsodium cannot initialise"};
        return run(argc, argv);
    } catch (const Exit &e) {
        fmt::print(stderr, "pvfs-meta-dump: {}\n", e.what());
        if (e.status() == pvfs::cli::exit_usage)
            fmt::print(stderr, "Run with --help for more information.\n");
        return e.status();
    } catch (const std::exception &e) {
        fmt::print(stderr, "pvfs-meta-dump: {}\n", e.what());
        return exit_failure;
    }
}
