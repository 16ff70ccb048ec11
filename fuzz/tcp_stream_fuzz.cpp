// libFuzzer target: arbitrary bytes arriving on a BMI TCP connection.
//
// Each input is split in two: the first part goes through the header and
// hello decoders directly, and the whole input is written to a real
// connection to a BMI server in this process, which must reject or accept
// it without crashing, hanging or leaking; the connection ends after the
// input, so every partial frame path is exercised too.  Inputs starting
// with a valid HELLO reach the eager/unexpected/rendezvous state machine.
#include "../libnet/methods/tcp/frame.hpp"
#include "bmi/bmi.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Target {
    bmi::Bmi server{[] {
        bmi::Options o;
        o.role = bmi::Role::server;
        o.listen = {"tcp://127.0.0.1:0"};
        o.tcp_engine = "epoll";
        return o;
    }()};
    bmi::ContextId ctx = server.open_context();
    int port = 0;

    Target()
    {
        const std::string url = server.listen_addresses().at(0);
        port = std::stoi(url.substr(url.rfind(':') + 1));
    }
};

Target &target()
{
    static Target t;
    return t;
}

void pump(Target &t)
{
    std::vector<bmi::UnexpectedMessage> got;
    t.server.testunexpected(got, 16, 0);
    // Answer what arrived, so reply paths run too; then drop it.
    for (const bmi::UnexpectedMessage &m : got) {
        const bmi::Post p =
            t.server.post_send(m.peer(), m.data().data(), m.data().size(), m.tag(), nullptr, t.ctx);
        (void)p;
    }
    std::array<bmi::Completion, 16> done{};
    t.server.testcontext(t.ctx, done, 0);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    const auto *bytes = reinterpret_cast<const std::byte *>(data);
    if (size >= bmi::tcp::frame_header_size) {
        bmi::tcp::FrameHeader h;
        const bmi::tcp::FrameLimits limits{16384, 16384, 512 * 1024};
        (void)bmi::tcp::decode(std::span<const std::byte, bmi::tcp::frame_header_size>(
                                   bytes, bmi::tcp::frame_header_size),
                               limits, h);
        bmi::tcp::HelloBody hello;
        (void)bmi::tcp::decode_hello(std::span<const std::byte>(bytes + bmi::tcp::frame_header_size,
                                                                size - bmi::tcp::frame_header_size),
                                     hello);
    }

    Target &t = target();
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(t.port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0) {
        std::size_t off = 0;
        while (off < size) {
            const ssize_t w = ::send(fd, data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w <= 0) {
                pump(t);
                if (w < 0 && errno != EAGAIN)
                    break;
                continue;
            }
            off += static_cast<std::size_t>(w);
        }
        ::shutdown(fd, SHUT_WR);
        // Let the server take it all and close; bounded.
        for (int i = 0; i < 64; ++i) {
            pump(t);
            std::array<char, 4096> sink{};
            const ssize_t r = ::recv(fd, sink.data(), sink.size(), MSG_DONTWAIT);
            if (r == 0)
                break;
        }
    }
    ::close(fd);
    pump(t);
    return 0;
}
