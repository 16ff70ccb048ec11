// Downcalls turned into FUSE answers, and what a request does next when
// it needs a second upcall.
#include "fuse_channel.hpp"
#include "fuse_ops.hpp"

#include <pvfs/gossip.hpp>
#include <pvfs/types.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

namespace pvfs::fuse {

namespace {

namespace gossip = pvfs::gossip;
using detail::body_of;
using detail::message;
using detail::replied;
using detail::to_stat;

double seconds(std::chrono::milliseconds ms)
{
    return std::chrono::duration<double>(ms).count();
}

// Whether two answers describe the same contents: another client's
// write or truncation changes the size or the times.
bool same_data(const pvfsd_attr &a, const pvfsd_attr &b)
{
    return a.size == b.size && a.mtime.sec == b.mtime.sec && a.mtime.nsec == b.mtime.nsec &&
           a.ctime.sec == b.ctime.sec && a.ctime.nsec == b.ctime.nsec;
}

} // namespace

bool FuseChannel::may_open(const pvfsd_req_common &c, const pvfsd_attr &a, std::uint32_t mode)
{
    // generic_permission's order: root passes (CAP_DAC_OVERRIDE), else
    // the owner's bits, a group's, or the others'.
    if (c.fsuid == 0)
        return true;
    std::uint32_t bits = a.mode;
    if (c.fsuid == a.uid) {
        bits >>= 6U;
    } else {
        const std::span groups(c.groups, std::min<std::uint32_t>(c.ngroups, PVFSD_MAX_GROUPS));
        if (c.fsgid == a.gid || std::ranges::find(groups, a.gid) != groups.end())
            bits >>= 3U;
    }
    const std::uint32_t want =
        ((mode & PVFSD_OPEN_READ) != 0 ? 4U : 0U) | ((mode & PVFSD_OPEN_WRITE) != 0 ? 2U : 0U);
    return (bits & want) == want;
}

namespace detail {

mode_t type_bits(std::uint32_t type)
{
    switch (type) {
    case PVFSD_TYPE_REGULAR:
        return S_IFREG;
    case PVFSD_TYPE_DIRECTORY:
        return S_IFDIR;
    case PVFSD_TYPE_SYMLINK:
        return S_IFLNK;
    case PVFSD_TYPE_FIFO:
        return S_IFIFO;
    case PVFSD_TYPE_SOCKET:
        return S_IFSOCK;
    case PVFSD_TYPE_CHAR_DEVICE:
        return S_IFCHR;
    case PVFSD_TYPE_BLOCK_DEVICE:
        return S_IFBLK;
    default:
        return 0;
    }
}

bool to_stat(const pvfsd_attr &a, struct stat &st)
{
    const mode_t type = type_bits(a.type);
    if (type == 0 || a.handle == no_handle)
        return false;
    st = {};
    st.st_ino = a.handle;
    st.st_mode = type | (a.mode & 07777U);
    st.st_nlink = a.nlink;
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_size = static_cast<off_t>(std::min<std::uint64_t>(
        a.size, static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())));
    st.st_blksize = a.blksize;
    st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
    // new_encode_dev()'s form, as pvfs.ko stores it.
    const auto major = static_cast<unsigned>((a.rdev & 0xfff00U) >> 8U);
    const auto minor = static_cast<unsigned>((a.rdev & 0xffU) | ((a.rdev >> 12U) & 0xfff00U));
    st.st_rdev = makedev(major, minor);
    st.st_atim = {a.atime.sec, a.atime.nsec};
    st.st_mtim = {a.mtime.sec, a.mtime.nsec};
    st.st_ctim = {a.ctime.sec, a.ctime.nsec};
    return true;
}

void replied(int rc, const char *what)
{
    if (rc != 0)
        gossip::debug(gossip::Mask::dev, "{}: the kernel took no answer: {}", what,
                      strerrordesc_np(-rc));
}

bool xattr_name_served(std::string_view name)
{
    return name.starts_with("user.") || name.starts_with("pvfs.");
}

std::uint32_t open_bits(int flags)
{
    switch (flags & O_ACCMODE) {
    case O_RDONLY:
        return PVFSD_OPEN_READ;
    case O_WRONLY:
        return PVFSD_OPEN_WRITE;
    default:
        return PVFSD_OPEN_READ | PVFSD_OPEN_WRITE;
    }
}

} // namespace detail

void FuseChannel::finish(std::unique_ptr<Pending> &pp, const pvfsd_msg_hdr &hdr,
                         std::span<const std::byte> body)
{
    Pending &p = *pp;
    if (p.req != nullptr)
        tag_of_.erase(p.req);
    int status = hdr.status;
    if (hdr.op != p.op) {
        gossip::error(gossip::Mask::dev, "the answer to {} tag {} says it is {}",
                      pvfsd::op_name(p.op), p.tag, pvfsd::op_name(hdr.op));
        status = -EIO;
    }
    if (p.op == PVFSD_OP_ATTACH) {
        attach_status_ = status;
        return;
    }
    if (p.then == Then::listed) {
        listed(p, status, body);
        return;
    }
    if (p.behind) {
        wrote_behind(p, status, body);
        return;
    }
    if (p.req == nullptr) {
        if (status != 0)
            gossip::debug(gossip::Mask::pvfsd, "{} tag {}: {}", pvfsd::op_name(p.op), p.tag,
                          client::error_text(status));
        return;
    }
    if (status != 0) {
        int err = -status;
        if (err == ECANCELED)
            err = EINTR; // the kernel interrupted it
        if (err <= 0 || err > 4095)
            err = EIO;
        // An inode whose object is gone, as pvfs.ko says it: the VFS then
        // looks the name up again (LOOKUP_REVAL) instead of failing.
        if (err == ENOENT && (p.op == PVFSD_OP_OPEN || p.op == PVFSD_OP_GETATTR))
            err = ESTALE;
        // An open whose truncation failed is no open.
        if (p.then == Then::truncate || p.then == Then::truncate_open)
            release(p.ino);
        replied(fuse_reply_err(p.req, err), pvfsd::op_name(p.op));
        return;
    }
    switch (p.op) {
    case PVFSD_OP_LOOKUP:
    case PVFSD_OP_MKDIR:
    case PVFSD_OP_MKNOD:
    case PVFSD_OP_SYMLINK:
    case PVFSD_OP_LINK:
        reply_entry(p, body);
        break;
    case PVFSD_OP_CREATE:
        reply_create(pp, body);
        break;
    case PVFSD_OP_GETATTR:
        if (p.then == Then::append)
            reply_append(pp, body);
        else
            reply_attr(p, body);
        break;
    case PVFSD_OP_SETATTR:
        if (p.then == Then::truncate) {
            const auto r = body_of<pvfsd_attr_resp>(body);
            static_cast<void>(answer_create(p, r ? r->attr : pvfsd_attr{}));
        } else if (p.then == Then::truncate_open) {
            const int rc = fuse_reply_open(p.req, &p.fi);
            replied(rc, "OPEN");
            if (rc != 0)
                release(p.ino);
        } else {
            reply_attr(p, body);
        }
        break;
    case PVFSD_OP_OPEN:
        reply_open(pp, body);
        break;
    case PVFSD_OP_READ:
        reply_read(p, body);
        break;
    case PVFSD_OP_WRITE:
        reply_write(p, body);
        break;
    case PVFSD_OP_READDIR:
        if (p.then == Then::listing)
            start_listing(p, body);
        else
            reply_readdir(p, body);
        break;
    case PVFSD_OP_STATFS:
        reply_statfs(p, body);
        break;
    case PVFSD_OP_READLINK:
        reply_readlink(p, body);
        break;
    case PVFSD_OP_XATTR_GET:
    case PVFSD_OP_XATTR_LIST:
        reply_xattr(p, body);
        break;
    case PVFSD_OP_UNLINK:
    case PVFSD_OP_RMDIR:
    case PVFSD_OP_RENAME:
    case PVFSD_OP_XATTR_SET:
    case PVFSD_OP_XATTR_REMOVE:
    case PVFSD_OP_FSYNC:
        replied(fuse_reply_err(p.req, 0), pvfsd::op_name(p.op));
        break;
    default:
        gossip::error(gossip::Mask::dev, "no FUSE answer for {}", pvfsd::op_name(p.op));
        replied(fuse_reply_err(p.req, EIO), "an op without an answer");
    }
}

void FuseChannel::reply_entry(Pending &p, std::span<const std::byte> body)
{
    // CREATE's answer starts with the attributes too (mknod of a file).
    const auto r = body_of<pvfsd_attr_resp>(body);
    fuse_entry_param e{};
    // (A LOOKUP or LINK of a file whose writes are still going behind.)
    if (!r || !to_stat(with_behind(r->attr), e.attr)) {
        gossip::error(gossip::Mask::dev, "{} tag {}: malformed attributes", pvfsd::op_name(p.op),
                      p.tag);
        replied(fuse_reply_err(p.req, EIO), pvfsd::op_name(p.op));
        return;
    }
    e.ino = r->attr.handle;
    e.generation = 0;
    e.attr_timeout = attr_timeout(r->attr.type);
    e.entry_timeout = seconds(settings_.entry_timeout);
    const int rc = fuse_reply_entry(p.req, &e);
    replied(rc, pvfsd::op_name(p.op));
    if (rc == 0)
        learned(r->attr, true);
}

void FuseChannel::reply_create(std::unique_ptr<Pending> &pp, std::span<const std::byte> body)
{
    Pending &p = *pp;
    const auto r = body_of<pvfsd_create_resp>(body);
    struct stat st {};
    if (!r || !to_stat(r->attr, st) || r->attr.type != PVFSD_TYPE_REGULAR) {
        gossip::error(gossip::Mask::dev, "CREATE tag {}: malformed attributes", p.tag);
        if (r && r->opened != 0)
            closes_.push_back({r->attr.handle, p.tag});
        replied(fuse_reply_err(p.req, EIO), "CREATE");
        return;
    }
    if (p.open_mode == 0) {
        // mknod of a regular file: created, not opened.
        reply_entry(p, body);
        return;
    }
    p.ino = r->attr.handle;
    if (r->created == 0) {
        // Another client made the name after the kernel found it absent
        // (not O_EXCL): the servers opened that file without asking.
        // pvfs.ko then opens it as any file, so the kernel's checks are
        // made here, as generic_permission would on its attributes.
        gossip::debug(gossip::Mask::dev, "CREATE tag {}: {:#x} was there already", p.tag, p.ino);
        if (!may_open(p.common, r->attr, p.open_mode)) {
            if (r->opened != 0)
                closes_.push_back({p.ino, p.tag});
            replied(fuse_reply_err(p.req, EACCES), "CREATE");
            return;
        }
    }
    if (r->opened == 0) {
        // The servers hold no open files (no session): it opens as any
        // file, with an OPEN (pvfs.ko's pvfs_open_created).
        p.attr = r->attr;
        p.then = Then::open_created;
        send_open(std::move(pp));
        return;
    }
    count_open(p.ino, p.open_mode, p.tag);
    if (r->created == 0 && (p.fi.flags & O_TRUNC) != 0) {
        // ... and truncates it as the VFS's open would.
        p.then = Then::truncate;
        truncate_opened(std::move(pp));
        return;
    }
    static_cast<void>(answer_create(p, r->attr));
}

bool FuseChannel::answer_create(Pending &p, const pvfsd_attr &a)
{
    fuse_entry_param e{};
    // (An O_TRUNC create of a file another open writes behind.)
    if (!to_stat(with_behind(a), e.attr) || a.handle != p.ino) {
        release(p.ino);
        replied(fuse_reply_err(p.req, EIO), "CREATE");
        return false;
    }
    e.ino = a.handle;
    e.attr_timeout = attr_timeout(a.type);
    e.entry_timeout = seconds(settings_.entry_timeout);
    // The caller's own modes, not all the mount holds the file for (a
    // reader's close must not take a writer's error: fuse_behind.cpp).
    p.fi.fh = detail::open_bits(p.fi.flags);
    p.fi.keep_cache = 0;
    const int rc = fuse_reply_create(p.req, &e, &p.fi);
    replied(rc, "CREATE");
    if (rc != 0) {
        // Held, but nobody's: no release will come.
        release(p.ino);
        return false;
    }
    learned(a, true);
    return true;
}

void FuseChannel::send_open(std::unique_ptr<Pending> p)
{
    p->tag = next_tag();
    p->op = PVFSD_OP_OPEN;
    p->slot = ~0U;
    pvfsd_open_req r{};
    r.common = common_of(p->req);
    r.handle = p->ino;
    // The servers hold it for every mode the mount has it open for.
    if (const auto held = opened_.find(p->ino); held != opened_.end())
        p->open_mode |= held->second.mode;
    r.mode = p->open_mode;
    r.gen = p->tag;
    const std::uint64_t tag = p->tag;
    start(std::move(p), message(PVFSD_OP_OPEN, tag, r));
}

void FuseChannel::reply_attr(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_attr_resp>(body);
    struct stat st {};
    // (Writes may have gone behind since it started.)
    if (!r || !to_stat(with_behind(r->attr), st) || r->attr.handle != p.ino) {
        gossip::error(gossip::Mask::dev, "{} tag {}: malformed attributes", pvfsd::op_name(p.op),
                      p.tag);
        replied(fuse_reply_err(p.req, EIO), pvfsd::op_name(p.op));
        return;
    }
    const int rc = fuse_reply_attr(p.req, &st, attr_timeout(r->attr.type));
    replied(rc, pvfsd::op_name(p.op));
    if (rc == 0)
        learned(r->attr, false);
}

void FuseChannel::truncate_opened(std::unique_ptr<Pending> p)
{
    pvfsd_setattr_req t{};
    t.common = p->common;
    // Through a file open for writing, the servers believe the open (an
    // O_RDONLY|O_TRUNC open is judged by the mode, as with pvfs.ko).
    if ((p->open_mode & PVFSD_OPEN_WRITE) != 0)
        t.common.flags |= PVFSD_REQ_BY_FILE;
    t.handle = p->ino;
    t.mask = PVFSD_SET_SIZE | PVFSD_SET_MTIME_NOW;
    gossip::debug(gossip::Mask::dev, "O_TRUNC of {:#x}{}", p->ino,
                  (t.common.flags & PVFSD_REQ_BY_FILE) != 0 ? " through the open" : "");
    p->op = PVFSD_OP_SETATTR;
    p->slot = ~0U;
    auto bytes = message(p->op, p->tag, t);
    start_change(std::move(p), std::move(bytes));
}

void FuseChannel::reply_open(std::unique_ptr<Pending> &pp, std::span<const std::byte> body)
{
    Pending &p = *pp;
    const auto r = body_of<pvfsd_attr_resp>(body);
    struct stat st {};
    if (!r || !to_stat(r->attr, st) || r->attr.handle != p.ino) {
        // Held all the same: the CLOSE goes at once.
        gossip::error(gossip::Mask::dev, "OPEN tag {}: malformed attributes", p.tag);
        closes_.push_back({p.ino, p.tag});
        replied(fuse_reply_err(p.req, EIO), "OPEN");
        return;
    }
    count_open(p.ino, p.open_mode, p.tag);
    // Close-to-open: the kernel's attributes go when another client
    // changed the file since, so that its next read or stat asks again
    // (pvfs.ko takes OPEN's attributes; FUSE's open answer carries none).
    // Attributes only (offset -1): no page is waited for.
    const pvfsd_attr *was = known(p.ino);
    if (was == nullptr || !same_data(*was, r->attr)) {
        const int rc = fuse_lowlevel_notify_inval_inode(session_, p.ino, -1, 0);
        if (rc != 0 && rc != -ENOENT)
            gossip::debug(gossip::Mask::dev, "OPEN tag {}: attributes not dropped: {}", p.tag,
                          strerrordesc_np(-rc));
    }
    learned(r->attr, false);
    // The caller's own modes, not all the mount holds the file for (a
    // reader's close must not take a writer's error: fuse_behind.cpp).
    p.fi.fh = detail::open_bits(p.fi.flags);
    p.fi.keep_cache = 0; // close-to-open: another client may have written
    if (p.then == Then::open_created) {
        static_cast<void>(answer_create(p, r->attr));
        return;
    }
    if ((p.fi.flags & O_TRUNC) != 0) {
        p.then = Then::truncate_open;
        truncate_opened(std::move(pp));
        return;
    }
    const int rc = fuse_reply_open(p.req, &p.fi);
    replied(rc, "OPEN");
    // An open whose caller went meanwhile gets no release: its hold ends here.
    if (rc != 0)
        release(p.ino);
}

void FuseChannel::reply_read(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_io_resp>(body);
    if (!r || r->done > p.size || p.slot >= settings_.slots) {
        gossip::error(gossip::Mask::dev, "READ tag {}: a malformed answer", p.tag);
        replied(fuse_reply_err(p.req, EIO), "READ");
        return;
    }
    const auto data = std::span(slots_).subspan(p.slot * settings_.slot_size, r->done);
    replied(fuse_reply_buf(p.req, reinterpret_cast<const char *>(data.data()), data.size()),
            "READ");
}

void FuseChannel::reply_write(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_io_resp>(body);
    // No progress without an error would have the kernel ask again forever.
    if (!r || r->done > p.size || (r->done == 0 && p.size != 0)) {
        gossip::error(gossip::Mask::dev, "WRITE tag {}: a malformed answer", p.tag);
        replied(fuse_reply_err(p.req, EIO), "WRITE");
        return;
    }
    replied(fuse_reply_write(p.req, r->done), "WRITE");
}

void FuseChannel::reply_append(std::unique_ptr<Pending> &pp, std::span<const std::byte> body)
{
    Pending &p = *pp;
    const auto r = body_of<pvfsd_attr_resp>(body);
    if (!r || r->attr.handle != p.ino) {
        replied(fuse_reply_err(p.req, EIO), "an O_APPEND WRITE's GETATTR");
        return;
    }
    // As pvfs.ko appends: at the end the servers know (another client may
    // have written past the kernel's size), asked just before.
    p.offset = std::max<std::uint64_t>(p.offset, r->attr.size);
    p.op = PVFSD_OP_WRITE;
    p.tag = next_tag();
    p.then = Then::reply;
    start_data(std::move(pp));
}

void FuseChannel::reply_statfs(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_statfs_resp>(body);
    if (!r) {
        replied(fuse_reply_err(p.req, EIO), "STATFS");
        return;
    }
    struct statvfs sv {};
    sv.f_bsize = r->bsize;
    sv.f_frsize = r->bsize;
    sv.f_blocks = r->blocks;
    sv.f_bfree = r->bfree;
    sv.f_bavail = r->bavail;
    sv.f_files = r->files;
    sv.f_ffree = r->ffree;
    sv.f_favail = r->ffree;
    sv.f_namemax = r->namelen;
    replied(fuse_reply_statfs(p.req, &sv), "STATFS");
}

void FuseChannel::reply_readlink(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_readlink_resp>(body);
    if (!r || r->target_len == 0 || r->target_len > PVFSD_MAX_SYMLINK ||
        body.size() - sizeof(*r) < r->target_len) {
        replied(fuse_reply_err(p.req, EIO), "READLINK");
        return;
    }
    const std::string target(reinterpret_cast<const char *>(body.data() + sizeof(*r)),
                             r->target_len);
    replied(fuse_reply_readlink(p.req, target.c_str()), "READLINK");
}

void FuseChannel::reply_xattr(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_xattr_resp>(body);
    if (!r || (p.size != 0 && (r->size > p.size || body.size() - sizeof(*r) < r->size))) {
        replied(fuse_reply_err(p.req, EIO), pvfsd::op_name(p.op));
        return;
    }
    if (p.size == 0) {
        replied(fuse_reply_xattr(p.req, r->size), pvfsd::op_name(p.op));
        return;
    }
    replied(
        fuse_reply_buf(p.req, reinterpret_cast<const char *>(body.data() + sizeof(*r)), r->size),
        pvfsd::op_name(p.op));
}

} // namespace pvfs::fuse
