// The checks a config text passes before the TOML parser sees it: size,
// line length, characters (UTF-8, no control characters) and nesting
// depth.  toml11 recurses once per nesting level, scans the whole line for
// every value on it and overreads on invalid UTF-8, so without these a
// hostile text could overflow the stack, spin for minutes or crash it.
#ifndef PVFS_CONFIG_SHAPE_HPP
#define PVFS_CONFIG_SHAPE_HPP

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace pvfs::config::detail {

struct ShapeError {
    std::size_t line = 0; // 1-based; 0 when the text as a whole is refused
    std::string message;
};

// A conservative scan: for text that toml11 accepts it sees exactly the
// nesting toml11 builds; for text toml11 rejects it may refuse earlier
// (toml11 stops at its first error, so nothing beyond it matters).
[[nodiscard]] std::optional<ShapeError> check_shape(std::string_view text);

} // namespace pvfs::config::detail

#endif // PVFS_CONFIG_SHAPE_HPP
