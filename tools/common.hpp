// What the pvfs command-line tools share: how they find the file system
// (-c CONFIG or URL, or $PVFS_CONFIG), how they name pvfs paths, how they
// report errors (exit 1 on failure, 2 on bad usage) and print attributes.
#ifndef PVFS_TOOLS_COMMON_HPP
#define PVFS_TOOLS_COMMON_HPP

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "pvfs/cli.hpp"
#include "pvfs/client.hpp"
#include "pvfs/types.hpp"

namespace pvfs::tools {

inline constexpr int exit_failure = 1;
inline constexpr int exit_usage = cli::exit_usage;

// Adds -c/--config (a config file or tcp://host:port/fs) and --key.
struct Target {
    std::string target;
    std::string key_file;
};
void add_target_options(cli::Parser &args, Target &t);

// Runs a tool's body; an exception (out of memory, a bug) ends it with a
// message and status 1 instead of std::terminate.
template <typename Body> int guarded(const char *prog, Body &&body) noexcept
{
    try {
        return body();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "%s: %s\n", prog, e.what());
    } catch (...) {
        std::fprintf(stderr, "%s: unknown error\n", prog);
    }
    return exit_failure;
}

// Connects, or prints "<prog>: <why>" and exits with status 1.
std::unique_ptr<client::Client> connect_or_exit(std::string_view prog, const Target &t);

// Prints "<prog>: <what>: <strerror>" to stderr.
void report(std::string_view prog, std::string_view what, std::int64_t negative_errno);

// A path inside pvfs: "/a/b", or "pvfs:/a/b" (the prefix that pvfs-cp
// needs to tell pvfs from local paths is accepted everywhere).
[[nodiscard]] bool is_pvfs_path(std::string_view path) noexcept;
[[nodiscard]] std::string pvfs_path(std::string_view path);

// Splits "/a/b/c" into its parent directory's attributes and "c".
int resolve_parent(client::Client &c, std::string_view path, Attr &parent, std::string &name);

[[nodiscard]] std::string type_name(ObjectType t);
[[nodiscard]] char type_char(ObjectType t);
// "drwxr-xr-x"
[[nodiscard]] std::string mode_string(const Attr &a);
// "1.5 MiB"
[[nodiscard]] std::string human_bytes(std::uint64_t bytes);
[[nodiscard]] std::string time_string(const Timespec &t);
[[nodiscard]] cli::Json attr_json(const Attr &a);
[[nodiscard]] cli::Json layout_json(const Layout &l);

// Whole transfers over a pipe between a benchmark's parent and its client
// processes (EINTR retried): false on error or end of file.
[[nodiscard]] bool read_all(int fd, void *data, std::size_t n);
[[nodiscard]] bool write_all(int fd, const void *data, std::size_t n);

} // namespace pvfs::tools

#endif // PVFS_TOOLS_COMMON_HPP
