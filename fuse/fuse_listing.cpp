// Listings: READDIR's answers as FUSE dirents, and READDIRPLUS, whose
// entries carry their attributes.  The Handler's READDIR gives names,
// handles and types only, so a READDIRPLUS is a READDIR and then a GETATTR
// of every entry that fits the kernel's room, all started at once: the
// page costs about one round trip after its READDIR, where a plain READDIR
// leaves `ls -l` a LOOKUP per name, each waiting for the one before.
#include "fuse_channel.hpp"
#include "fuse_ops.hpp"

#include <pvfs/gossip.hpp>
#include <pvfs/types.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <string>
#include <utility>

namespace pvfs::fuse {

namespace {

namespace gossip = pvfs::gossip;
using detail::body_of;
using detail::message;
using detail::replied;
using detail::to_stat;
using detail::type_bits;

// READDIR offsets: 0 is ".", 1 "..", then each entry's cookie + 2, as
// pvfs.ko's (kmod/dir.c), so that no cookie is taken for a dot.
constexpr std::uint64_t dots = 2;

double seconds(std::chrono::milliseconds ms)
{
    return std::chrono::duration<double>(ms).count();
}

bool is_dot(const std::string &name)
{
    return name == "." || name == "..";
}

} // namespace

int detail::parse_dirents(std::span<const std::byte> body, std::vector<Dirent> &out, bool &eof)
{
    const auto r = body_of<pvfsd_readdir_resp>(body);
    if (!r)
        return -EIO;
    eof = r->eof != 0;
    std::size_t at = sizeof(*r);
    for (std::uint32_t i = 0; i < r->count; ++i) {
        const auto d = body_of<pvfsd_dirent>(body.subspan(std::min(at, body.size())));
        if (!d || d->name_len == 0 || d->name_len > PVFSD_MAX_NAME ||
            body.size() - at - sizeof(*d) < d->name_len || d->cookie == 0)
            return -EIO;
        if (d->cookie >= std::numeric_limits<std::uint64_t>::max() - dots)
            return -EOVERFLOW;
        Dirent e;
        e.handle = d->handle;
        e.cookie = d->cookie;
        e.type = d->type;
        e.name.assign(reinterpret_cast<const char *>(body.data() + at + sizeof(*d)), d->name_len);
        out.push_back(std::move(e));
        at += (sizeof(*d) + d->name_len + 7) / 8 * 8;
    }
    return 0;
}

void FuseChannel::reply_readdir(Pending &p, std::span<const std::byte> body)
{
    std::vector<detail::Dirent> entries;
    bool eof = false;
    if (const int rc = detail::parse_dirents(body, entries, eof); rc != 0) {
        if (rc == -EIO)
            gossip::error(gossip::Mask::dev, "READDIR tag {}: a malformed entry", p.tag);
        replied(fuse_reply_err(p.req, -rc), "READDIR");
        return;
    }
    std::vector<char> out(p.size);
    std::size_t used = 0;
    for (const detail::Dirent &d : entries) {
        struct stat st {};
        st.st_ino = d.handle;
        st.st_mode = type_bits(d.type);
        const std::size_t need =
            fuse_add_direntry(p.req, out.data() + used, out.size() - used, d.name.c_str(), &st,
                              static_cast<off_t>(d.cookie + dots));
        if (need > out.size() - used)
            break; // the next READDIR starts at it
        used += need;
    }
    if (used == 0 && !eof) {
        // Neither an entry nor the end: an empty answer would end the listing.
        gossip::error(gossip::Mask::dev, "READDIR tag {}: no entry and no end", p.tag);
        replied(fuse_reply_err(p.req, EIO), "READDIR");
        return;
    }
    replied(fuse_reply_buf(p.req, out.data(), used), "READDIR");
}

void FuseChannel::start_listing(Pending &p, std::span<const std::byte> body)
{
    auto l = std::make_unique<Listing>();
    bool eof = false;
    if (const int rc = detail::parse_dirents(body, l->entries, eof); rc != 0) {
        if (rc == -EIO)
            gossip::error(gossip::Mask::dev, "READDIRPLUS tag {}: a malformed entry", p.tag);
        replied(fuse_reply_err(p.req, -rc), "READDIRPLUS");
        return;
    }
    // Attributes only for what the answer holds: the next listing starts
    // at the first entry left out (and asks for its attributes then).
    std::size_t used = 0;
    std::size_t fit = 0;
    for (; fit < l->entries.size(); ++fit) {
        const std::size_t need =
            fuse_add_direntry_plus(p.req, nullptr, 0, l->entries[fit].name.c_str(), nullptr, 0);
        if (need > p.size - used)
            break;
        used += need;
    }
    l->entries.resize(fit);
    if (fit == 0 || start_ == nullptr) {
        // The end, or neither an entry nor the end (an empty answer would
        // end the listing), or no Handler to ask (a bug).
        const bool end = eof && l->entries.empty();
        if (!end)
            gossip::error(gossip::Mask::dev, "READDIRPLUS tag {}: no entry and no end", p.tag);
        replied(end ? fuse_reply_buf(p.req, nullptr, 0) : fuse_reply_err(p.req, EIO),
                "READDIRPLUS");
        return;
    }
    l->req = p.req;
    l->size = p.size;
    pvfsd_attr none{};
    none.handle = no_handle;
    l->attrs.assign(fit, none);
    l->waiting = fit;
    const std::uint64_t id = p.tag;
    const Listing &ref = *l;
    listings_[id] = std::move(l);
    for (std::size_t i = 0; i < fit; ++i) {
        auto g = std::make_unique<Pending>();
        g->tag = next_tag();
        g->op = PVFSD_OP_GETATTR;
        g->ino = ref.entries[i].handle;
        g->then = Then::listed;
        g->offset = id;
        g->size = i;
        pvfsd_handle_req r{};
        r.common = p.common;
        r.handle = g->ino;
        auto bytes = message(g->op, g->tag, r);
        start(std::move(g), std::move(bytes));
    }
}

void FuseChannel::listed(const Pending &g, int status, std::span<const std::byte> body)
{
    const auto it = listings_.find(g.offset);
    if (it == listings_.end())
        return;
    Listing &l = *it->second;
    const auto r = status == 0 ? body_of<pvfsd_attr_resp>(body) : std::nullopt;
    struct stat st {};
    if (g.size < l.attrs.size() && r && r->attr.handle == g.ino && to_stat(r->attr, st)) {
        l.attrs[g.size] = r->attr;
    } else if (status != -ENOENT) {
        // Listed without attributes: the kernel asks for them with a
        // LOOKUP if it wants them (an entry removed meanwhile is listed
        // as by a plain READDIR).
        gossip::debug(gossip::Mask::dev, "READDIRPLUS: no attributes of {:#x}: {}", g.ino,
                      status != 0 ? client::error_text(status) : "a malformed answer");
    }
    if (--l.waiting > 0)
        return;
    const std::unique_ptr<Listing> done = std::move(it->second);
    listings_.erase(it);
    answer_listing(*done);
}

void FuseChannel::cancel_listing(fuse_req_t req)
{
    const auto it = std::ranges::find_if(
        listings_, [req](const auto &entry) { return entry.second->req == req; });
    if (it == listings_.end() || it->second->interrupted || start_ == nullptr)
        return;
    it->second->interrupted = true;
    // Collected first: a CANCEL's answer may come while it starts.
    std::vector<std::uint64_t> tags;
    for (const auto &[tag, p] : pending_) {
        if (p->then == Then::listed && p->offset == it->first)
            tags.push_back(tag);
    }
    gossip::debug(gossip::Mask::dev, "READDIRPLUS tag {} interrupted: {} GETATTRs cancelled",
                  it->first, tags.size());
    for (const std::uint64_t tag : tags) {
        std::string why;
        auto up =
            pvfsd::Upcall::parse(message(PVFSD_OP_CANCEL, next_tag(), pvfsd_cancel_req{tag}), why);
        if (up)
            (*start_)(std::move(*up));
    }
}

void FuseChannel::answer_listing(Listing &l)
{
    if (l.interrupted) {
        replied(fuse_reply_err(l.req, EINTR), "READDIRPLUS");
        return;
    }
    std::vector<char> out(l.size);
    std::vector<bool> counted(l.entries.size(), false);
    std::size_t used = 0;
    for (std::size_t i = 0; i < l.entries.size(); ++i) {
        const detail::Dirent &d = l.entries[i];
        fuse_entry_param e{};
        // Node id 0: a name without attributes, which the kernel counts
        // no lookup of (nor of the dots, which no server should list).
        const bool with = l.attrs[i].handle == d.handle && !is_dot(d.name) &&
                          to_stat(with_behind(l.attrs[i]), e.attr);
        if (with) {
            e.ino = d.handle;
            e.attr_timeout = attr_timeout(l.attrs[i].type);
            e.entry_timeout = seconds(settings_.entry_timeout);
        } else {
            e.attr = {};
            e.attr.st_ino = d.handle;
            e.attr.st_mode = type_bits(d.type);
        }
        const std::size_t need =
            fuse_add_direntry_plus(l.req, out.data() + used, out.size() - used, d.name.c_str(), &e,
                                   static_cast<off_t>(d.cookie + dots));
        if (need > out.size() - used)
            break; // sized to fit in start_listing: not reached
        used += need;
        counted[i] = with;
    }
    const int rc = fuse_reply_buf(l.req, out.data(), used);
    replied(rc, "READDIRPLUS");
    if (rc != 0)
        return;
    // Each entry with a node id is a lookup the kernel counts (its FORGET
    // will say so), as a LOOKUP's answer is.
    for (std::size_t i = 0; i < l.entries.size(); ++i) {
        if (counted[i]) {
            learned(l.attrs[i], true);
            ++counts_.plus_entries;
        }
    }
}

std::string FuseChannel::status() const
{
    std::size_t looked_up = 0;
    for (const auto &[ino, k] : known_)
        looked_up += k.nlookup > 0 ? 1 : 0;
    return fmt::format("FUSE requests: {} LOOKUP, {} READDIR, {} READDIRPLUS ({} entries with "
                       "attributes), {} READ (largest {} bytes), {} WRITE (largest {} bytes); "
                       "{} inodes looked up; {} WRITE behind ({} failed), {} waited for writes",
                       counts_.lookups, counts_.readdirs, counts_.readdirplus, counts_.plus_entries,
                       counts_.reads, counts_.read_max, counts_.writes, counts_.write_max,
                       looked_up, counts_.behind, counts_.behind_errors, counts_.behind_waits);
}

} // namespace pvfs::fuse
