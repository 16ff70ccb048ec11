// pvfsd's Handler without /dev/pvfsd (pvfsd_core's MemoryChannel, the way
// another front end such as pvfs-fuse drives it) against a real cluster:
// ATTACH, the namespace and data ops through the channel's slots, what
// reached the servers as a library client sees it, requests it cannot trust
// refused with a clear errno, and serve() running a channel to its end.
#include <atf-c++.hpp>

#include "channel.hpp"
#include "handler.hpp"
#include "harness.hpp"
#include "memory_channel.hpp"
#include "upcall.hpp"

#include <pvfs/client.hpp>
#include <pvfs/pvfsd_dev.h>
#include <pvfs/unique_fd.hpp>

#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace pvfs;
using pvfs::test::require;

constexpr std::size_t slot_size = 64U << 10U;
constexpr std::size_t slot_count = 4;
constexpr std::uint64_t mount_id = 7;

// An upcall's bytes: the header, a fixed body and a tail (a downcall has
// the same layout).
template <typename Body>
std::vector<std::byte> message(std::uint16_t op, std::uint64_t tag, const Body &body,
                               std::string_view tail = {})
{
    pvfsd::Downcall d(op, tag);
    d.put(body);
    d.put_string(tail);
    return d.finish(0);
}

struct Reply {
    pvfsd_msg_hdr hdr{};
    std::vector<std::byte> body;

    template <typename Body> [[nodiscard]] Body as() const
    {
        require(body.size() >= sizeof(Body), "a downcall body of " + std::to_string(body.size()) +
                                                 " bytes, expected " +
                                                 std::to_string(sizeof(Body)));
        Body b{};
        std::memcpy(&b, body.data(), sizeof(Body));
        return b;
    }
};

Reply parse_reply(const std::vector<std::byte> &msg)
{
    Reply r;
    require(msg.size() >= sizeof(pvfsd_msg_hdr), "a downcall shorter than its header");
    std::memcpy(&r.hdr, msg.data(), sizeof(r.hdr));
    require(r.hdr.magic == PVFSD_DEV_MAGIC && r.hdr.length == msg.size(), "a malformed downcall");
    r.body.assign(msg.begin() + sizeof(pvfsd_msg_hdr), msg.end());
    return r;
}

void require_status(const Reply &r, int want, const std::string &what)
{
    require(r.hdr.status == want, what + ": status " + std::to_string(r.hdr.status) +
                                      ", expected " + std::to_string(want));
}

pvfsd_req_common common(std::uint32_t reply_slot = PVFSD_NO_SLOT)
{
    pvfsd_req_common c{};
    c.mount_id = mount_id;
    c.reply_slot = reply_slot;
    return c; // uid 0, gid 0: the cluster's root
}

// A cluster, and a Handler on its own loop fed through a MemoryChannel.
// Declared in this order so the handler goes first (its tasks refer to the
// channel's slots).
struct Rig {
    test::Cluster cluster{test::servers(1, 2),
                          "stripe_size = \"64KiB\"\nrequest_timeout = \"10s\"\n"};
    std::shared_ptr<client::Loop> loop = make_loop();
    pvfsd::MemoryChannel channel{slot_count, slot_size};
    std::unique_ptr<pvfsd::DaemonMetrics> metrics; // before handler, which is given it
    std::unique_ptr<pvfsd::Handler> handler = make_handler();
    std::uint64_t next_tag = 1;

    Rig() = default;
    // With metrics written to `metrics_file`.
    explicit Rig(const std::string &metrics_file)
        : metrics(std::make_unique<pvfsd::DaemonMetrics>("pvfsd", metrics_file,
                                                         std::chrono::seconds(10)))
    {
    }

    static std::shared_ptr<client::Loop> make_loop()
    {
        std::string error;
        auto l = client::Loop::create(error);
        require(l != nullptr, "Loop::create: " + error);
        return l;
    }
    std::unique_ptr<pvfsd::Handler> make_handler()
    {
        pvfsd::HandlerOptions o;
        o.key_file = cluster.files.key_path;
        o.metrics = metrics.get();
        return std::make_unique<pvfsd::Handler>(o, loop, channel);
    }

    // Pushes an upcall and runs the channel as serve() does until the
    // answer to it comes (20 s at most).
    Reply call(const std::vector<std::byte> &upcall)
    {
        pvfsd_msg_hdr h{};
        std::memcpy(&h, upcall.data(), sizeof(h));
        channel.push(upcall);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        const pvfsd::Channel::Starter start = [this](pvfsd::Upcall up) {
            handler->start(std::move(up));
        };
        while (std::chrono::steady_clock::now() < deadline) {
            require(channel.receive(start) == pvfsd::Channel::Received::drained,
                    "the channel did not drain");
            for (auto &d : handler->take_finished())
                channel.send(std::move(d), start);
            for (const auto &sent : channel.take_sent()) {
                Reply r = parse_reply(sent);
                require(r.hdr.tag == h.tag && r.hdr.op == h.op,
                        std::string("an answer to ") + pvfsd::op_name(r.hdr.op) + " tag " +
                            std::to_string(r.hdr.tag) + " while waiting for tag " +
                            std::to_string(h.tag));
                return r;
            }
            loop->poll(50);
            handler->run_timers();
        }
        require(false, std::string("no answer to ") + pvfsd::op_name(h.op) + " within 20 s");
        return {};
    }
    template <typename Body>
    Reply call(std::uint16_t op, const Body &body, std::string_view tail = {})
    {
        return call(message(op, next_tag++, body, tail));
    }

    [[nodiscard]] std::vector<std::byte> attach_upcall(std::uint64_t tag,
                                                       const std::string &options = "") const
    {
        pvfsd_attach_req a{};
        a.common = common();
        a.source_len = static_cast<std::uint32_t>(cluster.files.config_path.size());
        a.options_len = static_cast<std::uint32_t>(options.size());
        a.client_id = 0x1234567890abcdefULL;
        return message(PVFSD_OP_ATTACH, tag, a, cluster.files.config_path + options);
    }
    pvfsd_attr attach()
    {
        const Reply r = call(attach_upcall(next_tag++));
        require_status(r, 0, "ATTACH");
        const auto a = r.as<pvfsd_attach_resp>();
        require(a.root.handle == root_handle && a.root.type == PVFSD_TYPE_DIRECTORY,
                "ATTACH: the root is not the root directory");
        require(handler->mounts() == 1, "ATTACH: no mount");
        return a.root;
    }
    Reply lookup(Handle parent, std::string_view name)
    {
        pvfsd_name_req n{};
        n.common = common();
        n.parent = parent;
        n.name_len = static_cast<std::uint32_t>(name.size());
        return call(PVFSD_OP_LOOKUP, n, name);
    }
    Reply io(std::uint16_t op, Handle h, std::uint64_t offset, std::uint32_t length,
             std::uint32_t slot)
    {
        pvfsd_io_req q{};
        q.common = common();
        q.handle = h;
        q.offset = offset;
        q.length = length;
        q.slot = slot;
        return call(op, q);
    }
    std::span<std::byte> slot(std::uint32_t i)
    {
        return channel.slots().subspan(i * slot_size, slot_size);
    }
};

// The names of a READDIR answer's entries.
std::vector<std::string> names_of(const Reply &r)
{
    const auto resp = r.as<pvfsd_readdir_resp>();
    std::vector<std::string> names;
    std::size_t at = sizeof(resp);
    for (std::uint32_t i = 0; i < resp.count; ++i) {
        pvfsd_dirent d{};
        require(r.body.size() >= at + sizeof(d), "READDIR: an entry past the answer");
        std::memcpy(&d, r.body.data() + at, sizeof(d));
        require(r.body.size() >= at + sizeof(d) + d.name_len, "READDIR: a name past the answer");
        names.emplace_back(reinterpret_cast<const char *>(r.body.data() + at + sizeof(d)),
                           d.name_len);
        at += (sizeof(d) + d.name_len + 7) / 8 * 8;
    }
    return names;
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(file_ops);
ATF_TEST_CASE_BODY(file_ops)
{
    Rig rig;
    // HELLO is the device's own business: the handler refuses it.
    require_status(rig.call(PVFSD_OP_HELLO, pvfsd_hello{}), -EINVAL, "HELLO to the handler");
    rig.attach();
    require_status(rig.lookup(root_handle, "nothing"), -ENOENT, "LOOKUP of a missing name");

    pvfsd_create_req c{};
    c.common = common(0);
    c.parent = root_handle;
    c.name_len = 4;
    c.mode = 0640;
    c.exclusive = 1;
    const Reply created = rig.call(PVFSD_OP_CREATE, c, "file");
    require_status(created, 0, "CREATE");
    const auto cr = created.as<pvfsd_create_resp>();
    require(cr.created == 1 && cr.attr.type == PVFSD_TYPE_REGULAR && cr.attr.mode == 0640,
            "CREATE: not a new regular file of mode 0640");
    const Handle file = cr.attr.handle;
    const Reply found = rig.lookup(root_handle, "file");
    require_status(found, 0, "LOOKUP");
    require(found.as<pvfsd_attr_resp>().attr.handle == file, "LOOKUP: another handle");

    pvfsd_open_req o{};
    o.common = common();
    o.handle = file;
    o.gen = rig.next_tag;
    o.mode = PVFSD_OPEN_READ | PVFSD_OPEN_WRITE;
    require_status(rig.call(PVFSD_OP_OPEN, o), 0, "OPEN");

    // A whole slot at 0 and part of another after it, then both read back
    // into a third slot.
    const auto first = test::pattern(slot_size, 1);
    const auto second = test::pattern(1000, 2);
    std::ranges::copy(first, rig.slot(0).begin());
    std::ranges::copy(second, rig.slot(1).begin());
    Reply w = rig.io(PVFSD_OP_WRITE, file, 0, slot_size, 0);
    require_status(w, 0, "WRITE of a slot");
    require(w.as<pvfsd_io_resp>().done == slot_size, "WRITE: short");
    w = rig.io(PVFSD_OP_WRITE, file, slot_size, 1000, 1);
    require_status(w, 0, "WRITE of 1000 bytes");
    std::ranges::fill(rig.slot(2), std::byte{0});
    const Reply r = rig.io(PVFSD_OP_READ, file, slot_size - 500, 1500, 2);
    require_status(r, 0, "READ");
    require(r.as<pvfsd_io_resp>().done == 1500, "READ: not 1500 bytes");
    require(std::ranges::equal(rig.slot(2).first(500), std::span(first).last(500)) &&
                std::ranges::equal(rig.slot(2).subspan(500, 1000), second),
            "READ: other bytes than written");
    // Past the end: short, not zeros (no ZERO_FILL).
    const Reply tail = rig.io(PVFSD_OP_READ, file, slot_size + 900, 4096, 3);
    require_status(tail, 0, "READ at the end");
    require(tail.as<pvfsd_io_resp>().done == 100, "READ at the end: not 100 bytes");

    pvfsd_handle_req g{};
    g.common = common();
    g.handle = file;
    const Reply attr = rig.call(PVFSD_OP_GETATTR, g);
    require_status(attr, 0, "GETATTR");
    require(attr.as<pvfsd_attr_resp>().attr.size == slot_size + 1000, "GETATTR: wrong size");

    pvfsd_readdir_req d{};
    d.common = common();
    d.handle = root_handle;
    d.max_bytes = 4096;
    const Reply listing = rig.call(PVFSD_OP_READDIR, d);
    require_status(listing, 0, "READDIR");
    require(names_of(listing) == std::vector<std::string>{"file"} &&
                listing.as<pvfsd_readdir_resp>().eof == 1,
            "READDIR: not just 'file'");

    pvfsd_handle_req s{};
    s.common = common();
    const Reply st = rig.call(PVFSD_OP_STATFS, s);
    require_status(st, 0, "STATFS");
    require(st.as<pvfsd_statfs_resp>().blocks > 0 && st.as<pvfsd_statfs_resp>().namelen == 255,
            "STATFS: no space or no name length");

    pvfsd_close_req cl{};
    cl.common = common();
    cl.count = 1;
    const pvfsd_close_ref ref{file, o.gen};
    require_status(rig.call(PVFSD_OP_CLOSE, cl,
                            std::string_view(reinterpret_cast<const char *>(&ref), sizeof(ref))),
                   0, "CLOSE");

    // What the servers have, as a library client sees it.
    const auto c2 = rig.cluster.connect();
    Attr a;
    test::require_rc(c2->lookup(root_handle, "file", a), 0, "library lookup");
    std::vector<std::byte> back(slot_size + 1000);
    test::require_rc(c2->read(a.handle, 0, back), static_cast<std::int64_t>(back.size()),
                     "library read");
    require(std::ranges::equal(std::span(back).first(slot_size), first) &&
                std::ranges::equal(std::span(back).last(1000), second),
            "the servers hold other bytes than the handler wrote");

    require_status(rig.call(PVFSD_OP_DETACH, common()), 0, "DETACH");
    require(rig.handler->mounts() == 0, "DETACH: the mount stays");
    require_status(rig.lookup(root_handle, "file"), -ENOTCONN, "LOOKUP after DETACH");
}

ATF_TEST_CASE_WITHOUT_HEAD(bad_requests);
ATF_TEST_CASE_BODY(bad_requests)
{
    Rig rig;
    rig.attach();
    Attr a;
    const auto c = rig.cluster.connect();
    test::require_rc(c->create(root_handle, "f", 0644, true, {}, a), 0, "library create");
    // Slots that are not there, or a length past a slot.
    require_status(rig.io(PVFSD_OP_READ, a.handle, 0, 10, slot_count), -EINVAL,
                   "READ into slot 4 of 4");
    require_status(rig.io(PVFSD_OP_WRITE, a.handle, 0, slot_size + 1, 0), -EINVAL,
                   "WRITE of more than a slot");
    require_status(rig.io(PVFSD_OP_READ, a.handle, 0, 10, 0xffffffffU), -EINVAL,
                   "READ into slot 2^32-1");
    // Names the kernel never sends.
    require_status(rig.lookup(root_handle, "a/b"), -EINVAL, "LOOKUP of a/b");
    require_status(rig.lookup(root_handle, std::string(256, 'x')), -EINVAL,
                   "LOOKUP of a 256-byte name");
    pvfsd_name_req n{};
    n.common = common();
    n.parent = root_handle;
    n.name_len = 50;
    require_status(rig.call(PVFSD_OP_LOOKUP, n, "short"), -EINVAL,
                   "LOOKUP whose name runs past the message");
    // A body too short for its op.
    require_status(rig.call(PVFSD_OP_GETATTR, common()), -EINVAL, "GETATTR without a handle");
    pvfsd_readdir_req d{};
    d.common = common();
    d.handle = root_handle;
    d.max_bytes = 8;
    require_status(rig.call(PVFSD_OP_READDIR, d), -EINVAL, "READDIR with room for nothing");
    // Another mount's request.
    pvfsd_handle_req g{};
    g.common = common();
    g.common.mount_id = mount_id + 1;
    g.handle = root_handle;
    require_status(rig.call(PVFSD_OP_GETATTR, g), -ENOTCONN, "GETATTR of an unknown mount");
    // A handle nothing has.
    g.common.mount_id = mount_id;
    g.handle = a.handle + 1000;
    const Reply gone = rig.call(PVFSD_OP_GETATTR, g);
    require(gone.hdr.status == -ENOENT || gone.hdr.status == -ESTALE,
            "GETATTR of a missing handle: status " + std::to_string(gone.hdr.status));
    // Bytes that are no upcall never reach the handler.
    auto bad = message(PVFSD_OP_GETATTR, rig.next_tag++, g);
    bad[0] = std::byte{0};
    rig.channel.push(bad);
    rig.channel.push(message(PVFSD_OP_COUNT, rig.next_tag++, g));
    const pvfsd::Channel::Starter start = [&rig](pvfsd::Upcall up) {
        rig.handler->start(std::move(up));
    };
    require(rig.channel.receive(start) == pvfsd::Channel::Received::drained, "receive");
    require(rig.channel.malformed() == 2 && rig.handler->in_flight() == 0 &&
                rig.handler->take_finished().empty(),
            "malformed upcalls went to the handler (last error: " + rig.channel.last_error() + ")");
    // And the mount still works.
    require_status(rig.lookup(root_handle, "f"), 0, "LOOKUP after the bad requests");
}

// serve() runs a script to the channel's end: each answer pushes the next
// upcall.  SIGALRM through the signalfd bounds it.
ATF_TEST_CASE_WITHOUT_HEAD(serve_runs_a_channel);
ATF_TEST_CASE_BODY(serve_runs_a_channel)
{
    Rig rig;
    sigset_t alarm_set;
    ::sigemptyset(&alarm_set);
    ::sigaddset(&alarm_set, SIGALRM);
    ::sigprocmask(SIG_BLOCK, &alarm_set, nullptr); // NOLINT(concurrency-mt-unsafe)
    const UniqueFd sig(::signalfd(-1, &alarm_set, SFD_NONBLOCK | SFD_CLOEXEC));
    require(sig.valid(), "signalfd");

    std::vector<std::vector<std::byte>> script;
    script.push_back(rig.attach_upcall(1));
    pvfsd_handle_req g{};
    g.common = common();
    g.handle = root_handle;
    script.push_back(message(PVFSD_OP_GETATTR, 2, g));
    pvfsd_mknod_req m{};
    m.common = common(1);
    m.parent = root_handle;
    m.name_len = 3;
    m.mode = 0755;
    m.type = PVFSD_TYPE_DIRECTORY;
    script.push_back(message(PVFSD_OP_MKDIR, 3, m, "dir"));
    script.push_back(message(PVFSD_OP_STATFS, 4, g));
    std::size_t next = 1;
    rig.channel.on_send = [&](const std::vector<std::byte> & /*downcall*/) {
        if (next < script.size())
            rig.channel.push(script[next++]);
        else
            rig.channel.close();
    };
    rig.channel.push(script[0]);
    bool alarmed = false;
    pvfsd::ServeOptions so;
    so.signal_fd = sig.get();
    so.on_signal = [&alarmed](int signo) {
        alarmed = signo == SIGALRM;
        return alarmed;
    };
    ::alarm(20);
    const int rc = pvfsd::serve(rig.channel, *rig.handler, *rig.loop, so);
    ::alarm(0);
    require(!alarmed, "serve() did not end within 20 s");
    require(rc == 0, "serve() returned " + std::to_string(rc));
    const auto sent = rig.channel.take_sent();
    require(sent.size() == script.size(), "serve() sent " + std::to_string(sent.size()) +
                                              " answers, expected " +
                                              std::to_string(script.size()));
    for (std::size_t i = 0; i < sent.size(); ++i) {
        const Reply r = parse_reply(sent[i]);
        require(r.hdr.tag == i + 1 && r.hdr.status == 0,
                std::string("answer ") + std::to_string(i) + ": " + pvfsd::op_name(r.hdr.op) +
                    " tag " + std::to_string(r.hdr.tag) + " status " +
                    std::to_string(r.hdr.status));
    }
    Attr a;
    test::require_rc(rig.cluster.connect()->lookup(root_handle, "dir", a), 0,
                     "the directory serve() made");
}

// The metrics file (--metrics-file) counts each upcall's answer by op and
// errno, times it, and counts the bytes of READ and WRITE; bad options are
// refused at start.
ATF_TEST_CASE_WITHOUT_HEAD(metrics);
ATF_TEST_CASE_BODY(metrics)
{
    std::string error;
    const auto refused = [&](const std::string &file, const std::string &interval,
                             const std::string &why) {
        const auto m = pvfsd::DaemonMetrics::from_options("pvfsd", file, interval, error);
        require(m == nullptr && error.find(why) != std::string::npos,
                "--metrics-file '" + file + "' --metrics-interval '" + interval +
                    "': not refused with '" + why + "' but '" + error + "'");
    };
    refused("", "5s", "without --metrics-file");
    refused("m.prom", "5ms", "out of range");
    refused("m.prom", "5", "unit");
    refused("a\nb.prom", "", "control character");
    refused("/tmp/", "", "names a directory");
    refused("/nonexistent-dir/m.prom", "", "metrics file");
    require(pvfsd::DaemonMetrics::from_options("pvfsd", "", "", error) == nullptr && error.empty(),
            "no --metrics-file is not 'no metrics'");

    const std::string path = std::filesystem::current_path() / "pvfsd.prom";
    {
        Rig rig(path);
        rig.attach();
        require_status(rig.lookup(root_handle, "nothing"), -ENOENT, "LOOKUP of a missing name");
        pvfsd_create_req c{};
        c.common = common(0);
        c.parent = root_handle;
        c.name_len = 4;
        c.mode = 0640;
        c.exclusive = 1;
        const Reply created = rig.call(PVFSD_OP_CREATE, c, "file");
        require_status(created, 0, "CREATE");
        const Handle file = created.as<pvfsd_create_resp>().attr.handle;
        std::ranges::copy(test::pattern(slot_size, 1), rig.slot(0).begin());
        require_status(rig.io(PVFSD_OP_WRITE, file, 0, slot_size, 0), 0, "WRITE");
        require_status(rig.io(PVFSD_OP_READ, file, 100, 1500, 1), 0, "READ");
        require_status(rig.io(PVFSD_OP_READ, file, 200, 1500, 2), 0, "READ");
        require(rig.metrics->write(error) == 0, "metrics write: " + error);
        std::stringstream text;
        text << std::ifstream(path).rdbuf();
        const std::string t = text.str();
        std::array<char, 256> host{};
        require(::gethostname(host.data(), host.size() - 1) == 0, "gethostname");
        const std::string who = std::string(R"(daemon="pvfsd",host=")") + host.data() + R"(")";
        const auto has = [&](const std::string &line) {
            require(t.find("\n" + line + "\n") != std::string::npos,
                    "no line '" + line + "' in:\n" + t.substr(0, 1500));
        };
        has("pvfs_client_requests_total{" + who + R"(,op="LOOKUP"} 1)");
        has("pvfs_client_errors_total{" + who + R"(,op="LOOKUP",errno="ENOENT"} 1)");
        has("pvfs_client_requests_total{" + who + R"(,op="READ"} 2)");
        has("pvfs_client_request_duration_seconds_count{" + who + R"(,op="WRITE"} 1)");
        has("pvfs_client_data_bytes_total{" + who + R"(,direction="write"} )" +
            std::to_string(slot_size));
        has("pvfs_client_data_bytes_total{" + who + R"(,direction="read"} 3000)");
        has("pvfs_client_requests_total{" + who + R"(,op="STATFS"} 0)");
        has("pvfs_client_mounts{" + who + "} 1");
        has("pvfs_client_upcalls_in_flight{" + who + "} 0");
        require(t.find(R"(errno="ENOENT"} 1)") == t.rfind(R"(errno="ENOENT"} 1)"),
                "an ENOENT counted for another op too:\n" + t);
    }
    require(!std::filesystem::exists(path), "the metrics file stayed after the daemon went");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, file_ops);
    ATF_ADD_TEST_CASE(tcs, bad_requests);
    ATF_ADD_TEST_CASE(tcs, serve_runs_a_channel);
    ATF_ADD_TEST_CASE(tcs, metrics);
}
