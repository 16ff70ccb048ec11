// What every driver of the network benchmark shares: the command line, the
// result lines it prints and a few measuring helpers.  bench/net/DRIVERS.md
// is the contract; this header is its code.  A driver's main() calls
// parse(), then arm_timeout(), runs the pattern and prints one report_*()
// line per measured point from exactly one process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace bench {

enum class pattern { bw, lat, m2o };

// The fields of the command line (DRIVERS.md, "Command line").
struct options {
    pattern which = pattern::bw;
    unsigned reps = 3;      // repetitions of every point
    unsigned timeout = 600; // seconds before the driver gives up (all patterns)

    // bw and lat: message sizes in bytes
    std::vector<std::size_t> sizes;

    // bw: bytes per point, window of outstanding messages, its cap in bytes
    std::uint64_t total = 0;
    unsigned window = 16;
    std::uint64_t window_bytes = std::uint64_t{64} << 20;

    // lat: timed round trips per point and untimed ones before them
    unsigned iters = 1000;
    unsigned warmup = 100;

    // m2o: clients, request size, reply sizes (one series each), seconds
    // each client keeps sending per point
    unsigned clients = 2;
    std::size_t request = 128;
    std::vector<std::size_t> replies;
    double duration = 1.0;

    // bw: messages in flight for this size, max(1, min(window, window_bytes / size))
    [[nodiscard]] std::size_t window_for(std::size_t size) const;
    // bw: messages per point for this size, max(1, total / size)
    [[nodiscard]] std::uint64_t messages_for(std::size_t size) const;
    // bw, lat: the largest of sizes; m2o: the largest reply
    [[nodiscard]] std::size_t largest() const;
};

// A driver's own option with a string value (the BMI driver's --engine).
struct extra_option {
    std::string names; // "--engine"
    std::reference_wrapper<std::string> value;
    std::string help;
    std::vector<std::string> choices; // empty: any value
};

// Parses the command line into opts.  `extra` adds driver-specific
// options; only this file's implementation compiles CLI11.  Returns -1 to go
// on, else the exit status to stop with: 0 after --help, 2 on bad usage
// (message printed).
int parse(int argc, char **argv, std::string_view driver, options &opts,
          const std::vector<extra_option> &extra = {});

// After `seconds`, prints "<driver>: error: timed out after N s" and exits
// with status 124.  Not inherited by fork()ed children.
void arm_timeout(unsigned seconds);

// Prints "<driver>: error: <what>" on stderr.
void error(std::string_view what);

// Monotonic wall time, seconds.
double now();
// User + system CPU time of this process, all its threads, seconds.
double cpu_seconds();

// The result lines, on stdout, flushed at once (DRIVERS.md, "Output").
void report_bw(std::size_t size, unsigned rep, std::size_t window, std::uint64_t msgs,
               double seconds, double cpu);
void report_lat(std::size_t size, unsigned rep, unsigned iters, double seconds);
// The same, with each timed round trip (seconds): the line also gives their
// minimum, median and maximum in microseconds, as perftest's t_min,
// t_typical and t_max, so that a median is compared with a median.
void report_lat(std::size_t size, unsigned rep, double seconds, std::vector<double> round_trips);
void report_m2o(unsigned clients, std::size_t request, std::size_t reply, unsigned rep,
                unsigned client, std::uint64_t iters, double seconds);

// The exit status that means "this driver cannot run here" (the runner
// reports it as skipped, with the last line of stderr as the reason).
inline constexpr int exit_unsupported = 77;

} // namespace bench
