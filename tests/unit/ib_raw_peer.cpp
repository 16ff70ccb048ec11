// A raw ib peer for tests (ib_raw_peer.hpp).
#include "ib_raw_peer.hpp"

#include "wire.hpp"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>

#include <array>
#include <cstring>
#include <thread>

namespace pvfs::test {

namespace ib = bmi::ib;

namespace {

constexpr int depth = 16;
constexpr std::size_t buf_size = 4096;
constexpr std::uint64_t rdma_wr_id = 5000;

struct ChannelFree {
    void operator()(rdma_event_channel *c) const noexcept { rdma_destroy_event_channel(c); }
};
struct IdFree {
    void operator()(rdma_cm_id *id) const noexcept
    {
        if (id->qp != nullptr)
            rdma_destroy_qp(id);
        rdma_destroy_id(id);
    }
};
struct PdFree {
    void operator()(ibv_pd *pd) const noexcept { ibv_dealloc_pd(pd); }
};
struct CqFree {
    void operator()(ibv_cq *cq) const noexcept { ibv_destroy_cq(cq); }
};
struct MrFree {
    void operator()(ibv_mr *mr) const noexcept { ibv_dereg_mr(mr); }
};

} // namespace

// Members in the order they must go: the queue pair (with the id) before
// the memory and the completion queue it names.
struct IbRawPeer::State {
    std::function<void()> run;
    std::unique_ptr<rdma_event_channel, ChannelFree> channel;
    // Receive buffers, send buffers, then one buffer for RDMA.
    std::vector<std::byte> memory = std::vector<std::byte>((std::size_t{2} * depth + 1) * buf_size);
    std::unique_ptr<ibv_pd, PdFree> pd;
    std::unique_ptr<ibv_mr, MrFree> mr;
    std::unique_ptr<ibv_cq, CqFree> cq;
    std::unique_ptr<rdma_cm_id, IdFree> id;
    bool up = false;
    bool down = false;
    std::uint32_t server_buf = 0;
    std::vector<std::byte> server_pdata;
    int next_send = 0;
    int rdma_status = -1; // the last RDMA's completion, -1 none yet
    std::vector<std::vector<std::byte>> received;

    std::byte *recv_buf(int i) { return memory.data() + static_cast<std::size_t>(i) * buf_size; }
    std::byte *send_buf(int i)
    {
        return memory.data() + static_cast<std::size_t>(depth + i) * buf_size;
    }
    bool post_recv(int i)
    {
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(recv_buf(i)),
                    static_cast<std::uint32_t>(buf_size), mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = static_cast<std::uint64_t>(i);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr *bad = nullptr;
        return ibv_post_recv(id->qp, &wr, &bad) == 0;
    }
    // One look at the connection: its events and completions.
    void poll()
    {
        rdma_cm_event *ev = nullptr;
        while (rdma_get_cm_event(channel.get(), &ev) == 0) {
            const rdma_cm_event_type t = ev->event;
            if (t == RDMA_CM_EVENT_ESTABLISHED) {
                ib::ConnectData cd;
                // rdma_cm_event's param is a union; conn is this event's member.
                const rdma_conn_param &cp =
                    ev->param.conn; // NOLINT(cppcoreguidelines-pro-type-union-access)
                const std::span<const std::byte> pdata(
                    static_cast<const std::byte *>(cp.private_data), cp.private_data_len);
                if (ib::decode_connect(pdata, cd) == nullptr)
                    server_buf = cd.buf_size;
                server_pdata.assign(pdata.begin(), pdata.end());
                up = true;
            } else if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_REJECTED ||
                       t == RDMA_CM_EVENT_UNREACHABLE || t == RDMA_CM_EVENT_CONNECT_ERROR) {
                down = true;
            }
            rdma_ack_cm_event(ev);
            if (t == RDMA_CM_EVENT_ADDR_RESOLVED)
                rdma_resolve_route(id.get(), 2000);
            else if (t == RDMA_CM_EVENT_ROUTE_RESOLVED)
                connect();
            else if (t == RDMA_CM_EVENT_ADDR_ERROR || t == RDMA_CM_EVENT_ROUTE_ERROR)
                down = true;
        }
        if (!cq)
            return;
        std::array<ibv_wc, 16> wcs{};
        const int n = ibv_poll_cq(cq.get(), static_cast<int>(wcs.size()), wcs.data());
        for (int i = 0; i < n; ++i) {
            const ibv_wc &wc = wcs[static_cast<std::size_t>(i)];
            if (wc.wr_id == rdma_wr_id)
                rdma_status = static_cast<int>(wc.status);
            if (wc.status != IBV_WC_SUCCESS) {
                down = down || wc.status != IBV_WC_WR_FLUSH_ERR;
                continue;
            }
            if (wc.opcode == IBV_WC_RECV) {
                const auto b = static_cast<int>(wc.wr_id);
                received.emplace_back(recv_buf(b), recv_buf(b) + wc.byte_len);
                post_recv(b);
            }
        }
    }
    void connect()
    {
        pd.reset(ibv_alloc_pd(id->verbs));
        cq.reset(pd ? ibv_create_cq(id->verbs, 4 * depth, nullptr, nullptr, 0) : nullptr);
        mr.reset(cq ? ibv_reg_mr(pd.get(), memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE)
                    : nullptr);
        ibv_qp_init_attr a{};
        a.send_cq = cq.get();
        a.recv_cq = cq.get();
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = depth;
        a.cap.max_recv_wr = depth;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        if (!mr || rdma_create_qp(id.get(), pd.get(), &a) != 0) {
            down = true;
            return;
        }
        for (int i = 0; i < depth; ++i)
            post_recv(i);
        std::array<std::byte, ib::connect_data_size> mine{};
        ib::encode_connect({depth, static_cast<std::uint32_t>(buf_size)}, mine);
        rdma_conn_param param{};
        param.private_data = mine.data();
        param.private_data_len = static_cast<std::uint8_t>(mine.size());
        param.responder_resources = 1;
        param.initiator_depth = 1;
        param.retry_count = 7;
        param.rnr_retry_count = 7;
        if (rdma_connect(id.get(), &param) != 0)
            down = true;
    }
};

IbRawPeer::IbRawPeer(const std::string &host, std::uint16_t port, std::function<void()> run,
                     std::chrono::milliseconds within)
    : s_(std::make_unique<State>())
{
    s_->run = std::move(run);
    s_->channel.reset(rdma_create_event_channel());
    if (!s_->channel)
        return;
    ::fcntl(s_->channel->fd, F_SETFL, ::fcntl(s_->channel->fd, F_GETFL) | O_NONBLOCK);
    rdma_cm_id *raw = nullptr;
    if (rdma_create_id(s_->channel.get(), &raw, nullptr, RDMA_PS_TCP) != 0)
        return;
    s_->id.reset(raw);
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo *res = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0)
        return;
    const int rc = rdma_resolve_addr(s_->id.get(), nullptr, res->ai_addr, 2000);
    ::freeaddrinfo(res);
    if (rc != 0)
        return;
    const auto until = std::chrono::steady_clock::now() + within;
    while (!s_->up && !s_->down && std::chrono::steady_clock::now() < until) {
        s_->run();
        s_->poll();
    }
}

IbRawPeer::~IbRawPeer()
{
    if (s_ && s_->id && s_->up && !s_->down)
        rdma_disconnect(s_->id.get());
}

bool IbRawPeer::connected() const noexcept
{
    return s_->up && !s_->down;
}

bool IbRawPeer::send(std::span<const std::byte> bytes)
{
    if (!connected() || bytes.size() > buf_size || s_->next_send >= depth)
        return false;
    const int i = s_->next_send++;
    std::memcpy(s_->send_buf(i), bytes.data(), bytes.size());
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(s_->send_buf(i)),
                static_cast<std::uint32_t>(bytes.size()), s_->mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 1000U + static_cast<std::uint64_t>(i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr *bad = nullptr;
    return ibv_post_send(s_->id->qp, &wr, &bad) == 0;
}

bool IbRawPeer::wait_disconnected(std::chrono::milliseconds within)
{
    const auto until = std::chrono::steady_clock::now() + within;
    while (!s_->down && std::chrono::steady_clock::now() < until) {
        s_->run();
        s_->poll();
    }
    return s_->down;
}

const std::vector<std::vector<std::byte>> &IbRawPeer::received() const noexcept
{
    return s_->received;
}

bool IbRawPeer::wait_received(std::size_t n, std::chrono::milliseconds within)
{
    const auto until = std::chrono::steady_clock::now() + within;
    while (s_->received.size() < n && !s_->down && std::chrono::steady_clock::now() < until) {
        s_->run();
        s_->poll();
    }
    return s_->received.size() >= n;
}

std::vector<std::byte> IbRawPeer::server_connect_data() const
{
    return s_->server_pdata;
}

std::span<std::byte> IbRawPeer::rdma_buffer() const noexcept
{
    return {s_->memory.data() + std::size_t{2} * depth * buf_size, buf_size};
}

int IbRawPeer::rdma(bool write, std::uint64_t addr, std::uint32_t rkey, std::size_t len,
                    std::chrono::milliseconds within)
{
    if (!connected() || len > buf_size)
        return -1;
    s_->rdma_status = -1;
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(rdma_buffer().data()),
                static_cast<std::uint32_t>(len), s_->mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = rdma_wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    auto &r = wr.wr.rdma; // NOLINT(cppcoreguidelines-pro-type-union-access): this op's member
    r.remote_addr = addr;
    r.rkey = rkey;
    ibv_send_wr *bad = nullptr;
    if (ibv_post_send(s_->id->qp, &wr, &bad) != 0)
        return -1;
    const auto until = std::chrono::steady_clock::now() + within;
    while (s_->rdma_status < 0 && std::chrono::steady_clock::now() < until) {
        s_->run();
        s_->poll();
    }
    return s_->rdma_status;
}

} // namespace pvfs::test
