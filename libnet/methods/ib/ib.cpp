// The ib method: BMI over reliable-connected queue pairs, connections made
// on demand with rdma_cm.  Small messages are SENDs into pre-registered
// receive buffers (a shared receive queue where the device has one) under
// credit flow control; large ones are a rendezvous in which the receiver
// RDMA-READs straight from the sender's memory into its own.  docs/bmi.md
// ("The ib method") describes the protocol and its limits.
//
// This file: the method object, its devices and listeners, its peers and
// the life of its ops (post, cancel, finish).  connection.cpp makes the
// connections, frames.cpp sends and receives frames under credits, rdma.cpp
// moves bulk data by RDMA, memory.cpp registers memory and progress.cpp
// runs the completion queues; method.hpp declares what they share.
#include "ib.hpp"

#include "../../core/net.hpp"
#include "method.hpp"
#include "pvfs/gossip.hpp"
#include "wire.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace bmi::ib {

using net::split_hostport;

namespace {

int set_nonblock(int fd)
{
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

std::shared_ptr<ibv_pd> alloc_pd(ibv_context *verbs)
{
    ibv_pd *pd = ibv_alloc_pd(verbs);
    if (pd == nullptr)
        return nullptr;
    return {pd, [](ibv_pd *p) { ibv_dealloc_pd(p); }};
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

} // namespace

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
    const std::uint32_t slot = addr_slot(addr);
    if (slot == 0 || slot > peers_.size() || !peers_[slot - 1] || peers_[slot - 1]->addr != addr)
        return nullptr;
    return peers_[slot - 1].get();
}

Peer &IbMethod::peer_of(Addr addr)
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

void IbMethod::add_fd(int fd)
{
    set_nonblock(fd);
    core_.watch_internal(fd);
    fds_.push_back(fd);
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

std::unique_ptr<Method> make_method(Core &core)
{
    return std::make_unique<IbMethod>(core);
}

} // namespace bmi::ib
