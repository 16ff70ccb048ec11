// pvfs-cp: copies files between the local file system and pvfs (or within
// pvfs).  pvfs paths are written pvfs:/path.
//   pvfs-cp -c cluster.toml big.dat pvfs:/data/big.dat
//   pvfs-cp -t pvfs:/data/big.dat /tmp/copy
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <future>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "common.hpp"
#include "pvfs/config.hpp"
#include "pvfs/unique_fd.hpp"

using namespace pvfs;

namespace {

using Clock = std::chrono::steady_clock;

// Where bytes come from or go to.
struct End {
    bool pvfs = false;
    std::string path;
    UniqueFd fd;       // local
    Handle handle = 0; // pvfs
    std::uint64_t size = 0;
    std::uint32_t mode = 0644;
};

class Progress {
public:
    Progress(bool on, std::uint64_t total) : on_(on), total_(total) {}
    void update(std::uint64_t done, bool last = false)
    {
        if (!on_)
            return;
        const auto now = Clock::now();
        if (!last && now - shown_ < std::chrono::milliseconds(200))
            return;
        shown_ = now;
        const double secs = std::chrono::duration<double>(now - start_).count();
        const double rate = secs > 0 ? static_cast<double>(done) / secs / 1e6 : 0.0;
        const unsigned pct = total_ == 0 ? 100U : static_cast<unsigned>(done * 100 / total_);
        fmt::print(stderr, "\r{:3}% {:>12} / {:<12} {:8.1f} MB/s{}", pct, tools::human_bytes(done),
                   tools::human_bytes(total_), rate, last ? "\n" : "");
    }

private:
    bool on_;
    std::uint64_t total_;
    Clock::time_point start_ = Clock::now();
    Clock::time_point shown_{};
};

int open_source(client::Client *c, End &e)
{
    if (e.pvfs) {
        Attr a;
        if (const int rc = c->resolve(e.path, a); rc != 0)
            return rc;
        if (a.type != ObjectType::regular)
            return a.type == ObjectType::directory ? -EISDIR : -EINVAL;
        e.handle = a.handle;
        e.size = a.size;
        e.mode = a.mode & 0777U;
        return 0;
    }
    e.fd.reset(::open(e.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!e.fd.valid())
        return -errno;
    struct stat st {};
    if (::fstat(e.fd.get(), &st) != 0)
        return -errno;
    if (S_ISDIR(st.st_mode))
        return -EISDIR;
    e.size = static_cast<std::uint64_t>(st.st_size);
    e.mode = st.st_mode & 0777U;
    return 0;
}

std::string base_name(const std::string &p)
{
    const std::size_t s = p.find_last_of('/');
    return s == std::string::npos ? p : p.substr(s + 1);
}

int open_destination(client::Client *c, End &e, const End &src)
{
    if (e.pvfs) {
        Attr existing;
        if (c->resolve(e.path, existing) == 0 && existing.type == ObjectType::directory)
            e.path += "/" + base_name(src.path);
        Attr parent;
        std::string name;
        if (const int rc = tools::resolve_parent(*c, e.path, parent, name); rc != 0)
            return rc;
        Attr a;
        if (const int rc = c->create(parent.handle, name, src.mode, false, Layout{}, a); rc != 0)
            return rc;
        e.handle = a.handle;
        if (a.size != 0) {
            client::SetAttr t;
            t.truncate = true;
            t.size = 0;
            if (const int rc = c->setattr(a.handle, t, a); rc != 0)
                return rc;
        }
        return 0;
    }
    struct stat st {};
    if (::stat(e.path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        e.path += "/" + base_name(src.path);
    e.fd.reset(::open(e.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, src.mode));
    return e.fd.valid() ? 0 : -errno;
}

// Reads the source from `offset` into `buf`: bytes read, 0 at the end, or a
// negative errno.
std::int64_t read_at(client::Client *c, const End &e, std::span<std::byte> buf,
                     std::uint64_t offset)
{
    if (e.pvfs)
        return c->read(e.handle, offset, buf);
    const ssize_t got = ::pread(e.fd.get(), buf.data(), buf.size(), static_cast<off_t>(offset));
    return got < 0 ? -errno : got;
}

// Writes all of `buf` at `offset`: 0 or a negative errno.
std::int64_t write_at(client::Client *c, const End &e, std::span<const std::byte> buf,
                      std::uint64_t offset)
{
    if (e.pvfs) {
        const std::int64_t put = c->write(e.handle, offset, buf);
        return put < 0 ? put : (put == static_cast<std::int64_t>(buf.size()) ? 0 : -EIO);
    }
    std::size_t off = 0;
    while (off < buf.size()) {
        const ssize_t w = ::pwrite(e.fd.get(), buf.data() + off, buf.size() - off,
                                   static_cast<off_t>(offset + off));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        off += static_cast<std::size_t>(w);
    }
    return 0;
}

// The copy loop.  With one end local, the local file's I/O runs on a
// second thread with a second buffer, overlapping the pvfs I/O of the
// other (the client library is used from the main thread only).
struct Copy {
    client::Client *client = nullptr;
    const End &src;
    const End &dst;
    std::size_t buffer_size = 0;
    bool failed_reading = false;

    template <typename OnProgress> std::int64_t run(std::uint64_t &done, OnProgress &&on_progress)
    {
        std::array<std::vector<std::byte>, 2> bufs{std::vector<std::byte>(buffer_size),
                                                   std::vector<std::byte>(buffer_size)};
        std::size_t cur = 0;
        if (!src.pvfs) {
            // Local -> pvfs: the next local read runs while pvfs takes this buffer.
            auto next = std::async(std::launch::async, [&, b = std::span(bufs[cur])] {
                return read_at(client, src, b, 0);
            });
            for (;;) {
                const std::int64_t got = next.get();
                if (got <= 0) {
                    failed_reading = got < 0;
                    return got;
                }
                const auto n = static_cast<std::size_t>(got);
                const std::uint64_t at = done + n;
                next = std::async(std::launch::async, [&, b = std::span(bufs[cur ^ 1U]), at] {
                    return read_at(client, src, b, at);
                });
                if (const std::int64_t rc =
                        write_at(client, dst, std::span(bufs[cur].data(), n), done);
                    rc < 0)
                    return rc; // `next` finishes before it is destroyed
                done += n;
                on_progress(done);
                cur ^= 1U;
            }
        }
        if (!dst.pvfs) {
            // pvfs -> local: the local write of one buffer runs while pvfs fills the other.
            std::future<std::int64_t> pending;
            for (;;) {
                const std::int64_t got = read_at(client, src, bufs[cur], done);
                if (pending.valid()) {
                    if (const std::int64_t rc = pending.get(); rc < 0)
                        return rc;
                }
                if (got <= 0) {
                    failed_reading = got < 0;
                    return got;
                }
                const auto n = static_cast<std::size_t>(got);
                pending = std::async(std::launch::async,
                                     [&, b = std::span(bufs[cur].data(), n), at = done] {
                                         return write_at(client, dst, b, at);
                                     });
                done += n;
                on_progress(done);
                cur ^= 1U;
            }
        }
        for (;;) {
            const std::int64_t got = read_at(client, src, bufs[0], done);
            if (got <= 0) {
                failed_reading = got < 0;
                return got;
            }
            const auto n = static_cast<std::size_t>(got);
            if (const std::int64_t rc = write_at(client, dst, std::span(bufs[0].data(), n), done);
                rc < 0)
                return rc;
            done += n;
            on_progress(done);
        }
    }
};

} // namespace

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-cp: copy a file to, from or within pvfs (pvfs paths as pvfs:/path)"};
    tools::Target target;
    bool timing = false;
    bool quiet = false;
    std::string buffer_text = "16MiB";
    std::string src_arg;
    std::string dst_arg;
    tools::add_target_options(app, target);
    app.flag("-t,--timing", timing, "print the time taken and the rate");
    app.flag("-q,--quiet", quiet, "no progress bar");
    app.option("-b,--buffer", buffer_text, "bytes moved per step (default 16MiB)");
    app.option("source", src_arg, "file to copy (local path or pvfs:/path)").required();
    app.option("destination", dst_arg, "where to (local path or pvfs:/path)").required();
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    const config::Quantity buf_q = config::parse_size(buffer_text);
    if (!buf_q.ok() || buf_q.value == 0 || buf_q.value > (std::uint64_t{1} << 30U)) {
        fmt::print(stderr, "pvfs-cp: buffer '{}': {}\n", buffer_text,
                   buf_q.ok() ? "must be 1 B .. 1 GiB" : buf_q.error);
        return tools::exit_usage;
    }
    End src;
    End dst;
    src.pvfs = tools::is_pvfs_path(src_arg);
    dst.pvfs = tools::is_pvfs_path(dst_arg);
    src.path = src.pvfs ? tools::pvfs_path(src_arg) : src_arg;
    dst.path = dst.pvfs ? tools::pvfs_path(dst_arg) : dst_arg;
    if (!src.pvfs && !dst.pvfs) {
        fmt::print(stderr, "pvfs-cp: neither path is in pvfs (write pvfs:/path)\n");
        return tools::exit_usage;
    }
    const auto client = tools::connect_or_exit("pvfs-cp", target);
    if (const int rc = open_source(client.get(), src); rc != 0) {
        tools::report("pvfs-cp", src_arg, rc);
        return tools::exit_failure;
    }
    if (const int rc = open_destination(client.get(), dst, src); rc != 0) {
        tools::report("pvfs-cp", dst_arg, rc);
        return tools::exit_failure;
    }
    Progress progress(!quiet && ::isatty(STDERR_FILENO) != 0, src.size);
    const auto start = Clock::now();
    std::uint64_t done = 0;
    Copy copy{client.get(), src, dst, static_cast<std::size_t>(buf_q.value)};
    const std::int64_t rc = copy.run(done, [&](std::uint64_t n) { progress.update(n); });
    if (rc < 0) {
        tools::report("pvfs-cp",
                      (copy.failed_reading ? "reading " : "writing ") +
                          (copy.failed_reading ? src_arg : dst_arg),
                      static_cast<int>(rc));
        return tools::exit_failure;
    }
    progress.update(done, true);
    // Durable before success is reported.  EINVAL from a local fsync means
    // a special file that has nothing to make durable (/dev/null, a pipe).
    int synced = dst.pvfs ? client->fsync(dst.handle) : (::fsync(dst.fd.get()) == 0 ? 0 : -errno);
    if (!dst.pvfs && synced == -EINVAL) {
        synced = 0;
    }
    if (synced != 0) {
        tools::report("pvfs-cp", "syncing " + dst_arg, synced);
        return tools::exit_failure;
    }
    if (!dst.pvfs && ::close(dst.fd.release()) != 0) {
        tools::report("pvfs-cp", "closing " + dst_arg, -errno);
        return tools::exit_failure;
    }
    if (timing) {
        const double secs = std::chrono::duration<double>(Clock::now() - start).count();
        fmt::print("copied {} bytes in {:.3f} s ({:.1f} MB/s)\n", done, secs,
                   secs > 0 ? static_cast<double>(done) / secs / 1e6 : 0.0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-cp", [&] { return run(argc, argv); });
}
