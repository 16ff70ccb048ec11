// Sessions and the reply cache (docs/metadata.md "Sessions and the reply
// cache"): the records that make a retried change return its first result.
//
//   sessions: client id BE -> format u8, created_ns u64, owner length u8, owner,
//             then (absent in records from before keys were kept) key name
//             length u8, key name
//   meta:     "reply:", client id BE, slot BE as u64 -> format u8, xid u64,
//             steps u8, then per step: step u32, op u16, status i32,
//             digest 16 bytes, body length u16, body
//
// Both are written in the batch of the operation they belong to, so a
// reply is durable exactly when its operation is.  The replies live in the
// counters' table rather than one of their own: LMDB copies every page a
// commit touches, and a create already rewrites the page holding next_id
// and next_seq, so while the slots fit beside them (a few dozen) a reply
// costs no page of its own (docs/metadata.md "Where the replies live").
// Stores written before kept them in the table "replies"; open moves them.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "detail/lmdb.hpp"
#include "detail/ops.hpp"
#include "pvfs/gossip.hpp"

namespace pvfs::meta::ops {

namespace gossip = pvfs::gossip;
using records::Bytes;
using records::Key;

namespace {

constexpr std::uint8_t session_format = 1;
constexpr std::uint8_t reply_format = 1;
constexpr std::size_t max_owner = 255;
constexpr std::size_t max_key_name = 64; // proto::max_key_name
constexpr std::size_t step_header = 4 + 2 + 4 + 16 + 2;
constexpr std::string_view reply_prefix = "reply:";

// A slot's key in the meta table: the prefix, the client id and the slot,
// so that a session's slots are one range.
class ReplyKey {
public:
    ReplyKey(std::uint64_t client_id, std::uint64_t slot) noexcept
    {
        std::memcpy(buf_.data(), reply_prefix.data(), reply_prefix.size());
        const Key k(client_id, slot);
        std::memcpy(buf_.data() + reply_prefix.size(), k.bytes().data(), 16);
    }
    [[nodiscard]] Bytes bytes() const noexcept { return {buf_.data(), buf_.size()}; }
    // A key of this form belongs to `client_id`.
    [[nodiscard]] static bool of_client(Bytes key, std::uint64_t client_id) noexcept
    {
        return key.size() == reply_prefix.size() + 16 &&
               std::memcmp(key.data(), reply_prefix.data(), reply_prefix.size()) == 0 &&
               records::load_be64(key.subspan(reply_prefix.size())) == client_id;
    }

private:
    std::array<std::uint8_t, 6 + 16> buf_{};
};
static_assert(reply_prefix.size() == 6);

class Out {
public:
    template <typename T> void put(T v)
    {
        auto u = static_cast<std::uint64_t>(v);
        for (std::size_t i = 0; i < sizeof(T); ++i) {
            bytes.push_back(static_cast<std::uint8_t>(u & 0xFFU));
            u >>= 8U;
        }
    }
    void put(Bytes b) { bytes.insert(bytes.end(), b.begin(), b.end()); }
    std::vector<std::uint8_t> bytes;
};

// Reads little-endian fields; ok() turns false at the first short read.
class In {
public:
    explicit In(Bytes b) noexcept : in_(b) {}
    template <typename T> T get() noexcept
    {
        if (in_.size() - pos_ < sizeof(T)) {
            ok_ = false;
            return T{};
        }
        std::uint64_t u = 0;
        for (std::size_t i = 0; i < sizeof(T); ++i)
            u |= static_cast<std::uint64_t>(in_[pos_++]) << (8U * i);
        return static_cast<T>(u);
    }
    Bytes take(std::size_t n) noexcept
    {
        if (in_.size() - pos_ < n) {
            ok_ = false;
            return {};
        }
        const Bytes b = in_.subspan(pos_, n);
        pos_ += n;
        return b;
    }
    [[nodiscard]] bool ok() const noexcept { return ok_; }
    [[nodiscard]] bool done() const noexcept { return ok_ && pos_ == in_.size(); }

private:
    Bytes in_;
    std::size_t pos_ = 0;
    bool ok_ = true;
};

struct Step {
    std::uint32_t step = 0;
    SavedReply reply;
};
struct SlotRecord {
    std::uint64_t xid = 0;
    std::vector<Step> steps;
};

// The xid alone, without copying the steps.
[[nodiscard]] int slot_xid(Bytes value, std::uint64_t &xid)
{
    In in(value);
    const auto format = in.get<std::uint8_t>();
    xid = in.get<std::uint64_t>();
    if (!in.ok() || format != reply_format) {
        gossip::error(gossip::Mask::meta, "damaged reply cache record");
        return -EIO;
    }
    return 0;
}

[[nodiscard]] int decode_slot(Bytes value, SlotRecord &out)
{
    In in(value);
    const auto format = in.get<std::uint8_t>();
    out.xid = in.get<std::uint64_t>();
    const auto count = in.get<std::uint8_t>();
    if (!in.ok() || format != reply_format || count > max_reply_steps) {
        gossip::error(gossip::Mask::meta, "damaged reply cache record");
        return -EIO;
    }
    out.steps.resize(count);
    for (Step &s : out.steps) {
        s.step = in.get<std::uint32_t>();
        s.reply.op = in.get<std::uint16_t>();
        s.reply.status = in.get<std::int32_t>();
        const Bytes digest = in.take(s.reply.digest.size());
        if (in.ok())
            std::copy(digest.begin(), digest.end(), s.reply.digest.begin());
        const auto length = in.get<std::uint16_t>();
        const Bytes body = in.take(length);
        s.reply.body.assign(body.begin(), body.end());
    }
    if (!in.done()) {
        gossip::error(gossip::Mask::meta, "damaged reply cache record");
        return -EIO;
    }
    return 0;
}

[[nodiscard]] std::vector<std::uint8_t> encode_slot(const SlotRecord &r)
{
    Out out;
    std::size_t size = 1 + 8 + 1;
    for (const Step &s : r.steps)
        size += step_header + s.reply.body.size();
    out.bytes.reserve(size);
    out.put(reply_format);
    out.put(r.xid);
    out.put(static_cast<std::uint8_t>(r.steps.size()));
    for (const Step &s : r.steps) {
        out.put(s.step);
        out.put(s.reply.op);
        out.put(s.reply.status);
        out.put(Bytes(s.reply.digest));
        out.put(static_cast<std::uint16_t>(s.reply.body.size()));
        out.put(Bytes(s.reply.body));
    }
    return std::move(out.bytes);
}

[[nodiscard]] int decode_session(std::uint64_t client_id, Bytes value, SessionRecord &out)
{
    In in(value);
    const auto format = in.get<std::uint8_t>();
    out.client_id = client_id;
    out.created_ns = in.get<std::uint64_t>();
    const auto length = in.get<std::uint8_t>();
    const Bytes owner = in.take(length);
    out.key.reset();
    if (in.ok() && !in.done()) {
        // Added after format 1 without a new format: a record that ends
        // after its owner is from before, and an older server reading
        // this one finds it damaged (docs/metadata.md).
        const auto key_length = in.get<std::uint8_t>();
        const Bytes key = in.take(key_length);
        if (in.ok() && key_length > 0 && key_length <= max_key_name)
            out.key.emplace(reinterpret_cast<const char *>(key.data()), key.size()); // NOLINT
        else
            in.take(1); // fails: an empty or overlong name is damage
    }
    if (!in.done() || format != session_format) {
        gossip::error(gossip::Mask::meta, "damaged session record of client {:016x}", client_id);
        return -EIO;
    }
    out.owner.assign(reinterpret_cast<const char *>(owner.data()), owner.size()); // NOLINT
    return 0;
}

} // namespace

int reply_find(Tx &tx, const ReplyId &id, ReplyMatch &match, SavedReply &out)
{
    match = ReplyMatch::none;
    const ReplyKey key(id.client_id, id.slot);
    Bytes value;
    if (const int rc = get(tx, tx.tables->meta, key.bytes(), value); rc != 0)
        return rc == -ENOENT ? 0 : rc;
    // A new request's xid is past the slot's: its old steps need no decoding.
    std::uint64_t xid = 0;
    if (const int rc = slot_xid(value, xid); rc != 0)
        return rc;
    if (xid > id.xid) {
        match = ReplyMatch::stale;
        return 0;
    }
    if (xid < id.xid)
        return 0;
    SlotRecord record;
    if (const int rc = decode_slot(value, record); rc != 0)
        return rc;
    const auto it = std::find_if(record.steps.begin(), record.steps.end(),
                                 [&id](const Step &s) { return s.step == id.step; });
    if (it != record.steps.end()) {
        match = ReplyMatch::found;
        out = std::move(it->reply);
    }
    return 0;
}

int reply_save(Tx &tx, const ReplyId &id, const SavedReply &reply)
{
    if (reply.body.size() > max_reply_body)
        return -E2BIG;
    const ReplyKey key(id.client_id, id.slot);
    SlotRecord record;
    Bytes value;
    if (const int rc = get(tx, tx.tables->meta, key.bytes(), value); rc == 0) {
        std::uint64_t xid = 0;
        if (const int d = slot_xid(value, xid); d != 0)
            return d;
        // Another xid's steps are replaced whole: only this xid's are kept.
        if (xid == id.xid) {
            if (const int d = decode_slot(value, record); d != 0)
                return d;
        }
    } else if (rc != -ENOENT) {
        return rc;
    }
    if (record.xid != id.xid) {
        record.xid = id.xid;
        record.steps.clear();
    }
    const auto it = std::find_if(record.steps.begin(), record.steps.end(),
                                 [&id](const Step &s) { return s.step == id.step; });
    if (it != record.steps.end()) {
        it->reply = reply;
    } else {
        if (record.steps.size() >= max_reply_steps)
            return -E2BIG;
        record.steps.push_back(Step{id.step, reply});
    }
    const std::vector<std::uint8_t> bytes = encode_slot(record);
    return put(tx, tx.tables->meta, key.bytes(), bytes);
}

int migrate_replies(Tx &tx)
{
    lmdb::Cursor cursor;
    if (const int rc = cursor.open(tx.txn, tx.tables->replies); rc != 0)
        return rc;
    std::size_t moved = 0;
    for (;;) {
        MDB_val k{};
        MDB_val v{};
        const int rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_FIRST);
        if (rc == MDB_NOTFOUND)
            break;
        if (rc != 0)
            return lmdb::to_errno(rc, "mdb_cursor_get");
        const Bytes old_key = lmdb::bytes(k);
        SlotRecord record;
        if (old_key.size() != 16 || decode_slot(lmdb::bytes(v), record) != 0) {
            gossip::error(gossip::Mask::meta, "damaged reply cache record in the old table");
            return -EIO;
        }
        const ReplyKey key(records::load_be64(old_key), records::load_be64(old_key.subspan(8)));
        if (const int p = put(tx, tx.tables->meta, key.bytes(), lmdb::bytes(v)); p != 0)
            return p;
        if (const int d = mdb_cursor_del(cursor.get(), 0); d != 0)
            return lmdb::to_errno(d, "mdb_cursor_del");
        ++moved;
    }
    if (moved > 0)
        gossip::info(gossip::Mask::meta, "moved {} reply cache slots to the meta table", moved);
    return 0;
}

int session_put(Tx &tx, const SessionRecord &session)
{
    if (session.client_id == 0 || session.owner.size() > max_owner ||
        (session.key && (session.key->empty() || session.key->size() > max_key_name)))
        return -EINVAL;
    Out out;
    out.put(session_format);
    out.put(session.created_ns);
    out.put(static_cast<std::uint8_t>(session.owner.size()));
    out.put(Bytes(reinterpret_cast<const std::uint8_t *>(session.owner.data()), // NOLINT
                  session.owner.size()));
    if (session.key) {
        out.put(static_cast<std::uint8_t>(session.key->size()));
        out.put(Bytes(reinterpret_cast<const std::uint8_t *>(session.key->data()), // NOLINT
                      session.key->size()));
    }
    const Key key(session.client_id);
    return put(tx, tx.tables->sessions, key.bytes(), out.bytes);
}

int session_get(Tx &tx, std::uint64_t client_id, SessionRecord &out)
{
    const Key key(client_id);
    Bytes value;
    if (const int rc = get(tx, tx.tables->sessions, key.bytes(), value); rc != 0)
        return rc;
    return decode_session(client_id, value, out);
}

int session_delete(Tx &tx, std::uint64_t client_id)
{
    const Key key(client_id);
    MDB_val k = lmdb::val(key.bytes());
    if (const int rc = mdb_del(tx.txn, tx.tables->sessions, &k, nullptr);
        rc != 0 && rc != MDB_NOTFOUND)
        return lmdb::to_errno(rc, "mdb_del");
    // Its slots are the keys that start with the prefix and its id.
    lmdb::Cursor cursor;
    if (const int rc = cursor.open(tx.txn, tx.tables->meta); rc != 0)
        return rc;
    const ReplyKey first(client_id, 0);
    // Seek again after each delete: where a deleting cursor stands has
    // differed between LMDB releases.
    for (;;) {
        MDB_val ck = lmdb::val(first.bytes());
        MDB_val v{};
        const int rc = mdb_cursor_get(cursor.get(), &ck, &v, MDB_SET_RANGE);
        if (rc == MDB_NOTFOUND)
            return 0;
        if (rc != 0)
            return lmdb::to_errno(rc, "mdb_cursor_get");
        if (!ReplyKey::of_client(lmdb::bytes(ck), client_id))
            return 0;
        if (const int d = mdb_cursor_del(cursor.get(), 0); d != 0)
            return lmdb::to_errno(d, "mdb_cursor_del");
    }
}

int list_sessions(Tx &tx, std::vector<SessionRecord> &out)
{
    out.clear();
    lmdb::Cursor cursor;
    if (const int rc = cursor.open(tx.txn, tx.tables->sessions); rc != 0)
        return rc;
    MDB_val k{};
    MDB_val v{};
    int rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_FIRST);
    while (rc == 0) {
        const Bytes key = lmdb::bytes(k);
        if (key.size() != 8)
            return -EIO;
        SessionRecord s;
        if (const int d = decode_session(records::load_be64(key), lmdb::bytes(v), s); d != 0)
            return d;
        out.push_back(std::move(s));
        rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_NEXT);
    }
    return rc == MDB_NOTFOUND ? 0 : lmdb::to_errno(rc, "mdb_cursor_get");
}

} // namespace pvfs::meta::ops
