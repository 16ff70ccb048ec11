// Striping arithmetic: where the bytes of a regular file live.
//
// A pvfs::Layout (types.hpp) cuts a file into stripes of S = stripe_size
// bytes.  Stripe i (file bytes [i * S, (i + 1) * S)) belongs to slot
// i % stripe_count, and slot k lives on data server
// (first_server + k) % N, where N is the number of data servers in the
// cluster.  On that server the stripe is stored in the file's data object
// at object offset (i / stripe_count) * S, so each object is a dense,
// gap-free concatenation of its slot's stripes:
//
//     S = 64 KiB, stripe_count = 3, first_server = 2, N = 4
//     file:    | st0 | st1 | st2 | st3 | st4 | st5 | st6 |
//     slot:       0     1     2     0     1     2     0
//     server:     2     3     0     2     3     0     2
//     object offset of each stripe: 0, 0, 0, 64K, 64K, 64K, 128K
//
// Offsets are unsigned but a file never reaches 2^63 bytes (off_t is
// signed): every extent must satisfy offset + length <= max_file_end, and
// anything beyond it is rejected, never wrapped.  Every function here is
// O(pieces produced), allocates only inside the caller's vectors, and
// never throws except std::bad_alloc from those vectors.
#ifndef PVFS_LAYOUT_HPP
#define PVFS_LAYOUT_HPP

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pvfs/types.hpp"

namespace pvfs::layout {

// One past the last byte a file may have: 2^63 - 1 (the largest off_t).
inline constexpr std::uint64_t max_file_end =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// Stripe sizes are whole pages, so object pieces stay page-aligned.
inline constexpr std::uint32_t stripe_alignment = 4096;

// nullptr when `layout` can stripe a file over a cluster of
// `data_servers` data servers; otherwise a static message saying why not
// (stripe size not a multiple of 4096 or outside [min_stripe_size,
// max_stripe_size], stripe_count not in [1, data_servers], first_server
// not below data_servers, no data servers at all).
[[nodiscard]] const char *validate(const Layout &layout, std::uint32_t data_servers) noexcept;

// nullptr when [offset, offset + length) lies below max_file_end, else why.
[[nodiscard]] const char *check_extent(std::uint64_t offset, std::uint64_t length) noexcept;

// The data server index that holds `slot` (0 <= slot < stripe_count) of a
// valid layout.
[[nodiscard]] constexpr std::uint32_t
server_of_slot(const Layout &layout, std::uint32_t data_servers, std::uint32_t slot) noexcept
{
    // 64-bit sum: first_server + slot may exceed 2^32 - 1 for a bogus layout.
    return static_cast<std::uint32_t>((std::uint64_t{layout.first_server} + slot) % data_servers);
}

// A run of file bytes that is contiguous both in the file and in one data
// object.
struct Piece {
    std::uint32_t slot = 0;   // 0 .. stripe_count - 1
    std::uint32_t server = 0; // data server index: server_of_slot(slot)
    std::uint64_t file_offset = 0;
    std::uint64_t object_offset = 0;
    std::uint64_t length = 0;
    friend bool operator==(const Piece &, const Piece &) = default;
};

// Walks a file extent piece by piece, in file order.  Each piece is
// maximal: one stripe (or its part inside the extent) when stripe_count > 1;
// the whole extent when stripe_count == 1, whose single object mirrors the
// file byte for byte.  An empty extent yields no piece.  An invalid layout
// or extent yields no piece either and error() says why.
//
//     layout::PieceCursor cursor(layout, data_servers, offset, length);
//     for (layout::Piece piece; cursor.next(piece);) { ... }
//     if (cursor.error() != nullptr) { ... }
class PieceCursor {
public:
    PieceCursor(const Layout &layout, std::uint32_t data_servers, std::uint64_t offset,
                std::uint64_t length) noexcept;

    // Stores the next piece in `out` and returns true, or returns false at
    // the end (and on error).
    [[nodiscard]] bool next(Piece &out) noexcept;

    // nullptr, or the static message that stopped the walk before it began.
    [[nodiscard]] const char *error() const noexcept { return error_; }

private:
    Layout layout_;
    std::uint32_t data_servers_;
    std::uint64_t offset_;
    std::uint64_t remaining_;
    const char *error_;
};

// Appends the pieces of [offset, offset + length) to `out`, in file order
// (see PieceCursor).  Returns nullptr, or a static message and appends
// nothing.
[[nodiscard]] const char *split(const Layout &layout, std::uint32_t data_servers,
                                std::uint64_t offset, std::uint64_t length,
                                std::vector<Piece> &out);

// ---- list I/O -----------------------------------------------------------

// A run of bytes of the file.
struct FileRegion {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    friend bool operator==(const FileRegion &, const FileRegion &) = default;
};

// A run of bytes of one data object and where it sits in the request's
// memory stream.
struct ObjectRegion {
    std::uint64_t object_offset = 0;
    std::uint64_t length = 0;
    std::uint64_t memory_offset = 0;
    friend bool operator==(const ObjectRegion &, const ObjectRegion &) = default;
};

// What one slot (one data server) of a list I/O request covers.
struct SlotRegions {
    std::uint32_t server = 0; // server_of_slot(slot)
    std::vector<ObjectRegion> regions;
    friend bool operator==(const SlotRegions &, const SlotRegions &) = default;
};

// Maps a list I/O request onto the data servers.  The request's memory is
// one flat stream: file region r's bytes follow region r - 1's.  On return
// `per_slot` has stripe_count entries (entry k for slot k; its old contents
// are cleared, the vectors' capacity reused), each with its object regions
// in stream order.  A region that continues the slot's previous one in both
// object and memory is merged into it, so the servers see fewer, larger
// pieces.  Zero-length regions take no memory and produce nothing; regions
// may overlap or come in any order.
//
// Returns nullptr, or a static message (invalid layout, a region beyond
// max_file_end, a memory stream longer than max_file_end) and then
// `per_slot` is left empty.
[[nodiscard]] const char *map_regions(const Layout &layout, std::uint32_t data_servers,
                                      std::span<const FileRegion> file_regions,
                                      std::vector<SlotRegions> &per_slot);

// ---- sizes --------------------------------------------------------------

// The file size implied by `slot`'s object holding `object_size` bytes: one
// past the file offset of the object's last byte, 0 for an empty object.
// A file's size is the maximum of this over its slots.  nullopt for an
// invalid layout, a slot >= stripe_count, or an implied size beyond
// max_file_end.
[[nodiscard]] std::optional<std::uint64_t> logical_size(const Layout &layout,
                                                        std::uint32_t data_servers,
                                                        std::uint32_t slot,
                                                        std::uint64_t object_size) noexcept;

// The size `slot`'s object must have when the file is `file_size` bytes
// long (after a truncate): the number of the file's bytes that live there.
// nullopt for an invalid layout, a slot >= stripe_count, or a file size
// beyond max_file_end.
//
// The two are inverse: object_size(logical_size(x)) == x for every object
// size x whose logical size is defined, and for every file size F the
// maximum over slots of logical_size(object_size(F)) is F.
[[nodiscard]] std::optional<std::uint64_t> object_size(const Layout &layout,
                                                       std::uint32_t data_servers,
                                                       std::uint32_t slot,
                                                       std::uint64_t file_size) noexcept;

// The text form of a layout, the value of the `pvfs.layout` extended
// attribute: "stripe_size=1048576 stripe_count=4 first_server=0".
[[nodiscard]] std::string to_text(const Layout &layout);

// Parses the text form into `out`, starting from `base`: keys given
// replace base's values, so "stripe_count=2" changes only the count.  Keys
// are separated by spaces, commas or newlines; values are decimal, and
// stripe_size also takes a K/KiB/M/MiB/G/GiB suffix (powers of 1024).
// nullptr on success, else a static message (unknown or repeated key, bad
// or overflowing number, empty text).  The result is not validated against
// a cluster: call validate().
[[nodiscard]] const char *from_text(std::string_view text, const Layout &base,
                                    Layout &out) noexcept;

} // namespace pvfs::layout

#endif // PVFS_LAYOUT_HPP
