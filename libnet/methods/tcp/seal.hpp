// The TCP method's sealed frames (docs/bmi.md "Encryption"): once a
// connection's handshake chose a cipher, every frame after it travels as
//
//     tag (16) | header (40, in the clear) | payload (encrypted)
//
// sealed with the direction's key, the header as associated data and the
// direction's frame counter as the nonce, so that a frame altered, dropped,
// replayed or moved fails to open.  A frame is opened whole before any of
// it is parsed: no byte of a payload reaches a receive unchecked.
#ifndef PVFS_LIBNET_TCP_SEAL_HPP
#define PVFS_LIBNET_TCP_SEAL_HPP

#include "bmi/bmi.hpp"
#include "frame.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace bmi::tcp {

inline constexpr std::size_t seal_tag_size = 16;
inline constexpr std::size_t sealed_overhead = seal_tag_size;

// One connection's sealing state: both directions' keys and counters.
class Sealer {
public:
    // `client`: this side made the connection (it sends under seal_c2s).
    Sealer(const Identity &id, bool client);
    ~Sealer();
    Sealer(const Sealer &) = delete;
    Sealer &operator=(const Sealer &) = delete;
    Sealer(Sealer &&) = delete;
    Sealer &operator=(Sealer &&) = delete;

    [[nodiscard]] Cipher cipher() const noexcept { return cipher_; }
    // Seals the frame at `record`: its header at record + 16, its payload
    // (`len` bytes) right after, encrypted in place; the tag goes in the
    // first 16 bytes.
    void seal(std::byte *record, std::size_t len) noexcept;
    // Opens the frame at `record` (as seal wrote it) in place; false if it
    // does not open (altered, replayed, out of order).  The counter moves
    // on only for a frame that opened.
    [[nodiscard]] bool open(std::byte *record, std::size_t len) noexcept;

private:
    struct Keys;
    Cipher cipher_;
    std::unique_ptr<Keys> keys_;
    std::uint64_t tx_counter_ = 0;
    std::uint64_t rx_counter_ = 0;
};

// The payload bytes a frame of this header carries on the wire (an RTS's
// and a READY's size are a message length and a capacity, not payload).
[[nodiscard]] inline std::uint64_t wire_payload(const FrameHeader &h) noexcept
{
    return h.type == FrameType::rts || h.type == FrameType::ready ? 0 : h.size;
}

} // namespace bmi::tcp

#endif // PVFS_LIBNET_TCP_SEAL_HPP
