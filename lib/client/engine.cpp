// The request engine (engine.hpp) and client::Loop.
#include "engine.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <ctime>
#include <type_traits>
#include <utility>

#include "pvfs/auth.hpp"
#include "pvfs/gossip.hpp"

namespace pvfs::client {

using detail::Batch;
using detail::OnceOp;
using detail::Rpc;
using gossip::Mask;

namespace {

// Bulk data moves on proto::data_tag() of the request's bmi::Tag.
static_assert(std::is_same_v<bmi::Tag, decltype(proto::data_tag(0))>);
// Responses that carry little: attributes, statuses, empty bodies.
constexpr std::size_t small_response = std::size_t{16} * 1024U;
// How long a stopped request's cancelled transfers may take to end.
constexpr auto drain_time = std::chrono::seconds(5);
constexpr std::chrono::milliseconds first_backoff{100};
constexpr std::chrono::milliseconds max_backoff{10000};

std::int64_t realtime_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::uint64_t random_u64()
{
    std::uint64_t v = 0;
    while (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    }
    return v;
}

// How many bytes the response to `body` may need.
std::size_t response_capacity(const proto::RequestBody &body)
{
    if (std::holds_alternative<proto::GetConfigRequest>(body))
        return proto::max_config_text + 4096;
    if (const auto *r = std::get_if<proto::ReaddirRequest>(&body))
        return 4096 + std::size_t{r->max_entries} * (max_name + 64);
    if (std::holds_alternative<proto::XattrGetRequest>(body))
        return max_xattr_value + 4096;
    if (std::holds_alternative<proto::XattrListRequest>(body))
        return proto::max_xattr_names * (max_xattr_name + 8) + 4096;
    if (std::holds_alternative<proto::ListObjectsRequest>(body) ||
        std::holds_alternative<proto::ListHandlesRequest>(body))
        return proto::max_list_handles * 8 + 4096;
    // A read's answer carries a tag per chunk.
    if (const auto *r = std::get_if<proto::ReadRequest>(&body); r != nullptr && r->macs)
        return small_response + proto::max_chunk_macs * proto::chunk_mac_size;
    if (std::holds_alternative<proto::ObjectSizesRequest>(body))
        return proto::max_object_sizes * 8 + 4096;
    if (std::holds_alternative<proto::ReadlinkRequest>(body))
        return max_path + 4096;
    // handle, state, since and a 12-byte layout per orphan; handle and layout
    // per doomed handle of a close
    if (std::holds_alternative<proto::ListOrphansRequest>(body))
        return proto::max_list_orphans * (8 + 1 + 8 + 12) + 4096;
    if (std::holds_alternative<proto::CloseRequest>(body))
        return proto::max_close_handles * (8 + 12) + 4096;
    // op, three counts and the buckets per op (proto::OpCounters)
    if (const auto *s = std::get_if<proto::StatusRequest>(&body); s != nullptr && s->counters)
        return proto::max_counter_ops * (30 + proto::max_latency_buckets * 8) + 4096;
    return small_response;
}

// The binding of a request's chunk MACs (proto::ChunkBinding).
proto::ChunkBinding binding_of(const Rpc &r)
{
    proto::ChunkBinding b;
    b.is_write = r.is_write;
    b.fs_id = r.fs_id;
    b.server_index = static_cast<std::uint32_t>(r.server);
    if (const auto *read = std::get_if<proto::ReadRequest>(&r.req.body))
        b.handle = read->handle;
    else if (const auto *write = std::get_if<proto::WriteRequest>(&r.req.body))
        b.handle = write->handle;
    b.session = r.req.session;
    b.seq = r.req.seq;
    b.request_id = r.req.request_id;
    b.chunk_size = r.chunk;
    return b;
}

// The tag of every chunk of the request's stream (its memory pieces one
// after another, cut every r.chunk bytes), whether it moves as messages
// or by RDMA.
std::vector<proto::ChunkMac> stream_tags(const Rpc &r)
{
    const proto::ChunkBinding binding = binding_of(r);
    std::vector<proto::ChunkMac> tags;
    std::vector<std::span<const std::byte>> parts;
    std::size_t room = r.chunk;
    auto close_chunk = [&] {
        if (!parts.empty())
            tags.push_back(proto::chunk_mac(r.mac_key, binding, tags.size(), parts));
        parts.clear();
        room = r.chunk;
    };
    for (const bmi::MutableBuffer &piece : r.pieces) {
        std::size_t off = 0;
        while (off < piece.size) {
            const std::size_t n = std::min(room, piece.size - off);
            parts.emplace_back(static_cast<const std::byte *>(piece.data) + off, n);
            off += n;
            room -= n;
            if (room == 0)
                close_chunk();
        }
    }
    close_chunk();
    return tags;
}

// Chunk `index`'s tag over its pieces (the tag's own piece, last in the
// list when the tags go with the chunks, excluded).
template <class Buffer>
proto::ChunkMac chunk_tag(const Rpc &r, std::size_t index, const std::vector<Buffer> &chunk)
{
    const std::size_t n = chunk.size() - (r.tags_inline ? 1 : 0);
    std::vector<std::span<const std::byte>> parts;
    parts.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
        parts.emplace_back(static_cast<const std::byte *>(chunk[i].data), chunk[i].size);
    return proto::chunk_mac(r.mac_key, binding_of(r), index, parts);
}

// Write chunks a request keeps posted when each is tagged as it goes: one
// more than the data server's two chunk slots, so that a slot never waits
// for the client to tag the next chunk.
constexpr std::size_t chunk_window = 3;

} // namespace

// ---- Loop ------------------------------------------------------------------

std::shared_ptr<Loop> Loop::create(std::string &error)
{
    auto impl = std::make_unique<Impl>();
    impl->session = random_u64() | 1U;
    try {
        bmi::Options bo;
        bo.role = bmi::Role::client;
        impl->bmi = std::make_unique<bmi::Bmi>(bo);
        // Every connection proves the key of the client that makes it
        // (docs/security.md "Connections").
        impl->auth = std::make_shared<auth::Authenticator>();
        impl->bmi->set_authenticator(impl->auth);
    } catch (const std::exception &e) {
        error = std::string("cannot start BMI: ") + e.what();
        return nullptr;
    }
    impl->ctx = impl->bmi->open_context();
    // Requests carry small writes and xattr values inline: as large as the
    // servers accept, above BMI's default unexpected-message limit.
    if (const int rc = impl->bmi->set_info(bmi::Info::unexpected_limit, proto::max_request_bytes);
        rc != 0) {
        error = "cannot set BMI's message limit: " + error_text(rc);
        return nullptr;
    }
    return std::shared_ptr<Loop>(new Loop(std::move(impl)));
}

Loop::Loop(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}

Loop::~Loop()
{
    // Tasks still waiting here can never resume: their owners destroy them.
    for (auto &[op, r] : impl_->ops)
        static_cast<void>(impl_->bmi->cancel(op));
}

void Loop::poll(int max_idle_ms)
{
    impl_->poll(max_idle_ms);
}

int Loop::watch_fd(int fd)
{
    return impl_->bmi->watch_fd(fd);
}

int Loop::unwatch_fd(int fd)
{
    return impl_->bmi->unwatch_fd(fd);
}

void Loop::take_ready_fds(std::vector<int> &out)
{
    impl_->bmi->take_ready_fds(out);
}

void Loop::set_context(const Credentials &cred, std::uint64_t cancel_id)
{
    impl_->current = detail::Context{cred, cancel_id};
}

void Loop::set_context(const Credentials &cred, std::uint64_t cancel_id, OnceOp *once)
{
    impl_->current = detail::Context{cred, cancel_id, once};
}

std::size_t Loop::cancel(std::uint64_t cancel_id)
{
    return impl_->cancel(cancel_id);
}

std::size_t Loop::active() const noexcept
{
    return impl_->active.size();
}

std::size_t Loop::peak_active() const noexcept
{
    return impl_->peak_batches;
}

void Loop::register_memory(std::span<std::byte> memory)
{
    impl_->registrations.push_back(impl_->bmi->register_memory(memory.data(), memory.size()));
}

// ---- the engine ------------------------------------------------------------

bmi::Addr Loop::Impl::addr_of(const std::string &url, const proto::Key &key, int &error)
{
    // Per key: two clients of one loop with different keys (pvfsd, a mount
    // each) never share a connection, so each connection is one key's.
    const std::string credential = auth->add_client_key(key);
    const std::string name = url + '\x1f' + credential;
    if (const auto it = addrs.find(name); it != addrs.end())
        return it->second;
    int rc = 0;
    const bmi::Addr a = bmi->addr_lookup(url, credential, &rc);
    if (a == bmi::no_addr) {
        error = rc != 0 ? rc : -EHOSTUNREACH;
        return bmi::no_addr;
    }
    addrs.emplace(name, a);
    return a;
}

bmi::Tag Loop::Impl::take_tag()
{
    const bmi::Tag t = next_tag;
    next_tag = next_tag + 1 >= proto::data_tag_bit ? 1 : next_tag + 1;
    return t;
}

void Loop::Impl::track(Rpc &r, const bmi::Post &p, bool is_response)
{
    if (!p.ok()) {
        if (r.error == 0)
            r.error = p.error;
        return;
    }
    if (p.completed) {
        if (is_response) {
            r.response_arrived = true;
            r.response_size = p.actual_size;
        }
        return;
    }
    r.ops.push_back(p.op);
    ops.emplace(p.op, &r);
    if (is_response)
        r.recv_op = p.op;
}

void Loop::Impl::start(Rpc &r, const detail::Context &context)
{
    r.launched = true;
    r.req.request_id = ++request_id;
    r.req.session = session;
    r.req.seq = ++seq;
    r.req.time_ns = realtime_ns();
    r.req.cred = context.cred;
    // A retry keeps the ids of its first try.
    if (context.once != nullptr && context.once->client_id != 0 && !r.req.once.present() &&
        proto::changes_metadata(r.req.op()) && context.once->next_step < proto::max_steps) {
        OnceOp &op = *context.once;
        r.req.once = proto::OnceIds{op.client_id, op.slot, op.next_step++, op.xid};
    }
    r.tag = take_tag();
    r.started = Clock::now();
    int error = 0;
    const bmi::Addr to = addr_of(*r.url, *r.key, error);
    if (to == bmi::no_addr) {
        r.error = error;
        return;
    }
    r.to = to;
    attach_data(r, to);
    attach_macs(r, to);
    proto::encode(r.req, *r.key, r.out);
    if (const std::size_t want = response_capacity(r.req.body); r.in_capacity < want) {
        r.in = std::make_unique_for_overwrite<std::byte[]>(want); // NOLINT(*-avoid-c-arrays)
        r.in_capacity = want;
    }
    track(r, bmi->post_recv(to, r.in.get(), r.in_capacity, r.tag, nullptr, ctx), true);
    if (r.error != 0)
        return;
    track(r, bmi->post_sendunexpected(to, r.out.data(), r.out.size(), r.tag, nullptr, ctx), false);
    post_sends(r);
    post_recvs(r);
    if (r.error != 0)
        cancel_ops(r);
}

// A write's chunks, in stream order: all at once, or, when their tags go
// with them, chunk_window at a time, each tagged as it is posted, so that
// the first chunk leaves after one chunk's MAC rather than the request's.
void Loop::Impl::post_sends(Rpc &r)
{
    const bmi::Tag dtag = proto::data_tag(r.tag);
    while (r.error == 0 && !r.response_arrived && r.next_send < r.send_chunks.size() &&
           (!r.tags_inline || r.chunk_ops.size() < chunk_window)) {
        const std::size_t i = r.next_send++;
        if (r.tags_inline)
            r.chunk_tags.at(i) = chunk_tag(r, i, r.send_chunks[i]);
        const bmi::Post p = bmi->post_send_list(r.to, r.send_chunks[i], dtag, nullptr, ctx);
        track(r, p, false);
        if (p.ok() && !p.completed)
            r.chunk_ops.emplace_back(p.op, i);
    }
}

// A read's chunks, all posted at once: the server sends them in order.
void Loop::Impl::post_recvs(Rpc &r)
{
    const bmi::Tag dtag = proto::data_tag(r.tag);
    for (std::size_t i = 0; i < r.recv_chunks.size() && r.error == 0; ++i) {
        const bmi::Post p = bmi->post_recv_list(r.to, r.recv_chunks[i], dtag, nullptr, ctx);
        track(r, p, false);
        if (!p.ok())
            break;
        if (p.completed)
            chunk_arrived(r, i, p.actual_size);
        else
            r.chunk_ops.emplace_back(p.op, i);
    }
}

// A read chunk with its tag has arrived: checked before anything else
// arrives, so that the check overlaps the transfer of the chunks after it.
// A chunk altered on the way, or cut short, fails the request with EIO.
void Loop::Impl::chunk_arrived(Rpc &r, std::size_t index, std::size_t actual) const
{
    if (!r.tags_inline || r.error != 0)
        return;
    std::size_t expected = 0;
    for (const bmi::MutableBuffer &piece : r.recv_chunks.at(index))
        expected += piece.size;
    const auto *req = std::get_if<proto::ReadRequest>(&r.req.body);
    // The key of the connection the chunk came over (the request may have
    // been encoded before that connection was authenticated).
    const std::optional<bmi::Identity> id = bmi->peer_identity(r.to);
    if (actual != expected || id == std::nullopt || req == nullptr) {
        gossip::warning(Mask::client, "read from {}: chunk {} carried {} bytes, expected {}: EIO",
                        *r.url, index, actual, expected);
        r.error = -EIO;
        cancel_ops(r);
        return;
    }
    r.mac_key = id->session_key;
    if (!proto::same_mac(chunk_tag(r, index, r.recv_chunks[index]), r.chunk_tags.at(index))) {
        gossip::warning(Mask::client,
                        "read from {}: chunk {} of handle {:016x} fails its MAC (altered on "
                        "the way?): EIO",
                        *r.url, index, req->handle);
        r.error = -EIO;
        cancel_ops(r);
        return;
    }
    ++r.chunks_checked;
}

// Forgets the transfers of a try that is sent again.
void Loop::Impl::reset_transfer(Rpc &r)
{
    r.recv_op = bmi::no_op;
    r.response_size = 0;
    r.send_chunks.clear();
    r.recv_chunks.clear();
    r.exposure = bmi::Exposure{};
    r.tags_inline = false;
    r.chunk_tags.clear();
    r.chunk_ops.clear();
    r.next_send = 0;
    r.chunks_checked = 0;
}

// How a read's or write's data moves: exposed to the server, which moves
// it by RDMA, or (over tcp, or when the memory cannot be exposed) as bulk
// chunks of the request's stream.
void Loop::Impl::attach_data(Rpc &r, bmi::Addr to) const
{
    if (r.pieces.empty())
        return;
    if (r.rdma) {
        std::vector<std::byte> descriptor;
        const int rc = bmi->expose(to, r.pieces, r.exposure, descriptor);
        if (rc == 0 && descriptor.size() <= proto::max_rdma_descriptor) {
            if (auto *read = std::get_if<proto::ReadRequest>(&r.req.body))
                read->rdma = std::move(descriptor);
            else if (auto *write = std::get_if<proto::WriteRequest>(&r.req.body))
                write->rdma = std::move(descriptor);
            return;
        }
        gossip::debug(Mask::client, "request to {}: data as messages, not RDMA ({})", *r.url,
                      rc != 0 ? error_text(rc) : "descriptor too long");
        r.exposure = bmi::Exposure{};
        r.rdma = false;
    }
    cut_chunks(r);
}

// The request's chunk MACs, under the session key of the connection to
// the server (docs/protocol.md "Chunk MACs").  Before the first connection
// to it has been authenticated there is no key yet: the request goes with
// a key check no server accepts, is answered EKEYEXPIRED before any chunk
// moves, and goes again with the key (key_retry).
void Loop::Impl::attach_macs(Rpc &r, bmi::Addr to) const
{
    if (r.pieces.empty() || r.no_macs)
        return;
    const std::optional<bmi::Identity> id = bmi->peer_identity(to);
    // A sealed connection's AEAD already authenticates every byte it
    // carries, chunks included, in order: MACs would add only their cost
    // (docs/security.md "Encryption").  BMI keeps a sealed connection and
    // an unsealed one of the same process apart, as two peers.
    if (id && id->cipher != bmi::Cipher::none) {
        // A retry after the first contact drops those it was sent with.
        if (auto *write = std::get_if<proto::WriteRequest>(&r.req.body))
            write->macs.reset();
        else if (auto *read = std::get_if<proto::ReadRequest>(&r.req.body))
            read->macs.reset();
        return;
    }
    r.mac_key = id ? id->session_key : proto::SessionKey{};
    proto::ChunkMacs macs{proto::session_key_check(r.mac_key), {}};
    // Chunks that move as messages carry their tags (the last piece of each
    // chunk's list); RDMA moves only the data, so its tags are in the
    // request (a write's) or the response (a read's).
    r.tags_inline = !r.rdma;
    macs.with_chunks = r.tags_inline;
    if (r.tags_inline) {
        const std::size_t chunks = r.is_write ? r.send_chunks.size() : r.recv_chunks.size();
        r.chunk_tags.assign(chunks, proto::ChunkMac{});
        for (std::size_t i = 0; i < chunks; ++i) {
            std::byte *tag = r.chunk_tags[i].data();
            if (r.is_write)
                r.send_chunks[i].push_back({tag, proto::chunk_mac_size});
            else
                r.recv_chunks[i].push_back({tag, proto::chunk_mac_size});
        }
    }
    if (auto *write = std::get_if<proto::WriteRequest>(&r.req.body)) {
        if (!r.tags_inline)
            macs.tags = stream_tags(r);
        write->macs = std::move(macs);
    } else if (auto *read = std::get_if<proto::ReadRequest>(&r.req.body)) {
        read->macs = std::move(macs);
    }
}

// Whether a read's chunks are those the server MACed: the response's tags
// checked against the bytes that arrived, before the caller sees them.  A
// chunk altered on the way is EIO, never wrong bytes returned as success.
bool Loop::Impl::read_macs_ok(Rpc &r) const
{
    const auto *resp = std::get_if<proto::ReadResponse>(&r.resp.body);
    const auto *req = std::get_if<proto::ReadRequest>(&r.req.body);
    if (resp == nullptr || req == nullptr || !req->macs || r.pieces.empty())
        return true;
    if (r.tags_inline) {
        // Each chunk was checked as it came (chunk_arrived).
        if (r.chunks_checked == r.recv_chunks.size())
            return true;
        gossip::warning(Mask::client, "read from {}: {} of {} chunks checked", *r.url,
                        r.chunks_checked, r.recv_chunks.size());
        return false;
    }
    // The key of the connection the answer came over: the request may
    // have been encoded before that connection was authenticated (a first
    // request to the server), when there was none to name.
    const std::optional<bmi::Identity> id = bmi->peer_identity(r.to);
    if (!id) {
        gossip::warning(Mask::client, "read from {}: no session key to check its chunks with",
                        *r.url);
        return false;
    }
    r.mac_key = id->session_key;
    if (!resp->macs) {
        gossip::warning(Mask::client, "read from {}: the response has no chunk MACs", *r.url);
        return false;
    }
    const std::vector<proto::ChunkMac> want = stream_tags(r);
    if (resp->macs->size() != want.size()) {
        gossip::warning(Mask::client, "read from {}: {} chunk MACs for {} chunks", *r.url,
                        resp->macs->size(), want.size());
        return false;
    }
    for (std::size_t i = 0; i < want.size(); ++i) {
        if (!proto::same_mac(want[i], (*resp->macs)[i])) {
            gossip::warning(Mask::client,
                            "read from {}: chunk {} of handle {:016x} fails its MAC (altered on "
                            "the way?): EIO",
                            *r.url, i, req->handle);
            return false;
        }
    }
    return true;
}

// Whether the server refused the try's chunk MACs as made under another
// connection's key (the first contact, or a reconnect since): sent again
// at once, now with the key of the connection it just came over.
bool Loop::Impl::key_retry(const Batch &b, const Rpc &r)
{
    return !b.stopping && r.error == 0 && r.response_arrived && r.resp.status == EKEYEXPIRED &&
           !r.pieces.empty() && r.key_retries < 2;
}

// Cuts a request's memory pieces into chunk-sized lists of pieces.
void Loop::Impl::cut_chunks(Rpc &r)
{
    std::vector<bmi::ConstBuffer> send;
    std::vector<bmi::MutableBuffer> recv;
    std::size_t room = r.chunk;
    auto close_chunk = [&] {
        if (r.is_write && !send.empty())
            r.send_chunks.push_back(std::exchange(send, {}));
        if (!r.is_write && !recv.empty())
            r.recv_chunks.push_back(std::exchange(recv, {}));
        room = r.chunk;
    };
    for (const bmi::MutableBuffer &piece : r.pieces) {
        std::size_t off = 0;
        while (off < piece.size) {
            const std::size_t n = std::min(room, piece.size - off);
            std::byte *at = static_cast<std::byte *>(piece.data) + off;
            if (r.is_write)
                send.push_back({at, n});
            else
                recv.push_back({at, n});
            off += n;
            room -= n;
            if (room == 0)
                close_chunk();
        }
    }
    close_chunk();
}

void Loop::Impl::cancel_ops(const Rpc &r) const
{
    for (const bmi::OpId op : r.ops)
        static_cast<void>(bmi->cancel(op));
}

void Loop::Impl::decode(Rpc &r)
{
    const proto::DecodeResult d =
        proto::decode(std::span(r.in.get(), r.response_size), *r.key, r.resp);
    if (!d) {
        gossip::warning(Mask::client, "bad response from {}: {}", *r.url, d.message());
        r.error = -EPROTO;
    } else if (!proto::answers(r.resp, r.req)) {
        gossip::warning(Mask::client, "a response from {} does not answer its request", *r.url);
        r.error = -EPROTO;
    }
}

void Loop::Impl::on_completion(Rpc &r, const bmi::Completion &c)
{
    std::erase(r.ops, c.op);
    if (const auto chunk = std::ranges::find(r.chunk_ops, c.op, &detail::ChunkOp::first);
        chunk != r.chunk_ops.end()) {
        const std::size_t index = chunk->second;
        r.chunk_ops.erase(chunk);
        if (c.error == 0) {
            if (r.is_write)
                post_sends(r);
            else
                chunk_arrived(r, index, c.actual_size);
            return;
        }
    }
    if (c.op == r.recv_op) {
        r.recv_op = bmi::no_op;
        if (c.error != 0) {
            if (r.error == 0)
                r.error = c.error;
        } else if (r.error == 0) {
            r.response_arrived = true;
            r.response_size = c.actual_size;
            decode(r);
            // A failed request's data will never move: stop waiting.
            if (r.result() != 0)
                cancel_ops(r);
        }
    } else if (c.error != 0 && c.error != -ECANCELED && r.error == 0) {
        r.error = c.error;
        cancel_ops(r);
    }
}

bool transport_error(int error) noexcept
{
    switch (-error) {
    case ETIMEDOUT:
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case EHOSTDOWN:
    case ENOTCONN:
    case ESHUTDOWN:
        return true;
    default:
        return false;
    }
}

bool Loop::Impl::may_retry(const Batch &b, const Rpc &r, Clock::time_point now)
{
    if (b.stopping || r.response_arrived || !transport_error(r.error))
        return false;
    // A status request is a probe (pvfs-ping), and a get_config the first
    // contact (a tool or a mount names a server that is not there): their
    // failure is the answer.  pvfsd retries a re-attach itself.
    if (r.req.op() == proto::Op::status || r.req.op() == proto::Op::get_config)
        return false;
    // A change without ids may have run: a second run could answer wrongly.
    if (proto::changes_metadata(r.req.op()) && !r.req.once.present())
        return false;
    return b.retry.hard || now + std::max(r.backoff, first_backoff) < b.deadline;
}

void Loop::Impl::schedule_retry(Batch &b, Rpc &r, Clock::time_point now)
{
    r.backoff = r.backoff.count() == 0 ? first_backoff : std::min(2 * r.backoff, max_backoff);
    // +-20 %, so that many clients of a restarted server do not come back
    // in step.
    const auto jitter = static_cast<std::int64_t>(random_u64() % 41U) - 20;
    r.retry_at = now + r.backoff + r.backoff * jitter / 100;
    const auto [it, first] = outage_logged.try_emplace(*r.url, Clock::time_point{});
    if (first || now - it->second > std::chrono::minutes(1)) {
        gossip::warning(Mask::client, "{} request to {} failed ({}): trying again",
                        proto::op_name(r.req.op()), *r.url, error_text(r.error));
        it->second = now;
    }
    ++r.tries;
    r.waiting = true;
    r.error = 0;
    reset_transfer(r);
    ++b.waiting;
}

void Loop::Impl::retry_due(Batch &b, Clock::time_point now)
{
    for (Rpc *r : b.rpcs) {
        if (b.stopping || b.unfinished == 0)
            return;
        if (r->finished)
            continue;
        if (r->waiting && now >= r->retry_at) {
            r->waiting = false;
            --b.waiting;
            start(*r, b.context);
            if (r->response_arrived && r->error == 0)
                decode(*r);
            settle(b, *r);
        } else if (!r->waiting && b.retry.try_timeout.count() > 0 && !r->rdma &&
                   !r->response_arrived && r->error == 0 &&
                   now - r->started >= b.retry.try_timeout) {
            // Silent too long: give this try up; its cancelled transfers
            // end it, and settle() sends it again.
            r->error = -ETIMEDOUT;
            cancel_ops(*r);
            settle(b, *r);
        }
    }
}

void Loop::Impl::settle(Batch &b, Rpc &r)
{
    if (r.finished || !r.ops.empty())
        return;
    if (!r.response_arrived && r.error == 0)
        return;
    if (r.response_arrived && r.error == 0 && r.resp.status == 0 && !read_macs_ok(r))
        r.error = -EIO;
    if (key_retry(b, r)) {
        ++r.key_retries;
        r.waiting = true;
        r.retry_at = Clock::now();
        r.response_arrived = false;
        r.resp = proto::Response{};
        reset_transfer(r);
        ++b.waiting;
        return;
    }
    if (r.waiting) {
        // stop() ended a request waiting for its next try.
        r.waiting = false;
        --b.waiting;
    } else if (const auto now = Clock::now(); may_retry(b, r, now)) {
        schedule_retry(b, r, now);
        return;
    }
    r.finished = true;
    r.ended = Clock::now();
    r.batch = nullptr;
    --b.unfinished;
    --b.in_flight[r.server];
    if (b.unfinished == 0 && b.suspended)
        ended.push_back(&b);
}

void Loop::Impl::launch(Batch &b, std::size_t server)
{
    auto &q = b.queues[server];
    while (!b.stopping && !q.empty() && b.in_flight[server] < b.depth) {
        Rpc *r = q.back();
        q.pop_back();
        ++b.in_flight[server];
        r->batch = &b;
        start(*r, b.context);
        if (r->response_arrived && r->error == 0)
            decode(*r);
        settle(b, *r);
        if (b.unfinished == 0)
            return;
    }
}

Loop::Impl::RunAwaiter Loop::Impl::run(std::span<Rpc *const> rpcs, unsigned depth,
                                       std::chrono::milliseconds timeout, detail::RetryPolicy retry)
{
    RunAwaiter a{this, std::make_unique<Batch>()};
    a.batch->rpcs.assign(rpcs.begin(), rpcs.end());
    a.batch->depth = std::max(1U, depth);
    a.batch->timeout = timeout;
    a.batch->retry = retry;
    return a;
}

bool Loop::Impl::RunAwaiter::await_suspend(std::coroutine_handle<> waiter) const
{
    Batch &b = *batch;
    b.waiter = waiter;
    b.context = engine->current;
    b.deadline = b.retry.hard ? Clock::time_point::max() : Clock::now() + b.timeout;
    b.unfinished = b.rpcs.size();
    // Queues are popped from the back: fill them back to front.
    for (std::size_t i = b.rpcs.size(); i-- > 0;)
        b.queues[b.rpcs[i]->server].push_back(b.rpcs[i]);
    engine->active.insert(&b);
    for (auto &[server, q] : b.queues) {
        engine->launch(b, server);
        if (b.unfinished == 0)
            break;
    }
    if (b.unfinished == 0) {
        engine->active.erase(&b);
        return false;
    }
    b.suspended = true;
    engine->peak_batches = std::max(engine->peak_batches, engine->active.size());
    return true;
}

// Stops a batch: requests not yet sent end with `error` at once, those in
// flight when their cancelled transfers have ended.
void Loop::Impl::stop(Batch &b, int error)
{
    if (b.stopping)
        return;
    b.stopping = true;
    b.drain_until = Clock::now() + drain_time;
    for (Rpc *r : b.rpcs) {
        if (r->finished)
            continue;
        if (r->error == 0)
            r->error = error;
        if (!r->launched) {
            // Never sent: nothing to wait for.
            r->finished = true;
            r->ended = Clock::now();
            --b.unfinished;
            continue;
        }
        // A server moving data by RDMA may still write into the caller's
        // memory: wait for its response, which comes after its last write
        // (abandon() cuts the connection if it does not come in time).
        if (!r->rdma)
            cancel_ops(*r);
        settle(b, *r);
    }
    for (auto &[server, q] : b.queues)
        q.clear();
    if (b.unfinished == 0 && b.suspended && std::ranges::find(ended, &b) == ended.end())
        ended.push_back(&b);
}

// The transfers of a stopped batch did not end in time: forget them.
void Loop::Impl::abandon(Batch &b)
{
    for (Rpc *r : b.rpcs) {
        if (r->finished)
            continue;
        if (!r->ops.empty())
            gossip::error(Mask::client, "{} operations to {} did not end after cancel",
                          r->ops.size(), *r->url);
        for (const bmi::OpId op : r->ops) {
            ops.erase(op);
            static_cast<void>(bmi->cancel(op));
        }
        if (r->rdma && !r->response_arrived) {
            // Nothing but the end of the connection stops the server's
            // RDMA into memory that is about to be reused.
            if (const auto it = addrs.find(*r->url + '\x1f' + auth->add_client_key(*r->key));
                it != addrs.end()) {
                gossip::warning(Mask::client,
                                "no response from {} in time; closing the "
                                "connection its RDMA uses",
                                *r->url);
                static_cast<void>(bmi->set_info(bmi::Info::drop_addr, it->second));
            }
        }
        r->ops.clear();
        r->finished = true;
        r->batch = nullptr;
        --b.unfinished;
    }
    if (b.suspended && std::ranges::find(ended, &b) == ended.end())
        ended.push_back(&b);
}

void Loop::Impl::expire(Clock::time_point now)
{
    std::vector<Batch *> late;
    std::vector<Batch *> retrying;
    for (Batch *b : active) {
        if (b->unfinished == 0)
            continue;
        if (!b->stopping && (b->waiting > 0 || b->retry.try_timeout.count() > 0))
            retrying.push_back(b);
        if (!b->stopping ? now >= b->deadline : now >= b->drain_until)
            late.push_back(b);
    }
    for (Batch *b : late) {
        if (!b->stopping) {
            // Out of time: whatever has not answered fails with ETIMEDOUT.
            stop(*b, -ETIMEDOUT);
        } else {
            abandon(*b);
        }
    }
    for (Batch *b : retrying) {
        if (!b->stopping)
            retry_due(*b, now);
    }
}

std::size_t Loop::Impl::cancel(std::uint64_t cancel_id)
{
    if (cancel_id == 0)
        return 0;
    std::vector<Batch *> matching;
    for (Batch *b : active) {
        if (b->context.cancel_id == cancel_id && !b->stopping && b->unfinished > 0)
            matching.push_back(b);
    }
    std::size_t n = 0;
    for (Batch *b : matching) {
        n += b->unfinished;
        stop(*b, -ECANCELED);
    }
    return n;
}

int Loop::Impl::idle_ms(int max_idle_ms, Clock::time_point now) const
{
    auto until = now + std::chrono::milliseconds(std::max(0, max_idle_ms));
    for (const Batch *b : active) {
        until = std::min(until, b->stopping ? b->drain_until : b->deadline);
        if (b->stopping || (b->waiting == 0 && b->retry.try_timeout.count() == 0))
            continue;
        for (const Rpc *r : b->rpcs) {
            if (r->finished)
                continue;
            if (r->waiting)
                until = std::min(until, r->retry_at);
            else if (b->retry.try_timeout.count() > 0 && r->launched)
                until = std::min(until, r->started + b->retry.try_timeout);
        }
    }
    if (!ended.empty() || until <= now)
        return 0;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
    return static_cast<int>(left + 1);
}

void Loop::Impl::poll(int max_idle_ms)
{
    auto &done = completions;
    const std::size_t n = bmi->testcontext(ctx, done, idle_ms(max_idle_ms, Clock::now()));
    for (std::size_t i = 0; i < n; ++i) {
        const auto it = ops.find(done.at(i).op);
        if (it == ops.end())
            continue; // a transfer whose request was abandoned
        Rpc *r = it->second;
        ops.erase(it);
        on_completion(*r, done.at(i));
        if (Batch *b = r->batch; b != nullptr) {
            settle(*b, *r);
            // Its place in the server's pipeline is free.
            if (r->finished && b->unfinished > 0)
                launch(*b, r->server);
        }
    }
    expire(Clock::now());
    // Resume the waiters last: they may start new batches or end their
    // tasks (freeing the batch, which lives in the task's frame).
    std::vector<Batch *> to_resume;
    to_resume.swap(ended);
    for (Batch *b : to_resume)
        active.erase(b);
    for (Batch *b : to_resume) {
        current = b->context;
        b->waiter.resume();
    }
}

} // namespace pvfs::client
