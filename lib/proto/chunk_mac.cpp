// Chunk MACs (docs/protocol.md "Chunk MACs"): Poly1305 under a one-time
// key per chunk.  Poly1305 is the fastest of the MACs measured (bench/net
// net-mac, docs/security.md "Chunk MACs"), but a Poly1305 key must never
// MAC two messages: the one-time key is a keyed BLAKE2b of everything
// that makes the chunk unique (the request's ids, which the replay guard
// never lets repeat, the server, the object, the chunk's index and
// length, the direction), under the connection's session key.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include <sodium.h>

#include "pvfs/proto.hpp"

namespace pvfs::proto {

namespace {

constexpr std::array<char, 12> chunk_label{'p', 'v', 'f', 's', '-', 'c',
                                           'h', 'u', 'n', 'k', '-', '1'};
constexpr std::array<char, 20> check_label{'p', 'v', 'f', 's', '-', 'c', 'h', 'u', 'n', 'k',
                                           '-', 'k', 'e', 'y', '-', 'c', 'h', 'e', 'c', 'k'};

const unsigned char *bytes(const std::byte *p) noexcept
{
    return reinterpret_cast<const unsigned char *>(p);
}

template <typename T> void put(unsigned char *&at, T value) noexcept
{
    for (std::size_t i = 0; i < sizeof(T); ++i)
        *at++ = static_cast<unsigned char>(static_cast<std::uint64_t>(value) >> (8 * i));
}

} // namespace

ChunkMac chunk_mac(const SessionKey &session_key, const ChunkBinding &b, std::uint64_t index,
                   std::span<const std::span<const std::byte>> pieces) noexcept
{
    std::uint64_t length = 0;
    for (const auto &p : pieces)
        length += p.size();
    // label | dir u8 | fs_id u32 | server u32 | handle u64 | session u64 |
    // seq u64 | request_id u64 | chunk_size u32 | index u64 | length u64
    std::array<unsigned char, chunk_label.size() + 1 + 4 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 8> in{};
    unsigned char *at = in.data();
    for (const char c : chunk_label)
        *at++ = static_cast<unsigned char>(c);
    put(at, static_cast<std::uint8_t>(b.is_write ? 1 : 0));
    put(at, b.fs_id);
    put(at, b.server_index);
    put(at, b.handle);
    put(at, b.session);
    put(at, b.seq);
    put(at, b.request_id);
    put(at, b.chunk_size);
    put(at, index);
    put(at, length);
    std::array<unsigned char, crypto_onetimeauth_KEYBYTES> one_time{};
    crypto_generichash(one_time.data(), one_time.size(), in.data(), in.size(),
                       bytes(session_key.data()), session_key.size());
    crypto_onetimeauth_state st;
    crypto_onetimeauth_init(&st, one_time.data());
    for (const auto &p : pieces)
        crypto_onetimeauth_update(&st, bytes(p.data()), p.size());
    ChunkMac tag{};
    crypto_onetimeauth_final(&st, reinterpret_cast<unsigned char *>(tag.data()));
    sodium_memzero(one_time.data(), one_time.size());
    sodium_memzero(&st, sizeof st);
    return tag;
}

bool same_mac(const ChunkMac &a, const ChunkMac &b) noexcept
{
    return crypto_verify_16(bytes(a.data()), bytes(b.data())) == 0;
}

std::uint64_t session_key_check(const SessionKey &session_key) noexcept
{
    std::array<unsigned char, 8> out{};
    crypto_generichash(out.data(), out.size(),
                       reinterpret_cast<const unsigned char *>(check_label.data()),
                       check_label.size(), bytes(session_key.data()), session_key.size());
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < out.size(); ++i)
        v |= std::uint64_t{out.at(i)} << (8 * i);
    return v == 0 ? 1 : v;
}

} // namespace pvfs::proto
