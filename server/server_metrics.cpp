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
#include "pvfs/gossip.hpp"

#ifndef PVFS_VERSION
#define PVFS_VERSION "unknown"
#endif

namespace pvfs::server {

namespace {

using gossip::Mask;

constexpr const char *requests_help =
    "Requests answered, by op (counted when the answer is sent, errors included).";
constexpr const char *errors_help =
    "Requests answered with an error, by op and errno (E2BIG..., or a number).";
constexpr const char *latency_help =
    "Seconds from a request's arrival to the send of its answer, by op.";

std::string errno_label(std::size_t error)
{
    if (const char *name = ::strerrorname_np(static_cast<int>(error)))
        return name;
    return std::to_string(error);
}

} // namespace

ServerMetrics::ServerMetrics(const config::Server &self, std::string path,
                             std::chrono::milliseconds interval)
    : server_(self.name), path_(std::move(path)), interval_(interval)
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

ServerMetrics::~ServerMetrics()
{
    if (written_)
        static_cast<void>(::unlink(path_.c_str()));
}

std::uint64_t ServerMetrics::now_ns() noexcept
{
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000U +
           static_cast<std::uint64_t>(ts.tv_nsec) + 1;
}

ServerMetrics::PerOp &ServerMetrics::per_op(proto::Op op)
{
    auto index = static_cast<std::size_t>(op);
    if (index >= ops_.size())
        index = 0;
    PerOp &p = ops_[index];
    if (p.requests == nullptr) {
        metrics::Labels l = labels();
        l.emplace_back("op", proto::op_name(op));
        p.latency = &registry_.histogram("pvfs_server_request_duration_seconds", latency_help, l);
        p.requests = &registry_.counter("pvfs_server_requests_total", requests_help, std::move(l));
    }
    return p;
}

void ServerMetrics::answered(proto::Op op, int status, std::uint64_t arrived_ns)
{
    PerOp &p = per_op(op);
    const std::uint64_t now = now_ns();
    p.latency->observe_ns(now > arrived_ns ? now - arrived_ns : 0);
    p.requests->add();
    if (status == 0)
        return;
    const std::size_t e = status > 0 && static_cast<std::size_t>(status) < max_errno
                              ? static_cast<std::size_t>(status)
                              : max_errno;
    if (p.errors[e] == nullptr) {
        // Made on the first error of its kind only: the rest are one add.
        metrics::Labels l = labels();
        l.emplace_back("op", proto::op_name(op));
        l.emplace_back("errno", e == max_errno ? std::string("other") : errno_label(e));
        p.errors[e] = &registry_.counter("pvfs_server_errors_total", errors_help, std::move(l));
    }
    p.errors[e]->add();
}

int ServerMetrics::write(std::string &error)
{
    const int rc = metrics::write_file_atomically(path_, registry_.render(), error);
    written_ = written_ || rc == 0;
    return rc;
}

void ServerMetrics::tick(std::chrono::steady_clock::time_point now)
{
    if (now < next_write_)
        return;
    next_write_ = now + interval_;
    std::string error;
    if (write(error) != 0) {
        if (!failing_)
            gossip::error(Mask::server, "metrics file not written (tried every {} ms): {}",
                          interval_.count(), error);
        failing_ = true;
        return;
    }
    if (failing_)
        gossip::warning(Mask::server, "metrics file {} written again", path_);
    failing_ = false;
}

bool resolve_metrics_options(const config::Server &self, const std::string &cli_file,
                             const std::string &cli_interval, std::string &file,
                             std::chrono::milliseconds &interval, std::string &error)
{
    file = self.metrics_file;
    interval = std::chrono::milliseconds(self.metrics_interval_ms);
    if (!cli_file.empty()) {
        if (std::any_of(cli_file.begin(), cli_file.end(), [](char c) {
                const auto byte = static_cast<unsigned char>(c);
                return byte < 0x20 || byte == 0x7f;
            })) {
            error = "--metrics-file: the path contains a control character";
            return false;
        }
        std::error_code ec;
        const std::filesystem::path p = std::filesystem::absolute(cli_file, ec).lexically_normal();
        if (ec) {
            error = fmt::format("--metrics-file {}: {}", cli_file, ec.message());
            return false;
        }
        if (!p.has_filename() || p.filename() == "." || p.filename() == "..") {
            error = fmt::format("--metrics-file {}: names a directory; give a file, e.g. {}.prom",
                                cli_file, self.name);
            return false;
        }
        file = p.string();
    }
    if (!cli_interval.empty()) {
        const config::Quantity q = config::parse_duration_ms(cli_interval);
        if (!q.ok()) {
            error = "--metrics-interval: " + q.error;
            return false;
        }
        if (q.value < config::min_metrics_interval_ms || q.value > config::max_timeout_ms) {
            error = fmt::format("--metrics-interval: {} ms out of range {}ms..{}min", q.value,
                                config::min_metrics_interval_ms, config::max_timeout_ms / 60'000);
            return false;
        }
        interval = std::chrono::milliseconds(q.value);
    }
    return true;
}

} // namespace pvfs::server
