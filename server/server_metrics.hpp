// pvfs-server's metrics (docs/metrics.md): per request op a counter of
// answers, a counter of errors by errno and a latency histogram from the
// request's arrival to its answer's send; bytes moved; queue depths.  All
// series carry the server's name as label "server", so that the files of
// several servers on one host can sit in one node_exporter textfile
// directory.
//
// Always kept (a status request may ask for them: pvfs-top); written to a
// file only when one is configured ([[server]] metrics_file or
// --metrics-file).  The file is rewritten by the event loop every interval
// (tick) and removed when the server stops cleanly.
#ifndef PVFS_SERVER_SERVER_METRICS_HPP
#define PVFS_SERVER_SERVER_METRICS_HPP

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core.hpp"
#include "pvfs/config.hpp"
#include "pvfs/metrics.hpp"
#include "pvfs/proto.hpp"

namespace pvfs::server {

// Why a request was dropped without an answer.
enum class Dropped : std::uint8_t { unknown_key, undecodable, replayed, count };

class ServerMetrics {
public:
    // Registers the series of the ops that `self`'s roles serve; a request
    // of any other op gets its series when it is first answered.
    ServerMetrics(const config::Server &self, std::string path, std::chrono::milliseconds interval);
    // Removes the file, if it ever wrote it.
    ~ServerMetrics();
    ServerMetrics(const ServerMetrics &) = delete;
    ServerMetrics &operator=(const ServerMetrics &) = delete;
    ServerMetrics(ServerMetrics &&) = delete;
    ServerMetrics &operator=(ServerMetrics &&) = delete;

    // `path` empty: no file.
    // CLOCK_MONOTONIC in nanoseconds: when a request arrived (never 0).
    [[nodiscard]] static std::uint64_t now_ns() noexcept { return metrics::monotonic_ns(); }

    // A response to a request of `op` that arrived at `arrived_ns` goes out
    // with `status` (0 or a positive errno).
    void answered(proto::Op op, int status, std::uint64_t arrived_ns);
    void data_bytes(bool write, std::uint64_t bytes) noexcept
    {
        if (metrics::Counter *c = write ? bytes_written_ : bytes_read_)
            c->add(bytes);
    }
    void dropped(Dropped why) noexcept { dropped_[static_cast<std::size_t>(why)]->add(); }

    // For the server's gauges and counters read at render time.
    [[nodiscard]] metrics::Registry &registry() noexcept { return registry_; }
    [[nodiscard]] metrics::Labels labels() const { return {{"server", server_}}; }

    // Writes the file now: 0, or a positive errno with `error` set.
    int write(std::string &error) { return file_.write(error); }
    // Writes the file when an interval has passed since the last write;
    // failures are logged once until a write succeeds again.
    void tick(std::chrono::steady_clock::time_point now) { file_.tick(now); }

    [[nodiscard]] const std::string &path() const noexcept { return file_.path(); }

    // The per-op counters, bytes and drops into `out` (the caller adds the
    // gauges it reads itself).
    void counters(proto::ServerCounters &out) const;

private:
    metrics::OpSeries &per_op(proto::Op op);

    std::string server_;
    metrics::Registry registry_;
    metrics::MetricsFile file_; // after registry_, which it renders
    // index: the op's value, 0 for unknown
    std::array<std::unique_ptr<metrics::OpSeries>, proto::op_count + 1> ops_{};
    metrics::Counter *bytes_read_ = nullptr; // null without the data role
    metrics::Counter *bytes_written_ = nullptr;
    std::array<metrics::Counter *, static_cast<std::size_t>(Dropped::count)> dropped_{};
};

// The metrics file and interval of a server: the command line's, else the
// config's.  A command-line path is made absolute against the working
// directory and checked like the config's; the interval ("30s", "500ms")
// must lie in min_metrics_interval_ms..max_timeout_ms.  False with `error`
// set when one is bad.
bool resolve_metrics_options(const config::Server &self, const std::string &cli_file,
                             const std::string &cli_interval, std::string &file,
                             std::chrono::milliseconds &interval, std::string &error);

} // namespace pvfs::server

#endif // PVFS_SERVER_SERVER_METRICS_HPP
