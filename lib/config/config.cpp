// Reading the cluster config: the shape checks (shape.cpp), then toml11,
// then the schema, one key at a time, each error naming its line and key.
#include "pvfs/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <sodium.h>
#include <toml.hpp>

#include "pvfs/unique_fd.hpp"
#include "shape.hpp"
#include "units.hpp"

namespace pvfs::config {

namespace {

// std::map keeps the keys sorted, so "unknown key" reports do not depend
// on hashing.
using Value = toml::basic_value<toml::discard_comments, std::map, std::vector>;

// A schema violation, thrown inside this file only and turned into
// Result::error by parse().
class Invalid : public std::runtime_error {
public:
    Invalid(std::size_t line, const std::string &what) : std::runtime_error(what), line_(line) {}
    [[nodiscard]] std::size_t line() const noexcept { return line_; }

private:
    std::size_t line_;
};

// Messages quote what the admin wrote; control characters in it must not
// turn one error into several lines (or into terminal escapes).
std::string printable(std::string_view text)
{
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x20 || byte == 0x7f) {
            out += fmt::format("\\x{:02x}", byte);
        } else {
            out += c;
        }
    }
    return out;
}

std::string_view type_name(const Value &v)
{
    switch (v.type()) {
    case toml::value_t::boolean:
        return "a boolean";
    case toml::value_t::integer:
        return "an integer";
    case toml::value_t::floating:
        return "a float";
    case toml::value_t::string:
        return "a string";
    case toml::value_t::offset_datetime:
    case toml::value_t::local_datetime:
    case toml::value_t::local_date:
    case toml::value_t::local_time:
        return "a date or time";
    case toml::value_t::array:
        return "an array";
    case toml::value_t::table:
        return "a table";
    case toml::value_t::empty:
        break;
    }
    return "nothing";
}

// Finding a value's line costs a scan from the start of the text, so it is
// done only for the one value an error is about.
[[noreturn]] void fail(const Value &at, std::string_view key, std::string_view message)
{
    throw Invalid(at.location().line(), fmt::format("{}: {}", key, message));
}

const Value *member(const Value &table, std::string_view key)
{
    const auto &entries = table.as_table();
    const auto it = entries.find(std::string(key));
    return it == entries.end() ? nullptr : &it->second;
}

std::string join(std::initializer_list<std::string_view> words)
{
    std::string out;
    for (const std::string_view w : words) {
        out += out.empty() ? "" : ", ";
        out += w;
    }
    return out;
}

std::string child(std::string_view parent, std::string_view key)
{
    return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

void reject_unknown(const Value &table, std::string_view path,
                    std::initializer_list<std::string_view> known)
{
    for (const auto &[key, value] : table.as_table()) {
        if (std::find(known.begin(), known.end(), key) == known.end()) {
            fail(value, child(path, printable(key)),
                 fmt::format("unknown key (expected one of: {})", join(known)));
        }
    }
}

const Value &require(const Value &table, std::string_view path, std::string_view key)
{
    const Value *v = member(table, key);
    if (v == nullptr) {
        fail(table, child(path, key), "missing");
    }
    return *v;
}

const Value &require_table(const Value &v, std::string_view key)
{
    if (!v.is_table()) {
        fail(v, key, fmt::format("expected a table, got {}", type_name(v)));
    }
    return v;
}

const std::vector<Value> &require_array(const Value &v, std::string_view key)
{
    if (!v.is_array()) {
        fail(v, key, fmt::format("expected an array, got {}", type_name(v)));
    }
    return v.as_array();
}

const std::string &require_string(const Value &v, std::string_view key)
{
    if (!v.is_string()) {
        fail(v, key, fmt::format("expected a string, got {}", type_name(v)));
    }
    return v.as_string().str;
}

std::int64_t require_integer(const Value &v, std::string_view key)
{
    if (!v.is_integer()) {
        fail(v, key, fmt::format("expected an integer, got {}", type_name(v)));
    }
    return v.as_integer();
}

bool require_bool(const Value &v, std::string_view key)
{
    if (!v.is_boolean()) {
        fail(v, key, fmt::format("expected true or false, got {}", type_name(v)));
    }
    return v.as_boolean();
}

std::string require_name(const Value &v, std::string_view key)
{
    const std::string &name = require_string(v, key);
    if (!valid_config_name(name)) {
        fail(v, key,
             fmt::format("'{}' is not a valid name: use 1 to {} of A-Z a-z 0-9 _ . -",
                         printable(name), max_name_bytes));
    }
    return name;
}

// A size: a TOML integer (bytes) or a string with a unit.
std::uint64_t require_size(const Value &v, std::string_view key)
{
    if (v.is_integer()) {
        if (v.as_integer() < 0) {
            fail(v, key, "a size cannot be negative");
        }
        return static_cast<std::uint64_t>(v.as_integer());
    }
    if (!v.is_string()) {
        fail(v, key,
             fmt::format("expected a size (bytes, or a string like \"1MiB\"), got {}",
                         type_name(v)));
    }
    const Quantity q = parse_size(v.as_string().str);
    if (!q.ok()) {
        fail(v, key, printable(q.error));
    }
    return q.value;
}

std::uint32_t require_size_in(const Value &v, std::string_view key, std::uint32_t min,
                              std::uint32_t max)
{
    const std::uint64_t bytes = require_size(v, key);
    if (bytes < min || bytes > max) {
        fail(v, key,
             fmt::format("{} out of range {}..{}", detail::size_text(bytes), detail::size_text(min),
                         detail::size_text(max)));
    }
    return static_cast<std::uint32_t>(bytes);
}

std::uint32_t require_duration_ms(const Value &v, std::string_view key)
{
    if (!v.is_string()) {
        fail(v, key,
             fmt::format("expected a duration with a unit (ms, s or min), e.g. \"30s\", got {}",
                         type_name(v)));
    }
    const Quantity q = parse_duration_ms(v.as_string().str);
    if (!q.ok()) {
        fail(v, key, printable(q.error));
    }
    if (q.value < min_timeout_ms || q.value > max_timeout_ms) {
        fail(v, key,
             fmt::format("{} out of range {}..{}", detail::duration_text(q.value),
                         detail::duration_text(min_timeout_ms),
                         detail::duration_text(max_timeout_ms)));
    }
    return static_cast<std::uint32_t>(q.value);
}

class Reader {
public:
    explicit Reader(std::string_view base_dir) : base_dir_(base_dir) {}

    Cluster read(const Value &root)
    {
        reject_unknown(root, "", {"filesystem", "defaults", "server"});
        Cluster c;
        read_filesystem(root, c);
        const Value *defaults = member(root, "defaults");
        if (defaults != nullptr) {
            read_defaults(require_table(*defaults, "defaults"), c.defaults);
        }
        read_servers(root, c);
        const std::size_t data_servers = c.data_servers().size();
        std::uint32_t &count = c.defaults.default_layout.stripe_count;
        if (count > data_servers) {
            fail(*stripe_count_, "defaults.stripe_count",
                 fmt::format("{} is more than the {} data server{}", count, data_servers,
                             data_servers == 1 ? "" : "s"));
        }
        if (count == 0) {
            count = static_cast<std::uint32_t>(data_servers);
        }
        if (c.defaults.insecure_benchmark_only) {
            // Unchecked bulk data is for a benchmark on one machine only.
            for (const Server &s : c.servers) {
                for (const std::string &url : s.addresses) {
                    if (!loopback(parse_address(url).host))
                        fail(*insecure_, "defaults.insecure_benchmark_only",
                             fmt::format("server {} has the address {}, not on loopback (the "
                                         "switch is for benchmarks on one machine)",
                                         s.name, url));
                }
            }
        }
        if (c.encrypt) {
            // Only the TCP method seals; ib:// relies on the fabric's own
            // encryption (docs/security.md "Encryption").
            for (const Server &s : c.servers) {
                for (const std::string &url : s.addresses) {
                    if (url.starts_with("ib://"))
                        fail(*encrypt_, "filesystem.encrypt",
                             fmt::format("server {} has the address {}: ib:// does not encrypt "
                                         "(use the fabric's own encryption, or tcp:// addresses "
                                         "only)",
                                         s.name, url));
                }
            }
        }
        return c;
    }

private:
    void read_filesystem(const Value &root, Cluster &c)
    {
        const Value &fs = require_table(require(root, "", "filesystem"), "filesystem");
        reject_unknown(fs, "filesystem", {"name", "id", "key_file", "client_keys", "encrypt"});
        c.fs_name = require_name(require(fs, "filesystem", "name"), "filesystem.name");
        const Value &id = require(fs, "filesystem", "id");
        const std::int64_t n = require_integer(id, "filesystem.id");
        if (n < 0 || n > std::int64_t{UINT32_MAX}) {
            fail(id, "filesystem.id", fmt::format("{} out of range 0..{}", n, UINT32_MAX));
        }
        c.fs_id = static_cast<std::uint32_t>(n);
        c.key_file = path(require(fs, "filesystem", "key_file"), "filesystem.key_file");
        if (const Value *v = member(fs, "client_keys")) {
            c.client_keys = path(*v, "filesystem.client_keys");
        }
        if (const Value *v = member(fs, "encrypt")) {
            c.encrypt = require_bool(*v, "filesystem.encrypt");
            encrypt_ = v; // checked against the servers' addresses once they are known
        }
    }

    void read_defaults(const Value &d, Defaults &out)
    {
        reject_unknown(d, "defaults",
                       {"stripe_size",
                        "stripe_count",
                        "bulk_chunk",
                        "request_timeout",
                        "idle_timeout",
                        "root_squash",
                        "require_bound",
                        "durable_metadata",
                        "group_commit",
                        "early_writeback",
                        "session_ttl",
                        "max_sessions",
                        "lease",
                        "reclaim_after",
                        "capability_ttl",
                        "capability_skew",
                        "require_capabilities",
                        "max_connections",
                        "max_connections_per_address",
                        "hello_timeout",
                        "frame_timeout",
                        "frame_min_rate",
                        "unexpected_total_bytes",
                        "early_total_bytes",
                        "send_queue_bytes",
                        "insecure_benchmark_only"});
        if (const Value *v = member(d, "stripe_size")) {
            const std::uint32_t size =
                require_size_in(*v, "defaults.stripe_size", min_stripe_size, max_stripe_size);
            if (size % stripe_alignment != 0) {
                fail(*v, "defaults.stripe_size",
                     fmt::format("{} is not a multiple of {} bytes", detail::size_text(size),
                                 stripe_alignment));
            }
            out.default_layout.stripe_size = size;
        }
        if (const Value *v = member(d, "stripe_count")) {
            const std::int64_t n = require_integer(*v, "defaults.stripe_count");
            if (n < 0 || n > std::int64_t{UINT32_MAX}) {
                fail(*v, "defaults.stripe_count",
                     fmt::format("{} is negative or too large (0 means every data server)", n));
            }
            out.default_layout.stripe_count = static_cast<std::uint32_t>(n);
            stripe_count_ = v; // checked against the servers once they are known
        }
        if (const Value *v = member(d, "bulk_chunk")) {
            out.bulk_chunk =
                require_size_in(*v, "defaults.bulk_chunk", min_bulk_chunk, max_bulk_chunk);
        }
        if (const Value *v = member(d, "request_timeout")) {
            out.request_timeout_ms = require_duration_ms(*v, "defaults.request_timeout");
        }
        if (const Value *v = member(d, "idle_timeout")) {
            out.idle_timeout_ms = require_duration_ms(*v, "defaults.idle_timeout");
        }
        if (const Value *v = member(d, "root_squash")) {
            out.root_squash = require_bool(*v, "defaults.root_squash");
        }
        if (const Value *v = member(d, "require_bound")) {
            out.require_bound = require_bool(*v, "defaults.require_bound");
        }
        if (const Value *v = member(d, "insecure_benchmark_only")) {
            out.insecure_benchmark_only = require_bool(*v, "defaults.insecure_benchmark_only");
            insecure_ = v; // checked against the servers once they are known
        }
        if (const Value *v = member(d, "durable_metadata")) {
            out.durable_metadata = require_bool(*v, "defaults.durable_metadata");
        }
        if (const Value *v = member(d, "group_commit")) {
            out.group_commit = require_bool(*v, "defaults.group_commit");
        }
        if (const Value *v = member(d, "early_writeback")) {
            out.early_writeback = require_bool(*v, "defaults.early_writeback");
        }
        if (const Value *v = member(d, "session_ttl")) {
            out.session_ttl_ms = require_duration_ms(*v, "defaults.session_ttl");
            if (out.session_ttl_ms < 1000)
                fail(*v, "defaults.session_ttl", "shorter than 1 s");
        }
        if (const Value *v = member(d, "lease")) {
            out.lease_ms = require_duration_ms(*v, "defaults.lease");
            if (out.lease_ms < 1000)
                fail(*v, "defaults.lease", "shorter than 1 s");
        }
        if (const Value *v = member(d, "reclaim_after")) {
            out.reclaim_after_ms = require_duration_ms(*v, "defaults.reclaim_after");
            if (out.reclaim_after_ms < out.lease_ms)
                fail(*v, "defaults.reclaim_after",
                     fmt::format("shorter than the lease ({} ms): a record handed to a client "
                                 "is handed again only a lease later",
                                 out.lease_ms));
        }
        if (const Value *v = member(d, "capability_ttl")) {
            out.capability_ttl_ms = require_duration_ms(*v, "defaults.capability_ttl");
            // Renewed when a third is left: shorter would renew all the time.
            if (out.capability_ttl_ms < 10'000)
                fail(*v, "defaults.capability_ttl", "shorter than 10 s");
        }
        if (const Value *v = member(d, "capability_skew")) {
            out.capability_skew_ms = require_duration_ms(*v, "defaults.capability_skew");
            if (out.capability_skew_ms > 3'600'000)
                fail(*v, "defaults.capability_skew",
                     "longer than 60min: synchronise the servers' clocks instead");
        }
        if (const Value *v = member(d, "require_capabilities")) {
            out.require_capabilities = require_bool(*v, "defaults.require_capabilities");
        }
        if (const Value *v = member(d, "max_sessions")) {
            const std::int64_t n = require_integer(*v, "defaults.max_sessions");
            if (n < 1 || n > (std::int64_t{1} << 24U))
                fail(*v, "defaults.max_sessions", fmt::format("{} is not in 1 .. 16777216", n));
            out.max_sessions = static_cast<std::uint32_t>(n);
        }
        const auto connections = [&](const char *key, std::uint32_t &to) {
            if (const Value *v = member(d, key)) {
                const std::string what = std::string("defaults.") + key;
                const std::int64_t n = require_integer(*v, what);
                if (n < 1 || n > (std::int64_t{1} << 20U))
                    fail(*v, what, fmt::format("{} is not in 1 .. 1048576", n));
                to = static_cast<std::uint32_t>(n);
            }
        };
        connections("max_connections", out.max_connections);
        connections("max_connections_per_address", out.max_connections_per_address);
        read_bmi_limits(d, out);
    }

    // The BMI limits' ranges are what set_info takes, narrowed to what a
    // server can run with: the unexpected budget holds at least what one
    // client may queue (16 MiB), a deadline is at least 100 ms.
    static void read_bmi_limits(const Value &d, Defaults &out)
    {
        const auto deadline = [&](const char *key, std::uint32_t &to) {
            if (const Value *v = member(d, key)) {
                const std::string what = std::string("defaults.") + key;
                const std::uint32_t ms = require_duration_ms(*v, what);
                if (ms < min_bmi_deadline_ms || ms > max_bmi_deadline_ms)
                    fail(*v, what,
                         fmt::format("{} out of range {}..{}", detail::duration_text(ms),
                                     detail::duration_text(min_bmi_deadline_ms),
                                     detail::duration_text(max_bmi_deadline_ms)));
                to = ms;
            }
        };
        deadline("hello_timeout", out.hello_timeout_ms);
        deadline("frame_timeout", out.frame_timeout_ms);
        const auto size = [&](const char *key, std::uint64_t &to, std::uint64_t min,
                              std::uint64_t max, std::string_view why_min) {
            if (const Value *v = member(d, key)) {
                const std::string what = std::string("defaults.") + key;
                const std::uint64_t bytes = require_size(*v, what);
                if (bytes < min || bytes > max)
                    fail(*v, what,
                         fmt::format("{} out of range {}..{}{}", detail::size_text(bytes),
                                     detail::size_text(min), detail::size_text(max), why_min));
                to = bytes;
            }
        };
        if (const Value *v = member(d, "frame_min_rate")) {
            const std::int64_t n = require_integer(*v, "defaults.frame_min_rate");
            if (n < 1 || n > (std::int64_t{1} << 30U))
                fail(*v, "defaults.frame_min_rate",
                     fmt::format("{} is not in 1 .. 1073741824 (bytes a second)", n));
            out.frame_min_rate = static_cast<std::uint64_t>(n);
        }
        size("unexpected_total_bytes", out.unexpected_total_bytes, std::uint64_t{16} << 20U,
             std::uint64_t{1} << 40U, " (at least what one client may queue, 16MiB)");
        size("early_total_bytes", out.early_total_bytes, std::uint64_t{1} << 20U,
             std::uint64_t{1} << 40U, "");
        size("send_queue_bytes", out.send_queue_bytes, std::uint64_t{64} << 10U,
             std::uint64_t{1} << 30U, "");
    }

    void read_servers(const Value &root, Cluster &c)
    {
        const Value *list = member(root, "server");
        if (list == nullptr) {
            fail(root, "server",
                 "no [[server]] tables; a cluster needs a metadata and a data server");
        }
        const std::vector<Value> &entries = require_array(*list, "server");
        std::unordered_map<std::string, std::size_t> names;
        std::unordered_map<std::string, std::size_t> addresses;
        std::size_t metadata = 0;
        std::size_t data = 0;
        for (std::size_t i = 0; i < entries.size(); ++i) {
            const std::string key = fmt::format("server[{}]", i);
            Server s = read_server(require_table(entries[i], key), key);
            if (const auto [it, fresh] = names.emplace(s.name, i); !fresh) {
                fail(require(entries[i], key, "name"), key + ".name",
                     fmt::format("'{}' is also the name of server[{}]", s.name, it->second));
            }
            for (std::size_t a = 0; a < s.addresses.size(); ++a) {
                if (const auto [it, fresh] = addresses.emplace(s.addresses[a], i); !fresh) {
                    const Value &at = require(entries[i], key, "addresses").as_array().at(a);
                    fail(at, fmt::format("{}.addresses[{}]", key, a),
                         fmt::format("{} is also an address of server[{}]", s.addresses[a],
                                     it->second));
                }
            }
            metadata += s.metadata ? 1 : 0;
            data += s.data ? 1 : 0;
            c.servers.push_back(std::move(s));
        }
        if (metadata == 0) {
            fail(*list, "server", "no server has the metadata role");
        }
        if (data == 0) {
            fail(*list, "server", "no server has the data role");
        }
        if (metadata > max_metadata_servers) {
            fail(*list, "server",
                 fmt::format("{} metadata servers; at most {} (handles have 16 bits for them)",
                             metadata, max_metadata_servers));
        }
    }

    Server read_server(const Value &t, const std::string &key)
    {
        reject_unknown(
            t, key, {"name", "addresses", "roles", "storage", "metrics_file", "metrics_interval"});
        Server s;
        s.name = require_name(require(t, key, "name"), key + ".name");

        const std::string addresses_key = key + ".addresses";
        const Value &addresses = require(t, key, "addresses");
        const std::vector<Value> &urls = require_array(addresses, addresses_key);
        if (urls.empty()) {
            fail(addresses, addresses_key, "no address; give at least one tcp:// or ib:// URL");
        }
        for (std::size_t i = 0; i < urls.size(); ++i) {
            const std::string url_key = fmt::format("{}[{}]", addresses_key, i);
            const Address a = parse_address(require_string(urls[i], url_key));
            if (!a.ok()) {
                fail(urls[i], url_key, a.error);
            }
            for (const std::string &earlier : s.addresses) {
                if (earlier.starts_with(a.scheme + "://")) {
                    fail(urls[i], url_key,
                         fmt::format("a second {} address; a server has one address per method",
                                     a.scheme));
                }
            }
            s.addresses.push_back(a.url);
        }

        const std::string roles_key = key + ".roles";
        const Value &roles = require(t, key, "roles");
        const std::vector<Value> &names = require_array(roles, roles_key);
        if (names.empty()) {
            fail(roles, roles_key, R"(no role; give "metadata", "data" or both)");
        }
        for (std::size_t i = 0; i < names.size(); ++i) {
            const std::string role_key = fmt::format("{}[{}]", roles_key, i);
            const std::string &role = require_string(names[i], role_key);
            bool *flag = nullptr;
            if (role == "metadata") {
                flag = &s.metadata;
            } else if (role == "data") {
                flag = &s.data;
            } else {
                fail(
                    names[i], role_key,
                    fmt::format(R"(unknown role '{}'; use "metadata" or "data")", printable(role)));
            }
            if (*flag) {
                fail(names[i], role_key, fmt::format("role '{}' given twice", role));
            }
            *flag = true;
        }

        s.storage = path(require(t, key, "storage"), key + ".storage");
        if (const Value *v = member(t, "metrics_file")) {
            s.metrics_file = path(*v, key + ".metrics_file");
            const std::filesystem::path file(s.metrics_file);
            if (!file.has_filename() || file.filename() == "." || file.filename() == "..") {
                fail(*v, key + ".metrics_file",
                     fmt::format("'{}' names a directory; give a file, e.g. {}.prom",
                                 printable(require_string(*v, key)), s.name));
            }
        }
        if (const Value *v = member(t, "metrics_interval")) {
            s.metrics_interval_ms = require_duration_ms(*v, key + ".metrics_interval");
            if (s.metrics_interval_ms < min_metrics_interval_ms) {
                fail(*v, key + ".metrics_interval",
                     fmt::format("shorter than {}ms", min_metrics_interval_ms));
            }
        }
        return s;
    }

    // Relative paths are relative to the config file's directory.
    [[nodiscard]] std::string path(const Value &v, const std::string &key) const
    {
        const std::string &text = require_string(v, key);
        if (text.empty()) {
            fail(v, key, "empty path");
        }
        if (std::any_of(text.begin(), text.end(), [](char c) {
                const auto byte = static_cast<unsigned char>(c);
                return byte < 0x20 || byte == 0x7f;
            })) {
            fail(v, key, fmt::format("'{}' contains a control character", printable(text)));
        }
        std::filesystem::path p(text);
        if (p.is_relative()) {
            if (base_dir_.empty()) {
                fail(v, key,
                     fmt::format("relative path '{}' but no directory to resolve it against; "
                                 "give an absolute path",
                                 text));
            }
            p = std::filesystem::path(base_dir_) / p;
        }
        return p.lexically_normal().string();
    }

    std::string base_dir_;
    const Value *stripe_count_ = nullptr;
    const Value *insecure_ = nullptr;
    const Value *encrypt_ = nullptr;

    static bool loopback(std::string_view host)
    {
        return host == "localhost" || host == "[::1]" || host.starts_with("127.");
    }
};

// toml11's messages are several lines: a summary, then the offending lines
// with numbers and "^--- why" marks under them.  One line is kept: the
// summary, the last mark and its line number.
std::string syntax_message(std::string_view origin, const std::string &what,
                           std::size_t fallback_line)
{
    std::istringstream lines(what);
    std::string summary;
    std::getline(lines, summary);
    for (const std::string_view prefix : {"[error] ", "toml::"}) {
        if (summary.starts_with(prefix)) {
            summary.erase(0, prefix.size());
        }
    }
    // "parse_table: invalid line format": drop toml11's function name.
    if (const auto colon = summary.find(": ");
        colon != std::string::npos && summary.find(' ') == colon + 1) {
        summary.erase(0, colon + 2);
    }
    std::size_t number = 0;
    std::size_t mark_line = fallback_line;
    std::string mark;
    for (std::string line; std::getline(lines, line);) {
        const auto bar = line.find(" | ");
        const auto first = line.find_first_not_of(' ');
        if (first == std::string::npos) {
            continue;
        }
        if (line[first] >= '0' && line[first] <= '9' && bar != std::string::npos) {
            std::from_chars(line.data() + first, line.data() + bar, number);
            continue;
        }
        const auto arrow = line.find_first_of("^~", first);
        if (line[first] == '|' && arrow != std::string::npos) {
            const auto text = line.find_first_not_of("^~- ", arrow);
            if (text != std::string::npos) {
                mark = line.substr(text);
                mark_line = number != 0 ? number : mark_line;
            }
        }
    }
    std::string message = summary;
    while (!message.empty() && (message.back() == '.' || message.back() == ' ')) {
        message.pop_back();
    }
    // "here" says nothing the line number does not.
    if (!mark.empty() && mark != summary && mark != "here") {
        message += ": " + mark;
    }
    constexpr std::size_t max_message = 300;
    if (message.size() > max_message) {
        std::size_t cut = max_message;
        while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xc0U) == 0x80U) {
            --cut; // not inside a UTF-8 sequence
        }
        message.resize(cut);
        message += "...";
    }
    return fmt::format("{}:{}: syntax error: {}", origin, mark_line, printable(message));
}

std::string toml_string(std::string_view text)
{
    std::string out = "\"";
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (byte < 0x20 || byte == 0x7f) {
            out += fmt::format("\\u{:04x}", byte);
        } else {
            out += c;
        }
    }
    out += '"';
    return out;
}

std::string errno_text(int error)
{
    return std::error_code(error, std::generic_category()).message();
}

} // namespace

bool valid_config_name(std::string_view name) noexcept
{
    return !name.empty() && name.size() <= max_name_bytes &&
           std::all_of(name.begin(), name.end(), [](char c) {
               return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '.' || c == '-';
           });
}

std::vector<std::size_t> Cluster::metadata_servers() const
{
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < servers.size(); ++i) {
        if (servers[i].metadata) {
            out.push_back(i);
        }
    }
    return out;
}

std::vector<std::size_t> Cluster::data_servers() const
{
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < servers.size(); ++i) {
        if (servers[i].data) {
            out.push_back(i);
        }
    }
    return out;
}

const Server *Cluster::find(std::string_view name) const
{
    const auto it = std::find_if(servers.begin(), servers.end(),
                                 [&](const Server &s) { return s.name == name; });
    return it == servers.end() ? nullptr : &*it;
}

std::optional<std::size_t> Cluster::index_of_address(std::string_view url) const
{
    const Address a = parse_address(url);
    if (!a.ok()) {
        return std::nullopt;
    }
    for (std::size_t i = 0; i < servers.size(); ++i) {
        const auto &list = servers[i].addresses;
        if (std::find(list.begin(), list.end(), a.url) != list.end()) {
            return i;
        }
    }
    return std::nullopt;
}

Result parse(std::string_view text, std::string_view origin, std::string_view base_dir)
{
    if (const auto refused = detail::check_shape(text)) {
        if (refused->line == 0) {
            return {{}, fmt::format("{}: {}", origin, refused->message)};
        }
        return {{}, fmt::format("{}:{}: {}", origin, refused->line, refused->message)};
    }
    try {
        std::string base;
        if (!base_dir.empty()) {
            base = std::filesystem::absolute(std::filesystem::path(base_dir))
                       .lexically_normal()
                       .string();
        }
        std::istringstream in{std::string(text)};
        Value root;
        try {
            root =
                toml::parse<toml::discard_comments, std::map, std::vector>(in, std::string(origin));
        } catch (const toml::exception &e) {
            return {{}, syntax_message(origin, e.what(), e.location().line())};
        }
        return {Reader(base).read(root), {}};
    } catch (const Invalid &e) {
        return {{}, fmt::format("{}:{}: {}", origin, e.line(), printable(e.what()))};
    } catch (const std::exception &e) {
        return {{}, fmt::format("{}: cannot parse: {}", origin, printable(e.what()))};
    } catch (...) {
        return {{}, fmt::format("{}: cannot parse: unknown error", origin)};
    }
}

Result load_file(const std::string &path)
{
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
    if (!fd.valid()) {
        return {{}, fmt::format("{}: cannot open: {}", path, errno_text(errno))};
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return {{}, fmt::format("{}: cannot stat: {}", path, errno_text(errno))};
    }
    if (!S_ISREG(st.st_mode)) {
        return {{}, fmt::format("{}: not a regular file", path)};
    }
    if (static_cast<std::uint64_t>(st.st_size) > max_config_bytes) {
        return {{},
                fmt::format("{}: {} bytes; a config is at most {} bytes (1 MiB)", path, st.st_size,
                            max_config_bytes)};
    }
    // One byte more than allowed, so a file that grew since fstat is caught.
    std::string text(max_config_bytes + 1, '\0');
    std::size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return {{}, fmt::format("{}: cannot read: {}", path, errno_text(errno))};
        }
        if (n == 0) {
            break;
        }
        got += static_cast<std::size_t>(n);
    }
    text.resize(got);
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    if (ec) {
        return {{}, fmt::format("{}: cannot resolve its directory: {}", path, ec.message())};
    }
    return parse(text, path, absolute.parent_path().lexically_normal().string());
}

std::string to_toml(const Cluster &c)
{
    const Defaults &d = c.defaults;
    const std::size_t data_servers = c.data_servers().size();
    const std::uint32_t stripe_count =
        d.default_layout.stripe_count == data_servers ? 0 : d.default_layout.stripe_count;
    std::string out;
    out += "# pvfs cluster configuration; docs/config.md describes every key.\n\n";
    out += "[filesystem]\n";
    out += fmt::format("name = {}\n", toml_string(c.fs_name));
    out += fmt::format("id = {}\n", c.fs_id);
    out += fmt::format("key_file = {}\n", toml_string(c.key_file));
    // Only when set, so the text (and hash) of a cluster without it stays
    // what it was before client keys existed.
    if (!c.client_keys.empty()) {
        out += fmt::format("client_keys = {}\n", toml_string(c.client_keys));
    }
    if (c.encrypt) // only when on: the hash of a cluster without it stays
        out += "encrypt = true\n";
    out += "\n";
    out += "[defaults]\n";
    out += fmt::format("stripe_size = {}\n", detail::size_toml(d.default_layout.stripe_size));
    out += fmt::format("stripe_count = {}{}\n", stripe_count,
                       stripe_count == 0 ? " # every data server" : "");
    out += fmt::format("bulk_chunk = {}\n", detail::size_toml(d.bulk_chunk));
    out += fmt::format("request_timeout = {}\n", detail::duration_toml(d.request_timeout_ms));
    out += fmt::format("idle_timeout = {}\n", detail::duration_toml(d.idle_timeout_ms));
    out += fmt::format("root_squash = {}\n", d.root_squash);
    out += fmt::format("require_bound = {}\n", d.require_bound);
    out += fmt::format("durable_metadata = {}\n", d.durable_metadata);
    if (d.insecure_benchmark_only) // only when on, as group_commit
        out += "insecure_benchmark_only = true\n";
    if (!d.group_commit) // only when off: a cluster's hash stays what it was before the key
        out += "group_commit = false\n";
    if (!d.early_writeback) // likewise
        out += "early_writeback = false\n";
    out += fmt::format("session_ttl = {}\n", detail::duration_toml(d.session_ttl_ms));
    out += fmt::format("max_sessions = {}\n", d.max_sessions);
    out += fmt::format("lease = {}\n", detail::duration_toml(d.lease_ms));
    if (d.reclaim_after_ms != 0) // only when set: the hash of a cluster without it stays
        out += fmt::format("reclaim_after = {}\n", detail::duration_toml(d.reclaim_after_ms));
    if (d.capability_ttl_ms != Defaults{}.capability_ttl_ms)
        out += fmt::format("capability_ttl = {}\n", detail::duration_toml(d.capability_ttl_ms));
    if (d.capability_skew_ms != Defaults{}.capability_skew_ms)
        out += fmt::format("capability_skew = {}\n", detail::duration_toml(d.capability_skew_ms));
    if (!d.require_capabilities)
        out += "require_capabilities = false\n";
    // The connection caps only when not the defaults: the text (and hash)
    // of a cluster that leaves them stays what it was before they existed.
    const Defaults plain;
    if (d.max_connections != plain.max_connections)
        out += fmt::format("max_connections = {}\n", d.max_connections);
    if (d.max_connections_per_address != plain.max_connections_per_address)
        out += fmt::format("max_connections_per_address = {}\n", d.max_connections_per_address);
    // So are the other BMI limits.
    if (d.hello_timeout_ms != plain.hello_timeout_ms)
        out += fmt::format("hello_timeout = {}\n", detail::duration_toml(d.hello_timeout_ms));
    if (d.frame_timeout_ms != plain.frame_timeout_ms)
        out += fmt::format("frame_timeout = {}\n", detail::duration_toml(d.frame_timeout_ms));
    if (d.frame_min_rate != plain.frame_min_rate)
        out += fmt::format("frame_min_rate = {}\n", d.frame_min_rate);
    if (d.unexpected_total_bytes != plain.unexpected_total_bytes)
        out += fmt::format("unexpected_total_bytes = {}\n",
                           detail::size_toml(d.unexpected_total_bytes));
    if (d.early_total_bytes != plain.early_total_bytes)
        out += fmt::format("early_total_bytes = {}\n", detail::size_toml(d.early_total_bytes));
    if (d.send_queue_bytes != plain.send_queue_bytes)
        out += fmt::format("send_queue_bytes = {}\n", detail::size_toml(d.send_queue_bytes));
    for (const Server &s : c.servers) {
        out += "\n[[server]]\n";
        out += fmt::format("name = {}\n", toml_string(s.name));
        std::string urls;
        for (const std::string &url : s.addresses) {
            urls += urls.empty() ? "" : ", ";
            urls += toml_string(url);
        }
        out += fmt::format("addresses = [{}]\n", urls);
        std::string roles;
        if (s.metadata) {
            roles += "\"metadata\"";
        }
        if (s.data) {
            roles += roles.empty() ? "\"data\"" : ", \"data\"";
        }
        out += fmt::format("roles = [{}]\n", roles);
        out += fmt::format("storage = {}\n", toml_string(s.storage));
        // Only when set, so that the text (and hash) of a cluster without
        // metrics stays what it was before they existed.
        if (!s.metrics_file.empty()) {
            out += fmt::format("metrics_file = {}\n", toml_string(s.metrics_file));
        }
        if (s.metrics_interval_ms != default_metrics_interval_ms) {
            out += fmt::format("metrics_interval = {}\n",
                               detail::duration_toml(s.metrics_interval_ms));
        }
    }
    return out;
}

std::array<std::byte, 32> hash(const Cluster &c)
{
    static_assert(crypto_hash_sha256_BYTES == 32);
    // SHA-256 needs nothing that sodium_init() could fail to set up; it is
    // called because libsodium asks for it before any use.
    [[maybe_unused]] const int initialised = sodium_init();
    const std::string text = to_toml(c);
    std::array<unsigned char, crypto_hash_sha256_BYTES> digest{};
    crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char *>(text.data()),
                       text.size());
    std::array<std::byte, 32> out{};
    std::memcpy(out.data(), digest.data(), out.size());
    return out;
}

} // namespace pvfs::config
