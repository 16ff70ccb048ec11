// A channel whose upcalls come from code and whose downcalls are kept:
// drives a Handler without a device (tests/server/pvfsd_handler_test), by
// hand or through serve().  Its slots are ordinary memory.
#pragma once

#include "channel.hpp"

#include <pvfs/pvfsd_dev.h>
#include <pvfs/unique_fd.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace pvfs::pvfsd {

class MemoryChannel final : public Channel {
public:
    // Throws std::system_error when no eventfd can be made.
    MemoryChannel(std::size_t slot_count, std::size_t slot_size,
                  std::uint64_t features = PVFSD_FEATURES);
    ~MemoryChannel() override = default;
    MemoryChannel(const MemoryChannel &) = delete;
    MemoryChannel &operator=(const MemoryChannel &) = delete;
    MemoryChannel(MemoryChannel &&) = delete;
    MemoryChannel &operator=(MemoryChannel &&) = delete;

    // Queues the bytes of an upcall and wakes serve().  receive() parses
    // them as the device's are: a malformed one is logged and dropped.
    void push(std::vector<std::byte> upcall);
    // receive() answers `ended` once the queue is empty.
    void close();
    // Called with each downcall as it is sent (before it is kept): a test
    // pushes the next upcall from here.
    std::function<void(const std::vector<std::byte> &)> on_send;
    // The downcalls sent since the last call.
    [[nodiscard]] std::vector<std::vector<std::byte>> take_sent();
    // Upcalls receive() dropped as malformed, and the last one's reason.
    [[nodiscard]] std::size_t malformed() const noexcept { return malformed_; }
    [[nodiscard]] const std::string &last_error() const noexcept { return last_error_; }

    [[nodiscard]] std::span<std::byte> slots() override { return slots_; }
    [[nodiscard]] std::size_t slot_size() const override { return slot_size_; }
    [[nodiscard]] std::uint64_t features() const override { return features_; }
    [[nodiscard]] int fd() const override { return event_.get(); }
    Received receive(const Starter &start) override;
    void send(std::vector<std::byte> downcall, const Starter &start) override;

private:
    void wake() const;

    std::vector<std::byte> slots_;
    std::size_t slot_size_;
    std::uint64_t features_;
    UniqueFd event_;
    std::deque<std::vector<std::byte>> queue_;
    std::vector<std::vector<std::byte>> sent_;
    bool closed_ = false;
    std::size_t malformed_ = 0;
    std::string last_error_;
};

} // namespace pvfs::pvfsd
