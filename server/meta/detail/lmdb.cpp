#include "detail/lmdb.hpp"

#include <cerrno>

#include "pvfs/gossip.hpp"

namespace pvfs::meta::lmdb {

namespace gossip = pvfs::gossip;

int to_errno(int rc, std::string_view what) noexcept
{
    if (rc == MDB_SUCCESS)
        return 0;
    if (rc == MDB_NOTFOUND)
        return -ENOENT;
    if (rc == MDB_MAP_FULL || rc == MDB_TXN_FULL) {
        gossip::warning(gossip::Mask::meta, "{}: {}", what, mdb_strerror(rc));
        return -ENOSPC;
    }
    gossip::error(gossip::Mask::meta, "{}: {}", what, mdb_strerror(rc));
    // LMDB's own codes are negative; positive ones are system errnos.
    return rc > 0 ? -rc : -EIO;
}

int Env::open(const char *path, unsigned flags, std::uint64_t map_size, unsigned max_dbs,
              unsigned max_readers)
{
    MDB_env *raw = nullptr;
    int rc = mdb_env_create(&raw);
    if (rc != 0)
        return to_errno(rc, "mdb_env_create");
    std::unique_ptr<MDB_env, Closer> env(raw);
    if ((rc = mdb_env_set_maxdbs(env.get(), max_dbs)) != 0)
        return to_errno(rc, "mdb_env_set_maxdbs");
    if ((rc = mdb_env_set_mapsize(env.get(), map_size)) != 0)
        return to_errno(rc, "mdb_env_set_mapsize");
    if ((rc = mdb_env_set_maxreaders(env.get(), max_readers)) != 0)
        return to_errno(rc, "mdb_env_set_maxreaders");
    if ((rc = mdb_env_open(env.get(), path, flags, 0600)) != 0)
        return to_errno(rc, "mdb_env_open");
    env_ = std::move(env);
    return 0;
}

int Txn::begin(MDB_env *env, MDB_txn *parent, unsigned flags) noexcept
{
    txn_.reset();
    MDB_txn *raw = nullptr;
    const int rc = mdb_txn_begin(env, parent, flags, &raw);
    if (rc != 0)
        return to_errno(rc, "mdb_txn_begin");
    txn_.reset(raw);
    return 0;
}

int Txn::commit() noexcept
{
    // mdb_txn_commit frees the transaction whether or not it succeeds.
    return to_errno(mdb_txn_commit(txn_.release()), "mdb_txn_commit");
}

int Cursor::open(MDB_txn *txn, MDB_dbi dbi) noexcept
{
    cursor_.reset();
    MDB_cursor *raw = nullptr;
    const int rc = mdb_cursor_open(txn, dbi, &raw);
    if (rc != 0)
        return to_errno(rc, "mdb_cursor_open");
    cursor_.reset(raw);
    return 0;
}

} // namespace pvfs::meta::lmdb
