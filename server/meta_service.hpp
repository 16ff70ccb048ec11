// The metadata role of pvfs-server: the namespace requests over the
// metadata store (server/meta).  Reads run on the event loop in LMDB read
// transactions; changes go to one committer thread that applies everything
// queued as one WriteBatch, commits it with one sync and hands the results
// back through an eventfd the loop watches (group commit: under load many
// requests share one fsync, and no reply leaves before its change is
// durable).
#ifndef PVFS_SERVER_META_SERVICE_HPP
#define PVFS_SERVER_META_SERVICE_HPP

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core.hpp"
#include "meta_store.hpp"
#include "pvfs/proto.hpp"
#include "pvfs/unique_fd.hpp"

namespace pvfs::server {

// Faults a test asks for ($PVFS_TEST_FAULTS, docs/testing.md): the n-th
// committed change of `op` (counting from 1) that carries exactly-once ids
// (or the n-th close naming files) gets no reply, or the server exits
// (status 9) right after committing it; or the server exits at the end of
// the n-th group-commit wait whose batch holds an `op`, before committing
// any of the batch (crash_in_commit_wait).
struct MetaFault {
    enum class Kind : std::uint8_t { drop_reply, crash_after_commit, crash_in_commit_wait };
    Kind kind = Kind::drop_reply;
    proto::Op op = proto::Op::create;
    std::uint64_t nth = 1;
};
// Parses "drop_reply:remove:1,crash_after_commit:rename:2"; false and
// `error` set on a malformed list.
[[nodiscard]] bool parse_faults(std::string_view text, std::vector<MetaFault> &out,
                                std::string &error);

struct MetaSettings {
    std::chrono::milliseconds session_ttl{std::chrono::hours(24)};
    // A client's holds on open files go after this long without a request
    // from it; the grace after a restart is lease + 10 s.
    std::chrono::milliseconds lease{std::chrono::seconds(90)};
    // Records of data objects to remove that no client finished for this
    // long are due for the server's own reclaimer (at least the lease).
    std::chrono::milliseconds reclaim_after{std::chrono::seconds(90)};
    std::size_t max_sessions = 65536;
    std::vector<MetaFault> faults;
    // The cluster's data servers: a layout a create or layout_set asks for
    // must fit them (EINVAL), or every client would find the file
    // unreadable.  0: not checked (tests of the service alone).
    std::uint32_t data_servers = 0;
    // Group commit: a batch that lacks a change from a client that sent
    // one within the last 2 ms waits for it, at most as long as a commit
    // takes (and max_commit_wait).
    bool group_commit = true;
    std::chrono::microseconds max_commit_wait{500};
    // Capabilities ([defaults] capability_ttl; docs/protocol.md
    // "Capabilities"): how long one is valid, the file system it names and
    // the key that signs it (none: the service answers capability requests
    // EOPNOTSUPP, for tests of the service alone).
    std::chrono::milliseconds capability_ttl{std::chrono::minutes(5)};
    std::uint32_t fs_id = 0;
    std::optional<proto::CapabilityKey> capability_key;
};

class MetaService {
public:
    // `store` is open.  Throws std::system_error when the eventfd or the
    // thread cannot be made.
    MetaService(Loop &loop, meta::Store store, MetaSettings settings = {});
    ~MetaService();
    MetaService(const MetaService &) = delete;
    MetaService &operator=(const MetaService &) = delete;
    MetaService(MetaService &&) = delete;
    MetaService &operator=(MetaService &&) = delete;

    [[nodiscard]] static bool handles(proto::Op op) noexcept;
    // Records of data objects still to remove that no client has finished
    // for reclaim_after (none in the grace): the reclaimer's work (any
    // thread).
    [[nodiscard]] std::size_t reclaims_due() const;

    // Serves a request (its body may be moved from); `once` are its
    // exactly-once ids, if it has them.
    void handle(const Origin &origin, const Credentials &cred, const proto::OnceIds &once,
                proto::RequestBody &body);

    // Readable when committed results wait; poll() answers them.
    [[nodiscard]] int event_fd() const noexcept { return event_.get(); }
    void poll();

    [[nodiscard]] meta::Stats stats() const;
    // Changes queued, being committed, or committed and not yet answered.
    [[nodiscard]] std::size_t active() const;

    // Commits so far and the changes they carried (for logs and tests).
    [[nodiscard]] std::uint64_t commits() const;

private:
    // The hold a create with an open registered as it was applied: undone
    // if the change does not commit after all.
    struct HoldUndo {
        Handle handle = no_handle;
        std::uint64_t client_id = 0;
        bool added = false;    // a new holder; else the one before had:
        std::uint64_t gen = 0; // its gen
        std::uint32_t mode = 0;
        std::uint32_t rights = 0;
    };
    struct Job {
        Origin origin;
        Credentials cred;
        proto::OnceIds once;
        proto::RequestBody body;
        int error = 0; // positive errno, or 0
        proto::ResponseBody response;
        bool ran = false;             // a change with ids was applied (not answered from the cache)
        std::optional<HoldUndo> hold; // create with an open: the hold it registered
    };
    // One client's hold on an open file (docs/metadata.md "Orphans and open
    // references").
    struct Holder {
        std::uint64_t client_id = 0;
        std::uint64_t gen = 0;
        std::uint32_t mode = 0;
        // The open_* bits of `mode` the holder's permission allowed when it
        // opened (all of them for a create's open): what its capabilities
        // may have through the hold (meta_capability.cpp).
        std::uint32_t rights = 0;
    };
    using Clock = std::chrono::steady_clock;
    // A client session as the committer keeps it (the store has the rest).
    struct Session {
        std::string owner;
        std::chrono::steady_clock::time_point last_change;
        std::uint64_t created_ns = 0;
        // The name of the key that opened it (Client::name()); none for a
        // session kept from a store written before sessions were bound to
        // keys: the first key to use it claims it (docs/security.md).
        std::optional<std::string> key;
    };
    // Refusals of another key's session logged: per requesting key, when
    // one was last logged and how many went unlogged since.
    struct Refusals {
        std::chrono::steady_clock::time_point logged{};
        std::uint64_t unlogged = 0;
    };

    void respond_read(const Origin &origin, const Credentials &cred, proto::RequestBody &body);
    void committer();
    // Group commit: waits, with mutex_ held in `lock`, for the changes of
    // recent writers missing from the queue; how long it waited.
    std::chrono::microseconds wait_for_writers(std::unique_lock<std::mutex> &lock);
    void load_sessions();
    void apply(meta::WriteBatch &batch, Job &job);
    // Open references (meta_open.cpp).
    void serve_open(const Origin &origin, const Credentials &cred, const proto::OpenRequest &req);
    void serve_list_orphans(const Origin &origin, const Credentials &cred,
                            const proto::ListOrphansRequest &req);
    // Capabilities (meta_capability.cpp).
    void serve_capability(const Origin &origin, const Credentials &cred,
                          const proto::CapabilityRequest &req);
    // A capability of `rights` over handle for the request's key, signed.
    [[nodiscard]] proto::Capability grant(const Origin &origin, Handle handle,
                                          std::uint32_t rights) const;
    // An open's answer gets the hold's rights (open_* bits) as a
    // capability, when its request asked (meta_open.cpp).
    void add_open_capability(const Origin &origin, Handle handle, std::uint32_t rights,
                             proto::OpenResponse &out) const;
    // Whether session client_id (of `key`) holds handle open with every
    // open_* bit of `mode`.
    [[nodiscard]] bool holds_open(std::uint64_t client_id, std::string_view key, Handle handle,
                                  std::uint32_t mode);
    void apply_close(meta::WriteBatch &batch, Job &job);
    // A close that only drops holds on files that are not orphans, taken
    // on the loop without the committer; false leaves the job untouched
    // for the committer.
    [[nodiscard]] bool close_at_once(Job &job);
    // Sends a finished job's reply (or the test fault it triggers).
    void answer(Job &job);
    static void apply_orphan_done(meta::WriteBatch &batch, Job &job);
    [[nodiscard]] bool held_or_dying(Handle handle);
    // A create's open (proto::CreateOpen), registered with the create.
    [[nodiscard]] HoldUndo hold_created(const proto::CreateResponse &made, const Credentials &cred,
                                        const proto::CreateOpen &open);
    // The open_* bits of `mode` that cred's permission on attr allows.
    [[nodiscard]] static std::uint32_t permitted_modes(const Credentials &cred, const Attr &attr,
                                                       std::uint32_t mode);
    void undo_hold(const HoldUndo &undo);
    // Whether session client_id holds handle open for writing (a
    // setattr's by_open claim, meta_service.cpp).
    [[nodiscard]] bool holds_write_open(std::uint64_t client_id, Handle handle);
    // Renews client_id's lease, unless its session is another key's.
    void touch(std::uint64_t client_id, std::string_view key);
    // The name of the key a request came under (Client::name()).
    [[nodiscard]] static std::string_view key_name(const Origin &origin) noexcept;
    // Whether a session whose key is `owner` (none: unclaimed) is one a
    // request under `key` may claim: an unclaimed one, and the cluster
    // key's once a client key asks (client_keys is set, so no client can
    // use the cluster key any more: it was opened before).
    [[nodiscard]] static bool claimable(const std::optional<std::string> &owner,
                                        std::string_view key) noexcept;
    // With open_mutex_ held: whether client_id is a session of a key other
    // than `key` (an unclaimed one is nobody's yet); if so, `owner` is
    // that key's name.
    [[nodiscard]] bool foreign_locked(std::uint64_t client_id, std::string_view key,
                                      std::string &owner) const;
    // In the committer, before a job is applied: whether every client id
    // it names (its once ids, a session's, a close's, a create's open) is
    // a session of its own key or of none.  An unclaimed session is
    // claimed for the job's key.  False: refused (logged), EACCES.
    [[nodiscard]] bool bound_to_key(meta::WriteBatch &batch, const Job &job);
    [[nodiscard]] bool bind_session(meta::WriteBatch &batch, const Job &job,
                                    std::uint64_t client_id);
    // Logs a request refused for naming another key's session, at most
    // once a minute per requesting key (then with the count since).
    void log_foreign(const Origin &origin, std::uint64_t client_id, std::string_view owner);
    void drop_holds(std::uint64_t client_id);
    void sweep_holds(meta::WriteBatch &batch, Clock::time_point now);
    [[nodiscard]] bool in_grace(Clock::time_point now) const noexcept { return now < grace_end_; }
    void apply_once(meta::WriteBatch &batch, Job &job);
    void apply_session(meta::WriteBatch &batch, Job &job);
    int end_session(meta::WriteBatch &batch, std::uint64_t client_id, const char *why);
    void sweep_sessions(meta::WriteBatch &batch, std::chrono::steady_clock::time_point now);
    [[nodiscard]] bool fault_fires(const Job &job, MetaFault::Kind &kind);
    // At the end of a group-commit wait (the lock held): exits when a
    // crash_in_commit_wait fault's count is reached.
    void crash_in_commit_wait();

    Loop &loop_;
    meta::Store store_;
    MetaSettings settings_;
    UniqueFd event_;
    std::uint64_t boot_id_ = 0; // SessionResponse::server_boot

    // The committer's own: the sessions, and its scratch.
    std::unordered_map<std::uint64_t, Session> sessions_;
    std::unordered_map<std::string, std::uint64_t> owners_; // owner -> client id
    std::vector<std::byte> digest_scratch_;
    std::chrono::steady_clock::time_point next_sweep_{};
    // The open table: the loop registers opens, the committer asks it at
    // each last unlink (held_or_dying) and drops holds at close.  A handle
    // the committer found unheld at its last unlink stays `dying` until
    // that batch is committed, so that an open in between fails (ENOENT)
    // rather than hold an inode about to vanish.
    std::mutex open_mutex_;
    std::unordered_map<Handle, std::vector<Holder>> holds_;
    std::unordered_map<std::uint64_t, Clock::time_point> seen_; // client -> last request
    // client id -> the key of its session (none: unclaimed), for the loop:
    // the committer owns sessions_ and updates this as sessions come, go
    // and are claimed.
    std::unordered_map<std::uint64_t, std::optional<std::string>> session_keys_;
    std::unordered_set<Handle> dying_;
    // Handles a last unlink found held in the batch being committed (they
    // become orphans if it commits), and a count of the commits that
    // emptied the set: with the orphans table, what tells a close on the
    // loop that a file it releases may be an orphan (close_at_once).
    std::unordered_set<Handle> kept_;
    std::uint64_t kept_epoch_ = 0;
    // Orphans the sweep released (no closer was handed them): the next
    // closes and renewals finish them, not a lease later.
    std::vector<Handle> unowned_;
    Clock::time_point grace_end_{}; // none when the store had no sessions
    meta::OpenCheck open_check_;    // held_or_dying, for the batch
    meta::OpenCheck no_check_;      // for clients that do not know `orphaned`

    std::mutex refusal_mutex_; // the loop and the committer both refuse
    std::unordered_map<std::string, Refusals> refusals_;

    // The loop's own: changes answered per op, for faults.
    std::unordered_map<proto::Op, std::uint64_t> answered_;
    std::unordered_map<proto::Op, std::uint64_t> waits_; // group-commit waits, for the faults

    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Job> queued_;    // for the committer
    std::vector<Job> finished_; // for the loop
    std::size_t committing_ = 0;
    std::uint64_t commits_ = 0;
    // Group commit: when each client (by its replay-guard session) last
    // queued a change.
    std::unordered_map<std::uint64_t, std::chrono::steady_clock::time_point> writers_;
    // The committer's own: a moving average of its commits' durations.
    std::chrono::microseconds commit_time_{0};
    bool stop_ = false;
    std::thread thread_;
};

} // namespace pvfs::server

#endif // PVFS_SERVER_META_SERVICE_HPP
