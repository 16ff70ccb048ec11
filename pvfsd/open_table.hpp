// The files a mount holds open (OPEN/CLOSE from the kernel): what pvfsd
// renews with the metadata servers, and what libpvfs re-opens after one of
// them restarted (docs/pvfsd.md "Open files").
#pragma once

#include <pvfs/types.hpp>

#include <chrono>
#include <cstdint>
#include <unordered_map>

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
};

} // namespace pvfs::pvfsd
