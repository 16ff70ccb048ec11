// Tests of the client keys file (include/pvfs/client_keys.hpp): what a
// good file gives, every refusal of the parser (each one refuses the whole
// file, naming the file and the line), the file's mode and owner checks,
// the bounds, and the key files pvfs-key writes.
#include <atf-c++.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "pvfs/client_keys.hpp"
#include "pvfs/proto.hpp"

namespace config = pvfs::config;
namespace proto = pvfs::proto;

namespace {

void require_msg(bool ok, const std::string &why)
{
    if (!ok) {
        ATF_FAIL(why);
    }
}

const std::string hex_a = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const std::string hex_b = "F0E1D2C3B4A5968778695A4B3C2D1E0F00112233445566778899AABBCCDDEEFF";

// The parse of `text` fails with "t:LINE: ..." containing `detail`, and
// gives no clients.
void expect_refused(const std::string &text, std::size_t line, std::string_view detail)
{
    const config::ClientKeys r = config::parse_client_keys(text, "t");
    require_msg(!r.ok(), fmt::format("accepted:\n{}", text));
    const std::string prefix = fmt::format("t:{}: ", line);
    require_msg(r.error.starts_with(prefix),
                fmt::format("error '{}' does not start with '{}'", r.error, prefix));
    require_msg(r.error.find(detail) != std::string::npos,
                fmt::format("error '{}' does not mention '{}'", r.error, detail));
    require_msg(r.clients.empty(), "a refused file still gave clients");
    require_msg(r.error.find(hex_a) == std::string::npos &&
                    r.error.find(hex_b) == std::string::npos,
                "an error shows a key: " + r.error);
}

void write_file(const std::string &path, std::string_view text, mode_t mode)
{
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    require_msg(::chmod(path.c_str(), mode) == 0, "chmod " + path);
}

std::string temp_dir()
{
    std::string dir = (std::filesystem::current_path() / "keys.XXXXXX").string();
    require_msg(::mkdtemp(dir.data()) != nullptr, "mkdtemp");
    return dir;
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(good_file);
ATF_TEST_CASE_BODY(good_file)
{
    const std::string text = "# the cluster's clients\n"
                             "\n"
                             "node17 " +
                             hex_a +
                             " uids=1000-1999 gids=100-199   # a comment after the fields\n"
                             "\tadmin.host-2_b\t" +
                             hex_b +
                             "\tno_root_squash revoked\n   \n"
                             "last " +
                             hex_a.substr(0, 62) + "ff uids=0-4294967295 no_root_squash"; // no '\n'
    const config::ClientKeys r = config::parse_client_keys(text, "t");
    require_msg(r.ok(), r.error);
    ATF_REQUIRE_EQ(r.clients.size(), 3U);
    const config::ClientKey &a = r.clients[0];
    ATF_REQUIRE_EQ(a.key.name(), "node17");
    ATF_REQUIRE(a.key.id() == proto::key_id("node17"));
    ATF_REQUIRE(!a.no_root_squash && !a.revoked);
    ATF_REQUIRE(a.uids && a.uids->low == 1000 && a.uids->high == 1999);
    ATF_REQUIRE(a.uids->contains(1000) && a.uids->contains(1999) && !a.uids->contains(999) &&
                !a.uids->contains(2000));
    ATF_REQUIRE(a.gids && a.gids->low == 100 && a.gids->high == 199);
    ATF_REQUIRE_EQ(a.line, 3U);
    const config::ClientKey &b = r.clients[1];
    ATF_REQUIRE_EQ(b.key.name(), "admin.host-2_b");
    ATF_REQUIRE(b.no_root_squash && b.revoked && !b.uids && !b.gids);
    ATF_REQUIRE_EQ(b.line, 4U);
    const config::ClientKey &c = r.clients[2];
    ATF_REQUIRE(c.uids && c.uids->low == 0 && c.uids->high == 4294967295U && c.no_root_squash);
    ATF_REQUIRE_EQ(c.line, 6U);

    // The key is the hex's: a request signed with it verifies with the
    // parsed key and not with the other client's.
    const auto expected = proto::Key::from_hex(hex_a);
    ATF_REQUIRE(expected);
    const std::vector<std::byte> message{std::byte{1}, std::byte{2}};
    std::array<std::byte, proto::mac_size> tag{};
    expected->sign(message, tag);
    ATF_REQUIRE(a.key.verify(message, tag));
    ATF_REQUIRE(!b.key.verify(message, tag));

    ATF_REQUIRE(config::parse_client_keys("", "t").ok());
    ATF_REQUIRE(config::parse_client_keys("# nothing\n\n", "t").clients.empty());
}

ATF_TEST_CASE_WITHOUT_HEAD(every_refusal);
ATF_TEST_CASE_BODY(every_refusal)
{
    const std::string good = "ok " + hex_a + "\n";
    expect_refused(good + "lonely\n", 2, "without a key");
    expect_refused(good + "bad/name " + hex_b + "\n", 2, "client name 'bad/name'");
    expect_refused(good + std::string(65, 'n') + " " + hex_b + "\n", 2, "1 to 64 characters");
    expect_refused(good + "cluster " + hex_b + "\n", 2, "the cluster key's");
    expect_refused(good + "short " + hex_b.substr(1) + "\n", 2, "64 hex digits");
    expect_refused(good + "long " + hex_b + "0\n", 2, "64 hex digits");
    expect_refused(good + "nothex " + hex_b.substr(1) + "g\n", 2, "64 hex digits");
    expect_refused(good + "ok " + hex_b + "\n", 2, "client 'ok' is already on line 1");
    expect_refused(good + "b " + hex_b + " no_root_squash no_root_squash\n", 2, "given twice");
    expect_refused(good + "b " + hex_b + " revoked revoked\n", 2, "given twice");
    expect_refused(good + "b " + hex_b + " uids=1-2 uids=3-4\n", 2, "given twice");
    expect_refused(good + "b " + hex_b + " gids=1-2 gids=3-4\n", 2, "given twice");
    expect_refused(good + "b " + hex_b + " gids=9-8\n", 2, "gids=LO-HI");
    expect_refused(good + "b " + hex_b + " gids=1-2x\n", 2, "gids=LO-HI");
    expect_refused(good + "b " + hex_b + " root_squash\n", 2, "unknown option 'root_squash'");
    expect_refused(good + "b " + hex_b + " Revoked\n", 2, "unknown option");
    for (const char *range : {"uids=", "uids=5", "uids=5-", "uids=-5", "uids=9-8", "uids=a-b",
                              "uids=1-4294967296", "uids=+1-2", "uids=1--2", "uids= 1-2"}) {
        std::string text = good;
        text += "b " + hex_b + " ";
        text += range;
        text += "\n";
        expect_refused(text, 2, "uids=LO-HI");
    }
    expect_refused(good + "b " + hex_b + "\r\n", 2, "control character");
    expect_refused(good + "b\v" + hex_b + "\n", 2, "control character");
    expect_refused(good + std::string(1025, ' ') + "\n", 2, "longer than 1024 bytes");
    // A comment hides what follows it: the key is then missing.
    expect_refused(good + "b #" + hex_b + "\n", 2, "without a key");
    // A key where the name goes never reaches the message (checked by
    // expect_refused), and one key for two clients is refused.
    expect_refused(good + hex_b + " b\n", 2, "starts with 64 hex digits, a key");
    expect_refused(good + hex_b + "\n", 2, "starts with 64 hex digits, a key");
    expect_refused(good + "b " + hex_a + " no_root_squash\n", 2,
                   "client 'b' has the key of the client on line 1");
}

ATF_TEST_CASE_WITHOUT_HEAD(duplicate_key_ids);
ATF_TEST_CASE_BODY(duplicate_key_ids)
{
    // Two names whose key ids collide: found by search (32 bits, a few
    // hundred thousand names), so the check is tested on a real collision.
    std::unordered_map<std::uint32_t, std::string> seen;
    std::string first;
    std::string second;
    for (std::uint32_t i = 0; second.empty(); ++i) {
        std::string name = fmt::format("n{}", i);
        const auto [it, fresh] = seen.emplace(proto::key_id(name), name);
        if (!fresh) {
            first = it->second;
            second = std::move(name);
        }
    }
    ATF_REQUIRE(proto::key_id(first) == proto::key_id(second) && first != second);
    expect_refused(first + " " + hex_a + "\n# x\n" + second + " " + hex_b + "\n", 3,
                   fmt::format("client '{}' has the key id {:08x} of client '{}' on line 1", second,
                               proto::key_id(first), first));
}

ATF_TEST_CASE_WITHOUT_HEAD(bounds);
ATF_TEST_CASE_BODY(bounds)
{
    // 65536 names of distinct key ids (a few of c0, c1, ... collide: 32-bit
    // ids, 2^16 names), and one more whose id is fresh too.
    std::string text;
    std::unordered_map<std::uint32_t, bool> ids;
    std::string extra;
    for (std::size_t i = 0; extra.empty(); ++i) {
        std::string name = fmt::format("c{}", i);
        if (!ids.emplace(proto::key_id(name), true).second)
            continue;
        if (ids.size() <= config::max_client_keys)
            text += fmt::format("{} {:064x}\n", name, i + 1); // each its own key
        else
            extra = std::move(name);
    }
    const config::ClientKeys full = config::parse_client_keys(text, "t");
    require_msg(full.ok(), full.error);
    ATF_REQUIRE_EQ(full.clients.size(), config::max_client_keys);
    expect_refused(text + extra + " " + hex_b + "\n", config::max_client_keys + 1,
                   "more than 65536 clients");
    const std::string huge(config::max_client_keys_bytes + 1, '#');
    const config::ClientKeys r = config::parse_client_keys(huge, "t");
    require_msg(!r.ok() && r.error.find("larger than") != std::string::npos, r.error);
}

ATF_TEST_CASE_WITHOUT_HEAD(file_checks);
ATF_TEST_CASE_BODY(file_checks)
{
    const std::string dir = temp_dir();
    const std::string path = dir + "/clients";
    write_file(path, "a " + hex_a + "\n", 0600);
    const config::ClientKeys ok = config::load_client_keys(path);
    require_msg(ok.ok() && ok.clients.size() == 1, ok.error);
    for (const mode_t mode : {0640, 0604, 0660, 0601, 0610}) {
        write_file(path, "a " + hex_a + "\n", mode);
        const config::ClientKeys r = config::load_client_keys(path);
        require_msg(!r.ok() && r.error.find("client keys file " + path) == 0 &&
                        r.error.find(fmt::format("is mode {:04o}", mode)) != std::string::npos,
                    fmt::format("mode {:o}: {}", mode, r.error));
    }
    write_file(path, "a " + hex_a + "\nb\n", 0600);
    const config::ClientKeys bad = config::load_client_keys(path);
    require_msg(!bad.ok() && bad.error.starts_with(path + ":2: "), bad.error);
    const std::string link = dir + "/link";
    ATF_REQUIRE(::symlink(path.c_str(), link.c_str()) == 0);
    const config::ClientKeys linked = config::load_client_keys(link);
    require_msg(!linked.ok() && linked.error.find("symbolic link") != std::string::npos,
                linked.error);
    const config::ClientKeys missing = config::load_client_keys(dir + "/none");
    require_msg(!missing.ok() && missing.error.starts_with(dir + "/none: "), missing.error);
}

ATF_TEST_CASE_WITHOUT_HEAD(client_key_files);
ATF_TEST_CASE_BODY(client_key_files)
{
    const std::string dir = temp_dir();
    const std::string path = dir + "/node.key";
    std::string hex;
    const config::Status st = config::generate_client_key_file(path, "node", hex);
    require_msg(st.ok(), st.error);
    struct stat sb {};
    ATF_REQUIRE(::stat(path.c_str(), &sb) == 0);
    ATF_REQUIRE_EQ(sb.st_mode & 07777, 0600U);
    std::string error;
    const auto key = proto::Key::load(path, error);
    require_msg(key.has_value(), error);
    ATF_REQUIRE_EQ(key->name(), "node");
    ATF_REQUIRE(key->id() == proto::key_id("node"));
    // The hex is the file's key: the line pvfs-key appends gives the same.
    const config::ClientKeys table = config::parse_client_keys(
        config::client_key_line("node", hex, true, config::UidRange{5, 7}, config::UidRange{8, 9}),
        "t");
    require_msg(table.ok(), table.error);
    ATF_REQUIRE(table.clients[0].no_root_squash && table.clients[0].uids->high == 7 &&
                table.clients[0].gids->low == 8 && table.clients[0].gids->high == 9);
    const std::vector<std::byte> message{std::byte{7}};
    std::array<std::byte, proto::mac_size> tag{};
    key->sign(message, tag);
    ATF_REQUIRE(table.clients[0].key.verify(message, tag));
    // Never over an existing file.
    std::string again;
    const config::Status second = config::generate_client_key_file(path, "node", again);
    require_msg(!second.ok() && second.error.find("already exists") != std::string::npos,
                second.error);
    // The cluster key's file has no name.
    const std::string cluster = dir + "/cluster.key";
    ATF_REQUIRE(config::generate_key_file(cluster).ok());
    const auto ck = proto::Key::load(cluster, error);
    ATF_REQUIRE(ck && ck->name().empty() && !ck->id());
    // --encrypt: the key file ends in " encrypt" and the key says so; the
    // table's line says it too.  A cluster key may not say it.
    const std::string sealed = dir + "/sealed.key";
    std::string sealed_hex;
    const config::Status sst = config::generate_client_key_file(sealed, "sealed", sealed_hex, true);
    require_msg(sst.ok(), sst.error);
    const auto sk = proto::Key::load(sealed, error);
    require_msg(sk.has_value(), error);
    ATF_REQUIRE(sk->encrypt() && sk->name() == "sealed" && !key->encrypt());
    const config::ClientKeys sealed_table = config::parse_client_keys(
        config::client_key_line("sealed", sealed_hex, false, std::nullopt, std::nullopt, true),
        "t");
    require_msg(sealed_table.ok(), sealed_table.error);
    ATF_REQUIRE(sealed_table.clients[0].key.encrypt());
    write_file(dir + "/cluster-encrypt.key", hex_a + " encrypt\n", 0600);
    require_msg(!proto::Key::load(dir + "/cluster-encrypt.key", error) &&
                    error.find("only a client key") != std::string::npos,
                error);
    write_file(dir + "/other-word.key", "node " + hex_a + " encrypted\n", 0600);
    ATF_REQUIRE(!proto::Key::load(dir + "/other-word.key", error));
    // A bad name in a key file is refused.
    write_file(dir + "/bad.key", "a/b " + hex_a + "\n", 0600);
    require_msg(!proto::Key::load(dir + "/bad.key", error) &&
                    error.find("name") != std::string::npos,
                error);
}

ATF_TEST_CASE_WITHOUT_HEAD(replace_is_atomic_and_private);
ATF_TEST_CASE_BODY(replace_is_atomic_and_private)
{
    const std::string dir = temp_dir();
    const std::string path = dir + "/clients";
    ATF_REQUIRE(config::replace_private_file(path, "one\n").ok());
    ATF_REQUIRE(config::replace_private_file(path, "two\n").ok());
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    ATF_REQUIRE_EQ(line, "two");
    struct stat sb {};
    ATF_REQUIRE(::stat(path.c_str(), &sb) == 0);
    ATF_REQUIRE_EQ(sb.st_mode & 07777, 0600U);
    std::size_t entries = 0;
    for ([[maybe_unused]] const auto &e : std::filesystem::directory_iterator(dir))
        ++entries;
    ATF_REQUIRE_EQ(entries, 1U); // no temporary file left behind
    // Root's replacement of a file the servers' user owns keeps that owner
    // (their unit reads it as that user).
    if (::geteuid() == 0) {
        ATF_REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
        ATF_REQUIRE(config::replace_private_file(path, "three\n").ok());
        ATF_REQUIRE(::stat(path.c_str(), &sb) == 0);
        ATF_REQUIRE_EQ(sb.st_uid, 65534U);
        ATF_REQUIRE_EQ(sb.st_gid, 65534U);
        ATF_REQUIRE_EQ(sb.st_mode & 07777, 0600U);
    }
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, good_file);
    ATF_ADD_TEST_CASE(tcs, every_refusal);
    ATF_ADD_TEST_CASE(tcs, duplicate_key_ids);
    ATF_ADD_TEST_CASE(tcs, bounds);
    ATF_ADD_TEST_CASE(tcs, file_checks);
    ATF_ADD_TEST_CASE(tcs, client_key_files);
    ATF_ADD_TEST_CASE(tcs, replace_is_atomic_and_private);
}
