// Striping arithmetic (include/pvfs/layout.hpp).  Every product and sum
// below is either bounded by a file offset already checked against
// max_file_end or checked before it is formed, so nothing wraps.
#include "pvfs/layout.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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

std::string to_text(const Layout &layout)
{
    return "stripe_size=" + std::to_string(layout.stripe_size) +
           " stripe_count=" + std::to_string(layout.stripe_count) +
           " first_server=" + std::to_string(layout.first_server);
}

namespace {

// A decimal u32 with an optional binary-unit suffix (when allowed).
const char *parse_u32(std::string_view text, bool units, std::uint32_t &out) noexcept
{
    std::uint64_t value = 0;
    const char *const end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (ec != std::errc{} || ptr == text.data())
        return "a value is not a decimal number";
    const std::string_view suffix(ptr, static_cast<std::size_t>(end - ptr));
    unsigned shift = 0;
    if (suffix.empty()) {
        shift = 0;
    } else if (!units) {
        return "a count or index has a suffix";
    } else if (suffix == "K" || suffix == "KiB") {
        shift = 10;
    } else if (suffix == "M" || suffix == "MiB") {
        shift = 20;
    } else if (suffix == "G" || suffix == "GiB") {
        shift = 30;
    } else {
        return "unknown size suffix (K, KiB, M, MiB, G, GiB)";
    }
    if (value > (std::uint64_t{std::numeric_limits<std::uint32_t>::max()} >> shift))
        return "a value does not fit 32 bits";
    out = static_cast<std::uint32_t>(value << shift);
    return nullptr;
}

} // namespace

const char *from_text(std::string_view text, const Layout &base, Layout &out) noexcept
{
    Layout result = base;
    unsigned seen = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        const std::size_t start = text.find_first_not_of(" ,\n\t", pos);
        if (start == std::string_view::npos)
            break;
        std::size_t stop = text.find_first_of(" ,\n\t", start);
        if (stop == std::string_view::npos)
            stop = text.size();
        pos = stop;
        const std::string_view item = text.substr(start, stop - start);
        const std::size_t eq = item.find('=');
        if (eq == std::string_view::npos)
            return "expected key=value";
        const std::string_view key = item.substr(0, eq);
        const std::string_view value = item.substr(eq + 1);
        unsigned bit = 0;
        const char *error = nullptr;
        if (key == "stripe_size") {
            bit = 1;
            error = parse_u32(value, true, result.stripe_size);
        } else if (key == "stripe_count") {
            bit = 2;
            error = parse_u32(value, false, result.stripe_count);
        } else if (key == "first_server") {
            bit = 4;
            error = parse_u32(value, false, result.first_server);
        } else {
            return "unknown key (stripe_size, stripe_count, first_server)";
        }
        if (error != nullptr)
            return error;
        if ((seen & bit) != 0)
            return "a key is given twice";
        seen |= bit;
    }
    if (seen == 0)
        return "no key=value given";
    out = result;
    return nullptr;
}

} // namespace pvfs::layout
