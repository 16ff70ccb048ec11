// Encryption of all traffic (`[filesystem] encrypt = true`, docs/security.md
// "Encryption") on a real loopback cluster: file data round-trips
// byte-exact through libpvfs; on the wire (a relay between a client and a
// data server) a known pattern of the file's bytes does not appear with
// encryption on and does with it off; a byte flipped in a sealed frame
// closes the connection, the write fails and nothing of it is stored; a
// client that does not ask is refused by an encrypting server, with an
// error both sides show; `encrypt` with an ib:// address is refused.
#include <atf-c++.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"
#include "pvfs/config.hpp"
#include "pvfs/unique_fd.hpp"

namespace {

namespace fs = std::filesystem;
using namespace pvfs;
using namespace std::chrono_literals;
using pvfs::test::Call;
using pvfs::test::RawClient;
using pvfs::test::require;
using pvfs::test::ServerProcess;

constexpr std::uint32_t chunk = 64U * 1024U;
constexpr std::string_view marker = "PVFS-FILE-DATA-MARKER-9876543210";

// File data with the marker every 4 KiB.
std::vector<std::byte> marked(std::size_t n, unsigned seed)
{
    std::vector<std::byte> v = test::pattern(n, seed);
    for (std::size_t at = 0; at + marker.size() <= n; at += 4096)
        std::memcpy(v.data() + at, marker.data(), marker.size());
    return v;
}

bool contains(const std::vector<std::byte> &hay, std::string_view needle)
{
    const auto *b = reinterpret_cast<const char *>(hay.data()); // NOLINT
    return std::string_view(b, hay.size()).find(needle) != std::string_view::npos;
}

// Sets the [filesystem] lines of the clusters a case writes.
struct FsExtra {
    explicit FsExtra(const std::string &lines) { test::filesystem_extra = lines; }
    ~FsExtra() { test::filesystem_extra.clear(); }
    FsExtra(const FsExtra &) = delete;
    FsExtra &operator=(const FsExtra &) = delete;
    FsExtra(FsExtra &&) = delete;
    FsExtra &operator=(FsExtra &&) = delete;
};

// One data server (a metadata server in the config, never started).
struct DataCluster {
    explicit DataCluster(bool encrypt)
        : extra(encrypt ? "encrypt = true\n" : ""),
          files(test::write_cluster(fs::current_path() / "cluster",
                                    {{"meta0", true, false}, {"data0", false, true}},
                                    "bulk_chunk = \"64KiB\"\n")),
          server(PVFS_SERVER_BINARY, files, "data0"), client(files, "data0")
    {
    }
    FsExtra extra;
    test::ClusterFiles files;
    ServerProcess server;
    RawClient client;
    [[nodiscard]] std::uint16_t port() const
    {
        return config::parse_address(files.cluster.find("data0")->addresses.at(0)).port;
    }
};

void require_status(const Call &c, int status, const std::string &what)
{
    if (!c.answered)
        ATF_FAIL(what + ": no response: " + c.error);
    require(c.response.status == status, what + ": status " + std::to_string(c.response.status) +
                                             ", expected " + std::to_string(status));
}

proto::WriteRequest write_of(Handle h, std::uint64_t offset, std::size_t n)
{
    return proto::WriteRequest{h, {{offset, n}}, chunk, 0, {}, {}, {}};
}

std::vector<std::byte> read_back(RawClient &client, Handle h, std::size_t n)
{
    std::vector<std::byte> back(n);
    const Call c =
        client.call(proto::ReadRequest{h, {{0, n}}, chunk, 0, {}, {}}, 20000, {}, back, chunk);
    require_status(c, 0, "read back");
    require(c.error.empty(), "read back: " + c.error);
    return back;
}

// A relay between one client and the server: keeps what crosses each way
// and, once armed, flips one byte of the client's stream.
class Relay {
public:
    explicit Relay(std::uint16_t server_port) : server_port_(server_port)
    {
        listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        // NOLINTBEGIN(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
        require(listener_.valid() &&
                    ::bind(listener_.get(), reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
                    ::listen(listener_.get(), 1) == 0 &&
                    ::getsockname(listener_.get(), reinterpret_cast<sockaddr *>(&a), &len) == 0,
                "relay: cannot listen");
        // NOLINTEND(cppcoreguidelines-pro-type-reinterpret-cast)
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { relay(); });
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
    void arm(std::uint64_t ahead) { flip_at_ = sent_.load() + ahead; }
    [[nodiscard]] bool flipped() const { return flip_at_.load() < sent_.load(); }
    std::vector<std::byte> both_ways()
    {
        const std::scoped_lock lock(mutex_);
        return seen_;
    }

private:
    void relay()
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
                const ssize_t n = ::read(p.at(i).fd, buf.data(), buf.size());
                if (n <= 0)
                    return;
                const auto got = static_cast<std::uint64_t>(n);
                if (i == 0) {
                    const std::uint64_t at = flip_at_.load();
                    const std::uint64_t from = sent_.load();
                    if (at >= from && at < from + got)
                        buf.at(static_cast<std::size_t>(at - from)) ^= std::byte{0x10};
                    sent_ += got;
                }
                {
                    const std::scoped_lock lock(mutex_);
                    seen_.insert(seen_.end(), buf.begin(),
                                 buf.begin() + static_cast<std::ptrdiff_t>(got));
                }
                const int to = i == 0 ? server.get() : client.get();
                for (std::size_t off = 0; off < got;) {
                    const ssize_t w = ::write(to, buf.data() + off, got - off);
                    if (w <= 0)
                        return;
                    off += static_cast<std::size_t>(w);
                }
            }
        }
    }

    std::uint16_t server_port_;
    std::uint16_t port_ = 0;
    UniqueFd listener_;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> sent_{0};
    std::atomic<std::uint64_t> flip_at_{~std::uint64_t{0}};
    std::mutex mutex_;
    std::vector<std::byte> seen_;
    std::thread thread_;
};

// Writes and reads back marked data through a relay: what crossed.
std::vector<std::byte> wire_of_write_and_read(bool encrypt)
{
    DataCluster dc(encrypt);
    Relay relay(dc.port());
    RawClient c(relay.url(), dc.files.key_path, encrypt);
    c.to = dc.client.to;
    const Handle h = make_handle(0, 20);
    const std::vector<std::byte> data = marked(3 * std::size_t{chunk}, 3);
    require_status(c.call(write_of(h, 0, data.size()), 20000, data, {}, chunk), 0,
                   "write through the relay");
    require(read_back(c, h, data.size()) == data, "read through the relay: bytes differ");
    return relay.both_ways();
}

} // namespace

// Write and read byte-exact through libpvfs against a cluster of one
// metadata and two data servers, every connection sealed.
ATF_TEST_CASE_WITHOUT_HEAD(fs_round_trip);
ATF_TEST_CASE_BODY(fs_round_trip)
{
    const FsExtra extra("encrypt = true\n");
    test::Cluster cl(test::servers(1, 2), "stripe_size = \"64KiB\"\nbulk_chunk = \"64KiB\"\n");
    require(cl.files.cluster.encrypt, "the test cluster does not encrypt");
    const std::vector<std::byte> data = marked(9 * std::size_t{chunk} + 4321, 11);
    Attr a;
    {
        auto w = cl.connect();
        test::require_rc(w->create(root_handle, "f", 0644, true, {}, a), 0, "create");
        test::require_rc(w->write(a.handle, 0, data), static_cast<std::int64_t>(data.size()),
                         "write");
        std::vector<std::byte> small = marked(100, 2);
        test::require_rc(w->write(a.handle, 70000, small), 100, "small write");
    }
    std::vector<std::byte> want = data;
    const std::vector<std::byte> small = marked(100, 2);
    std::copy(small.begin(), small.end(), want.begin() + 70000);
    auto r = cl.connect();
    std::vector<std::byte> got(want.size());
    test::require_rc(r->read(a.handle, 0, got), static_cast<std::int64_t>(got.size()), "read");
    require(got == want, "read back through sealed connections: bytes differ");
}

// Bulk data needs no chunk MACs over a sealed connection (its AEAD
// authenticates every chunk, tampered_frame_closes), and libpvfs sends
// none there; over a plain one of the same server it is still refused.
ATF_TEST_CASE_WITHOUT_HEAD(sealed_bulk_needs_no_macs);
ATF_TEST_CASE_BODY(sealed_bulk_needs_no_macs)
{
    DataCluster dc(false);
    RawClient sealed(dc.files.cluster.find("data0")->addresses.at(0), dc.files.key_path, true);
    sealed.to = dc.client.to;
    sealed.cap_fs_id = dc.files.cluster.fs_id;
    sealed.chunk_macs = false;
    const Handle h = make_handle(0, 30);
    const std::vector<std::byte> data = marked(3 * std::size_t{chunk} + 99, 5);
    require_status(sealed.call(proto::StatusRequest{}), 0, "status, sealed");
    require_status(sealed.call(write_of(h, 0, data.size()), 20000, data, {}, chunk), 0,
                   "a sealed write without chunk MACs");
    require(read_back(sealed, h, data.size()) == data, "a sealed read without MACs: bytes differ");
    dc.client.chunk_macs = false;
    require_status(dc.client.call(write_of(h, 0, data.size()), 20000, data, {}, chunk), EPROTO,
                   "a plain write without chunk MACs");
}

// The file's bytes on the wire: absent sealed, present plain (so that the
// first check can fail).
ATF_TEST_CASE_WITHOUT_HEAD(no_plaintext_on_the_wire);
ATF_TEST_CASE_BODY(no_plaintext_on_the_wire)
{
    const std::vector<std::byte> sealed = wire_of_write_and_read(true);
    require(sealed.size() > 6 * std::size_t{chunk}, "the relay saw too little");
    require(!contains(sealed, marker), "the file's data crossed the wire in the clear");
    const std::vector<std::byte> plain = wire_of_write_and_read(false);
    require(contains(plain, marker), "the file's data is not on the wire without encryption");
}

// One byte flipped inside a sealed chunk of a write: the server closes the
// connection (and says so, naming the key), the write gets no answer and
// nothing of it is stored; the server goes on serving.
ATF_TEST_CASE_WITHOUT_HEAD(tampered_frame_closes);
ATF_TEST_CASE_BODY(tampered_frame_closes)
{
    DataCluster dc(true);
    const Handle h = make_handle(0, 10);
    const std::vector<std::byte> a = marked(3 * std::size_t{chunk}, 1);
    require_status(dc.client.call(write_of(h, 0, a.size()), 20000, a, {}, chunk), 0, "seed write");
    Relay relay(dc.port());
    RawClient victim(relay.url(), dc.files.key_path, true);
    victim.to = dc.client.to;
    require_status(victim.call(proto::StatusRequest{}), 0, "status through the relay");
    relay.arm(40000);
    const std::vector<std::byte> b = marked(2 * std::size_t{chunk}, 9);
    const Call w = victim.call(write_of(h, 0, b.size()), 5000, b, {}, chunk);
    require(relay.flipped(), "the relay flipped nothing");
    require(!w.answered || w.response.status != 0, "the tampered write succeeded");
    require(read_back(dc.client, h, a.size()) == a, "bytes of the tampered write were stored");
    const std::string log = dc.server.log_text();
    require(log.find("a sealed frame did not open") != std::string::npos &&
                log.find("key cluster") != std::string::npos,
            "the server did not log the unopened frame with its key:\n" + log);
}

// The server's policy wins: a client that does not ask for encryption is
// refused (-EPROTONOSUPPORT), the server logs why; a URL client asks with
// PVFS_ENCRYPT=1 and gets in.
ATF_TEST_CASE_WITHOUT_HEAD(plain_client_refused);
ATF_TEST_CASE_BODY(plain_client_refused)
{
    DataCluster dc(true);
    const std::string url = dc.files.cluster.find("data0")->addresses.at(0);
    RawClient plain(url, dc.files.key_path, false);
    const Call c = plain.call(proto::StatusRequest{}, 5000);
    require(!c.answered, "a plain client of an encrypting server was answered");
    require(c.transport_error == -EPROTONOSUPPORT,
            "the plain client's error: " + std::to_string(c.transport_error) + " " + c.error);
    const std::string log = dc.server.log_text();
    require(log.find("do not agree on encryption") != std::string::npos,
            "the server did not log the refusal:\n" + log);
    // An encrypting client of the same server: served.
    RawClient sealed(url, dc.files.key_path, true);
    sealed.to = dc.client.to;
    require_status(sealed.call(proto::StatusRequest{}), 0, "an encrypting client");
}

// `encrypt` with an ib:// address is refused when the config is read, with
// the fabric's own encryption named as the answer.
ATF_TEST_CASE_WITHOUT_HEAD(ib_refused);
ATF_TEST_CASE_BODY(ib_refused)
{
    const std::string text = "[filesystem]\nname = \"t\"\nid = 1\nkey_file = \"/k\"\n"
                             "encrypt = true\n[defaults]\n"
                             "[[server]]\nname = \"s\"\naddresses = [\"ib://127.0.0.1:3334\"]\n"
                             "roles = [\"metadata\", \"data\"]\nstorage = \"/s\"\n";
    const config::Result r = config::parse(text, "test", "/");
    require(!r.ok(), "encrypt with an ib:// address was accepted");
    require(r.error.find("ib:// does not encrypt") != std::string::npos &&
                r.error.find("fabric") != std::string::npos,
            "unclear error: " + r.error);
    const std::string tcp = "[filesystem]\nname = \"t\"\nid = 1\nkey_file = \"/k\"\n"
                            "encrypt = true\n[defaults]\n"
                            "[[server]]\nname = \"s\"\naddresses = [\"tcp://127.0.0.1:3334\"]\n"
                            "roles = [\"metadata\", \"data\"]\nstorage = \"/s\"\n";
    const config::Result ok = config::parse(tcp, "test", "/");
    require(ok.ok() && ok.cluster.encrypt, "encrypt over tcp:// refused: " + ok.error);
    require(config::to_toml(ok.cluster).find("encrypt = true") != std::string::npos,
            "encrypt is not written back");
}

// Sealed connections under the failures the plain ones survive: the
// metadata server commits an exclusive create and loses its reply, so the
// library sends it again over the same sealed connection (a new frame,
// the next nonce) and gets the first result; then a data server is killed
// and restarted between two writes, so the client opens a fresh sealed
// session to its new incarnation and the bytes come back exact.
ATF_TEST_CASE_WITHOUT_HEAD(sealed_retry_and_restart);
ATF_TEST_CASE_BODY(sealed_retry_and_restart)
{
    const FsExtra extra("encrypt = true\n");
    const test::ScopedEnv faults("PVFS_TEST_FAULTS", "drop_reply:create:1");
    client::Options o = test::fresh_attrs();
    o.check_data_access = false;
    o.retry_timeout = 1s;
    test::Cluster cl(test::servers(1, 1), "request_timeout = \"20s\"\n", o);
    require(cl.files.cluster.encrypt, "the test cluster does not encrypt");
    auto c = cl.connect(o);
    Attr a;
    bool created = false;
    const auto t0 = std::chrono::steady_clock::now();
    test::require_rc(c->create(root_handle, "f", 0644, true, {}, a, &created), 0,
                     "an exclusive create whose reply was lost");
    require(created, "the retried create says the file existed");
    require(std::chrono::steady_clock::now() - t0 >= 900ms,
            "the create's reply was not lost (no retry happened)");
    require(cl.servers["meta0"]->log_text().find("TEST FAULT: no reply to") != std::string::npos,
            "the server did not drop the create's reply");
    const std::vector<std::byte> first = marked(3 * std::size_t{chunk} + 17, 21);
    test::require_rc(c->write(a.handle, 0, first), static_cast<std::int64_t>(first.size()),
                     "write before the restart");
    require(cl.servers["data0"]->stop(SIGKILL) == 128 + SIGKILL, "kill data0");
    cl.start("data0");
    const std::vector<std::byte> second = marked(2 * std::size_t{chunk} + 5, 22);
    test::require_rc(c->write(a.handle, chunk, second), static_cast<std::int64_t>(second.size()),
                     "write after data0's restart");
    std::vector<std::byte> want = first;
    std::copy(second.begin(), second.end(), want.begin() + chunk);
    std::vector<std::byte> got(want.size());
    test::require_rc(c->read(a.handle, 0, got), static_cast<std::int64_t>(got.size()),
                     "read after the restart");
    require(got == want, "bytes after a lost reply and a restart over sealed connections");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, fs_round_trip);
    ATF_ADD_TEST_CASE(tcs, sealed_bulk_needs_no_macs);
    ATF_ADD_TEST_CASE(tcs, no_plaintext_on_the_wire);
    ATF_ADD_TEST_CASE(tcs, tampered_frame_closes);
    ATF_ADD_TEST_CASE(tcs, plain_client_refused);
    ATF_ADD_TEST_CASE(tcs, ib_refused);
    ATF_ADD_TEST_CASE(tcs, sealed_retry_and_restart);
}
