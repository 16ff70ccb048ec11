// pvfs-mdtest: metadata rates in the style of mdtest.  C client processes
// each create N empty files, then stat them, then remove them, either all
// in one shared directory or each in its own; the rate of each phase is all
// the operations over the time from the first client's start to the last
// client's end.  With --local DIR the same runs against a local directory
// (open(O_CREAT|O_EXCL)+close, stat, unlink), the baseline.
//
//   pvfs-mdtest -c cluster.toml --clients 4 --files 2000 --separate
//   pvfs-mdtest --local /tmp/md --clients 4 --files 2000
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

struct Plan {
    tools::Target target;
    std::string local; // non-empty: a local directory instead of pvfs
    std::string dir = "/pvfs-mdtest";
    unsigned files = 1000;
    bool separate = false;
    bool exactly_once = true;
    bool hold = false; // create as open(O_CREAT) through a mount does: holding the file open
};

// The kernel hands pvfsd its closes in batches of up to this many.
constexpr std::size_t close_batch = 64;

std::string client_dir(const Plan &p, unsigned id)
{
    return p.separate ? fmt::format("{}/c{}", p.dir, id) : p.dir;
}

// One phase against pvfs.
Report pvfs_phase(client::Client &c, Handle dir, unsigned id, const Plan &p, std::size_t phase)
{
    Report r;
    std::vector<Handle> held;
    r.start_ns = monotonic_ns();
    for (unsigned i = 0; i < p.files && r.error == 0; ++i) {
        const std::string name = fmt::format("f.{}.{}", id, i);
        Attr a;
        if (phase == 0 && p.hold) {
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

[[noreturn]] void client_main(const Plan &p, unsigned id, int go_fd, int result_fd)
{
    std::unique_ptr<client::Client> c;
    Handle dir = 0;
    std::int64_t setup = 0;
    if (p.local.empty()) {
        client::Options o;
        o.target = p.target.target;
        o.key_file = p.target.key_file;
        // Every stat must ask the server, as mdtest's would.
        o.attr_timeout = std::chrono::milliseconds(0);
        o.exactly_once = p.exactly_once;
        std::string error;
        c = client::Client::connect(o, error);
        Attr a;
        setup = !c ? -ENOTCONN : c->resolve(client_dir(p, id), a);
        dir = a.handle;
    }
    for (std::size_t phase = 0; phase < phase_names.size(); ++phase) {
        char go = 0;
        if (!tools::read_all(go_fd, &go, 1))
            ::_exit(1);
        Report r;
        if (setup != 0) {
            r.error = setup;
        } else if (p.local.empty()) {
            r = pvfs_phase(*c, dir, id, p, phase);
        } else {
            r = local_phase(client_dir(p, id), id, p.files, phase);
        }
        if (!tools::write_all(result_fd, &r, sizeof r))
            ::_exit(1);
    }
    ::_exit(0);
}

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
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;
    plan.exactly_once = !no_reply_cache;
    if (plan.hold && (no_reply_cache || !plan.local.empty())) {
        fmt::print(stderr, "pvfs-mdtest: --hold needs exactly-once ids and pvfs (not "
                           "--no-reply-cache or --local)\n");
        return tools::exit_usage;
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
                                       {"target", plan.local.empty() ? "pvfs" : "local"}});
    int status = 0;
    for (const char *phase_name : phase_names) {
        for (const UniqueFd &g : go_write) {
            const char go = 1;
            // A client that cannot be told to go reports no result: caught below.
            static_cast<void>(tools::write_all(g.get(), &go, 1));
        }
        std::int64_t first = INT64_MAX;
        std::int64_t last = 0;
        std::int64_t error = 0;
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
        const double secs = static_cast<double>(last - first) / 1e9;
        const double rate = secs > 0 ? static_cast<double>(ops) / secs : 0.0;
        cli::Json j = cli::Json::object({{"ops", ops}, {"seconds", secs}, {"ops_per_s", rate}});
        if (error != 0) {
            j.set("error", client::error_text(error));
            status = tools::exit_failure;
        }
        out.set(phase_name, j);
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
