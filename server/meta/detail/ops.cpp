// The metadata operations over one LMDB transaction.  Each function checks
// its arguments and the caller's permissions in the order Linux's VFS
// does, so a request that is wrong in several ways fails with the errno a
// local file system would give.  Inodes are re-read after every step that
// may have changed them: the old and new parents of a rename may be one
// directory, and re-reading inside the transaction is cheap.
#include "detail/ops.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "detail/lmdb.hpp"
#include "pvfs/gossip.hpp"

namespace pvfs::meta::ops {

namespace gossip = pvfs::gossip;
using records::Bytes;
using records::Dirent;
using records::Inode;
using records::Key;

namespace {

// A directory chain longer than this is a damaged database, not a deep tree.
constexpr unsigned max_depth = 1U << 20U;

[[nodiscard]] Bytes as_bytes(std::string_view s) noexcept
{
    return {reinterpret_cast<const std::uint8_t *>(s.data()), s.size()};
}

[[nodiscard]] std::string_view as_string(Bytes b) noexcept
{
    return {reinterpret_cast<const char *>(b.data()), b.size()};
}

// ---- raw table access ----

[[nodiscard]] int del(const Tx &tx, MDB_dbi dbi, Bytes key) noexcept
{
    MDB_val k = lmdb::val(key);
    return lmdb::to_errno(mdb_del(tx.txn, dbi, &k, nullptr), "mdb_del");
}

[[nodiscard]] int get_counter(const Tx &tx, std::string_view name, std::uint64_t &out) noexcept
{
    Bytes v;
    if (const int rc = get(tx, tx.tables->meta, as_bytes(name), v); rc != 0)
        return rc;
    if (v.size() != 8) {
        gossip::error(gossip::Mask::meta, "damaged counter {}", name);
        return -EIO;
    }
    out = records::load_le64(v);
    return 0;
}

[[nodiscard]] int set_counter(const Tx &tx, std::string_view name, std::uint64_t value) noexcept
{
    std::array<std::uint8_t, 8> buf{};
    records::store_le64(buf.data(), value);
    return put(tx, tx.tables->meta, as_bytes(name), buf);
}

// Takes the next value of a persistent counter; -ENOSPC when `limit` is
// reached.
[[nodiscard]] int take_counter(const Tx &tx, std::string_view name, std::uint64_t limit,
                               std::uint64_t &out) noexcept
{
    std::uint64_t next = 0;
    if (const int rc = get_counter(tx, name, next); rc != 0)
        return rc == -ENOENT ? -EIO : rc;
    if (next >= limit)
        return -ENOSPC;
    out = next;
    return set_counter(tx, name, next + 1);
}

// ---- inodes ----

// -EXDEV for another server's handle, -ENOENT for one that does not exist.
[[nodiscard]] int load(const Tx &tx, Handle handle, Inode &out) noexcept
{
    if (handle == no_handle)
        return -ENOENT;
    if (handle_server(handle) != tx.server)
        return -EXDEV;
    Bytes v;
    if (const int rc = get(tx, tx.tables->inodes, Key(handle).bytes(), v); rc != 0)
        return rc;
    return records::decode_inode(handle, v, out);
}

[[nodiscard]] int save(const Tx &tx, const Inode &inode) noexcept
{
    const auto rec = records::encode_inode(inode);
    return put(tx, tx.tables->inodes, Key(inode.attr.handle).bytes(), rec);
}

[[nodiscard]] int load_dir(const Tx &tx, Handle handle, Inode &out) noexcept
{
    if (const int rc = load(tx, handle, out); rc != 0)
        return rc;
    return out.attr.type == ObjectType::directory ? 0 : -ENOTDIR;
}

// ENAMETOOLONG for a long name, EINVAL for any other invalid one.
[[nodiscard]] int check_name(std::string_view name) noexcept
{
    if (name.size() > max_name)
        return -ENAMETOOLONG;
    return valid_name(name) ? 0 : -EINVAL;
}

// Loads a directory the caller may search, and checks the name in it.
[[nodiscard]] int open_dir(const Tx &tx, const Credentials &cred, Handle dir, std::string_view name,
                           Inode &out) noexcept
{
    if (const int rc = load_dir(tx, dir, out); rc != 0)
        return rc;
    if (const int rc = perm::may_access(cred, out.attr, perm::may_exec); rc != 0)
        return rc;
    return check_name(name);
}

[[nodiscard]] int find_entry(const Tx &tx, Handle dir, std::string_view name, Dirent &out) noexcept
{
    Bytes v;
    if (const int rc = get(tx, tx.tables->dirents, Key(dir, name).bytes(), v); rc != 0)
        return rc;
    return records::decode_dirent(v, out);
}

void touch_dir(const Tx &tx, Inode &dir) noexcept
{
    dir.attr.mtime = tx.now;
    dir.attr.ctime = tx.now;
}

// A retired directory (the first step of removing a remote directory)
// is marked in the meta table under "retired:" and its handle, so the
// inode record keeps its format.
class RetiredKey {
public:
    explicit RetiredKey(Handle handle) noexcept
    {
        std::memcpy(buf_.data(), prefix.data(), prefix.size());
        const Key h(handle);
        std::memcpy(buf_.data() + prefix.size(), h.bytes().data(), 8);
    }
    [[nodiscard]] Bytes bytes() const noexcept { return {buf_.data(), buf_.size()}; }

private:
    static constexpr std::string_view prefix = "retired:";
    std::array<std::uint8_t, 16> buf_{};
};

[[nodiscard]] int is_retired(const Tx &tx, Handle dir, bool &out) noexcept
{
    Bytes v;
    const int rc = get(tx, tx.tables->meta, RetiredKey(dir).bytes(), v);
    out = rc == 0;
    return rc == -ENOENT ? 0 : rc;
}

[[nodiscard]] bool is_remote(const Tx &tx, Handle h) noexcept
{
    return h != no_handle && handle_server(h) != tx.server;
}

// Adds name -> child to dir with a new, larger seq; the directory's size
// and times follow.  A retired directory is as good as gone: -ENOENT.
[[nodiscard]] int add_entry(const Tx &tx, Handle dir, std::string_view name, Handle child,
                            ObjectType type) noexcept
{
    Inode d;
    if (const int rc = load(tx, dir, d); rc != 0)
        return rc;
    bool retired = false;
    if (const int rc = is_retired(tx, dir, retired); rc != 0)
        return rc;
    if (retired)
        return -ENOENT;
    Dirent entry{child, type, 0};
    if (const int rc = take_counter(tx, records::key_next_seq, UINT64_MAX, entry.seq); rc != 0)
        return rc;
    if (const int rc = put(tx, tx.tables->dirents, Key(dir, name).bytes(),
                           records::encode_dirent(entry), MDB_NOOVERWRITE);
        rc != 0)
        return rc;
    const records::OrderValue order(child, type, name);
    if (const int rc = put(tx, tx.tables->order, Key(dir, entry.seq).bytes(), order.bytes());
        rc != 0)
        return rc;
    ++d.attr.size;
    touch_dir(tx, d);
    return save(tx, d);
}

[[nodiscard]] int remove_entry(const Tx &tx, Handle dir, std::string_view name) noexcept
{
    Inode d;
    if (const int rc = load(tx, dir, d); rc != 0)
        return rc;
    Dirent entry;
    if (const int rc = find_entry(tx, dir, name, entry); rc != 0)
        return rc;
    if (const int rc = del(tx, tx.tables->dirents, Key(dir, name).bytes()); rc != 0)
        return rc;
    if (const int rc = del(tx, tx.tables->order, Key(dir, entry.seq).bytes()); rc != 0)
        return rc == -ENOENT ? -EIO : rc;
    if (d.attr.size > 0)
        --d.attr.size;
    touch_dir(tx, d);
    return save(tx, d);
}

// Points an existing entry at another object; it keeps its place (seq).
[[nodiscard]] int retarget_entry(const Tx &tx, Handle dir, std::string_view name, Handle child,
                                 ObjectType type) noexcept
{
    Inode d;
    if (const int rc = load(tx, dir, d); rc != 0)
        return rc;
    Dirent entry;
    if (const int rc = find_entry(tx, dir, name, entry); rc != 0)
        return rc;
    entry.child = child;
    entry.type = type;
    if (const int rc =
            put(tx, tx.tables->dirents, Key(dir, name).bytes(), records::encode_dirent(entry));
        rc != 0)
        return rc;
    const records::OrderValue order(child, type, name);
    if (const int rc = put(tx, tx.tables->order, Key(dir, entry.seq).bytes(), order.bytes());
        rc != 0)
        return rc;
    touch_dir(tx, d);
    return save(tx, d);
}

[[nodiscard]] int adjust_nlink(const Tx &tx, Handle handle, int delta) noexcept
{
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    if (delta > 0 && inode.attr.nlink >= tx.max_links)
        return -EMLINK;
    if (delta < 0 && inode.attr.nlink == 0)
        return -EIO;
    inode.attr.nlink = delta > 0 ? inode.attr.nlink + 1 : inode.attr.nlink - 1;
    inode.attr.ctime = tx.now;
    return save(tx, inode);
}

// Deletes every key of `dbi` that starts with the 8-byte key of handle.
// Seeks afresh after each delete rather than trusting where LMDB leaves
// the cursor.
[[nodiscard]] int delete_prefixed(const Tx &tx, MDB_dbi dbi, Handle handle) noexcept
{
    lmdb::Cursor cursor;
    if (const int rc = cursor.open(tx.txn, dbi); rc != 0)
        return rc;
    const Key prefix(handle);
    for (;;) {
        MDB_val k = lmdb::val(prefix.bytes());
        MDB_val v{};
        const int rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_SET_RANGE);
        if (rc == MDB_NOTFOUND)
            return 0;
        if (rc != 0)
            return lmdb::to_errno(rc, "mdb_cursor_get");
        const Bytes key = lmdb::bytes(k);
        if (key.size() < 8 || records::load_be64(key) != handle)
            return 0;
        if (const int d = mdb_cursor_del(cursor.get(), 0); d != 0)
            return lmdb::to_errno(d, "mdb_cursor_del");
    }
}

// How many extended attributes the object has, and the size of their
// names as listxattr(2) returns them (each with a NUL).
[[nodiscard]] int xattr_usage(const Tx &tx, Handle handle, std::size_t &count,
                              std::size_t &bytes) noexcept
{
    count = 0;
    bytes = 0;
    lmdb::Cursor cursor;
    if (const int rc = cursor.open(tx.txn, tx.tables->xattrs); rc != 0)
        return rc;
    const Key prefix(handle);
    MDB_val k = lmdb::val(prefix.bytes());
    MDB_val v{};
    int rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_SET_RANGE);
    while (rc == 0) {
        const Bytes key = lmdb::bytes(k);
        if (key.size() <= 8 || records::load_be64(key) != handle)
            break;
        ++count;
        bytes += key.size() - 8 + 1;
        rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_NEXT);
    }
    return rc == 0 || rc == MDB_NOTFOUND ? 0 : lmdb::to_errno(rc, "mdb_cursor_get");
}

// Removes an object whose last link went away.
[[nodiscard]] int destroy(const Tx &tx, const Inode &inode) noexcept
{
    const Handle h = inode.attr.handle;
    if (const int rc = del(tx, tx.tables->inodes, Key(h).bytes()); rc != 0)
        return rc;
    if (inode.attr.type == ObjectType::symlink) {
        if (const int rc = del(tx, tx.tables->symlinks, Key(h).bytes()); rc != 0 && rc != -ENOENT)
            return rc;
    }
    return delete_prefixed(tx, tx.tables->xattrs, h);
}

// Drops one link of `handle` (a name of it went away); destroys it at 0.
[[nodiscard]] int drop_link(const Tx &tx, Handle handle, Removed &out) noexcept
{
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    Attr &a = inode.attr;
    // A directory's own "." link goes with its name.
    a.nlink = a.type == ObjectType::directory ? 0 : (a.nlink > 0 ? a.nlink - 1 : 0);
    a.ctime = tx.now;
    out = Removed{a.handle, a.type, a.nlink, a.layout};
    if (a.nlink == 0 && a.type == ObjectType::regular && tx.held != nullptr && *tx.held &&
        (*tx.held)(a.handle)) {
        // Open somewhere: POSIX keeps it until the last close (the service
        // calls release then).  Same transaction, so a crash leaves either
        // the name or the orphan.
        out.orphaned = true;
        if (const int rc = save(tx, inode); rc != 0)
            return rc;
        return orphan_put(tx, Orphan{a.handle, OrphanState::held, time_ns(tx.now), a.layout});
    }
    if (a.nlink == 0)
        return destroy(tx, inode);
    return save(tx, inode);
}

// A new object named `name` in `parent`: the caller has checked the name is
// free and that it may create there.
[[nodiscard]] int make_object(const Tx &tx, const Credentials &cred, const Inode &parent,
                              std::string_view name, ObjectType type, std::uint32_t mode,
                              Inode &out) noexcept
{
    std::uint64_t id = 0;
    if (const int rc = take_counter(tx, records::key_next_id, handle_id_mask + 1, id); rc != 0)
        return rc;
    const perm::NewOwner owner = perm::new_object(cred, parent.attr, type, mode);
    Inode inode;
    Attr &a = inode.attr;
    a.handle = make_handle(tx.server, id);
    a.type = type;
    a.mode = owner.mode;
    a.uid = owner.uid;
    a.gid = owner.gid;
    a.nlink = type == ObjectType::directory ? 2 : 1;
    a.atime = a.mtime = a.ctime = tx.now;
    if (type == ObjectType::regular || type == ObjectType::directory)
        a.layout = parent.attr.layout;
    inode.parent = type == ObjectType::directory ? parent.attr.handle : no_handle;
    if (const int rc = save(tx, inode); rc != 0)
        return rc;
    if (const int rc = add_entry(tx, parent.attr.handle, name, a.handle, type); rc != 0)
        return rc;
    out = inode;
    return 0;
}

// The usual preamble of a create: the parent, a free name, write access.
[[nodiscard]] int prepare_create(const Tx &tx, const Credentials &cred, Handle parent,
                                 std::string_view name, Inode &dir) noexcept
{
    if (const int rc = open_dir(tx, cred, parent, name, dir); rc != 0)
        return rc;
    Dirent existing;
    if (const int rc = find_entry(tx, parent, name, existing); rc != -ENOENT)
        return rc == 0 ? -EEXIST : rc;
    return perm::may_create(cred, dir.attr);
}

// Is `ancestor` on the chain of parents from `dir` up to the top?
[[nodiscard]] int is_ancestor(const Tx &tx, Handle ancestor, Handle dir, bool &out) noexcept
{
    out = false;
    Handle h = dir;
    for (unsigned depth = 0; depth < max_depth; ++depth) {
        if (h == ancestor) {
            out = true;
            return 0;
        }
        Inode inode;
        if (const int rc = load(tx, h, inode); rc != 0)
            return rc;
        // A remote directory's parent lives on another server.  Remote
        // directories are only made below server 0's directories and never
        // move (EXDEV), so no chain leaves a server and comes back: what
        // is above here cannot be `ancestor`.
        if (inode.parent == h || inode.parent == no_handle || is_remote(tx, inode.parent))
            return 0;
        h = inode.parent;
    }
    gossip::error(gossip::Mask::meta, "directory {:#x}: parent chain loops", dir);
    return -EIO;
}

// The permission checks of rename (vfs_rename): may_delete on the source,
// may_delete on a target or may_create without one, and write access to a
// directory that moves to another parent (its ".." changes).
[[nodiscard]] int check_rename_perms(const Credentials &cred, const Inode &old_dir,
                                     const Inode &new_dir, const Inode &source, const Inode *target,
                                     bool exchange) noexcept
{
    if (const int rc = perm::may_delete(cred, old_dir.attr, source.attr); rc != 0)
        return rc;
    if (target != nullptr) {
        if (const int rc = perm::may_delete(cred, new_dir.attr, target->attr); rc != 0)
            return rc;
    } else if (const int rc = perm::may_create(cred, new_dir.attr); rc != 0) {
        return rc;
    }
    if (old_dir.attr.handle == new_dir.attr.handle)
        return 0;
    if (source.attr.type == ObjectType::directory) {
        if (const int rc = perm::may_access(cred, source.attr, perm::may_write); rc != 0)
            return rc;
    }
    if (exchange && target != nullptr && target->attr.type == ObjectType::directory) {
        if (const int rc = perm::may_access(cred, target->attr, perm::may_write); rc != 0)
            return rc;
    }
    return 0;
}

// Moves a directory's ".." from one parent to another.
[[nodiscard]] int reparent(const Tx &tx, Handle child, Handle from, Handle to) noexcept
{
    if (from == to)
        return 0;
    if (const int rc = adjust_nlink(tx, to, +1); rc != 0)
        return rc;
    if (const int rc = adjust_nlink(tx, from, -1); rc != 0)
        return rc;
    Inode inode;
    if (const int rc = load(tx, child, inode); rc != 0)
        return rc;
    inode.parent = to;
    return save(tx, inode);
}

[[nodiscard]] int rename_exchange_apply(const Tx &tx, const Inode &old_dir,
                                        std::string_view old_name, const Inode &new_dir,
                                        std::string_view new_name, const Inode &source,
                                        const Inode &target) noexcept
{
    const Attr &s = source.attr;
    const Attr &t = target.attr;
    if (const int rc = retarget_entry(tx, old_dir.attr.handle, old_name, t.handle, t.type); rc != 0)
        return rc;
    if (const int rc = retarget_entry(tx, new_dir.attr.handle, new_name, s.handle, s.type); rc != 0)
        return rc;
    const Handle od = old_dir.attr.handle;
    const Handle nd = new_dir.attr.handle;
    if (od != nd) {
        if (s.type == ObjectType::directory) {
            if (const int rc = reparent(tx, s.handle, od, nd); rc != 0)
                return rc;
        }
        if (t.type == ObjectType::directory) {
            if (const int rc = reparent(tx, t.handle, nd, od); rc != 0)
                return rc;
        }
    }
    for (const Handle h : {s.handle, t.handle}) {
        Inode inode;
        if (const int rc = load(tx, h, inode); rc != 0)
            return rc;
        inode.attr.ctime = tx.now;
        if (const int rc = save(tx, inode); rc != 0)
            return rc;
    }
    return 0;
}

} // namespace

int open_tables(MDB_txn *txn, Tables &out) noexcept
{
    struct Named {
        const char *name;
        MDB_dbi *dbi;
    };
    const std::array<Named, table_count> tables{{
        {"meta", &out.meta},
        {"inodes", &out.inodes},
        {"dirents", &out.dirents},
        {"order", &out.order},
        {"symlinks", &out.symlinks},
        {"xattrs", &out.xattrs},
        {"sessions", &out.sessions},
        {"replies", &out.replies},
        {"orphans", &out.orphans},
    }};
    for (const Named &t : tables) {
        const int rc = mdb_dbi_open(txn, t.name, MDB_CREATE, t.dbi);
        if (rc != 0)
            return lmdb::to_errno(rc, "mdb_dbi_open");
    }
    return 0;
}

bool valid_layout(const Layout &layout) noexcept
{
    return layout.stripe_size >= min_stripe_size && layout.stripe_size <= max_stripe_size &&
           layout.stripe_size % 4096 == 0 && layout.stripe_count >= 1;
}

int init_store(Tx &tx, const Layout &default_layout)
{
    std::uint64_t format = 0;
    const int rc = get_counter(tx, records::key_format, format);
    if (rc == 0) {
        std::uint64_t index = 0;
        if (format != records::store_format) {
            gossip::error(gossip::Mask::meta, "store format {} is not {}", format,
                          records::store_format);
            return -EINVAL;
        }
        if (const int r = get_counter(tx, records::key_server_index, index); r != 0)
            return r == -ENOENT ? -EIO : r;
        if (index != tx.server) {
            gossip::error(gossip::Mask::meta, "store belongs to metadata server {}, not {}", index,
                          tx.server);
            return -EINVAL;
        }
        return 0;
    }
    if (rc != -ENOENT)
        return rc;
    if (!valid_layout(default_layout)) {
        gossip::error(gossip::Mask::meta, "invalid default layout: stripe size {}, count {}",
                      default_layout.stripe_size, default_layout.stripe_count);
        return -EINVAL;
    }
    for (const auto &[name, value] :
         {std::pair{records::key_format, records::store_format},
          std::pair{records::key_server_index, std::uint64_t{tx.server}},
          std::pair{records::key_next_id, std::uint64_t{2}},
          std::pair{records::key_next_seq, first_dir_cookie}}) {
        if (const int r = set_counter(tx, name, value); r != 0)
            return r;
    }
    Inode top;
    Attr &a = top.attr;
    a.handle = make_handle(tx.server, 1);
    a.type = ObjectType::directory;
    a.mode = 0755;
    a.nlink = 2;
    a.atime = a.mtime = a.ctime = tx.now;
    a.layout = default_layout;
    top.parent = a.handle;
    return save(tx, top);
}

// ---- reads ----

int lookup(Tx &tx, const Credentials &cred, Handle parent, std::string_view name, Attr &out)
{
    Inode dir;
    if (const int rc = open_dir(tx, cred, parent, name, dir); rc != 0)
        return rc;
    Dirent entry;
    if (const int rc = find_entry(tx, parent, name, entry); rc != 0)
        return rc;
    if (is_remote(tx, entry.child)) {
        // A remote directory: its attributes are its own server's to give.
        out = Attr{};
        out.handle = entry.child;
        out.type = entry.type;
        return 0;
    }
    return getattr(tx, entry.child, out);
}

int getattr(Tx &tx, Handle handle, Attr &out)
{
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    out = inode.attr;
    return 0;
}

int handle_gone(Tx &tx, Handle handle)
{
    if (handle == no_handle || handle_server(handle) != tx.server)
        return -EXDEV;
    std::uint64_t next_id = 0;
    if (const int rc = get_counter(tx, records::key_next_id, next_id); rc != 0)
        return rc == -ENOENT ? -EIO : rc;
    // Not issued yet: a capability to destroy it would outlive its create.
    if (handle_id(handle) >= next_id)
        return -ESTALE;
    Inode inode;
    const int rc = load(tx, handle, inode);
    if (rc == 0)
        return -EEXIST;
    return rc == -ENOENT ? 0 : rc;
}

int readlink(Tx &tx, Handle handle, std::string &target)
{
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    if (inode.attr.type != ObjectType::symlink)
        return -EINVAL;
    Bytes v;
    if (const int rc = get(tx, tx.tables->symlinks, Key(handle).bytes(), v); rc != 0)
        return rc == -ENOENT ? -EIO : rc;
    target.assign(as_string(v));
    return 0;
}

int readdir(Tx &tx, const Credentials &cred, Handle dir, std::uint64_t cookie,
            std::uint32_t max_entries, DirPage &out)
{
    out = DirPage{};
    Inode d;
    if (const int rc = load_dir(tx, dir, d); rc != 0)
        return rc;
    if (const int rc = perm::may_access(cred, d.attr, perm::may_read); rc != 0)
        return rc;
    if (max_entries == 0)
        return -EINVAL;
    max_entries = std::min(max_entries, max_page_entries);
    if (cookie == UINT64_MAX) {
        out.eof = true;
        return 0;
    }
    const std::uint64_t start = std::max(cookie + 1, first_dir_cookie);
    lmdb::Cursor cursor;
    if (const int rc = cursor.open(tx.txn, tx.tables->order); rc != 0)
        return rc;
    const Key first(dir, start);
    MDB_val k = lmdb::val(first.bytes());
    MDB_val v{};
    int rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_SET_RANGE);
    while (rc == 0) {
        const Bytes key = lmdb::bytes(k);
        if (key.size() != 16 || records::load_be64(key) != dir)
            break;
        if (out.entries.size() == max_entries)
            return 0; // more follow
        records::OrderEntry entry;
        if (const int r = records::decode_order(lmdb::bytes(v), entry); r != 0)
            return r;
        out.entries.push_back(DirEntry{std::string(entry.name), entry.child, entry.type,
                                       records::load_be64(key.subspan(8))});
        rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_NEXT);
    }
    if (rc != 0 && rc != MDB_NOTFOUND)
        return lmdb::to_errno(rc, "mdb_cursor_get");
    out.eof = true;
    return 0;
}

int xattr_get(Tx &tx, const Credentials &cred, Handle handle, std::string_view name,
              std::string &value)
{
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    if (const int rc = perm::may_xattr(cred, inode.attr, name, false); rc != 0)
        return rc;
    Bytes v;
    if (const int rc = get(tx, tx.tables->xattrs, Key(handle, name).bytes(), v); rc != 0)
        return rc == -ENOENT ? -ENODATA : rc;
    value.assign(as_string(v));
    return 0;
}

int xattr_list(Tx &tx, Handle handle, std::vector<std::string> &names)
{
    names.clear();
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    lmdb::Cursor cursor;
    if (const int rc = cursor.open(tx.txn, tx.tables->xattrs); rc != 0)
        return rc;
    const Key prefix(handle);
    MDB_val k = lmdb::val(prefix.bytes());
    MDB_val v{};
    int rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_SET_RANGE);
    while (rc == 0) {
        const Bytes key = lmdb::bytes(k);
        if (key.size() <= 8 || records::load_be64(key) != handle)
            break;
        names.emplace_back(as_string(key.subspan(8)));
        rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_NEXT);
    }
    return rc == 0 || rc == MDB_NOTFOUND ? 0 : lmdb::to_errno(rc, "mdb_cursor_get");
}

int layout_get(Tx &tx, Handle handle, Layout &out)
{
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    if (inode.attr.type != ObjectType::regular && inode.attr.type != ObjectType::directory)
        return -EINVAL;
    out = inode.attr.layout;
    return 0;
}

int statfs(Tx &tx, MDB_env *env, Stats &out)
{
    MDB_stat st{};
    if (const int rc = mdb_stat(tx.txn, tx.tables->inodes, &st); rc != 0)
        return lmdb::to_errno(rc, "mdb_stat");
    MDB_envinfo info{};
    if (const int rc = mdb_env_info(env, &info); rc != 0)
        return lmdb::to_errno(rc, "mdb_env_info");
    std::uint64_t next_id = 0;
    if (const int rc = get_counter(tx, records::key_next_id, next_id); rc != 0)
        return rc == -ENOENT ? -EIO : rc;
    out.objects = st.ms_entries;
    out.free_handles = next_id > handle_id_mask ? 0 : handle_id_mask + 1 - next_id;
    out.map_bytes = info.me_mapsize;
    out.used_bytes = std::uint64_t{info.me_last_pgno + 1} * st.ms_psize;
    return 0;
}

int list_handles(Tx &tx, std::uint64_t cookie, std::uint32_t max_handles, HandlePage &out)
{
    out = HandlePage{};
    if (max_handles == 0)
        return -EINVAL;
    max_handles = std::min(max_handles, max_page_entries);
    out.next_cookie = cookie;
    if (cookie == UINT64_MAX) {
        out.eof = true;
        return 0;
    }
    lmdb::Cursor cursor;
    if (const int rc = cursor.open(tx.txn, tx.tables->inodes); rc != 0)
        return rc;
    const Key first(cookie + 1);
    MDB_val k = lmdb::val(first.bytes());
    MDB_val v{};
    int rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_SET_RANGE);
    while (rc == 0) {
        if (out.handles.size() == max_handles)
            return 0;
        const Bytes key = lmdb::bytes(k);
        if (key.size() != 8)
            return -EIO;
        out.handles.push_back(records::load_be64(key));
        out.next_cookie = out.handles.back();
        rc = mdb_cursor_get(cursor.get(), &k, &v, MDB_NEXT);
    }
    if (rc != MDB_NOTFOUND)
        return lmdb::to_errno(rc, "mdb_cursor_get");
    out.eof = true;
    return 0;
}

// ---- changes ----

int create(Tx &tx, const Credentials &cred, Handle parent, std::string_view name,
           std::uint32_t mode, bool exclusive, const Layout &layout, CreateResult &out)
{
    Inode dir;
    if (const int rc = open_dir(tx, cred, parent, name, dir); rc != 0)
        return rc;
    Dirent existing;
    if (const int rc = find_entry(tx, parent, name, existing); rc != -ENOENT) {
        if (rc != 0)
            return rc;
        if (exclusive)
            return -EEXIST;
        if (existing.type == ObjectType::directory)
            return -EISDIR;
        out.created = false;
        return getattr(tx, existing.child, out.attr);
    }
    if (const int rc = perm::may_create(cred, dir.attr); rc != 0)
        return rc;
    if (layout.stripe_count != 0 && !valid_layout(layout))
        return -EINVAL;
    Inode inode;
    if (const int rc = make_object(tx, cred, dir, name, ObjectType::regular, mode, inode); rc != 0)
        return rc;
    if (layout.stripe_count != 0) {
        inode.attr.layout = layout;
        if (const int rc = save(tx, inode); rc != 0)
            return rc;
    }
    out.attr = inode.attr;
    out.created = true;
    return 0;
}

int mkdir(Tx &tx, const Credentials &cred, Handle parent, std::string_view name, std::uint32_t mode,
          Attr &out)
{
    Inode dir;
    if (const int rc = prepare_create(tx, cred, parent, name, dir); rc != 0)
        return rc;
    if (dir.attr.nlink >= tx.max_links)
        return -EMLINK;
    Inode inode;
    if (const int rc = make_object(tx, cred, dir, name, ObjectType::directory, mode, inode);
        rc != 0)
        return rc;
    if (const int rc = adjust_nlink(tx, parent, +1); rc != 0)
        return rc;
    out = inode.attr;
    return 0;
}

int mknod(Tx &tx, const Credentials &cred, Handle parent, std::string_view name, ObjectType type,
          std::uint32_t mode, std::uint64_t rdev, Attr &out)
{
    const bool device = type == ObjectType::char_device || type == ObjectType::block_device;
    if (!device && type != ObjectType::fifo && type != ObjectType::socket)
        return -EINVAL;
    Inode dir;
    if (const int rc = prepare_create(tx, cred, parent, name, dir); rc != 0)
        return rc;
    if (device && !perm::is_root(cred))
        return -EPERM;
    Inode inode;
    if (const int rc = make_object(tx, cred, dir, name, type, mode, inode); rc != 0)
        return rc;
    if (device) {
        inode.attr.rdev = rdev;
        if (const int rc = save(tx, inode); rc != 0)
            return rc;
    }
    out = inode.attr;
    return 0;
}

int symlink(Tx &tx, const Credentials &cred, Handle parent, std::string_view name,
            std::string_view target, Attr &out)
{
    if (target.empty())
        return -ENOENT;
    if (target.size() > max_path)
        return -ENAMETOOLONG;
    if (target.find('\0') != std::string_view::npos)
        return -EINVAL;
    Inode dir;
    if (const int rc = prepare_create(tx, cred, parent, name, dir); rc != 0)
        return rc;
    Inode inode;
    if (const int rc = make_object(tx, cred, dir, name, ObjectType::symlink, 0777, inode); rc != 0)
        return rc;
    inode.attr.size = target.size();
    if (const int rc = save(tx, inode); rc != 0)
        return rc;
    if (const int rc =
            put(tx, tx.tables->symlinks, Key(inode.attr.handle).bytes(), as_bytes(target));
        rc != 0)
        return rc;
    out = inode.attr;
    return 0;
}

int link(Tx &tx, const Credentials &cred, Handle target, Handle new_parent,
         std::string_view new_name, Attr &out)
{
    Inode source;
    if (const int rc = load(tx, target, source); rc != 0)
        return rc;
    Inode dir;
    if (const int rc = open_dir(tx, cred, new_parent, new_name, dir); rc != 0)
        return rc;
    Dirent existing;
    if (const int rc = find_entry(tx, new_parent, new_name, existing); rc != -ENOENT)
        return rc == 0 ? -EEXIST : rc;
    if (source.attr.type == ObjectType::directory)
        return -EPERM;
    // An orphan (unlinked, still open) gets no name back, as linkat(2) of
    // an unlinked file is ENOENT.
    if (source.attr.nlink == 0)
        return -ENOENT;
    if (const int rc = perm::may_hardlink(cred, source.attr); rc != 0)
        return rc;
    if (const int rc = perm::may_create(cred, dir.attr); rc != 0)
        return rc;
    if (const int rc = adjust_nlink(tx, target, +1); rc != 0)
        return rc;
    if (const int rc = add_entry(tx, new_parent, new_name, target, source.attr.type); rc != 0)
        return rc;
    return getattr(tx, target, out);
}

int unlink(Tx &tx, const Credentials &cred, Handle parent, std::string_view name, Removed &out)
{
    Inode dir;
    if (const int rc = open_dir(tx, cred, parent, name, dir); rc != 0)
        return rc;
    Dirent entry;
    if (const int rc = find_entry(tx, parent, name, entry); rc != 0)
        return rc;
    if (is_remote(tx, entry.child))
        return -EISDIR; // only directories are remote
    Inode victim;
    const int loaded = load(tx, entry.child, victim);
    if (loaded == -ENOENT) {
        // A dangling entry (its inode lost to damage): the name alone goes,
        // so pvfs-fsck --repair and rm can clear it.  Checked as if root
        // owned the lost object: in a sticky directory only its owner or
        // root may remove it.
        out = Removed{};
        Attr lost;
        lost.uid = 0;
        lost.type = ObjectType::regular;
        if (const int check = perm::may_delete(cred, dir.attr, lost); check != 0)
            return check;
        return remove_entry(tx, parent, name);
    }
    if (loaded != 0)
        return loaded;
    if (const int rc = perm::may_delete(cred, dir.attr, victim.attr); rc != 0)
        return rc;
    if (victim.attr.type == ObjectType::directory)
        return -EISDIR;
    if (const int rc = remove_entry(tx, parent, name); rc != 0)
        return rc;
    return drop_link(tx, entry.child, out);
}

int release(Tx &tx, Handle handle, Removed &out)
{
    out = Removed{};
    Orphan orphan;
    if (const int rc = orphan_get(tx, handle, orphan); rc != 0)
        return rc == -ENOENT ? 0 : rc;
    if (orphan.state == OrphanState::reclaim) {
        // Released before: a replayed close, whose first reply's closer
        // may have died before removing the objects, finishes it too.
        out = Removed{handle, ObjectType::regular, 0, orphan.layout, false};
        return 0;
    }
    if (orphan.state != OrphanState::held)
        return 0;
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc == 0) {
        // Linked again cannot happen (link refuses nlink 0), but a damaged
        // store should not lose a named file.
        if (inode.attr.nlink != 0)
            return orphan_delete(tx, handle);
        if (const int d = destroy(tx, inode); d != 0)
            return d;
    } else if (rc != -ENOENT) {
        return rc;
    }
    orphan.state = OrphanState::reclaim;
    orphan.since_ns = time_ns(tx.now);
    if (const int rc = orphan_put(tx, orphan); rc != 0)
        return rc;
    out = Removed{handle, ObjectType::regular, 0, orphan.layout, false};
    return 0;
}

int rmdir(Tx &tx, const Credentials &cred, Handle parent, std::string_view name)
{
    Inode dir;
    if (const int rc = open_dir(tx, cred, parent, name, dir); rc != 0)
        return rc;
    Dirent entry;
    if (const int rc = find_entry(tx, parent, name, entry); rc != 0)
        return rc;
    Inode victim;
    if (const int rc = load(tx, entry.child, victim); rc != 0)
        return rc;
    if (const int rc = perm::may_delete(cred, dir.attr, victim.attr); rc != 0)
        return rc;
    if (victim.attr.type != ObjectType::directory)
        return -ENOTDIR;
    if (victim.attr.size != 0)
        return -ENOTEMPTY;
    if (const int rc = remove_entry(tx, parent, name); rc != 0)
        return rc;
    if (const int rc = adjust_nlink(tx, parent, -1); rc != 0)
        return rc;
    Removed removed;
    return drop_link(tx, entry.child, removed);
}

int rename(Tx &tx, const Credentials &cred, Handle old_parent, std::string_view old_name,
           Handle new_parent, std::string_view new_name, std::uint32_t flags, Removed &replaced)
{
    replaced = Removed{};
    if ((flags & ~(rename_noreplace | rename_exchange)) != 0 ||
        flags == (rename_noreplace | rename_exchange))
        return -EINVAL;
    const bool exchange = (flags & rename_exchange) != 0;
    Inode old_dir;
    if (const int rc = open_dir(tx, cred, old_parent, old_name, old_dir); rc != 0)
        return rc;
    Inode new_dir;
    if (const int rc = open_dir(tx, cred, new_parent, new_name, new_dir); rc != 0)
        return rc;
    Dirent source_entry;
    if (const int rc = find_entry(tx, old_parent, old_name, source_entry); rc != 0)
        return rc;
    Dirent target_entry;
    const int found = find_entry(tx, new_parent, new_name, target_entry);
    if (found != 0 && found != -ENOENT)
        return found;
    const bool has_target = found == 0;
    if (!has_target && exchange)
        return -ENOENT;
    if (has_target && (flags & rename_noreplace) != 0)
        return -EEXIST;
    Inode source;
    if (const int rc = load(tx, source_entry.child, source); rc != 0)
        return rc;
    Inode target;
    if (has_target) {
        if (const int rc = load(tx, target_entry.child, target); rc != 0)
            return rc;
    }
    // Two names of one object: POSIX says do nothing, successfully.
    if (has_target && source.attr.handle == target.attr.handle)
        return 0;
    if (const int rc = check_rename_perms(cred, old_dir, new_dir, source,
                                          has_target ? &target : nullptr, exchange);
        rc != 0)
        return rc;
    const bool source_dir = source.attr.type == ObjectType::directory;
    const bool target_dir = has_target && target.attr.type == ObjectType::directory;
    if (has_target && !exchange) {
        if (source_dir && !target_dir)
            return -ENOTDIR;
        if (!source_dir && target_dir)
            return -EISDIR;
    }
    // A directory cannot move below itself (and, exchanging, neither can
    // the target).
    if (old_parent != new_parent) {
        bool below = false;
        if (source_dir) {
            if (const int rc = is_ancestor(tx, source.attr.handle, new_parent, below); rc != 0)
                return rc;
            if (below)
                return -EINVAL;
        }
        if (exchange && target_dir) {
            if (const int rc = is_ancestor(tx, target.attr.handle, old_parent, below); rc != 0)
                return rc;
            if (below)
                return -EINVAL;
        }
    }
    if (exchange)
        return rename_exchange_apply(tx, old_dir, old_name, new_dir, new_name, source, target);

    if (target_dir && target.attr.size != 0)
        return -ENOTEMPTY;
    if (source_dir && old_parent != new_parent && !target_dir && new_dir.attr.nlink >= tx.max_links)
        return -EMLINK;
    if (has_target) {
        if (const int rc = remove_entry(tx, new_parent, new_name); rc != 0)
            return rc;
        if (target_dir) {
            if (const int rc = adjust_nlink(tx, new_parent, -1); rc != 0)
                return rc;
        }
        if (const int rc = drop_link(tx, target.attr.handle, replaced); rc != 0)
            return rc;
    }
    if (const int rc = remove_entry(tx, old_parent, old_name); rc != 0)
        return rc;
    if (const int rc = add_entry(tx, new_parent, new_name, source.attr.handle, source.attr.type);
        rc != 0)
        return rc;
    if (source_dir) {
        if (const int rc = reparent(tx, source.attr.handle, old_parent, new_parent); rc != 0)
            return rc;
    }
    Inode moved;
    if (const int rc = load(tx, source.attr.handle, moved); rc != 0)
        return rc;
    moved.attr.ctime = tx.now;
    return save(tx, moved);
}

int setattr(Tx &tx, const Credentials &cred, Handle handle, const perm::AttrChange &change,
            Attr &out)
{
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    Attr next;
    if (const int rc = perm::apply_setattr(cred, inode.attr, change, tx.now, next); rc != 0)
        return rc;
    inode.attr = next;
    if (const int rc = save(tx, inode); rc != 0)
        return rc;
    out = next;
    return 0;
}

int data_written(Tx &tx, const Credentials &cred, Handle handle, Attr &out, bool writer)
{
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    if (inode.attr.type == ObjectType::directory)
        return -EISDIR;
    if (inode.attr.type != ObjectType::regular)
        return -EINVAL;
    if (const int rc = writer ? 0 : perm::may_access(cred, inode.attr, perm::may_write); rc != 0)
        return rc;
    inode.attr.mode = perm::mode_after_write(cred, inode.attr);
    inode.attr.mtime = tx.now;
    inode.attr.ctime = tx.now;
    if (const int rc = save(tx, inode); rc != 0)
        return rc;
    out = inode.attr;
    return 0;
}

int xattr_set(Tx &tx, const Credentials &cred, Handle handle, std::string_view name,
              std::string_view value, std::uint32_t flags)
{
    if ((flags & ~(xattr_create | xattr_replace)) != 0 || flags == (xattr_create | xattr_replace))
        return -EINVAL;
    if (value.size() > max_xattr_value)
        return -E2BIG;
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    if (const int rc = perm::may_xattr(cred, inode.attr, name, true); rc != 0)
        return rc;
    const Key key(handle, name);
    Bytes old;
    const int found = get(tx, tx.tables->xattrs, key.bytes(), old);
    if (found != 0 && found != -ENOENT)
        return found;
    if (found == 0 && (flags & xattr_create) != 0)
        return -EEXIST;
    if (found != 0 && (flags & xattr_replace) != 0)
        return -ENODATA;
    if (found != 0) {
        std::size_t count = 0;
        std::size_t bytes = 0;
        if (const int rc = xattr_usage(tx, handle, count, bytes); rc != 0)
            return rc;
        if (bytes + name.size() + 1 > max_xattr_list || count >= max_xattr_count)
            return -ENOSPC;
    }
    if (const int rc = put(tx, tx.tables->xattrs, key.bytes(), as_bytes(value)); rc != 0)
        return rc;
    inode.attr.ctime = tx.now;
    return save(tx, inode);
}

int xattr_remove(Tx &tx, const Credentials &cred, Handle handle, std::string_view name)
{
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    if (const int rc = perm::may_xattr(cred, inode.attr, name, true); rc != 0)
        return rc;
    if (const int rc = del(tx, tx.tables->xattrs, Key(handle, name).bytes()); rc != 0)
        return rc == -ENOENT ? -ENODATA : rc;
    inode.attr.ctime = tx.now;
    return save(tx, inode);
}

int layout_set(Tx &tx, const Credentials &cred, Handle handle, const Layout &layout)
{
    Inode inode;
    if (const int rc = load(tx, handle, inode); rc != 0)
        return rc;
    if (inode.attr.type != ObjectType::regular && inode.attr.type != ObjectType::directory)
        return -EINVAL;
    if (!perm::owner_or_root(cred, inode.attr))
        return -EPERM;
    if (!valid_layout(layout))
        return -EINVAL;
    inode.attr.layout = layout;
    inode.attr.ctime = tx.now;
    return save(tx, inode);
}

// ---- remote directories ----

int mkdir_object(Tx &tx, const Credentials &cred, const Attr &parent, std::uint32_t mode, Attr &out)
{
    // Only server 0's directories get remote children: so no chain of
    // parents leaves a server and returns to it, which is what keeps
    // is_ancestor (and so rename) sound without asking other servers.
    if (parent.type != ObjectType::directory || !is_remote(tx, parent.handle) ||
        handle_server(parent.handle) != 0)
        return -EXDEV;
    if (!valid_layout(parent.layout))
        return -EINVAL;
    std::uint64_t id = 0;
    if (const int rc = take_counter(tx, records::key_next_id, handle_id_mask + 1, id); rc != 0)
        return rc;
    const perm::NewOwner owner = perm::new_object(cred, parent, ObjectType::directory, mode);
    Inode inode;
    Attr &a = inode.attr;
    a.handle = make_handle(tx.server, id);
    a.type = ObjectType::directory;
    a.mode = owner.mode;
    a.uid = owner.uid;
    a.gid = owner.gid;
    a.nlink = 2;
    a.atime = a.mtime = a.ctime = tx.now;
    a.layout = parent.layout;
    inode.parent = parent.handle;
    if (const int rc = save(tx, inode); rc != 0)
        return rc;
    out = a;
    return 0;
}

int link_dir(Tx &tx, const Credentials &cred, Handle parent, std::string_view name, Handle handle)
{
    Inode dir;
    if (const int rc = prepare_create(tx, cred, parent, name, dir); rc != 0)
        return rc;
    if (!is_remote(tx, handle))
        return -EINVAL;
    if (dir.attr.nlink >= tx.max_links)
        return -EMLINK;
    if (const int rc = add_entry(tx, parent, name, handle, ObjectType::directory); rc != 0)
        return rc;
    return adjust_nlink(tx, parent, +1);
}

int retire_dir(Tx &tx, Handle handle, bool retire, Attr &out)
{
    Inode inode;
    if (const int rc = load_dir(tx, handle, inode); rc != 0)
        return rc;
    // Only a remote directory is removed in steps; a local one by rmdir.
    if (!is_remote(tx, inode.parent))
        return -EINVAL;
    const RetiredKey key(handle);
    if (retire) {
        if (inode.attr.size != 0)
            return -ENOTEMPTY;
        const std::array<std::uint8_t, 8> zero{};
        if (const int rc = put(tx, tx.tables->meta, key.bytes(), zero); rc != 0)
            return rc;
    } else if (const int rc = del(tx, tx.tables->meta, key.bytes()); rc != 0 && rc != -ENOENT) {
        return rc;
    }
    out = inode.attr;
    return 0;
}

int unlink_dir(Tx &tx, const Credentials &cred, Handle parent, std::string_view name, Handle handle,
               std::uint32_t owner_uid)
{
    Inode dir;
    if (const int rc = open_dir(tx, cred, parent, name, dir); rc != 0)
        return rc;
    Dirent entry;
    if (const int rc = find_entry(tx, parent, name, entry); rc != 0)
        return rc;
    // The name was changed meanwhile: what it names now is not ours to drop.
    if (entry.child != handle || !is_remote(tx, handle))
        return -ENOENT;
    Attr victim;
    victim.handle = handle;
    victim.type = ObjectType::directory;
    victim.uid = owner_uid;
    if (const int rc = perm::may_delete(cred, dir.attr, victim); rc != 0)
        return rc;
    if (const int rc = remove_entry(tx, parent, name); rc != 0)
        return rc;
    return adjust_nlink(tx, parent, -1);
}

int remove_dir_object(Tx &tx, Handle handle)
{
    Inode inode;
    if (const int rc = load_dir(tx, handle, inode); rc != 0)
        return rc;
    bool retired = false;
    if (const int rc = is_retired(tx, handle, retired); rc != 0)
        return rc;
    if (!retired)
        return -EBUSY;
    if (inode.attr.size != 0)
        return -EIO; // a retired directory takes no entries
    if (const int rc = del(tx, tx.tables->meta, RetiredKey(handle).bytes()); rc != 0)
        return rc;
    return destroy(tx, inode);
}

} // namespace pvfs::meta::ops
