// The check of a request's envelope key against what its connection
// proved (docs/security.md "Connections"), apart from the event loop so
// that it can be tested alone.
#ifndef PVFS_SERVER_KEY_CHECK_HPP
#define PVFS_SERVER_KEY_CHECK_HPP

#include "bmi/bmi.hpp"

#include <optional>
#include <string_view>

namespace pvfs::server {

// Whether a request whose envelope names key `envelope_key` may be served
// from a peer that proved `proved` (nullopt: it proved nothing).  A server
// always installs its authenticator, so every peer it hears from has
// proved a key; one without an identity (dropped meanwhile, or a path
// that skipped the handshake) is refused, never believed: failing open
// would serve it under whatever key its envelope names.
[[nodiscard]] inline bool envelope_key_proved(const std::optional<bmi::Identity> &proved,
                                              std::string_view envelope_key)
{
    return proved && proved->name == envelope_key;
}

} // namespace pvfs::server

#endif // PVFS_SERVER_KEY_CHECK_HPP
