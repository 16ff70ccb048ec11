#include "handler.hpp"

#include <pvfs/gossip.hpp>
#include <pvfs/proto.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

namespace pvfs::pvfsd {

namespace gossip = pvfs::gossip;

namespace {

// Answers with one object's attributes.
void put_attr(Downcall &out, const Attr &a)
{
    pvfsd_attr_resp r{};
    r.attr = to_dev_attr(a);
    out.put(r);
}

Timespec to_timespec(const pvfsd_time &t)
{
    return Timespec{t.sec, t.nsec};
}

ObjectType to_type(std::uint32_t t, bool &ok)
{
    ok = t >= PVFSD_TYPE_REGULAR && t <= PVFSD_TYPE_BLOCK_DEVICE;
    return ok ? static_cast<ObjectType>(t) : ObjectType::regular;
}

} // namespace

Handler::Handler(HandlerOptions options, std::shared_ptr<client::Loop> loop,
                 std::span<std::byte> slots, std::size_t slot_size)
    : options_(std::move(options)), loop_(std::move(loop)), slots_(slots), slot_size_(slot_size)
{
}

Handler::~Handler()
{
    // Unfinished tasks wait on the loop, which may outlive this handler:
    // stop their requests so nothing resumes a destroyed frame.
    for (const auto &[tag, op] : ops_) {
        if (!op->done)
            loop_->cancel(tag);
    }
}

std::span<std::byte> Handler::slot(std::uint32_t index, std::uint32_t length) const
{
    if (slot_size_ == 0 || index >= slots_.size() / slot_size_ || length > slot_size_)
        return {};
    return slots_.subspan(static_cast<std::size_t>(index) * slot_size_, length);
}

void Handler::start(Upcall up)
{
    if (up.op() == PVFSD_OP_CANCEL) {
        const auto req = up.body<pvfsd_cancel_req>();
        if (!req) {
            gossip::warning(gossip::Mask::dev, "CANCEL (tag {}) without a target: ignored",
                            up.tag());
            return;
        }
        const auto it = ops_.find(req->target_tag);
        if (it == ops_.end() || it->second->done) {
            gossip::debug(gossip::Mask::dev, "CANCEL of tag {}: answered already", req->target_tag);
            return;
        }
        const std::size_t stopped = loop_->cancel(req->target_tag);
        ++cancels_;
        gossip::debug(gossip::Mask::dev, "CANCEL of {} tag {}: {} requests stopped",
                      op_name(it->second->up.op()), req->target_tag, stopped);
        return;
    }
    const std::uint64_t tag = up.tag();
    if (ops_.contains(tag)) {
        // The kernel never reuses a tag in flight: a broken message.
        gossip::error(gossip::Mask::dev, "{} with tag {}, which is in flight: refused",
                      op_name(up.op()), tag);
        return;
    }
    auto op = std::make_unique<Op>(std::move(up));
    Op &o = *op;
    ops_.emplace(tag, std::move(op));
    const auto common = o.up.body<pvfsd_req_common>();
    loop_->set_context(common ? credentials_of(*common) : Credentials{}, tag);
    o.task = run(o);
    o.task.start(&Handler::on_done, &o);
    peak_ = std::max(peak_, in_flight());
}

void Handler::on_done(void *op) noexcept
{
    static_cast<Op *>(op)->done = true;
}

std::size_t Handler::in_flight() const noexcept
{
    std::size_t n = 0;
    for (const auto &[tag, op] : ops_)
        n += op->done ? 0 : 1;
    return n;
}

std::vector<std::vector<std::byte>> Handler::take_finished()
{
    std::vector<std::vector<std::byte>> out;
    for (auto it = ops_.begin(); it != ops_.end();) {
        if (!it->second->done) {
            ++it;
            continue;
        }
        std::vector<std::byte> reply = it->second->task.result();
        if (!reply.empty())
            out.push_back(std::move(reply));
        it = ops_.erase(it);
    }
    return out;
}

Task<std::vector<std::byte>> Handler::run(Op &op)
{
    const Upcall &up = op.up;
    Downcall out(up.op(), up.tag());
    const auto common = up.body<pvfsd_req_common>();
    if (!common || up.op() == PVFSD_OP_HELLO) {
        gossip::warning(gossip::Mask::dev, "{} upcall (tag {}) without a caller: refused",
                        op_name(up.op()), up.tag());
        co_return out.finish(-EINVAL);
    }
    int status = 0;
    if (up.op() == PVFSD_OP_ATTACH) {
        status = attach(up, out);
    } else if (up.op() == PVFSD_OP_DETACH) {
        // Operations of the mount still in flight keep its client.
        clients_.erase(common->mount_id);
        gossip::info(gossip::Mask::pvfsd, "mount {} detached", common->mount_id);
    } else {
        const auto it = clients_.find(common->mount_id);
        if (it == clients_.end()) {
            gossip::warning(gossip::Mask::pvfsd, "{} for mount {}, which is not attached",
                            op_name(up.op()), common->mount_id);
            status = -ENOTCONN;
        } else {
            const std::shared_ptr<client::Client> c = it->second;
            status = co_await dispatch(up, *c, out);
        }
    }
    if (status < 0 && gossip::enabled(gossip::Mask::pvfsd))
        gossip::debug(gossip::Mask::pvfsd, "{} tag {}: {}", op_name(up.op()), up.tag(),
                      client::error_text(status));
    co_return out.finish(status);
}

int Handler::attach(const Upcall &up, Downcall &out)
{
    const auto req = up.body<pvfsd_attach_req>();
    if (!req)
        return -EINVAL;
    const auto source = up.tail(sizeof(*req), 0, req->source_len);
    if (!source || up.tail_size(sizeof(*req)) != std::size_t{req->source_len} + req->options_len)
        return -EINVAL;

    client::Options o;
    o.target = std::string(*source);
    o.key_file = options_.key_file;
    o.use_process_credentials = false;
    o.credentials = credentials_of(req->common);
    // The kernel caches attributes by its mount options and checks
    // permissions itself: pvfsd passes requests through.
    o.attr_timeout = std::chrono::milliseconds(0);
    // Layouts change only while a file is empty, and the kernel's GETATTR
    // at each open refreshes them: a READ or WRITE need not ask the
    // metadata server for the file's striping each time.
    o.layout_timeout = std::chrono::minutes(1);
    o.check_data_access = false;
    o.request_timeout = options_.request_timeout;
    o.loop = loop_;
    std::string error;
    auto c = client::Client::connect(o, error);
    if (!c) {
        gossip::error(gossip::Mask::pvfsd, "mount {}: {}", req->common.mount_id, error);
        return -ECONNREFUSED;
    }
    Attr root;
    if (const int rc = c->getattr(pvfs::root_handle, root); rc != 0) {
        gossip::error(gossip::Mask::pvfsd, "mount {}: the root of {}: {}", req->common.mount_id,
                      *source, client::error_text(rc));
        return rc;
    }
    pvfsd_attach_resp r{};
    r.root = to_dev_attr(root);
    r.fs_id = c->cluster().fs_id;
    r.max_name = static_cast<std::uint32_t>(pvfs::max_name);
    out.put(r);
    gossip::info(gossip::Mask::pvfsd, "mount {}: attached to {}{}", req->common.mount_id, *source,
                 (req->common.flags & PVFSD_REQ_REPLAYED) != 0 ? " (replayed)" : "");
    clients_[req->common.mount_id] = std::shared_ptr<client::Client>(std::move(c));
    return 0;
}

Task<int> Handler::dispatch(const Upcall &up, client::Client &c, Downcall &out)
{
    const bool replayed = (up.body<pvfsd_req_common>()->flags & PVFSD_REQ_REPLAYED) != 0;
    switch (up.op()) {
    case PVFSD_OP_LOOKUP:
    case PVFSD_OP_UNLINK:
    case PVFSD_OP_RMDIR: {
        const auto req = up.body<pvfsd_name_req>();
        const auto name = req ? up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
        if (!name || !valid_name(*name))
            co_return -EINVAL;
        if (up.op() == PVFSD_OP_LOOKUP) {
            Attr a;
            const int rc = co_await c.co_lookup(req->parent, *name, a);
            if (rc == 0)
                put_attr(out, a);
            co_return rc;
        }
        int rc = 0;
        if (up.op() == PVFSD_OP_UNLINK) {
            rc = co_await c.co_unlink(req->parent, *name);
        } else {
            rc = co_await c.co_rmdir(req->parent, *name);
        }
        // A replayed removal the dead daemon had done already.
        co_return rc == -ENOENT &&replayed ? 0 : rc;
    }
    case PVFSD_OP_GETATTR: {
        const auto req = up.body<pvfsd_handle_req>();
        if (!req)
            co_return -EINVAL;
        Attr a;
        const int rc = co_await c.co_getattr(req->handle, a);
        if (rc == 0)
            put_attr(out, a);
        co_return rc;
    }
    case PVFSD_OP_SETATTR: {
        const auto req = up.body<pvfsd_setattr_req>();
        if (!req || (req->mask & ~PVFSD_SET_ALL) != 0)
            co_return -EINVAL;
        client::SetAttr s;
        // PVFSD_SET_MODE..MTIME_NOW are proto's set_* bits.
        s.mask = req->mask & (proto::set_mode | proto::set_uid | proto::set_gid | proto::set_atime |
                              proto::set_mtime | proto::set_atime_now | proto::set_mtime_now);
        s.mode = req->mode & 07777U;
        s.uid = req->uid;
        s.gid = req->gid;
        s.atime = to_timespec(req->atime);
        s.mtime = to_timespec(req->mtime);
        s.truncate = (req->mask & PVFSD_SET_SIZE) != 0;
        s.size = req->size;
        Attr a;
        const int rc = co_await c.co_setattr(req->handle, s, a);
        if (rc == 0)
            put_attr(out, a);
        co_return rc;
    }
    case PVFSD_OP_CREATE: {
        const auto req = up.body<pvfsd_create_req>();
        const auto name = req ? up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
        if (!name || !valid_name(*name))
            co_return -EINVAL;
        Attr a;
        bool created = false;
        int rc = co_await c.co_create(req->parent, *name, req->mode & 07777U, req->exclusive != 0,
                                      Layout{}, a, &created);
        if (rc == -EEXIST && replayed) {
            // The dead daemon made it: answer as that create would have.
            rc = co_await c.co_lookup(req->parent, *name, a);
            if (rc == 0 && a.type != ObjectType::regular)
                rc = -EEXIST;
            created = false;
        }
        if (rc == 0) {
            pvfsd_create_resp r{};
            r.attr = to_dev_attr(a);
            r.created = created ? 1 : 0;
            out.put(r);
        }
        co_return rc;
    }
    case PVFSD_OP_MKDIR:
    case PVFSD_OP_MKNOD: {
        const auto req = up.body<pvfsd_mknod_req>();
        const auto name = req ? up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
        if (!name || !valid_name(*name))
            co_return -EINVAL;
        bool ok = false;
        const ObjectType type = to_type(req->type, ok);
        if (!ok || type == ObjectType::regular || type == ObjectType::symlink)
            co_return -EINVAL;
        Attr a;
        int rc = 0;
        if (type == ObjectType::directory) {
            rc = co_await c.co_mkdir(req->parent, *name, req->mode & 07777U, a);
        } else {
            rc = co_await c.co_mknod(req->parent, *name, type, req->mode & 07777U, req->rdev, a);
        }
        if (rc == 0)
            put_attr(out, a);
        co_return rc;
    }
    case PVFSD_OP_SYMLINK: {
        const auto req = up.body<pvfsd_symlink_req>();
        const auto name = req ? up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
        const auto target =
            req ? up.tail(sizeof(*req), req->name_len, req->target_len) : std::nullopt;
        if (!name || !valid_name(*name) || !target || target->empty() ||
            target->size() > PVFSD_MAX_SYMLINK)
            co_return -EINVAL;
        Attr a;
        const int rc = co_await c.co_symlink(req->parent, *name, *target, a);
        if (rc == 0)
            put_attr(out, a);
        co_return rc;
    }
    case PVFSD_OP_LINK: {
        const auto req = up.body<pvfsd_link_req>();
        const auto name = req ? up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
        if (!name || !valid_name(*name))
            co_return -EINVAL;
        Attr a;
        const int rc = co_await c.co_link(req->target, req->new_parent, *name, a);
        if (rc == 0)
            put_attr(out, a);
        co_return rc;
    }
    case PVFSD_OP_RENAME: {
        const auto req = up.body<pvfsd_rename_req>();
        const auto from = req ? up.tail(sizeof(*req), 0, req->old_name_len) : std::nullopt;
        const auto to =
            req ? up.tail(sizeof(*req), req->old_name_len, req->new_name_len) : std::nullopt;
        if (!from || !to || !valid_name(*from) || !valid_name(*to) ||
            (req->flags & ~PVFSD_RENAME_NOREPLACE) != 0)
            co_return -EINVAL;
        const std::uint32_t flags =
            (req->flags & PVFSD_RENAME_NOREPLACE) != 0 ? proto::rename_noreplace : 0;
        co_return co_await c.co_rename(req->old_parent, *from, req->new_parent, *to, flags);
    }
    case PVFSD_OP_READLINK: {
        const auto req = up.body<pvfsd_handle_req>();
        if (!req)
            co_return -EINVAL;
        std::string target;
        const int rc = co_await c.co_readlink(req->handle, target);
        if (rc != 0)
            co_return rc;
        if (target.empty() || target.size() > PVFSD_MAX_SYMLINK ||
            target.find('\0') != std::string::npos)
            co_return -EIO;
        pvfsd_readlink_resp r{};
        r.target_len = static_cast<std::uint32_t>(target.size());
        out.put(r);
        out.put_string(target);
        co_return 0;
    }
    case PVFSD_OP_READDIR: {
        const auto req = up.body<pvfsd_readdir_req>();
        if (!req || req->max_bytes < sizeof(pvfsd_dirent) + 8)
            co_return -EINVAL;
        // Names average well under 32 bytes: ask for what likely fits.
        const std::uint32_t want = std::clamp<std::uint32_t>(
            req->max_bytes / static_cast<std::uint32_t>(sizeof(pvfsd_dirent) + 16), 1, 4096);
        std::vector<proto::DirEntry> entries;
        bool eof = false;
        const int rc = co_await c.co_readdir(req->handle, req->cookie, want, entries, eof);
        if (rc != 0)
            co_return rc;
        Downcall packed(up.op(), up.tag());
        std::uint32_t count = 0;
        std::size_t used = 0;
        for (const auto &e : entries) {
            const std::size_t step = (sizeof(pvfsd_dirent) + e.name.size() + 7) / 8 * 8;
            if (used + step > req->max_bytes) {
                eof = false;
                break;
            }
            if (!valid_name(e.name) || e.handle == no_handle || e.cookie == 0) {
                gossip::warning(gossip::Mask::pvfsd, "readdir of {:#x}: a malformed entry",
                                req->handle);
                co_return -EIO;
            }
            pvfsd_dirent d{};
            d.handle = e.handle;
            d.cookie = e.cookie;
            d.type = static_cast<std::uint32_t>(e.type);
            d.name_len = static_cast<std::uint32_t>(e.name.size());
            packed.put(d);
            packed.put_string(e.name);
            packed.pad_to(8);
            used += step;
            ++count;
        }
        pvfsd_readdir_resp r{};
        r.count = count;
        r.eof = eof ? 1 : 0;
        out.put(r);
        const auto tail = packed.finish(0);
        out.put_bytes(std::span(tail).subspan(sizeof(pvfsd_msg_hdr)));
        co_return 0;
    }
    case PVFSD_OP_READ:
    case PVFSD_OP_WRITE: {
        const auto req = up.body<pvfsd_io_req>();
        if (!req)
            co_return -EINVAL;
        const auto mem = slot(req->slot, req->length);
        if (mem.size() != req->length) {
            gossip::warning(gossip::Mask::dev, "I/O of {} bytes in slot {}: outside the slots",
                            req->length, req->slot);
            co_return -EINVAL;
        }
        gossip::debug(gossip::Mask::pvfsd, "{} tag {}: {:#x}, {} bytes at {}", op_name(up.op()),
                      up.tag(), req->handle, req->length, req->offset);
        std::int64_t n = 0;
        if (up.op() == PVFSD_OP_READ && (req->common.flags & PVFSD_REQ_ZERO_FILL) != 0) {
            // The page cache's read: past the end it wants zeros, not a
            // short count, so the data servers need not be asked for the
            // file's size first.
            const proto::Region region{req->offset, req->length};
            n = co_await c.co_read_list(req->handle, std::span(&region, 1), mem);
        } else if (up.op() == PVFSD_OP_READ) {
            n = co_await c.co_read(req->handle, req->offset, mem);
        } else {
            n = co_await c.co_write(req->handle, req->offset, mem);
        }
        if (n < 0)
            co_return static_cast<int>(n);
        pvfsd_io_resp r{};
        r.done = static_cast<std::uint32_t>(std::min<std::int64_t>(n, req->length));
        out.put(r);
        co_return 0;
    }
    case PVFSD_OP_FSYNC: {
        const auto req = up.body<pvfsd_fsync_req>();
        if (!req)
            co_return -EINVAL;
        co_return co_await c.co_fsync(req->handle);
    }
    case PVFSD_OP_STATFS: {
        client::StatFs s;
        const int rc = co_await c.co_statfs(s);
        if (rc != 0)
            co_return rc;
        constexpr std::uint32_t bsize = 4096;
        pvfsd_statfs_resp r{};
        r.bsize = bsize;
        r.blocks = s.total_bytes / bsize;
        r.bfree = std::min<std::uint64_t>(r.blocks, s.free_bytes / bsize);
        r.bavail = std::min<std::uint64_t>(r.bfree, s.avail_bytes / bsize);
        r.files = s.total_objects;
        r.ffree = std::min<std::uint64_t>(r.files, s.free_objects);
        r.namelen = static_cast<std::uint32_t>(pvfs::max_name);
        out.put(r);
        co_return 0;
    }
    case PVFSD_OP_XATTR_GET:
    case PVFSD_OP_XATTR_SET:
    case PVFSD_OP_XATTR_LIST:
    case PVFSD_OP_XATTR_REMOVE: {
        const auto req = up.body<pvfsd_xattr_req>();
        if (!req)
            co_return -EINVAL;
        if (up.op() == PVFSD_OP_XATTR_LIST) {
            std::vector<std::string> names;
            const int rc = co_await c.co_xattr_list(req->handle, names);
            if (rc != 0)
                co_return rc;
            std::string list;
            for (const auto &n : names) {
                list += n;
                list.push_back('\0');
            }
            if (list.size() > PVFSD_MAX_XATTR_VALUE)
                co_return -E2BIG;
            if (req->value_len != 0 && list.size() > req->value_len)
                co_return -ERANGE;
            pvfsd_xattr_resp r{};
            r.size = static_cast<std::uint32_t>(list.size());
            out.put(r);
            if (req->value_len != 0)
                out.put_string(list);
            co_return 0;
        }
        const auto name = up.tail(sizeof(*req), 0, req->name_len);
        if (!name || name->empty() || name->size() > PVFSD_MAX_XATTR_NAME ||
            name->find('\0') != std::string_view::npos)
            co_return -EINVAL;
        if (up.op() == PVFSD_OP_XATTR_REMOVE)
            co_return co_await c.co_xattr_remove(req->handle, *name);
        if (up.op() == PVFSD_OP_XATTR_SET) {
            const auto value = up.tail(sizeof(*req), req->name_len, req->value_len);
            if (!value || (req->flags & ~(PVFSD_XATTR_CREATE | PVFSD_XATTR_REPLACE)) != 0)
                co_return -EINVAL;
            std::uint32_t flags = 0;
            if ((req->flags & PVFSD_XATTR_CREATE) != 0)
                flags |= proto::xattr_create;
            if ((req->flags & PVFSD_XATTR_REPLACE) != 0)
                flags |= proto::xattr_replace;
            co_return co_await c.co_xattr_set(req->handle, *name, std::as_bytes(std::span(*value)),
                                              flags);
        }
        std::vector<std::byte> value;
        const int rc = co_await c.co_xattr_get(req->handle, *name, value);
        if (rc != 0)
            co_return rc;
        if (value.size() > PVFSD_MAX_XATTR_VALUE)
            co_return -E2BIG;
        if (req->value_len != 0 && value.size() > req->value_len)
            co_return -ERANGE;
        pvfsd_xattr_resp r{};
        r.size = static_cast<std::uint32_t>(value.size());
        out.put(r);
        if (req->value_len != 0)
            out.put_bytes(value);
        co_return 0;
    }
    default:
        co_return -ENOSYS;
    }
}

} // namespace pvfs::pvfsd
