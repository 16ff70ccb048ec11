// BMI's semantic suite (bmi_suite.hpp): point-to-point messages -- tags and
// their order, immediate completion, short and oversize receives,
// rendezvous and list I/O, thousands of outstanding receives, cancellation.
#include "bmi_suite.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

using namespace pvfs::test;
using namespace std::chrono_literals;

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

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, ordering_and_tags_epoll);
    ATF_ADD_TEST_CASE(tcs, ordering_and_tags_ib);
    ATF_ADD_TEST_CASE(tcs, ordering_and_tags_uring);
    ATF_ADD_TEST_CASE(tcs, immediate_completion_epoll);
    ATF_ADD_TEST_CASE(tcs, immediate_completion_ib);
    ATF_ADD_TEST_CASE(tcs, immediate_completion_uring);
    ATF_ADD_TEST_CASE(tcs, send_then_close_epoll);
    ATF_ADD_TEST_CASE(tcs, send_then_close_ib);
    ATF_ADD_TEST_CASE(tcs, send_then_close_uring);
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
}
