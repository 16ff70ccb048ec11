// The ib method: BMI over reliable-connected queue pairs, connections made
// on demand with rdma_cm.  Small messages are SENDs into pre-registered
// receive buffers (a shared receive queue where the device has one) under
// credit flow control; large ones are a rendezvous in which the receiver
// RDMA-READs straight from the sender's memory into its own.  docs/bmi.md
// ("The ib method") describes the protocol and its limits.
#include "ib.hpp"

#include "../../core/net.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/unique_fd.hpp"
#include "wire.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace bmi::ib {

namespace gossip = pvfs::gossip;

namespace {

// Receive buffers each side reserves for the other, per connection.
constexpr std::uint16_t credits_per_conn = 16;
// Credits a data frame (eager, unexpected, rts) must leave unused, so that
// control frames (fin, nack, pong, ...) can always follow.
constexpr std::uint32_t control_reserve = 2;
// Work requests a queue pair's send queue holds (frames and READs).
constexpr std::uint32_t sq_depth = 64;
// RDMA READs in flight per connection, and the largest one.
constexpr std::uint32_t max_reads = 16;
constexpr std::size_t read_chunk = std::size_t{1} << 20U;
constexpr std::uint32_t max_send_sge = 16;
constexpr std::uint32_t wanted_inline = 128;
// Early (not yet matched) eager messages buffered per peer; beyond this,
// receive buffers are held and the sender runs out of credits.
constexpr std::size_t early_peer_bytes = std::size_t{4} * 1024 * 1024;
constexpr int resolve_timeout_ms = 5000;
// Local ACK timeout exponent: 4.096 us * 2^17 = 0.54 s per try, 7 tries: a
// peer that stops answering fails the connection within about 4 s.
constexpr std::uint8_t ack_timeout = 17;
constexpr std::uint8_t retry_count = 7;
constexpr std::uint32_t pool_chunk = 64;         // buffers per registration
constexpr std::uint32_t max_send_buffers = 4096; // per device
constexpr std::uint32_t max_srq_buffers = 16384; // per device
constexpr std::size_t bucket_count = 4096;
constexpr std::uintptr_t page_size = 4096; // /proc/self/pagemap's unit on x86-64
// Bounds of the registration cache per device (pinned memory).
constexpr std::size_t cache_max_bytes = std::size_t{512} << 20U;
constexpr std::size_t cache_max_entries = 256;
// How long a closing Bmi waits for its posted sends to leave.
constexpr std::chrono::milliseconds linger_time{1000};
constexpr int max_wc = 32;

using net::errno_text;
using net::split_hostport;

int resolve(std::string_view hp, sockaddr_storage &sa)
{
    socklen_t len = 0;
    return net::resolve(hp, sa, len);
}

int set_nonblock(int fd)
{
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

// What a failed work completion means for the ops on its connection.
int wc_error(ibv_wc_status s)
{
    // Retries exhausted: the peer stopped acknowledging (gone or cut off).
    // Anything else (flushed, remote access or protection errors) ended
    // the connection under the op.
    if (s == IBV_WC_RETRY_EXC_ERR || s == IBV_WC_RNR_RETRY_EXC_ERR)
        return -ETIMEDOUT;
    return -ECONNRESET;
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

std::shared_ptr<ibv_pd> alloc_pd(ibv_context *verbs)
{
    ibv_pd *pd = ibv_alloc_pd(verbs);
    if (pd == nullptr)
        return nullptr;
    return {pd, [](ibv_pd *p) { ibv_dealloc_pd(p); }};
}

constexpr int remote_access =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

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
    // Registrations of user buffers, by start (see IbMethod::cached_mr).
    std::map<std::uintptr_t, std::shared_ptr<CachedMr>> cache;
    std::size_t cache_bytes = 0;
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
    // The registration on pd covering [a, a + n), or nullptr.
    ibv_mr *find(std::uintptr_t a, std::size_t n, const ibv_pd *pd)
    {
        const std::lock_guard lock(mu_);
        for (auto it = regions_.upper_bound({a, ~std::uint64_t{0}}); it != regions_.begin();) {
            --it;
            const Region &r = it->second;
            if (a + n > r.start + r.len)
                continue; // an earlier region may still hold it
            for (std::size_t k = 0; k < r.pds.size(); ++k) {
                if (r.pds[k].get() == pd)
                    return r.mrs[k].get();
            }
        }
        return nullptr;
    }

private:
    struct Region {
        std::uintptr_t start = 0;
        std::size_t len = 0;
        std::vector<std::shared_ptr<ibv_pd>> pds; // declared first: outlives mrs
        std::vector<Mr> mrs;
    };
    static void reg_on(Region &r, const std::shared_ptr<ibv_pd> &pd)
    {
        // NOLINTNEXTLINE(performance-no-int-to-ptr): the region's own address
        Mr mr(ibv_reg_mr(pd.get(), reinterpret_cast<void *>(r.start), r.len, remote_access));
        if (!mr) {
            gossip::warning(gossip::Mask::ib, "cannot register {} bytes: {}", r.len,
                            errno_text(errno));
            return;
        }
        r.pds.push_back(pd);
        r.mrs.push_back(std::move(mr));
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
        return key == Info::registrations       ? registrations_
               : key == Info::registration_hits ? registration_hits_
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
    [[nodiscard]] static bool ready_to_send(const Conn &k)
    {
        return k.state == ConnState::up && (k.outgoing || k.hello_seen);
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
    std::shared_ptr<CachedMr> cached_mr(Device &d, std::uintptr_t a, std::size_t n, int &error);
    bool read_frames(std::uintptr_t start, std::size_t pages, std::vector<std::uint64_t> &out);
    bool frames_visible();

    // receiving
    enum class Verdict : std::uint8_t { consumed, hold, closed };
    Verdict deliver(std::uint32_t c, std::uint32_t w);
    Verdict on_hello(std::uint32_t c, std::span<const std::byte> payload);
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

// ------------------------------------------------------------ setup, peers

IbMethod::~IbMethod()
{
    linger();
    if (channel_)
        AsyncHub::get().unsubscribe(&inbox_);
    for (std::uint32_t c = 0; c < conns_.size(); ++c)
        close_conn(c, -ECANCELED, {});
    for (const int fd : fds_)
        core_.unwatch_internal(fd);
    listeners_.clear();
    for (auto &d : devices_) {
        if (d->unacked > 0)
            ibv_ack_cq_events(d->cq.get(), d->unacked);
    }
}

// A send reported complete was copied, not yet delivered: like a TCP
// socket's close, which still sends what the socket took, the connections
// get a moment to finish their posted sends (and queued answers: FIN,
// NACK) before their queue pairs are destroyed, which would drop them.
void IbMethod::linger()
{
    const auto deadline = Clock::now() + linger_time;
    for (;;) {
        bool busy = false;
        for (const auto &k : conns_) {
            if (k->state == ConnState::up && (k->sq_free < k->sq_size || !k->ctl.empty()))
                busy = true;
        }
        if (!busy || Clock::now() >= deadline)
            return;
        core_.internal_ready = true; // no engine runs here to say so
        progress(0);
        std::vector<pollfd> pfds;
        for (const int fd : fds_)
            pfds.push_back(pollfd{fd, POLLIN, 0});
        ::poll(pfds.data(), pfds.size(), 1);
    }
}

Peer *IbMethod::peer_ptr(Addr addr)
{
    if (addr == no_addr || addr > peers_.size() || !peers_[addr - 1])
        return nullptr;
    return peers_[addr - 1].get();
}

Peer &IbMethod::peer_of(Addr addr)
{
    if (addr > peers_.size())
        peers_.resize(addr);
    auto &slot = peers_[addr - 1];
    if (!slot) {
        slot = std::make_unique<Peer>();
        slot->addr = addr;
    }
    return *slot;
}

void IbMethod::add_fd(int fd)
{
    set_nonblock(fd);
    core_.watch_internal(fd);
    fds_.push_back(fd);
}

// Set in a child forked from a process that had opened RDMA devices:
// librdmacm's device contexts are inherited but the kernel refuses their
// use from another process, so every verbs call would fail with EACCES.
// NOLINTBEGIN(cppcoreguidelines-avoid-non-const-global-variables): process-wide facts
std::atomic<bool> g_rdma_opened{false};
std::atomic<bool> g_forked_after_rdma{false};
// NOLINTEND(cppcoreguidelines-avoid-non-const-global-variables)

void note_rdma_opened()
{
    static const bool registered = [] {
        ::pthread_atfork(nullptr, nullptr, [] {
            if (g_rdma_opened.load())
                g_forked_after_rdma.store(true);
        });
        return true;
    }();
    static_cast<void>(registered);
    g_rdma_opened.store(true);
}

int IbMethod::open_channel()
{
    if (channel_)
        return 0;
    if (g_forked_after_rdma.load()) {
        gossip::error(gossip::Mask::ib,
                      "this process was forked from one that had opened RDMA devices: RDMA "
                      "cannot be used here (open ib:// only after forking, or exec)");
        return -ENOTSUP;
    }
    note_rdma_opened();
    Channel ch(rdma_create_event_channel());
    if (!ch) {
        const int err = errno != 0 ? errno : ENODEV;
        gossip::error(gossip::Mask::ib,
                      "no RDMA connection manager ({}): is rdma_ucm loaded and an RDMA device "
                      "(or rdma_rxe) configured?",
                      errno_text(err));
        return -err;
    }
    channel_ = std::move(ch);
    add_fd(channel_->fd);
    add_fd(inbox_.wake.get());
    AsyncHub::get().subscribe(&inbox_);
    return 0;
}

Device *IbMethod::device_for(ibv_context *verbs, int &error)
{
    error = 0;
    for (auto &d : devices_) {
        if (d->verbs == verbs)
            return d.get();
    }
    auto d = std::make_unique<Device>();
    d->verbs = verbs;
    d->name = ibv_get_device_name(verbs->device);
    const auto fail = [&](const char *what) -> Device * {
        error = errno != 0 ? -errno : -ENOMEM;
        gossip::error(gossip::Mask::ib, "{}: {}: {}", d->name, what, errno_text(-error));
        return nullptr;
    };
    if (ibv_query_device(verbs, &d->attr) != 0)
        return fail("cannot query the device");
    d->pd = alloc_pd(verbs);
    if (!d->pd)
        return fail("cannot allocate a protection domain");
    d->comp.reset(ibv_create_comp_channel(verbs));
    if (!d->comp)
        return fail("cannot create a completion channel");
    d->cq_size = std::min(1024, d->attr.max_cqe);
    d->cq.reset(ibv_create_cq(verbs, d->cq_size, nullptr, d->comp.get(), 0));
    if (!d->cq)
        return fail("cannot create a completion queue");
    if (d->attr.max_srq > 0) {
        ibv_srq_init_attr sa{};
        sa.attr.max_wr = static_cast<std::uint32_t>(
            std::min<int>(d->attr.max_srq_wr, static_cast<int>(max_srq_buffers)));
        sa.attr.max_sge = 1;
        d->srq.reset(ibv_create_srq(d->pd.get(), &sa));
        if (!d->srq)
            gossip::warning(gossip::Mask::ib,
                            "{}: no shared receive queue ({}); one per connection", d->name,
                            errno_text(errno));
    }
    const std::size_t buf = header_size + std::max(core_.limits.eager, core_.limits.unexpected);
    d->recv.init(buf);
    d->send.init(buf);
    registry_->add_device(d->pd);
    add_fd(d->comp->fd);
    // Port state changes (link down) come as async events on the device.
    add_fd(verbs->async_fd);
    gossip::debug(gossip::Mask::ib, "{}: opened; srq {}, max_qp_rd_atom {}, max_sge {}", d->name,
                  d->srq ? "yes" : "no", d->attr.max_qp_rd_atom, d->attr.max_sge);
    devices_.push_back(std::move(d));
    return devices_.back().get();
}

// A listening id bound to addr (with addr's port as bound), or an error.
int IbMethod::bind_listener(const sockaddr_storage &addr, CmId &out)
{
    rdma_cm_id *raw = nullptr;
    if (rdma_create_id(channel_.get(), &raw, nullptr, RDMA_PS_TCP) != 0)
        return -errno;
    CmId id(raw);
    int one = 1;
    rdma_set_option(id.get(), RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one);
    sockaddr_storage sa = addr;
    if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr *>(&sa)) != 0)
        return -errno;
    if (rdma_listen(id.get(), 1024) != 0)
        return -errno;
    out = std::move(id);
    return 0;
}

std::string IbMethod::listen(std::string_view hostport)
{
    const std::string what = "bmi ib: listen on 'ib://" + std::string(hostport) + "'";
    sockaddr_storage sa{};
    if (const int rc = resolve(hostport, sa); rc != 0)
        throw std::system_error(-rc, std::generic_category(), what + ": bad address");
    if (const int rc = open_channel(); rc != 0)
        throw std::system_error(-rc, std::generic_category(),
                                what + ": no RDMA connection manager");
    CmId id;
    if (const int rc = bind_listener(sa, id); rc != 0)
        throw std::system_error(-rc, std::generic_category(),
                                what + (rc == -ENODEV || rc == -EADDRNOTAVAIL
                                            ? ": no RDMA device has this address"
                                            : ""));
    if (id->verbs != nullptr) {
        int err = 0;
        if (device_for(id->verbs, err) == nullptr)
            throw std::system_error(-err, std::generic_category(), what + ": device setup");
    }
    std::string host;
    std::string port;
    split_hostport(hostport, host, port);
    const bool v6 = host.find(':') != std::string::npos;
    std::string url = "ib://" + (v6 ? "[" + host + "]" : host) + ":" +
                      std::to_string(ntohs(rdma_get_src_port(id.get())));
    listeners_.push_back(std::move(id));
    if (my_url_.empty())
        my_url_ = url;
    return url;
}

int IbMethod::add_peer(Addr addr, std::string_view hostport)
{
    std::string host;
    std::string port;
    if (!split_hostport(hostport, host, port))
        return -EINVAL;
    peer_of(addr).hostport = std::string(hostport);
    return 0;
}

std::uint64_t IbMethod::open_connections() const
{
    return static_cast<std::uint64_t>(std::count_if(
        conns_.begin(), conns_.end(), [](const auto &k) { return k->state == ConnState::up; }));
}

std::shared_ptr<void> IbMethod::register_memory(void *data, std::size_t size)
{
    // Registered on the devices open now and on those opened later (the
    // registry remembers it): a process that never uses ib registers (pins)
    // nothing, and one that registers before its first ib transfer (pvfsd
    // at start) has its memory registered when the device opens.
    if (size == 0)
        return nullptr;
    std::vector<std::shared_ptr<ibv_pd>> pds;
    for (const auto &d : devices_)
        pds.push_back(d->pd);
    auto handle = std::make_shared<RegionHandle>();
    handle->registry = registry_;
    handle->start = reinterpret_cast<std::uintptr_t>(data);
    handle->id = registry_->add(handle->start, size, pds);
    return handle;
}

// The registration of [a, a + n) from the device's cache, made (and cached)
// if there is none.  Before a cached one is used, every page of the buffer
// is checked to still be the page frame registered: a registration pins its
// pages, so memory freed and mapped again at the same address necessarily
// has other frames, and a stale registration is never used.  nullptr when
// registering fails (*error set).
std::shared_ptr<CachedMr> IbMethod::cached_mr(Device &d, std::uintptr_t a, std::size_t n,
                                              int &error)
{
    const std::uintptr_t ps = a & ~(page_size - 1);
    const std::uintptr_t pe = (a + n + page_size - 1) & ~(page_size - 1);
    const std::size_t pages = (pe - ps) / page_size;
    if (!read_frames(ps, pages, frames_)) {
        error = -EIO;
        return nullptr;
    }
    if (auto it = d.cache.upper_bound(ps); it != d.cache.begin()) {
        --it;
        std::shared_ptr<CachedMr> e = it->second;
        if (e->start <= ps && e->start + e->len >= pe) {
            const auto first = static_cast<std::ptrdiff_t>((ps - e->start) / page_size);
            if (std::equal(frames_.begin(), frames_.end(), e->frames.begin() + first)) {
                ++registration_hits_;
                e->last_use = ++use_clock_;
                return e;
            }
            gossip::debug(gossip::Mask::ib, "{}: cached registration of {:#x}+{} is stale", d.name,
                          e->start, e->len);
            d.cache_bytes -= e->len;
            d.cache.erase(it); // ops in flight keep it until they end
        }
    }
    auto e = std::make_shared<CachedMr>();
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the caller's buffer, page-aligned
    e->mr.reset(ibv_reg_mr(d.pd.get(), reinterpret_cast<void *>(ps), pe - ps, remote_access));
    if (!e->mr) {
        error = errno != 0 ? -errno : -ENOMEM;
        gossip::warning(gossip::Mask::ib, "{}: cannot register {} bytes: {}", d.name, pe - ps,
                        errno_text(-error));
        return nullptr;
    }
    ++registrations_;
    e->start = ps;
    e->len = pe - ps;
    // Read after registering: the pages are present and pinned now.
    if (!read_frames(ps, pages, e->frames)) {
        error = -EIO;
        return nullptr;
    }
    e->last_use = ++use_clock_;
    if (auto old = d.cache.find(ps); old != d.cache.end()) {
        d.cache_bytes -= old->second->len;
        d.cache.erase(old);
    }
    d.cache.emplace(ps, e);
    d.cache_bytes += e->len;
    // Least recently used entries go beyond the bounds, unless in use.
    while (d.cache_bytes > cache_max_bytes || d.cache.size() > cache_max_entries) {
        auto victim = d.cache.end();
        for (auto it = d.cache.begin(); it != d.cache.end(); ++it) {
            if (it->second.use_count() == 1 &&
                (victim == d.cache.end() || it->second->last_use < victim->second->last_use))
                victim = it;
        }
        if (victim == d.cache.end())
            break;
        d.cache_bytes -= victim->second->len;
        d.cache.erase(victim);
    }
    return e;
}

// The page frame of each of `pages` pages from start (0: not present).
bool IbMethod::read_frames(std::uintptr_t start, std::size_t pages, std::vector<std::uint64_t> &out)
{
    out.resize(pages);
    const std::size_t bytes = pages * sizeof(std::uint64_t);
    const auto off = static_cast<off_t>(start / page_size * sizeof(std::uint64_t));
    if (::pread(pagemap_.get(), out.data(), bytes, off) != static_cast<ssize_t>(bytes))
        return false;
    constexpr std::uint64_t present = std::uint64_t{1} << 63U;
    constexpr std::uint64_t pfn_mask = (std::uint64_t{1} << 55U) - 1;
    for (std::uint64_t &e : out)
        e = (e & present) != 0 ? (e & pfn_mask) : 0;
    return true;
}

// The cache needs page frames, which /proc/self/pagemap shows only to
// privileged processes (CAP_SYS_ADMIN); others register per transfer.
bool IbMethod::frames_visible()
{
    if (frames_checked_)
        return pagemap_.valid();
    frames_checked_ = true;
    pagemap_ = pvfs::UniqueFd(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
    volatile std::uint64_t probe = 1; // a touched, present page: the stack
    std::vector<std::uint64_t> f;
    const auto addr = reinterpret_cast<std::uintptr_t>(&probe);
    if (!pagemap_.valid() || !read_frames(addr, 1, f) || f[0] == 0) {
        pagemap_.reset();
        gossip::debug(gossip::Mask::ib, "page frames are hidden: no registration cache");
        return false;
    }
    return true;
}

// ------------------------------------------------------------- connections

std::uint32_t IbMethod::new_conn(CmId id)
{
    std::uint32_t c = 0;
    if (!free_conns_.empty()) {
        c = free_conns_.back();
        free_conns_.pop_back();
    } else {
        c = static_cast<std::uint32_t>(conns_.size());
        conns_.push_back(std::make_unique<Conn>());
    }
    Conn &k = *conns_[c];
    const std::uint32_t gen = ++conn_generation_;
    k = Conn{};
    k.gen = gen;
    k.id = std::move(id);
    k.id->context = reinterpret_cast<void *>( // NOLINT(performance-no-int-to-ptr): a key
        (static_cast<std::uintptr_t>(gen) << 32U) | c);
    return c;
}

int IbMethod::connect_peer(Peer &p)
{
    if (p.hostport.empty())
        return -ECONNRESET; // an incoming peer that does not listen: cannot call back
    if (const int rc = open_channel(); rc != 0)
        return rc;
    sockaddr_storage sa{};
    if (const int rc = resolve(p.hostport, sa); rc != 0)
        return rc;
    rdma_cm_id *raw = nullptr;
    if (rdma_create_id(channel_.get(), &raw, nullptr, RDMA_PS_TCP) != 0)
        return -errno;
    const std::uint32_t c = new_conn(CmId(raw));
    Conn &k = *conns_[c];
    k.outgoing = true;
    k.peer = p.addr;
    k.state = ConnState::resolving_addr;
    if (rdma_resolve_addr(k.id.get(), nullptr, reinterpret_cast<sockaddr *>(&sa),
                          resolve_timeout_ms) != 0) {
        const int err = -errno;
        k.id.reset();
        k.state = ConnState::closed;
        free_conns_.push_back(c);
        return err == -ENODEV || err == -EADDRNOTAVAIL ? -EHOSTUNREACH : err;
    }
    p.conns.push_back(c);
    p.tx_conn = c;
    return 0;
}

int IbMethod::create_qp(std::uint32_t c)
{
    Conn &k = *conns_[c];
    Device &d = *k.dev;
    const int need = static_cast<int>(sq_depth + credits_per_conn);
    if (d.cq_used + need > d.cq_size) {
        const int want = std::min(std::max(d.cq_size * 2, d.cq_used + need), d.attr.max_cqe);
        if (want < d.cq_used + need || ibv_resize_cq(d.cq.get(), want) != 0) {
            gossip::error(gossip::Mask::ib, "{}: completion queue full ({} entries)", d.name,
                          d.cq_size);
            return -ENOMEM;
        }
        d.cq_size = want;
    }
    ibv_qp_init_attr a{};
    a.send_cq = d.cq.get();
    a.recv_cq = d.cq.get();
    a.srq = d.srq.get();
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 1;
    a.cap.max_send_wr =
        std::min<std::uint32_t>(sq_depth, static_cast<std::uint32_t>(d.attr.max_qp_wr));
    a.cap.max_recv_wr = d.srq ? 0 : credits_per_conn;
    a.cap.max_send_sge =
        std::min<std::uint32_t>(max_send_sge, static_cast<std::uint32_t>(d.attr.max_sge));
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = wanted_inline;
    if (rdma_create_qp(k.id.get(), d.pd.get(), &a) != 0) {
        a.cap.max_inline_data = 0;
        if (rdma_create_qp(k.id.get(), d.pd.get(), &a) != 0) {
            const int err = -errno;
            gossip::error(gossip::Mask::ib, "{}: cannot create a queue pair: {}", d.name,
                          errno_text(-err));
            return err;
        }
    }
    d.cq_used += need;
    k.qp_num = k.id->qp->qp_num;
    conn_by_qp_[k.qp_num] = c;
    k.sq_free = a.cap.max_send_wr;
    k.sq_size = a.cap.max_send_wr;
    k.max_inline = a.cap.max_inline_data;
    k.max_sge = std::max<std::uint32_t>(1, a.cap.max_send_sge);
    k.rd_depth = std::clamp<std::uint32_t>(static_cast<std::uint32_t>(d.attr.max_qp_init_rd_atom),
                                           1, max_reads);
    // The peer may send as soon as it is connected: its credits are ours.
    if (d.srq) {
        d.srq_target += credits_per_conn;
        refill_srq(d);
        if (d.srq_posted < d.srq_target)
            return -ENOMEM;
    } else {
        for (std::uint16_t n = 0; n < credits_per_conn; ++n) {
            if (!post_recv_buffer(d, c))
                return -ENOMEM;
        }
    }
    // The first frame either way introduces this side.
    HelloBody body{incarnation_, my_url_};
    Frame f;
    f.h.type = Msg::hello;
    f.payload.resize(hello_size(body));
    encode_hello(body, f.payload);
    k.ctl.push_front(std::move(f));
    return 0;
}

void IbMethod::close_conn(std::uint32_t c, int error, std::string_view why)
{
    Conn &k = *conns_[c];
    if (k.state == ConnState::closed)
        return;
    if (!why.empty()) {
        const std::string who = k.peer != no_addr ? core_.url_of(k.peer) : "an unidentified peer";
        if (error == -EPROTO)
            gossip::error(gossip::Mask::ib, "closing connection to {}: {}", who, why);
        else
            gossip::debug(gossip::Mask::ib, "closing connection to {}: {}", who, why);
    }
    // The queue pair goes first: once destroyed, the device touches none of
    // the memory its work requests named, so buffers and ops can be freed.
    const bool had_qp = k.id && k.id->qp != nullptr;
    k.id.reset();
    if (had_qp) {
        conn_by_qp_.erase(k.qp_num);
        k.dev->cq_used -= static_cast<int>(sq_depth + credits_per_conn);
        if (k.dev->srq)
            k.dev->srq_target -= std::min<std::uint32_t>(k.dev->srq_target, credits_per_conn);
    }
    for (std::uint32_t w = 0; w < wrs_.size(); ++w) {
        Wr &r = wrs_[w];
        if (r.kind == WrKind::free || r.conn != c || r.conn_gen != k.gen)
            continue;
        if (r.kind == WrKind::recv && r.dev->srq) {
            recycle_recv(w); // a held buffer of the shared queue
            continue;
        }
        if (r.kind == WrKind::read && r.op != no_index) {
            Op &o = op(r.op);
            if (o.state == OpState::active && o.id == r.op_id)
                opx(r.op).inflight = 0;
        }
        if (r.buf != no_index)
            (r.kind == WrKind::send ? r.dev->send : r.dev->recv).give(r.buf);
        free_wr(w);
    }
    k.held.clear();
    k.ctl.clear();
    k.data.clear();
    k.readq.clear();
    k.state = ConnState::closed;
    free_conns_.push_back(c);
    if (Peer *p = peer_ptr(k.peer)) {
        std::erase(p->conns, c);
        if (p->tx_conn == c)
            p->tx_conn = p->conns.empty() ? no_index : p->conns.front();
        // Rendezvous offers through this connection died with it.
        std::erase_if(p->early, [&](const Early &e) { return e.type == Msg::rts && e.conn == c; });
        fail_peer_ops(*p, error);
    }
}

void IbMethod::drop_peer(Addr addr, int error)
{
    Peer *p = peer_ptr(addr);
    if (p == nullptr)
        return;
    const std::vector<std::uint32_t> conns = p->conns;
    for (const std::uint32_t c : conns)
        close_conn(c, error, "dropped by request");
    fail_peer_ops(*p, error);
}

void IbMethod::handle_cm_events()
{
    rdma_cm_event *ev = nullptr;
    while (rdma_get_cm_event(channel_.get(), &ev) == 0) {
        const rdma_cm_event_type type = ev->event;
        rdma_cm_id *id = ev->id;
        const int status = ev->status;
        // rdma_cm_event's param is a union; conn is the member of these events.
        const rdma_conn_param &cp =
            ev->param.conn; // NOLINT(cppcoreguidelines-pro-type-union-access)
        const auto *pd = static_cast<const std::byte *>(cp.private_data);
        const std::vector<std::byte> pdata(pd, pd == nullptr ? pd : pd + cp.private_data_len);
        const std::uint8_t initiator = cp.initiator_depth;
        const std::uint8_t responder = cp.responder_resources;
        const bool on_listener = ev->listen_id != nullptr;
        // Acked before acting: destroying an id waits for its events' acks.
        rdma_ack_cm_event(ev);
        gossip::debug(gossip::Mask::ib, "cm event {} (status {})", rdma_event_str(type), status);
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST && on_listener) {
            on_connect_request(id, pdata, initiator, responder);
            continue;
        }
        const auto key = reinterpret_cast<std::uintptr_t>(id->context);
        const auto c = static_cast<std::uint32_t>(key & 0xffffffffU);
        const auto gen = static_cast<std::uint32_t>(key >> 32U);
        if (key == 0 || c >= conns_.size() || conns_[c]->gen != gen ||
            conns_[c]->state == ConnState::closed)
            continue; // a listener's event, or one for a connection already gone
        on_cm_event(c, type, status, pdata);
    }
}

void IbMethod::on_cm_event(std::uint32_t c, rdma_cm_event_type type, int status,
                           std::span<const std::byte> pdata)
{
    Conn &k = *conns_[c];
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: {
        int err = 0;
        k.dev = device_for(k.id->verbs, err);
        if (k.dev == nullptr) {
            close_conn(c, err, "no device");
            return;
        }
        k.state = ConnState::resolving_route;
        if (rdma_resolve_route(k.id.get(), resolve_timeout_ms) != 0)
            close_conn(c, -errno, "route resolution failed");
        return;
    }
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        if (const int rc = create_qp(c); rc != 0) {
            close_conn(c, rc, "cannot set up the queue pair");
            return;
        }
        std::uint8_t timeout = ack_timeout;
        rdma_set_option(k.id.get(), RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
                        sizeof timeout);
        std::array<std::byte, connect_data_size> mine{};
        encode_connect({credits_per_conn, static_cast<std::uint32_t>(k.dev->recv.buf_size())},
                       mine);
        rdma_conn_param param{};
        param.private_data = mine.data();
        param.private_data_len = static_cast<std::uint8_t>(mine.size());
        param.initiator_depth = static_cast<std::uint8_t>(
            std::min<int>(k.dev->attr.max_qp_init_rd_atom, static_cast<int>(max_reads)));
        param.responder_resources = static_cast<std::uint8_t>(
            std::min<int>(k.dev->attr.max_qp_rd_atom, static_cast<int>(max_reads)));
        param.retry_count = retry_count;
        param.rnr_retry_count = 7; // credits keep receivers ready; never give up on RNR
        k.state = ConnState::connecting;
        if (rdma_connect(k.id.get(), &param) != 0)
            close_conn(c, -errno, "connect failed");
        return;
    }
    case RDMA_CM_EVENT_ESTABLISHED: {
        if (k.outgoing) {
            ConnectData cd;
            if (const char *err = decode_connect(pdata, cd)) {
                close_conn(c, -EPROTO, err);
                return;
            }
            k.credits = cd.credits;
            k.remote_buf = cd.buf_size;
        }
        on_up(c);
        return;
    }
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
        close_conn(c, -EHOSTUNREACH, "no route to the peer");
        return;
    case RDMA_CM_EVENT_UNREACHABLE:
        close_conn(c, -EHOSTUNREACH, "peer unreachable");
        return;
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
        // A peer that goes away before it saw the connection established
        // rejects it even though this side already sent on it: then it is
        // a reset, not a refusal.
        close_conn(c, k.state == ConnState::up ? -ECONNRESET : -ECONNREFUSED,
                   (type == RDMA_CM_EVENT_REJECTED ? "connection rejected (status "
                                                   : "connection failed (status ") +
                       std::to_string(status) + ")");
        return;
    case RDMA_CM_EVENT_DISCONNECTED:
        // What the peer sent before it left is in the CQ already (its
        // sends completed when they were acknowledged): take it first.
        if (k.dev != nullptr)
            poll_cq(*k.dev);
        if (k.state != ConnState::closed)
            close_conn(c, -ECONNRESET, "peer disconnected");
        return;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        close_conn(c, -ENODEV, "device removed");
        return;
    case RDMA_CM_EVENT_ADDR_CHANGE:
        close_conn(c, -ENETDOWN, "address changed");
        return;
    default:
        return;
    }
}

void IbMethod::on_connect_request(rdma_cm_id *id, std::span<const std::byte> pdata,
                                  std::uint8_t initiator, std::uint8_t responder)
{
    ConnectData cd;
    if (const char *err = decode_connect(pdata, cd)) {
        gossip::warning(gossip::Mask::ib, "refusing a connection: {}", err);
        rdma_reject(id, nullptr, 0);
        rdma_destroy_id(id);
        return;
    }
    const std::uint32_t c = new_conn(CmId(id));
    Conn &k = *conns_[c];
    k.state = ConnState::accepting;
    k.credits = cd.credits;
    k.remote_buf = cd.buf_size;
    int err = 0;
    k.dev = device_for(id->verbs, err);
    if (k.dev == nullptr || (err = create_qp(c)) != 0) {
        rdma_reject(id, nullptr, 0);
        close_conn(c, err, "cannot accept");
        return;
    }
    std::uint8_t timeout = ack_timeout;
    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout);
    std::array<std::byte, connect_data_size> mine{};
    encode_connect({credits_per_conn, static_cast<std::uint32_t>(k.dev->recv.buf_size())}, mine);
    rdma_conn_param param{};
    param.private_data = mine.data();
    param.private_data_len = static_cast<std::uint8_t>(mine.size());
    param.responder_resources = static_cast<std::uint8_t>(std::min<int>(
        {k.dev->attr.max_qp_rd_atom, static_cast<int>(max_reads), std::max<int>(initiator, 1)}));
    param.initiator_depth = static_cast<std::uint8_t>(
        std::min<int>({k.dev->attr.max_qp_init_rd_atom, static_cast<int>(max_reads),
                       std::max<int>(responder, 1)}));
    param.retry_count = retry_count;
    param.rnr_retry_count = 7;
    k.rd_depth = std::max<std::uint32_t>(1, param.initiator_depth);
    if (rdma_accept(id, &param) != 0)
        close_conn(c, -errno, "accept failed");
}

void IbMethod::on_up(std::uint32_t c)
{
    Conn &k = *conns_[c];
    k.state = ConnState::up;
    mark_pending(c);
    Peer *p = peer_ptr(k.peer);
    if (p == nullptr || !ready_to_send(k))
        return;
    p->heard = Clock::now();
    if (p->tx_conn != c)
        return;
    while (!p->waiting.empty()) {
        const std::uint32_t i = p->waiting.front();
        p->waiting.remove(core_.ops, i);
        op(i).mstate = st_none;
        if (op(i).kind == OpKind::get || op(i).kind == OpKind::put)
            start_rdma(i, *p);
        else
            start_send(i, *p);
        if (k.state != ConnState::up)
            return;
    }
}

// ----------------------------------------------------------- work requests

std::uint32_t IbMethod::new_wr(WrKind kind, Device *dev)
{
    std::uint32_t w = 0;
    if (!free_wrs_.empty()) {
        w = free_wrs_.back();
        free_wrs_.pop_back();
    } else {
        w = static_cast<std::uint32_t>(wrs_.size());
        wrs_.emplace_back();
    }
    Wr &r = wrs_[w];
    const std::uint32_t gen = r.gen + 1;
    r = Wr{};
    r.gen = gen;
    r.kind = kind;
    r.dev = dev;
    return w;
}

void IbMethod::free_wr(std::uint32_t w)
{
    wrs_[w].kind = WrKind::free;
    ++wrs_[w].gen; // a late completion naming it is recognised as stale
    free_wrs_.push_back(w);
}

// Posts one receive buffer: to the shared queue (c == no_index) or to c's.
bool IbMethod::post_recv_buffer(Device &d, std::uint32_t c)
{
    std::uint32_t b = 0;
    if (!d.recv.take(d.pd.get(), max_srq_buffers, b))
        return false;
    const std::uint32_t w = new_wr(WrKind::recv, &d);
    Wr &r = wrs_[w];
    r.buf = b;
    if (c != no_index && !d.srq) {
        r.conn = c;
        r.conn_gen = conns_[c]->gen;
    }
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(d.recv.addr(b));
    sge.length = static_cast<std::uint32_t>(d.recv.buf_size());
    sge.lkey = d.recv.lkey(b);
    ibv_recv_wr wr{};
    wr.wr_id = (static_cast<std::uint64_t>(r.gen) << 32U) | w;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr *bad = nullptr;
    const int rc = d.srq ? ibv_post_srq_recv(d.srq.get(), &wr, &bad)
                         : ibv_post_recv(conns_[c]->id->qp, &wr, &bad);
    if (rc != 0) {
        d.recv.give(b);
        free_wr(w);
        return false;
    }
    if (d.srq)
        ++d.srq_posted;
    return true;
}

void IbMethod::refill_srq(Device &d)
{
    while (d.srq_posted < d.srq_target) {
        if (!post_recv_buffer(d, no_index))
            break;
    }
}

// A consumed receive buffer goes back where it came from.
void IbMethod::recycle_recv(std::uint32_t w)
{
    Wr &r = wrs_[w];
    Device &d = *r.dev;
    const std::uint32_t c = r.conn;
    const std::uint32_t b = r.buf;
    free_wr(w);
    d.recv.give(b);
    if (d.srq) {
        refill_srq(d);
        return;
    }
    if (c != no_index && conns_[c]->state != ConnState::closed && conns_[c]->id &&
        conns_[c]->id->qp != nullptr)
        post_recv_buffer(d, c);
}

void IbMethod::poll_cq(Device &d)
{
    // Filled by ibv_poll_cq.  Not zeroed: 1.5 KiB cleared on every poll
    // (a spin calls this hundreds of times per message) cost more than
    // the poll itself.
    std::array<ibv_wc, max_wc> wc; // NOLINT(cppcoreguidelines-pro-type-member-init)
    for (;;) {
        const int n = ibv_poll_cq(d.cq.get(), max_wc, wc.data());
        if (n <= 0)
            break;
        completions_ += static_cast<std::uint64_t>(n);
        for (int e = 0; e < n; ++e)
            on_wc(wc[static_cast<std::size_t>(e)]);
        if (n < max_wc)
            break;
    }
}

void IbMethod::on_wc(const ibv_wc &wc)
{
    const auto w = static_cast<std::uint32_t>(wc.wr_id & 0xffffffffU);
    const auto gen = static_cast<std::uint32_t>(wc.wr_id >> 32U);
    if (w >= wrs_.size() || wrs_[w].gen != gen || wrs_[w].kind == WrKind::free)
        return; // its connection closed meanwhile
    Wr &r = wrs_[w];
    if (r.kind == WrKind::recv) {
        on_recv(w, wc);
        return;
    }
    const std::uint32_t c = r.conn;
    Conn &k = *conns_[c];
    if (k.gen != r.conn_gen || k.state == ConnState::closed) {
        if (r.buf != no_index)
            r.dev->send.give(r.buf);
        free_wr(w);
        return;
    }
    ++k.sq_free;
    if (wc.status != IBV_WC_SUCCESS) {
        const int err = wc_error(wc.status);
        close_conn(c, err,
                   std::string(r.kind == WrKind::read ? "RDMA READ" : "send") +
                       " failed: " + ibv_wc_status_str(wc.status));
        return;
    }
    if (r.kind == WrKind::send) {
        if (r.buf != no_index)
            r.dev->send.give(r.buf);
        free_wr(w);
    } else {
        --k.reads;
        read_done(w);
    }
    mark_pending(c);
}

void IbMethod::on_recv(std::uint32_t w, const ibv_wc &wc)
{
    Wr &r = wrs_[w];
    Device &d = *r.dev;
    if (d.srq)
        --d.srq_posted;
    std::uint32_t c = r.conn;
    if (d.srq) {
        const auto it = conn_by_qp_.find(wc.qp_num);
        c = it == conn_by_qp_.end() ? no_index : it->second;
    }
    if (c == no_index || conns_[c]->state == ConnState::closed ||
        (!d.srq && conns_[c]->gen != r.conn_gen)) {
        r.conn = no_index;
        recycle_recv(w);
        return;
    }
    if (wc.status != IBV_WC_SUCCESS) {
        r.conn = no_index;
        recycle_recv(w);
        if (wc.status != IBV_WC_WR_FLUSH_ERR)
            close_conn(c, wc_error(wc.status),
                       std::string("receive failed: ") + ibv_wc_status_str(wc.status));
        return;
    }
    Conn &k = *conns_[c];
    r.conn = c;
    r.conn_gen = k.gen;
    r.len = wc.byte_len;
    Header h;
    if (const char *err = decode({d.recv.addr(r.buf), r.len}, h)) {
        close_conn(c, -EPROTO, err);
        return;
    }
    k.credits += h.credits;
    if (Peer *p = peer_ptr(k.peer))
        p->heard = Clock::now();
    // Frames behind a held one wait their turn: messages stay in order.
    // Control frames do not carry messages and never wait.
    const bool ordered = h.type == Msg::eager || h.type == Msg::unexpected || h.type == Msg::rts ||
                         h.type == Msg::cancel;
    Verdict v = Verdict::hold;
    if (!ordered || k.held.empty())
        v = deliver(c, w);
    if (v == Verdict::closed)
        return;
    if (v == Verdict::hold) {
        k.held.push_back(w);
        return;
    }
    recycle_recv(w);
    ++k.owed;
    mark_pending(c);
}

// --------------------------------------------------------------- sending

void IbMethod::mark_pending(std::uint32_t c)
{
    Conn &k = *conns_[c];
    if (!k.pending) {
        k.pending = true;
        pending_.push_back(c);
    }
}

void IbMethod::queue_ctl(std::uint32_t c, const Header &h)
{
    Frame f;
    f.h = h;
    conns_[c]->ctl.push_back(std::move(f));
    mark_pending(c);
}

void IbMethod::queue_ctl(Peer &p, const Header &h)
{
    if (p.tx_conn == no_index && connect_peer(p) != 0)
        return; // nobody to tell; the peer's own deadline ends its op
    queue_ctl(p.tx_conn, h);
}

bool IbMethod::post_frame(std::uint32_t c, Frame &f)
{
    Conn &k = *conns_[c];
    Device &d = *k.dev;
    const std::size_t payload = f.op != no_index ? op(f.op).total : f.payload.size();
    const std::size_t len = header_size + payload;
    if (len > k.remote_buf) {
        close_conn(c, -EPROTO, "frame larger than the peer's buffers");
        return false;
    }
    f.h.credits = static_cast<std::uint16_t>(std::min<std::uint32_t>(k.owed, 0xffff));
    const auto fill = [&](std::byte *dst) {
        encode(f.h, std::span<std::byte, header_size>(dst, header_size));
        dst += header_size;
        if (f.op != no_index) {
            for (const MutableBuffer &b : op(f.op).bufs) {
                std::memcpy(dst, b.data, b.size);
                dst += b.size;
            }
        } else if (!f.payload.empty()) {
            std::memcpy(dst, f.payload.data(), f.payload.size());
        }
    };
    const std::uint32_t w = new_wr(WrKind::send, &d);
    Wr &r = wrs_[w];
    r.conn = c;
    r.conn_gen = k.gen;
    ibv_sge sge{};
    ibv_send_wr wr{};
    std::array<std::byte, wanted_inline> inline_buf{};
    if (len <= k.max_inline && len <= inline_buf.size()) {
        fill(inline_buf.data());
        sge.addr = reinterpret_cast<std::uintptr_t>(inline_buf.data());
        wr.send_flags = IBV_SEND_INLINE;
    } else {
        std::uint32_t b = 0;
        if (!d.send.take(d.pd.get(), max_send_buffers, b)) {
            free_wr(w);
            return false; // all in flight: retried when a send completes
        }
        r.buf = b;
        fill(d.send.addr(b));
        sge.addr = reinterpret_cast<std::uintptr_t>(d.send.addr(b));
        sge.lkey = d.send.lkey(b);
    }
    sge.length = static_cast<std::uint32_t>(len);
    wr.wr_id = (static_cast<std::uint64_t>(r.gen) << 32U) | w;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags |= IBV_SEND_SIGNALED;
    ibv_send_wr *bad = nullptr;
    if (const int rc = ibv_post_send(k.id->qp, &wr, &bad); rc != 0) {
        if (r.buf != no_index)
            d.send.give(r.buf);
        free_wr(w);
        close_conn(c, -rc, "cannot post a send: " + errno_text(rc));
        return false;
    }
    k.owed -= f.h.credits;
    --k.credits;
    --k.sq_free;
    return true;
}

// Posts what the connection's credits and send queue allow.
bool IbMethod::flush(std::uint32_t c)
{
    Conn &k = *conns_[c];
    if (k.state != ConnState::up)
        return true;
    while (k.sq_free > 0) {
        if (!k.ctl.empty()) {
            // The hello goes first even before the peer's; other control
            // frames need a credit beyond the last, which only a credit
            // update may take (it is what unblocks the peer).
            const Msg t = k.ctl.front().h.type;
            const std::uint32_t need = t == Msg::credit ? 1 : 2;
            if (k.credits < need && !(t == Msg::hello && k.credits >= 1))
                break;
            Frame f = std::move(k.ctl.front());
            k.ctl.pop_front();
            if (!post_frame(c, f)) {
                if (k.state == ConnState::closed)
                    return false;
                k.ctl.push_front(std::move(f));
                break;
            }
            continue;
        }
        if (k.data.empty() || !ready_to_send(k) || k.credits < control_reserve + 1)
            break;
        Frame &f = k.data.front();
        if (f.op != no_index && (op(f.op).state != OpState::active || op(f.op).id != f.op_id)) {
            k.data.pop_front(); // cancelled meanwhile
            continue;
        }
        if (!post_frame(c, f)) {
            if (k.state == ConnState::closed)
                return false;
            break;
        }
        const std::uint32_t i = f.op;
        k.data.pop_front();
        // An eager or unexpected message is copied out: the send is done.
        if (i != no_index)
            finish(i, 0, op(i).total);
    }
    if (k.state != ConnState::up)
        return false;
    pump_reads(c);
    // Credits go back with the next frame; alone only when many are owed
    // or the peer may be down to its last few.
    const auto held = static_cast<std::uint32_t>(k.held.size());
    if (k.owed > 0 && k.ctl.empty() && k.data.empty() && k.sq_free > 0 && k.credits >= 1 &&
        (k.owed >= credits_per_conn / 2 ||
         k.owed + held + control_reserve + 1 >= credits_per_conn)) {
        Frame f;
        f.h.type = Msg::credit;
        if (!post_frame(c, f))
            return k.state != ConnState::closed;
    }
    return true;
}

int IbMethod::register_op(std::uint32_t i, Device &d, int access)
{
    OpX &x = opx(i);
    x.mrs.clear();
    x.keys.clear();
    for (const MutableBuffer &b : op(i).bufs) {
        if (b.size == 0) {
            x.keys.push_back(0);
            continue;
        }
        if (ibv_mr *mr =
                registry_->find(reinterpret_cast<std::uintptr_t>(b.data), b.size, d.pd.get())) {
            x.keys.push_back((access & IBV_ACCESS_REMOTE_READ) != 0 ? mr->rkey : mr->lkey);
            continue;
        }
        if (frames_visible()) {
            int error = 0;
            auto e = cached_mr(d, reinterpret_cast<std::uintptr_t>(b.data), b.size, error);
            if (!e) {
                x.mrs.clear();
                x.cached.clear();
                return error;
            }
            x.keys.push_back((access & IBV_ACCESS_REMOTE_READ) != 0 ? e->mr->rkey : e->mr->lkey);
            x.cached.push_back(std::move(e));
            continue;
        }
        ++registrations_;
        Mr mr(ibv_reg_mr(d.pd.get(), b.data, b.size, access));
        if (!mr) {
            const int err = errno != 0 ? errno : ENOMEM;
            gossip::warning(gossip::Mask::ib, "{}: cannot register {} bytes: {}", d.name, b.size,
                            errno_text(err));
            x.mrs.clear();
            return -err;
        }
        x.keys.push_back((access & IBV_ACCESS_REMOTE_READ) != 0 ? mr->rkey : mr->lkey);
        x.mrs.push_back(std::move(mr));
    }
    return 0;
}

bool IbMethod::start_send(std::uint32_t i, Peer &p)
{
    Op &o = op(i);
    const std::uint32_t c = p.tx_conn;
    Conn &k = *conns_[c];
    o.conn = c;
    const std::size_t room = k.remote_buf - header_size;
    Frame f;
    f.h.tag = o.tag;
    f.h.size = o.total;
    if (o.kind == OpKind::send_unexpected || o.total <= std::min(core_.limits.eager, room)) {
        if (o.total > room) {
            finish(i, -EMSGSIZE, 0);
            return false;
        }
        f.h.type = o.kind == OpKind::send_unexpected ? Msg::unexpected : Msg::eager;
        f.op = i;
        f.op_id = o.id;
        o.mstate = st_send_queued;
    } else {
        if (const int rc = register_op(i, *k.dev, IBV_ACCESS_REMOTE_READ); rc != 0) {
            finish(i, rc, 0);
            return false;
        }
        std::vector<Segment> segs;
        const OpX &x = opx(i);
        for (std::size_t b = 0; b < o.bufs.size(); ++b) {
            auto addr = reinterpret_cast<std::uintptr_t>(o.bufs[b].data);
            std::size_t left = o.bufs[b].size;
            while (left > 0) {
                const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(left, 1U << 30U));
                segs.push_back({addr, x.keys[b], n});
                addr += n;
                left -= n;
            }
        }
        if (rts_payload_size(segs.size()) > room) {
            gossip::warning(gossip::Mask::ib, "a list send of {} pieces does not fit one RTS",
                            segs.size());
            finish(i, -EINVAL, 0);
            return false;
        }
        f.h.type = Msg::rts;
        f.h.cookie = o.id;
        f.payload.resize(rts_payload_size(segs.size()));
        encode_rts(segs, f.payload);
        o.mstate = st_send_rts;
    }
    const bool idle = k.data.empty();
    k.data.push_back(std::move(f));
    if (idle)
        flush(c);
    else
        mark_pending(c);
    return op(i).state == OpState::done;
}

void IbMethod::pump_reads(std::uint32_t c)
{
    Conn &k = *conns_[c];
    while (!k.readq.empty() && k.sq_free > 0 && k.reads < k.rd_depth) {
        const std::uint32_t i = k.readq.front();
        Op &o = op(i);
        OpX &x = opx(i);
        if (o.state != OpState::active || (o.mstate != st_recv_read && o.mstate != st_rdma) ||
            o.conn != c || x.cancelling || x.posted >= x.size) {
            k.readq.pop_front();
            continue;
        }
        if (!post_read(c, i))
            return;
        if (x.posted >= x.size)
            k.readq.pop_front();
    }
}

// One READ of the next piece of the message, at most read_chunk bytes from
// one remote segment into at most max_sge local pieces.
bool IbMethod::post_read(std::uint32_t c, std::uint32_t i)
{
    Conn &k = *conns_[c];
    Op &o = op(i);
    OpX &x = opx(i);
    std::size_t off = x.posted;
    std::size_t seg = 0;
    while (off >= x.remote[seg].len) {
        off -= x.remote[seg].len;
        ++seg;
    }
    auto want = std::min<std::size_t>({x.remote[seg].len - off, read_chunk, x.size - x.posted});
    std::array<ibv_sge, max_send_sge> sges{};
    std::uint32_t nsge = 0;
    std::size_t got = 0;
    std::size_t skip = x.posted;
    for (std::size_t b = 0; b < o.bufs.size() && got < want && nsge < k.max_sge; ++b) {
        const MutableBuffer &mb = o.bufs[b];
        if (skip >= mb.size) {
            skip -= mb.size;
            continue;
        }
        const std::size_t n = std::min(mb.size - skip, want - got);
        sges[nsge++] = ibv_sge{reinterpret_cast<std::uintptr_t>(mb.data) + skip,
                               static_cast<std::uint32_t>(n), x.keys[b]};
        got += n;
        skip = 0;
    }
    want = got;
    const std::uint32_t w = new_wr(WrKind::read, k.dev);
    Wr &r = wrs_[w];
    r.conn = c;
    r.conn_gen = k.gen;
    r.op = i;
    r.op_id = o.id;
    r.len = static_cast<std::uint32_t>(want);
    ibv_send_wr wr{};
    wr.wr_id = (static_cast<std::uint64_t>(r.gen) << 32U) | w;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(nsge);
    wr.opcode = o.kind == OpKind::put ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    // ibv_send_wr's wr is a union; rdma is the member of READ and WRITE.
    auto &rdma = wr.wr.rdma; // NOLINT(cppcoreguidelines-pro-type-union-access)
    rdma.remote_addr = x.remote[seg].addr + off;
    rdma.rkey = x.remote[seg].rkey;
    ibv_send_wr *bad = nullptr;
    if (const int rc = ibv_post_send(k.id->qp, &wr, &bad); rc != 0) {
        free_wr(w);
        close_conn(c, -rc, "cannot post an RDMA READ: " + errno_text(rc));
        return false;
    }
    ++k.reads;
    --k.sq_free;
    ++x.inflight;
    x.posted += want;
    return true;
}

void IbMethod::read_done(std::uint32_t w)
{
    const Wr r = wrs_[w];
    free_wr(w);
    Op &o = op(r.op);
    if (o.state != OpState::active || o.id != r.op_id)
        return;
    OpX &x = opx(r.op);
    --x.inflight;
    o.done_bytes += r.len;
    core_.touch(r.op);
    if (o.mstate == st_rdma) {
        // One-sided: nobody to tell; the op ends when its last piece did.
        if (x.inflight == 0 && (x.cancelling || o.done_bytes >= x.size))
            finish(r.op, x.cancelling ? x.cancel_error : 0, o.done_bytes);
        return;
    }
    if (x.cancelling) {
        if (x.inflight == 0) {
            Header h;
            h.type = Msg::nack;
            h.cookie = o.remote_cookie;
            h.cookie2 = static_cast<std::uint64_t>(-x.cancel_error);
            queue_ctl(r.conn, h);
            finish(r.op, x.cancel_error, o.done_bytes);
        }
        return;
    }
    if (o.done_bytes >= x.size && x.inflight == 0) {
        Header h;
        h.type = Msg::fin;
        h.cookie = o.remote_cookie;
        queue_ctl(r.conn, h);
        finish(r.op, 0, x.size);
    }
}

// -------------------------------------------------------------- receiving

void IbMethod::copy_into_op(std::uint32_t i, const std::byte *src, std::size_t n)
{
    for (const MutableBuffer &b : op(i).bufs) {
        if (n == 0)
            break;
        const std::size_t take = std::min(b.size, n);
        std::memcpy(b.data, src, take);
        src += take;
        n -= take;
    }
}

bool IbMethod::match_recv(Peer &p, Tag tag, std::uint32_t &out)
{
    OpList &bucket = buckets_[bucket_of(p.addr, tag)];
    for (std::uint32_t i = bucket.front(); i != no_index; i = bucket.next(core_.ops, i)) {
        if (op(i).peer == p.addr && op(i).tag == tag) {
            bucket.remove(core_.ops, i);
            op(i).mstate = st_none;
            out = i;
            return true;
        }
    }
    return false;
}

IbMethod::Verdict IbMethod::on_hello(std::uint32_t c, std::span<const std::byte> payload)
{
    Conn &k = *conns_[c];
    HelloBody body;
    if (const char *err = decode_hello(payload, body)) {
        close_conn(c, -EPROTO, err);
        return Verdict::closed;
    }
    k.hello_seen = true;
    if (k.peer == no_addr) {
        std::string url = body.url;
        if (url.empty()) {
            url = net::sockaddr_url("ib", rdma_get_peer_addr(k.id.get()));
        } else if (url.rfind("ib://", 0) != 0) {
            close_conn(c, -EPROTO, "hello with a non-ib url");
            return Verdict::closed;
        }
        const Addr a = core_.peer_for_url(*this, url);
        Peer &np = peer_of(a);
        if (np.hostport.empty() && !body.url.empty())
            np.hostport = url.substr(5);
        k.peer = a;
        np.conns.push_back(c);
        if (np.tx_conn == no_index)
            np.tx_conn = c;
    }
    Peer &p = peer_of(k.peer);
    p.incarnation = body.incarnation;
    p.heard = Clock::now();
    if (k.state == ConnState::up)
        on_up(c);
    return Verdict::consumed;
}

IbMethod::Verdict IbMethod::deliver(std::uint32_t c, std::uint32_t w)
{
    Conn &k = *conns_[c];
    const Wr &r = wrs_[w];
    const std::span<const std::byte> msg(r.dev->recv.addr(r.buf), r.len);
    Header h;
    decode(msg, h); // validated on arrival
    const std::span<const std::byte> payload = msg.subspan(header_size);
    if (h.type == Msg::hello) {
        if (k.hello_seen) {
            close_conn(c, -EPROTO, "second hello");
            return Verdict::closed;
        }
        return on_hello(c, payload);
    }
    if (!k.hello_seen || k.peer == no_addr) {
        close_conn(c, -EPROTO, "message before hello");
        return Verdict::closed;
    }
    Peer &p = peer_of(k.peer);
    switch (h.type) {
    case Msg::hello:
        return Verdict::closed; // handled above
    case Msg::eager: {
        std::uint32_t i = no_index;
        if (match_recv(p, h.tag, i)) {
            Op &o = op(i);
            if (h.size > o.total) {
                finish(i, -EMSGSIZE, 0);
                return Verdict::consumed;
            }
            copy_into_op(i, payload.data(), h.size);
            finish(i, 0, h.size);
            return Verdict::consumed;
        }
        if (p.early_bytes + h.size > early_peer_bytes && p.early_bytes > 0)
            return Verdict::hold;
        Early e;
        e.type = Msg::eager;
        e.tag = h.tag;
        e.size = h.size;
        e.data.assign(payload.begin(), payload.end());
        p.early_bytes += h.size;
        p.early.push_back(std::move(e));
        return Verdict::consumed;
    }
    case Msg::unexpected: {
        if (h.size > core_.limits.unexpected) {
            close_conn(c, -EPROTO, "unexpected message above the limit");
            return Verdict::closed;
        }
        const std::size_t out = core_.unexpected_pool->outstanding(p.addr);
        if (out + h.size > core_.limits.unexpected_peer_bytes && out > 0)
            return Verdict::hold;
        std::vector<std::byte> buf = core_.unexpected_pool->take(h.size);
        std::memcpy(buf.data(), payload.data(), h.size);
        core_.deliver_unexpected(
            core_.unexpected_pool->make(p.addr, h.tag, std::move(buf), h.size));
        return Verdict::consumed;
    }
    case Msg::rts: {
        std::vector<Segment> segs;
        if (const char *err = decode_rts(payload, h.size, segs)) {
            close_conn(c, -EPROTO, err);
            return Verdict::closed;
        }
        std::uint32_t i = no_index;
        if (match_recv(p, h.tag, i)) {
            match_rts(i, c, h.cookie, h.size, std::move(segs));
            return Verdict::consumed;
        }
        Early e;
        e.type = Msg::rts;
        e.tag = h.tag;
        e.size = h.size;
        e.cookie = h.cookie;
        e.segs = std::move(segs);
        e.conn = c;
        e.conn_gen = k.gen;
        p.early.push_back(std::move(e));
        return Verdict::consumed;
    }
    case Msg::fin:
    case Msg::nack: {
        Op *o = core_.find(h.cookie);
        if (o == nullptr || o->state != OpState::active || o->peer != p.addr ||
            o->mstate != st_send_rts)
            return Verdict::consumed; // cancelled and ended meanwhile
        const std::uint32_t i = core_.index_of(h.cookie);
        const OpX &x = opx(i);
        int err = 0;
        if (x.cancelling)
            err = x.cancel_error;
        else if (h.type == Msg::nack)
            err = -static_cast<int>(std::clamp<std::uint64_t>(h.cookie2, 1, 4095));
        finish(i, err, err == 0 ? o->total : 0);
        return Verdict::consumed;
    }
    case Msg::cancel:
        on_cancel(c, p, h.cookie);
        return Verdict::consumed;
    case Msg::ping: {
        Header pong;
        pong.type = Msg::pong;
        queue_ctl(c, pong);
        return Verdict::consumed;
    }
    case Msg::pong:
    case Msg::credit:
        return Verdict::consumed;
    }
    close_conn(c, -EPROTO, "unknown message");
    return Verdict::closed;
}

void IbMethod::match_rts(std::uint32_t i, std::uint32_t c, std::uint64_t cookie, std::uint64_t size,
                         std::vector<Segment> segs)
{
    Op &o = op(i);
    o.conn = c;
    o.remote_cookie = cookie;
    core_.touch(i);
    Header h;
    h.type = Msg::nack;
    h.cookie = cookie;
    if (size > o.total) {
        h.cookie2 = EMSGSIZE;
        queue_ctl(c, h);
        finish(i, -EMSGSIZE, 0);
        return;
    }
    if (const int rc = register_op(i, *conns_[c]->dev, IBV_ACCESS_LOCAL_WRITE); rc != 0) {
        h.cookie2 = static_cast<std::uint64_t>(-rc);
        queue_ctl(c, h);
        finish(i, rc, 0);
        return;
    }
    OpX &x = opx(i);
    x.remote = std::move(segs);
    x.size = size;
    x.posted = 0;
    x.inflight = 0;
    x.cancelling = false;
    o.actual = size;
    o.mstate = st_recv_read;
    conns_[c]->readq.push_back(i);
    mark_pending(c);
}

void IbMethod::on_cancel(std::uint32_t c, Peer &p, std::uint64_t cookie)
{
    Header nack;
    nack.type = Msg::nack;
    nack.cookie = cookie;
    nack.cookie2 = ECANCELED;
    for (auto it = p.early.begin(); it != p.early.end(); ++it) {
        if (it->type == Msg::rts && it->cookie == cookie) {
            p.early.erase(it);
            queue_ctl(c, nack);
            return;
        }
    }
    for (std::uint32_t i = p.ops.front(); i != no_index; i = p.ops.next(core_.ops, i)) {
        Op &o = op(i);
        if (o.kind != OpKind::recv || o.mstate != st_recv_read || o.remote_cookie != cookie)
            continue;
        OpX &x = opx(i);
        if (x.inflight > 0) {
            x.cancelling = true; // the NACK goes when the READs are back
            x.cancel_error = -ECANCELED;
            return;
        }
        queue_ctl(c, nack);
        finish(i, -ECANCELED, o.done_bytes);
        return;
    }
    // Already finished (its FIN went first) or never seen: the sender
    // ignores a NACK for an op it no longer has.
    queue_ctl(c, nack);
}

// Frames held for lack of a receive or of budget, in arrival order.
void IbMethod::resume_held(Peer &p)
{
    const std::vector<std::uint32_t> conns = p.conns;
    for (const std::uint32_t c : conns) {
        Conn &k = *conns_[c];
        while (k.state != ConnState::closed && !k.held.empty()) {
            const std::uint32_t w = k.held.front();
            const Verdict v = deliver(c, w);
            if (v == Verdict::closed)
                break;
            if (v == Verdict::hold)
                break;
            k.held.pop_front();
            recycle_recv(w);
            ++k.owed;
            mark_pending(c);
        }
    }
}

void IbMethod::unexpected_released(Addr addr)
{
    if (Peer *p = peer_ptr(addr))
        resume_held(*p);
}

// ------------------------------------------------------------------- ops

void IbMethod::unlink(std::uint32_t i)
{
    Op &o = op(i);
    Peer *p = peer_ptr(o.peer);
    switch (o.mstate) {
    case st_recv_posted:
        buckets_[bucket_of(o.peer, o.tag)].remove(core_.ops, i);
        break;
    case st_send_wait:
        if (p != nullptr)
            p->waiting.remove(core_.ops, i);
        break;
    default:
        break;
    }
    if (p != nullptr && o.in_peer_list) {
        p->ops.remove(core_.ops, i);
        o.in_peer_list = false;
    }
    o.mstate = st_none;
    if (i < opx_.size()) {
        OpX &x = opx_[i];
        x.mrs.clear();
        x.cached.clear();
        x.keys.clear();
        x.remote.clear();
        x.inflight = 0;
        x.cancelling = false;
    }
}

void IbMethod::finish(std::uint32_t i, int error, std::size_t actual)
{
    if (op(i).state != OpState::active)
        return;
    unlink(i);
    core_.complete(i, error, actual);
}

void IbMethod::fail_peer_ops(Peer &p, int error)
{
    while (!p.ops.empty()) {
        const std::uint32_t i = p.ops.front();
        const OpX &x = opx(i);
        finish(i, x.cancelling ? x.cancel_error : error, op(i).done_bytes);
    }
}

bool IbMethod::post(std::uint32_t i)
{
    Op &o = op(i);
    Peer &p = peer_of(o.peer);
    opx(i) = OpX{};
    p.ops.push_back(core_.ops, i);
    o.in_peer_list = true;
    o.mstate = st_none;

    if (o.kind == OpKind::recv) {
        for (auto it = p.early.begin(); it != p.early.end(); ++it) {
            if (it->tag != o.tag)
                continue;
            Early e = std::move(*it);
            p.early.erase(it);
            if (e.type == Msg::rts) {
                match_rts(i, e.conn, e.cookie, e.size, std::move(e.segs));
                return false;
            }
            p.early_bytes -= std::min(p.early_bytes, e.data.size());
            const std::size_t n = std::min<std::size_t>(e.size, o.total);
            const int err = e.size > o.total ? -EMSGSIZE : 0;
            if (err == 0)
                copy_into_op(i, e.data.data(), n);
            p.ops.remove(core_.ops, i);
            o.in_peer_list = false;
            o.error = err;
            o.actual = err == 0 ? n : 0;
            resume_held(p);
            return true;
        }
        buckets_[bucket_of(o.peer, o.tag)].push_back(core_.ops, i);
        o.mstate = st_recv_posted;
        // A held frame may be this receive's message.
        resume_held(p);
        return false;
    }

    if (p.tx_conn == no_index) {
        if (const int rc = connect_peer(p); rc != 0) {
            p.ops.remove(core_.ops, i);
            o.in_peer_list = false;
            o.error = rc;
            return true;
        }
    }
    if (!ready_to_send(*conns_[p.tx_conn])) {
        p.waiting.push_back(core_.ops, i);
        o.mstate = st_send_wait;
        return false;
    }
    return start_send(i, p);
}

void IbMethod::cancel(std::uint32_t i, int error, bool must_end)
{
    Op &o = op(i);
    if (o.state != OpState::active)
        return;
    OpX &x = opx(i);
    if ((o.mstate == st_recv_read || o.mstate == st_rdma) && x.inflight > 0) {
        // RDMA into or out of the op's memory is in flight: the op ends
        // when it is back.  Only destroying the queue pair stops it now.
        x.cancelling = true;
        x.cancel_error = error;
        if (must_end)
            close_conn(o.conn, error, "an op with RDMA in flight was cancelled");
        return;
    }
    switch (o.mstate) {
    case st_recv_read: {
        Header h;
        h.type = Msg::nack;
        h.cookie = o.remote_cookie;
        h.cookie2 = static_cast<std::uint64_t>(-error);
        queue_ctl(o.conn, h);
        break;
    }
    case st_send_queued:
        break; // its frame is skipped when it comes up
    case st_send_rts: {
        Conn &k = *conns_[o.conn];
        const auto queued = std::find_if(k.data.begin(), k.data.end(), [&](const Frame &f) {
            return f.h.type == Msg::rts && f.h.cookie == o.id;
        });
        if (queued != k.data.end()) {
            k.data.erase(queued);
            break;
        }
        Header h;
        h.type = Msg::cancel;
        h.cookie = o.id;
        if (k.state != ConnState::closed)
            queue_ctl(o.conn, h);
        if (!must_end) {
            // The receiver may be reading: the op ends with its answer.
            x.cancelling = true;
            x.cancel_error = error;
            return;
        }
        // Deregistering (in finish) revokes the receiver's access.
        break;
    }
    default:
        break;
    }
    finish(i, error, o.done_bytes);
}

// ------------------------------------------------------- one-sided transfers

// What an Exposure keeps: the registrations its peer was shown.
struct ExposureState {
    std::shared_ptr<ibv_pd> pd; // first: outlives mrs
    std::vector<Mr> mrs;
    std::vector<std::shared_ptr<CachedMr>> cached;
};

int IbMethod::expose(Addr peer, std::span<const MutableBuffer> bufs, std::shared_ptr<void> &keep,
                     std::vector<std::byte> &descriptor)
{
    if (const int rc = open_channel(); rc != 0)
        return rc;
    Peer &p = peer_of(peer);
    // The registration must be on the device of the peer's connection.
    Device *dev = nullptr;
    if (p.tx_conn != no_index && conns_[p.tx_conn]->dev != nullptr)
        dev = conns_[p.tx_conn]->dev;
    else if (devices_.size() == 1)
        dev = devices_.front().get();
    if (dev == nullptr) {
        if (p.tx_conn == no_index)
            static_cast<void>(connect_peer(p)); // its device is known next time
        return -EAGAIN;
    }
    auto state = std::make_shared<ExposureState>();
    state->pd = dev->pd;
    std::vector<Segment> segs;
    for (const MutableBuffer &b : bufs) {
        if (b.size == 0)
            continue;
        const auto a = reinterpret_cast<std::uintptr_t>(b.data);
        std::uint32_t rkey = 0;
        if (ibv_mr *mr = registry_->find(a, b.size, dev->pd.get())) {
            rkey = mr->rkey;
        } else if (frames_visible()) {
            int error = 0;
            auto e = cached_mr(*dev, a, b.size, error);
            if (!e)
                return error;
            rkey = e->mr->rkey;
            state->cached.push_back(std::move(e));
        } else {
            ++registrations_;
            Mr own(ibv_reg_mr(dev->pd.get(), b.data, b.size, remote_access));
            if (!own)
                return errno != 0 ? -errno : -ENOMEM;
            rkey = own->rkey;
            state->mrs.push_back(std::move(own));
        }
        std::size_t left = b.size;
        std::uintptr_t at = a;
        while (left > 0) {
            const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(left, 1U << 30U));
            segs.push_back({at, rkey, n});
            at += n;
            left -= n;
        }
    }
    if (segs.empty())
        return -EINVAL;
    descriptor.resize(rts_payload_size(segs.size()));
    encode_rts(segs, descriptor);
    keep = std::move(state);
    return 0;
}

int IbMethod::post_rdma(std::uint32_t i, std::span<const std::byte> descriptor,
                        std::uint64_t offset, bool &done)
{
    Op &o = op(i);
    std::vector<Segment> all;
    std::uint64_t total = 0;
    if (decode_segments(descriptor, all, total) != nullptr || offset > total ||
        o.total > total - offset)
        return -EINVAL;
    if (const int rc = open_channel(); rc != 0)
        return rc;
    Peer &p = peer_of(o.peer);
    OpX &x = opx(i);
    x = OpX{};
    // The piece [offset, offset + size) of the peer's segments.
    std::uint64_t skip = offset;
    std::uint64_t want = o.total;
    for (const Segment &sg : all) {
        if (want == 0)
            break;
        if (skip >= sg.len) {
            skip -= sg.len;
            continue;
        }
        const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(sg.len - skip, want));
        x.remote.push_back({sg.addr + skip, sg.rkey, n});
        want -= n;
        skip = 0;
    }
    x.size = o.total;
    done = false;
    if (o.total == 0) {
        o.error = 0;
        o.actual = 0;
        done = true;
        return 0;
    }
    if (p.tx_conn == no_index) {
        if (const int rc = connect_peer(p); rc != 0)
            return rc;
    }
    p.ops.push_back(core_.ops, i);
    o.in_peer_list = true;
    o.mstate = st_none;
    if (!ready_to_send(*conns_[p.tx_conn])) {
        p.waiting.push_back(core_.ops, i);
        o.mstate = st_send_wait;
        return 0;
    }
    start_rdma(i, p);
    return 0;
}

void IbMethod::start_rdma(std::uint32_t i, Peer &p)
{
    Op &o = op(i);
    const std::uint32_t c = p.tx_conn;
    o.conn = c;
    OpX &x = opx(i);
    std::vector<Segment> remote = std::move(x.remote);
    const std::size_t size = x.size;
    if (const int rc = register_op(i, *conns_[c]->dev, IBV_ACCESS_LOCAL_WRITE); rc != 0) {
        finish(i, rc, 0);
        return;
    }
    x.remote = std::move(remote);
    x.size = size;
    x.posted = 0;
    x.inflight = 0;
    o.mstate = st_rdma;
    conns_[c]->readq.push_back(i);
    mark_pending(c);
}

// ----------------------------------------------------------------- progress

void IbMethod::progress(int timeout_ms)
{
    if (!channel_)
        return; // ib never used
    if (timeout_ms > 0 && pending_.empty()) {
        std::vector<pollfd> pfds;
        for (const int fd : fds_)
            pfds.push_back(pollfd{fd, POLLIN, 0});
        ::poll(pfds.data(), pfds.size(), timeout_ms);
    }
    // The event fds are read only when the sleeping engine saw one
    // readable: a poll round costs no system call of this method's.
    const bool drain = core_.internal_ready || timeout_ms > 0;
    core_.internal_ready = false;
    if (drain) {
        handle_cm_events();
        drain_device_events();
    }
    for (auto &dp : devices_) {
        Device &d = *dp;
        if (!drain) {
            poll_cq(d);
            continue;
        }
        ibv_async_event ae{};
        while (ibv_get_async_event(d.verbs, &ae) == 0) {
            const ibv_event_type t = ae.event_type;
            ibv_ack_async_event(&ae);
            AsyncHub::get().publish(&inbox_, d.verbs, t);
            on_device_event(d, t);
        }
        ibv_cq *cq = nullptr;
        void *ctx = nullptr;
        while (ibv_get_cq_event(d.comp.get(), &cq, &ctx) == 0) {
            d.armed = false;
            if (++d.unacked >= 64) {
                ibv_ack_cq_events(d.cq.get(), d.unacked);
                d.unacked = 0;
            }
        }
        poll_cq(d);
    }
    // Frames posted free queue slots and credits come back with answers:
    // a few rounds, each ending with a look at the completion queues.
    for (int round = 0; round < 4 && !pending_.empty(); ++round) {
        scratch_.swap(pending_);
        pending_.clear();
        for (const std::uint32_t c : scratch_) {
            conns_[c]->pending = false;
            flush(c);
        }
        for (auto &dp : devices_)
            poll_cq(*dp);
    }
    ping_waiting_peers();
}

void IbMethod::on_device_event(Device &d, ibv_event_type type)
{
    gossip::debug(gossip::Mask::ib, "{}: async event {}", d.name, ibv_event_type_str(type));
    if (type != IBV_EVENT_PORT_ERR && type != IBV_EVENT_DEVICE_FATAL)
        return;
    gossip::warning(gossip::Mask::ib, "{}: {}: failing its connections", d.name,
                    ibv_event_type_str(type));
    for (std::uint32_t c = 0; c < conns_.size(); ++c) {
        if (conns_[c]->dev == &d && conns_[c]->state != ConnState::closed)
            close_conn(c, -ENETDOWN, "link down");
    }
}

// Events another Bmi of this process read from a shared device.
void IbMethod::drain_device_events()
{
    std::uint64_t n = 0;
    if (::read(inbox_.wake.get(), &n, sizeof n) != static_cast<ssize_t>(sizeof n))
        return;
    std::vector<std::pair<ibv_context *, ibv_event_type>> events;
    {
        const std::lock_guard lock(inbox_.mu);
        events.swap(inbox_.events);
    }
    for (const auto &[verbs, type] : events) {
        for (auto &d : devices_) {
            if (d->verbs == verbs)
                on_device_event(*d, type);
        }
    }
}

bool IbMethod::poll_fast()
{
    const std::uint64_t before = completions_;
    for (auto &dp : devices_)
        poll_cq(*dp);
    if (!pending_.empty())
        progress(0); // what the completions queued (frames, READs) goes now
    return completions_ != before;
}

// Completion notices are armed only before a sleep (arming is a system
// call on some devices, and each notice another): while test* polls, the
// CQs are read directly.  After arming, one more look: a completion that
// came between the last poll and the arming makes no notice.
bool IbMethod::prepare_sleep()
{
    if (!channel_)
        return true;
    for (auto &dp : devices_) {
        if (!dp->armed) {
            ibv_req_notify_cq(dp->cq.get(), 0);
            dp->armed = true;
        }
        poll_cq(*dp);
    }
    return pending_.empty();
}

Clock::time_point IbMethod::peer_alive(std::uint32_t i)
{
    Peer *p = peer_ptr(core_.ops[i].peer);
    if (p == nullptr || p->tx_conn == no_index || conns_[p->tx_conn]->state != ConnState::up)
        return Clock::time_point::min();
    const auto now = Clock::now();
    const auto idle = core_.limits.idle_timeout;
    const auto grace = idle / 4;
    if (now - p->heard < idle)
        return p->heard;
    if (p->pinged > p->heard) {
        if (now - p->pinged >= grace)
            return Clock::time_point::min();
        return p->pinged + grace - idle;
    }
    ping(*p, now);
    return now + grace - idle;
}

void IbMethod::ping(Peer &p, Clock::time_point now)
{
    Header h;
    h.type = Msg::ping;
    queue_ctl(p, h);
    p.pinged = now;
}

void IbMethod::ping_waiting_peers()
{
    const auto now = Clock::now();
    const auto quarter = core_.limits.idle_timeout / 4;
    if (now - last_ping_round_ < quarter / 2)
        return;
    last_ping_round_ = now;
    for (const auto &pp : peers_) {
        if (!pp || pp->ops.empty() || pp->tx_conn == no_index)
            continue;
        Peer &p = *pp;
        if (conns_[p.tx_conn]->state != ConnState::up || now - p.heard < quarter ||
            p.pinged > p.heard)
            continue;
        ping(p, now);
    }
}

} // namespace

std::unique_ptr<Method> make_method(Core &core)
{
    return std::make_unique<IbMethod>(core);
}

} // namespace bmi::ib
