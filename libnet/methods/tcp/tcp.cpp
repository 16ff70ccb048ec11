// BMI's TCP method.  Connections are made on first use and shared by both
// directions; each side sends on one connection per peer (the first that
// came up), so messages stay ordered per peer.  Small messages go eagerly,
// large ones by an explicit rendezvous (RTS -> receive posted -> CTS -> data
// in chunks sent round-robin with other traffic), so a large message never
// holds up small ones.  The protocol is described in docs/bmi.md.
#include "tcp.hpp"

#include "../../core/net.hpp"
#include "../../core/ring.hpp"
#include "engine.hpp"
#include "frame.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/unique_fd.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <system_error>
#include <utility>

namespace bmi::tcp {

namespace gossip = pvfs::gossip;

namespace {

using net::errno_text;
using net::new_incarnation;
using net::resolve;
using net::split_hostport;
using pvfs::UniqueFd;

// ------------------------------------------------------------------ helpers

// Describes bytes [skip, skip + left) of a buffer list as iovecs, as many
// as fit in out.  Returns the count; left becomes what did not fit.
std::size_t map_iov(const std::vector<MutableBuffer> &bufs, std::size_t skip, std::size_t &left,
                    std::span<iovec> out)
{
    std::size_t n = 0;
    for (const MutableBuffer &b : bufs) {
        if (left == 0 || n == out.size())
            break;
        if (skip >= b.size) {
            skip -= b.size;
            continue;
        }
        const std::size_t take = std::min(b.size - skip, left);
        out[n++] = iovec{static_cast<std::byte *>(b.data) + skip, take};
        left -= take;
        skip = 0;
    }
    return n;
}

// Receive-side staging buffer per connection.
constexpr std::size_t stage_size = std::size_t{64} * 1024;
// Payloads at least this large are read straight into the user's buffer.
constexpr std::size_t direct_read_min = std::size_t{16} * 1024;
// Rendezvous data goes in chunks of this size (the receiver's limit).
constexpr std::size_t chunk_size = std::size_t{512} * 1024;
// Early (not yet received) eager messages buffered per peer.
constexpr std::size_t early_peer_bytes = std::size_t{4} * 1024 * 1024;
constexpr std::size_t max_iov = 64;
// Messages to a peer whose tags are remembered, so that a READY can be
// checked against the messages still in flight (see on_ready).
constexpr std::uint64_t ready_window = 256;
// READY announcements kept per peer; older ones are forgotten (they only
// save a round trip).
constexpr std::size_t max_readies = 16;
constexpr int max_events = 64;

// Op states inside this method (Op::mstate).
enum : std::uint8_t {
    st_none = 0,
    st_recv_posted,     // receive in the match table
    st_recv_early_wait, // receive waiting for an early message to finish arriving
    st_recv_eager,      // eager payload streaming into the receive
    st_recv_rndv,       // CTS sent; data chunks arriving
    st_send_wait_conn,  // send waiting for the connection (or its hello)
    st_send_queued,     // eager / unexpected frame queued
    st_send_rts,        // RTS queued or sent; waiting for CTS
    st_send_data,       // data chunks being sent
};

// One frame (or a piece of one) waiting to be written.
struct TxItem {
    HeaderBytes hdr{};
    std::size_t hdr_sent = 0;
    std::uint32_t op = no_index; // payload source, or no_index for owned bytes
    OpId op_id = no_op;
    std::size_t off = 0; // payload range within the op's buffers
    std::size_t len = 0;
    std::size_t sent = 0;
    std::vector<std::byte> own; // payload owned by the item (hello, detached rest)
    FrameType type = FrameType::hello;
};

enum class Sink : std::uint8_t { none, op, early, unexpected, hello, discard };

struct Conn {
    UniqueFd fd;
    std::uint32_t generation = 0;
    Addr peer = no_addr;
    bool connecting = false;
    bool hello_received = false;
    bool paused = false;        // not reading: a budget is exhausted
    bool write_blocked = false; // the socket returned EAGAIN on the last write
    bool closed = true;
    std::uint32_t events = 0;
    RingQueue<TxItem> tx;
    // receive side
    std::vector<std::byte> stage = std::vector<std::byte>(stage_size);
    std::size_t rb = 0;
    std::size_t re = 0;
    FrameHeader h;
    Sink sink = Sink::none;
    std::uint32_t sink_op = no_index;
    OpId sink_op_id = no_op;
    std::size_t sink_off = 0; // where in the op / buffer the next byte goes
    std::size_t payload_left = 0;
    std::vector<std::byte> sink_buf;
    std::size_t early_index = 0; // which early item the payload fills (by serial)
    std::uint64_t early_serial = 0;
    std::uint64_t remote_incarnation = 0; // from the peer's hello on this connection
};

// A receive the peer announced with READY: the next message on its tag,
// if it fits, goes as DIRECT instead of RTS/CTS.
struct Ready {
    Tag tag = 0;
    std::uint64_t receiver_op = 0;
    std::uint64_t capacity = 0;
};

// A message that arrived before its receive was posted.
struct Early {
    std::uint64_t serial = 0;
    Tag tag = 0;
    FrameType type = FrameType::eager; // eager or rts
    std::vector<std::byte> data;
    std::size_t size = 0;     // eager: payload length; rts: message length
    bool complete = false;    // eager payload fully arrived
    std::uint64_t cookie = 0; // rts: the sender's op
    std::uint32_t waiting_op = no_index;
};

struct Peer {
    Addr addr = no_addr;
    std::string hostport; // for connecting; "" when the peer cannot be called
    bool resolved = false;
    sockaddr_storage sa{};
    socklen_t salen = 0;
    std::uint32_t tx_conn = no_index;
    std::vector<std::uint32_t> conns;
    HelloBody remote;
    bool remote_known = false;
    OpList waiting{&Op::match}; // sends waiting for the connection
    OpList ops{&Op::peer_ops};  // every live op of this peer
    Clock::time_point heard;    // the last frame from it, any connection
    Clock::time_point pinged;   // the last ping to it
    std::deque<Early> early;
    std::size_t early_bytes = 0;
    std::uint64_t early_serial = 0;
    // Receiver-announced receives (docs/bmi.md, "Direct sends").
    std::uint64_t incarnation = 0;             // the peer's, from its latest hello
    std::uint64_t msgs_sent = 0;               // eager/rts/direct frames queued to it
    std::uint64_t msgs_seen = 0;               // eager/rts/direct frames accepted from it
    std::array<Tag, ready_window> sent_tags{}; // message n's tag at n % window
    std::vector<Ready> readies;                // oldest first
};

class TcpMethod final : public Method {
public:
    TcpMethod(Core &core, std::string_view engine);
    ~TcpMethod() override;
    TcpMethod(const TcpMethod &) = delete;
    TcpMethod &operator=(const TcpMethod &) = delete;
    TcpMethod(TcpMethod &&) = delete;
    TcpMethod &operator=(TcpMethod &&) = delete;

    [[nodiscard]] std::string_view scheme() const override { return "tcp"; }
    std::string listen(std::string_view hostport) override;
    int add_peer(Addr addr, std::string_view hostport) override;
    bool post(std::uint32_t i) override;
    void cancel(std::uint32_t i, int error, bool must_end) override;
    void unexpected_released(Addr addr) override { resume_peer(addr); }
    int watch_internal(int fd) override;
    int unwatch_internal(int fd) override;
    void progress(int timeout_ms) override;
    void drop_peer(Addr addr, int error) override;
    [[nodiscard]] std::uint64_t open_connections() const override;
    [[nodiscard]] std::uint64_t direct_sends() const override { return direct_sends_; }
    [[nodiscard]] std::uint64_t engine() const override { return engine_->id(); }
    Clock::time_point peer_alive(std::uint32_t i) override;
    int watch_external(int fd) override;
    int unwatch_external(int fd) override;

private:
    Peer &peer_of(Addr addr);
    Peer *peer_ptr(Addr addr);
    Op &op(std::uint32_t i) { return core_.ops[i]; }

    // connections
    std::uint32_t new_conn(UniqueFd fd);
    void tune_socket(int fd) const;
    int connect_peer(Peer &p);
    void close_conn(std::uint32_t c, int error, std::string_view why);
    void update_events(std::uint32_t c);
    void queue_hello(std::uint32_t c);
    void on_connected(std::uint32_t c);
    void accept_all();

    // sending
    bool start_send(std::uint32_t i, Peer &p);
    void queue_frame(std::uint32_t c, const FrameHeader &h, std::uint32_t opi, std::size_t off,
                     std::size_t len, bool front = false);
    void queue_control(Peer &p, const FrameHeader &h);
    bool flush(std::uint32_t c); // false when the connection died
    void item_written(std::uint32_t c, TxItem &item);
    void detach_tx(std::uint32_t i);

    // receiving
    bool handle_readable(std::uint32_t c); // true: the socket is drained
    bool parse(std::uint32_t c);           // false when the connection died or paused
    enum class Verdict : std::uint8_t { accept, pause, close };
    Verdict on_header(std::uint32_t c, const FrameHeader &h);
    void payload_done(std::uint32_t c);
    void copy_into_op(std::uint32_t i, std::size_t off, const std::byte *src, std::size_t n);
    bool match_recv(Peer &p, Tag tag, std::uint32_t &out);
    static std::deque<Early>::iterator find_early(Peer &p, std::uint64_t serial);
    void resume_peer(Addr addr);
    void announce_receive(Peer &p, std::uint32_t i);
    static void on_ready(const Conn &k, Peer &p, const FrameHeader &h);
    static bool take_ready(Peer &p, Tag tag, Ready &out);
    static void note_sent(Peer &p, Tag tag);

    void finish(std::uint32_t i, int error, std::size_t actual);
    void ping_waiting_peers();
    void ping(Peer &p, Clock::time_point now);
    void unlink(std::uint32_t i);
    void fail_peer_ops(Peer &p, int error);

    // posted receives: buckets by (peer, tag), FIFO within a bucket
    static constexpr std::size_t bucket_count = 4096;
    static std::size_t bucket_of(Addr a, Tag t)
    {
        const std::uint64_t k = (a * 0x9e3779b97f4a7c15ULL) ^ static_cast<std::uint32_t>(t);
        return (k ^ (k >> 29U)) & (bucket_count - 1);
    }

    Core &core_;
    const std::uint64_t incarnation_;
    std::unique_ptr<Engine> engine_;
    std::vector<UniqueFd> listeners_;
    std::string my_url_;
    std::vector<std::unique_ptr<Conn>> conns_;
    std::vector<std::uint32_t> free_conns_;
    std::uint32_t conn_generation_ = 0;
    std::vector<std::unique_ptr<Peer>> peers_; // by Addr - 1
    std::vector<OpList> buckets_;
    std::vector<std::uint32_t> to_parse_; // connections with staged bytes to retry
    Clock::time_point last_ping_round_;
    std::vector<int> externals_;         // the caller's watched fds (Bmi::watch_fd)
    std::vector<std::uint32_t> dirty_;   // connections with frames queued meanwhile
    std::vector<std::uint32_t> unread_;  // connections left with unread input
    std::vector<std::uint32_t> scratch_; // reused by progress: no allocation per call
    // progress()'s ready events, kept: clearing them on every call of a
    // spinning test* cost more than the wait that fills them.
    std::array<ReadyEvent, max_events> events_{};
    std::uint64_t direct_sends_ = 0;
};

// Event keys: a connection's is (generation << 32) | index with a 29-bit
// generation; the three top bits mark listeners, the caller's watched fds
// and other methods' fds.
constexpr std::uint64_t listener_bit = std::uint64_t{1} << 63U;
constexpr std::uint64_t external_bit = std::uint64_t{1} << 62U;
constexpr std::uint64_t internal_bit = std::uint64_t{1} << 61U;
constexpr std::uint32_t generation_mask = (std::uint32_t{1} << 29U) - 1;
constexpr std::size_t max_external_fds = 64;

std::uint64_t event_key(std::uint32_t c, std::uint32_t generation)
{
    return (static_cast<std::uint64_t>(generation) << 32U) | c;
}

std::string engine_choice(std::string_view requested)
{
    if (!requested.empty())
        return std::string(requested);
    const char *env = std::getenv("BMI_TCP_ENGINE"); // NOLINT(concurrency-mt-unsafe): at init
    return env != nullptr ? env : "auto";
}

TcpMethod::TcpMethod(Core &core, std::string_view engine)
    : core_(core), incarnation_(new_incarnation()), engine_(make_engine(engine_choice(engine))),
      buckets_(bucket_count, OpList{&Op::match})
{
}

TcpMethod::~TcpMethod()
{
    for (std::uint32_t c = 0; c < conns_.size(); ++c) {
        if (!conns_[c]->closed)
            close_conn(c, -ECANCELED, {});
    }
    // The engine may hold references to the listening sockets (io_uring
    // polls do): drop them first so the ports are free when we return.
    for (std::size_t l = 0; l < listeners_.size(); ++l)
        engine_->remove(listeners_[l].get(), listener_bit | l);
    listeners_.clear();
}

Peer *TcpMethod::peer_ptr(Addr addr)
{
    if (addr == no_addr || addr > peers_.size() || !peers_[addr - 1])
        return nullptr;
    return peers_[addr - 1].get();
}

Peer &TcpMethod::peer_of(Addr addr)
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

std::string TcpMethod::listen(std::string_view hostport)
{
    sockaddr_storage sa{};
    socklen_t len = 0;
    const std::string what = "bmi tcp: listen on '" + std::string(hostport) + "'";
    if (const int rc = resolve(hostport, sa, len); rc != 0)
        throw std::system_error(-rc, std::generic_category(), what + ": bad address");
    UniqueFd fd(::socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid())
        throw std::system_error(errno, std::generic_category(), what);
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr *>(&sa), len) != 0 ||
        ::listen(fd.get(), 1024) != 0)
        throw std::system_error(errno, std::generic_category(), what);
    sockaddr_storage bound{};
    socklen_t blen = sizeof bound;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr *>(&bound), &blen);
    engine_->add(fd.get(), listener_bit | listeners_.size(), EPOLLIN);
    listeners_.push_back(std::move(fd));
    std::string url = net::sockaddr_url("tcp", reinterpret_cast<const sockaddr *>(&bound));
    if (my_url_.empty())
        my_url_ = url;
    return url;
}

int TcpMethod::add_peer(Addr addr, std::string_view hostport)
{
    std::string host;
    std::string port;
    if (!split_hostport(hostport, host, port))
        return -EINVAL;
    Peer &p = peer_of(addr);
    p.hostport = std::string(hostport);
    return 0;
}

std::uint64_t TcpMethod::open_connections() const
{
    return static_cast<std::uint64_t>(
        std::count_if(conns_.begin(), conns_.end(), [](const auto &c) { return !c->closed; }));
}

// ------------------------------------------------------------- connections

void TcpMethod::tune_socket(int fd) const
{
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    const int idle = std::max(1, static_cast<int>(core_.limits.keepalive.count() / 1000));
    const int intvl = std::max(1, idle / 3);
    const int cnt = 3;
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    // Unacknowledged data older than the idle timeout kills the connection.
    const auto user_timeout = static_cast<unsigned>(core_.limits.idle_timeout.count());
    ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

std::uint32_t TcpMethod::new_conn(UniqueFd fd)
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
    k.fd = std::move(fd);
    conn_generation_ = (conn_generation_ + 1) & generation_mask;
    k.generation = conn_generation_;
    k.peer = no_addr;
    k.connecting = k.hello_received = k.paused = false;
    k.closed = false;
    k.events = 0;
    k.tx.clear();
    k.rb = k.re = 0;
    k.sink = Sink::none;
    k.sink_op = no_index;
    k.payload_left = 0;
    k.write_blocked = false;
    engine_->add(k.fd.get(), event_key(c, k.generation), EPOLLIN);
    k.events = EPOLLIN;
    return c;
}

void TcpMethod::update_events(std::uint32_t c)
{
    Conn &k = *conns_[c];
    if (k.closed)
        return;
    // Writability matters only once the socket refused bytes: queued frames
    // are otherwise written at once (or at the end of this progress call).
    std::uint32_t want = k.paused ? 0U : static_cast<std::uint32_t>(EPOLLIN);
    if (k.connecting || (k.write_blocked && !k.tx.empty()))
        want |= EPOLLOUT;
    if (want == k.events)
        return;
    engine_->modify(k.fd.get(), event_key(c, k.generation), want);
    k.events = want;
}

int TcpMethod::connect_peer(Peer &p)
{
    if (p.hostport.empty())
        return -ECONNREFUSED; // a client without a listener cannot be called back
    if (!p.resolved) {
        if (const int rc = resolve(p.hostport, p.sa, p.salen); rc != 0)
            return rc;
        p.resolved = true;
    }
    UniqueFd fd(::socket(p.sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid())
        return -errno;
    tune_socket(fd.get());
    const int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr *>(&p.sa), p.salen);
    if (rc != 0 && errno != EINPROGRESS)
        return -errno;
    const std::uint32_t c = new_conn(std::move(fd));
    Conn &k = *conns_[c];
    k.peer = p.addr;
    k.connecting = rc != 0;
    p.conns.push_back(c);
    p.tx_conn = c;
    if (!k.connecting)
        on_connected(c);
    update_events(c);
    gossip::debug(gossip::Mask::tcp, "connecting to {}", p.hostport);
    return 0;
}

void TcpMethod::queue_hello(std::uint32_t c)
{
    HelloBody body;
    body.eager_limit = static_cast<std::uint32_t>(core_.limits.eager);
    body.unexpected_limit = static_cast<std::uint32_t>(core_.limits.unexpected);
    body.chunk = static_cast<std::uint32_t>(chunk_size);
    body.incarnation = incarnation_;
    body.url = my_url_;
    TxItem item;
    FrameHeader h;
    h.type = FrameType::hello;
    h.size = hello_size(body);
    encode(h, item.hdr);
    item.own.resize(h.size);
    encode_hello(body, item.own);
    item.len = h.size;
    item.type = FrameType::hello;
    conns_[c]->tx.push_front(std::move(item));
    dirty_.push_back(c);
}

void TcpMethod::on_connected(std::uint32_t c)
{
    conns_[c]->connecting = false;
    queue_hello(c);
}

void TcpMethod::accept_all()
{
    for (const UniqueFd &l : listeners_) {
        for (;;) {
            sockaddr_storage sa{};
            socklen_t len = sizeof sa;
            UniqueFd fd(::accept4(l.get(), reinterpret_cast<sockaddr *>(&sa), &len,
                                  SOCK_NONBLOCK | SOCK_CLOEXEC));
            if (!fd.valid()) {
                if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                    gossip::error(gossip::Mask::tcp, "accept: {}", errno_text(errno));
                break;
            }
            tune_socket(fd.get());
            const std::uint32_t c = new_conn(std::move(fd));
            queue_hello(c);
            update_events(c);
        }
    }
}

void TcpMethod::close_conn(std::uint32_t c, int error, std::string_view why)
{
    Conn &k = *conns_[c];
    if (k.closed)
        return;
    if (!why.empty()) {
        const std::string who = k.peer != no_addr ? core_.url_of(k.peer) : "an unidentified peer";
        if (error == -EPROTO)
            gossip::error(gossip::Mask::tcp, "closing connection to {}: {}", who, why);
        else
            gossip::debug(gossip::Mask::tcp, "closing connection to {}: {}", who, why);
    }
    engine_->remove(k.fd.get(), event_key(c, k.generation));
    k.fd.reset();
    k.closed = true;
    // Owned bytes die with the connection; ops referenced by items are failed below.
    k.tx.clear();
    k.sink = Sink::none;
    k.sink_op = no_index;
    k.sink_buf.clear();
    free_conns_.push_back(c);
    if (Peer *p = peer_ptr(k.peer)) {
        std::erase(p->conns, c);
        if (p->tx_conn == c)
            p->tx_conn = no_index;
        fail_peer_ops(*p, error);
        // Early messages that had not fully arrived are gone with the sender.
        for (auto it = p->early.begin(); it != p->early.end();) {
            if (it->type == FrameType::rts || !it->complete) {
                p->early_bytes -= std::min(p->early_bytes, it->data.size());
                it = p->early.erase(it);
            } else {
                ++it;
            }
        }
    }
}

void TcpMethod::drop_peer(Addr addr, int error)
{
    Peer *p = peer_ptr(addr);
    if (p == nullptr)
        return;
    const std::vector<std::uint32_t> conns = p->conns;
    for (const std::uint32_t c : conns)
        close_conn(c, error, "dropped by request");
    fail_peer_ops(*p, error);
}

// ----------------------------------------------------------------- op life

void TcpMethod::unlink(std::uint32_t i)
{
    Op &o = op(i);
    Peer *p = peer_ptr(o.peer);
    switch (o.mstate) {
    case st_recv_posted:
        buckets_[bucket_of(o.peer, o.tag)].remove(core_.ops, i);
        break;
    case st_send_wait_conn:
        if (p != nullptr)
            p->waiting.remove(core_.ops, i);
        break;
    case st_recv_early_wait:
        if (p != nullptr) {
            for (Early &e : p->early) {
                if (e.waiting_op == i)
                    e.waiting_op = no_index;
            }
        }
        break;
    default:
        break;
    }
    if (o.conn != no_index && o.conn < conns_.size()) {
        Conn &k = *conns_[o.conn];
        if (!k.closed && k.sink == Sink::op && k.sink_op == i) {
            k.sink = Sink::discard; // drain the rest of the frame
            k.sink_op = no_index;
        }
    }
    if (p != nullptr && o.in_peer_list) {
        p->ops.remove(core_.ops, i);
        o.in_peer_list = false;
    }
    o.mstate = st_none;
}

void TcpMethod::finish(std::uint32_t i, int error, std::size_t actual)
{
    if (op(i).state != OpState::active)
        return;
    unlink(i);
    core_.complete(i, error, actual);
}

void TcpMethod::fail_peer_ops(Peer &p, int error)
{
    while (!p.ops.empty()) {
        const std::uint32_t i = p.ops.front();
        detach_tx(i);
        finish(i, error, op(i).done_bytes);
    }
}

// Removes the op from every send queue.  A frame already partly on the wire
// must be finished for the stream to stay framed: its remaining bytes are
// copied so the caller may reuse the buffer at once.
void TcpMethod::detach_tx(std::uint32_t i)
{
    const std::uint32_t c = op(i).conn;
    if (c == no_index || c >= conns_.size() || conns_[c]->closed)
        return;
    auto &tx = conns_[c]->tx;
    for (auto it = tx.begin(); it != tx.end();) {
        if (it->op != i) {
            ++it;
            continue;
        }
        if (it->hdr_sent == 0) {
            it = tx.erase(it);
            continue;
        }
        std::vector<std::byte> rest(it->len - it->sent);
        // Copy op bytes [off+sent, off+len) into rest.
        std::size_t pos = 0;
        std::size_t skip = it->off + it->sent;
        for (const MutableBuffer &b : op(i).bufs) {
            if (pos == rest.size())
                break;
            if (skip >= b.size) {
                skip -= b.size;
                continue;
            }
            const std::size_t n = std::min(b.size - skip, rest.size() - pos);
            std::memcpy(rest.data() + pos, static_cast<const std::byte *>(b.data) + skip, n);
            pos += n;
            skip = 0;
        }
        it->own = std::move(rest);
        it->off = 0;
        it->len = it->own.size();
        it->sent = 0;
        it->op = no_index;
        it->op_id = no_op;
        ++it;
    }
}

void TcpMethod::cancel(std::uint32_t i, int error, bool /*must_end*/)
{
    Op &o = op(i);
    if (o.state != OpState::active)
        return;
    Peer *p = peer_ptr(o.peer);
    switch (o.mstate) {
    case st_recv_rndv:
        if (p != nullptr) {
            FrameHeader h;
            h.type = FrameType::nack;
            h.cookie = o.remote_cookie;
            h.status = error == -ETIMEDOUT ? ETIMEDOUT : ECANCELED;
            queue_control(*p, h);
        }
        break;
    case st_send_rts:
    case st_send_data: {
        bool rts_unsent = false;
        if (o.conn != no_index && !conns_[o.conn]->closed) {
            for (const TxItem &it : conns_[o.conn]->tx) {
                if (it.op == i && it.type == FrameType::rts && it.hdr_sent == 0)
                    rts_unsent = true;
            }
        }
        detach_tx(i);
        if (!rts_unsent && p != nullptr) {
            FrameHeader h;
            h.type = FrameType::cancel;
            h.cookie = o.id;
            h.cookie2 = o.remote_cookie;
            queue_control(*p, h);
        }
        break;
    }
    case st_send_queued:
        detach_tx(i);
        break;
    default:
        break;
    }
    finish(i, error, o.done_bytes);
}

// ------------------------------------------------------------------- posts

bool TcpMethod::post(std::uint32_t i)
{
    Op &o = op(i);
    Peer &p = peer_of(o.peer);
    p.ops.push_back(core_.ops, i);
    o.in_peer_list = true;
    o.mstate = st_none;

    if (o.kind == OpKind::recv) {
        // An early message for this (peer, tag)?  The oldest one wins.
        for (auto it = p.early.begin(); it != p.early.end(); ++it) {
            if (it->tag != o.tag || it->waiting_op != no_index)
                continue;
            if (it->type == FrameType::rts) {
                const Early e = std::move(*it);
                p.early.erase(it);
                o.mstate = st_recv_rndv;
                if (e.size > o.total) {
                    FrameHeader h;
                    h.type = FrameType::nack;
                    h.cookie = e.cookie;
                    h.status = EMSGSIZE;
                    queue_control(p, h);
                    finish(i, -EMSGSIZE, 0);
                    return false;
                }
                o.remote_cookie = e.cookie;
                o.actual = e.size;
                o.total = e.size; // the message length bounds what arrives
                FrameHeader h;
                h.type = FrameType::cts;
                h.cookie = e.cookie;
                h.cookie2 = o.id;
                queue_control(p, h);
                return false;
            }
            if (!it->complete) {
                it->waiting_op = i;
                o.mstate = st_recv_early_wait;
                return false;
            }
            // Complete early eager message: immediate completion.
            const std::size_t n = std::min(it->size, o.total);
            const int err = it->size > o.total ? -EMSGSIZE : 0;
            copy_into_op(i, 0, it->data.data(), n);
            p.early_bytes -= std::min(p.early_bytes, it->data.size());
            p.early.erase(it);
            resume_peer(p.addr);
            p.ops.remove(core_.ops, i);
            o.in_peer_list = false;
            o.error = err;
            o.actual = n;
            return true;
        }
        announce_receive(p, i);
        buckets_[bucket_of(o.peer, o.tag)].push_back(core_.ops, i);
        o.mstate = st_recv_posted;
        return false;
    }

    // Sends need a connection whose hello has arrived (the peer's limits).
    if (p.tx_conn == no_index) {
        if (const int rc = connect_peer(p); rc != 0) {
            p.ops.remove(core_.ops, i);
            o.in_peer_list = false;
            o.error = rc;
            return true;
        }
    }
    const Conn &k = *conns_[p.tx_conn];
    if (k.connecting || !k.hello_received || !p.remote_known) {
        p.waiting.push_back(core_.ops, i);
        o.mstate = st_send_wait_conn;
        return false;
    }
    return start_send(i, p);
}

// Queues the first frame of a send; true if it completed at once.
bool TcpMethod::start_send(std::uint32_t i, Peer &p)
{
    Op &o = op(i);
    const std::uint32_t c = p.tx_conn;
    o.conn = c;
    FrameHeader h;
    h.tag = o.tag;
    h.size = o.total;
    if (o.kind == OpKind::send_unexpected) {
        if (o.total > p.remote.unexpected_limit) {
            finish(i, -EMSGSIZE, 0);
            return false;
        }
        h.type = FrameType::unexpected;
    } else {
        // Every expected message consumes the READY of its tag, if any: it
        // is the message that the announced receive will match.
        note_sent(p, o.tag);
        Ready r;
        const bool announced = take_ready(p, o.tag, r);
        if (o.total <= p.remote.eager_limit) {
            h.type = FrameType::eager;
        } else if (announced && o.total <= r.capacity && o.total <= p.remote.chunk) {
            // The receive is posted and waits: skip the RTS/CTS round trip.
            h.type = FrameType::direct;
            h.cookie2 = r.receiver_op;
            ++direct_sends_;
        } else {
            h.type = FrameType::rts;
            h.cookie = o.id;
            o.mstate = st_send_rts;
            queue_frame(c, h, i, 0, 0);
            flush(c);
            return false;
        }
    }
    o.mstate = st_send_queued;
    const bool idle = conns_[c]->tx.empty();
    queue_frame(c, h, i, 0, o.total);
    if (idle) {
        // Immediate completion: the socket may take it all right now.
        flush(c);
        return op(i).state == OpState::done;
    }
    return false;
}

void TcpMethod::queue_frame(std::uint32_t c, const FrameHeader &h, std::uint32_t opi,
                            std::size_t off, std::size_t len, bool front)
{
    TxItem item;
    encode(h, item.hdr);
    item.op = opi;
    item.op_id = opi == no_index ? no_op : op(opi).id;
    item.off = off;
    item.len = len;
    item.type = h.type;
    Conn &k = *conns_[c];
    if (k.tx.empty())
        dirty_.push_back(c);
    if (front)
        k.tx.push_front(std::move(item));
    else
        k.tx.push_back(std::move(item));
    update_events(c);
}

void TcpMethod::queue_control(Peer &p, const FrameHeader &h)
{
    if (p.tx_conn == no_index) {
        if (connect_peer(p) != 0)
            return; // nobody to tell; the peer's own deadline ends its op
    }
    queue_frame(p.tx_conn, h, no_index, 0, 0);
}

// Writes as much queued data as the socket takes.
bool TcpMethod::flush(std::uint32_t c)
{
    Conn &k = *conns_[c];
    if (k.closed || k.connecting)
        return !k.closed;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init): filled before use
    std::array<iovec, max_iov> iov;
    while (!k.tx.empty()) {
        std::size_t n = 0;
        for (const TxItem &it : k.tx) {
            if (n + 2 > max_iov)
                break;
            if (it.hdr_sent < frame_header_size) {
                // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast)
                iov[n++] = iovec{const_cast<std::byte *>(it.hdr.data() + it.hdr_sent),
                                 frame_header_size - it.hdr_sent};
            }
            std::size_t skip = it.off + it.sent;
            std::size_t left = it.len - it.sent;
            if (left == 0)
                continue;
            if (it.op == no_index) {
                iov[n++] = iovec{const_cast<std::byte *>(it.own.data() + it.sent), left}; // NOLINT
                continue;
            }
            n += map_iov(op(it.op).bufs, skip, left, std::span(iov).subspan(n));
            if (left != 0)
                break; // out of iovecs inside this item
        }
        msghdr msg{};
        msg.msg_iov = iov.data();
        msg.msg_iovlen = n;
        const ssize_t w = ::sendmsg(k.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                k.write_blocked = true;
                break;
            }
            close_conn(c, errno == ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET, errno_text(errno));
            return false;
        }
        auto written = static_cast<std::size_t>(w);
        while (written > 0 || (!k.tx.empty() && k.tx.front().hdr_sent == frame_header_size &&
                               k.tx.front().sent == k.tx.front().len)) {
            TxItem &it = k.tx.front();
            const std::size_t h = std::min(written, frame_header_size - it.hdr_sent);
            it.hdr_sent += h;
            written -= h;
            const std::size_t d = std::min(written, it.len - it.sent);
            it.sent += d;
            written -= d;
            if (it.hdr_sent == frame_header_size && it.sent == it.len) {
                TxItem done = std::move(it);
                k.tx.pop_front();
                item_written(c, done);
                if (k.closed)
                    return false;
            } else {
                if (it.op != no_index && d > 0)
                    core_.touch(it.op);
                break;
            }
        }
    }
    if (k.tx.empty())
        k.write_blocked = false;
    update_events(c);
    return true;
}

void TcpMethod::item_written(std::uint32_t c, TxItem &item)
{
    if (item.op == no_index)
        return;
    const std::uint32_t i = item.op;
    Op &o = op(i);
    if (o.state != OpState::active || o.id != item.op_id)
        return;
    core_.touch(i);
    switch (item.type) {
    case FrameType::eager:
    case FrameType::direct:
    case FrameType::unexpected:
        o.done_bytes = o.total;
        finish(i, 0, o.total);
        break;
    case FrameType::data: {
        o.done_bytes += item.len;
        if (o.done_bytes >= o.total) {
            finish(i, 0, o.total);
            break;
        }
        FrameHeader h;
        h.type = FrameType::data;
        h.tag = o.tag;
        h.cookie = o.id;
        h.cookie2 = o.remote_cookie;
        h.size = std::min(chunk_size, o.total - o.done_bytes);
        queue_frame(c, h, i, o.done_bytes, h.size);
        break;
    }
    default:
        break;
    }
}

// ---------------------------------------------------------------- receives

// A receive about to wait in the match table: tell the sender, so that a
// message above the eager limit comes at once instead of RTS -> CTS -> data.
// Only when this receive is unambiguously the next one the peer's messages
// on this tag will match: none is buffered (the caller checked) and no
// other receive for (peer, tag) waits.
void TcpMethod::announce_receive(Peer &p, std::uint32_t i)
{
    const Op &o = op(i);
    if (o.total <= core_.limits.eager || p.tx_conn == no_index || !p.remote_known)
        return;
    const Conn &k = *conns_[p.tx_conn];
    if (k.closed || k.connecting || !k.hello_received)
        return;
    const OpList &bucket = buckets_[bucket_of(p.addr, o.tag)];
    for (std::uint32_t j = bucket.front(); j != no_index; j = bucket.next(core_.ops, j)) {
        if (op(j).peer == p.addr && op(j).tag == o.tag)
            return;
    }
    FrameHeader h;
    h.type = FrameType::ready;
    h.tag = o.tag;
    h.size = o.total;
    h.cookie = p.msgs_seen;
    h.cookie2 = o.id;
    const bool idle = k.tx.empty();
    queue_frame(p.tx_conn, h, no_index, 0, 0);
    if (idle)
        flush(p.tx_conn);
}

void TcpMethod::note_sent(Peer &p, Tag tag)
{
    ++p.msgs_sent;
    p.sent_tags[p.msgs_sent % ready_window] = tag;
}

// A READY is kept only if no message on its tag is in flight: every message
// the receiver had not seen when it posted the receive (numbers after
// h.cookie) is checked.  Such a message would match that receive first.
void TcpMethod::on_ready(const Conn &k, Peer &p, const FrameHeader &h)
{
    if (k.remote_incarnation != p.incarnation)
        return; // announced by a process that has since restarted
    const std::uint64_t seen = h.cookie;
    if (seen > p.msgs_sent || p.msgs_sent - seen >= ready_window)
        return;
    for (std::uint64_t n = seen + 1; n <= p.msgs_sent; ++n) {
        if (p.sent_tags[n % ready_window] == h.tag)
            return;
    }
    std::erase_if(p.readies, [&](const Ready &r) { return r.tag == h.tag; });
    if (p.readies.size() >= max_readies)
        p.readies.erase(p.readies.begin());
    p.readies.push_back({h.tag, h.cookie2, h.size});
}

bool TcpMethod::take_ready(Peer &p, Tag tag, Ready &out)
{
    if (p.readies.empty())
        return false;
    const auto it = std::find_if(p.readies.begin(), p.readies.end(),
                                 [&](const Ready &r) { return r.tag == tag; });
    if (it == p.readies.end())
        return false;
    out = *it;
    p.readies.erase(it);
    return true;
}

bool TcpMethod::match_recv(Peer &p, Tag tag, std::uint32_t &out)
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

void TcpMethod::copy_into_op(std::uint32_t i, std::size_t off, const std::byte *src, std::size_t n)
{
    for (const MutableBuffer &b : op(i).bufs) {
        if (n == 0)
            break;
        if (off >= b.size) {
            off -= b.size;
            continue;
        }
        const std::size_t take = std::min(b.size - off, n);
        std::memcpy(static_cast<std::byte *>(b.data) + off, src, take);
        src += take;
        n -= take;
        off = 0;
    }
}

void TcpMethod::resume_peer(Addr addr)
{
    Peer *p = peer_ptr(addr);
    if (p == nullptr)
        return;
    for (const std::uint32_t c : p->conns) {
        Conn &k = *conns_[c];
        if (k.paused) {
            k.paused = false;
            update_events(c);
            to_parse_.push_back(c);
        }
    }
}

TcpMethod::Verdict TcpMethod::on_header(std::uint32_t c, const FrameHeader &h)
{
    Conn &k = *conns_[c];
    if (!k.hello_received && h.type != FrameType::hello)
        return Verdict::close;
    if (k.hello_received && h.type == FrameType::hello)
        return Verdict::close;
    k.h = h;
    k.payload_left = 0;
    k.sink = Sink::none;
    if (h.type == FrameType::hello) {
        k.sink = Sink::hello;
        k.sink_buf.resize(h.size);
        k.sink_off = 0;
        k.payload_left = h.size;
        return Verdict::accept;
    }
    // After the hello every connection is bound to its peer.
    Peer *p = peer_ptr(k.peer);
    if (p == nullptr)
        return Verdict::close;
    p->heard = Clock::now();

    switch (h.type) {
    case FrameType::hello:
        return Verdict::close; // handled above
    case FrameType::direct:
        // Matched like an eager message: the sender checked that the
        // announced receive is the first this message can match, and if
        // that receive was cancelled meanwhile, FIFO order still holds.
    case FrameType::eager: {
        std::uint32_t i = no_index;
        if (match_recv(*p, h.tag, i)) {
            Op &o = op(i);
            o.conn = c;
            o.mstate = st_recv_eager;
            core_.touch(i);
            if (h.size > o.total) {
                k.sink = Sink::discard;
                finish(i, -EMSGSIZE, 0);
            } else {
                k.sink = Sink::op;
                k.sink_op = i;
                k.sink_op_id = o.id;
                k.sink_off = 0;
                o.actual = h.size;
            }
        } else {
            if (p->early_bytes + h.size > early_peer_bytes && p->early_bytes > 0)
                return Verdict::pause;
            Early e;
            e.serial = ++p->early_serial;
            e.tag = h.tag;
            e.type = FrameType::eager;
            e.size = h.size;
            e.data.resize(h.size);
            p->early_bytes += h.size;
            p->early.push_back(std::move(e));
            k.sink = Sink::early;
            k.early_serial = p->early.back().serial;
            k.sink_off = 0;
        }
        k.payload_left = h.size;
        return Verdict::accept;
    }
    case FrameType::unexpected: {
        if (core_.unexpected_pool->outstanding(p->addr) + h.size >
                core_.limits.unexpected_peer_bytes &&
            core_.unexpected_pool->outstanding(p->addr) > 0)
            return Verdict::pause;
        k.sink = Sink::unexpected;
        k.sink_buf = core_.unexpected_pool->take(h.size);
        k.sink_off = 0;
        k.payload_left = h.size;
        return Verdict::accept;
    }
    case FrameType::rts: {
        std::uint32_t i = no_index;
        if (match_recv(*p, h.tag, i)) {
            Op &o = op(i);
            o.conn = c;
            o.mstate = st_recv_rndv;
            core_.touch(i);
            if (h.size > o.total) {
                FrameHeader n;
                n.type = FrameType::nack;
                n.cookie = h.cookie;
                n.status = EMSGSIZE;
                queue_control(*p, n);
                finish(i, -EMSGSIZE, 0);
            } else {
                o.remote_cookie = h.cookie;
                o.actual = h.size;
                o.total = h.size;
                FrameHeader n;
                n.type = FrameType::cts;
                n.cookie = h.cookie;
                n.cookie2 = o.id;
                queue_control(*p, n);
            }
        } else {
            Early e;
            e.serial = ++p->early_serial;
            e.tag = h.tag;
            e.type = FrameType::rts;
            e.size = h.size;
            e.cookie = h.cookie;
            p->early.push_back(std::move(e));
        }
        return Verdict::accept;
    }
    case FrameType::cts: {
        Op *o = core_.find(h.cookie);
        if (o == nullptr || o->state != OpState::active || o->peer != p->addr ||
            o->mstate != st_send_rts)
            return Verdict::accept; // a cancelled send: the receiver hears of it
        const std::uint32_t i = core_.index_of(h.cookie);
        o->remote_cookie = h.cookie2;
        o->mstate = st_send_data;
        core_.touch(i);
        FrameHeader d;
        d.type = FrameType::data;
        d.tag = o->tag;
        d.cookie = o->id;
        d.cookie2 = h.cookie2;
        d.size = std::min(chunk_size, o->total);
        if (o->total == 0) {
            finish(i, 0, 0);
            return Verdict::accept;
        }
        queue_frame(o->conn, d, i, 0, d.size);
        return Verdict::accept;
    }
    case FrameType::data: {
        Op *o = core_.find(h.cookie2);
        k.payload_left = h.size;
        if (o == nullptr || o->state != OpState::active || o->peer != p->addr ||
            o->kind != OpKind::recv || o->mstate != st_recv_rndv || o->remote_cookie != h.cookie) {
            k.sink = Sink::discard; // cancelled meanwhile
            return Verdict::accept;
        }
        if (o->done_bytes + h.size > o->total)
            return Verdict::close;
        const std::uint32_t i = core_.index_of(h.cookie2);
        o->conn = c;
        k.sink = Sink::op;
        k.sink_op = i;
        k.sink_op_id = o->id;
        k.sink_off = o->done_bytes;
        return Verdict::accept;
    }
    case FrameType::nack: {
        Op *o = core_.find(h.cookie);
        if (o != nullptr && o->state == OpState::active && o->peer == p->addr &&
            (o->mstate == st_send_rts || o->mstate == st_send_data)) {
            const std::uint32_t i = core_.index_of(h.cookie);
            detach_tx(i);
            finish(i, -h.status, o->done_bytes);
        }
        return Verdict::accept;
    }
    case FrameType::ping: {
        FrameHeader pong;
        pong.type = FrameType::pong;
        queue_control(*p, pong);
        return Verdict::accept;
    }
    case FrameType::pong:
        return Verdict::accept; // heard: that is all it is for
    case FrameType::ready:
        on_ready(k, *p, h);
        return Verdict::accept;
    case FrameType::cancel: {
        if (h.cookie2 != 0) {
            Op *o = core_.find(h.cookie2);
            if (o != nullptr && o->state == OpState::active && o->peer == p->addr &&
                o->kind == OpKind::recv && o->remote_cookie == h.cookie) {
                finish(core_.index_of(h.cookie2), -ECANCELED, o->done_bytes);
            }
            return Verdict::accept;
        }
        for (auto it = p->early.begin(); it != p->early.end(); ++it) {
            if (it->type == FrameType::rts && it->cookie == h.cookie) {
                p->early.erase(it);
                return Verdict::accept;
            }
        }
        // Already matched: the receive waits for data that will not come.
        for (std::uint32_t i = p->ops.front(); i != no_index; i = p->ops.next(core_.ops, i)) {
            if (op(i).kind == OpKind::recv && op(i).mstate == st_recv_rndv &&
                op(i).remote_cookie == h.cookie) {
                finish(i, -ECANCELED, op(i).done_bytes);
                break;
            }
        }
        return Verdict::accept;
    }
    }
    return Verdict::close;
}

// The early message a payload is filling.  Almost always the newest one
// (a payload follows its header), so the search starts from the back.
std::deque<Early>::iterator TcpMethod::find_early(Peer &p, std::uint64_t serial)
{
    for (auto it = p.early.end(); it != p.early.begin();) {
        --it;
        if (it->serial == serial)
            return it;
        if (it->serial < serial)
            break; // serials grow towards the back
    }
    return p.early.end();
}

void TcpMethod::payload_done(std::uint32_t c)
{
    Conn &k = *conns_[c];
    Peer *p = peer_ptr(k.peer);
    const Sink sink = k.sink;
    k.sink = Sink::none;
    switch (sink) {
    case Sink::hello: {
        HelloBody body;
        if (const char *err = decode_hello(k.sink_buf, body)) {
            close_conn(c, -EPROTO, err);
            return;
        }
        k.hello_received = true;
        if (k.peer == no_addr) {
            // An incoming connection: the peer names where it listens.
            std::string url = body.url;
            if (url.empty()) {
                sockaddr_storage sa{};
                socklen_t len = sizeof sa;
                ::getpeername(k.fd.get(), reinterpret_cast<sockaddr *>(&sa), &len);
                url = net::sockaddr_url("tcp", reinterpret_cast<const sockaddr *>(&sa));
            } else if (url.rfind("tcp://", 0) != 0) {
                close_conn(c, -EPROTO, "hello with a non-tcp url");
                return;
            }
            const Addr a = core_.peer_for_url(*this, url);
            Peer &np = peer_of(a);
            if (np.hostport.empty() && !body.url.empty())
                np.hostport = url.substr(6);
            k.peer = a;
            np.conns.push_back(c);
            if (np.tx_conn == no_index)
                np.tx_conn = c;
            p = &np;
        }
        p->remote = body;
        p->remote_known = true;
        k.remote_incarnation = body.incarnation;
        if (p->incarnation != body.incarnation) {
            // A new process behind this address: nothing sent to or seen
            // from the old one counts for READY any more.  No message goes
            // to a peer before its hello has arrived, so none is miscounted.
            p->incarnation = body.incarnation;
            p->msgs_sent = 0;
            p->msgs_seen = 0;
            p->readies.clear();
        }
        p->heard = Clock::now();
        // Sends that waited for this connection go now, in order.
        if (p->tx_conn == c) {
            while (!p->waiting.empty()) {
                const std::uint32_t i = p->waiting.front();
                p->waiting.remove(core_.ops, i);
                op(i).mstate = st_none;
                start_send(i, *p);
                if (k.closed)
                    return;
            }
        }
        return;
    }
    case Sink::op: {
        const std::uint32_t i = k.sink_op;
        k.sink_op = no_index;
        Op &o = op(i);
        if (o.state != OpState::active || o.id != k.sink_op_id)
            return;
        core_.touch(i);
        if (o.mstate == st_recv_eager) {
            finish(i, 0, o.actual);
        } else if (o.mstate == st_recv_rndv) {
            o.done_bytes += k.h.size;
            if (o.done_bytes >= o.total)
                finish(i, 0, o.total);
        }
        return;
    }
    case Sink::early: {
        if (const auto it = find_early(*p, k.early_serial); it != p->early.end()) {
            it->complete = true;
            if (it->waiting_op != no_index) {
                const std::uint32_t i = it->waiting_op;
                Op &o = op(i);
                const std::size_t n = std::min(it->size, o.total);
                copy_into_op(i, 0, it->data.data(), n);
                const int err = it->size > o.total ? -EMSGSIZE : 0;
                p->early_bytes -= std::min(p->early_bytes, it->data.size());
                p->early.erase(it);
                finish(i, err, n);
                resume_peer(p->addr);
            }
        }
        return;
    }
    case Sink::unexpected:
        core_.deliver_unexpected(
            core_.unexpected_pool->make(p->addr, k.h.tag, std::move(k.sink_buf), k.h.size));
        k.sink_buf = {};
        return;
    case Sink::discard:
    case Sink::none:
        return;
    }
}

// Consumes staged bytes: headers and payloads.  Returns false when the
// connection closed or paused.
bool TcpMethod::parse(std::uint32_t c)
{
    Conn &k = *conns_[c];
    FrameLimits limits{core_.limits.eager, core_.limits.unexpected, chunk_size};
    while (!k.closed) {
        if (k.payload_left > 0 || k.sink != Sink::none) {
            const std::size_t avail = k.re - k.rb;
            const std::size_t n = std::min(avail, k.payload_left);
            if (n > 0) {
                const std::byte *src = k.stage.data() + k.rb;
                switch (k.sink) {
                case Sink::op:
                    copy_into_op(k.sink_op, k.sink_off, src, n);
                    break;
                case Sink::hello:
                case Sink::unexpected:
                    std::memcpy(k.sink_buf.data() + k.sink_off, src, n);
                    break;
                case Sink::early: {
                    Peer &p = *peer_ptr(k.peer);
                    if (const auto it = find_early(p, k.early_serial); it != p.early.end())
                        std::memcpy(it->data.data() + k.sink_off, src, n);
                    break;
                }
                default:
                    break;
                }
                k.sink_off += n;
                k.rb += n;
                k.payload_left -= n;
            }
            if (k.payload_left > 0)
                return true; // need more bytes
            payload_done(c);
            continue;
        }
        if (k.re - k.rb < frame_header_size)
            return true;
        FrameHeader h;
        const std::span<const std::byte, frame_header_size> hb(k.stage.data() + k.rb,
                                                               frame_header_size);
        if (const char *err = decode(hb, limits, h)) {
            close_conn(c, -EPROTO, err);
            return false;
        }
        if (k.peer == no_addr && h.type != FrameType::hello) {
            close_conn(c, -EPROTO, "first frame is not a hello");
            return false;
        }
        const Verdict v = on_header(c, h);
        if (v == Verdict::close) {
            close_conn(c, -EPROTO, "frame out of sequence");
            return false;
        }
        if (v == Verdict::pause) {
            k.paused = true;
            update_events(c);
            return false;
        }
        k.rb += frame_header_size;
        if (h.type == FrameType::eager || h.type == FrameType::rts || h.type == FrameType::direct) {
            // Counted when accepted (a paused header is parsed again).
            Peer &p = *peer_ptr(k.peer);
            if (k.remote_incarnation == p.incarnation)
                ++p.msgs_seen;
        }
        if (k.payload_left == 0 && k.sink != Sink::none)
            payload_done(c);
    }
    return false;
}

// Reads what the socket has, up to a bound so that one busy peer cannot
// starve the others.  Returns true when the socket is drained (EAGAIN), the
// connection closed or paused; false when input may remain.
bool TcpMethod::handle_readable(std::uint32_t c)
{
    Conn &k = *conns_[c];
    for (int round = 0; round < 16; ++round) {
        if (k.closed || k.paused)
            return true;
        ssize_t r = 0;
        std::size_t asked = 0;
        const bool direct = k.sink == Sink::op && k.rb == k.re && k.payload_left >= direct_read_min;
        if (direct) {
            // Large payloads go straight into the receive buffer.
            // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init): filled before use
            std::array<iovec, max_iov> iov;
            std::size_t left = k.payload_left;
            const std::size_t n = map_iov(op(k.sink_op).bufs, k.sink_off, left, iov);
            asked = k.payload_left - left;
            r = ::readv(k.fd.get(), iov.data(), static_cast<int>(n));
        } else {
            if (k.rb == k.re) {
                k.rb = k.re = 0;
            } else if (k.rb > 0 && k.stage.size() - k.re < frame_header_size) {
                std::memmove(k.stage.data(), k.stage.data() + k.rb, k.re - k.rb);
                k.re -= k.rb;
                k.rb = 0;
            }
            asked = k.stage.size() - k.re;
            r = ::recv(k.fd.get(), k.stage.data() + k.re, asked, 0);
        }
        if (r == 0) {
            close_conn(c, -ECONNRESET, "peer closed the connection");
            return true;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return true;
            close_conn(c, errno == ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET, errno_text(errno));
            return true;
        }
        const auto got = static_cast<std::size_t>(r);
        if (direct) {
            k.sink_off += got;
            k.payload_left -= got;
            core_.touch(k.sink_op);
            if (k.payload_left == 0)
                payload_done(c);
        } else {
            k.re += got;
        }
        if (!parse(c))
            return true;
        // A read shorter than asked emptied the socket's queue: data that
        // comes later wakes the engine again (epoll: level-triggered;
        // io_uring: the multishot poll posts a completion per wake-up), so
        // the EAGAIN read is not needed.  Under level-triggered readiness
        // any small read may stop here: epoll reports what is left.
        if (got < asked)
            return true;
        if (engine_->level_triggered() && !direct && got < stage_size / 2)
            return true;
    }
    return false;
}

void TcpMethod::progress(int timeout_ms)
{
    // Connections whose budget freed up, or that were left with unread
    // input, are served before sleeping.
    scratch_.clear();
    scratch_.insert(scratch_.end(), to_parse_.begin(), to_parse_.end());
    scratch_.insert(scratch_.end(), unread_.begin(), unread_.end());
    to_parse_.clear();
    unread_.clear();
    for (const std::uint32_t c : scratch_) {
        Conn &k = *conns_[c];
        if (k.closed || k.paused)
            continue;
        if (parse(c) && !handle_readable(c))
            unread_.push_back(c);
    }
    if (!unread_.empty() || !dirty_.empty())
        timeout_ms = 0;

    const std::size_t n = engine_->wait(events_, timeout_ms);
    for (std::size_t e = 0; e < n; ++e) {
        const std::uint64_t key = events_[e].key;
        const std::uint32_t what = events_[e].events;
        if ((key & listener_bit) != 0) {
            accept_all();
            continue;
        }
        if ((key & external_bit) != 0) {
            core_.external_readable(static_cast<int>(key & 0xffffffffU));
            continue;
        }
        if ((key & internal_bit) != 0) {
            core_.internal_ready = true; // another method's fd: it drains it next
            continue;
        }
        const auto c = static_cast<std::uint32_t>(key & 0xffffffffU);
        const auto gen = static_cast<std::uint32_t>(key >> 32U);
        if (c >= conns_.size() || conns_[c]->closed || conns_[c]->generation != gen)
            continue;
        Conn &k = *conns_[c];
        if (k.connecting && (what & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0) {
            int err = 0;
            socklen_t len = sizeof err;
            ::getsockopt(k.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
            if (err != 0) {
                close_conn(c, -err, errno_text(err));
                continue;
            }
            on_connected(c);
            flush(c);
        }
        if ((what & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0 && !k.paused &&
            std::find(unread_.begin(), unread_.end(), c) == unread_.end()) {
            if (!handle_readable(c))
                unread_.push_back(c);
        }
        if (!k.closed && (what & EPOLLOUT) != 0)
            flush(c);
    }
    ping_waiting_peers();
    // Frames queued while handling input (CTS, data chunks, ...) go out now
    // rather than after another trip through the engine.
    while (!dirty_.empty()) {
        scratch_.swap(dirty_); // both keep their capacity
        dirty_.clear();
        for (const std::uint32_t c : scratch_) {
            if (!conns_[c]->closed && !conns_[c]->tx.empty())
                flush(c);
        }
    }
}

int TcpMethod::watch_external(int fd)
{
    if (std::find(externals_.begin(), externals_.end(), fd) != externals_.end())
        return -EEXIST;
    if (externals_.size() >= max_external_fds)
        return -ENOSPC;
    engine_->add(fd, external_bit | static_cast<std::uint64_t>(fd), EPOLLIN);
    externals_.push_back(fd);
    return 0;
}

int TcpMethod::unwatch_external(int fd)
{
    const auto it = std::find(externals_.begin(), externals_.end(), fd);
    if (it == externals_.end())
        return -ENOENT;
    engine_->remove(fd, external_bit | static_cast<std::uint64_t>(fd));
    externals_.erase(it);
    return 0;
}

int TcpMethod::watch_internal(int fd)
{
    engine_->add(fd, internal_bit | static_cast<std::uint64_t>(fd), EPOLLIN);
    return 0;
}

int TcpMethod::unwatch_internal(int fd)
{
    engine_->remove(fd, internal_bit | static_cast<std::uint64_t>(fd));
    return 0;
}

Clock::time_point TcpMethod::peer_alive(std::uint32_t i)
{
    Peer *p = peer_ptr(core_.ops[i].peer);
    if (p == nullptr || p->tx_conn == no_index || conns_[p->tx_conn]->closed ||
        !conns_[p->tx_conn]->hello_received)
        return Clock::time_point::min();
    const auto now = Clock::now();
    const auto idle = core_.limits.idle_timeout;
    const auto grace = idle / 4;
    if (now - p->heard < idle)
        return p->heard;
    if (p->pinged > p->heard) {
        // A ping is out.  Unanswered for a quarter of the timeout: the peer
        // is hung or gone.  Younger: look again when it is that old.
        if (now - p->pinged >= grace)
            return Clock::time_point::min();
        return p->pinged + grace - idle;
    }
    // Silent, and not asked since: this side did not run for a while (its
    // application was busy), so the periodic pings did not go out.  Ask now
    // and give the answer a quarter of the timeout.
    ping(*p, now);
    return now + grace - idle;
}

void TcpMethod::ping(Peer &p, Clock::time_point now)
{
    FrameHeader h;
    h.type = FrameType::ping;
    gossip::debug(gossip::Mask::tcp, "pinging {}: silent for {} ms with ops waiting", p.hostport,
                  std::chrono::duration_cast<std::chrono::milliseconds>(now - p.heard).count());
    queue_control(p, h);
    p.pinged = now;
}

// A peer with ops waiting on it that has been silent for a quarter of the
// idle timeout gets a ping; its BMI answers whenever its application makes
// progress, so a live but slow peer (a server busy with a long fsync, a
// client between requests) keeps its ops alive while a hung or vanished
// one lets them fail after the idle timeout (Core::expire_idle_ops).
void TcpMethod::ping_waiting_peers()
{
    // The interval follows the current idle timeout (set_info may change it).
    const auto now = Clock::now();
    const auto quarter = core_.limits.idle_timeout / 4;
    if (now - last_ping_round_ < quarter / 2)
        return;
    last_ping_round_ = now;
    for (const auto &pp : peers_) {
        if (!pp || pp->ops.empty() || pp->tx_conn == no_index)
            continue;
        Peer &p = *pp;
        const Conn &k = *conns_[p.tx_conn];
        // One ping at a time: an unanswered one is what peer_alive() times.
        if (k.closed || !k.hello_received || now - p.heard < quarter || p.pinged > p.heard)
            continue;
        ping(p, now);
    }
}

} // namespace

std::unique_ptr<Method> make_method(Core &core, std::string_view engine)
{
    return std::make_unique<TcpMethod>(core, engine);
}

} // namespace bmi::tcp
