// Per-client keys on a real cluster (one metadata and one data server;
// docs/security.md "Client keys"): clients keyed by the [filesystem]
// client_keys file, which pvfs-key edits and the servers re-read on their
// own (inotify) or on SIGHUP.  Each key works; a request naming another
// key's id is dropped; a revoked key is refused within seconds while the
// others go on; each key's squash policy holds; a bad edit leaves the old
// table in force; the cluster key is no client's once client_keys is set.
#include <atf-c++.hpp>
#include <sys/stat.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "harness.hpp"
#include "pvfs/client.hpp"

namespace {

using namespace pvfs;
using namespace std::chrono_literals;
using pvfs::test::require;
using pvfs::test::require_rc;

constexpr std::uint32_t nobody = 65534;

// Runs pvfs-key with `args`; its exit status, its output in `out`.
int pvfs_key(const std::vector<std::string> &args, std::string &out)
{
    std::string command = PVFS_KEY_BINARY;
    for (const std::string &a : args)
        command += " '" + a + "'";
    command += " 2>&1";
    // NOLINTNEXTLINE(cert-env33-c): runs the tool under test
    FILE *p = ::popen(command.c_str(), "r");
    require(p != nullptr, "popen pvfs-key");
    out.clear();
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p) != nullptr)
        out += buf;
    const int status = ::pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

void key_ok(const std::vector<std::string> &args)
{
    std::string out;
    const int rc = pvfs_key(args, out);
    require(rc == 0, fmt::format("pvfs-key {}: status {}: {}", args.front(), rc, out));
}

std::string read_text(const std::string &path)
{
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
}

// A cluster whose servers take client keys from cluster/clients: keys are
// added with pvfs-key before the servers restart with client_keys set.
struct KeyedCluster : test::Cluster {
    std::string clients;
    std::string dir;

    // `keys`: pvfs-key add arguments after the name, per client.
    explicit KeyedCluster(const std::vector<std::vector<std::string>> &keys)
        : test::Cluster(test::servers(1, 1), "request_timeout = \"10s\"\n", test::fresh_attrs())
    {
        dir = files.dir.string();
        clients = dir + "/clients";
        for (const auto &k : keys) {
            std::vector<std::string> args{"add",   k.at(0), "--file",
                                          clients, "--out", key_path(k.at(0))};
            args.insert(args.end(), k.begin() + 1, k.end());
            key_ok(args);
        }
        for (const char *name : {"meta0", "data0"})
            require(servers[name]->stop(SIGTERM) == 0, std::string("clean stop of ") + name);
        servers.clear();
        std::string config = read_text(files.config_path);
        const std::size_t at = config.find("key_file =");
        require(at != std::string::npos, "config without key_file");
        config.insert(at, fmt::format("client_keys = \"{}\"\n", clients));
        std::ofstream(files.config_path) << config;
        start_all();
    }

    [[nodiscard]] std::string key_path(const std::string &name) const
    {
        return dir + "/" + name + ".key";
    }

    // A client with `name`'s key, as uid:gid.
    [[nodiscard]] std::unique_ptr<client::Client> as(const std::string &name, std::uint32_t uid,
                                                     std::uint32_t gid) const
    {
        client::Options o = test::fresh_attrs();
        o.request_timeout = 10s;
        o.key_file = key_path(name);
        o.credentials.uid = uid;
        o.credentials.gid = gid;
        return connect(std::move(o));
    }

    // A raw client of the metadata server with `key_file` (get_config
    // needs no destination, so it probes the key alone).
    [[nodiscard]] test::RawClient raw(const std::string &key_file) const
    {
        return {files.cluster.servers.at(0).addresses.at(0), key_file};
    }

    [[nodiscard]] std::string log() const { return servers.at("meta0")->log_text(); }
};

// The status a get_config under `key_file` is answered with; -1 when none
// came within `timeout_ms`.
int probe(const KeyedCluster &cl, const std::string &key_file, int timeout_ms = 5000)
{
    test::RawClient r = cl.raw(key_file);
    const test::Call c = r.call(proto::GetConfigRequest{}, timeout_ms);
    return c.answered ? c.response.status : -1;
}

// Waits (at most 10 s) until `done`; how long it took.
template <class Pred> std::chrono::milliseconds wait_for(Pred done, const std::string &what)
{
    const auto start = std::chrono::steady_clock::now();
    while (!done()) {
        require(std::chrono::steady_clock::now() - start < 10s, what + " within 10 s");
        std::this_thread::sleep_for(50ms);
    }
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(two_keys_each_work);
ATF_TEST_CASE_BODY(two_keys_each_work)
{
    KeyedCluster cl({{"alpha"}, {"beta"}});
    for (const char *name : {"alpha", "beta"}) {
        auto c = cl.as(name, 1000, 1000);
        Attr a;
        require_rc(c->create(root_handle, std::string("by-") + name, 0644, true, {}, a), -EACCES,
                   std::string(name) + " creates in root's 0755 /");
        require_rc(c->getattr(root_handle, a), 0, std::string(name) + " getattr /");
        require(probe(cl, cl.key_path(name)) == 0, std::string(name) + "'s get_config");
    }
    // Data too: a no_root_squash key is not needed to write one's own file.
    auto root = cl.connect(0, 0); // the cluster key: refused now
    Attr a;
    require_rc(root->getattr(root_handle, a), -EACCES, "the cluster key as a client");
    require(probe(cl, cl.files.key_path) == EACCES, "a raw request under the cluster key");
    require(cl.log().find("the cluster key is the servers' own") != std::string::npos,
            "no log line for the cluster key's refusal: " + cl.log());
    require(read_text(cl.clients).find(read_text(cl.key_path("alpha")).substr(6, 64)) !=
                std::string::npos,
            "alpha's key file and the clients line differ");
}

ATF_TEST_CASE_WITHOUT_HEAD(other_keys_id_refused);
ATF_TEST_CASE_BODY(other_keys_id_refused)
{
    KeyedCluster cl({{"alpha"}, {"beta"}});
    test::RawClient a = cl.raw(cl.key_path("alpha"));
    require(a.call(proto::GetConfigRequest{}).response.status == 0, "alpha's own request");
    // Alpha's request, MACed with alpha's key, saying it is beta's: no key
    // verifies it, so the server drops it.
    std::vector<std::byte> bytes = a.encode(proto::GetConfigRequest{});
    const std::optional<std::uint32_t> id = proto::request_key_id(bytes);
    require(id && *id == proto::key_id("alpha"), "alpha's request does not carry its id");
    const std::size_t id_at = 8 + 4 + 4 * 8; // preamble, flags, ids: unbound, no once ids
    const std::uint32_t beta = proto::key_id("beta");
    for (std::size_t i = 0; i < 4; ++i)
        bytes.at(id_at + i) = static_cast<std::byte>(beta >> (8U * i));
    require(proto::request_key_id(bytes) == beta, "the id was not rewritten");
    require(!a.send_raw(bytes, 2000), "a request under alpha's key naming beta's id answered");
    // An id nobody has: dropped and logged with the peer.
    const std::uint32_t stranger = proto::key_id("stranger");
    for (std::size_t i = 0; i < 4; ++i)
        bytes.at(id_at + i) = static_cast<std::byte>(stranger >> (8U * i));
    require(!a.send_raw(bytes, 2000), "a request with an unknown key id answered");
    const std::string log = cl.log();
    require(log.find("key beta") != std::string::npos && log.find("bad MAC") != std::string::npos,
            "no bad MAC under beta logged: " + log);
    require(log.find(fmt::format("unknown client key id {:08x}", stranger)) != std::string::npos &&
                log.find("tcp://") != std::string::npos,
            "unknown id not logged with the peer: " + log);
    // Both keys still work.
    require(probe(cl, cl.key_path("alpha")) == 0 && probe(cl, cl.key_path("beta")) == 0,
            "a key stopped working");
}

ATF_TEST_CASE_WITHOUT_HEAD(revoked_within_seconds);
ATF_TEST_CASE_BODY(revoked_within_seconds)
{
    KeyedCluster cl({{"alpha"}, {"beta"}});
    auto alpha = cl.as("alpha", 1000, 1000);
    auto beta = cl.as("beta", 1000, 1000);
    Attr a;
    require_rc(alpha->getattr(root_handle, a), 0, "alpha before revoking");
    key_ok({"revoke", "alpha", "--file", cl.clients});
    require(read_text(cl.clients).find("revoked") != std::string::npos, "no revoked in the file");
    // No restart: the servers see the rename (inotify).
    const auto took = wait_for(
        [&] {
            Attr x;
            return alpha->getattr(root_handle, x) == -EACCES;
        },
        "alpha refused");
    std::printf("alpha refused %lld ms after pvfs-key revoke\n",
                static_cast<long long>(took.count()));
    require(took < 5s, "revocation took more than 5 s");
    require(probe(cl, cl.key_path("alpha")) == EACCES, "a raw request under revoked alpha");
    require_rc(beta->getattr(root_handle, a), 0, "beta after alpha's revocation");
    require(probe(cl, cl.key_path("beta")) == 0, "beta's raw request");
    require(cl.log().find("client key alpha is revoked") != std::string::npos,
            "the refusal names no key: " + cl.log());
    require(cl.servers.at("data0")->log_text().find("revoked now: alpha") != std::string::npos,
            "data0 did not reload: " + cl.servers.at("data0")->log_text());
    std::string out;
    require(pvfs_key({"list", "--file", cl.clients}, out) == 0, "pvfs-key list");
    require(out.find("alpha") != std::string::npos && out.find("revoked") != std::string::npos &&
                out.find("beta") != std::string::npos,
            "list: " + out);
    const std::string hex = read_text(cl.key_path("beta")).substr(5, 64);
    require(out.find(hex) == std::string::npos, "pvfs-key list printed a key");
}

ATF_TEST_CASE_WITHOUT_HEAD(per_key_squash);
ATF_TEST_CASE_BODY(per_key_squash)
{
    KeyedCluster cl({{"admin", "--no-root-squash"}, {"node"}, {"ranged", "--uids", "1000-1999"}});
    // admin's root is root: it opens / to everyone.
    auto admin = cl.as("admin", 0, 0);
    Attr a;
    client::SetAttr open_root;
    open_root.mask = client::set_mode;
    open_root.mode = 01777;
    require_rc(admin->setattr(root_handle, open_root, a), 0, "admin's root chmods /");
    require_rc(admin->create(root_handle, "by-admin", 0644, true, {}, a), 0, "admin create");
    require(a.uid == 0 && a.gid == 0, fmt::format("admin's root file is {}:{}", a.uid, a.gid));
    // node's root (root squash by default) is nobody.
    auto node = cl.as("node", 0, 0);
    require_rc(node->create(root_handle, "by-node", 0644, true, {}, a), 0, "node create");
    require(a.uid == nobody && a.gid == nobody,
            fmt::format("node's root file is {}:{}", a.uid, a.gid));
    require_rc(node->setattr(root_handle, open_root, a), -EPERM, "node's root chmods /");
    // ranged: a uid inside stays, one outside is nobody (not refused).
    auto inside = cl.as("ranged", 1500, 1500);
    require_rc(inside->create(root_handle, "by-1500", 0600, true, {}, a), 0, "uid 1500 create");
    require(a.uid == 1500 && a.gid == 1500, fmt::format("uid 1500's file is {}:{}", a.uid, a.gid));
    const Handle private_file = a.handle;
    auto outside = cl.as("ranged", 2500, 2500);
    require_rc(outside->create(root_handle, "by-2500", 0644, true, {}, a), 0, "uid 2500 create");
    require(a.uid == nobody && a.gid == nobody,
            fmt::format("uid 2500's file is {}:{}", a.uid, a.gid));
    require_rc(outside->getattr(root_handle, a), 0, "uid 2500 still reads /");
    // Nor may an outside uid claim an inside one's file by its groups.
    auto claims = cl.as("ranged", 0, 1500);
    std::vector<std::byte> buf(10);
    require_rc(claims->read(private_file, 0, buf), -EACCES, "ranged root reads uid 1500's 0600");
    auto owner = cl.as("ranged", 1500, 1500);
    require_rc(owner->read(private_file, 0, buf), 0, "uid 1500 reads its own file");
}

ATF_TEST_CASE_WITHOUT_HEAD(bad_edit_keeps_table);
ATF_TEST_CASE_BODY(bad_edit_keeps_table)
{
    KeyedCluster cl({{"alpha"}});
    require(probe(cl, cl.key_path("alpha")) == 0, "alpha before the edit");
    const std::string good = read_text(cl.clients);
    // A hand edit gone wrong (a revoked alpha, but a broken line after it):
    // refused as a whole, so alpha keeps working.
    {
        std::ofstream out(cl.clients, std::ios::trunc);
        out << good.substr(0, good.size() - 1) << " revoked\nbroken line\n";
    }
    wait_for([&] { return cl.log().find("not reloaded") != std::string::npos; },
             "the bad file logged");
    require(cl.log().find(cl.clients + ":2:") != std::string::npos,
            "the refusal does not name the line: " + cl.log());
    require(probe(cl, cl.key_path("alpha")) == 0, "alpha after a bad edit");
    // Put right again (a failed re-read is retried every 10 s; the part
    // below needs none pending).
    {
        std::ofstream out(cl.clients, std::ios::trunc);
        out << good;
    }
    wait_for(
        [&] {
            return cl.log().find("client keys reloaded (the file changed)") != std::string::npos;
        },
        "the good file reloaded");
    // SIGHUP re-reads too: a table put in place by link(2), which the
    // watch does not report, takes effect only with the signal.
    std::string out;
    const std::string staged = cl.dir + "/staged";
    key_ok({"add", "gamma", "--file", staged, "--out", cl.key_path("gamma")});
    std::filesystem::remove(cl.clients);
    {
        std::ofstream keep(staged, std::ios::app);
        keep << good; // alpha again, as it was
    }
    require(::link(staged.c_str(), cl.clients.c_str()) == 0, "link the staged table");
    std::this_thread::sleep_for(500ms);
    require(probe(cl, cl.key_path("gamma"), 2000) == -1, "gamma known before SIGHUP");
    for (const char *name : {"meta0", "data0"})
        ::kill(cl.servers.at(name)->pid(), SIGHUP);
    wait_for([&] { return probe(cl, cl.key_path("gamma"), 1000) == 0; }, "gamma after SIGHUP");
    require(probe(cl, cl.key_path("alpha")) == 0, "alpha after SIGHUP");
    require(cl.log().find("client keys reloaded (SIGHUP)") != std::string::npos,
            "no SIGHUP reload logged: " + cl.log());
    // A revocation the servers cannot read (mode 0644: refused), then the
    // mode put right: a chmod alone re-reads, and alpha is refused.
    std::filesystem::remove(cl.clients);
    {
        std::ofstream revoking(cl.clients, std::ios::trunc);
        revoking << good.substr(0, good.size() - 1) << " revoked\n";
    }
    ::chmod(cl.clients.c_str(), 0644);
    std::this_thread::sleep_for(500ms);
    require(probe(cl, cl.key_path("alpha")) == 0, "alpha revoked by a file the servers refuse");
    require(::chmod(cl.clients.c_str(), 0600) == 0, "chmod 600");
    wait_for([&] { return probe(cl, cl.key_path("alpha"), 1000) == EACCES; },
             "alpha refused once the revoking file's mode was put right");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, two_keys_each_work);
    ATF_ADD_TEST_CASE(tcs, other_keys_id_refused);
    ATF_ADD_TEST_CASE(tcs, revoked_within_seconds);
    ATF_ADD_TEST_CASE(tcs, per_key_squash);
    ATF_ADD_TEST_CASE(tcs, bad_edit_keeps_table);
}
