// Sizes and durations written back: the canonical text and messages.
// (Parsing them is public: parse_size and parse_duration_ms.)
#ifndef PVFS_CONFIG_UNITS_HPP
#define PVFS_CONFIG_UNITS_HPP

#include <cstdint>
#include <string>
#include <string_view>

namespace pvfs::config::detail {

// The TOML value for a size: "4MiB" (quoted) with the largest exact unit,
// or the bare integer when no unit divides it.
[[nodiscard]] std::string size_toml(std::uint64_t bytes);

// The TOML value for a duration: "2min", "30s" or "1500ms", quoted.
[[nodiscard]] std::string duration_toml(std::uint64_t ms);

// Human form for messages: "64KiB", "1GiB", "100000 bytes".
[[nodiscard]] std::string size_text(std::uint64_t bytes);
[[nodiscard]] std::string duration_text(std::uint64_t ms);

} // namespace pvfs::config::detail

#endif // PVFS_CONFIG_UNITS_HPP
