// Tests of the server's replay guard (server/replay/include/replay_guard.hpp):
// seqs in order, out of order within the window and below it, the time
// window, idle sessions forgotten, the session cap, sessions per key.
#include <atf-c++.hpp>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "replay_guard.hpp"

namespace {
constexpr std::int64_t second = 1'000'000'000;
constexpr std::int64_t t0 = 1'763'800'000 * second;
using pvfs::server::ReplayGuard;
using pvfs::server::ReplayVerdict;
} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(replay_in_order);
ATF_TEST_CASE_BODY(replay_in_order)
{
    ReplayGuard guard;
    ATF_REQUIRE_EQ(guard.window(), 120 * second);
    for (std::uint64_t seq = 1; seq <= 5000; ++seq) {
        ATF_REQUIRE(guard.accept(7, seq, t0, t0) == ReplayVerdict::accepted);
    }
    ATF_REQUIRE(guard.accept(7, 5000, t0, t0) == ReplayVerdict::replayed);
    ATF_REQUIRE(guard.accept(7, 1, t0, t0) == ReplayVerdict::replayed);
    // Other sessions are independent.
    ATF_REQUIRE(guard.accept(8, 1, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE_EQ(guard.sessions(), std::size_t{2});
    // Gaps are fine: seq need only increase.
    ATF_REQUIRE(guard.accept(7, 1'000'000, t0, t0) == ReplayVerdict::accepted);
}

// One session id under two keys is two sessions: seqs pushed far ahead
// under one key leave the other's window where it was.
ATF_TEST_CASE_WITHOUT_HEAD(replay_sessions_per_key);
ATF_TEST_CASE_BODY(replay_sessions_per_key)
{
    ReplayGuard guard;
    const std::uint64_t alpha = ReplayGuard::client_key(0x1234);
    const std::uint64_t beta = ReplayGuard::client_key(0x5678);
    ATF_REQUIRE(guard.accept(alpha, 7, 1, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(beta, 7, UINT64_MAX - 1, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(alpha, 7, 2, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(alpha, 7, 2, t0, t0) == ReplayVerdict::replayed);
    // A client key whose id is 0 is still not the cluster key.
    ATF_REQUIRE(guard.accept(ReplayGuard::cluster_key, 7, 5, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(ReplayGuard::client_key(0), 7, 5, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(7, 5, t0, t0) == ReplayVerdict::replayed); // the cluster key's
    ATF_REQUIRE_EQ(guard.sessions(), std::size_t{4});
}

ATF_TEST_CASE_WITHOUT_HEAD(replay_out_of_order_within_window);
ATF_TEST_CASE_BODY(replay_out_of_order_within_window)
{
    ReplayGuard guard;
    ATF_REQUIRE(guard.accept(1, 2000, t0, t0) == ReplayVerdict::accepted);
    // Everything in (2000 - 1024, 2000) arrives late, backwards, once each.
    for (std::uint64_t seq = 1999; seq > 2000 - ReplayGuard::replay_window_bits; --seq) {
        if (!(guard.accept(1, seq, t0, t0) == ReplayVerdict::accepted)) {
            std::ostringstream why;
            why << seq;
            ATF_FAIL(why.str());
        }
    }
    for (std::uint64_t seq = 1999; seq > 2000 - ReplayGuard::replay_window_bits; --seq) {
        if (!(guard.accept(1, seq, t0, t0) == ReplayVerdict::replayed)) {
            std::ostringstream why;
            why << seq;
            ATF_FAIL(why.str());
        }
    }
    // A window that slid forward keeps what it saw.
    ATF_REQUIRE(guard.accept(1, 2010, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(1, 2005, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(1, 2005, t0, t0) == ReplayVerdict::replayed);
    ATF_REQUIRE(guard.accept(1, 2000, t0, t0) == ReplayVerdict::replayed);
    ATF_REQUIRE(guard.accept(1, 1999, t0, t0) == ReplayVerdict::replayed);
    ATF_REQUIRE(guard.accept(1, 2009, t0, t0) == ReplayVerdict::accepted);
}

ATF_TEST_CASE_WITHOUT_HEAD(replay_below_window);
ATF_TEST_CASE_BODY(replay_below_window)
{
    ReplayGuard guard;
    ATF_REQUIRE(guard.accept(1, 5000, t0, t0) == ReplayVerdict::accepted);
    // 5000 - 1023 is the oldest seq the window still tracks.
    ATF_REQUIRE(guard.accept(1, 5000 - 1023, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(1, 5000 - 1024, t0, t0) == ReplayVerdict::replayed);
    ATF_REQUIRE(guard.accept(1, 0, t0, t0) == ReplayVerdict::replayed);
    // A jump past the whole window forgets the old bits but not the floor.
    ATF_REQUIRE(guard.accept(1, 100'000, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(1, 5000, t0, t0) == ReplayVerdict::replayed);
    ATF_REQUIRE(guard.accept(1, 99'999, t0, t0) == ReplayVerdict::accepted);
}

ATF_TEST_CASE_WITHOUT_HEAD(replay_time_window);
ATF_TEST_CASE_BODY(replay_time_window)
{
    ReplayGuard guard;
    const std::int64_t w = 120 * second;
    ATF_REQUIRE(guard.accept(1, 1, t0 - w, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(1, 2, t0 - w - 1, t0) == ReplayVerdict::too_old);
    ATF_REQUIRE(guard.accept(1, 3, t0 + w, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(1, 4, t0 + w + 1, t0) == ReplayVerdict::in_future);
    // Extremes do not overflow.
    ATF_REQUIRE(guard.accept(1, 5, INT64_MIN, t0) == ReplayVerdict::too_old);
    ATF_REQUIRE(guard.accept(1, 6, INT64_MAX, t0) == ReplayVerdict::in_future);
    ATF_REQUIRE(guard.accept(1, 7, INT64_MAX, INT64_MIN) == ReplayVerdict::in_future);
    // A rejected message leaves no trace: the same seq may come back in time.
    ATF_REQUIRE(guard.accept(1, 2, t0, t0) == ReplayVerdict::accepted);
    // A new session with a stale time is not remembered.
    ATF_REQUIRE(guard.accept(99, 1, t0 - 2 * w, t0) == ReplayVerdict::too_old);
    ATF_REQUIRE_EQ(guard.sessions(), std::size_t{1});

    guard.set_window(1 * second);
    ATF_REQUIRE_EQ(guard.window(), second);
    ATF_REQUIRE(guard.accept(1, 10, t0 - 2 * second, t0) == ReplayVerdict::too_old);
    ATF_REQUIRE(guard.accept(1, 11, t0 - second, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE_EQ(std::string(pvfs::server::verdict_text(ReplayVerdict::too_old)).substr(0, 15),
                   "request too old");
}

ATF_TEST_CASE_WITHOUT_HEAD(replay_session_expiry);
ATF_TEST_CASE_BODY(replay_session_expiry)
{
    const std::int64_t w = 10 * second;
    ReplayGuard guard(w);
    ATF_REQUIRE(guard.accept(1, 100, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(guard.accept(2, 100, t0, t0) == ReplayVerdict::accepted);
    // Session 2 stays busy; session 1 goes idle.
    for (std::int64_t t = t0; t <= t0 + 2 * w + 2 * second; t += second) {
        ATF_REQUIRE(guard.accept(2, 101 + static_cast<std::uint64_t>((t - t0) / second), t, t) ==
                    ReplayVerdict::accepted);
    }
    const std::int64_t later = t0 + 2 * w + 2 * second + w + 1;
    ATF_REQUIRE(guard.accept(2, 1000, later, later) == ReplayVerdict::accepted);
    ATF_REQUIRE_EQ(guard.sessions(), std::size_t{1});
    // Session 1's old message cannot come back: its time is now too old.
    ATF_REQUIRE(guard.accept(1, 100, t0, later) == ReplayVerdict::too_old);
    // A forgotten session that resumes starts afresh.
    ATF_REQUIRE(guard.accept(1, 5, later, later) == ReplayVerdict::accepted);
    ATF_REQUIRE_EQ(guard.sessions(), std::size_t{2});
}

ATF_TEST_CASE_WITHOUT_HEAD(replay_session_cap);
ATF_TEST_CASE_BODY(replay_session_cap)
{
    const std::int64_t w = 10 * second;
    ReplayGuard guard(w, 100);
    for (std::uint64_t s = 0; s < 100; ++s) {
        ATF_REQUIRE(guard.accept(s, 1, t0, t0) == ReplayVerdict::accepted);
    }
    ATF_REQUIRE(guard.accept(100, 1, t0, t0) == ReplayVerdict::too_many_sessions);
    ATF_REQUIRE_EQ(guard.sessions(), std::size_t{100});
    // Known sessions still work.
    ATF_REQUIRE(guard.accept(5, 2, t0, t0) == ReplayVerdict::accepted);
    ATF_REQUIRE(std::string(pvfs::server::verdict_text(ReplayVerdict::too_many_sessions))
                    .find("too many") != std::string::npos);
    // Once the others have been idle for 2 * window, a new one gets in.
    const std::int64_t later = t0 + 2 * w + 1;
    ATF_REQUIRE(guard.accept(100, 1, later, later) == ReplayVerdict::accepted);
    ATF_REQUIRE_EQ(guard.sessions(), std::size_t{1});
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, replay_in_order);
    ATF_ADD_TEST_CASE(tcs, replay_sessions_per_key);
    ATF_ADD_TEST_CASE(tcs, replay_out_of_order_within_window);
    ATF_ADD_TEST_CASE(tcs, replay_below_window);
    ATF_ADD_TEST_CASE(tcs, replay_time_window);
    ATF_ADD_TEST_CASE(tcs, replay_session_expiry);
    ATF_ADD_TEST_CASE(tcs, replay_session_cap);
}
