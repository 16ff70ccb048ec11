// The data role of pvfs-server: the requests on data objects (read, write,
// fsync, object sizes, truncate, remove, list) over the object store, with
// the server-directed, pipelined bulk flow of docs/server.md.
//
// A read or write request describes regions of the object; its bytes move
// as separate BMI messages of at most `chunk` bytes on the request's data
// tag, chunk i carrying bytes [i * chunk, (i + 1) * chunk) of the request's
// stream (its regions, one after another).  Each request holds at most two
// chunk buffers from a bounded pool, so the network moves one chunk while
// the disk works on the other, and a request of any size costs the server
// two chunks of memory; requests that find the pool empty wait their turn.
//
// A request that carries an RDMA descriptor of the client's memory (the ib
// method) moves the same chunks without the client's help: the server
// RDMA-READs chunk i of a write from the client while it stores chunk i - 1,
// and RDMA-WRITEs chunk i of a read into the client while it reads chunk
// i + 1 from disk; the response goes after the last put completed.
#ifndef PVFS_SERVER_DATA_SERVICE_HPP
#define PVFS_SERVER_DATA_SERVICE_HPP

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "bmi/bmi.hpp"
#include "core.hpp"
#include "object_store.hpp"
#include "pvfs/counters.hpp"
#include "pvfs/proto.hpp"

namespace pvfs::server {

// The smallest chunk a request may ask for (as the config's bulk_chunk).
inline constexpr std::uint32_t min_chunk = 64U * 1024U;

struct DataOptions {
    std::uint32_t chunk = 1U << 20U; // the largest chunk a request may use
    std::size_t pool_chunks = 64;    // chunk buffers, all requests together
    // This server, as chunk MACs name it (proto::ChunkBinding).
    std::uint32_t fs_id = 0;
    std::uint32_t server_index = 0;
    // Test-only ($PVFS_TEST_TAMPER_READS): every read chunk is sent with a
    // byte flipped after its MAC was computed.
    bool tamper_reads = false;
    // [defaults] insecure_benchmark_only: bulk data without MACs accepted.
    bool macs_optional = false;
};

class DataService {
public:
    DataService(Loop &loop, data::ObjectStore store, const DataOptions &options);
    ~DataService();
    DataService(const DataService &) = delete;
    DataService &operator=(const DataService &) = delete;
    DataService(DataService &&) = delete;
    DataService &operator=(DataService &&) = delete;

    // Whether `op` is served here.
    [[nodiscard]] static bool handles(proto::Op op) noexcept;

    // Starts serving a request (its body is moved from).
    void handle(const Origin &origin, proto::RequestBody &body);

    // The store's completion fd, for the loop to watch.
    [[nodiscard]] int event_fd() const noexcept;
    // Reaps the store's completions and moves their requests on.
    void poll_store();
    // After the loop delivered BMI completions to flows (their user_ptr is
    // a Waiter): hands queued store operations to the kernel and frees
    // finished requests.
    void after_events();

    [[nodiscard]] data::StatFs statfs() const { return store_.statfs(); }
    // Requests in progress (bulk flows and fsyncs).
    [[nodiscard]] std::size_t active() const noexcept;
    // File data moved since start as bulk messages, and by RDMA.
    [[nodiscard]] std::uint64_t message_bytes() const noexcept { return message_bytes_; }
    [[nodiscard]] std::uint64_t rdma_bytes() const noexcept { return rdma_bytes_; }
    // Where bulk chunks spent their time since start (pvfs/counters.hpp
    // BulkCounters): what pvfs-ping --counters and the metrics show.
    struct BulkStats {
        BulkCounters write;
        BulkCounters read;
        std::uint64_t buffer_waits = 0;
        std::uint64_t buffer_wait_ns = 0;
    };
    [[nodiscard]] const BulkStats &bulk_stats() const noexcept { return bulk_; }

    struct Flow;

private:
    friend struct Flow;
    struct Fsync {
        Origin origin;
    };

    void start_flow(const Origin &origin, Handle handle, std::vector<proto::Region> regions,
                    std::uint32_t chunk, proto::Bytes inline_data, proto::Bytes rdma,
                    std::optional<proto::ChunkMacs> macs, bool is_write);
    void do_fsync(const Origin &origin, Handle handle);
    void finish_flow(Flow &flow);
    void sweep();

    // The buffer pool.
    bool take_buffer(bmi::Memory &out);
    void give_buffer(bmi::Memory buffer);

    Loop &loop_;
    data::ObjectStore store_;
    DataOptions options_;
    std::vector<bmi::Memory> free_buffers_;
    std::size_t buffers_made_ = 0;
    std::deque<std::uint64_t> waiting_; // flows waiting for a buffer, in order
    std::uint64_t next_id_ = 1;
    std::unordered_map<std::uint64_t, std::unique_ptr<Flow>> flows_;
    std::unordered_map<std::uint64_t, Fsync> fsyncs_;
    std::vector<data::Completion> reaped_;
    std::uint64_t message_bytes_ = 0;
    std::uint64_t rdma_bytes_ = 0;
    BulkStats bulk_;
};

} // namespace pvfs::server

#endif // PVFS_SERVER_DATA_SERVICE_HPP
