// The ib method's wire format: every SEND starts with a 32-byte header,
// little-endian, validated before anything in it is used.  See docs/bmi.md
// ("The ib method") for the protocol.
#ifndef PVFS_LIBNET_IB_WIRE_HPP
#define PVFS_LIBNET_IB_WIRE_HPP

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace bmi::ib {

// 2: the authenticated handshake (hello cookie 1, AUTH messages).
// 3: the connect data (credits, buffer size) is under the handshake's MACs.
inline constexpr std::uint8_t wire_version = 3;
inline constexpr std::size_t header_size = 32;
inline constexpr std::size_t max_url = 512;
// Largest message a rendezvous may announce (1 TiB): a sanity bound.
inline constexpr std::uint64_t max_message_size = std::uint64_t{1} << 40;

enum class Msg : std::uint8_t {
    hello = 1,      // payload: HelloBody; the first SEND on a connection, both ways
    eager = 2,      // payload: the message (expected)
    unexpected = 3, // payload: the message (unexpected)
    rts = 4,        // size: message length; cookie: sender op; payload: segments
    fin = 5,        // receiver read all of it; cookie: sender op
    nack = 6,       // receiver refuses or ends a rendezvous; cookie: sender op;
                    // cookie2: positive errno
    cancel = 7,     // sender ends a rendezvous; cookie: sender op
    ping = 8,       // are you there?  Answered with pong
    pong = 9,
    credit = 10, // nothing but returned credits
    auth = 11,   // handshake: client -> server the proof (payload); server ->
                 // client cookie 0 (accepted); cookie a positive errno refuses
};
inline constexpr std::uint8_t last_msg = 11;
// A hello whose cookie is this carries the authenticator's bytes after
// the transport hello.
inline constexpr std::uint64_t hello_flag_auth = 1;
inline constexpr std::size_t max_auth_payload = 512;

struct Header {
    Msg type = Msg::hello;
    std::uint16_t credits = 0; // receive buffers the sender has reposted for us
    std::int32_t tag = 0;
    std::uint64_t size = 0;
    std::uint64_t cookie = 0;
    std::uint64_t cookie2 = 0;
};

// A piece of the sender's memory an RTS offers for RDMA READ.
struct Segment {
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
    std::uint32_t len = 0;
};
inline constexpr std::size_t segment_size = 16;
inline constexpr std::size_t rts_fixed = 8; // u32 count, u32 zero

struct HelloBody {
    // Random per process: a new value means the peer restarted.
    std::uint64_t incarnation = 0;
    std::string url; // where the peer listens, "" for a pure client
};

// What a connect request and its accept carry (rdma_cm private data).
struct ConnectData {
    std::uint16_t credits = 0;  // receive buffers reserved for the other side
    std::uint32_t buf_size = 0; // bytes each holds, header included
};
inline constexpr std::size_t connect_data_size = 12;

void encode(const Header &h, std::span<std::byte, header_size> out) noexcept;
// nullptr on success, else a static description of what is wrong.
const char *decode(std::span<const std::byte> in, Header &out) noexcept;

std::size_t rts_payload_size(std::size_t segments) noexcept;
void encode_rts(std::span<const Segment> segs, std::span<std::byte> out) noexcept;
// Checks that the segments cover exactly `size` bytes.
const char *decode_rts(std::span<const std::byte> in, std::uint64_t size,
                       std::vector<Segment> &out);

// A descriptor of exposed memory (Bmi::expose): the same segment list;
// *total gets the bytes it covers.
const char *decode_segments(std::span<const std::byte> in, std::vector<Segment> &out,
                            std::uint64_t &total);

std::size_t hello_size(const HelloBody &body) noexcept;
void encode_hello(const HelloBody &body, std::span<std::byte> out) noexcept;
const char *decode_hello(std::span<const std::byte> in, HelloBody &out);
// A hello payload's transport part: its length, or 0 if too short.
[[nodiscard]] std::size_t hello_transport_size(std::span<const std::byte> in) noexcept;

void encode_connect(const ConnectData &d, std::span<std::byte, connect_data_size> out) noexcept;
const char *decode_connect(std::span<const std::byte> in, ConnectData &out) noexcept;

} // namespace bmi::ib

#endif // PVFS_LIBNET_IB_WIRE_HPP
