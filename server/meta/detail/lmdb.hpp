// Small RAII owners for LMDB's environment, transactions and cursors, and
// the translation of LMDB's return codes into negative errnos.  Internal to
// the metadata store.
#ifndef PVFS_META_LMDB_HPP
#define PVFS_META_LMDB_HPP

#include <lmdb.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace pvfs::meta::lmdb {

// 0 for MDB_SUCCESS; -ENOENT for MDB_NOTFOUND; -ENOSPC when the map or the
// transaction is full; a system error as its negative errno; anything else
// (corruption, version mismatch, bad transaction) -EIO.  Every error but
// MDB_NOTFOUND is logged with `what` (the operation that failed).
[[nodiscard]] int to_errno(int rc, std::string_view what) noexcept;

using Bytes = std::span<const std::uint8_t>;

// LMDB's API takes non-const pointers for data it only reads: it never
// writes through the mv_data of a key or of a value being put.
[[nodiscard]] inline MDB_val val(Bytes bytes) noexcept
{
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): input only, see above
    return MDB_val{bytes.size(), const_cast<std::uint8_t *>(bytes.data())};
}

[[nodiscard]] inline Bytes bytes(const MDB_val &v) noexcept
{
    return {static_cast<const std::uint8_t *>(v.mv_data), v.mv_size};
}

class Env {
public:
    // mdb_env_create + settings + mdb_env_open.  0 or a negative errno.
    [[nodiscard]] int open(const char *path, unsigned flags, std::uint64_t map_size,
                           unsigned max_dbs, unsigned max_readers);
    [[nodiscard]] MDB_env *get() const noexcept { return env_.get(); }
    void reset() noexcept { env_.reset(); }

private:
    struct Closer {
        void operator()(MDB_env *env) const noexcept { mdb_env_close(env); }
    };
    std::unique_ptr<MDB_env, Closer> env_;
};

// A transaction, aborted on destruction unless committed.  A write
// transaction's cursors must be closed before it ends, so Cursors live in
// an inner scope.
class Txn {
public:
    // parent: for a nested write transaction; flags: MDB_RDONLY or 0.
    [[nodiscard]] int begin(MDB_env *env, MDB_txn *parent, unsigned flags) noexcept;
    // 0 or a negative errno; the transaction is gone either way.
    [[nodiscard]] int commit() noexcept;
    void abort() noexcept { txn_.reset(); }
    [[nodiscard]] MDB_txn *get() const noexcept { return txn_.get(); }
    [[nodiscard]] bool active() const noexcept { return txn_ != nullptr; }

private:
    struct Aborter {
        void operator()(MDB_txn *txn) const noexcept { mdb_txn_abort(txn); }
    };
    std::unique_ptr<MDB_txn, Aborter> txn_;
};

class Cursor {
public:
    [[nodiscard]] int open(MDB_txn *txn, MDB_dbi dbi) noexcept;
    [[nodiscard]] MDB_cursor *get() const noexcept { return cursor_.get(); }

private:
    struct Closer {
        void operator()(MDB_cursor *cursor) const noexcept { mdb_cursor_close(cursor); }
    };
    std::unique_ptr<MDB_cursor, Closer> cursor_;
};

} // namespace pvfs::meta::lmdb

#endif // PVFS_META_LMDB_HPP
