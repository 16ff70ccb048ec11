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
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

namespace pvfs::fuse {

namespace {

namespace gossip = pvfs::gossip;
using detail::message;

// The one mount of this process, as the Handler knows it.
constexpr std::uint64_t mount_id = 1;
// READDIR offsets: 0 is ".", 1 "..", then each entry's cookie + 2, as
// pvfs.ko's (kmod/dir.c), so that no cookie is taken for a dot.
constexpr std::uint64_t dots = 2;

static_assert(FUSE_ROOT_ID == pvfs::root_handle,
              "FUSE's root node id is pvfs's root handle: node ids are handles");

template <typename Body> std::optional<Body> body_of(std::span<const std::byte> body)
{
    if (body.size() < sizeof(Body))
        return std::nullopt;
    Body b{};
    std::memcpy(&b, body.data(), sizeof(Body));
    return b;
}

mode_t type_bits(std::uint32_t type)
{
    switch (type) {
    case PVFSD_TYPE_REGULAR:
        return S_IFREG;
    case PVFSD_TYPE_DIRECTORY:
        return S_IFDIR;
    case PVFSD_TYPE_SYMLINK:
        return S_IFLNK;
    case PVFSD_TYPE_FIFO:
        return S_IFIFO;
    case PVFSD_TYPE_SOCKET:
        return S_IFSOCK;
    case PVFSD_TYPE_CHAR_DEVICE:
        return S_IFCHR;
    case PVFSD_TYPE_BLOCK_DEVICE:
        return S_IFBLK;
    default:
        return 0;
    }
}

// The kernel's attributes of an object: false when they make no sense.
bool to_stat(const pvfsd_attr &a, struct stat &st)
{
    const mode_t type = type_bits(a.type);
    if (type == 0 || a.handle == no_handle)
        return false;
    st = {};
    st.st_ino = a.handle;
    st.st_mode = type | (a.mode & 07777U);
    st.st_nlink = a.nlink;
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_size = static_cast<off_t>(std::min<std::uint64_t>(
        a.size, static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())));
    st.st_blksize = a.blksize;
    st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
    // new_encode_dev()'s form, as pvfs.ko stores it.
    const auto major = static_cast<unsigned>((a.rdev & 0xfff00U) >> 8U);
    const auto minor = static_cast<unsigned>((a.rdev & 0xffU) | ((a.rdev >> 12U) & 0xfff00U));
    st.st_rdev = makedev(major, minor);
    st.st_atim = {a.atime.sec, a.atime.nsec};
    st.st_mtim = {a.mtime.sec, a.mtime.nsec};
    st.st_ctim = {a.ctime.sec, a.ctime.nsec};
    return true;
}

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

// A reply whose request is gone (interrupted, unmounted) fails: nothing to do.
void replied(int rc, const char *what)
{
    if (rc != 0)
        gossip::debug(gossip::Mask::dev, "{}: the kernel took no answer: {}", what,
                      strerrordesc_np(-rc));
}

} // namespace

FuseChannel::FuseChannel(FuseSettings settings)
    : settings_(std::move(settings)), slots_(settings_.slots * settings_.slot_size),
      client_id_(random_client_id())
{
    for (std::size_t i = settings_.slots; i > 0; --i)
        free_slots_.push_back(static_cast<std::uint32_t>(i - 1));
}

FuseChannel::~FuseChannel()
{
    // Every request still waiting gets an answer, which frees it.
    for (auto &[tag, p] : pending_) {
        if (p->req != nullptr)
            fuse_reply_err(p->req, EIO);
    }
    pending_.clear();
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
    c.mount_id = mount_id;
    c.reply_slot = PVFSD_NO_SLOT;
    if (req == nullptr) {
        c.fsuid = ::geteuid();
        c.fsgid = ::getegid();
        return c;
    }
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
    std::string why;
    auto up = pvfsd::Upcall::parse(upcall, why);
    if (!up || start_ == nullptr) {
        // Our own message: either is a bug, which must not hang the caller.
        gossip::error(gossip::Mask::dev, "{} tag {} not started: {}", pvfsd::op_name(p->op), p->tag,
                      up ? "no Handler at hand" : why);
        if (p->req != nullptr)
            replied(fuse_reply_err(p->req, EIO), "an upcall that could not start");
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

void FuseChannel::start_read(Pending &p)
{
    pvfsd_io_req r{};
    r.common = p.common;
    r.handle = p.ino;
    r.offset = p.offset;
    r.length = static_cast<std::uint32_t>(p.size);
    r.slot = p.slot;
    p.started = true;
    gossip::debug(gossip::Mask::dev, "READ tag {}: {} bytes at {} into slot {}", p.tag, p.size,
                  p.offset, p.slot);
    std::string why;
    auto up = pvfsd::Upcall::parse(message(PVFSD_OP_READ, p.tag, r), why);
    if (up && start_ != nullptr) {
        (*start_)(std::move(*up));
        return;
    }
    gossip::error(gossip::Mask::dev, "READ tag {} not started: {}", p.tag,
                  up ? "no Handler at hand" : why);
    // As its answer would: the request gets EIO, the slot goes back.
    tag_of_.erase(p.req);
    replied(fuse_reply_err(p.req, EIO), "READ");
    free_slots_.push_back(p.slot);
    const std::uint64_t tag = p.tag;
    pending_.erase(tag); // p with it
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
    }
    for (const std::uint64_t tag : std::exchange(interrupted_, {})) {
        const auto it = pending_.find(tag);
        if (it == pending_.end() || it->second->started)
            continue;
        tag_of_.erase(it->second->req);
        replied(fuse_reply_err(it->second->req, EINTR), "an interrupted READ");
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
    Pending &p = *node.mapped();
    finish(p, hdr, std::span<const std::byte>(downcall).subspan(sizeof(hdr)));
    if (p.op == PVFSD_OP_READ && p.slot < settings_.slots) {
        free_slots_.push_back(p.slot);
        // The reads that waited for a slot, first come first served.
        while (!free_slots_.empty() && !waiting_reads_.empty()) {
            const std::uint64_t tag = waiting_reads_.front();
            waiting_reads_.pop_front();
            const auto it = pending_.find(tag);
            if (it == pending_.end())
                continue; // interrupted meanwhile
            it->second->slot = free_slots_.back();
            free_slots_.pop_back();
            start_read(*it->second);
        }
    }
    start_ = outer;
}

void FuseChannel::finish(Pending &p, const pvfsd_msg_hdr &hdr, std::span<const std::byte> body)
{
    if (p.req != nullptr)
        tag_of_.erase(p.req);
    int status = hdr.status;
    if (hdr.op != p.op) {
        gossip::error(gossip::Mask::dev, "the answer to {} tag {} says it is {}",
                      pvfsd::op_name(p.op), p.tag, pvfsd::op_name(hdr.op));
        status = -EIO;
    }
    if (p.op == PVFSD_OP_ATTACH) {
        attach_status_ = status;
        return;
    }
    if (p.req == nullptr) {
        if (status != 0)
            gossip::debug(gossip::Mask::pvfsd, "{} tag {}: {}", pvfsd::op_name(p.op), p.tag,
                          client::error_text(status));
        return;
    }
    if (status != 0) {
        int err = -status;
        if (err == ECANCELED)
            err = EINTR; // the kernel interrupted it
        if (err <= 0 || err > 4095)
            err = EIO;
        replied(fuse_reply_err(p.req, err), pvfsd::op_name(p.op));
        return;
    }
    switch (p.op) {
    case PVFSD_OP_LOOKUP:
        reply_entry(p, body);
        break;
    case PVFSD_OP_GETATTR:
        reply_attr(p, body);
        break;
    case PVFSD_OP_OPEN:
        reply_open(p, body);
        break;
    case PVFSD_OP_READ:
        reply_read(p, body);
        break;
    case PVFSD_OP_READDIR:
        reply_readdir(p, body);
        break;
    case PVFSD_OP_STATFS:
        reply_statfs(p, body);
        break;
    case PVFSD_OP_READLINK:
        reply_readlink(p, body);
        break;
    case PVFSD_OP_XATTR_GET:
    case PVFSD_OP_XATTR_LIST:
        reply_xattr(p, body);
        break;
    default:
        gossip::error(gossip::Mask::dev, "no FUSE answer for {}", pvfsd::op_name(p.op));
        replied(fuse_reply_err(p.req, EIO), "an op without an answer");
    }
}

void FuseChannel::reply_entry(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_attr_resp>(body);
    fuse_entry_param e{};
    if (!r || !to_stat(r->attr, e.attr)) {
        gossip::error(gossip::Mask::dev, "LOOKUP tag {}: malformed attributes", p.tag);
        replied(fuse_reply_err(p.req, EIO), "LOOKUP");
        return;
    }
    e.ino = r->attr.handle;
    e.generation = 0;
    e.attr_timeout = attr_timeout(r->attr.type);
    e.entry_timeout = seconds(settings_.entry_timeout);
    replied(fuse_reply_entry(p.req, &e), "LOOKUP");
}

void FuseChannel::reply_attr(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_attr_resp>(body);
    struct stat st {};
    if (!r || !to_stat(r->attr, st) || r->attr.handle != p.ino) {
        gossip::error(gossip::Mask::dev, "GETATTR tag {}: malformed attributes", p.tag);
        replied(fuse_reply_err(p.req, EIO), "GETATTR");
        return;
    }
    replied(fuse_reply_attr(p.req, &st, attr_timeout(r->attr.type)), "GETATTR");
}

void FuseChannel::reply_open(Pending &p, std::span<const std::byte> /*body*/)
{
    Opened &o = opened_[p.ino];
    ++o.count;
    o.gen = std::max(o.gen, p.tag);
    // An open whose caller went meanwhile gets no release: its hold ends here.
    if (fuse_reply_open(p.req, &p.fi) != 0)
        release(p.ino);
}

void FuseChannel::reply_read(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_io_resp>(body);
    if (!r || r->done > p.size || p.slot >= settings_.slots) {
        gossip::error(gossip::Mask::dev, "READ tag {}: a malformed answer", p.tag);
        replied(fuse_reply_err(p.req, EIO), "READ");
        return;
    }
    const auto data = std::span(slots_).subspan(p.slot * settings_.slot_size, r->done);
    replied(fuse_reply_buf(p.req, reinterpret_cast<const char *>(data.data()), data.size()),
            "READ");
}

void FuseChannel::reply_readdir(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_readdir_resp>(body);
    if (!r) {
        replied(fuse_reply_err(p.req, EIO), "READDIR");
        return;
    }
    std::vector<char> out(p.size);
    std::size_t used = 0;
    std::size_t at = sizeof(*r);
    std::uint32_t i = 0;
    for (; i < r->count; ++i) {
        const auto d = body_of<pvfsd_dirent>(body.subspan(std::min(at, body.size())));
        if (!d || d->name_len == 0 || d->name_len > PVFSD_MAX_NAME ||
            body.size() - at - sizeof(*d) < d->name_len || d->cookie == 0) {
            gossip::error(gossip::Mask::dev, "READDIR tag {}: a malformed entry", p.tag);
            replied(fuse_reply_err(p.req, EIO), "READDIR");
            return;
        }
        if (d->cookie >= std::numeric_limits<std::uint64_t>::max() - dots) {
            replied(fuse_reply_err(p.req, EOVERFLOW), "READDIR");
            return;
        }
        const std::string name(reinterpret_cast<const char *>(body.data() + at + sizeof(*d)),
                               d->name_len);
        struct stat st {};
        st.st_ino = d->handle;
        st.st_mode = type_bits(d->type);
        const std::size_t need =
            fuse_add_direntry(p.req, out.data() + used, out.size() - used, name.c_str(), &st,
                              static_cast<off_t>(d->cookie + dots));
        if (need > out.size() - used)
            break; // the next READDIR starts at it
        used += need;
        at += (sizeof(*d) + d->name_len + 7) / 8 * 8;
    }
    if (used == 0 && r->eof == 0) {
        // Neither an entry nor the end: an empty answer would end the listing.
        gossip::error(gossip::Mask::dev, "READDIR tag {}: no entry and no end", p.tag);
        replied(fuse_reply_err(p.req, EIO), "READDIR");
        return;
    }
    replied(fuse_reply_buf(p.req, out.data(), used), "READDIR");
}

void FuseChannel::reply_statfs(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_statfs_resp>(body);
    if (!r) {
        replied(fuse_reply_err(p.req, EIO), "STATFS");
        return;
    }
    struct statvfs sv {};
    sv.f_bsize = r->bsize;
    sv.f_frsize = r->bsize;
    sv.f_blocks = r->blocks;
    sv.f_bfree = r->bfree;
    sv.f_bavail = r->bavail;
    sv.f_files = r->files;
    sv.f_ffree = r->ffree;
    sv.f_favail = r->ffree;
    sv.f_namemax = r->namelen;
    replied(fuse_reply_statfs(p.req, &sv), "STATFS");
}

void FuseChannel::reply_readlink(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_readlink_resp>(body);
    if (!r || r->target_len == 0 || r->target_len > PVFSD_MAX_SYMLINK ||
        body.size() - sizeof(*r) < r->target_len) {
        replied(fuse_reply_err(p.req, EIO), "READLINK");
        return;
    }
    const std::string target(reinterpret_cast<const char *>(body.data() + sizeof(*r)),
                             r->target_len);
    replied(fuse_reply_readlink(p.req, target.c_str()), "READLINK");
}

void FuseChannel::reply_xattr(Pending &p, std::span<const std::byte> body)
{
    const auto r = body_of<pvfsd_xattr_resp>(body);
    if (!r || (p.size != 0 && (r->size > p.size || body.size() - sizeof(*r) < r->size))) {
        replied(fuse_reply_err(p.req, EIO), pvfsd::op_name(p.op));
        return;
    }
    if (p.size == 0) {
        replied(fuse_reply_xattr(p.req, r->size), pvfsd::op_name(p.op));
        return;
    }
    replied(
        fuse_reply_buf(p.req, reinterpret_cast<const char *>(body.data() + sizeof(*r)), r->size),
        pvfsd::op_name(p.op));
}

void FuseChannel::release(fuse_ino_t ino)
{
    const auto it = opened_.find(ino);
    if (it == opened_.end() || --it->second.count > 0)
        return;
    closes_.push_back({ino, it->second.gen});
    opened_.erase(it);
}

void FuseChannel::flush_closes()
{
    // The releases of one wake-up in as few CLOSEs as fit: the kernel's own
    // batching of pvfs.ko, without its timer.
    while (!closes_.empty()) {
        const std::size_t n = std::min<std::size_t>(closes_.size(), PVFSD_MAX_CLOSE);
        pvfsd_close_req c{};
        c.common = common_of(nullptr);
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
    if (t == tag_of_.end())
        return;
    const std::uint64_t target = t->second;
    const auto it = pending_.find(target);
    if (it == pending_.end())
        return;
    if (!it->second->started) {
        // A READ still waiting for a slot ends, but not from here: libfuse
        // calls this with the request locked, and a reply frees it.
        std::erase(waiting_reads_, target);
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

} // namespace pvfs::fuse
