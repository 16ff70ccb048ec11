#include "upcall.hpp"

#include <algorithm>
#include <array>
#include <cerrno>

namespace pvfs::pvfsd {

std::optional<Upcall> Upcall::parse(std::span<const std::byte> bytes, std::string &error)
{
    Upcall u;
    if (bytes.size() < sizeof(pvfsd_msg_hdr)) {
        error = "message of " + std::to_string(bytes.size()) + " bytes, shorter than a header";
        return std::nullopt;
    }
    std::memcpy(&u.hdr_, bytes.data(), sizeof(u.hdr_));
    if (u.hdr_.magic != PVFSD_DEV_MAGIC) {
        error = "bad magic";
        return std::nullopt;
    }
    if (u.hdr_.version != PVFSD_DEV_MAJOR) {
        error = "channel version " + std::to_string(u.hdr_.version) + ", pvfsd speaks " +
                std::to_string(PVFSD_DEV_MAJOR) + "." + std::to_string(PVFSD_DEV_MINOR);
        return std::nullopt;
    }
    if (u.hdr_.length != bytes.size() || bytes.size() > PVFSD_DEV_MAX_MSG) {
        error = "header says " + std::to_string(u.hdr_.length) + " bytes, message has " +
                std::to_string(bytes.size());
        return std::nullopt;
    }
    if (u.hdr_.op == 0 || u.hdr_.op >= PVFSD_OP_COUNT) {
        error = "unknown op " + std::to_string(u.hdr_.op);
        return std::nullopt;
    }
    u.body_.assign(bytes.begin() + sizeof(pvfsd_msg_hdr), bytes.end());
    return u;
}

std::optional<std::string_view> Upcall::tail(std::size_t fixed, std::size_t offset,
                                             std::size_t len) const
{
    if (body_.size() < fixed || body_.size() - fixed < offset ||
        body_.size() - fixed - offset < len)
        return std::nullopt;
    return std::string_view(reinterpret_cast<const char *>(body_.data()) + fixed + offset, len);
}

std::vector<std::byte> Downcall::finish(int status) const
{
    if (status > 0 || status < -4095)
        status = -EIO;
    const std::size_t body = status == 0 ? body_.size() : 0;
    std::vector<std::byte> out(sizeof(pvfsd_msg_hdr) + body);
    pvfsd_msg_hdr h{};
    h.magic = PVFSD_DEV_MAGIC;
    h.version = PVFSD_DEV_MAJOR;
    h.op = op_;
    h.tag = tag_;
    h.length = static_cast<std::uint32_t>(out.size());
    h.status = status;
    std::memcpy(out.data(), &h, sizeof(h));
    if (body != 0)
        std::memcpy(out.data() + sizeof(h), body_.data(), body);
    return out;
}

Credentials credentials_of(const pvfsd_req_common &common)
{
    Credentials c;
    c.uid = common.fsuid;
    c.gid = common.fsgid;
    const std::uint32_t n = std::min<std::uint32_t>(common.ngroups, PVFSD_MAX_GROUPS);
    c.groups.assign(std::begin(common.groups), std::begin(common.groups) + n);
    return c;
}

pvfsd_attr to_dev_attr(const Attr &a)
{
    pvfsd_attr d{};
    d.handle = a.handle;
    d.type = static_cast<std::uint32_t>(a.type);
    d.mode = a.mode & 07777U;
    d.uid = a.uid;
    d.gid = a.gid;
    d.nlink = a.nlink;
    d.blksize = a.layout.stripe_size != 0 ? a.layout.stripe_size : default_stripe_size;
    d.size = a.size;
    d.rdev = a.rdev;
    d.atime = {a.atime.sec, a.atime.nsec, 0};
    d.mtime = {a.mtime.sec, a.mtime.nsec, 0};
    d.ctime = {a.ctime.sec, a.ctime.nsec, 0};
    return d;
}

const char *op_name(unsigned op) noexcept
{
    static constexpr std::array<const char *, PVFSD_OP_COUNT> names = {
        "?",         "HELLO",     "ATTACH",     "DETACH",       "LOOKUP", "GETATTR", "SETATTR",
        "CREATE",    "MKDIR",     "MKNOD",      "SYMLINK",      "LINK",   "UNLINK",  "RMDIR",
        "RENAME",    "READLINK",  "READDIR",    "READ",         "WRITE",  "FSYNC",   "STATFS",
        "XATTR_GET", "XATTR_SET", "XATTR_LIST", "XATTR_REMOVE", "CANCEL", "OPEN",    "CLOSE"};
    return op < names.size() ? names.at(op) : "?";
}

bool valid_name(std::string_view name) noexcept
{
    return !name.empty() && name.size() <= PVFSD_MAX_NAME &&
           name.find_first_of(std::string_view("\0/", 2)) == std::string_view::npos;
}

} // namespace pvfs::pvfsd
