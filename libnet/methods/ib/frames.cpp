// The ib method's frames: every message and control frame is a SEND into
// one of the peer's pre-registered receive buffers, allowed only while the
// connection has credits (returned piggybacked, or in a credit frame when
// many are owed).  Small messages go eagerly as one frame; large ones as
// an RTS naming the sender's memory (rdma.cpp).  On arrival a frame is
// matched to a posted receive, kept as early, or held (its buffer with it)
// when a budget is exhausted; frames behind a held one wait, so messages
// stay in order.
#include "../../core/net.hpp"
#include "method.hpp"
#include "pvfs/gossip.hpp"
#include "wire.hpp"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace bmi::ib {

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
        // Until the handshake is over only its frames (hello, AUTH) go:
        // the peer closes a connection on anything else before the proof
        // (docs/bmi.md "Authentication").  Other control frames (NACK,
        // CANCEL, PING, credits) wait in the queue for the end.
        auto next = k.ctl.begin();
        if (!ready_to_send(k)) {
            next = std::ranges::find_if(k.ctl, [](const Frame &f) {
                return f.h.type == Msg::hello || f.h.type == Msg::auth;
            });
        }
        if (next != k.ctl.end()) {
            // The hello goes first even before the peer's; other control
            // frames need a credit beyond the last, which only a credit
            // update may take (it is what unblocks the peer).
            const Msg t = next->h.type;
            const std::uint32_t need = t == Msg::credit ? 1 : 2;
            if (k.credits < need && !(t == Msg::hello && k.credits >= 1))
                break;
            const auto at = next - k.ctl.begin();
            Frame f = std::move(*next);
            k.ctl.erase(next);
            if (!post_frame(c, f)) {
                if (k.state == ConnState::closed)
                    return false;
                k.ctl.insert(k.ctl.begin() + at, std::move(f));
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

IbMethod::Verdict IbMethod::deliver(std::uint32_t c, std::uint32_t w)
{
    Conn &k = *conns_[c];
    const Wr &r = wrs_[w];
    const std::span<const std::byte> msg(r.dev->recv.addr(r.buf), r.len);
    Header h;
    decode(msg, h); // validated on arrival
    const std::span<const std::byte> payload = msg.subspan(header_size);
    if (k.refusing)
        return Verdict::consumed; // its refusal is on the way: nothing it sends counts
    if (h.type == Msg::hello) {
        if (k.hello_seen) {
            close_conn(c, -EPROTO, "second hello");
            return Verdict::closed;
        }
        return on_hello(c, h, payload);
    }
    if (h.type == Msg::auth)
        return on_auth(c, h, payload);
    // Nothing but the handshake before it is over (docs/bmi.md
    // "Authentication"): an accepted connection has no peer until then.
    if (!k.hello_seen || k.peer == no_addr || k.hs.authenticating()) {
        close_conn(c, -EPROTO, "message before the handshake ended");
        return Verdict::closed;
    }
    Peer &p = peer_of(k.peer);
    switch (h.type) {
    case Msg::hello:
    case Msg::auth:
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

} // namespace bmi::ib
