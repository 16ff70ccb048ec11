// The TCP method's handshake (docs/bmi.md "Authentication"): the client's
// hello carries the authenticator's hello after its transport hello; the
// accepting side answers only then, with its own hello carrying the
// challenge; the client sends its proof in an AUTH frame and waits for
// the server's AUTH (status 0) before it sends anything else.  A refusal
// is an AUTH frame with a status, and the refusing side closes.  Until the
// end, an accepted connection has no peer: nothing it sends can reach a
// receive, the unexpected queue or the early buffers (on_header lets only
// the hello and AUTH frames through).
#include "../../core/net.hpp"
#include "method.hpp"
#include "pvfs/gossip.hpp"

#include <sys/socket.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

namespace bmi::tcp {

namespace gossip = pvfs::gossip;

using handshake::Step;

std::vector<std::byte> TcpMethod::transport_hello() const
{
    HelloBody body;
    body.eager_limit = static_cast<std::uint32_t>(core_.limits.eager);
    body.unexpected_limit = static_cast<std::uint32_t>(core_.limits.unexpected);
    body.chunk = static_cast<std::uint32_t>(chunk_size);
    body.incarnation = incarnation_;
    body.url = my_url_;
    std::vector<std::byte> bytes(hello_size(body));
    encode_hello(body, bytes);
    return bytes;
}

void TcpMethod::queue_hello(std::uint32_t c)
{
    Conn &k = *conns_[c];
    if (!k.hello_out.empty())
        queue_hello_bytes(c, std::exchange(k.hello_out, {}), hello_flag_auth);
    else
        queue_hello_bytes(c, transport_hello(), 0);
}

void TcpMethod::queue_hello_bytes(std::uint32_t c, std::vector<std::byte> payload,
                                  std::uint16_t flags)
{
    TxItem item;
    FrameHeader h;
    h.type = FrameType::hello;
    h.flags = flags;
    h.size = payload.size();
    encode(h, item.hdr);
    item.own = std::move(payload);
    item.len = h.size;
    item.type = FrameType::hello;
    conns_[c]->tx_bytes += tx_charge(item);
    conns_[c]->tx.push_front(std::move(item));
    dirty_.push_back(c);
}

void TcpMethod::queue_auth(std::uint32_t c, int status, std::span<const std::byte> payload)
{
    TxItem item;
    FrameHeader h;
    h.type = FrameType::auth;
    h.status = status;
    h.size = payload.size();
    encode(h, item.hdr);
    item.own.assign(payload.begin(), payload.end());
    item.len = h.size;
    item.type = FrameType::auth;
    conns_[c]->tx_bytes += tx_charge(item);
    conns_[c]->tx.push_back(std::move(item));
    dirty_.push_back(c);
}

int TcpMethod::start_client_handshake(std::uint32_t c, Addr peer)
{
    Conn &k = *conns_[c];
    k.opened = Clock::now(); // the handshake's deadline runs from here
    std::vector<std::byte> mine = transport_hello();
    std::vector<std::byte> hello;
    if (const int rc = k.hs.client_start(core_, peer, mine, hello); rc != 0)
        return rc;
    if (k.hs.step() == Step::client_sent) {
        mine.insert(mine.end(), hello.begin(), hello.end());
        k.hello_out = std::move(mine);
    }
    return 0;
}

void TcpMethod::refuse(std::uint32_t c, int error, std::string_view why)
{
    Conn &k = *conns_[c];
    std::string who;
    if (k.peer != no_addr) {
        who = core_.url_of(k.peer);
    } else {
        // Not identified: where it connects from (its claimed URL is no
        // better than a guess).
        sockaddr_storage sa{};
        socklen_t len = sizeof sa;
        ::getpeername(k.fd.get(), reinterpret_cast<sockaddr *>(&sa), &len);
        who = net::sockaddr_url("tcp", reinterpret_cast<const sockaddr *>(&sa));
    }
    log_refusal(auth_log_,
                fmt::format("connection to {} {}: {}", who, handshake::refusal_text(error), why));
    // The refusal goes before the close: the peer reads why (its ops fail
    // with -EACCES, not with a reset; with -EPROTONOSUPPORT when the ends
    // disagree on encryption, -EPROTO for another handshake version).
    // Nothing else is queued yet.
    queue_auth(c, error == -EPROTONOSUPPORT || error == -EPROTO ? -error : EACCES, {});
    if (flush(c))
        close_conn(c, error, why);
}

TcpMethod::Verdict TcpMethod::on_auth_header(std::uint32_t c, const FrameHeader &h)
{
    Conn &k = *conns_[c];
    if (h.status != 0) {
        const std::string who = k.peer != no_addr ? core_.url_of(k.peer) : "an unidentified peer";
        const bool told = h.status == EPROTONOSUPPORT || h.status == EPROTO;
        log_refusal(auth_log_, fmt::format("connection to {} refused by the peer's "
                                           "authentication (status {}){}{}",
                                           who, h.status, told ? ": " : "",
                                           told ? handshake::refusal_text(-h.status) : ""));
        close_why_ = "refused by the peer's authentication";
        close_error_ = told ? -h.status : -EACCES;
        return Verdict::close;
    }
    const bool expected = k.peer == no_addr ? k.hs.step() == Step::server_verifying
                                            : k.hs.step() == Step::client_proved;
    if (!expected || !k.hello_seen)
        return Verdict::close;
    k.h = h;
    k.sink = Sink::hello;
    k.sink_buf.resize(h.size);
    k.sink_off = 0;
    k.payload_left = h.size;
    return Verdict::accept;
}

void TcpMethod::hello_payload(std::uint32_t c)
{
    Conn &k = *conns_[c];
    const std::vector<std::byte> all = std::exchange(k.sink_buf, {});
    const bool with_auth = (k.h.flags & hello_flag_auth) != 0;
    const std::size_t tlen = with_auth ? hello_transport_size(all) : all.size();
    HelloBody body;
    if (tlen == 0) {
        close_conn(c, -EPROTO, "hello shorter than its url");
        return;
    }
    const std::span<const std::byte> theirs(all.data(), tlen);
    if (const char *err = decode_hello(theirs, body)) {
        close_conn(c, -EPROTO, err);
        return;
    }
    const std::span<const std::byte> auth_bytes = std::span(all).subspan(tlen);
    k.hello_seen = true;
    if (k.peer == no_addr) {
        // Accepted: the client's hello.
        if (k.hs.step() == Step::server_waiting) {
            if (!with_auth) {
                refuse(c, -EACCES, "a hello without authentication (this side requires it)");
                return;
            }
            std::vector<std::byte> mine = transport_hello();
            std::vector<std::byte> challenge;
            if (const int rc = k.hs.server_hello(theirs, auth_bytes, mine, challenge); rc != 0) {
                refuse(c, rc, "its hello was refused");
                return;
            }
            k.pending_remote = std::move(body);
            mine.insert(mine.end(), challenge.begin(), challenge.end());
            queue_hello_bytes(c, std::move(mine), hello_flag_auth);
            return;
        }
        if (with_auth) {
            refuse(c, -EACCES, "an authenticated hello, and this side has no authenticator");
            return;
        }
        established(c, body);
        return;
    }
    // Outgoing: the server's hello.
    if (k.hs.step() == Step::client_sent) {
        if (!with_auth) {
            refuse(c, -EACCES, "the peer does not authenticate");
            return;
        }
        std::vector<std::byte> proof;
        if (const int rc = k.hs.client_challenge(theirs, auth_bytes, proof); rc != 0) {
            refuse(c, rc,
                   rc == -EACCES ? "the peer did not prove the key" : "its challenge was refused");
            return;
        }
        k.pending_remote = std::move(body);
        queue_auth(c, 0, proof);
        return;
    }
    if (with_auth) {
        refuse(c, -EACCES, "the peer requires authentication and this side has no authenticator");
        return;
    }
    established(c, body);
}

void TcpMethod::auth_payload(std::uint32_t c)
{
    Conn &k = *conns_[c];
    const std::vector<std::byte> bytes = std::exchange(k.sink_buf, {});
    if (k.peer == no_addr) {
        // The client's proof.
        Identity id;
        if (const int rc = k.hs.server_proof(bytes, k.pending_remote.incarnation, id); rc != 0) {
            refuse(c, rc, "its proof was refused");
            return;
        }
        // Frames after the proof come sealed, and after the accept go so.
        if (!start_sealing(c, id, false))
            return;
        // The URL it claims is only a label: the peer is who it proved.
        std::string label = k.pending_remote.url;
        if (label.rfind("tcp://", 0) != 0) {
            sockaddr_storage sa{};
            socklen_t len = sizeof sa;
            ::getpeername(k.fd.get(), reinterpret_cast<sockaddr *>(&sa), &len);
            label = net::sockaddr_url("tcp", reinterpret_cast<const sockaddr *>(&sa));
        }
        const Addr a = core_.peer_for_identity(*this, id, label);
        Peer &np = peer_of(a);
        k.peer = a;
        np.conns.push_back(c);
        if (np.tx_conn == no_index)
            np.tx_conn = c;
        gossip::debug(gossip::Mask::tcp, "connection from {} authenticated as key {}", label,
                      id.name);
        queue_auth(c, 0, {});
        established(c, k.pending_remote);
        return;
    }
    // The server accepted the proof.
    if (!bytes.empty()) {
        close_conn(c, -EPROTO, "an accept with a payload");
        return;
    }
    Identity id;
    if (const int rc = k.hs.client_accepted(k.pending_remote.incarnation, id); rc != 0) {
        close_conn(c, rc, "an accept out of sequence");
        return;
    }
    // Frames after the accept come sealed, and every frame of ours goes so.
    if (!start_sealing(c, id, true))
        return;
    core_.set_identity(k.peer, id);
    established(c, k.pending_remote);
}

// The handshake chose a cipher: c seals from here on (its input from the
// next byte in the stage; its output from the next frame queued but the
// handshake's own).  The identity kept in the core holds no sealing key.
bool TcpMethod::start_sealing(std::uint32_t c, Identity &id, bool client)
{
    if (id.cipher == Cipher::none)
        return true;
    Conn &k = *conns_[c];
    try {
        k.sealer = std::make_unique<Sealer>(id, client);
    } catch (const std::exception &e) {
        if (client)
            close_conn(c, -EPROTONOSUPPORT, e.what());
        else
            refuse(c, -EPROTONOSUPPORT, e.what());
        return false;
    }
    explicit_bzero(id.seal_c2s.data(), id.seal_c2s.size());
    explicit_bzero(id.seal_s2c.data(), id.seal_s2c.size());
    k.rx_sealed = true;
    k.ro = k.rb;
    gossip::debug(gossip::Mask::tcp, "connection to {} sealed with {}", core_.url_of(k.peer),
                  id.cipher == Cipher::aes256gcm ? "AES-256-GCM" : "XChaCha20-Poly1305");
    return true;
}

void TcpMethod::established(std::uint32_t c, const HelloBody &body)
{
    Conn &k = *conns_[c];
    k.hello_received = true;
    Peer *p = peer_ptr(k.peer);
    if (k.peer == no_addr) {
        // Not authenticated (no authenticator): the peer is the URL it
        // names, as before the handshake existed.
        std::string url = body.url;
        if (url.empty()) {
            sockaddr_storage sa{};
            socklen_t len = sizeof sa;
            ::getpeername(k.fd.get(), reinterpret_cast<sockaddr *>(&sa), &len);
            url = net::sockaddr_url("tcp", reinterpret_cast<const sockaddr *>(&sa));
        } else if (url.rfind("tcp://", 0) != 0) {
            close_conn(c, -EPROTO, "hello with a non-tcp url");
            return;
        }
        const Addr a = core_.peer_for_url(*this, url);
        Peer &np = peer_of(a);
        if (np.hostport.empty() && !body.url.empty())
            np.hostport = url.substr(6);
        k.peer = a;
        np.conns.push_back(c);
        if (np.tx_conn == no_index)
            np.tx_conn = c;
        p = &np;
    }
    if (p == nullptr) {
        close_conn(c, -EPROTO, "connection without a peer");
        return;
    }
    p->remote = body;
    p->remote_known = true;
    k.remote_incarnation = body.incarnation;
    if (p->incarnation != body.incarnation) {
        // A new process behind this address: nothing sent to or seen
        // from the old one counts for READY any more.  No message goes
        // to a peer before its hello has arrived, so none is miscounted.
        p->incarnation = body.incarnation;
        p->msgs_sent = 0;
        p->msgs_seen = 0;
        p->readies.clear();
    }
    p->heard = Clock::now();
    // Control frames and sends that waited for this connection go now, in
    // order.
    if (p->tx_conn == c) {
        for (const FrameHeader &h : std::exchange(p->held_control, {}))
            queue_frame(c, h, no_index, 0, 0);
        while (!p->waiting.empty()) {
            const std::uint32_t i = p->waiting.front();
            p->waiting.remove(core_.ops, i);
            op(i).mstate = st_none;
            start_send(i, *p);
            if (k.closed)
                return;
        }
    }
}

} // namespace bmi::tcp
