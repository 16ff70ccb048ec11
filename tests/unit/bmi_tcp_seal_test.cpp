// Sealed TCP connections (docs/bmi.md "Encryption", docs/security.md
// "Encryption"): pvfs's authenticator with keys that ask for encryption,
// a real BMI server and client on loopback, and a relay between them that
// reads the frames (seal.hpp's layout) and attacks them: it captures the
// bytes (no known plaintext may cross sealed, and it must cross plain),
// flips one, replays or swaps whole sealed frames, strips the client's
// encryption flag, or sends garbage.  What must hold: sealed traffic
// arrives byte-exact under either cipher; any change closes the
// connection and its ops fail, with nothing delivered; the ends' policies
// are kept (a server that requires encryption refuses a client that does
// not ask, a client that asks never gets plaintext).
#include <atf-c++.hpp>

#include "bmi/bmi.hpp"
#include "pvfs/auth.hpp"
#include "pvfs/proto.hpp"
#include "pvfs/unique_fd.hpp"
#include "seal.hpp"

#include <sodium.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using pvfs::UniqueFd;
namespace proto = pvfs::proto;
namespace auth = pvfs::auth;

namespace {

void require(bool ok, const std::string &what)
{
    if (!ok)
        ATF_FAIL(what);
}

proto::Key make_key(const std::string &name, std::uint8_t fill, bool encrypt)
{
    std::array<std::byte, proto::key_size> bytes{};
    for (std::size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = static_cast<std::byte>(fill + i);
    proto::Key k = proto::Key::from_bytes(bytes);
    k.set_name(name);
    k.set_encrypt(encrypt);
    return k;
}

// A marker the messages carry over and over: the plaintext a wiretap looks for.
constexpr std::string_view marker = "PVFS-KNOWN-PLAINTEXT-0123456789";

std::vector<std::byte> pattern(std::size_t n, unsigned seed)
{
    std::vector<std::byte> v(n);
    std::mt19937 rng(seed);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::byte>(rng());
    // The marker every 4 KiB.
    for (std::size_t at = 0; at + marker.size() <= n; at += 4096)
        std::memcpy(v.data() + at, marker.data(), marker.size());
    return v;
}

bool contains(const std::vector<std::byte> &hay, std::string_view needle)
{
    const auto *b = reinterpret_cast<const char *>(hay.data()); // NOLINT
    return std::string_view(b, hay.size()).find(needle) != std::string_view::npos;
}

// What the relay does to the client's stream once its handshake is over
// (sealed frames counted from 0 in that direction).
enum class Attack : std::uint8_t { none, flip, replay, swap, garbage, strip_encrypt };

// A TCP relay on loopback between one client and the server that knows
// the frame layout: plain frames (40-byte header, its size of payload)
// until the handshake's two frames each way, then, when `sealed`, records
// of 16 + 40 + payload bytes.
class Relay {
public:
    Relay(std::uint16_t server_port, bool sealed, Attack attack, std::size_t at = 0,
          unsigned seed = 1)
        : server_port_(server_port), sealed_(sealed), attack_(attack), at_(at), seed_(seed)
    {
        listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        // NOLINTBEGIN(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
        require(listener_.valid() &&
                    ::bind(listener_.get(), reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
                    ::listen(listener_.get(), 4) == 0 &&
                    ::getsockname(listener_.get(), reinterpret_cast<sockaddr *>(&a), &len) == 0,
                "relay: cannot listen");
        // NOLINTEND(cppcoreguidelines-pro-type-reinterpret-cast)
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { run(); });
    }
    Relay(const Relay &) = delete;
    Relay &operator=(const Relay &) = delete;
    Relay(Relay &&) = delete;
    Relay &operator=(Relay &&) = delete;
    ~Relay()
    {
        stop_ = true;
        thread_.join();
    }

    [[nodiscard]] std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
    // Everything that crossed, each way.
    std::vector<std::byte> upstream()
    {
        const std::scoped_lock lock(mutex_);
        return up_;
    }
    std::vector<std::byte> downstream()
    {
        const std::scoped_lock lock(mutex_);
        return down_;
    }
    [[nodiscard]] bool attacked() const { return attacked_.load(); }

private:
    // One direction's frame cutter.
    struct Cutter {
        std::vector<std::byte> buf;
        int plain_left = 2; // the handshake's frames
        // The next complete frame, or empty.
        std::vector<std::byte> next(bool sealed)
        {
            const bool plain = plain_left > 0 || !sealed;
            const std::size_t head = plain ? 40 : 56;
            if (buf.size() < head)
                return {};
            const std::byte *h = buf.data() + (plain ? 0 : 16);
            const auto type = std::to_integer<std::uint8_t>(h[5]);
            std::uint64_t size = 0;
            for (int i = 7; i >= 0; --i)
                size = (size << 8U) | std::to_integer<std::uint64_t>(h[16 + i]);
            const std::uint64_t payload = type == 4 || type == 11 ? 0 : size;
            if (payload > (std::uint64_t{64} << 20U) || buf.size() < head + payload)
                return {};
            std::vector<std::byte> frame(buf.begin(),
                                         buf.begin() + static_cast<std::ptrdiff_t>(head + payload));
            buf.erase(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(head + payload));
            if (plain_left > 0)
                --plain_left;
            return frame;
        }
    };

    static bool write_all(int fd, std::span<const std::byte> b)
    {
        for (std::size_t off = 0; off < b.size();) {
            const ssize_t w = ::write(fd, b.data() + off, b.size() - off);
            if (w <= 0)
                return false;
            off += static_cast<std::size_t>(w);
        }
        return true;
    }

    // The client's frame `f` (sealed index n, or none for the handshake's).
    bool forward_up(int to, std::vector<std::byte> f, std::optional<std::size_t> n)
    {
        if (attack_ == Attack::strip_encrypt && !n && !attacked_) {
            // The client's hello: transport hello (22 + url bytes), then
            // the auth hello, whose byte 1 holds the flags.
            const std::size_t url = std::to_integer<std::size_t>(f[40 + 20]) |
                                    (std::to_integer<std::size_t>(f[40 + 21]) << 8U);
            f.at(40 + 22 + url + 1) &= ~std::byte{2};
            attacked_ = true;
        }
        if (n && *n == at_) {
            switch (attack_) {
            case Attack::flip:
                f.at(f.size() > 56 ? 56 + (f.size() - 56) / 2 : 20) ^= std::byte{0x04};
                attacked_ = true;
                break;
            case Attack::replay:
                attacked_ = true;
                return write_all(to, f) && write_all(to, f);
            case Attack::swap:
                held_ = std::move(f);
                return true;
            case Attack::garbage: {
                std::mt19937 rng(seed_);
                std::vector<std::byte> junk(1 + rng() % 70000);
                for (std::byte &b : junk)
                    b = static_cast<std::byte>(rng());
                // Now and then a header that looks right: a sealed record's
                // magic and version, random fields.
                if (junk.size() > 56 && rng() % 2 == 0) {
                    const std::array<std::uint8_t, 5> magic{0x42, 0x4d, 0x49, 0x31, 3};
                    for (std::size_t i = 0; i < magic.size(); ++i)
                        junk[16 + i] = std::byte{magic.at(i)};
                    junk[21] = static_cast<std::byte>(2 + rng() % 11);
                    junk[22] = junk[23] = std::byte{0};
                    for (std::size_t i = 24; i < 56; ++i)
                        junk[i] = i >= 32 && i < 40 && rng() % 2 == 0 ? std::byte{0} : junk[i];
                }
                attacked_ = true;
                return write_all(to, junk);
            }
            default:
                break;
            }
        }
        if (attack_ == Attack::swap && n && *n == at_ + 1 && !held_.empty()) {
            attacked_ = true;
            return write_all(to, f) && write_all(to, std::exchange(held_, {}));
        }
        return write_all(to, f);
    }

    void run()
    {
        pollfd lp{listener_.get(), POLLIN, 0};
        while (!stop_ && ::poll(&lp, 1, 50) <= 0) {
        }
        if (stop_)
            return;
        const UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        const UniqueFd server(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(server_port_);
        // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
        if (!client.valid() ||
            ::connect(server.get(), reinterpret_cast<sockaddr *>(&a), sizeof a) != 0)
            return;
        Cutter up;
        std::size_t sealed_up = 0;
        std::vector<std::byte> buf(std::size_t{256} << 10U);
        std::array<pollfd, 2> p{};
        p[0] = {client.get(), POLLIN, 0};
        p[1] = {server.get(), POLLIN, 0};
        while (!stop_) {
            if (::poll(p.data(), p.size(), 50) <= 0)
                continue;
            for (std::size_t i = 0; i < p.size(); ++i) {
                if ((p.at(i).revents & (POLLIN | POLLHUP | POLLERR)) == 0)
                    continue;
                const ssize_t r = ::read(p.at(i).fd, buf.data(), buf.size());
                if (r <= 0)
                    return;
                const std::span<const std::byte> got(buf.data(), static_cast<std::size_t>(r));
                {
                    const std::scoped_lock lock(mutex_);
                    auto &log = i == 0 ? up_ : down_;
                    log.insert(log.end(), got.begin(), got.end());
                }
                if (i == 1) {
                    if (!write_all(client.get(), got))
                        return;
                    continue;
                }
                up.buf.insert(up.buf.end(), got.begin(), got.end());
                for (;;) {
                    const bool handshake = up.plain_left > 0;
                    std::vector<std::byte> f = up.next(sealed_);
                    if (f.empty())
                        break;
                    std::optional<std::size_t> n;
                    if (!handshake)
                        n = sealed_up++;
                    if (!forward_up(server.get(), std::move(f), n))
                        return;
                }
            }
        }
    }

    std::uint16_t server_port_;
    bool sealed_;
    Attack attack_;
    std::size_t at_;
    unsigned seed_;
    std::uint16_t port_ = 0;
    UniqueFd listener_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> attacked_{false};
    std::vector<std::byte> held_;
    std::mutex mutex_;
    std::vector<std::byte> up_;
    std::vector<std::byte> down_;
    std::thread thread_;
};

struct Server {
    std::map<std::uint32_t, std::shared_ptr<const proto::Key>> keys;
    bmi::Bmi bmi{[] {
        bmi::Options o;
        o.role = bmi::Role::server;
        o.listen = {"tcp://127.0.0.1:0"};
        return o;
    }()};
    bmi::ContextId ctx = bmi.open_context();
    std::string url = bmi.listen_addresses().at(0);
    Server()
    {
        bmi.set_authenticator(
            std::make_shared<auth::Authenticator>([this](std::optional<std::uint32_t> id) {
                return id && keys.contains(*id) ? keys[*id] : nullptr;
            }));
    }
    void add(const proto::Key &k) { keys[*k.id()] = std::make_shared<const proto::Key>(k.clone()); }
    [[nodiscard]] std::uint16_t port() const
    {
        return static_cast<std::uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
    }
};

struct Client {
    bmi::Bmi bmi{bmi::Options{}};
    bmi::ContextId ctx = bmi.open_context();
    std::shared_ptr<auth::Authenticator> authenticator = std::make_shared<auth::Authenticator>();
    Client() { bmi.set_authenticator(authenticator); }
    bmi::Addr lookup(const std::string &url, const proto::Key &key)
    {
        int rc = 0;
        const bmi::Addr a = bmi.addr_lookup(url, authenticator->add_client_key(key), &rc);
        ATF_REQUIRE(a != bmi::no_addr);
        return a;
    }
};

// Polls both ends: completions by op, unexpected messages at the server.
struct Pump {
    Server &s;
    Client &c;
    // By (which end, op): the two ends' op ids may coincide.
    std::map<std::pair<const bmi::Bmi *, bmi::OpId>, bmi::Completion> done;
    std::vector<bmi::UnexpectedMessage> unexpected;

    void once()
    {
        std::array<bmi::Completion, 16> out{};
        std::size_t n = s.bmi.testcontext(s.ctx, out, 0);
        for (std::size_t i = 0; i < n; ++i)
            done[{&s.bmi, out.at(i).op}] = out.at(i);
        s.bmi.testunexpected(unexpected, 16, 0);
        n = c.bmi.testcontext(c.ctx, out, 1);
        for (std::size_t i = 0; i < n; ++i)
            done[{&c.bmi, out.at(i).op}] = out.at(i);
    }
    // Waits for op (a Post) to end: its error, or 1 at the deadline.
    int wait(const bmi::Bmi &end, const bmi::Post &p, std::chrono::milliseconds within = 10s)
    {
        if (!p.ok())
            return p.error;
        if (p.completed)
            return 0;
        const auto until = Clock::now() + within;
        while (!done.contains({&end, p.op})) {
            if (Clock::now() >= until)
                return 1;
            once();
        }
        return done[{&end, p.op}].error;
    }
    bool wait_unexpected(std::size_t n, std::chrono::milliseconds within = 10s)
    {
        const auto until = Clock::now() + within;
        while (unexpected.size() < n) {
            if (Clock::now() >= until)
                return false;
            once();
        }
        return true;
    }
};

// A request (unexpected, 3 KiB), a large message (2 MiB, rendezvous) each
// way and an eager answer, all carrying the marker, checked byte-exact.
// Returns "" or what went wrong.
std::string exchange(Server &s, Client &c, bmi::Addr to, unsigned seed = 7)
{
    Pump pump{s, c, {}, {}};
    const std::vector<std::byte> req = pattern(3000, seed);
    const int rq =
        pump.wait(c.bmi, c.bmi.post_sendunexpected(to, req.data(), req.size(), 1, nullptr, c.ctx));
    if (rq != 0)
        return "request: " + std::to_string(rq);
    if (!pump.wait_unexpected(1))
        return "the request did not arrive";
    const bmi::UnexpectedMessage &m = pump.unexpected.front();
    if (!std::equal(req.begin(), req.end(), m.data().begin(), m.data().end()))
        return "request: bytes differ";
    const bmi::Addr peer = m.peer();
    const std::vector<std::byte> up = pattern(std::size_t{2} << 20U, seed + 1);
    std::vector<std::byte> up_in(up.size());
    const bmi::Post r1 = s.bmi.post_recv(peer, up_in.data(), up_in.size(), 2, nullptr, s.ctx);
    const bmi::Post s1 = c.bmi.post_send(to, up.data(), up.size(), 2, nullptr, c.ctx);
    if (const int e = pump.wait(c.bmi, s1); e != 0)
        return "upload send: " + std::to_string(e);
    if (const int e = pump.wait(s.bmi, r1); e != 0)
        return "upload receive: " + std::to_string(e);
    if (up_in != up) {
        const auto d = std::mismatch(up.begin(), up.end(), up_in.begin());
        return "upload: bytes differ from " + std::to_string(d.first - up.begin()) + " (got " +
               std::to_string(pump.done[{&s.bmi, r1.op}].actual_size) + " bytes)";
    }
    const std::vector<std::byte> down = pattern(std::size_t{2} << 20U, seed + 2);
    std::vector<std::byte> down_in(down.size());
    const bmi::Post r2 = c.bmi.post_recv(to, down_in.data(), down_in.size(), 3, nullptr, c.ctx);
    const bmi::Post s2 = s.bmi.post_send(peer, down.data(), down.size(), 3, nullptr, s.ctx);
    if (const int e = pump.wait(s.bmi, s2); e != 0)
        return "download send: " + std::to_string(e);
    if (const int e = pump.wait(c.bmi, r2); e != 0)
        return "download receive: " + std::to_string(e);
    if (down_in != down)
        return "download: bytes differ";
    const std::vector<std::byte> small = pattern(600, seed + 3);
    std::vector<std::byte> small_in(small.size());
    const bmi::Post r3 = c.bmi.post_recv(to, small_in.data(), small_in.size(), 4, nullptr, c.ctx);
    const bmi::Post s3 = s.bmi.post_send(peer, small.data(), small.size(), 4, nullptr, s.ctx);
    if (pump.wait(s.bmi, s3) != 0 || pump.wait(c.bmi, r3) != 0 || small_in != small)
        return "eager answer failed or differs";
    return "";
}

// The cases' setup: a server holding `server_key`, a client proving
// `client_key` through a relay.
struct Setup {
    Server s;
    Client c;
    std::unique_ptr<Relay> relay;
    bmi::Addr to = bmi::no_addr;
    Setup(const proto::Key &server_key, const proto::Key &client_key, bool sealed,
          Attack attack = Attack::none, std::size_t at = 0, unsigned seed = 1)
    {
        s.add(server_key);
        relay = std::make_unique<Relay>(s.port(), sealed, attack, at, seed);
        to = c.lookup(relay->url(), client_key);
    }
};

void round_trip(bool no_aes)
{
    if (no_aes)
        ::setenv("PVFS_TEST_NO_AES", "1", 1); // NOLINT(concurrency-mt-unsafe): one thread yet
    const proto::Key k = make_key("node1", 1, true);
    Setup t(k, k, true);
    const std::string err = exchange(t.s, t.c, t.to);
    require(err.empty(), "sealed exchange: " + err);
    require(!contains(t.relay->upstream(), marker), "the marker crossed sealed, client to server");
    require(!contains(t.relay->downstream(), marker),
            "the marker crossed sealed, server to client");
    // Many frames, both ways, on the same connection: the counters hold.
    for (unsigned i = 0; i < 5; ++i) {
        Pump pump{t.s, t.c, {}, {}};
        const std::vector<std::byte> m = pattern(100 + i * 3000, 40 + i);
        require(pump.wait(t.c.bmi, t.c.bmi.post_sendunexpected(t.to, m.data(), m.size(), 9, nullptr,
                                                               t.c.ctx)) == 0 &&
                    pump.wait_unexpected(1),
                "message " + std::to_string(i));
        require(std::equal(m.begin(), m.end(), pump.unexpected.front().data().begin(),
                           pump.unexpected.front().data().end()),
                "message " + std::to_string(i) + ": bytes differ");
    }
}

} // namespace

// Sealed under the CPU's cipher (AES-256-GCM with AES-NI): byte-exact,
// and the marker never on the wire.
ATF_TEST_CASE_WITHOUT_HEAD(sealed_round_trip);
ATF_TEST_CASE_BODY(sealed_round_trip)
{
    round_trip(false);
}

// XChaCha20-Poly1305, as between ends of which one lacks AES-NI.
ATF_TEST_CASE_WITHOUT_HEAD(sealed_round_trip_xchacha);
ATF_TEST_CASE_BODY(sealed_round_trip_xchacha)
{
    round_trip(true);
}

// The same exchange without encryption: the marker is on the wire both
// ways (what makes the sealed cases' check able to fail).
ATF_TEST_CASE_WITHOUT_HEAD(plain_shows_plaintext);
ATF_TEST_CASE_BODY(plain_shows_plaintext)
{
    const proto::Key k = make_key("node1", 1, false);
    Setup t(k, k, false);
    const std::string err = exchange(t.s, t.c, t.to);
    require(err.empty(), "plain exchange: " + err);
    require(contains(t.relay->upstream(), marker), "no marker on the wire, client to server");
    require(contains(t.relay->downstream(), marker), "no marker on the wire, server to client");
}

// One byte flipped in the sealed 2 MiB upload: the server closes the
// connection, the receive fails (EBADMSG) and none of the bytes reach it.
ATF_TEST_CASE_WITHOUT_HEAD(flipped_byte_closes);
ATF_TEST_CASE_BODY(flipped_byte_closes)
{
    const proto::Key k = make_key("node1", 1, true);
    // Sealed frames up: 0 the request, 1 the upload's RTS, 2 its first chunk.
    Setup t(k, k, true, Attack::flip, 2);
    Pump pump{t.s, t.c, {}, {}};
    const std::vector<std::byte> req = pattern(3000, 3);
    require(pump.wait(t.c.bmi, t.c.bmi.post_sendunexpected(t.to, req.data(), req.size(), 1, nullptr,
                                                           t.c.ctx)) == 0 &&
                pump.wait_unexpected(1),
            "request");
    const bmi::Addr peer = pump.unexpected.front().peer();
    const std::vector<std::byte> up = pattern(std::size_t{2} << 20U, 4);
    std::vector<std::byte> in(up.size());
    const bmi::Post r = t.s.bmi.post_recv(peer, in.data(), in.size(), 2, nullptr, t.s.ctx);
    const bmi::Post snd = t.c.bmi.post_send(t.to, up.data(), up.size(), 2, nullptr, t.c.ctx);
    const int re = pump.wait(t.s.bmi, r);
    require(t.relay->attacked(), "the relay flipped nothing");
    require(re == -EBADMSG, "the receive ended with " + std::to_string(re) + ", not EBADMSG");
    require(std::all_of(in.begin(), in.end(), [](std::byte b) { return b == std::byte{0}; }),
            "bytes of the tampered upload reached the receive");
    const int se = pump.wait(t.c.bmi, snd);
    require(se != 1, "the sender's op never ended");
}

// A sealed frame sent twice: the copy does not open (its counter is
// past), the connection closes; the original was delivered once.
ATF_TEST_CASE_WITHOUT_HEAD(replayed_frame_refused);
ATF_TEST_CASE_BODY(replayed_frame_refused)
{
    const proto::Key k = make_key("node1", 1, true);
    Setup t(k, k, true, Attack::replay, 0);
    Pump pump{t.s, t.c, {}, {}};
    const std::vector<std::byte> req = pattern(3000, 3);
    require(pump.wait(t.c.bmi, t.c.bmi.post_sendunexpected(t.to, req.data(), req.size(), 1, nullptr,
                                                           t.c.ctx)) == 0,
            "request");
    require(pump.wait_unexpected(1), "the original did not arrive");
    const auto until = Clock::now() + 1s;
    while (Clock::now() < until)
        pump.once();
    require(t.relay->attacked(), "the relay replayed nothing");
    require(pump.unexpected.size() == 1, "the replayed frame was delivered (" +
                                             std::to_string(pump.unexpected.size()) + " messages)");
    // The connection is gone: a receive the server posts for the peer fails.
    std::array<std::byte, 16> in{};
    const bmi::Post r = t.s.bmi.post_recv(pump.unexpected.front().peer(), in.data(), in.size(), 5,
                                          nullptr, t.s.ctx);
    const int re = pump.wait(t.s.bmi, r, 2s);
    require(re != 0, "a receive from the replayed connection's peer succeeded");
}

// Two sealed frames swapped: neither is delivered (the first to arrive
// does not open under the counter it needs).
ATF_TEST_CASE_WITHOUT_HEAD(reordered_frames_refused);
ATF_TEST_CASE_BODY(reordered_frames_refused)
{
    const proto::Key k = make_key("node1", 1, true);
    Setup t(k, k, true, Attack::swap, 0);
    Pump pump{t.s, t.c, {}, {}};
    const std::vector<std::byte> a = pattern(1000, 5);
    const std::vector<std::byte> b = pattern(1200, 6);
    const bmi::Post pa = t.c.bmi.post_sendunexpected(t.to, a.data(), a.size(), 1, nullptr, t.c.ctx);
    const bmi::Post pb = t.c.bmi.post_sendunexpected(t.to, b.data(), b.size(), 1, nullptr, t.c.ctx);
    static_cast<void>(pump.wait(t.c.bmi, pa));
    static_cast<void>(pump.wait(t.c.bmi, pb));
    const auto until = Clock::now() + 1500ms;
    while (Clock::now() < until)
        pump.once();
    require(t.relay->attacked(), "the relay swapped nothing");
    require(pump.unexpected.empty(), "a reordered frame was delivered");
}

// Garbage in place of sealed frames, 40 seeds: no crash, nothing
// delivered after the garbage, and the server serves a fresh client.
ATF_TEST_CASE_WITHOUT_HEAD(garbage_sealed_frames);
ATF_TEST_CASE_BODY(garbage_sealed_frames)
{
    const proto::Key k = make_key("node1", 1, true);
    Server s;
    s.add(k);
    for (unsigned seed = 1; seed <= 40; ++seed) {
        Client c;
        Relay relay(s.port(), true, Attack::garbage, 1, seed);
        const bmi::Addr to = c.lookup(relay.url(), k);
        Pump pump{s, c, {}, {}};
        const std::vector<std::byte> a = pattern(500, seed);
        const bmi::Post pa = c.bmi.post_sendunexpected(to, a.data(), a.size(), 1, nullptr, c.ctx);
        const bmi::Post pb = c.bmi.post_sendunexpected(to, a.data(), a.size(), 1, nullptr, c.ctx);
        static_cast<void>(pump.wait(c.bmi, pa));
        static_cast<void>(pump.wait(c.bmi, pb));
        const auto until = Clock::now() + 300ms;
        while (Clock::now() < until)
            pump.once();
        require(relay.attacked(), "seed " + std::to_string(seed) + ": no garbage sent");
        require(pump.unexpected.size() <= 1,
                "seed " + std::to_string(seed) + ": a message after the garbage was delivered");
    }
    Client c;
    const bmi::Addr to = c.lookup(s.url, k);
    const std::string err = exchange(s, c, to);
    require(err.empty(), "after the garbage: " + err);
}

// The server's policy wins: its key says encrypt, a client that does not
// ask is refused, and its op says why (-EPROTONOSUPPORT).
ATF_TEST_CASE_WITHOUT_HEAD(server_requires_encryption);
ATF_TEST_CASE_BODY(server_requires_encryption)
{
    Server s;
    s.add(make_key("node1", 1, true));
    Client c;
    const bmi::Addr to = c.lookup(s.url, make_key("node1", 1, false));
    Pump pump{s, c, {}, {}};
    const std::vector<std::byte> a = pattern(500, 1);
    const int e =
        pump.wait(c.bmi, c.bmi.post_sendunexpected(to, a.data(), a.size(), 1, nullptr, c.ctx));
    require(e == -EPROTONOSUPPORT, "a plain client of an encrypting server: " + std::to_string(e));
    require(pump.unexpected.empty(), "the plain client's message was delivered");
}

// A client that asks gets encryption from a server that does not require
// it: sealed (no marker on the wire).
ATF_TEST_CASE_WITHOUT_HEAD(client_asks_server_agrees);
ATF_TEST_CASE_BODY(client_asks_server_agrees)
{
    Setup t(make_key("node1", 1, false), make_key("node1", 1, true), true);
    const std::string err = exchange(t.s, t.c, t.to);
    require(err.empty(), "exchange: " + err);
    require(!contains(t.relay->upstream(), marker), "the marker crossed, client to server");
    require(!contains(t.relay->downstream(), marker), "the marker crossed, server to client");
}

// One process (one incarnation) with a sealed and a plain connection under
// the same key: two peers at the server, so what a receive posted for the
// sealed one takes came sealed (pvfs skips chunk MACs on sealed peers).
ATF_TEST_CASE_WITHOUT_HEAD(sealed_and_plain_are_two_peers);
ATF_TEST_CASE_BODY(sealed_and_plain_are_two_peers)
{
    Server s;
    s.add(make_key("node1", 1, false));
    Client c;
    const bmi::Addr sealed = c.lookup(s.url, make_key("node1", 1, true));
    const bmi::Addr plain = c.lookup(s.url, make_key("node1", 1, false));
    require(sealed != plain, "one Addr for the sealed and the plain key at the client");
    Pump pump{s, c, {}, {}};
    const std::string text = "hello";
    for (const bmi::Addr to : {sealed, plain})
        require(pump.wait(c.bmi, c.bmi.post_sendunexpected(to, text.data(), text.size(), 1, nullptr,
                                                           c.ctx)) == 0,
                "send");
    require(pump.wait_unexpected(2), "the two messages did not arrive");
    const bmi::Addr a = pump.unexpected.at(0).peer();
    const bmi::Addr b = pump.unexpected.at(1).peer();
    require(a != b, "the sealed and the plain connection are one peer at the server");
    const std::optional<bmi::Identity> ia = s.bmi.peer_identity(a);
    const std::optional<bmi::Identity> ib = s.bmi.peer_identity(b);
    require(ia && ib && ia->name == ib->name && ia->incarnation == ib->incarnation,
            "not the same key and process");
    require((ia->cipher == bmi::Cipher::none) != (ib->cipher == bmi::Cipher::none),
            "not one sealed and one plain");
}

// A relay that strips the client's request for encryption from its hello:
// the handshake's MACs fail (the flags are in the transcript), the client
// is refused and nothing goes in the clear.
ATF_TEST_CASE_WITHOUT_HEAD(downgrade_caught);
ATF_TEST_CASE_BODY(downgrade_caught)
{
    Setup t(make_key("node1", 1, false), make_key("node1", 1, true), false, Attack::strip_encrypt);
    Pump pump{t.s, t.c, {}, {}};
    const std::vector<std::byte> a = pattern(5000, 1);
    const int e = pump.wait(
        t.c.bmi, t.c.bmi.post_sendunexpected(t.to, a.data(), a.size(), 1, nullptr, t.c.ctx));
    require(t.relay->attacked(), "the relay stripped nothing");
    require(e != 0, "the downgraded client's message was sent");
    require(pump.unexpected.empty(), "the downgraded client's message was delivered");
    require(!contains(t.relay->upstream(), marker), "plaintext crossed after the downgrade");
}

// The sealer's AES-256-GCM (OpenSSL's, libnet/methods/tcp/seal.cpp) is
// the standard cipher as libsodium computes it: frames it seals open with
// libsodium and the other way round, for payloads of every size class
// (empty, odd, a chunk), so ends built against either library interoperate
// and the wire never changed.  A frame altered by one bit does not open
// and leaves no plaintext behind.
ATF_TEST_CASE_WITHOUT_HEAD(aes_gcm_is_libsodiums);
ATF_TEST_CASE_BODY(aes_gcm_is_libsodiums)
{
    if (sodium_init() < 0 || crypto_aead_aes256gcm_is_available() == 0)
        ATF_SKIP("no AES-NI: the sealer uses XChaCha20-Poly1305 only");
    bmi::Identity id;
    id.cipher = bmi::Cipher::aes256gcm;
    randombytes_buf(id.seal_c2s.data(), id.seal_c2s.size());
    randombytes_buf(id.seal_s2c.data(), id.seal_s2c.size());
    bmi::tcp::Sealer client(id, true);
    bmi::tcp::Sealer server(id, false);
    const auto *c2s = reinterpret_cast<const unsigned char *>(id.seal_c2s.data()); // NOLINT
    std::uint64_t counter = 0;
    for (const std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{1000},
                                  std::size_t{65536}, std::size_t{65536 + 17}}) {
        const std::size_t head = bmi::tcp::seal_tag_size + bmi::tcp::frame_header_size;
        std::vector<std::byte> frame(head + len);
        randombytes_buf(frame.data() + bmi::tcp::seal_tag_size,
                        frame.size() - bmi::tcp::seal_tag_size);
        const std::vector<std::byte> clear = frame;
        std::array<unsigned char, crypto_aead_aes256gcm_NPUBBYTES> nonce{};
        for (std::size_t i = 0; i < 8; ++i)
            nonce.at(i) = static_cast<unsigned char>(counter >> (8 * i));
        auto *u = reinterpret_cast<unsigned char *>(frame.data()); // NOLINT
        const unsigned char *ad = u + bmi::tcp::seal_tag_size;
        // Sealed by the sealer, opened by libsodium.
        client.seal(frame.data(), len);
        std::vector<unsigned char> opened(len + 1);
        ATF_REQUIRE_EQ(crypto_aead_aes256gcm_decrypt_detached(opened.data(), nullptr, u + head, len,
                                                              u, ad, bmi::tcp::frame_header_size,
                                                              nonce.data(), c2s),
                       0);
        ATF_REQUIRE(std::memcmp(opened.data(), clear.data() + head, len) == 0);
        // Sealed by libsodium under the same key and counter, opened by
        // the server's sealer (its receive key is the client's send key).
        std::vector<std::byte> sealed = clear;
        auto *v = reinterpret_cast<unsigned char *>(sealed.data()); // NOLINT
        unsigned long long tag_len = 0;
        crypto_aead_aes256gcm_encrypt_detached(
            v + head, v, &tag_len, v + head, len, v + bmi::tcp::seal_tag_size,
            bmi::tcp::frame_header_size, nullptr, nonce.data(), c2s);
        ATF_REQUIRE(std::memcmp(sealed.data(), frame.data(), frame.size()) == 0);
        // One bit altered (the tag's last, the header's or the payload's
        // last): refused, the counter stays, no plaintext is left behind.
        for (const std::size_t at : {std::size_t{bmi::tcp::seal_tag_size - 1},
                                     std::size_t{bmi::tcp::seal_tag_size}, frame.size() - 1}) {
            std::vector<std::byte> altered = sealed;
            altered.at(at) ^= std::byte{1};
            ATF_REQUIRE(!server.open(altered.data(), len));
            if (len > 0)
                ATF_REQUIRE(std::all_of(altered.begin() + static_cast<std::ptrdiff_t>(head),
                                        altered.end(),
                                        [](std::byte x) { return x == std::byte{0}; }));
        }
        std::vector<std::byte> good = sealed;
        ATF_REQUIRE(server.open(good.data(), len));
        ATF_REQUIRE(std::memcmp(good.data() + head, clear.data() + head, len) == 0);
        // Replayed: the counter has moved on.
        std::vector<std::byte> replayed = sealed;
        ATF_REQUIRE(!server.open(replayed.data(), len));
        ++counter;
    }
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, sealed_round_trip);
    ATF_ADD_TEST_CASE(tcs, sealed_round_trip_xchacha);
    ATF_ADD_TEST_CASE(tcs, plain_shows_plaintext);
    ATF_ADD_TEST_CASE(tcs, flipped_byte_closes);
    ATF_ADD_TEST_CASE(tcs, replayed_frame_refused);
    ATF_ADD_TEST_CASE(tcs, reordered_frames_refused);
    ATF_ADD_TEST_CASE(tcs, garbage_sealed_frames);
    ATF_ADD_TEST_CASE(tcs, server_requires_encryption);
    ATF_ADD_TEST_CASE(tcs, client_asks_server_agrees);
    ATF_ADD_TEST_CASE(tcs, downgrade_caught);
    ATF_ADD_TEST_CASE(tcs, sealed_and_plain_are_two_peers);
    ATF_ADD_TEST_CASE(tcs, aes_gcm_is_libsodiums);
}
