#include "raw_peer.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "pvfs/auth.hpp"

namespace pvfs::test {

namespace tcp = bmi::tcp;
using Clock = std::chrono::steady_clock;

std::uint32_t loopback(std::uint32_t host)
{
    return 0x7f000000U | (host & 0x00ffffffU);
}

UniqueFd raw_connect(std::uint16_t port, std::uint32_t source, bool wait)
{
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid())
        return fd;
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(source);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr *>(&from), sizeof from) != 0)
        return {};
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr *>(&to), sizeof to);
    if (rc != 0 && errno != EINPROGRESS)
        return {};
    if (!wait)
        return fd;
    pollfd p{fd.get(), POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, 5000) != 1 || ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
        err != 0)
        return {};
    const int flags = ::fcntl(fd.get(), F_GETFL);
    ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    const timeval tv{5, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

std::vector<std::byte> frame(tcp::FrameHeader h, std::span<const std::byte> payload)
{
    h.size = payload.size();
    tcp::HeaderBytes b{};
    tcp::encode(h, b);
    std::vector<std::byte> out(b.size() + payload.size());
    std::copy(b.begin(), b.end(), out.begin());
    std::copy(payload.begin(), payload.end(), out.begin() + static_cast<std::ptrdiff_t>(b.size()));
    return out;
}

std::vector<std::byte> transport_hello(const std::string &url)
{
    tcp::HelloBody body;
    body.eager_limit = 16384;
    body.unexpected_limit = 16384;
    body.chunk = 512 * 1024;
    body.incarnation = 7;
    body.url = url;
    std::vector<std::byte> out(tcp::hello_size(body));
    tcp::encode_hello(body, out);
    return out;
}

std::vector<std::byte> hello_frame(const std::string &url,
                                   std::optional<std::vector<std::byte>> auth)
{
    std::vector<std::byte> payload = transport_hello(url);
    tcp::FrameHeader h;
    h.type = tcp::FrameType::hello;
    if (auth) {
        h.flags = tcp::hello_flag_auth;
        payload.insert(payload.end(), auth->begin(), auth->end());
    }
    return frame(h, payload);
}

std::vector<std::byte> frames(tcp::FrameType type, std::int32_t first_tag, int count,
                              std::size_t size, std::byte fill, std::uint64_t cookie2)
{
    const std::vector<std::byte> payload(size, fill);
    std::vector<std::byte> out;
    for (int i = 0; i < count; ++i) {
        tcp::FrameHeader h;
        h.type = type;
        h.tag = first_tag + i;
        h.cookie2 = cookie2;
        const std::vector<std::byte> f = frame(h, payload);
        out.insert(out.end(), f.begin(), f.end());
    }
    return out;
}

std::size_t send_some(int fd, std::span<const std::byte> bytes)
{
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n =
            ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += static_cast<std::size_t>(n);
    }
    return done;
}

bool send_all(int fd, std::span<const std::byte> bytes)
{
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        done += static_cast<std::size_t>(n);
    }
    return true;
}

bool closed_by_server(int fd)
{
    std::array<char, 16384> buf{};
    for (;;) {
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n == 0)
            return true;
        if (n < 0)
            return errno != EAGAIN && errno != EINTR;
    }
}

bool wait_closed(int fd, std::chrono::milliseconds within)
{
    const auto until = Clock::now() + within;
    while (!closed_by_server(fd)) {
        if (Clock::now() >= until)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

bool read_frame(int fd, tcp::FrameHeader &h, std::vector<std::byte> &payload,
                std::chrono::milliseconds within)
{
    const auto until = Clock::now() + within;
    std::vector<std::byte> got;
    std::array<std::byte, 4096> buf{};
    const tcp::FrameLimits limits{1U << 20U, 1U << 20U, 1U << 20U};
    while (Clock::now() < until) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 50) < 0 && errno != EINTR)
            return false;
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n == 0)
            return false;
        if (n > 0)
            got.insert(got.end(), buf.begin(), buf.begin() + n);
        if (got.size() < tcp::frame_header_size)
            continue;
        if (tcp::decode(std::span<const std::byte, tcp::frame_header_size>(got.data(),
                                                                           tcp::frame_header_size),
                        limits, h) != nullptr)
            return false;
        if (got.size() < tcp::frame_header_size + h.size)
            continue;
        payload.assign(got.begin() + tcp::frame_header_size,
                       got.begin() + static_cast<std::ptrdiff_t>(tcp::frame_header_size + h.size));
        return true;
    }
    return false;
}

UniqueFd authenticated_connect(std::uint16_t port, std::uint32_t source, const proto::Key &key,
                               const std::string &url)
{
    UniqueFd fd = raw_connect(port, source);
    if (!fd.valid())
        return fd;
    auth::Authenticator client;
    std::unique_ptr<bmi::Handshake> state;
    std::vector<std::byte> hello;
    if (client.client_hello(client.add_client_key(key), transport_hello(url), state, hello) != 0 ||
        !send_all(fd.get(), hello_frame(url, hello)))
        return {};
    tcp::FrameHeader h;
    std::vector<std::byte> payload;
    if (!read_frame(fd.get(), h, payload, std::chrono::seconds(5)) ||
        h.type != tcp::FrameType::hello || h.flags != tcp::hello_flag_auth)
        return {};
    const std::size_t tlen = tcp::hello_transport_size(payload);
    if (tlen == 0)
        return {};
    std::vector<std::byte> proof;
    bmi::Identity id;
    if (client.client_proof(*state, std::span(payload).first(tlen),
                            std::span(payload).subspan(tlen), proof, id) != 0)
        return {};
    tcp::FrameHeader a;
    a.type = tcp::FrameType::auth;
    if (!send_all(fd.get(), frame(a, proof)) ||
        !read_frame(fd.get(), h, payload, std::chrono::seconds(5)) ||
        h.type != tcp::FrameType::auth || h.status != 0)
        return {};
    return fd;
}

std::vector<std::uint16_t> connections_to(std::uint16_t port)
{
    // "  sl  local_address rem_address   st ..." with addresses as
    // hex IP:port, 0100007F being 127.0.0.1; state 01 is ESTABLISHED.
    std::ifstream in("/proc/net/tcp");
    std::string line;
    std::getline(in, line);
    std::vector<std::uint16_t> out;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string sl;
        std::string local;
        std::string remote;
        std::string state;
        fields >> sl >> local >> remote >> state;
        const std::string lo = "0100007F:";
        if (state != "01" || local.rfind(lo, 0) != 0 || remote.rfind(lo, 0) != 0)
            continue;
        if (std::stoul(remote.substr(lo.size()), nullptr, 16) != port)
            continue;
        out.push_back(static_cast<std::uint16_t>(std::stoul(local.substr(lo.size()), nullptr, 16)));
    }
    return out;
}

std::size_t open_fds(int pid)
{
    std::error_code ec;
    std::size_t n = 0;
    for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end;
         !ec && it != end; it.increment(ec))
        ++n;
    return n;
}

std::size_t rss_bytes(int pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/statm");
    std::size_t pages = 0;
    std::size_t resident = 0;
    if (!(f >> pages >> resident))
        return 0;
    return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

} // namespace pvfs::test
