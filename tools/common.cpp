// What the pvfs tools share (common.hpp).
#include "common.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>

#include <fmt/format.h>

namespace pvfs::tools {

void add_target_options(cli::Parser &args, Target &t)
{
    const char *env = std::getenv("PVFS_CONFIG"); // NOLINT(concurrency-mt-unsafe)
    if (env != nullptr)
        t.target = env;
    args.option("-c,--config", t.target,
                "the file system: a cluster config file or tcp://host:port/fsname "
                "(default: $PVFS_CONFIG)");
    args.option("--key", t.key_file,
                "the key file: a client key or the cluster key (default: the config's, or "
                "$PVFS_KEY_FILE)");
}

std::unique_ptr<client::Client> connect_or_exit(std::string_view prog, const Target &t)
{
    if (t.target.empty()) {
        std::cerr << prog
                  << ": which file system? give -c CONFIG or -c tcp://host:port/fs, "
                     "or set PVFS_CONFIG\n";
        std::exit(exit_usage); // NOLINT(concurrency-mt-unsafe)
    }
    client::Options o;
    o.target = t.target;
    o.key_file = t.key_file;
    std::string error;
    std::unique_ptr<client::Client> c = client::Client::connect(o, error);
    if (!c) {
        std::cerr << prog << ": " << error << "\n";
        std::exit(exit_failure); // NOLINT(concurrency-mt-unsafe)
    }
    return c;
}

void report(std::string_view prog, std::string_view what, std::int64_t negative_errno)
{
    std::cerr << prog << ": " << what << ": " << client::error_text(negative_errno) << "\n";
}

bool is_pvfs_path(std::string_view path) noexcept
{
    return path.starts_with("pvfs:");
}

std::string pvfs_path(std::string_view path)
{
    if (path.starts_with("pvfs:"))
        path.remove_prefix(5);
    std::string p(path);
    if (p.empty() || p.front() != '/')
        p.insert(p.begin(), '/');
    return p;
}

int resolve_parent(client::Client &c, std::string_view path, Attr &parent, std::string &name)
{
    std::string p = pvfs_path(path);
    while (p.size() > 1 && p.back() == '/')
        p.pop_back();
    const std::size_t slash = p.rfind('/');
    name = p.substr(slash + 1);
    if (name.empty() || name == "." || name == "..")
        return -EINVAL;
    const std::string dir = slash == 0 ? "/" : p.substr(0, slash);
    const int rc = c.resolve(dir, parent);
    if (rc != 0)
        return rc;
    return parent.type == ObjectType::directory ? 0 : -ENOTDIR;
}

std::string type_name(ObjectType t)
{
    switch (t) {
    case ObjectType::regular:
        return "file";
    case ObjectType::directory:
        return "directory";
    case ObjectType::symlink:
        return "symlink";
    case ObjectType::fifo:
        return "fifo";
    case ObjectType::socket:
        return "socket";
    case ObjectType::char_device:
        return "char device";
    case ObjectType::block_device:
        return "block device";
    }
    return "unknown";
}

char type_char(ObjectType t)
{
    switch (t) {
    case ObjectType::regular:
        return '-';
    case ObjectType::directory:
        return 'd';
    case ObjectType::symlink:
        return 'l';
    case ObjectType::fifo:
        return 'p';
    case ObjectType::socket:
        return 's';
    case ObjectType::char_device:
        return 'c';
    case ObjectType::block_device:
        return 'b';
    }
    return '?';
}

std::string mode_string(const Attr &a)
{
    std::string s(10, '-');
    s[0] = type_char(a.type);
    const std::uint32_t m = a.mode;
    const std::array<char, 3> rwx{'r', 'w', 'x'};
    for (unsigned i = 0; i < 9; ++i) {
        if ((m & (0400U >> i)) != 0)
            s[1 + i] = rwx.at(i % 3);
    }
    if ((m & 04000U) != 0)
        s[3] = (m & 0100U) != 0 ? 's' : 'S';
    if ((m & 02000U) != 0)
        s[6] = (m & 0010U) != 0 ? 's' : 'S';
    if ((m & 01000U) != 0)
        s[9] = (m & 0001U) != 0 ? 't' : 'T';
    return s;
}

std::string human_bytes(std::uint64_t bytes)
{
    static constexpr std::array<const char *, 7> units{"B",   "KiB", "MiB", "GiB",
                                                       "TiB", "PiB", "EiB"};
    auto v = static_cast<double>(bytes);
    std::size_t u = 0;
    while (v >= 1024.0 && u + 1 < units.size()) {
        v /= 1024.0;
        ++u;
    }
    return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units.at(u));
}

std::string time_string(const Timespec &t)
{
    const auto secs = static_cast<std::time_t>(t.sec);
    std::tm tm{};
    ::localtime_r(&secs, &tm);
    std::array<char, 64> buf{};
    const std::size_t n = std::strftime(buf.data(), buf.size(), "%Y-%m-%d %H:%M:%S", &tm);
    return fmt::format("{}.{:09}", std::string_view(buf.data(), n), t.nsec);
}

cli::Json layout_json(const Layout &l)
{
    return cli::Json::object({{"stripe_size", l.stripe_size},
                              {"stripe_count", l.stripe_count},
                              {"first_server", l.first_server}});
}

namespace {

cli::Json time_json(const Timespec &t)
{
    return cli::Json::object({{"sec", t.sec}, {"nsec", t.nsec}});
}

} // namespace

cli::Json attr_json(const Attr &a)
{
    cli::Json j = cli::Json::object({{"handle", fmt::format("{:016x}", a.handle)},
                                     {"type", type_name(a.type)},
                                     {"mode", fmt::format("{:04o}", a.mode)},
                                     {"uid", a.uid},
                                     {"gid", a.gid},
                                     {"nlink", a.nlink},
                                     {"size", a.size},
                                     {"atime", time_json(a.atime)},
                                     {"mtime", time_json(a.mtime)},
                                     {"ctime", time_json(a.ctime)}});
    if (a.type == ObjectType::regular || a.type == ObjectType::directory)
        j.set("layout", layout_json(a.layout));
    if (a.type == ObjectType::char_device || a.type == ObjectType::block_device)
        j.set("rdev", a.rdev);
    return j;
}

bool read_all(int fd, void *data, std::size_t n)
{
    auto *p = static_cast<char *>(data);
    while (n > 0) {
        const ssize_t got = ::read(fd, p, n);
        if (got <= 0) {
            if (got < 0 && errno == EINTR)
                continue;
            return false;
        }
        p += got;
        n -= static_cast<std::size_t>(got);
    }
    return true;
}

bool write_all(int fd, const void *data, std::size_t n)
{
    const auto *p = static_cast<const char *>(data);
    while (n > 0) {
        const ssize_t put = ::write(fd, p, n);
        if (put < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        p += put;
        n -= static_cast<std::size_t>(put);
    }
    return true;
}

} // namespace pvfs::tools
