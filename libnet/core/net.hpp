// Helpers every method needs for addresses and logs.  Internal to libnet.
#ifndef PVFS_LIBNET_CORE_NET_HPP
#define PVFS_LIBNET_CORE_NET_HPP

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace bmi::net {

// strerror is not thread-safe; strerrordesc_np (glibc 2.32) is.
std::string errno_text(int err);

// Splits "host:port" or "[v6]:port"; false when malformed.
bool split_hostport(std::string_view hp, std::string &host, std::string &port);

// Resolves "host:port" (names too); 0, -EINVAL or -EHOSTUNREACH.
int resolve(std::string_view hp, sockaddr_storage &sa, socklen_t &len);

// "scheme://a.b.c.d:port" or "scheme://[v6]:port".
std::string sockaddr_url(std::string_view scheme, const sockaddr *sa);

// Random per process and never 0: a peer tells a restart by it.
std::uint64_t new_incarnation();

} // namespace bmi::net

#endif // PVFS_LIBNET_CORE_NET_HPP
