// The client daemons' metrics (pvfsd, pvfs-fuse; docs/metrics.md): per
// upcall op a counter of answers, a latency histogram from the upcall's
// arrival to its downcall and a counter of errors by errno; file data
// read and written; ops in flight, cancels and mounts, read when the file
// is written.  Series carry the daemon's name and the host as labels.
//
// Kept only when the daemon is given --metrics-file: the Handler gets no
// DaemonMetrics otherwise, and upcalls are not even timed.
#ifndef PVFS_PVFSD_DAEMON_METRICS_HPP
#define PVFS_PVFSD_DAEMON_METRICS_HPP

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "pvfs/metrics.hpp"
#include "pvfs/pvfsd_dev.h"

namespace pvfs::pvfsd {

class DaemonMetrics {
public:
    // `daemon`: "pvfsd" or "pvfs-fuse".
    DaemonMetrics(std::string daemon, std::string path, std::chrono::milliseconds interval);
    // From the command line's --metrics-file (empty: none, and nullptr
    // with `error` empty) and --metrics-interval (empty: 10s; 100ms..one
    // day): the file is written once at once, so that a bad path is an
    // error at start, not a log line later.  nullptr with `error` set when
    // either is bad.
    [[nodiscard]] static std::unique_ptr<DaemonMetrics> from_options(std::string daemon,
                                                                     const std::string &file,
                                                                     const std::string &interval,
                                                                     std::string &error);
    ~DaemonMetrics();
    DaemonMetrics(const DaemonMetrics &) = delete;
    DaemonMetrics &operator=(const DaemonMetrics &) = delete;
    DaemonMetrics(DaemonMetrics &&) = delete;
    DaemonMetrics &operator=(DaemonMetrics &&) = delete;

    // The downcall of an upcall that arrived at `arrived_ns`
    // (metrics::monotonic_ns) is sent: its op, status and, for READ and
    // WRITE, bytes are read from it.
    void answered(std::span<const std::byte> downcall, std::uint64_t arrived_ns);

    [[nodiscard]] metrics::Registry &registry() noexcept { return registry_; }
    [[nodiscard]] metrics::Labels labels() const;

    int write(std::string &error) { return file_.write(error); }
    void tick(std::chrono::steady_clock::time_point now) { file_.tick(now); }
    [[nodiscard]] const std::string &path() const noexcept { return file_.path(); }

private:
    std::string daemon_;
    std::string host_;
    metrics::Registry registry_;
    metrics::MetricsFile file_; // after registry_, which it renders
    std::array<std::unique_ptr<metrics::OpSeries>, PVFSD_OP_COUNT> ops_{}; // index: the op
    metrics::Counter &bytes_read_;
    metrics::Counter &bytes_written_;
};

} // namespace pvfs::pvfsd

#endif // PVFS_PVFSD_DAEMON_METRICS_HPP
