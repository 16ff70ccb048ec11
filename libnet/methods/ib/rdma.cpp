// The ib method's bulk data by RDMA: the receiver of an RTS registers its
// buffers and READs the sender's segments in chunks (at most rd_depth in
// flight per connection), then answers FIN, or NACK when it fails or is
// cancelled.  expose shows a peer memory of ours; one-sided get and put
// READ or WRITE a peer's exposed memory the same way, with nobody to tell.
#include "../../core/net.hpp"
#include "method.hpp"
#include "wire.hpp"

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace bmi::ib {

// ------------------------------------------------------------- rendezvous

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

// ------------------------------------------------------- one-sided transfers

namespace {

// What an Exposure keeps: the registrations its peer was shown.
struct ExposureState {
    std::shared_ptr<ibv_pd> pd; // first: outlives mrs
    std::vector<Mr> mrs;
    std::vector<std::shared_ptr<CachedMr>> cached;
};

} // namespace

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
        if (ibv_mr *mr = registry_->find(a, b.size, dev->pd.get(), true)) {
            rkey = mr->rkey;
        } else if (frames_visible()) {
            int error = 0;
            auto e = cached_mr(*dev, a, b.size, true, error);
            if (!e)
                return error;
            rkey = e->mr->rkey;
            state->cached.push_back(std::move(e));
        } else {
            ++registrations_;
            Mr own(ibv_reg_mr(dev->pd.get(), b.data, b.size, expose_access));
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

} // namespace bmi::ib
