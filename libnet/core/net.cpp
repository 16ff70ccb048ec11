#include "net.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

namespace bmi::net {

std::string errno_text(int err)
{
    const char *text = strerrordesc_np(err);
    return text != nullptr ? text : "errno " + std::to_string(err);
}

bool split_hostport(std::string_view hp, std::string &host, std::string &port)
{
    if (hp.empty())
        return false;
    std::size_t colon = 0;
    if (hp.front() == '[') {
        const auto close = hp.find(']');
        if (close == std::string_view::npos || close + 1 >= hp.size() || hp[close + 1] != ':')
            return false;
        host = std::string(hp.substr(1, close - 1));
        colon = close + 1;
    } else {
        colon = hp.rfind(':');
        if (colon == std::string_view::npos || colon == 0)
            return false;
        host = std::string(hp.substr(0, colon));
    }
    port = std::string(hp.substr(colon + 1));
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return false;
    return std::stoul(port) <= 65535;
}

int resolve(std::string_view hp, sockaddr_storage &sa, socklen_t &len)
{
    std::string host;
    std::string port;
    if (!split_hostport(hp, host, port))
        return -EINVAL;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo *res = nullptr;
    if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr)
        return -EHOSTUNREACH;
    len = static_cast<socklen_t>(std::min<std::size_t>(res->ai_addrlen, sizeof sa));
    std::memcpy(&sa, res->ai_addr, len);
    ::freeaddrinfo(res);
    return 0;
}

std::string sockaddr_url(std::string_view scheme, const sockaddr *sa)
{
    std::array<char, INET6_ADDRSTRLEN> buf{};
    if (sa->sa_family == AF_INET) {
        sockaddr_in in{};
        std::memcpy(&in, sa, sizeof in);
        ::inet_ntop(AF_INET, &in.sin_addr, buf.data(), buf.size());
        return std::string(scheme) + "://" + buf.data() + ":" + std::to_string(ntohs(in.sin_port));
    }
    sockaddr_in6 in6{};
    std::memcpy(&in6, sa, sizeof in6);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, buf.data(), buf.size());
    return std::string(scheme) + "://[" + buf.data() + "]:" + std::to_string(ntohs(in6.sin6_port));
}

std::uint64_t new_incarnation()
{
    std::uint64_t v = 0;
    while (v == 0) {
        if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
            v = static_cast<std::uint64_t>(
                    std::chrono::steady_clock::now().time_since_epoch().count()) ^
                static_cast<std::uint64_t>(::getpid());
    }
    return v;
}

} // namespace bmi::net
