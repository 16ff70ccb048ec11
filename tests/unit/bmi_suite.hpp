// BMI's semantic suite (the bmi_tcp_*_test programs): immediate completion,
// rendezvous, list I/O, cancellation and failure handling.  Client and
// server are two Bmi objects in one thread; `poke` drives the other side
// while one side waits.  Every case runs over TCP on loopback with each
// progress engine, and the transport-neutral ones over the ib method too
// when PVFS_TEST_IB_ADDR names the address of an RDMA device (the VM rig's
// Soft-RoCE: vm/ib_test).  This header holds what the programs share: the
// method and engine under test, the client/server pair and the macros that
// declare a case once per engine and method.
#ifndef PVFS_TESTS_UNIT_BMI_SUITE_HPP
#define PVFS_TESTS_UNIT_BMI_SUITE_HPP

#include <atf-c++.hpp>

#include "bmi/bmi.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace pvfs::test {

// NOLINTBEGIN(cppcoreguidelines-avoid-non-const-global-variables)
// The TCP progress engine under test: every case runs once per engine.
extern std::string g_engine;
// The method under test, and the host its servers listen on.
extern std::string g_scheme;
extern std::string g_host;
// NOLINTEND(cppcoreguidelines-avoid-non-const-global-variables)

std::string url_of(const std::string &hostport);

// Selects the ib method, or skips: it needs an RDMA device.
void use_ib();

bmi::Options client_options();
bmi::Options server_options(const std::string &url = {});

// Progress only: testunexpected with max 0 moves bytes and returns.
void poke(bmi::Bmi &b);

// Waits for op on `owner`, driving `other` meanwhile; fails after 20 s.
bmi::Completion wait_op(bmi::Bmi &owner, bmi::OpId op, bmi::Bmi &other);

// Result of a post that may complete now or later.
bmi::Completion finish(bmi::Bmi &owner, const bmi::Post &p, bmi::Bmi &other);

bmi::UnexpectedMessage wait_unexpected(bmi::Bmi &server, bmi::Bmi &client);

struct Pair {
    bmi::Bmi server{server_options()};
    bmi::Bmi client{client_options()};
    bmi::ContextId sctx = server.open_context();
    bmi::ContextId cctx = client.open_context();
    bmi::Addr to_server = client.addr_lookup(server.listen_addresses().at(0));
    bmi::Addr to_client = bmi::no_addr;

    // Introduces the client: one unexpected message gives the server its Addr.
    void hello();
};

// Drives both sides a few rounds: frames queued on either reach the other.
void exchange(Pair &p);

std::vector<unsigned char> pattern(std::size_t n, unsigned seed);

} // namespace pvfs::test

// Declares NAME_epoll and NAME_uring running the same body (ATF registers
// test cases by name, so this must be a macro).
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage)
#define BMI_TEST(name)                                                                             \
    static void name##_body();                                                                     \
    ATF_TEST_CASE_WITHOUT_HEAD(name##_epoll);                                                      \
    ATF_TEST_CASE_BODY(name##_epoll)                                                               \
    {                                                                                              \
        pvfs::test::g_engine = "epoll";                                                            \
        name##_body();                                                                             \
    }                                                                                              \
    ATF_TEST_CASE_WITHOUT_HEAD(name##_uring);                                                      \
    ATF_TEST_CASE_BODY(name##_uring)                                                               \
    {                                                                                              \
        pvfs::test::g_engine = "uring";                                                            \
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
        pvfs::test::use_ib();                                                                      \
        name##_body();                                                                             \
    }                                                                                              \
    BMI_TEST(name)

#endif // PVFS_TESTS_UNIT_BMI_SUITE_HPP
