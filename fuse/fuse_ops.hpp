// pvfs-fuse's low-level FUSE ops: each turns its request into the upcall
// pvfs.ko would send for the same system call, or answers it at once (the
// dots of a listing).  fuse_ops.cpp has those that look, fuse_change.cpp
// those that change; fuse_reply.cpp turns downcalls into answers.  Private
// to fuse/.
#pragma once

#include "fuse_channel.hpp"
#include "upcall.hpp"

#include <fuse_lowlevel.h>

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pvfs::fuse {

namespace detail {

// READDIR's entries: 0, or -EIO (malformed) or -EOVERFLOW (a cookie FUSE's
// offsets cannot carry).
[[nodiscard]] int parse_dirents(std::span<const std::byte> body, std::vector<Dirent> &out,
                                bool &eof);

// An upcall's bytes: header, fixed body, tail (the layout of a downcall).
template <typename Body>
std::vector<std::byte> message(std::uint16_t op, std::uint64_t tag, const Body &body,
                               std::string_view tail = {})
{
    pvfsd::Downcall d(op, tag);
    d.put(body);
    d.put_string(tail);
    return d.finish(0);
}

// A downcall's fixed body, when it is all there.
template <typename Body> std::optional<Body> body_of(std::span<const std::byte> body)
{
    if (body.size() < sizeof(Body))
        return std::nullopt;
    Body b{};
    std::memcpy(&b, body.data(), sizeof(Body));
    return b;
}

// S_IF* of a PVFSD_TYPE_*, 0 for none.
[[nodiscard]] mode_t type_bits(std::uint32_t type);
// The kernel's attributes of an object: false when they make no sense.
[[nodiscard]] bool to_stat(const pvfsd_attr &a, struct stat &st);
// A reply whose request is gone (interrupted, unmounted) fails: logged.
void replied(int rc, const char *what);
// Whether a name of an extended attribute is one pvfs.ko has a handler
// for ("user.", "pvfs."): the others are EOPNOTSUPP, as there.
[[nodiscard]] bool xattr_name_served(std::string_view name);
// PVFSD_OPEN_* of an open's flags, as pvfs.ko's FMODE_READ/WRITE.
[[nodiscard]] std::uint32_t open_bits(int flags);

} // namespace detail

struct FuseChannel::Ops {
    // The table fuse_session_new takes.
    static const fuse_lowlevel_ops &table();
    // fuse_req_interrupt_func's callback: a CANCEL of the request's upcall.
    static void interrupt_cb(fuse_req_t req, void *data);

    static void init(void *userdata, fuse_conn_info *conn);
    static void lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
    static void forget(fuse_req_t req, fuse_ino_t ino, std::uint64_t nlookup);
    static void forget_multi(fuse_req_t req, std::size_t count, fuse_forget_data *forgets);
    static void getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi);
    static void readlink(fuse_req_t req, fuse_ino_t ino);
    static void open(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi);
    static void read(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                     fuse_file_info *fi);
    static void release(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi);
    static void readdir(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                        fuse_file_info *fi);
    static void readdirplus(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                            fuse_file_info *fi);
    static void statfs(fuse_req_t req, fuse_ino_t ino);
    static void getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, std::size_t size);
    static void listxattr(fuse_req_t req, fuse_ino_t ino, std::size_t size);

    // Changes (fuse_change.cpp).
    static void setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                        fuse_file_info *fi);
    static void mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
    static void mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
    static void unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
    static void rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
    static void symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
    static void rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                       const char *newname, unsigned int flags);
    static void link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
    static void write(fuse_req_t req, fuse_ino_t ino, const char *buf, std::size_t size, off_t off,
                      fuse_file_info *fi);
    static void create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                       fuse_file_info *fi);
    static void setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                         std::size_t size, int flags);
    static void removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);
    static void flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi);
    static void fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info *fi);
    static void fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info *fi);
};

} // namespace pvfs::fuse
