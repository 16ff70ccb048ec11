// Metrics: counters, gauges and latency histograms kept in relaxed atomics,
// registered by name and labels in a Registry that renders them in the
// Prometheus text exposition format, version 0.0.4 (docs/metrics.md).
//
// The hot path touches only the metric objects: Counter::add,
// Gauge::set/add and Histogram::observe_ns are one or two relaxed atomic
// read-modify-writes, never a lock or an allocation.  Registering and
// rendering take the registry's mutex; references to registered metrics
// stay valid as long as the registry lives.
//
// Histograms have fixed log2 buckets: upper bounds 1 µs, 2 µs, 4 µs, ...
// 2^26 µs (about 67 s), and +Inf.  They count nanoseconds and render
// seconds, as Prometheus' base unit asks.
//
// Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
// [a-zA-Z_][a-zA-Z0-9_]* (not starting with "__", and "le" is the
// histograms' own); a bad name, or a name registered again with another
// type or help text, throws std::invalid_argument (a programming error,
// found when the registering code first runs).  Label values may be any
// text: the renderer escapes them.
#ifndef PVFS_METRICS_HPP
#define PVFS_METRICS_HPP

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pvfs::metrics {

// Label names and values, in the order they are rendered.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
public:
    void add(std::uint64_t n = 1) noexcept { value_.fetch_add(n, std::memory_order_relaxed); }
    [[nodiscard]] std::uint64_t value() const noexcept
    {
        return value_.load(std::memory_order_relaxed);
    }

private:
    std::atomic<std::uint64_t> value_{0};
};

class Gauge {
public:
    void set(std::int64_t v) noexcept { value_.store(v, std::memory_order_relaxed); }
    void add(std::int64_t d) noexcept { value_.fetch_add(d, std::memory_order_relaxed); }
    [[nodiscard]] std::int64_t value() const noexcept
    {
        return value_.load(std::memory_order_relaxed);
    }

private:
    std::atomic<std::int64_t> value_{0};
};

class Histogram {
public:
    // Finite buckets: bucket i holds observations of at most 2^i µs.
    static constexpr std::size_t finite_buckets = 27;

    // The bucket of an observation of `ns` nanoseconds; finite_buckets for
    // +Inf.
    [[nodiscard]] static constexpr std::size_t bucket_of(std::uint64_t ns) noexcept
    {
        const std::uint64_t us = ns / 1000 + (ns % 1000 != 0 ? 1 : 0); // rounded up
        if (us <= 1)
            return 0;
        const auto i = static_cast<std::size_t>(std::bit_width(us - 1)); // ceil(log2(us))
        return i < finite_buckets ? i : finite_buckets;
    }
    // The upper bound of finite bucket i, in microseconds.
    [[nodiscard]] static constexpr std::uint64_t bound_us(std::size_t i) noexcept
    {
        return std::uint64_t{1} << i;
    }

    void observe_ns(std::uint64_t ns) noexcept
    {
        buckets_[bucket_of(ns)].fetch_add(1, std::memory_order_relaxed);
        sum_ns_.fetch_add(ns, std::memory_order_relaxed);
    }

    // A consistent-enough copy for rendering: count is the sum of the
    // buckets, so _count and the +Inf bucket always agree.
    struct Snapshot {
        std::array<std::uint64_t, finite_buckets + 1> buckets{}; // not cumulative
        std::uint64_t sum_ns = 0;
        std::uint64_t count = 0;
    };
    [[nodiscard]] Snapshot snapshot() const noexcept;

private:
    std::array<std::atomic<std::uint64_t>, finite_buckets + 1> buckets_{};
    std::atomic<std::uint64_t> sum_ns_{0};
};

enum class Type : std::uint8_t { counter, gauge, histogram };

class Registry {
public:
    Registry() = default;
    Registry(const Registry &) = delete;
    Registry &operator=(const Registry &) = delete;
    Registry(Registry &&) = delete;
    Registry &operator=(Registry &&) = delete;
    ~Registry() = default;

    // The metric of that name and labels, made on first use.
    Counter &counter(std::string_view name, std::string_view help, Labels labels = {});
    Gauge &gauge(std::string_view name, std::string_view help, Labels labels = {});
    Histogram &histogram(std::string_view name, std::string_view help, Labels labels = {});

    // Values read when rendering (from the rendering thread), for what is
    // already counted elsewhere or cheap to compute only when asked.  A
    // second registration of the same name and labels replaces the function.
    void counter_fn(std::string_view name, std::string_view help, Labels labels,
                    std::function<std::uint64_t()> read);
    void gauge_fn(std::string_view name, std::string_view help, Labels labels,
                  std::function<std::int64_t()> read);

    // Every metric in the text exposition format 0.0.4, families sorted by
    // name, series in registration order.
    [[nodiscard]] std::string render() const;

private:
    struct Series {
        Labels labels;
        std::unique_ptr<Counter> counter;
        std::unique_ptr<Gauge> gauge;
        std::unique_ptr<Histogram> histogram;
        std::function<std::uint64_t()> read_counter;
        std::function<std::int64_t()> read_gauge;
    };
    struct Family {
        std::string help;
        Type type = Type::counter;
        std::vector<std::unique_ptr<Series>> series;
    };
    Series &series(std::string_view name, std::string_view help, Type type, Labels labels);

    mutable std::mutex mutex_;
    std::map<std::string, Family, std::less<>> families_;
};

// CLOCK_MONOTONIC in nanoseconds, never 0 (0 can mean "not timed").
[[nodiscard]] std::uint64_t monotonic_ns() noexcept;

// The series of one kind of request: PREFIX_requests_total (answers,
// errors included), PREFIX_request_duration_seconds (from its arrival to
// its answer) and PREFIX_errors_total by errno (E2BIG..., or "other"),
// each with `labels` and op=OP.  An errno's series is made on its first
// error; after that an answer is one or two relaxed atomic adds.
class OpSeries {
public:
    OpSeries(Registry &registry, std::string_view prefix, Labels labels, std::string_view op);
    // An answer `ns` nanoseconds after the request arrived, with `error` (0
    // or a positive errno).
    void answered(std::uint64_t ns, int error);

    // What is counted so far (read by the thread that answers).
    [[nodiscard]] std::uint64_t requests() const noexcept { return requests_.value(); }
    [[nodiscard]] std::uint64_t errors() const noexcept;
    [[nodiscard]] const Histogram &latency() const noexcept { return latency_; }

private:
    static constexpr std::size_t max_errno = 134; // larger ones share "other"
    Registry &registry_;
    std::string errors_name_;
    Labels labels_; // with op
    Counter &requests_;
    Histogram &latency_;
    std::array<Counter *, max_errno + 1> errors_{};
};

// A registry's file, rewritten every interval (write_file_atomically) and
// removed when this goes, if it ever wrote it.  With an empty path there is
// no file: write and tick do nothing (the metrics are kept for other
// readers, such as a server's status answer).
class MetricsFile {
public:
    MetricsFile(const Registry &registry, std::string path, std::chrono::milliseconds interval);
    ~MetricsFile();
    MetricsFile(const MetricsFile &) = delete;
    MetricsFile &operator=(const MetricsFile &) = delete;
    MetricsFile(MetricsFile &&) = delete;
    MetricsFile &operator=(MetricsFile &&) = delete;

    // Writes now: 0, or a positive errno with `error` set.
    int write(std::string &error);
    // Writes when an interval has passed since the last try; a failure is
    // logged once until a write succeeds again.
    void tick(std::chrono::steady_clock::time_point now);
    [[nodiscard]] const std::string &path() const noexcept { return path_; }

private:
    const Registry &registry_;
    std::string path_;
    std::chrono::milliseconds interval_;
    std::chrono::steady_clock::time_point next_write_{};
    bool failing_ = false;
    bool written_ = false; // the file is ours to remove
};

// Prometheus escaping: a label value escapes backslash, double quote and
// line feed; help text backslash and line feed.
[[nodiscard]] std::string escape_label_value(std::string_view text);
[[nodiscard]] std::string escape_help(std::string_view text);
[[nodiscard]] bool valid_metric_name(std::string_view name) noexcept;
[[nodiscard]] bool valid_label_name(std::string_view name) noexcept;

// Replaces the file at `path` with `text` atomically (written to a
// temporary file with a random name, created exclusively in the same
// directory, then renamed over it), as node_exporter's textfile collector
// wants: a reader sees the old file or the new one, never a part.  Not
// fsynced: the file is a snapshot that the next interval replaces anyway.
// Returns 0 or a positive errno, with `error` saying what failed.
int write_file_atomically(const std::string &path, std::string_view text, std::string &error);

} // namespace pvfs::metrics

#endif // PVFS_METRICS_HPP
