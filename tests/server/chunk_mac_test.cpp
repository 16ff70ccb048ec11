// Chunk MACs (docs/protocol.md "Chunk MACs", docs/security.md): a data
// server refuses a write chunk that is not the one its client MACed
// (forged, from another request, out of place) before a byte of it is
// stored, and refuses bulk data without MACs; libpvfs refuses a read chunk
// altered on the way (EIO).  The attacker is the harness's raw client,
// which changes the bytes or the tags after the MACs were made, as an
// injector on the path would; the altered read is the server's test hook
// $PVFS_TEST_TAMPER_READS.
#include <atf-c++.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "pvfs/unique_fd.hpp"

namespace {

namespace fs = std::filesystem;
using namespace pvfs;
using pvfs::test::Call;
using pvfs::test::RawClient;
using pvfs::test::require;
using pvfs::test::ServerProcess;

constexpr std::uint32_t chunk = 64U * 1024U;

// One data server (and a metadata server in the config, never started),
// 64 KiB chunks.
struct DataCluster {
    test::ClusterFiles files = test::write_cluster(fs::current_path() / "cluster",
                                                   {{"meta0", true, false}, {"data0", false, true}},
                                                   "bulk_chunk = \"64KiB\"\n");
    ServerProcess server{PVFS_SERVER_BINARY, files, "data0"};
    RawClient client{files, "data0"};
};

// Both layouts of a request's tags: with the chunks (libpvfs's for chunks
// that move as messages) and in the request (its layout for RDMA, here
// over messages, which servers still accept).
constexpr std::array<bool, 2> layouts{true, false};

std::string layout_name(bool with_chunks)
{
    return with_chunks ? " (tags with the chunks)" : " (tags in the request)";
}

void require_status(const Call &c, int status, const std::string &what)
{
    if (!c.answered)
        ATF_FAIL(what + ": no response: " + c.error);
    require(c.response.status == status,
            what + ": status " + std::to_string(c.response.status) + " (" +
                std::strerror(c.response.status) + "), expected " + // NOLINT(concurrency-mt-unsafe)
                std::to_string(status));
}

proto::WriteRequest write_of(Handle h, std::uint64_t offset, std::size_t n)
{
    return proto::WriteRequest{h, {{offset, n}}, chunk, 0, {}, {}, {}};
}

// The object's first n bytes, read with checked MACs.
std::vector<std::byte> read_back(RawClient &client, Handle h, std::size_t n)
{
    std::vector<std::byte> back(n);
    const Call c =
        client.call(proto::ReadRequest{h, {{0, n}}, chunk, 0, {}, {}}, 20000, {}, back, chunk);
    require_status(c, 0, "read back");
    require(c.error.empty(), "read back: " + c.error);
    return back;
}

// A 3-chunk object of known bytes, written with correct MACs.
std::vector<std::byte> seed(RawClient &client, Handle h)
{
    std::vector<std::byte> a = test::pattern(3 * std::size_t{chunk}, 1);
    require_status(client.call(write_of(h, 0, a.size()), 20000, a, {}, chunk), 0, "seed write");
    require(read_back(client, h, a.size()) == a, "seed: bytes differ");
    return a;
}

// An attacker on the path: a TCP relay between one client and the server
// that flips one byte of the client's stream once armed, inside an
// established, authenticated connection (what the handshake alone cannot
// stop: docs/security.md "Connections").
class FlipProxy {
public:
    explicit FlipProxy(std::uint16_t server_port) : server_port_(server_port)
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
                "proxy: cannot listen");
        // NOLINTEND(cppcoreguidelines-pro-type-reinterpret-cast)
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { relay(); });
    }
    FlipProxy(const FlipProxy &) = delete;
    FlipProxy &operator=(const FlipProxy &) = delete;
    FlipProxy(FlipProxy &&) = delete;
    FlipProxy &operator=(FlipProxy &&) = delete;
    ~FlipProxy()
    {
        stop_ = true;
        thread_.join();
    }

    [[nodiscard]] std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
    // Flips the byte `ahead` bytes past what the client has sent so far.
    void arm(std::uint64_t ahead) { flip_at_ = sent_.load() + ahead; }
    [[nodiscard]] bool flipped() const { return flip_at_.load() < sent_.load(); }

private:
    void relay()
    {
        std::array<pollfd, 2> p{};
        p[0] = {listener_.get(), POLLIN, 0};
        while (!stop_ && ::poll(p.data(), 1, 50) <= 0) {
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
    std::thread thread_;
};

} // namespace

// A byte of a chunk changed on the wire, inside the client's established,
// authenticated connection (a relay on the path flips it): EBADMSG,
// nothing of it stored; the same relay untouched passes the next write.
ATF_TEST_CASE_WITHOUT_HEAD(injected_chunk_refused);
ATF_TEST_CASE_BODY(injected_chunk_refused)
{
    DataCluster dc;
    const Handle h = make_handle(0, 10);
    const std::vector<std::byte> a = seed(dc.client, h);
    const config::Address server =
        config::parse_address(dc.files.cluster.find("data0")->addresses.at(0));
    FlipProxy proxy(server.port);
    RawClient victim(proxy.url(), dc.files.key_path);
    victim.to = dc.client.to;
    victim.cap_fs_id = dc.client.cap_fs_id;
    require_status(victim.call(proto::StatusRequest{}), 0, "status through the relay");
    for (const bool with : layouts) {
        victim.tags_with_chunks = with;
        const std::string how = layout_name(with);
        require(seed(dc.client, h) == a, "seed" + how);
        // 40000 bytes on: inside the first chunk's 64 KiB (the request and
        // the frame headers before it take a few hundred).
        proxy.arm(40000);
        const std::vector<std::byte> b = test::pattern(2 * std::size_t{chunk}, 9);
        require_status(victim.call(write_of(h, 0, b.size()), 20000, b, {}, chunk), EBADMSG,
                       "write with a byte flipped on the wire" + how);
        require(proxy.flipped(), "the relay flipped nothing" + how);
        require(read_back(dc.client, h, a.size()) == a, "the injected chunk was stored" + how);
        require_status(victim.call(write_of(h, 0, b.size()), 20000, b, {}, chunk), 0,
                       "write through the relay, untouched" + how);
        require(read_back(dc.client, h, b.size()) == b, "untouched write: bytes differ" + how);
    }
}

// A byte flipped in a chunk after its MAC: EBADMSG, and nothing of the
// chunk is stored (a one-chunk write: the whole object is as before).
ATF_TEST_CASE_WITHOUT_HEAD(forged_chunk_refused);
ATF_TEST_CASE_BODY(forged_chunk_refused)
{
    DataCluster dc;
    for (const bool with : layouts) {
        dc.client.tags_with_chunks = with;
        const std::string how = layout_name(with);
        const Handle h = make_handle(0, with ? 11 : 21);
        const std::vector<std::byte> a = seed(dc.client, h);
        const std::vector<std::byte> b = test::pattern(chunk, 2);
        dc.client.data_hook = [](std::vector<std::byte> &stream) {
            stream[1000] ^= std::byte{0x40};
        };
        require_status(dc.client.call(write_of(h, 0, b.size()), 20000, b, {}, chunk), EBADMSG,
                       "forged write" + how);
        dc.client.data_hook = nullptr;
        require(read_back(dc.client, h, a.size()) == a,
                "the forged write changed the object" + how);
        // The last of three chunks forged: its range is untouched.
        const std::vector<std::byte> c = test::pattern(3 * std::size_t{chunk}, 3);
        dc.client.data_hook = [](std::vector<std::byte> &stream) {
            stream[2 * std::size_t{chunk} + 7] ^= std::byte{0x01};
        };
        require_status(dc.client.call(write_of(h, 0, c.size()), 20000, c, {}, chunk), EBADMSG,
                       "write with its last chunk forged" + how);
        dc.client.data_hook = nullptr;
        const std::vector<std::byte> back = read_back(dc.client, h, a.size());
        require(std::equal(back.begin() + 2 * std::ptrdiff_t{chunk}, back.end(),
                           a.begin() + 2 * std::ptrdiff_t{chunk}),
                "the forged chunk reached the object" + how);
        // The connection and the server are fine afterwards.
        require_status(dc.client.call(write_of(h, 0, c.size()), 20000, c, {}, chunk), 0,
                       "honest write after" + how);
        require(read_back(dc.client, h, c.size()) == c, "honest write after: bytes differ" + how);
    }
}

// Tags with the chunks: a chunk message cut inside its tag, without its
// tag, or longer than chunk and tag: refused (EPROTO), nothing of it
// stored; tags swapped between chunks: EBADMSG.
ATF_TEST_CASE_WITHOUT_HEAD(bad_chunk_trailer_refused);
ATF_TEST_CASE_BODY(bad_chunk_trailer_refused)
{
    DataCluster dc;
    const Handle h = make_handle(0, 15);
    const std::vector<std::byte> a = seed(dc.client, h);
    const std::vector<std::byte> b = test::pattern(3 * std::size_t{chunk}, 12);
    const auto last_chunk_intact = [&](const std::string &what) {
        const std::vector<std::byte> back = read_back(dc.client, h, a.size());
        require(std::equal(back.begin() + 2 * std::ptrdiff_t{chunk}, back.end(),
                           a.begin() + 2 * std::ptrdiff_t{chunk}),
                what + ": the bad chunk reached the object");
    };
    const std::vector<std::pair<const char *, std::size_t>> sizes{
        {"cut inside its tag", chunk + 8},
        {"without its tag", chunk},
        {"with bytes after its tag", chunk + proto::chunk_mac_size + 1},
    };
    for (const auto &[what, wire_size] : sizes) {
        dc.client.chunk_message_hook = [length = wire_size](std::size_t i,
                                                            std::vector<std::byte> &m) {
            if (i == 2)
                m.resize(length);
        };
        const Call c = dc.client.call(write_of(h, 0, b.size()), 20000, b, {}, chunk);
        // A message longer than the posted receive fails the receive in
        // BMI; the others arrive short.  Either way the request fails.
        require(c.answered && c.response.status != 0,
                std::string("a write whose last chunk is ") + what + " was not refused");
        last_chunk_intact(what);
    }
    std::vector<std::byte> first_tag;
    dc.client.chunk_message_hook = [&first_tag](std::size_t i, std::vector<std::byte> &m) {
        const auto tag = m.end() - static_cast<std::ptrdiff_t>(proto::chunk_mac_size);
        if (i == 0)
            first_tag.assign(tag, m.end());
        else if (i == 2)
            std::ranges::copy(first_tag, tag);
    };
    require_status(dc.client.call(write_of(h, 0, b.size()), 20000, b, {}, chunk), EBADMSG,
                   "write whose last chunk carries the first one's tag");
    last_chunk_intact("another chunk's tag");
    dc.client.chunk_message_hook = nullptr;
    require_status(dc.client.call(write_of(h, 0, b.size()), 20000, b, {}, chunk), 0,
                   "honest write after");
    require(read_back(dc.client, h, b.size()) == b, "honest write after: bytes differ");
}

// Tags made for another request (its ids): refused though the bytes are
// the ones MACed.
ATF_TEST_CASE_WITHOUT_HEAD(chunk_of_other_request_refused);
ATF_TEST_CASE_BODY(chunk_of_other_request_refused)
{
    DataCluster dc;
    for (const bool with : layouts) {
        dc.client.tags_with_chunks = with;
        const Handle h = make_handle(0, with ? 12 : 22);
        const std::vector<std::byte> a = seed(dc.client, h);
        const std::vector<std::byte> b = test::pattern(2 * std::size_t{chunk}, 4);
        dc.client.bind_hook = [](proto::ChunkBinding &binding) {
            binding.seq -= 1;
            binding.request_id -= 1;
        };
        require_status(dc.client.call(write_of(h, 0, b.size()), 20000, b, {}, chunk), EBADMSG,
                       "write with another request's tags" + layout_name(with));
        dc.client.bind_hook = nullptr;
        require(read_back(dc.client, h, a.size()) == a,
                "another request's chunks were stored" + layout_name(with));
    }
}

// Chunks in another order, or tags made for another object or server.
ATF_TEST_CASE_WITHOUT_HEAD(misplaced_chunk_refused);
ATF_TEST_CASE_BODY(misplaced_chunk_refused)
{
    DataCluster dc;
    for (const bool with : layouts) {
        dc.client.tags_with_chunks = with;
        const std::string how = layout_name(with);
        const Handle h = make_handle(0, with ? 13 : 23);
        const std::vector<std::byte> a = seed(dc.client, h);
        const std::vector<std::byte> b = test::pattern(2 * std::size_t{chunk}, 5);
        dc.client.data_hook = [](std::vector<std::byte> &stream) {
            std::swap_ranges(stream.begin(), stream.begin() + chunk, stream.begin() + chunk);
        };
        require_status(dc.client.call(write_of(h, 0, b.size()), 20000, b, {}, chunk), EBADMSG,
                       "write with two chunks swapped" + how);
        dc.client.data_hook = nullptr;
        require(read_back(dc.client, h, a.size()) == a, "swapped chunks were stored" + how);
        const std::vector<std::pair<const char *, void (*)(proto::ChunkBinding &)>> binds{
            {"another handle", [](proto::ChunkBinding &x) { x.handle += 1; }},
            {"another server", [](proto::ChunkBinding &x) { x.server_index += 1; }},
            {"another file system", [](proto::ChunkBinding &x) { x.fs_id += 1; }},
            {"a read's tags", [](proto::ChunkBinding &x) { x.is_write = false; }},
        };
        for (const auto &[what, hook] : binds) {
            dc.client.bind_hook = hook;
            require_status(dc.client.call(write_of(h, 0, b.size()), 20000, b, {}, chunk), EBADMSG,
                           std::string("write with tags for ") + what + how);
        }
        dc.client.bind_hook = nullptr;
        require(read_back(dc.client, h, a.size()) == a, "misdirected chunks were stored" + how);
    }
}

// Bulk data without MACs over an authenticated connection: refused
// (EPROTO) before any chunk moves; inline data needs none (the request's
// own MAC covers it).  A MAC list of the wrong length: EINVAL; one longer
// than the protocol allows is not decoded at all (dropped, logged).
ATF_TEST_CASE_WITHOUT_HEAD(missing_or_malformed_macs_refused);
ATF_TEST_CASE_BODY(missing_or_malformed_macs_refused)
{
    DataCluster dc;
    const Handle h = make_handle(0, 14);
    const std::vector<std::byte> a = seed(dc.client, h);
    const std::vector<std::byte> b = test::pattern(2 * std::size_t{chunk}, 6);
    dc.client.chunk_macs = false;
    require_status(dc.client.call(write_of(h, 0, b.size()), 20000, b, {}, chunk), EPROTO,
                   "write without chunk MACs");
    std::vector<std::byte> back(chunk);
    require_status(dc.client.call(proto::ReadRequest{h, {{0, chunk}}, chunk, 0, {}, {}}, 20000, {},
                                  back, chunk),
                   EPROTO, "read without chunk MACs");
    const std::vector<std::byte> small = test::pattern(100, 7);
    require_status(dc.client.call(proto::WriteRequest{h, {{0, 100}}, chunk, 0, small, {}, {}}), 0,
                   "inline write without chunk MACs");
    dc.client.chunk_macs = true;
    // A tag list in the request: the layout without tags in the chunks.
    dc.client.tags_with_chunks = false;
    dc.client.tags_hook = [](std::vector<proto::ChunkMac> &tags) { tags.pop_back(); };
    require_status(dc.client.call(write_of(h, 0, b.size()), 20000, b, {}, chunk), EINVAL,
                   "write with a tag missing");
    dc.client.tags_hook = [](std::vector<proto::ChunkMac> &tags) {
        tags.resize(proto::max_chunk_macs + 1);
    };
    const Call huge = dc.client.call(write_of(h, 0, b.size()), 3000, b, {}, chunk);
    require(!huge.answered, "a request with 4097 chunk MACs was answered");
    dc.client.tags_hook = nullptr;
    std::vector<std::byte> want = a;
    std::copy(small.begin(), small.end(), want.begin());
    require(read_back(dc.client, h, a.size()) == want, "a refused write changed the object");
}

// A client's first request to a data server is made before its connection
// is authenticated (no session key yet): a read checks its chunks with the
// key the answer came under, a write is answered EKEYEXPIRED and sent again
// with the key.  Both succeed; cluster_test and squash_test's fresh readers
// failed with EIO before the read took the answer's key.
ATF_TEST_CASE_WITHOUT_HEAD(first_contact_read_and_write);
ATF_TEST_CASE_BODY(first_contact_read_and_write)
{
    test::Cluster cl(test::servers(1, 2), "stripe_size = \"64KiB\"\nbulk_chunk = \"64KiB\"\n");
    Attr a;
    const std::vector<std::byte> data = test::pattern(5 * std::size_t{chunk}, 10);
    {
        auto w = cl.connect();
        test::require_rc(w->create(root_handle, "f", 0644, true, {}, a), 0, "create");
        test::require_rc(w->write(a.handle, 0, data), static_cast<std::int64_t>(data.size()),
                         "first write (first contact)");
    }
    auto r = cl.connect();
    std::vector<std::byte> got(data.size());
    test::require_rc(r->read(a.handle, 0, got), static_cast<std::int64_t>(got.size()),
                     "read by a fresh client (first contact)");
    require(got == data, "first-contact read: bytes differ");
}

// A read chunk altered after the server's MAC: libpvfs returns EIO, never
// the altered bytes; the raw client sees the mismatch too.
ATF_TEST_CASE_WITHOUT_HEAD(tampered_read_is_eio);
ATF_TEST_CASE_BODY(tampered_read_is_eio)
{
    const test::ScopedEnv tamper("PVFS_TEST_TAMPER_READS", "1");
    test::Cluster cl(test::servers(1, 2), "stripe_size = \"64KiB\"\nbulk_chunk = \"64KiB\"\n");
    auto c = cl.connect();
    Attr a;
    test::require_rc(c->create(root_handle, "f", 0644, true, {}, a), 0, "create");
    const std::vector<std::byte> data = test::pattern(4 * std::size_t{chunk}, 8);
    test::require_rc(c->write(a.handle, 0, data), static_cast<std::int64_t>(data.size()), "write");
    std::vector<std::byte> got(data.size());
    test::require_rc(c->read(a.handle, 0, got), -EIO, "read of tampered chunks");
    // Reads of inline size move as chunks too: also refused.
    std::vector<std::byte> few(100);
    test::require_rc(c->read(a.handle, 0, few), -EIO, "small read of a tampered chunk");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, injected_chunk_refused);
    ATF_ADD_TEST_CASE(tcs, forged_chunk_refused);
    ATF_ADD_TEST_CASE(tcs, bad_chunk_trailer_refused);
    ATF_ADD_TEST_CASE(tcs, chunk_of_other_request_refused);
    ATF_ADD_TEST_CASE(tcs, misplaced_chunk_refused);
    ATF_ADD_TEST_CASE(tcs, missing_or_malformed_macs_refused);
    ATF_ADD_TEST_CASE(tcs, first_contact_read_and_write);
    ATF_ADD_TEST_CASE(tcs, tampered_read_is_eio);
}
