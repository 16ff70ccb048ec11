// The primitive little-endian Encoder and the bounds-checking Decoder.  Both
// expose the same member names (num, flag, type, mode, name, text, blob,
// ...), so one field list per struct (bodies.hpp) serves both directions
// and encoding and decoding cannot drift apart.
#ifndef PVFS_LIB_PROTO_CODEC_HPP
#define PVFS_LIB_PROTO_CODEC_HPP

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "pvfs/proto.hpp"
#include "pvfs/types.hpp"

namespace pvfs::proto::detail {

class Encoder {
public:
    explicit Encoder(std::vector<std::byte> &out) noexcept : out_(out) {}

    template <std::integral T> void num(T value)
    {
        using U = std::make_unsigned_t<T>;
        auto bits = static_cast<U>(value);
        for (std::size_t i = 0; i < sizeof(U); ++i) {
            out_.push_back(static_cast<std::byte>(bits & 0xFFU));
            if constexpr (sizeof(U) > 1) {
                bits = static_cast<U>(bits >> 8U);
            }
        }
    }
    // Domain checks live in the shared field lists; only a decoder acts.
    void fail_if_decoding(DecodeError /*error*/, const char * /*what*/) noexcept {}
    void flag(bool value) { num(static_cast<std::uint8_t>(value ? 1 : 0)); }
    // A field appended to a body after its first release: present only when
    // set, so a reply to a peer that does not know it keeps the old layout.
    // It must be the body's last.
    void trailing_flag(const std::optional<bool> &value)
    {
        if (value.has_value())
            flag(*value);
    }
    // The same for a structure; `each` writes its fields.
    template <class T, class F> void trailing(const std::optional<T> &value, F each)
    {
        if (value.has_value())
            each(*value);
    }
    void type(ObjectType value) { num(static_cast<std::uint8_t>(value)); }
    void mode(std::uint32_t value) { num(value); }
    void timespec(const Timespec &t)
    {
        num(t.sec);
        num(t.nsec);
    }
    void name(const std::string &s) { text(s, 0, nullptr); }
    void path(const std::string &s) { text(s, 0, nullptr); }
    void xattr_name(const std::string &s) { text(s, 0, nullptr); }
    void text(const std::string &s, std::size_t /*limit*/, const char * /*too_long*/)
    {
        num(static_cast<std::uint32_t>(s.size()));
        const auto *p = reinterpret_cast<const std::byte *>(s.data());
        out_.insert(out_.end(), p, p + s.size());
    }
    void blob(const Bytes &b, std::size_t /*limit*/, const char * /*too_long*/)
    {
        num(static_cast<std::uint32_t>(b.size()));
        out_.insert(out_.end(), b.begin(), b.end());
    }
    void hash(const std::array<std::byte, 32> &h) { out_.insert(out_.end(), h.begin(), h.end()); }
    void tag(const ChunkMac &t) { out_.insert(out_.end(), t.begin(), t.end()); }
    // An array: u32 count, then each element through `each`.
    template <class T, class Each>
    void list(const std::vector<T> &v, std::size_t /*limit*/, std::size_t /*min_element*/,
              const char * /*too_long*/, Each each)
    {
        num(static_cast<std::uint32_t>(v.size()));
        for (const T &e : v) {
            each(e);
        }
    }

    // A u32 to fill in later (a body length); returns its offset.
    std::size_t placeholder_u32()
    {
        const std::size_t at = out_.size();
        num(std::uint32_t{0});
        return at;
    }
    void patch_u32(std::size_t at, std::uint32_t value)
    {
        for (std::size_t i = 0; i < 4; ++i) {
            out_[at + i] = static_cast<std::byte>((value >> (8 * i)) & 0xFFU);
        }
    }

private:
    std::vector<std::byte> &out_;
};

class Decoder {
public:
    explicit Decoder(std::span<const std::byte> in) noexcept : in_(in) {}

    [[nodiscard]] bool ok() const noexcept { return result_.error == DecodeError::ok; }
    [[nodiscard]] const DecodeResult &result() const noexcept { return result_; }
    [[nodiscard]] std::size_t position() const noexcept { return pos_; }
    [[nodiscard]] std::size_t left() const noexcept { return in_.size() - pos_; }

    // Records the first failure only: later reads of a failed decoder
    // return zeros and change nothing.
    void fail(DecodeError error, const char *what, std::uint64_t value = 0) noexcept
    {
        if (ok()) {
            result_ = {error, what, value};
        }
    }

    void fail_if_decoding(DecodeError error, const char *what) noexcept { fail(error, what); }

    template <std::integral T> void num(T &value)
    {
        using U = std::make_unsigned_t<T>;
        if (!need(sizeof(U), "message truncated in a fixed-size field")) {
            value = 0;
            return;
        }
        U bits = 0;
        for (std::size_t i = 0; i < sizeof(U); ++i) {
            bits = static_cast<U>(bits | static_cast<U>(static_cast<U>(in_[pos_ + i]) << (8 * i)));
        }
        pos_ += sizeof(U);
        value = static_cast<T>(bits);
    }
    void trailing_flag(std::optional<bool> &value)
    {
        value.reset();
        if (left() == 0)
            return;
        bool b = false;
        flag(b);
        value = b;
    }
    // Present when bytes are left; whether it may be is the envelope's
    // flag to say (decode checks the two agree).
    template <class T, class F> void trailing(std::optional<T> &value, F each)
    {
        value.reset();
        if (left() == 0)
            return;
        T v{};
        each(v);
        value = std::move(v);
    }
    void flag(bool &value)
    {
        std::uint8_t b = 0;
        num(b);
        if (b > 1) {
            fail(DecodeError::bad_value, "boolean not 0 or 1");
        }
        value = b == 1;
    }
    void type(ObjectType &value)
    {
        std::uint8_t b = 0;
        num(b);
        if (ok() && (b < static_cast<std::uint8_t>(ObjectType::regular) ||
                     b > static_cast<std::uint8_t>(ObjectType::block_device))) {
            fail(DecodeError::bad_value, "unknown object type");
        }
        value = ok() ? static_cast<ObjectType>(b) : ObjectType::regular;
    }
    void mode(std::uint32_t &value)
    {
        num(value);
        if ((value & ~mode_perm_mask) != 0) {
            fail(DecodeError::bad_value, "mode has bits outside 07777");
        }
    }
    void timespec(Timespec &t)
    {
        num(t.sec);
        num(t.nsec);
        if (t.nsec >= 1'000'000'000U) {
            fail(DecodeError::bad_value, "timestamp nanoseconds not below 1e9");
        }
    }
    void name(std::string &s)
    {
        text(s, max_name, "name longer than 255 bytes");
        if (ok() && !valid_name(s)) {
            fail(DecodeError::bad_value, "invalid name (empty, . or .., or holds '/' or NUL)");
        }
    }
    // A symlink target: 1..max_path bytes, no NUL.
    void path(std::string &s)
    {
        text(s, max_path, "symlink target longer than 4095 bytes");
        if (ok() && (s.empty() || s.find('\0') != std::string::npos)) {
            fail(DecodeError::bad_value, "symlink target empty or holds NUL");
        }
    }
    void xattr_name(std::string &s)
    {
        text(s, max_xattr_name, "xattr name longer than 255 bytes");
        if (ok() && (s.empty() || s.find('\0') != std::string::npos)) {
            fail(DecodeError::bad_value, "xattr name empty or holds NUL");
        }
    }
    void text(std::string &s, std::size_t limit, const char *too_long)
    {
        const std::size_t n = length(limit, 1, too_long);
        if (!ok()) {
            s.clear();
            return;
        }
        s.assign(reinterpret_cast<const char *>(in_.data() + pos_), n);
        pos_ += n;
    }
    void blob(Bytes &b, std::size_t limit, const char *too_long)
    {
        const std::size_t n = length(limit, 1, too_long);
        if (!ok()) {
            b.clear();
            return;
        }
        const auto first = in_.begin() + static_cast<std::ptrdiff_t>(pos_);
        b.assign(first, first + static_cast<std::ptrdiff_t>(n));
        pos_ += n;
    }
    void hash(std::array<std::byte, 32> &h)
    {
        if (!need(h.size(), "message truncated in a hash")) {
            h.fill(std::byte{0});
            return;
        }
        std::copy_n(in_.begin() + static_cast<std::ptrdiff_t>(pos_), h.size(), h.begin());
        pos_ += h.size();
    }
    void tag(ChunkMac &t)
    {
        if (!need(t.size(), "message truncated in a chunk MAC")) {
            t.fill(std::byte{0});
            return;
        }
        std::copy_n(in_.begin() + static_cast<std::ptrdiff_t>(pos_), t.size(), t.begin());
        pos_ += t.size();
    }
    // `min_element` is the smallest encoding of one element: a count the
    // bytes left cannot hold is refused before anything is allocated.
    template <class T, class Each>
    void list(std::vector<T> &v, std::size_t limit, std::size_t min_element, const char *too_long,
              Each each)
    {
        const std::size_t n = length(limit, min_element, too_long);
        v.clear();
        if (!ok()) {
            return;
        }
        v.resize(n);
        for (T &e : v) {
            each(e);
            if (!ok()) {
                v.clear();
                return;
            }
        }
    }

private:
    bool need(std::size_t n, const char *what) noexcept
    {
        if (!ok()) {
            return false;
        }
        if (n > left()) {
            fail(DecodeError::truncated, what);
            return false;
        }
        return true;
    }
    // A u32 length or count, checked against the limit and the bytes left.
    std::size_t length(std::size_t limit, std::size_t min_element, const char *too_long)
    {
        std::uint32_t n = 0;
        num(n);
        if (!ok()) {
            return 0;
        }
        if (n > limit) {
            fail(DecodeError::too_long, too_long, n);
            return 0;
        }
        if (std::size_t{n} * min_element > left()) {
            fail(DecodeError::truncated, "length or count exceeds the bytes left");
            return 0;
        }
        return n;
    }

    std::span<const std::byte> in_;
    std::size_t pos_ = 0;
    DecodeResult result_;
};

} // namespace pvfs::proto::detail

#endif // PVFS_LIB_PROTO_CODEC_HPP
