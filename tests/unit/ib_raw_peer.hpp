// A raw ib peer for tests: an rdma_cm connection to a BMI ib listener made
// by hand (its own queue pair, receive buffers and connect data), which
// posts whatever SENDs a test gives it.  Everything is non-blocking, so
// that the BMI server under test runs in the same thread between calls.
#ifndef PVFS_TESTS_UNIT_IB_RAW_PEER_HPP
#define PVFS_TESTS_UNIT_IB_RAW_PEER_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pvfs::test {

class IbRawPeer {
public:
    // `run` is called between looks at the connection's events (the
    // server's progress).  Connects to host:port; connected() says whether
    // that worked within the time.
    IbRawPeer(const std::string &host, std::uint16_t port, std::function<void()> run,
              std::chrono::milliseconds within = std::chrono::seconds(5));
    ~IbRawPeer();
    IbRawPeer(const IbRawPeer &) = delete;
    IbRawPeer &operator=(const IbRawPeer &) = delete;
    IbRawPeer(IbRawPeer &&) = delete;
    IbRawPeer &operator=(IbRawPeer &&) = delete;

    [[nodiscard]] bool connected() const noexcept;
    // Posts one SEND of `bytes` (at most the server's buffer size); false
    // if it could not be posted.
    bool send(std::span<const std::byte> bytes);
    // Runs until the server disconnects or the time runs out: whether it
    // did.  The messages it sent meanwhile are in received().
    bool wait_disconnected(std::chrono::milliseconds within);
    [[nodiscard]] const std::vector<std::vector<std::byte>> &received() const noexcept;
    // Runs until the server sent n messages in all, disconnected or the
    // time ran out: whether the n are in received().
    bool wait_received(std::size_t n, std::chrono::milliseconds within);
    // The connect data the server accepted with (its private data).
    [[nodiscard]] std::vector<std::byte> server_connect_data() const;
    // One RDMA READ (or WRITE) of `len` bytes (at most 4 KiB) at
    // addr/rkey of the server's memory, from or into this peer's own
    // buffer: the completion's status (IBV_WC_SUCCESS is 0), -1 when it
    // could not be posted or did not complete within the time.
    int rdma(bool write, std::uint64_t addr, std::uint32_t rkey, std::size_t len,
             std::chrono::milliseconds within);
    // The first bytes of that buffer: what a READ brought, what a WRITE sends.
    [[nodiscard]] std::span<std::byte> rdma_buffer() const noexcept;

private:
    struct State;
    std::unique_ptr<State> s_;
};

} // namespace pvfs::test

#endif // PVFS_TESTS_UNIT_IB_RAW_PEER_HPP
