// libpvfs's asynchronous core (client.hpp: co_X operations on a Loop) on a
// real cluster: many operations in flight from one thread, each keeping
// its own caller's credentials across its waits; several Clients on one
// Loop; an operation stuck on a stopped server cancelled by its id, and
// one left alone timing out -- neither stops the others; connecting
// (co_connect) to a server that does not answer while the loop's other
// tasks go on.
#include <atf-c++.hpp>
#include <fmt/format.h>

#include <csignal>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"
#include "pvfs/config.hpp"

namespace {

using namespace pvfs;
using namespace std::chrono_literals;
using pvfs::test::require;
using pvfs::test::require_rc;
using Clock = std::chrono::steady_clock;

struct Cluster : test::Cluster {
    explicit Cluster(const std::string &timeout = "20s")
        : test::Cluster(test::servers(1, 2),
                        "stripe_size = \"64KiB\"\nrequest_timeout = \"" + timeout + "\"\n")
    {
    }

    [[nodiscard]] std::unique_ptr<client::Client>
    connect(const std::shared_ptr<client::Loop> &loop) const
    {
        client::Options o = test::fresh_attrs();
        o.check_data_access = false;
        o.loop = loop;
        return test::Cluster::connect(o);
    }
};

std::shared_ptr<client::Loop> make_loop()
{
    std::string error;
    auto loop = client::Loop::create(error);
    require(loop != nullptr, "Loop::create: " + error);
    return loop;
}

Credentials user(std::uint32_t uid)
{
    Credentials c;
    c.uid = uid;
    c.gid = uid;
    return c;
}

// Polls until every task is done or `limit` passes.
template <typename T>
void run_all(client::Loop &loop, std::vector<Task<T>> &tasks, std::chrono::seconds limit)
{
    const auto until = Clock::now() + limit;
    auto all_done = [&] {
        return std::ranges::all_of(tasks, [](const auto &t) { return t.done(); });
    };
    while (!all_done()) {
        require(Clock::now() < until, "the tasks did not finish in time");
        loop.poll(100);
    }
}

// "tcp://host:port/fsname" of one server of a cluster.
std::string url_of(const test::Cluster &cl, const std::string &server)
{
    const config::Result r = config::load_file(cl.files.config_path);
    require(r.ok(), "config: " + r.error);
    for (const config::Server &s : r.cluster.servers) {
        if (s.name == server)
            return s.addresses.at(0) + "/" + r.cluster.fs_name;
    }
    throw std::runtime_error("no server " + server);
}

client::Options url_options(const std::string &url, const std::string &key_path,
                            const std::shared_ptr<client::Loop> &loop)
{
    client::Options o = test::fresh_attrs();
    o.target = url;
    o.key_file = key_path;
    o.use_process_credentials = false;
    o.request_timeout = 8s;
    o.loop = loop;
    return o;
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(many_in_flight_keep_their_callers);
ATF_TEST_CASE_BODY(many_in_flight_keep_their_callers)
{
    Cluster cl;
    auto loop = make_loop();
    auto c = cl.connect(loop);
    Attr dir;
    loop->set_context(user(0), 0);
    require_rc(c->mkdir(root_handle, "d", 0777, dir), 0, "mkdir");

    // 200 tasks, each as another user: a getattr, then a create, a write,
    // a getattr and a read of its own file, all interleaved.
    constexpr std::size_t n = 200;
    std::vector<std::string> names(n);
    std::vector<Attr> attrs(n);
    std::vector<std::vector<std::byte>> data(n);
    std::vector<std::vector<std::byte>> back(n);
    std::vector<Task<int>> tasks;
    auto one = [&](std::size_t i) -> Task<int> {
        // A wait first: the create runs after the task resumed.
        Attr parent;
        if (const int rc = co_await c->co_getattr(dir.handle, parent); rc != 0)
            co_return rc;
        if (const int rc = co_await c->co_create(dir.handle, names[i], 0600, true, {}, attrs[i]);
            rc != 0)
            co_return rc;
        const std::int64_t w = co_await c->co_write(attrs[i].handle, 0, data[i]);
        if (w != static_cast<std::int64_t>(data[i].size()))
            co_return w < 0 ? static_cast<int>(w) : -EIO;
        Attr a;
        if (const int rc = co_await c->co_getattr(attrs[i].handle, a); rc != 0)
            co_return rc;
        attrs[i] = a;
        const std::int64_t r = co_await c->co_read(attrs[i].handle, 0, back[i]);
        co_return r == static_cast<std::int64_t>(back[i].size()) ? 0 : -EIO;
    };
    for (std::size_t i = 0; i < n; ++i) {
        names[i] = "f" + std::to_string(i);
        data[i] = test::pattern(1000 + 97 * i, static_cast<unsigned>(i));
        back[i].resize(data[i].size());
        loop->set_context(user(static_cast<std::uint32_t>(1000 + i)), 0);
        tasks.push_back(one(i));
        tasks.back().start();
    }
    run_all(*loop, tasks, 120s);
    for (std::size_t i = 0; i < n; ++i) {
        require_rc(tasks[i].result(), 0, "task " + std::to_string(i));
        require(attrs[i].uid == 1000 + i, "file " + std::to_string(i) + " belongs to " +
                                              std::to_string(attrs[i].uid) +
                                              ": the task lost its caller across a wait");
        require(attrs[i].size == data[i].size(), "size of file " + std::to_string(i));
        require(back[i] == data[i], "data of file " + std::to_string(i));
    }
    require(loop->peak_active() >= 64,
            "only " + std::to_string(loop->peak_active()) + " operations were in flight at once");
    require(loop->active() == 0, "requests left in flight");
}

ATF_TEST_CASE_WITHOUT_HEAD(clients_share_a_loop);
ATF_TEST_CASE_BODY(clients_share_a_loop)
{
    Cluster cl;
    auto loop = make_loop();
    auto a = cl.connect(loop);
    auto b = cl.connect(loop);
    loop->set_context(user(0), 0);
    Attr made;
    require_rc(a->mkdir(root_handle, "shared", 0755, made), 0, "mkdir through a");
    std::vector<Task<int>> tasks;
    std::vector<Attr> seen(2);
    tasks.push_back(a->co_lookup(root_handle, "shared", seen[0]));
    tasks.push_back(b->co_lookup(root_handle, "shared", seen[1]));
    for (auto &t : tasks)
        t.start();
    run_all(*loop, tasks, 30s);
    require_rc(tasks[0].result(), 0, "lookup through a");
    require_rc(tasks[1].result(), 0, "lookup through b");
    require(seen[0].handle == made.handle && seen[1].handle == made.handle,
            "the two clients see different objects");
}

ATF_TEST_CASE_WITHOUT_HEAD(cancel_stops_one_operation);
ATF_TEST_CASE_BODY(cancel_stops_one_operation)
{
    Cluster cl;
    auto loop = make_loop();
    auto c = cl.connect(loop);
    loop->set_context(user(0), 0);
    Attr f;
    require_rc(c->create(root_handle, "f", 0644, true, {}, f), 0, "create");
    const auto data = test::pattern(std::size_t{256} * 1024, 3);
    require_rc(c->write(f.handle, 0, data), static_cast<std::int64_t>(data.size()), "write");

    // A data server stops answering: a write to it hangs until cancelled,
    // while a metadata operation of another caller goes on.
    require(::kill(cl.servers["data0"]->pid(), SIGSTOP) == 0, "SIGSTOP data0");
    std::vector<Task<std::int64_t>> writes;
    loop->set_context(user(0), 42);
    writes.push_back(c->co_write(f.handle, 0, data));
    writes.back().start();
    std::vector<Task<int>> others;
    Attr root;
    loop->set_context(user(0), 43);
    others.push_back(c->co_getattr(root_handle, root));
    others.back().start();
    run_all(*loop, others, 20s);
    require_rc(others[0].result(), 0, "getattr while a write hangs");
    for (int i = 0; i < 5; ++i)
        loop->poll(100);
    require(!writes[0].done(), "the write to a stopped server finished");
    const auto cancelled_at = Clock::now();
    require(loop->cancel(42) > 0, "cancel(42) found nothing to stop");
    require(loop->cancel(42) == 0, "a second cancel found something");
    run_all(*loop, writes, 10s);
    require_rc(writes[0].result(), -ECANCELED, "the cancelled write");
    require(Clock::now() - cancelled_at < 6s, "the cancel took too long");

    require(::kill(cl.servers["data0"]->pid(), SIGCONT) == 0, "SIGCONT data0");
    loop->set_context(user(0), 0);
    require_rc(c->write(f.handle, 0, data), static_cast<std::int64_t>(data.size()),
               "a write after the server resumed");
    std::vector<std::byte> back(data.size());
    require_rc(c->read(f.handle, 0, back), static_cast<std::int64_t>(back.size()), "read");
    require(back == data, "data after the cancelled write");
}

ATF_TEST_CASE_WITHOUT_HEAD(timeout_ends_only_its_operation);
ATF_TEST_CASE_BODY(timeout_ends_only_its_operation)
{
    Cluster cl("2s");
    auto loop = make_loop();
    auto c = cl.connect(loop);
    loop->set_context(user(0), 0);
    Attr f;
    require_rc(c->create(root_handle, "f", 0644, true, {}, f), 0, "create");
    Attr dir;
    require_rc(c->mkdir(root_handle, "dir", 0755, dir), 0, "mkdir");
    const auto data = test::pattern(std::size_t{200} * 1024, 5);
    require(::kill(cl.servers["data1"]->pid(), SIGSTOP) == 0, "SIGSTOP data1");
    std::vector<Task<std::int64_t>> writes;
    writes.push_back(c->co_write(f.handle, 0, data));
    writes.back().start();
    const auto started = Clock::now();
    // Metadata keeps working meanwhile, several times over (a directory:
    // a file's size would ask the stopped server).
    for (int i = 0; i < 5; ++i) {
        std::vector<Task<int>> lookups;
        Attr a;
        lookups.push_back(c->co_lookup(root_handle, "dir", a));
        lookups.back().start();
        run_all(*loop, lookups, 10s);
        require_rc(lookups[0].result(), 0, "lookup during the stuck write");
    }
    run_all(*loop, writes, 15s);
    require_rc(writes[0].result(), -ETIMEDOUT, "the write to a stopped server");
    const auto took = Clock::now() - started;
    require(took >= 1900ms && took < 9s,
            "the timeout came after " + std::to_string(took / 1ms) + " ms, not about 2 s");
    require(::kill(cl.servers["data1"]->pid(), SIGCONT) == 0, "SIGCONT data1");
}

ATF_TEST_CASE_WITHOUT_HEAD(connect_does_not_stall_the_loop);
ATF_TEST_CASE_BODY(connect_does_not_stall_the_loop)
{
    // meta1 will not answer; the root, on meta0, stays reachable.
    test::Cluster cl(test::servers(2, 2), "request_timeout = \"20s\"\n");
    auto loop = make_loop();
    client::Options co = test::fresh_attrs();
    co.loop = loop;
    auto c = cl.connect(co);
    // The server a URL mount asks for the config stops answering: the
    // connection is accepted, the request never answered.
    require(::kill(cl.servers["meta1"]->pid(), SIGSTOP) == 0, "SIGSTOP meta1");
    std::string stuck_error;
    std::vector<Task<std::unique_ptr<client::Client>>> stuck;
    loop->set_context(user(0), 77);
    const auto started = Clock::now();
    stuck.push_back(client::Client::co_connect(
        url_options(url_of(cl, "meta1"), cl.files.key_path, loop), stuck_error));
    stuck.back().start();
    require(!stuck[0].done(), "the connect to a stopped server finished at once");

    // Other tasks of the loop go on meanwhile, each quickly.
    loop->set_context(user(0), 0);
    for (int i = 0; i < 5; ++i) {
        std::vector<Task<int>> others;
        Attr root;
        const auto t0 = Clock::now();
        others.push_back(c->co_getattr(root_handle, root));
        others.back().start();
        run_all(*loop, others, 5s);
        require_rc(others[0].result(), 0, "getattr while a connect waits");
        require(Clock::now() - t0 < 2s, "a getattr took " +
                                            std::to_string((Clock::now() - t0) / 1ms) +
                                            " ms while a connect waited");
    }
    // And another connect, to a live server, on the same loop.
    std::string live_error;
    std::vector<Task<std::unique_ptr<client::Client>>> fine;
    fine.push_back(client::Client::co_connect(
        url_options(url_of(cl, "meta0"), cl.files.key_path, loop), live_error));
    fine.back().start();
    run_all(*loop, fine, 5s);
    const auto other = fine[0].result();
    require(other != nullptr, "co_connect to a live server: " + live_error);
    require(other->cluster().fs_name == c->cluster().fs_name, "the live connect's config");
    require(!stuck[0].done(), "the connect to a stopped server finished");
    require(Clock::now() - started < 8s, "the other tasks took the connect's whole timeout");

    // Cancelled by its context's id, it ends with the sync connect's message.
    const auto cancelled_at = Clock::now();
    require(loop->cancel(77) > 0, "cancel(77) found no request of the connect");
    run_all(*loop, stuck, 10s);
    require(Clock::now() - cancelled_at < 6s, "the cancel took too long");
    require(stuck[0].result() == nullptr, "a cancelled connect made a client");
    require(stuck_error.find("cannot get the config: Operation canceled") != std::string::npos,
            "the cancelled connect's error: " + stuck_error);
    require(::kill(cl.servers["meta1"]->pid(), SIGCONT) == 0, "SIGCONT meta1");
}

ATF_TEST_CASE_WITHOUT_HEAD(connect_refused);
ATF_TEST_CASE_BODY(connect_refused)
{
    Cluster cl;
    auto loop = make_loop();
    // Nobody listens there: both connects fail at once, with one message.
    const std::string url = fmt::format("tcp://127.0.0.1:{}/fs", test::free_port());
    std::string error;
    std::vector<Task<std::unique_ptr<client::Client>>> tasks;
    const auto t0 = Clock::now();
    tasks.push_back(client::Client::co_connect(url_options(url, cl.files.key_path, loop), error));
    tasks.back().start();
    run_all(*loop, tasks, 5s);
    require(tasks[0].result() == nullptr, "co_connect to a closed port made a client");
    require(Clock::now() - t0 < 4s, "co_connect to a closed port took its timeout");
    std::string sync_error;
    require(client::Client::connect(url_options(url, cl.files.key_path, loop), sync_error) ==
                nullptr,
            "connect to a closed port made a client");
    require(error.find("cannot get the config") != std::string::npos && error == sync_error,
            "co_connect said '" + error + "', connect '" + sync_error + "'");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, many_in_flight_keep_their_callers);
    ATF_ADD_TEST_CASE(tcs, clients_share_a_loop);
    ATF_ADD_TEST_CASE(tcs, cancel_stops_one_operation);
    ATF_ADD_TEST_CASE(tcs, timeout_ends_only_its_operation);
    ATF_ADD_TEST_CASE(tcs, connect_does_not_stall_the_loop);
    ATF_ADD_TEST_CASE(tcs, connect_refused);
}
