// Checks the layout of the kernel <-> pvfsd ABI (include/pvfs/pvfsd_dev.h):
// both sides compile the same header with different compilers and flags, so
// every size and offset is pinned here; a change must be deliberate and come
// with a new PVFSD_DEV_MAJOR (an incompatible one) or PVFSD_DEV_MINOR and a
// feature bit (a field in what was padding).
#include <atf-c++.hpp>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "pvfs/proto.hpp"
#include "pvfs/pvfsd_dev.h"
#include "pvfs/types.hpp"

ATF_TEST_CASE_WITHOUT_HEAD(header_layout);
ATF_TEST_CASE_BODY(header_layout)
{
    ATF_REQUIRE_EQ(sizeof(pvfsd_msg_hdr), 24U);
    ATF_REQUIRE_EQ(alignof(pvfsd_msg_hdr), 8U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_msg_hdr, magic), 0U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_msg_hdr, version), 4U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_msg_hdr, op), 6U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_msg_hdr, tag), 8U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_msg_hdr, length), 16U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_msg_hdr, status), 20U);
    ATF_REQUIRE(std::is_trivially_copyable_v<pvfsd_msg_hdr>);
    ATF_REQUIRE(std::is_standard_layout_v<pvfsd_msg_hdr>);
}

ATF_TEST_CASE_WITHOUT_HEAD(magic_spells_pvfs);
ATF_TEST_CASE_BODY(magic_spells_pvfs)
{
    // The magic reads "PVFS" in a hex dump of the device traffic.
    const std::uint32_t magic = PVFSD_DEV_MAGIC;
    char bytes[sizeof magic];
    std::memcpy(bytes, &magic, sizeof magic);
    ATF_REQUIRE_EQ(std::string(bytes, sizeof bytes), "PVFS");
}

ATF_TEST_CASE_WITHOUT_HEAD(limits);
ATF_TEST_CASE_BODY(limits)
{
    ATF_REQUIRE_EQ(PVFSD_DEV_MAJOR, 6U);
    ATF_REQUIRE_EQ(PVFSD_DEV_MINOR, 1U);
    // The header's version field holds the major.
    ATF_REQUIRE(PVFSD_DEV_MAJOR <= 0xffffU);
    // The slots a HELLO may ask for: whole pages, powers of two, and an
    // index that fits pvfsd_io_req.slot.
    ATF_REQUIRE_EQ(PVFSD_SLOT_SIZE_MIN, 64U << 10U);
    ATF_REQUIRE_EQ(PVFSD_SLOT_SIZE_MAX, 16U << 20U);
    ATF_REQUIRE_EQ(PVFSD_SLOT_SIZE_MIN & (PVFSD_SLOT_SIZE_MIN - 1), 0U);
    ATF_REQUIRE_EQ(PVFSD_SLOT_SIZE_MAX & (PVFSD_SLOT_SIZE_MAX - 1), 0U);
    ATF_REQUIRE_EQ(PVFSD_SLOTS_MIN, 1U);
    ATF_REQUIRE_EQ(PVFSD_SLOTS_MAX, 1024U);
    // A reply slot of a mount is a slot of its session on the servers.
    ATF_REQUIRE(PVFSD_REPLY_SLOTS <= pvfs::proto::max_slots);
    ATF_REQUIRE(PVFSD_NO_SLOT >= pvfs::proto::max_slots);
    ATF_REQUIRE_EQ(std::string(PVFSD_DEV_NAME), "pvfsd");
    // The largest message: an xattr SET with the longest name and value.
    ATF_REQUIRE(PVFSD_DEV_MAX_MSG >= sizeof(pvfsd_msg_hdr) + sizeof(pvfsd_xattr_req) +
                                         PVFSD_MAX_XATTR_NAME + PVFSD_MAX_XATTR_VALUE);
    // The same limits as the servers'.
    ATF_REQUIRE_EQ(PVFSD_MAX_NAME, pvfs::max_name);
    ATF_REQUIRE_EQ(PVFSD_MAX_SYMLINK, pvfs::max_path);
    ATF_REQUIRE_EQ(PVFSD_MAX_GROUPS, pvfs::max_groups);
    ATF_REQUIRE_EQ(PVFSD_MAX_XATTR_NAME, pvfs::max_xattr_name);
    ATF_REQUIRE_EQ(PVFSD_MAX_XATTR_VALUE, pvfs::max_xattr_value);
}

// Each minor's features contain the one before's; this header offers all.
ATF_TEST_CASE_WITHOUT_HEAD(features_grow_by_minor);
ATF_TEST_CASE_BODY(features_grow_by_minor)
{
    ATF_REQUIRE_EQ(PVFSD_FEATURES_MINOR0, 0U);
    ATF_REQUIRE_EQ(PVFSD_FEAT_CREATE_OPEN, 1U);
    ATF_REQUIRE_EQ(PVFSD_FEATURES_MINOR1 & PVFSD_FEATURES_MINOR0, PVFSD_FEATURES_MINOR0);
    ATF_REQUIRE_EQ(PVFSD_FEATURES_MINOR1 & ~PVFSD_FEATURES_MINOR0, PVFSD_FEAT_CREATE_OPEN);
    ATF_REQUIRE_EQ(PVFSD_FEATURES, PVFSD_FEATURES_MINOR1);
}

// Object types and setattr bits mean what the protocol's mean, so pvfsd
// passes them through unchanged.
ATF_TEST_CASE_WITHOUT_HEAD(numbering_matches_the_protocol);
ATF_TEST_CASE_BODY(numbering_matches_the_protocol)
{
    ATF_REQUIRE_EQ(PVFSD_TYPE_REGULAR, static_cast<int>(pvfs::ObjectType::regular));
    ATF_REQUIRE_EQ(PVFSD_TYPE_DIRECTORY, static_cast<int>(pvfs::ObjectType::directory));
    ATF_REQUIRE_EQ(PVFSD_TYPE_SYMLINK, static_cast<int>(pvfs::ObjectType::symlink));
    ATF_REQUIRE_EQ(PVFSD_TYPE_FIFO, static_cast<int>(pvfs::ObjectType::fifo));
    ATF_REQUIRE_EQ(PVFSD_TYPE_SOCKET, static_cast<int>(pvfs::ObjectType::socket));
    ATF_REQUIRE_EQ(PVFSD_TYPE_CHAR_DEVICE, static_cast<int>(pvfs::ObjectType::char_device));
    ATF_REQUIRE_EQ(PVFSD_TYPE_BLOCK_DEVICE, static_cast<int>(pvfs::ObjectType::block_device));
    ATF_REQUIRE_EQ(PVFSD_SET_MODE, pvfs::proto::set_mode);
    ATF_REQUIRE_EQ(PVFSD_SET_UID, pvfs::proto::set_uid);
    ATF_REQUIRE_EQ(PVFSD_SET_GID, pvfs::proto::set_gid);
    ATF_REQUIRE_EQ(PVFSD_SET_ATIME, pvfs::proto::set_atime);
    ATF_REQUIRE_EQ(PVFSD_SET_MTIME, pvfs::proto::set_mtime);
    ATF_REQUIRE_EQ(PVFSD_SET_ATIME_NOW, pvfs::proto::set_atime_now);
    ATF_REQUIRE_EQ(PVFSD_SET_MTIME_NOW, pvfs::proto::set_mtime_now);
    ATF_REQUIRE_EQ(PVFSD_OP_COUNT, PVFSD_OP_CLOSE + 1);
}

namespace {

// A body's size and its last member's end: equal when nothing is padded
// at the end; the pinned offsets catch padding in between.
template <typename T> void require_size(std::size_t want, std::size_t last_end)
{
    ATF_REQUIRE_EQ(sizeof(T), want);
    ATF_REQUIRE_EQ(last_end, want);
    ATF_REQUIRE_EQ(sizeof(T) % 8, 0U);
    ATF_REQUIRE(std::is_trivially_copyable_v<T>);
    ATF_REQUIRE(std::is_standard_layout_v<T>);
}

// A macro because offsetof takes a member name, which no function can.
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage)
#define END_OF(type, member) (offsetof(type, member) + sizeof(type::member))

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(body_layouts);
ATF_TEST_CASE_BODY(body_layouts)
{
    require_size<pvfsd_req_common>(160, END_OF(pvfsd_req_common, pad));
    ATF_REQUIRE_EQ(offsetof(pvfsd_req_common, fsuid), 8U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_req_common, ngroups), 16U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_req_common, groups), 24U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_req_common, reply_slot), 152U);

    require_size<pvfsd_time>(16, END_OF(pvfsd_time, pad));
    require_size<pvfsd_attr>(96, END_OF(pvfsd_attr, ctime));
    ATF_REQUIRE_EQ(offsetof(pvfsd_attr, type), 8U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_attr, blksize), 28U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_attr, size), 32U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_attr, atime), 48U);

    require_size<pvfsd_hello>(24, END_OF(pvfsd_hello, features));
    ATF_REQUIRE_EQ(offsetof(pvfsd_hello, minor), 8U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_hello, features), 16U);
    require_size<pvfsd_attach_req>(176, END_OF(pvfsd_attach_req, client_id));
    ATF_REQUIRE_EQ(offsetof(pvfsd_attach_req, source_len), 160U);
    require_size<pvfsd_attach_resp>(112, END_OF(pvfsd_attach_resp, pad));
    require_size<pvfsd_handle_req>(168, END_OF(pvfsd_handle_req, handle));
    require_size<pvfsd_attr_resp>(96, END_OF(pvfsd_attr_resp, attr));
    require_size<pvfsd_name_req>(176, END_OF(pvfsd_name_req, pad));
    ATF_REQUIRE_EQ(offsetof(pvfsd_name_req, parent), 160U);
    require_size<pvfsd_setattr_req>(224, END_OF(pvfsd_setattr_req, mtime));
    ATF_REQUIRE_EQ(offsetof(pvfsd_setattr_req, mask), 168U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_setattr_req, size), 184U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_setattr_req, atime), 192U);
    require_size<pvfsd_create_req>(184, END_OF(pvfsd_create_req, open_mode));
    require_size<pvfsd_create_resp>(104, END_OF(pvfsd_create_resp, opened));
    require_size<pvfsd_mknod_req>(192, END_OF(pvfsd_mknod_req, pad));
    ATF_REQUIRE_EQ(offsetof(pvfsd_mknod_req, rdev), 168U);
    require_size<pvfsd_symlink_req>(176, END_OF(pvfsd_symlink_req, target_len));
    require_size<pvfsd_link_req>(184, END_OF(pvfsd_link_req, pad));
    require_size<pvfsd_rename_req>(192, END_OF(pvfsd_rename_req, pad));
    ATF_REQUIRE_EQ(offsetof(pvfsd_rename_req, old_name_len), 176U);
    require_size<pvfsd_readlink_resp>(8, END_OF(pvfsd_readlink_resp, pad));
    require_size<pvfsd_readdir_req>(184, END_OF(pvfsd_readdir_req, pad));
    require_size<pvfsd_readdir_resp>(8, END_OF(pvfsd_readdir_resp, eof));
    require_size<pvfsd_dirent>(24, END_OF(pvfsd_dirent, name_len));
    require_size<pvfsd_io_req>(184, END_OF(pvfsd_io_req, slot));
    ATF_REQUIRE_EQ(offsetof(pvfsd_io_req, offset), 168U);
    require_size<pvfsd_io_resp>(8, END_OF(pvfsd_io_resp, pad));
    require_size<pvfsd_fsync_req>(176, END_OF(pvfsd_fsync_req, pad));
    require_size<pvfsd_statfs_resp>(48, END_OF(pvfsd_statfs_resp, namelen));
    require_size<pvfsd_xattr_req>(184, END_OF(pvfsd_xattr_req, pad));
    require_size<pvfsd_xattr_resp>(8, END_OF(pvfsd_xattr_resp, pad));
    require_size<pvfsd_cancel_req>(8, END_OF(pvfsd_cancel_req, target_tag));
    require_size<pvfsd_open_req>(184, END_OF(pvfsd_open_req, pad));
    ATF_REQUIRE_EQ(offsetof(pvfsd_open_req, gen), 168U);
    ATF_REQUIRE_EQ(offsetof(pvfsd_open_req, mode), 176U);
    require_size<pvfsd_close_ref>(16, END_OF(pvfsd_close_ref, gen));
    require_size<pvfsd_close_req>(168, END_OF(pvfsd_close_req, pad));
    // The largest CLOSE fits a message.
    ATF_REQUIRE(sizeof(pvfsd_msg_hdr) + sizeof(pvfsd_close_req) +
                    PVFSD_MAX_CLOSE * sizeof(pvfsd_close_ref) <=
                PVFSD_DEV_MAX_MSG);
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, header_layout);
    ATF_ADD_TEST_CASE(tcs, magic_spells_pvfs);
    ATF_ADD_TEST_CASE(tcs, limits);
    ATF_ADD_TEST_CASE(tcs, features_grow_by_minor);
    ATF_ADD_TEST_CASE(tcs, numbering_matches_the_protocol);
    ATF_ADD_TEST_CASE(tcs, body_layouts);
}
