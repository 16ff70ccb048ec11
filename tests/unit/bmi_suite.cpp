// What the programs of BMI's semantic suite share (bmi_suite.hpp).
#include "bmi_suite.hpp"

#include <chrono>
#include <cstdlib>
#include <utility>

namespace pvfs::test {

using namespace std::chrono_literals;

// NOLINTBEGIN(cppcoreguidelines-avoid-non-const-global-variables)
std::string g_engine;
std::string g_scheme = "tcp";
std::string g_host = "127.0.0.1";
// NOLINTEND(cppcoreguidelines-avoid-non-const-global-variables)

std::string url_of(const std::string &hostport)
{
    return g_scheme + "://" + hostport;
}

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

bmi::Options server_options(const std::string &url)
{
    bmi::Options o;
    o.role = bmi::Role::server;
    o.listen = {url.empty() ? url_of(g_host + ":0") : url};
    o.tcp_engine = g_engine;
    return o;
}

void poke(bmi::Bmi &b)
{
    std::vector<bmi::UnexpectedMessage> none;
    b.testunexpected(none, 0, 0);
}

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

void Pair::hello()
{
    const char msg[] = "hi";
    finish(client, client.post_sendunexpected(to_server, msg, sizeof msg, 1, nullptr, cctx),
           server);
    const bmi::UnexpectedMessage u = wait_unexpected(server, client);
    to_client = u.peer();
    ATF_REQUIRE(to_client != bmi::no_addr);
}

void exchange(Pair &p)
{
    for (int i = 0; i < 20; ++i) {
        poke(p.server);
        poke(p.client);
    }
}

std::vector<unsigned char> pattern(std::size_t n, unsigned seed)
{
    std::vector<unsigned char> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<unsigned char>((i * 131U + seed) & 0xffU);
    return v;
}

} // namespace pvfs::test
