// libpvfs (include/pvfs/client.hpp): file data, statfs, extended attributes,
// layouts, listings for pvfs-fsck and the servers' status.
#include "impl.hpp"

namespace pvfs::client {

namespace {

// A list_handles or list_objects answer.
template <typename Wire> HandlePage handle_page(Wire &&wire)
{
    return {std::move(wire.handles), wire.next_cookie, wire.eof};
}

} // namespace

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
    proto::Capability cap;
    if (const int rc = co_await m.capability(handle, proto::cap_read, cap); rc != 0)
        co_return rc;
    std::vector<std::unique_ptr<Rpc>> reads;
    if (const int rc = m.io_requests(a, std::span(&region, 1), buffer.data(), buffer.size(), false,
                                     cap, reads);
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

Task<int> Client::co_fsync(Handle handle, bool by_open)
{
    Impl &m = *impl_;
    Attr a;
    if (const int rc = co_await m.getattr_no_size(handle, a); rc != 0)
        co_return rc;
    if (a.type != ObjectType::regular)
        co_return 0;
    proto::Capability cap;
    if (const int rc = co_await m.fsync_capability(handle, cap); rc != 0)
        co_return rc;
    std::vector<Rpc> rpcs(a.layout.stripe_count);
    std::vector<Rpc *> ptrs;
    for (std::uint32_t slot = 0; slot < a.layout.stripe_count; ++slot) {
        rpcs[slot].server =
            m.data_servers.at(layout::server_of_slot(a.layout, m.data_count(), slot));
        rpcs[slot].req.body = proto::FsyncRequest{handle};
        m.attach(rpcs[slot].req, cap);
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
        const std::uint32_t mask = proto::set_ctime | (by_open ? proto::setattr_by_open : 0U);
        proto::RequestBody request = proto::SetattrRequest{handle, mask, 0, 0, 0, {}, {}};
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
    // Only the objects of a file that is gone: the metadata server says
    // so with a capability.
    std::vector<proto::Capability> caps;
    const Handle one = handle;
    if (const std::vector<int> rc = co_await m.destroy_capabilities(std::span(&one, 1), caps);
        rc.front() != 0)
        co_return rc.front();
    Rpc rpc;
    rpc.server = m.data_servers[data_index];
    rpc.req.body = proto::RemoveObjectRequest{handle};
    m.attach(rpc.req, caps.front());
    Rpc *const ptr = &rpc;
    co_await m.run(std::span(&ptr, 1));
    co_return rpc.result();
}

Task<std::vector<ServerStatus>> Client::co_status_all(bool counters)
{
    Impl &m = *impl_;
    const std::size_t n = m.cluster.servers.size();
    // With counters, only the status (pvfs-top polls: no statfs to count).
    const std::size_t per = counters ? 1 : 2;
    std::vector<Rpc> rpcs(per * n);
    std::vector<Rpc *> ptrs;
    for (std::size_t i = 0; i < n; ++i) {
        rpcs[per * i].server = i;
        rpcs[per * i].req.body = proto::StatusRequest{
            .counters =
                counters ? std::optional<std::uint16_t>(proto::counters_version) : std::nullopt};
        ptrs.push_back(&rpcs[per * i]);
        if (!counters) {
            rpcs[per * i + 1].server = i;
            rpcs[per * i + 1].req.body = proto::StatfsRequest{};
            ptrs.push_back(&rpcs[per * i + 1]);
        }
    }
    co_await m.run(ptrs);
    std::vector<ServerStatus> out(n);
    const proto::StatfsResponse no_statfs;
    for (std::size_t i = 0; i < n; ++i) {
        ServerStatus &s = out[i];
        s.name = m.cluster.servers[i].name;
        s.address = m.urls[i];
        const Rpc &st = rpcs[per * i];
        const Rpc *fs = counters ? nullptr : &rpcs[per * i + 1];
        s.error = st.result() != 0 ? st.result() : fs != nullptr ? fs->result() : 0;
        if (s.error != 0)
            continue;
        const auto *status = std::get_if<proto::StatusResponse>(&st.resp.body);
        const auto *statfs =
            fs != nullptr ? std::get_if<proto::StatfsResponse>(&fs->resp.body) : &no_statfs;
        if (status == nullptr || statfs == nullptr || (counters && !status->counters)) {
            s.error = -EPROTO;
            continue;
        }
        s.status = {.server_name = status->server_name,
                    .version = status->version,
                    .config_hash = status->config_hash,
                    .roles = status->roles,
                    .uptime_ns = status->uptime_ns,
                    .bulk_message_bytes = status->bulk_message_bytes,
                    .bulk_rdma_bytes = status->bulk_rdma_bytes,
                    .counters = status->counters};
        s.round_trip = st.ended - st.started;
        s.total_bytes = statfs->total_bytes;
        s.free_bytes = statfs->free_bytes;
        s.avail_bytes = statfs->avail_bytes;
        s.total_objects = statfs->total_objects;
        s.free_objects = statfs->free_objects;
    }
    co_return out;
}

} // namespace pvfs::client
