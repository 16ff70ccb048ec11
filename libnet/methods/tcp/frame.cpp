#include "frame.hpp"

#include <cstring>

namespace bmi::tcp {

namespace {

template <typename T> void put(std::byte *p, T v) noexcept
{
    using U = std::make_unsigned_t<T>;
    auto u = static_cast<U>(v);
    for (std::size_t i = 0; i < sizeof(T); ++i) {
        p[i] = static_cast<std::byte>(u & 0xffU);
        u = static_cast<U>(u >> 8U);
    }
}

template <typename T> T get(const std::byte *p) noexcept
{
    using U = std::make_unsigned_t<T>;
    U u = 0;
    for (std::size_t i = sizeof(T); i-- > 0;)
        u = static_cast<U>((u << 8U) | std::to_integer<U>(p[i]));
    return static_cast<T>(u);
}

// Offsets in the header.
constexpr std::size_t off_magic = 0;
constexpr std::size_t off_version = 4;
constexpr std::size_t off_type = 5;
constexpr std::size_t off_flags = 6;
constexpr std::size_t off_tag = 8;
constexpr std::size_t off_status = 12;
constexpr std::size_t off_size = 16;
constexpr std::size_t off_cookie = 24;
constexpr std::size_t off_cookie2 = 32;

constexpr std::size_t hello_fixed = 22;

} // namespace

void encode(const FrameHeader &h, HeaderBytes &out) noexcept
{
    std::byte *p = out.data();
    put<std::uint32_t>(p + off_magic, frame_magic);
    put<std::uint8_t>(p + off_version, frame_version);
    put<std::uint8_t>(p + off_type, static_cast<std::uint8_t>(h.type));
    put<std::uint16_t>(p + off_flags, h.flags);
    put<std::int32_t>(p + off_tag, h.tag);
    put<std::int32_t>(p + off_status, h.status);
    put<std::uint64_t>(p + off_size, h.size);
    put<std::uint64_t>(p + off_cookie, h.cookie);
    put<std::uint64_t>(p + off_cookie2, h.cookie2);
}

const char *decode(std::span<const std::byte, frame_header_size> in, const FrameLimits &limits,
                   FrameHeader &out) noexcept
{
    const std::byte *p = in.data();
    if (get<std::uint32_t>(p + off_magic) != frame_magic)
        return "bad magic";
    if (get<std::uint8_t>(p + off_version) != frame_version)
        return "unsupported protocol version";
    const auto type = get<std::uint8_t>(p + off_type);
    if (type < static_cast<std::uint8_t>(FrameType::hello) ||
        type > static_cast<std::uint8_t>(FrameType::auth))
        return "unknown frame type";
    out.type = static_cast<FrameType>(type);
    out.flags = get<std::uint16_t>(p + off_flags);
    out.tag = get<std::int32_t>(p + off_tag);
    out.status = get<std::int32_t>(p + off_status);
    out.size = get<std::uint64_t>(p + off_size);
    out.cookie = get<std::uint64_t>(p + off_cookie);
    out.cookie2 = get<std::uint64_t>(p + off_cookie2);
    if (out.flags != 0 && (out.type != FrameType::hello || out.flags != hello_flag_auth))
        return "unknown flags";

    switch (out.type) {
    case FrameType::hello:
        // Refusals are AUTH frames.
        if (out.status != 0 || out.size < hello_fixed ||
            out.size > hello_fixed + hello_max_url + (out.flags != 0 ? max_auth_payload : 0))
            return "hello of impossible size";
        break;
    case FrameType::auth:
        if (out.status < 0 || out.size > max_auth_payload || (out.status > 0 && out.size != 0))
            return "malformed auth frame";
        break;
    case FrameType::eager:
        if (out.size > limits.eager)
            return "eager message above the advertised eager limit";
        break;
    case FrameType::unexpected:
        if (out.size > limits.unexpected)
            return "unexpected message above the advertised limit";
        break;
    case FrameType::rts:
        if (out.size > max_message_size)
            return "rendezvous of absurd size";
        if (out.cookie == 0)
            return "rendezvous without a cookie";
        break;
    case FrameType::cts:
        if (out.size != 0 || out.cookie == 0 || out.cookie2 == 0)
            return "malformed clear-to-send";
        break;
    case FrameType::data:
        if (out.size == 0 || out.size > limits.chunk || out.cookie2 == 0)
            return "data chunk of bad size or without a cookie";
        break;
    case FrameType::nack:
        if (out.size != 0 || out.cookie == 0 || out.status <= 0)
            return "malformed nack";
        break;
    case FrameType::cancel:
        if (out.size != 0 || out.cookie == 0)
            return "malformed cancel";
        break;
    case FrameType::ping:
    case FrameType::pong:
        if (out.size != 0)
            return "ping or pong with a payload";
        break;
    case FrameType::ready:
        if (out.size > max_message_size || out.cookie2 == 0)
            return "malformed ready";
        break;
    case FrameType::direct:
        if (out.size > limits.chunk)
            return "direct message above the advertised chunk size";
        break;
    }
    return nullptr;
}

std::size_t hello_size(const HelloBody &body) noexcept
{
    return hello_fixed + body.url.size();
}

void encode_hello(const HelloBody &body, std::span<std::byte> out) noexcept
{
    std::byte *p = out.data();
    put<std::uint32_t>(p, body.eager_limit);
    put<std::uint32_t>(p + 4, body.unexpected_limit);
    put<std::uint32_t>(p + 8, body.chunk);
    put<std::uint64_t>(p + 12, body.incarnation);
    put<std::uint16_t>(p + 20, static_cast<std::uint16_t>(body.url.size()));
    std::memcpy(p + hello_fixed, body.url.data(), body.url.size());
}

std::size_t hello_transport_size(std::span<const std::byte> in) noexcept
{
    if (in.size() < hello_fixed)
        return 0;
    const std::size_t n = hello_fixed + get<std::uint16_t>(in.data() + 20);
    return n <= in.size() ? n : 0;
}

const char *decode_hello(std::span<const std::byte> in, HelloBody &out)
{
    if (in.size() < hello_fixed)
        return "hello too short";
    const std::byte *p = in.data();
    out.eager_limit = get<std::uint32_t>(p);
    out.unexpected_limit = get<std::uint32_t>(p + 4);
    out.chunk = get<std::uint32_t>(p + 8);
    out.incarnation = get<std::uint64_t>(p + 12);
    const auto len = get<std::uint16_t>(p + 20);
    if (len > hello_max_url || hello_fixed + len != in.size())
        return "hello url length does not match the frame";
    if (out.eager_limit == 0 || out.unexpected_limit == 0 || out.chunk == 0)
        return "hello with a zero limit";
    if (out.incarnation == 0)
        return "hello without an incarnation";
    out.url.assign(reinterpret_cast<const char *>(p + hello_fixed), len);
    for (const char c : out.url) {
        if (c < 0x21 || c > 0x7e)
            return "hello url with a non-printable character";
    }
    return nullptr;
}

} // namespace bmi::tcp
