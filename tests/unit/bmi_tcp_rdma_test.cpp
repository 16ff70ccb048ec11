// BMI's semantic suite (bmi_suite.hpp): what only the ib method does --
// one-sided transfers (refused over TCP), the registration cache, and
// RDMA devices after fork.
#include "bmi_suite.hpp"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

using namespace pvfs::test;
using namespace std::chrono_literals;

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

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, one_sided_ib);
    ATF_ADD_TEST_CASE(tcs, one_sided_not_over_tcp_epoll);
    ATF_ADD_TEST_CASE(tcs, one_sided_not_over_tcp_uring);
    ATF_ADD_TEST_CASE(tcs, fork_after_open_ib);
    ATF_ADD_TEST_CASE(tcs, registration_cache_ib);
}
