// Exactly-once metadata changes on a real metadata server
// (docs/protocol.md "Exactly once"): the server loses the reply to a
// change on purpose ($PVFS_TEST_FAULTS), the client sends it again with
// the same ids, and gets the first result; the namespace shows the change
// once, and a name made again meanwhile by someone else is left alone.  The
// same across a server that exits right after committing.  Without ids the
// same retry gets the wrong answer, which is what the cache is for.
#include <atf-c++.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "harness.hpp"
#include "pvfs/client.hpp"

namespace {

using namespace pvfs;
using pvfs::test::require;
using pvfs::test::require_rc;

constexpr std::uint64_t client_id = 0xC11E27;
constexpr int lost_ms = 1500; // how long a call waits for a reply the server drops

// The ops whose first change with ids loses its reply.
const char *const dropped_ops[] = {"create",  "mkdir",     "mknod",       "symlink",
                                   "link",    "remove",    "rmdir",       "rename",
                                   "setattr", "xattr_set", "xattr_remove"};

std::string drop_all()
{
    std::string faults;
    for (const char *op : dropped_ops)
        faults += std::string(faults.empty() ? "" : ",") + "drop_reply:" + op + ":1";
    return faults;
}

// PVFS_TEST_FAULTS for the servers started while it lives.
struct Faults : test::ScopedEnv {
    explicit Faults(const std::string &text) : test::ScopedEnv("PVFS_TEST_FAULTS", text) {}
};

client::Options setup_options()
{
    client::Options o = test::fresh_attrs();
    o.exactly_once = false; // the setup's changes are not the ones under test
    return o;
}

test::Cluster make_cluster()
{
    return {test::servers(1, 1), "request_timeout = \"5s\"\n", setup_options()};
}

void open_session(test::RawClient &raw)
{
    raw.once = {};
    const test::Call c = raw.call(proto::SessionRequest{client_id, proto::session_open, "test"});
    require(c.answered && c.response.status == 0, "session open: " + c.error);
}

Handle lookup(client::Client &c, const std::string &name)
{
    Attr a;
    const int rc = c.lookup(root_handle, name, a);
    return rc == 0 ? a.handle : no_handle;
}

// One change under test: what to set up, the request, what must hold after.
struct Case {
    const char *what;
    std::function<void(client::Client &)> setup;
    std::function<proto::RequestBody(client::Client &)> body;
    // Between the lost reply and the retry (someone else's change).
    std::function<void(client::Client &)> meanwhile;
    std::function<void(client::Client &, const proto::Response &)> check;
};

std::vector<Case> cases()
{
    auto nothing = [](client::Client &) {};
    auto make_file = [](const char *name) {
        return [name](client::Client &c) {
            Attr a;
            require_rc(c.create(root_handle, name, 0644, false, {}, a), 0,
                       std::string("create ") + name);
        };
    };
    return {
        {"create", nothing,
         [](client::Client &) {
             return proto::CreateRequest{root_handle, "created", 0644, true, {}};
         },
         nothing,
         [](client::Client &c, const proto::Response &r) {
             const auto &b = std::get<proto::CreateResponse>(r.body);
             require(b.created, "create: the retry says it was not created");
             require(lookup(c, "created") == b.attr.handle, "create: another handle");
         }},
        {"mkdir", nothing,
         [](client::Client &) {
             return proto::MkdirRequest{root_handle, "dir", 0755};
         },
         nothing,
         [](client::Client &c, const proto::Response &r) {
             require(lookup(c, "dir") == std::get<proto::MkdirResponse>(r.body).attr.handle,
                     "mkdir: another handle");
         }},
        {"mknod", nothing,
         [](client::Client &) {
             return proto::MknodRequest{root_handle, "fifo", ObjectType::fifo, 0600, 0};
         },
         nothing,
         [](client::Client &c, const proto::Response &r) {
             require(lookup(c, "fifo") == std::get<proto::MknodResponse>(r.body).attr.handle,
                     "mknod: another handle");
         }},
        {"symlink", nothing,
         [](client::Client &) {
             return proto::SymlinkRequest{root_handle, "sym", "target"};
         },
         nothing,
         [](client::Client &c, const proto::Response &) {
             std::string target;
             require_rc(c.readlink(lookup(c, "sym"), target), 0, "readlink");
             require(target == "target", "symlink target");
         }},
        {"link", make_file("linked"),
         [](client::Client &c) {
             return proto::LinkRequest{lookup(c, "linked"), root_handle, "hardlink"};
         },
         nothing,
         [](client::Client &c, const proto::Response &r) {
             require(std::get<proto::LinkResponse>(r.body).attr.nlink == 2, "link: nlink not 2");
             require(lookup(c, "hardlink") == lookup(c, "linked"), "link: another file");
         }},
        // The name is made again by someone else before the retry: the
        // retry must not remove the new file.
        {"remove", make_file("victim"),
         [](client::Client &) {
             return proto::RemoveRequest{root_handle, "victim"};
         },
         make_file("victim"),
         [](client::Client &c, const proto::Response &r) {
             require(std::get<proto::RemoveResponse>(r.body).nlink_after == 0, "remove: nlink");
             require(lookup(c, "victim") != no_handle, "remove: the new file went too");
         }},
        {"rmdir",
         [](client::Client &c) {
             Attr a;
             require_rc(c.mkdir(root_handle, "gone", 0755, a), 0, "mkdir gone");
         },
         [](client::Client &) {
             return proto::RmdirRequest{root_handle, "gone"};
         },
         nothing,
         [](client::Client &c, const proto::Response &) {
             require(lookup(c, "gone") == no_handle, "rmdir: still there");
         }},
        {"rename", make_file("old"),
         [](client::Client &) {
             return proto::RenameRequest{root_handle, "old", root_handle, "new", 0};
         },
         nothing,
         [](client::Client &c, const proto::Response &) {
             require(lookup(c, "old") == no_handle && lookup(c, "new") != no_handle,
                     "rename: not renamed");
         }},
        {"setattr", make_file("moded"),
         [](client::Client &c) {
             return proto::SetattrRequest{lookup(c, "moded"), proto::set_mode, 0600, 0, 0, {}, {}};
         },
         nothing,
         [](client::Client &, const proto::Response &r) {
             require((std::get<proto::SetattrResponse>(r.body).attr.mode & 07777) == 0600,
                     "setattr: mode");
         }},
        // xattr_set with "create": a second run would be EEXIST.
        {"xattr_set", make_file("x"),
         [](client::Client &c) {
             return proto::XattrSetRequest{
                 lookup(c, "x"), "user.a", {std::byte{1}}, proto::xattr_create};
         },
         nothing, [](client::Client &, const proto::Response &) {}},
        {"xattr_remove",
         [](client::Client &c) {
             Attr a;
             require_rc(c.create(root_handle, "y", 0644, false, {}, a), 0, "create y");
             const std::vector<std::byte> value{std::byte{2}};
             require_rc(c.xattr_set(a.handle, "user.b", value, 0), 0, "xattr_set");
         },
         [](client::Client &c) {
             return proto::XattrRemoveRequest{lookup(c, "y"), "user.b"};
         },
         nothing, [](client::Client &, const proto::Response &) {}},
    };
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(retried_changes);
ATF_TEST_CASE_BODY(retried_changes)
{
    const Faults faults(drop_all());
    test::Cluster cl = make_cluster();
    auto setup = cl.connect(setup_options());
    test::RawClient raw(cl.files, "meta0");
    open_session(raw);
    std::uint32_t slot = 0;
    for (const Case &c : cases()) {
        c.setup(*setup);
        raw.once = proto::OnceIds{client_id, slot, 0, 1000 + slot};
        ++slot;
        const proto::RequestBody body = c.body(*setup);
        const test::Call first = raw.call(body, lost_ms);
        require(!first.answered, std::string(c.what) + ": the reply was not dropped");
        c.meanwhile(*setup);
        const test::Call retry = raw.call(body);
        require(retry.answered, std::string(c.what) + ": no reply to the retry: " + retry.error);
        require(retry.response.status == 0, std::string(c.what) + ": the retry failed with errno " +
                                                std::to_string(retry.response.status));
        c.check(*setup, retry.response);
        // A third try is answered the same way.
        const test::Call third = raw.call(body);
        require(third.answered && third.response.status == retry.response.status &&
                    third.response.body == retry.response.body,
                std::string(c.what) + ": a third try answered differently");
    }
    // Without ids, the same retry runs again and fails: what the cache is for.
    Attr a;
    require_rc(setup->create(root_handle, "plain", 0644, false, {}, a), 0, "create plain");
    raw.once = {};
    require(raw.call(proto::RemoveRequest{root_handle, "plain"}).response.status == 0, "remove");
    require(raw.call(proto::RemoveRequest{root_handle, "plain"}).response.status == ENOENT,
            "a plain retried remove is not ENOENT: the test cannot tell the cache works");
}

ATF_TEST_CASE_WITHOUT_HEAD(wrong_retries);
ATF_TEST_CASE_BODY(wrong_retries)
{
    test::Cluster cl = make_cluster();
    test::RawClient raw(cl.files, "meta0");
    // No session yet: EBADR, and nothing happens.
    raw.once = proto::OnceIds{client_id, 0, 0, 1};
    require(raw.call(proto::MkdirRequest{root_handle, "a", 0755}).response.status == EBADR,
            "a change without a session is not EBADR");
    open_session(raw);
    raw.once = proto::OnceIds{client_id, 0, 0, 5};
    require(raw.call(proto::MkdirRequest{root_handle, "a", 0755}).response.status == 0, "mkdir a");
    // The same ids with another body: refused, and b is not made.
    require(raw.call(proto::MkdirRequest{root_handle, "b", 0755}).response.status == EIO,
            "a false retry is not EIO");
    // An older operation of the slot: EALREADY, nothing runs.
    raw.once = proto::OnceIds{client_id, 0, 0, 4};
    require(raw.call(proto::MkdirRequest{root_handle, "c", 0755}).response.status == EALREADY,
            "a stale xid is not EALREADY");
    auto c = cl.connect(setup_options());
    require(lookup(*c, "b") == no_handle && lookup(*c, "c") == no_handle,
            "a refused retry changed the namespace");
    // A newer one runs.
    raw.once = proto::OnceIds{client_id, 0, 0, 6};
    require(raw.call(proto::MkdirRequest{root_handle, "d", 0755}).response.status == 0, "mkdir d");
    // Ended sessions forget their replies.
    raw.once = {};
    require(raw.call(proto::SessionRequest{client_id, proto::session_end, ""}).response.status == 0,
            "session end");
    raw.once = proto::OnceIds{client_id, 0, 0, 6};
    require(raw.call(proto::MkdirRequest{root_handle, "d", 0755}).response.status == EBADR,
            "a retry after the session ended is not EBADR");
}

// The server exits right after committing; the retry goes to its successor.
ATF_TEST_CASE_WITHOUT_HEAD(across_restart);
ATF_TEST_CASE_BODY(across_restart)
{
    auto faults = std::make_unique<Faults>("crash_after_commit:create:1");
    test::Cluster cl = make_cluster();
    faults.reset();
    test::RawClient raw(cl.files, "meta0");
    open_session(raw);
    raw.once = proto::OnceIds{client_id, 3, 0, 77};
    const proto::RequestBody body = proto::CreateRequest{root_handle, "f", 0644, true, {}};
    require(!raw.call(body, lost_ms).answered, "answered although the server exited");
    require(cl.servers["meta0"]->stop(SIGKILL) == 9, "the server did not exit with status 9");
    cl.start("meta0");
    test::RawClient again(cl.files, "meta0");
    again.once = raw.once;
    test::Call retry;
    for (int i = 0; i < 50 && !retry.answered; ++i)
        retry = again.call(body, 200);
    require(retry.answered, "no reply from the restarted server: " + retry.error);
    require(retry.response.status == 0, "the retried exclusive create failed with errno " +
                                            std::to_string(retry.response.status));
    require(std::get<proto::CreateResponse>(retry.response.body).created,
            "the retry does not say it created the file");
    auto c = cl.connect(setup_options());
    require(lookup(*c, "f") == std::get<proto::CreateResponse>(retry.response.body).attr.handle,
            "another file than the first try's");
}

// libpvfs: a change opens the session on its own (the server's first
// answer is EBADR) and retries nothing else.
ATF_TEST_CASE_WITHOUT_HEAD(library_sessions);
ATF_TEST_CASE_BODY(library_sessions)
{
    test::Cluster cl = make_cluster();
    client::Options o = test::fresh_attrs();
    o.client_id = client_id;
    auto c = cl.connect(o);
    Attr a;
    for (int i = 0; i < 20; ++i)
        require_rc(c->mkdir(root_handle, "d" + std::to_string(i), 0755, a), 0, "mkdir");
    require_rc(c->rename(root_handle, "d0", root_handle, "e0"), 0, "rename");
    // Its slots are in use now: a raw request with its id and an old
    // xid is refused without running.
    test::RawClient raw(cl.files, "meta0");
    raw.once = proto::OnceIds{client_id, 0, 0, 1};
    require(raw.call(proto::MkdirRequest{root_handle, "x", 0755}).response.status == EALREADY,
            "a stale request of the library's session is not EALREADY");
}

namespace {

// Group commit (docs/metadata.md "Group commit"): four clients creating
// at once, with exactly-once ids, in one directory.  Returns how many
// batches waited for a missing writer (the server's debug log) after
// checking that every file is there.
std::size_t concurrent_creates(bool group_commit)
{
    const test::ScopedEnv debug("PVFS_DEBUG", "meta");
    test::Cluster cl(test::servers(1, 1), group_commit ? "" : "group_commit = false\n",
                     test::fresh_attrs());
    constexpr int writers = 4;
    constexpr int files = 150;
    std::vector<std::thread> threads;
    threads.reserve(writers);
    std::vector<int> failed(writers, 0);
    for (int w = 0; w < writers; ++w) {
        threads.emplace_back([&cl, &failed, w] {
            const auto c = cl.connect();
            Attr a;
            for (int i = 0; i < files; ++i) {
                if (c->create(root_handle, fmt::format("w{}.{}", w, i), 0644, true, {}, a) != 0)
                    ++failed[w];
            }
        });
    }
    for (std::thread &t : threads)
        t.join();
    for (int w = 0; w < writers; ++w)
        require(failed[w] == 0, fmt::format("writer {}: {} creates failed", w, failed[w]));
    const auto c = cl.connect();
    Attr a;
    for (int w = 0; w < writers; ++w) {
        for (int i = 0; i < files; ++i)
            require_rc(c->lookup(root_handle, fmt::format("w{}.{}", w, i), a), 0, "lookup");
    }
    const std::string log = cl.servers.at("meta0")->log_text();
    const std::string line = "group commit: waited";
    std::size_t n = 0;
    for (auto at = log.find(line); at != std::string::npos; at = log.find(line, at + 1))
        ++n;
    return n;
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(group_commit);
ATF_TEST_CASE_BODY(group_commit)
{
    require(concurrent_creates(true) > 0, "no batch of four writers waited for another");
}

ATF_TEST_CASE_WITHOUT_HEAD(group_commit_off);
ATF_TEST_CASE_BODY(group_commit_off)
{
    require(concurrent_creates(false) == 0, "a batch waited with group_commit = false");
}

// The metadata server is killed at the end of a group-commit wait, with a
// batch of creates from several clients queued and none committed (a test
// fault: it exits there).  The clients (hard, exactly-once ids) retry
// across the restart: every create returns 0 once, none EEXIST from a
// half-kept batch, and every file is there; what was acknowledged before
// the crash is still there after it.
ATF_TEST_CASE_WITHOUT_HEAD(group_commit_crash);
ATF_TEST_CASE_BODY(group_commit_crash)
{
    auto faults = std::make_unique<Faults>("crash_in_commit_wait:create:3");
    test::Cluster cl(test::servers(1, 1), "", test::fresh_attrs());
    faults.reset(); // the restarted server has none
    constexpr int writers = 4;
    constexpr int files = 120;
    std::vector<std::thread> threads;
    threads.reserve(writers);
    std::vector<std::string> failures(writers);
    for (int w = 0; w < writers; ++w) {
        threads.emplace_back([&cl, &failures, w] {
            client::Options o = test::fresh_attrs();
            o.hard = true;
            const auto c = cl.connect(o);
            Attr a;
            for (int i = 0; i < files; ++i) {
                const int rc =
                    c->create(root_handle, fmt::format("w{}.{}", w, i), 0644, true, {}, a);
                if (rc != 0 && failures[w].empty())
                    failures[w] = fmt::format("create w{}.{}: {}", w, i,
                                              std::generic_category().message(-rc));
            }
        });
    }
    const auto fired = [&] {
        return cl.servers.at("meta0")->log_text().find(
                   "TEST FAULT: exiting in group-commit wait") != std::string::npos;
    };
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!fired() && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const bool crashed = fired();
    const std::string first_log = cl.servers.at("meta0")->log_text();
    const int status = cl.servers.at("meta0")->stop(SIGKILL);
    cl.start("meta0");
    for (std::thread &t : threads)
        t.join();
    require(crashed, "the metadata server never waited for writers with creates queued");
    require(status == 9, fmt::format("the first metadata server ended with status {}", status));
    require(first_log.find("changes of 1 clients") == std::string::npos,
            "the batch lost in the wait held one client's change only: " + first_log);
    for (int w = 0; w < writers; ++w)
        require(failures[w].empty(), failures[w]);
    const auto c = cl.connect();
    Attr a;
    for (int w = 0; w < writers; ++w) {
        for (int i = 0; i < files; ++i)
            require_rc(c->lookup(root_handle, fmt::format("w{}.{}", w, i), a), 0,
                       fmt::format("lookup w{}.{}", w, i));
    }
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, retried_changes);
    ATF_ADD_TEST_CASE(tcs, wrong_retries);
    ATF_ADD_TEST_CASE(tcs, across_restart);
    ATF_ADD_TEST_CASE(tcs, library_sessions);
    ATF_ADD_TEST_CASE(tcs, group_commit);
    ATF_ADD_TEST_CASE(tcs, group_commit_off);
    ATF_ADD_TEST_CASE(tcs, group_commit_crash);
}
