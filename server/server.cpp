// pvfs-server's event loop (server.hpp).
#include "server.hpp"

#include "key_check.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <sodium.h>

#include "pvfs/auth.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/perm.hpp"

#ifndef PVFS_VERSION
#define PVFS_VERSION "unknown"
#endif

namespace pvfs::server {

namespace {

using gossip::Mask;

// The largest request: a write with its inline data, plus the envelope.
constexpr std::uint64_t max_request_bytes = proto::max_request_bytes;
// Unexpected bytes one client may have queued at the server.
constexpr std::uint64_t per_client_unexpected = std::uint64_t{16} << 20U;
// How long a stopping server lets the requests in progress finish.
constexpr auto drain_time = std::chrono::seconds(5);
// How long a server keeps trying to listen on a busy address.
constexpr auto listen_retry_time = std::chrono::seconds(15);

// How long a record of data objects to remove waits for a client before
// the reclaimer takes it (config.hpp, reclaim_after_ms).
std::chrono::milliseconds reclaim_after(const config::Defaults &d)
{
    return std::chrono::milliseconds(d.reclaim_after_ms != 0 ? d.reclaim_after_ms : d.lease_ms);
}

// The first scheme of this server's addresses that every data server has
// an address of too: how its reclaimer reaches them.
std::string reclaimer_method(const config::Cluster &cluster, const config::Server &me)
{
    const auto scheme = [](const std::string &url) { return url.substr(0, url.find(':')); };
    for (const std::string &mine : me.addresses) {
        std::string s = scheme(mine);
        const bool everywhere = std::ranges::all_of(cluster.servers, [&](const config::Server &o) {
            return !o.data || std::ranges::any_of(o.addresses, [&](const std::string &a) {
                return scheme(a) == s;
            });
        });
        if (everywhere)
            return s;
    }
    return "tcp";
}

std::int64_t realtime_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The handle a data request is about (capability_needed(op) != 0).
Handle request_handle(const proto::RequestBody &body)
{
    return std::visit(
        [](const auto &b) -> Handle {
            if constexpr (requires { b.handle; })
                return b.handle;
            else
                return no_handle;
        },
        body);
}

// The default-constructed response body of `op` (its variant alternative).
template <std::size_t... I>
proto::ResponseBody empty_body(std::size_t index, std::index_sequence<I...> /*indices*/)
{
    proto::ResponseBody body;
    ((index == I ? static_cast<void>(body.emplace<I>()) : static_cast<void>(0)), ...);
    return body;
}

proto::ResponseBody empty_body(proto::Op op)
{
    return empty_body(static_cast<std::size_t>(op) - 1,
                      std::make_index_sequence<std::variant_size_v<proto::ResponseBody>>{});
}

const char *verdict_errno_text(ReplayVerdict v)
{
    return verdict_text(v);
}

} // namespace

// A response on its way out: its bytes live until BMI is done with them.
struct Server::Reply final : Waiter {
    Server *server = nullptr;
    std::vector<std::byte> bytes;
    void on_bmi(const bmi::Completion &done) override { server->reply_done(*this, done); }
};

std::unique_ptr<Server> Server::create(const ServerOptions &options, std::string &error)
{
    config::Result loaded = config::load_file(options.config_path);
    if (!loaded.ok()) {
        error = loaded.error;
        return nullptr;
    }
    config::Cluster &cluster = loaded.cluster;
    std::size_t self = 0;
    if (options.name.empty()) {
        if (cluster.servers.size() != 1) {
            error = options.config_path + ": " + std::to_string(cluster.servers.size()) +
                    " servers in the config; say which one this is with --name";
            return nullptr;
        }
    } else {
        const config::Server *found = cluster.find(options.name);
        if (found == nullptr) {
            error = options.config_path + ": no server named '" + options.name + "'";
            return nullptr;
        }
        self = static_cast<std::size_t>(found - cluster.servers.data());
    }
    // Checked before anything is opened or bound.
    std::string metrics_file;
    std::chrono::milliseconds metrics_interval{};
    if (!resolve_metrics_options(cluster.servers[self], options.metrics_file,
                                 options.metrics_interval, metrics_file, metrics_interval, error))
        return nullptr;
    std::string key_error;
    std::optional<proto::Key> key = proto::Key::load(cluster.key_file, key_error);
    if (!key) {
        error = key_error;
        return nullptr;
    }
    std::unique_ptr<Server> server(new Server(std::move(cluster), self, std::move(*key)));
    const config::Server &me = server->self_;
    if (server->keys_.has_client_keys()) {
        std::string summary;
        // Watched first: a change between the read and the watch is seen.
        if (!server->keys_.watch(error) || !server->keys_.load(error, summary))
            return nullptr;
        gossip::info(Mask::server, "{}", summary);
    }

    std::error_code ec;
    std::filesystem::create_directories(me.storage, ec);
    if (ec) {
        error = "storage directory " + me.storage + ": " + ec.message();
        return nullptr;
    }

    bmi::Options bo;
    bo.role = bmi::Role::server;
    bo.listen = me.addresses;
    // A restarted server may find its port still held for a moment by the
    // connections of its previous life (closing, not yet in TIME_WAIT):
    // it tries again for a while rather than give up.
    const auto listen_deadline = std::chrono::steady_clock::now() + listen_retry_time;
    for (bool logged = false;;) {
        try {
            server->bmi_ = std::make_unique<bmi::Bmi>(bo);
            break;
        } catch (const std::exception &e) {
            if (std::chrono::steady_clock::now() >= listen_deadline) {
                error = std::string("cannot listen: ") + e.what();
                return nullptr;
            }
            if (!logged) {
                gossip::warning(Mask::server, "{}: {}; retrying for {} s", me.name, e.what(),
                                listen_retry_time.count());
                logged = true;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    bmi::Bmi &b = *server->bmi_;
    // Every connection proves a key of the table before it is served
    // (docs/security.md "Connections"); looked up at the challenge and
    // again at the proof, so a key revoked meanwhile is refused.
    b.set_authenticator(std::make_shared<auth::Authenticator>(
        [srv = server.get()](std::optional<std::uint32_t> id) -> std::shared_ptr<const proto::Key> {
            std::shared_ptr<const Client> c = id ? srv->keys_.find(*id) : srv->keys_.cluster();
            if (!c || c->revoked) {
                srv->log_handshake_refusal(id, c.get());
                return nullptr;
            }
            return {c, &c->key}; // keeps the client's entry alive
        }));
    const config::Defaults &d = server->cluster_.defaults;
    // In this order: each budget is checked against the per-peer one.
    struct Setting {
        bmi::Info info;
        std::uint64_t value;
        const char *name;
    };
    const auto bmi_settings = std::to_array<Setting>({
        {bmi::Info::unexpected_limit, max_request_bytes, "unexpected_limit"},
        {bmi::Info::unexpected_peer_bytes, per_client_unexpected, "unexpected_peer_bytes"},
        {bmi::Info::idle_timeout_ms, d.idle_timeout_ms, "idle_timeout"},
        {bmi::Info::max_connections, d.max_connections, "max_connections"},
        {bmi::Info::max_connections_per_address, d.max_connections_per_address,
         "max_connections_per_address"},
        {bmi::Info::hello_timeout_ms, d.hello_timeout_ms, "hello_timeout"},
        {bmi::Info::frame_timeout_ms, d.frame_timeout_ms, "frame_timeout"},
        {bmi::Info::frame_min_rate, d.frame_min_rate, "frame_min_rate"},
        {bmi::Info::unexpected_total_bytes, d.unexpected_total_bytes, "unexpected_total_bytes"},
        {bmi::Info::early_total_bytes, d.early_total_bytes, "early_total_bytes"},
        {bmi::Info::send_queue_bytes, d.send_queue_bytes, "send_queue_bytes"},
    });
    for (const Setting &s : bmi_settings) {
        if (b.set_info(s.info, s.value) != 0) {
            error = fmt::format("cannot configure BMI: {} = {} refused", s.name, s.value);
            return nullptr;
        }
    }
    server->ctx_ = b.open_context();

    if (me.data) {
        data::Options so;
        so.early_writeback = d.early_writeback;
        std::string store_error;
        std::optional<data::ObjectStore> store =
            data::ObjectStore::open(me.storage, so, store_error);
        if (!store) {
            error = store_error;
            return nullptr;
        }
        DataOptions dopt;
        dopt.chunk = server->cluster_.defaults.bulk_chunk;
        dopt.fs_id = server->cluster_.fs_id;
        dopt.server_index = server->self_index_;
        dopt.macs_optional = server->cluster_.defaults.insecure_benchmark_only;
        // Test-only (docs/testing.md): flip a byte of every read chunk
        // after its MAC, as an attacker on the path would, so that a test
        // sees the client refuse it.
        // NOLINTNEXTLINE(concurrency-mt-unsafe)
        if (const char *tamper = std::getenv("PVFS_TEST_TAMPER_READS");
            tamper != nullptr && std::string_view(tamper) == "1") {
            gossip::warning(Mask::server, "{}: PVFS_TEST_TAMPER_READS: corrupting every read chunk",
                            me.name);
            dopt.tamper_reads = true;
        }
        server->data_ = std::make_unique<DataService>(*server, std::move(*store), dopt);
        if (const int rc = b.watch_fd(server->data_->event_fd()); rc != 0) {
            error = std::string("cannot watch the data store: ") + errno_text(-rc);
            return nullptr;
        }
    }
    if (me.metadata) {
        const auto metas = server->cluster_.metadata_servers();
        const auto pos = std::find(metas.begin(), metas.end(), self);
        meta::Options mo;
        mo.path = (std::filesystem::path(me.storage) / "meta").string();
        mo.server_index = static_cast<std::uint32_t>(pos - metas.begin());
        mo.default_layout = server->cluster_.defaults.default_layout;
        mo.durable = server->cluster_.defaults.durable_metadata;
        for (const std::size_t i : server->cluster_.data_servers())
            mo.data_servers.push_back(server->cluster_.servers.at(i).name);
        meta::Store store;
        if (const int rc = store.open(mo); rc != 0) {
            error = "metadata store " + mo.path + ": " + errno_text(-rc);
            return nullptr;
        }
        MetaSettings settings;
        settings.session_ttl = std::chrono::milliseconds(server->cluster_.defaults.session_ttl_ms);
        settings.data_servers = static_cast<std::uint32_t>(server->cluster_.data_servers().size());
        settings.max_sessions = server->cluster_.defaults.max_sessions;
        settings.lease = std::chrono::milliseconds(server->cluster_.defaults.lease_ms);
        settings.reclaim_after = reclaim_after(server->cluster_.defaults);
        settings.group_commit = server->cluster_.defaults.group_commit;
        settings.capability_ttl =
            std::chrono::milliseconds(server->cluster_.defaults.capability_ttl_ms);
        settings.fs_id = server->cluster_.fs_id;
        settings.capability_key = server->capability_key_;
        // Test-only: lose replies on purpose (docs/testing.md).  Read at
        // start, before the committer thread exists.
        // NOLINTNEXTLINE(concurrency-mt-unsafe)
        if (const char *faults = std::getenv("PVFS_TEST_FAULTS");
            faults != nullptr && *faults != '\0') {
            if (!parse_faults(faults, settings.faults, error)) {
                error = "PVFS_TEST_FAULTS: " + error;
                return nullptr;
            }
        }
        try {
            server->meta_ =
                std::make_unique<MetaService>(*server, std::move(store), std::move(settings));
        } catch (const std::exception &e) {
            error = std::string("metadata service: ") + e.what();
            return nullptr;
        }
        if (const int rc = b.watch_fd(server->meta_->event_fd()); rc != 0) {
            error = std::string("cannot watch the metadata committer: ") + errno_text(-rc);
            return nullptr;
        }
        ReclaimerOptions ro;
        ro.config_path = options.config_path;
        ro.key_file = server->cluster_.key_file;
        ro.method = reclaimer_method(server->cluster_, me);
        ro.meta_index = mo.server_index;
        ro.tick = std::clamp(reclaim_after(server->cluster_.defaults) / 4,
                             std::chrono::milliseconds(100), std::chrono::milliseconds(5000));
        ro.request_timeout =
            std::chrono::milliseconds(server->cluster_.defaults.request_timeout_ms);
        try {
            MetaService &meta = *server->meta_;
            server->reclaimer_ =
                std::make_unique<Reclaimer>(std::move(ro), [&meta] { return meta.reclaims_due(); });
        } catch (const std::exception &e) {
            error = std::string("reclaimer: ") + e.what();
            return nullptr;
        }
    }
    if (!server->start_metrics(metrics_file, metrics_interval, error))
        return nullptr;
    return server;
}

bool Server::start_metrics(const std::string &path, std::chrono::milliseconds interval,
                           std::string &error)
{
    auto m = std::make_unique<ServerMetrics>(self_, path, interval);
    metrics::Registry &r = m->registry();
    const metrics::Labels labels = m->labels();
    r.gauge_fn(
        "pvfs_server_connections", "Connections open to clients and other servers.", labels,
        [this] { return static_cast<std::int64_t>(bmi_->get_info(bmi::Info::open_connections)); });
    r.gauge_fn("pvfs_server_replies_in_flight", "Answers posted and not yet sent.", labels,
               [this] { return static_cast<std::int64_t>(replies_in_flight_.size()); });
    if (data_) {
        r.gauge_fn("pvfs_server_data_requests_active",
                   "Data requests in progress (bulk transfers and fsyncs).", labels,
                   [this] { return static_cast<std::int64_t>(data_->active()); });
        constexpr const char *help = "File data moved as bulk messages or by RDMA, in bytes.";
        metrics::Labels message = labels;
        message.emplace_back("transport", "message");
        r.counter_fn("pvfs_server_bulk_bytes_total", help, std::move(message),
                     [this] { return data_->message_bytes(); });
        metrics::Labels rdma = labels;
        rdma.emplace_back("transport", "rdma");
        r.counter_fn("pvfs_server_bulk_bytes_total", help, std::move(rdma),
                     [this] { return data_->rdma_bytes(); });
        // Where bulk chunks spend their time (pvfs/counters.hpp BulkCounters).
        for (const bool write : {true, false}) {
            auto side = [this, write]() -> const BulkCounters & {
                const DataService::BulkStats &b = data_->bulk_stats();
                return write ? b.write : b.read;
            };
            metrics::Labels l = labels;
            l.emplace_back("direction", write ? "write" : "read");
            r.counter_fn("pvfs_server_bulk_chunks_total",
                         "Bulk chunks of read and write requests started.", l,
                         [side] { return side().chunks; });
            constexpr const char *stage_help =
                "Microseconds bulk chunks spent in each stage, summed over chunks: network "
                "(a write's receive posted until its bytes are in, a read's send posted until "
                "sent), storage (store writes or reads), queued (read, waiting for the "
                "chunks before it to be sent).";
            const std::array<std::pair<const char *, std::uint64_t BulkCounters::*>, 3> stages{
                {{"network", &BulkCounters::network_ns},
                 {"storage", &BulkCounters::storage_ns},
                 {"queued", &BulkCounters::queued_ns}}};
            for (const auto &[stage, member] : stages) {
                if (write && member == &BulkCounters::queued_ns)
                    continue;
                metrics::Labels sl = l;
                sl.emplace_back("stage", stage);
                r.counter_fn("pvfs_server_bulk_stage_microseconds_total", stage_help, std::move(sl),
                             [side, field = member] { return side().*field / 1000; });
            }
        }
        r.counter_fn("pvfs_server_bulk_buffer_waits_total",
                     "Read and write requests that waited for a chunk buffer from the pool.",
                     labels, [this] { return data_->bulk_stats().buffer_waits; });
        r.counter_fn("pvfs_server_bulk_buffer_wait_microseconds_total",
                     "Microseconds requests waited for chunk buffers, summed.", labels,
                     [this] { return data_->bulk_stats().buffer_wait_ns / 1000; });
    }
    if (meta_) {
        r.gauge_fn("pvfs_server_meta_changes_pending",
                   "Metadata changes queued for the committer, being committed, or committed "
                   "and not yet answered.",
                   labels, [this] { return static_cast<std::int64_t>(meta_->active()); });
        r.counter_fn("pvfs_server_meta_commits_total",
                     "Metadata commits (each one transaction and one sync for a batch of "
                     "changes).",
                     labels, [this] { return meta_->commits(); });
    }
    if (const int rc = m->write(error); rc != 0) {
        error = "metrics file " + error;
        return false;
    }
    metrics_ = std::move(m);
    if (!path.empty())
        gossip::info(Mask::server, "{}: metrics to {} every {} ms", self_.name, metrics_->path(),
                     interval.count());
    return true;
}

namespace {

// The cluster key as the key table holds it: with [filesystem] encrypt,
// every connection under it, and under every client key, must encrypt.
proto::Key encrypting(proto::Key key, bool on)
{
    key.set_encrypt(on);
    return key;
}

} // namespace

Server::Server(config::Cluster cluster, std::size_t self_index, proto::Key key)
    : cluster_(std::move(cluster)), self_(cluster_.servers.at(self_index)),
      self_index_(static_cast<std::uint32_t>(self_index)), config_text_(config::to_toml(cluster_)),
      config_hash_(config::hash(cluster_)), capability_key_(proto::capability_key(key)),
      keys_(encrypting(std::move(key), cluster_.encrypt), cluster_.defaults.root_squash,
            cluster_.client_keys),
      started_(std::chrono::steady_clock::now())
{
}

Server::~Server()
{
    sodium_memzero(capability_key_.data(), capability_key_.size());
    if (data_ && bmi_)
        static_cast<void>(bmi_->unwatch_fd(data_->event_fd()));
    if (meta_ && bmi_)
        static_cast<void>(bmi_->unwatch_fd(meta_->event_fd()));
}

bool Server::busy() const noexcept
{
    return !replies_in_flight_.empty() || (data_ && data_->active() > 0) ||
           (meta_ && meta_->active() > 0);
}

int Server::run(const std::atomic<bool> &stop, std::atomic<bool> *reload)
{
    std::array<bmi::Completion, 64> done{};
    std::vector<bmi::UnexpectedMessage> requests;
    requests.reserve(64);
    std::chrono::steady_clock::time_point stop_by{};
    for (;;) {
        const bool stopping = stop.load(std::memory_order_relaxed);
        if (stopping) {
            const auto now = std::chrono::steady_clock::now();
            if (stop_by == std::chrono::steady_clock::time_point{}) {
                stop_by = now + drain_time;
                gossip::info(Mask::server, "{}: stopping", self_.name);
            }
            if (!busy() || now >= stop_by)
                break;
        }
        requests.clear();
        std::size_t n_done = 0;
        // A stopping server takes no new request: they stay queued and
        // their clients see the connection close.
        bmi_->testany(ctx_, done, n_done, requests, stopping ? 0 : requests.capacity(), 100);
        for (std::size_t i = 0; i < n_done; ++i) {
            if (done[i].user_ptr != nullptr)
                static_cast<Waiter *>(done[i].user_ptr)->on_bmi(done[i]);
        }
        if (data_)
            data_->after_events();
        for (const bmi::UnexpectedMessage &m : requests)
            on_request(m);
        if (data_)
            data_->poll_store();
        if (meta_)
            meta_->poll();
        // A key revoked is refused within a tenth of a second of the
        // re-read; looking no more often keeps the syscall off the hot path.
        const auto now = std::chrono::steady_clock::now();
        if (now - keys_checked_ >= std::chrono::milliseconds(100)) {
            keys_checked_ = now;
            if (reload != nullptr && reload->exchange(false))
                reload_keys("SIGHUP");
            else if (keys_.changed())
                reload_keys("the file changed");
            else if (keys_stale_ && now >= keys_retry_)
                reload_keys("a retry");
        }
        if (metrics_)
            metrics_->tick(now);
    }
    if (busy())
        gossip::warning(Mask::server, "{}: stopped with requests still in progress", self_.name);
    return 0;
}

void Server::on_request(const bmi::UnexpectedMessage &message)
{
    const std::uint64_t arrived = metrics_ ? ServerMetrics::now_ns() : 0;
    std::shared_ptr<const Client> client = keys_.cluster();
    if (const std::optional<std::uint32_t> id = proto::request_key_id(message.data())) {
        client = keys_.find(*id);
        if (!client) {
            // No key to verify it with, none to MAC an answer with: a
            // client could not believe one (docs/protocol.md).
            log_refusal(key_refusals_, message.peer(),
                        fmt::format("dropped a request from {}: unknown client key id {:08x}",
                                    bmi_->rev_lookup(message.peer()), *id));
            if (metrics_)
                metrics_->dropped(Dropped::unknown_key);
            return;
        }
    }
    // The envelope's key must be the one the connection proved: a key
    // holder must not send under another key on its connection (it could
    // not MAC it anyway; this names it in the log), and a peer that proved
    // nothing is not served at all.
    if (const std::optional<bmi::Identity> proved = bmi_->peer_identity(message.peer());
        !envelope_key_proved(proved, client->name())) {
        log_refusal(mismatch_refusals_, message.peer(),
                    fmt::format("dropped a request from {}: its envelope names key {}, its "
                                "connection proved {}",
                                bmi_->rev_lookup(message.peer()), client->name(),
                                proved ? "key " + proved->name : std::string("no key")));
        if (metrics_)
            metrics_->dropped(Dropped::unknown_key);
        return;
    }
    const proto::DecodeResult decoded = proto::decode(message.data(), client->key, request_);
    if (!decoded) {
        gossip::warning(Mask::server, "dropped a request from {} (key {}): {}",
                        bmi_->rev_lookup(message.peer()), client->name(), decoded.message());
        if (metrics_)
            metrics_->dropped(Dropped::undecodable);
        return;
    }
    Origin origin{message.peer(),          message.tag(),     request_.request_id,
                  request_.session,        request_.seq,      request_.op(),
                  request_.knows_orphaned, std::move(client), arrived};
    origin.wants_capability = request_.wants_capability;
    if (!key_allowed(origin) || !addressed_here(origin))
        return;
    // Each key has its own sessions (a session id is in the clear).
    const std::optional<std::uint32_t> key_id = origin.client->key.id();
    const ReplayVerdict verdict =
        replay_.accept(key_id ? ReplayGuard::client_key(*key_id) : ReplayGuard::cluster_key,
                       request_.session, request_.seq, request_.time_ns, realtime_ns());
    if (verdict != ReplayVerdict::accepted) {
        gossip::warning(Mask::server, "rejected {} request {} from {} (key {}): {}",
                        proto::op_name(origin.op), origin.request_id,
                        bmi_->rev_lookup(message.peer()), origin.client->name(),
                        verdict_errno_text(verdict));
        // A replay gets no answer (the real request got one); a client
        // whose clock is off, or one too many, is told why.
        if (verdict != ReplayVerdict::replayed)
            respond_error(origin, verdict == ReplayVerdict::too_many_sessions ? EBUSY : ETIME);
        else if (metrics_)
            metrics_->dropped(Dropped::replayed);
        return;
    }
    // The key's policy: a uid outside its range is nobody; every id that
    // is root's goes unless it says no_root_squash (uid, primary gid and
    // group 0 among the groups), or a squashed caller would keep root's
    // group rights.
    request_.cred = origin.client->apply(std::move(request_.cred));
    gossip::debug(Mask::server, "{} request {} from {}", proto::op_name(origin.op),
                  origin.request_id, bmi_->rev_lookup(message.peer()));
    switch (origin.op) {
    case proto::Op::get_config:
        respond(origin, proto::GetConfigResponse{config_text_, self_index_});
        return;
    case proto::Op::status: {
        const auto *asked = std::get_if<proto::StatusRequest>(&request_.body);
        respond(origin, status(asked != nullptr ? asked->counters.value_or(0) : 0));
        return;
    }
    case proto::Op::statfs:
        respond(origin, statfs());
        return;
    default:
        break;
    }
    if (DataService::handles(origin.op)) {
        if (!data_) {
            gossip::warning(Mask::server, "{} request to {}, which has no data role",
                            proto::op_name(origin.op), self_.name);
            respond_error(origin, EOPNOTSUPP);
            return;
        }
        if (!capability_allows(origin))
            return;
        data_->handle(origin, request_.body);
        return;
    }
    if (MetaService::handles(origin.op)) {
        if (meta_) {
            meta_->handle(origin, request_.cred, request_.once, request_.body);
            return;
        }
        gossip::warning(Mask::server, "{} request to {}, which has no metadata role",
                        proto::op_name(origin.op), self_.name);
        respond_error(origin, EOPNOTSUPP);
    }
}

bool Server::addressed_here(const Origin &origin)
{
    std::string fault;
    if (request_.to) {
        if (request_.to->fs_id != cluster_.fs_id)
            fault = fmt::format("for file system id {} (this is {})", request_.to->fs_id,
                                cluster_.fs_id);
        else if (request_.to->server_index != self_index_)
            fault = fmt::format("for server index {} (this is {}, index {})",
                                request_.to->server_index, self_.name, self_index_);
    } else if (cluster_.defaults.require_bound && origin.op != proto::Op::get_config) {
        // get_config is exempt: a client given only a server's URL asks it
        // for the config before it knows that server's index.
        fault = "not bound to a server (require_bound = true)";
    }
    if (fault.empty())
        return true;
    log_refusal(refusals_, origin.peer,
                fmt::format("refused {} request {} from {} (key {}): {}", proto::op_name(origin.op),
                            origin.request_id, bmi_->rev_lookup(origin.peer), origin.client->name(),
                            fault));
    respond_error(origin, EINVAL);
    return false;
}

bool Server::capability_allows(const Origin &origin)
{
    const std::uint32_t needed = proto::capability_needed(origin.op);
    if (needed == 0)
        return true;
    std::string fault;
    const std::optional<proto::Capability> &cap = request_.cap;
    const std::optional<std::uint32_t> key_id = origin.client->key.id();
    if (!cap) {
        if (!cluster_.defaults.require_capabilities)
            return true;
        fault = "no capability";
    } else if (!proto::capability_signed(capability_key_, *cap)) {
        fault = "a capability with a bad tag (forged, or signed by another cluster)";
    } else if (cap->handle != request_handle(request_.body)) {
        fault = fmt::format("a capability for another file ({:#x})", cap->handle);
    } else if ((cap->rights & needed) == 0) {
        fault = fmt::format("a capability without the right (rights {:#x}, needs {:#x})",
                            cap->rights, needed);
    } else if (cap->fs_id != cluster_.fs_id) {
        fault = fmt::format("a capability of file system id {}", cap->fs_id);
    } else if (cap->keyed != key_id.has_value() || (key_id && cap->key_id != *key_id)) {
        fault = "another key's capability";
    } else if (cap->expires_ns + std::int64_t{cluster_.defaults.capability_skew_ms} * 1'000'000 <
               realtime_ns()) {
        fault = fmt::format("a capability expired {} s ago",
                            (realtime_ns() - cap->expires_ns) / 1'000'000'000);
    }
    if (fault.empty())
        return true;
    log_refusal(capability_refusals_, origin.peer,
                fmt::format("refused {} request {} from {} (key {}): {}", proto::op_name(origin.op),
                            origin.request_id, bmi_->rev_lookup(origin.peer), origin.client->name(),
                            fault));
    respond_error(origin, EACCES);
    return false;
}

bool Server::key_allowed(const Origin &origin)
{
    const Client &c = *origin.client;
    if (!c.revoked && !c.servers_only)
        return true;
    // What one server asks of another: a metadata server's reclaimer
    // (reclaimer.hpp) renews (a CLOSE of no file), removes data objects and
    // says they went.  Nothing else goes under the servers' key, so a
    // client node left with it is still refused, and named in the log.
    if (!c.revoked) {
        const auto *close = std::get_if<proto::CloseRequest>(&request_.body);
        const auto *cap = std::get_if<proto::CapabilityRequest>(&request_.body);
        if ((close != nullptr && close->refs.empty()) || origin.op == proto::Op::remove_object ||
            origin.op == proto::Op::orphan_done ||
            (cap != nullptr && cap->rights == proto::cap_destroy))
            return true;
    }
    log_refusal(key_refusals_, origin.peer,
                fmt::format("refused {} request {} from {}: {}", proto::op_name(origin.op),
                            origin.request_id, bmi_->rev_lookup(origin.peer),
                            c.revoked ? fmt::format("client key {} is revoked", c.name())
                                      : fmt::format("the cluster key is the servers' own once "
                                                    "client_keys is set ({})",
                                                    keys_.path())));
    respond_error(origin, EACCES);
    return false;
}

void Server::log_bulk_refusal(const Origin &origin, const std::string &why)
{
    log_refusal(bulk_refusals_, origin.peer,
                fmt::format("refused {} request {} from {} (key {}): {}", proto::op_name(origin.op),
                            origin.request_id, bmi_->rev_lookup(origin.peer), origin.client->name(),
                            why));
}

void Server::log_counted(Refusals &r, const std::string &text)
{
    // Once a minute, with the count of those not logged, so that a flood
    // of them cannot flood the log.
    const auto now = std::chrono::steady_clock::now();
    if (r.logged == std::chrono::steady_clock::time_point{} ||
        now - r.logged >= std::chrono::minutes(1)) {
        gossip::warning(Mask::server, "{}{}", text,
                        r.unlogged == 0 ? std::string()
                                        : fmt::format(" ({} more refused since the last such "
                                                      "message)",
                                                      r.unlogged));
        r.logged = now;
        r.unlogged = 0;
    } else {
        ++r.unlogged;
    }
}

void Server::log_refusal(RefusalLog &log, bmi::Addr peer, const std::string &text)
{
    // Per peer.
    constexpr std::size_t max_tracked_peers = 4096;
    if (log.size() >= max_tracked_peers && !log.contains(peer))
        log.clear();
    log_counted(log[peer], text);
}

void Server::log_handshake_refusal(std::optional<std::uint32_t> id, const Client *client)
{
    if (client == nullptr) {
        // All unknown ids share one line: a peer picks the id freely.
        log_counted(
            unknown_key_handshakes_,
            fmt::format("connection refused: unknown client key id {:08x}", id.value_or(0)));
        return;
    }
    // Known keys only: at most as many entries as the table has keys.
    log_counted(handshake_refusals_[id.value_or(0)],
                fmt::format("connection refused: client key {} is revoked", client->name()));
}

void Server::reload_keys(const char *why)
{
    if (!keys_.has_client_keys())
        return;
    std::string error;
    std::string summary;
    if (!keys_.load(error, summary)) {
        // Tried again every 10 s: a revocation in an edit that was refused
        // (or a file the server could not read) must not wait for the next
        // edit to take effect once the file is fixed.
        gossip::error(Mask::server,
                      "client keys not reloaded ({}), the old table stays (next try in 10 s): {}",
                      why, error);
        keys_stale_ = true;
        keys_retry_ = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        return;
    }
    keys_stale_ = false;
    gossip::warning(Mask::server, "client keys reloaded ({}): {}", why, summary);
    // Revoked, removed or replaced keys lose their connections now: their
    // ops fail, and reconnecting needs a key the table accepts.
    for (const std::string &name : keys_.take_shut_out()) {
        if (const std::size_t n = bmi_->drop_identity(name); n > 0)
            gossip::warning(Mask::server, "dropped the connections of {} peer(s) of key {}", n,
                            name);
    }
}

proto::StatusResponse Server::status(std::uint16_t counters) const
{
    proto::StatusResponse s;
    s.server_name = self_.name;
    s.version = PVFS_VERSION;
    s.config_hash = config_hash_;
    s.roles = (self_.metadata ? proto::role_metadata : 0U) | (self_.data ? proto::role_data : 0U);
    s.uptime_ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::steady_clock::now() - started_)
                                                 .count());
    if (data_) {
        s.bulk_message_bytes = data_->message_bytes();
        s.bulk_rdma_bytes = data_->rdma_bytes();
    }
    if (counters != 0 && metrics_) {
        proto::ServerCounters &c = s.counters.emplace();
        metrics_->counters(c);
        // The version asked for, or ours if older: the asker decodes it.
        c.version = std::min(counters, proto::counters_version);
        c.replies_in_flight = replies_in_flight_.size();
        c.connections = bmi_->get_info(bmi::Info::open_connections);
        if (data_) {
            c.data_active = data_->active();
            const DataService::BulkStats &b = data_->bulk_stats();
            c.bulk_write = b.write;
            c.bulk_read = b.read;
            c.buffer_waits = b.buffer_waits;
            c.buffer_wait_ns = b.buffer_wait_ns;
        }
        if (meta_) {
            c.meta_pending = meta_->active();
            c.meta_commits = meta_->commits();
        }
    }
    return s;
}

proto::StatfsResponse Server::statfs() const
{
    proto::StatfsResponse r;
    if (data_) {
        const data::StatFs fs = data_->statfs();
        r.total_bytes = fs.total_bytes;
        r.free_bytes = fs.free_bytes;
        r.avail_bytes = fs.available_bytes;
        r.total_objects = fs.total_objects;
        r.free_objects = fs.free_objects;
    }
    if (meta_) {
        const meta::Stats s = meta_->stats();
        r.total_objects = s.objects + s.free_handles;
        r.free_objects = s.free_handles;
    }
    return r;
}

void Server::respond(const Origin &origin, proto::ResponseBody body)
{
    proto::Response r;
    r.status = 0;
    r.request_id = origin.request_id;
    r.session = origin.session;
    r.seq = origin.seq;
    r.body = std::move(body);
    send(origin, r);
}

void Server::respond_error(const Origin &origin, int error)
{
    proto::Response r;
    r.status = error > 0 ? error : EIO;
    r.request_id = origin.request_id;
    r.session = origin.session;
    r.seq = origin.seq;
    r.body = empty_body(origin.op);
    send(origin, r);
}

void Server::send(const Origin &origin, proto::Response &response)
{
    if (metrics_ && origin.arrived_ns != 0) {
        metrics_->answered(origin.op, response.status, origin.arrived_ns);
        if (response.status == 0) {
            if (const auto *r = std::get_if<proto::ReadResponse>(&response.body))
                metrics_->data_bytes(false, r->bytes);
            else if (const auto *w = std::get_if<proto::WriteResponse>(&response.body))
                metrics_->data_bytes(true, w->bytes);
        }
    }
    std::unique_ptr<Reply> reply;
    if (free_replies_.empty()) {
        reply = std::make_unique<Reply>();
        reply->server = this;
    } else {
        reply = std::move(free_replies_.back());
        free_replies_.pop_back();
    }
    const Client &client = origin.client ? *origin.client : *keys_.cluster();
    const std::size_t size = proto::encode(response, client.key, reply->bytes);
    const bmi::Post p =
        bmi_->post_send(origin.peer, reply->bytes.data(), size, origin.tag, reply.get(), ctx_);
    if (!p.ok()) {
        gossip::warning(Mask::server, "cannot answer {} request {} from {}: {}",
                        proto::op_name(origin.op), origin.request_id, bmi_->rev_lookup(origin.peer),
                        errno_text(-p.error));
    }
    if (!p.ok() || p.completed) {
        free_replies_.push_back(std::move(reply));
        return;
    }
    Reply *key = reply.get();
    replies_in_flight_.emplace(key, std::move(reply));
}

void Server::reply_done(Reply &reply, const bmi::Completion &done)
{
    if (done.error != 0) {
        gossip::debug(Mask::server, "a response to {} was not delivered: {}",
                      bmi_->rev_lookup(done.peer), errno_text(-done.error));
    }
    const auto it = replies_in_flight_.find(&reply);
    if (it == replies_in_flight_.end())
        return;
    // A few spare buffers are kept; an unusually large one is let go.
    if (free_replies_.size() < 256 && it->second->bytes.capacity() <= std::size_t{256} * 1024U)
        free_replies_.push_back(std::move(it->second));
    replies_in_flight_.erase(it);
}

} // namespace pvfs::server
