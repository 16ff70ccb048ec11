// The files a mount holds open (OPEN/CLOSE from the kernel): what pvfsd
// renews with the metadata servers, and what libpvfs re-opens after one of
// them restarted (docs/pvfsd.md "Open files").
#pragma once

#include <pvfs/types.hpp>

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pvfs::pvfsd {

struct OpenTable {
    struct Entry {
        std::uint64_t gen = 0;   // the kernel's latest OPEN of it
        std::uint32_t mode = 0;  // PVFSD_OPEN_* it is open for
        std::uint32_t opens = 0; // Client::co_open calls that succeeded
        std::uint64_t epoch = 0; // which open of the handle this entry is
    };
    std::unordered_map<Handle, Entry> entries;
    std::uint64_t next_epoch = 1;
    // Renewals: the next one (zero: none due, nothing held), and whether
    // one is running.
    std::chrono::steady_clock::time_point next_renew{};
    bool renewing = false;

    // OPENs of a handle still running, and the CLOSEs of it that wait for
    // them: a CLOSE must not reach the metadata server before the hold it
    // ends (an OPEN's request may overtake or trail it), nor be answered
    // while that OPEN could still add the hold (docs/metadata.md "Open
    // references across a pvfsd restart").
    struct Busy {
        std::uint32_t opens = 0;
        std::vector<std::coroutine_handle<>> waiters;
    };
    std::unordered_map<Handle, Busy> busy;

    // co_await table.settled(handle): resumes once no OPEN of it runs.
    struct Settled {
        OpenTable &table;
        Handle handle;
        [[nodiscard]] bool await_ready() const { return !table.busy.contains(handle); }
        void await_suspend(std::coroutine_handle<> waiter) const
        {
            table.busy.at(handle).waiters.push_back(waiter);
        }
        void await_resume() const noexcept {}
    };
    [[nodiscard]] Settled settled(Handle handle) { return Settled{*this, handle}; }

    void open_starts(Handle handle) { ++busy[handle].opens; }
    // The OPEN's last act: its CLOSEs run on from here, each until it
    // waits on the network, in this OPEN's loop context (credentials and
    // cancel id; a close checks neither, and this op is answered before
    // the CLOSE can be).
    void open_ends(Handle handle)
    {
        const auto it = busy.find(handle);
        if (it == busy.end() || --it->second.opens > 0)
            return;
        const std::vector<std::coroutine_handle<>> waiters = std::move(it->second.waiters);
        busy.erase(it);
        for (const std::coroutine_handle<> w : waiters)
            w.resume();
    }
};

} // namespace pvfs::pvfsd
