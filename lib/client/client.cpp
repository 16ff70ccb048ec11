// libpvfs (include/pvfs/client.hpp).
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
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>

#include "bmi/bmi.hpp"
#include "engine.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/layout.hpp"

namespace pvfs::client {

namespace {

using gossip::Mask;
using Clock = std::chrono::steady_clock;

// Writes at most this large travel inside the request.
constexpr std::size_t inline_write_limit = std::size_t{32} * 1024U;
// Symlinks followed while resolving one path (as Linux's MAXSYMLINKS).
constexpr int max_symlinks = 40;
// Entries asked per readdir request when walking a whole directory.
constexpr std::uint32_t readdir_page = 512;

// The API's flags and masks reach the servers as they are.
static_assert(set_mode == proto::set_mode && set_uid == proto::set_uid &&
              set_gid == proto::set_gid && set_atime == proto::set_atime &&
              set_mtime == proto::set_mtime && set_atime_now == proto::set_atime_now &&
              set_mtime_now == proto::set_mtime_now);
static_assert(access_read == proto::access_read && access_write == proto::access_write &&
              access_exec == proto::access_exec);
static_assert(rename_noreplace == proto::rename_noreplace &&
              rename_exchange == proto::rename_exchange);
static_assert(xattr_create == proto::xattr_create && xattr_replace == proto::xattr_replace);
static_assert(role_metadata == proto::role_metadata && role_data == proto::role_data);

// A list_handles or list_objects answer.
template <typename Wire> HandlePage handle_page(Wire &&wire)
{
    return {std::move(wire.handles), wire.next_cookie, wire.eof};
}

Credentials process_credentials()
{
    Credentials c;
    c.uid = ::geteuid();
    c.gid = ::getegid();
    std::array<gid_t, 256> groups{};
    const int n = ::getgroups(static_cast<int>(groups.size()), groups.data());
    for (int i = 0; i < n && c.groups.size() < max_groups; ++i) {
        const auto g = static_cast<std::uint32_t>(groups.at(static_cast<std::size_t>(i)));
        if (g != c.gid)
            c.groups.push_back(g);
    }
    return c;
}

} // namespace

using detail::Rpc;

struct Client::Impl {
    Options options;
    config::Cluster cluster;
    std::optional<proto::Key> key;
    std::chrono::milliseconds timeout{60000};
    std::shared_ptr<Loop> loop;
    Loop::Impl *engine = nullptr;
    std::vector<std::string> urls; // per server: the address used
    std::vector<std::size_t> meta_servers;
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
        }
        return engine->run(rpcs, depth, timeout);
    }

    // One request, one response.
    Task<int> call(std::size_t server, proto::RequestBody body, proto::Response &resp)
    {
        Rpc r;
        r.server = server;
        r.req.body = std::move(body);
        Rpc *p = &r;
        co_await run(std::span(&p, 1));
        const int rc = r.result();
        if (rc == 0)
            resp = std::move(r.resp);
        co_return rc;
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

    // Removes the data objects of a file whose last link went.
    Task<void> remove_objects(Handle h, const Layout &layout)
    {
        std::vector<Rpc> rpcs(layout.stripe_count);
        std::vector<Rpc *> ptrs;
        for (std::uint32_t slot = 0; slot < layout.stripe_count; ++slot) {
            const std::uint32_t ds = layout::server_of_slot(layout, data_count(), slot);
            if (ds >= data_servers.size())
                continue;
            rpcs[slot].server = data_servers[ds];
            rpcs[slot].req.body = proto::RemoveObjectRequest{h};
            ptrs.push_back(&rpcs[slot]);
        }
        co_await run(ptrs);
        for (const Rpc *r : ptrs) {
            if (r->result() != 0)
                gossip::warning(Mask::client,
                                "data object {:016x} on {} not removed ({}); pvfs-fsck will "
                                "find it",
                                h, urls[r->server], error_text(r->result()));
        }
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
        std::vector<std::unique_ptr<Rpc>> rpcs;
        if (const int rc = io_requests(a, regions, memory, memory_size, is_write, rpcs); rc != 0)
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
                    std::size_t memory_size, bool is_write, std::vector<std::unique_ptr<Rpc>> &rpcs)
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
        for (const layout::SlotRegions &slot : per_slot) {
            std::size_t i = 0;
            std::uint64_t region_done = 0; // bytes of regions[i] already given to a request
            while (i < slot.regions.size()) {
                auto r = std::make_unique<Rpc>();
                r->server = data_servers.at(slot.server);
                std::vector<proto::Region> req_regions;
                std::vector<std::pair<std::byte *, std::size_t>> segments;
                std::uint64_t bytes = 0;
                while (i < slot.regions.size() && req_regions.size() < max_io_regions &&
                       bytes < options.request_bytes) {
                    const layout::ObjectRegion &o = slot.regions[i];
                    const std::uint64_t n =
                        std::min(o.length - region_done, options.request_bytes - bytes);
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
                    r->req.body = proto::WriteRequest{h, std::move(req_regions), chunk,
                                                      0, std::move(data),        {}};
                } else {
                    r->pieces.reserve(segments.size());
                    for (const auto &[base, n] : segments)
                        r->pieces.push_back({base, n});
                    r->is_write = is_write;
                    r->chunk = chunk;
                    r->rdma = rdma;
                    if (is_write) {
                        r->req.body =
                            proto::WriteRequest{h, std::move(req_regions), chunk, 0, {}, {}};
                    } else {
                        r->req.body = proto::ReadRequest{h, std::move(req_regions), chunk, 0, {}};
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

// ---- connecting ----------------------------------------------------------

std::unique_ptr<Client> Client::connect(const Options &options, std::string &error)
{
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    impl->loop = options.loop;
    if (!impl->loop) {
        impl->loop = Loop::create(error);
        if (!impl->loop)
            return nullptr;
        impl->loop->set_context(
            options.use_process_credentials ? process_credentials() : options.credentials, 0);
    }
    impl->engine = &impl->loop->impl();

    const bool is_url = options.target.find("://") != std::string::npos;
    std::string key_file = options.key_file;
    if (is_url) {
        const config::FsUrl url = config::parse_fs_url(options.target);
        if (!url.ok()) {
            error = options.target + ": " + url.error;
            return nullptr;
        }
        if (key_file.empty()) {
            const char *env = std::getenv("PVFS_KEY_FILE"); // NOLINT(concurrency-mt-unsafe)
            key_file = env != nullptr ? env : "/etc/pvfs/pvfs.key";
        }
        std::string key_error;
        impl->key = proto::Key::load(key_file, key_error);
        if (!impl->key) {
            error = key_error;
            return nullptr;
        }
        impl->timeout = options.request_timeout.count() > 0 ? options.request_timeout
                                                            : std::chrono::milliseconds(30000);
        impl->set_servers({url.address});
        proto::GetConfigResponse got;
        if (const int rc = impl->engine->wait(impl->call_body(0, proto::GetConfigRequest{}, got));
            rc != 0) {
            error = url.address + ": cannot get the config: " + error_text(rc);
            return nullptr;
        }
        config::Result parsed = config::parse(got.config_text, url.address + " get_config", "");
        if (!parsed.ok()) {
            error = parsed.error;
            return nullptr;
        }
        if (parsed.cluster.fs_name != url.fs_name) {
            error = url.address + " serves file system '" + parsed.cluster.fs_name + "', not '" +
                    url.fs_name + "'";
            return nullptr;
        }
        impl->cluster = std::move(parsed.cluster);
    } else {
        config::Result loaded = config::load_file(options.target);
        if (!loaded.ok()) {
            error = loaded.error;
            return nullptr;
        }
        impl->cluster = std::move(loaded.cluster);
        if (key_file.empty())
            key_file = impl->cluster.key_file;
        std::string key_error;
        impl->key = proto::Key::load(key_file, key_error);
        if (!impl->key) {
            error = key_error;
            return nullptr;
        }
    }
    const config::Cluster &c = impl->cluster;
    impl->timeout = options.request_timeout.count() > 0
                        ? options.request_timeout
                        : std::chrono::milliseconds(c.defaults.request_timeout_ms);
    static_cast<void>(
        impl->engine->bmi->set_info(bmi::Info::idle_timeout_ms, c.defaults.idle_timeout_ms));
    std::string method = options.method;
    if (method.empty() && is_url)
        method = options.target.substr(0, options.target.find("://"));
    if (method.empty()) {
        const char *env = std::getenv("PVFS_METHOD"); // NOLINT(concurrency-mt-unsafe)
        method = env != nullptr && *env != '\0' ? env : "tcp";
    }
    if (method != "tcp" && method != "ib") {
        error = "unknown network method '" + method + "'; use tcp or ib";
        return nullptr;
    }
    const std::string prefix = method + "://";
    std::vector<std::string> urls;
    for (const config::Server &s : c.servers) {
        std::string chosen;
        for (const std::string &a : s.addresses) {
            if (a.starts_with(prefix)) {
                chosen = a;
                break;
            }
        }
        if (chosen.empty()) {
            error = "server " + s.name + " has no " + prefix + " address this client can use";
            return nullptr;
        }
        urls.push_back(chosen);
    }
    impl->set_servers(urls);
    const char *rdma_env = std::getenv("PVFS_RDMA"); // NOLINT(concurrency-mt-unsafe)
    impl->rdma = method == "ib" && options.server_rdma &&
                 (rdma_env == nullptr || std::string_view(rdma_env) != "0");
    impl->meta_servers = c.metadata_servers();
    impl->data_servers = c.data_servers();
    return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Client::~Client() = default;

const config::Cluster &Client::cluster() const noexcept
{
    return impl_->cluster;
}

void Client::set_credentials(const Credentials &cred)
{
    impl_->engine->current.cred = cred;
}

void Client::forget_cache()
{
    impl_->attrs.clear();
    impl_->names.clear();
    impl_->layouts.clear();
    std::erase_if(impl_->access_cache, [](const auto &e) { return !e.second.pinned; });
}

// ---- names and attributes --------------------------------------------------

Task<int> Client::co_lookup(Handle parent, std::string_view name, Attr &out)
{
    if (!valid_name(name))
        co_return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    Impl &m = *impl_;
    const auto it = m.names.find(Impl::name_key(parent, name));
    if (it != m.names.end() && it->second.expires > Clock::now())
        co_return co_await m.getattr(it->second.handle, out);
    proto::LookupResponse r;
    proto::RequestBody request = proto::LookupRequest{parent, std::string(name)};
    if (const int rc = co_await m.meta_call(parent, std::move(request), r); rc != 0)
        co_return rc;
    if (handle_server(r.attr.handle) != handle_server(parent)) {
        // A remote directory: the parent's server knows only its handle.
        if (const int rc = co_await m.getattr(r.attr.handle, out, false); rc != 0)
            co_return rc;
        m.remember_name(parent, name, out.handle);
        co_return 0;
    }
    if (const int rc = co_await m.complete_attr(r.attr); rc != 0)
        co_return rc;
    out = r.attr;
    m.remember(out);
    m.remember_name(parent, name, out.handle);
    co_return 0;
}

Task<int> Client::co_resolve(std::string_view path, Attr &out, bool follow)
{
    if (path.empty() || path.front() != '/')
        co_return -EINVAL;
    std::vector<Handle> stack{root_handle};
    std::string rest(path);
    int links = 0;
    Attr cur;
    if (const int rc = co_await co_getattr(root_handle, cur); rc != 0)
        co_return rc;
    std::size_t pos = 0;
    while (true) {
        while (pos < rest.size() && rest[pos] == '/')
            ++pos;
        if (pos >= rest.size())
            break;
        const std::size_t end = std::min(rest.find('/', pos), rest.size());
        const std::string name = rest.substr(pos, end - pos);
        pos = end;
        if (cur.type != ObjectType::directory)
            co_return -ENOTDIR;
        if (name == ".")
            continue;
        if (name == "..") {
            if (stack.size() > 1)
                stack.pop_back();
            if (const int rc = co_await co_getattr(stack.back(), cur); rc != 0)
                co_return rc;
            continue;
        }
        Attr next;
        if (const int rc = co_await co_lookup(stack.back(), name, next); rc != 0)
            co_return rc;
        const bool last = rest.find_first_not_of('/', pos) == std::string::npos;
        if (next.type == ObjectType::symlink && (!last || follow)) {
            if (++links > max_symlinks)
                co_return -ELOOP;
            std::string target;
            if (const int rc = co_await co_readlink(next.handle, target); rc != 0)
                co_return rc;
            if (target.empty())
                co_return -ENOENT;
            target += '/';
            target += rest.substr(pos);
            rest = std::move(target);
            pos = 0;
            if (rest.front() == '/') {
                stack.assign(1, root_handle);
            }
            if (const int rc = co_await co_getattr(stack.back(), cur); rc != 0)
                co_return rc;
            continue;
        }
        stack.push_back(next.handle);
        cur = next;
    }
    out = cur;
    co_return 0;
}

Task<int> Client::co_getattr(Handle handle, Attr &out)
{
    co_return co_await impl_->getattr(handle, out);
}

Task<int> Client::co_access(Handle handle, std::uint32_t mask)
{
    proto::AccessResponse r;
    proto::RequestBody request = proto::AccessRequest{handle, mask};
    co_return co_await impl_->meta_call(handle, std::move(request), r);
}

Task<int> Client::co_setattr(Handle handle, const SetAttr &change, Attr &out)
{
    Impl &m = *impl_;
    std::uint32_t mask = change.mask;
    m.forget_access(handle);
    if (change.truncate) {
        // The data servers would truncate for anyone: ask first.
        if (const int rc = co_await m.check_access(handle, access_write); rc != 0)
            co_return rc;
        Attr a;
        if (const int rc = co_await m.getattr(handle, a, false); rc != 0)
            co_return rc;
        if (a.type != ObjectType::regular)
            co_return a.type == ObjectType::directory ? -EISDIR : -EINVAL;
        std::vector<Rpc> rpcs(a.layout.stripe_count);
        std::vector<Rpc *> ptrs;
        for (std::uint32_t slot = 0; slot < a.layout.stripe_count; ++slot) {
            const auto size = layout::object_size(a.layout, m.data_count(), slot, change.size);
            if (!size)
                co_return -EFBIG;
            rpcs[slot].server =
                m.data_servers.at(layout::server_of_slot(a.layout, m.data_count(), slot));
            rpcs[slot].req.body = proto::TruncateObjectRequest{handle, *size};
            ptrs.push_back(&rpcs[slot]);
        }
        co_await m.run(ptrs);
        for (const Rpc *r : ptrs) {
            if (const int rc = r->result(); rc != 0)
                co_return rc;
        }
        // A truncation changes mtime and ctime and clears setuid/setgid, as
        // a write does: set_ctime alone says "data changed"
        // (docs/protocol.md).  Other changes go in a second request.
        proto::SetattrResponse written;
        m.forget(handle);
        proto::RequestBody request =
            proto::SetattrRequest{handle, proto::set_ctime, 0, 0, 0, {}, {}};
        if (const int rc = co_await m.meta_call(handle, std::move(request), written); rc != 0)
            co_return rc;
        m.written.erase(handle);
        if (mask == 0) {
            if (const int rc = co_await m.complete_attr(written.attr); rc != 0)
                co_return rc;
            out = written.attr;
            m.remember(out);
            co_return 0;
        }
    }
    m.forget(handle);
    proto::SetattrResponse r;
    if (mask != 0) {
        const proto::SetattrRequest req{handle,      mask & ~proto::set_ctime,
                                        change.mode, change.uid,
                                        change.gid,  change.atime,
                                        change.mtime};
        if (const int rc = co_await m.meta_call(handle, req, r); rc != 0)
            co_return rc;
        if (const int rc = co_await m.complete_attr(r.attr); rc != 0)
            co_return rc;
        out = r.attr;
        m.remember(out);
        co_return 0;
    }
    co_return co_await m.getattr(handle, out, false);
}

// ---- namespace ---------------------------------------------------------------

Task<int> Client::co_create(Handle parent, std::string_view name, std::uint32_t mode,
                            bool exclusive, const Layout &layout, Attr &out, bool *created)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        co_return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::CreateResponse r;
    m.forget_name(parent, name);
    proto::RequestBody request =
        proto::CreateRequest{parent, std::string(name), mode, exclusive, layout};
    if (const int rc = co_await m.meta_call(parent, std::move(request), r); rc != 0)
        co_return rc;
    // A file this request created has no data yet: its size is 0 without
    // asking each data server.
    if (r.created && r.attr.type == ObjectType::regular) {
        if (layout::validate(r.attr.layout, m.data_count()) != nullptr)
            co_return -EIO;
        r.attr.size = 0;
    } else if (const int rc = co_await m.complete_attr(r.attr); rc != 0) {
        co_return rc;
    }
    out = r.attr;
    if (created != nullptr)
        *created = r.created;
    if (r.created && out.type == ObjectType::regular)
        m.pin_access(out.handle);
    m.remember(out);
    m.remember_name(parent, name, out.handle);
    co_return 0;
}

Task<int> Client::co_mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        co_return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::MkdirResponse r;
    m.forget_name(parent, name);
    proto::RequestBody request = proto::MkdirRequest{parent, std::string(name), mode};
    if (const int rc = co_await m.meta_call(parent, std::move(request), r); rc != 0)
        co_return rc;
    out = r.attr;
    m.remember(out);
    m.remember_name(parent, name, out.handle);
    co_return 0;
}

Task<int> Client::co_mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out,
                           std::uint32_t meta_index)
{
    Impl &m = *impl_;
    if (meta_index >= m.meta_servers.size())
        co_return -EINVAL;
    if (meta_index == handle_server(parent))
        co_return co_await co_mkdir(parent, name, mode, out);
    if (!valid_name(name))
        co_return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    m.forget_name(parent, name);
    // Fresh attributes: the new directory's gid and setgid follow them.
    Attr dir;
    if (const int rc = co_await m.getattr(parent, dir, false); rc != 0)
        co_return rc;
    if (dir.type != ObjectType::directory)
        co_return -ENOTDIR;
    proto::MkdirObjectResponse made;
    proto::RequestBody request = proto::MkdirObjectRequest{dir, mode};
    if (const int rc = co_await m.call_body(m.meta_servers[meta_index], std::move(request), made);
        rc != 0)
        co_return rc;
    proto::LinkDirResponse linked;
    proto::RequestBody request2 =
        proto::LinkDirRequest{parent, std::string(name), made.attr.handle};
    if (const int rc = co_await m.meta_call(parent, std::move(request2), linked); rc != 0) {
        // Nothing names the new directory: take it away again.  If that
        // fails too, pvfs-fsck finds it.
        if (const int undo = co_await m.remove_dir_object(made.attr.handle); undo != 0)
            gossip::warning(gossip::Mask::client,
                            "remote mkdir: directory {:016x} left without a name: {}",
                            made.attr.handle, error_text(undo));
        co_return rc;
    }
    m.forget(parent);
    out = made.attr;
    m.remember(out);
    m.remember_name(parent, name, out.handle);
    co_return 0;
}

Task<int> Client::co_mknod(Handle parent, std::string_view name, ObjectType type,
                           std::uint32_t mode, std::uint64_t rdev, Attr &out)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        co_return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::MknodResponse r;
    m.forget_name(parent, name);
    proto::RequestBody request = proto::MknodRequest{parent, std::string(name), type, mode, rdev};
    if (const int rc = co_await m.meta_call(parent, std::move(request), r); rc != 0)
        co_return rc;
    out = r.attr;
    m.remember(out);
    co_return 0;
}

Task<int> Client::co_symlink(Handle parent, std::string_view name, std::string_view target,
                             Attr &out)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        co_return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    if (target.empty() || target.size() > max_path)
        co_return target.empty() ? -ENOENT : -ENAMETOOLONG;
    proto::SymlinkResponse r;
    m.forget_name(parent, name);
    proto::RequestBody request =
        proto::SymlinkRequest{parent, std::string(name), std::string(target)};
    if (const int rc = co_await m.meta_call(parent, std::move(request), r); rc != 0)
        co_return rc;
    out = r.attr;
    m.remember(out);
    co_return 0;
}

Task<int> Client::co_readlink(Handle handle, std::string &target)
{
    proto::ReadlinkResponse r;
    proto::RequestBody request = proto::ReadlinkRequest{handle};
    if (const int rc = co_await impl_->meta_call(handle, std::move(request), r); rc != 0)
        co_return rc;
    target = std::move(r.target);
    co_return 0;
}

Task<int> Client::co_link(Handle handle, Handle new_parent, std::string_view new_name, Attr &out)
{
    Impl &m = *impl_;
    if (!valid_name(new_name))
        co_return new_name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::LinkResponse r;
    m.forget_name(new_parent, new_name);
    m.forget(handle);
    // The new entry lives on the parent's metadata server.
    proto::RequestBody request = proto::LinkRequest{handle, new_parent, std::string(new_name)};
    if (const int rc = co_await m.meta_call(new_parent, std::move(request), r); rc != 0)
        co_return rc;
    if (const int rc = co_await m.complete_attr(r.attr); rc != 0)
        co_return rc;
    out = r.attr;
    co_return 0;
}

Task<int> Client::co_unlink(Handle parent, std::string_view name)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        co_return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::RemoveResponse r;
    m.forget_name(parent, name);
    proto::RequestBody request = proto::RemoveRequest{parent, std::string(name)};
    if (const int rc = co_await m.meta_call(parent, std::move(request), r); rc != 0)
        co_return rc;
    if (r.handle == no_handle) // a dangling entry: only the name went
        co_return 0;
    m.forget(r.handle);
    m.layouts.erase(r.handle);
    if (r.type == ObjectType::regular && r.nlink_after == 0)
        co_await m.remove_objects(r.handle, r.layout);
    co_return 0;
}

Task<int> Client::co_rmdir(Handle parent, std::string_view name)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        co_return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::RmdirResponse r;
    m.forget_name(parent, name);
    proto::RequestBody request = proto::RmdirRequest{parent, std::string(name)};
    const int rc = co_await m.meta_call(parent, std::move(request), r);
    // EXDEV: the entry names a directory of another metadata server.
    co_return rc == -EXDEV ? co_await m.rmdir_remote(parent, name) : rc;
}

Task<int> Client::co_rename(Handle old_parent, std::string_view old_name, Handle new_parent,
                            std::string_view new_name, std::uint32_t flags)
{
    Impl &m = *impl_;
    if (!valid_name(old_name) || !valid_name(new_name))
        co_return old_name.size() > max_name || new_name.size() > max_name ? -ENAMETOOLONG
                                                                           : -EINVAL;
    proto::RenameResponse r;
    m.forget_name(old_parent, old_name);
    m.forget_name(new_parent, new_name);
    proto::RequestBody request = proto::RenameRequest{old_parent, std::string(old_name), new_parent,
                                                      std::string(new_name), flags};
    if (const int rc = co_await m.meta_call(old_parent, std::move(request), r); rc != 0)
        co_return rc;
    if (r.replaced != no_handle) {
        m.forget(r.replaced);
        if (r.replaced_type == ObjectType::regular && r.replaced_nlink_after == 0)
            co_await m.remove_objects(r.replaced, r.layout);
    }
    co_return 0;
}

Task<int> Client::co_readdir(Handle dir, std::uint64_t cookie, std::uint32_t max_entries,
                             std::vector<DirEntry> &entries, bool &eof)
{
    const std::uint32_t n =
        std::clamp<std::uint32_t>(max_entries == 0 ? readdir_page : max_entries, 1,
                                  static_cast<std::uint32_t>(proto::max_readdir_entries));
    proto::ReaddirResponse r;
    proto::RequestBody request = proto::ReaddirRequest{dir, cookie, n};
    if (const int rc = co_await impl_->meta_call(dir, std::move(request), r); rc != 0)
        co_return rc;
    entries.clear();
    entries.reserve(r.entries.size());
    for (proto::DirEntry &e : r.entries)
        entries.push_back({std::move(e.name), e.handle, e.type, e.cookie});
    eof = r.eof;
    co_return 0;
}

// ---- data --------------------------------------------------------------------

Task<std::int64_t> Client::co_read(Handle handle, std::uint64_t offset, std::span<std::byte> buffer)
{
    Impl &m = *impl_;
    Attr a;
    // The size from the attribute cache, taken before anything else may
    // come from the layout cache, whose sizes are old.
    const auto cached = m.attrs.find(handle);
    const bool size_known = cached != m.attrs.end() && cached->second.expires > Clock::now();
    if (size_known)
        a = cached->second.attr;
    else if (const int rc = co_await m.getattr_no_size(handle, a); rc != 0)
        co_return rc;
    if (a.type != ObjectType::regular)
        co_return a.type == ObjectType::directory ? -EISDIR : -EINVAL;
    if (const int rc = co_await m.check_access(handle, access_read); rc != 0)
        co_return rc;
    if (buffer.empty() || (size_known && offset >= a.size))
        co_return 0;
    if (size_known) {
        const std::uint64_t n = std::min<std::uint64_t>(buffer.size(), a.size - offset);
        const Region region{offset, n};
        co_return co_await m.io(handle, std::span(&region, 1), buffer.data(),
                                static_cast<std::size_t>(n), false, &a);
    }
    // The size is not known: ask the data servers for it in the same round
    // trip as the data (past the end they read as zeros), then cut the
    // answer at the end of the file.
    if (layout::validate(a.layout, m.data_count()) != nullptr)
        co_return -EIO;
    std::vector<Rpc> sizes(a.layout.stripe_count);
    if (const int rc = m.size_requests(handle, a.layout, sizes); rc != 0)
        co_return rc;
    const Region region{offset, buffer.size()};
    std::vector<std::unique_ptr<Rpc>> reads;
    if (const int rc =
            m.io_requests(a, std::span(&region, 1), buffer.data(), buffer.size(), false, reads);
        rc != 0)
        co_return rc;
    // The sizes first: a server's queue sends them before its reads.
    std::vector<Rpc *> ptrs;
    ptrs.reserve(sizes.size() + reads.size());
    for (Rpc &r : sizes)
        ptrs.push_back(&r);
    for (auto &r : reads)
        ptrs.push_back(r.get());
    co_await m.run(ptrs, std::max(1U, m.options.pipeline_depth) + 1U);
    if (const int rc = m.size_of(a.layout, sizes, a.size); rc != 0)
        co_return rc;
    for (const auto &r : reads) {
        if (const int rc = r->result(); rc != 0)
            co_return rc;
    }
    m.remember(a);
    if (offset >= a.size)
        co_return 0;
    co_return static_cast<std::int64_t>(std::min<std::uint64_t>(buffer.size(), a.size - offset));
}

Task<std::int64_t> Client::co_write(Handle handle, std::uint64_t offset,
                                    std::span<const std::byte> data)
{
    if (data.empty())
        co_return 0;
    if (const int rc = co_await impl_->check_access(handle, access_write); rc != 0)
        co_return rc;
    const Region region{offset, data.size()};
    // A write only reads the memory.
    auto *memory =
        const_cast<std::byte *>(data.data()); // NOLINT(cppcoreguidelines-pro-type-const-cast)
    co_return co_await impl_->io(handle, std::span(&region, 1), memory, data.size(), true);
}

Task<std::int64_t> Client::co_read_list(Handle handle, std::span<const Region> regions,
                                        std::span<std::byte> memory)
{
    if (regions.size() > max_io_regions * std::size_t{64})
        co_return -EINVAL;
    if (const int rc = co_await impl_->check_access(handle, access_read); rc != 0)
        co_return rc;
    co_return co_await impl_->io(handle, regions, memory.data(), memory.size(), false);
}

Task<std::int64_t> Client::co_write_list(Handle handle, std::span<const Region> regions,
                                         std::span<const std::byte> memory)
{
    if (regions.size() > max_io_regions * std::size_t{64})
        co_return -EINVAL;
    if (const int rc = co_await impl_->check_access(handle, access_write); rc != 0)
        co_return rc;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): a write only reads the memory
    co_return co_await impl_->io(handle, regions, const_cast<std::byte *>(memory.data()),
                                 memory.size(), true);
}

Task<int> Client::co_fsync(Handle handle)
{
    Impl &m = *impl_;
    Attr a;
    if (const int rc = co_await m.getattr_no_size(handle, a); rc != 0)
        co_return rc;
    if (a.type != ObjectType::regular)
        co_return 0;
    std::vector<Rpc> rpcs(a.layout.stripe_count);
    std::vector<Rpc *> ptrs;
    for (std::uint32_t slot = 0; slot < a.layout.stripe_count; ++slot) {
        rpcs[slot].server =
            m.data_servers.at(layout::server_of_slot(a.layout, m.data_count(), slot));
        rpcs[slot].req.body = proto::FsyncRequest{handle};
        ptrs.push_back(&rpcs[slot]);
    }
    co_await m.run(ptrs);
    for (const Rpc *r : ptrs) {
        // An object never written does not exist: nothing to make durable.
        if (const int rc = r->result(); rc != 0 && rc != -ENOENT)
            co_return rc;
    }
    if (m.written.erase(handle) != 0) {
        proto::SetattrResponse r;
        m.forget(handle);
        proto::RequestBody request =
            proto::SetattrRequest{handle, proto::set_ctime, 0, 0, 0, {}, {}};
        co_return co_await m.meta_call(handle, std::move(request), r);
    }
    co_return 0;
}

// ---- the rest --------------------------------------------------------------------

Task<int> Client::co_statfs(StatFs &out)
{
    out = StatFs{};
    Impl &m = *impl_;
    std::vector<Rpc> rpcs(m.cluster.servers.size());
    std::vector<Rpc *> ptrs;
    for (std::size_t i = 0; i < rpcs.size(); ++i) {
        rpcs[i].server = i;
        rpcs[i].req.body = proto::StatfsRequest{};
        ptrs.push_back(&rpcs[i]);
    }
    co_await m.run(ptrs);
    for (std::size_t i = 0; i < rpcs.size(); ++i) {
        if (const int rc = rpcs[i].result(); rc != 0)
            co_return rc;
        const auto *r = std::get_if<proto::StatfsResponse>(&rpcs[i].resp.body);
        if (r == nullptr)
            co_return -EPROTO;
        const config::Server &s = m.cluster.servers[i];
        if (s.data) {
            out.total_bytes += r->total_bytes;
            out.free_bytes += r->free_bytes;
            out.avail_bytes += r->avail_bytes;
        }
        if (s.metadata) {
            out.total_objects += r->total_objects;
            out.free_objects += r->free_objects;
        }
    }
    co_return 0;
}

namespace {

// The layout as an extended attribute (docs/protocol.md "pvfs.layout"):
// computed from layout_get/layout_set, never stored as an xattr.
constexpr std::string_view layout_xattr = "pvfs.layout";

} // namespace

Task<int> Client::co_xattr_get(Handle handle, std::string_view name, std::vector<std::byte> &value)
{
    if (name == layout_xattr) {
        Layout l;
        if (const int rc = co_await co_layout_get(handle, l); rc != 0)
            co_return rc == -EINVAL ? -ENODATA : rc;
        const std::string text = layout::to_text(l);
        const auto *bytes = reinterpret_cast<const std::byte *>(text.data());
        value.assign(bytes, bytes + text.size());
        co_return 0;
    }
    proto::XattrGetResponse r;
    proto::RequestBody request = proto::XattrGetRequest{handle, std::string(name)};
    if (const int rc = co_await impl_->meta_call(handle, std::move(request), r); rc != 0)
        co_return rc;
    value = std::move(r.value);
    co_return 0;
}

Task<int> Client::co_xattr_set(Handle handle, std::string_view name,
                               std::span<const std::byte> value, std::uint32_t flags)
{
    if (name == layout_xattr) {
        // Every file and directory has a layout: "create only" cannot succeed.
        if ((flags & XATTR_CREATE) != 0)
            co_return -EEXIST;
        Layout current;
        if (const int rc = co_await co_layout_get(handle, current); rc != 0)
            co_return rc;
        const std::string_view text(reinterpret_cast<const char *>(value.data()), value.size());
        Layout wanted;
        if (layout::from_text(text, current, wanted) != nullptr)
            co_return -EINVAL;
        co_return co_await co_layout_set(handle, wanted);
    }
    proto::XattrSetResponse r;
    impl_->forget(handle);
    proto::RequestBody request = proto::XattrSetRequest{
        handle, std::string(name), proto::Bytes(value.begin(), value.end()), flags};
    co_return co_await impl_->meta_call(handle, std::move(request), r);
}

Task<int> Client::co_xattr_list(Handle handle, std::vector<std::string> &names)
{
    proto::XattrListResponse r;
    proto::RequestBody request = proto::XattrListRequest{handle};
    if (const int rc = co_await impl_->meta_call(handle, std::move(request), r); rc != 0)
        co_return rc;
    names = std::move(r.names);
    Attr a;
    if (const int rc = co_await impl_->getattr(handle, a); rc != 0)
        co_return rc;
    if (a.type == ObjectType::regular || a.type == ObjectType::directory)
        names.emplace_back(layout_xattr);
    co_return 0;
}

Task<int> Client::co_xattr_remove(Handle handle, std::string_view name)
{
    if (name == layout_xattr)
        co_return -EPERM; // a layout can be changed, not removed

    proto::XattrRemoveResponse r;
    impl_->forget(handle);
    proto::RequestBody request = proto::XattrRemoveRequest{handle, std::string(name)};
    co_return co_await impl_->meta_call(handle, std::move(request), r);
}

Task<int> Client::co_layout_get(Handle handle, Layout &out)
{
    proto::LayoutGetResponse r;
    proto::RequestBody request = proto::LayoutGetRequest{handle};
    if (const int rc = co_await impl_->meta_call(handle, std::move(request), r); rc != 0)
        co_return rc;
    out = r.layout;
    co_return 0;
}

Task<int> Client::co_layout_set(Handle handle, const Layout &layout)
{
    Impl &m = *impl_;
    if (layout::validate(layout, m.data_count()) != nullptr)
        co_return -EINVAL;
    // A file's layout may change only while it has no data.
    Attr a;
    if (const int rc = co_await m.getattr(handle, a, false); rc != 0)
        co_return rc;
    if (a.type == ObjectType::regular && a.size != 0)
        co_return -EBUSY;
    proto::LayoutSetResponse r;
    m.forget(handle);
    m.layouts.erase(handle);
    proto::RequestBody request = proto::LayoutSetRequest{handle, layout};
    co_return co_await m.meta_call(handle, std::move(request), r);
}

Task<int> Client::co_list_handles(std::uint32_t meta_index, std::uint64_t cookie, std::uint32_t max,
                                  HandlePage &out)
{
    Impl &m = *impl_;
    if (meta_index >= m.meta_servers.size())
        co_return -EINVAL;
    proto::ListHandlesResponse r;
    proto::RequestBody request = proto::ListHandlesRequest{cookie, max};
    if (const int rc = co_await m.call_body(m.meta_servers[meta_index], std::move(request), r);
        rc != 0)
        co_return rc;
    out = handle_page(std::move(r));
    co_return 0;
}

Task<int> Client::co_list_objects(std::uint32_t data_index, std::uint64_t cookie, std::uint32_t max,
                                  HandlePage &out)
{
    Impl &m = *impl_;
    if (data_index >= m.data_servers.size())
        co_return -EINVAL;
    proto::ListObjectsResponse r;
    proto::RequestBody request = proto::ListObjectsRequest{cookie, max};
    if (const int rc = co_await m.call_body(m.data_servers[data_index], std::move(request), r);
        rc != 0)
        co_return rc;
    out = handle_page(std::move(r));
    co_return 0;
}

Task<int> Client::co_remove_orphan_dir(Handle handle)
{
    co_return co_await impl_->remove_dir_object(handle);
}

Task<int> Client::co_remove_object(std::uint32_t data_index, Handle handle)
{
    Impl &m = *impl_;
    if (data_index >= m.data_servers.size())
        co_return -EINVAL;
    proto::RemoveObjectResponse r;
    proto::RequestBody request = proto::RemoveObjectRequest{handle};
    co_return co_await m.call_body(m.data_servers[data_index], std::move(request), r);
}

Task<std::vector<ServerStatus>> Client::co_status_all()
{
    Impl &m = *impl_;
    const std::size_t n = m.cluster.servers.size();
    std::vector<Rpc> rpcs(2 * n);
    std::vector<Rpc *> ptrs;
    for (std::size_t i = 0; i < n; ++i) {
        rpcs[2 * i].server = i;
        rpcs[2 * i].req.body = proto::StatusRequest{};
        rpcs[2 * i + 1].server = i;
        rpcs[2 * i + 1].req.body = proto::StatfsRequest{};
        ptrs.push_back(&rpcs[2 * i]);
        ptrs.push_back(&rpcs[2 * i + 1]);
    }
    co_await m.run(ptrs);
    std::vector<ServerStatus> out(n);
    for (std::size_t i = 0; i < n; ++i) {
        ServerStatus &s = out[i];
        s.name = m.cluster.servers[i].name;
        s.address = m.urls[i];
        const Rpc &st = rpcs[2 * i];
        const Rpc &fs = rpcs[2 * i + 1];
        s.error = st.result() != 0 ? st.result() : fs.result();
        if (s.error != 0)
            continue;
        const auto *status = std::get_if<proto::StatusResponse>(&st.resp.body);
        const auto *statfs = std::get_if<proto::StatfsResponse>(&fs.resp.body);
        if (status == nullptr || statfs == nullptr) {
            s.error = -EPROTO;
            continue;
        }
        s.status = {.server_name = status->server_name,
                    .version = status->version,
                    .config_hash = status->config_hash,
                    .roles = status->roles,
                    .uptime_ns = status->uptime_ns,
                    .bulk_message_bytes = status->bulk_message_bytes,
                    .bulk_rdma_bytes = status->bulk_rdma_bytes};
        s.round_trip = st.ended - st.started;
        s.total_bytes = statfs->total_bytes;
        s.free_bytes = statfs->free_bytes;
        s.avail_bytes = statfs->avail_bytes;
        s.total_objects = statfs->total_objects;
        s.free_objects = statfs->free_objects;
    }
    co_return out;
}

// ---- the synchronous API ---------------------------------------------------

int Client::lookup(Handle parent, std::string_view name, Attr &out)
{
    return impl_->engine->wait(co_lookup(parent, name, out));
}

int Client::resolve(std::string_view path, Attr &out, bool follow)
{
    return impl_->engine->wait(co_resolve(path, out, follow));
}

int Client::getattr(Handle handle, Attr &out)
{
    return impl_->engine->wait(co_getattr(handle, out));
}

int Client::access(Handle handle, std::uint32_t mask)
{
    return impl_->engine->wait(co_access(handle, mask));
}

int Client::setattr(Handle handle, const SetAttr &change, Attr &out)
{
    return impl_->engine->wait(co_setattr(handle, change, out));
}

int Client::create(Handle parent, std::string_view name, std::uint32_t mode, bool exclusive,
                   const Layout &layout, Attr &out, bool *created)
{
    return impl_->engine->wait(co_create(parent, name, mode, exclusive, layout, out, created));
}

int Client::mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out)
{
    return impl_->engine->wait(co_mkdir(parent, name, mode, out));
}

int Client::mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out,
                  std::uint32_t meta_index)
{
    return impl_->engine->wait(co_mkdir(parent, name, mode, out, meta_index));
}

int Client::mknod(Handle parent, std::string_view name, ObjectType type, std::uint32_t mode,
                  std::uint64_t rdev, Attr &out)
{
    return impl_->engine->wait(co_mknod(parent, name, type, mode, rdev, out));
}

int Client::symlink(Handle parent, std::string_view name, std::string_view target, Attr &out)
{
    return impl_->engine->wait(co_symlink(parent, name, target, out));
}

int Client::readlink(Handle handle, std::string &target)
{
    return impl_->engine->wait(co_readlink(handle, target));
}

int Client::link(Handle handle, Handle new_parent, std::string_view new_name, Attr &out)
{
    return impl_->engine->wait(co_link(handle, new_parent, new_name, out));
}

int Client::unlink(Handle parent, std::string_view name)
{
    return impl_->engine->wait(co_unlink(parent, name));
}

int Client::rmdir(Handle parent, std::string_view name)
{
    return impl_->engine->wait(co_rmdir(parent, name));
}

int Client::rename(Handle old_parent, std::string_view old_name, Handle new_parent,
                   std::string_view new_name, std::uint32_t flags)
{
    return impl_->engine->wait(co_rename(old_parent, old_name, new_parent, new_name, flags));
}

int Client::readdir(Handle dir, std::uint64_t cookie, std::uint32_t max_entries,
                    std::vector<DirEntry> &entries, bool &eof)
{
    return impl_->engine->wait(co_readdir(dir, cookie, max_entries, entries, eof));
}

std::int64_t Client::read(Handle handle, std::uint64_t offset, std::span<std::byte> buffer)
{
    return impl_->engine->wait(co_read(handle, offset, buffer));
}

std::int64_t Client::write(Handle handle, std::uint64_t offset, std::span<const std::byte> data)
{
    return impl_->engine->wait(co_write(handle, offset, data));
}

std::int64_t Client::read_list(Handle handle, std::span<const Region> regions,
                               std::span<std::byte> memory)
{
    return impl_->engine->wait(co_read_list(handle, regions, memory));
}

std::int64_t Client::write_list(Handle handle, std::span<const Region> regions,
                                std::span<const std::byte> memory)
{
    return impl_->engine->wait(co_write_list(handle, regions, memory));
}

int Client::fsync(Handle handle)
{
    return impl_->engine->wait(co_fsync(handle));
}

int Client::statfs(StatFs &out)
{
    return impl_->engine->wait(co_statfs(out));
}

int Client::xattr_get(Handle handle, std::string_view name, std::vector<std::byte> &value)
{
    return impl_->engine->wait(co_xattr_get(handle, name, value));
}

int Client::xattr_set(Handle handle, std::string_view name, std::span<const std::byte> value,
                      std::uint32_t flags)
{
    return impl_->engine->wait(co_xattr_set(handle, name, value, flags));
}

int Client::xattr_list(Handle handle, std::vector<std::string> &names)
{
    return impl_->engine->wait(co_xattr_list(handle, names));
}

int Client::xattr_remove(Handle handle, std::string_view name)
{
    return impl_->engine->wait(co_xattr_remove(handle, name));
}

int Client::layout_get(Handle handle, Layout &out)
{
    return impl_->engine->wait(co_layout_get(handle, out));
}

int Client::layout_set(Handle handle, const Layout &layout)
{
    return impl_->engine->wait(co_layout_set(handle, layout));
}

int Client::list_handles(std::uint32_t meta_index, std::uint64_t cookie, std::uint32_t max,
                         HandlePage &out)
{
    return impl_->engine->wait(co_list_handles(meta_index, cookie, max, out));
}

int Client::list_objects(std::uint32_t data_index, std::uint64_t cookie, std::uint32_t max,
                         HandlePage &out)
{
    return impl_->engine->wait(co_list_objects(data_index, cookie, max, out));
}

int Client::remove_orphan_dir(Handle handle)
{
    return impl_->engine->wait(co_remove_orphan_dir(handle));
}

int Client::remove_object(std::uint32_t data_index, Handle handle)
{
    return impl_->engine->wait(co_remove_object(data_index, handle));
}

std::vector<ServerStatus> Client::status_all()
{
    return impl_->engine->wait(co_status_all());
}

std::string error_text(std::int64_t negative_errno)
{
    const auto e = static_cast<int>(-negative_errno);
    std::array<char, 128> buf{};
    return ::strerror_r(e, buf.data(), buf.size());
}

} // namespace pvfs::client
