// mount.pvfs: the helper mount(8) runs for `mount -t pvfs SOURCE DIR`.
//
// What it adds to a plain mount(2): a pvfs mount is nosuid and nodev unless
// -o allow_suid / -o devices asks otherwise (a network file system's setuid
// files and device nodes are whatever any client with the cluster key
// wrote; mount(8) never passes a helper "suid" or "dev", its defaults), and the
// kernel's own reason when a mount fails ("bad source ...", "no pvfsd
// attached ...") instead of a bare errno.  New mounts go through the mount
// API (fsopen, fsconfig, fsmount, move_mount), which carries those
// messages; a remount through mount(2).  When the kernel refuses a mount
// for want of a pvfsd, it starts one (systemctl, else the binary itself)
// and tries again, unless -o nopvfsd_start.
//
//   mount.pvfs SOURCE DIR [-fnsvrw] [-o OPTIONS] [-t pvfs]
//
// Exit status as mount(8)'s: 0, 1 bad usage or permissions, 32 the mount
// failed.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pvfs/unique_fd.hpp"

using pvfs::UniqueFd;

namespace {

constexpr int exit_ok = 0;
constexpr int exit_usage = 1;
constexpr int exit_mount = 32;
// A mount(2) data string is one page; the same bound for all the options.
constexpr std::size_t max_options = 4096;
// How long a pvfsd started on demand has to attach to /dev/pvfsd, and how
// often the mount is tried meanwhile.
constexpr auto pvfsd_wait = std::chrono::seconds(10);
constexpr auto pvfsd_poll = std::chrono::milliseconds(100);
// Where pvfsd started by hand (no systemd) logs, unless syslog listens, and
// its pid file.
constexpr const char *pvfsd_log = "/var/log/pvfsd.log";
constexpr const char *pvfsd_pid_file = "/run/pvfsd.pid";

void usage()
{
    std::fputs("usage: mount.pvfs SOURCE DIR [-fnsvrw] [-o OPTIONS] [-t pvfs]\n"
               "  SOURCE   tcp://host:port/fsname or ib://host:port/fsname\n"
               "  -o       comma-separated options: the generic ones of mount(8) and pvfs's\n"
               "           (docs/mount.md); nosuid and nodev unless allow_suid / devices\n"
               "           (or suid / dev, which mount(8) does not pass on) is given;\n"
               "           key=FILE: this mount's client key file; nopvfsd_start: fail\n"
               "           rather than start pvfsd when none runs\n"
               "  -f       check the options and print the mount, but do not mount\n"
               "  -v       print the mount before doing it\n"
               "  -r, -w   read-only, read-write\n",
               stderr);
}

// What the options say, split into the mount's attributes, the superblock's
// generic flags and pvfs's own options (passed to the kernel as given).
struct Request {
    bool remount = false;
    bool read_only = false;
    bool nosuid = true;
    bool nodev = true;
    bool noexec = false;
    bool sync = false;
    bool dirsync = false;
    bool lazytime = false;
    bool nodiratime = false;
    std::uint64_t atime = MOUNT_ATTR_RELATIME; // or NOATIME, STRICTATIME
    std::vector<std::string> fs_options;       // "key" or "key=value"
    bool start_pvfsd = true;                   // when the kernel finds none
};

struct Flag {
    std::string_view name;
    bool Request::*field;
    bool value;
};

constexpr std::array generic_flags{
    Flag{"ro", &Request::read_only, true},
    Flag{"rw", &Request::read_only, false},
    Flag{"nosuid", &Request::nosuid, true},
    Flag{"suid", &Request::nosuid, false},
    Flag{"nodev", &Request::nodev, true},
    Flag{"dev", &Request::nodev, false},
    Flag{"noexec", &Request::noexec, true},
    Flag{"exec", &Request::noexec, false},
    Flag{"sync", &Request::sync, true},
    Flag{"async", &Request::sync, false},
    Flag{"dirsync", &Request::dirsync, true},
    Flag{"lazytime", &Request::lazytime, true},
    Flag{"nolazytime", &Request::lazytime, false},
    Flag{"nodiratime", &Request::nodiratime, true},
    Flag{"diratime", &Request::nodiratime, false},
};

struct Atime {
    std::string_view name;
    std::uint64_t attr;
};
constexpr std::array atimes{
    Atime{"noatime", MOUNT_ATTR_NOATIME},         Atime{"atime", MOUNT_ATTR_RELATIME},
    Atime{"relatime", MOUNT_ATTR_RELATIME},       Atime{"norelatime", MOUNT_ATTR_STRICTATIME},
    Atime{"strictatime", MOUNT_ATTR_STRICTATIME}, Atime{"nostrictatime", MOUNT_ATTR_RELATIME},
};

// fstab's and mount(8)'s own options, which mean nothing to the kernel.
constexpr std::array<std::string_view, 8> userspace_only{"defaults", "auto",   "noauto", "nofail",
                                                         "_netdev",  "silent", "loud",   "nouser"};
// Mounts by an ordinary user through fstab: not for a file system whose
// setuid files and device nodes any client may have written.
constexpr std::array<std::string_view, 4> user_mounts{"user", "users", "owner", "group"};
// What mount(8) does by itself, never through a helper.
constexpr std::array<std::string_view, 10> not_ours{
    "bind",    "rbind",    "move",  "shared",     "rshared",
    "private", "rprivate", "slave", "unbindable", "runbindable"};

template <typename List> bool in(const List &list, std::string_view word)
{
    return std::ranges::find(list, word) != list.end();
}

// Adds one option; nullopt when it is fine, else why it is refused.
std::optional<std::string> add_option(Request &r, std::string_view opt)
{
    const std::string_view key = opt.substr(0, opt.find('='));
    if (opt.empty() || in(userspace_only, opt) || key == "comment" || opt.starts_with("x-"))
        return std::nullopt;
    if (in(user_mounts, key))
        return "user mounts (" + std::string(key) + ") are not supported: mount as root";
    if (in(not_ours, opt) || opt.starts_with("make-"))
        return std::string(opt) + " is mount(8)'s own operation, not a pvfs option";
    if (opt == "remount") {
        r.remount = true;
        return std::nullopt;
    }
    for (const Flag &f : generic_flags) {
        if (f.name == opt) {
            r.*f.field = f.value;
            return std::nullopt;
        }
    }
    for (const Atime &a : atimes) {
        if (a.name == opt) {
            r.atime = a.attr;
            return std::nullopt;
        }
    }
    // mount(8) passes a helper only the flags that differ from its
    // defaults, so "suid" and "dev" never reach us through it: pvfs's own
    // words ask for them.  "devices" is also the kernel's option (device
    // nodes may be opened even on a mount(2) without nodev), added below
    // whenever nodev is off.
    if (opt == "allow_suid") {
        r.nosuid = false;
        return std::nullopt;
    }
    if (opt == "devices" || opt == "nodevices") {
        r.nodev = opt == "nodevices";
        return std::nullopt;
    }
    if (opt == "nopvfsd_start" || opt == "pvfsd_start") {
        r.start_pvfsd = opt == "pvfsd_start";
        return std::nullopt;
    }
    r.fs_options.emplace_back(opt);
    return std::nullopt;
}

std::optional<std::string> parse_options(Request &r, std::string_view text)
{
    if (text.size() > max_options)
        return "the options are longer than " + std::to_string(max_options) + " bytes";
    while (!text.empty()) {
        const std::size_t comma = text.find(',');
        if (auto why = add_option(r, text.substr(0, comma)))
            return why;
        text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    }
    return std::nullopt;
}

std::uint64_t mount_attr(const Request &r)
{
    std::uint64_t attr = r.atime;
    attr |= r.read_only ? MOUNT_ATTR_RDONLY : 0;
    attr |= r.nosuid ? MOUNT_ATTR_NOSUID : 0;
    attr |= r.nodev ? MOUNT_ATTR_NODEV : 0;
    attr |= r.noexec ? MOUNT_ATTR_NOEXEC : 0;
    attr |= r.nodiratime ? MOUNT_ATTR_NODIRATIME : 0;
    return attr;
}

// pvfs's own options for the kernel, with devices when device nodes are
// asked for.
std::vector<std::string> kernel_option_list(const Request &r)
{
    std::vector<std::string> out = r.fs_options;
    if (!r.nodev)
        out.emplace_back("devices");
    return out;
}

// The same as mount(2) data.
std::string kernel_options(const Request &r)
{
    std::string out;
    for (const std::string &o : kernel_option_list(r))
        out += (out.empty() ? "" : ",") + o;
    return out;
}

std::string describe(const Request &r)
{
    std::string out = r.read_only ? "ro" : "rw";
    out += r.nosuid ? ",nosuid" : ",suid";
    out += r.nodev ? ",nodev" : ",dev";
    out += r.noexec ? ",noexec" : "";
    out += r.sync ? ",sync" : "";
    out += r.dirsync ? ",dirsync" : "";
    out += r.lazytime ? ",lazytime" : "";
    out += r.nodiratime ? ",nodiratime" : "";
    out += r.atime == MOUNT_ATTR_NOATIME       ? ",noatime"
           : r.atime == MOUNT_ATTR_STRICTATIME ? ",strictatime"
                                               : ",relatime";
    out += r.start_pvfsd ? "" : ",nopvfsd_start";
    const std::string k = kernel_options(r);
    return k.empty() ? out : out + "," + k;
}

// The kernel's messages about an fsconfig or fsmount that failed ("e ...",
// "w ...", "i ..." lines), printed in place of a bare errno when there are any.
bool print_kernel_messages(int fs_fd)
{
    bool any = false;
    std::array<char, 1024> buf{};
    // The queue holds a few messages; each read returns one.
    for (int i = 0; i < 16; ++i) {
        const ssize_t n = ::read(fs_fd, buf.data(), buf.size() - 1);
        if (n <= 0)
            break;
        std::string_view m(buf.data(), static_cast<std::size_t>(n));
        if (m.size() > 2 && m[1] == ' ')
            m.remove_prefix(2);
        std::fprintf(stderr, "mount.pvfs: %.*s\n", static_cast<int>(m.size()), m.data());
        any = true;
    }
    return any;
}

const char *error_text(int err)
{
    const char *text = ::strerrordesc_np(err);
    return text != nullptr ? text : "unknown error";
}

int fail(int fs_fd, const char *what, const char *source, const char *dir, int err)
{
    // The errno too unless the kernel's words were about a bad argument:
    // pvfsd's refusals (a key file's EACCES, ENOENT) read better with it.
    const bool said = fs_fd >= 0 && print_kernel_messages(fs_fd);
    if (!said || err != EINVAL)
        std::fprintf(stderr, "mount.pvfs: %s %s on %s: %s\n", what, source, dir, error_text(err));
    if (err == ENODEV)
        std::fputs("mount.pvfs: is pvfs.ko loaded? (modprobe pvfs)\n", stderr);
    return exit_mount;
}

// Empties the kernel's message queue of a mount that is tried again.
void drop_kernel_messages(int fs_fd)
{
    std::array<char, 1024> buf{};
    for (int i = 0; i < 16 && ::read(fs_fd, buf.data(), buf.size()) > 0; ++i) {
    }
}

// One try at a new mount.  With `no_daemon`, a refusal for want of a pvfsd
// (ENOTCONN) is not printed but said there, for the caller to start one.
int mount_new(const Request &r, const char *source, const char *dir, bool *no_daemon = nullptr)
{
    const UniqueFd fs(::fsopen("pvfs", FSOPEN_CLOEXEC));
    if (!fs.valid())
        return fail(-1, "mounting", source, dir, errno);
    auto set = [&fs](const std::string &opt) {
        const std::size_t eq = opt.find('=');
        if (eq == std::string::npos)
            return ::fsconfig(fs.get(), FSCONFIG_SET_FLAG, opt.c_str(), nullptr, 0);
        const std::string key = opt.substr(0, eq);
        return ::fsconfig(fs.get(), FSCONFIG_SET_STRING, key.c_str(), opt.c_str() + eq + 1, 0);
    };
    std::vector<std::string> all = kernel_option_list(r);
    all.insert(all.begin(), "source=" + std::string(source));
    for (const auto &[on, name] :
         {std::pair{r.read_only, "ro"}, std::pair{r.sync, "sync"}, std::pair{r.dirsync, "dirsync"},
          std::pair{r.lazytime, "lazytime"}}) {
        if (on)
            all.emplace_back(name);
    }
    for (const std::string &opt : all) {
        if (set(opt) != 0)
            return fail(fs.get(), ("option " + opt + ": mounting").c_str(), source, dir, errno);
    }
    if (::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
        if (errno == ENOTCONN && no_daemon != nullptr) {
            drop_kernel_messages(fs.get());
            *no_daemon = true;
            return exit_mount;
        }
        return fail(fs.get(), "mounting", source, dir, errno);
    }
    const UniqueFd mnt(::fsmount(fs.get(), FSMOUNT_CLOEXEC, mount_attr(r)));
    if (!mnt.valid())
        return fail(fs.get(), "mounting", source, dir, errno);
    if (::move_mount(mnt.get(), "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) != 0)
        return fail(-1, "attaching", source, dir, errno);
    return exit_ok;
}

// ---- pvfsd on demand ----

using Clock = std::chrono::steady_clock;

// The pvfsd to start without systemd: $PVFS_PVFSD (a build tree's, for the
// tests), else where the install put it.
std::string pvfsd_binary()
{
    const char *env = std::getenv("PVFS_PVFSD"); // NOLINT(concurrency-mt-unsafe)
    return env != nullptr && *env != '\0' ? env : PVFS_PVFSD_PATH;
}

// Runs `argv` with stdin on /dev/null and waits for it until `deadline`:
// its exit status, or -1 (and why in `error`) when it could not run, died
// of a signal or was still running then (it is left to finish).
int run_until(const std::vector<std::string> &argv, Clock::time_point deadline, std::string &error)
{
    std::vector<char *> args;
    args.reserve(argv.size() + 1);
    for (const std::string &a : argv) {
        // execv's type; it does not write them
        // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast)
        args.push_back(const_cast<char *>(a.c_str()));
    }
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
        error = std::string("fork: ") + error_text(errno);
        return -1;
    }
    if (pid == 0) {
        const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null >= 0)
            ::dup2(null, 0);
        ::execv(args[0], args.data());
        std::fprintf(stderr, "mount.pvfs: cannot run %s: %s\n", args[0], error_text(errno));
        ::_exit(127);
    }
    for (;;) {
        int status = 0;
        const pid_t done = ::waitpid(pid, &status, WNOHANG);
        if (done == pid) {
            if (WIFEXITED(status))
                return WEXITSTATUS(status);
            error = argv[0] + " died of signal " + std::to_string(WTERMSIG(status));
            return -1;
        }
        if (done < 0 && errno != EINTR) {
            error = std::string("waitpid: ") + error_text(errno);
            return -1;
        }
        if (Clock::now() >= deadline) {
            error = argv[0] + " did not finish in time";
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

bool is_socket(const char *path)
{
    struct stat st {};
    return ::stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

// Whether the pid in pvfsd's pid file is alive; true when there is no pid
// file yet (it may not have written it).
bool pvfsd_alive()
{
    std::ifstream f(pvfsd_pid_file);
    pid_t pid = 0;
    if (!(f >> pid) || pid <= 0)
        return true;
    return ::kill(pid, 0) == 0 || errno == EPERM;
}

// Starts pvfsd: through systemd when it is the init system, else by
// running the daemon.  Says on stderr what it did; false when it failed
// (and why).  `watch_pid`: whether pvfsd_alive tells anything.
bool start_pvfsd(Clock::time_point deadline, bool &watch_pid, std::string &where_logs)
{
    std::string error;
    if (::access("/run/systemd/system", F_OK) == 0) {
        // --no-block: the wait is ours, bounded below; a unit that does
        // not exist is still refused at once.
        const char *systemctl =
            ::access("/usr/bin/systemctl", X_OK) == 0 ? "/usr/bin/systemctl" : "/bin/systemctl";
        const std::vector<std::string> argv{systemctl, "--no-block", "start", "pvfsd.service"};
        std::fputs("mount.pvfs: no pvfsd attached to /dev/pvfsd; starting it: systemctl start "
                   "pvfsd.service\n",
                   stderr);
        const int status = run_until(argv, deadline, error);
        if (status != 0) {
            std::fprintf(stderr, "mount.pvfs: systemctl start pvfsd.service failed: %s\n",
                         status < 0 ? error.c_str() : ("exit " + std::to_string(status)).c_str());
            return false;
        }
        watch_pid = false;
        where_logs = "journalctl -u pvfsd";
        return true;
    }
    std::vector<std::string> argv{pvfsd_binary(), "--pid-file", pvfsd_pid_file};
    // Syslog when a daemon listens for it; else a file.
    if (is_socket("/dev/log")) {
        where_logs = "syslog";
    } else {
        argv.insert(argv.end(), {"--log", pvfsd_log});
        where_logs = pvfsd_log;
    }
    std::string line;
    for (const std::string &a : argv)
        line += (line.empty() ? "" : " ") + a;
    std::fprintf(stderr, "mount.pvfs: no pvfsd attached to /dev/pvfsd; starting it: %s\n",
                 line.c_str());
    ::unlink(pvfsd_pid_file); // a stale one would name another process
    // pvfsd forks into the background at once: its first process exits 0.
    const int status = run_until(argv, deadline, error);
    if (status != 0) {
        std::fprintf(stderr, "mount.pvfs: %s failed: %s\n", argv[0].c_str(),
                     status < 0 ? error.c_str() : ("exit " + std::to_string(status)).c_str());
        return false;
    }
    watch_pid = true;
    return true;
}

// A new mount; when no pvfsd runs, starts one and tries again every
// pvfsd_poll until it attached or pvfsd_wait passed, then once more with
// the kernel's reason printed.
int mount_starting_pvfsd(const Request &r, const char *source, const char *dir)
{
    bool no_daemon = false;
    const int rc = mount_new(r, source, dir, r.start_pvfsd ? &no_daemon : nullptr);
    if (!no_daemon)
        return rc;
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = start + pvfsd_wait;
    bool watch_pid = false;
    std::string where_logs;
    if (!start_pvfsd(deadline, watch_pid, where_logs))
        return mount_new(r, source, dir);
    while (Clock::now() < deadline) {
        no_daemon = false;
        const int again = mount_new(r, source, dir, &no_daemon);
        if (!no_daemon)
            return again;
        if (watch_pid && !pvfsd_alive()) {
            std::fprintf(stderr, "mount.pvfs: pvfsd exited; its log: %s\n", where_logs.c_str());
            return mount_new(r, source, dir);
        }
        std::this_thread::sleep_for(pvfsd_poll);
    }
    std::fprintf(stderr,
                 "mount.pvfs: pvfsd did not attach to /dev/pvfsd within %lld s; its log: %s\n",
                 static_cast<long long>(pvfsd_wait.count()), where_logs.c_str());
    return mount_new(r, source, dir);
}

int remount(const Request &r, const char *source, const char *dir)
{
    unsigned long flags = MS_REMOUNT;
    flags |= r.read_only ? MS_RDONLY : 0;
    flags |= r.nosuid ? MS_NOSUID : 0;
    flags |= r.nodev ? MS_NODEV : 0;
    flags |= r.noexec ? MS_NOEXEC : 0;
    flags |= r.sync ? MS_SYNCHRONOUS : 0;
    flags |= r.dirsync ? MS_DIRSYNC : 0;
    flags |= r.lazytime ? MS_LAZYTIME : 0;
    flags |= r.nodiratime ? MS_NODIRATIME : 0;
    flags |= r.atime == MOUNT_ATTR_NOATIME       ? MS_NOATIME
             : r.atime == MOUNT_ATTR_STRICTATIME ? MS_STRICTATIME
                                                 : MS_RELATIME;
    const std::string data = kernel_options(r);
    if (::mount(source, dir, "pvfs", flags, data.c_str()) != 0)
        return fail(-1, "remounting", source, dir, errno);
    return exit_ok;
}

int run(int argc, char **argv)
{
    std::vector<const char *> positional;
    std::string options;
    bool fake = false;
    bool verbose = false;
    bool read_only = false;
    bool read_write = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "-h" || a == "--help") {
            usage();
            return exit_ok;
        }
        if (a == "-o" || a == "-t" || a == "-N") {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "mount.pvfs: %s needs a value\n", argv[i]);
                return exit_usage;
            }
            const std::string_view value = argv[++i];
            if (a == "-o") {
                if (!options.empty())
                    options += ',';
                options += value;
            } else if (a == "-t" && value != "pvfs") {
                std::fprintf(stderr, "mount.pvfs: -t %s: this helper mounts only pvfs\n", argv[i]);
                return exit_usage;
            } else if (a == "-N") {
                std::fputs("mount.pvfs: -N (another mount namespace) is not supported\n", stderr);
                return exit_usage;
            }
            continue;
        }
        if (a.size() > 1 && a[0] == '-') {
            for (const char c : a.substr(1)) {
                switch (c) {
                case 'f':
                    fake = true;
                    break;
                case 'v':
                    verbose = true;
                    break;
                case 'r':
                    read_only = true;
                    break;
                case 'w':
                    read_write = true;
                    break;
                case 'n': // no /etc/mtab to write: it is /proc/self/mounts
                case 's': // sloppy: every pvfs option is the kernel's to judge
                    break;
                default:
                    std::fprintf(stderr, "mount.pvfs: unknown flag -%c\n", c);
                    usage();
                    return exit_usage;
                }
            }
            continue;
        }
        positional.push_back(argv[i]);
    }
    if (positional.size() != 2) {
        usage();
        return exit_usage;
    }
    Request r;
    if (auto why = parse_options(r, options)) {
        std::fprintf(stderr, "mount.pvfs: %s\n", why->c_str());
        return exit_usage;
    }
    r.read_only = read_only || (r.read_only && !read_write);
    const char *source = positional[0];
    const char *dir = positional[1];
    if (verbose || fake) {
        std::printf("mount.pvfs: %s %s on %s (%s)\n", r.remount ? "remount" : "mount", source, dir,
                    describe(r).c_str());
    }
    if (fake)
        return exit_ok;
    if (::geteuid() != 0) {
        std::fputs("mount.pvfs: only root can mount pvfs\n", stderr);
        return exit_usage;
    }
    return r.remount ? remount(r, source, dir) : mount_starting_pvfsd(r, source, dir);
}

} // namespace

int main(int argc, char **argv)
{
    try {
        return run(argc, argv);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "mount.pvfs: %s\n", e.what());
    }
    return exit_mount;
}
