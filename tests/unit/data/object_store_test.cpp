// Tests of the data object store (server/data/include/object_store.hpp): data round
// trips in both modes (io_uring and synchronous), many operations in flight,
// reads at and past the end, absent and sparse objects, fsync, the
// synchronous metadata calls, paging through objects, a tiny open-file
// cache, real ENOSPC from a small tmpfs, misuse, the event fd, and
// destruction with operations in flight.  Kyua runs each case in a
// process and a scratch directory of its own.
#include <atf-c++.hpp>

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "object_store.hpp"
#include "pvfs/types.hpp"

namespace fs = std::filesystem;
using pvfs::Handle;
using pvfs::make_handle;
using pvfs::data::Completion;
using pvfs::data::Mode;
using pvfs::data::ObjectStore;
using pvfs::data::Options;

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

void require_msg(bool ok, const std::string &why)
{
    if (!ok) {
        ATF_FAIL(why);
    }
}

std::string errno_name(int negative)
{
    return negative >= 0
               ? std::to_string(negative)
               : fmt::format("-{} ({})", -negative,
                             std::strerror(-negative)); // NOLINT(concurrency-mt-unsafe): one thread
}

// A fresh storage directory in the test's scratch directory.
fs::path make_storage(const std::string &name = "storage")
{
    fs::path dir = fs::current_path() / name;
    fs::create_directories(dir);
    return dir;
}

// Opens a store; in io_uring mode the case is skipped where the kernel
// refuses io_uring (containers), so the synchronous twin still runs.
ObjectStore open_store(const fs::path &dir, Mode mode, Options options = {})
{
    options.force_synchronous = mode == Mode::synchronous;
    std::string error;
    std::optional<ObjectStore> store = ObjectStore::open(dir, options, error);
    require_msg(store.has_value(), "open: " + error);
    if (store->mode() != mode) {
        ATF_SKIP("io_uring is not available on this kernel");
    }
    return std::move(*store);
}

std::vector<std::byte> pattern(std::size_t size, std::uint64_t seed)
{
    std::vector<std::byte> out(size);
    std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (std::size_t i = 0; i < size; ++i) {
        x ^= x << 13U;
        x ^= x >> 7U;
        x ^= x << 17U;
        out[i] = static_cast<std::byte>(x & 0xffU);
    }
    return out;
}

// Waits (on the event fd) until `count` completions arrive; returns them
// by user_data, failing on duplicates or after 60 s.
std::map<std::uint64_t, int> wait_for(ObjectStore &store, std::size_t count)
{
    store.flush();
    std::map<std::uint64_t, int> results;
    std::array<Completion, 37> batch{}; // odd size: completions span reaps
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (results.size() < count) {
        const std::size_t n = store.reap(batch);
        for (std::size_t i = 0; i < n; ++i) {
            require_msg(results.emplace(batch[i].user_data, batch[i].result).second,
                        fmt::format("completion {} delivered twice", batch[i].user_data));
        }
        if (results.size() >= count) {
            break;
        }
        require_msg(std::chrono::steady_clock::now() < deadline,
                    fmt::format("only {} of {} completions", results.size(), count));
        pollfd pfd{store.event_fd(), POLLIN, 0};
        ::poll(&pfd, 1, 1000);
    }
    std::array<Completion, 1> extra{};
    require_msg(store.reap(extra) == 0, "an extra completion");
    require_msg(store.in_flight() == 0, "operations left in flight");
    return results;
}

int wait_one(ObjectStore &store, std::uint64_t user_data)
{
    const auto results = wait_for(store, 1);
    require_msg(results.count(user_data) == 1, "wrong user_data");
    return results.at(user_data);
}

int write_sync(ObjectStore &store, Handle h, std::uint64_t offset, std::span<const std::byte> data)
{
    ATF_REQUIRE_EQ(store.submit_write(h, offset, data, 7), 0);
    return wait_one(store, 7);
}

int read_sync(ObjectStore &store, Handle h, std::uint64_t offset, std::span<std::byte> into)
{
    ATF_REQUIRE_EQ(store.submit_read(h, offset, into, 8), 0);
    return wait_one(store, 8);
}

bool readable(int fd, int timeout_ms)
{
    pollfd pfd{fd, POLLIN, 0};
    return ::poll(&pfd, 1, timeout_ms) == 1 && (pfd.revents & POLLIN) != 0;
}

std::size_t open_fds()
{
    std::size_t n = 0;
    for ([[maybe_unused]] const auto &entry : fs::directory_iterator("/proc/self/fd")) {
        ++n;
    }
    return n;
}

// ---- the cases, each run in both modes ------------------------------------

void round_trips(Mode mode)
{
    ObjectStore store = open_store(make_storage(), mode);
    const std::vector<std::size_t> sizes = {0, 1, 4095, 4096, MiB, 8 * MiB};
    const std::vector<std::uint64_t> offsets = {1, 4097, 12345, 3 * MiB + 7};
    std::uint64_t id = 1;
    for (const std::size_t size : sizes) {
        for (const std::uint64_t offset : offsets) {
            const Handle h = make_handle(3, id++);
            const std::string what = fmt::format("size {} at {}", size, offset);
            const std::vector<std::byte> data = pattern(size, id);
            const int wrote = write_sync(store, h, offset, data);
            require_msg(wrote == static_cast<int>(size), what + ": wrote " + errno_name(wrote));
            const std::optional<std::uint64_t> stored = store.size(h);
            if (size == 0) {
                require_msg(!stored, what + ": an empty write created the object");
                continue;
            }
            require_msg(stored == offset + size, what + ": object size");
            std::vector<std::byte> back(size, std::byte{0x5a});
            const int got = read_sync(store, h, offset, back);
            require_msg(got == static_cast<int>(size), what + ": read " + errno_name(got));
            require_msg(back == data, what + ": data differs");
            // The bytes before the write are a hole: zeros.
            std::vector<std::byte> hole(std::min<std::uint64_t>(offset, 4096), std::byte{1});
            ATF_REQUIRE_EQ(read_sync(store, h, 0, hole), static_cast<int>(hole.size()));
            require_msg(std::all_of(hole.begin(), hole.end(),
                                    [](std::byte b) { return b == std::byte{0}; }),
                        what + ": hole not zero");
        }
    }
    // Overwrite in the middle of an existing object.
    const Handle h = make_handle(3, 1000);
    std::vector<std::byte> data = pattern(std::size_t{3} * 4096, 1);
    ATF_REQUIRE_EQ(write_sync(store, h, 0, data), 3 * 4096);
    const std::vector<std::byte> patch = pattern(100, 2);
    ATF_REQUIRE_EQ(write_sync(store, h, 5000, patch), 100);
    std::copy(patch.begin(), patch.end(), data.begin() + 5000);
    std::vector<std::byte> back(data.size());
    ATF_REQUIRE_EQ(read_sync(store, h, 0, back), 3 * 4096);
    ATF_REQUIRE(back == data);
}

void many_in_flight(Mode mode)
{
    ObjectStore store = open_store(make_storage(), mode);
    constexpr std::size_t ops = 256;
    constexpr std::size_t chunk = 8 * KiB;
    std::vector<std::vector<std::byte>> data;
    for (std::size_t i = 0; i < ops; ++i) {
        data.push_back(pattern(chunk, i));
    }
    // 16 objects, 16 chunks each, submitted in a scrambled order.
    std::vector<std::size_t> order(ops);
    for (std::size_t i = 0; i < ops; ++i) {
        order[i] = (i * 97) % ops;
    }
    for (const std::size_t i : order) {
        ATF_REQUIRE_EQ(store.submit_write(make_handle(0, 100 + i % 16), (i / 16) * chunk + 3,
                                          data[i], 1000 + i),
                       0);
    }
    ATF_REQUIRE_EQ(store.in_flight(), ops);
    auto results = wait_for(store, ops);
    for (std::size_t i = 0; i < ops; ++i) {
        require_msg(results.at(1000 + i) == static_cast<int>(chunk),
                    fmt::format("write {}: {}", i, errno_name(results.at(1000 + i))));
    }
    std::vector<std::vector<std::byte>> back(ops, std::vector<std::byte>(chunk));
    for (const std::size_t i : order) {
        ATF_REQUIRE_EQ(store.submit_read(make_handle(0, 100 + i % 16), (i / 16) * chunk + 3,
                                         back[i], 5000 + i),
                       0);
    }
    ATF_REQUIRE_EQ(store.in_flight(), ops);
    results = wait_for(store, ops);
    for (std::size_t i = 0; i < ops; ++i) {
        require_msg(results.at(5000 + i) == static_cast<int>(chunk), "short read");
        require_msg(back[i] == data[i], fmt::format("chunk {} differs", i));
    }
}

void short_reads_and_holes(Mode mode)
{
    ObjectStore store = open_store(make_storage(), mode);
    const Handle h = make_handle(1, 42);
    const std::vector<std::byte> data = pattern(1000, 9);
    ATF_REQUIRE_EQ(write_sync(store, h, 0, data), 1000);
    std::vector<std::byte> buf(4096);
    // At the end: what exists.
    ATF_REQUIRE_EQ(read_sync(store, h, 500, buf), 500);
    ATF_REQUIRE(std::equal(data.begin() + 500, data.end(), buf.begin()));
    ATF_REQUIRE_EQ(read_sync(store, h, 1000, buf), 0);
    ATF_REQUIRE_EQ(read_sync(store, h, 1ULL << 40U, buf), 0);

    // Absent object: reads as nothing; size, fsync, remove, truncate(0).
    const Handle absent = make_handle(1, 43);
    ATF_REQUIRE_EQ(read_sync(store, absent, 0, buf), 0);
    int error = 99;
    ATF_REQUIRE(!store.size(absent, &error));
    ATF_REQUIRE_EQ(error, 0);
    ATF_REQUIRE_EQ(store.submit_fsync(absent, 3), 0);
    ATF_REQUIRE_EQ(wait_one(store, 3), 0);
    ATF_REQUIRE_EQ(store.remove(absent), 0);
    ATF_REQUIRE_EQ(store.truncate(absent, 0), 0);
    ATF_REQUIRE(!store.size(absent));
    ATF_REQUIRE(!fs::exists(store.object_path(absent)));

    // Sparse: 10 bytes past 1 MiB; everything before reads as zeros.
    const Handle sparse = make_handle(1, 44);
    const std::vector<std::byte> tail = pattern(10, 4);
    ATF_REQUIRE_EQ(write_sync(store, sparse, MiB + 3, tail), 10);
    ATF_REQUIRE(store.size(sparse) == MiB + 13);
    std::vector<std::byte> whole(2 * MiB, std::byte{0x77});
    ATF_REQUIRE_EQ(read_sync(store, sparse, 0, whole), static_cast<int>(MiB + 13));
    ATF_REQUIRE(std::all_of(whole.begin(), whole.begin() + MiB + 3,
                            [](std::byte b) { return b == std::byte{0}; }));
    ATF_REQUIRE(std::equal(tail.begin(), tail.end(), whole.begin() + MiB + 3));
    struct stat st {};
    ATF_REQUIRE_EQ(::stat(store.object_path(sparse).c_str(), &st), 0);
    require_msg(st.st_blocks * 512 < static_cast<long>(MiB),
                fmt::format("not sparse: {} blocks", st.st_blocks));
}

void fsync_completes(Mode mode)
{
    const fs::path dir = make_storage();
    ObjectStore store = open_store(dir, mode);
    const Handle h = make_handle(2, 0x1ab);
    ATF_REQUIRE_EQ(store.object_path(h), dir / "objects" / "ab" / "00020000000001ab");
    const std::vector<std::byte> data = pattern(64 * KiB, 5);
    ATF_REQUIRE_EQ(write_sync(store, h, 0, data), static_cast<int>(data.size()));
    // New object: fsync covers its directory entry too.
    ATF_REQUIRE_EQ(store.submit_fsync(h, 11), 0);
    ATF_REQUIRE_EQ(wait_one(store, 11), 0);
    // Again, with nothing to do for the directory; and several at once.
    for (std::uint64_t i = 0; i < 5; ++i) {
        ATF_REQUIRE_EQ(store.submit_fsync(h, 20 + i), 0);
    }
    const auto results = wait_for(store, 5);
    for (const auto &[user_data, result] : results) {
        require_msg(result == 0, fmt::format("fsync {}: {}", user_data, errno_name(result)));
    }
    ATF_REQUIRE(fs::file_size(store.object_path(h)) == data.size());
    ATF_REQUIRE(fs::status(store.object_path(h)).permissions() ==
                (fs::perms::owner_read | fs::perms::owner_write));
}

// Whether an fsync also syncs the fan-out directory shows when that
// directory cannot be opened: moved away, it fails the fsync that needs it
// and not the one that does not.
void directory_sync_once(Mode mode)
{
    const fs::path dir = make_storage();
    ObjectStore store = open_store(dir, mode);
    const fs::path fanout = dir / "objects" / "ab";
    const fs::path away = dir / "objects" / "ab.away";
    const Handle first = make_handle(0, 0x1ab);
    const Handle second = make_handle(0, 0x2ab);
    const std::vector<std::byte> data = pattern(100, 1);
    std::uint64_t next = 1;
    const auto fsync_result = [&](Handle h) {
        const std::uint64_t user_data = next++;
        ATF_REQUIRE_EQ(store.submit_fsync(h, user_data), 0);
        return wait_one(store, user_data);
    };

    ATF_REQUIRE_EQ(write_sync(store, first, 0, data), 100); // creates: entry not durable yet
    fs::rename(fanout, away);
    ATF_REQUIRE_EQ(fsync_result(first), -ENOENT); // had to sync the directory
    fs::rename(away, fanout);
    ATF_REQUIRE_EQ(fsync_result(first), 0); // synced it now
    fs::rename(fanout, away);
    ATF_REQUIRE_EQ(fsync_result(first), 0); // nothing new in the directory
    fs::rename(away, fanout);

    ATF_REQUIRE_EQ(write_sync(store, first, 100, data), 100); // no new entry
    fs::rename(fanout, away);
    ATF_REQUIRE_EQ(fsync_result(first), 0);
    fs::rename(away, fanout);

    ATF_REQUIRE_EQ(write_sync(store, second, 0, data), 100); // a new entry again
    ATF_REQUIRE_EQ(store.remove(first), 0);                  // and a removal
    fs::rename(fanout, away);
    ATF_REQUIRE_EQ(fsync_result(second), -ENOENT);
    fs::rename(away, fanout);
    ATF_REQUIRE_EQ(fsync_result(second), 0);
    // The removed object's fsync syncs nothing but a dirty directory.
    ATF_REQUIRE_EQ(fsync_result(first), 0);
}

void small_fd_cache(Mode mode)
{
    Options options;
    options.max_open_files = 4;
    const std::size_t before = open_fds();
    ObjectStore store = open_store(make_storage(), mode, options);
    constexpr std::size_t files = 64;
    std::vector<std::vector<std::byte>> data;
    for (std::size_t i = 0; i < files; ++i) {
        data.push_back(pattern(64 * KiB + i, i + 50));
    }
    for (std::size_t i = 0; i < files; ++i) {
        ATF_REQUIRE_EQ(store.submit_write(make_handle(0, 7000 + i), 4096, data[i], i), 0);
    }
    // Everything in flight at once, through a cache of 4.
    auto results = wait_for(store, files);
    for (std::size_t i = 0; i < files; ++i) {
        require_msg(results.at(i) == static_cast<int>(data[i].size()),
                    fmt::format("write {}: {}", i, errno_name(results.at(i))));
    }
    // Evicted fds closed once their operations were done.
    const std::size_t after = open_fds();
    require_msg(after <= before + 4 + 4,
                fmt::format("{} fds open before, {} after", before, after));
    std::vector<std::vector<std::byte>> back;
    for (std::size_t i = 0; i < files; ++i) {
        back.emplace_back(data[i].size());
        ATF_REQUIRE_EQ(store.submit_read(make_handle(0, 7000 + i), 4096, back[i], i), 0);
        ATF_REQUIRE_EQ(store.submit_fsync(make_handle(0, 7000 + i), 100 + i), 0);
    }
    results = wait_for(store, 2 * files);
    for (std::size_t i = 0; i < files; ++i) {
        ATF_REQUIRE_EQ(results.at(i), static_cast<int>(data[i].size()));
        ATF_REQUIRE_EQ(results.at(100 + i), 0);
        require_msg(back[i] == data[i], fmt::format("file {} differs", i));
    }
}

void enospc(Mode mode)
{
    if (::geteuid() != 0) {
        ATF_SKIP("needs root to mount a tmpfs");
    }
    if (::unshare(CLONE_NEWNS) != 0) {
        ATF_SKIP(std::string("unshare(CLONE_NEWNS): ") +
                 std::strerror(errno)); // NOLINT(concurrency-mt-unsafe): one thread
    }
    ATF_REQUIRE_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
    const fs::path dir = make_storage("tiny");
    ATF_REQUIRE_EQ(::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m,mode=0700"), 0);
    ObjectStore store = open_store(dir, mode);
    const std::vector<std::byte> data = pattern(2 * MiB, 1);
    const int result = write_sync(store, make_handle(0, 5), 0, data);
    require_msg(result == -ENOSPC, "2 MiB into 1 MiB: " + errno_name(result));
    // Full, not broken: smaller operations still report precisely.
    const std::vector<std::byte> more = pattern(8192, 2);
    ATF_REQUIRE_EQ(write_sync(store, make_handle(0, 6), 0, more), -ENOSPC);
    std::vector<std::byte> back(4096);
    ATF_REQUIRE_EQ(read_sync(store, make_handle(0, 5), 0, back), 4096);
    ATF_REQUIRE(std::equal(back.begin(), back.end(), data.begin()));
    ATF_REQUIRE_EQ(store.remove(make_handle(0, 5)), 0);
    ATF_REQUIRE_EQ(write_sync(store, make_handle(0, 6), 0, more), 8192);
}

// Mappings the kernel cannot read from or write to.
struct Mapping {
    void *address = MAP_FAILED;
    std::size_t length = 0;
    Mapping(std::size_t bytes, int protection)
        : address(::mmap(nullptr, bytes, protection, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)),
          length(bytes)
    {
        ATF_REQUIRE(address != MAP_FAILED);
    }
    Mapping(const Mapping &) = delete;
    Mapping &operator=(const Mapping &) = delete;
    Mapping(Mapping &&) = delete;
    Mapping &operator=(Mapping &&) = delete;
    ~Mapping() { ::munmap(address, length); }
    [[nodiscard]] std::span<std::byte> bytes() const
    {
        return {static_cast<std::byte *>(address), length};
    }
};

void misuse(Mode mode)
{
    Options options;
    options.max_in_flight = 2;
    const fs::path dir = make_storage();
    ObjectStore store = open_store(dir, mode, options);
    std::vector<std::byte> buf(4096);
    const Handle h = make_handle(0, 9);
    const std::uint64_t max_end = pvfs::data::max_object_end;

    // Rejected at submit, no completion follows.
    ATF_REQUIRE_EQ(store.submit_write(pvfs::no_handle, 0, buf, 1), -EINVAL);
    ATF_REQUIRE_EQ(store.submit_read(pvfs::no_handle, 0, buf, 1), -EINVAL);
    ATF_REQUIRE_EQ(store.submit_fsync(pvfs::no_handle, 1), -EINVAL);
    ATF_REQUIRE_EQ(store.submit_write(h, max_end - 10, buf, 1), -EINVAL);
    ATF_REQUIRE_EQ(store.submit_read(h, ~std::uint64_t{0}, buf, 1), -EINVAL);
    // The last bytes an object may have: written, or refused by the file
    // system (ext4 stops at 16 TiB), never wrapped.
    ATF_REQUIRE_EQ(store.submit_write(h, max_end - buf.size(), buf, 1), 0);
    const int at_end = wait_one(store, 1);
    require_msg(at_end == static_cast<int>(buf.size()) || at_end == -EFBIG,
                "write at the end: " + errno_name(at_end));
    const std::span<const std::byte> null_buffer(static_cast<const std::byte *>(nullptr), 10);
    ATF_REQUIRE_EQ(store.submit_write(h, 0, null_buffer, 1), -EFAULT);
    // Too long for one operation: refused before anything touches it.
    const std::span<const std::byte> too_long(buf.data(), pvfs::data::max_io_bytes + 1);
    ATF_REQUIRE_EQ(store.submit_write(h, 0, too_long, 1), -EINVAL);
    ATF_REQUIRE_EQ(store.in_flight(), 0U);

    // Full: -EAGAIN until reaped.
    ATF_REQUIRE_EQ(store.submit_write(h, 0, buf, 1), 0);
    ATF_REQUIRE_EQ(store.submit_write(h, 4096, buf, 2), 0);
    ATF_REQUIRE_EQ(store.submit_write(h, 8192, buf, 3), -EAGAIN);
    ATF_REQUIRE_EQ(store.submit_fsync(h, 3), -EAGAIN);
    const auto results = wait_for(store, 2);
    ATF_REQUIRE_EQ(results.at(1), 4096);
    ATF_REQUIRE_EQ(results.at(2), 4096);
    std::array<Completion, 1> none{};
    ATF_REQUIRE_EQ(store.reap(std::span<Completion>(none.data(), 0)), 0U);

    // Buffers the kernel cannot touch: an error in the completion, no crash.
    const Mapping no_access(4096, PROT_NONE);
    ATF_REQUIRE_EQ(store.submit_write(h, 0, no_access.bytes(), 4), 0);
    ATF_REQUIRE_EQ(wait_one(store, 4), -EFAULT);
    const Mapping read_only(4096, PROT_READ);
    ATF_REQUIRE_EQ(store.submit_read(h, 0, read_only.bytes(), 5), 0);
    ATF_REQUIRE_EQ(wait_one(store, 5), -EFAULT);

    // Synchronous calls.
    ATF_REQUIRE_EQ(store.truncate(h, max_end + 1), -EINVAL);
    ATF_REQUIRE_EQ(store.truncate(pvfs::no_handle, 0), -EINVAL);
    ATF_REQUIRE_EQ(store.remove(pvfs::no_handle), -EINVAL);
    int error = 0;
    ATF_REQUIRE(!store.size(pvfs::no_handle, &error));
    ATF_REQUIRE_EQ(error, -EINVAL);
    ATF_REQUIRE_EQ(store.list(0, 0).error, -EINVAL);

    // The storage pulled from under the store: errors, not crashes.
    const Handle lost = make_handle(0, 0x3cd);
    fs::remove_all(dir / "objects" / "cd");
    ATF_REQUIRE_EQ(store.submit_write(lost, 0, buf, 6), 0);
    ATF_REQUIRE_EQ(wait_one(store, 6), -ENOENT);
    ATF_REQUIRE_EQ(read_sync(store, lost, 0, buf), 0);
    ATF_REQUIRE_EQ(store.truncate(lost, 100), -ENOENT);
    ATF_REQUIRE_EQ(store.list(0, 10).error, -ENOENT);

    // Opening: no directory, a file, bad options.
    std::string why;
    ATF_REQUIRE(!ObjectStore::open(dir / "missing", {}, why));
    ATF_REQUIRE(why.find("missing") != std::string::npos);
    why.clear();
    ATF_REQUIRE(!ObjectStore::open(store.object_path(h), {}, why));
    ATF_REQUIRE(!why.empty());
    Options bad;
    bad.max_in_flight = 0;
    ATF_REQUIRE(!ObjectStore::open(dir, bad, why));
    bad.max_in_flight = pvfs::data::max_in_flight_limit + 1;
    ATF_REQUIRE(!ObjectStore::open(dir, bad, why));
    bad = {};
    bad.max_open_files = 0;
    ATF_REQUIRE(!ObjectStore::open(dir, bad, why));
}

void event_fd_signals(Mode mode)
{
    ObjectStore store = open_store(make_storage(), mode);
    const int fd = store.event_fd();
    ATF_REQUIRE(fd >= 0);
    ATF_REQUIRE(!readable(fd, 0));
    const std::vector<std::byte> data = pattern(MiB, 3);
    ATF_REQUIRE_EQ(store.submit_write(make_handle(0, 1), 0, data, 1), 0);
    store.flush();
    require_msg(readable(fd, 10000), "event fd not readable after a completion");
    std::array<Completion, 4> out{};
    ATF_REQUIRE_EQ(store.reap(out), 1U);
    ATF_REQUIRE_EQ(out[0].user_data, 1U);
    ATF_REQUIRE_EQ(out[0].result, static_cast<int>(MiB));
    ATF_REQUIRE(!readable(fd, 0));

    // Three waiting, one taken at a time: stays readable until the last.
    std::vector<std::vector<std::byte>> back(3, std::vector<std::byte>(4096));
    for (std::uint64_t i = 0; i < 3; ++i) {
        ATF_REQUIRE_EQ(store.submit_read(make_handle(0, 1), i * 4096, back[i], 10 + i), 0);
    }
    store.flush();
    std::set<std::uint64_t> seen;
    for (int i = 0; i < 3; ++i) {
        require_msg(readable(fd, 10000), fmt::format("not readable with {} left", 3 - i));
        std::size_t n = 0;
        // The kernel may post the completions one by one.
        for (int tries = 0; n == 0 && tries < 1000; ++tries) {
            n = store.reap(std::span<Completion>(out.data(), 1));
            if (n == 0) {
                readable(fd, 100);
            }
        }
        ATF_REQUIRE_EQ(n, 1U);
        ATF_REQUIRE_EQ(out[0].result, 4096);
        seen.insert(out[0].user_data);
    }
    ATF_REQUIRE_EQ(seen.size(), 3U);
    ATF_REQUIRE(!readable(fd, 0));
    ATF_REQUIRE_EQ(store.in_flight(), 0U);
}

void destruction_waits(Mode mode)
{
    const fs::path dir = make_storage();
    constexpr std::size_t files = 32;
    std::vector<std::byte> data = pattern(MiB, 8);
    fs::path first;
    {
        ObjectStore store = open_store(dir, mode);
        first = store.object_path(make_handle(0, 1));
        for (std::size_t i = 0; i < files; ++i) {
            ATF_REQUIRE_EQ(store.submit_write(make_handle(0, 1 + i), 0, data, i), 0);
        }
        store.flush();
        // Destroyed with everything in flight and nothing reaped.
    }
    // Every accepted write was carried out before the store went away, so
    // scribbling over the buffer now cannot reach any object.
    std::fill(data.begin(), data.end(), std::byte{0});
    ObjectStore again = open_store(dir, mode);
    std::vector<std::byte> back(MiB);
    for (std::size_t i = 0; i < files; ++i) {
        ATF_REQUIRE(again.size(make_handle(0, 1 + i)) == MiB);
    }
    ATF_REQUIRE_EQ(read_sync(again, make_handle(0, 1), 0, back), static_cast<int>(MiB));
    ATF_REQUIRE(back == pattern(MiB, 8));
    ATF_REQUIRE_EQ(again.in_flight(), 0U);
}

} // namespace

// A macro because ATF declares test cases with macros: one case per mode.
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage)
#define BOTH_MODES(name)                                                                           \
    ATF_TEST_CASE_WITHOUT_HEAD(name##_uring);                                                      \
    ATF_TEST_CASE_BODY(name##_uring)                                                               \
    {                                                                                              \
        name(Mode::io_uring);                                                                      \
    }                                                                                              \
    ATF_TEST_CASE_WITHOUT_HEAD(name##_sync);                                                       \
    ATF_TEST_CASE_BODY(name##_sync)                                                                \
    {                                                                                              \
        name(Mode::synchronous);                                                                   \
    }

BOTH_MODES(round_trips)
BOTH_MODES(many_in_flight)
BOTH_MODES(short_reads_and_holes)
BOTH_MODES(fsync_completes)
BOTH_MODES(directory_sync_once)
BOTH_MODES(small_fd_cache)
BOTH_MODES(enospc)
BOTH_MODES(misuse)
BOTH_MODES(event_fd_signals)
BOTH_MODES(destruction_waits)

ATF_TEST_CASE_WITHOUT_HEAD(modes);
ATF_TEST_CASE_BODY(modes)
{
    const fs::path dir = make_storage();
    std::string error;
    Options options;
    options.force_synchronous = true;
    auto forced = ObjectStore::open(dir, options, error);
    ATF_REQUIRE(forced.has_value());
    ATF_REQUIRE(forced->mode() == Mode::synchronous);
    auto chosen = ObjectStore::open(dir, {}, error);
    ATF_REQUIRE(chosen.has_value());
    // io_uring whenever the kernel allows it (the probe is the same call).
    ATF_REQUIRE(chosen->mode() == Mode::io_uring || chosen->mode() == Mode::synchronous);
    // Moving a store moves its event fd and its state.
    ObjectStore moved = std::move(*chosen);
    ATF_REQUIRE(moved.event_fd() >= 0);
    const std::vector<std::byte> data = pattern(10, 1);
    ATF_REQUIRE_EQ(write_sync(moved, make_handle(0, 1), 0, data), 10);
}

// Early writeback: on a disk every completed write starts the disk on its
// range (the store's own operation, never a completion for the caller);
// off when asked, in synchronous mode and on a tmpfs.  The bytes are the
// same either way, and fsync still completes.
ATF_TEST_CASE_WITHOUT_HEAD(early_writeback);
ATF_TEST_CASE_BODY(early_writeback)
{
    const fs::path dir = make_storage();
    struct statfs where {};
    ATF_REQUIRE_EQ(::statfs(dir.c_str(), &where), 0);
    if (where.f_type == TMPFS_MAGIC || where.f_type == RAMFS_MAGIC) {
        ATF_SKIP("the scratch directory is in memory: no disk to start");
    }
    ObjectStore store = open_store(dir, Mode::io_uring);
    ATF_REQUIRE(store.early_writeback());
    constexpr std::size_t writes = 64;
    const std::vector<std::byte> data = pattern(writes * 64 * KiB, 3);
    const Handle h = make_handle(0, 9);
    for (std::size_t i = 0; i < writes; ++i) {
        const auto piece = std::span(data).subspan(i * 64 * KiB, 64 * KiB);
        ATF_REQUIRE_EQ(store.submit_write(h, i * 64 * KiB, piece, i), 0);
    }
    const auto results = wait_for(store, writes); // no completion of the store's own
    for (const auto &[id, result] : results) {
        require_msg(result == static_cast<int>(64 * KiB), fmt::format("write {}: {}", id, result));
    }
    require_msg(store.writebacks_started() == writes,
                fmt::format("{} writebacks for {} writes", store.writebacks_started(), writes));
    ATF_REQUIRE_EQ(store.submit_fsync(h, 100), 0);
    ATF_REQUIRE_EQ(wait_one(store, 100), 0);
    std::vector<std::byte> back(data.size());
    ATF_REQUIRE_EQ(read_sync(store, h, 0, back), static_cast<int>(data.size()));
    ATF_REQUIRE(back == data);
    ATF_REQUIRE_EQ(store.writebacks_started(), writes); // reads start none

    Options off;
    off.early_writeback = false;
    ObjectStore plain = open_store(make_storage("plain"), Mode::io_uring, off);
    ATF_REQUIRE(!plain.early_writeback());
    ATF_REQUIRE_EQ(write_sync(plain, h, 0, data), static_cast<int>(data.size()));
    ATF_REQUIRE_EQ(plain.writebacks_started(), 0U);
    ObjectStore sync = open_store(make_storage("sync"), Mode::synchronous);
    ATF_REQUIRE(!sync.early_writeback());
    // The largest store still gets its rings (its writebacks' completions
    // need a completion queue half again as large).
    Options largest;
    largest.max_in_flight = pvfs::data::max_in_flight_limit;
    ObjectStore big = open_store(make_storage("largest"), Mode::io_uring, largest);
    ATF_REQUIRE(big.early_writeback());
    ATF_REQUIRE_EQ(write_sync(big, h, 0, data), static_cast<int>(data.size()));
    ATF_REQUIRE_EQ(big.writebacks_started(), 1U);

    if (::geteuid() != 0 || ::unshare(CLONE_NEWNS) != 0) {
        return; // the tmpfs half needs root
    }
    ATF_REQUIRE_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
    const fs::path memory = make_storage("memory");
    ATF_REQUIRE_EQ(::mount("tmpfs", memory.c_str(), "tmpfs", 0, "size=4m,mode=0700"), 0);
    ObjectStore in_memory = open_store(memory, Mode::io_uring);
    ATF_REQUIRE(!in_memory.early_writeback());
    ATF_REQUIRE_EQ(write_sync(in_memory, h, 0, std::span(data).first(64 * KiB)),
                   static_cast<int>(64 * KiB));
    ATF_REQUIRE_EQ(in_memory.writebacks_started(), 0U);
}

ATF_TEST_CASE_WITHOUT_HEAD(truncate_remove_size);
ATF_TEST_CASE_BODY(truncate_remove_size)
{
    ObjectStore store = open_store(make_storage(), Mode::io_uring);
    const Handle h = make_handle(4, 77);
    // Grows (and creates) an object: zeros.
    ATF_REQUIRE_EQ(store.truncate(h, 5000), 0);
    ATF_REQUIRE(store.size(h) == 5000U);
    std::vector<std::byte> buf(8192, std::byte{9});
    ATF_REQUIRE_EQ(read_sync(store, h, 0, buf), 5000);
    ATF_REQUIRE(std::all_of(buf.begin(), buf.begin() + 5000,
                            [](std::byte b) { return b == std::byte{0}; }));
    const std::vector<std::byte> data = pattern(4000, 1);
    ATF_REQUIRE_EQ(write_sync(store, h, 0, data), 4000);
    ATF_REQUIRE_EQ(store.truncate(h, 10), 0);
    ATF_REQUIRE(store.size(h) == 10U);
    ATF_REQUIRE_EQ(read_sync(store, h, 0, buf), 10);
    ATF_REQUIRE(std::equal(data.begin(), data.begin() + 10, buf.begin()));
    ATF_REQUIRE_EQ(store.truncate(h, 0), 0);
    ATF_REQUIRE(store.size(h) == 0U); // exists, empty
    // Remove is idempotent; the object is gone for every call.
    ATF_REQUIRE_EQ(store.remove(h), 0);
    ATF_REQUIRE(!store.size(h));
    ATF_REQUIRE_EQ(store.remove(h), 0);
    ATF_REQUIRE_EQ(read_sync(store, h, 0, buf), 0);
    ATF_REQUIRE(!fs::exists(store.object_path(h)));
    // Written again after removal: a new object, not the old fd.
    ATF_REQUIRE_EQ(write_sync(store, h, 1, data), 4000);
    ATF_REQUIRE(store.size(h) == 4001U);
    ATF_REQUIRE_EQ(store.submit_fsync(h, 5), 0);
    ATF_REQUIRE_EQ(wait_one(store, 5), 0);

    const pvfs::data::StatFs st = store.statfs();
    ATF_REQUIRE_EQ(st.error, 0);
    ATF_REQUIRE(st.total_bytes > 0 && st.free_bytes <= st.total_bytes &&
                st.available_bytes <= st.free_bytes);
    ATF_REQUIRE(st.total_objects == 0 || st.free_objects <= st.total_objects);
}

ATF_TEST_CASE_WITHOUT_HEAD(list_pages);
ATF_TEST_CASE_BODY(list_pages)
{
    const fs::path dir = make_storage();
    Options options;
    options.max_open_files = 16;
    ObjectStore store = open_store(dir, Mode::synchronous, options);
    std::mt19937_64 rng(5); // NOLINT(cert-msc32-c,cert-msc51-cpp): reproducible on purpose
    std::set<Handle> stored;
    while (stored.size() < 5000) {
        const Handle h = make_handle(static_cast<std::uint32_t>(rng() % 4),
                                     rng() % (stored.size() < 100 ? 300 : 1000000) + 1);
        if (stored.insert(h).second) {
            ATF_REQUIRE_EQ(store.truncate(h, 1), 0);
        }
    }
    // Names that are not objects are not listed.
    for (const char *junk : {"ab/junk", "ab/0000000000000000", "ab/00000000000001AB",
                             "ab/00000000000001ac", "ab/00000000000001ab.tmp", "lost+found"}) {
        const fs::path path = dir / "objects" / junk;
        ::close(::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
    }
    fs::create_directory(dir / "objects" / "ab" / "0009000000000fab"); // not a file

    for (const std::size_t max : {std::size_t{7}, std::size_t{1}, std::size_t{4999},
                                  std::size_t{5000}, std::size_t{100000}}) {
        std::vector<Handle> seen;
        std::uint64_t cookie = 0;
        for (int pages = 0;; ++pages) {
            require_msg(pages <= 6000, "list never ends");
            const pvfs::data::ListPage page = store.list(cookie, max);
            ATF_REQUIRE_EQ(page.error, 0);
            require_msg(page.handles.size() <= max, "page too long");
            seen.insert(seen.end(), page.handles.begin(), page.handles.end());
            cookie = page.next_cookie;
            if (page.end) {
                break;
            }
            require_msg(page.handles.size() == max, "a short page that is not the end");
        }
        require_msg(seen.size() == stored.size(),
                    fmt::format("max {}: listed {} of {}", max, seen.size(), stored.size()));
        ATF_REQUIRE(std::set<Handle>(seen.begin(), seen.end()) == stored);
        // The stable order: by low byte, then handle.
        ATF_REQUIRE(std::is_sorted(seen.begin(), seen.end(), [](Handle a, Handle b) {
            return std::pair(a & 0xffU, a) < std::pair(b & 0xffU, b);
        }));
    }
    // Resuming with a cookie after removals and additions elsewhere still
    // sees each untouched object once.
    const pvfs::data::ListPage head = store.list(0, 2500);
    ATF_REQUIRE(!head.end);
    const Handle removed = head.handles.front();
    ATF_REQUIRE_EQ(store.remove(removed), 0);
    const pvfs::data::ListPage rest = store.list(head.next_cookie, 100000);
    ATF_REQUIRE(rest.end);
    ATF_REQUIRE_EQ(head.handles.size() + rest.handles.size(), 5000U);
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, round_trips_uring);
    ATF_ADD_TEST_CASE(tcs, round_trips_sync);
    ATF_ADD_TEST_CASE(tcs, many_in_flight_uring);
    ATF_ADD_TEST_CASE(tcs, many_in_flight_sync);
    ATF_ADD_TEST_CASE(tcs, short_reads_and_holes_uring);
    ATF_ADD_TEST_CASE(tcs, short_reads_and_holes_sync);
    ATF_ADD_TEST_CASE(tcs, fsync_completes_uring);
    ATF_ADD_TEST_CASE(tcs, fsync_completes_sync);
    ATF_ADD_TEST_CASE(tcs, directory_sync_once_uring);
    ATF_ADD_TEST_CASE(tcs, directory_sync_once_sync);
    ATF_ADD_TEST_CASE(tcs, small_fd_cache_uring);
    ATF_ADD_TEST_CASE(tcs, small_fd_cache_sync);
    ATF_ADD_TEST_CASE(tcs, enospc_uring);
    ATF_ADD_TEST_CASE(tcs, enospc_sync);
    ATF_ADD_TEST_CASE(tcs, misuse_uring);
    ATF_ADD_TEST_CASE(tcs, misuse_sync);
    ATF_ADD_TEST_CASE(tcs, event_fd_signals_uring);
    ATF_ADD_TEST_CASE(tcs, event_fd_signals_sync);
    ATF_ADD_TEST_CASE(tcs, destruction_waits_uring);
    ATF_ADD_TEST_CASE(tcs, destruction_waits_sync);
    ATF_ADD_TEST_CASE(tcs, modes);
    ATF_ADD_TEST_CASE(tcs, early_writeback);
    ATF_ADD_TEST_CASE(tcs, truncate_remove_size);
    ATF_ADD_TEST_CASE(tcs, list_pages);
}
