// The cluster config: one TOML file that describes a pvfs cluster to its
// servers and its clients alike (docs/config.md is the admin's reference).
//
// Servers load it at start (load_file).  A client knows only
// "tcp://host:port/fsname" (parse_fs_url) and the key file; it asks that
// server for the config text (get_config, which sends to_toml()) and parses
// it with parse().  hash() lets pvfs-ping tell whether every server runs
// the same config.
//
// Every error names the file, the line and the key:
//
//     cluster.toml:12: server[2].addresses[0]: port 99999 out of range 1..65535
//
// Unknown keys are errors, so a typo never passes silently.  Nothing here
// throws: failures come back as messages.
//
// Server indices.  A server's metadata index is its position among the
// servers with the metadata role, in file order; its data index, its
// position among those with the data role.  Handles carry the metadata
// index (types.hpp); layouts count in data indices.  The first metadata
// server owns the root directory.
#ifndef PVFS_CONFIG_HPP
#define PVFS_CONFIG_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pvfs/types.hpp"

namespace pvfs::config {

// ---- limits ------------------------------------------------------------

// Checked before the text reaches the TOML parser, whose recursion and
// per-value cost would otherwise let a hostile config exhaust the stack
// or the CPU.
inline constexpr std::size_t max_config_bytes = std::size_t{1} << 20U;
inline constexpr std::size_t max_line_bytes = 4096;
// Tables, arrays and inline tables inside one another, each part of a
// dotted key counting as one table.
inline constexpr unsigned max_nesting = 16;

// Handles have 16 bits for the metadata server (types.hpp).
inline constexpr std::size_t max_metadata_servers = 65535;
// File-system and server names: [A-Za-z0-9_.-]{1,64}.
inline constexpr std::size_t max_name_bytes = 64;

inline constexpr std::uint32_t stripe_alignment = 4096;
inline constexpr std::uint32_t min_bulk_chunk = 64U * 1024U;
inline constexpr std::uint32_t max_bulk_chunk = 64U * 1024U * 1024U;
inline constexpr std::uint32_t min_timeout_ms = 10;
inline constexpr std::uint32_t max_timeout_ms = 24U * 60U * 60U * 1000U;
// The BMI deadlines (hello_timeout, frame_timeout): BMI takes at most 1 h.
inline constexpr std::uint32_t min_bmi_deadline_ms = 100;
inline constexpr std::uint32_t max_bmi_deadline_ms = 60U * 60U * 1000U;
// A server's metrics file is rewritten this often; at least every
// min_metrics_interval_ms, so that a typo cannot make it a busy loop.
inline constexpr std::uint32_t default_metrics_interval_ms = 10'000;
inline constexpr std::uint32_t min_metrics_interval_ms = 100;

// ---- the cluster -------------------------------------------------------

struct Server {
    std::string name;                   // unique in the cluster
    std::vector<std::string> addresses; // canonical URLs, at most one per scheme
    bool metadata = false;
    bool data = false;
    std::string storage; // absolute, lexically normal
    // Where the server writes its metrics (docs/metrics.md), every
    // metrics_interval_ms; empty: no metrics.  Absolute, lexically normal.
    std::string metrics_file{};
    std::uint32_t metrics_interval_ms = default_metrics_interval_ms;
    friend bool operator==(const Server &, const Server &) = default;
};

struct Defaults {
    // stripe_count is resolved: "0 = every data server" in the file becomes
    // the number of data servers here, so every layout has stripe_count >= 1.
    Layout default_layout{default_stripe_size, 0, 0};
    std::uint32_t bulk_chunk = 1U << 20U; // bytes per server-directed transfer step
    std::uint32_t request_timeout_ms = 60'000;
    std::uint32_t idle_timeout_ms = 30'000; // BMI idle timeout
    bool root_squash = false;
    // Servers refuse requests that do not name them (docs/protocol.md
    // "Destination binding"); false lets clients that do not yet send a
    // destination in.
    bool require_bound = true;
    bool durable_metadata = true; // metadata commits are fsynced
    // Benchmarks only (docs/security.md "Chunk MACs"): data servers accept
    // bulk data without chunk MACs from clients that ask for none
    // (client::Options::chunk_macs), so that bench/fs can measure what the
    // MACs cost; libpvfs heeds client::Options::capabilities = false (none
    // asked for or sent; docs/security.md "Capabilities") only under it.
    // Refused unless every server address is on loopback.
    bool insecure_benchmark_only = false;
    // The metadata server's commit waits briefly for the changes of
    // clients that are writing (docs/metadata.md "Group commit").
    bool group_commit = true;
    // Data servers start the disk on each write's range as soon as it is
    // written (docs/storage.md "Early writeback"); never on tmpfs.
    bool early_writeback = true;
    // Exactly-once sessions (docs/protocol.md "Exactly once"): a client's
    // session and its cached replies go after this long without a change
    // from it, or, beyond max_sessions sessions, the longest silent first.
    std::uint32_t session_ttl_ms = 86'400'000;
    std::uint32_t max_sessions = 65536;
    // Open references (docs/metadata.md "Orphans and open references"): a
    // client's holds on open files go after this long without a request
    // from it; after a restart the metadata server waits lease + 10 s for
    // holders to re-open before it reclaims unlinked files.
    std::uint32_t lease_ms = 90'000;
    // The data objects of unlinked files are removed by the clients that
    // close them; a record of objects still to remove that no client has
    // finished for this long (a holder died, or nobody closed anything
    // after a restart's grace) is finished by its metadata server itself.
    // 0: the lease.  Never shorter than the lease: a record handed to a
    // client is handed again only a lease later.
    std::uint32_t reclaim_after_ms = 0;
    // Capabilities (docs/protocol.md "Capabilities"): how long one the
    // metadata server signs is valid (a chmod reaches clients that hold
    // one within this long), and whether data servers refuse data I/O
    // without one (false: they check those that come, for a cluster whose
    // clients are not all upgraded yet).
    std::uint32_t capability_ttl_ms = 300'000;
    // How long after its expiry a data server still takes a capability:
    // how far its clock may be behind the metadata server's that signed it.
    std::uint32_t capability_skew_ms = 120'000;
    bool require_capabilities = true;
    // Accepted connections a server keeps open, in all and per source
    // address (docs/bmi.md "Limits"); more are reset at accept.
    std::uint32_t max_connections = 4096;
    std::uint32_t max_connections_per_address = 64;
    // What connections that proved nothing may take (docs/bmi.md
    // "Limits"): the hello and frame deadlines, the slowest average rate
    // of a frame (bytes a second), the unexpected and early messages
    // buffered for all peers together, and the bytes queued to send on one
    // connection before reading from it stops.
    std::uint32_t hello_timeout_ms = 10'000;
    std::uint32_t frame_timeout_ms = 30'000;
    std::uint64_t frame_min_rate = 4096;
    std::uint64_t unexpected_total_bytes = std::uint64_t{256} << 20U;
    std::uint64_t early_total_bytes = std::uint64_t{64} << 20U;
    std::uint64_t send_queue_bytes = std::uint64_t{4} << 20U;
    friend bool operator==(const Defaults &, const Defaults &) = default;
};

struct Cluster {
    std::string fs_name;
    std::uint32_t fs_id = 0;
    std::string key_file; // absolute, lexically normal
    // The servers' table of client keys (client_keys.hpp, docs/security.md
    // "Client keys"); empty: none, the cluster key is every client's.
    std::string client_keys; // absolute, lexically normal, or empty
    // Every connection encrypted (docs/security.md "Encryption"): clients
    // ask for it, servers refuse clients that do not.  TCP only: refused
    // with an ib:// address.
    bool encrypt = false;
    Defaults defaults;
    std::vector<Server> servers; // in file order

    // Indices into `servers` of the servers with that role, in file order:
    // metadata_servers()[i] is the server with metadata index i.
    [[nodiscard]] std::vector<std::size_t> metadata_servers() const;
    [[nodiscard]] std::vector<std::size_t> data_servers() const;
    // The server with that name, or nullptr.
    [[nodiscard]] const Server *find(std::string_view name) const;
    // The index into `servers` of the server listening on `url` (compared
    // after canonicalising it, so "tcp://h:03334" finds "tcp://h:3334").
    [[nodiscard]] std::optional<std::size_t> index_of_address(std::string_view url) const;

    friend bool operator==(const Cluster &, const Cluster &) = default;
};

// The outcome of loading or parsing: `cluster` is meaningful only when ok().
struct Result {
    Cluster cluster;
    std::string error;
    [[nodiscard]] bool ok() const noexcept { return error.empty(); }
};

struct Status {
    std::string error;
    [[nodiscard]] bool ok() const noexcept { return error.empty(); }
};

// ---- reading and writing -----------------------------------------------

// Reads and parses the file at `path`; relative paths inside it are
// resolved against its directory.  Errors name `path` as given.
[[nodiscard]] Result load_file(const std::string &path);

// Parses config text.  `origin` names it in errors (a file name, or e.g.
// "tcp://host:3334 get_config").  Relative paths in the text are resolved
// against `base_dir`; when `base_dir` is empty they are an error (the
// canonical text has only absolute paths).
[[nodiscard]] Result parse(std::string_view text, std::string_view origin,
                           std::string_view base_dir);

// The canonical text of a cluster: parse(to_toml(c), any, any) gives back c
// exactly, for any c that parse() produced.  Sizes and durations use the
// largest exact unit; a stripe count equal to the number of data servers is
// written as 0 ("every data server").
[[nodiscard]] std::string to_toml(const Cluster &cluster);

// SHA-256 of to_toml(cluster).
[[nodiscard]] std::array<std::byte, 32> hash(const Cluster &cluster);

// ---- units ---------------------------------------------------------------

// A number parsed from "<digits>[ ]<unit>"; `value` is meaningful only
// when ok().
struct Quantity {
    std::uint64_t value = 0;
    std::string error;
    [[nodiscard]] bool ok() const noexcept { return error.empty(); }
};

// "64KiB", "1 MiB", "2GiB" in bytes.  The unit is required: in the config
// a plain byte count is a TOML integer, so a string without a unit is a
// forgotten unit, not bytes.
[[nodiscard]] Quantity parse_size(std::string_view text);

// "500ms", "30s", "2min" in milliseconds.  The unit is required.
[[nodiscard]] Quantity parse_duration_ms(std::string_view text);

// The command line's --metrics-file of a server or daemon: made absolute
// against the working directory and lexically normal, no control
// characters, not a directory (`example`: a file name for the message).
// False with `error` naming the option when it is bad.
[[nodiscard]] bool metrics_file_option(const std::string &text, std::string_view example,
                                       std::string &path, std::string &error);
// --metrics-interval ("30s", "500ms"): min_metrics_interval_ms ..
// max_timeout_ms.
[[nodiscard]] bool metrics_interval_option(const std::string &text, std::uint32_t &ms,
                                           std::string &error);

// ---- addresses ---------------------------------------------------------

// A server address: "tcp://host:port" or "ib://host:port"; host is a name,
// an IPv4 address or a bracketed IPv6 address ("[::1]"); port 1..65535.
struct Address {
    std::string scheme; // "tcp" or "ib"
    std::string host;   // brackets kept for IPv6
    std::uint16_t port = 0;
    std::string url; // canonical: scheme://host:port, port without leading zeros
    std::string error;
    [[nodiscard]] bool ok() const noexcept { return error.empty(); }
};
[[nodiscard]] Address parse_address(std::string_view url);

// What a client mounts: "tcp://host:port/fsname".
struct FsUrl {
    std::string address; // canonical server URL, "tcp://host:port"
    std::string fs_name;
    std::string error;
    [[nodiscard]] bool ok() const noexcept { return error.empty(); }
};
[[nodiscard]] FsUrl parse_fs_url(std::string_view url);

// [A-Za-z0-9_.-]{1,64}: file-system and server names.
[[nodiscard]] bool valid_config_name(std::string_view name) noexcept;

// ---- key files ---------------------------------------------------------

// Writes a fresh cluster key: 32 random bytes as 64 lower-case hex digits
// and a newline, in a file of mode 0600 that is never readable by others,
// not even while it is written.  An existing file is an error unless
// `overwrite`, in which case it is replaced atomically.  (Reading keys is
// lib/proto's business.)
[[nodiscard]] Status generate_key_file(const std::string &path, bool overwrite = false);

} // namespace pvfs::config

#endif // PVFS_CONFIG_HPP
