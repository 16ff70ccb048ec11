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

private:
    struct State;
    std::unique_ptr<State> s_;
};

} // namespace pvfs::test

#endif // PVFS_TESTS_UNIT_IB_RAW_PEER_HPP
