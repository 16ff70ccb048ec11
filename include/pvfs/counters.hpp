// A server's counters, as a status request with counters carries them
// (docs/protocol.md, op status) and pvfs-top shows them: the same values as
// the server's metrics file (docs/metrics.md), since the server started.
#ifndef PVFS_COUNTERS_HPP
#define PVFS_COUNTERS_HPP

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pvfs {

inline constexpr std::size_t max_counter_ops = 64;     // ops in one ServerCounters
inline constexpr std::size_t max_latency_buckets = 28; // metrics::Histogram's, +Inf included
inline constexpr std::uint16_t counters_version = 1;

struct OpCounters {
    std::uint16_t op = 0;         // a proto::Op value (perhaps one newer than this client's)
    std::uint64_t requests = 0;   // answered, errors included
    std::uint64_t errors = 0;     // answered with an error
    std::uint64_t latency_ns = 0; // sum of the answers' latencies
    // Answers by latency: bucket i holds those of at most 2^i us, the last
    // the rest (metrics::Histogram); at most max_latency_buckets.
    std::vector<std::uint64_t> buckets;
    friend bool operator==(const OpCounters &, const OpCounters &) = default;
};
struct ServerCounters {
    std::uint16_t version = counters_version; // 1..the request's counters
    std::vector<OpCounters> ops;              // at most max_counter_ops, op order
    std::uint64_t read_bytes = 0;             // data role: read and write requests'
    std::uint64_t write_bytes = 0;
    std::uint64_t dropped = 0;      // requests dropped without an answer
    std::uint64_t data_active = 0;  // data requests in progress
    std::uint64_t meta_pending = 0; // metadata changes not yet answered
    std::uint64_t meta_commits = 0; // metadata commits
    std::uint64_t replies_in_flight = 0;
    std::uint64_t connections = 0;
    friend bool operator==(const ServerCounters &, const ServerCounters &) = default;
};
} // namespace pvfs

#endif // PVFS_COUNTERS_HPP
