// perm: the POSIX permission rules of Linux, as pure functions over the
// caller's Credentials and an object's Attr (types.hpp).  The metadata
// server calls them before every change; nothing here touches storage.
//
// "Root" is uid 0 after squashing (squash()): pvfs has no capabilities, so
// uid 0 holds every one Linux would consult here (CAP_DAC_OVERRIDE,
// CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID, CAP_CHOWN, CAP_MKNOD).
// Each function names the Linux code whose behaviour it follows; the rules
// and the man pages they come from are in docs/metadata.md.
//
// Errors are negative errnos: -EACCES when a permission bit is missing,
// -EPERM when only the owner or root may do it (as Linux returns them).
#ifndef PVFS_PERM_HPP
#define PVFS_PERM_HPP

#include <cstdint>
#include <string_view>

#include "pvfs/types.hpp"

namespace pvfs::perm {

// Access bits of may_access (MAY_READ, MAY_WRITE, MAY_EXEC).
inline constexpr unsigned may_read = 4;
inline constexpr unsigned may_write = 2;
inline constexpr unsigned may_exec = 1; // execute, or search for a directory

// Mode bits (S_ISUID, S_ISGID, S_ISVTX, S_IXGRP, S_IXUGO).
inline constexpr std::uint32_t mode_setuid = 04000;
inline constexpr std::uint32_t mode_setgid = 02000;
inline constexpr std::uint32_t mode_sticky = 01000;
inline constexpr std::uint32_t mode_group_exec = 00010;
inline constexpr std::uint32_t mode_any_exec = 00111;

// The uid and gid that root is mapped to by squash() ("nobody"/"nogroup").
inline constexpr std::uint32_t squashed_id = 65534;

[[nodiscard]] bool is_root(const Credentials &cred) noexcept;

// gid is the caller's primary or one of its supplementary groups
// (in_group_p).
[[nodiscard]] bool in_group(const Credentials &cred, std::uint32_t gid) noexcept;

// The caller owns the object or is root (inode_owner_or_capable).
[[nodiscard]] bool owner_or_root(const Credentials &cred, const Attr &attr) noexcept;

// 0 when every bit of mask (may_read | may_write | may_exec) is granted,
// else -EACCES (generic_permission).  Exactly one class applies: owner if
// the uid matches, else group if the gid is one of the caller's groups, else
// other.  Root may read and write anything and execute anything with an x
// bit set; directories it may always search.
[[nodiscard]] int may_access(const Credentials &cred, const Attr &attr, unsigned mask) noexcept;

// May the caller add an entry to dir (may_create): -ENOTDIR when dir is not
// a directory, -EACCES without write and search permission on it.
[[nodiscard]] int may_create(const Credentials &cred, const Attr &dir) noexcept;

// May the caller remove victim's entry from dir (may_delete: unlink, rmdir,
// and both ends of a rename): -ENOTDIR, -EACCES as may_create; in a sticky
// directory only the victim's owner, the directory's owner or root:
// -EPERM (check_sticky).
[[nodiscard]] int may_delete(const Credentials &cred, const Attr &dir, const Attr &victim) noexcept;

// May the caller make a new hard link to source (may_linkat with
// fs.protected_hardlinks = 1, Debian's default): the owner and root may;
// anyone else only for a regular file that is neither setuid nor
// setgid-executable and that they may read and write.  Else -EPERM.
[[nodiscard]] int may_hardlink(const Credentials &cred, const Attr &source) noexcept;

// The owner and mode of a new object (inode_init_owner, mode_strip_sgid).
struct NewOwner {
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::uint32_t mode = 0;
    friend bool operator==(const NewOwner &, const NewOwner &) = default;
};

// requested_mode has had the caller's umask applied already.  Directories
// keep only rwx and sticky of it (mkdir ignores setuid/setgid), symlinks are
// always 0777.  The owner is the caller; the group is the parent's when the
// parent is setgid (and a new directory then is setgid too), else the
// caller's.  A setgid, group-executable non-directory whose inherited group
// the caller is not in (and caller not root) loses setgid.
[[nodiscard]] NewOwner new_object(const Credentials &cred, const Attr &parent, ObjectType type,
                                  std::uint32_t requested_mode) noexcept;

// The mode after the caller wrote data into the object (file_remove_privs,
// should_remove_suid): a non-root write to a regular file clears setuid, and
// setgid when group-exec is set (setgid without group-exec marks mandatory
// locking and stays).
[[nodiscard]] std::uint32_t mode_after_write(const Credentials &cred, const Attr &attr) noexcept;

// Root squashing: with root_squash, uid 0 and gid 0 become squashed_id and
// group 0 is dropped from the supplementary groups.  Other ids pass.
[[nodiscard]] Credentials squash(Credentials cred, bool root_squash);

// ---- setattr ------------------------------------------------------------

// What a setattr changes: bits of AttrChange::mask.  The same bits and order
// as the protocol's setattr mask.
inline constexpr std::uint32_t set_mode = 1U << 0U;
inline constexpr std::uint32_t set_uid = 1U << 1U;
inline constexpr std::uint32_t set_gid = 1U << 2U;
inline constexpr std::uint32_t set_atime = 1U << 3U;     // to AttrChange::atime
inline constexpr std::uint32_t set_mtime = 1U << 4U;     // to AttrChange::mtime
inline constexpr std::uint32_t set_atime_now = 1U << 5U; // to the server's clock
inline constexpr std::uint32_t set_mtime_now = 1U << 6U;
inline constexpr std::uint32_t set_ctime = 1U << 7U; // explicit ctime: root only
inline constexpr std::uint32_t set_all = (1U << 8U) - 1;

struct AttrChange {
    std::uint32_t mask = 0;
    std::uint32_t mode = 0; // permission bits; others are ignored, as chmod(2) does
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    Timespec atime;
    Timespec mtime;
    Timespec ctime;
    // The caller holds the file open for writing (the server checked):
    // times to now need no write permission by the mode, as through a
    // descriptor on Linux (ftruncate).  Ownership rules do not change.
    bool writer = false;
};

// Checks that the caller may make `change` to `current` and computes the
// attributes after it (setattr_prepare, notify_change, setattr_copy).
// 0 and `result` set, or -EINVAL (unknown mask bit, nsec >= 1e9, uid or
// gid (uint32_t)-1), -EPERM, -EACCES; `result` is then untouched.
//   - chown (uid): root, or the owner "changing" it to itself;
//   - chgrp (gid): root, or the owner to its current group or one it is in;
//   - chmod: the owner or root; a non-root caller not in the file's (new)
//     group loses setgid silently;
//   - chown/chgrp without chmod, on anything but a directory: setuid is
//     cleared, and setgid when group-exec is set, even for root (Linux
//     since 2.2.13; chown(2));
//   - explicit times, or only one of atime/mtime to "now": the owner or
//     root (-EPERM); both to "now": also anyone with write access
//     (-EACCES otherwise) (utimensat(2)); any to "now": also a `writer`;
//   - explicit ctime: root only (-EPERM);
//   - any change sets ctime to now (unless given explicitly).
// An empty mask changes nothing and always succeeds.
[[nodiscard]] int apply_setattr(const Credentials &cred, const Attr &current,
                                const AttrChange &change, Timespec now, Attr &result) noexcept;

// ---- extended attributes ------------------------------------------------

inline constexpr std::string_view xattr_user_prefix = "user.";
inline constexpr std::string_view xattr_pvfs_prefix = "pvfs.";

// May the caller read (write = false) or set/remove (write = true) the
// extended attribute `name` of the object (xattr_permission).
//   - a name longer than max_xattr_name: -ERANGE; nothing after the prefix:
//     -EINVAL; a namespace other than "user." and "pvfs.": -EOPNOTSUPP;
//   - "user.": only regular files and directories have them (-ENODATA to
//     read, -EPERM to write others); in a sticky directory only its owner
//     or root may write them (-EPERM); else read or write access (-EACCES);
//   - "pvfs.": pvfs's own settings (e.g. pvfs.layout): anyone may read
//     them (they are metadata, like stat), only the owner or root may write
//     them (-EPERM).
// Listing names needs no permission (listxattr(2)).
[[nodiscard]] int may_xattr(const Credentials &cred, const Attr &attr, std::string_view name,
                            bool write) noexcept;

} // namespace pvfs::perm

#endif // PVFS_PERM_HPP
