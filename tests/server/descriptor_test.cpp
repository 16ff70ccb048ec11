// Setattr authorized by an open (docs/protocol.md, setattr's by_open bit):
// the metadata server lets a size change, times set to now and
// "data written" through the mode bits only for a client session that
// holds the file open for writing; without such a hold, or with a
// read-only one, the mode decides as before, and ownership rules never
// change.
#include <atf-c++.hpp>

#include <cerrno>
#include <string>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"

namespace {

using namespace pvfs;
using pvfs::test::require;
using pvfs::test::require_rc;

constexpr std::uint32_t user = 65534;

test::Cluster make_cluster()
{
    return {test::servers(1, 1), "request_timeout = \"5s\"\n", test::fresh_attrs()};
}

// A client of `uid` that leaves data access to the server's setattr
// checks, as pvfsd does (its kernel decided at open).
std::unique_ptr<client::Client> connect_user(const test::Cluster &cl, std::uint32_t uid = user)
{
    client::Options o = test::fresh_attrs();
    o.credentials.uid = uid;
    o.credentials.gid = uid;
    o.check_data_access = false;
    return cl.connect(o);
}

// The truncation ftruncate sends: size and mtime to now, claimed by the open.
client::SetAttr truncation(std::uint64_t size, bool by_open)
{
    client::SetAttr s;
    s.truncate = true;
    s.size = size;
    s.mask = client::set_mtime_now;
    s.by_open = by_open;
    return s;
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(by_open_needs_a_write_open);
ATF_TEST_CASE_BODY(by_open_needs_a_write_open)
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    auto a = connect_user(cl);
    auto b = connect_user(cl, 1001);
    // What open(O_CREAT|O_RDWR, 0) makes: a file its owner may not write.
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    const Handle dir = attr.handle;
    require_rc(a->create(dir, "zero", 0, true, {}, attr), 0, "create mode 0");
    const Handle h = attr.handle;
    require_rc(a->write(h, 0, test::pattern(100, 1)), 100, "write");

    require_rc(a->setattr(h, truncation(10, true), attr), -EACCES, "by_open with no open");
    require_rc(a->open(h, client::Client::open_read, attr), 0, "open for reading");
    require_rc(a->setattr(h, truncation(10, true), attr), -EACCES, "by_open with a read open");
    require_rc(a->fsync(h, true), -EACCES, "fsync by_open with a read open");

    require_rc(b->open(h, client::Client::open_read | client::Client::open_write, attr), 0,
               "b opens for writing");
    require_rc(a->setattr(h, truncation(10, true), attr), -EACCES,
               "by_open while another session holds the write open");

    require_rc(a->open(h, client::Client::open_write, attr), 0, "open for writing");
    require_rc(a->setattr(h, truncation(10, false), attr), -EACCES,
               "a write open without the by_open bit");
    require_rc(a->setattr(h, truncation(10, true), attr), 0, "by_open with a write open");
    require(attr.size == 10 && attr.mode == 0, "size 10, mode 0 after the truncation");
    require_rc(a->write(h, 10, test::pattern(5, 2)), 5, "write");
    require_rc(a->fsync(h, false), -EACCES, "fsync without by_open");
    require_rc(a->write(h, 15, test::pattern(5, 3)), 5, "write");
    require_rc(a->fsync(h, true), 0, "fsync by_open with a write open");

    // The open allows no more than a writer may do: ownership stays.
    client::SetAttr touch;
    touch.mask = client::set_atime_now | client::set_mtime_now;
    touch.by_open = true;
    require_rc(a->setattr(h, touch, attr), 0, "times to now by_open");
    require_rc(b->setattr(h, touch, attr), 0, "times to now by_open of another writer");
    client::SetAttr chmod;
    chmod.mask = client::set_mode;
    chmod.mode = 0644;
    chmod.by_open = true;
    require_rc(b->setattr(h, chmod, attr), -EPERM, "chmod by_open by a writer of another uid");

    // Once closed, the claim is false again.
    require_rc(a->close(h), 0, "close a");
    require_rc(a->close(h), 0, "close a's read open");
    require_rc(a->setattr(h, truncation(0, true), attr), -EACCES, "by_open after the close");
    require_rc(a->getattr(h, attr), 0, "getattr");
    require(attr.size == 20, "the refused truncations changed the size");
}

ATF_TEST_CASE_WITHOUT_HEAD(by_open_keeps_owner_rules);
ATF_TEST_CASE_BODY(by_open_keeps_owner_rules)
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    auto u = connect_user(cl);
    Attr attr;
    require_rc(root->create(root_handle, "roots", 0666, true, {}, attr), 0, "create");
    const Handle h = attr.handle;
    require_rc(u->open(h, client::Client::open_write, attr), 0, "open for writing");
    client::SetAttr s;
    s.by_open = true;
    s.mask = client::set_mode;
    s.mode = 0600;
    require_rc(u->setattr(h, s, attr), -EPERM, "chmod by_open by a non-owner");
    s.mask = client::set_uid;
    s.uid = user;
    require_rc(u->setattr(h, s, attr), -EPERM, "chown by_open by a non-owner");
    s.mask = client::set_gid;
    s.gid = user;
    require_rc(u->setattr(h, s, attr), -EPERM, "chgrp by_open by a non-owner");
    s.mask = client::set_atime | client::set_mtime;
    s.atime = s.mtime = Timespec{5, 0};
    require_rc(u->setattr(h, s, attr), -EPERM, "explicit times by_open by a non-owner");
    // mtime to now alone (what ftruncate sends with its size) is a writer's.
    s.mask = client::set_mtime_now;
    require_rc(u->setattr(h, s, attr), 0, "mtime to now by_open by a writer");
    require_rc(u->setattr(h, truncation(3, true), attr), 0, "truncation by_open by a writer");
    require_rc(root->getattr(h, attr), 0, "getattr");
    require(attr.uid == 0 && attr.mode == 0666 && attr.size == 3, "owner, mode or size wrong");
}

// A by_open setattr is a change like any other: a retry with its ids gets
// the first result from the reply cache, even once the claim would be
// refused, and never runs twice.
ATF_TEST_CASE_WITHOUT_HEAD(by_open_retry_from_reply_cache);
ATF_TEST_CASE_BODY(by_open_retry_from_reply_cache)
{
    test::Cluster cl = make_cluster();
    auto root = cl.connect();
    std::string error;
    const auto loop = client::Loop::create(error);
    require(loop != nullptr, "loop: " + error);
    client::Options o = test::fresh_attrs();
    o.loop = loop;
    o.client_id = 0xD35C;
    o.caller_slots = 1;
    o.credentials = Credentials{user, user, {}};
    o.check_data_access = false;
    auto a = cl.connect(o);
    Attr attr;
    require_rc(root->mkdir(root_handle, "tmp", 0777, attr), 0, "mkdir 0777");
    require_rc(a->create(attr.handle, "zero", 0, true, {}, attr), 0, "create mode 0");
    const Handle h = attr.handle;
    require_rc(a->write(h, 0, test::pattern(100, 1)), 100, "write");
    require_rc(a->open(h, client::Client::open_write, attr), 0, "open for writing");

    client::OnceOp first{o.client_id, 0, 100, 0};
    loop->set_context(o.credentials, 0, &first);
    require_rc(a->setattr(h, truncation(10, true), attr), 0, "by_open with a write open");
    loop->set_context(o.credentials, 0);
    require_rc(a->close(h), 0, "close");

    // The same ids again (a pvfsd restart replaying the kernel's op): the
    // first answer, though the claim is no longer true.
    client::OnceOp retry{o.client_id, 0, 100, 0};
    loop->set_context(o.credentials, 0, &retry);
    require_rc(a->setattr(h, truncation(10, true), attr), 0, "the retry");
    // A new op with the same claim runs, and is refused before the data
    // is cut: no open now.
    client::OnceOp next{o.client_id, 0, 101, 0};
    loop->set_context(o.credentials, 0, &next);
    require_rc(a->setattr(h, truncation(5, true), attr), -EACCES, "a new by_open after the close");
    loop->set_context(o.credentials, 0);
    require_rc(root->getattr(h, attr), 0, "getattr");
    require(attr.size == 10, "size " + std::to_string(attr.size) + ", not 10");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, by_open_retry_from_reply_cache);
    ATF_ADD_TEST_CASE(tcs, by_open_needs_a_write_open);
    ATF_ADD_TEST_CASE(tcs, by_open_keeps_owner_rules);
}
