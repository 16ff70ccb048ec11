// The TCP method's limits on peers that have proved nothing (docs/bmi.md,
// "Limits"): connection caps, the hello and frame deadlines, the global
// unexpected and early budgets, and peers freed with their last connection.
// A real BMI server on loopback; the attackers are raw sockets speaking the
// frame format (frame.hpp), from source addresses 127.0.0.2 and up so that
// the legitimate BMI client (127.0.0.1) is not under their per-address cap.
#include <atf-c++.hpp>

#include "bmi/bmi.hpp"
#include "frame.hpp"
#include "pvfs/unique_fd.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using pvfs::UniqueFd;
namespace tcp = bmi::tcp;

namespace {

bmi::Options server_options(const char *engine = "")
{
    bmi::Options o;
    o.role = bmi::Role::server;
    o.listen = {"tcp://127.0.0.1:0"};
    o.tcp_engine = engine;
    return o;
}

std::uint16_t port_of(const std::string &url)
{
    return static_cast<std::uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
}

// Resident set size of this process, bytes.
std::size_t rss()
{
    std::ifstream f("/proc/self/statm");
    std::size_t pages = 0;
    std::size_t resident = 0;
    f >> pages >> resident;
    return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

void poke(bmi::Bmi &b, int rounds = 1)
{
    std::vector<bmi::UnexpectedMessage> none;
    for (int i = 0; i < rounds; ++i)
        b.testunexpected(none, 0, 0);
}

// A connection from 127.0.0.src to the server's port: non-blocking while
// it connects (the server runs in this thread), blocking afterwards.
// bufs: its socket buffers' size, if not 0 (a peer that reads little).
UniqueFd raw_connect(std::uint16_t port, int src, bool wait = true, int bufs = 0)
{
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    ATF_REQUIRE(fd.valid());
    if (bufs != 0) {
        ATF_REQUIRE_EQ(::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &bufs, sizeof bufs), 0);
        ATF_REQUIRE_EQ(::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &bufs, sizeof bufs), 0);
    }
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7f000000U | static_cast<std::uint32_t>(src));
    ATF_REQUIRE_EQ(::bind(fd.get(), reinterpret_cast<const sockaddr *>(&from), sizeof from), 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr *>(&to), sizeof to);
    ATF_REQUIRE(rc == 0 || errno == EINPROGRESS);
    if (wait) {
        pollfd p{fd.get(), POLLOUT, 0};
        ATF_REQUIRE_EQ(::poll(&p, 1, 5000), 1);
        // Blocking from here on, with a bound on every write.
        const timeval tv{5, 0};
        ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    return fd;
}

std::vector<std::byte> header(const tcp::FrameHeader &h)
{
    tcp::HeaderBytes b{};
    tcp::encode(h, b);
    return {b.begin(), b.end()};
}

// A hello claiming url (a fresh one per attacker: a fresh peer).
std::vector<std::byte> hello(const std::string &url)
{
    tcp::HelloBody body;
    body.eager_limit = 16384;
    body.unexpected_limit = 16384;
    body.chunk = 512 * 1024;
    body.incarnation = 7;
    body.url = url;
    tcp::FrameHeader h;
    h.type = tcp::FrameType::hello;
    h.size = tcp::hello_size(body);
    std::vector<std::byte> out = header(h);
    const std::size_t at = out.size();
    out.resize(at + h.size);
    tcp::encode_hello(body, std::span(out).subspan(at));
    return out;
}

std::vector<std::byte> message(tcp::FrameType type, std::size_t size, std::int32_t tag)
{
    tcp::FrameHeader h;
    h.type = type;
    h.tag = tag;
    h.size = size;
    std::vector<std::byte> out = header(h);
    out.resize(out.size() + size, std::byte{0x5a});
    return out;
}

// Writes all of bytes (MSG_NONBLOCK off: the socket blocks, bounded by its
// SO_SNDTIMEO); false once the peer closed or the time ran out.
bool send_all(int fd, const std::vector<std::byte> &bytes)
{
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        done += static_cast<std::size_t>(n);
    }
    return true;
}

// Non-blocking: has the server closed fd (EOF or reset)?  Its hello and
// anything else it sent are read and ignored.
bool closed_by_server(int fd)
{
    std::array<char, 4096> buf{};
    for (;;) {
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n == 0)
            return true;
        if (n < 0)
            return errno != EAGAIN && errno != EINTR;
    }
}

// Did the server accept fd (its hello arrived), as opposed to resetting it?
bool got_hello(int fd)
{
    std::array<char, 4096> buf{};
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    return n > 0;
}

// A legitimate client: one request, its answer, through the server.
struct Legit {
    bmi::Bmi client{bmi::Options{}};
    bmi::ContextId cctx = client.open_context();
    bmi::Addr to_server;
    explicit Legit(const std::string &url) : to_server(client.addr_lookup(url)) {}

    // Sends "ping n", the server answers "pong n" on tag n; true when the
    // answer came within the time.  unexpected: where the server's messages
    // from others go (freed at once: the server drops what it cannot use).
    bool round_trip(bmi::Bmi &server, bmi::ContextId sctx, int n, std::chrono::milliseconds within)
    {
        const std::string req = "ping " + std::to_string(n);
        std::array<char, 64> reply{};
        const bmi::Post r =
            client.post_recv(to_server, reply.data(), reply.size(), n, nullptr, cctx);
        if (!r.ok())
            return false;
        const bmi::Post s =
            client.post_sendunexpected(to_server, req.data(), req.size(), n, nullptr, cctx);
        if (!s.ok())
            return false;
        const auto deadline = Clock::now() + within;
        bool answered = false;
        bool got = false;
        bmi::Completion c;
        while (Clock::now() < deadline) {
            std::vector<bmi::UnexpectedMessage> in;
            server.testunexpected(in, 64, 0);
            for (const bmi::UnexpectedMessage &m : in) {
                const std::string text(reinterpret_cast<const char *>(m.data().data()),
                                       m.data().size());
                if (!answered && text == req) {
                    const std::string ans = "pong " + std::to_string(n);
                    const bmi::Post a =
                        server.post_send(m.peer(), ans.data(), ans.size(), n, nullptr, sctx);
                    answered = a.ok();
                }
            }
            std::array<bmi::Completion, 8> sdone{};
            server.testcontext(sctx, sdone, 0);
            if (client.test(r.op, c, 1)) {
                got = true;
                break;
            }
        }
        if (!got) {
            client.cancel(r.op);
            client.test(r.op, c, 1000);
            return false;
        }
        return c.error == 0 &&
               std::string(reply.data(), c.actual_size) == "pong " + std::to_string(n);
    }
};

void raise_fd_limit(rlim_t want)
{
    rlimit rl{};
    ATF_REQUIRE_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = std::min(rl.rlim_max, std::max(rl.rlim_cur, want));
    ATF_REQUIRE_EQ(::setrlimit(RLIMIT_NOFILE, &rl), 0);
}

// Writes as much of bytes as the socket takes while the server runs (in
// this thread), until all is written or nothing moved for 300 ms (the
// server stopped reading).  Returns the count written.
std::size_t pump(bmi::Bmi &server, int fd, const std::vector<std::byte> &bytes)
{
    std::size_t done = 0;
    auto moved = Clock::now();
    while (done < bytes.size() && Clock::now() - moved < 300ms) {
        const ssize_t n =
            ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
            moved = Clock::now();
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            break;
        }
        poke(server, 2);
    }
    return done;
}

// A hello claiming url, then `count` eager frames of `size` bytes on tags
// from `tag` up (nobody receives them: early messages).
std::vector<std::byte> hello_and_early(const std::string &url, int count, std::size_t size,
                                       std::int32_t tag)
{
    std::vector<std::byte> out = hello(url);
    for (int i = 0; i < count; ++i) {
        const std::vector<std::byte> e = message(tcp::FrameType::eager, size, tag + i);
        out.insert(out.end(), e.begin(), e.end());
    }
    return out;
}

// Pokes the server until done() or the time runs out; false then.
template <typename Pred>
bool poke_until(bmi::Bmi &server, std::chrono::milliseconds within, Pred done)
{
    const auto until = Clock::now() + within;
    while (!done()) {
        if (Clock::now() >= until)
            return false;
        poke(server);
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

// The per-peer early budget (4 MiB) filled by one raw connection from
// 127.0.0.src claiming url: the server stops reading from it.
UniqueFd paused_connection(bmi::Bmi &server, int src, const std::string &url)
{
    const std::uint16_t port = port_of(server.listen_addresses().at(0));
    UniqueFd fd = raw_connect(port, src);
    const std::vector<std::byte> bytes = hello_and_early(url, 300, 16384, 1000);
    const std::size_t written = pump(server, fd.get(), bytes);
    poke(server, 20);
    const std::uint64_t early = server.get_info(bmi::Info::early_bytes);
    std::printf("%zu of %zu bytes written; %llu early bytes held\n", written, bytes.size(),
                static_cast<unsigned long long>(early));
    // Within a frame and its entry of the budget: full.
    constexpr std::size_t per_peer = std::size_t{4} << 20; // method.hpp early_peer_bytes
    ATF_REQUIRE(early + std::size_t{2} * (16384 + 256) >= per_peer);
    ATF_REQUIRE(early <= per_peer);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::open_connections), 1U);
    return fd;
}

} // namespace

// 10,000 connections opened and abandoned from three addresses: at most 64
// per address and max_connections in all are kept (the rest are reset at
// accept), the server's memory stays bounded and a legitimate client is
// served throughout.
ATF_TEST_CASE_WITHOUT_HEAD(connection_caps);
ATF_TEST_CASE_BODY(connection_caps)
{
    constexpr int total = 10000;
    constexpr std::uint64_t max_total = 150;
    constexpr std::uint64_t per_address = 64;
    raise_fd_limit(total + 1000);
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    bmi::Bmi server(server_options());
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::max_connections, max_total), 0);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::max_connections_per_address), per_address);
    const bmi::ContextId sctx = server.open_context();
    const std::string url = server.listen_addresses().at(0);
    Legit legit(url);
    ATF_REQUIRE(legit.round_trip(server, sctx, 1, 5s));
    const std::size_t base = rss();
    const std::size_t bound = base + (std::size_t{32} << 20);
    std::printf("RSS before: %zu KiB; bound: %zu KiB\n", base >> 10, bound >> 10);

    // Held open at once as far as the fd limit allows; the oldest go first.
    const std::size_t hold = std::min<std::size_t>(total, rl.rlim_cur - 500);
    std::vector<UniqueFd> fds;
    std::vector<int> source;
    std::array<std::uint64_t, 5> accepted{};
    const auto settle = [&](std::size_t from) {
        poke(server, 20);
        for (std::size_t i = from; i < fds.size(); ++i) {
            if (fds[i].valid() && got_hello(fds[i].get()))
                ++accepted.at(static_cast<std::size_t>(source[i]));
        }
    };
    std::size_t checked = 0;
    int rounds = 0;
    for (int n = 0; n < total; ++n) {
        if (fds.size() >= hold) {
            settle(checked);
            for (UniqueFd &f : fds)
                f.reset();
            fds.clear();
            source.clear();
            checked = 0;
            poke(server, 20);
        }
        const int src = 2 + n % 3;
        fds.push_back(raw_connect(port_of(url), src, false));
        source.push_back(src);
        if (n % 100 == 99) {
            settle(checked);
            checked = fds.size();
            ATF_REQUIRE(server.get_info(bmi::Info::open_connections) <= max_total);
            if (++rounds % 10 == 0)
                ATF_REQUIRE(legit.round_trip(server, sctx, 100 + rounds, 5s));
        }
    }
    settle(checked);
    const std::uint64_t open = server.get_info(bmi::Info::open_connections);
    const std::uint64_t refused = server.get_info(bmi::Info::refused_connections);
    const std::size_t after = rss();
    std::printf("server: %llu connections open, %llu refused; accepted per address: %llu %llu "
                "%llu; RSS %zu KiB (bound %zu KiB)\n",
                static_cast<unsigned long long>(open), static_cast<unsigned long long>(refused),
                static_cast<unsigned long long>(accepted[2]),
                static_cast<unsigned long long>(accepted[3]),
                static_cast<unsigned long long>(accepted[4]), after >> 10, bound >> 10);
    ATF_REQUIRE(open <= max_total);
    // With all of them held at once (the fd limit allows it almost
    // everywhere), the caps hold exactly; else once per batch.
    const std::uint64_t batches = (total + hold - 1) / hold;
    std::uint64_t sum = 0;
    for (int src = 2; src <= 4; ++src) {
        ATF_REQUIRE(accepted.at(static_cast<std::size_t>(src)) <= per_address * batches);
        sum += accepted.at(static_cast<std::size_t>(src));
    }
    ATF_REQUIRE(sum <= (max_total - 1) * batches); // the legitimate client holds one
    ATF_REQUIRE(sum > 0);
    ATF_REQUIRE_EQ(refused + sum, static_cast<std::uint64_t>(total));
    ATF_REQUIRE(after <= bound);
    ATF_REQUIRE(legit.round_trip(server, sctx, 2, 5s));
    fds.clear();
    const auto deadline = Clock::now() + 10s;
    while (server.get_info(bmi::Info::open_connections) > 1) {
        poke(server);
        ATF_REQUIRE(Clock::now() < deadline);
        std::this_thread::sleep_for(1ms);
    }
}

// Slowloris: after its hello, a frame header one byte every 250 ms, and on
// another connection a header whose payload trickles: both are closed once
// the frame deadline (here 1.5 s) passes, not at the end of the frame.
ATF_TEST_CASE_WITHOUT_HEAD(slow_frames);
ATF_TEST_CASE_BODY(slow_frames)
{
    constexpr auto deadline = 1500ms;
    bmi::Bmi server(server_options());
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::frame_timeout_ms, deadline.count()), 0);
    const bmi::ContextId sctx = server.open_context();
    const std::string url = server.listen_addresses().at(0);
    Legit legit(url);
    ATF_REQUIRE(legit.round_trip(server, sctx, 1, 5s));

    UniqueFd hdr = raw_connect(port_of(url), 2);
    UniqueFd body = raw_connect(port_of(url), 3);
    ATF_REQUIRE(send_all(hdr.get(), hello("tcp://127.0.0.2:1")));
    ATF_REQUIRE(send_all(body.get(), hello("tcp://127.0.0.3:1")));
    poke(server, 5);
    const std::vector<std::byte> frame = message(tcp::FrameType::unexpected, 1000, 9);
    // The body connection: the header and 10 bytes at once, then one byte
    // per step.
    ATF_REQUIRE(send_all(body.get(), {frame.begin(), frame.begin() + 50}));
    const auto start = Clock::now();
    std::size_t sent_hdr = 0;
    std::size_t sent_body = 50;
    bool hdr_closed = false;
    bool body_closed = false;
    Clock::duration hdr_at{};
    Clock::duration body_at{};
    int n = 0;
    while ((!hdr_closed || !body_closed) && Clock::now() - start < deadline * 4) {
        if (!hdr_closed && sent_hdr < tcp::frame_header_size) {
            send_all(hdr.get(), {frame[sent_hdr]});
            ++sent_hdr;
        }
        if (!body_closed && sent_body < frame.size()) {
            send_all(body.get(), {frame[sent_body]});
            ++sent_body;
        }
        const auto step = Clock::now() + 250ms;
        while (Clock::now() < step) {
            poke(server);
            std::this_thread::sleep_for(5ms);
        }
        if (!hdr_closed && closed_by_server(hdr.get())) {
            hdr_closed = true;
            hdr_at = Clock::now() - start;
        }
        if (!body_closed && closed_by_server(body.get())) {
            body_closed = true;
            body_at = Clock::now() - start;
        }
        if (++n % 2 == 0)
            ATF_REQUIRE(legit.round_trip(server, sctx, 10 + n, 5s));
    }
    const auto ms = [](Clock::duration d) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    };
    std::printf("header closed: %d after %lld ms (%zu bytes sent); payload closed: %d after "
                "%lld ms (%zu bytes sent)\n",
                static_cast<int>(hdr_closed), static_cast<long long>(ms(hdr_at)), sent_hdr,
                static_cast<int>(body_closed), static_cast<long long>(ms(body_at)), sent_body);
    ATF_REQUIRE(hdr_closed);
    ATF_REQUIRE(body_closed);
    // Not before the deadline (the first byte went at start), and well
    // before the frame could have finished at this rate.
    ATF_REQUIRE(hdr_at >= deadline - 300ms && hdr_at <= deadline + 1500ms);
    ATF_REQUIRE(body_at >= deadline - 300ms && body_at <= deadline + 1500ms);
    ATF_REQUIRE(sent_hdr < tcp::frame_header_size);
    ATF_REQUIRE(legit.round_trip(server, sctx, 3, 5s));
}

// A hello never sent, or half of one: closed after the hello deadline.
ATF_TEST_CASE_WITHOUT_HEAD(hello_deadline);
ATF_TEST_CASE_BODY(hello_deadline)
{
    constexpr auto deadline = 1000ms;
    bmi::Bmi server(server_options());
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::hello_timeout_ms, deadline.count()), 0);
    const std::string url = server.listen_addresses().at(0);
    UniqueFd silent = raw_connect(port_of(url), 2);
    UniqueFd half = raw_connect(port_of(url), 2);
    const std::vector<std::byte> h = hello("tcp://127.0.0.2:1");
    ATF_REQUIRE(send_all(half.get(), {h.begin(), h.begin() + 50}));
    const auto start = Clock::now();
    poke(server, 5);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::open_connections), 2U);
    bool silent_closed = false;
    bool half_closed = false;
    while ((!silent_closed || !half_closed) && Clock::now() - start < deadline * 4) {
        poke(server);
        std::this_thread::sleep_for(5ms);
        if (Clock::now() - start < deadline - 100ms) {
            ATF_REQUIRE(!closed_by_server(silent.get()));
            ATF_REQUIRE(!closed_by_server(half.get()));
        } else {
            silent_closed = silent_closed || closed_by_server(silent.get());
            half_closed = half_closed || closed_by_server(half.get());
        }
    }
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    std::printf("closed after %lld ms\n", static_cast<long long>(took.count()));
    ATF_REQUIRE(silent_closed);
    ATF_REQUIRE(half_closed);
    ATF_REQUIRE(took <= deadline + 1500ms);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::open_connections), 0U);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::peers), 0U);
}

namespace {

// 1 GiB of unexpected messages from 2048 fresh URLs (a thread of raw
// sockets, 8 x 64 KiB each).  First the server takes none of them: what it
// buffers stays under the global budget (the rest is refused, connections
// closed) and its memory under a bound; then it drains them as a server
// does, and a legitimate client's requests are answered meanwhile.  At the
// end every attacker's peer is gone.  The attackers never read the
// server's hello, so their close() resets the connection and drops what
// they had not sent yet: the server sees streams cut mid-payload, often
// after it has been woken for the last bytes (peer_gone_mid_frame).
void unexpected_flood(const char *engine)
{
    constexpr std::size_t msg = std::size_t{64} * 1024;
    constexpr std::size_t per_conn = 8;
    constexpr std::size_t conns = 2048; // 1 GiB
    constexpr std::size_t budget = std::size_t{8} << 20;
    bmi::Bmi server(server_options(engine));
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::unexpected_limit, msg), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::unexpected_peer_bytes, std::size_t{1} << 20), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::unexpected_total_bytes, budget), 0);
    const bmi::ContextId sctx = server.open_context();
    const std::string url = server.listen_addresses().at(0);
    Legit legit(url);
    ATF_REQUIRE(legit.round_trip(server, sctx, 1, 5s));
    const std::uint64_t base_peers = server.get_info(bmi::Info::peers);
    const std::size_t base = rss();
    const std::size_t bound = base + budget + (std::size_t{48} << 20);
    std::printf("RSS before: %zu KiB; bound: %zu KiB\n", base >> 10, bound >> 10);

    std::atomic<std::size_t> attempted{0};
    std::atomic<std::size_t> delivered_conns{0};
    std::atomic<bool> stop{false};
    const std::uint16_t port = port_of(url);
    std::thread attacker([&] {
        std::vector<std::byte> frames;
        for (std::size_t i = 0; i < per_conn; ++i) {
            const std::vector<std::byte> f = message(tcp::FrameType::unexpected, msg, 1);
            frames.insert(frames.end(), f.begin(), f.end());
        }
        for (std::size_t n = 0; n < conns && !stop; ++n) {
            UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
            sockaddr_in from{};
            from.sin_family = AF_INET;
            from.sin_addr.s_addr = htonl(0x7f000002U + static_cast<std::uint32_t>(n % 8));
            sockaddr_in to{};
            to.sin_family = AF_INET;
            to.sin_port = htons(port);
            to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            const timeval tv{5, 0};
            ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            if (::bind(fd.get(), reinterpret_cast<const sockaddr *>(&from), sizeof from) != 0 ||
                ::connect(fd.get(), reinterpret_cast<const sockaddr *>(&to), sizeof to) != 0)
                continue;
            const bool ok =
                send_all(fd.get(), hello("tcp://198.18.0.1:" + std::to_string(n + 1))) &&
                send_all(fd.get(), frames);
            attempted += per_conn * msg;
            if (ok)
                ++delivered_conns;
        }
    });
    const auto join = [&] {
        stop = true;
        attacker.join();
    };

    // Phase 1: the server reads but takes nothing.
    std::size_t most = 0;
    const auto phase1_end = Clock::now() + 20s;
    while (attempted < (std::size_t{256} << 20) && Clock::now() < phase1_end) {
        poke(server);
        most = std::max<std::size_t>(most, server.get_info(bmi::Info::unexpected_bytes));
        if (most > budget)
            break;
    }
    const std::size_t rss1 = rss();
    std::printf("phase 1: %zu MiB attempted, at most %zu KiB buffered (budget %zu KiB), RSS %zu "
                "KiB\n",
                attempted.load() >> 20, most >> 10, budget >> 10, rss1 >> 10);
    if (most > budget || rss1 > bound)
        join();
    ATF_REQUIRE(most <= budget);
    ATF_REQUIRE(rss1 <= bound);
    ATF_REQUIRE(most >= budget / 2); // the flood did reach the budget

    // Phase 2: the server drains (dropping what it cannot use) and answers
    // the legitimate client.  Its connection may be closed when it brings
    // a request while the budget is full; it then reconnects and asks again.
    int answered = 0;
    int retries = 0;
    const auto phase2_end = Clock::now() + 30s;
    while (attempted < conns * per_conn * msg && Clock::now() < phase2_end) {
        int tries = 0;
        while (!legit.round_trip(server, sctx, 1000 + answered, 500ms)) {
            ++retries;
            if (++tries > 20) {
                join();
                ATF_FAIL("the legitimate client was not answered in 20 tries");
            }
        }
        ++answered;
        ATF_REQUIRE(server.get_info(bmi::Info::unexpected_bytes) <= budget);
        ATF_REQUIRE(rss() <= bound);
    }
    join();
    std::printf("phase 2: %d requests answered (%d retried); %zu MiB attempted, %zu of %zu "
                "connections fully written; RSS %zu KiB\n",
                answered, retries, attempted.load() >> 20, delivered_conns.load(), conns,
                rss() >> 10);
    ATF_REQUIRE(attempted >= conns * per_conn * msg);
    ATF_REQUIRE(answered > 0);

    // Every attacker's peer goes once its connection is closed and its
    // messages are freed.
    const auto deadline = Clock::now() + 10s;
    while (server.get_info(bmi::Info::peers) > base_peers ||
           server.get_info(bmi::Info::unexpected_bytes) > 0) {
        std::vector<bmi::UnexpectedMessage> in;
        server.testunexpected(in, 64, 1);
        if (Clock::now() >= deadline) {
            std::printf(
                "left: %llu peers (base %llu), %llu unexpected bytes, %llu connections\n",
                static_cast<unsigned long long>(server.get_info(bmi::Info::peers)),
                static_cast<unsigned long long>(base_peers),
                static_cast<unsigned long long>(server.get_info(bmi::Info::unexpected_bytes)),
                static_cast<unsigned long long>(server.get_info(bmi::Info::open_connections)));
            ATF_FAIL("the attackers' peers were not freed");
        }
    }
    ATF_REQUIRE(legit.round_trip(server, sctx, 2, 5s));
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(unexpected_flood_epoll);
ATF_TEST_CASE_BODY(unexpected_flood_epoll)
{
    unexpected_flood("epoll");
}

ATF_TEST_CASE_WITHOUT_HEAD(unexpected_flood_uring);
ATF_TEST_CASE_BODY(unexpected_flood_uring)
{
    unexpected_flood("uring");
}

namespace {

// A peer sends a hello and part of a frame and goes, with a FIN or a
// reset, before the server has read anything: the server is woken for the
// bytes and the end together, and its read of the bytes comes up short.
// It must still see the end and close the connection (and free the peer)
// at once, not at the frame deadline: an edge-triggered engine does not
// report the end again.
void peer_gone_mid_frame(const char *engine)
{
    bmi::Bmi server(server_options(engine));
    const std::uint16_t port = port_of(server.listen_addresses().at(0));
    int n = 0;
    for (const bool reset : {false, true}) {
        UniqueFd fd = raw_connect(port, 2);
        // Accepted, and watched (the next wait arms its poll), before the
        // bytes come.
        const auto accept_by = Clock::now() + 5s;
        while (server.get_info(bmi::Info::open_connections) == 0) {
            poke(server);
            ATF_REQUIRE(Clock::now() < accept_by);
        }
        poke(server);
        std::vector<std::byte> out = hello("tcp://198.18.0.1:" + std::to_string(++n));
        const std::vector<std::byte> m = message(tcp::FrameType::unexpected, 4096, 1);
        out.insert(out.end(), m.begin(), m.begin() + 100);
        ATF_REQUIRE(send_all(fd.get(), out));
        if (reset) {
            const linger now{1, 0};
            ATF_REQUIRE_EQ(::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &now, sizeof now), 0);
            fd.reset();
        } else {
            ATF_REQUIRE_EQ(::shutdown(fd.get(), SHUT_WR), 0);
        }
        const auto start = Clock::now();
        while (server.get_info(bmi::Info::open_connections) > 0 && Clock::now() - start < 3s)
            poke(server);
        std::printf("%s: %llu connections open after %lld ms\n", reset ? "reset" : "FIN",
                    static_cast<unsigned long long>(server.get_info(bmi::Info::open_connections)),
                    static_cast<long long>(
                        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start)
                            .count()));
        ATF_REQUIRE_EQ(server.get_info(bmi::Info::open_connections), 0U);
        if (!reset)
            ATF_REQUIRE(closed_by_server(fd.get()));
        poke(server);
        ATF_REQUIRE_EQ(server.get_info(bmi::Info::peers), 0U);
    }
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(peer_gone_mid_frame_epoll);
ATF_TEST_CASE_BODY(peer_gone_mid_frame_epoll)
{
    peer_gone_mid_frame("epoll");
}

ATF_TEST_CASE_WITHOUT_HEAD(peer_gone_mid_frame_uring);
ATF_TEST_CASE_BODY(peer_gone_mid_frame_uring)
{
    peer_gone_mid_frame("uring");
}

// Early messages (eager and RTS frames nobody has posted a receive for)
// from fresh URLs: within the global early budget (over it the connection
// is closed), RTS entries counted, all of it gone with the connections
// (an RTS) or once the idle timeout passes (a complete eager message).
// Peers held by unexpected messages stay until the messages are freed.
ATF_TEST_CASE_WITHOUT_HEAD(early_budget_and_peers_freed);
ATF_TEST_CASE_BODY(early_budget_and_peers_freed)
{
    constexpr std::size_t budget = std::size_t{1} << 20;
    constexpr auto ttl = 3000ms; // complete early messages outlive their connection this long
    bmi::Bmi server(server_options());
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::early_total_bytes, budget), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::max_connections_per_address, 1000), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::idle_timeout_ms, ttl.count()), 0);
    const std::string url = server.listen_addresses().at(0);
    const std::uint16_t port = port_of(url);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::peers), 0U);

    // 40 peers x (1 RTS + 8 x 16 KiB eager): 5 MiB asked for, 1 MiB kept.
    std::vector<UniqueFd> fds;
    std::size_t refused = 0;
    for (int n = 0; n < 40; ++n) {
        fds.push_back(raw_connect(port, 2));
        tcp::FrameHeader rts;
        rts.type = tcp::FrameType::rts;
        rts.tag = 5;
        rts.size = std::size_t{1} << 30;
        rts.cookie = 77;
        std::vector<std::byte> out = hello("tcp://198.18.0.2:" + std::to_string(n + 1));
        const std::vector<std::byte> r = header(rts);
        out.insert(out.end(), r.begin(), r.end());
        for (int i = 0; i < 8; ++i) {
            const std::vector<std::byte> e = message(tcp::FrameType::eager, 16384, 100 + i);
            out.insert(out.end(), e.begin(), e.end());
        }
        send_all(fds.back().get(), out);
        poke(server, 5);
        ATF_REQUIRE(server.get_info(bmi::Info::early_bytes) <= budget);
    }
    poke(server, 20);
    for (const UniqueFd &f : fds)
        refused += closed_by_server(f.get()) ? 1 : 0;
    const std::uint64_t early = server.get_info(bmi::Info::early_bytes);
    std::printf("early: %llu bytes buffered (budget %zu), %zu of 40 connections closed, %llu "
                "peers\n",
                static_cast<unsigned long long>(early), budget, refused,
                static_cast<unsigned long long>(server.get_info(bmi::Info::peers)));
    ATF_REQUIRE(early <= budget);
    ATF_REQUIRE(early >= budget / 2);
    ATF_REQUIRE(refused >= 30);
    // An RTS alone is charged.
    UniqueFd lone = raw_connect(port, 3);
    {
        fds.clear(); // the connections close; their messages expire
        const auto until = Clock::now() + ttl + 5s;
        while (server.get_info(bmi::Info::early_bytes) > 0 ||
               server.get_info(bmi::Info::peers) > 0) {
            poke(server);
            ATF_REQUIRE(Clock::now() < until);
        }
        tcp::FrameHeader rts;
        rts.type = tcp::FrameType::rts;
        rts.tag = 5;
        rts.size = 100;
        rts.cookie = 78;
        std::vector<std::byte> out = hello("tcp://198.18.0.3:1");
        const std::vector<std::byte> r = header(rts);
        out.insert(out.end(), r.begin(), r.end());
        ATF_REQUIRE(send_all(lone.get(), out));
        const auto until2 = Clock::now() + 5s;
        while (server.get_info(bmi::Info::early_bytes) == 0) {
            poke(server);
            ATF_REQUIRE(Clock::now() < until2);
        }
        ATF_REQUIRE_EQ(server.get_info(bmi::Info::peers), 1U);
        lone.reset();
        while (server.get_info(bmi::Info::early_bytes) > 0 ||
               server.get_info(bmi::Info::peers) > 0) {
            poke(server);
            ATF_REQUIRE(Clock::now() < until2);
        }
    }

    // Unexpected messages keep their peer until they are freed.
    std::vector<UniqueFd> senders;
    for (int n = 0; n < 20; ++n) {
        senders.push_back(raw_connect(port, 4));
        std::vector<std::byte> out = hello("tcp://198.18.0.4:" + std::to_string(n + 1));
        const std::vector<std::byte> m = message(tcp::FrameType::unexpected, 100, 1);
        out.insert(out.end(), m.begin(), m.end());
        ATF_REQUIRE(send_all(senders.back().get(), out));
    }
    std::vector<bmi::UnexpectedMessage> held;
    const auto until = Clock::now() + 5s;
    while (held.size() < 20) {
        server.testunexpected(held, 20 - held.size(), 1);
        ATF_REQUIRE(Clock::now() < until);
    }
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::peers), 20U);
    senders.clear();
    while (server.get_info(bmi::Info::open_connections) > 0) {
        poke(server);
        ATF_REQUIRE(Clock::now() < until);
    }
    poke(server, 5);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::peers), 20U);
    ATF_REQUIRE(!server.rev_lookup(held[0].peer()).empty());
    const bmi::Addr stale = held[0].peer();
    held.clear();
    poke(server, 5);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::peers), 0U);
    ATF_REQUIRE(server.rev_lookup(stale).empty());
    // An Addr of a freed peer names nobody, even once its slot is reused.
    UniqueFd again = raw_connect(port, 4);
    std::vector<std::byte> out = hello("tcp://198.18.0.5:1");
    const std::vector<std::byte> m = message(tcp::FrameType::unexpected, 10, 1);
    out.insert(out.end(), m.begin(), m.end());
    ATF_REQUIRE(send_all(again.get(), out));
    while (held.empty()) {
        server.testunexpected(held, 1, 1);
        ATF_REQUIRE(Clock::now() < until + 5s);
    }
    ATF_REQUIRE(held[0].peer() != stale);
    ATF_REQUIRE(server.rev_lookup(stale).empty());
    const bmi::ContextId sctx = server.open_context();
    const char byte = 1;
    ATF_REQUIRE_EQ(server.post_send(stale, &byte, 1, 1, nullptr, sctx).error, -EINVAL);
}

namespace {

// A connection paused on its peer's early budget (not read, watched for
// nothing) whose peer then resets it: closed at once, with both engines.
// Before, the error the engine kept reporting for it was ignored (epoll:
// a busy loop) and the connection, its slot and caps stayed forever.  The
// complete early messages stay (their sender's ops are done).
void paused_reset(const char *engine)
{
    bmi::Bmi server(server_options(engine));
    UniqueFd fd = paused_connection(server, 2, "tcp://198.18.0.6:1");
    const std::uint64_t early = server.get_info(bmi::Info::early_bytes);
    const linger reset{1, 0};
    ATF_REQUIRE_EQ(::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
    fd.reset();
    const bool closed =
        poke_until(server, 5s, [&] { return server.get_info(bmi::Info::open_connections) == 0; });
    std::printf("%s: closed after the reset: %d\n", engine, static_cast<int>(closed));
    ATF_REQUIRE(closed);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::early_bytes), early);
    // Not spinning: a wait with nothing to do costs no CPU time to speak of.
    rusage before{};
    rusage after{};
    ::getrusage(RUSAGE_THREAD, &before);
    std::vector<bmi::UnexpectedMessage> none;
    server.testunexpected(none, 1, 300);
    ::getrusage(RUSAGE_THREAD, &after);
    const auto cpu_us = [](const rusage &r) {
        return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000LL + r.ru_utime.tv_usec +
               r.ru_stime.tv_usec;
    };
    const long long used = cpu_us(after) - cpu_us(before);
    std::printf("%s: %lld us of CPU in a 300 ms wait\n", engine, used);
    ATF_REQUIRE(used < 150000);
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(paused_reset_epoll);
ATF_TEST_CASE_BODY(paused_reset_epoll)
{
    paused_reset("epoll");
}

ATF_TEST_CASE_WITHOUT_HEAD(paused_reset_uring);
ATF_TEST_CASE_BODY(paused_reset_uring)
{
    paused_reset("uring");
}

// A connection paused on its peer's early budget whose peer then only
// half-closes (FIN, the socket kept): the early messages expire after the
// idle timeout, the connection reads again, finds the end and closes; the
// rest expire in turn and the peer goes.  Before, it stayed in CLOSE_WAIT
// with its budget forever.
ATF_TEST_CASE_WITHOUT_HEAD(paused_fin);
ATF_TEST_CASE_BODY(paused_fin)
{
    constexpr auto ttl = 3000ms;
    bmi::Bmi server(server_options());
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::idle_timeout_ms, ttl.count()), 0);
    const auto start = Clock::now();
    UniqueFd fd = paused_connection(server, 2, "tcp://198.18.0.8:1");
    ATF_REQUIRE_EQ(::shutdown(fd.get(), SHUT_WR), 0);
    const bool gone = poke_until(server, 4 * ttl + 5s, [&] {
        return server.get_info(bmi::Info::open_connections) == 0 &&
               server.get_info(bmi::Info::early_bytes) == 0 &&
               server.get_info(bmi::Info::peers) == 0;
    });
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    std::printf("connection %llu, early bytes %llu, peers %llu after %lld ms\n",
                static_cast<unsigned long long>(server.get_info(bmi::Info::open_connections)),
                static_cast<unsigned long long>(server.get_info(bmi::Info::early_bytes)),
                static_cast<unsigned long long>(server.get_info(bmi::Info::peers)),
                static_cast<long long>(took.count()));
    ATF_REQUIRE(gone);
    ATF_REQUIRE(took >= ttl); // not before the messages could expire
    // (io_uring lets go of a closed socket when the thread next enters it.)
    ATF_REQUIRE(poke_until(server, 2s, [&] { return closed_by_server(fd.get()); }));
}

// A peer with two connections (a reconnect racing the old one): the old
// one closes after a complete eager message and part of another arrived.
// The complete one stays for the receive the server posts later (its
// sender's op completed when it was written: nobody sends it again); the
// cut one goes with its connection.
ATF_TEST_CASE_WITHOUT_HEAD(early_outlives_connection);
ATF_TEST_CASE_BODY(early_outlives_connection)
{
    bmi::Bmi server(server_options());
    const bmi::ContextId sctx = server.open_context();
    const std::uint16_t port = port_of(server.listen_addresses().at(0));
    const std::string claimed = "tcp://198.18.0.9:1";
    const std::string text = "the first message";
    UniqueFd old_conn = raw_connect(port, 2);
    std::vector<std::byte> out = hello(claimed);
    tcp::FrameHeader h;
    h.type = tcp::FrameType::eager;
    h.tag = 5;
    h.size = text.size();
    const std::vector<std::byte> f = header(h);
    out.insert(out.end(), f.begin(), f.end());
    for (const char ch : text)
        out.push_back(static_cast<std::byte>(ch));
    const std::vector<std::byte> cut = message(tcp::FrameType::eager, 100, 6);
    out.insert(out.end(), cut.begin(), cut.begin() + 50);
    ATF_REQUIRE(send_all(old_conn.get(), out));
    UniqueFd new_conn = raw_connect(port, 3);
    ATF_REQUIRE(send_all(new_conn.get(), hello(claimed)));
    ATF_REQUIRE(poke_until(server, 5s, [&] {
        return server.get_info(bmi::Info::open_connections) == 2 &&
               server.get_info(bmi::Info::early_bytes) >= text.size() + 100;
    }));
    poke(server, 20);
    const std::uint64_t both = server.get_info(bmi::Info::early_bytes);
    old_conn.reset();
    ATF_REQUIRE(
        poke_until(server, 5s, [&] { return server.get_info(bmi::Info::open_connections) == 1; }));
    poke(server, 5);
    const std::uint64_t left = server.get_info(bmi::Info::early_bytes);
    std::printf("early bytes: %llu with both, %llu after the close\n",
                static_cast<unsigned long long>(both), static_cast<unsigned long long>(left));
    ATF_REQUIRE(left > 0 && left < both);

    const bmi::Addr peer = server.addr_lookup(claimed);
    ATF_REQUIRE(peer != bmi::no_addr);
    std::array<char, 64> buf{};
    const bmi::Post r = server.post_recv(peer, buf.data(), buf.size(), 5, nullptr, sctx);
    ATF_REQUIRE(r.ok());
    std::size_t got = r.actual_size;
    if (!r.completed) {
        bmi::Completion c;
        const bool done = server.test(r.op, c, 2000);
        if (!done) {
            server.cancel(r.op);
            server.test(r.op, c, 1000);
            ATF_FAIL("the early message died with its connection");
        }
        ATF_REQUIRE_EQ(c.error, 0);
        got = c.actual_size;
    }
    ATF_REQUIRE_EQ(std::string(buf.data(), got), text);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::early_bytes), 0U);
}

// Empty and one-byte eager frames on tags nobody receives: each entry is
// charged (256 bytes on top of its payload), so they fill the global
// budget like any other early message and the connection that goes over
// it is closed.  Before, they were charged their size: thousands piled up
// under a budget that showed (almost) nothing.
ATF_TEST_CASE_WITHOUT_HEAD(empty_early_frames_charged);
ATF_TEST_CASE_BODY(empty_early_frames_charged)
{
    constexpr std::size_t budget = std::size_t{256} << 10;
    bmi::Bmi server(server_options());
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::early_total_bytes, budget), 0);
    UniqueFd fd = raw_connect(port_of(server.listen_addresses().at(0)), 2);
    std::vector<std::byte> out = hello("tcp://198.18.0.10:1");
    constexpr int frames = 4000; // 1 MiB of entries at 256 each
    for (int i = 0; i < frames; ++i) {
        const std::vector<std::byte> e =
            message(tcp::FrameType::eager, static_cast<std::size_t>(i % 2), 100 + i);
        out.insert(out.end(), e.begin(), e.end());
    }
    pump(server, fd.get(), out);
    poke(server, 20);
    const std::uint64_t early = server.get_info(bmi::Info::early_bytes);
    const bool closed = closed_by_server(fd.get());
    std::printf("early bytes %llu (budget %zu), connection closed: %d\n",
                static_cast<unsigned long long>(early), budget, static_cast<int>(closed));
    ATF_REQUIRE(early <= budget);
    ATF_REQUIRE(early + 257 > budget);
    ATF_REQUIRE(closed);
}

// Early messages held by an idle peer on an open connection expire after
// the idle timeout, freeing the global budget: before, one that filled it
// made every later early message close its connection, forever.
ATF_TEST_CASE_WITHOUT_HEAD(early_expires);
ATF_TEST_CASE_BODY(early_expires)
{
    constexpr auto ttl = 2000ms;
    constexpr std::size_t budget = std::size_t{64} << 10;
    bmi::Bmi server(server_options());
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::idle_timeout_ms, ttl.count()), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::early_total_bytes, budget), 0);
    const std::uint16_t port = port_of(server.listen_addresses().at(0));
    const auto start = Clock::now();
    UniqueFd holder = raw_connect(port, 2);
    ATF_REQUIRE(send_all(holder.get(), hello_and_early("tcp://198.18.0.11:1", 3, 16384, 1)));
    ATF_REQUIRE(poke_until(server, 5s, [&] {
        return server.get_info(bmi::Info::early_bytes) >= std::uint64_t{3} * 16384;
    }));
    // Another peer's early message does not fit meanwhile: its connection
    // closes.
    UniqueFd other = raw_connect(port, 3);
    ATF_REQUIRE(send_all(other.get(), hello_and_early("tcp://198.18.0.12:1", 1, 16384, 1)));
    ATF_REQUIRE(poke_until(server, 5s, [&] { return closed_by_server(other.get()); }));
    ATF_REQUIRE(Clock::now() - start < ttl);
    ATF_REQUIRE(server.get_info(bmi::Info::early_bytes) >= std::uint64_t{3} * 16384);
    ATF_REQUIRE(
        poke_until(server, ttl + 3s, [&] { return server.get_info(bmi::Info::early_bytes) == 0; }));
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    std::printf("early messages expired after %lld ms\n", static_cast<long long>(took.count()));
    ATF_REQUIRE(took >= ttl);
    ATF_REQUIRE(!closed_by_server(holder.get())); // an idle connection may stay
    // The budget is free again.
    UniqueFd later = raw_connect(port, 3);
    ATF_REQUIRE(send_all(later.get(), hello_and_early("tcp://198.18.0.13:1", 1, 16384, 1)));
    ATF_REQUIRE(
        poke_until(server, 5s, [&] { return server.get_info(bmi::Info::early_bytes) >= 16384; }));
    poke(server, 5);
    ATF_REQUIRE(!closed_by_server(later.get()));
}

// A peer the user looked up is not held to the frame deadline: its
// application may stop between BMI calls in the middle of a frame.  (A
// peer that only connected is: slow_frames.)
ATF_TEST_CASE_WITHOUT_HEAD(frame_deadline_spares_looked_up_peers);
ATF_TEST_CASE_BODY(frame_deadline_spares_looked_up_peers)
{
    constexpr auto deadline = 1000ms;
    bmi::Bmi server(server_options());
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::frame_timeout_ms, deadline.count()), 0);
    const bmi::ContextId sctx = server.open_context();
    const std::string claimed = "tcp://198.18.0.14:1";
    const bmi::Addr peer = server.addr_lookup(claimed);
    ATF_REQUIRE(peer != bmi::no_addr);
    std::array<char, 200> buf{};
    const bmi::Post r = server.post_recv(peer, buf.data(), buf.size(), 9, nullptr, sctx);
    ATF_REQUIRE(r.ok() && !r.completed);
    UniqueFd fd = raw_connect(port_of(server.listen_addresses().at(0)), 2);
    std::vector<std::byte> out = hello(claimed);
    const std::vector<std::byte> m = message(tcp::FrameType::eager, 100, 9);
    out.insert(out.end(), m.begin(), m.begin() + 60);
    ATF_REQUIRE(send_all(fd.get(), out));
    const auto until = Clock::now() + 3 * deadline;
    while (Clock::now() < until) {
        poke(server);
        std::this_thread::sleep_for(5ms);
    }
    ATF_REQUIRE(!closed_by_server(fd.get()));
    ATF_REQUIRE(send_all(fd.get(), {m.begin() + 60, m.end()}));
    bmi::Completion c;
    ATF_REQUIRE(server.test(r.op, c, 5000));
    ATF_REQUIRE_EQ(c.error, 0);
    ATF_REQUIRE_EQ(c.actual_size, 100U);
}

// After a stall of the server (its application busy), more connections
// are ready than one wait returns (64 events): those not served in that
// progress call have bytes waiting unread when the deadlines are checked.
// That delay is the server's, not the peers': they are read, not closed.
ATF_TEST_CASE_WITHOUT_HEAD(frame_deadline_spares_unread_bytes);
ATF_TEST_CASE_BODY(frame_deadline_spares_unread_bytes)
{
    constexpr auto deadline = 1000ms;
    constexpr int count = 70;
    bmi::Bmi server(server_options("epoll"));
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::frame_timeout_ms, deadline.count()), 0);
    const std::uint16_t port = port_of(server.listen_addresses().at(0));
    const std::vector<std::byte> m = message(tcp::FrameType::unexpected, 100, 1);
    std::vector<UniqueFd> fds;
    for (int n = 0; n < count; ++n) {
        fds.push_back(raw_connect(port, 2 + n % 2));
        std::vector<std::byte> out = hello("tcp://198.18.0.20:" + std::to_string(n + 1));
        out.insert(out.end(), m.begin(), m.begin() + 50);
        ATF_REQUIRE(send_all(fds.back().get(), out));
    }
    ATF_REQUIRE(poke_until(server, 5s,
                           [&] { return server.get_info(bmi::Info::open_connections) == count; }));
    poke(server, 20);                              // every frame begun
    std::this_thread::sleep_for(deadline + 500ms); // the server stalls
    for (const UniqueFd &fd : fds)
        ATF_REQUIRE(send_all(fd.get(), {m.begin() + 50, m.end()}));
    std::this_thread::sleep_for(50ms);
    poke(server); // one progress call: 64 events, then the deadlines
    std::vector<bmi::UnexpectedMessage> in;
    const auto until = Clock::now() + 5s;
    while (in.size() < count && Clock::now() < until)
        server.testunexpected(in, count, 10);
    const std::uint64_t open = server.get_info(bmi::Info::open_connections);
    std::printf("%zu of %d messages, %llu connections open\n", in.size(), count,
                static_cast<unsigned long long>(open));
    ATF_REQUIRE_EQ(in.size(), static_cast<std::size_t>(count));
    ATF_REQUIRE_EQ(open, static_cast<std::uint64_t>(count));
}

namespace {

std::chrono::milliseconds ms_since(Clock::time_point t)
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t);
}

// The frame deadline follows progress (set_info frame_timeout_ms 1 s,
// frame_min_rate 1000 bytes/s), on three raw connections at once:
// - a 48 KiB message in 2 KiB pieces every 100 ms (2.4 s in all, moving
//   all the time): delivered, its connection kept;
// - a 2000-byte frame, one byte every 300 ms after the first 50: closed
//   once 1 s + 2040 bytes at 1000 bytes/s (3 s) have passed, long before it
//   would finish;
// - 500 bytes of a 2000-byte frame and then nothing: closed 1 s after its
//   last byte.
// Before, the deadline counted from the first byte whatever came after: the
// first two were closed after 1 s.
void frame_progress(const char *engine)
{
    constexpr auto timeout = 1000ms;
    constexpr std::size_t big = std::size_t{48} << 10U;
    bmi::Bmi server(server_options(engine));
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::frame_timeout_ms, timeout.count()), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::frame_min_rate, 1000), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::unexpected_limit, std::size_t{64} << 10U), 0);
    const std::uint16_t port = port_of(server.listen_addresses().at(0));
    UniqueFd legit = raw_connect(port, 2);
    UniqueFd trickle = raw_connect(port, 3);
    UniqueFd stalled = raw_connect(port, 4);
    ATF_REQUIRE(send_all(legit.get(), hello("tcp://198.18.0.30:1")));
    ATF_REQUIRE(send_all(trickle.get(), hello("tcp://198.18.0.31:1")));
    ATF_REQUIRE(send_all(stalled.get(), hello("tcp://198.18.0.32:1")));
    poke(server, 10);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::open_connections), 3U);

    const std::vector<std::byte> slow = message(tcp::FrameType::unexpected, 2000, 2);
    std::vector<std::byte> large = message(tcp::FrameType::unexpected, big, 1);
    for (std::size_t i = tcp::frame_header_size; i < large.size(); ++i)
        large[i] = static_cast<std::byte>(i * 7);
    const auto start = Clock::now();
    ATF_REQUIRE(send_all(trickle.get(), {slow.begin(), slow.begin() + 50}));
    ATF_REQUIRE(send_all(stalled.get(), {slow.begin(), slow.begin() + 500}));
    std::size_t large_sent = 0;
    std::size_t trickle_sent = 50;
    auto next_piece = start;
    auto next_byte = start + 300ms;
    std::chrono::milliseconds trickle_at{-1};
    std::chrono::milliseconds stalled_at{-1};
    std::vector<bmi::UnexpectedMessage> in;
    while (ms_since(start) < 6s && (trickle_at.count() < 0 || stalled_at.count() < 0 ||
                                    in.empty() || large_sent < large.size())) {
        const auto now = Clock::now();
        if (large_sent < large.size() && now >= next_piece) {
            const std::size_t n = std::min<std::size_t>(2048, large.size() - large_sent);
            ATF_REQUIRE(send_all(legit.get(), {large.begin() + static_cast<long>(large_sent),
                                               large.begin() + static_cast<long>(large_sent + n)}));
            large_sent += n;
            next_piece += 100ms;
        }
        if (trickle_at.count() < 0 && now >= next_byte && trickle_sent < slow.size()) {
            send_all(trickle.get(), {slow[trickle_sent++]});
            next_byte += 300ms;
        }
        server.testunexpected(in, 4, 0);
        if (trickle_at.count() < 0 && closed_by_server(trickle.get()))
            trickle_at = ms_since(start);
        if (stalled_at.count() < 0 && closed_by_server(stalled.get()))
            stalled_at = ms_since(start);
        std::this_thread::sleep_for(5ms);
    }
    std::printf("%s: the 48 KiB message %s after %lld ms; trickle closed after %lld ms (%zu "
                "bytes sent), the stalled frame after %lld ms\n",
                engine, in.empty() ? "not delivered" : "delivered",
                static_cast<long long>(ms_since(start).count()),
                static_cast<long long>(trickle_at.count()), trickle_sent,
                static_cast<long long>(stalled_at.count()));
    ATF_REQUIRE_EQ(in.size(), 1U);
    ATF_REQUIRE_EQ(in[0].data().size(), big);
    ATF_REQUIRE(std::equal(in[0].data().begin(), in[0].data().end(),
                           large.begin() + tcp::frame_header_size));
    ATF_REQUIRE(!closed_by_server(legit.get()));
    // 1 s + 2040 bytes at 1000 bytes/s; checked every 250 ms.
    ATF_REQUIRE(trickle_at >= 2800ms && trickle_at <= 4500ms);
    ATF_REQUIRE(trickle_sent < slow.size());
    // 1 s after its last byte (at the start), not at 3 s.
    ATF_REQUIRE(stalled_at >= 800ms && stalled_at <= 2200ms);
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(frame_progress_epoll);
ATF_TEST_CASE_BODY(frame_progress_epoll)
{
    frame_progress("epoll");
}

ATF_TEST_CASE_WITHOUT_HEAD(frame_progress_uring);
ATF_TEST_CASE_BODY(frame_progress_uring)
{
    frame_progress("uring");
}

namespace {

// A connection paused on its peer's unexpected budget (32 KiB here) because
// the application holds that peer's messages: it reads again each time one
// is freed, and once none has been for the idle timeout (2.5 s) it is closed,
// freeing its slot and caps; the messages held stay valid, and the peer
// goes once they are freed.  Before, it stayed open and unread forever.
void pause_deadline(const char *engine)
{
    constexpr auto ttl = 2500ms;
    constexpr std::size_t size = 8192;
    bmi::Bmi server(server_options(engine));
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::idle_timeout_ms, ttl.count()), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::unexpected_peer_bytes, 4 * size), 0);
    const std::uint16_t port = port_of(server.listen_addresses().at(0));
    UniqueFd fd = raw_connect(port, 2);
    std::vector<std::byte> out = hello("tcp://198.18.0.33:1");
    for (int i = 0; i < 12; ++i) {
        const std::vector<std::byte> m = message(tcp::FrameType::unexpected, size, 1);
        out.insert(out.end(), m.begin(), m.end());
    }
    pump(server, fd.get(), out);
    std::vector<bmi::UnexpectedMessage> held;
    const auto take = [&] {
        poke(server, 5);
        server.testunexpected(held, 64, 0);
    };
    take();
    ATF_REQUIRE_EQ(held.size(), 4U); // the budget: paused
    const auto start = Clock::now();
    // Freed one at a time within the timeout: read again each time.
    auto last_free = start;
    for (int i = 0; i < 3; ++i) {
        while (ms_since(last_free) < 1200ms) {
            take();
            std::this_thread::sleep_for(5ms);
        }
        held.erase(held.begin());
        last_free = Clock::now();
        ATF_REQUIRE(poke_until(server, 2s, [&] {
            server.testunexpected(held, 64, 0);
            return held.size() == 4;
        }));
    }
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::open_connections), 1U);
    ATF_REQUIRE(ms_since(start) > ttl); // paused longer in all than the timeout
    // Then nothing freed: closed after the timeout.
    ATF_REQUIRE(poke_until(server, ttl + 3s,
                           [&] { return server.get_info(bmi::Info::open_connections) == 0; }));
    const auto closed_after = ms_since(last_free);
    std::printf("%s: closed %lld ms after the last message was freed\n", engine,
                static_cast<long long>(closed_after.count()));
    ATF_REQUIRE(closed_after >= ttl - 100ms);
    ATF_REQUIRE(poke_until(server, 2s, [&] { return closed_by_server(fd.get()); }));
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::peers), 1U); // its messages hold it
    for (const bmi::UnexpectedMessage &m : held)
        ATF_REQUIRE_EQ(m.data().size(), size);
    held.clear();
    poke(server, 5);
    ATF_REQUIRE_EQ(server.get_info(bmi::Info::peers), 0U);
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(pause_deadline_epoll);
ATF_TEST_CASE_BODY(pause_deadline_epoll)
{
    pause_deadline("epoll");
}

ATF_TEST_CASE_WITHOUT_HEAD(pause_deadline_uring);
ATF_TEST_CASE_BODY(pause_deadline_uring)
{
    pause_deadline("uring");
}

namespace {

// Peers that ask and never read the answers, with small socket buffers:
// one sends 64-byte requests the server answers with 1 KiB each (its
// application answers everything), another pings.  With send_queue_bytes
// at 64 KiB the server stops reading from each once its answers queue up
// (the bytes it holds to send stay bounded, far below what was asked), and
// closes each after the idle timeout (2 s) of not draining; a legitimate
// client is answered throughout.  Before, the server read on and queued
// every answer: memory without bound.
void send_queue(const char *engine)
{
    constexpr auto ttl = 2000ms;
    constexpr std::size_t cap = std::size_t{64} << 10U;
    constexpr std::size_t bound = std::size_t{512} << 10U;
    bmi::Bmi server(server_options(engine));
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::idle_timeout_ms, ttl.count()), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::send_queue_bytes, cap), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::unexpected_limit, 1024), 0);
    ATF_REQUIRE_EQ(server.set_info(bmi::Info::unexpected_peer_bytes, 8192), 0);
    const bmi::ContextId sctx = server.open_context();
    const bmi::ContextId replies = server.open_context();
    const std::string url = server.listen_addresses().at(0);
    Legit legit(url);
    ATF_REQUIRE(legit.round_trip(server, sctx, 1, 5s));
    const std::vector<std::byte> answer(1024, std::byte{0x33});

    struct Flood {
        const char *what;
        tcp::FrameType type;
        std::size_t payload;
    };
    for (const Flood &f : {Flood{"requests", tcp::FrameType::unexpected, 64},
                           Flood{"pings", tcp::FrameType::ping, 0}}) {
        UniqueFd fd = raw_connect(port_of(url), 2, true, 4096);
        ATF_REQUIRE(send_all(fd.get(), hello(""))); // a client: not called back
        const std::vector<std::byte> one = message(f.type, f.payload, 1);
        std::vector<std::byte> batch;
        for (int i = 0; i < 1000; ++i)
            batch.insert(batch.end(), one.begin(), one.end());
        std::size_t sent = 0;        // bytes of requests written
        std::size_t answered = 0;    // requests the application answered
        std::size_t most = 0;        // queued bytes, at most
        std::size_t pending = 0;     // of the batch being written
        std::size_t completions = 0; // answers ended (written or failed)
        int rounds = 0;
        const auto serve = [&] {
            std::vector<bmi::UnexpectedMessage> in;
            server.testunexpected(in, 64, 0);
            for (const bmi::UnexpectedMessage &m : in) {
                // Refused at once once its connection is gone (the peer
                // has no listener to call back).
                const bmi::Post p =
                    server.post_send(m.peer(), answer.data(), answer.size(), 1, nullptr, replies);
                ++answered;
                completions += !p.ok() || p.completed ? 1 : 0;
            }
            std::array<bmi::Completion, 64> done{};
            completions += server.testcontext(replies, done, 0);
            most = std::max<std::size_t>(most, server.get_info(bmi::Info::queued_bytes));
        };
        const auto start = Clock::now();
        while (ms_since(start) < 3s && most <= 16 * bound) {
            if (pending == 0)
                pending = batch.size();
            const ssize_t w = ::send(fd.get(), batch.data() + (batch.size() - pending), pending,
                                     MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                pending -= static_cast<std::size_t>(w);
                sent += static_cast<std::size_t>(w);
            }
            serve();
            if (++rounds % 500 == 0)
                ATF_REQUIRE(legit.round_trip(server, sctx, 10 + rounds, 5s));
        }
        const std::size_t asked = sent / one.size();
        std::printf("%s, %s: %zu asked, %zu answered by the application, at most %zu KiB "
                    "queued (cap %zu KiB)\n",
                    engine, f.what, asked, answered, most >> 10, cap >> 10);
        ATF_REQUIRE(most <= bound);
        // Not drained: closed after the idle timeout, its answers failed.
        ATF_REQUIRE(poke_until(server, ttl + 3s, [&] {
            serve();
            return server.get_info(bmi::Info::open_connections) == 1; // the legitimate one
        }));
        ATF_REQUIRE(poke_until(server, 2s, [&] {
            serve();
            return completions == answered;
        }));
        std::printf("%s, %s: closed after %lld ms\n", engine, f.what,
                    static_cast<long long>(ms_since(start).count()));
        ATF_REQUIRE(server.get_info(bmi::Info::queued_bytes) < 4096);
        ATF_REQUIRE(legit.round_trip(server, sctx, 2, 5s));
    }
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(send_queue_epoll);
ATF_TEST_CASE_BODY(send_queue_epoll)
{
    send_queue("epoll");
}

ATF_TEST_CASE_WITHOUT_HEAD(send_queue_uring);
ATF_TEST_CASE_BODY(send_queue_uring)
{
    send_queue("uring");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, connection_caps);
    ATF_ADD_TEST_CASE(tcs, slow_frames);
    ATF_ADD_TEST_CASE(tcs, hello_deadline);
    ATF_ADD_TEST_CASE(tcs, unexpected_flood_epoll);
    ATF_ADD_TEST_CASE(tcs, unexpected_flood_uring);
    ATF_ADD_TEST_CASE(tcs, peer_gone_mid_frame_epoll);
    ATF_ADD_TEST_CASE(tcs, peer_gone_mid_frame_uring);
    ATF_ADD_TEST_CASE(tcs, early_budget_and_peers_freed);
    ATF_ADD_TEST_CASE(tcs, paused_reset_epoll);
    ATF_ADD_TEST_CASE(tcs, paused_reset_uring);
    ATF_ADD_TEST_CASE(tcs, paused_fin);
    ATF_ADD_TEST_CASE(tcs, early_outlives_connection);
    ATF_ADD_TEST_CASE(tcs, empty_early_frames_charged);
    ATF_ADD_TEST_CASE(tcs, early_expires);
    ATF_ADD_TEST_CASE(tcs, frame_deadline_spares_looked_up_peers);
    ATF_ADD_TEST_CASE(tcs, frame_deadline_spares_unread_bytes);
    ATF_ADD_TEST_CASE(tcs, frame_progress_epoll);
    ATF_ADD_TEST_CASE(tcs, frame_progress_uring);
    ATF_ADD_TEST_CASE(tcs, pause_deadline_epoll);
    ATF_ADD_TEST_CASE(tcs, pause_deadline_uring);
    ATF_ADD_TEST_CASE(tcs, send_queue_epoll);
    ATF_ADD_TEST_CASE(tcs, send_queue_uring);
}
