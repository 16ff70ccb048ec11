#include "detail/records.hpp"

#include <algorithm>
#include <cerrno>

#include "pvfs/gossip.hpp"

namespace pvfs::meta::records {

namespace gossip = pvfs::gossip;

namespace {

constexpr std::uint32_t nsec_per_sec = 1'000'000'000;

// Writes little-endian integers at a moving position.
class Writer {
public:
    explicit Writer(std::span<std::uint8_t> out) noexcept : out_(out) {}
    template <typename T> void put(T v) noexcept
    {
        auto u = static_cast<std::uint64_t>(v);
        for (std::size_t i = 0; i < sizeof(T); ++i) {
            out_[pos_++] = static_cast<std::uint8_t>(u & 0xFFU);
            u >>= 8U;
        }
    }
    void put_time(const Timespec &t) noexcept
    {
        put(t.sec);
        put(t.nsec);
    }
    [[nodiscard]] std::size_t pos() const noexcept { return pos_; }

private:
    std::span<std::uint8_t> out_;
    std::size_t pos_ = 0;
};

// Reads them back; the caller checked the total length.
class Reader {
public:
    explicit Reader(Bytes in) noexcept : in_(in) {}
    template <typename T> [[nodiscard]] T get() noexcept
    {
        std::uint64_t u = 0;
        for (std::size_t i = 0; i < sizeof(T); ++i)
            u |= static_cast<std::uint64_t>(in_[pos_++]) << (8U * i);
        return static_cast<T>(u);
    }
    [[nodiscard]] Timespec get_time() noexcept
    {
        Timespec t;
        t.sec = get<std::int64_t>();
        t.nsec = get<std::uint32_t>();
        return t;
    }

private:
    Bytes in_;
    std::size_t pos_ = 0;
};

int damaged(std::string_view what, Handle handle) noexcept
{
    gossip::error(gossip::Mask::meta, "damaged {} record for handle {:#x}", what, handle);
    return -EIO;
}

} // namespace

Key::Key(Handle handle, std::string_view name) noexcept
{
    append_be64(handle);
    const std::size_t n = std::min(name.size(), capacity - size_);
    std::copy_n(name.begin(), n, buf_.begin() + static_cast<std::ptrdiff_t>(size_));
    size_ += n;
}

Key::Key(Handle handle, std::uint64_t number) noexcept
{
    append_be64(handle);
    append_be64(number);
}

void Key::append_be64(std::uint64_t v) noexcept
{
    for (unsigned i = 0; i < 8; ++i)
        buf_[size_ + i] = static_cast<std::uint8_t>(v >> (56U - 8U * i));
    size_ += 8;
}

std::uint64_t load_be64(Bytes b) noexcept
{
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i)
        v = (v << 8U) | b[i];
    return v;
}

std::uint64_t load_le64(Bytes b) noexcept
{
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i)
        v |= static_cast<std::uint64_t>(b[i]) << (8U * i);
    return v;
}

void store_le64(std::uint8_t *out, std::uint64_t v) noexcept
{
    for (std::size_t i = 0; i < 8; ++i)
        out[i] = static_cast<std::uint8_t>(v >> (8U * i));
}

bool valid_type(std::uint8_t t) noexcept
{
    return t >= static_cast<std::uint8_t>(ObjectType::regular) &&
           t <= static_cast<std::uint8_t>(ObjectType::block_device);
}

std::array<std::uint8_t, inode_size> encode_inode(const Inode &inode) noexcept
{
    std::array<std::uint8_t, inode_size> out{};
    Writer w(out);
    const Attr &a = inode.attr;
    w.put(inode_format);
    w.put(static_cast<std::uint8_t>(a.type));
    w.put(a.mode);
    w.put(a.uid);
    w.put(a.gid);
    w.put(a.nlink);
    w.put(a.size);
    w.put(a.rdev);
    w.put_time(a.atime);
    w.put_time(a.mtime);
    w.put_time(a.ctime);
    w.put(a.layout.stripe_size);
    w.put(a.layout.stripe_count);
    w.put(a.layout.first_server);
    w.put(inode.parent);
    return out;
}

int decode_inode(Handle handle, Bytes value, Inode &out) noexcept
{
    if (value.size() != inode_size || value[0] != inode_format || !valid_type(value[1]))
        return damaged("inode", handle);
    Reader r(value.subspan(2));
    Attr a;
    a.handle = handle;
    a.type = static_cast<ObjectType>(value[1]);
    a.mode = r.get<std::uint32_t>();
    a.uid = r.get<std::uint32_t>();
    a.gid = r.get<std::uint32_t>();
    a.nlink = r.get<std::uint32_t>();
    a.size = r.get<std::uint64_t>();
    a.rdev = r.get<std::uint64_t>();
    a.atime = r.get_time();
    a.mtime = r.get_time();
    a.ctime = r.get_time();
    a.layout.stripe_size = r.get<std::uint32_t>();
    a.layout.stripe_count = r.get<std::uint32_t>();
    a.layout.first_server = r.get<std::uint32_t>();
    const auto parent = r.get<std::uint64_t>();
    if ((a.mode & ~mode_perm_mask) != 0 || a.atime.nsec >= nsec_per_sec ||
        a.mtime.nsec >= nsec_per_sec || a.ctime.nsec >= nsec_per_sec)
        return damaged("inode", handle);
    out.attr = a;
    out.parent = parent;
    return 0;
}

std::array<std::uint8_t, dirent_size> encode_dirent(const Dirent &d) noexcept
{
    std::array<std::uint8_t, dirent_size> out{};
    Writer w(out);
    w.put(d.child);
    w.put(static_cast<std::uint8_t>(d.type));
    w.put(d.seq);
    return out;
}

int decode_dirent(Bytes value, Dirent &out) noexcept
{
    if (value.size() != dirent_size || !valid_type(value[8]))
        return damaged("directory entry", value.size() >= 8 ? load_le64(value) : 0);
    Reader r(value);
    out.child = r.get<std::uint64_t>();
    out.type = static_cast<ObjectType>(r.get<std::uint8_t>());
    out.seq = r.get<std::uint64_t>();
    return 0;
}

OrderValue::OrderValue(Handle child, ObjectType type, std::string_view name) noexcept
{
    Writer w(buf_);
    w.put(child);
    w.put(static_cast<std::uint8_t>(type));
    const std::size_t n = std::min(name.size(), max_name);
    std::copy_n(name.begin(), n, buf_.begin() + static_cast<std::ptrdiff_t>(w.pos()));
    size_ = w.pos() + n;
}

int decode_order(Bytes value, OrderEntry &out) noexcept
{
    if (value.size() <= OrderValue::header || value.size() > OrderValue::header + max_name ||
        !valid_type(value[8]))
        return damaged("directory order", value.size() >= 8 ? load_le64(value) : 0);
    out.child = load_le64(value);
    out.type = static_cast<ObjectType>(value[8]);
    const Bytes name = value.subspan(OrderValue::header);
    out.name = std::string_view(reinterpret_cast<const char *>(name.data()), name.size());
    return 0;
}

} // namespace pvfs::meta::records
