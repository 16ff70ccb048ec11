// net-mac: which MAC the chunk MACs of docs/protocol.md "Chunk MACs" use
// (issue 25 step 4).  Not a message driver (bench/net/DRIVERS.md): it moves
// no bytes, it times the candidate MACs over chunk-sized buffers in one
// run, so that their ratios compare only the algorithms on this machine.
//
//     net-mac [--total BYTES] [--reps N]
//
// One line per (algorithm, chunk size):
//     mac alg=poly1305 size=1048576 reps=5 gibps_min=.. gibps_median=.. gibps_max=..
// Each rep MACs `total` bytes chunk by chunk, with the per-chunk work the
// protocol needs: the keyed hashes start from the session key and absorb
// the chunk's binding (40 bytes) first; Poly1305 takes a one-time key per
// chunk, keyed BLAKE2b of the binding under the session key (the plan's
// crypto_stream_chacha20 would need a nonce unique per key; the binding is
// unique per chunk already, and 40 bytes of BLAKE2b cost nothing next to
// the chunk).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <openssl/evp.h>
#include <openssl/params.h>
#include <sodium.h>

namespace {

using Clock = std::chrono::steady_clock;

struct Algorithm {
    const char *name;
    void (*mac)(const unsigned char *key, std::uint64_t index, const unsigned char *binding,
                const unsigned char *data, std::size_t size, unsigned char *tag);
};

void hmac_sha256(const unsigned char *key, std::uint64_t /*index*/, const unsigned char *binding,
                 const unsigned char *data, std::size_t size, unsigned char *tag)
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key, 32);
    crypto_auth_hmacsha256_update(&st, binding, 40);
    crypto_auth_hmacsha256_update(&st, data, size);
    std::array<unsigned char, 32> full{};
    crypto_auth_hmacsha256_final(&st, full.data());
    std::copy_n(full.begin(), 16, tag);
}

void blake2b(const unsigned char *key, std::uint64_t /*index*/, const unsigned char *binding,
             const unsigned char *data, std::size_t size, unsigned char *tag)
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, key, 32, 16);
    crypto_generichash_update(&st, binding, 40);
    crypto_generichash_update(&st, data, size);
    crypto_generichash_final(&st, tag, 16);
}

void poly1305(const unsigned char *key, std::uint64_t /*index*/, const unsigned char *binding,
              const unsigned char *data, std::size_t size, unsigned char *tag)
{
    // The one-time key as lib/proto/chunk_mac.cpp makes it: keyed BLAKE2b
    // of the chunk's binding, so that every chunk has its own key.
    std::array<unsigned char, crypto_onetimeauth_KEYBYTES> one_time{};
    crypto_generichash(one_time.data(), one_time.size(), binding, 40, key, 32);
    crypto_onetimeauth_state st;
    crypto_onetimeauth_init(&st, one_time.data());
    crypto_onetimeauth_update(&st, data, size);
    crypto_onetimeauth_final(&st, tag);
}

// Owners of OpenSSL's objects, kept for the whole run.
struct OpenSslFree {
    void operator()(EVP_MAC *m) const { EVP_MAC_free(m); }
    void operator()(EVP_MAC_CTX *c) const { EVP_MAC_CTX_free(c); }
    void operator()(EVP_CIPHER_CTX *c) const { EVP_CIPHER_CTX_free(c); }
};

EVP_CIPHER_CTX *cipher_context()
{
    static const std::unique_ptr<EVP_CIPHER_CTX, OpenSslFree> ctx(EVP_CIPHER_CTX_new());
    if (!ctx)
        std::abort();
    return ctx.get();
}

// The same MAC as poly1305 above (same one-time key, same tag) computed by
// OpenSSL's libcrypto, whose Poly1305 has AVX2/AVX-512 code paths that
// libsodium 1.0.18 lacks.
void poly1305_openssl(const unsigned char *key, std::uint64_t /*index*/,
                      const unsigned char *binding, const unsigned char *data, std::size_t size,
                      unsigned char *tag)
{
    static const std::unique_ptr<EVP_MAC, OpenSslFree> mac(
        EVP_MAC_fetch(nullptr, "POLY1305", nullptr));
    static const std::unique_ptr<EVP_MAC_CTX, OpenSslFree> owner(mac ? EVP_MAC_CTX_new(mac.get())
                                                                     : nullptr);
    EVP_MAC_CTX *ctx = owner.get();
    if (ctx == nullptr)
        std::abort();
    std::array<unsigned char, crypto_onetimeauth_KEYBYTES> one_time{};
    crypto_generichash(one_time.data(), one_time.size(), binding, 40, key, 32);
    std::size_t out = 0;
    if (EVP_MAC_init(ctx, one_time.data(), one_time.size(), nullptr) != 1 ||
        EVP_MAC_update(ctx, data, size) != 1 || EVP_MAC_final(ctx, tag, &out, 16) != 1)
        std::abort();
}

// AES-256-GMAC: AES-256-GCM with the chunk as associated data and nothing
// to encrypt, the nonce from the chunk's binding.
void gmac_openssl(const unsigned char *key, std::uint64_t /*index*/, const unsigned char *binding,
                  const unsigned char *data, std::size_t size, unsigned char *tag)
{
    EVP_CIPHER_CTX *ctx = cipher_context();
    int n = 0;
    if (EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, binding) != 1 ||
        EVP_EncryptUpdate(ctx, nullptr, &n, data, static_cast<int>(size)) != 1 ||
        EVP_EncryptFinal_ex(ctx, nullptr, &n) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag) != 1)
        std::abort();
}

// The sealing ciphers of docs/bmi.md "Encryption", per frame: libsodium's
// (as the TCP method uses them) beside OpenSSL's AES-256-GCM, in place.
std::vector<unsigned char> &seal_buffer(std::size_t size)
{
    static std::vector<unsigned char> b;
    if (b.size() < size)
        b.resize(size);
    return b;
}

void aes256gcm_sodium(const unsigned char *key, std::uint64_t index, const unsigned char *binding,
                      const unsigned char *data, std::size_t size, unsigned char *tag)
{
    std::vector<unsigned char> &b = seal_buffer(size);
    std::array<unsigned char, crypto_aead_aes256gcm_NPUBBYTES> nonce{};
    std::copy_n(reinterpret_cast<const unsigned char *>(&index), sizeof index, nonce.begin());
    unsigned long long tag_len = 0;
    crypto_aead_aes256gcm_encrypt_detached(b.data(), tag, &tag_len, data, size, binding, 40,
                                           nullptr, nonce.data(), key);
}

void xchacha20_sodium(const unsigned char *key, std::uint64_t index, const unsigned char *binding,
                      const unsigned char *data, std::size_t size, unsigned char *tag)
{
    std::vector<unsigned char> &b = seal_buffer(size);
    std::array<unsigned char, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES> nonce{};
    std::copy_n(reinterpret_cast<const unsigned char *>(&index), sizeof index, nonce.begin());
    unsigned long long tag_len = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt_detached(b.data(), tag, &tag_len, data, size,
                                                        binding, 40, nullptr, nonce.data(), key);
}

void aes256gcm_openssl(const unsigned char *key, std::uint64_t index, const unsigned char *binding,
                       const unsigned char *data, std::size_t size, unsigned char *tag)
{
    EVP_CIPHER_CTX *ctx = cipher_context();
    std::vector<unsigned char> &b = seal_buffer(size);
    std::array<unsigned char, 12> nonce{};
    std::copy_n(reinterpret_cast<const unsigned char *>(&index), sizeof index, nonce.begin());
    int n = 0;
    if (EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, nonce.data()) != 1 ||
        EVP_EncryptUpdate(ctx, nullptr, &n, binding, 40) != 1 ||
        EVP_EncryptUpdate(ctx, b.data(), &n, data, static_cast<int>(size)) != 1 ||
        EVP_EncryptFinal_ex(ctx, b.data() + n, &n) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag) != 1)
        std::abort();
}

// A positive decimal number, or 0 when the text is not one.
std::uint64_t parse(const char *text)
{
    char *end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (end == text || *end != '\0') {
        std::fprintf(stderr, "net-mac: bad number %s\n", text);
        return 0;
    }
    return v;
}

} // namespace

int main(int argc, char **argv)
{
    std::uint64_t total = std::uint64_t{512} << 20U;
    std::uint64_t reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view opt = argv[i];
        if (opt == "--total")
            total = parse(argv[i + 1]);
        else if (opt == "--reps")
            reps = parse(argv[i + 1]);
        if ((opt != "--total" && opt != "--reps") || total == 0 || reps == 0) {
            std::fprintf(stderr, "usage: net-mac [--total BYTES] [--reps N]\n");
            return 2;
        }
    }
    if (sodium_init() < 0)
        return 1;
    const std::array<Algorithm, 8> algorithms{{{"hmac-sha256", hmac_sha256},
                                               {"blake2b", blake2b},
                                               {"poly1305", poly1305},
                                               {"poly1305-openssl", poly1305_openssl},
                                               {"gmac-openssl", gmac_openssl},
                                               {"seal-aes256gcm-sodium", aes256gcm_sodium},
                                               {"seal-xchacha20-sodium", xchacha20_sodium},
                                               {"seal-aes256gcm-openssl", aes256gcm_openssl}}};
    const std::array<std::size_t, 2> sizes{std::size_t{64} << 10U, std::size_t{1} << 20U};
    std::vector<unsigned char> data(sizes.back());
    randombytes_buf(data.data(), data.size());
    std::array<unsigned char, 32> key{};
    randombytes_buf(key.data(), key.size());
    std::array<unsigned char, 40> binding{};
    std::array<unsigned char, 16> tag{};
    unsigned sink = 0;
    for (const std::size_t size : sizes) {
        // The algorithms interleaved rep by rep: a neighbour's load on this
        // shared machine hits all of them alike.
        std::vector<std::vector<double>> rates(algorithms.size());
        for (std::uint64_t rep = 0; rep < reps; ++rep) {
            for (std::size_t a = 0; a < algorithms.size(); ++a) {
                const std::uint64_t chunks = std::max<std::uint64_t>(1, total / size);
                const auto t0 = Clock::now();
                for (std::uint64_t c = 0; c < chunks; ++c) {
                    binding[0] = static_cast<unsigned char>(c);
                    algorithms.at(a).mac(key.data(), c, binding.data(), data.data(), size,
                                         tag.data());
                    sink += tag[0];
                }
                const double s = std::chrono::duration<double>(Clock::now() - t0).count();
                rates.at(a).push_back(static_cast<double>(chunks * size) / s / 1073741824.0);
            }
        }
        for (std::size_t a = 0; a < algorithms.size(); ++a) {
            std::vector<double> &r = rates.at(a);
            std::sort(r.begin(), r.end());
            std::printf("mac alg=%s size=%zu reps=%llu gibps_min=%.3f gibps_median=%.3f "
                        "gibps_max=%.3f\n",
                        algorithms.at(a).name, size, static_cast<unsigned long long>(reps),
                        r.front(), r[r.size() / 2], r.back());
        }
    }
    return sink == 0xFFFFFFFFU ? 1 : 0;
}
