// BMI core, internal: ops, contexts, the address reference list and the
// method interface.  Methods see this header; users see include/bmi/bmi.hpp.
#ifndef PVFS_LIBNET_CORE_CORE_HPP
#define PVFS_LIBNET_CORE_CORE_HPP

#include "bmi/bmi.hpp"
#include "ring.hpp"

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace bmi {

using Clock = std::chrono::steady_clock;

inline constexpr std::uint32_t no_index = std::numeric_limits<std::uint32_t>::max();

// An Addr is a slot number (1-based, low 32 bits) and the slot's generation
// (high 32 bits): the slot of a freed peer is reused under a new
// generation, so an Addr the user kept for a peer that is gone never names
// its successor.  Slots never freed have generation 0; freed slots are
// reused oldest first, and a slot freed at the last generation is retired
// instead of wrapping (Core::forget_peer), so no Addr ever names two peers.
[[nodiscard]] inline std::uint32_t addr_slot(Addr a) noexcept
{
    return static_cast<std::uint32_t>(a & 0xffffffffU);
}

enum class OpKind : std::uint8_t { send, send_unexpected, recv, get, put };

// Where an op stands; methods refine "active" with their own field.
enum class OpState : std::uint8_t { free, active, done };

// Intrusive doubly linked list hooks, by op slot index.
struct Hook {
    std::uint32_t prev = no_index;
    std::uint32_t next = no_index;
};

struct Op {
    OpId id = no_op;
    OpKind kind = OpKind::send;
    OpState state = OpState::free;
    Addr peer = no_addr;
    Tag tag = 0;
    void *user_ptr = nullptr;
    ContextId ctx = 0;
    std::vector<MutableBuffer> bufs; // capacity kept across reuse of the slot
    std::size_t total = 0;           // sum of bufs
    std::size_t done_bytes = 0;      // moved so far
    std::size_t actual = 0;
    int error = 0;
    Clock::time_point last_progress;
    bool in_timeout_list = false;
    bool in_done_list = false;
    bool in_peer_list = false; // method: linked through peer_ops
    bool counted = false;      // in Core's user/kernel-polled op counts
    bool user_polled = false;  // counted in user_polled_ops_ (else kernel_polled_ops_)

    // Method-private state.
    std::uint8_t mstate = 0;
    std::uint64_t remote_cookie = 0; // the peer's op id in a rendezvous
    std::uint32_t conn = no_index;   // connection the op's bytes travel on
    Hook match;                      // method lists (posted receives, ...)
    Hook peer_ops;                   // method: all live ops of one peer
    Hook timeout;                    // core: ops by last progress
    Hook done;                       // core: finished ops per context
};

// A list of ops threaded through one of the Op hooks.
class OpList {
public:
    explicit OpList(Hook Op::*hook) : hook_(hook) {}
    [[nodiscard]] bool empty() const noexcept { return head_ == no_index; }
    [[nodiscard]] std::uint32_t front() const noexcept { return head_; }
    void push_back(std::vector<Op> &ops, std::uint32_t i);
    void remove(std::vector<Op> &ops, std::uint32_t i);
    [[nodiscard]] std::uint32_t next(const std::vector<Op> &ops, std::uint32_t i) const
    {
        return (ops[i].*hook_).next;
    }

private:
    Hook Op::*hook_;
    std::uint32_t head_ = no_index;
    std::uint32_t tail_ = no_index;
};

class Core;

// A transport method (tcp, ib): one ops table behind which the core never
// sees a socket.
class Method {
public:
    virtual ~Method() = default;
    Method() = default;
    Method(const Method &) = delete;
    Method &operator=(const Method &) = delete;
    Method(Method &&) = delete;
    Method &operator=(Method &&) = delete;

    [[nodiscard]] virtual std::string_view scheme() const = 0;
    // Starts listening on "host:port"; returns the bound URL or throws.
    virtual std::string listen(std::string_view hostport) = 0;
    // Validates "host:port" and creates the method's peer for addr.
    virtual int add_peer(Addr addr, std::string_view hostport) = 0;
    // Takes a newly posted op.  Returns true when it finished at once (the
    // op's error/actual are set); else the method completes it later.
    virtual bool post(std::uint32_t op_index) = 0;
    // Ends the op with error if it has not finished.  must_end: it has to
    // end now (its context closes, it timed out); otherwise a method whose
    // transfer cannot be stopped at once (an RDMA in flight into or out of
    // the op's memory) may end it later, once the memory is no longer used.
    virtual void cancel(std::uint32_t op_index, int error, bool must_end) = 0;
    // One-sided transfers (Bmi::expose / post_get / post_put); -ENOTSUP by
    // default.  post_rdma takes a new get or put op and the peer's
    // descriptor: a negative errno when nothing was posted, else 0 with
    // *done set when the op finished at once (its error/actual set).
    virtual int expose(Addr /*peer*/, std::span<const MutableBuffer> /*bufs*/,
                       std::shared_ptr<void> & /*keep*/, std::vector<std::byte> & /*descriptor*/)
    {
        return -ENOTSUP;
    }
    virtual int post_rdma(std::uint32_t /*op_index*/, std::span<const std::byte> /*descriptor*/,
                          std::uint64_t /*offset*/, bool & /*done*/)
    {
        return -ENOTSUP;
    }
    // Moves bytes; sleeps at most timeout_ms when there is nothing to do.
    virtual void progress(int timeout_ms) = 0;
    // Called on every method but the first before the first sleeps: arm
    // what makes the method's fds readable on new work (completion
    // notices).  False when there is work already (then nobody sleeps).
    virtual bool prepare_sleep() { return true; }
    // A poll that costs no system call (reading a completion queue in user
    // space), for the spinning phase of a wait; true when it found work.
    // False and nothing done for methods that have none.
    virtual bool poll_fast() { return false; }
    virtual void drop_peer(Addr addr, int error) = 0;
    // After drop_peer for a dropped identity (Core::drop_identity): the
    // messages addr sent that nobody has received yet (early ones, with
    // their budget charges) go, so that no later session inherits them.
    virtual void forget_messages(Addr /*addr*/) {}
    // Asked when an op has made no progress for the idle timeout: is its
    // peer alive?  Returns the time to count the op's idleness from: when
    // the peer was last heard from (any frame, pongs included) if that is
    // recent; a moment a quarter of the timeout ahead while a ping to it is
    // still young (one is sent now if none is out); time_point::min() when
    // the connection is gone or a ping went unanswered for that long.  An op
    // that waits on a live peer is waiting, not stuck.
    virtual Clock::time_point peer_alive(std::uint32_t op_index) = 0;
    // Watches a caller's fd in the method's sleep (Bmi::watch_fd); when it
    // is readable the method calls Core::external_readable(fd).
    virtual int watch_external(int fd) = 0;
    virtual int unwatch_external(int fd) = 0;
    // Another method's fd (its event channels): when it is readable the
    // sleep ends, with nothing else done.  Only the first method sleeps
    // (Core::progress), so only it must implement these.
    virtual int watch_internal(int /*fd*/) { return -ENOTSUP; }
    virtual int unwatch_internal(int /*fd*/) { return -ENOTSUP; }
    // The unexpected-message budget of addr has room again.
    virtual void unexpected_released(Addr /*addr*/) {}
    // Registers [data, data + size) for the method's transfers (memalloc);
    // the registration lasts as long as the returned handle.  nullptr: the
    // method needs none.
    virtual std::shared_ptr<void> register_memory(void * /*data*/, std::size_t /*size*/)
    {
        return nullptr;
    }
    [[nodiscard]] virtual std::uint64_t open_connections() const = 0;
    [[nodiscard]] virtual std::uint64_t direct_sends() const = 0;
    // Counters of get_info the method keeps (registrations, ...); 0 if none.
    [[nodiscard]] virtual std::uint64_t counter(Info /*key*/) const { return 0; }
    [[nodiscard]] virtual std::uint64_t engine() const = 0;
};

// Tunables shared by the core and the methods.
struct Limits {
    std::size_t eager = std::size_t{16} * 1024;
    std::size_t unexpected = std::size_t{16} * 1024;
    std::size_t unexpected_peer_bytes = std::size_t{1024} * 1024;
    std::chrono::milliseconds idle_timeout{30000};
    std::chrono::milliseconds keepalive{10000};
    // How long a test* call polls before it sleeps (see Info::spin_us).
    std::chrono::microseconds spin{50};
    static constexpr std::uint64_t max_spin_us = 10000;
    // Waits that end within this are "short": the poll time follows them.
    static constexpr std::chrono::microseconds max_learned_spin{1000};
    // While only ops of methods that poll in user space (ib) are in
    // flight, the polling phase asks the kernel (the sleeping engine's
    // poll, sched_yield) at most once per this: those system calls cost
    // more than the completions being waited for.  0: every round.
    std::chrono::microseconds kernel_poll_interval{50};
    static constexpr std::uint64_t max_kernel_poll_us = 10000;
    // What a peer that has not proved anything may hold (docs/bmi.md,
    // "Limits"): accepted connections in all and per source address
    // (more are closed at accept), how long an accepted connection may take
    // to send its hello, how a frame it started must progress (no byte of
    // it for frame_timeout, or slower on average than frame_min_rate bytes
    // a second after the first frame_timeout: slowloris), the bytes of
    // unexpected and early messages buffered for all peers together (per
    // peer: unexpected_peer_bytes and the method's own early limit; over a
    // global budget the frame is not buffered, its connection is closed),
    // and the bytes queued to send on one connection before reading from
    // it stops (send_queue_bytes: a peer that asks and never reads the
    // answers).  A connection not read for idle_timeout (a budget that
    // did not free up, a send queue that did not drain) is closed.
    std::size_t max_connections = 4096;
    std::size_t max_connections_per_address = 64;
    std::chrono::milliseconds hello_timeout{10000};
    std::chrono::milliseconds frame_timeout{30000};
    std::uint64_t frame_min_rate = 4096;
    std::size_t unexpected_total_bytes = std::size_t{256} << 20U;
    std::size_t early_total_bytes = std::size_t{64} << 20U;
    std::size_t send_queue_bytes = std::size_t{4} << 20U;
};

// The poll time of test* calls, learned from how their waits ended.  A
// wait that polls and then sleeps costs a wake-up (tens to hundreds of µs)
// on top of the round trip; when the round trips a process waits for keep
// ending a little after the configured spin (a slow network, an emulated
// machine, a peer that computes briefly), polling a little longer is
// cheaper.  Waits for long things (an idle server, a disk) keep the
// configured spin.
class PollLearner {
public:
    // A wait that ended with work after `waited`.
    void learn(std::chrono::nanoseconds waited);
    // How long the next wait polls, given the configured spin.
    [[nodiscard]] std::chrono::microseconds poll_time(std::chrono::microseconds spin) const;

private:
    double short_wait_us_ = 0; // moving average of the short waits
    double long_share_ = 1;    // moving share of the waits that were long
};

// Delivers unexpected messages; shared with the messages so that freeing one
// after the Bmi is gone is safe.
class UnexpectedPool : public std::enable_shared_from_this<UnexpectedPool> {
public:
    // A buffer of at least size bytes, reused when possible.
    std::vector<std::byte> take(std::size_t size);
    UnexpectedMessage make(Addr peer, Tag tag, std::vector<std::byte> buf, std::size_t size);
    void give_back(UnexpectedMessage &msg) noexcept;
    // Bytes of unexpected messages from peer not yet freed by the user.
    [[nodiscard]] std::size_t outstanding(Addr peer) const;
    // The same, summed over every peer.
    [[nodiscard]] std::size_t total() const noexcept { return total_; }
    // The peer is gone (it has nothing outstanding): its entry goes.
    void forget(Addr peer) { outstanding_.erase(peer); }
    // Called when a peer's budget frees up.
    std::function<void(Addr)> on_release;

private:
    std::vector<std::vector<std::byte>> free_;
    std::unordered_map<Addr, std::size_t> outstanding_;
    std::size_t total_ = 0;
};

class Core {
public:
    explicit Core(const Options &options);
    ~Core();
    Core(const Core &) = delete;
    Core &operator=(const Core &) = delete;
    Core(Core &&) = delete;
    Core &operator=(Core &&) = delete;

    // --- for methods ---
    std::vector<Op> ops;
    Limits limits;
    PollLearner poll_learner;
    // Set when a watched fd is readable; test* return then.
    bool external_ready = false;
    // A method found watched fd readable: test* return, and
    // Bmi::take_ready_fds names it.
    void external_readable(int fd);
    // Set by the first method when another method's fd (watch_internal)
    // was readable: that method then drains its fds; until then it only
    // polls what needs no system call.
    bool internal_ready = true;
    std::shared_ptr<UnexpectedPool> unexpected_pool = std::make_shared<UnexpectedPool>();

    // The op with this id, if it is live.
    [[nodiscard]] Op *find(OpId id);
    [[nodiscard]] std::uint32_t index_of(OpId id) const;
    // Records progress on an op (resets its idle deadline).
    void touch(std::uint32_t i);
    // Finishes an op: it becomes visible to test*.
    void complete(std::uint32_t i, int error, std::size_t actual);
    void deliver_unexpected(UnexpectedMessage msg);
    // The Addr for an incoming peer's URL, made if new (no authenticator).
    Addr peer_for_url(Method &method, const std::string &url);
    // --- authentication (handshake.cpp) ---
    std::shared_ptr<Authenticator> authenticator;
    // The Addr of an incoming peer that proved `id` (name and incarnation),
    // made if new; `label` (the URL it claims, or its socket address) is
    // what url_of says of it.  A peer is who it proved, never the label.
    Addr peer_for_identity(Method &method, const Identity &id, const std::string &label);
    // addr's latest authenticated connection proved `id`.
    void set_identity(Addr addr, const Identity &id);
    [[nodiscard]] std::optional<Identity> identity_of(Addr addr) const;
    // The credential addr was looked up with ("" none).
    [[nodiscard]] const std::string &credential_of(Addr addr) const;
    std::size_t drop_identity(std::string_view name);
    [[nodiscard]] const std::string &url_of(Addr addr) const;
    // The user looked addr up by its URL: its method must keep it.
    [[nodiscard]] bool pinned(Addr addr) const;
    // A peer the method no longer knows (no connection, op or unexpected
    // message left): its Addr and URL map entry go; the slot is reused under
    // a new generation.
    void forget_peer(Addr addr);
    [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
    // The last generation an Addr slot may have: a slot freed at it is
    // retired, never reused.  Wrapping to 0 instead would let an Addr kept
    // for a peer long gone name whoever got its slot 2^32 reuses later (a
    // flood of fresh URLs reuses one slot as fast as it connects).  A
    // member so that tests can reach it in a few reuses.
    std::uint32_t last_addr_generation = std::numeric_limits<std::uint32_t>::max();
    // Makes the first method's sleep end when fd (another method's) is
    // readable.
    int watch_internal(int fd);
    int unwatch_internal(int fd);

    // --- for the Bmi facade ---
    std::vector<std::string> listen_urls;
    ContextId open_context();
    void close_context(ContextId ctx);
    Addr lookup(std::string_view url, int *error, std::string_view credential = {});
    Post post(OpKind kind, Addr peer, std::span<const MutableBuffer> bufs, Tag tag, void *user_ptr,
              ContextId ctx);
    Post post_rdma(OpKind kind, Addr peer, std::span<const std::byte> descriptor,
                   std::uint64_t offset, MutableBuffer buf, void *user_ptr, ContextId ctx);
    int expose(Addr peer, std::span<const MutableBuffer> bufs, std::shared_ptr<void> &keep,
               std::vector<std::byte> &descriptor);
    bool test(OpId id, Completion &out, int max_idle_ms);
    std::size_t testsome(std::span<const OpId> ids, std::vector<Completion> &out, int max_idle_ms);
    std::size_t testcontext(ContextId ctx, std::span<Completion> out, int max_idle_ms);
    std::size_t testany(ContextId ctx, std::span<Completion> done, std::size_t &done_count,
                        std::vector<UnexpectedMessage> &unexpected, std::size_t max_unexpected,
                        int max_idle_ms);
    std::size_t testunexpected(std::vector<UnexpectedMessage> &out, std::size_t max,
                               int max_idle_ms);
    int cancel(OpId id);
    [[nodiscard]] Memory memalloc(std::size_t size);
    [[nodiscard]] Registration register_memory(void *data, std::size_t size);
    int watch_fd(int fd);
    int unwatch_fd(int fd);
    void take_ready_fds(std::vector<int> &out);
    int set_info(Info key, std::uint64_t value);
    [[nodiscard]] std::uint64_t get_info(Info key) const;

private:
    struct AddrEntry {
        std::string url; // the key in addr_by_url_
        Method *method = nullptr;
        std::uint32_t generation = 0;
        bool live = true;
        bool pinned = false; // returned by lookup
        std::string label;   // what url_of says when not url (credentials, identities)
        std::string credential;
        std::optional<Identity> identity;
    };
    // The entry of a live Addr, or nullptr.
    [[nodiscard]] AddrEntry *entry(Addr addr);
    [[nodiscard]] const AddrEntry *entry(Addr addr) const;
    Addr new_addr(const std::string &url, Method *method);
    struct Context {
        bool open = false;
        OpList done{&Op::done};
    };

    std::uint32_t alloc_op();
    // A new active op in the idle-timeout list.
    std::uint32_t start_op(OpKind kind, Addr peer, std::span<const MutableBuffer> bufs,
                           std::size_t total, Tag tag, void *user_ptr, ContextId ctx);
    Post posted(std::uint32_t i, bool done);
    void release_op(std::uint32_t i);
    Completion reap(std::uint32_t i);
    // Runs every method once; sleeps at most timeout_ms.  With a timeout
    // of 0 the first method (a system call) is skipped unless
    // kernel_poll_due(); returns whether it ran.
    bool progress(int timeout_ms);
    [[nodiscard]] bool kernel_poll_due() const;
    // The op's method polls in user space: it counts in user_polled_ops_.
    [[nodiscard]] bool user_polled(std::uint32_t i) const
    {
        return addrs_[addr_slot(ops[i].peer) - 1].method != methods_.front().get();
    }
    void expire_idle_ops();
    void apply_spin_env();
    [[nodiscard]] Method &method_of(std::uint32_t i)
    {
        return *addrs_[addr_slot(ops[i].peer) - 1].method;
    }
    [[nodiscard]] static int sleep_budget(Clock::time_point deadline);
    // The deadline of a test* call and the end of its polling phase.
    struct WaitWindow {
        Clock::time_point start;
        Clock::time_point deadline;
        Clock::time_point spin_until;
        bool waited = false; // idle_step ran at least once
    };
    [[nodiscard]] WaitWindow wait_window(int max_idle_ms) const;
    // One round of waiting: polls the methods without sleeping before
    // spin_until, sleeps on their fds after.  False once the deadline passed.
    bool idle_step(WaitWindow &w);
    // A test* call found work after waiting: the poll time learns from it.
    void waited_for_work(const WaitWindow &w);

    std::vector<std::unique_ptr<Method>> methods_;
    std::vector<int> ready_fds_;           // watched fds found readable, not yet taken
    std::vector<AddrEntry> addrs_;         // slot n is addrs_[n - 1]
    std::deque<std::uint32_t> free_slots_; // oldest freed first
    std::size_t retired_slots_ = 0;        // freed at last_addr_generation
    std::unordered_map<std::string, Addr> addr_by_url_;
    std::vector<std::uint32_t> free_ops_;
    std::vector<Context> contexts_;
    OpList timeouts_{&Op::timeout};
    RingQueue<UnexpectedMessage> unexpected_;
    std::uint32_t generation_ = 1;
    // Ops finished and unexpected messages delivered so far: tells
    // progress() whether a method's poll produced something for test*.
    std::uint64_t events_ = 0;
    // Ops started and not yet released, by whether their method polls in
    // user space (every method but the first), and when the first method
    // was last polled: see Limits::kernel_poll_interval.
    std::uint32_t user_polled_ops_ = 0;
    std::uint32_t kernel_polled_ops_ = 0;
    Clock::time_point last_kernel_poll_{};
};

} // namespace bmi

#endif // PVFS_LIBNET_CORE_CORE_HPP
