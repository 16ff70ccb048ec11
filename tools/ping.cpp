// pvfs-ping: asks every server of the file system whether it answers, what
// it runs and whether it serves the same config as the one this client got.
// Exit status 0 only when every server answers with the same config.
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "common.hpp"
#include "pvfs/config.hpp"
#include "pvfs/proto.hpp"

using namespace pvfs;

namespace {

cli::Json bulk_json(const BulkCounters &b, bool read)
{
    cli::Json j = cli::Json::object(
        {{"chunks", b.chunks}, {"network_ns", b.network_ns}, {"storage_ns", b.storage_ns}});
    if (read)
        j.set("queued_ns", b.queued_ns);
    return j;
}

// A server's counters since it started (pvfs/counters.hpp), for scripts
// that take the difference over a phase (bench/fs).
cli::Json counters_json(const ServerCounters &c)
{
    cli::Json ops = cli::Json::object();
    for (const OpCounters &o : c.ops) {
        ops.set(
            proto::op_name(static_cast<proto::Op>(o.op)),
            cli::Json::object(
                {{"requests", o.requests}, {"errors", o.errors}, {"latency_ns", o.latency_ns}}));
    }
    cli::Json j = cli::Json::object({{"version", c.version},
                                     {"ops", std::move(ops)},
                                     {"read_bytes", c.read_bytes},
                                     {"write_bytes", c.write_bytes},
                                     {"dropped", c.dropped},
                                     {"connections", c.connections}});
    if (c.version >= 2) {
        j.set("bulk_write", bulk_json(c.bulk_write, false));
        j.set("bulk_read", bulk_json(c.bulk_read, true));
        j.set("buffer_waits", c.buffer_waits);
        j.set("buffer_wait_ns", c.buffer_wait_ns);
    }
    return j;
}

} // namespace

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-ping: check that every server of a pvfs file system answers, runs the "
                    "same config, and how fast"};
    tools::Target target;
    bool json = false;
    bool counters = false;
    tools::add_target_options(app, target);
    app.flag("--json", json, "print the result as JSON");
    app.flag("--counters", counters,
             "with --json: each server's counters since it started (requests per op, bytes, "
             "where bulk chunks spent their time), as pvfs-top reads them");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    const auto client = tools::connect_or_exit("pvfs-ping", target);
    const auto hash = config::hash(client->cluster());
    if (counters && !json) {
        std::fprintf(stderr, "pvfs-ping: --counters needs --json\n");
        return tools::exit_usage;
    }
    const std::vector<client::ServerStatus> all = client->status_all(counters);
    bool ok = true;
    cli::Json out = cli::Json::array();
    for (const client::ServerStatus &s : all) {
        const bool same = s.error == 0 && s.status.config_hash == hash;
        ok = ok && same;
        std::string roles;
        if ((s.status.roles & client::role_metadata) != 0)
            roles += "metadata";
        if ((s.status.roles & client::role_data) != 0)
            roles += roles.empty() ? "data" : ",data";
        const double ms = static_cast<double>(s.round_trip.count()) / 1e6;
        if (json) {
            cli::Json j =
                cli::Json::object({{"name", s.name}, {"address", s.address}, {"ok", same}});
            if (s.error != 0) {
                j.set("error", client::error_text(s.error));
            } else {
                j.set("version", s.status.version);
                j.set("roles", roles);
                j.set("round_trip_ms", ms);
                j.set("config_identical", same);
                j.set("uptime_s", static_cast<double>(s.status.uptime_ns) / 1e9);
                if ((s.status.roles & client::role_data) != 0) {
                    j.set("bulk_message_bytes", s.status.bulk_message_bytes);
                    j.set("bulk_rdma_bytes", s.status.bulk_rdma_bytes);
                }
                if (s.status.counters)
                    j.set("counters", counters_json(*s.status.counters));
            }
            out.push(j);
            continue;
        }
        if (s.error != 0) {
            fmt::print("{:<16} {:<28} FAILED: {}\n", s.name, s.address,
                       client::error_text(s.error));
        } else {
            fmt::print("{:<16} {:<28} ok  {:>8.3f} ms  version {}  {}  config {}\n", s.name,
                       s.address, ms, s.status.version, roles, same ? "identical" : "DIFFERS");
        }
    }
    if (json)
        std::cout << out.dump(2) << "\n";
    else
        fmt::print("{}\n", ok ? "all servers answered with the same config"
                              : "some servers failed or differ");
    return ok ? 0 : tools::exit_failure;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-ping", [&] { return run(argc, argv); });
}
