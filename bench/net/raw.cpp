// net-raw: the raw-socket baseline of the network benchmark, what a
// competent engineer writes with plain TCP (bench/net/DRIVERS.md).
//
// One command does it all: the parent listens on 127.0.0.1 port 0 and
// fork()s its peers, which connect to it.  bw and lat use two processes with
// blocking sockets; m2o is one epoll server (edge-triggered, non-blocking
// sockets) in the parent and one client process per client.  Every socket
// has TCP_NODELAY; socket buffers are the kernel's (autotuned).  The
// parent prints every result line; children report to it over their socket
// and die with it (PR_SET_PDEATHSIG).
#include "driver.hpp"
#include "process.hpp"

#include <pvfs/unique_fd.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace {

using pvfs::UniqueFd;

using bytes = std::span<std::byte>;
using const_bytes = std::span<const std::byte>;

[[noreturn]] void fail_errno(const std::string &what)
{
    throw std::system_error(errno, std::generic_category(), what);
}

void set_nodelay(int fd)
{
    const int one = 1;
    if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        fail_errno("setsockopt TCP_NODELAY");
}

sockaddr_in loopback(std::uint16_t port)
{
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

// Listens on 127.0.0.1, port chosen by the kernel (so parallel runs never
// collide); returns the socket and sets `port`.
UniqueFd listen_loopback(int backlog, std::uint16_t &port)
{
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0)
        fail_errno("socket");
    sockaddr_in sa = loopback(0);
    socklen_t len = sizeof sa;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
    auto *addr = reinterpret_cast<sockaddr *>(&sa);
    if (::bind(fd.get(), addr, len) < 0)
        fail_errno("bind 127.0.0.1:0");
    if (::listen(fd.get(), backlog) < 0)
        fail_errno("listen");
    if (::getsockname(fd.get(), addr, &len) < 0)
        fail_errno("getsockname");
    port = ntohs(sa.sin_port);
    return fd;
}

UniqueFd connect_loopback(std::uint16_t port)
{
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0)
        fail_errno("socket");
    const sockaddr_in sa = loopback(port);
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
    if (::connect(fd.get(), reinterpret_cast<const sockaddr *>(&sa), sizeof sa) < 0)
        fail_errno("connect 127.0.0.1:" + std::to_string(port));
    set_nodelay(fd.get());
    return fd;
}

UniqueFd accept_one(const UniqueFd &listener)
{
    int fd = -1;
    while ((fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC)) < 0 && errno == EINTR) {
    }
    if (fd < 0)
        fail_errno("accept");
    UniqueFd conn(fd);
    set_nodelay(conn.get());
    return conn;
}

void send_all(int fd, const_bytes buf)
{
    while (!buf.empty()) {
        const ssize_t n = ::send(fd, buf.data(), buf.size(), MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fail_errno("send");
        }
        buf = buf.subspan(static_cast<std::size_t>(n));
    }
}

void recv_all(int fd, bytes buf)
{
    while (!buf.empty()) {
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_WAITALL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fail_errno("recv");
        }
        if (n == 0)
            throw std::runtime_error("recv: the peer closed the connection");
        buf = buf.subspan(static_cast<std::size_t>(n));
    }
}

template <typename T> void send_value(int fd, const T &value)
{
    send_all(fd, std::as_bytes(std::span(&value, 1)));
}

template <typename T> T recv_value(int fd)
{
    T value{};
    recv_all(fd, std::as_writable_bytes(std::span(&value, 1)));
    return value;
}

std::vector<std::byte> filled(std::size_t size, std::byte pattern)
{
    std::vector<std::byte> buf(size, pattern); // touched now, not while timing
    return buf;
}

// ---- bw: parent sends, child receives ---------------------------------------

// Per point: a window of untimed messages and an ack (both sides in step),
// then the timed stream of msgs messages and an ack that carries the
// receiver's CPU time.
void bw_receiver(int fd, const bench::options &o)
{
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            const std::size_t window = o.window_for(size);
            const std::uint64_t msgs = o.messages_for(size);
            // The receiver's "posted receives": one buffer per message in
            // flight, filled round-robin.
            std::vector<std::vector<std::byte>> bufs(window, filled(size, std::byte{0xa5}));
            for (std::uint64_t i = 0; i < std::min<std::uint64_t>(window, msgs); ++i)
                recv_all(fd, bufs[i % window]);
            send_value<std::int64_t>(fd, 0);
            const double cpu0 = bench::cpu_seconds();
            for (std::uint64_t i = 0; i < msgs; ++i)
                recv_all(fd, bufs[i % window]);
            const double cpu = bench::cpu_seconds() - cpu0;
            send_value<std::int64_t>(fd, static_cast<std::int64_t>(cpu * 1e9));
        }
    }
}

void run_bw(const bench::options &o)
{
    std::uint16_t port = 0;
    UniqueFd listener = listen_loopback(1, port);
    bench::child_process receiver = bench::spawn("receiver", [&] {
        listener.reset();
        const UniqueFd fd = connect_loopback(port);
        bw_receiver(fd.get(), o);
    });
    const UniqueFd fd = accept_one(listener);
    listener.reset();

    const std::vector<std::byte> buf = filled(o.largest(), std::byte{0x5a});
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            const std::size_t window = o.window_for(size);
            const std::uint64_t msgs = o.messages_for(size);
            const auto msg = std::span(buf).first(size);
            for (std::uint64_t i = 0; i < std::min<std::uint64_t>(window, msgs); ++i)
                send_all(fd.get(), msg);
            recv_value<std::int64_t>(fd.get());

            const double t0 = bench::now();
            const double cpu0 = bench::cpu_seconds();
            for (std::uint64_t i = 0; i < msgs; ++i)
                send_all(fd.get(), msg);
            const auto peer_cpu_ns = recv_value<std::int64_t>(fd.get());
            const double seconds = bench::now() - t0;
            const double cpu =
                bench::cpu_seconds() - cpu0 + static_cast<double>(peer_cpu_ns) * 1e-9;
            bench::report_bw(size, rep, window, msgs, seconds, cpu);
        }
    }
    receiver.join("receiver");
}

// ---- lat: parent pings, child echoes -----------------------------------------

void lat_echo(int fd, const bench::options &o)
{
    std::vector<std::byte> buf = filled(o.largest(), std::byte{0xa5});
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            const auto msg = std::span(buf).first(size);
            for (unsigned i = 0; i < o.warmup + o.iters; ++i) {
                recv_all(fd, msg);
                send_all(fd, msg);
            }
        }
    }
}

void run_lat(const bench::options &o)
{
    std::uint16_t port = 0;
    UniqueFd listener = listen_loopback(1, port);
    bench::child_process echo = bench::spawn("echo", [&] {
        listener.reset();
        const UniqueFd fd = connect_loopback(port);
        lat_echo(fd.get(), o);
    });
    const UniqueFd fd = accept_one(listener);
    listener.reset();

    const std::vector<std::byte> ping = filled(o.largest(), std::byte{0x5a});
    std::vector<std::byte> pong = filled(o.largest(), std::byte{0xa5});
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            double t0 = bench::now();
            for (unsigned i = 0; i < o.warmup + o.iters; ++i) {
                if (i == o.warmup)
                    t0 = bench::now();
                send_all(fd.get(), std::span(ping).first(size));
                recv_all(fd.get(), std::span(pong).first(size));
            }
            bench::report_lat(size, rep, o.iters, bench::now() - t0);
        }
    }
    echo.join("echo");
}

// ---- m2o: parent serves, children are clients --------------------------------

// A request is o.request bytes starting with this header; a client ends
// each point with a "bye" request that carries its count and time.
enum : std::uint32_t { op_request = 1, op_bye = 2 };
struct request_header {
    std::uint32_t op;
    std::uint32_t pad;
    std::uint64_t iters;
    std::uint64_t nanoseconds;
};

// Before each point the server sends every client its sequence number
// ("go"); the clients start their clocks when it arrives.
using go_message = std::uint32_t;

void m2o_client(int fd, const bench::options &o)
{
    std::vector<std::byte> request = filled(o.request, std::byte{0x5a});
    std::vector<std::byte> reply = filled(o.largest(), std::byte{0xa5});
    const auto put_header = [&](const request_header &h) {
        std::memcpy(request.data(), &h, sizeof h);
    };
    go_message seq = 0;
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t reply_size : o.replies) {
            if (const auto go = recv_value<go_message>(fd); go != seq)
                throw std::runtime_error("out of step: go " + std::to_string(go) + ", expected " +
                                         std::to_string(seq));
            put_header({op_request, 0, 0, 0});
            const auto answer = std::span(reply).first(reply_size);
            const double start = bench::now();
            double elapsed = 0;
            std::uint64_t iters = 0;
            do {
                send_all(fd, request);
                recv_all(fd, answer);
                ++iters;
                elapsed = bench::now() - start;
            } while (elapsed < o.duration);
            put_header({op_bye, 0, iters, static_cast<std::uint64_t>(elapsed * 1e9)});
            send_all(fd, request);
            ++seq;
        }
    }
}

// One client connection of the server: the request being read and the
// reply (or go) being written, both resumable.
struct connection {
    UniqueFd fd;
    std::vector<std::byte> in;
    std::size_t in_done = 0;
    const_bytes out;
    go_message go = 0;
    std::uint64_t iters = 0;
    std::uint64_t nanoseconds = 0;
    bool said_bye = false;
    bool closed = false; // the client has closed its end (after its last bye)

    // Writes what it can of `out`; the rest waits for EPOLLOUT.
    void flush()
    {
        while (!out.empty()) {
            const ssize_t n = ::send(fd.get(), out.data(), out.size(), MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    return;
                fail_errno("send");
            }
            out = out.subspan(static_cast<std::size_t>(n));
        }
    }
};

class m2o_server {
public:
    m2o_server(const bench::options &o, std::vector<UniqueFd> fds)
        : o_(o), reply_(filled(o.largest(), std::byte{0x5a})),
          epoll_(::epoll_create1(EPOLL_CLOEXEC)), events_(fds.size())
    {
        if (epoll_.get() < 0)
            fail_errno("epoll_create1");
        conns_.reserve(fds.size());
        for (auto &fd : fds) {
            if (::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK) < 0)
                fail_errno("fcntl O_NONBLOCK");
            epoll_event ev{};
            ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
            ev.data.u32 = static_cast<std::uint32_t>(conns_.size());
            if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &ev) < 0)
                fail_errno("epoll_ctl");
            conns_.push_back(connection{
                std::move(fd), filled(o.request, std::byte{0}), 0, {}, 0, 0, 0, false, false});
        }
    }

    // One point: go to every client, serve until each has said bye, report.
    void run_point(unsigned rep, std::size_t reply_size, go_message seq)
    {
        reply_size_ = reply_size;
        for (std::size_t k = 0; k < conns_.size(); ++k) {
            connection &c = conns_[k];
            if (c.closed)
                throw std::runtime_error("client " + std::to_string(k) +
                                         " closed its connection early");
            c.go = seq;
            c.said_bye = false;
            c.out = std::as_bytes(std::span(&c.go, 1));
            c.flush();
        }
        std::size_t byes = 0;
        while (byes < conns_.size()) {
            const int n =
                ::epoll_wait(epoll_.get(), events_.data(), static_cast<int>(events_.size()), -1);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                fail_errno("epoll_wait");
            }
            for (const auto &ev : std::span(events_).first(static_cast<std::size_t>(n))) {
                const std::uint32_t k = ev.data.u32;
                if ((ev.events & EPOLLERR) != 0U)
                    throw std::runtime_error("client " + std::to_string(k) + ": socket error");
                if ((ev.events & EPOLLOUT) != 0U)
                    conns_[k].flush();
                if ((ev.events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) != 0U)
                    byes += read_requests(k);
            }
        }
        for (std::size_t k = 0; k < conns_.size(); ++k)
            bench::report_m2o(o_.clients, o_.request, reply_size, rep, static_cast<unsigned>(k),
                              conns_[k].iters, static_cast<double>(conns_[k].nanoseconds) * 1e-9);
    }

private:
    // Reads until the socket is drained or a bye arrives; answers each
    // whole request.  Returns 1 after a bye, else 0.
    std::size_t read_requests(std::uint32_t k)
    {
        connection &c = conns_[k];
        for (;;) {
            const auto rest = std::span(c.in).subspan(c.in_done);
            const ssize_t n = ::recv(c.fd.get(), rest.data(), rest.size(), 0);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    return 0;
                fail_errno("recv from client " + std::to_string(k));
            }
            if (n == 0) {
                // After its last bye a client closes; before, it is an error.
                if (!c.said_bye || c.in_done != 0)
                    throw std::runtime_error("client " + std::to_string(k) +
                                             " closed its connection");
                c.closed = true;
                return 0;
            }
            c.in_done += static_cast<std::size_t>(n);
            if (c.in_done < c.in.size())
                continue;
            c.in_done = 0;
            request_header h{};
            std::memcpy(&h, c.in.data(), sizeof h);
            if (h.op == op_bye) {
                // Nothing more comes from this client until the next go
                // (and after the last point, the end of its stream).
                c.iters = h.iters;
                c.nanoseconds = h.nanoseconds;
                c.said_bye = true;
                return 1;
            }
            if (h.op != op_request || !c.out.empty() || c.said_bye)
                throw std::runtime_error("client " + std::to_string(k) + ": unexpected request");
            c.out = std::span(reply_).first(reply_size_);
            c.flush();
        }
    }

    const bench::options &o_;
    std::vector<std::byte> reply_;
    std::size_t reply_size_ = 0;
    UniqueFd epoll_;
    std::vector<epoll_event> events_;
    std::vector<connection> conns_;
};

void run_m2o(const bench::options &o)
{
    std::uint16_t port = 0;
    UniqueFd listener = listen_loopback(static_cast<int>(o.clients), port);
    std::vector<bench::child_process> clients;
    clients.reserve(o.clients);
    for (unsigned k = 0; k < o.clients; ++k) {
        clients.push_back(bench::spawn("client", [&] {
            listener.reset();
            const UniqueFd fd = connect_loopback(port);
            m2o_client(fd.get(), o);
        }));
    }
    std::vector<UniqueFd> fds;
    fds.reserve(o.clients);
    for (unsigned k = 0; k < o.clients; ++k)
        fds.push_back(accept_one(listener));
    listener.reset();

    m2o_server server(o, std::move(fds));
    go_message seq = 0;
    for (unsigned rep = 0; rep < o.reps; ++rep)
        for (const std::size_t reply_size : o.replies)
            server.run_point(rep, reply_size, seq++);
    for (unsigned k = 0; k < o.clients; ++k)
        clients[k].join("client " + std::to_string(k));
}

} // namespace

int main(int argc, char **argv)
{
    bench::options o;
    if (const int status = bench::parse(argc, argv, "net-raw", o); status >= 0)
        return status;
    bench::arm_timeout(o.timeout);
    try {
        switch (o.which) {
        case bench::pattern::bw:
            run_bw(o);
            break;
        case bench::pattern::lat:
            run_lat(o);
            break;
        case bench::pattern::m2o:
            run_m2o(o);
            break;
        }
    } catch (const std::exception &e) {
        bench::error(e.what());
        return 1;
    }
    return 0;
}
