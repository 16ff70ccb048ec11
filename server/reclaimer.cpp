// The metadata server's own reclaimer (reclaimer.hpp).
#include "reclaimer.hpp"

#include <cerrno>
#include <memory>
#include <system_error>
#include <utility>

#include "pvfs/client.hpp"
#include "pvfs/gossip.hpp"

namespace pvfs::server {

namespace {

using gossip::Mask;

// Rounds of one pass (each hands out at most a few dozen records): a
// bound, so that a pass that keeps being handed records (new ones come as
// fast as it finishes them) still lets the thread look at stop_.
constexpr int max_rounds_per_pass = 256;
constexpr std::uint64_t cancel_id = 1;
constexpr auto failure_log_interval = std::chrono::minutes(1);

} // namespace

Reclaimer::Reclaimer(ReclaimerOptions options, std::function<std::size_t()> due)
    : options_(std::move(options)), due_(std::move(due)), thread_([this] { run(); })
{
}

Reclaimer::~Reclaimer()
{
    {
        const std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

bool Reclaimer::stopping() const
{
    const std::lock_guard lock(mutex_);
    return stop_;
}

void Reclaimer::run()
{
    std::shared_ptr<client::Loop> loop;
    std::unique_ptr<client::Client> client;
    // One line a minute while the cluster cannot be reached, with a count.
    std::chrono::steady_clock::time_point logged{};
    std::uint64_t unlogged = 0;
    const auto complain = [&](const std::string &what) {
        const auto now = std::chrono::steady_clock::now();
        if (logged != std::chrono::steady_clock::time_point{} &&
            now - logged < failure_log_interval) {
            ++unlogged;
            return;
        }
        gossip::warning(Mask::meta, "reclaimer: {} ({} more since the last line)", what, unlogged);
        logged = now;
        unlogged = 0;
    };
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            if (wake_.wait_for(lock, options_.tick, [this] { return stop_; }))
                return;
        }
        const std::size_t due = due_();
        if (due == 0)
            continue;
        if (!client) {
            std::string error;
            if (!loop)
                loop = client::Loop::create(error);
            if (loop) {
                client::Options o;
                o.target = options_.config_path;
                o.key_file = options_.key_file;
                o.method = options_.method;
                o.loop = loop;
                o.request_timeout = options_.request_timeout;
                o.check_data_access = false;
                client = client::Client::connect(o, error);
            }
            if (!client) {
                complain("cannot reach the cluster: " + error);
                continue;
            }
        }
        std::size_t handed = 0;
        int rc = 0;
        for (int round = 0; round < max_rounds_per_pass; ++round) {
            Task<int> task = client->co_reclaim_round(options_.meta_index);
            loop->set_context(Credentials{}, cancel_id);
            task.start();
            while (!task.done()) {
                loop->poll(100);
                if (stopping())
                    static_cast<void>(loop->cancel(cancel_id));
            }
            rc = task.result();
            if (rc <= 0)
                break;
            handed += static_cast<std::size_t>(rc);
            if (stopping())
                return;
        }
        if (rc < 0 && rc != -ECANCELED)
            complain("a round failed: " + client::error_text(rc));
        const std::size_t left = due_();
        gossip::info(Mask::meta,
                     "reclaimer: {} records of data objects to remove were due, {} handed to "
                     "me, {} due now",
                     due, handed, left);
    }
}

} // namespace pvfs::server
