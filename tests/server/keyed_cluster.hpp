// A real cluster keyed per client (docs/security.md "Client keys"): keys
// made with pvfs-key into a client_keys file that the servers are then
// restarted with.  For tests of what each key may do, and of attacks by a
// key holder on another's data.
#ifndef PVFS_TESTS_SERVER_KEYED_CLUSTER_HPP
#define PVFS_TESTS_SERVER_KEYED_CLUSTER_HPP

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness.hpp"

namespace pvfs::test {

// Runs this build's pvfs-key with `args`; its exit status, its output
// (stdout and stderr) in `out`.
int pvfs_key(const std::vector<std::string> &args, std::string &out);
// pvfs-key with `args`, failing the test case unless it succeeds.
void key_ok(const std::vector<std::string> &args);

struct KeyedCluster : Cluster {
    std::string clients; // the client_keys file
    std::string dir;     // the config's directory, where key files go

    // `keys`: per client, its name and the pvfs-key add arguments after it.
    // `before_keys` runs while the servers still serve the cluster key only.
    // `extra`: more [defaults] lines.  `specs`: the servers.
    explicit KeyedCluster(const std::vector<std::vector<std::string>> &keys,
                          const std::function<void(Cluster &)> &before_keys = {},
                          const std::string &extra = "",
                          std::vector<ServerSpec> specs = ::pvfs::test::servers(1, 1));

    [[nodiscard]] std::string key_path(const std::string &name) const;

    // A client with `name`'s key, as uid:gid.
    [[nodiscard]] std::unique_ptr<client::Client> as(const std::string &name, std::uint32_t uid,
                                                     std::uint32_t gid) const;
    [[nodiscard]] std::unique_ptr<client::Client>
    connect_as(const std::string &name, std::uint32_t uid, std::uint32_t gid,
               std::vector<std::uint32_t> groups) const;

    // A raw client of the first server with `key_file` (get_config needs
    // no destination, so it probes the key alone).
    [[nodiscard]] RawClient raw(const std::string &key_file) const;
    // A raw client of the first server under `name`'s key, bound to it.
    [[nodiscard]] std::unique_ptr<RawClient> meta(const std::string &name) const;

    // The first server's log.
    [[nodiscard]] std::string log() const;
};

} // namespace pvfs::test

#endif // PVFS_TESTS_SERVER_KEYED_CLUSTER_HPP
