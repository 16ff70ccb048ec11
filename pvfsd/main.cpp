// pvfsd: the pvfs client daemon.  It holds /dev/pvfsd, maps the data slots
// the kernel shares with it, and answers every upcall of pvfs.ko with
// libpvfs operations on the servers (docs/pvfsd.md).
#include "handler.hpp"
#include "upcall.hpp"

#include <pvfs/cli.hpp>
#include <pvfs/gossip.hpp>
#include <pvfs/unique_fd.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <exception>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace {

namespace gossip = pvfs::gossip;
using pvfs::UniqueFd;

// The shared slot area, unmapped on destruction.
class SlotMapping {
public:
    SlotMapping() = default;
    SlotMapping(int fd, std::size_t bytes)
    {
        void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            addr_ = p;
            bytes_ = bytes;
        }
    }
    ~SlotMapping()
    {
        if (addr_ != nullptr)
            ::munmap(addr_, bytes_);
    }
    SlotMapping(const SlotMapping &) = delete;
    SlotMapping &operator=(const SlotMapping &) = delete;
    SlotMapping(SlotMapping &&) = delete;
    SlotMapping &operator=(SlotMapping &&) = delete;

    [[nodiscard]] bool valid() const noexcept { return addr_ != nullptr; }
    [[nodiscard]] std::span<std::byte> bytes() const noexcept
    {
        return {static_cast<std::byte *>(addr_), bytes_};
    }

private:
    void *addr_ = nullptr;
    std::size_t bytes_ = 0;
};

struct Settings {
    std::string device = "/dev/" PVFSD_DEV_NAME;
    std::string key_file;
    std::string log_file;
    std::string debug;
    std::string pid_file;
    bool foreground = false;
    std::uint32_t slot_size = 1U << 20U;
    std::uint32_t slots = 64;
    // Test only: exit at the first answer to this op, before the kernel
    // gets it (the servers have done the op: its replay must not redo it).
    std::string die_after_reply;
    // Benchmarks only: what exactly-once costs, measured against this.
    bool no_exactly_once = false;
    // Test only: the channel minor offered at HELLO, with its features
    // alone, as an older pvfsd would.
    std::uint32_t channel_minor = PVFSD_DEV_MINOR;
};

// The features a pvfsd of channel minor `minor` offers.
static_assert(PVFSD_DEV_MINOR == 1, "features_of_minor knows minors 0 and 1");
std::uint64_t features_of_minor(std::uint32_t minor)
{
    return minor == 0 ? PVFSD_FEATURES_MINOR0 : PVFSD_FEATURES_MINOR1;
}

std::string open_error(int err, const std::string &device)
{
    switch (err) {
    case ENOENT:
    case ENXIO:
    case ENODEV:
        return device + " does not exist: is pvfs.ko loaded? (modprobe pvfs)";
    case EBUSY:
        return device + " is busy: another pvfsd runs";
    case EPERM:
    case EACCES:
        return device + ": pvfsd must run as root (CAP_SYS_ADMIN)";
    default:
        return device + ": " + strerrordesc_np(err);
    }
}

bool write_all(int fd, const std::vector<std::byte> &msg, int &err)
{
    const ssize_t n = ::write(fd, msg.data(), msg.size());
    err = n < 0 ? errno : 0;
    return n == static_cast<ssize_t>(msg.size());
}

// HELLO: our minor, features and the slots we want; the kernel answers with
// its minor and features and the slots it grants.  `granted.features` is
// then what both offered.
bool hello(int fd, const Settings &s, pvfsd_hello &granted)
{
    pvfs::pvfsd::Downcall d(PVFSD_OP_HELLO, 0);
    pvfsd_hello h{};
    h.slot_size = s.slot_size;
    h.slot_count = s.slots;
    h.minor = s.channel_minor;
    h.features = features_of_minor(s.channel_minor);
    d.put(h);
    int err = 0;
    if (!write_all(fd, d.finish(0), err)) {
        gossip::error(gossip::Mask::dev, "HELLO refused by pvfs.ko: {}{}", strerrordesc_np(err),
                      err == EPROTO ? " (pvfsd and pvfs.ko speak different channel versions)" : "");
        return false;
    }
    std::vector<std::byte> buf(PVFSD_DEV_MAX_MSG);
    for (int tries = 0; tries < 100; ++tries) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EAGAIN) {
            pollfd p{fd, POLLIN, 0};
            ::poll(&p, 1, 100);
            continue;
        }
        std::string why;
        const auto up =
            n > 0
                ? pvfs::pvfsd::Upcall::parse(std::span(buf).first(static_cast<std::size_t>(n)), why)
                : std::nullopt;
        const auto g = up ? up->body<pvfsd_hello>() : std::nullopt;
        if (!g || up->op() != PVFSD_OP_HELLO) {
            gossip::error(gossip::Mask::dev, "no HELLO answer from pvfs.ko: {}",
                          n < 0 ? strerrordesc_np(errno) : why.c_str());
            return false;
        }
        // A later minor's HELLO may be longer: its first fields are ours.
        granted = *g;
        gossip::info(gossip::Mask::dev,
                     "pvfs.ko speaks channel {}.{}, features {:#x}; using {:#x} (pvfsd: {}.{}, "
                     "{:#x})",
                     PVFSD_DEV_MAJOR, g->minor, g->features, g->features & h.features,
                     PVFSD_DEV_MAJOR, h.minor, h.features);
        granted.features = g->features & h.features;
        return true;
    }
    gossip::error(gossip::Mask::dev, "pvfs.ko did not answer HELLO within 10 s");
    return false;
}

int run(const Settings &s)
{
    UniqueFd dev(::open(s.device.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!dev.valid()) {
        gossip::error(gossip::Mask::pvfsd, "{}", open_error(errno, s.device));
        return 1;
    }
    pvfsd_hello granted{};
    if (!hello(dev.get(), s, granted))
        return 1;
    const std::size_t area = std::size_t{granted.slot_size} * granted.slot_count;
    SlotMapping slots(dev.get(), area);
    if (!slots.valid()) {
        gossip::error(gossip::Mask::dev, "cannot map {} bytes of slots: {}", area,
                      strerrordesc_np(errno));
        return 1;
    }
    gossip::info(gossip::Mask::pvfsd, "attached to {}: {} slots of {} KiB", s.device,
                 granted.slot_count, granted.slot_size >> 10U);

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
    loop->register_memory(slots.bytes());
    for (const int fd : {dev.get(), sig.get()}) {
        if (const int rc = loop->watch_fd(fd); rc != 0) {
            gossip::error(gossip::Mask::pvfsd, "cannot watch fd {}: {}", fd, strerrordesc_np(-rc));
            return 1;
        }
    }
    pvfs::pvfsd::HandlerOptions ho;
    ho.key_file = s.key_file;
    ho.exactly_once = !s.no_exactly_once;
    ho.features = granted.features;
    if (s.no_exactly_once)
        gossip::warning(gossip::Mask::pvfsd,
                        "--no-exactly-once (benchmarks only): a retried change may run twice, "
                        "and a file unlinked while open is destroyed at once");
    pvfs::pvfsd::Handler handler(ho, loop, slots.bytes(), granted.slot_size);
    std::vector<std::byte> buf(PVFSD_DEV_MAX_MSG);
    auto answer = [&] {
        for (const auto &reply : handler.take_finished()) {
            int err = 0;
            if (gossip::enabled(gossip::Mask::dev)) {
                pvfsd_msg_hdr h{};
                std::memcpy(&h, reply.data(), std::min(sizeof h, reply.size()));
                gossip::debug(gossip::Mask::dev, "answer to {} tag {}", pvfs::pvfsd::op_name(h.op),
                              h.tag);
            }
            if (!s.die_after_reply.empty()) {
                pvfsd_msg_hdr h{};
                std::memcpy(&h, reply.data(), std::min(sizeof h, reply.size()));
                if (s.die_after_reply == pvfs::pvfsd::op_name(h.op)) {
                    gossip::warning(gossip::Mask::pvfsd,
                                    "--test-die-after-reply {}: exiting before the answer to tag "
                                    "{} (status {})",
                                    s.die_after_reply, h.tag, h.status);
                    gossip::flush();
                    // As a crash would: no destructor ends the mounts' sessions.
                    ::_exit(3);
                }
            }
            if (!write_all(dev.get(), reply, err)) {
                pvfsd_msg_hdr h{};
                std::memcpy(&h, reply.data(), std::min(sizeof h, reply.size()));
                gossip::warning(gossip::Mask::dev, "pvfs.ko refused the answer to {} tag {}: {}",
                                pvfs::pvfsd::op_name(h.op), h.tag, strerrordesc_np(err));
            }
        }
    };
    // Each is read only after the loop saw it readable (both at start):
    // a read that fails with EAGAIN is a system call per request wasted.
    bool signal_ready = true;
    bool device_ready = true;
    std::vector<int> ready;
    for (;;) {
        signalfd_siginfo si{};
        // Like the device, to EAGAIN: a second queued signal brings no new
        // wake-up of its own.
        while (signal_ready && ::read(sig.get(), &si, sizeof(si)) > 0) {
            const bool stopping = si.ssi_signo != SIGUSR1;
            gossip::info(gossip::Mask::pvfsd,
                         "{}{} ops in flight (at most {} at once), {} cancelled, {} mounts{}",
                         stopping ? fmt::format("signal {}: stopping with ", si.ssi_signo) : "",
                         handler.in_flight(), handler.peak_in_flight(), handler.cancels(),
                         handler.mounts(),
                         stopping ? "; the kernel keeps pending requests for the next pvfsd" : "");
            if (stopping)
                return 0;
        }
        signal_ready = false;
        // The loop's watch may report only a new wake-up: read to EAGAIN.
        while (device_ready) {
            const ssize_t n = ::read(dev.get(), buf.data(), buf.size());
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN) {
                    device_ready = false;
                    break;
                }
                gossip::error(gossip::Mask::dev, "read {}: {}", s.device, strerrordesc_np(errno));
                return 1;
            }
            std::string why;
            auto up =
                pvfs::pvfsd::Upcall::parse(std::span(buf).first(static_cast<std::size_t>(n)), why);
            if (!up) {
                gossip::error(gossip::Mask::dev, "malformed upcall ignored: {}", why);
                continue;
            }
            gossip::debug(gossip::Mask::dev, "upcall {} tag {} ({} bytes)",
                          pvfs::pvfsd::op_name(up->op()), up->tag(), n);
            handler.start(std::move(*up));
        }
        answer();
        loop->poll(handler.idle_ms(1000));
        handler.run_timers();
        answer();
        ready.clear();
        loop->take_ready_fds(ready);
        for (const int fd : ready) {
            signal_ready = signal_ready || fd == sig.get();
            device_ready = device_ready || fd == dev.get();
        }
    }
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
    app.option("--device", s.device, "the channel device").show_default();
    app.option("--key-file", s.key_file,
               "this node's key: its client key or the cluster key (default: $PVFS_KEY_FILE, else "
               "/etc/pvfs/pvfs.key)");
    app.option("--log", s.log_file,
               "log to this file (default: stderr in the foreground, "
               "else syslog)");
    app.option("--debug", s.debug, "debug masks, e.g. pvfsd,dev,client (default: $PVFS_DEBUG)");
    app.option("--pid-file", s.pid_file, "write the daemon's pid here");
    app.option("--slot-size", s.slot_size, "bytes per data slot, a power of two")
        .show_default()
        .range(PVFSD_SLOT_SIZE_MIN, PVFSD_SLOT_SIZE_MAX);
    app.option("--slots", s.slots, "data slots shared with the kernel")
        .show_default()
        .range(PVFSD_SLOTS_MIN, PVFSD_SLOTS_MAX);
    app.option("--test-die-after-reply", s.die_after_reply,
               "TESTS ONLY: exit when the first OP (e.g. UNLINK) is done, before the kernel "
               "gets its answer, as a crash there would");
    app.option("--test-channel-minor", s.channel_minor,
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
    if ((s.slot_size & (s.slot_size - 1)) != 0) {
        std::fprintf(stderr, "pvfsd: --slot-size %u is no power of two\n", s.slot_size);
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
