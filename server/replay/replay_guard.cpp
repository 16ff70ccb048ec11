// The server's replay guard.  Why forgetting idle sessions is safe: a
// message is accepted only when |now - time_ns| <= window.  A message of a
// session accepted at server time t had time_ns <= t + window, and t is at
// most the session's last use L.  Once the session has been idle for more
// than 2 * window (now > L + 2 * window), any such message is more than
// window old (now - time_ns > L + 2 * window - (L + window) = window), so
// the time check alone refuses its replay.  This holds as long as the
// server's clock does not jump back by more than a window.
#include "replay_guard.hpp"

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace pvfs::server {

namespace {

// |a - b| > limit for any two int64 values, without overflow.
bool farther_than(std::int64_t a, std::int64_t b, std::int64_t limit) noexcept
{
    const auto ua = static_cast<std::uint64_t>(a);
    const auto ub = static_cast<std::uint64_t>(b);
    const std::uint64_t distance = a >= b ? ua - ub : ub - ua;
    return distance > static_cast<std::uint64_t>(limit);
}

} // namespace

const char *verdict_text(ReplayVerdict verdict) noexcept
{
    switch (verdict) {
    case ReplayVerdict::accepted:
        return "accepted";
    case ReplayVerdict::too_old:
        return "request too old (its time is more than the replay window before the "
               "server's clock)";
    case ReplayVerdict::in_future:
        return "request from the future (its time is more than the replay window after the "
               "server's clock)";
    case ReplayVerdict::replayed:
        return "request replayed (its sequence number was seen before or is below the "
               "session's window)";
    case ReplayVerdict::too_many_sessions:
        return "too many client sessions: new session refused";
    }
    return "unknown verdict";
}

ReplayGuard::ReplayGuard(std::int64_t window_ns, std::size_t max_sessions)
    : window_ns_(window_ns < 0 ? 0 : window_ns), max_sessions_(max_sessions)
{
}

void ReplayGuard::set_window(std::int64_t window_ns)
{
    const std::scoped_lock lock(mutex_);
    window_ns_ = window_ns < 0 ? 0 : window_ns;
}

std::int64_t ReplayGuard::window() const
{
    const std::scoped_lock lock(mutex_);
    return window_ns_;
}

std::size_t ReplayGuard::sessions() const
{
    const std::scoped_lock lock(mutex_);
    return sessions_.size();
}

void ReplayGuard::forget_idle(std::int64_t now_ns)
{
    last_sweep_ns_ = now_ns;
    // 2 * window and the idle time both fit in u64 (window >= 0).
    const std::uint64_t max_idle = 2 * static_cast<std::uint64_t>(window_ns_);
    std::erase_if(sessions_, [&](const auto &entry) {
        const std::int64_t last = entry.second.last_used_ns;
        return now_ns > last &&
               static_cast<std::uint64_t>(now_ns) - static_cast<std::uint64_t>(last) > max_idle;
    });
}

ReplayVerdict ReplayGuard::accept(std::uint64_t key, std::uint64_t session, std::uint64_t seq,
                                  std::int64_t time_ns, std::int64_t now_ns)
{
    const std::scoped_lock lock(mutex_);
    if (farther_than(now_ns, time_ns, window_ns_)) {
        return time_ns < now_ns ? ReplayVerdict::too_old : ReplayVerdict::in_future;
    }
    // A sweep per window keeps the cost O(1) amortised per request.
    if (farther_than(now_ns, last_sweep_ns_, window_ns_)) {
        forget_idle(now_ns);
    }
    const Id id{key, session};
    auto found = sessions_.find(id);
    if (found == sessions_.end()) {
        if (sessions_.size() >= max_sessions_) {
            forget_idle(now_ns);
            if (sessions_.size() >= max_sessions_) {
                return ReplayVerdict::too_many_sessions;
            }
        }
        Session fresh;
        fresh.highest = seq;
        fresh.seen.set(0);
        fresh.last_used_ns = now_ns;
        sessions_.emplace(id, fresh);
        return ReplayVerdict::accepted;
    }
    Session &s = found->second;
    if (seq > s.highest) {
        const std::uint64_t ahead = seq - s.highest;
        if (ahead >= replay_window_bits) {
            s.seen.reset();
        } else {
            s.seen <<= ahead;
        }
        s.seen.set(0);
        s.highest = seq;
    } else {
        const std::uint64_t behind = s.highest - seq;
        if (behind >= replay_window_bits || s.seen.test(behind)) {
            return ReplayVerdict::replayed;
        }
        s.seen.set(behind);
    }
    if (now_ns > s.last_used_ns) {
        s.last_used_ns = now_ns;
    }
    return ReplayVerdict::accepted;
}

} // namespace pvfs::server
