// pvfs-bench: the pvfs-test pattern.  C client processes each write, then
// read back and check (a stamp per 512-byte sector), a contiguous region of R bytes of one shared
// file striped over S data servers; the aggregate rate of each phase is all the bytes over the time
// from the first client's start to the last client's end.  Every client is its own process with its
// own connections, as on a cluster.
//
//   pvfs-bench -c cluster.toml --clients 4 --region 256MiB --stripe-count 2
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <climits>
#include <cstring>
#include <iostream>
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
    Handle file = 0;
    std::uint64_t region = 0;
    std::size_t block = 0;
};

PhaseTimes run_phase(client::Client &c, const Plan &p, unsigned id, bool writing)
{
    PhaseTimes t;
    std::vector<std::byte> buf(p.block);
    fill_pattern(buf);
    const std::uint64_t base = std::uint64_t{id} * p.region;
    t.start_ns = monotonic_ns();
    for (std::uint64_t off = 0; off < p.region && t.error == 0; off += p.block) {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(p.block, p.region - off));
        const std::span<std::byte> b(buf.data(), n);
        if (writing) {
            stamp(b, id, off);
            const std::int64_t rc = c.write(p.file, base + off, b);
            t.error = rc < 0 ? rc : (rc == static_cast<std::int64_t>(n) ? 0 : -EIO);
        } else {
            const std::int64_t rc = c.read(p.file, base + off, b);
            if (rc != static_cast<std::int64_t>(n)) {
                t.error = rc < 0 ? rc : -EIO;
                break;
            }
            if (!stamps_match(b, id, off))
                t.error = 1;
        }
    }
    if (writing && t.error == 0)
        t.error = c.fsync(p.file);
    t.end_ns = monotonic_ns();
    return t;
}

[[noreturn]] void client_main(const Plan &p, unsigned id, int go_fd, int result_fd)
{
    client::Options o;
    o.target = p.target.target;
    o.key_file = p.target.key_file;
    std::string error;
    const auto c = client::Client::connect(o, error);
    for (const bool writing : {true, false}) {
        char go = 0;
        if (!tools::read_all(go_fd, &go, 1))
            ::_exit(1);
        PhaseTimes t;
        if (!c) {
            t.error = -ENOTCONN;
        } else {
            t = run_phase(*c, p, id, writing);
        }
        if (!tools::write_all(result_fd, &t, sizeof t))
            ::_exit(1);
    }
    ::_exit(0);
}

struct Phase {
    double seconds = 0;
    double mb_per_s = 0;
    std::int64_t error = 0;
};

} // namespace

static int run(int argc, char **argv)
{
    CLI::App app{"pvfs-bench: C clients write, then read back and check, contiguous regions of "
                 "one shared file striped over S data servers; aggregate MB/s per phase"};
    Plan plan;
    unsigned clients = 1;
    std::string region_text = "64MiB";
    std::string block_text = "16MiB";
    std::string stripe_text;
    std::uint32_t stripe_count = 0;
    std::string path = "/pvfs-bench.dat";
    bool json = false;
    bool keep = false;
    tools::add_target_options(app, plan.target);
    app.add_option("-C,--clients", clients, "client processes (default 1)")
        ->check(CLI::Range(1U, 256U));
    app.add_option("-R,--region", region_text, "bytes per client (default 64MiB)");
    app.add_option("-b,--block", block_text, "bytes per read or write call (default 16MiB)");
    app.add_option("-n,--stripe-count", stripe_count, "data servers (default: the config's)");
    app.add_option("-S,--stripe-size", stripe_text, "stripe size (default: the config's)");
    app.add_option("-f,--file", path, "the shared file (default /pvfs-bench.dat; replaced)");
    app.add_flag("--json", json, "print the result as JSON");
    app.add_flag("--keep", keep, "keep the file afterwards");
    CLI11_PARSE(app, argc, argv);

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

    const auto c = tools::connect_or_exit("pvfs-bench", plan.target);
    Layout layout = c->cluster().defaults.default_layout;
    if (stripe_count != 0)
        layout.stripe_count = stripe_count;
    if (!stripe_text.empty()) {
        const config::Quantity q = config::parse_size(stripe_text);
        if (!q.ok() || q.value > UINT32_MAX) {
            fmt::print(stderr, "pvfs-bench: --stripe-size {}: {}\n", stripe_text,
                       q.ok() ? "too large" : q.error);
            return tools::exit_usage;
        }
        layout.stripe_size = static_cast<std::uint32_t>(q.value);
    }
    Attr parent;
    std::string name;
    if (const int rc = tools::resolve_parent(*c, path, parent, name); rc != 0) {
        tools::report("pvfs-bench", path, rc);
        return tools::exit_failure;
    }
    const int gone = c->unlink(parent.handle, name);
    if (gone != 0 && gone != -ENOENT) {
        tools::report("pvfs-bench", "removing the old " + path, gone);
        return tools::exit_failure;
    }
    Attr file;
    if (const int rc = c->create(parent.handle, name, 0644, true, layout, file); rc != 0) {
        tools::report("pvfs-bench", "creating " + path, rc);
        return tools::exit_failure;
    }
    plan.file = file.handle;

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

    std::array<Phase, 2> phases{};
    for (std::size_t ph = 0; ph < 2; ++ph) {
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
        p.mb_per_s =
            p.seconds > 0 ? static_cast<double>(plan.region * clients) / p.seconds / 1e6 : 0.0;
    }
    go_write.clear();
    for (const pid_t pid : pids)
        ::waitpid(pid, nullptr, 0);
    if (!keep)
        static_cast<void>(c->unlink(parent.handle, name));

    const std::uint64_t bytes = plan.region * clients;
    auto error_of = [](std::int64_t e) {
        return e == 1 ? std::string("data read back differs") : client::error_text(e);
    };
    if (json) {
        nlohmann::json out{{"clients", clients},
                           {"stripe_count", layout.stripe_count},
                           {"stripe_size", layout.stripe_size},
                           {"bytes", bytes}};
        for (std::size_t ph = 0; ph < 2; ++ph) {
            const Phase &p = phases.at(ph);
            nlohmann::json j{{"seconds", p.seconds}, {"mb_per_s", p.mb_per_s}};
            if (p.error != 0)
                j["error"] = error_of(p.error);
            out[ph == 0 ? "write" : "read"] = j;
        }
        std::cout << out.dump(2) << "\n";
    } else {
        for (std::size_t ph = 0; ph < 2; ++ph) {
            const Phase &p = phases.at(ph);
            if (p.error != 0) {
                fmt::print("{} clients={} servers={}: FAILED: {}\n", ph == 0 ? "write" : "read",
                           clients, layout.stripe_count, error_of(p.error));
                continue;
            }
            fmt::print("{} clients={} servers={} bytes={} seconds={:.3f} MB/s={:.1f}\n",
                       ph == 0 ? "write" : "read", clients, layout.stripe_count, bytes, p.seconds,
                       p.mb_per_s);
        }
    }
    return phases[0].error != 0 || phases[1].error != 0 ? tools::exit_failure : 0;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-bench", [&] { return run(argc, argv); });
}
