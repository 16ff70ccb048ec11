// pvfsd's message handling without a kernel: upcall parsing refuses every
// malformed message, tails are bounds-checked, downcalls are well formed,
// and the handler answers bad bodies and unknown mounts with an errno
// instead of trusting them.
#include <atf-c++.hpp>

#include "handler.hpp"
#include "memory_channel.hpp"
#include "mount_options.hpp"
#include "upcall.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace {

using pvfs::pvfsd::Downcall;
using pvfs::pvfsd::Handler;
using pvfs::pvfsd::Upcall;

template <typename Body>
std::vector<std::byte> message(std::uint16_t op, std::uint64_t tag, const Body &body,
                               std::string_view tail = {})
{
    Downcall d(op, tag); // an upcall has the same layout
    d.put(body);
    d.put_string(tail);
    return d.finish(0);
}

pvfsd_msg_hdr header_of(const std::vector<std::byte> &msg)
{
    pvfsd_msg_hdr h{};
    std::memcpy(&h, msg.data(), sizeof(h));
    return h;
}

void set_header(std::vector<std::byte> &msg, const pvfsd_msg_hdr &h)
{
    std::memcpy(msg.data(), &h, sizeof(h));
}

std::vector<std::byte> name_upcall(std::uint16_t op, std::uint64_t mount, std::string_view name)
{
    pvfsd_name_req r{};
    r.common.mount_id = mount;
    r.parent = 1;
    r.name_len = static_cast<std::uint32_t>(name.size());
    return message(op, 9, r, name);
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(parse_accepts_a_good_upcall);
ATF_TEST_CASE_BODY(parse_accepts_a_good_upcall)
{
    const auto msg = name_upcall(PVFSD_OP_LOOKUP, 3, "file");
    std::string why;
    const auto up = Upcall::parse(msg, why);
    ATF_REQUIRE(up.has_value());
    ATF_REQUIRE_EQ(up->op(), PVFSD_OP_LOOKUP);
    ATF_REQUIRE_EQ(up->tag(), 9U);
    const auto req = up->body<pvfsd_name_req>();
    ATF_REQUIRE(req.has_value());
    ATF_REQUIRE_EQ(req->common.mount_id, 3U);
    ATF_REQUIRE_EQ(std::string(*up->tail(sizeof(pvfsd_name_req), 0, 4)), "file");
    // a tail beyond the message is refused, also with an overflowing offset
    ATF_REQUIRE(!up->tail(sizeof(pvfsd_name_req), 0, 5).has_value());
    ATF_REQUIRE(!up->tail(sizeof(pvfsd_name_req), 2, 3).has_value());
    ATF_REQUIRE(!up->tail(sizeof(pvfsd_name_req), ~std::size_t{0}, 1).has_value());
    ATF_REQUIRE(!up->body<pvfsd_setattr_req>().has_value()); // larger than the body
}

ATF_TEST_CASE_WITHOUT_HEAD(parse_refuses_malformed_messages);
ATF_TEST_CASE_BODY(parse_refuses_malformed_messages)
{
    const auto good = name_upcall(PVFSD_OP_LOOKUP, 3, "file");
    std::string why;
    ATF_REQUIRE(!Upcall::parse(std::span(good).first(10), why).has_value());
    ATF_REQUIRE(why.find("shorter than a header") != std::string::npos);

    auto bad = good;
    auto h = header_of(bad);
    h.magic ^= 1U;
    set_header(bad, h);
    ATF_REQUIRE(!Upcall::parse(bad, why).has_value());
    ATF_REQUIRE_EQ(why, "bad magic");

    bad = good;
    h = header_of(bad);
    h.version = PVFSD_DEV_MAJOR + 1;
    set_header(bad, h);
    ATF_REQUIRE(!Upcall::parse(bad, why).has_value());
    ATF_REQUIRE(why.find("channel version") != std::string::npos);

    bad = good;
    h = header_of(bad);
    h.length += 1;
    set_header(bad, h);
    ATF_REQUIRE(!Upcall::parse(bad, why).has_value());

    for (const std::uint16_t op :
         {std::uint16_t{0}, std::uint16_t{PVFSD_OP_COUNT}, std::uint16_t{999}}) {
        bad = good;
        h = header_of(bad);
        h.op = op;
        set_header(bad, h);
        ATF_REQUIRE(!Upcall::parse(bad, why).has_value());
        ATF_REQUIRE(why.find("unknown op") != std::string::npos);
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(downcall_status_rules);
ATF_TEST_CASE_BODY(downcall_status_rules)
{
    Downcall d(PVFSD_OP_GETATTR, 5);
    d.put(pvfsd_attr_resp{});
    const auto ok = d.finish(0);
    ATF_REQUIRE_EQ(ok.size(), sizeof(pvfsd_msg_hdr) + sizeof(pvfsd_attr_resp));
    ATF_REQUIRE_EQ(header_of(ok).length, ok.size());
    ATF_REQUIRE_EQ(header_of(ok).tag, 5U);
    ATF_REQUIRE_EQ(header_of(ok).magic, PVFSD_DEV_MAGIC);

    const auto err = d.finish(-ENOENT); // an error carries no body
    ATF_REQUIRE_EQ(err.size(), sizeof(pvfsd_msg_hdr));
    ATF_REQUIRE_EQ(header_of(err).status, -ENOENT);
    // statuses the kernel would refuse become EIO
    ATF_REQUIRE_EQ(header_of(d.finish(7)).status, -EIO);
    ATF_REQUIRE_EQ(header_of(d.finish(-5000)).status, -EIO);
}

ATF_TEST_CASE_WITHOUT_HEAD(names);
ATF_TEST_CASE_BODY(names)
{
    using pvfs::pvfsd::valid_name;
    ATF_REQUIRE(valid_name("a"));
    ATF_REQUIRE(valid_name(std::string(255, 'x')));
    ATF_REQUIRE(!valid_name(""));
    ATF_REQUIRE(!valid_name(std::string(256, 'x')));
    ATF_REQUIRE(!valid_name("a/b"));
    ATF_REQUIRE(!valid_name(std::string_view("a\0b", 3)));
}

ATF_TEST_CASE_WITHOUT_HEAD(handler_refuses_what_it_cannot_trust);
ATF_TEST_CASE_BODY(handler_refuses_what_it_cannot_trust)
{
    pvfs::pvfsd::MemoryChannel channel(1, 1U << 16U);
    std::string why;
    auto loop = pvfs::client::Loop::create(why);
    ATF_REQUIRE(loop != nullptr);
    Handler handler({}, loop, channel);
    // Each of these is answered without waiting for any server.
    auto answer = [&](const std::vector<std::byte> &msg) {
        auto up = Upcall::parse(msg, why);
        ATF_REQUIRE(up.has_value());
        const auto tag = up->tag();
        const auto op = up->op();
        handler.start(std::move(*up));
        ATF_REQUIRE_EQ(handler.in_flight(), 0U);
        auto replies = handler.take_finished();
        ATF_REQUIRE_EQ(replies.size(), 1U);
        const auto &reply = replies.front();
        ATF_REQUIRE(reply.size() >= sizeof(pvfsd_msg_hdr));
        ATF_REQUIRE_EQ(header_of(reply).tag, tag);
        ATF_REQUIRE_EQ(header_of(reply).op, op);
        return header_of(reply).status;
    };
    // a mount that never attached
    ATF_REQUIRE_EQ(answer(name_upcall(PVFSD_OP_LOOKUP, 42, "x")), -ENOTCONN);
    // a body too short for its op
    ATF_REQUIRE_EQ(answer(message(PVFSD_OP_GETATTR, 1, std::uint32_t{0})), -EINVAL);
    // ATTACH whose source length runs past the message
    pvfsd_attach_req a{};
    a.common.mount_id = 1;
    a.source_len = 100;
    ATF_REQUIRE_EQ(answer(message(PVFSD_OP_ATTACH, 2, a, "tcp://x:1/fs")), -EINVAL);
    // ATTACH to nowhere: a clear error, no crash
    const std::string nowhere = "tcp://127.0.0.1:9/nowhere-fs";
    a.source_len = static_cast<std::uint32_t>(nowhere.size());
    ATF_REQUIRE_EQ(answer(message(PVFSD_OP_ATTACH, 3, a, nowhere)), -ECONNREFUSED);
    ATF_REQUIRE_EQ(handler.mounts(), 0U);
    // CANCEL of an op not in flight: nothing to do, no answer
    const auto cancel = message(PVFSD_OP_CANCEL, 4, pvfsd_cancel_req{7});
    auto up = Upcall::parse(cancel, why);
    ATF_REQUIRE(up.has_value());
    handler.start(std::move(*up));
    ATF_REQUIRE(handler.take_finished().empty());
    ATF_REQUIRE_EQ(handler.cancels(), 0U);
}

// ATTACH's client_id and options text become the mount's client policy.
ATF_TEST_CASE_WITHOUT_HEAD(mount_options);
ATF_TEST_CASE_BODY(mount_options)
{
    using namespace std::chrono_literals;
    using pvfs::pvfsd::apply_mount_options;
    pvfsd_attach_req a{};
    a.common.mount_id = 7;
    a.client_id = 0x1234567890abcdefULL;
    const std::string source = "tcp://127.0.0.1:3334/fs";

    pvfs::client::Options hard;
    auto p = apply_mount_options(a, source, "hard,timeo=30,retrans=2", hard);
    ATF_REQUIRE(hard.hard);
    ATF_REQUIRE(!p.soft);
    ATF_REQUIRE_EQ(p.client_id, a.client_id);
    ATF_REQUIRE_EQ(hard.client_id, a.client_id);
    ATF_REQUIRE_EQ(hard.caller_slots, PVFSD_REPLY_SLOTS);
    ATF_REQUIRE(hard.retry_timeout == 30s);
    ATF_REQUIRE(hard.request_timeout == 0ms); // the config's; hard has no limit anyway
    ATF_REQUIRE(hard.session_owner.find(":7:tcp://127.0.0.1:3334/fs") != std::string::npos);
    ATF_REQUIRE(p.key_file.empty() && hard.key_file.empty()); // the daemon's key
    // a hard mount's op never answers ETIMEDOUT; if one came, EIO
    ATF_REQUIRE_EQ(pvfs::pvfsd::kernel_status(-ETIMEDOUT, p), -EIO);
    ATF_REQUIRE_EQ(pvfs::pvfsd::kernel_status(-ENOENT, p), -ENOENT);
    // a hard mount's transport errors stay transient for the kernel
    ATF_REQUIRE_EQ(pvfs::pvfsd::kernel_status(-ECONNREFUSED, p), -ECONNREFUSED);

    pvfs::client::Options soft;
    p = apply_mount_options(a, source, "soft,timeo=4,retrans=1,bogus", soft);
    ATF_REQUIRE(!soft.hard);
    ATF_REQUIRE(p.soft && !p.softerr);
    ATF_REQUIRE(soft.request_timeout == 8s);
    ATF_REQUIRE(soft.retry_timeout == 4s);
    ATF_REQUIRE_EQ(pvfs::pvfsd::kernel_status(-ETIMEDOUT, p), -EIO);
    // a server that stayed away: the soft limit's error, final for writeback
    ATF_REQUIRE_EQ(pvfs::pvfsd::kernel_status(-ECONNREFUSED, p), -EIO);
    ATF_REQUIRE_EQ(pvfs::pvfsd::kernel_status(-EHOSTUNREACH, p), -EIO);
    ATF_REQUIRE_EQ(pvfs::pvfsd::kernel_status(-ENOSPC, p), -ENOSPC);

    pvfs::client::Options softerr;
    p = apply_mount_options(a, source, "soft,softerr,timeo=2,retrans=0", softerr);
    ATF_REQUIRE(p.soft && p.softerr);
    ATF_REQUIRE(softerr.request_timeout == 2s);
    ATF_REQUIRE_EQ(pvfs::pvfsd::kernel_status(-ETIMEDOUT, p), -ETIMEDOUT);
    ATF_REQUIRE_EQ(pvfs::pvfsd::kernel_status(-ECONNRESET, p), -ETIMEDOUT);

    // No options text (an older module's): hard, NFS's timeo and retrans.
    pvfs::client::Options none;
    p = apply_mount_options(a, source, "", none);
    ATF_REQUIRE(none.hard && !p.soft);
    ATF_REQUIRE(none.retry_timeout == 30s);

    // key=PATH: the mount's own key file
    pvfs::client::Options keyed;
    keyed.key_file = "/etc/pvfs/pvfs.key";
    p = apply_mount_options(a, source, "hard,timeo=30,retrans=2,key=/etc/pvfs/node17.key", keyed);
    ATF_REQUIRE_EQ(p.key_file, "/etc/pvfs/node17.key");
    ATF_REQUIRE_EQ(keyed.key_file, "/etc/pvfs/node17.key");
    ATF_REQUIRE(keyed.hard && keyed.retry_timeout == 30s);

    // The owner fits the servers' limit however long the source.
    const std::string owner = pvfs::pvfsd::session_owner(std::string(1024, 's'), 99);
    ATF_REQUIRE_EQ(owner.size(), 255U);
    ATF_REQUIRE(owner.find(":99:s") != std::string::npos);
}

// A mount's key file is checked as every key file is, and each refusal
// has its errno for the mount to fail with.
ATF_TEST_CASE_WITHOUT_HEAD(mount_key_file);
ATF_TEST_CASE_BODY(mount_key_file)
{
    using pvfs::pvfsd::check_key_file;
    const std::string dir = std::filesystem::current_path().string();
    auto write = [&](const std::string &name, const std::string &text, mode_t mode) {
        std::string path = dir + "/" + name;
        std::ofstream(path) << text;
        ATF_REQUIRE_EQ(::chmod(path.c_str(), mode), 0);
        return path;
    };
    const std::string hex(64, 'a');
    std::string error;
    ATF_REQUIRE_EQ(check_key_file(write("good.key", "node17 " + hex + "\n", 0600), error), 0);
    ATF_REQUIRE_EQ(check_key_file(write("cluster.key", hex + "\n", 0600), error), 0);

    ATF_REQUIRE_EQ(check_key_file(dir + "/missing.key", error), -ENOENT);
    ATF_REQUIRE(error.find("missing.key") != std::string::npos);
    const std::string open = write("open.key", "node17 " + hex + "\n", 0644);
    ATF_REQUIRE_EQ(check_key_file(open, error), -EACCES);
    ATF_REQUIRE(error.find("0644") != std::string::npos);
    ATF_REQUIRE_EQ(check_key_file(write("short.key", "node17 abc\n", 0600), error), -EINVAL);
    ATF_REQUIRE(error.find("short.key") != std::string::npos);
    ATF_REQUIRE_EQ(check_key_file(dir, error), -EINVAL); // a directory
    ATF_REQUIRE_EQ(check_key_file("good.key", error), -EINVAL);
    ATF_REQUIRE(error.find("absolute") != std::string::npos);
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, mount_key_file);
    ATF_ADD_TEST_CASE(tcs, mount_options);
    ATF_ADD_TEST_CASE(tcs, parse_accepts_a_good_upcall);
    ATF_ADD_TEST_CASE(tcs, parse_refuses_malformed_messages);
    ATF_ADD_TEST_CASE(tcs, downcall_status_rules);
    ATF_ADD_TEST_CASE(tcs, names);
    ATF_ADD_TEST_CASE(tcs, handler_refuses_what_it_cannot_trust);
}
