// The server's replay guard: it refuses a request whose (session, seq) it
// accepted before, or whose time is too far from the server's clock
// (docs/protocol.md).  Only pvfs-server uses it; clients need nothing more
// than proto::answers() against replayed responses.
#ifndef PVFS_SERVER_REPLAY_GUARD_HPP
#define PVFS_SERVER_REPLAY_GUARD_HPP

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace pvfs::server {

enum class ReplayVerdict : std::uint8_t {
    accepted,
    too_old,           // time_ns more than the window before now
    in_future,         // time_ns more than the window after now
    replayed,          // seen before, or below the session's sliding window
    too_many_sessions, // the session table is full: a new session is refused
};
[[nodiscard]] const char *verdict_text(ReplayVerdict verdict) noexcept;

// Accepts each (session, seq) at most once, and only within `window` of the
// server's clock.  Per session it keeps the highest seq seen and which of
// the replay_window_bits seqs below it were seen; older seqs are refused.
// A session idle for more than 2 * window is forgotten: any message it
// sent earlier is by then outside the time window, so forgetting its seqs
// cannot let a replay through (docs/protocol.md).  Thread-safe.
class ReplayGuard {
public:
    static constexpr std::size_t replay_window_bits = 1024;
    static constexpr std::int64_t default_window_ns = 120'000'000'000;
    static constexpr std::size_t default_max_sessions = 65536;

    explicit ReplayGuard(std::int64_t window_ns = default_window_ns,
                         std::size_t max_sessions = default_max_sessions);

    [[nodiscard]] ReplayVerdict accept(std::uint64_t session, std::uint64_t seq,
                                       std::int64_t time_ns, std::int64_t now_ns);
    void set_window(std::int64_t window_ns);
    [[nodiscard]] std::int64_t window() const;
    [[nodiscard]] std::size_t sessions() const; // currently remembered

private:
    struct Session {
        std::uint64_t highest = 0;
        std::bitset<replay_window_bits> seen; // bit i: seq highest - i was accepted
        std::int64_t last_used_ns = 0;
    };
    void forget_idle(std::int64_t now_ns);

    mutable std::mutex mutex_;
    std::int64_t window_ns_;
    std::size_t max_sessions_;
    std::int64_t last_sweep_ns_ = 0;
    std::unordered_map<std::uint64_t, Session> sessions_;
};

} // namespace pvfs::server

#endif // PVFS_SERVER_REPLAY_GUARD_HPP
