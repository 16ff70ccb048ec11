// One request and one response of every op, with non-trivial values: names
// at max_name, groups at max_groups, every Attr field set.  Shared by the
// proto test programs.
#ifndef PVFS_TESTS_UNIT_PROTO_SAMPLES_HPP
#define PVFS_TESTS_UNIT_PROTO_SAMPLES_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pvfs/proto.hpp"
#include "pvfs/types.hpp"

namespace samples {

namespace proto = pvfs::proto;

inline proto::Key test_key()
{
    std::array<std::byte, proto::key_size> bytes{};
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        bytes.at(i) = static_cast<std::byte>(0xA0 + i);
    }
    return proto::Key::from_bytes(bytes);
}

inline proto::Key other_key()
{
    std::array<std::byte, proto::key_size> bytes{};
    bytes.fill(std::byte{0x42});
    return proto::Key::from_bytes(bytes);
}

inline std::string long_name(char c)
{
    // Braces would pick the initializer-list constructor (two chars).
    // NOLINTNEXTLINE(modernize-return-braced-init-list): see above
    return std::string(pvfs::max_name, c);
}

inline proto::Bytes pattern(std::size_t n, unsigned seed)
{
    proto::Bytes b(n);
    for (std::size_t i = 0; i < n; ++i) {
        b[i] = static_cast<std::byte>((i * 31 + seed) & 0xFFU);
    }
    return b;
}

inline pvfs::Attr attr(std::uint64_t seed)
{
    pvfs::Attr a;
    a.handle = pvfs::make_handle(3, 0x123456789A + seed);
    a.type = pvfs::ObjectType::block_device;
    a.mode = 07755;
    a.uid = 1000 + static_cast<std::uint32_t>(seed);
    a.gid = 2000;
    a.nlink = 0xFFFFFFFF;
    a.size = 0x0102030405060708;
    a.rdev = (8U << 20U) | 17U;
    a.atime = {-5, 999'999'999};
    a.mtime = {0x7FFFFFFFFFFF, 1};
    a.ctime = {1'700'000'000, 123'456'789};
    a.layout = {pvfs::default_stripe_size, 7, 5};
    return a;
}

// A remote directory's parent as mkdir_object carries it.
inline pvfs::Attr dir_attr()
{
    pvfs::Attr a = attr(11);
    a.handle = pvfs::root_handle;
    a.type = pvfs::ObjectType::directory;
    a.mode = 02775;
    a.rdev = 0;
    return a;
}

inline pvfs::Credentials credentials()
{
    pvfs::Credentials c{.uid = 4242, .gid = 4343, .groups = {}};
    for (std::uint32_t i = 0; i < pvfs::max_groups; ++i) {
        c.groups.push_back(0xFFFF0000U + i);
    }
    return c;
}

inline std::vector<proto::Region> regions(std::size_t n)
{
    std::vector<proto::Region> r;
    for (std::size_t i = 0; i < n; ++i) {
        r.push_back({.offset = i << 20U, .length = 4096 + i});
    }
    return r;
}

// A capability as a metadata server would sign it (under test_key()).
inline proto::Capability capability(pvfs::Handle h, std::uint32_t rights)
{
    proto::Capability c{.handle = h,
                        .rights = rights,
                        .fs_id = 0xF5F5F5F5,
                        .keyed = false,
                        .key_id = 0,
                        .expires_ns = 1'763'800'300'123'456'789,
                        .tag = {}};
    proto::sign_capability(proto::capability_key(test_key()), c);
    return c;
}

inline std::vector<proto::RequestBody> request_bodies()
{
    using namespace pvfs::proto;
    const pvfs::Handle h = pvfs::make_handle(1, 77);
    const pvfs::Handle d = pvfs::make_handle(2, 5);
    return {
        GetConfigRequest{},
        StatusRequest{},
        LookupRequest{.parent = d, .name = long_name('l')},
        GetattrRequest{.handle = h},
        SetattrRequest{.handle = h,
                       .mask = set_all | setattr_by_open,
                       .mode = 04711,
                       .uid = 7,
                       .gid = 8,
                       .atime = {1, 2},
                       .mtime = {-3, 999'999'999}},
        CreateRequest{.parent = d,
                      .name = long_name('c'),
                      .mode = 0644,
                      .exclusive = true,
                      .layout = {65536, 3, 2},
                      .open = CreateOpen{.client_id = 0xC0FFEE,
                                         .mode = open_read | open_write,
                                         .gen = 0x0102030405060708}},
        MkdirRequest{.parent = d, .name = "dir", .mode = 01777},
        MknodRequest{.parent = d,
                     .name = "dev",
                     .type = pvfs::ObjectType::char_device,
                     .mode = 0600,
                     .rdev = (1U << 20U) | 3U},
        SymlinkRequest{.parent = d, .name = "ln", .target = std::string(pvfs::max_path, 't')},
        LinkRequest{.handle = h, .new_parent = d, .new_name = long_name('k')},
        ReadlinkRequest{.handle = h},
        RemoveRequest{.parent = d, .name = "gone"},
        RmdirRequest{.parent = d, .name = "old-dir"},
        RenameRequest{.old_parent = d,
                      .old_name = long_name('o'),
                      .new_parent = h,
                      .new_name = long_name('n'),
                      .flags = rename_noreplace},
        ReaddirRequest{.handle = d, .cookie = 0xFEEDFACE, .max_entries = 4096},
        StatfsRequest{},
        ReadRequest{.handle = h,
                    .regions = regions(5),
                    .chunk_size = 1U << 18U,
                    .flags = 9,
                    .rdma = pattern(88, 7),
                    .macs = std::nullopt},
        WriteRequest{.handle = h,
                     .regions = regions(2),
                     .chunk_size = 65536,
                     .flags = 0,
                     .inline_data = pattern(300, 1),
                     .rdma = {},
                     .macs = std::nullopt},
        FsyncRequest{.handle = h},
        ObjectSizesRequest{.handles = {h, d, 0, ~std::uint64_t{0}}},
        TruncateObjectRequest{.handle = h, .size = 0x10000000001},
        RemoveObjectRequest{.handle = h},
        ListObjectsRequest{.cookie = 12, .max = 1000},
        XattrGetRequest{.handle = h, .name = "user." + std::string(250, 'x')},
        XattrSetRequest{
            .handle = h, .name = "user.mime", .value = pattern(100, 2), .flags = xattr_create},
        XattrListRequest{.handle = h},
        XattrRemoveRequest{.handle = h, .name = "trusted.x"},
        LayoutGetRequest{.handle = h},
        LayoutSetRequest{.handle = d, .layout = {1U << 22U, 4, 1}},
        ListHandlesRequest{.cookie = 99, .max = 5000},
        MkdirObjectRequest{.parent = dir_attr(), .mode = 02755},
        LinkDirRequest{.parent = d, .name = long_name('r'), .handle = pvfs::make_handle(1, 77)},
        RetireDirRequest{.handle = pvfs::make_handle(1, 77), .retire = true},
        UnlinkDirRequest{
            .parent = d, .name = "remote", .handle = pvfs::make_handle(1, 77), .owner_uid = 4242},
        RemoveDirObjectRequest{.handle = pvfs::make_handle(1, 78)},
        AccessRequest{.handle = h, .mask = access_read | access_write},
        SessionRequest{
            .client_id = 0x0123456789ABCDEF, .action = session_open, .owner = "machine:/mnt/pvfs"},
        OpenRequest{.handle = h,
                    .client_id = 0x0123456789ABCDEF,
                    .mode = open_read | open_write,
                    .gen = 41,
                    .reclaim = true},
        CloseRequest{.client_id = 0x0123456789ABCDEF,
                     .refs = {{.handle = h, .gen = 41}, {.handle = d, .gen = 1}}},
        OrphanDoneRequest{.handle = h},
        ListOrphansRequest{.cookie = 5, .max = 100},
        CapabilityRequest{.handle = pvfs::make_handle(0, 14),
                          .rights = cap_read | cap_write,
                          .client_id = 0x5EED},
    };
}

inline std::vector<proto::ResponseBody> response_bodies()
{
    using namespace pvfs::proto;
    std::array<std::byte, 32> hash{};
    for (std::size_t i = 0; i < hash.size(); ++i) {
        hash.at(i) = static_cast<std::byte>(255 - i);
    }
    std::vector<DirEntry> entries;
    for (std::uint64_t i = 0; i < 40; ++i) {
        entries.push_back(
            {.name = i == 0 ? long_name('e') : "entry-" + std::to_string(i),
             .handle = pvfs::make_handle(0, 100 + i),
             .type = i % 2 == 0 ? pvfs::ObjectType::regular : pvfs::ObjectType::directory,
             .cookie = i + 1});
    }
    return {
        GetConfigResponse{.config_text = "[cluster]\nname = \"demo\"\n", .server_index = 3},
        StatusResponse{.server_name = "meta0",
                       .version = "pvfs 0.1.0",
                       .config_hash = hash,
                       .roles = role_metadata | role_data,
                       .uptime_ns = 123'456'789'012,
                       .bulk_message_bytes = 1U << 30U,
                       .bulk_rdma_bytes = 5ULL << 40U,
                       .counters = std::nullopt},
        LookupResponse{.attr = attr(1)},
        GetattrResponse{.attr = attr(2)},
        SetattrResponse{.attr = attr(3)},
        CreateResponse{.attr = attr(4),
                       .created = true,
                       .cap = capability(attr(4).handle, cap_read | cap_write)},
        MkdirResponse{.attr = attr(5)},
        MknodResponse{.attr = attr(6)},
        SymlinkResponse{.attr = attr(7)},
        LinkResponse{.attr = attr(8)},
        ReadlinkResponse{.target = "/a/b/" + std::string(pvfs::max_path - 5, 'r')},
        RemoveResponse{.handle = pvfs::make_handle(1, 9),
                       .type = pvfs::ObjectType::regular,
                       .nlink_after = 0,
                       .layout = {65536, 2, 1},
                       .orphaned = true},
        RmdirResponse{},
        RenameResponse{.replaced = pvfs::make_handle(1, 10),
                       .replaced_type = pvfs::ObjectType::symlink,
                       .replaced_nlink_after = 2,
                       .layout = {0, 0, 0},
                       .orphaned = std::nullopt}, // a reply to an older client
        ReaddirResponse{.entries = entries, .eof = true},
        StatfsResponse{.total_bytes = 1ULL << 40U,
                       .free_bytes = 1ULL << 39U,
                       .avail_bytes = (1ULL << 39U) - 5,
                       .total_objects = 1'000'000,
                       .free_objects = 999'000},
        ReadResponse{.bytes = 5ULL * 4096, .object_size = 1ULL << 33U, .macs = std::nullopt},
        WriteResponse{.bytes = 300, .object_size = 8192},
        FsyncResponse{},
        ObjectSizesResponse{.sizes = {0, 1, no_object_size, 1ULL << 50U}},
        TruncateObjectResponse{},
        RemoveObjectResponse{},
        ListObjectsResponse{.handles = {1, 2, 3}, .next_cookie = 4, .eof = false},
        XattrGetResponse{.value = pattern(1000, 3)},
        XattrSetResponse{},
        XattrListResponse{.names = {"user.a", "security.selinux", std::string(255, 'z')}},
        XattrRemoveResponse{},
        LayoutGetResponse{.layout = {1U << 20U, 8, 7}},
        LayoutSetResponse{},
        ListHandlesResponse{
            .handles = {pvfs::root_handle, pvfs::make_handle(0, 2)}, .next_cookie = 0, .eof = true},
        MkdirObjectResponse{.attr = attr(9)},
        LinkDirResponse{},
        RetireDirResponse{.attr = attr(10)},
        UnlinkDirResponse{},
        RemoveDirObjectResponse{},
        AccessResponse{},
        SessionResponse{.server_boot = 0xFEDCBA9876543210, .max_slots = max_slots},
        OpenResponse{.attr = attr(11),
                     .server_boot = 0xFEDCBA9876543210,
                     .cap = capability(attr(11).handle, cap_read)},
        CloseResponse{.server_boot = 7,
                      .doomed = {{.handle = pvfs::make_handle(0, 12), .layout = {65536, 3, 2}}}},
        OrphanDoneResponse{},
        ListOrphansResponse{.entries = {{.handle = pvfs::make_handle(0, 12),
                                         .state = orphan_held,
                                         .since_ns = 1'700'000'000'000'000'000,
                                         .layout = {65536, 3, 2}},
                                        {.handle = pvfs::make_handle(0, 13),
                                         .state = orphan_reclaim,
                                         .since_ns = 1,
                                         .layout = {1U << 20U, 1, 0}}},
                            .next_cookie = pvfs::make_handle(0, 13),
                            .eof = true},
        CapabilityResponse{.cap = capability(pvfs::make_handle(0, 14), cap_write)},
    };
}

inline proto::Request request(proto::RequestBody body, std::uint64_t n = 1)
{
    const auto op = static_cast<proto::Op>(body.index() + 1);
    // Data requests carry a capability for their handle.
    std::optional<proto::Capability> cap;
    if (const std::uint32_t rights = proto::capability_needed(op); rights != 0) {
        const pvfs::Handle h = std::visit(
            [](const auto &b) -> pvfs::Handle {
                if constexpr (requires { b.handle; })
                    return b.handle;
                else
                    return pvfs::no_handle;
            },
            body);
        cap = capability(h,
                         rights == (proto::cap_read | proto::cap_write) ? proto::cap_read : rights);
    }
    return {.request_id = 0x1111222233334444 + n,
            .session = 0xABCDEF0123456789,
            .seq = 1000 + n,
            .time_ns = 1'763'800'000'123'456'789,
            // Every other sample carries exactly-once ids.
            .once = n % 2 == 0 ? proto::OnceIds{.client_id = 0x5EED5EED5EED5EED + n,
                                                .slot = static_cast<std::uint32_t>(n % 64),
                                                .step = 1,
                                                .xid = 77 + n}
                               : proto::OnceIds{},
            // Every third names its destination.
            .to = n % 3 == 0
                      ? std::optional<proto::Destination>(proto::Destination{
                            .fs_id = 0xF5F5F5F5, .server_index = static_cast<std::uint32_t>(n)})
                      : std::nullopt,
            .cap = cap,
            .cred = credentials(),
            .body = std::move(body)};
}

inline proto::Response response(proto::ResponseBody body, std::uint64_t n = 1)
{
    return {.status = 0,
            .request_id = 0x1111222233334444 + n,
            .session = 0xABCDEF0123456789,
            .seq = 1000 + n,
            .body = std::move(body)};
}

} // namespace samples

#endif // PVFS_TESTS_UNIT_PROTO_SAMPLES_HPP
