#include "handler.hpp"
#include "ops.hpp"

#include <pvfs/gossip.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <utility>

namespace pvfs::pvfsd {

namespace gossip = pvfs::gossip;

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
    auto op = std::make_unique<Op>(*this, std::move(up));
    Op &o = *op;
    ops_.emplace(tag, std::move(op));
    const auto common = o.up.body<pvfsd_req_common>();
    const Credentials cred = common ? credentials_of(*common) : Credentials{};
    // The kernel's reply slot and tag name a change to the reply cache;
    // run() adds the mount's client_id.
    const bool once = common && common->reply_slot < PVFSD_REPLY_SLOTS;
    if (once) {
        o.once.slot = common->reply_slot;
        o.once.xid = tag;
    }
    loop_->set_context(cred, tag, once ? &o.once : nullptr);
    o.task = run(o);
    ++running_;
    // It may finish (and be on the completion list) before start returns.
    o.task.start(&Handler::on_done, &o);
    // Whatever starts next without a context of its own must not name
    // this op's ids, which end with it.
    loop_->set_context(cred, tag);
    peak_ = std::max(peak_, in_flight());
}

void Handler::on_done(void *op) noexcept
{
    Op &o = *static_cast<Op *>(op);
    Handler &h = o.handler;
    o.done = true;
    --h.running_;
    if (h.finished_last_ != nullptr)
        h.finished_last_->next_finished = &o;
    else
        h.finished_first_ = &o;
    h.finished_last_ = &o;
}

std::vector<std::vector<std::byte>> Handler::take_finished()
{
    std::vector<std::vector<std::byte>> out;
    while (finished_first_ != nullptr) {
        // Off the list and out of the table before its result is taken,
        // which rethrows what escaped the task: no list entry outlives its op.
        Op *const first = finished_first_;
        finished_first_ = first->next_finished;
        if (finished_first_ == nullptr)
            finished_last_ = nullptr;
        const std::unique_ptr<Op> op = std::move(ops_.extract(first->up.tag()).mapped());
        std::vector<std::byte> reply = op->task.result();
        if (!reply.empty())
            out.push_back(std::move(reply));
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
        policies_.erase(common->mount_id);
        gossip::info(gossip::Mask::pvfsd, "mount {} detached", common->mount_id);
    } else {
        const auto it = clients_.find(common->mount_id);
        if (it == clients_.end()) {
            gossip::warning(gossip::Mask::pvfsd, "{} for mount {}, which is not attached",
                            op_name(up.op()), common->mount_id);
            status = -ENOTCONN;
        } else {
            const std::shared_ptr<client::Client> c = it->second;
            const MountPolicy policy = policies_[common->mount_id];
            op.once.client_id = policy.client_id;
            status = kernel_status(co_await dispatch(up, *c, out), policy);
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
    const auto options = up.tail(sizeof(*req), req->source_len, req->options_len);
    if (!source || !options ||
        up.tail_size(sizeof(*req)) != std::size_t{req->source_len} + req->options_len)
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
    const MountPolicy policy = apply_mount_options(*req, *source, *options, o);
    // The ATTACH itself gives up (mount(8) must not hang); the mount's
    // operations then wait as its options say.
    const bool hard = o.hard;
    o.hard = false;
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
    c->set_hard(hard);
    clients_[req->common.mount_id] = std::shared_ptr<client::Client>(std::move(c));
    policies_[req->common.mount_id] = policy;
    return 0;
}

namespace {

// An op this pvfsd does not know (a newer module's).
Task<int> unsupported(ops::Call /*call*/)
{
    co_return -ENOSYS;
}

// The coroutine of each op, by PVFSD_OP_* (as libfuse's fuse_ll_ops[]).
// HELLO, ATTACH, DETACH and CANCEL never get here: Handler::start and
// Handler::run answer them.
constexpr std::array<ops::Fn, PVFSD_OP_COUNT> op_table = [] {
    std::array<ops::Fn, PVFSD_OP_COUNT> t{};
    t.fill(&unsupported);
    t[PVFSD_OP_LOOKUP] = &ops::lookup;
    t[PVFSD_OP_GETATTR] = &ops::getattr;
    t[PVFSD_OP_SETATTR] = &ops::setattr;
    t[PVFSD_OP_CREATE] = &ops::create;
    t[PVFSD_OP_MKDIR] = &ops::make_node;
    t[PVFSD_OP_MKNOD] = &ops::make_node;
    t[PVFSD_OP_SYMLINK] = &ops::symlink;
    t[PVFSD_OP_LINK] = &ops::link;
    t[PVFSD_OP_UNLINK] = &ops::remove;
    t[PVFSD_OP_RMDIR] = &ops::remove;
    t[PVFSD_OP_RENAME] = &ops::rename;
    t[PVFSD_OP_READLINK] = &ops::readlink;
    t[PVFSD_OP_READDIR] = &ops::readdir;
    t[PVFSD_OP_READ] = &ops::io;
    t[PVFSD_OP_WRITE] = &ops::io;
    t[PVFSD_OP_FSYNC] = &ops::fsync;
    t[PVFSD_OP_STATFS] = &ops::statfs;
    t[PVFSD_OP_XATTR_GET] = &ops::xattr_get;
    t[PVFSD_OP_XATTR_SET] = &ops::xattr_set;
    t[PVFSD_OP_XATTR_LIST] = &ops::xattr_list;
    t[PVFSD_OP_XATTR_REMOVE] = &ops::xattr_remove;
    return t;
}();

} // namespace

Task<int> Handler::dispatch(const Upcall &up, client::Client &c, Downcall &out)
{
    const ops::Fn fn = up.op() < op_table.size() ? op_table[up.op()] : &unsupported;
    return fn(ops::Call{up, c, out, ops::Slots{slots_, slot_size_}});
}

} // namespace pvfs::pvfsd
