// proto: the pvfs request/response codec.  Every message between a client
// (tools, pvfsd) and a pvfs-server is one BMI message: a request (sent
// unexpected) or a response (expected, on the request's tag).  This library
// turns the typed structs below into those bytes and back, and signs and
// verifies them with the cluster key; servers refuse replays themselves
// (server/replay).  It does no networking.  The byte layout is in
// docs/protocol.md.
//
//     proto::Request req{.request_id = 7, .session = s, .seq = ++seq,
//                        .time_ns = now, .cred = cred,
//                        .body = proto::LookupRequest{.parent = dir, .name = "a"}};
//     proto::encode(req, key, buffer);          // buffer: reused, no allocation once warm
//     ...
//     proto::Request in;
//     if (auto r = proto::decode(bytes, key, in); !r) log(r.message());
//
// Every integer is little-endian; every length is checked against the bytes
// left and against the field's limit before anything is allocated.  A
// decoded message has passed its MAC and holds only valid values (names
// are valid path components, enums are known, nanoseconds < 1e9).  Encoding
// does not validate: the caller sends valid values (check limits where
// they arise, e.g. ENAMETOOLONG in the client), or the peer rejects the
// message.
#ifndef PVFS_PROTO_HPP
#define PVFS_PROTO_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pvfs/counters.hpp"
#include "pvfs/types.hpp"

namespace pvfs::proto {

inline constexpr std::uint32_t request_magic = 0x51465650;  // "PVFQ" in little-endian bytes
inline constexpr std::uint32_t response_magic = 0x52465650; // "PVFR"
inline constexpr std::uint16_t protocol_version = 1;
inline constexpr std::size_t mac_size = 32; // HMAC-SHA-256
inline constexpr std::size_t key_size = 32;

// Bulk data of a request moves on the request's BMI tag (a bmi::Tag,
// int32) with this bit set, so that an early error response (on the tag
// itself) never lands in a data buffer.  Request tags stay below it
// (docs/protocol.md).
inline constexpr std::int32_t data_tag_bit = std::int32_t{1} << 30U;
[[nodiscard]] constexpr std::int32_t data_tag(std::int32_t request_tag) noexcept
{
    return request_tag | data_tag_bit;
}

// Protocol limits beyond types.hpp's; the decoder rejects anything larger.
inline constexpr std::size_t max_readdir_entries = 4096;
inline constexpr std::size_t max_config_text = std::size_t{1} << 20U;
inline constexpr std::size_t max_inline_data = std::size_t{64} << 10U;
// A read or write's RDMA descriptor: 16 bytes per memory piece and a header
// (docs/bmi.md), room for more pieces than a request has regions.
inline constexpr std::size_t max_rdma_descriptor = std::size_t{32} << 10U;
// Largest encoded request: inline data (or an xattr value) with room for
// the rest.  Servers accept unexpected messages this large; clients send them.
inline constexpr std::size_t max_request_bytes = max_inline_data + (std::size_t{64} << 10U);
inline constexpr std::size_t max_object_sizes = 1024;  // handles in one object_sizes
inline constexpr std::size_t max_list_handles = 16384; // handles in one list reply
inline constexpr std::size_t max_xattr_names = 4096;   // names in one xattr_list reply
inline constexpr std::size_t max_server_text = 255;    // status: server name, version
// status counters (pvfs/counters.hpp): ops listed, latency buckets per op
inline constexpr std::size_t max_counter_ops = pvfs::max_counter_ops;
inline constexpr std::size_t max_latency_buckets = pvfs::max_latency_buckets;
inline constexpr std::uint16_t counters_version = pvfs::counters_version;
inline constexpr std::size_t max_close_handles = 1024; // handles in one close (either way)
inline constexpr std::size_t max_list_orphans = 4096;  // entries in one list_orphans reply
// Above every valid message (the largest is a get_config reply).
inline constexpr std::size_t max_message_size = max_config_text + 4096;

// Operation numbers are on the wire: never renumber, only append.
enum class Op : std::uint16_t {
    get_config = 1,
    status = 2,
    lookup = 3,
    getattr = 4,
    setattr = 5,
    create = 6,
    mkdir = 7,
    mknod = 8,
    symlink = 9,
    link = 10,
    readlink = 11,
    remove = 12,
    rmdir = 13,
    rename = 14,
    readdir = 15,
    statfs = 16,
    read = 17,
    write = 18,
    fsync = 19,
    object_sizes = 20,
    truncate_object = 21,
    remove_object = 22,
    list_objects = 23,
    xattr_get = 24,
    xattr_set = 25,
    xattr_list = 26,
    xattr_remove = 27,
    layout_get = 28,
    layout_set = 29,
    list_handles = 30,
    // Remote directories (docs/metadata.md "Remote directories"): the
    // steps of a mkdir and an rmdir whose directory lives on another
    // metadata server than its parent, driven by the client.
    mkdir_object = 31,
    link_dir = 32,
    retire_dir = 33,
    unlink_dir = 34,
    remove_dir_object = 35,
    // May the caller read/write/execute an object (access(2) semantics,
    // after root squash)?  The client library asks before moving data.
    access = 36,
    // Opens or ends a client's exactly-once session on a metadata server
    // (docs/protocol.md "Exactly once").
    session = 37,
    // POSIX unlink semantics (docs/metadata.md "Orphans and open
    // references"): a client's open references, and the files whose last
    // name went while they were held.
    open = 38,
    close = 39,
    orphan_done = 40,
    list_orphans = 41,
    // A capability for a file's data objects (docs/protocol.md
    // "Capabilities"): the metadata server checks the rights asked for and
    // signs them for the data servers, which refuse data I/O without one.
    capability = 42,
};
inline constexpr std::uint16_t op_count = 42;

// "lookup", "xattr_set", ...; "unknown" for a value outside Op.
[[nodiscard]] const char *op_name(Op op) noexcept;
// Whether a request of `op` changes a metadata server's namespace, so
// that it carries exactly-once ids (the server answers a retry of it from
// its reply cache).
[[nodiscard]] bool changes_metadata(Op op) noexcept;

using Bytes = std::vector<std::byte>;

// ---- pieces shared by several bodies ------------------------------------

// A byte range of a data object (object offsets on one data server).
struct Region {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    friend bool operator==(const Region &, const Region &) = default;
};

struct DirEntry {
    std::string name;
    Handle handle = no_handle;
    ObjectType type = ObjectType::regular;
    std::uint64_t cookie = 0; // resumes the listing after this entry
    friend bool operator==(const DirEntry &, const DirEntry &) = default;
};

// setattr mask bits: which fields of the request to apply.
inline constexpr std::uint32_t set_mode = 1U << 0U;
inline constexpr std::uint32_t set_uid = 1U << 1U;
inline constexpr std::uint32_t set_gid = 1U << 2U;
inline constexpr std::uint32_t set_atime = 1U << 3U;
inline constexpr std::uint32_t set_mtime = 1U << 4U;
inline constexpr std::uint32_t set_atime_now = 1U << 5U;
inline constexpr std::uint32_t set_mtime_now = 1U << 6U;
inline constexpr std::uint32_t set_ctime = 1U << 7U;
inline constexpr std::uint32_t set_all = (1U << 8U) - 1;
// Not a field but a claim: the caller's kernel let it do this through a
// file open for writing.  The metadata server believes it only when the
// request's session holds the file open for writing (docs/protocol.md).
inline constexpr std::uint32_t setattr_by_open = 1U << 8U;

inline constexpr std::uint32_t rename_noreplace = 1;
inline constexpr std::uint32_t rename_exchange = 2;

inline constexpr std::uint32_t xattr_create = 1;
inline constexpr std::uint32_t xattr_replace = 2;

// status roles bitmask
inline constexpr std::uint32_t role_metadata = 1;
inline constexpr std::uint32_t role_data = 2;

// object_sizes: the size reported for a handle with no object.
inline constexpr std::uint64_t no_object_size = ~std::uint64_t{0};

// ---- chunk MACs (docs/protocol.md "Chunk MACs") -------------------------

// One chunk's tag: Poly1305 under a one-time key per chunk, derived from
// the connection's session key (chunk_mac below).
inline constexpr std::size_t chunk_mac_size = 16;
using ChunkMac = std::array<std::byte, chunk_mac_size>;
// Chunks of one read or write request, at most: 64 KiB of tags in a write
// request (which then has no inline data), 256 MiB at 64 KiB chunks and
// 4 GiB at the default 1 MiB chunks.  The client cuts larger I/O into
// requests below it.
inline constexpr std::size_t max_chunk_macs = 4096;
// What a read or write request says about its chunks' MACs: which session
// key made them (key_check, so that a request MACed under the key of a
// connection that has since been replaced is told apart from a forgery),
// and for a write each chunk's tag in stream order (a read's tags come in
// its response).
// With `with_chunks` (the envelope flag request_chunk_tags_inline) no tag
// is in the request or its response: each chunk message is the chunk's
// bytes followed by its tag, so that a tag is made as its chunk is sent
// and checked as it arrives (bulk chunks as messages only, never RDMA).
struct ChunkMacs {
    std::uint64_t key_check = 0;
    std::vector<ChunkMac> tags; // writes: one per chunk; reads and with_chunks: empty
    bool with_chunks = false;   // carried by the envelope, not the body
    friend bool operator==(const ChunkMacs &, const ChunkMacs &) = default;
};

// ---- capabilities (docs/protocol.md "Capabilities") ----------------------

// Capability::rights bits.  read: read and fsync the objects; write: write,
// truncate and fsync them; destroy: remove them (granted only for a handle
// that names no live file any more).
inline constexpr std::uint32_t cap_read = 1;
inline constexpr std::uint32_t cap_write = 2;
inline constexpr std::uint32_t cap_destroy = 4;
inline constexpr std::uint32_t cap_rights = cap_read | cap_write | cap_destroy;
inline constexpr std::size_t capability_tag_size = 16;
using CapabilityTag = std::array<std::byte, capability_tag_size>;
// What a metadata server grants, for the data servers to check on every
// data request: rights over the data objects of one file, for one key
// (the one whose request got it: a capability read off the wire is of no
// use to another key), until a time of the metadata server's clock.  The
// tag is keyed BLAKE2b under the capability key (capability_key below),
// which only servers derive.
struct Capability {
    Handle handle = no_handle;
    std::uint32_t rights = 0; // cap_* bits, not 0
    std::uint32_t fs_id = 0;
    bool keyed = false;          // for the client key key_id; false: for the cluster key
    std::uint32_t key_id = 0;    // 0 unless keyed
    std::int64_t expires_ns = 0; // CLOCK_REALTIME of the metadata server that signed it
    CapabilityTag tag{};
    friend bool operator==(const Capability &, const Capability &) = default;
};

// ---- request bodies, one per op, in Op order -----------------------------

struct GetConfigRequest {
    friend bool operator==(const GetConfigRequest &, const GetConfigRequest &) = default;
};
// Trailing (absent from older clients): the newest counters_version the
// client reads; the server then appends its counters (StatusResponse).  A
// server older than the counters refuses the request as undecodable.
struct StatusRequest {
    std::optional<std::uint16_t> counters;
    friend bool operator==(const StatusRequest &, const StatusRequest &) = default;
};
struct LookupRequest {
    Handle parent = no_handle;
    std::string name;
    friend bool operator==(const LookupRequest &, const LookupRequest &) = default;
};
struct GetattrRequest {
    Handle handle = no_handle;
    friend bool operator==(const GetattrRequest &, const GetattrRequest &) = default;
};
struct SetattrRequest {
    Handle handle = no_handle;
    std::uint32_t mask = 0; // set_* bits
    std::uint32_t mode = 0;
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    Timespec atime;
    Timespec mtime;
    friend bool operator==(const SetattrRequest &, const SetattrRequest &) = default;
};
// The open a create may carry (envelope flag request_create_opens): the
// file it creates, or finds (not exclusive), is then held open for
// client_id as an OpenRequest would, registered with the create itself, so
// that the create is one round trip and no unlink comes between.
struct CreateOpen {
    std::uint64_t client_id = 0; // not 0
    std::uint32_t mode = 0;      // open_read | open_write, not 0
    std::uint64_t gen = 0;       // not 0, as OpenRequest::gen
    friend bool operator==(const CreateOpen &, const CreateOpen &) = default;
};
struct CreateRequest {
    Handle parent = no_handle;
    std::string name;
    std::uint32_t mode = 0;
    bool exclusive = false;
    Layout layout; // stripe_count 0: inherit from the parent
    // On the wire (after layout) exactly when the envelope has
    // request_create_opens.
    std::optional<CreateOpen> open = std::nullopt;
    friend bool operator==(const CreateRequest &, const CreateRequest &) = default;
};
struct MkdirRequest {
    Handle parent = no_handle;
    std::string name;
    std::uint32_t mode = 0;
    friend bool operator==(const MkdirRequest &, const MkdirRequest &) = default;
};
struct MknodRequest {
    Handle parent = no_handle;
    std::string name;
    ObjectType type = ObjectType::fifo; // fifo, socket, char_device or block_device
    std::uint32_t mode = 0;
    std::uint64_t rdev = 0;
    friend bool operator==(const MknodRequest &, const MknodRequest &) = default;
};
struct SymlinkRequest {
    Handle parent = no_handle;
    std::string name;
    std::string target;
    friend bool operator==(const SymlinkRequest &, const SymlinkRequest &) = default;
};
struct LinkRequest {
    Handle handle = no_handle;
    Handle new_parent = no_handle;
    std::string new_name;
    friend bool operator==(const LinkRequest &, const LinkRequest &) = default;
};
struct ReadlinkRequest {
    Handle handle = no_handle;
    friend bool operator==(const ReadlinkRequest &, const ReadlinkRequest &) = default;
};
struct RemoveRequest {
    Handle parent = no_handle;
    std::string name;
    friend bool operator==(const RemoveRequest &, const RemoveRequest &) = default;
};
struct RmdirRequest {
    Handle parent = no_handle;
    std::string name;
    friend bool operator==(const RmdirRequest &, const RmdirRequest &) = default;
};
struct RenameRequest {
    Handle old_parent = no_handle;
    std::string old_name;
    Handle new_parent = no_handle;
    std::string new_name;
    std::uint32_t flags = 0; // rename_noreplace, rename_exchange
    friend bool operator==(const RenameRequest &, const RenameRequest &) = default;
};
struct ReaddirRequest {
    Handle handle = no_handle;
    std::uint64_t cookie = 0; // 0: from the start
    std::uint32_t max_entries = 0;
    friend bool operator==(const ReaddirRequest &, const ReaddirRequest &) = default;
};
struct StatfsRequest {
    friend bool operator==(const StatfsRequest &, const StatfsRequest &) = default;
};
// The data moves as separate BMI messages on the request's tag (the server
// pushes read chunks of chunk_size bytes), or, when `rdma` is set, by RDMA
// of the client memory it describes: the bytes bmi::Bmi::expose() gave for
// the request's stream, which the server reads (write) or writes (read)
// itself; see docs/protocol.md.
struct ReadRequest {
    Handle handle = no_handle;
    std::vector<Region> regions; // at most max_io_regions
    std::uint32_t chunk_size = 0;
    std::uint32_t flags = 0; // carried for the data server, not interpreted here
    Bytes rdma;              // empty, or the client's exposed memory (max_rdma_descriptor)
    // Trailing, with the envelope flag request_chunk_macs: the response
    // carries a tag per chunk.
    std::optional<ChunkMacs> macs;
    friend bool operator==(const ReadRequest &, const ReadRequest &) = default;
};
struct WriteRequest {
    Handle handle = no_handle;
    std::vector<Region> regions; // at most max_io_regions
    std::uint32_t chunk_size = 0;
    std::uint32_t flags = 0;
    Bytes inline_data; // the whole payload when small (<= max_inline_data), else empty
    Bytes rdma;        // as ReadRequest::rdma; never with inline_data
    // Trailing, with the envelope flag request_chunk_macs: a tag per chunk
    // (never with inline_data, which the request's own MAC covers).
    std::optional<ChunkMacs> macs;
    friend bool operator==(const WriteRequest &, const WriteRequest &) = default;
};
struct FsyncRequest {
    Handle handle = no_handle;
    friend bool operator==(const FsyncRequest &, const FsyncRequest &) = default;
};
struct ObjectSizesRequest {
    std::vector<Handle> handles; // at most max_object_sizes
    friend bool operator==(const ObjectSizesRequest &, const ObjectSizesRequest &) = default;
};
struct TruncateObjectRequest {
    Handle handle = no_handle;
    std::uint64_t size = 0;
    friend bool operator==(const TruncateObjectRequest &, const TruncateObjectRequest &) = default;
};
struct RemoveObjectRequest {
    Handle handle = no_handle;
    friend bool operator==(const RemoveObjectRequest &, const RemoveObjectRequest &) = default;
};
struct ListObjectsRequest {
    std::uint64_t cookie = 0;
    std::uint32_t max = 0;
    friend bool operator==(const ListObjectsRequest &, const ListObjectsRequest &) = default;
};
struct XattrGetRequest {
    Handle handle = no_handle;
    std::string name;
    friend bool operator==(const XattrGetRequest &, const XattrGetRequest &) = default;
};
struct XattrSetRequest {
    Handle handle = no_handle;
    std::string name;
    Bytes value;
    std::uint32_t flags = 0; // xattr_create, xattr_replace
    friend bool operator==(const XattrSetRequest &, const XattrSetRequest &) = default;
};
struct XattrListRequest {
    Handle handle = no_handle;
    friend bool operator==(const XattrListRequest &, const XattrListRequest &) = default;
};
struct XattrRemoveRequest {
    Handle handle = no_handle;
    std::string name;
    friend bool operator==(const XattrRemoveRequest &, const XattrRemoveRequest &) = default;
};
struct LayoutGetRequest {
    Handle handle = no_handle;
    friend bool operator==(const LayoutGetRequest &, const LayoutGetRequest &) = default;
};
struct LayoutSetRequest {
    Handle handle = no_handle;
    Layout layout;
    friend bool operator==(const LayoutSetRequest &, const LayoutSetRequest &) = default;
};
struct ListHandlesRequest {
    std::uint64_t cookie = 0;
    std::uint32_t max = 0;
    friend bool operator==(const ListHandlesRequest &, const ListHandlesRequest &) = default;
};

// On the directory's server: a directory object with no entry yet.  Its
// owner is the caller; its mode, gid and layout follow `parent` (the
// parent's attributes, which the client just read) as a local mkdir's
// would; its ".." is parent.handle.
struct MkdirObjectRequest {
    Attr parent;
    std::uint32_t mode = 0;
    friend bool operator==(const MkdirObjectRequest &, const MkdirObjectRequest &) = default;
};
// On the parent's server: the entry (parent, name) -> handle, a directory
// on another server.
struct LinkDirRequest {
    Handle parent = no_handle;
    std::string name;
    Handle handle = no_handle;
    friend bool operator==(const LinkDirRequest &, const LinkDirRequest &) = default;
};
// On the directory's server: retire (an empty directory refuses new
// entries from then on) or, retire false, take it back.
struct RetireDirRequest {
    Handle handle = no_handle;
    bool retire = false;
    friend bool operator==(const RetireDirRequest &, const RetireDirRequest &) = default;
};
// On the parent's server: removes the entry (parent, name) if it still
// names `handle`; owner_uid is the directory's owner (for the sticky bit).
struct UnlinkDirRequest {
    Handle parent = no_handle;
    std::string name;
    Handle handle = no_handle;
    std::uint32_t owner_uid = 0;
    friend bool operator==(const UnlinkDirRequest &, const UnlinkDirRequest &) = default;
};
// On the directory's server: removes a retired directory object.
struct RemoveDirObjectRequest {
    Handle handle = no_handle;
    friend bool operator==(const RemoveDirObjectRequest &,
                           const RemoveDirObjectRequest &) = default;
};
// Bits of AccessRequest::mask (R_OK, W_OK, X_OK); 0 asks only whether the
// object exists.
inline constexpr std::uint32_t access_read = 4;
inline constexpr std::uint32_t access_write = 2;
inline constexpr std::uint32_t access_exec = 1;
struct AccessRequest {
    Handle handle = no_handle;
    std::uint32_t mask = 0; // access_read | access_write | access_exec
    friend bool operator==(const AccessRequest &, const AccessRequest &) = default;
};

// SessionRequest::action
inline constexpr std::uint32_t session_open = 1;
inline constexpr std::uint32_t session_end = 2;
// A client's owner text (who it is across restarts: a new session of the
// same owner ends the old one) is at most this long; empty: no owner.
inline constexpr std::size_t max_owner_text = 255;
struct SessionRequest {
    std::uint64_t client_id = 0; // not 0
    std::uint32_t action = session_open;
    std::string owner;
    friend bool operator==(const SessionRequest &, const SessionRequest &) = default;
};

// OpenRequest::mode bits.
inline constexpr std::uint32_t open_read = 1;
inline constexpr std::uint32_t open_write = 2;
// getattr of `handle` that also records that client_id's session holds it
// open, so that its last unlink keeps it (as an orphan) until the last
// close.  gen is the opener's count of opens of the handle: an open older
// than the hold already recorded is ignored (idempotent, no slot needed).
// reclaim: re-established after the metadata server restarted; allowed on
// an unlinked (orphaned) file during the server's grace period.
struct OpenRequest {
    Handle handle = no_handle;
    std::uint64_t client_id = 0; // not 0
    std::uint32_t mode = 0;      // open_read | open_write
    std::uint64_t gen = 0;
    bool reclaim = false;
    friend bool operator==(const OpenRequest &, const OpenRequest &) = default;
};
struct OpenRef {
    Handle handle = no_handle;
    std::uint64_t gen = 0; // the gen of the open this closes (a later open keeps the hold)
    friend bool operator==(const OpenRef &, const OpenRef &) = default;
};
// Drops client_id's holds on `refs`; no refs: renews its lease only.
struct CloseRequest {
    std::uint64_t client_id = 0; // not 0
    std::vector<OpenRef> refs;   // at most max_close_handles
    friend bool operator==(const CloseRequest &, const CloseRequest &) = default;
};
// The caller removed the data objects of an orphan `close` handed it: the
// server forgets the orphan.  Idempotent.
struct OrphanDoneRequest {
    Handle handle = no_handle;
    friend bool operator==(const OrphanDoneRequest &, const OrphanDoneRequest &) = default;
};
// The orphans of the server with handle > cookie (root only, for fsck).
struct ListOrphansRequest {
    std::uint64_t cookie = 0;
    std::uint32_t max = 0;
    friend bool operator==(const ListOrphansRequest &, const ListOrphansRequest &) = default;
};

// OrphanEntry::state
inline constexpr std::uint8_t orphan_held = 1;    // unlinked, open somewhere: the inode stays
inline constexpr std::uint8_t orphan_reclaim = 2; // inode gone; data objects still to remove
struct OrphanEntry {
    Handle handle = no_handle;
    std::uint8_t state = orphan_held;
    std::uint64_t since_ns = 0; // CLOCK_REALTIME of the last state change
    Layout layout;
    friend bool operator==(const OrphanEntry &, const OrphanEntry &) = default;
};
// A file whose data objects the receiver of a close reply removes, then
// sends orphan_done.
struct Doomed {
    Handle handle = no_handle;
    Layout layout;
    friend bool operator==(const Doomed &, const Doomed &) = default;
};

// A capability for `rights` (cap_* bits) over `handle`'s data objects.
// read and write are granted by the caller's permission on the file, or,
// with a client_id, when that client's session (of the same key) holds it
// open with that mode (an open descriptor keeps its rights after a
// chmod).  destroy alone, for a handle this server issued whose file is
// gone (unlinked and not held open).
struct CapabilityRequest {
    Handle handle = no_handle;
    std::uint32_t rights = 0;
    std::uint64_t client_id = 0; // 0: none
    friend bool operator==(const CapabilityRequest &, const CapabilityRequest &) = default;
};

// ---- response bodies, one per op, in Op order ----------------------------

struct GetConfigResponse {
    std::string config_text; // TOML, at most max_config_text
    std::uint32_t server_index = 0;
    friend bool operator==(const GetConfigResponse &, const GetConfigResponse &) = default;
};
using OpCounters = pvfs::OpCounters; // pvfs/counters.hpp
using ServerCounters = pvfs::ServerCounters;
struct StatusResponse {
    std::string server_name;
    std::string version;
    std::array<std::byte, 32> config_hash{};
    std::uint32_t roles = 0; // role_metadata | role_data
    std::uint64_t uptime_ns = 0;
    // File data this server moved as its own bulk messages, and by RDMA
    // of the clients' memory (reads and writes together, since start).
    std::uint64_t bulk_message_bytes = 0;
    std::uint64_t bulk_rdma_bytes = 0;
    // Trailing: only in the answer to a request that asked for them.
    std::optional<ServerCounters> counters;
    friend bool operator==(const StatusResponse &, const StatusResponse &) = default;
};
struct LookupResponse {
    Attr attr;
    friend bool operator==(const LookupResponse &, const LookupResponse &) = default;
};
struct GetattrResponse {
    Attr attr;
    friend bool operator==(const GetattrResponse &, const GetattrResponse &) = default;
};
struct SetattrResponse {
    Attr attr;
    friend bool operator==(const SetattrResponse &, const SetattrResponse &) = default;
};
struct CreateResponse {
    Attr attr;
    bool created = false; // false: it existed (and the request was not exclusive)
    // Trailing, only in the answer to a request with request_wants_capability
    // that created a regular file: read and write over its data.
    std::optional<Capability> cap;
    friend bool operator==(const CreateResponse &, const CreateResponse &) = default;
};
struct MkdirResponse {
    Attr attr;
    friend bool operator==(const MkdirResponse &, const MkdirResponse &) = default;
};
struct MknodResponse {
    Attr attr;
    friend bool operator==(const MknodResponse &, const MknodResponse &) = default;
};
struct SymlinkResponse {
    Attr attr;
    friend bool operator==(const SymlinkResponse &, const SymlinkResponse &) = default;
};
struct LinkResponse {
    Attr attr;
    friend bool operator==(const LinkResponse &, const LinkResponse &) = default;
};
struct ReadlinkResponse {
    std::string target;
    friend bool operator==(const ReadlinkResponse &, const ReadlinkResponse &) = default;
};
// The client removes the data objects when nlink_after == 0, type is
// regular and the file was not orphaned.  `orphaned` is on the wire only in
// the reply to a request with the request_knows_orphaned flag (absent:
// nullopt); true: the file is open somewhere and stays until its last
// close, so the client must leave the data objects alone.
struct RemoveResponse {
    Handle handle = no_handle;
    ObjectType type = ObjectType::regular;
    std::uint32_t nlink_after = 0;
    Layout layout;
    std::optional<bool> orphaned;
    friend bool operator==(const RemoveResponse &, const RemoveResponse &) = default;
};
struct RmdirResponse {
    friend bool operator==(const RmdirResponse &, const RmdirResponse &) = default;
};
struct RenameResponse {
    Handle replaced = no_handle; // no_handle: nothing was replaced
    ObjectType replaced_type = ObjectType::regular;
    std::uint32_t replaced_nlink_after = 0;
    Layout layout;
    std::optional<bool> orphaned; // of `replaced`, as RemoveResponse::orphaned
    friend bool operator==(const RenameResponse &, const RenameResponse &) = default;
};
struct ReaddirResponse {
    std::vector<DirEntry> entries; // at most max_readdir_entries
    bool eof = false;
    friend bool operator==(const ReaddirResponse &, const ReaddirResponse &) = default;
};
struct StatfsResponse {
    std::uint64_t total_bytes = 0;
    std::uint64_t free_bytes = 0;
    std::uint64_t avail_bytes = 0;
    std::uint64_t total_objects = 0;
    std::uint64_t free_objects = 0;
    friend bool operator==(const StatfsResponse &, const StatfsResponse &) = default;
};
struct ReadResponse {
    std::uint64_t bytes = 0;
    std::uint64_t object_size = 0;
    // Trailing, only in the answer to a request with chunk MACs: a tag per
    // chunk the server sent, in stream order.
    std::optional<std::vector<ChunkMac>> macs;
    friend bool operator==(const ReadResponse &, const ReadResponse &) = default;
};
struct WriteResponse {
    std::uint64_t bytes = 0;
    std::uint64_t object_size = 0;
    friend bool operator==(const WriteResponse &, const WriteResponse &) = default;
};
struct FsyncResponse {
    friend bool operator==(const FsyncResponse &, const FsyncResponse &) = default;
};
struct ObjectSizesResponse {
    std::vector<std::uint64_t> sizes; // as the request's handles; no_object_size if absent
    friend bool operator==(const ObjectSizesResponse &, const ObjectSizesResponse &) = default;
};
struct TruncateObjectResponse {
    friend bool operator==(const TruncateObjectResponse &,
                           const TruncateObjectResponse &) = default;
};
struct RemoveObjectResponse {
    friend bool operator==(const RemoveObjectResponse &, const RemoveObjectResponse &) = default;
};
struct ListObjectsResponse {
    std::vector<Handle> handles; // at most max_list_handles
    std::uint64_t next_cookie = 0;
    bool eof = false;
    friend bool operator==(const ListObjectsResponse &, const ListObjectsResponse &) = default;
};
struct XattrGetResponse {
    Bytes value;
    friend bool operator==(const XattrGetResponse &, const XattrGetResponse &) = default;
};
struct XattrSetResponse {
    friend bool operator==(const XattrSetResponse &, const XattrSetResponse &) = default;
};
struct XattrListResponse {
    std::vector<std::string> names; // at most max_xattr_names
    friend bool operator==(const XattrListResponse &, const XattrListResponse &) = default;
};
struct XattrRemoveResponse {
    friend bool operator==(const XattrRemoveResponse &, const XattrRemoveResponse &) = default;
};
struct LayoutGetResponse {
    Layout layout;
    friend bool operator==(const LayoutGetResponse &, const LayoutGetResponse &) = default;
};
struct LayoutSetResponse {
    friend bool operator==(const LayoutSetResponse &, const LayoutSetResponse &) = default;
};
struct ListHandlesResponse {
    std::vector<Handle> handles; // at most max_list_handles
    std::uint64_t next_cookie = 0;
    bool eof = false;
    friend bool operator==(const ListHandlesResponse &, const ListHandlesResponse &) = default;
};

struct MkdirObjectResponse {
    Attr attr;
    friend bool operator==(const MkdirObjectResponse &, const MkdirObjectResponse &) = default;
};
struct LinkDirResponse {
    friend bool operator==(const LinkDirResponse &, const LinkDirResponse &) = default;
};
struct RetireDirResponse {
    Attr attr; // the directory's
    friend bool operator==(const RetireDirResponse &, const RetireDirResponse &) = default;
};
struct UnlinkDirResponse {
    friend bool operator==(const UnlinkDirResponse &, const UnlinkDirResponse &) = default;
};
struct RemoveDirObjectResponse {
    friend bool operator==(const RemoveDirObjectResponse &,
                           const RemoveDirObjectResponse &) = default;
};
struct AccessResponse {
    friend bool operator==(const AccessResponse &, const AccessResponse &) = default;
};
struct SessionResponse {
    std::uint64_t server_boot = 0; // changes when the server restarts
    std::uint32_t max_slots = 0;   // slots the session may use: 0 .. max_slots - 1
    friend bool operator==(const SessionResponse &, const SessionResponse &) = default;
};
struct OpenResponse {
    Attr attr;
    std::uint64_t server_boot = 0; // as SessionResponse's: changed, re-send opens with reclaim
    // Trailing, only in the answer to a request with request_wants_capability
    // that opened a regular file with some right: the hold's rights over
    // its data (cap_read, cap_write), so that its first I/O needs no
    // capability request.
    std::optional<Capability> cap;
    friend bool operator==(const OpenResponse &, const OpenResponse &) = default;
};
struct CloseResponse {
    std::uint64_t server_boot = 0;
    std::vector<Doomed> doomed; // at most max_close_handles
    friend bool operator==(const CloseResponse &, const CloseResponse &) = default;
};
struct OrphanDoneResponse {
    friend bool operator==(const OrphanDoneResponse &, const OrphanDoneResponse &) = default;
};
struct ListOrphansResponse {
    std::vector<OrphanEntry> entries; // at most max_list_orphans
    std::uint64_t next_cookie = 0;
    bool eof = false;
    friend bool operator==(const ListOrphansResponse &, const ListOrphansResponse &) = default;
};

struct CapabilityResponse {
    Capability cap;
    friend bool operator==(const CapabilityResponse &, const CapabilityResponse &) = default;
};

// Alternative i is the body of Op i + 1: the variant's index is the op.
using RequestBody = std::variant<
    GetConfigRequest, StatusRequest, LookupRequest, GetattrRequest, SetattrRequest, CreateRequest,
    MkdirRequest, MknodRequest, SymlinkRequest, LinkRequest, ReadlinkRequest, RemoveRequest,
    RmdirRequest, RenameRequest, ReaddirRequest, StatfsRequest, ReadRequest, WriteRequest,
    FsyncRequest, ObjectSizesRequest, TruncateObjectRequest, RemoveObjectRequest,
    ListObjectsRequest, XattrGetRequest, XattrSetRequest, XattrListRequest, XattrRemoveRequest,
    LayoutGetRequest, LayoutSetRequest, ListHandlesRequest, MkdirObjectRequest, LinkDirRequest,
    RetireDirRequest, UnlinkDirRequest, RemoveDirObjectRequest, AccessRequest, SessionRequest,
    OpenRequest, CloseRequest, OrphanDoneRequest, ListOrphansRequest, CapabilityRequest>;
using ResponseBody = std::variant<
    GetConfigResponse, StatusResponse, LookupResponse, GetattrResponse, SetattrResponse,
    CreateResponse, MkdirResponse, MknodResponse, SymlinkResponse, LinkResponse, ReadlinkResponse,
    RemoveResponse, RmdirResponse, RenameResponse, ReaddirResponse, StatfsResponse, ReadResponse,
    WriteResponse, FsyncResponse, ObjectSizesResponse, TruncateObjectResponse, RemoveObjectResponse,
    ListObjectsResponse, XattrGetResponse, XattrSetResponse, XattrListResponse, XattrRemoveResponse,
    LayoutGetResponse, LayoutSetResponse, ListHandlesResponse, MkdirObjectResponse, LinkDirResponse,
    RetireDirResponse, UnlinkDirResponse, RemoveDirObjectResponse, AccessResponse, SessionResponse,
    OpenResponse, CloseResponse, OrphanDoneResponse, ListOrphansResponse, CapabilityResponse>;
static_assert(std::variant_size_v<RequestBody> == op_count);
static_assert(std::variant_size_v<ResponseBody> == op_count);

// The exactly-once identity of a request that changes metadata
// (docs/protocol.md "Exactly once"), the same in every retry of it: the
// client's session (client_id), the slot the operation holds in it, the
// operation's number (xid, growing per client) and which of its requests
// this is (step).  client_id 0: none, the request is not protected
// against retries.
struct OnceIds {
    std::uint64_t client_id = 0;
    std::uint32_t slot = 0; // < max_slots
    std::uint32_t step = 0;
    std::uint64_t xid = 0;
    [[nodiscard]] bool present() const noexcept { return client_id != 0; }
    friend bool operator==(const OnceIds &, const OnceIds &) = default;
};
// Slots of one session, and requests (steps) of one operation on one
// server, at most.
inline constexpr std::uint32_t max_slots = 1024;
inline constexpr std::uint32_t max_steps = 16;
// Request envelope flags: the OnceIds follow the timestamp.
inline constexpr std::uint32_t request_has_once = 1;
// The sender decodes RemoveResponse/RenameResponse::orphaned: the server
// may orphan a held file (and appends the field); without it the server
// destroys the file as before, since the sender would remove its data
// objects anyway (docs/protocol.md "Versioning").
inline constexpr std::uint32_t request_knows_orphaned = 2;
// The request names the server it is for (a Destination follows the once
// ids, under the MAC): a request captured on its way to one server is then
// refused by every other (docs/protocol.md "Destination binding").
inline constexpr std::uint32_t request_bound = 4;
// A create's body ends with a CreateOpen (only on op create): a server
// that does not know it refuses the request as bad_flags rather than
// creating a file nobody holds (docs/protocol.md "Versioning").
inline constexpr std::uint32_t request_create_opens = 8;
// The request is MACed with a client key (a Key with a name): its u32 id
// follows the destination, under the MAC, and the server verifies the MAC
// with the key of that id and MACs its response with it too
// (docs/protocol.md "Client keys").  Set by encode() exactly when the key
// has a name.
inline constexpr std::uint32_t request_keyed = 16;
// A read's or write's body ends with ChunkMacs (only on ops read and
// write; docs/protocol.md "Chunk MACs").  Set by encode() exactly when the
// body has them; a server that does not know it refuses the request as
// bad_flags instead of ignoring the tags.
inline constexpr std::uint32_t request_chunk_macs = 32;
// A Capability follows the key id (or the destination, or the once ids),
// under the MAC: only on the data ops that need one (capability_needed).
inline constexpr std::uint32_t request_capability = 64;
// A create or open whose answer may carry a capability: a create's
// (CreateResponse::cap) for the file it made, whose creator may write it
// whatever its mode, as the descriptor of open(O_CREAT) may; an open's
// (OpenResponse::cap) with the rights its hold got.  Only on ops create
// and open.
inline constexpr std::uint32_t request_wants_capability = 128;
// With request_chunk_macs: ChunkMacs::with_chunks, every bulk chunk message
// carries its tag after its bytes (docs/protocol.md "Chunk MACs").  A
// server that does not know it refuses the request as bad_flags.
inline constexpr std::uint32_t request_chunk_tags_inline = 256;
inline constexpr std::uint32_t request_flags =
    request_has_once | request_knows_orphaned | request_bound | request_create_opens |
    request_keyed | request_chunk_macs | request_capability | request_wants_capability |
    request_chunk_tags_inline;
// The rights a data request needs of its capability (cap_* bits): read
// needs read, write and truncate_object write, fsync either (cap_read |
// cap_write: one of them), remove_object destroy; 0 for the ops that take
// none.
[[nodiscard]] std::uint32_t capability_needed(Op op) noexcept;

// The server a request is for: the file system's id ([filesystem] id) and
// the server's index in the config's server list.
struct Destination {
    std::uint32_t fs_id = 0;
    std::uint32_t server_index = 0;
    friend bool operator==(const Destination &, const Destination &) = default;
};

struct Request {
    std::uint64_t request_id = 0;  // the client's, echoed in the response
    std::uint64_t session = 0;     // random per client instance
    std::uint64_t seq = 0;         // strictly increasing within a session
    std::int64_t time_ns = 0;      // the client's CLOCK_REALTIME when sent
    OnceIds once;                  // on the wire only when present()
    bool knows_orphaned = false;   // envelope flag request_knows_orphaned
    std::optional<Destination> to; // on the wire (request_bound) when set
    std::optional<Capability> cap; // on the wire (request_capability) when set
    bool wants_capability = false; // envelope flag request_wants_capability
    Credentials cred;
    RequestBody body; // its alternative is the op
    [[nodiscard]] Op op() const noexcept { return static_cast<Op>(body.index() + 1); }
    friend bool operator==(const Request &, const Request &) = default;
};

struct Response {
    std::int32_t status = 0; // 0 or a positive errno; the body is sent only when 0
    std::uint64_t request_id = 0;
    std::uint64_t session = 0;
    std::uint64_t seq = 0; // the request's: binds the response to it
    ResponseBody body;     // its alternative is the op, even when status != 0
    [[nodiscard]] Op op() const noexcept { return static_cast<Op>(body.index() + 1); }
    friend bool operator==(const Response &, const Response &) = default;
};

// The empty response to `req` (same op, ids echoed), to fill in.
[[nodiscard]] Response response_to(const Request &req, std::int32_t status = 0);
// Whether `resp` answers `req`: same op, request_id, session and seq.  A
// client needs nothing more against replayed responses.
[[nodiscard]] bool answers(const Response &resp, const Request &req) noexcept;

// ---- keys ----------------------------------------------------------------

// Client key names: 1 to 64 bytes of [A-Za-z0-9._-].
inline constexpr std::size_t max_key_name = 64;
[[nodiscard]] bool valid_key_name(std::string_view name) noexcept;
// A client key's id on the wire: the first 4 bytes of BLAKE2b-256(name)
// (crypto_generichash, no key), little-endian.
[[nodiscard]] std::uint32_t key_id(std::string_view name) noexcept;

// What a chunk's MAC binds besides its bytes: which way it goes, the
// request it belongs to (its ids, unique per key under the replay guard),
// the server and object it is for, and its place in the stream.
struct ChunkBinding {
    bool is_write = false;
    std::uint32_t fs_id = 0;
    std::uint32_t server_index = 0;
    Handle handle = no_handle;
    std::uint64_t session = 0;
    std::uint64_t seq = 0;
    std::uint64_t request_id = 0;
    std::uint32_t chunk_size = 0;
};
// A session key (bmi::Identity::session_key).
using SessionKey = std::array<std::byte, 32>;
// The tag of chunk `index` of a request, over `pieces` (the chunk's bytes
// in order, possibly scattered): Poly1305 under the one-time key
// BLAKE2b-256(session_key, "pvfs-chunk-1" | binding | index | length),
// length being the pieces' total.
[[nodiscard]] ChunkMac chunk_mac(const SessionKey &session_key, const ChunkBinding &binding,
                                 std::uint64_t index,
                                 std::span<const std::span<const std::byte>> pieces) noexcept;
// Constant-time comparison of two tags.
[[nodiscard]] bool same_mac(const ChunkMac &a, const ChunkMac &b) noexcept;
// ChunkMacs::key_check of a session key: 8 bytes of
// BLAKE2b(session_key, "pvfs-chunk-key-check"), not 0.  One-way: it tells
// which key without saying anything of it.
[[nodiscard]] std::uint64_t session_key_check(const SessionKey &session_key) noexcept;
// The key id of a request with the request_keyed flag, read from its
// envelope before anything is verified (to choose the key to verify it
// with); nullopt when the flag is absent or the envelope too short to say.
[[nodiscard]] std::optional<std::uint32_t>
request_key_id(std::span<const std::byte> message) noexcept;

// The key capabilities are signed with: BLAKE2b-256 under the cluster key
// of a fixed label, so every server derives it and a client holding only
// its own client key cannot.  (Without client_keys every node holds the
// cluster key, and so can sign capabilities: docs/security.md.)
using CapabilityKey = std::array<std::byte, 32>;
class Key;
[[nodiscard]] CapabilityKey capability_key(const Key &cluster_key) noexcept;
// Sets cap.tag over every other field.
void sign_capability(const CapabilityKey &key, Capability &cap) noexcept;
// Whether cap.tag is right (constant time); says nothing of the rights,
// the handle or the expiry, which the caller checks.
[[nodiscard]] bool capability_signed(const CapabilityKey &key, const Capability &cap) noexcept;

// Reads a file that holds secrets (`what` names it in errors: "key file",
// "client keys file"): refused unless it is a regular file (not through a
// symlink) owned by this process's euid or root with no group or other mode
// bit, and at most `max_bytes` long.  `out` is replaced by its contents;
// the caller wipes them (sodium_memzero) when done.  On failure, false and
// `error` says why, naming the file.
// Who may own it: this process's euid or root; or, read by root (an admin
// tool editing the servers' file), any user (the servers' own, as their
// unit runs them).  The mode check stays.
enum class FileOwner : std::uint8_t { euid_or_root, any_for_root };
[[nodiscard]] bool read_private_file(const std::string &path, std::string_view what,
                                     std::size_t max_bytes, std::string &out, std::string &error,
                                     FileOwner owner = FileOwner::euid_or_root);

// A 32-byte key: the cluster key, or a client key, which has a name (and
// so an id).  Wiped when destroyed (and when moved from).
class Key {
public:
    // Reads a key file: 64 hex digits (the cluster key, as
    // pvfs::config::generate_key_file writes it), or a client's name, one
    // space and 64 hex digits (a client key, as pvfs-key writes it); either
    // optionally followed by one newline.  On failure returns nullopt and
    // sets `error` to a message naming the file.
    [[nodiscard]] static std::optional<Key> load(const std::string &path, std::string &error);
    // 64 hex digits exactly; nullopt otherwise.
    [[nodiscard]] static std::optional<Key> from_hex(std::string_view hex);
    [[nodiscard]] static Key from_bytes(std::span<const std::byte, key_size> bytes);

    Key(const Key &) = delete;
    Key &operator=(const Key &) = delete;
    Key(Key &&other) noexcept;
    Key &operator=(Key &&other) noexcept;
    ~Key();

    // HMAC-SHA-256 of `message` into `tag`.
    void sign(std::span<const std::byte> message,
              std::span<std::byte, mac_size> tag) const noexcept;
    // Constant-time check of `tag` against `message`.
    [[nodiscard]] bool verify(std::span<const std::byte> message,
                              std::span<const std::byte, mac_size> tag) const noexcept;

    // Keyed BLAKE2b-256 under this key of the concatenated `parts` (the
    // connection handshake's MACs, docs/security.md "Connections").
    void keyed_hash(std::span<const std::span<const std::byte>> parts,
                    std::span<std::byte, 32> out) const noexcept;
    // Another Key with the same bytes, name and id (an authenticator's own
    // copy, so that it outlives the client that handed it the key).
    [[nodiscard]] Key clone() const;
    // Whether other holds the same bytes (constant time).
    [[nodiscard]] bool same_bytes(const Key &other) const noexcept;

    // A client key's name (empty for the cluster key) and id.
    [[nodiscard]] const std::string &name() const noexcept { return name_; }
    [[nodiscard]] std::optional<std::uint32_t> id() const noexcept { return id_; }
    // Makes this a client key named `name` (a valid_key_name): requests
    // encoded with it carry its id.
    void set_name(std::string name);
    // Connections under this key are encrypted (docs/security.md
    // "Encryption"): on a client, it asks for encryption and refuses a
    // server that does not agree; on a server, a client that does not ask
    // is refused.  A policy bit, not part of the key's bytes.
    [[nodiscard]] bool encrypt() const noexcept { return encrypt_; }
    void set_encrypt(bool on) noexcept { encrypt_ = on; }

private:
    Key() noexcept;
    std::array<unsigned char, key_size> bytes_{};
    std::string name_;
    std::optional<std::uint32_t> id_;
    bool encrypt_ = false;
};

// ---- encoding and decoding -----------------------------------------------

// Appends to nothing: `out` is cleared, then holds exactly the message (its
// capacity is reused, so a warm buffer means no allocation).  Returns the
// message size.
std::size_t encode(const Request &req, const Key &key, std::vector<std::byte> &out);
std::size_t encode(const Response &resp, const Key &key, std::vector<std::byte> &out);

enum class DecodeError : std::uint8_t {
    ok = 0,
    truncated,      // a field or length runs past the end of the message
    bad_magic,      // not a request (or not a response)
    bad_version,    // a protocol version this build does not speak
    bad_op,         // an op number this build does not know
    bad_flags,      // envelope flags not 0
    bad_mac,        // forged, corrupted or signed with another key: drop it
    too_long,       // a length or count above the field's protocol limit
    bad_value,      // a value outside its field's domain (name, enum, bool, ...)
    trailing_bytes, // bytes after the body or the MAC
};

struct DecodeResult {
    DecodeError error = DecodeError::ok;
    const char *what = "ok"; // static: which field and what is wrong with it
    std::uint64_t value = 0; // the offending number, for bad_version and bad_op
    [[nodiscard]] explicit operator bool() const noexcept { return error == DecodeError::ok; }
    // `what`, with the number where one helps, e.g. "unsupported protocol
    // version 7 (this build speaks 1)".
    [[nodiscard]] std::string message() const;
};

// For a server's reply cache: the fields of a response body alone (no
// envelope, no MAC; `out` is replaced), and back.  Only bodies this build
// encoded are decoded, but they are checked as any message.
void encode_body(const ResponseBody &body, std::vector<std::byte> &out);
[[nodiscard]] DecodeResult decode_body(Op op, std::span<const std::byte> bytes, ResponseBody &out);
// A 16-byte digest (BLAKE2b) of a request body's encoding: a retry carries
// the same body as its first try, so a cache entry whose digest differs
// answers another request with the same ids.  `scratch` is reused.
using BodyDigest = std::array<std::byte, 16>;
[[nodiscard]] BodyDigest body_digest(const RequestBody &body, std::vector<std::byte> &scratch);

// Checks the envelope, verifies the MAC (before looking at the body), then
// parses the body.  On failure `out` holds unspecified (valid) values.  A
// request's key id (request_keyed) must be `key`'s id, and a request without
// one needs a key without a name: bad_mac otherwise.
[[nodiscard]] DecodeResult decode(std::span<const std::byte> message, const Key &key, Request &out);
[[nodiscard]] DecodeResult decode(std::span<const std::byte> message, const Key &key,
                                  Response &out);

} // namespace pvfs::proto

#endif // PVFS_PROTO_HPP
