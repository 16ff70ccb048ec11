// Server addresses ("tcp://host:port") and what clients mount
// ("tcp://host:port/fsname").
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "pvfs/config.hpp"

namespace pvfs::config {

namespace {

// DNS names are at most 253 characters.
constexpr std::size_t max_host = 253;

bool host_char(char c) noexcept
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

bool ipv6_char(char c) noexcept
{
    return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9') || c == ':' ||
           c == '.';
}

Address failed(std::string message)
{
    Address a;
    a.error = std::move(message);
    return a;
}

} // namespace

Address parse_address(std::string_view url)
{
    const auto sep = url.find("://");
    if (sep == std::string_view::npos) {
        return failed("expected scheme://host:port with scheme tcp or ib");
    }
    const std::string_view scheme = url.substr(0, sep);
    if (scheme != "tcp" && scheme != "ib") {
        return failed(fmt::format("unknown scheme '{}'; use tcp or ib",
                                  scheme.substr(0, std::min<std::size_t>(scheme.size(), 32))));
    }
    const std::string_view rest = url.substr(sep + 3);
    std::string_view host;
    std::string_view after_host;
    if (!rest.empty() && rest.front() == '[') {
        const auto close = rest.find(']');
        if (close == std::string_view::npos) {
            return failed("IPv6 host without its closing ']'");
        }
        host = rest.substr(0, close + 1);
        after_host = rest.substr(close + 1);
        const std::string_view inner = host.substr(1, host.size() - 2);
        if (inner.empty() || !std::all_of(inner.begin(), inner.end(), ipv6_char)) {
            return failed("bad IPv6 host; write it as [hex:hex::hex]");
        }
    } else {
        const auto colon = rest.find(':');
        host = rest.substr(0, colon);
        after_host = colon == std::string_view::npos ? std::string_view() : rest.substr(colon);
        if (host.empty()) {
            return failed("empty host");
        }
        if (!std::all_of(host.begin(), host.end(), host_char)) {
            return failed("bad host; use a name or an address of A-Z a-z 0-9 . - _");
        }
    }
    if (host.size() > max_host) {
        return failed(fmt::format("host longer than {} characters", max_host));
    }
    if (after_host.empty() || after_host.front() != ':') {
        return failed("no port; expected scheme://host:port");
    }
    const std::string_view port_text = after_host.substr(1);
    const auto digits = std::find_if(port_text.begin(), port_text.end(),
                                     [](char c) { return c < '0' || c > '9'; }) -
                        port_text.begin();
    if (digits == 0) {
        return failed("no port number after the host");
    }
    if (static_cast<std::size_t>(digits) != port_text.size()) {
        return failed("unexpected characters after the port");
    }
    std::uint64_t port = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + digits, port);
    if (ec != std::errc() || port < 1 || port > 65535) {
        return failed(fmt::format("port {} out of range 1..65535",
                                  port_text.substr(0, std::min<std::size_t>(digits, 20))));
    }
    Address a;
    a.scheme = std::string(scheme);
    a.host = std::string(host);
    a.port = static_cast<std::uint16_t>(port);
    a.url = fmt::format("{}://{}:{}", a.scheme, a.host, a.port);
    return a;
}

FsUrl parse_fs_url(std::string_view url)
{
    FsUrl out;
    const auto sep = url.find("://");
    const auto slash = url.find('/', sep == std::string_view::npos ? 0 : sep + 3);
    if (sep == std::string_view::npos || slash == std::string_view::npos) {
        out.error = "expected scheme://host:port/fsname, e.g. tcp://server:3334/pvfs";
        return out;
    }
    const Address a = parse_address(url.substr(0, slash));
    if (!a.ok()) {
        out.error = a.error;
        return out;
    }
    const std::string_view name = url.substr(slash + 1);
    if (!valid_config_name(name)) {
        out.error = fmt::format("bad file-system name after the port: use 1 to {} of A-Z a-z "
                                "0-9 _ . -",
                                max_name_bytes);
        return out;
    }
    out.address = a.url;
    out.fs_name = std::string(name);
    return out;
}

} // namespace pvfs::config
