// Tests of pvfs-genconfig, run as a program (the path of the built binary
// comes from CMake): the files it writes and their modes, --force, the
// --local cluster and its ports, explicit servers, and usage errors
// (exit status 2 and a message).
#include <atf-c++.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pvfs/config.hpp"
#include "pvfs/unique_fd.hpp"

namespace config = pvfs::config;

namespace {

void require_msg(bool ok, const std::string &why)
{
    if (!ok) {
        ATF_FAIL(why);
    }
}

std::string read_file(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

unsigned mode_of(const std::string &path)
{
    struct stat st {};
    ATF_REQUIRE(::stat(path.c_str(), &st) == 0);
    return st.st_mode & 07777U;
}

struct Run {
    int status = -1; // exit status; -1 when it did not exit normally
    std::string out;
    std::string err;

    [[nodiscard]] std::string describe() const
    {
        return fmt::format("status {}\nstdout:\n{}\nstderr:\n{}", status, out, err);
    }
};

Run genconfig(const std::vector<std::string> &args)
{
    const pid_t pid = ::fork();
    ATF_REQUIRE(pid >= 0);
    if (pid == 0) {
        const pvfs::UniqueFd out(::open("gen.out", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        const pvfs::UniqueFd err(::open("gen.err", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!out.valid() || !err.valid() || ::dup2(out.get(), 1) < 0 || ::dup2(err.get(), 2) < 0) {
            ::_exit(127);
        }
        std::vector<std::string> argv_strings{PVFS_GENCONFIG};
        argv_strings.insert(argv_strings.end(), args.begin(), args.end());
        std::vector<char *> argv;
        argv.reserve(argv_strings.size() + 1);
        for (std::string &s : argv_strings) {
            argv.push_back(s.data());
        }
        argv.push_back(nullptr);
        ::execv(PVFS_GENCONFIG, argv.data());
        ::_exit(127);
    }
    int wstatus = 0;
    ATF_REQUIRE(::waitpid(pid, &wstatus, 0) == pid);
    Run r;
    r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    r.out = read_file("gen.out");
    r.err = read_file("gen.err");
    return r;
}

std::string cwd()
{
    return std::filesystem::current_path().string();
}

config::Cluster load(const std::string &path)
{
    const config::Result r = config::load_file(path);
    require_msg(r.ok(), "the written config does not load: " + r.error);
    return r.cluster;
}

std::size_t port_of(const std::string &url)
{
    const config::Address a = config::parse_address(url);
    require_msg(a.ok(), url + ": " + a.error);
    return a.port;
}

void expect_usage_error(const std::vector<std::string> &args, const std::string &message)
{
    const Run r = genconfig(args);
    require_msg(r.status == 2, "expected exit status 2: " + r.describe());
    require_msg(r.err.find(message) != std::string::npos,
                fmt::format("stderr does not say '{}': {}", message, r.describe()));
    require_msg(!std::filesystem::exists("c.toml"), "a config was written anyway");
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(local_cluster);
ATF_TEST_CASE_BODY(local_cluster)
{
    ::umask(0);
    const Run r = genconfig({"--local", "3", "--storage", "st", "--out", "c.toml"});
    require_msg(r.status == 0, r.describe());
    ATF_REQUIRE_EQ(mode_of("c.toml"), 0644U);
    ATF_REQUIRE_EQ(mode_of("c.key"), 0600U);
    ATF_REQUIRE_EQ(read_file("c.key").size(), 65U);
    // It says what it wrote.
    ATF_REQUIRE(r.out.find("wrote " + cwd() + "/c.toml") != std::string::npos);
    ATF_REQUIRE(r.out.find("wrote " + cwd() + "/c.key") != std::string::npos);

    const config::Cluster c = load("c.toml");
    ATF_REQUIRE_EQ(c.fs_name, "pvfs");
    ATF_REQUIRE_EQ(c.key_file, cwd() + "/c.key");
    ATF_REQUIRE_EQ(c.servers.size(), 4U);
    ATF_REQUIRE_EQ(c.metadata_servers().size(), 1U);
    ATF_REQUIRE_EQ(c.data_servers().size(), 3U);
    ATF_REQUIRE_EQ(c.defaults.default_layout.stripe_count, 3U);
    std::set<std::size_t> ports;
    for (const config::Server &s : c.servers) {
        ATF_REQUIRE_EQ(s.addresses.size(), 1U);
        ATF_REQUIRE(s.addresses[0].starts_with("tcp://127.0.0.1:"));
        ports.insert(port_of(s.addresses[0]));
        ATF_REQUIRE_EQ(s.storage, cwd() + "/st/" + s.name);
    }
    ATF_REQUIRE(ports == (std::set<std::size_t>{3334, 3335, 3336, 3337}));
    ATF_REQUIRE(c.servers[0].metadata && !c.servers[0].data);
    // The text on disk is the canonical form.
    ATF_REQUIRE_EQ(read_file("c.toml"), config::to_toml(c));
}

ATF_TEST_CASE_WITHOUT_HEAD(free_ports);
ATF_TEST_CASE_BODY(free_ports)
{
    const Run r = genconfig({"--local", "5", "--port-base", "0", "--storage", "/tmp/x", "--out",
                             "c.toml", "--fs-name", "t1", "--fs-id", "42"});
    require_msg(r.status == 0, r.describe());
    const config::Cluster c = load("c.toml");
    ATF_REQUIRE_EQ(c.fs_name, "t1");
    ATF_REQUIRE_EQ(c.fs_id, 42U);
    ATF_REQUIRE_EQ(c.servers.size(), 6U);
    std::set<std::size_t> ports;
    for (const config::Server &s : c.servers) {
        ports.insert(port_of(s.addresses.at(0)));
    }
    ATF_REQUIRE_EQ(ports.size(), 6U);
    ATF_REQUIRE(!ports.contains(0));
}

ATF_TEST_CASE_WITHOUT_HEAD(force_needed);
ATF_TEST_CASE_BODY(force_needed)
{
    Run r = genconfig({"--local", "1", "--storage", "st", "--out", "c.toml"});
    require_msg(r.status == 0, r.describe());
    const std::string config1 = read_file("c.toml");
    const std::string key1 = read_file("c.key");

    // Either file existing stops it, and nothing changes.
    r = genconfig({"--local", "2", "--storage", "st", "--out", "c.toml"});
    require_msg(r.status == 1, r.describe());
    ATF_REQUIRE(r.err.find(cwd() + "/c.toml exists; use --force") != std::string::npos);
    ATF_REQUIRE_EQ(read_file("c.toml"), config1);
    ATF_REQUIRE_EQ(read_file("c.key"), key1);
    std::filesystem::rename("c.toml", "keep.toml");
    r = genconfig({"--local", "2", "--storage", "st", "--out", "c.toml"});
    require_msg(r.status == 1, r.describe());
    ATF_REQUIRE(r.err.find(cwd() + "/c.key exists; use --force") != std::string::npos);
    ATF_REQUIRE(!std::filesystem::exists("c.toml"));
    ATF_REQUIRE_EQ(read_file("c.key"), key1);
    std::filesystem::rename("keep.toml", "c.toml");

    r = genconfig({"--local", "2", "--storage", "st", "--out", "c.toml", "--force"});
    require_msg(r.status == 0, r.describe());
    ATF_REQUIRE(read_file("c.key") != key1);
    ATF_REQUIRE_EQ(mode_of("c.key"), 0600U);
    ATF_REQUIRE_EQ(mode_of("c.toml"), 0644U);
    ATF_REQUIRE_EQ(load("c.toml").servers.size(), 3U);
    // No temporary files left behind.
    std::set<std::string> names;
    for (const auto &e : std::filesystem::directory_iterator(".")) {
        names.insert(e.path().filename().string());
    }
    ATF_REQUIRE(names == (std::set<std::string>{"c.toml", "c.key", "gen.out", "gen.err"}));
}

ATF_TEST_CASE_WITHOUT_HEAD(explicit_servers);
ATF_TEST_CASE_BODY(explicit_servers)
{
    const Run r = genconfig({"--meta", "tcp://127.0.0.1:4000", "--data", "tcp://127.0.0.1:4001",
                             "--data", "tcp://127.0.0.1:04002", "--server",
                             "both=tcp://127.0.0.1:4003,ib://127.0.0.1:4003:metadata+data",
                             "--storage", "/srv/pvfs", "--out", "sub.toml", "--key", "keys.k",
                             "--stripe-size", "4MiB", "--stripe-count", "2"});
    require_msg(r.status == 0, r.describe());
    const config::Cluster c = load("sub.toml");
    ATF_REQUIRE_EQ(c.key_file, cwd() + "/keys.k");
    ATF_REQUIRE_EQ(mode_of("keys.k"), 0600U);
    ATF_REQUIRE(!std::filesystem::exists("sub.key"));
    ATF_REQUIRE_EQ(c.servers.size(), 4U);
    ATF_REQUIRE_EQ(c.servers[0].name, "meta0");
    ATF_REQUIRE_EQ(c.servers[1].name, "data0");
    ATF_REQUIRE_EQ(c.servers[2].name, "data1");
    ATF_REQUIRE_EQ(c.servers[2].addresses.at(0), "tcp://127.0.0.1:4002");
    ATF_REQUIRE_EQ(c.servers[3].name, "both");
    ATF_REQUIRE(c.servers[3].addresses ==
                (std::vector<std::string>{"tcp://127.0.0.1:4003", "ib://127.0.0.1:4003"}));
    ATF_REQUIRE(c.servers[3].metadata && c.servers[3].data);
    ATF_REQUIRE_EQ(c.servers[3].storage, "/srv/pvfs/both");
    ATF_REQUIRE(c.metadata_servers() == (std::vector<std::size_t>{0, 3}));
    ATF_REQUIRE(c.defaults.default_layout == (pvfs::Layout{4U << 20U, 2, 0}));
}

ATF_TEST_CASE_WITHOUT_HEAD(bad_arguments);
ATF_TEST_CASE_BODY(bad_arguments)
{
    const std::vector<std::string> out = {"--storage", "st", "--out", "c.toml"};
    const auto with = [&](std::vector<std::string> args) {
        args.insert(args.end(), out.begin(), out.end());
        return args;
    };
    expect_usage_error(with({"--local", "2", "--bogus"}), "--bogus");
    expect_usage_error({"--local", "2", "--storage", "st"}, "--out is required");
    expect_usage_error(with({"--local", "0"}), "--local");
    expect_usage_error(with({"--local", "two"}), "--local");
    expect_usage_error(with({"--local", "2", "--meta", "tcp://h:1"}), "--meta");
    expect_usage_error(with({"--port-base", "4000", "--meta", "tcp://h:1"}), "--port-base");
    expect_usage_error(with({"--local", "2", "--port-base", "65534"}), "not all in 1..65535");
    expect_usage_error(with({}), "a cluster needs a metadata and a data server");
    expect_usage_error(with({"--meta", "tcp://h:1"}), "a cluster needs a metadata and a data");
    expect_usage_error(with({"--meta", "tcp://h:99999", "--data", "tcp://h:2"}),
                       "--meta tcp://h:99999: port 99999 out of range 1..65535");
    expect_usage_error(with({"--meta", "tcp://h:1", "--data", "tcp://h:1"}),
                       "two servers have the address tcp://h:1");
    expect_usage_error(with({"--meta", "tcp://h:1", "--server", "meta0=tcp://h:2:data"}),
                       "two servers are named meta0");
    expect_usage_error(with({"--meta", "tcp://h:1", "--server", "x=tcp://h:2:storage"}),
                       "unknown role 'storage'");
    expect_usage_error(with({"--meta", "tcp://h:1", "--server", "tcp://h:2:data"}),
                       "expected NAME=URL");
    expect_usage_error(with({"--local", "2", "--fs-name", "a/b"}), "--fs-name a/b");
    expect_usage_error(with({"--local", "2", "--stripe-size", "3MB"}), "unknown unit 'MB'");
    expect_usage_error(with({"--local", "2", "--stripe-size", "1000"}), "--stripe-size 1000");
    expect_usage_error(with({"--local", "2", "--stripe-count", "3"}),
                       "--stripe-count 3: there are only 2 data servers");

    const Run help = genconfig({"--help"});
    require_msg(help.status == 0, help.describe());
    ATF_REQUIRE(help.out.find("--local") != std::string::npos);
    ATF_REQUIRE(help.out.find("--force") != std::string::npos);
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, local_cluster);
    ATF_ADD_TEST_CASE(tcs, free_ports);
    ATF_ADD_TEST_CASE(tcs, force_needed);
    ATF_ADD_TEST_CASE(tcs, explicit_servers);
    ATF_ADD_TEST_CASE(tcs, bad_arguments);
}
