// Turns upcalls into libpvfs operations and their results into downcalls.
// One Client per mount (per ATTACH), even for the same file system.
#pragma once

#include "mount_options.hpp"
#include "upcall.hpp"

#include <pvfs/client.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
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
};

// Every upcall runs as a task on one client::Loop: any number are in flight
// at once, each with its caller's credentials; a CANCEL stops the requests
// of the op it names.
class Handler {
public:
    // slots: the mapped data slots, slot_count * slot_size bytes.
    Handler(HandlerOptions options, std::shared_ptr<client::Loop> loop, std::span<std::byte> slots,
            std::size_t slot_size);
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
    [[nodiscard]] std::size_t mounts() const noexcept { return clients_.size(); }

private:
    struct Op {
        Op(Handler &h, Upcall u) : handler(h), up(std::move(u)) {}
        Handler &handler;
        Upcall up; // the task's views point into it: never moved
        // The exactly-once ids of an op that changes something, which its
        // requests point to (Loop::set_context): lives as long as the task.
        client::OnceOp once;
        Task<std::vector<std::byte>> task;
        bool done = false;
        // The next op of the completion list (owned by ops_, as this one).
        Op *next_finished = nullptr;
    };
    // Puts the op on the completion list: take_finished need not look at
    // the ops still running, and nothing here can fail (no allocation).
    static void on_done(void *op) noexcept;
    Task<std::vector<std::byte>> run(Op &op);
    int attach(const Upcall &up, Downcall &out);
    // Not a coroutine: the op's own coroutine is what run awaits.
    Task<int> dispatch(const Upcall &up, client::Client &c, Downcall &out);

    HandlerOptions options_;
    std::shared_ptr<client::Loop> loop_;
    std::span<std::byte> slots_;
    std::size_t slot_size_;
    std::map<std::uint64_t, std::shared_ptr<client::Client>> clients_;
    std::map<std::uint64_t, MountPolicy> policies_;              // by mount, as clients_
    std::unordered_map<std::uint64_t, std::unique_ptr<Op>> ops_; // by tag
    // The ops finished and not yet taken, first finished first.
    Op *finished_first_ = nullptr;
    Op *finished_last_ = nullptr;
    std::size_t running_ = 0;
    std::size_t peak_ = 0;
    std::size_t cancels_ = 0;
};

} // namespace pvfs::pvfsd
