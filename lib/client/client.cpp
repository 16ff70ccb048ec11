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
#include "pvfs/gossip.hpp"
#include "pvfs/layout.hpp"

namespace pvfs::client {

namespace {

using gossip::Mask;
using Clock = std::chrono::steady_clock;

// Bulk data moves on the request's tag with this bit (docs/server.md).
constexpr bmi::Tag data_tag_bit = bmi::Tag{1} << 30U;
// Responses that carry little: attributes, statuses, empty bodies.
constexpr std::size_t small_response = std::size_t{16} * 1024U;
// Writes at most this large travel inside the request.
constexpr std::size_t inline_write_limit = std::size_t{32} * 1024U;
// Symlinks followed while resolving one path (as Linux's MAXSYMLINKS).
constexpr int max_symlinks = 40;
// Entries asked per readdir request when walking a whole directory.
constexpr std::uint32_t readdir_page = 512;

std::int64_t realtime_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::uint64_t random_u64()
{
    std::uint64_t v = 0;
    while (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    }
    return v;
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

// How many bytes the response to `body` may need.
std::size_t response_capacity(const proto::RequestBody &body)
{
    if (std::holds_alternative<proto::GetConfigRequest>(body))
        return proto::max_config_text + 4096;
    if (const auto *r = std::get_if<proto::ReaddirRequest>(&body))
        return 4096 + std::size_t{r->max_entries} * (max_name + 64);
    if (std::holds_alternative<proto::XattrGetRequest>(body))
        return max_xattr_value + 4096;
    if (std::holds_alternative<proto::XattrListRequest>(body))
        return proto::max_xattr_names * (max_xattr_name + 8) + 4096;
    if (std::holds_alternative<proto::ListObjectsRequest>(body) ||
        std::holds_alternative<proto::ListHandlesRequest>(body))
        return proto::max_list_handles * 8 + 4096;
    if (std::holds_alternative<proto::ObjectSizesRequest>(body))
        return proto::max_object_sizes * 8 + 4096;
    if (std::holds_alternative<proto::ReadlinkRequest>(body))
        return max_path + 4096;
    return small_response;
}

} // namespace

// One request to one server, with its bulk data if it has any.
struct Rpc {
    std::size_t server = 0; // index into cluster.servers
    proto::Request req;
    std::vector<std::byte> out;
    std::vector<std::byte> in;
    bmi::Tag tag = 0;
    // Bulk chunks, each a list of memory pieces (the request's stream).
    std::vector<std::vector<bmi::ConstBuffer>> send_chunks;
    std::vector<std::vector<bmi::MutableBuffer>> recv_chunks;

    std::vector<bmi::OpId> ops; // posted, not yet completed
    bmi::OpId recv_op = bmi::no_op;
    bool response_arrived = false;
    std::size_t response_size = 0;
    int error = 0; // a negative errno of the transport or the decoding
    bool finished = false;
    proto::Response resp;
    Clock::time_point started{};
    Clock::time_point ended{};

    // 0, or the negative errno of the transport or of the server.
    [[nodiscard]] int result() const noexcept
    {
        if (error != 0)
            return error;
        return resp.status != 0 ? -resp.status : 0;
    }
};

struct Client::Impl {
    Options options;
    config::Cluster cluster;
    std::optional<proto::Key> key;
    Credentials cred;
    std::chrono::milliseconds timeout{60000};
    std::unique_ptr<bmi::Bmi> bmi;
    bmi::ContextId ctx = 0;
    std::vector<std::string> urls; // per server: the address used
    std::vector<bmi::Addr> addrs;  // per server, looked up on first use
    std::vector<std::size_t> meta_servers;
    std::vector<std::size_t> data_servers;
    std::uint64_t session = random_u64() | 1U;
    std::uint64_t seq = 0;
    std::uint64_t request_id = 0;
    bmi::Tag next_tag = 1;

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
    // Files this client wrote since it last told their metadata server
    // (mtime, ctime, setuid/setgid clearing happen at fsync).
    std::unordered_set<Handle> written;
    // What the metadata server said this caller may do with a file
    // (proto::access_* bits), until `expires`; `pinned`: the file this
    // client created, read- and writable for the client's life like the fd
    // of a creating open.
    struct CachedAccess {
        std::uint32_t granted = 0;
        Clock::time_point expires;
        bool pinned = false;
    };
    std::unordered_map<Handle, CachedAccess> access_cache;
    static constexpr std::size_t max_cached_access = 65536;

    // ---- transport ----------------------------------------------------
    bmi::Addr addr_of(std::size_t server, int &error)
    {
        if (addrs[server] == bmi::no_addr) {
            int rc = 0;
            addrs[server] = bmi->addr_lookup(urls[server], &rc);
            if (addrs[server] == bmi::no_addr) {
                error = rc != 0 ? rc : -EHOSTUNREACH;
                return bmi::no_addr;
            }
        }
        return addrs[server];
    }

    void set_servers(const std::vector<std::string> &server_urls)
    {
        urls = server_urls;
        addrs.assign(urls.size(), bmi::no_addr);
    }

    bmi::Tag take_tag()
    {
        const bmi::Tag t = next_tag;
        next_tag = next_tag + 1 >= data_tag_bit ? 1 : next_tag + 1;
        return t;
    }

    static void track(Rpc &r, const bmi::Post &p, bool is_response)
    {
        if (!p.ok()) {
            if (r.error == 0)
                r.error = p.error;
            return;
        }
        if (p.completed) {
            if (is_response) {
                r.response_arrived = true;
                r.response_size = p.actual_size;
            }
            return;
        }
        r.ops.push_back(p.op);
        if (is_response)
            r.recv_op = p.op;
    }

    void start(Rpc &r)
    {
        r.req.request_id = ++request_id;
        r.req.session = session;
        r.req.seq = ++seq;
        r.req.time_ns = realtime_ns();
        r.req.cred = cred;
        r.tag = take_tag();
        r.started = Clock::now();
        proto::encode(r.req, *key, r.out);
        r.in.resize(response_capacity(r.req.body));
        int error = 0;
        const bmi::Addr to = addr_of(r.server, error);
        if (to == bmi::no_addr) {
            r.error = error;
            return;
        }
        track(r, bmi->post_recv(to, r.in.data(), r.in.size(), r.tag, &r, ctx), true);
        if (r.error != 0)
            return;
        track(r, bmi->post_sendunexpected(to, r.out.data(), r.out.size(), r.tag, &r, ctx), false);
        const bmi::Tag dtag = r.tag | data_tag_bit;
        for (const auto &chunk : r.send_chunks) {
            if (r.error != 0)
                break;
            track(r, bmi->post_send_list(to, chunk, dtag, &r, ctx), false);
        }
        for (const auto &chunk : r.recv_chunks) {
            if (r.error != 0)
                break;
            track(r, bmi->post_recv_list(to, chunk, dtag, &r, ctx), false);
        }
        if (r.error != 0)
            cancel_all(r);
    }

    void cancel_all(const Rpc &r) const
    {
        for (const bmi::OpId op : r.ops)
            bmi->cancel(op);
    }

    void on_completion(Rpc &r, const bmi::Completion &c)
    {
        std::erase(r.ops, c.op);
        if (c.op == r.recv_op) {
            r.recv_op = bmi::no_op;
            if (c.error != 0) {
                if (r.error == 0)
                    r.error = c.error;
            } else {
                r.response_arrived = true;
                r.response_size = c.actual_size;
                decode(r);
                // A failed request's data will never move: stop waiting.
                if (r.result() != 0)
                    cancel_all(r);
            }
        } else if (c.error != 0 && c.error != -ECANCELED && r.error == 0) {
            r.error = c.error;
            cancel_all(r);
        }
    }

    void decode(Rpc &r)
    {
        const proto::DecodeResult d =
            proto::decode(std::span(r.in.data(), r.response_size), *key, r.resp);
        if (!d) {
            gossip::warning(Mask::client, "bad response from {}: {}", urls[r.server], d.message());
            r.error = -EPROTO;
        } else if (!proto::answers(r.resp, r.req)) {
            gossip::warning(Mask::client, "a response from {} does not answer its request",
                            urls[r.server]);
            r.error = -EPROTO;
        }
    }

    // Runs the requests, at most `depth` in flight per server, until each
    // has its response or the request timeout passes.
    void run(std::span<Rpc *const> rpcs, unsigned depth = 1U << 30U)
    {
        std::unordered_map<std::size_t, std::vector<Rpc *>> queues;
        std::unordered_map<std::size_t, unsigned> in_flight;
        // Queues are popped from the back: fill them back to front.
        for (std::size_t i = rpcs.size(); i-- > 0;)
            queues[rpcs[i]->server].push_back(rpcs[i]);
        std::size_t unfinished = rpcs.size();
        auto settle = [&](Rpc &r) {
            if (r.finished || !r.ops.empty())
                return;
            if (!r.response_arrived && r.error == 0)
                return;
            r.finished = true;
            r.ended = Clock::now();
            --unfinished;
            --in_flight[r.server];
        };
        auto launch = [&](std::size_t server) {
            auto &q = queues[server];
            while (!q.empty() && in_flight[server] < depth) {
                Rpc *r = q.back();
                q.pop_back();
                ++in_flight[server];
                start(*r);
                if (r->response_arrived && r->error == 0 && !r->finished)
                    decode(*r);
                settle(*r);
            }
        };
        for (auto &[server, q] : queues)
            launch(server);
        const Clock::time_point deadline = Clock::now() + timeout;
        std::array<bmi::Completion, 64> done{};
        while (unfinished > 0) {
            const auto now = Clock::now();
            if (now >= deadline)
                break;
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
            const std::size_t n =
                bmi->testcontext(ctx, done, static_cast<int>(std::min<long long>(left + 1, 1000)));
            for (std::size_t i = 0; i < n; ++i) {
                auto *r = static_cast<Rpc *>(done.at(i).user_ptr);
                if (r == nullptr)
                    continue;
                on_completion(*r, done.at(i));
                settle(*r);
                if (r->finished)
                    launch(r->server);
            }
        }
        if (unfinished == 0)
            return;
        // Out of time: whatever has not answered fails with ETIMEDOUT.
        for (Rpc *r : rpcs) {
            if (r->finished)
                continue;
            if (r->error == 0)
                r->error = -ETIMEDOUT;
            cancel_all(*r);
        }
        const Clock::time_point drain_until = Clock::now() + std::chrono::seconds(5);
        while (Clock::now() < drain_until) {
            bool pending = false;
            for (Rpc *r : rpcs)
                pending = pending || !r->ops.empty();
            if (!pending)
                break;
            const std::size_t n = bmi->testcontext(ctx, done, 10);
            for (std::size_t i = 0; i < n; ++i) {
                if (auto *r = static_cast<Rpc *>(done.at(i).user_ptr))
                    std::erase(r->ops, done.at(i).op);
            }
        }
        for (Rpc *r : rpcs) {
            if (!r->ops.empty())
                gossip::error(Mask::client, "{} operations to {} did not end after cancel",
                              r->ops.size(), urls[r->server]);
            r->finished = true;
        }
    }

    // One request, one response.
    int call(std::size_t server, proto::RequestBody body, proto::Response &resp)
    {
        Rpc r;
        r.server = server;
        r.req.body = std::move(body);
        Rpc *p = &r;
        run(std::span(&p, 1));
        const int rc = r.result();
        if (rc == 0)
            resp = std::move(r.resp);
        return rc;
    }

    template <typename Body> int call_body(std::size_t server, proto::RequestBody body, Body &out)
    {
        proto::Response resp;
        const int rc = call(server, std::move(body), resp);
        if (rc != 0)
            return rc;
        Body *b = std::get_if<Body>(&resp.body);
        if (b == nullptr)
            return -EPROTO;
        out = std::move(*b);
        return 0;
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
        if (options.attr_timeout.count() > 0)
            attrs[a.handle] = CachedAttr{a, Clock::now() + options.attr_timeout};
    }

    void remember_name(Handle parent, std::string_view name, Handle h)
    {
        if (options.attr_timeout.count() > 0)
            names[name_key(parent, name)] = CachedName{h, Clock::now() + options.attr_timeout};
    }

    void forget(Handle h) { attrs.erase(h); }

    // ---- rights over file data ----------------------------------------
    int check_access(Handle h, std::uint32_t mask)
    {
        if (!options.check_data_access)
            return 0;
        const auto now = Clock::now();
        const auto it = access_cache.find(h);
        if (it != access_cache.end() && (it->second.granted & mask) == mask &&
            (it->second.pinned || now < it->second.expires))
            return 0;
        proto::AccessResponse r;
        if (const int rc = meta_call(h, proto::AccessRequest{h, mask}, r); rc != 0)
            return rc;
        if (options.attr_timeout.count() <= 0)
            return 0;
        if (access_cache.size() >= max_cached_access)
            std::erase_if(access_cache, [](const auto &e) { return !e.second.pinned; });
        CachedAccess &e = access_cache[h];
        if (!e.pinned && now >= e.expires)
            e.granted = 0;
        e.granted |= mask;
        e.expires = now + options.attr_timeout;
        return 0;
    }
    void pin_access(Handle h)
    {
        if (access_cache.size() >= max_cached_access)
            std::erase_if(access_cache, [](const auto &e) { return !e.second.pinned; });
        access_cache[h] = CachedAccess{proto::access_read | proto::access_write, {}, true};
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
    int file_size(Handle h, const Layout &layout, std::uint64_t &size)
    {
        std::vector<Rpc> rpcs(layout.stripe_count);
        std::vector<Rpc *> ptrs;
        for (std::uint32_t slot = 0; slot < layout.stripe_count; ++slot) {
            const std::uint32_t ds = layout::server_of_slot(layout, data_count(), slot);
            if (ds >= data_servers.size())
                return -EIO;
            rpcs[slot].server = data_servers[ds];
            rpcs[slot].req.body = proto::ObjectSizesRequest{{h}};
            ptrs.push_back(&rpcs[slot]);
        }
        run(ptrs);
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

    int getattr(Handle h, Attr &out, bool use_cache = true)
    {
        if (use_cache) {
            const auto it = attrs.find(h);
            if (it != attrs.end() && it->second.expires > Clock::now()) {
                out = it->second.attr;
                return 0;
            }
        }
        std::size_t server = 0;
        if (const int rc = meta_server_of(h, server); rc != 0)
            return rc;
        proto::GetattrResponse r;
        if (const int rc = call_body(server, proto::GetattrRequest{h}, r); rc != 0)
            return rc;
        if (const int rc = complete_attr(r.attr); rc != 0)
            return rc;
        out = r.attr;
        remember(out);
        return 0;
    }

    // Fills a regular file's size from its data servers.
    int complete_attr(Attr &a)
    {
        if (a.type != ObjectType::regular)
            return 0;
        if (layout::validate(a.layout, data_count()) != nullptr)
            return -EIO;
        return file_size(a.handle, a.layout, a.size);
    }

    // Removes the data objects of a file whose last link went.
    void remove_objects(Handle h, const Layout &layout)
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
        run(ptrs);
        for (const Rpc *r : ptrs) {
            if (r->result() != 0)
                gossip::warning(Mask::client,
                                "data object {:016x} on {} not removed ({}); pvfs-fsck will "
                                "find it",
                                h, urls[r->server], error_text(r->result()));
        }
    }

    // ---- striped I/O -----------------------------------------------------
    std::int64_t io(Handle h, std::span<const proto::Region> regions, std::byte *memory,
                    std::size_t memory_size, bool is_write)
    {
        Attr a;
        if (const int rc = getattr(h, a); rc != 0)
            return rc;
        if (a.type != ObjectType::regular)
            return a.type == ObjectType::directory ? -EISDIR : -EINVAL;
        std::vector<layout::FileRegion> file_regions;
        file_regions.reserve(regions.size());
        std::uint64_t total = 0;
        for (const proto::Region &r : regions) {
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
        std::vector<std::unique_ptr<Rpc>> rpcs;
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
                    r->req.body =
                        proto::WriteRequest{h, std::move(req_regions), chunk, 0, std::move(data)};
                } else {
                    cut_chunks(*r, segments, chunk, is_write);
                    if (is_write) {
                        r->req.body = proto::WriteRequest{h, std::move(req_regions), chunk, 0, {}};
                    } else {
                        r->req.body = proto::ReadRequest{h, std::move(req_regions), chunk, 0};
                    }
                }
                rpcs.push_back(std::move(r));
            }
        }
        std::vector<Rpc *> ptrs;
        ptrs.reserve(rpcs.size());
        for (auto &r : rpcs)
            ptrs.push_back(r.get());
        run(ptrs, std::max(1U, options.pipeline_depth));
        for (const Rpc *r : ptrs) {
            if (const int rc = r->result(); rc != 0)
                return rc;
        }
        if (is_write) {
            // The file may have grown: refresh the size on next use.
            forget(h);
            written.insert(h);
        }
        return static_cast<std::int64_t>(total);
    }

    // Cuts a request's memory segments into chunk-sized lists of pieces.
    static void cut_chunks(Rpc &r, const std::vector<std::pair<std::byte *, std::size_t>> &segments,
                           std::uint32_t chunk, bool is_write)
    {
        std::vector<bmi::ConstBuffer> send;
        std::vector<bmi::MutableBuffer> recv;
        std::size_t room = chunk;
        for (const auto &[base, size] : segments) {
            std::size_t off = 0;
            while (off < size) {
                const std::size_t n = std::min(room, size - off);
                if (is_write) {
                    send.push_back({base + off, n});
                } else {
                    recv.push_back({base + off, n});
                }
                off += n;
                room -= n;
                if (room == 0) {
                    if (is_write) {
                        r.send_chunks.push_back(std::move(send));
                        send.clear();
                    } else {
                        r.recv_chunks.push_back(std::move(recv));
                        recv.clear();
                    }
                    room = chunk;
                }
            }
        }
        if (!send.empty())
            r.send_chunks.push_back(std::move(send));
        if (!recv.empty())
            r.recv_chunks.push_back(std::move(recv));
    }

    // Runs one metadata request about `h` (routed to h's metadata server).
    template <typename Body> int meta_call(Handle h, proto::RequestBody body, Body &out)
    {
        std::size_t server = 0;
        if (const int rc = meta_server_of(h, server); rc != 0)
            return rc;
        return call_body(server, std::move(body), out);
    }

    // ---- remote directories (docs/metadata.md "Remote directories") ------
    // Retires, then removes, a directory object that no entry names.
    int remove_dir_object(Handle h)
    {
        proto::RetireDirResponse retired;
        if (const int rc = meta_call(h, proto::RetireDirRequest{h, true}, retired); rc != 0)
            return rc;
        proto::RemoveDirObjectResponse removed;
        forget(h);
        return meta_call(h, proto::RemoveDirObjectRequest{h}, removed);
    }

    // rmdir of (parent, name) naming another server's directory: retire it
    // there (so it stays empty), drop the name here, then remove it there.
    int rmdir_remote(Handle parent, std::string_view name)
    {
        proto::LookupResponse found;
        if (const int rc =
                meta_call(parent, proto::LookupRequest{parent, std::string(name)}, found);
            rc != 0)
            return rc;
        const Handle h = found.attr.handle;
        if (handle_server(h) == handle_server(parent))
            return -EXDEV;
        proto::RetireDirResponse retired;
        if (const int rc = meta_call(h, proto::RetireDirRequest{h, true}, retired); rc != 0)
            return rc;
        proto::UnlinkDirResponse unlinked;
        if (const int rc = meta_call(
                parent, proto::UnlinkDirRequest{parent, std::string(name), h, retired.attr.uid},
                unlinked);
            rc != 0) {
            proto::RetireDirResponse back;
            if (const int undo = meta_call(h, proto::RetireDirRequest{h, false}, back); undo != 0)
                gossip::warning(gossip::Mask::client, "rmdir: directory {:016x} stays retired: {}",
                                h, client::error_text(undo));
            return rc;
        }
        forget(parent);
        forget(h);
        proto::RemoveDirObjectResponse removed;
        if (const int rc = meta_call(h, proto::RemoveDirObjectRequest{h}, removed); rc != 0)
            // The name is gone, which is what rmdir promised; the object
            // is an orphan for pvfs-fsck.
            gossip::warning(gossip::Mask::client, "rmdir: directory {:016x} left behind: {}", h,
                            client::error_text(rc));
        return 0;
    }
};

// ---- connecting ----------------------------------------------------------

std::unique_ptr<Client> Client::connect(const Options &options, std::string &error)
{
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    impl->cred = options.use_process_credentials ? process_credentials() : options.credentials;
    try {
        bmi::Options bo;
        bo.role = bmi::Role::client;
        impl->bmi = std::make_unique<bmi::Bmi>(bo);
    } catch (const std::exception &e) {
        error = std::string("cannot start BMI: ") + e.what();
        return nullptr;
    }
    impl->ctx = impl->bmi->open_context();
    // Requests carry small writes and xattr values inline: as large as the
    // servers accept, above BMI's default unexpected-message limit.
    if (const int rc = impl->bmi->set_info(bmi::Info::unexpected_limit, proto::max_request_bytes);
        rc != 0) {
        error = "cannot set BMI's message limit: " + error_text(rc);
        return nullptr;
    }

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
        if (const int rc = impl->call_body(0, proto::GetConfigRequest{}, got); rc != 0) {
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
    static_cast<void>(impl->bmi->set_info(bmi::Info::idle_timeout_ms, c.defaults.idle_timeout_ms));
    std::vector<std::string> urls;
    for (const config::Server &s : c.servers) {
        std::string chosen;
        for (const std::string &a : s.addresses) {
            if (a.starts_with("tcp://")) {
                chosen = a;
                break;
            }
        }
        if (chosen.empty()) {
            error = "server " + s.name + " has no tcp:// address this client can use";
            return nullptr;
        }
        urls.push_back(chosen);
    }
    impl->set_servers(urls);
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
    if (impl_->cred == cred)
        return;
    impl_->cred = cred;
    // Access answers were the previous caller's.
    std::erase_if(impl_->access_cache, [](const auto &e) { return !e.second.pinned; });
}

void Client::forget_cache()
{
    impl_->attrs.clear();
    impl_->names.clear();
    std::erase_if(impl_->access_cache, [](const auto &e) { return !e.second.pinned; });
}

// ---- names and attributes --------------------------------------------------

int Client::lookup(Handle parent, std::string_view name, Attr &out)
{
    if (!valid_name(name))
        return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    Impl &m = *impl_;
    const auto it = m.names.find(Impl::name_key(parent, name));
    if (it != m.names.end() && it->second.expires > Clock::now())
        return m.getattr(it->second.handle, out);
    proto::LookupResponse r;
    if (const int rc = m.meta_call(parent, proto::LookupRequest{parent, std::string(name)}, r);
        rc != 0)
        return rc;
    if (handle_server(r.attr.handle) != handle_server(parent)) {
        // A remote directory: the parent's server knows only its handle.
        if (const int rc = m.getattr(r.attr.handle, out, false); rc != 0)
            return rc;
        m.remember_name(parent, name, out.handle);
        return 0;
    }
    if (const int rc = m.complete_attr(r.attr); rc != 0)
        return rc;
    out = r.attr;
    m.remember(out);
    m.remember_name(parent, name, out.handle);
    return 0;
}

int Client::resolve(std::string_view path, Attr &out, bool follow)
{
    if (path.empty() || path.front() != '/')
        return -EINVAL;
    std::vector<Handle> stack{root_handle};
    std::string rest(path);
    int links = 0;
    Attr cur;
    if (const int rc = getattr(root_handle, cur); rc != 0)
        return rc;
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
            return -ENOTDIR;
        if (name == ".")
            continue;
        if (name == "..") {
            if (stack.size() > 1)
                stack.pop_back();
            if (const int rc = getattr(stack.back(), cur); rc != 0)
                return rc;
            continue;
        }
        Attr next;
        if (const int rc = lookup(stack.back(), name, next); rc != 0)
            return rc;
        const bool last = rest.find_first_not_of('/', pos) == std::string::npos;
        if (next.type == ObjectType::symlink && (!last || follow)) {
            if (++links > max_symlinks)
                return -ELOOP;
            std::string target;
            if (const int rc = readlink(next.handle, target); rc != 0)
                return rc;
            if (target.empty())
                return -ENOENT;
            target += '/';
            target += rest.substr(pos);
            rest = std::move(target);
            pos = 0;
            if (rest.front() == '/') {
                stack.assign(1, root_handle);
            }
            if (const int rc = getattr(stack.back(), cur); rc != 0)
                return rc;
            continue;
        }
        stack.push_back(next.handle);
        cur = next;
    }
    out = cur;
    return 0;
}

int Client::getattr(Handle handle, Attr &out)
{
    return impl_->getattr(handle, out);
}

int Client::access(Handle handle, std::uint32_t mask)
{
    proto::AccessResponse r;
    return impl_->meta_call(handle, proto::AccessRequest{handle, mask}, r);
}

int Client::setattr(Handle handle, const SetAttr &change, Attr &out)
{
    Impl &m = *impl_;
    std::uint32_t mask = change.mask;
    m.forget_access(handle);
    if (change.truncate) {
        // The data servers would truncate for anyone: ask first.
        if (const int rc = m.check_access(handle, proto::access_write); rc != 0)
            return rc;
        Attr a;
        if (const int rc = m.getattr(handle, a, false); rc != 0)
            return rc;
        if (a.type != ObjectType::regular)
            return a.type == ObjectType::directory ? -EISDIR : -EINVAL;
        std::vector<Rpc> rpcs(a.layout.stripe_count);
        std::vector<Rpc *> ptrs;
        for (std::uint32_t slot = 0; slot < a.layout.stripe_count; ++slot) {
            const auto size = layout::object_size(a.layout, m.data_count(), slot, change.size);
            if (!size)
                return -EFBIG;
            rpcs[slot].server =
                m.data_servers.at(layout::server_of_slot(a.layout, m.data_count(), slot));
            rpcs[slot].req.body = proto::TruncateObjectRequest{handle, *size};
            ptrs.push_back(&rpcs[slot]);
        }
        m.run(ptrs);
        for (const Rpc *r : ptrs) {
            if (const int rc = r->result(); rc != 0)
                return rc;
        }
        // A truncation changes mtime and ctime and clears setuid/setgid, as
        // a write does: set_ctime alone says "data changed"
        // (docs/protocol.md).  Other changes go in a second request.
        proto::SetattrResponse written;
        m.forget(handle);
        if (const int rc = m.meta_call(
                handle, proto::SetattrRequest{handle, proto::set_ctime, 0, 0, 0, {}, {}}, written);
            rc != 0)
            return rc;
        m.written.erase(handle);
        if (mask == 0) {
            if (const int rc = m.complete_attr(written.attr); rc != 0)
                return rc;
            out = written.attr;
            m.remember(out);
            return 0;
        }
    }
    m.forget(handle);
    proto::SetattrResponse r;
    if (mask != 0) {
        const proto::SetattrRequest req{handle,      mask & ~proto::set_ctime,
                                        change.mode, change.uid,
                                        change.gid,  change.atime,
                                        change.mtime};
        if (const int rc = m.meta_call(handle, req, r); rc != 0)
            return rc;
        if (const int rc = m.complete_attr(r.attr); rc != 0)
            return rc;
        out = r.attr;
        m.remember(out);
        return 0;
    }
    return m.getattr(handle, out, false);
}

// ---- namespace ---------------------------------------------------------------

int Client::create(Handle parent, std::string_view name, std::uint32_t mode, bool exclusive,
                   const Layout &layout, Attr &out, bool *created)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::CreateResponse r;
    m.forget_name(parent, name);
    if (const int rc = m.meta_call(
            parent, proto::CreateRequest{parent, std::string(name), mode, exclusive, layout}, r);
        rc != 0)
        return rc;
    // A file this request created has no data yet: its size is 0 without
    // asking each data server.
    if (r.created && r.attr.type == ObjectType::regular) {
        if (layout::validate(r.attr.layout, m.data_count()) != nullptr)
            return -EIO;
        r.attr.size = 0;
    } else if (const int rc = m.complete_attr(r.attr); rc != 0) {
        return rc;
    }
    out = r.attr;
    if (created != nullptr)
        *created = r.created;
    if (r.created && out.type == ObjectType::regular)
        m.pin_access(out.handle);
    m.remember(out);
    m.remember_name(parent, name, out.handle);
    return 0;
}

int Client::mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::MkdirResponse r;
    m.forget_name(parent, name);
    if (const int rc = m.meta_call(parent, proto::MkdirRequest{parent, std::string(name), mode}, r);
        rc != 0)
        return rc;
    out = r.attr;
    m.remember(out);
    m.remember_name(parent, name, out.handle);
    return 0;
}

int Client::mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out,
                  std::uint32_t meta_index)
{
    Impl &m = *impl_;
    if (meta_index >= m.meta_servers.size())
        return -EINVAL;
    if (meta_index == handle_server(parent))
        return mkdir(parent, name, mode, out);
    if (!valid_name(name))
        return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    m.forget_name(parent, name);
    // Fresh attributes: the new directory's gid and setgid follow them.
    Attr dir;
    if (const int rc = m.getattr(parent, dir, false); rc != 0)
        return rc;
    if (dir.type != ObjectType::directory)
        return -ENOTDIR;
    proto::MkdirObjectResponse made;
    if (const int rc =
            m.call_body(m.meta_servers[meta_index], proto::MkdirObjectRequest{dir, mode}, made);
        rc != 0)
        return rc;
    proto::LinkDirResponse linked;
    if (const int rc = m.meta_call(
            parent, proto::LinkDirRequest{parent, std::string(name), made.attr.handle}, linked);
        rc != 0) {
        // Nothing names the new directory: take it away again.  If that
        // fails too, pvfs-fsck finds it.
        if (const int undo = m.remove_dir_object(made.attr.handle); undo != 0)
            gossip::warning(gossip::Mask::client,
                            "remote mkdir: directory {:016x} left without a name: {}",
                            made.attr.handle, error_text(undo));
        return rc;
    }
    m.forget(parent);
    out = made.attr;
    m.remember(out);
    m.remember_name(parent, name, out.handle);
    return 0;
}

int Client::mknod(Handle parent, std::string_view name, ObjectType type, std::uint32_t mode,
                  std::uint64_t rdev, Attr &out)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::MknodResponse r;
    m.forget_name(parent, name);
    if (const int rc = m.meta_call(
            parent, proto::MknodRequest{parent, std::string(name), type, mode, rdev}, r);
        rc != 0)
        return rc;
    out = r.attr;
    m.remember(out);
    return 0;
}

int Client::symlink(Handle parent, std::string_view name, std::string_view target, Attr &out)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    if (target.empty() || target.size() > max_path)
        return target.empty() ? -ENOENT : -ENAMETOOLONG;
    proto::SymlinkResponse r;
    m.forget_name(parent, name);
    if (const int rc = m.meta_call(
            parent, proto::SymlinkRequest{parent, std::string(name), std::string(target)}, r);
        rc != 0)
        return rc;
    out = r.attr;
    m.remember(out);
    return 0;
}

int Client::readlink(Handle handle, std::string &target)
{
    proto::ReadlinkResponse r;
    if (const int rc = impl_->meta_call(handle, proto::ReadlinkRequest{handle}, r); rc != 0)
        return rc;
    target = std::move(r.target);
    return 0;
}

int Client::link(Handle handle, Handle new_parent, std::string_view new_name, Attr &out)
{
    Impl &m = *impl_;
    if (!valid_name(new_name))
        return new_name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::LinkResponse r;
    m.forget_name(new_parent, new_name);
    m.forget(handle);
    // The new entry lives on the parent's metadata server.
    if (const int rc = m.meta_call(
            new_parent, proto::LinkRequest{handle, new_parent, std::string(new_name)}, r);
        rc != 0)
        return rc;
    if (const int rc = m.complete_attr(r.attr); rc != 0)
        return rc;
    out = r.attr;
    return 0;
}

int Client::unlink(Handle parent, std::string_view name)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::RemoveResponse r;
    m.forget_name(parent, name);
    if (const int rc = m.meta_call(parent, proto::RemoveRequest{parent, std::string(name)}, r);
        rc != 0)
        return rc;
    if (r.handle == no_handle) // a dangling entry: only the name went
        return 0;
    m.forget(r.handle);
    if (r.type == ObjectType::regular && r.nlink_after == 0)
        m.remove_objects(r.handle, r.layout);
    return 0;
}

int Client::rmdir(Handle parent, std::string_view name)
{
    Impl &m = *impl_;
    if (!valid_name(name))
        return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::RmdirResponse r;
    m.forget_name(parent, name);
    const int rc = m.meta_call(parent, proto::RmdirRequest{parent, std::string(name)}, r);
    // EXDEV: the entry names a directory of another metadata server.
    return rc == -EXDEV ? m.rmdir_remote(parent, name) : rc;
}

int Client::rename(Handle old_parent, std::string_view old_name, Handle new_parent,
                   std::string_view new_name, std::uint32_t flags)
{
    Impl &m = *impl_;
    if (!valid_name(old_name) || !valid_name(new_name))
        return old_name.size() > max_name || new_name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    proto::RenameResponse r;
    m.forget_name(old_parent, old_name);
    m.forget_name(new_parent, new_name);
    if (const int rc = m.meta_call(old_parent,
                                   proto::RenameRequest{old_parent, std::string(old_name),
                                                        new_parent, std::string(new_name), flags},
                                   r);
        rc != 0)
        return rc;
    if (r.replaced != no_handle) {
        m.forget(r.replaced);
        if (r.replaced_type == ObjectType::regular && r.replaced_nlink_after == 0)
            m.remove_objects(r.replaced, r.layout);
    }
    return 0;
}

int Client::readdir(Handle dir, std::uint64_t cookie, std::uint32_t max_entries,
                    std::vector<proto::DirEntry> &entries, bool &eof)
{
    const std::uint32_t n =
        std::clamp<std::uint32_t>(max_entries == 0 ? readdir_page : max_entries, 1,
                                  static_cast<std::uint32_t>(proto::max_readdir_entries));
    proto::ReaddirResponse r;
    if (const int rc = impl_->meta_call(dir, proto::ReaddirRequest{dir, cookie, n}, r); rc != 0)
        return rc;
    entries = std::move(r.entries);
    eof = r.eof;
    return 0;
}

// ---- data --------------------------------------------------------------------

std::int64_t Client::read(Handle handle, std::uint64_t offset, std::span<std::byte> buffer)
{
    Attr a;
    if (const int rc = impl_->getattr(handle, a); rc != 0)
        return rc;
    if (a.type != ObjectType::regular)
        return a.type == ObjectType::directory ? -EISDIR : -EINVAL;
    if (const int rc = impl_->check_access(handle, proto::access_read); rc != 0)
        return rc;
    if (offset >= a.size || buffer.empty())
        return 0;
    const std::uint64_t n = std::min<std::uint64_t>(buffer.size(), a.size - offset);
    const proto::Region region{offset, n};
    return impl_->io(handle, std::span(&region, 1), buffer.data(), static_cast<std::size_t>(n),
                     false);
}

std::int64_t Client::write(Handle handle, std::uint64_t offset, std::span<const std::byte> data)
{
    if (data.empty())
        return 0;
    if (const int rc = impl_->check_access(handle, proto::access_write); rc != 0)
        return rc;
    const proto::Region region{offset, data.size()};
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): a write only reads the memory
    return impl_->io(handle, std::span(&region, 1), const_cast<std::byte *>(data.data()),
                     data.size(), true);
}

std::int64_t Client::read_list(Handle handle, std::span<const proto::Region> regions,
                               std::span<std::byte> memory)
{
    if (regions.size() > max_io_regions * std::size_t{64})
        return -EINVAL;
    if (const int rc = impl_->check_access(handle, proto::access_read); rc != 0)
        return rc;
    return impl_->io(handle, regions, memory.data(), memory.size(), false);
}

std::int64_t Client::write_list(Handle handle, std::span<const proto::Region> regions,
                                std::span<const std::byte> memory)
{
    if (regions.size() > max_io_regions * std::size_t{64})
        return -EINVAL;
    if (const int rc = impl_->check_access(handle, proto::access_write); rc != 0)
        return rc;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): a write only reads the memory
    return impl_->io(handle, regions, const_cast<std::byte *>(memory.data()), memory.size(), true);
}

int Client::fsync(Handle handle)
{
    Impl &m = *impl_;
    Attr a;
    if (const int rc = m.getattr(handle, a); rc != 0)
        return rc;
    if (a.type != ObjectType::regular)
        return 0;
    std::vector<Rpc> rpcs(a.layout.stripe_count);
    std::vector<Rpc *> ptrs;
    for (std::uint32_t slot = 0; slot < a.layout.stripe_count; ++slot) {
        rpcs[slot].server =
            m.data_servers.at(layout::server_of_slot(a.layout, m.data_count(), slot));
        rpcs[slot].req.body = proto::FsyncRequest{handle};
        ptrs.push_back(&rpcs[slot]);
    }
    m.run(ptrs);
    for (const Rpc *r : ptrs) {
        // An object never written does not exist: nothing to make durable.
        if (const int rc = r->result(); rc != 0 && rc != -ENOENT)
            return rc;
    }
    if (m.written.erase(handle) != 0) {
        proto::SetattrResponse r;
        m.forget(handle);
        return m.meta_call(handle, proto::SetattrRequest{handle, proto::set_ctime, 0, 0, 0, {}, {}},
                           r);
    }
    return 0;
}

// ---- the rest --------------------------------------------------------------------

int Client::statfs(StatFs &out)
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
    m.run(ptrs);
    for (std::size_t i = 0; i < rpcs.size(); ++i) {
        if (const int rc = rpcs[i].result(); rc != 0)
            return rc;
        const auto *r = std::get_if<proto::StatfsResponse>(&rpcs[i].resp.body);
        if (r == nullptr)
            return -EPROTO;
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
    return 0;
}

namespace {

// The layout as an extended attribute (docs/protocol.md "pvfs.layout"):
// computed from layout_get/layout_set, never stored as an xattr.
constexpr std::string_view layout_xattr = "pvfs.layout";

} // namespace

int Client::xattr_get(Handle handle, std::string_view name, std::vector<std::byte> &value)
{
    if (name == layout_xattr) {
        Layout l;
        if (const int rc = layout_get(handle, l); rc != 0)
            return rc == -EINVAL ? -ENODATA : rc;
        const std::string text = layout::to_text(l);
        const auto *bytes = reinterpret_cast<const std::byte *>(text.data());
        value.assign(bytes, bytes + text.size());
        return 0;
    }
    proto::XattrGetResponse r;
    if (const int rc =
            impl_->meta_call(handle, proto::XattrGetRequest{handle, std::string(name)}, r);
        rc != 0)
        return rc;
    value = std::move(r.value);
    return 0;
}

int Client::xattr_set(Handle handle, std::string_view name, std::span<const std::byte> value,
                      std::uint32_t flags)
{
    if (name == layout_xattr) {
        // Every file and directory has a layout: "create only" cannot succeed.
        if ((flags & XATTR_CREATE) != 0)
            return -EEXIST;
        Layout current;
        if (const int rc = layout_get(handle, current); rc != 0)
            return rc;
        const std::string_view text(reinterpret_cast<const char *>(value.data()), value.size());
        Layout wanted;
        if (layout::from_text(text, current, wanted) != nullptr)
            return -EINVAL;
        return layout_set(handle, wanted);
    }
    proto::XattrSetResponse r;
    impl_->forget(handle);
    return impl_->meta_call(handle,
                            proto::XattrSetRequest{handle, std::string(name),
                                                   proto::Bytes(value.begin(), value.end()), flags},
                            r);
}

int Client::xattr_list(Handle handle, std::vector<std::string> &names)
{
    proto::XattrListResponse r;
    if (const int rc = impl_->meta_call(handle, proto::XattrListRequest{handle}, r); rc != 0)
        return rc;
    names = std::move(r.names);
    Attr a;
    if (const int rc = impl_->getattr(handle, a); rc != 0)
        return rc;
    if (a.type == ObjectType::regular || a.type == ObjectType::directory)
        names.emplace_back(layout_xattr);
    return 0;
}

int Client::xattr_remove(Handle handle, std::string_view name)
{
    if (name == layout_xattr)
        return -EPERM; // a layout can be changed, not removed

    proto::XattrRemoveResponse r;
    impl_->forget(handle);
    return impl_->meta_call(handle, proto::XattrRemoveRequest{handle, std::string(name)}, r);
}

int Client::layout_get(Handle handle, Layout &out)
{
    proto::LayoutGetResponse r;
    if (const int rc = impl_->meta_call(handle, proto::LayoutGetRequest{handle}, r); rc != 0)
        return rc;
    out = r.layout;
    return 0;
}

int Client::layout_set(Handle handle, const Layout &layout)
{
    Impl &m = *impl_;
    if (layout::validate(layout, m.data_count()) != nullptr)
        return -EINVAL;
    // A file's layout may change only while it has no data.
    Attr a;
    if (const int rc = m.getattr(handle, a, false); rc != 0)
        return rc;
    if (a.type == ObjectType::regular && a.size != 0)
        return -EBUSY;
    proto::LayoutSetResponse r;
    m.forget(handle);
    return m.meta_call(handle, proto::LayoutSetRequest{handle, layout}, r);
}

int Client::list_handles(std::uint32_t meta_index, std::uint64_t cookie, std::uint32_t max,
                         proto::ListHandlesResponse &out)
{
    Impl &m = *impl_;
    if (meta_index >= m.meta_servers.size())
        return -EINVAL;
    return m.call_body(m.meta_servers[meta_index], proto::ListHandlesRequest{cookie, max}, out);
}

int Client::list_objects(std::uint32_t data_index, std::uint64_t cookie, std::uint32_t max,
                         proto::ListObjectsResponse &out)
{
    Impl &m = *impl_;
    if (data_index >= m.data_servers.size())
        return -EINVAL;
    return m.call_body(m.data_servers[data_index], proto::ListObjectsRequest{cookie, max}, out);
}

int Client::remove_orphan_dir(Handle handle)
{
    return impl_->remove_dir_object(handle);
}

int Client::remove_object(std::uint32_t data_index, Handle handle)
{
    Impl &m = *impl_;
    if (data_index >= m.data_servers.size())
        return -EINVAL;
    proto::RemoveObjectResponse r;
    return m.call_body(m.data_servers[data_index], proto::RemoveObjectRequest{handle}, r);
}

std::vector<ServerStatus> Client::status_all()
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
    m.run(ptrs);
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
        s.status = *status;
        s.round_trip = st.ended - st.started;
        s.total_bytes = statfs->total_bytes;
        s.free_bytes = statfs->free_bytes;
        s.avail_bytes = statfs->avail_bytes;
        s.total_objects = statfs->total_objects;
        s.free_objects = statfs->free_objects;
    }
    return out;
}

std::string error_text(std::int64_t negative_errno)
{
    const auto e = static_cast<int>(-negative_errno);
    std::array<char, 128> buf{};
    return ::strerror_r(e, buf.data(), buf.size());
}

} // namespace pvfs::client
