// libpvfs's private state, Client::Impl, shared by the files that
// implement include/pvfs/client.hpp: client.cpp (connecting, names, the
// namespace), client_data.cpp (file data, statfs, xattrs, layouts,
// listings, status) and client_sync.cpp (the blocking wrappers).
#pragma once

#include "pvfs/client.hpp"

#include <sys/random.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "bmi/bmi.hpp"
#include "engine.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/layout.hpp"

namespace pvfs::client {

using gossip::Mask;
using Clock = std::chrono::steady_clock;

// Writes at most this large travel inside the request.
inline constexpr std::size_t inline_write_limit = std::size_t{32} * 1024U;
// Symlinks followed while resolving one path (as Linux's MAXSYMLINKS).
inline constexpr int max_symlinks = 40;
// Entries asked per readdir request when walking a whole directory.
inline constexpr std::uint32_t readdir_page = 512;

using detail::Rpc;

struct Client::Impl {
    Options options;
    config::Cluster cluster;
    std::optional<proto::Key> key;
    // Requests name their server (fs_id, index in cluster.servers), once
    // the config is known: a tcp:// target's first request, get_config,
    // cannot.
    bool bound = false;
    std::chrono::milliseconds timeout{60000};
    std::shared_ptr<Loop> loop;
    Loop::Impl *engine = nullptr;
    std::vector<std::string> urls; // per server: the address used
    std::vector<std::size_t> meta_servers;
    // Client::open's holds (client_open.cpp): handle -> {count, gen, mode},
    // and each metadata server's boot id as its last open/close said.
    struct Opened {
        std::uint32_t count = 0;
        std::uint64_t gen = 0;
        std::uint32_t mode = 0;
    };
    std::unordered_map<Handle, Opened> opened;
    std::unordered_map<std::size_t, std::uint64_t> meta_boots;
    std::uint64_t open_gen = 0;
    std::vector<std::size_t> data_servers;
    bool rdma = false; // data servers move bulk data by RDMA (Options::server_rdma)

    struct CachedAttr {
        Attr attr;
        Clock::time_point expires;
    };
    struct CachedName {
        Handle handle = no_handle;
        Clock::time_point expires;
    };
    std::unordered_map<Handle, CachedAttr> attrs;
    std::unordered_map<std::string, CachedName> names;
    // Regular files' type and layout, for I/O (Options::layout_timeout):
    // kept apart from `attrs`, whose sizes and times go stale at once in
    // pvfsd while a layout stays right until the file is re-striped.
    std::unordered_map<Handle, CachedAttr> layouts;
    static constexpr std::size_t max_cached_layouts = 65536;
    // Files this client wrote since it last told their metadata server
    // (mtime, ctime, setuid/setgid clearing happen at fsync).
    std::unordered_set<Handle> written;
    // What the metadata server said this caller may do with a file
    // (access_* bits), until `expires`; `pinned`: the file this
    // client created, read- and writable for the client's life like the fd
    // of a creating open.  Answers are for one caller (`who`): pvfsd's
    // operations run for many at once.
    struct CachedAccess {
        std::uint32_t granted = 0;
        Clock::time_point expires;
        bool pinned = false;
        Credentials who;
    };
    std::unordered_map<Handle, CachedAccess> access_cache;
    static constexpr std::size_t max_cached_access = 65536;
    // Capabilities for the data servers (docs/protocol.md "Capabilities"),
    // per file and rights, asked again when a third of their time is left.
    // `who` asked for it: a client that checks data access itself
    // (Options::check_data_access) uses one only for the same caller,
    // pvfsd (whose kernel checked the open) for any.
    struct CachedCapability {
        proto::Capability cap;
        Clock::time_point renew_at;
        Credentials who;
    };
    std::map<std::pair<Handle, std::uint32_t>, CachedCapability> capabilities;
    static constexpr std::size_t max_cached_capabilities = 65536;

    // ---- transport ----------------------------------------------------
    void set_servers(const std::vector<std::string> &server_urls) { urls = server_urls; }

    // co_await run(rpcs, depth): the requests run, at most `depth` in
    // flight per server, until each has its response or fails, times out
    // or is cancelled.
    [[nodiscard]] Loop::Impl::RunAwaiter run(std::span<Rpc *const> rpcs, unsigned depth = 1U << 30U)
    {
        for (Rpc *r : rpcs) {
            r->url = &urls.at(r->server);
            r->key = &*key;
            r->fs_id = cluster.fs_id;
            if (bound)
                r->req.to =
                    proto::Destination{cluster.fs_id, static_cast<std::uint32_t>(r->server)};
        }
        return engine->run(rpcs, depth, timeout,
                           detail::RetryPolicy{options.hard, options.retry_timeout});
    }

    // ---- exactly once (docs/protocol.md "Exactly once") ---------------
    std::uint64_t client_id = 0; // 0: changes carry no ids
    std::uint64_t next_xid = 0;
    std::vector<std::uint32_t> free_slots;
    std::uint32_t slots_made = 0;
    std::vector<char> session_opened; // per server: ended when the client goes
    bool warned_no_slot = false;
    bool change_ids = true; // false: changes carry none (Client::set_change_ids)

    // A slot of this client's session, given back when its call ends.
    struct SlotHold {
        Impl *impl = nullptr;
        std::uint32_t slot = 0;
        SlotHold() = default;
        SlotHold(const SlotHold &) = delete;
        SlotHold &operator=(const SlotHold &) = delete;
        SlotHold(SlotHold &&) = delete;
        SlotHold &operator=(SlotHold &&) = delete;
        ~SlotHold()
        {
            if (impl != nullptr)
                impl->free_slots.push_back(slot);
        }
    };

    // A given client_id outlives this Client (pvfsd's restarts): its xids
    // start above any an earlier Client of this boot used, one per
    // nanosecond of uptime at most.
    [[nodiscard]] std::uint64_t first_xid() const
    {
        if (options.client_id == 0)
            return 0;
        timespec t{};
        ::clock_gettime(CLOCK_BOOTTIME, &t);
        return static_cast<std::uint64_t>(t.tv_sec) * 1000000000U +
               static_cast<std::uint64_t>(t.tv_nsec);
    }

    // Gives a change this client makes on its own (not one of pvfsd's
    // kernel ops, whose ids come with the task's context) its ids.
    void take_once(Rpc &r, SlotHold &hold)
    {
        if (client_id == 0 || !change_ids || engine->current.once != nullptr ||
            !proto::changes_metadata(r.req.op()))
            return;
        std::uint32_t slot = 0;
        const std::uint32_t first = std::min(options.caller_slots, proto::max_slots);
        if (!free_slots.empty()) {
            slot = free_slots.back();
            free_slots.pop_back();
        } else if (first + slots_made < proto::max_slots) {
            slot = first + slots_made++;
        } else {
            if (!warned_no_slot)
                gossip::warning(Mask::client,
                                "more than {} metadata changes in flight: the excess is not "
                                "protected against retries",
                                proto::max_slots);
            warned_no_slot = true;
            return;
        }
        hold.impl = this;
        hold.slot = slot;
        if (next_xid == 0)
            next_xid = first_xid();
        r.req.once = proto::OnceIds{client_id, slot, 0, ++next_xid};
    }

    // A session is no change, so this never recurses into call()'s EBADR
    // handling: it runs its request itself.
    Task<int> open_session(std::size_t server)
    {
        Rpc r;
        r.server = server;
        r.req.body = proto::SessionRequest{client_id, proto::session_open, options.session_owner};
        Rpc *p = &r;
        co_await run(std::span(&p, 1));
        const int rc = r.result();
        if (rc == 0 && !std::holds_alternative<proto::SessionResponse>(r.resp.body))
            co_return -EPROTO;
        if (rc == 0 && server < session_opened.size())
            session_opened[server] = 1;
        co_return rc;
    }

    // One request, one response.
    Task<int> call(std::size_t server, proto::RequestBody body, proto::Response &resp)
    {
        Rpc r;
        r.server = server;
        r.req.body = std::move(body);
        // co_unlink/co_rename read `orphaned`; only they say so, so that
        // the rest still reaches a server that does not know the flag.
        r.req.knows_orphaned = r.req.op() == proto::Op::remove || r.req.op() == proto::Op::rename;
        r.req.wants_capability =
            (r.req.op() == proto::Op::create || r.req.op() == proto::Op::open) &&
            !without_capabilities();
        SlotHold hold;
        take_once(r, hold);
        Rpc *p = &r;
        co_await run(std::span(&p, 1));
        int rc = r.result();
        if (rc == -EBADR && r.req.once.present()) {
            // The server has no session of ours (our first change there,
            // or it ended ours), so the change did not run: open one and
            // send it again.
            if (const int s = co_await open_session(server); s != 0)
                co_return s;
            Rpc again;
            again.server = server;
            again.req.body = std::move(r.req.body);
            again.req.once = r.req.once;
            again.req.knows_orphaned = r.req.knows_orphaned;
            again.req.wants_capability = r.req.wants_capability;
            Rpc *q = &again;
            co_await run(std::span(&q, 1));
            rc = again.result();
            if (rc == 0)
                resp = std::move(again.resp);
            co_return rc;
        }
        if (rc == 0)
            resp = std::move(r.resp);
        co_return rc;
    }

    // Ends this client's sessions (Client's destructor), briefly: a server
    // that does not answer drops them after its session_ttl.
    Task<void> end_sessions()
    {
        std::vector<Rpc> rpcs(session_opened.size());
        std::vector<Rpc *> ptrs;
        for (std::size_t i = 0; i < session_opened.size(); ++i) {
            if (session_opened[i] == 0)
                continue;
            rpcs[i].server = i;
            rpcs[i].req.body = proto::SessionRequest{client_id, proto::session_end, {}};
            ptrs.push_back(&rpcs[i]);
        }
        timeout = std::chrono::milliseconds(1000);
        options.hard = false;
        co_await run(ptrs);
    }

    template <typename Body>
    Task<int> call_body(std::size_t server, proto::RequestBody body, Body &out)
    {
        proto::Response resp;
        const int rc = co_await call(server, std::move(body), resp);
        if (rc != 0)
            co_return rc;
        Body *b = std::get_if<Body>(&resp.body);
        if (b == nullptr)
            co_return -EPROTO;
        out = std::move(*b);
        co_return 0;
    }

    // ---- routing ---------------------------------------------------------
    int meta_server_of(Handle h, std::size_t &server) const
    {
        const std::uint32_t i = handle_server(h);
        if (h == no_handle || i >= meta_servers.size())
            return -ESTALE;
        server = meta_servers[i];
        return 0;
    }

    [[nodiscard]] std::uint32_t data_count() const
    {
        return static_cast<std::uint32_t>(data_servers.size());
    }

    // ---- caches ------------------------------------------------------------
    static std::string name_key(Handle parent, std::string_view name)
    {
        std::string k(sizeof parent, '\0');
        std::memcpy(k.data(), &parent, sizeof parent);
        k.append(name);
        return k;
    }

    void remember(const Attr &a)
    {
        remember_layout(a);
        if (options.attr_timeout.count() > 0)
            attrs[a.handle] = CachedAttr{a, Clock::now() + options.attr_timeout};
    }

    void remember_layout(const Attr &a)
    {
        if (options.layout_timeout.count() <= 0 || a.type != ObjectType::regular)
            return;
        if (layouts.size() >= max_cached_layouts && !layouts.contains(a.handle))
            layouts.clear();
        layouts[a.handle] = CachedAttr{a, Clock::now() + options.layout_timeout};
    }

    void remember_name(Handle parent, std::string_view name, Handle h)
    {
        if (options.attr_timeout.count() > 0)
            names[name_key(parent, name)] = CachedName{h, Clock::now() + options.attr_timeout};
    }

    void forget(Handle h) { attrs.erase(h); }

    // ---- rights over file data ----------------------------------------
    Task<int> check_access(Handle h, std::uint32_t mask)
    {
        if (!options.check_data_access)
            co_return 0;
        const auto now = Clock::now();
        const Credentials who = engine->current.cred;
        const auto it = access_cache.find(h);
        if (it != access_cache.end() && (it->second.granted & mask) == mask &&
            (it->second.pinned || (now < it->second.expires && it->second.who == who)))
            co_return 0;
        proto::AccessResponse r;
        proto::RequestBody request = proto::AccessRequest{h, mask};
        if (const int rc = co_await meta_call(h, std::move(request), r); rc != 0)
            co_return rc;
        if (options.attr_timeout.count() <= 0)
            co_return 0;
        if (access_cache.size() >= max_cached_access)
            std::erase_if(access_cache, [](const auto &e) { return !e.second.pinned; });
        CachedAccess &e = access_cache[h];
        if (!e.pinned && (now >= e.expires || e.who != who))
            e.granted = 0;
        e.who = who;
        e.granted |= mask;
        e.expires = now + options.attr_timeout;
        co_return 0;
    }
    void pin_access(Handle h)
    {
        if (access_cache.size() >= max_cached_access)
            std::erase_if(access_cache, [](const auto &e) { return !e.second.pinned; });
        access_cache[h] = CachedAccess{access_read | access_write, {}, true, engine->current.cred};
    }
    // A chmod or chown may change what the caller may do.
    void forget_access(Handle h)
    {
        if (const auto it = access_cache.find(h); it != access_cache.end() && !it->second.pinned)
            access_cache.erase(it);
    }
    void forget_name(Handle parent, std::string_view name)
    {
        names.erase(name_key(parent, name));
        attrs.erase(parent);
    }

    // ---- sizes ------------------------------------------------------------
    // The size of a regular file: the largest end implied by its objects.
    Task<int> file_size(Handle h, const Layout &layout, std::uint64_t &size)
    {
        std::vector<Rpc> rpcs(layout.stripe_count);
        if (const int rc = size_requests(h, layout, rpcs); rc != 0)
            co_return rc;
        std::vector<Rpc *> ptrs;
        ptrs.reserve(rpcs.size());
        for (Rpc &r : rpcs)
            ptrs.push_back(&r);
        co_await run(ptrs);
        co_return size_of(layout, rpcs, size);
    }

    // The ObjectSizes requests of file_size, one per stripe slot (`rpcs`
    // has layout.stripe_count elements).
    int size_requests(Handle h, const Layout &layout, std::vector<Rpc> &rpcs) const
    {
        for (std::uint32_t slot = 0; slot < layout.stripe_count; ++slot) {
            const std::uint32_t ds = layout::server_of_slot(layout, data_count(), slot);
            if (ds >= data_servers.size())
                return -EIO;
            rpcs[slot].server = data_servers[ds];
            rpcs[slot].req.body = proto::ObjectSizesRequest{{h}};
        }
        return 0;
    }

    // The file size their answers imply.
    int size_of(const Layout &layout, const std::vector<Rpc> &rpcs, std::uint64_t &size) const
    {
        size = 0;
        for (std::uint32_t slot = 0; slot < layout.stripe_count; ++slot) {
            if (const int rc = rpcs[slot].result(); rc != 0)
                return rc;
            const auto *r = std::get_if<proto::ObjectSizesResponse>(&rpcs[slot].resp.body);
            if (r == nullptr || r->sizes.size() != 1)
                return -EPROTO;
            if (r->sizes[0] == proto::no_object_size)
                continue;
            const auto end = layout::logical_size(layout, data_count(), slot, r->sizes[0]);
            if (!end)
                return -EFBIG;
            size = std::max(size, *end);
        }
        return 0;
    }

    Task<int> getattr(Handle h, Attr &out, bool use_cache = true)
    {
        if (use_cache) {
            const auto it = attrs.find(h);
            if (it != attrs.end() && it->second.expires > Clock::now()) {
                out = it->second.attr;
                co_return 0;
            }
        }
        std::size_t server = 0;
        if (const int rc = meta_server_of(h, server); rc != 0)
            co_return rc;
        proto::GetattrResponse r;
        proto::RequestBody request = proto::GetattrRequest{h};
        if (const int rc = co_await call_body(server, std::move(request), r); rc != 0)
            co_return rc;
        if (const int rc = co_await complete_attr(r.attr); rc != 0)
            co_return rc;
        out = r.attr;
        remember(out);
        co_return 0;
    }

    // Attributes as the metadata server keeps them, without asking the data
    // servers for the size: what I/O needs (the type and layout).  A cached
    // attribute or layout serves; the answer goes to the layout cache only
    // (its size is not known).
    Task<int> getattr_no_size(Handle h, Attr &out)
    {
        const auto now = Clock::now();
        if (const auto it = attrs.find(h); it != attrs.end() && it->second.expires > now) {
            out = it->second.attr;
            co_return 0;
        }
        if (const auto it = layouts.find(h); it != layouts.end() && it->second.expires > now) {
            out = it->second.attr;
            co_return 0;
        }
        proto::GetattrResponse r;
        proto::RequestBody request = proto::GetattrRequest{h};
        if (const int rc = co_await meta_call(h, std::move(request), r); rc != 0)
            co_return rc;
        out = r.attr;
        remember_layout(out);
        co_return 0;
    }

    // Fills a regular file's size from its data servers.
    Task<int> complete_attr(Attr &a)
    {
        if (a.type != ObjectType::regular)
            co_return 0;
        if (layout::validate(a.layout, data_count()) != nullptr)
            co_return -EIO;
        co_return co_await file_size(a.handle, a.layout, a.size);
    }

    // Removes the data objects of files whose last link went, all at once
    // (a close's hand-out can name hundreds): per file, 0 or the first error
    // of a data server (each one is logged).
    Task<std::vector<int>> remove_objects(std::span<const proto::Doomed> files)
    {
        std::vector<Handle> handles;
        handles.reserve(files.size());
        for (const proto::Doomed &d : files)
            handles.push_back(d.handle);
        std::vector<proto::Capability> caps;
        std::vector<int> out = co_await destroy_capabilities(handles, caps);
        std::vector<Rpc> rpcs;
        std::vector<std::size_t> file_of;
        for (std::size_t f = 0; f < files.size(); ++f) {
            if (out[f] != 0) {
                gossip::warning(Mask::client,
                                "data objects of {:016x} not removed: no "
                                "capability ({})",
                                files[f].handle, error_text(out[f]));
                continue;
            }
            const Layout &layout = files[f].layout;
            for (std::uint32_t slot = 0; slot < layout.stripe_count; ++slot) {
                const std::uint32_t ds = layout::server_of_slot(layout, data_count(), slot);
                if (ds >= data_servers.size())
                    continue;
                Rpc &r = rpcs.emplace_back();
                r.server = data_servers[ds];
                r.req.body = proto::RemoveObjectRequest{files[f].handle};
                attach(r.req, caps[f]);
                file_of.push_back(f);
            }
        }
        std::vector<Rpc *> ptrs;
        ptrs.reserve(rpcs.size());
        for (Rpc &r : rpcs)
            ptrs.push_back(&r);
        // A few per server at a time, as a striped read's pipeline.
        co_await run(ptrs, 16);
        for (std::size_t i = 0; i < rpcs.size(); ++i) {
            const int rc = rpcs[i].result();
            if (rc == 0)
                continue;
            const Handle h = files[file_of[i]].handle;
            gossip::warning(Mask::client, "data object {:016x} on {} not removed ({})", h,
                            urls[rpcs[i].server], error_text(rc));
            if (out[file_of[i]] == 0)
                out[file_of[i]] = rc;
        }
        co_return out;
    }
    Task<int> remove_objects(Handle h, const Layout &layout)
    {
        const proto::Doomed one{h, layout};
        const std::vector<int> rc = co_await remove_objects(std::span(&one, 1));
        co_return rc.front();
    }

    // ---- capabilities (docs/protocol.md "Capabilities") ------------------
    // Options::capabilities = false is for benchmarks alone: on a cluster
    // not marked insecure_benchmark_only the capabilities go anyway, so
    // that a stray option cannot turn a real cluster's checks into
    // refusals (or, with require_capabilities = false, into none).
    [[nodiscard]] bool without_capabilities() const
    {
        return !options.capabilities && cluster.defaults.insecure_benchmark_only;
    }
    // Every data request takes its capability through here, so that none
    // goes without_capabilities().
    void attach(proto::Request &req, const proto::Capability &cap) const
    {
        if (!without_capabilities())
            req.cap = cap;
    }
    [[nodiscard]] const proto::Capability *cached_capability(Handle h, std::uint32_t rights) const
    {
        const auto it = capabilities.find({h, rights});
        if (it == capabilities.end() || Clock::now() >= it->second.renew_at ||
            (options.check_data_access && !(it->second.who == engine->current.cred)))
            return nullptr;
        return &it->second.cap;
    }
    void remember_capability(const proto::Capability &cap)
    {
        timespec ts{};
        ::clock_gettime(CLOCK_REALTIME, &ts);
        const std::int64_t now_ns = std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
        const std::int64_t left_ns = cap.expires_ns - now_ns;
        if (left_ns <= 0)
            return;
        if (capabilities.size() >= max_cached_capabilities)
            capabilities.clear();
        const CachedCapability entry{cap, Clock::now() + std::chrono::nanoseconds(left_ns * 2 / 3),
                                     engine->current.cred};
        // Under each right it has too: a creator's read-write one serves
        // reads and writes.
        capabilities[{cap.handle, cap.rights}] = entry;
        for (const std::uint32_t right : {proto::cap_read, proto::cap_write})
            if ((cap.rights & right) != 0)
                capabilities[{cap.handle, right}] = entry;
    }
    // A capability of `rights` over h's data objects: cached, or asked of
    // h's metadata server (naming this client's session when it holds h
    // open, so that the open's rights stand after a chmod).
    Task<int> capability(Handle h, std::uint32_t rights, proto::Capability &out)
    {
        if (without_capabilities()) {
            out = {};
            co_return 0;
        }
        if (const proto::Capability *c = cached_capability(h, rights)) {
            out = *c;
            co_return 0;
        }
        const std::uint64_t holder = opened.contains(h) ? client_id : 0;
        proto::CapabilityResponse r;
        proto::RequestBody request = proto::CapabilityRequest{h, rights, holder};
        if (const int rc = co_await meta_call(h, std::move(request), r); rc != 0)
            co_return rc;
        if (r.cap.handle != h || r.cap.rights != rights)
            co_return -EPROTO;
        remember_capability(r.cap);
        out = r.cap;
        co_return 0;
    }
    // fsync takes a read or a write capability: one cached, else write if
    // this client wrote the file, else read, else write.
    Task<int> fsync_capability(Handle h, proto::Capability &out)
    {
        for (const std::uint32_t rights : {proto::cap_write, proto::cap_read}) {
            if (const proto::Capability *c = cached_capability(h, rights)) {
                out = *c;
                co_return 0;
            }
        }
        const std::uint32_t first = written.contains(h) ? proto::cap_write : proto::cap_read;
        const int rc = co_await capability(h, first, out);
        if (rc != -EACCES)
            co_return rc;
        co_return co_await capability(h, first ^ (proto::cap_read | proto::cap_write), out);
    }
    // Destroy capabilities for many files at once (a close's hand-out):
    // per file 0 or why there is none.
    Task<std::vector<int>> destroy_capabilities(std::span<const Handle> handles,
                                                std::vector<proto::Capability> &out)
    {
        out.assign(handles.size(), proto::Capability{});
        std::vector<int> result(handles.size(), 0);
        if (without_capabilities())
            co_return result;
        std::vector<Rpc> rpcs(handles.size());
        std::vector<Rpc *> ptrs;
        for (std::size_t i = 0; i < handles.size(); ++i) {
            if (const proto::Capability *c = cached_capability(handles[i], proto::cap_destroy)) {
                out[i] = *c;
                continue;
            }
            if (const int rc = meta_server_of(handles[i], rpcs[i].server); rc != 0) {
                result[i] = rc;
                continue;
            }
            rpcs[i].req.body = proto::CapabilityRequest{handles[i], proto::cap_destroy, 0};
            ptrs.push_back(&rpcs[i]);
        }
        co_await run(ptrs, 16);
        for (std::size_t i = 0; i < handles.size(); ++i) {
            if (std::find(ptrs.begin(), ptrs.end(), &rpcs[i]) == ptrs.end())
                continue;
            if (const int rc = rpcs[i].result(); rc != 0) {
                result[i] = rc;
                continue;
            }
            const auto *r = std::get_if<proto::CapabilityResponse>(&rpcs[i].resp.body);
            if (r == nullptr || r->cap.handle != handles[i] ||
                r->cap.rights != proto::cap_destroy) {
                result[i] = -EPROTO;
                continue;
            }
            out[i] = r->cap;
        }
        co_return result;
    }

    // ---- striped I/O -----------------------------------------------------
    // `known`: the file's attributes, when the caller has just fetched them.
    Task<std::int64_t> io(Handle h, std::span<const Region> regions, std::byte *memory,
                          std::size_t memory_size, bool is_write, const Attr *known = nullptr)
    {
        Attr a;
        if (known != nullptr) {
            a = *known;
        } else if (const int rc = co_await getattr_no_size(h, a); rc != 0) {
            co_return rc;
        }
        proto::Capability cap;
        if (const int rc =
                co_await capability(h, is_write ? proto::cap_write : proto::cap_read, cap);
            rc != 0)
            co_return rc;
        std::vector<std::unique_ptr<Rpc>> rpcs;
        if (const int rc = io_requests(a, regions, memory, memory_size, is_write, cap, rpcs);
            rc != 0)
            co_return rc;
        std::vector<Rpc *> ptrs;
        ptrs.reserve(rpcs.size());
        for (auto &r : rpcs)
            ptrs.push_back(r.get());
        co_await run(ptrs, std::max(1U, options.pipeline_depth));
        for (const Rpc *r : ptrs) {
            if (const int rc = r->result(); rc != 0)
                co_return rc;
        }
        if (is_write) {
            // The file may have grown: refresh the size on next use.
            forget(h);
            written.insert(h);
        }
        std::uint64_t total = 0;
        for (const Region &r : regions)
            total += r.length;
        co_return static_cast<std::int64_t>(total);
    }

    // The data servers' requests of a striped read or write of `regions` of
    // file `a` from or into `memory`.
    int io_requests(const Attr &a, std::span<const Region> regions, std::byte *memory,
                    std::size_t memory_size, bool is_write, const proto::Capability &cap,
                    std::vector<std::unique_ptr<Rpc>> &rpcs)
    {
        const Handle h = a.handle;
        if (a.type != ObjectType::regular)
            return a.type == ObjectType::directory ? -EISDIR : -EINVAL;
        std::vector<layout::FileRegion> file_regions;
        file_regions.reserve(regions.size());
        std::uint64_t total = 0;
        for (const Region &r : regions) {
            file_regions.push_back({r.offset, r.length});
            total += r.length;
        }
        if (total > memory_size)
            return -EINVAL;
        std::vector<layout::SlotRegions> per_slot;
        if (const char *why = layout::map_regions(a.layout, data_count(), file_regions, per_slot);
            why != nullptr) {
            gossip::debug(Mask::client, "I/O on {:016x} refused: {}", h, why);
            return -EINVAL;
        }
        const std::uint32_t chunk = cluster.defaults.bulk_chunk;
        // Each chunk has a MAC in the request or its answer: at most
        // max_chunk_macs chunks per request.
        const std::uint64_t request_bytes = std::min<std::uint64_t>(
            options.request_bytes, std::uint64_t{chunk} * proto::max_chunk_macs);
        for (const layout::SlotRegions &slot : per_slot) {
            std::size_t i = 0;
            std::uint64_t region_done = 0; // bytes of regions[i] already given to a request
            while (i < slot.regions.size()) {
                auto r = std::make_unique<Rpc>();
                r->server = data_servers.at(slot.server);
                attach(r->req, cap);
                std::vector<proto::Region> req_regions;
                std::vector<std::pair<std::byte *, std::size_t>> segments;
                std::uint64_t bytes = 0;
                while (i < slot.regions.size() && req_regions.size() < max_io_regions &&
                       bytes < request_bytes) {
                    const layout::ObjectRegion &o = slot.regions[i];
                    const std::uint64_t n = std::min(o.length - region_done, request_bytes - bytes);
                    req_regions.push_back({o.object_offset + region_done, n});
                    segments.emplace_back(memory + o.memory_offset + region_done,
                                          static_cast<std::size_t>(n));
                    bytes += n;
                    region_done += n;
                    if (region_done == o.length) {
                        ++i;
                        region_done = 0;
                    }
                }
                if (is_write && bytes <= inline_write_limit) {
                    proto::Bytes data;
                    data.reserve(bytes);
                    for (const auto &[p, n] : segments)
                        data.insert(data.end(), p, p + n);
                    r->req.body = proto::WriteRequest{
                        h, std::move(req_regions), chunk, 0, std::move(data), {}, {}};
                } else {
                    r->pieces.reserve(segments.size());
                    for (const auto &[base, n] : segments)
                        r->pieces.push_back({base, n});
                    r->is_write = is_write;
                    r->chunk = chunk;
                    r->no_macs = !options.chunk_macs && cluster.defaults.insecure_benchmark_only;
                    r->rdma = rdma;
                    if (is_write) {
                        r->req.body =
                            proto::WriteRequest{h, std::move(req_regions), chunk, 0, {}, {}, {}};
                    } else {
                        r->req.body =
                            proto::ReadRequest{h, std::move(req_regions), chunk, 0, {}, {}};
                    }
                }
                rpcs.push_back(std::move(r));
            }
        }
        return 0;
    }

    // Runs one metadata request about `h` (routed to h's metadata server).
    template <typename Body> Task<int> meta_call(Handle h, proto::RequestBody body, Body &out)
    {
        std::size_t server = 0;
        if (const int rc = meta_server_of(h, server); rc != 0)
            co_return rc;
        co_return co_await call_body(server, std::move(body), out);
    }

    // ---- remote directories (docs/metadata.md "Remote directories") ------
    // Retires, then removes, a directory object that no entry names.
    Task<int> remove_dir_object(Handle h)
    {
        proto::RetireDirResponse retired;
        proto::RequestBody request = proto::RetireDirRequest{h, true};
        if (const int rc = co_await meta_call(h, std::move(request), retired); rc != 0)
            co_return rc;
        proto::RemoveDirObjectResponse removed;
        forget(h);
        proto::RequestBody request2 = proto::RemoveDirObjectRequest{h};
        co_return co_await meta_call(h, std::move(request2), removed);
    }

    // rmdir of (parent, name) naming another server's directory: retire it
    // there (so it stays empty), drop the name here, then remove it there.
    Task<int> rmdir_remote(Handle parent, std::string_view name)
    {
        proto::LookupResponse found;
        proto::RequestBody request = proto::LookupRequest{parent, std::string(name)};
        if (const int rc = co_await meta_call(parent, std::move(request), found); rc != 0)
            co_return rc;
        const Handle h = found.attr.handle;
        if (handle_server(h) == handle_server(parent))
            co_return -EXDEV;
        proto::RetireDirResponse retired;
        proto::RequestBody request2 = proto::RetireDirRequest{h, true};
        if (const int rc = co_await meta_call(h, std::move(request2), retired); rc != 0)
            co_return rc;
        proto::UnlinkDirResponse unlinked;
        proto::RequestBody request3 =
            proto::UnlinkDirRequest{parent, std::string(name), h, retired.attr.uid};
        if (const int rc = co_await meta_call(parent, std::move(request3), unlinked); rc != 0) {
            proto::RetireDirResponse back;
            proto::RequestBody request4 = proto::RetireDirRequest{h, false};
            if (const int undo = co_await meta_call(h, std::move(request4), back); undo != 0)
                gossip::warning(gossip::Mask::client, "rmdir: directory {:016x} stays retired: {}",
                                h, client::error_text(undo));
            co_return rc;
        }
        forget(parent);
        forget(h);
        proto::RemoveDirObjectResponse removed;
        proto::RequestBody request5 = proto::RemoveDirObjectRequest{h};
        if (const int rc = co_await meta_call(h, std::move(request5), removed); rc != 0)
            // The name is gone, which is what rmdir promised; the object
            // is an orphan for pvfs-fsck.
            gossip::warning(gossip::Mask::client, "rmdir: directory {:016x} left behind: {}", h,
                            client::error_text(rc));
        co_return 0;
    }
};

} // namespace pvfs::client
