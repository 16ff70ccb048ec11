// gossip: pvfs's logging facility, after PVFS2's debug-mask logging.
//
// Every message carries a level and, usually, a subsystem.  Errors and
// warnings are always written.  Debug messages are written only when their
// subsystem is enabled in the run-time mask; info messages when their
// subsystem is enabled or verbose output is on.  The mask is set from a
// string such as "tcp,bmi", "all,-tcp", "none" or "0x3", e.g. from the
// environment variable PVFS_DEBUG (configure_from_env()).
//
//     namespace gossip = pvfs::gossip;
//     gossip::debug(gossip::Mask::tcp, "connected to {} on fd {}", url, fd);
//     gossip::error(gossip::Mask::storage, "fsync {}: {}", path, ec.message());
//     if (gossip::enabled(gossip::Mask::proto)) { dump(request); }
//
// A disabled debug() costs one relaxed atomic load and a branch: its
// message is not formatted.  Its arguments are still evaluated, so guard
// expensive ones with enabled().  Format strings are checked at compile time
// (fmt syntax).  Logging never throws and never fails the caller; a message
// that cannot be formatted is logged as such.
//
// Each message becomes one line, written with one write(2):
//
//     2025-11-22T06:53:01.123456Z error tcp[4242]: connection reset by peer
//
// i.e. the UTC time with microseconds, the level, the subsystem ("-" when
// none was given, "bmi,tcp" when several), the process id and the message.
// Control characters in the message are escaped (a newline becomes "\n"),
// so a message is always exactly one line.  A run of identical errors or
// warnings is written once, followed by "last message repeated N times"
// when the run ends (at the next different message, at flush(), at exit,
// or every 10 s while it lasts).
//
// Lines go to stderr (the default), to a file opened for appending, or to
// syslog.  All functions are thread-safe.  Lines from threads never
// interleave; lines from processes appending to one file do not either.
// Do not log from the destructors of static objects: past the logger's own
// destruction (at exit) messages go straight to stderr, as "level: message".
#ifndef PVFS_GOSSIP_HPP
#define PVFS_GOSSIP_HPP

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/core.h>

namespace pvfs::gossip {

// Subsystems, one bit each.  Adding one: an enumerator here and one row in
// `subsystems` below (a static_assert checks the table).
enum class Mask : std::uint64_t {
    none = 0,
    bmi = 1ULL << 0,
    tcp = 1ULL << 1,
    ib = 1ULL << 2,
    proto = 1ULL << 3,
    server = 1ULL << 4,
    client = 1ULL << 5,
    pvfsd = 1ULL << 6,
    dev = 1ULL << 7,
    storage = 1ULL << 8,
    meta = 1ULL << 9,
    config = 1ULL << 10,
    all = ~0ULL,
};

struct Subsystem {
    Mask mask;
    std::string_view name; // as written in PVFS_DEBUG; lower case, unique
    std::string_view help; // one line for admins
};

// The one table of subsystem names: parsing, printing and the list of
// valid names in error messages all come from it.
inline constexpr auto subsystems = std::to_array<Subsystem>({
    {Mask::bmi, "bmi", "BMI core: addresses, ops, contexts, unexpected messages"},
    {Mask::tcp, "tcp", "BMI TCP method: connections, framing, rendezvous"},
    {Mask::ib, "ib", "BMI InfiniBand method: connections, credits, RDMA"},
    {Mask::proto, "proto", "request and reply encoding and decoding"},
    {Mask::server, "server", "pvfs-server request processing"},
    {Mask::client, "client", "client library (libpvfs)"},
    {Mask::pvfsd, "pvfsd", "client daemon"},
    {Mask::dev, "dev", "/dev/pvfsd traffic between pvfsd and the kernel"},
    {Mask::storage, "storage", "data objects on the servers' disks"},
    {Mask::meta, "meta", "metadata database"},
    {Mask::config, "config", "configuration files and settings"},
});

[[nodiscard]] constexpr std::uint64_t bits(Mask m) noexcept
{
    return static_cast<std::uint64_t>(m);
}
[[nodiscard]] constexpr Mask operator|(Mask a, Mask b) noexcept
{
    return static_cast<Mask>(bits(a) | bits(b));
}
[[nodiscard]] constexpr Mask operator&(Mask a, Mask b) noexcept
{
    return static_cast<Mask>(bits(a) & bits(b));
}
[[nodiscard]] constexpr Mask operator~(Mask a) noexcept
{
    return static_cast<Mask>(~bits(a));
}
constexpr Mask &operator|=(Mask &a, Mask b) noexcept
{
    return a = a | b;
}
constexpr Mask &operator&=(Mask &a, Mask b) noexcept
{
    return a = a & b;
}

namespace detail {
// Each row one distinct bit, each name non-empty, lower case and unique and
// none of the reserved words.
[[nodiscard]] constexpr bool subsystems_valid() noexcept
{
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < subsystems.size(); ++i) {
        const std::uint64_t b = bits(subsystems.at(i).mask);
        const std::string_view name = subsystems.at(i).name;
        if (b == 0 || (b & (b - 1)) != 0 || (seen & b) != 0 || name.empty() || name == "all" ||
            name == "none") {
            return false;
        }
        seen |= b;
        for (const char c : name) {
            if ((c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_') {
                return false;
            }
        }
        for (std::size_t j = 0; j < i; ++j) {
            if (subsystems.at(j).name == name) {
                return false;
            }
        }
    }
    return true;
}
static_assert(subsystems_valid(), "gossip::subsystems: bits and names must be distinct");
} // namespace detail

enum class Level : std::uint8_t {
    error,   // always written
    warning, // always written
    info,    // written when its subsystem is enabled or verbose() is on
    debug,   // written when its subsystem is enabled
};

// "error", "warning", "info", "debug".
[[nodiscard]] std::string_view level_name(Level level) noexcept;

// The outcome of an operation that can fail: empty error means success.
struct Status {
    std::string error;
    [[nodiscard]] bool ok() const noexcept { return error.empty(); }
};

// ---- the run-time mask -------------------------------------------------

namespace detail {
// The process-wide mask and verbose flag, read inline by enabled() and
// info(); written only through set_mask() and set_verbose().  Constant-
// initialised, so reaching them costs no guard.
[[nodiscard]] inline std::atomic<std::uint64_t> &active_mask() noexcept
{
    constinit static std::atomic<std::uint64_t> m{0};
    return m;
}
[[nodiscard]] inline std::atomic<bool> &verbose_on() noexcept
{
    constinit static std::atomic<bool> on{false};
    return on;
}
} // namespace detail

// True when any subsystem in m is enabled.  Cheap: use it to skip work that
// only feeds debug messages.
[[nodiscard]] inline bool enabled(Mask m) noexcept
{
    return (detail::active_mask().load(std::memory_order_relaxed) & bits(m)) != 0;
}

void set_mask(Mask m) noexcept;
[[nodiscard]] Mask mask() noexcept;

// Verbose output: info messages of every subsystem are written.
void set_verbose(bool on) noexcept;
[[nodiscard]] bool verbose() noexcept;

struct ParsedMask {
    Mask mask = Mask::none;
    std::string error; // empty on success; else says why and lists valid names
    [[nodiscard]] bool ok() const noexcept { return error.empty(); }
};

// Parses a comma-separated list, applied left to right from an empty mask:
//   NAME     add a subsystem (case-insensitive; see `subsystems`); +NAME too
//   -NAME    remove it
//   all      every bit; none: clear every bit
//   0xHEX    add these bits (-0xHEX removes them)
// Blanks around items and empty items are ignored, so "" is none.
// Examples: "tcp,bmi", "all,-tcp", "none", "0x3".
[[nodiscard]] ParsedMask parse_mask(std::string_view spec);

// The inverse of parse_mask: "none", "all", "bmi,tcp", "tcp,0x8000000000000000".
[[nodiscard]] std::string format_mask(Mask m);

// parse_mask(spec), and set_mask() with the result if it parsed.  On error
// the mask is unchanged.
[[nodiscard]] Status configure(std::string_view spec);

inline constexpr const char *debug_env = "PVFS_DEBUG";

// configure() from the environment variable `var` (PVFS_DEBUG); nothing
// changes when it is unset.  The error names the variable.
[[nodiscard]] Status configure_from_env(const char *var = debug_env);

// ---- destinations ------------------------------------------------------
// Switching destination first writes any pending "repeated" line to the old
// one, then closes it.

// Lines go to file descriptor 2.  The default.
void log_to_stderr();

// Lines are appended to the file at path (created 0640 if missing; opened
// O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC).  On error the destination is unchanged
// and the error names the path and the reason.
[[nodiscard]] Status log_to_file(const std::string &path);

// Lines go to syslog (facility daemon) as "subsystem: message", tagged with
// `ident` (the program name when empty) and the pid; the level becomes the
// priority; the timestamp is syslog's.
void log_to_syslog(std::string_view ident);

// Writes a pending "last message repeated N times" line now.
void flush();

// ---- writing -----------------------------------------------------------

// Writes an already formatted message if the level's rule allows it
// (subsystem may be Mask::none for errors and warnings).
void log(Level level, Mask subsystem, std::string_view message) noexcept;

namespace detail {
void vlog(Level level, Mask subsystem, fmt::string_view format, fmt::format_args args) noexcept;
} // namespace detail

template <typename... Args>
void error(Mask subsystem, fmt::format_string<Args...> format, Args &&...args) noexcept
{
    detail::vlog(Level::error, subsystem, format, fmt::make_format_args(args...));
}
template <typename... Args> void error(fmt::format_string<Args...> format, Args &&...args) noexcept
{
    detail::vlog(Level::error, Mask::none, format, fmt::make_format_args(args...));
}

template <typename... Args>
void warning(Mask subsystem, fmt::format_string<Args...> format, Args &&...args) noexcept
{
    detail::vlog(Level::warning, subsystem, format, fmt::make_format_args(args...));
}
template <typename... Args>
void warning(fmt::format_string<Args...> format, Args &&...args) noexcept
{
    detail::vlog(Level::warning, Mask::none, format, fmt::make_format_args(args...));
}

template <typename... Args>
void info(Mask subsystem, fmt::format_string<Args...> format, Args &&...args) noexcept
{
    if (enabled(subsystem) || detail::verbose_on().load(std::memory_order_relaxed)) {
        detail::vlog(Level::info, subsystem, format, fmt::make_format_args(args...));
    }
}

template <typename... Args>
void debug(Mask subsystem, fmt::format_string<Args...> format, Args &&...args) noexcept
{
    if (enabled(subsystem)) [[unlikely]] {
        detail::vlog(Level::debug, subsystem, format, fmt::make_format_args(args...));
    }
}

} // namespace pvfs::gossip

#endif // PVFS_GOSSIP_HPP
