// Store and WriteBatch: the transactions around the operations of
// detail/ops.cpp, and the one-writer rule of LMDB made explicit.
#include "meta_store.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <ctime>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "detail/lmdb.hpp"
#include "detail/ops.hpp"
#include "pvfs/gossip.hpp"

namespace pvfs::meta {

namespace gossip = pvfs::gossip;

namespace {

// What status() says once a batch has ended (committed or aborted).
constexpr int batch_ended = -EBADF;

[[nodiscard]] Timespec clock_now() noexcept
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return Timespec{ts.tv_sec, static_cast<std::uint32_t>(ts.tv_nsec)};
}

[[nodiscard]] std::string listed(const std::vector<std::string> &names)
{
    std::string out;
    for (const std::string &name : names)
        out += name + "\n";
    return out;
}

[[nodiscard]] std::string readable(std::string_view list)
{
    std::string out;
    std::size_t count = 0;
    for (std::size_t start = 0; start < list.size();) {
        std::size_t end = list.find('\n', start);
        if (end == std::string_view::npos)
            end = list.size();
        out += (count++ == 0 ? "" : ", ") + std::string(list.substr(start, end - start));
        start = end + 1;
    }
    return fmt::format("{} ({})", count, out);
}

// Records the data server list in a store that has none; refuses a list
// other than the recorded one.
[[nodiscard]] int check_data_servers(const ops::Tx &tx, const Options &options)
{
    if (options.data_servers.empty())
        return 0;
    const std::string now = listed(options.data_servers);
    const auto bytes = [](std::string_view s) {
        return records::Bytes{reinterpret_cast<const std::uint8_t *>(s.data()), s.size()};
    };
    records::Bytes recorded;
    const int rc = ops::get(tx, tx.tables->meta, bytes(records::key_data_servers), recorded);
    if (rc == -ENOENT)
        return ops::put(tx, tx.tables->meta, bytes(records::key_data_servers), bytes(now));
    if (rc != 0)
        return rc;
    const std::string_view was(reinterpret_cast<const char *>(recorded.data()), recorded.size());
    if (was == now)
        return 0;
    gossip::error(gossip::Mask::meta,
                  "metadata store {}: its files are striped over the data servers {}, in this "
                  "order; the config has {}.  A file's stripe k is on data server (first + k) "
                  "mod their count, so this config would read and write files on the wrong "
                  "servers.  Put the data server list back as it was (names and order; "
                  "addresses may change): data servers cannot yet be added, removed or "
                  "reordered (docs/metadata.md \"The data server list\")",
                  options.path, readable(was), readable(now));
    return -EINVAL;
}

} // namespace

struct Store::Impl {
    lmdb::Env env;
    ops::Tables tables;
    std::uint32_t server = 0;
    std::uint32_t max_links = meta::max_links;
    // LMDB allows one write transaction; a second begun on the thread that
    // holds the first would deadlock inside LMDB, so batches take this
    // mutex first and remember their thread.
    std::mutex writer;
    std::atomic<std::thread::id> writer_thread{};

    template <typename Fn> [[nodiscard]] int read(Fn &&fn) const
    {
        if (env.get() == nullptr)
            return -EBADF;
        lmdb::Txn txn;
        if (const int rc = txn.begin(env.get(), nullptr, MDB_RDONLY); rc != 0)
            return rc;
        ops::Tx tx{txn.get(), &tables, server, max_links, clock_now()};
        return fn(tx);
    }
};

struct WriteBatch::State {
    Store::Impl *store = nullptr;
    std::unique_lock<std::mutex> lock;
    lmdb::Txn txn;
    lmdb::Txn unit; // begin_unit .. end_unit: nested in txn
    // Nothing written in the unit yet: its first operation runs in the
    // unit itself.  Each nesting level costs LMDB 3 MiB of dirty and free
    // page lists; two levels per change made malloc give the memory back
    // and fault it in again on every change (a quarter of the removes/s).
    bool unit_fresh = false;
    int status = 0;
    std::size_t applied = 0;

    // Where the next operation nests.
    [[nodiscard]] MDB_txn *parent() const noexcept
    {
        return unit.active() ? unit.get() : txn.get();
    }

    void end(int why) noexcept
    {
        unit.abort();
        txn.abort();
        if (lock.owns_lock()) {
            store->writer_thread.store(std::thread::id{});
            lock.unlock();
        }
        status = why;
    }

    // Runs one operation in a nested transaction: kept if it succeeds,
    // rolled back alone if it fails.
    template <typename Fn> [[nodiscard]] int run(Fn &&fn)
    {
        if (status != 0)
            return status;
        if (unit.active() && unit_fresh)
            return run_in_unit(fn);
        lmdb::Txn child;
        if (const int rc = child.begin(store->env.get(), parent(), 0); rc != 0)
            return rc;
        ops::Tx tx{child.get(), &store->tables, store->server, store->max_links, clock_now()};
        int rc = fn(tx);
        if (rc == 0)
            rc = child.commit();
        else
            child.abort();
        if (rc == 0)
            ++applied;
        return rc;
    }

    // The unit's first operation: a failure rolls the unit back and opens
    // it again empty, as if the operation had run in a child.
    template <typename Fn> [[nodiscard]] int run_in_unit(Fn &&fn)
    {
        unit_fresh = false;
        ops::Tx tx{unit.get(), &store->tables, store->server, store->max_links, clock_now()};
        const int rc = fn(tx);
        if (rc == 0) {
            ++applied;
            return 0;
        }
        unit.abort();
        if (const int again = unit.begin(store->env.get(), txn.get(), 0); again != 0)
            end(again); // the batch cannot go on: nothing in it is kept
        return rc;
    }

    // Runs fn in the current transaction itself (the unit's, if open):
    // bookkeeping that must stand or fall with the operations around it.
    template <typename Fn> [[nodiscard]] int here(Fn &&fn)
    {
        if (status != 0)
            return status;
        unit_fresh = false;
        ops::Tx tx{parent(), &store->tables, store->server, store->max_links, clock_now()};
        return fn(tx);
    }
};

// ---- WriteBatch ----

WriteBatch::WriteBatch(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}
WriteBatch::WriteBatch(WriteBatch &&) noexcept = default;
WriteBatch &WriteBatch::operator=(WriteBatch &&other) noexcept
{
    if (this != &other) {
        abort();
        state_ = std::move(other.state_);
    }
    return *this;
}
WriteBatch::~WriteBatch()
{
    abort();
}

int WriteBatch::status() const noexcept
{
    return state_ ? state_->status : batch_ended;
}

std::size_t WriteBatch::applied() const noexcept
{
    return state_ ? state_->applied : 0;
}

int WriteBatch::commit()
{
    if (!state_)
        return batch_ended;
    if (state_->status != 0)
        return state_->status;
    state_->unit.abort(); // a unit never ended was not meant to be kept
    const int rc = state_->txn.commit();
    state_->end(batch_ended);
    return rc;
}

void WriteBatch::abort() noexcept
{
    if (state_ && state_->status != batch_ended)
        state_->end(batch_ended);
}

int WriteBatch::begin_unit()
{
    if (!state_)
        return batch_ended;
    if (state_->status != 0)
        return state_->status;
    if (state_->unit.active())
        return -EBUSY;
    const int rc = state_->unit.begin(state_->store->env.get(), state_->txn.get(), 0);
    state_->unit_fresh = rc == 0;
    return rc;
}

int WriteBatch::end_unit(bool keep)
{
    if (!state_)
        return batch_ended;
    if (!state_->unit.active())
        return state_->status != 0 ? state_->status : -EINVAL;
    if (!keep) {
        state_->unit.abort();
        return 0;
    }
    return state_->unit.commit();
}

int WriteBatch::reply_find(const ReplyId &id, ReplyMatch &match, SavedReply &out)
{
    match = ReplyMatch::none;
    return state_ ? state_->here([&](ops::Tx &tx) { return ops::reply_find(tx, id, match, out); })
                  : batch_ended;
}

int WriteBatch::reply_save(const ReplyId &id, const SavedReply &reply)
{
    return state_ ? state_->here([&](ops::Tx &tx) { return ops::reply_save(tx, id, reply); })
                  : batch_ended;
}

int WriteBatch::session_put(const SessionRecord &session)
{
    return state_ ? state_->here([&](ops::Tx &tx) { return ops::session_put(tx, session); })
                  : batch_ended;
}

int WriteBatch::session_get(std::uint64_t client_id, SessionRecord &out)
{
    return state_ ? state_->here([&](ops::Tx &tx) { return ops::session_get(tx, client_id, out); })
                  : batch_ended;
}

int WriteBatch::session_delete(std::uint64_t client_id)
{
    return state_ ? state_->here([&](ops::Tx &tx) { return ops::session_delete(tx, client_id); })
                  : batch_ended;
}

int WriteBatch::create(const Credentials &cred, Handle parent, std::string_view name,
                       std::uint32_t mode, bool exclusive, const Layout &layout, CreateResult &out)
{
    return state_ ? state_->run([&](ops::Tx &tx) {
        return ops::create(tx, cred, parent, name, mode, exclusive, layout, out);
    })
                  : batch_ended;
}

int WriteBatch::mkdir(const Credentials &cred, Handle parent, std::string_view name,
                      std::uint32_t mode, Attr &out)
{
    return state_ ? state_->run(
                        [&](ops::Tx &tx) { return ops::mkdir(tx, cred, parent, name, mode, out); })
                  : batch_ended;
}

int WriteBatch::mknod(const Credentials &cred, Handle parent, std::string_view name,
                      ObjectType type, std::uint32_t mode, std::uint64_t rdev, Attr &out)
{
    return state_ ? state_->run([&](ops::Tx &tx) {
        return ops::mknod(tx, cred, parent, name, type, mode, rdev, out);
    })
                  : batch_ended;
}

int WriteBatch::symlink(const Credentials &cred, Handle parent, std::string_view name,
                        std::string_view target, Attr &out)
{
    return state_ ? state_->run([&](ops::Tx &tx) {
        return ops::symlink(tx, cred, parent, name, target, out);
    })
                  : batch_ended;
}

int WriteBatch::link(const Credentials &cred, Handle target, Handle new_parent,
                     std::string_view new_name, Attr &out)
{
    return state_ ? state_->run([&](ops::Tx &tx) {
        return ops::link(tx, cred, target, new_parent, new_name, out);
    })
                  : batch_ended;
}

int WriteBatch::unlink(const Credentials &cred, Handle parent, std::string_view name, Removed &out,
                       const OpenCheck &held)
{
    return state_ ? state_->run([&](ops::Tx &tx) {
        tx.held = &held;
        return ops::unlink(tx, cred, parent, name, out);
    })
                  : batch_ended;
}

int WriteBatch::rmdir(const Credentials &cred, Handle parent, std::string_view name)
{
    return state_ ? state_->run([&](ops::Tx &tx) { return ops::rmdir(tx, cred, parent, name); })
                  : batch_ended;
}

int WriteBatch::rename(const Credentials &cred, Handle old_parent, std::string_view old_name,
                       Handle new_parent, std::string_view new_name, std::uint32_t flags,
                       Removed &replaced, const OpenCheck &held)
{
    return state_ ? state_->run([&](ops::Tx &tx) {
        tx.held = &held;
        return ops::rename(tx, cred, old_parent, old_name, new_parent, new_name, flags, replaced);
    })
                  : batch_ended;
}

int WriteBatch::setattr(const Credentials &cred, Handle handle, const perm::AttrChange &change,
                        Attr &out)
{
    return state_ ? state_->run(
                        [&](ops::Tx &tx) { return ops::setattr(tx, cred, handle, change, out); })
                  : batch_ended;
}

int WriteBatch::data_written(const Credentials &cred, Handle handle, Attr &out, bool writer)
{
    return state_ ? state_->run([&](ops::Tx &tx) {
        return ops::data_written(tx, cred, handle, out, writer);
    })
                  : batch_ended;
}

int WriteBatch::xattr_set(const Credentials &cred, Handle handle, std::string_view name,
                          std::string_view value, std::uint32_t flags)
{
    return state_ ? state_->run([&](ops::Tx &tx) {
        return ops::xattr_set(tx, cred, handle, name, value, flags);
    })
                  : batch_ended;
}

int WriteBatch::xattr_remove(const Credentials &cred, Handle handle, std::string_view name)
{
    return state_
               ? state_->run([&](ops::Tx &tx) { return ops::xattr_remove(tx, cred, handle, name); })
               : batch_ended;
}

int WriteBatch::layout_set(const Credentials &cred, Handle handle, const Layout &layout)
{
    return state_
               ? state_->run([&](ops::Tx &tx) { return ops::layout_set(tx, cred, handle, layout); })
               : batch_ended;
}

int WriteBatch::mkdir_object(const Credentials &cred, const Attr &parent, std::uint32_t mode,
                             Attr &out)
{
    return state_ ? state_->run(
                        [&](ops::Tx &tx) { return ops::mkdir_object(tx, cred, parent, mode, out); })
                  : batch_ended;
}

int WriteBatch::link_dir(const Credentials &cred, Handle parent, std::string_view name,
                         Handle handle)
{
    return state_ ? state_->run(
                        [&](ops::Tx &tx) { return ops::link_dir(tx, cred, parent, name, handle); })
                  : batch_ended;
}

int WriteBatch::retire_dir(Handle handle, bool retire, Attr &out)
{
    return state_
               ? state_->run([&](ops::Tx &tx) { return ops::retire_dir(tx, handle, retire, out); })
               : batch_ended;
}

int WriteBatch::unlink_dir(const Credentials &cred, Handle parent, std::string_view name,
                           Handle handle, std::uint32_t owner_uid)
{
    return state_ ? state_->run([&](ops::Tx &tx) {
        return ops::unlink_dir(tx, cred, parent, name, handle, owner_uid);
    })
                  : batch_ended;
}

int WriteBatch::release(Handle handle, Removed &out)
{
    return state_ ? state_->run([&](ops::Tx &tx) { return ops::release(tx, handle, out); })
                  : batch_ended;
}

int WriteBatch::orphan_done(Handle handle)
{
    return state_ ? state_->run([&](ops::Tx &tx) { return ops::orphan_done(tx, handle); })
                  : batch_ended;
}

int WriteBatch::orphan_handout(std::uint64_t older_than_ns, std::uint64_t now_ns, std::size_t max,
                               std::vector<Orphan> &out)
{
    return state_ ? state_->run([&](ops::Tx &tx) {
        return ops::orphan_handout(tx, older_than_ns, now_ns, max, out);
    })
                  : batch_ended;
}

int WriteBatch::remove_dir_object(Handle handle)
{
    return state_ ? state_->run([&](ops::Tx &tx) { return ops::remove_dir_object(tx, handle); })
                  : batch_ended;
}

// ---- Store ----

Store::Store() noexcept = default;
Store::Store(Store &&) noexcept = default;
Store &Store::operator=(Store &&) noexcept = default;
Store::~Store() = default;

int Store::open(const Options &options)
{
    close();
    if (options.path.empty())
        return -EINVAL;
    if (::mkdir(options.path.c_str(), 0700) != 0 && errno != EEXIST) {
        const int err = errno;
        gossip::error(gossip::Mask::meta, "mkdir {}: {}", options.path,
                      std::system_category().message(err));
        return -err;
    }
    auto impl = std::make_unique<Impl>();
    impl->server = options.server_index;
    impl->max_links = std::clamp(options.max_links, 2U, meta::max_links);
    if (options.server_index >= (1U << handle_server_bits)) {
        gossip::error(gossip::Mask::meta, "server index {} does not fit a handle",
                      options.server_index);
        return -EINVAL;
    }
    const unsigned flags = MDB_NOTLS | (options.durable ? 0U : MDB_NOSYNC);
    if (const int rc = impl->env.open(options.path.c_str(), flags, options.map_size,
                                      ops::table_count, options.max_readers);
        rc != 0) {
        gossip::error(gossip::Mask::meta, "cannot open metadata store {}", options.path);
        return rc;
    }
    lmdb::Txn txn;
    if (const int rc = txn.begin(impl->env.get(), nullptr, 0); rc != 0)
        return rc;
    if (const int rc = ops::open_tables(txn.get(), impl->tables); rc != 0)
        return rc;
    ops::Tx tx{txn.get(), &impl->tables, impl->server, impl->max_links, clock_now()};
    if (const int rc = ops::init_store(tx, options.default_layout); rc != 0) {
        gossip::error(gossip::Mask::meta, "cannot initialise metadata store {}", options.path);
        return rc;
    }
    if (const int rc = check_data_servers(tx, options); rc != 0)
        return rc;
    if (const int rc = ops::migrate_replies(tx); rc != 0) {
        gossip::error(gossip::Mask::meta, "cannot move the reply cache of metadata store {}",
                      options.path);
        return rc;
    }
    if (const int rc = txn.commit(); rc != 0)
        return rc;
    impl_ = std::move(impl);
    return 0;
}

void Store::close() noexcept
{
    impl_.reset();
}

bool Store::is_open() const noexcept
{
    return impl_ != nullptr;
}

std::uint32_t Store::server_index() const noexcept
{
    return impl_ ? impl_->server : 0;
}

WriteBatch Store::batch()
{
    auto state = std::make_unique<WriteBatch::State>();
    if (!impl_) {
        state->status = -EBADF;
        return WriteBatch(std::move(state));
    }
    state->store = impl_.get();
    if (impl_->writer_thread.load() == std::this_thread::get_id()) {
        state->status = -EDEADLK;
        return WriteBatch(std::move(state));
    }
    state->lock = std::unique_lock(impl_->writer);
    impl_->writer_thread.store(std::this_thread::get_id());
    if (const int rc = state->txn.begin(impl_->env.get(), nullptr, 0); rc != 0)
        state->end(rc);
    return WriteBatch(std::move(state));
}

int Store::lookup(const Credentials &cred, Handle parent, std::string_view name, Attr &out) const
{
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) { return ops::lookup(tx, cred, parent, name, out); });
}

int Store::getattr(const Credentials &cred, Handle handle, Attr &out) const
{
    // stat(2) needs search permission on the path only, which lookup checked.
    (void)cred;
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) { return ops::getattr(tx, handle, out); });
}

int Store::readlink(const Credentials &cred, Handle handle, std::string &target) const
{
    (void)cred; // readlink(2) needs no permission on the link itself
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) { return ops::readlink(tx, handle, target); });
}

int Store::readdir(const Credentials &cred, Handle dir, std::uint64_t cookie,
                   std::uint32_t max_entries, DirPage &out) const
{
    if (!impl_)
        return -EBADF;
    return impl_->read(
        [&](ops::Tx &tx) { return ops::readdir(tx, cred, dir, cookie, max_entries, out); });
}

int Store::xattr_get(const Credentials &cred, Handle handle, std::string_view name,
                     std::string &value) const
{
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) { return ops::xattr_get(tx, cred, handle, name, value); });
}

int Store::xattr_list(const Credentials &cred, Handle handle, std::vector<std::string> &names) const
{
    (void)cred; // listxattr(2) needs no permission on the object
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) { return ops::xattr_list(tx, handle, names); });
}

int Store::layout_get(const Credentials &cred, Handle handle, Layout &out) const
{
    (void)cred; // the layout is metadata, like stat
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) { return ops::layout_get(tx, handle, out); });
}

int Store::access(const Credentials &cred, Handle handle, unsigned mask) const
{
    if (!impl_)
        return -EBADF;
    Attr attr;
    if (const int rc = impl_->read([&](ops::Tx &tx) { return ops::getattr(tx, handle, attr); });
        rc != 0)
        return rc;
    return mask == 0 ? 0 : perm::may_access(cred, attr, mask);
}

int Store::handle_gone(Handle handle) const
{
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) { return ops::handle_gone(tx, handle); });
}

int Store::statfs(Stats &out) const
{
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) { return ops::statfs(tx, impl_->env.get(), out); });
}

int Store::list_handles(std::uint64_t cookie, std::uint32_t max_handles, HandlePage &out) const
{
    if (!impl_)
        return -EBADF;
    return impl_->read(
        [&](ops::Tx &tx) { return ops::list_handles(tx, cookie, max_handles, out); });
}

int Store::list_orphans(std::uint64_t cookie, std::uint32_t max, std::vector<Orphan> &out,
                        bool &eof) const
{
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) { return ops::list_orphans(tx, cookie, max, out, eof); });
}

int Store::any_orphan(std::span<const Handle> handles, bool &found) const
{
    found = false;
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) {
        for (const Handle h : handles) {
            Orphan o;
            const int rc = ops::orphan_get(tx, h, o);
            if (rc == 0) {
                found = true;
                return 0;
            }
            if (rc != -ENOENT)
                return rc;
        }
        return 0;
    });
}

int Store::list_sessions(std::vector<SessionRecord> &out) const
{
    if (!impl_)
        return -EBADF;
    return impl_->read([&](ops::Tx &tx) { return ops::list_sessions(tx, out); });
}

} // namespace pvfs::meta
