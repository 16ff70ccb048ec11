// libFuzzer target: pvfs's connection handshake (pvfs/auth.hpp).
//
// Byte 0 picks what the rest is:
//   0, 1, 2  a client hello, a challenge, a proof for the decoders: what
//            decodes re-encodes to the very same bytes;
//   3        the server's steps on arbitrary bytes: the rest split (byte 1
//            says where) into a client hello and a proof, with a server
//            that knows the fuzz key; a proof of random bytes is never
//            accepted;
//   4        a real handshake between a client and a server authenticator
//            with the rest XORed into one of its five messages (byte 1
//            says which): the handshake succeeds only when nothing changed,
//            and then both sides hold the same session key.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "pvfs/auth.hpp"
#include "pvfs/proto.hpp"

namespace auth = pvfs::auth;
namespace proto = pvfs::proto;

namespace {

void check(bool ok)
{
    if (!ok)
        std::abort();
}

proto::Key fuzz_key()
{
    std::array<std::byte, proto::key_size> bytes{};
    for (std::size_t i = 0; i < bytes.size(); ++i)
        bytes.at(i) = static_cast<std::byte>(0x5A ^ i);
    proto::Key k = proto::Key::from_bytes(bytes);
    k.set_name("fuzz");
    return k;
}

const std::shared_ptr<const proto::Key> &server_key()
{
    static const std::shared_ptr<const proto::Key> key =
        std::make_shared<const proto::Key>(fuzz_key());
    return key;
}

auth::Authenticator &server()
{
    static auth::Authenticator a([](std::optional<std::uint32_t> id) {
        return id && *id == *server_key()->id() ? server_key() : nullptr;
    });
    return a;
}

template <typename T> void round_trip(std::span<const std::byte> in)
{
    T value;
    if (auth::decode(in, value) != nullptr)
        return;
    const std::vector<std::byte> again = auth::encode(value);
    check(std::equal(again.begin(), again.end(), in.begin(), in.end()));
}

void server_steps(std::span<const std::byte> in)
{
    if (in.empty())
        return;
    const std::size_t cut = std::min<std::size_t>(
        in[0] == std::byte{0} ? auth::hello_size : std::to_integer<std::size_t>(in[0]),
        in.size() - 1);
    const std::span<const std::byte> hello = in.subspan(1, cut);
    const std::span<const std::byte> proof = in.subspan(1 + cut);
    const std::array<std::byte, 4> transport{std::byte{1}, std::byte{2}, std::byte{3},
                                             std::byte{4}};
    std::unique_ptr<bmi::Handshake> state;
    std::vector<std::byte> challenge;
    if (server().server_challenge(transport, hello, transport, state, challenge) != 0)
        return;
    check(state != nullptr && challenge.size() == auth::challenge_size);
    bmi::Identity id;
    // A fresh nonce each time: no input can hold the MAC over it.
    check(server().server_verify(*state, proof, id) != 0);
}

void tampered_handshake(std::span<const std::byte> in)
{
    if (in.empty())
        return;
    const unsigned which = std::to_integer<unsigned>(in[0]) % 5;
    const std::span<const std::byte> flip = in.subspan(1);
    bool unchanged = true;
    const auto tamper = [&](std::vector<std::byte> &bytes, unsigned here) {
        if (here != which)
            return;
        // Longer input appends: a message with extra bytes must fail too.
        for (std::size_t i = 0; i < flip.size(); ++i) {
            if (i < bytes.size()) {
                bytes[i] ^= flip[i];
                unchanged = unchanged && flip[i] == std::byte{0};
            } else {
                bytes.push_back(flip[i]);
                unchanged = false;
            }
        }
    };
    static auth::Authenticator client;
    // It asks for encryption: the cipher and the kx keys are in play too.
    static const std::string credential = client.add_client_key([] {
        proto::Key k = fuzz_key();
        k.set_encrypt(true);
        return k;
    }());
    std::vector<std::byte> client_transport{std::byte{'c'}, std::byte{1}};
    std::vector<std::byte> server_transport{std::byte{'s'}, std::byte{2}};

    std::unique_ptr<bmi::Handshake> cs;
    std::vector<std::byte> hello;
    check(client.client_hello(credential, client_transport, cs, hello) == 0);
    tamper(hello, 0);
    std::vector<std::byte> seen_client_transport = client_transport;
    tamper(seen_client_transport, 1);
    std::unique_ptr<bmi::Handshake> ss;
    std::vector<std::byte> challenge;
    if (server().server_challenge(seen_client_transport, hello, server_transport, ss, challenge) !=
        0) {
        check(!unchanged);
        return;
    }
    tamper(challenge, 2);
    std::vector<std::byte> seen_server_transport = server_transport;
    tamper(seen_server_transport, 3);
    std::vector<std::byte> proof;
    bmi::Identity client_id;
    if (client.client_proof(*cs, seen_server_transport, challenge, proof, client_id) != 0) {
        check(!unchanged);
        return;
    }
    tamper(proof, 4);
    bmi::Identity server_id;
    if (server().server_verify(*ss, proof, server_id) != 0) {
        check(!unchanged);
        return;
    }
    check(unchanged);
    check(client_id.session_key == server_id.session_key && server_id.name == "fuzz");
    // Both ends chose the same cipher and the same sealing keys.
    check(client_id.cipher == server_id.cipher && client_id.seal_c2s == server_id.seal_c2s &&
          client_id.seal_s2c == server_id.seal_s2c);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    if (size == 0)
        return 0;
    const std::span<const std::byte> in(reinterpret_cast<const std::byte *>(data), size);
    const std::span<const std::byte> rest = in.subspan(1);
    switch (data[0] % 5) {
    case 0:
        round_trip<auth::ClientHello>(rest);
        break;
    case 1:
        round_trip<auth::Challenge>(rest);
        break;
    case 2:
        round_trip<auth::Proof>(rest);
        break;
    case 3:
        server_steps(rest);
        break;
    default:
        tampered_handshake(rest);
        break;
    }
    return 0;
}
