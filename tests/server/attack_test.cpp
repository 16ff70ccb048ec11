// The attack suite (issue 25, docs/security.md): one case per attack on a
// real cluster (one metadata and two data servers, per-client keys), each
// made while a legitimate client, the victim, runs an fsx-style workload
// through libpvfs on a file striped over both data servers.  An attack must
// do no harm: every one of the victim's operations succeeds, its file is
// byte-exact against its model afterwards, the attack itself is refused
// as the case says, the servers stay up and their resident memory stays
// under a bound.  Each case prints one summary line (and appends it to
// attack-summary.txt beside this program, which make check prints): the
// attack, the victim's operations and their latency (min/median/p99/max),
// and the servers' peak RSS against the bound.
//
// The attackers: raw sockets without a key (raw_peer.hpp), a key holder of
// their own (mallory, root squashed, uids 2000-2999) with the harness's raw
// protocol client, a key that gets revoked, and a relay's view of the
// victim's own stream (its key, altered chunks).
#include <atf-c++.hpp>

#include <sys/resource.h>

#include <csignal>
#include <functional>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "harness.hpp"
#include "keyed_cluster.hpp"
#include "pvfs/auth.hpp"
#include "pvfs/client.hpp"
#include "pvfs/config.hpp"
#include "pvfs/proto.hpp"
#include "raw_peer.hpp"

namespace {

using namespace pvfs;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using pvfs::test::Call;
using pvfs::test::RawClient;
using pvfs::test::require;
using pvfs::test::require_rc;
namespace tcp = bmi::tcp;

constexpr std::uint32_t chunk = 64U * 1024U;
constexpr std::uint32_t victim_uid = 1000;
constexpr std::uint32_t mallory_uid = 2000;
constexpr std::uint32_t nobody = 65534;
// What a server may hold under these attacks: its own working set (about
// 8 MiB here) and little more.  None of them is owed memory: the keyless
// ones are closed before a byte of theirs is buffered, and what the key
// holder sends is refused or dropped as it comes.  (The budgets a flood of
// accepted messages could fill, docs/config.md "Network limits", are
// 256 MiB unexpected and 64 MiB early: far above this bound.)
constexpr std::size_t rss_bound = std::size_t{64} << 20U;

// Short deadlines keep the cases short; the limits themselves are the
// defaults (4096 connections, 64 per address, the budgets).
const char *const limits = "hello_timeout = \"2s\"\n"
                           "frame_timeout = \"2s\"\n"
                           "capability_ttl = \"10s\"\n"
                           "capability_skew = \"1s\"\n"
                           "bulk_chunk = \"64KiB\"\n";

std::int64_t realtime_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string errno_text(int e)
{
    return std::strerror(e); // NOLINT(concurrency-mt-unsafe): messages of one thread
}

void require_status(const Call &c, int want, const std::string &what)
{
    if (!c.answered)
        ATF_FAIL(what + ": no response: " + c.error);
    require(c.response.status == want,
            fmt::format("{}: status {} ({}), expected {} ({})", what, c.response.status,
                        errno_text(c.response.status), want, errno_text(want)));
}

// ---- the victim ---------------------------------------------------------

// An fsx-style workload on one file, checked against a model of its bytes:
// writes (inline and bulk, across stripes and both data servers), reads
// compared with the model, truncations and size checks, until stopped.
class Victim {
public:
    Victim(std::unique_ptr<client::Client> c, Handle dir) : client_(std::move(c))
    {
        Attr a;
        require_rc(client_->create(dir, "data", 0600, true, Layout{chunk, 2, 0}, a), 0,
                   "victim creates its file");
        file_ = a.handle;
        thread_ = std::thread([this] { run(); });
    }
    ~Victim() { finish(); }
    Victim(const Victim &) = delete;
    Victim &operator=(const Victim &) = delete;
    Victim(Victim &&) = delete;
    Victim &operator=(Victim &&) = delete;

    [[nodiscard]] Handle file() const noexcept { return file_; }

    // Stops the workload (after at least min_ops operations), checks the
    // whole file against the model, and fails the case if anything went
    // wrong; the latency summary.
    std::string finish()
    {
        if (thread_.joinable()) {
            stop_ = true;
            thread_.join();
        }
        if (!failure_.empty())
            ATF_FAIL("the victim: " + failure_);
        std::vector<double> ms = latencies_ms_;
        std::sort(ms.begin(), ms.end());
        if (ms.empty())
            return "no operations";
        const auto at = [&](double q) {
            return ms[std::min(ms.size() - 1,
                               static_cast<std::size_t>(q * static_cast<double>(ms.size())))];
        };
        return fmt::format("{} ops, latency ms min {:.2f} median {:.2f} p99 {:.2f} max {:.2f}",
                           ms.size(), ms.front(), at(0.5), at(0.99), ms.back());
    }

private:
    static constexpr std::size_t max_size = std::size_t{1536} * 1024U;
    static constexpr std::size_t max_io = std::size_t{192} * 1024U;
    static constexpr std::size_t min_ops = 40;
    static constexpr auto min_time = 1s;
    static constexpr auto max_time = 240s;

    void fail(const std::string &why) { failure_ = fmt::format("op {}: {}", ops_, why); }

    void run()
    {
        std::mt19937_64 rng(25); // NOLINT(cert-msc51-cpp): the same run each time
        const auto start = Clock::now();
        while ((!stop_ || ops_ < min_ops || Clock::now() - start < min_time) &&
               Clock::now() - start < max_time && failure_.empty()) {
            const auto t0 = Clock::now();
            const auto pick = static_cast<unsigned>(rng() % 100);
            if (pick < 40)
                write(rng);
            else if (pick < 75)
                read(rng);
            else if (pick < 85)
                truncate(rng);
            else
                size_check();
            latencies_ms_.push_back(
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
            ++ops_;
        }
        if (failure_.empty())
            verify_all();
    }

    void write(std::mt19937_64 &rng)
    {
        const std::size_t off = rng() % max_size;
        const std::size_t len = std::min<std::size_t>(1 + rng() % max_io, max_size - off);
        std::vector<std::byte> data(len);
        for (auto &b : data)
            b = static_cast<std::byte>(rng());
        const std::int64_t rc = client_->write(file_, off, data);
        if (rc != static_cast<std::int64_t>(len))
            return fail(fmt::format("write {}+{}: {}", off, len, rc));
        if (model_.size() < off + len)
            model_.resize(off + len);
        std::copy(data.begin(), data.end(), model_.begin() + static_cast<std::ptrdiff_t>(off));
    }

    void read(std::mt19937_64 &rng)
    {
        const std::size_t off = rng() % (model_.size() + chunk);
        const std::size_t len = 1 + rng() % max_io;
        std::vector<std::byte> got(len);
        const std::int64_t rc = client_->read(file_, off, got);
        const std::size_t want = off >= model_.size() ? 0 : std::min(len, model_.size() - off);
        if (rc != static_cast<std::int64_t>(want))
            return fail(fmt::format("read {}+{}: {}, expected {}", off, len, rc, want));
        if (!std::equal(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(want),
                        model_.begin() + static_cast<std::ptrdiff_t>(off)))
            fail(fmt::format("read {}+{}: not the bytes written", off, len));
    }

    void truncate(std::mt19937_64 &rng)
    {
        const std::size_t size = rng() % max_size;
        client::SetAttr t;
        t.truncate = true;
        t.size = size;
        Attr a;
        if (const int rc = client_->setattr(file_, t, a); rc != 0)
            return fail(fmt::format("truncate to {}: {}", size, rc));
        model_.resize(size);
    }

    void size_check()
    {
        Attr a;
        if (const int rc = client_->getattr(file_, a); rc != 0)
            return fail(fmt::format("getattr: {}", rc));
        if (a.size != model_.size())
            fail(fmt::format("size {}, expected {}", a.size, model_.size()));
    }

    void verify_all()
    {
        std::vector<std::byte> got(model_.size() + 1);
        const std::int64_t rc = client_->read(file_, 0, got);
        if (rc != static_cast<std::int64_t>(model_.size()))
            return fail(fmt::format("final read: {}, expected {}", rc, model_.size()));
        got.resize(model_.size());
        if (got != model_)
            fail("final read: the file is not the bytes the victim wrote");
    }

    std::unique_ptr<client::Client> client_;
    Handle file_ = no_handle;
    std::vector<std::byte> model_;
    std::vector<double> latencies_ms_;
    std::size_t ops_ = 0;
    std::string failure_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

// ---- the servers' memory ------------------------------------------------

// Samples every server's RSS every 20 ms while it lives.
class RssWatch {
public:
    explicit RssWatch(std::map<std::string, int> pids) : pids_(std::move(pids))
    {
        thread_ = std::thread([this] {
            while (!stop_) {
                sample();
                std::this_thread::sleep_for(20ms);
            }
        });
    }
    ~RssWatch()
    {
        stop_ = true;
        thread_.join();
    }
    RssWatch(const RssWatch &) = delete;
    RssWatch &operator=(const RssWatch &) = delete;
    RssWatch(RssWatch &&) = delete;
    RssWatch &operator=(RssWatch &&) = delete;

    // The largest RSS seen and whose.
    std::pair<std::string, std::size_t> peak()
    {
        sample();
        const std::scoped_lock lock(mutex_);
        std::pair<std::string, std::size_t> top{"", 0};
        for (const auto &[name, bytes] : peak_)
            if (bytes >= top.second)
                top = {name, bytes};
        return top;
    }

private:
    void sample()
    {
        const std::scoped_lock lock(mutex_);
        for (const auto &[name, pid] : pids_)
            peak_[name] = std::max(peak_[name], test::rss_bytes(pid));
    }

    std::map<std::string, int> pids_;
    std::map<std::string, std::size_t> peak_;
    std::mutex mutex_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

// ---- the rig ---------------------------------------------------------------

// The cluster with its keys, a directory for the victim (its own, 0755)
// and one everybody may write in (/shared, 01777), the victim running and
// the servers' memory watched.
struct Rig {
    test::KeyedCluster cl;
    std::unique_ptr<client::Client> admin;
    Handle victim_dir = no_handle;
    Handle shared = no_handle;
    std::unique_ptr<Victim> victim;
    std::unique_ptr<RssWatch> rss;

    explicit Rig(const std::string &extra = "")
        : cl({{"victim"},
              {"admin", "--no-root-squash"},
              {"mallory", "--uids", "2000-2999", "--gids", "2000-2999"},
              {"revokee"}},
             {}, std::string(limits) + extra, test::servers(1, 2))
    {
        admin = cl.as("admin", 0, 0);
        Attr a;
        require_rc(admin->mkdir(root_handle, "victim", 0755, a), 0, "mkdir /victim");
        victim_dir = a.handle;
        client::SetAttr own;
        own.mask = client::set_uid | client::set_gid;
        own.uid = victim_uid;
        own.gid = victim_uid;
        require_rc(admin->setattr(victim_dir, own, a), 0, "chown /victim");
        require_rc(admin->mkdir(root_handle, "shared", 01777, a), 0, "mkdir /shared");
        shared = a.handle;
        std::map<std::string, int> pids;
        for (const auto &[name, server] : cl.servers)
            pids[name] = server->pid();
        rss = std::make_unique<RssWatch>(std::move(pids));
        victim = std::make_unique<Victim>(cl.as("victim", victim_uid, victim_uid), victim_dir);
    }

    [[nodiscard]] std::string url(const std::string &server) const
    {
        return cl.files.cluster.find(server)->addresses.at(0);
    }
    [[nodiscard]] std::uint16_t port(const std::string &server) const
    {
        return config::parse_address(url(server)).port;
    }
    [[nodiscard]] std::uint32_t index(const std::string &server) const
    {
        return static_cast<std::uint32_t>(cl.files.cluster.find(server) -
                                          cl.files.cluster.servers.data());
    }
    [[nodiscard]] proto::Key key(const std::string &name) const
    {
        std::string error;
        std::optional<proto::Key> k = proto::Key::load(cl.key_path(name), error);
        require(k.has_value(), "key " + name + ": " + error);
        return std::move(*k);
    }

    // A raw client of `server` under `key_name`'s key acting as uid:gid,
    // bound to it as libpvfs's are.
    [[nodiscard]] std::unique_ptr<RawClient> raw(const std::string &server,
                                                 const std::string &key_name, std::uint32_t uid)
    {
        auto r = std::make_unique<RawClient>(url(server), cl.key_path(key_name));
        r->to = proto::Destination{cl.files.cluster.fs_id, index(server)};
        r->cap_fs_id = cl.files.cluster.fs_id;
        r->cred.uid = uid;
        r->cred.gid = uid;
        return r;
    }

    // A capability the metadata server grants `key_name` acting as `uid`
    // for `h`: its status, and the capability in `out`.
    int capability(const std::string &key_name, std::uint32_t uid, Handle h, std::uint32_t rights,
                   proto::Capability &out)
    {
        std::unique_ptr<RawClient> m = raw("meta0", key_name, uid);
        const Call c = m->call(proto::CapabilityRequest{h, rights, 0});
        if (!c.answered)
            return -1;
        if (c.response.status == 0)
            out = std::get<proto::CapabilityResponse>(c.response.body).cap;
        return c.response.status;
    }

    // Ends the case: the victim's workload stops and is checked, every
    // server is still up and answers, the peak RSS is under the bound, and
    // the summary line is printed and recorded.
    void done(const std::string &attack)
    {
        const std::string workload = victim->finish();
        for (const auto &[name, server] : cl.servers) {
            require(::kill(server->pid(), 0) == 0 && test::rss_bytes(server->pid()) > 0,
                    name + " is gone: " + server->log_text());
        }
        const std::vector<client::ServerStatus> st = admin->status_all();
        for (const client::ServerStatus &s : st)
            require(s.error == 0, fmt::format("{} does not answer: {}", s.name, s.error));
        const auto [who, peak] = rss->peak();
        const std::string line = fmt::format(
            "attack {}: harmless; victim {}; peak server RSS {:.1f} MiB ({}), bound "
            "{} MiB",
            attack, workload, static_cast<double>(peak) / (1U << 20U), who, rss_bound >> 20U);
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        std::error_code ec;
        const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
        if (!ec)
            std::ofstream(self.parent_path() / "attack-summary.txt", std::ios::app) << line << "\n";
        require(peak < rss_bound, fmt::format("{}'s RSS reached {} bytes, over the bound of {}",
                                              who, peak, rss_bound));
    }
};

void raise_fd_limit(rlim_t want)
{
    rlimit rl{};
    ATF_REQUIRE_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = std::min(rl.rlim_max, std::max(rl.rlim_cur, want));
    ATF_REQUIRE_EQ(::setrlimit(RLIMIT_NOFILE, &rl), 0);
    require(rl.rlim_cur >= want, fmt::format("RLIMIT_NOFILE {} < {}", rl.rlim_cur, want));
}

// Writes `bytes` to every connection in `fds` (what each takes), then
// requires each to be closed by the server within `within`.
void require_all_closed(std::vector<UniqueFd> &fds, std::chrono::milliseconds within,
                        const std::string &what)
{
    const auto until = Clock::now() + within;
    for (std::size_t i = 0; i < fds.size(); ++i) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
        require(test::wait_closed(fds[i].get(), std::max(left, 1ms)),
                fmt::format("{}: connection {} of {} still open after {} ms", what, i, fds.size(),
                            within.count()));
    }
}

} // namespace

// Handshakes that prove nothing, on every server: no hello at all, the
// plain hello of old, a flagged hello of garbage, a well-formed hello under
// the victim's key id whose proof is forged, one under an id nobody has,
// and a real client whose key has the victim's name and the wrong bytes.
// Each is refused or closed within the hello deadline; none is answered a
// successful AUTH.
ATF_TEST_CASE_WITHOUT_HEAD(forged_hello);
ATF_TEST_CASE_BODY(forged_hello)
{
    Rig rig;
    const proto::Key victim_key = rig.key("victim");
    std::vector<UniqueFd> fds;
    for (const char *server : {"meta0", "data0", "data1"}) {
        const std::uint16_t port = rig.port(server);
        const std::vector<std::byte> request =
            test::frames(tcp::FrameType::unexpected, 1, 1, 200, std::byte{0x41});
        std::vector<std::vector<std::byte>> attempts;
        attempts.push_back(request);
        auto plain = test::hello_frame("tcp://127.0.0.1:1");
        plain.insert(plain.end(), request.begin(), request.end());
        attempts.push_back(plain);
        attempts.push_back(test::hello_frame(
            "tcp://127.0.0.1:2", std::vector<std::byte>(auth::hello_size, std::byte{0x42})));
        for (const std::optional<std::uint32_t> id :
             {victim_key.id(), std::optional<std::uint32_t>(0x0badc0deU)}) {
            auth::ClientHello h;
            h.key_id = id;
            h.nonce.fill(std::byte{7});
            attempts.push_back(test::hello_frame("tcp://127.0.0.1:3", auth::encode(h)));
        }
        for (std::size_t i = 0; i < attempts.size(); ++i) {
            fds.push_back(test::raw_connect(port, test::loopback(0x000102), true));
            require(fds.back().valid(), "connect to " + std::string(server));
            test::send_all(fds.back().get(), attempts[i]);
            // The hellos that get a challenge answer it with a forged proof.
            tcp::FrameHeader h;
            std::vector<std::byte> payload;
            if (i >= 3 && test::read_frame(fds.back().get(), h, payload, 1s) &&
                h.type == tcp::FrameType::hello) {
                tcp::FrameHeader a;
                a.type = tcp::FrameType::auth;
                test::send_all(
                    fds.back().get(),
                    test::frame(a, std::vector<std::byte>(auth::proof_size, std::byte{0x13})));
                if (test::read_frame(fds.back().get(), h, payload, 1s))
                    require(h.type != tcp::FrameType::auth || h.status != 0,
                            std::string("a forged proof was accepted by ") + server);
            }
        }
    }
    require_all_closed(fds, 5s, "forged handshakes");
    // A key file with the victim's name and other bytes: refused (EACCES).
    const std::string forged = rig.cl.dir + "/forged.key";
    {
        std::ifstream in(rig.cl.key_path("victim"));
        std::string name;
        std::string hex;
        in >> name >> hex;
        std::reverse(hex.begin(), hex.end());
        std::ofstream(forged) << name << " " << hex << "\n";
        std::filesystem::permissions(forged, std::filesystem::perms::owner_read |
                                                 std::filesystem::perms::owner_write);
    }
    for (const char *server : {"meta0", "data0", "data1"}) {
        RawClient r(rig.url(server), forged);
        r.to = proto::Destination{rig.cl.files.cluster.fs_id, rig.index(server)};
        const Call c = r.call(proto::StatusRequest{}, 5000);
        require(!c.answered && c.transport_error == -EACCES,
                fmt::format("{}: a key with the victim's name and forged bytes: answered {} "
                            "(transport {})",
                            server, c.answered, c.transport_error));
    }
    rig.done("forged_hello (15 forged handshakes, 3 forged keys)");
}

// The takeover of issue 25: an unprivileged local user reads the victim's
// connections in /proc/net/tcp, connects to each data server claiming the
// victim's address, and pre-loads frames on the tags its next data could
// use (eager, direct with many cookies), with no hello, a plain one, a
// garbage one and one under the victim's key id, again and again while the
// victim writes; mallory, who holds a key, does the same after proving it.
// The victim's file stays exactly its bytes; every keyless attacker is
// closed.
ATF_TEST_CASE_WITHOUT_HEAD(takeover);
ATF_TEST_CASE_BODY(takeover)
{
    Rig rig;
    const proto::Key victim_key = rig.key("victim");
    const proto::Key mallory_key = rig.key("mallory");
    std::vector<std::byte> inject =
        test::frames(tcp::FrameType::eager, 0, 512, 256, std::byte{0xee});
    for (std::uint64_t cookie = 1; cookie <= 64; ++cookie) {
        const auto d = test::frames(tcp::FrameType::direct, 1, 8, 1024, std::byte{0xee}, cookie);
        inject.insert(inject.end(), d.begin(), d.end());
    }
    std::size_t claimed = 0;
    std::vector<UniqueFd> keyless;
    std::vector<UniqueFd> keyed;
    const auto until = Clock::now() + 4s;
    while (Clock::now() < until) {
        for (const char *server : {"data0", "data1"}) {
            const std::uint16_t port = rig.port(server);
            for (const std::uint16_t local : test::connections_to(port)) {
                const std::string url = fmt::format("tcp://127.0.0.1:{}", local);
                ++claimed;
                std::vector<std::vector<std::byte>> attacks;
                attacks.push_back(inject);
                attacks.push_back(test::hello_frame(url));
                attacks.push_back(test::hello_frame(
                    url, std::vector<std::byte>(auth::hello_size, std::byte{0x42})));
                auth::ClientHello h;
                h.key_id = victim_key.id();
                attacks.push_back(test::hello_frame(url, auth::encode(h)));
                for (std::size_t i = 1; i < attacks.size(); ++i)
                    attacks[i].insert(attacks[i].end(), inject.begin(), inject.end());
                for (const auto &bytes : attacks) {
                    keyless.push_back(test::raw_connect(port, test::loopback(0x000103)));
                    if (keyless.back().valid())
                        test::send_some(keyless.back().get(), bytes);
                }
                if (keyed.size() < 8) {
                    UniqueFd m = test::authenticated_connect(port, test::loopback(0x000104),
                                                             mallory_key, url);
                    require(m.valid(), "mallory's key was refused");
                    test::send_some(m.get(), inject);
                    keyed.push_back(std::move(m));
                }
            }
        }
        std::this_thread::sleep_for(300ms);
    }
    require(claimed > 0, "no connection of the victim's in /proc/net/tcp");
    require_all_closed(keyless, 5s, "keyless takeover attempts");
    rig.done(fmt::format("takeover ({} claimed connections, {} keyless attempts, {} by a key "
                         "holder)",
                         claimed, keyless.size(), keyed.size()));
}

// Write chunks altered on the way, as a relay on the victim's path would:
// a byte flipped after its MAC, the tags of another request (a replay),
// tags for another object, server or file system (misdirection), and bulk
// data with no MACs, on both data servers, each with a real capability for
// the victim's file.  Each is refused (EBADMSG, EPROTO) before a byte is
// stored; the same client untouched writes the victim's other file.  Each
// alteration reaches the first chunk: chunks before an altered one are the
// sender's own bytes, which its MACs prove, and are stored (a failed write
// may have written part), so they would change the victim's file as any
// write of its own.
ATF_TEST_CASE_WITHOUT_HEAD(chunk_forgery_replay_misdirection);
ATF_TEST_CASE_BODY(chunk_forgery_replay_misdirection)
{
    Rig rig;
    const Handle h = rig.victim->file();
    proto::Capability cap;
    require(rig.capability("victim", victim_uid, h, proto::cap_read | proto::cap_write, cap) == 0,
            "the victim's capability");
    auto victim_client = rig.cl.as("victim", victim_uid, victim_uid);
    Attr other;
    require_rc(victim_client->create(rig.victim_dir, "other", 0600, true, {}, other), 0,
               "the victim's other file");
    proto::Capability other_cap;
    require(rig.capability("victim", victim_uid, other.handle, proto::cap_read | proto::cap_write,
                           other_cap) == 0,
            "the other file's capability");
    struct Tamper {
        const char *what;
        int status;
        std::function<void(RawClient &)> arm;
    };
    const std::vector<Tamper> tampers{
        {"a byte flipped after its MAC", EBADMSG,
         [](RawClient &r) {
             r.data_hook = [](std::vector<std::byte> &s) { s[100] ^= std::byte{0x20}; };
         }},
        {"two chunks swapped", EBADMSG,
         [](RawClient &r) {
             r.data_hook = [](std::vector<std::byte> &s) {
                 std::swap_ranges(s.begin(), s.begin() + chunk, s.begin() + chunk);
             };
         }},
        {"another request's tags (replay)", EBADMSG,
         [](RawClient &r) {
             r.bind_hook = [](proto::ChunkBinding &b) {
                 b.seq -= 1;
                 b.request_id -= 1;
             };
         }},
        {"tags for another object", EBADMSG,
         [](RawClient &r) { r.bind_hook = [](proto::ChunkBinding &b) { b.handle += 1; }; }},
        {"tags for another server", EBADMSG,
         [](RawClient &r) { r.bind_hook = [](proto::ChunkBinding &b) { b.server_index ^= 1; }; }},
        {"tags for another file system", EBADMSG,
         [](RawClient &r) { r.bind_hook = [](proto::ChunkBinding &b) { b.fs_id += 1; }; }},
        {"a read's tags", EBADMSG,
         [](RawClient &r) { r.bind_hook = [](proto::ChunkBinding &b) { b.is_write = false; }; }},
        {"no MACs at all", EPROTO, [](RawClient &r) { r.chunk_macs = false; }},
    };
    const std::vector<std::byte> bytes = test::pattern(3 * std::size_t{chunk}, 77);
    int refused = 0;
    for (const char *server : {"data0", "data1"}) {
        for (const Tamper &t : tampers) {
            std::unique_ptr<RawClient> r = rig.raw(server, "victim", victim_uid);
            r->cap_hook = [&](proto::Capability &c) { c = cap; };
            t.arm(*r);
            require_status(
                r->call(proto::WriteRequest{h, {{0, bytes.size()}}, chunk, 0, {}, {}, {}}, 20000,
                        bytes, {}, chunk),
                t.status, std::string(server) + ": write with " + t.what);
            ++refused;
        }
        // The attack path works: untouched, the same write is stored (on
        // the victim's other file, whose bytes nobody checks).
        std::unique_ptr<RawClient> r = rig.raw(server, "victim", victim_uid);
        r->cap_hook = [&](proto::Capability &c) { c = other_cap; };
        require_status(
            r->call(proto::WriteRequest{other.handle, {{0, bytes.size()}}, chunk, 0, {}, {}, {}},
                    20000, bytes, {}, chunk),
            0, std::string(server) + ": the same write, untouched, on the other file");
    }
    rig.done(fmt::format("chunk_forgery_replay_misdirection ({} tampered writes)", refused));
}

// Requests the victim's key signed for one data server, sent to the other
// (a truncate to 0 and an inline write of the victim's file): refused
// there (EINVAL), the victim's bytes untouched.
ATF_TEST_CASE_WITHOUT_HEAD(replayed_to_another_server);
ATF_TEST_CASE_BODY(replayed_to_another_server)
{
    Rig rig;
    const Handle h = rig.victim->file();
    proto::Capability cap;
    require(rig.capability("victim", victim_uid, h, proto::cap_read | proto::cap_write, cap) == 0,
            "the victim's capability");
    int refused = 0;
    for (const auto &[from, to] : {std::pair{"data0", "data1"}, std::pair{"data1", "data0"}}) {
        std::unique_ptr<RawClient> signer = rig.raw(from, "victim", victim_uid);
        signer->cap_hook = [&](proto::Capability &c) { c = cap; };
        std::unique_ptr<RawClient> sender = rig.raw(to, "victim", victim_uid);
        for (const std::vector<std::byte> &bytes :
             {signer->encode(proto::TruncateObjectRequest{h, 0}),
              signer->encode(
                  proto::WriteRequest{h, {{0, 512}}, chunk, 0, test::pattern(512, 3), {}, {}})}) {
            const auto answer = sender->send_raw(bytes, 10000);
            require(answer.has_value(), std::string("no answer from ") + to);
            proto::Response resp;
            const proto::DecodeResult d = proto::decode(*answer, sender->key(), resp);
            require(static_cast<bool>(d), "undecodable answer: " + d.message());
            require(resp.status == EINVAL,
                    fmt::format("{}'s request replayed to {}: status {}", from, to, resp.status));
            ++refused;
        }
    }
    rig.done(fmt::format("replayed_to_another_server ({} requests)", refused));
}

// A client key revoked while its holder works (pvfs-key revoke): refused
// within seconds on every server, new connections too; the victim never
// notices.
ATF_TEST_CASE_WITHOUT_HEAD(revoked_key);
ATF_TEST_CASE_BODY(revoked_key)
{
    Rig rig;
    auto revokee = rig.cl.as("revokee", 3000, 3000);
    Attr a;
    require_rc(revokee->create(rig.shared, "revokee", 0644, true, Layout{chunk, 2, 0}, a), 0,
               "revokee's file");
    const std::vector<std::byte> data = test::pattern(std::size_t{200} * 1024, 5);
    require_rc(revokee->write(a.handle, 0, data), static_cast<std::int64_t>(data.size()),
               "revokee writes before");
    test::key_ok({"revoke", "revokee", "--file", rig.cl.clients});
    const auto start = Clock::now();
    std::int64_t rc = 0;
    while ((rc = revokee->write(a.handle, 0, data)) >= 0) {
        require(Clock::now() - start < 5s, "the revoked key still writes after 5 s");
        std::this_thread::sleep_for(50ms);
    }
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    require(rc == -EACCES, fmt::format("the revoked key's write: {}, expected -EACCES", rc));
    for (const char *server : {"meta0", "data0", "data1"}) {
        std::unique_ptr<RawClient> r = rig.raw(server, "revokee", 3000);
        const Call c = r->call(proto::StatusRequest{}, 5000);
        require(!c.answered && c.transport_error == -EACCES,
                std::string("a new connection under the revoked key to ") + server);
    }
    rig.done(fmt::format("revoked_key (refused {} ms after pvfs-key revoke)", took.count()));
}

// Data I/O on the victim's file by a key holder with a capability for
// another file (her own), with one she signed herself, with one that
// expired, and with none: each refused (EACCES) on both data servers.
// Her own capability works on her own file until it expires.
ATF_TEST_CASE_WITHOUT_HEAD(capability_misuse);
ATF_TEST_CASE_BODY(capability_misuse)
{
    Rig rig;
    const Handle h = rig.victim->file();
    auto mallory = rig.cl.as("mallory", mallory_uid, mallory_uid);
    Attr mine;
    require_rc(mallory->create(rig.shared, "mallory", 0644, true, Layout{chunk, 2, 0}, mine), 0,
               "mallory's file");
    proto::Capability her_cap;
    require(rig.capability("mallory", mallory_uid, mine.handle, proto::cap_read | proto::cap_write,
                           her_cap) == 0,
            "mallory's capability for her file");
    const auto got_at = Clock::now();
    const std::vector<std::byte> bytes = test::pattern(1000, 8);
    const auto write_of = [&](Handle target) {
        return proto::WriteRequest{target, {{0, bytes.size()}}, chunk, 0, bytes, {}, {}};
    };
    int refused = 0;
    for (const char *server : {"data0", "data1"}) {
        std::unique_ptr<RawClient> r = rig.raw(server, "mallory", mallory_uid);
        r->cap_hook = [&](proto::Capability &c) { c = her_cap; };
        require_status(r->call(write_of(mine.handle)), 0,
                       std::string(server) + ": mallory writes her own file");
        require_status(r->call(write_of(h)), EACCES,
                       std::string(server) + ": a capability for another file");
        require_status(r->call(proto::TruncateObjectRequest{h, 0}), EACCES,
                       std::string(server) + ": truncate with another file's capability");
        // Her own signature (the harness signs with her key by default).
        r->cap_hook = nullptr;
        require_status(r->call(write_of(h)), EACCES,
                       std::string(server) + ": a capability she signed herself");
        r->cap_hook = [&](proto::Capability &c) {
            c = her_cap;
            c.handle = h; // its tag no longer matches
        };
        require_status(r->call(write_of(h)), EACCES,
                       std::string(server) + ": her capability with the victim's handle");
        r->cap_hook = nullptr;
        r->capabilities = false;
        require_status(r->call(write_of(h)), EACCES, std::string(server) + ": no capability");
        std::vector<std::byte> back(1000);
        require_status(r->call(proto::ReadRequest{h, {{0, back.size()}}, chunk, 0, {}, {}}, 20000,
                               {}, back, chunk),
                       EACCES, std::string(server) + ": a read without a capability");
        refused += 6;
    }
    // Expiry: capability_ttl is 10 s here and capability_skew 1 s; her
    // capability, once expired, no longer opens even her own file.
    std::this_thread::sleep_until(got_at + 10s + 1s + 500ms);
    for (const char *server : {"data0", "data1"}) {
        std::unique_ptr<RawClient> r = rig.raw(server, "mallory", mallory_uid);
        r->cap_hook = [&](proto::Capability &c) { c = her_cap; };
        require(her_cap.expires_ns < realtime_ns(), "the capability has not expired yet");
        require_status(r->call(write_of(mine.handle)), EACCES,
                       std::string(server) + ": an expired capability");
        ++refused;
    }
    rig.done(fmt::format("capability_misuse ({} refused data requests)", refused));
}

// A key holder whose uid has no permission on the victim's 0600 file: no
// capability is granted, and libpvfs I/O that skips its own checks (as
// pvfsd does) is refused by the servers; claiming the victim's uid does
// not help (her key allows uids 2000-2999: others become nobody).
ATF_TEST_CASE_WITHOUT_HEAD(uid_without_permission);
ATF_TEST_CASE_BODY(uid_without_permission)
{
    Rig rig;
    const Handle h = rig.victim->file();
    int refused = 0;
    for (const std::uint32_t uid : {mallory_uid, victim_uid, 0U}) {
        proto::Capability cap;
        const int rc = rig.capability("mallory", uid, h, proto::cap_read, cap);
        require(rc == EACCES, fmt::format("mallory as uid {} asks for a capability: {}", uid, rc));
        client::Options o = test::fresh_attrs();
        o.key_file = rig.cl.key_path("mallory");
        o.credentials.uid = uid;
        o.credentials.gid = uid;
        o.check_data_access = false;
        auto c = rig.cl.connect(std::move(o));
        std::vector<std::byte> buf(4096);
        require_rc(c->read(h, 0, buf), -EACCES, fmt::format("mallory as uid {} reads", uid));
        require_rc(c->write(h, 0, buf), -EACCES, fmt::format("mallory as uid {} writes", uid));
        client::SetAttr t;
        t.truncate = true;
        t.size = 0;
        Attr a;
        const int trc = c->setattr(h, t, a);
        require(trc == -EACCES || trc == -EPERM,
                fmt::format("mallory as uid {} truncates: {}", uid, trc));
        refused += 4;
    }
    rig.done(fmt::format("uid_without_permission ({} refusals)", refused));
}

// A squashed root (mallory's key, root_squash by default) is nobody: what
// it creates is nobody's, setuid or not; it cannot give a file to root,
// make the victim's file setuid, or make device nodes.
ATF_TEST_CASE_WITHOUT_HEAD(squashed_root);
ATF_TEST_CASE_BODY(squashed_root)
{
    Rig rig;
    auto root = rig.cl.as("mallory", 0, 0);
    Attr a;
    require_rc(root->create(rig.shared, "suid", 04755, true, {}, a), 0, "squashed root creates");
    require(a.uid == nobody && a.gid == nobody,
            fmt::format("the squashed root's file is {}:{}, not nobody's", a.uid, a.gid));
    client::SetAttr chown;
    chown.mask = client::set_uid | client::set_gid;
    Attr after;
    require_rc(root->setattr(a.handle, chown, after), -EPERM, "chown 0:0 by a squashed root");
    client::SetAttr chmod;
    chmod.mask = client::set_mode;
    chmod.mode = 04777;
    require_rc(root->setattr(rig.victim->file(), chmod, after), -EPERM,
               "a squashed root makes the victim's file setuid");
    for (const ObjectType type : {ObjectType::char_device, ObjectType::block_device}) {
        require_rc(root->mknod(rig.shared, type == ObjectType::char_device ? "mem" : "sda", type,
                               0666, (1U << 8U) | 1U, a),
                   -EPERM, "a squashed root makes a device node");
    }
    require_rc(root->create(root_handle, "at-root", 0644, true, {}, a), -EACCES,
               "a squashed root creates in /");
    Attr v;
    require_rc(rig.admin->getattr(rig.victim->file(), v), 0, "getattr of the victim's file");
    require(v.mode == 0600 && v.uid == victim_uid, "the victim's file changed owner or mode");
    rig.done("squashed_root (setuid, chown, chmod, 2 device nodes, create in /)");
}

// 10,000 connections opened and abandoned (never a byte sent) from 160
// source addresses: the server keeps at most max_connections (4096) open,
// closes each by the hello deadline, and goes on serving the victim.
ATF_TEST_CASE_WITHOUT_HEAD(connection_flood);
ATF_TEST_CASE_BODY(connection_flood)
{
    constexpr int total = 10000;
    constexpr std::size_t max_connections = 4096;
    raise_fd_limit(total + 1024);
    Rig rig;
    const int pid = rig.cl.servers.at("data0")->pid();
    const std::size_t fds_before = test::open_fds(pid);
    const std::uint16_t port = rig.port("data0");
    std::vector<UniqueFd> fds;
    fds.reserve(total);
    std::size_t most = 0;
    for (int i = 0; i < total; ++i) {
        fds.push_back(test::raw_connect(
            port, test::loopback(0x000200U + static_cast<std::uint32_t>(i % 160)), false));
        if (i % 500 == 0)
            most = std::max(most, test::open_fds(pid));
    }
    int opened = 0;
    for (const UniqueFd &fd : fds)
        opened += fd.valid() ? 1 : 0;
    require(opened >= total * 9 / 10, fmt::format("only {} of {} connects began", opened, total));
    // Abandoned: the hello deadline (2 s here) closes what the caps let in.
    const auto until = Clock::now() + 10s;
    std::size_t now = 0;
    while ((now = test::open_fds(pid)) > fds_before + 16 && Clock::now() < until) {
        most = std::max(most, now);
        std::this_thread::sleep_for(100ms);
    }
    require(most <= fds_before + max_connections + 64,
            fmt::format("data0 held {} fds (before: {})", most, fds_before));
    require(
        now <= fds_before + 16,
        fmt::format("data0 still holds {} fds 10 s after the flood (before: {})", now, fds_before));
    fds.clear();
    rig.done(fmt::format("connection_flood ({} connections; data0 held at most {} fds, {} "
                         "before)",
                         opened, most, fds_before));
}

// 1 GiB of unexpected messages from peers that never authenticate: hellos
// (plain, and flagged with garbage) followed by 64 KiB unexpected frames,
// connection after connection from fresh addresses, to data0 until 1 GiB
// was written into sockets or 90 s passed.  The server closes each at its
// hello (what the sockets took dies with them, unread); then 1 GiB more
// from a key holder, which the server reads and drops.  Its memory stays
// bounded and the victim is served.
ATF_TEST_CASE_WITHOUT_HEAD(unexpected_flood);
ATF_TEST_CASE_BODY(unexpected_flood)
{
    constexpr std::size_t goal = std::size_t{1} << 30U;
    Rig rig;
    const std::uint16_t port = rig.port("data0");
    std::vector<std::byte> body =
        test::frames(tcp::FrameType::unexpected, 1, 64, 64 * 1024 - 64, std::byte{0x55});
    std::size_t sent = 0;
    std::size_t connections = 0;
    const auto start = Clock::now();
    while (sent < goal && Clock::now() - start < 90s) {
        std::vector<UniqueFd> batch;
        for (int i = 0; i < 32; ++i) {
            const auto src =
                test::loopback(0x000300U + static_cast<std::uint32_t>(connections % 200));
            UniqueFd fd = test::raw_connect(port, src);
            ++connections;
            if (!fd.valid())
                continue;
            std::vector<std::byte> bytes =
                connections % 2 == 0
                    ? test::hello_frame(fmt::format("tcp://127.9.9.{}:{}", connections % 250, i))
                    : test::hello_frame("tcp://127.9.9.9:9",
                                        std::vector<std::byte>(auth::hello_size, std::byte{1}));
            bytes.insert(bytes.end(), body.begin(), body.end());
            sent += test::send_some(fd.get(), bytes);
            batch.push_back(std::move(fd));
        }
        // Whatever more the sockets take before the server closes them.
        for (int round = 0; round < 4; ++round)
            for (UniqueFd &fd : batch)
                sent += test::send_some(fd.get(), body);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("%zu bytes in %zu connections in %.1f s\n", sent, connections, secs);
    require(sent >= goal, fmt::format("only {} bytes went into sockets in 90 s", sent));

    // And 1 GiB from a key holder, whose messages the server does read:
    // 8 KiB unexpected messages that are no request, each dropped as it
    // comes (a connection the server closes is opened again).
    const proto::Key mallory_key = rig.key("mallory");
    const std::vector<std::byte> garbage =
        test::frames(tcp::FrameType::unexpected, 1, 64, 8192 - 64, std::byte{0x66});
    std::size_t keyed_sent = 0;
    int keyed_connections = 0;
    UniqueFd m;
    const auto keyed_start = Clock::now();
    while (keyed_sent < goal && Clock::now() - keyed_start < 120s) {
        if (!m.valid()) {
            m = test::authenticated_connect(port, test::loopback(0x000500), mallory_key,
                                            "tcp://127.0.5.0:5");
            require(m.valid(), "mallory's key was refused");
            ++keyed_connections;
        }
        if (test::send_all(m.get(), garbage))
            keyed_sent += garbage.size();
        else
            m = UniqueFd();
    }
    const double keyed_secs = std::chrono::duration<double>(Clock::now() - keyed_start).count();
    require(keyed_sent >= goal,
            fmt::format("the key holder sent only {} bytes in {:.0f} s", keyed_sent, keyed_secs));
    rig.done(fmt::format("unexpected_flood ({:.2f} GiB in {} unauthenticated connections, {:.2f} "
                         "s; {:.2f} GiB read by the server from a key holder in {} connections, "
                         "{:.2f} s)",
                         static_cast<double>(sent) / (1U << 30U), connections, secs,
                         static_cast<double>(keyed_sent) / (1U << 30U), keyed_connections,
                         keyed_secs));
}

// Slowloris: 200 connections trickling their hellos a byte every 300 ms,
// and key holders that prove their key and then trickle a frame that
// announces 1 MiB.  The hello and frame deadlines (2 s here) close them all;
// the victim is served throughout.
ATF_TEST_CASE_WITHOUT_HEAD(slowloris);
ATF_TEST_CASE_BODY(slowloris)
{
    Rig rig;
    const proto::Key mallory_key = rig.key("mallory");
    std::vector<UniqueFd> keyless;
    std::vector<UniqueFd> keyed;
    std::vector<std::vector<std::byte>> pending;
    for (const char *server : {"meta0", "data0", "data1"}) {
        const std::uint16_t port = rig.port(server);
        for (int i = 0; i < 66; ++i) {
            keyless.push_back(test::raw_connect(
                port, test::loopback(0x000400U + static_cast<std::uint32_t>(i % 4))));
            require(keyless.back().valid(), "slowloris connect");
        }
        for (int i = 0; i < 4; ++i) {
            UniqueFd m = test::authenticated_connect(port, test::loopback(0x000405), mallory_key,
                                                     "tcp://127.0.4.5:1");
            require(m.valid(), "mallory's key was refused");
            keyed.push_back(std::move(m));
        }
    }
    const std::vector<std::byte> hello = test::hello_frame("tcp://127.0.4.4:4");
    tcp::FrameHeader big;
    big.type = tcp::FrameType::unexpected;
    big.tag = 1;
    const std::vector<std::byte> frame_head = [&] {
        std::vector<std::byte> f = test::frame(big, std::vector<std::byte>(64, std::byte{0}));
        // Announce 1 MiB, send 64 bytes of it a byte at a time.
        tcp::FrameHeader h = big;
        h.size = std::size_t{1} << 20U;
        tcp::HeaderBytes b{};
        tcp::encode(h, b);
        std::copy(b.begin(), b.end(), f.begin());
        return f;
    }();
    const auto start = Clock::now();
    std::size_t at = 0;
    std::size_t trickled = 0;
    while (Clock::now() - start < 6s) {
        for (UniqueFd &fd : keyless)
            if (at < hello.size())
                trickled += test::send_some(fd.get(), std::span(hello).subspan(at, 1));
        for (UniqueFd &fd : keyed)
            if (at < frame_head.size())
                trickled += test::send_some(fd.get(), std::span(frame_head).subspan(at, 1));
        ++at;
        std::this_thread::sleep_for(300ms);
    }
    require_all_closed(keyless, 3s, "slowloris hellos");
    require_all_closed(keyed, 3s, "slowloris frames of a key holder");
    rig.done(fmt::format("slowloris ({} keyless and {} keyed connections, {} bytes trickled)",
                         keyless.size(), keyed.size(), trickled));
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, forged_hello);
    ATF_ADD_TEST_CASE(tcs, takeover);
    ATF_ADD_TEST_CASE(tcs, chunk_forgery_replay_misdirection);
    ATF_ADD_TEST_CASE(tcs, replayed_to_another_server);
    ATF_ADD_TEST_CASE(tcs, revoked_key);
    ATF_ADD_TEST_CASE(tcs, capability_misuse);
    ATF_ADD_TEST_CASE(tcs, uid_without_permission);
    ATF_ADD_TEST_CASE(tcs, squashed_root);
    ATF_ADD_TEST_CASE(tcs, connection_flood);
    ATF_ADD_TEST_CASE(tcs, unexpected_flood);
    ATF_ADD_TEST_CASE(tcs, slowloris);
}
