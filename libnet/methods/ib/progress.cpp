// The ib method's work requests and completions: receive buffers posted
// and recycled, the completion queues polled and each completion handed to
// its handler; then the progress loop (rdma_cm and device events, the
// completion channels, connections with frames to post), sleeping and
// polling between calls, and the pings that keep an idle peer's ops alive.
#include "method.hpp"
#include "pvfs/gossip.hpp"
#include "wire.hpp"

#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace bmi::ib {

namespace {

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

} // namespace

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
        if (k.refusing && k.ctl.empty() && k.sq_free >= k.sq_size) {
            // The refusal has gone: now the connection may.
            close_conn(c, k.refuse_error, "refused by authentication");
            return;
        }
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
    check_handshakes(Clock::now());
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

} // namespace bmi::ib
