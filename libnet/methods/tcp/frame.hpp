// The TCP method's wire format: every message on a connection starts with
// a 40-byte frame header, little-endian, validated before anything in it is
// used.  See docs/bmi.md for the protocol.
#ifndef PVFS_LIBNET_TCP_FRAME_HPP
#define PVFS_LIBNET_TCP_FRAME_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace bmi::tcp {

inline constexpr std::uint32_t frame_magic = 0x31494d42; // "BMI1"
// 3: the authenticated handshake (hello flag, AUTH frames).
inline constexpr std::uint8_t frame_version = 3;
inline constexpr std::size_t frame_header_size = 40;
inline constexpr std::size_t hello_max_url = 512;
// The handshake bytes a hello or an AUTH frame may carry.
inline constexpr std::size_t max_auth_payload = 512;
// Hello flag: the authenticator's bytes follow the transport hello.
inline constexpr std::uint16_t hello_flag_auth = 1;
// Largest message a rendezvous may announce (1 TiB): a sanity bound.
inline constexpr std::uint64_t max_message_size = std::uint64_t{1} << 40;

enum class FrameType : std::uint8_t {
    hello = 1,      // payload: HelloBody; first frame on a connection, both ways
    eager = 2,      // payload: the message (expected)
    unexpected = 3, // payload: the message (unexpected)
    rts = 4,        // size: message length, no payload; cookie: sender op
    cts = 5,        // cookie: sender op; cookie2: receiver op
    data = 6,       // payload: a rendezvous chunk; cookie2: receiver op
    nack = 7,       // receiver refuses/ends a rendezvous; cookie: sender op; status: errno
    cancel = 8,     // sender ends a rendezvous; cookie: sender op; cookie2: receiver op or 0
    ping = 9,       // are you there?  No payload; answered with pong
    pong = 10,      // the answer to ping; no payload
    ready = 11,     // receiver: a receive is posted for tag; size: its capacity;
                    // cookie: messages seen from you; cookie2: receiver op
    direct = 12,    // payload: a message above the eager limit, sent without
                    // RTS/CTS because a READY announced its receive (cookie2)
    auth = 13,      // handshake: client -> server the proof (payload); server ->
                    // client status 0 (accepted, no payload); either way a
                    // status (positive errno, no payload) refuses
};

struct FrameHeader {
    FrameType type = FrameType::hello;
    std::uint16_t flags = 0;
    std::int32_t tag = 0;
    std::int32_t status = 0; // positive errno in nack
    std::uint64_t size = 0;  // payload bytes, or the message length in rts
    std::uint64_t cookie = 0;
    std::uint64_t cookie2 = 0;
};

// Receiver limits a decoder enforces (those it advertised in its hello).
struct FrameLimits {
    std::size_t eager = 0;
    std::size_t unexpected = 0;
    std::size_t chunk = 0;
};

// What a peer announces in its hello.
struct HelloBody {
    std::uint32_t eager_limit = 0;
    std::uint32_t unexpected_limit = 0;
    std::uint32_t chunk = 0;
    // Random per process: a new value means the peer restarted, so the
    // message counts READY frames refer to start again.
    std::uint64_t incarnation = 0;
    std::string url; // where the peer listens, "" for a pure client
};

using HeaderBytes = std::array<std::byte, frame_header_size>;

void encode(const FrameHeader &h, HeaderBytes &out) noexcept;

// Decodes and validates a header.  Returns nullptr on success, else a static
// description of what is wrong (for the log); out is then unspecified.
const char *decode(std::span<const std::byte, frame_header_size> in, const FrameLimits &limits,
                   FrameHeader &out) noexcept;

// hello payload: u32 eager, u32 unexpected, u32 chunk, u64 incarnation,
// u16 url length, url.
std::size_t hello_size(const HelloBody &body) noexcept;
void encode_hello(const HelloBody &body, std::span<std::byte> out) noexcept;
const char *decode_hello(std::span<const std::byte> in, HelloBody &out);
// A hello payload's transport part (the rest is the authenticator's):
// its length, or 0 when the payload is too short for the length it names.
[[nodiscard]] std::size_t hello_transport_size(std::span<const std::byte> in) noexcept;

} // namespace bmi::tcp

#endif // PVFS_LIBNET_TCP_FRAME_HPP
