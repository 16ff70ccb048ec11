// BMI's semantic suite (bmi_suite.hpp): the idle timeout and the liveness
// pings -- a hung peer fails the ops waiting on it, a live but quiet one
// does not, whether the quiet side is the peer or this one.
#include "bmi_suite.hpp"

#include <array>
#include <cerrno>
#include <chrono>
#include <string>

using namespace pvfs::test;
using namespace std::chrono_literals;

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

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, idle_timeout_epoll);
    ATF_ADD_TEST_CASE(tcs, idle_timeout_ib);
    ATF_ADD_TEST_CASE(tcs, idle_timeout_uring);
    ATF_ADD_TEST_CASE(tcs, idle_peer_alive_epoll);
    ATF_ADD_TEST_CASE(tcs, idle_peer_alive_ib);
    ATF_ADD_TEST_CASE(tcs, idle_peer_alive_uring);
    ATF_ADD_TEST_CASE(tcs, receive_outlives_stream_epoll);
    ATF_ADD_TEST_CASE(tcs, receive_outlives_stream_ib);
    ATF_ADD_TEST_CASE(tcs, receive_outlives_stream_uring);
    ATF_ADD_TEST_CASE(tcs, receive_survives_own_pause_epoll);
    ATF_ADD_TEST_CASE(tcs, receive_survives_own_pause_ib);
    ATF_ADD_TEST_CASE(tcs, receive_survives_own_pause_uring);
}
