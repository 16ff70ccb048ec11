#include "engine.hpp"

#include <liburing.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bmi::tcp {

namespace {

class EpollEngine final : public Engine {
public:
    EpollEngine() : fd_(::epoll_create1(EPOLL_CLOEXEC))
    {
        if (fd_ < 0)
            throw std::system_error(errno, std::generic_category(), "bmi tcp: epoll_create1");
    }
    ~EpollEngine() override { ::close(fd_); }
    EpollEngine(const EpollEngine &) = delete;
    EpollEngine &operator=(const EpollEngine &) = delete;
    EpollEngine(EpollEngine &&) = delete;
    EpollEngine &operator=(EpollEngine &&) = delete;

    void add(int fd, std::uint64_t key, std::uint32_t events) override
    {
        ctl(EPOLL_CTL_ADD, fd, key, events);
    }
    void modify(int fd, std::uint64_t key, std::uint32_t events) override
    {
        ctl(EPOLL_CTL_MOD, fd, key, events);
    }
    void remove(int fd, std::uint64_t /*key*/) override
    {
        ::epoll_ctl(fd_, EPOLL_CTL_DEL, fd, nullptr);
    }
    std::size_t wait(std::span<ReadyEvent> out, int timeout_ms) override
    {
        // Filled by epoll_wait; not zeroed on every wait (the spin of a
        // test* calls this with a zero timeout again and again).
        std::array<epoll_event, 64> ev; // NOLINT(cppcoreguidelines-pro-type-member-init)
        const int max = static_cast<int>(std::min(out.size(), ev.size()));
        const int n = ::epoll_wait(fd_, ev.data(), max, timeout_ms);
        if (n <= 0)
            return 0;
        for (int i = 0; i < n; ++i) {
            const auto k = static_cast<std::size_t>(i);
            out[k] = ReadyEvent{ev[k].data.u64, ev[k].events};
        }
        return static_cast<std::size_t>(n);
    }
    [[nodiscard]] std::uint64_t id() const override { return 1; }
    [[nodiscard]] bool level_triggered() const override { return true; }

private:
    void ctl(int op, int fd, std::uint64_t key, std::uint32_t events) const
    {
        epoll_event ev{};
        ev.events = events;
        ev.data.u64 = key;
        ::epoll_ctl(fd_, op, fd, &ev);
    }
    int fd_;
};

// user_data of requests whose completions carry no readiness.
constexpr std::uint64_t control_tag = ~std::uint64_t{0};

class UringEngine final : public Engine {
public:
    UringEngine()
    {
        // Cooperative task work: a completion is posted when this thread
        // next enters the kernel (every wait does) instead of by an
        // interrupt to it, which in a VM costs more than the message.
        // Kernels before 5.19 refuse the flags; then without them.
        int rc = ::io_uring_queue_init(256, &ring_,
                                       IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
        taskrun_flag_ = rc == 0;
        if (rc == -EINVAL)
            rc = ::io_uring_queue_init(256, &ring_, 0);
        if (rc < 0)
            throw std::system_error(-rc, std::generic_category(), "bmi tcp: io_uring_queue_init");
    }
    ~UringEngine() override { ::io_uring_queue_exit(&ring_); }
    UringEngine(const UringEngine &) = delete;
    UringEngine &operator=(const UringEngine &) = delete;
    UringEngine(UringEngine &&) = delete;
    UringEngine &operator=(UringEngine &&) = delete;

    void add(int fd, std::uint64_t key, std::uint32_t events) override
    {
        watched_[key] = Watch{fd, events};
        arm(fd, key, events);
    }
    void modify(int fd, std::uint64_t key, std::uint32_t events) override
    {
        auto it = watched_.find(key);
        if (it == watched_.end())
            return;
        it->second.events = events;
        // Remove and re-arm: a fresh poll request checks the current state,
        // so a condition that is already true is reported at once.
        cancel_polls(key);
        arm(fd, key, events);
    }
    void remove(int /*fd*/, std::uint64_t key) override
    {
        if (watched_.erase(key) == 0)
            return;
        cancel_polls(key);
        // Submitted now: the fd is about to be closed.
        ::io_uring_submit(&ring_);
    }
    std::size_t wait(std::span<ReadyEvent> out, int timeout_ms) override
    {
        __kernel_timespec ts{};
        ts.tv_sec = timeout_ms / 1000;
        ts.tv_nsec = static_cast<long long>(timeout_ms % 1000) * 1000000;
        io_uring_cqe *cqe = nullptr;
        // One system call submits the batched poll changes and waits.
        if (timeout_ms > 0)
            ::io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
        else if (!taskrun_flag_ || ::io_uring_sq_ready(&ring_) > 0)
            // Enters the kernel even with nothing to submit: poll
            // completions are posted by task work that runs only then, so
            // a polling caller would otherwise not see them.
            ::io_uring_submit_and_get_events(&ring_);
        // else: the kernel flags pending task work in the SQ ring
        // (IORING_SQ_TASKRUN) and io_uring_peek_cqe enters it only then,
        // so a look with nothing to submit and nothing pending is no
        // system call.
        std::size_t n = 0;
        rearm_.clear();
        while (n < out.size() && ::io_uring_peek_cqe(&ring_, &cqe) == 0) {
            const std::uint64_t key = ::io_uring_cqe_get_data64(cqe);
            const int res = cqe->res;
            const bool more = (cqe->flags & IORING_CQE_F_MORE) != 0;
            ::io_uring_cqe_seen(&ring_, cqe);
            if (key == control_tag)
                continue;
            auto it = watched_.find(key);
            if (it == watched_.end())
                continue; // removed meanwhile
            if (res >= 0)
                n = add_event(out, n, key, static_cast<std::uint32_t>(res));
            // A multishot poll that ended (an error, an overflow, replaced
            // by modify, or cancelled by the kernel because the thread that
            // armed it exited: io_uring cancels a task's requests when it
            // does) leaves the key unwatched once it was the key's last:
            // armed again then, by this thread.
            if (!more && it->second.polls > 0 && --it->second.polls == 0)
                rearm_.emplace_back(it->second.fd, key);
        }
        for (const auto &[fd, key] : rearm_) {
            auto it = watched_.find(key);
            if (it != watched_.end() && it->second.polls == 0)
                arm(fd, key, it->second.events);
        }
        return n;
    }
    [[nodiscard]] std::uint64_t id() const override { return 2; }
    [[nodiscard]] bool level_triggered() const override { return false; }

private:
    // A multishot poll posts a completion per wake-up, and a socket is
    // woken more than once per message (a reply: twice, nearly always),
    // so a key can come twice in one harvest.  Every completion harvested
    // here was posted before the caller reads anything, so one event per
    // key (the union of the masks) sees all of it; the second would cost a
    // read that finds nothing.
    static std::size_t add_event(std::span<ReadyEvent> out, std::size_t n, std::uint64_t key,
                                 std::uint32_t events)
    {
        for (std::size_t i = 0; i < n; ++i) {
            if (out[i].key == key) {
                out[i].events |= events;
                return n;
            }
        }
        out[n] = ReadyEvent{key, events};
        return n + 1;
    }

    struct Watch {
        int fd = -1;
        std::uint32_t events = 0;
        int polls = 0; // armed and not yet ended (their last completion unseen)
    };

    io_uring_sqe *sqe_for_submit()
    {
        io_uring_sqe *sqe = ::io_uring_get_sqe(&ring_);
        if (sqe == nullptr) {
            // The submission queue is full: flush it and take a slot.
            ::io_uring_submit(&ring_);
            sqe = ::io_uring_get_sqe(&ring_);
        }
        if (sqe == nullptr)
            throw std::system_error(EBUSY, std::generic_category(), "bmi tcp: io_uring SQ full");
        return sqe;
    }
    // Every poll armed for `key`, not only the newest (poll_remove's
    // reach): a poll that ended on its own while a modify re-armed the
    // key is armed again when its last completion is harvested, so a key
    // can briefly have two, and one left behind would keep a closed
    // socket open in the ring (its peer never sees the close).
    // IORING_ASYNC_CANCEL_ALL: Linux 5.19, older than both kernels built for.
    void cancel_polls(std::uint64_t key)
    {
        io_uring_sqe *sqe = sqe_for_submit();
        ::io_uring_prep_cancel64(sqe, key, IORING_ASYNC_CANCEL_ALL);
        ::io_uring_sqe_set_data64(sqe, control_tag);
    }
    // EPOLLRDHUP too: a multishot poll is edge-triggered, and the method
    // must know the peer's FIN from data (see Engine).
    void arm(int fd, std::uint64_t key, std::uint32_t events)
    {
        if (auto it = watched_.find(key); it != watched_.end())
            ++it->second.polls;
        io_uring_sqe *sqe = sqe_for_submit();
        ::io_uring_prep_poll_multishot(sqe, fd, events | EPOLLERR | EPOLLHUP | EPOLLRDHUP);
        ::io_uring_sqe_set_data64(sqe, key);
    }

    io_uring ring_{};
    bool taskrun_flag_ = false; // IORING_SETUP_TASKRUN_FLAG accepted
    std::unordered_map<std::uint64_t, Watch> watched_;
    std::vector<std::pair<int, std::uint64_t>> rearm_; // reused by wait
};

} // namespace

std::unique_ptr<Engine> make_engine(std::string_view name)
{
    if (name == "epoll")
        return std::make_unique<EpollEngine>();
    if (name == "uring")
        return std::make_unique<UringEngine>();
    if (name != "auto" && !name.empty())
        throw std::system_error(EINVAL, std::generic_category(),
                                "bmi tcp: unknown engine '" + std::string(name) +
                                    "' (expected epoll, uring or auto)");
    try {
        return std::make_unique<UringEngine>();
    } catch (const std::system_error &) {
        // io_uring disabled (container, sysctl kernel.io_uring_disabled).
        return std::make_unique<EpollEngine>();
    }
}

} // namespace bmi::tcp
