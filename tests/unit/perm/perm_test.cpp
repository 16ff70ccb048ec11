// Tests of the POSIX permission rules (include/pvfs/perm.hpp).  Each rule is
// a table of cases; each row's expectation comes from the Linux man page
// named beside it (path_resolution(7), chmod(2), chown(2), utimensat(2),
// unlink(2), rename(2), link(2), xattr(7), inode(7)).
#include <atf-c++.hpp>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pvfs/perm.hpp"
#include "pvfs/types.hpp"

namespace perm = pvfs::perm;
using pvfs::Attr;
using pvfs::Credentials;
using pvfs::ObjectType;
using pvfs::Timespec;

namespace {

// The cast of the tables: the object's owner (uid 100, gid 100), a member of
// its group by supplementary group (uid 200, gid 300, groups {100}), a
// stranger (uid 300, gid 300) and root.
const Credentials owner{100, 100, {}};
const Credentials member{200, 300, {100}};
const Credentials other{300, 300, {7, 8}};
const Credentials root{0, 0, {}};

Attr object(ObjectType type, std::uint32_t mode, std::uint32_t uid = 100, std::uint32_t gid = 100)
{
    Attr a;
    a.handle = pvfs::make_handle(0, 42);
    a.type = type;
    a.mode = mode;
    a.uid = uid;
    a.gid = gid;
    a.nlink = 1;
    return a;
}

void expect(int got, int want, const std::string &what)
{
    if (got != want)
        ATF_FAIL(fmt::format("{}: got {}, want {}", what, got, want));
}

} // namespace

// path_resolution(7), "Permissions": exactly one class applies (owner, else
// group, else other), even when a later class would grant more; root
// (CAP_DAC_OVERRIDE) reads and writes anything, executes a file only if
// some x bit is set, and always searches a directory.
ATF_TEST_CASE_WITHOUT_HEAD(access_classes);
ATF_TEST_CASE_BODY(access_classes)
{
    struct Row {
        const Credentials *cred;
        ObjectType type;
        std::uint32_t mode;
        unsigned mask;
        int want;
    };
    const auto reg = ObjectType::regular;
    const auto dir = ObjectType::directory;
    const std::vector<Row> rows = {
        {&owner, reg, 0600, perm::may_read | perm::may_write, 0},
        {&owner, reg, 0400, perm::may_write, -EACCES},
        {&owner, reg, 0077, perm::may_read, -EACCES}, // owner class only, group/other ignored
        {&owner, reg, 0700, perm::may_exec, 0},
        {&member, reg, 0040, perm::may_read, 0},       // via supplementary group 100
        {&member, reg, 0604, perm::may_read, -EACCES}, // group class applies, not other
        {&member, reg, 0020, perm::may_write, 0},
        {&member, reg, 0010, perm::may_read | perm::may_exec, -EACCES},
        {&other, reg, 0004, perm::may_read, 0},
        {&other, reg, 0660, perm::may_read, -EACCES},
        {&other, reg, 0003, perm::may_write | perm::may_exec, 0},
        {&other, reg, 0006, perm::may_write | perm::may_exec, -EACCES},
        {&root, reg, 0000, perm::may_read | perm::may_write, 0},
        {&root, reg, 0000, perm::may_exec, -EACCES},
        {&root, reg, 0001, perm::may_exec, 0}, // some x bit anywhere suffices
        {&root, reg, 0010, perm::may_exec, 0},
        {&root, dir, 0000, perm::may_exec | perm::may_read | perm::may_write, 0},
        {&other, dir, 0754, perm::may_exec, -EACCES},
        {&other, dir, 0755, perm::may_exec, 0},
        {&owner, reg, 0000, 0, 0}, // asking for nothing is always granted
    };
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Row &r = rows[i];
        expect(perm::may_access(*r.cred, object(r.type, r.mode), r.mask), r.want,
               fmt::format("row {} (uid {}, mode {:o}, mask {})", i, r.cred->uid, r.mode, r.mask));
    }
    // The primary gid counts as a group too.
    const Credentials primary{500, 100, {}};
    expect(perm::may_access(primary, object(ObjectType::regular, 0040), perm::may_read), 0,
           "primary gid");
    ATF_REQUIRE(perm::in_group(member, 100));
    ATF_REQUIRE(perm::in_group(member, 300));
    ATF_REQUIRE(!perm::in_group(member, 7));
}

// unlink(2), rename(2): EACCES without write or search permission on the
// directory; EPERM when the directory is sticky and the caller owns neither
// the victim nor the directory and is not privileged.
ATF_TEST_CASE_WITHOUT_HEAD(delete_and_sticky);
ATF_TEST_CASE_BODY(delete_and_sticky)
{
    struct Row {
        const Credentials *cred;
        std::uint32_t dir_mode;
        std::uint32_t dir_uid;
        std::uint32_t victim_uid;
        int want;
    };
    const std::vector<Row> rows = {
        {&other, 0777, 100, 100, 0},         // not sticky: anyone with w+x
        {&other, 01777, 100, 100, -EPERM},   // sticky, owns neither
        {&other, 01777, 100, 300, 0},        // sticky, owns the victim
        {&other, 01777, 300, 100, 0},        // sticky, owns the directory
        {&root, 01777, 100, 100, 0},         // root
        {&member, 01770, 100, 100, -EPERM},  // group w+x, sticky
        {&member, 00750, 100, 100, -EACCES}, // no group write
        {&member, 00760, 100, 100, -EACCES}, // no group search
        {&owner, 0500, 100, 300, -EACCES},   // owner without write
        {&other, 01775, 100, 300, -EACCES},  // missing permission wins over sticky
    };
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Row &r = rows[i];
        const Attr dir = object(ObjectType::directory, r.dir_mode, r.dir_uid, 100);
        const Attr victim = object(ObjectType::regular, 0644, r.victim_uid, 100);
        expect(perm::may_delete(*r.cred, dir, victim), r.want, fmt::format("row {}", i));
    }
    expect(
        perm::may_delete(owner, object(ObjectType::regular, 0777), object(ObjectType::regular, 0)),
        -ENOTDIR, "parent not a directory");
    expect(perm::may_create(other, object(ObjectType::directory, 0773)), 0, "create w+x");
    expect(perm::may_create(other, object(ObjectType::directory, 0775)), -EACCES, "create no w");
    expect(perm::may_create(root, object(ObjectType::directory, 0)), 0, "create root");
}

// link(2) with fs.protected_hardlinks = 1 (proc(5)): the owner or root, or
// a regular, non-setuid, non-setgid-executable file the caller may read and
// write; else EPERM.
ATF_TEST_CASE_WITHOUT_HEAD(hardlink_protection);
ATF_TEST_CASE_BODY(hardlink_protection)
{
    struct Row {
        const Credentials *cred;
        ObjectType type;
        std::uint32_t mode;
        int want;
    };
    const std::vector<Row> rows = {
        {&owner, ObjectType::regular, 0000, 0},
        {&root, ObjectType::regular, 04755, 0},
        {&other, ObjectType::regular, 0666, 0},
        {&other, ObjectType::regular, 0644, -EPERM},  // cannot write it
        {&other, ObjectType::regular, 04666, -EPERM}, // setuid
        {&other, ObjectType::regular, 02676, -EPERM}, // setgid + group exec
        {&other, ObjectType::regular, 02666, 0},      // setgid without group exec
        {&other, ObjectType::fifo, 0666, -EPERM},     // not a regular file
    };
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Row &r = rows[i];
        expect(perm::may_hardlink(*r.cred, object(r.type, r.mode)), r.want,
               fmt::format("row {}", i));
    }
}

// inode(7) "The set-group-ID bit" and mkdir(2), open(2): the group of a new
// object is the parent's when the parent is setgid, else the caller's; a
// new directory in a setgid parent is setgid; mkdir keeps only rwx and the
// sticky bit; a setgid, group-executable new file whose group the caller is
// not in loses setgid (Linux mode_strip_sgid); symlinks are 0777.
ATF_TEST_CASE_WITHOUT_HEAD(new_object_owner);
ATF_TEST_CASE_BODY(new_object_owner)
{
    struct Row {
        const Credentials *cred;
        std::uint32_t parent_mode;
        ObjectType type;
        std::uint32_t requested;
        perm::NewOwner want;
    };
    const auto reg = ObjectType::regular;
    const auto dir = ObjectType::directory;
    // The parent belongs to uid 100, gid 500; `other` is not in group 500.
    const std::vector<Row> rows = {
        {&other, 0777, reg, 0644, {300, 300, 0644}},
        {&other, 02777, reg, 0644, {300, 500, 0644}},
        {&other, 02777, dir, 0755, {300, 500, 02755}},
        {&other, 0777, dir, 07777, {300, 300, 01777}},  // mkdir drops setuid/setgid
        {&other, 02777, dir, 06755, {300, 500, 02755}}, // ... but inherits setgid
        {&other, 02777, reg, 02755, {300, 500, 0755}},  // not in group 500: stripped
        {&other, 02777, reg, 02745, {300, 500, 02745}}, // no group exec: kept
        {&other, 0777, reg, 02755, {300, 300, 02755}},  // own group: kept
        {&root, 02777, reg, 02755, {0, 500, 02755}},    // root: kept
        {&other, 02777, ObjectType::symlink, 0600, {300, 500, 0777}},
        {&other, 0777, ObjectType::fifo, 0640, {300, 300, 0640}},
    };
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Row &r = rows[i];
        const Attr parent = object(ObjectType::directory, r.parent_mode, 100, 500);
        const perm::NewOwner got = perm::new_object(*r.cred, parent, r.type, r.requested);
        if (!(got == r.want))
            ATF_FAIL(fmt::format("row {}: got {}/{}/{:o}, want {}/{}/{:o}", i, got.uid, got.gid,
                                 got.mode, r.want.uid, r.want.gid, r.want.mode));
    }
    // A member of the inherited group keeps setgid.
    const Credentials in500{300, 300, {500}};
    const Attr parent = object(ObjectType::directory, 02777, 100, 500);
    ATF_REQUIRE_EQ(perm::new_object(in500, parent, reg, 02755).mode, 02755U);
}

// write(2)/inode(7): a write by an unprivileged process clears setuid, and
// setgid if group-execute is set (setgid without it marks mandatory locking).
ATF_TEST_CASE_WITHOUT_HEAD(write_clears_suid);
ATF_TEST_CASE_BODY(write_clears_suid)
{
    struct Row {
        const Credentials *cred;
        ObjectType type;
        std::uint32_t mode;
        std::uint32_t want;
    };
    const std::vector<Row> rows = {
        {&owner, ObjectType::regular, 06755, 0755}, {&owner, ObjectType::regular, 06745, 02745},
        {&other, ObjectType::regular, 04777, 0777}, {&root, ObjectType::regular, 06755, 06755},
        {&owner, ObjectType::regular, 0644, 0644},  {&owner, ObjectType::directory, 06755, 06755},
    };
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Row &r = rows[i];
        const std::uint32_t got = perm::mode_after_write(*r.cred, object(r.type, r.mode));
        if (got != r.want)
            ATF_FAIL(fmt::format("row {}: got {:o}, want {:o}", i, got, r.want));
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(squash_root);
ATF_TEST_CASE_BODY(squash_root)
{
    const Credentials r{0, 0, {0, 5, 0, 6}};
    const Credentials squashed = perm::squash(r, true);
    ATF_REQUIRE_EQ(squashed.uid, perm::squashed_id);
    ATF_REQUIRE_EQ(squashed.gid, perm::squashed_id);
    ATF_REQUIRE(squashed.groups == (std::vector<std::uint32_t>{5, 6}));
    ATF_REQUIRE(perm::squash(r, false) == r);
    const Credentials user{10, 0, {0}};
    const Credentials u2 = perm::squash(user, true);
    ATF_REQUIRE_EQ(u2.uid, 10U);
    ATF_REQUIRE_EQ(u2.gid, perm::squashed_id);
    ATF_REQUIRE(u2.groups.empty());
    ATF_REQUIRE(perm::squash(owner, true) == owner);
    ATF_REQUIRE(!perm::is_root(squashed));
}

namespace {

struct SetattrRow {
    const Credentials *cred;
    Attr current;
    perm::AttrChange change;
    int want;
    std::uint32_t want_mode; // checked when want == 0
    std::uint32_t want_uid;
    std::uint32_t want_gid;
};

perm::AttrChange chmod_to(std::uint32_t mode)
{
    perm::AttrChange c;
    c.mask = perm::set_mode;
    c.mode = mode;
    return c;
}

perm::AttrChange chown_to(std::uint32_t uid, std::uint32_t gid, std::uint32_t mask)
{
    perm::AttrChange c;
    c.mask = mask;
    c.uid = uid;
    c.gid = gid;
    return c;
}

void run_setattr_rows(const std::vector<SetattrRow> &rows)
{
    const Timespec now{1000, 5};
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const SetattrRow &r = rows[i];
        Attr result = object(ObjectType::fifo, 0); // a sentinel that must stay on failure
        const Attr sentinel = result;
        const int rc = perm::apply_setattr(*r.cred, r.current, r.change, now, result);
        expect(rc, r.want, fmt::format("row {}", i));
        if (rc != 0) {
            if (!(result == sentinel))
                ATF_FAIL(fmt::format("row {}: result changed on failure", i));
            continue;
        }
        if (result.mode != r.want_mode || result.uid != r.want_uid || result.gid != r.want_gid)
            ATF_FAIL(fmt::format("row {}: got {:o} {}:{}, want {:o} {}:{}", i, result.mode,
                                 result.uid, result.gid, r.want_mode, r.want_uid, r.want_gid));
        if (!(result.ctime == now))
            ATF_FAIL(fmt::format("row {}: ctime not updated", i));
    }
}

} // namespace

// chmod(2): EPERM unless owner or privileged; an unprivileged caller not in
// the file's group loses S_ISGID silently.
ATF_TEST_CASE_WITHOUT_HEAD(setattr_chmod);
ATF_TEST_CASE_BODY(setattr_chmod)
{
    const Attr file = object(ObjectType::regular, 0644);
    const Attr file_g500 = object(ObjectType::regular, 0644, 100, 500);
    const Attr dir = object(ObjectType::directory, 0755);
    run_setattr_rows({
        {&owner, file, chmod_to(0600), 0, 0600, 100, 100},
        {&owner, file, chmod_to(0177777), 0, 07777, 100, 100}, // type bits ignored
        {&member, file, chmod_to(0666), -EPERM, 0, 0, 0},
        {&other, file, chmod_to(0666), -EPERM, 0, 0, 0},
        {&root, file, chmod_to(04755), 0, 04755, 100, 100},
        {&owner, file_g500, chmod_to(02755), 0, 0755, 100, 500}, // not in group 500
        {&root, file_g500, chmod_to(02755), 0, 02755, 100, 500},
        {&owner, dir, chmod_to(03777), 0, 03777, 100, 100},
    });
}

// chown(2): only a privileged process may change the owner (the owner
// "changing" it to itself is allowed); the owner may change the group to
// any group it belongs to; for non-directories setuid is cleared, and
// setgid when group-exec is set, also when root does it.
ATF_TEST_CASE_WITHOUT_HEAD(setattr_chown);
ATF_TEST_CASE_BODY(setattr_chown)
{
    const Attr file = object(ObjectType::regular, 06755);
    const Attr file_sgid_noexec = object(ObjectType::regular, 06745);
    const Attr dir = object(ObjectType::directory, 06755);
    const std::uint32_t uid = perm::set_uid;
    const std::uint32_t gid = perm::set_gid;
    const Credentials owner_in_7{100, 100, {7}};
    run_setattr_rows({
        {&owner, file, chown_to(300, 0, uid), -EPERM, 0, 0, 0},
        {&owner, file, chown_to(100, 0, uid), 0, 0755, 100, 100}, // no-op chown still kills
        {&root, file, chown_to(300, 0, uid), 0, 0755, 300, 100},  // even root
        {&root, file_sgid_noexec, chown_to(300, 0, uid), 0, 02745, 300, 100},
        {&root, dir, chown_to(300, 0, uid), 0, 06755, 300, 100}, // directories keep them
        {&owner, file, chown_to(0, 7, gid), -EPERM, 0, 0, 0},    // not in group 7
        {&owner_in_7, file, chown_to(0, 7, gid), 0, 0755, 100, 7},
        {&member, file, chown_to(0, 100, gid), -EPERM, 0, 0, 0}, // not the owner
        {&other, file, chown_to(0, 300, gid), -EPERM, 0, 0, 0},
        {&root, file, chown_to(5, 6, uid | gid), 0, 0755, 5, 6},
        {&root, file, chown_to(0xFFFFFFFF, 0, uid), -EINVAL, 0, 0, 0},
    });
}

// utimensat(2): explicit times need the owner or privilege (EPERM); both
// times to "now" also allow anyone with write permission (EACCES
// otherwise); only one time to "now" counts as explicit.
ATF_TEST_CASE_WITHOUT_HEAD(setattr_times);
ATF_TEST_CASE_BODY(setattr_times)
{
    const Attr writable = object(ObjectType::regular, 0666);
    const Attr readonly = object(ObjectType::regular, 0644);
    struct Row {
        const Credentials *cred;
        const Attr *attr;
        std::uint32_t mask;
        int want;
    };
    const std::uint32_t both_now = perm::set_atime_now | perm::set_mtime_now;
    const std::vector<Row> rows = {
        {&owner, &readonly, perm::set_atime | perm::set_mtime, 0},
        {&root, &readonly, perm::set_mtime, 0},
        {&other, &writable, perm::set_mtime, -EPERM},
        {&other, &writable, both_now, 0},
        {&other, &readonly, both_now, -EACCES},
        {&other, &writable, perm::set_mtime_now, -EPERM},
        {&owner, &readonly, both_now, 0},
        {&owner, &readonly, perm::set_ctime, -EPERM},
        {&root, &readonly, perm::set_ctime, 0},
    };
    const Timespec now{2000, 7};
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Row &r = rows[i];
        perm::AttrChange c;
        c.mask = r.mask;
        c.atime = {10, 1};
        c.mtime = {20, 2};
        c.ctime = {30, 3};
        Attr out;
        expect(perm::apply_setattr(*r.cred, *r.attr, c, now, out), r.want,
               fmt::format("row {}", i));
    }
    perm::AttrChange c;
    c.mask = perm::set_atime | perm::set_mtime_now;
    c.atime = {10, 1};
    Attr out;
    ATF_REQUIRE_EQ(perm::apply_setattr(owner, readonly, c, now, out), 0);
    ATF_REQUIRE(out.atime == (Timespec{10, 1}));
    ATF_REQUIRE(out.mtime == now);
    ATF_REQUIRE(out.ctime == now);
    c.mask = perm::set_ctime;
    c.ctime = {30, 3};
    ATF_REQUIRE_EQ(perm::apply_setattr(root, readonly, c, now, out), 0);
    ATF_REQUIRE(out.ctime == (Timespec{30, 3}));
    c.mask = perm::set_mtime;
    c.mtime = {1, 1'000'000'000};
    ATF_REQUIRE_EQ(perm::apply_setattr(owner, readonly, c, now, out), -EINVAL);
    c.mask = 1U << 20U;
    ATF_REQUIRE_EQ(perm::apply_setattr(owner, readonly, c, now, out), -EINVAL);
    c.mask = 0;
    ATF_REQUIRE_EQ(perm::apply_setattr(other, readonly, c, now, out), 0);
    ATF_REQUIRE(out == readonly);

    // A writer (the server checked its open for writing) may set times to
    // now, one or both, whatever the mode; explicit times, chmod and chown
    // stay the owner's.
    c.writer = true;
    for (const std::uint32_t mask : {perm::set_mtime_now, both_now}) {
        c.mask = mask;
        ATF_REQUIRE_EQ(perm::apply_setattr(other, readonly, c, now, out), 0);
        ATF_REQUIRE(out.mtime == now);
    }
    c.mask = perm::set_mtime;
    c.mtime = {20, 2};
    ATF_REQUIRE_EQ(perm::apply_setattr(other, writable, c, now, out), -EPERM);
    c.mask = perm::set_atime | perm::set_mtime_now;
    ATF_REQUIRE_EQ(perm::apply_setattr(other, writable, c, now, out), -EPERM);
    c.mask = perm::set_mode;
    c.mode = 0777;
    ATF_REQUIRE_EQ(perm::apply_setattr(other, writable, c, now, out), -EPERM);
    c.mask = perm::set_uid;
    c.uid = other.uid;
    ATF_REQUIRE_EQ(perm::apply_setattr(other, writable, c, now, out), -EPERM);
    c.mask = perm::set_ctime;
    ATF_REQUIRE_EQ(perm::apply_setattr(other, writable, c, now, out), -EPERM);
}

// xattr(7): "user." attributes follow the file's permission bits, exist
// only on regular files and directories, and in a sticky directory only its
// owner or root may write them; pvfs.* may be read by anyone and written by
// the owner or root; other namespaces are not supported.
ATF_TEST_CASE_WITHOUT_HEAD(xattr_rules);
ATF_TEST_CASE_BODY(xattr_rules)
{
    struct Row {
        const Credentials *cred;
        ObjectType type;
        std::uint32_t mode;
        std::string name;
        bool write;
        int want;
    };
    const auto reg = ObjectType::regular;
    const auto dir = ObjectType::directory;
    const std::vector<Row> rows = {
        {&other, reg, 0644, "user.a", false, 0},
        {&other, reg, 0644, "user.a", true, -EACCES},
        {&other, reg, 0666, "user.a", true, 0},
        {&other, reg, 0640, "user.a", false, -EACCES},
        {&other, dir, 01777, "user.a", true, -EPERM},
        {&owner, dir, 01777, "user.a", true, 0},
        {&owner, ObjectType::symlink, 0777, "user.a", false, -ENODATA},
        {&owner, ObjectType::fifo, 0666, "user.a", true, -EPERM},
        {&other, reg, 0000, "pvfs.layout", false, 0},
        {&other, reg, 0666, "pvfs.layout", true, -EPERM},
        {&owner, reg, 0000, "pvfs.layout", true, 0},
        {&root, reg, 0000, "pvfs.layout", true, 0},
        {&root, reg, 0666, "trusted.x", false, -EOPNOTSUPP},
        {&root, reg, 0666, "security.selinux", true, -EOPNOTSUPP},
        {&owner, reg, 0666, "user.", true, -EINVAL},
        {&owner, reg, 0666, "user." + std::string(251, 'x'), true, -ERANGE},
        {&owner, reg, 0666, "user." + std::string(250, 'x'), true, 0},
    };
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Row &r = rows[i];
        expect(perm::may_xattr(*r.cred, object(r.type, r.mode), r.name, r.write), r.want,
               fmt::format("row {} ({})", i, r.name.substr(0, 20)));
    }
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, access_classes);
    ATF_ADD_TEST_CASE(tcs, delete_and_sticky);
    ATF_ADD_TEST_CASE(tcs, hardlink_protection);
    ATF_ADD_TEST_CASE(tcs, new_object_owner);
    ATF_ADD_TEST_CASE(tcs, write_clears_suid);
    ATF_ADD_TEST_CASE(tcs, squash_root);
    ATF_ADD_TEST_CASE(tcs, setattr_chmod);
    ATF_ADD_TEST_CASE(tcs, setattr_chown);
    ATF_ADD_TEST_CASE(tcs, setattr_times);
    ATF_ADD_TEST_CASE(tcs, xattr_rules);
}
