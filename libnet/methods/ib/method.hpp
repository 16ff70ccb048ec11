// The ib method's private parts, shared by its translation units (see
// ib.cpp for the method as a whole):
//   ib.cpp          the method object, devices, listening, peers, the life of ops
//   connection.cpp  connections over rdma_cm and their queue pairs
//   frames.cpp      frames over SEND under credit flow control: eager and
//                   unexpected messages, control frames, the receive side
//   rdma.cpp        rendezvous (the receiver READs) and one-sided transfers
//   memory.cpp      registration: the registry and the per-device cache
//   progress.cpp    work requests, completions, the progress loop, liveness
// Not for other users: the method's only door is make_method() in ib.hpp.
#ifndef PVFS_LIBNET_IB_METHOD_HPP
#define PVFS_LIBNET_IB_METHOD_HPP

#include "../../core/core.hpp"
#include "../../core/handshake.hpp"
#include "../../core/net.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/unique_fd.hpp"
#include "wire.hpp"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bmi::ib {

namespace gossip = pvfs::gossip;
using net::errno_text;

// Receive buffers each side reserves for the other, per connection.
inline constexpr std::uint16_t credits_per_conn = 16;
// Credits a data frame (eager, unexpected, rts) must leave unused, so that
// control frames (fin, nack, pong, ...) can always follow.
inline constexpr std::uint32_t control_reserve = 2;
// Work requests a queue pair's send queue holds (frames and READs).
inline constexpr std::uint32_t sq_depth = 64;
// RDMA READs in flight per connection, and the largest one.
inline constexpr std::uint32_t max_reads = 16;
inline constexpr std::size_t read_chunk = std::size_t{1} << 20U;
inline constexpr std::uint32_t max_send_sge = 16;
inline constexpr std::uint32_t wanted_inline = 128;
// Early (not yet matched) eager messages buffered per peer; beyond this,
// receive buffers are held and the sender runs out of credits.
inline constexpr std::size_t early_peer_bytes = std::size_t{4} * 1024 * 1024;
inline constexpr int resolve_timeout_ms = 5000;
// Local ACK timeout exponent: 4.096 us * 2^17 = 0.54 s per try, 7 tries: a
// peer that stops answering fails the connection within about 4 s.
inline constexpr std::uint8_t ack_timeout = 17;
inline constexpr std::uint8_t retry_count = 7;
inline constexpr std::uint32_t pool_chunk = 64;         // buffers per registration
inline constexpr std::uint32_t max_send_buffers = 4096; // per device
inline constexpr std::uint32_t max_srq_buffers = 16384; // per device
inline constexpr std::size_t bucket_count = 4096;
inline constexpr std::uintptr_t page_size = 4096; // /proc/self/pagemap's unit on x86-64
// Bounds of the registration cache per device (pinned memory).
inline constexpr std::size_t cache_max_bytes = std::size_t{512} << 20U;
inline constexpr std::size_t cache_max_entries = 256;
// How long a closing Bmi waits for its posted sends to leave.
inline constexpr std::chrono::milliseconds linger_time{1000};
inline constexpr int max_wc = 32;

inline int resolve(std::string_view hp, sockaddr_storage &sa)
{
    socklen_t len = 0;
    return net::resolve(hp, sa, len);
}

// ------------------------------------------------------------------ RAII

struct ChannelClose {
    void operator()(rdma_event_channel *c) const noexcept { rdma_destroy_event_channel(c); }
};
struct IdDestroy {
    void operator()(rdma_cm_id *id) const noexcept
    {
        if (id->qp != nullptr)
            rdma_destroy_qp(id);
        rdma_destroy_id(id);
    }
};
struct CqDestroy {
    void operator()(ibv_cq *cq) const noexcept { ibv_destroy_cq(cq); }
};
struct CompClose {
    void operator()(ibv_comp_channel *c) const noexcept { ibv_destroy_comp_channel(c); }
};
struct SrqDestroy {
    void operator()(ibv_srq *s) const noexcept { ibv_destroy_srq(s); }
};
struct MrDereg {
    void operator()(ibv_mr *mr) const noexcept { ibv_dereg_mr(mr); }
};
struct AlignedFree {
    void operator()(std::byte *p) const noexcept { std::free(p); } // NOLINT: aligned_alloc's
};

using Channel = std::unique_ptr<rdma_event_channel, ChannelClose>;
using CmId = std::unique_ptr<rdma_cm_id, IdDestroy>;
using Mr = std::unique_ptr<ibv_mr, MrDereg>;

// Registrations carry only the access their use needs (docs/bmi.md "The
// ib method", "Memory"): a send's buffers are READ by the receiver of its
// RTS, and only memory the user exposes (Bmi::expose) may be written
// from afar.  An rkey works from every queue pair of the protection
// domain, so a write-capable one in an RTS would let the receiver (or
// anyone who learnt it) overwrite the sender's buffers.
inline constexpr int send_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
inline constexpr int expose_access =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
// A queue pair's responder access: none until the handshake's proof (a
// peer that proved nothing may not READ or WRITE this side's memory, even
// with a guessed rkey), then what rendezvous READs and one-sided
// transfers need.
inline constexpr unsigned qp_access_proved = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

// Registered buffers of one size, in registrations of pool_chunk buffers.
class BufferPool {
public:
    void init(std::size_t buf_size) { buf_size_ = (buf_size + 63) / 64 * 64; }
    [[nodiscard]] std::size_t buf_size() const noexcept { return buf_size_; }
    [[nodiscard]] std::uint32_t count() const noexcept { return count_; }

    bool grow(ibv_pd *pd)
    {
        const std::size_t bytes = buf_size_ * pool_chunk;
        std::unique_ptr<std::byte, AlignedFree> mem(
            static_cast<std::byte *>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
        if (!mem)
            return false;
        const int access = IBV_ACCESS_LOCAL_WRITE; // an int: ibv_reg_mr is also a macro
        Mr mr(ibv_reg_mr(pd, mem.get(), bytes, access));
        if (!mr)
            return false;
        chunks_.push_back(Chunk{std::move(mem), std::move(mr)});
        for (std::uint32_t k = 0; k < pool_chunk; ++k)
            free_.push_back(count_ + pool_chunk - 1 - k);
        count_ += pool_chunk;
        return true;
    }
    bool take(ibv_pd *pd, std::uint32_t limit, std::uint32_t &out)
    {
        if (free_.empty() && (count_ >= limit || !grow(pd)))
            return false;
        out = free_.back();
        free_.pop_back();
        return true;
    }
    void give(std::uint32_t b) { free_.push_back(b); }
    [[nodiscard]] std::byte *addr(std::uint32_t b) const
    {
        return chunks_[b / pool_chunk].mem.get() + (b % pool_chunk) * buf_size_;
    }
    [[nodiscard]] std::uint32_t lkey(std::uint32_t b) const
    {
        return chunks_[b / pool_chunk].mr->lkey;
    }

private:
    struct Chunk {
        std::unique_ptr<std::byte, AlignedFree> mem;
        Mr mr;
    };
    std::size_t buf_size_ = 0;
    std::vector<Chunk> chunks_;
    std::vector<std::uint32_t> free_;
    std::uint32_t count_ = 0;
};

// A cached registration of user memory, with the page frame of each page
// when it was registered.
struct CachedMr {
    Mr mr;
    std::uintptr_t start = 0;
    std::size_t len = 0;
    std::vector<std::uint64_t> frames;
    std::uint64_t last_use = 0;
};

struct Device {
    ibv_context *verbs = nullptr;
    std::shared_ptr<ibv_pd> pd;
    std::unique_ptr<ibv_comp_channel, CompClose> comp;
    std::unique_ptr<ibv_cq, CqDestroy> cq;
    std::unique_ptr<ibv_srq, SrqDestroy> srq;
    BufferPool recv;
    BufferPool send;
    ibv_device_attr attr{};
    int cq_size = 0;
    int cq_used = 0; // completions that may be outstanding at once
    bool armed = false;
    unsigned unacked = 0;
    std::uint32_t srq_target = 0; // receive buffers the SRQ should hold
    std::uint32_t srq_posted = 0;
    std::string name;
    // Registrations of user buffers, by start (see IbMethod::cached_mr):
    // for sends and receives (send_access), and for exposures
    // (expose_access), each bounded on its own.
    struct MrCache {
        std::map<std::uintptr_t, std::shared_ptr<CachedMr>> entries;
        std::size_t bytes = 0;
    };
    MrCache cache;
    MrCache cache_rw;
};

// Memory registered for as long as its owner wants (memalloc,
// register_memory), looked up by address so transfers from and into it need
// no registration of their own.  Registered on every device the method has
// open, including those it opens later.
class Registry {
public:
    // Registers [start, start + len) on pds; returns its id, 0 if no device
    // took it.
    std::uint64_t add(std::uintptr_t start, std::size_t len,
                      const std::vector<std::shared_ptr<ibv_pd>> &pds)
    {
        Region r;
        r.start = start;
        r.len = len;
        for (const auto &pd : pds)
            reg_on(r, pd);
        const std::lock_guard lock(mu_);
        const std::uint64_t id = ++next_id_;
        regions_.emplace(std::pair{start, id}, std::move(r));
        return id;
    }
    void remove(std::uintptr_t start, std::uint64_t id)
    {
        const std::lock_guard lock(mu_);
        regions_.erase({start, id});
    }
    // A device opened: every region is registered on it too.
    void add_device(const std::shared_ptr<ibv_pd> &pd)
    {
        const std::lock_guard lock(mu_);
        for (auto &[key, r] : regions_)
            reg_on(r, pd);
    }
    // The registration on pd covering [a, a + n), or nullptr: one that
    // peers may only read (sends, receives), or with `writable` one that
    // they may also write (an exposure), made on first use so that memory
    // never exposed is never writable from afar.
    ibv_mr *find(std::uintptr_t a, std::size_t n, const ibv_pd *pd, bool writable)
    {
        const std::lock_guard lock(mu_);
        for (auto it = regions_.upper_bound({a, ~std::uint64_t{0}}); it != regions_.begin();) {
            --it;
            Region &r = it->second;
            if (a + n > r.start + r.len)
                continue; // an earlier region may still hold it
            for (std::size_t k = 0; k < r.pds.size(); ++k) {
                if (r.pds[k].get() != pd)
                    continue;
                if (!writable)
                    return r.mrs[k].get();
                if (!r.rw_mrs[k])
                    r.rw_mrs[k] = reg(r, r.pds[k].get(), expose_access);
                return r.rw_mrs[k].get();
            }
        }
        return nullptr;
    }

private:
    struct Region {
        std::uintptr_t start = 0;
        std::size_t len = 0;
        std::vector<std::shared_ptr<ibv_pd>> pds; // declared first: outlives mrs
        std::vector<Mr> mrs;                      // send_access, one per pd
        std::vector<Mr> rw_mrs;                   // expose_access, made when first exposed
    };
    static Mr reg(const Region &r, ibv_pd *pd, int access)
    {
        // NOLINTNEXTLINE(performance-no-int-to-ptr): the region's own address
        Mr mr(ibv_reg_mr(pd, reinterpret_cast<void *>(r.start), r.len, access));
        if (!mr)
            gossip::warning(gossip::Mask::ib, "cannot register {} bytes: {}", r.len,
                            errno_text(errno));
        return mr;
    }
    static void reg_on(Region &r, const std::shared_ptr<ibv_pd> &pd)
    {
        Mr mr = reg(r, pd.get(), send_access);
        if (!mr)
            return;
        r.pds.push_back(pd);
        r.mrs.push_back(std::move(mr));
        r.rw_mrs.emplace_back();
    }

    std::mutex mu_; // Memory may be freed by another thread than the Bmi's
    std::map<std::pair<std::uintptr_t, std::uint64_t>, Region> regions_;
    std::uint64_t next_id_ = 0;
};

// A memalloc / register_memory registration: deregistered when dropped.
struct RegionHandle {
    std::shared_ptr<Registry> registry;
    std::uintptr_t start = 0;
    std::uint64_t id = 0;
    RegionHandle() = default;
    RegionHandle(const RegionHandle &) = delete;
    RegionHandle &operator=(const RegionHandle &) = delete;
    RegionHandle(RegionHandle &&) = delete;
    RegionHandle &operator=(RegionHandle &&) = delete;
    ~RegionHandle()
    {
        if (registry)
            registry->remove(start, id);
    }
};

// Op states inside this method (Op::mstate).
enum : std::uint8_t {
    st_none = 0,
    st_recv_posted, // in the match buckets
    st_recv_read,   // matched to an RTS: READs being posted / in flight
    st_send_wait,   // waiting for the connection
    st_send_queued, // eager / unexpected frame queued
    st_send_rts,    // RTS queued or sent; waiting for FIN or NACK
    st_rdma,        // get / put: READs or WRITEs being posted / in flight
};

// Per-op state that does not fit in Op.
struct OpX {
    std::vector<Mr> mrs;                           // registrations made for this op
    std::vector<std::shared_ptr<CachedMr>> cached; // cache entries it uses
    std::vector<std::uint32_t> keys;               // lkey (receive) / rkey (send) per buffer
    std::vector<Segment> remote;                   // receive: the sender's segments
    std::size_t size = 0;                          // receive: the message length
    std::size_t posted = 0;                        // receive: bytes with a READ posted
    std::uint32_t inflight = 0;                    // READs in flight into the op's memory
    bool cancelling = false;
    int cancel_error = 0;
};

enum class WrKind : std::uint8_t { free, recv, send, read };

// A posted work request; wr_id is (gen << 32) | slot.
struct Wr {
    WrKind kind = WrKind::free;
    std::uint32_t gen = 0;
    Device *dev = nullptr;
    std::uint32_t conn = no_index; // receive on an SRQ: set when it completes
    std::uint32_t conn_gen = 0;
    std::uint32_t buf = no_index; // pool buffer
    std::uint32_t op = no_index;
    OpId op_id = no_op;
    std::uint32_t len = 0;
};

enum class ConnState : std::uint8_t {
    closed,
    resolving_addr,
    resolving_route,
    connecting,
    accepting,
    up
};

struct Frame {
    Header h;
    std::uint32_t op = no_index; // eager / unexpected: the payload is the op's
    OpId op_id = no_op;
    std::vector<std::byte> payload;
};

struct Conn {
    CmId id;
    Device *dev = nullptr;
    std::uint32_t gen = 0;
    ConnState state = ConnState::closed;
    bool outgoing = false;
    Addr peer = no_addr;
    bool hello_seen = false;
    std::uint32_t qp_num = 0;
    std::uint32_t credits = 0; // frames we may still send
    std::uint32_t owed = 0;    // buffers reposted for the peer, not yet reported
    std::uint32_t remote_buf = 0;
    std::uint32_t sq_free = 0;
    std::uint32_t sq_size = 0;
    std::uint32_t reads = 0;
    std::uint32_t max_inline = 0;
    std::uint32_t max_sge = 1;
    std::uint32_t rd_depth = 1;
    std::deque<Frame> ctl;
    std::deque<Frame> data;
    std::deque<std::uint32_t> readq; // receive ops with READs left to post
    std::deque<std::uint32_t> held;  // received frames (WR slots) not consumed yet
    bool pending = false;            // in the method's pending list
    // The handshake (auth.cpp): until it is over only the hello and AUTH
    // messages pass, and an accepted connection has no peer.
    handshake::Session hs;
    HelloBody pending_remote; // the peer's hello, until the proof is in
    // The connect data each side sent in rdma_cm's request and accept
    // (credits, buffer size): outside the SENDs, so the methods hand it to
    // the authenticator with each side's transport hello, under the MACs.
    std::array<std::byte, connect_data_size> cm_mine{};
    std::array<std::byte, connect_data_size> cm_theirs{};
    Clock::time_point opened;   // the handshake's deadline runs from here
    bool refusing = false;      // a refusal is on its way: then closed
    int refuse_error = -EACCES; // what its ops fail with
    bool qp_open = false;       // the queue pair's remote access was raised (established)
    // Accepted: counted against the connection caps, by source IP.
    bool accepted = false;
    std::string source;
};

struct Early {
    Msg type = Msg::eager;
    Tag tag = 0;
    std::vector<std::byte> data; // eager payload
    std::uint64_t size = 0;
    std::uint64_t cookie = 0; // rts
    std::vector<Segment> segs;
    std::uint32_t conn = no_index;
    std::uint32_t conn_gen = 0;
};

struct Peer {
    Addr addr = no_addr;
    std::string hostport;
    std::uint32_t tx_conn = no_index;
    std::vector<std::uint32_t> conns;
    OpList waiting{&Op::match};
    OpList ops{&Op::peer_ops};
    Clock::time_point heard;
    Clock::time_point pinged;
    std::deque<Early> early;
    std::size_t early_bytes = 0;
    std::uint64_t incarnation = 0;
};

// Device events (port down) arrive once per verbs context, and every Bmi
// of a process shares librdmacm's contexts: whichever reads an event hands
// it to the others here, waking each through an eventfd in its sleep.
struct AsyncInbox {
    std::mutex mu;
    std::vector<std::pair<ibv_context *, ibv_event_type>> events;
    pvfs::UniqueFd wake{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
};

class AsyncHub {
public:
    static AsyncHub &get()
    {
        static AsyncHub hub;
        return hub;
    }
    void subscribe(AsyncInbox *inbox)
    {
        const std::lock_guard lock(mu_);
        inboxes_.push_back(inbox);
    }
    void unsubscribe(AsyncInbox *inbox)
    {
        const std::lock_guard lock(mu_);
        std::erase(inboxes_, inbox);
    }
    void publish(const AsyncInbox *from, ibv_context *verbs, ibv_event_type type)
    {
        const std::lock_guard lock(mu_);
        for (AsyncInbox *in : inboxes_) {
            if (in == from)
                continue;
            {
                const std::lock_guard l2(in->mu);
                in->events.emplace_back(verbs, type);
            }
            // An eventfd write fails only when the count would overflow:
            // the reader is woken already.
            const std::uint64_t one = 1;
            if (::write(in->wake.get(), &one, sizeof one) < 0) {
            }
        }
    }

private:
    std::mutex mu_;
    std::vector<AsyncInbox *> inboxes_;
};

class IbMethod final : public Method {
public:
    explicit IbMethod(Core &core)
        : core_(core), incarnation_(net::new_incarnation()),
          registry_(std::make_shared<Registry>()), buckets_(bucket_count, OpList{&Op::match})
    {
    }
    ~IbMethod() override;
    IbMethod(const IbMethod &) = delete;
    IbMethod &operator=(const IbMethod &) = delete;
    IbMethod(IbMethod &&) = delete;
    IbMethod &operator=(IbMethod &&) = delete;

    [[nodiscard]] std::string_view scheme() const override { return "ib"; }
    std::string listen(std::string_view hostport) override;
    int add_peer(Addr addr, std::string_view hostport) override;
    bool post(std::uint32_t i) override;
    void cancel(std::uint32_t i, int error, bool must_end) override;
    void progress(int timeout_ms) override;
    bool prepare_sleep() override;
    bool poll_fast() override;
    void drop_peer(Addr addr, int error) override;
    void forget_messages(Addr addr) override;
    Clock::time_point peer_alive(std::uint32_t i) override;
    int watch_external(int /*fd*/) override { return -ENOTSUP; }
    int unwatch_external(int /*fd*/) override { return -ENOTSUP; }
    void unexpected_released(Addr addr) override;
    std::shared_ptr<void> register_memory(void *data, std::size_t size) override;
    int expose(Addr peer, std::span<const MutableBuffer> bufs, std::shared_ptr<void> &keep,
               std::vector<std::byte> &descriptor) override;
    int post_rdma(std::uint32_t i, std::span<const std::byte> descriptor, std::uint64_t offset,
                  bool &done) override;
    [[nodiscard]] std::uint64_t open_connections() const override;
    [[nodiscard]] std::uint64_t direct_sends() const override { return 0; }
    [[nodiscard]] std::uint64_t engine() const override { return 0; }
    [[nodiscard]] std::uint64_t counter(Info key) const override
    {
        return key == Info::registrations         ? registrations_
               : key == Info::registration_hits   ? registration_hits_
               : key == Info::refused_connections ? refused_
                                                  : 0;
    }

private:
    Op &op(std::uint32_t i) { return core_.ops[i]; }
    OpX &opx(std::uint32_t i)
    {
        if (i >= opx_.size())
            opx_.resize(core_.ops.size());
        return opx_[i];
    }
    Peer &peer_of(Addr addr);
    Peer *peer_ptr(Addr addr);

    // setup
    int open_channel();
    Device *device_for(ibv_context *verbs, int &error);
    int bind_listener(const sockaddr_storage &addr, CmId &out);
    void on_device_event(Device &d, ibv_event_type type);
    void drain_device_events();
    int create_qp(std::uint32_t c);
    void add_fd(int fd);

    // connections
    std::uint32_t new_conn(CmId id);
    int connect_peer(Peer &p);
    void close_conn(std::uint32_t c, int error, std::string_view why);
    void handle_cm_events();
    void on_cm_event(std::uint32_t c, rdma_cm_event_type type, int status,
                     std::span<const std::byte> pdata);
    void on_connect_request(rdma_cm_id *id, std::span<const std::byte> pdata,
                            std::uint8_t initiator, std::uint8_t responder);
    void on_up(std::uint32_t c);
    // The queue pair's responder access (qp_access_flags): 0 from the
    // connection's start, qp_access_proved once the handshake is over.
    bool set_qp_access(std::uint32_t c, unsigned flags);
    // Messages go once the peer's hello is in (with an authenticator:
    // once the handshake is over, nothing goes before the proof).  A
    // client without one waits for the server's hello too, so that a
    // server that refuses it (it requires authentication) gets nothing
    // from it but the hello, and its ops fail with the refusal.
    [[nodiscard]] static bool ready_to_send(const Conn &k)
    {
        if (k.state != ConnState::up || k.refusing)
            return false;
        if (k.hs.step() == handshake::Step::none)
            return k.hello_seen;
        return k.hs.step() == handshake::Step::done;
    }

    // work requests
    std::uint32_t new_wr(WrKind kind, Device *dev);
    void free_wr(std::uint32_t w);
    bool post_recv_buffer(Device &d, std::uint32_t c);
    void recycle_recv(std::uint32_t w);
    void refill_srq(Device &d);
    void poll_cq(Device &d);
    void on_wc(const ibv_wc &wc);
    void on_recv(std::uint32_t w, const ibv_wc &wc);

    // sending
    void queue_ctl(std::uint32_t c, const Header &h);
    void queue_ctl(Peer &p, const Header &h);
    void mark_pending(std::uint32_t c);
    bool flush(std::uint32_t c); // false: the connection died
    bool post_frame(std::uint32_t c, Frame &f);
    void pump_reads(std::uint32_t c);
    bool post_read(std::uint32_t c, std::uint32_t i);
    bool start_send(std::uint32_t i, Peer &p);
    void start_rdma(std::uint32_t i, Peer &p);
    int register_op(std::uint32_t i, Device &d, int access);
    std::shared_ptr<CachedMr> cached_mr(Device &d, std::uintptr_t a, std::size_t n, bool writable,
                                        int &error);
    bool read_frames(std::uintptr_t start, std::size_t pages, std::vector<std::uint64_t> &out);
    bool frames_visible();

    // receiving
    enum class Verdict : std::uint8_t { consumed, hold, closed };
    Verdict deliver(std::uint32_t c, std::uint32_t w);
    // auth.cpp: the handshake over this method's messages.
    Verdict on_hello(std::uint32_t c, const Header &h, std::span<const std::byte> payload);
    Verdict on_auth(std::uint32_t c, const Header &h, std::span<const std::byte> payload);
    Verdict established(std::uint32_t c, const HelloBody &body);
    int start_handshake(std::uint32_t c);
    [[nodiscard]] std::vector<std::byte> transport_hello() const;
    // A transport hello as the authenticator sees it: the hello's bytes
    // and the connect data of the same side.
    [[nodiscard]] static std::vector<std::byte>
    with_connect_data(std::span<const std::byte> hello,
                      std::span<const std::byte, connect_data_size> cm);
    void queue_hello(std::uint32_t c, std::vector<std::byte> payload, bool with_auth);
    void queue_auth(std::uint32_t c, std::uint64_t status, std::span<const std::byte> payload);
    Verdict refuse(std::uint32_t c, int error, std::string_view why);
    // Closes connections whose handshake outlived hello_timeout, and
    // refusing ones whose refusal did not go within a second.
    void check_handshakes(Clock::time_point now);
    Clock::time_point next_handshake_check_{};
    // Refusals are logged at most once a minute each kind, with how many
    // were not (anyone who reaches the port can cause one).
    struct RateLog {
        Clock::time_point logged{};
        std::uint64_t unlogged = 0;
    };
    RateLog refusal_log_; // handshakes
    RateLog caps_log_;    // connection caps
    static void log_rated(RateLog &log, const std::string &text);
    void log_refusal(const std::string &text) { log_rated(refusal_log_, text); }
    // The connection caps (Limits::max_connections and
    // max_connections_per_address, as tcp's).
    std::size_t accepted_open_ = 0;
    std::unordered_map<std::string, std::size_t> per_source_;
    std::uint64_t refused_ = 0;
    void match_rts(std::uint32_t i, std::uint32_t c, std::uint64_t cookie, std::uint64_t size,
                   std::vector<Segment> segs);
    void on_cancel(std::uint32_t c, Peer &p, std::uint64_t cookie);
    bool match_recv(Peer &p, Tag tag, std::uint32_t &out);
    void resume_held(Peer &p);
    void copy_into_op(std::uint32_t i, const std::byte *src, std::size_t n);
    void read_done(std::uint32_t w);

    void finish(std::uint32_t i, int error, std::size_t actual);
    void linger();
    void unlink(std::uint32_t i);
    void fail_peer_ops(Peer &p, int error);
    void ping(Peer &p, Clock::time_point now);
    void ping_waiting_peers();

    static std::size_t bucket_of(Addr a, Tag t)
    {
        const std::uint64_t k = (a * 0x9e3779b97f4a7c15ULL) ^ static_cast<std::uint32_t>(t);
        return (k ^ (k >> 29U)) & (bucket_count - 1);
    }

    Core &core_;
    const std::uint64_t incarnation_;
    std::shared_ptr<Registry> registry_;
    AsyncInbox inbox_;
    // Declaration order is destruction order reversed: connections (their
    // queue pairs) go before the devices, ids before the channel.
    Channel channel_;
    std::vector<std::unique_ptr<Device>> devices_;
    std::vector<int> fds_; // watched through the sleeping method
    std::vector<CmId> listeners_;
    std::string my_url_;
    std::vector<std::unique_ptr<Conn>> conns_;
    std::vector<std::uint32_t> free_conns_;
    std::uint32_t conn_generation_ = 0;
    std::unordered_map<std::uint32_t, std::uint32_t> conn_by_qp_;
    std::vector<std::unique_ptr<Peer>> peers_;
    std::vector<OpList> buckets_;
    std::vector<OpX> opx_;
    std::vector<Wr> wrs_;
    std::vector<std::uint32_t> free_wrs_;
    std::vector<std::uint32_t> pending_; // connections with frames or READs to post
    std::vector<std::uint32_t> scratch_;
    Clock::time_point last_ping_round_;
    pvfs::UniqueFd pagemap_;
    bool frames_checked_ = false;
    std::vector<std::uint64_t> frames_;
    std::uint64_t use_clock_ = 0;
    std::uint64_t completions_ = 0; // work completions polled, ever
    std::uint64_t registrations_ = 0;
    std::uint64_t registration_hits_ = 0;
};

} // namespace bmi::ib

#endif // PVFS_LIBNET_IB_METHOD_HPP
