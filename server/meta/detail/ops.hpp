// The store's operations over one LMDB transaction.  Store runs the reads
// in read transactions and WriteBatch the changes in nested write
// transactions; neither knows the tables, the operations do.
#ifndef PVFS_META_OPS_HPP
#define PVFS_META_OPS_HPP

#include <lmdb.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "detail/lmdb.hpp"
#include "detail/records.hpp"
#include "meta_store.hpp"
#include "pvfs/perm.hpp"
#include "pvfs/types.hpp"

namespace pvfs::meta::ops {

struct Tables {
    MDB_dbi meta = 0;     // counters: string key -> u64 LE
    MDB_dbi inodes = 0;   // handle BE -> inode record
    MDB_dbi dirents = 0;  // (dir BE, name) -> dirent record
    MDB_dbi order = 0;    // (dir BE, seq BE) -> order record
    MDB_dbi symlinks = 0; // handle BE -> target
    MDB_dbi xattrs = 0;   // (handle BE, name) -> value
    MDB_dbi sessions = 0; // client id BE -> session record (once.cpp)
    MDB_dbi replies = 0;  // empty: stores from before kept replies here (once.cpp)
    MDB_dbi orphans = 0;  // handle BE -> orphan record (orphans.cpp)
};
inline constexpr unsigned table_count = 9;

// One transaction and the store it belongs to.
struct Tx {
    MDB_txn *txn = nullptr;
    const Tables *tables = nullptr;
    std::uint32_t server = 0; // this store's index: handles of others are -EXDEV
    std::uint32_t max_links = meta::max_links;
    Timespec now; // the time of the operation
    // unlink and rename: is a regular file open somewhere?  nullptr: no.
    const OpenCheck *held = nullptr;
};

// Raw table access, for every file of operations: 0 or a negative errno
// (-ENOENT for a missing key, not logged).
[[nodiscard]] inline int get(const Tx &tx, MDB_dbi dbi, records::Bytes key,
                             records::Bytes &value) noexcept
{
    MDB_val k = lmdb::val(key);
    MDB_val v{};
    const int rc = mdb_get(tx.txn, dbi, &k, &v);
    if (rc != 0)
        return lmdb::to_errno(rc, "mdb_get");
    value = lmdb::bytes(v);
    return 0;
}

// -EEXIST (not logged) when `flags` has MDB_NOOVERWRITE and the key exists.
[[nodiscard]] inline int put(const Tx &tx, MDB_dbi dbi, records::Bytes key, records::Bytes value,
                             unsigned flags = 0) noexcept
{
    MDB_val k = lmdb::val(key);
    MDB_val v = lmdb::val(value);
    const int rc = mdb_put(tx.txn, dbi, &k, &v, flags);
    if (rc == MDB_KEYEXIST)
        return -EEXIST;
    return lmdb::to_errno(rc, "mdb_put");
}

// Opens the tables, creating missing ones (needs a write transaction).
[[nodiscard]] int open_tables(MDB_txn *txn, Tables &out) noexcept;

// Sets up a new store, or checks an existing one was made for this server
// index and format.
[[nodiscard]] int init_store(Tx &tx, const Layout &default_layout);

[[nodiscard]] bool valid_layout(const Layout &layout) noexcept;

// ---- reads ----
[[nodiscard]] int lookup(Tx &tx, const Credentials &cred, Handle parent, std::string_view name,
                         Attr &out);
[[nodiscard]] int getattr(Tx &tx, Handle handle, Attr &out);
// 0 when `handle` was issued by this server and names no inode any more;
// -EEXIST while it does, -ESTALE when not issued yet, -EXDEV for another's.
[[nodiscard]] int handle_gone(Tx &tx, Handle handle);
[[nodiscard]] int readlink(Tx &tx, Handle handle, std::string &target);
[[nodiscard]] int readdir(Tx &tx, const Credentials &cred, Handle dir, std::uint64_t cookie,
                          std::uint32_t max_entries, DirPage &out);
[[nodiscard]] int xattr_get(Tx &tx, const Credentials &cred, Handle handle, std::string_view name,
                            std::string &value);
[[nodiscard]] int xattr_list(Tx &tx, Handle handle, std::vector<std::string> &names);
[[nodiscard]] int layout_get(Tx &tx, Handle handle, Layout &out);
[[nodiscard]] int statfs(Tx &tx, MDB_env *env, Stats &out);
[[nodiscard]] int list_handles(Tx &tx, std::uint64_t cookie, std::uint32_t max_handles,
                               HandlePage &out);

// ---- changes ----
[[nodiscard]] int create(Tx &tx, const Credentials &cred, Handle parent, std::string_view name,
                         std::uint32_t mode, bool exclusive, const Layout &layout,
                         CreateResult &out);
[[nodiscard]] int mkdir(Tx &tx, const Credentials &cred, Handle parent, std::string_view name,
                        std::uint32_t mode, Attr &out);
[[nodiscard]] int mknod(Tx &tx, const Credentials &cred, Handle parent, std::string_view name,
                        ObjectType type, std::uint32_t mode, std::uint64_t rdev, Attr &out);
[[nodiscard]] int symlink(Tx &tx, const Credentials &cred, Handle parent, std::string_view name,
                          std::string_view target, Attr &out);
[[nodiscard]] int link(Tx &tx, const Credentials &cred, Handle target, Handle new_parent,
                       std::string_view new_name, Attr &out);
[[nodiscard]] int unlink(Tx &tx, const Credentials &cred, Handle parent, std::string_view name,
                         Removed &out);
[[nodiscard]] int rmdir(Tx &tx, const Credentials &cred, Handle parent, std::string_view name);
[[nodiscard]] int rename(Tx &tx, const Credentials &cred, Handle old_parent,
                         std::string_view old_name, Handle new_parent, std::string_view new_name,
                         std::uint32_t flags, Removed &replaced);
[[nodiscard]] int setattr(Tx &tx, const Credentials &cred, Handle handle,
                          const perm::AttrChange &change, Attr &out);
[[nodiscard]] int data_written(Tx &tx, const Credentials &cred, Handle handle, Attr &out,
                               bool writer);
[[nodiscard]] int xattr_set(Tx &tx, const Credentials &cred, Handle handle, std::string_view name,
                            std::string_view value, std::uint32_t flags);
[[nodiscard]] int xattr_remove(Tx &tx, const Credentials &cred, Handle handle,
                               std::string_view name);
[[nodiscard]] int layout_set(Tx &tx, const Credentials &cred, Handle handle, const Layout &layout);

// ---- remote directories (docs/metadata.md "Remote directories") ----
[[nodiscard]] int mkdir_object(Tx &tx, const Credentials &cred, const Attr &parent,
                               std::uint32_t mode, Attr &out);
[[nodiscard]] int link_dir(Tx &tx, const Credentials &cred, Handle parent, std::string_view name,
                           Handle handle);
[[nodiscard]] int retire_dir(Tx &tx, Handle handle, bool retire, Attr &out);
[[nodiscard]] int unlink_dir(Tx &tx, const Credentials &cred, Handle parent, std::string_view name,
                             Handle handle, std::uint32_t owner_uid);
[[nodiscard]] int remove_dir_object(Tx &tx, Handle handle);

// ---- exactly once: sessions and the reply cache (once.cpp) ----
[[nodiscard]] int reply_find(Tx &tx, const ReplyId &id, ReplyMatch &match, SavedReply &out);
[[nodiscard]] int reply_save(Tx &tx, const ReplyId &id, const SavedReply &reply);
// Moves the replies of a store written before they moved to the meta
// table; nothing to do in a newer one.
[[nodiscard]] int migrate_replies(Tx &tx);
[[nodiscard]] int session_put(Tx &tx, const SessionRecord &session);
[[nodiscard]] int session_get(Tx &tx, std::uint64_t client_id, SessionRecord &out);
[[nodiscard]] int session_delete(Tx &tx, std::uint64_t client_id);
[[nodiscard]] int list_sessions(Tx &tx, std::vector<SessionRecord> &out);

// ---- orphans (orphans.cpp; release in ops.cpp) ----
[[nodiscard]] int orphan_put(const Tx &tx, const Orphan &orphan);
[[nodiscard]] int orphan_get(const Tx &tx, Handle handle, Orphan &out);
[[nodiscard]] int orphan_delete(const Tx &tx, Handle handle);
[[nodiscard]] int release(Tx &tx, Handle handle, Removed &out);
[[nodiscard]] int orphan_done(Tx &tx, Handle handle);
[[nodiscard]] int orphan_handout(Tx &tx, std::uint64_t older_than_ns, std::uint64_t now_ns,
                                 std::size_t max, std::vector<Orphan> &out);
[[nodiscard]] int list_orphans(Tx &tx, std::uint64_t cookie, std::uint32_t max,
                               std::vector<Orphan> &out, bool &eof);
[[nodiscard]] std::uint64_t time_ns(const Timespec &t) noexcept;

} // namespace pvfs::meta::ops

#endif // PVFS_META_OPS_HPP
