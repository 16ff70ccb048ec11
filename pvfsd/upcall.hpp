// pvfsd's side of the /dev/pvfsd messages (include/pvfs/pvfsd_dev.h):
// checked views of upcalls and a builder of downcalls.  Nothing here
// trusts the kernel's lengths: every body and tail is bounds-checked.
#pragma once

#include <pvfs/pvfsd_dev.h>
#include <pvfs/types.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace pvfs::pvfsd {

// One upcall as read from the device.
class Upcall {
public:
    // nullopt (and `error` set) when the bytes are no well-formed message.
    static std::optional<Upcall> parse(std::span<const std::byte> bytes, std::string &error);

    [[nodiscard]] const pvfsd_msg_hdr &header() const noexcept { return hdr_; }
    [[nodiscard]] std::uint16_t op() const noexcept { return hdr_.op; }
    [[nodiscard]] std::uint64_t tag() const noexcept { return hdr_.tag; }

    // The fixed body, when the message holds at least sizeof(Body) bytes of it.
    template <typename Body> [[nodiscard]] std::optional<Body> body() const
    {
        static_assert(std::is_trivially_copyable_v<Body>);
        if (body_.size() < sizeof(Body))
            return std::nullopt;
        Body b{};
        std::memcpy(&b, body_.data(), sizeof(Body));
        return b;
    }
    // The tail after a fixed body of `fixed` bytes: `len` bytes at `offset`
    // into it, or nullopt when they are not all there.
    [[nodiscard]] std::optional<std::string_view> tail(std::size_t fixed, std::size_t offset,
                                                       std::size_t len) const;
    // Bytes after the fixed body.
    [[nodiscard]] std::size_t tail_size(std::size_t fixed) const noexcept
    {
        return body_.size() > fixed ? body_.size() - fixed : 0;
    }

private:
    pvfsd_msg_hdr hdr_{};
    std::vector<std::byte> body_;
};

// A downcall answering one upcall.
class Downcall {
public:
    Downcall(std::uint16_t op, std::uint64_t tag) : op_(op), tag_(tag) {}

    template <typename Body> void put(const Body &b)
    {
        static_assert(std::is_trivially_copyable_v<Body>);
        put_bytes(std::as_bytes(std::span(&b, 1)));
    }
    void put_bytes(std::span<const std::byte> bytes)
    {
        if (bytes.empty())
            return;
        const std::size_t at = body_.size();
        body_.resize(at + bytes.size());
        std::memcpy(body_.data() + at, bytes.data(), bytes.size());
    }
    void put_string(std::string_view s) { put_bytes(std::as_bytes(std::span(s.data(), s.size()))); }
    void pad_to(std::size_t alignment)
    {
        while (body_.size() % alignment != 0)
            body_.push_back(std::byte{0});
    }
    [[nodiscard]] std::size_t body_size() const noexcept { return body_.size(); }
    // status: 0 or a negative errno (anything else becomes -EIO); an error
    // drops the body.
    [[nodiscard]] std::vector<std::byte> finish(int status) const;

private:
    std::uint16_t op_;
    std::uint64_t tag_;
    std::vector<std::byte> body_;
};

[[nodiscard]] Credentials credentials_of(const pvfsd_req_common &common);
[[nodiscard]] pvfsd_attr to_dev_attr(const Attr &a);
[[nodiscard]] const char *op_name(unsigned op) noexcept;
// A name from the kernel: 1..255 bytes, no NUL, no '/'.
[[nodiscard]] bool valid_name(std::string_view name) noexcept;

} // namespace pvfs::pvfsd
