// BMI's semantic suite (bmi_suite.hpp): receives announced to the sender
// (READY), into which a message above the eager limit goes at once, and
// the order of a (peer, tag)'s messages around them.
#include "bmi_suite.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <vector>

using namespace pvfs::test;
using namespace std::chrono_literals;

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

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, direct_into_announced_receive_epoll);
    ATF_ADD_TEST_CASE(tcs, direct_into_announced_receive_uring);
    ATF_ADD_TEST_CASE(tcs, announced_receive_order_epoll);
    ATF_ADD_TEST_CASE(tcs, announced_receive_order_uring);
}
