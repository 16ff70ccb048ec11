// Key files: 32 random bytes as hex (a client key's after its name), mode
// 0600 from birth; and the atomic replacement of a private file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>
#include <sodium.h>

#include "pvfs/client_keys.hpp"
#include "pvfs/config.hpp"
#include "pvfs/unique_fd.hpp"

namespace pvfs::config {

namespace {

constexpr std::size_t key_bytes = 32;
constexpr mode_t key_mode = 0600;

std::string errno_text(int error)
{
    return std::error_code(error, std::generic_category()).message();
}

// The key in hex and a newline; wiped when it goes out of scope.
class KeyText {
public:
    KeyText()
    {
        std::array<unsigned char, key_bytes> key{};
        randombytes_buf(key.data(), key.size());
        sodium_bin2hex(text_.data(), text_.size(), key.data(), key.size());
        sodium_memzero(key.data(), key.size());
        text_[2 * key_bytes] = '\n';
    }
    KeyText(const KeyText &) = delete;
    KeyText &operator=(const KeyText &) = delete;
    KeyText(KeyText &&) = delete;
    KeyText &operator=(KeyText &&) = delete;
    ~KeyText() { sodium_memzero(text_.data(), text_.size()); }

    // 64 hex digits and '\n' (the terminating NUL sodium_bin2hex wrote is
    // overwritten by the newline).
    [[nodiscard]] std::string_view line() const { return {text_.data(), 2 * key_bytes + 1}; }

private:
    std::array<char, 2 * key_bytes + 1> text_{};
};

// Writes all of `data`, sets the exact mode (the umask may have taken bits
// away) and makes it durable.
std::string fill(int fd, std::string_view data)
{
    while (!data.empty()) {
        const ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return fmt::format("cannot write: {}", errno_text(errno));
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    if (::fchmod(fd, key_mode) != 0) {
        return fmt::format("cannot set mode 0600: {}", errno_text(errno));
    }
    if (::fsync(fd) != 0) {
        return fmt::format("cannot fsync: {}", errno_text(errno));
    }
    return {};
}

std::string close_checked(UniqueFd &fd)
{
    if (::close(fd.release()) != 0) {
        return fmt::format("cannot close: {}", errno_text(errno));
    }
    return {};
}

// A new entry in a directory survives a crash only once the directory is
// synced.
void sync_directory(const std::filesystem::path &file)
{
    std::filesystem::path dir = file.parent_path();
    if (dir.empty()) {
        dir = ".";
    }
    const UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.valid()) {
        (void)::fsync(fd.get());
    }
}

// Writes `text` to a new temporary file beside `path` and renames it over
// `path`: a reader sees the old file or the new one, whole.
std::string replace_with(const std::filesystem::path &target, std::string_view text)
{
    std::string temp =
        (target.parent_path() / ("." + target.filename().string() + ".XXXXXX")).string();
    UniqueFd fd(::mkostemp(temp.data(), O_CLOEXEC)); // mkostemp creates with mode 0600
    if (!fd.valid()) {
        return fmt::format("cannot create a temporary file beside it: {}", errno_text(errno));
    }
    std::string error;
    // The servers read the file as their own user (pvfs-server@.service):
    // a replacement made by root keeps the old file's owner, or it would
    // lock them out of it.
    struct stat old {};
    if (::stat(target.c_str(), &old) == 0 &&
        (old.st_uid != ::geteuid() || old.st_gid != ::getegid()) &&
        ::fchown(fd.get(), old.st_uid, old.st_gid) != 0) {
        error = fmt::format("cannot give the new file the old one's owner {}:{}: {}", old.st_uid,
                            old.st_gid, errno_text(errno));
    }
    if (error.empty()) {
        error = fill(fd.get(), text);
    }
    if (error.empty()) {
        error = close_checked(fd);
    }
    if (error.empty() && ::rename(temp.c_str(), target.c_str()) != 0) {
        error = fmt::format("cannot rename {} over it: {}", temp, errno_text(errno));
    }
    if (!error.empty()) {
        (void)::unlink(temp.c_str());
        return error;
    }
    sync_directory(target);
    return {};
}

} // namespace

Status replace_private_file(const std::string &path, std::string_view text)
{
    if (std::string error = replace_with(path, text); !error.empty()) {
        return {fmt::format("{}: {}", path, error)};
    }
    return {};
}

Status generate_client_key_file(const std::string &path, std::string_view name,
                                std::string &key_hex, bool encrypt)
{
    if (sodium_init() < 0) {
        return {fmt::format("{}: libsodium cannot initialise its random source", path)};
    }
    const KeyText key;
    const std::string_view hex = key.line().substr(0, 2 * key_bytes);
    std::string text = fmt::format("{} {}{}\n", name, hex, encrypt ? " encrypt" : "");
    // O_EXCL: never follows a planted symlink, never clobbers a key.
    UniqueFd fd(
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, key_mode));
    std::string error;
    if (!fd.valid()) {
        const int open_errno = errno;
        error = open_errno == EEXIST ? "already exists; refusing to overwrite a key"
                                     : fmt::format("cannot create: {}", errno_text(open_errno));
        sodium_memzero(text.data(), text.size());
        return {fmt::format("{}: {}", path, error)};
    }
    error = fill(fd.get(), text);
    sodium_memzero(text.data(), text.size());
    if (error.empty()) {
        error = close_checked(fd);
    }
    if (!error.empty()) {
        (void)::unlink(path.c_str());
        return {fmt::format("{}: {}", path, error)};
    }
    sync_directory(path);
    key_hex.assign(hex);
    return {};
}

Status generate_key_file(const std::string &path, bool overwrite)
{
    if (sodium_init() < 0) {
        return {fmt::format("{}: libsodium cannot initialise its random source", path)};
    }
    const KeyText key;
    const std::filesystem::path target(path);
    if (!overwrite) {
        // O_EXCL: never follows a planted symlink, never clobbers a key.
        UniqueFd fd(
            ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, key_mode));
        if (!fd.valid()) {
            const int error = errno;
            if (error == EEXIST) {
                return {fmt::format("{}: already exists; refusing to overwrite a key", path)};
            }
            return {fmt::format("{}: cannot create: {}", path, errno_text(error))};
        }
        std::string error = fill(fd.get(), key.line());
        if (error.empty()) {
            error = close_checked(fd);
        }
        if (!error.empty()) {
            (void)::unlink(path.c_str());
            return {fmt::format("{}: {}", path, error)};
        }
        sync_directory(target);
        return {};
    }
    // Replace atomically: a reader sees the old key or the new one, whole.
    if (std::string error = replace_with(target, key.line()); !error.empty()) {
        return {fmt::format("{}: {}", path, error)};
    }
    return {};
}

} // namespace pvfs::config
