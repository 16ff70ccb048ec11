// One field list per wire struct, shared by the Encoder (B is const) and the
// Decoder (B is mutable): the order of the calls is the order on the wire.
#ifndef PVFS_LIB_PROTO_BODIES_HPP
#define PVFS_LIB_PROTO_BODIES_HPP

#include <concepts>
#include <type_traits>

#include "codec.hpp"
#include "pvfs/proto.hpp"
#include "pvfs/types.hpp"

namespace pvfs::proto::detail {

template <class B, class T>
concept Is = std::same_as<std::remove_const_t<B>, T>;

// Bodies without fields (statfs, rmdir's reply, ...): nothing on the wire.
template <class Io, class B>
requires std::is_empty_v<B>
void fields(Io & /*io*/, B & /*body*/) {}

// ---- shared pieces ---------------------------------------------------

template <class Io, Is<Layout> B> void fields(Io &io, B &l)
{
    io.num(l.stripe_size);
    io.num(l.stripe_count);
    io.num(l.first_server);
}

template <class Io, Is<Attr> B> void fields(Io &io, B &a)
{
    io.num(a.handle);
    io.type(a.type);
    io.mode(a.mode);
    io.num(a.uid);
    io.num(a.gid);
    io.num(a.nlink);
    io.num(a.size);
    io.num(a.rdev);
    io.timespec(a.atime);
    io.timespec(a.mtime);
    io.timespec(a.ctime);
    fields(io, a.layout);
}

template <class Io, Is<Capability> B> void fields(Io &io, B &c)
{
    io.num(c.handle);
    io.num(c.rights);
    io.num(c.fs_id);
    io.flag(c.keyed);
    io.num(c.key_id);
    io.num(c.expires_ns);
    io.tag(c.tag); // the same 16-byte array as a chunk MAC
    if (c.handle == no_handle)
        io.fail_if_decoding(DecodeError::bad_value, "capability for no handle");
    if (c.rights == 0 || (c.rights & ~cap_rights) != 0)
        io.fail_if_decoding(DecodeError::bad_value, "capability rights 0 or unknown");
    if (!c.keyed && c.key_id != 0)
        io.fail_if_decoding(DecodeError::bad_value, "capability key id without its flag");
}

template <class Io, Is<Region> B> void fields(Io &io, B &r)
{
    io.num(r.offset);
    io.num(r.length);
}

template <class Io, Is<DirEntry> B> void fields(Io &io, B &e)
{
    io.name(e.name);
    io.num(e.handle);
    io.type(e.type);
    io.num(e.cookie);
}

// Smallest encodings, so a count is checked against the bytes left.
inline constexpr std::size_t min_region = 16;
inline constexpr std::size_t min_dir_entry = 4 + 1 + 8 + 1 + 8;
inline constexpr std::size_t min_string = 4;

template <class Io, class V> void regions(Io &io, V &v)
{
    io.list(v, max_io_regions, min_region, "more than 1024 I/O regions",
            [&io](auto &r) { fields(io, r); });
}

template <class Io, class V> void handles(Io &io, V &v, std::size_t limit, const char *too_long)
{
    io.list(v, limit, sizeof(Handle), too_long, [&io](auto &h) { io.num(h); });
}

// ---- requests --------------------------------------------------------

template <class Io, class B>
requires(Is<B, LookupRequest> || Is<B, RemoveRequest> || Is<B, RmdirRequest>) void fields(Io &io,
                                                                                          B &b)
{
    io.num(b.parent);
    io.name(b.name);
}

template <class Io, class B>
requires(Is<B, GetattrRequest> || Is<B, ReadlinkRequest> || Is<B, FsyncRequest> ||
         Is<B, RemoveObjectRequest> || Is<B, XattrListRequest> || Is<B, LayoutGetRequest> ||
         Is<B, RemoveDirObjectRequest>) void fields(Io &io, B &b)
{
    io.num(b.handle);
}

template <class Io, Is<MkdirObjectRequest> B> void fields(Io &io, B &b)
{
    fields(io, b.parent);
    if (b.parent.type != ObjectType::directory) {
        io.fail_if_decoding(DecodeError::bad_value, "mkdir_object parent not a directory");
    }
    io.mode(b.mode);
}

template <class Io, Is<LinkDirRequest> B> void fields(Io &io, B &b)
{
    io.num(b.parent);
    io.name(b.name);
    io.num(b.handle);
}

template <class Io, Is<RetireDirRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.flag(b.retire);
}

template <class Io, Is<UnlinkDirRequest> B> void fields(Io &io, B &b)
{
    io.num(b.parent);
    io.name(b.name);
    io.num(b.handle);
    io.num(b.owner_uid);
}

template <class Io, Is<SetattrRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.num(b.mask);
    if ((b.mask & ~(set_all | setattr_by_open)) != 0) {
        io.fail_if_decoding(DecodeError::bad_value, "setattr mask has unknown bits");
    }
    io.mode(b.mode);
    io.num(b.uid);
    io.num(b.gid);
    io.timespec(b.atime);
    io.timespec(b.mtime);
}

template <class Io, Is<CreateOpen> B> void fields(Io &io, B &b)
{
    io.num(b.client_id);
    io.num(b.mode);
    io.num(b.gen);
    if (b.client_id == 0)
        io.fail_if_decoding(DecodeError::bad_value, "create's open of client 0");
    if (b.mode == 0 || (b.mode & ~(open_read | open_write)) != 0)
        io.fail_if_decoding(DecodeError::bad_value, "create's open mode is 0 or has unknown bits");
    if (b.gen == 0)
        io.fail_if_decoding(DecodeError::bad_value, "create's open of gen 0");
}

template <class Io, Is<CreateRequest> B> void fields(Io &io, B &b)
{
    io.num(b.parent);
    io.name(b.name);
    io.mode(b.mode);
    io.flag(b.exclusive);
    fields(io, b.layout);
    io.trailing(b.open, [&io](auto &o) { fields(io, o); });
}

template <class Io, Is<MkdirRequest> B> void fields(Io &io, B &b)
{
    io.num(b.parent);
    io.name(b.name);
    io.mode(b.mode);
}

template <class Io, Is<MknodRequest> B> void fields(Io &io, B &b)
{
    io.num(b.parent);
    io.name(b.name);
    io.type(b.type);
    if (b.type == ObjectType::regular || b.type == ObjectType::directory ||
        b.type == ObjectType::symlink) {
        io.fail_if_decoding(DecodeError::bad_value, "mknod type not fifo, socket or device");
    }
    io.mode(b.mode);
    io.num(b.rdev);
}

template <class Io, Is<SymlinkRequest> B> void fields(Io &io, B &b)
{
    io.num(b.parent);
    io.name(b.name);
    io.path(b.target);
}

template <class Io, Is<LinkRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.num(b.new_parent);
    io.name(b.new_name);
}

template <class Io, Is<RenameRequest> B> void fields(Io &io, B &b)
{
    io.num(b.old_parent);
    io.name(b.old_name);
    io.num(b.new_parent);
    io.name(b.new_name);
    io.num(b.flags);
    if ((b.flags & ~(rename_noreplace | rename_exchange)) != 0) {
        io.fail_if_decoding(DecodeError::bad_value, "rename flags have unknown bits");
    }
}

template <class Io, Is<ReaddirRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.num(b.cookie);
    io.num(b.max_entries);
}

template <class Io, class V> void chunk_tags(Io &io, V &v)
{
    io.list(v, max_chunk_macs, chunk_mac_size, "more than 4096 chunk MACs",
            [&io](auto &t) { io.tag(t); });
}

template <class Io, Is<ChunkMacs> B> void fields(Io &io, B &m)
{
    io.num(m.key_check);
    if (m.key_check == 0)
        io.fail_if_decoding(DecodeError::bad_value, "chunk MACs with a key check of 0");
    chunk_tags(io, m.tags);
}

template <class Io, Is<ReadRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    regions(io, b.regions);
    io.num(b.chunk_size);
    io.num(b.flags);
    io.blob(b.rdma, max_rdma_descriptor, "RDMA descriptor longer than 32 KiB");
    io.trailing(b.macs, [&io](auto &m) { fields(io, m); });
    // A read's tags come in its response.
    if (b.macs && !b.macs->tags.empty())
        io.fail_if_decoding(DecodeError::bad_value, "a read request with chunk tags");
}

template <class Io, Is<WriteRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    regions(io, b.regions);
    io.num(b.chunk_size);
    io.num(b.flags);
    io.blob(b.inline_data, max_inline_data, "inline write data longer than 64 KiB");
    io.blob(b.rdma, max_rdma_descriptor, "RDMA descriptor longer than 32 KiB");
    if (!b.inline_data.empty() && !b.rdma.empty())
        io.fail_if_decoding(DecodeError::bad_value, "a write with inline data and RDMA");
    io.trailing(b.macs, [&io](auto &m) { fields(io, m); });
    if (b.macs && !b.inline_data.empty())
        io.fail_if_decoding(DecodeError::bad_value, "a write with inline data and chunk MACs");
}

template <class Io, Is<ObjectSizesRequest> B> void fields(Io &io, B &b)
{
    handles(io, b.handles, max_object_sizes, "more than 1024 handles in object_sizes");
}

template <class Io, Is<TruncateObjectRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.num(b.size);
}

template <class Io, class B>
requires(Is<B, ListObjectsRequest> || Is<B, ListHandlesRequest>) void fields(Io &io, B &b)
{
    io.num(b.cookie);
    io.num(b.max);
}

template <class Io, class B>
requires(Is<B, XattrGetRequest> || Is<B, XattrRemoveRequest>) void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.xattr_name(b.name);
}

template <class Io, Is<XattrSetRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.xattr_name(b.name);
    io.blob(b.value, max_xattr_value, "xattr value longer than 65536 bytes");
    io.num(b.flags);
    if ((b.flags & ~(xattr_create | xattr_replace)) != 0) {
        io.fail_if_decoding(DecodeError::bad_value, "xattr_set flags have unknown bits");
    }
}

template <class Io, Is<AccessRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.num(b.mask);
    if ((b.mask & ~(access_read | access_write | access_exec)) != 0) {
        io.fail_if_decoding(DecodeError::bad_value, "access mask has unknown bits");
    }
}

template <class Io, Is<LayoutSetRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    fields(io, b.layout);
}

template <class Io, Is<SessionRequest> B> void fields(Io &io, B &b)
{
    io.num(b.client_id);
    io.num(b.action);
    io.text(b.owner, max_owner_text, "session owner longer than 255 bytes");
    if (b.client_id == 0) {
        io.fail_if_decoding(DecodeError::bad_value, "session of client 0");
    }
    if (b.action != session_open && b.action != session_end) {
        io.fail_if_decoding(DecodeError::bad_value, "unknown session action");
    }
}

template <class Io, Is<OpenRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.num(b.client_id);
    io.num(b.mode);
    io.num(b.gen);
    io.flag(b.reclaim);
    if (b.client_id == 0)
        io.fail_if_decoding(DecodeError::bad_value, "open of client 0");
    if ((b.mode & ~(open_read | open_write)) != 0)
        io.fail_if_decoding(DecodeError::bad_value, "open mode has unknown bits");
}

template <class Io, Is<CloseRequest> B> void fields(Io &io, B &b)
{
    io.num(b.client_id);
    io.list(b.refs, max_close_handles, 16, "more than 1024 handles in a close", [&io](auto &r) {
        io.num(r.handle);
        io.num(r.gen);
    });
    if (b.client_id == 0)
        io.fail_if_decoding(DecodeError::bad_value, "close of client 0");
}

template <class Io, Is<OrphanDoneRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
}

template <class Io, Is<CapabilityRequest> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.num(b.rights);
    io.num(b.client_id);
    if (b.rights == 0 || (b.rights & ~cap_rights) != 0)
        io.fail_if_decoding(DecodeError::bad_value, "capability rights 0 or unknown");
    if ((b.rights & cap_destroy) != 0 && b.rights != cap_destroy)
        io.fail_if_decoding(DecodeError::bad_value, "destroy asked together with other rights");
}

template <class Io, Is<CapabilityResponse> B> void fields(Io &io, B &b)
{
    fields(io, b.cap);
}

template <class Io, Is<ListOrphansRequest> B> void fields(Io &io, B &b)
{
    io.num(b.cookie);
    io.num(b.max);
}

// ---- responses -------------------------------------------------------

template <class Io, Is<OpenResponse> B> void fields(Io &io, B &b)
{
    fields(io, b.attr);
    io.num(b.server_boot);
    io.trailing(b.cap, [&io](auto &c) { fields(io, c); });
}

template <class Io, Is<CloseResponse> B> void fields(Io &io, B &b)
{
    io.num(b.server_boot);
    io.list(b.doomed, max_close_handles, 8 + 12, "more than 1024 handles in a close reply",
            [&io](auto &d) {
                io.num(d.handle);
                fields(io, d.layout);
            });
}

template <class Io, Is<ListOrphansResponse> B> void fields(Io &io, B &b)
{
    io.list(b.entries, max_list_orphans, 8 + 1 + 8 + 12, "more than 4096 orphans in a listing",
            [&io](auto &e) {
                io.num(e.handle);
                io.num(e.state);
                if (e.state != orphan_held && e.state != orphan_reclaim)
                    io.fail_if_decoding(DecodeError::bad_value, "unknown orphan state");
                io.num(e.since_ns);
                fields(io, e.layout);
            });
    io.num(b.next_cookie);
    io.flag(b.eof);
}

template <class Io, Is<SessionResponse> B> void fields(Io &io, B &b)
{
    io.num(b.server_boot);
    io.num(b.max_slots);
}

template <class Io, Is<GetConfigResponse> B> void fields(Io &io, B &b)
{
    io.text(b.config_text, max_config_text, "config text longer than 1 MiB");
    io.num(b.server_index);
}

template <class Io, Is<StatusRequest> B> void fields(Io &io, B &b)
{
    io.trailing(b.counters, [&io](auto &v) {
        io.num(v);
        if (v == 0)
            io.fail_if_decoding(DecodeError::bad_value, "counters version 0");
    });
}

template <class Io, Is<OpCounters> B> void fields(Io &io, B &b)
{
    io.num(b.op);
    if (b.op == 0)
        io.fail_if_decoding(DecodeError::bad_value, "counters of op 0");
    io.num(b.requests);
    io.num(b.errors);
    if (b.errors > b.requests)
        io.fail_if_decoding(DecodeError::bad_value, "more errors than requests");
    io.num(b.latency_ns);
    io.list(b.buckets, max_latency_buckets, 8, "more than 28 latency buckets",
            [&io](auto &n) { io.num(n); });
}

template <class Io, Is<ServerCounters> B> void fields(Io &io, B &b)
{
    io.num(b.version);
    // Version 1 is the only one; a later one adds fields after these.
    // A server answers with the version the request asked for, or its own
    // if older; a later version adds fields after these.
    if (b.version == 0 || b.version > counters_version)
        io.fail_if_decoding(DecodeError::bad_value, "unknown counters version");
    io.list(b.ops, max_counter_ops, 30, "counters of more than 64 ops",
            [&io](auto &o) { fields(io, o); });
    io.num(b.read_bytes);
    io.num(b.write_bytes);
    io.num(b.dropped);
    io.num(b.data_active);
    io.num(b.meta_pending);
    io.num(b.meta_commits);
    io.num(b.replies_in_flight);
    io.num(b.connections);
    if (b.version >= 2) {
        for (auto *bulk : {&b.bulk_write, &b.bulk_read}) {
            io.num(bulk->chunks);
            io.num(bulk->network_ns);
            io.num(bulk->storage_ns);
            io.num(bulk->queued_ns);
        }
        io.num(b.buffer_waits);
        io.num(b.buffer_wait_ns);
    }
}

template <class Io, Is<StatusResponse> B> void fields(Io &io, B &b)
{
    io.text(b.server_name, max_server_text, "server name longer than 255 bytes");
    io.text(b.version, max_server_text, "version string longer than 255 bytes");
    io.hash(b.config_hash);
    io.num(b.roles);
    io.num(b.uptime_ns);
    io.num(b.bulk_message_bytes);
    io.num(b.bulk_rdma_bytes);
    io.trailing(b.counters, [&io](auto &c) { fields(io, c); });
}

template <class Io, class B>
requires(Is<B, LookupResponse> || Is<B, GetattrResponse> || Is<B, SetattrResponse> ||
         Is<B, MkdirResponse> || Is<B, MknodResponse> || Is<B, SymlinkResponse> ||
         Is<B, LinkResponse> || Is<B, MkdirObjectResponse> ||
         Is<B, RetireDirResponse>) void fields(Io &io, B &b)
{
    fields(io, b.attr);
}

template <class Io, Is<CreateResponse> B> void fields(Io &io, B &b)
{
    fields(io, b.attr);
    io.flag(b.created);
    io.trailing(b.cap, [&io](auto &c) { fields(io, c); });
}

template <class Io, Is<ReadlinkResponse> B> void fields(Io &io, B &b)
{
    io.path(b.target);
}

template <class Io, Is<RemoveResponse> B> void fields(Io &io, B &b)
{
    io.num(b.handle);
    io.type(b.type);
    io.num(b.nlink_after);
    fields(io, b.layout);
    io.trailing_flag(b.orphaned);
}

template <class Io, Is<RenameResponse> B> void fields(Io &io, B &b)
{
    io.num(b.replaced);
    io.type(b.replaced_type);
    io.num(b.replaced_nlink_after);
    fields(io, b.layout);
    io.trailing_flag(b.orphaned);
}

template <class Io, Is<ReaddirResponse> B> void fields(Io &io, B &b)
{
    io.list(b.entries, max_readdir_entries, min_dir_entry, "more than 4096 directory entries",
            [&io](auto &e) { fields(io, e); });
    io.flag(b.eof);
}

template <class Io, Is<StatfsResponse> B> void fields(Io &io, B &b)
{
    io.num(b.total_bytes);
    io.num(b.free_bytes);
    io.num(b.avail_bytes);
    io.num(b.total_objects);
    io.num(b.free_objects);
}

template <class Io, Is<ReadResponse> B> void fields(Io &io, B &b)
{
    io.num(b.bytes);
    io.num(b.object_size);
    io.trailing(b.macs, [&io](auto &v) { chunk_tags(io, v); });
}

template <class Io, Is<WriteResponse> B> void fields(Io &io, B &b)
{
    io.num(b.bytes);
    io.num(b.object_size);
}

template <class Io, Is<ObjectSizesResponse> B> void fields(Io &io, B &b)
{
    handles(io, b.sizes, max_object_sizes, "more than 1024 sizes in object_sizes");
}

template <class Io, class B>
requires(Is<B, ListObjectsResponse> || Is<B, ListHandlesResponse>) void fields(Io &io, B &b)
{
    handles(io, b.handles, max_list_handles, "more than 16384 handles in a listing");
    io.num(b.next_cookie);
    io.flag(b.eof);
}

template <class Io, Is<XattrGetResponse> B> void fields(Io &io, B &b)
{
    io.blob(b.value, max_xattr_value, "xattr value longer than 65536 bytes");
}

template <class Io, Is<XattrListResponse> B> void fields(Io &io, B &b)
{
    io.list(b.names, max_xattr_names, min_string, "more than 4096 xattr names",
            [&io](auto &n) { io.xattr_name(n); });
}

template <class Io, Is<LayoutGetResponse> B> void fields(Io &io, B &b)
{
    fields(io, b.layout);
}

} // namespace pvfs::proto::detail

#endif // PVFS_LIB_PROTO_BODIES_HPP
