// BMI between two hosts: network namespaces joined by a veth pair, addressed
// in the benchmarking range 198.18.0.0/15.  Needs root (skipped otherwise).
#include <atf-c++.hpp>

#include "bmi/bmi.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

// Each case has namespaces of its own, named after it: make check runs two
// cases at once, and with shared names one case's setup tore down the
// other's namespaces.  (Its cleanup runs in another process, so the name
// cannot be the pid.)
struct Hosts {
    std::string server;
    std::string client;
};
Hosts hosts_of(const std::string &test_case)
{
    return {"pvfs-bmi-" + test_case + "-a", "pvfs-bmi-" + test_case + "-b"};
}
const char *const server_ip = "198.18.0.1";

int sh(const std::string &cmd)
{
    return std::system(cmd.c_str()); // NOLINT(cert-env33-c,concurrency-mt-unsafe): test setup
}

void teardown(const Hosts &hosts)
{
    sh("ip netns del " + hosts.server + " 2>/dev/null");
    sh("ip netns del " + hosts.client + " 2>/dev/null");
}

void setup(const Hosts &hosts)
{
    teardown(hosts);
    const std::string &a = hosts.server;
    const std::string &b = hosts.client;
    const std::vector<std::string> cmds = {
        "ip netns add " + a,
        "ip netns add " + b,
        "ip link add veth-pvfs-a netns " + a + " type veth peer name veth-pvfs-b netns " + b,
        "ip -n " + a + " addr add " + server_ip + "/24 dev veth-pvfs-a",
        "ip -n " + b + " addr add 198.18.0.2/24 dev veth-pvfs-b",
        "ip -n " + a + " link set veth-pvfs-a up",
        "ip -n " + b + " link set veth-pvfs-b up",
        "ip -n " + a + " link set lo up",
        "ip -n " + b + " link set lo up",
    };
    for (const std::string &c : cmds) {
        if (sh(c) != 0)
            ATF_FAIL("setup failed: " + c);
    }
}

void enter(const std::string &ns)
{
    const std::string path = "/run/netns/" + ns;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0)
        ATF_FAIL("cannot enter netns " + path + ": " +
                 std::strerror(errno)); // NOLINT(concurrency-mt-unsafe)
    ::close(fd);
}

bmi::Options server_options()
{
    bmi::Options o;
    o.role = bmi::Role::server;
    o.listen = {std::string("tcp://") + server_ip + ":0"};
    return o;
}

// The server: echoes each unexpected request, then a 4 MiB rendezvous
// message on tag 2, then exits.  exit_early: dies after the first request
// instead of answering it.
[[noreturn]] void serve(const Hosts &hosts, int port_pipe, bool exit_early)
{
    enter(hosts.server);
    bmi::Bmi server(server_options());
    const bmi::ContextId ctx = server.open_context();
    const std::string url = server.listen_addresses().at(0);
    const int port = std::stoi(url.substr(url.rfind(':') + 1));
    if (::write(port_pipe, &port, sizeof port) != sizeof port)
        ::_exit(3);
    std::vector<bmi::UnexpectedMessage> req;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (server.testunexpected(req, 1, 100) == 0) {
        if (std::chrono::steady_clock::now() > deadline)
            ::_exit(4);
    }
    if (exit_early)
        ::_exit(0);
    const bmi::Addr client = req[0].peer();
    const bmi::Post echo =
        server.post_send(client, req[0].data().data(), req[0].data().size(), 1, nullptr, ctx);
    std::vector<unsigned char> big(std::size_t{4} << 20);
    for (std::size_t i = 0; i < big.size(); ++i)
        big[i] = static_cast<unsigned char>(i * 7);
    const bmi::Post bulk = server.post_send(client, big.data(), big.size(), 2, nullptr, ctx);
    bmi::Completion c;
    if (!echo.completed && (!server.test(echo.op, c, 20000) || c.error != 0))
        ::_exit(5);
    if (!bulk.completed && (!server.test(bulk.op, c, 20000) || c.error != 0))
        ::_exit(6);
    ::_exit(0);
}

pid_t start_server(const Hosts &hosts, bool exit_early, int &port)
{
    std::array<int, 2> fds{};
    ATF_REQUIRE_EQ(::pipe(fds.data()), 0);
    const pid_t pid = ::fork();
    ATF_REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(fds[0]);
        serve(hosts, fds[1], exit_early);
    }
    ::close(fds[1]);
    ATF_REQUIRE_EQ(::read(fds[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
    ::close(fds[0]);
    return pid;
}

int reap(pid_t pid)
{
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace

ATF_TEST_CASE_WITH_CLEANUP(two_hosts);
ATF_TEST_CASE_HEAD(two_hosts)
{
    set_md_var("descr", "request, echo and a 4 MiB rendezvous across a veth link");
    set_md_var("require.user", "root");
    set_md_var("timeout", "120");
}
ATF_TEST_CASE_BODY(two_hosts)
{
    const Hosts hosts = hosts_of("two_hosts");
    setup(hosts);
    int port = 0;
    const pid_t server = start_server(hosts, false, port);
    enter(hosts.client);
    bmi::Bmi client(bmi::Options{});
    const bmi::ContextId ctx = client.open_context();
    const bmi::Addr a =
        client.addr_lookup(std::string("tcp://") + server_ip + ":" + std::to_string(port));
    ATF_REQUIRE(a != bmi::no_addr);
    const std::string req(1000, 'q');
    std::vector<char> echo(2000);
    std::vector<unsigned char> big(std::size_t{4} << 20);
    const bmi::Post r1 = client.post_recv(a, echo.data(), echo.size(), 1, nullptr, ctx);
    const bmi::Post r2 = client.post_recv(a, big.data(), big.size(), 2, nullptr, ctx);
    const bmi::Post s = client.post_sendunexpected(a, req.data(), req.size(), 0, nullptr, ctx);
    ATF_REQUIRE_EQ(s.error, 0);
    bmi::Completion c;
    ATF_REQUIRE(client.test(r1.op, c, 20000));
    ATF_REQUIRE_EQ(c.error, 0);
    ATF_REQUIRE_EQ(std::string(echo.data(), c.actual_size), req);
    ATF_REQUIRE(client.test(r2.op, c, 20000));
    ATF_REQUIRE_EQ(c.error, 0);
    ATF_REQUIRE_EQ(c.actual_size, big.size());
    for (std::size_t i = 0; i < big.size(); ++i) {
        if (big[i] != static_cast<unsigned char>(i * 7))
            ATF_FAIL("bulk data corrupted at byte " + std::to_string(i));
    }
    ATF_REQUIRE_EQ(client.rev_lookup(a).rfind("tcp://198.18.0.1:", 0), 0U);
    ATF_REQUIRE_EQ(reap(server), 0);
}
ATF_TEST_CASE_CLEANUP(two_hosts)
{
    teardown(hosts_of("two_hosts"));
}

ATF_TEST_CASE_WITH_CLEANUP(server_dies);
ATF_TEST_CASE_HEAD(server_dies)
{
    set_md_var("descr", "the remote server dies before answering: the client's receive fails fast");
    set_md_var("require.user", "root");
    set_md_var("timeout", "120");
}
ATF_TEST_CASE_BODY(server_dies)
{
    const Hosts hosts = hosts_of("server_dies");
    setup(hosts);
    int port = 0;
    const pid_t server = start_server(hosts, true, port);
    enter(hosts.client);
    bmi::Bmi client(bmi::Options{});
    const bmi::ContextId ctx = client.open_context();
    const bmi::Addr a =
        client.addr_lookup(std::string("tcp://") + server_ip + ":" + std::to_string(port));
    std::vector<char> reply(100);
    const bmi::Post r = client.post_recv(a, reply.data(), reply.size(), 1, nullptr, ctx);
    const int v = 1;
    ATF_REQUIRE_EQ(client.post_sendunexpected(a, &v, sizeof v, 0, nullptr, ctx).error, 0);
    const auto start = std::chrono::steady_clock::now();
    bmi::Completion c;
    ATF_REQUIRE(client.test(r.op, c, 20000));
    ATF_REQUIRE_EQ(c.error, -ECONNRESET);
    ATF_REQUIRE(std::chrono::steady_clock::now() - start < 5s);
    ATF_REQUIRE_EQ(reap(server), 0);
}
ATF_TEST_CASE_CLEANUP(server_dies)
{
    teardown(hosts_of("server_dies"));
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, two_hosts);
    ATF_ADD_TEST_CASE(tcs, server_dies);
}
