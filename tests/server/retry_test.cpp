// libpvfs's retries on a real cluster (client.hpp Options::retry_timeout,
// hard): a change whose reply the metadata server loses is sent again and
// gets its first result; a write to a data server that is down for a while
// finishes once it is back, within the request timeout (soft) or however
// long it takes (hard); a soft call gives up at its timeout; a hard call
// waiting for a dead server ends at once when cancelled.
#include <atf-c++.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"

namespace {

using namespace pvfs;
using namespace std::chrono_literals;
using pvfs::test::require;
using pvfs::test::require_rc;
using Clock = std::chrono::steady_clock;

// PVFS_TEST_FAULTS for the servers started while it lives.
struct Faults : test::ScopedEnv {
    explicit Faults(const std::string &text) : test::ScopedEnv("PVFS_TEST_FAULTS", text) {}
};

client::Options options(bool hard = false)
{
    client::Options o = test::fresh_attrs();
    o.check_data_access = false;
    o.retry_timeout = 1s;
    o.hard = hard;
    return o;
}

std::shared_ptr<client::Loop> make_loop()
{
    std::string error;
    auto loop = client::Loop::create(error);
    require(loop != nullptr, "Loop::create: " + error);
    return loop;
}

// Runs `task` on `loop` and restarts server `name` of `cl` `delay` after
// the start, from this thread (a server started from another thread dies
// with that thread: the harness's PR_SET_PDEATHSIG).
template <typename T>
T run_restarting(client::Loop &loop, Task<T> task, test::Cluster &cl, const std::string &name,
                 std::chrono::seconds delay)
{
    const auto restart_at = Clock::now() + delay;
    bool restarted = false;
    task.start();
    while (!task.done()) {
        if (!restarted && Clock::now() >= restart_at) {
            cl.start(name);
            restarted = true;
        }
        loop.poll(50);
    }
    require(restarted, "the call ended before the server was restarted");
    return task.result();
}

} // namespace

// The metadata server commits a change and loses its reply; the library
// sends it again after retry_timeout and gets the first result: an unlink
// is 0 (not ENOENT), an exclusive create "created" (not EEXIST), a rename
// 0 (not ENOENT).
ATF_TEST_CASE_WITHOUT_HEAD(lost_replies);
ATF_TEST_CASE_BODY(lost_replies)
{
    const Faults faults("drop_reply:create:2,drop_reply:remove:1,drop_reply:rename:1");
    test::Cluster cl(test::servers(1, 1), "request_timeout = \"20s\"\n", options());
    auto c = cl.connect(options());
    Attr a;
    require_rc(c->create(root_handle, "first", 0644, true, {}, a), 0, "create first");
    bool created = false;
    const auto t0 = Clock::now();
    require_rc(c->create(root_handle, "f", 0644, true, {}, a, &created), 0,
               "an exclusive create whose reply was lost");
    require(created, "the retried create says the file existed");
    require(Clock::now() - t0 >= 900ms, "the create's reply was not lost (no retry happened)");
    require_rc(c->rename(root_handle, "f", root_handle, "g"), 0, "a rename whose reply was lost");
    require_rc(c->unlink(root_handle, "g"), 0, "an unlink whose reply was lost");
    Attr gone;
    require_rc(c->lookup(root_handle, "g", gone), -ENOENT, "g after the unlink");
    require(cl.servers["meta0"]->log_text().find("TEST FAULT: no reply to remove") !=
                std::string::npos,
            "the server did not drop the unlink's reply");
}

// A data server is down for 3 s in the middle of a write: the write waits
// and finishes (soft, 20 s timeout), the bytes are right.
ATF_TEST_CASE_WITHOUT_HEAD(server_down_then_back);
ATF_TEST_CASE_BODY(server_down_then_back)
{
    test::Cluster cl(test::servers(1, 1), "request_timeout = \"20s\"\n", options());
    auto loop = make_loop();
    client::Options o = options();
    o.loop = loop;
    auto c = cl.connect(o);
    loop->set_context(Credentials{0, 0, {}}, 0);
    Attr f;
    require_rc(c->create(root_handle, "f", 0644, true, {}, f), 0, "create");
    const auto data = test::pattern(std::size_t{1} << 20U, 7);
    require_rc(c->write(f.handle, 0, data), static_cast<std::int64_t>(data.size()), "write");
    require(cl.servers["data0"]->stop(SIGKILL) == 128 + SIGKILL, "kill data0");
    const auto t0 = Clock::now();
    const auto data2 = test::pattern(std::size_t{1} << 20U, 8);
    const std::int64_t w = run_restarting(*loop, c->co_write(f.handle, 0, data2), cl, "data0", 3s);
    require_rc(w, static_cast<std::int64_t>(data2.size()), "a write while data0 was down");
    require(Clock::now() - t0 >= 2s, "the write did not wait for the server");
    std::vector<std::byte> got(data2.size());
    require_rc(c->read(f.handle, 0, got), static_cast<std::int64_t>(got.size()), "read");
    require(got == data2, "the bytes after the outage");
}

// Soft: a server down longer than the request timeout fails the call at
// the timeout.  Hard: the call waits for it.
ATF_TEST_CASE_WITHOUT_HEAD(soft_and_hard);
ATF_TEST_CASE_BODY(soft_and_hard)
{
    test::Cluster cl(test::servers(1, 1), "request_timeout = \"2s\"\n", options());
    auto loop = make_loop();
    client::Options so = options();
    so.loop = loop;
    client::Options ho = options(true);
    ho.loop = loop;
    auto soft = cl.connect(so);
    auto hard = cl.connect(ho);
    loop->set_context(Credentials{0, 0, {}}, 0);
    Attr f;
    require_rc(soft->create(root_handle, "f", 0644, true, {}, f), 0, "create");
    const auto data = test::pattern(std::size_t{64} << 10U, 9);
    require(cl.servers["data0"]->stop(SIGKILL) == 128 + SIGKILL, "kill data0");
    const auto t0 = Clock::now();
    const std::int64_t ws = soft->write(f.handle, 0, data);
    const auto soft_took = Clock::now() - t0;
    require(ws == -ETIMEDOUT || ws == -ECONNREFUSED,
            "a soft write to a dead server: " + std::to_string(ws));
    // It gives up when the next try would come after the 2 s timeout.
    require(soft_took >= 1s && soft_took < 6s, "the soft write did not end at its timeout");
    const auto t1 = Clock::now();
    const std::int64_t wh =
        run_restarting(*loop, hard->co_write(f.handle, 0, data), cl, "data0", 5s);
    require_rc(wh, static_cast<std::int64_t>(data.size()), "a hard write across a 5 s outage");
    require(Clock::now() - t1 >= 4s, "the hard write did not wait");
}

// A hard call waiting for a dead server ends when cancelled, at once.
ATF_TEST_CASE_WITHOUT_HEAD(hard_cancel);
ATF_TEST_CASE_BODY(hard_cancel)
{
    auto loop = make_loop();
    client::Options o = options(true);
    o.loop = loop;
    test::Cluster cl(test::servers(1, 1), "request_timeout = \"2s\"\n", options());
    auto c = cl.connect(o);
    Attr f;
    require_rc(c->create(root_handle, "f", 0644, true, {}, f), 0, "create");
    require(cl.servers["data0"]->stop(SIGKILL) == 128 + SIGKILL, "kill data0");
    const auto data = test::pattern(std::size_t{64} << 10U, 10);
    loop->set_context(Credentials{0, 0, {}}, 7);
    Task<std::int64_t> w = c->co_write(f.handle, 0, data);
    w.start();
    const auto until = Clock::now() + 5s;
    while (Clock::now() < until)
        loop->poll(100);
    require(!w.done(), "a hard write to a dead server ended by itself");
    const auto t0 = Clock::now();
    require(loop->cancel(7) > 0, "nothing to cancel");
    while (!w.done() && Clock::now() - t0 < 5s)
        loop->poll(100);
    require(w.done(), "the cancelled hard write did not end");
    require_rc(w.result(), -ECANCELED, "the cancelled hard write");
    require(Clock::now() - t0 < 1s, "the cancel took too long");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, lost_replies);
    ATF_ADD_TEST_CASE(tcs, server_down_then_back);
    ATF_ADD_TEST_CASE(tcs, soft_and_hard);
    ATF_ADD_TEST_CASE(tcs, hard_cancel);
}
