// BMI's semantic suite: immediate completion, rendezvous, list I/O,
// cancellation and failure handling.  Client and server are two Bmi objects
// in one thread; `pump` drives the other side while one side waits.  Every
// case runs over TCP on loopback with each progress engine, and the
// transport-neutral ones over the ib method too when PVFS_TEST_IB_ADDR names
// the address of an RDMA device (the VM rig's Soft-RoCE: vm/ib_test).
#include <atf-c++.hpp>

#include "bmi/bmi.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

// The TCP progress engine under test: every case runs once per engine.
std::string g_engine; // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)
// The method under test, and the host its servers listen on.
std::string g_scheme = "tcp";     // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)
std::string g_host = "127.0.0.1"; // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

std::string url_of(const std::string &hostport)
{
    return g_scheme + "://" + hostport;
}

// Selects the ib method, or skips: it needs an RDMA device.
void use_ib()
{
    const char *addr = std::getenv("PVFS_TEST_IB_ADDR"); // NOLINT(concurrency-mt-unsafe)
    if (addr == nullptr || *addr == '\0')
        ATF_SKIP("no RDMA device here: PVFS_TEST_IB_ADDR is unset (the VM rig sets it, "
                 "vm/ib_test)");
    g_scheme = "ib";
    g_host = addr;
}

bmi::Options client_options()
{
    bmi::Options o;
    o.tcp_engine = g_engine;
    return o;
}

bmi::Options server_options(const std::string &url = {})
{
    bmi::Options o;
    o.role = bmi::Role::server;
    o.listen = {url.empty() ? url_of(g_host + ":0") : url};
    o.tcp_engine = g_engine;
    return o;
}

// Progress only: testunexpected with max 0 moves bytes and returns.
void poke(bmi::Bmi &b)
{
    std::vector<bmi::UnexpectedMessage> none;
    b.testunexpected(none, 0, 0);
}

// Waits for op on `owner`, driving `other` meanwhile; fails after 20 s.
bmi::Completion wait_op(bmi::Bmi &owner, bmi::OpId op, bmi::Bmi &other)
{
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    bmi::Completion c;
    while (!owner.test(op, c, 1)) {
        poke(other);
        if (std::chrono::steady_clock::now() > deadline)
            ATF_FAIL("op did not complete within 20 s");
    }
    return c;
}

// Result of a post that may complete now or later.
bmi::Completion finish(bmi::Bmi &owner, const bmi::Post &p, bmi::Bmi &other)
{
    ATF_REQUIRE_EQ(p.error, 0);
    if (p.completed)
        return bmi::Completion{bmi::no_op, 0, p.actual_size, nullptr, bmi::no_addr, 0};
    return wait_op(owner, p.op, other);
}

bmi::UnexpectedMessage wait_unexpected(bmi::Bmi &server, bmi::Bmi &client)
{
    std::vector<bmi::UnexpectedMessage> got;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (server.testunexpected(got, 1, 1) == 0) {
        poke(client);
        if (std::chrono::steady_clock::now() > deadline)
            ATF_FAIL("no unexpected message within 20 s");
    }
    return std::move(got.front());
}

struct Pair {
    bmi::Bmi server{server_options()};
    bmi::Bmi client{client_options()};
    bmi::ContextId sctx = server.open_context();
    bmi::ContextId cctx = client.open_context();
    bmi::Addr to_server = client.addr_lookup(server.listen_addresses().at(0));
    bmi::Addr to_client = bmi::no_addr;

    // Introduces the client: one unexpected message gives the server its Addr.
    void hello()
    {
        const char msg[] = "hi";
        finish(client, client.post_sendunexpected(to_server, msg, sizeof msg, 1, nullptr, cctx),
               server);
        const bmi::UnexpectedMessage u = wait_unexpected(server, client);
        to_client = u.peer();
        ATF_REQUIRE(to_client != bmi::no_addr);
    }
};

std::vector<unsigned char> pattern(std::size_t n, unsigned seed)
{
    std::vector<unsigned char> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<unsigned char>((i * 131U + seed) & 0xffU);
    return v;
}

} // namespace

// Declares NAME_epoll and NAME_uring running the same body (ATF registers
// test cases by name, so this must be a macro).
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage)
#define BMI_TEST(name)                                                                             \
    static void name##_body();                                                                     \
    ATF_TEST_CASE_WITHOUT_HEAD(name##_epoll);                                                      \
    ATF_TEST_CASE_BODY(name##_epoll)                                                               \
    {                                                                                              \
        g_engine = "epoll";                                                                        \
        name##_body();                                                                             \
    }                                                                                              \
    ATF_TEST_CASE_WITHOUT_HEAD(name##_uring);                                                      \
    ATF_TEST_CASE_BODY(name##_uring)                                                               \
    {                                                                                              \
        g_engine = "uring";                                                                        \
        name##_body();                                                                             \
    }                                                                                              \
    static void name##_body()

// BMI_TEST, plus NAME_ib over the ib method.
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage)
#define BMI_TEST_ALL(name)                                                                         \
    static void name##_body();                                                                     \
    ATF_TEST_CASE_WITHOUT_HEAD(name##_ib);                                                         \
    ATF_TEST_CASE_BODY(name##_ib)                                                                  \
    {                                                                                              \
        use_ib();                                                                                  \
        name##_body();                                                                             \
    }                                                                                              \
    BMI_TEST(name)

BMI_TEST_ALL(unexpected_flow)
{
    Pair p;
    const std::string req = "request-42";
    finish(p.client,
           p.client.post_sendunexpected(p.to_server, req.data(), req.size(), 42, nullptr, p.cctx),
           p.server);
    const bmi::UnexpectedMessage u = wait_unexpected(p.server, p.client);
    ATF_REQUIRE_EQ(u.tag(), 42);
    ATF_REQUIRE_EQ(std::string(reinterpret_cast<const char *>(u.data().data()), u.data().size()),
                   req);
    ATF_REQUIRE(!p.server.rev_lookup(u.peer()).empty());
    // The server answers on the same connection.
    std::vector<char> reply(100);
    const bmi::Post r =
        p.client.post_recv(p.to_server, reply.data(), reply.size(), 42, nullptr, p.cctx);
    ATF_REQUIRE_EQ(r.error, 0);
    const std::string ans = "answer";
    finish(p.server, p.server.post_send(u.peer(), ans.data(), ans.size(), 42, nullptr, p.sctx),
           p.client);
    const bmi::Completion c = finish(p.client, r, p.server);
    ATF_REQUIRE_EQ(c.error, 0);
    ATF_REQUIRE_EQ(c.actual_size, ans.size());
    ATF_REQUIRE_EQ(std::string(reply.data(), c.actual_size), ans);
    ATF_REQUIRE_EQ(p.client.get_info(bmi::Info::open_connections), 1U);
}

BMI_TEST_ALL(unexpected_too_large)
{
    Pair p;
    std::vector<char> big(p.client.get_info(bmi::Info::unexpected_limit) + 1);
    const bmi::Post r =
        p.client.post_sendunexpected(p.to_server, big.data(), big.size(), 1, nullptr, p.cctx);
    ATF_REQUIRE_EQ(r.error, -EMSGSIZE);
}

BMI_TEST_ALL(ordering_and_tags)
{
    Pair p;
    p.hello();
    constexpr int per_tag = 200;
    // Interleaved sends on tags 7 and 9, receives posted tag by tag: each
    // tag's messages arrive in the order sent.
    std::vector<bmi::OpId> sends;
    std::vector<int> values(std::size_t{2} * per_tag);
    for (int i = 0; i < per_tag; ++i) {
        for (int t = 0; t < 2; ++t) {
            int &v = values[(std::size_t{2} * static_cast<std::size_t>(i)) +
                            static_cast<std::size_t>(t)];
            v = i * 10 + t;
            const bmi::Post s =
                p.client.post_send(p.to_server, &v, sizeof v, t == 0 ? 7 : 9, nullptr, p.cctx);
            ATF_REQUIRE_EQ(s.error, 0);
            if (!s.completed)
                sends.push_back(s.op);
        }
    }
    for (const int tag : {9, 7}) {
        for (int i = 0; i < per_tag; ++i) {
            int got = -1;
            const bmi::Completion c = finish(
                p.server, p.server.post_recv(p.to_client, &got, sizeof got, tag, nullptr, p.sctx),
                p.client);
            ATF_REQUIRE_EQ(c.error, 0);
            ATF_REQUIRE_EQ(got, i * 10 + (tag == 7 ? 0 : 1));
        }
    }
    for (const bmi::OpId op : sends)
        ATF_REQUIRE_EQ(wait_op(p.client, op, p.server).error, 0);
}

BMI_TEST_ALL(immediate_completion)
{
    Pair p;
    p.hello();
    // The connection is up: a small send is taken by the socket at once.
    const int v = 5;
    const bmi::Post s = p.client.post_send(p.to_server, &v, sizeof v, 3, nullptr, p.cctx);
    ATF_REQUIRE_EQ(s.error, 0);
    ATF_REQUIRE(s.completed);
    // Once it has arrived, a receive for it completes at once too.  (Soft-
    // RoCE on 6.12 delivers from a work queue: give it time, not rounds.)
    const auto until = std::chrono::steady_clock::now() + 200ms;
    while (std::chrono::steady_clock::now() < until)
        poke(p.server);
    int got = 0;
    const bmi::Post r = p.server.post_recv(p.to_client, &got, sizeof got, 3, nullptr, p.sctx);
    ATF_REQUIRE_EQ(r.error, 0);
    ATF_REQUIRE(r.completed);
    ATF_REQUIRE_EQ(r.actual_size, sizeof got);
    ATF_REQUIRE_EQ(got, 5);
}

// A send that completed was handed to the transport: it reaches the peer
// even when the sender's Bmi is destroyed right after (a process that sends
// its last answer and exits), as a TCP socket's close still sends.
BMI_TEST_ALL(send_then_close)
{
    bmi::Bmi server(server_options());
    const std::string url = server.listen_addresses().at(0);
    for (int round = 0; round < 5; ++round) {
        auto client = std::make_unique<bmi::Bmi>(client_options());
        const bmi::ContextId cctx = client->open_context();
        const bmi::Addr a = client->addr_lookup(url);
        const std::string last = "last words " + std::to_string(round);
        finish(*client, client->post_sendunexpected(a, last.data(), last.size(), 5, nullptr, cctx),
               server);
        client.reset();
        std::vector<bmi::UnexpectedMessage> u;
        const auto deadline = std::chrono::steady_clock::now() + 20s;
        while (server.testunexpected(u, 1, 10) == 0)
            ATF_REQUIRE(std::chrono::steady_clock::now() < deadline);
        ATF_REQUIRE_EQ(
            std::string(reinterpret_cast<const char *>(u[0].data().data()), u[0].data().size()),
            last);
    }
}

// A receiver that stops posting receives: BMI buffers a bounded amount
// (4 MiB of early messages per peer), then stops taking the peer's frames
// (TCP: stops reading; ib: holds its receive buffers, so the sender runs
// out of credits), and the sender's messages wait at the sender.  Nothing
// is lost or reordered once receives are posted again.  The same for
// unexpected messages the application does not free.
BMI_TEST_ALL(receiver_stops_posting)
{
    Pair p;
    p.hello();
    // 3000 x 8 KiB = 23 MiB: beyond BMI's budget and the sockets' buffers
    constexpr int count = 3000;
    constexpr std::size_t size = 8192;
    std::vector<std::vector<unsigned char>> msgs;
    std::vector<bmi::OpId> pending;
    for (int i = 0; i < count; ++i) {
        msgs.push_back(pattern(size, static_cast<unsigned>(i)));
        const bmi::Post s =
            p.client.post_send(p.to_server, msgs.back().data(), size, 70, nullptr, p.cctx);
        ATF_REQUIRE_EQ(s.error, 0);
        if (!s.completed)
            pending.push_back(s.op);
    }
    // Both sides run for a while; the server posts nothing.
    const auto until = std::chrono::steady_clock::now() + 500ms;
    while (std::chrono::steady_clock::now() < until) {
        poke(p.server);
        poke(p.client);
    }
    std::vector<bmi::Completion> done;
    p.client.testsome(pending, done, 0);
    // The sender is held back: a good part of the messages still wait.
    ATF_REQUIRE(pending.size() - done.size() >= count / 4);
    for (const bmi::Completion &c : done)
        ATF_REQUIRE_EQ(c.error, 0);
    // Receives now: every message, in order, intact.
    std::vector<unsigned char> buf(size);
    for (int i = 0; i < count; ++i) {
        const bmi::Completion c = finish(
            p.server, p.server.post_recv(p.to_client, buf.data(), buf.size(), 70, nullptr, p.sctx),
            p.client);
        ATF_REQUIRE_EQ(c.error, 0);
        ATF_REQUIRE_EQ(c.actual_size, size);
        ATF_REQUIRE(buf == msgs[static_cast<std::size_t>(i)]);
    }
    // The sends held back completed meanwhile, without error.
    for (const bmi::OpId op : pending) {
        if (std::any_of(done.begin(), done.end(), [op](const auto &c) { return c.op == op; }))
            continue; // reaped above
        ATF_REQUIRE_EQ(wait_op(p.client, op, p.server).error, 0);
    }

    // Unexpected messages kept by the application: the per-peer budget
    // (1 MiB) holds the rest back until they are freed.
    std::vector<bmi::OpId> usends;
    for (int i = 0; i < 400; ++i) { // 400 x 8 KiB = 3.1 MiB
        const bmi::Post s = p.client.post_sendunexpected(
            p.to_server, msgs[static_cast<std::size_t>(i)].data(), size, 71, nullptr, p.cctx);
        ATF_REQUIRE_EQ(s.error, 0);
        if (!s.completed)
            usends.push_back(s.op);
    }
    std::vector<bmi::UnexpectedMessage> kept;
    const auto until2 = std::chrono::steady_clock::now() + 500ms;
    while (std::chrono::steady_clock::now() < until2) {
        p.server.testunexpected(kept, 1000, 0);
        poke(p.client);
    }
    ATF_REQUIRE(kept.size() * size <= (std::size_t{1} << 20) + size);
    ATF_REQUIRE(kept.size() < 400);
    std::size_t total = 0;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (total < 400) {
        for (const bmi::UnexpectedMessage &m : kept) {
            ATF_REQUIRE_EQ(m.tag(), 71);
            ATF_REQUIRE(std::equal(m.data().begin(), m.data().end(),
                                   reinterpret_cast<const std::byte *>(msgs[total].data())));
            ++total;
        }
        kept.clear(); // freed: the budget lets the rest in
        p.server.testunexpected(kept, 1000, 1);
        poke(p.client);
        ATF_REQUIRE(std::chrono::steady_clock::now() < deadline);
    }
}

// One-sided transfers need RDMA: over TCP they are refused, clearly.
BMI_TEST(one_sided_not_over_tcp)
{
    Pair p;
    p.hello();
    std::array<char, 64> buf{};
    const std::array<bmi::MutableBuffer, 1> pieces{bmi::MutableBuffer{buf.data(), buf.size()}};
    bmi::Exposure exposure;
    std::vector<std::byte> desc;
    ATF_REQUIRE_EQ(p.client.expose(p.to_server, pieces, exposure, desc), -ENOTSUP);
    const std::vector<std::byte> any(24, std::byte{1});
    ATF_REQUIRE_EQ(p.server.post_get(p.to_client, any, 0, buf.data(), 8, nullptr, p.sctx).error,
                   -ENOTSUP);
    ATF_REQUIRE_EQ(p.server.post_put(p.to_client, any, 0, buf.data(), 8, nullptr, p.sctx).error,
                   -ENOTSUP);
}

BMI_TEST_ALL(short_and_oversize)
{
    Pair p;
    p.hello();
    // Short: a 10-byte message into a 1000-byte receive.
    std::vector<char> buf(1000);
    const bmi::Post r = p.server.post_recv(p.to_client, buf.data(), buf.size(), 1, nullptr, p.sctx);
    finish(p.client, p.client.post_send(p.to_server, "0123456789", 10, 1, nullptr, p.cctx),
           p.server);
    ATF_REQUIRE_EQ(finish(p.server, r, p.client).actual_size, 10U);

    // Oversize eager: the receive fails, the connection stays usable.
    std::array<char, 4> small{};
    const bmi::Post r2 =
        p.server.post_recv(p.to_client, small.data(), small.size(), 2, nullptr, p.sctx);
    finish(p.client, p.client.post_send(p.to_server, buf.data(), 100, 2, nullptr, p.cctx),
           p.server);
    ATF_REQUIRE_EQ(wait_op(p.server, r2.op, p.client).error, -EMSGSIZE);

    // Oversize rendezvous: both sides fail.
    const std::vector<unsigned char> big = pattern(1 << 20, 1);
    const bmi::Post r3 =
        p.server.post_recv(p.to_client, buf.data(), buf.size(), 3, nullptr, p.sctx);
    const bmi::Post s3 =
        p.client.post_send(p.to_server, big.data(), big.size(), 3, nullptr, p.cctx);
    ATF_REQUIRE_EQ(s3.error, 0);
    ATF_REQUIRE(!s3.completed);
    ATF_REQUIRE_EQ(wait_op(p.server, r3.op, p.client).error, -EMSGSIZE);
    ATF_REQUIRE_EQ(wait_op(p.client, s3.op, p.server).error, -EMSGSIZE);

    // And the next message still gets through.
    int got = 0;
    const bmi::Post r4 = p.server.post_recv(p.to_client, &got, sizeof got, 4, nullptr, p.sctx);
    const int v = 77;
    finish(p.client, p.client.post_send(p.to_server, &v, sizeof v, 4, nullptr, p.cctx), p.server);
    ATF_REQUIRE_EQ(finish(p.server, r4, p.client).error, 0);
    ATF_REQUIRE_EQ(got, 77);
}

BMI_TEST_ALL(rendezvous_list)
{
    Pair p;
    p.hello();
    // 5 MiB sent from three pieces into two pieces, both directions of
    // posting order (receive first, send first).
    const std::vector<unsigned char> src = pattern(5 << 20, 9);
    for (const bool recv_first : {true, false}) {
        std::vector<unsigned char> dst(src.size() + 100, 0);
        const std::array<bmi::ConstBuffer, 3> sb{
            bmi::ConstBuffer{src.data(), 1000},
            bmi::ConstBuffer{src.data() + 1000, (3 << 20) - 1000},
            bmi::ConstBuffer{src.data() + (3 << 20), src.size() - (3 << 20)}};
        const std::array<bmi::MutableBuffer, 2> rb{
            bmi::MutableBuffer{dst.data(), 12345},
            bmi::MutableBuffer{dst.data() + 12345, dst.size() - 12345}};
        bmi::Post r;
        if (recv_first)
            r = p.server.post_recv_list(p.to_client, rb, 5, nullptr, p.sctx);
        const bmi::Post s = p.client.post_send_list(p.to_server, sb, 5, nullptr, p.cctx);
        ATF_REQUIRE_EQ(s.error, 0);
        for (int i = 0; i < 20; ++i)
            poke(p.server);
        if (!recv_first)
            r = p.server.post_recv_list(p.to_client, rb, 5, nullptr, p.sctx);
        const bmi::Completion rc = finish(p.server, r, p.client);
        ATF_REQUIRE_EQ(rc.error, 0);
        ATF_REQUIRE_EQ(rc.actual_size, src.size());
        ATF_REQUIRE_EQ(finish(p.client, s, p.server).error, 0);
        ATF_REQUIRE(std::equal(src.begin(), src.end(), dst.begin()));
    }
}

BMI_TEST_ALL(many_outstanding)
{
    // 64 clients, 10,000 outstanding receives on the server at once, then
    // every client sends its share; all complete with the right contents.
    bmi::Bmi server(server_options());
    const bmi::ContextId sctx = server.open_context();
    constexpr int peers = 64;
    constexpr int per_peer = 157; // 64 * 157 = 10,048
    std::vector<std::unique_ptr<bmi::Bmi>> clients;
    std::vector<bmi::Addr> addrs(peers);
    std::vector<bmi::ContextId> ctxs(peers);
    std::vector<bmi::Addr> server_addr(peers);
    for (int c = 0; c < peers; ++c) {
        clients.push_back(std::make_unique<bmi::Bmi>(client_options()));
        ctxs[static_cast<std::size_t>(c)] = clients.back()->open_context();
        const bmi::Addr a = clients.back()->addr_lookup(server.listen_addresses().at(0));
        const int id = c;
        finish(*clients.back(),
               clients.back()->post_sendunexpected(a, &id, sizeof id, 0, nullptr,
                                                   ctxs[static_cast<std::size_t>(c)]),
               server);
        server_addr[static_cast<std::size_t>(c)] = a;
    }
    std::vector<bmi::UnexpectedMessage> hellos;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (hellos.size() < peers) {
        server.testunexpected(hellos, peers, 10);
        for (auto &c : clients)
            poke(*c);
        ATF_REQUIRE(std::chrono::steady_clock::now() < deadline);
    }
    for (const auto &h : hellos) {
        int id = -1;
        std::memcpy(&id, h.data().data(), sizeof id);
        addrs[static_cast<std::size_t>(id)] = h.peer();
    }
    std::vector<int> got(std::size_t{peers} * per_peer, -1);
    for (int c = 0; c < peers; ++c) {
        for (int k = 0; k < per_peer; ++k) {
            int &slot = got[(static_cast<std::size_t>(c) * per_peer) + static_cast<std::size_t>(k)];
            const bmi::Post r = server.post_recv(addrs[static_cast<std::size_t>(c)], &slot,
                                                 sizeof slot, 100 + k, nullptr, sctx);
            ATF_REQUIRE_EQ(r.error, 0);
            ATF_REQUIRE(!r.completed);
        }
    }
    std::vector<int> vals(got.size());
    std::iota(vals.begin(), vals.end(), 0);
    for (int c = 0; c < peers; ++c) {
        for (int k = 0; k < per_peer; ++k) {
            const auto idx = (static_cast<std::size_t>(c) * per_peer) + static_cast<std::size_t>(k);
            const bmi::Post s = clients[static_cast<std::size_t>(c)]->post_send(
                server_addr[static_cast<std::size_t>(c)], &vals[idx], sizeof(int), 100 + k, nullptr,
                ctxs[static_cast<std::size_t>(c)]);
            ATF_REQUIRE_EQ(s.error, 0);
        }
    }
    std::size_t done = 0;
    std::vector<bmi::Completion> comps(256);
    const auto deadline2 = std::chrono::steady_clock::now() + 60s;
    while (done < got.size()) {
        const std::size_t n = server.testcontext(sctx, comps, 10);
        for (std::size_t k = 0; k < n; ++k)
            ATF_REQUIRE_EQ(comps[k].error, 0);
        done += n;
        for (std::size_t c = 0; c < clients.size(); ++c) {
            std::array<bmi::Completion, 64> cc{};
            clients[c]->testcontext(ctxs[c], cc, 0);
        }
        ATF_REQUIRE(std::chrono::steady_clock::now() < deadline2);
    }
    ATF_REQUIRE(got == vals);
}

BMI_TEST_ALL(cancel_ops)
{
    Pair p;
    p.hello();
    // Before transfer: a posted receive.
    int x = 0;
    const bmi::Post r = p.server.post_recv(p.to_client, &x, sizeof x, 11, nullptr, p.sctx);
    ATF_REQUIRE_EQ(p.server.cancel(r.op), 0);
    ATF_REQUIRE_EQ(wait_op(p.server, r.op, p.client).error, -ECANCELED);

    // Mid-transfer: a rendezvous send whose receiver is slow to post.
    const std::vector<unsigned char> big = pattern(8 << 20, 3);
    const bmi::Post s =
        p.client.post_send(p.to_server, big.data(), big.size(), 12, nullptr, p.cctx);
    std::vector<unsigned char> dst(big.size());
    const bmi::Post r2 =
        p.server.post_recv(p.to_client, dst.data(), dst.size(), 12, nullptr, p.sctx);
    for (int i = 0; i < 3; ++i) {
        poke(p.client);
        poke(p.server);
    }
    ATF_REQUIRE_EQ(p.client.cancel(s.op), 0);
    const bmi::Completion sc = wait_op(p.client, s.op, p.server);
    ATF_REQUIRE(sc.error == -ECANCELED || sc.error == 0);
    const bmi::Completion rc = wait_op(p.server, r2.op, p.client);
    // Bytes already committed to the wire may still make up the whole
    // message; then it must be intact.  Otherwise the receiver hears of the
    // cancellation.
    ATF_REQUIRE(rc.error == -ECANCELED || rc.error == 0);
    if (rc.error == 0)
        ATF_REQUIRE(dst == big);

    // After completion: cancel is harmless.
    const int v = 1;
    const bmi::Post s3 = p.client.post_send(p.to_server, &v, sizeof v, 13, nullptr, p.cctx);
    if (!s3.completed) {
        wait_op(p.client, s3.op, p.server);
        ATF_REQUIRE_EQ(p.client.cancel(s3.op), -EINVAL);
    }
    // The connection still works.
    int got = 0;
    const bmi::Post r4 = p.server.post_recv(p.to_client, &got, sizeof got, 13, nullptr, p.sctx);
    ATF_REQUIRE_EQ(finish(p.server, r4, p.client).error, 0);
    ATF_REQUIRE_EQ(got, 1);
}

BMI_TEST_ALL(peer_dies_mid_message)
{
    // A child process takes half of a rendezvous and dies: the receive in
    // this process fails promptly, not at the idle timeout.  The child is
    // forked before this process opens any transport (an RDMA device
    // context must not be shared across fork); the server's URL reaches it
    // through a pipe.
    std::array<int, 2> pipefd{};
    ATF_REQUIRE_EQ(::pipe(pipefd.data()), 0);
    // Untouched (zero pages) on TCP; the ib method pins what it sends, so
    // less there: still far more than moves before the child dies.
    const std::size_t size = g_scheme == "ib" ? std::size_t{256} << 20 : std::size_t{1} << 30;
    const pid_t child = ::fork();
    ATF_REQUIRE(child >= 0);
    if (child == 0) {
        ::close(pipefd[1]);
        std::array<char, 256> buf{};
        const ssize_t n = ::read(pipefd[0], buf.data(), buf.size() - 1);
        if (n <= 0)
            ::_exit(1);
        bmi::Bmi c(client_options());
        const bmi::ContextId cc = c.open_context();
        const bmi::Addr a = c.addr_lookup(std::string(buf.data(), static_cast<std::size_t>(n)));
        const int hi = 1;
        bmi::Completion comp;
        const bmi::Post h = c.post_sendunexpected(a, &hi, sizeof hi, 0, nullptr, cc);
        if (h.ok() && !h.completed)
            c.test(h.op, comp, 10000); // connected: the transfer starts at once
        const auto big = std::make_unique_for_overwrite<unsigned char[]>(size);
        const bmi::Post s = c.post_send(a, big.get(), size, 5, nullptr, cc);
        // Some data flows, then the process dies.  A few rounds of progress
        // without waiting, not a time: loopback TCP moves tens of MB a
        // round, all of it in 100 ms (RDMA READs need no progress of the
        // sender at all).
        for (int i = 0; i < 5; ++i) {
            c.test(s.op, comp, 0);
            ::usleep(2000);
        }
        ::_exit(0);
    }
    ::close(pipefd[0]);
    bmi::Bmi server(server_options());
    const bmi::ContextId ctx = server.open_context();
    const std::string url = server.listen_addresses().at(0);
    ATF_REQUIRE_EQ(::write(pipefd[1], url.data(), url.size()), static_cast<ssize_t>(url.size()));
    ::close(pipefd[1]);
    const auto start = std::chrono::steady_clock::now();
    std::vector<bmi::UnexpectedMessage> u;
    while (server.testunexpected(u, 1, 100) == 0)
        ATF_REQUIRE(std::chrono::steady_clock::now() - start < 20s);
    const auto dst = std::make_unique_for_overwrite<unsigned char[]>(size);
    const bmi::Post r = server.post_recv(u[0].peer(), dst.get(), size, 5, nullptr, ctx);
    bmi::Completion c;
    while (!server.test(r.op, c, 100))
        ATF_REQUIRE(std::chrono::steady_clock::now() - start < 20s);
    int status = 0;
    ::waitpid(child, &status, 0);
    ATF_REQUIRE_EQ(c.error, -ECONNRESET);
}

BMI_TEST_ALL(server_restart_reconnect)
{
    auto server = std::make_unique<bmi::Bmi>(server_options());
    const std::string url = server->listen_addresses().at(0);
    bmi::Bmi client(client_options());
    const bmi::ContextId cctx = client.open_context();
    const bmi::Addr a = client.addr_lookup(url);
    int v = 1;
    finish(client, client.post_sendunexpected(a, &v, sizeof v, 0, nullptr, cctx), *server);
    std::vector<bmi::UnexpectedMessage> u;
    while (server->testunexpected(u, 1, 10) == 0)
        poke(client);
    // A reply the client waits for: the server goes away instead.
    int reply = 0;
    const bmi::Post r = client.post_recv(a, &reply, sizeof reply, 1, nullptr, cctx);
    u.clear();
    server.reset();
    bmi::Completion c;
    const auto start = std::chrono::steady_clock::now();
    while (!client.test(r.op, c, 100))
        ATF_REQUIRE(std::chrono::steady_clock::now() - start < 10s);
    ATF_REQUIRE_EQ(c.error, -ECONNRESET);
    // The server comes back on the same port; the next post reconnects.
    server = std::make_unique<bmi::Bmi>(server_options(url));
    v = 2;
    finish(client, client.post_sendunexpected(a, &v, sizeof v, 0, nullptr, cctx), *server);
    while (server->testunexpected(u, 1, 10) == 0)
        poke(client);
    int got = 0;
    std::memcpy(&got, u.at(0).data().data(), sizeof got);
    ATF_REQUIRE_EQ(got, 2);
}

BMI_TEST(garbage_on_socket)
{
    Pair p;
    p.hello();
    // A raw socket sends junk: that connection is closed; the real client
    // is unaffected.
    const std::string url = p.server.listen_addresses().at(0);
    const auto colon = url.rfind(':');
    const int port = std::stoi(url.substr(colon + 1));
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ATF_REQUIRE_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
    std::vector<unsigned char> junk = pattern(4096, 77);
    ATF_REQUIRE_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    // The server closes that connection: the raw socket sees EOF.
    bool closed = false;
    for (int i = 0; i < 2000 && !closed; ++i) {
        poke(p.server);
        std::array<char, 16> buf{};
        closed = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT) == 0;
    }
    ATF_REQUIRE(closed);
    ::close(fd);
    int got = 0;
    const bmi::Post r = p.server.post_recv(p.to_client, &got, sizeof got, 8, nullptr, p.sctx);
    const int v = 8;
    finish(p.client, p.client.post_send(p.to_server, &v, sizeof v, 8, nullptr, p.cctx), p.server);
    ATF_REQUIRE_EQ(finish(p.server, r, p.client).error, 0);
    ATF_REQUIRE_EQ(got, 8);
}

// A peer that stops making progress (its process hung: the kernel still
// acknowledges TCP, but BMI answers nothing) fails the ops waiting on it
// after the idle timeout.
BMI_TEST_ALL(idle_timeout)
{
    Pair p;
    p.hello();
    ATF_REQUIRE_EQ(p.server.set_info(bmi::Info::idle_timeout_ms, 300), 0);
    int x = 0;
    const bmi::Post r = p.server.post_recv(p.to_client, &x, sizeof x, 99, nullptr, p.sctx);
    ATF_REQUIRE_EQ(r.error, 0);
    const auto start = std::chrono::steady_clock::now();
    bmi::Completion c;
    while (!p.server.test(r.op, c, 10)) {
        // The client is never driven: it is the hung peer.
        if (std::chrono::steady_clock::now() - start > 20s)
            ATF_FAIL("the receive from a hung peer did not time out");
    }
    const auto took = std::chrono::steady_clock::now() - start;
    ATF_REQUIRE_EQ(c.error, -ETIMEDOUT);
    ATF_REQUIRE(took >= 250ms);
    ATF_REQUIRE(took < 3s);
}

// A peer that is alive but has nothing to say for longer than the idle
// timeout (a server busy with a long fsync) does not fail the receive that
// waits on it: BMI pings it and its BMI answers.
BMI_TEST_ALL(idle_peer_alive)
{
    Pair p;
    p.hello();
    ATF_REQUIRE_EQ(p.server.set_info(bmi::Info::idle_timeout_ms, 300), 0);
    ATF_REQUIRE_EQ(p.client.set_info(bmi::Info::idle_timeout_ms, 300), 0);
    int x = 0;
    const bmi::Post r = p.server.post_recv(p.to_client, &x, sizeof x, 99, nullptr, p.sctx);
    ATF_REQUIRE_EQ(r.error, 0);
    const auto start = std::chrono::steady_clock::now();
    bmi::Completion c;
    while (std::chrono::steady_clock::now() - start < 1500ms) {
        if (p.server.test(r.op, c, 5))
            ATF_FAIL("the receive ended while its peer was alive: error " +
                     std::to_string(c.error));
        poke(p.client);
    }
    const int v = 77;
    finish(p.client, p.client.post_send(p.to_server, &v, sizeof v, 99, nullptr, p.cctx), p.server);
    c = wait_op(p.server, r.op, p.client);
    ATF_REQUIRE_EQ(c.error, 0);
    ATF_REQUIRE_EQ(x, 77);
}

// A watched fd (say, a storage completion queue's eventfd) cuts a test*
// sleep short; once drained it no longer does.
// A server's event loop waits once for both kinds of event: completions of
// its context and new requests.
BMI_TEST_ALL(testany_sees_both)
{
    Pair p;
    p.hello();
    std::array<char, 8> buf{};
    const bmi::Post r = p.server.post_recv(p.to_client, buf.data(), buf.size(), 7, &buf, p.sctx);
    ATF_REQUIRE(r.ok() && !r.completed);
    const char data[] = "data";
    finish(p.client, p.client.post_send(p.to_server, data, sizeof data, 7, nullptr, p.cctx),
           p.server);
    const char request[] = "req";
    finish(p.client,
           p.client.post_sendunexpected(p.to_server, request, sizeof request, 9, nullptr, p.cctx),
           p.server);

    std::array<bmi::Completion, 4> done{};
    std::size_t done_total = 0;
    std::vector<bmi::UnexpectedMessage> unexpected;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (done_total < 1 || unexpected.empty()) {
        std::size_t n_done = 0;
        const std::size_t n = p.server.testany(p.sctx, std::span(done).subspan(done_total), n_done,
                                               unexpected, 4, 10);
        ATF_REQUIRE(n >= n_done);
        done_total += n_done;
        poke(p.client);
        if (std::chrono::steady_clock::now() > deadline)
            ATF_FAIL("testany did not deliver both within 20 s");
    }
    ATF_REQUIRE_EQ(done_total, 1U);
    ATF_REQUIRE_EQ(done[0].op, r.op);
    ATF_REQUIRE_EQ(done[0].error, 0);
    ATF_REQUIRE_EQ(done[0].user_ptr, static_cast<void *>(&buf));
    ATF_REQUIRE_EQ(done[0].actual_size, sizeof data);
    ATF_REQUIRE_EQ(std::string(buf.data()), "data");
    ATF_REQUIRE_EQ(unexpected.size(), 1U);
    ATF_REQUIRE_EQ(unexpected[0].tag(), 9);
    ATF_REQUIRE_EQ(unexpected[0].data().size(), sizeof request);

    // Nothing pending: it sleeps out max_idle_ms and returns 0.
    std::size_t n_done = 1;
    const auto start = std::chrono::steady_clock::now();
    ATF_REQUIRE_EQ(p.server.testany(p.sctx, done, n_done, unexpected, 4, 100), 0U);
    ATF_REQUIRE_EQ(n_done, 0U);
    ATF_REQUIRE(std::chrono::steady_clock::now() - start >= 90ms);
}

BMI_TEST_ALL(watch_fd)
{
    bmi::Bmi b(server_options());
    const bmi::ContextId ctx = b.open_context();
    const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ATF_REQUIRE(efd >= 0);
    ATF_REQUIRE_EQ(b.watch_fd(efd), 0);
    ATF_REQUIRE_EQ(b.watch_fd(efd), -EEXIST);
    ATF_REQUIRE_EQ(b.watch_fd(-1), -EBADF);
    const int file = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    ATF_REQUIRE(file >= 0);
    ATF_REQUIRE_EQ(b.watch_fd(file), -EPERM);
    ::close(file);

    std::thread writer([efd] {
        std::this_thread::sleep_for(100ms);
        const std::uint64_t one = 1;
        ATF_REQUIRE_EQ(::write(efd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
    });
    std::array<bmi::Completion, 4> out{};
    auto start = std::chrono::steady_clock::now();
    ATF_REQUIRE_EQ(b.testcontext(ctx, out, 10000), 0U);
    auto took = std::chrono::steady_clock::now() - start;
    writer.join();
    ATF_REQUIRE(took >= 50ms);
    ATF_REQUIRE(took < 5s);

    // The caller learns which watched fd woke it, once.
    std::vector<int> ready;
    b.take_ready_fds(ready);
    ATF_REQUIRE(ready == std::vector<int>{efd});
    ready.clear();
    b.take_ready_fds(ready);
    ATF_REQUIRE(ready.empty());

    std::uint64_t value = 0;
    ATF_REQUIRE_EQ(::read(efd, &value, sizeof value), static_cast<ssize_t>(sizeof value));
    start = std::chrono::steady_clock::now();
    ATF_REQUIRE_EQ(b.testcontext(ctx, out, 300), 0U);
    took = std::chrono::steady_clock::now() - start;
    ATF_REQUIRE(took >= 250ms);
    b.take_ready_fds(ready);
    ATF_REQUIRE(ready.empty());

    // Of two watched fds, only the one made readable is named.
    const int other = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ATF_REQUIRE(other >= 0);
    ATF_REQUIRE_EQ(b.watch_fd(other), 0);
    const std::uint64_t one = 1;
    ATF_REQUIRE_EQ(::write(other, &one, sizeof one), static_cast<ssize_t>(sizeof one));
    start = std::chrono::steady_clock::now();
    ATF_REQUIRE_EQ(b.testcontext(ctx, out, 10000), 0U);
    ATF_REQUIRE(std::chrono::steady_clock::now() - start < 5s);
    b.take_ready_fds(ready);
    ATF_REQUIRE(ready == std::vector<int>{other});
    // Unwatched, a readable fd is forgotten.
    ATF_REQUIRE_EQ(b.testcontext(ctx, out, 0), 0U);
    ATF_REQUIRE_EQ(b.unwatch_fd(other), 0);
    ready.clear();
    b.take_ready_fds(ready);
    ATF_REQUIRE(ready.empty());
    ::close(other);

    ATF_REQUIRE_EQ(b.unwatch_fd(efd), 0);
    ATF_REQUIRE_EQ(b.unwatch_fd(efd), -ENOENT);
    ::close(efd);
}

// A receive posted before a long one-way stream (bench-net's ack) must
// survive the stream: the streaming side hears from its peer only through
// the liveness pings, which must get through behind the data.
BMI_TEST_ALL(receive_outlives_stream)
{
    Pair p;
    p.hello();
    ATF_REQUIRE_EQ(p.server.set_info(bmi::Info::idle_timeout_ms, 300), 0);
    ATF_REQUIRE_EQ(p.client.set_info(bmi::Info::idle_timeout_ms, 300), 0);
    int ack = 0;
    const bmi::Post r = p.client.post_recv(p.to_server, &ack, sizeof ack, 50, nullptr, p.cctx);
    ATF_REQUIRE_EQ(r.error, 0);
    std::array<char, 100> msg{};
    std::array<char, 100> in{};
    const auto start = std::chrono::steady_clock::now();
    std::size_t sent = 0;
    while (std::chrono::steady_clock::now() - start < 1500ms) {
        const bmi::Post s =
            p.client.post_send(p.to_server, msg.data(), msg.size(), 51, nullptr, p.cctx);
        ATF_REQUIRE_EQ(s.error, 0);
        if (!s.completed)
            ATF_REQUIRE_EQ(wait_op(p.client, s.op, p.server).error, 0);
        ++sent;
        const bmi::Post rr =
            p.server.post_recv(p.to_client, in.data(), in.size(), 51, nullptr, p.sctx);
        ATF_REQUIRE_EQ(rr.error, 0);
        if (!rr.completed)
            ATF_REQUIRE_EQ(wait_op(p.server, rr.op, p.client).error, 0);
    }
    const int v = 9;
    finish(p.server, p.server.post_send(p.to_client, &v, sizeof v, 50, nullptr, p.sctx), p.client);
    const bmi::Completion c = wait_op(p.client, r.op, p.server);
    ATF_REQUIRE_EQ(c.error, 0);
    ATF_REQUIRE_EQ(ack, 9);
    ATF_REQUIRE(sent > 10);
}

// This side did not run for longer than the idle timeout (its application
// was busy), so no pings went out meanwhile: the waiting receive must not
// fail on its first look but ask the peer, which answers.
BMI_TEST_ALL(receive_survives_own_pause)
{
    Pair p;
    p.hello();
    ATF_REQUIRE_EQ(p.client.set_info(bmi::Info::idle_timeout_ms, 300), 0);
    int ack = 0;
    const bmi::Post r = p.client.post_recv(p.to_server, &ack, sizeof ack, 60, nullptr, p.cctx);
    ATF_REQUIRE_EQ(r.error, 0);
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < 1000ms)
        poke(p.server); // only the server runs
    bmi::Completion c;
    const auto again = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - again < 1000ms) {
        if (p.client.test(r.op, c, 5))
            ATF_FAIL("the receive ended although its peer answers: error " +
                     std::to_string(c.error));
        poke(p.server);
    }
    const int v = 3;
    finish(p.server, p.server.post_send(p.to_client, &v, sizeof v, 60, nullptr, p.sctx), p.client);
    c = wait_op(p.client, r.op, p.server);
    ATF_REQUIRE_EQ(c.error, 0);
    ATF_REQUIRE_EQ(ack, 3);
}

BMI_TEST_ALL(bad_addresses)
{
    bmi::Bmi c(client_options());
    int err = 0;
    ATF_REQUIRE_EQ(c.addr_lookup(url_of("nohostport"), &err), bmi::no_addr);
    ATF_REQUIRE_EQ(err, -EINVAL);
    ATF_REQUIRE_EQ(c.addr_lookup("foo://127.0.0.1:1", &err), bmi::no_addr);
    ATF_REQUIRE_EQ(err, -EPROTONOSUPPORT);
    ATF_REQUIRE_EQ(c.addr_lookup(url_of(g_host + ":99999"), &err), bmi::no_addr);
    // Nobody listens on port 1: the send fails with ECONNREFUSED.
    const bmi::ContextId ctx = c.open_context();
    const bmi::Addr a = c.addr_lookup(url_of(g_host + ":1"), &err);
    ATF_REQUIRE(a != bmi::no_addr);
    const int v = 0;
    const bmi::Post s = c.post_send(a, &v, sizeof v, 0, nullptr, ctx);
    if (s.error == 0) {
        bmi::Completion comp;
        ATF_REQUIRE(c.test(s.op, comp, 5000));
        ATF_REQUIRE_EQ(comp.error, -ECONNREFUSED);
    } else {
        ATF_REQUIRE_EQ(s.error, -ECONNREFUSED);
    }
    ATF_REQUIRE_THROW(std::system_error, bmi::Bmi(server_options(url_of("256.1.1.1:0"))));
}

BMI_TEST_ALL(drop_addr)
{
    Pair p;
    p.hello();
    // Dropping the peer ends its ops at once and closes its connections.
    int x = 0;
    const bmi::Post r = p.client.post_recv(p.to_server, &x, sizeof x, 21, nullptr, p.cctx);
    ATF_REQUIRE_EQ(p.client.set_info(bmi::Info::drop_addr, p.to_server), 0);
    bmi::Completion c;
    ATF_REQUIRE(p.client.test(r.op, c, 0));
    ATF_REQUIRE_EQ(c.error, -ECONNRESET);
    ATF_REQUIRE_EQ(p.client.get_info(bmi::Info::open_connections), 0U);
    // The next post reconnects.
    const int v = 3;
    finish(p.client, p.client.post_sendunexpected(p.to_server, &v, sizeof v, 22, nullptr, p.cctx),
           p.server);
    const bmi::UnexpectedMessage u = wait_unexpected(p.server, p.client);
    ATF_REQUIRE_EQ(u.tag(), 22);
    ATF_REQUIRE_EQ(p.client.set_info(bmi::Info::drop_addr, 12345), -EINVAL);
    ATF_REQUIRE_EQ(p.client.set_info(bmi::Info::eager_limit, 1), -EINVAL);
}

namespace {

// Drives both sides a few rounds: frames queued on either reach the other.
void exchange(Pair &p)
{
    for (int i = 0; i < 20; ++i) {
        poke(p.server);
        poke(p.client);
    }
}

} // namespace

BMI_TEST(direct_into_announced_receive)
{
    // A receive posted before the message is announced (READY): a message
    // above the eager limit then goes at once, without RTS/CTS, into it.
    Pair p;
    p.hello();
    const std::uint64_t before = p.client.get_info(bmi::Info::direct_sends);
    for (const std::size_t size :
         {std::size_t{16385}, std::size_t{64} << 10, std::size_t{512} << 10}) {
        const std::vector<unsigned char> src = pattern(size, static_cast<unsigned>(size));
        std::vector<unsigned char> dst(size + 7, 0);
        const bmi::Post r =
            p.server.post_recv(p.to_client, dst.data(), dst.size(), 7, nullptr, p.sctx);
        ATF_REQUIRE_EQ(r.error, 0);
        exchange(p);
        const bmi::Completion sc =
            finish(p.client, p.client.post_send(p.to_server, src.data(), size, 7, nullptr, p.cctx),
                   p.server);
        ATF_REQUIRE_EQ(sc.error, 0);
        const bmi::Completion rc = finish(p.server, r, p.client);
        ATF_REQUIRE_EQ(rc.error, 0);
        ATF_REQUIRE_EQ(rc.actual_size, size);
        ATF_REQUIRE(std::equal(src.begin(), src.end(), dst.begin()));
    }
    ATF_REQUIRE_EQ(p.client.get_info(bmi::Info::direct_sends) - before, 3U);
    // Above the chunk size (512 KiB) a message goes by rendezvous even
    // into an announced receive: one frame never holds a connection long.
    const std::vector<unsigned char> big = pattern((512 << 10) + 1, 3);
    std::vector<unsigned char> dst(big.size(), 0);
    const bmi::Post r = p.server.post_recv(p.to_client, dst.data(), dst.size(), 7, nullptr, p.sctx);
    exchange(p);
    ATF_REQUIRE_EQ(
        finish(p.client,
               p.client.post_send(p.to_server, big.data(), big.size(), 7, nullptr, p.cctx),
               p.server)
            .error,
        0);
    ATF_REQUIRE_EQ(finish(p.server, r, p.client).actual_size, big.size());
    ATF_REQUIRE(big == dst);
    ATF_REQUIRE_EQ(p.client.get_info(bmi::Info::direct_sends) - before, 3U);
}

BMI_TEST(announced_receive_order)
{
    // An announcement never reorders messages of a (peer, tag).
    Pair p;
    p.hello();
    const std::vector<unsigned char> small = pattern(100, 1);
    const std::vector<unsigned char> large = pattern(64 << 10, 2);
    std::vector<unsigned char> d1(64 << 10, 0);
    std::vector<unsigned char> d2(64 << 10, 0);

    // 1. The announcement is used up by a small message sent after it
    //    arrived: the next large message goes by rendezvous to the next
    //    receive.
    const std::uint64_t before = p.client.get_info(bmi::Info::direct_sends);
    bmi::Post r1 = p.server.post_recv(p.to_client, d1.data(), d1.size(), 9, nullptr, p.sctx);
    exchange(p);
    const bmi::Post s1 =
        p.client.post_send(p.to_server, small.data(), small.size(), 9, nullptr, p.cctx);
    const bmi::Post s2 =
        p.client.post_send(p.to_server, large.data(), large.size(), 9, nullptr, p.cctx);
    bmi::Post r2 = p.server.post_recv(p.to_client, d2.data(), d2.size(), 9, nullptr, p.sctx);
    ATF_REQUIRE_EQ(finish(p.server, r1, p.client).actual_size, small.size());
    ATF_REQUIRE_EQ(finish(p.server, r2, p.client).actual_size, large.size());
    ATF_REQUIRE_EQ(finish(p.client, s1, p.server).error, 0);
    ATF_REQUIRE_EQ(finish(p.client, s2, p.server).error, 0);
    ATF_REQUIRE(std::equal(small.begin(), small.end(), d1.begin()));
    ATF_REQUIRE(std::equal(large.begin(), large.end(), d2.begin()));
    ATF_REQUIRE_EQ(p.client.get_info(bmi::Info::direct_sends), before);

    // 2. A message already in flight when the announcement arrives: the
    //    announcement is ignored (that message matches the receive).
    std::fill(d1.begin(), d1.end(), 0);
    std::fill(d2.begin(), d2.end(), 0);
    const std::vector<unsigned char> other = pattern(64 << 10, 5);
    r1 = p.server.post_recv(p.to_client, d1.data(), d1.size(), 10, nullptr, p.sctx);
    // The client sends before it reads the READY waiting on its socket.
    const bmi::Post s3 =
        p.client.post_send(p.to_server, large.data(), large.size(), 10, nullptr, p.cctx);
    exchange(p);
    const bmi::Post s4 =
        p.client.post_send(p.to_server, other.data(), other.size(), 10, nullptr, p.cctx);
    r2 = p.server.post_recv(p.to_client, d2.data(), d2.size(), 10, nullptr, p.sctx);
    ATF_REQUIRE_EQ(finish(p.server, r1, p.client).error, 0);
    ATF_REQUIRE_EQ(finish(p.server, r2, p.client).error, 0);
    ATF_REQUIRE_EQ(finish(p.client, s3, p.server).error, 0);
    ATF_REQUIRE_EQ(finish(p.client, s4, p.server).error, 0);
    ATF_REQUIRE(large == d1);
    ATF_REQUIRE(other == d2);
    ATF_REQUIRE_EQ(p.client.get_info(bmi::Info::direct_sends), before);

    // 3. The announced receive is cancelled before the message comes: the
    //    message waits in BMI for the next receive, intact.
    std::fill(d2.begin(), d2.end(), 0);
    r1 = p.server.post_recv(p.to_client, d1.data(), d1.size(), 11, nullptr, p.sctx);
    exchange(p);
    ATF_REQUIRE_EQ(p.server.cancel(r1.op), 0);
    ATF_REQUIRE_EQ(finish(p.server, r1, p.client).error, -ECANCELED);
    ATF_REQUIRE_EQ(
        finish(p.client,
               p.client.post_send(p.to_server, large.data(), large.size(), 11, nullptr, p.cctx),
               p.server)
            .error,
        0);
    ATF_REQUIRE_EQ(p.client.get_info(bmi::Info::direct_sends), before + 1);
    exchange(p);
    r2 = p.server.post_recv(p.to_client, d2.data(), d2.size(), 11, nullptr, p.sctx);
    const bmi::Completion c = finish(p.server, r2, p.client);
    ATF_REQUIRE_EQ(c.error, 0);
    ATF_REQUIRE_EQ(c.actual_size, large.size());
    ATF_REQUIRE(large == d2);
}

namespace {

// The rxe port's state, from sysfs ("4: ACTIVE", "1: DOWN").
std::string ib_port_state()
{
    std::ifstream f("/sys/class/infiniband/rxe0/ports/1/state");
    std::string line;
    std::getline(f, line);
    return line;
}

void shell(const std::string &cmd)
{
    // NOLINTNEXTLINE(cert-env33-c,concurrency-mt-unsafe): the rig's own command, one thread
    ATF_REQUIRE_EQ(std::system(cmd.c_str()), 0);
}

} // namespace

// The cable is pulled (the link under the RDMA device goes down) while a
// rendezvous is under way: both ends fail promptly with a precise error, not
// at the idle timeout.
// Soft-RoCE keeps moving data between two queue pairs of one device even
// with its port down (its loopback path), and moves it faster than a
// command can take the link down, so the transfer is parked: the RTS waits
// at the receiver, whose other receive from the same peer is posted.  What
// must fail them is the port's PORT_ERR event.
ATF_TEST_CASE_WITHOUT_HEAD(link_down_mid_transfer_ib);
ATF_TEST_CASE_BODY(link_down_mid_transfer_ib)
{
    use_ib();
    const char *link = std::getenv("PVFS_TEST_IB_LINK"); // NOLINT(concurrency-mt-unsafe)
    if (link == nullptr || *link == '\0')
        ATF_SKIP("PVFS_TEST_IB_LINK (the link under the device) is unset");
    Pair p;
    p.hello();
    constexpr std::size_t size = std::size_t{16} << 20;
    const std::vector<unsigned char> src = pattern(size, 4);
    std::vector<unsigned char> dst(size);
    int other = 0;
    const bmi::Post r = p.server.post_recv(p.to_client, &other, sizeof other, 29, nullptr, p.sctx);
    const bmi::Post s = p.client.post_send(p.to_server, src.data(), size, 30, nullptr, p.cctx);
    ATF_REQUIRE(r.ok() && s.ok() && !r.completed && !s.completed);
    exchange(p); // the RTS reaches the server and waits there
    shell(std::string("ip link set ") + link + " down");
    const auto start = std::chrono::steady_clock::now();
    bmi::Completion rc;
    bmi::Completion sc;
    bool rdone = false;
    bool sdone = false;
    while (!rdone || !sdone) {
        if (!rdone)
            rdone = p.server.test(r.op, rc, 1);
        if (!sdone)
            sdone = p.client.test(s.op, sc, 1);
        if (std::chrono::steady_clock::now() - start > 30s)
            ATF_FAIL("ops still pending 30 s after the link went down");
    }
    const auto took = std::chrono::steady_clock::now() - start;
    shell(std::string("ip link set ") + link + " up");
    for (const int e : {rc.error, sc.error}) {
        if (e != -ENETDOWN && e != -ECONNRESET)
            ATF_FAIL("an op ended with " + std::to_string(e) + " after the link went down");
    }
    // One of the two Bmi objects hears of the port itself (ENETDOWN), the
    // other of its peer closing (ECONNRESET): one process, one event.
    ATF_REQUIRE(rc.error == -ENETDOWN || sc.error == -ENETDOWN);
    ATF_REQUIRE(took < 5s);
    // Reconnecting after the flap is not tested: once a connection was
    // torn down while its port was down, Soft-RoCE's connection manager
    // connects nobody any more until reboot (perftest neither; see
    // docs/bmi.md).  Reconnecting after a peer's death is
    // server_restart_reconnect.
    const auto up_deadline = std::chrono::steady_clock::now() + 30s;
    while (ib_port_state().find("ACTIVE") == std::string::npos) {
        ATF_REQUIRE(std::chrono::steady_clock::now() < up_deadline);
        std::this_thread::sleep_for(100ms);
    }
}

namespace {

// Anonymous memory at a given address (MAP_FIXED) or anywhere.
unsigned char *map_at(void *where, std::size_t size)
{
    const int fixed = where != nullptr ? MAP_FIXED : 0;
    void *m =
        ::mmap(where, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | fixed, -1, 0);
    ATF_REQUIRE(m != MAP_FAILED);
    if (where != nullptr)
        ATF_REQUIRE_EQ(m, where);
    return static_cast<unsigned char *>(m);
}

} // namespace

// The registration cache: a buffer used again is not registered again, and
// memory freed and mapped anew at the same address is never reached through
// the old registration, on the sending side (which would send the old
// pages) or the receiving side (which would fill them).
ATF_TEST_CASE_WITHOUT_HEAD(registration_cache_ib);
ATF_TEST_CASE_BODY(registration_cache_ib)
{
    use_ib();
    Pair p;
    p.hello();
    constexpr std::size_t size = std::size_t{4} << 20;
    unsigned char *sbuf = map_at(nullptr, size);
    unsigned char *rbuf = map_at(nullptr, size);
    int tag = 40;
    const auto transfer = [&](unsigned seed) {
        const std::vector<unsigned char> want = pattern(size, seed);
        std::memcpy(sbuf, want.data(), size);
        std::memset(rbuf, 0, size);
        const bmi::Post r = p.server.post_recv(p.to_client, rbuf, size, tag, nullptr, p.sctx);
        const bmi::Post s = p.client.post_send(p.to_server, sbuf, size, tag, nullptr, p.cctx);
        ++tag;
        ATF_REQUIRE_EQ(finish(p.client, s, p.server).error, 0);
        ATF_REQUIRE_EQ(finish(p.server, r, p.client).actual_size, size);
        ATF_REQUIRE(std::memcmp(rbuf, want.data(), size) == 0);
    };
    const auto regs = [](bmi::Bmi &b) { return b.get_info(bmi::Info::registrations); };
    const auto hits = [](bmi::Bmi &b) { return b.get_info(bmi::Info::registration_hits); };
    const std::uint64_t c0 = regs(p.client);
    const std::uint64_t s0 = regs(p.server);
    transfer(1);
    transfer(2);
    transfer(3);
    // Registered once each side, then found in the cache.
    ATF_REQUIRE_EQ(regs(p.client) - c0, 1U);
    ATF_REQUIRE_EQ(regs(p.server) - s0, 1U);
    ATF_REQUIRE(hits(p.client) >= 2 && hits(p.server) >= 2);
    // The sender's buffer is freed and new memory mapped at its address.
    ATF_REQUIRE_EQ(::munmap(sbuf, size), 0);
    ATF_REQUIRE_EQ(map_at(sbuf, size), sbuf);
    transfer(4);
    ATF_REQUIRE_EQ(regs(p.client) - c0, 2U);
    // The receiver's too.
    ATF_REQUIRE_EQ(::munmap(rbuf, size), 0);
    ATF_REQUIRE_EQ(map_at(rbuf, size), rbuf);
    transfer(5);
    ATF_REQUIRE_EQ(regs(p.server) - s0, 2U);
    // Half of it replaced: still detected (every page is checked).
    ATF_REQUIRE_EQ(map_at(sbuf + size / 2, size / 2), sbuf + size / 2);
    transfer(6);
    ATF_REQUIRE_EQ(regs(p.client) - c0, 3U);
    // A caller-registered buffer (register_memory) needs none at all.
    {
        const bmi::Registration keep = p.client.register_memory(sbuf, size);
        const std::uint64_t before = regs(p.client) + hits(p.client);
        transfer(7);
        ATF_REQUIRE_EQ(regs(p.client) + hits(p.client), before);
    }
    ::munmap(sbuf, size);
    ::munmap(rbuf, size);
}

// A process forked from one that opened RDMA devices cannot use them (the
// kernel refuses the inherited contexts): ib posts there fail at once with
// a clear error instead of failing obscurely later.
ATF_TEST_CASE_WITHOUT_HEAD(fork_after_open_ib);
ATF_TEST_CASE_BODY(fork_after_open_ib)
{
    use_ib();
    Pair p;
    p.hello();
    const std::string url = p.server.listen_addresses().at(0);
    const pid_t child = ::fork();
    ATF_REQUIRE(child >= 0);
    if (child == 0) {
        bmi::Bmi c(client_options());
        const bmi::ContextId ctx = c.open_context();
        const bmi::Addr a = c.addr_lookup(url);
        const int v = 1;
        const bmi::Post s = c.post_send(a, &v, sizeof v, 1, nullptr, ctx);
        ::_exit(s.error == -ENOTSUP ? 0 : 1);
    }
    int status = 0;
    ATF_REQUIRE_EQ(::waitpid(child, &status, 0), child);
    ATF_REQUIRE(WIFEXITED(status));
    ATF_REQUIRE_EQ(WEXITSTATUS(status), 0);
    // And this process goes on using its own.
    int got = 0;
    const bmi::Post r = p.server.post_recv(p.to_client, &got, sizeof got, 2, nullptr, p.sctx);
    const int v = 9;
    finish(p.client, p.client.post_send(p.to_server, &v, sizeof v, 2, nullptr, p.cctx), p.server);
    ATF_REQUIRE_EQ(finish(p.server, r, p.client).error, 0);
    ATF_REQUIRE_EQ(got, 9);
}

// One-sided transfers: the client exposes memory and sends its descriptor
// in a request; the server reads from it and writes into it with no action
// of the client's, and a put is in place before the server's next message.
ATF_TEST_CASE_WITHOUT_HEAD(one_sided_ib);
ATF_TEST_CASE_BODY(one_sided_ib)
{
    use_ib();
    Pair p;
    p.hello();
    constexpr std::size_t a_size = std::size_t{1} << 20;
    constexpr std::size_t b_size = (std::size_t{2} << 20) + 333;
    std::vector<unsigned char> mem = pattern(a_size + b_size + 4096, 11);
    const std::array<bmi::MutableBuffer, 2> pieces{
        bmi::MutableBuffer{mem.data(), a_size},
        bmi::MutableBuffer{mem.data() + a_size + 4096, b_size}}; // a gap between
    bmi::Exposure exposure;
    std::vector<std::byte> desc;
    ATF_REQUIRE_EQ(p.client.expose(p.to_server, pieces, exposure, desc), 0);
    // The descriptor travels in a request.
    finish(p.client,
           p.client.post_sendunexpected(p.to_server, desc.data(), desc.size(), 3, nullptr, p.cctx),
           p.server);
    const bmi::UnexpectedMessage u = wait_unexpected(p.server, p.client);
    const std::vector<std::byte> got_desc(u.data().begin(), u.data().end());
    std::vector<unsigned char> whole(a_size + b_size);
    std::memcpy(whole.data(), mem.data(), a_size);
    std::memcpy(whole.data() + a_size, mem.data() + a_size + 4096, b_size);

    // get: all of it, then a piece across the boundary of the two pieces.
    std::vector<unsigned char> in(a_size + b_size);
    const auto driven = [&](const bmi::Post &post) {
        // The client is only polled, as any process between requests.
        return finish(p.server, post, p.client);
    };
    bmi::Completion c =
        driven(p.server.post_get(u.peer(), got_desc, 0, in.data(), in.size(), nullptr, p.sctx));
    ATF_REQUIRE_EQ(c.error, 0);
    ATF_REQUIRE(in == whole);
    std::vector<unsigned char> part(5000);
    c = driven(p.server.post_get(u.peer(), got_desc, a_size - 1000, part.data(), part.size(),
                                 nullptr, p.sctx));
    ATF_REQUIRE_EQ(c.error, 0);
    ATF_REQUIRE(std::equal(part.begin(), part.end(),
                           whole.begin() + static_cast<std::ptrdiff_t>(a_size - 1000)));

    // put: 2 MiB from offset 100, then a message; the client finds the
    // bytes in place when the message arrives.
    const std::vector<unsigned char> fresh = pattern(std::size_t{2} << 20, 99);
    int note = 0;
    const bmi::Post r = p.client.post_recv(p.to_server, &note, sizeof note, 4, nullptr, p.cctx);
    c = driven(
        p.server.post_put(u.peer(), got_desc, 100, fresh.data(), fresh.size(), nullptr, p.sctx));
    ATF_REQUIRE_EQ(c.error, 0);
    const int done = 1;
    finish(p.server, p.server.post_send(u.peer(), &done, sizeof done, 4, nullptr, p.sctx),
           p.client);
    ATF_REQUIRE_EQ(finish(p.client, r, p.server).error, 0);
    std::vector<unsigned char> expect = whole;
    std::copy(fresh.begin(), fresh.end(), expect.begin() + 100);
    ATF_REQUIRE(
        std::equal(mem.begin(), mem.begin() + static_cast<std::ptrdiff_t>(a_size), expect.begin()));
    ATF_REQUIRE(std::equal(mem.begin() + static_cast<std::ptrdiff_t>(a_size + 4096), mem.end(),
                           expect.begin() + static_cast<std::ptrdiff_t>(a_size)));
    // The gap between the pieces was not touched.
    const std::vector<unsigned char> orig = pattern(a_size + b_size + 4096, 11);
    ATF_REQUIRE(std::equal(mem.begin() + static_cast<std::ptrdiff_t>(a_size),
                           mem.begin() + static_cast<std::ptrdiff_t>(a_size + 4096),
                           orig.begin() + static_cast<std::ptrdiff_t>(a_size)));

    // Beyond the exposed bytes, or a descriptor that is not one: EINVAL.
    ATF_REQUIRE_EQ(
        p.server
            .post_get(u.peer(), got_desc, a_size + b_size - 10, part.data(), 11, nullptr, p.sctx)
            .error,
        -EINVAL);
    std::vector<std::byte> junk(got_desc.size(), std::byte{0x7f});
    ATF_REQUIRE_EQ(p.server.post_get(u.peer(), junk, 0, part.data(), 10, nullptr, p.sctx).error,
                   -EINVAL);
    ATF_REQUIRE_EQ(p.server.post_get(u.peer(), {}, 0, part.data(), 10, nullptr, p.sctx).error,
                   -EINVAL);
}

// The poll time follows the waits: replies that keep coming a little after
// the configured spin stretch it (at most 1 ms), and waits for slow ones
// bring it back to the spin.
BMI_TEST(poll_time_learns)
{
    Pair p;
    const std::uint64_t spin = p.client.get_info(bmi::Info::spin_us);
    ATF_REQUIRE_EQ(p.client.get_info(bmi::Info::poll_us), spin);
    ATF_REQUIRE_EQ(p.client.set_info(bmi::Info::poll_us, 5), -EINVAL);
    p.hello();
    // n requests, each answered after `delay` by the server on a thread of
    // its own; returns how long the client waited for each answer.
    const auto rounds = [&p](int n, std::chrono::microseconds delay) {
        std::string trouble;
        std::thread echo([&] {
            const auto done = [&](const bmi::Post &post) {
                bmi::Completion c;
                const auto deadline = std::chrono::steady_clock::now() + 20s;
                while (post.ok() && !post.completed && !p.server.test(post.op, c, 100)) {
                    if (std::chrono::steady_clock::now() > deadline)
                        return false;
                }
                return post.ok() && (post.completed || c.error == 0);
            };
            for (int i = 0; i < n && trouble.empty(); ++i) {
                int v = 0;
                if (!done(p.server.post_recv(p.to_client, &v, sizeof v, 7, nullptr, p.sctx)))
                    trouble = "request " + std::to_string(i) + " not received";
                std::this_thread::sleep_for(delay);
                if (!done(p.server.post_send(p.to_client, &v, sizeof v, 8, nullptr, p.sctx)))
                    trouble = "answer " + std::to_string(i) + " not sent";
            }
        });
        std::vector<std::chrono::microseconds> waits;
        for (int i = 0; i < n; ++i) {
            int back = -1;
            const bmi::Post r =
                p.client.post_recv(p.to_server, &back, sizeof back, 8, nullptr, p.cctx);
            ATF_REQUIRE(r.ok());
            const bmi::Post sent =
                p.client.post_send(p.to_server, &i, sizeof i, 7, nullptr, p.cctx);
            ATF_REQUIRE(sent.ok());
            bmi::Completion c;
            if (!sent.completed)
                ATF_REQUIRE(p.client.test(sent.op, c, 20000));
            // One wait per answer, as long as it takes: what the client learns from.
            const auto start = std::chrono::steady_clock::now();
            ATF_REQUIRE(r.completed || p.client.test(r.op, c, 20000));
            waits.push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now() - start));
            ATF_REQUIRE_EQ(back, i);
        }
        echo.join();
        if (!trouble.empty())
            ATF_FAIL(trouble);
        return waits;
    };
    // A loaded machine answers late whatever the delay: the stretch is
    // only required once the last eight waits were short (under 1 ms).
    bool short_waits = false;
    std::string seen;
    for (int attempt = 0; attempt < 5 && !short_waits; ++attempt) {
        const auto waits = rounds(24, 150us);
        short_waits = std::all_of(waits.end() - 8, waits.end(), [](auto w) { return w < 1ms; });
        seen = std::to_string(waits.back().count());
    }
    if (!short_waits)
        ATF_SKIP("this machine is too loaded to answer within 1 ms (last wait " + seen + " us)");
    const std::uint64_t learned = p.client.get_info(bmi::Info::poll_us);
    if (learned <= spin || learned > 1000)
        ATF_FAIL("after answers 150 us late the poll time is " + std::to_string(learned) +
                 " us; expected above the spin (" + std::to_string(spin) + " us), at most 1 ms");
    rounds(16, 5ms);
    ATF_REQUIRE_EQ(p.client.get_info(bmi::Info::poll_us), spin);
    // Polling turned off stays off.
    ATF_REQUIRE_EQ(p.client.set_info(bmi::Info::spin_us, 0), 0);
    rounds(16, 150us);
    ATF_REQUIRE_EQ(p.client.get_info(bmi::Info::poll_us), 0U);
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, one_sided_ib);
    ATF_ADD_TEST_CASE(tcs, one_sided_not_over_tcp_epoll);
    ATF_ADD_TEST_CASE(tcs, poll_time_learns_epoll);
    ATF_ADD_TEST_CASE(tcs, poll_time_learns_uring);
    ATF_ADD_TEST_CASE(tcs, one_sided_not_over_tcp_uring);
    ATF_ADD_TEST_CASE(tcs, fork_after_open_ib);
    ATF_ADD_TEST_CASE(tcs, registration_cache_ib);
    ATF_ADD_TEST_CASE(tcs, link_down_mid_transfer_ib);
    ATF_ADD_TEST_CASE(tcs, unexpected_flow_epoll);
    ATF_ADD_TEST_CASE(tcs, unexpected_flow_ib);
    ATF_ADD_TEST_CASE(tcs, unexpected_flow_uring);
    ATF_ADD_TEST_CASE(tcs, unexpected_too_large_epoll);
    ATF_ADD_TEST_CASE(tcs, unexpected_too_large_ib);
    ATF_ADD_TEST_CASE(tcs, unexpected_too_large_uring);
    ATF_ADD_TEST_CASE(tcs, ordering_and_tags_epoll);
    ATF_ADD_TEST_CASE(tcs, ordering_and_tags_ib);
    ATF_ADD_TEST_CASE(tcs, ordering_and_tags_uring);
    ATF_ADD_TEST_CASE(tcs, immediate_completion_epoll);
    ATF_ADD_TEST_CASE(tcs, immediate_completion_ib);
    ATF_ADD_TEST_CASE(tcs, immediate_completion_uring);
    ATF_ADD_TEST_CASE(tcs, send_then_close_epoll);
    ATF_ADD_TEST_CASE(tcs, send_then_close_ib);
    ATF_ADD_TEST_CASE(tcs, send_then_close_uring);
    ATF_ADD_TEST_CASE(tcs, receiver_stops_posting_epoll);
    ATF_ADD_TEST_CASE(tcs, receiver_stops_posting_ib);
    ATF_ADD_TEST_CASE(tcs, receiver_stops_posting_uring);
    ATF_ADD_TEST_CASE(tcs, short_and_oversize_epoll);
    ATF_ADD_TEST_CASE(tcs, short_and_oversize_ib);
    ATF_ADD_TEST_CASE(tcs, short_and_oversize_uring);
    ATF_ADD_TEST_CASE(tcs, rendezvous_list_epoll);
    ATF_ADD_TEST_CASE(tcs, rendezvous_list_ib);
    ATF_ADD_TEST_CASE(tcs, rendezvous_list_uring);
    ATF_ADD_TEST_CASE(tcs, many_outstanding_epoll);
    ATF_ADD_TEST_CASE(tcs, many_outstanding_ib);
    ATF_ADD_TEST_CASE(tcs, many_outstanding_uring);
    ATF_ADD_TEST_CASE(tcs, cancel_ops_epoll);
    ATF_ADD_TEST_CASE(tcs, cancel_ops_ib);
    ATF_ADD_TEST_CASE(tcs, cancel_ops_uring);
    ATF_ADD_TEST_CASE(tcs, peer_dies_mid_message_epoll);
    ATF_ADD_TEST_CASE(tcs, peer_dies_mid_message_ib);
    ATF_ADD_TEST_CASE(tcs, peer_dies_mid_message_uring);
    ATF_ADD_TEST_CASE(tcs, server_restart_reconnect_epoll);
    ATF_ADD_TEST_CASE(tcs, server_restart_reconnect_ib);
    ATF_ADD_TEST_CASE(tcs, server_restart_reconnect_uring);
    ATF_ADD_TEST_CASE(tcs, garbage_on_socket_epoll);
    ATF_ADD_TEST_CASE(tcs, garbage_on_socket_uring);
    ATF_ADD_TEST_CASE(tcs, idle_timeout_epoll);
    ATF_ADD_TEST_CASE(tcs, idle_timeout_ib);
    ATF_ADD_TEST_CASE(tcs, idle_timeout_uring);
    ATF_ADD_TEST_CASE(tcs, idle_peer_alive_epoll);
    ATF_ADD_TEST_CASE(tcs, idle_peer_alive_ib);
    ATF_ADD_TEST_CASE(tcs, idle_peer_alive_uring);
    ATF_ADD_TEST_CASE(tcs, testany_sees_both_epoll);
    ATF_ADD_TEST_CASE(tcs, testany_sees_both_ib);
    ATF_ADD_TEST_CASE(tcs, testany_sees_both_uring);
    ATF_ADD_TEST_CASE(tcs, watch_fd_epoll);
    ATF_ADD_TEST_CASE(tcs, watch_fd_ib);
    ATF_ADD_TEST_CASE(tcs, watch_fd_uring);
    ATF_ADD_TEST_CASE(tcs, receive_outlives_stream_epoll);
    ATF_ADD_TEST_CASE(tcs, receive_outlives_stream_ib);
    ATF_ADD_TEST_CASE(tcs, receive_outlives_stream_uring);
    ATF_ADD_TEST_CASE(tcs, receive_survives_own_pause_epoll);
    ATF_ADD_TEST_CASE(tcs, receive_survives_own_pause_ib);
    ATF_ADD_TEST_CASE(tcs, receive_survives_own_pause_uring);
    ATF_ADD_TEST_CASE(tcs, bad_addresses_epoll);
    ATF_ADD_TEST_CASE(tcs, bad_addresses_ib);
    ATF_ADD_TEST_CASE(tcs, bad_addresses_uring);
    ATF_ADD_TEST_CASE(tcs, drop_addr_epoll);
    ATF_ADD_TEST_CASE(tcs, drop_addr_ib);
    ATF_ADD_TEST_CASE(tcs, drop_addr_uring);
    ATF_ADD_TEST_CASE(tcs, direct_into_announced_receive_epoll);
    ATF_ADD_TEST_CASE(tcs, direct_into_announced_receive_uring);
    ATF_ADD_TEST_CASE(tcs, announced_receive_order_epoll);
    ATF_ADD_TEST_CASE(tcs, announced_receive_order_uring);
}
