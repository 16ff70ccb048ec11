// chan-daemon: a scripted stand-in for pvfsd that drives /dev/pvfsd in the
// VM rig, to test the kernel's side of the channel without a cluster.
//
//   chan-daemon check MOUNTPOINT SOURCE
//       Walks the protocol: HELLO rules, mmap rules, then mounts SOURCE on
//       MOUNTPOINT (a child process) and answers the ATTACH, statfs and
//       DETACH upcalls, each first with every kind of malformed downcall
//       (each must fail with EINVAL, or EPROTO for a wrong version) and
//       then with a good one.  Exits 0 when the kernel behaved.
//   chan-daemon serve [--hold OP] [--die-after OP] [--count-cancels]
//       Answers ATTACH (a root directory), STATFS and DETACH until killed,
//       printing one line per upcall: "OP tag=T mount=M [replayed]".
//       --hold OP: read upcalls of OP but never answer them.
//       --die-after OP: exit at once after reading an upcall of OP (a
//       daemon crash with the op in flight).
//       --fail OP:ERRNO:N: answer the next N upcalls of OP with -ERRNO (a
//       name such as ENOSPC, or a number); ERRNO 0 answers them normally.
//       Several --fail rules of one OP apply one after the other, so
//       "--fail WRITE:0:1 --fail WRITE:ENOSPC:1" fails the second WRITE.
//       Regular files in the root directory live in memory: LOOKUP,
//       CREATE, GETATTR, SETATTR, READ, WRITE and FSYNC work on them.
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
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
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
    h.version = PVFSD_DEV_VERSION;
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
    h.version = PVFSD_DEV_VERSION;
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
    h.max_inflight = 64;
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

// Every malformed answer to `up` must be refused, leaving the op pending.
void refuse_malformed(int fd, const Msg &up, const Msg &good)
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
                 op + " answer of version 1");
    expect_write(fd, patched([](pvfsd_msg_hdr &g) { g.length += 8; }), "EINVAL",
                 op + " answer whose header says more bytes");
    expect_write(fd, patched([](pvfsd_msg_hdr &g) { g.tag += 1000; }), "EINVAL",
                 op + " answer with an unknown tag");
    expect_write(fd, patched([](pvfsd_msg_hdr &g) { g.tag = 0; }), "EINVAL",
                 op + " answer with tag 0");
    expect_write(fd, patched([](pvfsd_msg_hdr &g) { g.op = PVFSD_OP_GETATTR; }), "EINVAL",
                 op + " answer naming another op");
    expect_write(fd, make_empty(h.op, h.tag, 5), "EINVAL", op + " answer with status +5");
    expect_write(fd, make_empty(h.op, h.tag, -5000), "EINVAL", op + " answer with status -5000");
    {
        Msg m = good;
        pvfsd_msg_hdr g = m.hdr();
        g.status = -EIO;
        std::memcpy(m.bytes.data(), &g, sizeof(g));
        expect_write(fd, m, "EINVAL", op + " error answer carrying a body");
    }
    {
        Msg m = good;
        m.bytes.resize(m.bytes.size() - 4);
        pvfsd_msg_hdr g = m.hdr();
        g.length -= 4;
        std::memcpy(m.bytes.data(), &g, sizeof(g));
        expect_write(fd, m, "EINVAL", op + " answer with a truncated body");
    }
    {
        Msg m = good;
        m.bytes.resize(m.bytes.size() + 8);
        pvfsd_msg_hdr g = m.hdr();
        g.length += 8;
        std::memcpy(m.bytes.data(), &g, sizeof(g));
        expect_write(fd, m, "EINVAL", op + " answer with trailing bytes");
    }
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

int run_check(const std::string &mountpoint, const std::string &source)
{
    UniqueFd fd = open_device();
    if (!fd.valid())
        return 1;

    // ---- HELLO rules ----
    std::array<std::byte, 64> buf{};
    expect(::read(fd.get(), buf.data(), buf.size()) < 0 && errno == EPROTO,
           "read before HELLO fails with EPROTO");
    {
        Msg m = make(PVFSD_OP_HELLO, 0, 0, hello_body(1U << 20U, 8));
        pvfsd_msg_hdr g = m.hdr();
        g.version = PVFSD_DEV_VERSION + 1;
        std::memcpy(m.bytes.data(), &g, sizeof(g));
        expect_write(fd.get(), m, "EPROTO", "HELLO of a newer channel version");
    }
    expect_write(fd.get(), make(PVFSD_OP_HELLO, 0, 0, hello_body(3000, 8)), "EINVAL",
                 "HELLO with slots of 3000 bytes");
    expect_write(fd.get(), make(PVFSD_OP_HELLO, 0, 0, hello_body(1U << 20U, 0)), "EINVAL",
                 "HELLO with no slots");
    expect_write(fd.get(), make(PVFSD_OP_HELLO, 7, 0, hello_body(1U << 20U, 8)), "EINVAL",
                 "HELLO with a tag");
    expect_write(fd.get(), make_empty(PVFSD_OP_STATFS, 1, 0), "EINVAL", "a downcall before HELLO");
    pvfsd_hello granted{};
    expect(say_hello(fd.get(), granted), "HELLO accepted and answered");
    expect(granted.slot_size >= (64U << 10U) && granted.slot_count >= 1,
           "slots granted: " + std::to_string(granted.slot_count) + " x " +
               std::to_string(granted.slot_size));
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
               ah.version == PVFSD_DEV_VERSION && ah.status == 0 && ah.length == up.bytes.size(),
           "ATTACH upcall header well formed");
    const auto areq = up.body<pvfsd_attach_req>();
    const std::string got_source(reinterpret_cast<const char *>(up.bytes.data()) +
                                     sizeof(pvfsd_msg_hdr) + sizeof(areq),
                                 areq.source_len);
    expect(got_source == source && areq.common.mount_id != 0 && areq.common.fsuid == 0,
           "ATTACH carries the source '" + got_source + "', a mount id and the caller");

    const Msg good_attach = make(PVFSD_OP_ATTACH, ah.tag, 0, attach_ok());
    refuse_malformed(fd.get(), up, good_attach);
    auto bad_attach = [&](const std::string &what,
                          const std::function<void(pvfsd_attach_resp &)> &fix) {
        pvfsd_attach_resp r = attach_ok();
        fix(r);
        expect_write(fd.get(), make(PVFSD_OP_ATTACH, ah.tag, 0, r), "EINVAL",
                     "ATTACH answer: " + what);
    };
    bad_attach("root handle 0", [](auto &r) { r.root.handle = 0; });
    bad_attach("object type 9", [](auto &r) { r.root.type = 9; });
    bad_attach("root is a regular file", [](auto &r) { r.root.type = PVFSD_TYPE_REGULAR; });
    bad_attach("nanoseconds of 1e9", [](auto &r) { r.root.mtime.nsec = 1000000000; });
    bad_attach("mode with file type bits", [](auto &r) { r.root.mode = 040755; });
    bad_attach("max_name 0", [](auto &r) { r.max_name = 0; });
    bad_attach("max_name 256", [](auto &r) { r.max_name = 256; });
    expect_write(fd.get(), good_attach, "ok", "the good ATTACH answer");
    expect(wait_child(mounter) == 0, "mount succeeded after the malformed answers");
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
    refuse_malformed(fd.get(), up, good_statfs);
    auto bad_statfs = [&](const std::string &what,
                          const std::function<void(pvfsd_statfs_resp &)> &fix) {
        pvfsd_statfs_resp r = statfs_ok();
        fix(r);
        expect_write(fd.get(), make(PVFSD_OP_STATFS, up.hdr().tag, 0, r), "EINVAL",
                     "STATFS answer: " + what);
    };
    bad_statfs("more free than total", [](auto &r) { r.bfree = 2000; });
    bad_statfs("block size 0", [](auto &r) { r.bsize = 0; });
    bad_statfs("name length 0", [](auto &r) { r.namelen = 0; });
    expect_write(fd.get(), good_statfs, "ok", "the good STATFS answer");
    expect(wait_child(statter) == 0, "statfs returned the answered figures");

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

// ---- serve: scripted failures and files in memory ----

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

// The errno the next upcall of `op` is to fail with (0: none); uses up the rules.
int next_failure(std::deque<FailRule> &rules, int op)
{
    for (auto it = rules.begin(); it != rules.end(); ++it) {
        if (it->op != op)
            continue;
        const int err = it->err;
        if (--it->count == 0)
            rules.erase(it);
        return err;
    }
    return 0;
}

// Regular files in the root directory, in memory, so that the page cache's
// writeback can be driven and its bytes checked.
class Files {
public:
    explicit Files(std::span<std::byte> slots, std::uint32_t slot_size)
        : slots_(slots), slot_size_(slot_size)
    {
    }

    // Answers `up` if it is a file op; returns false for other ops.
    bool answer(int fd, const Msg &up, std::string &rc)
    {
        const pvfsd_msg_hdr h = up.hdr();
        int status = 0;
        switch (h.op) {
        case PVFSD_OP_LOOKUP: {
            const auto req = up.body<pvfsd_name_req>();
            File *f = by_name(name_of(up, sizeof(req), req.name_len));
            if (req.parent != root_handle || f == nullptr)
                status = -ENOENT;
            else
                rc = write_msg(fd, make(h.op, h.tag, 0, pvfsd_attr_resp{attr(*f)}).bytes);
            break;
        }
        case PVFSD_OP_CREATE: {
            const auto req = up.body<pvfsd_create_req>();
            const std::string name = name_of(up, sizeof(req), req.name_len);
            File *f = by_name(name);
            pvfsd_create_resp r{};
            if (req.parent != root_handle) {
                status = -ENOTDIR;
            } else if (f != nullptr && req.exclusive != 0) {
                status = -EEXIST;
            } else {
                if (f == nullptr) {
                    f = &files_[name];
                    f->handle = root_handle + 1 + files_.size();
                    f->mode = req.mode & 07777U;
                    r.created = 1;
                }
                r.attr = attr(*f);
                rc = write_msg(fd, make(h.op, h.tag, 0, r).bytes);
            }
            break;
        }
        case PVFSD_OP_GETATTR: {
            const auto req = up.body<pvfsd_handle_req>();
            if (req.handle == root_handle)
                rc = write_msg(fd, make(h.op, h.tag, 0, pvfsd_attr_resp{root_attr()}).bytes);
            else if (File *f = by_handle(req.handle); f != nullptr)
                rc = write_msg(fd, make(h.op, h.tag, 0, pvfsd_attr_resp{attr(*f)}).bytes);
            else
                status = -ENOENT;
            break;
        }
        case PVFSD_OP_SETATTR: {
            const auto req = up.body<pvfsd_setattr_req>();
            File *f = by_handle(req.handle);
            if (f == nullptr) {
                status = -ENOENT;
                break;
            }
            if ((req.mask & PVFSD_SET_MODE) != 0)
                f->mode = req.mode & 07777U;
            if ((req.mask & PVFSD_SET_SIZE) != 0)
                f->data.resize(req.size);
            ++f->version;
            rc = write_msg(fd, make(h.op, h.tag, 0, pvfsd_attr_resp{attr(*f)}).bytes);
            break;
        }
        case PVFSD_OP_READ:
        case PVFSD_OP_WRITE: {
            const auto req = up.body<pvfsd_io_req>();
            File *f = by_handle(req.handle);
            const std::size_t at = std::size_t{req.slot} * slot_size_;
            if (f == nullptr || req.length > slot_size_ || at + req.length > slots_.size()) {
                status = f == nullptr ? -ENOENT : -EINVAL;
                break;
            }
            std::byte *slot = slots_.data() + at;
            pvfsd_io_resp r{};
            if (h.op == PVFSD_OP_WRITE) {
                if (f->data.size() < req.offset + req.length)
                    f->data.resize(req.offset + req.length);
                std::copy_n(slot, req.length, f->data.begin() + static_cast<long>(req.offset));
                ++f->version;
                r.done = req.length;
            } else {
                const std::size_t have =
                    req.offset < f->data.size() ? f->data.size() - req.offset : 0;
                r.done = static_cast<std::uint32_t>(std::min<std::size_t>(have, req.length));
                std::copy_n(f->data.begin() + static_cast<long>(req.offset), r.done, slot);
            }
            rc = write_msg(fd, make(h.op, h.tag, 0, r).bytes);
            break;
        }
        case PVFSD_OP_FSYNC:
            break;
        default:
            return false;
        }
        if (rc.empty())
            rc = write_msg(fd, make_empty(h.op, h.tag, status).bytes);
        return true;
    }

private:
    struct File {
        std::uint64_t handle = 0;
        std::uint32_t mode = 0644;
        std::uint32_t version = 0; // bumped by each change: the mtime
        std::vector<std::byte> data;
    };

    static std::string name_of(const Msg &up, std::size_t body, std::size_t len)
    {
        const std::size_t at = sizeof(pvfsd_msg_hdr) + body;
        if (at + len > up.bytes.size())
            return {};
        return {reinterpret_cast<const char *>(up.bytes.data()) + at, len};
    }

    File *by_name(const std::string &name)
    {
        const auto it = files_.find(name);
        return it == files_.end() ? nullptr : &it->second;
    }

    File *by_handle(std::uint64_t handle)
    {
        for (auto &[name, f] : files_)
            if (f.handle == handle)
                return &f;
        return nullptr;
    }

    static pvfsd_attr attr(const File &f)
    {
        pvfsd_attr a{};
        a.handle = f.handle;
        a.type = PVFSD_TYPE_REGULAR;
        a.mode = f.mode;
        a.nlink = 1;
        a.blksize = 1U << 20U;
        a.size = f.data.size();
        a.atime.sec = 1700000000;
        a.mtime.sec = 1700000000 + f.version;
        a.ctime = a.mtime;
        return a;
    }

    std::span<std::byte> slots_;
    std::uint32_t slot_size_;
    std::map<std::string, File> files_;
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

int run_serve(int hold_op, int die_after_op, std::deque<FailRule> fails)
{
    UniqueFd fd = open_device();
    if (!fd.valid())
        return 1;
    pvfsd_hello granted{};
    if (!say_hello(fd.get(), granted)) {
        std::printf("HELLO failed\n");
        return 1;
    }
    const std::size_t area = std::size_t{granted.slot_size} * granted.slot_count;
    void *slots = ::mmap(nullptr, area, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (slots == MAP_FAILED) {
        std::printf("mmap of the slots: %s\n", strerrordesc_np(errno));
        return 1;
    }
    Files files(std::span(static_cast<std::byte *>(slots), area), granted.slot_size);
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
        std::string rc;
        if (const int err = next_failure(fails, h.op); err != 0) {
            std::printf("failed %s tag=%llu with -%s\n", op_name(h.op),
                        static_cast<unsigned long long>(h.tag), strerrorname_np(err));
            std::fflush(stdout);
            rc = write_msg(fd.get(), make_empty(h.op, h.tag, -err).bytes);
        } else if (!files.answer(fd.get(), up, rc)) {
            switch (h.op) {
            case PVFSD_OP_ATTACH:
                rc = write_msg(fd.get(), make(h.op, h.tag, 0, attach_ok()).bytes);
                break;
            case PVFSD_OP_STATFS:
                rc = write_msg(fd.get(), make(h.op, h.tag, 0, statfs_ok()).bytes);
                break;
            case PVFSD_OP_DETACH:
                rc = write_msg(fd.get(), make_empty(h.op, h.tag, 0).bytes);
                break;
            default:
                rc = write_msg(fd.get(), make_empty(h.op, h.tag, -ENOSYS).bytes);
                break;
            }
        }
        if (rc != "ok")
            std::printf("answer to tag %llu refused: %s\n", static_cast<unsigned long long>(h.tag),
                        rc.c_str());
    }
}

int usage()
{
    std::fprintf(stderr, "usage: chan-daemon check MOUNTPOINT SOURCE\n"
                         "       chan-daemon serve [--hold OP] [--die-after OP] "
                         "[--fail OP:ERRNO:N]...\n");
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
        std::deque<FailRule> fails;
        for (std::size_t i = 1; i + 1 < args.size(); i += 2) {
            if (args[i] == "--fail") {
                FailRule rule{};
                if (!parse_fail(args[i + 1], rule))
                    return usage();
                fails.push_back(rule);
                continue;
            }
            const int op = op_number(args[i + 1]);
            if (op < 0)
                return usage();
            if (args[i] == "--hold")
                hold = op;
            else if (args[i] == "--die-after")
                die_after = op;
            else
                return usage();
        }
        if (args.size() % 2 == 0)
            return usage();
        return run_serve(hold, die_after, std::move(fails));
    }
    return usage();
}
