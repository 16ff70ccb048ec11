// Sealed frames (seal.hpp): AES-256-GCM where both ends have AES-NI, by
// OpenSSL libcrypto (its VAES/AVX-512 and AVX code seals at about 2.4x
// libsodium 1.0.18's rate on the same CPU: net-mac, docs/bmi.md
// "Encryption"; the cipher is the standard one, so the wire does not
// change), else libsodium's XChaCha20-Poly1305 (IETF), which OpenSSL lacks.
#include "seal.hpp"

#include <openssl/evp.h>
#include <sodium.h>

#include <climits>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace bmi::tcp {

namespace {

struct CipherContextDeleter {
    void operator()(EVP_CIPHER_CTX *c) const noexcept { EVP_CIPHER_CTX_free(c); }
};
using CipherContext = std::unique_ptr<EVP_CIPHER_CTX, CipherContextDeleter>;

} // namespace

struct Sealer::Keys {
    // Keyed once; each frame sets only its nonce.  EVP_CIPHER_CTX_free
    // cleanses the key schedule.
    CipherContext aes_tx;
    CipherContext aes_rx;
    std::array<unsigned char, crypto_aead_xchacha20poly1305_ietf_KEYBYTES> tx{};
    std::array<unsigned char, crypto_aead_xchacha20poly1305_ietf_KEYBYTES> rx{};

    Keys() = default;
    Keys(const Keys &) = delete;
    Keys &operator=(const Keys &) = delete;
    Keys(Keys &&) = delete;
    Keys &operator=(Keys &&) = delete;
    ~Keys()
    {
        sodium_memzero(tx.data(), tx.size());
        sodium_memzero(rx.data(), rx.size());
    }
};

namespace {

// The nonce: the frame counter, little-endian, zero-padded.
template <std::size_t N> std::array<unsigned char, N> nonce_of(std::uint64_t counter) noexcept
{
    std::array<unsigned char, N> n{};
    for (std::size_t i = 0; i < 8; ++i)
        n.at(i) = static_cast<unsigned char>((counter >> (8 * i)) & 0xffU);
    return n;
}

unsigned char *uc(std::byte *p) noexcept
{
    return reinterpret_cast<unsigned char *>(
        p); // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
}

constexpr std::size_t gcm_nonce_size = 12;

CipherContext aes_context(const unsigned char *key, bool encrypt)
{
    CipherContext c(EVP_CIPHER_CTX_new());
    if (!c ||
        EVP_CipherInit_ex(c.get(), EVP_aes_256_gcm(), nullptr, key, nullptr, encrypt ? 1 : 0) != 1)
        throw std::runtime_error("OpenSSL cannot set up AES-256-GCM");
    return c;
}

// One AES-256-GCM operation in place: the header as associated data, the
// payload (at most a frame's, far below INT_MAX) en- or decrypted.  For a
// decryption `tag` is checked (EVP_CipherFinal_ex fails on a mismatch).
bool aes_gcm(EVP_CIPHER_CTX *c, std::uint64_t counter, const unsigned char *ad,
             unsigned char *payload, std::size_t len, unsigned char *tag, bool encrypt) noexcept
{
    const auto nonce = nonce_of<gcm_nonce_size>(counter);
    int n = 0;
    if (len > INT_MAX ||
        EVP_CipherInit_ex(c, nullptr, nullptr, nullptr, nonce.data(), encrypt ? 1 : 0) != 1 ||
        EVP_CipherUpdate(c, nullptr, &n, ad, static_cast<int>(frame_header_size)) != 1 ||
        EVP_CipherUpdate(c, payload, &n, payload, static_cast<int>(len)) != 1)
        return false;
    if (!encrypt &&
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, static_cast<int>(seal_tag_size), tag) != 1)
        return false;
    if (EVP_CipherFinal_ex(c, payload + n, &n) != 1)
        return false;
    return !encrypt ||
           EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, static_cast<int>(seal_tag_size), tag) == 1;
}

} // namespace

Sealer::Sealer(const Identity &id, bool client)
    : cipher_(id.cipher), keys_(std::make_unique<Keys>())
{
    if (sodium_init() < 0)
        throw std::runtime_error("libsodium cannot be initialised");
    const auto &tx = client ? id.seal_c2s : id.seal_s2c;
    const auto &rx = client ? id.seal_s2c : id.seal_c2s;
    std::memcpy(keys_->tx.data(), tx.data(), keys_->tx.size());
    std::memcpy(keys_->rx.data(), rx.data(), keys_->rx.size());
    if (cipher_ == Cipher::aes256gcm) {
        if (crypto_aead_aes256gcm_is_available() == 0)
            throw std::runtime_error("AES-256-GCM chosen on a CPU without AES-NI");
        keys_->aes_tx = aes_context(keys_->tx.data(), true);
        keys_->aes_rx = aes_context(keys_->rx.data(), false);
    } else if (cipher_ != Cipher::xchacha20poly1305) {
        throw std::runtime_error("no cipher to seal with");
    }
}

Sealer::~Sealer() = default;

void Sealer::seal(std::byte *record, std::size_t len) noexcept
{
    unsigned char *tag = uc(record);
    unsigned char *ad = uc(record + seal_tag_size);
    unsigned char *m = ad + frame_header_size;
    unsigned long long taglen = 0;
    const std::uint64_t n = tx_counter_++;
    if (cipher_ == Cipher::aes256gcm) {
        // Cannot fail for a frame's length; if it ever did, a tag of
        // zeros makes the peer refuse the frame rather than take it.
        if (!aes_gcm(keys_->aes_tx.get(), n, ad, m, len, tag, true))
            std::memset(tag, 0, seal_tag_size);
    } else {
        const auto nonce = nonce_of<crypto_aead_xchacha20poly1305_ietf_NPUBBYTES>(n);
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(m, tag, &taglen, m, len, ad,
                                                            frame_header_size, nullptr,
                                                            nonce.data(), keys_->tx.data());
    }
}

void Sealer::begin(std::byte *record) noexcept
{
    record_ = record;
    filled_ = 0;
    failed_ = false;
    if (cipher_ != Cipher::aes256gcm)
        return;
    const auto nonce = nonce_of<gcm_nonce_size>(tx_counter_);
    int n = 0;
    EVP_CIPHER_CTX *ctx = keys_->aes_tx.get();
    failed_ = EVP_CipherInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data(), 1) != 1 ||
              EVP_CipherUpdate(ctx, nullptr, &n, uc(record + seal_tag_size),
                               static_cast<int>(frame_header_size)) != 1;
}

void Sealer::add(const std::byte *piece, std::size_t n) noexcept
{
    std::byte *to = record_ + seal_tag_size + frame_header_size + filled_;
    filled_ += n;
    if (cipher_ != Cipher::aes256gcm) {
        if (to != piece)
            std::memcpy(to, piece, n);
        return;
    }
    int out = 0;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast)
    const auto *from = reinterpret_cast<const unsigned char *>(piece);
    failed_ = failed_ || n > INT_MAX ||
              EVP_CipherUpdate(keys_->aes_tx.get(), uc(to), &out, from, static_cast<int>(n)) != 1;
}

void Sealer::finish() noexcept
{
    if (cipher_ != Cipher::aes256gcm) {
        seal(record_, filled_);
        return;
    }
    ++tx_counter_;
    unsigned char *tag = uc(record_);
    int n = 0;
    EVP_CIPHER_CTX *ctx = keys_->aes_tx.get();
    if (failed_ ||
        EVP_CipherFinal_ex(ctx, uc(record_ + seal_tag_size + frame_header_size + filled_), &n) !=
            1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(seal_tag_size), tag) != 1)
        std::memset(tag, 0, seal_tag_size); // the peer refuses it rather than take it
}

bool Sealer::open(std::byte *record, std::size_t len) noexcept
{
    unsigned char *tag = uc(record);
    const unsigned char *ad = uc(record + seal_tag_size);
    unsigned char *c = uc(record + seal_tag_size + frame_header_size);
    int rc = -1;
    if (cipher_ == Cipher::aes256gcm) {
        // OpenSSL decrypts before it checks the tag: a frame that does not
        // open leaves no unauthenticated plaintext behind.
        rc = aes_gcm(keys_->aes_rx.get(), rx_counter_, ad, c, len, tag, false) ? 0 : -1;
        if (rc != 0)
            sodium_memzero(c, len);
    } else {
        const auto nonce = nonce_of<crypto_aead_xchacha20poly1305_ietf_NPUBBYTES>(rx_counter_);
        rc = crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
            c, nullptr, c, len, tag, ad, frame_header_size, nonce.data(), keys_->rx.data());
    }
    if (rc != 0)
        return false;
    ++rx_counter_;
    return true;
}

} // namespace bmi::tcp
