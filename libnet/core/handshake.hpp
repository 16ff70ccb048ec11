// The handshake steps every method shares (docs/bmi.md "Authentication"):
// one connection's run of the user's Authenticator, with the bounds and the
// refusal rules in one place, so that the tcp and ib methods differ only in
// how the bytes travel.  A method keeps one Session per connection and
// calls its steps as the peer's bytes arrive; every step that fails
// refuses the connection (its error is a negative errno, -EACCES).
#ifndef PVFS_LIBNET_CORE_HANDSHAKE_HPP
#define PVFS_LIBNET_CORE_HANDSHAKE_HPP

#include "core.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace bmi::handshake {

enum class Step : std::uint8_t {
    none,             // no authenticator: the method's plain hello
    client_sent,      // client: hello sent, waiting for the challenge
    client_proved,    // client: proof sent, waiting for the server's accept
    server_waiting,   // server: waiting for the client's hello
    server_verifying, // server: challenge sent, waiting for the proof
    done,             // authenticated: the connection is its identity's
};

class Session {
public:
    [[nodiscard]] Step step() const noexcept { return step_; }
    [[nodiscard]] bool authenticating() const noexcept
    {
        return step_ != Step::none && step_ != Step::done;
    }

    // Server: a connection accepted while an authenticator is installed.
    void expect_client(Core &core);
    // Client: the hello for a connection to `peer`; `transport_hello` is
    // this side's.  Without an authenticator: 0, nothing to send.
    int client_start(Core &core, Addr peer, std::span<const std::byte> transport_hello,
                     std::vector<std::byte> &hello);
    // Client: the server's transport hello and challenge -> the proof.
    int client_challenge(std::span<const std::byte> server_transport_hello,
                         std::span<const std::byte> challenge, std::vector<std::byte> &proof);
    // Client: the server accepted the proof; the identity of the session.
    int client_accepted(std::uint64_t server_incarnation, Identity &out);
    // Server: the client's transport hello and hello, this side's
    // transport hello -> the challenge.
    int server_hello(std::span<const std::byte> client_transport_hello,
                     std::span<const std::byte> client_hello,
                     std::span<const std::byte> transport_hello, std::vector<std::byte> &challenge);
    // Server: the proof -> who the client is.
    int server_proof(std::span<const std::byte> proof, std::uint64_t client_incarnation,
                     Identity &out);
    // Forgets everything (the connection closed); the session key is wiped.
    void reset() noexcept;

private:
    std::shared_ptr<Authenticator> auth_;
    std::unique_ptr<Handshake> state_;
    Identity pending_; // client: what client_proof said, until the accept
    Step step_ = Step::none;
};

// "refused by authentication" etc., for logs: what a refusal errno means.
[[nodiscard]] std::string refusal_text(int error);

} // namespace bmi::handshake

#endif // PVFS_LIBNET_CORE_HANDSHAKE_HPP
