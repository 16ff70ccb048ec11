// Tests of the cluster config library (include/pvfs/config.hpp): the
// example config, the canonical text and its hash, every validation error
// (each message must name the line and the key), units, path resolution,
// the limits checked before toml11 runs, addresses, fs URLs and key files.
#include <atf-c++.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <sodium.h>

#include "pvfs/config.hpp"

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

void write_file(const std::string &path, std::string_view text)
{
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    require_msg(out.good(), "cannot write " + path);
}

// A valid config; the line numbers matter to the error tests.
//  1 [filesystem]        7 name = "m0"               13 name = "d0"
//  2 name = "pvfs"       8 addresses = [...3334]     14 addresses = [...3335]
//  3 id = 7              9 roles = ["metadata"]      15 roles = ["data"]
//  4 key_file = ...     10 storage = "/srv/m0"       16 storage = "/srv/d0"
//  5                    11
//  6 [[server]]         12 [[server]]
std::vector<std::string> base_lines()
{
    return {
        "[filesystem]",
        "name = \"pvfs\"",
        "id = 7",
        "key_file = \"/etc/pvfs/pvfs.key\"",
        "",
        "[[server]]",
        "name = \"m0\"",
        "addresses = [\"tcp://127.0.0.1:3334\"]",
        "roles = [\"metadata\"]",
        "storage = \"/srv/m0\"",
        "",
        "[[server]]",
        "name = \"d0\"",
        "addresses = [\"tcp://127.0.0.1:3335\"]",
        "roles = [\"data\"]",
        "storage = \"/srv/d0\"",
    };
}

// The base text with lines replaced (1-based) and lines appended.
std::string text_with(std::initializer_list<std::pair<std::size_t, std::string>> replace,
                      std::string_view append = {})
{
    std::vector<std::string> lines = base_lines();
    for (const auto &[number, line] : replace) {
        lines.at(number - 1) = line;
    }
    std::string text;
    for (const std::string &line : lines) {
        text += line + "\n";
    }
    return text + std::string(append);
}

config::Result parse_text(std::string_view text)
{
    return config::parse(text, "t.toml", "/etc/pvfs");
}

// The parse fails with a message that starts with `prefix` (origin, line
// and key) and contains `detail`.
void expect_error(std::string_view text, std::string_view prefix, std::string_view detail)
{
    const config::Result r = parse_text(text);
    require_msg(!r.ok(), fmt::format("parsed, expected an error starting '{}'", prefix));
    require_msg(r.error.starts_with(prefix),
                fmt::format("error '{}' does not start with '{}'", r.error, prefix));
    require_msg(r.error.find(detail) != std::string::npos,
                fmt::format("error '{}' does not mention '{}'", r.error, detail));
    require_msg(r.error.find('\n') == std::string::npos, "error is not one line: " + r.error);
}

config::Cluster parse_ok(std::string_view text, std::string_view base = "/etc/pvfs")
{
    const config::Result r = config::parse(text, "t.toml", base);
    require_msg(r.ok(), "unexpected error: " + r.error);
    return r.cluster;
}

std::string example_path()
{
    return std::string(PVFS_SOURCE_DIR) + "/docs/examples/cluster.toml";
}

// A cluster that uses every setting away from its default.
config::Cluster unusual_cluster()
{
    config::Cluster c;
    c.fs_name = "scratch.fs-2_b";
    c.fs_id = 4294967295U;
    c.key_file = R"(/keys/with "quotes" and \backslash/k)";
    c.client_keys = "/etc/pvfs/clients";
    c.defaults.default_layout = {64U * 1024U * 3U, 1, 0};
    c.defaults.bulk_chunk = 100'000;
    c.defaults.request_timeout_ms = 1500;
    c.defaults.idle_timeout_ms = 120'000;
    c.defaults.root_squash = true;
    c.defaults.require_bound = false;
    c.defaults.durable_metadata = false;
    c.defaults.group_commit = false;
    c.defaults.early_writeback = false;
    c.defaults.session_ttl_ms = 90'000;
    c.defaults.max_sessions = 7;
    c.defaults.lease_ms = 3000;
    c.defaults.reclaim_after_ms = 45'000;
    c.defaults.max_connections = 100;
    c.defaults.max_connections_per_address = 5;
    c.defaults.hello_timeout_ms = 2500;
    c.defaults.capability_skew_ms = 5000;
    c.defaults.frame_timeout_ms = 120'000;
    c.defaults.frame_min_rate = 1000;
    c.defaults.unexpected_total_bytes = std::uint64_t{1} << 30U;
    c.defaults.early_total_bytes = std::uint64_t{32} << 20U;
    c.defaults.send_queue_bytes = std::uint64_t{256} << 10U;
    c.servers = {
        {"a", {"tcp://[::1]:1", "ib://[fe80::1]:65535"}, true, true, "/s/a"},
        {"b", {"ib://host-b.example:4000"}, false, true, "/s/b"},
        {"c", {"tcp://198.18.2.3:7"}, true, false, "/s/c"},
    };
    c.servers[0].metrics_file = "/run/pvfs/a.prom";
    c.servers[0].metrics_interval_ms = 2500;
    return c;
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(example_parses);
ATF_TEST_CASE_BODY(example_parses)
{
    const config::Result r = config::load_file(example_path());
    require_msg(r.ok(), r.error);
    const config::Cluster &c = r.cluster;
    ATF_REQUIRE_EQ(c.fs_name, "pvfs");
    ATF_REQUIRE_EQ(c.fs_id, 2876543210U);
    ATF_REQUIRE_EQ(c.key_file, std::string(PVFS_SOURCE_DIR) + "/docs/examples/pvfs.key");
    ATF_REQUIRE_EQ(c.defaults.default_layout.stripe_size, 1U << 20U);
    ATF_REQUIRE_EQ(c.defaults.default_layout.stripe_count, 3U); // 0 = every data server
    ATF_REQUIRE_EQ(c.defaults.default_layout.first_server, 0U);
    ATF_REQUIRE_EQ(c.defaults.bulk_chunk, 1U << 20U);
    ATF_REQUIRE_EQ(c.defaults.request_timeout_ms, 60'000U);
    ATF_REQUIRE_EQ(c.defaults.idle_timeout_ms, 30'000U);
    ATF_REQUIRE(!c.defaults.root_squash);
    ATF_REQUIRE(c.defaults.require_bound);
    ATF_REQUIRE(c.defaults.durable_metadata);
    ATF_REQUIRE(c.defaults.group_commit);
    ATF_REQUIRE(c.defaults.early_writeback);
    ATF_REQUIRE_EQ(c.defaults.session_ttl_ms, 86'400'000U);
    ATF_REQUIRE_EQ(c.defaults.max_sessions, 65536U);
    ATF_REQUIRE_EQ(c.defaults.lease_ms, 90'000U);
    ATF_REQUIRE_EQ(c.defaults.max_connections, 4096U);
    ATF_REQUIRE_EQ(c.defaults.max_connections_per_address, 64U);
    ATF_REQUIRE_EQ(c.defaults.hello_timeout_ms, 10'000U);
    ATF_REQUIRE_EQ(c.defaults.capability_skew_ms, 120'000U);
    ATF_REQUIRE_EQ(c.defaults.frame_timeout_ms, 30'000U);
    ATF_REQUIRE_EQ(c.defaults.frame_min_rate, 4096U);
    ATF_REQUIRE_EQ(c.defaults.unexpected_total_bytes, std::uint64_t{256} << 20U);
    ATF_REQUIRE_EQ(c.defaults.early_total_bytes, std::uint64_t{64} << 20U);
    ATF_REQUIRE_EQ(c.defaults.send_queue_bytes, std::uint64_t{4} << 20U);
    ATF_REQUIRE_EQ(c.servers.size(), 4U);
    ATF_REQUIRE_EQ(c.servers[0].name, "meta0");
    ATF_REQUIRE(c.servers[0].addresses ==
                (std::vector<std::string>{"tcp://198.18.0.1:3334", "ib://198.19.0.1:3334"}));
    ATF_REQUIRE_EQ(c.servers[0].storage, "/var/lib/pvfs/meta0");
    ATF_REQUIRE(c.metadata_servers() == (std::vector<std::size_t>{0, 3}));
    ATF_REQUIRE(c.data_servers() == (std::vector<std::size_t>{1, 2, 3}));
    ATF_REQUIRE(c.servers[3].metadata && c.servers[3].data);

    const config::Server *io1 = c.find("io1");
    ATF_REQUIRE(io1 != nullptr);
    ATF_REQUIRE_EQ(io1->addresses.at(0), "tcp://198.18.0.3:3334");
    ATF_REQUIRE(c.find("io9") == nullptr);
    ATF_REQUIRE(c.index_of_address("tcp://198.18.0.3:3334") == std::optional<std::size_t>(2));
    ATF_REQUIRE(c.index_of_address("tcp://198.18.0.3:03334") == std::optional<std::size_t>(2));
    ATF_REQUIRE(c.index_of_address("ib://198.19.0.1:3334") == std::optional<std::size_t>(0));
    ATF_REQUIRE(!c.index_of_address("tcp://198.18.0.3:3335").has_value());
    ATF_REQUIRE(!c.index_of_address("garbage").has_value());
}

ATF_TEST_CASE_WITHOUT_HEAD(round_trip);
ATF_TEST_CASE_BODY(round_trip)
{
    const config::Result example = config::load_file(example_path());
    require_msg(example.ok(), example.error);
    for (const config::Cluster &c : {example.cluster, unusual_cluster()}) {
        const std::string text = config::to_toml(c);
        // No base directory: the canonical text has only absolute paths.
        const config::Result back = config::parse(text, "canonical", "");
        require_msg(back.ok(), back.error + "\n" + text);
        require_msg(back.cluster == c, "round trip changed the cluster:\n" + text);
        ATF_REQUIRE_EQ(config::to_toml(back.cluster), text);
    }
    const std::string text = config::to_toml(unusual_cluster());
    ATF_REQUIRE(text.find("stripe_size = \"192KiB\"") != std::string::npos);
    ATF_REQUIRE(text.find("stripe_count = 1\n") != std::string::npos);
    ATF_REQUIRE(text.find("bulk_chunk = 100000") != std::string::npos);
    ATF_REQUIRE(text.find("request_timeout = \"1500ms\"") != std::string::npos);
    ATF_REQUIRE(text.find("idle_timeout = \"2min\"") != std::string::npos);
    ATF_REQUIRE(text.find("session_ttl = \"90s\"") != std::string::npos);
    ATF_REQUIRE(text.find("max_sessions = 7\n") != std::string::npos);
    ATF_REQUIRE(text.find("lease = \"3s\"") != std::string::npos);
    ATF_REQUIRE(text.find("metrics_file = \"/run/pvfs/a.prom\"\nmetrics_interval = \"2500ms\"") !=
                std::string::npos);
    // Without metrics, the text has no such line (its hash is as before).
    ATF_REQUIRE(config::to_toml(example.cluster).find("metrics_") == std::string::npos);
    ATF_REQUIRE(text.find("max_connections = 100\n") != std::string::npos);
    ATF_REQUIRE(text.find("max_connections_per_address = 5\n") != std::string::npos);
    // Left at their defaults, the caps are not written (the hash of such a
    // cluster is what it was before they existed).
    ATF_REQUIRE(config::to_toml(example.cluster).find("max_connections") == std::string::npos);
    for (const char *line :
         {"hello_timeout = \"2500ms\"\n", "frame_timeout = \"2min\"\n", "frame_min_rate = 1000\n",
          "capability_skew = \"5s\"\n", "unexpected_total_bytes = \"1GiB\"\n",
          "early_total_bytes = \"32MiB\"\n", "send_queue_bytes = \"256KiB\"\n"}) {
        require_msg(text.find(line) != std::string::npos, std::string("no ") + line + text);
    }
    // The other BMI limits likewise.
    for (const char *key : {"hello_timeout", "frame_timeout", "frame_min_rate", "capability_skew",
                            "unexpected_total_bytes", "early_total_bytes", "send_queue_bytes"}) {
        require_msg(config::to_toml(example.cluster).find(key) == std::string::npos,
                    std::string(key) + " written at its default");
    }
    ATF_REQUIRE(text.find("group_commit = false\n") != std::string::npos);
    ATF_REQUIRE(config::to_toml(example.cluster).find("group_commit") == std::string::npos);
    // A stripe count equal to the number of data servers is "every one".
    ATF_REQUIRE(config::to_toml(example.cluster).find("stripe_count = 0") != std::string::npos);
}

ATF_TEST_CASE_WITHOUT_HEAD(hash_stable_and_sensitive);
ATF_TEST_CASE_BODY(hash_stable_and_sensitive)
{
    const config::Cluster base = unusual_cluster();
    const auto h = config::hash(base);

    // It is SHA-256 of the canonical text.
    ATF_REQUIRE(sodium_init() >= 0);
    const std::string text = config::to_toml(base);
    std::array<unsigned char, crypto_hash_sha256_BYTES> expect{};
    crypto_hash_sha256(expect.data(), reinterpret_cast<const unsigned char *>(text.data()),
                       text.size());
    ATF_REQUIRE(std::memcmp(expect.data(), h.data(), h.size()) == 0);

    ATF_REQUIRE(config::hash(base) == h);
    ATF_REQUIRE(config::hash(parse_ok(text, "")) == h);

    std::vector<std::pair<std::string, config::Cluster>> changed;
    const auto change = [&](std::string what, auto edit) {
        config::Cluster c = base;
        edit(c);
        changed.emplace_back(std::move(what), std::move(c));
    };
    change("fs_name", [](config::Cluster &c) { c.fs_name = "other"; });
    change("fs_id", [](config::Cluster &c) { c.fs_id = 1; });
    change("key_file", [](config::Cluster &c) { c.key_file = "/k2"; });
    change("stripe_size", [](config::Cluster &c) { c.defaults.default_layout.stripe_size *= 2; });
    change("stripe_count", [](config::Cluster &c) { c.defaults.default_layout.stripe_count = 2; });
    change("bulk_chunk", [](config::Cluster &c) { c.defaults.bulk_chunk += 1; });
    change("request_timeout", [](config::Cluster &c) { c.defaults.request_timeout_ms += 1; });
    change("idle_timeout", [](config::Cluster &c) { c.defaults.idle_timeout_ms += 1; });
    change("root_squash", [](config::Cluster &c) { c.defaults.root_squash = false; });
    change("require_bound", [](config::Cluster &c) { c.defaults.require_bound = true; });
    change("durable_metadata", [](config::Cluster &c) { c.defaults.durable_metadata = true; });
    change("group_commit", [](config::Cluster &c) { c.defaults.group_commit = true; });
    change("early_writeback", [](config::Cluster &c) { c.defaults.early_writeback = true; });
    change("server name", [](config::Cluster &c) { c.servers[1].name = "bb"; });
    change("address", [](config::Cluster &c) { c.servers[1].addresses[0] = "ib://host-b:4001"; });
    change("role", [](config::Cluster &c) { c.servers[1].metadata = true; });
    change("storage", [](config::Cluster &c) { c.servers[2].storage = "/s/cc"; });
    change("metrics_file", [](config::Cluster &c) { c.servers[2].metrics_file = "/m.prom"; });
    change("metrics_interval", [](config::Cluster &c) { c.servers[0].metrics_interval_ms = 1000; });
    change("order", [](config::Cluster &c) { std::swap(c.servers[1], c.servers[2]); });
    change("server count", [](config::Cluster &c) { c.servers.pop_back(); });
    for (const auto &[what, c] : changed) {
        require_msg(config::hash(c) != h, "hash unchanged after changing " + what);
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(syntax_errors);
ATF_TEST_CASE_BODY(syntax_errors)
{
    expect_error(text_with({{3, "id = 7x"}}), "t.toml:3: syntax error: ", "");
    expect_error(text_with({{3, "name = \"again\""}}),
                 "t.toml:3: syntax error: ", "already exists");
    expect_error(text_with({}, "[filesystem]\n"), "t.toml:17: syntax error: ", "");
    expect_error(text_with({{14, "addresses = [\"tcp://127.0.0.1:3335\""}}),
                 "t.toml:", "syntax error");
    expect_error("= 1\n", "t.toml:1: syntax error: ", "");
}

ATF_TEST_CASE_WITHOUT_HEAD(filesystem_errors);
ATF_TEST_CASE_BODY(filesystem_errors)
{
    std::string no_fs = text_with({{1, "[other]"}, {2, ""}, {3, ""}, {4, ""}});
    expect_error(no_fs, "t.toml:1: other: ", "unknown key");
    no_fs = text_with({{1, ""}, {2, ""}, {3, ""}, {4, ""}});
    expect_error(no_fs, "t.toml:1: filesystem: ", "missing");
    expect_error(text_with({{1, "filesystem = 5"}, {2, ""}, {3, ""}, {4, ""}}),
                 "t.toml:1: filesystem: ", "expected a table, got an integer");
    expect_error(text_with({{2, ""}}), "t.toml:1: filesystem.name: ", "missing");
    expect_error(text_with({{2, "name = \"a/b\""}}),
                 "t.toml:2: filesystem.name: ", "not a valid name");
    expect_error(text_with({{2, fmt::format("name = \"{}\"", std::string(65, 'n'))}}),
                 "t.toml:2: filesystem.name: ", "not a valid name");
    expect_error(text_with({{2, "name = 5"}}),
                 "t.toml:2: filesystem.name: ", "expected a string, got an integer");
    expect_error(text_with({{3, ""}}), "t.toml:1: filesystem.id: ", "missing");
    expect_error(text_with({{3, "id = 4294967296"}}),
                 "t.toml:3: filesystem.id: ", "out of range 0..4294967295");
    expect_error(text_with({{3, "id = -1"}}), "t.toml:3: filesystem.id: ", "out of range");
    expect_error(text_with({{3, "id = \"7\""}}),
                 "t.toml:3: filesystem.id: ", "expected an integer, got a string");
    expect_error(text_with({{4, ""}}), "t.toml:1: filesystem.key_file: ", "missing");
    expect_error(text_with({{4, "key_file = \"\""}}),
                 "t.toml:4: filesystem.key_file: ", "empty path");
    expect_error(text_with({{4, R"(key_file = "a\u0001b")"}}),
                 "t.toml:4: filesystem.key_file: ", "control character");
    expect_error(text_with({{4, "key_file = \"k\"\nclient_keys = \"\""}}),
                 "t.toml:5: filesystem.client_keys: ", "empty path");
    expect_error(text_with({{4, "key_file = \"k\"\nclient_keys = 3"}}),
                 "t.toml:5: filesystem.client_keys: ", "string");
    const config::Cluster with_clients =
        parse_ok(text_with({{4, "key_file = \"k\"\nclient_keys = \"clients\""}}));
    require_msg(with_clients.client_keys == "/etc/pvfs/clients",
                "client_keys resolved to " + with_clients.client_keys);
    require_msg(parse_ok(text_with({})).client_keys.empty(), "client_keys set by default");
}

ATF_TEST_CASE_WITHOUT_HEAD(defaults_errors);
ATF_TEST_CASE_BODY(defaults_errors)
{
    const auto defaults = [](std::string_view line) {
        return text_with({}, fmt::format("\n[defaults]\n{}\n", line));
    }; // [defaults] is line 18, the key line 19
    expect_error("defaults = 1\n" + text_with({}), "t.toml:1: defaults: ", "expected a table");
    expect_error(defaults("stripe_size = 1000"),
                 "t.toml:19: defaults.stripe_size: ", "out of range 64KiB..1GiB");
    expect_error(defaults("stripe_size = \"2GiB\""),
                 "t.toml:19: defaults.stripe_size: ", "2GiB out of range 64KiB..1GiB");
    expect_error(defaults("stripe_size = \"66KiB\""),
                 "t.toml:19: defaults.stripe_size: ", "66KiB is not a multiple of 4096");
    expect_error(defaults("stripe_size = 65537"),
                 "t.toml:19: defaults.stripe_size: ", "65537 bytes is not a multiple of 4096");
    expect_error(defaults("stripe_size = true"),
                 "t.toml:19: defaults.stripe_size: ", "expected a size");
    expect_error(defaults("stripe_count = 2"),
                 "t.toml:19: defaults.stripe_count: ", "2 is more than the 1 data server");
    expect_error(defaults("stripe_count = -1"), "t.toml:19: defaults.stripe_count: ", "negative");
    expect_error(defaults("bulk_chunk = \"128MiB\""),
                 "t.toml:19: defaults.bulk_chunk: ", "out of range 64KiB..64MiB");
    expect_error(defaults("bulk_chunk = \"32KiB\""),
                 "t.toml:19: defaults.bulk_chunk: ", "out of range");
    expect_error(defaults("request_timeout = \"5ms\""),
                 "t.toml:19: defaults.request_timeout: ", "5ms out of range 10ms..1440min");
    expect_error(defaults("idle_timeout = \"1441min\""),
                 "t.toml:19: defaults.idle_timeout: ", "out of range");
    expect_error(defaults("root_squash = \"yes\""),
                 "t.toml:19: defaults.root_squash: ", "expected true or false");
    expect_error(defaults("require_bound = \"no\""),
                 "t.toml:19: defaults.require_bound: ", "expected true or false");
    expect_error(defaults("durable_metadata = 1"),
                 "t.toml:19: defaults.durable_metadata: ", "expected true or false");
    expect_error(defaults("group_commit = \"on\""),
                 "t.toml:19: defaults.group_commit: ", "expected true or false");
    expect_error(defaults("early_writeback = 0"),
                 "t.toml:19: defaults.early_writeback: ", "expected true or false");
    expect_error(defaults("session_ttl = \"500ms\""),
                 "t.toml:19: defaults.session_ttl: ", "shorter than 1 s");
    expect_error(defaults("session_ttl = 60"), "t.toml:19: defaults.session_ttl: ", "unit");
    expect_error(defaults("lease = \"500ms\""), "t.toml:19: defaults.lease: ", "shorter than 1 s");
    expect_error(defaults("reclaim_after = \"60s\""),
                 "t.toml:19: defaults.reclaim_after: ", "shorter than the lease (90000 ms)");
    expect_error(defaults("max_sessions = 0"),
                 "t.toml:19: defaults.max_sessions: ", "0 is not in 1 .. 16777216");
    expect_error(defaults("max_sessions = 16777217"),
                 "t.toml:19: defaults.max_sessions: ", "is not in");
    expect_error(defaults("max_connections = 0"),
                 "t.toml:19: defaults.max_connections: ", "0 is not in 1 .. 1048576");
    expect_error(defaults("max_connections_per_address = 1048577"),
                 "t.toml:19: defaults.max_connections_per_address: ", "is not in");
    expect_error(defaults("capability_skew = \"61min\""),
                 "t.toml:19: defaults.capability_skew: ", "longer than 60min");
    expect_error(defaults("hello_timeout = \"50ms\""),
                 "t.toml:19: defaults.hello_timeout: ", "50ms out of range 100ms..60min");
    expect_error(defaults("frame_timeout = \"2h\""), "t.toml:19: defaults.frame_timeout: ", "");
    expect_error(defaults("frame_timeout = \"61min\""),
                 "t.toml:19: defaults.frame_timeout: ", "out of range 100ms..60min");
    expect_error(defaults("frame_timeout = 30"), "t.toml:19: defaults.frame_timeout: ", "unit");
    expect_error(defaults("frame_min_rate = 0"),
                 "t.toml:19: defaults.frame_min_rate: ", "0 is not in 1 .. 1073741824");
    expect_error(defaults("frame_min_rate = \"4KiB\""),
                 "t.toml:19: defaults.frame_min_rate: ", "integer");
    expect_error(defaults("unexpected_total_bytes = \"8MiB\""),
                 "t.toml:19: defaults.unexpected_total_bytes: ",
                 "8MiB out of range 16MiB..1024GiB (at least what one client may queue, 16MiB)");
    expect_error(defaults("early_total_bytes = \"512KiB\""),
                 "t.toml:19: defaults.early_total_bytes: ", "512KiB out of range 1MiB..1024GiB");
    expect_error(defaults("send_queue_bytes = \"2GiB\""),
                 "t.toml:19: defaults.send_queue_bytes: ", "2GiB out of range 64KiB..1GiB");
    expect_error(defaults("send_queue_bytes = -1"),
                 "t.toml:19: defaults.send_queue_bytes: ", "negative");

    const config::Cluster c = parse_ok(defaults("stripe_count = 1\nstripe_size = 65536"));
    ATF_REQUIRE(c.defaults.default_layout == (pvfs::Layout{65536, 1, 0}));
}

// insecure_benchmark_only (docs/security.md "Chunk MACs"): off by default
// and not written then; on, only for a cluster all on loopback.
ATF_TEST_CASE_WITHOUT_HEAD(insecure_benchmark_only);
ATF_TEST_CASE_BODY(insecure_benchmark_only)
{
    const config::Result plain = parse_text(text_with({}));
    require_msg(plain.ok(), plain.error);
    ATF_REQUIRE(!plain.cluster.defaults.insecure_benchmark_only);
    ATF_REQUIRE(config::to_toml(plain.cluster).find("insecure") == std::string::npos);
    const config::Result on =
        parse_text(text_with({}, "\n[defaults]\ninsecure_benchmark_only = true\n"));
    require_msg(on.ok(), on.error);
    ATF_REQUIRE(on.cluster.defaults.insecure_benchmark_only);
    const std::string text = config::to_toml(on.cluster);
    ATF_REQUIRE(text.find("insecure_benchmark_only = true\n") != std::string::npos);
    const config::Result again = parse_text(text);
    require_msg(again.ok() && again.cluster == on.cluster, again.error);
    // One server off loopback: refused, naming it.
    expect_error(text_with({{14, "addresses = [\"tcp://198.18.0.3:3335\"]"}},
                           "\n[defaults]\ninsecure_benchmark_only = true\n"),
                 "t.toml:19: defaults.insecure_benchmark_only: ",
                 "server d0 has the address tcp://198.18.0.3:3335, not on loopback");
    expect_error(text_with({}, "\n[defaults]\ninsecure_benchmark_only = 1\n"),
                 "t.toml:19: defaults.insecure_benchmark_only: ", "expected true or false");
}

ATF_TEST_CASE_WITHOUT_HEAD(server_errors);
ATF_TEST_CASE_BODY(server_errors)
{
    std::string text;
    for (const std::string &line : base_lines()) {
        if (line.starts_with("[filesystem]") || line.starts_with("name = \"pvfs\"") ||
            line.starts_with("id =") || line.starts_with("key_file")) {
            text += line + "\n";
        }
    }
    expect_error(text, "t.toml:1: server: ", "no [[server]] tables");
    // (Keys before the first header belong to the root table.)
    expect_error("server = []\n" + text, "t.toml:1: server: ", "no server has the metadata role");
    expect_error("server = 3\n" + text, "t.toml:1: server: ", "expected an array");
    expect_error("server = [1]\n" + text, "t.toml:1: server[0]: ", "expected a table");

    expect_error(text_with({{9, "roles = [\"data\"]"}}),
                 "t.toml:6: server: ", "no server has the metadata role");
    expect_error(text_with({{15, "roles = [\"metadata\"]"}}),
                 "t.toml:6: server: ", "no server has the data role");
    expect_error(text_with({{13, "name = \"m0\""}}),
                 "t.toml:13: server[1].name: ", "'m0' is also the name of server[0]");
    expect_error(text_with({{13, ""}}), "t.toml:12: server[1].name: ", "missing");
    expect_error(text_with({{13, "name = \"\""}}),
                 "t.toml:13: server[1].name: ", "not a valid name");
    expect_error(text_with({{14, "addresses = [\"tcp://127.0.0.1:3334\"]"}}),
                 "t.toml:14: server[1].addresses[0]: ",
                 "tcp://127.0.0.1:3334 is also an address of server[0]");
    // Compared canonically: a leading zero does not make it another address.
    expect_error(text_with({{14, "addresses = [\"tcp://127.0.0.1:03334\"]"}}),
                 "t.toml:14: server[1].addresses[0]: ", "also an address of server[0]");
    expect_error(text_with({{14, R"(addresses = ["tcp://a:1", "tcp://b:2"])"}}),
                 "t.toml:14: server[1].addresses[1]: ", "a second tcp address");
    expect_error(text_with({{14, "addresses = [\"tcp://127.0.0.1:99999\"]"}}),
                 "t.toml:14: server[1].addresses[0]: ", "port 99999 out of range 1..65535");
    expect_error(text_with({{14, "addresses = [\"tcp://:1\"]"}}),
                 "t.toml:14: server[1].addresses[0]: ", "empty host");
    expect_error(text_with({{14, "addresses = [\"udp://h:1\"]"}}),
                 "t.toml:14: server[1].addresses[0]: ", "unknown scheme 'udp'");
    expect_error(text_with({{14, "addresses = [\"h:1\"]"}}),
                 "t.toml:14: server[1].addresses[0]: ", "expected scheme://host:port");
    expect_error(text_with({{14, "addresses = [\"tcp://h\"]"}}),
                 "t.toml:14: server[1].addresses[0]: ", "no port");
    expect_error(text_with({{14, "addresses = []"}}),
                 "t.toml:14: server[1].addresses: ", "no address");
    expect_error(text_with({{14, "addresses = \"tcp://h:1\""}}),
                 "t.toml:14: server[1].addresses: ", "expected an array, got a string");
    expect_error(text_with({{14, "addresses = [5]"}}),
                 "t.toml:14: server[1].addresses[0]: ", "expected a string, got an integer");
    expect_error(text_with({{15, R"(roles = ["data", "storage"])"}}),
                 "t.toml:15: server[1].roles[1]: ", "unknown role 'storage'");
    expect_error(text_with({{15, R"(roles = ["data", "data"])"}}),
                 "t.toml:15: server[1].roles[1]: ", "given twice");
    expect_error(text_with({{15, "roles = []"}}), "t.toml:15: server[1].roles: ", "no role");
    expect_error(text_with({{16, ""}}), "t.toml:12: server[1].storage: ", "missing");
    expect_error(text_with({{16, "storage = 1"}}),
                 "t.toml:16: server[1].storage: ", "expected a string");
}

// [[server]] metrics_file and metrics_interval: a file path checked like
// the others, resolved against the config's directory; a duration of at
// least 100ms.
ATF_TEST_CASE_WITHOUT_HEAD(metrics_keys);
ATF_TEST_CASE_BODY(metrics_keys)
{
    config::Cluster c = parse_ok(text_with({{10, "storage = \"/s\"\nmetrics_file = \"m0.prom\""},
                                            {16, "storage = \"/s2\"\nmetrics_file = "
                                                 "\"/run/pvfs//d0.prom\"\nmetrics_interval = "
                                                 "\"500ms\""}}));
    ATF_REQUIRE_EQ(c.servers[0].metrics_file, "/etc/pvfs/m0.prom");
    ATF_REQUIRE_EQ(c.servers[0].metrics_interval_ms, config::default_metrics_interval_ms);
    ATF_REQUIRE_EQ(c.servers[1].metrics_file, "/run/pvfs/d0.prom");
    ATF_REQUIRE_EQ(c.servers[1].metrics_interval_ms, 500U);
    c = parse_ok(text_with({}));
    ATF_REQUIRE(c.servers[0].metrics_file.empty());

    expect_error(text_with({{16, "storage = \"/s\"\nmetrics_file = \"\""}}),
                 "t.toml:17: server[1].metrics_file: ", "empty path");
    expect_error(text_with({{16, "storage = \"/s\"\nmetrics_file = 7"}}),
                 "t.toml:17: server[1].metrics_file: ", "expected a string, got an integer");
    expect_error(text_with({{16, "storage = \"/s\"\nmetrics_file = \"/run/pvfs/\""}}),
                 "t.toml:17: server[1].metrics_file: ", "names a directory");
    expect_error(text_with({{16, "storage = \"/s\"\nmetrics_file = \"/run/pvfs/..\""}}),
                 "t.toml:17: server[1].metrics_file: ", "names a directory");
    expect_error(text_with({{16, "storage = \"/s\"\nmetrics_file = \"/run/a\\u0007b.prom\""}}),
                 "t.toml:17: server[1].metrics_file: ", "control character");
    expect_error(text_with({{16, "storage = \"/s\"\nmetrics_interval = 10"}}),
                 "t.toml:17: server[1].metrics_interval: ", "expected a duration");
    expect_error(text_with({{16, "storage = \"/s\"\nmetrics_interval = \"50ms\""}}),
                 "t.toml:17: server[1].metrics_interval: ", "shorter than 100ms");
    expect_error(text_with({{16, "storage = \"/s\"\nmetrics_interval = \"2days\""}}),
                 "t.toml:17: server[1].metrics_interval: ", "");
    expect_error(text_with({{16, "storage = \"/s\"\nmetrics_interval = \"99999min\""}}),
                 "t.toml:17: server[1].metrics_interval: ", "out of range");
}

ATF_TEST_CASE_WITHOUT_HEAD(unknown_keys);
ATF_TEST_CASE_BODY(unknown_keys)
{
    expect_error(text_with({}, "\n[filesytem]\nname = \"x\"\n"), "t.toml:18: filesytem: ",
                 "unknown key (expected one of: filesystem, defaults, server)");
    expect_error(text_with({{3, "idd = 7"}}), "t.toml:3: filesystem.idd: ", "unknown key");
    expect_error(text_with({}, "\n[defaults]\nstripe_sise = \"1MiB\"\n"),
                 "t.toml:19: defaults.stripe_sise: ", "unknown key");
    expect_error(text_with({{16, "storage = \"/s\"\nstorgae = \"/s\""}}),
                 "t.toml:17: server[1].storgae: ", "unknown key");
    // A key that would be fine elsewhere is still unknown here.
    expect_error(text_with({{10, "storage = \"/s\"\nid = 3"}}),
                 "t.toml:11: server[0].id: ", "unknown key");
}

ATF_TEST_CASE_WITHOUT_HEAD(bad_units);
ATF_TEST_CASE_BODY(bad_units)
{
    const auto size = [](std::string_view value) {
        return text_with({}, fmt::format("\n[defaults]\nbulk_chunk = {}\n", value));
    };
    const std::string key = "t.toml:19: defaults.bulk_chunk: ";
    expect_error(size("\"1MB\""), key, "unknown unit 'MB'; use KiB, MiB or GiB");
    expect_error(size("\"1 mib\""), key, "unknown unit 'mib'");
    expect_error(size("\"1.5MiB\""), key, "unknown unit '.5MiB'");
    expect_error(size("\"MiB\""), key, "not a size");
    expect_error(size("\"-1MiB\""), key, "not a size");
    expect_error(size("\"65536\""), key, "has no unit");
    expect_error(size("\"99999999999999999999GiB\""), key, "too large");
    expect_error(size("\"17179869184GiB\""), key, "too large");
    expect_error(size("-65536"), key, "cannot be negative");
    expect_error(size("1.5"), key, "got a float");

    const auto duration = [](std::string_view value) {
        return text_with({}, fmt::format("\n[defaults]\nidle_timeout = {}\n", value));
    };
    const std::string dkey = "t.toml:19: defaults.idle_timeout: ";
    expect_error(duration("30"), dkey, "expected a duration with a unit");
    expect_error(duration("\"30\""), dkey, "has no unit");
    expect_error(duration("\"1h\""), dkey, "unknown unit 'h'; use ms, s or min");
    expect_error(duration("\"30 sec\""), dkey, "unknown unit 'sec'");
    expect_error(duration("\"s\""), dkey, "not a duration");

    // The accepted forms.
    ATF_REQUIRE_EQ(parse_ok(size("\"64 KiB\"")).defaults.bulk_chunk, 65536U);
    ATF_REQUIRE_EQ(parse_ok(size("\"64MiB\"")).defaults.bulk_chunk, 64U << 20U);
    ATF_REQUIRE_EQ(parse_ok(size("100000")).defaults.bulk_chunk, 100000U);
    ATF_REQUIRE_EQ(parse_ok(size("0x10000")).defaults.bulk_chunk, 65536U);
    ATF_REQUIRE_EQ(parse_ok(duration("\"250ms\"")).defaults.idle_timeout_ms, 250U);
    ATF_REQUIRE_EQ(parse_ok(duration("\"45s\"")).defaults.idle_timeout_ms, 45'000U);
    ATF_REQUIRE_EQ(parse_ok(duration("\"3 min\"")).defaults.idle_timeout_ms, 180'000U);
    ATF_REQUIRE(config::parse_size("1GiB").value == std::uint64_t{1} << 30U);
    ATF_REQUIRE(!config::parse_size("1 GiB ").ok());
    ATF_REQUIRE(config::parse_duration_ms("2min").value == 120'000U);
}

ATF_TEST_CASE_WITHOUT_HEAD(relative_paths);
ATF_TEST_CASE_BODY(relative_paths)
{
    const std::string text = text_with({{4, "key_file = \"keys/../pvfs.key\""},
                                        {10, "storage = \"../data/m0\""},
                                        {16, "storage = \"/srv//d0/./x/..\""}});
    const config::Cluster c = parse_ok(text, "/etc/pvfs/");
    ATF_REQUIRE_EQ(c.key_file, "/etc/pvfs/pvfs.key");
    ATF_REQUIRE_EQ(c.servers[0].storage, "/etc/data/m0");
    ATF_REQUIRE_EQ(c.servers[1].storage, "/srv/d0/");

    // Without a base directory a relative path cannot be resolved.
    const config::Result r = config::parse(text, "get_config", "");
    ATF_REQUIRE(!r.ok());
    ATF_REQUIRE(r.error.starts_with("get_config:4: filesystem.key_file: relative path"));

    // load_file resolves against the file's own directory, however it is named.
    std::filesystem::create_directories("etc/sub");
    write_file("etc/sub/c.toml", text);
    const std::string cwd = std::filesystem::current_path().string();
    for (const std::string &path : {std::string("etc/sub/c.toml"), std::string("./etc/sub/c.toml"),
                                    cwd + "/etc/sub/c.toml"}) {
        const config::Result loaded = config::load_file(path);
        require_msg(loaded.ok(), loaded.error);
        ATF_REQUIRE_EQ(loaded.cluster.key_file, cwd + "/etc/sub/pvfs.key");
        ATF_REQUIRE_EQ(loaded.cluster.servers[0].storage, cwd + "/etc/data/m0");
    }
    // Errors name the file as it was given.
    write_file("etc/sub/bad.toml", text_with({{3, "id = -2"}}));
    const config::Result bad = config::load_file("etc/sub/bad.toml");
    ATF_REQUIRE(bad.error.starts_with("etc/sub/bad.toml:3: filesystem.id: "));
    const config::Result missing = config::load_file("etc/none.toml");
    ATF_REQUIRE(missing.error.starts_with("etc/none.toml: cannot open: "));
    const config::Result dir = config::load_file("etc");
    ATF_REQUIRE_EQ(dir.error, "etc: not a regular file");
}

ATF_TEST_CASE_WITHOUT_HEAD(deep_nesting_refused);
ATF_TEST_CASE_BODY(deep_nesting_refused)
{
    const auto nested = [](std::size_t depth, std::string_view open, std::string_view close) {
        std::string s;
        for (std::size_t i = 0; i < depth; ++i) {
            s += open;
        }
        s += "1";
        for (std::size_t i = 0; i < depth; ++i) {
            s += close;
        }
        return s;
    };
    // 1 for the key, 15 arrays: 16 levels pass the shape check (and then
    // fail the schema); one more is refused before toml11 sees it.
    expect_error("x = " + nested(15, "[", "]") + "\n", "t.toml:1: x: ", "unknown key");
    expect_error("\nx = " + nested(16, "[", "]") + "\n", "t.toml:2: nested deeper than 16 levels",
                 "");
    // Each inline table is two levels: the table and the key in it.
    expect_error("x = " + nested(8, "{a = ", "}") + "\n", "t.toml:1: x: ", "unknown key");
    expect_error("x = " + nested(9, "{a = ", "}") + "\n", "t.toml:1: nested", "");
    // Inside [[server]] (an array and a table) 2 levels are used already.
    expect_error(text_with({}, "x = " + nested(13, "[", "]") + "\n"),
                 "t.toml:17: server[1].x: ", "unknown key");
    expect_error(text_with({}, "x = " + nested(14, "[", "]") + "\n"), "t.toml:17: nested", "");
    std::string dotted = "k";
    for (int i = 0; i < 15; ++i) {
        dotted += ".k";
    }
    expect_error(dotted + " = 1\n", "t.toml:1: k: ", "unknown key");
    expect_error("[" + dotted + "]\n", "t.toml:1: k: ", "unknown key");
    expect_error(dotted + ".k = 1\n", "t.toml:1: nested", "");
    expect_error("[" + dotted + ".k]\n", "t.toml:1: nested", "");
    expect_error("[[" + dotted + "]]\n", "t.toml:1: nested", "");
    expect_error("x = [\n[\n" + nested(15, "[", "]") + "]]\n", "t.toml:3: nested", "");
    // Far beyond: refused at once, no stack overflow.
    expect_error(nested(100000, "[\n", "]\n"), "t.toml:1: syntax error", "");
    expect_error("a = " + nested(100000, "[\n", "]\n"), "t.toml:16: nested", "");
    expect_error("a = " + nested(1000, "{b=", "}"), "t.toml:1: ", "");
    expect_error("a = " + nested(100000, "{b=", "}"), "t.toml:1: line longer than", "");
    // Brackets in strings and comments are not nesting.
    const std::string brackets(40, '[');
    parse_ok(text_with({{7, "name = \"m0\" # " + brackets},
                        {10, "storage = \"/" + brackets + "\""},
                        {16, "storage = '''/" + brackets + "'''"}}));
}

ATF_TEST_CASE_WITHOUT_HEAD(huge_input_refused);
ATF_TEST_CASE_BODY(huge_input_refused)
{
    std::string big = text_with({});
    while (big.size() <= config::max_config_bytes) {
        big += "# padding padding padding padding padding padding padding padding\n";
    }
    const config::Result r = parse_text(big);
    ATF_REQUIRE(!r.ok());
    ATF_REQUIRE_EQ(r.error, fmt::format("t.toml: {} bytes; a config is at most 1048576 bytes "
                                        "(1 MiB)",
                                        big.size()));
    write_file("big.toml", big);
    const config::Result f = config::load_file("big.toml");
    ATF_REQUIRE(f.error.starts_with("big.toml: ") && f.error.find("at most") != std::string::npos);

    // Exactly at the limit is fine.
    std::string exact = text_with({});
    while (exact.size() + 200 < config::max_config_bytes) {
        exact += "#" + std::string(98, 'x') + "\n";
    }
    exact += "#" + std::string(config::max_config_bytes - exact.size() - 2, 'x') + "\n";
    ATF_REQUIRE_EQ(exact.size(), config::max_config_bytes);
    require_msg(parse_text(exact).ok(), parse_text(exact).error);

    expect_error(text_with({{5, "# " + std::string(config::max_line_bytes, 'x')}}),
                 "t.toml:5: line longer than 4096 bytes", "");
}

ATF_TEST_CASE_WITHOUT_HEAD(characters);
ATF_TEST_CASE_BODY(characters)
{
    // TOML is UTF-8 without control characters; both are refused before
    // toml11 runs (it overreads on invalid UTF-8 in strings).
    expect_error(text_with({{10, "storage = '/srv/\xff\xff\xff\xa4'"}}),
                 "t.toml:10: not valid UTF-8", "");
    expect_error(text_with({{10, "storage = \"/srv/\xc0\xaf\""}}), "t.toml:10: not valid UTF-8",
                 ""); // overlong '/'
    expect_error(text_with({{10, "storage = \"/srv/\xed\xa0\x80\""}}), "t.toml:10: not valid UTF-8",
                 ""); // a surrogate
    expect_error(text_with({{2, "name = \"pvfs\" # \xe2\x82"}}), "t.toml:2: not valid UTF-8", "");
    expect_error(text_with({{3, std::string("id = 7\0", 7)}}), "t.toml:3: control character 0x00",
                 "");
    expect_error(text_with({{3, "id = 7\x1b[2J"}}), "t.toml:3: control character 0x1b", "");
    expect_error(text_with({{3, "id = 7\r"}}, "\r"), "t.toml:17: control character 0x0d", "");

    // CRLF line ends, tabs and UTF-8 text are fine, and survive the round trip.
    std::string crlf;
    for (const std::string &line : base_lines()) {
        crlf += line + "\r\n";
    }
    const config::Cluster c =
        parse_ok(crlf + "# caf\xc3\xa9\t\xf0\x9f\x98\x80\r\n[defaults]\r\nroot_squash =\ttrue\r\n");
    ATF_REQUIRE(c.defaults.root_squash);
    const config::Cluster utf8 =
        parse_ok(text_with({{10, "storage = \"/srv/caf\xc3\xa9/\xe2\x82\xac\""}}));
    ATF_REQUIRE_EQ(utf8.servers[0].storage, "/srv/caf\xc3\xa9/\xe2\x82\xac");
    ATF_REQUIRE(parse_ok(config::to_toml(utf8), "") == utf8);
}

ATF_TEST_CASE_WITHOUT_HEAD(many_servers);
ATF_TEST_CASE_BODY(many_servers)
{
    // As many servers as fit in 1 MiB parse, and quickly enough for a
    // server start; metadata indices follow file order.
    std::string text = text_with({});
    std::size_t count = 2;
    for (;; ++count) {
        const std::string entry = fmt::format(
            "[[server]]\nname = \"s{0}\"\naddresses = [\"tcp://10.{1}.{2}.1:3334\"]\nroles = "
            "[\"metadata\", \"data\"]\nstorage = \"/srv/s{0}\"\n",
            count, count / 256, count % 256);
        if (text.size() + entry.size() > config::max_config_bytes) {
            break;
        }
        text += entry;
    }
    const config::Cluster c = parse_ok(text);
    ATF_REQUIRE_EQ(c.servers.size(), count);
    ATF_REQUIRE_EQ(c.metadata_servers().size(), count - 1);
    ATF_REQUIRE_EQ(c.metadata_servers().at(1), 2U);
    ATF_REQUIRE_EQ(c.data_servers().size(), count - 1);
    ATF_REQUIRE(c.find(fmt::format("s{}", count - 1)) != nullptr);
}

ATF_TEST_CASE_WITHOUT_HEAD(addresses);
ATF_TEST_CASE_BODY(addresses)
{
    config::Address a = config::parse_address("tcp://node-1.example:03334");
    require_msg(a.ok(), a.error);
    ATF_REQUIRE_EQ(a.scheme, "tcp");
    ATF_REQUIRE_EQ(a.host, "node-1.example");
    ATF_REQUIRE_EQ(a.port, 3334);
    ATF_REQUIRE_EQ(a.url, "tcp://node-1.example:3334");
    a = config::parse_address("ib://[fe80::1:2]:65535");
    require_msg(a.ok(), a.error);
    ATF_REQUIRE_EQ(a.host, "[fe80::1:2]");
    ATF_REQUIRE_EQ(a.url, "ib://[fe80::1:2]:65535");

    const std::vector<std::pair<std::string, std::string>> bad = {
        {"", "expected scheme://host:port"},
        {"tcp:/h:1", "expected scheme://host:port"},
        {"http://h:1", "unknown scheme 'http'"},
        {"tcp://h:0", "port 0 out of range 1..65535"},
        {"tcp://h:65536", "port 65536 out of range"},
        {"tcp://h:", "no port number"},
        {"tcp://h:1x", "unexpected characters after the port"},
        {"tcp://h:1/fs", "unexpected characters after the port"},
        {"tcp://h", "no port"},
        {"tcp://:1", "empty host"},
        {"tcp://a b:1", "bad host"},
        {"tcp://[::1:1", "without its closing ']'"},
        {"tcp://[]:1", "bad IPv6 host"},
        {"tcp://[::g]:1", "bad IPv6 host"},
        {"tcp://[::1]1", "no port"},
        {"tcp://" + std::string(254, 'h') + ":1", "host longer than 253"},
    };
    for (const auto &[url, why] : bad) {
        const config::Address r = config::parse_address(url);
        require_msg(!r.ok() && r.error.find(why) != std::string::npos,
                    fmt::format("'{}': got '{}', expected '{}'", url, r.error, why));
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(fs_urls);
ATF_TEST_CASE_BODY(fs_urls)
{
    config::FsUrl u = config::parse_fs_url("tcp://127.0.0.1:3334/pvfs");
    require_msg(u.ok(), u.error);
    ATF_REQUIRE_EQ(u.address, "tcp://127.0.0.1:3334");
    ATF_REQUIRE_EQ(u.fs_name, "pvfs");
    u = config::parse_fs_url("ib://[::1]:007/scratch.2");
    require_msg(u.ok(), u.error);
    ATF_REQUIRE_EQ(u.address, "ib://[::1]:7");
    ATF_REQUIRE_EQ(u.fs_name, "scratch.2");

    const std::vector<std::pair<std::string, std::string>> bad = {
        {"tcp://127.0.0.1:3334", "expected scheme://host:port/fsname"},
        {"127.0.0.1:3334/pvfs", "expected scheme://host:port/fsname"},
        {"tcp://127.0.0.1:3334/", "bad file-system name"},
        {"tcp://127.0.0.1:3334/a/b", "bad file-system name"},
        {"tcp://127.0.0.1:3334/" + std::string(65, 'n'), "bad file-system name"},
        {"tcp://127.0.0.1/pvfs", "no port"},
        {"tcp://127.0.0.1:99999/pvfs", "port 99999 out of range"},
        {"nfs://h:1/pvfs", "unknown scheme 'nfs'"},
    };
    for (const auto &[url, why] : bad) {
        const config::FsUrl r = config::parse_fs_url(url);
        require_msg(!r.ok() && r.error.find(why) != std::string::npos,
                    fmt::format("'{}': got '{}', expected '{}'", url, r.error, why));
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(key_files);
ATF_TEST_CASE_BODY(key_files)
{
    // A permissive umask must not make the key readable by others.
    ::umask(0);
    const config::Status made = config::generate_key_file("k1");
    require_msg(made.ok(), made.error);
    struct stat st {};
    ATF_REQUIRE(::stat("k1", &st) == 0);
    ATF_REQUIRE_EQ(st.st_mode & 07777U, 0600U);
    const std::string key = read_file("k1");
    ATF_REQUIRE_EQ(key.size(), 65U);
    ATF_REQUIRE_EQ(key.back(), '\n');
    ATF_REQUIRE(std::all_of(key.begin(), key.end() - 1, [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    }));
    ATF_REQUIRE(key != std::string(64, '0') + "\n");

    // Refuses to overwrite, and leaves the existing key alone.
    const config::Status again = config::generate_key_file("k1");
    ATF_REQUIRE(!again.ok());
    ATF_REQUIRE_EQ(again.error, "k1: already exists; refusing to overwrite a key");
    ATF_REQUIRE_EQ(read_file("k1"), key);
    // Also when the name is a symlink (even a dangling one).
    ATF_REQUIRE(::symlink("elsewhere", "link") == 0);
    ATF_REQUIRE(!config::generate_key_file("link").ok());
    ATF_REQUIRE(!std::filesystem::exists("elsewhere"));

    // Asked to, it replaces the key, still 0600, and leaves no temporary.
    const config::Status replaced = config::generate_key_file("k1", true);
    require_msg(replaced.ok(), replaced.error);
    const std::string key2 = read_file("k1");
    ATF_REQUIRE_EQ(key2.size(), 65U);
    ATF_REQUIRE(key2 != key);
    ATF_REQUIRE(::stat("k1", &st) == 0);
    ATF_REQUIRE_EQ(st.st_mode & 07777U, 0600U);
    std::size_t entries = 0;
    for ([[maybe_unused]] const auto &e : std::filesystem::directory_iterator(".")) {
        ++entries;
    }
    ATF_REQUIRE_EQ(entries, 2U); // k1 and link

    const config::Status nodir = config::generate_key_file("no/such/dir/key");
    ATF_REQUIRE(nodir.error.starts_with("no/such/dir/key: cannot create: "));
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, example_parses);
    ATF_ADD_TEST_CASE(tcs, round_trip);
    ATF_ADD_TEST_CASE(tcs, hash_stable_and_sensitive);
    ATF_ADD_TEST_CASE(tcs, syntax_errors);
    ATF_ADD_TEST_CASE(tcs, filesystem_errors);
    ATF_ADD_TEST_CASE(tcs, defaults_errors);
    ATF_ADD_TEST_CASE(tcs, server_errors);
    ATF_ADD_TEST_CASE(tcs, insecure_benchmark_only);
    ATF_ADD_TEST_CASE(tcs, unknown_keys);
    ATF_ADD_TEST_CASE(tcs, bad_units);
    ATF_ADD_TEST_CASE(tcs, relative_paths);
    ATF_ADD_TEST_CASE(tcs, deep_nesting_refused);
    ATF_ADD_TEST_CASE(tcs, huge_input_refused);
    ATF_ADD_TEST_CASE(tcs, characters);
    ATF_ADD_TEST_CASE(tcs, many_servers);
    ATF_ADD_TEST_CASE(tcs, addresses);
    ATF_ADD_TEST_CASE(tcs, fs_urls);
    ATF_ADD_TEST_CASE(tcs, key_files);
    ATF_ADD_TEST_CASE(tcs, metrics_keys);
}
