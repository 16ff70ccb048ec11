// pvfs-posix-suite: POSIX behaviour a file system must show, checked on any
// directory.  The VM tests run it on the pvfs mount, as root and as an
// unprivileged user; the host tests run it on the host's own file systems,
// where Linux is the reference.
//
//   pvfs-posix-suite DIR [--case NAME] [--list] [--entries N]
//
// Each case works in a fresh subdirectory of DIR and prints "ok NAME",
// "skip NAME: why" or "FAIL NAME: what"; the exit status is 1 when a case
// failed, 2 on bad usage.
#include <pvfs/unique_fd.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/fs.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using pvfs::UniqueFd;

constexpr uid_t nobody = 65534;

// A failed expectation: what, expected vs got.
struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};
struct Skip : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string errno_name(int e)
{
    const char *n = strerrorname_np(e);
    return n != nullptr ? n : std::to_string(e);
}

// rc: the call's result (< 0 failed, errno set).  want: 0 for success, else an errno.
void expect_rc(long rc, int want, const std::string &what)
{
    const int got = rc < 0 ? errno : 0;
    if (got != want)
        throw Failure(what + ": expected " + (want == 0 ? "success" : errno_name(want)) + ", got " +
                      (got == 0 ? "success" : errno_name(got)));
}

void expect(bool ok, const std::string &what)
{
    if (!ok)
        throw Failure(what);
}

void write_file(const std::string &path, const std::string &data, mode_t mode = 0644)
{
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
    expect_rc(fd.valid() ? 0 : -1, 0, "create " + path);
    expect(::write(fd.get(), data.data(), data.size()) == static_cast<ssize_t>(data.size()),
           "write " + path);
}

std::string read_file(const std::string &path)
{
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    expect_rc(fd.valid() ? 0 : -1, 0, "open " + path);
    std::string out;
    char buf[65536];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
        expect(n >= 0, "read " + path);
        if (n == 0)
            return out;
        out.append(buf, static_cast<std::size_t>(n));
    }
}

struct stat stat_of(const std::string &path)
{
    struct stat st {};
    expect_rc(::lstat(path.c_str(), &st), 0, "lstat " + path);
    return st;
}

// Runs fn in a child as uid/gid `uid` (no groups); true when it returned true.
bool as_user(uid_t uid, const std::function<bool()> &fn)
{
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid == 0) {
        if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
            ::setresuid(uid, uid, uid) != 0)
            ::_exit(3);
        ::_exit(fn() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool is_root()
{
    return ::geteuid() == 0;
}

struct Context {
    std::string dir; // this case's own directory
    unsigned entries = 2000;
    [[nodiscard]] std::string p(const std::string &name) const { return dir + "/" + name; }
};

using Case = std::function<void(const Context &)>;

// ---- the cases ----

void open_flags(const Context &c)
{
    const std::string f = c.p("f");
    UniqueFd a(::open(f.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
    expect_rc(a.valid() ? 0 : -1, 0, "O_CREAT|O_EXCL of a new name");
    UniqueFd b(::open(f.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
    expect_rc(b.valid() ? 0 : -1, EEXIST, "O_CREAT|O_EXCL of an existing name");
    write_file(f, "0123456789");
    UniqueFd t(::open(f.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
    expect(t.valid() && stat_of(f).st_size == 0, "O_TRUNC empties the file");
    UniqueFd d(::open(f.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    expect_rc(d.valid() ? 0 : -1, ENOTDIR, "O_DIRECTORY on a file");
    expect_rc(::symlink("f", c.p("l").c_str()), 0, "symlink");
    UniqueFd n(::open(c.p("l").c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    expect_rc(n.valid() ? 0 : -1, ELOOP, "O_NOFOLLOW on a symlink");
    // O_EXCL never follows or reuses what is there (the kernel sends one
    // CREATE without a LOOKUP: the server must refuse every kind of name)
    expect_rc(::symlink("nowhere", c.p("dangling").c_str()), 0, "symlink to nothing");
    expect_rc(::mkdir(c.p("sub").c_str(), 0755), 0, "mkdir");
    for (const char *name : {"l", "dangling", "sub"}) {
        UniqueFd e(::open(c.p(name).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
        expect_rc(e.valid() ? 0 : -1, EEXIST, std::string("O_CREAT|O_EXCL of ") + name);
    }
    struct stat target {};
    expect(::lstat(c.p("nowhere").c_str(), &target) != 0, "O_EXCL created the dangling target");
    // a name created with O_EXCL is an ordinary entry at once
    const mode_t old_mask = ::umask(022);
    UniqueFd g(::open(c.p("g").c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0640));
    ::umask(old_mask);
    expect(g.valid() && ::write(g.get(), "xy", 2) == 2, "O_EXCL create and write");
    g = UniqueFd();
    const struct stat gs = stat_of(c.p("g"));
    expect(S_ISREG(gs.st_mode) && (gs.st_mode & 07777) == 0640 && gs.st_size == 2,
           "stat of the O_EXCL file");
    // O_CREAT without O_EXCL of an existing file opens it (and O_TRUNC empties it)
    write_file(f, "0123456789");
    const mode_t f_mode = stat_of(f).st_mode & 07777;
    UniqueFd ct(::open(f.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600));
    expect(ct.valid() && stat_of(f).st_size == 0, "O_CREAT|O_TRUNC of an existing file");
    expect((stat_of(f).st_mode & 07777) == f_mode, "O_CREAT of an existing file keeps its mode");
    ct = UniqueFd();
    // O_APPEND from two descriptors: nothing overwritten
    UniqueFd x(::open(f.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    UniqueFd y(::open(f.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    for (int i = 0; i < 10; ++i) {
        expect(::write(x.get(), "ab", 2) == 2, "append x");
        expect(::write(y.get(), "cde", 3) == 3, "append y");
    }
    x = UniqueFd();
    y = UniqueFd();
    expect(read_file(f).size() == 50,
           "O_APPEND from two fds: 50 bytes, got " + std::to_string(read_file(f).size()));
}

void permissions(const Context &c)
{
    if (!is_root())
        throw Skip("needs root to act as another user");
    write_file(c.p("secret"), "s", 0600);
    write_file(c.p("public"), "p", 0644);
    expect_rc(::chmod(c.dir.c_str(), 0755), 0, "chmod dir");
    const std::string secret = c.p("secret");
    const std::string pub = c.p("public");
    const std::string dir = c.dir;
    expect(as_user(
               nobody,
               [&] {
                   UniqueFd a(::open(secret.c_str(), O_RDONLY | O_CLOEXEC));
                   UniqueFd b(::open(pub.c_str(), O_RDONLY | O_CLOEXEC));
                   UniqueFd w(::open(pub.c_str(), O_WRONLY | O_CLOEXEC));
                   UniqueFd n(::open((dir + "/new").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
                   return !a.valid() && errno == EACCES && b.valid() && !w.valid() && !n.valid();
               }),
           "uid 65534: 0600 unreadable, 0644 readable not writable, no create in a 0755 dir");
    // umask applies to new files
    const mode_t old = ::umask(027);
    write_file(c.p("masked"), "", 0666);
    ::umask(old);
    expect((stat_of(c.p("masked")).st_mode & 07777) == 0640, "umask 027 gives 0640");
    // chown: only root gives files away
    expect_rc(::chown(c.p("public").c_str(), nobody, nobody), 0, "root chowns");
    expect(as_user(nobody, [&] { return ::chown(pub.c_str(), 1000, 1000) != 0 && errno == EPERM; }),
           "a non-root owner cannot give a file away (EPERM)");
    // sticky directory: others cannot remove
    expect_rc(::mkdir(c.p("tmp").c_str(), 0777), 0, "mkdir tmp");
    expect_rc(::chmod(c.p("tmp").c_str(), 01777), 0, "chmod 1777");
    write_file(c.p("tmp/rootfile"), "r", 0666);
    const std::string rootfile = c.p("tmp/rootfile");
    expect(as_user(nobody, [&] { return ::unlink(rootfile.c_str()) != 0 && errno == EPERM; }),
           "sticky directory: another user's file cannot be removed");
}

void setid_clearing(const Context &c)
{
    if (!is_root())
        throw Skip("needs root");
    const std::string f = c.p("prog");
    write_file(f, "#!/bin/sh\n", 0755);
    expect_rc(::chmod(f.c_str(), 06777), 0, "chmod 06777");
    expect_rc(::chmod(c.dir.c_str(), 0777), 0, "chmod dir");
    expect(as_user(nobody,
                   [&] {
                       UniqueFd fd(::open(f.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
                       return fd.valid() && ::write(fd.get(), "x", 1) == 1;
                   }),
           "uid 65534 appends to a 06777 file");
    struct stat st = stat_of(f);
    expect((st.st_mode & (S_ISUID | S_ISGID)) == 0,
           "setuid/setgid cleared by another user's write (mode " +
               std::to_string(st.st_mode & 07777) + ")");
    expect_rc(::chmod(f.c_str(), 04755), 0, "chmod 04755");
    expect_rc(::chown(f.c_str(), nobody, static_cast<gid_t>(-1)), 0, "chown");
    st = stat_of(f);
    expect((st.st_mode & S_ISUID) == 0, "setuid cleared by chown");
}

void renames(const Context &c)
{
    write_file(c.p("a"), "A");
    write_file(c.p("b"), "B");
    expect_rc(::rename(c.p("a").c_str(), c.p("b").c_str()), 0, "rename over a file");
    expect(read_file(c.p("b")) == "A" && ::access(c.p("a").c_str(), F_OK) != 0,
           "the renamed file replaced the target");
    expect_rc(::rename(c.p("b").c_str(), c.p("b").c_str()), 0, "rename to itself");
    expect_rc(::mkdir(c.p("d").c_str(), 0755), 0, "mkdir d");
    expect_rc(::mkdir(c.p("e").c_str(), 0755), 0, "mkdir e");
    expect_rc(::rename(c.p("b").c_str(), c.p("d").c_str()), EISDIR, "file over a directory");
    expect_rc(::rename(c.p("d").c_str(), c.p("b").c_str()), ENOTDIR, "directory over a file");
    write_file(c.p("e/x"), "x");
    const int rc = ::rename(c.p("d").c_str(), c.p("e").c_str());
    expect(rc != 0 && (errno == ENOTEMPTY || errno == EEXIST),
           "directory over a non-empty directory: ENOTEMPTY or EEXIST");
    expect_rc(::mkdir(c.p("empty").c_str(), 0755), 0, "mkdir empty");
    expect_rc(::rename(c.p("d").c_str(), c.p("empty").c_str()), 0,
              "directory over an empty directory");
    expect_rc(::mkdir(c.p("empty/sub").c_str(), 0755), 0, "mkdir sub");
    expect_rc(::rename(c.p("empty").c_str(), c.p("empty/sub/in").c_str()), EINVAL,
              "a directory into its own subdirectory");
    write_file(c.p("n1"), "1");
    write_file(c.p("n2"), "2");
    expect_rc(
        ::renameat2(AT_FDCWD, c.p("n1").c_str(), AT_FDCWD, c.p("n2").c_str(), RENAME_NOREPLACE),
        EEXIST, "RENAME_NOREPLACE onto an existing name");
    expect_rc(
        ::renameat2(AT_FDCWD, c.p("n1").c_str(), AT_FDCWD, c.p("n3").c_str(), RENAME_NOREPLACE), 0,
        "RENAME_NOREPLACE onto a free name");
    const int ex =
        ::renameat2(AT_FDCWD, c.p("n3").c_str(), AT_FDCWD, c.p("n2").c_str(), RENAME_EXCHANGE);
    if (ex == 0)
        expect(read_file(c.p("n3")) == "2" && read_file(c.p("n2")) == "1",
               "RENAME_EXCHANGE swapped the files");
    else
        expect(errno == EINVAL, "RENAME_EXCHANGE: a swap or EINVAL, got " + errno_name(errno));
}

void links_and_removal(const Context &c)
{
    write_file(c.p("f"), "data");
    expect_rc(::link(c.p("f").c_str(), c.p("g").c_str()), 0, "link");
    expect(stat_of(c.p("f")).st_nlink == 2, "two links");
    expect_rc(::unlink(c.p("f").c_str()), 0, "unlink one");
    expect(stat_of(c.p("g")).st_nlink == 1 && read_file(c.p("g")) == "data",
           "the other name keeps the data");
    expect_rc(::mkdir(c.p("d").c_str(), 0755), 0, "mkdir");
    expect_rc(::mkdir(c.p("d").c_str(), 0755), EEXIST, "mkdir of an existing name");
    expect_rc(::link(c.p("d").c_str(), c.p("dl").c_str()), EPERM, "hard link to a directory");
    expect_rc(::unlink(c.p("d").c_str()), EISDIR, "unlink of a directory");
    expect_rc(::rmdir(c.p("g").c_str()), ENOTDIR, "rmdir of a file");
    write_file(c.p("d/x"), "");
    expect_rc(::rmdir(c.p("d").c_str()), ENOTEMPTY, "rmdir of a non-empty directory");
    expect_rc(::rmdir(c.p("d/.").c_str()), EINVAL, "rmdir of '.'");
    expect_rc(::unlink(c.p("d/x").c_str()), 0, "unlink");
    expect_rc(::rmdir(c.p("d").c_str()), 0, "rmdir of the empty directory");
    expect(stat_of(c.dir).st_nlink >= 2, "a directory has at least 2 links");
}

void symlinks(const Context &c)
{
    expect_rc(::symlink("b", c.p("a").c_str()), 0, "symlink a->b");
    expect_rc(::symlink("a", c.p("b").c_str()), 0, "symlink b->a");
    UniqueFd fd(::open(c.p("a").c_str(), O_RDONLY | O_CLOEXEC));
    expect_rc(fd.valid() ? 0 : -1, ELOOP, "open through a symlink loop");
    expect_rc(::symlink("nowhere", c.p("dangling").c_str()), 0, "dangling symlink");
    UniqueFd d(::open(c.p("dangling").c_str(), O_RDONLY | O_CLOEXEC));
    expect_rc(d.valid() ? 0 : -1, ENOENT, "open a dangling symlink");
    char buf[64] = {};
    expect(::readlink(c.p("dangling").c_str(), buf, sizeof(buf)) == 7 &&
               std::string(buf, 7) == "nowhere",
           "readlink");
    const std::string long_target(4095, 'x');
    expect_rc(::symlink(long_target.c_str(), c.p("long").c_str()), 0, "a 4095-byte target");
    expect(stat_of(c.p("long")).st_size == 4095, "its size");
}

void special_files(const Context &c)
{
    expect_rc(::mkfifo(c.p("fifo").c_str(), 0644), 0, "mkfifo");
    expect(S_ISFIFO(stat_of(c.p("fifo")).st_mode), "a fifo");
    UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string sp = c.p("sock");
    if (sp.size() < sizeof(addr.sun_path)) {
        std::memcpy(addr.sun_path, sp.c_str(), sp.size() + 1);
        expect_rc(::bind(s.get(), reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0,
                  "bind a unix socket");
        expect(S_ISSOCK(stat_of(sp).st_mode), "a socket");
    }
    if (is_root()) {
        expect_rc(::mknod(c.p("chr").c_str(), S_IFCHR | 0600, makedev(1, 3)), 0, "mknod char");
        const struct stat st = stat_of(c.p("chr"));
        expect(S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 && minor(st.st_rdev) == 3,
               "char device 1,3");
        expect_rc(::mknod(c.p("blk").c_str(), S_IFBLK | 0600, makedev(7, 0)), 0, "mknod block");
        expect(S_ISBLK(stat_of(c.p("blk")).st_mode), "block device");
    }
}

void truncation(const Context &c)
{
    const std::string f = c.p("f");
    write_file(f, "abc");
    UniqueFd fd(::open(f.c_str(), O_RDWR | O_CLOEXEC));
    const off_t big = (off_t{1} << 20) + 7;
    expect_rc(::ftruncate(fd.get(), big), 0, "ftruncate up");
    expect(stat_of(f).st_size == big, "size after growing");
    std::vector<char> buf(100, 'z');
    expect(::pread(fd.get(), buf.data(), 100, big - 100) == 100, "read the grown tail");
    for (char ch : buf)
        expect(ch == 0, "the grown part reads as zeros");
    expect(::pwrite(fd.get(), "Q", 1, off_t{2} << 20) == 1, "write past the end");
    expect(stat_of(f).st_size == (off_t{2} << 20) + 1, "size after writing past the end");
    expect(::pread(fd.get(), buf.data(), 100, (off_t{3} << 19)) == 100, "read the hole");
    for (char ch : buf)
        expect(ch == 0, "a hole reads as zeros");
    expect_rc(::truncate(f.c_str(), 2), 0, "truncate down");
    fd = UniqueFd();
    expect(read_file(f) == "ab", "truncated to 2 bytes");
    expect_rc(::truncate(f.c_str(), 5), 0, "truncate up again");
    expect(read_file(f) == std::string("ab\0\0\0", 5), "grown again with zeros, not old bytes");
}

void timestamps(const Context &c)
{
    const std::string f = c.p("f");
    write_file(f, "t");
    timespec ts[2] = {{1000000000, 123456789}, {1100000000, 987654321}};
    expect_rc(::utimensat(AT_FDCWD, f.c_str(), ts, 0), 0, "utimensat");
    struct stat st = stat_of(f);
    expect(st.st_atim.tv_sec == 1000000000 && st.st_atim.tv_nsec == 123456789 &&
               st.st_mtim.tv_sec == 1100000000 && st.st_mtim.tv_nsec == 987654321,
           "times with nanoseconds kept");
    timespec omit[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    expect_rc(::utimensat(AT_FDCWD, f.c_str(), omit, 0), 0, "UTIME_OMIT + UTIME_NOW");
    st = stat_of(f);
    expect(st.st_atim.tv_sec == 1000000000 && st.st_atim.tv_nsec == 123456789,
           "UTIME_OMIT leaves atime");
    expect(std::abs(st.st_mtim.tv_sec - std::time(nullptr)) < 120, "UTIME_NOW sets mtime to now");
    if (is_root()) {
        expect_rc(::chmod(f.c_str(), 0666), 0, "chmod 0666");
        expect(as_user(nobody,
                       [&] {
                           timespec set[2] = {{5, 0}, {5, 0}};
                           return ::utimensat(AT_FDCWD, f.c_str(), set, 0) != 0 && errno == EPERM &&
                                  ::utimensat(AT_FDCWD, f.c_str(), nullptr, 0) == 0;
                       }),
               "a writer who is not the owner may set now (EPERM for explicit times)");
    }
}

// A directory stream, closed on destruction.
struct DirCloser {
    void operator()(DIR *d) const noexcept { ::closedir(d); }
};
using DirStream = std::unique_ptr<DIR, DirCloser>;

// This program has one thread: readdir's static buffer is fine.
// NOLINTBEGIN(concurrency-mt-unsafe)
void directory_listing(const Context &c)
{
    const unsigned n = c.entries;
    for (unsigned i = 0; i < n; ++i) {
        UniqueFd fd(
            ::open(c.p("e" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
        expect(fd.valid(), "create entry " + std::to_string(i));
    }
    // Another process removes the odd entries while this one lists.
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid == 0) {
        for (unsigned i = 1; i < n; i += 2)
            ::unlink(c.p("e" + std::to_string(i)).c_str());
        ::_exit(0);
    }
    std::map<std::string, int> seen;
    {
        const DirStream d(::opendir(c.dir.c_str()));
        expect(d != nullptr, "opendir");
        while (const dirent *e = ::readdir(d.get()))
            ++seen[e->d_name];
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    for (const auto &[name, count] : seen)
        expect(count == 1, name + " listed " + std::to_string(count) + " times");
    for (unsigned i = 0; i < n; i += 2)
        expect(seen.contains("e" + std::to_string(i)),
               "e" + std::to_string(i) + " (never removed) missing from the listing");
    // telldir/seekdir come back to the same entry
    const DirStream d(::opendir(c.dir.c_str()));
    expect(d != nullptr, "opendir again");
    for (int i = 0; i < 10; ++i)
        expect(::readdir(d.get()) != nullptr, "read 10 entries");
    const long pos = ::telldir(d.get());
    const dirent *e = ::readdir(d.get());
    expect(e != nullptr, "an entry after telldir");
    const std::string name = e->d_name;
    for (int i = 0; i < 5; ++i) {
        if (::readdir(d.get()) == nullptr)
            break;
    }
    ::seekdir(d.get(), pos);
    e = ::readdir(d.get());
    expect(e != nullptr && name == e->d_name, "seekdir returns to '" + name + "'");
}
// NOLINTEND(concurrency-mt-unsafe)

void limits_and_data(const Context &c)
{
    const std::string n255(255, 'n');
    write_file(c.p(n255), "x");
    UniqueFd fd(::open(c.p(n255 + "n").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    expect_rc(fd.valid() ? 0 : -1, ENAMETOOLONG, "a 256-byte name");
    struct statfs sf {};
    expect_rc(::statfs(c.dir.c_str(), &sf), 0, "statfs");
    expect(sf.f_bsize > 0 && sf.f_blocks >= sf.f_bfree && sf.f_bfree >= sf.f_bavail &&
               sf.f_namelen >= 255,
           "statfs figures consistent");
    std::string data(10U << 20U, '\0');
    for (std::size_t i = 0; i < data.size(); ++i)
        data[i] = static_cast<char>((i * 131) >> 7);
    write_file(c.p("big"), data);
    UniqueFd b(::open(c.p("big").c_str(), O_RDWR | O_CLOEXEC));
    expect_rc(::fsync(b.get()), 0, "fsync");
    expect_rc(::fdatasync(b.get()), 0, "fdatasync");
    expect(read_file(c.p("big")) == data, "10 MiB read back byte-exact");
    expect(stat_of(c.p("big")).st_size == static_cast<off_t>(data.size()), "st_size");
}

// Bytes of a pattern no two offsets or seeds share easily.
std::string pattern(std::size_t len, unsigned seed)
{
    std::string out(len, '\0');
    for (std::size_t i = 0; i < len; ++i)
        out[i] = static_cast<char>(((i * 2654435761U) >> 13U) + std::size_t{seed} * 31U);
    return out;
}

void expect_pwrite(int fd, const std::string &data, off_t at, const std::string &what)
{
    expect(::pwrite(fd, data.data(), data.size(), at) == static_cast<ssize_t>(data.size()),
           what + ": pwrite " + errno_name(errno));
}

std::string pread_all(int fd, std::size_t len, const std::string &what)
{
    std::string out(len, '\0');
    std::size_t done = 0;
    while (done < len) {
        const ssize_t n = ::pread(fd, out.data() + done, len - done, static_cast<off_t>(done));
        expect(n > 0, what + ": pread at " + std::to_string(done) + ": " +
                          (n < 0 ? errno_name(errno) : std::string("end of file")));
        done += static_cast<std::size_t>(n);
    }
    return out;
}

// A child's end of a pipe: waits for one byte.
void await_byte(int fd)
{
    char b = 0;
    if (::read(fd, &b, 1) != 1)
        ::_exit(3);
}

// POSIX unlink semantics: a file unlinked (or renamed over) while open
// stays readable and writable through its open descriptors, with every
// byte, until the last close.
void unlink_open(const Context &c)
{
    // The sequence of issue 24: open, write 64 KiB, fsync, unlink, write
    // 4 KiB, fsync, read it all back.
    {
        const std::string f = c.p("f");
        UniqueFd fd(::open(f.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
        expect_rc(fd.valid() ? 0 : -1, 0, "create f");
        std::string want = pattern(64U << 10U, 1);
        expect_pwrite(fd.get(), want, 0, "64 KiB");
        expect_rc(::fsync(fd.get()), 0, "fsync before the unlink");
        expect_rc(::unlink(f.c_str()), 0, "unlink f while open");
        struct stat st {};
        expect_rc(::lstat(f.c_str(), &st), ENOENT, "lstat of the unlinked name");
        const std::string more = pattern(4096, 2);
        expect_pwrite(fd.get(), more, 8192, "4 KiB after the unlink");
        want.replace(8192, more.size(), more);
        expect_rc(::fsync(fd.get()), 0, "fsync after the unlink");
        expect(pread_all(fd.get(), want.size(), "after the unlink") == want,
               "the unlinked file's 64 KiB read back byte-exact");
        expect_rc(::fstat(fd.get(), &st), 0, "fstat of the unlinked file");
        expect(st.st_nlink == 0, "st_nlink " + std::to_string(st.st_nlink) + ", 0 expected");
        expect(st.st_size == static_cast<off_t>(want.size()), "st_size after the unlink");
        // Growing it works too.
        const std::string tail = pattern(10000, 3);
        expect_pwrite(fd.get(), tail, static_cast<off_t>(want.size()), "growing it");
        want += tail;
        expect_rc(::fsync(fd.get()), 0, "fsync of the grown file");
        expect(pread_all(fd.get(), want.size(), "grown") == want, "the grown file read back");
    }

    // Two processes, each with its own open of the file: one unlinks it,
    // the other then reads and writes it and exits (closing its own);
    // the first still reads what the second wrote.
    {
        const std::string f = c.p("shared");
        const std::string first = pattern(32768, 4);
        write_file(f, first);
        int go[2];
        int done[2];
        expect_rc(::pipe2(go, O_CLOEXEC), 0, "pipe");
        expect_rc(::pipe2(done, O_CLOEXEC), 0, "pipe");
        UniqueFd keep(::open(f.c_str(), O_RDWR | O_CLOEXEC));
        expect_rc(keep.valid() ? 0 : -1, 0, "open shared");
        const pid_t pid = ::fork();
        expect_rc(pid, 0, "fork");
        if (pid == 0) {
            UniqueFd mine(::open(f.c_str(), O_RDWR | O_CLOEXEC));
            const char ready = 'r';
            if (!mine.valid() || ::write(done[1], &ready, 1) != 1)
                ::_exit(2);
            await_byte(go[0]); // the parent unlinked it
            std::string got(first.size(), '\0');
            if (::pread(mine.get(), got.data(), got.size(), 0) !=
                    static_cast<ssize_t>(got.size()) ||
                got != first)
                ::_exit(4);
            const std::string second = pattern(5000, 5);
            if (::pwrite(mine.get(), second.data(), second.size(), 30000) !=
                    static_cast<ssize_t>(second.size()) ||
                ::fsync(mine.get()) != 0)
                ::_exit(5);
            ::_exit(0);
        }
        ::close(go[0]);
        ::close(done[1]);
        char b = 0;
        expect(::read(done[0], &b, 1) == 1, "the child opened the file");
        expect_rc(::unlink(f.c_str()), 0, "unlink shared");
        expect(::write(go[1], "g", 1) == 1, "tell the child");
        int status = 0;
        expect(::waitpid(pid, &status, 0) == pid, "waitpid");
        ::close(go[1]);
        ::close(done[0]);
        expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the second process read and wrote the unlinked file (exit " +
                   std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
        std::string want = first;
        const std::string second = pattern(5000, 5);
        want.resize(30000 + second.size());
        want.replace(30000, second.size(), second);
        expect(pread_all(keep.get(), want.size(), "shared") == want,
               "the first process sees the second's write byte-exact");
    }

    // A shared mapping of an unlinked file: stores through it reach the
    // file, and writes to the file show in the mapping.
    {
        const std::string f = c.p("mapped");
        constexpr std::size_t len = 16384;
        UniqueFd fd(::open(f.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
        expect_rc(fd.valid() ? 0 : -1, 0, "create mapped");
        expect_rc(::ftruncate(fd.get(), len), 0, "ftruncate mapped");
        void *addr = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
        expect(addr != MAP_FAILED, "mmap MAP_SHARED");
        auto *bytes = static_cast<char *>(addr);
        expect_rc(::unlink(f.c_str()), 0, "unlink mapped");
        const std::string stored = pattern(len, 6);
        std::memcpy(bytes, stored.data(), len);
        const int ms = ::msync(addr, len, MS_SYNC);
        const int ms_errno = errno;
        const std::string got = pread_all(fd.get(), len, "mapped");
        const std::string over = pattern(100, 7);
        const bool wrote =
            ::pwrite(fd.get(), over.data(), over.size(), 200) == static_cast<ssize_t>(over.size());
        const bool seen = wrote && std::memcmp(bytes + 200, over.data(), over.size()) == 0;
        ::munmap(addr, len);
        errno = ms_errno;
        expect_rc(ms, 0, "msync of the unlinked file's mapping");
        expect(got == stored, "stores through the mapping read back byte-exact");
        expect(seen, "a write to the unlinked file shows in its mapping");
        std::string want = stored;
        want.replace(200, over.size(), over);
        expect_rc(::fsync(fd.get()), 0, "fsync mapped");
        expect(pread_all(fd.get(), len, "mapped after munmap") == want,
               "the unlinked file after munmap");
    }

    // Rename over an open file: its descriptor keeps the old file.
    {
        const std::string g = c.p("g");
        const std::string h = c.p("h");
        std::string old_data = pattern(20000, 8);
        const std::string new_data = pattern(7000, 9);
        write_file(g, old_data);
        write_file(h, new_data);
        UniqueFd fd(::open(g.c_str(), O_RDWR | O_CLOEXEC));
        expect_rc(fd.valid() ? 0 : -1, 0, "open g");
        expect_rc(::rename(h.c_str(), g.c_str()), 0, "rename h over the open g");
        expect(read_file(g) == new_data, "g is the renamed file");
        const std::string patch = pattern(3000, 10);
        expect_pwrite(fd.get(), patch, 15000, "the replaced file");
        old_data.replace(15000, patch.size(), patch);
        expect_rc(::fsync(fd.get()), 0, "fsync of the replaced file");
        expect(pread_all(fd.get(), old_data.size(), "replaced") == old_data,
               "the replaced file read back byte-exact through its descriptor");
        expect(read_file(g) == new_data, "g unchanged by writes to the replaced file");
    }
}

// ---- descriptors --------------------------------------------------------

// Runs fn in a child as uid and gid `id` with the supplementary `groups`;
// a Failure or Skip it throws is rethrown here with its text.  Between the
// child's first and second call of its `sync` argument the parent runs
// `between` (for a change by another user while the child holds a file).
using Sync = std::function<void()>;
void run_as(uid_t id, const std::vector<gid_t> &groups, const std::function<void(const Sync &)> &fn,
            const std::function<void()> &between = {})
{
    int up[2];   // child -> parent: the outcome, or 's' for sync
    int down[2]; // parent -> child: go on
    expect_rc(::pipe2(up, O_CLOEXEC), 0, "pipe");
    expect_rc(::pipe2(down, O_CLOEXEC), 0, "pipe");
    UniqueFd up_r(up[0]);
    UniqueFd up_w(up[1]);
    UniqueFd down_r(down[0]);
    UniqueFd down_w(down[1]);
    std::fflush(stdout);
    const pid_t pid = ::fork();
    expect_rc(pid, 0, "fork");
    if (pid == 0) {
        std::string out = "ok";
        if (::setgroups(groups.size(), groups.data()) != 0 || ::setresgid(id, id, id) != 0 ||
            ::setresuid(id, id, id) != 0) {
            out = "Fcannot become uid " + std::to_string(id);
        } else {
            try {
                fn([&] {
                    char b = 's';
                    if (::write(up_w.get(), &b, 1) != 1)
                        ::_exit(3);
                    await_byte(down_r.get());
                });
            } catch (const Skip &s) {
                out = std::string("S") + s.what();
            } catch (const Failure &f) {
                out = std::string("F") + f.what();
            }
        }
        const ssize_t n = ::write(up_w.get(), out.data(), out.size());
        ::_exit(n == static_cast<ssize_t>(out.size()) ? 0 : 3);
    }
    up_w = UniqueFd();
    down_r = UniqueFd();
    std::string got;
    char buf[512];
    for (;;) {
        const ssize_t n = ::read(up_r.get(), buf, sizeof(buf));
        if (n <= 0)
            break;
        got.append(buf, static_cast<std::size_t>(n));
        if (got == "s") {
            got.clear();
            if (between)
                between();
            const char b = 'g';
            expect(::write(down_w.get(), &b, 1) == 1, "wake the child");
        }
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (got.starts_with("S"))
        throw Skip(got.substr(1));
    if (got.starts_with("F"))
        throw Failure("as uid " + std::to_string(id) + ": " + got.substr(1));
    expect(got == "ok" && WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the child as uid " + std::to_string(id) + " died (" + got + ")");
}

// write(2) of all of `data`, then fsync and close, each checked.
void write_sync_close(UniqueFd fd, const std::string &data, const std::string &what)
{
    expect(::write(fd.get(), data.data(), data.size()) == static_cast<ssize_t>(data.size()),
           what + ": write " + errno_name(errno));
    expect_rc(::fsync(fd.get()), 0, what + ": fsync");
    expect_rc(::close(fd.release()), 0, what + ": close");
}

// What one user may do through descriptors of files it owns.
void descriptors_owner(const std::string &dir)
{
    // open(O_CREAT, 0) gives a writable descriptor to a file nobody may
    // open for writing again: ftruncate, writes and fsync go by the open.
    const std::string f = dir + "/zero";
    UniqueFd fd(::open(f.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0));
    expect_rc(fd.valid() ? 0 : -1, 0, "open(O_CREAT|O_RDWR, 0)");
    expect_rc(::ftruncate(fd.get(), 0), 0, "ftruncate to 0 of a mode 0 file opened O_RDWR");
    expect_rc(::ftruncate(fd.get(), 8192), 0, "ftruncate up of a mode 0 file opened O_RDWR");
    expect_rc(::futimens(fd.get(), nullptr), 0, "futimens(fd, NULL) by the owner of a mode 0 file");
    struct stat st {};
    expect_rc(::fstat(fd.get(), &st), 0, "fstat");
    expect(st.st_size == 8192 && (st.st_mode & 07777) == 0, "mode 0, 8192 bytes after ftruncate");
    write_sync_close(std::move(fd), "abc", "write to a mode 0 file opened O_RDWR");
    expect(stat_of(f).st_size == 8192, "size after the write");

    // fchmod(fd, 0) by the owner, then write, fsync and close through it.
    const std::string g = dir + "/fchmod";
    fd = UniqueFd(::open(g.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644));
    expect_rc(fd.valid() ? 0 : -1, 0, "create fchmod");
    expect_rc(::fchmod(fd.get(), 0), 0, "fchmod(fd, 0) by the owner");
    write_sync_close(std::move(fd), "0123456789", "after fchmod(fd, 0)");
    expect(stat_of(g).st_size == 10 && (stat_of(g).st_mode & 07777) == 0,
           "10 bytes and mode 0 after fchmod, write, fsync");

    // chmod by path while open for writing.
    const std::string h = dir + "/chmod";
    fd = UniqueFd(::open(h.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644));
    expect_rc(fd.valid() ? 0 : -1, 0, "create chmod");
    expect(::write(fd.get(), "xy", 2) == 2, "write before the chmod");
    expect_rc(::chmod(h.c_str(), 0444), 0, "chmod 0444 by path");
    UniqueFd again(::open(h.c_str(), O_WRONLY | O_CLOEXEC));
    if (::geteuid() != 0)
        expect_rc(again.valid() ? 0 : -1, EACCES, "a new open for writing after chmod 0444");
    expect_rc(::ftruncate(fd.get(), 1), 0, "ftruncate after chmod 0444");
    write_sync_close(std::move(fd), "z", "after chmod 0444 by path");
    expect(read_file(h) == std::string("x\0z", 3), "the bytes written after the chmod");

    // What an open does not allow.
    UniqueFd ro(::open(h.c_str(), O_RDONLY | O_CLOEXEC));
    expect_rc(ro.valid() ? 0 : -1, 0, "open O_RDONLY");
    expect_rc(::ftruncate(ro.get(), 0), EINVAL, "ftruncate through an O_RDONLY descriptor");
    expect(stat_of(h).st_size == 3, "the failed ftruncate changed nothing");
}

// What another user's open allows on a file it does not own.
void descriptors_other(const std::string &file)
{
    UniqueFd fd(::open(file.c_str(), O_RDWR | O_CLOEXEC));
    expect_rc(fd.valid() ? 0 : -1, 0, "open another user's 0666 file O_RDWR");
    expect_rc(::ftruncate(fd.get(), 5), 0, "ftruncate by a writer who is not the owner");
    expect_rc(::futimens(fd.get(), nullptr), 0, "futimens(fd, NULL) by a writer, not the owner");
    const timespec set[2] = {{5, 0}, {5, 0}};
    expect_rc(::futimens(fd.get(), set), EPERM, "futimens with explicit times by a non-owner");
    expect_rc(::fchmod(fd.get(), 0600), EPERM, "fchmod by a non-owner");
    expect_rc(::fchown(fd.get(), static_cast<uid_t>(-1), ::getegid()), EPERM,
              "fchown to the caller's group by a non-owner");
    expect(stat_of(file).st_size == 5 && (stat_of(file).st_mode & 07777) == 0666,
           "5 bytes, mode 0666 kept");
}

// Descriptor semantics (issue 24): what a process may do through an open
// file is decided by how it was opened, as on local file systems.  Runs as
// uid 65534: as root, in children (with another user's files and a
// supplementary group); otherwise as the caller, with its own files only.
void descriptors(const Context &c)
{
    if (!is_root()) {
        descriptors_owner(c.dir);
        return;
    }
    expect_rc(::chmod(c.dir.c_str(), 0777), 0, "chmod 0777 the case directory");
    const std::string dir = c.dir;
    run_as(nobody, {}, [&](const Sync &) { descriptors_owner(dir); });

    // Another user's file, writable by all; then made read-only while the
    // writer holds it open.
    const std::string f = c.p("rootfile");
    write_file(f, "0123456789", 0666);
    expect_rc(::chmod(f.c_str(), 0666), 0, "chmod 0666");
    run_as(nobody, {}, [&](const Sync &) { descriptors_other(f); });
    expect_rc(::chmod(f.c_str(), 0666), 0, "chmod 0666");
    run_as(
        nobody, {},
        [&](const Sync &sync) {
            UniqueFd fd(::open(f.c_str(), O_RDWR | O_CLOEXEC));
            expect_rc(fd.valid() ? 0 : -1, 0, "open O_RDWR");
            sync(); // root: chmod 0644
            expect_rc(::ftruncate(fd.get(), 2), 0, "ftruncate by a writer after chmod 0644");
            // times to now need write access by the mode when not the owner
            expect_rc(::futimens(fd.get(), nullptr), EACCES,
                      "futimens(fd, NULL) by a non-owner after chmod 0644");
            expect(::lseek(fd.get(), 0, SEEK_END) == 2, "seek to the end");
            write_sync_close(std::move(fd), "w", "a non-owner's write after chmod 0644");
        },
        [&] { expect_rc(::chmod(f.c_str(), 0644), 0, "chmod 0644 while open"); });
    expect(read_file(f) == "01w", "the non-owner's bytes after the chmod");

    // fchown to a group the owner is in, not to one it is not in.
    constexpr gid_t group = 4242;
    run_as(nobody, {nobody, group}, [&](const Sync &) {
        const std::string g = dir + "/grouped";
        UniqueFd fd(::open(g.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0640));
        expect_rc(fd.valid() ? 0 : -1, 0, "create grouped");
        expect_rc(::fchown(fd.get(), static_cast<uid_t>(-1), group), 0,
                  "fchown to a supplementary group of the owner");
        expect(stat_of(g).st_gid == group, "the group changed");
        expect_rc(::fchown(fd.get(), static_cast<uid_t>(-1), group + 1), EPERM,
                  "fchown to a group the owner is not in");
        expect_rc(::fchown(fd.get(), 0, static_cast<gid_t>(-1)), EPERM, "fchown to another user");
        write_sync_close(std::move(fd), "g", "write after fchown");
    });
}

const std::vector<std::pair<std::string, Case>> &cases()
{
    static const std::vector<std::pair<std::string, Case>> all = {
        {"open_flags", open_flags},
        {"permissions", permissions},
        {"setid_clearing", setid_clearing},
        {"renames", renames},
        {"links_and_removal", links_and_removal},
        {"symlinks", symlinks},
        {"special_files", special_files},
        {"truncation", truncation},
        {"timestamps", timestamps},
        {"directory_listing", directory_listing},
        {"limits_and_data", limits_and_data},
        {"unlink_open", unlink_open},
        {"descriptors", descriptors},
    };
    return all;
}

int usage()
{
    std::fprintf(stderr, "usage: pvfs-posix-suite DIR [--case NAME] [--list] [--entries N]\n");
    return 2;
}

} // namespace

int main(int argc, char **argv)
{
    Context base;
    std::string only;
    const std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--list") {
            for (const auto &[name, fn] : cases())
                std::printf("%s\n", name.c_str());
            return 0;
        }
        if (args[i] == "--case" && i + 1 < args.size()) {
            only = args[++i];
        } else if (args[i] == "--entries" && i + 1 < args.size()) {
            base.entries = static_cast<unsigned>(std::strtoul(args[++i].c_str(), nullptr, 10));
        } else if (!args[i].starts_with("-") && base.dir.empty()) {
            base.dir = args[i];
        } else {
            return usage();
        }
    }
    if (base.dir.empty() || base.entries == 0)
        return usage();
    ::umask(022);
    int failed = 0;
    int ran = 0;
    for (const auto &[name, fn] : cases()) {
        if (!only.empty() && name != only)
            continue;
        ++ran;
        Context c = base;
        c.dir = base.dir + "/" + name + "." + std::to_string(::getpid());
        try {
            expect_rc(::mkdir(c.dir.c_str(), 0755), 0, "mkdir " + c.dir);
            fn(c);
            std::printf("ok %s\n", name.c_str());
        } catch (const Skip &s) {
            std::printf("skip %s: %s\n", name.c_str(), s.what());
        } catch (const Failure &f) {
            std::printf("FAIL %s: %s\n", name.c_str(), f.what());
            ++failed;
        }
        std::fflush(stdout);
    }
    if (ran == 0) {
        std::fprintf(stderr, "pvfs-posix-suite: no case named %s\n", only.c_str());
        return 2;
    }
    return failed == 0 ? 0 : 1;
}
