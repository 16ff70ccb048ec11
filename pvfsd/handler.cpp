#include "handler.hpp"
#include "ops.hpp"

#include <pvfs/gossip.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <utility>

namespace pvfs::pvfsd {

namespace gossip = pvfs::gossip;

namespace {

// A replayed ATTACH's pauses between tries: doubling up to the maximum.
constexpr std::chrono::milliseconds first_backoff{1000};
constexpr std::chrono::seconds max_backoff{10};
// The cancel id of renewals: never a kernel tag (those start at 1).
constexpr std::uint64_t renew_cancel_id = 0;
// Renewals come this often within a lease (the server's config).
constexpr unsigned renewals_per_lease = 3;

} // namespace

Handler::Handler(HandlerOptions options, std::shared_ptr<client::Loop> loop, Channel &channel)
    : options_(std::move(options)), loop_(std::move(loop)), channel_(channel)
{
    if (options_.metrics == nullptr)
        return;
    // Read when the file is written, from run_timers: this handler is alive.
    metrics::Registry &r = options_.metrics->registry();
    const metrics::Labels labels = options_.metrics->labels();
    r.gauge_fn("pvfs_client_upcalls_in_flight", "Upcalls being answered now.", labels,
               [this] { return static_cast<std::int64_t>(in_flight()); });
    r.gauge_fn("pvfs_client_mounts", "Mounts attached.", labels,
               [this] { return static_cast<std::int64_t>(mounts()); });
    r.counter_fn("pvfs_client_cancels_total", "Upcalls the kernel cancelled.", labels,
                 [this] { return static_cast<std::uint64_t>(cancels()); });
}

Handler::~Handler()
{
    // Unfinished tasks wait on the loop, which may outlive this handler:
    // stop their requests so nothing resumes a destroyed frame.
    for (const auto &[tag, op] : ops_) {
        if (!op->done)
            loop_->cancel(tag);
    }
    loop_->cancel(renew_cancel_id);
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
        Op &target = *it->second;
        target.cancelled = true;
        const std::size_t stopped = loop_->cancel(req->target_tag);
        ++cancels_;
        gossip::debug(gossip::Mask::dev, "CANCEL of {} tag {}: {} requests stopped{}",
                      op_name(target.up.op()), req->target_tag, stopped,
                      target.parked ? ", no longer waiting" : "");
        // Waiting on the handler (for its mount, or a backoff): it ends now.
        unpark(target);
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
    if (options_.metrics != nullptr)
        o.arrived_ns = metrics::monotonic_ns();
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
        if (reply.empty())
            continue;
        if (options_.metrics != nullptr && op->arrived_ns != 0)
            options_.metrics->answered(reply, op->arrived_ns);
        out.push_back(std::move(reply));
    }
    return out;
}

std::size_t Handler::mounts() const noexcept
{
    return static_cast<std::size_t>(
        std::ranges::count_if(clients_, [](const auto &m) { return m.second.client != nullptr; }));
}

void Handler::Park::await_suspend(std::coroutine_handle<> waiter)
{
    op.parked = waiter;
    op.parked_on_mount = mount_id;
    if (mount_id != 0) {
        h.clients_.at(mount_id).waiters.push_back(&op);
    } else {
        op.wake_at = when;
        h.timers_.emplace(when, &op);
    }
}

void Handler::resume_parked(Op &op)
{
    const std::coroutine_handle<> h = std::exchange(op.parked, {});
    op.parked_on_mount = 0;
    if (!h)
        return;
    // The loop's context is whoever ran last: the op's own requests must
    // carry its caller, be cancellable by its tag and, for a change, name
    // its reply slot and tag (without them a replayed change would run
    // again: mount_test:replay_exactly_once).
    const auto common = op.up.body<pvfsd_req_common>();
    const Credentials cred = common ? credentials_of(*common) : Credentials{};
    const bool once = common && common->reply_slot < PVFSD_REPLY_SLOTS;
    loop_->set_context(cred, op.up.tag(), once ? &op.once : nullptr);
    h.resume();
    loop_->set_context(cred, op.up.tag());
}

void Handler::unpark(Op &op)
{
    if (!op.parked)
        return;
    if (op.parked_on_mount != 0) {
        if (const auto it = clients_.find(op.parked_on_mount); it != clients_.end())
            std::erase(it->second.waiters, &op);
    } else {
        auto [first, last] = timers_.equal_range(op.wake_at);
        for (; first != last; ++first) {
            if (first->second == &op) {
                timers_.erase(first);
                break;
            }
        }
    }
    resume_parked(op);
}

int Handler::idle_ms(int max_idle_ms) const
{
    if (timers_.empty())
        return max_idle_ms;
    const auto left = timers_.begin()->first - Clock::now();
    if (left <= Clock::duration::zero())
        return 0;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1;
    return static_cast<int>(std::min<std::int64_t>(ms, max_idle_ms));
}

void Handler::run_timers()
{
    const auto now = Clock::now();
    // A resumed op parks again only later than now: this ends.
    while (!timers_.empty() && timers_.begin()->first <= now) {
        Op &op = *timers_.begin()->second;
        timers_.erase(timers_.begin());
        resume_parked(op);
    }
    start_renewals();
    if (options_.metrics != nullptr)
        options_.metrics->tick(now);
}

Task<void> Handler::renew(Renewal &r)
{
    if (const int rc = co_await r.client->co_renew(); rc != 0)
        gossip::warning(gossip::Mask::pvfsd, "renewing the holds of open files: {}",
                        client::error_text(rc));
    r.opens->renewing = false;
}

void Handler::start_renewals()
{
    // Those done first: result() rethrows what escaped one.
    for (auto it = renewals_.begin(); it != renewals_.end();) {
        if (!it->done) {
            ++it;
            continue;
        }
        it->task.result();
        it = renewals_.erase(it);
    }
    // Without sessions there are no holds to renew (co_renew would only
    // answer -EOPNOTSUPP).
    if (!options_.exactly_once)
        return;
    const auto now = Clock::now();
    for (auto &[id, m] : clients_) {
        OpenTable &t = *m.opens;
        // Every attached mount renews, also one holding no file: the
        // servers hand out, in renewals, the orphans whose closer died
        // before removing their objects (a pvfsd killed right after a
        // CLOSE: fault_test:kill_pvfsd), and only a live client finishes
        // them.
        if (!m.client) {
            t.next_renew = {};
            continue;
        }
        const auto period = std::max<std::chrono::milliseconds>(
            std::chrono::milliseconds(1000),
            std::chrono::milliseconds(m.client->cluster().defaults.lease_ms) / renewals_per_lease);
        if (t.next_renew == Clock::time_point{})
            t.next_renew = now + period; // the OPEN itself was contact
        if (now < t.next_renew || t.renewing)
            continue;
        t.next_renew = now + period;
        t.renewing = true;
        Renewal &r = renewals_.emplace_back();
        r.client = m.client;
        r.opens = m.opens;
        loop_->set_context(Credentials{}, renew_cancel_id);
        r.task = renew(r);
        r.task.start([](void *p) noexcept { static_cast<Renewal *>(p)->done = true; }, &r);
        gossip::debug(gossip::Mask::pvfsd, "mount {}: renewing ({} open files)", id,
                      t.entries.size());
    }
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
        status = co_await co_attach(op, out);
    } else if (up.op() == PVFSD_OP_DETACH) {
        detach(common->mount_id);
        policies_.erase(common->mount_id);
    } else {
        auto it = clients_.find(common->mount_id);
        if (it != clients_.end() && !it->second.client && !it->second.attaches.empty()) {
            // Replayed to this pvfsd before its mount's ATTACH ended.
            gossip::debug(gossip::Mask::pvfsd, "{} tag {} waits for mount {} to attach",
                          op_name(up.op()), up.tag(), common->mount_id);
            co_await Park{*this, op, common->mount_id, {}};
            it = clients_.find(common->mount_id);
        }
        if (op.cancelled) {
            status = -ECANCELED;
        } else if (it == clients_.end() || !it->second.client) {
            gossip::warning(gossip::Mask::pvfsd, "{} for mount {}, which is not attached",
                            op_name(up.op()), common->mount_id);
            status = -ENOTCONN;
        } else {
            const std::shared_ptr<client::Client> c = it->second.client;
            const std::shared_ptr<OpenTable> opens = it->second.opens;
            const MountPolicy policy = policies_[common->mount_id];
            op.once.client_id = policy.client_id;
            const ops::Call call{up, *c, out, ops::Slots{channel_.slots(), channel_.slot_size()}};
            if (up.op() == PVFSD_OP_OPEN)
                status = kernel_status(co_await ops::open(call, *opens), policy);
            else if (up.op() == PVFSD_OP_CREATE)
                status = kernel_status(
                    co_await ops::create(call, *opens,
                                         (channel_.features() & PVFSD_FEAT_CREATE_OPEN) != 0),
                    policy);
            else if (up.op() == PVFSD_OP_CLOSE)
                status = kernel_status(co_await ops::close(call, *opens), policy);
            else
                status = kernel_status(co_await dispatch(up, *c, out), policy);
        }
    }
    if (status < 0 && gossip::enabled(gossip::Mask::pvfsd))
        gossip::debug(gossip::Mask::pvfsd, "{} tag {}: {}", op_name(up.op()), up.tag(),
                      client::error_text(status));
    co_return out.finish(status);
}

void Handler::detach(std::uint64_t mount_id)
{
    const auto it = clients_.find(mount_id);
    if (it == clients_.end()) {
        gossip::info(gossip::Mask::pvfsd, "mount {} detached (it was not attached)", mount_id);
        return;
    }
    // Operations of the mount still in flight keep its client.
    const Mount m = std::move(it->second);
    clients_.erase(it);
    gossip::info(gossip::Mask::pvfsd, "mount {} detached{}", mount_id,
                 m.attaches.empty() ? "" : " while attaching: the ATTACH stops");
    for (Op *a : m.attaches) {
        a->cancelled = true;
        loop_->cancel(a->up.tag());
        unpark(*a);
    }
    // They find no mount: ENOTCONN.
    for (Op *w : m.waiters)
        resume_parked(*w);
}

Task<int> Handler::co_attach(Op &op, Downcall &out)
{
    const Upcall &up = op.up;
    const auto req = up.body<pvfsd_attach_req>();
    if (!req)
        co_return -EINVAL;
    const auto source = up.tail(sizeof(*req), 0, req->source_len);
    const auto options = up.tail(sizeof(*req), req->source_len, req->options_len);
    if (!source || !options ||
        up.tail_size(sizeof(*req)) != std::size_t{req->source_len} + req->options_len)
        co_return -EINVAL;
    const std::uint64_t id = req->common.mount_id;
    const std::string target(*source);
    // The kernel's own re-attach of a mount after a pvfsd restart: its
    // ops wait for it, so it keeps trying until the servers answer, the
    // kernel cancels it or the mount goes.  A first mount's ATTACH tries
    // once: mount(8) must not hang.
    const bool keep_trying = (req->common.flags & PVFSD_REQ_REPLAYED) != 0;

    client::Options o;
    o.target = target;
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
    MountPolicy policy = apply_mount_options(*req, *source, *options, o);
    if (!options_.exactly_once) {
        // No session: the kernel's ops name no reply slot towards the
        // servers, and co_open answers -EOPNOTSUPP (OPEN then only asks
        // for attributes, CLOSE sends nothing).
        o.exactly_once = false;
        o.client_id = 0;
        policy.client_id = 0;
    }
    // The ATTACH itself gives up (mount(8) must not hang); the mount's
    // operations then wait as its options say.
    const bool hard = o.hard;
    o.hard = false;

    clients_[id].attaches.push_back(&op);
    std::shared_ptr<client::Client> attached;
    Attr root;
    int rc = 0;
    std::chrono::milliseconds backoff = first_backoff;
    for (unsigned tries = 1;; ++tries) {
        std::string error;
        std::unique_ptr<client::Client> c;
        // A key file of the mount's own that is missing or unsafe fails
        // the mount with its own errno (connecting says only that it
        // failed); a replayed ATTACH tries again, for the admin to fix it.
        rc = policy.key_file.empty() ? 0 : check_key_file(policy.key_file, error);
        if (rc == 0) {
            c = co_await client::Client::co_connect(o, error);
            if (!c) {
                rc = -ECONNREFUSED;
                if (!policy.key_file.empty())
                    error += " (key=" + policy.key_file + ")";
            }
        }
        if (rc == 0) {
            rc = co_await c->co_getattr(pvfs::root_handle, root);
            if (rc == 0) {
                attached = std::move(c);
                break;
            }
            error = "the root of " + target + ": " + client::error_text(rc);
        }
        if (op.cancelled) {
            gossip::info(gossip::Mask::pvfsd, "mount {}: attaching stopped after {} tries: {}", id,
                         tries, error);
            rc = -ECANCELED;
            break;
        }
        if (!keep_trying) {
            gossip::error(gossip::Mask::pvfsd, "mount {}: {}", id, error);
            break;
        }
        if (tries == 1)
            gossip::warning(gossip::Mask::pvfsd,
                            "mount {}: {}; its ops wait while it tries again, every {} s at most",
                            id, error, max_backoff.count());
        else
            gossip::debug(gossip::Mask::pvfsd, "mount {}: try {}: {}", id, tries, error);
        co_await Park{*this, op, 0, Clock::now() + backoff};
        if (op.cancelled) {
            rc = -ECANCELED;
            break;
        }
        backoff = std::min<std::chrono::milliseconds>(backoff * 2, max_backoff);
    }

    const auto it = clients_.find(id);
    if (it == clients_.end()) // detached meanwhile
        co_return -ECANCELED;
    Mount &m = it->second;
    std::erase(m.attaches, &op);
    if (rc == 0) {
        attached->set_hard(hard);
        m.client = std::move(attached);
        policies_[id] = policy;
        pvfsd_attach_resp r{};
        r.root = to_dev_attr(root);
        r.fs_id = m.client->cluster().fs_id;
        r.max_name = static_cast<std::uint32_t>(pvfs::max_name);
        out.put(r);
        gossip::info(gossip::Mask::pvfsd, "mount {}: attached to {}{}{}", id, target,
                     keep_trying ? " (replayed)" : "",
                     m.waiters.empty() ? "" : fmt::format("; {} ops waited", m.waiters.size()));
    } else if (m.client || !m.attaches.empty()) {
        co_return rc; // another ATTACH of it stays in charge of its ops
    }
    const std::vector<Op *> waiters = std::move(m.waiters);
    if (rc != 0)
        clients_.erase(it); // its waiters find no mount: ENOTCONN
    for (Op *w : waiters)
        resume_parked(*w);
    co_return rc;
}

namespace {

// An op this pvfsd does not know (a newer module's).
Task<int> unsupported(ops::Call /*call*/)
{
    co_return -ENOSYS;
}

// The coroutine of each op, by PVFSD_OP_* (as libfuse's fuse_ll_ops[]).
// HELLO, ATTACH, DETACH, CANCEL, CREATE, OPEN and CLOSE never get here:
// Handler::start and Handler::run answer them.
constexpr std::array<ops::Fn, PVFSD_OP_COUNT> op_table = [] {
    std::array<ops::Fn, PVFSD_OP_COUNT> t{};
    t.fill(&unsupported);
    t[PVFSD_OP_LOOKUP] = &ops::lookup;
    t[PVFSD_OP_GETATTR] = &ops::getattr;
    t[PVFSD_OP_SETATTR] = &ops::setattr;
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
    return fn(ops::Call{up, c, out, ops::Slots{channel_.slots(), channel_.slot_size()}});
}

} // namespace pvfs::pvfsd
