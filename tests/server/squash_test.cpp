// root_squash and the rights over file data on a real cluster (one metadata
// and two data servers): with root_squash, requests from uid 0 act as nobody
// (65534:65534) on the servers, so root owns nothing it creates and gets no
// owner's rights over other users' files, their bytes included; without it
// root keeps them; root's group 0 is squashed as well, wherever it appears
// in a caller's ids.  Other ids are never changed, and read/write/truncate of
// a file's data follow its mode for every uid.
#include <atf-c++.hpp>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"

namespace {

using namespace pvfs;
using pvfs::test::require;
using pvfs::test::require_rc;

constexpr std::uint32_t nobody = 65534;
constexpr std::uint32_t alice = 1000;

// Every call of its clients sees the servers' current view, not a cached one.
struct Cluster : test::Cluster {
    Cluster()
        : test::Cluster(test::servers(1, 2), "root_squash = false\nrequest_timeout = \"10s\"\n",
                        test::fresh_attrs())
    {
    }

    // Restarts every server with root_squash set to `on`.
    void restart_with_squash(bool on)
    {
        for (const char *name : {"meta0", "data0", "data1"})
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
    open_root.mask = client::set_mode;
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
    std::vector<client::DirEntry> entries;
    bool eof = false;
    require_rc(root->readdir(f.dir.handle, 0, 100, entries, eof), -EACCES,
               "root lists a 0700 directory of uid 1000");
    Attr inner;
    require_rc(root->lookup(f.dir.handle, "inner", inner), -EACCES,
               "root looks up in a 0700 directory of uid 1000");
    // Nor may it change what only the owner (or a real root) may.
    client::SetAttr chmod;
    chmod.mask = client::set_mode;
    chmod.mode = 0644;
    Attr after;
    require_rc(root->setattr(f.file.handle, chmod, after), -EPERM,
               "root chmods a file of uid 1000");
    client::SetAttr chown;
    chown.mask = client::set_uid;
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
    std::vector<client::DirEntry> entries;
    bool eof = false;
    require_rc(root->readdir(f.dir.handle, 0, 100, entries, eof), 0, "root lists alicedir");
    require(entries.size() == 1 && entries[0].name == "inner", "root's listing of alicedir");
    std::vector<std::byte> got(100000);
    require_rc(root->read(f.file.handle, 0, got), 100000, "root reads alice.txt");
    require(got == test::pattern(100000, 3), "alice.txt bytes");
    client::SetAttr chmod;
    chmod.mask = client::set_mode;
    chmod.mode = 0640;
    Attr after;
    require_rc(root->setattr(f.file.handle, chmod, after), 0, "root chmods alice.txt");
    require(after.mode == 0640 && after.uid == alice, "root's chmod did not take");
    client::SetAttr chown;
    chown.mask = client::set_uid;
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
    std::vector<std::byte> got(100000);
    require_rc(root->read(f.file.handle, 0, got), -EACCES,
               "squashed root reads a 0600 file of uid 1000");
    const std::vector<client::Region> regions{{0, 10}, {50, 10}};
    std::vector<std::byte> memory(20);
    require_rc(root->read_list(f.file.handle, regions, memory), -EACCES,
               "squashed root list-reads a 0600 file of uid 1000");
    require_rc(root->write(f.file.handle, 0, test::pattern(10, 9)), -EACCES,
               "squashed root writes a 0600 file of uid 1000");
    client::SetAttr truncate;
    truncate.truncate = true;
    truncate.size = 0;
    Attr after;
    require_rc(root->setattr(f.file.handle, truncate, after), -EACCES,
               "squashed root truncates a 0600 file of uid 1000");
    require_rc(root->access(f.file.handle, client::access_read), -EACCES, "access(R_OK) as nobody");
    require_rc(root->access(f.file.handle, 0), 0, "access(F_OK) as nobody");

    // Alice's bytes are all still there.
    auto al = cl.connect(alice, alice);
    require_rc(al->read(f.file.handle, 0, got), 100000, "alice reads her file");
    require(got == test::pattern(100000, 3), "alice.txt changed");
}

// Without squashing, the data of a file is guarded by its mode for every
// uid: read needs r, write and truncate need w; a file's creator may write
// it whatever its mode (as through the fd of open(O_CREAT)); a chmod is
// seen by the next call.
ATF_TEST_CASE_WITHOUT_HEAD(file_data_follows_the_mode);
ATF_TEST_CASE_BODY(file_data_follows_the_mode)
{
    Cluster cl;
    const AliceFiles f = make_alice_files(cl);
    constexpr std::uint32_t bob = 1001;
    auto b = cl.connect(bob, bob);
    std::vector<std::byte> got(100000);
    require_rc(b->read(f.file.handle, 0, got), -EACCES, "bob reads alice's 0600 file");
    require_rc(b->write(f.file.handle, 0, test::pattern(10, 9)), -EACCES,
               "bob writes alice's 0600 file");

    auto al = cl.connect(alice, alice);
    client::SetAttr chmod;
    chmod.mask = client::set_mode;
    chmod.mode = 0644;
    Attr after;
    require_rc(al->setattr(f.file.handle, chmod, after), 0, "chmod 0644");
    require_rc(b->read(f.file.handle, 0, got), 100000, "bob reads the 0644 file");
    require(got == test::pattern(100000, 3), "bob's read of alice.txt");
    require_rc(b->write(f.file.handle, 0, test::pattern(10, 9)), -EACCES,
               "bob writes the 0644 file");
    client::SetAttr truncate;
    truncate.truncate = true;
    truncate.size = 5;
    require_rc(b->setattr(f.file.handle, truncate, after), -EACCES, "bob truncates the 0644 file");
    require_rc(al->read(f.file.handle, 0, got), 100000, "alice.txt keeps its size");

    chmod.mode = 0200; // write-only for alice
    require_rc(al->setattr(f.file.handle, chmod, after), 0, "chmod 0200");
    require_rc(al->write(f.file.handle, 0, test::pattern(10, 4)), 10, "alice writes her 0200 file");
    require_rc(al->read(f.file.handle, 0, got), -EACCES, "alice reads her 0200 file");

    // A read-only file its creator fills in, as cp of a 0444 file does.
    Attr ro;
    require_rc(b->create(root_handle, "bob-ro", 0444, true, {}, ro), 0, "bob creates a 0444 file");
    require_rc(b->write(ro.handle, 0, test::pattern(4096, 5)), 4096, "bob fills his 0444 file");
    require_rc(b->read(ro.handle, 0, got), 4096, "bob reads his 0444 file");
    auto b2 = cl.connect(bob, bob);
    require_rc(b2->write(ro.handle, 0, test::pattern(10, 6)), -EACCES,
               "another client of bob writes the 0444 file");
}

// Root's group goes too: a caller's primary gid 0 becomes nobody's, and
// group 0 leaves its supplementary groups, so neither a uid-1000 caller
// with gid 0 nor a root caller with group 0 among its groups gets the group
// rights of a group-0 file; without squashing both do.
ATF_TEST_CASE_WITHOUT_HEAD(group_0_is_squashed_too);
ATF_TEST_CASE_BODY(group_0_is_squashed_too)
{
    Cluster cl;
    Attr file;
    {
        auto root = cl.connect(0, 0);
        require_rc(root->create(root_handle, "group0.txt", 0070, true, {}, file), 0,
                   "create group0.txt");
        require_rc(root->write(file.handle, 0, test::pattern(5000, 7)), 5000, "fill group0.txt");
        require(file.uid == 0 && file.gid == 0 && file.mode == 0070,
                "group0.txt is not root:root mode 0070");
    }
    const auto as = [&cl](std::uint32_t uid, std::uint32_t gid, std::vector<std::uint32_t> groups) {
        client::Options o = test::fresh_attrs();
        o.credentials = Credentials{uid, gid, std::move(groups)};
        return cl.connect(std::move(o));
    };
    struct Caller {
        const char *who;
        std::uint32_t uid;
        std::uint32_t gid;
        std::vector<std::uint32_t> groups;
    };
    const std::vector<Caller> callers{
        {"uid 1000 gid 0", alice, 0, {}},
        {"uid 1000 gid 1000 groups 0", alice, alice, {0}},
        {"root with group 0 in its groups", 0, 0, {0, 5}},
        {"root of gid 5 with group 0 in its groups", 0, 5, {0}},
    };
    for (const bool squash : {true, false}) {
        cl.restart_with_squash(squash);
        const std::string mode = squash ? " with root_squash" : " without root_squash";
        for (const Caller &c : callers) {
            auto client = as(c.uid, c.gid, c.groups);
            std::vector<std::byte> got(5000);
            if (squash) {
                require_rc(client->read(file.handle, 0, got), -EACCES,
                           std::string(c.who) + " reads a group-0 0070 file" + mode);
                require_rc(client->write(file.handle, 0, test::pattern(10, 8)), -EACCES,
                           std::string(c.who) + " writes a group-0 0070 file" + mode);
                require_rc(client->access(file.handle, client::access_read), -EACCES,
                           std::string(c.who) + " access(R_OK)" + mode);
            } else {
                require_rc(client->read(file.handle, 0, got), 5000,
                           std::string(c.who) + " reads a group-0 0070 file" + mode);
                require(got == test::pattern(5000, 7), "group0.txt bytes");
                require_rc(client->access(file.handle, client::access_read), 0,
                           std::string(c.who) + " access(R_OK)" + mode);
            }
        }
    }
    // uid 1000 with gid 1000 and no group 0 is never in the group.
    auto plain = as(alice, alice, {});
    std::vector<std::byte> got(5000);
    require_rc(plain->read(file.handle, 0, got), -EACCES, "uid 1000 outside group 0 reads");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, squashed_root_is_nobody);
    ATF_ADD_TEST_CASE(tcs, unsquashed_root_keeps_its_rights);
    ATF_ADD_TEST_CASE(tcs, squashed_root_cannot_read_data);
    ATF_ADD_TEST_CASE(tcs, file_data_follows_the_mode);
    ATF_ADD_TEST_CASE(tcs, group_0_is_squashed_too);
}
