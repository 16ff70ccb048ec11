#include "device.hpp"

#include <pvfs/gossip.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace pvfs::pvfsd {

namespace {

namespace gossip = pvfs::gossip;

// The features a pvfsd of channel minor `minor` offers.
static_assert(PVFSD_DEV_MINOR == 1, "features_of_minor knows minors 0 and 1");
std::uint64_t features_of_minor(std::uint32_t minor)
{
    return minor == 0 ? PVFSD_FEATURES_MINOR0 : PVFSD_FEATURES_MINOR1;
}

std::string open_error(int err, const std::string &device)
{
    switch (err) {
    case ENOENT:
    case ENXIO:
    case ENODEV:
        return device + " does not exist: is pvfs.ko loaded? (modprobe pvfs)";
    case EBUSY:
        return device + " is busy: another pvfsd runs";
    case EPERM:
    case EACCES:
        return device + ": pvfsd must run as root (CAP_SYS_ADMIN)";
    default:
        return device + ": " + strerrordesc_np(err);
    }
}

bool write_all(int fd, const std::vector<std::byte> &msg, int &err)
{
    const ssize_t n = ::write(fd, msg.data(), msg.size());
    err = n < 0 ? errno : 0;
    return n == static_cast<ssize_t>(msg.size());
}

pvfsd_msg_hdr header_of(const std::vector<std::byte> &msg)
{
    pvfsd_msg_hdr h{};
    std::memcpy(&h, msg.data(), std::min(sizeof h, msg.size()));
    return h;
}

// HELLO: our minor, features and the slots we want; the kernel answers with
// its minor and features and the slots it grants.  `granted.features` is
// then what both offered.
bool hello(int fd, const DeviceSettings &s, pvfsd_hello &granted)
{
    Downcall d(PVFSD_OP_HELLO, 0);
    pvfsd_hello h{};
    h.slot_size = s.slot_size;
    h.slot_count = s.slots;
    h.minor = s.channel_minor;
    h.features = features_of_minor(s.channel_minor);
    d.put(h);
    int err = 0;
    if (!write_all(fd, d.finish(0), err)) {
        gossip::error(gossip::Mask::dev, "HELLO refused by pvfs.ko: {}{}", strerrordesc_np(err),
                      err == EPROTO ? " (pvfsd and pvfs.ko speak different channel versions)" : "");
        return false;
    }
    std::vector<std::byte> buf(PVFSD_DEV_MAX_MSG);
    for (int tries = 0; tries < 100; ++tries) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EAGAIN) {
            pollfd p{fd, POLLIN, 0};
            ::poll(&p, 1, 100);
            continue;
        }
        std::string why;
        const auto up = n > 0
                            ? Upcall::parse(std::span(buf).first(static_cast<std::size_t>(n)), why)
                            : std::nullopt;
        const auto g = up ? up->body<pvfsd_hello>() : std::nullopt;
        if (!g || up->op() != PVFSD_OP_HELLO) {
            gossip::error(gossip::Mask::dev, "no HELLO answer from pvfs.ko: {}",
                          n < 0 ? strerrordesc_np(errno) : why.c_str());
            return false;
        }
        // A later minor's HELLO may be longer: its first fields are ours.
        granted = *g;
        gossip::info(gossip::Mask::dev,
                     "pvfs.ko speaks channel {}.{}, features {:#x}; using {:#x} (pvfsd: {}.{}, "
                     "{:#x})",
                     PVFSD_DEV_MAJOR, g->minor, g->features, g->features & h.features,
                     PVFSD_DEV_MAJOR, h.minor, h.features);
        granted.features = g->features & h.features;
        return true;
    }
    gossip::error(gossip::Mask::dev, "pvfs.ko did not answer HELLO within 10 s");
    return false;
}

} // namespace

SlotMapping::SlotMapping(int fd, std::size_t bytes)
{
    void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
        addr_ = p;
        bytes_ = bytes;
    }
}

SlotMapping::~SlotMapping()
{
    if (addr_ != nullptr)
        ::munmap(addr_, bytes_);
}

DeviceChannel::DeviceChannel(DeviceSettings settings, UniqueFd dev)
    : settings_(std::move(settings)), dev_(std::move(dev)), buf_(PVFSD_DEV_MAX_MSG)
{
}

std::unique_ptr<DeviceChannel> DeviceChannel::open(const DeviceSettings &settings)
{
    UniqueFd dev(::open(settings.path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!dev.valid()) {
        gossip::error(gossip::Mask::pvfsd, "{}", open_error(errno, settings.path));
        return nullptr;
    }
    // Not make_unique: the constructor is private.
    std::unique_ptr<DeviceChannel> ch(new DeviceChannel(settings, std::move(dev)));
    if (!hello(ch->dev_.get(), settings, ch->granted_))
        return nullptr;
    const std::size_t area = std::size_t{ch->granted_.slot_size} * ch->granted_.slot_count;
    ch->slots_ = std::make_unique<SlotMapping>(ch->dev_.get(), area);
    if (!ch->slots_->valid()) {
        gossip::error(gossip::Mask::dev, "cannot map {} bytes of slots: {}", area,
                      strerrordesc_np(errno));
        return nullptr;
    }
    gossip::info(gossip::Mask::pvfsd, "attached to {}: {} slots of {} KiB", settings.path,
                 ch->granted_.slot_count, ch->granted_.slot_size >> 10U);
    return ch;
}

Channel::Received DeviceChannel::receive(const Starter &start)
{
    // serve() calls this once the loop saw the device readable, which may
    // report only a new wake-up: read to EAGAIN.
    for (;;) {
        const ssize_t n = ::read(dev_.get(), buf_.data(), buf_.size());
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return Received::drained;
            gossip::error(gossip::Mask::dev, "read {}: {}", settings_.path, strerrordesc_np(errno));
            return Received::failed;
        }
        std::string why;
        auto up = Upcall::parse(std::span(buf_).first(static_cast<std::size_t>(n)), why);
        if (!up) {
            gossip::error(gossip::Mask::dev, "malformed upcall ignored: {}", why);
            continue;
        }
        gossip::debug(gossip::Mask::dev, "upcall {} tag {} ({} bytes)", op_name(up->op()),
                      up->tag(), n);
        start(std::move(*up));
    }
}

void DeviceChannel::send(std::vector<std::byte> downcall, const Starter & /*start*/)
{
    const pvfsd_msg_hdr h = header_of(downcall);
    gossip::debug(gossip::Mask::dev, "answer to {} tag {}", op_name(h.op), h.tag);
    if (!settings_.die_after_reply.empty() && settings_.die_after_reply == op_name(h.op)) {
        gossip::warning(gossip::Mask::pvfsd,
                        "--test-die-after-reply {}: exiting before the answer to tag {} (status "
                        "{})",
                        settings_.die_after_reply, h.tag, h.status);
        gossip::flush();
        // As a crash would: no destructor ends the mounts' sessions.
        ::_exit(3);
    }
    int err = 0;
    if (!write_all(dev_.get(), downcall, err))
        gossip::warning(gossip::Mask::dev, "pvfs.ko refused the answer to {} tag {}: {}",
                        op_name(h.op), h.tag, strerrordesc_np(err));
}

} // namespace pvfs::pvfsd
