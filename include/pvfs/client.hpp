// libpvfs: the client library, used by the tools and by pvfsd.
//
// A Client talks to every server of one pvfs file system over BMI.  It
// bootstraps from "tcp://host:port/fsname" and the cluster key (it asks
// that server for the config) or from the config file itself.  Requests
// for the pieces of a striped file go to their data servers concurrently,
// with a few requests in flight per server, each moving its bytes in
// server-directed chunks (docs/server.md).  Attributes and names are cached
// for a short time (Options).
//
// Every call returns 0 (or a byte count) or a negative errno: the server's
// (ENOENT, EACCES, ENOSPC...), or the client's own: ETIMEDOUT when a server
// did not answer within the request timeout (requests are retried within
// it, Options::retry_timeout), ECONNREFUSED/ECONNRESET/EPIPE when it could
// not be reached by then, EPROTO when it answered something malformed.
// No call waits longer than the request timeout, unless Options::hard.
//
// Every operation exists twice: X(...) runs to its end and returns, and
// co_X(...) is the same operation as a coroutine (Task, pvfs/task.hpp) for
// programs that run many at once in one thread -- pvfsd keeps every
// upcall in flight this way.  A Loop drives the coroutines: Loop::poll()
// waits for the network and resumes the tasks whose requests ended.  Any
// number of Clients may share one Loop (Options::loop).  Arguments of a
// co_X (names, spans, the out-parameters) must outlive its task.
//
// The types here are the library's own, not the wire protocol's
// (pvfs/proto.hpp is private to libpvfs); the flag and mask values that a
// server sees equal their protocol counterparts.
//
// Not thread-safe: one thread uses a Loop and its Clients.
#ifndef PVFS_CLIENT_HPP
#define PVFS_CLIENT_HPP

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pvfs/config.hpp"
#include "pvfs/counters.hpp"
#include "pvfs/task.hpp"
#include "pvfs/types.hpp"

namespace pvfs::client {

// The exactly-once identity of one operation whose ids the caller chooses
// (pvfsd: a kernel op's mount, reply slot and tag), for Loop::set_context:
// every metadata change the operation sends carries {client_id, slot, xid}
// and the next step (docs/protocol.md "Exactly once").  The same ids after
// a restart (a new Client with the same Options::client_id) get the first
// result.  The slot must be below Options::caller_slots, and a slot's xids
// must grow.  client_id 0: none.
struct OnceOp {
    std::uint64_t client_id = 0;
    std::uint32_t slot = 0;
    std::uint64_t xid = 0;
    std::uint32_t next_step = 0; // the library's: the next request's step
};

// The event loop of libpvfs's asynchronous operations: one BMI instance,
// the requests in flight, their deadlines.
class Loop {
public:
    // nullptr and `error` set when BMI cannot start.
    [[nodiscard]] static std::shared_ptr<Loop> create(std::string &error);
    ~Loop();
    Loop(const Loop &) = delete;
    Loop &operator=(const Loop &) = delete;
    Loop(Loop &&) = delete;
    Loop &operator=(Loop &&) = delete;

    // Waits up to max_idle_ms (less when a request's deadline is nearer)
    // for the network or a watched fd, and resumes every task whose
    // requests ended -- those tasks run inside poll().
    void poll(int max_idle_ms);
    // Makes poll() return when fd is readable (pvfsd: the device).  The
    // caller reads fd until EAGAIN.  0 or a negative errno (see
    // bmi::Bmi::watch_fd).
    int watch_fd(int fd);
    int unwatch_fd(int fd);
    // Appends the watched fds that poll() found readable since the last
    // call, each once: the caller need not try the others.
    void take_ready_fds(std::vector<int> &out);

    // Who the operations started from now on are from, and the id that
    // cancel() stops them by (0: not cancellable).  An operation keeps
    // both for its whole life, whatever is set while it waits.
    void set_context(const Credentials &cred, std::uint64_t cancel_id);
    // The same, and the operations started from now on are `once`'s (see
    // OnceOp): it must live until they have ended (pvfsd: the upcall's
    // own object), and nullptr is none.
    void set_context(const Credentials &cred, std::uint64_t cancel_id, OnceOp *once);
    // Stops the requests of every operation started with cancel_id: each
    // ends with -ECANCELED (an operation may have done part of its work:
    // a write some of its bytes).  Returns how many requests it stopped.
    std::size_t cancel(std::uint64_t cancel_id);

    // Groups of requests in flight now, and the most there ever were.
    [[nodiscard]] std::size_t active() const noexcept;
    [[nodiscard]] std::size_t peak_active() const noexcept;

    // Registers `memory` with the network for the loop's life, so that the
    // reads and writes of any client on this loop that use it register
    // nothing themselves (pvfsd: its shared data buffers).  The memory
    // must stay mapped while the loop lives.
    void register_memory(std::span<std::byte> memory);

    struct Impl;
    [[nodiscard]] Impl &impl() noexcept { return *impl_; }

private:
    explicit Loop(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

// Whether `error` (a negative errno) is one of the way to a server rather
// than of the request (refused, reset, unreachable, timed out): worth
// another try, and what a soft mount reports as its timeout.
[[nodiscard]] bool transport_error(int error) noexcept;

struct Options {
    // Where the file system is: a URL "tcp://host:port/fsname" (the config
    // is fetched from that server), or a config file path.
    std::string target;
    // The cluster key; empty: the config's key_file (config file targets),
    // else $PVFS_KEY_FILE, else /etc/pvfs/pvfs.key.
    std::string key_file;
    // Encrypt every connection (docs/security.md "Encryption"), as the
    // config's [filesystem] encrypt does; for a URL target, whose config
    // comes from the server, also $PVFS_ENCRYPT=1.
    bool encrypt = false;
    // Who the requests are from; default: this process's effective ids.
    bool use_process_credentials = true;
    Credentials credentials;
    // How long cached attributes and names are trusted.
    std::chrono::milliseconds attr_timeout{1000};
    // How long a regular file's layout (how its bytes are striped), once
    // seen in any answer, serves its reads and writes without asking its
    // metadata server again.  A layout changes only while the file is
    // empty (pvfs.layout); each getattr, lookup or create of the file
    // refreshes it.  pvfsd, whose kernel asks for attributes at every open,
    // keeps layouts longer than attributes.
    std::chrono::milliseconds layout_timeout{1000};
    // Requests in flight per server for one striped read or write.
    unsigned pipeline_depth = 4;
    // Bytes per request of a striped read or write (several chunks).
    std::uint64_t request_bytes = std::uint64_t{8} << 20U;
    // 0: the config's request_timeout.
    std::chrono::milliseconds request_timeout{0};
    // Retries: a request whose server cannot be reached, whose connection
    // broke or went idle, or (retry_timeout > 0) that got no answer for
    // retry_timeout is sent again after a backoff (100 ms doubling to 10 s),
    // within the request timeout.  Changes carry exactly-once ids, so a
    // retry gets the first result; a change without them
    // (exactly_once = false) is never sent twice.  hard: no overall limit,
    // as an NFS hard mount: the call waits for its servers however long it
    // takes, and only Loop::cancel ends it.
    std::chrono::milliseconds retry_timeout{0};
    bool hard = false;
    // Ask the metadata server (access, after root squash) whether the
    // caller may read or write a file before moving its data, and whether
    // it may write before truncating; answers are trusted for attr_timeout.
    // Data servers take any authenticated request (docs/protocol.md "Who checks what"), so
    // this is where a user's rights over file data are enforced.  pvfsd
    // turns it off: the kernel checks at open, as for any file system.
    bool check_data_access = true;
    // The loop this client's operations run on; empty: a loop of its own.
    std::shared_ptr<Loop> loop;
    // The network method to reach every server by: "tcp" or "ib".  Empty:
    // the scheme of target when it is a URL (a mount of ib://host:port/fs
    // uses InfiniBand end to end), else $PVFS_METHOD, else "tcp".  Every
    // server must have an address of that method.
    std::string method;
    // Over ib, data servers move a read's or write's bytes themselves by
    // RDMA of this client's memory (docs/server.md "Bulk data"); false, or
    // $PVFS_RDMA=0: as messages, the flow used over tcp.
    bool server_rdma = true;
    // Exactly-once metadata changes (docs/protocol.md "Exactly once"): each
    // carries this client's session id, a slot and an operation number, so
    // that a metadata server answers a retry with the first result instead
    // of running the change again.  false: none (for benchmarks of what it
    // costs).
    bool exactly_once = true;
    // Chunk MACs on bulk data (docs/protocol.md "Chunk MACs").  false:
    // none, for bench/fs's measure of what they cost; honoured only when
    // the cluster's config says insecure_benchmark_only (loopback only),
    // else the MACs go anyway.
    bool chunk_macs = true;
    // Capabilities for the data servers (docs/security.md "Capabilities").
    // false: none asked of the metadata server (not on create, no
    // CAPABILITY requests, no renewals) and none sent on data requests, for
    // bench/fs's measure of what they cost; honoured only when the
    // cluster's config says insecure_benchmark_only, else they go anyway.
    // Its data servers then serve only if it says require_capabilities =
    // false too.
    bool capabilities = true;
    // The session id; 0: a random one.  pvfsd passes the kernel mount's,
    // which outlives the daemon.
    std::uint64_t client_id = 0;
    // Slots 0 .. caller_slots - 1 of the session are the caller's, for its
    // OnceOp ids (pvfsd: the kernel's reply slots); the library's own
    // changes take the others.
    std::uint32_t caller_slots = 0;
    // Who this client is across restarts (at most 255 bytes): a new session
    // with the same owner ends the old one on the servers.  Empty: none.
    std::string session_owner;
};

// SetAttr::mask: which of its fields setattr applies.  The *_now bits set
// that time to the server's clock instead of the given one.  ctime changes
// with any of them.
inline constexpr std::uint32_t set_mode = 1U << 0U;
inline constexpr std::uint32_t set_uid = 1U << 1U;
inline constexpr std::uint32_t set_gid = 1U << 2U;
inline constexpr std::uint32_t set_atime = 1U << 3U;
inline constexpr std::uint32_t set_mtime = 1U << 4U;
inline constexpr std::uint32_t set_atime_now = 1U << 5U;
inline constexpr std::uint32_t set_mtime_now = 1U << 6U;

// What setattr changes, plus truncation.
struct SetAttr {
    std::uint32_t mask = 0; // set_mode | set_uid | ...
    std::uint32_t mode = 0;
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    Timespec atime;
    Timespec mtime;
    bool truncate = false; // regular files: set the size to `size`
    std::uint64_t size = 0;
    // Asked through a file open for writing (pvfsd: the kernel's ATTR_FILE
    // on such a file, as ftruncate): the metadata server then allows the
    // size and times to now without write permission by the mode if this
    // client holds the file open for writing (open()).  Ownership rules
    // stay; docs/protocol.md, setattr's by_open bit.
    bool by_open = false;
};

struct StatFs {
    std::uint64_t total_bytes = 0; // over the data servers
    std::uint64_t free_bytes = 0;
    std::uint64_t avail_bytes = 0;
    std::uint64_t total_objects = 0; // over the metadata servers
    std::uint64_t free_objects = 0;
};

// ServerInfo::roles bits.
inline constexpr std::uint32_t role_metadata = 1;
inline constexpr std::uint32_t role_data = 2;

// What a server says about itself.
struct ServerInfo {
    std::string server_name; // its own name
    std::string version;
    std::array<std::byte, 32> config_hash{}; // config::hash() of the config it runs
    std::uint32_t roles = 0;                 // role_metadata | role_data
    std::uint64_t uptime_ns = 0;
    // File data it moved as its own bulk messages, and by RDMA of the
    // clients' memory (reads and writes together, since it started).
    std::uint64_t bulk_message_bytes = 0;
    std::uint64_t bulk_rdma_bytes = 0;
    // Its counters (pvfs-top), when status_all was asked for them.
    std::optional<ServerCounters> counters;
};

// One server's answer to a status request.
struct ServerStatus {
    std::string name;    // as in the config
    std::string address; // where it was asked
    int error = 0;       // 0, or why it did not answer
    ServerInfo status;
    std::chrono::nanoseconds round_trip{0};
    std::uint64_t total_bytes = 0, free_bytes = 0, avail_bytes = 0; // statfs
    std::uint64_t total_objects = 0, free_objects = 0;
};

// One directory entry (readdir).
struct DirEntry {
    std::string name;
    Handle handle = no_handle;
    ObjectType type = ObjectType::regular;
    std::uint64_t cookie = 0; // resumes the listing after this entry
    friend bool operator==(const DirEntry &, const DirEntry &) = default;
};

// A byte range of a file (list I/O).
struct Region {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    friend bool operator==(const Region &, const Region &) = default;
};

// A page of the handles a server holds (pvfs-fsck): list_handles,
// list_objects.
struct HandlePage {
    std::vector<Handle> handles;
    std::uint64_t next_cookie = 0; // where the next page starts
    bool eof = false;              // no page after this one
};

// Client::access bits (R_OK, W_OK, X_OK).
inline constexpr std::uint32_t access_read = 4;
inline constexpr std::uint32_t access_write = 2;
inline constexpr std::uint32_t access_exec = 1;

// Client::rename flags (RENAME_NOREPLACE, RENAME_EXCHANGE).
inline constexpr std::uint32_t rename_noreplace = 1;
inline constexpr std::uint32_t rename_exchange = 2;

// Client::xattr_set flags (XATTR_CREATE, XATTR_REPLACE).
inline constexpr std::uint32_t xattr_create = 1;
inline constexpr std::uint32_t xattr_replace = 2;

class Client {
public:
    // nullptr and `error` set (a message naming the target) when it cannot
    // connect or the config is bad.
    [[nodiscard]] static std::unique_ptr<Client> connect(const Options &options,
                                                         std::string &error);
    // connect as a coroutine on options.loop: fetching the config from a
    // URL target waits on the loop (up to the request timeout, cancellable
    // by the context's id) while the loop's other tasks go on.  Without
    // options.loop it makes a loop of its own, which the caller cannot
    // poll: pvfsd and other programs with many tasks pass theirs.
    static Task<std::unique_ptr<Client>> co_connect(Options options, std::string &error);
    ~Client();
    Client(const Client &) = delete;
    Client &operator=(const Client &) = delete;
    Client(Client &&) = delete;
    Client &operator=(Client &&) = delete;

    [[nodiscard]] const config::Cluster &cluster() const noexcept;

    // ---- names and attributes -----------------------------------------
    // A regular file's attr.size is its file size (asked from its data
    // servers); a directory's its entry count.
    int lookup(Handle parent, std::string_view name, Attr &out);
    Task<int> co_lookup(Handle parent, std::string_view name, Attr &out);
    // Walks an absolute path inside the file system ("/a/b"); symlinks are
    // followed in the middle, and at the end when `follow` (at most 40).
    int resolve(std::string_view path, Attr &out, bool follow = true);
    Task<int> co_resolve(std::string_view path, Attr &out, bool follow = true);
    int getattr(Handle handle, Attr &out);
    Task<int> co_getattr(Handle handle, Attr &out);
    int setattr(Handle handle, const SetAttr &change, Attr &out);
    Task<int> co_setattr(Handle handle, const SetAttr &change, Attr &out);
    // access(2) on the metadata server, never cached: 0 when the caller may
    // read/write/execute the object (access_read | access_write |
    // access_exec; 0 asks whether it exists), else -EACCES or -ENOENT.
    int access(Handle handle, std::uint32_t mask);
    Task<int> co_access(Handle handle, std::uint32_t mask);

    // ---- namespace ---------------------------------------------------------
    // layout.stripe_count == 0: inherit from the parent directory.
    // *created (if given) says whether the file is new (exclusive == false
    // opens an existing one).
    int create(Handle parent, std::string_view name, std::uint32_t mode, bool exclusive,
               const Layout &layout, Attr &out, bool *created = nullptr);
    Task<int> co_create(Handle parent, std::string_view name, std::uint32_t mode, bool exclusive,
                        const Layout &layout, Attr &out, bool *created = nullptr);
    // create, then open (open_read | open_write) what it made or found, in
    // one round trip: the metadata server registers the hold with the
    // create (docs/metadata.md "Orphans and open references").  Counted as
    // a co_open (co_close ends it); gen as co_open's pvfsd form, 0: this
    // client's next.  Needs Options::exactly_once; -EOPNOTSUPP without.
    int create_open(Handle parent, std::string_view name, std::uint32_t mode, bool exclusive,
                    const Layout &layout, std::uint32_t open_mode, Attr &out,
                    bool *created = nullptr);
    Task<int> co_create_open(Handle parent, std::string_view name, std::uint32_t mode,
                             bool exclusive, const Layout &layout, std::uint32_t open_mode,
                             std::uint64_t gen, Attr &out, bool *created = nullptr);
    int mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out);
    Task<int> co_mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out);
    // A remote directory (docs/metadata.md "Remote directories"): the
    // directory lives on metadata server `meta_index`, and so does what is
    // made inside it.  meta_index == the parent's server: a plain mkdir.
    // Only the root's server (0) may have remote children (EXDEV);
    // EINVAL for an index outside the config.
    int mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out,
              std::uint32_t meta_index);
    Task<int> co_mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out,
                       std::uint32_t meta_index);
    int mknod(Handle parent, std::string_view name, ObjectType type, std::uint32_t mode,
              std::uint64_t rdev, Attr &out);
    Task<int> co_mknod(Handle parent, std::string_view name, ObjectType type, std::uint32_t mode,
                       std::uint64_t rdev, Attr &out);
    int symlink(Handle parent, std::string_view name, std::string_view target, Attr &out);
    Task<int> co_symlink(Handle parent, std::string_view name, std::string_view target, Attr &out);
    int readlink(Handle handle, std::string &target);
    Task<int> co_readlink(Handle handle, std::string &target);
    int link(Handle handle, Handle new_parent, std::string_view new_name, Attr &out);
    Task<int> co_link(Handle handle, Handle new_parent, std::string_view new_name, Attr &out);
    // Removes a non-directory; its data objects go when the last link does.
    int unlink(Handle parent, std::string_view name);
    Task<int> co_unlink(Handle parent, std::string_view name);
    // Removes an empty directory, also a remote one (in three steps, never
    // leaving a name without its directory).
    int rmdir(Handle parent, std::string_view name);
    Task<int> co_rmdir(Handle parent, std::string_view name);
    // Renames and links within one metadata server only: EXDEV when the
    // two parents, or a moved directory and its new parent, are on
    // different servers (as for a mount point; mv copies instead).
    int rename(Handle old_parent, std::string_view old_name, Handle new_parent,
               std::string_view new_name, std::uint32_t flags = 0);
    Task<int> co_rename(Handle old_parent, std::string_view old_name, Handle new_parent,
                        std::string_view new_name, std::uint32_t flags = 0);
    // One page of entries after `cookie` (0: from the start); *eof when the
    // page ends the directory.
    int readdir(Handle dir, std::uint64_t cookie, std::uint32_t max_entries,
                std::vector<DirEntry> &entries, bool &eof);
    Task<int> co_readdir(Handle dir, std::uint64_t cookie, std::uint32_t max_entries,
                         std::vector<DirEntry> &entries, bool &eof);

    // ---- data ----------------------------------------------------------
    // Reads up to buffer.size() bytes at `offset`; returns the count (short
    // at the end of the file, 0 past it) or a negative errno.  Data calls
    // give -EACCES when the caller may not read (write) the file
    // (Options::check_data_access), except on files this Client created:
    // those it may always read and write, as through the fd of open(O_CREAT).
    std::int64_t read(Handle handle, std::uint64_t offset, std::span<std::byte> buffer);
    Task<std::int64_t> co_read(Handle handle, std::uint64_t offset, std::span<std::byte> buffer);
    // Writes all of `data` at `offset`; returns the count or a negative errno.
    std::int64_t write(Handle handle, std::uint64_t offset, std::span<const std::byte> data);
    Task<std::int64_t> co_write(Handle handle, std::uint64_t offset,
                                std::span<const std::byte> data);
    // List I/O: file regions filled from / into one memory buffer, in order.
    // Reads past the end of the file give zeros.  Returns bytes moved.
    std::int64_t read_list(Handle handle, std::span<const Region> regions,
                           std::span<std::byte> memory);
    Task<std::int64_t> co_read_list(Handle handle, std::span<const Region> regions,
                                    std::span<std::byte> memory);
    std::int64_t write_list(Handle handle, std::span<const Region> regions,
                            std::span<const std::byte> memory);
    Task<std::int64_t> co_write_list(Handle handle, std::span<const Region> regions,
                                     std::span<const std::byte> memory);
    // Makes the file's data durable on every data server it uses.  by_open:
    // the "data written" it tells the metadata server is allowed by this
    // client's open for writing (SetAttr::by_open), not only by the mode.
    int fsync(Handle handle, bool by_open = false);
    Task<int> co_fsync(Handle handle, bool by_open = false);

    // ---- the rest --------------------------------------------------------
    int statfs(StatFs &out);
    Task<int> co_statfs(StatFs &out);
    int xattr_get(Handle handle, std::string_view name, std::vector<std::byte> &value);
    Task<int> co_xattr_get(Handle handle, std::string_view name, std::vector<std::byte> &value);
    int xattr_set(Handle handle, std::string_view name, std::span<const std::byte> value,
                  std::uint32_t flags);
    Task<int> co_xattr_set(Handle handle, std::string_view name, std::span<const std::byte> value,
                           std::uint32_t flags);
    int xattr_list(Handle handle, std::vector<std::string> &names);
    Task<int> co_xattr_list(Handle handle, std::vector<std::string> &names);
    int xattr_remove(Handle handle, std::string_view name);
    Task<int> co_xattr_remove(Handle handle, std::string_view name);
    int layout_get(Handle handle, Layout &out);
    Task<int> co_layout_get(Handle handle, Layout &out);
    int layout_set(Handle handle, const Layout &layout);
    Task<int> co_layout_set(Handle handle, const Layout &layout);

    // ---- open references (docs/metadata.md "Orphans and open references") --
    // For programs that want POSIX unlink semantics through the library: a
    // file this client holds open stays readable and writable after the
    // last unlink anywhere, until its last close here (and then its data
    // objects go).  Opens of one handle are counted; the last close sends
    // it.  Needs Options::exactly_once (the session); -EOPNOTSUPP without.
    // The metadata server drops the holds of a client silent for its
    // `lease`: a client that holds files and changes nothing calls renew()
    // more often than that (it also re-opens the holds after a metadata
    // server restarted, and removes the objects of unlinked files whose
    // holder died).  mode: open_read | open_write.  `out` is what getattr
    // would answer (a regular file's size included).
    static constexpr std::uint32_t open_read = 1;
    static constexpr std::uint32_t open_write = 2;
    int open(Handle handle, std::uint32_t mode, Attr &out);
    int close(Handle handle);
    int renew();
    Task<int> co_open(Handle handle, std::uint32_t mode, Attr &out);
    // pvfsd's form: `gen` names the open towards the server (a later open
    // of the same client needs a greater one, also across processes that
    // share the client id, as the kernel's tags are), and `reclaim` re-opens
    // a hold this client id had before (a new pvfsd learning the kernel's
    // open files), which the server allows on unlinked files in its grace.
    Task<int> co_open(Handle handle, std::uint32_t mode, std::uint64_t gen, bool reclaim,
                      Attr &out);
    Task<int> co_close(Handle handle);
    // pvfsd's form: every open of this client id up to `gen` is closed,
    // whether or not this process opened it (a new pvfsd closing what the
    // kernel opened through a dead one): the server drops the hold unless
    // a later open renewed it.
    Task<int> co_close(Handle handle, std::uint64_t gen);
    // The same for many files at once: one request per metadata server
    // (pvfsd's batches of the kernel's CLOSEs).  The first error, if any.
    struct CloseRef {
        Handle handle = no_handle;
        std::uint64_t gen = 0;
    };
    Task<int> co_close(std::vector<CloseRef> refs);
    int close(std::vector<CloseRef> refs);
    // close(handle) of each, the last closes sent as one request per
    // metadata server (what pvfsd does with the kernel's batches).
    Task<int> co_close_each(std::vector<Handle> handles);
    int close_each(std::vector<Handle> handles);
    Task<int> co_renew();
    // One renewal at metadata server `meta_index` whose hand-out of orphans
    // to finish (data objects still to remove) is finished here: how many
    // it handed, or a negative errno.  A record whose objects could not all
    // be removed stays, to be handed out again a lease later.  The
    // metadata server's own reclaimer (docs/metadata.md "Orphans and open
    // references") calls it round after round.
    int reclaim_round(std::uint32_t meta_index);
    Task<int> co_reclaim_round(std::uint32_t meta_index);

    // ---- maintenance (pvfs-fsck) -------------------------------------------
    // Orphans of metadata server `meta_index` (root only): files unlinked
    // while open (state orphan_held) and data objects still to remove
    // (orphan_reclaim), from handle > cookie.
    struct Orphan {
        static constexpr std::uint8_t held = 1;
        static constexpr std::uint8_t reclaim = 2;
        Handle handle = no_handle;
        std::uint8_t state = 0; // held, reclaim
        std::uint64_t since_ns = 0;
        Layout layout;
    };
    int list_orphans(std::uint32_t meta_index, std::uint64_t cookie, std::uint32_t max,
                     std::vector<Orphan> &out, bool &eof);
    Task<int> co_list_orphans(std::uint32_t meta_index, std::uint64_t cookie, std::uint32_t max,
                              std::vector<Orphan> &out, bool &eof);
    // Removes the data objects of an orphan in state reclaim (a file whose
    // last holder closed or died before removing them) and deletes its
    // record; for pvfs-fsck.
    int finish_orphan(Handle handle, const Layout &layout);
    Task<int> co_finish_orphan(Handle handle, const Layout &layout);
    // A page of the handles metadata server `meta_index` holds (root only).
    int list_handles(std::uint32_t meta_index, std::uint64_t cookie, std::uint32_t max,
                     HandlePage &out);
    Task<int> co_list_handles(std::uint32_t meta_index, std::uint64_t cookie, std::uint32_t max,
                              HandlePage &out);
    // A page of the data objects data server `data_index` holds.
    int list_objects(std::uint32_t data_index, std::uint64_t cookie, std::uint32_t max,
                     HandlePage &out);
    Task<int> co_list_objects(std::uint32_t data_index, std::uint64_t cookie, std::uint32_t max,
                              HandlePage &out);
    // Removes one data object from one data server.
    int remove_object(std::uint32_t data_index, Handle handle);
    Task<int> co_remove_object(std::uint32_t data_index, Handle handle);
    // Removes a directory object that no entry names (a remote mkdir that
    // died half way): it must be empty (ENOTEMPTY).  Only for a handle
    // that fsck found unreachable: one still named would leave a dangling
    // entry.
    int remove_orphan_dir(Handle handle);
    Task<int> co_remove_orphan_dir(Handle handle);

    // Asks every server for its status and statfs, all at once.  With
    // `counters`, for its status with its counters and no statfs (the
    // statfs fields stay 0); a server older than the counters does not
    // answer (its error is then a timeout).
    std::vector<ServerStatus> status_all(bool counters = false);
    Task<std::vector<ServerStatus>> co_status_all(bool counters = false);

    // Drops every cached attribute and name.
    void forget_cache();

    // Who the following requests are from (pvfsd: each upcall's caller).
    // Cached attributes and names stay: the kernel checks permissions on
    // them itself; cached access answers go.
    void set_credentials(const Credentials &cred);
    // Options::hard for the calls started from now on (pvfsd: a mount's
    // ATTACH gives up, the mount's later operations may not).
    void set_hard(bool hard);
    // Whether the changes started from now on carry exactly-once ids (with
    // Options::exactly_once; the session stays open either way).  Only for
    // measuring what the ids cost on one connection (pvfs-mdtest --compare
    // reply-cache): a change sent without them is not protected against
    // retries.
    void set_change_ids(bool on);

    struct Impl;

private:
    explicit Client(std::unique_ptr<Impl> impl) noexcept;
    // co_create and co_create_open (open_mode 0: no open).
    Task<int> create_in(Handle parent, std::string_view name, std::uint32_t mode, bool exclusive,
                        const Layout &layout, std::uint32_t open_mode, std::uint64_t gen, Attr &out,
                        bool *created);
    std::unique_ptr<Impl> impl_;
};

// The message of a negative errno from this library.
[[nodiscard]] std::string error_text(std::int64_t negative_errno);

} // namespace pvfs::client

#endif // PVFS_CLIENT_HPP
