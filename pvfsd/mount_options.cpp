#include "mount_options.hpp"

#include <pvfs/gossip.hpp>
#include <pvfs/proto.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <fstream>

namespace pvfs::pvfsd {

namespace {

namespace gossip = pvfs::gossip;

// The longest session owner the servers take.
constexpr std::size_t max_owner = 255;

bool parse_uint(std::string_view text, std::uint32_t &out)
{
    const auto *end = text.data() + text.size();
    const auto [p, ec] = std::from_chars(text.data(), end, out);
    return ec == std::errc{} && p == end;
}

std::string machine_id()
{
    for (const char *path : {"/etc/machine-id", "/var/lib/dbus/machine-id"}) {
        std::ifstream f(path);
        std::string id;
        if (f >> id && !id.empty())
            return id;
    }
    // Without one, a reboot's mounts do not end the old sessions at once:
    // the servers drop them after session_ttl.
    return "no-machine-id";
}

} // namespace

std::string session_owner(std::string_view source, std::uint64_t mount_id)
{
    std::string owner = machine_id() + ":" + std::to_string(mount_id) + ":";
    owner.append(source.substr(0, max_owner - std::min(max_owner, owner.size())));
    owner.resize(std::min(owner.size(), max_owner));
    return owner;
}

MountPolicy apply_mount_options(const pvfsd_attach_req &req, std::string_view source,
                                std::string_view options, client::Options &o)
{
    MountPolicy p;
    std::uint32_t timeo = 30;
    std::uint32_t retrans = 2;
    while (!options.empty()) {
        const std::size_t comma = options.find(',');
        const std::string_view opt = options.substr(0, comma);
        options = comma == std::string_view::npos ? std::string_view{} : options.substr(comma + 1);
        const std::size_t eq = opt.find('=');
        const std::string_view key = opt.substr(0, eq);
        const std::string_view value =
            eq == std::string_view::npos ? std::string_view{} : opt.substr(eq + 1);
        std::uint32_t n = 0;
        if (opt.empty())
            continue;
        if (opt == "hard") {
            p.soft = false;
            p.softerr = false;
        } else if (opt == "soft") {
            p.soft = true;
        } else if (opt == "softerr") {
            p.soft = true;
            p.softerr = true;
        } else if (key == "timeo" && parse_uint(value, n) && n > 0) {
            timeo = n;
        } else if (key == "retrans" && parse_uint(value, n)) {
            retrans = n;
        } else if (key == "key" && !value.empty()) {
            p.key_file = value;
        } else {
            gossip::warning(gossip::Mask::pvfsd, "mount {}: option '{}' ignored",
                            req.common.mount_id, opt);
        }
    }
    p.client_id = req.client_id;
    o.client_id = req.client_id;
    o.caller_slots = PVFSD_REPLY_SLOTS;
    o.session_owner = session_owner(source, req.common.mount_id);
    o.retry_timeout = std::chrono::seconds(timeo);
    o.hard = !p.soft;
    if (!p.key_file.empty())
        o.key_file = p.key_file;
    if (p.soft)
        o.request_timeout = std::chrono::seconds(std::uint64_t{timeo} * (retrans + 1U));
    return p;
}

int check_key_file(const std::string &path, std::string &error)
{
    if (!path.starts_with('/')) {
        error = "key=" + path + ": not an absolute path";
        return -EINVAL;
    }
    if (proto::Key::load(path, error))
        return 0;
    // The loader says why in words; the mount needs it as an errno.
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    if ((st.st_uid != 0 && st.st_uid != ::geteuid()) || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
        return -EACCES;
    return -EINVAL;
}

int kernel_status(int status, const MountPolicy &policy)
{
    // A soft mount's request that could not reach its servers in time has
    // failed for good (the kernel keeps a hard mount's transport errors as
    // transient, and writes the pages again): the error of the soft limit.
    if (policy.soft && status < 0 && client::transport_error(status))
        return policy.softerr ? -ETIMEDOUT : -EIO;
    if (status == -ETIMEDOUT)
        return -EIO;
    return status;
}

} // namespace pvfs::pvfsd
