// Helpers for tests that run real pvfs-server processes on loopback: a
// cluster config with fresh ports and key in the test's work directory, the
// server processes (stopped and reaped whatever the test does), a cluster
// of them with libpvfs clients, and a raw protocol client (BMI + lib/proto,
// no client library) that can also send what a correct client never would.
#ifndef PVFS_TESTS_SERVER_HARNESS_HPP
#define PVFS_TESTS_SERVER_HARNESS_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <sys/types.h>

#include "bmi/bmi.hpp"
#include "pvfs/client.hpp"
#include "pvfs/config.hpp"
#include "pvfs/proto.hpp"

namespace pvfs::test {

// Fails the test case with `why` as its reason.  Kyua takes a one-line
// reason and a tool's output has many: newlines become spaces.
void require(bool ok, std::string why);
// Fails unless a client call returned `want` (0, a byte count or -errno).
void require_rc(std::int64_t rc, std::int64_t want, const std::string &what);

// A loopback TCP port that was free a moment ago.
std::uint16_t free_port();

struct ServerSpec {
    std::string name;
    bool metadata = false;
    bool data = false;
    std::string toml{}; // lines added to its [[server]] table
};

// A config file and key under `dir`, one server per spec, each on its own
// port of 127.0.0.1 with storage in dir/<name>.  `extra_defaults` is TOML
// put into [defaults].
// Lines the next write_cluster puts in the [filesystem] table
// ("encrypt = true\n"); empty by default.
inline std::string filesystem_extra; // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

struct ClusterFiles {
    std::filesystem::path dir;
    std::string config_path;
    std::string key_path;
    config::Cluster cluster;
};
ClusterFiles write_cluster(const std::filesystem::path &dir, const std::vector<ServerSpec> &specs,
                           const std::string &extra_defaults = "");
// The same with each server's address given ("tcp://198.18.1.2:3334"),
// addresses[i] for specs[i], for servers that are not on loopback.
ClusterFiles write_cluster(const std::filesystem::path &dir, const std::vector<ServerSpec> &specs,
                           const std::vector<std::string> &addresses,
                           const std::string &extra_defaults);

// A running pvfs-server; SIGTERM then SIGKILL and reaped when destroyed.
// It is also killed when the thread that started it ends (PR_SET_PDEATHSIG
// follows the forking thread, not the process): start servers from a
// thread that outlives them.
class ServerProcess {
public:
    ServerProcess(const std::string &binary, const ClusterFiles &files, const std::string &name);
    // Run through `wrapper`, a command that execs the rest of its arguments
    // (e.g. {"ip", "netns", "exec", "ns1"}), so pid() is still the server's.
    ServerProcess(const std::string &binary, const ClusterFiles &files, const std::string &name,
                  const std::vector<std::string> &wrapper);
    ~ServerProcess();
    ServerProcess(const ServerProcess &) = delete;
    ServerProcess &operator=(const ServerProcess &) = delete;
    ServerProcess(ServerProcess &&) = delete;
    ServerProcess &operator=(ServerProcess &&) = delete;

    // Stops it with `signal` and waits (at most 20 s); its exit status, or
    // 128 + signal number when a signal ended it.
    int stop(int signal);
    [[nodiscard]] pid_t pid() const noexcept { return pid_; }
    [[nodiscard]] const std::string &log_path() const noexcept { return log_; }
    [[nodiscard]] std::string log_text() const;

private:
    pid_t pid_ = -1;
    std::string log_;
};

// `metadata` metadata servers meta0, meta1, ... then `data` data servers
// data0, data1, ...
std::vector<ServerSpec> servers(unsigned metadata, unsigned data);

// Client options with attr_timeout 0: every call sees the servers' current
// attributes and names, none cached.
client::Options fresh_attrs();

// A config under ./cluster and every server of it running (this build's
// pvfs-server), each stopped when the Cluster goes.  `client` is what
// connect() starts from (caches, timeouts, loop).
class Cluster {
public:
    Cluster(std::vector<ServerSpec> specs, const std::string &extra_defaults,
            client::Options client = {});
    // Servers off loopback: addresses[i] for specs[i] (write_cluster), each
    // run through wrappers[i] (ServerProcess).
    Cluster(std::vector<ServerSpec> specs, const std::vector<std::string> &addresses,
            const std::string &extra_defaults, std::vector<std::vector<std::string>> wrappers,
            client::Options client = {});

    // (Re)starts one server: its old process, if any, is stopped first.
    void start(const std::string &name);
    // Starts every server of the config, in its order.
    void start_all();
    // A client with the cluster's options, acting as uid:gid whatever this
    // process is.
    [[nodiscard]] std::unique_ptr<client::Client> connect(std::uint32_t uid = 0,
                                                          std::uint32_t gid = 0) const;
    // A client with options `o` but this cluster as its target, acting as
    // o.credentials.
    [[nodiscard]] std::unique_ptr<client::Client> connect(client::Options o) const;

    ClusterFiles files;
    std::map<std::string, std::unique_ptr<ServerProcess>> servers;

private:
    std::vector<ServerSpec> specs_;
    std::vector<std::vector<std::string>> wrappers_; // empty, or one per spec
    client::Options client_;
};

// Sets an environment variable for the servers started while it lives
// (e.g. PVFS_TEST_FAULTS), and removes it after.  Tests set it before they
// start threads of their own.
class ScopedEnv {
public:
    ScopedEnv(const char *name, const std::string &value);
    ~ScopedEnv();
    ScopedEnv(const ScopedEnv &) = delete;
    ScopedEnv &operator=(const ScopedEnv &) = delete;
    ScopedEnv(ScopedEnv &&) = delete;
    ScopedEnv &operator=(ScopedEnv &&) = delete;

private:
    const char *name_;
};

// Bytes with a recognisable pattern.
std::vector<std::byte> pattern(std::size_t n, unsigned seed);

// One request and its outcome.
struct Call {
    bool answered = false; // false: no response before the deadline
    proto::Response response;
    std::string error;       // transport or decoding trouble, for messages
    int transport_error = 0; // the negative errno of a failed post or response
};

// Speaks the protocol to one server directly.
class RawClient {
public:
    // Requests to `server_url`, not bound to a server (`to` unset).
    // `encrypt`: its connection asks for encryption (docs/security.md
    // "Encryption").
    RawClient(const std::string &server_url, const std::string &key_path, bool encrypt = false);
    // Requests to the server `name` of `files`, bound to it as libpvfs's
    // are (docs/protocol.md "Destination binding").
    RawClient(const ClusterFiles &files, const std::string &name);

    // Sends `body` and waits up to `timeout_ms` for the response.  For a
    // write without inline data, `send_data` is sent in chunks of
    // `chunk` bytes on the data tag; for a read, `receive_data` is filled
    // likewise.
    Call call(proto::RequestBody body, int timeout_ms = 20000,
              std::span<const std::byte> send_data = {}, std::span<std::byte> receive_data = {},
              std::uint32_t chunk = 0);

    // The encoded bytes of a request as call() would send it (a fresh seq).
    std::vector<std::byte> encode(proto::RequestBody body);
    // Sends raw bytes as a request and waits up to timeout_ms for any
    // response on its tag; nullopt if none came.
    std::optional<std::vector<std::byte>> send_raw(std::span<const std::byte> bytes,
                                                   int timeout_ms);

    [[nodiscard]] const proto::Key &key() const noexcept { return key_; }
    // The replay guard's session of this client's requests, and a way to
    // send under another one (`next_seq` is the next request's seq).
    [[nodiscard]] std::uint64_t session() const noexcept { return session_; }
    void use_session(std::uint64_t session, std::uint64_t next_seq)
    {
        session_ = session;
        seq_ = next_seq - 1;
    }
    Credentials cred;                     // sent with every request
    proto::OnceIds once;                  // likewise (none by default)
    std::optional<proto::Destination> to; // likewise
    bool wants_capability = false;        // likewise (request_wants_capability)

    // Chunk MACs (docs/protocol.md "Chunk MACs"): call() gives a read or
    // write with bulk data (and chunk > 0) the MACs libpvfs would, under
    // the connection's session key (a status request first makes the
    // connection when there is none yet), and checks a read's against the
    // bytes that came (a mismatch is Call::error).  Tests that play an
    // attacker turn them off, or change what they cover:
    bool chunk_macs = true;
    // Whether, as libpvfs does for chunks that move as messages, each tag
    // travels after its chunk's bytes (proto::ChunkMacs::with_chunks) rather
    // than in the request (a write's) or the response (a read's).  With it,
    // tags_hook's list gives the tag sent after each chunk: a chunk past its
    // end goes without one.
    bool tags_with_chunks = true;
    // With tags_with_chunks: called with each write chunk message (its
    // bytes and its tag) as it is about to go, to cut or lengthen it.
    std::function<void(std::size_t, std::vector<std::byte> &)> chunk_message_hook;
    // Called with the binding the tags are computed under (another
    // request's ids, another handle: tags the server must refuse).
    std::function<void(proto::ChunkBinding &)> bind_hook;
    // Called with a copy of the write's stream after its tags are made:
    // the bytes that actually go (a byte flipped, chunks swapped).
    std::function<void(std::vector<std::byte> &)> data_hook;
    // Called with the tags before the request is encoded.
    std::function<void(std::vector<proto::ChunkMac> &)> tags_hook;

    // Capabilities (docs/protocol.md "Capabilities"): a data request gets
    // one for its handle and the rights its op needs, as a metadata server
    // would sign it, under the capability key of this client's key (right
    // when that is the cluster key, as the harness's usually is) for
    // cap_fs_id (the cluster's, when made from ClusterFiles).  Tests that
    // play an attacker turn them off or change them:
    bool capabilities = true;
    std::uint32_t cap_fs_id = 0;
    std::function<void(proto::Capability &)> cap_hook; // after signing

private:
    proto::Request make_request(proto::RequestBody body);
    // The session key of the connection to the server, connecting first
    // (a status request) when there is none.
    std::optional<proto::SessionKey> session_key();

    bmi::Bmi bmi_;
    bmi::ContextId ctx_;
    proto::Key key_;
    bmi::Addr server_ = bmi::no_addr;
    std::uint64_t session_;
    std::uint64_t seq_ = 0;
    std::uint64_t request_id_ = 0;
    bmi::Tag next_tag_ = 1;
    std::vector<std::byte> response_buffer_;
};

} // namespace pvfs::test

#endif // PVFS_TESTS_SERVER_HARNESS_HPP
