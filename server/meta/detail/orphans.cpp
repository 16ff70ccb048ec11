// Orphans (docs/metadata.md "Orphans and open references"): regular files
// whose last name went while a client held them open, and then, once the
// last hold went, the data objects still to remove.
//
//   orphans: handle BE -> format u8, state u8, since_ns u64,
//            stripe_size u32, stripe_count u32, first_server u32 (LE)
#include <cerrno>

#include "detail/lmdb.hpp"
#include "detail/ops.hpp"
#include "pvfs/gossip.hpp"

namespace pvfs::meta::ops {

namespace gossip = pvfs::gossip;
using records::Bytes;
using records::Key;

namespace {

constexpr std::uint8_t orphan_format = 1;
constexpr std::size_t orphan_size = 1 + 1 + 8 + 4 + 4 + 4;

template <typename T> void put_le(std::vector<std::uint8_t> &out, T v)
{
    auto u = static_cast<std::uint64_t>(v);
    for (std::size_t i = 0; i < sizeof(T); ++i) {
        out.push_back(static_cast<std::uint8_t>(u & 0xFFU));
        u >>= 8U;
    }
}

template <typename T> T get_le(Bytes b, std::size_t at) noexcept
{
    std::uint64_t u = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
        u |= static_cast<std::uint64_t>(b[at + i]) << (8U * i);
    return static_cast<T>(u);
}

[[nodiscard]] int decode(Handle handle, Bytes v, Orphan &out)
{
    const auto state = v.size() == orphan_size ? v[1] : 0;
    if (v.size() != orphan_size || v[0] != orphan_format ||
        (state != static_cast<std::uint8_t>(OrphanState::held) &&
         state != static_cast<std::uint8_t>(OrphanState::reclaim))) {
        gossip::error(gossip::Mask::meta, "damaged orphan record of {:016x}", handle);
        return -EIO;
    }
    out.handle = handle;
    out.state = static_cast<OrphanState>(state);
    out.since_ns = get_le<std::uint64_t>(v, 2);
    out.layout.stripe_size = get_le<std::uint32_t>(v, 10);
    out.layout.stripe_count = get_le<std::uint32_t>(v, 14);
    out.layout.first_server = get_le<std::uint32_t>(v, 18);
    return 0;
}

// Calls fn(orphan) for each record with handle > after, in order, until fn
// returns false; 0 or a negative errno.
template <typename Fn> [[nodiscard]] int walk(const Tx &tx, Handle after, Fn &&fn)
{
    lmdb::Cursor cursor;
    if (const int rc = cursor.open(tx.txn, tx.tables->orphans); rc != 0)
        return rc;
    const Key start(after);
    MDB_val k = lmdb::val(start.bytes());
    MDB_val v{};
    int rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_SET_RANGE);
    while (rc == 0) {
        const Bytes key = lmdb::bytes(k);
        if (key.size() != 8)
            return -EIO;
        const Handle h = records::load_be64(key);
        if (h > after) {
            Orphan o;
            if (const int d = decode(h, lmdb::bytes(v), o); d != 0)
                return d;
            if (!fn(o))
                return 0;
        }
        rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_NEXT);
    }
    return rc == MDB_NOTFOUND ? 0 : lmdb::to_errno(rc, "mdb_cursor_get");
}

} // namespace

std::uint64_t time_ns(const Timespec &t) noexcept
{
    return t.sec < 0 ? 0
                     : static_cast<std::uint64_t>(t.sec) * 1'000'000'000U + std::uint64_t{t.nsec};
}

int orphan_put(const Tx &tx, const Orphan &o)
{
    std::vector<std::uint8_t> bytes;
    bytes.reserve(orphan_size);
    put_le(bytes, orphan_format);
    put_le(bytes, static_cast<std::uint8_t>(o.state));
    put_le(bytes, o.since_ns);
    put_le(bytes, o.layout.stripe_size);
    put_le(bytes, o.layout.stripe_count);
    put_le(bytes, o.layout.first_server);
    const Key key(o.handle);
    MDB_val k = lmdb::val(key.bytes());
    MDB_val v = lmdb::val(Bytes(bytes));
    return lmdb::to_errno(mdb_put(tx.txn, tx.tables->orphans, &k, &v, 0), "mdb_put");
}

int orphan_get(const Tx &tx, Handle handle, Orphan &out)
{
    const Key key(handle);
    MDB_val k = lmdb::val(key.bytes());
    MDB_val v{};
    if (const int rc = mdb_get(tx.txn, tx.tables->orphans, &k, &v); rc != 0)
        return lmdb::to_errno(rc, "mdb_get");
    return decode(handle, lmdb::bytes(v), out);
}

int orphan_delete(const Tx &tx, Handle handle)
{
    const Key key(handle);
    MDB_val k = lmdb::val(key.bytes());
    const int rc = mdb_del(tx.txn, tx.tables->orphans, &k, nullptr);
    return rc == MDB_NOTFOUND ? 0 : lmdb::to_errno(rc, "mdb_del");
}

int orphan_done(Tx &tx, Handle handle)
{
    Orphan o;
    if (const int rc = orphan_get(tx, handle, o); rc != 0)
        return rc == -ENOENT ? 0 : rc;
    if (o.state == OrphanState::held)
        return -EBUSY;
    return orphan_delete(tx, handle);
}

int orphan_handout(Tx &tx, std::uint64_t older_than_ns, std::uint64_t now_ns, std::size_t max,
                   std::vector<Orphan> &out)
{
    out.clear();
    if (max == 0)
        return 0;
    if (const int rc = walk(tx, 0,
                            [&](const Orphan &o) {
                                if (o.state == OrphanState::reclaim && o.since_ns <= older_than_ns)
                                    out.push_back(o);
                                return out.size() < max;
                            });
        rc != 0)
        return rc;
    for (Orphan &o : out) {
        o.since_ns = now_ns;
        if (const int rc = orphan_put(tx, o); rc != 0)
            return rc;
    }
    return 0;
}

int list_orphans(Tx &tx, std::uint64_t cookie, std::uint32_t max, std::vector<Orphan> &out,
                 bool &eof)
{
    out.clear();
    eof = true;
    if (max == 0)
        return -EINVAL;
    return walk(tx, cookie, [&](const Orphan &o) {
        if (out.size() == max) {
            eof = false;
            return false;
        }
        out.push_back(o);
        return true;
    });
}

} // namespace pvfs::meta::ops
