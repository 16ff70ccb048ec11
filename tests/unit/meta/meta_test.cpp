// Tests of the metadata store (server/meta/include/meta_store.hpp): every
// operation's success and its POSIX errors, the rename matrix, link counts,
// permissions for an owner, a group member, a stranger and root, sticky and
// setgid directories, persistence across reopening, readdir while the
// directory changes, group commit with a failing operation, ENOSPC, and
// handles carrying the server index.  Kyua runs each case in a fresh
// working directory, where the store lives.
#include <atf-c++.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "detail/records.hpp"
#include "meta_store.hpp"
#include "pvfs/perm.hpp"
#include "pvfs/types.hpp"

namespace meta = pvfs::meta;
namespace perm = pvfs::perm;
using meta::Store;
using meta::WriteBatch;
using pvfs::Attr;
using pvfs::Credentials;
using pvfs::Handle;
using pvfs::Layout;
using pvfs::ObjectType;
using pvfs::root_handle;

namespace {

const Credentials root{0, 0, {}};
const Credentials owner{100, 100, {}};
const Credentials member{200, 200, {100}};
const Credentials other{300, 300, {}};

const Layout default_layout{1U << 20U, 4, 0};

meta::Options options(std::uint32_t server = 0)
{
    meta::Options o;
    o.path = "store";
    o.server_index = server;
    o.default_layout = default_layout;
    o.durable = false;
    o.map_size = std::uint64_t{1} << 30U;
    return o;
}

void open_store(Store &s, const meta::Options &o = options())
{
    const int rc = s.open(o);
    if (rc != 0)
        ATF_FAIL(fmt::format("open: {}", rc));
}

void check(int got, int want, const std::string &what)
{
    if (got != want)
        ATF_FAIL(fmt::format("{}: got {}, want {}", what, got, want));
}

// Runs one change in a batch of its own and commits it when it succeeded.
template <typename Fn> int one(Store &s, Fn &&fn)
{
    WriteBatch b = s.batch();
    if (b.status() != 0)
        return b.status();
    const int rc = fn(b);
    if (rc != 0)
        return rc;
    return b.commit();
}

Handle mkdir(Store &s, const Credentials &c, Handle parent, const std::string &name,
             std::uint32_t mode = 0755)
{
    Attr a;
    check(one(s, [&](WriteBatch &b) { return b.mkdir(c, parent, name, mode, a); }), 0,
          "mkdir " + name);
    return a.handle;
}

Handle create(Store &s, const Credentials &c, Handle parent, const std::string &name,
              std::uint32_t mode = 0644)
{
    meta::CreateResult r;
    check(one(s, [&](WriteBatch &b) { return b.create(c, parent, name, mode, true, {}, r); }), 0,
          "create " + name);
    ATF_REQUIRE(r.created);
    return r.attr.handle;
}

Attr getattr(const Store &s, Handle h)
{
    Attr a;
    check(s.getattr(root, h, a), 0, "getattr");
    return a;
}

int unlink(Store &s, const Credentials &c, Handle parent, const std::string &name,
           meta::Removed *out = nullptr)
{
    meta::Removed r;
    const int rc = one(s, [&](WriteBatch &b) { return b.unlink(c, parent, name, r); });
    if (out != nullptr)
        *out = r;
    return rc;
}

int rename(Store &s, const Credentials &c, Handle op, const std::string &on, Handle np,
           const std::string &nn, std::uint32_t flags = 0, meta::Removed *out = nullptr)
{
    meta::Removed r;
    const int rc = one(s, [&](WriteBatch &b) { return b.rename(c, op, on, np, nn, flags, r); });
    if (out != nullptr)
        *out = r;
    return rc;
}

int lookup(const Store &s, const Credentials &c, Handle parent, const std::string &name,
           Handle *out = nullptr)
{
    Attr a;
    const int rc = s.lookup(c, parent, name, a);
    if (out != nullptr)
        *out = rc == 0 ? a.handle : pvfs::no_handle;
    return rc;
}

std::vector<std::string> names(const Store &s, Handle dir)
{
    std::vector<std::string> out;
    std::uint64_t cookie = 0;
    for (;;) {
        meta::DirPage page;
        check(s.readdir(root, dir, cookie, 1000, page), 0, "readdir");
        for (const auto &e : page.entries) {
            out.push_back(e.name);
            cookie = e.cookie;
        }
        if (page.eof)
            break;
    }
    return out;
}

} // namespace

// The first open makes the top directory {index, 1} as the brief says; a
// reopen with another index is refused; every handle names its server.
ATF_TEST_CASE_WITHOUT_HEAD(open_and_handles);
ATF_TEST_CASE_BODY(open_and_handles)
{
    {
        Store s;
        Attr none;
        check(s.getattr(root, root_handle, none), -EBADF, "closed store");
        open_store(s);
        ATF_REQUIRE(s.is_open());
        const Attr top = getattr(s, root_handle);
        ATF_REQUIRE_EQ(top.handle, pvfs::make_handle(0, 1));
        ATF_REQUIRE(top.type == ObjectType::directory);
        ATF_REQUIRE_EQ(top.mode, 0755U);
        ATF_REQUIRE_EQ(top.uid, 0U);
        ATF_REQUIRE_EQ(top.gid, 0U);
        ATF_REQUIRE_EQ(top.nlink, 2U);
        ATF_REQUIRE(top.layout == default_layout);
        ATF_REQUIRE(top.ctime.sec > 1'600'000'000);
    }
    Store s;
    check(s.open(options(3)), -EINVAL, "reopen with another server index");
    open_store(s);

    meta::Options o3 = options(3);
    o3.path = "store3";
    Store s3;
    open_store(s3, o3);
    ATF_REQUIRE_EQ(s3.server_index(), 3U);
    const Handle top3 = pvfs::make_handle(3, 1);
    ATF_REQUIRE(getattr(s3, top3).type == ObjectType::directory);
    const Handle f = create(s3, root, top3, "f");
    const Handle d = mkdir(s3, root, top3, "d");
    ATF_REQUIRE_EQ(pvfs::handle_server(f), 3U);
    ATF_REQUIRE_EQ(pvfs::handle_server(d), 3U);
    Attr a;
    check(s3.getattr(root, root_handle, a), -EXDEV, "another server's handle");
    check(s3.lookup(root, root_handle, "x", a), -EXDEV, "lookup in another server's dir");
    meta::CreateResult r;
    check(
        one(s3, [&](WriteBatch &b) { return b.create(root, root_handle, "x", 0644, true, {}, r); }),
        -EXDEV, "create in another server's dir");

    meta::Options bad = options();
    bad.path = "store-bad";
    bad.default_layout = Layout{1000, 1, 0};
    Store s4;
    check(s4.open(bad), -EINVAL, "invalid default layout");
}

// The data server list is part of every file's placement: the first open
// that names one records it (also in a store made without one, as by an
// earlier build), and an open with another list, longer, shorter or
// reordered, is refused; an open that names none checks nothing.
ATF_TEST_CASE_WITHOUT_HEAD(data_server_list_recorded);
ATF_TEST_CASE_BODY(data_server_list_recorded)
{
    meta::Options o = options();
    o.path = "store-list";
    {
        Store s;
        open_store(s, o); // no list: as a store an earlier build made
    }
    const auto open_with = [&](std::vector<std::string> list) {
        meta::Options with = o;
        with.data_servers = std::move(list);
        Store s;
        return s.open(with);
    };
    check(open_with({"data0", "data1"}), 0, "the first open with a list");
    check(open_with({"data0", "data1"}), 0, "the same list");
    check(open_with({"data0", "data1", "data2"}), -EINVAL, "a data server added");
    check(open_with({"data0"}), -EINVAL, "a data server removed");
    check(open_with({"data1", "data0"}), -EINVAL, "the data servers reordered");
    check(open_with({"data0", "other"}), -EINVAL, "a data server replaced");
    check(open_with({}), 0, "no list: not checked");
    check(open_with({"data0", "data1"}), 0, "the recorded list after the refusals");

    meta::Options fresh = options();
    fresh.path = "store-list-new";
    fresh.data_servers = {"a", "b", "c"};
    Store s;
    open_store(s, fresh);
    s.close();
    check(open_with({"a", "b", "c"}), -EINVAL, "another store's list");
    fresh.data_servers = {"a", "b"};
    check(s.open(fresh), -EINVAL, "a new store records its first list");
}

ATF_TEST_CASE_WITHOUT_HEAD(create_lookup_getattr);
ATF_TEST_CASE_BODY(create_lookup_getattr)
{
    Store s;
    open_store(s);
    const Attr before = getattr(s, root_handle);
    meta::CreateResult r;
    check(
        one(s, [&](WriteBatch &b) { return b.create(owner, root_handle, "f", 0640, true, {}, r); }),
        -EACCES, "create in root's 0755 dir");
    check(
        one(s, [&](WriteBatch &b) { return b.create(root, root_handle, "f", 0640, true, {}, r); }),
        0, "create");
    ATF_REQUIRE(r.created);
    const Attr f = r.attr;
    ATF_REQUIRE(f.type == ObjectType::regular);
    ATF_REQUIRE_EQ(f.mode, 0640U);
    ATF_REQUIRE_EQ(f.nlink, 1U);
    ATF_REQUIRE_EQ(f.size, 0U);
    ATF_REQUIRE(f.layout == default_layout); // inherited
    ATF_REQUIRE_EQ(pvfs::handle_id(f.handle), 2U);

    Attr a;
    check(s.lookup(other, root_handle, "f", a), 0, "lookup");
    ATF_REQUIRE(a == f);
    ATF_REQUIRE(getattr(s, f.handle) == f);
    const Attr after = getattr(s, root_handle);
    ATF_REQUIRE_EQ(after.size, before.size + 1);
    ATF_REQUIRE_EQ(after.nlink, 2U);
    ATF_REQUIRE(after.mtime.sec > before.mtime.sec ||
                (after.mtime.sec == before.mtime.sec && after.mtime.nsec >= before.mtime.nsec));

    // Exclusive, non-exclusive, over a directory.
    check(
        one(s, [&](WriteBatch &b) { return b.create(root, root_handle, "f", 0600, true, {}, r); }),
        -EEXIST, "exclusive create of an existing name");
    check(one(s,
              [&](WriteBatch &b) { return b.create(other, root_handle, "f", 0600, false, {}, r); }),
          0, "non-exclusive create of an existing name (needs no write access)");
    ATF_REQUIRE(!r.created);
    ATF_REQUIRE_EQ(r.attr.handle, f.handle);
    mkdir(s, root, root_handle, "d");
    check(
        one(s, [&](WriteBatch &b) { return b.create(root, root_handle, "d", 0600, false, {}, r); }),
        -EISDIR, "create over a directory");

    // A given layout, and invalid ones.
    const Layout wide{64U * 1024U, 8, 3};
    check(one(s,
              [&](WriteBatch &b) { return b.create(root, root_handle, "g", 0600, true, wide, r); }),
          0, "create with a layout");
    ATF_REQUIRE(r.attr.layout == wide);
    const Layout bad{5000, 1, 0};
    check(
        one(s, [&](WriteBatch &b) { return b.create(root, root_handle, "h", 0600, true, bad, r); }),
        -EINVAL, "create with an invalid layout");

    // Names and missing things.
    check(lookup(s, root, root_handle, "nope"), -ENOENT, "lookup missing");
    check(lookup(s, root, f.handle, "x"), -ENOTDIR, "lookup in a file");
    check(lookup(s, root, root_handle, std::string(256, 'n')), -ENAMETOOLONG, "long name");
    check(lookup(s, root, root_handle, "a/b"), -EINVAL, "slash");
    check(lookup(s, root, root_handle, ".."), -EINVAL, "dot-dot");
    check(lookup(s, root, root_handle, ""), -EINVAL, "empty name");
    check(one(s,
              [&](WriteBatch &b) {
                  return b.create(root, root_handle, std::string(256, 'x'), 0600, true, {}, r);
              }),
          -ENAMETOOLONG, "create long name");
    check(one(s,
              [&](WriteBatch &b) {
                  return b.create(root, root_handle, std::string(255, 'x'), 0600, true, {}, r);
              }),
          0, "create a 255-byte name");
    check(s.getattr(root, pvfs::make_handle(0, 999), a), -ENOENT, "getattr missing");
    check(one(s, [&](WriteBatch &b) { return b.create(root, f.handle, "x", 0600, true, {}, r); }),
          -ENOTDIR, "create in a file");
}

ATF_TEST_CASE_WITHOUT_HEAD(mkdir_mknod_symlink);
ATF_TEST_CASE_BODY(mkdir_mknod_symlink)
{
    Store s;
    open_store(s);
    const Handle pub = mkdir(s, root, root_handle, "pub", 0777);
    Attr a;
    check(one(s, [&](WriteBatch &b) { return b.mkdir(owner, pub, "d", 0750, a); }), 0, "mkdir");
    ATF_REQUIRE(a.type == ObjectType::directory);
    ATF_REQUIRE_EQ(a.nlink, 2U);
    ATF_REQUIRE_EQ(a.size, 0U);
    ATF_REQUIRE_EQ(a.uid, 100U);
    ATF_REQUIRE_EQ(a.mode, 0750U);
    ATF_REQUIRE(a.layout == default_layout); // what its files will get
    check(one(s, [&](WriteBatch &b) { return b.mkdir(owner, pub, "d", 0750, a); }), -EEXIST,
          "mkdir existing");

    check(one(s,
              [&](WriteBatch &b) {
                  return b.mknod(other, pub, "fifo", ObjectType::fifo, 0600, 0, a);
              }),
          0, "mkfifo");
    ATF_REQUIRE(a.type == ObjectType::fifo);
    ATF_REQUIRE_EQ(a.rdev, 0U);
    check(one(s,
              [&](WriteBatch &b) {
                  return b.mknod(other, pub, "sock", ObjectType::socket, 0600, 0, a);
              }),
          0, "mknod socket");
    const std::uint64_t dev = (8U << 20U) | 1U;
    check(one(s,
              [&](WriteBatch &b) {
                  return b.mknod(other, pub, "sda1", ObjectType::block_device, 0600, dev, a);
              }),
          -EPERM, "mknod device as non-root");
    check(one(s,
              [&](WriteBatch &b) {
                  return b.mknod(root, pub, "sda1", ObjectType::block_device, 0600, dev, a);
              }),
          0, "mknod device as root");
    ATF_REQUIRE_EQ(a.rdev, dev);
    check(one(s,
              [&](WriteBatch &b) {
                  return b.mknod(root, pub, "tty", ObjectType::char_device, 0600, 5, a);
              }),
          0, "mknod char device");
    check(one(s,
              [&](WriteBatch &b) {
                  return b.mknod(root, pub, "r", ObjectType::regular, 0600, 0, a);
              }),
          -EINVAL, "mknod regular");
    check(one(s,
              [&](WriteBatch &b) {
                  return b.mknod(root, pub, "r", ObjectType::directory, 0600, 0, a);
              }),
          -EINVAL, "mknod directory");

    check(one(s, [&](WriteBatch &b) { return b.symlink(other, pub, "ln", "../target/x", a); }), 0,
          "symlink");
    ATF_REQUIRE(a.type == ObjectType::symlink);
    ATF_REQUIRE_EQ(a.mode, 0777U);
    ATF_REQUIRE_EQ(a.size, 11U);
    std::string target;
    check(s.readlink(other, a.handle, target), 0, "readlink");
    ATF_REQUIRE_EQ(target, "../target/x");
    check(s.readlink(other, pub, target), -EINVAL, "readlink of a directory");
    check(one(s, [&](WriteBatch &b) { return b.symlink(other, pub, "e", "", a); }), -ENOENT,
          "empty target");
    check(one(s,
              [&](WriteBatch &b) { return b.symlink(other, pub, "l", std::string(4096, 'a'), a); }),
          -ENAMETOOLONG, "long target");
    check(one(s,
              [&](WriteBatch &b) { return b.symlink(other, pub, "l", std::string(4095, 'a'), a); }),
          0, "longest target");
    check(one(s, [&](WriteBatch &b) { return b.symlink(other, pub, "ln", "x", a); }), -EEXIST,
          "symlink over a name");
    ATF_REQUIRE_EQ(getattr(s, pub).size, 7U);
    ATF_REQUIRE_EQ(getattr(s, pub).nlink, 3U);
}

ATF_TEST_CASE_WITHOUT_HEAD(unlink_rmdir_link_counts);
ATF_TEST_CASE_BODY(unlink_rmdir_link_counts)
{
    Store s;
    open_store(s);
    const Handle a = mkdir(s, root, root_handle, "a");
    const Handle b = mkdir(s, root, root_handle, "b");
    ATF_REQUIRE_EQ(getattr(s, root_handle).nlink, 4U);
    const Handle f = create(s, root, a, "f");
    Attr out;
    check(one(s, [&](WriteBatch &w) { return w.link(root, f, b, "g", out); }), 0, "link");
    ATF_REQUIRE_EQ(out.nlink, 2U);
    ATF_REQUIRE_EQ(getattr(s, f).nlink, 2U);
    check(one(s, [&](WriteBatch &w) { return w.link(root, f, b, "g", out); }), -EEXIST,
          "link over a name");
    check(one(s, [&](WriteBatch &w) { return w.link(root, a, b, "a2", out); }), -EPERM,
          "link a directory");
    check(
        one(s, [&](WriteBatch &w) { return w.link(root, pvfs::make_handle(0, 777), b, "z", out); }),
        -ENOENT, "link a missing object");
    check(one(s, [&](WriteBatch &w) { return w.link(root, pvfs::make_handle(1, 2), b, "z", out); }),
          -EXDEV, "link another server's object");

    meta::Removed r;
    check(unlink(s, root, a, "f", &r), 0, "unlink first name");
    ATF_REQUIRE(r == (meta::Removed{f, ObjectType::regular, 1, default_layout}));
    check(unlink(s, root, b, "g", &r), 0, "unlink last name");
    ATF_REQUIRE_EQ(r.nlink_after, 0U);
    ATF_REQUIRE_EQ(r.handle, f);
    Attr gone;
    check(s.getattr(root, f, gone), -ENOENT, "object gone");
    check(unlink(s, root, b, "g"), -ENOENT, "unlink missing");
    check(unlink(s, root, root_handle, "a"), -EISDIR, "unlink a directory");
    ATF_REQUIRE_EQ(getattr(s, a).size, 0U);
    ATF_REQUIRE_EQ(getattr(s, b).size, 0U);

    mkdir(s, root, a, "sub");
    ATF_REQUIRE_EQ(getattr(s, a).nlink, 3U);
    create(s, root, b, "file");
    auto rmdir = [&](Handle p, const std::string &n) {
        return one(s, [&](WriteBatch &w) { return w.rmdir(root, p, n); });
    };
    check(rmdir(root_handle, "a"), -ENOTEMPTY, "rmdir non-empty");
    check(rmdir(b, "file"), -ENOTDIR, "rmdir a file");
    check(rmdir(b, "nope"), -ENOENT, "rmdir missing");
    check(rmdir(a, "sub"), 0, "rmdir");
    ATF_REQUIRE_EQ(getattr(s, a).nlink, 2U);
    check(rmdir(root_handle, "a"), 0, "rmdir now empty");
    ATF_REQUIRE_EQ(getattr(s, root_handle).nlink, 3U);
    check(s.getattr(root, a, gone), -ENOENT, "directory gone");
    ATF_REQUIRE(names(s, root_handle) == std::vector<std::string>{"b"});
}

// EMLINK at max_links, for a file's links and a directory's subdirectories.
// Under AddressSanitizer each nested transaction's 2 MiB dirty list is an
// mmap of its own, so there the limit is lowered to keep the case short.
ATF_TEST_CASE_WITHOUT_HEAD(emlink);
ATF_TEST_CASE_BODY(emlink)
{
#if defined(__SANITIZE_ADDRESS__)
    const std::uint32_t limit = 2000;
#else
    const std::uint32_t limit = meta::max_links;
#endif
    Store s;
    meta::Options o = options();
    o.max_links = limit;
    open_store(s, o);
    const Handle d = mkdir(s, root, root_handle, "d");
    const Handle f = create(s, root, d, "f");
    {
        WriteBatch b = s.batch();
        Attr out;
        for (std::uint32_t i = 2; i <= limit; ++i)
            check(b.link(root, f, d, fmt::format("l{}", i), out), 0, "link");
        check(b.link(root, f, d, "one-too-many", out), -EMLINK, "link beyond max_links");
        check(b.commit(), 0, "commit");
    }
    ATF_REQUIRE_EQ(getattr(s, f).nlink, limit);
    ATF_REQUIRE_EQ(getattr(s, d).size, std::uint64_t{limit});
    const Handle e = mkdir(s, root, root_handle, "e");
    {
        WriteBatch b = s.batch();
        Attr out;
        for (std::uint32_t i = 2; i < limit; ++i)
            check(b.mkdir(root, e, fmt::format("s{}", i), 0755, out), 0, "mkdir");
        check(b.mkdir(root, e, "one-too-many", 0755, out), -EMLINK, "mkdir beyond max_links");
        check(b.commit(), 0, "commit");
    }
    ATF_REQUIRE_EQ(getattr(s, e).nlink, limit);
    const Handle x = mkdir(s, root, root_handle, "x");
    check(rename(s, root, x, "", e, "y"), -EINVAL, "empty name");
    mkdir(s, root, x, "y");
    check(rename(s, root, x, "y", e, "y"), -EMLINK, "rename a directory into a full one");
    check(rename(s, root, e, "s2", x, "s2"), 0, "rename a directory out of a full one");
    ATF_REQUIRE_EQ(getattr(s, e).nlink, limit - 1);
}

ATF_TEST_CASE_WITHOUT_HEAD(rename_matrix);
ATF_TEST_CASE_BODY(rename_matrix)
{
    Store s;
    open_store(s);
    const Handle a = mkdir(s, root, root_handle, "a");
    const Handle b = mkdir(s, root, root_handle, "b");
    const Handle f1 = create(s, root, a, "f1");
    const Handle f2 = create(s, root, a, "f2");
    Handle h = 0;

    // File to a free name, in the same and another directory.
    check(rename(s, root, a, "f1", a, "g1"), 0, "rename in place");
    check(lookup(s, root, a, "f1"), -ENOENT, "old name gone");
    check(lookup(s, root, a, "g1", &h), 0, "new name");
    ATF_REQUIRE_EQ(h, f1);
    check(rename(s, root, a, "g1", b, "f1"), 0, "rename across directories");
    ATF_REQUIRE_EQ(getattr(s, a).size, 1U);
    ATF_REQUIRE_EQ(getattr(s, b).size, 1U);

    // File over file: the target loses its link.
    meta::Removed r;
    check(rename(s, root, a, "f2", b, "f1", 0, &r), 0, "file over file");
    ATF_REQUIRE(r == (meta::Removed{f1, ObjectType::regular, 0, default_layout}));
    check(lookup(s, root, b, "f1", &h), 0, "lookup replaced name");
    ATF_REQUIRE_EQ(h, f2);
    Attr gone;
    check(s.getattr(root, f1, gone), -ENOENT, "replaced file gone");
    ATF_REQUIRE_EQ(getattr(s, b).size, 1U);

    // Same inode under two names: a successful no-op.
    Attr out;
    check(one(s, [&](WriteBatch &w) { return w.link(root, f2, a, "hard", out); }), 0, "link");
    check(rename(s, root, a, "hard", b, "f1"), 0, "rename onto another name of itself");
    check(lookup(s, root, a, "hard"), 0, "both names stay");
    check(lookup(s, root, b, "f1"), 0, "both names stay");
    ATF_REQUIRE_EQ(getattr(s, f2).nlink, 2U);
    check(rename(s, root, a, "hard", a, "hard"), 0, "rename onto itself");

    // Mismatched types.
    const Handle d1 = mkdir(s, root, a, "d1");
    const Handle d2 = mkdir(s, root, b, "d2");
    check(rename(s, root, a, "d1", b, "f1"), -ENOTDIR, "directory over file");
    check(rename(s, root, b, "f1", b, "d2"), -EISDIR, "file over directory");

    // Directory over an empty directory and over a non-empty one.
    create(s, root, d2, "inside");
    check(rename(s, root, a, "d1", b, "d2"), -ENOTEMPTY, "over a non-empty directory");
    check(unlink(s, root, d2, "inside"), 0, "empty it");
    ATF_REQUIRE_EQ(getattr(s, a).nlink, 3U);
    ATF_REQUIRE_EQ(getattr(s, b).nlink, 3U);
    check(rename(s, root, a, "d1", b, "d2", 0, &r), 0, "directory over empty directory");
    ATF_REQUIRE_EQ(r.handle, d2);
    ATF_REQUIRE(r.type == ObjectType::directory);
    ATF_REQUIRE_EQ(r.nlink_after, 0U);
    ATF_REQUIRE_EQ(getattr(s, a).nlink, 2U); // lost d1's ".."
    ATF_REQUIRE_EQ(getattr(s, b).nlink, 3U); // d2's ".." gone, d1's arrived
    check(lookup(s, root, b, "d2", &h), 0, "moved directory");
    ATF_REQUIRE_EQ(h, d1);

    // Into its own subtree.
    const Handle deep = mkdir(s, root, d1, "deep");
    const Handle deeper = mkdir(s, root, deep, "deeper");
    check(rename(s, root, b, "d2", deeper, "x"), -EINVAL, "into its own subtree");
    check(rename(s, root, b, "d2", d1, "x"), -EINVAL, "into itself");
    check(rename(s, root, d1, "deep", root_handle, "deep"), 0, "out of a subtree is fine");
    ATF_REQUIRE_EQ(getattr(s, d1).nlink, 2U);
    ATF_REQUIRE_EQ(getattr(s, root_handle).nlink, 5U);
    check(rename(s, root, root_handle, "b", deeper, "b2"), 0, "into a sibling's subtree");

    // Flags.
    create(s, root, a, "n1");
    create(s, root, a, "n2");
    check(rename(s, root, a, "n1", a, "n2", meta::rename_noreplace), -EEXIST, "noreplace");
    check(rename(s, root, a, "n1", a, "n3", meta::rename_noreplace), 0, "noreplace free name");
    check(rename(s, root, a, "n3", a, "nx", meta::rename_exchange), -ENOENT, "exchange missing");
    check(rename(s, root, a, "n3", a, "n2", meta::rename_noreplace | meta::rename_exchange),
          -EINVAL, "both flags");
    check(rename(s, root, a, "n3", a, "n2", 8), -EINVAL, "unknown flag");
    check(rename(s, root, a, "nope", a, "n9"), -ENOENT, "missing source");
    Handle n2 = 0;
    Handle n3 = 0;
    check(lookup(s, root, a, "n2", &n2), 0, "n2");
    check(lookup(s, root, a, "n3", &n3), 0, "n3");
    check(rename(s, root, a, "n3", a, "n2", meta::rename_exchange, &r), 0, "exchange files");
    ATF_REQUIRE_EQ(r.handle, pvfs::no_handle);
    check(lookup(s, root, a, "n2", &h), 0, "n2 after");
    ATF_REQUIRE_EQ(h, n3);
    check(lookup(s, root, a, "n3", &h), 0, "n3 after");
    ATF_REQUIRE_EQ(h, n2);

    // Exchange a file and a directory across directories: link counts move.
    const Handle c = mkdir(s, root, root_handle, "c");
    const Handle cd = mkdir(s, root, c, "cd");
    const std::uint32_t a_links = getattr(s, a).nlink;
    check(rename(s, root, a, "n2", c, "cd", meta::rename_exchange), 0, "exchange file and dir");
    ATF_REQUIRE_EQ(getattr(s, a).nlink, a_links + 1);
    ATF_REQUIRE_EQ(getattr(s, c).nlink, 2U);
    check(lookup(s, root, a, "n2", &h), 0, "dir now in a");
    ATF_REQUIRE_EQ(h, cd);
    create(s, root, cd, "x");
    check(rename(s, root, a, "n2", cd, "x", meta::rename_exchange), -EINVAL,
          "exchange into own subtree");

    // Across servers.
    check(rename(s, root, a, "n3", pvfs::make_handle(2, 1), "x"), -EXDEV, "another server");
    check(rename(s, root, a, "n3", f2, "x"), -ENOTDIR, "target parent not a directory");
}

ATF_TEST_CASE_WITHOUT_HEAD(permissions);
ATF_TEST_CASE_BODY(permissions)
{
    Store s;
    open_store(s);
    Attr a;
    // A group directory: owner rwx, group rwx, others r-x... then tightened.
    const Handle home = mkdir(s, root, root_handle, "home", 0755);
    perm::AttrChange chown;
    chown.mask = perm::set_uid | perm::set_gid;
    chown.uid = 100;
    chown.gid = 100;
    check(one(s, [&](WriteBatch &b) { return b.setattr(owner, home, chown, a); }), -EPERM,
          "chown by non-root");
    check(one(s, [&](WriteBatch &b) { return b.setattr(root, home, chown, a); }), 0, "chown");
    perm::AttrChange chmod;
    chmod.mask = perm::set_mode;
    chmod.mode = 0770;
    check(one(s, [&](WriteBatch &b) { return b.setattr(member, home, chmod, a); }), -EPERM,
          "chmod by non-owner");
    check(one(s, [&](WriteBatch &b) { return b.setattr(owner, home, chmod, a); }), 0, "chmod");
    ATF_REQUIRE_EQ(a.mode, 0770U);

    meta::CreateResult r;
    auto create_as = [&](const Credentials &c, Handle dir, const std::string &n) {
        return one(s, [&](WriteBatch &b) { return b.create(c, dir, n, 0644, true, {}, r); });
    };
    check(create_as(owner, home, "o"), 0, "owner creates");
    check(create_as(member, home, "m"), 0, "group member creates");
    check(create_as(other, home, "x"), -EACCES, "other cannot create");
    check(create_as(root, home, "r"), 0, "root creates");
    check(lookup(s, other, home, "o"), -EACCES, "other cannot search");
    check(lookup(s, member, home, "o"), 0, "member searches");
    meta::DirPage page;
    check(s.readdir(other, home, 0, 10, page), -EACCES, "other cannot read the directory");
    check(s.readdir(member, home, 0, 10, page), 0, "member reads");
    ATF_REQUIRE_EQ(page.entries.size(), 3U);
    check(unlink(s, other, home, "o"), -EACCES, "other cannot unlink");

    // Search but no write: lookups fine, changes EACCES.
    chmod.mode = 0750;
    check(one(s, [&](WriteBatch &b) { return b.setattr(owner, home, chmod, a); }), 0, "chmod 750");
    check(create_as(member, home, "m2"), -EACCES, "member without write");
    check(unlink(s, member, home, "m"), -EACCES, "member cannot unlink own file");
    check(lookup(s, member, home, "m"), 0, "but can look it up");
    check(rename(s, member, home, "m", home, "m3"), -EACCES, "nor rename it");

    // Sticky /tmp: only the file's owner, the directory's owner or root.
    const Handle tmp = mkdir(s, root, root_handle, "tmp", 01777);
    check(create_as(owner, tmp, "mine"), 0, "create in tmp");
    check(create_as(other, tmp, "theirs"), 0, "create in tmp");
    check(unlink(s, other, tmp, "mine"), -EPERM, "sticky: not yours");
    check(rename(s, other, tmp, "mine", tmp, "stolen"), -EPERM, "sticky rename source");
    check(rename(s, other, tmp, "theirs", tmp, "mine"), -EPERM, "sticky rename target");
    check(unlink(s, owner, tmp, "mine"), 0, "sticky: your own");
    check(unlink(s, root, tmp, "theirs"), 0, "sticky: root");
    const Handle otmp = mkdir(s, owner, tmp, "otmp", 01777);
    check(create_as(other, otmp, "x"), 0, "create in owner's sticky dir");
    check(unlink(s, owner, otmp, "x"), 0, "sticky: directory owner");

    // Setgid directory: group inherited, subdirectories setgid.
    const Handle proj = mkdir(s, root, root_handle, "proj", 0777);
    perm::AttrChange sgid;
    sgid.mask = perm::set_mode | perm::set_gid;
    sgid.mode = 02777;
    sgid.gid = 100;
    check(one(s, [&](WriteBatch &b) { return b.setattr(root, proj, sgid, a); }), 0, "setgid dir");
    check(one(s, [&](WriteBatch &b) { return b.create(other, proj, "f", 02755, true, {}, r); }), 0,
          "create in setgid dir");
    ATF_REQUIRE_EQ(r.attr.gid, 100U);
    ATF_REQUIRE_EQ(r.attr.uid, 300U);
    ATF_REQUIRE_EQ(r.attr.mode, 0755U); // not in group 100: setgid stripped
    check(one(s, [&](WriteBatch &b) { return b.create(member, proj, "g", 02755, true, {}, r); }), 0,
          "member creates setgid file");
    ATF_REQUIRE_EQ(r.attr.mode, 02755U);
    check(one(s, [&](WriteBatch &b) { return b.mkdir(other, proj, "sub", 0700, a); }), 0,
          "mkdir in setgid dir");
    ATF_REQUIRE_EQ(a.gid, 100U);
    ATF_REQUIRE_EQ(a.mode, 02700U);

    // Moving a directory to another parent needs write access to it.
    const Handle ro = mkdir(s, other, proj, "ro", 0555);
    (void)ro;
    check(rename(s, other, proj, "ro", tmp, "ro"), -EACCES, "move a read-only directory");
    check(rename(s, other, proj, "ro", proj, "ro2"), 0, "rename it in place");

    // Times: explicit by the owner, "now" by a writer.
    const Handle shared = create(s, owner, home, "shared", 0666);
    perm::AttrChange times;
    times.mask = perm::set_mtime;
    times.mtime = {12345, 6};
    check(one(s, [&](WriteBatch &b) { return b.setattr(member, shared, times, a); }), -EPERM,
          "explicit times by non-owner");
    check(one(s, [&](WriteBatch &b) { return b.setattr(owner, shared, times, a); }), 0,
          "explicit times by owner");
    ATF_REQUIRE(a.mtime == (pvfs::Timespec{12345, 6}));
    ATF_REQUIRE(a.ctime.sec > 12345);
    times.mask = perm::set_atime_now | perm::set_mtime_now;
    check(one(s, [&](WriteBatch &b) { return b.setattr(member, shared, times, a); }), 0,
          "touch by a writer");

    // Layouts and pvfs.* attributes: owner or root.
    const Layout l{128U * 1024U, 2, 1};
    check(one(s, [&](WriteBatch &b) { return b.layout_set(member, shared, l); }), -EPERM,
          "layout_set by non-owner");
    check(one(s, [&](WriteBatch &b) { return b.layout_set(owner, shared, l); }), 0, "layout_set");
    check(one(s, [&](WriteBatch &b) { return b.xattr_set(member, shared, "pvfs.x", "1", 0); }),
          -EPERM, "pvfs.* by non-owner");
    check(one(s, [&](WriteBatch &b) { return b.xattr_set(member, shared, "user.x", "1", 0); }), 0,
          "user.* by a writer");
}

ATF_TEST_CASE_WITHOUT_HEAD(xattrs_layouts_setattr);
ATF_TEST_CASE_BODY(xattrs_layouts_setattr)
{
    Store s;
    open_store(s);
    const Handle d = mkdir(s, root, root_handle, "d", 0777);
    const Handle f = create(s, owner, d, "f", 06755);
    auto set = [&](const Credentials &c, const std::string &n, const std::string &v,
                   std::uint32_t flags) {
        return one(s, [&](WriteBatch &b) { return b.xattr_set(c, f, n, v, flags); });
    };
    const auto ctime0 = getattr(s, f).ctime;
    check(set(owner, "user.a", "alpha", 0), 0, "set");
    check(set(owner, "user.a", "beta", meta::xattr_create), -EEXIST, "create existing");
    check(set(owner, "user.b", "x", meta::xattr_replace), -ENODATA, "replace missing");
    check(set(owner, "user.a", "gamma", meta::xattr_replace), 0, "replace");
    check(set(owner, "pvfs.layout-note", std::string(70000, 'v'), 0), -E2BIG, "too big");
    check(set(owner, "trusted.a", "v", 0), -EOPNOTSUPP, "other namespace");
    check(set(owner, "user.a", "v", 3), -EINVAL, "both flags");
    check(set(owner, "pvfs.p", "", 0), 0, "empty value");
    std::string v;
    check(s.xattr_get(other, f, "user.a", v), 0, "get");
    ATF_REQUIRE_EQ(v, "gamma");
    check(s.xattr_get(other, f, "pvfs.p", v), 0, "get empty");
    ATF_REQUIRE(v.empty());
    check(s.xattr_get(other, f, "user.zz", v), -ENODATA, "get missing");
    std::vector<std::string> list;
    check(s.xattr_list(other, f, list), 0, "list");
    ATF_REQUIRE(list == (std::vector<std::string>{"pvfs.p", "user.a"}));
    check(one(s, [&](WriteBatch &b) { return b.xattr_remove(owner, f, "user.a"); }), 0, "remove");
    check(one(s, [&](WriteBatch &b) { return b.xattr_remove(owner, f, "user.a"); }), -ENODATA,
          "remove missing");
    check(s.xattr_list(other, f, list), 0, "list");
    ATF_REQUIRE(list == (std::vector<std::string>{"pvfs.p"}));
    ATF_REQUIRE(getattr(s, f).ctime.sec >= ctime0.sec);
    // The list's total size is bounded.
    {
        WriteBatch b = s.batch();
        int rc = 0;
        for (int i = 0; i < 1000 && rc == 0; ++i)
            rc = b.xattr_set(owner, f, fmt::format("user.{:0>100}", i), "", 0);
        check(rc, -ENOSPC, "xattr list too long");
        b.abort();
    }
    // ... and so is their number.
    {
        const Handle many = create(s, owner, d, "many");
        WriteBatch b = s.batch();
        int rc = 0;
        std::size_t n = 0;
        for (; n <= meta::max_xattr_count && rc == 0; ++n)
            rc = b.xattr_set(owner, many, fmt::format("user.{}", n), "", 0);
        check(rc, -ENOSPC, "too many xattrs");
        ATF_REQUIRE_EQ(n, meta::max_xattr_count + 1);
        check(b.commit(), 0, "commit");
        check(s.xattr_list(owner, many, list), 0, "list many");
        ATF_REQUIRE_EQ(list.size(), meta::max_xattr_count);
        check(unlink(s, owner, d, "many"), 0, "unlink many");
    }
    // A neighbour's attributes stay when f goes away, and f's vanish.
    const Handle g = create(s, owner, d, "g");
    check(one(s, [&](WriteBatch &b) { return b.xattr_set(owner, g, "user.keep", "1", 0); }), 0,
          "set g");
    check(unlink(s, owner, d, "f"), 0, "unlink f");
    check(s.xattr_list(owner, f, list), -ENOENT, "f gone");
    check(s.xattr_get(owner, g, "user.keep", v), 0, "g keeps its attribute");

    // Layouts.
    pvfs::Layout l;
    check(s.layout_get(other, d, l), 0, "layout_get dir");
    ATF_REQUIRE(l == default_layout);
    const Layout l2{256U * 1024U, 3, 2};
    check(one(s, [&](WriteBatch &b) { return b.layout_set(root, d, l2); }), 0, "set dir layout");
    const Handle h = create(s, owner, d, "h");
    ATF_REQUIRE(getattr(s, h).layout == l2);
    check(one(s,
              [&](WriteBatch &b) {
                  return b.layout_set(root, d, Layout{4096, 1, 0});
              }),
          -EINVAL, "invalid layout");
    Attr ln;
    check(one(s, [&](WriteBatch &b) { return b.symlink(root, d, "ln", "h", ln); }), 0, "symlink");
    check(s.layout_get(root, ln.handle, l), -EINVAL, "symlink has no layout");

    // Writing data clears setuid/setgid for non-root writers.
    perm::AttrChange ch;
    ch.mask = perm::set_mode;
    ch.mode = 06777;
    Attr a;
    check(one(s, [&](WriteBatch &b) { return b.setattr(owner, h, ch, a); }), 0, "chmod 6777");
    ATF_REQUIRE_EQ(a.mode, 06777U); // the owner is in the file's group: setgid stays
    check(one(s, [&](WriteBatch &b) { return b.data_written(other, h, a); }), 0, "data_written");
    ATF_REQUIRE_EQ(a.mode & (perm::mode_setuid | perm::mode_setgid), 0U);
    check(one(s, [&](WriteBatch &b) { return b.data_written(other, d, a); }), -EISDIR,
          "data_written on a directory");

    // Without write permission by the mode only a writer (the caller
    // holds the file open for writing: the server checked) may.
    ch.mode = 04600;
    check(one(s, [&](WriteBatch &b) { return b.setattr(owner, h, ch, a); }), 0, "chmod 4600");
    check(one(s, [&](WriteBatch &b) { return b.data_written(other, h, a); }), -EACCES,
          "data_written by another user, mode 4600");
    check(one(s, [&](WriteBatch &b) { return b.data_written(other, h, a, true); }), 0,
          "data_written by a writer, mode 4600");
    ATF_REQUIRE_EQ(a.mode, 0600U); // a write still clears setuid
}

// Close and reopen: everything is there and handles are not reused.
ATF_TEST_CASE_WITHOUT_HEAD(persistence);
ATF_TEST_CASE_BODY(persistence)
{
    Handle d = 0;
    Handle f = 0;
    Handle last = 0;
    {
        Store s;
        meta::Options o = options();
        o.durable = true;
        open_store(s, o);
        d = mkdir(s, root, root_handle, "d", 0777);
        f = create(s, owner, d, "f");
        Attr a;
        check(one(s, [&](WriteBatch &b) { return b.symlink(root, d, "ln", "f", a); }), 0,
              "symlink");
        check(one(s, [&](WriteBatch &b) { return b.xattr_set(owner, f, "user.k", "v", 0); }), 0,
              "xattr");
        last = create(s, root, d, "tmp");
        check(unlink(s, root, d, "tmp"), 0, "unlink the newest");
    }
    Store s;
    open_store(s);
    Handle h = 0;
    check(lookup(s, root, root_handle, "d", &h), 0, "d");
    ATF_REQUIRE_EQ(h, d);
    check(lookup(s, root, d, "f", &h), 0, "f");
    ATF_REQUIRE_EQ(h, f);
    ATF_REQUIRE_EQ(getattr(s, f).uid, 100U);
    std::string v;
    check(s.xattr_get(root, f, "user.k", v), 0, "xattr");
    ATF_REQUIRE_EQ(v, "v");
    check(lookup(s, root, d, "ln", &h), 0, "ln");
    check(s.readlink(root, h, v), 0, "readlink");
    ATF_REQUIRE_EQ(v, "f");
    ATF_REQUIRE(names(s, d) == (std::vector<std::string>{"f", "ln"}));
    const Handle next = create(s, root, d, "new");
    ATF_REQUIRE(pvfs::handle_id(next) > pvfs::handle_id(last));
    meta::Stats st;
    check(s.statfs(st), 0, "statfs");
    ATF_REQUIRE_EQ(st.objects, 5U); // root, d, f, ln, new
}

// A directory of 10,000 entries read 100 at a time while entries are added
// and removed between pages: every entry present for the whole walk comes
// back exactly once, and the walk ends.
ATF_TEST_CASE_WITHOUT_HEAD(readdir_while_changing);
ATF_TEST_CASE_BODY(readdir_while_changing)
{
    Store s;
    open_store(s);
    const Handle d = mkdir(s, root, root_handle, "big", 0777);
    const Handle plain = create(s, root, root_handle, "plain");
    constexpr int initial = 10'000;
    for (int base = 0; base < initial; base += 1000) {
        WriteBatch b = s.batch();
        meta::CreateResult r;
        for (int i = base; i < base + 1000; ++i)
            check(b.create(root, d, fmt::format("e{}", i), 0644, true, {}, r), 0, "create");
        check(b.commit(), 0, "commit");
    }
    ATF_REQUIRE_EQ(getattr(s, d).size, std::uint64_t{initial});

    std::set<std::string> removed;
    std::map<std::string, int> seen;
    std::uint64_t cookie = 0;
    int pages = 0;
    int added = 0;
    for (;;) {
        meta::DirPage page;
        check(s.readdir(owner, d, cookie, 100, page), 0, "readdir");
        ATF_REQUIRE(page.entries.size() <= 100);
        for (const auto &e : page.entries) {
            ++seen[e.name];
            ATF_REQUIRE(e.cookie > cookie);
            cookie = e.cookie;
        }
        ++pages;
        ATF_REQUIRE(pages < 1000);
        if (page.eof)
            break;
        // Between pages: remove three entries spread over the directory
        // (some already read, some not), add two, rename one.
        WriteBatch b = s.batch();
        for (int k = 0; k < 3; ++k) {
            const std::string victim = fmt::format("e{}", (pages * 37 + k * 3331) % initial);
            meta::Removed rm;
            if (removed.insert(victim).second)
                check(b.unlink(root, d, victim, rm), 0, "unlink " + victim);
        }
        meta::CreateResult r;
        for (int k = 0; k < 2; ++k)
            check(b.create(root, d, fmt::format("new{}", added++), 0644, true, {}, r), 0, "add");
        const std::string moved = fmt::format("e{}", (pages * 53 + 17) % initial);
        meta::Removed rr;
        if (removed.insert(moved).second)
            check(b.rename(root, d, moved, d, moved + "-renamed", 0, rr), 0, "rename");
        check(b.commit(), 0, "commit");
    }
    ATF_REQUIRE(pages >= 90);
    int present_throughout = 0;
    for (int i = 0; i < initial; ++i) {
        const std::string name = fmt::format("e{}", i);
        if (removed.contains(name))
            continue;
        ++present_throughout;
        const auto it = seen.find(name);
        if (it == seen.end() || it->second != 1)
            ATF_FAIL(fmt::format("{} seen {} times", name, it == seen.end() ? 0 : it->second));
    }
    for (const auto &[name, count] : seen)
        if (count != 1)
            ATF_FAIL(fmt::format("{} seen {} times", name, count));
    std::cout << fmt::format("{} pages, {} entries present throughout, {} removed, {} added\n",
                             pages, present_throughout, removed.size(), added);

    meta::DirPage page;
    check(s.readdir(root, d, 0, 0, page), -EINVAL, "max 0");
    check(s.readdir(root, plain, 0, 10, page), -ENOTDIR, "readdir a file");
    check(s.readdir(root, d, UINT64_MAX, 10, page), 0, "past the end");
    ATF_REQUIRE(page.eof && page.entries.empty());
    check(s.readdir(root, d, 0, 100'000, page), 0, "huge page");
    ATF_REQUIRE_EQ(page.entries.size(), std::size_t{meta::max_page_entries});
    ATF_REQUIRE(!page.eof);
}

// One batch: a failing operation in the middle is rolled back alone; the
// others commit.  Reads do not see the batch until it commits and do not
// wait for it.  One writer at a time.
ATF_TEST_CASE_WITHOUT_HEAD(write_batch);
ATF_TEST_CASE_BODY(write_batch)
{
    Store s;
    open_store(s);
    Attr a;
    {
        WriteBatch b = s.batch();
        check(b.status(), 0, "status");
        check(b.mkdir(root, root_handle, "a", 0755, a), 0, "mkdir a");
        check(b.mkdir(root, root_handle, "a", 0755, a), -EEXIST, "mkdir a again");
        meta::Removed r;
        check(b.unlink(root, root_handle, "nope", r), -ENOENT, "unlink missing");
        check(b.mkdir(root, root_handle, "b", 0755, a), 0, "mkdir b");
        ATF_REQUIRE_EQ(b.applied(), 2U);
        // Not visible to readers yet, and they do not block.
        check(lookup(s, root, root_handle, "a"), -ENOENT, "uncommitted");
        WriteBatch second = s.batch();
        check(second.status(), -EDEADLK, "second batch on the same thread");
        check(b.commit(), 0, "commit");
        check(b.status(), -EBADF, "ended");
        check(b.mkdir(root, root_handle, "c", 0755, a), -EBADF, "op after commit");
    }
    ATF_REQUIRE(names(s, root_handle) == (std::vector<std::string>{"a", "b"}));
    ATF_REQUIRE_EQ(getattr(s, root_handle).nlink, 4U);
    ATF_REQUIRE_EQ(getattr(s, root_handle).size, 2U);
    {
        WriteBatch b = s.batch();
        check(b.mkdir(root, root_handle, "c", 0755, a), 0, "mkdir c");
        b.abort();
    }
    check(lookup(s, root, root_handle, "c"), -ENOENT, "aborted");
    {
        WriteBatch b = s.batch();
        check(b.mkdir(root, root_handle, "c", 0755, a), 0, "mkdir c");
    } // destroyed without commit
    check(lookup(s, root, root_handle, "c"), -ENOENT, "destroyed without commit");

    // Another thread's batch waits for this one.
    std::atomic<bool> other_done{false};
    WriteBatch b = s.batch();
    check(b.mkdir(root, root_handle, "first", 0755, a), 0, "first");
    std::thread t([&] {
        Attr x;
        WriteBatch ob = s.batch();
        const int rc = ob.mkdir(root, root_handle, "second", 0755, x);
        other_done = rc == 0 && ob.commit() == 0;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ATF_REQUIRE(!other_done);
    check(b.commit(), 0, "commit first");
    t.join();
    ATF_REQUIRE(other_done);
    check(lookup(s, root, root_handle, "second"), 0, "second committed");
}

// 1000 creates in batches of 50, durably: time printed, not asserted.
ATF_TEST_CASE_WITHOUT_HEAD(group_commit_rate);
ATF_TEST_CASE_BODY(group_commit_rate)
{
    Store s;
    meta::Options o = options();
    o.durable = true;
    open_store(s, o);
    const Handle d = mkdir(s, root, root_handle, "d", 0777);
    const auto start = std::chrono::steady_clock::now();
    for (int base = 0; base < 1000; base += 50) {
        WriteBatch b = s.batch();
        meta::CreateResult r;
        for (int i = base; i < base + 50; ++i)
            check(b.create(owner, d, fmt::format("f{}", i), 0644, true, {}, r), 0, "create");
        check(b.commit(), 0, "commit");
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << fmt::format("1000 durable creates in batches of 50: {:.3f} s, {:.0f} creates/s\n",
                             secs, 1000 / secs);
    ATF_REQUIRE_EQ(getattr(s, d).size, 1000U);
    meta::HandlePage hp;
    std::uint64_t cookie = 0;
    std::size_t total = 0;
    Handle prev = 0;
    for (;;) {
        check(s.list_handles(cookie, 300, hp), 0, "list_handles");
        for (const Handle h : hp.handles) {
            ATF_REQUIRE(h > prev);
            prev = h;
        }
        total += hp.handles.size();
        cookie = hp.next_cookie;
        if (hp.eof)
            break;
    }
    ATF_REQUIRE_EQ(total, 1002U);
    meta::Stats st;
    check(s.statfs(st), 0, "statfs");
    ATF_REQUIRE_EQ(st.objects, 1002U);
    ATF_REQUIRE_EQ(st.map_bytes, o.map_size);
    ATF_REQUIRE(st.used_bytes > 0 && st.used_bytes < st.map_bytes);
    ATF_REQUIRE_EQ(st.free_handles, pvfs::handle_id_mask + 1 - 1003);
}

// A tiny map fills up: the operation that does not fit fails with ENOSPC
// alone, what fitted commits, and the store stays readable.
ATF_TEST_CASE_WITHOUT_HEAD(enospc_tiny_map);
ATF_TEST_CASE_BODY(enospc_tiny_map)
{
    Store s;
    meta::Options o = options();
    o.map_size = std::uint64_t{256} * 1024;
    open_store(s, o);
    const Handle d = mkdir(s, root, root_handle, "d", 0777);
    int created = 0;
    int rc = 0;
    const std::string value(4000, 'v');
    while (rc == 0 && created < 10'000) {
        WriteBatch b = s.batch();
        meta::CreateResult r;
        rc = b.create(root, d, fmt::format("f{}", created), 0644, true, {}, r);
        if (rc == 0)
            rc = b.xattr_set(root, r.attr.handle, "user.pad", value, 0);
        if (rc == 0)
            rc = b.commit();
        if (rc == 0)
            ++created;
    }
    check(rc, -ENOSPC, "the map fills");
    ATF_REQUIRE(created > 5);
    std::cout << fmt::format("{} files fit a 256 KiB map\n", created);
    ATF_REQUIRE_EQ(names(s, d).size(), static_cast<std::size_t>(created));
    Handle h = 0;
    check(lookup(s, root, d, "f0", &h), 0, "lookup after ENOSPC");
    std::string v;
    check(s.xattr_get(root, h, "user.pad", v), 0, "xattr after ENOSPC");
    ATF_REQUIRE_EQ(v, value);
    meta::Stats st;
    check(s.statfs(st), 0, "statfs");
    ATF_REQUIRE(st.used_bytes > st.map_bytes / 2);

    // In one batch, the operation that does not fit fails alone: the small
    // change after it (which reuses pages freed by earlier commits) stays.
    WriteBatch b = s.batch();
    check(b.xattr_set(root, h, "user.big", std::string(pvfs::max_xattr_value, 'b'), 0), -ENOSPC,
          "a 64 KiB attribute does not fit");
    perm::AttrChange ch;
    ch.mask = perm::set_mode;
    ch.mode = 0600;
    Attr a;
    check(b.setattr(root, h, ch, a), 0, "a small change still fits");
    ATF_REQUIRE_EQ(b.applied(), 1U);
    check(b.commit(), 0, "commit");
    ATF_REQUIRE_EQ(getattr(s, h).mode, 0600U);
    check(s.xattr_get(root, h, "user.big", v), -ENODATA, "the failed one left nothing");
}

// The record decoders: a round trip, then every kind of damage is -EIO.
ATF_TEST_CASE_WITHOUT_HEAD(records_decode);
ATF_TEST_CASE_BODY(records_decode)
{
    namespace rec = meta::records;
    rec::Inode in;
    in.attr.handle = pvfs::make_handle(7, 99);
    in.attr.type = ObjectType::char_device;
    in.attr.mode = 04751;
    in.attr.uid = 1;
    in.attr.gid = 2;
    in.attr.nlink = 3;
    in.attr.size = 1ULL << 40U;
    in.attr.rdev = 0x1234;
    in.attr.atime = {-5, 1};
    in.attr.mtime = {6, 999'999'999};
    in.attr.ctime = {7, 0};
    in.attr.layout = {1U << 16U, 3, 9};
    in.parent = pvfs::make_handle(7, 1);
    const auto bytes = rec::encode_inode(in);
    rec::Inode out;
    check(rec::decode_inode(in.attr.handle, bytes, out), 0, "round trip");
    ATF_REQUIRE(out.attr == in.attr);
    ATF_REQUIRE_EQ(out.parent, in.parent);
    auto damaged = [&](std::size_t at, std::uint8_t value) {
        auto copy = bytes;
        copy.at(at) = value;
        return rec::decode_inode(in.attr.handle, copy, out);
    };
    check(damaged(0, 2), -EIO, "unknown format");
    check(damaged(1, 0), -EIO, "type 0");
    check(damaged(1, 8), -EIO, "type 8");
    check(damaged(5, 0x10), -EIO, "mode beyond 07777");
    check(damaged(2 + 16 + 16 + 8 + 3, 0x40), -EIO, "atime nsec >= 1e9");
    check(rec::decode_inode(in.attr.handle, std::span(bytes).first(bytes.size() - 1), out), -EIO,
          "short");
    std::vector<std::uint8_t> longer(bytes.begin(), bytes.end());
    longer.push_back(0);
    check(rec::decode_inode(in.attr.handle, longer, out), -EIO, "long");

    const rec::Dirent d{in.attr.handle, ObjectType::symlink, 77};
    const auto db = rec::encode_dirent(d);
    rec::Dirent dout;
    check(rec::decode_dirent(db, dout), 0, "dirent");
    ATF_REQUIRE_EQ(dout.child, d.child);
    ATF_REQUIRE(dout.type == d.type);
    ATF_REQUIRE_EQ(dout.seq, 77U);
    check(rec::decode_dirent(std::span(db).first(3), dout), -EIO, "short dirent");
    auto bad = db;
    bad.at(8) = 9;
    check(rec::decode_dirent(bad, dout), -EIO, "dirent type");

    const rec::OrderValue ov(in.attr.handle, ObjectType::fifo, "name");
    rec::OrderEntry oe;
    check(rec::decode_order(ov.bytes(), oe), 0, "order");
    ATF_REQUIRE_EQ(std::string(oe.name), "name");
    ATF_REQUIRE_EQ(oe.child, in.attr.handle);
    check(rec::decode_order(ov.bytes().first(rec::OrderValue::header), oe), -EIO,
          "order without a name");
    check(rec::decode_order(ov.bytes().first(4), oe), -EIO, "short order");
    const std::vector<std::uint8_t> huge(rec::OrderValue::header + pvfs::max_name + 1, 1);
    check(rec::decode_order(huge, oe), -EIO, "order name too long");
}

// Remote directories over two stores (servers 0 and 1), each step as the
// client drives it: mkdir_object on 1, link_dir on 0; retire, unlink_dir,
// remove_dir_object; and what the parent's server refuses about them.
ATF_TEST_CASE_WITHOUT_HEAD(remote_directories);
ATF_TEST_CASE_BODY(remote_directories)
{
    Store s0;
    open_store(s0);
    Store s1;
    meta::Options o1 = options(1);
    o1.path = "store1";
    open_store(s1, o1);
    const Handle top1 = pvfs::make_handle(1, 1);

    // A setgid parent of server 0: the new directory takes its gid and bit.
    const Handle shared = mkdir(s0, root, root_handle, "shared", 02777);
    Attr changed;
    perm::AttrChange chgrp;
    chgrp.mask = perm::set_gid;
    chgrp.gid = 555;
    check(one(s0, [&](WriteBatch &b) { return b.setattr(root, shared, chgrp, changed); }), 0,
          "chgrp shared");
    perm::AttrChange setgid;
    setgid.mask = perm::set_mode;
    setgid.mode = 02777;
    check(one(s0, [&](WriteBatch &b) { return b.setattr(root, shared, setgid, changed); }), 0,
          "chmod g+s shared");
    const Attr parent = getattr(s0, shared);
    Attr h;
    check(one(s1, [&](WriteBatch &b) { return b.mkdir_object(owner, parent, 0750, h); }), 0,
          "mkdir_object");
    ATF_REQUIRE_EQ(pvfs::handle_server(h.handle), 1U);
    ATF_REQUIRE_EQ(h.uid, 100U);
    ATF_REQUIRE_EQ(h.gid, 555U);
    ATF_REQUIRE_EQ(h.mode, 02750U);
    ATF_REQUIRE_EQ(h.nlink, 2U);
    ATF_REQUIRE(h.layout == parent.layout);
    // Only server 0's directories get remote children; never a local one.
    Attr no;
    const Attr top1_attr = getattr(s1, top1);
    check(one(s0, [&](WriteBatch &b) { return b.mkdir_object(root, top1_attr, 0755, no); }), -EXDEV,
          "mkdir_object below server 1 on server 0");
    check(one(s1, [&](WriteBatch &b) { return b.mkdir_object(root, top1_attr, 0755, no); }), -EXDEV,
          "mkdir_object below a local directory");

    const auto link_dir = [](Store &s, const Credentials &c, Handle p, const std::string &name,
                             Handle child) {
        return one(s, [&](WriteBatch &b) { return b.link_dir(c, p, name, child); });
    };
    check(link_dir(s0, other, root_handle, "r", h.handle), -EACCES, "link_dir without w");
    check(link_dir(s0, owner, shared, "shared", h.handle), 0, "link_dir into itself by name");
    ATF_REQUIRE(names(s0, shared) == std::vector<std::string>{"shared"});
    check(link_dir(s0, owner, shared, "shared", h.handle), -EEXIST, "link_dir twice");
    const Handle local = create(s0, root, root_handle, "file");
    check(link_dir(s0, root, root_handle, "x", local), -EINVAL, "link_dir of a local handle");
    ATF_REQUIRE_EQ(getattr(s0, shared).nlink, 3U);

    // The parent's server gives only the handle and type; the rest is 1's.
    Attr stub;
    check(s0.lookup(owner, shared, "shared", stub), 0, "lookup the remote dir");
    ATF_REQUIRE_EQ(stub.handle, h.handle);
    ATF_REQUIRE(stub.type == ObjectType::directory);
    Attr dummy;
    check(unlink(s0, root, shared, "shared"), -EISDIR, "unlink of the remote entry");
    check(one(s0, [&](WriteBatch &b) { return b.rmdir(root, shared, "shared"); }), -EXDEV,
          "plain rmdir of the remote entry");
    check(rename(s0, root, shared, "shared", root_handle, "moved"), -EXDEV, "rename it");
    check(rename(s0, root, root_handle, "file", shared, "shared"), -EXDEV, "rename onto it");
    check(one(s0, [&](WriteBatch &b) { return b.link(root, h.handle, root_handle, "l", dummy); }),
          -EXDEV, "link it");

    // Inside it, server 1 works as usual; directories move below it.
    const Handle a = mkdir(s1, owner, h.handle, "a");
    const Handle b = mkdir(s1, owner, h.handle, "b");
    check(rename(s1, owner, h.handle, "a", b, "a"), 0, "rename a into b");
    check(rename(s1, owner, h.handle, "b", a, "b"), -EINVAL, "rename b below itself");

    // Retire refuses a non-empty directory; a retired one takes no entries.
    Attr retired;
    const auto retire = [&](Handle dir, bool on) {
        return one(s1, [&](WriteBatch &w) { return w.retire_dir(dir, on, retired); });
    };
    check(retire(h.handle, true), -ENOTEMPTY, "retire a non-empty dir");
    check(retire(top1, true), -EINVAL, "retire a local directory");
    check(one(s1, [&](WriteBatch &w) { return w.rmdir(owner, b, "a"); }), 0, "rmdir b/a");
    check(one(s1, [&](WriteBatch &w) { return w.rmdir(owner, h.handle, "b"); }), 0, "rmdir b");
    check(retire(h.handle, true), 0, "retire the empty dir");
    ATF_REQUIRE_EQ(retired.uid, 100U);
    meta::CreateResult made;
    check(
        one(s1,
            [&](WriteBatch &w) { return w.create(owner, h.handle, "late", 0644, true, {}, made); }),
        -ENOENT, "create in a retired directory");
    check(retire(h.handle, false), 0, "un-retire");
    create(s1, owner, h.handle, "late");
    check(unlink(s1, owner, h.handle, "late"), 0, "unlink late");

    // unlink_dir: rmdir's checks, and only while the name is the handle's.
    const auto unlink_dir = [&](const Credentials &c, Handle expected, std::uint32_t uid) {
        return one(s0,
                   [&](WriteBatch &w) { return w.unlink_dir(c, shared, "shared", expected, uid); });
    };
    check(unlink_dir(root, pvfs::make_handle(1, 999), 100), -ENOENT, "unlink_dir, other handle");
    perm::AttrChange sticky;
    sticky.mask = perm::set_mode;
    sticky.mode = 01777;
    check(one(s0, [&](WriteBatch &w) { return w.setattr(root, shared, sticky, changed); }), 0,
          "chmod +t shared");
    check(unlink_dir(other, h.handle, 100), -EPERM, "unlink_dir by a stranger in a sticky dir");
    check(one(s1, [&](WriteBatch &w) { return w.remove_dir_object(h.handle); }), -EBUSY,
          "remove a directory that is not retired");
    check(retire(h.handle, true), 0, "retire again");
    check(unlink_dir(owner, h.handle, 100), 0, "unlink_dir by the owner");
    ATF_REQUIRE(names(s0, shared).empty());
    ATF_REQUIRE_EQ(getattr(s0, shared).nlink, 2U);
    check(one(s1, [&](WriteBatch &w) { return w.remove_dir_object(h.handle); }), 0,
          "remove_dir_object");
    Attr gone;
    check(s1.getattr(root, h.handle, gone), -ENOENT, "getattr after removal");
    meta::HandlePage page;
    check(s1.list_handles(0, 100, page), 0, "list_handles");
    ATF_REQUIRE(page.handles == std::vector<Handle>{top1});
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, open_and_handles);
    ATF_ADD_TEST_CASE(tcs, data_server_list_recorded);
    ATF_ADD_TEST_CASE(tcs, create_lookup_getattr);
    ATF_ADD_TEST_CASE(tcs, mkdir_mknod_symlink);
    ATF_ADD_TEST_CASE(tcs, unlink_rmdir_link_counts);
    ATF_ADD_TEST_CASE(tcs, emlink);
    ATF_ADD_TEST_CASE(tcs, rename_matrix);
    ATF_ADD_TEST_CASE(tcs, permissions);
    ATF_ADD_TEST_CASE(tcs, xattrs_layouts_setattr);
    ATF_ADD_TEST_CASE(tcs, persistence);
    ATF_ADD_TEST_CASE(tcs, readdir_while_changing);
    ATF_ADD_TEST_CASE(tcs, write_batch);
    ATF_ADD_TEST_CASE(tcs, group_commit_rate);
    ATF_ADD_TEST_CASE(tcs, enospc_tiny_map);
    ATF_ADD_TEST_CASE(tcs, records_decode);
    ATF_ADD_TEST_CASE(tcs, remote_directories);
}
