// Progress engines of the TCP method: they report which sockets are ready.
// Two implementations: epoll, and io_uring (multishot poll requests whose
// changes are batched into the wait's own submission).  The method reads
// and writes until EAGAIN, or a read shorter than asked, before it waits,
// so it is correct whether an engine reports readiness by level (epoll) or
// by edge (io_uring): data that comes later is a new wake-up.  The end of
// a stream is not: an edge-triggered engine reports the peer's FIN
// (EPOLLRDHUP), a reset or an error (EPOLLHUP, EPOLLERR) once, so after
// that the method reads on until recv returns 0 or the error.
#ifndef PVFS_LIBNET_TCP_ENGINE_HPP
#define PVFS_LIBNET_TCP_ENGINE_HPP

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace bmi::tcp {

struct ReadyEvent {
    std::uint64_t key = 0;
    std::uint32_t events = 0; // EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP, EPOLLRDHUP bits
};

class Engine {
public:
    Engine() = default;
    virtual ~Engine() = default;
    Engine(const Engine &) = delete;
    Engine &operator=(const Engine &) = delete;
    Engine(Engine &&) = delete;
    Engine &operator=(Engine &&) = delete;

    // Keys are unique per watched fd for its whole life.
    virtual void add(int fd, std::uint64_t key, std::uint32_t events) = 0;
    virtual void modify(int fd, std::uint64_t key, std::uint32_t events) = 0;
    virtual void remove(int fd, std::uint64_t key) = 0;
    // Waits up to timeout_ms (0: just look) and fills out; returns the count.
    virtual std::size_t wait(std::span<ReadyEvent> out, int timeout_ms) = 0;
    [[nodiscard]] virtual std::uint64_t id() const = 0; // 1 epoll, 2 io_uring
    [[nodiscard]] virtual bool level_triggered() const = 0;
};

// name: "epoll", "uring" or "auto" (io_uring if the kernel allows it, else
// epoll).  Throws std::system_error when the named engine cannot start.
std::unique_ptr<Engine> make_engine(std::string_view name);

} // namespace bmi::tcp

#endif // PVFS_LIBNET_TCP_ENGINE_HPP
