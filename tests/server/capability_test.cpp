// Capabilities (docs/protocol.md "Capabilities"): data servers refuse
// every data request without a capability that the metadata server signed
// for that file, right, key and file system, and that has not expired;
// the metadata server grants one only as permissions (or an open, or a
// create) allow, and destroy only for a file that is gone.
#include <atf-c++.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"
#include "pvfs/proto.hpp"

namespace {

using namespace pvfs;
using pvfs::test::Call;
using pvfs::test::RawClient;
using pvfs::test::require;
using pvfs::test::require_rc;

constexpr std::uint32_t chunk = 64U * 1024U;

test::Cluster make_cluster(const std::string &extra = {})
{
    return {test::servers(1, 1), "request_timeout = \"5s\"\nbulk_chunk = \"64KiB\"\n" + extra,
            test::fresh_attrs()};
}

std::int64_t realtime_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int status_of(const Call &c, const std::string &what)
{
    if (!c.answered)
        ATF_FAIL(what + ": no response: " + c.error);
    return c.response.status;
}

void require_status(const Call &c, int status, const std::string &what)
{
    const int got = status_of(c, what);
    // NOLINTNEXTLINE(concurrency-mt-unsafe): the test runs one thread
    const std::string text = std::strerror(got);
    require(got == status, what + ": status " + std::to_string(got) + " (" + text + "), expected " +
                               std::to_string(status));
}

// A client of `uid` that leaves data access to the servers, as pvfsd does.
std::unique_ptr<client::Client> connect_user(const test::Cluster &cl, std::uint32_t uid,
                                             std::uint64_t client_id = 0)
{
    client::Options o = test::fresh_attrs();
    o.client_id = client_id;
    o.credentials.uid = uid;
    o.credentials.gid = uid;
    o.check_data_access = false;
    return cl.connect(o);
}

std::vector<std::byte> read_back(RawClient &raw, Handle h, std::size_t n)
{
    std::vector<std::byte> back(n);
    require_status(
        raw.call(proto::ReadRequest{h, {{0, n}}, chunk, 0, {}, {}}, 20000, {}, back, chunk), 0,
        "read back");
    return back;
}

} // namespace

// Every data op without a capability: EACCES, nothing done.
ATF_TEST_CASE_WITHOUT_HEAD(no_capability_refused);
ATF_TEST_CASE_BODY(no_capability_refused)
{
    test::Cluster cl = make_cluster();
    RawClient raw(cl.files, "data0");
    const Handle h = make_handle(0, 77);
    const std::vector<std::byte> data = test::pattern(1000, 1);
    require_status(raw.call(proto::WriteRequest{h, {{0, 1000}}, chunk, 0, data, {}, {}}), 0,
                   "write with a capability");
    raw.capabilities = false;
    require_status(
        raw.call(proto::WriteRequest{h, {{0, 1000}}, chunk, 0, test::pattern(1000, 2), {}, {}}),
        EACCES, "inline write without");
    const std::vector<std::byte> big = test::pattern(std::size_t{3} * chunk, 3);
    require_status(raw.call(proto::WriteRequest{h, {{0, big.size()}}, chunk, 0, {}, {}, {}}, 5000,
                            big, {}, chunk),
                   EACCES, "bulk write without");
    std::vector<std::byte> back(1000);
    require_status(
        raw.call(proto::ReadRequest{h, {{0, 1000}}, chunk, 0, {}, {}}, 20000, {}, back, chunk),
        EACCES, "read without");
    require_status(raw.call(proto::TruncateObjectRequest{h, 0}), EACCES, "truncate without");
    require_status(raw.call(proto::FsyncRequest{h}), EACCES, "fsync without");
    require_status(raw.call(proto::RemoveObjectRequest{h}), EACCES, "remove without");
    raw.capabilities = true;
    require(read_back(raw, h, 1000) == data, "the object changed");
}

// Capabilities that are not for this request: each refused, the object
// unchanged.
ATF_TEST_CASE_WITHOUT_HEAD(wrong_capability_refused);
ATF_TEST_CASE_BODY(wrong_capability_refused)
{
    test::Cluster cl = make_cluster();
    RawClient raw(cl.files, "data0");
    const Handle h = make_handle(0, 78);
    const std::vector<std::byte> data = test::pattern(1000, 4);
    require_status(raw.call(proto::WriteRequest{h, {{0, 1000}}, chunk, 0, data, {}, {}}), 0,
                   "write with a capability");
    const proto::CapabilityKey ck = proto::capability_key(raw.key());
    const auto other = proto::Key::from_hex(std::string(64, 'e'));
    const proto::CapabilityKey foreign = proto::capability_key(*other);
    struct Misuse {
        const char *what;
        void (*change)(proto::Capability &, const proto::CapabilityKey &,
                       const proto::CapabilityKey &);
    };
    const std::vector<Misuse> misuses = {
        {"another file's",
         [](proto::Capability &c, const proto::CapabilityKey &k, const proto::CapabilityKey &) {
             c.handle = make_handle(0, 79);
             proto::sign_capability(k, c);
         }},
        {"read only, for a write",
         [](proto::Capability &c, const proto::CapabilityKey &k, const proto::CapabilityKey &) {
             c.rights = proto::cap_read;
             proto::sign_capability(k, c);
         }},
        {"expired 200 s ago",
         [](proto::Capability &c, const proto::CapabilityKey &k, const proto::CapabilityKey &) {
             c.expires_ns = realtime_ns() - std::int64_t{200} * 1'000'000'000;
             proto::sign_capability(k, c);
         }},
        {"another file system's",
         [](proto::Capability &c, const proto::CapabilityKey &k, const proto::CapabilityKey &) {
             c.fs_id ^= 1;
             proto::sign_capability(k, c);
         }},
        {"another key's",
         [](proto::Capability &c, const proto::CapabilityKey &k, const proto::CapabilityKey &) {
             c.keyed = true;
             c.key_id = 0x1234;
             proto::sign_capability(k, c);
         }},
        {"signed by another cluster",
         [](proto::Capability &c, const proto::CapabilityKey &, const proto::CapabilityKey &f) {
             proto::sign_capability(f, c);
         }},
        {"rights widened after signing",
         [](proto::Capability &c, const proto::CapabilityKey &, const proto::CapabilityKey &) {
             c.rights = proto::cap_rights;
         }},
        {"a tag bit flipped", [](proto::Capability &c, const proto::CapabilityKey &,
                                 const proto::CapabilityKey &) { c.tag[3] ^= std::byte{1}; }},
    };
    for (const Misuse &m : misuses) {
        raw.cap_hook = [&](proto::Capability &c) { m.change(c, ck, foreign); };
        require_status(
            raw.call(proto::WriteRequest{h, {{0, 1000}}, chunk, 0, test::pattern(1000, 5), {}, {}}),
            EACCES, std::string("write with a capability ") + m.what);
        require_status(raw.call(proto::TruncateObjectRequest{h, 0}), EACCES,
                       std::string("truncate with a capability ") + m.what);
    }
    raw.cap_hook = nullptr;
    require(read_back(raw, h, 1000) == data, "the object changed");
    // The hook itself works: an unchanged capability passes through it.
    raw.cap_hook = [](proto::Capability &) {};
    require_status(raw.call(proto::TruncateObjectRequest{h, 1000}), 0, "truncate, untouched");
}

// A key holder whose uid may not read or write a file gets no capability
// for it, so even a client that skips its own checks (as pvfsd does) cannot
// touch its data; an open keeps its rights after a chmod, as a descriptor.
ATF_TEST_CASE_WITHOUT_HEAD(permission_decides);
ATF_TEST_CASE_BODY(permission_decides)
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    constexpr std::uint64_t alice_id = 0xA11CE0001;
    auto alice = connect_user(cl, 1000, alice_id);
    auto bob = connect_user(cl, 1001);
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    const Handle dir = attr.handle;
    require_rc(alice->create(dir, "secret", 0600, true, {}, attr), 0, "create 0600");
    const Handle h = attr.handle;
    const std::vector<std::byte> data = test::pattern(std::size_t{3} * chunk, 6);
    require_rc(alice->write(h, 0, data), static_cast<std::int64_t>(data.size()), "alice writes");

    std::vector<std::byte> buf(data.size());
    require_rc(bob->read(h, 0, buf), -EACCES, "bob reads alice's 0600 file");
    require_rc(bob->write(h, 0, test::pattern(100, 7)), -EACCES, "bob writes it");
    client::SetAttr trunc;
    trunc.truncate = true;
    trunc.size = 0;
    require_rc(bob->setattr(h, trunc, attr), -EACCES, "bob truncates it");

    // Asked of the metadata server directly, as uid 1001.
    RawClient meta(cl.files, "meta0");
    meta.cred.uid = 1001;
    meta.cred.gid = 1001;
    require_status(meta.call(proto::CapabilityRequest{h, proto::cap_read, 0}), EACCES,
                   "a read capability for bob");
    meta.cred.uid = 1000;
    meta.cred.gid = 1000;
    require_status(meta.call(proto::CapabilityRequest{h, proto::cap_read, 0}), 0,
                   "a read capability for alice");

    // Alice opens it for writing, then takes her own write permission away:
    // the open still writes; a fresh client of hers without an open cannot.
    require_rc(alice->open(h, client::Client::open_read | client::Client::open_write, attr), 0,
               "open for writing");
    client::SetAttr chmod;
    chmod.mask = client::set_mode;
    chmod.mode = 0400;
    require_rc(alice->setattr(h, chmod, attr), 0, "chmod 0400");
    auto alice2 = connect_user(cl, 1000);
    require_rc(alice2->write(h, 0, test::pattern(10, 8)), -EACCES,
               "write by a client without an open");
    require_rc(alice2->read(h, 0, buf), static_cast<std::int64_t>(buf.size()),
               "read still allowed");
    require(buf == data, "alice2 read other bytes");
    // A new write open after the chmod is not refused (the kernel decides
    // opens) but gives no write rights: its hold has only what the
    // permission allowed.
    auto alice3 = connect_user(cl, 1000);
    require_rc(alice3->open(h, client::Client::open_write, attr), 0,
               "a new write open after the chmod");
    require_rc(alice3->write(h, 0, test::pattern(10, 9)), -EACCES,
               "write through an open made after the chmod");
    // The first open's hold still has write, asked afresh (not cached).
    meta.cred.uid = 1000;
    meta.cred.gid = 1000;
    require_status(meta.call(proto::CapabilityRequest{h, proto::cap_write, alice_id}), 0,
                   "a write capability through the first open");
    require_rc(alice->write(h, 0, test::pattern(10, 9)), 10, "write through the open");
}

// The creator may write what it created whatever the mode (the create's
// answer carries a capability), and nobody else may.
ATF_TEST_CASE_WITHOUT_HEAD(creator_capability);
ATF_TEST_CASE_BODY(creator_capability)
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    auto alice = connect_user(cl, 1000);
    auto bob = connect_user(cl, 1001);
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    require_rc(alice->create(attr.handle, "ro", 0444, true, {}, attr), 0, "create 0444");
    const Handle h = attr.handle;
    require_rc(alice->write(h, 0, test::pattern(5000, 10)), 5000, "the creator writes");
    require_rc(bob->write(h, 0, test::pattern(10, 11)), -EACCES, "bob writes a 0444 file");
}

namespace {

// Capability requests the metadata server has answered so far.
std::uint64_t capability_requests(client::Client &c)
{
    for (const client::ServerStatus &s : c.status_all(true)) {
        if (s.name != "meta0" || !s.status.counters)
            continue;
        for (const OpCounters &o : s.status.counters->ops)
            if (o.op == static_cast<std::uint16_t>(proto::Op::capability))
                return o.requests;
        return 0;
    }
    ATF_FAIL("no counters from meta0");
}

} // namespace

// An open's answer carries a capability with its hold's rights: the
// opener's reads and writes need no capability request.  An open without
// the permission gets none.
ATF_TEST_CASE_WITHOUT_HEAD(open_carries_capability);
ATF_TEST_CASE_BODY(open_carries_capability)
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    const Handle dir = attr.handle;
    {
        auto creator = connect_user(cl, 1000);
        require_rc(creator->create(dir, "f", 0600, true, {}, attr), 0, "create 0600");
    }
    const Handle h = attr.handle;
    auto alice = connect_user(cl, 1000, 0xA11CE0002);
    const std::uint64_t before = capability_requests(*root);
    require_rc(alice->open(h, client::Client::open_read | client::Client::open_write, attr), 0,
               "open for reading and writing");
    const std::vector<std::byte> data = test::pattern(std::size_t{2} * chunk, 16);
    require_rc(alice->write(h, 0, data), static_cast<std::int64_t>(data.size()), "write");
    std::vector<std::byte> back(data.size());
    require_rc(alice->read(h, 0, back), static_cast<std::int64_t>(back.size()), "read");
    require(back == data, "read back: bytes differ");
    const std::uint64_t after = capability_requests(*root);
    require(after == before, "the opener asked for " + std::to_string(after - before) +
                                 " capabilities after its open");
    // The answers themselves, asked raw: alice's has both rights, bob's
    // (no permission on the 0600 file) none.
    RawClient meta(cl.files, "meta0");
    meta.wants_capability = true;
    for (const std::uint32_t uid : {1000U, 1001U}) {
        meta.cred.uid = uid;
        meta.cred.gid = uid;
        const Call c = meta.call(proto::OpenRequest{
            h, 0xB0B0000 + uid, client::Client::open_read | client::Client::open_write, 1, false});
        require_status(c, 0, "a raw open as uid " + std::to_string(uid));
        const auto &open = std::get<proto::OpenResponse>(c.response.body);
        if (uid == 1000)
            require(open.cap && open.cap->handle == h &&
                        open.cap->rights == (proto::cap_read | proto::cap_write) &&
                        proto::capability_signed(proto::capability_key(meta.key()), *open.cap),
                    "the owner's open: no capability with both rights");
        else
            require(!open.cap, "an open without the permission got a capability");
    }
}

// The metadata server restarts while a client holds capabilities (its
// open's and a create's): they stay good at the data servers (the
// capability key comes from the cluster key, not from the process), the
// client goes on reading and writing through its open, and a new client
// gets new ones.
ATF_TEST_CASE_WITHOUT_HEAD(meta_restart_keeps_capabilities);
ATF_TEST_CASE_BODY(meta_restart_keeps_capabilities)
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    const Handle dir = attr.handle;
    auto alice = connect_user(cl, 1000, 0xA11CE0003);
    require_rc(alice->create(dir, "f", 0600, true, {}, attr), 0, "create 0600");
    const Handle h = attr.handle;
    require_rc(alice->open(h, client::Client::open_read | client::Client::open_write, attr), 0,
               "open");
    const std::vector<std::byte> a = test::pattern(std::size_t{3} * chunk, 20);
    require_rc(alice->write(h, 0, a), static_cast<std::int64_t>(a.size()), "write before");
    cl.start("meta0");
    const std::vector<std::byte> b = test::pattern(std::size_t{2} * chunk, 21);
    require_rc(alice->write(h, a.size(), b), static_cast<std::int64_t>(b.size()),
               "write after the metadata server's restart");
    std::vector<std::byte> back(a.size() + b.size());
    require_rc(alice->read(h, 0, back), static_cast<std::int64_t>(back.size()), "read after");
    require(
        std::equal(a.begin(), a.end(), back.begin()) &&
            std::equal(b.begin(), b.end(), back.begin() + static_cast<std::ptrdiff_t>(a.size())),
        "the file's bytes changed across the restart");
    auto alice2 = connect_user(cl, 1000);
    std::vector<std::byte> again(a.size());
    require_rc(alice2->read(h, 0, again), static_cast<std::int64_t>(again.size()),
               "a new client reads after the restart");
    require(again == a, "a new client read other bytes");
    auto bob = connect_user(cl, 1001);
    require_rc(bob->read(h, 0, again), -EACCES, "bob after the restart");
}

// A data server killed (SIGKILL) while a client writes with a capability
// and started again: what was written and fsynced before is there, and
// the same client, with the capability it holds, writes and reads again
// (a data server keeps no capability state to lose).
//
// It found a bug of BMI's io_uring engine: the client reconnected in the
// writer thread, whose poll of the new connection the kernel cancelled
// when that thread ended, and the engine did not arm it again, so the
// next read was never answered (tcp_engine_test:
// watched_across_thread_exit).  The _epoll case runs it with epoll.
namespace {

void data_server_killed_mid_capability_write_body()
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    auto alice = connect_user(cl, 1000, 0xA11CE0004);
    require_rc(alice->create(attr.handle, "f", 0600, true, {}, attr), 0, "create 0600");
    const Handle h = attr.handle;
    const std::vector<std::byte> a = test::pattern(std::size_t{4} * chunk, 22);
    require_rc(alice->write(h, 0, a), static_cast<std::int64_t>(a.size()), "write");
    require_rc(alice->fsync(h), 0, "fsync");
    const std::vector<std::byte> big = test::pattern(std::size_t{16} << 20U, 23);
    std::atomic<bool> started{false};
    std::int64_t during = 0;
    std::thread writer([&] {
        started = true;
        during = alice->write(h, a.size(), big);
    });
    while (!started)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    require(cl.servers.at("data0")->stop(SIGKILL) == 128 + SIGKILL, "data0 was not killed");
    cl.start("data0");
    writer.join();
    std::printf("the write across the kill: %lld\n", static_cast<long long>(during));
    require(during == static_cast<std::int64_t>(big.size()) || during < 0,
            "a short write across the kill: " + std::to_string(during));
    std::vector<std::byte> back(a.size());
    require_rc(alice->read(h, 0, back), static_cast<std::int64_t>(back.size()), "read after");
    require(back == a, "the fsynced bytes changed across the kill");
    const std::vector<std::byte> c = test::pattern(std::size_t{2} * chunk, 24);
    require_rc(alice->write(h, 0, c), static_cast<std::int64_t>(c.size()), "write after");
    require_rc(alice->read(h, 0, back), static_cast<std::int64_t>(back.size()), "read again");
    require(std::equal(c.begin(), c.end(), back.begin()),
            "the write after the restart is not there");
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(data_server_killed_mid_capability_write);
ATF_TEST_CASE_BODY(data_server_killed_mid_capability_write)
{
    data_server_killed_mid_capability_write_body();
}

ATF_TEST_CASE_WITHOUT_HEAD(data_server_killed_mid_capability_write_epoll);
ATF_TEST_CASE_BODY(data_server_killed_mid_capability_write_epoll)
{
    // Before any BMI of this process (the case's own) and the servers start.
    ::setenv("BMI_TCP_ENGINE", "epoll", 1); // NOLINT(concurrency-mt-unsafe): one thread yet
    data_server_killed_mid_capability_write_body();
}

// A create that finds someone else's file (not exclusive) and opens it
// holds it as an OPEN would: its hold has only the rights the finder's
// permission gives, so it cannot write the file through it.
ATF_TEST_CASE_WITHOUT_HEAD(found_file_open_grants_nothing);
ATF_TEST_CASE_BODY(found_file_open_grants_nothing)
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    auto alice = connect_user(cl, 1000);
    auto bob = connect_user(cl, 1001);
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    const Handle dir = attr.handle;
    require_rc(alice->create(dir, "mine", 0644, true, {}, attr), 0, "create 0644");
    const Handle h = attr.handle;
    require_rc(alice->write(h, 0, test::pattern(100, 14)), 100, "alice writes");
    bool created = true;
    require_rc(bob->create_open(dir, "mine", 0666, false, {},
                                client::Client::open_read | client::Client::open_write, attr,
                                &created),
               0, "bob's non-exclusive create-open of alice's file");
    require(!created && attr.handle == h, "bob's create made a file");
    require_rc(bob->write(h, 0, test::pattern(10, 15)), -EACCES, "bob writes through the hold");
    std::vector<std::byte> back(100);
    require_rc(bob->read(h, 0, back), 100, "bob reads (0644)");
    require(back == test::pattern(100, 14), "alice's data changed");
}

// Destroy is granted only for a handle whose file is gone: never for a
// live file or one held open after its unlink, never for a handle not
// issued yet (except to root: pvfs-fsck's garbage).
ATF_TEST_CASE_WITHOUT_HEAD(destroy_only_when_gone);
ATF_TEST_CASE_BODY(destroy_only_when_gone)
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    auto alice = connect_user(cl, 1000);
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    const Handle dir = attr.handle;
    require_rc(alice->create(dir, "live", 0644, true, {}, attr), 0, "create live");
    const Handle live = attr.handle;
    require_rc(alice->write(live, 0, test::pattern(100, 12)), 100, "write live");
    require_rc(alice->create(dir, "held", 0644, true, {}, attr), 0, "create held");
    const Handle held = attr.handle;
    require_rc(alice->create(dir, "gone", 0644, true, {}, attr), 0, "create gone");
    const Handle gone = attr.handle;

    RawClient meta(cl.files, "meta0");
    meta.cred.uid = 1000;
    meta.cred.gid = 1000;
    const auto destroy = [&](Handle h) {
        return meta.call(proto::CapabilityRequest{h, proto::cap_destroy, 0});
    };
    require_status(destroy(live), EACCES, "destroy of a live file");
    // A remove_object with a forged destroy is refused too (the test's
    // key is the cluster key, which signs; a client key could not).
    RawClient raw(cl.files, "data0");
    raw.capabilities = false;
    require_status(raw.call(proto::RemoveObjectRequest{live}), EACCES, "remove_object, none");

    auto holder = connect_user(cl, 1000);
    require_rc(holder->open(held, client::Client::open_read, attr), 0, "hold it open");
    require_rc(alice->unlink(dir, "held"), 0, "unlink held");
    require_status(destroy(held), EACCES, "destroy of a file held open after its unlink");
    require_rc(alice->unlink(dir, "gone"), 0, "unlink gone");
    require_status(destroy(gone), 0, "destroy of a gone file");
    const Handle unissued = make_handle(0, 1'000'000);
    require_status(destroy(unissued), ESTALE, "destroy of a handle not issued yet");
    meta.cred.uid = 0;
    meta.cred.gid = 0;
    require_status(destroy(unissued), 0, "destroy of a handle not issued yet, by root");
    // The live file's data is intact.
    std::vector<std::byte> back(100);
    require_rc(alice->read(live, 0, back), 100, "read live");
    require(back == test::pattern(100, 12), "the live file's data changed");
}

// require_capabilities = false: a data request without one is served (a
// cluster whose clients are not all upgraded), a bad one still refused.
ATF_TEST_CASE_WITHOUT_HEAD(not_required);
ATF_TEST_CASE_BODY(not_required)
{
    test::Cluster cl = make_cluster("require_capabilities = false\n");
    RawClient raw(cl.files, "data0");
    const Handle h = make_handle(0, 80);
    raw.capabilities = false;
    require_status(
        raw.call(proto::WriteRequest{h, {{0, 100}}, chunk, 0, test::pattern(100, 13), {}, {}}), 0,
        "write without a capability");
    raw.capabilities = true;
    raw.cap_hook = [](proto::Capability &c) { c.tag[0] ^= std::byte{1}; };
    require_status(raw.call(proto::TruncateObjectRequest{h, 0}), EACCES, "a forged one");
}

// A client of `uid` with client::Options::capabilities = false (pvfs-bench
// --insecure-no-capabilities), leaving data access to the servers.
std::unique_ptr<client::Client> connect_without_capabilities(const test::Cluster &cl,
                                                             std::uint32_t uid)
{
    client::Options o = test::fresh_attrs();
    o.credentials.uid = uid;
    o.credentials.gid = uid;
    o.check_data_access = false;
    o.capabilities = false;
    return cl.connect(o);
}

int truncate_to(client::Client &c, Handle h, std::uint64_t size)
{
    client::SetAttr change;
    change.truncate = true;
    change.size = size;
    Attr out;
    return c.setattr(h, change, out);
}

// Bulk and inline writes, a read back, fsync, truncate and unlink: every
// data op a capability-less client would send without one.
void data_ops_work(client::Client &c, Handle dir, const std::string &what)
{
    Attr attr;
    require_rc(c.create(dir, "f", 0600, true, {}, attr), 0, what + ": create");
    const Handle h = attr.handle;
    const std::vector<std::byte> data = test::pattern(3 * std::size_t{chunk} + 100, 20);
    require_rc(c.write(h, 0, data), static_cast<std::int64_t>(data.size()), what + ": write");
    require_rc(c.write(h, 0, test::pattern(100, 20)), 100, what + ": inline write");
    std::vector<std::byte> back(data.size());
    require_rc(c.read(h, 0, back), static_cast<std::int64_t>(data.size()), what + ": read");
    require(back == data, what + ": read back other bytes");
    require_rc(c.fsync(h), 0, what + ": fsync");
    require_rc(truncate_to(c, h, 10), 0, what + ": truncate");
    require_rc(c.unlink(dir, "f"), 0, what + ": unlink");
}

// Options::capabilities = false on a cluster not marked
// insecure_benchmark_only: ignored.  The client still asks for and sends
// capabilities, so its I/O works where they are required, and the
// metadata server's permission check still stands between another uid and
// a 0600 file.
ATF_TEST_CASE_WITHOUT_HEAD(benchmark_option_ignored);
ATF_TEST_CASE_BODY(benchmark_option_ignored)
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    const Handle dir = attr.handle;
    auto alice = connect_without_capabilities(cl, 1000);
    data_ops_work(*alice, dir, "require_capabilities = true, no insecure_benchmark_only");
    require_rc(alice->create(dir, "secret", 0600, true, {}, attr), 0, "create 0600");
    require_rc(alice->write(attr.handle, 0, test::pattern(100, 21)), 100, "alice writes");
    auto bob = connect_without_capabilities(cl, 1001);
    std::vector<std::byte> back(100);
    require_rc(bob->read(attr.handle, 0, back), -EACCES,
               "bob reads alice's 0600 file (no capability granted)");
}

// With insecure_benchmark_only the option is honoured: no capability goes
// on a data request, so data servers that require them refuse every one
// (EACCES), while the same uid's client with capabilities is served.
ATF_TEST_CASE_WITHOUT_HEAD(benchmark_option_sends_none);
ATF_TEST_CASE_BODY(benchmark_option_sends_none)
{
    {
        test::Cluster cl = make_cluster("insecure_benchmark_only = true\n");
        auto root = cl.connect();
        Attr attr;
        require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
        const Handle dir = attr.handle;
        auto with = connect_user(cl, 1000);
        data_ops_work(*with, dir, "insecure_benchmark_only, with capabilities");
        auto without = connect_without_capabilities(cl, 1000);
        require_rc(with->create(dir, "g", 0600, true, {}, attr), 0, "create g");
        require_rc(with->write(attr.handle, 0, test::pattern(100, 24)), 100, "write g");
        require_rc(without->write(attr.handle, 0, test::pattern(3 * std::size_t{chunk}, 22)),
                   -EACCES, "bulk write without capabilities where they are required");
        require_rc(without->write(attr.handle, 0, test::pattern(100, 22)), -EACCES,
                   "inline write without capabilities where they are required");
        std::vector<std::byte> back(100);
        require_rc(without->read(attr.handle, 0, back), -EACCES,
                   "read without capabilities where they are required");
        require_rc(truncate_to(*without, attr.handle, 0), -EACCES,
                   "truncate without capabilities where they are required");
    }
}

// ... and data servers that do not require them (require_capabilities =
// false, the bench/fs caps cluster) serve them all.  The metadata server
// is not asked either, so nothing but the client's own check (skipped
// here, as pvfsd skips it) stands between bob and alice's 0600 file:
// benchmarks only.
ATF_TEST_CASE_WITHOUT_HEAD(benchmark_option_honoured);
ATF_TEST_CASE_BODY(benchmark_option_honoured)
{
    test::Cluster cl =
        make_cluster("insecure_benchmark_only = true\nrequire_capabilities = false\n");
    auto root = cl.connect();
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    const Handle dir = attr.handle;
    auto alice = connect_without_capabilities(cl, 1000);
    data_ops_work(*alice, dir, "insecure_benchmark_only, require_capabilities = false");
    require_rc(alice->create(dir, "secret", 0600, true, {}, attr), 0, "create 0600");
    require_rc(alice->write(attr.handle, 0, test::pattern(100, 23)), 100, "alice writes");
    auto bob = connect_without_capabilities(cl, 1001);
    std::vector<std::byte> back(100);
    require_rc(bob->read(attr.handle, 0, back), 100,
               "bob reads alice's 0600 file with no capability asked for");
    require(back == test::pattern(100, 23), "bob read other bytes");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, no_capability_refused);
    ATF_ADD_TEST_CASE(tcs, wrong_capability_refused);
    ATF_ADD_TEST_CASE(tcs, permission_decides);
    ATF_ADD_TEST_CASE(tcs, creator_capability);
    ATF_ADD_TEST_CASE(tcs, found_file_open_grants_nothing);
    ATF_ADD_TEST_CASE(tcs, open_carries_capability);
    ATF_ADD_TEST_CASE(tcs, meta_restart_keeps_capabilities);
    ATF_ADD_TEST_CASE(tcs, data_server_killed_mid_capability_write);
    ATF_ADD_TEST_CASE(tcs, data_server_killed_mid_capability_write_epoll);
    ATF_ADD_TEST_CASE(tcs, destroy_only_when_gone);
    ATF_ADD_TEST_CASE(tcs, not_required);
    ATF_ADD_TEST_CASE(tcs, benchmark_option_ignored);
    ATF_ADD_TEST_CASE(tcs, benchmark_option_sends_none);
    ATF_ADD_TEST_CASE(tcs, benchmark_option_honoured);
}
