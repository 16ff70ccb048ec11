// The data object store of a pvfs data server: one object file per
// (file handle, this server), read and written asynchronously through
// io_uring so the server's single event loop never waits for a disk.
// docs/storage.md is the full story; in short:
//
// On disk.  `<storage>/objects/<xx>/<hhhhhhhhhhhhhhhh>`: xx is the low byte
// of the handle's id and the file name the whole handle, both lower-case
// hex.  The 256 fan-out directories are made when the store opens.
//
// Asynchronous operations.  submit_read / submit_write / submit_fsync queue
// an operation and return 0 (a completion will come, exactly once) or a
// negative errno (misuse; no completion will come).  Queued operations go
// to the kernel in one batch at flush() or reap(): call one of them before
// sleeping.  reap() never blocks; event_fd() is readable whenever reap()
// has something to return, so the event loop can sleep on it among its
// other fds.  Each completion carries the caller's user_data and the
// result: bytes transferred, or a negative errno (ENOSPC, EIO, EDQUOT,
// EFBIG, EFAULT... exactly as the kernel reported it, never retried).
//
//   - A write completes only when all its bytes are written (short writes
//     are continued); it creates the object (mode 0600) if needed.  On an
//     error some of its bytes may have been written.
//   - A read returns what exists: fewer bytes at the object's end, 0 for an
//     absent object.  Holes read as zeros; the caller zero-fills what lies
//     between the end of the object and the end of the file (the file size
//     comes from layout::logical_size over all objects).
//   - fsync makes the object's data and size durable, and also the
//     directory entries of objects created (or removed) in its fan-out
//     directory since that directory was last synced.  A write is durable
//     only after an fsync submitted after the write completed.
//
// The caller owns every buffer; it must stay valid and untouched until the
// operation's completion is reaped.  The store never copies data, so its
// memory is bounded whatever the request sizes.
//
// When the kernel refuses io_uring (kernel.io_uring_disabled, seccomp in
// containers) or Options::force_synchronous is set, the same interface
// performs each operation synchronously inside submit_*, then queues its
// completion and signals event_fd().
//
// Synchronous operations (truncate, remove, size, list, statfs) are rare and
// touch only metadata; they may block the caller briefly.  Opening an
// object file (on a miss in the open-file cache) is synchronous as well.
//
// Not thread-safe: one thread (the server's event loop) owns a store.
#ifndef PVFS_DATA_OBJECT_STORE_HPP
#define PVFS_DATA_OBJECT_STORE_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pvfs/types.hpp"

namespace pvfs::data {

// One read or write moves at most this many bytes (the result is an int);
// larger requests are split by the caller, as the bulk flow does anyway.
inline constexpr std::size_t max_io_bytes = std::size_t{1} << 30U;
// Objects end below 2^63 - 1 like files (offset + length beyond: EINVAL).
inline constexpr std::uint64_t max_object_end = (std::uint64_t{1} << 63U) - 1;
// list() returns at most this many handles per call, whatever it is asked.
inline constexpr std::size_t max_list_handles = 65536;
// Bounds for Options::max_in_flight (io_uring rings hold at most 32768
// entries and an operation may use two).
inline constexpr std::size_t max_in_flight_limit = 16384;

struct Options {
    // Open object files kept in the LRU cache.  The process needs
    // RLIMIT_NOFILE above this plus the operations in flight; on EMFILE the
    // store closes idle cached files and retries once.
    std::size_t max_open_files = 1024;
    // Operations accepted and not yet reaped; submit_* returns -EAGAIN
    // beyond it.  1 .. max_in_flight_limit.
    std::size_t max_in_flight = 1024;
    // Never use io_uring: every operation runs synchronously at submit.
    bool force_synchronous = false;
    // After each write, start the disk on its range (sync_file_range
    // SYNC_FILE_RANGE_WRITE through io_uring, not waited for), so that the
    // fsync that makes it durable has less left to do.  Only with io_uring,
    // and never on tmpfs or ramfs.  Durability does not change: a write is
    // durable only after an fsync, as before.
    bool early_writeback = true;
};

enum class Mode : std::uint8_t {
    io_uring,    // operations run in the kernel while the caller goes on
    synchronous, // operations run inside submit_*
};

struct Completion {
    std::uint64_t user_data = 0;
    int result = 0; // bytes transferred (0 for fsync), or a negative errno
};

struct StatFs {
    int error = 0; // 0, or a negative errno (and the rest is zero)
    std::uint64_t total_bytes = 0;
    std::uint64_t free_bytes = 0;
    std::uint64_t available_bytes = 0; // free to an unprivileged user
    std::uint64_t total_objects = 0;   // inodes
    std::uint64_t free_objects = 0;
    std::uint64_t available_objects = 0;
};

struct ListPage {
    int error = 0;                 // 0, or a negative errno
    std::vector<Handle> handles;   // in the store's stable order
    std::uint64_t next_cookie = 0; // pass to the next list() call
    bool end = false;              // no handle follows this page
};

class ObjectStore {
public:
    // Opens the store in `storage_dir` (which must exist), making the
    // objects/ directory and its fan-out directories as needed (durably).
    // nullopt and `error` set when it cannot.  Logs once (gossip, storage)
    // which mode is used.
    [[nodiscard]] static std::optional<ObjectStore>
    open(const std::filesystem::path &storage_dir, const Options &options, std::string &error);

    // Waits for every operation the kernel still has (so no buffer is
    // touched after it returns), then discards their completions and those
    // not yet reaped.
    ~ObjectStore();
    ObjectStore(ObjectStore &&other) noexcept;
    ObjectStore &operator=(ObjectStore &&other) noexcept;
    ObjectStore(const ObjectStore &) = delete;
    ObjectStore &operator=(const ObjectStore &) = delete;

    [[nodiscard]] Mode mode() const noexcept;
    // Whether early writeback is on (Options::early_writeback, io_uring, a
    // disk), and how many the store has started since it opened.
    [[nodiscard]] bool early_writeback() const noexcept;
    [[nodiscard]] std::uint64_t writebacks_started() const noexcept;

    // Readable (POLLIN) while reap() has completions to return.
    [[nodiscard]] int event_fd() const noexcept;

    // Queue an operation (see above).  Errors returned here, with no
    // completion to follow: -EINVAL (handle 0, offset + length beyond
    // max_object_end, length above max_io_bytes), -EFAULT (null buffer with
    // a length), -EAGAIN (max_in_flight operations not yet reaped).
    [[nodiscard]] int submit_read(Handle handle, std::uint64_t object_offset,
                                  std::span<std::byte> buffer, std::uint64_t user_data);
    [[nodiscard]] int submit_write(Handle handle, std::uint64_t object_offset,
                                   std::span<const std::byte> buffer, std::uint64_t user_data);
    [[nodiscard]] int submit_fsync(Handle handle, std::uint64_t user_data);

    // Hands the queued operations to the kernel (one io_uring_submit).
    void flush();

    // Never blocks.  Flushes, collects what the kernel finished (continuing
    // short transfers), and moves up to out.size() completions into `out`;
    // returns how many.  event_fd() stays readable if more are waiting.
    [[nodiscard]] std::size_t reap(std::span<Completion> out);

    // Operations accepted and not yet returned by reap().
    [[nodiscard]] std::size_t in_flight() const noexcept;

    // Sets the object's size (creating it when size > 0; an absent object
    // truncated to 0 stays absent).  0 or a negative errno.  Ordering
    // against operations in flight on the same object is the caller's job.
    [[nodiscard]] int truncate(Handle handle, std::uint64_t size);

    // Removes the object; an absent one is not an error (0).  Operations in
    // flight on it finish on the unlinked file.  0 or a negative errno.
    [[nodiscard]] int remove(Handle handle);

    // The object's size, nullopt when it does not exist.  On other errors
    // also nullopt, with the negative errno in *error (0 when absent).
    [[nodiscard]] std::optional<std::uint64_t> size(Handle handle, int *error = nullptr);

    // A page of up to `max` (at most max_list_handles) handles of stored
    // objects, ordered by (low byte of id, handle).  Start with cookie 0 and
    // pass next_cookie back until `end`; objects neither created nor removed
    // meanwhile are seen exactly once.  Names that are not objects are
    // skipped.  max == 0: -EINVAL.
    [[nodiscard]] ListPage list(std::uint64_t cookie, std::size_t max);

    // statvfs(3) of the storage directory.
    [[nodiscard]] StatFs statfs() const;

    // Where the object lives (whether or not it exists).
    [[nodiscard]] std::filesystem::path object_path(Handle handle) const;

private:
    struct Impl;
    explicit ObjectStore(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

} // namespace pvfs::data

#endif // PVFS_DATA_OBJECT_STORE_HPP
