// Keys: loading (the cluster key, a client key), wiping, client key names
// and ids, and the HMAC-SHA-256 over messages.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <sodium.h>

#include "pvfs/proto.hpp"
#include "pvfs/unique_fd.hpp"

namespace pvfs::proto {

namespace {

constexpr std::size_t hex_digits = 2 * key_size;
// A client key file: name, space, hex digits, newline; more is refused.
constexpr std::size_t max_key_file = max_key_name + 1 + hex_digits + 1;

// Wipes a string that held a secret when it goes out of scope.
class Wipe {
public:
    explicit Wipe(std::string &text) noexcept : text_(text) {}
    Wipe(const Wipe &) = delete;
    Wipe &operator=(const Wipe &) = delete;
    Wipe(Wipe &&) = delete;
    Wipe &operator=(Wipe &&) = delete;
    ~Wipe() { sodium_memzero(text_.data(), text_.size()); }

private:
    std::string &text_;
};

// sodium_init() is itself thread-safe and idempotent; the static makes
// every later call free.
void ensure_sodium()
{
    static const bool ready = sodium_init() >= 0;
    if (!ready) {
        throw std::runtime_error("libsodium cannot be initialised");
    }
}

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

Key::Key(Key &&other) noexcept
    : bytes_(other.bytes_), name_(std::move(other.name_)), id_(std::exchange(other.id_, {})),
      encrypt_(other.encrypt_)
{
    sodium_memzero(other.bytes_.data(), other.bytes_.size());
}

Key &Key::operator=(Key &&other) noexcept
{
    if (this != &other) {
        bytes_ = other.bytes_;
        name_ = std::move(other.name_);
        id_ = std::exchange(other.id_, {});
        encrypt_ = other.encrypt_;
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

bool read_private_file(const std::string &path, std::string_view what, std::size_t max_bytes,
                       std::string &out, std::string &error, FileOwner owner)
{
    out.clear();
    // O_NONBLOCK: opening a FIFO planted as the file must not hang (it is
    // refused below as not a regular file); it changes nothing for files.
    // O_NOFOLLOW: a symlink as the last component could be swapped to point at
    // a file whose checks below would then be someone else's.
    const UniqueFd fd(
        ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW));
    if (!fd.valid()) {
        const int open_errno = errno;
        struct stat link {};
        if (open_errno == ELOOP && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
            error = fmt::format("{} {} is a symbolic link: name the file itself, not a "
                                "link to it",
                                what, path);
        } else {
            error = fmt::format("{}: cannot open {}: {}", path, what, errno_text(open_errno));
        }
        return false;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        error = fmt::format("{}: cannot stat {}: {}", path, what, errno_text(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        error = fmt::format("{}: {} is not a regular file", path, what);
        return false;
    }
    // Whoever may write the file chooses the key; whoever may read it can
    // sign requests as any uid.  So only this process's user or root may own
    // it, and nobody else may have any access.
    const uid_t euid = ::geteuid();
    const bool root_reads_any = owner == FileOwner::any_for_root && euid == 0;
    if (st.st_uid != euid && st.st_uid != 0 && !root_reads_any) {
        error = euid == 0 ? fmt::format("{} {} is owned by uid {}: it must be owned by root "
                                        "(chown 0 {})",
                                        what, path, st.st_uid, path)
                          : fmt::format("{} {} is owned by uid {}: it must be owned by uid {} "
                                        "(the user reading it) or root (chown {} {})",
                                        what, path, st.st_uid, euid, euid, path);
        return false;
    }
    if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        error = fmt::format("{} {} is mode {:04o}: it must be readable by its owner only "
                            "(chmod 600 {})",
                            what, path, st.st_mode & 07777, path);
        return false;
    }
    // Sized once, so no reallocation leaves a copy of the secret behind;
    // one byte more than allowed tells an oversized file.
    const std::size_t room =
        std::min(max_bytes, static_cast<std::size_t>(std::max<off_t>(st.st_size, 0))) + 1;
    out.resize(room);
    std::size_t size = 0;
    while (size < room) {
        const ssize_t n = ::read(fd.get(), out.data() + size, room - size);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            error = fmt::format("{}: cannot read {}: {}", path, what, errno_text(errno));
            sodium_memzero(out.data(), out.size());
            out.clear();
            return false;
        }
        if (n == 0) {
            break;
        }
        size += static_cast<std::size_t>(n);
    }
    if (size > max_bytes) {
        error = fmt::format("{}: {} is larger than {} bytes", path, what, max_bytes);
        sodium_memzero(out.data(), out.size());
        out.clear();
        return false;
    }
    if (size == room) {
        error = fmt::format("{}: {} grew while it was read; try again", path, what);
        sodium_memzero(out.data(), out.size());
        out.clear();
        return false;
    }
    sodium_memzero(out.data() + size, out.size() - size);
    out.resize(size);
    return true;
}

bool valid_key_name(std::string_view name) noexcept
{
    if (name.empty() || name.size() > max_key_name) {
        return false;
    }
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
    });
}

std::uint32_t key_id(std::string_view name) noexcept
{
    std::array<unsigned char, crypto_generichash_BYTES> digest{};
    crypto_generichash(digest.data(), digest.size(),
                       reinterpret_cast<const unsigned char *>(name.data()), // NOLINT
                       name.size(), nullptr, 0);
    return std::uint32_t{digest[0]} | std::uint32_t{digest[1]} << 8U |
           std::uint32_t{digest[2]} << 16U | std::uint32_t{digest[3]} << 24U;
}

void Key::keyed_hash(std::span<const std::span<const std::byte>> parts,
                     std::span<std::byte, 32> out) const noexcept
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, bytes_.data(), bytes_.size(), out.size());
    for (const std::span<const std::byte> part : parts)
        crypto_generichash_update(&st, reinterpret_cast<const unsigned char *>(part.data()),
                                  part.size());
    crypto_generichash_final(&st, reinterpret_cast<unsigned char *>(out.data()), out.size());
    sodium_memzero(&st, sizeof st);
}

Key Key::clone() const
{
    Key copy;
    copy.bytes_ = bytes_;
    copy.name_ = name_;
    copy.id_ = id_;
    copy.encrypt_ = encrypt_;
    return copy;
}

bool Key::same_bytes(const Key &other) const noexcept
{
    return sodium_memcmp(bytes_.data(), other.bytes_.data(), bytes_.size()) == 0;
}

void Key::set_name(std::string name)
{
    id_ = key_id(name);
    name_ = std::move(name);
}

std::optional<Key> Key::load(const std::string &path, std::string &error)
{
    std::string text;
    const Wipe wipe(text);
    if (!read_private_file(path, "key file", max_key_file, text, error)) {
        if (error.find("larger than") != std::string::npos) {
            error = fmt::format("{}: not a key file: expected 64 hex digits (after a client "
                                "name and a space for a client key, then optionally "
                                "\" encrypt\") and an optional newline, "
                                "found more than {} bytes",
                                path, max_key_file);
        }
        return std::nullopt;
    }
    std::string_view hex(text);
    if (!hex.empty() && hex.back() == '\n') {
        hex.remove_suffix(1);
    }
    // A client key file may end in " encrypt": the client's connections
    // must be encrypted (pvfs-key add --encrypt writes it beside the
    // table's `encrypt`), so the client asks without being told.
    bool encrypt = false;
    if (constexpr std::string_view flag = " encrypt"; hex.ends_with(flag)) {
        encrypt = true;
        hex.remove_suffix(flag.size());
    }
    std::string_view name;
    if (const std::size_t space = hex.find(' '); space != std::string_view::npos) {
        name = hex.substr(0, space);
        hex.remove_prefix(space + 1);
        if (!valid_key_name(name)) {
            error = fmt::format("{}: not a key file: a client key's name must be 1 to {} "
                                "characters of A-Z a-z 0-9 . _ -",
                                path, max_key_name);
            return std::nullopt;
        }
    }
    if (hex.size() != hex_digits) {
        error = fmt::format("{}: not a key file: expected 64 hex digits{} and an optional "
                            "newline, found {} bytes",
                            path, name.empty() ? "" : " after the client name", text.size());
        return std::nullopt;
    }
    std::optional<Key> key = from_hex(hex);
    if (!key) {
        error =
            fmt::format("{}: not a key file: it holds a character that is not a hex digit", path);
        return std::nullopt;
    }
    if (encrypt && name.empty()) {
        error = fmt::format("{}: not a key file: only a client key (NAME HEX) may say encrypt; "
                            "for the cluster key set encrypt = true in the config",
                            path);
        return std::nullopt;
    }
    if (!name.empty()) {
        key->set_name(std::string(name));
    }
    key->set_encrypt(encrypt);
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
