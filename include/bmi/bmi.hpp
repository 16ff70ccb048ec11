// BMI, the Buffered Message Interface: pvfs's network layer.
//
// A small non-blocking message API in the tradition of PVFS2's BMI.  Posts
// never block: they complete at once ("completed"), are queued ("posted") or
// fail.  Only the test* calls may sleep, up to their max_idle_ms, on the
// methods' file descriptors; progress happens inside them, with no thread of
// BMI's own.  Methods (tcp and ib) sit behind one interface and are chosen
// by the address scheme ("tcp://host:port", "ib://host:port").
//
// Semantics
// - Reliable and ordered per (peer, tag).  No wildcard receive: a receive
//   names its peer and tag.  New requests from unknown peers arrive as
//   "unexpected" messages through testunexpected().
// - A sender may send less than the receiver posted (actual size reported).
//   A message larger than the posted receive fails the receive with -EMSGSIZE;
//   the connection stays usable.  See docs/bmi.md for the sender's side.
// - Every op ends: it completes, fails with a precise negative errno, or is
//   cancelled.  Errors: -ECONNREFUSED, -ECONNRESET (peer gone), -ETIMEDOUT (no
//   progress within the idle timeout), -ECANCELED, -EMSGSIZE, -EPROTO (peer
//   sent something malformed), -EHOSTUNREACH, -EINVAL, -ENOMEM.
// - Memory handed to a post must stay valid and untouched until the op
//   completes or test* reports its cancellation.
//
// Threading: one Bmi object is used by one thread at a time.  Several Bmi
// objects may live in one process (a client and a server in one test).
#ifndef PVFS_BMI_BMI_HPP
#define PVFS_BMI_BMI_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bmi {

using Addr = std::uint64_t;      // a peer; 0 is "no address"
using OpId = std::uint64_t;      // a posted op; 0 is "none"
using Tag = std::int32_t;        // matches sends to receives per peer
using ContextId = std::uint32_t; // a completion queue

inline constexpr Addr no_addr = 0;
inline constexpr OpId no_op = 0;

enum class Role : std::uint8_t {
    client, // connects out only
    server, // also listens on Options::listen
};

struct Options {
    Role role = Role::client;
    // Addresses to listen on, e.g. "tcp://127.0.0.1:3334"; port 0 picks a
    // free port (listen_addresses() tells which).
    std::vector<std::string> listen;
    // TCP progress engine: "epoll", "uring", or "" for $BMI_TCP_ENGINE,
    // else io_uring when the kernel allows it, else epoll.
    std::string tcp_engine;
};

// Tunables and facts, for set_info/get_info.
enum class Info : std::uint8_t {
    eager_limit,           // bytes; larger messages use rendezvous (16 KiB)
    unexpected_limit,      // bytes; largest unexpected message accepted (16 KiB)
    unexpected_peer_bytes, // bytes of unexpected messages buffered per peer
                           // before reading from it pauses (1 MiB)
    idle_timeout_ms,       // an op without progress this long fails (30000)
    keepalive_ms,          // TCP keepalive idle time (10000)
    spin_us,               // a test* call that must wait polls at least
                           // this long before it sleeps on the method fds
                           // (50; 0 to never poll; at most 10000); see
                           // poll_us
    drop_addr,             // set: close the connections to this Addr now;
                           // its ops fail with -ECONNRESET
    engine,                // get: 1 epoll, 2 io_uring (env BMI_TCP_ENGINE)
    open_connections,      // get: connections currently open
    direct_sends,          // get: messages above the eager limit sent at once
                           // into a receive the peer announced (no RTS/CTS)
    registrations,         // get: memory registrations the ib method made
                           // for transfers (not memalloc / register_memory)
    registration_hits,     // get: transfers served by a cached registration
    poll_us,               // get: how long the next wait polls: spin_us, or
                           // when most recent waits ended within 1 ms,
                           // twice their typical length (at most 1 ms), so
                           // a slow round trip is not paid with a sleep
    // Limits on what peers that have proved nothing may hold (docs/bmi.md,
    // "Limits"); the tcp method enforces them, the ib method the
    // connection caps and hello_timeout_ms.
    max_connections,             // accepted connections open at once; more are
                                 // closed at accept (4096)
    max_connections_per_address, // the same per source address (64)
    hello_timeout_ms,            // an accepted connection without a hello this
                                 // long is closed (10000)
    frame_timeout_ms,            // a frame begun with no byte of it for this
                                 // long closes its connection (30000)
    unexpected_total_bytes,      // unexpected messages buffered for all peers
                                 // together; a message over it closes its
                                 // connection (256 MiB)
    early_total_bytes,           // early messages (arrived before their
                                 // receive), all peers together (64 MiB)
    peers,                       // get: addresses known (looked up, or peers
                                 // with a connection or a message held)
    refused_connections,         // get: connections closed at accept by the caps
    unexpected_bytes,            // get: unexpected message bytes buffered now
    early_bytes,                 // get: early message bytes (and RTS entries)
                                 // buffered now
    frame_min_rate,              // bytes a second: a frame must also be
                                 // complete within frame_timeout_ms plus its
                                 // size at this rate (4096)
    send_queue_bytes,            // bytes queued to send on one connection
                                 // (peers not looked up) over which reading
                                 // from it stops until half drains; not
                                 // drained for idle_timeout_ms, it is closed
                                 // (4 MiB)
    queued_bytes,                // get: bytes queued to send now, all
                                 // connections (each frame counted with its
                                 // queue entry)
};

// A contiguous piece of a list send / receive.
struct ConstBuffer {
    const void *data = nullptr;
    std::size_t size = 0;
};
struct MutableBuffer {
    void *data = nullptr;
    std::size_t size = 0;
};

// The outcome of a post.
struct Post {
    int error = 0;          // 0, or a negative errno: nothing was posted
    bool completed = false; // finished now: no op to test, actual_size valid
    OpId op = no_op;        // the op to test when posted
    std::size_t actual_size = 0;

    [[nodiscard]] bool ok() const noexcept { return error == 0; }
};

// A finished op, from test/testsome/testcontext.
struct Completion {
    OpId op = no_op;
    int error = 0; // 0 or a negative errno
    std::size_t actual_size = 0;
    void *user_ptr = nullptr;
    Addr peer = no_addr;
    Tag tag = 0;
};

class UnexpectedPool;

// An unexpected message.  Owns its bytes; destroying it returns them to
// BMI (unexpected_free) and the peer's unexpected budget.
class UnexpectedMessage {
public:
    UnexpectedMessage() = default;
    UnexpectedMessage(UnexpectedMessage &&other) noexcept;
    UnexpectedMessage &operator=(UnexpectedMessage &&other) noexcept;
    UnexpectedMessage(const UnexpectedMessage &) = delete;
    UnexpectedMessage &operator=(const UnexpectedMessage &) = delete;
    ~UnexpectedMessage();

    [[nodiscard]] Addr peer() const noexcept { return peer_; }
    [[nodiscard]] Tag tag() const noexcept { return tag_; }
    [[nodiscard]] std::span<const std::byte> data() const noexcept { return {buf_.data(), size_}; }

private:
    friend class UnexpectedPool;
    Addr peer_ = no_addr;
    Tag tag_ = 0;
    std::size_t size_ = 0;
    std::vector<std::byte> buf_;
    std::shared_ptr<UnexpectedPool> pool_;
};

// Memory from memalloc: suitable for every method (registered with the
// InfiniBand devices when the ib method is in use, so transfers from and
// into it need no registration of their own).  Move-only.
class Memory {
public:
    Memory() = default;
    explicit Memory(std::size_t size);
    [[nodiscard]] std::byte *data() noexcept { return bytes_.get(); }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }

private:
    friend class Core;
    struct Free {
        void operator()(std::byte *p) const noexcept;
    };
    std::unique_ptr<std::byte, Free> bytes_;
    std::size_t size_ = 0;
    // The methods' registrations of bytes_; declared after it, so released
    // before the memory is freed.
    std::shared_ptr<void> keep_;
};

// A registration of caller-owned memory with the transports
// (Bmi::register_memory): lasts as long as the handle.  Move-only.
class Registration {
public:
    Registration() = default;
    explicit Registration(std::shared_ptr<void> keep) : keep_(std::move(keep)) {}
    Registration(Registration &&) noexcept = default;
    Registration &operator=(Registration &&) noexcept = default;
    Registration(const Registration &) = delete;
    Registration &operator=(const Registration &) = delete;
    ~Registration() = default;

private:
    std::shared_ptr<void> keep_;
};

// Memory a peer may read and write directly (Bmi::expose): lasts as long
// as the handle.  Move-only.
class Exposure {
public:
    Exposure() = default;
    explicit Exposure(std::shared_ptr<void> keep) : keep_(std::move(keep)) {}
    Exposure(Exposure &&) noexcept = default;
    Exposure &operator=(Exposure &&) noexcept = default;
    Exposure(const Exposure &) = delete;
    Exposure &operator=(const Exposure &) = delete;
    ~Exposure() = default;

private:
    std::shared_ptr<void> keep_;
};

// ---- authenticated connections (docs/bmi.md "Authentication") -----------
//
// BMI knows no keys: the user installs an Authenticator (set_authenticator)
// and every connection runs its handshake before anything else crosses it.
// The client side sends a hello, the server answers with a challenge (or a
// refusal), the client answers with a proof and the server verifies it.
// The methods hand the authenticator their own transport hellos (limits,
// incarnation, URL) so that the transcript it authenticates covers them.
// Until the server has verified the proof, any other frame closes the
// connection and nothing from it is buffered or matched; an accepted
// connection's peer is then its Identity, never the URL it claims (that is
// only a label for rev_lookup and logs).  A refusal fails the connection's
// ops with -EACCES.

// How a connection's frames are sealed after its handshake (docs/bmi.md
// "Encryption"): chosen by the authenticator, under its MACs.
enum class Cipher : std::uint8_t {
    none = 0,              // frames in the clear
    aes256gcm = 1,         // AES-256-GCM (both ends have AES-NI)
    xchacha20poly1305 = 2, // XChaCha20-Poly1305 (the IETF construction)
};

// Who a connection proved to be.
struct Identity {
    std::string name;              // the key's name, as the authenticator gives it
    std::uint64_t incarnation = 0; // the peer's BMI incarnation (filled in by BMI)
    std::array<std::byte, 32> session_key{};
    // Sealing: with a cipher, every frame after the handshake is sealed
    // under seal_c2s (client to server) or seal_s2c; a method that cannot
    // seal refuses the connection.
    Cipher cipher = Cipher::none;
    std::array<std::byte, 32> seal_c2s{};
    std::array<std::byte, 32> seal_s2c{};

    Identity() = default;
    Identity(const Identity &) = default;
    Identity(Identity &&) noexcept = default;
    Identity &operator=(const Identity &) = default;
    Identity &operator=(Identity &&) noexcept = default;
    // Every copy wipes its session key when it goes (explicit_bzero: a
    // store the compiler may not drop), wherever it was held.
    ~Identity();
};

// An authenticator's state for one connection between two steps.
class Handshake {
public:
    Handshake() = default;
    virtual ~Handshake() = default;
    Handshake(const Handshake &) = delete;
    Handshake &operator=(const Handshake &) = delete;
    Handshake(Handshake &&) = delete;
    Handshake &operator=(Handshake &&) = delete;
};

// Each call returns 0, or a negative errno that refuses the connection
// (-EACCES normally).  Called from the thread running test*; an exception
// counts as a refusal.  Bytes in and out are at most max_auth_bytes.
class Authenticator {
public:
    static constexpr std::size_t max_auth_bytes = 512;

    Authenticator() = default;
    virtual ~Authenticator() = default;
    Authenticator(const Authenticator &) = delete;
    Authenticator &operator=(const Authenticator &) = delete;
    Authenticator(Authenticator &&) = delete;
    Authenticator &operator=(Authenticator &&) = delete;

    // Client: a connection to a peer looked up with `credential` (see
    // addr_lookup).  `transport_hello` is this side's transport hello.
    virtual int client_hello(std::string_view credential,
                             std::span<const std::byte> transport_hello,
                             std::unique_ptr<Handshake> &state, std::vector<std::byte> &hello) = 0;
    // Client: the server's transport hello and challenge; fills the proof
    // and who the session is (its name and session key).
    virtual int client_proof(Handshake &state, std::span<const std::byte> server_transport_hello,
                             std::span<const std::byte> challenge, std::vector<std::byte> &proof,
                             Identity &identity) = 0;
    // Server: the client's transport hello and hello, and this side's
    // transport hello (sent with the challenge).
    virtual int server_challenge(std::span<const std::byte> client_transport_hello,
                                 std::span<const std::byte> client_hello,
                                 std::span<const std::byte> transport_hello,
                                 std::unique_ptr<Handshake> &state,
                                 std::vector<std::byte> &challenge) = 0;
    // Server: the client's proof; fills the identity it proved.
    virtual int server_verify(Handshake &state, std::span<const std::byte> proof,
                              Identity &identity) = 0;
};

class Core;

class Bmi {
public:
    // Throws std::system_error with a message naming the address when a
    // listen address is malformed or cannot be bound.
    explicit Bmi(const Options &options);
    ~Bmi();
    Bmi(const Bmi &) = delete;
    Bmi &operator=(const Bmi &) = delete;
    Bmi(Bmi &&) = delete;
    Bmi &operator=(Bmi &&) = delete;

    // "tcp://127.0.0.1:3334", with the port actually bound.
    [[nodiscard]] std::vector<std::string> listen_addresses() const;

    ContextId open_context();
    // Ops still pending in the context are cancelled and reaped.
    void close_context(ContextId ctx);

    // Resolves "tcp://host:port" (no network traffic: connections are made
    // on first use).  Returns no_addr and sets *error on a bad address.
    Addr addr_lookup(std::string_view url, int *error = nullptr);
    // The same, for connections authenticated under `credential` (handed
    // to Authenticator::client_hello): each credential has its own Addr and
    // its own connections to the same URL, so that two keys used in one
    // process never share a connection.  "" is addr_lookup(url).
    Addr addr_lookup(std::string_view url, std::string_view credential, int *error);
    // The address string of a peer ("tcp://h:p"), or "" if unknown.
    [[nodiscard]] std::string rev_lookup(Addr addr) const;

    Post post_send(Addr dest, const void *buf, std::size_t size, Tag tag, void *user_ptr,
                   ContextId ctx);
    Post post_sendunexpected(Addr dest, const void *buf, std::size_t size, Tag tag, void *user_ptr,
                             ContextId ctx);
    Post post_recv(Addr src, void *buf, std::size_t size, Tag tag, void *user_ptr, ContextId ctx);
    Post post_send_list(Addr dest, std::span<const ConstBuffer> bufs, Tag tag, void *user_ptr,
                        ContextId ctx);
    Post post_sendunexpected_list(Addr dest, std::span<const ConstBuffer> bufs, Tag tag,
                                  void *user_ptr, ContextId ctx);
    Post post_recv_list(Addr src, std::span<const MutableBuffer> bufs, Tag tag, void *user_ptr,
                        ContextId ctx);

    // One-sided transfers (RDMA; the ib method only, -ENOTSUP over tcp).
    // expose() lets peer read and write bufs directly until `handle` is
    // dropped, and fills `descriptor` with opaque bytes describing them (at
    // most 16 bytes per piece plus 8) for the peer to receive in a request.
    // The peer then post_get()s bytes [offset, offset + size) of that memory
    // into its own buffer (RDMA READ) or post_put()s its buffer there (RDMA
    // WRITE), with no action of this side: a server moving a client's file
    // data.  A put is in the exposed memory before any message the putting
    // side sends after the put completed.  Errors: -EINVAL (a descriptor
    // that is malformed or too short for offset + size), -ENOTSUP, and the
    // connection's errors.
    int expose(Addr peer, std::span<const MutableBuffer> bufs, Exposure &handle,
               std::vector<std::byte> &descriptor);
    Post post_get(Addr peer, std::span<const std::byte> descriptor, std::uint64_t offset, void *buf,
                  std::size_t size, void *user_ptr, ContextId ctx);
    Post post_put(Addr peer, std::span<const std::byte> descriptor, std::uint64_t offset,
                  const void *buf, std::size_t size, void *user_ptr, ContextId ctx);

    // Waits up to max_idle_ms for op to finish; true and *out filled when it
    // did (the op is then gone).  An unknown op gives true with -EINVAL.
    bool test(OpId op, Completion &out, int max_idle_ms);
    // Reaps whichever of ops have finished, appending to out; waits up to
    // max_idle_ms for the first one.  Returns how many were appended.
    std::size_t testsome(std::span<const OpId> ops, std::vector<Completion> &out, int max_idle_ms);
    // Reaps up to out.size() finished ops of ctx.  Returns the count.
    std::size_t testcontext(ContextId ctx, std::span<Completion> out, int max_idle_ms);
    // Appends up to max unexpected messages to out.  Returns the count.
    std::size_t testunexpected(std::vector<UnexpectedMessage> &out, std::size_t max,
                               int max_idle_ms);
    // Both at once, for a server's single event loop: reaps up to
    // done.size() finished ops of ctx into done (the count goes to
    // *done_count) and appends up to max_unexpected unexpected messages to
    // unexpected; waits up to max_idle_ms for the first of either (or a
    // watched fd).  Returns the number of completions plus messages.
    std::size_t testany(ContextId ctx, std::span<Completion> done, std::size_t &done_count,
                        std::vector<UnexpectedMessage> &unexpected, std::size_t max_unexpected,
                        int max_idle_ms);

    // Ends op with -ECANCELED (reported by test*) unless it has already
    // finished.  Affects nothing else.  Returns 0 or -EINVAL (unknown op).
    int cancel(OpId op);

    [[nodiscard]] Memory memalloc(Addr peer, std::size_t size) const;
    // Registers [data, data + size), memory the caller keeps, with the
    // transports for as long as the handle lives, so that transfers from or
    // into any part of it register nothing: a list I/O's whole parent
    // buffer, a daemon's data buffers.  The memory must stay mapped while
    // the handle lives (the registration pins its pages).  Without RDMA in
    // use it registers nothing.
    [[nodiscard]] Registration register_memory(void *data, std::size_t size);

    // Adds fd to what test* sleeps on: a test* call returns early (having
    // reaped what is ready, possibly nothing) once fd is readable, so that
    // one thread can serve BMI and another event source, e.g. a storage
    // completion queue's eventfd.  The caller must drain fd (it is watched
    // level-triggered or per wake-up, depending on the engine).  BMI never
    // reads, writes or closes it.  Returns 0, -EEXIST (already watched),
    // -EBADF, -EPERM (not pollable, e.g. a regular file) or -ENOSPC (more
    // than 64 fds).
    int watch_fd(int fd);
    // Stops watching fd; -ENOENT if it was not watched.  Call it before
    // closing fd.
    int unwatch_fd(int fd);
    // Appends to `out` the watched fds that test* found readable since the
    // last call, each once, so that a caller with several need read only
    // those (reads that would fail with EAGAIN cost a system call each).
    // An fd named here was readable when seen; it is named again only
    // after it is seen readable again (see watch_fd on draining it).
    void take_ready_fds(std::vector<int> &out);

    int set_info(Info key, std::uint64_t value);
    [[nodiscard]] std::uint64_t get_info(Info key) const;

    // Installs the authenticator every new connection uses (nullptr: none,
    // connections are not authenticated and a peer is the URL it claims).
    // Set it before the first connection; connections open keep their
    // state.  The ib method uses it too (docs/bmi.md).
    void set_authenticator(std::shared_ptr<Authenticator> authenticator);
    // Who addr proved to be on its latest authenticated connection;
    // nullopt when none (no authenticator, or not yet).
    [[nodiscard]] std::optional<Identity> peer_identity(Addr addr) const;
    // Closes every connection of the peers that proved `name` (a revoked
    // key); their ops fail with -EACCES.  Returns how many peers.
    std::size_t drop_identity(std::string_view name);

private:
    std::unique_ptr<Core> core_;
};

} // namespace bmi

#endif // PVFS_BMI_BMI_HPP
