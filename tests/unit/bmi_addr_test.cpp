// BMI's Addr reuse (libnet/core): an Addr is a slot and the slot's
// generation, so an Addr kept for a freed peer must never name a later one.
// Freed slots are reused oldest first, and a slot freed at the last
// generation is retired rather than wrapping to 0: before, a flood of fresh
// URLs reused one slot (last freed, first reused) under a 32-bit generation,
// and after 2^32 reuses a stale Addr named a new peer.  The Core is driven
// directly (peer_for_url, forget_peer: what the methods do as peers connect
// and go), with a stand-in method that is never called.
#include <atf-c++.hpp>

#include "core.hpp"

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

namespace {

// Peers are only named with it; nothing is posted to it.
class NoMethod final : public bmi::Method {
public:
    [[nodiscard]] std::string_view scheme() const override { return "none"; }
    std::string listen(std::string_view /*hostport*/) override { return {}; }
    int add_peer(bmi::Addr /*addr*/, std::string_view /*hostport*/) override { return 0; }
    bool post(std::uint32_t /*op_index*/) override { return true; }
    void cancel(std::uint32_t /*op_index*/, int /*error*/, bool /*must_end*/) override {}
    void progress(int /*timeout_ms*/) override {}
    void drop_peer(bmi::Addr /*addr*/, int /*error*/) override {}
    bmi::Clock::time_point peer_alive(std::uint32_t /*op_index*/) override
    {
        return bmi::Clock::time_point::min();
    }
    int watch_external(int /*fd*/) override { return 0; }
    int unwatch_external(int /*fd*/) override { return 0; }
    [[nodiscard]] std::uint64_t open_connections() const override { return 0; }
    [[nodiscard]] std::uint64_t direct_sends() const override { return 0; }
    [[nodiscard]] std::uint64_t engine() const override { return 0; }
};

std::string url(std::uint64_t n)
{
    return "none://198.18.0.1:" + std::to_string(n);
}

// addr names nobody: no URL, and a post to it is refused.
void require_stale(bmi::Core &core, bmi::ContextId ctx, bmi::Addr addr)
{
    ATF_REQUIRE(core.url_of(addr).empty());
    char byte = 0;
    const bmi::MutableBuffer buf{&byte, 1};
    const bmi::Post p = core.post(bmi::OpKind::send, addr, std::span(&buf, 1), 1, nullptr, ctx);
    ATF_REQUIRE_EQ(p.error, -EINVAL);
}

} // namespace

// One slot freed and reused 200,000 times: every Addr it had names nobody
// once its peer is gone, the current one names the current peer.
ATF_TEST_CASE_WITHOUT_HEAD(stale_after_many_reuses);
ATF_TEST_CASE_BODY(stale_after_many_reuses)
{
    bmi::Core core(bmi::Options{});
    NoMethod m;
    const bmi::ContextId ctx = core.open_context();
    std::vector<bmi::Addr> stale;
    for (std::uint64_t n = 0; n < 200000; ++n) {
        const bmi::Addr a = core.peer_for_url(m, url(n));
        ATF_REQUIRE_EQ(bmi::addr_slot(a), 1U);
        ATF_REQUIRE_EQ(core.url_of(a), url(n));
        core.forget_peer(a);
        if (n % 1000 == 0)
            stale.push_back(a);
    }
    const bmi::Addr now = core.peer_for_url(m, url(999));
    ATF_REQUIRE_EQ(core.url_of(now), url(999));
    for (const bmi::Addr a : stale)
        require_stale(core, ctx, a);
    ATF_REQUIRE_EQ(core.get_info(bmi::Info::peers), 1U);
}

// Freed slots are reused oldest first: the slot a peer just left is the
// last to be taken again.
ATF_TEST_CASE_WITHOUT_HEAD(reuse_oldest_first);
ATF_TEST_CASE_BODY(reuse_oldest_first)
{
    bmi::Core core(bmi::Options{});
    NoMethod m;
    std::vector<bmi::Addr> a;
    for (std::uint64_t n = 0; n < 4; ++n)
        a.push_back(core.peer_for_url(m, url(n)));
    // Freed in the order 3, 1, 2, 4 (slots).
    for (const std::size_t i : {2, 0, 1, 3})
        core.forget_peer(a[i]);
    std::vector<std::uint32_t> slots;
    for (std::uint64_t n = 10; n < 14; ++n)
        slots.push_back(bmi::addr_slot(core.peer_for_url(m, url(n))));
    ATF_REQUIRE(slots == (std::vector<std::uint32_t>{3, 1, 2, 4}));
}

// A slot freed at the last generation is retired, not wrapped: with the
// last generation lowered to 3 (it is 2^32 - 1), the fifth peer gets a new
// slot and none of the four Addrs the first slot had names anyone.  Before,
// the generation wrapped and the first Addr named the fifth peer.
ATF_TEST_CASE_WITHOUT_HEAD(generation_never_wraps);
ATF_TEST_CASE_BODY(generation_never_wraps)
{
    bmi::Core core(bmi::Options{});
    core.last_addr_generation = 3;
    NoMethod m;
    const bmi::ContextId ctx = core.open_context();
    std::vector<bmi::Addr> stale;
    for (std::uint64_t n = 0; n < 4; ++n) {
        const bmi::Addr a = core.peer_for_url(m, url(n));
        ATF_REQUIRE_EQ(bmi::addr_slot(a), 1U);
        ATF_REQUIRE_EQ(a >> 32U, n);
        core.forget_peer(a);
        stale.push_back(a);
    }
    ATF_REQUIRE_EQ(core.get_info(bmi::Info::peers), 0U);
    std::vector<bmi::Addr> live;
    for (std::uint64_t n = 4; n < 12; ++n) {
        live.push_back(core.peer_for_url(m, url(n)));
        ATF_REQUIRE(bmi::addr_slot(live.back()) != 1U);
        for (const bmi::Addr a : stale)
            require_stale(core, ctx, a);
    }
    ATF_REQUIRE_EQ(core.get_info(bmi::Info::peers), live.size());
    for (std::size_t i = 0; i < live.size(); ++i)
        ATF_REQUIRE_EQ(core.url_of(live[i]), url(4 + i));
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, stale_after_many_reuses);
    ATF_ADD_TEST_CASE(tcs, reuse_oldest_first);
    ATF_ADD_TEST_CASE(tcs, generation_never_wraps);
}
