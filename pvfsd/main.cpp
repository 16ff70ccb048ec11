// pvfsd: the pvfs client daemon.  It holds /dev/pvfsd, maps the data slots
// the kernel shares with it, and answers every upcall of pvfs.ko with
// libpvfs operations on the servers (docs/pvfsd.md).
#include "channel.hpp"
#include "device.hpp"
#include "handler.hpp"

#include <pvfs/cli.hpp>
#include <pvfs/gossip.hpp>
#include <pvfs/unique_fd.hpp>

#include <fcntl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>

namespace {

namespace gossip = pvfs::gossip;
using pvfs::UniqueFd;

struct Settings {
    pvfs::pvfsd::DeviceSettings device;
    std::string key_file;
    std::string log_file;
    std::string debug;
    std::string pid_file;
    bool foreground = false;
    // Benchmarks only: what exactly-once costs, measured against this.
    bool no_exactly_once = false;
    std::string metrics_file;
    std::string metrics_interval;
};

int run(const Settings &s)
{
    const auto channel = pvfs::pvfsd::DeviceChannel::open(s.device);
    if (!channel)
        return 1;

    sigset_t stop;
    ::sigemptyset(&stop);
    ::sigaddset(&stop, SIGTERM);
    ::sigaddset(&stop, SIGINT);
    ::sigaddset(&stop, SIGUSR1); // a status line in the log
    // Before any thread exists: the signals wait for the signalfd.
    ::sigprocmask(SIG_BLOCK, &stop, nullptr); // NOLINT(concurrency-mt-unsafe)
    UniqueFd sig(::signalfd(-1, &stop, SFD_NONBLOCK | SFD_CLOEXEC));

    // One loop for the device, the signals and every mount's servers.
    std::string error;
    const auto loop = pvfs::client::Loop::create(error);
    if (!loop) {
        gossip::error(gossip::Mask::pvfsd, "{}", error);
        return 1;
    }
    // Registered once (over ib): the servers read and write these buffers
    // by RDMA, and no mount's I/O registers memory of its own.
    loop->register_memory(channel->slots());
    const std::unique_ptr<pvfs::pvfsd::DaemonMetrics> metrics =
        pvfs::pvfsd::DaemonMetrics::from_options("pvfsd", s.metrics_file, s.metrics_interval,
                                                 error);
    if (!error.empty()) {
        gossip::error(gossip::Mask::pvfsd, "{}", error);
        return 1;
    }
    pvfs::pvfsd::HandlerOptions ho;
    ho.key_file = s.key_file;
    ho.exactly_once = !s.no_exactly_once;
    ho.metrics = metrics.get();
    if (s.no_exactly_once)
        gossip::warning(gossip::Mask::pvfsd,
                        "--no-exactly-once (benchmarks only): a retried change may run twice, "
                        "and a file unlinked while open is destroyed at once");
    pvfs::pvfsd::Handler handler(ho, loop, *channel);
    pvfs::pvfsd::ServeOptions so;
    so.signal_fd = sig.get();
    so.on_signal = [&handler](int signo) {
        const bool stopping = signo != SIGUSR1;
        gossip::info(gossip::Mask::pvfsd,
                     "{}{} ops in flight (at most {} at once), {} cancelled, {} mounts{}",
                     stopping ? fmt::format("signal {}: stopping with ", signo) : "",
                     handler.in_flight(), handler.peak_in_flight(), handler.cancels(),
                     handler.mounts(),
                     stopping ? "; the kernel keeps pending requests for the next pvfsd" : "");
        return stopping;
    };
    return pvfs::pvfsd::serve(*channel, handler, *loop, so);
}

bool daemonize(const std::string &pid_file)
{
    const pid_t pid = ::fork();
    if (pid < 0)
        return false;
    if (pid > 0)
        ::_exit(0);
    ::setsid();
    if (::chdir("/") != 0)
        return false;
    UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
    if (null.valid()) {
        ::dup2(null.get(), 0);
        ::dup2(null.get(), 1);
        ::dup2(null.get(), 2);
    }
    if (!pid_file.empty()) {
        std::ofstream f(pid_file, std::ios::trunc);
        f << ::getpid() << '\n';
        if (!f)
            return false;
    }
    return true;
}

} // namespace

namespace {

int run_main(int argc, char **argv)
{
    Settings s;
    pvfs::cli::Parser app{
        "pvfsd: the pvfs client daemon; answers pvfs.ko's requests through /dev/pvfsd "
        "with the servers of each mounted file system"};
    app.flag("-f,--foreground", s.foreground, "stay in the foreground (logs to stderr)");
    app.option("--device", s.device.path, "the channel device").show_default();
    app.option("--key-file", s.key_file,
               "this node's key: its client key or the cluster key (default: $PVFS_KEY_FILE, else "
               "/etc/pvfs/pvfs.key)");
    app.option("--log", s.log_file,
               "log to this file (default: stderr in the foreground, "
               "else syslog)");
    app.option("--debug", s.debug, "debug masks, e.g. pvfsd,dev,client (default: $PVFS_DEBUG)");
    app.option("--pid-file", s.pid_file, "write the daemon's pid here");
    app.option("--metrics-file", s.metrics_file,
               "write metrics in the Prometheus text format to this file (default: none)");
    app.option("--metrics-interval", s.metrics_interval,
               "rewrite the metrics file this often, e.g. 10s or 500ms (default: 10s)");
    app.option("--slot-size", s.device.slot_size, "bytes per data slot, a power of two")
        .show_default()
        .range(PVFSD_SLOT_SIZE_MIN, PVFSD_SLOT_SIZE_MAX);
    app.option("--slots", s.device.slots, "data slots shared with the kernel")
        .show_default()
        .range(PVFSD_SLOTS_MIN, PVFSD_SLOTS_MAX);
    app.option("--test-die-after-reply", s.device.die_after_reply,
               "TESTS ONLY: exit when the first OP (e.g. UNLINK) is done, before the kernel "
               "gets its answer, as a crash there would");
    app.option("--test-channel-minor", s.device.channel_minor,
               "TESTS ONLY: offer pvfs.ko this minor of the channel and only its features, as "
               "an older pvfsd would")
        .show_default()
        .range(0U, PVFSD_DEV_MINOR);
    app.flag("--no-exactly-once", s.no_exactly_once,
             "BENCHMARKS ONLY: open no session with the metadata servers, to measure what "
             "exactly-once costs; a retried or replayed change is not exactly-once (it may "
             "run twice) and a file unlinked while open is destroyed at once");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;
    if ((s.device.slot_size & (s.device.slot_size - 1)) != 0) {
        std::fprintf(stderr, "pvfsd: --slot-size %u is no power of two\n", s.device.slot_size);
        return 2;
    }

    const auto configured =
        s.debug.empty() ? gossip::configure_from_env() : gossip::configure(s.debug);
    if (!configured.ok()) {
        std::fprintf(stderr, "pvfsd: %s\n", configured.error.c_str());
        return 2;
    }
    // Mounts attaching and detaching are rare and worth a line each.
    gossip::set_verbose(true);
    if (!s.log_file.empty()) {
        if (const auto st = gossip::log_to_file(s.log_file); !st.ok()) {
            std::fprintf(stderr, "pvfsd: %s\n", st.error.c_str());
            return 1;
        }
    } else if (!s.foreground) {
        gossip::log_to_syslog("pvfsd");
    }
    if (!s.metrics_file.empty()) {
        // Before daemonize's chdir("/"): relative to where pvfsd was started.
        std::error_code ec;
        s.metrics_file = std::filesystem::absolute(s.metrics_file, ec).string();
        if (ec) {
            std::fprintf(stderr, "pvfsd: --metrics-file: %s\n", ec.message().c_str());
            return 2;
        }
    }
    if (!s.foreground && !daemonize(s.pid_file)) {
        std::fprintf(stderr, "pvfsd: cannot become a daemon: %s\n", strerrordesc_np(errno));
        return 1;
    }
    const int rc = run(s);
    gossip::flush();
    return rc;
}

} // namespace

int main(int argc, char **argv)
{
    try {
        return run_main(argc, argv);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "pvfsd: %s\n", e.what());
        return 1;
    }
}
