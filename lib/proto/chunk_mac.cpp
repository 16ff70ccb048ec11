// Chunk MACs (docs/protocol.md "Chunk MACs"): Poly1305 under a one-time
// key per chunk.  Poly1305 is the fastest of the MACs measured (bench/net
// net-mac, docs/security.md "Chunk MACs"), but a Poly1305 key must never
// MAC two messages: the one-time key is a keyed BLAKE2b of everything
// that makes the chunk unique (the request's ids, which the replay guard
// never lets repeat, the server, the object, the chunk's index and
// length, the direction), under the connection's session key.
//
// The Poly1305 itself is OpenSSL libcrypto's: its AVX2/AVX-512 code runs
// about 3x libsodium 1.0.18's on the same CPU (net-mac, docs/security.md
// "Chunk MACs"), and the MAC is the same function, so the tags do not
// change (proto_test:chunk_mac_matches_libsodium).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include <openssl/evp.h>
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

struct MacDeleter {
    void operator()(EVP_MAC *m) const noexcept { EVP_MAC_free(m); }
    void operator()(EVP_MAC_CTX *c) const noexcept { EVP_MAC_CTX_free(c); }
};

// One context per thread, keyed afresh per chunk (EVP_MAC_init).  Fetched
// once: a fetch walks the provider tables under a lock.
EVP_MAC_CTX &poly1305_context() noexcept
{
    static const std::unique_ptr<EVP_MAC, MacDeleter> algorithm(
        EVP_MAC_fetch(nullptr, "POLY1305", nullptr));
    thread_local const std::unique_ptr<EVP_MAC_CTX, MacDeleter> context(
        algorithm ? EVP_MAC_CTX_new(algorithm.get()) : nullptr);
    if (!context)
        std::abort(); // libcrypto without Poly1305: no MAC can be made
    return *context;
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
    EVP_MAC_CTX &ctx = poly1305_context();
    bool ok = EVP_MAC_init(&ctx, one_time.data(), one_time.size(), nullptr) == 1;
    sodium_memzero(one_time.data(), one_time.size());
    for (const auto &p : pieces)
        ok = ok && EVP_MAC_update(&ctx, bytes(p.data()), p.size()) == 1;
    ChunkMac tag{};
    std::size_t written = 0;
    ok = ok && EVP_MAC_final(&ctx, reinterpret_cast<unsigned char *>(tag.data()), &written,
                             tag.size()) == 1;
    if (!ok || written != tag.size())
        std::abort(); // cannot happen with a 32-byte key; a wrong tag must never go out
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
