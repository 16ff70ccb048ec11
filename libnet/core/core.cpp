// BMI core: the Bmi facade, op table, contexts, address reference list,
// idle deadlines and the unexpected queue.  Methods do the I/O.
#include "core.hpp"

#include "../methods/ib/ib.hpp"
#include "../methods/tcp/tcp.hpp"
#include "pvfs/gossip.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <new>
#include <optional>
#include <system_error>

namespace bmi {

// ---------------------------------------------------------------- OpList

void OpList::push_back(std::vector<Op> &ops, std::uint32_t i)
{
    Hook &h = ops[i].*hook_;
    h.prev = tail_;
    h.next = no_index;
    if (tail_ != no_index)
        (ops[tail_].*hook_).next = i;
    else
        head_ = i;
    tail_ = i;
}

void OpList::remove(std::vector<Op> &ops, std::uint32_t i)
{
    Hook &h = ops[i].*hook_;
    if (h.prev != no_index)
        (ops[h.prev].*hook_).next = h.next;
    else
        head_ = h.next;
    if (h.next != no_index)
        (ops[h.next].*hook_).prev = h.prev;
    else
        tail_ = h.prev;
    h = Hook{};
}

// ------------------------------------------------------ unexpected messages

std::vector<std::byte> UnexpectedPool::take(std::size_t size)
{
    if (!free_.empty()) {
        std::vector<std::byte> buf = std::move(free_.back());
        free_.pop_back();
        if (buf.size() < size)
            buf.resize(size);
        return buf;
    }
    return std::vector<std::byte>(size);
}

UnexpectedMessage UnexpectedPool::make(Addr peer, Tag tag, std::vector<std::byte> buf,
                                       std::size_t size)
{
    UnexpectedMessage msg;
    msg.peer_ = peer;
    msg.tag_ = tag;
    msg.size_ = size;
    msg.buf_ = std::move(buf);
    msg.pool_ = shared_from_this();
    outstanding_[peer] += size;
    total_ += size;
    return msg;
}

void UnexpectedPool::give_back(UnexpectedMessage &msg) noexcept
{
    const Addr peer = msg.peer_;
    auto it = outstanding_.find(peer);
    // Entries stay when they reach zero: re-inserting would allocate per
    // message.  The map grows with the number of peers only.
    if (it != outstanding_.end())
        it->second -= std::min(it->second, msg.size_);
    total_ -= std::min(total_, msg.size_);
    // A bounded free list: at most 64 buffers are kept for reuse.
    if (free_.size() < 64 && !msg.buf_.empty())
        free_.push_back(std::move(msg.buf_));
    msg.buf_ = {};
    msg.size_ = 0;
    if (on_release)
        on_release(peer);
}

std::size_t UnexpectedPool::outstanding(Addr peer) const
{
    auto it = outstanding_.find(peer);
    return it == outstanding_.end() ? 0 : it->second;
}

UnexpectedMessage::UnexpectedMessage(UnexpectedMessage &&other) noexcept
    : peer_(other.peer_), tag_(other.tag_), size_(other.size_), buf_(std::move(other.buf_)),
      pool_(std::move(other.pool_))
{
    other.size_ = 0;
}

UnexpectedMessage &UnexpectedMessage::operator=(UnexpectedMessage &&other) noexcept
{
    if (this != &other) {
        if (pool_)
            pool_->give_back(*this);
        peer_ = other.peer_;
        tag_ = other.tag_;
        size_ = other.size_;
        buf_ = std::move(other.buf_);
        pool_ = std::move(other.pool_);
        other.size_ = 0;
    }
    return *this;
}

UnexpectedMessage::~UnexpectedMessage()
{
    if (pool_)
        pool_->give_back(*this);
}

// ------------------------------------------------------------------ Memory

Memory::Memory(std::size_t size)
    : bytes_(static_cast<std::byte *>(::operator new (size == 0 ? 1 : size, std::align_val_t{64}))),
      size_(size)
{
}

void Memory::Free::operator()(std::byte *p) const noexcept
{
    ::operator delete (p, std::align_val_t{64});
}

// -------------------------------------------------------------------- Core

namespace {

// Op ids: slot index in the low 32 bits, a generation above, so a stale id
// never names a reused slot.
constexpr OpId make_id(std::uint32_t generation, std::uint32_t index)
{
    return (static_cast<OpId>(generation) << 32U) | index;
}

} // namespace

namespace {

// A microseconds setting from the environment, at most max; nullopt (and a
// warning when set but bad) otherwise.
std::optional<std::chrono::microseconds> env_microseconds(const char *name, std::uint64_t max)
{
    const char *env = std::getenv(name); // NOLINT(concurrency-mt-unsafe): at init
    if (env == nullptr || *env == '\0')
        return std::nullopt;
    unsigned long long value = 0;
    const std::string_view text(env);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || value > max) {
        pvfs::gossip::warning(pvfs::gossip::Mask::bmi,
                              "{}='{}' ignored: expected 0..{} microseconds", name, text, max);
        return std::nullopt;
    }
    return std::chrono::microseconds(value);
}

} // namespace

// BMI_SPIN_US overrides the default poll time of test* calls, like
// set_info(Info::spin_us) (an admin tunes it without rebuilding programs);
// BMI_KERNEL_POLL_US the kernel poll interval of that polling.
void Core::apply_spin_env()
{
    if (const auto spin = env_microseconds("BMI_SPIN_US", Limits::max_spin_us))
        limits.spin = *spin;
    if (const auto every = env_microseconds("BMI_KERNEL_POLL_US", Limits::max_kernel_poll_us))
        limits.kernel_poll_interval = *every;
}

Core::Core(const Options &options)
{
    // PVFS_DEBUG=bmi,tcp turns on BMI's debug log in any program using it.
    static const bool env_read = [] {
        if (const auto st = pvfs::gossip::configure_from_env(); !st.ok())
            pvfs::gossip::warning(pvfs::gossip::Mask::bmi, "PVFS_DEBUG: {}", st.error);
        return true;
    }();
    (void)env_read;
    apply_spin_env();
    // tcp first: it is the method that sleeps (see progress()).
    methods_.push_back(tcp::make_method(*this, options.tcp_engine));
    methods_.push_back(ib::make_method(*this));
    unexpected_pool->on_release = [this](Addr a) {
        if (const AddrEntry *e = entry(a))
            e->method->unexpected_released(a);
    };
    contexts_.emplace_back(); // context 0 is never handed out
    for (const std::string &url : options.listen) {
        const auto sep = url.find("://");
        if (sep == std::string::npos)
            throw std::system_error(EINVAL, std::generic_category(),
                                    "bmi: listen address '" + url + "' has no scheme://");
        const std::string_view scheme = std::string_view(url).substr(0, sep);
        auto it = std::find_if(methods_.begin(), methods_.end(),
                               [&](const auto &m) { return m->scheme() == scheme; });
        if (it == methods_.end())
            throw std::system_error(EPROTONOSUPPORT, std::generic_category(),
                                    "bmi: no method for '" + url + "'");
        if (options.role != Role::server)
            throw std::system_error(EINVAL, std::generic_category(),
                                    "bmi: a client does not listen ('" + url + "')");
        listen_urls.push_back((*it)->listen(std::string_view(url).substr(sep + 3)));
    }
}

Core::~Core()
{
    // Methods go first: they may still complete ops while closing.  The
    // last first: the others' fds are watched by the first (tcp).
    while (!methods_.empty())
        methods_.pop_back();
    unexpected_pool->on_release = nullptr;
}

Op *Core::find(OpId id)
{
    const std::uint32_t i = index_of(id);
    return i == no_index ? nullptr : &ops[i];
}

std::uint32_t Core::index_of(OpId id) const
{
    const auto i = static_cast<std::uint32_t>(id & 0xffffffffU);
    if (id == no_op || i >= ops.size() || ops[i].id != id || ops[i].state == OpState::free)
        return no_index;
    return i;
}

std::uint32_t Core::alloc_op()
{
    std::uint32_t i = 0;
    if (!free_ops_.empty()) {
        i = free_ops_.back();
        free_ops_.pop_back();
    } else {
        i = static_cast<std::uint32_t>(ops.size());
        ops.emplace_back();
    }
    Op &op = ops[i];
    if (++generation_ == 0)
        generation_ = 1;
    op.id = make_id(generation_, i);
    op.state = OpState::active;
    op.bufs.clear();
    op.total = op.done_bytes = op.actual = 0;
    op.error = 0;
    op.mstate = 0;
    op.remote_cookie = 0;
    op.conn = no_index;
    op.match = op.timeout = op.done = op.peer_ops = Hook{};
    op.in_timeout_list = op.in_done_list = op.in_peer_list = op.counted = false;
    return i;
}

void Core::release_op(std::uint32_t i)
{
    Op &op = ops[i];
    if (op.in_timeout_list) {
        timeouts_.remove(ops, i);
        op.in_timeout_list = false;
    }
    if (op.in_done_list) {
        contexts_[op.ctx].done.remove(ops, i);
        op.in_done_list = false;
    }
    if (op.counted) {
        (op.user_polled ? user_polled_ops_ : kernel_polled_ops_) -= 1;
        op.counted = false;
    }
    op.state = OpState::free;
    op.id = no_op;
    free_ops_.push_back(i);
}

void Core::touch(std::uint32_t i)
{
    Op &op = ops[i];
    op.last_progress = Clock::now();
    if (op.in_timeout_list) {
        timeouts_.remove(ops, i);
        timeouts_.push_back(ops, i);
    }
}

void Core::complete(std::uint32_t i, int error, std::size_t actual)
{
    Op &op = ops[i];
    if (op.state != OpState::active)
        return;
    op.state = OpState::done;
    op.error = error;
    op.actual = actual;
    if (op.in_timeout_list) {
        timeouts_.remove(ops, i);
        op.in_timeout_list = false;
    }
    contexts_[op.ctx].done.push_back(ops, i);
    op.in_done_list = true;
    ++events_;
}

Completion Core::reap(std::uint32_t i)
{
    const Op &op = ops[i];
    Completion c{op.id, op.error, op.actual, op.user_ptr, op.peer, op.tag};
    release_op(i);
    return c;
}

void Core::deliver_unexpected(UnexpectedMessage msg)
{
    unexpected_.push_back(std::move(msg));
    ++events_;
}

Core::AddrEntry *Core::entry(Addr addr)
{
    const std::uint32_t slot = addr_slot(addr);
    if (slot == 0 || slot > addrs_.size())
        return nullptr;
    AddrEntry &e = addrs_[slot - 1];
    return e.live && e.generation == addr >> 32U ? &e : nullptr;
}

const Core::AddrEntry *Core::entry(Addr addr) const
{
    return const_cast<Core *>(this)->entry(addr); // NOLINT(cppcoreguidelines-pro-type-const-cast)
}

Addr Core::new_addr(const std::string &url, Method *method)
{
    Addr addr = no_addr;
    if (!free_slots_.empty()) {
        // The slot freed longest ago: its generation grows as slowly as
        // the number of free slots allows.
        const std::uint32_t slot = free_slots_.front();
        free_slots_.pop_front();
        AddrEntry &e = addrs_[slot - 1];
        e.url = url;
        e.method = method;
        e.live = true;
        e.pinned = false;
        e.label.clear();
        e.credential.clear();
        e.identity.reset();
        addr = (static_cast<Addr>(e.generation) << 32U) | slot;
    } else {
        AddrEntry e;
        e.url = url;
        e.method = method;
        addrs_.push_back(std::move(e));
        addr = addrs_.size();
    }
    addr_by_url_.emplace(url, addr);
    return addr;
}

Addr Core::peer_for_url(Method &method, const std::string &url)
{
    auto it = addr_by_url_.find(url);
    if (it != addr_by_url_.end())
        return it->second;
    return new_addr(url, &method);
}

bool Core::pinned(Addr addr) const
{
    const AddrEntry *e = entry(addr);
    return e == nullptr || e->pinned;
}

void Core::forget_peer(Addr addr)
{
    AddrEntry *e = entry(addr);
    if (e == nullptr || e->pinned)
        return;
    // drop_identity may have unlinked the key (and a new session taken it).
    if (const auto it = addr_by_url_.find(e->url); it != addr_by_url_.end() && it->second == addr)
        addr_by_url_.erase(it);
    unexpected_pool->forget(addr);
    std::string().swap(e->url);
    std::string().swap(e->label);
    e->identity.reset(); // its session key with it
    e->live = false;
    // The method pointer stays: ops still done may name it.
    if (e->generation >= last_addr_generation) {
        ++retired_slots_; // one entry per 2^32 reuses of a slot
        return;
    }
    ++e->generation;
    free_slots_.push_back(addr_slot(addr));
}

const std::string &Core::url_of(Addr addr) const
{
    static const std::string none;
    const AddrEntry *e = entry(addr);
    if (e == nullptr)
        return none;
    return e->label.empty() ? e->url : e->label;
}

ContextId Core::open_context()
{
    for (std::size_t c = 1; c < contexts_.size(); ++c) {
        if (!contexts_[c].open) {
            contexts_[c].open = true;
            return static_cast<ContextId>(c);
        }
    }
    contexts_.emplace_back();
    contexts_.back().open = true;
    return static_cast<ContextId>(contexts_.size() - 1);
}

void Core::close_context(ContextId ctx)
{
    if (ctx == 0 || ctx >= contexts_.size() || !contexts_[ctx].open)
        return;
    for (std::uint32_t i = 0; i < ops.size(); ++i) {
        if (ops[i].state == OpState::active && ops[i].ctx == ctx)
            method_of(i).cancel(i, -ECANCELED, true);
    }
    while (!contexts_[ctx].done.empty())
        release_op(contexts_[ctx].done.front());
    contexts_[ctx].open = false;
}

Addr Core::lookup(std::string_view url, int *error, std::string_view credential)
{
    const auto fail = [error](int err) {
        if (error != nullptr)
            *error = err;
        return no_addr;
    };
    if (error != nullptr)
        *error = 0;
    // A credential's peers are its own (a unit separator cannot be in a URL).
    std::string key(url);
    if (!credential.empty())
        key.append("\x1f").append(credential);
    auto it = addr_by_url_.find(key);
    if (it != addr_by_url_.end()) {
        entry(it->second)->pinned = true; // the user holds it now
        return it->second;
    }
    const auto sep = url.find("://");
    if (sep == std::string_view::npos)
        return fail(-EINVAL);
    const std::string_view scheme = url.substr(0, sep);
    for (auto &m : methods_) {
        if (m->scheme() != scheme)
            continue;
        const Addr addr = new_addr(key, m.get());
        entry(addr)->pinned = true;
        if (!credential.empty()) {
            entry(addr)->label = std::string(url);
            entry(addr)->credential = std::string(credential);
        }
        if (const int rc = m->add_peer(addr, url.substr(sep + 3)); rc != 0) {
            entry(addr)->pinned = false;
            forget_peer(addr);
            return fail(rc);
        }
        return addr;
    }
    return fail(-EPROTONOSUPPORT);
}

Post Core::post(OpKind kind, Addr peer, std::span<const MutableBuffer> bufs, Tag tag,
                void *user_ptr, ContextId ctx)
{
    if (entry(peer) == nullptr || ctx == 0 || ctx >= contexts_.size() || !contexts_[ctx].open)
        return Post{-EINVAL, false, no_op, 0};
    std::size_t total = 0;
    for (const MutableBuffer &b : bufs) {
        if (b.data == nullptr && b.size != 0)
            return Post{-EINVAL, false, no_op, 0};
        total += b.size;
    }
    if (kind == OpKind::send_unexpected && total > limits.unexpected)
        return Post{-EMSGSIZE, false, no_op, 0};

    const std::uint32_t i = start_op(kind, peer, bufs, total, tag, user_ptr, ctx);
    return posted(i, entry(peer)->method->post(i));
}

std::uint32_t Core::start_op(OpKind kind, Addr peer, std::span<const MutableBuffer> bufs,
                             std::size_t total, Tag tag, void *user_ptr, ContextId ctx)
{
    const std::uint32_t i = alloc_op();
    Op &op = ops[i];
    op.kind = kind;
    op.peer = peer;
    op.tag = tag;
    op.user_ptr = user_ptr;
    op.ctx = ctx;
    op.bufs.assign(bufs.begin(), bufs.end());
    op.total = total;
    op.last_progress = Clock::now();
    timeouts_.push_back(ops, i);
    op.in_timeout_list = true;
    op.user_polled = user_polled(i);
    (op.user_polled ? user_polled_ops_ : kernel_polled_ops_) += 1;
    op.counted = true;
    return i;
}

// The Post for a started op: finished at once (released now) or pending.
Post Core::posted(std::uint32_t i, bool done)
{
    if (done) {
        Post p{ops[i].error, true, no_op, ops[i].actual};
        if (p.error != 0)
            p.completed = false;
        release_op(i);
        return p;
    }
    return Post{0, false, ops[i].id, 0};
}

Post Core::post_rdma(OpKind kind, Addr peer, std::span<const std::byte> descriptor,
                     std::uint64_t offset, MutableBuffer buf, void *user_ptr, ContextId ctx)
{
    if (entry(peer) == nullptr || ctx == 0 || ctx >= contexts_.size() || !contexts_[ctx].open ||
        (buf.data == nullptr && buf.size != 0))
        return Post{-EINVAL, false, no_op, 0};
    const std::uint32_t i = start_op(kind, peer, {&buf, 1}, buf.size, 0, user_ptr, ctx);
    bool done = false;
    if (const int rc = entry(peer)->method->post_rdma(i, descriptor, offset, done); rc != 0) {
        release_op(i);
        return Post{rc, false, no_op, 0};
    }
    return posted(i, done);
}

int Core::expose(Addr peer, std::span<const MutableBuffer> bufs, std::shared_ptr<void> &keep,
                 std::vector<std::byte> &descriptor)
{
    AddrEntry *e = entry(peer);
    if (e == nullptr)
        return -EINVAL;
    return e->method->expose(peer, bufs, keep, descriptor);
}

int Core::sleep_budget(Clock::time_point deadline)
{
    const auto now = Clock::now();
    if (now >= deadline)
        return 0;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    // Wake at least once a second to enforce idle deadlines.
    return static_cast<int>(std::min<long long>(left + 1, 1000));
}

void PollLearner::learn(std::chrono::nanoseconds waited)
{
    // Moving averages over about the last eight waits.
    constexpr double weight = 1.0 / 8;
    const double us = std::chrono::duration<double, std::micro>(waited).count();
    const bool is_long = waited > Limits::max_learned_spin;
    long_share_ += ((is_long ? 1.0 : 0.0) - long_share_) * weight;
    if (!is_long)
        short_wait_us_ += (us - short_wait_us_) * weight;
}

std::chrono::microseconds PollLearner::poll_time(std::chrono::microseconds spin) const
{
    // Polling turned off stays off; mostly long waits keep the spin.
    if (spin.count() == 0 || long_share_ > 0.5)
        return spin;
    const auto learned = std::chrono::microseconds(static_cast<std::int64_t>(2 * short_wait_us_));
    return std::clamp(learned, spin, std::max(spin, Limits::max_learned_spin));
}

Core::WaitWindow Core::wait_window(int max_idle_ms) const
{
    const auto now = Clock::now();
    const auto idle = std::chrono::milliseconds(std::max(max_idle_ms, 0));
    const auto deadline = now + idle;
    return {now, deadline, std::min(deadline, now + poll_learner.poll_time(limits.spin)), false};
}

void Core::waited_for_work(const WaitWindow &w)
{
    if (w.waited)
        poll_learner.learn(Clock::now() - w.start);
}

bool Core::idle_step(WaitWindow &w)
{
    constexpr int fast_polls = 32;
    if (external_ready) {
        // A watched fd is readable: the caller has other work.
        external_ready = false;
        return false;
    }
    const int budget = sleep_budget(w.deadline);
    if (budget == 0)
        return false;
    w.waited = true;
    // Polling first: a reply that comes within microseconds is seen
    // without paying for a sleep and a wake-up, which cost more than the
    // message itself on loopback and on fast networks.
    if (Clock::now() < w.spin_until) {
        const bool asked_kernel = progress(0);
        // Between two system calls (the engine's poll, the yield), the
        // methods that can poll in user space look a few more times: a
        // completion there is seen within a fraction of a round.
        for (int round = 0; round < fast_polls && !external_ready; ++round) {
            bool found = false;
            for (std::size_t m = 1; m < methods_.size(); ++m)
                found = methods_[m]->poll_fast() || found;
            if (found)
                return true;
        }
        // The peer may share this CPU (the scheduler often puts a waker
        // and its wakee together): it must get to run to answer, and
        // polling without yielding would hold the CPU for the whole spin.
        // Only with the kernel round: a yield is a system call too.
        if (asked_kernel)
            ::sched_yield();
    } else {
        progress(budget);
    }
    return true;
}

void Core::expire_idle_ops()
{
    const auto limit = Clock::now() - limits.idle_timeout;
    while (!timeouts_.empty()) {
        const std::uint32_t i = timeouts_.front();
        if (ops[i].last_progress > limit)
            break;
        timeouts_.remove(ops, i);
        // The peer still answers (its method pings it while ops wait on
        // it): the op waits for the peer's application, not for a dead
        // link, so it stays, requeued by the time the method gives (close
        // to now: the list stays nearly ordered).
        if (const Clock::time_point alive = method_of(i).peer_alive(i); alive > limit) {
            ops[i].last_progress = alive;
            timeouts_.push_back(ops, i);
            continue;
        }
        ops[i].in_timeout_list = false;
        method_of(i).cancel(i, -ETIMEDOUT, true);
        if (ops[i].state == OpState::active) // a method that could not end it now
            complete(i, -ETIMEDOUT, ops[i].done_bytes);
    }
}

// Watched fds live in the first method's engine: it is the one that sleeps
// (progress() gives the others a timeout of 0).
int Core::watch_fd(int fd)
{
    if (fd < 0 || ::fcntl(fd, F_GETFD) < 0)
        return -EBADF;
    // Only a pollable fd can be watched (a regular file cannot): ask epoll
    // now rather than let an engine find out in its sleep.
    const int probe = ::epoll_create1(EPOLL_CLOEXEC);
    if (probe < 0)
        return -errno;
    epoll_event ev{};
    ev.events = EPOLLIN;
    const int rc = ::epoll_ctl(probe, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
    ::close(probe);
    if (rc != 0)
        return rc;
    return methods_.front()->watch_external(fd);
}

int Core::unwatch_fd(int fd)
{
    const int rc = methods_.front()->unwatch_external(fd);
    if (rc == 0)
        std::erase(ready_fds_, fd);
    return rc;
}

void Core::external_readable(int fd)
{
    external_ready = true;
    if (std::find(ready_fds_.begin(), ready_fds_.end(), fd) == ready_fds_.end())
        ready_fds_.push_back(fd);
}

void Core::take_ready_fds(std::vector<int> &out)
{
    out.insert(out.end(), ready_fds_.begin(), ready_fds_.end());
    ready_fds_.clear();
}

int Core::watch_internal(int fd)
{
    return methods_.front()->watch_internal(fd);
}

int Core::unwatch_internal(int fd)
{
    return methods_.front()->unwatch_internal(fd);
}

// Only the first method sleeps: the others are polled first and their fds
// sit in its sleep (watch_internal), so a completion on any of them ends
// the wait and the next round polls them again.
bool Core::progress(int timeout_ms)
{
    const std::uint64_t before = events_;
    for (std::size_t m = 1; m < methods_.size(); ++m)
        methods_[m]->progress(0);
    if (events_ != before || external_ready)
        timeout_ms = 0;
    for (std::size_t m = 1; m < methods_.size() && timeout_ms > 0; ++m) {
        if (!methods_[m]->prepare_sleep() || events_ != before)
            timeout_ms = 0;
    }
    const bool ask_kernel = timeout_ms > 0 || kernel_poll_due();
    if (ask_kernel) {
        if (user_polled_ops_ > 0)
            last_kernel_poll_ = Clock::now();
        methods_.front()->progress(timeout_ms);
    }
    expire_idle_ops();
    return ask_kernel;
}

// The first method is polled by a system call.  Skipping it is safe only
// for a while and only when nothing of its own is in flight: what it also
// watches (new connections, unexpected messages, watched fds, the other
// methods' event fds) then waits at most kernel_poll_interval.
bool Core::kernel_poll_due() const
{
    return kernel_polled_ops_ > 0 || user_polled_ops_ == 0 ||
           Clock::now() - last_kernel_poll_ >= limits.kernel_poll_interval;
}

Memory Core::memalloc(std::size_t size)
{
    Memory mem(size);
    std::vector<std::shared_ptr<void>> regs;
    for (auto &m : methods_) {
        if (auto r = m->register_memory(mem.data(), mem.size()))
            regs.push_back(std::move(r));
    }
    if (!regs.empty())
        mem.keep_ = std::make_shared<std::vector<std::shared_ptr<void>>>(std::move(regs));
    return mem;
}

bool Core::test(OpId id, Completion &out, int max_idle_ms)
{
    const std::uint32_t i = index_of(id);
    if (i == no_index) {
        out = Completion{id, -EINVAL, 0, nullptr, no_addr, 0};
        return true;
    }
    WaitWindow window = wait_window(max_idle_ms);
    progress(0);
    while (ops[i].state != OpState::done) {
        if (!idle_step(window))
            return false;
    }
    waited_for_work(window);
    out = reap(i);
    return true;
}

std::size_t Core::testsome(std::span<const OpId> ids, std::vector<Completion> &out, int max_idle_ms)
{
    WaitWindow window = wait_window(max_idle_ms);
    progress(0);
    for (;;) {
        std::size_t n = 0;
        for (const OpId id : ids) {
            const std::uint32_t i = index_of(id);
            if (i != no_index && ops[i].state == OpState::done) {
                out.push_back(reap(i));
                ++n;
            }
        }
        if (n > 0) {
            waited_for_work(window);
            return n;
        }
        if (!idle_step(window))
            return 0;
    }
}

std::size_t Core::testcontext(ContextId ctx, std::span<Completion> out, int max_idle_ms)
{
    if (ctx == 0 || ctx >= contexts_.size() || !contexts_[ctx].open || out.empty())
        return 0;
    WaitWindow window = wait_window(max_idle_ms);
    progress(0);
    for (;;) {
        std::size_t n = 0;
        OpList &done = contexts_[ctx].done;
        while (n < out.size() && !done.empty())
            out[n++] = reap(done.front());
        if (n > 0) {
            waited_for_work(window);
            return n;
        }
        if (!idle_step(window))
            return 0;
    }
}

std::size_t Core::testunexpected(std::vector<UnexpectedMessage> &out, std::size_t max,
                                 int max_idle_ms)
{
    WaitWindow window = wait_window(max_idle_ms);
    progress(0);
    for (;;) {
        std::size_t n = 0;
        while (n < max && !unexpected_.empty()) {
            out.push_back(std::move(unexpected_.front()));
            unexpected_.pop_front();
            ++n;
        }
        if (n > 0 || max == 0) {
            waited_for_work(window);
            return n;
        }
        if (!idle_step(window))
            return 0;
    }
}

std::size_t Core::testany(ContextId ctx, std::span<Completion> done, std::size_t &done_count,
                          std::vector<UnexpectedMessage> &unexpected, std::size_t max_unexpected,
                          int max_idle_ms)
{
    done_count = 0;
    const bool ctx_ok = ctx != 0 && ctx < contexts_.size() && contexts_[ctx].open;
    WaitWindow window = wait_window(max_idle_ms);
    progress(0);
    for (;;) {
        if (ctx_ok) {
            OpList &list = contexts_[ctx].done;
            while (done_count < done.size() && !list.empty())
                done[done_count++] = reap(list.front());
        }
        std::size_t n = 0;
        while (n < max_unexpected && !unexpected_.empty()) {
            unexpected.push_back(std::move(unexpected_.front()));
            unexpected_.pop_front();
            ++n;
        }
        if (done_count + n > 0) {
            waited_for_work(window);
            return done_count + n;
        }
        if (!idle_step(window))
            return 0;
    }
}

int Core::cancel(OpId id)
{
    const std::uint32_t i = index_of(id);
    if (i == no_index)
        return -EINVAL;
    if (ops[i].state == OpState::active)
        method_of(i).cancel(i, -ECANCELED, false);
    return 0;
}

int Core::set_info(Info key, std::uint64_t value)
{
    switch (key) {
    case Info::eager_limit:
        if (value < 1024 || value > (std::uint64_t{64} << 20U))
            return -EINVAL;
        limits.eager = value;
        return 0;
    case Info::unexpected_limit:
        if (value < 256 || value > (std::uint64_t{16} << 20U))
            return -EINVAL;
        limits.unexpected = value;
        return 0;
    case Info::unexpected_peer_bytes:
        if (value < limits.unexpected)
            return -EINVAL;
        limits.unexpected_peer_bytes = value;
        return 0;
    case Info::idle_timeout_ms:
        if (value < 10 || value > std::uint64_t{3600} * 1000)
            return -EINVAL;
        limits.idle_timeout = std::chrono::milliseconds(value);
        return 0;
    case Info::keepalive_ms:
        if (value < 1000 || value > std::uint64_t{3600} * 1000)
            return -EINVAL;
        limits.keepalive = std::chrono::milliseconds(value);
        return 0;
    case Info::spin_us:
        if (value > Limits::max_spin_us)
            return -EINVAL;
        limits.spin = std::chrono::microseconds(value);
        return 0;
    case Info::drop_addr:
        if (AddrEntry *e = entry(value)) {
            e->method->drop_peer(value, -ECONNRESET);
            return 0;
        }
        return -EINVAL;
    case Info::max_connections:
        if (value < 1 || value > (std::uint64_t{1} << 20U))
            return -EINVAL;
        limits.max_connections = value;
        return 0;
    case Info::max_connections_per_address:
        if (value < 1 || value > (std::uint64_t{1} << 20U))
            return -EINVAL;
        limits.max_connections_per_address = value;
        return 0;
    case Info::hello_timeout_ms:
        if (value < 10 || value > std::uint64_t{3600} * 1000)
            return -EINVAL;
        limits.hello_timeout = std::chrono::milliseconds(value);
        return 0;
    case Info::frame_timeout_ms:
        if (value < 10 || value > std::uint64_t{3600} * 1000)
            return -EINVAL;
        limits.frame_timeout = std::chrono::milliseconds(value);
        return 0;
    case Info::frame_min_rate:
        if (value < 1 || value > (std::uint64_t{1} << 30U))
            return -EINVAL;
        limits.frame_min_rate = value;
        return 0;
    case Info::unexpected_total_bytes:
        if (value < limits.unexpected_peer_bytes)
            return -EINVAL;
        limits.unexpected_total_bytes = value;
        return 0;
    case Info::early_total_bytes:
        if (value < limits.eager)
            return -EINVAL;
        limits.early_total_bytes = value;
        return 0;
    case Info::send_queue_bytes:
        if (value < 4096 || value > (std::uint64_t{1} << 30U))
            return -EINVAL;
        limits.send_queue_bytes = value;
        return 0;
    case Info::engine:
    case Info::open_connections:
    case Info::direct_sends:
    case Info::registrations:
    case Info::registration_hits:
    case Info::poll_us:
    case Info::peers:
    case Info::refused_connections:
    case Info::unexpected_bytes:
    case Info::early_bytes:
    case Info::queued_bytes:
        return -EINVAL;
    }
    return -EINVAL;
}

std::uint64_t Core::get_info(Info key) const
{
    switch (key) {
    case Info::eager_limit:
        return limits.eager;
    case Info::unexpected_limit:
        return limits.unexpected;
    case Info::unexpected_peer_bytes:
        return limits.unexpected_peer_bytes;
    case Info::idle_timeout_ms:
        return static_cast<std::uint64_t>(limits.idle_timeout.count());
    case Info::keepalive_ms:
        return static_cast<std::uint64_t>(limits.keepalive.count());
    case Info::spin_us:
        return static_cast<std::uint64_t>(limits.spin.count());
    case Info::poll_us:
        return static_cast<std::uint64_t>(poll_learner.poll_time(limits.spin).count());
    case Info::engine:
        return methods_[0]->engine();
    case Info::open_connections: {
        std::uint64_t n = 0;
        for (const auto &m : methods_)
            n += m->open_connections();
        return n;
    }
    case Info::direct_sends: {
        std::uint64_t n = 0;
        for (const auto &m : methods_)
            n += m->direct_sends();
        return n;
    }
    case Info::registrations:
    case Info::registration_hits:
    case Info::refused_connections:
    case Info::early_bytes:
    case Info::queued_bytes: {
        std::uint64_t n = 0;
        for (const auto &m : methods_)
            n += m->counter(key);
        return n;
    }
    case Info::unexpected_bytes: {
        std::uint64_t n = unexpected_pool->total();
        for (const auto &m : methods_)
            n += m->counter(key);
        return n;
    }
    case Info::peers:
        return addrs_.size() - free_slots_.size() - retired_slots_;
    case Info::max_connections:
        return limits.max_connections;
    case Info::max_connections_per_address:
        return limits.max_connections_per_address;
    case Info::hello_timeout_ms:
        return static_cast<std::uint64_t>(limits.hello_timeout.count());
    case Info::frame_timeout_ms:
        return static_cast<std::uint64_t>(limits.frame_timeout.count());
    case Info::unexpected_total_bytes:
        return limits.unexpected_total_bytes;
    case Info::early_total_bytes:
        return limits.early_total_bytes;
    case Info::frame_min_rate:
        return limits.frame_min_rate;
    case Info::send_queue_bytes:
        return limits.send_queue_bytes;
    case Info::drop_addr:
        return 0;
    }
    return 0;
}

// --------------------------------------------------------------------- Bmi

Bmi::Bmi(const Options &options) : core_(std::make_unique<Core>(options)) {}
Bmi::~Bmi() = default;

std::vector<std::string> Bmi::listen_addresses() const
{
    return core_->listen_urls;
}

ContextId Bmi::open_context()
{
    return core_->open_context();
}

void Bmi::close_context(ContextId ctx)
{
    core_->close_context(ctx);
}

Addr Bmi::addr_lookup(std::string_view url, int *error)
{
    return core_->lookup(url, error);
}

Addr Bmi::addr_lookup(std::string_view url, std::string_view credential, int *error)
{
    return core_->lookup(url, error, credential);
}

std::string Bmi::rev_lookup(Addr addr) const
{
    return core_->url_of(addr);
}

namespace {

// Send buffers are never written; the op table stores one buffer type.
MutableBuffer as_mutable(const void *data, std::size_t size)
{
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast)
    return MutableBuffer{const_cast<void *>(data), size};
}

} // namespace

Post Bmi::post_send(Addr dest, const void *buf, std::size_t size, Tag tag, void *user_ptr,
                    ContextId ctx)
{
    const MutableBuffer b = as_mutable(buf, size);
    return core_->post(OpKind::send, dest, {&b, 1}, tag, user_ptr, ctx);
}

Post Bmi::post_sendunexpected(Addr dest, const void *buf, std::size_t size, Tag tag, void *user_ptr,
                              ContextId ctx)
{
    const MutableBuffer b = as_mutable(buf, size);
    return core_->post(OpKind::send_unexpected, dest, {&b, 1}, tag, user_ptr, ctx);
}

Post Bmi::post_recv(Addr src, void *buf, std::size_t size, Tag tag, void *user_ptr, ContextId ctx)
{
    const MutableBuffer b{buf, size};
    return core_->post(OpKind::recv, src, {&b, 1}, tag, user_ptr, ctx);
}

namespace {

Post post_const_list(Core &core, OpKind kind, Addr dest, std::span<const ConstBuffer> bufs, Tag tag,
                     void *user_ptr, ContextId ctx)
{
    // Small lists convert on the stack; larger ones once per post.
    constexpr std::size_t inline_bufs = 16;
    std::array<MutableBuffer, inline_bufs> small{};
    std::vector<MutableBuffer> large;
    std::span<MutableBuffer> out;
    if (bufs.size() <= inline_bufs) {
        out = std::span<MutableBuffer>(small.data(), bufs.size());
    } else {
        large.resize(bufs.size());
        out = large;
    }
    for (std::size_t k = 0; k < bufs.size(); ++k)
        out[k] = as_mutable(bufs[k].data, bufs[k].size);
    return core.post(kind, dest, out, tag, user_ptr, ctx);
}

} // namespace

Post Bmi::post_send_list(Addr dest, std::span<const ConstBuffer> bufs, Tag tag, void *user_ptr,
                         ContextId ctx)
{
    return post_const_list(*core_, OpKind::send, dest, bufs, tag, user_ptr, ctx);
}

Post Bmi::post_sendunexpected_list(Addr dest, std::span<const ConstBuffer> bufs, Tag tag,
                                   void *user_ptr, ContextId ctx)
{
    return post_const_list(*core_, OpKind::send_unexpected, dest, bufs, tag, user_ptr, ctx);
}

Post Bmi::post_recv_list(Addr src, std::span<const MutableBuffer> bufs, Tag tag, void *user_ptr,
                         ContextId ctx)
{
    return core_->post(OpKind::recv, src, bufs, tag, user_ptr, ctx);
}

int Bmi::expose(Addr peer, std::span<const MutableBuffer> bufs, Exposure &handle,
                std::vector<std::byte> &descriptor)
{
    std::shared_ptr<void> keep;
    const int rc = core_->expose(peer, bufs, keep, descriptor);
    if (rc == 0)
        handle = Exposure(std::move(keep));
    return rc;
}

Post Bmi::post_get(Addr peer, std::span<const std::byte> descriptor, std::uint64_t offset,
                   void *buf, std::size_t size, void *user_ptr, ContextId ctx)
{
    return core_->post_rdma(OpKind::get, peer, descriptor, offset, MutableBuffer{buf, size},
                            user_ptr, ctx);
}

Post Bmi::post_put(Addr peer, std::span<const std::byte> descriptor, std::uint64_t offset,
                   const void *buf, std::size_t size, void *user_ptr, ContextId ctx)
{
    // Only read (the RDMA WRITE's source); ops hold mutable buffers.
    void *source = const_cast<void *>(buf); // NOLINT(cppcoreguidelines-pro-type-const-cast)
    return core_->post_rdma(OpKind::put, peer, descriptor, offset, MutableBuffer{source, size},
                            user_ptr, ctx);
}

bool Bmi::test(OpId op, Completion &out, int max_idle_ms)
{
    return core_->test(op, out, max_idle_ms);
}

std::size_t Bmi::testsome(std::span<const OpId> ops, std::vector<Completion> &out, int max_idle_ms)
{
    return core_->testsome(ops, out, max_idle_ms);
}

std::size_t Bmi::testcontext(ContextId ctx, std::span<Completion> out, int max_idle_ms)
{
    return core_->testcontext(ctx, out, max_idle_ms);
}

std::size_t Bmi::testany(ContextId ctx, std::span<Completion> done, std::size_t &done_count,
                         std::vector<UnexpectedMessage> &unexpected, std::size_t max_unexpected,
                         int max_idle_ms)
{
    return core_->testany(ctx, done, done_count, unexpected, max_unexpected, max_idle_ms);
}

std::size_t Bmi::testunexpected(std::vector<UnexpectedMessage> &out, std::size_t max,
                                int max_idle_ms)
{
    return core_->testunexpected(out, max, max_idle_ms);
}

int Bmi::cancel(OpId op)
{
    return core_->cancel(op);
}

// peer is unused: the memory is registered with every method's devices
// (Core::memalloc), so it suits transfers to any peer.
Memory Bmi::memalloc(Addr /*peer*/, std::size_t size) const
{
    return core_->memalloc(size);
}

Registration Bmi::register_memory(void *data, std::size_t size)
{
    return core_->register_memory(data, size);
}

Registration Core::register_memory(void *data, std::size_t size)
{
    std::vector<std::shared_ptr<void>> regs;
    for (auto &m : methods_) {
        if (auto r = m->register_memory(data, size))
            regs.push_back(std::move(r));
    }
    if (regs.empty())
        return {};
    return Registration(std::make_shared<std::vector<std::shared_ptr<void>>>(std::move(regs)));
}

int Bmi::watch_fd(int fd)
{
    return core_->watch_fd(fd);
}

int Bmi::unwatch_fd(int fd)
{
    return core_->unwatch_fd(fd);
}

void Bmi::take_ready_fds(std::vector<int> &out)
{
    core_->take_ready_fds(out);
}

int Bmi::set_info(Info key, std::uint64_t value)
{
    return core_->set_info(key, value);
}

std::uint64_t Bmi::get_info(Info key) const
{
    return core_->get_info(key);
}

} // namespace bmi
