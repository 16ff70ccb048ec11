// Tests of the metadata store's orphans (meta_store.hpp "orphans"): a held
// regular file's last unlink (or a rename over it) keeps the inode at nlink
// 0 with a held record in the same batch; release destroys the inode and
// turns the record to reclaim; orphan_done forgets it; a file with another
// link, or not held, is not orphaned; an orphan cannot be linked again; the
// records survive a reopen of the store.
#include <atf-c++.hpp>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "meta_store.hpp"
#include "pvfs/types.hpp"

namespace meta = pvfs::meta;
using meta::Store;
using meta::WriteBatch;
using pvfs::Attr;
using pvfs::Credentials;
using pvfs::Handle;
using pvfs::root_handle;

namespace {

const Credentials root{0, 0, {}};

meta::Options options()
{
    meta::Options o;
    o.path = "store";
    o.default_layout = pvfs::Layout{1U << 20U, 1, 0};
    o.durable = false;
    o.map_size = std::uint64_t{1} << 30U;
    return o;
}

void check(int got, int want, const std::string &what)
{
    if (got != want)
        ATF_FAIL(fmt::format("{}: got {}, want {}", what, got, want));
}

Handle make(Store &s, const std::string &name)
{
    WriteBatch b = s.batch();
    meta::CreateResult r;
    check(b.create(root, root_handle, name, 0644, true, {}, r), 0, "create " + name);
    check(b.commit(), 0, "commit create");
    return r.attr.handle;
}

std::vector<meta::Orphan> orphans(const Store &s)
{
    std::vector<meta::Orphan> out;
    bool eof = false;
    check(s.list_orphans(0, 100, out, eof), 0, "list_orphans");
    ATF_REQUIRE(eof);
    return out;
}

const meta::OpenCheck held_all = [](Handle) { return true; };
const meta::OpenCheck held_none = [](Handle) { return false; };

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(held_unlink_orphans);
ATF_TEST_CASE_BODY(held_unlink_orphans)
{
    Store s;
    check(s.open(options()), 0, "open");
    const Handle h = make(s, "f");
    {
        WriteBatch b = s.batch();
        meta::Removed r;
        check(b.unlink(root, root_handle, "f", r, held_all), 0, "unlink");
        ATF_REQUIRE(r.orphaned);
        ATF_REQUIRE_EQ(r.nlink_after, 0U);
        check(b.commit(), 0, "commit");
    }
    Attr a;
    check(s.lookup(root, root_handle, "f", a), -ENOENT, "lookup");
    check(s.getattr(root, h, a), 0, "getattr of the orphan");
    ATF_REQUIRE_EQ(a.nlink, 0U);
    auto list = orphans(s);
    ATF_REQUIRE_EQ(list.size(), 1U);
    ATF_REQUIRE_EQ(list[0].handle, h);
    ATF_REQUIRE(list[0].state == meta::OrphanState::held);
    ATF_REQUIRE(list[0].layout == a.layout);
    {
        WriteBatch b = s.batch();
        Attr linked;
        check(b.link(root, h, root_handle, "again", linked), -ENOENT, "link of an orphan");
        check(b.orphan_done(h), -EBUSY, "orphan_done of a held orphan");
        check(b.commit(), 0, "commit");
    }
    // The record survives a reopen (the server's restart).
    s.close();
    check(s.open(options()), 0, "reopen");
    ATF_REQUIRE_EQ(orphans(s).size(), 1U);
    {
        WriteBatch b = s.batch();
        meta::Removed r;
        check(b.release(h, r), 0, "release");
        ATF_REQUIRE_EQ(r.handle, h);
        ATF_REQUIRE(r.layout == a.layout);
        check(b.commit(), 0, "commit");
    }
    check(s.getattr(root, h, a), -ENOENT, "getattr after release");
    list = orphans(s);
    ATF_REQUIRE_EQ(list.size(), 1U);
    ATF_REQUIRE(list[0].state == meta::OrphanState::reclaim);
    {
        WriteBatch b = s.batch();
        meta::Removed r;
        // A replayed close: named again, for its closer to finish.
        check(b.release(h, r), 0, "second release");
        ATF_REQUIRE_EQ(r.handle, h);
        ATF_REQUIRE(r.layout == a.layout);
        std::vector<meta::Orphan> out;
        check(b.orphan_handout(list[0].since_ns - 1, 5, 16, out), 0, "handout too early");
        ATF_REQUIRE(out.empty());
        check(b.orphan_handout(list[0].since_ns, 99, 16, out), 0, "handout");
        ATF_REQUIRE_EQ(out.size(), 1U);
        check(b.orphan_done(h), 0, "orphan_done");
        check(b.orphan_done(h), 0, "orphan_done again");
        check(b.commit(), 0, "commit");
    }
    ATF_REQUIRE(orphans(s).empty());
}

ATF_TEST_CASE_WITHOUT_HEAD(not_orphaned);
ATF_TEST_CASE_BODY(not_orphaned)
{
    Store s;
    check(s.open(options()), 0, "open");
    const Handle h = make(s, "f");
    const Handle g = make(s, "g");
    WriteBatch b = s.batch();
    Attr a;
    check(b.link(root, h, root_handle, "f2", a), 0, "link");
    meta::Removed r;
    // Another name is left: nothing to keep.
    check(b.unlink(root, root_handle, "f", r, held_all), 0, "unlink one of two");
    ATF_REQUIRE(!r.orphaned);
    ATF_REQUIRE_EQ(r.nlink_after, 1U);
    // Not held: it goes.
    check(b.unlink(root, root_handle, "g", r, held_none), 0, "unlink unheld");
    ATF_REQUIRE(!r.orphaned);
    // No check (a client that does not know `orphaned`): it goes.
    check(b.unlink(root, root_handle, "f2", r), 0, "unlink without a check");
    ATF_REQUIRE(!r.orphaned);
    check(b.commit(), 0, "commit");
    check(s.getattr(root, h, a), -ENOENT, "f is gone");
    check(s.getattr(root, g, a), -ENOENT, "g is gone");
    ATF_REQUIRE(orphans(s).empty());
}

ATF_TEST_CASE_WITHOUT_HEAD(rename_over_held);
ATF_TEST_CASE_BODY(rename_over_held)
{
    Store s;
    check(s.open(options()), 0, "open");
    const Handle target = make(s, "target");
    const Handle source = make(s, "source");
    {
        WriteBatch b = s.batch();
        meta::Removed r;
        check(b.rename(root, root_handle, "source", root_handle, "target", 0, r,
                       [&](Handle x) { return x == target; }),
              0, "rename");
        ATF_REQUIRE_EQ(r.handle, target);
        ATF_REQUIRE(r.orphaned);
        check(b.commit(), 0, "commit");
    }
    Attr a;
    check(s.lookup(root, root_handle, "target", a), 0, "lookup");
    ATF_REQUIRE_EQ(a.handle, source);
    check(s.getattr(root, target, a), 0, "getattr of the replaced file");
    ATF_REQUIRE_EQ(a.nlink, 0U);
    ATF_REQUIRE_EQ(orphans(s).size(), 1U);
}

ATF_TEST_CASE_WITHOUT_HEAD(failed_unlink_leaves_no_orphan);
ATF_TEST_CASE_BODY(failed_unlink_leaves_no_orphan)
{
    Store s;
    check(s.open(options()), 0, "open");
    make(s, "f");
    {
        WriteBatch b = s.batch();
        meta::Removed r;
        check(b.unlink(root, root_handle, "f", r, held_all), 0, "unlink");
        b.abort();
    }
    ATF_REQUIRE(orphans(s).empty());
    Attr a;
    check(s.lookup(root, root_handle, "f", a), 0, "the name is back");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, held_unlink_orphans);
    ATF_ADD_TEST_CASE(tcs, not_orphaned);
    ATF_ADD_TEST_CASE(tcs, rename_over_held);
    ATF_ADD_TEST_CASE(tcs, failed_unlink_leaves_no_orphan);
}
