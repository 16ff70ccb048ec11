// pvfs's connection handshake: the messages, the transcript and its MACs
// (include/pvfs/auth.hpp has the protocol).
#include "pvfs/auth.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <sodium.h>

namespace pvfs::auth {

namespace {

constexpr std::string_view transcript_label = "pvfs-auth-2";
constexpr std::uint8_t flag_key_id = 1;
constexpr std::uint8_t flag_encrypt = 2;
constexpr std::uint8_t flag_aes = 4;
constexpr std::uint8_t known_flags = flag_key_id | flag_encrypt | flag_aes;

std::span<const std::byte> bytes_of(std::string_view s) noexcept
{
    return std::as_bytes(std::span(s.data(), s.size()));
}

void put32(std::byte *p, std::uint32_t v) noexcept
{
    for (int i = 0; i < 4; ++i)
        p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xffU);
}

std::uint32_t get32(const std::byte *p) noexcept
{
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i)
        v = (v << 8U) | std::to_integer<std::uint32_t>(p[i]);
    return v;
}

void ensure_sodium()
{
    static const bool ready = sodium_init() >= 0;
    if (!ready)
        throw std::runtime_error("libsodium cannot be initialised");
}

// What both sides MAC: the two transport hellos (length-prefixed, they
// vary), the client's hello (fixed size) and the server's nonce.
struct Transcript {
    std::array<std::byte, 4> client_len{};
    std::vector<std::byte> client_transport;
    std::vector<std::byte> client_hello;
    std::array<std::byte, 4> server_len{};
    std::vector<std::byte> server_transport;
    std::array<std::byte, nonce_size> server_nonce{};
    std::array<std::byte, 1> server_cipher{};
    std::array<std::byte, kx_size> server_kx{};

    void set(std::span<const std::byte> ct, std::span<const std::byte> ch,
             std::span<const std::byte> st)
    {
        client_transport.assign(ct.begin(), ct.end());
        client_hello.assign(ch.begin(), ch.end());
        server_transport.assign(st.begin(), st.end());
        put32(client_len.data(), static_cast<std::uint32_t>(ct.size()));
        put32(server_len.data(), static_cast<std::uint32_t>(st.size()));
    }
    void set_server(std::span<const std::byte> st)
    {
        server_transport.assign(st.begin(), st.end());
        put32(server_len.data(), static_cast<std::uint32_t>(st.size()));
    }
};

// BLAKE2b(K, label | T | extra...).
void mac(const proto::Key &key, std::string_view label, const Transcript &t,
         std::span<const std::span<const std::byte>> extra, std::span<std::byte, mac_size> out)
{
    std::vector<std::span<const std::byte>> parts{bytes_of(label),    bytes_of(transcript_label),
                                                  t.client_len,       t.client_transport,
                                                  t.client_hello,     t.server_len,
                                                  t.server_transport, t.server_nonce,
                                                  t.server_cipher,    t.server_kx};
    parts.insert(parts.end(), extra.begin(), extra.end());
    key.keyed_hash(parts, out);
}

struct Macs {
    std::array<std::byte, mac_size> server{};
    std::array<std::byte, mac_size> client{};
    std::array<std::byte, mac_size> session{};
    Macs() = default;
    Macs(const Macs &) = delete;
    Macs &operator=(const Macs &) = delete;
    Macs(Macs &&) = delete;
    Macs &operator=(Macs &&) = delete;
    ~Macs()
    {
        sodium_memzero(server.data(), server.size());
        sodium_memzero(client.data(), client.size());
        sodium_memzero(session.data(), session.size());
    }
};

void compute(const proto::Key &key, const Transcript &t, Macs &m)
{
    mac(key, "pvfs-s", t, {}, m.server);
    const std::array<std::span<const std::byte>, 1> after_s{m.server};
    mac(key, "pvfs-c", t, after_s, m.client);
    const std::array<std::span<const std::byte>, 2> after_c{m.server, m.client};
    mac(key, "pvfs-k", t, after_c, m.session);
}

// An ephemeral X25519 key pair (crypto_kx), its secret wiped.
struct KxPair {
    std::array<unsigned char, crypto_kx_PUBLICKEYBYTES> pk{};
    std::array<unsigned char, crypto_kx_SECRETKEYBYTES> sk{};
    KxPair() { crypto_kx_keypair(pk.data(), sk.data()); }
    KxPair(const KxPair &) = delete;
    KxPair &operator=(const KxPair &) = delete;
    KxPair(KxPair &&) = delete;
    KxPair &operator=(KxPair &&) = delete;
    ~KxPair() { sodium_memzero(sk.data(), sk.size()); }
};

// The two directions' kx keys (client to server, server to client).
struct KxKeys {
    std::array<unsigned char, crypto_kx_SESSIONKEYBYTES> c2s{};
    std::array<unsigned char, crypto_kx_SESSIONKEYBYTES> s2c{};
    KxKeys() = default;
    KxKeys(const KxKeys &) = delete;
    KxKeys &operator=(const KxKeys &) = delete;
    KxKeys(KxKeys &&) = delete;
    KxKeys &operator=(KxKeys &&) = delete;
    ~KxKeys()
    {
        sodium_memzero(c2s.data(), c2s.size());
        sodium_memzero(s2c.data(), s2c.size());
    }
};

// seal key = BLAKE2b-256(session key, label | kx key).
void seal_key(std::span<const std::byte, mac_size> session, std::string_view label,
              std::span<const unsigned char> kx, std::array<std::byte, 32> &out)
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, reinterpret_cast<const unsigned char *>(session.data()),
                            session.size(), out.size());
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char *>(label.data()),
                              label.size());
    crypto_generichash_update(&st, kx.data(), kx.size());
    crypto_generichash_final(&st, reinterpret_cast<unsigned char *>(out.data()), out.size());
    sodium_memzero(&st, sizeof st);
}

void fill_identity(const proto::Key &key, const Macs &m, bmi::Cipher cipher, const KxKeys &kx,
                   bmi::Identity &identity)
{
    identity.name = identity_name(key);
    identity.session_key = m.session;
    identity.cipher = cipher;
    if (cipher != bmi::Cipher::none) {
        seal_key(m.session, "pvfs-seal-c2s", kx.c2s, identity.seal_c2s);
        seal_key(m.session, "pvfs-seal-s2c", kx.s2c, identity.seal_s2c);
    }
}

struct ClientState final : bmi::Handshake {
    std::shared_ptr<const proto::Key> key;
    Transcript t;
    KxPair kx;
    bool encrypt = false;
};

struct ServerState final : bmi::Handshake {
    std::optional<std::uint32_t> key_id;
    Transcript t;
    bmi::Cipher cipher = bmi::Cipher::none;
    KxKeys kx;
};

} // namespace

std::vector<std::byte> encode(const ClientHello &hello)
{
    std::vector<std::byte> out(hello_size);
    out[0] = std::byte{version};
    std::uint8_t flags = hello.key_id ? flag_key_id : 0;
    if (hello.encrypt)
        flags |= flag_encrypt;
    if (hello.aes)
        flags |= flag_aes;
    out[1] = std::byte{flags};
    put32(out.data() + 2, hello.key_id.value_or(0));
    std::memcpy(out.data() + 6, hello.nonce.data(), nonce_size);
    std::memcpy(out.data() + 6 + nonce_size, hello.kx.data(), kx_size);
    return out;
}

std::vector<std::byte> encode(const Challenge &challenge)
{
    std::vector<std::byte> out(challenge_size);
    out[0] = std::byte{version};
    out[1] = std::byte{static_cast<std::uint8_t>(challenge.cipher)};
    std::memcpy(out.data() + 2, challenge.nonce.data(), nonce_size);
    std::memcpy(out.data() + 2 + nonce_size, challenge.kx.data(), kx_size);
    std::memcpy(out.data() + 2 + nonce_size + kx_size, challenge.mac.data(), mac_size);
    return out;
}

std::vector<std::byte> encode(const Proof &proof)
{
    std::vector<std::byte> out(proof_size);
    out[0] = std::byte{version};
    std::memcpy(out.data() + 1, proof.mac.data(), mac_size);
    return out;
}

const char *decode(std::span<const std::byte> in, ClientHello &out) noexcept
{
    if (in.size() != hello_size)
        return "auth hello of the wrong size";
    if (std::to_integer<std::uint8_t>(in[0]) != version)
        return "auth hello of an unknown version";
    const auto flags = std::to_integer<std::uint8_t>(in[1]);
    if ((flags & ~known_flags) != 0)
        return "auth hello with unknown flags";
    const std::uint32_t id = get32(in.data() + 2);
    if ((flags & flag_key_id) == 0 && id != 0)
        return "auth hello with a key id but no flag";
    out.key_id = (flags & flag_key_id) != 0 ? std::optional(id) : std::nullopt;
    out.encrypt = (flags & flag_encrypt) != 0;
    out.aes = (flags & flag_aes) != 0;
    std::memcpy(out.nonce.data(), in.data() + 6, nonce_size);
    std::memcpy(out.kx.data(), in.data() + 6 + nonce_size, kx_size);
    return nullptr;
}

const char *decode(std::span<const std::byte> in, Challenge &out) noexcept
{
    if (in.size() != challenge_size)
        return "auth challenge of the wrong size";
    if (std::to_integer<std::uint8_t>(in[0]) != version)
        return "auth challenge of an unknown version";
    const auto cipher = std::to_integer<std::uint8_t>(in[1]);
    if (cipher > static_cast<std::uint8_t>(bmi::Cipher::xchacha20poly1305))
        return "auth challenge with an unknown cipher";
    out.cipher = static_cast<bmi::Cipher>(cipher);
    std::memcpy(out.nonce.data(), in.data() + 2, nonce_size);
    std::memcpy(out.kx.data(), in.data() + 2 + nonce_size, kx_size);
    std::memcpy(out.mac.data(), in.data() + 2 + nonce_size + kx_size, mac_size);
    return nullptr;
}

const char *decode(std::span<const std::byte> in, Proof &out) noexcept
{
    if (in.size() != proof_size)
        return "auth proof of the wrong size";
    if (std::to_integer<std::uint8_t>(in[0]) != version)
        return "auth proof of an unknown version";
    std::memcpy(out.mac.data(), in.data() + 1, mac_size);
    return nullptr;
}

bool version_mismatch(std::span<const std::byte> in) noexcept
{
    return !in.empty() && std::to_integer<std::uint8_t>(in[0]) != version;
}

bool have_aes() noexcept
{
    // PVFS_TEST_NO_AES=1: act as a CPU without AES-NI (the tests reach
    // XChaCha20-Poly1305 on any machine).
    static const bool off = [] {
        const char *e = std::getenv("PVFS_TEST_NO_AES"); // NOLINT(concurrency-mt-unsafe)
        return e != nullptr && std::string_view(e) == "1";
    }();
    return !off && crypto_aead_aes256gcm_is_available() != 0;
}

std::string identity_name(const proto::Key &key)
{
    return key.name().empty() ? std::string("cluster") : key.name();
}

std::string credential(const proto::Key &key)
{
    // A hash under the key of a fixed label: names the key, reveals nothing.
    std::array<std::byte, 32> fp{};
    const std::array<std::span<const std::byte>, 1> parts{bytes_of("pvfs-credential")};
    key.keyed_hash(parts, fp);
    std::string hex;
    for (std::size_t i = 0; i < 8; ++i)
        hex += fmt::format("{:02x}", std::to_integer<unsigned>(fp[i]));
    return identity_name(key) + ":" + hex + (key.encrypt() ? ":encrypt" : "");
}

Authenticator::Authenticator(ServerKeys server_keys) : server_keys_(std::move(server_keys))
{
    ensure_sodium();
}

std::string Authenticator::add_client_key(const proto::Key &key)
{
    std::string cred = credential(key);
    const std::scoped_lock lock(mutex_);
    if (!client_keys_.contains(cred))
        client_keys_.emplace(cred, std::make_shared<const proto::Key>(key.clone()));
    return cred;
}

int Authenticator::client_hello(std::string_view credential,
                                std::span<const std::byte> transport_hello,
                                std::unique_ptr<bmi::Handshake> &state,
                                std::vector<std::byte> &hello)
{
    auto s = std::make_unique<ClientState>();
    {
        const std::scoped_lock lock(mutex_);
        const auto it = client_keys_.find(std::string(credential));
        if (it == client_keys_.end())
            return -EACCES; // a connection under no key this side holds
        s->key = it->second;
    }
    ClientHello h;
    h.key_id = s->key->id();
    h.encrypt = s->encrypt = s->key->encrypt();
    h.aes = have_aes();
    randombytes_buf(h.nonce.data(), h.nonce.size());
    std::memcpy(h.kx.data(), s->kx.pk.data(), kx_size);
    hello = encode(h);
    s->t.set(transport_hello, hello, {});
    state = std::move(s);
    return 0;
}

int Authenticator::client_proof(bmi::Handshake &state,
                                std::span<const std::byte> server_transport_hello,
                                std::span<const std::byte> challenge, std::vector<std::byte> &proof,
                                bmi::Identity &identity)
{
    auto &s = dynamic_cast<ClientState &>(state);
    Challenge ch;
    if (decode(challenge, ch) != nullptr)
        return version_mismatch(challenge) ? -EPROTO : -EACCES;
    s.t.set_server(server_transport_hello);
    s.t.server_nonce = ch.nonce;
    s.t.server_cipher[0] = std::byte{static_cast<std::uint8_t>(ch.cipher)};
    s.t.server_kx = ch.kx;
    Macs m;
    compute(*s.key, s.t, m);
    // The server proves first: a side without the key learns no MAC of ours.
    if (sodium_memcmp(m.server.data(), ch.mac.data(), mac_size) != 0)
        return -EACCES;
    // A client that asked never takes plaintext; AES only where it runs.
    if (s.encrypt && ch.cipher == bmi::Cipher::none)
        return -EPROTONOSUPPORT;
    if (ch.cipher == bmi::Cipher::aes256gcm && !have_aes())
        return -EPROTONOSUPPORT;
    KxKeys kx;
    if (ch.cipher != bmi::Cipher::none &&
        crypto_kx_client_session_keys(kx.s2c.data(), kx.c2s.data(), s.kx.pk.data(), s.kx.sk.data(),
                                      reinterpret_cast<const unsigned char *>(ch.kx.data())) != 0)
        return -EACCES; // a bad public key
    Proof p;
    p.mac = m.client;
    proof = encode(p);
    fill_identity(*s.key, m, ch.cipher, kx, identity);
    return 0;
}

int Authenticator::server_challenge(std::span<const std::byte> client_transport_hello,
                                    std::span<const std::byte> client_hello,
                                    std::span<const std::byte> transport_hello,
                                    std::unique_ptr<bmi::Handshake> &state,
                                    std::vector<std::byte> &challenge)
{
    if (!server_keys_)
        return -EACCES;
    ClientHello h;
    if (decode(client_hello, h) != nullptr)
        return version_mismatch(client_hello) ? -EPROTO : -EACCES;
    const std::shared_ptr<const proto::Key> key = server_keys_(h.key_id);
    if (!key)
        return -EACCES; // unknown or revoked
    // The server's policy wins: its key says encrypt, the client must ask.
    if (key->encrypt() && !h.encrypt)
        return -EPROTONOSUPPORT;
    auto s = std::make_unique<ServerState>();
    s->key_id = h.key_id;
    if (h.encrypt || key->encrypt())
        s->cipher = h.aes && have_aes() ? bmi::Cipher::aes256gcm : bmi::Cipher::xchacha20poly1305;
    const KxPair pair;
    if (s->cipher != bmi::Cipher::none &&
        crypto_kx_server_session_keys(s->kx.c2s.data(), s->kx.s2c.data(), pair.pk.data(),
                                      pair.sk.data(),
                                      reinterpret_cast<const unsigned char *>(h.kx.data())) != 0)
        return -EACCES;
    s->t.set(client_transport_hello, client_hello, transport_hello);
    randombytes_buf(s->t.server_nonce.data(), s->t.server_nonce.size());
    s->t.server_cipher[0] = std::byte{static_cast<std::uint8_t>(s->cipher)};
    std::memcpy(s->t.server_kx.data(), pair.pk.data(), kx_size);
    Macs m;
    compute(*key, s->t, m);
    Challenge ch;
    ch.cipher = s->cipher;
    ch.nonce = s->t.server_nonce;
    ch.kx = s->t.server_kx;
    ch.mac = m.server;
    challenge = encode(ch);
    state = std::move(s);
    return 0;
}

int Authenticator::server_verify(bmi::Handshake &state, std::span<const std::byte> proof,
                                 bmi::Identity &identity)
{
    auto &s = dynamic_cast<ServerState &>(state);
    Proof p;
    if (decode(proof, p) != nullptr)
        return version_mismatch(proof) ? -EPROTO : -EACCES;
    // Looked up again: a key revoked since the challenge is refused here.
    const std::shared_ptr<const proto::Key> key = server_keys_(s.key_id);
    if (!key)
        return -EACCES;
    Macs m;
    compute(*key, s.t, m);
    if (sodium_memcmp(m.client.data(), p.mac.data(), mac_size) != 0)
        return -EACCES;
    fill_identity(*key, m, s.cipher, s.kx, identity);
    return 0;
}

} // namespace pvfs::auth
