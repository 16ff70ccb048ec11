#include "shape.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "pvfs/config.hpp"

namespace pvfs::config::detail {

namespace {

// Walks the text as TOML's grammar nests it: headers ([a.b], [[a.b]]),
// dotted keys, arrays and inline tables, skipping strings and comments.
// Depth counts one per table a key or header opens and one per array or
// inline table; an array of tables counts one for the array.
class NestingScan {
public:
    explicit NestingScan(std::string_view text) : text_(text) {}

    std::optional<ShapeError> run()
    {
        while (pos_ < text_.size()) {
            const char c = text_[pos_];
            if (c == '\n') {
                newline();
                continue;
            }
            if (c == '#') {
                skip_comment();
                continue;
            }
            if (c == '"' || c == '\'') {
                skip_string(c);
                line_start_ = false;
                continue;
            }
            if (c == ' ' || c == '\t' || c == '\r') {
                ++pos_;
                continue;
            }
            if (line_start_ && open_.empty() && c == '[') {
                if (!header()) {
                    return too_deep();
                }
                continue;
            }
            line_start_ = false;
            if (!(in_key_ ? key_char(c) : value_char(c))) {
                return too_deep();
            }
            ++pos_;
        }
        return std::nullopt;
    }

private:
    struct Open {
        char bracket; // '[' array, '{' inline table
        unsigned depth;
    };

    [[nodiscard]] ShapeError too_deep() const
    {
        return {line_, fmt::format("nested deeper than {} levels", max_nesting)};
    }

    // The depth that keys at the current position start from.
    [[nodiscard]] unsigned key_base() const
    {
        return open_.empty() ? table_depth_ : open_.back().depth;
    }

    // The depth of a value at the current position.
    [[nodiscard]] unsigned value_base() const
    {
        if (!open_.empty() && open_.back().bracket == '[') {
            return open_.back().depth;
        }
        return value_depth_;
    }

    void newline()
    {
        ++line_;
        ++pos_;
        // Only arrays (and multi-line strings, skipped whole) span lines;
        // outside them every line starts with a key or a header.
        if (open_.empty()) {
            start_key();
            line_start_ = true;
        }
    }

    void start_key()
    {
        in_key_ = true;
        key_parts_ = 1;
    }

    void skip_comment()
    {
        while (pos_ < text_.size() && text_[pos_] != '\n') {
            ++pos_;
        }
    }

    // Leaves pos_ after the closing quote, or at the newline or end that
    // ends an unterminated string (the parser will report it).
    void skip_string(char quote)
    {
        const bool basic = quote == '"';
        const std::string_view triple = basic ? R"(""")" : "'''";
        if (text_.substr(pos_, 3) == triple) {
            pos_ += 3;
            while (pos_ < text_.size()) {
                if (text_.substr(pos_, 3) == triple) {
                    pos_ += 3;
                    // Up to two quotes right before the closing ones belong
                    // to the string: """a""""" is a"".
                    for (int extra = 0; extra < 2 && pos_ < text_.size() && text_[pos_] == quote;
                         ++extra) {
                        ++pos_;
                    }
                    return;
                }
                if (basic && text_[pos_] == '\\') {
                    ++pos_;
                }
                if (pos_ < text_.size() && text_[pos_] == '\n') {
                    ++line_;
                }
                ++pos_;
            }
            return;
        }
        ++pos_;
        while (pos_ < text_.size() && text_[pos_] != '\n') {
            if (text_[pos_] == quote) {
                ++pos_;
                return;
            }
            if (basic && text_[pos_] == '\\' && pos_ + 1 < text_.size() &&
                text_[pos_ + 1] != '\n') {
                ++pos_;
            }
            ++pos_;
        }
    }

    // [a.b.c] or [[a.b.c]]: sets the depth later keys start from.
    bool header()
    {
        ++pos_;
        unsigned depth = 1;
        if (pos_ < text_.size() && text_[pos_] == '[') {
            ++pos_;
            ++depth; // the array of tables
        }
        while (pos_ < text_.size() && text_[pos_] != '\n' && text_[pos_] != ']') {
            const char c = text_[pos_];
            if (c == '"' || c == '\'') {
                skip_string(c);
                continue;
            }
            if (c == '.') {
                ++depth;
            }
            ++pos_;
        }
        while (pos_ < text_.size() && text_[pos_] == ']') {
            ++pos_;
        }
        table_depth_ = depth;
        line_start_ = false;
        start_key();
        return depth <= max_nesting;
    }

    bool key_char(char c)
    {
        switch (c) {
        case '.':
            ++key_parts_;
            return key_base() + key_parts_ <= max_nesting;
        case '=':
            in_key_ = false;
            value_depth_ = key_base() + key_parts_;
            return true;
        case '}':
            // "{}" or a trailing comma: the inline table ends in key position.
            close();
            return true;
        default:
            return true;
        }
    }

    bool value_char(char c)
    {
        switch (c) {
        case '[':
        case '{': {
            const unsigned depth = value_base() + 1;
            if (depth > max_nesting) {
                return false;
            }
            open_.push_back({c, depth});
            if (c == '{') {
                start_key();
            }
            return true;
        }
        case ']':
        case '}':
            close();
            return true;
        case ',':
            if (!open_.empty() && open_.back().bracket == '{') {
                start_key();
            }
            return true;
        default:
            return true;
        }
    }

    void close()
    {
        if (!open_.empty()) {
            open_.pop_back();
        }
        // What follows a closed container is the rest of its parent's value.
        in_key_ = false;
    }

    std::string_view text_;
    std::size_t pos_ = 0;
    std::size_t line_ = 1;
    std::vector<Open> open_; // never deeper than max_nesting
    unsigned table_depth_ = 0;
    unsigned key_parts_ = 1;
    unsigned value_depth_ = 0;
    bool in_key_ = true;
    bool line_start_ = true;
};

// The length of the UTF-8 sequence `text` starts with, 0 when it is not
// valid (RFC 3629: no overlong forms, no surrogates, nothing past
// U+10FFFF).  toml11 mishandles invalid UTF-8 in strings (it reads past
// its buffer while reporting it), so none may reach it.
std::size_t utf8_length(std::string_view text)
{
    const auto at = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const auto continuation = [&](std::size_t i, unsigned lo = 0x80, unsigned hi = 0xbf) {
        return i < text.size() && at(i) >= lo && at(i) <= hi;
    };
    const unsigned lead = at(0);
    if (lead < 0x80) {
        return 1;
    }
    if (lead >= 0xc2 && lead <= 0xdf) {
        return continuation(1) ? 2 : 0;
    }
    if (lead >= 0xe0 && lead <= 0xef) {
        const unsigned lo = lead == 0xe0 ? 0xa0 : 0x80;
        const unsigned hi = lead == 0xed ? 0x9f : 0xbf;
        return continuation(1, lo, hi) && continuation(2) ? 3 : 0;
    }
    if (lead >= 0xf0 && lead <= 0xf4) {
        const unsigned lo = lead == 0xf0 ? 0x90 : 0x80;
        const unsigned hi = lead == 0xf4 ? 0x8f : 0xbf;
        return continuation(1, lo, hi) && continuation(2) && continuation(3) ? 4 : 0;
    }
    return 0;
}

} // namespace

std::optional<ShapeError> check_shape(std::string_view text)
{
    if (text.size() > max_config_bytes) {
        return ShapeError{0, fmt::format("{} bytes; a config is at most {} bytes (1 MiB)",
                                         text.size(), max_config_bytes)};
    }
    std::size_t line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < text.size();) {
        const auto byte = static_cast<unsigned char>(text[i]);
        if (byte == '\n') {
            ++line;
            line_start = ++i;
            continue;
        }
        if (i - line_start >= max_line_bytes) {
            return ShapeError{line, fmt::format("line longer than {} bytes", max_line_bytes)};
        }
        // TOML allows no control character but tab, and CR only in CRLF.
        if ((byte < 0x20 && byte != '\t' && byte != '\r') || byte == 0x7f ||
            (byte == '\r' && (i + 1 == text.size() || text[i + 1] != '\n'))) {
            return ShapeError{line, fmt::format("control character 0x{:02x}; TOML allows only tab "
                                                "and line ends",
                                                byte)};
        }
        const std::size_t length = utf8_length(text.substr(i));
        if (length == 0) {
            return ShapeError{line, "not valid UTF-8 (TOML files are UTF-8)"};
        }
        i += length;
    }
    return NestingScan(text).run();
}

} // namespace pvfs::config::detail
