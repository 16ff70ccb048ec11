// The keys a server accepts requests under (docs/security.md "Client
// keys"): the cluster key, and the clients of the [filesystem] client_keys
// file, each with its policy (root squash, allowed uids, revoked).  The
// event loop looks a request's key id up here, verifies the request with
// that key and MACs the response with it; the file is re-read on SIGHUP
// and when it is written or renamed into place (inotify on its
// directory), and a bad file leaves the table as it was.
#ifndef PVFS_SERVER_KEY_TABLE_HPP
#define PVFS_SERVER_KEY_TABLE_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "pvfs/client_keys.hpp"
#include "pvfs/proto.hpp"
#include "pvfs/types.hpp"
#include "pvfs/unique_fd.hpp"

namespace pvfs::server {

// One key and what a request under it may do.  Shared (shared_ptr) by the
// requests in progress, so a reload never pulls a key from under a
// response still to be MACed with it.
struct Client {
    proto::Key key; // its name() is empty for the cluster key
    bool root_squash = true;
    std::optional<config::UidRange> uids; // none: any uid
    bool revoked = false;
    // The cluster key once client_keys is set: it is the servers' own, and
    // a request under it (no server sends one) is refused.
    bool servers_only = false;
    std::optional<config::UidRange> gids; // none: any gid and groups

    // "node17", or "cluster" for the cluster key: for logs.
    [[nodiscard]] std::string_view name() const noexcept
    {
        return key.name().empty() ? config::cluster_key_name : std::string_view(key.name());
    }
    // The credentials the server acts on: a uid outside `uids` becomes
    // nobody (uid and gid 65534, no groups); a gid outside `gids` becomes
    // nogroup (65534) and groups outside it are dropped; then root is
    // squashed (perm::squash) unless the key says no_root_squash.
    [[nodiscard]] Credentials apply(Credentials cred) const;
};

class KeyTable {
public:
    // `client_keys`: the file's path, or empty (the cluster key is then
    // every client's, with the config's root_squash).
    KeyTable(proto::Key cluster_key, bool root_squash, std::string client_keys);

    // (Re)reads the client keys file.  On failure the table is unchanged
    // and `error` says why ("FILE:LINE: why").  `summary` describes the new
    // table for the log (counts, names newly revoked or added).
    bool load(std::string &error, std::string &summary);
    // The names of the keys that the loads since the last call revoked,
    // removed or replaced (their connections are to be dropped).
    [[nodiscard]] std::vector<std::string> take_shut_out();
    // Starts watching the file's directory; false and `error` set if
    // inotify refuses.
    bool watch(std::string &error);
    // Drains the watch's events: whether the file was written or renamed
    // into place since the last call.  Never blocks.
    [[nodiscard]] bool changed();

    [[nodiscard]] bool has_client_keys() const noexcept { return !path_.empty(); }
    [[nodiscard]] const std::string &path() const noexcept { return path_; }
    // The client of a key id; nullptr when no client has it.
    [[nodiscard]] std::shared_ptr<const Client> find(std::uint32_t id) const;
    [[nodiscard]] const std::shared_ptr<const Client> &cluster() const noexcept { return cluster_; }

private:
    std::shared_ptr<const Client> cluster_;
    std::string path_;
    std::string file_name_; // the last component of path_, as inotify names it
    std::unordered_map<std::uint32_t, std::shared_ptr<const Client>> clients_;
    UniqueFd inotify_;
    bool rewatch_ = false; // the directory's watch went (IN_IGNORED)
    std::vector<std::string> shut_out_;
};

} // namespace pvfs::server

#endif // PVFS_SERVER_KEY_TABLE_HPP
