// The TCP method's private parts, shared by its translation units:
// tcp.cpp (the method object, connections, op life, progress), send.cpp
// (the send queues) and receive.cpp (frames in).  Not for other users:
// the method's only door is make_method() in tcp.hpp.
#ifndef PVFS_LIBNET_TCP_METHOD_HPP
#define PVFS_LIBNET_TCP_METHOD_HPP

#include "../../core/core.hpp"
#include "../../core/handshake.hpp"
#include "../../core/ring.hpp"
#include "engine.hpp"
#include "frame.hpp"
#include "pvfs/unique_fd.hpp"
#include "seal.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bmi::tcp {

// Describes bytes [skip, skip + left) of a buffer list as iovecs, as many
// as fit in out.  Returns the count; left becomes what did not fit.
inline std::size_t map_iov(const std::vector<MutableBuffer> &bufs, std::size_t skip,
                           std::size_t &left, std::span<iovec> out)
{
    std::size_t n = 0;
    for (const MutableBuffer &b : bufs) {
        if (left == 0 || n == out.size())
            break;
        if (skip >= b.size) {
            skip -= b.size;
            continue;
        }
        const std::size_t take = std::min(b.size - skip, left);
        out[n++] = iovec{static_cast<std::byte *>(b.data) + skip, take};
        left -= take;
        skip = 0;
    }
    return n;
}

// Receive-side staging buffer per connection, allocated when bytes come:
// this much once the hello has arrived, before that only what a hello
// needs (a connection that proved nothing costs little).
inline constexpr std::size_t stage_size = std::size_t{64} * 1024;
inline constexpr std::size_t hello_stage_size = 2048;
static_assert(hello_stage_size >= frame_header_size + 22 + hello_max_url + max_auth_payload);
// Payloads at least this large are read straight into the user's buffer.
inline constexpr std::size_t direct_read_min = std::size_t{16} * 1024;
// Rendezvous data goes in chunks of this size (the receiver's limit).
inline constexpr std::size_t chunk_size = std::size_t{512} * 1024;
// Early (not yet received) eager messages buffered per peer.
inline constexpr std::size_t early_peer_bytes = std::size_t{4} * 1024 * 1024;
// Control frames held per peer while its connection is in its handshake.
inline constexpr std::size_t max_held_control = 4096;
// What every early entry counts against the early budgets on top of its
// payload (an RTS has none): the entry itself, so that empty or one-byte
// frames on tags nobody receives cannot pile up entries for free.
inline constexpr std::size_t early_entry_charge = 256;
inline constexpr std::size_t max_iov = 64;
// Messages to a peer whose tags are remembered, so that a READY can be
// checked against the messages still in flight (see on_ready).
inline constexpr std::uint64_t ready_window = 256;
// READY announcements kept per peer; older ones are forgotten (they only
// save a round trip).
inline constexpr std::size_t max_readies = 16;
inline constexpr int max_events = 64;

// Op states inside this method (Op::mstate).
enum : std::uint8_t {
    st_none = 0,
    st_recv_posted,     // receive in the match table
    st_recv_early_wait, // receive waiting for an early message to finish arriving
    st_recv_eager,      // eager payload streaming into the receive
    st_recv_rndv,       // CTS sent; data chunks arriving
    st_send_wait_conn,  // send waiting for the connection (or its hello)
    st_send_queued,     // eager / unexpected frame queued
    st_send_rts,        // RTS queued or sent; waiting for CTS
    st_send_data,       // data chunks being sent
};

// One frame (or a piece of one) waiting to be written.
struct TxItem {
    HeaderBytes hdr{};
    std::size_t hdr_sent = 0;
    std::uint32_t op = no_index; // payload source, or no_index for owned bytes
    OpId op_id = no_op;
    std::size_t off = 0; // payload range within the op's buffers
    std::size_t len = 0;
    std::size_t sent = 0;
    std::vector<std::byte> own; // payload owned by the item (hello, detached rest)
    FrameType type = FrameType::hello;
};

enum class Sink : std::uint8_t { none, op, early, unexpected, hello, discard }; // hello: and auth

struct Conn {
    pvfs::UniqueFd fd;
    std::uint32_t generation = 0;
    Addr peer = no_addr;
    bool connecting = false;
    bool hello_received = false;
    bool paused = false;        // not reading: a budget is exhausted
    bool send_held = false;     // not reading: the send queue is over its cap
    bool write_blocked = false; // the socket returned EAGAIN on the last write
    bool hung_up = false;       // the engine reported EPOLLRDHUP, EPOLLHUP or EPOLLERR
    bool closed = true;
    bool accepted = false; // incoming: counts against the connection caps
    std::uint32_t events = 0;
    std::string source;                  // accepted: the peer's address bytes (the per-address cap)
    Clock::time_point opened;            // accepted: when (the hello deadline)
    Clock::time_point frame_started;     // the first byte of an unfinished frame; {} if none
    Clock::time_point frame_progress;    // the last byte of it that arrived
    std::size_t frame_bytes = 0;         // its header and payload, once the header is in
    Clock::time_point stopped_since;     // when reading it stopped (paused, send_held)
    const char *stopped_why = "";        // why, for the log
    std::size_t unexpected_reserved = 0; // an unexpected payload arriving: its size
    RingQueue<TxItem> tx;
    std::size_t tx_bytes = 0; // unwritten bytes of tx, plus tx_entry_charge per item
    // receive side
    std::vector<std::byte> stage; // sized as bytes come (hello_stage_size, stage_size)
    std::size_t rb = 0;
    std::size_t re = 0;
    FrameHeader h;
    Sink sink = Sink::none;
    std::uint32_t sink_op = no_index;
    OpId sink_op_id = no_op;
    std::size_t sink_off = 0; // where in the op / buffer the next byte goes
    std::size_t payload_left = 0;
    std::vector<std::byte> sink_buf;
    std::size_t early_index = 0; // which early item the payload fills (by serial)
    std::uint64_t early_serial = 0;
    std::uint64_t remote_incarnation = 0; // from the peer's hello on this connection
    // The handshake (auth.cpp).  hello_received is set once it is over: until
    // then only a hello and AUTH frames may come, and the connection has no
    // peer on the accepting side.
    handshake::Session hs;
    bool hello_seen = false;          // the peer's hello arrived (maybe not yet proved)
    std::vector<std::byte> hello_out; // client: the hello to send once connected
    HelloBody pending_remote;         // the peer's hello, until the proof is in
    // Sealing (seal.hpp), once the handshake chose a cipher: frames after
    // the handshake's go sealed into `out` and from there to the socket;
    // once rx_sealed, stage bytes [rb, ro) are opened frames, [ro, re)
    // sealed ones not yet opened.
    std::unique_ptr<Sealer> sealer;
    bool rx_sealed = false;
    std::size_t ro = 0;
    SendBytes out;
    std::size_t out_off = 0;

    // Bytes wait to be written.
    [[nodiscard]] bool has_output() const noexcept { return !tx.empty() || out_off < out.size(); }
    // Part of a frame has arrived, not all of it.
    [[nodiscard]] bool mid_frame() const noexcept
    {
        return re > rb || payload_left > 0 || sink != Sink::none;
    }
    // Not stopped by a budget or by its send queue.
    [[nodiscard]] bool reading() const noexcept { return !paused && !send_held; }
};

// The frame deadlines run from a frame's first byte and from its latest:
// set when bytes of an unfinished frame are in (arrived: new ones were
// read), cleared when none are (parse clears them as each frame completes,
// so a frame begun in the same read starts afresh).
inline void note_frame_progress(Conn &k, bool arrived) noexcept
{
    if (!k.mid_frame()) {
        k.frame_started = {};
        k.frame_bytes = 0;
    } else if (k.frame_started == Clock::time_point{}) {
        k.frame_started = k.frame_progress = Clock::now();
    } else if (arrived) {
        k.frame_progress = Clock::now();
    }
}

// What a queued frame counts against Limits::send_queue_bytes besides its
// unwritten bytes: its queue entry, so that a flood of pings answered with
// 40-byte pongs is charged what it costs.
inline constexpr std::size_t tx_entry_charge = sizeof(TxItem);

[[nodiscard]] inline std::size_t tx_charge(const TxItem &it) noexcept
{
    return (frame_header_size - it.hdr_sent) + (it.len - it.sent) + tx_entry_charge;
}

// A receive the peer announced with READY: the next message on its tag,
// if it fits, goes as DIRECT instead of RTS/CTS.
struct Ready {
    Tag tag = 0;
    std::uint64_t receiver_op = 0;
    std::uint64_t capacity = 0;
};

// A message that arrived before its receive was posted.
struct Early {
    std::uint64_t serial = 0;
    Tag tag = 0;
    FrameType type = FrameType::eager; // eager or rts
    std::vector<std::byte> data;
    std::size_t size = 0;   // eager: payload length; rts: message length
    std::size_t charge = 0; // counted against the early budgets
    // The connection it came on: an RTS or an unfinished payload dies with
    // it, a complete eager message outlives it (its sender's op is done).
    std::uint32_t conn = no_index;
    std::uint32_t conn_generation = 0;
    Clock::time_point arrived; // dropped unreceived after the idle timeout
    bool complete = false;     // eager payload fully arrived
    std::uint64_t cookie = 0;  // rts: the sender's op
    std::uint32_t waiting_op = no_index;
};

struct Peer {
    Addr addr = no_addr;
    std::string hostport; // for connecting; "" when the peer cannot be called
    bool resolved = false;
    sockaddr_storage sa{};
    socklen_t salen = 0;
    std::uint32_t tx_conn = no_index;
    std::vector<std::uint32_t> conns;
    HelloBody remote;
    bool remote_known = false;
    OpList waiting{&Op::match}; // sends waiting for the connection
    OpList ops{&Op::peer_ops};  // every live op of this peer
    Clock::time_point heard;    // the last frame from it, any connection
    Clock::time_point pinged;   // the last ping to it
    std::deque<Early> early;
    std::size_t early_bytes = 0;
    std::uint64_t early_serial = 0;
    // Control frames (NACK, CANCEL, PING, ...) queued while the sending
    // connection was still in its handshake: they go once it is over.
    std::vector<FrameHeader> held_control;
    // Receiver-announced receives (docs/bmi.md, "Direct sends").
    std::uint64_t incarnation = 0;             // the peer's, from its latest hello
    std::uint64_t msgs_sent = 0;               // eager/rts/direct frames queued to it
    std::uint64_t msgs_seen = 0;               // eager/rts/direct frames accepted from it
    std::array<Tag, ready_window> sent_tags{}; // message n's tag at n % window
    std::vector<Ready> readies;                // oldest first
};

class TcpMethod final : public Method {
public:
    TcpMethod(Core &core, std::string_view engine);
    ~TcpMethod() override;
    TcpMethod(const TcpMethod &) = delete;
    TcpMethod &operator=(const TcpMethod &) = delete;
    TcpMethod(TcpMethod &&) = delete;
    TcpMethod &operator=(TcpMethod &&) = delete;

    [[nodiscard]] std::string_view scheme() const override { return "tcp"; }
    std::string listen(std::string_view hostport) override;
    int add_peer(Addr addr, std::string_view hostport) override;
    bool post(std::uint32_t i) override;
    void cancel(std::uint32_t i, int error, bool must_end) override;
    void unexpected_released(Addr addr) override;
    int watch_internal(int fd) override;
    int unwatch_internal(int fd) override;
    void progress(int timeout_ms) override;
    void drop_peer(Addr addr, int error) override;
    void forget_messages(Addr addr) override;
    [[nodiscard]] std::uint64_t open_connections() const override;
    [[nodiscard]] std::uint64_t direct_sends() const override { return direct_sends_; }
    [[nodiscard]] std::uint64_t engine() const override { return engine_->id(); }
    [[nodiscard]] std::uint64_t counter(Info key) const override;
    Clock::time_point peer_alive(std::uint32_t i) override;
    int watch_external(int fd) override;
    int unwatch_external(int fd) override;

private:
    Peer &peer_of(Addr addr);
    Peer *peer_ptr(Addr addr);
    Op &op(std::uint32_t i) { return core_.ops[i]; }

    // connections
    std::uint32_t new_conn(pvfs::UniqueFd fd);
    void tune_socket(int fd) const;
    int connect_peer(Peer &p);
    void close_conn(std::uint32_t c, int error, std::string_view why);
    void update_events(std::uint32_t c);
    void queue_hello(std::uint32_t c);
    // auth.cpp: the handshake over this method's frames.
    [[nodiscard]] std::vector<std::byte> transport_hello() const;
    void queue_hello_bytes(std::uint32_t c, std::vector<std::byte> payload, std::uint16_t flags);
    void queue_auth(std::uint32_t c, int status, std::span<const std::byte> payload);
    // Sends a refusal and closes c (its ops fail with error).
    void refuse(std::uint32_t c, int error, std::string_view why);
    void hello_payload(std::uint32_t c); // a hello's payload is in
    void auth_payload(std::uint32_t c);  // an AUTH frame's
    // The peer's hello is in and, with an authenticator, proved: the
    // connection joins its peer and waiting sends go.
    void established(std::uint32_t c, const HelloBody &body);
    // Client: the handshake's hello for new connection c to peer (sent
    // once connected); 0 or the authenticator's refusal.
    int start_client_handshake(std::uint32_t c, Addr peer);
    void on_connected(std::uint32_t c);
    void accept_all();
    void check_deadlines(Clock::time_point now);
    // Reading from c stopped or resumed (paused or send_held changed since
    // it was `was_reading`): the stop's clock, the events, the frame clock.
    void reading_changed(std::uint32_t c, bool was_reading);
    // Early messages nobody received within the idle timeout are dropped
    // (the early budgets are not held forever).
    void expire_early(Clock::time_point now);
    // A peer whose last connection closed: freed (with its Addr) at the end
    // of the progress call, if it is still idle then.
    void retire_peers();
    [[nodiscard]] bool peer_idle(const Peer &p) const;

    // sending
    bool start_send(std::uint32_t i, Peer &p);
    void queue_frame(std::uint32_t c, const FrameHeader &h, std::uint32_t opi, std::size_t off,
                     std::size_t len, bool front = false);
    void queue_control(Peer &p, const FrameHeader &h);
    bool flush(std::uint32_t c); // false when the connection died
    bool flush_sealed(std::uint32_t c);
    void copy_from_op(std::uint32_t i, std::size_t off, std::byte *dst, std::size_t n);
    // Calls `piece` on each stretch of op i's buffers in [off, off + n).
    void for_each_piece(std::uint32_t i, std::size_t off, std::size_t n,
                        const std::function<void(const std::byte *, std::size_t)> &piece);
    // Sealing starts on c (auth.cpp): false when c was refused.
    bool start_sealing(std::uint32_t c, Identity &id, bool client);
    // Sealed input: the next frame opened in the stage (1), not all in
    // yet (0), or the connection closed (-1).
    int open_next(std::uint32_t c);
    // Room in the stage for the sealed frame arriving.
    void sealed_room(Conn &k);
    void item_written(std::uint32_t c, TxItem &item);
    void detach_tx(std::uint32_t i);
    // Where the answers to what arrives on k are queued: its own queue and
    // its peer's sending connection's; the larger.
    [[nodiscard]] std::size_t answers_queued(const Conn &k);
    // That is over send_queue_bytes, for a peer the user did not look up:
    // the peer asks and does not read the answers.
    [[nodiscard]] bool send_queue_full(const Conn &k);
    // Before a frame is read from c: false (reading stops, send_held) when
    // its send queue is full even after a flush.
    bool send_queue_room(std::uint32_t c);
    // Reading resumes once the queue is down to half the cap.
    void release_sends(std::uint32_t c);

    // receiving
    bool handle_readable(std::uint32_t c); // true: the socket is drained
    bool parse(std::uint32_t c);           // false when the connection died or paused
    enum class Verdict : std::uint8_t { accept, pause, close };
    Verdict on_header(std::uint32_t c, const FrameHeader &h);
    Verdict on_auth_header(std::uint32_t c, const FrameHeader &h); // auth.cpp
    void payload_done(std::uint32_t c);
    void copy_into_op(std::uint32_t i, std::size_t off, const std::byte *src, std::size_t n);
    bool match_recv(Peer &p, Tag tag, std::uint32_t &out);
    static std::deque<Early>::iterator find_early(Peer &p, std::uint64_t serial);
    std::deque<Early>::iterator drop_early(Peer &p, std::deque<Early>::iterator it);
    Verdict over_budget(const char *why);
    void resume_peer(Addr addr);
    void announce_receive(Peer &p, std::uint32_t i);

    // One handler per frame type after the hello (on_header dispatches
    // through frame_handlers_): c is the connection, p its peer.
    using FrameHandler = Verdict (TcpMethod::*)(std::uint32_t c, Peer &p, const FrameHeader &h);
    using FrameHandlers = std::array<FrameHandler, static_cast<std::size_t>(FrameType::direct) + 1>;
    static const FrameHandlers frame_handlers_;
    Verdict on_eager(std::uint32_t c, Peer &p, const FrameHeader &h); // and direct
    Verdict charge_early(Peer &p, std::size_t charge);
    Verdict on_unexpected(std::uint32_t c, Peer &p, const FrameHeader &h);
    Verdict on_rts(std::uint32_t c, Peer &p, const FrameHeader &h);
    Verdict on_cts(std::uint32_t c, Peer &p, const FrameHeader &h);
    Verdict on_data(std::uint32_t c, Peer &p, const FrameHeader &h);
    Verdict on_nack(std::uint32_t c, Peer &p, const FrameHeader &h);
    Verdict on_cancel(std::uint32_t c, Peer &p, const FrameHeader &h);
    Verdict on_ping(std::uint32_t c, Peer &p, const FrameHeader &h);
    Verdict on_pong(std::uint32_t c, Peer &p, const FrameHeader &h);
    Verdict on_ready(std::uint32_t c, Peer &p, const FrameHeader &h);
    void sink_matched_eager(std::uint32_t c, std::uint32_t i, const FrameHeader &h);
    void sink_early_eager(std::uint32_t c, Peer &p, const FrameHeader &h);
    void answer_rts(std::uint32_t c, Peer &p, std::uint32_t i, const FrameHeader &h);
    static bool take_ready(Peer &p, Tag tag, Ready &out);
    static void note_sent(Peer &p, Tag tag);

    void finish(std::uint32_t i, int error, std::size_t actual);
    void ping_waiting_peers();
    void ping(Peer &p, Clock::time_point now);
    void unlink(std::uint32_t i);
    void fail_peer_ops(Peer &p, int error);

    // posted receives: buckets by (peer, tag), FIFO within a bucket
    static constexpr std::size_t bucket_count = 4096;
    static std::size_t bucket_of(Addr a, Tag t)
    {
        const std::uint64_t k = (a * 0x9e3779b97f4a7c15ULL) ^ static_cast<std::uint32_t>(t);
        return (k ^ (k >> 29U)) & (bucket_count - 1);
    }

    Core &core_;
    const std::uint64_t incarnation_;
    std::unique_ptr<Engine> engine_;
    std::vector<pvfs::UniqueFd> listeners_;
    std::string my_url_;
    std::vector<std::unique_ptr<Conn>> conns_;
    std::vector<std::uint32_t> free_conns_;
    std::uint32_t conn_generation_ = 0;
    std::vector<std::unique_ptr<Peer>> peers_; // by Addr - 1
    std::vector<OpList> buckets_;
    std::vector<std::uint32_t> to_parse_; // connections with staged bytes to retry
    Clock::time_point last_ping_round_;
    std::vector<int> externals_;         // the caller's watched fds (Bmi::watch_fd)
    std::vector<std::uint32_t> dirty_;   // connections with frames queued meanwhile
    std::vector<std::uint32_t> unread_;  // connections left with unread input
    std::vector<std::uint32_t> scratch_; // reused by progress: no allocation per call
    // progress()'s ready events, kept: clearing them on every call of a
    // spinning test* cost more than the wait that fills them.
    std::array<ReadyEvent, max_events> events_{};
    std::uint64_t direct_sends_ = 0;

    // Limits (Limits::max_connections and after; docs/bmi.md "Limits").
    std::size_t accepted_open_ = 0;
    std::unordered_map<std::string, std::size_t> per_source_;
    std::size_t early_total_ = 0;         // early bytes (and RTS charges), all peers
    std::size_t unexpected_inflight_ = 0; // unexpected payloads being received
    std::size_t stopped_ = 0;             // open connections not being read
    std::size_t held_ = 0;                // of them, held on a send queue
    std::uint64_t refused_ = 0;
    Clock::time_point next_deadline_check_;
    std::vector<Addr> retiring_;
    const char *close_why_ = nullptr; // why a handler's Verdict::close closes
    const char *pause_why_ = "";      // why its Verdict::pause pauses
    int close_error_ = -EPROTO;
    // Refusals are logged at most once a minute each, with how many were
    // not.
    struct RateLog {
        Clock::time_point last{};
        std::uint64_t unlogged = 0;
        // True when this event is to be logged (unlogged then says how many
        // were not since the last line).
        bool due(Clock::time_point now);
    };
    RateLog refused_log_;
    RateLog deadline_log_;
    RateLog budget_log_;
    RateLog auth_log_;
    RateLog seal_log_;
    static void log_refusal(RateLog &log, std::string_view what);
    void flush_rate_logs(Clock::time_point now);
};

} // namespace bmi::tcp

#endif // PVFS_LIBNET_TCP_METHOD_HPP
