#include "memory_channel.hpp"

#include <pvfs/gossip.hpp>

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

namespace pvfs::pvfsd {

namespace gossip = pvfs::gossip;

MemoryChannel::MemoryChannel(std::size_t slot_count, std::size_t slot_size, std::uint64_t features)
    : slots_(slot_count * slot_size), slot_size_(slot_size), features_(features),
      event_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))
{
    if (!event_.valid())
        throw std::system_error(errno, std::generic_category(), "eventfd");
}

void MemoryChannel::wake() const
{
    const std::uint64_t one = 1;
    // EAGAIN only when the counter would overflow: it is readable then.
    if (::write(event_.get(), &one, sizeof(one)) < 0 && errno != EAGAIN)
        throw std::system_error(errno, std::generic_category(), "eventfd write");
}

void MemoryChannel::push(std::vector<std::byte> upcall)
{
    queue_.push_back(std::move(upcall));
    wake();
}

void MemoryChannel::close()
{
    closed_ = true;
    wake();
}

std::vector<std::vector<std::byte>> MemoryChannel::take_sent()
{
    return std::exchange(sent_, {});
}

Channel::Received MemoryChannel::receive(const Starter &start)
{
    std::uint64_t count = 0;
    // EAGAIN: woken by nothing new; the queue is looked at all the same.
    if (::read(event_.get(), &count, sizeof(count)) < 0 && errno != EAGAIN)
        throw std::system_error(errno, std::generic_category(), "eventfd read");
    // In the order pushed, each off the queue before it starts.
    while (!queue_.empty()) {
        const std::vector<std::byte> bytes = std::move(queue_.front());
        queue_.pop_front();
        std::string why;
        auto up = Upcall::parse(bytes, why);
        if (!up) {
            gossip::error(gossip::Mask::dev, "malformed upcall ignored: {}", why);
            ++malformed_;
            last_error_ = why;
            continue;
        }
        start(std::move(*up));
    }
    return closed_ ? Received::ended : Received::drained;
}

void MemoryChannel::send(std::vector<std::byte> downcall, const Starter & /*start*/)
{
    if (on_send)
        on_send(downcall);
    sent_.push_back(std::move(downcall));
}

} // namespace pvfs::pvfsd
