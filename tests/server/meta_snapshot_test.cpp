// pvfs-meta-dump (docs/metadata.md "Snapshots") against real servers: a
// snapshot taken while a client creates and writes files, checked, refused
// when damaged, restored into a moved-away store; after the restart every
// file the snapshot holds reads back exact, a file made after it is gone,
// and a new file never takes a lost file's id (whose objects the data
// servers still hold).
#include <atf-c++.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"
#include "pvfs/types.hpp"

namespace {

namespace fs = std::filesystem;
using namespace pvfs;
using pvfs::test::require;
using pvfs::test::require_rc;

struct ToolRun {
    int status = -1;
    std::string output;
};

// `binary` with `args`, its exit status (128 when a signal ended it) and
// what it printed.
ToolRun run_tool(const std::string &binary, const std::string &args)
{
    const std::string out = (fs::current_path() / "tool.out").string();
    const std::string cmd = binary + " " + args + " >" + out + " 2>&1";
    // NOLINTNEXTLINE(cert-env33-c,concurrency-mt-unsafe): runs the tool under test
    const int rc = std::system(cmd.c_str());
    ToolRun r;
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    std::stringstream text;
    text << std::ifstream(out).rdbuf();
    r.output = text.str();
    return r;
}

ToolRun meta_dump(const std::string &args)
{
    return run_tool(PVFS_META_DUMP_BINARY, args);
}

bool contains(const std::string &text, const std::string &part)
{
    return text.find(part) != std::string::npos;
}

std::string describe(const ToolRun &r)
{
    return "exit " + std::to_string(r.status) + ": " + r.output;
}

struct Cluster : test::Cluster {
    explicit Cluster(unsigned metadata = 1)
        : test::Cluster(test::servers(metadata, 2),
                        "stripe_size = \"64KiB\"\nrequest_timeout = \"10s\"\n", test::fresh_attrs())
    {
    }

    [[nodiscard]] fs::path store(const std::string &server = "meta0") const
    {
        return files.dir / server / "meta";
    }

    [[nodiscard]] std::string config_args(const std::string &server = "meta0") const
    {
        return "-c " + files.config_path + " -s " + server;
    }
};

// File `name` under the root with `data`, fsynced; its handle.
Handle make_file(client::Client &c, const std::string &name, const std::vector<std::byte> &data)
{
    Attr a;
    require_rc(c.create(root_handle, name, 0644, true, {}, a), 0, "create /" + name);
    require_rc(c.write(a.handle, 0, data), static_cast<std::int64_t>(data.size()),
               "write /" + name);
    require_rc(c.fsync(a.handle), 0, "fsync /" + name);
    return a.handle;
}

void require_file(client::Client &c, const std::string &name, const std::vector<std::byte> &data)
{
    Attr a;
    require_rc(c.lookup(root_handle, name, a), 0, "lookup /" + name);
    require(a.size == data.size(), "/" + name + " has size " + std::to_string(a.size));
    std::vector<std::byte> got(data.size() + 10);
    require_rc(c.read(a.handle, 0, got), static_cast<std::int64_t>(data.size()), "read /" + name);
    got.resize(data.size());
    require(got == data, "/" + name + ": bytes differ");
}

std::vector<std::byte> writer_data(int i)
{
    return test::pattern(20000 + static_cast<std::size_t>(i) * 977, static_cast<unsigned>(i));
}

// Creates w0, w1, ... (each written and fsynced before the next) until
// `stop` or 400 files; `done` counts the finished ones.
void writer(std::unique_ptr<client::Client> c, const std::atomic<bool> &stop,
            std::atomic<int> &done)
{
    for (int i = 0; i < 400 && !stop.load(); ++i) {
        make_file(*c, "w" + std::to_string(i), writer_data(i));
        done.store(i + 1);
    }
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(online_snapshot_and_restore);
ATF_TEST_CASE_BODY(online_snapshot_and_restore)
{
    Cluster cl;
    const std::string snap = (fs::current_path() / "meta0.snap").string();
    const std::vector<std::byte> kept = test::pattern(300000, 7);
    {
        auto c = cl.connect();
        make_file(*c, "kept", kept);
        Attr d;
        require_rc(c->mkdir(root_handle, "d", 0755, d), 0, "mkdir /d");
    }

    // The snapshot is taken while another client creates and writes files.
    std::atomic<bool> stop{false};
    std::atomic<int> done{0};
    std::thread busy(writer, cl.connect(), std::cref(stop), std::ref(done));
    while (done.load() < 20)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const int finished_before = done.load();
    const ToolRun dumped = meta_dump(cl.config_args() + " " + snap);
    const int started_after = done.load() + 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop.store(true);
    busy.join();
    require(dumped.status == 0 && contains(dumped.output, "wrote " + snap),
            "snapshot: " + describe(dumped));
    require(started_after < 400, "the writer ended before the snapshot did");
    require((fs::status(snap).permissions() & fs::perms::all) ==
                (fs::perms::owner_read | fs::perms::owner_write),
            "the snapshot is not mode 0600");

    const ToolRun again = meta_dump(cl.config_args() + " " + snap);
    require(again.status == 1 && contains(again.output, "exists"),
            "a second snapshot over the first: " + describe(again));
    const ToolRun verified = meta_dump("--verify --json " + snap);
    require(verified.status == 0 && contains(verified.output, "\"server_index\": 0"),
            "verify: " + describe(verified));
    const ToolRun over = meta_dump("--restore " + cl.config_args() + " " + snap);
    require(over.status == 1 && contains(over.output, "already holds a store"),
            "restore over the running server's store: " + describe(over));

    // A file made after the snapshot: its objects stay on the data servers
    // when the metadata goes back to the snapshot.
    Handle after = no_handle;
    {
        auto c = cl.connect();
        after = make_file(*c, "after", test::pattern(70000, 99));
    }
    require(cl.servers["meta0"]->stop(SIGTERM) == 0, "meta0 did not stop cleanly");
    fs::rename(cl.store(), cl.store().string() + ".lost");
    const ToolRun restored = meta_dump("--restore --json " + cl.config_args() + " " + snap);
    require(restored.status == 0 && contains(restored.output, "\"inodes\": "),
            "restore: " + describe(restored));
    require(!fs::exists(cl.store() / "data.mdb.restoring"), "a partial restore file is left");
    cl.start("meta0");

    auto c = cl.connect();
    require_file(*c, "kept", kept);
    Attr a;
    require_rc(c->lookup(root_handle, "d", a), 0, "lookup /d");
    require(a.type == ObjectType::directory, "/d is not a directory");
    for (int i = 0; i < finished_before; ++i)
        require_file(*c, "w" + std::to_string(i), writer_data(i));
    for (int i = started_after; i < 400; ++i)
        require_rc(c->lookup(root_handle, "w" + std::to_string(i), a), -ENOENT,
                   "a file begun after the snapshot");
    require_rc(c->lookup(root_handle, "after", a), -ENOENT, "lookup /after");

    // New files take ids the lost store never handed out: none of them
    // shows /after's bytes.
    for (int i = 0; i < 5; ++i) {
        Attr fresh;
        require_rc(c->create(root_handle, "new" + std::to_string(i), 0644, true, {}, fresh), 0,
                   "create a file after the restore");
        require(fresh.handle != after, "a new file took the lost file's handle");
        require(handle_id(fresh.handle) > handle_id(after), "a new file's id is not past the lost "
                                                            "store's");
        std::vector<std::byte> got(100);
        require_rc(c->read(fresh.handle, 0, got), 0, "read of a new, empty file");
    }
    const ToolRun fsck = run_tool(PVFS_FSCK_BINARY, "-c " + cl.files.config_path);
    require(!contains(fsck.output, "entry without an object"), "fsck: " + describe(fsck));
}

ATF_TEST_CASE_WITHOUT_HEAD(damaged_snapshot_refused);
ATF_TEST_CASE_BODY(damaged_snapshot_refused)
{
    Cluster cl;
    {
        auto c = cl.connect();
        make_file(*c, "f", test::pattern(5000, 3));
    }
    const fs::path good = fs::current_path() / "good.snap";
    const ToolRun dumped = meta_dump(cl.config_args() + " " + good.string());
    require(dumped.status == 0, "snapshot: " + describe(dumped));
    const auto size = fs::file_size(good);

    struct Damage {
        std::string name;
        std::uintmax_t truncate_to; // or size: not truncated
        std::uintmax_t flip_at;     // or size: nothing flipped
    };
    const std::vector<Damage> damages{
        {"half", size / 2, size},
        {"short_by_one", size - 1, size},
        {"empty", 0, size},
        {"first_page", size, 100},
        {"middle", size, size / 2},
        {"in_the_hash", size, size - 3},
        {"in_the_length", size, size - 40},
    };
    for (const Damage &d : damages) {
        const fs::path bad = fs::current_path() / (d.name + ".snap");
        fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
        if (d.truncate_to < size)
            fs::resize_file(bad, d.truncate_to);
        if (d.flip_at < size) {
            std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
            f.seekg(static_cast<std::streamoff>(d.flip_at));
            const int byte = f.get();
            f.seekp(static_cast<std::streamoff>(d.flip_at));
            f.put(static_cast<char>(byte ^ 0x10));
        }
        const ToolRun verified = meta_dump("--verify " + bad.string());
        require(verified.status == 1, d.name + ": verify " + describe(verified));
        const fs::path into = fs::current_path() / ("store-" + d.name);
        const ToolRun restored =
            meta_dump("--restore --store " + into.string() + " " + bad.string());
        require(restored.status == 1, d.name + ": restore " + describe(restored));
        require(!fs::exists(into / "data.mdb") && !fs::exists(into / "data.mdb.restoring"),
                d.name + ": a refused restore left a store");
    }
    // Not a snapshot at all: a directory, another file, nothing.
    for (const std::string &path : {fs::current_path().string(), cl.files.config_path,
                                    (fs::current_path() / "missing.snap").string()}) {
        const ToolRun verified = meta_dump("--verify " + path);
        require(verified.status == 1, path + ": verify " + describe(verified));
    }
    const ToolRun ok = meta_dump("--verify " + good.string());
    require(ok.status == 0, "the undamaged snapshot: " + describe(ok));

    // Restored by root, the store belongs to the storage's owner (the user
    // the server runs as), not to root.
    if (::geteuid() == 0) {
        const fs::path storage = fs::current_path() / "owned";
        fs::create_directory(storage);
        require(::chown(storage.c_str(), 65534, 65534) == 0, "chown the storage directory");
        const ToolRun restored =
            meta_dump("--restore --store " + (storage / "meta").string() + " " + good.string());
        require(restored.status == 0, "restore into nobody's storage: " + describe(restored));
        for (const fs::path &made : {storage / "meta", storage / "meta" / "data.mdb"}) {
            struct stat st {};
            require(::stat(made.c_str(), &st) == 0 && st.st_uid == 65534 && st.st_gid == 65534,
                    made.string() + " is not owned by the storage's owner");
        }
    }

    // Arguments that make no sense: exit 2, nothing written.
    for (const std::string &args :
         {std::string{}, "--verify --restore " + good.string(),
          "--verify " + cl.config_args() + " " + good.string(),
          "--store /tmp -s meta0 " + good.string(), "--skip-ids x --restore " + good.string()}) {
        const ToolRun bad = meta_dump(args);
        require(bad.status == 2, "'" + args + "': " + describe(bad));
    }
}

// A snapshot restores only into the store of the server it was taken of.
ATF_TEST_CASE_WITHOUT_HEAD(other_servers_store_refused);
ATF_TEST_CASE_BODY(other_servers_store_refused)
{
    Cluster cl(2);
    const fs::path snap = fs::current_path() / "meta1.snap";
    const ToolRun dumped = meta_dump(cl.config_args("meta1") + " " + snap.string());
    require(dumped.status == 0 && contains(dumped.output, "metadata server 1's store"),
            "snapshot of meta1: " + describe(dumped));
    const ToolRun ambiguous = meta_dump("-c " + cl.files.config_path + " " + snap.string() + "x");
    require(ambiguous.status == 2 && contains(ambiguous.output, "meta0, meta1"),
            "no -s with two metadata servers: " + describe(ambiguous));
    require(cl.servers["meta0"]->stop(SIGTERM) == 0, "meta0 did not stop cleanly");
    fs::rename(cl.store("meta0"), cl.store("meta0").string() + ".old");
    const ToolRun wrong = meta_dump("--restore " + cl.config_args("meta0") + " " + snap.string());
    require(wrong.status == 1 && contains(wrong.output, "server 1's snapshot"),
            "meta1's snapshot into meta0: " + describe(wrong));
    require(!fs::exists(cl.store("meta0") / "data.mdb"), "the refused restore left a store");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, online_snapshot_and_restore);
    ATF_ADD_TEST_CASE(tcs, damaged_snapshot_refused);
    ATF_ADD_TEST_CASE(tcs, other_servers_store_refused);
}
