// A namespace over two metadata servers (and two data servers), used
// through libpvfs: remote directories (docs/metadata.md "Remote
// directories") are made, filled, listed, renamed inside and removed; the
// cross-server cases fail as documented and leave nothing behind; an
// orphan left by a half-done mkdir is found and removed by pvfs-fsck.
#include <atf-c++.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
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

struct Cluster : test::Cluster {
    Cluster()
        : test::Cluster(test::servers(2, 2), "stripe_size = \"64KiB\"\nbulk_chunk = \"64KiB\"\n")
    {
    }
};

// Every handle metadata server `index` holds.
std::vector<Handle> handles_of(client::Client &c, std::uint32_t index)
{
    std::vector<Handle> all;
    std::uint64_t cookie = 0;
    for (bool eof = false; !eof;) {
        client::HandlePage page;
        require_rc(c.list_handles(index, cookie, 1000, page), 0, "list_handles");
        all.insert(all.end(), page.handles.begin(), page.handles.end());
        cookie = page.next_cookie;
        eof = page.eof;
    }
    return all;
}

bool holds(const std::vector<Handle> &handles, Handle h)
{
    return std::find(handles.begin(), handles.end(), h) != handles.end();
}

std::vector<client::DirEntry> list(client::Client &c, Handle dir)
{
    std::vector<client::DirEntry> all;
    std::uint64_t cookie = 0;
    for (bool eof = false; !eof;) {
        std::vector<client::DirEntry> page;
        require_rc(c.readdir(dir, cookie, 100, page, eof), 0, "readdir");
        for (const auto &e : page) {
            all.push_back(e);
            cookie = e.cookie;
        }
    }
    return all;
}

Attr remote_dir(client::Client &c, Handle parent, const std::string &name)
{
    Attr a;
    require_rc(c.mkdir(parent, name, 0755, a, 1), 0, "remote mkdir " + name);
    require(handle_server(a.handle) == 1 && a.type == ObjectType::directory,
            name + ": not a directory of metadata server 1");
    return a;
}

// Runs pvfs-fsck on the cluster; its exit status, its stdout in `out`.
int run_fsck(const Cluster &cl, const std::string &args, std::string &out)
{
    const std::string command = std::string(PVFS_FSCK_BINARY) + " -c " + cl.files.config_path +
                                " " + args + " >fsck.out 2>fsck.err";
    // Our own binary, from one thread: a shell is what the redirections need.
    // NOLINTNEXTLINE(cert-env33-c,concurrency-mt-unsafe)
    const int status = std::system(command.c_str());
    std::ifstream f("fsck.out");
    std::ostringstream text;
    text << f.rdbuf();
    out = text.str();
    require(status != -1 && WIFEXITED(status), "pvfs-fsck did not run");
    return WEXITSTATUS(status);
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(remote_directory_holds_a_tree);
ATF_TEST_CASE_BODY(remote_directory_holds_a_tree)
{
    Cluster cl;
    auto c = cl.connect();
    Attr root_before;
    require_rc(c->getattr(root_handle, root_before), 0, "getattr /");
    const Attr r = remote_dir(*c, root_handle, "remote");
    require_rc(r.mode, 0755, "remote dir mode");

    // The parent lists it, with its server-1 handle; its link count grew.
    auto fresh = cl.connect();
    const auto entries = list(*fresh, root_handle);
    require(entries.size() == 1 && entries[0].name == "remote" && entries[0].handle == r.handle &&
                entries[0].type == ObjectType::directory,
            "readdir / does not show the remote directory");
    Attr root_after;
    require_rc(fresh->getattr(root_handle, root_after), 0, "getattr /");
    require_rc(root_after.nlink, root_before.nlink + 1, "nlink of / after the remote mkdir");
    Attr looked;
    require_rc(fresh->lookup(root_handle, "remote", looked), 0, "lookup remote");
    require(looked.handle == r.handle && looked.type == ObjectType::directory &&
                looked.nlink == 2 && looked.uid == 0,
            "lookup of the remote directory gives its own attributes");
    Attr by_path;
    require_rc(fresh->resolve("/remote", by_path), 0, "resolve /remote");
    require(by_path.handle == r.handle, "resolve /remote");

    // Files and directories made inside live on server 1, data included.
    Attr f;
    require_rc(c->create(r.handle, "file", 0644, true, {}, f), 0, "create remote/file");
    require(handle_server(f.handle) == 1, "a file in the remote directory is on server 1");
    const auto data = test::pattern(200'000, 7);
    require_rc(c->write(f.handle, 0, data), static_cast<std::int64_t>(data.size()), "write");
    Attr sub;
    require_rc(c->mkdir(r.handle, "sub", 0700, sub), 0, "mkdir remote/sub");
    require(handle_server(sub.handle) == 1, "remote/sub is on server 1");
    Attr deep;
    require_rc(c->create(sub.handle, "deep", 0600, true, {}, deep), 0, "create remote/sub/deep");
    require(handle_server(deep.handle) == 1, "remote/sub/deep is on server 1");

    Attr back;
    require_rc(fresh->resolve("/remote/file", back), 0, "resolve /remote/file");
    require_rc(static_cast<std::int64_t>(back.size), static_cast<std::int64_t>(data.size()),
               "size of remote/file");
    std::vector<std::byte> got(data.size());
    require_rc(fresh->read(back.handle, 0, got), static_cast<std::int64_t>(data.size()), "read");
    require(got == data, "remote/file: bytes differ");
    require_rc(fresh->resolve("/remote/sub/deep", back), 0, "resolve /remote/sub/deep");
    require(back.handle == deep.handle, "/remote/sub/deep");
    const auto inside = list(*fresh, r.handle);
    require(inside.size() == 2, "readdir remote: two entries");

    // Remote children are only for server 0's directories.
    Attr again;
    require_rc(c->mkdir(r.handle, "back", 0755, again, 0), -EXDEV,
               "remote mkdir below a server-1 directory");
    require_rc(c->mkdir(root_handle, "nowhere", 0755, again, 7), -EINVAL, "mkdir on server 7");
}

ATF_TEST_CASE_WITHOUT_HEAD(rmdir_of_remote_directory);
ATF_TEST_CASE_BODY(rmdir_of_remote_directory)
{
    Cluster cl;
    auto c = cl.connect();
    Attr root_before;
    require_rc(c->getattr(root_handle, root_before), 0, "getattr /");
    const Attr r = remote_dir(*c, root_handle, "r");
    Attr f;
    require_rc(c->create(r.handle, "keep", 0644, true, {}, f), 0, "create r/keep");
    const auto data = test::pattern(1000, 3);
    require_rc(c->write(f.handle, 0, data), 1000, "write r/keep");

    require_rc(c->rmdir(root_handle, "r"), -ENOTEMPTY, "rmdir of a non-empty remote dir");
    require_rc(c->unlink(root_handle, "r"), -EISDIR, "unlink of a remote dir");
    // Intact, and still open to new entries (the retirement was undone).
    auto fresh = cl.connect();
    Attr back;
    require_rc(fresh->resolve("/r/keep", back), 0, "resolve /r/keep after the failed rmdir");
    std::vector<std::byte> got(1000);
    require_rc(fresh->read(back.handle, 0, got), 1000, "read r/keep");
    require(got == data, "r/keep changed");
    Attr more;
    require_rc(c->create(r.handle, "more", 0644, true, {}, more), 0, "create after ENOTEMPTY");

    // Emptied, it goes, and with it its object on server 1.
    require_rc(c->unlink(r.handle, "keep"), 0, "unlink r/keep");
    require_rc(c->unlink(r.handle, "more"), 0, "unlink r/more");
    require(holds(handles_of(*c, 1), r.handle), "server 1 holds r before rmdir");
    require_rc(c->rmdir(root_handle, "r"), 0, "rmdir of the empty remote dir");
    require(!holds(handles_of(*c, 1), r.handle), "server 1 still holds r after rmdir");
    fresh = cl.connect(); // the old one may remember r for a second
    require_rc(fresh->lookup(root_handle, "r", back), -ENOENT, "lookup r after rmdir");
    require(list(*fresh, root_handle).empty(), "/ not empty after rmdir");
    Attr root_after;
    require_rc(fresh->getattr(root_handle, root_after), 0, "getattr /");
    require_rc(root_after.nlink, root_before.nlink, "nlink of / after rmdir");
    require_rc(fresh->getattr(r.handle, back), -ENOENT, "getattr of the removed directory");

    // The sticky bit guards a remote directory as a local one.
    Attr tmp;
    require_rc(c->mkdir(root_handle, "tmp", 01777, tmp), 0, "mkdir /tmp");
    auto alice = cl.connect(1000, 1000);
    auto bob = cl.connect(1001, 1001);
    Attr hers;
    require_rc(alice->mkdir(tmp.handle, "hers", 0755, hers, 1), 0, "alice: remote mkdir in /tmp");
    require(hers.uid == 1000, "owner of alice's remote directory");
    require_rc(bob->rmdir(tmp.handle, "hers"), -EPERM, "bob: rmdir of alice's dir in /tmp");
    require_rc(alice->lookup(tmp.handle, "hers", back), 0, "alice's dir survived bob");
    require_rc(alice->create(hers.handle, "x", 0644, true, {}, more), 0,
               "alice's dir takes entries after bob's attempt");
    require_rc(alice->unlink(hers.handle, "x"), 0, "unlink x");
    require_rc(alice->rmdir(tmp.handle, "hers"), 0, "alice: rmdir of her dir");
}

ATF_TEST_CASE_WITHOUT_HEAD(cross_server_rename_and_link);
ATF_TEST_CASE_BODY(cross_server_rename_and_link)
{
    Cluster cl;
    auto c = cl.connect();
    const Attr r = remote_dir(*c, root_handle, "r");
    Attr local_file;
    require_rc(c->create(root_handle, "a", 0644, true, {}, local_file), 0, "create /a");
    Attr remote_file;
    require_rc(c->create(r.handle, "b", 0644, true, {}, remote_file), 0, "create /r/b");

    require_rc(c->rename(root_handle, "a", r.handle, "a"), -EXDEV, "rename /a -> /r/a");
    require_rc(c->rename(r.handle, "b", root_handle, "b"), -EXDEV, "rename /r/b -> /b");
    require_rc(c->rename(root_handle, "r", root_handle, "r2"), -EXDEV,
               "rename of the remote directory's entry");
    require_rc(c->rename(root_handle, "a", root_handle, "r"), -EXDEV,
               "rename onto the remote directory");
    Attr linked;
    require_rc(c->link(local_file.handle, r.handle, "a-link", linked), -EXDEV, "link /a into /r");
    require_rc(c->link(remote_file.handle, root_handle, "b-link", linked), -EXDEV,
               "link /r/b into /");

    // Within server 1 everything moves, directories included.
    require_rc(c->rename(r.handle, "b", r.handle, "c"), 0, "rename /r/b -> /r/c");
    Attr d1;
    Attr d2;
    require_rc(c->mkdir(r.handle, "d1", 0755, d1), 0, "mkdir /r/d1");
    require_rc(c->mkdir(r.handle, "d2", 0755, d2), 0, "mkdir /r/d2");
    require_rc(c->rename(r.handle, "d1", d2.handle, "d1"), 0, "rename /r/d1 -> /r/d2/d1");
    require_rc(c->rename(r.handle, "d2", d1.handle, "d2"), -EINVAL, "rename /r/d2 below itself");
    auto fresh = cl.connect();
    Attr back;
    require_rc(fresh->resolve("/r/c", back), 0, "resolve /r/c");
    require(back.handle == remote_file.handle, "/r/c is the renamed file");
    require_rc(fresh->resolve("/r/d2/d1", back), 0, "resolve /r/d2/d1");
    require(back.handle == d1.handle, "/r/d2/d1 is the moved directory");
    require_rc(fresh->resolve("/a", back), 0, "/a stayed");
}

ATF_TEST_CASE_WITHOUT_HEAD(failed_mkdir_leaves_no_orphan);
ATF_TEST_CASE_BODY(failed_mkdir_leaves_no_orphan)
{
    Cluster cl;
    auto c = cl.connect();
    Attr x;
    require_rc(c->mkdir(root_handle, "x", 0755, x), 0, "mkdir /x");
    Attr p;
    require_rc(c->mkdir(root_handle, "p", 0755, p), 0, "mkdir /p");
    const auto before = handles_of(*c, 1);

    Attr a;
    require_rc(c->mkdir(root_handle, "x", 0755, a, 1), -EEXIST, "remote mkdir over /x");
    require(handles_of(*c, 1) == before, "EEXIST left an object on server 1");
    Attr still;
    require_rc(c->lookup(root_handle, "x", still), 0, "lookup /x");
    require(still.handle == x.handle, "/x replaced");

    auto user = cl.connect(1000, 1000);
    require_rc(user->mkdir(p.handle, "mine", 0755, a, 1), -EACCES,
               "remote mkdir without write permission on the parent");
    require_rc(user->mkdir(root_handle, "mine", 0755, a, 1), -EACCES,
               "remote mkdir in / without write permission");
    require(handles_of(*c, 1) == before, "EACCES left an object on server 1");
    require(list(*c, p.handle).empty(), "/p has an entry after EACCES");
}

ATF_TEST_CASE_WITHOUT_HEAD(fsck_finds_metadata_orphans);
ATF_TEST_CASE_BODY(fsck_finds_metadata_orphans)
{
    Cluster cl;
    auto c = cl.connect();
    const Attr r = remote_dir(*c, root_handle, "r");
    Attr f;
    require_rc(c->create(r.handle, "f", 0644, true, {}, f), 0, "create /r/f");
    std::string out;
    require_rc(run_fsck(cl, "", out), 0, "pvfs-fsck of a clean file system: " + out);

    // The first step of a remote mkdir alone, as a crash would leave it.
    test::RawClient raw(cl.files, "meta1");
    Attr root;
    require_rc(c->getattr(root_handle, root), 0, "getattr /");
    const test::Call made = raw.call(proto::MkdirObjectRequest{root, 0755});
    require(made.answered && made.response.status == 0, "mkdir_object: " + made.error);
    const Handle orphan = std::get<proto::MkdirObjectResponse>(made.response.body).attr.handle;
    require(handle_server(orphan) == 1 && holds(handles_of(*c, 1), orphan), "orphan made");

    require_rc(run_fsck(cl, "--json", out), 1, "pvfs-fsck with an orphan: " + out);
    std::ostringstream hex;
    hex << std::hex;
    hex.width(16);
    hex.fill('0');
    hex << orphan;
    require(out.find("\"orphan_metadata\"") != std::string::npos &&
                out.find(hex.str()) != std::string::npos,
            "pvfs-fsck --json does not name the orphan " + hex.str() + ": " + out);
    require(holds(handles_of(*c, 1), orphan), "pvfs-fsck without --repair removed the orphan");

    require_rc(run_fsck(cl, "--repair", out), 0, "pvfs-fsck --repair: " + out);
    require(!holds(handles_of(*c, 1), orphan), "pvfs-fsck --repair left the orphan");
    require(holds(handles_of(*c, 1), r.handle) && holds(handles_of(*c, 1), f.handle),
            "pvfs-fsck --repair removed a named object");
    require_rc(run_fsck(cl, "", out), 0, "pvfs-fsck after the repair: " + out);
    Attr back;
    require_rc(cl.connect()->resolve("/r/f", back), 0, "/r/f after the repair");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, remote_directory_holds_a_tree);
    ATF_ADD_TEST_CASE(tcs, rmdir_of_remote_directory);
    ATF_ADD_TEST_CASE(tcs, cross_server_rename_and_link);
    ATF_ADD_TEST_CASE(tcs, failed_mkdir_leaves_no_orphan);
    ATF_ADD_TEST_CASE(tcs, fsck_finds_metadata_orphans);
}
