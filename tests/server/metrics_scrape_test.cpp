// pvfs-server's metrics file on a real cluster (docs/metrics.md): each
// server of a loopback cluster writes [[server]] metrics_file every 100ms;
// after creates, writes, reads and a failed lookup through libpvfs, the
// scraped files parse as Prometheus text (a strict parser below: HELP and
// TYPE before their samples, families contiguous, labels escaped, no
// timestamps, histogram buckets cumulative with +Inf equal to _count), the
// counters moved at least as far as the traffic went, each op's histogram
// counts what its counter counts, and the files are gone after a clean
// stop.  A file that cannot be written, or bad options, stop the server at
// start with a clear message.  The pid file, written by the same atomic
// writer, is not redirected by what others put in its directory.
#include <atf-c++.hpp>

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "harness.hpp"
#include "pvfs/client.hpp"

namespace {

using namespace pvfs;
using namespace std::chrono_literals;
using pvfs::test::require;
using pvfs::test::require_rc;

using LabelSet = std::map<std::string, std::string>;

struct Sample {
    std::string name;
    LabelSet labels;
    double value = 0;
};

struct Scrape {
    std::map<std::string, std::string> types; // family -> type
    std::vector<Sample> samples;
    std::string error; // empty: the text parsed

    // The value of the one sample of `name` whose labels include `want`;
    // -1 if there is none.
    [[nodiscard]] double value(const std::string &name, const LabelSet &want) const
    {
        for (const Sample &s : samples) {
            if (s.name == name && std::all_of(want.begin(), want.end(), [&](const auto &kv) {
                    const auto it = s.labels.find(kv.first);
                    return it != s.labels.end() && it->second == kv.second;
                }))
                return s.value;
        }
        return -1;
    }
};

bool metric_name_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
}

std::string take_name(const std::string &line, std::size_t &pos)
{
    const std::size_t start = pos;
    while (pos < line.size() && metric_name_char(line[pos], pos == start))
        ++pos;
    return line.substr(start, pos - start);
}

// One sample line: name{label="value",...} value, no timestamp.
Sample parse_sample(const std::string &line)
{
    Sample s;
    std::size_t pos = 0;
    s.name = take_name(line, pos);
    if (s.name.empty())
        throw std::runtime_error("no metric name");
    if (pos < line.size() && line[pos] == '{') {
        ++pos;
        while (pos < line.size() && line[pos] != '}') {
            std::string label = take_name(line, pos);
            if (label.empty() || label.find(':') != std::string::npos)
                throw std::runtime_error("bad label name");
            if (line.compare(pos, 2, "=\"") != 0)
                throw std::runtime_error("label " + label + " without =\"");
            pos += 2;
            std::string value;
            for (;;) {
                if (pos >= line.size())
                    throw std::runtime_error("unterminated label value");
                const char c = line[pos++];
                if (c == '"')
                    break;
                if (c != '\\') {
                    value += c;
                    continue;
                }
                if (pos >= line.size())
                    throw std::runtime_error("backslash at the end");
                const char e = line[pos++];
                if (e == 'n')
                    value += '\n';
                else if (e == '\\' || e == '"')
                    value += e;
                else
                    throw std::runtime_error(fmt::format("unknown escape \\{}", e));
            }
            if (!s.labels.emplace(label, value).second)
                throw std::runtime_error("label " + label + " twice");
            if (pos < line.size() && line[pos] == ',')
                ++pos;
        }
        if (pos >= line.size())
            throw std::runtime_error("no closing brace");
        ++pos;
    }
    if (pos >= line.size() || line[pos] != ' ')
        throw std::runtime_error("no space before the value");
    const std::string value = line.substr(pos + 1);
    if (value.find(' ') != std::string::npos)
        throw std::runtime_error("a timestamp (textfile collector refuses them) or junk");
    if (value == "+Inf" || value == "-Inf" || value == "NaN") {
        s.value = value == "-Inf" ? -1e308 : 1e308;
        return s;
    }
    std::size_t used = 0;
    s.value = std::stod(value, &used);
    if (used != value.size())
        throw std::runtime_error("bad value '" + value + "'");
    return s;
}

// Histogram series: buckets in increasing le with non-decreasing counts,
// +Inf last and equal to _count, _sum present.
void check_histograms(const Scrape &scrape)
{
    std::map<LabelSet, std::vector<std::pair<double, double>>> buckets;
    for (const auto &[family, type] : scrape.types) {
        if (type != "histogram")
            continue;
        buckets.clear();
        for (const Sample &s : scrape.samples) {
            if (s.name != family + "_bucket")
                continue;
            LabelSet key = s.labels;
            const auto le = key.find("le");
            if (le == key.end())
                throw std::runtime_error(family + "_bucket without le");
            const double bound = le->second == "+Inf" ? 1e308 : std::stod(le->second);
            key.erase(le);
            buckets[key].emplace_back(bound, s.value);
        }
        if (buckets.empty())
            throw std::runtime_error(family + ": a histogram without buckets");
        for (const auto &[labels, list] : buckets) {
            for (std::size_t i = 1; i < list.size(); ++i) {
                if (list[i].first <= list[i - 1].first || list[i].second < list[i - 1].second)
                    throw std::runtime_error(family + ": buckets not cumulative");
            }
            if (list.back().first != 1e308)
                throw std::runtime_error(family + ": no +Inf bucket");
            const double count = scrape.value(family + "_count", labels);
            if (count != list.back().second)
                throw std::runtime_error(
                    fmt::format("{}: _count {} but +Inf {}", family, count, list.back().second));
            if (scrape.value(family + "_sum", labels) < 0)
                throw std::runtime_error(family + ": no _sum");
        }
    }
}

Scrape parse_text(const std::string &text)
{
    Scrape scrape;
    std::set<std::string> helped;
    std::set<std::string> finished; // families whose samples ended
    std::set<std::pair<std::string, LabelSet>> seen;
    std::string current;
    std::istringstream in(text);
    std::size_t number = 0;
    try {
        if (!text.empty() && text.back() != '\n')
            throw std::runtime_error("the last line has no line feed");
        for (std::string line; std::getline(in, line);) {
            ++number;
            if (line.empty())
                continue;
            if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
                std::size_t pos = 7;
                const std::string name = take_name(line, pos);
                if (name.empty() || (pos < line.size() && line[pos] != ' '))
                    throw std::runtime_error("bad metric name");
                if (line.starts_with("# HELP ")) {
                    if (!helped.insert(name).second)
                        throw std::runtime_error("a second HELP for " + name);
                    continue;
                }
                const std::string type = pos < line.size() ? line.substr(pos + 1) : "";
                if (type != "counter" && type != "gauge" && type != "histogram" &&
                    type != "summary" && type != "untyped")
                    throw std::runtime_error("unknown type '" + type + "'");
                if (!scrape.types.emplace(name, type).second || finished.contains(name) ||
                    name == current)
                    throw std::runtime_error("TYPE of " + name + " again or after its samples");
                continue;
            }
            if (line.starts_with("#"))
                continue;
            Sample s = parse_sample(line);
            std::string family = s.name;
            if (!scrape.types.contains(family)) {
                for (const char *suffix : {"_bucket", "_sum", "_count"}) {
                    const std::string base = s.name.substr(
                        0, s.name.size() - std::min(s.name.size(), std::string(suffix).size()));
                    if (s.name.ends_with(suffix) && scrape.types.contains(base) &&
                        scrape.types[base] == "histogram")
                        family = base;
                }
            }
            if (!scrape.types.contains(family))
                throw std::runtime_error(s.name + " has no TYPE");
            if (family != current) {
                if (finished.contains(family))
                    throw std::runtime_error(family + "'s samples are not together");
                if (!current.empty())
                    finished.insert(current);
                current = family;
            }
            if (!seen.emplace(s.name, s.labels).second)
                throw std::runtime_error("a series twice");
            scrape.samples.push_back(std::move(s));
        }
        check_histograms(scrape);
    } catch (const std::exception &e) {
        scrape.error = fmt::format("line {}: {}", number, e.what());
    }
    return scrape;
}

std::string read_text(const std::string &path)
{
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What the traffic below must have moved, or why a scrape does not show it
// yet; empty when every check holds.
std::string shortfall(const Scrape &meta, const Scrape &data, int files, std::uint64_t bytes)
{
    for (const auto *s : {&meta, &data}) {
        if (!s->error.empty())
            return "not Prometheus text: " + s->error;
    }
    const auto need = [](const Scrape &s, const std::string &name, const LabelSet &labels,
                         double at_least) -> std::string {
        const double v = s.value(name, labels);
        if (v >= at_least)
            return {};
        std::string text = name;
        for (const auto &[k, val] : labels)
            text += fmt::format(" {}={}", k, val);
        return fmt::format("{} is {}, expected at least {}", text, v, at_least);
    };
    const double n = files;
    for (std::string miss :
         {need(meta, "pvfs_server_requests_total", {{"server", "meta0"}, {"op", "create"}}, n),
          need(meta, "pvfs_server_errors_total",
               {{"server", "meta0"}, {"op", "lookup"}, {"errno", "ENOENT"}}, 1),
          need(data, "pvfs_server_requests_total", {{"server", "data0"}, {"op", "write"}}, n),
          need(data, "pvfs_server_requests_total", {{"server", "data0"}, {"op", "read"}}, n),
          need(data, "pvfs_server_data_bytes_total", {{"direction", "write"}},
               static_cast<double>(bytes)),
          need(data, "pvfs_server_data_bytes_total", {{"direction", "read"}},
               static_cast<double>(bytes)),
          need(meta, "pvfs_server_info", {{"server", "meta0"}, {"roles", "metadata"}}, 1),
          need(data, "pvfs_server_info", {{"server", "data0"}, {"roles", "data"}}, 1),
          need(meta, "pvfs_server_meta_commits_total", {}, 1),
          need(data, "pvfs_server_connections", {}, 1)}) {
        if (!miss.empty())
            return miss;
    }
    // Each op's histogram counts exactly what its counter counts, and no
    // op has more errors than answers.
    for (const auto *s : {&meta, &data}) {
        for (const Sample &c : s->samples) {
            if (c.name != "pvfs_server_requests_total")
                continue;
            const double count = s->value("pvfs_server_request_duration_seconds_count", c.labels);
            if (count != c.value)
                return fmt::format("op {}: {} requests but a histogram count of {}",
                                   c.labels.at("op"), c.value, count);
        }
        for (const Sample &e : s->samples) {
            if (e.name != "pvfs_server_errors_total")
                continue;
            const double answered =
                s->value("pvfs_server_requests_total",
                         {{"server", e.labels.at("server")}, {"op", e.labels.at("op")}});
            if (e.value > answered)
                return fmt::format("op {}: {} errors of {} answers", e.labels.at("op"), e.value,
                                   answered);
        }
        // Every series says which server it is from.
        for (const Sample &x : s->samples) {
            if (!x.labels.contains("server"))
                return x.name + " without a server label";
        }
    }
    return {};
}

// Runs pvfs-server with `args` (it must fail at start); its exit status
// and output.
int run_server(const std::string &args, std::string &out)
{
    const std::string command = std::string(PVFS_SERVER_BINARY) + " " + args + " 2>&1";
    // NOLINTNEXTLINE(cert-env33-c): runs the program under test
    FILE *p = ::popen(command.c_str(), "r");
    require(p != nullptr, "popen pvfs-server");
    out.clear();
    std::array<char, 4096> buf{};
    while (std::fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr)
        out += buf.data();
    const int status = ::pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(counts_traffic);
ATF_TEST_CASE_BODY(counts_traffic)
{
    std::vector<test::ServerSpec> specs = test::servers(1, 1);
    for (test::ServerSpec &s : specs) {
        // Relative: resolved against the config's directory.
        s.toml = fmt::format("metrics_file = \"{}.prom\"\nmetrics_interval = \"100ms\"", s.name);
    }
    test::Cluster cl(specs, "", test::fresh_attrs());
    const std::string meta_file = (cl.files.dir / "meta0.prom").string();
    const std::string data_file = (cl.files.dir / "data0.prom").string();
    // Written before the server says it is ready.
    require(std::filesystem::exists(meta_file) && std::filesystem::exists(data_file),
            "no metrics file once the servers listen");
    require(parse_text(read_text(meta_file)).error.empty(),
            "the first file does not parse: " + parse_text(read_text(meta_file)).error);

    auto c = cl.connect();
    constexpr int files = 5;
    constexpr std::size_t size = std::size_t{256} * 1024;
    const std::vector<std::byte> bytes = test::pattern(size, 3);
    std::vector<std::byte> back(size);
    for (int i = 0; i < files; ++i) {
        Attr a;
        const std::string name = fmt::format("f{}", i);
        require_rc(c->create(root_handle, name, 0644, true, {}, a), 0, "create " + name);
        require_rc(c->write(a.handle, 0, bytes), static_cast<std::int64_t>(size), "write " + name);
        require_rc(c->read(a.handle, 0, back), static_cast<std::int64_t>(size), "read " + name);
        require(back == bytes, "read back other bytes from " + name);
    }
    Attr none;
    require_rc(c->lookup(root_handle, "no-such-name", none), -ENOENT, "lookup of a missing name");

    // The files are rewritten every 100ms: the traffic shows within a few.
    std::string why;
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    for (;;) {
        const Scrape meta = parse_text(read_text(meta_file));
        const Scrape data = parse_text(read_text(data_file));
        why = shortfall(meta, data, files, std::uint64_t{files} * size);
        if (why.empty() || std::chrono::steady_clock::now() > deadline)
            break;
        std::this_thread::sleep_for(50ms);
    }
    require(why.empty(), "after the traffic: " + why);

    for (auto &[name, server] : cl.servers) {
        const std::string file = (cl.files.dir / (name + ".prom")).string();
        require(server->stop(SIGTERM) == 0, name + " did not stop cleanly: " + server->log_text());
        require(!std::filesystem::exists(file), name + ": metrics file left after a clean stop");
        const std::string temporary = fmt::format(".{}.prom.", name);
        for (const auto &e : std::filesystem::directory_iterator(cl.files.dir)) {
            const std::string f = e.path().filename().string();
            require(f.rfind(temporary, 0) != 0,
                    fmt::format("{}: temporary file left: {}", name, f));
        }
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(bad_settings);
ATF_TEST_CASE_BODY(bad_settings)
{
    // A directory that does not exist: the server stops at start, saying so.
    std::vector<test::ServerSpec> specs = test::servers(1, 1);
    specs[0].toml = "metrics_file = \"/nonexistent-pvfs-dir/meta0.prom\"";
    const test::ClusterFiles files =
        test::write_cluster(std::filesystem::current_path() / "cluster", specs);
    try {
        test::ServerProcess server(PVFS_SERVER_BINARY, files, "meta0");
        require(false, "meta0 started with a metrics file it cannot write");
    } catch (const std::runtime_error &e) {
        const std::string what = e.what();
        require(what.find("metrics file /nonexistent-pvfs-dir/meta0.prom") != std::string::npos,
                "no clear message: " + what);
    }

    const std::string base = fmt::format("-c '{}' -n data0 ", files.config_path);
    std::string out;
    for (const auto &[args, says] : std::vector<std::pair<std::string, std::string>>{
             {"--metrics-file /tmp/", "names a directory"},
             {"--metrics-file 'a\tb'", "control character"},
             {"--metrics-file m.prom --metrics-interval 5ms", "out of range"},
             {"--metrics-file m.prom --metrics-interval 10", "--metrics-interval"},
             {"--metrics-file /nonexistent-pvfs-dir/m.prom", "No such file or directory"}}) {
        const int rc = run_server(base + args, out);
        require(rc == 1, fmt::format("{}: status {}, expected 1: {}", args, rc, out));
        require(out.find(says) != std::string::npos,
                fmt::format("{}: no '{}' in: {}", args, says, out));
    }
    require(!std::filesystem::exists("m.prom"), "a metrics file made by a refused start");
}

// The pid file is written by the same atomic writer: a symbolic link or a
// FIFO that another user placed at the fixed name the server used for its
// temporary (PID_FILE.tmp) is left alone.  Before, the server wrote its pid
// through the link into the link's target (and renamed the link over the
// pid file), and blocked at start opening the FIFO.
ATF_TEST_CASE_WITHOUT_HEAD(pid_file_foreign_temporary);
ATF_TEST_CASE_BODY(pid_file_foreign_temporary)
{
    namespace fs = std::filesystem;
    const test::ClusterFiles files =
        test::write_cluster(fs::current_path() / "cluster", test::servers(1, 1));
    const fs::path pid_file = files.dir / "meta0.pid"; // where the harness asks for it
    const fs::path old_tmp = files.dir / "meta0.pid.tmp";
    const fs::path victim = files.dir / "victim";
    const auto read = [](const fs::path &p) {
        std::ifstream in(p);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const auto check = [&](const std::string &what, pid_t pid) {
        require(fs::is_regular_file(fs::symlink_status(pid_file)),
                what + ": the pid file is not a regular file");
        require(read(pid_file) == fmt::format("{}\n", pid),
                what + ": the pid file holds '" + read(pid_file) + "'");
        for (const auto &e : fs::directory_iterator(files.dir)) {
            const std::string f = e.path().filename().string();
            require(f.rfind(".meta0.pid.", 0) != 0,
                    fmt::format("{}: temporary file left: {}", what, f));
        }
    };

    // The harness gives up after 20 s without the pid file.
    const auto start = [&](const std::string &what) {
        try {
            return std::make_unique<test::ServerProcess>(PVFS_SERVER_BINARY, files, "meta0");
        } catch (const std::runtime_error &e) {
            require(false, what + ": " + e.what());
        }
        return std::unique_ptr<test::ServerProcess>();
    };

    std::ofstream(victim) << "not yours\n";
    fs::create_symlink(victim, old_tmp);
    {
        const std::unique_ptr<test::ServerProcess> server = start("symlink");
        check("symlink", server->pid());
        require(read(victim) == "not yours\n", "the pid was written through the symlink");
        require(fs::is_symlink(old_tmp), "the symlink was moved");
        require(server->stop(SIGTERM) == 0, "meta0 did not stop cleanly");
    }
    fs::remove(old_tmp);

    require(::mkfifo(old_tmp.c_str(), 0600) == 0, "mkfifo");
    {
        const std::unique_ptr<test::ServerProcess> server = start("FIFO");
        check("FIFO", server->pid());
        require(fs::is_fifo(old_tmp), "the FIFO was replaced");
        require(server->stop(SIGTERM) == 0, "meta0 did not stop cleanly");
    }
    require(!fs::exists(fs::symlink_status(pid_file)), "the pid file outlived a clean stop");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, counts_traffic);
    ATF_ADD_TEST_CASE(tcs, bad_settings);
    ATF_ADD_TEST_CASE(tcs, pid_file_foreign_temporary);
}
