// BMI's semantic suite (bmi_suite.hpp): unexpected messages, their size
// limit, and the flow control that holds back a sender whose receiver
// stops posting receives or keeps its unexpected messages.
#include "bmi_suite.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

using namespace pvfs::test;
using namespace std::chrono_literals;

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

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, unexpected_flow_epoll);
    ATF_ADD_TEST_CASE(tcs, unexpected_flow_ib);
    ATF_ADD_TEST_CASE(tcs, unexpected_flow_uring);
    ATF_ADD_TEST_CASE(tcs, unexpected_too_large_epoll);
    ATF_ADD_TEST_CASE(tcs, unexpected_too_large_ib);
    ATF_ADD_TEST_CASE(tcs, unexpected_too_large_uring);
    ATF_ADD_TEST_CASE(tcs, receiver_stops_posting_epoll);
    ATF_ADD_TEST_CASE(tcs, receiver_stops_posting_ib);
    ATF_ADD_TEST_CASE(tcs, receiver_stops_posting_uring);
}
