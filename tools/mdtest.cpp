// pvfs-mdtest: metadata rates in the style of mdtest.  C client processes
// each create N empty files, then stat them, then remove them, either all
// in one shared directory or each in its own; the rate of each phase is all
// the operations over the time from the first client's start to the last
// client's end.  With --local DIR the same runs against a local directory
// (open(O_CREAT|O_EXCL)+close, stat, unlink), the baseline.
//
// With --compare FEATURE the create and remove phases go in blocks of
// --block files per client, all clients in step, alternating the feature on
// and off (ABBA: the order flips every pair), so that what the feature costs
// is measured against the same cluster, directory and disk a few
// milliseconds apart: the disk's fsync latency drifts by a third over
// seconds, far more than what is being measured.
//
//   pvfs-mdtest -c cluster.toml --clients 4 --files 2000 --separate
//   pvfs-mdtest --local /tmp/md --clients 4 --files 2000
//   pvfs-mdtest -c cluster.toml --compare reply-cache --files 4096
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common.hpp"
#include "pvfs/unique_fd.hpp"

using namespace pvfs;

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::array<const char *, 3> phase_names{"create", "stat", "remove"};

struct Report {
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::int64_t error = 0; // 0 or a negative errno
};

std::int64_t monotonic_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

// What --compare switches on and off block by block.
enum class Compare {
    off,         // no --compare
    reply_cache, // exactly-once ids on changes (the servers' reply cache)
    hold,        // each create also opens, the closes in batches (orphan tracking)
    same,        // nothing: both blocks alike, the method's own noise (an A/A test)
};

struct Plan {
    tools::Target target;
    std::string local; // non-empty: a local directory instead of pvfs
    std::string dir = "/pvfs-mdtest";
    unsigned files = 1000;
    bool separate = false;
    bool exactly_once = true;
    bool capabilities = true; // false: none (insecure_benchmark_only clusters)
    bool hold = false;        // create as open(O_CREAT) through a mount does: holding the file open
    Compare compare = Compare::off;
    unsigned block = 64; // files per client per block under --compare
};

// The kernel hands pvfsd its closes in batches of up to this many.
constexpr std::size_t close_batch = 64;

std::string client_dir(const Plan &p, unsigned id)
{
    return p.separate ? fmt::format("{}/c{}", p.dir, id) : p.dir;
}

// Files [begin, end) of one phase against pvfs.  `c` makes the changes
// (with exactly-once ids or not, as it was connected); `hold` creates as open(O_CREAT) does.
Report pvfs_phase(client::Client &c, Handle dir, unsigned id, unsigned begin, unsigned end,
                  bool hold, std::size_t phase)
{
    Report r;
    std::vector<Handle> held;
    r.start_ns = monotonic_ns();
    for (unsigned i = begin; i < end && r.error == 0; ++i) {
        const std::string name = fmt::format("f.{}.{}", id, i);
        Attr a;
        if (phase == 0 && hold) {
            r.error = c.create_open(dir, name, 0644, true, Layout{}, client::Client::open_write, a);
            if (r.error == 0)
                held.push_back(a.handle);
            if (held.size() == close_batch) {
                r.error = c.close_each(std::move(held));
                held.clear();
            }
        } else if (phase == 0) {
            r.error = c.create(dir, name, 0644, true, Layout{}, a);
        } else if (phase == 1) {
            r.error = c.lookup(dir, name, a);
        } else {
            r.error = c.unlink(dir, name);
        }
    }
    if (!held.empty()) {
        const int closed = c.close_each(std::move(held));
        r.error = r.error != 0 ? r.error : closed;
    }
    r.end_ns = monotonic_ns();
    return r;
}

// Under --compare the create phase, and the remove phase but for hold (whose
// removes are alike), go in blocks; every other phase is one block.
bool compared(const Plan &p, std::size_t phase)
{
    return p.compare != Compare::off && (phase == 0 || (phase == 2 && p.compare != Compare::hold));
}

unsigned block_count(const Plan &p, std::size_t phase)
{
    return compared(p, phase) ? p.files / p.block : 1;
}

// Whether block k runs with the feature on.  Each pair's order flips from
// the last one's (on-off, off-on, ...), so a steady drift across a pair
// favours neither side.
bool feature_on(unsigned k)
{
    return (k % 2 == 0) == ((k / 2) % 2 == 0);
}

// One phase against a local directory.
Report local_phase(const std::string &dir, unsigned id, unsigned files, std::size_t phase)
{
    Report r;
    r.start_ns = monotonic_ns();
    for (unsigned i = 0; i < files && r.error == 0; ++i) {
        const std::string path = fmt::format("{}/f.{}.{}", dir, id, i);
        if (phase == 0) {
            const UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
            r.error = fd.valid() ? 0 : -errno;
        } else if (phase == 1) {
            struct stat st {};
            r.error = ::stat(path.c_str(), &st) == 0 ? 0 : -errno;
        } else {
            r.error = ::unlink(path.c_str()) == 0 ? 0 : -errno;
        }
    }
    r.end_ns = monotonic_ns();
    return r;
}

std::unique_ptr<client::Client> connect_client(const Plan &p, bool exactly_once)
{
    client::Options o;
    o.target = p.target.target;
    o.key_file = p.target.key_file;
    // Every stat must ask the server, as mdtest's would.
    o.attr_timeout = std::chrono::milliseconds(0);
    o.exactly_once = exactly_once;
    o.capabilities = p.capabilities;
    std::string error;
    return client::Client::connect(o, error);
}

[[noreturn]] void client_main(const Plan &p, unsigned id, int go_fd, int result_fd)
{
    std::unique_ptr<client::Client> c;
    Handle dir = 0;
    std::int64_t setup = 0;
    if (p.local.empty()) {
        c = connect_client(p, p.exactly_once);
        Attr a;
        setup = !c ? -ENOTCONN : c->resolve(client_dir(p, id), a);
        dir = a.handle;
    }
    for (std::size_t phase = 0; phase < phase_names.size(); ++phase) {
        const unsigned blocks = block_count(p, phase);
        for (unsigned k = 0; k < blocks; ++k) {
            char go = 0;
            if (!tools::read_all(go_fd, &go, 1))
                ::_exit(1);
            Report r;
            if (setup != 0) {
                r.error = setup;
            } else if (!p.local.empty()) {
                r = local_phase(client_dir(p, id), id, p.files, phase);
            } else if (!compared(p, phase)) {
                r = pvfs_phase(*c, dir, id, 0, p.files, p.hold, phase);
            } else {
                // The same client and connections both ways, so that only
                // the feature differs between the halves of a pair.
                const bool on = feature_on(k);
                if (p.compare == Compare::reply_cache)
                    c->set_change_ids(on);
                r = pvfs_phase(*c, dir, id, k * p.block, (k + 1) * p.block,
                               p.compare == Compare::hold && on, phase);
            }
            if (!tools::write_all(result_fd, &r, sizeof r))
                ::_exit(1);
        }
    }
    // Ends its sessions: left open, each would keep its reply slots in the
    // metadata store until the session ttl, under later runs' feet.
    c.reset();
    ::_exit(0);
}

// The blocks of one compared phase: each block's wall time (all clients in
// step) with the feature on or off, paired in order.
struct Comparison {
    std::vector<double> on_seconds;
    std::vector<double> off_seconds;

    void add(unsigned block, double seconds)
    {
        (feature_on(block) ? on_seconds : off_seconds).push_back(seconds);
    }

    // Per pair, the rate with the feature over the rate without; the blocks
    // hold the same number of operations, so a ratio of times.
    [[nodiscard]] std::vector<double> ratios() const
    {
        std::vector<double> out;
        for (std::size_t i = 0; i < std::min(on_seconds.size(), off_seconds.size()); ++i) {
            if (on_seconds[i] > 0)
                out.push_back(off_seconds[i] / on_seconds[i]);
        }
        return out;
    }

    // Median, min and max of the ratios (zeros without any).
    [[nodiscard]] std::array<double, 3> spread() const
    {
        std::vector<double> sorted = ratios();
        if (sorted.empty())
            return {};
        std::sort(sorted.begin(), sorted.end());
        const std::size_t n = sorted.size();
        const double median = n % 2 != 0 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
        return {median, sorted.front(), sorted.back()};
    }

    [[nodiscard]] cli::Json json(std::uint64_t ops_per_block) const
    {
        const std::vector<double> each = ratios();
        cli::Json list = cli::Json::array();
        for (const double r : each)
            list.push(r);
        const auto side = [&](const std::vector<double> &secs) {
            double total = 0;
            for (const double s : secs)
                total += s;
            const std::uint64_t ops = ops_per_block * secs.size();
            return cli::Json::object({{"ops", ops},
                                      {"seconds", total},
                                      {"ops_per_s", total > 0 ? double(ops) / total : 0.0}});
        };
        const auto [median, low, high] = spread();
        cli::Json j = cli::Json::object({{"pairs", each.size()},
                                         {"ratio_median", median},
                                         {"ratio_min", low},
                                         {"ratio_max", high},
                                         {"ratios", std::move(list)}});
        const auto list_of = [](const std::vector<double> &secs) {
            cli::Json l = cli::Json::array();
            for (const double x : secs)
                l.push(x);
            return l;
        };
        j.set("on_seconds", list_of(on_seconds));
        j.set("off_seconds", list_of(off_seconds));
        j.set("on", side(on_seconds));
        j.set("off", side(off_seconds));
        return j;
    }
};

} // namespace

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-mdtest: create, stat and remove rates of C clients, in one shared "
                    "directory or one each (mdtest style); --local DIR for a local baseline"};
    Plan plan;
    unsigned clients = 1;
    bool json = false;
    tools::add_target_options(app, plan.target);
    app.option("-C,--clients", clients, "client processes (default 1)").range(1U, 256U);
    app.option("-N,--files", plan.files, "files per client (default 1000)").range(1U, 10000000U);
    app.flag("--separate", plan.separate, "one directory per client (default: all share one)");
    app.option("-d,--dir", plan.dir,
               "the directory to work in (made and removed; default "
               "/pvfs-mdtest)");
    app.option("--local", plan.local, "run against this local directory instead of pvfs");
    app.flag("--json", json, "print the result as JSON");
    bool no_reply_cache = false;
    app.flag("--no-reply-cache", no_reply_cache,
             "changes without exactly-once ids (what the servers' reply cache costs)");
    app.flag("--hold", plan.hold,
             "create as open(O_CREAT) through a mount does: each create also opens the file "
             "(one request), closed in batches of 64 as pvfsd sends the kernel's closes (what "
             "orphan tracking costs; each batch is waited for here, where the kernel's "
             "closes are not, so this is the cost's upper bound)");
    bool no_capabilities = false;
    app.flag("--insecure-no-capabilities", no_capabilities,
             "creates ask for no capabilities and removes take none, to measure what they "
             "cost (only a cluster whose config sets insecure_benchmark_only heeds it, and "
             "only one that also sets require_capabilities = false removes the data objects)");
    std::string compare;
    app.option("--compare", compare,
               "measure what a feature costs: the create phase (and, for reply-cache, the "
               "remove phase) goes in blocks of --block files per client, all clients in "
               "step, alternating the feature on and off; reports the per-pair rate ratios "
               "(on/off). reply-cache: exactly-once ids vs none; hold: as --hold vs plain "
               "creates; same: nothing switched (the method's own noise)")
        .one_of({"reply-cache", "hold", "same"})
        .type_name("FEATURE");
    app.option("--block", plan.block, "files per client per --compare block (default 64)")
        .range(1U, 1000000U);
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;
    plan.exactly_once = !no_reply_cache;
    plan.capabilities = !no_capabilities;
    if (plan.hold && (no_reply_cache || !plan.local.empty())) {
        fmt::print(stderr, "pvfs-mdtest: --hold needs exactly-once ids and pvfs (not "
                           "--no-reply-cache or --local)\n");
        return tools::exit_usage;
    }
    if (!compare.empty()) {
        plan.compare = compare == "hold"          ? Compare::hold
                       : compare == "reply-cache" ? Compare::reply_cache
                                                  : Compare::same;
        if (plan.hold || no_reply_cache || !plan.local.empty()) {
            fmt::print(stderr, "pvfs-mdtest: --compare switches the feature itself: not with "
                               "--hold, --no-reply-cache or --local\n");
            return tools::exit_usage;
        }
        if (plan.files % (2 * plan.block) != 0) {
            fmt::print(stderr,
                       "pvfs-mdtest: --compare needs --files to be a multiple of twice "
                       "--block ({}), so that every pair holds equal blocks\n",
                       2 * plan.block);
            return tools::exit_usage;
        }
    }

    std::unique_ptr<client::Client> c;
    std::vector<std::string> dirs{plan.dir};
    for (unsigned i = 0; plan.separate && i < clients; ++i)
        dirs.push_back(client_dir(plan, i));
    if (plan.local.empty()) {
        c = tools::connect_or_exit("pvfs-mdtest", plan.target);
        for (const std::string &d : dirs) {
            Attr parent;
            std::string name;
            Attr made;
            int rc = tools::resolve_parent(*c, d, parent, name);
            if (rc == 0)
                rc = c->mkdir(parent.handle, name, 0755, made);
            if (rc != 0) {
                tools::report("pvfs-mdtest", "mkdir " + d, rc);
                return tools::exit_failure;
            }
        }
    } else {
        plan.dir = plan.local + "/mdtest";
        dirs.assign(1, plan.dir);
        for (unsigned i = 0; plan.separate && i < clients; ++i)
            dirs.push_back(client_dir(plan, i));
        for (const std::string &d : dirs) {
            if (::mkdir(d.c_str(), 0755) != 0) {
                tools::report("pvfs-mdtest", "mkdir " + d, -errno);
                return tools::exit_failure;
            }
        }
    }

    std::array<int, 2> results{};
    if (::pipe2(results.data(), O_CLOEXEC) != 0)
        throw std::runtime_error("pipe");
    const UniqueFd results_read(results[0]);
    UniqueFd results_write(results[1]);
    std::vector<UniqueFd> go_write;
    std::vector<pid_t> pids;
    for (unsigned i = 0; i < clients; ++i) {
        std::array<int, 2> go{};
        if (::pipe2(go.data(), O_CLOEXEC) != 0)
            throw std::runtime_error("pipe");
        const UniqueFd go_read(go[0]);
        go_write.emplace_back(go[1]);
        const pid_t pid = ::fork();
        if (pid < 0)
            throw std::runtime_error("fork");
        if (pid == 0)
            client_main(plan, i, go_read.get(), results_write.get());
        pids.push_back(pid);
    }
    results_write.reset();

    const std::uint64_t ops = std::uint64_t{plan.files} * clients;
    cli::Json out = cli::Json::object({{"clients", clients},
                                       {"files_per_client", plan.files},
                                       {"directories", plan.separate ? "separate" : "shared"},
                                       {"hold", plan.hold},
                                       {"capabilities", plan.capabilities},
                                       {"target", plan.local.empty() ? "pvfs" : "local"}});
    if (plan.compare != Compare::off) {
        out.set("compare", compare);
        out.set("block", plan.block);
    }
    int status = 0;
    cli::Json comparisons = cli::Json::object();
    for (std::size_t phase = 0; phase < phase_names.size(); ++phase) {
        const char *phase_name = phase_names[phase];
        // Under --compare a phase is several blocks, the clients in step; its
        // time is the sum of the blocks' (the waits between them left out).
        double secs = 0;
        std::int64_t error = 0;
        Comparison comparison;
        for (unsigned k = 0; k < block_count(plan, phase) && error == 0; ++k) {
            for (const UniqueFd &g : go_write) {
                const char go = 1;
                // A client that cannot be told to go reports no result: caught below.
                static_cast<void>(tools::write_all(g.get(), &go, 1));
            }
            std::int64_t first = INT64_MAX;
            std::int64_t last = 0;
            for (unsigned i = 0; i < clients; ++i) {
                Report r;
                if (!tools::read_all(results_read.get(), &r, sizeof r)) {
                    error = -EPIPE;
                    break;
                }
                first = std::min(first, r.start_ns);
                last = std::max(last, r.end_ns);
                if (r.error != 0 && error == 0)
                    error = r.error;
            }
            const double block_secs = last > first ? static_cast<double>(last - first) / 1e9 : 0;
            secs += block_secs;
            comparison.add(k, block_secs);
        }
        const double rate = secs > 0 ? static_cast<double>(ops) / secs : 0.0;
        cli::Json j = cli::Json::object({{"ops", ops}, {"seconds", secs}, {"ops_per_s", rate}});
        if (error != 0) {
            j.set("error", client::error_text(error));
            status = tools::exit_failure;
        }
        out.set(phase_name, j);
        if (error == 0 && compared(plan, phase)) {
            if (!json) {
                const auto [median, low, high] = comparison.spread();
                fmt::print("{} {} on/off: {} pairs, rate ratio median {:.3f} "
                           "(min {:.3f}, max {:.3f})\n",
                           phase_name, compare, comparison.ratios().size(), median, low, high);
            }
            comparisons.set(phase_name, comparison.json(std::uint64_t{plan.block} * clients));
        }
        if (!json) {
            if (error != 0) {
                fmt::print("{}: FAILED: {}\n", phase_name, client::error_text(error));
            } else {
                fmt::print("{} clients={} files={} dirs={} ops={} seconds={:.3f} ops/s={:.0f}\n",
                           phase_name, clients, plan.files, plan.separate ? "separate" : "shared",
                           ops, secs, rate);
            }
        }
    }
    if (plan.compare != Compare::off)
        out.set("comparison", std::move(comparisons));
    go_write.clear();
    for (const pid_t pid : pids)
        ::waitpid(pid, nullptr, 0);
    // Clean up the directories (children first).
    for (std::size_t i = dirs.size(); i-- > 0;) {
        if (plan.local.empty()) {
            Attr parent;
            std::string name;
            if (tools::resolve_parent(*c, dirs[i], parent, name) == 0)
                static_cast<void>(c->rmdir(parent.handle, name));
        } else {
            std::error_code ec;
            std::filesystem::remove_all(dirs[i], ec);
        }
    }
    if (json)
        std::cout << out.dump(2) << "\n";
    return status;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-mdtest", [&] { return run(argc, argv); });
}
