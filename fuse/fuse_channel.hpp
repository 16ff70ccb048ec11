// pvfs-fuse's front end of pvfsd's Handler: a FUSE session (libfuse3's
// low-level API) as a pvfsd::Channel.  Each FUSE request becomes the upcall
// pvfs.ko would send for it, and each downcall the fuse_reply_* of its
// request (docs/plan/fuse.md).  Everything runs on the loop's one thread:
// serve() calls receive() when /dev/fuse is readable, libfuse calls the
// request's op here, the op starts its upcall and returns; the Handler's
// answer comes back through send().  No request waits on a thread, so a
// mount whose servers are slow holds no thread pool.
//
// Read-only in this version: requests that would change anything are
// answered EROFS (the mount is also `ro`).
#pragma once

#include "channel.hpp"
#include "handler.hpp"

#include <pvfs/client.hpp>
#include <pvfs/pvfsd_dev.h>

#include <fuse_lowlevel.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace pvfs::fuse {

struct FuseSettings {
    // What the mount is attached to: a URL tcp://host:port/fs or a cluster
    // config file (its ATTACH's source).
    std::string source;
    // The mount options the Handler applies (hard, soft, softerr, timeo,
    // retrans, key), as pvfs.ko passes them in its ATTACH.
    std::string attach_options;
    // How long the kernel may trust attributes and names.
    std::chrono::milliseconds attr_timeout_file{3000};
    std::chrono::milliseconds attr_timeout_dir{30000};
    std::chrono::milliseconds entry_timeout{30000};
    std::size_t slot_size = 1U << 20U;
    std::size_t slots = 16;
};

class FuseChannel final : public pvfsd::Channel {
public:
    explicit FuseChannel(FuseSettings settings);
    // Answers what is still pending and unmounts.
    ~FuseChannel() override;
    FuseChannel(const FuseChannel &) = delete;
    FuseChannel &operator=(const FuseChannel &) = delete;
    FuseChannel(FuseChannel &&) = delete;
    FuseChannel &operator=(FuseChannel &&) = delete;

    // Attaches the mount through `handler` (its ATTACH), running `loop`
    // until it is answered: 0, or a negative errno with `error` saying why.
    int attach(pvfsd::Handler &handler, client::Loop &loop, std::string &error);
    // Makes the FUSE session with libfuse's options in `options` (argv
    // style, argv[0] first) and mounts it on `mountpoint`: false with
    // `error` set when libfuse refuses.
    bool mount(const std::vector<std::string> &options, const std::string &mountpoint,
               std::string &error);
    // Unmounts now (also done by the destructor).
    void unmount();

    [[nodiscard]] std::span<std::byte> slots() override { return slots_; }
    [[nodiscard]] std::size_t slot_size() const override { return settings_.slot_size; }
    [[nodiscard]] std::uint64_t features() const override { return PVFSD_FEATURES; }
    [[nodiscard]] int fd() const override;
    Received receive(const Starter &start) override;
    void send(std::vector<std::byte> downcall, const Starter &start) override;

    // Requests waiting for an answer (tests, the status line).
    [[nodiscard]] std::size_t pending() const noexcept { return pending_.size(); }

    // The low-level ops, called by libfuse with this channel as userdata.
    struct Ops;

private:
    // One FUSE request (or one upcall of pvfs-fuse's own) waiting for its
    // downcall, by tag.
    struct Pending {
        std::uint64_t tag = 0;
        std::uint16_t op = 0;
        fuse_req_t req = nullptr; // nullptr: pvfs-fuse's own (ATTACH, CLOSE)
        fuse_ino_t ino = 0;
        std::uint64_t offset = 0;  // READ, READDIR
        std::size_t size = 0;      // READ, READDIR, XATTR_*: the room the kernel gave
        std::uint32_t slot = ~0U;  // READ: the slot holding its data
        bool started = false;      // READ: false while it waits for a slot
        fuse_file_info fi{};       // OPEN's, answered with it
        pvfsd_req_common common{}; // READ: its caller, for when it starts
    };
    // The files the kernel holds open, by inode: OPEN at the first, CLOSE
    // after the last release (as pvfs.ko does, not per file description:
    // a CLOSE ends the mount's hold whichever open it came from).
    struct Opened {
        std::uint32_t count = 0;
        std::uint64_t gen = 0; // the latest OPEN that held it
    };

    [[nodiscard]] static pvfsd_req_common common_of(fuse_req_t req);
    // A request's entry, with a tag of its own.
    [[nodiscard]] std::unique_ptr<Pending> pending(fuse_req_t req, std::uint16_t op,
                                                   fuse_ino_t ino);
    std::uint64_t next_tag() { return ++last_tag_; }
    // Starts `upcall` for `p` (added to the pending table), or answers the
    // request EIO when no Starter is at hand (not inside receive()).
    void start(std::unique_ptr<Pending> p, std::vector<std::byte> upcall);
    void start_read(Pending &p);
    void finish(Pending &p, const pvfsd_msg_hdr &hdr, std::span<const std::byte> body);
    void reply_entry(Pending &p, std::span<const std::byte> body);
    void reply_attr(Pending &p, std::span<const std::byte> body);
    void reply_open(Pending &p, std::span<const std::byte> body);
    void reply_read(Pending &p, std::span<const std::byte> body);
    static void reply_readdir(Pending &p, std::span<const std::byte> body);
    static void reply_statfs(Pending &p, std::span<const std::byte> body);
    static void reply_readlink(Pending &p, std::span<const std::byte> body);
    static void reply_xattr(Pending &p, std::span<const std::byte> body);
    void release(fuse_ino_t ino);
    void flush_closes();
    void cancel(fuse_req_t req);
    [[nodiscard]] double attr_timeout(std::uint32_t type) const;

    FuseSettings settings_;
    std::vector<std::byte> slots_;
    std::vector<std::uint32_t> free_slots_;
    std::deque<std::uint64_t> waiting_reads_; // tags, first come first served
    fuse_session *session_ = nullptr;
    bool mounted_ = false;
    fuse_buf buf_{};
    const Starter *start_ = nullptr; // inside receive() and send()
    std::uint64_t last_tag_ = 0;
    std::uint64_t client_id_ = 0;
    std::unordered_map<std::uint64_t, std::unique_ptr<Pending>> pending_;
    std::unordered_map<fuse_req_t, std::uint64_t> tag_of_;
    std::unordered_map<fuse_ino_t, Opened> opened_;
    std::vector<pvfsd_close_ref> closes_;    // released since the last flush
    std::vector<std::uint64_t> interrupted_; // READs interrupted while waiting
    int attach_status_ = 1;                  // 1: not answered yet
    std::string attach_error_;
};

} // namespace pvfs::fuse
