// pvfs-fsx: a random-operation integrity tester in the style of fsx.  It
// runs seeded random writes, reads, truncates, mmap writes and reads,
// fsyncs, O_DIRECT reads and writes and reopens on one file, keeps what the
// file must hold in memory, and checks every read and, at the end, the
// whole file against it.
//
//   pvfs-fsx FILE [--ops N] [--seconds S] [--seed S] [--max-size BYTES]
//            [--no-direct] [--no-mmap] [--faults ERRNO,...] [--drop-caches]
//            [--verbose]
//
// --faults: for a file system under injected faults.  fsync, msync,
// close (of a reopen) and O_DIRECT reads (which write back their range
// first) may fail with a listed errno, and so may a write (a short write
// counts as ENOSPC) or a truncate (then what it would change is
// uncertain); then every byte changed since the last good fsync (or the
// write's range) may hold either its old or its new value until it is
// written again (and, past the old size, be missing).  A good fsync does
// not settle such a byte on the servers (an error is reported once, and
// pages whose writeback failed are dropped, not sent again): until a write
// of it is followed by a good fsync, a failed writeback of that write may
// leave it reading the old value again.  Any other errno still fails the
// run.  --seconds ends the run early (for a load of a given length).
// --drop-caches: the final check comes after an fsync and
// dropping the page cache, so it reads what the file system kept (root).
//
// Prints the seed first, so a failure can be replayed; on the first
// mismatch prints the op, the offset, expected and found bytes and the last
// 20 ops, and exits 1.  Exits 2 on bad usage or when FILE cannot be used.
#include <pvfs/unique_fd.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using pvfs::UniqueFd;

constexpr std::size_t direct_align = 4096;

struct Settings {
    std::string path;
    std::uint64_t ops = 10000;
    unsigned seconds = 0; // 0: no time limit
    std::set<int> faults; // errnos fsync, msync, close and O_DIRECT writes may fail with
    std::uint64_t seed = 0;
    std::size_t max_size = std::size_t{4} << 20U;
    bool direct = true;
    bool mmap = true;
    bool verbose = false;
    bool drop_caches = false; // fsync and drop the page cache before the final check
};

// Memory aligned for O_DIRECT, freed on destruction.
struct AlignedFree {
    // NOLINTNEXTLINE(cppcoreguidelines-no-malloc,cppcoreguidelines-owning-memory)
    void operator()(void *p) const noexcept { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<char, AlignedFree>;

AlignedBuffer aligned(std::size_t bytes)
{
    return AlignedBuffer(static_cast<char *>(std::aligned_alloc(direct_align, bytes))); // NOLINT
}

class Tester {
public:
    explicit Tester(const Settings &s) : s_(s), rng_(s.seed) {}

    int run()
    {
        fd_ = UniqueFd(::open(s_.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!fd_.valid())
            return fatal("open " + s_.path);
        if (s_.direct) {
            dfd_ = UniqueFd(::open(s_.path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC));
            if (!dfd_.valid()) {
                std::printf("O_DIRECT not available (%s): skipping direct I/O\n",
                            strerrordesc_np(errno));
                s_.direct = false;
            }
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(s_.seconds);
        for (op_ = 1; op_ <= s_.ops; ++op_) {
            if (s_.seconds != 0 && std::chrono::steady_clock::now() >= deadline)
                break;
            if (!step())
                return 1;
        }
        const std::uint64_t done = op_ - 1;
        op_ = done;
        if (s_.drop_caches && !drop_caches())
            return 1;
        if (!check_all("final check"))
            return 1;
        std::printf("%llu ops done, file of %zu bytes matches",
                    static_cast<unsigned long long>(done), model_.size());
        if (!s_.faults.empty())
            std::printf(" (%llu allowed failures, %zu bytes either old or new)", faults_seen_,
                        static_cast<std::size_t>(either_.size() -
                                                 std::count(either_.begin(), either_.end(), 0)));
        std::printf("\n");
        return 0;
    }

private:
    static int fatal(const std::string &what)
    {
        std::printf("pvfs-fsx: %s: %s\n", what.c_str(), strerrordesc_np(errno));
        return 2;
    }

    std::uint64_t rand(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }

    void log(const std::string &line)
    {
        if (s_.verbose)
            std::printf("%llu %s\n", static_cast<unsigned long long>(op_), line.c_str());
        history_.push_back(std::to_string(op_) + " " + line);
        if (history_.size() > 20)
            history_.pop_front();
    }

    bool fail(const std::string &what)
    {
        std::printf("FAIL at op %llu (seed %llu): %s\nlast ops:\n",
                    static_cast<unsigned long long>(op_), static_cast<unsigned long long>(s_.seed),
                    what.c_str());
        for (const auto &h : history_)
            std::printf("  %s\n", h.c_str());
        return false;
    }

    // Whether got[0, len) is what the model holds at off (zeros past its
    // end).  memcmp first: a byte loop over every read made the tester
    // CPU-bound, most of all in the emulated guests.
    [[nodiscard]] bool matches(const char *got, std::size_t off, std::size_t len) const
    {
        if (uncertain_)
            return std::all_of(got, got + len, [&](const char &c) {
                return byte_ok(static_cast<std::size_t>(&c - got) + off, c);
            });
        const std::size_t in_model = off >= model_.size() ? 0 : std::min(len, model_.size() - off);
        if (in_model > 0 && std::memcmp(got, model_.data() + off, in_model) != 0)
            return false;
        return std::all_of(got + in_model, got + len, [](char c) { return c == '\0'; });
    }

    // --faults: byte i may be the model's or, where a fault left it
    // uncertain, the old value.
    [[nodiscard]] bool byte_ok(std::size_t i, char c) const
    {
        const char want = i < model_.size() ? model_[i] : '\0';
        if (c == want)
            return true;
        // A write since the last good fsync whose writeback failed in the
        // background may read old before any call reports it: what the
        // servers held at that fsync, which a fault reported before it may
        // have left uncertain (that fsync succeeds: an error is reported
        // once, and the pages that failed were dropped, not sent again).
        if (i < versions_.size() && versions_[i] != 0)
            return versions_[i] >= 2 || c == (i < synced_.size() ? synced_[i] : '\0') ||
                   may_be(sync_either_, sync_old_, i, c) || may_be(either_, old_, i, c);
        return may_be(either_, old_, i, c);
    }

    // Whether EITHER and OLD leave byte i uncertain, with c one of its values.
    [[nodiscard]] static bool may_be(const std::vector<char> &either, const std::vector<char> &old,
                                     std::size_t i, char c)
    {
        return i < either.size() && either[i] != 0 && (either[i] == 2 || c == old[i]);
    }

    // --faults: what the model allows at byte i, for a mismatch's report.
    [[nodiscard]] std::string byte_state(std::size_t i) const
    {
        if (s_.faults.empty())
            return {};
        const auto at = [i](const std::vector<char> &v) {
            return i < v.size() ? static_cast<unsigned>(static_cast<unsigned char>(v[i])) : 0U;
        };
        char buf[160];
        std::snprintf(buf, sizeof(buf),
                      "; at the last good fsync 0x%02x (size %zu, uncertain %u, old 0x%02x), "
                      "versions since %u, uncertain %u (old 0x%02x)",
                      at(synced_), synced_.size(), at(sync_either_), at(sync_old_), at(versions_),
                      at(either_), at(old_));
        return buf;
    }

    bool compare(const char *got, std::size_t off, std::size_t len, const std::string &what)
    {
        if (matches(got, off, len))
            return true;
        for (std::size_t i = 0; i < len; ++i) {
            const char want = off + i < model_.size() ? model_[off + i] : '\0';
            if (!byte_ok(off + i, got[i])) {
                char buf[160];
                std::snprintf(buf, sizeof(buf),
                              "%s: byte %zu: expected 0x%02x, found 0x%02x (file size %zu)",
                              what.c_str(), off + i, static_cast<unsigned char>(want),
                              static_cast<unsigned char>(got[i]), model_.size());
                return fail(buf + byte_state(off + i));
            }
        }
        return true;
    }

    bool check_all(const std::string &what)
    {
        struct stat st {};
        // Shorter only where a fault left the tail uncertain (--faults).
        if (::fstat(fd_.get(), &st) != 0)
            return fail(what + ": fstat: " + std::string(strerrordesc_np(errno)));
        const auto size = static_cast<std::size_t>(st.st_size);
        if (size > model_.size() || (size < model_.size() && !short_ok(size, model_.size())))
            return fail(what + ": size " + std::to_string(st.st_size) + ", expected " +
                        std::to_string(model_.size()));
        const auto got = std::make_unique_for_overwrite<char[]>(size);
        if (size > 0 && ::pread(fd_.get(), got.get(), size, 0) != static_cast<ssize_t>(size))
            return fail(what + ": short read of the whole file");
        return compare(got.get(), 0, size, what);
    }

    // LEN random bytes, uninitialized memory filled from a splitmix64 stream
    // seeded by one draw of the op generator: a draw and a modulo per byte
    // of the Mersenne Twister cost about half the tester's time.
    std::unique_ptr<char[]> random_bytes(std::size_t len)
    {
        auto buf = std::make_unique_for_overwrite<char[]>(len);
        std::uint64_t state = rng_();
        for (std::size_t i = 0; i < len; i += sizeof(std::uint64_t)) {
            state += 0x9e3779b97f4a7c15ULL;
            std::uint64_t z = state;
            z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
            z ^= z >> 31U;
            std::memcpy(buf.get() + i, &z, std::min(sizeof z, len - i));
        }
        return buf;
    }

    bool do_write()
    {
        const std::size_t off = rand(s_.max_size);
        const std::size_t len = 1 + rand(std::min<std::size_t>(s_.max_size - off, 256U << 10U));
        const std::unique_ptr<char[]> buf = random_bytes(len);
        log("write " + std::to_string(off) + " +" + std::to_string(len));
        const ssize_t n = ::pwrite(fd_.get(), buf.get(), len, static_cast<off_t>(off));
        return written(off, buf.get(), len, n, "pwrite");
    }

    // Puts a write's bytes in the model.  A write that failed (or was
    // short) with an errno --faults allows may have left the range old or
    // new and the size the old one.
    bool written(std::size_t off, const char *data, std::size_t len, ssize_t n,
                 const std::string &what)
    {
        const int err = n < 0 ? errno : ENOSPC;
        const std::size_t old_size = model_.size();
        if (model_.size() < off + len)
            model_.resize(off + len, 0);
        if (n == static_cast<ssize_t>(len)) {
            settle(off, len);
        } else {
            if (!s_.faults.contains(err))
                return fail(what + ": " +
                            (n < 0 ? std::string(strerrordesc_np(err))
                                   : "short write, " + std::to_string(n) + " of " +
                                         std::to_string(len) + " bytes"));
            if (either_.size() < off + len) {
                either_.resize(off + len, 0);
                old_.resize(off + len, 0);
            }
            // A hole it opened may be missing with it.  A byte that was
            // uncertain already may now hold any of three values: any.
            for (std::size_t i = std::min(off, old_size); i < off + len; ++i) {
                if (either_[i] == 0)
                    old_[i] = model_[i];
                either_[i] = either_[i] == 0 ? 1 : 2;
            }
            rewritten(std::min(off, old_size), off + len - std::min(off, old_size));
            uncertain_ = true;
            ++faults_seen_;
            log(what + " failed (allowed): " + strerrorname_np(err));
        }
        std::memcpy(model_.data() + off, data, len);
        return true;
    }

    // Where a file shorter than the model (a lost extension, --faults) ends,
    // the model's bytes must have been uncertain.
    [[nodiscard]] bool short_ok(std::size_t from, std::size_t to) const
    {
        for (std::size_t i = from; i < to; ++i)
            if ((i >= either_.size() || either_[i] == 0) &&
                (i >= versions_.size() || versions_[i] == 0 ||
                 (i < synced_.size() && (i >= sync_either_.size() || sync_either_[i] == 0))))
                return false;
        return true;
    }

    // Marks what a write replaces as certain again (it is in the model).
    void settle(std::size_t off, std::size_t len)
    {
        if (either_.size() < off + len) {
            either_.resize(off + len, 0);
            old_.resize(off + len, 0);
        }
        std::fill_n(either_.begin() + static_cast<long>(off), len, 0);
        rewritten(off, len);
    }

    // Counts (up to 2) the versions a byte had since the last good fsync:
    // with two or more, writeback may have stored any of them.
    void rewritten(std::size_t off, std::size_t len)
    {
        if (s_.faults.empty())
            return;
        uncertain_ = true;
        if (versions_.size() < off + len)
            versions_.resize(off + len, 0);
        for (std::size_t i = off; i < off + len; ++i)
            versions_[i] = static_cast<char>(std::min(versions_[i] + 1, 2));
    }

    // --faults: an allowed failure of fsync, msync or close: what changed
    // since the last good fsync may be either.
    bool fault(const std::string &what, int err)
    {
        if (!s_.faults.contains(err))
            return fail(what + ": " + std::string(strerrordesc_np(err)));
        log(what + " failed (allowed): " + strerrorname_np(err));
        ++faults_seen_;
        uncertain_ = true;
        const std::size_t n = std::max(model_.size(), synced_.size());
        if (either_.size() < n) {
            either_.resize(n, 0);
            old_.resize(n, 0);
        }
        for (std::size_t i = 0; i < n; ++i) {
            const char was = i < synced_.size() ? synced_[i] : '\0';
            const char now = i < model_.size() ? model_[i] : '\0';
            // Written since, and uncertain at the last good fsync too: the
            // servers may hold its value from before that fsync, from it,
            // or the new one.
            if (i < versions_.size() &&
                (versions_[i] >= 2 ||
                 (versions_[i] != 0 && i < sync_either_.size() && sync_either_[i] != 0))) {
                either_[i] = 2;
            } else if ((was != now || i >= synced_.size()) && either_[i] == 0) {
                either_[i] = 1;
                old_[i] = was;
            }
        }
        return true;
    }

    // The final check reads from the servers: fsync, then the page cache
    // dropped (root only).
    bool drop_caches()
    {
        log("fsync and drop_caches");
        if (::fsync(fd_.get()) == 0 ? !synced() : !fault("fsync", errno))
            return false;
        const UniqueFd dc(::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC));
        if (!dc.valid() || ::write(dc.get(), "3", 1) != 1)
            return fail("drop_caches: " + std::string(strerrordesc_np(errno)));
        return true;
    }

    bool synced()
    {
        synced_ = model_;
        sync_either_ = either_;
        sync_old_ = old_;
        std::fill(versions_.begin(), versions_.end(), 0);
        return true;
    }

    bool do_read()
    {
        if (model_.empty())
            return true;
        const std::size_t off = rand(model_.size() + 4096);
        const std::size_t len = 1 + rand(256U << 10U);
        const auto buf = std::make_unique_for_overwrite<char[]>(len);
        log("read " + std::to_string(off) + " +" + std::to_string(len));
        const ssize_t n = ::pread(fd_.get(), buf.get(), len, static_cast<off_t>(off));
        if (n < 0)
            return fail("pread: " + std::string(strerrordesc_np(errno)));
        const std::size_t expect = off >= model_.size() ? 0 : std::min(len, model_.size() - off);
        if (static_cast<std::size_t>(n) != expect &&
            !(static_cast<std::size_t>(n) < expect && short_ok(off + n, off + expect)))
            return fail("read returned " + std::to_string(n) + ", expected " +
                        std::to_string(expect));
        return compare(buf.get(), off, static_cast<std::size_t>(n), "read");
    }

    bool do_truncate()
    {
        const std::size_t size = rand(s_.max_size);
        log("truncate " + std::to_string(size));
        if (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0)
            return truncate_failed(size, errno);
        const std::size_t from = std::min(size, model_.size());
        rewritten(from, std::max(size, model_.size()) - from);
        model_.resize(size, 0);
        if (either_.size() > size) {
            either_.resize(size);
            old_.resize(size);
        }
        return true;
    }

    // --faults: a truncate that failed with an allowed errno may have
    // happened or not: an extension's zeros may be missing, and what a
    // shrink would have cut may hold anything (the old bytes, or zeros
    // after a later extension) until written again.
    bool truncate_failed(std::size_t size, int err)
    {
        if (!s_.faults.contains(err))
            return fail("ftruncate: " + std::string(strerrordesc_np(err)));
        log("ftruncate failed (allowed): " + std::string(strerrorname_np(err)));
        ++faults_seen_;
        uncertain_ = true;
        const std::size_t old_size = model_.size();
        const std::size_t end = std::max(old_size, size);
        model_.resize(end, 0);
        if (either_.size() < end) {
            either_.resize(end, 0);
            old_.resize(end, 0);
        }
        for (std::size_t i = std::min(old_size, size); i < end; ++i) {
            if (size > old_size && either_[i] == 0)
                old_[i] = 0;
            either_[i] = size > old_size && either_[i] == 0 ? 1 : 2;
        }
        return true;
    }

    bool do_mmap(bool write)
    {
        if (model_.empty())
            return true;
        const std::size_t off = rand(model_.size());
        const std::size_t len = 1 + rand(std::min<std::size_t>(model_.size() - off, 128U << 10U));
        const std::size_t page_off = off / 4096 * 4096;
        const std::size_t map_len = off + len - page_off;
        log(std::string(write ? "mapwrite " : "mapread ") + std::to_string(off) + " +" +
            std::to_string(len));
        void *p = ::mmap(nullptr, map_len, PROT_READ | (write ? PROT_WRITE : 0), MAP_SHARED,
                         fd_.get(), static_cast<off_t>(page_off));
        if (p == MAP_FAILED)
            return fail("mmap: " + std::string(strerrordesc_np(errno)));
        char *base = static_cast<char *>(p) + (off - page_off);
        bool ok = true;
        if (write) {
            const std::unique_ptr<char[]> buf = random_bytes(len);
            std::memcpy(base, buf.get(), len);
            std::memcpy(model_.data() + off, buf.get(), len);
            settle(off, len);
            if (::msync(p, map_len, MS_SYNC) != 0)
                ok = fault("msync", errno);
        } else {
            ok = compare(base, off, len, "mmap read");
        }
        ::munmap(p, map_len);
        return ok;
    }

    bool do_direct(bool write)
    {
        const std::size_t blocks = s_.max_size / direct_align;
        const std::size_t off = rand(blocks) * direct_align;
        const std::size_t len =
            (1 + rand(std::min<std::size_t>(blocks - off / direct_align, 64))) * direct_align;
        AlignedBuffer buf = aligned(len);
        log(std::string(write ? "dwrite " : "dread ") + std::to_string(off) + " +" +
            std::to_string(len));
        if (write) {
            const std::unique_ptr<char[]> data = random_bytes(len);
            std::memcpy(buf.get(), data.get(), len);
            const ssize_t n = ::pwrite(dfd_.get(), buf.get(), len, static_cast<off_t>(off));
            return written(off, data.get(), len, n, "O_DIRECT pwrite");
        }
        const ssize_t n = ::pread(dfd_.get(), buf.get(), len, static_cast<off_t>(off));
        // It writes the dirty pages of its range back first (as Linux's
        // direct reads do) and reports their failure as an fsync would.
        if (n < 0)
            return fault("O_DIRECT pread", errno);
        const std::size_t expect = off >= model_.size() ? 0 : std::min(len, model_.size() - off);
        if (static_cast<std::size_t>(n) != expect &&
            !(static_cast<std::size_t>(n) < expect && short_ok(off + n, off + expect)))
            return fail("O_DIRECT read returned " + std::to_string(n) + ", expected " +
                        std::to_string(expect));
        return compare(buf.get(), off, static_cast<std::size_t>(n), "O_DIRECT read");
    }

    bool step()
    {
        const std::uint64_t r = rand(100);
        if (r < 30)
            return do_write();
        if (r < 60)
            return do_read();
        if (r < 67)
            return do_truncate();
        if (r < 74)
            return s_.mmap ? do_mmap(true) : do_write();
        if (r < 81)
            return s_.mmap ? do_mmap(false) : do_read();
        if (r < 86)
            return s_.direct ? do_direct(true) : do_write();
        if (r < 91)
            return s_.direct ? do_direct(false) : do_read();
        if (r < 95) {
            log("fsync");
            return ::fsync(fd_.get()) == 0 ? synced() : fault("fsync", errno);
        }
        // close and reopen: close-to-open must show everything written
        log("reopen");
        if (::close(fd_.release()) != 0 && !fault("close", errno))
            return false;
        fd_ = UniqueFd(::open(s_.path.c_str(), O_RDWR | O_CLOEXEC));
        if (!fd_.valid())
            return fail("reopen: " + std::string(strerrordesc_np(errno)));
        return check_all("after reopen");
    }

    Settings s_;
    std::mt19937_64 rng_;
    UniqueFd fd_;
    UniqueFd dfd_;
    std::vector<char> model_;
    // --faults: the model at the last good fsync; per byte whether a fault
    // left it uncertain (1: old or new, 2: any) and its old value.
    std::vector<char> synced_;
    std::vector<char> either_;
    std::vector<char> old_;
    // either_ and old_ at the last good fsync: a byte uncertain then (the
    // servers may hold its old value) and written since reads the new value
    // or, if that write's writeback fails, either of those.
    std::vector<char> sync_either_;
    std::vector<char> sync_old_;
    std::vector<char> versions_; // per byte: versions since the last good fsync, up to 2
    bool uncertain_ = false;
    unsigned long long faults_seen_ = 0;
    std::deque<std::string> history_;
    std::uint64_t op_ = 0;
};

int usage()
{
    std::fprintf(stderr, "usage: pvfs-fsx FILE [--ops N] [--seconds S] [--seed S] "
                         "[--max-size BYTES] [--no-direct] [--no-mmap] [--faults ERRNO,...] "
                         "[--drop-caches] [--verbose]\n");
    return 2;
}

} // namespace

int main(int argc, char **argv)
{
    Settings s;
    s.seed = std::random_device{}();
    const std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        const bool has_value = i + 1 < args.size();
        try {
            if (a == "--ops" && has_value)
                s.ops = std::stoull(args[++i]);
            else if (a == "--seconds" && has_value)
                s.seconds = static_cast<unsigned>(std::stoul(args[++i]));
            else if (a == "--faults" && has_value) {
                std::istringstream list(args[++i]);
                for (std::string e; std::getline(list, e, ',');) {
                    int n = 1;
                    while (n < 4096 && (strerrorname_np(n) == nullptr || e != strerrorname_np(n)))
                        ++n;
                    if (n == 4096)
                        return usage();
                    s.faults.insert(n);
                }
            } else if (a == "--seed" && has_value)
                s.seed = std::stoull(args[++i]);
            else if (a == "--max-size" && has_value)
                s.max_size = std::stoull(args[++i]);
            else if (a == "--no-direct")
                s.direct = false;
            else if (a == "--no-mmap")
                s.mmap = false;
            else if (a == "--drop-caches")
                s.drop_caches = true;
            else if (a == "--verbose")
                s.verbose = true;
            else if (!a.starts_with("-") && s.path.empty())
                s.path = a;
            else
                return usage();
        } catch (const std::exception &) {
            return usage();
        }
    }
    if (s.path.empty() || s.max_size < direct_align * 2)
        return usage();
    s.max_size = s.max_size / direct_align * direct_align;
    std::printf("pvfs-fsx: seed %llu, %llu ops, max size %zu\n",
                static_cast<unsigned long long>(s.seed), static_cast<unsigned long long>(s.ops),
                s.max_size);
    std::fflush(stdout);
    Tester t(s);
    return t.run();
}
