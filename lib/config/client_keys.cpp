// The client keys file (include/pvfs/client_keys.hpp): a strict line parser.
#include "pvfs/client_keys.hpp"

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <sodium.h>

namespace pvfs::config {

namespace {

// A field as it may appear in an error: control characters and overlong
// text never reach the log whole.
std::string shown(std::string_view field)
{
    constexpr std::size_t max_shown = 40;
    std::string out;
    for (const char c : field.substr(0, max_shown)) {
        const auto byte = static_cast<unsigned char>(c);
        out += byte < 0x20 || byte >= 0x7f ? '?' : c;
    }
    if (field.size() > max_shown) {
        out += "...";
    }
    return out;
}

std::vector<std::string_view> fields(std::string_view line)
{
    std::vector<std::string_view> out;
    std::size_t at = 0;
    while (at < line.size()) {
        const std::size_t start = line.find_first_not_of(" \t", at);
        if (start == std::string_view::npos) {
            break;
        }
        const std::size_t end = std::min(line.find_first_of(" \t", start), line.size());
        out.push_back(line.substr(start, end - start));
        at = end;
    }
    return out;
}

std::optional<std::uint32_t> parse_uid(std::string_view text)
{
    std::uint32_t value = 0;
    if (text.empty() || text.size() > 10 || text.front() == '+') {
        return std::nullopt;
    }
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size()) {
        return std::nullopt;
    }
    return value;
}

class Parser {
public:
    explicit Parser(std::string_view origin) : origin_(origin) {}

    // Parses one line; false (and error_ set) when it is bad.
    bool line(std::string_view text, std::size_t number, std::vector<ClientKey> &out)
    {
        number_ = number;
        if (text.size() > max_client_line_bytes) {
            return fail(fmt::format("line longer than {} bytes", max_client_line_bytes));
        }
        if (const std::size_t hash = text.find('#'); hash != std::string_view::npos) {
            text = text.substr(0, hash);
        }
        for (const char c : text) {
            const auto byte = static_cast<unsigned char>(c);
            if ((byte < 0x20 && c != '\t') || byte == 0x7f) {
                return fail("a control character (only spaces and tabs separate fields)");
            }
        }
        const std::vector<std::string_view> f = fields(text);
        if (f.empty()) {
            return true;
        }
        // A key in the name's place (swapped columns, a pasted key file)
        // must not reach a log line.
        if (proto::Key::from_hex(f[0])) {
            return fail("the line starts with 64 hex digits, a key: a line is NAME KEY-HEX "
                        "[no_root_squash] [uids=LO-HI] [gids=LO-HI] [encrypt] [revoked]");
        }
        if (f.size() < 2) {
            return fail(fmt::format("'{}' without a key: a line is NAME KEY-HEX [no_root_squash] "
                                    "[uids=LO-HI] [gids=LO-HI] [encrypt] [revoked]",
                                    shown(f[0])));
        }
        const std::string_view name = f[0];
        if (!proto::valid_key_name(name)) {
            return fail(fmt::format("client name '{}' is not 1 to {} characters of A-Z a-z 0-9 "
                                    ". _ -",
                                    shown(name), proto::max_key_name));
        }
        if (name == cluster_key_name) {
            return fail(fmt::format("the name '{}' is the cluster key's; choose another",
                                    cluster_key_name));
        }
        std::optional<proto::Key> key = proto::Key::from_hex(f[1]);
        if (!key) {
            return fail(fmt::format("client '{}': the key must be 64 hex digits", name));
        }
        if (out.size() >= max_client_keys) {
            return fail(fmt::format("more than {} clients", max_client_keys));
        }
        if (const auto it = names_.find(std::string(name)); it != names_.end()) {
            return fail(fmt::format("client '{}' is already on line {}", name, it->second));
        }
        key->set_name(std::string(name));
        const std::uint32_t id = *key->id();
        if (const auto it = ids_.find(id); it != ids_.end()) {
            return fail(fmt::format("client '{}' has the key id {:08x} of client '{}' on line "
                                    "{}; rename one of them",
                                    name, id, out.at(it->second).key.name(),
                                    out.at(it->second).line));
        }
        // Two clients with one key: whoever holds it picks the weaker
        // policy.  Compared through a MAC of a constant, not the key.
        std::array<std::byte, proto::mac_size> print{};
        static constexpr std::string_view probe = "pvfs client key fingerprint";
        key->sign(std::as_bytes(std::span(probe.data(), probe.size())), print);
        const std::string fingerprint(reinterpret_cast<const char *>(print.data()), print.size());
        if (const auto it = prints_.find(fingerprint); it != prints_.end()) {
            return fail(fmt::format("client '{}' has the key of the client on line {}: each "
                                    "client needs its own (pvfs-key add makes one)",
                                    name, it->second));
        }
        ClientKey client{std::move(*key), false, std::nullopt, false, number, std::nullopt};
        for (std::size_t i = 2; i < f.size(); ++i) {
            const std::string_view option = f[i];
            if (option == "no_root_squash" && !client.no_root_squash) {
                client.no_root_squash = true;
            } else if (option == "revoked" && !client.revoked) {
                client.revoked = true;
            } else if (option == "encrypt" && !client.key.encrypt()) {
                client.key.set_encrypt(true); // its connections must be encrypted
            } else if (option.starts_with("uids=") && !client.uids) {
                client.uids = parse_uid_range(option.substr(5));
                if (!client.uids) {
                    return fail(fmt::format("client '{}': '{}' is not uids=LO-HI with decimal "
                                            "uids and LO <= HI",
                                            name, shown(option)));
                }
            } else if (option.starts_with("gids=") && !client.gids) {
                client.gids = parse_uid_range(option.substr(5));
                if (!client.gids) {
                    return fail(fmt::format("client '{}': '{}' is not gids=LO-HI with decimal "
                                            "gids and LO <= HI",
                                            name, shown(option)));
                }
            } else if (option == "no_root_squash" || option == "revoked" || option == "encrypt" ||
                       option.starts_with("uids=") || option.starts_with("gids=")) {
                return fail(fmt::format("client '{}': '{}' given twice", name, shown(option)));
            } else {
                return fail(
                    fmt::format("client '{}': unknown option '{}' (expected "
                                "no_root_squash, uids=LO-HI, gids=LO-HI, encrypt or revoked)",
                                name, shown(option)));
            }
        }
        names_.emplace(std::string(name), number);
        prints_.emplace(fingerprint, number);
        ids_.emplace(id, out.size());
        out.push_back(std::move(client));
        return true;
    }

    bool fail(std::string_view why)
    {
        error_ = fmt::format("{}:{}: {}", origin_, number_, why);
        return false;
    }

    [[nodiscard]] const std::string &error() const noexcept { return error_; }

private:
    std::string_view origin_;
    std::size_t number_ = 0;
    std::string error_;
    std::unordered_map<std::string, std::size_t> names_;  // name -> line
    std::unordered_map<std::uint32_t, std::size_t> ids_;  // id -> index in out
    std::unordered_map<std::string, std::size_t> prints_; // key fingerprint -> line
};

} // namespace

std::optional<UidRange> parse_uid_range(std::string_view text)
{
    const std::size_t dash = text.find('-');
    if (dash == std::string_view::npos) {
        return std::nullopt;
    }
    const std::optional<std::uint32_t> low = parse_uid(text.substr(0, dash));
    const std::optional<std::uint32_t> high = parse_uid(text.substr(dash + 1));
    if (!low || !high || *low > *high) {
        return std::nullopt;
    }
    return UidRange{*low, *high};
}

ClientKeys parse_client_keys(std::string_view text, std::string_view origin)
{
    ClientKeys result;
    Parser parser(origin);
    if (text.size() > max_client_keys_bytes) {
        parser.fail(fmt::format("larger than {} bytes", max_client_keys_bytes));
        result.error = parser.error();
        return result;
    }
    std::size_t number = 0;
    while (!text.empty()) {
        ++number;
        const std::size_t newline = text.find('\n');
        const std::string_view line = text.substr(0, newline);
        text = newline == std::string_view::npos ? std::string_view{} : text.substr(newline + 1);
        if (!parser.line(line, number, result.clients)) {
            result.clients.clear();
            result.error = parser.error();
            return result;
        }
    }
    return result;
}

ClientKeys load_client_keys(const std::string &path)
{
    ClientKeys result;
    std::string text;
    if (!proto::read_private_file(path, "client keys file", max_client_keys_bytes, text,
                                  result.error)) {
        return result;
    }
    result = parse_client_keys(text, path);
    sodium_memzero(text.data(), text.size());
    return result;
}

std::string client_key_line(std::string_view name, std::string_view key_hex, bool no_root_squash,
                            const std::optional<UidRange> &uids,
                            const std::optional<UidRange> &gids, bool encrypt)
{
    std::string line = fmt::format("{} {}", name, key_hex);
    if (no_root_squash) {
        line += " no_root_squash";
    }
    if (uids) {
        line += fmt::format(" uids={}-{}", uids->low, uids->high);
    }
    if (gids) {
        line += fmt::format(" gids={}-{}", gids->low, gids->high);
    }
    if (encrypt) {
        line += " encrypt";
    }
    return line;
}

} // namespace pvfs::config
