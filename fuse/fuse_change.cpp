// The FUSE ops that change something: each becomes the upcall pvfs.ko's
// VFS op sends (kmod/namei.c, inode.c, file.c, xattr.c), with the same
// fields.  Those on pvfs.ko's list of changes take a reply slot first
// (start_change), so that the servers' reply cache knows them as it knows
// the kernel's.  The kernel has checked permissions already
// (default_permissions); the servers check again.
#include "fuse_ops.hpp"

#include <pvfs/gossip.hpp>

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

namespace pvfs::fuse {

namespace {

namespace gossip = pvfs::gossip;
using detail::message;
using detail::open_bits;

FuseChannel &self(fuse_req_t req)
{
    return *static_cast<FuseChannel *>(fuse_req_userdata(req));
}

void reply_err(fuse_req_t req, int err)
{
    static_cast<void>(fuse_reply_err(req, err));
}

// A name the channel can carry: ENAMETOOLONG as pvfs.ko says it.
bool name_fits(fuse_req_t req, std::string_view name)
{
    if (name.size() <= PVFSD_MAX_NAME)
        return true;
    reply_err(req, ENAMETOOLONG);
    return false;
}

// The kernel's new_encode_dev(), the form pvfs.ko sends.
std::uint64_t encode_dev(dev_t rdev)
{
    const std::uint64_t major = ::major(rdev);
    const std::uint64_t minor = ::minor(rdev);
    return (minor & 0xffU) | (major << 8U) | ((minor & ~0xffULL) << 12U);
}

pvfsd_time to_time(const timespec &t)
{
    pvfsd_time out{};
    out.sec = t.tv_sec;
    out.nsec = static_cast<std::uint32_t>(t.tv_nsec);
    return out;
}

} // namespace

void FuseChannel::Ops::create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                              fuse_file_info *fi)
{
    FuseChannel &ch = self(req);
    const std::string_view n(name);
    if (!name_fits(req, n))
        return;
    // open(O_CREAT) of a name the kernel found absent: the CREATE opens it
    // in the same request (pvfs.ko's atomic_open).  FUSE looked the name
    // up first, also for O_EXCL, where pvfs.ko does not.
    pvfsd_create_req r{};
    r.common = common_of(req);
    r.parent = parent;
    r.name_len = static_cast<std::uint32_t>(n.size());
    r.mode = mode & 07777U;
    r.exclusive = (fi->flags & O_EXCL) != 0 ? 1 : 0;
    r.open_mode = open_bits(fi->flags);
    auto p = ch.pending(req, PVFSD_OP_CREATE, parent);
    p->open_mode = r.open_mode;
    p->fi = *fi;
    p->common = r.common;
    auto bytes = message(p->op, p->tag, r, n);
    ch.start_change(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                             dev_t rdev)
{
    FuseChannel &ch = self(req);
    const std::string_view n(name);
    if (!name_fits(req, n))
        return;
    std::uint32_t type = 0;
    switch (mode & S_IFMT) {
    case S_IFREG: {
        // An exclusive CREATE that opens nothing, as pvfs.ko's mknod.
        pvfsd_create_req r{};
        r.common = common_of(req);
        r.parent = parent;
        r.name_len = static_cast<std::uint32_t>(n.size());
        r.mode = mode & 07777U;
        r.exclusive = 1;
        auto p = ch.pending(req, PVFSD_OP_CREATE, parent);
        auto bytes = message(p->op, p->tag, r, n);
        ch.start_change(std::move(p), std::move(bytes));
        return;
    }
    case S_IFIFO:
        type = PVFSD_TYPE_FIFO;
        break;
    case S_IFSOCK:
        type = PVFSD_TYPE_SOCKET;
        break;
    case S_IFCHR:
        type = PVFSD_TYPE_CHAR_DEVICE;
        break;
    case S_IFBLK:
        type = PVFSD_TYPE_BLOCK_DEVICE;
        break;
    default:
        reply_err(req, EINVAL);
        return;
    }
    // Device nodes too, as pvfs.ko (the VFS wants CAP_MKNOD for them; the
    // mount is nodev, as FUSE mounts are).
    pvfsd_mknod_req r{};
    r.common = common_of(req);
    r.parent = parent;
    r.rdev = encode_dev(rdev);
    r.name_len = static_cast<std::uint32_t>(n.size());
    r.mode = mode & 07777U;
    r.type = type;
    auto p = ch.pending(req, PVFSD_OP_MKNOD, parent);
    auto bytes = message(p->op, p->tag, r, n);
    ch.start_change(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    FuseChannel &ch = self(req);
    const std::string_view n(name);
    if (!name_fits(req, n))
        return;
    pvfsd_mknod_req r{};
    r.common = common_of(req);
    r.parent = parent;
    r.name_len = static_cast<std::uint32_t>(n.size());
    r.mode = mode & 07777U;
    r.type = PVFSD_TYPE_DIRECTORY;
    auto p = ch.pending(req, PVFSD_OP_MKDIR, parent);
    auto bytes = message(p->op, p->tag, r, n);
    ch.start_change(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    self(req).remove(req, parent, name, PVFSD_OP_UNLINK);
}

void FuseChannel::Ops::rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    self(req).remove(req, parent, name, PVFSD_OP_RMDIR);
}

void FuseChannel::remove(fuse_req_t req, fuse_ino_t parent, const char *name, std::uint16_t op)
{
    const std::string_view n(name);
    if (!name_fits(req, n))
        return;
    // An open file unlinked stays on the servers until its CLOSE: the
    // mount holds it since its OPEN.
    pvfsd_name_req r{};
    r.common = common_of(req);
    r.parent = parent;
    r.name_len = static_cast<std::uint32_t>(n.size());
    auto p = pending(req, op, parent);
    auto bytes = message(p->op, p->tag, r, n);
    start_change(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
                               const char *name)
{
    FuseChannel &ch = self(req);
    const std::string_view n(name);
    const std::string_view target(link);
    if (!name_fits(req, n))
        return;
    if (target.empty() || target.size() > PVFSD_MAX_SYMLINK) {
        reply_err(req, target.empty() ? ENOENT : ENAMETOOLONG);
        return;
    }
    pvfsd_symlink_req r{};
    r.common = common_of(req);
    r.parent = parent;
    r.name_len = static_cast<std::uint32_t>(n.size());
    r.target_len = static_cast<std::uint32_t>(target.size());
    auto p = ch.pending(req, PVFSD_OP_SYMLINK, parent);
    auto bytes = message(p->op, p->tag, r, std::string(n) + std::string(target));
    ch.start_change(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                              fuse_ino_t newparent, const char *newname, unsigned int flags)
{
    FuseChannel &ch = self(req);
    const std::string_view from(name);
    const std::string_view to(newname);
    // RENAME_EXCHANGE would need an atomic swap on the servers: EINVAL,
    // as pvfs.ko says (RENAME_WHITEOUT too).
    if ((flags & ~static_cast<unsigned>(RENAME_NOREPLACE)) != 0) {
        reply_err(req, EINVAL);
        return;
    }
    if (!name_fits(req, from) || !name_fits(req, to))
        return;
    pvfsd_rename_req r{};
    r.common = common_of(req);
    r.old_parent = parent;
    r.new_parent = newparent;
    r.old_name_len = static_cast<std::uint32_t>(from.size());
    r.new_name_len = static_cast<std::uint32_t>(to.size());
    r.flags = (flags & RENAME_NOREPLACE) != 0 ? PVFSD_RENAME_NOREPLACE : 0;
    auto p = ch.pending(req, PVFSD_OP_RENAME, parent);
    auto bytes = message(p->op, p->tag, r, std::string(from) + std::string(to));
    ch.start_change(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
                            const char *newname)
{
    FuseChannel &ch = self(req);
    const std::string_view n(newname);
    if (!name_fits(req, n))
        return;
    pvfsd_link_req r{};
    r.common = common_of(req);
    r.target = ino;
    r.new_parent = newparent;
    r.name_len = static_cast<std::uint32_t>(n.size());
    auto p = ch.pending(req, PVFSD_OP_LINK, newparent);
    auto bytes = message(p->op, p->tag, r, n);
    ch.start_change(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                               fuse_file_info *fi)
{
    FuseChannel &ch = self(req);
    const auto set = static_cast<unsigned>(to_set);
    pvfsd_setattr_req r{};
    r.common = common_of(req);
    r.handle = ino;
    if ((set & FUSE_SET_ATTR_MODE) != 0) {
        r.mask |= PVFSD_SET_MODE;
        r.mode = attr->st_mode & 07777U;
    }
    if ((set & FUSE_SET_ATTR_UID) != 0) {
        r.mask |= PVFSD_SET_UID;
        r.uid = attr->st_uid;
    }
    if ((set & FUSE_SET_ATTR_GID) != 0) {
        r.mask |= PVFSD_SET_GID;
        r.gid = attr->st_gid;
    }
    // The kernel's "now" (utimensat UTIME_NOW, truncate) is the servers'
    // clock, as pvfs.ko sends it.
    if ((set & FUSE_SET_ATTR_ATIME_NOW) != 0) {
        r.mask |= PVFSD_SET_ATIME_NOW;
    } else if ((set & FUSE_SET_ATTR_ATIME) != 0) {
        r.mask |= PVFSD_SET_ATIME;
        r.atime = to_time(attr->st_atim);
    }
    if ((set & FUSE_SET_ATTR_MTIME_NOW) != 0) {
        r.mask |= PVFSD_SET_MTIME_NOW;
    } else if ((set & FUSE_SET_ATTR_MTIME) != 0) {
        r.mask |= PVFSD_SET_MTIME;
        r.mtime = to_time(attr->st_mtim);
    }
    if ((set & FUSE_SET_ATTR_SIZE) != 0) {
        if (attr->st_size < 0) {
            reply_err(req, EINVAL);
            return;
        }
        r.mask |= PVFSD_SET_SIZE;
        r.size = static_cast<std::uint64_t>(attr->st_size);
    }
    if (r.mask == 0) {
        // Nothing the servers keep (ctime alone): the attributes as they are.
        getattr(req, ino, fi);
        return;
    }
    // Through a file open for writing (ftruncate): the open decides, as
    // on a local file system, and the servers check that it is held.
    if (fi != nullptr && (fi->fh & PVFSD_OPEN_WRITE) != 0)
        r.common.flags |= PVFSD_REQ_BY_FILE;
    const pvfsd_attr *was = ch.known(ino);
    if (r.mask == PVFSD_SET_MODE && was != nullptr && r.common.fsuid != was->uid &&
        (r.mode & ~was->mode) == 0 && r.mode != (was->mode & 07777U) &&
        ((r.mode ^ was->mode) & ~static_cast<unsigned>(S_ISUID | S_ISGID) & 07777U) == 0) {
        // The kernel clears setuid/setgid after another user's write (it
        // decided: only the owner may chmod, so no user's chmod gets
        // here).  The servers let only the owner change the mode, so this
        // one is asked in the owner's name, as pvfs.ko does.
        r.common.fsuid = was->uid;
        r.common.fsgid = was->gid;
    }
    auto p = ch.pending(req, PVFSD_OP_SETATTR, ino);
    auto bytes = message(p->op, p->tag, r);
    ch.start_change(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::write(fuse_req_t req, fuse_ino_t ino, const char *buf, std::size_t size,
                             off_t off, fuse_file_info *fi)
{
    FuseChannel &ch = self(req);
    if (off < 0) {
        reply_err(req, EINVAL);
        return;
    }
    if (size > ch.settings_.slot_size) {
        // max_write is a slot (init).
        gossip::error(gossip::Mask::dev, "a WRITE of {} bytes, more than a slot", size);
        reply_err(req, EIO);
        return;
    }
    if (size == 0) {
        static_cast<void>(fuse_reply_write(req, 0));
        return;
    }
    if (const int err = ch.write_error(ino); err != 0) {
        // An earlier write, answered already, failed: none after it goes
        // until fsync or close has reported it.
        reply_err(req, err);
        return;
    }
    ++ch.counts_.writes;
    ch.counts_.write_max = std::max<std::uint64_t>(ch.counts_.write_max, size);
    const auto data = std::as_bytes(std::span(buf, size));
    auto p = ch.pending(req, PVFSD_OP_WRITE, ino);
    p->offset = static_cast<std::uint64_t>(off);
    p->size = size;
    p->common = common_of(req);
    // O_SYNC and O_DSYNC writes are fsync'd by the kernel after each
    // write (nothing to gain); O_DIRECT asks for no caching.
    p->may_go_behind = ch.settings_.write_behind > 0 && (fi->flags & (O_DIRECT | O_DSYNC)) == 0;
    // (A page a shared mapping dirtied goes back where it belongs.)
    if ((fi->flags & O_APPEND) != 0 && fi->writepage == 0) {
        // pvfs.ko appends at the end the servers know, asked first.
        p->data.assign(data.begin(), data.end());
        p->op = PVFSD_OP_GETATTR;
        p->then = Then::append;
        pvfsd_handle_req r{};
        r.common = p->common;
        r.handle = ino;
        auto bytes = message(p->op, p->tag, r);
        ch.start(std::move(p), std::move(bytes));
        return;
    }
    ch.start_data(std::move(p), data);
}

void FuseChannel::Ops::flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi)
{
    // Every close(2): as pvfs.ko's flush writes dirty pages back, this
    // waits for the file's writes behind and reports their error to a
    // file opened for writing (a reader's close must not take it from
    // the writer).
    FuseChannel &ch = self(req);
    auto p = ch.pending(req, flush_op, ino);
    p->open_mode = fi != nullptr ? static_cast<std::uint32_t>(fi->fh) : 0;
    std::vector<std::byte> none;
    if (ch.park_behind_writes(p, Via::flush, none))
        return;
    reply_err(req, ch.take_write_error(ino, p->open_mode));
}

void FuseChannel::Ops::fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info *fi)
{
    FuseChannel &ch = self(req);
    const auto mode = fi != nullptr ? static_cast<std::uint32_t>(fi->fh) : 0U;
    if (!ch.writes_in_flight(ino)) {
        if (const int err = ch.take_write_error(ino, mode); err != 0) {
            reply_err(req, err);
            return;
        }
    }
    pvfsd_fsync_req r{};
    r.common = common_of(req);
    r.handle = ino;
    r.datasync = datasync != 0 ? 1 : 0;
    auto p = ch.pending(req, PVFSD_OP_FSYNC, ino);
    p->open_mode = mode; // for the error, if it waits for writes behind
    auto bytes = message(p->op, p->tag, r);
    ch.start_change(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::fsyncdir(fuse_req_t req, fuse_ino_t /*ino*/, int /*datasync*/,
                                fuse_file_info * /*fi*/)
{
    // pvfs.ko's directories fsync as noop_fsync: the servers made each
    // change durable before they answered it.
    reply_err(req, 0);
}

void FuseChannel::Ops::setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                                std::size_t size, int flags)
{
    FuseChannel &ch = self(req);
    const std::string_view n(name);
    if (n.empty() || n.size() > PVFSD_MAX_XATTR_NAME) {
        reply_err(req, ERANGE);
        return;
    }
    if (!detail::xattr_name_served(n)) {
        reply_err(req, EOPNOTSUPP);
        return;
    }
    if (size > PVFSD_MAX_XATTR_VALUE) {
        reply_err(req, E2BIG);
        return;
    }
    pvfsd_xattr_req r{};
    r.common = common_of(req);
    r.handle = ino;
    r.name_len = static_cast<std::uint32_t>(n.size());
    r.value_len = static_cast<std::uint32_t>(size);
    if ((flags & XATTR_CREATE) != 0)
        r.flags |= PVFSD_XATTR_CREATE;
    if ((flags & XATTR_REPLACE) != 0)
        r.flags |= PVFSD_XATTR_REPLACE;
    std::string tail(n);
    tail.append(value, size);
    auto p = ch.pending(req, PVFSD_OP_XATTR_SET, ino);
    auto bytes = message(p->op, p->tag, r, tail);
    ch.start_change(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    FuseChannel &ch = self(req);
    const std::string_view n(name);
    if (n.empty() || n.size() > PVFSD_MAX_XATTR_NAME) {
        reply_err(req, ERANGE);
        return;
    }
    if (!detail::xattr_name_served(n)) {
        reply_err(req, EOPNOTSUPP);
        return;
    }
    pvfsd_xattr_req r{};
    r.common = common_of(req);
    r.handle = ino;
    r.name_len = static_cast<std::uint32_t>(n.size());
    auto p = ch.pending(req, PVFSD_OP_XATTR_REMOVE, ino);
    auto bytes = message(p->op, p->tag, r, n);
    ch.start_change(std::move(p), std::move(bytes));
}

} // namespace pvfs::fuse
