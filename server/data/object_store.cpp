// The data object store (object_store.hpp; docs/storage.md).
//
// Bookkeeping, all sized when the store opens so nothing grows per request:
//   - `ops`: one slot per operation the kernel is working on.  An SQE's
//     user_data is the slot index shifted left once, its low bit telling the
//     operation's own part (read, write or fsync of the object) from the
//     fsync of its fan-out directory.
//   - `ready`: a ring of finished completions waiting for reap().  Every
//     accepted operation counts against max_in_flight until reaped, so the
//     ring and the slot table can never overflow.
//   - the open-file cache: handle -> shared fd, in LRU order.  An operation
//     holds its own reference, so an evicted fd closes only when the last
//     operation on it has finished.
//   - per fan-out directory, a count of entry changes (creates and removes)
//     and how many of them the last directory fsync covered.
//   - early writeback: after a write completes, the store itself starts the
//     disk writing its range (sync_file_range WRITE, an operation of its
//     own with no completion for the caller), in slots beyond the callers'
//     max_in_flight; with none free it is skipped, never waited for.
#include "object_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/magic.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <list>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "pvfs/gossip.hpp"
#include "pvfs/types.hpp"
#include "pvfs/unique_fd.hpp"

namespace pvfs::data {

namespace gossip = pvfs::gossip;
using gossip::Mask;

namespace {

constexpr unsigned fanout_dirs = 256;
constexpr std::size_t handle_hex_digits = 16;

// The low bit of an SQE's user_data.
constexpr std::uint64_t object_part = 0;
constexpr std::uint64_t directory_part = 1;

// writeback: the store's own sync_file_range after a write (no completion).
enum class OpKind : std::uint8_t { read, write, fsync, writeback };

[[nodiscard]] unsigned fanout_of(Handle handle) noexcept
{
    return static_cast<unsigned>(handle_id(handle) & 0xffU);
}

[[nodiscard]] std::string errno_text(int negative_errno)
{
    return std::strerror(-negative_errno); // NOLINT(concurrency-mt-unsafe): one thread owns a store
}

// 16 lower-case hex digits, nonzero, in the directory its low byte names.
[[nodiscard]] std::optional<Handle> parse_object_name(std::string_view name, unsigned dir) noexcept
{
    if (name.size() != handle_hex_digits) {
        return std::nullopt;
    }
    Handle handle = 0;
    for (const char c : name) {
        unsigned digit = 0;
        if (c >= '0' && c <= '9') {
            digit = static_cast<unsigned>(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            digit = static_cast<unsigned>(c - 'a') + 10U;
        } else {
            return std::nullopt;
        }
        handle = (handle << 4U) | digit;
    }
    if (handle == no_handle || fanout_of(handle) != dir) {
        return std::nullopt;
    }
    return handle;
}

// Objects are regular files; anything else with an object's name is not.
[[nodiscard]] bool regular_file(DIR *stream, const dirent &entry) noexcept
{
    if (entry.d_type != DT_UNKNOWN) {
        return entry.d_type == DT_REG;
    }
    struct stat st {};
    return ::fstatat(::dirfd(stream), static_cast<const char *>(entry.d_name), &st,
                     AT_SYMLINK_NOFOLLOW) == 0 &&
           S_ISREG(st.st_mode);
}

struct DirCloser {
    void operator()(DIR *dir) const noexcept { ::closedir(dir); }
};
using DirStream = std::unique_ptr<DIR, DirCloser>;

// fsync(2) of a directory by path: makes entries made in it durable.
[[nodiscard]] int sync_directory(const std::string &path)
{
    const UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid() || ::fsync(dir.get()) != 0) {
        return -errno;
    }
    return 0;
}

// mkdir that reports whether it made the directory; an existing entry must
// be a directory.
[[nodiscard]] int make_directory(const std::string &path, bool &made)
{
    made = false;
    if (::mkdir(path.c_str(), 0700) == 0) {
        made = true;
        return 0;
    }
    if (errno != EEXIST) {
        return -errno;
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return -errno;
    }
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

[[nodiscard]] std::size_t power_of_two_at_least(std::size_t n) noexcept
{
    std::size_t p = 1;
    while (p < n) {
        p <<= 1U;
    }
    return p;
}

// The ring and its teardown.  Waiting for the kernel to let go of every
// buffer happens before this is destroyed (Impl's destructor).
class Ring {
public:
    Ring() = default;
    Ring(const Ring &) = delete;
    Ring &operator=(const Ring &) = delete;
    Ring(Ring &&) = delete;
    Ring &operator=(Ring &&) = delete;
    ~Ring() { reset(); }

    [[nodiscard]] int init(unsigned entries, io_uring_params &params) noexcept
    {
        reset();
        const int rc = ::io_uring_queue_init_params(entries, &ring_, &params);
        up_ = rc == 0;
        return rc;
    }
    void reset() noexcept
    {
        if (up_) {
            ::io_uring_queue_exit(&ring_);
            up_ = false;
        }
    }
    [[nodiscard]] bool up() const noexcept { return up_; }
    [[nodiscard]] io_uring *get() noexcept { return &ring_; }

private:
    io_uring ring_{};
    bool up_ = false;
};

} // namespace

struct ObjectStore::Impl {
    using SharedFd = std::shared_ptr<UniqueFd>;

    struct Op {
        bool in_use = false;
        OpKind kind = OpKind::read;
        std::uint64_t user_data = 0;
        Handle handle = no_handle; // writes: for early writeback's cache check
        SharedFd object;           // null when the object is absent (fsync only)
        UniqueFd directory;        // fan-out directory being synced, if any
        std::byte *read_into = nullptr;
        const std::byte *write_from = nullptr;
        std::uint64_t offset = 0;
        std::size_t length = 0;
        std::size_t done = 0;
        int error = 0;      // the first error, which is what the caller sees
        unsigned parts = 0; // SQEs prepared and not yet completed
        unsigned fanout = 0;
        std::uint64_t directory_changes = 0; // what the directory fsync covers
    };

    struct DirState {
        std::uint64_t changes = 0; // entries created or removed, ever
        std::uint64_t synced = 0;  // changes covered by a finished fsync
    };

    struct Cached {
        SharedFd fd;
        std::list<Handle>::iterator lru;
    };

    std::string storage;
    std::string objects;
    Options options;
    Mode mode = Mode::synchronous;
    UniqueFd event;
    Ring ring;
    std::size_t in_kernel = 0; // SQEs the kernel took and has not completed

    std::vector<Op> ops;
    std::vector<std::uint32_t> free_ops;
    std::vector<Completion> ready;
    std::size_t ready_head = 0;
    std::size_t ready_count = 0;
    std::size_t accepted = 0;             // submitted and not yet reaped
    bool early_writeback = false;         // Options::early_writeback, and storage that has a disk
    std::size_t writebacks_in_flight = 0; // the store's own operations (OpKind::writeback)
    std::uint64_t writebacks_started = 0;

    std::array<DirState, fanout_dirs> dirs{};
    std::unordered_map<Handle, Cached> cache;
    std::list<Handle> lru; // most recently used first

    Impl() = default;
    Impl(const Impl &) = delete;
    Impl &operator=(const Impl &) = delete;
    Impl(Impl &&) = delete;
    Impl &operator=(Impl &&) = delete;

    ~Impl()
    {
        if (!ring.up()) {
            return;
        }
        // Everything accepted is carried out; only the completions are
        // dropped.  The ring must not go away while the kernel may still
        // read or write a caller's buffer.
        submit_pending();
        while (in_kernel > 0) {
            io_uring_cqe *cqe = nullptr;
            const int rc = ::io_uring_wait_cqe(ring.get(), &cqe);
            if (rc == -EINTR) {
                continue;
            }
            if (rc < 0) {
                gossip::error(Mask::storage, "object store: waiting for {} operations: {}",
                              in_kernel, errno_text(rc));
                break;
            }
            ::io_uring_cqe_seen(ring.get(), cqe);
            --in_kernel;
        }
    }

    [[nodiscard]] std::string directory_path(unsigned fanout) const
    {
        return fmt::format("{}/{:02x}", objects, fanout);
    }
    [[nodiscard]] std::string object_path(Handle handle) const
    {
        return fmt::format("{}/{:02x}/{:016x}", objects, fanout_of(handle), handle);
    }

    // ---- completions ----------------------------------------------------

    void signal() const noexcept
    {
        const std::uint64_t one = 1;
        // Only fails when the counter would overflow, and then it is
        // readable anyway.
        [[maybe_unused]] const ssize_t rc = ::write(event.get(), &one, sizeof one);
    }

    void drain_signal() const noexcept
    {
        std::uint64_t count = 0;
        [[maybe_unused]] const ssize_t rc = ::read(event.get(), &count, sizeof count);
    }

    void push_ready(std::uint64_t user_data, int result) noexcept
    {
        ready[(ready_head + ready_count) % ready.size()] = {user_data, result};
        ++ready_count;
    }

    // A completion known at submit time.
    void complete_now(std::uint64_t user_data, int result) noexcept
    {
        push_ready(user_data, result);
        signal();
    }

    // ---- the open-file cache ----------------------------------------------

    // Closes cached files no operation is using, oldest first; how many.
    std::size_t close_idle_files(std::size_t at_most)
    {
        std::size_t closed = 0;
        for (auto it = lru.end(); it != lru.begin() && closed < at_most;) {
            --it;
            const auto found = cache.find(*it);
            if (found->second.fd.use_count() == 1) {
                cache.erase(found);
                it = lru.erase(it);
                ++closed;
            }
        }
        return closed;
    }

    // Opens the object, creating it if asked; sets `created` when it did.
    [[nodiscard]] int open_object(Handle handle, bool create, bool &created) const
    {
        created = false;
        const std::string path = object_path(handle);
        const int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW;
        int fd = ::open(path.c_str(), flags);
        if (fd >= 0 || errno != ENOENT || !create) {
            return fd >= 0 ? fd : -errno;
        }
        fd = ::open(path.c_str(), flags | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) {
            created = true;
            return fd;
        }
        return -errno;
    }

    // The object's fd, from the cache or freshly opened; null with `error`
    // set (-ENOENT: absent and not created).
    [[nodiscard]] SharedFd acquire(Handle handle, bool create, int &error)
    {
        error = 0;
        if (const auto found = cache.find(handle); found != cache.end()) {
            lru.splice(lru.begin(), lru, found->second.lru);
            return found->second.fd;
        }
        bool created = false;
        int fd = open_object(handle, create, created);
        if ((fd == -EMFILE || fd == -ENFILE) &&
            close_idle_files(std::max<std::size_t>(16, cache.size() / 8)) > 0) {
            fd = open_object(handle, create, created);
        }
        if (fd < 0) {
            error = fd;
            if (fd != -ENOENT) {
                gossip::debug(Mask::storage, "open object {:016x}: {}", handle, errno_text(fd));
            }
            return nullptr;
        }
        if (created) {
            ++dirs.at(fanout_of(handle)).changes;
        }
        auto shared = std::make_shared<UniqueFd>(fd);
        if (cache.size() >= options.max_open_files) {
            // Operations still using the evicted fd keep it open.
            cache.erase(lru.back());
            lru.pop_back();
        }
        lru.push_front(handle);
        cache.emplace(handle, Cached{shared, lru.begin()});
        return shared;
    }

    void forget(Handle handle)
    {
        if (const auto found = cache.find(handle); found != cache.end()) {
            lru.erase(found->second.lru);
            cache.erase(found);
        }
    }

    // ---- validation -------------------------------------------------------

    [[nodiscard]] int check_io(Handle handle, std::uint64_t offset, std::size_t length,
                               const void *data) const noexcept
    {
        if (handle == no_handle || length > max_io_bytes || offset > max_object_end ||
            length > max_object_end - offset) {
            return -EINVAL;
        }
        if (data == nullptr && length > 0) {
            return -EFAULT;
        }
        if (accepted >= options.max_in_flight) {
            return -EAGAIN;
        }
        return 0;
    }

    // ---- synchronous mode -----------------------------------------------

    [[nodiscard]] static int read_now(int fd, std::byte *into, std::size_t length,
                                      std::uint64_t offset) noexcept
    {
        std::size_t done = 0;
        while (done < length) {
            const ssize_t n =
                ::pread(fd, into + done, length - done, static_cast<off_t>(offset + done));
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0) {
                return -errno;
            }
            if (n == 0) {
                break;
            }
            done += static_cast<std::size_t>(n);
        }
        return static_cast<int>(done);
    }

    [[nodiscard]] static int write_now(int fd, const std::byte *from, std::size_t length,
                                       std::uint64_t offset) noexcept
    {
        std::size_t done = 0;
        while (done < length) {
            const ssize_t n =
                ::pwrite(fd, from + done, length - done, static_cast<off_t>(offset + done));
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0) {
                return -errno;
            }
            if (n == 0) {
                return -EIO; // a regular file that takes nothing: never spin on it
            }
            done += static_cast<std::size_t>(n);
        }
        return static_cast<int>(done);
    }

    // ---- io_uring mode ----------------------------------------------------

    [[nodiscard]] Op &new_op(OpKind kind, std::uint64_t user_data)
    {
        const std::uint32_t slot = free_ops.back();
        free_ops.pop_back();
        Op &op = ops[slot];
        op.in_use = true;
        op.kind = kind;
        op.user_data = user_data;
        op.handle = no_handle;
        op.read_into = nullptr;
        op.write_from = nullptr;
        op.offset = 0;
        op.length = 0;
        op.done = 0;
        op.error = 0;
        op.parts = 0;
        op.fanout = 0;
        op.directory_changes = 0;
        return op;
    }

    [[nodiscard]] std::uint32_t slot_of(const Op &op) const noexcept
    {
        return static_cast<std::uint32_t>(&op - ops.data());
    }

    void submit_pending() noexcept
    {
        while (::io_uring_sq_ready(ring.get()) > 0) {
            const int rc = ::io_uring_submit(ring.get());
            if (rc > 0) {
                in_kernel += static_cast<std::size_t>(rc);
                continue;
            }
            if (rc == -EINTR) {
                continue;
            }
            // EAGAIN / EBUSY: the kernel is short of resources.  The SQEs stay
            // queued; the signal brings the caller back to reap() to retry.
            gossip::warning(Mask::storage, "io_uring_submit: {}; will retry",
                            errno_text(rc < 0 ? rc : -EAGAIN));
            signal();
            return;
        }
    }

    [[nodiscard]] io_uring_sqe *next_sqe() noexcept
    {
        io_uring_sqe *sqe = ::io_uring_get_sqe(ring.get());
        if (sqe == nullptr) {
            // Cannot happen with the ring sized for every part of every
            // operation, but a full ring must cost a submit, not an error.
            submit_pending();
            sqe = ::io_uring_get_sqe(ring.get());
        }
        return sqe;
    }

    static void record_error(Op &op, int error) noexcept
    {
        if (op.error == 0) {
            op.error = error;
        }
        if (error == -EIO) {
            gossip::error(Mask::storage, "I/O error on a data object (fan-out {:02x})", op.fanout);
        }
    }

    // Prepares (the rest of) the operation's object part.
    void prepare_object_part(Op &op) noexcept
    {
        io_uring_sqe *sqe = next_sqe();
        if (sqe == nullptr) {
            record_error(op, -EAGAIN);
            return;
        }
        const int fd = op.object->get();
        const auto rest = static_cast<unsigned>(op.length - op.done);
        switch (op.kind) {
        case OpKind::read:
            ::io_uring_prep_read(sqe, fd, op.read_into + op.done, rest, op.offset + op.done);
            break;
        case OpKind::write:
            ::io_uring_prep_write(sqe, fd, op.write_from + op.done, rest, op.offset + op.done);
            break;
        case OpKind::fsync:
            ::io_uring_prep_fsync(sqe, fd, 0);
            break;
        case OpKind::writeback:
            ::io_uring_prep_sync_file_range(sqe, fd, static_cast<unsigned>(op.length), op.offset,
                                            SYNC_FILE_RANGE_WRITE);
            break;
        }
        ::io_uring_sqe_set_data64(sqe, (std::uint64_t{slot_of(op)} << 1U) | object_part);
        ++op.parts;
    }

    void prepare_directory_part(Op &op) noexcept
    {
        io_uring_sqe *sqe = next_sqe();
        if (sqe == nullptr) {
            record_error(op, -EAGAIN);
            return;
        }
        ::io_uring_prep_fsync(sqe, op.directory.get(), 0);
        ::io_uring_sqe_set_data64(sqe, (std::uint64_t{slot_of(op)} << 1U) | directory_part);
        ++op.parts;
    }

    void finish(Op &op) noexcept
    {
        if (op.kind == OpKind::writeback) {
            // Only a hint to the disk: a failure here comes back at fsync.
            if (op.error != 0) {
                gossip::debug(Mask::storage, "early writeback (fan-out {:02x}): {}", op.fanout,
                              errno_text(op.error));
            }
            --writebacks_in_flight;
        } else {
            int result = op.error;
            if (result == 0 && op.kind != OpKind::fsync) {
                result = static_cast<int>(op.done);
            }
            if (op.kind == OpKind::write && op.error == 0 && early_writeback) {
                start_writeback(op);
            }
            push_ready(op.user_data, result);
        }
        release(op);
    }

    void release(Op &op) noexcept
    {
        op.object.reset();
        op.directory.reset();
        op.in_use = false;
        free_ops.push_back(slot_of(op));
    }

    // Starts the disk on what `write` just put in the page cache, so that
    // the fsync that makes it durable finds less to do (docs/storage.md
    // "Early writeback").
    void start_writeback(const Op &write) noexcept
    {
        if (writebacks_in_flight >= options.max_in_flight || free_ops.empty() ||
            write.length > std::numeric_limits<unsigned>::max()) {
            return;
        }
        // Never keep open a file the cache has let go: the store's fds stay
        // within max_open_files plus the callers' operations in flight.
        const auto cached = cache.find(write.handle);
        if (cached == cache.end() || cached->second.fd != write.object) {
            return;
        }
        Op &op = new_op(OpKind::writeback, 0);
        op.object = write.object;
        op.offset = write.offset;
        op.length = write.length;
        op.fanout = write.fanout;
        ++writebacks_in_flight;
        ++writebacks_started;
        prepare_object_part(op);
        if (op.parts == 0) { // no SQE: nothing was queued, nothing to wait for
            --writebacks_in_flight;
            release(op);
        }
    }

    // Finishes the operation at once if no part of it reached the ring.
    void finish_if_idle(Op &op) noexcept
    {
        if (op.parts == 0) {
            finish(op);
            signal();
        }
    }

    void on_cqe(std::uint64_t tag, int result) noexcept
    {
        const std::uint64_t slot = tag >> 1U;
        if (slot >= ops.size() || !ops[slot].in_use) {
            gossip::error(Mask::storage, "io_uring completion for unknown operation {}", tag);
            return;
        }
        Op &op = ops[slot];
        --op.parts;
        if ((tag & 1U) == directory_part) {
            if (result < 0) {
                record_error(op, result);
            } else {
                DirState &dir = dirs.at(op.fanout);
                dir.synced = std::max(dir.synced, op.directory_changes);
            }
            op.directory.reset();
        } else if (result < 0) {
            record_error(op, result);
        } else if (op.kind == OpKind::write && result == 0 && op.done < op.length) {
            record_error(op, -EIO); // a regular file that takes nothing: never spin on it
        } else if (op.kind != OpKind::fsync && op.kind != OpKind::writeback && result > 0) {
            op.done += static_cast<std::size_t>(result);
            if (op.done < op.length && op.error == 0) {
                prepare_object_part(op); // a short transfer: go on from where it stopped
            }
        }
        if (op.parts == 0) {
            finish(op);
        }
    }

    void collect_cqes() noexcept
    {
        io_uring_cqe *cqe = nullptr;
        while (::io_uring_peek_cqe(ring.get(), &cqe) == 0) {
            const std::uint64_t tag = ::io_uring_cqe_get_data64(cqe);
            const int result = cqe->res;
            ::io_uring_cqe_seen(ring.get(), cqe);
            --in_kernel;
            on_cqe(tag, result);
        }
    }

    // ---- operations -------------------------------------------------------

    [[nodiscard]] int read(Handle handle, std::uint64_t offset, std::span<std::byte> buffer,
                           std::uint64_t user_data)
    {
        if (const int rc = check_io(handle, offset, buffer.size(), buffer.data()); rc != 0) {
            return rc;
        }
        ++accepted;
        if (buffer.empty()) {
            complete_now(user_data, 0);
            return 0;
        }
        int error = 0;
        SharedFd fd = acquire(handle, false, error);
        if (!fd) {
            complete_now(user_data, error == -ENOENT ? 0 : error); // absent: nothing to read
            return 0;
        }
        if (mode == Mode::synchronous) {
            complete_now(user_data, read_now(fd->get(), buffer.data(), buffer.size(), offset));
            return 0;
        }
        Op &op = new_op(OpKind::read, user_data);
        op.object = std::move(fd);
        op.read_into = buffer.data();
        op.offset = offset;
        op.length = buffer.size();
        op.fanout = fanout_of(handle);
        prepare_object_part(op);
        finish_if_idle(op);
        return 0;
    }

    [[nodiscard]] int write(Handle handle, std::uint64_t offset, std::span<const std::byte> buffer,
                            std::uint64_t user_data)
    {
        if (const int rc = check_io(handle, offset, buffer.size(), buffer.data()); rc != 0) {
            return rc;
        }
        ++accepted;
        if (buffer.empty()) {
            complete_now(user_data, 0);
            return 0;
        }
        int error = 0;
        SharedFd fd = acquire(handle, true, error);
        if (!fd) {
            complete_now(user_data, error);
            return 0;
        }
        if (mode == Mode::synchronous) {
            complete_now(user_data, write_now(fd->get(), buffer.data(), buffer.size(), offset));
            return 0;
        }
        Op &op = new_op(OpKind::write, user_data);
        op.handle = handle;
        op.object = std::move(fd);
        op.write_from = buffer.data();
        op.offset = offset;
        op.length = buffer.size();
        op.fanout = fanout_of(handle);
        prepare_object_part(op);
        finish_if_idle(op);
        return 0;
    }

    [[nodiscard]] int fsync(Handle handle, std::uint64_t user_data)
    {
        if (handle == no_handle) {
            return -EINVAL;
        }
        if (accepted >= options.max_in_flight) {
            return -EAGAIN;
        }
        ++accepted;
        int error = 0;
        SharedFd fd = acquire(handle, false, error);
        if (!fd && error != -ENOENT) {
            complete_now(user_data, error);
            return 0;
        }
        const unsigned fanout = fanout_of(handle);
        DirState &dir = dirs.at(fanout);
        const bool sync_dir = dir.changes > dir.synced;
        const std::uint64_t changes = dir.changes;

        if (mode == Mode::synchronous) {
            int result = 0;
            if (fd && ::fsync(fd->get()) != 0) {
                result = -errno;
            }
            if (sync_dir) {
                const int rc = sync_directory(directory_path(fanout));
                if (rc == 0) {
                    dir.synced = std::max(dir.synced, changes);
                } else if (result == 0) {
                    result = rc;
                }
            }
            complete_now(user_data, result);
            return 0;
        }

        Op &op = new_op(OpKind::fsync, user_data);
        op.fanout = fanout;
        if (fd) {
            op.object = std::move(fd);
            prepare_object_part(op);
        }
        if (sync_dir) {
            const std::string path = directory_path(fanout);
            op.directory.reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
            if (op.directory.valid()) {
                op.directory_changes = changes;
                prepare_directory_part(op);
            } else {
                record_error(op, -errno);
            }
        }
        finish_if_idle(op);
        return 0;
    }

    [[nodiscard]] std::size_t reap(std::span<Completion> out)
    {
        drain_signal();
        if (ring.up()) {
            collect_cqes();
            submit_pending(); // what was queued, and the rest of short transfers
        }
        const std::size_t n = std::min(out.size(), ready_count);
        for (std::size_t i = 0; i < n; ++i) {
            out[i] = ready[ready_head];
            ready_head = (ready_head + 1) % ready.size();
        }
        ready_count -= n;
        accepted -= n;
        if (ready_count > 0) {
            signal(); // the caller asked for fewer than are waiting
        }
        return n;
    }
};

// ---- ObjectStore ------------------------------------------------------------

ObjectStore::ObjectStore(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
ObjectStore::~ObjectStore() = default;
ObjectStore::ObjectStore(ObjectStore &&) noexcept = default;
ObjectStore &ObjectStore::operator=(ObjectStore &&) noexcept = default;

std::optional<ObjectStore> ObjectStore::open(const std::filesystem::path &storage_dir,
                                             const Options &options, std::string &error)
{
    if (options.max_open_files == 0) {
        error = "object store: max_open_files must be at least 1";
        return std::nullopt;
    }
    if (options.max_in_flight == 0 || options.max_in_flight > max_in_flight_limit) {
        error = fmt::format("object store: max_in_flight must be in 1..{}", max_in_flight_limit);
        return std::nullopt;
    }
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    impl->storage = storage_dir.string();
    impl->objects = impl->storage + "/objects";

    struct stat st {};
    if (::stat(impl->storage.c_str(), &st) != 0) {
        error = fmt::format("storage directory {}: {}", impl->storage, errno_text(-errno));
        return std::nullopt;
    }
    if (!S_ISDIR(st.st_mode)) {
        error = fmt::format("storage directory {}: {}", impl->storage, errno_text(-ENOTDIR));
        return std::nullopt;
    }
    // New directories are synced into their parents now, so objects created
    // later only need their own fan-out directory synced.
    bool made = false;
    if (const int rc = make_directory(impl->objects, made); rc != 0) {
        error = fmt::format("{}: {}", impl->objects, errno_text(rc));
        return std::nullopt;
    }
    if (made) {
        if (const int rc = sync_directory(impl->storage); rc != 0) {
            error = fmt::format("fsync {}: {}", impl->storage, errno_text(rc));
            return std::nullopt;
        }
    }
    bool made_any = false;
    for (unsigned dir = 0; dir < fanout_dirs; ++dir) {
        const std::string path = impl->directory_path(dir);
        if (const int rc = make_directory(path, made); rc != 0) {
            error = fmt::format("{}: {}", path, errno_text(rc));
            return std::nullopt;
        }
        made_any = made_any || made;
    }
    if (made_any) {
        if (const int rc = sync_directory(impl->objects); rc != 0) {
            error = fmt::format("fsync {}: {}", impl->objects, errno_text(rc));
            return std::nullopt;
        }
    }

    impl->event.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!impl->event.valid()) {
        error = fmt::format("object store: eventfd: {}", errno_text(-errno));
        return std::nullopt;
    }
    // As many slots again for the store's own early writebacks.
    impl->ops.resize(2 * options.max_in_flight);
    impl->free_ops.reserve(impl->ops.size());
    for (std::size_t slot = impl->ops.size(); slot > 0; --slot) {
        impl->free_ops.push_back(static_cast<std::uint32_t>(slot - 1));
    }
    impl->ready.resize(options.max_in_flight);
    impl->cache.reserve(options.max_open_files);

    if (options.force_synchronous) {
        gossip::info(Mask::storage, "object store {}: synchronous I/O (forced)", impl->storage);
        return ObjectStore(std::move(impl));
    }
    // Room for both parts of every operation, so a batch never has to be
    // submitted early for lack of space (an early writeback that finds the
    // queue full submits it: next_sqe), and room in the completion queue
    // for those and one per early writeback too.  At max_in_flight_limit:
    // 32768 and 65536, the kernel's largest rings.
    const auto entries = static_cast<unsigned>(power_of_two_at_least(2 * options.max_in_flight));
    const auto cq_entries = static_cast<unsigned>(power_of_two_at_least(3 * options.max_in_flight));
    io_uring_params params{};
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
    params.cq_entries = cq_entries;
    int rc = impl->ring.init(entries, params);
    if (rc == -EINVAL) { // a kernel older than SUBMIT_ALL (5.18)
        params = {};
        params.flags = IORING_SETUP_CQSIZE;
        params.cq_entries = cq_entries;
        rc = impl->ring.init(entries, params);
    }
    if (rc == 0) {
        rc = ::io_uring_register_eventfd(impl->ring.get(), impl->event.get());
        if (rc != 0) {
            impl->ring.reset();
        }
    }
    if (rc != 0) {
        gossip::warning(Mask::storage,
                        "object store {}: io_uring unavailable ({}): synchronous I/O, which "
                        "blocks the event loop",
                        impl->storage, errno_text(rc));
        return ObjectStore(std::move(impl));
    }
    impl->mode = Mode::io_uring;
    // Memory file systems have no disk to start: there it would only cost
    // an io-wq hand-off per write.
    struct statfs fs {};
    const bool in_memory = ::statfs(impl->storage.c_str(), &fs) == 0 &&
                           (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC);
    impl->early_writeback = options.early_writeback && !in_memory;
    gossip::info(Mask::storage, "object store {}: io_uring, {} entries, early writeback {}",
                 impl->storage, entries,
                 impl->early_writeback ? "on" : (in_memory ? "off (memory)" : "off"));
    return ObjectStore(std::move(impl));
}

Mode ObjectStore::mode() const noexcept
{
    return impl_->mode;
}

bool ObjectStore::early_writeback() const noexcept
{
    return impl_->early_writeback;
}

std::uint64_t ObjectStore::writebacks_started() const noexcept
{
    return impl_->writebacks_started;
}

int ObjectStore::event_fd() const noexcept
{
    return impl_->event.get();
}

int ObjectStore::submit_read(Handle handle, std::uint64_t object_offset,
                             std::span<std::byte> buffer, std::uint64_t user_data)
{
    return impl_->read(handle, object_offset, buffer, user_data);
}

int ObjectStore::submit_write(Handle handle, std::uint64_t object_offset,
                              std::span<const std::byte> buffer, std::uint64_t user_data)
{
    return impl_->write(handle, object_offset, buffer, user_data);
}

int ObjectStore::submit_fsync(Handle handle, std::uint64_t user_data)
{
    return impl_->fsync(handle, user_data);
}

void ObjectStore::flush()
{
    if (impl_->ring.up()) {
        impl_->submit_pending();
    }
}

std::size_t ObjectStore::reap(std::span<Completion> out)
{
    return impl_->reap(out);
}

std::size_t ObjectStore::in_flight() const noexcept
{
    return impl_->accepted;
}

int ObjectStore::truncate(Handle handle, std::uint64_t size)
{
    if (handle == no_handle || size > max_object_end) {
        return -EINVAL;
    }
    int error = 0;
    const Impl::SharedFd fd = impl_->acquire(handle, size > 0, error);
    if (!fd) {
        return error == -ENOENT && size == 0 ? 0 : error;
    }
    if (::ftruncate(fd->get(), static_cast<off_t>(size)) != 0) {
        return -errno;
    }
    return 0;
}

int ObjectStore::remove(Handle handle)
{
    if (handle == no_handle) {
        return -EINVAL;
    }
    impl_->forget(handle);
    if (::unlink(impl_->object_path(handle).c_str()) != 0) {
        return errno == ENOENT ? 0 : -errno;
    }
    ++impl_->dirs.at(fanout_of(handle)).changes;
    return 0;
}

// NOLINTNEXTLINE(readability-non-const-parameter): written through rc
std::optional<std::uint64_t> ObjectStore::size(Handle handle, int *error)
{
    int ignored = 0;
    int &rc = error != nullptr ? *error : ignored;
    rc = 0;
    if (handle == no_handle) {
        rc = -EINVAL;
        return std::nullopt;
    }
    struct stat st {};
    const auto found = impl_->cache.find(handle);
    const int status = found != impl_->cache.end()
                           ? ::fstat(found->second.fd->get(), &st)
                           : ::stat(impl_->object_path(handle).c_str(), &st);
    if (status != 0) {
        rc = errno == ENOENT ? 0 : -errno;
        return std::nullopt;
    }
    return static_cast<std::uint64_t>(st.st_size);
}

ListPage ObjectStore::list(std::uint64_t cookie, std::size_t max)
{
    ListPage page;
    if (max == 0) {
        page.error = -EINVAL;
        return page;
    }
    max = std::min(max, max_list_handles);
    // The cookie is the last handle returned (0 before the first): resume
    // in its directory, after it.
    for (unsigned dir = fanout_of(cookie); dir < fanout_dirs; ++dir) {
        const Handle after = dir == fanout_of(cookie) ? cookie : no_handle;
        const std::size_t room = max - page.handles.size();
        const std::string path = impl_->directory_path(dir);
        const DirStream stream(::opendir(path.c_str()));
        if (!stream) {
            page.error = -errno;
            return page;
        }
        // The `room` smallest handles past the cookie: a bounded max-heap
        // whatever the directory holds.
        std::priority_queue<Handle> smallest;
        for (;;) {
            errno = 0;
            const dirent *entry =
                ::readdir(stream.get()); // NOLINT(concurrency-mt-unsafe): own stream
            if (entry == nullptr) {
                if (errno != 0) {
                    page.error = -errno;
                    return page;
                }
                break;
            }
            const auto handle = parse_object_name(static_cast<const char *>(entry->d_name), dir);
            if (!handle || *handle <= after || !regular_file(stream.get(), *entry)) {
                continue;
            }
            if (smallest.size() < room) {
                smallest.push(*handle);
            } else if (*handle < smallest.top()) {
                smallest.pop();
                smallest.push(*handle);
            }
        }
        const std::size_t first = page.handles.size();
        page.handles.resize(first + smallest.size());
        for (std::size_t i = page.handles.size(); i > first; --i) {
            page.handles[i - 1] = smallest.top();
            smallest.pop();
        }
        if (page.handles.size() == max) {
            page.next_cookie = page.handles.back();
            return page;
        }
    }
    page.next_cookie = page.handles.empty() ? cookie : page.handles.back();
    page.end = true;
    return page;
}

StatFs ObjectStore::statfs() const
{
    StatFs out;
    struct statvfs vfs {};
    if (::statvfs(impl_->storage.c_str(), &vfs) != 0) {
        out.error = -errno;
        return out;
    }
    out.total_bytes = std::uint64_t{vfs.f_blocks} * vfs.f_frsize;
    out.free_bytes = std::uint64_t{vfs.f_bfree} * vfs.f_frsize;
    out.available_bytes = std::uint64_t{vfs.f_bavail} * vfs.f_frsize;
    out.total_objects = vfs.f_files;
    out.free_objects = vfs.f_ffree;
    out.available_objects = vfs.f_favail;
    return out;
}

std::filesystem::path ObjectStore::object_path(Handle handle) const
{
    return impl_->object_path(handle);
}

} // namespace pvfs::data
