// The vocabulary of the file system: handles, object types, attributes,
// layouts, credentials and the limits every component enforces.  Shared by
// the protocol (lib/proto), the servers, the client library and pvfsd.
//
// Handles.  A handle names one file-system object for its whole life and is
// never reused.  Its top 16 bits are the index of the metadata server that
// owns the object (its position among the metadata servers of the cluster
// config), the low 48 bits a number that server allocates.  So any
// component can route a request for a handle without asking anyone, and the
// namespace can span several metadata servers.  Handle 0 is "none"; the
// root directory is {server 0, id 1}.  Data objects (one per file and data
// server) are named by the file's handle on every data server.
#ifndef PVFS_TYPES_HPP
#define PVFS_TYPES_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pvfs {

using Handle = std::uint64_t;

inline constexpr Handle no_handle = 0;
inline constexpr unsigned handle_server_bits = 16;
inline constexpr unsigned handle_id_bits = 48;
inline constexpr std::uint64_t handle_id_mask = (std::uint64_t{1} << handle_id_bits) - 1;

[[nodiscard]] constexpr Handle make_handle(std::uint32_t meta_server, std::uint64_t id) noexcept
{
    return (static_cast<std::uint64_t>(meta_server) << handle_id_bits) | (id & handle_id_mask);
}
[[nodiscard]] constexpr std::uint32_t handle_server(Handle h) noexcept
{
    return static_cast<std::uint32_t>(h >> handle_id_bits);
}
[[nodiscard]] constexpr std::uint64_t handle_id(Handle h) noexcept
{
    return h & handle_id_mask;
}

inline constexpr Handle root_handle = make_handle(0, 1);

// What an object is.  Values are on the wire and in the metadata database:
// never renumber.
enum class ObjectType : std::uint8_t {
    regular = 1,
    directory = 2,
    symlink = 3,
    fifo = 4,
    socket = 5,
    char_device = 6,
    block_device = 7,
};

// Seconds and nanoseconds since the epoch (nsec < 1e9).
struct Timespec {
    std::int64_t sec = 0;
    std::uint32_t nsec = 0;
    friend bool operator==(const Timespec &, const Timespec &) = default;
};

// How a regular file's bytes are spread over the data servers: stripe i
// (bytes [i * stripe_size, (i + 1) * stripe_size)) lives on data server
// (first_server + i % stripe_count) % data_servers, at object offset
// (i / stripe_count) * stripe_size.  lib/layout does the arithmetic.
struct Layout {
    std::uint32_t stripe_size = 0;  // bytes, a multiple of 4096, >= 64 KiB
    std::uint32_t stripe_count = 0; // data servers used, >= 1
    std::uint32_t first_server = 0; // index among the cluster's data servers
    friend bool operator==(const Layout &, const Layout &) = default;
};

inline constexpr std::uint32_t default_stripe_size = 1U << 20U;
inline constexpr std::uint32_t min_stripe_size = 64U * 1024U;
inline constexpr std::uint32_t max_stripe_size = 1U << 30U;

// Mode bits: the file type is ObjectType; `mode` holds only the permission
// bits (07777: setuid, setgid, sticky, rwx for user, group, other).
inline constexpr std::uint32_t mode_perm_mask = 07777;

// The attributes the metadata server keeps.  A regular file's size is not
// here: it is the largest logical end of its data objects, which the
// client asks the data servers for (lib/layout maps object sizes back).
struct Attr {
    Handle handle = no_handle;
    ObjectType type = ObjectType::regular;
    std::uint32_t mode = 0; // permission bits only (mode_perm_mask)
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::uint32_t nlink = 0;
    std::uint64_t size = 0; // directories: entry count; symlinks: target length
    std::uint64_t rdev = 0; // devices: Linux dev_t (major << 20 | minor, new_encode_dev)
    Timespec atime;
    Timespec mtime;
    Timespec ctime;
    Layout layout; // regular files (and directories: what new files inherit)
    friend bool operator==(const Attr &, const Attr &) = default;
};

// Who asks.  Root is uid 0 (unless the server squashes it).
struct Credentials {
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::vector<std::uint32_t> groups; // supplementary, at most max_groups
    friend bool operator==(const Credentials &, const Credentials &) = default;
};

// Limits every component enforces the same way.
inline constexpr std::size_t max_name = 255;          // bytes in one name
inline constexpr std::size_t max_path = 4095;         // symlink target bytes
inline constexpr std::size_t max_groups = 32;         // supplementary groups carried
inline constexpr std::size_t max_xattr_name = 255;    // bytes
inline constexpr std::size_t max_xattr_value = 65536; // bytes
inline constexpr std::size_t max_io_regions = 1024;   // file regions in one I/O request

// A valid name: 1..max_name bytes, no '/', no NUL, not "." or "..".
[[nodiscard]] inline bool valid_name(std::string_view name) noexcept
{
    return !name.empty() && name.size() <= max_name && name != "." && name != ".." &&
           name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

} // namespace pvfs

#endif // PVFS_TYPES_HPP
