// pvfs-server's metrics (server_metrics.hpp).
#include "server_metrics.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "data_service.hpp"
#include "meta_service.hpp"

#ifndef PVFS_VERSION
#define PVFS_VERSION "unknown"
#endif

namespace pvfs::server {

static_assert(metrics::Histogram::finite_buckets + 1 == proto::max_latency_buckets);
static_assert(proto::op_count + 1 <= proto::max_counter_ops);

ServerMetrics::ServerMetrics(const config::Server &self, std::string path,
                             std::chrono::milliseconds interval)
    : server_(self.name), file_(registry_, std::move(path), interval)
{
    for (std::uint16_t v = 1; v <= proto::op_count; ++v) {
        const auto op = static_cast<proto::Op>(v);
        const bool common =
            op == proto::Op::get_config || op == proto::Op::status || op == proto::Op::statfs;
        if (common || (self.data && DataService::handles(op)) ||
            (self.metadata && MetaService::handles(op)))
            per_op(op);
    }
    const auto with = [&](const char *name, const char *value) {
        metrics::Labels l = labels();
        l.emplace_back(name, value);
        return l;
    };
    if (self.data) {
        constexpr const char *help = "File data moved by read and write requests answered "
                                     "successfully, in bytes.";
        bytes_read_ =
            &registry_.counter("pvfs_server_data_bytes_total", help, with("direction", "read"));
        bytes_written_ =
            &registry_.counter("pvfs_server_data_bytes_total", help, with("direction", "write"));
    }
    constexpr const char *dropped_help =
        "Requests dropped without an answer: unknown client key, undecodable (bad MAC, "
        "malformed), or a replay.";
    dropped_[static_cast<std::size_t>(Dropped::unknown_key)] = &registry_.counter(
        "pvfs_server_requests_dropped_total", dropped_help, with("reason", "unknown_key"));
    dropped_[static_cast<std::size_t>(Dropped::undecodable)] = &registry_.counter(
        "pvfs_server_requests_dropped_total", dropped_help, with("reason", "undecodable"));
    dropped_[static_cast<std::size_t>(Dropped::replayed)] = &registry_.counter(
        "pvfs_server_requests_dropped_total", dropped_help, with("reason", "replayed"));
    std::string roles = self.metadata ? "metadata" : "";
    if (self.data)
        roles += roles.empty() ? "data" : ",data";
    metrics::Labels info = labels();
    info.emplace_back("version", PVFS_VERSION);
    info.emplace_back("roles", roles);
    registry_
        .gauge("pvfs_server_info", "Always 1: the server's version and roles as labels.",
               std::move(info))
        .set(1);
    registry_
        .gauge("pvfs_server_start_time_seconds",
               "When the server started, in seconds since the "
               "Unix epoch.",
               labels())
        .set(static_cast<std::int64_t>(std::time(nullptr)));
}

ServerMetrics::~ServerMetrics() = default;

metrics::OpSeries &ServerMetrics::per_op(proto::Op op)
{
    auto index = static_cast<std::size_t>(op);
    if (index >= ops_.size())
        index = 0;
    if (!ops_[index])
        ops_[index] = std::make_unique<metrics::OpSeries>(registry_, "pvfs_server", labels(),
                                                          proto::op_name(op));
    return *ops_[index];
}

void ServerMetrics::answered(proto::Op op, int status, std::uint64_t arrived_ns)
{
    const std::uint64_t now = now_ns();
    per_op(op).answered(now > arrived_ns ? now - arrived_ns : 0, status);
}

void ServerMetrics::counters(proto::ServerCounters &out) const
{
    out.version = proto::counters_version;
    out.ops.clear();
    for (std::size_t i = 1; i < ops_.size() && out.ops.size() < proto::max_counter_ops; ++i) {
        if (!ops_[i])
            continue;
        const metrics::Histogram::Snapshot snap = ops_[i]->latency().snapshot();
        proto::OpCounters &o = out.ops.emplace_back();
        o.op = static_cast<std::uint16_t>(i);
        o.requests = ops_[i]->requests();
        o.errors = std::min(ops_[i]->errors(), o.requests);
        o.latency_ns = snap.sum_ns;
        o.buckets.assign(snap.buckets.begin(), snap.buckets.end());
    }
    out.read_bytes = bytes_read_ != nullptr ? bytes_read_->value() : 0;
    out.write_bytes = bytes_written_ != nullptr ? bytes_written_->value() : 0;
    out.dropped = 0;
    for (const metrics::Counter *c : dropped_)
        out.dropped += c->value();
}

bool resolve_metrics_options(const config::Server &self, const std::string &cli_file,
                             const std::string &cli_interval, std::string &file,
                             std::chrono::milliseconds &interval, std::string &error)
{
    file = self.metrics_file;
    interval = std::chrono::milliseconds(self.metrics_interval_ms);
    if (!cli_file.empty() &&
        !config::metrics_file_option(cli_file, self.name + ".prom", file, error))
        return false;
    if (!cli_interval.empty()) {
        std::uint32_t ms = 0;
        if (!config::metrics_interval_option(cli_interval, ms, error))
            return false;
        interval = std::chrono::milliseconds(ms);
    }
    return true;
}

} // namespace pvfs::server
