// Open references and orphans on the metadata server (docs/metadata.md
// "Orphans and open references"): which client sessions hold which files
// open, so that a file's last unlink keeps it until its last close, and
// the hand-over of the data objects to remove once it went.
#include <algorithm>
#include <cerrno>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meta_service.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/perm.hpp"

namespace pvfs::server {

namespace {

using gossip::Mask;

// Reclaim orphans handed to one close at most (for files whose holders
// died without removing the objects).
constexpr std::size_t max_handout = 16;

std::uint64_t realtime_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000U +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

} // namespace

void MetaService::touch(std::uint64_t client_id, std::string_view key)
{
    const std::lock_guard lock(open_mutex_);
    std::string owner;
    if (!foreign_locked(client_id, key, owner))
        seen_[client_id] = Clock::now();
}

bool MetaService::held_or_dying(Handle handle)
{
    const std::lock_guard lock(open_mutex_);
    // In the grace nobody knows yet what is held: every last unlink keeps
    // the file, and the sweep after the grace reclaims the unheld ones.
    const auto it = holds_.find(handle);
    if (in_grace(Clock::now()) || (it != holds_.end() && !it->second.empty())) {
        kept_.insert(handle);
        return true;
    }
    dying_.insert(handle);
    return false;
}

std::uint32_t MetaService::permitted_modes(const Credentials &cred, const Attr &attr,
                                           std::uint32_t mode)
{
    std::uint32_t permitted = 0;
    if ((mode & proto::open_read) != 0 && perm::may_access(cred, attr, proto::access_read) == 0)
        permitted |= proto::open_read;
    if ((mode & proto::open_write) != 0 && perm::may_access(cred, attr, proto::access_write) == 0)
        permitted |= proto::open_write;
    return permitted;
}

MetaService::HoldUndo MetaService::hold_created(const proto::CreateResponse &made,
                                                const Credentials &cred,
                                                const proto::CreateOpen &open)
{
    const Handle handle = made.attr.handle;
    // The creator may use what it made as its open asked; a file found
    // (not exclusive) only as its permission allows, as an OPEN.
    const std::uint32_t rights =
        made.created ? open.mode : permitted_modes(cred, made.attr, open.mode);
    // In the committer, right after the create was applied in this batch:
    // every later unlink (this batch's too) sees the hold, so the file
    // cannot go between the create and its open as it can between a
    // CREATE and an OPEN.  A file found (not exclusive) is held as an
    // OPEN would hold it.
    HoldUndo undo{handle, open.client_id, false, 0, 0, 0};
    const std::lock_guard lock(open_mutex_);
    seen_[open.client_id] = Clock::now();
    auto &holders = holds_[handle];
    const auto mine = std::find_if(holders.begin(), holders.end(),
                                   [&](const Holder &h) { return h.client_id == open.client_id; });
    if (mine == holders.end()) {
        holders.push_back(Holder{open.client_id, open.gen, open.mode, rights});
        undo.added = true;
    } else {
        undo.gen = mine->gen;
        undo.mode = mine->mode;
        undo.rights = mine->rights;
        if (mine->gen <= open.gen) {
            mine->gen = open.gen;
            mine->mode |= open.mode;
            mine->rights |= rights;
        }
    }
    return undo;
}

void MetaService::undo_hold(const HoldUndo &undo)
{
    const std::lock_guard lock(open_mutex_);
    const auto it = holds_.find(undo.handle);
    if (it == holds_.end())
        return;
    const auto mine = std::find_if(it->second.begin(), it->second.end(),
                                   [&](const Holder &h) { return h.client_id == undo.client_id; });
    if (mine == it->second.end())
        return;
    if (undo.added) {
        it->second.erase(mine);
        if (it->second.empty())
            holds_.erase(it);
    } else {
        mine->gen = undo.gen;
        mine->mode = undo.mode;
        mine->rights = undo.rights;
    }
}

void MetaService::drop_holds(std::uint64_t client_id)
{
    const std::lock_guard lock(open_mutex_);
    for (auto it = holds_.begin(); it != holds_.end();) {
        std::erase_if(it->second, [&](const Holder &h) { return h.client_id == client_id; });
        it = it->second.empty() ? holds_.erase(it) : std::next(it);
    }
    seen_.erase(client_id);
}

// What the hold's rights allow, signed into the answer when the client
// asked: its first read or write then needs no capability request.
void MetaService::add_open_capability(const Origin &origin, Handle handle, std::uint32_t rights,
                                      proto::OpenResponse &out) const
{
    const std::uint32_t cap_rights = ((rights & proto::open_read) != 0 ? proto::cap_read : 0U) |
                                     ((rights & proto::open_write) != 0 ? proto::cap_write : 0U);
    if (origin.wants_capability && settings_.capability_key && cap_rights != 0 &&
        out.attr.type == ObjectType::regular)
        out.cap = grant(origin, handle, cap_rights);
}

void MetaService::serve_open(const Origin &origin, const Credentials &cred,
                             const proto::OpenRequest &req)
{
    const auto now = Clock::now();
    proto::OpenResponse out;
    out.server_boot = boot_id_;
    // First look: an orphan already (nlink 0) may only be opened by a
    // client that shares it with its holders, or re-opened in the grace.
    if (const int rc = store_.getattr(cred, req.handle, out.attr); rc != 0) {
        loop_.respond_error(origin, -rc);
        return;
    }
    const bool was_orphan = out.attr.nlink == 0;
    // The open is not refused for want of permission (the kernel decided,
    // and a create's O_RDWR of a 0444 file is right), but only what the
    // permission allows goes into the hold's rights (capabilities).
    const std::uint32_t permitted = permitted_modes(cred, out.attr, req.mode);
    std::uint32_t held = permitted; // the hold's rights after this open
    bool added = false;
    std::string owner;
    {
        const std::lock_guard lock(open_mutex_);
        // A hold in another key's session would be dropped by that
        // session's close, and would keep it alive.
        if (foreign_locked(req.client_id, key_name(origin), owner)) {
            loop_.respond_error(origin, EACCES);
        } else {
            seen_[req.client_id] = now;
        }
    }
    if (!owner.empty()) {
        log_foreign(origin, req.client_id, owner);
        return;
    }
    {
        const std::lock_guard lock(open_mutex_);
        if (dying_.contains(req.handle)) {
            loop_.respond_error(origin, ENOENT);
            return;
        }
        auto &holders = holds_[req.handle];
        if (was_orphan && holders.empty() && !(req.reclaim && in_grace(now))) {
            holds_.erase(req.handle);
            loop_.respond_error(origin, ENOENT);
            return;
        }
        const auto mine = std::find_if(holders.begin(), holders.end(), [&](const Holder &h) {
            return h.client_id == req.client_id;
        });
        if (mine == holders.end()) {
            holders.push_back(Holder{req.client_id, req.gen, req.mode, permitted});
            added = true;
        } else if (mine->gen <= req.gen) {
            // Older opens (a late duplicate) change nothing.
            mine->gen = req.gen;
            mine->mode |= req.mode;
            mine->rights |= permitted;
            held = mine->rights;
        } else {
            held = mine->rights;
        }
    }
    add_open_capability(origin, req.handle, held, out);
    if (was_orphan) {
        loop_.respond(origin, out);
        return;
    }
    // Second look, now that the hold is visible to every later unlink: an
    // unlink that saw no hold has committed or is dying (refused above),
    // and if it committed, the inode is gone now.
    const int rc = store_.getattr(cred, req.handle, out.attr);
    if (rc != 0) {
        if (added) {
            const std::lock_guard lock(open_mutex_);
            if (auto it = holds_.find(req.handle); it != holds_.end()) {
                std::erase_if(it->second,
                              [&](const Holder &h) { return h.client_id == req.client_id; });
                if (it->second.empty())
                    holds_.erase(it);
            }
        }
        loop_.respond_error(origin, -rc);
        return;
    }
    loop_.respond(origin, out);
}

void MetaService::serve_list_orphans(const Origin &origin, const Credentials &cred,
                                     const proto::ListOrphansRequest &req)
{
    // For pvfs-fsck, as list_handles: root only.
    if (cred.uid != 0) {
        loop_.respond_error(origin, EPERM);
        return;
    }
    const std::uint32_t max =
        std::min<std::uint32_t>(req.max, static_cast<std::uint32_t>(proto::max_list_orphans));
    std::vector<meta::Orphan> orphans;
    bool eof = true;
    const int rc = max == 0 ? -EINVAL : store_.list_orphans(req.cookie, max, orphans, eof);
    if (rc != 0) {
        loop_.respond_error(origin, -rc);
        return;
    }
    proto::ListOrphansResponse out;
    out.eof = eof;
    out.next_cookie = orphans.empty() ? req.cookie : orphans.back().handle;
    for (const meta::Orphan &o : orphans) {
        out.entries.push_back(
            proto::OrphanEntry{o.handle, static_cast<std::uint8_t>(o.state), o.since_ns, o.layout});
    }
    loop_.respond(origin, out);
}

void MetaService::apply_close(meta::WriteBatch &batch, Job &job)
{
    const auto &req = std::get<proto::CloseRequest>(job.body);
    const auto now = Clock::now();
    std::vector<Handle> unheld;
    {
        const std::lock_guard lock(open_mutex_);
        seen_[req.client_id] = now;
        for (const proto::OpenRef &ref : req.refs) {
            const auto it = holds_.find(ref.handle);
            if (it == holds_.end()) {
                // Nobody holds it: a replayed close (its first copy
                // released the file, and its reply may have died with
                // its closer) gets the objects to remove again; a held
                // orphan nobody holds goes, as the sweep would.
                unheld.push_back(ref.handle);
                continue;
            }
            // A close older than the client's latest open keeps the hold.
            std::erase_if(it->second, [&](const Holder &h) {
                return h.client_id == req.client_id && h.gen <= ref.gen;
            });
            if (it->second.empty()) {
                holds_.erase(it);
                unheld.push_back(ref.handle);
            }
        }
    }
    proto::CloseResponse out;
    out.server_boot = boot_id_;
    job.error = 0;
    // In the grace another holder may not have re-opened yet: the sweep
    // after it reclaims what nobody holds.
    if (!in_grace(now)) {
        for (const Handle h : unheld) {
            meta::Removed gone;
            if (const int rc = batch.release(h, gone); rc != 0) {
                gossip::error(Mask::meta, "release of orphan {:016x}: {}", h, errno_text(-rc));
                continue; // the sweep tries again
            }
            if (gone.handle != no_handle)
                out.doomed.push_back(proto::Doomed{gone.handle, gone.layout});
        }
        // Orphans the sweep released (after the grace, a lease's end):
        // this client finishes them.  Taken even if this batch fails: a
        // lease later they are handed out as below.
        std::vector<Handle> unowned;
        {
            const std::lock_guard lock(open_mutex_);
            const std::size_t n = std::min(
                {max_handout, unowned_.size(), proto::max_close_handles - out.doomed.size()});
            unowned.assign(unowned_.end() - static_cast<std::ptrdiff_t>(n), unowned_.end());
            unowned_.resize(unowned_.size() - n);
        }
        for (const Handle h : unowned) {
            meta::Removed gone;
            if (batch.release(h, gone) == 0 && gone.handle != no_handle)
                out.doomed.push_back(proto::Doomed{gone.handle, gone.layout});
        }
        // Orphans whose closer died before removing the objects: this
        // client finishes them.
        const std::uint64_t wall = realtime_ns();
        const auto lease_ns = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(settings_.lease).count());
        std::vector<meta::Orphan> stale;
        if (wall > lease_ns && out.doomed.size() < proto::max_close_handles &&
            batch.orphan_handout(
                wall - lease_ns, wall,
                std::min(max_handout, proto::max_close_handles - out.doomed.size()), stale) == 0) {
            for (const meta::Orphan &o : stale)
                out.doomed.push_back(proto::Doomed{o.handle, o.layout});
        }
    }
    job.response = std::move(out);
}

bool MetaService::close_at_once(Job &job)
{
    // Most closes drop a hold on a file that still has its name: nothing
    // durable changes, so waiting for the committer's next commit (a
    // sync) would only add latency.  Everything else takes the committer:
    // a file whose last hold goes while it is an orphan (released in a
    // batch), a close naming a file nobody holds (a replay, handed the
    // objects again), the grace, and orphans waiting for a closer.
    const auto &req = std::get<proto::CloseRequest>(job.body);
    const auto now = Clock::now();
    // A renewal (no files) may be handed orphans to finish.
    if (req.refs.empty() || in_grace(now))
        return false;
    // Which of the named files this close would leave unheld; nullopt when
    // the committer must take it.
    const std::string_view key = key_name(job.origin);
    const auto unheld = [&]() -> std::optional<std::vector<Handle>> {
        // Another key's session is refused, an unclaimed one claimed, by
        // the committer (bound_to_key).
        const auto bound = session_keys_.find(req.client_id);
        if (!unowned_.empty() || (bound != session_keys_.end() &&
                                  (claimable(bound->second, key) || *bound->second != key)))
            return std::nullopt;
        std::vector<Handle> out;
        for (const proto::OpenRef &ref : req.refs) {
            const auto it = holds_.find(ref.handle);
            if (it == holds_.end() || kept_.contains(ref.handle))
                return std::nullopt;
            if (std::all_of(it->second.begin(), it->second.end(), [&](const Holder &h) {
                    return h.client_id == req.client_id && h.gen <= ref.gen;
                }))
                out.push_back(ref.handle);
        }
        return out;
    };
    std::vector<Handle> released;
    std::uint64_t epoch = 0;
    {
        const std::lock_guard lock(open_mutex_);
        auto first = unheld();
        if (!first)
            return false;
        released = std::move(*first);
        epoch = kept_epoch_;
    }
    // A last unlink that found one of these held before we looked made it
    // an orphan: it is in kept_ until its batch commits, and in the table
    // after, which this read sees unless a commit ended in between (the
    // epoch moved).
    bool orphan = false;
    if (!released.empty() && (store_.any_orphan(released, orphan) != 0 || orphan))
        return false;
    {
        const std::lock_guard lock(open_mutex_);
        const auto again = unheld();
        if (!again || kept_epoch_ != epoch ||
            !std::all_of(again->begin(), again->end(), [&](Handle h) {
                return std::find(released.begin(), released.end(), h) != released.end();
            }))
            return false;
        seen_[req.client_id] = now;
        for (const proto::OpenRef &ref : req.refs) {
            const auto it = holds_.find(ref.handle);
            std::erase_if(it->second, [&](const Holder &h) {
                return h.client_id == req.client_id && h.gen <= ref.gen;
            });
            if (it->second.empty())
                holds_.erase(it);
        }
    }
    gossip::debug(Mask::meta, "close of {} files answered without a commit", req.refs.size());
    proto::CloseResponse out;
    out.server_boot = boot_id_;
    job.error = 0;
    job.response = std::move(out);
    return true;
}

void MetaService::apply_orphan_done(meta::WriteBatch &batch, Job &job)
{
    const auto &req = std::get<proto::OrphanDoneRequest>(job.body);
    const int rc = batch.orphan_done(req.handle);
    job.error = rc < 0 ? -rc : 0;
    job.response = proto::OrphanDoneResponse{};
}

std::size_t MetaService::reclaims_due() const
{
    if (in_grace(Clock::now()))
        return 0;
    const std::uint64_t wall = realtime_ns();
    const auto after = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(settings_.reclaim_after).count());
    if (wall <= after)
        return 0;
    std::size_t due = 0;
    std::uint64_t cookie = 0;
    for (;;) {
        std::vector<meta::Orphan> page;
        bool eof = true;
        if (store_.list_orphans(cookie, 1024, page, eof) != 0)
            return due;
        due += static_cast<std::size_t>(std::ranges::count_if(page, [&](const meta::Orphan &o) {
            return o.state == meta::OrphanState::reclaim && o.since_ns <= wall - after;
        }));
        if (eof || page.empty())
            return due;
        cookie = page.back().handle;
    }
}

void MetaService::sweep_holds(meta::WriteBatch &batch, Clock::time_point now)
{
    if (in_grace(now))
        return;
    {
        // Holders silent for a lease are gone (the client died, or lost
        // its way to us); their files are reclaimed below.
        const std::lock_guard lock(open_mutex_);
        std::vector<std::uint64_t> silent;
        for (const auto &[id, when] : seen_) {
            if (now - when >= settings_.lease)
                silent.push_back(id);
        }
        for (const std::uint64_t id : silent) {
            gossip::debug(Mask::meta, "client {:016x} silent for a lease: its holds go", id);
            for (auto it = holds_.begin(); it != holds_.end();) {
                std::erase_if(it->second, [&](const Holder &h) { return h.client_id == id; });
                it = it->second.empty() ? holds_.erase(it) : std::next(it);
            }
            seen_.erase(id);
        }
    }
    // Held orphans nobody holds (after a lease expiry, a session's end,
    // the grace, or a release that failed) go to reclaim; the table is
    // small, so a walk each tick is cheap.
    std::uint64_t cookie = 0;
    for (;;) {
        std::vector<meta::Orphan> page;
        bool eof = true;
        if (store_.list_orphans(cookie, 1024, page, eof) != 0)
            return;
        for (const meta::Orphan &o : page) {
            if (o.state != meta::OrphanState::held)
                continue;
            {
                const std::lock_guard lock(open_mutex_);
                if (holds_.contains(o.handle))
                    continue;
            }
            meta::Removed gone;
            if (const int rc = batch.release(o.handle, gone); rc != 0) {
                gossip::error(Mask::meta, "release of orphan {:016x}: {}", o.handle,
                              errno_text(-rc));
            } else {
                gossip::debug(Mask::meta, "orphan {:016x} held by nobody: reclaim", o.handle);
                const std::lock_guard lock(open_mutex_);
                unowned_.push_back(o.handle);
            }
        }
        if (eof || page.empty())
            return;
        cookie = page.back().handle;
    }
}

} // namespace pvfs::server
