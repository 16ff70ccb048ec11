// The client keys file ([filesystem] client_keys, docs/security.md "Client
// keys"): the servers' table of per-client keys and what each may do.  One
// line per client, `#` starts a comment:
//
//     # name    key (64 hex digits)                          options
//     node17    3f1c...e0                                    uids=1000-1999
//     admin     9a02...4b                                    no_root_squash
//     node03    77d1...2c                                    revoked
//     node21    c40b...91                                    encrypt
//
// `encrypt`: that client's connections must be encrypted (its
// ClientKey::key has encrypt() set; docs/security.md "Encryption").
// The parser is strict: one bad line refuses the whole file, with
// "FILE:LINE: why", so a server keeps the table it had (reload) or does
// not start.  pvfs-key edits the file; admins may too.
#ifndef PVFS_CLIENT_KEYS_HPP
#define PVFS_CLIENT_KEYS_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pvfs/config.hpp"
#include "pvfs/proto.hpp"

namespace pvfs::config {

inline constexpr std::size_t max_client_keys = 65536;
// Far above 65536 lines of a name, a key and every option, with comments.
inline constexpr std::size_t max_client_keys_bytes = std::size_t{32} << 20U;
inline constexpr std::size_t max_client_line_bytes = 1024;
// The name the cluster key goes by in logs; no client may take it.
inline constexpr std::string_view cluster_key_name = "cluster";

// An inclusive range of uids, or of gids (`gids=`).
struct UidRange {
    std::uint32_t low = 0;
    std::uint32_t high = 0; // inclusive
    [[nodiscard]] bool contains(std::uint32_t uid) const noexcept
    {
        return uid >= low && uid <= high;
    }
};

struct ClientKey {
    proto::Key key; // named: key.name(), key.id()
    bool no_root_squash = false;
    std::optional<UidRange> uids; // none: any uid
    bool revoked = false;
    std::size_t line = 0;         // in the file, from 1
    std::optional<UidRange> gids; // none: any gid and groups
};

struct ClientKeys {
    std::vector<ClientKey> clients; // in file order
    std::string error;              // "FILE:LINE: why"; clients is empty then
    [[nodiscard]] bool ok() const noexcept { return error.empty(); }
};

// Parses the text of a client keys file; `origin` names it in errors.
[[nodiscard]] ClientKeys parse_client_keys(std::string_view text, std::string_view origin);
// Reads (proto::read_private_file: mode 0600, owner root or the euid) and
// parses the file; its contents are wiped from memory after.
[[nodiscard]] ClientKeys load_client_keys(const std::string &path);

// The line pvfs-key appends for a new client (no newline).
[[nodiscard]] std::string client_key_line(std::string_view name, std::string_view key_hex,
                                          bool no_root_squash, const std::optional<UidRange> &uids,
                                          const std::optional<UidRange> &gids = std::nullopt,
                                          bool encrypt = false);
// "LO-HI" as in `uids=LO-HI`, `gids=LO-HI` and `pvfs-key --uids`; nullopt
// when it is not two decimal ids with LO <= HI.
[[nodiscard]] std::optional<UidRange> parse_uid_range(std::string_view text);

// Creates a client key file at `path` (O_EXCL, mode 0600 from birth):
// "NAME HEX\n" with a fresh random key, which proto::Key::load reads as
// client key NAME; "NAME HEX encrypt\n" with `encrypt`, so that the client
// asks for the encryption its line in the table requires.  The key's hex
// digits go to `key_hex` (the caller wipes them when done).
[[nodiscard]] Status generate_client_key_file(const std::string &path, std::string_view name,
                                              std::string &key_hex, bool encrypt = false);
// Replaces the file at `path` with `text` atomically: a temporary file of
// mode 0600 in the same directory, fsynced, renamed over it, the directory
// fsynced.  A reader sees the old text or the new, whole.
[[nodiscard]] Status replace_private_file(const std::string &path, std::string_view text);

} // namespace pvfs::config

#endif // PVFS_CLIENT_KEYS_HPP
