// The client daemons' metrics (daemon_metrics.hpp).
#include "daemon_metrics.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "pvfs/config.hpp"
#include "upcall.hpp"

#ifndef PVFS_VERSION
#define PVFS_VERSION "unknown"
#endif

namespace pvfs::pvfsd {

namespace {

std::string host_name()
{
    std::array<char, 256> name{};
    if (::gethostname(name.data(), name.size() - 1) != 0)
        return "unknown";
    return name.data();
}

constexpr const char *bytes_help =
    "File data moved by READ and WRITE upcalls answered successfully, in bytes.";

} // namespace

DaemonMetrics::DaemonMetrics(std::string daemon, std::string path,
                             std::chrono::milliseconds interval)
    : daemon_(std::move(daemon)), host_(host_name()), file_(registry_, std::move(path), interval),
      bytes_read_(registry_.counter("pvfs_client_data_bytes_total", bytes_help,
                                    [&] {
                                        metrics::Labels l = labels();
                                        l.emplace_back("direction", "read");
                                        return l;
                                    }())),
      bytes_written_(registry_.counter("pvfs_client_data_bytes_total", bytes_help, [&] {
          metrics::Labels l = labels();
          l.emplace_back("direction", "write");
          return l;
      }()))
{
    // Every op's series from the start, so that a rate over a quiet op is 0
    // rather than absent.
    for (unsigned op = PVFSD_OP_ATTACH; op < PVFSD_OP_COUNT; ++op) {
        if (op == PVFSD_OP_CANCEL)
            continue; // answered by no downcall
        ops_[op] =
            std::make_unique<metrics::OpSeries>(registry_, "pvfs_client", labels(), op_name(op));
    }
    metrics::Labels info = labels();
    info.emplace_back("version", PVFS_VERSION);
    registry_
        .gauge("pvfs_client_info", "Always 1: the daemon's version as a label.", std::move(info))
        .set(1);
    registry_
        .gauge("pvfs_client_start_time_seconds",
               "When the daemon started, in seconds since the Unix epoch.", labels())
        .set(static_cast<std::int64_t>(std::time(nullptr)));
}

DaemonMetrics::~DaemonMetrics() = default;

std::unique_ptr<DaemonMetrics> DaemonMetrics::from_options(std::string daemon,
                                                           const std::string &file,
                                                           const std::string &interval,
                                                           std::string &error)
{
    error.clear();
    if (file.empty()) {
        if (!interval.empty())
            error = "--metrics-interval without --metrics-file";
        return nullptr;
    }
    std::string path;
    if (!config::metrics_file_option(file, daemon + ".prom", path, error))
        return nullptr;
    std::uint32_t every_ms = config::default_metrics_interval_ms;
    if (!interval.empty() && !config::metrics_interval_option(interval, every_ms, error))
        return nullptr;
    auto m = std::make_unique<DaemonMetrics>(std::move(daemon), path,
                                             std::chrono::milliseconds(every_ms));
    std::string why;
    if (m->write(why) != 0) {
        error = "metrics file " + why;
        return nullptr;
    }
    return m;
}

metrics::Labels DaemonMetrics::labels() const
{
    return {{"daemon", daemon_}, {"host", host_}};
}

void DaemonMetrics::answered(std::span<const std::byte> downcall, std::uint64_t arrived_ns)
{
    pvfsd_msg_hdr hdr{};
    if (downcall.size() < sizeof(hdr))
        return;
    std::memcpy(&hdr, downcall.data(), sizeof(hdr));
    if (hdr.op >= ops_.size() || !ops_[hdr.op])
        return;
    const std::uint64_t now = metrics::monotonic_ns();
    ops_[hdr.op]->answered(now > arrived_ns ? now - arrived_ns : 0,
                           hdr.status < 0 ? -hdr.status : 0);
    if (hdr.status != 0 || (hdr.op != PVFSD_OP_READ && hdr.op != PVFSD_OP_WRITE))
        return;
    pvfsd_io_resp io{};
    if (downcall.size() < sizeof(hdr) + sizeof(io))
        return;
    std::memcpy(&io, downcall.data() + sizeof(hdr), sizeof(io));
    (hdr.op == PVFSD_OP_READ ? bytes_read_ : bytes_written_).add(io.done);
}

} // namespace pvfs::pvfsd
