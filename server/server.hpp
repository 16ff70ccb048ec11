// pvfs-server's event loop: one thread that owns BMI, the services of its
// roles and every request (docs/server.md).  It sleeps only in
// Bmi::testany, with the data store's completion fd watched, so a new
// request, a finished transfer and a finished disk operation all wake it.
#ifndef PVFS_SERVER_SERVER_HPP
#define PVFS_SERVER_SERVER_HPP

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bmi/bmi.hpp"
#include "core.hpp"
#include "data_service.hpp"
#include "key_table.hpp"
#include "meta_service.hpp"
#include "pvfs/config.hpp"
#include "pvfs/proto.hpp"
#include "reclaimer.hpp"
#include "replay_guard.hpp"
#include "server_metrics.hpp"

namespace pvfs::server {

struct ServerOptions {
    std::string config_path;
    std::string name; // which server of the config this is; empty: the only one
    // Override the config's metrics_file and metrics_interval when not
    // empty (resolve_metrics_options).
    std::string metrics_file;
    std::string metrics_interval;
};

class Server final : public Loop {
public:
    // Loads the config and the key, opens the stores of this server's roles
    // and starts listening.  nullptr and `error` set when it cannot.
    [[nodiscard]] static std::unique_ptr<Server> create(const ServerOptions &options,
                                                        std::string &error);
    ~Server() override;
    Server(const Server &) = delete;
    Server &operator=(const Server &) = delete;
    Server(Server &&) = delete;
    Server &operator=(Server &&) = delete;

    // Serves until `stop` becomes true, then finishes the requests in
    // progress (for at most a few seconds).  Whenever `reload` is set (by
    // SIGHUP) it is cleared and the client keys file re-read.  Returns the
    // exit status.
    int run(const std::atomic<bool> &stop, std::atomic<bool> *reload = nullptr);

    [[nodiscard]] const std::string &name() const noexcept { return self_.name; }
    [[nodiscard]] std::vector<std::string> listen_addresses() const
    {
        return bmi_->listen_addresses();
    }

    // Loop
    [[nodiscard]] bmi::Bmi &bmi() noexcept override { return *bmi_; }
    [[nodiscard]] bmi::ContextId context() const noexcept override { return ctx_; }
    void respond(const Origin &origin, proto::ResponseBody body) override;
    void respond_error(const Origin &origin, int error) override;
    void log_bulk_refusal(const Origin &origin, const std::string &why) override;

private:
    struct Reply;

    // Refused requests of one peer: when one was last logged and how many
    // went unlogged since.
    struct Refusals {
        std::chrono::steady_clock::time_point logged{};
        std::uint64_t unlogged = 0;
    };
    // Bounded: cleared when it grows large.
    using RefusalLog = std::unordered_map<bmi::Addr, Refusals>;

    Server(config::Cluster cluster, std::size_t self_index, proto::Key key);

    void on_request(const bmi::UnexpectedMessage &message);
    // Whether the request's key may be used (not revoked, not the cluster
    // key once client_keys is set); if not, it is logged (at most once a
    // minute per peer) and answered with EACCES.
    bool key_allowed(const Origin &origin);
    // Re-reads the client keys file; `why` says what asked for it.
    void reload_keys(const char *why);
    // Logs `text` about a refused request from `peer`, unless one such line
    // for that peer went to the log less than a minute ago (then it is
    // counted, and the count goes with the next line).
    static void log_refusal(RefusalLog &log, bmi::Addr peer, const std::string &text);
    static void log_counted(Refusals &r, const std::string &text);
    // Whether the decoded request_ is for this server (docs/protocol.md
    // "Destination binding"); if not, it is logged (at most once a minute
    // per peer) and answered with EINVAL.
    bool addressed_here(const Origin &origin);
    // Whether the decoded data request_ carries the capability its op
    // needs (docs/protocol.md "Capabilities"); if not, it is logged (at
    // most once a minute per peer) and answered with EACCES.
    bool capability_allows(const Origin &origin);
    void send(const Origin &origin, proto::Response &response);
    void reply_done(Reply &reply, const bmi::Completion &done);
    // With the counters (pvfs-top) when `counters`, the newest counters
    // version the asker reads, is not 0.
    [[nodiscard]] proto::StatusResponse status(std::uint16_t counters = 0) const;
    [[nodiscard]] proto::StatfsResponse statfs() const;
    [[nodiscard]] bool busy() const noexcept;
    // Starts keeping metrics, written to `path` (if not empty) every `interval`: the
    // first write happens here, so that a file that cannot be written
    // stops the server at start.  False with `error` set when it cannot.
    bool start_metrics(const std::string &path, std::chrono::milliseconds interval,
                       std::string &error);

    config::Cluster cluster_;
    config::Server self_;
    std::uint32_t self_index_;
    std::string config_text_;
    std::array<std::byte, 32> config_hash_{};
    proto::CapabilityKey capability_key_{}; // from the cluster key, before keys_ takes it
    KeyTable keys_;
    bool keys_stale_ = false; // the last re-read failed: retried at keys_retry_
    std::chrono::steady_clock::time_point keys_retry_{};
    ReplayGuard replay_;
    std::unique_ptr<bmi::Bmi> bmi_;
    bmi::ContextId ctx_ = 0;
    std::unique_ptr<DataService> data_;
    std::unique_ptr<MetaService> meta_;
    std::unique_ptr<Reclaimer> reclaimer_; // after meta_: it asks meta_, so it goes first
    std::chrono::steady_clock::time_point started_;
    std::chrono::steady_clock::time_point keys_checked_{};

    proto::Request request_;         // decoded into again and again (its buffers reused)
    RefusalLog refusals_;            // misdirected or unbound
    RefusalLog key_refusals_;        // unknown, revoked or servers-only keys
    RefusalLog mismatch_refusals_;   // envelope key not the connection's proved key
    RefusalLog bulk_refusals_;       // chunks whose MAC failed, requests without MACs
    RefusalLog capability_refusals_; // data requests without a capability that allows them
    // Handshake refusals (the authenticator's lookup): at most one line a
    // minute per revoked key of the table, and one for all unknown key ids
    // together, which a peer picks freely (one line per id let a flood of
    // random ids log every connection).
    std::unordered_map<std::uint32_t, Refusals> handshake_refusals_;
    Refusals unknown_key_handshakes_;
    void log_handshake_refusal(std::optional<std::uint32_t> id, const Client *client);
    std::unordered_map<Reply *, std::unique_ptr<Reply>> replies_in_flight_;
    std::vector<std::unique_ptr<Reply>> free_replies_;
    // Last: its gauges read the members above, and it goes first.
    std::unique_ptr<ServerMetrics> metrics_; // null only before start_metrics
};

} // namespace pvfs::server

#endif // PVFS_SERVER_SERVER_HPP
