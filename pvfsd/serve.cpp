#include "channel.hpp"
#include "handler.hpp"

#include <pvfs/gossip.hpp>

#include <sys/signalfd.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace pvfs::pvfsd {

namespace {

namespace gossip = pvfs::gossip;

// The fds serve() watches, unwatched however it returns (the loop outlives
// it).
class Watches {
public:
    explicit Watches(client::Loop &loop) : loop_(loop) {}
    ~Watches()
    {
        for (const int fd : fds_)
            loop_.unwatch_fd(fd);
    }
    Watches(const Watches &) = delete;
    Watches &operator=(const Watches &) = delete;
    Watches(Watches &&) = delete;
    Watches &operator=(Watches &&) = delete;

    bool add(int fd)
    {
        if (const int rc = loop_.watch_fd(fd); rc != 0) {
            gossip::error(gossip::Mask::pvfsd, "cannot watch fd {}: {}", fd, strerrordesc_np(-rc));
            return false;
        }
        fds_.push_back(fd);
        return true;
    }
    void remove(int fd)
    {
        if (std::erase(fds_, fd) > 0)
            loop_.unwatch_fd(fd);
    }

private:
    client::Loop &loop_;
    std::vector<int> fds_;
};

} // namespace

int serve(Channel &channel, Handler &handler, client::Loop &loop, const ServeOptions &options)
{
    Watches watches(loop);
    if (!watches.add(channel.fd()) || (options.signal_fd >= 0 && !watches.add(options.signal_fd)))
        return 1;
    const Channel::Starter start = [&handler](Upcall up) { handler.start(std::move(up)); };
    const auto answer = [&] {
        for (auto &reply : handler.take_finished())
            channel.send(std::move(reply), start);
    };
    // Each is read only after the loop saw it readable (both at start): a
    // read that fails with EAGAIN is a system call per request wasted.
    bool signal_ready = options.signal_fd >= 0;
    bool channel_ready = true;
    std::vector<int> ready;
    for (;;) {
        signalfd_siginfo si{};
        // Like the channel, to EAGAIN: a second queued signal brings no new
        // wake-up of its own.
        while (signal_ready && ::read(options.signal_fd, &si, sizeof(si)) > 0) {
            if (options.on_signal && options.on_signal(static_cast<int>(si.ssi_signo)))
                return 0;
        }
        signal_ready = false;
        if (channel_ready) {
            switch (channel.receive(start)) {
            case Channel::Received::drained:
                channel_ready = false;
                break;
            case Channel::Received::ended:
                answer();
                if (channel.owes()) {
                    // What was answered already reaches the servers (or a
                    // signal ends it: pvfs-fuse's SIGTERM, a hard mount's
                    // way out).  The ended channel is readable for ever.
                    gossip::info(gossip::Mask::pvfsd,
                                 "the channel ended: finishing the writes it answered");
                    watches.remove(channel.fd());
                    while (channel.owes()) {
                        if (handler.in_flight() == 0) {
                            // Owed, but nothing runs that could pay it.
                            gossip::error(gossip::Mask::pvfsd,
                                          "the channel owes writes no request is doing");
                            break;
                        }
                        while (::read(options.signal_fd, &si, sizeof(si)) > 0) {
                            if (options.on_signal &&
                                options.on_signal(static_cast<int>(si.ssi_signo)))
                                return 0;
                        }
                        loop.poll(handler.idle_ms(1000));
                        handler.run_timers();
                        answer();
                    }
                }
                return 0;
            case Channel::Received::failed:
                return 1;
            }
        }
        answer();
        loop.poll(handler.idle_ms(1000));
        handler.run_timers();
        answer();
        ready.clear();
        loop.take_ready_fds(ready);
        for (const int fd : ready) {
            signal_ready = signal_ready || fd == options.signal_fd;
            channel_ready = channel_ready || fd == channel.fd();
        }
    }
}

} // namespace pvfs::pvfsd
