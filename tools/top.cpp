// pvfs-top: the cluster live, as iostat shows disks.  Every interval it asks
// every server of the config for its counters (a status request with
// counters, docs/protocol.md) and prints, per server and for the cluster,
// the rates over that interval: requests/s by op, errors/s, file data read
// and written per second, latency (p50, p99 from the latency histograms'
// buckets, and the mean), and the queues.  pvfs-top's own status requests
// are left out of the rates.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common.hpp"
#include "pvfs/config.hpp"
#include "pvfs/proto.hpp"

using namespace pvfs;

namespace {

using Clock = std::chrono::steady_clock;

// One poll of every server.
struct Sample {
    Clock::time_point at;
    std::vector<client::ServerStatus> servers;
};

// What an op (or a server's ops together) did over one interval.
struct Rate {
    double requests = 0; // per second
    double errors = 0;
    std::uint64_t count = 0;      // answers in the interval
    std::uint64_t latency_ns = 0; // their latencies' sum
    std::vector<std::uint64_t> buckets = std::vector<std::uint64_t>(proto::max_latency_buckets);

    void add(const Rate &o)
    {
        requests += o.requests;
        errors += o.errors;
        count += o.count;
        latency_ns += o.latency_ns;
        for (std::size_t i = 0; i < buckets.size(); ++i)
            buckets[i] += o.buckets[i];
    }
    // The q-quantile in microseconds, interpolated inside its bucket as
    // Prometheus' histogram_quantile does; -1 without answers, and the
    // last finite bound when it falls in the +Inf bucket.
    [[nodiscard]] double quantile_us(double q) const
    {
        if (count == 0)
            return -1;
        const double rank = q * static_cast<double>(count);
        // Bucket i holds answers of (2^(i-1), 2^i] us; bucket 0 [0, 1].
        const auto lower = [](std::size_t i) {
            return i == 0 ? 0.0 : std::ldexp(1.0, static_cast<int>(i) - 1);
        };
        std::uint64_t below = 0;
        for (std::size_t i = 0; i < buckets.size(); ++i) {
            const std::uint64_t n = buckets[i];
            if (n > 0 && static_cast<double>(below + n) >= rank) {
                if (i + 1 == buckets.size())
                    return lower(i);
                const double lo = lower(i);
                const double hi = std::ldexp(1.0, static_cast<int>(i));
                return lo +
                       (hi - lo) * (rank - static_cast<double>(below)) / static_cast<double>(n);
            }
            below += n;
        }
        return lower(buckets.size() - 1);
    }
    [[nodiscard]] double mean_us() const
    {
        return count == 0 ? -1 : static_cast<double>(latency_ns) / 1e3 / static_cast<double>(count);
    }
};

// Later minus earlier, or the later value itself when the counter went
// back (the server restarted in between).
std::uint64_t delta(std::uint64_t later, std::uint64_t earlier)
{
    return later >= earlier ? later - earlier : later;
}

// A server over one interval.
struct ServerReport {
    std::string name;
    std::string roles;
    int error = 0;
    Rate all;                          // every op but status
    std::map<std::string, Rate> by_op; // ops with answers in the interval
    double read_bytes = 0;             // per second
    double write_bytes = 0;
    double dropped = 0;
    std::uint64_t read_total = 0; // since the server started
    std::uint64_t write_total = 0;
    std::uint64_t requests_total = 0;
    std::uint64_t queue = 0; // data requests active and metadata changes pending
    std::uint64_t replies_in_flight = 0;
    std::uint64_t connections = 0;
};

std::string roles_text(std::uint32_t roles)
{
    const bool meta = (roles & client::role_metadata) != 0;
    const bool data = (roles & client::role_data) != 0;
    return meta && data ? "meta+data" : meta ? "meta" : data ? "data" : "-";
}

const OpCounters *find_op(const ServerCounters &c, std::uint16_t op)
{
    for (const OpCounters &o : c.ops) {
        if (o.op == op)
            return &o;
    }
    return nullptr;
}

ServerReport report(const client::ServerStatus &before, const client::ServerStatus &now,
                    double seconds)
{
    ServerReport r;
    r.name = now.name;
    r.error = now.error != 0 ? now.error : before.error;
    if (r.error == 0 && (!now.status.counters || !before.status.counters))
        r.error = -EPROTO;
    if (r.error != 0)
        return r;
    r.roles = roles_text(now.status.roles);
    const ServerCounters &a = *before.status.counters;
    const ServerCounters &b = *now.status.counters;
    // A restart between the samples: everything counts from zero.
    const bool restarted = now.status.uptime_ns < before.status.uptime_ns;
    const ServerCounters none;
    const ServerCounters &base = restarted ? none : a;
    for (const OpCounters &o : b.ops) {
        r.requests_total += o.requests;
        if (o.op == static_cast<std::uint16_t>(proto::Op::status))
            continue; // pvfs-top's own
        const OpCounters *p = find_op(base, o.op);
        const OpCounters zero;
        const OpCounters &prev = p != nullptr ? *p : zero;
        Rate rate;
        rate.count = delta(o.requests, prev.requests);
        if (rate.count == 0)
            continue;
        rate.requests = static_cast<double>(rate.count) / seconds;
        rate.errors = static_cast<double>(delta(o.errors, prev.errors)) / seconds;
        rate.latency_ns = delta(o.latency_ns, prev.latency_ns);
        for (std::size_t i = 0; i < o.buckets.size() && i < rate.buckets.size(); ++i)
            rate.buckets[i] = delta(o.buckets[i], i < prev.buckets.size() ? prev.buckets[i] : 0);
        r.all.add(rate);
        r.by_op.emplace(proto::op_name(static_cast<proto::Op>(o.op)), std::move(rate));
    }
    r.read_bytes = static_cast<double>(delta(b.read_bytes, base.read_bytes)) / seconds;
    r.write_bytes = static_cast<double>(delta(b.write_bytes, base.write_bytes)) / seconds;
    r.dropped = static_cast<double>(delta(b.dropped, base.dropped)) / seconds;
    r.read_total = b.read_bytes;
    r.write_total = b.write_bytes;
    r.queue = b.data_active + b.meta_pending;
    r.replies_in_flight = b.replies_in_flight;
    r.connections = b.connections;
    return r;
}

std::string latency_text(double us)
{
    if (us < 0)
        return "-";
    if (us < 1000)
        return fmt::format("{:.0f}us", us);
    if (us < 1e6)
        return fmt::format("{:.1f}ms", us / 1e3);
    return fmt::format("{:.2f}s", us / 1e6);
}

std::string rate_bytes(double b)
{
    return tools::human_bytes(static_cast<std::uint64_t>(std::llround(b)));
}

double ms_or_zero(double us)
{
    return us < 0 ? 0.0 : us / 1e3;
}

cli::Json rate_json(const Rate &r)
{
    return cli::Json::object({{"ops_per_s", r.requests},
                              {"errors_per_s", r.errors},
                              {"p50_ms", ms_or_zero(r.quantile_us(0.5))},
                              {"p99_ms", ms_or_zero(r.quantile_us(0.99))},
                              {"mean_ms", ms_or_zero(r.mean_us())}});
}

constexpr const char *line_format = "{:<16} {:<9} {:>9} {:>7} {:>11} {:>11} {:>8} {:>8} {:>8} "
                                    "{:>5} {:>5}\n";

void print_rate_line(const std::string &name, const std::string &roles, const Rate &r,
                     const std::string &read, const std::string &write, const std::string &queue,
                     const std::string &conns)
{
    std::string line =
        fmt::format(fmt::runtime(line_format), name, roles, fmt::format("{:.1f}", r.requests),
                    fmt::format("{:.1f}", r.errors), read, write, latency_text(r.quantile_us(0.5)),
                    latency_text(r.quantile_us(0.99)), latency_text(r.mean_us()), queue, conns);
    // The per-op lines leave the last columns empty.
    while (line.size() > 1 && line[line.size() - 2] == ' ')
        line.erase(line.size() - 2, 1);
    fmt::print("{}", line);
}

struct Options {
    bool json = false;
    bool clear = false;
    bool summary = false;
};

// Prints one report; false when a server did not answer.
bool print_report(const Options &o, const std::string &fs, const Sample &before, const Sample &now)
{
    const double seconds =
        std::max(1e-3, std::chrono::duration<double>(now.at - before.at).count());
    std::vector<ServerReport> reports;
    reports.reserve(now.servers.size());
    for (std::size_t i = 0; i < now.servers.size() && i < before.servers.size(); ++i)
        reports.push_back(report(before.servers[i], now.servers[i], seconds));
    bool ok = true;
    ServerReport total;
    total.name = "TOTAL";
    for (const ServerReport &r : reports) {
        if (r.error != 0) {
            ok = false;
            continue;
        }
        total.all.add(r.all);
        total.read_bytes += r.read_bytes;
        total.write_bytes += r.write_bytes;
        total.read_total += r.read_total;
        total.write_total += r.write_total;
        total.queue += r.queue;
        total.connections += r.connections;
    }
    const std::time_t wall = std::time(nullptr);
    if (o.json) {
        cli::Json servers = cli::Json::array();
        for (const ServerReport &r : reports) {
            if (r.error != 0) {
                servers.push(cli::Json::object(
                    {{"name", r.name}, {"ok", false}, {"error", client::error_text(r.error)}}));
                continue;
            }
            cli::Json j = rate_json(r.all);
            j.set("name", r.name).set("ok", true).set("roles", r.roles);
            j.set("read_bytes_per_s", r.read_bytes).set("write_bytes_per_s", r.write_bytes);
            j.set("read_bytes", r.read_total).set("write_bytes", r.write_total);
            j.set("requests", r.requests_total).set("dropped_per_s", r.dropped);
            j.set("queue", r.queue).set("replies_in_flight", r.replies_in_flight);
            j.set("connections", r.connections);
            cli::Json ops = cli::Json::object();
            for (const auto &[name, rate] : r.by_op)
                ops.set(name, rate_json(rate));
            j.set("ops", std::move(ops));
            servers.push(std::move(j));
        }
        cli::Json t = rate_json(total.all);
        t.set("read_bytes_per_s", total.read_bytes).set("write_bytes_per_s", total.write_bytes);
        t.set("queue", total.queue);
        const cli::Json out = cli::Json::object({{"filesystem", fs},
                                                 {"time", static_cast<std::int64_t>(wall)},
                                                 {"interval_s", seconds},
                                                 {"servers", std::move(servers)},
                                                 {"total", std::move(t)}});
        std::cout << out.dump(-1) << std::endl;
        return ok;
    }
    std::tm tm{};
    ::localtime_r(&wall, &tm);
    char clock[16] = {};
    std::strftime(clock, sizeof clock, "%H:%M:%S", &tm);
    if (o.clear)
        fmt::print("\033[H\033[2J");
    fmt::print("pvfs-top  {}  {}  interval {:.2f} s\n", fs, clock, seconds);
    fmt::print(fmt::runtime(line_format), "server", "roles", "ops/s", "err/s", "read/s", "write/s",
               "p50", "p99", "mean", "queue", "conns");
    for (const ServerReport &r : reports) {
        if (r.error != 0) {
            fmt::print("{:<16} FAILED: {}\n", r.name, client::error_text(r.error));
            continue;
        }
        print_rate_line(r.name, r.roles, r.all, rate_bytes(r.read_bytes), rate_bytes(r.write_bytes),
                        std::to_string(r.queue), std::to_string(r.connections));
        if (o.summary)
            continue;
        for (const auto &[name, rate] : r.by_op)
            print_rate_line("  " + name, "", rate, "", "", "", "");
    }
    print_rate_line("TOTAL", "", total.all, rate_bytes(total.read_bytes),
                    rate_bytes(total.write_bytes), std::to_string(total.queue),
                    std::to_string(total.connections));
    fmt::print("\n");
    std::fflush(stdout);
    return ok;
}

// "2s", "500ms", or a number of seconds ("0.5", "2"), as iostat takes it.
bool parse_interval(const std::string &text, std::chrono::milliseconds &out)
{
    if (!text.empty() && text.find_first_not_of("0123456789.") == std::string::npos) {
        char *end = nullptr;
        const double s = std::strtod(text.c_str(), &end);
        if (end == nullptr || *end != '\0' || !(s > 0) || s > 86400)
            return false;
        out = std::chrono::milliseconds(std::llround(s * 1000));
    } else {
        const config::Quantity q = config::parse_duration_ms(text);
        if (!q.ok() || q.value == 0 || q.value > 86'400'000)
            return false;
        out = std::chrono::milliseconds(q.value);
    }
    return out.count() >= 100;
}

int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-top: show each server's requests, data rates, errors, latency and "
                    "queues, every interval (as iostat)"};
    tools::Target target;
    Options o;
    std::string interval_text = "2s";
    unsigned count = 0;
    bool once = false;
    bool batch = false;
    tools::add_target_options(app, target);
    app.option("-i,--interval", interval_text,
               "time between reports: 2s, 500ms, or seconds (at least 100ms; default 2s)");
    app.option("-n,--count", count, "print this many reports, then exit (default: until killed)");
    app.flag("--once", once, "print one report, as plain text, then exit (-n 1 -b)");
    app.flag("-b,--batch", batch,
             "plain successive reports, no screen clearing (the default when not on a terminal)");
    app.flag("-s,--summary", o.summary, "one line per server, without the per-op lines");
    app.flag("--json", o.json, "one JSON object per report, one a line");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;
    std::chrono::milliseconds interval{};
    if (!parse_interval(interval_text, interval)) {
        std::fprintf(stderr, "pvfs-top: --interval: '%s' is not a duration of 100ms..1 day\n",
                     interval_text.c_str());
        return tools::exit_usage;
    }
    if (once) {
        count = 1;
        batch = true;
    }
    o.clear = !batch && !o.json && ::isatty(STDOUT_FILENO) == 1;

    const auto client = tools::connect_or_exit("pvfs-top", target);
    const std::string fs = client->cluster().fs_name;
    Sample before{Clock::now(), client->status_all(true)};
    bool ok = true;
    for (unsigned n = 0; count == 0 || n < count; ++n) {
        std::this_thread::sleep_until(before.at + interval);
        Sample now{Clock::now(), client->status_all(true)};
        ok = print_report(o, fs, before, now);
        before = std::move(now);
    }
    return ok ? 0 : tools::exit_failure;
}

} // namespace

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-top", [&] { return run(argc, argv); });
}
