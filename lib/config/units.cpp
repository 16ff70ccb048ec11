#include "units.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "pvfs/config.hpp"

namespace pvfs::config {

namespace {

struct Unit {
    std::string_view name;
    std::uint64_t factor;
};

// Largest first: the canonical form takes the first unit that divides.
constexpr std::array<Unit, 3> size_units{{
    {"GiB", std::uint64_t{1} << 30U},
    {"MiB", std::uint64_t{1} << 20U},
    {"KiB", std::uint64_t{1} << 10U},
}};

constexpr std::array<Unit, 3> duration_units{{
    {"min", 60'000},
    {"s", 1'000},
    {"ms", 1},
}};

[[nodiscard]] bool is_digit(char c) noexcept
{
    return c >= '0' && c <= '9';
}

template <std::size_t N>
Quantity parse_quantity(std::string_view text, const std::array<Unit, N> &units,
                        std::string_view what, std::string_view unit_list, std::string_view example)
{
    std::size_t digits = 0;
    while (digits < text.size() && is_digit(text[digits])) {
        ++digits;
    }
    if (digits == 0) {
        return {0,
                fmt::format("'{}' is not a {}: write a whole number and a unit ({}), e.g. \"{}\"",
                            text, what, unit_list, example)};
    }
    std::uint64_t number = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, number);
    if (ec != std::errc() || end != text.data() + digits) {
        return {0, fmt::format("'{}' is too large", text)};
    }
    std::string_view rest = text.substr(digits);
    if (!rest.empty() && rest.front() == ' ') {
        rest.remove_prefix(1);
    }
    if (rest.empty()) {
        return {0, fmt::format("'{}' has no unit: a {} needs one of {}, e.g. \"{}\"", text, what,
                               unit_list, example)};
    }
    for (const Unit &unit : units) {
        if (rest == unit.name) {
            if (number > std::numeric_limits<std::uint64_t>::max() / unit.factor) {
                return {0, fmt::format("'{}' is too large", text)};
            }
            return {number * unit.factor, {}};
        }
    }
    return {0, fmt::format("'{}': unknown unit '{}'; use {}", text, rest, unit_list)};
}

} // namespace

Quantity parse_size(std::string_view text)
{
    return parse_quantity(text, size_units, "size", "KiB, MiB or GiB", "1MiB");
}

Quantity parse_duration_ms(std::string_view text)
{
    return parse_quantity(text, duration_units, "duration", "ms, s or min", "30s");
}

namespace detail {

std::string size_toml(std::uint64_t bytes)
{
    for (const Unit &unit : size_units) {
        if (bytes != 0 && bytes % unit.factor == 0) {
            return fmt::format("\"{}{}\"", bytes / unit.factor, unit.name);
        }
    }
    return fmt::format("{}", bytes);
}

std::string duration_toml(std::uint64_t ms)
{
    for (const Unit &unit : duration_units) {
        if (ms != 0 && ms % unit.factor == 0) {
            return fmt::format("\"{}{}\"", ms / unit.factor, unit.name);
        }
    }
    return "\"0ms\"";
}

std::string size_text(std::uint64_t bytes)
{
    for (const Unit &unit : size_units) {
        if (bytes != 0 && bytes % unit.factor == 0) {
            return fmt::format("{}{}", bytes / unit.factor, unit.name);
        }
    }
    return fmt::format("{} bytes", bytes);
}

std::string duration_text(std::uint64_t ms)
{
    for (const Unit &unit : duration_units) {
        if (ms != 0 && ms % unit.factor == 0) {
            return fmt::format("{}{}", ms / unit.factor, unit.name);
        }
    }
    return "0ms";
}

} // namespace detail

bool metrics_file_option(const std::string &text, std::string_view example, std::string &path,
                         std::string &error)
{
    if (std::ranges::any_of(text, [](char c) {
            const auto byte = static_cast<unsigned char>(c);
            return byte < 0x20 || byte == 0x7f;
        })) {
        error = "--metrics-file: the path contains a control character";
        return false;
    }
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::absolute(text, ec).lexically_normal();
    if (ec) {
        error = fmt::format("--metrics-file {}: {}", text, ec.message());
        return false;
    }
    if (!p.has_filename() || p.filename() == "." || p.filename() == "..") {
        error = fmt::format("--metrics-file {}: names a directory; give a file, e.g. {}", text,
                            example);
        return false;
    }
    path = p.string();
    return true;
}

bool metrics_interval_option(const std::string &text, std::uint32_t &ms, std::string &error)
{
    const Quantity q = parse_duration_ms(text);
    if (!q.ok()) {
        error = "--metrics-interval: " + q.error;
        return false;
    }
    if (q.value < min_metrics_interval_ms || q.value > max_timeout_ms) {
        error = fmt::format("--metrics-interval: {} ms out of range {}ms..{}min", q.value,
                            min_metrics_interval_ms, max_timeout_ms / 60'000);
        return false;
    }
    ms = static_cast<std::uint32_t>(q.value);
    return true;
}

} // namespace pvfs::config
