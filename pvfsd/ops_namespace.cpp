// The ops on names, links, directories and attributes.
#include "ops.hpp"

#include <pvfs/gossip.hpp>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

namespace pvfs::pvfsd::ops {

namespace gossip = pvfs::gossip;

namespace {

// Answers with one object's attributes.
void put_attr(Downcall &out, const Attr &a)
{
    pvfsd_attr_resp r{};
    r.attr = to_dev_attr(a);
    out.put(r);
}

Timespec to_timespec(const pvfsd_time &t)
{
    return Timespec{t.sec, t.nsec};
}

ObjectType to_type(std::uint32_t t, bool &ok)
{
    ok = t >= PVFSD_TYPE_REGULAR && t <= PVFSD_TYPE_BLOCK_DEVICE;
    return ok ? static_cast<ObjectType>(t) : ObjectType::regular;
}

} // namespace

Task<int> lookup(Call call)
{
    const auto req = call.up.body<pvfsd_name_req>();
    const auto name = req ? call.up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
    if (!name || !valid_name(*name))
        co_return -EINVAL;
    Attr a;
    const int rc = co_await call.c.co_lookup(req->parent, *name, a);
    if (rc == 0)
        put_attr(call.out, a);
    co_return rc;
}

Task<int> remove(Call call)
{
    const auto req = call.up.body<pvfsd_name_req>();
    const auto name = req ? call.up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
    if (!name || !valid_name(*name))
        co_return -EINVAL;
    // A replay of a removal the dead daemon had done gets its first result
    // from the servers' reply cache (the upcall's reply slot and tag).
    if (call.up.op() == PVFSD_OP_UNLINK)
        co_return co_await call.c.co_unlink(req->parent, *name);
    co_return co_await call.c.co_rmdir(req->parent, *name);
}

Task<int> getattr(Call call)
{
    const auto req = call.up.body<pvfsd_handle_req>();
    if (!req)
        co_return -EINVAL;
    Attr a;
    const int rc = co_await call.c.co_getattr(req->handle, a);
    if (rc == 0)
        put_attr(call.out, a);
    co_return rc;
}

Task<int> setattr(Call call)
{
    const auto req = call.up.body<pvfsd_setattr_req>();
    if (!req || (req->mask & ~PVFSD_SET_ALL) != 0)
        co_return -EINVAL;
    client::SetAttr s;
    // The kernel's bits pass through as they are.
    static_assert(PVFSD_SET_MODE == client::set_mode && PVFSD_SET_UID == client::set_uid &&
                  PVFSD_SET_GID == client::set_gid && PVFSD_SET_ATIME == client::set_atime &&
                  PVFSD_SET_MTIME == client::set_mtime &&
                  PVFSD_SET_ATIME_NOW == client::set_atime_now &&
                  PVFSD_SET_MTIME_NOW == client::set_mtime_now);
    s.mask = req->mask & (client::set_mode | client::set_uid | client::set_gid | client::set_atime |
                          client::set_mtime | client::set_atime_now | client::set_mtime_now);
    s.mode = req->mode & 07777U;
    s.uid = req->uid;
    s.gid = req->gid;
    s.atime = to_timespec(req->atime);
    s.mtime = to_timespec(req->mtime);
    s.truncate = (req->mask & PVFSD_SET_SIZE) != 0;
    s.size = req->size;
    // The kernel decided by the open (ATTR_FILE on a file open for
    // writing); the metadata server checks that we hold such an open.
    s.by_open = (req->common.flags & PVFSD_REQ_BY_FILE) != 0;
    Attr a;
    const int rc = co_await call.c.co_setattr(req->handle, s, a);
    if (rc == 0)
        put_attr(call.out, a);
    co_return rc;
}

Task<int> make_node(Call call)
{
    const auto req = call.up.body<pvfsd_mknod_req>();
    const auto name = req ? call.up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
    if (!name || !valid_name(*name))
        co_return -EINVAL;
    bool ok = false;
    const ObjectType type = to_type(req->type, ok);
    if (!ok || type == ObjectType::regular || type == ObjectType::symlink)
        co_return -EINVAL;
    Attr a;
    int rc = 0;
    if (type == ObjectType::directory) {
        rc = co_await call.c.co_mkdir(req->parent, *name, req->mode & 07777U, a);
    } else {
        rc = co_await call.c.co_mknod(req->parent, *name, type, req->mode & 07777U, req->rdev, a);
    }
    if (rc == 0)
        put_attr(call.out, a);
    co_return rc;
}

Task<int> symlink(Call call)
{
    const auto req = call.up.body<pvfsd_symlink_req>();
    const auto name = req ? call.up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
    const auto target =
        req ? call.up.tail(sizeof(*req), req->name_len, req->target_len) : std::nullopt;
    if (!name || !valid_name(*name) || !target || target->empty() ||
        target->size() > PVFSD_MAX_SYMLINK)
        co_return -EINVAL;
    Attr a;
    const int rc = co_await call.c.co_symlink(req->parent, *name, *target, a);
    if (rc == 0)
        put_attr(call.out, a);
    co_return rc;
}

Task<int> link(Call call)
{
    const auto req = call.up.body<pvfsd_link_req>();
    const auto name = req ? call.up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
    if (!name || !valid_name(*name))
        co_return -EINVAL;
    Attr a;
    const int rc = co_await call.c.co_link(req->target, req->new_parent, *name, a);
    if (rc == 0)
        put_attr(call.out, a);
    co_return rc;
}

Task<int> rename(Call call)
{
    const auto req = call.up.body<pvfsd_rename_req>();
    const auto from = req ? call.up.tail(sizeof(*req), 0, req->old_name_len) : std::nullopt;
    const auto to =
        req ? call.up.tail(sizeof(*req), req->old_name_len, req->new_name_len) : std::nullopt;
    if (!from || !to || !valid_name(*from) || !valid_name(*to) ||
        (req->flags & ~PVFSD_RENAME_NOREPLACE) != 0)
        co_return -EINVAL;
    const std::uint32_t flags =
        (req->flags & PVFSD_RENAME_NOREPLACE) != 0 ? client::rename_noreplace : 0;
    co_return co_await call.c.co_rename(req->old_parent, *from, req->new_parent, *to, flags);
}

Task<int> readlink(Call call)
{
    const auto req = call.up.body<pvfsd_handle_req>();
    if (!req)
        co_return -EINVAL;
    std::string target;
    const int rc = co_await call.c.co_readlink(req->handle, target);
    if (rc != 0)
        co_return rc;
    if (target.empty() || target.size() > PVFSD_MAX_SYMLINK ||
        target.find('\0') != std::string::npos)
        co_return -EIO;
    pvfsd_readlink_resp r{};
    r.target_len = static_cast<std::uint32_t>(target.size());
    call.out.put(r);
    call.out.put_string(target);
    co_return 0;
}

Task<int> readdir(Call call)
{
    const auto req = call.up.body<pvfsd_readdir_req>();
    if (!req || req->max_bytes < sizeof(pvfsd_dirent) + 8)
        co_return -EINVAL;
    // Names average well under 32 bytes: ask for what likely fits.
    const std::uint32_t want = std::clamp<std::uint32_t>(
        req->max_bytes / static_cast<std::uint32_t>(sizeof(pvfsd_dirent) + 16), 1, 4096);
    std::vector<client::DirEntry> entries;
    bool eof = false;
    const int rc = co_await call.c.co_readdir(req->handle, req->cookie, want, entries, eof);
    if (rc != 0)
        co_return rc;
    Downcall packed(call.up.op(), call.up.tag());
    std::uint32_t count = 0;
    std::size_t used = 0;
    for (const auto &e : entries) {
        const std::size_t step = (sizeof(pvfsd_dirent) + e.name.size() + 7) / 8 * 8;
        if (used + step > req->max_bytes) {
            eof = false;
            break;
        }
        if (!valid_name(e.name) || e.handle == no_handle || e.cookie == 0) {
            gossip::warning(gossip::Mask::pvfsd, "readdir of {:#x}: a malformed entry",
                            req->handle);
            co_return -EIO;
        }
        pvfsd_dirent d{};
        d.handle = e.handle;
        d.cookie = e.cookie;
        d.type = static_cast<std::uint32_t>(e.type);
        d.name_len = static_cast<std::uint32_t>(e.name.size());
        packed.put(d);
        packed.put_string(e.name);
        packed.pad_to(8);
        used += step;
        ++count;
    }
    pvfsd_readdir_resp r{};
    r.count = count;
    r.eof = eof ? 1 : 0;
    call.out.put(r);
    const auto tail = packed.finish(0);
    call.out.put_bytes(std::span(tail).subspan(sizeof(pvfsd_msg_hdr)));
    co_return 0;
}

} // namespace pvfs::pvfsd::ops
