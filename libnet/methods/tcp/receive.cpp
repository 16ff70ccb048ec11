// The TCP method's receive path: bytes read into a staging buffer (or
// straight into a large receive), headers decoded and validated, each frame
// type handled by its own function chosen through a table, payloads routed
// to their sink.  Everything here comes from the network before anything
// vouches for it: a frame that breaks the protocol closes its connection.
#include "../../core/net.hpp"
#include "method.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace bmi::tcp {

using net::errno_text;

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
// A READY that is not kept is still accepted: it only saves a round trip.
TcpMethod::Verdict TcpMethod::on_ready(std::uint32_t c, Peer &p, const FrameHeader &h)
{
    const Conn &k = *conns_[c];
    if (k.remote_incarnation != p.incarnation)
        return Verdict::accept; // announced by a process that has since restarted
    const std::uint64_t seen = h.cookie;
    if (seen > p.msgs_sent || p.msgs_sent - seen >= ready_window)
        return Verdict::accept;
    for (std::uint64_t n = seen + 1; n <= p.msgs_sent; ++n) {
        if (p.sent_tags[n % ready_window] == h.tag)
            return Verdict::accept;
    }
    std::erase_if(p.readies, [&](const Ready &r) { return r.tag == h.tag; });
    if (p.readies.size() >= max_readies)
        p.readies.erase(p.readies.begin());
    p.readies.push_back({h.tag, h.cookie2, h.size});
    return Verdict::accept;
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
        // One still held on its send queue is parsed once that drains
        // (its stop clock goes on: it is still not read).
        if (k.paused) {
            const bool was_reading = k.reading();
            k.paused = false;
            reading_changed(c, was_reading);
        }
    }
}

// ------------------------------------------------------------ frame headers

// The handler of each frame type that may follow the hello, by type value.
// A type without one closes the connection; decode() has already refused
// the values that name no type, and the hello is handled before the peer
// is known (on_header).
constinit const TcpMethod::FrameHandlers TcpMethod::frame_handlers_ = [] {
    FrameHandlers t{};
    const auto at = [&t](FrameType type) -> FrameHandler & {
        return t.at(static_cast<std::size_t>(type));
    };
    at(FrameType::eager) = &TcpMethod::on_eager;
    at(FrameType::unexpected) = &TcpMethod::on_unexpected;
    at(FrameType::rts) = &TcpMethod::on_rts;
    at(FrameType::cts) = &TcpMethod::on_cts;
    at(FrameType::data) = &TcpMethod::on_data;
    at(FrameType::nack) = &TcpMethod::on_nack;
    at(FrameType::cancel) = &TcpMethod::on_cancel;
    at(FrameType::ping) = &TcpMethod::on_ping;
    at(FrameType::pong) = &TcpMethod::on_pong;
    at(FrameType::ready) = &TcpMethod::on_ready;
    // Matched like an eager message: the sender checked that the announced
    // receive is the first this message can match, and if that receive was
    // cancelled meanwhile, FIFO order still holds.
    at(FrameType::direct) = &TcpMethod::on_eager;
    return t;
}();

// A decoded header: the hello first and only once, then every frame from
// the peer the hello named, each to its type's handler.  Sets up the sink
// for the payload, if any.
TcpMethod::Verdict TcpMethod::on_header(std::uint32_t c, const FrameHeader &h)
{
    Conn &k = *conns_[c];
    // Until the handshake is over only its frames pass; anything else
    // closes the connection, unread (docs/bmi.md "Authentication").
    if (!k.hello_received) {
        if (h.type == FrameType::auth)
            return on_auth_header(c, h);
        if (h.type != FrameType::hello || k.hello_seen)
            return Verdict::close;
    } else if (h.type == FrameType::hello || h.type == FrameType::auth) {
        return Verdict::close;
    }
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
    const auto type = static_cast<std::size_t>(h.type);
    if (type >= frame_handlers_.size() || frame_handlers_[type] == nullptr)
        return Verdict::close;
    return (this->*frame_handlers_[type])(c, *p, h);
}

// EAGER and DIRECT: into the posted receive, else buffered as early within
// the peer's budget (over it, the connection pauses until the budget frees).
TcpMethod::Verdict TcpMethod::on_eager(std::uint32_t c, Peer &p, const FrameHeader &h)
{
    Conn &k = *conns_[c];
    std::uint32_t i = no_index;
    if (match_recv(p, h.tag, i)) {
        sink_matched_eager(c, i, h);
    } else {
        if (const Verdict v = charge_early(p, h.size + early_entry_charge); v != Verdict::accept)
            return v;
        sink_early_eager(c, p, h);
    }
    k.payload_left = h.size;
    return Verdict::accept;
}

// Room for an early message of charge bytes: over the peer's budget its
// connection pauses until that frees (its own receives drain it); over the
// budget of all peers together, which a flood of fresh URLs would fill, the
// frame is not buffered and its connection closes.
TcpMethod::Verdict TcpMethod::charge_early(Peer &p, std::size_t charge)
{
    if (p.early_bytes + charge > early_peer_bytes && p.early_bytes > 0) {
        pause_why_ = "its early messages fill the peer's budget (4 MiB) and none was received";
        return Verdict::pause;
    }
    if (early_total_ + charge > core_.limits.early_total_bytes)
        return over_budget("early messages over the global budget (early_total_bytes)");
    return Verdict::accept;
}

TcpMethod::Verdict TcpMethod::over_budget(const char *why)
{
    close_why_ = why;
    close_error_ = -ENOBUFS;
    return Verdict::close;
}

std::deque<Early>::iterator TcpMethod::drop_early(Peer &p, std::deque<Early>::iterator it)
{
    p.early_bytes -= std::min(p.early_bytes, it->charge);
    early_total_ -= std::min(early_total_, it->charge);
    return p.early.erase(it);
}

// A payload larger than its receive fails the receive, not the connection.
void TcpMethod::sink_matched_eager(std::uint32_t c, std::uint32_t i, const FrameHeader &h)
{
    Conn &k = *conns_[c];
    Op &o = op(i);
    o.conn = c;
    o.mstate = st_recv_eager;
    core_.touch(i);
    if (h.size > o.total) {
        k.sink = Sink::discard;
        finish(i, -EMSGSIZE, 0);
        return;
    }
    k.sink = Sink::op;
    k.sink_op = i;
    k.sink_op_id = o.id;
    k.sink_off = 0;
    o.actual = h.size;
}

void TcpMethod::sink_early_eager(std::uint32_t c, Peer &p, const FrameHeader &h)
{
    Conn &k = *conns_[c];
    Early e;
    e.serial = ++p.early_serial;
    e.tag = h.tag;
    e.type = FrameType::eager;
    e.size = h.size;
    e.charge = h.size + early_entry_charge;
    e.conn = c;
    e.conn_generation = k.generation;
    e.arrived = Clock::now();
    // The payload's bytes are allocated as they arrive (parse), not on the
    // word of the header.
    p.early_bytes += e.charge;
    early_total_ += e.charge;
    p.early.push_back(std::move(e));
    k.sink = Sink::early;
    k.early_serial = p.early.back().serial;
    k.sink_off = 0;
}

// UNEXPECTED: into a buffer of the unexpected pool, within the peer's
// budget of bytes the user has not released yet.
TcpMethod::Verdict TcpMethod::on_unexpected(std::uint32_t c, Peer &p, const FrameHeader &h)
{
    if (core_.unexpected_pool->outstanding(p.addr) + h.size > core_.limits.unexpected_peer_bytes &&
        core_.unexpected_pool->outstanding(p.addr) > 0) {
        pause_why_ = "its unexpected messages the application holds fill the peer's budget "
                     "(unexpected_peer_bytes) and none was freed";
        return Verdict::pause;
    }
    // The peer's budget holds while its connections last; a fresh URL per
    // connection gets a fresh one, so all peers together have one too.
    if (core_.unexpected_pool->total() + unexpected_inflight_ + h.size >
        core_.limits.unexpected_total_bytes)
        return over_budget("unexpected messages over the global budget (unexpected_total_bytes)");
    Conn &k = *conns_[c];
    k.sink = Sink::unexpected;
    // A reused buffer, or none: parse grows it as the payload arrives.
    k.sink_buf = core_.unexpected_pool->take(0);
    k.unexpected_reserved = h.size;
    unexpected_inflight_ += h.size;
    k.sink_off = 0;
    k.payload_left = h.size;
    return Verdict::accept;
}

// RTS: answered at once if the receive is posted, else kept as early until
// it is (post() answers then).
TcpMethod::Verdict TcpMethod::on_rts(std::uint32_t c, Peer &p, const FrameHeader &h)
{
    std::uint32_t i = no_index;
    if (match_recv(p, h.tag, i)) {
        answer_rts(c, p, i, h);
        return Verdict::accept;
    }
    if (const Verdict v = charge_early(p, early_entry_charge); v != Verdict::accept)
        return v;
    Early e;
    e.serial = ++p.early_serial;
    e.tag = h.tag;
    e.type = FrameType::rts;
    e.size = h.size;
    e.cookie = h.cookie;
    e.charge = early_entry_charge;
    e.conn = c;
    e.conn_generation = conns_[c]->generation;
    e.arrived = Clock::now();
    p.early_bytes += e.charge;
    early_total_ += e.charge;
    p.early.push_back(std::move(e));
    return Verdict::accept;
}

// CTS if the message fits the receive, else NACK and the receive fails.
void TcpMethod::answer_rts(std::uint32_t c, Peer &p, std::uint32_t i, const FrameHeader &h)
{
    Op &o = op(i);
    o.conn = c;
    o.mstate = st_recv_rndv;
    core_.touch(i);
    if (h.size > o.total) {
        FrameHeader n;
        n.type = FrameType::nack;
        n.cookie = h.cookie;
        n.status = EMSGSIZE;
        queue_control(p, n);
        finish(i, -EMSGSIZE, 0);
        return;
    }
    o.remote_cookie = h.cookie;
    o.actual = h.size;
    o.total = h.size;
    FrameHeader n;
    n.type = FrameType::cts;
    n.cookie = h.cookie;
    n.cookie2 = o.id;
    queue_control(p, n);
}

// CTS: the receiver is ready; the first data chunk goes.
TcpMethod::Verdict TcpMethod::on_cts(std::uint32_t /*c*/, Peer &p, const FrameHeader &h)
{
    Op *o = core_.find(h.cookie);
    if (o == nullptr || o->state != OpState::active || o->peer != p.addr ||
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

// DATA: a rendezvous chunk for the receive it names.  A chunk past the
// message's announced end breaks the protocol.
TcpMethod::Verdict TcpMethod::on_data(std::uint32_t c, Peer &p, const FrameHeader &h)
{
    Conn &k = *conns_[c];
    Op *o = core_.find(h.cookie2);
    k.payload_left = h.size;
    if (o == nullptr || o->state != OpState::active || o->peer != p.addr ||
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

// NACK: the receiver refused or ended a rendezvous; the send fails with
// its errno.
TcpMethod::Verdict TcpMethod::on_nack(std::uint32_t /*c*/, Peer &p, const FrameHeader &h)
{
    Op *o = core_.find(h.cookie);
    if (o != nullptr && o->state == OpState::active && o->peer == p.addr &&
        (o->mstate == st_send_rts || o->mstate == st_send_data)) {
        const std::uint32_t i = core_.index_of(h.cookie);
        detach_tx(i);
        finish(i, -h.status, o->done_bytes);
    }
    return Verdict::accept;
}

// CANCEL: the sender ended a rendezvous, before or after it was matched.
TcpMethod::Verdict TcpMethod::on_cancel(std::uint32_t /*c*/, Peer &p, const FrameHeader &h)
{
    if (h.cookie2 != 0) {
        Op *o = core_.find(h.cookie2);
        if (o != nullptr && o->state == OpState::active && o->peer == p.addr &&
            o->kind == OpKind::recv && o->remote_cookie == h.cookie) {
            finish(core_.index_of(h.cookie2), -ECANCELED, o->done_bytes);
        }
        return Verdict::accept;
    }
    for (auto it = p.early.begin(); it != p.early.end(); ++it) {
        if (it->type == FrameType::rts && it->cookie == h.cookie) {
            drop_early(p, it);
            resume_peer(p.addr);
            return Verdict::accept;
        }
    }
    // Already matched: the receive waits for data that will not come.
    for (std::uint32_t i = p.ops.front(); i != no_index; i = p.ops.next(core_.ops, i)) {
        if (op(i).kind == OpKind::recv && op(i).mstate == st_recv_rndv &&
            op(i).remote_cookie == h.cookie) {
            finish(i, -ECANCELED, op(i).done_bytes);
            break;
        }
    }
    return Verdict::accept;
}

TcpMethod::Verdict TcpMethod::on_ping(std::uint32_t /*c*/, Peer &p, const FrameHeader & /*h*/)
{
    FrameHeader pong;
    pong.type = FrameType::pong;
    queue_control(p, pong);
    return Verdict::accept;
}

// A pong was heard (on_header noted when): that is all it is for.
// NOLINTNEXTLINE(readability-convert-member-functions-to-static): called through the table
TcpMethod::Verdict TcpMethod::on_pong(std::uint32_t /*c*/, Peer & /*p*/, const FrameHeader & /*h*/)
{
    return Verdict::accept;
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
    k.frame_started = {};
    k.frame_bytes = 0;
    switch (sink) {
    case Sink::hello:
        if (k.h.type == FrameType::auth)
            auth_payload(c);
        else
            hello_payload(c);
        return;
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
                drop_early(*p, it);
                finish(i, err, n);
                resume_peer(p->addr);
            }
        }
        return;
    }
    case Sink::unexpected:
        unexpected_inflight_ -= std::min(unexpected_inflight_, k.unexpected_reserved);
        k.unexpected_reserved = 0;
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
        // Sealed: only opened bytes are parsed; when they run out, the
        // next frame is opened (whole: none of it is used before).
        if (k.rx_sealed && k.rb == k.ro) {
            const int opened = open_next(c);
            if (opened < 0)
                return false;
            if (opened == 0)
                return true;
        }
        const std::size_t end = k.rx_sealed ? k.ro : k.re;
        if (k.payload_left > 0 || k.sink != Sink::none) {
            const std::size_t avail = end - k.rb;
            const std::size_t n = std::min(avail, k.payload_left);
            if (n > 0) {
                const std::byte *src = k.stage.data() + k.rb;
                switch (k.sink) {
                case Sink::op:
                    copy_into_op(k.sink_op, k.sink_off, src, n);
                    break;
                case Sink::hello:
                    std::memcpy(k.sink_buf.data() + k.sink_off, src, n);
                    break;
                case Sink::unexpected:
                    // Grown as bytes arrive (geometrically: resize keeps
                    // the capacity's doubling).
                    if (k.sink_buf.size() < k.sink_off + n)
                        k.sink_buf.resize(k.sink_off + n);
                    std::memcpy(k.sink_buf.data() + k.sink_off, src, n);
                    break;
                case Sink::early: {
                    Peer &p = *peer_ptr(k.peer);
                    if (const auto it = find_early(p, k.early_serial); it != p.early.end()) {
                        if (it->data.size() < k.sink_off + n)
                            it->data.resize(k.sink_off + n);
                        std::memcpy(it->data.data() + k.sink_off, src, n);
                    }
                    break;
                }
                default:
                    break;
                }
                k.sink_off += n;
                k.rb += n;
                k.payload_left -= n;
            }
            if (k.payload_left > 0) {
                if (k.rx_sealed) { // a frame is opened whole: cannot happen
                    close_conn(c, -EPROTO, "a sealed frame shorter than its payload");
                    return false;
                }
                return true; // need more bytes
            }
            payload_done(c);
            continue;
        }
        if (end - k.rb < frame_header_size)
            return true;
        if (!send_queue_room(c))
            return false; // closed, or held until the peer reads
        FrameHeader h;
        const std::span<const std::byte, frame_header_size> hb(k.stage.data() + k.rb,
                                                               frame_header_size);
        if (const char *err = decode(hb, limits, h)) {
            close_conn(c, -EPROTO, err);
            return false;
        }
        if (k.peer == no_addr && h.type != FrameType::hello && h.type != FrameType::auth) {
            close_conn(c, -EPROTO, "first frame is not a hello");
            return false;
        }
        const Verdict v = on_header(c, h);
        if (v == Verdict::close) {
            const char *why = close_why_ != nullptr ? close_why_ : "frame out of sequence";
            const int error = close_why_ != nullptr ? close_error_ : -EPROTO;
            close_why_ = nullptr;
            if (error == -ENOBUFS) {
                const std::string who = core_.url_of(k.peer);
                log_refusal(budget_log_, "closing connection to " + who + ": " + why);
            }
            close_conn(c, error, why);
            return false;
        }
        if (v == Verdict::pause) {
            const bool was_reading = k.reading();
            k.paused = true;
            k.stopped_why = pause_why_;
            reading_changed(c, was_reading);
            return false;
        }
        k.rb += frame_header_size;
        k.frame_bytes = frame_header_size + k.payload_left;
        if (h.type == FrameType::eager || h.type == FrameType::rts || h.type == FrameType::direct) {
            // Counted when accepted (a paused header is parsed again).
            Peer &p = *peer_ptr(k.peer);
            if (k.remote_incarnation == p.incarnation)
                ++p.msgs_seen;
        }
        if (k.payload_left == 0 && k.sink != Sink::none)
            payload_done(c);
        else if (k.payload_left == 0) {
            k.frame_started = {}; // a frame without payload: done
            k.frame_bytes = 0;
        }
    }
    return false;
}

// The sealed frame at k.ro, if all of it is in: its header (in the clear)
// checked as any header is, then the whole frame opened in place.  One
// that does not open closes the connection (its ops fail with EBADMSG);
// nothing of it was used.
int TcpMethod::open_next(std::uint32_t c)
{
    Conn &k = *conns_[c];
    constexpr std::size_t head = sealed_overhead + frame_header_size;
    if (k.rb != k.ro || k.re - k.ro < head)
        return 0;
    const FrameLimits limits{core_.limits.eager, core_.limits.unexpected, chunk_size};
    FrameHeader h;
    const std::span<const std::byte, frame_header_size> hb(k.stage.data() + k.ro + sealed_overhead,
                                                           frame_header_size);
    if (const char *err = decode(hb, limits, h)) {
        close_conn(c, -EPROTO, err);
        return -1;
    }
    const std::uint64_t n = wire_payload(h);
    if (k.re - k.ro < head + n)
        return 0;
    if (!k.sealer->open(k.stage.data() + k.ro, n)) {
        const std::optional<Identity> id = core_.identity_of(k.peer);
        log_refusal(seal_log_,
                    fmt::format("closing connection to {} (key {}): a sealed frame did not open "
                                "(altered, replayed or out of order on the way)",
                                core_.url_of(k.peer), id ? id->name : std::string("?")));
        close_conn(c, -EBADMSG, "a sealed frame did not open");
        return -1;
    }
    k.rb = k.ro + sealed_overhead;
    k.ro += head + n;
    return 1;
}

// Before a read of sealed input: the frame being received must fit in the
// stage whole (it is opened in one piece), so the stage is compacted and
// grown as needed; it grows with the bytes that came, never on the word of
// a header alone beyond the frame limits.
void TcpMethod::sealed_room(Conn &k)
{
    constexpr std::size_t head = sealed_overhead + frame_header_size;
    if (k.rb == k.re)
        k.rb = k.ro = k.re = 0;
    std::size_t need = head;
    if (k.re - k.ro >= head) {
        FrameHeader h;
        const FrameLimits limits{core_.limits.eager, core_.limits.unexpected, chunk_size};
        const std::span<const std::byte, frame_header_size> hb(
            k.stage.data() + k.ro + sealed_overhead, frame_header_size);
        if (decode(hb, limits, h) == nullptr)
            need += wire_payload(h);
    }
    // Room for this frame from ro, and for a useful read after it.
    const std::size_t want = need + std::size_t{16} * 1024;
    if (k.rb > 0 && k.stage.size() - k.ro < want) {
        std::memmove(k.stage.data(), k.stage.data() + k.rb, k.re - k.rb);
        k.ro -= k.rb;
        k.re -= k.rb;
        k.rb = 0;
    }
    if (k.stage.size() - k.ro < want)
        k.stage.resize(std::max(k.ro + want, std::min(stage_size, k.stage.size() * 2)));
}

// Reads what the socket has, up to a bound so that one busy peer cannot
// starve the others.  Returns true when the socket is drained (EAGAIN), the
// connection closed or paused; false when input may remain.
bool TcpMethod::handle_readable(std::uint32_t c)
{
    Conn &k = *conns_[c];
    for (int round = 0; round < 16; ++round) {
        if (k.closed || !k.reading())
            return true;
        // The stage comes with bytes, small, and doubles (up to stage_size,
        // once the hello is in) when a read fills it: a connection costs
        // what it sends, not what its headers announce.
        if (k.stage.empty())
            k.stage.resize(hello_stage_size);
        ssize_t r = 0;
        std::size_t asked = 0;
        // Never when sealed: a payload is opened before it is anyone's.
        const bool direct =
            !k.rx_sealed && k.sink == Sink::op && k.rb == k.re && k.payload_left >= direct_read_min;
        if (direct) {
            // Large payloads go straight into the receive buffer.
            // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init): filled before use
            std::array<iovec, max_iov> iov;
            std::size_t left = k.payload_left;
            const std::size_t n = map_iov(op(k.sink_op).bufs, k.sink_off, left, iov);
            asked = k.payload_left - left;
            r = ::readv(k.fd.get(), iov.data(), static_cast<int>(n));
        } else if (k.rx_sealed) {
            sealed_room(k);
            asked = k.stage.size() - k.re;
            r = ::recv(k.fd.get(), k.stage.data() + k.re, asked, 0);
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
            if (got == asked && k.hello_received && k.stage.size() < stage_size)
                k.stage.resize(std::min(stage_size, k.stage.size() * 2));
        }
        if (!parse(c)) {
            if (!k.closed)
                note_frame_progress(k, true);
            return true;
        }
        note_frame_progress(k, true);
        // A read shorter than asked emptied the socket's queue: data that
        // comes later wakes the engine again (epoll: level-triggered;
        // io_uring: the multishot poll posts a completion per wake-up), so
        // the EAGAIN read is not needed.  Not once the peer has hung up: a
        // read also comes up short at its FIN, or before a reset's error,
        // and io_uring reported that end once, maybe in the very completion
        // this read answers; only the next recv (0 or the error) closes.
        // Under level-triggered readiness any small read may stop here:
        // epoll reports what is left.
        if (got < asked && !k.hung_up)
            return true;
        if (engine_->level_triggered() && !direct && got < k.stage.size() / 2)
            return true;
    }
    return false;
}

} // namespace bmi::tcp
