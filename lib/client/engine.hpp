// The request engine behind client::Loop: requests to servers (Rpc), run
// in batches that a coroutine awaits, progressed by poll().  Internal to
// lib/client; users see include/pvfs/client.hpp.
//
// A batch runs its requests with at most `depth` in flight per server (the
// pipeline of striped I/O), each batch bounded by a deadline.  Any number
// of batches of any number of tasks run at once: poll() reaps BMI
// completions, settles the requests they belong to, expires and cancels
// batches, and resumes the tasks whose batch has ended.  One thread; no
// locks.
#pragma once

#include <array>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bmi/bmi.hpp"
#include "pvfs/auth.hpp"
#include "pvfs/client.hpp"
#include "pvfs/proto.hpp"

namespace pvfs::client {

namespace detail {

using Clock = std::chrono::steady_clock;

struct Batch;

// The exactly-once identity of one metadata change that may take several
// requests (pvfsd's kernel op): each request that changes metadata gets
// the next step.
using OnceOp = client::OnceOp;

// Who a batch's requests are from, and the id a Loop::cancel names.
struct Context {
    Credentials cred;
    std::uint64_t cancel_id = 0;
    OnceOp *once = nullptr; // the caller's change, if it named one
};

// A posted bulk chunk: its BMI operation and its index in the stream.
using ChunkOp = std::pair<bmi::OpId, std::size_t>;

// One request to one server, with its bulk data if it has any.
struct Rpc {
    std::size_t server = 0;           // the client's index of the server
    const std::string *url = nullptr; // where it goes (set by the client)
    const proto::Key *key = nullptr;  // the file system's key
    proto::Request req;
    std::vector<std::byte> out;
    // The response's buffer, not zeroed: 16 KiB or more per request, which
    // a vector would clear for a reply of a few hundred bytes.
    std::unique_ptr<std::byte[]> in; // NOLINT(*-avoid-c-arrays)
    std::size_t in_capacity = 0;
    bmi::Addr to = bmi::no_addr; // the server's, once started
    bmi::Tag tag = 0;
    // Chunk MACs (docs/protocol.md "Chunk MACs"): the file system as the
    // MACs name it (set by the client; the server is `server`), and below
    // the retries for EKEYEXPIRED, whether none are asked for
    // (insecure_benchmark_only) and the session key this try's are under.
    std::uint32_t fs_id = 0;
    // A read's or write's memory, the request's stream in order, and how
    // it moves: exposed to the server when `rdma` (the server then reads or
    // writes it itself), else cut into bulk chunks of `chunk` bytes, each a
    // list of memory pieces.
    std::vector<bmi::MutableBuffer> pieces;
    bool is_write = false;
    bool rdma = false;
    std::uint32_t chunk = 0;
    bmi::Exposure exposure; // held until the response came
    std::vector<std::vector<bmi::ConstBuffer>> send_chunks;
    std::vector<std::vector<bmi::MutableBuffer>> recv_chunks;
    // Tags with their chunks (proto::ChunkMacs::with_chunks): chunk i's
    // tag lives in chunk_tags[i], the last piece of its chunk's list.  A
    // write's chunk is tagged just before it is posted, and its chunks are
    // posted as the sends before them complete (chunk_window at a time); a
    // read's chunk is checked as it arrives.
    bool tags_inline = false;
    std::vector<proto::ChunkMac> chunk_tags;
    std::size_t next_send = 0;      // the write chunk posted next
    std::size_t chunks_checked = 0; // read chunks whose tag matched
    std::vector<ChunkOp> chunk_ops; // posted chunks not yet completed

    std::vector<bmi::OpId> ops; // posted, not yet completed
    bmi::OpId recv_op = bmi::no_op;
    bool response_arrived = false;
    std::size_t response_size = 0;
    int error = 0; // a negative errno of the transport or the decoding
    bool launched = false;
    bool finished = false;
    proto::Response resp;
    Clock::time_point started{};
    Clock::time_point ended{};
    Batch *batch = nullptr; // while it runs
    // Retries (RetryPolicy): tries so far, the next wait, and when a
    // request waiting to be sent again goes.
    unsigned tries = 0;
    unsigned key_retries = 0;
    std::chrono::milliseconds backoff{0};
    bool waiting = false;
    bool no_macs = false;
    Clock::time_point retry_at{};
    proto::SessionKey mac_key{};

    // 0, or the negative errno of the transport or of the server.
    [[nodiscard]] int result() const noexcept
    {
        if (error != 0)
            return error;
        return resp.status != 0 ? -resp.status : 0;
    }
};

// When a request is sent again: after a transport failure (the server
// could not be reached, the connection broke or went idle) or `try_timeout`
// of silence (0: never for silence), with a backoff of 100 ms doubling to
// 10 s.  A hard batch has no deadline: only a cancel ends it.  Server
// answers are final, and so is any failure of a metadata change that
// carries no exactly-once ids (it may have run).
struct RetryPolicy {
    bool hard = false;
    std::chrono::milliseconds try_timeout{0};
};

// The requests of one co_await, and who waits for them.
struct Batch {
    std::vector<Rpc *> rpcs;
    unsigned depth = 0;
    std::chrono::milliseconds timeout{0};
    RetryPolicy retry;
    std::size_t waiting = 0;                                    // requests waiting to be sent again
    std::unordered_map<std::size_t, std::vector<Rpc *>> queues; // per server, popped from the back
    std::unordered_map<std::size_t, unsigned> in_flight;
    std::size_t unfinished = 0;
    Context context;
    Clock::time_point deadline{};
    bool stopping = false;           // timed out or cancelled: no new launches
    Clock::time_point drain_until{}; // when stopping: how long cancels may take
    bool suspended = false;
    std::coroutine_handle<> waiter;
};

} // namespace detail

struct Loop::Impl {
    using Clock = detail::Clock;
    std::unique_ptr<bmi::Bmi> bmi;
    std::shared_ptr<auth::Authenticator> auth; // installed in bmi: the clients' keys
    bmi::ContextId ctx = 0;
    detail::Context current; // of the task running now
    std::uint64_t session = 0;
    std::uint64_t seq = 0;
    std::uint64_t request_id = 0;
    bmi::Tag next_tag = 1;
    std::unordered_map<std::string, bmi::Addr> addrs; // by url and credential, on first use
    std::unordered_set<detail::Batch *> active;
    std::unordered_map<bmi::OpId, detail::Rpc *> ops; // posted, not yet reaped
    std::vector<detail::Batch *> ended;               // to resume at the end of poll()
    // poll()'s completions, kept: 64 cleared on every call (a pvfsd or a
    // tool polls again and again while it waits) cost more than the poll.
    // poll() is done with them before it resumes anyone who might poll.
    std::array<bmi::Completion, 64> completions{};
    std::size_t peak_batches = 0;
    std::vector<bmi::Registration> registrations; // Loop::register_memory

    // co_await run(rpcs, depth, timeout): every request answered, failed,
    // timed out or cancelled (each's result() says which).  The rpcs (with
    // url and key set) must outlive the await.  The batch is on the heap:
    // GCC 12 may move an awaiter byte by byte, which a standard container
    // (pointing into itself) does not survive.
    struct RunAwaiter {
        Impl *engine;
        std::unique_ptr<detail::Batch> batch;
        [[nodiscard]] bool await_ready() const noexcept { return batch->rpcs.empty(); }
        [[nodiscard]] bool await_suspend(std::coroutine_handle<> waiter) const;
        void await_resume() const noexcept {}
    };
    [[nodiscard]] RunAwaiter run(std::span<detail::Rpc *const> rpcs, unsigned depth,
                                 std::chrono::milliseconds timeout, detail::RetryPolicy retry = {});

    void poll(int max_idle_ms);
    std::size_t cancel(std::uint64_t cancel_id);

    // Runs a task to its end, polling meanwhile (the synchronous API).
    template <typename T> T wait(Task<T> task)
    {
        task.start();
        while (!task.done())
            poll(1000);
        return task.result();
    }

private:
    bmi::Addr addr_of(const std::string &url, const proto::Key &key, int &error);
    bmi::Tag take_tag();
    void track(detail::Rpc &r, const bmi::Post &p, bool is_response);
    void start(detail::Rpc &r, const detail::Context &context);
    void cancel_ops(const detail::Rpc &r) const;
    static void cut_chunks(detail::Rpc &r);
    void attach_data(detail::Rpc &r, bmi::Addr to) const;
    void attach_macs(detail::Rpc &r, bmi::Addr to) const;
    void post_sends(detail::Rpc &r);
    void post_recvs(detail::Rpc &r);
    void chunk_arrived(detail::Rpc &r, std::size_t index, std::size_t actual) const;
    static void reset_transfer(detail::Rpc &r);
    [[nodiscard]] bool read_macs_ok(detail::Rpc &r) const;
    [[nodiscard]] static bool key_retry(const detail::Batch &b, const detail::Rpc &r);
    void on_completion(detail::Rpc &r, const bmi::Completion &c);
    static void decode(detail::Rpc &r);
    void launch(detail::Batch &b, std::size_t server);
    void settle(detail::Batch &b, detail::Rpc &r);
    [[nodiscard]] static bool may_retry(const detail::Batch &b, const detail::Rpc &r,
                                        Clock::time_point now);
    void schedule_retry(detail::Batch &b, detail::Rpc &r, Clock::time_point now);
    void retry_due(detail::Batch &b, Clock::time_point now);
    void stop(detail::Batch &b, int error);
    void abandon(detail::Batch &b);
    void expire(Clock::time_point now);
    [[nodiscard]] int idle_ms(int max_idle_ms, Clock::time_point now) const;
    std::unordered_map<std::string, Clock::time_point> outage_logged; // per url
};

} // namespace pvfs::client
