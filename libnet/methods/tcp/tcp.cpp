// BMI's TCP method.  Connections are made on first use and shared by both
// directions; each side sends on one connection per peer (the first that
// came up), so messages stay ordered per peer.  Small messages go eagerly,
// large ones by an explicit rendezvous (RTS -> receive posted -> CTS -> data
// in chunks sent round-robin with other traffic), so a large message never
// holds up small ones.  The protocol is described in docs/bmi.md.
//
// This file: the method object, its connections, the life of its ops and
// the progress loop; send.cpp has the send queues, receive.cpp the frames
// that arrive (method.hpp declares what they share).
#include "tcp.hpp"

#include "../../core/net.hpp"
#include "method.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/unique_fd.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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

} // namespace

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
    const std::uint32_t slot = addr_slot(addr);
    if (slot == 0 || slot > peers_.size() || !peers_[slot - 1] || peers_[slot - 1]->addr != addr)
        return nullptr;
    return peers_[slot - 1].get();
}

Peer &TcpMethod::peer_of(Addr addr)
{
    const std::uint32_t n = addr_slot(addr);
    if (n > peers_.size())
        peers_.resize(n);
    auto &slot = peers_[n - 1];
    if (!slot || slot->addr != addr) { // empty, or the slot's previous peer
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
    k.connecting = k.hello_received = k.paused = k.send_held = false;
    k.hs.reset();
    k.hello_seen = false;
    k.hello_out.clear();
    k.pending_remote = {};
    k.closed = false;
    k.accepted = false;
    k.source.clear();
    k.frame_started = k.frame_progress = k.stopped_since = {};
    k.frame_bytes = 0;
    k.unexpected_reserved = 0;
    k.events = 0;
    k.tx.clear();
    k.tx_bytes = 0;
    k.rb = k.re = 0;
    k.sink = Sink::none;
    k.sink_op = no_index;
    k.payload_left = 0;
    k.write_blocked = false;
    k.hung_up = false;
    k.sealer.reset();
    k.rx_sealed = false;
    k.ro = 0;
    k.out.clear();
    k.out_off = 0;
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
    std::uint32_t want = k.reading() ? static_cast<std::uint32_t>(EPOLLIN) : 0U;
    if (k.connecting || (k.write_blocked && k.has_output()))
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
    if (const int auth = start_client_handshake(c, p.addr); auth != 0) {
        close_conn(c, auth, {});
        return auth; // no key for this credential: nothing is sent
    }
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
            // The caps: a connection over them is closed at once (reset,
            // so it leaves nothing behind), before anything is allocated.
            std::string source;
            if (sa.ss_family == AF_INET) {
                const auto &in = reinterpret_cast<const sockaddr_in &>(sa);
                source.assign(reinterpret_cast<const char *>(&in.sin_addr), sizeof in.sin_addr);
            } else if (sa.ss_family == AF_INET6) {
                const auto &in6 = reinterpret_cast<const sockaddr_in6 &>(sa);
                source.assign(reinterpret_cast<const char *>(&in6.sin6_addr), sizeof in6.sin6_addr);
            }
            const auto from = per_source_.find(source);
            const std::size_t from_count = from == per_source_.end() ? 0 : from->second;
            if (accepted_open_ >= core_.limits.max_connections ||
                from_count >= core_.limits.max_connections_per_address) {
                const linger reset{1, 0};
                ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
                ++refused_;
                log_refusal(
                    refused_log_,
                    fmt::format("connection from {} refused: {} connections open "
                                "(max_connections {}), {} from that address (max {})",
                                net::sockaddr_url("tcp", reinterpret_cast<const sockaddr *>(&sa)),
                                accepted_open_, core_.limits.max_connections, from_count,
                                core_.limits.max_connections_per_address));
                continue;
            }
            tune_socket(fd.get());
            const std::uint32_t c = new_conn(std::move(fd));
            Conn &k = *conns_[c];
            k.accepted = true;
            k.opened = Clock::now();
            ++accepted_open_;
            ++per_source_[source];
            k.source = std::move(source);
            // With an authenticator the client speaks first: this side's
            // hello carries the challenge to its hello.
            if (core_.authenticator)
                k.hs.expect_client(core_);
            else
                queue_hello(c);
            update_events(c);
        }
    }
}

bool TcpMethod::RateLog::due(Clock::time_point now)
{
    if (last != Clock::time_point{} && now - last < std::chrono::minutes(1)) {
        ++unlogged;
        return false;
    }
    last = now;
    return true;
}

void TcpMethod::log_refusal(RateLog &log, std::string_view what)
{
    if (!log.due(Clock::now()))
        return;
    if (log.unlogged == 0)
        gossip::warning(gossip::Mask::tcp, "{}", what);
    else
        gossip::warning(gossip::Mask::tcp, "{} ({} more like it in the last minute)", what,
                        log.unlogged);
    log.unlogged = 0;
}

// Events not logged in the last minute are counted once it is over, even if
// no new one comes to carry the count.
void TcpMethod::flush_rate_logs(Clock::time_point now)
{
    const auto flush = [now](RateLog &log, std::string_view what) {
        if (log.unlogged == 0 || now - log.last < std::chrono::minutes(1))
            return;
        gossip::warning(gossip::Mask::tcp, "{} {} in the last minute", log.unlogged, what);
        log.unlogged = 0;
        log.last = now;
    };
    flush(refused_log_, "more connections refused at accept (connection caps)");
    flush(deadline_log_, "more connections closed for a missed deadline");
    flush(budget_log_, "more connections closed over a global message budget");
    flush(auth_log_, "more connections refused by authentication");
    flush(seal_log_, "more connections closed for a sealed frame that did not open");
}

// The deadlines (docs/bmi.md "Limits"): a connection that misses one is
// closed.
// - The hello (Limits::hello_timeout), from the accept.
// - A frame begun: no byte of it for frame_timeout, or not complete within
//   frame_timeout plus its size at frame_min_rate.  Progress, not a total:
//   a large frame over a slow link keeps its connection as long as it
//   moves at that rate (a total of 30 s cut off a 512 KiB chunk below
//   17 KiB/s), while a slowloris that sends a byte now and then stays no
//   longer than a prompt sender of the same frame would plus the grace.
//   A connection this side stopped reading waits for this side, not for
//   its peer: its clocks restart when reading resumes.  A peer the user
//   looked up (a server of this client, say) is not held to it: its
//   application may pause between BMI calls in the middle of a frame, and
//   its ops have the idle timeout.
// - Not read for the idle timeout: paused on a budget that did not free up
//   (unexpected messages the application holds), or held on a send queue
//   its peer did not drain.  Its peer's pings went unanswered that long,
//   so its ops to this side have failed by then anyway.
void TcpMethod::check_deadlines(Clock::time_point now)
{
    using std::chrono::milliseconds;
    for (std::uint32_t c = 0; c < conns_.size(); ++c) {
        Conn &k = *conns_[c];
        if (k.closed)
            continue;
        std::string why;
        if (!k.reading()) {
            if (now - k.stopped_since >= core_.limits.idle_timeout)
                why = fmt::format("not read for {} ms: {}", core_.limits.idle_timeout.count(),
                                  k.stopped_why);
        } else if ((k.accepted || k.hs.authenticating()) && !k.hello_received &&
                   now - k.opened >= core_.limits.hello_timeout) {
            // The whole handshake, not just the hello.
            why = fmt::format("no hello (handshake) within {} ms",
                              core_.limits.hello_timeout.count());
        } else if (k.frame_started != Clock::time_point{} &&
                   (k.peer == no_addr || !core_.pinned(k.peer))) {
            const std::uint64_t bytes = std::max(k.frame_bytes, frame_header_size);
            const milliseconds allowed =
                core_.limits.frame_timeout +
                milliseconds(bytes * 1000 /
                             std::max<std::uint64_t>(core_.limits.frame_min_rate, 1));
            if (now - k.frame_progress >= core_.limits.frame_timeout)
                why = fmt::format("no byte of a frame begun for {} ms",
                                  core_.limits.frame_timeout.count());
            else if (now - k.frame_started >= allowed)
                why = fmt::format("a frame of {} bytes not finished within {} ms (frame_min_rate "
                                  "{} bytes/s)",
                                  bytes, allowed.count(), core_.limits.frame_min_rate);
        }
        if (why.empty())
            continue;
        // Bytes waiting unread in a connection being read are this side's
        // delay (a stall of its application, or the bound on reads per
        // call), not the peer's: they are read first and the deadline
        // looked at again next round.
        int waiting = 0;
        if (k.reading() && ::ioctl(k.fd.get(), FIONREAD, &waiting) == 0 && waiting > 0) {
            if (std::find(unread_.begin(), unread_.end(), c) == unread_.end())
                unread_.push_back(c);
            continue;
        }
        const std::string who = k.peer != no_addr ? core_.url_of(k.peer) : "an unidentified peer";
        log_refusal(deadline_log_, fmt::format("closing connection to {}: {}", who, why));
        close_conn(c, -ETIMEDOUT, why);
    }
}

void TcpMethod::reading_changed(std::uint32_t c, bool was_reading)
{
    Conn &k = *conns_[c];
    if (k.closed || k.reading() == was_reading)
        return;
    if (!k.reading()) {
        k.stopped_since = Clock::now();
        ++stopped_;
    } else {
        --stopped_;
        // It waited for this side, not for its peer: the frame's clocks
        // restart, and what is staged or waiting in the socket is read.
        k.frame_started = k.frame_progress = k.mid_frame() ? Clock::now() : Clock::time_point{};
        to_parse_.push_back(c);
    }
    update_events(c);
}

void TcpMethod::expire_early(Clock::time_point now)
{
    if (early_total_ == 0)
        return;
    const auto ttl = core_.limits.idle_timeout;
    for (const auto &pp : peers_) {
        if (!pp || pp->early.empty())
            continue;
        Peer &p = *pp;
        std::size_t dropped = 0;
        for (auto it = p.early.begin(); it != p.early.end();) {
            if (now - it->arrived < ttl)
                break; // arrival order: the rest are younger
            // A receive waits for the rest of this payload: its own
            // deadline (and the connection's) ends it.
            if (it->waiting_op != no_index || (it->type != FrameType::rts && !it->complete)) {
                ++it;
                continue;
            }
            if (it->type == FrameType::rts && p.tx_conn != no_index && !conns_[p.tx_conn]->closed &&
                conns_[p.tx_conn]->hello_received) {
                // The sender waits for a CTS: it fails now rather than at
                // its own idle timeout.
                FrameHeader h;
                h.type = FrameType::nack;
                h.cookie = it->cookie;
                h.status = ETIMEDOUT;
                queue_frame(p.tx_conn, h, no_index, 0, 0);
            }
            it = drop_early(p, it);
            ++dropped;
        }
        if (dropped == 0)
            continue;
        gossip::debug(gossip::Mask::tcp,
                      "{} early messages from {} dropped: not received within {} ms", dropped,
                      core_.url_of(p.addr), ttl.count());
        resume_peer(p.addr); // a connection paused on them reads again
        if (p.conns.empty())
            retiring_.push_back(p.addr);
    }
}

std::uint64_t TcpMethod::counter(Info key) const
{
    switch (key) {
    case Info::refused_connections:
        return refused_;
    case Info::early_bytes:
        return early_total_;
    case Info::unexpected_bytes:
        return unexpected_inflight_;
    case Info::queued_bytes: {
        std::uint64_t n = 0;
        for (const auto &k : conns_)
            n += k->closed ? 0 : k->tx_bytes;
        return n;
    }
    default:
        return 0;
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
    if (!k.reading())
        --stopped_;
    if (k.send_held)
        --held_;
    k.paused = k.send_held = false;
    if (k.accepted) {
        --accepted_open_;
        if (const auto it = per_source_.find(k.source);
            it != per_source_.end() && --it->second == 0)
            per_source_.erase(it);
        k.accepted = false;
    }
    unexpected_inflight_ -= std::min(unexpected_inflight_, k.unexpected_reserved);
    k.unexpected_reserved = 0;
    k.frame_started = {};
    k.frame_bytes = 0;
    // Owned bytes die with the connection; ops referenced by items are failed below.
    k.tx.clear();
    k.tx_bytes = 0;
    k.sink = Sink::none;
    k.sink_op = no_index;
    // A closed slot keeps no buffers: it may stay unused for long.
    std::vector<std::byte>().swap(k.sink_buf);
    std::vector<std::byte>().swap(k.stage);
    k.rb = k.re = 0;
    k.sealer.reset(); // its keys wiped
    k.rx_sealed = false;
    k.ro = 0;
    SendBytes().swap(k.out);
    k.out_off = 0;
    free_conns_.push_back(c);
    if (Peer *p = peer_ptr(k.peer)) {
        std::erase(p->conns, c);
        if (p->tx_conn == c)
            p->tx_conn = no_index;
        if (!p->conns.empty())
            release_sends(p->conns.front()); // those held on this one's queue
        fail_peer_ops(*p, error);
        // A complete eager message stays: its sender's op completed when
        // the frame was written, so nobody sends it again, and its peer may
        // be reconnecting (or already have, racing this close) to post the
        // next request; the early budgets and the idle timeout bound it
        // (expire_early).  An RTS (its send failed with this connection)
        // and a payload cut short die here.
        bool dropped = false;
        for (auto it = p->early.begin(); it != p->early.end();) {
            if (it->conn == c && it->conn_generation == k.generation &&
                (it->type == FrameType::rts || !it->complete)) {
                it = drop_early(*p, it);
                dropped = true;
            } else {
                ++it;
            }
        }
        if (dropped)
            resume_peer(p->addr);
        if (p->conns.empty())
            retiring_.push_back(p->addr);
    }
}

// The user freed an unexpected message: its peer may read again, or, with
// no connection left, go.
void TcpMethod::unexpected_released(Addr addr)
{
    resume_peer(addr);
    if (const Peer *p = peer_ptr(addr); p != nullptr && p->conns.empty())
        retiring_.push_back(addr);
}

bool TcpMethod::peer_idle(const Peer &p) const
{
    return p.conns.empty() && p.ops.empty() && p.early.empty() &&
           core_.unexpected_pool->outstanding(p.addr) == 0 && !core_.pinned(p.addr);
}

// Peers that came only by connecting here (never looked up by the user) go
// with their last connection, once their ops have failed and the user has
// freed their unexpected messages: a flood of fresh URLs leaves nothing.
void TcpMethod::retire_peers()
{
    while (!retiring_.empty()) {
        const Addr a = retiring_.back();
        retiring_.pop_back();
        Peer *p = peer_ptr(a);
        if (p == nullptr || !peer_idle(*p))
            continue;
        peers_[addr_slot(a) - 1].reset();
        core_.forget_peer(a);
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
    retiring_.push_back(addr);
}

void TcpMethod::forget_messages(Addr addr)
{
    Peer *p = peer_ptr(addr);
    if (p == nullptr)
        return;
    // Its connections are closed and its ops failed (drop_peer): no
    // receive waits on any of these any more.
    while (!p->early.empty())
        drop_early(*p, p->early.begin());
    p->held_control.clear();
    retiring_.push_back(addr);
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
                drop_early(p, it);
                resume_peer(p.addr);
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
            drop_early(p, it);
            resume_peer(p.addr);
            p.ops.remove(core_.ops, i);
            o.in_peer_list = false;
            if (p.conns.empty())
                retiring_.push_back(p.addr); // held only by what it had sent
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

// ---------------------------------------------------------------- progress

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
        if (k.closed || !k.reading())
            continue;
        const bool open = parse(c);
        if (!k.closed)
            note_frame_progress(k, false);
        if (open && !handle_readable(c))
            unread_.push_back(c);
    }
    if (!unread_.empty() || !dirty_.empty())
        timeout_ms = 0;

    // Deadlines are checked at a quarter of the shorter one (at most once a
    // second): while connections that proved nothing are open, early
    // messages wait to expire or connections are not read, the sleep ends
    // in time for the check.
    const auto check_every =
        std::clamp(std::min({core_.limits.hello_timeout, core_.limits.frame_timeout,
                             core_.limits.idle_timeout}) /
                       4,
                   std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
    if ((accepted_open_ > 0 || early_total_ > 0 || stopped_ > 0) && timeout_ms != 0) {
        const auto until = std::chrono::duration_cast<std::chrono::milliseconds>(
            next_deadline_check_ - Clock::now());
        const int cap = static_cast<int>(std::max<long long>(until.count() + 1, 0));
        timeout_ms = timeout_ms < 0 ? cap : std::min(timeout_ms, cap);
    }

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
        // The peer's FIN, a reset or an error: permanent, and reported once
        // by an edge-triggered engine, so handle_readable reads to the end.
        if ((what & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0)
            k.hung_up = true;
        if (!k.reading() && (what & (EPOLLERR | EPOLLHUP)) != 0) {
            // Not watched for input, yet both engines report an error or
            // hang-up (epoll by level: at once again, forever, if it is
            // not handled).  The peer is gone: the connection goes now,
            // with its slot and caps; complete early messages stay.
            close_conn(c, -ECONNRESET, "connection reset while not read");
            continue;
        }
        if ((what & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0 && k.reading() &&
            std::find(unread_.begin(), unread_.end(), c) == unread_.end()) {
            if (!handle_readable(c))
                unread_.push_back(c);
        }
        if (!k.closed && (what & EPOLLOUT) != 0)
            flush(c);
    }
    ping_waiting_peers();
    if (const auto after = Clock::now(); after >= next_deadline_check_) {
        next_deadline_check_ = after + check_every;
        // Expiry first: a connection paused on early messages that expire
        // now reads again rather than missing its deadline.
        expire_early(after);
        check_deadlines(after);
        flush_rate_logs(after);
    }
    retire_peers();
    // Frames queued while handling input (CTS, data chunks, ...) go out now
    // rather than after another trip through the engine.
    while (!dirty_.empty()) {
        scratch_.swap(dirty_); // both keep their capacity
        dirty_.clear();
        for (const std::uint32_t c : scratch_) {
            if (!conns_[c]->closed && conns_[c]->has_output())
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

std::unique_ptr<Method> make_method(Core &core, std::string_view engine)
{
    return std::make_unique<TcpMethod>(core, engine);
}

} // namespace bmi::tcp
