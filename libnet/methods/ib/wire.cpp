#include "wire.hpp"

#include <bit>
#include <cstring>

namespace bmi::ib {

static_assert(std::endian::native == std::endian::little, "the wire is little-endian");

namespace {

constexpr std::uint32_t connect_magic = 0x62494d42; // "BMIb"

template <typename T> void put(std::byte *p, T v) noexcept
{
    std::memcpy(p, &v, sizeof v);
}

template <typename T> T get(const std::byte *p) noexcept
{
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

} // namespace

void encode(const Header &h, std::span<std::byte, header_size> out) noexcept
{
    std::byte *p = out.data();
    put<std::uint8_t>(p, wire_version);
    put<std::uint8_t>(p + 1, static_cast<std::uint8_t>(h.type));
    put<std::uint16_t>(p + 2, h.credits);
    put<std::int32_t>(p + 4, h.tag);
    put<std::uint64_t>(p + 8, h.size);
    put<std::uint64_t>(p + 16, h.cookie);
    put<std::uint64_t>(p + 24, h.cookie2);
}

const char *decode(std::span<const std::byte> in, Header &out) noexcept
{
    if (in.size() < header_size)
        return "message shorter than a header";
    const std::byte *p = in.data();
    if (get<std::uint8_t>(p) != wire_version)
        return "unknown protocol version";
    const auto type = get<std::uint8_t>(p + 1);
    if (type == 0 || type > last_msg)
        return "unknown message type";
    out.type = static_cast<Msg>(type);
    out.credits = get<std::uint16_t>(p + 2);
    out.tag = get<std::int32_t>(p + 4);
    out.size = get<std::uint64_t>(p + 8);
    out.cookie = get<std::uint64_t>(p + 16);
    out.cookie2 = get<std::uint64_t>(p + 24);
    const std::size_t payload = in.size() - header_size;
    switch (out.type) {
    case Msg::eager:
    case Msg::unexpected:
        if (out.size != payload)
            return "payload length differs from the header's";
        break;
    case Msg::rts:
        if (out.size == 0 || out.size > max_message_size)
            return "rendezvous of an impossible size";
        break;
    case Msg::hello:
        if (out.cookie > hello_flag_auth)
            return "hello with unknown flags";
        break;
    case Msg::auth:
        if (payload > max_auth_payload || (out.cookie != 0 && payload != 0) || out.cookie > 0xffff)
            return "malformed auth message";
        break;
    default:
        if (payload != 0)
            return "control message with a payload";
        break;
    }
    return nullptr;
}

std::size_t rts_payload_size(std::size_t segments) noexcept
{
    return rts_fixed + segments * segment_size;
}

void encode_rts(std::span<const Segment> segs, std::span<std::byte> out) noexcept
{
    std::byte *p = out.data();
    put<std::uint32_t>(p, static_cast<std::uint32_t>(segs.size()));
    put<std::uint32_t>(p + 4, 0);
    p += rts_fixed;
    for (const Segment &s : segs) {
        put<std::uint64_t>(p, s.addr);
        put<std::uint32_t>(p + 8, s.rkey);
        put<std::uint32_t>(p + 12, s.len);
        p += segment_size;
    }
}

const char *decode_segments(std::span<const std::byte> in, std::vector<Segment> &out,
                            std::uint64_t &total)
{
    if (in.size() < rts_fixed)
        return "segment list too short";
    const auto n = get<std::uint32_t>(in.data());
    if (n == 0 || in.size() != rts_payload_size(n))
        return "segment count differs from the list's length";
    out.clear();
    out.reserve(n);
    total = 0;
    const std::byte *p = in.data() + rts_fixed;
    for (std::uint32_t i = 0; i < n; ++i, p += segment_size) {
        Segment s{get<std::uint64_t>(p), get<std::uint32_t>(p + 8), get<std::uint32_t>(p + 12)};
        if (s.len == 0)
            return "empty segment";
        total += s.len;
        out.push_back(s);
    }
    if (total > max_message_size)
        return "segments of an impossible size";
    return nullptr;
}

const char *decode_rts(std::span<const std::byte> in, std::uint64_t size, std::vector<Segment> &out)
{
    std::uint64_t total = 0;
    if (const char *err = decode_segments(in, out, total))
        return err;
    if (total != size)
        return "rendezvous segments do not add up to the message";
    return nullptr;
}

std::size_t hello_size(const HelloBody &body) noexcept
{
    return 8 + 2 + body.url.size();
}

void encode_hello(const HelloBody &body, std::span<std::byte> out) noexcept
{
    put<std::uint64_t>(out.data(), body.incarnation);
    put<std::uint16_t>(out.data() + 8, static_cast<std::uint16_t>(body.url.size()));
    std::memcpy(out.data() + 10, body.url.data(), body.url.size());
}

std::size_t hello_transport_size(std::span<const std::byte> in) noexcept
{
    if (in.size() < 10)
        return 0;
    const std::size_t n = std::size_t{10} + get<std::uint16_t>(in.data() + 8);
    return n <= in.size() ? n : 0;
}

const char *decode_hello(std::span<const std::byte> in, HelloBody &out)
{
    if (in.size() < 10)
        return "short hello";
    out.incarnation = get<std::uint64_t>(in.data());
    const auto len = get<std::uint16_t>(in.data() + 8);
    if (len > max_url || in.size() != std::size_t{10} + len)
        return "hello url length is wrong";
    out.url.assign(reinterpret_cast<const char *>(in.data() + 10), len);
    for (const char c : out.url) {
        if (c < 0x21 || c > 0x7e)
            return "hello url has a non-printable byte";
    }
    return nullptr;
}

void encode_connect(const ConnectData &d, std::span<std::byte, connect_data_size> out) noexcept
{
    put<std::uint32_t>(out.data(), connect_magic);
    put<std::uint8_t>(out.data() + 4, wire_version);
    put<std::uint8_t>(out.data() + 5, 0);
    put<std::uint16_t>(out.data() + 6, d.credits);
    put<std::uint32_t>(out.data() + 8, d.buf_size);
}

const char *decode_connect(std::span<const std::byte> in, ConnectData &out) noexcept
{
    // rdma_cm may pad the private data with zeros.
    if (in.size() < connect_data_size)
        return "connect data too short";
    if (get<std::uint32_t>(in.data()) != connect_magic)
        return "not a BMI connection";
    if (get<std::uint8_t>(in.data() + 4) != wire_version)
        return "unknown protocol version";
    out.credits = get<std::uint16_t>(in.data() + 6);
    out.buf_size = get<std::uint32_t>(in.data() + 8);
    if (out.credits < 4 || out.credits > 4096)
        return "impossible credit count";
    if (out.buf_size < header_size + 1024 || out.buf_size > (std::uint32_t{64} << 20U))
        return "impossible buffer size";
    return nullptr;
}

} // namespace bmi::ib
