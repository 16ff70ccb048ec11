// The metadata store: the namespace of one metadata server (inodes,
// directory entries, symlink targets, extended attributes, layouts) in an
// LMDB database.  The server's only door to it; docs/metadata.md describes
// the tables, the encodings and the rules.
//
// Every operation takes the caller's (already squashed) Credentials,
// enforces POSIX permissions with lib/perm and returns 0 or a negative
// errno, as the corresponding Linux system call would.
//
// Reads and writes:
//   - Reads (lookup, getattr, readlink, readdir, xattr_get, xattr_list,
//     layout_get, statfs, list_handles) are const member functions of
//     Store.  Each runs in its own LMDB read transaction, sees the last
//     committed state and never waits for a writer.
//   - Changes go through a WriteBatch: one LMDB write transaction in which
//     each operation runs in a nested transaction of its own, so a failed
//     operation (EEXIST, EACCES, ENOSPC, ...) is rolled back alone and the
//     others stay.  commit() makes all of them durable with one sync.  An
//     operation's result is final only when commit() returned 0; if commit()
//     fails, nothing of the batch happened and every operation of it failed
//     with commit()'s error.  So a server collects the requests that arrive
//     while the previous commit syncs, applies them as one batch, commits,
//     and only then sends the replies (group commit).
//
// Threads:
//   - open() and close() while no other call runs.
//   - Reads: any thread, any number at once (the environment is opened
//     with MDB_NOTLS, so read transactions are not tied to threads), also
//     on a thread that holds a WriteBatch.
//   - One WriteBatch at a time in the process (LMDB has one writer): a
//     second batch() from another thread blocks until the first ends; from
//     the same thread it fails with -EDEADLK.  A batch must be used,
//     committed and destroyed on the thread that created it (LMDB's write
//     lock is a mutex of that thread), and must end before the Store closes.
#ifndef PVFS_META_STORE_HPP
#define PVFS_META_STORE_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pvfs/perm.hpp"
#include "pvfs/types.hpp"

namespace pvfs::meta {

// A file or directory has at most this many links (EMLINK beyond), unless
// Options::max_links sets a lower limit.
inline constexpr std::uint32_t max_links = 65000;
// At most this many entries or handles per readdir or list_handles call.
inline constexpr std::uint32_t max_page_entries = 4096;
// The total size of an object's xattr names, each plus a NUL, as
// listxattr(2) returns them (XATTR_LIST_MAX); ENOSPC beyond.
inline constexpr std::size_t max_xattr_list = 65536;
// At most this many extended attributes per object (the protocol's
// xattr_list reply carries at most 4096 names); ENOSPC beyond.
inline constexpr std::size_t max_xattr_count = 4096;
inline constexpr std::uint64_t default_map_size = std::uint64_t{64} << 30U;
// Readdir cookies are >= this: 0, 1 and 2 all mean "from the start", so a
// client may use 0 and 1 for its own "." and "..".
inline constexpr std::uint64_t first_dir_cookie = 3;

// rename flags (RENAME_NOREPLACE, RENAME_EXCHANGE).
inline constexpr std::uint32_t rename_noreplace = 1;
inline constexpr std::uint32_t rename_exchange = 2;
// xattr_set flags (XATTR_CREATE, XATTR_REPLACE).
inline constexpr std::uint32_t xattr_create = 1;
inline constexpr std::uint32_t xattr_replace = 2;

struct Options {
    std::string path;               // a directory (created if missing) for the LMDB files
    std::uint32_t server_index = 0; // this server's index among the metadata servers
    Layout default_layout{default_stripe_size, 1, 0}; // the first open's top directory's
    std::uint64_t map_size = default_map_size; // bytes of address space; the database's limit
    bool durable = true;        // false: MDB_NOSYNC, commits are not synced (tests, benchmarks)
    unsigned max_readers = 126; // concurrent read transactions
    // The link limit, at most (and by default) meta::max_links.  Lower only
    // so tests reach EMLINK quickly.
    std::uint32_t max_links = meta::max_links;
    // The config's data servers, in file order.  The first open records
    // them; a later open with another list fails with EINVAL (a layout's
    // stripes are placed by position in it: docs/metadata.md "The data
    // server list").  Empty: neither recorded nor checked (tools, tests).
    std::vector<std::string> data_servers;
};

struct CreateResult {
    Attr attr;
    bool created = false; // false: it existed and was not exclusive
};

// What unlink (and a rename that replaced its target) took away, so the
// caller can remove a regular file's data objects once nlink_after is 0.
// orphaned: the file was held open, so its inode stays (nlink 0) with an
// orphan record until its last close; the data objects must stay too.
struct Removed {
    Handle handle = no_handle; // no_handle: nothing was removed
    ObjectType type = ObjectType::regular;
    std::uint32_t nlink_after = 0;
    Layout layout;
    bool orphaned = false;
    friend bool operator==(const Removed &, const Removed &) = default;
};

// ---- orphans (docs/metadata.md "Orphans and open references") ----
// Asked by unlink and rename when a regular file's last link goes: is it
// open somewhere (the service's open table)?  Runs on the batch's thread.
using OpenCheck = std::function<bool(Handle)>;
enum class OrphanState : std::uint8_t {
    held = 1,    // no name, open somewhere: the inode stays at nlink 0
    reclaim = 2, // the inode is gone; its data objects are still to remove
};
struct Orphan {
    Handle handle = no_handle;
    OrphanState state = OrphanState::held;
    std::uint64_t since_ns = 0; // CLOCK_REALTIME of the last change of state
    Layout layout;
    friend bool operator==(const Orphan &, const Orphan &) = default;
};

struct DirEntry {
    std::string name;
    Handle handle = no_handle;
    ObjectType type = ObjectType::regular;
    std::uint64_t cookie = 0; // pass to readdir to continue after this entry
};

struct DirPage {
    std::vector<DirEntry> entries;
    bool eof = false; // no entries after the last one (at the time of the call)
};

struct HandlePage {
    std::vector<Handle> handles;
    std::uint64_t next_cookie = 0;
    bool eof = false;
};

struct Stats {
    std::uint64_t objects = 0;      // inodes in the store
    std::uint64_t free_handles = 0; // ids left to allocate
    std::uint64_t map_bytes = 0;    // the database's size limit
    std::uint64_t used_bytes = 0;   // of it, in use
};

// ---- exactly once (docs/metadata.md "Sessions and the reply cache") ----
// The store keeps, per client session and slot, the replies of the
// operation (xid) the slot last carried, one per step, as bytes it does
// not interpret: the server encodes and decodes them.

// Which request a reply answers.
struct ReplyId {
    std::uint64_t client_id = 0;
    std::uint32_t slot = 0;
    std::uint64_t xid = 0;
    std::uint32_t step = 0;
};
// A reply body is at most this long (-E2BIG beyond); a slot keeps at most
// max_reply_steps steps of its operation (-E2BIG beyond).
inline constexpr std::size_t max_reply_body = 4096;
inline constexpr std::size_t max_reply_steps = 16;
struct SavedReply {
    std::uint16_t op = 0;
    std::int32_t status = 0;               // 0 or a positive errno
    std::array<std::uint8_t, 16> digest{}; // of the request body
    std::vector<std::uint8_t> body;
    friend bool operator==(const SavedReply &, const SavedReply &) = default;
};
enum class ReplyMatch : std::uint8_t {
    none,  // not seen: run the operation
    found, // this step of this xid ran: its reply is in `out`
    stale, // the slot carries a later xid already: the request is old
};
struct SessionRecord {
    std::uint64_t client_id = 0;
    std::uint64_t created_ns = 0; // CLOCK_REALTIME
    std::string owner;            // at most 255 bytes
    // The name of the key that opened it ("cluster" for the cluster key,
    // at most 64 bytes); none in a record from before sessions were bound
    // to keys (docs/metadata.md "Sessions and the reply cache").
    std::optional<std::string> key;
    friend bool operator==(const SessionRecord &, const SessionRecord &) = default;
};

class Store;

class WriteBatch {
public:
    WriteBatch(WriteBatch &&other) noexcept;
    WriteBatch &operator=(WriteBatch &&other) noexcept;
    WriteBatch(const WriteBatch &) = delete;
    WriteBatch &operator=(const WriteBatch &) = delete;
    // Aborts unless committed.
    ~WriteBatch();

    // 0 while operations may be added; else why not: -EBADF once it ended
    // (committed, aborted, or the store was not open), -EDEADLK when this
    // thread already held a batch, or the error that kept LMDB's write
    // transaction from starting.  Every operation of a batch whose status
    // is not 0 returns that status.
    [[nodiscard]] int status() const noexcept;
    // Operations applied successfully so far.
    [[nodiscard]] std::size_t applied() const noexcept;

    // Makes the applied operations durable (one sync); 0 or a negative
    // errno, when none of them happened.  Ends the batch.
    [[nodiscard]] int commit();
    // Forgets every operation.  Ends the batch.
    void abort() noexcept;

    // A regular file.  layout.stripe_count == 0: the parent's layout.  An
    // existing name: -EEXIST when exclusive, -EISDIR for a directory, else
    // its attributes with created = false.
    [[nodiscard]] int create(const Credentials &cred, Handle parent, std::string_view name,
                             std::uint32_t mode, bool exclusive, const Layout &layout,
                             CreateResult &out);
    // The new directory's layout (for its files) is the parent's.
    [[nodiscard]] int mkdir(const Credentials &cred, Handle parent, std::string_view name,
                            std::uint32_t mode, Attr &out);
    // fifo, socket, char_device, block_device (devices: root only, -EPERM).
    [[nodiscard]] int mknod(const Credentials &cred, Handle parent, std::string_view name,
                            ObjectType type, std::uint32_t mode, std::uint64_t rdev, Attr &out);
    [[nodiscard]] int symlink(const Credentials &cred, Handle parent, std::string_view name,
                              std::string_view target, Attr &out);
    // A new name for `target` (not a directory: -EPERM).
    [[nodiscard]] int link(const Credentials &cred, Handle target, Handle new_parent,
                           std::string_view new_name, Attr &out);
    // A regular file's last link: if `held` says it is open, it becomes an
    // orphan (out.orphaned) instead of going away.
    [[nodiscard]] int unlink(const Credentials &cred, Handle parent, std::string_view name,
                             Removed &out, const OpenCheck &held = {});
    [[nodiscard]] int rmdir(const Credentials &cred, Handle parent, std::string_view name);
    // rename(2)/renameat2(2) with rename_noreplace or rename_exchange.  If
    // an object was replaced (and so lost a link), `replaced` says which.
    [[nodiscard]] int rename(const Credentials &cred, Handle old_parent, std::string_view old_name,
                             Handle new_parent, std::string_view new_name, std::uint32_t flags,
                             Removed &replaced, const OpenCheck &held = {});
    // chmod, chown, utimensat: see perm::apply_setattr.
    [[nodiscard]] int setattr(const Credentials &cred, Handle handle,
                              const perm::AttrChange &change, Attr &out);
    // The caller wrote data to a regular file: mtime and ctime become now,
    // and setuid/setgid are cleared as perm::mode_after_write says.  Needs
    // write access, unless `writer`: the caller holds the file open for
    // writing (the open decided, as for a descriptor on Linux).
    [[nodiscard]] int data_written(const Credentials &cred, Handle handle, Attr &out,
                                   bool writer = false);
    [[nodiscard]] int xattr_set(const Credentials &cred, Handle handle, std::string_view name,
                                std::string_view value, std::uint32_t flags);
    [[nodiscard]] int xattr_remove(const Credentials &cred, Handle handle, std::string_view name);
    // On a directory: the layout its new files get.  On a regular file: its
    // striping, which must not change once it has data; the store cannot
    // know that, so the client checks the file is empty first.  Owner or
    // root only.
    [[nodiscard]] int layout_set(const Credentials &cred, Handle handle, const Layout &layout);

    // ---- exactly once ----
    // A unit: the operations and reply_save calls between begin_unit and
    // end_unit(true) are kept together or (end_unit(false), or a failed
    // end) not at all; a failed operation inside still rolls back alone.
    // Units do not nest.
    [[nodiscard]] int begin_unit();
    [[nodiscard]] int end_unit(bool keep);
    // The cached reply of `id`, if any (see ReplyMatch).
    [[nodiscard]] int reply_find(const ReplyId &id, ReplyMatch &match, SavedReply &out);
    // Records the reply of `id`: a new xid replaces the slot's old steps.
    [[nodiscard]] int reply_save(const ReplyId &id, const SavedReply &reply);
    // Creates or replaces a session; session_get is -ENOENT for an unknown
    // client; session_delete removes the session and its replies.
    [[nodiscard]] int session_put(const SessionRecord &session);
    [[nodiscard]] int session_get(std::uint64_t client_id, SessionRecord &out);
    [[nodiscard]] int session_delete(std::uint64_t client_id);

    // ---- orphans ----
    // The last hold of `handle` went: a held orphan's inode goes and its
    // record turns to reclaim; `out` names it (regular, nlink_after 0,
    // its layout) so the caller removes the data objects.  A reclaim
    // orphan is named again (a replayed close: the first closer may have
    // died before removing them).  Anything else (a file with names, no
    // orphan): out.handle is no_handle.
    [[nodiscard]] int release(Handle handle, Removed &out);
    // The data objects of a reclaim orphan are gone: forget it.  0 also when
    // there is no record; -EBUSY for a held one.
    [[nodiscard]] int orphan_done(Handle handle);
    // Up to `max` reclaim orphans whose since_ns <= older_than_ns, for a
    // client to finish; each one's since_ns becomes now_ns, so it is
    // handed out again only if that client does not finish it either.
    [[nodiscard]] int orphan_handout(std::uint64_t older_than_ns, std::uint64_t now_ns,
                                     std::size_t max, std::vector<Orphan> &out);

    // ---- remote directories (docs/metadata.md "Remote directories") ----
    // These are the steps of a mkdir and an rmdir that span two metadata
    // servers; the client drives them.  The directory's server cannot see
    // the parent, so the parent's server does the permission checks.
    //
    // On the directory's server: a directory with no entry, owned by the
    // caller, whose mode, gid and layout follow `parent` (another server's
    // directory; only server 0's may have remote children: -EXDEV).
    [[nodiscard]] int mkdir_object(const Credentials &cred, const Attr &parent, std::uint32_t mode,
                                   Attr &out);
    // On the parent's server: the entry (parent, name) -> handle (another
    // server's directory), with mkdir's checks (-EEXIST, -EACCES, -EMLINK).
    [[nodiscard]] int link_dir(const Credentials &cred, Handle parent, std::string_view name,
                               Handle handle);
    // On the directory's server: retire marks an empty remote directory
    // (-ENOTEMPTY otherwise) so that adding an entry to it fails with
    // -ENOENT; retire == false takes the mark back.  `out`: its attributes.
    [[nodiscard]] int retire_dir(Handle handle, bool retire, Attr &out);
    // On the parent's server: rmdir's checks and removal of (parent, name),
    // only while it names `handle` (else -ENOENT); owner_uid is the
    // directory's owner, for the sticky bit.
    [[nodiscard]] int unlink_dir(const Credentials &cred, Handle parent, std::string_view name,
                                 Handle handle, std::uint32_t owner_uid);
    // On the directory's server: removes a retired directory (-EBUSY if
    // it is not retired).
    [[nodiscard]] int remove_dir_object(Handle handle);

private:
    friend class Store;
    struct State;
    explicit WriteBatch(std::unique_ptr<State> state) noexcept;
    std::unique_ptr<State> state_;
};

class Store {
public:
    Store() noexcept;
    Store(Store &&other) noexcept;
    Store &operator=(Store &&other) noexcept;
    Store(const Store &) = delete;
    Store &operator=(const Store &) = delete;
    ~Store();

    // Opens the store at options.path, creating it on first use (with the
    // top directory {server_index, 1}: on server 0 the file system root,
    // mode 0755, owned by root, with options.default_layout).  0 or a
    // negative errno; the reason is logged (gossip, subsystem meta).  A store
    // created for another server index, or by another format, is refused
    // (-EINVAL).
    [[nodiscard]] int open(const Options &options);
    void close() noexcept;
    [[nodiscard]] bool is_open() const noexcept;
    [[nodiscard]] std::uint32_t server_index() const noexcept;

    // A batch of changes; check its status().  Blocks while another
    // thread holds a batch.
    [[nodiscard]] WriteBatch batch();

    [[nodiscard]] int lookup(const Credentials &cred, Handle parent, std::string_view name,
                             Attr &out) const;
    [[nodiscard]] int getattr(const Credentials &cred, Handle handle, Attr &out) const;
    [[nodiscard]] int readlink(const Credentials &cred, Handle handle, std::string &target) const;
    // Up to max_entries (at most max_page_entries) entries after `cookie`
    // (0 to start), in creation order.  An entry present for the whole walk
    // is returned exactly once, whatever is added or removed meanwhile.
    [[nodiscard]] int readdir(const Credentials &cred, Handle dir, std::uint64_t cookie,
                              std::uint32_t max_entries, DirPage &out) const;
    [[nodiscard]] int xattr_get(const Credentials &cred, Handle handle, std::string_view name,
                                std::string &value) const;
    [[nodiscard]] int xattr_list(const Credentials &cred, Handle handle,
                                 std::vector<std::string> &names) const;
    [[nodiscard]] int layout_get(const Credentials &cred, Handle handle, Layout &out) const;
    // access(2): 0 when cred may read/write/execute the object (mask of
    // perm::may_read, may_write, may_exec; 0: it exists), else -EACCES or
    // -ENOENT.
    [[nodiscard]] int access(const Credentials &cred, Handle handle, unsigned mask) const;
    // 0 when this server issued `handle` and no file has it any more
    // (unlinked and not held open): its data objects are garbage.
    // -EEXIST while a file has it, -ESTALE before it is issued, -EXDEV
    // for another server's handle.
    [[nodiscard]] int handle_gone(Handle handle) const;
    [[nodiscard]] int statfs(Stats &out) const;
    // Every handle of the store in order, a page at a time (for fsck);
    // cookie 0 to start.
    [[nodiscard]] int list_handles(std::uint64_t cookie, std::uint32_t max_handles,
                                   HandlePage &out) const;
    // Orphans with handle > cookie, at most max, in handle order; eof when
    // none follow.
    [[nodiscard]] int list_orphans(std::uint64_t cookie, std::uint32_t max,
                                   std::vector<Orphan> &out, bool &eof) const;
    // Whether any of `handles` has an orphan record (held or reclaim), in
    // one read transaction: 0 and `found` set, or a negative errno.
    [[nodiscard]] int any_orphan(std::span<const Handle> handles, bool &found) const;
    // Every client session (for the server's session table at start).
    [[nodiscard]] int list_sessions(std::vector<SessionRecord> &out) const;

private:
    friend class WriteBatch;
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace pvfs::meta

#endif // PVFS_META_STORE_HPP
