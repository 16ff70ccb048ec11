// A cluster whose servers are really apart: the metadata server and two
// data servers each in its own network namespace, the client (this test
// process) in a fourth, all on one bridge in a fifth, addressed in the
// benchmarking range 198.18.0.0/15.  Striped I/O across them, then a data
// server killed and a data server cut off: reads must fail with an errno
// within the request timeout, never hang.  Needs root and ip(8).
#include <atf-c++.hpp>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"
#include "pvfs/unique_fd.hpp"

namespace {

using namespace pvfs;
using pvfs::test::require;
using pvfs::test::require_rc;
using Clock = std::chrono::steady_clock;

constexpr auto request_timeout = std::chrono::milliseconds(3000);
// Setting up a request and noticing the failure may take a little longer.
constexpr auto failure_deadline = request_timeout + std::chrono::milliseconds(3000);
const char *const netns_list = "netns.list"; // in the work directory, for the cleanup

int sh(const std::string &cmd)
{
    return std::system(cmd.c_str()); // NOLINT(cert-env33-c,concurrency-mt-unsafe): test setup
}

void delete_listed_namespaces()
{
    std::ifstream in(netns_list);
    for (std::string ns; std::getline(in, ns);)
        if (!ns.empty())
            sh("ip netns del " + ns + " 2>/dev/null");
}

bool have_ip()
{
    return sh("command -v ip >/dev/null 2>&1") == 0;
}

// One namespace per server and one for the client, each with a veth pair
// whose other end is a port of the bridge in the bridge namespace.  Every
// name has this test's pid, so parallel runs do not clash; all are deleted
// on destruction and, should the test die, by its cleanup (netns.list).
class Network {
public:
    struct Host {
        std::string ns;
        std::string ip;
        std::string bridge_port;
    };

    Network()
    {
        const std::string tag = "pvtb" + std::to_string(::getpid());
        bridge_ns_ = tag + "br";
        for (const auto &[role, last_octet] : std::vector<std::pair<std::string, int>>{
                 {"meta0", 1}, {"data0", 2}, {"data1", 3}, {"client", 10}})
            hosts_[role] = Host{tag + role, "198.19.7." + std::to_string(last_octet),
                                "p" + std::to_string(last_octet)};
        {
            std::ofstream list(netns_list);
            list << bridge_ns_ << "\n";
            for (const auto &[role, h] : hosts_)
                list << h.ns << "\n";
        }
        try {
            build();
        } catch (...) {
            delete_listed_namespaces();
            throw;
        }
    }

    ~Network() { delete_listed_namespaces(); }
    Network(const Network &) = delete;
    Network &operator=(const Network &) = delete;
    Network(Network &&) = delete;
    Network &operator=(Network &&) = delete;

    [[nodiscard]] const Host &host(const std::string &role) const { return hosts_.at(role); }

    // Drops every packet to and from `role` (its bridge port goes down).
    void cut_off(const std::string &role) const
    {
        run("ip -n " + bridge_ns_ + " link set " + hosts_.at(role).bridge_port + " down");
    }

    // Moves the calling process (it has one thread) into the client's namespace.
    void enter_client() const
    {
        const std::string path = "/run/netns/" + hosts_.at("client").ns;
        const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd.valid() || ::setns(fd.get(), CLONE_NEWNET) != 0)
            ATF_FAIL("cannot enter " + path + ": " +
                     std::strerror(errno)); // NOLINT(concurrency-mt-unsafe)
    }

private:
    void build() const
    {
        run("ip netns add " + bridge_ns_);
        run("ip -n " + bridge_ns_ + " link add br0 type bridge");
        run("ip -n " + bridge_ns_ + " link set br0 up");
        for (const auto &[role, h] : hosts_) {
            run("ip netns add " + h.ns);
            run("ip link add v0 netns " + h.ns + " type veth peer name " + h.bridge_port +
                " netns " + bridge_ns_);
            run("ip -n " + bridge_ns_ + " link set " + h.bridge_port + " master br0");
            run("ip -n " + bridge_ns_ + " link set " + h.bridge_port + " up");
            run("ip -n " + h.ns + " addr add " + h.ip + "/24 dev v0");
            run("ip -n " + h.ns + " link set v0 up");
            run("ip -n " + h.ns + " link set lo up");
        }
    }

    static void run(const std::string &cmd)
    {
        if (sh(cmd) != 0)
            ATF_FAIL("network setup failed: " + cmd);
    }

    std::string bridge_ns_;
    std::map<std::string, Host> hosts_;
};

// Each server in its own namespace of `n`, port 7000.
struct Cluster : test::Cluster {
    explicit Cluster(const Network &n)
        : test::Cluster(test::servers(1, 2),
                        {"tcp://" + n.host("meta0").ip + ":7000",
                         "tcp://" + n.host("data0").ip + ":7000",
                         "tcp://" + n.host("data1").ip + ":7000"},
                        "stripe_size = \"64KiB\"\nrequest_timeout = \"3s\"\n",
                        {{"ip", "netns", "exec", n.host("meta0").ns},
                         {"ip", "netns", "exec", n.host("data0").ns},
                         {"ip", "netns", "exec", n.host("data1").ns}},
                        test::fresh_attrs())
    {
    }
};

bool skip_unless_possible()
{
    if (::geteuid() != 0) {
        ATF_SKIP("needs root (network namespaces)");
        return false;
    }
    if (!have_ip()) {
        ATF_SKIP("needs ip(8) (iproute2)");
        return false;
    }
    return true;
}

bool object_listed(client::Client &c, std::uint32_t data_index, Handle h)
{
    client::HandlePage page;
    std::uint64_t cookie = 0;
    do {
        require_rc(c.list_objects(data_index, cookie, 1000, page), 0, "list_objects");
        if (std::find(page.handles.begin(), page.handles.end(), h) != page.handles.end())
            return true;
        cookie = page.next_cookie;
    } while (!page.eof);
    return false;
}

// A 1 MiB file over both data servers, written and read back once.
Attr striped_file(client::Client &c, const std::string &name)
{
    Attr a;
    require_rc(c.create(root_handle, name, 0644, true, Layout{64U * 1024U, 2, 0}, a), 0,
               "create " + name);
    require_rc(c.write(a.handle, 0, test::pattern(std::size_t{1} << 20U, 5)), 1 << 20,
               "write " + name);
    return a;
}

// A read that must fail, soon, with an errno that says why.
void require_read_fails_fast(client::Client &c, Handle h, const std::string &what)
{
    std::vector<std::byte> buf(std::size_t{1} << 20U);
    const auto start = Clock::now();
    const std::int64_t rc = c.read(h, 0, buf);
    const auto took = Clock::now() - start;
    require(rc < 0, what + ": the read succeeded (" + std::to_string(rc) + ")");
    const std::vector<std::int64_t> expected{-ETIMEDOUT, -ECONNREFUSED, -ECONNRESET, -EPIPE,
                                             -EHOSTUNREACH};
    require(std::find(expected.begin(), expected.end(), rc) != expected.end(),
            what + ": unexpected error " + client::error_text(rc));
    require(
        took < failure_deadline,
        what + ": the read took " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
            " ms, more than the request timeout allows");
}

} // namespace

ATF_TEST_CASE_WITH_CLEANUP(striped_io_across_namespaces);
ATF_TEST_CASE_HEAD(striped_io_across_namespaces)
{
    set_md_var("descr", "servers in their own network namespaces: striped I/O, statfs, remove, "
                        "and a data server killed with SIGKILL");
}
ATF_TEST_CASE_BODY(striped_io_across_namespaces)
{
    if (!skip_unless_possible())
        return;
    const Network net;
    Cluster cl(net);
    net.enter_client();
    auto c = cl.connect();

    Attr dir;
    require_rc(c->mkdir(root_handle, "dir", 0755, dir), 0, "mkdir /dir");
    Attr f;
    require_rc(c->create(dir.handle, "big", 0644, true, Layout{64U * 1024U, 2, 0}, f), 0,
               "create /dir/big");
    require(f.layout.stripe_count == 2, "/dir/big is not striped over both data servers");
    constexpr std::size_t size = std::size_t{8} << 20U;
    const std::vector<std::byte> data = test::pattern(size, 11);
    require_rc(c->write(f.handle, 0, data), static_cast<std::int64_t>(size), "write 8 MiB");
    require_rc(c->fsync(f.handle), 0, "fsync");
    auto fresh = cl.connect();
    Attr back;
    require_rc(fresh->lookup(dir.handle, "big", back), 0, "lookup /dir/big");
    require(back.handle == f.handle && back.size == size,
            "size over the network: " + std::to_string(back.size));
    std::vector<std::byte> got(size + 4096);
    require_rc(fresh->read(back.handle, 0, got), static_cast<std::int64_t>(size), "read 8 MiB");
    got.resize(size);
    require(got == data, "the 8 MiB read back differ");
    require(object_listed(*c, 0, f.handle) && object_listed(*c, 1, f.handle),
            "the file has no object on one of the data servers");

    client::StatFs st;
    require_rc(c->statfs(st), 0, "statfs");
    require(st.total_bytes > 0 && st.free_bytes <= st.total_bytes &&
                st.avail_bytes <= st.free_bytes,
            "statfs bytes");
    require(st.total_objects > 0 && st.free_objects < st.total_objects, "statfs objects");

    require_rc(c->unlink(dir.handle, "big"), 0, "unlink /dir/big");
    require_rc(c->rmdir(root_handle, "dir"), 0, "rmdir /dir");
    require_rc(c->lookup(root_handle, "dir", back), -ENOENT, "lookup /dir after rmdir");
    require(!object_listed(*c, 0, f.handle) && !object_listed(*c, 1, f.handle),
            "the removed file's objects are still there");

    const Attr victim = striped_file(*c, "victim");
    require(cl.servers["data1"]->stop(SIGKILL) == 128 + SIGKILL, "kill -9 data1");
    require_read_fails_fast(*c, victim.handle, "read with data1 killed");
    // The metadata server is still there (a lookup would ask data1 for the size).
    std::vector<client::DirEntry> entries;
    bool eof = false;
    require_rc(c->readdir(root_handle, 0, 100, entries, eof), 0, "readdir with data1 killed");
    require(entries.size() == 1 && entries[0].name == "victim", "/ with data1 killed");
}
ATF_TEST_CASE_CLEANUP(striped_io_across_namespaces)
{
    delete_listed_namespaces();
}

ATF_TEST_CASE_WITH_CLEANUP(cut_off_server_times_out);
ATF_TEST_CASE_HEAD(cut_off_server_times_out)
{
    set_md_var("descr", "a data server whose packets are dropped: reads fail with ETIMEDOUT "
                        "within the request timeout");
}
ATF_TEST_CASE_BODY(cut_off_server_times_out)
{
    if (!skip_unless_possible())
        return;
    const Network net;
    Cluster cl(net);
    net.enter_client();
    auto c = cl.connect();
    const Attr f = striped_file(*c, "f");
    net.cut_off("data0");
    std::vector<std::byte> buf(std::size_t{1} << 20U);
    const auto start = Clock::now();
    const std::int64_t rc = c->read(f.handle, 0, buf);
    const auto took = Clock::now() - start;
    require_rc(rc, -ETIMEDOUT, "read with data0 cut off");
    require(
        took >= request_timeout - std::chrono::milliseconds(200) && took < failure_deadline,
        "the read failed after " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
            " ms, not at the 3 s request timeout");
}
ATF_TEST_CASE_CLEANUP(cut_off_server_times_out)
{
    delete_listed_namespaces();
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, striped_io_across_namespaces);
    ATF_ADD_TEST_CASE(tcs, cut_off_server_times_out);
}
