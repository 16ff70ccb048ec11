// root_squash on a real cluster (one metadata and two data servers): with
// it, requests from uid 0 act as nobody (65534:65534) on the servers, so
// root owns nothing it creates and gets no owner's rights over other users'
// files; without it root keeps them.  Other uids are never changed.
#include <atf-c++.hpp>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"

namespace {

namespace fs = std::filesystem;
using namespace pvfs;
using pvfs::test::ServerProcess;

constexpr std::uint32_t nobody = 65534;
constexpr std::uint32_t alice = 1000;

void require(bool ok, const std::string &why)
{
    if (!ok)
        ATF_FAIL(why);
}

void require_rc(std::int64_t rc, std::int64_t want, const std::string &what)
{
    if (rc != want)
        ATF_FAIL(what + ": got " + std::to_string(rc) + " (" +
                 (rc < 0 ? client::error_text(rc) : std::string("bytes")) + "), expected " +
                 std::to_string(want));
}

const char *const server_names[] = {"meta0", "data0", "data1"};

struct Cluster {
    Cluster()
        : files(test::write_cluster(
              fs::current_path() / "cluster",
              {{"meta0", true, false}, {"data0", false, true}, {"data1", false, true}},
              "root_squash = false\nrequest_timeout = \"10s\"\n"))
    {
        start_all();
    }

    void start_all()
    {
        for (const char *name : server_names)
            servers[name] = std::make_unique<ServerProcess>(PVFS_SERVER_BINARY, files, name);
    }

    // Restarts every server with root_squash set to `on`.
    void restart_with_squash(bool on)
    {
        for (const char *name : server_names)
            require(servers[name]->stop(SIGTERM) == 0, std::string("clean stop of ") + name);
        servers.clear();
        std::stringstream text;
        text << std::ifstream(files.config_path).rdbuf();
        std::string config = text.str();
        for (const char *from : {"root_squash = false", "root_squash = true"}) {
            const std::size_t at = config.find(from);
            if (at != std::string::npos)
                config.replace(at, std::strlen(from),
                               on ? "root_squash = true" : "root_squash = false");
        }
        require(config.find(on ? "root_squash = true" : "root_squash = false") != std::string::npos,
                "config without root_squash");
        std::ofstream(files.config_path) << config;
        start_all();
    }

    [[nodiscard]] std::unique_ptr<client::Client> connect(std::uint32_t uid,
                                                          std::uint32_t gid) const
    {
        client::Options o;
        o.target = files.config_path;
        o.use_process_credentials = false;
        o.credentials.uid = uid;
        o.credentials.gid = gid;
        // Every call sees the servers' current view, not a cached one.
        o.attr_timeout = std::chrono::milliseconds(0);
        std::string error;
        auto c = client::Client::connect(o, error);
        require(c != nullptr, "connect: " + error);
        return c;
    }

    test::ClusterFiles files;
    std::map<std::string, std::unique_ptr<ServerProcess>> servers;
};

const std::vector<std::byte> secret_tag{std::byte{'s'}, std::byte{'e'}, std::byte{'c'}};

// As root without squash: "/" open to all (01777), then alice's private
// file (0600, with a user xattr) and private directory (0700) in it.
struct AliceFiles {
    Attr file;
    Attr dir;
};

AliceFiles make_alice_files(const Cluster &cl)
{
    auto root = cl.connect(0, 0);
    Attr a;
    client::SetAttr open_root;
    open_root.mask = proto::set_mode;
    open_root.mode = 01777;
    require_rc(root->setattr(root_handle, open_root, a), 0, "chmod 1777 /");
    require(a.mode == 01777, "/ is not 1777");
    auto al = cl.connect(alice, alice);
    AliceFiles f;
    require_rc(al->create(root_handle, "alice.txt", 0600, true, {}, f.file), 0, "create alice.txt");
    require_rc(al->write(f.file.handle, 0, test::pattern(100000, 3)), 100000, "write alice.txt");
    require_rc(al->xattr_set(f.file.handle, "user.tag", secret_tag, 0), 0, "xattr_set");
    require_rc(al->mkdir(root_handle, "alicedir", 0700, f.dir), 0, "mkdir alicedir");
    Attr inner;
    require_rc(al->create(f.dir.handle, "inner", 0644, true, {}, inner), 0, "create inner");
    require(f.file.uid == alice && f.file.gid == alice && f.file.mode == 0600,
            "alice.txt is not alice's 0600 file");
    return f;
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(squashed_root_is_nobody);
ATF_TEST_CASE_BODY(squashed_root_is_nobody)
{
    Cluster cl;
    const AliceFiles f = make_alice_files(cl);
    cl.restart_with_squash(true);
    auto root = cl.connect(0, 0);

    Attr mine;
    require_rc(root->create(root_handle, "by-root", 0644, true, {}, mine), 0, "root create");
    require(mine.uid == nobody && mine.gid == nobody,
            "root's new file is owned by " + std::to_string(mine.uid) + ":" +
                std::to_string(mine.gid) + ", not nobody");
    Attr dir;
    require_rc(root->mkdir(root_handle, "root-dir", 0755, dir), 0, "root mkdir");
    require(dir.uid == nobody && dir.gid == nobody, "root's new directory is not nobody's");

    // Reading alice's private things needs read permission root no longer has.
    std::vector<std::byte> value;
    require_rc(root->xattr_get(f.file.handle, "user.tag", value), -EACCES,
               "root reads the xattr of a 0600 file of uid 1000");
    std::vector<proto::DirEntry> entries;
    bool eof = false;
    require_rc(root->readdir(f.dir.handle, 0, 100, entries, eof), -EACCES,
               "root lists a 0700 directory of uid 1000");
    Attr inner;
    require_rc(root->lookup(f.dir.handle, "inner", inner), -EACCES,
               "root looks up in a 0700 directory of uid 1000");
    // Nor may it change what only the owner (or a real root) may.
    client::SetAttr chmod;
    chmod.mask = proto::set_mode;
    chmod.mode = 0644;
    Attr after;
    require_rc(root->setattr(f.file.handle, chmod, after), -EPERM,
               "root chmods a file of uid 1000");
    client::SetAttr chown;
    chown.mask = proto::set_uid;
    chown.uid = 0;
    require_rc(root->setattr(f.file.handle, chown, after), -EPERM,
               "root chowns a file of uid 1000");
    require_rc(root->unlink(f.dir.handle, "inner"), -EACCES, "root unlinks in alice's 0700 dir");

    // Nothing changed, and alice is untouched by squashing.
    auto al = cl.connect(alice, alice);
    Attr now;
    require_rc(al->getattr(f.file.handle, now), 0, "getattr alice.txt");
    require(now.mode == 0600 && now.uid == alice, "alice.txt changed");
    require_rc(al->xattr_get(f.file.handle, "user.tag", value), 0, "alice reads her xattr");
    require(value == secret_tag, "alice's xattr changed");
    require_rc(al->readdir(f.dir.handle, 0, 100, entries, eof), 0, "alice lists her directory");
    require(entries.size() == 1 && entries[0].name == "inner", "alice's directory listing");
    Attr hers;
    require_rc(al->create(root_handle, "by-alice", 0640, true, {}, hers), 0, "alice create");
    require(hers.uid == alice && hers.gid == alice, "squashing changed alice's ids");
    require_rc(al->setattr(f.file.handle, chmod, after), 0, "alice chmods her file");
    require(after.mode == 0644, "alice's chmod did not take");
}

ATF_TEST_CASE_WITHOUT_HEAD(unsquashed_root_keeps_its_rights);
ATF_TEST_CASE_BODY(unsquashed_root_keeps_its_rights)
{
    Cluster cl;
    const AliceFiles f = make_alice_files(cl);
    // The same restart as above, so the two cases differ only in the flag.
    cl.restart_with_squash(false);
    auto root = cl.connect(0, 0);

    Attr mine;
    require_rc(root->create(root_handle, "by-root", 0644, true, {}, mine), 0, "root create");
    require(mine.uid == 0 && mine.gid == 0, "root's new file is not root's");
    std::vector<std::byte> value;
    require_rc(root->xattr_get(f.file.handle, "user.tag", value), 0,
               "root reads the xattr of a 0600 file");
    require(value == secret_tag, "xattr value");
    std::vector<proto::DirEntry> entries;
    bool eof = false;
    require_rc(root->readdir(f.dir.handle, 0, 100, entries, eof), 0, "root lists alicedir");
    require(entries.size() == 1 && entries[0].name == "inner", "root's listing of alicedir");
    std::vector<std::byte> got(100000);
    require_rc(root->read(f.file.handle, 0, got), 100000, "root reads alice.txt");
    require(got == test::pattern(100000, 3), "alice.txt bytes");
    client::SetAttr chmod;
    chmod.mask = proto::set_mode;
    chmod.mode = 0640;
    Attr after;
    require_rc(root->setattr(f.file.handle, chmod, after), 0, "root chmods alice.txt");
    require(after.mode == 0640 && after.uid == alice, "root's chmod did not take");
    client::SetAttr chown;
    chown.mask = proto::set_uid;
    chown.uid = 2000;
    require_rc(root->setattr(f.file.handle, chown, after), 0, "root chowns alice.txt");
    require(after.uid == 2000, "root's chown did not take");
}

ATF_TEST_CASE_WITHOUT_HEAD(squashed_root_cannot_read_data);
ATF_TEST_CASE_BODY(squashed_root_cannot_read_data)
{
    Cluster cl;
    const AliceFiles f = make_alice_files(cl);
    cl.restart_with_squash(true);
    auto root = cl.connect(0, 0);
    expect_fail("product gap: data servers do not check credentials on read "
                "(server/data_service.cpp), nor does Client::read (lib/client/client.cpp "
                "io()), so any authenticated uid reads any file's bytes by handle");
    std::vector<std::byte> got(100000);
    const std::int64_t rc = root->read(f.file.handle, 0, got);
    require_rc(rc, -EACCES, "squashed root reads a 0600 file of uid 1000");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, squashed_root_is_nobody);
    ATF_ADD_TEST_CASE(tcs, unsquashed_root_keeps_its_rights);
    ATF_ADD_TEST_CASE(tcs, squashed_root_cannot_read_data);
}
