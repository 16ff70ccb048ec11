// Turns upcalls into libpvfs operations and their results into downcalls.
// One Client per mount (per ATTACH), even for the same file system.
// Attaching is a task like any op: a mount whose servers do not answer
// delays neither the other mounts' ATTACHes nor their ops.
#pragma once

#include "channel.hpp"
#include "daemon_metrics.hpp"
#include "mount_options.hpp"
#include "open_table.hpp"
#include "upcall.hpp"

#include <pvfs/client.hpp>

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace pvfs::pvfsd {

struct HandlerOptions {
    std::string key_file; // empty: libpvfs's default
    std::chrono::milliseconds request_timeout{0};
    // Benchmarks only (--no-exactly-once): the mounts' clients open no
    // session, so changes carry no reply-cache ids and OPEN holds nothing.
    bool exactly_once = true;
    // Counts each upcall's answer and writes the file from run_timers
    // (--metrics-file); null: none kept, nothing timed.  Outlives the
    // handler.
    DaemonMetrics *metrics = nullptr;
};

// Every upcall runs as a task on one client::Loop: any number are in flight
// at once, each with its caller's credentials; a CANCEL stops the requests
// of the op it names.  The Handler knows nothing of where upcalls come
// from: its front end (a Channel, driven by serve() or by hand) starts
// them and takes the downcalls; the Handler only uses the channel's slots
// and features.
class Handler {
public:
    // `channel` must outlive the handler.
    Handler(HandlerOptions options, std::shared_ptr<client::Loop> loop, Channel &channel);
    ~Handler();
    Handler(const Handler &) = delete;
    Handler &operator=(const Handler &) = delete;
    Handler(Handler &&) = delete;
    Handler &operator=(Handler &&) = delete;

    // Starts the work for an upcall (a CANCEL takes effect at once).
    void start(Upcall up);
    // The downcalls of the upcalls finished since the last call, in the
    // order they finished.
    [[nodiscard]] std::vector<std::vector<std::byte>> take_finished();

    [[nodiscard]] std::size_t in_flight() const noexcept { return running_; }
    [[nodiscard]] std::size_t peak_in_flight() const noexcept { return peak_; }
    [[nodiscard]] std::size_t cancels() const noexcept { return cancels_; }
    // Mounts attached (not those still attaching).
    [[nodiscard]] std::size_t mounts() const noexcept;

    // The backoff timers of replayed ATTACHes: how long the caller may
    // wait in Loop::poll (at most max_idle_ms), and resuming the ATTACHes
    // whose time has come.  Call run_timers after each poll (at least
    // once a second): it also renews the holds of mounts with open files
    // every lease / 3.
    [[nodiscard]] int idle_ms(int max_idle_ms) const;
    void run_timers();

private:
    using Clock = std::chrono::steady_clock;
    struct Op {
        Op(Handler &h, Upcall u) : handler(h), up(std::move(u)) {}
        Handler &handler;
        Upcall up; // the task's views point into it: never moved
        // The exactly-once ids of an op that changes something, which its
        // requests point to (Loop::set_context): lives as long as the task.
        client::OnceOp once;
        Task<std::vector<std::byte>> task;
        std::uint64_t arrived_ns = 0; // for the metrics; 0: not timed
        bool done = false;
        // The kernel cancelled it, or (an ATTACH) its mount went.
        bool cancelled = false;
        // Suspended on the handler itself (not on the loop): waiting for
        // its mount's ATTACH, or an ATTACH's backoff (wake_at).
        std::coroutine_handle<> parked;
        std::uint64_t parked_on_mount = 0;
        Clock::time_point wake_at{};
        // The next op of the completion list (owned by ops_, as this one).
        Op *next_finished = nullptr;
    };
    // A mount: its client once attached; its ATTACHes in flight; the ops
    // that came meanwhile (replayed to a new pvfsd), waiting for them.
    struct Mount {
        std::shared_ptr<client::Client> client;
        // The kernel's open files of the mount (OPEN, CLOSE): renewed
        // while there are any.
        std::shared_ptr<OpenTable> opens = std::make_shared<OpenTable>();
        std::vector<Op *> attaches;
        std::vector<Op *> waiters;
    };
    // co_await park_on(op, mount_id) / park_until(op, when): the op waits
    // for Handler to resume it (resume_parked).
    struct Park {
        Handler &h;
        Op &op;
        std::uint64_t mount_id = 0; // 0: a timer
        Clock::time_point when{};
        [[nodiscard]] bool await_ready() const noexcept { return op.cancelled; }
        void await_suspend(std::coroutine_handle<> waiter);
        void await_resume() const noexcept {}
    };
    // Puts the op on the completion list: take_finished need not look at
    // the ops still running, and nothing here can fail (no allocation).
    static void on_done(void *op) noexcept;
    Task<std::vector<std::byte>> run(Op &op);
    Task<int> co_attach(Op &op, Downcall &out);
    // Not a coroutine: the op's own coroutine is what run awaits.
    Task<int> dispatch(const Upcall &up, client::Client &c, Downcall &out);
    // Resumes a parked op with its own caller and cancel id on the loop.
    void resume_parked(Op &op);
    // Takes the op off whatever it is parked on and resumes it.
    void unpark(Op &op);
    void detach(std::uint64_t mount_id);
    // A renewal of a mount's holds, a task of its own (no kernel op).
    struct Renewal {
        std::shared_ptr<client::Client> client;
        std::shared_ptr<OpenTable> opens;
        Task<void> task;
        bool done = false;
    };
    static Task<void> renew(Renewal &r);
    void start_renewals();

    HandlerOptions options_;
    std::shared_ptr<client::Loop> loop_;
    Channel &channel_;
    std::map<std::uint64_t, Mount> clients_;        // by mount id
    std::map<std::uint64_t, MountPolicy> policies_; // by mount, as clients_
    std::multimap<Clock::time_point, Op *> timers_;
    std::list<Renewal> renewals_;                                // running or done, not yet reaped
    std::unordered_map<std::uint64_t, std::unique_ptr<Op>> ops_; // by tag
    // The ops finished and not yet taken, first finished first.
    Op *finished_first_ = nullptr;
    Op *finished_last_ = nullptr;
    std::size_t running_ = 0;
    std::size_t peak_ = 0;
    std::size_t cancels_ = 0;
};

} // namespace pvfs::pvfsd
