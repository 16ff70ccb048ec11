// "No allocation per message on the hot path", measured: this program
// counts calls of the global operator new (alloc_count.hpp) while client
// and server exchange messages in steady state (after a warm-up that sizes
// the pools).
#include <atf-c++.hpp>

#include "alloc_count.hpp"
#include "bmi/bmi.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace {

struct Pair {
    explicit Pair(const std::string &engine)
        : server([&] {
              bmi::Options o;
              o.role = bmi::Role::server;
              o.listen = {"tcp://127.0.0.1:0"};
              o.tcp_engine = engine;
              return o;
          }()),
          client([&] {
              bmi::Options o;
              o.tcp_engine = engine;
              return o;
          }()),
          sctx(server.open_context()), cctx(client.open_context()),
          to_server(client.addr_lookup(server.listen_addresses().at(0)))
    {
    }
    bmi::Bmi server;
    bmi::Bmi client;
    bmi::ContextId sctx = 0;
    bmi::ContextId cctx = 0;
    bmi::Addr to_server = bmi::no_addr;
    bmi::Addr to_client = bmi::no_addr;
    std::vector<bmi::UnexpectedMessage> unexpected = std::vector<bmi::UnexpectedMessage>(0);
};

// Drives both ends until op (on owner) completes.
void wait(bmi::Bmi &owner, const bmi::Post &p, bmi::Bmi &other)
{
    ATF_REQUIRE_EQ(p.error, 0);
    if (p.completed)
        return;
    bmi::Completion c;
    std::vector<bmi::UnexpectedMessage> none;
    for (int i = 0; i < 1000000; ++i) {
        if (owner.test(p.op, c, 0)) {
            ATF_REQUIRE_EQ(c.error, 0);
            return;
        }
        other.testunexpected(none, 0, 0);
    }
    ATF_FAIL("op did not complete");
}

// One round trip: an unexpected request, an eager reply, and (when big is
// not empty) a rendezvous message.
void round_trip(Pair &p, std::vector<char> &buf, std::vector<char> &big, std::vector<char> &bigdst)
{
    const bmi::Post s = p.client.post_sendunexpected(p.to_server, "ping", 4, 1, nullptr, p.cctx);
    const bmi::Post r = p.client.post_recv(p.to_server, buf.data(), buf.size(), 2, nullptr, p.cctx);
    bmi::Post rb{};
    if (!big.empty())
        rb = p.client.post_recv(p.to_server, bigdst.data(), bigdst.size(), 3, nullptr, p.cctx);
    wait(p.client, s, p.server);
    p.unexpected.clear();
    std::vector<bmi::UnexpectedMessage> none;
    while (p.server.testunexpected(p.unexpected, 1, 0) == 0)
        p.client.testunexpected(none, 0, 0);
    p.to_client = p.unexpected[0].peer();
    wait(p.server, p.server.post_send(p.to_client, "pong", 4, 2, nullptr, p.sctx), p.client);
    if (!big.empty()) {
        wait(p.server, p.server.post_send(p.to_client, big.data(), big.size(), 3, nullptr, p.sctx),
             p.client);
        wait(p.client, rb, p.server);
    }
    wait(p.client, r, p.server);
    p.unexpected.clear(); // frees the message back to BMI's pool
}

void check_engine(const std::string &engine, bool with_rendezvous)
{
    Pair p(engine);
    std::vector<char> buf(64);
    std::vector<char> big(with_rendezvous ? std::size_t{1} << 20 : 0, 'x');
    std::vector<char> bigdst(big.size());
    p.unexpected.reserve(4);
    for (int i = 0; i < 200; ++i)
        round_trip(p, buf, big, bigdst);
    pvfs::test::start_counting_allocations();
    const int rounds = 1000;
    for (int i = 0; i < rounds; ++i)
        round_trip(p, buf, big, bigdst);
    const std::size_t n = pvfs::test::stop_counting_allocations();
    std::printf("%s: %zu allocations in %d round trips\n", engine.c_str(), n, rounds);
    // Zero is the goal; a handful (a pool growing once) is tolerated, one
    // per message is not.
    if (n >= 10)
        ATF_FAIL(engine + ": " + std::to_string(n) + " allocations in " + std::to_string(rounds) +
                 " round trips");
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(small_messages_epoll);
ATF_TEST_CASE_BODY(small_messages_epoll)
{
    check_engine("epoll", false);
}
ATF_TEST_CASE_WITHOUT_HEAD(small_messages_uring);
ATF_TEST_CASE_BODY(small_messages_uring)
{
    check_engine("uring", false);
}
ATF_TEST_CASE_WITHOUT_HEAD(rendezvous_epoll);
ATF_TEST_CASE_BODY(rendezvous_epoll)
{
    check_engine("epoll", true);
}
ATF_TEST_CASE_WITHOUT_HEAD(rendezvous_uring);
ATF_TEST_CASE_BODY(rendezvous_uring)
{
    check_engine("uring", true);
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, small_messages_epoll);
    ATF_ADD_TEST_CASE(tcs, small_messages_uring);
    ATF_ADD_TEST_CASE(tcs, rendezvous_epoll);
    ATF_ADD_TEST_CASE(tcs, rendezvous_uring);
}
