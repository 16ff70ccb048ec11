// The byte layout of the store's keys and values (docs/metadata.md, "Tables
// and encodings").  Keys are big-endian where their order matters to a
// cursor walk; values are little-endian and versioned.  Decoders check
// every length and value and report a damaged record as -EIO.
#ifndef PVFS_META_RECORDS_HPP
#define PVFS_META_RECORDS_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "pvfs/types.hpp"

namespace pvfs::meta::records {

using Bytes = std::span<const std::uint8_t>;

// A key: an 8-byte big-endian handle, then a name or a big-endian u64.
class Key {
public:
    static constexpr std::size_t capacity = 8 + max_name; // max_xattr_name == max_name

    explicit Key(Handle handle) noexcept { append_be64(handle); }
    Key(Handle handle, std::string_view name) noexcept;
    Key(Handle handle, std::uint64_t number) noexcept;

    [[nodiscard]] Bytes bytes() const noexcept { return {buf_.data(), size_}; }

private:
    void append_be64(std::uint64_t v) noexcept;
    std::array<std::uint8_t, capacity> buf_{};
    std::size_t size_ = 0;
};

[[nodiscard]] std::uint64_t load_be64(Bytes b) noexcept; // b.size() >= 8
[[nodiscard]] std::uint64_t load_le64(Bytes b) noexcept; // b.size() >= 8
void store_le64(std::uint8_t *out, std::uint64_t v) noexcept;

[[nodiscard]] bool valid_type(std::uint8_t t) noexcept;

// An inode: the Attr (its handle is the key) and, for a directory, its
// parent (the top directory is its own parent).
struct Inode {
    Attr attr;
    Handle parent = no_handle;
};

inline constexpr std::uint8_t inode_format = 1;
// format u8, type u8, mode, uid, gid, nlink u32, size, rdev u64,
// atime, mtime, ctime (sec i64, nsec u32), layout (3 x u32), parent u64.
inline constexpr std::size_t inode_size = 1 + 1 + 4 * 4 + 8 + 8 + 3 * 12 + 3 * 4 + 8;

[[nodiscard]] std::array<std::uint8_t, inode_size> encode_inode(const Inode &inode) noexcept;
// -EIO (logged) when the record is damaged.
[[nodiscard]] int decode_inode(Handle handle, Bytes value, Inode &out) noexcept;

// A directory entry: (dir BE, name) -> child u64, type u8, seq u64.
struct Dirent {
    Handle child = no_handle;
    ObjectType type = ObjectType::regular;
    std::uint64_t seq = 0;
};
inline constexpr std::size_t dirent_size = 8 + 1 + 8;
[[nodiscard]] std::array<std::uint8_t, dirent_size> encode_dirent(const Dirent &d) noexcept;
[[nodiscard]] int decode_dirent(Bytes value, Dirent &out) noexcept;

// The order table: (dir BE, seq BE) -> child u64, type u8, name.
class OrderValue {
public:
    static constexpr std::size_t header = 8 + 1;
    OrderValue(Handle child, ObjectType type, std::string_view name) noexcept;
    [[nodiscard]] Bytes bytes() const noexcept { return {buf_.data(), size_}; }

private:
    std::array<std::uint8_t, header + max_name> buf_{};
    std::size_t size_ = 0;
};
struct OrderEntry {
    Handle child = no_handle;
    ObjectType type = ObjectType::regular;
    std::string_view name; // points into the decoded bytes
};
[[nodiscard]] int decode_order(Bytes value, OrderEntry &out) noexcept;

// Counters in the meta table: u64 little-endian each.
inline constexpr std::string_view key_format = "format";
inline constexpr std::string_view key_server_index = "server_index";
inline constexpr std::string_view key_next_id = "next_id";
inline constexpr std::string_view key_next_seq = "next_seq";
inline constexpr std::uint64_t store_format = 1;
// Not a counter: the config's data servers when the store was made (or
// first opened by a build that records them), each name and a newline, in
// file order.  Today's layouts place stripe k on data server
// (first_server + k) mod their count, so that list is part of every file.
inline constexpr std::string_view key_data_servers = "data_servers";

} // namespace pvfs::meta::records

#endif // PVFS_META_RECORDS_HPP
