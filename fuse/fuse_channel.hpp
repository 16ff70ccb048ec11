// pvfs-fuse's front end of pvfsd's Handler: a FUSE session (libfuse3's
// low-level API) as a pvfsd::Channel.  Each FUSE request becomes the upcall
// pvfs.ko would send for it, and each downcall the fuse_reply_* of its
// request (docs/plan/fuse.md).  Everything runs on the loop's one thread:
// serve() calls receive() when /dev/fuse is readable, libfuse calls the
// request's op here, the op starts its upcall and returns; the Handler's
// answer comes back through send().  No request waits on a thread, so a
// mount whose servers are slow holds no thread pool.
//
// What waits here, never on a thread: a READ or WRITE for a free data
// slot, a change for one of the mount's reply slots (the exactly-once ids
// pvfs.ko gives its changes), and the second upcall of a request that
// needs two (a CREATE whose servers could not hold the file: its OPEN; an
// O_APPEND WRITE: the GETATTR that finds the end first; an O_TRUNC open:
// the SETATTR through it).
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

namespace detail {
// One entry of a READDIR's answer.
struct Dirent {
    std::uint64_t handle = 0;
    std::uint64_t cookie = 0;
    std::uint32_t type = 0;
    std::string name;
};
} // namespace detail

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
    // Listings with attributes (READDIRPLUS); -o nordirplus, as NFS's,
    // for a directory listed by name only and too large to stat.
    bool readdirplus = true;
    // Write-behind (-o write_behind=N): at most this many WRITEs answered
    // once their bytes are in a slot, before the servers have them (as
    // pvfs.ko's page cache answers write(2)); 0 makes every write wait for
    // the servers.  Their errors come at fsync and close, as pvfs.ko's
    // writeback errors do.
    std::size_t write_behind = 8;
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
    // Writes answered already that the servers have not acknowledged: the
    // session's end waits for them (pvfsd::serve).
    [[nodiscard]] bool owes() const override { return behind_total_ > 0; }
    // What the kernel asked for so far and how many inodes it holds by a
    // lookup: the status line (SIGUSR1), which tests and the benchmark read
    // to see how the kernel's requests arrive (a WRITE's size, READDIRPLUS).
    [[nodiscard]] std::string status() const;

    // The low-level ops, called by libfuse with this channel as userdata.
    struct Ops;

private:
    // What follows an upcall's answer, for a request that needs two.
    enum class Then : std::uint8_t {
        reply,         // answer the request
        open_created,  // CREATE that the servers did not hold: OPEN it, then answer
        append,        // GETATTR of an O_APPEND WRITE: WRITE at the end it found
        truncate,      // SETATTR of an O_TRUNC create that found the file: answer the create
        truncate_open, // SETATTR of an O_TRUNC open: answer the open
        listing,       // READDIR of a READDIRPLUS: GETATTR its entries, then answer
        listed,        // GETATTR of a READDIRPLUS's entry: `offset` names the listing
    };
    // How a request parked behind its inode's writes (fuse_behind.cpp)
    // starts again once they are done.
    enum class Via : std::uint8_t {
        plain,  // start()
        change, // start_change(): it takes a reply slot then
        data,   // start_data(): it takes a data slot then
        flush,  // no upcall: FLUSH is answered with the writes' error
    };
    // The op of a FLUSH's entry: FUSE's FLUSH has no upcall of its own.
    static constexpr std::uint16_t flush_op = 0;
    // One FUSE request (or one upcall of pvfs-fuse's own) waiting for its
    // downcall, by tag.
    struct Pending {
        std::uint64_t tag = 0;
        std::uint16_t op = 0;
        fuse_req_t req = nullptr; // nullptr: pvfs-fuse's own (ATTACH, CLOSE)
        fuse_ino_t ino = 0;
        std::uint64_t offset = 0; // READ, WRITE, READDIR
        std::size_t size = 0;     // READ, WRITE, READDIR, XATTR_*: the room or the bytes
        std::uint32_t slot = ~0U; // READ, WRITE: the slot holding its data
        std::uint32_t reply_slot = PVFSD_NO_SLOT; // a change: the one it holds
        bool started = false;                     // false while it waits for a slot
        Then then = Then::reply;
        Via via = Via::plain;        // parked behind writes: how it starts again
        bool may_go_behind = false;  // WRITE: may be answered once its bytes are in a slot
        bool behind = false;         // WRITE answered already: its end goes to behind_
        std::uint32_t open_mode = 0; // OPEN, CREATE: PVFSD_OPEN_* asked for
        fuse_file_info fi{};         // OPEN's and CREATE's, answered with it
        pvfsd_req_common common{};   // READ, WRITE, CREATE: its caller
        pvfsd_attr attr{};           // CREATE: the new file's, for the OPEN that follows
        // A change waiting for a reply slot: its message (tag and slot
        // filled in when it starts).  A WRITE that could not go at once:
        // its bytes (the kernel's buffer is reused by the next request).
        std::vector<std::byte> message;
        std::vector<std::byte> data;
    };
    // The files the kernel holds open, by inode: OPEN at the first, CLOSE
    // after the last release (as pvfs.ko does, not per file description:
    // a CLOSE ends the mount's hold whichever open it came from).  A later
    // open for more modes sends another OPEN, with all of them.
    struct Opened {
        std::uint32_t count = 0;
        std::uint64_t gen = 0;  // the latest OPEN that held it
        std::uint32_t mode = 0; // PVFSD_OPEN_* of the opens counted
    };
    // A READDIRPLUS between its READDIR's answer and its entries'
    // GETATTRs' (all at once: one round trip for the page, not one per
    // entry as the kernel's LOOKUPs after a plain READDIR).
    struct Listing {
        fuse_req_t req = nullptr;
        std::size_t size = 0; // the kernel's room
        std::vector<detail::Dirent> entries;
        std::vector<pvfsd_attr> attrs; // handle no_handle: no attributes (gone meanwhile)
        std::size_t waiting = 0;
        bool interrupted = false; // its GETATTRs cancelled: EINTR once they end
    };
    // What the kernel asked for, for the status line.
    struct Counts {
        std::uint64_t lookups = 0;
        std::uint64_t readdirs = 0;
        std::uint64_t readdirplus = 0;
        std::uint64_t plus_entries = 0; // entries answered with attributes (lookups)
        std::uint64_t reads = 0;
        std::uint64_t read_max = 0; // bytes of the largest READ
        std::uint64_t writes = 0;
        std::uint64_t write_max = 0;     // bytes of the largest WRITE
        std::uint64_t behind = 0;        // WRITEs answered before the servers had them
        std::uint64_t behind_waits = 0;  // requests that waited for an inode's writes
        std::uint64_t behind_errors = 0; // of those writes, how many failed
    };
    // An inode's writes that were answered before the servers had them
    // (write-behind), and what waits for them: a READ, GETATTR, SETATTR,
    // FSYNC or FLUSH of the inode, or a WRITE over a range still in flight
    // (the servers might otherwise apply the two in the other order).
    struct Behind {
        struct Range {
            std::uint64_t tag = 0;
            std::uint64_t offset = 0;
            std::uint64_t end = 0;
        };
        std::vector<Range> in_flight;
        int error = 0;                       // the first failure, for the next fsync or close
        std::vector<std::uint64_t> parked;   // tags, in arrival order
        std::vector<pvfsd_close_ref> closes; // the last release's CLOSE, after the writes
    };
    // What the kernel was last told of an inode it knows by a lookup (its
    // lookup count, as FUSE's forget counts them): whose it is and what
    // size and mtime it has.
    struct Known {
        std::uint64_t nlookup = 0;
        pvfsd_attr attr{};
    };

    [[nodiscard]] static pvfsd_req_common common_of(fuse_req_t req);
    // Whether the caller may open a file of these attributes for `mode`
    // (PVFSD_OPEN_*), as the kernel's generic_permission decides.
    [[nodiscard]] static bool may_open(const pvfsd_req_common &c, const pvfsd_attr &a,
                                       std::uint32_t mode);
    // A request's entry, with a tag of its own.
    [[nodiscard]] std::unique_ptr<Pending> pending(fuse_req_t req, std::uint16_t op,
                                                   fuse_ino_t ino);
    std::uint64_t next_tag() { return ++last_tag_; }
    // Starts `upcall` for `p` (added to the pending table), or answers the
    // request EIO when no Starter is at hand (not inside receive()).
    void start(std::unique_ptr<Pending> p, std::vector<std::byte> upcall);
    // A change (pvfs.ko's list, kmod/op.c): it takes a reply slot and a new
    // tag first, or waits for a slot to come free.
    void start_change(std::unique_ptr<Pending> p, std::vector<std::byte> upcall);
    // A READ or WRITE: it takes a data slot first, or waits for one.
    void start_data(std::unique_ptr<Pending> p, std::span<const std::byte> write_data = {});
    void start_io(Pending &p);
    // The waiting ops whose slots came free.
    void start_waiting();
    // Write-behind (fuse_behind.cpp).  Parks `p` when it must wait for
    // its inode's writes in flight (true: it is in pending_, and starts
    // again `via` once they are done, with `upcall` kept).
    bool park_behind_writes(std::unique_ptr<Pending> &p, Via via, std::vector<std::byte> &upcall);
    // A WRITE just started: answered now when it may go behind.
    void go_behind(Pending &p);
    // The servers' answer to a WRITE answered before.
    void wrote_behind(const Pending &p, int status, std::span<const std::byte> body);
    // The inode's writes are done: what waited for them starts.
    void settle(fuse_ino_t ino);
    [[nodiscard]] bool writes_in_flight(fuse_ino_t ino) const;
    // The first error of the inode's writes behind since it was last
    // reported (0: none), now reported, to a file open for writing
    // (`open_mode`, PVFSD_OPEN_*; others get 0 and leave it).
    int take_write_error(fuse_ino_t ino, std::uint32_t open_mode);
    [[nodiscard]] int write_error(fuse_ino_t ino) const;
    // `a` as the kernel must see it: a size that counts the writes it was
    // told are done.
    [[nodiscard]] pvfsd_attr with_behind(const pvfsd_attr &a) const;
    void finish(std::unique_ptr<Pending> &p, const pvfsd_msg_hdr &hdr,
                std::span<const std::byte> body);
    void reply_entry(Pending &p, std::span<const std::byte> body);
    void reply_create(std::unique_ptr<Pending> &p, std::span<const std::byte> body);
    // The create's answer once the file is open (and truncated): false
    // when the kernel took none (the open is released).
    bool answer_create(Pending &p, const pvfsd_attr &a);
    void reply_attr(Pending &p, std::span<const std::byte> body);
    void reply_open(std::unique_ptr<Pending> &p, std::span<const std::byte> body);
    // The SETATTR of an O_TRUNC open of `p.ino` (counted open already),
    // through the open as pvfs.ko's handle_truncate: `p.then` says what
    // answers the request after it.
    void truncate_opened(std::unique_ptr<Pending> p);
    void reply_read(Pending &p, std::span<const std::byte> body);
    static void reply_write(Pending &p, std::span<const std::byte> body);
    void reply_append(std::unique_ptr<Pending> &p, std::span<const std::byte> body);
    static void reply_readdir(Pending &p, std::span<const std::byte> body);
    // READDIRPLUS (fuse_listing.cpp): the entries that fit the kernel's
    // room get a GETATTR each; the last answer answers the listing.
    void start_listing(Pending &p, std::span<const std::byte> body);
    void listed(const Pending &g, int status, std::span<const std::byte> body);
    void answer_listing(Listing &l);
    // An interrupt of a READDIRPLUS waiting for its GETATTRs: each gets a
    // CANCEL (the READDIR's tag is no longer the request's).
    void cancel_listing(fuse_req_t req);
    static void reply_statfs(Pending &p, std::span<const std::byte> body);
    static void reply_readlink(Pending &p, std::span<const std::byte> body);
    static void reply_xattr(Pending &p, std::span<const std::byte> body);
    // An OPEN of `p.ino` for `p.open_mode`, answered with fuse_reply_open
    // (or _create with `p.attr`, after a CREATE).
    void send_open(std::unique_ptr<Pending> p);
    void count_open(fuse_ino_t ino, std::uint32_t mode, std::uint64_t gen);
    // Attributes the kernel now has (from an answer it took); the kernel's
    // own are dropped when another client changed the file (close-to-open).
    void learned(const pvfsd_attr &a, bool lookup);
    void forget(fuse_ino_t ino, std::uint64_t nlookup);
    [[nodiscard]] const pvfsd_attr *known(fuse_ino_t ino) const;
    // UNLINK or RMDIR of a name.
    void remove(fuse_req_t req, fuse_ino_t parent, const char *name, std::uint16_t op);
    void release(fuse_ino_t ino);
    void flush_closes();
    void cancel(fuse_req_t req);
    // The mount's readahead, once INIT is answered (fuse_channel.cpp).
    void set_readahead() const;
    [[nodiscard]] double attr_timeout(std::uint32_t type) const;

    FuseSettings settings_;
    std::vector<std::byte> slots_;
    std::vector<std::uint32_t> free_slots_;
    std::deque<std::uint64_t> waiting_data_; // READs, WRITEs: tags, first come first served
    std::vector<std::uint32_t> free_reply_slots_;
    std::deque<std::uint64_t> waiting_changes_; // tags, first come first served
    fuse_session *session_ = nullptr;
    bool mounted_ = false;
    std::string mountpoint_;
    bool initialized_ = false; // INIT came (Ops::init)
    bool readahead_set_ = false;
    fuse_buf buf_{};
    const Starter *start_ = nullptr; // inside receive() and send()
    std::uint64_t last_tag_ = 0;
    std::uint64_t client_id_ = 0;
    // The mount's id, as the Handler knows it: it also names the mount's
    // sessions on the metadata servers (their owner, with the machine and
    // the source), and a new session of an owner ends the old one.  So it
    // is random per pvfs-fuse, as pvfs.ko's are unique per boot: two
    // mounts of one file system on a machine must not end each other's
    // sessions.  (The top bit keeps it out of pvfs.ko's counter's range.)
    std::uint64_t mount_id_ = 0;
    std::unordered_map<std::uint64_t, std::unique_ptr<Pending>> pending_;
    std::unordered_map<fuse_req_t, std::uint64_t> tag_of_;
    std::unordered_map<fuse_ino_t, Opened> opened_;
    std::unordered_map<fuse_ino_t, Known> known_;
    std::unordered_map<std::uint64_t, std::unique_ptr<Listing>> listings_; // by READDIR tag
    std::unordered_map<fuse_ino_t, Behind> behind_;
    std::size_t behind_total_ = 0; // writes behind in flight, all inodes
    Counts counts_;
    std::vector<pvfsd_close_ref> closes_;    // released since the last flush
    std::vector<std::uint64_t> interrupted_; // ops interrupted while waiting for a slot
    int attach_status_ = 1;                  // 1: not answered yet
    std::string attach_error_;
};

} // namespace pvfs::fuse
