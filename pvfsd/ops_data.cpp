// The ops on file data, the file system's totals and extended attributes.
#include "ops.hpp"

#include <pvfs/gossip.hpp>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pvfs::pvfsd::ops {

namespace gossip = pvfs::gossip;

namespace {

// The attribute's name after the request, when it is a valid one.
std::optional<std::string_view> xattr_name(const Upcall &up, const pvfsd_xattr_req &req)
{
    const auto name = up.tail(sizeof(req), 0, req.name_len);
    if (!name || name->empty() || name->size() > PVFSD_MAX_XATTR_NAME ||
        name->find('\0') != std::string_view::npos)
        return std::nullopt;
    return name;
}

} // namespace

std::span<std::byte> Slots::at(std::uint32_t index, std::uint32_t length) const
{
    if (size == 0 || index >= area.size() / size || length > size)
        return {};
    return area.subspan(static_cast<std::size_t>(index) * size, length);
}

Task<int> io(Call call)
{
    const auto req = call.up.body<pvfsd_io_req>();
    if (!req)
        co_return -EINVAL;
    const auto mem = call.slots.at(req->slot, req->length);
    if (mem.size() != req->length) {
        gossip::warning(gossip::Mask::dev, "I/O of {} bytes in slot {}: outside the slots",
                        req->length, req->slot);
        co_return -EINVAL;
    }
    gossip::debug(gossip::Mask::pvfsd, "{} tag {}: {:#x}, {} bytes at {}", op_name(call.up.op()),
                  call.up.tag(), req->handle, req->length, req->offset);
    std::int64_t n = 0;
    if (call.up.op() == PVFSD_OP_READ && (req->common.flags & PVFSD_REQ_ZERO_FILL) != 0) {
        // The page cache's read: past the end it wants zeros, not a
        // short count, so the data servers need not be asked for the
        // file's size first.
        const client::Region region{req->offset, req->length};
        n = co_await call.c.co_read_list(req->handle, std::span(&region, 1), mem);
    } else if (call.up.op() == PVFSD_OP_READ) {
        n = co_await call.c.co_read(req->handle, req->offset, mem);
    } else {
        n = co_await call.c.co_write(req->handle, req->offset, mem);
    }
    if (n < 0)
        co_return static_cast<int>(n);
    pvfsd_io_resp r{};
    r.done = static_cast<std::uint32_t>(std::min<std::int64_t>(n, req->length));
    call.out.put(r);
    co_return 0;
}

Task<int> fsync(Call call)
{
    const auto req = call.up.body<pvfsd_fsync_req>();
    if (!req)
        co_return -EINVAL;
    // Our "data written" is true of data the kernel let through a file
    // open for writing; the metadata server takes the claim only while
    // this mount holds the file open for writing.
    co_return co_await call.c.co_fsync(req->handle, true);
}

Task<int> statfs(Call call)
{
    client::StatFs s;
    const int rc = co_await call.c.co_statfs(s);
    if (rc != 0)
        co_return rc;
    constexpr std::uint32_t bsize = 4096;
    pvfsd_statfs_resp r{};
    r.bsize = bsize;
    r.blocks = s.total_bytes / bsize;
    r.bfree = std::min<std::uint64_t>(r.blocks, s.free_bytes / bsize);
    r.bavail = std::min<std::uint64_t>(r.bfree, s.avail_bytes / bsize);
    r.files = s.total_objects;
    r.ffree = std::min<std::uint64_t>(r.files, s.free_objects);
    r.namelen = static_cast<std::uint32_t>(pvfs::max_name);
    call.out.put(r);
    co_return 0;
}

Task<int> xattr_get(Call call)
{
    const auto req = call.up.body<pvfsd_xattr_req>();
    if (!req)
        co_return -EINVAL;
    const auto name = xattr_name(call.up, *req);
    if (!name)
        co_return -EINVAL;
    std::vector<std::byte> value;
    const int rc = co_await call.c.co_xattr_get(req->handle, *name, value);
    if (rc != 0)
        co_return rc;
    if (value.size() > PVFSD_MAX_XATTR_VALUE)
        co_return -E2BIG;
    if (req->value_len != 0 && value.size() > req->value_len)
        co_return -ERANGE;
    pvfsd_xattr_resp r{};
    r.size = static_cast<std::uint32_t>(value.size());
    call.out.put(r);
    if (req->value_len != 0)
        call.out.put_bytes(value);
    co_return 0;
}

Task<int> xattr_set(Call call)
{
    const auto req = call.up.body<pvfsd_xattr_req>();
    if (!req)
        co_return -EINVAL;
    const auto name = xattr_name(call.up, *req);
    if (!name)
        co_return -EINVAL;
    const auto value = call.up.tail(sizeof(*req), req->name_len, req->value_len);
    if (!value || (req->flags & ~(PVFSD_XATTR_CREATE | PVFSD_XATTR_REPLACE)) != 0)
        co_return -EINVAL;
    std::uint32_t flags = 0;
    if ((req->flags & PVFSD_XATTR_CREATE) != 0)
        flags |= client::xattr_create;
    if ((req->flags & PVFSD_XATTR_REPLACE) != 0)
        flags |= client::xattr_replace;
    co_return co_await call.c.co_xattr_set(req->handle, *name, std::as_bytes(std::span(*value)),
                                           flags);
}

Task<int> xattr_list(Call call)
{
    const auto req = call.up.body<pvfsd_xattr_req>();
    if (!req)
        co_return -EINVAL;
    std::vector<std::string> names;
    const int rc = co_await call.c.co_xattr_list(req->handle, names);
    if (rc != 0)
        co_return rc;
    std::string list;
    for (const auto &n : names) {
        list += n;
        list.push_back('\0');
    }
    if (list.size() > PVFSD_MAX_XATTR_VALUE)
        co_return -E2BIG;
    if (req->value_len != 0 && list.size() > req->value_len)
        co_return -ERANGE;
    pvfsd_xattr_resp r{};
    r.size = static_cast<std::uint32_t>(list.size());
    call.out.put(r);
    if (req->value_len != 0)
        call.out.put_string(list);
    co_return 0;
}

Task<int> xattr_remove(Call call)
{
    const auto req = call.up.body<pvfsd_xattr_req>();
    if (!req)
        co_return -EINVAL;
    const auto name = xattr_name(call.up, *req);
    if (!name)
        co_return -EINVAL;
    co_return co_await call.c.co_xattr_remove(req->handle, *name);
}

} // namespace pvfs::pvfsd::ops
