#include "fuse_channel.hpp"
#include "fuse_ops.hpp"

#include <pvfs/gossip.hpp>
#include <pvfs/types.hpp>

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

namespace pvfs::fuse {

namespace {

namespace gossip = pvfs::gossip;
using detail::message;
using detail::replied;

static_assert(FUSE_ROOT_ID == pvfs::root_handle,
              "FUSE's root node id is pvfs's root handle: node ids are handles");

std::uint64_t random_client_id()
{
    std::uint64_t id = 0;
    while (id == 0) {
        if (::getrandom(&id, sizeof(id), 0) != static_cast<ssize_t>(sizeof(id)))
            id = 0;
    }
    return id;
}

double seconds(std::chrono::milliseconds ms)
{
    return std::chrono::duration<double>(ms).count();
}

// A path as /proc/self/mountinfo writes it back (space, tab, newline and
// backslash as octal escapes).
std::string unescape_mountinfo(std::string_view s)
{
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 3 < s.size()) {
            const std::string oct(s.substr(i + 1, 3));
            char *end = nullptr;
            const long c = std::strtol(oct.c_str(), &end, 8);
            if (end == oct.c_str() + 3) {
                out.push_back(static_cast<char>(c));
                i += 3;
                continue;
            }
        }
        out.push_back(s[i]);
    }
    return out;
}

// "major:minor" of the file system mounted on `mountpoint` (the last
// mount there), from the mount table: a stat of it would ask this very
// process, which is not serving yet.
std::optional<std::string> device_of(const std::string &mountpoint)
{
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    std::optional<std::string> dev;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string id;
        std::string parent;
        std::string majmin;
        std::string root;
        std::string point;
        if (fields >> id >> parent >> majmin >> root >> point &&
            unescape_mountinfo(point) == mountpoint)
            dev = majmin;
    }
    return dev;
}

} // namespace

FuseChannel::FuseChannel(FuseSettings settings)
    : settings_(std::move(settings)), slots_(settings_.slots * settings_.slot_size),
      client_id_(random_client_id()), mount_id_(random_client_id() | (1ULL << 63U))
{
    for (std::size_t i = settings_.slots; i > 0; --i)
        free_slots_.push_back(static_cast<std::uint32_t>(i - 1));
    for (std::uint32_t i = PVFSD_REPLY_SLOTS; i > 0; --i)
        free_reply_slots_.push_back(i - 1);
}

FuseChannel::~FuseChannel()
{
    if (behind_total_ > 0)
        gossip::error(gossip::Mask::pvfsd,
                      "{} writes answered already never reached the servers (pvfs-fuse stopped "
                      "before they were done): their files' contents are older than their "
                      "writers were told",
                      behind_total_);
    // Every request still waiting gets an answer, which frees it.
    for (auto &[tag, p] : pending_) {
        if (p->req != nullptr)
            fuse_reply_err(p->req, EIO);
    }
    pending_.clear();
    for (auto &[tag, l] : listings_)
        fuse_reply_err(l->req, EIO);
    listings_.clear();
    unmount();
    if (session_ != nullptr)
        fuse_session_destroy(session_);
    // libfuse allocates the request buffer with malloc and leaves freeing it
    // to the loop (as its own fuse_session_loop does).
    std::free(buf_.mem); // NOLINT(cppcoreguidelines-no-malloc,cppcoreguidelines-owning-memory)
}

void FuseChannel::unmount()
{
    if (mounted_) {
        fuse_session_unmount(session_);
        mounted_ = false;
    }
}

bool FuseChannel::mount(const std::vector<std::string> &options, const std::string &mountpoint,
                        std::string &error)
{
    // libfuse takes argv as C strings it may rearrange: copies of ours.
    std::vector<std::vector<char>> strings;
    std::vector<char *> argv;
    strings.reserve(options.size());
    argv.reserve(options.size());
    for (const std::string &a : options) {
        strings.emplace_back(a.begin(), a.end());
        strings.back().push_back('\0');
    }
    for (auto &str : strings)
        argv.push_back(str.data());
    fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
    // As the mount table will name it (before the mount: a look at it
    // afterwards would ask this process).
    std::error_code ec;
    mountpoint_ = std::filesystem::weakly_canonical(mountpoint, ec).string();
    if (ec)
        mountpoint_ = mountpoint;
    session_ = fuse_session_new(&args, &Ops::table(), sizeof(fuse_lowlevel_ops), this);
    const int rc = session_ != nullptr ? fuse_session_mount(session_, mountpoint.c_str()) : -1;
    fuse_opt_free_args(&args);
    if (session_ == nullptr) {
        error = "libfuse refused the options (its message is above)";
        return false;
    }
    if (rc != 0) {
        error = "cannot mount on " + mountpoint + " (libfuse's message is above)";
        return false;
    }
    mounted_ = true;
    // serve() reads it until EAGAIN, which libfuse passes through.
    const int fd = fuse_session_fd(session_);
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        error = std::string("/dev/fuse: ") + strerrordesc_np(errno);
        return false;
    }
    return true;
}

std::unique_ptr<FuseChannel::Pending> FuseChannel::pending(fuse_req_t req, std::uint16_t op,
                                                           fuse_ino_t ino)
{
    auto p = std::make_unique<Pending>();
    p->tag = next_tag();
    p->op = op;
    p->req = req;
    p->ino = ino;
    return p;
}

int FuseChannel::fd() const
{
    return session_ != nullptr ? fuse_session_fd(session_) : -1;
}

pvfsd_req_common FuseChannel::common_of(fuse_req_t req)
{
    pvfsd_req_common c{};
    c.reply_slot = PVFSD_NO_SLOT;
    if (req == nullptr) {
        c.fsuid = ::geteuid();
        c.fsgid = ::getegid();
        return c;
    }
    c.mount_id = static_cast<const FuseChannel *>(fuse_req_userdata(req))->mount_id_;
    const fuse_ctx *ctx = fuse_req_ctx(req);
    c.fsuid = ctx->uid;
    c.fsgid = ctx->gid;
    // The caller's groups, as pvfs.ko sends them: libfuse reads them from
    // /proc (not there for the kernel's own requests: none then).
    std::array<gid_t, PVFSD_MAX_GROUPS> groups{};
    const int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
    if (n > 0) {
        c.ngroups = std::min<std::uint32_t>(static_cast<std::uint32_t>(n), PVFSD_MAX_GROUPS);
        std::copy_n(groups.begin(), c.ngroups, std::begin(c.groups));
    }
    return c;
}

double FuseChannel::attr_timeout(std::uint32_t type) const
{
    return seconds(type == PVFSD_TYPE_DIRECTORY ? settings_.attr_timeout_dir
                                                : settings_.attr_timeout_file);
}

int FuseChannel::attach(pvfsd::Handler &handler, client::Loop &loop, std::string &error)
{
    pvfsd_attach_req a{};
    a.common = common_of(nullptr);
    a.common.mount_id = mount_id_;
    a.source_len = static_cast<std::uint32_t>(settings_.source.size());
    a.options_len = static_cast<std::uint32_t>(settings_.attach_options.size());
    a.client_id = client_id_;
    auto p = std::make_unique<Pending>();
    p->tag = next_tag();
    p->op = PVFSD_OP_ATTACH;
    const std::uint64_t tag = p->tag;
    const Starter st = [&handler](pvfsd::Upcall up) { handler.start(std::move(up)); };
    start_ = &st;
    start(std::move(p),
          message(PVFSD_OP_ATTACH, tag, a, settings_.source + settings_.attach_options));
    start_ = nullptr;
    // The Handler's ATTACH tries once, within the request timeout: this
    // bound only catches a bug.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (attach_status_ > 0 && std::chrono::steady_clock::now() < deadline) {
        for (auto &d : handler.take_finished())
            send(std::move(d), st);
        if (attach_status_ <= 0)
            break;
        loop.poll(handler.idle_ms(100));
        handler.run_timers();
    }
    if (attach_status_ > 0) {
        error = "no answer to the ATTACH of " + settings_.source + " within 5 minutes";
        return -ETIMEDOUT;
    }
    if (attach_status_ < 0)
        error = "cannot attach " + settings_.source + ": " + client::error_text(attach_status_);
    return attach_status_;
}

void FuseChannel::start(std::unique_ptr<Pending> p, std::vector<std::byte> upcall)
{
    if (p->op == PVFSD_OP_GETATTR && park_behind_writes(p, Via::plain, upcall))
        return;
    std::string why;
    auto up = pvfsd::Upcall::parse(upcall, why);
    if (!up || start_ == nullptr) {
        // Our own message: either is a bug, which must not hang the caller.
        gossip::error(gossip::Mask::dev, "{} tag {} not started: {}", pvfsd::op_name(p->op), p->tag,
                      up ? "no Handler at hand" : why);
        if (p->req != nullptr)
            replied(fuse_reply_err(p->req, EIO), "an upcall that could not start");
        if (p->reply_slot < PVFSD_REPLY_SLOTS)
            free_reply_slots_.push_back(p->reply_slot);
        if (p->slot < settings_.slots)
            free_slots_.push_back(p->slot);
        return;
    }
    Pending &ref = *p;
    ref.started = true;
    if (ref.req != nullptr)
        tag_of_[ref.req] = ref.tag;
    pending_[ref.tag] = std::move(p);
    (*start_)(std::move(*up));
    // After the start: an interrupt that came already cancels it at once.
    if (ref.req != nullptr)
        fuse_req_interrupt_func(ref.req, &Ops::interrupt_cb, nullptr);
}

void FuseChannel::start_change(std::unique_ptr<Pending> p, std::vector<std::byte> upcall)
{
    // Before it takes a reply slot: a SETATTR or FSYNC behind writes.
    if (park_behind_writes(p, Via::change, upcall))
        return;
    if (free_reply_slots_.empty()) {
        // As pvfs.ko's callers wait for a reply slot, but on no thread.
        p->message = std::move(upcall);
        p->started = false;
        const std::uint64_t tag = p->tag;
        fuse_req_t req = p->req;
        if (req != nullptr)
            tag_of_[req] = tag;
        pending_[tag] = std::move(p);
        waiting_changes_.push_back(tag);
        if (req != nullptr)
            fuse_req_interrupt_func(req, &Ops::interrupt_cb, nullptr);
        return;
    }
    p->reply_slot = free_reply_slots_.back();
    free_reply_slots_.pop_back();
    // The servers' reply cache wants a slot's ids to grow: a new tag now,
    // under the slot, as pvfs.ko takes one with it.
    p->tag = next_tag();
    pvfsd_msg_hdr hdr{};
    pvfsd_req_common common{};
    if (upcall.size() < sizeof(hdr) + sizeof(common)) {
        gossip::error(gossip::Mask::dev, "{}: a change of {} bytes", pvfsd::op_name(p->op),
                      upcall.size());
        upcall.clear(); // start() refuses it
    } else {
        std::memcpy(&hdr, upcall.data(), sizeof(hdr));
        std::memcpy(&common, upcall.data() + sizeof(hdr), sizeof(common));
        hdr.tag = p->tag;
        common.reply_slot = p->reply_slot;
        std::memcpy(upcall.data(), &hdr, sizeof(hdr));
        std::memcpy(upcall.data() + sizeof(hdr), &common, sizeof(common));
    }
    start(std::move(p), std::move(upcall));
}

void FuseChannel::start_data(std::unique_ptr<Pending> p, std::span<const std::byte> write_data)
{
    if (p->req != nullptr && writes_in_flight(p->ino)) {
        // Parked, a WRITE keeps its bytes (the kernel's buffer is reused).
        if (p->op == PVFSD_OP_WRITE && p->data.empty())
            p->data.assign(write_data.begin(), write_data.end());
        std::vector<std::byte> none;
        if (park_behind_writes(p, Via::data, none))
            return;
    }
    const std::uint64_t tag = p->tag;
    fuse_req_t req = p->req;
    Pending &ref = *p;
    if (req != nullptr)
        tag_of_[req] = tag;
    pending_[tag] = std::move(p);
    ref.started = false;
    ref.slot = ~0U;
    if (free_slots_.empty()) {
        if (ref.op == PVFSD_OP_WRITE && ref.data.empty())
            ref.data.assign(write_data.begin(), write_data.end());
        waiting_data_.push_back(tag);
    } else {
        ref.slot = free_slots_.back();
        free_slots_.pop_back();
        if (ref.op == PVFSD_OP_WRITE && ref.data.empty())
            std::ranges::copy(write_data,
                              std::span(slots_).subspan(ref.slot * settings_.slot_size).begin());
        start_io(ref);
    }
    // An op that could not start has been answered already, and a WRITE
    // gone behind too.
    if (req != nullptr) {
        const auto it = pending_.find(tag);
        if (it != pending_.end() && it->second->req != nullptr)
            fuse_req_interrupt_func(req, &Ops::interrupt_cb, nullptr);
    }
}

void FuseChannel::start_io(Pending &p)
{
    const auto slot = std::span(slots_).subspan(p.slot * settings_.slot_size, settings_.slot_size);
    if (!p.data.empty()) {
        std::ranges::copy(p.data, slot.begin());
        p.data = {};
    }
    pvfsd_io_req r{};
    r.common = p.common;
    r.handle = p.ino;
    r.offset = p.offset;
    r.length = static_cast<std::uint32_t>(p.size);
    r.slot = p.slot;
    p.started = true;
    gossip::debug(gossip::Mask::dev, "{} tag {}: {} bytes at {} in slot {}", pvfsd::op_name(p.op),
                  p.tag, p.size, p.offset, p.slot);
    std::string why;
    auto up = pvfsd::Upcall::parse(message(p.op, p.tag, r), why);
    if (up && start_ != nullptr) {
        (*start_)(std::move(*up));
        go_behind(p);
        return;
    }
    gossip::error(gossip::Mask::dev, "{} tag {} not started: {}", pvfsd::op_name(p.op), p.tag,
                  up ? "no Handler at hand" : why);
    // As its answer would: the request gets EIO, the slot goes back.
    tag_of_.erase(p.req);
    replied(fuse_reply_err(p.req, EIO), pvfsd::op_name(p.op));
    free_slots_.push_back(p.slot);
    const std::uint64_t tag = p.tag;
    pending_.erase(tag); // p with it
}

void FuseChannel::start_waiting()
{
    // First come first served, each queue on its own slots.
    while (!free_slots_.empty() && !waiting_data_.empty()) {
        const std::uint64_t tag = waiting_data_.front();
        waiting_data_.pop_front();
        const auto it = pending_.find(tag);
        if (it == pending_.end())
            continue; // interrupted meanwhile
        it->second->slot = free_slots_.back();
        free_slots_.pop_back();
        start_io(*it->second);
    }
    while (!free_reply_slots_.empty() && !waiting_changes_.empty()) {
        const std::uint64_t tag = waiting_changes_.front();
        waiting_changes_.pop_front();
        auto node = pending_.extract(tag);
        if (node.empty())
            continue;
        std::unique_ptr<Pending> p = std::move(node.mapped());
        std::vector<std::byte> upcall = std::move(p->message);
        start_change(std::move(p), std::move(upcall));
    }
}

pvfsd::Channel::Received FuseChannel::receive(const Starter &start)
{
    const Starter *const outer = std::exchange(start_, &start);
    Received result = Received::drained;
    for (;;) {
        const int n = fuse_session_receive_buf(session_, &buf_);
        if (n == -EINTR)
            continue;
        if (n == -EAGAIN)
            break;
        if (n == 0 || fuse_session_exited(session_) != 0) {
            // Unmounted, or libfuse gave up (a failed INIT): unmount() then
            // finds which (fuse_session_unmount leaves a gone mount alone).
            gossip::info(gossip::Mask::pvfsd, "the FUSE session ended");
            result = Received::ended;
            break;
        }
        if (n < 0) {
            gossip::error(gossip::Mask::dev, "reading /dev/fuse: {}", strerrordesc_np(-n));
            result = Received::failed;
            break;
        }
        fuse_session_process_buf(session_, &buf_);
        if (initialized_ && !readahead_set_) {
            // INIT's answer went: the kernel has set the mount's readahead.
            readahead_set_ = true;
            set_readahead();
        }
    }
    for (const std::uint64_t tag : std::exchange(interrupted_, {})) {
        const auto it = pending_.find(tag);
        if (it == pending_.end() || it->second->started)
            continue;
        tag_of_.erase(it->second->req);
        replied(fuse_reply_err(it->second->req, EINTR), "an interrupted request");
        // An open whose truncation never started is no open (as finish()
        // says when the truncation fails).
        if (it->second->then == Then::truncate || it->second->then == Then::truncate_open)
            release(it->second->ino);
        pending_.erase(it);
    }
    if (result == Received::drained)
        flush_closes();
    start_ = outer;
    return result;
}

void FuseChannel::send(std::vector<std::byte> downcall, const Starter &start)
{
    pvfsd_msg_hdr hdr{};
    if (downcall.size() < sizeof(hdr)) {
        gossip::error(gossip::Mask::dev, "a downcall of {} bytes ignored", downcall.size());
        return;
    }
    std::memcpy(&hdr, downcall.data(), sizeof(hdr));
    auto node = pending_.extract(hdr.tag);
    if (node.empty()) {
        gossip::warning(gossip::Mask::dev, "an answer to {} tag {}, which nothing waits for",
                        pvfsd::op_name(hdr.op), hdr.tag);
        return;
    }
    const Starter *const outer = std::exchange(start_, &start);
    std::unique_ptr<Pending> p = std::move(node.mapped());
    // The op is over at the servers: its slots come free once it is
    // answered (a READ's data is copied from its slot by then).  What
    // follows it (finish may start a second upcall for the request) takes
    // slots of its own.
    const std::uint32_t slot = p->slot;
    const std::uint32_t reply_slot = std::exchange(p->reply_slot, PVFSD_NO_SLOT);
    finish(p, hdr, std::span<const std::byte>(downcall).subspan(sizeof(hdr)));
    if (slot < settings_.slots)
        free_slots_.push_back(slot);
    if (reply_slot < PVFSD_REPLY_SLOTS)
        free_reply_slots_.push_back(reply_slot);
    start_waiting();
    start_ = outer;
}

void FuseChannel::set_readahead() const
{
    // The kernel reads a file ahead only as far as the mount's bdi says
    // (128 KiB unless someone changed it; FUSE's INIT can only lower it),
    // so a sequential read came as 128 KiB READs, one after the other
    // (149 MB/s here).  Four READs of up to 1 MiB (max_pages) in flight
    // read 3-5 times as fast (bench/fs's FUSE phase; docs/plan/fuse.md).
    // Only root may change it: others keep the kernel's.
    const std::size_t kib = std::min<std::size_t>(settings_.slots, 4) *
                            std::min<std::size_t>(settings_.slot_size, 1U << 20U) / 1024;
    const auto dev = device_of(mountpoint_);
    if (!dev) {
        gossip::warning(gossip::Mask::pvfsd,
                        "{} is not in /proc/self/mountinfo: readahead left alone", mountpoint_);
        return;
    }
    const std::string path = "/sys/class/bdi/" + *dev + "/read_ahead_kb";
    std::ofstream out(path);
    out << kib << '\n';
    out.flush();
    if (!out) {
        gossip::info(gossip::Mask::pvfsd, "readahead stays the kernel's: cannot write {}", path);
        return;
    }
    gossip::info(gossip::Mask::pvfsd, "readahead {} KiB ({})", kib, path);
}

void FuseChannel::count_open(fuse_ino_t ino, std::uint32_t mode, std::uint64_t gen)
{
    Opened &o = opened_[ino];
    ++o.count;
    o.mode |= mode;
    // The servers keep the greatest gen of the mount's opens (a slower
    // OPEN may end after a later one).
    o.gen = std::max(o.gen, gen);
}

void FuseChannel::release(fuse_ino_t ino)
{
    const auto it = opened_.find(ino);
    if (it == opened_.end() || --it->second.count > 0)
        return;
    const pvfsd_close_ref ref{ino, it->second.gen};
    opened_.erase(it);
    // After the writes the kernel was told are done (fuse_behind.cpp).
    if (writes_in_flight(ino)) {
        behind_[ino].closes.push_back(ref);
        return;
    }
    closes_.push_back(ref);
    behind_.erase(ino); // an error nobody took: the file is closed
}

void FuseChannel::flush_closes()
{
    // The releases of one wake-up in as few CLOSEs as fit: the kernel's own
    // batching of pvfs.ko, without its timer.
    while (!closes_.empty()) {
        const std::size_t n = std::min<std::size_t>(closes_.size(), PVFSD_MAX_CLOSE);
        pvfsd_close_req c{};
        c.common = common_of(nullptr);
        c.common.mount_id = mount_id_;
        c.count = static_cast<std::uint32_t>(n);
        auto p = std::make_unique<Pending>();
        p->tag = next_tag();
        p->op = PVFSD_OP_CLOSE;
        const std::uint64_t tag = p->tag;
        const std::string_view refs(reinterpret_cast<const char *>(closes_.data()),
                                    n * sizeof(pvfsd_close_ref));
        start(std::move(p), message(PVFSD_OP_CLOSE, tag, c, refs));
        closes_.erase(closes_.begin(), closes_.begin() + static_cast<std::ptrdiff_t>(n));
    }
}

void FuseChannel::cancel(fuse_req_t req)
{
    const auto t = tag_of_.find(req);
    if (t == tag_of_.end()) {
        cancel_listing(req);
        return;
    }
    const std::uint64_t target = t->second;
    const auto it = pending_.find(target);
    if (it == pending_.end())
        return;
    if (!it->second->started) {
        // Still waiting for a slot: it ends, but not from here (libfuse
        // calls this with the request locked, and a reply frees it).
        std::erase(waiting_data_, target);
        std::erase(waiting_changes_, target);
        interrupted_.push_back(target);
        return;
    }
    if (start_ == nullptr)
        return;
    std::string why;
    auto up =
        pvfsd::Upcall::parse(message(PVFSD_OP_CANCEL, next_tag(), pvfsd_cancel_req{target}), why);
    if (up) {
        gossip::debug(gossip::Mask::dev, "{} tag {} interrupted", pvfsd::op_name(it->second->op),
                      target);
        (*start_)(std::move(*up));
    }
}

void FuseChannel::learned(const pvfsd_attr &a, bool lookup)
{
    auto it = known_.find(a.handle);
    if (it == known_.end()) {
        // Only a lookup makes an inode known to the kernel (the root is
        // known from the start).
        if (!lookup && a.handle != FUSE_ROOT_ID)
            return;
        it = known_.emplace(a.handle, Known{}).first;
    }
    if (lookup)
        ++it->second.nlookup;
    it->second.attr = a;
}

void FuseChannel::forget(fuse_ino_t ino, std::uint64_t nlookup)
{
    const auto it = known_.find(ino);
    if (it == known_.end() || ino == FUSE_ROOT_ID)
        return;
    if (it->second.nlookup <= nlookup)
        known_.erase(it);
    else
        it->second.nlookup -= nlookup;
}

const pvfsd_attr *FuseChannel::known(fuse_ino_t ino) const
{
    const auto it = known_.find(ino);
    return it == known_.end() ? nullptr : &it->second.attr;
}

} // namespace pvfs::fuse
