// The metadata role of pvfs-server: the namespace requests over the
// metadata store (server/meta).  Reads run on the event loop in LMDB read
// transactions; changes go to one committer thread that applies everything
// queued as one WriteBatch, commits it with one sync and hands the results
// back through an eventfd the loop watches (group commit: under load many
// requests share one fsync, and no reply leaves before its change is
// durable).
#ifndef PVFS_SERVER_META_SERVICE_HPP
#define PVFS_SERVER_META_SERVICE_HPP

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core.hpp"
#include "meta_store.hpp"
#include "pvfs/proto.hpp"
#include "pvfs/unique_fd.hpp"

namespace pvfs::server {

class MetaService {
public:
    // `store` is open.  Throws std::system_error when the eventfd or the
    // thread cannot be made.
    MetaService(Loop &loop, meta::Store store);
    ~MetaService();
    MetaService(const MetaService &) = delete;
    MetaService &operator=(const MetaService &) = delete;
    MetaService(MetaService &&) = delete;
    MetaService &operator=(MetaService &&) = delete;

    [[nodiscard]] static bool handles(proto::Op op) noexcept;

    // Serves a request (its body may be moved from).
    void handle(const Origin &origin, const Credentials &cred, proto::RequestBody &body);

    // Readable when committed results wait; poll() answers them.
    [[nodiscard]] int event_fd() const noexcept { return event_.get(); }
    void poll();

    [[nodiscard]] meta::Stats stats() const;
    // Changes queued, being committed, or committed and not yet answered.
    [[nodiscard]] std::size_t active() const;

    // Commits so far and the changes they carried (for logs and tests).
    [[nodiscard]] std::uint64_t commits() const;

private:
    struct Job {
        Origin origin;
        Credentials cred;
        proto::RequestBody body;
        int error = 0; // positive errno, or 0
        proto::ResponseBody response;
    };

    void respond_read(const Origin &origin, const Credentials &cred, proto::RequestBody &body);
    void committer();
    static void apply(meta::WriteBatch &batch, Job &job);

    Loop &loop_;
    meta::Store store_;
    UniqueFd event_;

    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Job> queued_;    // for the committer
    std::vector<Job> finished_; // for the loop
    std::size_t committing_ = 0;
    std::uint64_t commits_ = 0;
    bool stop_ = false;
    std::thread thread_;
};

} // namespace pvfs::server

#endif // PVFS_SERVER_META_SERVICE_HPP
