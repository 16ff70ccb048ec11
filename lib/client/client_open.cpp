// Client::open/close/renew: this client's holds on open files, so that
// the metadata server keeps a file unlinked elsewhere until our last close
// (docs/metadata.md "Orphans and open references").
#include <algorithm>
#include <cerrno>
#include <map>
#include <utility>
#include <vector>

#include "impl.hpp"

namespace pvfs::client {

namespace {

// Removes the data objects of files the server says are to go, then tells
// it they went.  A file whose objects could not all be removed keeps its
// record, which the server hands out again a lease later (before, the
// record went anyway and the objects were left for pvfs-fsck).
Task<void> destroy(Client::Impl &m, std::size_t server, const std::vector<proto::Doomed> &doomed)
{
    for (const proto::Doomed &d : doomed) {
        m.forget(d.handle);
        m.layouts.erase(d.handle);
    }
    const std::vector<int> removed = co_await m.remove_objects(doomed);
    for (std::size_t i = 0; i < doomed.size(); ++i) {
        const proto::Doomed &d = doomed[i];
        if (removed[i] != 0)
            continue;
        proto::OrphanDoneResponse r;
        proto::RequestBody request = proto::OrphanDoneRequest{d.handle};
        // If this fails the record stays and is handed out again.
        static_cast<void>(co_await m.call_body(server, std::move(request), r));
    }
}

// A close is handed at most a few of the orphans waiting for a closer (16
// a close): ask again with renewals while any come, so that the many a
// metadata server's grace leaves are finished by the first client that
// closes a file after it, not one close's worth at a time for as long as
// closes happen to follow (docs/metadata.md "Who removes the data objects").  Bounded, so that
// a close always returns.
constexpr int max_drain_rounds = 64;
Task<void> drain_doomed(Client::Impl &m, std::size_t server, bool handed)
{
    for (int round = 0; handed && m.client_id != 0 && round < max_drain_rounds; ++round) {
        proto::CloseResponse r;
        proto::RequestBody request = proto::CloseRequest{m.client_id, {}};
        if (co_await m.call_body(server, std::move(request), r) != 0)
            co_return;
        co_await destroy(m, server, r.doomed);
        handed = !r.doomed.empty();
    }
}

// The server restarted (a new boot id): our holds there were memory, so
// open them again with reclaim (its grace allows that on unlinked files).
Task<void> reclaim_if_rebooted(Client::Impl &m, std::size_t server, std::uint64_t boot)
{
    auto [it, fresh] = m.meta_boots.try_emplace(server, boot);
    if (fresh || it->second == boot)
        co_return;
    it->second = boot;
    std::vector<std::pair<Handle, Client::Impl::Opened>> mine;
    for (const auto &[h, o] : m.opened) {
        std::size_t s = 0;
        if (m.meta_server_of(h, s) == 0 && s == server)
            mine.emplace_back(h, o);
    }
    for (const auto &[h, o] : mine) {
        proto::OpenResponse r;
        proto::RequestBody request = proto::OpenRequest{h, m.client_id, o.mode, o.gen, true};
        if (const int rc = co_await m.call_body(server, std::move(request), r); rc != 0)
            gossip::warning(gossip::Mask::client,
                            "{:016x} could not be re-opened after its metadata server "
                            "restarted: {}",
                            h, error_text(rc));
    }
}

// The CLOSE of this client's opens of `refs` (all of one metadata
// server), then the removal of the objects the server hands back.
Task<int> send_close(Client::Impl &m, std::size_t server, std::vector<proto::OpenRef> refs)
{
    proto::CloseResponse r;
    proto::RequestBody request = proto::CloseRequest{m.client_id, std::move(refs)};
    if (const int rc = co_await m.call_body(server, std::move(request), r); rc != 0)
        co_return rc; // the holds go with our lease
    co_await destroy(m, server, r.doomed);
    co_await reclaim_if_rebooted(m, server, r.server_boot);
    co_await drain_doomed(m, server, !r.doomed.empty());
    co_return 0;
}

Task<int> send_close(Client::Impl &m, Handle handle, std::uint64_t gen)
{
    std::size_t server = 0;
    if (const int rc = m.meta_server_of(handle, server); rc != 0)
        co_return rc;
    std::vector<proto::OpenRef> refs;
    refs.push_back(proto::OpenRef{handle, gen});
    co_return co_await send_close(m, server, std::move(refs));
}

} // namespace

Task<int> Client::co_open(Handle handle, std::uint32_t mode, Attr &out)
{
    co_return co_await co_open(handle, mode, impl_->open_gen + 1, false, out);
}

Task<int> Client::co_open(Handle handle, std::uint32_t mode, std::uint64_t gen, bool reclaim,
                          Attr &out)
{
    Impl &m = *impl_;
    if (m.client_id == 0)
        co_return -EOPNOTSUPP;
    if ((mode & ~(open_read | open_write)) != 0 || gen == 0)
        co_return -EINVAL;
    std::size_t server = 0;
    if (const int rc = m.meta_server_of(handle, server); rc != 0)
        co_return rc;
    m.open_gen = std::max(m.open_gen, gen);
    proto::OpenResponse r;
    proto::RequestBody request = proto::OpenRequest{handle, m.client_id, mode, gen, reclaim};
    if (const int rc = co_await m.call_body(server, std::move(request), r); rc != 0)
        co_return rc;
    if (r.cap) {
        if (r.cap->handle != handle)
            co_return -EPROTO;
        m.remember_capability(*r.cap);
    }
    Impl::Opened &o = m.opened[handle];
    ++o.count;
    o.gen = std::max(o.gen, gen);
    o.mode |= mode;
    co_await reclaim_if_rebooted(m, server, r.server_boot);
    // The metadata server's attributes are fresh: only the size is the
    // data servers' (one round trip fewer than open, then getattr).
    if (const int rc = co_await m.complete_attr(r.attr); rc != 0) {
        // An open that failed is not counted: its hold goes again.
        static_cast<void>(co_await co_close(handle));
        co_return rc;
    }
    out = r.attr;
    m.remember(out);
    co_return 0;
}

Task<int> Client::co_close(Handle handle)
{
    Impl &m = *impl_;
    const auto it = m.opened.find(handle);
    if (it == m.opened.end())
        co_return -EBADF;
    if (--it->second.count > 0)
        co_return 0;
    const std::uint64_t gen = it->second.gen;
    m.opened.erase(it);
    co_return co_await send_close(m, handle, gen);
}

Task<int> Client::co_close(Handle handle, std::uint64_t gen)
{
    std::vector<CloseRef> refs;
    refs.push_back(CloseRef{handle, gen});
    co_return co_await co_close(std::move(refs));
}

Task<int> Client::co_close(std::vector<CloseRef> refs)
{
    Impl &m = *impl_;
    if (m.client_id == 0)
        co_return -EOPNOTSUPP;
    std::map<std::size_t, std::vector<proto::OpenRef>> by_server;
    int first = 0;
    for (const CloseRef &ref : refs) {
        std::size_t server = 0;
        int rc = ref.gen == 0 ? -EINVAL : m.meta_server_of(ref.handle, server);
        if (rc == 0) {
            // Whatever this process counted: the caller says every open up
            // to gen is closed (a later one, still held, keeps the entry
            // and the hold).
            if (const auto it = m.opened.find(ref.handle);
                it != m.opened.end() && it->second.gen <= ref.gen)
                m.opened.erase(it);
            std::vector<proto::OpenRef> &mine = by_server[server];
            mine.push_back(proto::OpenRef{ref.handle, ref.gen});
            if (mine.size() == proto::max_close_handles) {
                rc = co_await send_close(m, server, std::move(mine));
                mine.clear();
            }
        }
        if (first == 0)
            first = rc;
    }
    for (auto &[server, mine] : by_server) {
        if (mine.empty())
            continue;
        const int rc = co_await send_close(m, server, std::move(mine));
        if (first == 0)
            first = rc;
    }
    co_return first;
}

Task<int> Client::co_close_each(std::vector<Handle> handles)
{
    Impl &m = *impl_;
    std::vector<CloseRef> last;
    int first = 0;
    for (const Handle h : handles) {
        const auto it = m.opened.find(h);
        if (it == m.opened.end()) {
            first = first != 0 ? first : -EBADF;
            continue;
        }
        if (--it->second.count > 0)
            continue;
        last.push_back(CloseRef{h, it->second.gen});
        m.opened.erase(it);
    }
    if (last.empty())
        co_return first;
    const int rc = co_await co_close(std::move(last));
    co_return first != 0 ? first : rc;
}

Task<int> Client::co_renew()
{
    Impl &m = *impl_;
    if (m.client_id == 0)
        co_return -EOPNOTSUPP;
    int first = 0;
    for (const std::size_t server : m.meta_servers) {
        proto::CloseResponse r;
        proto::RequestBody request = proto::CloseRequest{m.client_id, {}};
        if (const int rc = co_await m.call_body(server, std::move(request), r); rc != 0) {
            if (first == 0)
                first = rc;
            continue;
        }
        co_await reclaim_if_rebooted(m, server, r.server_boot);
        co_await destroy(m, server, r.doomed);
        co_await drain_doomed(m, server, !r.doomed.empty());
    }
    co_return first;
}

Task<int> Client::co_reclaim_round(std::uint32_t meta_index)
{
    Impl &m = *impl_;
    if (m.client_id == 0)
        co_return -EOPNOTSUPP;
    if (meta_index >= m.meta_servers.size())
        co_return -EINVAL;
    const std::size_t server = m.meta_servers[meta_index];
    proto::CloseResponse r;
    proto::RequestBody request = proto::CloseRequest{m.client_id, {}};
    if (const int rc = co_await m.call_body(server, std::move(request), r); rc != 0)
        co_return rc;
    co_await destroy(m, server, r.doomed);
    co_return static_cast<int>(r.doomed.size());
}

Task<int> Client::co_list_orphans(std::uint32_t meta_index, std::uint64_t cookie, std::uint32_t max,
                                  std::vector<Orphan> &out, bool &eof)
{
    Impl &m = *impl_;
    if (meta_index >= m.meta_servers.size())
        co_return -EINVAL;
    proto::ListOrphansResponse r;
    proto::RequestBody request = proto::ListOrphansRequest{cookie, max};
    if (const int rc = co_await m.call_body(m.meta_servers[meta_index], std::move(request), r);
        rc != 0)
        co_return rc;
    out.clear();
    for (const proto::OrphanEntry &e : r.entries)
        out.push_back(Orphan{e.handle, e.state, e.since_ns, e.layout});
    eof = r.eof;
    co_return 0;
}

Task<int> Client::co_finish_orphan(Handle handle, const Layout &layout)
{
    Impl &m = *impl_;
    std::size_t server = 0;
    if (const int rc = m.meta_server_of(handle, server); rc != 0)
        co_return rc;
    if (layout::validate(layout, m.data_count()) != nullptr)
        co_return -EINVAL;
    m.forget(handle);
    m.layouts.erase(handle);
    if (const int rc = co_await m.remove_objects(handle, layout); rc != 0)
        co_return rc; // the record stays, for another try
    proto::OrphanDoneResponse r;
    proto::RequestBody request = proto::OrphanDoneRequest{handle};
    co_return co_await m.call_body(server, std::move(request), r);
}

int Client::finish_orphan(Handle handle, const Layout &layout)
{
    return impl_->engine->wait(co_finish_orphan(handle, layout));
}

int Client::open(Handle handle, std::uint32_t mode, Attr &out)
{
    return impl_->engine->wait(co_open(handle, mode, out));
}

int Client::close(Handle handle)
{
    return impl_->engine->wait(co_close(handle));
}

int Client::close(std::vector<CloseRef> refs)
{
    return impl_->engine->wait(co_close(std::move(refs)));
}

int Client::close_each(std::vector<Handle> handles)
{
    return impl_->engine->wait(co_close_each(std::move(handles)));
}

int Client::renew()
{
    return impl_->engine->wait(co_renew());
}

int Client::reclaim_round(std::uint32_t meta_index)
{
    return impl_->engine->wait(co_reclaim_round(meta_index));
}

int Client::list_orphans(std::uint32_t meta_index, std::uint64_t cookie, std::uint32_t max,
                         std::vector<Orphan> &out, bool &eof)
{
    return impl_->engine->wait(co_list_orphans(meta_index, cookie, max, out, eof));
}

} // namespace pvfs::client
