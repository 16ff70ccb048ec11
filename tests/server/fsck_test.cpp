// pvfs-fsck and directory entries whose object is gone: the metadata
// server is stopped, one file's inode record is deleted from its LMDB store
// underneath it (no store operation leaves a name without its object), and
// after a restart pvfs-fsck must name the entry (exit 1, text and --json),
// --repair must remove it (exit 0), a second run must be clean and the
// other files must be intact.  Data objects without a file are tested in
// tools_test (fsck_orphans).
#include <atf-c++.hpp>

#include <lmdb.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "harness.hpp"
#include "meta_store.hpp"
#include "pvfs/client.hpp"

namespace {

namespace fs = std::filesystem;
using namespace pvfs;
using pvfs::test::require;
using pvfs::test::require_rc;

struct Cluster : test::Cluster {
    Cluster()
        : test::Cluster(test::servers(1, 2), "stripe_size = \"64KiB\"\nrequest_timeout = \"10s\"\n",
                        test::fresh_attrs())
    {
    }

    [[nodiscard]] std::string meta_store_path() const
    {
        return (files.dir / "meta0" / "meta").string();
    }
};

struct EnvCloser {
    void operator()(MDB_env *env) const noexcept { mdb_env_close(env); }
};
struct TxnAborter {
    void operator()(MDB_txn *txn) const noexcept { mdb_txn_abort(txn); }
};

void require_mdb(int rc, const std::string &what)
{
    if (rc != 0)
        ATF_FAIL(what + ": " + mdb_strerror(rc));
}

// Deletes the `inodes` record of `handle` (docs/metadata.md "Tables and
// encodings": key = the handle big-endian) and nothing else.
void delete_inode_record(const std::string &store_path, Handle handle)
{
    MDB_env *raw_env = nullptr;
    require_mdb(mdb_env_create(&raw_env), "mdb_env_create");
    const std::unique_ptr<MDB_env, EnvCloser> env(raw_env);
    require_mdb(mdb_env_set_maxdbs(env.get(), 16), "mdb_env_set_maxdbs");
    require_mdb(mdb_env_open(env.get(), store_path.c_str(), MDB_NOTLS, 0600), "mdb_env_open");
    MDB_txn *raw_txn = nullptr;
    require_mdb(mdb_txn_begin(env.get(), nullptr, 0, &raw_txn), "mdb_txn_begin");
    std::unique_ptr<MDB_txn, TxnAborter> txn(raw_txn);
    MDB_dbi inodes = 0;
    require_mdb(mdb_dbi_open(txn.get(), "inodes", 0, &inodes), "mdb_dbi_open inodes");
    std::array<unsigned char, 8> key_bytes{};
    for (std::size_t i = 0; i < key_bytes.size(); ++i)
        key_bytes[i] = static_cast<unsigned char>(handle >> (8 * (7 - i)));
    MDB_val key{key_bytes.size(), key_bytes.data()};
    require_mdb(mdb_del(txn.get(), inodes, &key, nullptr), "mdb_del of the inode record");
    require_mdb(mdb_txn_commit(txn.release()), "mdb_txn_commit");
}

struct ToolRun {
    int status = -1;
    std::string output;
};

ToolRun run_fsck(const Cluster &cl, const std::string &args)
{
    const std::string out = (fs::current_path() / "fsck.out").string();
    const std::string cmd = std::string(PVFS_FSCK_BINARY) + " -c " + cl.files.config_path + " " +
                            args + " >" + out + " 2>&1";
    // NOLINTNEXTLINE(cert-env33-c,concurrency-mt-unsafe): runs the tool under test
    const int rc = std::system(cmd.c_str());
    ToolRun r;
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    std::stringstream text;
    text << std::ifstream(out).rdbuf();
    r.output = text.str();
    return r;
}

bool contains(const std::string &text, const std::string &part)
{
    return text.find(part) != std::string::npos;
}

// JSON without its layout whitespace (no name here has a blank).
std::string compact(std::string text)
{
    std::erase_if(text, [](char ch) { return ch == ' ' || ch == '\n'; });
    return text;
}

// /kept, /d/kept2 and /d/victim, with data; then /d/victim's inode record
// is deleted while the metadata server is down.
struct Damaged {
    std::vector<std::byte> kept_data = test::pattern(300000, 7);
    std::vector<std::byte> inner_data = test::pattern(150000, 8);
    Handle victim = no_handle;
    Handle dir = no_handle;
};

Damaged make_dangling_entry(Cluster &cl)
{
    Damaged dmg;
    const std::vector<std::byte> &kept_data = dmg.kept_data;
    const std::vector<std::byte> &inner_data = dmg.inner_data;
    Handle &victim = dmg.victim;
    Handle &dir = dmg.dir;
    {
        auto c = cl.connect();
        Attr a;
        require_rc(c->create(root_handle, "kept", 0644, true, {}, a), 0, "create /kept");
        require_rc(c->write(a.handle, 0, kept_data), 300000, "write /kept");
        Attr d;
        require_rc(c->mkdir(root_handle, "d", 0755, d), 0, "mkdir /d");
        dir = d.handle;
        require_rc(c->create(dir, "kept2", 0644, true, {}, a), 0, "create /d/kept2");
        require_rc(c->write(a.handle, 0, inner_data), 150000, "write /d/kept2");
        require_rc(c->create(dir, "victim", 0644, true, {}, a), 0, "create /d/victim");
        require_rc(c->write(a.handle, 0, test::pattern(1000, 9)), 1000, "write /d/victim");
        victim = a.handle;
        require_rc(c->fsync(a.handle), 0, "fsync");
    }
    const ToolRun clean = run_fsck(cl, "");
    require(clean.status == 0 && contains(clean.output, "clean"),
            "fsck before the damage: " + clean.output);

    require(cl.servers["meta0"]->stop(SIGTERM) == 0, "meta0 did not stop cleanly");
    delete_inode_record(cl.meta_store_path(), victim);
    {
        // The store itself now has the name but not the object.
        meta::Store store;
        meta::Options o;
        o.path = cl.meta_store_path();
        require_rc(store.open(o), 0, "open the store");
        const Credentials root;
        Attr a;
        require_rc(store.getattr(root, victim, a), -ENOENT, "store getattr of the victim");
        meta::DirPage page;
        require_rc(store.readdir(root, dir, 0, 100, page), 0, "store readdir /d");
        require(page.entries.size() == 2, "the damage removed the entry too");
    }
    cl.start("meta0");

    return dmg;
}

// The other files and /d's remaining entry are untouched.
void require_rest_intact(const Cluster &cl, const Damaged &dmg, std::size_t entries_in_d)
{
    const Handle dir = dmg.dir;
    const std::vector<std::byte> &kept_data = dmg.kept_data;
    const std::vector<std::byte> &inner_data = dmg.inner_data;
    auto c = cl.connect();
    Attr a;
    std::vector<client::DirEntry> entries;
    bool eof = false;
    require_rc(c->readdir(dir, 0, 100, entries, eof), 0, "readdir /d");
    require(entries.size() == entries_in_d,
            "/d has " + std::to_string(entries.size()) + " entries");
    for (const auto &[parent, name, data] :
         {std::tuple{root_handle, std::string("kept"), &kept_data},
          std::tuple{dir, std::string("kept2"), &inner_data}}) {
        require_rc(c->lookup(parent, name, a), 0, "lookup " + name);
        std::vector<std::byte> got(data->size() + 10);
        require_rc(c->read(a.handle, 0, got), static_cast<std::int64_t>(data->size()),
                   "read " + name);
        got.resize(data->size());
        require(got == *data, name + ": bytes differ");
    }
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(dangling_entry_found);
ATF_TEST_CASE_BODY(dangling_entry_found)
{
    Cluster cl;
    const Damaged dmg = make_dangling_entry(cl);
    const ToolRun found = run_fsck(cl, "");
    require(found.status == 1,
            "fsck exit status " + std::to_string(found.status) + ": " + found.output);
    require(contains(found.output, "entry without an object: /d/victim"),
            "fsck does not name /d/victim: " + found.output);
    require(!contains(found.output, "/d/kept2") && !contains(found.output, "/kept"),
            "fsck names an intact file: " + found.output);
    const ToolRun json = run_fsck(cl, "--json");
    require(json.status == 1, "fsck --json exit status " + std::to_string(json.status));
    require(contains(compact(json.output), R"("dangling_entries":["/d/victim"])"),
            "fsck --json: " + json.output);

    require_rest_intact(cl, dmg, 2);
}

ATF_TEST_CASE_WITHOUT_HEAD(dangling_entry_repaired);
ATF_TEST_CASE_BODY(dangling_entry_repaired)
{
    Cluster cl;
    const Damaged dmg = make_dangling_entry(cl);
    const Handle dir = dmg.dir;
    const ToolRun repaired = run_fsck(cl, "--repair");
    require(repaired.status == 0, "fsck --repair exit status " + std::to_string(repaired.status) +
                                      ": " + repaired.output);
    require(contains(repaired.output, "entry without an object: /d/victim: removed"),
            "fsck --repair: " + repaired.output);
    const ToolRun again = run_fsck(cl, "--json");
    require(again.status == 0, "fsck after repair: " + again.output);
    require(contains(compact(again.output), R"("dangling_entries":[])"),
            "fsck after repair: " + again.output);

    auto c = cl.connect();
    Attr a;
    require_rc(c->lookup(dir, "victim", a), -ENOENT, "lookup /d/victim after repair");
    require_rc(c->getattr(dir, a), 0, "getattr /d");
    require(a.size == 1, "/d's entry count is " + std::to_string(a.size));
    require_rest_intact(cl, dmg, 1);
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, dangling_entry_found);
    ATF_ADD_TEST_CASE(tcs, dangling_entry_repaired);
}
