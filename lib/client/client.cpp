// libpvfs (include/pvfs/client.hpp): connecting, names and attributes,
// the namespace.  The state they share is Client::Impl (impl.hpp).
#include "impl.hpp"

#include <unistd.h>

#include <array>
#include <cstring>

namespace pvfs::client {

namespace {

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

// ---- connecting ----------------------------------------------------------

namespace {

// A client's state before it connects: its options and its loop (a new
// one when the options name none).  nullptr and `error` set when BMI
// cannot start.
std::unique_ptr<Client::Impl> new_impl(const Options &options, std::string &error)
{
    auto impl = std::make_unique<Client::Impl>();
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
    return impl;
}

// Fills in `impl` from its options: the config (fetched from the target's
// server, awaiting it on the loop, or read from a file), the key, the
// servers' addresses.  0, or -1 with `error` set.
Task<int> setup(Client::Impl &impl, std::string &error)
{
    const Options &options = impl.options;
    const bool is_url = options.target.find("://") != std::string::npos;
    std::string key_file = options.key_file;
    if (is_url) {
        const config::FsUrl url = config::parse_fs_url(options.target);
        if (!url.ok()) {
            error = options.target + ": " + url.error;
            co_return -1;
        }
        if (key_file.empty()) {
            const char *env = std::getenv("PVFS_KEY_FILE"); // NOLINT(concurrency-mt-unsafe)
            key_file = env != nullptr ? env : "/etc/pvfs/pvfs.key";
        }
        std::string key_error;
        impl.key = proto::Key::load(key_file, key_error);
        if (!impl.key) {
            error = key_error;
            co_return -1;
        }
        if (const char *enc = std::getenv("PVFS_ENCRYPT"); // NOLINT(concurrency-mt-unsafe)
            options.encrypt || (enc != nullptr && std::string_view(enc) == "1"))
            impl.key->set_encrypt(true);
        impl.timeout = options.request_timeout.count() > 0 ? options.request_timeout
                                                           : std::chrono::milliseconds(30000);
        impl.set_servers({url.address});
        proto::GetConfigResponse got;
        // Connecting is bounded even for a hard client: mount(8) must not
        // hang, and pvfsd retries a re-attach itself.
        const bool hard = std::exchange(impl.options.hard, false);
        const int got_rc = co_await impl.call_body(0, proto::GetConfigRequest{}, got);
        impl.options.hard = hard;
        if (const int rc = got_rc; rc != 0) {
            error = url.address + ": cannot get the config: " + error_text(rc);
            co_return -1;
        }
        config::Result parsed = config::parse(got.config_text, url.address + " get_config", "");
        if (!parsed.ok()) {
            error = parsed.error;
            co_return -1;
        }
        if (parsed.cluster.fs_name != url.fs_name) {
            error = url.address + " serves file system '" + parsed.cluster.fs_name + "', not '" +
                    url.fs_name + "'";
            co_return -1;
        }
        impl.cluster = std::move(parsed.cluster);
    } else {
        config::Result loaded = config::load_file(options.target);
        if (!loaded.ok()) {
            error = loaded.error;
            co_return -1;
        }
        impl.cluster = std::move(loaded.cluster);
        if (key_file.empty())
            key_file = impl.cluster.key_file;
        std::string key_error;
        impl.key = proto::Key::load(key_file, key_error);
        if (!impl.key) {
            error = key_error;
            co_return -1;
        }
        if (const char *enc = std::getenv("PVFS_ENCRYPT"); // NOLINT(concurrency-mt-unsafe)
            options.encrypt || (enc != nullptr && std::string_view(enc) == "1"))
            impl.key->set_encrypt(true);
    }
    const config::Cluster &c = impl.cluster;
    // [filesystem] encrypt: every connection of this client asks for
    // encryption and refuses a server that does not seal (docs/security.md
    // "Encryption").  A URL target learns it from the config it fetched
    // (that first connection asked only if $PVFS_ENCRYPT=1 said so, as a
    // server with encrypt = true requires).
    if (c.encrypt)
        impl.key->set_encrypt(true);
    impl.timeout = options.request_timeout.count() > 0
                       ? options.request_timeout
                       : std::chrono::milliseconds(c.defaults.request_timeout_ms);
    static_cast<void>(
        impl.engine->bmi->set_info(bmi::Info::idle_timeout_ms, c.defaults.idle_timeout_ms));
    std::string method = options.method;
    if (method.empty() && is_url)
        method = options.target.substr(0, options.target.find("://"));
    if (method.empty()) {
        const char *env = std::getenv("PVFS_METHOD"); // NOLINT(concurrency-mt-unsafe)
        method = env != nullptr && *env != '\0' ? env : "tcp";
    }
    if (method != "tcp" && method != "ib") {
        error = "unknown network method '" + method + "'; use tcp or ib";
        co_return -1;
    }
    if (method == "ib" && impl.key->encrypt()) {
        error = "encryption (encrypt) is not supported over ib://: use the fabric's own "
                "encryption, or tcp://";
        co_return -1;
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
            co_return -1;
        }
        urls.push_back(chosen);
    }
    impl.set_servers(urls);
    impl.bound = true;
    const char *rdma_env = std::getenv("PVFS_RDMA"); // NOLINT(concurrency-mt-unsafe)
    impl.rdma = method == "ib" && options.server_rdma &&
                (rdma_env == nullptr || std::string_view(rdma_env) != "0");
    impl.meta_servers = c.metadata_servers();
    impl.data_servers = c.data_servers();
    impl.session_opened.assign(urls.size(), 0);
    if (options.session_owner.size() > proto::max_owner_text) {
        error = "session owner longer than 255 bytes";
        co_return -1;
    }
    if (options.exactly_once) {
        impl.client_id = options.client_id;
        while (impl.client_id == 0) {
            if (::getrandom(&impl.client_id, sizeof impl.client_id, 0) !=
                static_cast<ssize_t>(sizeof impl.client_id))
                impl.client_id = 0;
        }
    }
    co_return 0;
}

} // namespace

std::unique_ptr<Client> Client::connect(const Options &options, std::string &error)
{
    std::unique_ptr<Impl> impl = new_impl(options, error);
    if (!impl)
        return nullptr;
    if (impl->engine->wait(setup(*impl, error)) != 0)
        return nullptr;
    return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Task<std::unique_ptr<Client>> Client::co_connect(Options options, std::string &error)
{
    std::unique_ptr<Impl> impl = new_impl(options, error);
    if (!impl)
        co_return nullptr;
    if (co_await setup(*impl, error) != 0)
        co_return nullptr;
    co_return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}

Client::~Client()
{
    // Only when nothing else runs on the loop: waiting here would resume
    // other clients' tasks from inside a destructor.
    if (!impl_ || impl_->engine == nullptr || !impl_->engine->active.empty())
        return;
    if (std::find(impl_->session_opened.begin(), impl_->session_opened.end(), 1) ==
        impl_->session_opened.end())
        return;
    impl_->engine->wait(impl_->end_sessions());
}

const config::Cluster &Client::cluster() const noexcept
{
    return impl_->cluster;
}

void Client::set_hard(bool hard)
{
    impl_->options.hard = hard;
}

void Client::set_change_ids(bool on)
{
    impl_->change_ids = on;
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
    const std::uint32_t mask = change.mask;
    const std::uint32_t by_open = change.by_open ? proto::setattr_by_open : 0U;
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
        proto::Capability cap;
        if (const int rc = co_await m.capability(handle, proto::cap_write, cap); rc != 0)
            co_return rc;
        std::vector<Rpc> rpcs(a.layout.stripe_count);
        std::vector<Rpc *> ptrs;
        for (std::uint32_t slot = 0; slot < a.layout.stripe_count; ++slot) {
            const auto size = layout::object_size(a.layout, m.data_count(), slot, change.size);
            if (!size)
                co_return -EFBIG;
            rpcs[slot].server =
                m.data_servers.at(layout::server_of_slot(a.layout, m.data_count(), slot));
            rpcs[slot].req.body = proto::TruncateObjectRequest{handle, *size};
            m.attach(rpcs[slot].req, cap);
            ptrs.push_back(&rpcs[slot]);
        }
        // A truncation changes mtime and ctime and clears setuid/setgid, as
        // a write does: set_ctime alone says "data changed"
        // (docs/protocol.md).  It goes first, so that a truncation the
        // metadata server refuses (no write access, or a by_open claim
        // without a write open) leaves the data alone.  Other changes go
        // in a second request.
        proto::SetattrResponse written;
        m.forget(handle);
        proto::RequestBody request =
            proto::SetattrRequest{handle, proto::set_ctime | by_open, 0, 0, 0, {}, {}};
        if (const int rc = co_await m.meta_call(handle, std::move(request), written); rc != 0)
            co_return rc;
        m.written.erase(handle);
        co_await m.run(ptrs);
        for (const Rpc *r : ptrs) {
            if (const int rc = r->result(); rc != 0)
                co_return rc;
        }
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
        const proto::SetattrRequest req{handle,      (mask & ~proto::set_ctime) | by_open,
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
    co_return co_await create_in(parent, name, mode, exclusive, layout, 0, 0, out, created);
}

Task<int> Client::co_create_open(Handle parent, std::string_view name, std::uint32_t mode,
                                 bool exclusive, const Layout &layout, std::uint32_t open_mode,
                                 std::uint64_t gen, Attr &out, bool *created)
{
    Impl &m = *impl_;
    if (m.client_id == 0)
        co_return -EOPNOTSUPP;
    if (open_mode == 0 || (open_mode & ~(open_read | open_write)) != 0)
        co_return -EINVAL;
    if (gen == 0)
        gen = m.open_gen + 1;
    m.open_gen = std::max(m.open_gen, gen);
    co_return co_await create_in(parent, name, mode, exclusive, layout, open_mode, gen, out,
                                 created);
}

Task<int> Client::create_in(Handle parent, std::string_view name, std::uint32_t mode,
                            bool exclusive, const Layout &layout, std::uint32_t open_mode,
                            std::uint64_t gen, Attr &out, bool *created)
{
    Impl &m = *impl_;
    std::optional<proto::CreateOpen> open;
    if (open_mode != 0)
        open = proto::CreateOpen{m.client_id, open_mode, gen};
    if (!valid_name(name))
        co_return name.size() > max_name ? -ENAMETOOLONG : -EINVAL;
    if (layout.stripe_count != 0 && layout::validate(layout, m.data_count()) != nullptr)
        co_return -EINVAL;
    proto::CreateResponse r;
    m.forget_name(parent, name);
    proto::RequestBody request =
        proto::CreateRequest{parent, std::string(name), mode, exclusive, layout, open};
    if (const int rc = co_await m.meta_call(parent, std::move(request), r); rc != 0)
        co_return rc;
    if (r.cap) {
        if (r.cap->handle != r.attr.handle)
            co_return -EPROTO;
        m.remember_capability(*r.cap);
    }
    if (open) {
        // The server holds it now, as after co_open: counted the same way,
        // so that co_close sends the CLOSE.
        Impl::Opened &o = m.opened[r.attr.handle];
        ++o.count;
        o.gen = std::max(o.gen, open->gen);
        o.mode |= open->mode;
    }
    // A file this request created has no data yet: its size is 0 without
    // asking each data server.
    int rc = 0;
    if (r.created && r.attr.type == ObjectType::regular) {
        if (layout::validate(r.attr.layout, m.data_count()) != nullptr)
            rc = -EIO;
        r.attr.size = 0;
    } else {
        rc = co_await m.complete_attr(r.attr);
    }
    if (rc != 0) {
        // An open that failed is not counted: its hold goes again.
        if (open)
            static_cast<void>(co_await co_close(r.attr.handle));
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
    // orphaned: open somewhere; its last close removes the objects.
    // The unlink is done either way: objects a data server could not
    // remove now are what pvfs-fsck --repair removes.
    if (r.type == ObjectType::regular && r.nlink_after == 0 && !r.orphaned.value_or(false))
        static_cast<void>(co_await m.remove_objects(r.handle, r.layout));
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
        if (r.replaced_type == ObjectType::regular && r.replaced_nlink_after == 0 &&
            !r.orphaned.value_or(false))
            static_cast<void>(co_await m.remove_objects(r.replaced, r.layout)); // as unlink
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

std::string error_text(std::int64_t negative_errno)
{
    const auto e = static_cast<int>(-negative_errno);
    std::array<char, 128> buf{};
    return ::strerror_r(e, buf.data(), buf.size());
}

} // namespace pvfs::client
