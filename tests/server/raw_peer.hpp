// Attackers on real servers: raw TCP sockets that speak BMI's frame format
// (libnet/methods/tcp/frame.hpp) from any loopback source address, with or
// without a key, and can send what no BMI endpoint would: frames before or
// instead of a hello, forged handshakes, frames trickled a byte at a time.
#ifndef PVFS_TESTS_SERVER_RAW_PEER_HPP
#define PVFS_TESTS_SERVER_RAW_PEER_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "frame.hpp"
#include "pvfs/proto.hpp"
#include "pvfs/unique_fd.hpp"

namespace pvfs::test {

// 127.0.0.1 is the legitimate clients' address; attackers take others
// (127.a.b.c as the number a<<16 | b<<8 | c) so that the servers' cap per
// source address does not shut the legitimate clients out.
std::uint32_t loopback(std::uint32_t host);

// A TCP connection from `source` (host byte order) to 127.0.0.1:port.
// `wait`: the connect has completed (or failed: an invalid fd) before it
// returns, and sends and receives block for at most 5 s; otherwise it is
// non-blocking and may still be connecting.
UniqueFd raw_connect(std::uint16_t port, std::uint32_t source, bool wait = true);

// The frame `h` (its size set to the payload's) with `payload`.
std::vector<std::byte> frame(bmi::tcp::FrameHeader h, std::span<const std::byte> payload = {});
// A transport hello claiming `url` (the payload of a hello frame).
std::vector<std::byte> transport_hello(const std::string &url);
// A hello frame claiming `url`, flagged as authenticated with `auth` when
// given.
std::vector<std::byte> hello_frame(const std::string &url,
                                   std::optional<std::vector<std::byte>> auth = {});
// `count` frames of `type` with `size` bytes of `fill`, on tags from
// `first_tag` up, `cookie2` in each.
std::vector<std::byte> frames(bmi::tcp::FrameType type, std::int32_t first_tag, int count,
                              std::size_t size, std::byte fill, std::uint64_t cookie2 = 0);

// Writes what the socket takes of `bytes` without blocking; the count.
std::size_t send_some(int fd, std::span<const std::byte> bytes);
// Writes all of `bytes` (bounded by the socket's send timeout); false when
// the peer closed or the time ran out.
bool send_all(int fd, std::span<const std::byte> bytes);
// Has the server closed fd (EOF or reset)?  Reads and drops what came.
bool closed_by_server(int fd);
// Waits up to `within` for the server to close fd.
bool wait_closed(int fd, std::chrono::milliseconds within);
// Reads one frame within `within`; false if none came (or fd closed).
bool read_frame(int fd, bmi::tcp::FrameHeader &h, std::vector<std::byte> &payload,
                std::chrono::milliseconds within);

// A connection that proved `key` to the server at port from `source`,
// claiming `url` in its hello; invalid when the server refused.  What the
// key holder sends after is up to the caller (nothing is sealed: the
// cluster must not encrypt).
UniqueFd authenticated_connect(std::uint16_t port, std::uint32_t source, const proto::Key &key,
                               const std::string &url);

// The established TCP connections from 127.0.0.1 to 127.0.0.1:port, as
// an unprivileged local user reads them from /proc/net/tcp: their local
// ports.
std::vector<std::uint16_t> connections_to(std::uint16_t port);

// Open file descriptors of process `pid`.
std::size_t open_fds(int pid);
// Resident set size of process `pid`, bytes (0 when it is gone).
std::size_t rss_bytes(int pid);

} // namespace pvfs::test

#endif // PVFS_TESTS_SERVER_RAW_PEER_HPP
