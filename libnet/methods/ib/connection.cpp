// The ib method's connections: made on demand over rdma_cm (address, then
// route, then connect; or a request accepted), each with its reliable-
// connected queue pair, receive buffers posted for the peer's credits and
// the hello queued as its first frame.  Closing one frees what its work
// requests named and fails its peer's ops.
#include "../../core/net.hpp"
#include "method.hpp"
#include "pvfs/gossip.hpp"
#include "wire.hpp"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bmi::ib {

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
    k.opened = Clock::now();
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
    // The first frame introduces this side (with an authenticator, the
    // accepting side's waits for the client's: auth.cpp).
    return start_handshake(c);
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
    if (k.accepted) {
        --accepted_open_;
        if (const auto it = per_source_.find(k.source);
            it != per_source_.end() && --it->second == 0)
            per_source_.erase(it);
        k.accepted = false;
    }
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

void IbMethod::forget_messages(Addr addr)
{
    if (Peer *p = peer_ptr(addr)) {
        p->early.clear(); // its RTS offers died with its connections
        p->early_bytes = 0;
    }
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
        // Known before the hello, which the handshake MACs it with.
        encode_connect({credits_per_conn, static_cast<std::uint32_t>(k.dev->recv.buf_size())},
                       k.cm_mine);
        if (const int rc = create_qp(c); rc != 0) {
            close_conn(c, rc, "cannot set up the queue pair");
            return;
        }
        std::uint8_t timeout = ack_timeout;
        rdma_set_option(k.id.get(), RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
                        sizeof timeout);
        rdma_conn_param param{};
        param.private_data = k.cm_mine.data();
        param.private_data_len = static_cast<std::uint8_t>(k.cm_mine.size());
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
            // librdmacm moved the queue pair to RTS with remote read and
            // write allowed: none until the server proved itself (unless
            // the handshake is already over: raised then, not lowered).
            if (!k.qp_open && !set_qp_access(c, 0))
                return;
            ConnectData cd;
            if (const char *err = decode_connect(pdata, cd)) {
                close_conn(c, -EPROTO, err);
                return;
            }
            k.credits = cd.credits;
            k.remote_buf = cd.buf_size;
            std::copy_n(pdata.begin(), connect_data_size, k.cm_theirs.begin());
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

namespace {

// The source IP of an rdma_cm id's peer, as the connection caps count it
// (the port is the peer's to choose).
std::string source_of(const sockaddr *sa)
{
    if (sa == nullptr)
        return {};
    if (sa->sa_family == AF_INET) {
        const auto &in = reinterpret_cast<const sockaddr_in &>(*sa);
        return {reinterpret_cast<const char *>(&in.sin_addr), sizeof in.sin_addr};
    }
    if (sa->sa_family == AF_INET6) {
        const auto &in6 = reinterpret_cast<const sockaddr_in6 &>(*sa);
        return {reinterpret_cast<const char *>(&in6.sin6_addr), sizeof in6.sin6_addr};
    }
    return {};
}

} // namespace

void IbMethod::on_connect_request(rdma_cm_id *id, std::span<const std::byte> pdata,
                                  std::uint8_t initiator, std::uint8_t responder)
{
    // The caps (docs/bmi.md "Limits"): a request over them is rejected
    // before a queue pair, receive buffers or completion queue entries are
    // spent on it.  Anyone who reaches the port can send one.
    std::string source = source_of(rdma_get_peer_addr(id));
    const auto from = per_source_.find(source);
    const std::size_t from_count = from == per_source_.end() ? 0 : from->second;
    if (accepted_open_ >= core_.limits.max_connections ||
        from_count >= core_.limits.max_connections_per_address) {
        ++refused_;
        log_rated(caps_log_, fmt::format("connection from {} refused: {} connections open "
                                         "(max_connections {}), {} from that address (max {})",
                                         net::sockaddr_url("ib", rdma_get_peer_addr(id)),
                                         accepted_open_, core_.limits.max_connections, from_count,
                                         core_.limits.max_connections_per_address));
        rdma_reject(id, nullptr, 0);
        rdma_destroy_id(id);
        return;
    }
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
    k.accepted = true;
    ++accepted_open_;
    ++per_source_[source];
    k.source = std::move(source);
    k.credits = cd.credits;
    k.remote_buf = cd.buf_size;
    std::copy_n(pdata.begin(), connect_data_size, k.cm_theirs.begin());
    int err = 0;
    k.dev = device_for(id->verbs, err);
    if (k.dev != nullptr)
        encode_connect({credits_per_conn, static_cast<std::uint32_t>(k.dev->recv.buf_size())},
                       k.cm_mine);
    if (k.dev == nullptr || (err = create_qp(c)) != 0) {
        rdma_reject(id, nullptr, 0);
        close_conn(c, err, "cannot accept");
        return;
    }
    std::uint8_t timeout = ack_timeout;
    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout);
    rdma_conn_param param{};
    param.private_data = k.cm_mine.data();
    param.private_data_len = static_cast<std::uint8_t>(k.cm_mine.size());
    param.responder_resources = static_cast<std::uint8_t>(std::min<int>(
        {k.dev->attr.max_qp_rd_atom, static_cast<int>(max_reads), std::max<int>(initiator, 1)}));
    param.initiator_depth = static_cast<std::uint8_t>(
        std::min<int>({k.dev->attr.max_qp_init_rd_atom, static_cast<int>(max_reads),
                       std::max<int>(responder, 1)}));
    param.retry_count = retry_count;
    param.rnr_retry_count = 7;
    k.rd_depth = std::max<std::uint32_t>(1, param.initiator_depth);
    if (rdma_accept(id, &param) != 0) {
        close_conn(c, -errno, "accept failed");
        return;
    }
    // rdma_accept moved the queue pair to RTS with the access rdma_cm
    // grants (remote write, and read with responder resources), re-applied
    // at RTR whatever was set before; taken away at once, before any event
    // of the peer's is read: a peer that proved nothing may not READ or
    // WRITE this side's memory, even with a guessed rkey.
    set_qp_access(c, 0);
}

bool IbMethod::set_qp_access(std::uint32_t c, unsigned flags)
{
    Conn &k = *conns_[c];
    ibv_qp_attr a{};
    a.qp_access_flags = flags;
    if (const int rc = ibv_modify_qp(k.id->qp, &a, IBV_QP_ACCESS_FLAGS); rc != 0) {
        close_conn(c, rc > 0 ? -rc : -EIO,
                   "cannot set the queue pair's access: " + errno_text(rc > 0 ? rc : EIO));
        return false;
    }
    return true;
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

} // namespace bmi::ib
