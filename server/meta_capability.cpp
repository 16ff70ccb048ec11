// Capabilities (docs/protocol.md "Capabilities"): the metadata server
// checks what a caller may do with a file's data and signs it for the data
// servers, which check nothing else.  Revocation is by expiry
// (capability_ttl): a chmod reaches a client that holds a capability at
// most that long after, as POSIX lets an open descriptor keep its rights
// anyway; an unlinked file's objects go with it.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <string_view>

#include "key_table.hpp"
#include "meta_service.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/perm.hpp"

namespace pvfs::server {

namespace {

std::int64_t realtime_now_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// access(2) bits for capability rights.
std::uint32_t access_mask(std::uint32_t rights)
{
    return ((rights & proto::cap_read) != 0 ? proto::access_read : 0U) |
           ((rights & proto::cap_write) != 0 ? proto::access_write : 0U);
}

std::uint32_t open_mode(std::uint32_t rights)
{
    return ((rights & proto::cap_read) != 0 ? proto::open_read : 0U) |
           ((rights & proto::cap_write) != 0 ? proto::open_write : 0U);
}

} // namespace

bool MetaService::holds_open(std::uint64_t client_id, std::string_view key, Handle handle,
                             std::uint32_t mode)
{
    if (client_id == 0)
        return false;
    const std::lock_guard lock(open_mutex_);
    std::string owner;
    if (foreign_locked(client_id, key, owner))
        return false;
    const auto it = holds_.find(handle);
    return it != holds_.end() &&
           std::any_of(it->second.begin(), it->second.end(), [&](const Holder &h) {
               return h.client_id == client_id && (h.rights & mode) == mode;
           });
}

void MetaService::serve_capability(const Origin &origin, const Credentials &cred,
                                   const proto::CapabilityRequest &req)
{
    if (!settings_.capability_key) {
        loop_.respond_error(origin, EOPNOTSUPP);
        return;
    }
    if (req.rights == proto::cap_destroy) {
        // Garbage only: a live file's objects (one held open after its
        // unlink included) are never given away.
        // A handle not issued yet is garbage only pvfs-fsck (root) finds,
        // left by a metadata store older than its data (a restore).
        const int rc = store_.handle_gone(req.handle);
        if (rc != 0 && !(rc == -ESTALE && cred.uid == 0)) {
            loop_.respond_error(origin, rc == -EEXIST ? EACCES : -rc);
            return;
        }
    } else {
        Attr attr;
        if (const int rc = store_.getattr(cred, req.handle, attr); rc != 0) {
            loop_.respond_error(origin, -rc);
            return;
        }
        if (attr.type != ObjectType::regular) {
            loop_.respond_error(origin, attr.type == ObjectType::directory ? EISDIR : EINVAL);
            return;
        }
        // An open descriptor keeps the rights it was opened with; anyone
        // else is asked as access(2) would.
        if (!holds_open(req.client_id, key_name(origin), req.handle, open_mode(req.rights))) {
            if (const int rc = perm::may_access(cred, attr, access_mask(req.rights)); rc != 0) {
                loop_.respond_error(origin, -rc);
                return;
            }
        }
    }
    loop_.respond(origin, proto::CapabilityResponse{grant(origin, req.handle, req.rights)});
}

proto::Capability MetaService::grant(const Origin &origin, Handle handle,
                                     std::uint32_t rights) const
{
    proto::Capability cap;
    cap.handle = handle;
    cap.rights = rights;
    cap.fs_id = settings_.fs_id;
    if (const std::optional<std::uint32_t> id =
            origin.client ? origin.client->key.id() : std::nullopt) {
        cap.keyed = true;
        cap.key_id = *id;
    }
    cap.expires_ns =
        realtime_now_ns() +
        std::chrono::duration_cast<std::chrono::nanoseconds>(settings_.capability_ttl).count();
    proto::sign_capability(*settings_.capability_key, cap);
    return cap;
}

} // namespace pvfs::server
