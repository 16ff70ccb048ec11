// The cluster key: loading, wiping, and the HMAC-SHA-256 over messages.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>
#include <sodium.h>

#include "pvfs/proto.hpp"
#include "pvfs/unique_fd.hpp"

namespace pvfs::proto {

namespace {

constexpr std::size_t hex_digits = 2 * key_size;

// sodium_init() is itself thread-safe and idempotent; the static makes
// every later call free.
void ensure_sodium()
{
    static const bool ready = sodium_init() >= 0;
    if (!ready) {
        throw std::runtime_error("libsodium cannot be initialised");
    }
}

// A file's contents, wiped when it goes out of scope (they hold a key).
class Secret {
public:
    Secret() = default;
    Secret(const Secret &) = delete;
    Secret &operator=(const Secret &) = delete;
    Secret(Secret &&) = delete;
    Secret &operator=(Secret &&) = delete;
    ~Secret() { sodium_memzero(bytes_.data(), bytes_.size()); }

    // More than a key file can hold, so an oversized file is detected.
    std::array<char, hex_digits + 8> bytes_{};
    std::size_t size = 0;
};

std::string errno_text(int error)
{
    return std::error_code(error, std::generic_category()).message();
}

bool parse_hex(std::string_view hex, std::span<unsigned char, key_size> out)
{
    if (hex.size() != hex_digits) {
        return false;
    }
    std::size_t written = 0;
    const char *end = nullptr;
    return sodium_hex2bin(out.data(), out.size(), hex.data(), hex.size(), nullptr, &written,
                          &end) == 0 &&
           written == key_size && end == hex.data() + hex.size();
}

} // namespace

Key::Key() noexcept = default;

Key::Key(Key &&other) noexcept : bytes_(other.bytes_)
{
    sodium_memzero(other.bytes_.data(), other.bytes_.size());
}

Key &Key::operator=(Key &&other) noexcept
{
    if (this != &other) {
        bytes_ = other.bytes_;
        sodium_memzero(other.bytes_.data(), other.bytes_.size());
    }
    return *this;
}

Key::~Key()
{
    sodium_memzero(bytes_.data(), bytes_.size());
}

Key Key::from_bytes(std::span<const std::byte, key_size> bytes)
{
    ensure_sodium();
    Key key;
    for (std::size_t i = 0; i < key_size; ++i) {
        key.bytes_.at(i) = static_cast<unsigned char>(bytes[i]);
    }
    return key;
}

std::optional<Key> Key::from_hex(std::string_view hex)
{
    ensure_sodium();
    Key key;
    if (!parse_hex(hex, key.bytes_)) {
        return std::nullopt;
    }
    return key;
}

std::optional<Key> Key::load(const std::string &path, std::string &error)
{
    // O_NONBLOCK: opening a FIFO planted as the key file must not hang (it is
    // refused below as not a regular file); it changes nothing for files.
    // O_NOFOLLOW: a symlink as the last component could be swapped to point at
    // a file whose checks below would then be someone else's.
    const UniqueFd fd(
        ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW));
    if (!fd.valid()) {
        const int open_errno = errno;
        struct stat link {};
        if (open_errno == ELOOP && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
            error = fmt::format("key file {} is a symbolic link: name the file itself, not a "
                                "link to it",
                                path);
        } else {
            error = fmt::format("{}: cannot open key file: {}", path, errno_text(open_errno));
        }
        return std::nullopt;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        error = fmt::format("{}: cannot stat key file: {}", path, errno_text(errno));
        return std::nullopt;
    }
    if (!S_ISREG(st.st_mode)) {
        error = fmt::format("{}: key file is not a regular file", path);
        return std::nullopt;
    }
    // Whoever may write the file chooses the key; whoever may read it can
    // sign requests as any uid.  So only this process's user or root may own
    // it, and nobody else may have any access.
    const uid_t euid = ::geteuid();
    if (st.st_uid != euid && st.st_uid != 0) {
        error = euid == 0
                    ? fmt::format("key file {} is owned by uid {}: it must be owned by root "
                                  "(chown 0 {})",
                                  path, st.st_uid, path)
                    : fmt::format("key file {} is owned by uid {}: it must be owned by uid {} "
                                  "(the user reading it) or root (chown {} {})",
                                  path, st.st_uid, euid, euid, path);
        return std::nullopt;
    }
    if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        error = fmt::format("key file {} is mode {:04o}: it must be readable by its owner only "
                            "(chmod 600 {})",
                            path, st.st_mode & 07777, path);
        return std::nullopt;
    }
    Secret text;
    while (text.size < text.bytes_.size()) {
        const ssize_t n =
            ::read(fd.get(), text.bytes_.data() + text.size, text.bytes_.size() - text.size);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            error = fmt::format("{}: cannot read key file: {}", path, errno_text(errno));
            return std::nullopt;
        }
        if (n == 0) {
            break;
        }
        text.size += static_cast<std::size_t>(n);
    }
    std::string_view hex(text.bytes_.data(), text.size);
    if (hex.size() == hex_digits + 1 && hex.back() == '\n') {
        hex.remove_suffix(1);
    }
    if (hex.size() != hex_digits) {
        error = fmt::format("{}: not a key file: expected 64 hex digits and an optional "
                            "newline, found {}{} bytes",
                            path, text.size == text.bytes_.size() ? "at least " : "", text.size);
        return std::nullopt;
    }
    std::optional<Key> key = from_hex(hex);
    if (!key) {
        error =
            fmt::format("{}: not a key file: it holds a character that is not a hex digit", path);
    }
    return key;
}

void Key::sign(std::span<const std::byte> message,
               std::span<std::byte, mac_size> tag) const noexcept
{
    crypto_auth_hmacsha256(reinterpret_cast<unsigned char *>(tag.data()),
                           reinterpret_cast<const unsigned char *>(message.data()), message.size(),
                           bytes_.data());
}

bool Key::verify(std::span<const std::byte> message,
                 std::span<const std::byte, mac_size> tag) const noexcept
{
    // crypto_auth_hmacsha256_verify compares in constant time.
    return crypto_auth_hmacsha256_verify(reinterpret_cast<const unsigned char *>(tag.data()),
                                         reinterpret_cast<const unsigned char *>(message.data()),
                                         message.size(), bytes_.data()) == 0;
}

} // namespace pvfs::proto
