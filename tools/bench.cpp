// pvfs-bench: the pvfs-test pattern.  C client processes each write, then
// read back and check (a stamp per 512-byte sector), a contiguous region of R bytes of one shared
// file striped over S data servers; the aggregate rate of each phase is all the bytes over the time
// from the first client's start to the last client's end.  Every client is its own process with its
// own connections, as on a cluster.  With --random-reads N the read phase
// is N reads of one block each at random block-aligned offsets of the
// client's region instead.  With --local PATH the same pattern runs against
// a local file through POSIX calls (pwrite, pread, fsync): the baseline,
// and the way to measure a kernel mount (--drop-caches empties the page
// cache before the read phase, so reads are not served from memory).
// --hold makes each writer take and drop an open reference, as a write
// through a mount does (the cost of orphan tracking to a stream).
//
//   pvfs-bench -c cluster.toml --clients 4 --region 256MiB --stripe-count 2
//   pvfs-bench --local /mnt/pvfs/bench.dat --block 4KiB --random-reads 2000 --drop-caches
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <climits>
#include <cstring>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common.hpp"
#include "pvfs/config.hpp"
#include "pvfs/unique_fd.hpp"

using namespace pvfs;

namespace {

using Clock = std::chrono::steady_clock;

// What a client reports for one phase (written whole to a pipe).
struct PhaseTimes {
    std::int64_t start_ns = 0; // CLOCK_MONOTONIC, comparable across processes
    std::int64_t end_ns = 0;
    std::int64_t error = 0; // 0, or a negative errno; 1: the data read back differs
};

std::int64_t monotonic_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

// Every 512-byte sector a client writes begins with a stamp (client,
// region offset), so a sector stored or read back at the wrong place is
// caught; the rest of the block is a fixed pattern written once.  Stamping
// costs 1/32 of the bytes where filling every byte made the benchmark
// measure its own data generation (a tenth of a 1-client run's CPU).
// Byte-exact checks of whole files are the tests' job (pvfs-cp + cmp).
constexpr std::size_t sector = 512;

struct Stamp {
    std::uint64_t client;
    std::uint64_t offset;
};

void fill_pattern(std::span<std::byte> block)
{
    for (std::size_t i = 0; i < block.size(); ++i)
        block[i] = static_cast<std::byte>((i * 131U) ^ (i >> 9U));
}

void stamp(std::span<std::byte> block, unsigned client, std::uint64_t off)
{
    for (std::size_t i = 0; i < block.size(); i += sector) {
        const Stamp st{0x5045465342454e43ULL ^ client, off + i};
        std::memcpy(block.data() + i, &st, std::min(sizeof st, block.size() - i));
    }
}

bool stamps_match(std::span<const std::byte> block, unsigned client, std::uint64_t off)
{
    for (std::size_t i = 0; i < block.size(); i += sector) {
        const Stamp st{0x5045465342454e43ULL ^ client, off + i};
        if (std::memcmp(block.data() + i, &st, std::min(sizeof st, block.size() - i)) != 0)
            return false;
    }
    return true;
}

struct Plan {
    tools::Target target;
    std::string local; // non-empty: this local file instead of pvfs
    Handle file = 0;
    std::uint64_t region = 0;
    std::size_t block = 0;
    std::uint64_t random_reads = 0; // 0: the read phase reads the region in order
    bool hold = false;              // each client holds the file open while it writes
    bool no_chunk_macs = false;     // bulk data without chunk MACs (insecure_benchmark_only)
    bool no_capabilities = false;   // data requests without capabilities (likewise)
};

// Where a client's bytes go: the pvfs client library, or a local file
// (a kernel mount, tmpfs) through POSIX calls.  Returns what the calls
// return: bytes moved, or a negative errno.
class Storage {
public:
    Storage(client::Client *c, Handle file, int fd) : c_(c), file_(file), fd_(fd) {}
    std::int64_t write(std::uint64_t off, std::span<const std::byte> b)
    {
        if (c_ != nullptr)
            return c_->write(file_, off, b);
        const ssize_t n = ::pwrite(fd_, b.data(), b.size(), static_cast<off_t>(off));
        return n < 0 ? -errno : n;
    }
    std::int64_t read(std::uint64_t off, std::span<std::byte> b)
    {
        if (c_ != nullptr)
            return c_->read(file_, off, b);
        const ssize_t n = ::pread(fd_, b.data(), b.size(), static_cast<off_t>(off));
        return n < 0 ? -errno : n;
    }
    std::int64_t fsync()
    {
        if (c_ != nullptr)
            return c_->fsync(file_);
        return ::fsync(fd_) == 0 ? 0 : -errno;
    }
    // An open reference on the metadata server, as a mount's open(2) and
    // close(2) take and drop one (what orphan tracking costs a writer).
    std::int64_t hold()
    {
        Attr ignored;
        return c_ != nullptr ? c_->open(file_, client::Client::open_write, ignored) : 0;
    }
    std::int64_t release() { return c_ != nullptr ? c_->close(file_) : 0; }

private:
    client::Client *c_;
    Handle file_;
    int fd_;
};

// One read or write of the phase: false (with t.error set) ends the phase.
bool transfer(Storage &s, std::span<std::byte> b, unsigned id, std::uint64_t base,
              std::uint64_t off, bool writing, PhaseTimes &t)
{
    if (writing) {
        stamp(b, id, off);
        const std::int64_t rc = s.write(base + off, b);
        t.error = rc < 0 ? rc : (rc == static_cast<std::int64_t>(b.size()) ? 0 : -EIO);
        return t.error == 0;
    }
    const std::int64_t rc = s.read(base + off, b);
    if (rc != static_cast<std::int64_t>(b.size())) {
        t.error = rc < 0 ? rc : -EIO;
        return false;
    }
    if (!stamps_match(b, id, off)) {
        t.error = 1;
        return false;
    }
    return true;
}

// `buf` is the client's block buffer, filled with the pattern before the
// phase's start signal: its page faults and the fill are the tool's, not
// the file system's, and with C clients on few CPUs a fill inside one
// client's phase ran during the others' timed ones.
PhaseTimes run_phase(Storage &s, const Plan &p, unsigned id, bool writing,
                     std::vector<std::byte> &buf)
{
    PhaseTimes t;
    const std::uint64_t base = std::uint64_t{id} * p.region;
    t.start_ns = monotonic_ns();
    if (writing && p.hold) {
        t.error = s.hold();
        if (t.error != 0) {
            t.end_ns = monotonic_ns();
            return t;
        }
    }
    if (!writing && p.random_reads != 0) {
        // Whole blocks only, so every read is one block; the seed is the
        // client's, so runs and targets read the same offsets.
        std::mt19937_64 rng(0x9e3779b97f4a7c15ULL + id);
        const std::uint64_t blocks = std::max<std::uint64_t>(1, p.region / p.block);
        std::uniform_int_distribution<std::uint64_t> pick(0, blocks - 1);
        const std::span<std::byte> b(buf.data(), std::min<std::uint64_t>(p.block, p.region));
        for (std::uint64_t i = 0; i < p.random_reads; ++i) {
            if (!transfer(s, b, id, base, pick(rng) * p.block, false, t))
                break;
        }
    } else {
        for (std::uint64_t off = 0; off < p.region; off += p.block) {
            const std::size_t n =
                static_cast<std::size_t>(std::min<std::uint64_t>(p.block, p.region - off));
            if (!transfer(s, std::span<std::byte>(buf.data(), n), id, base, off, writing, t))
                break;
        }
    }
    if (writing && t.error == 0)
        t.error = s.fsync();
    if (writing && p.hold) {
        const std::int64_t closed = s.release();
        if (t.error == 0)
            t.error = closed;
    }
    t.end_ns = monotonic_ns();
    return t;
}

// Empties the page cache (root only): what a read phase of a local file or
// a kernel mount reads must come from the storage, not from memory.
std::int64_t drop_caches()
{
    ::sync();
    const UniqueFd fd(::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC));
    if (!fd.valid() || ::write(fd.get(), "3", 1) != 1)
        return -errno;
    return 0;
}

[[noreturn]] void client_main(const Plan &p, unsigned id, int go_fd, int result_fd)
{
    std::unique_ptr<client::Client> c;
    UniqueFd fd;
    std::int64_t setup = 0;
    if (p.local.empty()) {
        client::Options o;
        o.target = p.target.target;
        o.key_file = p.target.key_file;
        o.chunk_macs = !p.no_chunk_macs;
        o.capabilities = !p.no_capabilities;
        std::string error;
        c = client::Client::connect(o, error);
        if (!c)
            setup = -ENOTCONN;
    } else {
        fd.reset(::open(p.local.c_str(), O_RDWR | O_CLOEXEC));
        if (!fd.valid())
            setup = -errno;
    }
    Storage s(c.get(), p.file, fd.get());
    std::vector<std::byte> buf(p.block);
    for (const bool writing : {true, false}) {
        // Before the phase's start: a read phase finds no stamps left over.
        fill_pattern(buf);
        char go = 0;
        if (!tools::read_all(go_fd, &go, 1))
            ::_exit(1);
        PhaseTimes t;
        if (setup != 0) {
            t.error = setup;
        } else {
            t = run_phase(s, p, id, writing, buf);
        }
        if (!tools::write_all(result_fd, &t, sizeof t))
            ::_exit(1);
    }
    ::_exit(0);
}

struct Phase {
    double seconds = 0;
    double mb_per_s = 0;
    double ops_per_s = 0;
    std::int64_t error = 0;
};

// What the setup helper hands back.
struct Setup {
    int status = tools::exit_failure; // 0: the file is made
    Layout layout;
    Handle parent = 0;
    Handle file = 0;
};

// Runs fn(out) in a child process and copies out back through a pipe.  False
// when the child died without answering (it printed why).
template <typename Fn> bool in_child(Setup &out, const Fn &fn)
{
    std::array<int, 2> fds{};
    if (::pipe2(fds.data(), O_CLOEXEC) != 0)
        throw std::runtime_error("pipe");
    const UniqueFd rd(fds[0]);
    UniqueFd wr(fds[1]);
    const pid_t pid = ::fork();
    if (pid < 0)
        throw std::runtime_error("fork");
    if (pid == 0) {
        Setup result;
        fn(result);
        const bool sent = tools::write_all(wr.get(), &result, sizeof result);
        std::fflush(nullptr);
        ::_exit(sent ? 0 : 1);
    }
    wr.reset();
    const bool got = tools::read_all(rd.get(), &out, sizeof out);
    ::waitpid(pid, nullptr, 0);
    return got;
}

} // namespace

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-bench: C clients write, then read back and check, contiguous regions of "
                    "one shared file striped over S data servers; aggregate MB/s per phase "
                    "(--local FILE: the same through POSIX calls on a local file or a mount)"};
    Plan plan;
    unsigned clients = 1;
    std::string region_text = "64MiB";
    std::string block_text = "16MiB";
    std::string stripe_text;
    std::uint32_t stripe_count = 0;
    std::string path = "/pvfs-bench.dat";
    bool json = false;
    bool keep = false;
    bool drop = false;
    tools::add_target_options(app, plan.target);
    app.option("-C,--clients", clients, "client processes (default 1)").range(1U, 256U);
    app.option("-R,--region", region_text, "bytes per client (default 64MiB)");
    app.option("-b,--block", block_text, "bytes per read or write call (default 16MiB)");
    app.option("-n,--stripe-count", stripe_count, "data servers (default: the config's)");
    app.option("-S,--stripe-size", stripe_text, "stripe size (default: the config's)");
    app.option("-f,--file", path, "the shared file (default /pvfs-bench.dat; replaced)");
    app.option("--local", plan.local,
               "a local file (replaced) instead of pvfs: pwrite/pread/fsync, e.g. on a "
               "kernel mount or tmpfs");
    app.option("--random-reads", plan.random_reads,
               "the read phase: this many one-block reads at random block-aligned offsets "
               "of each client's region (default: read the region in order)");
    app.flag("--drop-caches", drop,
             "empty the page cache (/proc/sys/vm/drop_caches, root) before the read phase");
    app.flag("--hold", plan.hold,
             "each client opens the file (an open reference on the metadata server) before "
             "its first write and closes it after its fsync, inside the timed phase, as a "
             "program writing through a mount does");
    app.flag("--insecure-no-chunk-macs", plan.no_chunk_macs,
             "move bulk data without chunk MACs, to measure what they cost (only a cluster "
             "whose config sets insecure_benchmark_only, all on loopback, accepts it)");
    app.flag("--insecure-no-capabilities", plan.no_capabilities,
             "ask for no capabilities and send none on data requests, to measure what they "
             "cost (only a cluster whose config sets insecure_benchmark_only heeds it, and "
             "only one that also sets require_capabilities = false serves the data)");
    app.flag("--json", json, "print the result as JSON");
    app.flag("--keep", keep, "keep the file afterwards");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    const config::Quantity region = config::parse_size(region_text);
    const config::Quantity block = config::parse_size(block_text);
    if (!region.ok() || region.value == 0 || !block.ok() || block.value == 0 ||
        block.value > (std::uint64_t{1} << 30U)) {
        fmt::print(stderr, "pvfs-bench: --region and --block take sizes like 64MiB (block <= "
                           "1GiB)\n");
        return tools::exit_usage;
    }
    plan.region = region.value;
    plan.block = static_cast<std::size_t>(block.value);

    // The file system is reached from short-lived helper processes only:
    // the clients forked below must start without a transport of this
    // process's (an RDMA device context does not survive fork).
    const bool pvfs_target = plan.local.empty();
    Layout layout;
    Handle parent = 0;
    std::string name;
    if (pvfs_target) {
        Setup setup;
        if (!in_child(setup, [&](Setup &out) {
                const std::unique_ptr<client::Client> c =
                    tools::connect_or_exit("pvfs-bench", plan.target);
                out.layout = c->cluster().defaults.default_layout;
                if (stripe_count != 0)
                    out.layout.stripe_count = stripe_count;
                if (!stripe_text.empty()) {
                    const config::Quantity q = config::parse_size(stripe_text);
                    if (!q.ok() || q.value > UINT32_MAX) {
                        fmt::print(stderr, "pvfs-bench: --stripe-size {}: {}\n", stripe_text,
                                   q.ok() ? "too large" : q.error);
                        out.status = tools::exit_usage;
                        return;
                    }
                    out.layout.stripe_size = static_cast<std::uint32_t>(q.value);
                }
                Attr dir;
                std::string leaf;
                if (const int rc = tools::resolve_parent(*c, path, dir, leaf); rc != 0) {
                    tools::report("pvfs-bench", path, rc);
                    return;
                }
                const int gone = c->unlink(dir.handle, leaf);
                if (gone != 0 && gone != -ENOENT) {
                    tools::report("pvfs-bench", "removing the old " + path, gone);
                    return;
                }
                Attr file;
                if (const int rc = c->create(dir.handle, leaf, 0644, true, out.layout, file);
                    rc != 0) {
                    tools::report("pvfs-bench", "creating " + path, rc);
                    return;
                }
                out.parent = dir.handle;
                out.file = file.handle;
                out.status = 0;
            }))
            return tools::exit_failure;
        if (setup.status != 0)
            return setup.status;
        layout = setup.layout;
        parent = setup.parent;
        plan.file = setup.file;
        name = path.substr(path.rfind('/') + 1);
    } else {
        if (stripe_count != 0 || !stripe_text.empty() || plan.hold) {
            fmt::print(stderr, "pvfs-bench: --stripe-count, --stripe-size and --hold are for "
                               "pvfs, not --local\n");
            return tools::exit_usage;
        }
        path = plan.local;
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
            tools::report("pvfs-bench", "removing the old " + path, -errno);
            return tools::exit_failure;
        }
        const UniqueFd made(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
        if (!made.valid()) {
            tools::report("pvfs-bench", "creating " + path, -errno);
            return tools::exit_failure;
        }
    }

    // Pipes: one "go" pipe per client, one shared result pipe (each report
    // is one write of a few bytes, so reports never interleave).
    std::vector<UniqueFd> go_write;
    std::vector<pid_t> pids;
    std::array<int, 2> results{};
    if (::pipe2(results.data(), O_CLOEXEC) != 0)
        throw std::runtime_error("pipe");
    const UniqueFd results_read(results[0]);
    UniqueFd results_write(results[1]);
    for (unsigned i = 0; i < clients; ++i) {
        std::array<int, 2> go{};
        if (::pipe2(go.data(), O_CLOEXEC) != 0)
            throw std::runtime_error("pipe");
        UniqueFd go_read(go[0]);
        go_write.emplace_back(go[1]);
        const pid_t pid = ::fork();
        if (pid < 0)
            throw std::runtime_error("fork");
        if (pid == 0)
            client_main(plan, i, go_read.get(), results_write.get());
        pids.push_back(pid);
    }
    results_write.reset();

    const std::uint64_t blocks_per_client = (plan.region + plan.block - 1) / plan.block;
    const std::uint64_t read_block = std::min<std::uint64_t>(plan.block, plan.region);
    const std::array<std::uint64_t, 2> ops{blocks_per_client * clients,
                                           plan.random_reads != 0 ? plan.random_reads * clients
                                                                  : blocks_per_client * clients};
    const std::array<std::uint64_t, 2> bytes{
        plan.region * clients,
        plan.random_reads != 0 ? plan.random_reads * read_block * clients : plan.region * clients};
    std::array<Phase, 2> phases{};
    for (std::size_t ph = 0; ph < 2; ++ph) {
        if (ph == 1 && drop && phases[0].error == 0) {
            if (const std::int64_t rc = drop_caches(); rc != 0) {
                tools::report("pvfs-bench", "--drop-caches", rc);
                phases[1].error = rc;
            }
        }
        for (const UniqueFd &g : go_write) {
            const char go = 1;
            // A client that cannot be told to go reports no result: caught below.
            static_cast<void>(tools::write_all(g.get(), &go, 1));
        }
        std::int64_t first = INT64_MAX;
        std::int64_t last = 0;
        for (unsigned i = 0; i < clients; ++i) {
            PhaseTimes t;
            if (!tools::read_all(results_read.get(), &t, sizeof t)) {
                phases.at(ph).error = -EPIPE;
                break;
            }
            first = std::min(first, t.start_ns);
            last = std::max(last, t.end_ns);
            if (t.error != 0 && phases.at(ph).error == 0)
                phases.at(ph).error = t.error;
        }
        Phase &p = phases.at(ph);
        p.seconds = static_cast<double>(last - first) / 1e9;
        p.mb_per_s = p.seconds > 0 ? static_cast<double>(bytes.at(ph)) / p.seconds / 1e6 : 0.0;
        p.ops_per_s = p.seconds > 0 ? static_cast<double>(ops.at(ph)) / p.seconds : 0.0;
    }
    go_write.clear();
    for (const pid_t pid : pids)
        ::waitpid(pid, nullptr, 0);
    if (!keep) {
        if (pvfs_target) {
            Setup done;
            static_cast<void>(in_child(done, [&](Setup &) {
                const std::unique_ptr<client::Client> c =
                    tools::connect_or_exit("pvfs-bench", plan.target);
                static_cast<void>(c->unlink(parent, name));
            }));
        } else {
            static_cast<void>(::unlink(path.c_str()));
        }
    }

    auto error_of = [](std::int64_t e) {
        return e == 1 ? std::string("data read back differs") : client::error_text(e);
    };
    if (json) {
        cli::Json out = cli::Json::object({{"clients", clients},
                                           {"target", pvfs_target ? "pvfs" : "local"},
                                           {"block", plan.block},
                                           {"bytes", bytes[0]}});
        if (pvfs_target) {
            out.set("stripe_count", layout.stripe_count);
            out.set("stripe_size", layout.stripe_size);
            out.set("hold", plan.hold);
            out.set("chunk_macs", !plan.no_chunk_macs);
            out.set("capabilities", !plan.no_capabilities);
        }
        for (std::size_t ph = 0; ph < 2; ++ph) {
            const Phase &p = phases.at(ph);
            cli::Json j = cli::Json::object({{"seconds", p.seconds},
                                             {"mb_per_s", p.mb_per_s},
                                             {"ops", ops.at(ph)},
                                             {"ops_per_s", p.ops_per_s},
                                             {"bytes", bytes.at(ph)}});
            if (ph == 1)
                j.set("pattern", plan.random_reads != 0 ? "random" : "sequential");
            if (p.error != 0)
                j.set("error", error_of(p.error));
            out.set(ph == 0 ? "write" : "read", j);
        }
        std::cout << out.dump(2) << "\n";
    } else {
        for (std::size_t ph = 0; ph < 2; ++ph) {
            const Phase &p = phases.at(ph);
            const std::string where = pvfs_target ? fmt::format("servers={}", layout.stripe_count)
                                                  : "local=" + plan.local;
            const char *what = ph == 0 ? "write" : (plan.random_reads != 0 ? "randread" : "read");
            if (p.error != 0) {
                fmt::print("{} clients={} {}: FAILED: {}\n", what, clients, where,
                           error_of(p.error));
                continue;
            }
            fmt::print("{} clients={} {} bytes={} seconds={:.3f} MB/s={:.1f} ops/s={:.0f}\n", what,
                       clients, where, bytes.at(ph), p.seconds, p.mb_per_s, p.ops_per_s);
        }
    }
    return phases[0].error != 0 || phases[1].error != 0 ? tools::exit_failure : 0;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-bench", [&] { return run(argc, argv); });
}
