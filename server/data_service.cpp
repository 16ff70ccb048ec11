// The data role of pvfs-server (data_service.hpp).
#include "data_service.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "pvfs/gossip.hpp"
#include "pvfs/metrics.hpp"

namespace pvfs::server {

namespace {

using gossip::Mask;

// Store operations one chunk keeps in flight (a chunk of a list-I/O request
// may cover a thousand small regions).
constexpr std::size_t ops_per_slot = 64;

// A store operation's user_data: which request, which of its two slots,
// which piece of the slot's chunk; or an fsync request.
constexpr unsigned piece_bits = 18;
constexpr std::uint64_t piece_mask = (std::uint64_t{1} << piece_bits) - 1;
constexpr std::uint64_t slot_bit = std::uint64_t{1} << piece_bits;
constexpr std::uint64_t fsync_bit = std::uint64_t{1} << (piece_bits + 1);
constexpr unsigned id_shift = piece_bits + 2;

constexpr std::uint64_t flow_tag(std::uint64_t id, unsigned slot, std::size_t piece) noexcept
{
    return (id << id_shift) | (slot != 0 ? slot_bit : 0) | (piece & piece_mask);
}

} // namespace

// One read or write request in progress.  Its steps call one another when
// a transfer completes at once (a posted receive that finds its data, a send
// the socket takes whole): the depth is bounded by the two slots of one
// request, since store operations always complete later, through reap.
// NOLINTBEGIN(misc-no-recursion)
struct DataService::Flow {
    struct Piece {
        std::uint64_t object_offset = 0;
        std::size_t buffer_offset = 0;
        std::size_t length = 0;
    };
    // ready: a read chunk read from disk, waiting for its turn to be sent.
    enum class Stage : std::uint8_t { idle, network, storage, ready };

    // Half of the double buffering: one chunk buffer and what it is doing.
    struct Slot final : Waiter {
        Flow *flow = nullptr;
        unsigned index = 0;
        bmi::Memory buffer; // from the pool; empty for an inline write
        std::span<std::byte> data;
        std::uint64_t chunk = 0;
        std::size_t length = 0;
        std::vector<Piece> pieces;
        std::size_t next_piece = 0;
        std::size_t store_ops = 0;
        bmi::OpId op = bmi::no_op;
        Stage stage = Stage::idle;
        std::uint64_t stage_since_ns = 0; // when the current stage began

        void on_bmi(const bmi::Completion &completion) override
        {
            op = bmi::no_op;
            flow->network_done(*this, completion.error, completion.actual_size);
        }
    };

    Flow(DataService &owner, std::uint64_t flow_id) : service(owner), id(flow_id)
    {
        for (unsigned i = 0; i < slots.size(); ++i) {
            slots.at(i).flow = this;
            slots.at(i).index = i;
        }
    }

    DataService &service;
    std::uint64_t id;
    Origin origin;
    Handle handle = no_handle;
    bool is_write = false;
    std::vector<proto::Region> regions;
    std::vector<std::uint64_t> starts; // stream offset of each region
    std::uint64_t total = 0;
    std::uint32_t chunk = 0;
    std::uint64_t chunks = 0;
    std::uint64_t next_chunk = 0;
    std::uint64_t chunks_done = 0;
    std::uint64_t next_send = 0; // reads: the chunk whose send is posted next
    int error = 0;               // a positive errno once the request has failed
    bool waiting_for_buffer = false;
    std::uint64_t waiting_since_ns = 0;
    bool done = false;
    // The chunk MACs' tags travel with the chunks (proto::ChunkMacs::
    // with_chunks): every chunk message is its bytes and then its tag, which
    // the slot's buffer holds after the chunk.
    bool tags_inline = false;
    proto::Bytes inline_data;
    proto::Bytes rdma; // the client's memory, when the server moves the data itself
    // Chunk MACs (docs/protocol.md "Chunk MACs"): the connection's session
    // key when the request has them; a write's tags as the client sent
    // them, a read's as this server computes them for the response.
    std::optional<proto::SessionKey> mac_key;
    proto::ChunkBinding binding;
    std::vector<proto::ChunkMac> tags;
    std::array<Slot, 2> slots;

    [[nodiscard]] BulkCounters &counters() const
    {
        return is_write ? service.bulk_.write : service.bulk_.read;
    }

    // The slot moves to `next`; the time of the stage it leaves is counted
    // (BulkCounters).
    void enter(Slot &s, Stage next) const
    {
        const std::uint64_t now = metrics::monotonic_ns();
        if (s.stage_since_ns != 0 && now > s.stage_since_ns) {
            const std::uint64_t ns = now - s.stage_since_ns;
            BulkCounters &c = counters();
            switch (s.stage) {
            case Stage::network:
                c.network_ns += ns;
                break;
            case Stage::storage:
                c.storage_ns += ns;
                break;
            case Stage::ready:
                c.queued_ns += ns;
                break;
            case Stage::idle:
                break;
            }
        }
        s.stage = next;
        s.stage_since_ns = next == Stage::idle ? 0 : now;
    }

    [[nodiscard]] proto::ChunkMac mac_of(const Slot &s) const
    {
        const std::span<const std::byte> bytes(s.data.data(), s.length);
        return proto::chunk_mac(*mac_key, binding, s.chunk, std::span(&bytes, 1));
    }

    // A chunk message's bytes: the chunk, and its tag when it travels with it.
    [[nodiscard]] std::size_t wire_size(const Slot &s) const
    {
        return s.length + (tags_inline ? proto::chunk_mac_size : 0);
    }

    // Where a chunk's tag travelling with it sits: after the chunk.
    [[nodiscard]] static std::span<std::byte, proto::chunk_mac_size> inline_tag(Slot &s)
    {
        return std::span(s.buffer.data() + s.length, s.buffer.size() - s.length)
            .first<proto::chunk_mac_size>();
    }

    void start()
    {
        if (total == 0) {
            finish();
            return;
        }
        if (!inline_data.empty()) {
            Slot &s = slots[0];
            s.data = std::span(inline_data);
            s.chunk = 0;
            s.length = inline_data.size();
            next_chunk = 1;
            plan_pieces(s);
            ++counters().chunks;
            enter(s, Stage::storage);
            pump(s);
            return;
        }
        fill_slots();
    }

    // Gives every idle slot the next chunk, as far as buffers allow.
    void fill_slots()
    {
        for (Slot &s : slots) {
            if (s.stage != Stage::idle || next_chunk >= chunks || error != 0)
                continue;
            if (s.buffer.size() == 0 && !service.take_buffer(s.buffer)) {
                if (!waiting_for_buffer) {
                    waiting_for_buffer = true;
                    waiting_since_ns = metrics::monotonic_ns();
                    ++service.bulk_.buffer_waits;
                    service.waiting_.push_back(id);
                }
                return;
            }
            stop_waiting();
            start_chunk(s);
        }
    }

    // A wait for a buffer ends: its time is counted.
    void stop_waiting()
    {
        if (waiting_since_ns == 0)
            return;
        const std::uint64_t now = metrics::monotonic_ns();
        if (now > waiting_since_ns)
            service.bulk_.buffer_wait_ns += now - waiting_since_ns;
        waiting_since_ns = 0;
    }

    void start_chunk(Slot &s)
    {
        s.chunk = next_chunk++;
        ++counters().chunks;
        const std::uint64_t begin = s.chunk * chunk;
        s.length = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, total - begin));
        s.data = std::span(s.buffer.data(), s.length);
        plan_pieces(s);
        if (!is_write) {
            enter(s, Stage::storage);
            pump(s);
            return;
        }
        enter(s, Stage::network);
        bmi::Bmi &bmi = service.loop_.bmi();
        const bmi::Post p = rdma.empty()
                                ? bmi.post_recv(origin.peer, s.data.data(), wire_size(s),
                                                data_tag(origin.tag), &s, service.loop_.context())
                                : bmi.post_get(origin.peer, rdma, s.chunk * chunk, s.data.data(),
                                               s.length, &s, service.loop_.context());
        if (!p.ok()) {
            network_done(s, p.error, 0);
        } else if (p.completed) {
            network_done(s, 0, p.actual_size);
        } else {
            s.op = p.op;
        }
    }

    // The object pieces of the slot's chunk: stream bytes
    // [chunk * size, chunk * size + length), merged where contiguous.
    void plan_pieces(Slot &s)
    {
        s.pieces.clear();
        s.next_piece = 0;
        std::uint64_t pos = s.chunk * chunk;
        std::size_t left = s.length;
        std::size_t buffer_offset = 0;
        // The last region starting at or before pos (zero-length regions
        // share their start with the next one and are skipped by the walk).
        auto it = std::upper_bound(starts.begin(), starts.end(), pos);
        auto r = static_cast<std::size_t>(std::distance(starts.begin(), it)) - 1;
        while (left > 0 && r < regions.size()) {
            const std::uint64_t into = pos - starts[r];
            if (into >= regions[r].length) {
                ++r;
                continue;
            }
            const auto n =
                static_cast<std::size_t>(std::min<std::uint64_t>(regions[r].length - into, left));
            const std::uint64_t object_offset = regions[r].offset + into;
            if (!s.pieces.empty() &&
                s.pieces.back().object_offset + s.pieces.back().length == object_offset) {
                s.pieces.back().length += n;
            } else {
                s.pieces.push_back(Piece{object_offset, buffer_offset, n});
            }
            pos += n;
            left -= n;
            buffer_offset += n;
        }
    }

    // Keeps up to ops_per_slot store operations of the slot in flight.
    void pump(Slot &s)
    {
        while (error == 0 && s.store_ops < ops_per_slot && s.next_piece < s.pieces.size()) {
            const Piece &p = s.pieces[s.next_piece];
            const std::uint64_t tag = flow_tag(id, s.index, s.next_piece);
            const auto bytes = s.data.subspan(p.buffer_offset, p.length);
            const int rc = is_write
                               ? service.store_.submit_write(handle, p.object_offset, bytes, tag)
                               : service.store_.submit_read(handle, p.object_offset, bytes, tag);
            if (rc < 0) {
                fail(-rc);
                break;
            }
            ++s.store_ops;
            ++s.next_piece;
        }
        if (s.store_ops == 0)
            storage_done(s);
    }

    void store_done(Slot &s, std::size_t piece, int result)
    {
        --s.store_ops;
        if (result < 0) {
            fail(-result);
        } else if (piece < s.pieces.size()) {
            const Piece &p = s.pieces[piece];
            const auto got = static_cast<std::size_t>(result);
            if (is_write && got != p.length) {
                fail(EIO);
            } else if (!is_write && got < p.length) {
                // Past the object's end: the bytes of a file's hole.
                std::memset(s.data.data() + p.buffer_offset + got, 0, p.length - got);
            }
        }
        if (s.store_ops == 0 || error == 0)
            pump(s);
    }

    void storage_done(Slot &s)
    {
        if (error != 0 || s.next_piece < s.pieces.size()) {
            if (error != 0)
                settle(s);
            return;
        }
        if (is_write) {
            chunk_done(s);
            return;
        }
        enter(s, Stage::ready);
        send_ready();
    }

    // Posts the sends of read chunks whose turn it is, in chunk order: the
    // client matches chunks to its buffers in the order they arrive, and
    // the disk may finish chunk i + 1 before chunk i.
    void send_ready()
    {
        for (bool sent = true; sent && error == 0;) {
            sent = false;
            for (Slot &s : slots) {
                if (s.stage != Stage::ready || s.chunk != next_send)
                    continue;
                ++next_send;
                sent = true;
                enter(s, Stage::network);
                if (mac_key) {
                    const proto::ChunkMac tag = mac_of(s);
                    if (tags_inline)
                        std::ranges::copy(tag, inline_tag(s).begin());
                    else
                        tags.at(s.chunk) = tag;
                    if (service.options_.tamper_reads && s.length != 0)
                        s.data[s.length / 2] ^= std::byte{0x01};
                }
                bmi::Bmi &bmi = service.loop_.bmi();
                const bmi::Post p =
                    rdma.empty() ? bmi.post_send(origin.peer, s.data.data(), wire_size(s),
                                                 data_tag(origin.tag), &s, service.loop_.context())
                                 : bmi.post_put(origin.peer, rdma, s.chunk * chunk, s.data.data(),
                                                s.length, &s, service.loop_.context());
                if (!p.ok()) {
                    network_done(s, p.error, 0);
                } else if (p.completed) {
                    network_done(s, 0, p.actual_size);
                } else {
                    s.op = p.op;
                }
                break;
            }
        }
    }

    void network_done(Slot &s, int bmi_error, std::size_t actual)
    {
        if (bmi_error != 0) {
            if (bmi_error != -ECANCELED || error == 0)
                gossip::debug(Mask::server, "request {}: bulk transfer of chunk {}: {}",
                              origin.request_id, s.chunk, errno_text(-bmi_error));
            fail(-bmi_error);
            settle(s);
            return;
        }
        if (error != 0) {
            settle(s);
            return;
        }
        (rdma.empty() ? service.message_bytes_ : service.rdma_bytes_) += actual;
        if (is_write) {
            if (actual != wire_size(s)) {
                gossip::warning(Mask::server, "request {}: chunk {} carried {} bytes, expected {}",
                                origin.request_id, s.chunk, actual, wire_size(s));
                fail(EPROTO);
                settle(s);
                return;
            }
            // Before a byte of it reaches the object: a chunk forged,
            // replayed from another request or sent out of place fails the
            // request and is not written.
            const auto sent_tag = [&] {
                if (!tags_inline)
                    return tags.at(s.chunk);
                proto::ChunkMac t{};
                std::ranges::copy(inline_tag(s), t.begin());
                return t;
            };
            if (mac_key && !proto::same_mac(mac_of(s), sent_tag())) {
                service.loop_.log_bulk_refusal(
                    origin, fmt::format("chunk {} ({} bytes) of handle {:016x} fails its MAC; "
                                        "nothing of it is written",
                                        s.chunk, s.length, handle));
                fail(EBADMSG);
                settle(s);
                return;
            }
            enter(s, Stage::storage);
            pump(s);
            return;
        }
        chunk_done(s);
    }

    void chunk_done(Slot &s)
    {
        ++chunks_done;
        enter(s, Stage::idle);
        if (next_chunk < chunks && s.buffer.size() != 0) {
            start_chunk(s);
            return;
        }
        release(s);
        check_finished();
    }

    // The slot stops after a failure: its buffer goes back to the pool once
    // nothing of its own is in flight.
    void settle(Slot &s)
    {
        if (s.op != bmi::no_op || s.store_ops != 0)
            return;
        enter(s, Stage::idle);
        release(s);
        check_finished();
    }

    void release(Slot &s)
    {
        if (s.buffer.size() != 0)
            service.give_buffer(std::exchange(s.buffer, bmi::Memory{}));
        s.data = {};
    }

    void fail(int errno_value)
    {
        if (error != 0)
            return;
        error = errno_value != 0 ? errno_value : EIO;
        // Stop the other slot's transfer now rather than at its timeout; a
        // chunk waiting for its turn to be sent never will be.
        for (Slot &s : slots) {
            if (s.op != bmi::no_op)
                service.loop_.bmi().cancel(s.op);
        }
        for (Slot &s : slots) {
            if (s.stage == Stage::ready)
                settle(s);
        }
    }

    void check_finished()
    {
        if (done)
            return;
        for (const Slot &s : slots) {
            if (s.stage != Stage::idle || s.op != bmi::no_op || s.store_ops != 0)
                return;
        }
        if (error == 0 && chunks_done < chunks)
            return;
        finish();
    }

    void finish()
    {
        done = true;
        service.finish_flow(*this);
    }
};

// NOLINTEND(misc-no-recursion)

DataService::DataService(Loop &loop, data::ObjectStore store, const DataOptions &options)
    : loop_(loop), store_(std::move(store)), options_(options)
{
}

DataService::~DataService() = default;

bool DataService::handles(proto::Op op) noexcept
{
    switch (op) {
    case proto::Op::read:
    case proto::Op::write:
    case proto::Op::fsync:
    case proto::Op::object_sizes:
    case proto::Op::truncate_object:
    case proto::Op::remove_object:
    case proto::Op::list_objects:
        return true;
    default:
        return false;
    }
}

int DataService::event_fd() const noexcept
{
    return store_.event_fd();
}

std::size_t DataService::active() const noexcept
{
    return flows_.size() + fsyncs_.size();
}

void DataService::handle(const Origin &origin, proto::RequestBody &body)
{
    if (auto *read = std::get_if<proto::ReadRequest>(&body)) {
        start_flow(origin, read->handle, std::move(read->regions), read->chunk_size, {},
                   std::move(read->rdma), std::move(read->macs), false);
    } else if (auto *write = std::get_if<proto::WriteRequest>(&body)) {
        start_flow(origin, write->handle, std::move(write->regions), write->chunk_size,
                   std::move(write->inline_data), std::move(write->rdma), std::move(write->macs),
                   true);
    } else if (const auto *fsync = std::get_if<proto::FsyncRequest>(&body)) {
        do_fsync(origin, fsync->handle);
    } else if (const auto *sizes = std::get_if<proto::ObjectSizesRequest>(&body)) {
        proto::ObjectSizesResponse resp;
        resp.sizes.reserve(sizes->handles.size());
        for (const Handle h : sizes->handles) {
            int error = 0;
            const auto size = store_.size(h, &error);
            if (error != 0) {
                loop_.respond_error(origin, -error);
                return;
            }
            resp.sizes.push_back(size.value_or(proto::no_object_size));
        }
        loop_.respond(origin, std::move(resp));
    } else if (const auto *truncate = std::get_if<proto::TruncateObjectRequest>(&body)) {
        if (const int rc = store_.truncate(truncate->handle, truncate->size); rc < 0) {
            loop_.respond_error(origin, -rc);
        } else {
            loop_.respond(origin, proto::TruncateObjectResponse{});
        }
    } else if (const auto *remove = std::get_if<proto::RemoveObjectRequest>(&body)) {
        if (const int rc = store_.remove(remove->handle); rc < 0) {
            loop_.respond_error(origin, -rc);
        } else {
            loop_.respond(origin, proto::RemoveObjectResponse{});
        }
    } else if (const auto *list = std::get_if<proto::ListObjectsRequest>(&body)) {
        const std::size_t max = std::min<std::size_t>(list->max, proto::max_list_handles);
        if (max == 0) {
            loop_.respond_error(origin, EINVAL);
            return;
        }
        data::ListPage page = store_.list(list->cookie, max);
        if (page.error != 0) {
            loop_.respond_error(origin, -page.error);
            return;
        }
        proto::ListObjectsResponse resp;
        resp.handles = std::move(page.handles);
        resp.next_cookie = page.next_cookie;
        resp.eof = page.end;
        loop_.respond(origin, std::move(resp));
    } else {
        loop_.respond_error(origin, EOPNOTSUPP);
    }
    store_.flush();
}

void DataService::start_flow(const Origin &origin, Handle handle,
                             std::vector<proto::Region> regions, std::uint32_t chunk,
                             proto::Bytes inline_data, proto::Bytes rdma,
                             std::optional<proto::ChunkMacs> macs, bool is_write)
{
    if (handle == no_handle) {
        loop_.respond_error(origin, EINVAL);
        return;
    }
    std::uint64_t total = 0;
    std::vector<std::uint64_t> starts;
    starts.reserve(regions.size());
    for (const proto::Region &r : regions) {
        if (r.offset > data::max_object_end || r.length > data::max_object_end - r.offset ||
            r.length > std::numeric_limits<std::uint64_t>::max() - total) {
            loop_.respond_error(origin, EINVAL);
            return;
        }
        starts.push_back(total);
        total += r.length;
    }
    if (!inline_data.empty() && inline_data.size() != total) {
        loop_.respond_error(origin, EINVAL);
        return;
    }
    if (inline_data.empty() && total > 0 && (chunk < min_chunk || chunk > options_.chunk)) {
        gossip::warning(Mask::server, "request {}: chunk size {} outside {}..{}", origin.request_id,
                        chunk, min_chunk, options_.chunk);
        loop_.respond_error(origin, EINVAL);
        return;
    }
    if (!rdma.empty()) {
        // The whole stream must lie in the client's memory before any byte
        // moves: a write must not be stored in part for a bad descriptor.
        const bmi::Post check =
            loop_.bmi().post_get(origin.peer, rdma, total, nullptr, 0, nullptr, loop_.context());
        if (!check.ok()) {
            gossip::warning(Mask::server, "request {}: RDMA descriptor refused: {}",
                            origin.request_id, errno_text(-check.error));
            loop_.respond_error(origin, check.error == -ENOTSUP ? EOPNOTSUPP : -check.error);
            return;
        }
    }
    const std::uint64_t chunks =
        inline_data.empty() ? (total == 0 ? 0 : (total - 1) / chunk + 1) : (total == 0 ? 0 : 1);
    const bool bulk = inline_data.empty() && total > 0;
    // Chunk MACs (docs/protocol.md "Chunk MACs"): over an authenticated
    // connection every chunk must have one, so that nobody who can inject
    // into the stream can place bytes in an object or in a reader's buffer.
    std::optional<proto::SessionKey> mac_key;
    if (const std::optional<bmi::Identity> id = loop_.bmi().peer_identity(origin.peer)) {
        if (!macs) {
            // Sealed: the AEAD authenticates the chunks as they come (a
            // sealed peer's chunks come only over sealed connections).
            if (bulk && !options_.macs_optional && id->cipher == bmi::Cipher::none) {
                loop_.log_bulk_refusal(origin, fmt::format("{} bytes of bulk data without chunk "
                                                           "MACs (a client older than them?)",
                                                           total));
                loop_.respond_error(origin, EPROTO);
                return;
            }
        } else {
            mac_key = id->session_key;
        }
    } else if (macs) {
        loop_.log_bulk_refusal(origin, "chunk MACs over a connection without a session key");
        loop_.respond_error(origin, EPROTO);
        return;
    }
    if (mac_key) {
        // The key a write's tags are under is another connection's (the
        // client made them before this connection was authenticated, or
        // it reconnected since): not a forgery, it asks again.  A read's
        // tags are this side's, checked with the key the answer crosses.
        if (is_write && bulk && macs->key_check != proto::session_key_check(*mac_key)) {
            gossip::debug(Mask::server, "request {}: chunk MACs under another connection's key",
                          origin.request_id);
            loop_.respond_error(origin, EKEYEXPIRED);
            return;
        }
        // Tags with the chunks: the decoder saw that the request has none
        // and no RDMA.
        if (chunks > proto::max_chunk_macs ||
            (is_write && bulk && !macs->with_chunks && macs->tags.size() != chunks) ||
            (is_write && !bulk && !macs->tags.empty())) {
            loop_.log_bulk_refusal(origin,
                                   fmt::format("{} chunk MACs for {} chunks (at most {})",
                                               macs->tags.size(), chunks, proto::max_chunk_macs));
            loop_.respond_error(origin, EINVAL);
            return;
        }
    }
    const std::uint64_t id = next_id_++;
    auto flow = std::make_unique<Flow>(*this, id);
    flow->origin = origin;
    flow->handle = handle;
    flow->is_write = is_write;
    flow->regions = std::move(regions);
    flow->starts = std::move(starts);
    flow->total = total;
    flow->chunk = inline_data.empty() ? chunk : 0;
    flow->chunks = inline_data.empty() ? chunks : 1;
    if (mac_key) {
        flow->mac_key = *mac_key;
        flow->binding =
            proto::ChunkBinding{is_write,       options_.fs_id, options_.server_index, handle,
                                origin.session, origin.seq,     origin.request_id,     chunk};
        flow->tags_inline = macs->with_chunks;
        if (is_write)
            flow->tags = std::move(macs->tags);
        else if (!flow->tags_inline)
            flow->tags.resize(chunks);
    }
    flow->inline_data = std::move(inline_data);
    flow->rdma = std::move(rdma);
    Flow &f = *flow;
    flows_.emplace(id, std::move(flow));
    f.start();
    store_.flush();
    sweep();
}

void DataService::do_fsync(const Origin &origin, Handle handle)
{
    const std::uint64_t id = next_id_++;
    const int rc = store_.submit_fsync(handle, (id << id_shift) | fsync_bit);
    if (rc < 0) {
        loop_.respond_error(origin, -rc);
        return;
    }
    fsyncs_.emplace(id, Fsync{origin});
}

void DataService::finish_flow(Flow &flow)
{
    flow.stop_waiting();
    if (flow.waiting_for_buffer) {
        std::erase(waiting_, flow.id);
        flow.waiting_for_buffer = false;
    }
    if (flow.error != 0) {
        loop_.respond_error(flow.origin, flow.error);
        return;
    }
    int error = 0;
    const auto size = store_.size(flow.handle, &error);
    if (error != 0) {
        loop_.respond_error(flow.origin, -error);
        return;
    }
    if (flow.is_write) {
        loop_.respond(flow.origin, proto::WriteResponse{flow.total, size.value_or(0)});
    } else {
        proto::ReadResponse resp{flow.total, size.value_or(0), std::nullopt};
        if (flow.mac_key && !flow.tags_inline)
            resp.macs = std::move(flow.tags);
        loop_.respond(flow.origin, std::move(resp));
    }
}

void DataService::sweep()
{
    std::erase_if(flows_, [](const auto &entry) { return entry.second->done; });
}

void DataService::after_events()
{
    store_.flush();
    sweep();
}

void DataService::poll_store()
{
    reaped_.resize(256);
    for (;;) {
        const std::size_t n = store_.reap(reaped_);
        for (std::size_t i = 0; i < n; ++i) {
            const data::Completion &c = reaped_[i];
            const std::uint64_t id = c.user_data >> id_shift;
            if ((c.user_data & fsync_bit) != 0) {
                const auto it = fsyncs_.find(id);
                if (it == fsyncs_.end())
                    continue;
                if (c.result < 0) {
                    loop_.respond_error(it->second.origin, -c.result);
                } else {
                    loop_.respond(it->second.origin, proto::FsyncResponse{});
                }
                fsyncs_.erase(it);
                continue;
            }
            const auto it = flows_.find(id);
            if (it == flows_.end() || it->second->done)
                continue;
            Flow &f = *it->second;
            Flow::Slot &s = f.slots.at((c.user_data & slot_bit) != 0 ? 1 : 0);
            f.store_done(s, static_cast<std::size_t>(c.user_data & piece_mask), c.result);
        }
        store_.flush();
        if (n < reaped_.size())
            break;
    }
    sweep();
}

bool DataService::take_buffer(bmi::Memory &out)
{
    if (!free_buffers_.empty()) {
        out = std::move(free_buffers_.back());
        free_buffers_.pop_back();
        return true;
    }
    if (buffers_made_ >= options_.pool_chunks)
        return false;
    // Room for a chunk's tag after it (Flow::tags_inline).
    out = loop_.bmi().memalloc(bmi::no_addr, options_.chunk + proto::chunk_mac_size);
    ++buffers_made_;
    return true;
}

// NOLINTNEXTLINE(misc-no-recursion): a freed buffer starts a waiting request (see Flow)
void DataService::give_buffer(bmi::Memory buffer)
{
    free_buffers_.push_back(std::move(buffer));
    // The oldest waiting request first: no request starves.
    while (!free_buffers_.empty() && !waiting_.empty()) {
        const std::uint64_t id = waiting_.front();
        waiting_.pop_front();
        const auto it = flows_.find(id);
        if (it == flows_.end() || it->second->done)
            continue;
        it->second->waiting_for_buffer = false;
        it->second->fill_slots();
    }
}

} // namespace pvfs::server
