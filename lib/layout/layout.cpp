// Striping arithmetic (include/pvfs/layout.hpp).  Every product and sum
// below is either bounded by a file offset already checked against
// max_file_end or checked before it is formed, so nothing wraps.
#include "pvfs/layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "pvfs/types.hpp"

namespace pvfs::layout {

const char *validate(const Layout &layout, std::uint32_t data_servers) noexcept
{
    if (data_servers == 0) {
        return "the cluster has no data servers";
    }
    if (layout.stripe_size % stripe_alignment != 0) {
        return "stripe size is not a multiple of 4096";
    }
    if (layout.stripe_size < min_stripe_size) {
        return "stripe size is below the minimum (64 KiB)";
    }
    if (layout.stripe_size > max_stripe_size) {
        return "stripe size is above the maximum (1 GiB)";
    }
    if (layout.stripe_count == 0) {
        return "stripe count is 0";
    }
    if (layout.stripe_count > data_servers) {
        return "stripe count exceeds the number of data servers";
    }
    if (layout.first_server >= data_servers) {
        return "first server is not a data server index";
    }
    return nullptr;
}

const char *check_extent(std::uint64_t offset, std::uint64_t length) noexcept
{
    if (offset > max_file_end || length > max_file_end - offset) {
        return "extent ends beyond the largest file offset (2^63 - 1)";
    }
    return nullptr;
}

PieceCursor::PieceCursor(const Layout &layout, std::uint32_t data_servers, std::uint64_t offset,
                         std::uint64_t length) noexcept
    : layout_(layout), data_servers_(data_servers), offset_(offset), remaining_(length),
      error_(validate(layout, data_servers))
{
    if (error_ == nullptr) {
        error_ = check_extent(offset, length);
    }
    if (error_ != nullptr) {
        remaining_ = 0;
    }
}

bool PieceCursor::next(Piece &out) noexcept
{
    if (remaining_ == 0) {
        return false;
    }
    const std::uint64_t stripe_size = layout_.stripe_size;
    const std::uint64_t stripe = offset_ / stripe_size;
    const std::uint64_t within = offset_ % stripe_size;
    const auto slot = static_cast<std::uint32_t>(stripe % layout_.stripe_count);
    // With one slot the object is the file itself, so the rest of the
    // extent is one piece; otherwise the next stripe is on another object.
    const std::uint64_t length =
        layout_.stripe_count == 1 ? remaining_ : std::min(stripe_size - within, remaining_);
    out.slot = slot;
    out.server = server_of_slot(layout_, data_servers_, slot);
    out.file_offset = offset_;
    // (stripe / count) * S + within <= offset_: no overflow.
    out.object_offset = (stripe / layout_.stripe_count) * stripe_size + within;
    out.length = length;
    offset_ += length;
    remaining_ -= length;
    return true;
}

const char *split(const Layout &layout, std::uint32_t data_servers, std::uint64_t offset,
                  std::uint64_t length, std::vector<Piece> &out)
{
    PieceCursor cursor(layout, data_servers, offset, length);
    for (Piece piece; cursor.next(piece);) {
        out.push_back(piece);
    }
    return cursor.error();
}

const char *map_regions(const Layout &layout, std::uint32_t data_servers,
                        std::span<const FileRegion> file_regions,
                        std::vector<SlotRegions> &per_slot)
{
    // Everything is checked before anything is produced, so a failure
    // leaves no half-mapped request behind.
    if (const char *error = validate(layout, data_servers); error != nullptr) {
        per_slot.clear();
        return error;
    }
    std::uint64_t stream_length = 0;
    for (const FileRegion &region : file_regions) {
        if (const char *error = check_extent(region.offset, region.length); error != nullptr) {
            per_slot.clear();
            return error;
        }
        if (region.length > max_file_end - stream_length) {
            per_slot.clear();
            return "list I/O memory stream is longer than 2^63 - 1 bytes";
        }
        stream_length += region.length;
    }

    per_slot.resize(layout.stripe_count);
    for (std::uint32_t slot = 0; slot < layout.stripe_count; ++slot) {
        per_slot[slot].server = server_of_slot(layout, data_servers, slot);
        per_slot[slot].regions.clear();
    }
    std::uint64_t memory_offset = 0;
    for (const FileRegion &region : file_regions) {
        PieceCursor cursor(layout, data_servers, region.offset, region.length);
        for (Piece piece; cursor.next(piece);) {
            std::vector<ObjectRegion> &regions = per_slot[piece.slot].regions;
            if (!regions.empty()) {
                ObjectRegion &last = regions.back();
                if (last.object_offset + last.length == piece.object_offset &&
                    last.memory_offset + last.length == memory_offset) {
                    last.length += piece.length;
                    memory_offset += piece.length;
                    continue;
                }
            }
            regions.push_back({piece.object_offset, piece.length, memory_offset});
            memory_offset += piece.length;
        }
    }
    return nullptr;
}

std::optional<std::uint64_t> logical_size(const Layout &layout, std::uint32_t data_servers,
                                          std::uint32_t slot, std::uint64_t object_size) noexcept
{
    if (validate(layout, data_servers) != nullptr || slot >= layout.stripe_count) {
        return std::nullopt;
    }
    if (object_size == 0) {
        return 0;
    }
    const std::uint64_t stripe_size = layout.stripe_size;
    const std::uint64_t last = object_size - 1; // object offset of the last byte
    const std::uint64_t row = last / stripe_size;
    const std::uint64_t within = last % stripe_size;
    // The last byte's stripe is row * count + slot; its file offset must
    // stay below max_file_end.
    if (row > (std::numeric_limits<std::uint64_t>::max() - slot) / layout.stripe_count) {
        return std::nullopt;
    }
    const std::uint64_t stripe = row * layout.stripe_count + slot;
    if (stripe > (max_file_end - 1 - within) / stripe_size) {
        return std::nullopt;
    }
    return stripe * stripe_size + within + 1;
}

std::optional<std::uint64_t> object_size(const Layout &layout, std::uint32_t data_servers,
                                         std::uint32_t slot, std::uint64_t file_size) noexcept
{
    if (validate(layout, data_servers) != nullptr || slot >= layout.stripe_count ||
        file_size > max_file_end) {
        return std::nullopt;
    }
    const std::uint64_t stripe_size = layout.stripe_size;
    const std::uint64_t whole_stripes = file_size / stripe_size;
    const std::uint64_t tail = file_size % stripe_size;
    const std::uint64_t rows = whole_stripes / layout.stripe_count;
    // The whole stripes beyond the last full row land on slots
    // 0 .. extra - 1; the partial stripe after them on slot `extra`.
    const std::uint64_t extra = whole_stripes % layout.stripe_count;
    std::uint64_t size = rows * stripe_size;
    if (slot < extra) {
        size += stripe_size;
    } else if (slot == extra) {
        size += tail;
    }
    return size;
}

} // namespace pvfs::layout
