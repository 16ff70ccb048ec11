// The ib method's memory registration: memory the caller registers for
// good (memalloc, register_memory) is in the registry on every device;
// other user buffers are registered per op, from a per-device cache when
// /proc/self/pagemap shows page frames (a cached registration is used only
// while its pages are still the frames it pinned).
#include "../../core/net.hpp"
#include "method.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/unique_fd.hpp"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace bmi::ib {

std::shared_ptr<void> IbMethod::register_memory(void *data, std::size_t size)
{
    // Registered on the devices open now and on those opened later (the
    // registry remembers it): a process that never uses ib registers (pins)
    // nothing, and one that registers before its first ib transfer (pvfsd
    // at start) has its memory registered when the device opens.
    if (size == 0)
        return nullptr;
    std::vector<std::shared_ptr<ibv_pd>> pds;
    for (const auto &d : devices_)
        pds.push_back(d->pd);
    auto handle = std::make_shared<RegionHandle>();
    handle->registry = registry_;
    handle->start = reinterpret_cast<std::uintptr_t>(data);
    handle->id = registry_->add(handle->start, size, pds);
    return handle;
}

// The registration of [a, a + n) from the device's cache, made (and cached)
// if there is none.  Before a cached one is used, every page of the buffer
// is checked to still be the page frame registered: a registration pins its
// pages, so memory freed and mapped again at the same address necessarily
// has other frames, and a stale registration is never used.  nullptr when
// registering fails (*error set).
std::shared_ptr<CachedMr> IbMethod::cached_mr(Device &d, std::uintptr_t a, std::size_t n,
                                              bool writable, int &error)
{
    // Exposures have their own registrations (peers may write them), the
    // rest only readable ones: an RTS never hands out a writable rkey.
    Device::MrCache &cache = writable ? d.cache_rw : d.cache;
    const std::uintptr_t ps = a & ~(page_size - 1);
    const std::uintptr_t pe = (a + n + page_size - 1) & ~(page_size - 1);
    const std::size_t pages = (pe - ps) / page_size;
    if (!read_frames(ps, pages, frames_)) {
        error = -EIO;
        return nullptr;
    }
    if (auto it = cache.entries.upper_bound(ps); it != cache.entries.begin()) {
        --it;
        std::shared_ptr<CachedMr> e = it->second;
        if (e->start <= ps && e->start + e->len >= pe) {
            const auto first = static_cast<std::ptrdiff_t>((ps - e->start) / page_size);
            if (std::equal(frames_.begin(), frames_.end(), e->frames.begin() + first)) {
                ++registration_hits_;
                e->last_use = ++use_clock_;
                return e;
            }
            gossip::debug(gossip::Mask::ib, "{}: cached registration of {:#x}+{} is stale", d.name,
                          e->start, e->len);
            cache.bytes -= e->len;
            cache.entries.erase(it); // ops in flight keep it until they end
        }
    }
    auto e = std::make_shared<CachedMr>();
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the caller's buffer, page-aligned
    e->mr.reset(ibv_reg_mr(d.pd.get(), reinterpret_cast<void *>(ps), pe - ps,
                           writable ? expose_access : send_access));
    if (!e->mr) {
        error = errno != 0 ? -errno : -ENOMEM;
        gossip::warning(gossip::Mask::ib, "{}: cannot register {} bytes: {}", d.name, pe - ps,
                        errno_text(-error));
        return nullptr;
    }
    ++registrations_;
    e->start = ps;
    e->len = pe - ps;
    // Read after registering: the pages are present and pinned now.
    if (!read_frames(ps, pages, e->frames)) {
        error = -EIO;
        return nullptr;
    }
    e->last_use = ++use_clock_;
    if (auto old = cache.entries.find(ps); old != cache.entries.end()) {
        cache.bytes -= old->second->len;
        cache.entries.erase(old);
    }
    cache.entries.emplace(ps, e);
    cache.bytes += e->len;
    // Least recently used entries go beyond the bounds, unless in use.
    while (cache.bytes > cache_max_bytes || cache.entries.size() > cache_max_entries) {
        auto victim = cache.entries.end();
        for (auto it = cache.entries.begin(); it != cache.entries.end(); ++it) {
            if (it->second.use_count() == 1 &&
                (victim == cache.entries.end() || it->second->last_use < victim->second->last_use))
                victim = it;
        }
        if (victim == cache.entries.end())
            break;
        cache.bytes -= victim->second->len;
        cache.entries.erase(victim);
    }
    return e;
}

// The page frame of each of `pages` pages from start (0: not present).
bool IbMethod::read_frames(std::uintptr_t start, std::size_t pages, std::vector<std::uint64_t> &out)
{
    out.resize(pages);
    const std::size_t bytes = pages * sizeof(std::uint64_t);
    const auto off = static_cast<off_t>(start / page_size * sizeof(std::uint64_t));
    if (::pread(pagemap_.get(), out.data(), bytes, off) != static_cast<ssize_t>(bytes))
        return false;
    constexpr std::uint64_t present = std::uint64_t{1} << 63U;
    constexpr std::uint64_t pfn_mask = (std::uint64_t{1} << 55U) - 1;
    for (std::uint64_t &e : out)
        e = (e & present) != 0 ? (e & pfn_mask) : 0;
    return true;
}

// The cache needs page frames, which /proc/self/pagemap shows only to
// privileged processes (CAP_SYS_ADMIN); others register per transfer.
bool IbMethod::frames_visible()
{
    if (frames_checked_)
        return pagemap_.valid();
    frames_checked_ = true;
    pagemap_ = pvfs::UniqueFd(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
    volatile std::uint64_t probe = 1; // a touched, present page: the stack
    std::vector<std::uint64_t> f;
    const auto addr = reinterpret_cast<std::uintptr_t>(&probe);
    if (!pagemap_.valid() || !read_frames(addr, 1, f) || f[0] == 0) {
        pagemap_.reset();
        gossip::debug(gossip::Mask::ib, "page frames are hidden: no registration cache");
        return false;
    }
    return true;
}

int IbMethod::register_op(std::uint32_t i, Device &d, int access)
{
    OpX &x = opx(i);
    x.mrs.clear();
    x.keys.clear();
    for (const MutableBuffer &b : op(i).bufs) {
        if (b.size == 0) {
            x.keys.push_back(0);
            continue;
        }
        if (ibv_mr *mr = registry_->find(reinterpret_cast<std::uintptr_t>(b.data), b.size,
                                         d.pd.get(), false)) {
            x.keys.push_back((access & IBV_ACCESS_REMOTE_READ) != 0 ? mr->rkey : mr->lkey);
            continue;
        }
        if (frames_visible()) {
            int error = 0;
            auto e = cached_mr(d, reinterpret_cast<std::uintptr_t>(b.data), b.size, false, error);
            if (!e) {
                x.mrs.clear();
                x.cached.clear();
                return error;
            }
            x.keys.push_back((access & IBV_ACCESS_REMOTE_READ) != 0 ? e->mr->rkey : e->mr->lkey);
            x.cached.push_back(std::move(e));
            continue;
        }
        ++registrations_;
        Mr mr(ibv_reg_mr(d.pd.get(), b.data, b.size, access));
        if (!mr) {
            const int err = errno != 0 ? errno : ENOMEM;
            gossip::warning(gossip::Mask::ib, "{}: cannot register {} bytes: {}", d.name, b.size,
                            errno_text(err));
            x.mrs.clear();
            return -err;
        }
        x.keys.push_back((access & IBV_ACCESS_REMOTE_READ) != 0 ? mr->rkey : mr->lkey);
        x.mrs.push_back(std::move(mr));
    }
    return 0;
}

} // namespace bmi::ib
