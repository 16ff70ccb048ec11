// pvfs-server's data role, spoken to directly over the protocol: a real
// server process on loopback, inline and bulk (multi-chunk, list I/O)
// writes and reads, holes, sizes, fsync, truncate, remove, listing, bad
// requests, forged MACs and replays, requests for another server; the BMI
// limits of its config applied.
#include <atf-c++.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "harness.hpp"
#include "pvfs/unique_fd.hpp"

namespace {

namespace fs = std::filesystem;
using namespace pvfs;
using pvfs::UniqueFd;
using pvfs::test::Call;
using pvfs::test::RawClient;
using pvfs::test::require;
using pvfs::test::ServerProcess;

// One metadata server in the config (never started here) and one data
// server, with 64 KiB chunks so that small tests cross many chunks.
struct DataCluster {
    test::ClusterFiles files = test::write_cluster(fs::current_path() / "cluster",
                                                   {{"meta0", true, false}, {"data0", false, true}},
                                                   "bulk_chunk = \"64KiB\"\n");
    ServerProcess server{PVFS_SERVER_BINARY, files, "data0"};
    RawClient client{files, "data0"};
};

constexpr std::uint32_t chunk = 64U * 1024U;

void require_ok(const Call &c, const std::string &what)
{
    if (!c.answered)
        ATF_FAIL(what + ": no response: " + c.error);
    if (c.response.status != 0)
        ATF_FAIL(what + ": status " + std::to_string(c.response.status) + " (" +
                 std::strerror(c.response.status) + ")"); // NOLINT(concurrency-mt-unsafe)
}

void require_status(const Call &c, int status, const std::string &what)
{
    if (!c.answered)
        ATF_FAIL(what + ": no response: " + c.error);
    require(c.response.status == status, what + ": status " + std::to_string(c.response.status) +
                                             ", expected " + std::to_string(status));
}

std::uint64_t object_size(RawClient &client, Handle h)
{
    const Call c = client.call(proto::ObjectSizesRequest{{h}});
    require_ok(c, "object_sizes");
    const auto &r = std::get<proto::ObjectSizesResponse>(c.response.body);
    ATF_REQUIRE_EQ(r.sizes.size(), 1U);
    return r.sizes[0];
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(status_and_config);
ATF_TEST_CASE_BODY(status_and_config)
{
    DataCluster dc;
    const Call s = dc.client.call(proto::StatusRequest{});
    require_ok(s, "status");
    const auto &st = std::get<proto::StatusResponse>(s.response.body);
    ATF_REQUIRE_EQ(st.server_name, "data0");
    ATF_REQUIRE_EQ(st.roles, proto::role_data);
    ATF_REQUIRE(st.config_hash == config::hash(dc.files.cluster));

    const Call g = dc.client.call(proto::GetConfigRequest{});
    require_ok(g, "get_config");
    const auto &gc = std::get<proto::GetConfigResponse>(g.response.body);
    ATF_REQUIRE_EQ(gc.server_index, 1U);
    const config::Result parsed = config::parse(gc.config_text, "get_config", "");
    require(parsed.ok(), parsed.error);
    ATF_REQUIRE(parsed.cluster == dc.files.cluster);

    const Call f = dc.client.call(proto::StatfsRequest{});
    require_ok(f, "statfs");
    const auto &sf = std::get<proto::StatfsResponse>(f.response.body);
    ATF_REQUIRE(sf.total_bytes > 0);
    ATF_REQUIRE(sf.free_bytes <= sf.total_bytes);
}

ATF_TEST_CASE_WITHOUT_HEAD(inline_write_and_hole);
ATF_TEST_CASE_BODY(inline_write_and_hole)
{
    DataCluster dc;
    const Handle h = make_handle(0, 77);
    const std::vector<std::byte> data = test::pattern(1000, 1);
    proto::WriteRequest w{h, {{5000, 1000}}, chunk, 0, data, {}, {}};
    const Call wc = dc.client.call(w);
    require_ok(wc, "inline write");
    ATF_REQUIRE_EQ(std::get<proto::WriteResponse>(wc.response.body).bytes, 1000U);
    ATF_REQUIRE_EQ(std::get<proto::WriteResponse>(wc.response.body).object_size, 6000U);

    // Reading past the end: the hole and the tail read as zeros.
    std::vector<std::byte> back(8000, std::byte{0xee});
    const Call rc = dc.client.call(proto::ReadRequest{h, {{0, 8000}}, chunk, 0, {}, {}}, 20000, {},
                                   back, chunk);
    require_ok(rc, "read");
    ATF_REQUIRE_EQ(std::get<proto::ReadResponse>(rc.response.body).object_size, 6000U);
    for (std::size_t i = 0; i < 8000; ++i) {
        const std::byte want = i >= 5000 && i < 6000 ? data[i - 5000] : std::byte{0};
        if (back[i] != want)
            ATF_FAIL("byte " + std::to_string(i) + " differs");
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(bulk_list_io);
ATF_TEST_CASE_BODY(bulk_list_io)
{
    DataCluster dc;
    const Handle h = make_handle(0, 1234);
    // Three regions of the object, 1 MiB + 123 bytes in all: 17 chunks,
    // chunk boundaries falling inside regions.
    const std::vector<proto::Region> regions{{0, 300000}, {1000000, 500000}, {3000000, 248699}};
    const std::size_t total = 300000 + 500000 + 248699;
    const std::vector<std::byte> data = test::pattern(total, 7);
    const Call wc = dc.client.call(proto::WriteRequest{h, regions, chunk, 0, {}, {}, {}}, 20000,
                                   data, {}, chunk);
    require_ok(wc, "bulk write");
    ATF_REQUIRE_EQ(std::get<proto::WriteResponse>(wc.response.body).bytes, total);
    ATF_REQUIRE_EQ(object_size(dc.client, h), 3248699U);

    std::vector<std::byte> back(total);
    const Call rc =
        dc.client.call(proto::ReadRequest{h, regions, chunk, 0, {}, {}}, 20000, {}, back, chunk);
    require_ok(rc, "bulk read");
    ATF_REQUIRE(back == data);

    // The bytes sit where the regions said: read one contiguous span that
    // covers the end of region 0 and the start of the gap.
    std::vector<std::byte> span(1000);
    const Call sc = dc.client.call(proto::ReadRequest{h, {{299500, 1000}}, chunk, 0, {}, {}}, 20000,
                                   {}, span, chunk);
    require_ok(sc, "span read");
    for (std::size_t i = 0; i < 500; ++i)
        ATF_REQUIRE(span[i] == data[299500 + i]);
    for (std::size_t i = 500; i < 1000; ++i)
        ATF_REQUIRE(span[i] == std::byte{0});
}

ATF_TEST_CASE_WITHOUT_HEAD(fsync_truncate_remove_list);
ATF_TEST_CASE_BODY(fsync_truncate_remove_list)
{
    DataCluster dc;
    const Handle a = make_handle(0, 10);
    const Handle b = make_handle(0, 11);
    for (const Handle h : {a, b}) {
        require_ok(dc.client.call(
                       proto::WriteRequest{h, {{0, 100}}, chunk, 0, test::pattern(100, 3), {}, {}}),
                   "write");
    }
    require_ok(dc.client.call(proto::FsyncRequest{a}), "fsync");
    require_ok(dc.client.call(proto::TruncateObjectRequest{a, 10}), "truncate");
    ATF_REQUIRE_EQ(object_size(dc.client, a), 10U);

    const Call l = dc.client.call(proto::ListObjectsRequest{0, 1});
    require_ok(l, "list");
    auto page = std::get<proto::ListObjectsResponse>(l.response.body);
    ATF_REQUIRE_EQ(page.handles.size(), 1U);
    ATF_REQUIRE(!page.eof);
    const Call l2 = dc.client.call(proto::ListObjectsRequest{page.next_cookie, 100});
    require_ok(l2, "list 2");
    const auto &page2 = std::get<proto::ListObjectsResponse>(l2.response.body);
    ATF_REQUIRE_EQ(page2.handles.size(), 1U);
    ATF_REQUIRE(page2.eof);
    ATF_REQUIRE(page.handles[0] != page2.handles[0]);

    require_ok(dc.client.call(proto::RemoveObjectRequest{a}), "remove");
    require_ok(dc.client.call(proto::RemoveObjectRequest{a}), "remove again (idempotent)");
    ATF_REQUIRE_EQ(object_size(dc.client, a), proto::no_object_size);
    ATF_REQUIRE_EQ(object_size(dc.client, b), 100U);
}

ATF_TEST_CASE_WITHOUT_HEAD(bad_requests);
ATF_TEST_CASE_BODY(bad_requests)
{
    DataCluster dc;
    require_status(dc.client.call(proto::WriteRequest{
                       no_handle, {{0, 1}}, chunk, 0, test::pattern(1, 1), {}, {}}),
                   EACCES, "handle 0 (no capability can name it)");
    require_status(
        dc.client.call(proto::ReadRequest{make_handle(0, 5), {{0, 100000}}, 1000, 0, {}, {}}),
        EINVAL, "chunk below the minimum");
    require_status(
        dc.client.call(proto::ReadRequest{make_handle(0, 5), {{0, 100000}}, 4U << 20U, 0, {}, {}}),
        EINVAL, "chunk above the server's");
    require_status(dc.client.call(proto::WriteRequest{
                       make_handle(0, 5), {{0, 10}}, chunk, 0, test::pattern(9, 1), {}, {}}),
                   EINVAL, "inline data shorter than the regions");
    require_status(dc.client.call(proto::ReadRequest{
                       make_handle(0, 5), {{~std::uint64_t{0} - 5, 10}}, chunk, 0, {}, {}}),
                   EINVAL, "region beyond 2^63");
    require_status(dc.client.call(proto::LookupRequest{root_handle, "x"}), EOPNOTSUPP,
                   "metadata op to a data server");
    // A memory descriptor reaches a server that cannot RDMA over the
    // request's connection (tcp): refused before any byte is stored.
    const Handle described = make_handle(0, 6);
    require_status(dc.client.call(proto::WriteRequest{
                       described, {{0, 100}}, chunk, 0, {}, test::pattern(40, 2), {}}),
                   EOPNOTSUPP, "write with an RDMA descriptor over tcp");
    require_status(dc.client.call(proto::ReadRequest{
                       described, {{0, 100}}, chunk, 0, test::pattern(40, 3), {}}),
                   EOPNOTSUPP, "read with an RDMA descriptor over tcp");
    ATF_REQUIRE_EQ(object_size(dc.client, described), proto::no_object_size);
    // Still serving.
    require_ok(dc.client.call(proto::StatusRequest{}), "status after bad requests");
}

ATF_TEST_CASE_WITHOUT_HEAD(forged_and_replayed);
ATF_TEST_CASE_BODY(forged_and_replayed)
{
    DataCluster dc;
    // Signed with another key: dropped and logged, never answered.
    std::vector<std::byte> forged = dc.client.encode(proto::StatusRequest{});
    forged[forged.size() - 1] ^= std::byte{1};
    ATF_REQUIRE(!dc.client.send_raw(forged, 1500).has_value());

    // A valid request is answered once; the same bytes again are a replay.
    const std::vector<std::byte> once = dc.client.encode(proto::StatusRequest{});
    ATF_REQUIRE(dc.client.send_raw(once, 10000).has_value());
    ATF_REQUIRE(!dc.client.send_raw(once, 1500).has_value());

    // Garbage that is not a request at all.
    const std::vector<std::byte> junk = test::pattern(200, 9);
    ATF_REQUIRE(!dc.client.send_raw(junk, 1000).has_value());

    require_ok(dc.client.call(proto::StatusRequest{}), "status after the attacks");
    ATF_REQUIRE_EQ(dc.server.stop(SIGTERM), 0);
    const std::string log = dc.server.log_text();
    require(log.find("dropped a request") != std::string::npos, log);
    require(log.find("replayed") != std::string::npos, log);
}

namespace {

// Two data servers (meta0, never started, is index 0; data0 is 1, data1 is
// 2), each with a client bound to it.
struct TwoDataCluster {
    explicit TwoDataCluster(const std::string &extra_defaults = "")
        : files(test::write_cluster(
              fs::current_path() / "cluster",
              {{"meta0", true, false}, {"data0", false, true}, {"data1", false, true}},
              extra_defaults))
    {
    }
    test::ClusterFiles files;
    ServerProcess server0{PVFS_SERVER_BINARY, files, "data0"};
    ServerProcess server1{PVFS_SERVER_BINARY, files, "data1"};
    RawClient client0{files, "data0"};
    RawClient client1{files, "data1"};
};

std::int64_t realtime_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The status of the answer to raw request bytes, or -1 if none came.
int raw_status(RawClient &client, std::span<const std::byte> bytes)
{
    const auto answer = client.send_raw(bytes, 10000);
    if (!answer)
        return -1;
    proto::Response resp;
    const proto::DecodeResult d = proto::decode(*answer, client.key(), resp);
    require(static_cast<bool>(d), "undecodable answer: " + d.message());
    return resp.status;
}

std::vector<std::byte> read_object(RawClient &client, Handle h, std::size_t n)
{
    std::vector<std::byte> back(n, std::byte{0xee});
    require_ok(
        client.call(proto::ReadRequest{h, {{0, n}}, chunk, 0, {}, {}}, 20000, {}, back, chunk),
        "read");
    return back;
}

} // namespace

// A request signed for data0 and sent to data1 (the same handle names an
// object on each) is refused there with EINVAL and logged, and data1's
// object is untouched; the same bytes are good at data0.
ATF_TEST_CASE_WITHOUT_HEAD(misdirected_requests);
ATF_TEST_CASE_BODY(misdirected_requests)
{
    TwoDataCluster dc;
    const Handle h = make_handle(0, 4242);
    const std::vector<std::byte> data1 = test::pattern(3000, 11);
    require_ok(dc.client1.call(proto::WriteRequest{h, {{0, 3000}}, chunk, 0, data1, {}, {}}),
               "write on data1");
    require_ok(dc.client0.call(proto::WriteRequest{h, {{0, 3000}}, chunk, 0, data1, {}, {}}),
               "write on data0");

    const std::vector<std::byte> truncate = dc.client0.encode(proto::TruncateObjectRequest{h, 0});
    ATF_REQUIRE_EQ(raw_status(dc.client1, truncate), EINVAL);
    const std::vector<std::byte> write = dc.client0.encode(
        proto::WriteRequest{h, {{100, 500}}, chunk, 0, test::pattern(500, 12), {}, {}});
    ATF_REQUIRE_EQ(raw_status(dc.client1, write), EINVAL);
    // Another file system's request for data1's own index is refused too.
    RawClient other_fs{dc.files, "data1"};
    other_fs.to->fs_id ^= 1U;
    ATF_REQUIRE_EQ(raw_status(dc.client1, other_fs.encode(proto::TruncateObjectRequest{h, 0})),
                   EINVAL);
    ATF_REQUIRE_EQ(object_size(dc.client1, h), 3000U);
    require(read_object(dc.client1, h, 3000) == data1, "data1's object changed");

    // They were good requests, for data0.
    ATF_REQUIRE_EQ(raw_status(dc.client0, write), 0);
    ATF_REQUIRE_EQ(raw_status(dc.client0, truncate), 0);
    ATF_REQUIRE_EQ(object_size(dc.client0, h), 0U);

    ATF_REQUIRE_EQ(dc.server1.stop(SIGTERM), 0);
    const std::string log = dc.server1.log_text();
    require(log.find("refused truncate_object request") != std::string::npos &&
                log.find("for server index 1 (this is data1, index 2)") != std::string::npos,
            log);
    // Once a minute per peer: the second refusal (the write) is not logged.
    require(log.find("refused write request") == std::string::npos, log);
}

// By default a request that names no server is refused (get_config
// excepted: a client given only a URL asks for the config first);
// require_bound = false lets it in.
ATF_TEST_CASE_WITHOUT_HEAD(unbound_requests);
ATF_TEST_CASE_BODY(unbound_requests)
{
    const Handle h = make_handle(0, 99);
    {
        TwoDataCluster dc;
        dc.client1.to.reset();
        require_status(dc.client1.call(proto::TruncateObjectRequest{h, 10}), EINVAL,
                       "unbound truncate_object");
        require_status(dc.client1.call(proto::StatusRequest{}), EINVAL, "unbound status");
        require_ok(dc.client1.call(proto::GetConfigRequest{}), "unbound get_config");
        dc.client1.to = proto::Destination{dc.files.cluster.fs_id, 2};
        ATF_REQUIRE_EQ(object_size(dc.client1, h), proto::no_object_size);
        ATF_REQUIRE_EQ(dc.server1.stop(SIGTERM), 0);
        const std::string log = dc.server1.log_text();
        require(log.find("not bound to a server") != std::string::npos, log);
    }
    fs::remove_all(fs::current_path() / "cluster");
    TwoDataCluster dc("require_bound = false\n");
    dc.client1.to.reset();
    require_ok(dc.client1.call(proto::TruncateObjectRequest{h, 10}),
               "unbound truncate_object with require_bound = false");
    ATF_REQUIRE_EQ(object_size(dc.client1, h), 10U);
}

// What each refusal is answered (docs/protocol.md "What a refused request
// is answered"): a misdirected or unbound request EINVAL, as often as it
// is sent (the replay guard records nothing of it); a request whose time
// is outside the replay window ETIME; only a copy of a request that was
// accepted gets nothing.  With require_bound = false an unbound request
// sent to the wrong server is not refused at all: it runs there, and
// sending the same bytes again is that silent replay (the 10 s of silence
// a misdirected truncate met in an earlier session).  libpvfs never sends
// bytes twice: each try has a fresh seq (retry_test:lost_replies).
ATF_TEST_CASE_WITHOUT_HEAD(refusals_answered);
ATF_TEST_CASE_BODY(refusals_answered)
{
    const Handle h = make_handle(0, 77);
    {
        TwoDataCluster dc;
        const std::vector<std::byte> misdirected =
            dc.client0.encode(proto::TruncateObjectRequest{h, 0});
        dc.client0.to.reset();
        const std::vector<std::byte> unbound =
            dc.client0.encode(proto::TruncateObjectRequest{h, 0});
        for (int i = 0; i < 2; ++i) {
            ATF_REQUIRE_EQ(raw_status(dc.client1, misdirected), EINVAL);
            ATF_REQUIRE_EQ(raw_status(dc.client1, unbound), EINVAL);
        }
        // A clock a window off (the default window is 120 s), each way.
        for (const std::int64_t skew : {-300'000'000'000LL, 300'000'000'000LL}) {
            proto::Request req;
            req.request_id = 1;
            req.session = 0x5eed'0000'0000'0001ULL;
            req.seq = 1;
            req.time_ns = realtime_ns() + skew;
            req.to = proto::Destination{dc.files.cluster.fs_id, 2};
            req.body = proto::TruncateObjectRequest{h, 0};
            std::vector<std::byte> bytes;
            proto::encode(req, dc.client1.key(), bytes);
            ATF_REQUIRE_EQ(raw_status(dc.client1, bytes), ETIME);
        }
        ATF_REQUIRE_EQ(object_size(dc.client1, h), proto::no_object_size);
    }
    fs::remove_all(fs::current_path() / "cluster");
    TwoDataCluster dc("require_bound = false\n");
    dc.client0.to.reset();
    const std::vector<std::byte> truncate = dc.client0.encode(proto::TruncateObjectRequest{h, 10});
    ATF_REQUIRE_EQ(raw_status(dc.client1, truncate), 0);
    ATF_REQUIRE_EQ(object_size(dc.client1, h), 10U);
    ATF_REQUIRE(!dc.client1.send_raw(truncate, 1500).has_value());
    // The same change in a new request (a fresh seq) is answered.
    ATF_REQUIRE_EQ(raw_status(dc.client1, dc.client0.encode(proto::TruncateObjectRequest{h, 10})),
                   0);
    ATF_REQUIRE_EQ(dc.server1.stop(SIGTERM), 0);
    require(dc.server1.log_text().find("request replayed") != std::string::npos,
            "the replay is not logged");
}

// The BMI limits come from [defaults]: a server given them all (none at
// its default) starts, and closes a connection that sends no hello after
// hello_timeout (500 ms here; 10 s by default).
ATF_TEST_CASE_WITHOUT_HEAD(bmi_limits_from_config);
ATF_TEST_CASE_BODY(bmi_limits_from_config)
{
    const test::ClusterFiles files = test::write_cluster(
        fs::current_path() / "cluster", {{"meta0", true, false}, {"data0", false, true}},
        "hello_timeout = \"500ms\"\nframe_timeout = \"2s\"\nframe_min_rate = 2048\n"
        "unexpected_total_bytes = \"32MiB\"\nearly_total_bytes = \"2MiB\"\n"
        "send_queue_bytes = \"128KiB\"\n");
    ServerProcess server{PVFS_SERVER_BINARY, files, "data0"};
    const std::string &url = files.cluster.servers[1].addresses.at(0);
    const auto port = static_cast<std::uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
    const UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
    require(::connect(fd.get(), reinterpret_cast<const sockaddr *>(&to), sizeof to) == 0,
            "connect to data0");
    const timeval tv{5, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const auto start = std::chrono::steady_clock::now();
    std::array<char, 4096> buf{};
    ssize_t n = 0;
    do { // the server's hello first, then the end
        n = ::recv(fd.get(), buf.data(), buf.size(), 0);
    } while (n > 0);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    require(n == 0 || errno == ECONNRESET, "the silent connection was not closed");
    require(took.count() >= 400 && took.count() < 3000,
            "closed after " + std::to_string(took.count()) + " ms, not after hello_timeout");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, status_and_config);
    ATF_ADD_TEST_CASE(tcs, inline_write_and_hole);
    ATF_ADD_TEST_CASE(tcs, bulk_list_io);
    ATF_ADD_TEST_CASE(tcs, fsync_truncate_remove_list);
    ATF_ADD_TEST_CASE(tcs, bad_requests);
    ATF_ADD_TEST_CASE(tcs, forged_and_replayed);
    ATF_ADD_TEST_CASE(tcs, misdirected_requests);
    ATF_ADD_TEST_CASE(tcs, unbound_requests);
    ATF_ADD_TEST_CASE(tcs, refusals_answered);
    ATF_ADD_TEST_CASE(tcs, bmi_limits_from_config);
}
