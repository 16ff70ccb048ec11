// Exactly-once changes on the metadata server (docs/protocol.md "Exactly
// once", docs/metadata.md "Sessions and the reply cache"): client sessions,
// the reply cache around each change, and the test faults that lose
// replies on purpose.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "key_table.hpp"
#include "meta_service.hpp"
#include "pvfs/client_keys.hpp"
#include "pvfs/gossip.hpp"

namespace pvfs::server {

namespace {

using gossip::Mask;
using Clock = std::chrono::steady_clock;

std::uint64_t realtime_now_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000U +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

std::vector<std::uint8_t> to_bytes(const std::vector<std::byte> &b)
{
    // (Not memcpy: an empty value's data() may be null, which memcpy
    // must not be given, as UBSan says of an empty xattr's reply.)
    std::vector<std::uint8_t> out(b.size());
    std::ranges::transform(b, out.begin(),
                           [](std::byte x) { return std::to_integer<std::uint8_t>(x); });
    return out;
}

} // namespace

bool parse_faults(std::string_view text, std::vector<MetaFault> &out, std::string &error)
{
    out.clear();
    while (!text.empty()) {
        const std::size_t comma = text.find(',');
        const std::string_view item = text.substr(0, comma);
        text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
        const std::size_t c1 = item.find(':');
        const std::size_t c2 = c1 == std::string_view::npos ? c1 : item.find(':', c1 + 1);
        if (c2 == std::string_view::npos) {
            error = "fault \"" + std::string(item) + "\" is not KIND:OP:N";
            return false;
        }
        MetaFault f;
        const std::string_view kind = item.substr(0, c1);
        const std::string_view op = item.substr(c1 + 1, c2 - c1 - 1);
        const std::string_view nth = item.substr(c2 + 1);
        if (kind == "drop_reply") {
            f.kind = MetaFault::Kind::drop_reply;
        } else if (kind == "crash_after_commit") {
            f.kind = MetaFault::Kind::crash_after_commit;
        } else if (kind == "crash_in_commit_wait") {
            f.kind = MetaFault::Kind::crash_in_commit_wait;
        } else {
            error = "unknown fault kind \"" + std::string(kind) + "\"";
            return false;
        }
        bool known = false;
        for (std::uint16_t i = 1; i <= proto::op_count; ++i) {
            if (op == proto::op_name(static_cast<proto::Op>(i))) {
                f.op = static_cast<proto::Op>(i);
                known = true;
            }
        }
        if (!known || !MetaService::handles(f.op)) {
            error = "fault op \"" + std::string(op) + "\" is not a metadata op";
            return false;
        }
        const auto [end, ec] = std::from_chars(nth.data(), nth.data() + nth.size(), f.nth);
        if (ec != std::errc{} || end != nth.data() + nth.size() || f.nth == 0) {
            error = "fault count \"" + std::string(nth) + "\" is not a positive number";
            return false;
        }
        out.push_back(f);
    }
    return true;
}

void MetaService::load_sessions()
{
    std::vector<meta::SessionRecord> records;
    if (const int rc = store_.list_sessions(records); rc != 0) {
        gossip::error(Mask::meta, "cannot read the client sessions: {}", errno_text(-rc));
        return;
    }
    // Each gets a full ttl from now: how long it was silent before the
    // restart is not known.
    const auto now = Clock::now();
    std::size_t unclaimed = 0;
    for (meta::SessionRecord &r : records) {
        if (!r.owner.empty())
            owners_[r.owner] = r.client_id;
        unclaimed += r.key ? 0 : 1;
        {
            const std::lock_guard lock(open_mutex_);
            session_keys_[r.client_id] = r.key;
        }
        sessions_[r.client_id] = Session{std::move(r.owner), now, r.created_ns, std::move(r.key)};
    }
    if (unclaimed != 0)
        gossip::warning(Mask::meta,
                        "{} client sessions from before sessions were bound to keys: each "
                        "belongs to the first key that uses it",
                        unclaimed);
    if (!sessions_.empty())
        gossip::info(Mask::meta, "{} client sessions kept from before the restart",
                     sessions_.size());
}

int MetaService::end_session(meta::WriteBatch &batch, std::uint64_t client_id, const char *why)
{
    const auto it = sessions_.find(client_id);
    if (it == sessions_.end())
        return 0;
    if (const int rc = batch.session_delete(client_id); rc != 0)
        return rc;
    gossip::debug(Mask::meta, "session of client {:016x} ended: {}", client_id, why);
    // Its holds go with it; the next sweep reclaims what they kept.
    drop_holds(client_id);
    {
        const std::lock_guard lock(open_mutex_);
        session_keys_.erase(client_id);
    }
    if (!it->second.owner.empty()) {
        const auto o = owners_.find(it->second.owner);
        if (o != owners_.end() && o->second == client_id)
            owners_.erase(o);
    }
    sessions_.erase(it);
    return 0;
}

void MetaService::sweep_sessions(meta::WriteBatch &batch, Clock::time_point now)
{
    std::vector<std::uint64_t> silent;
    for (const auto &[id, s] : sessions_) {
        if (now - s.last_change >= settings_.session_ttl)
            silent.push_back(id);
    }
    for (const std::uint64_t id : silent) {
        if (const int rc = end_session(batch, id, "silent for the session ttl"); rc != 0)
            return;
    }
}

void MetaService::apply_session(meta::WriteBatch &batch, Job &job)
{
    const auto &req = std::get<proto::SessionRequest>(job.body);
    job.error = 0;
    if (job.once.present()) {
        job.error = EINVAL;
        return;
    }
    if (req.action == proto::session_end) {
        if (const int rc = end_session(batch, req.client_id, "its client ended it"); rc != 0)
            job.error = -rc;
        job.response = proto::SessionResponse{boot_id_, proto::max_slots};
        return;
    }
    const auto now = Clock::now();
    if (const auto it = sessions_.find(req.client_id); it != sessions_.end()) {
        // Opened again (a second thread of the client, or its retry).
        it->second.last_change = now;
        job.response = proto::SessionResponse{boot_id_, proto::max_slots};
        return;
    }
    if (!req.owner.empty()) {
        // The same owner with a new id: that client restarted, and nothing
        // of its old session will be retried.
        if (const auto o = owners_.find(req.owner); o != owners_.end()) {
            // Not another key's: an owner string is in the clear, and
            // ending that session would drop its holds.
            const auto held = sessions_.find(o->second);
            const std::string_view key = key_name(job.origin);
            if (held != sessions_.end() && !claimable(held->second.key, key) &&
                *held->second.key != key) {
                log_foreign(job.origin, o->second, *held->second.key);
                job.error = EACCES;
                return;
            }
            if (const int rc = end_session(batch, o->second, "its owner opened a new one");
                rc != 0) {
                job.error = -rc;
                return;
            }
        }
    }
    while (sessions_.size() >= settings_.max_sessions) {
        const auto oldest =
            std::min_element(sessions_.begin(), sessions_.end(), [](const auto &a, const auto &b) {
                return a.second.last_change < b.second.last_change;
            });
        gossip::warning(Mask::meta,
                        "more than {} client sessions: the longest silent ({:016x}) ends, and "
                        "its retries are no longer exactly-once",
                        settings_.max_sessions, oldest->first);
        if (const int rc = end_session(batch, oldest->first, "too many sessions"); rc != 0) {
            job.error = -rc;
            return;
        }
    }
    meta::SessionRecord record{req.client_id, realtime_now_ns(), req.owner,
                               std::string(key_name(job.origin))};
    if (const int rc = batch.session_put(record); rc != 0) {
        job.error = -rc;
        return;
    }
    if (!req.owner.empty())
        owners_[req.owner] = req.client_id;
    {
        const std::lock_guard lock(open_mutex_);
        session_keys_[req.client_id] = record.key;
    }
    sessions_[req.client_id] = Session{req.owner, now, record.created_ns, std::move(record.key)};
    job.response = proto::SessionResponse{boot_id_, proto::max_slots};
}

std::string_view MetaService::key_name(const Origin &origin) noexcept
{
    return origin.client ? origin.client->name() : config::cluster_key_name;
}

bool MetaService::claimable(const std::optional<std::string> &owner, std::string_view key) noexcept
{
    return !owner || (*owner == config::cluster_key_name && key != config::cluster_key_name);
}

bool MetaService::foreign_locked(std::uint64_t client_id, std::string_view key,
                                 std::string &owner) const
{
    const auto it = session_keys_.find(client_id);
    if (it == session_keys_.end() || claimable(it->second, key) || *it->second == key)
        return false;
    owner = *it->second;
    return true;
}

void MetaService::log_foreign(const Origin &origin, std::uint64_t client_id, std::string_view owner)
{
    constexpr std::size_t max_tracked_keys = 4096;
    const std::string_view key = key_name(origin);
    std::uint64_t unlogged = 0;
    {
        const std::lock_guard lock(refusal_mutex_);
        if (refusals_.size() >= max_tracked_keys && !refusals_.contains(std::string(key)))
            refusals_.clear();
        Refusals &r = refusals_[std::string(key)];
        const auto now = Clock::now();
        if (r.logged != Clock::time_point{} && now - r.logged < std::chrono::minutes(1)) {
            ++r.unlogged;
            return;
        }
        r.logged = now;
        unlogged = std::exchange(r.unlogged, 0);
    }
    gossip::warning(Mask::meta,
                    "refused {} request {} under key {}: client {:016x} is a session of key {}{}",
                    proto::op_name(origin.op), origin.request_id, key, client_id, owner,
                    unlogged == 0 ? std::string()
                                  : " (" + std::to_string(unlogged) +
                                        " more such refusals of this key not logged)");
}

bool MetaService::bind_session(meta::WriteBatch &batch, const Job &job, std::uint64_t client_id)
{
    const auto it = sessions_.find(client_id);
    if (it == sessions_.end())
        return true;
    const std::string_view key = key_name(job.origin);
    if (it->second.key && *it->second.key == key)
        return true;
    if (!claimable(it->second.key, key)) {
        log_foreign(job.origin, client_id, *it->second.key);
        return false;
    }
    // Kept from a store that did not record keys, or the cluster key's from
    // before client_keys was set: it becomes the first user's, in the store
    // too.  Had the store refused, it stays claimable.
    const meta::SessionRecord record{client_id, it->second.created_ns, it->second.owner,
                                     std::string(key)};
    if (const int rc = batch.session_put(record); rc != 0) {
        gossip::error(Mask::meta, "cannot record the key of client {:016x}'s session: {}",
                      client_id, errno_text(-rc));
        return true;
    }
    gossip::warning(Mask::meta, "session of client {:016x} (of {}) now belongs to key {}",
                    client_id, it->second.key ? "the cluster key" : "no key yet", key);
    it->second.key = record.key;
    {
        const std::lock_guard lock(open_mutex_);
        session_keys_[client_id] = record.key;
    }
    return true;
}

bool MetaService::bound_to_key(meta::WriteBatch &batch, const Job &job)
{
    if (job.once.present() && !bind_session(batch, job, job.once.client_id))
        return false;
    if (const auto *s = std::get_if<proto::SessionRequest>(&job.body))
        return bind_session(batch, job, s->client_id);
    if (const auto *c = std::get_if<proto::CloseRequest>(&job.body))
        return bind_session(batch, job, c->client_id);
    if (const auto *c = std::get_if<proto::CreateRequest>(&job.body); c != nullptr && c->open)
        return bind_session(batch, job, c->open->client_id);
    return true;
}

void MetaService::apply_once(meta::WriteBatch &batch, Job &job)
{
    const proto::OnceIds &ids = job.once;
    const auto session = sessions_.find(ids.client_id);
    if (session == sessions_.end()) {
        // Ended (ttl, too many, its client restarted) or never opened: the
        // client opens a new one and sends the change again.
        job.error = EBADR;
        return;
    }
    session->second.last_change = Clock::now();
    const meta::ReplyId id{ids.client_id, ids.slot, ids.xid, ids.step};
    const proto::BodyDigest digest = proto::body_digest(job.body, digest_scratch_);
    meta::ReplyMatch match = meta::ReplyMatch::none;
    meta::SavedReply saved;
    if (const int rc = batch.reply_find(id, match, saved); rc != 0) {
        job.error = -rc;
        return;
    }
    if (match == meta::ReplyMatch::stale) {
        gossip::debug(Mask::meta, "{} of client {:016x} slot {} xid {}: an old retry, dropped",
                      proto::op_name(job.origin.op), ids.client_id, ids.slot, ids.xid);
        job.error = EALREADY;
        return;
    }
    if (match == meta::ReplyMatch::found) {
        if (saved.op != static_cast<std::uint16_t>(job.origin.op) ||
            std::memcmp(saved.digest.data(), digest.data(), digest.size()) != 0) {
            gossip::warning(Mask::meta,
                            "{} of client {:016x} slot {} xid {} step {} reuses the ids of "
                            "another request: refused",
                            proto::op_name(job.origin.op), ids.client_id, ids.slot, ids.xid,
                            ids.step);
            job.error = EIO;
            return;
        }
        gossip::debug(Mask::meta,
                      "{} of client {:016x} slot {} xid {}: a retry, answered from "
                      "the reply cache",
                      proto::op_name(job.origin.op), ids.client_id, ids.slot, ids.xid);
        job.error = saved.status;
        if (saved.status == 0) {
            const std::span<const std::byte> body(
                reinterpret_cast<const std::byte *>(saved.body.data()), // NOLINT
                saved.body.size());
            if (const proto::DecodeResult d = proto::decode_body(job.origin.op, body, job.response);
                !d) {
                gossip::error(Mask::meta, "a cached reply does not decode: {}", d.message());
                job.error = EIO;
            }
        }
        return;
    }
    if (const int rc = batch.begin_unit(); rc != 0) {
        job.error = -rc;
        return;
    }
    apply(batch, job);
    job.ran = true;
    meta::SavedReply reply;
    reply.op = static_cast<std::uint16_t>(job.origin.op);
    reply.status = job.error;
    std::memcpy(reply.digest.data(), digest.data(), digest.size());
    if (job.error == 0) {
        proto::encode_body(job.response, digest_scratch_);
        reply.body = to_bytes(digest_scratch_);
    }
    int rc = batch.reply_save(id, reply);
    if (rc == 0)
        rc = batch.end_unit(true);
    if (rc != 0) {
        // Neither the change nor its reply: a retry runs it again.
        static_cast<void>(batch.end_unit(false));
        if (job.hold) {
            undo_hold(*job.hold);
            job.hold.reset();
        }
        gossip::error(Mask::meta, "{} of client {:016x}: its reply cannot be kept: {}",
                      proto::op_name(job.origin.op), ids.client_id, errno_text(-rc));
        job.error = -rc;
        job.ran = false;
    }
}

bool MetaService::fault_fires(const Job &job, MetaFault::Kind &kind)
{
    // Only changes with exactly-once ids that ran count (not a retry
    // answered from the cache, nor one refused for want of a session), so
    // a test sets up its files with a client that sends no ids.  A close
    // has no ids (it is idempotent by its gens): those naming files count,
    // renewals do not.
    const auto *close = std::get_if<proto::CloseRequest>(&job.body);
    const bool counts = job.ran || (close != nullptr && !close->refs.empty() && job.error == 0);
    if (settings_.faults.empty() || !counts)
        return false;
    const std::uint64_t n = ++answered_[job.origin.op];
    for (const MetaFault &f : settings_.faults) {
        if (f.kind != MetaFault::Kind::crash_in_commit_wait && f.op == job.origin.op &&
            f.nth == n) {
            kind = f.kind;
            return true;
        }
    }
    return false;
}

void MetaService::crash_in_commit_wait()
{
    for (const MetaFault &f : settings_.faults) {
        if (f.kind != MetaFault::Kind::crash_in_commit_wait ||
            std::none_of(queued_.begin(), queued_.end(),
                         [&](const Job &j) { return j.origin.op == f.op; }))
            continue;
        if (++waits_[f.op] != f.nth)
            continue;
        std::unordered_set<std::uint64_t> sessions;
        for (const Job &j : queued_)
            sessions.insert(j.origin.session);
        gossip::error(Mask::meta,
                      "TEST FAULT: exiting in group-commit wait {} of a {}, {} changes of {} "
                      "clients queued, none committed",
                      f.nth, proto::op_name(f.op), queued_.size(), sessions.size());
        std::_Exit(9);
    }
}

} // namespace pvfs::server
