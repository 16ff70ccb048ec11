// The metadata server's own reclaimer: removes the data objects of
// unlinked files that no client removed (docs/metadata.md "Orphans and
// open references").  Clients finish most of them at their closes and
// renewals; what is left for reclaim_after (a holder died, or nobody
// closed anything after a restart's grace) this thread finishes, as a
// client of the cluster under the server key, one renewal round at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace pvfs::server {

struct ReclaimerOptions {
    std::string config_path; // the cluster config, as the server read it
    std::string key_file;    // the server key
    std::string method;      // "tcp" or "ib": how this server reaches the data servers
    std::uint32_t meta_index = 0;
    // How often it asks whether there is work, and how long a request of
    // its may take.
    std::chrono::milliseconds tick{std::chrono::seconds(5)};
    std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
};

class Reclaimer {
public:
    // `due` answers how many records are due (MetaService::reclaims_due);
    // it is called from the reclaimer's thread.  Throws std::system_error
    // when the thread cannot start.
    Reclaimer(ReclaimerOptions options, std::function<std::size_t()> due);
    // Stops the thread: a round in progress is cancelled.
    ~Reclaimer();
    Reclaimer(const Reclaimer &) = delete;
    Reclaimer &operator=(const Reclaimer &) = delete;
    Reclaimer(Reclaimer &&) = delete;
    Reclaimer &operator=(Reclaimer &&) = delete;

private:
    void run();
    // Whether the destructor asked the thread to stop.
    [[nodiscard]] bool stopping() const;

    ReclaimerOptions options_;
    std::function<std::size_t()> due_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_ = false;
    std::thread thread_; // last: started once the rest exists
};

} // namespace pvfs::server
