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
// 2 adds the bulk stages (BulkCounters).
inline constexpr std::uint16_t counters_version = 2;

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
// Where a data server's bulk chunks of one direction spent their time since
// it started (docs/metrics.md "Bulk stages"): a sum over chunks of the
// nanoseconds each spent in the stage, so a phase's delta over its wall time
// is how many chunks were in that stage on average.  network: a write's
// receive posted until its bytes were in (the rendezvous round trip
// included), a read's send posted until sent; storage: the chunk's store
// writes or reads submitted until all completed; queued (reads): read from
// storage, waiting for the chunks before it to be sent.
struct BulkCounters {
    std::uint64_t chunks = 0;
    std::uint64_t network_ns = 0;
    std::uint64_t storage_ns = 0;
    std::uint64_t queued_ns = 0;
    friend bool operator==(const BulkCounters &, const BulkCounters &) = default;
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
    // Version 2 on (zero in a version 1 answer).
    BulkCounters bulk_write;
    BulkCounters bulk_read;
    std::uint64_t buffer_waits = 0;   // requests that waited for chunk buffers
    std::uint64_t buffer_wait_ns = 0; // the sum of those waits
    friend bool operator==(const ServerCounters &, const ServerCounters &) = default;
};
} // namespace pvfs

#endif // PVFS_COUNTERS_HPP
