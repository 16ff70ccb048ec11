// Per-client keys on a real cluster (one metadata and one data server;
// docs/security.md "Client keys"): clients keyed by the [filesystem]
// client_keys file, which pvfs-key edits and the servers re-read on their
// own (inotify) or on SIGHUP.  Each key works; a request naming another
// key's id is dropped; a revoked key is refused within seconds while the
// others go on; each key's squash policy holds; a bad edit leaves the old
// table in force; the cluster key is no client's once client_keys is set;
// a key's exactly-once session, holds and replay-guard session are its own.
#include <atf-c++.hpp>
#include <sys/stat.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "harness.hpp"
#include "keyed_cluster.hpp"
#include "pvfs/client.hpp"

namespace {

using namespace pvfs;
using namespace std::chrono_literals;
using pvfs::test::key_ok;
using pvfs::test::KeyedCluster;
using pvfs::test::pvfs_key;
using pvfs::test::require;
using pvfs::test::require_rc;

constexpr std::uint32_t nobody = 65534;

std::string read_text(const std::string &path)
{
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
}

// The status a get_config under `key_file` is answered with; -1 when none
// came within `timeout_ms`.
int probe(const KeyedCluster &cl, const std::string &key_file, int timeout_ms = 5000)
{
    test::RawClient r = cl.raw(key_file);
    const test::Call c = r.call(proto::GetConfigRequest{}, timeout_ms);
    // A key the servers do not accept is refused at the connection's
    // handshake (its ops fail with EACCES) before any request is read.
    if (!c.answered)
        return c.transport_error == -EACCES ? EACCES : -1;
    return c.response.status;
}

// list_orphans (root only) in the state of h's record: 0 none, 1 held, 2
// reclaim.
unsigned orphan_state(client::Client &c, Handle h)
{
    std::vector<client::Client::Orphan> list;
    bool eof = false;
    require_rc(c.list_orphans(0, 0, 4096, list, eof), 0, "list_orphans");
    for (const auto &o : list) {
        if (o.handle == h)
            return o.state;
    }
    return 0;
}

// lookup of `name` in / : 0 or -errno.
int lookup_rc(client::Client &c, const std::string &name)
{
    Attr a;
    return c.lookup(root_handle, name, a);
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
    // Its connection proved alpha: the envelope's other key is dropped
    // before any MAC is tried.
    require(log.find("envelope names key beta, its connection proved key alpha") !=
                std::string::npos,
            "no key mismatch logged: " + log);
    require(log.find(fmt::format("unknown client key id {:08x}", stranger)) != std::string::npos &&
                log.find("tcp://") != std::string::npos,
            "unknown id not logged with the peer: " + log);
    // Both keys still work.
    require(probe(cl, cl.key_path("alpha")) == 0 && probe(cl, cl.key_path("beta")) == 0,
            "a key stopped working");
}

// Handshakes under 30 key ids the servers do not know, one connection
// each: all refused, and one log line for them all (a peer picks the id
// freely, so a line per id would let it flood the log).
ATF_TEST_CASE_WITHOUT_HEAD(unknown_ids_logged_once);
ATF_TEST_CASE_BODY(unknown_ids_logged_once)
{
    KeyedCluster cl({{"alpha"}});
    const std::string strangers = cl.dir + "/strangers";
    constexpr int count = 30;
    for (int i = 0; i < count; ++i) {
        const std::string name = fmt::format("stranger{}", i);
        key_ok({"add", name, "--file", strangers, "--out", cl.key_path(name)});
        require(probe(cl, cl.key_path(name)) == EACCES, name + "'s key was not refused");
    }
    require(probe(cl, cl.key_path("alpha")) == 0, "alpha stopped working");
    const std::string log = cl.log();
    std::size_t lines = 0;
    for (auto at = log.find("connection refused: unknown client key id"); at != std::string::npos;
         at = log.find("connection refused: unknown client key id", at + 1))
        ++lines;
    require(lines == 1,
            fmt::format("{} refusals of unknown key ids logged {} lines: {}", count, lines, log));
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

// Two keys on one loop (pvfsd holds a key per mount): each key has its
// own connection, so each request arrives on a connection that proved its
// envelope's key (a shared one would have the other key's requests
// dropped), and revoking one key ends its connections and not the other's.
ATF_TEST_CASE_WITHOUT_HEAD(two_keys_one_loop);
ATF_TEST_CASE_BODY(two_keys_one_loop)
{
    KeyedCluster cl({{"alpha"}, {"beta"}});
    std::string error;
    const std::shared_ptr<client::Loop> loop = client::Loop::create(error);
    require(loop != nullptr, "loop: " + error);
    Credentials cred;
    cred.uid = 1000;
    cred.gid = 1000;
    loop->set_context(cred, 0);
    const auto on_loop = [&](const std::string &name) {
        client::Options o = test::fresh_attrs();
        o.request_timeout = 10s;
        o.key_file = cl.key_path(name);
        o.loop = loop;
        return cl.connect(std::move(o));
    };
    auto alpha = on_loop("alpha");
    auto beta = on_loop("beta");
    Attr a;
    for (int i = 0; i < 3; ++i) {
        require_rc(alpha->getattr(root_handle, a), 0, "alpha on the shared loop");
        require_rc(beta->getattr(root_handle, a), 0, "beta on the shared loop");
    }
    require(cl.log().find("envelope names key") == std::string::npos,
            "a request came on another key's connection: " + cl.log());
    key_ok({"revoke", "alpha", "--file", cl.clients});
    const auto took = wait_for(
        [&] {
            Attr x;
            return alpha->getattr(root_handle, x) == -EACCES;
        },
        "alpha refused on the shared loop");
    std::printf("alpha refused %lld ms after the revoke\n", static_cast<long long>(took.count()));
    require(took < 3s, "alpha refused more than 3 s after the revoke");
    require_rc(beta->getattr(root_handle, a), 0, "beta after alpha's revocation, same loop");
    require(cl.log().find("dropped the connections of") != std::string::npos,
            "no connection of alpha dropped on the reload: " + cl.log());
}

ATF_TEST_CASE_WITHOUT_HEAD(per_key_squash);
ATF_TEST_CASE_BODY(per_key_squash)
{
    KeyedCluster cl({{"admin", "--no-root-squash"},
                     {"node"},
                     {"ranged", "--uids", "1000-1999"},
                     {"grouped", "--gids", "1000-1999"}});
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
    // grouped: a gid inside stays, one outside is nogroup, and groups
    // outside the range are dropped, so they open no group-only file.
    auto in_group = cl.as("grouped", 1500, 1500);
    require_rc(in_group->create(root_handle, "g-1500", 0644, true, {}, a), 0, "gid 1500 create");
    require(a.uid == 1500 && a.gid == 1500, fmt::format("gid 1500's file is {}:{}", a.uid, a.gid));
    auto out_group = cl.as("grouped", 1500, 2500);
    require_rc(out_group->create(root_handle, "g-2500", 0644, true, {}, a), 0, "gid 2500 create");
    require(a.uid == 1500 && a.gid == nobody,
            fmt::format("gid 2500's file is {}:{}, not 1500:nogroup", a.uid, a.gid));
    // A file of group 2600 (made by admin's root), readable by the group only.
    require_rc(admin->create(root_handle, "group-2600", 0640, true, {}, a), 0, "admin create");
    const Handle group_file = a.handle;
    client::SetAttr chgrp;
    chgrp.mask = client::set_gid | client::set_uid;
    chgrp.uid = 3000;
    chgrp.gid = 2600;
    require_rc(admin->setattr(group_file, chgrp, a), 0, "admin chowns to 3000:2600");
    auto by_group = cl.connect_as("grouped", 1500, 1500, {2600});
    require_rc(by_group->read(group_file, 0, buf), -EACCES,
               "supplementary group 2600, outside gids=, reads a 0640 file of group 2600");
    auto admin_group = cl.connect_as("admin", 1500, 1500, {2600});
    require_rc(admin_group->read(group_file, 0, buf), 0,
               "the same groups under an unranged key read it");
}

// pvfs-key add --encrypt: the client's line says encrypt and so does its
// key file, so the client (libpvfs with nothing else set) asks for
// encryption and is served; the same key on a plain connection is refused
// with EPROTONOSUPPORT, while another client of the same servers stays
// plain.
ATF_TEST_CASE_WITHOUT_HEAD(per_key_encrypt);
ATF_TEST_CASE_BODY(per_key_encrypt)
{
    KeyedCluster cl({{"sealed", "--encrypt", "--no-root-squash"}, {"plain", "--no-root-squash"}},
                    {}, "", test::servers(1, 1));
    std::string text;
    {
        std::ifstream in(cl.key_path("sealed"));
        std::getline(in, text);
    }
    require(text.ends_with(" encrypt") && text.starts_with("sealed "),
            "sealed's key file does not end in encrypt");
    std::string out;
    require(pvfs_key({"list", "--file", cl.clients}, out) == 0, "pvfs-key list");
    std::istringstream rows(out);
    int sealed_rows = 0;
    int plain_rows = 0;
    for (std::string row; std::getline(rows, row);) {
        sealed_rows += static_cast<int>(row.starts_with("sealed ") &&
                                        row.find(" encrypt ") != std::string::npos);
        plain_rows +=
            static_cast<int>(row.starts_with("plain ") && row.find(" plain ") != std::string::npos);
    }
    require(sealed_rows == 1 && plain_rows == 1, "pvfs-key list:\n" + out);
    // Both clients do I/O through the data server.
    for (const char *name : {"sealed", "plain"}) {
        auto c = cl.as(name, 0, 0);
        Attr a;
        require_rc(c->create(root_handle, std::string("f-") + name, 0644, true, {}, a), 0,
                   std::string(name) + " create");
        const std::vector<std::byte> data = test::pattern(200000, 3);
        require_rc(c->write(a.handle, 0, data), static_cast<int>(data.size()),
                   std::string(name) + " write");
        std::vector<std::byte> back(data.size());
        require_rc(c->read(a.handle, 0, back), static_cast<int>(data.size()),
                   std::string(name) + " read");
        require(back == data, std::string(name) + ": bytes differ");
    }
    // sealed's key on a plain connection: refused, and the server says why.
    const std::string url = cl.files.cluster.servers.at(0).addresses.at(0);
    const proto::Destination to{cl.files.cluster.fs_id, 0};
    test::RawClient forced(url, cl.key_path("sealed"), false);
    forced.to = to;
    const test::Call c = forced.call(proto::StatusRequest{}, 5000);
    require(!c.answered && c.transport_error == -EPROTONOSUPPORT,
            "sealed's key on a plain connection: " + std::to_string(c.transport_error) + " " +
                c.error);
    require(cl.log().find("do not agree on encryption") != std::string::npos,
            "the server did not log the refusal:\n" + cl.log());
    test::RawClient plain(url, cl.key_path("plain"), false);
    plain.to = to;
    const test::Call ok = plain.call(proto::StatusRequest{}, 5000);
    require(ok.answered && ok.response.status == 0, "plain's key, plain: " + ok.error);
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
    require(probe(cl, cl.key_path("gamma"), 2000) == EACCES, "gamma known before SIGHUP");
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

// The status of a raw call; -1 when it went unanswered.
int status(test::RawClient &r, proto::RequestBody body)
{
    const test::Call c = r.call(std::move(body), 5000);
    return c.answered ? c.response.status : -1;
}

// Client ids and owner strings travel in the clear: beta, who read
// alpha's off the wire, can neither end, take over, renew nor use
// alpha's exactly-once session, nor drop or add holds in it; alpha goes
// on as if beta were not there (docs/security.md "Client keys").
ATF_TEST_CASE_WITHOUT_HEAD(sessions_bound_to_keys);
ATF_TEST_CASE_BODY(sessions_bound_to_keys)
{
    KeyedCluster cl({{"alpha", "--no-root-squash"}, {"beta", "--no-root-squash"}});
    auto files = cl.as("alpha", 0, 0);
    Attr attr;
    require_rc(files->create(root_handle, "kept", 0644, true, {}, attr), 0, "create kept");
    const Handle kept = attr.handle;
    const auto data = test::pattern(5000, 3);
    require_rc(files->write(kept, 0, data), static_cast<std::int64_t>(data.size()), "write kept");

    constexpr std::uint64_t alpha_id = 0xa1fa'0000'0000'0001;
    constexpr std::uint64_t beta_id = 0xbe7a'0000'0000'0002;
    const std::string owner = "node-a:/mnt/pvfs";
    const auto alpha = cl.meta("alpha");
    const auto beta = cl.meta("beta");
    test::RawClient &a = *alpha;
    test::RawClient &b = *beta;
    require(status(a, proto::SessionRequest{alpha_id, proto::session_open, owner}) == 0,
            "alpha's session open");
    a.once = proto::OnceIds{alpha_id, 0, 0, 1};
    require(status(a, proto::MkdirRequest{root_handle, "a1", 0755}) == 0, "alpha's mkdir a1");
    a.once = {};
    require(status(a, proto::OpenRequest{kept, alpha_id, proto::open_read, 1, false}) == 0,
            "alpha opens kept");
    require_rc(files->unlink(root_handle, "kept"), 0, "unlink kept");
    require(orphan_state(*files, kept) == 1, "kept is no held orphan");

    require(status(b, proto::SessionRequest{alpha_id, proto::session_end, ""}) == EACCES,
            "beta ends alpha's session");
    require(status(b, proto::SessionRequest{alpha_id, proto::session_open, "beta"}) == EACCES,
            "beta renews alpha's session");
    require(status(b, proto::SessionRequest{beta_id, proto::session_open, owner}) == EACCES,
            "beta opens a session with alpha's owner string");
    require(status(b, proto::CloseRequest{alpha_id, {proto::OpenRef{kept, 1}}}) == EACCES,
            "beta closes alpha's hold");
    require(status(b, proto::OpenRequest{root_handle, alpha_id, proto::open_read, 9, false}) ==
                EACCES,
            "beta opens in alpha's session");
    b.once = proto::OnceIds{alpha_id, 0, 0, 1000};
    require(status(b, proto::MkdirRequest{root_handle, "b1", 0755}) == EACCES,
            "beta's change with alpha's once ids");
    b.once = {};
    require(status(b, proto::CreateRequest{root_handle,
                                           "b2",
                                           0644,
                                           true,
                                           {},
                                           proto::CreateOpen{alpha_id, proto::open_read, 9}}) ==
                EACCES,
            "beta's create opening in alpha's session");
    require(lookup_rc(*files, "b1") == -ENOENT && lookup_rc(*files, "b2") == -ENOENT,
            "a refused request of beta's changed the namespace");
    // Beta's own session is beta's to use.
    require(status(b, proto::SessionRequest{beta_id, proto::session_open, "node-b"}) == 0,
            "beta's own session");
    b.once = proto::OnceIds{beta_id, 0, 0, 1};
    require(status(b, proto::MkdirRequest{root_handle, "b3", 0755}) == 0, "beta's own mkdir");
    b.once = {};

    // Alpha's session is as it was: its slot's next xid runs (not EBADR,
    // nor EALREADY behind beta's xid 1000), its last one is answered from
    // the cache, and its hold kept the file.
    a.once = proto::OnceIds{alpha_id, 0, 0, 2};
    require(status(a, proto::MkdirRequest{root_handle, "a2", 0755}) == 0,
            "alpha's next change after beta's attempts");
    a.once = proto::OnceIds{alpha_id, 0, 0, 2};
    require(status(a, proto::MkdirRequest{root_handle, "a2", 0755}) == 0,
            "alpha's retry answered from the cache");
    a.once = {};
    require(orphan_state(*files, kept) == 1, "kept no longer held after beta's attempts");
    std::vector<std::byte> got(data.size());
    require_rc(files->read(kept, 0, got), static_cast<std::int64_t>(data.size()), "read kept");
    require(got == data, "kept's data changed");
    require(status(a, proto::SessionRequest{alpha_id, proto::session_open, owner}) == 0,
            "alpha renews its session");
    const test::Call closed = a.call(proto::CloseRequest{alpha_id, {proto::OpenRef{kept, 1}}});
    require(closed.answered && closed.response.status == 0, "alpha's close: " + closed.error);
    require(std::ranges::count(std::get<proto::CloseResponse>(closed.response.body).doomed, kept,
                               &proto::Doomed::handle) == 1,
            "alpha's close does not release kept");
    require(status(a, proto::SessionRequest{alpha_id, proto::session_end, ""}) == 0,
            "alpha ends its session");
    const std::string log = cl.log();
    require(log.find("under key beta: client a1fa000000000001 is a session of key alpha") !=
                std::string::npos,
            "no refusal naming both keys logged: " + log);
}

// The replay guard's sessions are per key: beta sending under alpha's
// session id, with a seq near 2^64, does not make alpha's next requests
// replays.
ATF_TEST_CASE_WITHOUT_HEAD(replay_sessions_per_key);
ATF_TEST_CASE_BODY(replay_sessions_per_key)
{
    KeyedCluster cl({{"alpha"}, {"beta"}});
    const auto alpha = cl.meta("alpha");
    const auto beta = cl.meta("beta");
    test::RawClient &a = *alpha;
    test::RawClient &b = *beta;
    require(status(a, proto::GetConfigRequest{}) == 0, "alpha's first request");
    b.use_session(a.session(), UINT64_MAX - 10);
    require(status(b, proto::GetConfigRequest{}) == 0, "beta's request under alpha's session id");
    for (int i = 0; i < 3; ++i)
        require(status(a, proto::GetConfigRequest{}) == 0, "alpha's request after beta's");
    Attr attr;
    require_rc(cl.as("alpha", 1000, 1000)->getattr(root_handle, attr), 0, "alpha's libpvfs client");
}

// Sessions opened under the cluster key before client_keys was set are
// no client's any more: the first client key to use one claims it, and a
// client restarted with its own key takes its old session over by its
// owner string (docs/security.md "Client keys").
ATF_TEST_CASE_WITHOUT_HEAD(cluster_sessions_claimed);
ATF_TEST_CASE_BODY(cluster_sessions_claimed)
{
    constexpr std::uint64_t owned_id = 0xc1c1'0000'0000'0001;
    constexpr std::uint64_t plain_id = 0xc1c1'0000'0000'0002;
    const std::string owner = "node-a:/mnt/pvfs";
    KeyedCluster cl(
        {{"alpha", "--no-root-squash"}, {"beta", "--no-root-squash"}}, [&](test::Cluster &plain) {
            test::RawClient r(plain.files, "meta0"); // the cluster key
            require(status(r, proto::SessionRequest{owned_id, proto::session_open, owner}) == 0,
                    "session with an owner under the cluster key");
            require(status(r, proto::SessionRequest{plain_id, proto::session_open, ""}) == 0,
                    "session without one under the cluster key");
            r.once = proto::OnceIds{plain_id, 0, 0, 1};
            require(status(r, proto::MkdirRequest{root_handle, "p1", 0755}) == 0, "mkdir p1");
        });
    const auto alpha = cl.meta("alpha");
    const auto beta = cl.meta("beta");
    test::RawClient &a = *alpha;
    test::RawClient &b = *beta;
    // Alpha's node restarted with its key: its owner string ends the
    // cluster key's session, which no longer answers.
    require(status(a, proto::SessionRequest{0xa1fa'0000'0000'0009, proto::session_open, owner}) ==
                0,
            "alpha takes over its owner string from the cluster key's session");
    a.once = proto::OnceIds{owned_id, 0, 0, 1};
    require(status(a, proto::MkdirRequest{root_handle, "a1", 0755}) == EBADR,
            "the cluster key's session taken over is not ended");
    a.once = {};
    // Beta uses the other one first: it is beta's now, and alpha's use of
    // it is refused.
    b.once = proto::OnceIds{plain_id, 0, 0, 2};
    require(status(b, proto::MkdirRequest{root_handle, "b1", 0755}) == 0,
            "beta claims the cluster key's session");
    a.once = proto::OnceIds{plain_id, 0, 0, 3};
    require(status(a, proto::MkdirRequest{root_handle, "a2", 0755}) == EACCES,
            "alpha uses a session beta claimed");
    require(cl.log().find("now belongs to key beta") != std::string::npos,
            "the claim is not logged: " + cl.log());
}

// With client_keys set the cluster key is the servers' own, and a request
// under it is refused, except what one server asks of another: the
// metadata server's reclaimer removes the objects of a file whose holder
// went silent (renewal, remove_object, orphan_done under the server key),
// while a client holding that key still may not read, list or change.
ATF_TEST_CASE_WITHOUT_HEAD(server_key_reclaims);
ATF_TEST_CASE_BODY(server_key_reclaims)
{
    KeyedCluster cl({{"alpha", "--no-root-squash"}}, {}, "lease = \"2s\"\n");
    auto holder = cl.as("alpha", 0, 0);
    auto other = cl.as("alpha", 0, 0);
    Attr attr;
    require_rc(holder->create(root_handle, "held", 0644, true, {}, attr), 0, "create held");
    const Handle held = attr.handle;
    const auto data = test::pattern(5000, 4);
    require_rc(holder->write(held, 0, data), static_cast<std::int64_t>(data.size()), "write");
    require_rc(holder->open(held, client::Client::open_read, attr), 0, "open");
    require_rc(other->unlink(root_handle, "held"), 0, "unlink");
    require(orphan_state(*other, held) == 1, "held is no held orphan");
    // The holder says nothing more (list_orphans and list_objects are no
    // renewals): its hold goes a lease later, and nobody closes anything.
    const auto gone = [&] {
        if (orphan_state(*other, held) != 0)
            return false;
        client::HandlePage page;
        require_rc(other->list_objects(0, 0, 1024, page), 0, "list_objects");
        return std::ranges::find(page.handles, held) == page.handles.end();
    };
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (!gone() && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(200ms);
    require(gone(), "the server's reclaimer did not remove the silent holder's file under the "
                    "server key: " +
                        std::to_string(orphan_state(*other, held)) + "; " + cl.log());

    // A client with the cluster key gets none of the rest.
    client::Options o = test::fresh_attrs();
    o.request_timeout = 10s;
    o.key_file = cl.files.key_path;
    auto stale = cl.connect(std::move(o));
    require_rc(stale->lookup(root_handle, "anything", attr), -EACCES,
               "a lookup under the servers' key");
    const auto raw = std::make_unique<test::RawClient>(
        cl.files.cluster.servers.at(0).addresses.at(0), cl.files.key_path);
    raw->to = proto::Destination{cl.files.cluster.fs_id, 0};
    require(status(*raw, proto::CloseRequest{0x5e4e, {proto::OpenRef{held, 1}}}) == EACCES,
            "a close of a file under the servers' key");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, server_key_reclaims);
    ATF_ADD_TEST_CASE(tcs, two_keys_each_work);
    ATF_ADD_TEST_CASE(tcs, other_keys_id_refused);
    ATF_ADD_TEST_CASE(tcs, unknown_ids_logged_once);
    ATF_ADD_TEST_CASE(tcs, revoked_within_seconds);
    ATF_ADD_TEST_CASE(tcs, two_keys_one_loop);
    ATF_ADD_TEST_CASE(tcs, per_key_squash);
    ATF_ADD_TEST_CASE(tcs, per_key_encrypt);
    ATF_ADD_TEST_CASE(tcs, bad_edit_keeps_table);
    ATF_ADD_TEST_CASE(tcs, sessions_bound_to_keys);
    ATF_ADD_TEST_CASE(tcs, replay_sessions_per_key);
    ATF_ADD_TEST_CASE(tcs, cluster_sessions_claimed);
}
