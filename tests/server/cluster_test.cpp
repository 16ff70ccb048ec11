// A real cluster on loopback (one metadata and three data servers), used
// through libpvfs: byte-exact round trips around stripe boundaries, list
// I/O, concurrent writers, the namespace operations, permissions for other
// uids, durability across a restart, and a data server killed mid-write.
#include <atf-c++.hpp>

#include <sched.h>
#include <sys/mount.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"

namespace {

namespace fs = std::filesystem;
using namespace pvfs;
using pvfs::test::require;
using pvfs::test::require_rc;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t stripe = std::uint64_t{64} * 1024U;

// One metadata and three data servers, 64 KiB stripes and bulk chunks;
// `extra` is more of the config's [defaults].
struct Cluster : test::Cluster {
    explicit Cluster(const std::string &extra = "")
        : test::Cluster(test::servers(1, 3),
                        "stripe_size = \"64KiB\"\nbulk_chunk = \"64KiB\"\n" + extra)
    {
    }
};

Attr make_file(client::Client &c, const std::string &name, const Layout &layout = {})
{
    Attr a;
    require_rc(c.create(root_handle, name, 0644, true, layout, a), 0, "create " + name);
    return a;
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(round_trips_around_stripes);
ATF_TEST_CASE_BODY(round_trips_around_stripes)
{
    Cluster cl;
    auto c = cl.connect();
    // Also sizes around the inline-data limit and BMI's default unexpected
    // message size (16 KiB): one request each, data inline or pulled.
    for (const std::uint64_t size :
         {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{16383}, std::uint64_t{16385},
          std::uint64_t{24576}, std::uint64_t{32768}, std::uint64_t{32769}, stripe - 1, stripe,
          stripe + 1, 3 * stripe + 17, 10 * stripe + 4095}) {
        const std::string name = "f" + std::to_string(size);
        const Attr a = make_file(*c, name);
        const std::vector<std::byte> data = test::pattern(size, static_cast<unsigned>(size));
        require_rc(c->write(a.handle, 0, data), static_cast<std::int64_t>(size), "write " + name);
        require_rc(c->fsync(a.handle), 0, "fsync " + name);
        // A fresh client: nothing cached.
        auto d = cl.connect();
        Attr back;
        require_rc(d->lookup(root_handle, name, back), 0, "lookup " + name);
        require_rc(static_cast<std::int64_t>(back.size), static_cast<std::int64_t>(size),
                   "size of " + name);
        std::vector<std::byte> got(size + 100);
        require_rc(d->read(back.handle, 0, got), static_cast<std::int64_t>(size), "read " + name);
        got.resize(size);
        require(got == data, name + ": bytes differ");
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(striping_and_holes);
ATF_TEST_CASE_BODY(striping_and_holes)
{
    Cluster cl;
    auto c = cl.connect();
    // Two data servers from the second: the bytes land on data1 and data2.
    const Attr a = make_file(*c, "striped", Layout{static_cast<std::uint32_t>(stripe), 2, 1});
    require(a.layout.stripe_count == 2 && a.layout.first_server == 1, "layout not as asked");
    const std::vector<std::byte> tail = test::pattern(1000, 5);
    require_rc(c->write(a.handle, 5 * stripe, tail), 1000, "write at 5 stripes");
    Attr st;
    require_rc(c->getattr(a.handle, st), 0, "getattr");
    require_rc(static_cast<std::int64_t>(st.size), static_cast<std::int64_t>(5 * stripe + 1000),
               "size with a hole");
    std::vector<std::byte> all(5 * stripe + 1000, std::byte{0x55});
    require_rc(c->read(a.handle, 0, all), static_cast<std::int64_t>(all.size()), "read all");
    for (std::size_t i = 0; i < 5 * stripe; ++i)
        require(all[i] == std::byte{0}, "the hole is not zeros at " + std::to_string(i));
    require(std::equal(tail.begin(), tail.end(), all.begin() + 5 * stripe), "tail differs");
    // Stripe 5 is slot 1, on data server 2: data0 holds nothing.
    const fs::path data0 = cl.files.dir / "data0" / "objects";
    std::size_t objects = 0;
    for (const auto &e : fs::recursive_directory_iterator(data0))
        objects += e.is_regular_file() ? 1 : 0;
    require(objects == 0, "data0 holds an object of a file not striped over it");
    // Truncate down then up: the cut bytes read as zeros.
    client::SetAttr t;
    t.truncate = true;
    t.size = 5 * stripe + 10;
    Attr after;
    require_rc(c->setattr(a.handle, t, after), 0, "truncate down");
    require_rc(static_cast<std::int64_t>(after.size), static_cast<std::int64_t>(t.size),
               "size after truncate");
    t.size = 5 * stripe + 1000;
    require_rc(c->setattr(a.handle, t, after), 0, "truncate up");
    std::vector<std::byte> again(1000);
    require_rc(c->read(a.handle, 5 * stripe, again), 1000, "read after truncates");
    require(std::equal(tail.begin(), tail.begin() + 10, again.begin()), "kept bytes differ");
    for (std::size_t i = 10; i < 1000; ++i)
        require(again[i] == std::byte{0}, "truncated bytes came back");
}

ATF_TEST_CASE_WITHOUT_HEAD(list_io);
ATF_TEST_CASE_BODY(list_io)
{
    Cluster cl;
    auto c = cl.connect();
    const Attr a = make_file(*c, "list");
    // 300 regions, scattered over stripes, out of order.
    std::vector<client::Region> regions;
    std::uint64_t total = 0;
    for (std::uint64_t i = 0; i < 300; ++i) {
        const std::uint64_t off = ((i * 7919) % 300) * 10000 + (i % 13);
        regions.push_back({off, 100 + (i * 37) % 900});
        total += regions.back().length;
    }
    const std::vector<std::byte> memory = test::pattern(total, 11);
    require_rc(c->write_list(a.handle, regions, memory), static_cast<std::int64_t>(total),
               "write_list");
    std::vector<std::byte> back(total);
    require_rc(c->read_list(a.handle, regions, back), static_cast<std::int64_t>(total),
               "read_list");
    require(back == memory, "list I/O bytes differ");
    // And each region through plain reads.
    std::size_t pos = 0;
    for (const client::Region &r : regions) {
        std::vector<std::byte> one(r.length);
        require_rc(c->read(a.handle, r.offset, one), static_cast<std::int64_t>(r.length),
                   "read region");
        require(std::equal(one.begin(), one.end(), memory.begin() + static_cast<long>(pos)),
                "region at " + std::to_string(r.offset) + " differs");
        pos += r.length;
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(concurrent_writers);
ATF_TEST_CASE_BODY(concurrent_writers)
{
    Cluster cl;
    const Attr a = make_file(*cl.connect(), "shared");
    // Four clients write interleaved 10000-byte blocks of one file at once.
    constexpr unsigned writers = 4;
    constexpr unsigned blocks = 64;
    constexpr std::size_t block = 10000;
    std::vector<std::thread> threads;
    std::vector<int> results(writers, 0);
    for (unsigned w = 0; w < writers; ++w) {
        threads.emplace_back([&, w] {
            auto c = cl.connect();
            for (unsigned b = w; b < blocks; b += writers) {
                const auto data = test::pattern(block, b);
                if (c->write(a.handle, std::uint64_t{b} * block, data) !=
                    static_cast<std::int64_t>(block)) {
                    results[w] = -1;
                    return;
                }
            }
            results[w] = c->fsync(a.handle);
        });
    }
    for (auto &t : threads)
        t.join();
    for (unsigned w = 0; w < writers; ++w)
        require_rc(results[w], 0, "writer " + std::to_string(w));
    auto c = cl.connect();
    std::vector<std::byte> all(std::size_t{blocks} * block);
    require_rc(c->read(a.handle, 0, all), static_cast<std::int64_t>(all.size()), "read all");
    for (unsigned b = 0; b < blocks; ++b) {
        const auto want = test::pattern(block, b);
        require(std::equal(want.begin(), want.end(), all.begin() + static_cast<long>(b * block)),
                "block " + std::to_string(b) + " differs");
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(namespace_operations);
ATF_TEST_CASE_BODY(namespace_operations)
{
    Cluster cl;
    auto c = cl.connect();
    Attr dir;
    require_rc(c->mkdir(root_handle, "dir", 0755, dir), 0, "mkdir");
    Attr f;
    require_rc(c->create(dir.handle, "file", 0644, true, {}, f), 0, "create");
    require_rc(c->create(dir.handle, "file", 0644, true, {}, f), -EEXIST, "exclusive create");
    const auto data = test::pattern(200000, 3);
    require_rc(c->write(f.handle, 0, data), 200000, "write");
    ATF_REQUIRE_EQ(f.size, 0U);
    // Opening an existing file with O_CREAT (not exclusive) gives its real
    // size (a new file's size is known to be 0 without asking the data servers).
    Attr again;
    bool created = true;
    require_rc(c->create(dir.handle, "file", 0644, false, {}, again, &created), 0, "create again");
    ATF_REQUIRE(!created);
    ATF_REQUIRE_EQ(again.handle, f.handle);
    ATF_REQUIRE_EQ(again.size, 200000U);
    // A hard link, a rename, a symlink, and paths through them.
    Attr linked;
    require_rc(c->link(f.handle, root_handle, "hard", linked), 0, "link");
    require_rc(linked.nlink, 2, "nlink after link");
    require_rc(c->rename(dir.handle, "file", dir.handle, "moved"), 0, "rename");
    Attr sl;
    require_rc(c->symlink(root_handle, "sym", "dir/moved", sl), 0, "symlink");
    Attr via;
    require_rc(c->resolve("/sym", via), 0, "resolve through the symlink");
    require(via.handle == f.handle && via.size == 200000, "the symlink leads elsewhere");
    require_rc(c->resolve("/dir/../dir/./moved", via), 0, "resolve with . and ..");
    Attr loop;
    require_rc(c->symlink(root_handle, "loop", "/loop", loop), 0, "symlink loop");
    require_rc(c->resolve("/loop", via), -ELOOP, "a symlink loop");
    require_rc(c->rmdir(root_handle, "dir"), -ENOTEMPTY, "rmdir of a full directory");
    // Remove both links: the data objects go with the last one.
    require_rc(c->unlink(dir.handle, "moved"), 0, "unlink one link");
    require_rc(c->resolve("/hard", via), 0, "the other link remains");
    require_rc(static_cast<std::int64_t>(via.size), 200000, "its data remains");
    require_rc(c->unlink(root_handle, "hard"), 0, "unlink the last link");
    std::size_t objects = 0;
    for (const char *d : {"data0", "data1", "data2"}) {
        for (const auto &e : fs::recursive_directory_iterator(cl.files.dir / d / "objects"))
            objects += e.is_regular_file() ? 1 : 0;
    }
    require(objects == 0, std::to_string(objects) + " data objects left after the last unlink");
    require_rc(c->rmdir(root_handle, "dir"), 0, "rmdir of the empty directory");

    // A deep tree and a directory of 10,000 entries, read in pages.
    Handle parent = root_handle;
    for (int depth = 0; depth < 40; ++depth) {
        Attr d;
        require_rc(c->mkdir(parent, "d" + std::to_string(depth), 0755, d), 0, "deep mkdir");
        parent = d.handle;
    }
    std::string deep;
    for (int depth = 0; depth < 40; ++depth)
        deep += "/d" + std::to_string(depth);
    require_rc(c->resolve(deep, via), 0, "resolve the deep path");
    require(via.handle == parent, "deep path resolves elsewhere");
    Attr big;
    require_rc(c->mkdir(root_handle, "big", 0755, big), 0, "mkdir big");
    // Eight clients at once: the metadata server commits their creates in
    // groups (one sync for many).
    std::vector<std::thread> creators;
    creators.reserve(8);
    std::vector<int> failures(8, 0);
    for (int t = 0; t < 8; ++t) {
        creators.emplace_back([&, t] {
            auto own = cl.connect();
            for (int i = t; i < 10000; i += 8) {
                Attr e;
                if (own->create(big.handle, "entry" + std::to_string(i), 0644, true, {}, e) != 0)
                    ++failures[static_cast<std::size_t>(t)];
            }
        });
    }
    for (auto &t : creators)
        t.join();
    for (const int failed : failures)
        require(failed == 0, std::to_string(failed) + " creates failed");
    std::vector<bool> seen(10000, false);
    std::uint64_t cookie = 0;
    bool eof = false;
    std::size_t count = 0;
    while (!eof) {
        std::vector<client::DirEntry> page;
        require_rc(c->readdir(big.handle, cookie, 700, page, eof), 0, "readdir page");
        for (const client::DirEntry &e : page) {
            const int i = std::stoi(e.name.substr(5));
            require(!seen[static_cast<std::size_t>(i)], "entry listed twice: " + e.name);
            seen[static_cast<std::size_t>(i)] = true;
            cookie = e.cookie;
            ++count;
        }
    }
    require(count == 10000, "readdir listed " + std::to_string(count) + " of 10000 entries");
}

ATF_TEST_CASE_WITHOUT_HEAD(permissions_for_other_uids);
ATF_TEST_CASE_BODY(permissions_for_other_uids)
{
    Cluster cl;
    auto root = cl.connect();
    Attr shared;
    require_rc(root->mkdir(root_handle, "shared", 0777, shared), 0, "mkdir shared");
    Attr priv;
    require_rc(root->mkdir(root_handle, "private", 0700, priv), 0, "mkdir private");
    auto alice = cl.connect(1000, 1000);
    auto bob = cl.connect(1001, 1001);
    Attr a;
    require_rc(alice->create(priv.handle, "x", 0644, true, {}, a), -EACCES,
               "alice creates in root's private directory");
    require_rc(alice->create(root_handle, "x", 0644, true, {}, a), -EACCES,
               "alice creates in the root directory (0755)");
    require_rc(alice->create(shared.handle, "mine", 0600, true, {}, a), 0, "alice creates");
    require(a.uid == 1000 && a.gid == 1000, "the new file is not alice's");
    require_rc(alice->write(a.handle, 0, test::pattern(10, 1)), 10, "alice writes her file");
    require_rc(alice->fsync(a.handle), 0, "alice syncs her file");
    Attr b;
    require_rc(bob->lookup(shared.handle, "mine", b), 0, "bob looks it up");
    client::SetAttr chmod;
    chmod.mask = client::set_mode;
    chmod.mode = 0666;
    require_rc(bob->setattr(b.handle, chmod, b), -EPERM, "bob chmods alice's file");
    require_rc(alice->setattr(a.handle, chmod, a), 0, "alice chmods her file");
    require(a.mode == 0666, "mode not changed");
    client::SetAttr chown;
    chown.mask = client::set_uid;
    chown.uid = 1001;
    require_rc(alice->setattr(a.handle, chown, a), -EPERM, "alice gives her file away");
    require_rc(root->setattr(a.handle, chown, a), 0, "root chowns");
    require(a.uid == 1001, "owner not changed");
}

ATF_TEST_CASE_WITHOUT_HEAD(restart_keeps_synced_data);
ATF_TEST_CASE_BODY(restart_keeps_synced_data)
{
    Cluster cl;
    const auto data = test::pattern(1000000, 21);
    Handle h = 0;
    {
        auto c = cl.connect();
        const Attr a = make_file(*c, "durable");
        h = a.handle;
        require_rc(c->write(a.handle, 0, data), 1000000, "write");
        require_rc(c->fsync(a.handle), 0, "fsync");
    }
    // Every server dies without warning and comes back.
    for (const char *name : {"meta0", "data0", "data1", "data2"}) {
        cl.servers.at(name)->stop(SIGKILL);
        cl.start(name);
    }
    auto c = cl.connect();
    Attr a;
    require_rc(c->lookup(root_handle, "durable", a), 0, "lookup after restart");
    require(a.handle == h, "another handle after restart");
    std::vector<std::byte> back(data.size());
    require_rc(c->read(a.handle, 0, back), 1000000, "read after restart");
    require(back == data, "bytes differ after restart");
}

ATF_TEST_CASE(data_server_killed_mid_write);
ATF_TEST_CASE_HEAD(data_server_killed_mid_write)
{
    set_md_var("timeout", "120");
}
ATF_TEST_CASE_BODY(data_server_killed_mid_write)
{
    // BMI gives up on a silent peer after 5 s here, requests after 10 s.
    Cluster cl("idle_timeout = \"5s\"\nrequest_timeout = \"10s\"\n");
    auto c = cl.connect();
    const Attr a = make_file(*c, "victim");
    // Writes 32 MiB at a time until one fails; data1 dies after the first.
    const auto data = test::pattern(std::size_t{32} << 20U, 4);
    std::atomic<int> writes{0};
    std::int64_t result = 0;
    Clock::time_point killed;
    Clock::time_point ended;
    std::thread writer([&] {
        for (std::uint64_t off = 0;; off += data.size()) {
            result = c->write(a.handle, off, data);
            if (result < 0 || ++writes > 1000)
                break;
        }
        ended = Clock::now();
    });
    while (writes.load() == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    killed = Clock::now();
    cl.servers.at("data1")->stop(SIGKILL);
    writer.join();
    const double secs = std::chrono::duration<double>(ended - killed).count();
    require(result < 0, "the writes went on although data1 died");
    require(secs < 20.0, "the error took " + std::to_string(secs) + " s");
    // The rest of the cluster still answers.
    Attr root;
    require_rc(c->getattr(root_handle, root), 0, "getattr after the failure");
}

ATF_TEST_CASE(full_storage_reports_enospc);
ATF_TEST_CASE_HEAD(full_storage_reports_enospc)
{
    set_md_var("require.user", "root");
}
ATF_TEST_CASE_BODY(full_storage_reports_enospc)
{
    // The data servers' storage on a 4 MiB tmpfs, in a mount namespace of
    // this test (the servers inherit it).
    if (::unshare(CLONE_NEWNS) != 0)
        ATF_SKIP(std::string("unshare: ") + std::strerror(errno)); // NOLINT(concurrency-mt-unsafe)
    require(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, "make / private");
    const fs::path dir = fs::current_path() / "cluster";
    fs::create_directories(dir);
    for (const char *d : {"data0", "data1", "data2"}) {
        fs::create_directories(dir / d);
        require(::mount("tmpfs", (dir / d).c_str(), "tmpfs", 0, "size=4m") == 0, "mount tmpfs");
    }
    Cluster cl;
    auto c = cl.connect();
    const Attr a = make_file(*c, "big");
    const auto data = test::pattern(std::size_t{32} << 20U, 8);
    const std::int64_t rc = c->write(a.handle, 0, data);
    require_rc(rc, -ENOSPC, "writing 32 MiB into 3 x 4 MiB");
}

namespace {

std::string xattr_text(client::Client &c, Handle h, const std::string &name)
{
    std::vector<std::byte> value;
    require_rc(c.xattr_get(h, name, value), 0, "getxattr " + name);
    return {reinterpret_cast<const char *>(value.data()), value.size()};
}

int set_xattr_text(client::Client &c, Handle h, const std::string &name, const std::string &text,
                   std::uint32_t flags = 0)
{
    return c.xattr_set(h, name, std::as_bytes(std::span(text.data(), text.size())), flags);
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(layout_as_xattr);
ATF_TEST_CASE_BODY(layout_as_xattr)
{
    Cluster cl;
    auto c = cl.connect();
    Attr dir;
    require_rc(c->mkdir(root_handle, "striped", 0755, dir), 0, "mkdir");
    ATF_REQUIRE_EQ(xattr_text(*c, dir.handle, "pvfs.layout"),
                   "stripe_size=65536 stripe_count=3 first_server=0");
    // Setting a directory's layout: what its new files get.
    require_rc(set_xattr_text(*c, dir.handle, "pvfs.layout", "stripe_count=2,first_server=1"), 0,
               "setxattr on the directory");
    Attr f;
    require_rc(c->create(dir.handle, "f", 0644, true, {}, f), 0, "create");
    ATF_REQUIRE_EQ(xattr_text(*c, f.handle, "pvfs.layout"),
                   "stripe_size=65536 stripe_count=2 first_server=1");
    // An empty file's layout can change; one with data cannot.
    require_rc(set_xattr_text(*c, f.handle, "pvfs.layout", "stripe_size=128KiB"), 0,
               "setxattr on an empty file");
    Layout l;
    require_rc(c->layout_get(f.handle, l), 0, "layout_get");
    ATF_REQUIRE(l == (Layout{128U << 10U, 2, 1}));
    const auto data = test::pattern(300000, 5);
    require_rc(c->write(f.handle, 0, data), 300000, "write");
    require_rc(set_xattr_text(*c, f.handle, "pvfs.layout", "stripe_count=1"), -EBUSY,
               "setxattr on a file with data");
    // Listed; not removable; bad text and XATTR_CREATE refused.
    std::vector<std::string> names;
    require_rc(c->xattr_list(f.handle, names), 0, "listxattr");
    ATF_REQUIRE(std::find(names.begin(), names.end(), "pvfs.layout") != names.end());
    require_rc(c->xattr_remove(f.handle, "pvfs.layout"), -EPERM, "removexattr");
    require_rc(set_xattr_text(*c, dir.handle, "pvfs.layout", "stripe_count=lots"), -EINVAL,
               "setxattr with bad text");
    require_rc(set_xattr_text(*c, dir.handle, "pvfs.layout", "stripe_count=9"), -EINVAL,
               "setxattr with more servers than the cluster has");
    require_rc(set_xattr_text(*c, dir.handle, "pvfs.layout", "stripe_count=1", XATTR_CREATE),
               -EEXIST, "setxattr XATTR_CREATE");
    // The data is where the layout says and reads back.
    std::vector<std::byte> back(data.size());
    require_rc(c->read(f.handle, 0, back), 300000, "read");
    ATF_REQUIRE(back == data);
    // Symlinks have no layout.
    Attr sl;
    require_rc(c->symlink(root_handle, "sl", "striped", sl), 0, "symlink");
    std::vector<std::byte> value;
    require_rc(c->xattr_get(sl.handle, "pvfs.layout", value), -ENODATA, "getxattr on a symlink");
}

// A layout the cluster cannot hold (more data servers than it has, a first
// server past the last) is refused by the client before it asks, and by
// the metadata server from a client that asks anyway: no file is made
// that every client would then find unreadable.
ATF_TEST_CASE_WITHOUT_HEAD(layout_beyond_the_cluster);
ATF_TEST_CASE_BODY(layout_beyond_the_cluster)
{
    Cluster cl;
    auto c = cl.connect();
    const auto stripe32 = static_cast<std::uint32_t>(stripe);
    Attr f;
    for (const Layout &bad : {Layout{stripe32, 4, 0}, Layout{stripe32, 1, 3}}) {
        require_rc(c->create(root_handle, "wide", 0644, true, bad, f), -EINVAL,
                   "create with a layout beyond the cluster");
        require_rc(c->lookup(root_handle, "wide", f), -ENOENT, "the refused create made a name");
        test::RawClient raw(cl.files, "meta0");
        const test::Call made =
            raw.call(proto::CreateRequest{root_handle, "wide", 0644, true, bad, std::nullopt});
        require(made.answered && made.response.status == EINVAL,
                "the metadata server took a layout beyond the cluster: " + made.error + " status " +
                    std::to_string(made.response.status));
        require_rc(c->lookup(root_handle, "wide", f), -ENOENT,
                   "the refused raw create made a name");
        require_rc(c->create(root_handle, "narrow", 0644, false, {}, f), 0, "create");
        const test::Call set = raw.call(proto::LayoutSetRequest{f.handle, bad});
        require(set.answered && set.response.status == EINVAL,
                "the metadata server set a layout beyond the cluster: " + set.error);
        Layout l;
        require_rc(c->layout_get(f.handle, l), 0, "layout_get");
        require(l.stripe_count <= 3 && l.first_server < 3, "the file's layout changed");
    }
    // The widest the cluster holds is fine.
    require_rc(c->create(root_handle, "widest", 0644, true, Layout{stripe32, 3, 2}, f), 0,
               "create over every data server");
    const auto data = test::pattern(3 * stripe + 7, 11);
    require_rc(c->write(f.handle, 0, data), static_cast<std::int64_t>(data.size()), "write");
}

// Today's layouts place a file's stripes by position in the config's data
// server list, so a metadata server refuses to start when that list grew,
// shrank or was reordered (docs/metadata.md "The data server list"),
// saying why in its log; with the old list back the files read exact.
ATF_TEST_CASE_WITHOUT_HEAD(changed_data_server_list_refused);
ATF_TEST_CASE_BODY(changed_data_server_list_refused)
{
    Cluster cl;
    const std::vector<std::byte> data = test::pattern(5 * stripe + 1000, 17);
    {
        auto c = cl.connect();
        const Attr a = make_file(*c, "striped");
        require_rc(c->write(a.handle, 0, data), static_cast<std::int64_t>(data.size()), "write");
        require_rc(c->fsync(a.handle), 0, "fsync");
    }
    require(cl.servers["meta0"]->stop(SIGTERM) == 0, "meta0 did not stop cleanly");
    std::stringstream text;
    text << std::ifstream(cl.files.config_path).rdbuf();
    const std::string original = text.str();
    std::string swapped = original;
    for (const auto &[from, to] :
         {std::pair{"data1", "swap"}, std::pair{"data2", "data1"}, std::pair{"swap", "data2"}}) {
        for (std::size_t at = swapped.find(from); at != std::string::npos;
             at = swapped.find(from, at + std::strlen(to)))
            swapped.replace(at, std::strlen(from), to);
    }
    const std::vector<std::pair<std::string, std::string>> variants{
        {"grown", original +
                      "[[server]]\nname = \"data3\"\naddresses = "
                      "[\"tcp://127.0.0.1:9\"]\nroles = [\"data\"]\nstorage = \"" +
                      (cl.files.dir / "data3").string() + "\"\n"},
        {"reordered", swapped},
    };
    for (const auto &[name, config] : variants) {
        test::ClusterFiles changed = cl.files;
        changed.config_path = (cl.files.dir / (name + ".toml")).string();
        std::ofstream(changed.config_path) << config;
        fs::remove(cl.files.dir / "meta0.log");
        std::string refusal;
        try {
            test::ServerProcess server(PVFS_SERVER_BINARY, changed, "meta0");
        } catch (const std::runtime_error &e) {
            refusal = e.what();
        }
        std::string what = name;
        what += " config: meta0 did not refuse it: ";
        what += refusal;
        require(refusal.find("exited at start") != std::string::npos &&
                    refusal.find("cannot yet be added, removed or reordered") != std::string::npos,
                what);
    }
    cl.start("meta0");
    auto c = cl.connect();
    Attr a;
    require_rc(c->lookup(root_handle, "striped", a), 0, "lookup");
    std::vector<std::byte> got(data.size());
    require_rc(c->read(a.handle, 0, got), static_cast<std::int64_t>(data.size()), "read");
    require(got == data, "the file's bytes differ after the refusals");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, round_trips_around_stripes);
    ATF_ADD_TEST_CASE(tcs, striping_and_holes);
    ATF_ADD_TEST_CASE(tcs, list_io);
    ATF_ADD_TEST_CASE(tcs, concurrent_writers);
    ATF_ADD_TEST_CASE(tcs, namespace_operations);
    ATF_ADD_TEST_CASE(tcs, permissions_for_other_uids);
    ATF_ADD_TEST_CASE(tcs, restart_keeps_synced_data);
    ATF_ADD_TEST_CASE(tcs, data_server_killed_mid_write);
    ATF_ADD_TEST_CASE(tcs, full_storage_reports_enospc);
    ATF_ADD_TEST_CASE(tcs, layout_as_xattr);
    ATF_ADD_TEST_CASE(tcs, layout_beyond_the_cluster);
    ATF_ADD_TEST_CASE(tcs, changed_data_server_list_refused);
}
