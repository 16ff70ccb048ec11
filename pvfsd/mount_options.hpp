// What a mount's ATTACH says about how its requests should be sent: the
// kernel's client_id for the servers' reply cache, and the hard/soft policy
// of its mount options (docs/pvfsd.md "Mount options").
#pragma once

#include <pvfs/client.hpp>
#include <pvfs/pvfsd_dev.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace pvfs::pvfsd {

// What pvfsd itself keeps of a mount's options.
struct MountPolicy {
    std::uint64_t client_id = 0; // the kernel's; 0: none (changes carry no ids)
    bool soft = false;
    bool softerr = false; // soft, and a timeout is ETIMEDOUT instead of EIO
    // key=PATH: the mount's own key file; empty: the daemon's (--key-file).
    std::string key_file;
};

// Sets the exactly-once and retry fields of `o` from an ATTACH: its
// client_id, a session owner naming this machine and mount, and from the
// options text ("hard", "soft", "softerr", "timeo=T", "retrans=N",
// "key=PATH"; unknown ones are logged and ignored): hard waits for the
// servers however long it takes, soft gives up after timeo * (retrans + 1);
// both send a request again after timeo without an answer.  key=PATH sets
// `o.key_file` (check_key_file first: connecting only says it failed).
MountPolicy apply_mount_options(const pvfsd_attach_req &req, std::string_view source,
                                std::string_view options, client::Options &o);

// Loads a mount's key file with the checks of every key file (a regular
// file owned by root or this euid, mode 0600, a key inside): 0, or the
// errno the mount fails with and `error` saying why, naming the file:
// -ENOENT (or open's own errno) when it is not there, -EACCES when its
// owner or mode is wrong, -EINVAL when it holds no key or the path is not
// absolute.
int check_key_file(const std::string &path, std::string &error);

// "<machine id>:<mount id>:<source>", at most 255 bytes: the same mount of
// this boot after a pvfsd restart, another client after a reboot.
std::string session_owner(std::string_view source, std::uint64_t mount_id);

// The status a mount's op answers the kernel with: on a soft mount every
// error of the way to the servers (refused, unreachable, timed out) is EIO,
// or ETIMEDOUT with softerr; a hard mount's requests do not time out (one
// that did is EIO), and its other transport errors pass, for the kernel to
// try again.
int kernel_status(int status, const MountPolicy &policy);

} // namespace pvfs::pvfsd
