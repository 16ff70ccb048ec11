// The Linux permission rules; see include/pvfs/perm.hpp for each function's
// source in the kernel and docs/metadata.md for the man pages.
#include "pvfs/perm.hpp"

#include <algorithm>
#include <cerrno>

namespace pvfs::perm {

namespace {

constexpr std::uint32_t nsec_per_sec = 1'000'000'000;
constexpr std::uint32_t invalid_id = 0xFFFFFFFF; // (uid_t)-1 means "no change" in chown(2)

[[nodiscard]] bool valid_time(const Timespec &t) noexcept
{
    return t.nsec < nsec_per_sec;
}

// The permission bits of the one class that applies to the caller.
[[nodiscard]] unsigned class_bits(const Credentials &cred, const Attr &attr) noexcept
{
    if (cred.uid == attr.uid)
        return (attr.mode >> 6U) & 7U;
    if (in_group(cred, attr.gid))
        return (attr.mode >> 3U) & 7U;
    return attr.mode & 7U;
}

// Times other than "both to now" (ATTR_TIMES_SET) need the owner.
[[nodiscard]] int check_times(const Credentials &cred, const Attr &current, std::uint32_t mask,
                              bool writer) noexcept
{
    const std::uint32_t explicit_times = set_atime | set_mtime;
    const std::uint32_t now_times = set_atime_now | set_mtime_now;
    if ((mask & (explicit_times | now_times)) == 0)
        return 0;
    const bool touch = (mask & now_times) == now_times && (mask & explicit_times) == 0;
    if (owner_or_root(cred, current))
        return 0;
    // An open for writing decided already (setattr_prepare leaves times to
    // now unchecked; only utimes(NULL) by path checks the mode).
    if (writer && (mask & explicit_times) == 0)
        return 0;
    if (!touch)
        return -EPERM;
    return may_access(cred, current, may_write);
}

[[nodiscard]] int check_owner_change(const Credentials &cred, const Attr &current,
                                     const AttrChange &change) noexcept
{
    const bool owner = cred.uid == current.uid;
    // chown_ok: only a no-op by the owner, unless root.
    if ((change.mask & set_uid) != 0 && !is_root(cred) && !(owner && change.uid == current.uid))
        return -EPERM;
    // chgrp_ok
    if ((change.mask & set_gid) != 0 && !is_root(cred) &&
        !(owner && (change.gid == current.gid || in_group(cred, change.gid))))
        return -EPERM;
    return 0;
}

} // namespace

bool is_root(const Credentials &cred) noexcept
{
    return cred.uid == 0;
}

bool in_group(const Credentials &cred, std::uint32_t gid) noexcept
{
    return cred.gid == gid ||
           std::find(cred.groups.begin(), cred.groups.end(), gid) != cred.groups.end();
}

bool owner_or_root(const Credentials &cred, const Attr &attr) noexcept
{
    return is_root(cred) || cred.uid == attr.uid;
}

int may_access(const Credentials &cred, const Attr &attr, unsigned mask) noexcept
{
    mask &= may_read | may_write | may_exec;
    if ((class_bits(cred, attr) & mask) == mask)
        return 0;
    if (is_root(cred)) {
        // CAP_DAC_OVERRIDE: everything but executing a file no one may execute.
        if ((mask & may_exec) == 0 || attr.type == ObjectType::directory ||
            (attr.mode & mode_any_exec) != 0)
            return 0;
    }
    return -EACCES;
}

int may_create(const Credentials &cred, const Attr &dir) noexcept
{
    if (dir.type != ObjectType::directory)
        return -ENOTDIR;
    return may_access(cred, dir, may_write | may_exec);
}

int may_delete(const Credentials &cred, const Attr &dir, const Attr &victim) noexcept
{
    if (const int rc = may_create(cred, dir); rc != 0)
        return rc;
    if ((dir.mode & mode_sticky) != 0 && !is_root(cred) && cred.uid != victim.uid &&
        cred.uid != dir.uid)
        return -EPERM;
    return 0;
}

int may_hardlink(const Credentials &cred, const Attr &source) noexcept
{
    if (owner_or_root(cred, source))
        return 0;
    const bool safe =
        source.type == ObjectType::regular && (source.mode & mode_setuid) == 0 &&
        (source.mode & (mode_setgid | mode_group_exec)) != (mode_setgid | mode_group_exec) &&
        may_access(cred, source, may_read | may_write) == 0;
    return safe ? 0 : -EPERM;
}

NewOwner new_object(const Credentials &cred, const Attr &parent, ObjectType type,
                    std::uint32_t requested_mode) noexcept
{
    NewOwner out;
    out.uid = cred.uid;
    switch (type) {
    case ObjectType::directory:
        out.mode = requested_mode & (0777U | mode_sticky);
        break;
    case ObjectType::symlink:
        out.mode = 0777;
        break;
    default:
        out.mode = requested_mode & mode_perm_mask;
        break;
    }
    if ((parent.mode & mode_setgid) == 0) {
        out.gid = cred.gid;
        return out;
    }
    out.gid = parent.gid;
    if (type == ObjectType::directory) {
        out.mode |= mode_setgid;
    } else if ((out.mode & (mode_setgid | mode_group_exec)) == (mode_setgid | mode_group_exec) &&
               !in_group(cred, out.gid) && !is_root(cred)) {
        out.mode &= ~mode_setgid;
    }
    return out;
}

std::uint32_t mode_after_write(const Credentials &cred, const Attr &attr) noexcept
{
    std::uint32_t mode = attr.mode;
    if (is_root(cred) || attr.type != ObjectType::regular)
        return mode;
    mode &= ~mode_setuid;
    if ((mode & mode_group_exec) != 0)
        mode &= ~mode_setgid;
    return mode;
}

Credentials squash(Credentials cred, bool root_squash)
{
    if (!root_squash)
        return cred;
    if (cred.uid == 0)
        cred.uid = squashed_id;
    if (cred.gid == 0)
        cred.gid = squashed_id;
    std::erase(cred.groups, 0U);
    return cred;
}

int apply_setattr(const Credentials &cred, const Attr &current, const AttrChange &change,
                  Timespec now, Attr &result) noexcept
{
    const std::uint32_t mask = change.mask;
    if ((mask & ~set_all) != 0)
        return -EINVAL;
    if (mask == 0) {
        result = current;
        return 0;
    }
    if (((mask & set_uid) != 0 && change.uid == invalid_id) ||
        ((mask & set_gid) != 0 && change.gid == invalid_id) ||
        ((mask & set_atime) != 0 && !valid_time(change.atime)) ||
        ((mask & set_mtime) != 0 && !valid_time(change.mtime)) ||
        ((mask & set_ctime) != 0 && !valid_time(change.ctime)))
        return -EINVAL;

    // The checks in setattr_prepare's order: chown, chgrp, chmod, times.
    if (const int rc = check_owner_change(cred, current, change); rc != 0)
        return rc;
    if ((mask & set_mode) != 0 && !owner_or_root(cred, current))
        return -EPERM;
    if (const int rc = check_times(cred, current, mask, change.writer); rc != 0)
        return rc;
    if ((mask & set_ctime) != 0 && !is_root(cred))
        return -EPERM;

    Attr next = current;
    if ((mask & set_uid) != 0)
        next.uid = change.uid;
    if ((mask & set_gid) != 0)
        next.gid = change.gid;
    if ((mask & set_mode) != 0) {
        next.mode = change.mode & mode_perm_mask;
        if (!is_root(cred) && !in_group(cred, next.gid))
            next.mode &= ~mode_setgid;
    } else if ((mask & (set_uid | set_gid)) != 0 && current.type != ObjectType::directory) {
        // ATTR_KILL_SUID / ATTR_KILL_SGID from chown_common, for root too.
        next.mode &= ~mode_setuid;
        if ((next.mode & mode_group_exec) != 0)
            next.mode &= ~mode_setgid;
    }
    if ((mask & set_atime) != 0)
        next.atime = change.atime;
    else if ((mask & set_atime_now) != 0)
        next.atime = now;
    if ((mask & set_mtime) != 0)
        next.mtime = change.mtime;
    else if ((mask & set_mtime_now) != 0)
        next.mtime = now;
    next.ctime = (mask & set_ctime) != 0 ? change.ctime : now;
    result = next;
    return 0;
}

int may_xattr(const Credentials &cred, const Attr &attr, std::string_view name, bool write) noexcept
{
    if (name.size() > max_xattr_name)
        return -ERANGE;
    const bool user = name.starts_with(xattr_user_prefix);
    const bool pvfs = name.starts_with(xattr_pvfs_prefix);
    if (!user && !pvfs)
        return -EOPNOTSUPP;
    // Both prefixes have the same length.
    if (name.size() == xattr_user_prefix.size())
        return -EINVAL;
    if (pvfs) {
        if (write && !owner_or_root(cred, attr))
            return -EPERM;
        return 0;
    }
    if (attr.type != ObjectType::regular && attr.type != ObjectType::directory)
        return write ? -EPERM : -ENODATA;
    if (write && attr.type == ObjectType::directory && (attr.mode & mode_sticky) != 0 &&
        !owner_or_root(cred, attr))
        return -EPERM;
    return may_access(cred, attr, write ? may_write : may_read);
}

} // namespace pvfs::perm
