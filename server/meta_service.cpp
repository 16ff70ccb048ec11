// The metadata role of pvfs-server (meta_service.hpp).
#include "meta_service.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>
#include <variant>

#include "pvfs/gossip.hpp"

namespace pvfs::server {

namespace {

using gossip::Mask;

// Changes one commit carries at most (a burst beyond waits for the next).
constexpr std::size_t max_batch = 1024;

proto::DirEntry to_proto(meta::DirEntry &&e)
{
    return proto::DirEntry{std::move(e.name), e.handle, e.type, e.cookie};
}

} // namespace

MetaService::MetaService(Loop &loop, meta::Store store)
    : loop_(loop), store_(std::move(store)), event_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))
{
    if (!event_.valid())
        throw std::system_error(errno, std::generic_category(), "eventfd");
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

void MetaService::handle(const Origin &origin, const Credentials &cred, proto::RequestBody &body)
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
    default:
        break;
    }
    {
        const std::lock_guard lock(mutex_);
        queued_.push_back(Job{origin, cred, std::move(body), 0, {}});
    }
    wake_.notify_one();
}

void MetaService::respond_read(const Origin &origin, const Credentials &cred,
                               proto::RequestBody &body)
{
    int rc = 0;
    if (const auto *r = std::get_if<proto::LookupRequest>(&body)) {
        proto::LookupResponse out;
        rc = store_.lookup(cred, r->parent, r->name, out.attr);
        if (rc == 0)
            return loop_.respond(origin, out);
    } else if (const auto *g = std::get_if<proto::GetattrRequest>(&body)) {
        proto::GetattrResponse out;
        rc = store_.getattr(cred, g->handle, out.attr);
        if (rc == 0)
            return loop_.respond(origin, out);
    } else if (const auto *l = std::get_if<proto::ReadlinkRequest>(&body)) {
        proto::ReadlinkResponse out;
        rc = store_.readlink(cred, l->handle, out.target);
        if (rc == 0)
            return loop_.respond(origin, std::move(out));
    } else if (const auto *d = std::get_if<proto::ReaddirRequest>(&body)) {
        meta::DirPage page;
        const std::uint32_t max = std::min<std::uint32_t>(
            d->max_entries, static_cast<std::uint32_t>(proto::max_readdir_entries));
        rc = max == 0 ? -EINVAL : store_.readdir(cred, d->handle, d->cookie, max, page);
        if (rc == 0) {
            proto::ReaddirResponse out;
            out.entries.reserve(page.entries.size());
            for (meta::DirEntry &e : page.entries)
                out.entries.push_back(to_proto(std::move(e)));
            out.eof = page.eof;
            return loop_.respond(origin, std::move(out));
        }
    } else if (const auto *xg = std::get_if<proto::XattrGetRequest>(&body)) {
        std::string value;
        rc = store_.xattr_get(cred, xg->handle, xg->name, value);
        if (rc == 0) {
            proto::XattrGetResponse out;
            out.value.resize(value.size());
            std::memcpy(out.value.data(), value.data(), value.size());
            return loop_.respond(origin, std::move(out));
        }
    } else if (const auto *xl = std::get_if<proto::XattrListRequest>(&body)) {
        proto::XattrListResponse out;
        rc = store_.xattr_list(cred, xl->handle, out.names);
        if (rc == 0)
            return loop_.respond(origin, std::move(out));
    } else if (const auto *lg = std::get_if<proto::LayoutGetRequest>(&body)) {
        proto::LayoutGetResponse out;
        rc = store_.layout_get(cred, lg->handle, out.layout);
        if (rc == 0)
            return loop_.respond(origin, out);
    } else if (const auto *ac = std::get_if<proto::AccessRequest>(&body)) {
        rc = store_.access(cred, ac->handle, ac->mask);
        if (rc == 0)
            return loop_.respond(origin, proto::AccessResponse{});
    } else if (const auto *lh = std::get_if<proto::ListHandlesRequest>(&body)) {
        // Listing every handle is for pvfs-fsck: root only.
        if (cred.uid != 0) {
            rc = -EPERM;
        } else {
            meta::HandlePage page;
            const std::uint32_t max = std::min<std::uint32_t>(
                lh->max, static_cast<std::uint32_t>(proto::max_list_handles));
            rc = max == 0 ? -EINVAL : store_.list_handles(lh->cookie, max, page);
            if (rc == 0) {
                proto::ListHandlesResponse out{std::move(page.handles), page.next_cookie, page.eof};
                return loop_.respond(origin, std::move(out));
            }
        }
    } else {
        rc = -EOPNOTSUPP;
    }
    loop_.respond_error(origin, -rc);
}

void MetaService::apply(meta::WriteBatch &batch, Job &job)
{
    const Credentials &cred = job.cred;
    int rc = 0;
    proto::RequestBody &body = job.body;
    if (const auto *s = std::get_if<proto::SetattrRequest>(&body)) {
        proto::SetattrResponse out;
        if (s->mask == proto::set_ctime) {
            // "The caller wrote or truncated the data": mtime and ctime now,
            // setuid/setgid cleared, write access needed (docs/protocol.md).
            rc = batch.data_written(cred, s->handle, out.attr);
        } else {
            perm::AttrChange change;
            change.mask = s->mask & ~proto::set_ctime; // ctime follows any change
            change.mode = s->mode;
            change.uid = s->uid;
            change.gid = s->gid;
            change.atime = s->atime;
            change.mtime = s->mtime;
            rc = batch.setattr(cred, s->handle, change, out.attr);
        }
        job.response = out;
    } else if (const auto *c = std::get_if<proto::CreateRequest>(&body)) {
        meta::CreateResult result;
        rc = batch.create(cred, c->parent, c->name, c->mode, c->exclusive, c->layout, result);
        job.response = proto::CreateResponse{result.attr, result.created};
    } else if (const auto *m = std::get_if<proto::MkdirRequest>(&body)) {
        proto::MkdirResponse out;
        rc = batch.mkdir(cred, m->parent, m->name, m->mode, out.attr);
        job.response = out;
    } else if (const auto *n = std::get_if<proto::MknodRequest>(&body)) {
        proto::MknodResponse out;
        rc = batch.mknod(cred, n->parent, n->name, n->type, n->mode, n->rdev, out.attr);
        job.response = out;
    } else if (const auto *y = std::get_if<proto::SymlinkRequest>(&body)) {
        proto::SymlinkResponse out;
        rc = batch.symlink(cred, y->parent, y->name, y->target, out.attr);
        job.response = out;
    } else if (const auto *l = std::get_if<proto::LinkRequest>(&body)) {
        proto::LinkResponse out;
        rc = batch.link(cred, l->handle, l->new_parent, l->new_name, out.attr);
        job.response = out;
    } else if (const auto *r = std::get_if<proto::RemoveRequest>(&body)) {
        meta::Removed removed;
        rc = batch.unlink(cred, r->parent, r->name, removed);
        job.response = proto::RemoveResponse{removed.handle, removed.type, removed.nlink_after,
                                             removed.layout};
    } else if (const auto *d = std::get_if<proto::RmdirRequest>(&body)) {
        rc = batch.rmdir(cred, d->parent, d->name);
        job.response = proto::RmdirResponse{};
    } else if (const auto *rn = std::get_if<proto::RenameRequest>(&body)) {
        meta::Removed replaced;
        rc = batch.rename(cred, rn->old_parent, rn->old_name, rn->new_parent, rn->new_name,
                          rn->flags, replaced);
        job.response = proto::RenameResponse{replaced.handle, replaced.type, replaced.nlink_after,
                                             replaced.layout};
    } else if (const auto *xs = std::get_if<proto::XattrSetRequest>(&body)) {
        const std::string_view value(reinterpret_cast<const char *>( // NOLINT: bytes as chars
                                         xs->value.data()),
                                     xs->value.size());
        rc = batch.xattr_set(cred, xs->handle, xs->name, value, xs->flags);
        job.response = proto::XattrSetResponse{};
    } else if (const auto *xr = std::get_if<proto::XattrRemoveRequest>(&body)) {
        rc = batch.xattr_remove(cred, xr->handle, xr->name);
        job.response = proto::XattrRemoveResponse{};
    } else if (const auto *ls = std::get_if<proto::LayoutSetRequest>(&body)) {
        rc = batch.layout_set(cred, ls->handle, ls->layout);
        job.response = proto::LayoutSetResponse{};
    } else if (const auto *mo = std::get_if<proto::MkdirObjectRequest>(&body)) {
        proto::MkdirObjectResponse out;
        rc = batch.mkdir_object(cred, mo->parent, mo->mode, out.attr);
        job.response = out;
    } else if (const auto *ld = std::get_if<proto::LinkDirRequest>(&body)) {
        rc = batch.link_dir(cred, ld->parent, ld->name, ld->handle);
        job.response = proto::LinkDirResponse{};
    } else if (const auto *rd = std::get_if<proto::RetireDirRequest>(&body)) {
        proto::RetireDirResponse out;
        rc = batch.retire_dir(rd->handle, rd->retire, out.attr);
        job.response = out;
    } else if (const auto *ud = std::get_if<proto::UnlinkDirRequest>(&body)) {
        rc = batch.unlink_dir(cred, ud->parent, ud->name, ud->handle, ud->owner_uid);
        job.response = proto::UnlinkDirResponse{};
    } else if (const auto *ro = std::get_if<proto::RemoveDirObjectRequest>(&body)) {
        rc = batch.remove_dir_object(ro->handle);
        job.response = proto::RemoveDirObjectResponse{};
    } else {
        rc = -EOPNOTSUPP;
    }
    job.error = rc < 0 ? -rc : 0;
}

void MetaService::committer()
{
    std::vector<Job> jobs;
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [this] { return stop_ || !queued_.empty(); });
            if (stop_)
                return;
            const std::size_t n = std::min(queued_.size(), max_batch);
            jobs.clear();
            for (std::size_t i = 0; i < n; ++i) {
                jobs.push_back(std::move(queued_.front()));
                queued_.pop_front();
            }
            committing_ = n;
        }
        meta::WriteBatch batch = store_.batch();
        int rc = batch.status();
        if (rc == 0) {
            for (Job &job : jobs)
                apply(batch, job);
            rc = batch.commit();
        }
        if (rc != 0) {
            gossip::error(Mask::meta, "a metadata commit of {} changes failed: {}", jobs.size(),
                          errno_text(-rc));
            for (Job &job : jobs)
                job.error = -rc;
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

void MetaService::poll()
{
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t r = ::read(event_.get(), &count, sizeof count);
    std::vector<Job> done;
    {
        const std::lock_guard lock(mutex_);
        done.swap(finished_);
    }
    for (Job &job : done) {
        if (job.error != 0) {
            loop_.respond_error(job.origin, job.error);
        } else {
            loop_.respond(job.origin, std::move(job.response));
        }
    }
}

} // namespace pvfs::server
