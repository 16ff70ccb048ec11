// Checks the layout of the kernel <-> pvfsd ABI (include/pvfs/pvfsd_dev.h):
// both sides compile the same header with different compilers and flags, so
// every size and offset is pinned here; a change must be deliberate and come
// with a new PVFSD_DEV_VERSION.
#include <atf-c++.hpp>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "pvfs/pvfsd_dev.h"

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
    ATF_REQUIRE(PVFSD_DEV_VERSION >= 1U);
    ATF_REQUIRE(PVFSD_DEV_MAX_MSG >= sizeof(pvfsd_msg_hdr));
    ATF_REQUIRE_EQ(std::string(PVFSD_DEV_NAME), "pvfsd");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, header_layout);
    ATF_ADD_TEST_CASE(tcs, magic_spells_pvfs);
    ATF_ADD_TEST_CASE(tcs, limits);
}
