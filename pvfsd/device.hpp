// pvfsd's front end: pvfs.ko's channel device /dev/pvfsd.  Opening it says
// HELLO (minor, features, slots) and maps the slots the kernel shares;
// upcalls are read from it and downcalls written to it, one per system call
// (include/pvfs/pvfsd_dev.h).
#pragma once

#include "channel.hpp"

#include <pvfs/pvfsd_dev.h>
#include <pvfs/unique_fd.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pvfs::pvfsd {

struct DeviceSettings {
    std::string path = "/dev/" PVFSD_DEV_NAME;
    std::uint32_t slot_size = 1U << 20U;
    std::uint32_t slots = 64;
    // Test only: the channel minor offered at HELLO, with its features
    // alone, as an older pvfsd would.
    std::uint32_t channel_minor = PVFSD_DEV_MINOR;
    // Test only: exit at the first answer to this op, before the kernel
    // gets it (the servers have done the op: its replay must not redo it).
    std::string die_after_reply;
};

// The shared slot area, unmapped on destruction.
class SlotMapping {
public:
    SlotMapping() = default;
    SlotMapping(int fd, std::size_t bytes);
    ~SlotMapping();
    SlotMapping(const SlotMapping &) = delete;
    SlotMapping &operator=(const SlotMapping &) = delete;
    SlotMapping(SlotMapping &&) = delete;
    SlotMapping &operator=(SlotMapping &&) = delete;

    [[nodiscard]] bool valid() const noexcept { return addr_ != nullptr; }
    [[nodiscard]] std::span<std::byte> bytes() const noexcept
    {
        return {static_cast<std::byte *>(addr_), bytes_};
    }

private:
    void *addr_ = nullptr;
    std::size_t bytes_ = 0;
};

class DeviceChannel final : public Channel {
public:
    // Opens the device, says HELLO and maps the granted slots; nullptr,
    // with the reason logged, when any of it fails.
    [[nodiscard]] static std::unique_ptr<DeviceChannel> open(const DeviceSettings &settings);
    ~DeviceChannel() override = default;
    DeviceChannel(const DeviceChannel &) = delete;
    DeviceChannel &operator=(const DeviceChannel &) = delete;
    DeviceChannel(DeviceChannel &&) = delete;
    DeviceChannel &operator=(DeviceChannel &&) = delete;

    [[nodiscard]] std::span<std::byte> slots() override { return slots_->bytes(); }
    [[nodiscard]] std::size_t slot_size() const override { return granted_.slot_size; }
    [[nodiscard]] std::uint64_t features() const override { return granted_.features; }
    [[nodiscard]] int fd() const override { return dev_.get(); }
    Received receive(const Starter &start) override;
    void send(std::vector<std::byte> downcall, const Starter &start) override;

    [[nodiscard]] const pvfsd_hello &granted() const noexcept { return granted_; }

private:
    DeviceChannel(DeviceSettings settings, UniqueFd dev);

    DeviceSettings settings_;
    UniqueFd dev_;
    pvfsd_hello granted_{};
    std::unique_ptr<SlotMapping> slots_;
    std::vector<std::byte> buf_;
};

} // namespace pvfs::pvfsd
