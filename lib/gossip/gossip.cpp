// gossip: the logger behind include/pvfs/gossip.hpp.
//
// The mask and the verbose flag are atomics read without a lock.  Everything
// else — the destination and the state of repeat suppression — belongs to
// one Logger behind one mutex; a line is built and written under it, so lines
// reach the destination whole and in timestamp order.
#include "pvfs/gossip.hpp"
#include "pvfs/unique_fd.hpp"

#include <fcntl.h>
#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace pvfs::gossip {
namespace {

using pvfs::UniqueFd;

using std::chrono::steady_clock;

// A run of identical errors or warnings is summarised at least this often.
constexpr auto repeat_interval = std::chrono::seconds(10);

// One write(2) unless the kernel takes less; errors are dropped (a logger
// has nowhere to report its own failure).
void write_all(int fd, std::string_view s) noexcept
{
    while (!s.empty()) {
        const ssize_t n = ::write(fd, s.data(), s.size());
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;
        }
        s.remove_prefix(static_cast<std::size_t>(n));
    }
}

// The message as it will appear: one line, without control characters.
std::string escape(std::string_view message)
{
    if (!message.empty() && message.back() == '\n') {
        message.remove_suffix(1); // a habit from printf-style loggers
    }
    std::string out;
    out.reserve(message.size());
    for (const char c : message) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if ((u < 0x20 && c != '\t') || u == 0x7f) {
            fmt::format_to(std::back_inserter(out), "\\x{:02x}", u);
        } else {
            out += c;
        }
    }
    return out;
}

std::string subsystem_field(Mask m)
{
    return m == Mask::none ? std::string("-") : format_mask(m);
}

int syslog_priority(Level level) noexcept
{
    switch (level) {
    case Level::error:
        return LOG_ERR;
    case Level::warning:
        return LOG_WARNING;
    case Level::info:
        return LOG_INFO;
    case Level::debug:
        return LOG_DEBUG;
    }
    return LOG_ERR;
}

// 2025-11-22T06:53:01.123456Z
void append_timestamp(fmt::memory_buffer &out)
{
    using namespace std::chrono;
    const auto now = time_point_cast<microseconds>(system_clock::now());
    const auto day = floor<days>(now);
    const year_month_day ymd{day};
    const hh_mm_ss hms{now - day};
    fmt::format_to(std::back_inserter(out), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                   static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                   static_cast<unsigned>(ymd.day()), hms.hours().count(), hms.minutes().count(),
                   hms.seconds().count(), hms.subseconds().count());
}

// Last resort when the logger is gone or out of memory: no allocation.
void emit_raw(Level level, std::string_view message) noexcept
{
    const std::string_view name = level_name(level);
    write_all(STDERR_FILENO, name);
    write_all(STDERR_FILENO, ": ");
    write_all(STDERR_FILENO, message);
    write_all(STDERR_FILENO, "\n");
}

enum class Sink : std::uint8_t { stderr_fd, file, syslog };

// Set once the Logger is gone (at exit); later messages go to stderr.
std::atomic<bool> &logger_gone() noexcept
{
    constinit static std::atomic<bool> gone{false};
    return gone;
}

class Logger {
public:
    Logger() = default;
    Logger(const Logger &) = delete;
    Logger &operator=(const Logger &) = delete;
    Logger(Logger &&) = delete;
    Logger &operator=(Logger &&) = delete;
    ~Logger()
    {
        const std::lock_guard lock(mutex_);
        flush_locked();
        close_locked();
        logger_gone().store(true);
    }

    void emit(Level level, Mask subsystem, std::string text)
    {
        const std::lock_guard lock(mutex_);
        if (level == Level::error || level == Level::warning) {
            const auto now = steady_clock::now();
            if (run_.active && run_.level == level && run_.subsystem == subsystem &&
                run_.text == text) {
                ++run_.repeats;
                if (now - run_.since >= repeat_interval) {
                    flush_locked();
                    run_.since = now;
                }
                return;
            }
            flush_locked();
            write_locked(level, subsystem, text);
            run_ = Run{true, level, subsystem, std::move(text), 0, now};
            return;
        }
        flush_locked();
        run_.active = false;
        write_locked(level, subsystem, text);
    }

    void flush()
    {
        const std::lock_guard lock(mutex_);
        flush_locked();
    }

    void to_stderr()
    {
        const std::lock_guard lock(mutex_);
        flush_locked();
        close_locked();
        sink_ = Sink::stderr_fd;
    }

    void to_file(UniqueFd file)
    {
        const std::lock_guard lock(mutex_);
        flush_locked();
        close_locked();
        file_ = std::move(file);
        sink_ = Sink::file;
    }

    void to_syslog(std::string_view ident)
    {
        const std::lock_guard lock(mutex_);
        flush_locked();
        close_locked();
        ident_ = ident; // openlog keeps the pointer: ident_ must outlive it
        ::openlog(ident_.empty() ? nullptr : ident_.c_str(), LOG_PID | LOG_NDELAY, LOG_DAEMON);
        sink_ = Sink::syslog;
    }

private:
    // The last error or warning written, and how often it came again since.
    struct Run {
        bool active = false;
        Level level = Level::error;
        Mask subsystem = Mask::none;
        std::string text;
        std::uint64_t repeats = 0;
        steady_clock::time_point since;
    };

    void flush_locked() noexcept
    {
        if (run_.active && run_.repeats > 0) {
            const std::uint64_t repeats = std::exchange(run_.repeats, 0);
            fmt::memory_buffer text; // inline storage: this does not allocate
            try {
                fmt::format_to(std::back_inserter(text), "last message repeated {} times", repeats);
            } catch (const std::exception &) {
                return;
            }
            write_locked(run_.level, run_.subsystem, std::string_view(text.data(), text.size()));
        }
    }

    void close_locked() noexcept
    {
        if (sink_ == Sink::syslog) {
            ::closelog();
        }
        file_.reset();
        sink_ = Sink::stderr_fd;
    }

    void write_locked(Level level, Mask subsystem, std::string_view text) noexcept
    {
        try {
            format_and_write_locked(level, subsystem, text);
        } catch (const std::exception &) {
            emit_raw(level, text);
        }
    }

    void format_and_write_locked(Level level, Mask subsystem, std::string_view text)
    {
        if (sink_ == Sink::syslog) {
            const std::string line = subsystem == Mask::none
                                         ? std::string(text)
                                         : fmt::format("{}: {}", format_mask(subsystem), text);
            ::syslog(syslog_priority(level), "%s", line.c_str());
            return;
        }
        fmt::memory_buffer line;
        append_timestamp(line);
        fmt::format_to(std::back_inserter(line), " {} {}[{}]: {}\n", level_name(level),
                       subsystem_field(subsystem), ::getpid(), text);
        write_all(sink_ == Sink::file ? file_.get() : STDERR_FILENO,
                  std::string_view(line.data(), line.size()));
    }

    std::mutex mutex_;
    Sink sink_ = Sink::stderr_fd;
    UniqueFd file_;
    std::string ident_;
    Run run_;
};

Logger &logger()
{
    static Logger instance;
    return instance;
}

void emit(Level level, Mask subsystem, std::string_view message) noexcept
{
    if (logger_gone().load()) {
        emit_raw(level, message);
        return;
    }
    try {
        logger().emit(level, subsystem, escape(message));
    } catch (const std::exception &) {
        emit_raw(level, message);
    }
}

bool wanted(Level level, Mask subsystem) noexcept
{
    switch (level) {
    case Level::error:
    case Level::warning:
        return true;
    case Level::info:
        return enabled(subsystem) || verbose();
    case Level::debug:
        return enabled(subsystem);
    }
    return true;
}

std::string lower(std::string_view s)
{
    std::string out(s);
    for (char &c : out) {
        if (c >= 'A' && c <= 'Z') {
            c = static_cast<char>(c - 'A' + 'a');
        }
    }
    return out;
}

std::string_view trim(std::string_view s) noexcept
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
        s.remove_suffix(1);
    }
    return s;
}

std::string valid_names()
{
    std::string out = "all, none";
    for (const Subsystem &s : subsystems) {
        out += ", ";
        out += s.name;
    }
    out += ", or a hex mask such as 0x3";
    return out;
}

ParsedMask parse_error(std::string why)
{
    return ParsedMask{Mask::none, std::move(why)};
}

} // namespace

std::string_view level_name(Level level) noexcept
{
    switch (level) {
    case Level::error:
        return "error";
    case Level::warning:
        return "warning";
    case Level::info:
        return "info";
    case Level::debug:
        return "debug";
    }
    return "error";
}

void set_mask(Mask m) noexcept
{
    detail::active_mask().store(bits(m), std::memory_order_relaxed);
}

Mask mask() noexcept
{
    return static_cast<Mask>(detail::active_mask().load(std::memory_order_relaxed));
}

void set_verbose(bool on) noexcept
{
    detail::verbose_on().store(on, std::memory_order_relaxed);
}

bool verbose() noexcept
{
    return detail::verbose_on().load(std::memory_order_relaxed);
}

ParsedMask parse_mask(std::string_view spec)
{
    std::uint64_t result = 0;
    while (!spec.empty()) {
        const std::size_t comma = spec.find(',');
        const std::string_view raw = trim(spec.substr(0, comma));
        spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
        if (raw.empty()) {
            continue;
        }
        std::string_view item = raw;
        const bool remove = item.front() == '-';
        const bool signed_item = remove || item.front() == '+';
        if (signed_item) {
            item.remove_prefix(1);
        }
        const std::string name = lower(item);
        std::uint64_t b = 0;
        if (name == "all") {
            b = bits(Mask::all);
        } else if (name == "none") {
            if (signed_item) {
                return parse_error(fmt::format("\"{}\": none takes no sign", raw));
            }
            result = 0;
            continue;
        } else if (name.starts_with("0x")) {
            const char *first = name.data() + 2;
            const char *last = name.data() + name.size();
            const auto [end, ec] = std::from_chars(first, last, b, 16);
            if (first == last || ec != std::errc() || end != last) {
                return parse_error(fmt::format("\"{}\": not a 64-bit hex mask; valid names: {}",
                                               raw, valid_names()));
            }
        } else {
            bool found = false;
            for (const Subsystem &s : subsystems) {
                if (s.name == name) {
                    b = bits(s.mask);
                    found = true;
                    break;
                }
            }
            if (!found) {
                return parse_error(fmt::format("unknown debug subsystem \"{}\"; valid names: {}",
                                               item, valid_names()));
            }
        }
        result = remove ? (result & ~b) : (result | b);
    }
    return ParsedMask{static_cast<Mask>(result), {}};
}

std::string format_mask(Mask m)
{
    if (m == Mask::none) {
        return "none";
    }
    if (m == Mask::all) {
        return "all";
    }
    std::string out;
    std::uint64_t rest = bits(m);
    for (const Subsystem &s : subsystems) {
        if ((rest & bits(s.mask)) != 0) {
            if (!out.empty()) {
                out += ',';
            }
            out += s.name;
            rest &= ~bits(s.mask);
        }
    }
    if (rest != 0) {
        if (!out.empty()) {
            out += ',';
        }
        fmt::format_to(std::back_inserter(out), "{:#x}", rest);
    }
    return out;
}

Status configure(std::string_view spec)
{
    ParsedMask parsed = parse_mask(spec);
    if (!parsed.ok()) {
        return Status{std::move(parsed.error)};
    }
    set_mask(parsed.mask);
    return {};
}

Status configure_from_env(const char *var)
{
    // NOLINTNEXTLINE(concurrency-mt-unsafe): read at start-up; nothing here calls setenv
    const char *value = std::getenv(var);
    if (value == nullptr) {
        return {};
    }
    Status status = configure(value);
    if (!status.ok()) {
        status.error = fmt::format("{}=\"{}\": {}", var, value, status.error);
    }
    return status;
}

void log_to_stderr()
{
    logger().to_stderr();
}

Status log_to_file(const std::string &path)
{
    UniqueFd file(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640));
    if (file.get() < 0) {
        const std::error_code ec(errno, std::generic_category());
        return Status{fmt::format("log file {}: {}", path, ec.message())};
    }
    logger().to_file(std::move(file));
    return {};
}

void log_to_syslog(std::string_view ident)
{
    logger().to_syslog(ident);
}

void flush()
{
    if (!logger_gone().load()) {
        logger().flush();
    }
}

void log(Level level, Mask subsystem, std::string_view message) noexcept
{
    if (wanted(level, subsystem)) {
        emit(level, subsystem, message);
    }
}

namespace detail {

void vlog(Level level, Mask subsystem, fmt::string_view format, fmt::format_args args) noexcept
{
    try {
        const std::string message = fmt::vformat(format, args);
        emit(level, subsystem, message);
    } catch (const std::exception &e) {
        try {
            emit(level, subsystem,
                 fmt::format("unformattable message \"{}\": {}",
                             std::string_view(format.data(), format.size()), e.what()));
        } catch (const std::exception &) {
            emit_raw(level, std::string_view(format.data(), format.size()));
        }
    }
}

} // namespace detail
} // namespace pvfs::gossip
