// The request and response envelopes around the bodies of bodies.hpp, the
// MAC, and the op table.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <sodium.h>

#include "bodies.hpp"
#include "codec.hpp"
#include "pvfs/proto.hpp"

namespace pvfs::proto {

namespace {

using detail::Decoder;
using detail::Encoder;

// The variant index of each op's body is op - 1: checked for every op, so
// reordering the variants (which would renumber the wire) cannot compile.
template <Op op, class Variant, class Body>
constexpr bool body_for =
    std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(op) - 1, Variant>, Body>;
static_assert(body_for<Op::get_config, RequestBody, GetConfigRequest>);
static_assert(body_for<Op::get_config, ResponseBody, GetConfigResponse>);
static_assert(body_for<Op::status, RequestBody, StatusRequest>);
static_assert(body_for<Op::status, ResponseBody, StatusResponse>);
static_assert(body_for<Op::lookup, RequestBody, LookupRequest>);
static_assert(body_for<Op::lookup, ResponseBody, LookupResponse>);
static_assert(body_for<Op::getattr, RequestBody, GetattrRequest>);
static_assert(body_for<Op::getattr, ResponseBody, GetattrResponse>);
static_assert(body_for<Op::setattr, RequestBody, SetattrRequest>);
static_assert(body_for<Op::setattr, ResponseBody, SetattrResponse>);
static_assert(body_for<Op::create, RequestBody, CreateRequest>);
static_assert(body_for<Op::create, ResponseBody, CreateResponse>);
static_assert(body_for<Op::mkdir, RequestBody, MkdirRequest>);
static_assert(body_for<Op::mkdir, ResponseBody, MkdirResponse>);
static_assert(body_for<Op::mknod, RequestBody, MknodRequest>);
static_assert(body_for<Op::mknod, ResponseBody, MknodResponse>);
static_assert(body_for<Op::symlink, RequestBody, SymlinkRequest>);
static_assert(body_for<Op::symlink, ResponseBody, SymlinkResponse>);
static_assert(body_for<Op::link, RequestBody, LinkRequest>);
static_assert(body_for<Op::link, ResponseBody, LinkResponse>);
static_assert(body_for<Op::readlink, RequestBody, ReadlinkRequest>);
static_assert(body_for<Op::readlink, ResponseBody, ReadlinkResponse>);
static_assert(body_for<Op::remove, RequestBody, RemoveRequest>);
static_assert(body_for<Op::remove, ResponseBody, RemoveResponse>);
static_assert(body_for<Op::rmdir, RequestBody, RmdirRequest>);
static_assert(body_for<Op::rmdir, ResponseBody, RmdirResponse>);
static_assert(body_for<Op::rename, RequestBody, RenameRequest>);
static_assert(body_for<Op::rename, ResponseBody, RenameResponse>);
static_assert(body_for<Op::readdir, RequestBody, ReaddirRequest>);
static_assert(body_for<Op::readdir, ResponseBody, ReaddirResponse>);
static_assert(body_for<Op::statfs, RequestBody, StatfsRequest>);
static_assert(body_for<Op::statfs, ResponseBody, StatfsResponse>);
static_assert(body_for<Op::read, RequestBody, ReadRequest>);
static_assert(body_for<Op::read, ResponseBody, ReadResponse>);
static_assert(body_for<Op::write, RequestBody, WriteRequest>);
static_assert(body_for<Op::write, ResponseBody, WriteResponse>);
static_assert(body_for<Op::fsync, RequestBody, FsyncRequest>);
static_assert(body_for<Op::fsync, ResponseBody, FsyncResponse>);
static_assert(body_for<Op::object_sizes, RequestBody, ObjectSizesRequest>);
static_assert(body_for<Op::object_sizes, ResponseBody, ObjectSizesResponse>);
static_assert(body_for<Op::truncate_object, RequestBody, TruncateObjectRequest>);
static_assert(body_for<Op::truncate_object, ResponseBody, TruncateObjectResponse>);
static_assert(body_for<Op::remove_object, RequestBody, RemoveObjectRequest>);
static_assert(body_for<Op::remove_object, ResponseBody, RemoveObjectResponse>);
static_assert(body_for<Op::list_objects, RequestBody, ListObjectsRequest>);
static_assert(body_for<Op::list_objects, ResponseBody, ListObjectsResponse>);
static_assert(body_for<Op::xattr_get, RequestBody, XattrGetRequest>);
static_assert(body_for<Op::xattr_get, ResponseBody, XattrGetResponse>);
static_assert(body_for<Op::xattr_set, RequestBody, XattrSetRequest>);
static_assert(body_for<Op::xattr_set, ResponseBody, XattrSetResponse>);
static_assert(body_for<Op::xattr_list, RequestBody, XattrListRequest>);
static_assert(body_for<Op::xattr_list, ResponseBody, XattrListResponse>);
static_assert(body_for<Op::xattr_remove, RequestBody, XattrRemoveRequest>);
static_assert(body_for<Op::xattr_remove, ResponseBody, XattrRemoveResponse>);
static_assert(body_for<Op::layout_get, RequestBody, LayoutGetRequest>);
static_assert(body_for<Op::layout_get, ResponseBody, LayoutGetResponse>);
static_assert(body_for<Op::layout_set, RequestBody, LayoutSetRequest>);
static_assert(body_for<Op::layout_set, ResponseBody, LayoutSetResponse>);
static_assert(body_for<Op::list_handles, RequestBody, ListHandlesRequest>);
static_assert(body_for<Op::list_handles, ResponseBody, ListHandlesResponse>);
static_assert(body_for<Op::mkdir_object, RequestBody, MkdirObjectRequest>);
static_assert(body_for<Op::mkdir_object, ResponseBody, MkdirObjectResponse>);
static_assert(body_for<Op::link_dir, RequestBody, LinkDirRequest>);
static_assert(body_for<Op::link_dir, ResponseBody, LinkDirResponse>);
static_assert(body_for<Op::retire_dir, RequestBody, RetireDirRequest>);
static_assert(body_for<Op::retire_dir, ResponseBody, RetireDirResponse>);
static_assert(body_for<Op::unlink_dir, RequestBody, UnlinkDirRequest>);
static_assert(body_for<Op::unlink_dir, ResponseBody, UnlinkDirResponse>);
static_assert(body_for<Op::remove_dir_object, RequestBody, RemoveDirObjectRequest>);
static_assert(body_for<Op::remove_dir_object, ResponseBody, RemoveDirObjectResponse>);
static_assert(body_for<Op::access, RequestBody, AccessRequest>);
static_assert(body_for<Op::access, ResponseBody, AccessResponse>);
static_assert(body_for<Op::session, RequestBody, SessionRequest>);
static_assert(body_for<Op::session, ResponseBody, SessionResponse>);
static_assert(body_for<Op::open, RequestBody, OpenRequest>);
static_assert(body_for<Op::open, ResponseBody, OpenResponse>);
static_assert(body_for<Op::close, RequestBody, CloseRequest>);
static_assert(body_for<Op::close, ResponseBody, CloseResponse>);
static_assert(body_for<Op::orphan_done, RequestBody, OrphanDoneRequest>);
static_assert(body_for<Op::orphan_done, ResponseBody, OrphanDoneResponse>);
static_assert(body_for<Op::list_orphans, RequestBody, ListOrphansRequest>);
static_assert(body_for<Op::list_orphans, ResponseBody, ListOrphansResponse>);
static_assert(body_for<Op::capability, RequestBody, CapabilityRequest>);
static_assert(body_for<Op::capability, ResponseBody, CapabilityResponse>);

constexpr std::array<const char *, op_count> op_names = {
    "get_config",      "status",        "lookup",       "getattr",    "setattr",
    "create",          "mkdir",         "mknod",        "symlink",    "link",
    "readlink",        "remove",        "rmdir",        "rename",     "readdir",
    "statfs",          "read",          "write",        "fsync",      "object_sizes",
    "truncate_object", "remove_object", "list_objects", "xattr_get",  "xattr_set",
    "xattr_list",      "xattr_remove",  "layout_get",   "layout_set", "list_handles",
    "mkdir_object",    "link_dir",      "retire_dir",   "unlink_dir", "remove_dir_object",
    "access",          "session",       "open",         "close",      "orphan_done",
    "list_orphans",    "capability"};

// Parsers indexed by op - 1: each emplaces its body alternative and reads
// its fields.
template <class Variant, std::size_t... I>
constexpr auto make_parsers(std::index_sequence<I...> /*indices*/)
{
    using Parser = void (*)(Decoder &, Variant &);
    return std::array<Parser, sizeof...(I)>{
        +[](Decoder &d, Variant &v) { detail::fields(d, v.template emplace<I>()); }...};
}
constexpr auto request_parsers = make_parsers<RequestBody>(std::make_index_sequence<op_count>{});
constexpr auto response_parsers = make_parsers<ResponseBody>(std::make_index_sequence<op_count>{});

// Responses of failed operations carry no body; the default one stands in.
template <class Variant, std::size_t... I>
constexpr auto make_defaults(std::index_sequence<I...> /*indices*/)
{
    using Maker = void (*)(Variant &);
    return std::array<Maker, sizeof...(I)>{+[](Variant &v) { v.template emplace<I>(); }...};
}
constexpr auto response_defaults =
    make_defaults<ResponseBody>(std::make_index_sequence<op_count>{});

// Closes the body opened at `length_at` and appends the MAC over
// everything before it.
std::size_t finish(Encoder &e, std::size_t length_at, const Key &key, std::vector<std::byte> &out)
{
    const std::size_t body_start = length_at + 4;
    e.patch_u32(length_at, static_cast<std::uint32_t>(out.size() - body_start));
    const std::size_t signed_size = out.size();
    out.resize(signed_size + mac_size);
    const std::span<std::byte> all(out);
    key.sign(all.first(signed_size), all.subspan(signed_size).first<mac_size>());
    return out.size();
}

// Reads magic, version and op; `magic` tells request from response.
Op read_preamble(Decoder &d, std::uint32_t magic, const char *wrong_magic)
{
    std::uint32_t got_magic = 0;
    d.num(got_magic);
    if (d.ok() && got_magic != magic) {
        d.fail(DecodeError::bad_magic, wrong_magic, got_magic);
    }
    std::uint16_t version = 0;
    d.num(version);
    if (d.ok() && version != protocol_version) {
        d.fail(DecodeError::bad_version, "unsupported protocol version", version);
    }
    std::uint16_t op = 0;
    d.num(op);
    if (d.ok() && (op == 0 || op > op_count)) {
        d.fail(DecodeError::bad_op, "unknown op", op);
    }
    return static_cast<Op>(op);
}

// Reads the body length, checks the sizes, verifies the MAC; returns the
// body on success.
std::span<const std::byte> verified_body(Decoder &d, std::span<const std::byte> message,
                                         const Key &key)
{
    std::uint32_t body_length = 0;
    d.num(body_length);
    if (!d.ok()) {
        return {};
    }
    if (std::size_t{body_length} + mac_size > d.left()) {
        d.fail(DecodeError::truncated, "message shorter than its body length and MAC");
        return {};
    }
    if (std::size_t{body_length} + mac_size < d.left()) {
        d.fail(DecodeError::trailing_bytes, "bytes after the MAC");
        return {};
    }
    const std::size_t signed_size = d.position() + body_length;
    if (!key.verify(message.first(signed_size), message.subspan(signed_size).first<mac_size>())) {
        d.fail(DecodeError::bad_mac, "bad MAC: forged, corrupted, or signed with another key");
        return {};
    }
    return message.subspan(d.position(), body_length);
}

template <class Variant, class Parsers>
DecodeResult parse_body(std::span<const std::byte> body, Op op, const Parsers &parsers,
                        Variant &out)
{
    Decoder d(body);
    parsers.at(static_cast<std::size_t>(op) - 1)(d, out);
    if (d.ok() && d.left() != 0) {
        d.fail(DecodeError::trailing_bytes, "bytes after the body");
    }
    return d.result();
}

// Whether the request is a create that carries an open (the envelope says
// so with request_create_opens).
bool create_opens(const RequestBody &body) noexcept
{
    const auto *c = std::get_if<CreateRequest>(&body);
    return c != nullptr && c->open.has_value();
}

// Whether the request is a read or write that carries chunk MACs (the
// envelope says so with request_chunk_macs).
bool has_chunk_macs(const RequestBody &body) noexcept
{
    if (const auto *r = std::get_if<ReadRequest>(&body))
        return r->macs.has_value();
    const auto *w = std::get_if<WriteRequest>(&body);
    return w != nullptr && w->macs.has_value();
}

const ChunkMacs *chunk_macs_of(const RequestBody &body) noexcept
{
    if (const auto *r = std::get_if<ReadRequest>(&body))
        return r->macs ? &*r->macs : nullptr;
    const auto *w = std::get_if<WriteRequest>(&body);
    return w != nullptr && w->macs ? &*w->macs : nullptr;
}

// Whether the request's chunk tags travel with the chunks
// (request_chunk_tags_inline).
bool tags_inline(const RequestBody &body) noexcept
{
    const ChunkMacs *m = chunk_macs_of(body);
    return m != nullptr && m->with_chunks;
}

// The envelope's request_chunk_tags_inline, onto the decoded body: such a
// request carries no tags of its own, and its chunks move as messages.
DecodeResult with_chunk_tags(RequestBody &body) noexcept
{
    ChunkMacs *m = nullptr;
    bool rdma = false;
    if (auto *r = std::get_if<ReadRequest>(&body); r != nullptr && r->macs) {
        m = &*r->macs;
        rdma = !r->rdma.empty();
    } else if (auto *w = std::get_if<WriteRequest>(&body); w != nullptr && w->macs) {
        m = &*w->macs;
        rdma = !w->rdma.empty();
    }
    if (m == nullptr)
        return {DecodeError::bad_value, "chunk_tags_inline flag without chunk MACs", 0};
    if (!m->tags.empty())
        return {DecodeError::bad_value, "tags in a request whose tags travel with its chunks", 0};
    if (rdma)
        return {DecodeError::bad_value, "chunk tags with the chunks of an RDMA transfer", 0};
    m->with_chunks = true;
    return {};
}

} // namespace

const char *op_name(Op op) noexcept
{
    const auto n = static_cast<std::size_t>(op);
    return n >= 1 && n <= op_count ? op_names.at(n - 1) : "unknown";
}

std::uint32_t capability_needed(Op op) noexcept
{
    switch (op) {
    case Op::read:
        return cap_read;
    case Op::write:
    case Op::truncate_object:
        return cap_write;
    case Op::fsync:
        return cap_read | cap_write;
    case Op::remove_object:
        return cap_destroy;
    default:
        return 0;
    }
}

bool changes_metadata(Op op) noexcept
{
    switch (op) {
    case Op::setattr:
    case Op::create:
    case Op::mkdir:
    case Op::mknod:
    case Op::symlink:
    case Op::link:
    case Op::remove:
    case Op::rmdir:
    case Op::rename:
    case Op::xattr_set:
    case Op::xattr_remove:
    case Op::layout_set:
    case Op::mkdir_object:
    case Op::link_dir:
    case Op::retire_dir:
    case Op::unlink_dir:
    case Op::remove_dir_object:
        return true;
    default:
        return false;
    }
}

Response response_to(const Request &req, std::int32_t status)
{
    Response resp;
    resp.status = status;
    resp.request_id = req.request_id;
    resp.session = req.session;
    resp.seq = req.seq;
    response_defaults.at(req.body.index())(resp.body);
    return resp;
}

bool answers(const Response &resp, const Request &req) noexcept
{
    return resp.op() == req.op() && resp.request_id == req.request_id &&
           resp.session == req.session && resp.seq == req.seq;
}

std::string DecodeResult::message() const
{
    switch (error) {
    case DecodeError::bad_version:
        return fmt::format("unsupported protocol version {} (this build speaks {})", value,
                           protocol_version);
    case DecodeError::bad_op:
        return fmt::format("unknown op {}", value);
    case DecodeError::bad_magic:
        return fmt::format("{} (magic {:#010x})", what, value);
    case DecodeError::bad_flags:
        return fmt::format("{} ({:#x})", what, value);
    case DecodeError::too_long:
        return fmt::format("{} (got {})", what, value);
    default:
        return what;
    }
}

std::size_t encode(const Request &req, const Key &key, std::vector<std::byte> &out)
{
    out.clear();
    Encoder e(out);
    e.num(request_magic);
    e.num(protocol_version);
    e.num(static_cast<std::uint16_t>(req.op()));
    e.num((req.once.present() ? request_has_once : 0U) |
          (req.knows_orphaned ? request_knows_orphaned : 0U) | (req.to ? request_bound : 0U) |
          (create_opens(req.body) ? request_create_opens : 0U) |
          (has_chunk_macs(req.body) ? request_chunk_macs : 0U) | (key.id() ? request_keyed : 0U) |
          (req.cap ? request_capability : 0U) |
          (req.wants_capability ? request_wants_capability : 0U) |
          (tags_inline(req.body) ? request_chunk_tags_inline : 0U)); // flags
    e.num(req.request_id);
    e.num(req.session);
    e.num(req.seq);
    e.num(req.time_ns);
    if (req.once.present()) {
        e.num(req.once.client_id);
        e.num(req.once.slot);
        e.num(req.once.step);
        e.num(req.once.xid);
    }
    if (req.to) {
        e.num(req.to->fs_id);
        e.num(req.to->server_index);
    }
    if (const std::optional<std::uint32_t> id = key.id()) {
        e.num(*id);
    }
    if (req.cap) {
        detail::fields(e, *req.cap);
    }
    e.num(req.cred.uid);
    e.num(req.cred.gid);
    e.list(req.cred.groups, max_groups, 4, nullptr, [&e](std::uint32_t g) { e.num(g); });
    const std::size_t length_at = e.placeholder_u32();
    std::visit([&e](const auto &body) { detail::fields(e, body); }, req.body);
    return finish(e, length_at, key, out);
}

std::size_t encode(const Response &resp, const Key &key, std::vector<std::byte> &out)
{
    out.clear();
    Encoder e(out);
    e.num(response_magic);
    e.num(protocol_version);
    e.num(static_cast<std::uint16_t>(resp.op()));
    e.num(resp.status);
    e.num(resp.request_id);
    e.num(resp.session);
    e.num(resp.seq);
    const std::size_t length_at = e.placeholder_u32();
    if (resp.status == 0) {
        std::visit([&e](const auto &body) { detail::fields(e, body); }, resp.body);
    }
    return finish(e, length_at, key, out);
}

void encode_body(const ResponseBody &body, std::vector<std::byte> &out)
{
    out.clear();
    Encoder e(out);
    std::visit([&e](const auto &b) { detail::fields(e, b); }, body);
}

DecodeResult decode_body(Op op, std::span<const std::byte> bytes, ResponseBody &out)
{
    const auto n = static_cast<std::size_t>(op);
    if (n == 0 || n > op_count)
        return {DecodeError::bad_op, "unknown op", n};
    return parse_body(bytes, op, response_parsers, out);
}

BodyDigest body_digest(const RequestBody &body, std::vector<std::byte> &scratch)
{
    scratch.clear();
    Encoder e(scratch);
    e.num(static_cast<std::uint16_t>(body.index() + 1));
    std::visit([&e](const auto &b) { detail::fields(e, b); }, body);
    BodyDigest out{};
    crypto_generichash(reinterpret_cast<unsigned char *>(out.data()), out.size(), // NOLINT
                       reinterpret_cast<const unsigned char *>(scratch.data()),   // NOLINT
                       scratch.size(), nullptr, 0);
    return out;
}

std::optional<std::uint32_t> request_key_id(std::span<const std::byte> message) noexcept
{
    Decoder d(message);
    std::uint32_t magic = 0;
    std::uint16_t version = 0;
    std::uint16_t op = 0;
    std::uint32_t flags = 0;
    d.num(magic);
    d.num(version);
    d.num(op);
    d.num(flags);
    if (!d.ok() || (flags & request_keyed) == 0) {
        return std::nullopt;
    }
    // request_id, session, seq, time_ns; the once ids; the destination.
    std::size_t skip = std::size_t{4} * 8;
    skip += (flags & request_has_once) != 0 ? 24 : 0;
    skip += (flags & request_bound) != 0 ? 8 : 0;
    const std::size_t at = d.position() + skip;
    if (message.size() < at + 4) {
        return std::nullopt;
    }
    Decoder id_reader(message.subspan(at, 4));
    std::uint32_t id = 0;
    id_reader.num(id);
    return id;
}

DecodeResult decode(std::span<const std::byte> message, const Key &key, Request &out)
{
    Decoder d(message);
    const Op op = read_preamble(d, request_magic, "not a pvfs request");
    std::uint32_t flags = 0;
    d.num(flags);
    if (d.ok() && (flags & ~request_flags) != 0) {
        d.fail(DecodeError::bad_flags, "unknown request flags", flags);
    }
    out.knows_orphaned = (flags & request_knows_orphaned) != 0;
    out.wants_capability = (flags & request_wants_capability) != 0;
    if (d.ok() && out.wants_capability && op != Op::create && op != Op::open) {
        d.fail(DecodeError::bad_flags, "wants_capability flag on another op than create or open",
               flags);
    }
    d.num(out.request_id);
    d.num(out.session);
    d.num(out.seq);
    d.num(out.time_ns);
    out.once = OnceIds{};
    if ((flags & request_has_once) != 0) {
        d.num(out.once.client_id);
        d.num(out.once.slot);
        d.num(out.once.step);
        d.num(out.once.xid);
        if (d.ok() && out.once.client_id == 0) {
            d.fail(DecodeError::bad_value, "exactly-once ids of client 0");
        } else if (d.ok() && out.once.slot >= max_slots) {
            d.fail(DecodeError::bad_value, "exactly-once slot out of range", out.once.slot);
        } else if (d.ok() && out.once.step >= max_steps) {
            d.fail(DecodeError::bad_value, "exactly-once step out of range", out.once.step);
        }
    }
    out.to.reset();
    if ((flags & request_bound) != 0) {
        Destination to;
        d.num(to.fs_id);
        d.num(to.server_index);
        out.to = to;
    }
    if ((flags & request_keyed) != 0) {
        std::uint32_t id = 0;
        d.num(id);
        if (d.ok() && key.id() != id) {
            d.fail(DecodeError::bad_mac, "key id is not that of the key checking the request", id);
        }
    } else if (d.ok() && key.id()) {
        d.fail(DecodeError::bad_mac, "request without a key id checked with a client key");
    }
    out.cap.reset();
    if ((flags & request_capability) != 0) {
        if (d.ok() && capability_needed(op) == 0) {
            d.fail(DecodeError::bad_flags, "capability flag on an op that takes none", flags);
        }
        Capability cap;
        detail::fields(d, cap);
        out.cap = cap;
    }
    d.num(out.cred.uid);
    d.num(out.cred.gid);
    d.list(out.cred.groups, max_groups, 4, "more than 32 supplementary groups",
           [&d](std::uint32_t &g) { d.num(g); });
    if (d.ok() && (flags & request_create_opens) != 0 && op != Op::create) {
        d.fail(DecodeError::bad_flags, "create_opens flag on another op than create", flags);
    }
    if (d.ok() && (flags & request_chunk_macs) != 0 && op != Op::read && op != Op::write) {
        d.fail(DecodeError::bad_flags, "chunk_macs flag on another op than read or write", flags);
    }
    if (d.ok() && (flags & request_chunk_tags_inline) != 0 && (flags & request_chunk_macs) == 0) {
        d.fail(DecodeError::bad_flags, "chunk_tags_inline flag without chunk MACs", flags);
    }
    const std::span<const std::byte> body = verified_body(d, message, key);
    if (!d.ok()) {
        return d.result();
    }
    const DecodeResult r = parse_body(body, op, request_parsers, out.body);
    if (r && create_opens(out.body) != ((flags & request_create_opens) != 0)) {
        return {DecodeError::bad_value,
                (flags & request_create_opens) != 0 ? "create_opens flag without the open"
                                                    : "create's open without the create_opens flag",
                0};
    }
    if (r && has_chunk_macs(out.body) != ((flags & request_chunk_macs) != 0)) {
        return {DecodeError::bad_value,
                (flags & request_chunk_macs) != 0 ? "chunk_macs flag without the MACs"
                                                  : "chunk MACs without the chunk_macs flag",
                0};
    }
    if (r && (flags & request_chunk_tags_inline) != 0)
        return with_chunk_tags(out.body);
    return r;
}

DecodeResult decode(std::span<const std::byte> message, const Key &key, Response &out)
{
    Decoder d(message);
    const Op op = read_preamble(d, response_magic, "not a pvfs response");
    d.num(out.status);
    if (d.ok() && out.status < 0) {
        d.fail(DecodeError::bad_value, "negative status (must be 0 or a positive errno)");
    }
    d.num(out.request_id);
    d.num(out.session);
    d.num(out.seq);
    const std::span<const std::byte> body = verified_body(d, message, key);
    if (!d.ok()) {
        return d.result();
    }
    if (out.status != 0) {
        response_defaults.at(static_cast<std::size_t>(op) - 1)(out.body);
        if (!body.empty()) {
            return {DecodeError::bad_value, "error response with a body", 0};
        }
        return {};
    }
    return parse_body(body, op, response_parsers, out.body);
}

} // namespace pvfs::proto
