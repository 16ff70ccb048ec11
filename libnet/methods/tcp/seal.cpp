// Sealed frames (seal.hpp): libsodium's AEADs, AES-256-GCM through its
// precomputed state, XChaCha20-Poly1305 (IETF) otherwise.
#include "seal.hpp"

#include <sodium.h>

#include <cstring>
#include <stdexcept>

namespace bmi::tcp {

struct Sealer::Keys {
    crypto_aead_aes256gcm_state aes_tx{};
    crypto_aead_aes256gcm_state aes_rx{};
    std::array<unsigned char, crypto_aead_xchacha20poly1305_ietf_KEYBYTES> tx{};
    std::array<unsigned char, crypto_aead_xchacha20poly1305_ietf_KEYBYTES> rx{};

    Keys() = default;
    Keys(const Keys &) = delete;
    Keys &operator=(const Keys &) = delete;
    Keys(Keys &&) = delete;
    Keys &operator=(Keys &&) = delete;
    ~Keys()
    {
        sodium_memzero(&aes_tx, sizeof aes_tx);
        sodium_memzero(&aes_rx, sizeof aes_rx);
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
        crypto_aead_aes256gcm_beforenm(&keys_->aes_tx, keys_->tx.data());
        crypto_aead_aes256gcm_beforenm(&keys_->aes_rx, keys_->rx.data());
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
        const auto nonce = nonce_of<crypto_aead_aes256gcm_NPUBBYTES>(n);
        crypto_aead_aes256gcm_encrypt_detached_afternm(
            m, tag, &taglen, m, len, ad, frame_header_size, nullptr, nonce.data(), &keys_->aes_tx);
    } else {
        const auto nonce = nonce_of<crypto_aead_xchacha20poly1305_ietf_NPUBBYTES>(n);
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(m, tag, &taglen, m, len, ad,
                                                            frame_header_size, nullptr,
                                                            nonce.data(), keys_->tx.data());
    }
}

bool Sealer::open(std::byte *record, std::size_t len) noexcept
{
    const unsigned char *tag = uc(record);
    const unsigned char *ad = uc(record + seal_tag_size);
    unsigned char *c = uc(record + seal_tag_size + frame_header_size);
    int rc = -1;
    if (cipher_ == Cipher::aes256gcm) {
        const auto nonce = nonce_of<crypto_aead_aes256gcm_NPUBBYTES>(rx_counter_);
        rc = crypto_aead_aes256gcm_decrypt_detached_afternm(
            c, nullptr, c, len, tag, ad, frame_header_size, nonce.data(), &keys_->aes_rx);
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
