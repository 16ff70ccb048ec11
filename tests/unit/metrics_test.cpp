// Tests of the metrics component (include/pvfs/metrics.hpp): the log2
// buckets, the Prometheus text (escaping, cumulative buckets, _sum and
// _count, families grouped), the registry's checks, the hot path's lack of
// allocations, and the atomic file write (also among others' files).
#include <atf-c++.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "alloc_count.hpp"
#include "pvfs/metrics.hpp"
#include "pvfs/unique_fd.hpp"

namespace metrics = pvfs::metrics;
using pvfs::UniqueFd;

namespace {

void require_msg(bool ok, const std::string &why)
{
    if (!ok)
        ATF_FAIL(why);
}

bool contains(const std::string &text, const std::string &part)
{
    return text.find(part) != std::string::npos;
}

std::vector<std::string> lines_of(const std::string &text)
{
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        out.push_back(line);
    return out;
}

// The value at the end of a sample line.
std::uint64_t value_of(const std::string &line)
{
    return std::stoull(line.substr(line.rfind(' ') + 1));
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(buckets);
ATF_TEST_CASE_BODY(buckets)
{
    using H = metrics::Histogram;
    ATF_REQUIRE_EQ(H::bucket_of(0), 0U);
    ATF_REQUIRE_EQ(H::bucket_of(1), 0U);
    ATF_REQUIRE_EQ(H::bucket_of(1000), 0U); // 1 µs is within "le 1 µs"
    ATF_REQUIRE_EQ(H::bucket_of(1001), 1U);
    ATF_REQUIRE_EQ(H::bucket_of(2000), 1U);
    ATF_REQUIRE_EQ(H::bucket_of(2001), 2U);
    ATF_REQUIRE_EQ(H::bucket_of(4000), 2U);
    ATF_REQUIRE_EQ(H::bucket_of(1'000'000), 10U); // 1 ms <= 1024 µs
    const std::uint64_t top_ns = H::bound_us(H::finite_buckets - 1) * 1000;
    ATF_REQUIRE_EQ(H::bucket_of(top_ns), H::finite_buckets - 1);
    ATF_REQUIRE_EQ(H::bucket_of(top_ns + 1), H::finite_buckets);
    ATF_REQUIRE_EQ(H::bucket_of(UINT64_MAX), H::finite_buckets);
    // Every bound is in its own bucket, one more is in the next.
    for (std::size_t i = 0; i < H::finite_buckets; ++i) {
        ATF_REQUIRE_EQ(H::bucket_of(H::bound_us(i) * 1000), i);
        ATF_REQUIRE_EQ(H::bucket_of(H::bound_us(i) * 1000 + 1), i + 1);
    }
    // About a minute at the top, as the docs say.
    require_msg(top_ns > 60'000'000'000ULL && top_ns < 70'000'000'000ULL, "top bound");
}

ATF_TEST_CASE_WITHOUT_HEAD(histogram_text);
ATF_TEST_CASE_BODY(histogram_text)
{
    metrics::Registry r;
    metrics::Histogram &h = r.histogram("lat_seconds", "Latency.", {{"op", "read"}});
    h.observe_ns(500);                // le 1 µs
    h.observe_ns(3000);               // le 4 µs
    h.observe_ns(3000);               // le 4 µs
    h.observe_ns(1'500'000'000);      // le 2.097152 s
    h.observe_ns(100'000'000'000ULL); // +Inf only
    const std::string text = r.render();
    const std::vector<std::string> lines = lines_of(text);
    require_msg(lines.at(0) == "# HELP lat_seconds Latency.", lines.at(0));
    require_msg(lines.at(1) == "# TYPE lat_seconds histogram", lines.at(1));
    require_msg(lines.at(2) == R"(lat_seconds_bucket{op="read",le="0.000001"} 1)", lines.at(2));
    require_msg(lines.at(3) == R"(lat_seconds_bucket{op="read",le="0.000002"} 1)", lines.at(3));
    require_msg(lines.at(4) == R"(lat_seconds_bucket{op="read",le="0.000004"} 3)", lines.at(4));
    require_msg(contains(text, "lat_seconds_bucket{op=\"read\",le=\"1.048576\"} 3\n"), text);
    require_msg(contains(text, "lat_seconds_bucket{op=\"read\",le=\"2.097152\"} 4\n"), text);
    require_msg(contains(text, "lat_seconds_bucket{op=\"read\",le=\"67.108864\"} 4\n"), text);
    require_msg(contains(text, "lat_seconds_bucket{op=\"read\",le=\"+Inf\"} 5\n"), text);
    require_msg(contains(text, "lat_seconds_sum{op=\"read\"} 101.500006500\n"), text);
    require_msg(contains(text, "lat_seconds_count{op=\"read\"} 5\n"), text);
    // Cumulative: never decreasing, ending at the count.
    std::uint64_t last = 0;
    std::size_t buckets = 0;
    for (const std::string &line : lines) {
        if (!line.starts_with("lat_seconds_bucket"))
            continue;
        ++buckets;
        const std::uint64_t v = value_of(line);
        require_msg(v >= last, "bucket counts decrease at " + line);
        last = v;
    }
    ATF_REQUIRE_EQ(buckets, metrics::Histogram::finite_buckets + 1);
    ATF_REQUIRE_EQ(last, 5U);
}

ATF_TEST_CASE_WITHOUT_HEAD(escaping);
ATF_TEST_CASE_BODY(escaping)
{
    ATF_REQUIRE_EQ(metrics::escape_label_value(R"(a\b"c)"
                                               "\n"
                                               "d"),
                   R"(a\\b\"c\nd)");
    ATF_REQUIRE_EQ(metrics::escape_help("x\\y\n\"z\""), R"(x\\y\n"z")");
    metrics::Registry r;
    r.counter("c_total", "Line one\nline \\two", {{"path", "/a\"b\\c\nd"}, {"empty", ""}}).add(3);
    const std::string text = r.render();
    require_msg(contains(text, "# HELP c_total Line one\\nline \\\\two\n"), text);
    require_msg(contains(text, "c_total{path=\"/a\\\"b\\\\c\\nd\",empty=\"\"} 3\n"), text);
    // One line per sample: no raw line feed from a value got through.
    ATF_REQUIRE_EQ(lines_of(text).size(), 3U);
}

ATF_TEST_CASE_WITHOUT_HEAD(families);
ATF_TEST_CASE_BODY(families)
{
    metrics::Registry r;
    metrics::Counter &a = r.counter("req_total", "Requests.", {{"op", "a"}});
    r.gauge("depth", "Depth.").set(-4);
    metrics::Counter &b = r.counter("req_total", "Requests.", {{"op", "b"}});
    // The same name and labels is the same counter.
    require_msg(&r.counter("req_total", "Requests.", {{"op", "a"}}) == &a, "not the same counter");
    a.add();
    b.add(41);
    std::uint64_t polled = 7;
    r.counter_fn("polled_total", "Polled.", {}, [&] { return polled; });
    r.gauge_fn("fn_gauge", "Fn.", {{"k", "v"}}, [] { return std::int64_t{12}; });
    polled = 9; // read when rendered, not when registered
    const std::string text = r.render();
    const std::string want = "# HELP depth Depth.\n"
                             "# TYPE depth gauge\n"
                             "depth -4\n"
                             "# HELP fn_gauge Fn.\n"
                             "# TYPE fn_gauge gauge\n"
                             "fn_gauge{k=\"v\"} 12\n"
                             "# HELP polled_total Polled.\n"
                             "# TYPE polled_total counter\n"
                             "polled_total 9\n"
                             "# HELP req_total Requests.\n"
                             "# TYPE req_total counter\n"
                             "req_total{op=\"a\"} 1\n"
                             "req_total{op=\"b\"} 41\n";
    ATF_REQUIRE_EQ(text, want);
}

ATF_TEST_CASE_WITHOUT_HEAD(bad_registrations);
ATF_TEST_CASE_BODY(bad_registrations)
{
    metrics::Registry r;
    r.counter("x_total", "X.");
    ATF_REQUIRE_THROW(std::invalid_argument, r.gauge("x_total", "X."));
    ATF_REQUIRE_THROW(std::invalid_argument, r.counter("x_total", "Other help."));
    ATF_REQUIRE_THROW(std::invalid_argument, r.counter("1x", "Bad."));
    ATF_REQUIRE_THROW(std::invalid_argument, r.counter("a-b", "Bad."));
    ATF_REQUIRE_THROW(std::invalid_argument, r.counter("", "Bad."));
    ATF_REQUIRE_THROW(std::invalid_argument, r.counter("ok_total", "Ok.", {{"__x", "v"}}));
    ATF_REQUIRE_THROW(std::invalid_argument, r.counter("ok_total", "Ok.", {{"a:b", "v"}}));
    ATF_REQUIRE_THROW(std::invalid_argument,
                      r.counter("ok_total", "Ok.", {{"k", "v"}, {"k", "w"}}));
    ATF_REQUIRE_THROW(std::invalid_argument, r.histogram("h", "H.", {{"le", "1"}}));
    r.counter_fn("f_total", "F.", {}, [] { return std::uint64_t{1}; });
    ATF_REQUIRE_THROW(std::invalid_argument, r.counter("f_total", "F."));
    ATF_REQUIRE(metrics::valid_metric_name("a:b_c9"));
    ATF_REQUIRE(!metrics::valid_label_name("a:b"));
    ATF_REQUIRE(metrics::valid_label_name("_a9"));
}

// The hot path neither allocates nor loses counts under contention.
ATF_TEST_CASE_WITHOUT_HEAD(hot_path);
ATF_TEST_CASE_BODY(hot_path)
{
    metrics::Registry r;
    metrics::Counter &c = r.counter("c_total", "C.");
    metrics::Gauge &g = r.gauge("g", "G.");
    metrics::Histogram &h = r.histogram("h_seconds", "H.");
    pvfs::test::start_counting_allocations();
    for (std::uint64_t i = 0; i < 1000; ++i) {
        c.add();
        g.add(1);
        h.observe_ns(i * 997);
    }
    const std::size_t allocations = pvfs::test::stop_counting_allocations();
    ATF_REQUIRE_EQ(allocations, 0U);

    constexpr int threads = 4;
    constexpr std::uint64_t each = 100'000;
    std::vector<std::thread> workers;
    workers.reserve(threads);
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&] {
            for (std::uint64_t i = 0; i < each; ++i) {
                c.add();
                h.observe_ns(1500);
            }
        });
    }
    for (std::thread &t : workers)
        t.join();
    ATF_REQUIRE_EQ(c.value(), 1000 + threads * each);
    ATF_REQUIRE_EQ(h.snapshot().count, 1000 + threads * each);
    ATF_REQUIRE_EQ(g.value(), 1000);
}

ATF_TEST_CASE_WITHOUT_HEAD(atomic_file);
ATF_TEST_CASE_BODY(atomic_file)
{
    const std::string path = (std::filesystem::current_path() / "m.prom").string();
    std::string error;
    ATF_REQUIRE_EQ(metrics::write_file_atomically(path, "a 1\n", error), 0);
    ATF_REQUIRE_EQ(metrics::write_file_atomically(path, "b 2\n", error), 0);
    std::ifstream in(path);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    ATF_REQUIRE_EQ(text, "b 2\n");
    ATF_REQUIRE(!std::filesystem::exists(path + ".tmp"));
    struct stat st {};
    ATF_REQUIRE_EQ(::lstat(path.c_str(), &st), 0);
    ATF_REQUIRE(S_ISREG(st.st_mode));
    // A missing directory is an error naming the file, not a crash.
    const int rc = metrics::write_file_atomically("/nonexistent-pvfs-dir/m.prom", "x", error);
    ATF_REQUIRE_EQ(rc, ENOENT);
    require_msg(contains(error, "/nonexistent-pvfs-dir/m.prom"), error);
}

namespace {

std::string read_all(const std::string &path)
{
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace

// In a directory others can write, what they put at the temporary's old
// fixed name (FILE.tmp) does not matter: a FIFO (the old code wrote into
// it and renamed it over FILE; with no reader it blocked), a hard link to
// someone else's file (written into) and a symbolic link (refused: the
// server failed to start).  Nothing is left behind but FILE.
ATF_TEST_CASE_WITHOUT_HEAD(foreign_temporary);
ATF_TEST_CASE_BODY(foreign_temporary)
{
    const std::filesystem::path dir = std::filesystem::current_path() / "shared";
    std::filesystem::create_directory(dir);
    const std::string theirs = (dir / "theirs").string();
    {
        std::ofstream out(theirs);
        out << "their data\n";
    }
    const std::string fifo_file = (dir / "a.prom").string();
    const std::string link_file = (dir / "b.prom").string();
    const std::string sym_file = (dir / "c.prom").string();
    ATF_REQUIRE_EQ(::mkfifo((fifo_file + ".tmp").c_str(), 0666), 0);
    ATF_REQUIRE_EQ(::link(theirs.c_str(), (link_file + ".tmp").c_str()), 0);
    ATF_REQUIRE_EQ(::symlink(theirs.c_str(), (sym_file + ".tmp").c_str()), 0);
    // A reader on the FIFO, so that code that opens it for writing does
    // not block (the test fails instead of hanging).
    const UniqueFd reader(::open((fifo_file + ".tmp").c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    ATF_REQUIRE(reader.valid());

    std::string error;
    for (const std::string &f : {fifo_file, link_file, sym_file}) {
        const int rc = metrics::write_file_atomically(f, "m 1\n", error);
        require_msg(rc == 0, std::string(f).append(": ").append(error));
        struct stat st {};
        ATF_REQUIRE_EQ(::lstat(f.c_str(), &st), 0);
        require_msg(S_ISREG(st.st_mode), f + " is not a regular file");
        ATF_REQUIRE_EQ(read_all(f), "m 1\n");
    }
    ATF_REQUIRE_EQ(read_all(theirs), "their data\n");
    std::array<char, 16> buf{};
    ATF_REQUIRE(::read(reader.get(), buf.data(), buf.size()) <= 0); // nothing written into it
    struct stat st {};
    ATF_REQUIRE_EQ(::lstat((fifo_file + ".tmp").c_str(), &st), 0);
    ATF_REQUIRE(S_ISFIFO(st.st_mode));
    std::vector<std::string> names;
    for (const auto &e : std::filesystem::directory_iterator(dir))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    const std::vector<std::string> want{"a.prom", "a.prom.tmp", "b.prom", "b.prom.tmp",
                                        "c.prom", "c.prom.tmp", "theirs"};
    ATF_REQUIRE(names == want);
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, buckets);
    ATF_ADD_TEST_CASE(tcs, histogram_text);
    ATF_ADD_TEST_CASE(tcs, escaping);
    ATF_ADD_TEST_CASE(tcs, families);
    ATF_ADD_TEST_CASE(tcs, bad_registrations);
    ATF_ADD_TEST_CASE(tcs, hot_path);
    ATF_ADD_TEST_CASE(tcs, atomic_file);
    ATF_ADD_TEST_CASE(tcs, foreign_temporary);
}
