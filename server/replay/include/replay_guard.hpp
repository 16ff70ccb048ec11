// The server's replay guard: it refuses a request whose (session, seq) it
// accepted before, or whose time is too far from the server's clock
// (docs/protocol.md).  Only pvfs-server uses it; clients need nothing more
// than proto::answers() against replayed responses.
#ifndef PVFS_SERVER_REPLAY_GUARD_HPP
#define PVFS_SERVER_REPLAY_GUARD_HPP

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <functional>
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

// Accepts each (key, session, seq) at most once, and only within `window`
// of the server's clock.  A session belongs to the key its requests were
// verified under: one key holder who reads another's session id off the
// wire can neither use up its seqs nor push its window out of reach
// (docs/security.md "Client keys").  Per session it keeps the highest seq seen and which of
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

    // The `key` of the cluster key, and of the client key with wire id `id`
    // (distinct from the cluster key's whatever the id).
    static constexpr std::uint64_t cluster_key = 0;
    [[nodiscard]] static constexpr std::uint64_t client_key(std::uint32_t id) noexcept
    {
        return (std::uint64_t{1} << 32U) | id;
    }

    [[nodiscard]] ReplayVerdict accept(std::uint64_t key, std::uint64_t session, std::uint64_t seq,
                                       std::int64_t time_ns, std::int64_t now_ns);
    // The cluster key's session.
    [[nodiscard]] ReplayVerdict accept(std::uint64_t session, std::uint64_t seq,
                                       std::int64_t time_ns, std::int64_t now_ns)
    {
        return accept(cluster_key, session, seq, time_ns, now_ns);
    }
    void set_window(std::int64_t window_ns);
    [[nodiscard]] std::int64_t window() const;
    [[nodiscard]] std::size_t sessions() const; // currently remembered

private:
    struct Session {
        std::uint64_t highest = 0;
        std::bitset<replay_window_bits> seen; // bit i: seq highest - i was accepted
        std::int64_t last_used_ns = 0;
    };
    struct Id {
        std::uint64_t key = 0;
        std::uint64_t session = 0;
        friend bool operator==(const Id &, const Id &) = default;
    };
    struct IdHash {
        std::size_t operator()(const Id &id) const noexcept
        {
            // The session ids are the clients' random numbers; the key
            // only tells apart the few that collide.
            return std::hash<std::uint64_t>{}(id.session ^ (id.key * 0x9E3779B97F4A7C15ULL));
        }
    };
    void forget_idle(std::int64_t now_ns);

    mutable std::mutex mutex_;
    std::int64_t window_ns_;
    std::size_t max_sessions_;
    std::int64_t last_sweep_ns_ = 0;
    std::unordered_map<Id, Session, IdHash> sessions_; // at most max_sessions_
};

} // namespace pvfs::server

#endif // PVFS_SERVER_REPLAY_GUARD_HPP
