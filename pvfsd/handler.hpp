// Turns upcalls into libpvfs operations and their results into downcalls.
// One Client per mount (per ATTACH), even for the same file system.
#pragma once

#include "upcall.hpp"

#include <pvfs/client.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pvfs::pvfsd {

struct HandlerOptions {
    std::string key_file; // empty: libpvfs's default
    std::chrono::milliseconds request_timeout{0};
};

class Handler {
public:
    // slots: the mapped data slots, slot_count * slot_size bytes.
    Handler(HandlerOptions options, std::span<std::byte> slots, std::size_t slot_size);

    // The downcall answering `up`, or an empty vector when it needs none
    // (CANCEL).
    [[nodiscard]] std::vector<std::byte> handle(const Upcall &up);

    [[nodiscard]] std::size_t mounts() const noexcept { return clients_.size(); }

private:
    int attach(const Upcall &up, Downcall &out);
    int dispatch(const Upcall &up, client::Client &c, Downcall &out);
    [[nodiscard]] std::span<std::byte> slot(std::uint32_t index, std::uint32_t length) const;

    HandlerOptions options_;
    std::span<std::byte> slots_;
    std::size_t slot_size_;
    std::map<std::uint64_t, std::unique_ptr<client::Client>> clients_;
};

} // namespace pvfs::pvfsd
