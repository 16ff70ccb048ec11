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
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace bmi::tcp {

inline constexpr std::size_t seal_tag_size = 16;
inline constexpr std::size_t sealed_overhead = seal_tag_size;

// An allocator whose value-initialisation leaves the bytes as they are: a
// sealed frame's room in the send buffer is written whole (header, then
// ciphertext), so zeroing it first would be one more pass over every byte.
template <typename T> struct UninitializedAllocator : std::allocator<T> {
    template <typename U> struct rebind {
        using other = UninitializedAllocator<U>;
    };
    UninitializedAllocator() = default;
    template <typename U>
    explicit UninitializedAllocator(const UninitializedAllocator<U> & /*other*/) noexcept
    {
    }
    template <typename U> void construct(U *p) noexcept(std::is_nothrow_default_constructible_v<U>)
    {
        ::new (static_cast<void *>(p)) U; // default-initialised: bytes stay
    }
    template <typename U, typename... Args> void construct(U *p, Args &&...args)
    {
        ::new (static_cast<void *>(p)) U(std::forward<Args>(args)...);
    }
};
using SendBytes = std::vector<std::byte, UninitializedAllocator<std::byte>>;

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
    // The same frame sealed piece by piece, its payload read from where it
    // lies: begin with the record (its header at record + 16), add the
    // payload's pieces in order, finish.  AES-256-GCM encrypts each piece
    // straight into the record (one pass where a copy and a pass were);
    // XChaCha20-Poly1305 copies them in and seals at finish.
    void begin(std::byte *record) noexcept;
    void add(const std::byte *piece, std::size_t n) noexcept;
    void finish() noexcept;
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
    std::byte *record_ = nullptr; // the frame being sealed by begin/add/finish
    std::size_t filled_ = 0;      // its payload bytes added so far
    bool failed_ = false;         // libcrypto refused a step (never expected)
};

// The payload bytes a frame of this header carries on the wire (an RTS's
// and a READY's size are a message length and a capacity, not payload).
[[nodiscard]] inline std::uint64_t wire_payload(const FrameHeader &h) noexcept
{
    return h.type == FrameType::rts || h.type == FrameType::ready ? 0 : h.size;
}

} // namespace bmi::tcp

#endif // PVFS_LIBNET_TCP_SEAL_HPP
