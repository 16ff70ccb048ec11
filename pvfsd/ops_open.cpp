// OPEN and CLOSE: the kernel's open files of a mount, held on the metadata
// servers through Client::co_open/co_close, so that a file unlinked
// anywhere stays while the mount has it open.  Both are idempotent by the
// kernel's gen: a replay (to a new pvfsd) or a RECLAIM changes nothing
// twice.  A CLOSE of a handle waits for the OPENs of it still running, so
// that it reaches the server after the hold it ends.
#include "ops.hpp"

#include <pvfs/gossip.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace pvfs::pvfsd::ops {

namespace gossip = pvfs::gossip;

static_assert(PVFSD_OPEN_READ == client::Client::open_read &&
              PVFSD_OPEN_WRITE == client::Client::open_write);

namespace {

// The OPEN itself, once its request is known to be well formed.
Task<int> open_held(Call call, OpenTable &table, pvfsd_open_req req)
{
    const Handle handle = req.handle;
    const bool reclaim = (req.common.flags & PVFSD_REQ_RECLAIM) != 0;
    Attr a;
    auto it = table.entries.find(handle);
    if (it != table.entries.end() && it->second.gen >= req.gen &&
        (req.mode & ~it->second.mode) == 0) {
        // Held already by this OPEN or a later one (a replay, a RECLAIM of
        // what this pvfsd was told): attributes only.
        const int rc = co_await call.c.co_getattr(handle, a);
        if (rc == 0) {
            pvfsd_attr_resp r{};
            r.attr = to_dev_attr(a);
            call.out.put(r);
        }
        co_return rc;
    }
    // In the table before the first co_await: a CLOSE read after this OPEN
    // finds it, whatever finishes first.
    if (it == table.entries.end())
        it = table.entries.emplace(handle, OpenTable::Entry{0, 0, 0, table.next_epoch++}).first;
    OpenTable::Entry &e = it->second;
    e.gen = std::max<std::uint64_t>(e.gen, req.gen);
    e.mode |= req.mode;
    const std::uint64_t epoch = e.epoch;
    const std::uint32_t mode = e.mode;
    int rc = co_await call.c.co_open(handle, mode, req.gen, reclaim, a);
    if (rc == -EOPNOTSUPP || rc == -ENOSYS) {
        // No session, or a metadata server without open references: the
        // file is not held (an unlink destroys it at once), but it opens.
        gossip::debug(gossip::Mask::pvfsd, "{:016x}: not held: {}", handle, client::error_text(rc));
        if (const auto own = table.entries.find(handle);
            own != table.entries.end() && own->second.epoch == epoch && own->second.opens == 0)
            table.entries.erase(own);
        rc = co_await call.c.co_getattr(handle, a);
        if (rc == 0) {
            pvfsd_attr_resp r{};
            r.attr = to_dev_attr(a);
            call.out.put(r);
        }
        co_return rc;
    }
    // The entry may have gone (a CLOSE, a failed OPEN) while we waited.
    it = table.entries.find(handle);
    const bool mine = it != table.entries.end() && it->second.epoch == epoch;
    if (rc != 0) {
        if (mine && it->second.opens == 0)
            table.entries.erase(it);
        if (reclaim)
            gossip::warning(gossip::Mask::pvfsd,
                            "{:016x}: the kernel's open file could not be held again: {}", handle,
                            client::error_text(rc));
        co_return rc;
    }
    if (!mine) {
        // Dropped meanwhile (another OPEN of it failed): this hold is
        // nobody's.
        static_cast<void>(co_await call.c.co_close(handle));
    } else {
        ++it->second.opens;
    }
    // co_open's attributes have the size too: no getattr.
    pvfsd_attr_resp r{};
    r.attr = to_dev_attr(a);
    call.out.put(r);
    co_return 0;
}

} // namespace

Task<int> open(Call call, OpenTable &table)
{
    const auto req = call.up.body<pvfsd_open_req>();
    if (!req || req->handle == 0 || req->gen == 0 || req->pad != 0 ||
        (req->mode & ~(PVFSD_OPEN_READ | PVFSD_OPEN_WRITE)) != 0)
        co_return -EINVAL;
    table.open_starts(req->handle);
    const int rc = co_await open_held(call, table, *req);
    table.open_ends(req->handle);
    co_return rc;
}

Task<int> create(Call call, OpenTable &table, bool create_open)
{
    const auto req = call.up.body<pvfsd_create_req>();
    const auto name = req ? call.up.tail(sizeof(*req), 0, req->name_len) : std::nullopt;
    if (!name || !valid_name(*name) || req->exclusive > 1 ||
        (req->open_mode & ~(PVFSD_OPEN_READ | PVFSD_OPEN_WRITE)) != 0)
        co_return -EINVAL;
    if (req->open_mode != 0 && !create_open) {
        gossip::warning(gossip::Mask::dev,
                        "CREATE tag {} asks to open, but the channel did not agree on "
                        "CREATE_OPEN: refused",
                        call.up.tag());
        co_return -EINVAL;
    }
    Attr a;
    bool created = false;
    bool opened = false;
    int rc = -EOPNOTSUPP;
    if (req->open_mode != 0) {
        // One round trip for open(O_CREAT): the metadata server holds the
        // file with the create, its gen the CREATE's tag (the same in a
        // replay, which the reply cache answers without a second hold).
        rc = co_await call.c.co_create_open(req->parent, *name, req->mode & 07777U,
                                            req->exclusive != 0, Layout{}, req->open_mode,
                                            call.up.tag(), a, &created);
        opened = rc == 0;
    }
    if (rc == -EOPNOTSUPP) {
        // Only a create (no session: the kernel's OPEN then asks for
        // attributes only, as for any file).
        rc = co_await call.c.co_create(req->parent, *name, req->mode & 07777U, req->exclusive != 0,
                                       Layout{}, a, &created);
    }
    if (rc != 0)
        co_return rc;
    if (opened) {
        // Known to this pvfsd as an OPEN would be (renewals, reclaims, and
        // the CLOSE to come).
        auto it = table.entries.find(a.handle);
        if (it == table.entries.end())
            it = table.entries.emplace(a.handle, OpenTable::Entry{0, 0, 0, table.next_epoch++})
                     .first;
        it->second.gen = std::max<std::uint64_t>(it->second.gen, call.up.tag());
        it->second.mode |= req->open_mode;
        ++it->second.opens;
    }
    pvfsd_create_resp r{};
    r.attr = to_dev_attr(a);
    r.created = created ? 1 : 0;
    r.opened = opened ? 1 : 0;
    call.out.put(r);
    co_return 0;
}

Task<int> close(Call call, OpenTable &table)
{
    const auto req = call.up.body<pvfsd_close_req>();
    if (!req || req->count == 0 || req->count > PVFSD_MAX_CLOSE || req->pad != 0 ||
        call.up.tail_size(sizeof(*req)) != req->count * sizeof(pvfsd_close_ref))
        co_return -EINVAL;
    const auto tail = call.up.tail(sizeof(*req), 0, req->count * sizeof(pvfsd_close_ref));
    if (!tail)
        co_return -EINVAL;
    std::vector<pvfsd_close_ref> refs(req->count);
    std::memcpy(refs.data(), tail->data(), tail->size());
    std::vector<client::Client::CloseRef> closes;
    closes.reserve(refs.size());
    for (const pvfsd_close_ref &ref : refs) {
        // An OPEN of the handle still running (a RECLAIM the kernel queued
        // before this CLOSE, or a replay) may add the hold after our close
        // went: wait for it, then close.
        while (table.busy.contains(ref.handle))
            co_await table.settled(ref.handle);
        const auto it = table.entries.find(ref.handle);
        // Opened again since: the entry stays (the server keeps the later
        // open's hold whatever this close says).
        if (it != table.entries.end() && it->second.gen <= ref.gen)
            table.entries.erase(it);
        // Also when this pvfsd never saw the open (it came through a
        // daemon that died, and this CLOSE was queued or replayed to us):
        // the server holds it for the kernel's client id all the same.
        closes.push_back({ref.handle, ref.gen});
    }
    // The kernel's batch in one request per metadata server, not one each.
    if (const int rc = co_await call.c.co_close(std::move(closes)); rc != 0)
        gossip::debug(gossip::Mask::pvfsd, "close of {} file(s): {} (the lease ends it)",
                      refs.size(), client::error_text(rc));
    co_return 0;
}

} // namespace pvfs::pvfsd::ops
