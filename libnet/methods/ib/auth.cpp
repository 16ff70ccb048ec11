// The ib method's handshake (docs/bmi.md "Authentication", "The ib
// method"): the same steps as the tcp method's (handshake::Session), on
// the first SENDs after rdma_cm connects.  The client's hello carries the
// authenticator's hello (hello cookie 1); the accepting side sends its
// hello, with the challenge, only once that arrived; the client proves in
// an AUTH message and sends nothing else until the server's AUTH (cookie
// 0) accepts it.  A refusal is an AUTH with a positive errno, after which
// the refusing side closes once it has gone (or a second later).  Until
// the end an accepted connection has no peer and deliver() closes it on
// any other message.
#include "method.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <string>
#include <utility>

namespace bmi::ib {

using handshake::Step;

std::vector<std::byte> IbMethod::transport_hello() const
{
    const HelloBody body{incarnation_, my_url_};
    std::vector<std::byte> bytes(hello_size(body));
    encode_hello(body, bytes);
    return bytes;
}

std::vector<std::byte> IbMethod::with_connect_data(std::span<const std::byte> hello,
                                                   std::span<const std::byte, connect_data_size> cm)
{
    std::vector<std::byte> out(hello.begin(), hello.end());
    out.insert(out.end(), cm.begin(), cm.end());
    return out;
}

void IbMethod::queue_hello(std::uint32_t c, std::vector<std::byte> payload, bool with_auth)
{
    Frame f;
    f.h.type = Msg::hello;
    f.h.cookie = with_auth ? hello_flag_auth : 0;
    f.payload = std::move(payload);
    conns_[c]->ctl.push_front(std::move(f));
}

void IbMethod::queue_auth(std::uint32_t c, std::uint64_t status, std::span<const std::byte> payload)
{
    Frame f;
    f.h.type = Msg::auth;
    f.h.cookie = status;
    f.payload.assign(payload.begin(), payload.end());
    conns_[c]->ctl.push_back(std::move(f));
    mark_pending(c);
}

int IbMethod::start_handshake(std::uint32_t c)
{
    Conn &k = *conns_[c];
    std::vector<std::byte> mine = transport_hello();
    if (!k.outgoing) {
        if (core_.authenticator) {
            k.hs.expect_client(core_); // the client speaks first
            return 0;
        }
        queue_hello(c, std::move(mine), false);
        return 0;
    }
    std::vector<std::byte> hello;
    if (const int rc = k.hs.client_start(core_, k.peer, with_connect_data(mine, k.cm_mine), hello);
        rc != 0)
        return rc;
    const bool with_auth = k.hs.step() == Step::client_sent;
    mine.insert(mine.end(), hello.begin(), hello.end());
    queue_hello(c, std::move(mine), with_auth);
    return 0;
}

IbMethod::Verdict IbMethod::refuse(std::uint32_t c, int error, std::string_view why)
{
    Conn &k = *conns_[c];
    const std::string who = k.peer != no_addr
                                ? core_.url_of(k.peer)
                                : net::sockaddr_url("ib", rdma_get_peer_addr(k.id.get()));
    log_refusal(fmt::format("connection to {} {}: {}", who, handshake::refusal_text(error), why));
    // The refusal goes first, so the peer's ops fail with EACCES rather
    // than a reset; the connection closes when its send completes.
    k.refusing = true;
    k.refuse_error = error;
    k.opened = Clock::now();
    k.ctl.clear();
    k.data.clear();
    queue_auth(c, EACCES, {});
    return Verdict::consumed;
}

IbMethod::Verdict IbMethod::on_hello(std::uint32_t c, const Header &h,
                                     std::span<const std::byte> payload)
{
    Conn &k = *conns_[c];
    const bool with_auth = h.cookie == hello_flag_auth;
    const std::size_t tlen = with_auth ? hello_transport_size(payload) : payload.size();
    HelloBody body;
    if (tlen == 0) {
        close_conn(c, -EPROTO, "hello shorter than its url");
        return Verdict::closed;
    }
    const std::span<const std::byte> theirs = payload.first(tlen);
    if (const char *err = decode_hello(theirs, body)) {
        close_conn(c, -EPROTO, err);
        return Verdict::closed;
    }
    const std::span<const std::byte> auth_bytes = payload.subspan(tlen);
    k.hello_seen = true;
    if (k.peer == no_addr) {
        // Accepted: the client's hello.
        if (k.hs.step() == Step::server_waiting) {
            if (!with_auth)
                return refuse(c, -EACCES, "a hello without authentication (this side requires it)");
            std::vector<std::byte> mine = transport_hello();
            std::vector<std::byte> challenge;
            if (const int rc = k.hs.server_hello(with_connect_data(theirs, k.cm_theirs), auth_bytes,
                                                 with_connect_data(mine, k.cm_mine), challenge);
                rc != 0)
                return refuse(c, rc, "its hello was refused");
            k.pending_remote = std::move(body);
            mine.insert(mine.end(), challenge.begin(), challenge.end());
            queue_hello(c, std::move(mine), true);
            mark_pending(c);
            return Verdict::consumed;
        }
        if (with_auth)
            return refuse(c, -EACCES, "an authenticated hello, and this side has no authenticator");
        // No authenticator: the peer is the URL it names, as before.
        std::string url = body.url;
        if (url.empty()) {
            url = net::sockaddr_url("ib", rdma_get_peer_addr(k.id.get()));
        } else if (url.rfind("ib://", 0) != 0) {
            close_conn(c, -EPROTO, "hello with a non-ib url");
            return Verdict::closed;
        }
        const Addr a = core_.peer_for_url(*this, url);
        Peer &np = peer_of(a);
        if (np.hostport.empty() && !body.url.empty())
            np.hostport = url.substr(5);
        k.peer = a;
        np.conns.push_back(c);
        if (np.tx_conn == no_index)
            np.tx_conn = c;
        return established(c, body);
    }
    // Outgoing: the server's hello.
    if (k.hs.step() == Step::client_sent) {
        if (!with_auth)
            return refuse(c, -EACCES, "the peer does not authenticate");
        std::vector<std::byte> proof;
        if (const int rc =
                k.hs.client_challenge(with_connect_data(theirs, k.cm_theirs), auth_bytes, proof);
            rc != 0)
            return refuse(c, rc, "the peer did not prove the key");
        k.pending_remote = std::move(body);
        queue_auth(c, 0, proof);
        return Verdict::consumed;
    }
    if (with_auth)
        return refuse(c, -EACCES,
                      "the peer requires authentication and this side has no authenticator");
    return established(c, body);
}

IbMethod::Verdict IbMethod::on_auth(std::uint32_t c, const Header &h,
                                    std::span<const std::byte> payload)
{
    Conn &k = *conns_[c];
    if (h.cookie != 0) {
        const std::string who = k.peer != no_addr ? core_.url_of(k.peer) : "an unidentified peer";
        log_refusal(fmt::format("connection to {} refused by the peer's authentication (status {})",
                                who, h.cookie));
        close_conn(c, -EACCES, "refused by the peer's authentication");
        return Verdict::closed;
    }
    if (!k.hello_seen) {
        close_conn(c, -EPROTO, "auth message before the hello");
        return Verdict::closed;
    }
    if (k.peer == no_addr && k.hs.step() == Step::server_verifying) {
        Identity id;
        if (const int rc = k.hs.server_proof(payload, k.pending_remote.incarnation, id); rc != 0)
            return refuse(c, rc, "its proof was refused");
        // ib does not seal (docs/security.md "Encryption": the fabric's own
        // encryption is the answer); a handshake that chose a cipher is
        // refused, never run in the clear.
        if (id.cipher != Cipher::none)
            return refuse(c, -EPROTONOSUPPORT, "encryption asked for, and ib:// does not encrypt");
        // The URL it claims is only a label: the peer is who it proved.
        std::string label = k.pending_remote.url;
        if (label.rfind("ib://", 0) != 0)
            label = net::sockaddr_url("ib", rdma_get_peer_addr(k.id.get()));
        const Addr a = core_.peer_for_identity(*this, id, label);
        Peer &np = peer_of(a);
        k.peer = a;
        np.conns.push_back(c);
        if (np.tx_conn == no_index)
            np.tx_conn = c;
        gossip::debug(gossip::Mask::ib, "connection from {} authenticated as key {}", label,
                      id.name);
        queue_auth(c, 0, {});
        return established(c, k.pending_remote);
    }
    if (k.peer != no_addr && k.hs.step() == Step::client_proved && payload.empty()) {
        Identity id;
        if (const int rc = k.hs.client_accepted(k.pending_remote.incarnation, id); rc != 0) {
            close_conn(c, rc, "an accept out of sequence");
            return Verdict::closed;
        }
        if (id.cipher != Cipher::none) {
            close_conn(c, -EPROTONOSUPPORT, "encryption asked for, and ib:// does not encrypt");
            return Verdict::closed;
        }
        core_.set_identity(k.peer, id);
        return established(c, k.pending_remote);
    }
    close_conn(c, -EPROTO, "auth message out of sequence");
    return Verdict::closed;
}

IbMethod::Verdict IbMethod::established(std::uint32_t c, const HelloBody &body)
{
    // The handshake is over: the peer may READ what an RTS names and
    // WRITE what this side exposes to it (the registrations still bound
    // what: docs/bmi.md "Memory").  Raised before any message of this
    // side can name memory to it.
    if (!set_qp_access(c, qp_access_proved))
        return Verdict::closed;
    Conn &k = *conns_[c];
    k.qp_open = true;
    Peer &p = peer_of(k.peer);
    p.incarnation = body.incarnation;
    p.heard = Clock::now();
    if (k.state == ConnState::up)
        on_up(c);
    return Verdict::consumed;
}

void IbMethod::log_rated(RateLog &log, const std::string &text)
{
    const auto now = Clock::now();
    if (log.logged != Clock::time_point{} && now - log.logged < std::chrono::minutes(1)) {
        ++log.unlogged;
        return;
    }
    if (log.unlogged == 0)
        gossip::warning(gossip::Mask::ib, "{}", text);
    else
        gossip::warning(gossip::Mask::ib, "{} ({} more refused in the last minute)", text,
                        log.unlogged);
    log.logged = now;
    log.unlogged = 0;
}

void IbMethod::check_handshakes(Clock::time_point now)
{
    if (now < next_handshake_check_)
        return;
    next_handshake_check_ = now + std::chrono::milliseconds(250);
    for (std::uint32_t c = 0; c < conns_.size(); ++c) {
        Conn &k = *conns_[c];
        if (k.state == ConnState::closed)
            continue;
        if (k.refusing && now - k.opened >= std::chrono::seconds(1)) {
            close_conn(c, k.refuse_error, "refused by authentication");
            continue;
        }
        // The rdma_cm phases have their own timeouts; the handshake runs
        // from the connection's start and is bounded like tcp's.
        const bool handshaking = k.hs.authenticating() || !k.hello_seen;
        if (handshaking && (k.state == ConnState::up || !k.outgoing) &&
            now - k.opened >= core_.limits.hello_timeout) {
            gossip::warning(gossip::Mask::ib, "closing connection to {}: no handshake within {} ms",
                            k.peer != no_addr ? core_.url_of(k.peer) : "an unidentified peer",
                            core_.limits.hello_timeout.count());
            close_conn(c, -ETIMEDOUT, "no handshake within hello_timeout");
        }
    }
}

} // namespace bmi::ib
