// pvfs-fuse: mounts a pvfs file system through FUSE, where pvfs.ko cannot
// load (containers, kernels without the module).  The same client as a
// pvfs.ko mount: pvfsd's Handler (pvfsd_core), fed by a FUSE session
// instead of /dev/pvfsd (docs/mount.md "FUSE", docs/plan/fuse.md).
//
//   pvfs-fuse SOURCE MOUNTPOINT [-o OPTIONS] [-f] ...
//   pvfs-fuse -c CONFIG MOUNTPOINT ...
//   mount.fuse.pvfs SOURCE MOUNTPOINT [-fnsvrw] [-o OPTIONS] [-t fuse.pvfs]
//
// Called as mount.fuse.pvfs (a link), it is mount(8)'s helper for
// `mount -t fuse.pvfs` and fstab: mount(8)'s flags mean what they mean to
// every helper (-f fake, -n no mtab, -s sloppy, -v verbose, -r/-w ro/rw).
// SOURCE is tcp://host:port/fsname (the config comes from that server) or
// a cluster config file.  Without -f it returns once the mount is there
// (or failed) and serves it in the background.
#include "fuse_channel.hpp"

#include "channel.hpp"
#include "handler.hpp"

#include <pvfs/cli.hpp>
#include <pvfs/gossip.hpp>
#include <pvfs/unique_fd.hpp>

#include <fcntl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace gossip = pvfs::gossip;
using pvfs::UniqueFd;

struct Settings {
    std::vector<std::string> positional;
    std::vector<std::string> options; // each -o, comma-separated
    std::string config;
    std::string key_file;
    std::string log_file;
    std::string debug;
    std::string pid_file;
    bool foreground = false;
    std::string metrics_file;
    std::string metrics_interval;
    unsigned slots = 16;
    unsigned slot_size = 1U << 20U;
};

// What the -o options say, sorted by who takes them.
struct Mount {
    std::string source;
    std::string mountpoint;
    pvfs::fuse::FuseSettings fuse;
    std::string fuse_options; // for libfuse (fuse_session_new, the mount)
};

bool parse_seconds(std::string_view text, std::chrono::milliseconds &out)
{
    unsigned n = 0;
    const auto *end = text.data() + text.size();
    const auto [p, ec] = std::from_chars(text.data(), end, n);
    if (ec != std::errc{} || p != end || n > 86400)
        return false;
    out = std::chrono::seconds(n);
    return true;
}

// libfuse splits its options at commas: a source with one is escaped.
std::string fuse_escape(std::string_view s)
{
    std::string out;
    for (const char c : s) {
        if (c == ',' || c == '\\')
            out.push_back('\\');
        out.push_back(c);
    }
    return out;
}

// Moves "-o OPTS" and "-oOPTS" out of argv into `options`; the rest, for
// the parser.  A trailing -o stays, for the parser to refuse.
std::vector<const char *> take_mount_options(int argc, char **argv,
                                             std::vector<std::string> &options)
{
    std::vector<const char *> rest;
    const std::span<char *> args(argv, static_cast<std::size_t>(argc));
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string_view a = args[i];
        if (a == "-o" && i + 1 < args.size()) {
            options.emplace_back(args[++i]);
        } else if (a.starts_with("-o") && a.size() > 2) {
            options.emplace_back(a.substr(2));
        } else {
            rest.push_back(args[i]);
        }
    }
    return rest;
}

// Whether argv[0] is the mount(8) helper's name.
bool called_as_mount_helper(const char *argv0)
{
    const std::string_view name = argv0;
    const std::size_t slash = name.rfind('/');
    return name.substr(slash == std::string_view::npos ? 0 : slash + 1) == "mount.fuse.pvfs";
}

// mount(8)'s helper arguments turned into pvfs-fuse's: -n, -s and -v mean
// nothing here (no mtab; pvfs-fuse is never sloppy; it says enough), -r and
// -w become -o ro / -o rw, -t must name this type, and -f (fake) sets
// `fake`.  nullopt after printing why.
std::optional<std::vector<std::string>> helper_arguments(int argc, char **argv, bool &fake)
{
    std::vector<std::string> out;
    const std::span<char *> args(argv, static_cast<std::size_t>(argc));
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string_view a = args[i];
        if (i == 0 || a == "-o" || !a.starts_with('-') || a.size() < 2) {
            out.emplace_back(a);
            if (a == "-o" && i + 1 < args.size())
                out.emplace_back(args[++i]);
            continue;
        }
        if (a.starts_with("-o")) {
            out.emplace_back(a);
            continue;
        }
        if (a.starts_with("-t")) {
            std::string_view type = a.substr(2);
            if (type.empty() && i + 1 < args.size())
                type = args[++i];
            if (type != "fuse.pvfs" && type != "pvfs") {
                std::fprintf(stderr, "mount.fuse.pvfs: -t %s: this helper mounts fuse.pvfs\n",
                             std::string(type).c_str());
                return std::nullopt;
            }
            continue;
        }
        for (const char flag : a.substr(1)) {
            switch (flag) {
            case 'n':
            case 's':
            case 'v':
                break;
            case 'f':
                fake = true;
                break;
            case 'r':
            case 'w':
                out.emplace_back("-o");
                out.emplace_back(flag == 'r' ? "ro" : "rw");
                break;
            default:
                std::fprintf(stderr, "mount.fuse.pvfs: unknown flag -%c (see pvfs-fuse(8))\n",
                             flag);
                return std::nullopt;
            }
        }
    }
    return out;
}

// Options for mount(8) and systemd, not for the mount: fstab's.
bool mount_command_option(std::string_view opt, std::string_view key)
{
    static constexpr std::array<std::string_view, 9> names = {
        "_netdev", "nofail", "auto", "noauto", "user", "users", "nouser", "defaults", "owner"};
    return std::find(names.begin(), names.end(), opt) != names.end() || opt.starts_with("x-") ||
           key == "comment";
}

// Sorts the -o options: those of the Handler's ATTACH (as pvfs.ko passes
// them), the cache timeouts (pvfs.ko's names), the rest for libfuse.
// nullopt after printing why.
std::optional<Mount> sort_options(const Settings &s)
{
    Mount m;
    const bool by_config = !s.config.empty();
    if (s.positional.size() != (by_config ? 1U : 2U)) {
        std::fprintf(stderr, "pvfs-fuse: give SOURCE MOUNTPOINT, or -c CONFIG MOUNTPOINT\n");
        return std::nullopt;
    }
    std::error_code ec;
    m.source = by_config ? std::filesystem::absolute(s.config, ec).string() : s.positional[0];
    m.mountpoint = std::filesystem::absolute(s.positional.back(), ec).string();
    // A config file is read after the daemon left its directory.
    if (!m.source.starts_with("tcp://") && !m.source.starts_with("ib://"))
        m.source = std::filesystem::absolute(m.source, ec).string();
    if (m.source.size() > PVFSD_MAX_SOURCE) {
        std::fprintf(stderr, "pvfs-fuse: the source is longer than %u bytes\n", PVFSD_MAX_SOURCE);
        return std::nullopt;
    }
    std::string attach;
    // Half the slots may hold writes answered already (the other half
    // serve reads and the writes beyond): docs/plan/fuse.md "Write-behind".
    std::size_t write_behind = s.slots / 2;
    // default_permissions: the kernel checks the mode bits against the
    // attributes before it asks, as pvfs.ko's permission op does
    // (generic_permission on attributes fetched again once stale); the
    // servers check again with the caller's ids and groups.
    std::string fuse_opts = "default_permissions,subtype=pvfs,fsname=" + fuse_escape(m.source) +
                            ",max_read=" + std::to_string(s.slot_size);
    // A root mount is every user's, as a pvfs.ko mount is (the kernel
    // checks permissions: default_permissions).  A user's is their own
    // unless /etc/fuse.conf says user_allow_other and they ask.
    if (::geteuid() == 0)
        fuse_opts += ",allow_other";
    for (const std::string &group : s.options) {
        std::string_view rest = group;
        while (!rest.empty()) {
            const std::size_t comma = rest.find(',');
            const std::string_view opt = rest.substr(0, comma);
            rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
            const std::size_t eq = opt.find('=');
            const std::string_view key = opt.substr(0, eq);
            const std::string_view value =
                eq == std::string_view::npos ? std::string_view{} : opt.substr(eq + 1);
            std::chrono::milliseconds t{};
            if (opt.empty() || opt == "rw" || mount_command_option(opt, key))
                continue;
            if (opt == "hard" || opt == "soft" || opt == "softerr" || key == "timeo" ||
                key == "retrans" || key == "key") {
                if (key == "key" && !value.starts_with('/')) {
                    std::fprintf(stderr, "pvfs-fuse: key=%s: not an absolute path\n",
                                 std::string(value).c_str());
                    return std::nullopt;
                }
                attach += (attach.empty() ? "" : ",") + std::string(opt);
            } else if (key == "write_behind" || opt == "nowrite_behind") {
                unsigned n = 0;
                const auto [end, parse_error] =
                    std::from_chars(value.data(), value.data() + value.size(), n);
                if (opt != "nowrite_behind" &&
                    (value.empty() || parse_error != std::errc{} ||
                     end != value.data() + value.size() || n > s.slots)) {
                    std::fprintf(stderr,
                                 "pvfs-fuse: %s: write_behind takes a number of writes, 0 to "
                                 "the %u slots\n",
                                 std::string(opt).c_str(), s.slots);
                    return std::nullopt;
                }
                write_behind = opt == "nowrite_behind" ? 0 : n;
            } else if (opt == "nordirplus" || opt == "rdirplus") {
                m.fuse.readdirplus = opt == "rdirplus";
            } else if (opt == "noac") {
                m.fuse.attr_timeout_file = m.fuse.attr_timeout_dir = m.fuse.entry_timeout = {};
            } else if ((key == "acregmin" || key == "acdirmin" || key == "actimeo") &&
                       parse_seconds(value, t)) {
                if (key != "acdirmin")
                    m.fuse.attr_timeout_file = t;
                if (key != "acregmin")
                    m.fuse.attr_timeout_dir = m.fuse.entry_timeout = t;
            } else if ((key == "acregmax" || key == "acdirmax") && parse_seconds(value, t)) {
                // FUSE's timeouts are fixed, not adaptive: only the minimum counts.
            } else {
                fuse_opts += "," + std::string(opt);
            }
        }
    }
    if (attach.size() > PVFSD_MAX_SOURCE) {
        std::fprintf(stderr, "pvfs-fuse: the options are longer than %u bytes\n", PVFSD_MAX_SOURCE);
        return std::nullopt;
    }
    m.fuse.source = m.source;
    m.fuse.attach_options = attach;
    m.fuse.slots = s.slots;
    m.fuse.slot_size = s.slot_size;
    m.fuse.write_behind = write_behind;
    m.fuse_options = fuse_opts;
    return m;
}

// Without -f: the parent waits for the child to say how the mount went
// (one byte, its exit status) and exits with it, so that the command
// returns when the file system is there.
class Background {
public:
    // In the child: true.  The parent never returns (it exits).
    bool start()
    {
        int fds[2] = {-1, -1};
        if (::pipe2(fds, O_CLOEXEC) != 0)
            return false;
        UniqueFd read_end(fds[0]);
        UniqueFd write_end(fds[1]);
        const pid_t pid = ::fork();
        if (pid < 0)
            return false;
        if (pid > 0) {
            write_end.reset();
            unsigned char status = 1;
            while (::read(read_end.get(), &status, 1) < 0 && errno == EINTR) {
            }
            // EOF without a byte: the child died before mounting.
            ::_exit(status);
        }
        ::setsid();
        pipe_ = std::move(write_end);
        return true;
    }
    // The mount is there (0) or failed: the parent exits with it, and the
    // child's stdio goes to /dev/null (its log went elsewhere already).
    void done(unsigned char status)
    {
        if (!pipe_.valid())
            return;
        // A parent gone already has nobody to tell (EPIPE): serve anyway.
        if (::write(pipe_.get(), &status, 1) != 1)
            gossip::warning("cannot tell the parent the mount's status: {}",
                            strerrordesc_np(errno));
        pipe_.reset();
        const UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
        if (null.valid()) {
            ::dup2(null.get(), 0);
            ::dup2(null.get(), 1);
            ::dup2(null.get(), 2);
        }
        // "/" always exists; a failure would keep the old directory busy.
        if (::chdir("/") != 0)
            gossip::warning("chdir /: {}", strerrordesc_np(errno));
    }

private:
    UniqueFd pipe_;
};

int run(const Settings &s, const Mount &m, Background &bg)
{
    sigset_t stop;
    ::sigemptyset(&stop);
    ::sigaddset(&stop, SIGTERM);
    ::sigaddset(&stop, SIGINT);
    ::sigaddset(&stop, SIGHUP);
    ::sigaddset(&stop, SIGUSR1); // a status line in the log
    // Before any thread exists: the signals wait for the signalfd.
    ::sigprocmask(SIG_BLOCK, &stop, nullptr); // NOLINT(concurrency-mt-unsafe)
    const UniqueFd sig(::signalfd(-1, &stop, SFD_NONBLOCK | SFD_CLOEXEC));

    std::string error;
    const auto loop = pvfs::client::Loop::create(error);
    if (!loop) {
        std::fprintf(stderr, "pvfs-fuse: %s\n", error.c_str());
        return 1;
    }
    pvfs::fuse::FuseChannel channel(m.fuse);
    // Over ib the servers move data by RDMA of the slots.
    loop->register_memory(channel.slots());
    const std::unique_ptr<pvfs::pvfsd::DaemonMetrics> metrics =
        pvfs::pvfsd::DaemonMetrics::from_options("pvfs-fuse", s.metrics_file, s.metrics_interval,
                                                 error);
    if (!error.empty()) {
        std::fprintf(stderr, "pvfs-fuse: %s\n", error.c_str());
        return 1;
    }
    pvfs::pvfsd::HandlerOptions ho;
    ho.key_file = s.key_file;
    ho.metrics = metrics.get();
    pvfs::pvfsd::Handler handler(ho, loop, channel);
    if (channel.attach(handler, *loop, error) != 0) {
        std::fprintf(stderr, "pvfs-fuse: %s\n", error.c_str());
        return 1;
    }
    if (!channel.mount({"pvfs-fuse", "-o", m.fuse_options}, m.mountpoint, error)) {
        std::fprintf(stderr, "pvfs-fuse: %s\n", error.c_str());
        return 1;
    }
    gossip::info(gossip::Mask::pvfsd, "{} mounted on {}", m.source, m.mountpoint);
    if (!s.pid_file.empty()) {
        std::ofstream f(s.pid_file, std::ios::trunc);
        f << ::getpid() << '\n';
        if (!f) {
            std::fprintf(stderr, "pvfs-fuse: cannot write %s\n", s.pid_file.c_str());
            return 1;
        }
    }
    if (!s.foreground && s.log_file.empty())
        gossip::log_to_syslog("pvfs-fuse");
    bg.done(0);
    pvfs::pvfsd::ServeOptions so;
    so.signal_fd = sig.get();
    so.on_signal = [&](int signo) {
        const bool stopping = signo != SIGUSR1;
        gossip::info(
            gossip::Mask::pvfsd, "{}{} ops in flight (at most {} at once), {} cancelled; {}",
            stopping ? fmt::format("signal {}: unmounting with ", signo) : "", handler.in_flight(),
            handler.peak_in_flight(), handler.cancels(), channel.status());
        return stopping;
    };
    return pvfs::pvfsd::serve(channel, handler, *loop, so);
}

int run_main(int argc, char **argv)
{
    // As mount(8)'s helper, its arguments are translated first; a fake
    // mount checks them and stops before mounting.
    bool fake = false;
    std::vector<std::string> helper_args;
    std::vector<char *> helper_argv;
    if (called_as_mount_helper(argv[0])) {
        auto translated = helper_arguments(argc, argv, fake);
        if (!translated)
            return 1;
        helper_args = std::move(*translated);
        for (std::string &a : helper_args)
            helper_argv.push_back(a.data());
        argc = static_cast<int>(helper_argv.size());
        argv = helper_argv.data();
    }
    Settings s;
    pvfs::cli::Parser app{
        "pvfs-fuse: mounts a pvfs file system through FUSE: pvfsd's client, fed by the "
        "kernel's FUSE requests"};
    app.option("args", s.positional,
               "SOURCE MOUNTPOINT: SOURCE is tcp://host:port/fsname or a cluster config file; "
               "with -c only MOUNTPOINT")
        .required();
    // -o is taken out of argv first (take_mount_options): as mount(8)'s,
    // it may come anywhere and many times.  Here for --help only.
    std::string help_only;
    app.option("-o", help_only,
               "mount options: hard, soft, softerr, timeo=T, retrans=N, key=FILE (as pvfs.ko's), "
               "acregmin=, acdirmin=, actimeo=, noac, nordirplus, write_behind=N, nowrite_behind; "
               "the others go to FUSE (ro, "
               "allow_other, ...)");
    app.option("-c,--config", s.config, "the cluster config file instead of SOURCE");
    app.option("--key-file", s.key_file,
               "the key: a client key or the cluster key (default: the config's, "
               "$PVFS_KEY_FILE, else /etc/pvfs/pvfs.key)");
    app.flag("-f,--foreground", s.foreground,
             "stay in the foreground (logs to stderr); else return once mounted");
    app.option("--log", s.log_file,
               "log to this file (default: stderr until mounted, then "
               "syslog; stderr in the foreground)");
    app.option("--debug", s.debug, "debug masks, e.g. pvfsd,dev,client (default: $PVFS_DEBUG)");
    app.option("--pid-file", s.pid_file, "write the serving process's pid here once mounted");
    app.option("--metrics-file", s.metrics_file,
               "write metrics in the Prometheus text format to this file (default: none)");
    app.option("--metrics-interval", s.metrics_interval,
               "rewrite the metrics file this often, e.g. 10s or 500ms (default: 10s)");
    app.option("--slots", s.slots, "data buffers, one per READ or WRITE in flight")
        .show_default()
        .range(1U, PVFSD_SLOTS_MAX);
    app.option("--slot-size", s.slot_size,
               "bytes per data buffer (FUSE reads and writes are at most 1 MiB, libfuse 3.14's "
               "max_write)")
        .show_default()
        .range(1U << 20U, PVFSD_SLOT_SIZE_MAX);
    const std::vector<const char *> rest = take_mount_options(argc, argv, s.options);
    if (const std::optional<int> status = app.parse(static_cast<int>(rest.size()), rest.data()))
        return *status;
    const auto m = sort_options(s);
    if (!m)
        return 2;
    if (fake)
        return 0;
    if (!s.key_file.empty())
        s.key_file = std::filesystem::absolute(s.key_file).string();

    const auto configured =
        s.debug.empty() ? gossip::configure_from_env() : gossip::configure(s.debug);
    if (!configured.ok()) {
        std::fprintf(stderr, "pvfs-fuse: %s\n", configured.error.c_str());
        return 2;
    }
    gossip::set_verbose(true);
    if (!s.log_file.empty()) {
        if (const auto st = gossip::log_to_file(s.log_file); !st.ok()) {
            std::fprintf(stderr, "pvfs-fuse: %s\n", st.error.c_str());
            return 1;
        }
    }
    Background bg;
    if (!s.foreground && !bg.start()) {
        std::fprintf(stderr, "pvfs-fuse: cannot go to the background: %s\n",
                     strerrordesc_np(errno));
        return 1;
    }
    const int rc = run(s, *m, bg);
    bg.done(static_cast<unsigned char>(rc == 0 ? 1 : rc)); // failed before mounting
    gossip::flush();
    return rc;
}

} // namespace

int main(int argc, char **argv)
{
    try {
        return run_main(argc, argv);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "pvfs-fuse: %s\n", e.what());
        return 1;
    }
}
