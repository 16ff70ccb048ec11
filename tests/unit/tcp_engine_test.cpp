// The TCP method's progress engines (libnet/methods/tcp/engine.hpp): what
// one wait reports for a socket that was woken more than once, and for one
// whose watch another thread, since ended, set up.
#include <atf-c++.hpp>

#include "engine.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <string>
#include <thread>

#include "pvfs/unique_fd.hpp"

namespace {

struct SocketPair {
    pvfs::UniqueFd a;
    pvfs::UniqueFd b;
    SocketPair()
    {
        std::array<int, 2> fds{};
        ATF_REQUIRE_EQ(
            ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds.data()), 0);
        a = pvfs::UniqueFd(fds[0]);
        b = pvfs::UniqueFd(fds[1]);
    }
};

void send_byte(int fd)
{
    const char c = 'x';
    ATF_REQUIRE_EQ(::write(fd, &c, 1), 1);
}

std::size_t drain(int fd)
{
    std::array<char, 64> buf{};
    std::size_t total = 0;
    for (;;) {
        const ssize_t r = ::read(fd, buf.data(), buf.size());
        if (r <= 0)
            return total;
        total += static_cast<std::size_t>(r);
    }
}

// Three messages before a wait wake the socket three times (a multishot
// poll posts three completions): one wait names the socket once, since a
// single read after it takes all three.  Data that comes after that read
// is reported by the next wait.
void one_event_per_key(const std::string &name)
{
    const auto engine = bmi::tcp::make_engine(name);
    SocketPair p;
    constexpr std::uint64_t key = 7;
    engine->add(p.b.get(), key, EPOLLIN);
    std::array<bmi::tcp::ReadyEvent, 8> out{};
    // (ATF_REQUIRE_EQ evaluates its arguments again for the message.)
    std::size_t n = engine->wait(out, 0);
    ATF_REQUIRE_EQ(n, 0U);

    for (int i = 0; i < 3; ++i)
        send_byte(p.a.get());
    n = engine->wait(out, 1000);
    ATF_REQUIRE_EQ(n, 1U);
    ATF_REQUIRE_EQ(out[0].key, key);
    ATF_REQUIRE((out[0].events & EPOLLIN) != 0);
    std::size_t got = drain(p.b.get());
    ATF_REQUIRE_EQ(got, 3U);
    n = engine->wait(out, 0);
    ATF_REQUIRE_EQ(n, 0U);

    send_byte(p.a.get());
    n = engine->wait(out, 1000);
    ATF_REQUIRE_EQ(n, 1U);
    ATF_REQUIRE_EQ(out[0].key, key);
    got = drain(p.b.get());
    ATF_REQUIRE_EQ(got, 1U);

    // Two sockets woken in one wait: one event each.
    SocketPair q;
    constexpr std::uint64_t other = 9;
    engine->add(q.b.get(), other, EPOLLIN);
    send_byte(p.a.get());
    send_byte(q.a.get());
    send_byte(p.a.get());
    send_byte(q.a.get());
    n = 0;
    for (int round = 0; round < 10 && n < 2; ++round)
        n += engine->wait(std::span(out).subspan(n), 1000);
    ATF_REQUIRE_EQ(n, 2U);
    ATF_REQUIRE(out[0].key != out[1].key);
    engine->remove(p.b.get(), key);
    engine->remove(q.b.get(), other);
}

// A watch added (and submitted) by a thread that then exits: io_uring
// cancels that task's requests as it goes, and the engine must arm the
// key again, or the socket is never reported (pvfs found it as a client
// whose reconnect ran in a thread that then ended: its next read hung).
// The socket is still reported, once per wait, and after modifies from
// here too.
void watched_across_thread_exit(const std::string &name)
{
    const auto engine = bmi::tcp::make_engine(name);
    SocketPair p;
    constexpr std::uint64_t key = 11;
    std::array<bmi::tcp::ReadyEvent, 8> out{};
    std::thread armer([&] {
        engine->add(p.b.get(), key, EPOLLIN);
        engine->modify(p.b.get(), key, EPOLLIN | EPOLLOUT);
        engine->modify(p.b.get(), key, EPOLLIN);
        static_cast<void>(engine->wait(out, 0)); // submits them
    });
    armer.join();
    send_byte(p.a.get());
    bool seen = false;
    for (int round = 0; round < 10 && !seen; ++round) {
        const std::size_t n = engine->wait(out, 200);
        for (std::size_t i = 0; i < n; ++i)
            seen = seen || (out[i].key == key && (out[i].events & EPOLLIN) != 0);
    }
    if (!seen)
        ATF_FAIL("the socket armed by an exited thread was never reported");
    ATF_REQUIRE_EQ(drain(p.b.get()), 1U);
    for (int i = 0; i < 3; ++i)
        engine->modify(p.b.get(), key, EPOLLIN);
    send_byte(p.a.get());
    std::size_t n = 0;
    for (int round = 0; round < 10 && n == 0; ++round)
        n = engine->wait(out, 200);
    ATF_REQUIRE_EQ(n, 1U);
    ATF_REQUIRE_EQ(drain(p.b.get()), 1U);
    engine->remove(p.b.get(), key);
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(watched_across_thread_exit_epoll);
ATF_TEST_CASE_BODY(watched_across_thread_exit_epoll)
{
    watched_across_thread_exit("epoll");
}

ATF_TEST_CASE_WITHOUT_HEAD(watched_across_thread_exit_uring);
ATF_TEST_CASE_BODY(watched_across_thread_exit_uring)
{
    watched_across_thread_exit("uring");
}

ATF_TEST_CASE_WITHOUT_HEAD(one_event_per_key_epoll);
ATF_TEST_CASE_BODY(one_event_per_key_epoll)
{
    one_event_per_key("epoll");
}

ATF_TEST_CASE_WITHOUT_HEAD(one_event_per_key_uring);
ATF_TEST_CASE_BODY(one_event_per_key_uring)
{
    one_event_per_key("uring");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, one_event_per_key_epoll);
    ATF_ADD_TEST_CASE(tcs, one_event_per_key_uring);
    ATF_ADD_TEST_CASE(tcs, watched_across_thread_exit_epoll);
    ATF_ADD_TEST_CASE(tcs, watched_across_thread_exit_uring);
}
