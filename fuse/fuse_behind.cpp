// Write-behind: a WRITE is answered once its bytes are in a slot, so the
// writer's next write(2) is copied while the servers take this one, up to
// FuseSettings::write_behind of them in flight (pvfs.ko's page cache gives
// its writers the same; FUSE without a writeback cache would wait for each
// WRITE's round trip).  What the kernel was told is done must look done:
// a READ, GETATTR, SETATTR, FSYNC or FLUSH of the inode waits for its
// writes, a WRITE over a range in flight waits (the servers could apply the
// two in the other order), LOOKUP and READDIRPLUS answers count the writes'
// ends in the size, and the last release's CLOSE goes after them.  A write
// that fails is reported by the inode's next FSYNC or FLUSH (fsync(2),
// close(2)) and refuses the writes that follow until then, as NFS reports
// its writeback errors.
#include "fuse_channel.hpp"
#include "fuse_ops.hpp"

#include <pvfs/client.hpp>
#include <pvfs/gossip.hpp>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace pvfs::fuse {

namespace {

namespace gossip = pvfs::gossip;
using detail::body_of;
using detail::replied;

} // namespace

bool FuseChannel::writes_in_flight(fuse_ino_t ino) const
{
    const auto it = behind_.find(ino);
    return it != behind_.end() && !it->second.in_flight.empty();
}

int FuseChannel::write_error(fuse_ino_t ino) const
{
    const auto it = behind_.find(ino);
    return it == behind_.end() ? 0 : it->second.error;
}

int FuseChannel::take_write_error(fuse_ino_t ino, std::uint32_t open_mode)
{
    const auto it = behind_.find(ino);
    if (it == behind_.end() || (open_mode & PVFSD_OPEN_WRITE) == 0)
        return 0;
    return std::exchange(it->second.error, 0);
}

pvfsd_attr FuseChannel::with_behind(const pvfsd_attr &a) const
{
    pvfsd_attr out = a;
    const auto it = behind_.find(a.handle);
    if (it == behind_.end())
        return out;
    for (const Behind::Range &r : it->second.in_flight)
        out.size = std::max<std::uint64_t>(out.size, r.end);
    return out;
}

bool FuseChannel::park_behind_writes(std::unique_ptr<Pending> &p, Via via,
                                     std::vector<std::byte> &upcall)
{
    if (p->req == nullptr || p->behind)
        return false;
    const auto it = behind_.find(p->ino);
    if (it == behind_.end() || it->second.in_flight.empty())
        return false;
    Behind &b = it->second;
    bool waits = false;
    switch (p->op) {
    case flush_op:
    case PVFSD_OP_READ:
    case PVFSD_OP_SETATTR:
    case PVFSD_OP_FSYNC:
        waits = true;
        break;
    case PVFSD_OP_GETATTR:
        // A listing's own GETATTRs are answered with with_behind's size.
        waits = p->then != Then::listed;
        break;
    case PVFSD_OP_WRITE: {
        const std::uint64_t end = p->offset + p->size;
        waits = std::ranges::any_of(b.in_flight, [&](const Behind::Range &r) {
            return p->offset < r.end && r.offset < end;
        });
        break;
    }
    default:
        break;
    }
    if (!waits)
        return false;
    gossip::debug(gossip::Mask::dev, "{} tag {} waits for {} writes of {:#x}",
                  p->op == flush_op ? "FLUSH" : pvfsd::op_name(p->op), p->tag, b.in_flight.size(),
                  p->ino);
    ++counts_.behind_waits;
    p->via = via;
    p->started = false;
    if (via != Via::data)
        p->message = std::move(upcall);
    const std::uint64_t tag = p->tag;
    fuse_req_t req = p->req;
    b.parked.push_back(tag);
    tag_of_[req] = tag;
    pending_[tag] = std::move(p);
    // An interrupt answers it EINTR (receive(), as a request waiting for a slot).
    fuse_req_interrupt_func(req, &Ops::interrupt_cb, nullptr);
    return true;
}

void FuseChannel::go_behind(Pending &p)
{
    if (!p.may_go_behind || p.req == nullptr || p.op != PVFSD_OP_WRITE ||
        behind_total_ >= settings_.write_behind)
        return;
    Behind &b = behind_[p.ino];
    // While a request waits for the inode's writes, no new one goes
    // behind (it is answered when done, as without write-behind): else a
    // steady writer would keep a stat or a reader of the file waiting.
    if (!b.parked.empty())
        return;
    b.in_flight.push_back({p.tag, p.offset, p.offset + p.size});
    ++behind_total_;
    ++counts_.behind;
    p.behind = true;
    tag_of_.erase(p.req);
    replied(fuse_reply_write(std::exchange(p.req, nullptr), p.size), "WRITE");
}

void FuseChannel::wrote_behind(const Pending &p, int status, std::span<const std::byte> body)
{
    int err = 0;
    if (status != 0) {
        err = -status;
        if (err <= 0 || err > 4095 || err == ECANCELED)
            err = EIO;
    } else if (const auto r = body_of<pvfsd_io_resp>(body); !r || r->done != p.size) {
        // The kernel was told all of it went: a short count is a loss.
        err = EIO;
    }
    --behind_total_;
    const auto it = behind_.find(p.ino);
    if (it == behind_.end()) {
        gossip::error(gossip::Mask::dev, "WRITE tag {} behind: no record of {:#x}", p.tag, p.ino);
        return;
    }
    std::erase_if(it->second.in_flight, [&](const Behind::Range &r) { return r.tag == p.tag; });
    if (err != 0) {
        ++counts_.behind_errors;
        gossip::warning(gossip::Mask::pvfsd,
                        "a write of {} bytes at {} to {:#x}, answered already, failed: {} (the "
                        "next fsync or close of the file reports it)",
                        p.size, p.offset, p.ino, strerrordesc_np(err));
        if (it->second.error == 0)
            it->second.error = err;
    }
    if (it->second.in_flight.empty())
        settle(p.ino);
}

void FuseChannel::settle(fuse_ino_t ino)
{
    auto it = behind_.find(ino);
    if (it == behind_.end())
        return;
    const std::vector<std::uint64_t> parked = std::exchange(it->second.parked, {});
    std::ranges::copy(std::exchange(it->second.closes, {}), std::back_inserter(closes_));
    // Each in the order it came; one may start writes of its own, which
    // the later ones then wait for again (park_behind_writes).  behind_
    // may rehash meanwhile: no reference into it is held.
    for (const std::uint64_t tag : parked) {
        auto node = pending_.extract(tag);
        if (node.empty())
            continue; // interrupted meanwhile
        std::unique_ptr<Pending> p = std::move(node.mapped());
        std::vector<std::byte> upcall = std::move(p->message);
        int err = 0;
        if (p->op == flush_op || p->op == PVFSD_OP_FSYNC)
            err = writes_in_flight(ino) ? 0 : take_write_error(ino, p->open_mode);
        else if (p->op == PVFSD_OP_WRITE || p->then == Then::append)
            err = write_error(ino); // the writes after a failed one fail with it
        if (err != 0) {
            tag_of_.erase(p->req);
            replied(fuse_reply_err(p->req, err), "a request after a failed write");
            continue;
        }
        switch (p->via) {
        case Via::plain:
            start(std::move(p), std::move(upcall));
            break;
        case Via::change:
            start_change(std::move(p), std::move(upcall));
            break;
        case Via::data:
            start_data(std::move(p));
            break;
        case Via::flush:
            if (park_behind_writes(p, Via::flush, upcall))
                break;
            tag_of_.erase(p->req);
            replied(fuse_reply_err(p->req, take_write_error(ino, p->open_mode)), "FLUSH");
            break;
        }
    }
    if (start_ != nullptr)
        flush_closes();
    it = behind_.find(ino);
    // An error nobody took goes with the file's last close (logged when
    // it came), not to the next open.
    if (it != behind_.end() && it->second.in_flight.empty() && it->second.parked.empty() &&
        it->second.closes.empty() && (it->second.error == 0 || !opened_.contains(ino)))
        behind_.erase(it);
}

} // namespace pvfs::fuse
