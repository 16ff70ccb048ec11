// Helpers for tests that run real pvfs-server processes on loopback: a
// cluster config with fresh ports and key in the test's work directory, the
// server processes (stopped and reaped whatever the test does), and a raw
// protocol client (BMI + lib/proto, no client library) that can also send
// what a correct client never would.
#ifndef PVFS_TESTS_SERVER_HARNESS_HPP
#define PVFS_TESTS_SERVER_HARNESS_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <sys/types.h>

#include "bmi/bmi.hpp"
#include "pvfs/config.hpp"
#include "pvfs/proto.hpp"

namespace pvfs::test {

// A loopback TCP port that was free a moment ago.
std::uint16_t free_port();

struct ServerSpec {
    std::string name;
    bool metadata = false;
    bool data = false;
};

// A config file and key under `dir`, one server per spec, each on its own
// port of 127.0.0.1 with storage in dir/<name>.  `extra_defaults` is TOML
// put into [defaults].
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

// Bytes with a recognisable pattern.
std::vector<std::byte> pattern(std::size_t n, unsigned seed);

// One request and its outcome.
struct Call {
    bool answered = false; // false: no response before the deadline
    proto::Response response;
    std::string error; // transport or decoding trouble, for messages
};

// Speaks the protocol to one server directly.
class RawClient {
public:
    RawClient(const std::string &server_url, const std::string &key_path);

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
    Credentials cred; // sent with every request

private:
    proto::Request make_request(proto::RequestBody body);

    bmi::Bmi bmi_;
    bmi::ContextId ctx_;
    bmi::Addr server_;
    proto::Key key_;
    std::uint64_t session_;
    std::uint64_t seq_ = 0;
    std::uint64_t request_id_ = 0;
    bmi::Tag next_tag_ = 1;
    std::vector<std::byte> response_buffer_;
};

} // namespace pvfs::test

#endif // PVFS_TESTS_SERVER_HARNESS_HPP
