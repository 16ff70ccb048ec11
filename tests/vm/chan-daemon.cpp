// chan-daemon: a scripted stand-in for pvfsd that drives /dev/pvfsd in the
// VM rig, to test the kernel's side of the channel without a cluster.
//
//   chan-daemon check MOUNTPOINT SOURCE
//       Walks the protocol: HELLO rules, mmap rules, then mounts SOURCE on
//       MOUNTPOINT (a child process) and answers the ATTACH, statfs and
//       DETACH upcalls with every kind of malformed downcall (each must
//       fail with EINVAL, or EPROTO for a wrong version).  One that names
//       no pending request of its op leaves the request pending for the
//       good answer; one that does ends the request with EIO at once, so
//       each of those gets a request of its own.  Exits 0 when the kernel
//       behaved.
//   chan-daemon serve [--hold OP] [--die-after OP] [--lie OP:KIND]... [--lies FILE]
//       Answers ATTACH (a root directory), STATFS, DETACH and the namespace
//       ops of a small file system kept in memory (LOOKUP, GETATTR, OPEN,
//       CLOSE, SETATTR, CREATE, MKDIR, MKNOD, SYMLINK, LINK, UNLINK, RMDIR) until
//       killed, printing one line per upcall: "OP tag=T mount=M [replayed]".
//       --hold OP: read upcalls of OP but never answer them.
//       --die-after OP: exit at once after reading an upcall of OP (a
//       daemon crash with the op in flight).
//       --fail OP:ERRNO:N: answer the next N upcalls of OP with -ERRNO (a
//       name such as ENOSPC, or a number) without doing them; ERRNO 0
//       answers them normally.  Several --fail rules of one OP apply one
//       after the other, so "--fail WRITE:0:1 --fail WRITE:ENOSPC:1" fails
//       the second WRITE.
//       --lie OP:KIND: do the op, then answer it with a lie of KIND: type
//       (another object type), handle (another object: the root, or for
//       the root one that does not exist), size (2^63), uid ((u32)-1),
//       length (8 bytes too many).  Only ATTACH lies about the root.
//       --lies FILE: OP:KIND lines, read again before every answer, so a
//       test switches lies on and off while the daemon runs.
//
// Prints what it does; exits 1 on any unexpected result, 2 on bad usage.
#include "upcall.hpp" // op_name: the names pvfsd logs
#include <pvfs/pvfsd_dev.h>
#include <pvfs/unique_fd.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using pvfs::UniqueFd;

constexpr std::uint64_t root_handle = 0x100000001ULL;
constexpr std::uint64_t fs_id = 0x7076667374657374ULL;

// One run, one verdict.
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
bool all_ok = true;

void expect(bool ok, const std::string &what)
{
    std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
    std::fflush(stdout);
    all_ok &= ok;
}

// A message: header + body bytes.
struct Msg {
    std::vector<std::byte> bytes;

    [[nodiscard]] pvfsd_msg_hdr hdr() const
    {
        pvfsd_msg_hdr h{};
        std::memcpy(&h, bytes.data(), sizeof(h));
        return h;
    }
    template <typename T> [[nodiscard]] T body() const
    {
        T t{};
        std::memcpy(&t, bytes.data() + sizeof(pvfsd_msg_hdr), sizeof(T));
        return t;
    }
};

template <typename Body>
Msg make(std::uint16_t op, std::uint64_t tag, std::int32_t status, const Body &body,
         std::string_view tail = {})
{
    Msg m;
    const std::size_t len = sizeof(pvfsd_msg_hdr) + sizeof(Body) + tail.size();
    m.bytes.resize(len);
    pvfsd_msg_hdr h{};
    h.magic = PVFSD_DEV_MAGIC;
    h.version = PVFSD_DEV_MAJOR;
    h.op = op;
    h.tag = tag;
    h.length = static_cast<std::uint32_t>(len);
    h.status = status;
    std::memcpy(m.bytes.data(), &h, sizeof(h));
    std::memcpy(m.bytes.data() + sizeof(h), &body, sizeof(Body));
    if (!tail.empty()) // an empty span's data() may be null, which memcpy must not get
        std::memcpy(m.bytes.data() + sizeof(h) + sizeof(Body), tail.data(), tail.size());
    return m;
}

Msg make_empty(std::uint16_t op, std::uint64_t tag, std::int32_t status)
{
    Msg m;
    m.bytes.resize(sizeof(pvfsd_msg_hdr));
    pvfsd_msg_hdr h{};
    h.magic = PVFSD_DEV_MAGIC;
    h.version = PVFSD_DEV_MAJOR;
    h.op = op;
    h.tag = tag;
    h.length = sizeof(h);
    h.status = status;
    std::memcpy(m.bytes.data(), &h, sizeof(h));
    return m;
}

// Result of write(2): "ok" or the errno name.
std::string write_msg(int fd, const std::vector<std::byte> &bytes)
{
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n == static_cast<ssize_t>(bytes.size()))
        return "ok";
    if (n >= 0)
        return "short write";
    const char *name = strerrorname_np(errno);
    return name != nullptr ? name : std::to_string(errno);
}

void expect_write(int fd, const Msg &m, const std::string &want, const std::string &what)
{
    const std::string got = write_msg(fd, m.bytes);
    expect(got == want, what + " -> " + got + (got == want ? "" : ", expected " + want));
}

bool read_msg(int fd, Msg &m)
{
    m.bytes.assign(PVFSD_DEV_MAX_MSG, std::byte{0});
    const ssize_t n = ::read(fd, m.bytes.data(), m.bytes.size());
    if (n < static_cast<ssize_t>(sizeof(pvfsd_msg_hdr))) {
        std::printf("read: %s\n", n < 0 ? strerrordesc_np(errno) : "short message");
        return false;
    }
    m.bytes.resize(static_cast<std::size_t>(n));
    return true;
}

pvfsd_hello hello_body(std::uint32_t slot_size, std::uint32_t slots)
{
    pvfsd_hello h{};
    h.slot_size = slot_size;
    h.slot_count = slots;
    h.minor = PVFSD_DEV_MINOR;
    h.features = PVFSD_FEATURES;
    return h;
}

pvfsd_attr root_attr()
{
    pvfsd_attr a{};
    a.handle = root_handle;
    a.type = PVFSD_TYPE_DIRECTORY;
    a.mode = 0755;
    a.nlink = 2;
    a.blksize = 1U << 20U;
    a.mtime.sec = 1700000000;
    return a;
}

pvfsd_attach_resp attach_ok()
{
    pvfsd_attach_resp r{};
    r.root = root_attr();
    r.fs_id = fs_id;
    r.max_name = 255;
    return r;
}

pvfsd_statfs_resp statfs_ok()
{
    pvfsd_statfs_resp r{};
    r.blocks = 1000;
    r.bfree = 600;
    r.bavail = 500;
    r.files = 100;
    r.ffree = 40;
    r.bsize = 4096;
    r.namelen = 255;
    return r;
}

using pvfs::pvfsd::op_name;

int op_number(std::string_view name)
{
    for (unsigned i = 1; i < PVFSD_OP_COUNT; ++i)
        if (name == op_name(i))
            return static_cast<int>(i);
    return -1;
}

UniqueFd open_device()
{
    UniqueFd fd(::open("/dev/pvfsd", O_RDWR | O_CLOEXEC));
    if (!fd.valid())
        std::printf("open /dev/pvfsd: %s\n", strerrordesc_np(errno));
    return fd;
}

bool say_hello(int fd, pvfsd_hello &granted)
{
    if (write_msg(fd, make(PVFSD_OP_HELLO, 0, 0, hello_body(1U << 20U, 8)).bytes) != "ok")
        return false;
    Msg m;
    if (!read_msg(fd, m) || m.hdr().op != PVFSD_OP_HELLO)
        return false;
    granted = m.body<pvfsd_hello>();
    return true;
}

// Forks a child running fn; returns its pid.
pid_t spawn(const std::function<int()> &fn)
{
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid == 0)
        ::_exit(fn());
    return pid;
}

int wait_child(pid_t pid)
{
    int status = 0;
    if (::waitpid(pid, &status, 0) < 0)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// wait_child with a deadline: a child still running after `ms` is killed
// and counts as failed (-1), so a hang fails the check instead of the run.
int wait_child_within(pid_t pid, int ms)
{
    for (int waited = 0; waited < ms; waited += 10) {
        int status = 0;
        const pid_t got = ::waitpid(pid, &status, WNOHANG);
        if (got == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (got < 0)
            return -1;
        ::usleep(10000);
    }
    ::kill(pid, SIGKILL);
    wait_child(pid);
    return -1;
}

// Messages that answer no pending request of their op (a bad header, an
// unknown tag, another op) must be refused, leaving the request to `up`
// pending.
void refuse_stray(int fd, const Msg &up, const Msg &good)
{
    const pvfsd_msg_hdr h = up.hdr();
    const std::string op = op_name(h.op);
    auto patched = [&](const std::function<void(pvfsd_msg_hdr &)> &fix) {
        Msg m = good;
        pvfsd_msg_hdr g = m.hdr();
        fix(g);
        std::memcpy(m.bytes.data(), &g, sizeof(g));
        return m;
    };
    expect_write(fd, patched([](pvfsd_msg_hdr &g) { g.magic ^= 1U; }), "EINVAL",
                 op + " answer with a bad magic");
    expect_write(fd, patched([](pvfsd_msg_hdr &g) { g.version = 1; }), "EPROTO",
                 op + " answer of channel version 1");
    expect_write(fd, patched([](pvfsd_msg_hdr &g) { g.length += 8; }), "EINVAL",
                 op + " answer whose header says more bytes");
    expect_write(fd, patched([](pvfsd_msg_hdr &g) { g.tag += 1000; }), "EINVAL",
                 op + " answer with an unknown tag");
    expect_write(fd, patched([](pvfsd_msg_hdr &g) { g.tag = 0; }), "EINVAL",
                 op + " answer with tag 0");
    expect_write(fd, patched([](pvfsd_msg_hdr &g) { g.op = PVFSD_OP_GETATTR; }), "EINVAL",
                 op + " answer naming another op");
    {
        Msg m = good;
        m.bytes.resize(sizeof(pvfsd_msg_hdr) - 1);
        expect_write(fd, m, "EINVAL", op + " write shorter than a header");
    }
    {
        Msg m;
        m.bytes.assign(PVFSD_DEV_MAX_MSG + 1, std::byte{0});
        expect_write(fd, m, "EINVAL", op + " write above the message limit");
    }
}

// A malformed answer that names its request: `make` builds it for a tag.
struct BadAnswer {
    std::string what;
    std::function<Msg(std::uint64_t)> make;
};

// The malformed answers any op can get: status out of range, an error
// with a body, a body cut short or too long.
std::vector<BadAnswer> bad_envelopes(std::uint16_t op,
                                     const std::function<Msg(std::uint64_t)> &good)
{
    auto resized = [good](std::uint64_t tag, std::ptrdiff_t by) {
        Msg m = good(tag);
        m.bytes.resize(static_cast<std::size_t>(static_cast<std::ptrdiff_t>(m.bytes.size()) + by));
        pvfsd_msg_hdr g = m.hdr();
        g.length = static_cast<std::uint32_t>(m.bytes.size());
        std::memcpy(m.bytes.data(), &g, sizeof(g));
        return m;
    };
    return {
        {"status +5", [op](std::uint64_t tag) { return make_empty(op, tag, 5); }},
        {"status -5000", [op](std::uint64_t tag) { return make_empty(op, tag, -5000); }},
        {"an error carrying a body",
         [good](std::uint64_t tag) {
             Msg m = good(tag);
             pvfsd_msg_hdr g = m.hdr();
             g.status = -EIO;
             std::memcpy(m.bytes.data(), &g, sizeof(g));
             return m;
         }},
        {"a truncated body", [resized](std::uint64_t tag) { return resized(tag, -4); }},
        {"trailing bytes", [resized](std::uint64_t tag) { return resized(tag, 8); }},
    };
}

// Each of `bads` answers a request of its own, which `caller` (a child that
// returns 0 when its system call failed with EIO) makes: the answer is
// refused with EINVAL and the call fails with EIO at once; a good answer
// after it finds no request.
void refuse_ending(int fd, std::uint16_t op, const std::function<int()> &caller,
                   const std::function<Msg(std::uint64_t)> &good,
                   const std::vector<BadAnswer> &bads)
{
    const std::string name = op_name(op);
    for (const auto &bad : bads) {
        const pid_t pid = spawn(caller);
        Msg up;
        if (!read_msg(fd, up) || up.hdr().op != op) {
            expect(false, "read a " + name + " upcall for: " + bad.what);
            wait_child_within(pid, 0);
            continue;
        }
        const std::uint64_t tag = up.hdr().tag;
        expect_write(fd, bad.make(tag), "EINVAL", name + " answer: " + bad.what);
        expect(wait_child_within(pid, 2000) == 0,
               name + " answer: " + bad.what + ": the caller got EIO at once");
        expect_write(fd, good(tag), "EINVAL", name + ": a good answer after it finds no request");
    }
}

int run_check(const std::string &mountpoint, const std::string &source)
{
    UniqueFd fd = open_device();
    if (!fd.valid())
        return 1;

    // ---- HELLO rules ----
    std::array<std::byte, 64> buf{};
    expect(::read(fd.get(), buf.data(), buf.size()) < 0 && errno == EPROTO,
           "read before HELLO fails with EPROTO");
    for (const unsigned major : {PVFSD_DEV_MAJOR + 1, PVFSD_DEV_MAJOR - 1}) {
        // (channel version 5, the major before, had a HELLO of 16 bytes)
        Msg m = major < PVFSD_DEV_MAJOR
                    ? make(PVFSD_OP_HELLO, 0, 0, std::array<std::uint32_t, 4>{1U << 20U, 8, 64, 0})
                    : make(PVFSD_OP_HELLO, 0, 0, hello_body(1U << 20U, 8));
        pvfsd_msg_hdr g = m.hdr();
        g.version = static_cast<std::uint16_t>(major);
        std::memcpy(m.bytes.data(), &g, sizeof(g));
        expect_write(fd.get(), m, "EPROTO", "HELLO of channel version " + std::to_string(major));
    }
    {
        // Longer than this minor's HELLO, but from this minor: malformed.
        pvfsd_hello h = hello_body(1U << 20U, 8);
        expect_write(fd.get(), make(PVFSD_OP_HELLO, 0, 0, h, std::string(8, '\0')), "EINVAL",
                     "a HELLO of this minor with 8 bytes too many");
        h.pad = 1;
        expect_write(fd.get(), make(PVFSD_OP_HELLO, 0, 0, h), "EINVAL", "a HELLO with pad 1");
        // The old HELLO (16 bytes) under this major: too short.
        expect_write(fd.get(),
                     make(PVFSD_OP_HELLO, 0, 0, std::array<std::uint32_t, 4>{1U << 20U, 8, 64, 0}),
                     "EINVAL", "a HELLO of 16 bytes");
    }
    expect_write(fd.get(), make(PVFSD_OP_HELLO, 0, 0, hello_body(3000, 8)), "EINVAL",
                 "HELLO with slots of 3000 bytes");
    expect_write(fd.get(), make(PVFSD_OP_HELLO, 0, 0, hello_body(1U << 20U, 0)), "EINVAL",
                 "HELLO with no slots");
    expect_write(fd.get(), make(PVFSD_OP_HELLO, 7, 0, hello_body(1U << 20U, 8)), "EINVAL",
                 "HELLO with a tag");
    expect_write(fd.get(), make_empty(PVFSD_OP_STATFS, 1, 0), "EINVAL", "a downcall before HELLO");
    // A pvfsd of the next minor: a longer HELLO (a field this module does
    // not know) and a feature it does not know.  The module takes what it
    // knows and answers with its own minor and features.
    pvfsd_hello granted{};
    {
        pvfsd_hello h = hello_body(1U << 20U, 8);
        h.minor = PVFSD_DEV_MINOR + 1;
        h.features = PVFSD_FEATURES | (1ULL << 63U);
        Msg m;
        const bool ok =
            write_msg(fd.get(), make(PVFSD_OP_HELLO, 0, 0, h, std::string(8, 'x')).bytes) == "ok" &&
            read_msg(fd.get(), m) && m.hdr().op == PVFSD_OP_HELLO &&
            m.bytes.size() == sizeof(pvfsd_msg_hdr) + sizeof(pvfsd_hello);
        expect(ok, "HELLO of the next minor, 8 bytes longer, accepted and answered");
        if (ok)
            granted = m.body<pvfsd_hello>();
    }
    expect(granted.slot_size >= PVFSD_SLOT_SIZE_MIN && granted.slot_count >= PVFSD_SLOTS_MIN,
           "slots granted: " + std::to_string(granted.slot_count) + " x " +
               std::to_string(granted.slot_size));
    expect(granted.minor == PVFSD_DEV_MINOR && granted.features == PVFSD_FEATURES &&
               granted.pad == 0,
           "the module's HELLO: minor " + std::to_string(granted.minor) + ", features " +
               std::to_string(granted.features));
    expect_write(fd.get(), make(PVFSD_OP_HELLO, 0, 0, hello_body(1U << 20U, 8)), "EINVAL",
                 "a second HELLO");

    // ---- the slots ----
    const std::size_t area = std::size_t{granted.slot_size} * granted.slot_count;
    void *wrong = ::mmap(nullptr, area + 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    expect(wrong == MAP_FAILED && errno == EINVAL, "mmap of more than the slots fails EINVAL");
    if (wrong != MAP_FAILED)
        ::munmap(wrong, area + 4096);
    void *slots = ::mmap(nullptr, area, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    expect(slots != MAP_FAILED, "mmap of the slots");
    if (slots != MAP_FAILED) {
        std::memset(slots, 0x5a, area);
        ::munmap(slots, area);
    }

    // ---- ATTACH ----
    // Each malformed answer that names the ATTACH ends it: that mount fails.
    auto attach_answer = [](std::uint64_t tag) {
        return make(PVFSD_OP_ATTACH, tag, 0, attach_ok());
    };
    auto bad_attach = [](const std::string &what,
                         const std::function<void(pvfsd_attach_resp &)> &fix) {
        return BadAnswer{what, [fix](std::uint64_t tag) {
                             pvfsd_attach_resp r = attach_ok();
                             fix(r);
                             return make(PVFSD_OP_ATTACH, tag, 0, r);
                         }};
    };
    std::vector<BadAnswer> attach_bads = bad_envelopes(PVFSD_OP_ATTACH, attach_answer);
    for (auto &b : std::vector<BadAnswer>{
             bad_attach("root handle 0", [](auto &r) { r.root.handle = 0; }),
             bad_attach("object type 9", [](auto &r) { r.root.type = 9; }),
             bad_attach("root is a regular file",
                        [](auto &r) { r.root.type = PVFSD_TYPE_REGULAR; }),
             bad_attach("nanoseconds of 1e9", [](auto &r) { r.root.mtime.nsec = 1000000000; }),
             bad_attach("mode with file type bits", [](auto &r) { r.root.mode = 040755; }),
             bad_attach("size 2^63", [](auto &r) { r.root.size = 1ULL << 63U; }),
             bad_attach("uid (u32)-1", [](auto &r) { r.root.uid = 0xffffffffU; }),
             bad_attach("max_name 0", [](auto &r) { r.max_name = 0; }),
             bad_attach("max_name 256", [](auto &r) { r.max_name = 256; }),
         })
        attach_bads.push_back(std::move(b));
    refuse_ending(
        fd.get(), PVFSD_OP_ATTACH,
        [&] {
            if (::mount(source.c_str(), mountpoint.c_str(), "pvfs", 0, "timeo=20") == 0) {
                std::printf("mount succeeded after a malformed ATTACH answer\n");
                ::umount(mountpoint.c_str());
                return 1;
            }
            return errno == EIO ? 0 : 1;
        },
        attach_answer, attach_bads);

    const pid_t mounter = spawn([&] {
        const int rc = ::mount(source.c_str(), mountpoint.c_str(), "pvfs", 0, "timeo=20");
        if (rc != 0)
            std::printf("mount: %s\n", strerrordesc_np(errno));
        return rc == 0 ? 0 : 1;
    });
    Msg up;
    expect(read_msg(fd.get(), up), "read the ATTACH upcall");
    const pvfsd_msg_hdr ah = up.hdr();
    expect(ah.op == PVFSD_OP_ATTACH && ah.tag != 0 && ah.magic == PVFSD_DEV_MAGIC &&
               ah.version == PVFSD_DEV_MAJOR && ah.status == 0 && ah.length == up.bytes.size(),
           "ATTACH upcall header well formed");
    const auto areq = up.body<pvfsd_attach_req>();
    const std::string got_source(reinterpret_cast<const char *>(up.bytes.data()) +
                                     sizeof(pvfsd_msg_hdr) + sizeof(areq),
                                 areq.source_len);
    expect(got_source == source && areq.common.mount_id != 0 && areq.common.fsuid == 0,
           "ATTACH carries the source '" + got_source + "', a mount id and the caller");

    const Msg good_attach = attach_answer(ah.tag);
    refuse_stray(fd.get(), up, good_attach);
    expect_write(fd.get(), good_attach, "ok", "the good ATTACH answer");
    expect(wait_child(mounter) == 0, "mount succeeded after the stray answers");
    expect_write(fd.get(), good_attach, "EINVAL", "a second answer to the same tag");

    // ---- STATFS: figures pass through, errors pass through ----
    const pid_t statter = spawn([&] {
        struct statfs st {};
        if (::statfs(mountpoint.c_str(), &st) != 0) {
            std::printf("statfs: %s\n", strerrordesc_np(errno));
            return 1;
        }
        const bool ok = st.f_type == 0x50564653 && st.f_blocks == 1000 && st.f_bfree == 600 &&
                        st.f_bavail == 500 && st.f_files == 100 && st.f_ffree == 40 &&
                        st.f_bsize == 4096 && st.f_namelen == 255;
        std::printf("statfs: type %lx blocks %lu bsize %ld: %s\n",
                    static_cast<unsigned long>(st.f_type), static_cast<unsigned long>(st.f_blocks),
                    static_cast<long>(st.f_bsize), ok ? "as answered" : "NOT as answered");
        return ok ? 0 : 1;
    });
    expect(read_msg(fd.get(), up) && up.hdr().op == PVFSD_OP_STATFS, "read the STATFS upcall");
    const auto sreq = up.body<pvfsd_handle_req>();
    expect(sreq.handle == root_handle && sreq.common.mount_id == areq.common.mount_id,
           "STATFS names the root and the mount");
    const Msg good_statfs = make(PVFSD_OP_STATFS, up.hdr().tag, 0, statfs_ok());
    refuse_stray(fd.get(), up, good_statfs);
    expect_write(fd.get(), good_statfs, "ok", "the good STATFS answer");
    expect(wait_child(statter) == 0, "statfs returned the answered figures");

    // Each malformed answer that names a STATFS ends it: that statfs fails.
    auto statfs_answer = [](std::uint64_t tag) {
        return make(PVFSD_OP_STATFS, tag, 0, statfs_ok());
    };
    auto bad_statfs = [](const std::string &what,
                         const std::function<void(pvfsd_statfs_resp &)> &fix) {
        return BadAnswer{what, [fix](std::uint64_t tag) {
                             pvfsd_statfs_resp r = statfs_ok();
                             fix(r);
                             return make(PVFSD_OP_STATFS, tag, 0, r);
                         }};
    };
    std::vector<BadAnswer> statfs_bads = bad_envelopes(PVFSD_OP_STATFS, statfs_answer);
    for (auto &b : std::vector<BadAnswer>{
             bad_statfs("more free than total", [](auto &r) { r.bfree = 2000; }),
             bad_statfs("block size 0", [](auto &r) { r.bsize = 0; }),
             bad_statfs("name length 0", [](auto &r) { r.namelen = 0; }),
         })
        statfs_bads.push_back(std::move(b));
    refuse_ending(
        fd.get(), PVFSD_OP_STATFS,
        [&] {
            struct statfs st {};
            if (::statfs(mountpoint.c_str(), &st) == 0) {
                std::printf("statfs succeeded after a malformed answer\n");
                return 1;
            }
            return errno == EIO ? 0 : 1;
        },
        statfs_answer, statfs_bads);

    const pid_t failing = spawn([&] {
        struct statfs st {};
        const int rc = ::statfs(mountpoint.c_str(), &st);
        std::printf("statfs with a daemon error: %s\n",
                    rc == 0 ? "success" : strerrordesc_np(errno));
        return rc != 0 && errno == ENOSPC ? 0 : 1;
    });
    expect(read_msg(fd.get(), up) && up.hdr().op == PVFSD_OP_STATFS, "read the second STATFS");
    expect_write(fd.get(), make_empty(PVFSD_OP_STATFS, up.hdr().tag, -ENOSPC), "ok",
                 "an ENOSPC answer");
    expect(wait_child(failing) == 0, "the daemon's errno reaches the caller");

    // ---- a read too small for the next message keeps it ----
    const pid_t third = spawn([&] {
        struct statfs st {};
        return ::statfs(mountpoint.c_str(), &st) == 0 ? 0 : 1;
    });
    ::usleep(300000);
    expect(::read(fd.get(), buf.data(), 8) < 0 && errno == EINVAL,
           "a read smaller than the message fails EINVAL");
    expect(read_msg(fd.get(), up) && up.hdr().op == PVFSD_OP_STATFS,
           "the message is still there for a big enough read");
    expect_write(fd.get(), make(PVFSD_OP_STATFS, up.hdr().tag, 0, statfs_ok()), "ok", "answered");
    expect(wait_child(third) == 0, "statfs after the short read");

    // ---- unmount: DETACH ----
    expect(::umount(mountpoint.c_str()) == 0, "umount");
    expect(read_msg(fd.get(), up) && up.hdr().op == PVFSD_OP_DETACH, "DETACH after umount");
    expect_write(fd.get(), make_empty(PVFSD_OP_DETACH, up.hdr().tag, 0), "ok", "DETACH answered");
    return all_ok ? 0 : 1;
}

// ---- serve: a small file system in memory, scripted failures and lies ----

// A rule of --fail: the next `count` upcalls of `op` get -err (0: answered).
struct FailRule {
    int op;
    int err;
    unsigned count;
};

// ENOSPC -> 28; a number as itself; -1 if neither.
int errno_number(const std::string &name)
{
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos)
        return std::stoi(name);
    for (int e = 1; e < 4096; ++e) {
        const char *n = strerrorname_np(e);
        if (n != nullptr && name == n)
            return e;
    }
    return -1;
}

// OP:ERRNO:N
bool parse_fail(const std::string &spec, FailRule &rule)
{
    const std::size_t a = spec.find(':');
    const std::size_t b = a == std::string::npos ? a : spec.find(':', a + 1);
    if (b == std::string::npos || b + 1 == spec.size() ||
        spec.find_first_not_of("0123456789", b + 1) != std::string::npos)
        return false;
    rule.op = op_number(spec.substr(0, a));
    rule.err = errno_number(spec.substr(a + 1, b - a - 1));
    rule.count = static_cast<unsigned>(std::stoul(spec.substr(b + 1)));
    return rule.op > 0 && rule.err >= 0 && rule.err < 4096;
}

// A lie (serve --lie OP:KIND): the op is done, its answer altered.
struct Lie {
    int op = -1;
    std::string kind;
};

std::optional<Lie> parse_lie(std::string_view text)
{
    static constexpr std::array<std::string_view, 5> kinds = {"type", "handle", "size", "uid",
                                                              "length"};
    const std::size_t colon = text.find(':');
    if (colon == std::string_view::npos)
        return std::nullopt;
    Lie lie{op_number(text.substr(0, colon)), std::string(text.substr(colon + 1))};
    bool known = false;
    for (const auto k : kinds)
        known |= lie.kind == k;
    if (lie.op < 0 || !known)
        return std::nullopt;
    return lie;
}

// What serve does to its answers: the failures of --fail, the lies of
// --lie, and those of --lies FILE as the file says now.
class Script {
public:
    bool add_fail(const std::string &spec)
    {
        FailRule rule{};
        if (!parse_fail(spec, rule))
            return false;
        fails_.push_back(rule);
        return true;
    }
    bool add_lie(std::string_view text)
    {
        const auto lie = parse_lie(text);
        if (lie)
            lies_.push_back(*lie);
        return lie.has_value();
    }
    void set_lies_file(std::string path) { lies_file_ = std::move(path); }

    // The errno the next upcall of `op` is to fail with (0: none); uses up
    // the rules.
    int next_failure(int op)
    {
        for (auto it = fails_.begin(); it != fails_.end(); ++it) {
            if (it->op != op)
                continue;
            const int err = it->err;
            if (--it->count == 0)
                fails_.erase(it);
            return err;
        }
        return 0;
    }

    // The kind of lie to tell in an answer to `op`, or "".
    [[nodiscard]] std::string lie_for(int op) const
    {
        for (const auto &lie : lies_)
            if (lie.op == op)
                return lie.kind;
        if (lies_file_.empty())
            return {};
        std::ifstream in(lies_file_);
        std::string line;
        while (std::getline(in, line)) {
            const auto lie = parse_lie(line);
            if (lie && lie->op == op)
                return lie->kind;
            if (!lie && !line.empty())
                std::printf("%s: not a lie: %s\n", lies_file_.c_str(), line.c_str());
        }
        return {};
    }

private:
    std::deque<FailRule> fails_;
    std::vector<Lie> lies_;
    std::string lies_file_;
};

// Alters `m`, an answer whose body starts with the attributes of the object
// (every op that answers with one does), as `kind` says; false when it
// tells no lie.  Only ATTACH lies about the root: on a noac mount every
// path walk asks for the root's attributes, and a lie there would hit
// whatever a test does.
bool tell_lie(Msg &m, const std::string &kind)
{
    pvfsd_msg_hdr h = m.hdr();
    bool has_attr = false;
    switch (h.op) {
    case PVFSD_OP_ATTACH:
    case PVFSD_OP_LOOKUP:
    case PVFSD_OP_GETATTR:
    case PVFSD_OP_OPEN:
    case PVFSD_OP_SETATTR:
    case PVFSD_OP_CREATE:
    case PVFSD_OP_MKDIR:
    case PVFSD_OP_MKNOD:
    case PVFSD_OP_SYMLINK:
    case PVFSD_OP_LINK:
        has_attr = h.status == 0;
        break;
    default:
        break;
    }
    pvfsd_attr a{};
    if (has_attr)
        a = m.body<pvfsd_attr>();
    if (has_attr && a.handle == root_handle && h.op != PVFSD_OP_ATTACH)
        return false;
    if (kind == "length") {
        m.bytes.resize(m.bytes.size() + 8);
        h.length = static_cast<std::uint32_t>(m.bytes.size());
        std::memcpy(m.bytes.data(), &h, sizeof(h));
        return true;
    }
    if (!has_attr)
        return false;
    if (kind == "type")
        a.type = a.type == PVFSD_TYPE_DIRECTORY ? PVFSD_TYPE_REGULAR : PVFSD_TYPE_DIRECTORY;
    else if (kind == "handle")
        a.handle = a.handle == root_handle ? root_handle + 0x1000 : root_handle;
    else if (kind == "size")
        a.size = 1ULL << 63U;
    else if (kind == "uid")
        a.uid = 0xffffffffU;
    std::memcpy(m.bytes.data() + sizeof(h), &a, sizeof(a));
    return true;
}

// The data slots, mapped while serve runs.
class SlotMap {
public:
    SlotMap(int fd, std::size_t len)
        : len_(len), addr_(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0))
    {
    }
    ~SlotMap()
    {
        if (valid())
            ::munmap(addr_, len_);
    }
    SlotMap(const SlotMap &) = delete;
    SlotMap &operator=(const SlotMap &) = delete;
    SlotMap(SlotMap &&) = delete;
    SlotMap &operator=(SlotMap &&) = delete;

    [[nodiscard]] bool valid() const { return addr_ != MAP_FAILED; }
    [[nodiscard]] std::span<std::byte> bytes() const
    {
        return {static_cast<std::byte *>(addr_), len_};
    }

private:
    std::size_t len_;
    void *addr_;
};

// A file system kept in memory: the namespace ops on a tree of objects and
// the data of its regular files (READ, WRITE, FSYNC through the slots), so
// that the page cache's writeback can be driven and its bytes checked; its
// answers go through the Script's failures and lies.
class FakeFs {
public:
    FakeFs(std::span<std::byte> slots, std::uint32_t slot_size, Script script)
        : slots_(slots), slot_size_(slot_size), script_(std::move(script))
    {
        nodes_[root_handle].attr = root_attr();
    }

    // The answer to `up`: failed as a --fail rule says, else done and
    // answered, then lied about as a --lie says.
    Msg reply(const Msg &up)
    {
        const pvfsd_msg_hdr h = up.hdr();
        if (const int err = script_.next_failure(h.op); err != 0) {
            std::printf("failed %s tag=%llu with -%s\n", op_name(h.op),
                        static_cast<unsigned long long>(h.tag), strerrorname_np(err));
            return make_empty(h.op, h.tag, -err);
        }
        Msg m = answer(up);
        if (const std::string kind = script_.lie_for(h.op); !kind.empty() && tell_lie(m, kind))
            std::printf("lie %s to %s tag=%llu\n", kind.c_str(), op_name(h.op),
                        static_cast<unsigned long long>(h.tag));
        return m;
    }

private:
    struct Node {
        pvfsd_attr attr{};
        std::map<std::string, std::uint64_t> entries; // directories
        std::vector<std::byte> data;                  // regular files: attr.size bytes
    };

    // The honest answer to `up`; -ENOSYS for ops it does not serve.
    Msg answer(const Msg &up)
    {
        const pvfsd_msg_hdr h = up.hdr();
        const std::uint64_t tag = h.tag;
        switch (h.op) {
        case PVFSD_OP_ATTACH: {
            pvfsd_attach_resp r = attach_ok();
            r.root = nodes_[root_handle].attr;
            return make(h.op, tag, 0, r);
        }
        case PVFSD_OP_STATFS:
            return make(h.op, tag, 0, statfs_ok());
        case PVFSD_OP_DETACH:
        case PVFSD_OP_FSYNC:
            return make_empty(h.op, tag, 0);
        case PVFSD_OP_LOOKUP: {
            const auto q = up.body<pvfsd_name_req>();
            Node *n = child(q.parent, tail(up, sizeof(q), q.name_len));
            return n != nullptr ? attr_answer(h, n->attr) : make_empty(h.op, tag, -ENOENT);
        }
        case PVFSD_OP_GETATTR: {
            Node *n = find(up.body<pvfsd_handle_req>().handle);
            return n != nullptr ? attr_answer(h, n->attr) : make_empty(h.op, tag, -ENOENT);
        }
        case PVFSD_OP_OPEN: {
            // No holds: an unlinked file goes at once, as it did before.
            Node *n = find(up.body<pvfsd_open_req>().handle);
            return n != nullptr ? attr_answer(h, n->attr) : make_empty(h.op, tag, -ENOENT);
        }
        case PVFSD_OP_CLOSE:
            return make_empty(h.op, tag, 0);
        case PVFSD_OP_SETATTR:
            return setattr(up);
        case PVFSD_OP_CREATE: {
            const auto q = up.body<pvfsd_create_req>();
            const std::string name = tail(up, sizeof(q), q.name_len);
            pvfsd_create_resp r{};
            if (Node *n = child(q.parent, name); n != nullptr) {
                if (q.exclusive != 0U)
                    return make_empty(h.op, tag, -EEXIST);
                if (n->attr.type != PVFSD_TYPE_REGULAR)
                    return make_empty(h.op, tag, -EISDIR);
                r.attr = n->attr;
            } else {
                const int rc = add(q.parent, name, PVFSD_TYPE_REGULAR, q.mode, 0, r.attr);
                if (rc != 0)
                    return make_empty(h.op, tag, rc);
                r.created = 1;
            }
            return make(h.op, tag, 0, r);
        }
        case PVFSD_OP_MKDIR:
        case PVFSD_OP_MKNOD: {
            const auto q = up.body<pvfsd_mknod_req>();
            pvfsd_attr a{};
            const int rc =
                add(q.parent, tail(up, sizeof(q), q.name_len), q.type, q.mode, q.rdev, a);
            return rc == 0 ? attr_answer(h, a) : make_empty(h.op, tag, rc);
        }
        case PVFSD_OP_SYMLINK: {
            const auto q = up.body<pvfsd_symlink_req>();
            pvfsd_attr a{};
            const int rc =
                add(q.parent, tail(up, sizeof(q), q.name_len), PVFSD_TYPE_SYMLINK, 0777, 0, a);
            if (rc != 0)
                return make_empty(h.op, tag, rc);
            nodes_[a.handle].attr.size = q.target_len;
            return attr_answer(h, nodes_[a.handle].attr);
        }
        case PVFSD_OP_LINK: {
            const auto q = up.body<pvfsd_link_req>();
            const std::string name = tail(up, sizeof(q), q.name_len);
            Node *dir = find(q.new_parent);
            Node *n = find(q.target);
            if (dir == nullptr || n == nullptr)
                return make_empty(h.op, tag, -ENOENT);
            if (dir->entries.contains(name))
                return make_empty(h.op, tag, -EEXIST);
            dir->entries[name] = q.target;
            ++n->attr.nlink;
            n->attr.ctime = now();
            return attr_answer(h, n->attr);
        }
        case PVFSD_OP_UNLINK:
        case PVFSD_OP_RMDIR: {
            const auto q = up.body<pvfsd_name_req>();
            const std::string name = tail(up, sizeof(q), q.name_len);
            Node *dir = find(q.parent);
            Node *n = child(q.parent, name);
            if (dir == nullptr || n == nullptr)
                return make_empty(h.op, tag, -ENOENT);
            const bool is_dir = n->attr.type == PVFSD_TYPE_DIRECTORY;
            if (is_dir != (h.op == PVFSD_OP_RMDIR))
                return make_empty(h.op, tag, is_dir ? -EISDIR : -ENOTDIR);
            if (is_dir && !n->entries.empty())
                return make_empty(h.op, tag, -ENOTEMPTY);
            const std::uint64_t handle = dir->entries[name];
            dir->entries.erase(name);
            if (--n->attr.nlink == 0 || is_dir)
                nodes_.erase(handle);
            return make_empty(h.op, tag, 0);
        }
        case PVFSD_OP_READ:
        case PVFSD_OP_WRITE:
            return io(up);
        default:
            return make_empty(h.op, tag, -ENOSYS);
        }
    }

    static pvfsd_time now()
    {
        timespec ts{};
        ::clock_gettime(CLOCK_REALTIME, &ts);
        return {ts.tv_sec, static_cast<std::uint32_t>(ts.tv_nsec), 0};
    }
    static std::string tail(const Msg &up, std::size_t body, std::uint32_t len)
    {
        const std::size_t at = sizeof(pvfsd_msg_hdr) + body;
        if (at > up.bytes.size() || len > up.bytes.size() - at)
            return {};
        return {reinterpret_cast<const char *>(up.bytes.data()) + at, len};
    }
    static Msg attr_answer(const pvfsd_msg_hdr &h, const pvfsd_attr &a)
    {
        return make(h.op, h.tag, 0, pvfsd_attr_resp{a});
    }

    Node *find(std::uint64_t handle)
    {
        const auto it = nodes_.find(handle);
        return it != nodes_.end() ? &it->second : nullptr;
    }
    Node *child(std::uint64_t parent, const std::string &name)
    {
        Node *dir = find(parent);
        if (dir == nullptr)
            return nullptr;
        const auto it = dir->entries.find(name);
        return it != dir->entries.end() ? find(it->second) : nullptr;
    }
    int add(std::uint64_t parent, const std::string &name, std::uint32_t type, std::uint32_t mode,
            std::uint64_t rdev, pvfsd_attr &out)
    {
        Node *dir = find(parent);
        if (dir == nullptr || dir->attr.type != PVFSD_TYPE_DIRECTORY)
            return -ENOENT;
        if (name.empty() || dir->entries.contains(name))
            return -EEXIST;
        Node n;
        n.attr.handle = next_handle_++;
        n.attr.type = type;
        n.attr.mode = mode & 07777U;
        n.attr.nlink = type == PVFSD_TYPE_DIRECTORY ? 2 : 1;
        n.attr.blksize = 1U << 20U;
        n.attr.rdev = rdev;
        n.attr.atime = n.attr.mtime = n.attr.ctime = now();
        dir->entries[name] = n.attr.handle;
        dir->attr.mtime = dir->attr.ctime = now();
        out = n.attr;
        nodes_[n.attr.handle] = std::move(n);
        return 0;
    }
    // A regular file's data takes `size` bytes: zeros when it grows.
    static void resize(Node &n, std::uint64_t size)
    {
        n.attr.size = size;
        if (n.attr.type == PVFSD_TYPE_REGULAR)
            n.data.resize(size);
    }
    Msg setattr(const Msg &up)
    {
        const pvfsd_msg_hdr h = up.hdr();
        const auto q = up.body<pvfsd_setattr_req>();
        Node *n = find(q.handle);
        if (n == nullptr)
            return make_empty(h.op, h.tag, -ENOENT);
        pvfsd_attr &a = n->attr;
        if ((q.mask & PVFSD_SET_MODE) != 0U)
            a.mode = q.mode & 07777U;
        if ((q.mask & PVFSD_SET_UID) != 0U)
            a.uid = q.uid;
        if ((q.mask & PVFSD_SET_GID) != 0U)
            a.gid = q.gid;
        if ((q.mask & PVFSD_SET_SIZE) != 0U)
            resize(*n, q.size);
        if ((q.mask & PVFSD_SET_ATIME) != 0U)
            a.atime = q.atime;
        if ((q.mask & PVFSD_SET_MTIME) != 0U)
            a.mtime = q.mtime;
        if ((q.mask & PVFSD_SET_ATIME_NOW) != 0U)
            a.atime = now();
        if ((q.mask & PVFSD_SET_MTIME_NOW) != 0U)
            a.mtime = now();
        a.ctime = now();
        return attr_answer(h, a);
    }
    // READ and WRITE: the bytes move through the request's slot.
    Msg io(const Msg &up)
    {
        const pvfsd_msg_hdr h = up.hdr();
        const auto q = up.body<pvfsd_io_req>();
        Node *n = find(q.handle);
        if (n == nullptr)
            return make_empty(h.op, h.tag, -ENOENT);
        if (n->attr.type != PVFSD_TYPE_REGULAR)
            return make_empty(h.op, h.tag,
                              n->attr.type == PVFSD_TYPE_DIRECTORY ? -EISDIR : -EINVAL);
        const std::size_t at = std::size_t{q.slot} * slot_size_;
        if (q.length > slot_size_ || at + q.length > slots_.size())
            return make_empty(h.op, h.tag, -EINVAL);
        std::byte *slot = slots_.data() + at;
        pvfsd_io_resp r{};
        if (h.op == PVFSD_OP_WRITE) {
            if (n->data.size() < q.offset + q.length)
                resize(*n, q.offset + q.length);
            std::copy_n(slot, q.length, n->data.begin() + static_cast<std::ptrdiff_t>(q.offset));
            n->attr.mtime = n->attr.ctime = now();
            r.done = q.length;
        } else if (q.offset < n->data.size()) {
            r.done = static_cast<std::uint32_t>(
                std::min<std::size_t>(n->data.size() - q.offset, q.length));
            std::copy_n(n->data.begin() + static_cast<std::ptrdiff_t>(q.offset), r.done, slot);
        }
        return make(h.op, h.tag, 0, r);
    }

    std::span<std::byte> slots_;
    std::uint32_t slot_size_;
    Script script_;
    std::map<std::uint64_t, Node> nodes_;
    std::uint64_t next_handle_ = root_handle + 1;
};

// What names an op to the servers' reply cache, for the log: " slot=N" of
// an op that changes something; ATTACH's " client=ID options=TEXT".
std::string ids_text(const Msg &up)
{
    const pvfsd_msg_hdr h = up.hdr();
    if (h.op == PVFSD_OP_ATTACH && h.length >= sizeof(h) + sizeof(pvfsd_attach_req)) {
        const auto a = up.body<pvfsd_attach_req>();
        const std::size_t at = sizeof(h) + sizeof(a) + a.source_len;
        std::string options;
        if (at + a.options_len <= up.bytes.size())
            options.assign(reinterpret_cast<const char *>(up.bytes.data()) + at, a.options_len);
        char client[32];
        std::snprintf(client, sizeof client, "%016llx",
                      static_cast<unsigned long long>(a.client_id));
        return std::string(" client=") + client + " options=" + options;
    }
    const auto common = up.body<pvfsd_req_common>();
    if (common.reply_slot == PVFSD_NO_SLOT)
        return {};
    return " slot=" + std::to_string(common.reply_slot);
}

int run_serve(int hold_op, int die_after_op, Script script)
{
    UniqueFd fd = open_device();
    if (!fd.valid())
        return 1;
    pvfsd_hello granted{};
    if (!say_hello(fd.get(), granted)) {
        std::printf("HELLO failed\n");
        return 1;
    }
    const SlotMap slots(fd.get(), std::size_t{granted.slot_size} * granted.slot_count);
    if (!slots.valid()) {
        std::printf("mmap of the slots: %s\n", strerrordesc_np(errno));
        return 1;
    }
    FakeFs fs(slots.bytes(), granted.slot_size, std::move(script));
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) {
        Msg up;
        if (!read_msg(fd.get(), up))
            return 1;
        const pvfsd_msg_hdr h = up.hdr();
        std::uint64_t mount_id = 0;
        std::uint32_t flags = 0;
        if (h.op == PVFSD_OP_CANCEL) {
            std::printf("CANCEL tag=%llu target=%llu\n", static_cast<unsigned long long>(h.tag),
                        static_cast<unsigned long long>(up.body<pvfsd_cancel_req>().target_tag));
            std::fflush(stdout);
            continue;
        }
        const auto common = up.body<pvfsd_req_common>();
        mount_id = common.mount_id;
        flags = common.flags;
        std::printf("%s tag=%llu mount=%llu%s%s\n", op_name(h.op),
                    static_cast<unsigned long long>(h.tag),
                    static_cast<unsigned long long>(mount_id), ids_text(up).c_str(),
                    (flags & PVFSD_REQ_REPLAYED) != 0 ? " replayed" : "");
        std::fflush(stdout);
        if (h.op == die_after_op)
            return 0;
        if (h.op == hold_op)
            continue;
        const std::string rc = write_msg(fd.get(), fs.reply(up).bytes);
        if (rc != "ok")
            std::printf("answer to tag %llu refused: %s\n", static_cast<unsigned long long>(h.tag),
                        rc.c_str());
        std::fflush(stdout);
    }
}

int usage()
{
    std::fprintf(stderr,
                 "usage: chan-daemon check MOUNTPOINT SOURCE\n"
                 "       chan-daemon serve [--hold OP] [--die-after OP] [--fail OP:ERRNO:N]...\n"
                 "                         [--lie OP:KIND]... [--lies FILE]\n"
                 "KIND: type, handle, size, uid or length\n");
    return 2;
}

} // namespace

int main(int argc, char **argv)
{
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 3 && args[0] == "check")
        return run_check(args[1], args[2]);
    if (!args.empty() && args[0] == "serve") {
        int hold = -1;
        int die_after = -1;
        Script script;
        for (std::size_t i = 1; i + 1 < args.size(); i += 2) {
            const std::string &opt = args[i];
            const std::string &val = args[i + 1];
            if (opt == "--fail" || opt == "--lie") {
                const bool ok = opt == "--fail" ? script.add_fail(val) : script.add_lie(val);
                if (!ok)
                    return usage();
                continue;
            }
            if (opt == "--lies") {
                script.set_lies_file(val);
                continue;
            }
            const int op = op_number(val);
            if (op < 0)
                return usage();
            if (opt == "--hold")
                hold = op;
            else if (opt == "--die-after")
                die_after = op;
            else
                return usage();
        }
        if (args.size() % 2 == 0)
            return usage();
        return run_serve(hold, die_after, std::move(script));
    }
    return usage();
}
