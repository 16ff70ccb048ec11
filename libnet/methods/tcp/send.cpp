// The TCP method's send path: frames queued per connection and written
// with sendmsg as far as the socket takes them; an op's payload is sent
// from its own buffers.
#include "../../core/net.hpp"
#include "method.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace bmi::tcp {

using net::errno_text;

// Queues the first frame of a send; true if it completed at once.
bool TcpMethod::start_send(std::uint32_t i, Peer &p)
{
    Op &o = op(i);
    const std::uint32_t c = p.tx_conn;
    o.conn = c;
    FrameHeader h;
    h.tag = o.tag;
    h.size = o.total;
    if (o.kind == OpKind::send_unexpected) {
        if (o.total > p.remote.unexpected_limit) {
            finish(i, -EMSGSIZE, 0);
            return false;
        }
        h.type = FrameType::unexpected;
    } else {
        // Every expected message consumes the READY of its tag, if any: it
        // is the message that the announced receive will match.
        note_sent(p, o.tag);
        Ready r;
        const bool announced = take_ready(p, o.tag, r);
        if (o.total <= p.remote.eager_limit) {
            h.type = FrameType::eager;
        } else if (announced && o.total <= r.capacity && o.total <= p.remote.chunk) {
            // The receive is posted and waits: skip the RTS/CTS round trip.
            h.type = FrameType::direct;
            h.cookie2 = r.receiver_op;
            ++direct_sends_;
        } else {
            h.type = FrameType::rts;
            h.cookie = o.id;
            o.mstate = st_send_rts;
            queue_frame(c, h, i, 0, 0);
            flush(c);
            return false;
        }
    }
    o.mstate = st_send_queued;
    const bool idle = conns_[c]->tx.empty();
    queue_frame(c, h, i, 0, o.total);
    if (idle) {
        // Immediate completion: the socket may take it all right now.
        flush(c);
        return op(i).state == OpState::done;
    }
    return false;
}

void TcpMethod::queue_frame(std::uint32_t c, const FrameHeader &h, std::uint32_t opi,
                            std::size_t off, std::size_t len, bool front)
{
    TxItem item;
    encode(h, item.hdr);
    item.op = opi;
    item.op_id = opi == no_index ? no_op : op(opi).id;
    item.off = off;
    item.len = len;
    item.type = h.type;
    Conn &k = *conns_[c];
    if (k.tx.empty())
        dirty_.push_back(c);
    k.tx_bytes += tx_charge(item);
    if (front)
        k.tx.push_front(std::move(item));
    else
        k.tx.push_back(std::move(item));
    update_events(c);
}

void TcpMethod::queue_control(Peer &p, const FrameHeader &h)
{
    if (p.tx_conn == no_index) {
        if (connect_peer(p) != 0)
            return; // nobody to tell; the peer's own deadline ends its op
    }
    // Nothing but the handshake's frames crosses a connection before its
    // proof (docs/bmi.md "Authentication"; the peer would close it): a
    // control frame waits for the end, and if this connection dies, for
    // the next one's (what it is about stays the peer's).  One ping is as
    // good as many; the rest are bounded by the ops they are about, and
    // beyond max_held_control the peer's own deadlines end its ops.
    if (!conns_[p.tx_conn]->hello_received) {
        const bool dup = h.type == FrameType::ping &&
                         std::ranges::any_of(p.held_control, [](const FrameHeader &held) {
                             return held.type == FrameType::ping;
                         });
        if (!dup && p.held_control.size() < max_held_control)
            p.held_control.push_back(h);
        return;
    }
    queue_frame(p.tx_conn, h, no_index, 0, 0);
}

// Writes as much queued data as the socket takes.
bool TcpMethod::flush(std::uint32_t c)
{
    Conn &k = *conns_[c];
    if (k.closed || k.connecting)
        return !k.closed;
    if (k.sealer)
        return flush_sealed(c);
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init): filled before use
    std::array<iovec, max_iov> iov;
    while (!k.tx.empty()) {
        std::size_t n = 0;
        for (const TxItem &it : k.tx) {
            if (n + 2 > max_iov)
                break;
            if (it.hdr_sent < frame_header_size) {
                // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast)
                iov[n++] = iovec{const_cast<std::byte *>(it.hdr.data() + it.hdr_sent),
                                 frame_header_size - it.hdr_sent};
            }
            std::size_t skip = it.off + it.sent;
            std::size_t left = it.len - it.sent;
            if (left == 0)
                continue;
            if (it.op == no_index) {
                iov[n++] = iovec{const_cast<std::byte *>(it.own.data() + it.sent), left}; // NOLINT
                continue;
            }
            n += map_iov(op(it.op).bufs, skip, left, std::span(iov).subspan(n));
            if (left != 0)
                break; // out of iovecs inside this item
        }
        msghdr msg{};
        msg.msg_iov = iov.data();
        msg.msg_iovlen = n;
        const ssize_t w = ::sendmsg(k.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                k.write_blocked = true;
                break;
            }
            close_conn(c, errno == ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET, errno_text(errno));
            return false;
        }
        auto written = static_cast<std::size_t>(w);
        while (written > 0 || (!k.tx.empty() && k.tx.front().hdr_sent == frame_header_size &&
                               k.tx.front().sent == k.tx.front().len)) {
            TxItem &it = k.tx.front();
            const std::size_t h = std::min(written, frame_header_size - it.hdr_sent);
            it.hdr_sent += h;
            written -= h;
            const std::size_t d = std::min(written, it.len - it.sent);
            it.sent += d;
            written -= d;
            k.tx_bytes -= h + d;
            if (it.hdr_sent == frame_header_size && it.sent == it.len) {
                TxItem done = std::move(it);
                k.tx.pop_front();
                k.tx_bytes -= tx_entry_charge;
                item_written(c, done);
                if (k.closed)
                    return false;
            } else {
                if (it.op != no_index && d > 0)
                    core_.touch(it.op);
                break;
            }
        }
    }
    if (k.tx.empty())
        k.write_blocked = false;
    release_sends(c);
    update_events(c);
    return true;
}

void TcpMethod::copy_from_op(std::uint32_t i, std::size_t off, std::byte *dst, std::size_t n)
{
    for_each_piece(i, off, n, [&dst](const std::byte *p, std::size_t take) {
        std::memcpy(dst, p, take);
        dst += take;
    });
}

void TcpMethod::for_each_piece(std::uint32_t i, std::size_t off, std::size_t n,
                               const std::function<void(const std::byte *, std::size_t)> &piece)
{
    for (const MutableBuffer &b : op(i).bufs) {
        if (n == 0)
            break;
        if (off >= b.size) {
            off -= b.size;
            continue;
        }
        const std::size_t take = std::min(b.size - off, n);
        piece(static_cast<const std::byte *>(b.data) + off, take);
        n -= take;
        off = 0;
    }
}

// A sealed connection (seal.hpp): each queued frame is sealed whole into
// k.out (the handshake's own frames, before it, are copied as they are),
// a bounded batch at a time, and k.out is written as far as the socket
// takes it.  A frame leaves the queue once sealed: its op's bytes are
// copied by then, so its send may complete.
bool TcpMethod::flush_sealed(std::uint32_t c)
{
    constexpr std::size_t batch = std::size_t{256} * 1024;
    Conn &k = *conns_[c];
    for (;;) {
        while (!k.tx.empty() && k.out.size() - k.out_off < batch) {
            TxItem it = std::move(k.tx.front());
            k.tx.pop_front();
            k.tx_bytes -= tx_charge(it);
            if (k.out_off == k.out.size()) {
                k.out.clear();
                k.out_off = 0;
            }
            const std::size_t at = k.out.size();
            const std::size_t len = it.len - it.sent;
            const bool plain = it.type == FrameType::hello || it.type == FrameType::auth;
            const std::size_t head =
                plain ? frame_header_size - it.hdr_sent : sealed_overhead + frame_header_size;
            k.out.resize(at + head + len);
            std::byte *dst = k.out.data() + at;
            if (plain) {
                std::memcpy(dst, it.hdr.data() + it.hdr_sent, head);
                if (it.op == no_index)
                    std::memcpy(dst + head, it.own.data() + it.sent, len);
                else
                    copy_from_op(it.op, it.off + it.sent, dst + head, len);
            } else {
                // Encrypted from where the bytes lie, not copied first.
                std::memcpy(dst + sealed_overhead, it.hdr.data(), frame_header_size);
                k.sealer->begin(dst);
                if (it.op == no_index)
                    k.sealer->add(it.own.data() + it.sent, len);
                else
                    for_each_piece(
                        it.op, it.off + it.sent, len,
                        [&k](const std::byte *p, std::size_t n) { k.sealer->add(p, n); });
                k.sealer->finish();
            }
            k.tx_bytes += head + len;
            it.hdr_sent = frame_header_size;
            it.sent = it.len;
            item_written(c, it);
            if (k.closed)
                return false;
        }
        const std::size_t left = k.out.size() - k.out_off;
        if (left == 0)
            break;
        const ssize_t w =
            ::send(k.fd.get(), k.out.data() + k.out_off, left, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                k.write_blocked = true;
                break;
            }
            close_conn(c, errno == ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET, errno_text(errno));
            return false;
        }
        const auto written = static_cast<std::size_t>(w);
        k.out_off += written;
        k.tx_bytes -= written;
        if (written < left) {
            k.write_blocked = true; // the socket's buffer is full
            break;
        }
    }
    if (!k.has_output())
        k.write_blocked = false;
    release_sends(c);
    update_events(c);
    return true;
}

std::size_t TcpMethod::answers_queued(const Conn &k)
{
    std::size_t n = k.tx_bytes;
    if (const Peer *p = peer_ptr(k.peer); p != nullptr && p->tx_conn != no_index)
        n = std::max(n, conns_[p->tx_conn]->tx_bytes);
    return n;
}

bool TcpMethod::send_queue_full(const Conn &k)
{
    return answers_queued(k) > core_.limits.send_queue_bytes &&
           (k.peer == no_addr || !core_.pinned(k.peer));
}

// The peer asks (pings, requests the application answers) and does not
// read the answers: reading from it stops until it does, so the queue
// holds at most the cap plus the answers to what was already read.  A
// peer the user looked up is spared, as by the frame deadline: then on
// any connection at most one side holds (the side that did not look the
// other up; whoever connects first looked its peer up), so two ends that
// both send more than they read cannot wait for each other forever.
bool TcpMethod::send_queue_room(std::uint32_t c)
{
    Conn &k = *conns_[c];
    if (!send_queue_full(k))
        return true;
    // What the sockets take now is not queued.
    if (!flush(c))
        return false;
    if (const Peer *p = peer_ptr(k.peer); p != nullptr && p->tx_conn != no_index && p->tx_conn != c)
        flush(p->tx_conn);
    if (k.closed || !send_queue_full(k))
        return !k.closed;
    const bool was_reading = k.reading();
    k.send_held = true;
    ++held_;
    if (was_reading)
        k.stopped_why = "its peer does not read what is sent to it (send queue over "
                        "send_queue_bytes)";
    reading_changed(c, was_reading);
    return false;
}

// A queue of c drained: the connections held on it read again once it is
// down to half the cap (not stopping and starting for every few bytes).
void TcpMethod::release_sends(std::uint32_t c)
{
    if (held_ == 0)
        return; // the common case, on every flush
    const auto release = [this](std::uint32_t h) {
        Conn &k = *conns_[h];
        if (!k.send_held || k.closed)
            return;
        const bool looked_up = k.peer != no_addr && core_.pinned(k.peer);
        if (answers_queued(k) > core_.limits.send_queue_bytes / 2 && !looked_up)
            return;
        k.send_held = false;
        --held_;
        reading_changed(h, false);
    };
    if (const Peer *p = peer_ptr(conns_[c]->peer); p != nullptr) {
        for (const std::uint32_t h : p->conns)
            release(h);
    } else {
        release(c);
    }
}

void TcpMethod::item_written(std::uint32_t c, TxItem &item)
{
    if (item.op == no_index)
        return;
    const std::uint32_t i = item.op;
    Op &o = op(i);
    if (o.state != OpState::active || o.id != item.op_id)
        return;
    core_.touch(i);
    switch (item.type) {
    case FrameType::eager:
    case FrameType::direct:
    case FrameType::unexpected:
        o.done_bytes = o.total;
        finish(i, 0, o.total);
        break;
    case FrameType::data: {
        o.done_bytes += item.len;
        if (o.done_bytes >= o.total) {
            finish(i, 0, o.total);
            break;
        }
        FrameHeader h;
        h.type = FrameType::data;
        h.tag = o.tag;
        h.cookie = o.id;
        h.cookie2 = o.remote_cookie;
        h.size = std::min(chunk_size, o.total - o.done_bytes);
        queue_frame(c, h, i, o.done_bytes, h.size);
        break;
    }
    default:
        break;
    }
}

// Removes the op from every send queue.  A frame already partly on the wire
// must be finished for the stream to stay framed: its remaining bytes are
// copied so the caller may reuse the buffer at once.
void TcpMethod::detach_tx(std::uint32_t i)
{
    const std::uint32_t c = op(i).conn;
    if (c == no_index || c >= conns_.size() || conns_[c]->closed)
        return;
    auto &tx = conns_[c]->tx;
    for (auto it = tx.begin(); it != tx.end();) {
        if (it->op != i) {
            ++it;
            continue;
        }
        if (it->hdr_sent == 0) {
            conns_[c]->tx_bytes -= tx_charge(*it);
            it = tx.erase(it);
            continue;
        }
        std::vector<std::byte> rest(it->len - it->sent);
        // Copy op bytes [off+sent, off+len) into rest.
        std::size_t pos = 0;
        std::size_t skip = it->off + it->sent;
        for (const MutableBuffer &b : op(i).bufs) {
            if (pos == rest.size())
                break;
            if (skip >= b.size) {
                skip -= b.size;
                continue;
            }
            const std::size_t n = std::min(b.size - skip, rest.size() - pos);
            std::memcpy(rest.data() + pos, static_cast<const std::byte *>(b.data) + skip, n);
            pos += n;
            skip = 0;
        }
        it->own = std::move(rest);
        it->off = 0;
        it->len = it->own.size();
        it->sent = 0;
        it->op = no_index;
        it->op_id = no_op;
        ++it;
    }
    release_sends(c);
}

} // namespace bmi::tcp
