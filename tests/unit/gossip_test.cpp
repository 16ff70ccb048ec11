// Tests of gossip, the debug-mask logger (include/pvfs/gossip.hpp): mask
// parsing and printing, filtering by level and mask, the line format read
// back from a log file, syslog, repeat suppression, whole lines under
// concurrent threads and processes, and the cost of a disabled debug call.
// Kyua runs each case in a process of its own, so the logger's global state
// starts fresh in every case.
#include <atf-c++.hpp>

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "pvfs/gossip.hpp"

namespace gossip = pvfs::gossip;
using gossip::Mask;

namespace {

// Counts how often it is formatted.
struct Counted {
    int *count;
};

// Throws when formatted.
struct Throws {};

} // namespace

template <> struct fmt::formatter<Counted> : fmt::formatter<int> {
    auto format(const Counted &c, fmt::format_context &ctx) const -> decltype(ctx.out())
    {
        ++*c.count;
        return fmt::formatter<int>::format(*c.count, ctx);
    }
};

template <> struct fmt::formatter<Throws> {
    static constexpr auto parse(fmt::format_parse_context &ctx) -> decltype(ctx.begin())
    {
        return ctx.begin();
    }
    static auto format(const Throws & /*unused*/, fmt::format_context &ctx) -> decltype(ctx.out())
    {
        throw std::runtime_error("formatter exploded");
        return ctx.out();
    }
};

namespace {

// ATF_REQUIRE with an explanation.
void require_msg(bool ok, const std::string &why)
{
    if (!ok) {
        ATF_FAIL(why);
    }
}

std::vector<std::string> read_lines(const std::string &path)
{
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) {
        lines.push_back(line);
    }
    return lines;
}

std::string read_file(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A log line taken apart.
struct Line {
    std::chrono::system_clock::time_point time;
    std::string level;
    std::string subsystem;
    long pid = 0;
    std::string message;
};

bool all_digits(std::string_view s)
{
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

long to_long(std::string_view s)
{
    long v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
        throw std::invalid_argument("not a number: " + std::string(s));
    }
    return v;
}

std::vector<std::string_view> split(std::string_view s, char sep)
{
    std::vector<std::string_view> out;
    for (;;) {
        const std::size_t at = s.find(sep);
        out.push_back(s.substr(0, at));
        if (at == std::string_view::npos) {
            return out;
        }
        s.remove_prefix(at + 1);
    }
}

// "2025-11-22T06:53:01.123456Z error tcp[4242]: message"; nullopt if the
// line does not have exactly that shape.
std::optional<Line> parse_line(std::string_view text)
{
    // The timestamp: digits where the template has '9', the rest literal.
    constexpr std::string_view shape = "9999-99-99T99:99:99.999999Z ";
    if (text.size() < shape.size()) {
        return std::nullopt;
    }
    for (std::size_t i = 0; i < shape.size(); ++i) {
        const bool digit = text[i] >= '0' && text[i] <= '9';
        if (shape[i] == '9' ? !digit : text[i] != shape[i]) {
            return std::nullopt;
        }
    }
    using namespace std::chrono;
    const year_month_day ymd{year(static_cast<int>(to_long(text.substr(0, 4)))),
                             month(static_cast<unsigned>(to_long(text.substr(5, 2)))),
                             day(static_cast<unsigned>(to_long(text.substr(8, 2))))};
    const long hh = to_long(text.substr(11, 2));
    const long mm = to_long(text.substr(14, 2));
    const long ss = to_long(text.substr(17, 2));
    if (!ymd.ok() || hh > 23 || mm > 59 || ss > 60) {
        return std::nullopt;
    }
    Line line;
    line.time = sys_days(ymd) + hours(hh) + minutes(mm) + seconds(ss) +
                microseconds(to_long(text.substr(20, 6)));
    text.remove_prefix(shape.size());

    const std::size_t space = text.find(' ');
    line.level = text.substr(0, space);
    if (space == std::string_view::npos || (line.level != "error" && line.level != "warning" &&
                                            line.level != "info" && line.level != "debug")) {
        return std::nullopt;
    }
    text.remove_prefix(space + 1);

    const std::size_t open = text.find('[');
    const std::size_t close = text.find("]: ");
    if (open == std::string_view::npos || close == std::string_view::npos || open == 0 ||
        close < open) {
        return std::nullopt;
    }
    line.subsystem = text.substr(0, open);
    if (line.subsystem.find_first_of(" \t") != std::string::npos) {
        return std::nullopt;
    }
    const std::string_view pid = text.substr(open + 1, close - open - 1);
    if (!all_digits(pid)) {
        return std::nullopt;
    }
    line.pid = to_long(pid);
    line.message = text.substr(close + 3);
    return line;
}

// All lines of a log file, each required to parse.
std::vector<Line> parse_file(const std::string &path)
{
    std::vector<Line> out;
    for (const std::string &text : read_lines(path)) {
        const std::optional<Line> line = parse_line(text);
        if (!line) {
            ATF_FAIL("malformed log line: " + text);
        }
        out.push_back(*line);
    }
    return out;
}

std::vector<std::string> messages(const std::string &path)
{
    std::vector<std::string> out;
    for (const Line &line : parse_file(path)) {
        out.push_back(line.message);
    }
    return out;
}

void use_file(const std::string &path)
{
    const gossip::Status status = gossip::log_to_file(path);
    require_msg(status.ok(), status.error);
}

std::chrono::nanoseconds thread_cpu_time()
{
    timespec ts{};
    ATF_REQUIRE(::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

Mask parsed(std::string_view spec)
{
    const gossip::ParsedMask p = gossip::parse_mask(spec);
    require_msg(p.ok(), fmt::format("parse_mask(\"{}\"): {}", spec, p.error));
    return p.mask;
}

void require_parse_error(std::string_view spec, std::string_view mentions)
{
    const gossip::ParsedMask p = gossip::parse_mask(spec);
    require_msg(!p.ok(), fmt::format("parse_mask(\"{}\") accepted", spec));
    require_msg(
        p.error.find(mentions) != std::string::npos,
        fmt::format(R"(error for "{}" does not mention "{}": {})", spec, mentions, p.error));
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(parse_names);
ATF_TEST_CASE_BODY(parse_names)
{
    ATF_REQUIRE(parsed("tcp") == Mask::tcp);
    ATF_REQUIRE(parsed("tcp,bmi") == (Mask::tcp | Mask::bmi));
    ATF_REQUIRE(parsed(" TCP ,\tBmi ") == (Mask::tcp | Mask::bmi));
    ATF_REQUIRE(parsed("+tcp") == Mask::tcp);
    ATF_REQUIRE(parsed("tcp,,bmi,") == (Mask::tcp | Mask::bmi));
    ATF_REQUIRE(parsed("") == Mask::none);
    ATF_REQUIRE(parsed("none") == Mask::none);
    ATF_REQUIRE(parsed("all") == Mask::all);
    ATF_REQUIRE(parsed("tcp,none,bmi") == Mask::bmi);
    // Every row of the table, by name.
    Mask every = Mask::none;
    for (const gossip::Subsystem &s : gossip::subsystems) {
        ATF_REQUIRE(parsed(s.name) == s.mask);
        ATF_REQUIRE(gossip::bits(s.mask) != 0);
        ATF_REQUIRE((every & s.mask) == Mask::none);
        every |= s.mask;
    }
    for (const char *name : {"bmi", "tcp", "ib", "proto", "server", "client", "pvfsd", "dev",
                             "storage", "meta", "config"}) {
        ATF_REQUIRE(parsed(name) != Mask::none);
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(parse_negation);
ATF_TEST_CASE_BODY(parse_negation)
{
    ATF_REQUIRE(parsed("all,-tcp") == ~Mask::tcp);
    ATF_REQUIRE(!(gossip::bits(parsed("all,-tcp")) & gossip::bits(Mask::tcp)));
    ATF_REQUIRE(parsed("all,-tcp,-ib") == (Mask::all & ~Mask::tcp & ~Mask::ib));
    ATF_REQUIRE(parsed("-tcp,all") == Mask::all); // left to right
    ATF_REQUIRE(parsed("tcp,bmi,-tcp") == Mask::bmi);
    ATF_REQUIRE(parsed("-tcp") == Mask::none);
    ATF_REQUIRE(parsed("all,-all") == Mask::none);
    ATF_REQUIRE(parsed("all,-0x3") == (Mask::all & ~(Mask::bmi | Mask::tcp)));
}

ATF_TEST_CASE_WITHOUT_HEAD(parse_hex);
ATF_TEST_CASE_BODY(parse_hex)
{
    ATF_REQUIRE(parsed("0x3") == (Mask::bmi | Mask::tcp));
    ATF_REQUIRE(parsed("0X3") == (Mask::bmi | Mask::tcp));
    ATF_REQUIRE(parsed("0x0") == Mask::none);
    ATF_REQUIRE(parsed("0xffffffffffffffff") == Mask::all);
    ATF_REQUIRE(parsed("0x8000000000000000") == static_cast<Mask>(1ULL << 63));
    ATF_REQUIRE(parsed("0x400,ib") == (Mask::config | Mask::ib));
    ATF_REQUIRE_EQ(gossip::bits(parsed("0xAbC")), 0xabcU);
}

ATF_TEST_CASE_WITHOUT_HEAD(parse_errors);
ATF_TEST_CASE_BODY(parse_errors)
{
    require_parse_error("tpc", "\"tpc\"");
    require_parse_error("tcp,bogus", "bogus");
    require_parse_error("-", "valid names");
    require_parse_error("0x", "hex");
    require_parse_error("0xg1", "hex");
    require_parse_error("0x10000000000000000", "hex"); // 65 bits
    require_parse_error("-none", "none");
    require_parse_error("tcp bmi", "tcp bmi"); // blanks do not separate
    // The error lists every valid name.
    const gossip::ParsedMask p = gossip::parse_mask("tpc");
    for (const gossip::Subsystem &s : gossip::subsystems) {
        require_msg(p.error.find(s.name) != std::string::npos, p.error);
    }
    require_msg(p.error.find("all") != std::string::npos, p.error);
    require_msg(p.error.find("none") != std::string::npos, p.error);
    // configure() leaves the mask alone on error.
    gossip::set_mask(Mask::ib);
    const gossip::Status s = gossip::configure("ib,tpc");
    ATF_REQUIRE(!s.ok());
    ATF_REQUIRE(gossip::mask() == Mask::ib);
}

ATF_TEST_CASE_WITHOUT_HEAD(format_mask);
ATF_TEST_CASE_BODY(format_mask)
{
    ATF_REQUIRE_EQ(gossip::format_mask(Mask::none), "none");
    ATF_REQUIRE_EQ(gossip::format_mask(Mask::all), "all");
    ATF_REQUIRE_EQ(gossip::format_mask(Mask::tcp | Mask::bmi), "bmi,tcp");
    ATF_REQUIRE_EQ(gossip::format_mask(static_cast<Mask>(1ULL << 63)), "0x8000000000000000");
    ATF_REQUIRE_EQ(gossip::format_mask(Mask::tcp | static_cast<Mask>(1ULL << 40)),
                   "tcp,0x10000000000");
    // format and parse are inverses.
    for (const Mask m : {Mask::none, Mask::all, Mask::tcp, ~Mask::tcp, Mask::meta | Mask::dev,
                         static_cast<Mask>(0x123456789abcdefULL)}) {
        require_msg(parsed(gossip::format_mask(m)) == m, gossip::format_mask(m));
    }
    ATF_REQUIRE_EQ(gossip::level_name(gossip::Level::warning), "warning");
}

ATF_TEST_CASE_WITHOUT_HEAD(configure_env);
// setenv is not thread-safe; this process has one thread.
// NOLINTBEGIN(concurrency-mt-unsafe)
ATF_TEST_CASE_BODY(configure_env)
{
    ATF_REQUIRE(::unsetenv("PVFS_DEBUG") == 0);
    gossip::set_mask(Mask::meta);
    ATF_REQUIRE(gossip::configure_from_env().ok());
    ATF_REQUIRE(gossip::mask() == Mask::meta); // unset: unchanged

    ATF_REQUIRE(::setenv("PVFS_DEBUG", "all,-tcp", 1) == 0);
    ATF_REQUIRE(gossip::configure_from_env().ok());
    ATF_REQUIRE(gossip::mask() == ~Mask::tcp);
    ATF_REQUIRE(gossip::enabled(Mask::bmi));
    ATF_REQUIRE(!gossip::enabled(Mask::tcp));

    ATF_REQUIRE(::setenv("PVFS_DEBUG", "tcp,frob", 1) == 0);
    const gossip::Status s = gossip::configure_from_env();
    ATF_REQUIRE(!s.ok());
    require_msg(s.error.find("PVFS_DEBUG") != std::string::npos, s.error);
    require_msg(s.error.find("frob") != std::string::npos, s.error);
    ATF_REQUIRE(gossip::mask() == ~Mask::tcp);

    ATF_REQUIRE(::setenv("MY_DEBUG", "0x2", 1) == 0);
    ATF_REQUIRE(gossip::configure_from_env("MY_DEBUG").ok());
    ATF_REQUIRE(gossip::mask() == Mask::tcp);

    ATF_REQUIRE(gossip::configure("none").ok());
    ATF_REQUIRE(gossip::mask() == Mask::none);
    ATF_REQUIRE(!gossip::enabled(Mask::all));
}
// NOLINTEND(concurrency-mt-unsafe)

ATF_TEST_CASE_WITHOUT_HEAD(mask_filtering);
ATF_TEST_CASE_BODY(mask_filtering)
{
    use_file("filter.log");
    gossip::set_mask(Mask::tcp);
    ATF_REQUIRE(gossip::enabled(Mask::tcp));
    ATF_REQUIRE(gossip::enabled(Mask::tcp | Mask::bmi)); // any bit
    ATF_REQUIRE(!gossip::enabled(Mask::bmi));
    ATF_REQUIRE(!gossip::enabled(Mask::none));

    gossip::debug(Mask::tcp, "debug tcp {}", 1);
    gossip::debug(Mask::bmi, "debug bmi {}", 2);
    gossip::debug(Mask::bmi | Mask::tcp, "debug bmi,tcp {}", 3);
    gossip::info(Mask::tcp, "info tcp {}", 4);
    gossip::info(Mask::bmi, "info bmi {}", 5);
    gossip::set_verbose(true);
    ATF_REQUIRE(gossip::verbose());
    gossip::info(Mask::bmi, "info bmi verbose {}", 6);
    gossip::debug(Mask::bmi, "debug bmi verbose {}", 7);
    gossip::set_verbose(false);
    gossip::info(Mask::bmi, "info bmi quiet {}", 8);
    gossip::log(gossip::Level::debug, Mask::tcp, "log debug tcp");
    gossip::log(gossip::Level::debug, Mask::ib, "log debug ib");
    gossip::log(gossip::Level::info, Mask::ib, "log info ib");
    gossip::set_mask(Mask::none);
    gossip::debug(Mask::tcp, "debug tcp off {}", 9);

    const std::vector<Line> lines = parse_file("filter.log");
    std::vector<std::string> got;
    got.reserve(lines.size());
    for (const Line &l : lines) {
        got.push_back(l.level + " " + l.subsystem + " " + l.message);
    }
    const std::vector<std::string> want = {
        "debug tcp debug tcp 1",       "debug bmi,tcp debug bmi,tcp 3", "info tcp info tcp 4",
        "info bmi info bmi verbose 6", "debug tcp log debug tcp",
    };
    ATF_REQUIRE_EQ(fmt::format("{}", fmt::join(got, " | ")),
                   fmt::format("{}", fmt::join(want, " | ")));
}

ATF_TEST_CASE_WITHOUT_HEAD(errors_always_printed);
ATF_TEST_CASE_BODY(errors_always_printed)
{
    // stderr is the default destination: catch fd 2 in a file.
    const int fd = ::open("stderr.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ATF_REQUIRE(fd >= 0);
    const int saved = ::dup(STDERR_FILENO);
    ATF_REQUIRE(saved >= 0);
    ATF_REQUIRE(::dup2(fd, STDERR_FILENO) == STDERR_FILENO);
    ::close(fd);

    gossip::set_mask(Mask::none);
    gossip::set_verbose(false);
    gossip::error("plain error {}", 1);
    gossip::error(Mask::storage, "storage error {}", 2);
    gossip::warning("plain warning {}", 3);
    gossip::warning(Mask::ib, "ib warning {}", 4);
    gossip::debug(Mask::all, "never {}", 5);
    gossip::info(Mask::all, "never {}", 6);
    gossip::log(gossip::Level::error, Mask::none, "logged error");

    ATF_REQUIRE(::dup2(saved, STDERR_FILENO) == STDERR_FILENO);
    ::close(saved);

    std::vector<std::string> got;
    for (const Line &l : parse_file("stderr.log")) {
        ATF_REQUIRE_EQ(l.pid, static_cast<long>(::getpid()));
        got.push_back(l.level + " " + l.subsystem + " " + l.message);
    }
    const std::vector<std::string> want = {
        "error - plain error 1",   "error storage storage error 2", "warning - plain warning 3",
        "warning ib ib warning 4", "error - logged error",
    };
    ATF_REQUIRE_EQ(fmt::format("{}", fmt::join(got, " | ")),
                   fmt::format("{}", fmt::join(want, " | ")));
}

ATF_TEST_CASE_WITHOUT_HEAD(file_format);
ATF_TEST_CASE_BODY(file_format)
{
    {
        std::ofstream old("format.log");
        old << "an older line\n";
    }
    const auto before = std::chrono::system_clock::now();
    use_file("format.log");
    gossip::set_mask(Mask::all);
    gossip::debug(Mask::meta, "handle {:#x} has {} entries", 0xbeefU, 3);
    gossip::info(Mask::config | Mask::dev, "two subsystems");
    gossip::error("two\nlines\r and a \x1b[31mcolour");
    gossip::warning(Mask::tcp, "printf habit\n");
    gossip::error(Mask::tcp, "{}", std::string(10000, 'x'));
    const auto after = std::chrono::system_clock::now();

    std::vector<std::string> raw = read_lines("format.log");
    ATF_REQUIRE_EQ(raw.size(), 6U);
    ATF_REQUIRE_EQ(raw.front(), "an older line"); // appended, not truncated
    raw.erase(raw.begin());

    std::vector<Line> lines;
    for (const std::string &text : raw) {
        const std::optional<Line> l = parse_line(text);
        require_msg(l.has_value(), text);
        ATF_REQUIRE_EQ(l->pid, static_cast<long>(::getpid()));
        // The clock has microseconds; the line is stamped while it is written.
        ATF_REQUIRE(l->time >= std::chrono::floor<std::chrono::microseconds>(before));
        ATF_REQUIRE(l->time <= after);
        lines.push_back(*l);
    }
    ATF_REQUIRE_EQ(lines[0].level, "debug");
    ATF_REQUIRE_EQ(lines[0].subsystem, "meta");
    ATF_REQUIRE_EQ(lines[0].message, "handle 0xbeef has 3 entries");
    ATF_REQUIRE_EQ(lines[1].level, "info");
    ATF_REQUIRE_EQ(lines[1].subsystem, "dev,config");
    ATF_REQUIRE_EQ(lines[2].level, "error");
    ATF_REQUIRE_EQ(lines[2].subsystem, "-");
    ATF_REQUIRE_EQ(lines[2].message, R"(two\nlines\r and a \x1b[31mcolour)");
    ATF_REQUIRE_EQ(lines[3].level, "warning");
    ATF_REQUIRE_EQ(lines[3].message, "printf habit");
    ATF_REQUIRE_EQ(lines[4].message, std::string(10000, 'x'));
    for (std::size_t i = 1; i < lines.size(); ++i) {
        ATF_REQUIRE(lines[i - 1].time <= lines[i].time);
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(file_flags);
ATF_TEST_CASE_BODY(file_flags)
{
    use_file("flags.log");
    const std::filesystem::path want = std::filesystem::canonical("flags.log");
    std::optional<std::string> fdinfo;
    for (const auto &entry : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        if (std::filesystem::read_symlink(entry.path(), ec) == want) {
            fdinfo = read_file("/proc/self/fdinfo/" + entry.path().filename().string());
        }
    }
    require_msg(fdinfo.has_value(), "the log file is not open");
    const std::size_t at = fdinfo->find("flags:");
    ATF_REQUIRE(at != std::string::npos);
    const std::string octal = fdinfo->substr(at + 6, fdinfo->find('\n', at) - at - 6);
    const std::string digits(octal.substr(octal.find_first_not_of(" \t")));
    unsigned flags = 0;
    ATF_REQUIRE(std::from_chars(digits.data(), digits.data() + digits.size(), flags, 8).ec ==
                std::errc());
    require_msg((flags & O_APPEND) != 0, *fdinfo);
    require_msg((flags & O_CLOEXEC) != 0, *fdinfo);

    // Switching away closes it (RAII); a bad path is an error naming it.
    gossip::log_to_stderr();
    bool still_open = false;
    for (const auto &entry : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        still_open = still_open || std::filesystem::read_symlink(entry.path(), ec) == want;
    }
    ATF_REQUIRE(!still_open);

    const gossip::Status s = gossip::log_to_file("no/such/dir/x.log");
    ATF_REQUIRE(!s.ok());
    require_msg(s.error.find("no/such/dir/x.log") != std::string::npos, s.error);
    require_msg(s.error.find("No such file") != std::string::npos, s.error);
}

ATF_TEST_CASE_WITHOUT_HEAD(repeats_suppressed);
ATF_TEST_CASE_BODY(repeats_suppressed)
{
    use_file("repeat.log");
    gossip::set_mask(Mask::all);
    for (int i = 0; i < 100; ++i) {
        gossip::error(Mask::ib, "link down");
    }
    gossip::error(Mask::tcp, "link down");   // another subsystem: not a repeat
    gossip::warning(Mask::tcp, "link down"); // another level: not a repeat
    gossip::warning(Mask::tcp, "link down");
    gossip::flush();
    gossip::warning(Mask::tcp, "link down");
    for (int i = 0; i < 3; ++i) {
        gossip::debug(Mask::tcp, "poll"); // debug is never suppressed
    }

    std::vector<std::string> got;
    for (const Line &l : parse_file("repeat.log")) {
        got.push_back(l.level + " " + l.subsystem + " " + l.message);
    }
    const std::vector<std::string> want = {
        "error ib link down",
        "error ib last message repeated 99 times",
        "error tcp link down",
        "warning tcp link down",
        "warning tcp last message repeated 1 times",
        "warning tcp last message repeated 1 times",
        "debug tcp poll",
        "debug tcp poll",
        "debug tcp poll",
    };
    ATF_REQUIRE_EQ(fmt::format("{}", fmt::join(got, " | ")),
                   fmt::format("{}", fmt::join(want, " | ")));
}

ATF_TEST_CASE_WITHOUT_HEAD(threads_whole_lines);
ATF_TEST_CASE_BODY(threads_whole_lines)
{
    // Every thread writes numbered lines of its own and, every 4th line, an
    // error identical across threads: the repeat counter is shared state too.
    constexpr int nthreads = 8;
    constexpr int per_thread = 2000;
    constexpr int storms_per_thread = per_thread / 4;
    use_file("threads.log");
    gossip::set_mask(Mask::tcp);
    {
        std::vector<std::jthread> threads;
        threads.reserve(nthreads);
        for (int t = 0; t < nthreads; ++t) {
            threads.emplace_back([t] {
                const std::string payload(100 + (t * 37), static_cast<char>('a' + t));
                for (int i = 0; i < per_thread; ++i) {
                    if (i % 2 == 0) {
                        gossip::debug(Mask::tcp, "t{} n{} {}", t, i, payload);
                    } else {
                        gossip::error(Mask::tcp, "t{} n{} {}", t, i, payload);
                    }
                    if (i % 4 == 0) {
                        gossip::error(Mask::tcp, "storm");
                    }
                }
            });
        }
    }
    gossip::flush();

    std::array<int, nthreads> next{};
    long storms = 0;
    const std::string_view repeated = "last message repeated ";
    for (const Line &l : parse_file("threads.log")) {
        if (l.message == "storm") {
            ++storms;
            continue;
        }
        if (l.message.starts_with(repeated)) { // only "storm" can repeat
            const std::string_view rest = std::string_view(l.message).substr(repeated.size());
            storms += to_long(rest.substr(0, rest.find(' ')));
            continue;
        }
        // "t3 n42 dddd..."
        const std::vector<std::string_view> f = split(l.message, ' ');
        require_msg(f.size() == 3 && f[0].starts_with('t') && f[1].starts_with('n'), l.message);
        const auto t = static_cast<std::size_t>(to_long(f[0].substr(1)));
        ATF_REQUIRE(t < next.size());
        ATF_REQUIRE_EQ(to_long(f[1].substr(1)), next.at(t)); // in order, none lost
        ATF_REQUIRE_EQ(l.level, next.at(t) % 2 == 0 ? "debug" : "error");
        ++next.at(t);
        ATF_REQUIRE_EQ(std::string(f[2]), std::string(100 + (t * 37), static_cast<char>('a' + t)));
    }
    for (const int n : next) {
        ATF_REQUIRE_EQ(n, per_thread);
    }
    ATF_REQUIRE_EQ(storms, static_cast<long>(nthreads) * storms_per_thread);
}

ATF_TEST_CASE_WITHOUT_HEAD(processes_whole_lines);
ATF_TEST_CASE_BODY(processes_whole_lines)
{
    constexpr int nprocs = 4;
    constexpr int per_proc = 1000;
    std::vector<pid_t> children;
    for (int p = 0; p < nprocs; ++p) {
        const pid_t pid = ::fork();
        ATF_REQUIRE(pid >= 0);
        if (pid == 0) {
            // Each process opens the file itself, as separate daemons would.
            if (!gossip::log_to_file("procs.log").ok()) {
                ::_exit(1);
            }
            const std::string payload(3000, static_cast<char>('a' + p));
            for (int i = 0; i < per_proc; ++i) {
                gossip::warning(Mask::server, "p{} n{} {}", p, i, payload);
            }
            ::_exit(0);
        }
        children.push_back(pid);
    }
    for (const pid_t pid : children) {
        int status = 0;
        ATF_REQUIRE_EQ(::waitpid(pid, &status, 0), pid);
        ATF_REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    std::map<long, int> per_pid;
    const std::vector<Line> lines = parse_file("procs.log");
    ATF_REQUIRE_EQ(lines.size(), static_cast<std::size_t>(nprocs * per_proc));
    for (const Line &l : lines) {
        // "p2 n17 ccc..."
        const std::vector<std::string_view> f = split(l.message, ' ');
        require_msg(f.size() == 3 && f[0].starts_with('p') && f[1].starts_with('n'),
                    l.message.substr(0, 80));
        const long p = to_long(f[0].substr(1));
        ATF_REQUIRE_EQ(to_long(f[1].substr(1)), per_pid[l.pid]++); // in order, none lost
        ATF_REQUIRE_EQ(std::string(f[2]), std::string(3000, static_cast<char>('a' + p)));
    }
    ATF_REQUIRE_EQ(per_pid.size(), static_cast<std::size_t>(nprocs));
}

// 10 million disabled debug calls take about 6 ms on an idle machine (ASan
// and UBSan: 40 ms), and a few times that on a loaded one.  Formatting them
// would take seconds.
#ifdef __SANITIZE_ADDRESS__
constexpr long disabled_budget_ms = 500;
#else
constexpr long disabled_budget_ms = 100;
#endif

ATF_TEST_CASE_WITHOUT_HEAD(disabled_debug_is_cheap);
ATF_TEST_CASE_BODY(disabled_debug_is_cheap)
{
    constexpr long calls = 10'000'000;
    gossip::set_mask(Mask::all & ~Mask::tcp);
    int formatted = 0;
    const Counted counted{&formatted};
    const std::string text = "some text";
    // First a few calls, so that a broken filter fails fast instead of
    // formatting ten million messages.
    for (long i = 0; i < 1000; ++i) {
        gossip::debug(Mask::tcp, "call {} {} {}", i, text, counted);
    }
    ATF_REQUIRE_EQ(formatted, 0);
    // CPU time of this thread, so that a busy machine does not count; the
    // best of five rounds.
    auto best = std::chrono::nanoseconds::max();
    for (int round = 0; round < 5; ++round) {
        const auto start = thread_cpu_time();
        for (long i = 0; i < calls; ++i) {
            gossip::debug(Mask::tcp, "call {} {} {}", i, text, counted);
        }
        best = std::min(best, thread_cpu_time() - start);
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(best).count();
    std::cout << "10M disabled debug calls: " << ms << " ms of CPU (best of 5)\n";
    ATF_REQUIRE_EQ(formatted, 0); // the message was never formatted
    require_msg(ms < disabled_budget_ms,
                fmt::format("10M disabled debug calls took {} ms of CPU", ms));

    // The same call, enabled, formats (so the counter above can move).
    use_file("cheap.log");
    gossip::set_mask(Mask::tcp);
    gossip::debug(Mask::tcp, "call {} {} {}", 1, text, counted);
    ATF_REQUIRE_EQ(formatted, 1);
    ATF_REQUIRE_EQ(messages("cheap.log").at(0), "call 1 some text 1");
}

ATF_TEST_CASE_WITHOUT_HEAD(bad_formatter_is_logged);
ATF_TEST_CASE_BODY(bad_formatter_is_logged)
{
    use_file("throws.log");
    gossip::error(Mask::proto, "value {}", Throws{});
    const std::vector<Line> lines = parse_file("throws.log");
    ATF_REQUIRE_EQ(lines.size(), 1U);
    ATF_REQUIRE_EQ(lines[0].subsystem, "proto");
    require_msg(lines[0].message.find("unformattable message \"value {}\"") == 0, lines[0].message);
    require_msg(lines[0].message.find("formatter exploded") != std::string::npos, lines[0].message);
}

ATF_TEST_CASE_WITHOUT_HEAD(syslog_destination);
ATF_TEST_CASE_BODY(syslog_destination)
{
    // glibc's syslog() writes to /dev/log.  Give this process a private
    // /dev with a socket of our own there.
    if (::geteuid() != 0 || ::unshare(CLONE_NEWNS) != 0) {
        ATF_SKIP("needs root and mount namespaces to put a socket at /dev/log");
    }
    ATF_REQUIRE(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0);
    ATF_REQUIRE(::mount("gossip_test", "/dev", "tmpfs", 0, "mode=0755") == 0);
    const int sock = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ATF_REQUIRE(sock >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string_view path = "/dev/log";
    std::copy(path.begin(), path.end(), std::begin(addr.sun_path));
    ATF_REQUIRE(::bind(sock, reinterpret_cast<const sockaddr *>(&addr), sizeof addr) == 0);

    gossip::set_mask(Mask::none);
    gossip::log_to_syslog("gossip_test");
    gossip::error(Mask::tcp, "peer {} gone", 7);
    gossip::warning("plain");
    gossip::debug(Mask::tcp, "filtered");
    gossip::log_to_stderr();

    std::vector<std::string> got;
    std::array<char, 4096> buf{};
    for (;;) {
        const ssize_t n = ::recv(sock, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n <= 0) {
            break;
        }
        got.emplace_back(buf.data(), static_cast<std::size_t>(n));
    }
    ::close(sock);
    ATF_REQUIRE_EQ(got.size(), 2U);
    const std::string tag = fmt::format("gossip_test[{}]: ", ::getpid());
    // <priority> = facility daemon (3) * 8 + severity (err 3, warning 4).
    require_msg(got[0].starts_with("<27>"), got[0]);
    require_msg(got[0].ends_with(tag + "tcp: peer 7 gone"), got[0]);
    require_msg(got[1].starts_with("<28>"), got[1]);
    require_msg(got[1].ends_with(tag + "plain"), got[1]);
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, parse_names);
    ATF_ADD_TEST_CASE(tcs, parse_negation);
    ATF_ADD_TEST_CASE(tcs, parse_hex);
    ATF_ADD_TEST_CASE(tcs, parse_errors);
    ATF_ADD_TEST_CASE(tcs, format_mask);
    ATF_ADD_TEST_CASE(tcs, configure_env);
    ATF_ADD_TEST_CASE(tcs, mask_filtering);
    ATF_ADD_TEST_CASE(tcs, errors_always_printed);
    ATF_ADD_TEST_CASE(tcs, file_format);
    ATF_ADD_TEST_CASE(tcs, file_flags);
    ATF_ADD_TEST_CASE(tcs, repeats_suppressed);
    ATF_ADD_TEST_CASE(tcs, threads_whole_lines);
    ATF_ADD_TEST_CASE(tcs, processes_whole_lines);
    ATF_ADD_TEST_CASE(tcs, disabled_debug_is_cheap);
    ATF_ADD_TEST_CASE(tcs, bad_formatter_is_logged);
    ATF_ADD_TEST_CASE(tcs, syslog_destination);
}
