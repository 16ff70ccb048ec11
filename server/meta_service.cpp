// The metadata role of pvfs-server (meta_service.hpp).
#include "meta_service.hpp"

#include <sodium.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <concepts>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <variant>

#include "pvfs/gossip.hpp"
#include "pvfs/layout.hpp"

namespace pvfs::server {

namespace {

using gossip::Mask;

// Changes one commit carries at most (a burst beyond waits for the next).
constexpr std::size_t max_batch = 1024;
// Group commit: a client that queued a change this recently is expected to
// send its next one soon.
constexpr std::chrono::milliseconds writer_window{2};

proto::DirEntry to_proto(meta::DirEntry &&e)
{
    return proto::DirEntry{std::move(e.name), e.handle, e.type, e.cookie};
}

template <class T, class... Ts>
concept one_of = (std::same_as<T, Ts> || ...);

// Every request type is in exactly one of these three sets (checked
// below), so a new one is placed on purpose before the service compiles.

// Answered at once from the store (respond_read).
template <class T>
concept meta_read = one_of<T, proto::LookupRequest, proto::GetattrRequest, proto::ReadlinkRequest,
                           proto::ReaddirRequest, proto::XattrGetRequest, proto::XattrListRequest,
                           proto::LayoutGetRequest, proto::ListHandlesRequest, proto::AccessRequest,
                           proto::OpenRequest, proto::ListOrphansRequest, proto::CapabilityRequest>;
// Applied in a write batch by the committer (apply).
template <class T>
concept meta_write =
    one_of<T, proto::SetattrRequest, proto::CreateRequest, proto::MkdirRequest, proto::MknodRequest,
           proto::SymlinkRequest, proto::LinkRequest, proto::RemoveRequest, proto::RmdirRequest,
           proto::RenameRequest, proto::XattrSetRequest, proto::XattrRemoveRequest,
           proto::LayoutSetRequest, proto::MkdirObjectRequest, proto::LinkDirRequest,
           proto::RetireDirRequest, proto::UnlinkDirRequest, proto::RemoveDirObjectRequest,
           proto::SessionRequest, proto::CloseRequest, proto::OrphanDoneRequest>;
// The server's own or the data role's, never the metadata service's.
template <class T>
concept not_meta =
    one_of<T, proto::GetConfigRequest, proto::StatusRequest, proto::StatfsRequest,
           proto::ReadRequest, proto::WriteRequest, proto::FsyncRequest, proto::ObjectSizesRequest,
           proto::TruncateObjectRequest, proto::RemoveObjectRequest, proto::ListObjectsRequest>;

// How many of the sets T is in.
template <class T>
constexpr int sets_of = static_cast<int>(meta_read<T>) + static_cast<int>(meta_write<T>) +
                        static_cast<int>(not_meta<T>);

template <class... Ts> consteval bool partitioned(std::type_identity<std::variant<Ts...>> /*body*/)
{
    return ((sets_of<Ts> == 1) && ...);
}
static_assert(partitioned(std::type_identity<proto::RequestBody>{}),
              "each request type is a metadata read, a metadata write or not metadata");

// respond_read's visitor: one call operator per request type, so that
// std::visit does not compile while a type has none.  Each answers and
// returns 0, or returns a negative errno for the error response.
struct ReadHandler {
    const meta::Store &store;
    Loop &loop;
    const Origin &origin;
    const Credentials &cred;

    int operator()(const proto::LookupRequest &r) const
    {
        proto::LookupResponse out;
        const int rc = store.lookup(cred, r.parent, r.name, out.attr);
        if (rc == 0)
            loop.respond(origin, out);
        return rc;
    }

    int operator()(const proto::GetattrRequest &g) const
    {
        proto::GetattrResponse out;
        const int rc = store.getattr(cred, g.handle, out.attr);
        if (rc == 0)
            loop.respond(origin, out);
        return rc;
    }

    int operator()(const proto::ReadlinkRequest &l) const
    {
        proto::ReadlinkResponse out;
        const int rc = store.readlink(cred, l.handle, out.target);
        if (rc == 0)
            loop.respond(origin, std::move(out));
        return rc;
    }

    int operator()(const proto::ReaddirRequest &d) const
    {
        meta::DirPage page;
        const std::uint32_t max = std::min<std::uint32_t>(
            d.max_entries, static_cast<std::uint32_t>(proto::max_readdir_entries));
        const int rc = max == 0 ? -EINVAL : store.readdir(cred, d.handle, d.cookie, max, page);
        if (rc == 0) {
            proto::ReaddirResponse out;
            out.entries.reserve(page.entries.size());
            for (meta::DirEntry &e : page.entries)
                out.entries.push_back(to_proto(std::move(e)));
            out.eof = page.eof;
            loop.respond(origin, std::move(out));
        }
        return rc;
    }

    int operator()(const proto::XattrGetRequest &xg) const
    {
        std::string value;
        const int rc = store.xattr_get(cred, xg.handle, xg.name, value);
        if (rc == 0) {
            proto::XattrGetResponse out;
            // (Not memcpy: an empty vector's data() may be null.)
            out.value.resize(value.size());
            std::ranges::transform(value, out.value.begin(),
                                   [](char c) { return static_cast<std::byte>(c); });
            loop.respond(origin, std::move(out));
        }
        return rc;
    }

    int operator()(const proto::XattrListRequest &xl) const
    {
        proto::XattrListResponse out;
        const int rc = store.xattr_list(cred, xl.handle, out.names);
        if (rc == 0)
            loop.respond(origin, std::move(out));
        return rc;
    }

    int operator()(const proto::LayoutGetRequest &lg) const
    {
        proto::LayoutGetResponse out;
        const int rc = store.layout_get(cred, lg.handle, out.layout);
        if (rc == 0)
            loop.respond(origin, out);
        return rc;
    }

    int operator()(const proto::AccessRequest &ac) const
    {
        const int rc = store.access(cred, ac.handle, ac.mask);
        if (rc == 0)
            loop.respond(origin, proto::AccessResponse{});
        return rc;
    }

    int operator()(const proto::ListHandlesRequest &lh) const
    {
        // Listing every handle is for pvfs-fsck: root only.
        if (cred.uid != 0)
            return -EPERM;
        meta::HandlePage page;
        const std::uint32_t max =
            std::min<std::uint32_t>(lh.max, static_cast<std::uint32_t>(proto::max_list_handles));
        const int rc = max == 0 ? -EINVAL : store.list_handles(lh.cookie, max, page);
        if (rc == 0) {
            proto::ListHandlesResponse out{std::move(page.handles), page.next_cookie, page.eof};
            loop.respond(origin, std::move(out));
        }
        return rc;
    }

    // handle() serves these itself (meta_open.cpp).
    int operator()(const proto::OpenRequest & /*request*/) const { return -EOPNOTSUPP; }
    int operator()(const proto::ListOrphansRequest & /*request*/) const { return -EOPNOTSUPP; }
    int operator()(const proto::CapabilityRequest & /*request*/) const { return -EOPNOTSUPP; }

    // handle() queues these for the committer or never sees them.
    template <class T>
    requires meta_write<T> || not_meta<T>
    int operator()(const T & /*request*/) const { return -EOPNOTSUPP; }
};

// apply's visitor, as ReadHandler: each sets the response and returns 0 or
// a negative errno.
struct WriteHandler {
    meta::WriteBatch &batch;
    const Credentials &cred;
    proto::ResponseBody &response;
    // The open table's check, or none for a client that would remove an
    // orphan's data objects anyway (it does not know `orphaned`).
    const meta::OpenCheck &held;
    bool knows_orphaned = false;
    // A setattr's by_open claim holds: its session has the file open for
    // writing (MetaService::holds_write_open).
    bool writer = false;
    std::uint32_t data_servers = 0; // MetaSettings::data_servers

    // A layout the request asks for (stripe_count 0: the parent's) that
    // the cluster's data servers cannot hold.
    [[nodiscard]] bool unfit(const Layout &l) const noexcept
    {
        return data_servers != 0 && l.stripe_count != 0 &&
               layout::validate(l, data_servers) != nullptr;
    }

    [[nodiscard]] std::optional<bool> orphaned(const meta::Removed &r) const
    {
        return knows_orphaned ? std::optional<bool>(r.orphaned) : std::nullopt;
    }

    int operator()(const proto::SetattrRequest &s) const
    {
        proto::SetattrResponse out;
        int rc = 0;
        const std::uint32_t mask = s.mask & ~proto::setattr_by_open;
        if (mask == proto::set_ctime) {
            // "The caller wrote or truncated the data": mtime and ctime now,
            // setuid/setgid cleared, write access (or a write open) needed
            // (docs/protocol.md).
            rc = batch.data_written(cred, s.handle, out.attr, writer);
        } else {
            perm::AttrChange change;
            change.mask = mask & ~proto::set_ctime; // ctime follows any change
            change.writer = writer;
            change.mode = s.mode;
            change.uid = s.uid;
            change.gid = s.gid;
            change.atime = s.atime;
            change.mtime = s.mtime;
            rc = batch.setattr(cred, s.handle, change, out.attr);
        }
        response = out;
        return rc;
    }

    int operator()(const proto::CreateRequest &c) const
    {
        meta::CreateResult result;
        if (unfit(c.layout)) {
            response = proto::CreateResponse{result.attr, false, std::nullopt};
            return -EINVAL;
        }
        const int rc = batch.create(cred, c.parent, c.name, c.mode, c.exclusive, c.layout, result);
        response = proto::CreateResponse{result.attr, result.created, std::nullopt};
        return rc;
    }

    int operator()(const proto::MkdirRequest &m) const
    {
        proto::MkdirResponse out;
        const int rc = batch.mkdir(cred, m.parent, m.name, m.mode, out.attr);
        response = out;
        return rc;
    }

    int operator()(const proto::MknodRequest &n) const
    {
        proto::MknodResponse out;
        const int rc = batch.mknod(cred, n.parent, n.name, n.type, n.mode, n.rdev, out.attr);
        response = out;
        return rc;
    }

    int operator()(const proto::SymlinkRequest &y) const
    {
        proto::SymlinkResponse out;
        const int rc = batch.symlink(cred, y.parent, y.name, y.target, out.attr);
        response = out;
        return rc;
    }

    int operator()(const proto::LinkRequest &l) const
    {
        proto::LinkResponse out;
        const int rc = batch.link(cred, l.handle, l.new_parent, l.new_name, out.attr);
        response = out;
        return rc;
    }

    int operator()(const proto::RemoveRequest &r) const
    {
        meta::Removed removed;
        const int rc = batch.unlink(cred, r.parent, r.name, removed, held);
        response = proto::RemoveResponse{removed.handle, removed.type, removed.nlink_after,
                                         removed.layout, orphaned(removed)};
        return rc;
    }

    int operator()(const proto::RmdirRequest &d) const
    {
        const int rc = batch.rmdir(cred, d.parent, d.name);
        response = proto::RmdirResponse{};
        return rc;
    }

    int operator()(const proto::RenameRequest &rn) const
    {
        meta::Removed replaced;
        const int rc = batch.rename(cred, rn.old_parent, rn.old_name, rn.new_parent, rn.new_name,
                                    rn.flags, replaced, held);
        response = proto::RenameResponse{replaced.handle, replaced.type, replaced.nlink_after,
                                         replaced.layout, orphaned(replaced)};
        return rc;
    }

    int operator()(const proto::XattrSetRequest &xs) const
    {
        const std::string_view value(reinterpret_cast<const char *>( // NOLINT: bytes as chars
                                         xs.value.data()),
                                     xs.value.size());
        const int rc = batch.xattr_set(cred, xs.handle, xs.name, value, xs.flags);
        response = proto::XattrSetResponse{};
        return rc;
    }

    int operator()(const proto::XattrRemoveRequest &xr) const
    {
        const int rc = batch.xattr_remove(cred, xr.handle, xr.name);
        response = proto::XattrRemoveResponse{};
        return rc;
    }

    int operator()(const proto::LayoutSetRequest &ls) const
    {
        if (unfit(ls.layout)) {
            response = proto::LayoutSetResponse{};
            return -EINVAL;
        }
        const int rc = batch.layout_set(cred, ls.handle, ls.layout);
        response = proto::LayoutSetResponse{};
        return rc;
    }

    int operator()(const proto::MkdirObjectRequest &mo) const
    {
        proto::MkdirObjectResponse out;
        const int rc = batch.mkdir_object(cred, mo.parent, mo.mode, out.attr);
        response = out;
        return rc;
    }

    int operator()(const proto::LinkDirRequest &ld) const
    {
        const int rc = batch.link_dir(cred, ld.parent, ld.name, ld.handle);
        response = proto::LinkDirResponse{};
        return rc;
    }

    int operator()(const proto::RetireDirRequest &rd) const
    {
        proto::RetireDirResponse out;
        const int rc = batch.retire_dir(rd.handle, rd.retire, out.attr);
        response = out;
        return rc;
    }

    int operator()(const proto::UnlinkDirRequest &ud) const
    {
        const int rc = batch.unlink_dir(cred, ud.parent, ud.name, ud.handle, ud.owner_uid);
        response = proto::UnlinkDirResponse{};
        return rc;
    }

    int operator()(const proto::RemoveDirObjectRequest &ro) const
    {
        const int rc = batch.remove_dir_object(ro.handle);
        response = proto::RemoveDirObjectResponse{};
        return rc;
    }

    // The committer serves these itself (apply_session, apply_close,
    // apply_orphan_done).
    int operator()(const proto::SessionRequest & /*request*/) const { return -EINVAL; }
    int operator()(const proto::CloseRequest & /*request*/) const { return -EINVAL; }
    int operator()(const proto::OrphanDoneRequest & /*request*/) const { return -EINVAL; }

    // handle() answers these itself (respond_read) or never sees them; the
    // response stays as it was.
    template <class T>
    requires meta_read<T> || not_meta<T>
    int operator()(const T & /*request*/) const { return -EOPNOTSUPP; }
};

} // namespace

MetaService::MetaService(Loop &loop, meta::Store store, MetaSettings settings)
    : loop_(loop), store_(std::move(store)), settings_(std::move(settings)),
      event_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))
{
    if (!event_.valid())
        throw std::system_error(errno, std::generic_category(), "eventfd");
    ::randombytes_buf(&boot_id_, sizeof boot_id_);
    load_sessions();
    open_check_ = [this](Handle h) { return held_or_dying(h); };
    // Holds were memory: clients that held files before the restart get
    // a lease and 10 s to re-open them (reclaim) before unheld orphans
    // are reclaimed.  A store without sessions had no clients to wait for.
    if (!sessions_.empty()) {
        grace_end_ = Clock::now() + settings_.lease + std::chrono::seconds(10);
        gossip::info(Mask::meta, "grace of {} ms for clients to re-open their files",
                     (settings_.lease + std::chrono::seconds(10)).count());
    }
    for (const MetaFault &f : settings_.faults) {
        gossip::warning(Mask::meta, "TEST FAULT armed: {} {}th {}",
                        f.kind == MetaFault::Kind::drop_reply ? "no reply to the"
                        : f.kind == MetaFault::Kind::crash_after_commit
                            ? "exit after committing the"
                            : "exit in the group-commit wait of the",
                        f.nth, proto::op_name(f.op));
    }
    thread_ = std::thread([this] { committer(); });
}

MetaService::~MetaService()
{
    {
        const std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable())
        thread_.join();
}

bool MetaService::handles(proto::Op op) noexcept
{
    switch (op) {
    case proto::Op::lookup:
    case proto::Op::getattr:
    case proto::Op::setattr:
    case proto::Op::create:
    case proto::Op::mkdir:
    case proto::Op::mknod:
    case proto::Op::symlink:
    case proto::Op::link:
    case proto::Op::readlink:
    case proto::Op::remove:
    case proto::Op::rmdir:
    case proto::Op::rename:
    case proto::Op::readdir:
    case proto::Op::xattr_get:
    case proto::Op::xattr_set:
    case proto::Op::xattr_list:
    case proto::Op::xattr_remove:
    case proto::Op::layout_get:
    case proto::Op::layout_set:
    case proto::Op::list_handles:
    case proto::Op::mkdir_object:
    case proto::Op::link_dir:
    case proto::Op::retire_dir:
    case proto::Op::unlink_dir:
    case proto::Op::remove_dir_object:
    case proto::Op::access:
    case proto::Op::session:
    case proto::Op::open:
    case proto::Op::close:
    case proto::Op::orphan_done:
    case proto::Op::list_orphans:
    case proto::Op::capability:
        return true;
    default:
        return false;
    }
}

meta::Stats MetaService::stats() const
{
    meta::Stats s;
    if (const int rc = store_.statfs(s); rc != 0)
        gossip::warning(Mask::meta, "statfs of the metadata store: {}", errno_text(-rc));
    return s;
}

std::size_t MetaService::active() const
{
    const std::lock_guard lock(mutex_);
    return queued_.size() + committing_ + finished_.size();
}

std::uint64_t MetaService::commits() const
{
    const std::lock_guard lock(mutex_);
    return commits_;
}

void MetaService::handle(const Origin &origin, const Credentials &cred, const proto::OnceIds &once,
                         proto::RequestBody &body)
{
    switch (origin.op) {
    case proto::Op::lookup:
    case proto::Op::getattr:
    case proto::Op::readlink:
    case proto::Op::readdir:
    case proto::Op::xattr_get:
    case proto::Op::xattr_list:
    case proto::Op::layout_get:
    case proto::Op::list_handles:
    case proto::Op::access:
        respond_read(origin, cred, body);
        return;
    case proto::Op::open:
        serve_open(origin, cred, std::get<proto::OpenRequest>(body));
        return;
    case proto::Op::list_orphans:
        serve_list_orphans(origin, cred, std::get<proto::ListOrphansRequest>(body));
        return;
    case proto::Op::capability:
        serve_capability(origin, cred, std::get<proto::CapabilityRequest>(body));
        return;
    default:
        break;
    }
    // Any change with the client's ids renews its lease (not another
    // key's: the committer refuses that change).
    if (once.present())
        touch(once.client_id, key_name(origin));
    Job job{origin, cred, once, std::move(body), 0, {}, false, std::nullopt};
    if (origin.op == proto::Op::close && close_at_once(job)) {
        answer(job);
        return;
    }
    {
        const std::lock_guard lock(mutex_);
        if (settings_.group_commit)
            writers_[job.origin.session] = std::chrono::steady_clock::now();
        queued_.push_back(std::move(job));
    }
    wake_.notify_one();
}

void MetaService::respond_read(const Origin &origin, const Credentials &cred,
                               proto::RequestBody &body)
{
    const int rc = std::visit(ReadHandler{store_, loop_, origin, cred}, body);
    if (rc != 0)
        loop_.respond_error(origin, -rc);
}

bool MetaService::holds_write_open(std::uint64_t client_id, Handle handle)
{
    if (client_id == 0)
        return false;
    const std::lock_guard lock(open_mutex_);
    const auto it = holds_.find(handle);
    return it != holds_.end() &&
           std::any_of(it->second.begin(), it->second.end(), [&](const Holder &h) {
               return h.client_id == client_id && (h.mode & proto::open_write) != 0;
           });
}

void MetaService::apply(meta::WriteBatch &batch, Job &job)
{
    const bool knows = job.origin.knows_orphaned;
    // A by_open claim is believed only from the session holding a write
    // open: a request without ids names no session, and a client that is
    // wrong (or lies) about its opens gets the mode's answer.
    bool writer = false;
    if (const auto *s = std::get_if<proto::SetattrRequest>(&job.body);
        s != nullptr && (s->mask & proto::setattr_by_open) != 0 && job.once.present())
        writer = holds_write_open(job.once.client_id, s->handle);
    const int rc =
        std::visit(WriteHandler{batch, job.cred, job.response, knows ? open_check_ : no_check_,
                                knows, writer, settings_.data_servers},
                   job.body);
    job.error = rc < 0 ? -rc : 0;
    // A create that carries an open holds what it made (or found) in the
    // same change; one that failed holds nothing.
    if (const auto *c = std::get_if<proto::CreateRequest>(&job.body);
        rc == 0 && c != nullptr && c->open) {
        job.hold = hold_created(std::get<proto::CreateResponse>(job.response), job.cred, *c->open);
    }
}

void MetaService::committer()
{
    std::vector<Job> jobs;
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            // Wakes at least once a minute to sweep silent sessions, and
            // three times a lease for silent holders.
            const auto tick =
                std::min<std::chrono::milliseconds>(std::chrono::minutes(1), settings_.lease / 3);
            wake_.wait_for(lock, tick, [this] { return stop_ || !queued_.empty(); });
            if (stop_)
                return;
            std::chrono::microseconds waited{0};
            if (settings_.group_commit && !queued_.empty())
                waited = wait_for_writers(lock);
            const std::size_t n = std::min(queued_.size(), max_batch);
            if (waited.count() > 0)
                gossip::debug(Mask::meta, "group commit: waited {} us, {} changes", waited.count(),
                              n);
            jobs.clear();
            for (std::size_t i = 0; i < n; ++i) {
                jobs.push_back(std::move(queued_.front()));
                queued_.pop_front();
            }
            committing_ = n;
        }
        const auto now = std::chrono::steady_clock::now();
        meta::WriteBatch batch = store_.batch();
        int rc = batch.status();
        if (rc == 0) {
            if (now >= next_sweep_) {
                sweep_sessions(batch, now);
                next_sweep_ = now + std::chrono::minutes(1);
            }
            sweep_holds(batch, now);
            for (Job &job : jobs) {
                // A client id is in the clear: one of another key's
                // session is refused before anything of the job is done.
                if (!bound_to_key(batch, job))
                    job.error = EACCES;
                else if (std::holds_alternative<proto::SessionRequest>(job.body))
                    apply_session(batch, job);
                else if (std::holds_alternative<proto::CloseRequest>(job.body))
                    apply_close(batch, job);
                else if (std::holds_alternative<proto::OrphanDoneRequest>(job.body))
                    apply_orphan_done(batch, job);
                else if (job.once.present())
                    apply_once(batch, job);
                else
                    apply(batch, job);
            }
            rc = batch.commit();
            if (!jobs.empty()) {
                // A moving average over some eight commits.
                const auto took = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::steady_clock::now() - now);
                commit_time_ += (took - commit_time_) / 8;
            }
        }
        {
            // Committed (or not): an open may look at these again, and a
            // close on the loop finds the orphans this batch made in the
            // table.
            const std::lock_guard lock(open_mutex_);
            dying_.clear();
            if (!kept_.empty()) {
                kept_.clear();
                ++kept_epoch_;
            }
        }
        if (rc != 0) {
            gossip::error(Mask::meta, "a metadata commit of {} changes failed: {}", jobs.size(),
                          errno_text(-rc));
            for (Job &job : jobs)
                job.error = -rc;
            // Nothing was created: nothing is held (latest first, so that
            // two holds of one batch restore the state before the first).
            for (std::size_t i = jobs.size(); i-- > 0;) {
                if (jobs[i].hold)
                    undo_hold(*jobs[i].hold);
            }
        }
        {
            const std::lock_guard lock(mutex_);
            for (Job &job : jobs)
                finished_.push_back(std::move(job));
            committing_ = 0;
            ++commits_;
        }
        const std::uint64_t one = 1;
        [[maybe_unused]] const ssize_t w = ::write(event_.get(), &one, sizeof one);
    }
}

std::chrono::microseconds MetaService::wait_for_writers(std::unique_lock<std::mutex> &lock)
{
    // After a batch is answered its clients send their next changes at
    // nearly the same moment; the first wakes the committer, and without
    // a wait each batch would hold one or two changes, each paying a
    // whole commit (PostgreSQL's commit_delay, with writers seen in the
    // last window as its commit_siblings).
    // Waiting longer than a commit takes would cost more than it saves.
    const std::chrono::microseconds limit = std::min(settings_.max_commit_wait, commit_time_);
    const auto now = std::chrono::steady_clock::now();
    std::size_t recent = 0;
    for (auto it = writers_.begin(); it != writers_.end();) {
        if (now - it->second > writer_window) {
            it = writers_.erase(it);
        } else {
            ++recent;
            ++it;
        }
    }
    const auto present = [this] {
        std::unordered_set<std::uint64_t> seen;
        for (const Job &j : queued_)
            seen.insert(j.origin.session);
        return seen.size();
    };
    if (limit.count() <= 0 || recent <= 1 || present() >= recent)
        return std::chrono::microseconds{0};
    wake_.wait_for(lock, limit,
                   [&] { return stop_ || queued_.size() >= max_batch || present() >= recent; });
    if (!settings_.faults.empty())
        crash_in_commit_wait();
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                 now);
}

void MetaService::poll()
{
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t r = ::read(event_.get(), &count, sizeof count);
    std::vector<Job> done;
    {
        const std::lock_guard lock(mutex_);
        done.swap(finished_);
    }
    for (Job &job : done)
        answer(job);
}

void MetaService::answer(Job &job)
{
    MetaFault::Kind fault{};
    if (fault_fires(job, fault)) {
        if (fault == MetaFault::Kind::crash_after_commit) {
            gossip::error(Mask::meta, "TEST FAULT: exiting after committing {} request {}",
                          proto::op_name(job.origin.op), job.origin.request_id);
            std::_Exit(9);
        }
        gossip::error(Mask::meta, "TEST FAULT: no reply to {} request {}",
                      proto::op_name(job.origin.op), job.origin.request_id);
        return;
    }
    if (job.error != 0) {
        loop_.respond_error(job.origin, job.error);
        return;
    }
    // The creator's capability (not in the reply cache: a retry answered
    // from it has none, and its client asks as for any file).
    if (auto *created = std::get_if<proto::CreateResponse>(&job.response);
        created != nullptr && job.origin.wants_capability && settings_.capability_key &&
        created->created && created->attr.type == ObjectType::regular)
        created->cap = grant(job.origin, created->attr.handle, proto::cap_read | proto::cap_write);
    loop_.respond(job.origin, std::move(job.response));
}

} // namespace pvfs::server
