// Authenticated connections: the Session steps the methods share, the
// identities of peers in the core, and the Bmi calls for them.
#include "handshake.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace bmi {

Identity::~Identity()
{
    explicit_bzero(session_key.data(), session_key.size()); // glibc's, from <cstring>
    explicit_bzero(seal_c2s.data(), seal_c2s.size());
    explicit_bzero(seal_s2c.data(), seal_s2c.size());
}

namespace handshake {

namespace {

// The user's code runs here: its exceptions and oversized or negative
// answers become refusals, so a bug in an authenticator closes a
// connection and never lets one through.
template <typename F> int guarded(F &&step) noexcept
{
    try {
        const int rc = step();
        return rc > 0 ? -EACCES : rc;
    } catch (const std::exception &) {
        return -EACCES;
    } catch (...) {
        return -EACCES;
    }
}

[[nodiscard]] bool too_long(std::span<const std::byte> bytes) noexcept
{
    return bytes.size() > Authenticator::max_auth_bytes;
}

} // namespace

void Session::expect_client(Core &core)
{
    reset();
    auth_ = core.authenticator;
    step_ = auth_ ? Step::server_waiting : Step::none;
}

int Session::client_start(Core &core, Addr peer, std::span<const std::byte> transport_hello,
                          std::vector<std::byte> &hello)
{
    reset();
    hello.clear();
    auth_ = core.authenticator;
    if (!auth_)
        return 0;
    const std::string &credential = core.credential_of(peer);
    const int rc =
        guarded([&] { return auth_->client_hello(credential, transport_hello, state_, hello); });
    if (rc != 0 || !state_ || too_long(hello)) {
        reset();
        return rc != 0 ? rc : -EACCES;
    }
    step_ = Step::client_sent;
    return 0;
}

int Session::client_challenge(std::span<const std::byte> server_transport_hello,
                              std::span<const std::byte> challenge, std::vector<std::byte> &proof)
{
    proof.clear();
    if (step_ != Step::client_sent || too_long(challenge))
        return -EACCES;
    const int rc = guarded([&] {
        return auth_->client_proof(*state_, server_transport_hello, challenge, proof, pending_);
    });
    if (rc != 0 || too_long(proof))
        return rc != 0 ? rc : -EACCES;
    step_ = Step::client_proved;
    return 0;
}

int Session::client_accepted(std::uint64_t server_incarnation, Identity &out)
{
    if (step_ != Step::client_proved)
        return -EACCES;
    out = std::move(pending_);
    out.incarnation = server_incarnation;
    pending_ = {};
    state_.reset();
    step_ = Step::done;
    return 0;
}

int Session::server_hello(std::span<const std::byte> client_transport_hello,
                          std::span<const std::byte> client_hello,
                          std::span<const std::byte> transport_hello,
                          std::vector<std::byte> &challenge)
{
    challenge.clear();
    if (step_ != Step::server_waiting || too_long(client_hello))
        return -EACCES;
    const int rc = guarded([&] {
        return auth_->server_challenge(client_transport_hello, client_hello, transport_hello,
                                       state_, challenge);
    });
    if (rc != 0 || !state_ || too_long(challenge))
        return rc != 0 ? rc : -EACCES;
    step_ = Step::server_verifying;
    return 0;
}

int Session::server_proof(std::span<const std::byte> proof, std::uint64_t client_incarnation,
                          Identity &out)
{
    if (step_ != Step::server_verifying || too_long(proof))
        return -EACCES;
    Identity id;
    const int rc = guarded([&] { return auth_->server_verify(*state_, proof, id); });
    state_.reset();
    if (rc != 0 || id.name.empty())
        return rc != 0 ? rc : -EACCES;
    id.incarnation = client_incarnation;
    out = std::move(id);
    step_ = Step::done;
    return 0;
}

void Session::reset() noexcept
{
    state_.reset();
    auth_.reset();
    std::fill(pending_.session_key.begin(), pending_.session_key.end(), std::byte{0});
    pending_ = {};
    step_ = Step::none;
}

std::string refusal_text(int error)
{
    if (error == -EACCES)
        return "refused by authentication";
    if (error == -EPROTONOSUPPORT)
        return "refused: the two ends do not agree on encryption (a server with encrypt = true "
               "takes only clients that encrypt; a client with encrypt = true takes only an "
               "encrypted connection)";
    if (error == -EPROTO)
        return "refused: the peer speaks another version of the handshake (every node must run "
               "the same pvfs release)";
    return "authentication failed: " + std::error_code(-error, std::generic_category()).message();
}

} // namespace handshake

// ---- identities in the core ----------------------------------------------

Addr Core::peer_for_identity(Method &method, const Identity &id, const std::string &label)
{
    // A record separator cannot start a URL: no lookup names this key.
    // The cipher is part of it: a process's sealed and unsealed
    // connections are two peers, so what a receive posted for a sealed
    // peer takes came sealed (pvfs then needs no chunk MACs on it).
    const std::string key = fmt::format("\x1eid:{}\x1f{:016x}\x1f{}", id.name, id.incarnation,
                                        static_cast<int>(id.cipher));
    Addr addr = no_addr;
    if (const auto it = addr_by_url_.find(key); it != addr_by_url_.end())
        addr = it->second;
    else
        addr = new_addr(key, &method);
    AddrEntry &e = *entry(addr);
    e.label = label;
    e.identity = id;
    return addr;
}

void Core::set_identity(Addr addr, const Identity &id)
{
    if (AddrEntry *e = entry(addr))
        e->identity = id;
}

std::optional<Identity> Core::identity_of(Addr addr) const
{
    const AddrEntry *e = entry(addr);
    if (e == nullptr)
        return std::nullopt;
    return e->identity;
}

const std::string &Core::credential_of(Addr addr) const
{
    static const std::string none;
    const AddrEntry *e = entry(addr);
    return e == nullptr ? none : e->credential;
}

std::size_t Core::drop_identity(std::string_view name)
{
    std::vector<std::pair<Addr, Method *>> doomed;
    for (std::size_t s = 0; s < addrs_.size(); ++s) {
        const AddrEntry &e = addrs_[s];
        if (e.live && e.identity && e.identity->name == name)
            doomed.emplace_back((static_cast<Addr>(e.generation) << 32U) | (s + 1), e.method);
    }
    for (const auto &[addr, method] : doomed) {
        method->drop_peer(addr, -EACCES);
        // The peer key (name, incarnation) is the client's to choose: a
        // later session under it (a replaced key's new holder, or anyone
        // naming the same incarnation) must inherit nothing of this one.
        // Its unreceived messages go, early and unexpected, and the key
        // is unlinked from this Addr, so that the next session is a new
        // peer even while this one lingers (the user holds its messages).
        // A peer the user looked up keeps its URL: that key is the user's.
        method->forget_messages(addr);
        for (auto it = unexpected_.begin(); it != unexpected_.end();) {
            if (it->peer() == addr)
                it = unexpected_.erase(it);
            else
                ++it;
        }
        if (AddrEntry *e = entry(addr)) {
            if (const auto it = addr_by_url_.find(e->url);
                !e->pinned && it != addr_by_url_.end() && it->second == addr)
                addr_by_url_.erase(it);
            e->identity.reset(); // nothing it sent is believed any more
        }
    }
    return doomed.size();
}

// ---- Bmi -------------------------------------------------------------------

void Bmi::set_authenticator(std::shared_ptr<Authenticator> authenticator)
{
    core_->authenticator = std::move(authenticator);
}

std::optional<Identity> Bmi::peer_identity(Addr addr) const
{
    return core_->identity_of(addr);
}

std::size_t Bmi::drop_identity(std::string_view name)
{
    return core_->drop_identity(name);
}

} // namespace bmi
