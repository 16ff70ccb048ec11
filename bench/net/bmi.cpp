// net-bmi: the network benchmark on BMI (bench/net/DRIVERS.md), one
// executable for the drivers bmi-epoll and bmi-uring (--engine) and for the
// ib method (--listen ib://..., make bench-ib).
//
// The parent opens a server Bmi listening on --listen (tcp://127.0.0.1:0)
// and fork()s its peers, each with a client Bmi of its own created after the
// fork.  With an explicit port the peers are forked first and the server
// opened after them, so that no transport state crosses a fork (an RDMA
// device context must not); the peers retry until it listens.  A
// peer introduces itself with an unexpected "hello" carrying its index, so
// the parent learns its address the way pvfs-server learns a client's.  The
// patterns use BMI as pvfs will: a window of posted sends and receives for
// bw, send/receive pairs for lat, and for m2o unexpected requests answered
// with expected replies whose receive the client posts before asking.
#include "driver.hpp"
#include "process.hpp"

#include <bmi/bmi.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include <unistd.h>

namespace {

// Tags: one per kind of message, so that each kind is ordered on its own.
constexpr bmi::Tag tag_hello = 1;   // unexpected, peer -> parent: its index
constexpr bmi::Tag tag_data = 2;    // bw: the stream; lat: ping and pong
constexpr bmi::Tag tag_ack = 3;     // bw: receiver -> sender
constexpr bmi::Tag tag_go = 4;      // m2o: parent -> client, starts a point
constexpr bmi::Tag tag_request = 5; // m2o: unexpected, client -> parent
constexpr bmi::Tag tag_reply = 6;   // m2o: parent -> client

// A test* call sleeps at most this long before its caller looks again; the
// driver's --timeout bounds the whole run, BMI's idle timeout each op.
constexpr int poll_ms = 1000;

// Where the parent listens (--listen).
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables): set once by main
std::string g_listen = "tcp://127.0.0.1:0";

std::vector<std::byte> filled(std::size_t size, std::byte pattern)
{
    std::vector<std::byte> buf(size, pattern); // touched now, not while timing
    return buf;
}

std::string error_text(int error)
{
    return std::system_category().message(-error) + " (" + std::to_string(-error) + ")";
}

// One Bmi with a context for the streamed ops (reaped with testcontext)
// and one for single ops (waited for one by one).
class endpoint {
public:
    endpoint(const std::string &engine, bool server)
        : bmi_(options(engine, server)), stream_(bmi_.open_context()), single_(bmi_.open_context())
    {
    }

    [[nodiscard]] bmi::Bmi &bmi() noexcept { return bmi_; }
    [[nodiscard]] bmi::ContextId stream() const noexcept { return stream_; }
    [[nodiscard]] bmi::ContextId single() const noexcept { return single_; }

    bmi::Addr lookup(const std::string &url)
    {
        int error = 0;
        const bmi::Addr addr = bmi_.addr_lookup(url, &error);
        if (addr == bmi::no_addr)
            throw std::runtime_error("addr_lookup " + url + ": " + error_text(error));
        return addr;
    }

    // Waits for a post to finish; returns the bytes moved.
    std::size_t wait(const bmi::Post &post, const char *what)
    {
        if (!post.ok())
            throw std::runtime_error(std::string(what) +
                                     ": post failed: " + error_text(post.error));
        if (post.completed)
            return post.actual_size;
        bmi::Completion c;
        while (!bmi_.test(post.op, c, poll_ms)) {
        }
        if (c.error != 0)
            throw std::runtime_error(std::string(what) + ": " + error_text(c.error));
        return c.actual_size;
    }

    template <typename T> void send_value(bmi::Addr peer, const T &value, bmi::Tag tag)
    {
        wait(bmi_.post_send(peer, &value, sizeof value, tag, nullptr, single_), "send");
    }

    template <typename T> T recv_value(bmi::Addr peer, bmi::Tag tag)
    {
        T value{};
        if (wait(bmi_.post_recv(peer, &value, sizeof value, tag, nullptr, single_), "recv") !=
            sizeof value)
            throw std::runtime_error("recv: short message");
        return value;
    }

    // Reaps finished ops of the stream context; throws on a failed one.
    std::size_t reap(std::span<bmi::Completion> out, int max_idle_ms, const char *what)
    {
        const std::size_t n = bmi_.testcontext(stream_, out, max_idle_ms);
        for (const bmi::Completion &c : out.first(n))
            if (c.error != 0)
                throw std::runtime_error(std::string(what) + ": " + error_text(c.error));
        return n;
    }

private:
    static bmi::Options options(const std::string &engine, bool server)
    {
        bmi::Options o;
        o.tcp_engine = engine == "auto" ? "" : engine;
        if (server) {
            o.role = bmi::Role::server;
            o.listen = {g_listen};
        }
        return o;
    }

    bmi::Bmi bmi_;
    bmi::ContextId stream_;
    bmi::ContextId single_;
};

// The parent's side of the introductions: the address of each peer, by the
// index it announced.
std::vector<bmi::Addr> collect_hellos(endpoint &ep, unsigned peers)
{
    std::vector<bmi::Addr> addrs(peers, bmi::no_addr);
    std::vector<bmi::UnexpectedMessage> msgs;
    unsigned seen = 0;
    while (seen < peers) {
        msgs.clear();
        ep.bmi().testunexpected(msgs, peers, poll_ms);
        for (const bmi::UnexpectedMessage &m : msgs) {
            std::uint32_t index = 0;
            if (m.tag() != tag_hello || m.data().size() != sizeof index)
                throw std::runtime_error("unexpected message before every peer said hello");
            std::memcpy(&index, m.data().data(), sizeof index);
            if (index >= peers || addrs[index] != bmi::no_addr)
                throw std::runtime_error("bad hello from peer " + std::to_string(index));
            addrs[index] = m.peer();
            ++seen;
        }
    }
    return addrs;
}

// A peer's side: its client Bmi, the parent's address, and its hello.
struct peer_link {
    endpoint ep;
    bmi::Addr parent;

    peer_link(const std::string &engine, const std::string &parent_url, std::uint32_t index)
        : ep(engine, false), parent(ep.lookup(parent_url))
    {
        // The parent may not listen yet (see the top of this file).
        const double deadline = bench::now() + 20.0;
        for (;;) {
            const bmi::Post p = ep.bmi().post_sendunexpected(parent, &index, sizeof index,
                                                             tag_hello, nullptr, ep.single());
            int error = p.error;
            if (error == 0 && !p.completed) {
                bmi::Completion c;
                while (!ep.bmi().test(p.op, c, poll_ms)) {
                }
                error = c.error;
            }
            if (error == 0)
                return;
            if (error != -ECONNREFUSED || bench::now() > deadline)
                throw std::runtime_error("hello: " + error_text(error));
            ::usleep(50000);
        }
    }
};

// The parent's endpoint and the URL its peers call.
struct parent_side {
    std::string engine;
    std::unique_ptr<endpoint> ep;
    std::string url;

    endpoint &open()
    {
        if (!ep)
            ep = std::make_unique<endpoint>(engine, true);
        return *ep;
    }
};

// ---- bw: parent sends, child receives ---------------------------------------

// Sends `count` messages of msg keeping at most `window` outstanding.
void send_stream(endpoint &ep, bmi::Addr peer, std::span<const std::byte> msg, std::uint64_t count,
                 std::size_t window, std::vector<bmi::Completion> &done)
{
    std::uint64_t posted = 0;
    std::uint64_t finished = 0;
    std::size_t outstanding = 0;
    while (finished < count) {
        while (posted < count && outstanding < window) {
            const bmi::Post p =
                ep.bmi().post_send(peer, msg.data(), msg.size(), tag_data, nullptr, ep.stream());
            if (!p.ok())
                throw std::runtime_error("post_send: " + error_text(p.error));
            ++posted;
            if (p.completed)
                ++finished;
            else
                ++outstanding;
        }
        if (outstanding > 0) {
            const std::size_t n = ep.reap(done, poll_ms, "send");
            outstanding -= n;
            finished += n;
        }
    }
}

// Receives `count` messages of `size` into the window's buffers, keeping
// every free buffer posted.
void recv_stream(endpoint &ep, bmi::Addr peer, std::vector<bmi::Memory> &bufs, std::size_t size,
                 std::uint64_t count, std::vector<bmi::Completion> &done)
{
    std::vector<std::size_t> free_slots(bufs.size());
    for (std::size_t i = 0; i < bufs.size(); ++i)
        free_slots[i] = bufs.size() - 1 - i;
    std::uint64_t posted = 0;
    std::uint64_t finished = 0;
    const auto check = [size](std::size_t actual) {
        if (actual != size)
            throw std::runtime_error("received " + std::to_string(actual) + " bytes, expected " +
                                     std::to_string(size));
    };
    while (finished < count) {
        while (posted < count && !free_slots.empty()) {
            const std::size_t slot = free_slots.back();
            // NOLINTNEXTLINE(performance-no-int-to-ptr): the slot rides in user_ptr
            auto *user = reinterpret_cast<void *>(slot);
            const bmi::Post p =
                ep.bmi().post_recv(peer, bufs[slot].data(), size, tag_data, user, ep.stream());
            if (!p.ok())
                throw std::runtime_error("post_recv: " + error_text(p.error));
            ++posted;
            if (p.completed) {
                check(p.actual_size);
                ++finished;
            } else {
                free_slots.pop_back();
            }
        }
        if (finished < count) {
            const std::size_t n = ep.reap(done, poll_ms, "recv");
            for (const bmi::Completion &c : std::span(done).first(n)) {
                check(c.actual_size);
                // NOLINTNEXTLINE(performance-no-int-to-ptr): the slot rides in user_ptr
                free_slots.push_back(reinterpret_cast<std::uintptr_t>(c.user_ptr));
            }
            finished += n;
        }
    }
}

void bw_receiver(const std::string &engine, const std::string &parent_url, const bench::options &o)
{
    peer_link link(engine, parent_url, 0);
    endpoint &ep = link.ep;
    std::vector<bmi::Completion> done(o.window);
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            const std::size_t window = o.window_for(size);
            const std::uint64_t msgs = o.messages_for(size);
            // memalloc: registered once for RDMA, as a pvfs server's buffers are.
            std::vector<bmi::Memory> bufs;
            for (std::size_t w = 0; w < window; ++w) {
                bufs.push_back(ep.bmi().memalloc(link.parent, size));
                std::memset(bufs.back().data(), 0xa5, size);
            }
            done.resize(std::max(done.size(), window));
            recv_stream(ep, link.parent, bufs, size, std::min<std::uint64_t>(window, msgs), done);
            ep.send_value<std::int64_t>(link.parent, 0, tag_ack);
            const double cpu0 = bench::cpu_seconds();
            recv_stream(ep, link.parent, bufs, size, msgs, done);
            const double cpu = bench::cpu_seconds() - cpu0;
            ep.send_value<std::int64_t>(link.parent, static_cast<std::int64_t>(cpu * 1e9), tag_ack);
        }
    }
}

void run_bw(parent_side &ps, const bench::options &o)
{
    bench::child_process receiver =
        bench::spawn("receiver", [&] { bw_receiver(ps.engine, ps.url, o); });
    endpoint &ep = ps.open();
    const bmi::Addr peer = collect_hellos(ep, 1).at(0);

    bmi::Memory mem = ep.bmi().memalloc(peer, o.largest());
    std::memset(mem.data(), 0x5a, mem.size());
    const std::span<const std::byte> buf(mem.data(), mem.size());
    std::vector<bmi::Completion> done(o.window);
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            const std::size_t window = o.window_for(size);
            const std::uint64_t msgs = o.messages_for(size);
            done.resize(std::max(done.size(), window));
            const auto msg = std::span(buf).first(size);
            send_stream(ep, peer, msg, std::min<std::uint64_t>(window, msgs), window, done);
            ep.recv_value<std::int64_t>(peer, tag_ack);

            std::int64_t peer_cpu_ns = 0;
            const bmi::Post ack = ep.bmi().post_recv(peer, &peer_cpu_ns, sizeof peer_cpu_ns,
                                                     tag_ack, nullptr, ep.single());
            const double t0 = bench::now();
            const double cpu0 = bench::cpu_seconds();
            send_stream(ep, peer, msg, msgs, window, done);
            ep.wait(ack, "ack");
            const double seconds = bench::now() - t0;
            const double cpu =
                bench::cpu_seconds() - cpu0 + static_cast<double>(peer_cpu_ns) * 1e-9;
            bench::report_bw(size, rep, window, msgs, seconds, cpu);
        }
    }
    receiver.join("receiver");
}

// ---- lat: parent pings, child echoes -----------------------------------------

void lat_echo(const std::string &engine, const std::string &parent_url, const bench::options &o)
{
    peer_link link(engine, parent_url, 0);
    endpoint &ep = link.ep;
    // Two ping buffers: the next ping's receive is posted before the pong
    // goes (pre-posting, as MPI programs do), so BMI can tell the parent
    // that the receive waits (READY) and the ping comes without RTS/CTS.
    std::array<std::vector<std::byte>, 2> ping{filled(o.largest(), std::byte{0xa5}),
                                               filled(o.largest(), std::byte{0xa5})};
    const std::vector<std::byte> pong = filled(o.largest(), std::byte{0x5a});
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            const unsigned count = o.warmup + o.iters;
            bmi::Post next = ep.bmi().post_recv(link.parent, ping[0].data(), size, tag_data,
                                                nullptr, ep.single());
            for (unsigned i = 0; i < count; ++i) {
                const bmi::Post r = next;
                if (ep.wait(r, "recv ping") != size)
                    throw std::runtime_error("short ping");
                if (i + 1 < count)
                    next = ep.bmi().post_recv(link.parent, ping[(i + 1) % 2].data(), size, tag_data,
                                              nullptr, ep.single());
                ep.wait(ep.bmi().post_send(link.parent, pong.data(), size, tag_data, nullptr,
                                           ep.single()),
                        "send pong");
            }
        }
    }
}

void run_lat(parent_side &ps, const bench::options &o)
{
    bench::child_process echo = bench::spawn("echo", [&] { lat_echo(ps.engine, ps.url, o); });
    endpoint &ep = ps.open();
    const bmi::Addr peer = collect_hellos(ep, 1).at(0);

    const std::vector<std::byte> ping = filled(o.largest(), std::byte{0x5a});
    std::vector<std::byte> pong = filled(o.largest(), std::byte{0xa5});
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            std::vector<double> round_trips;
            round_trips.reserve(o.iters);
            double t0 = bench::now();
            double start = t0;
            for (unsigned i = 0; i < o.warmup + o.iters; ++i) {
                if (i == o.warmup)
                    t0 = bench::now();
                if (i >= o.warmup)
                    start = bench::now();
                // The receive is posted first, so the pong never waits in
                // BMI's buffers for it.
                const bmi::Post r =
                    ep.bmi().post_recv(peer, pong.data(), size, tag_data, nullptr, ep.single());
                ep.wait(ep.bmi().post_send(peer, ping.data(), size, tag_data, nullptr, ep.single()),
                        "send ping");
                if (ep.wait(r, "recv pong") != size)
                    throw std::runtime_error("short pong");
                if (i >= o.warmup)
                    round_trips.push_back(bench::now() - start);
            }
            bench::report_lat(size, rep, bench::now() - t0, std::move(round_trips));
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
    std::uint32_t client;
    std::uint64_t iters;
    std::uint64_t nanoseconds;
};

// The parent sends every client its sequence number ("go") before each
// point; the clients start their clocks when it arrives.
using go_message = std::uint32_t;

void m2o_client(const std::string &engine, const std::string &parent_url, std::uint32_t index,
                const bench::options &o)
{
    peer_link link(engine, parent_url, index);
    endpoint &ep = link.ep;
    bmi::Bmi &b = ep.bmi();
    std::vector<std::byte> request = filled(o.request, std::byte{0x5a});
    std::vector<std::byte> reply = filled(o.largest(), std::byte{0xa5});
    const auto put_header = [&](const request_header &h) {
        std::memcpy(request.data(), &h, sizeof h);
    };
    go_message seq = 0;
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t reply_size : o.replies) {
            if (const auto go = ep.recv_value<go_message>(link.parent, tag_go); go != seq)
                throw std::runtime_error("out of step: go " + std::to_string(go) + ", expected " +
                                         std::to_string(seq));
            put_header({op_request, index, 0, 0});
            const double start = bench::now();
            double elapsed = 0;
            std::uint64_t iters = 0;
            do {
                const bmi::Post r = b.post_recv(link.parent, reply.data(), reply_size, tag_reply,
                                                nullptr, ep.single());
                ep.wait(b.post_sendunexpected(link.parent, request.data(), request.size(),
                                              tag_request, nullptr, ep.single()),
                        "send request");
                if (ep.wait(r, "recv reply") != reply_size)
                    throw std::runtime_error("short reply");
                ++iters;
                elapsed = bench::now() - start;
            } while (elapsed < o.duration);
            put_header({op_bye, index, iters, static_cast<std::uint64_t>(elapsed * 1e9)});
            ep.wait(b.post_sendunexpected(link.parent, request.data(), request.size(), tag_request,
                                          nullptr, ep.single()),
                    "send bye");
            ++seq;
        }
    }
    // The parent's last word: the connection may close now without its
    // last reply or bye being lost in flight.
    (void)ep.recv_value<go_message>(link.parent, tag_go);
}

class m2o_server {
public:
    m2o_server(endpoint &ep, const bench::options &o, std::vector<bmi::Addr> clients)
        : ep_(ep), o_(o), reply_(filled(o.largest(), std::byte{0x5a})),
          clients_(std::move(clients)), results_(clients_.size()), done_(clients_.size() * 2 + 1)
    {
        for (std::size_t k = 0; k < clients_.size(); ++k)
            index_[clients_[k]] = static_cast<std::uint32_t>(k);
        msgs_.reserve(clients_.size());
    }

    // One point: go to every client, serve until each has said bye, report.
    void run_point(unsigned rep, std::size_t reply_size, go_message seq)
    {
        send_go(seq);
        for (result &r : results_)
            r.said_bye = false;
        std::size_t byes = 0;
        while (byes < clients_.size()) {
            msgs_.clear();
            ep_.bmi().testunexpected(msgs_, clients_.size(), outstanding_ > 0 ? 0 : poll_ms);
            for (const bmi::UnexpectedMessage &m : msgs_)
                byes += serve(m, reply_size);
            if (outstanding_ > 0)
                outstanding_ -= ep_.reap(done_, 0, "send reply");
        }
        drain();
        for (std::size_t k = 0; k < results_.size(); ++k)
            bench::report_m2o(o_.clients, o_.request, reply_size, rep, static_cast<unsigned>(k),
                              results_[k].iters,
                              static_cast<double>(results_[k].nanoseconds) * 1e-9);
    }

    // Tells every client the run is over (see m2o_client).
    void finish() { send_go(0); }

private:
    struct result {
        std::uint64_t iters = 0;
        std::uint64_t nanoseconds = 0;
        bool said_bye = false;
    };

    void send_go(go_message seq)
    {
        go_ = seq;
        for (const bmi::Addr a : clients_) {
            const bmi::Post p =
                ep_.bmi().post_send(a, &go_, sizeof go_, tag_go, nullptr, ep_.stream());
            if (!p.ok())
                throw std::runtime_error("post_send go: " + error_text(p.error));
            if (!p.completed)
                ++outstanding_;
        }
        drain();
    }

    void drain()
    {
        while (outstanding_ > 0)
            outstanding_ -= ep_.reap(done_, poll_ms, "send");
    }

    // Answers a request; returns 1 for a bye, else 0.
    std::size_t serve(const bmi::UnexpectedMessage &m, std::size_t reply_size)
    {
        request_header h{};
        const auto it = index_.find(m.peer());
        if (m.tag() != tag_request || m.data().size() != o_.request || it == index_.end())
            throw std::runtime_error("malformed request");
        std::memcpy(&h, m.data().data(), sizeof h);
        result &r = results_[it->second];
        if (h.client != it->second || r.said_bye)
            throw std::runtime_error("client " + std::to_string(it->second) +
                                     ": request out of turn");
        if (h.op == op_bye) {
            r = {h.iters, h.nanoseconds, true};
            return 1;
        }
        if (h.op != op_request)
            throw std::runtime_error("unknown request op " + std::to_string(h.op));
        const bmi::Post p = ep_.bmi().post_send(m.peer(), reply_.data(), reply_size, tag_reply,
                                                nullptr, ep_.stream());
        if (!p.ok())
            throw std::runtime_error("post_send reply: " + error_text(p.error));
        if (!p.completed)
            ++outstanding_;
        return 0;
    }

    endpoint &ep_;
    const bench::options &o_;
    std::vector<std::byte> reply_;
    std::vector<bmi::Addr> clients_;
    std::unordered_map<bmi::Addr, std::uint32_t> index_;
    std::vector<result> results_;
    std::vector<bmi::UnexpectedMessage> msgs_;
    std::vector<bmi::Completion> done_;
    std::size_t outstanding_ = 0;
    go_message go_ = 0;
};

void run_m2o(parent_side &ps, const bench::options &o)
{
    std::vector<bench::child_process> clients;
    clients.reserve(o.clients);
    for (std::uint32_t k = 0; k < o.clients; ++k)
        clients.push_back(bench::spawn("client " + std::to_string(k),
                                       [&, k] { m2o_client(ps.engine, ps.url, k, o); }));
    endpoint &ep = ps.open();
    m2o_server server(ep, o, collect_hellos(ep, o.clients));
    go_message seq = 0;
    for (unsigned rep = 0; rep < o.reps; ++rep)
        for (const std::size_t reply_size : o.replies)
            server.run_point(rep, reply_size, seq++);
    server.finish();
    for (unsigned k = 0; k < o.clients; ++k)
        clients[k].join("client " + std::to_string(k));
}

int run_main(int argc, char **argv)
{
    bench::options o;
    parent_side ps;
    // auto: what programs using BMI get by default (BMI_TCP_ENGINE, else
    // io_uring where the kernel allows it); bench-net names one.
    ps.engine = "auto";
    const std::vector<bench::extra_option> extra{
        {"--engine",
         ps.engine,
         "BMI TCP progress engine (auto: BMI's default)",
         {"epoll", "uring", "auto"}},
        {"--listen",
         g_listen,
         "the parent's listen URL (tcp://127.0.0.1:0; an explicit port forks the peers before "
         "the server opens, as ib:// needs)",
         {}}};
    if (const int status = bench::parse(argc, argv, "net-bmi", o, extra); status >= 0)
        return status;
    bench::arm_timeout(o.timeout);

    const bool late = !g_listen.ends_with(":0");
    if (late) {
        ps.url = g_listen;
    } else {
        // The parent's Bmi, made before the peers are forked: its listening
        // address is what they connect to.
        try {
            ps.open();
            ps.url = ps.ep->bmi().listen_addresses().at(0);
        } catch (const std::system_error &e) {
            // Only a missing io_uring (disabled by sysctl, refused in a
            // container) means "cannot run here"; anything else is a failure.
            if (ps.engine == "uring" &&
                std::string_view(e.what()).find("io_uring") != std::string_view::npos) {
                bench::error("engine uring cannot run here: " + std::string(e.what()));
                return bench::exit_unsupported;
            }
            bench::error(e.what());
            return 1;
        }
    }
    try {
        switch (o.which) {
        case bench::pattern::bw:
            run_bw(ps, o);
            break;
        case bench::pattern::lat:
            run_lat(ps, o);
            break;
        case bench::pattern::m2o:
            run_m2o(ps, o);
            break;
        }
    } catch (const std::exception &e) {
        bench::error(e.what());
        return 1;
    }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    try {
        return run_main(argc, argv);
    } catch (const std::exception &e) {
        bench::error(e.what());
        return 1;
    }
}
