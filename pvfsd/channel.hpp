// A front end of the Handler: where its upcalls come from, where its
// downcalls go and the data slots its READs and WRITEs name.  pvfsd's is
// pvfs.ko's device (pvfsd/device.hpp); pvfs-fuse's a FUSE session, whose
// requests it turns into upcalls (fuse/).  serve() runs one on a loop.
#pragma once

#include "upcall.hpp"

#include <pvfs/client.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace pvfs::pvfsd {

class Handler;

class Channel {
public:
    Channel() = default;
    virtual ~Channel() = default;
    Channel(const Channel &) = delete;
    Channel &operator=(const Channel &) = delete;
    Channel(Channel &&) = delete;
    Channel &operator=(Channel &&) = delete;

    // The data slots, slot_size() bytes each: a READ's or WRITE's `slot`
    // indexes them (the Handler checks every index and length against
    // them).  They stay valid while the channel lives.
    [[nodiscard]] virtual std::span<std::byte> slots() = 0;
    [[nodiscard]] virtual std::size_t slot_size() const = 0;
    // PVFSD_FEAT_* the requests may use (the device: what both sides
    // offered at HELLO).
    [[nodiscard]] virtual std::uint64_t features() const = 0;
    // What serve() watches: readable when requests may be waiting.
    [[nodiscard]] virtual int fd() const = 0;

    // What starts an upcall: Handler::start, given by serve().
    using Starter = std::function<void(Upcall)>;

    enum class Received {
        drained, // every waiting request went to `start`
        ended,   // the other side is gone for good (a FUSE unmount)
        failed,  // an error, logged: serving stops
    };
    // Reads the requests waiting, until none is, and hands each to `start`
    // as it comes.
    virtual Received receive(const Starter &start) = 0;
    // A finished upcall's downcall (Handler::take_finished).  Delivering it
    // may fail (the asker is gone): the channel logs that, nothing else can
    // be done about it.  A front end may start upcalls of its own here
    // (pvfs-fuse: a READ that waited for the slot this answer frees).
    virtual void send(std::vector<std::byte> downcall, const Starter &start) = 0;
    // Whether the channel still owes the servers work it answered already
    // (pvfs-fuse's writes behind): after `ended`, serve() runs until it
    // owes nothing, so an aborted FUSE connection loses no written bytes.
    [[nodiscard]] virtual bool owes() const { return false; }
};

struct ServeOptions {
    // A signalfd serve() watches too, and what to do with each signal read
    // from it: true stops serving.
    int signal_fd = -1;
    std::function<bool(int signo)> on_signal;
};

// Runs `channel` on `loop` through `handler` (built on the same loop and
// channel): reads requests when the channel's fd is readable, starts them,
// sends their answers as they finish and runs the handler's timers.
// Returns 0 when a signal stopped it or the channel ended, 1 when the
// channel failed.
int serve(Channel &channel, Handler &handler, client::Loop &loop, const ServeOptions &options);

} // namespace pvfs::pvfsd
