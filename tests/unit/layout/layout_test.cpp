// Tests of the striping arithmetic (include/pvfs/layout.hpp).  Every
// function is checked against a reference model that places each byte on
// its own, straight from the definition in types.hpp, over many seeded
// random layouts and extents; then the edges one by one.
#include <atf-c++.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pvfs/layout.hpp"
#include "pvfs/types.hpp"

namespace layout = pvfs::layout;
using layout::FileRegion;
using layout::ObjectRegion;
using layout::Piece;
using layout::SlotRegions;
using pvfs::Layout;

namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
constexpr std::uint64_t max_end = layout::max_file_end;

void require_msg(bool ok, const std::string &why)
{
    if (!ok) {
        ATF_FAIL(why);
    }
}

std::string show(const Layout &l, std::uint32_t n)
{
    return fmt::format("layout(S={}, count={}, first={}, N={})", l.stripe_size, l.stripe_count,
                       l.first_server, n);
}

std::string show(const Piece &p)
{
    return fmt::format("{{slot {} server {} file {} object {} length {}}}", p.slot, p.server,
                       p.file_offset, p.object_offset, p.length);
}

std::string show(const std::vector<Piece> &pieces)
{
    std::string out;
    for (const Piece &p : pieces) {
        out += show(p) + " ";
    }
    return out;
}

// ---- the reference model: one byte at a time ----------------------------

struct BytePlace {
    std::uint32_t slot;
    std::uint32_t server;
    std::uint64_t object_offset;
};

// The definition, spelled out: stripe i = b / S lives on server
// (first + i % count) % N at object offset (i / count) * S + b % S.
BytePlace place(const Layout &l, std::uint32_t n, std::uint64_t byte)
{
    const std::uint64_t stripe = byte / l.stripe_size;
    const auto slot = static_cast<std::uint32_t>(stripe % l.stripe_count);
    return {slot, static_cast<std::uint32_t>((l.first_server + slot) % n),
            (stripe / l.stripe_count) * l.stripe_size + byte % l.stripe_size};
}

// Groups the extent's bytes into maximal runs contiguous in file and object.
std::vector<Piece> reference_pieces(const Layout &l, std::uint32_t n, std::uint64_t offset,
                                    std::uint64_t length)
{
    std::vector<Piece> out;
    for (std::uint64_t b = offset; b < offset + length; ++b) {
        const BytePlace at = place(l, n, b);
        if (!out.empty() && out.back().slot == at.slot &&
            out.back().object_offset + out.back().length == at.object_offset) {
            ++out.back().length;
        } else {
            out.push_back({at.slot, at.server, b, at.object_offset, 1});
        }
    }
    return out;
}

// Per slot, the bytes of the memory stream grouped into runs contiguous in
// object and memory.
std::vector<SlotRegions> reference_regions(const Layout &l, std::uint32_t n,
                                           const std::vector<FileRegion> &regions)
{
    std::vector<SlotRegions> out(l.stripe_count);
    for (std::uint32_t slot = 0; slot < l.stripe_count; ++slot) {
        out[slot].server = (l.first_server + slot) % n;
    }
    std::uint64_t memory = 0;
    for (const FileRegion &r : regions) {
        for (std::uint64_t b = r.offset; b < r.offset + r.length; ++b, ++memory) {
            const BytePlace at = place(l, n, b);
            std::vector<ObjectRegion> &list = out[at.slot].regions;
            if (!list.empty() &&
                list.back().object_offset + list.back().length == at.object_offset &&
                list.back().memory_offset + list.back().length == memory) {
                ++list.back().length;
            } else {
                list.push_back({at.object_offset, 1, memory});
            }
        }
    }
    return out;
}

// ---- random layouts -------------------------------------------------------

struct Cluster {
    Layout layout;
    std::uint32_t servers = 0;
};

// The same seed every run, so a failure reproduces.
std::mt19937_64 deterministic_rng(std::uint64_t seed)
{
    return std::mt19937_64(seed); // NOLINT(cert-msc32-c,cert-msc51-cpp): reproducible on purpose
}

// Small stripes keep the byte-by-byte model cheap; the arithmetic does not
// care about the size beyond its being a multiple of 4096.
Cluster random_cluster(std::mt19937_64 &rng, std::uint32_t max_stripes_kib = 256)
{
    const auto servers = static_cast<std::uint32_t>(std::uniform_int_distribution<>(1, 9)(rng));
    const auto count =
        static_cast<std::uint32_t>(std::uniform_int_distribution<std::uint32_t>(1, servers)(rng));
    const auto first = static_cast<std::uint32_t>(
        std::uniform_int_distribution<std::uint32_t>(0, servers - 1)(rng));
    const auto pages = std::uniform_int_distribution<std::uint32_t>(16, max_stripes_kib / 4)(rng);
    return {{pages * 4096, count, first}, servers};
}

std::uint64_t uniform(std::mt19937_64 &rng, std::uint64_t lo, std::uint64_t hi)
{
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
}

// An offset that is often near a stripe boundary, sometimes huge.
std::uint64_t random_offset(std::mt19937_64 &rng, const Layout &l, std::uint64_t length)
{
    const std::uint64_t s = l.stripe_size;
    switch (uniform(rng, 0, 4)) {
    case 0:
        return uniform(rng, 0, 3 * s * l.stripe_count);
    case 1: { // a stripe boundary, +-1
        const std::uint64_t k = uniform(rng, 0, 20);
        return k * s + uniform(rng, 0, 2) - (k == 0 ? 0 : 1);
    }
    case 2:
        return max_end - length - uniform(rng, 0, 3 * s);
    case 3:
        return max_end - length;
    default:
        return uniform(rng, 0, max_end - length);
    }
}

const Layout good{64 * 1024, 4, 1};

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(validate_rules);
ATF_TEST_CASE_BODY(validate_rules)
{
    ATF_REQUIRE(layout::validate(good, 4) == nullptr);
    ATF_REQUIRE(layout::validate({1U << 30U, 1, 0}, 1) == nullptr);
    ATF_REQUIRE(layout::validate({64 * 1024, 8, 7}, 8) == nullptr);
    const std::vector<std::pair<Layout, std::uint32_t>> bad = {
        {{64 * 1024 + 512, 1, 0}, 4},    // not page-aligned
        {{60 * 1024, 1, 0}, 4},          // below 64 KiB
        {{(1U << 30U) + 4096, 1, 0}, 4}, // above 1 GiB
        {{0, 1, 0}, 4},
        {{64 * 1024, 0, 0}, 4}, // no slot
        {{64 * 1024, 5, 0}, 4}, // more slots than servers
        {{64 * 1024, 1, 4}, 4}, // first server out of range
        {{64 * 1024, 1, 0}, 0}, // no data servers
        {{64 * 1024, 0xffffffffU, 0xffffffffU}, 0xffffffffU},
    };
    for (const auto &[l, n] : bad) {
        const char *why = layout::validate(l, n);
        require_msg(why != nullptr && *why != '\0', "accepted " + show(l, n));
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(extent_limits);
ATF_TEST_CASE_BODY(extent_limits)
{
    ATF_REQUIRE(layout::check_extent(0, 0) == nullptr);
    ATF_REQUIRE(layout::check_extent(0, max_end) == nullptr);
    ATF_REQUIRE(layout::check_extent(max_end, 0) == nullptr);
    ATF_REQUIRE(layout::check_extent(max_end - 1, 1) == nullptr);
    ATF_REQUIRE(layout::check_extent(max_end, 1) != nullptr);
    ATF_REQUIRE(layout::check_extent(max_end + 1, 0) != nullptr);
    ATF_REQUIRE(layout::check_extent(1, max_end) != nullptr);
    // Would wrap to a small end in 64 bits.
    ATF_REQUIRE(layout::check_extent(~std::uint64_t{0}, 2) != nullptr);
    ATF_REQUIRE(layout::check_extent(2, ~std::uint64_t{0}) != nullptr);

    std::vector<Piece> pieces;
    ATF_REQUIRE(layout::split(good, 4, max_end - 10, 11, pieces) != nullptr);
    ATF_REQUIRE(pieces.empty());
    ATF_REQUIRE(layout::split(good, 4, ~std::uint64_t{0} - 5, 10, pieces) != nullptr);
    ATF_REQUIRE(pieces.empty());
    ATF_REQUIRE(layout::split(good, 4, max_end - 10, 10, pieces) == nullptr);
    ATF_REQUIRE_EQ(pieces.size(), 1U);
    ATF_REQUIRE_EQ(pieces[0].file_offset + pieces[0].length, max_end);
}

ATF_TEST_CASE_WITHOUT_HEAD(split_matches_reference);
ATF_TEST_CASE_BODY(split_matches_reference)
{
    std::mt19937_64 rng = deterministic_rng(20240601);
    std::vector<Piece> got;
    for (int round = 0; round < 300; ++round) {
        const Cluster c = random_cluster(rng);
        const std::uint64_t s = c.layout.stripe_size;
        const std::uint64_t length =
            uniform(rng, 0, 2) == 0 ? uniform(rng, 0, 2 * s) : uniform(rng, 0, 1 * MiB);
        const std::uint64_t offset = random_offset(rng, c.layout, length);
        got.clear();
        const char *error = layout::split(c.layout, c.servers, offset, length, got);
        const std::string what =
            show(c.layout, c.servers) + fmt::format(" extent {}+{}", offset, length);
        require_msg(error == nullptr, what + ": " + (error == nullptr ? "" : error));
        const std::vector<Piece> want = reference_pieces(c.layout, c.servers, offset, length);
        require_msg(got == want, what + "\n got  " + show(got) + "\n want " + show(want));

        // The cursor yields the same pieces.
        layout::PieceCursor cursor(c.layout, c.servers, offset, length);
        std::size_t i = 0;
        for (Piece p; cursor.next(p); ++i) {
            require_msg(i < want.size() && p == want[i], what + ": cursor differs");
        }
        require_msg(i == want.size() && cursor.error() == nullptr, what + ": cursor count");
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(split_edges);
ATF_TEST_CASE_BODY(split_edges)
{
    const std::uint64_t s = 64 * KiB;
    // (layout, N, offset, length) at every boundary that matters.
    struct Case {
        Layout layout;
        std::uint32_t servers;
        std::uint64_t offset;
        std::uint64_t length;
    };
    std::vector<Case> cases;
    const std::vector<std::pair<Layout, std::uint32_t>> layouts = {
        {{64 * 1024, 1, 0}, 1}, // count 1
        {{64 * 1024, 1, 2}, 3}, // count 1 on another server
        {{64 * 1024, 3, 0}, 3}, // count == N
        {{64 * 1024, 4, 3}, 4}, // first = N - 1: wraps at once
        {{64 * 1024, 2, 4}, 5}, // first = N - 1, count < N
        {{128 * 1024, 5, 2}, 7},
    };
    for (const auto &[l, n] : layouts) {
        for (const std::uint64_t offset : {std::uint64_t{0}, s - 1, s, s + 1, 2 * s - 1, 7 * s}) {
            for (const std::uint64_t length :
                 {std::uint64_t{0}, std::uint64_t{1}, s - 1, s, s + 1, 3 * s + 7}) {
                cases.push_back({l, n, offset, length});
            }
        }
        cases.push_back({l, n, max_end - 1, 1});
        cases.push_back({l, n, max_end - 3 * s - 5, 3 * s + 5});
        cases.push_back({l, n, max_end, 0});
    }
    std::vector<Piece> got;
    for (const Case &c : cases) {
        got.clear();
        const std::string what =
            show(c.layout, c.servers) + fmt::format(" extent {}+{}", c.offset, c.length);
        require_msg(layout::split(c.layout, c.servers, c.offset, c.length, got) == nullptr, what);
        const std::vector<Piece> want = reference_pieces(c.layout, c.servers, c.offset, c.length);
        require_msg(got == want, what + "\n got  " + show(got) + "\n want " + show(want));
    }

    // Spelled out: first = N - 1 wraps to server 0 for slot 1.
    got.clear();
    ATF_REQUIRE(layout::split({64 * 1024, 3, 3}, 4, s - 1, s + 2, got) == nullptr);
    const std::vector<Piece> want = {
        {0, 3, s - 1, s - 1, 1},
        {1, 0, s, 0, s},
        {2, 1, 2 * s, 0, 1},
    };
    require_msg(got == want, "wrap: " + show(got));

    // Count 1: one piece however many stripes.
    got.clear();
    ATF_REQUIRE(layout::split({64 * 1024, 1, 0}, 2, 5, 10 * s, got) == nullptr);
    ATF_REQUIRE_EQ(got.size(), 1U);
    ATF_REQUIRE(got[0] == (Piece{0, 0, 5, 5, 10 * s}));

    // Zero length: nothing, and no error.
    got.clear();
    ATF_REQUIRE(layout::split(good, 4, 12345, 0, got) == nullptr);
    ATF_REQUIRE(got.empty());

    // split appends.
    got.assign(1, Piece{9, 9, 9, 9, 9});
    ATF_REQUIRE(layout::split(good, 4, 0, 1, got) == nullptr);
    ATF_REQUIRE_EQ(got.size(), 2U);
    ATF_REQUIRE(got[0].slot == 9);
}

ATF_TEST_CASE_WITHOUT_HEAD(cursor_rejects_bad_input);
ATF_TEST_CASE_BODY(cursor_rejects_bad_input)
{
    Piece p;
    layout::PieceCursor bad_layout({4096, 1, 0}, 1, 0, 100);
    ATF_REQUIRE(!bad_layout.next(p));
    ATF_REQUIRE(bad_layout.error() != nullptr);
    layout::PieceCursor bad_extent(good, 4, max_end, 1);
    ATF_REQUIRE(!bad_extent.next(p));
    ATF_REQUIRE(bad_extent.error() != nullptr);
    layout::PieceCursor empty(good, 4, 0, 0);
    ATF_REQUIRE(!empty.next(p));
    ATF_REQUIRE(empty.error() == nullptr);
    std::vector<Piece> out;
    ATF_REQUIRE(layout::split({64 * 1024, 2, 0}, 1, 0, 10, out) != nullptr);
    ATF_REQUIRE(out.empty());
}

ATF_TEST_CASE_WITHOUT_HEAD(map_regions_matches_reference);
ATF_TEST_CASE_BODY(map_regions_matches_reference)
{
    std::mt19937_64 rng = deterministic_rng(777);
    std::vector<SlotRegions> got;
    std::vector<FileRegion> regions;
    for (int round = 0; round < 200; ++round) {
        const Cluster c = random_cluster(rng, 128);
        const std::uint64_t s = c.layout.stripe_size;
        regions.clear();
        const std::uint64_t nregions = uniform(rng, 0, 12);
        // Mostly sorted and sometimes abutting, so merges happen; sometimes
        // out of order or overlapping, which must work too.
        std::uint64_t cursor = uniform(rng, 0, 3) == 0 ? max_end - 200 * s : uniform(rng, 0, 4 * s);
        for (std::uint64_t r = 0; r < nregions; ++r) {
            const std::uint64_t length =
                uniform(rng, 0, 3) == 0 ? uniform(rng, 0, 10) : uniform(rng, 1, 2 * s);
            std::uint64_t offset = cursor;
            switch (uniform(rng, 0, 5)) {
            case 0:
                offset = cursor + uniform(rng, 1, 2 * s); // a gap
                break;
            case 1:
                offset = cursor - std::min(cursor, uniform(rng, 0, s)); // overlap / backwards
                break;
            case 2: // next stripe of the same slot: object-adjacent after a skip
                offset = cursor + (c.layout.stripe_count - 1) * s;
                break;
            default:
                break;
            }
            regions.push_back({offset, length});
            cursor = offset + length;
        }
        const std::string what = show(c.layout, c.servers) + fmt::format(" {} regions", nregions);
        const char *error = layout::map_regions(c.layout, c.servers, regions, got);
        require_msg(error == nullptr, what + ": " + (error == nullptr ? "" : error));
        const std::vector<SlotRegions> want = reference_regions(c.layout, c.servers, regions);
        require_msg(got == want, what + ": differs from the reference");
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(map_regions_merging);
ATF_TEST_CASE_BODY(map_regions_merging)
{
    const std::uint64_t s = 64 * KiB;
    std::vector<SlotRegions> got;

    // Two slots: stripes 0 and 2 sit side by side in slot 0's object and,
    // with stripe 1 not requested, side by side in memory too: one region.
    const Layout two{64 * 1024, 2, 1};
    std::vector<FileRegion> regions = {{0, s}, {2 * s, s}};
    ATF_REQUIRE(layout::map_regions(two, 3, regions, got) == nullptr);
    ATF_REQUIRE_EQ(got.size(), 2U);
    ATF_REQUIRE_EQ(got[0].server, 1U);
    ATF_REQUIRE_EQ(got[1].server, 2U);
    ATF_REQUIRE(got[0].regions == (std::vector<ObjectRegion>{{0, 2 * s, 0}}));
    ATF_REQUIRE(got[1].regions.empty());

    // The whole range: slot 0's pieces are object-adjacent but memory has
    // stripe 1 between them, so no merge.
    regions = {{0, 3 * s}};
    ATF_REQUIRE(layout::map_regions(two, 3, regions, got) == nullptr);
    ATF_REQUIRE(got[0].regions == (std::vector<ObjectRegion>{{0, s, 0}, {s, s, 2 * s}}));
    ATF_REQUIRE(got[1].regions == (std::vector<ObjectRegion>{{0, s, s}}));

    // Count 1: abutting file regions become one object region; a zero-length
    // region in between changes nothing; a gap in the file splits.
    const Layout one{64 * 1024, 1, 0};
    regions = {{100, 50}, {150, 0}, {150, 25}, {300, 10}};
    ATF_REQUIRE(layout::map_regions(one, 1, regions, got) == nullptr);
    ATF_REQUIRE_EQ(got.size(), 1U);
    ATF_REQUIRE(got[0].regions == (std::vector<ObjectRegion>{{100, 75, 0}, {300, 10, 75}}));

    // Old contents are replaced, not appended to.
    regions = {{0, 1}};
    ATF_REQUIRE(layout::map_regions(one, 1, regions, got) == nullptr);
    ATF_REQUIRE(got[0].regions == (std::vector<ObjectRegion>{{0, 1, 0}}));

    // No regions: every slot present and empty.
    ATF_REQUIRE(layout::map_regions(two, 2, {}, got) == nullptr);
    ATF_REQUIRE_EQ(got.size(), 2U);
    ATF_REQUIRE(got[0].regions.empty() && got[1].regions.empty());
}

ATF_TEST_CASE_WITHOUT_HEAD(map_regions_rejects);
ATF_TEST_CASE_BODY(map_regions_rejects)
{
    std::vector<SlotRegions> got;
    std::vector<FileRegion> regions = {{0, 10}, {max_end - 5, 6}};
    ATF_REQUIRE(layout::map_regions(good, 4, regions, got) != nullptr);
    ATF_REQUIRE(got.empty());
    // Each region fine, their sum is not.
    regions = {{0, max_end / 2 + 1}, {0, max_end / 2 + 1}};
    ATF_REQUIRE(layout::map_regions(good, 4, regions, got) != nullptr);
    ATF_REQUIRE(got.empty());
    regions = {{0, max_end / 2}, {0, max_end / 2}};
    ATF_REQUIRE(layout::map_regions({1U << 30U, 1, 0}, 1, regions, got) == nullptr);
    ATF_REQUIRE_EQ(got.size(), 1U);
    ATF_REQUIRE(got[0].regions ==
                (std::vector<ObjectRegion>{{0, max_end / 2, 0}, {0, max_end / 2, max_end / 2}}));
    ATF_REQUIRE(layout::map_regions({64 * 1024, 3, 0}, 2, regions, got) != nullptr);
    ATF_REQUIRE(got.empty());
}

ATF_TEST_CASE_WITHOUT_HEAD(sizes_match_reference);
ATF_TEST_CASE_BODY(sizes_match_reference)
{
    std::mt19937_64 rng = deterministic_rng(4242);
    for (int round = 0; round < 40; ++round) {
        const Cluster c = random_cluster(rng, 96);
        const Layout &l = c.layout;
        const std::uint64_t s = l.stripe_size;
        const std::uint64_t span = std::min<std::uint64_t>(2 * MiB, (3 * l.stripe_count + 2) * s);
        // Walk the file byte by byte, counting each slot's bytes: after
        // byte b, counts[k] is the reference object_size(k, b + 1), and the
        // byte with object offset x - 1 on slot k gives logical_size(k, x).
        std::vector<std::uint64_t> counts(l.stripe_count, 0);
        for (std::uint32_t k = 0; k < l.stripe_count; ++k) {
            require_msg(layout::object_size(l, c.servers, k, 0) == 0U, "object_size(0)");
            require_msg(layout::logical_size(l, c.servers, k, 0) == 0U, "logical_size(0)");
        }
        const std::uint64_t step = uniform(rng, 1, 997); // sample, to keep it quick
        for (std::uint64_t b = 0; b < span; ++b) {
            const BytePlace at = place(l, c.servers, b);
            ++counts[at.slot];
            if (at.object_offset + 1 != counts[at.slot]) {
                ATF_FAIL("model: objects are not dense");
            }
            if (b % step != 0 && b + 1 != span && (b + 1) % s > 1) {
                continue;
            }
            const std::string what = show(l, c.servers) + fmt::format(" at byte {}", b);
            const auto logical = layout::logical_size(l, c.servers, at.slot, counts[at.slot]);
            require_msg(logical == b + 1, what + ": logical_size");
            std::uint64_t largest = 0;
            for (std::uint32_t k = 0; k < l.stripe_count; ++k) {
                const auto size = layout::object_size(l, c.servers, k, b + 1);
                require_msg(size == counts[k], what + fmt::format(": object_size slot {}", k));
                largest =
                    std::max(largest, layout::logical_size(l, c.servers, k, *size).value_or(~0ULL));
            }
            require_msg(largest == b + 1, what + ": max of logical sizes is not the file size");
        }
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(sizes_round_trip);
ATF_TEST_CASE_BODY(sizes_round_trip)
{
    std::mt19937_64 rng = deterministic_rng(99);
    int defined = 0;
    for (int round = 0; round < 20000; ++round) {
        const Cluster c = random_cluster(rng, 1024 * 1024);
        const Layout &l = c.layout;
        const auto slot = static_cast<std::uint32_t>(uniform(rng, 0, l.stripe_count - 1));
        // Object sizes across the whole range, and near stripe boundaries.
        std::uint64_t x = uniform(rng, 0, max_end);
        if (round % 3 == 0) {
            x = uniform(rng, 0, 1000) * l.stripe_size + uniform(rng, 0, 2) - 1;
        }
        const std::string what = show(l, c.servers) + fmt::format(" slot {} x {}", slot, x);
        const auto logical = layout::logical_size(l, c.servers, slot, x);
        if (logical) {
            ++defined;
            require_msg(*logical <= max_end && *logical >= x, what + ": logical out of range");
            require_msg(layout::object_size(l, c.servers, slot, *logical) == x,
                        what + ": object_size(logical_size(x)) != x");
        } else {
            // Undefined only when the last byte's file offset is past the end.
            const std::uint64_t last = x - 1;
            const unsigned __int128 file_last =
                (static_cast<unsigned __int128>(last / l.stripe_size) * l.stripe_count + slot) *
                    l.stripe_size +
                last % l.stripe_size;
            require_msg(x != 0 && file_last >= max_end, what + ": wrongly undefined");
        }
        // File sizes: the largest logical size over slots is the file size.
        const std::uint64_t file = uniform(rng, 0, max_end);
        std::uint64_t largest = 0;
        std::uint64_t total = 0;
        for (std::uint32_t k = 0; k < l.stripe_count; ++k) {
            const auto size = layout::object_size(l, c.servers, k, file);
            require_msg(size.has_value(), what + ": object_size undefined");
            total += *size;
            const auto back = layout::logical_size(l, c.servers, k, *size);
            require_msg(back.has_value() && *back <= file, what + ": logical beyond file");
            largest = std::max(largest, *back);
        }
        require_msg(largest == file, what + fmt::format(": file {} max logical {}", file, largest));
        require_msg(total == file, what + ": object sizes do not add up to the file size");
    }
    ATF_REQUIRE(defined > 1000);
}

ATF_TEST_CASE_WITHOUT_HEAD(sizes_edges);
ATF_TEST_CASE_BODY(sizes_edges)
{
    const std::uint64_t s = 64 * KiB;
    const Layout l{64 * 1024, 3, 2}; // N = 4
    // Slot 1's first byte is file byte S; its object of S + 1 bytes ends
    // in the second row: stripe 1 * 3 + 1 = 4, file byte 4S.
    ATF_REQUIRE(layout::logical_size(l, 4, 1, 1) == s + 1);
    ATF_REQUIRE(layout::logical_size(l, 4, 1, s) == 2 * s);
    ATF_REQUIRE(layout::logical_size(l, 4, 1, s + 1) == 4 * s + 1);
    ATF_REQUIRE(layout::object_size(l, 4, 0, s - 1) == s - 1);
    ATF_REQUIRE(layout::object_size(l, 4, 1, s - 1) == 0U);
    ATF_REQUIRE(layout::object_size(l, 4, 0, s + 1) == s);
    ATF_REQUIRE(layout::object_size(l, 4, 1, s + 1) == 1U);
    ATF_REQUIRE(layout::object_size(l, 4, 2, 3 * s) == s);
    ATF_REQUIRE(layout::object_size(l, 4, 0, 3 * s + 1) == s + 1);

    // Invalid input.
    ATF_REQUIRE(!layout::logical_size(l, 4, 3, 1));
    ATF_REQUIRE(!layout::object_size(l, 4, 3, 1));
    ATF_REQUIRE(!layout::logical_size(l, 2, 0, 1));
    ATF_REQUIRE(!layout::object_size({4096, 1, 0}, 1, 0, 1));
    ATF_REQUIRE(!layout::object_size(l, 4, 0, max_end + 1));
    ATF_REQUIRE(layout::object_size(l, 4, 0, max_end).has_value());

    // The largest file: its slots' sizes map back to exactly 2^63 - 1,
    // one byte more does not exist.
    std::uint64_t largest = 0;
    for (std::uint32_t k = 0; k < 3; ++k) {
        const auto size = layout::object_size(l, 4, k, max_end);
        ATF_REQUIRE(size.has_value());
        const auto back = layout::logical_size(l, 4, k, *size);
        ATF_REQUIRE(back.has_value());
        largest = std::max(largest, *back);
        ATF_REQUIRE(!layout::logical_size(l, 4, k, *size + (*back == max_end ? 1 : s)));
    }
    ATF_REQUIRE_EQ(largest, max_end);
    // A huge object on a wide layout would imply an offset past 2^64.
    ATF_REQUIRE(!layout::logical_size({1U << 30U, 1000, 0}, 1000, 999, max_end));
    ATF_REQUIRE(!layout::logical_size(l, 4, 0, ~std::uint64_t{0}));
    ATF_REQUIRE(layout::logical_size({64 * 1024, 1, 0}, 1, 0, max_end) == max_end);
    ATF_REQUIRE(!layout::logical_size({64 * 1024, 1, 0}, 1, 0, max_end + 1));
}

ATF_TEST_CASE_WITHOUT_HEAD(text_form);
ATF_TEST_CASE_BODY(text_form)
{
    const Layout base{1U << 20U, 4, 1};
    ATF_REQUIRE_EQ(layout::to_text(base), "stripe_size=1048576 stripe_count=4 first_server=1");
    Layout out;
    ATF_REQUIRE(layout::from_text(layout::to_text(base), Layout{}, out) == nullptr);
    ATF_REQUIRE(out == base);
    // Keys given replace the base's; the others stay.
    ATF_REQUIRE(layout::from_text("stripe_count=2", base, out) == nullptr);
    ATF_REQUIRE(out == (Layout{1U << 20U, 2, 1}));
    ATF_REQUIRE(layout::from_text(" stripe_size=64KiB,first_server=3\n", base, out) == nullptr);
    ATF_REQUIRE(out == (Layout{64U << 10U, 4, 3}));
    ATF_REQUIRE(layout::from_text("stripe_size=2M", base, out) == nullptr);
    ATF_REQUIRE_EQ(out.stripe_size, 2U << 20U);
    ATF_REQUIRE(layout::from_text("stripe_size=3G", base, out) == nullptr);
    ATF_REQUIRE_EQ(out.stripe_size, 3U << 30U);
    // Rejected, and `out` untouched.
    out = Layout{};
    for (const char *bad :
         {"", "   ", "stripe_count", "stripe_count=", "stripe_count=x", "stripe_count=2K",
          "stripe_size=4T", "stripe_size=4G", "stripe_count=4294967296", "stripe_count=-1",
          "colour=red", "stripe_count=2 stripe_count=3", "stripe_size=1MiBB"}) {
        if (layout::from_text(bad, base, out) == nullptr)
            ATF_FAIL(std::string("accepted: '") + bad + "'");
        ATF_REQUIRE(out == Layout{});
    }
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, validate_rules);
    ATF_ADD_TEST_CASE(tcs, extent_limits);
    ATF_ADD_TEST_CASE(tcs, split_matches_reference);
    ATF_ADD_TEST_CASE(tcs, split_edges);
    ATF_ADD_TEST_CASE(tcs, cursor_rejects_bad_input);
    ATF_ADD_TEST_CASE(tcs, map_regions_matches_reference);
    ATF_ADD_TEST_CASE(tcs, map_regions_merging);
    ATF_ADD_TEST_CASE(tcs, map_regions_rejects);
    ATF_ADD_TEST_CASE(tcs, sizes_match_reference);
    ATF_ADD_TEST_CASE(tcs, sizes_round_trip);
    ATF_ADD_TEST_CASE(tcs, sizes_edges);
    ATF_ADD_TEST_CASE(tcs, text_form);
}
