// pvfs-fuse's low-level FUSE ops (fuse_ops.cpp): each turns its request
// into the upcall pvfs.ko would send, or answers it at once (the dots of a
// listing, EROFS for a change).  Private to fuse/.
#pragma once

#include "fuse_channel.hpp"
#include "upcall.hpp"

#include <fuse_lowlevel.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace pvfs::fuse {

namespace detail {

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
    static void statfs(fuse_req_t req, fuse_ino_t ino);
    static void getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, std::size_t size);
    static void listxattr(fuse_req_t req, fuse_ino_t ino, std::size_t size);

    // Changes: EROFS in this version.
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
};

} // namespace pvfs::fuse
