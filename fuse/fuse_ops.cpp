#include "fuse_ops.hpp"

#include <pvfs/gossip.hpp>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

namespace pvfs::fuse {

namespace {

namespace gossip = pvfs::gossip;
using detail::message;
using detail::open_bits;

// The most a listing asks for at once: its answer is one message.
constexpr std::size_t max_readdir_bytes = 65536;

FuseChannel &self(fuse_req_t req)
{
    return *static_cast<FuseChannel *>(fuse_req_userdata(req));
}

} // namespace

const fuse_lowlevel_ops &FuseChannel::Ops::table()
{
    static const fuse_lowlevel_ops ops = [] {
        fuse_lowlevel_ops o{};
        o.init = &init;
        o.lookup = &lookup;
        o.forget = &forget;
        o.forget_multi = &forget_multi;
        o.getattr = &getattr;
        o.readlink = &readlink;
        o.open = &open;
        o.read = &read;
        o.release = &release;
        o.readdir = &readdir;
        o.readdirplus = &readdirplus;
        o.statfs = &statfs;
        o.getxattr = &getxattr;
        o.listxattr = &listxattr;
        o.setattr = &setattr;
        o.mknod = &mknod;
        o.mkdir = &mkdir;
        o.unlink = &unlink;
        o.rmdir = &rmdir;
        o.symlink = &symlink;
        o.rename = &rename;
        o.link = &link;
        o.write = &write;
        o.create = &create;
        o.setxattr = &setxattr;
        o.removexattr = &removexattr;
        o.flush = &flush;
        o.fsync = &fsync;
        o.fsyncdir = &fsyncdir;
        return o;
    }();
    return ops;
}

void FuseChannel::Ops::interrupt_cb(fuse_req_t req, void * /*data*/)
{
    self(req).cancel(req);
}

void FuseChannel::Ops::init(void *userdata, fuse_conn_info *conn)
{
    FuseChannel &ch = *static_cast<FuseChannel *>(userdata);
    ch.initialized_ = true;
    const auto slot = static_cast<unsigned>(ch.settings_.slot_size);
    // A READ or WRITE fills at most one slot (libfuse wants the mount's
    // max_read here too).  libfuse 3.14 offers max_write up to its
    // receive buffer, 256 pages (1 MiB, the smallest slot), and asks the
    // kernel for as many pages per request (FUSE_MAX_PAGES, from
    // max_write): a 1 MiB write(2) arrives as one WRITE.
    conn->max_read = slot;
    conn->max_write = std::min(conn->max_write, slot);
    // Requests arrive as memory and answers leave from the slots, where
    // the Handler's data is (the servers' replies land there): splicing
    // would only add a pipe between the same copies (measured: bench/fs's
    // FUSE phase, docs/plan/fuse.md).  The kernel owns no size or mtime:
    // no writeback cache (writes go through to the servers as they come,
    // as pvfs.ko's writeback of a page does).  A write by another user
    // clears setuid/setgid with the kernel's SETATTR (not left to the
    // servers), as the VFS does for pvfs.ko.
    conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
                    FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_HANDLE_KILLPRIV);
    // A listing carries each entry's attributes (READDIRPLUS): `ls -l`
    // costs a READDIR and one GETATTR per entry, all of a page at once,
    // instead of a LOOKUP per name one after another.  Always, not
    // READDIRPLUS_AUTO: that answers the first page so, and later pages
    // only when the directory saw lookups meanwhile, but `ls -l` reads
    // the whole directory before its first stat.
    conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
    if ((conn->capable & FUSE_CAP_READDIRPLUS) != 0 && ch.settings_.readdirplus)
        conn->want |= FUSE_CAP_READDIRPLUS;
    // Lookups and listings of one directory at once (the kernel then
    // takes the directory's lock shared, as the VFS does for pvfs.ko's
    // lookup and iterate_shared).  Safe: every request runs on the loop's
    // one thread, and none keeps state of the directory between its
    // upcall and its answer (a listing's position is the cookie in its
    // offset; an entry counts as looked up when its answer is given; the
    // servers order changes).
    if ((conn->capable & FUSE_CAP_PARALLEL_DIROPS) != 0)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    // O_TRUNC comes with the open, which truncates through the file once
    // it is open, as pvfs.ko's handle_truncate (the kernel's own SETATTR
    // after an open names no file: the servers would judge it by the mode
    // alone, and refuse a squashed root what pvfs.ko's open may do).
    if ((conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) != 0)
        conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    // A read asks for the attributes when they are stale (dropped at an
    // open that found the file changed), and drops cached pages when the
    // size or mtime moved: close-to-open.
    if ((conn->capable & FUSE_CAP_AUTO_INVAL_DATA) != 0)
        conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
    conn->time_gran = 1;
    gossip::info(gossip::Mask::pvfsd,
                 "FUSE protocol {}.{}, max read {} bytes, max write {}, readahead {}{}{}",
                 conn->proto_major, conn->proto_minor, conn->max_read, conn->max_write,
                 conn->max_readahead,
                 (conn->want & FUSE_CAP_READDIRPLUS) != 0 ? ", readdirplus" : "",
                 (conn->want & FUSE_CAP_PARALLEL_DIROPS) != 0 ? ", parallel dirops" : "");
}

void FuseChannel::Ops::lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    FuseChannel &ch = self(req);
    const std::string_view n(name);
    if (n.size() > PVFSD_MAX_NAME) {
        static_cast<void>(fuse_reply_err(req, ENAMETOOLONG));
        return;
    }
    pvfsd_name_req r{};
    r.common = common_of(req);
    r.parent = parent;
    r.name_len = static_cast<std::uint32_t>(n.size());
    ++ch.counts_.lookups;
    auto p = ch.pending(req, PVFSD_OP_LOOKUP, parent);
    auto bytes = message(p->op, p->tag, r, n);
    ch.start(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::forget(fuse_req_t req, fuse_ino_t ino, std::uint64_t nlookup)
{
    // A lookup holds nothing on the servers: only what pvfs-fuse knows of
    // the inode goes.
    self(req).forget(ino, nlookup);
    fuse_reply_none(req);
}

void FuseChannel::Ops::forget_multi(fuse_req_t req, std::size_t count, fuse_forget_data *forgets)
{
    FuseChannel &ch = self(req);
    for (const fuse_forget_data &f : std::span(forgets, count))
        ch.forget(f.ino, f.nlookup);
    fuse_reply_none(req);
}

void FuseChannel::Ops::getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info * /*fi*/)
{
    FuseChannel &ch = self(req);
    pvfsd_handle_req r{};
    r.common = common_of(req);
    r.handle = ino;
    auto p = ch.pending(req, PVFSD_OP_GETATTR, ino);
    auto bytes = message(p->op, p->tag, r);
    ch.start(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::readlink(fuse_req_t req, fuse_ino_t ino)
{
    FuseChannel &ch = self(req);
    pvfsd_handle_req r{};
    r.common = common_of(req);
    r.handle = ino;
    auto p = ch.pending(req, PVFSD_OP_READLINK, ino);
    auto bytes = message(p->op, p->tag, r);
    ch.start(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::open(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi)
{
    FuseChannel &ch = self(req);
    const std::uint32_t mode = open_bits(fi->flags);
    // Later requests of this open (SETATTR of ftruncate) say how it was
    // opened.
    fi->fh = mode;
    fi->keep_cache = 0; // close-to-open: another client may have written
    const auto held = ch.opened_.find(ino);
    if (held != ch.opened_.end() && (mode & ~held->second.mode) == 0) {
        // Held for these modes already: the kernel's later opens need no
        // OPEN (pvfs.ko sends one only at an inode's first open, or for
        // more modes).  Close-to-open as there: the kernel asks for the
        // attributes again before it uses them.
        ++held->second.count;
        const int rc = fuse_lowlevel_notify_inval_inode(ch.session_, ino, -1, 0);
        if (rc != 0 && rc != -ENOENT)
            gossip::debug(gossip::Mask::dev, "open of {:#x}: attributes not dropped: {}", ino,
                          strerrordesc_np(-rc));
        if ((fi->flags & O_TRUNC) != 0) {
            auto p = ch.pending(req, PVFSD_OP_SETATTR, ino);
            p->open_mode = mode;
            p->fi = *fi;
            p->common = common_of(req);
            p->then = Then::truncate_open;
            ch.truncate_opened(std::move(p));
            return;
        }
        if (fuse_reply_open(req, fi) != 0)
            ch.release(ino);
        return;
    }
    auto p = ch.pending(req, PVFSD_OP_OPEN, ino);
    p->open_mode = mode;
    p->fi = *fi;
    p->common = common_of(req);
    ch.send_open(std::move(p));
}

void FuseChannel::Ops::read(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                            fuse_file_info * /*fi*/)
{
    FuseChannel &ch = self(req);
    if (off < 0) {
        static_cast<void>(fuse_reply_err(req, EINVAL));
        return;
    }
    if (size > ch.settings_.slot_size) {
        // The kernel's reads are at most 1 MiB, the smallest slot size.
        gossip::error(gossip::Mask::dev, "a READ of {} bytes, more than a slot", size);
        static_cast<void>(fuse_reply_err(req, EIO));
        return;
    }
    if (size == 0) {
        static_cast<void>(fuse_reply_buf(req, nullptr, 0));
        return;
    }
    ++ch.counts_.reads;
    ch.counts_.read_max = std::max<std::uint64_t>(ch.counts_.read_max, size);
    auto p = ch.pending(req, PVFSD_OP_READ, ino);
    p->offset = static_cast<std::uint64_t>(off);
    p->size = size;
    p->common = common_of(req);
    ch.start_data(std::move(p));
}

void FuseChannel::Ops::release(fuse_req_t req, fuse_ino_t ino, fuse_file_info * /*fi*/)
{
    // The kernel's last close of a file description; the CLOSE of the
    // inode's last goes in the batch receive() sends.
    self(req).release(ino);
    static_cast<void>(fuse_reply_err(req, 0));
}

namespace {

// The dots of a listing, answered here: ".." names this directory's own
// node (FUSE does not look at it; the kernel's dcache knows the parent).
// With attributes (READDIRPLUS), node id 0: the kernel takes no lookup of
// them.
void reply_dots(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, bool plus)
{
    std::array<char, 512> buf{};
    const std::size_t room = std::min(size, buf.size());
    std::size_t used = 0;
    fuse_entry_param e{};
    e.attr.st_ino = ino;
    e.attr.st_mode = S_IFDIR;
    for (off_t i = off; i < 2; ++i) {
        const char *name = i == 0 ? "." : "..";
        char *at = buf.data() + used;
        const std::size_t need =
            plus ? fuse_add_direntry_plus(req, at, room - used, name, &e, i + 1)
                 : fuse_add_direntry(req, at, room - used, name, &e.attr, i + 1);
        if (need > room - used)
            break;
        used += need;
    }
    static_cast<void>(fuse_reply_buf(req, buf.data(), used));
}

} // namespace

void FuseChannel::Ops::readdir(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                               fuse_file_info * /*fi*/)
{
    FuseChannel &ch = self(req);
    if (off < 0) {
        static_cast<void>(fuse_reply_err(req, EINVAL));
        return;
    }
    ++ch.counts_.readdirs;
    if (off < 2) {
        reply_dots(req, ino, size, off, false);
        return;
    }
    pvfsd_readdir_req r{};
    r.common = common_of(req);
    r.handle = ino;
    r.cookie = static_cast<std::uint64_t>(off) - 2;
    // FUSE's dirents take as much room as the channel's: what fits one
    // fits the other.
    r.max_bytes = static_cast<std::uint32_t>(std::min(size, max_readdir_bytes));
    auto p = ch.pending(req, PVFSD_OP_READDIR, ino);
    p->size = r.max_bytes;
    auto bytes = message(p->op, p->tag, r);
    ch.start(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::readdirplus(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                                   fuse_file_info * /*fi*/)
{
    FuseChannel &ch = self(req);
    if (off < 0) {
        static_cast<void>(fuse_reply_err(req, EINVAL));
        return;
    }
    ++ch.counts_.readdirplus;
    if (off < 2) {
        reply_dots(req, ino, size, off, true);
        return;
    }
    pvfsd_readdir_req r{};
    r.common = common_of(req);
    r.handle = ino;
    r.cookie = static_cast<std::uint64_t>(off) - 2;
    // An entry with attributes takes FUSE 152 bytes and the name, the
    // channel's 24 and the name: half the room holds at least as many
    // names as fit, for names up to 104 bytes (start_listing keeps those
    // that fit; the next listing starts after them).
    const std::size_t room = std::min(size, max_readdir_bytes);
    r.max_bytes = static_cast<std::uint32_t>(std::max<std::size_t>(room / 2, 512));
    auto p = ch.pending(req, PVFSD_OP_READDIR, ino);
    p->size = room;
    p->common = r.common;
    p->then = Then::listing;
    auto bytes = message(p->op, p->tag, r);
    ch.start(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::statfs(fuse_req_t req, fuse_ino_t ino)
{
    FuseChannel &ch = self(req);
    pvfsd_handle_req r{};
    r.common = common_of(req);
    r.handle = ino;
    auto p = ch.pending(req, PVFSD_OP_STATFS, ino);
    auto bytes = message(p->op, p->tag, r);
    ch.start(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, std::size_t size)
{
    FuseChannel &ch = self(req);
    const std::string_view n(name);
    if (n.empty() || n.size() > PVFSD_MAX_XATTR_NAME) {
        static_cast<void>(fuse_reply_err(req, ERANGE));
        return;
    }
    if (!detail::xattr_name_served(n)) {
        static_cast<void>(fuse_reply_err(req, EOPNOTSUPP));
        return;
    }
    pvfsd_xattr_req r{};
    r.common = common_of(req);
    r.handle = ino;
    r.name_len = static_cast<std::uint32_t>(n.size());
    r.value_len = static_cast<std::uint32_t>(std::min<std::size_t>(size, PVFSD_MAX_XATTR_VALUE));
    auto p = ch.pending(req, PVFSD_OP_XATTR_GET, ino);
    p->size = r.value_len;
    auto bytes = message(p->op, p->tag, r, n);
    ch.start(std::move(p), std::move(bytes));
}

void FuseChannel::Ops::listxattr(fuse_req_t req, fuse_ino_t ino, std::size_t size)
{
    FuseChannel &ch = self(req);
    pvfsd_xattr_req r{};
    r.common = common_of(req);
    r.handle = ino;
    r.value_len = static_cast<std::uint32_t>(std::min<std::size_t>(size, PVFSD_MAX_XATTR_VALUE));
    auto p = ch.pending(req, PVFSD_OP_XATTR_LIST, ino);
    p->size = r.value_len;
    auto bytes = message(p->op, p->tag, r);
    ch.start(std::move(p), std::move(bytes));
}

} // namespace pvfs::fuse
