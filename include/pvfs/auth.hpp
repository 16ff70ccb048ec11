// pvfs's connection handshake (docs/security.md "Connections"): the BMI
// Authenticator that servers and clients install.  Mutual challenge and
// response with the client's key (a per-client key, or the cluster key):
//
//   C -> S  hello     {version, flags, key id, nonce_c, kx_c}
//   S -> C  challenge {version, cipher, nonce_s, kx_s, mac_s}
//   C -> S  proof     {version, mac_c}
//
// T      = "pvfs-auth-2" | len | C's transport hello | C's hello
//                        | len | S's transport hello | nonce_s | cipher | kx_s
// mac_s  = BLAKE2b-256(K, "pvfs-s" | T)            (the server knows K)
// mac_c  = BLAKE2b-256(K, "pvfs-c" | T | mac_s)    (the client knows K)
// session key = BLAKE2b-256(K, "pvfs-k" | T | mac_s | mac_c)
//
// Both transport hellos (limits, incarnation, URL) and both nonces are in
// T, so neither side's hello can be altered or replayed into another
// connection.  The server looks the key up at the challenge and again at
// the proof: a key revoked in between is refused.
//
// Encryption (docs/security.md "Encryption"): the hello's flags say
// whether the client asks for it and whether it has AES-NI; the server
// picks the cipher (none, AES-256-GCM when both have AES-NI, else
// XChaCha20-Poly1305), and since flags and cipher are in T, a downgrade on
// the path fails the MACs.  A server whose key says encrypt refuses a
// client that does not ask (-EPROTONOSUPPORT); a client that asks refuses
// a server that does not seal.  kx_c and kx_s are ephemeral X25519 keys
// (crypto_kx); with a cipher, the sealing keys are
// BLAKE2b-256(session key, "pvfs-seal-c2s" | kx shared key) and "-s2c",
// so a later leak of K does not open recorded traffic.
#ifndef PVFS_AUTH_HPP
#define PVFS_AUTH_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bmi/bmi.hpp"
#include "pvfs/proto.hpp"

namespace pvfs::auth {

// 2: the encryption flags, the cipher and the ephemeral keys.
inline constexpr std::uint8_t version = 2;
inline constexpr std::size_t nonce_size = 32;
inline constexpr std::size_t mac_size = 32;
inline constexpr std::size_t kx_size = 32;
inline constexpr std::size_t hello_size = 1 + 1 + 4 + nonce_size + kx_size;
inline constexpr std::size_t challenge_size = 1 + 1 + nonce_size + kx_size + mac_size;
inline constexpr std::size_t proof_size = 1 + mac_size;

struct ClientHello {
    std::optional<std::uint32_t> key_id; // none: the cluster key
    bool encrypt = false;                // the client asks for encryption
    bool aes = false;                    // the client has AES-NI
    std::array<std::byte, nonce_size> nonce{};
    std::array<std::byte, kx_size> kx{}; // ephemeral public key
};
struct Challenge {
    bmi::Cipher cipher = bmi::Cipher::none;
    std::array<std::byte, nonce_size> nonce{};
    std::array<std::byte, kx_size> kx{};
    std::array<std::byte, mac_size> mac{};
};
struct Proof {
    std::array<std::byte, mac_size> mac{};
};

// Encodings, little-endian.  hello: u8 version, u8 flags (bit 0: a key id
// follows, bit 1: encrypt, bit 2: AES-NI), u32 key id (0 without), nonce,
// kx.  challenge: u8 version, u8 cipher, nonce, kx, mac.  proof: u8
// version, mac.  The decoders take exactly these sizes and return nullptr,
// or a static description of what is wrong; a version other than this
// one's is told apart (version_mismatch) so that the refusal can say so.
[[nodiscard]] bool version_mismatch(std::span<const std::byte> in) noexcept;
[[nodiscard]] std::vector<std::byte> encode(const ClientHello &hello);
[[nodiscard]] std::vector<std::byte> encode(const Challenge &challenge);
[[nodiscard]] std::vector<std::byte> encode(const Proof &proof);
[[nodiscard]] const char *decode(std::span<const std::byte> in, ClientHello &out) noexcept;
[[nodiscard]] const char *decode(std::span<const std::byte> in, Challenge &out) noexcept;
[[nodiscard]] const char *decode(std::span<const std::byte> in, Proof &out) noexcept;

// Whether this CPU has AES-NI (crypto_aead_aes256gcm_is_available).
[[nodiscard]] bool have_aes() noexcept;

// The name a key's connections go by: its client name, or "cluster".
[[nodiscard]] std::string identity_name(const proto::Key &key);
// What a client passes to bmi::Bmi::addr_lookup for connections under key:
// its name and a fingerprint, so that two keys (even two unnamed cluster
// keys of two clusters) never share a connection; ":encrypt" after it
// when the key asks for encryption (an encrypted and a plain client of
// one loop do not share one either).
[[nodiscard]] std::string credential(const proto::Key &key);

// The server's keys: the key of a hello's key id (nullopt: the cluster
// key), or nullptr when there is none or it is revoked.
using ServerKeys =
    std::function<std::shared_ptr<const proto::Key>(std::optional<std::uint32_t> key_id)>;

class Authenticator final : public bmi::Authenticator {
public:
    // `server_keys`: the accepting side's lookup (empty: this side only
    // connects out, every hello is refused).
    explicit Authenticator(ServerKeys server_keys = {});

    // Client: connections looked up with the returned credential prove
    // `key` (a copy is kept).
    std::string add_client_key(const proto::Key &key);

    int client_hello(std::string_view credential, std::span<const std::byte> transport_hello,
                     std::unique_ptr<bmi::Handshake> &state,
                     std::vector<std::byte> &hello) override;
    int client_proof(bmi::Handshake &state, std::span<const std::byte> server_transport_hello,
                     std::span<const std::byte> challenge, std::vector<std::byte> &proof,
                     bmi::Identity &identity) override;
    int server_challenge(std::span<const std::byte> client_transport_hello,
                         std::span<const std::byte> client_hello,
                         std::span<const std::byte> transport_hello,
                         std::unique_ptr<bmi::Handshake> &state,
                         std::vector<std::byte> &challenge) override;
    int server_verify(bmi::Handshake &state, std::span<const std::byte> proof,
                      bmi::Identity &identity) override;

private:
    ServerKeys server_keys_;
    std::mutex mutex_; // add_client_key may run on another thread than BMI
    std::unordered_map<std::string, std::shared_ptr<const proto::Key>> client_keys_;
};

} // namespace pvfs::auth

#endif // PVFS_AUTH_HPP
