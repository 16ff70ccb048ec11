/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internal header of pvfs.ko: what the module's files share.
 * The ABI towards pvfsd lives in include/pvfs/pvfsd_dev.h; the design in
 * docs/plan/kernel-client.md.
 *
 * Two halves meet here:
 *  - the channel (dev.c, op.c): ops queued for the daemon, matched by tag,
 *    validated, the data slots, daemon death, replay and the grace time;
 *  - the VFS side (super.c, inode.c, namei.c, dir.c, file.c with the
 *    address-space operations, xattr.c): builds an op per request, runs
 *    it, uses its answer.
 */
#ifndef PVFS_KMOD_PVFS_H
#define PVFS_KMOD_PVFS_H

#include <linux/fs.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/workqueue.h>

#include "pvfs/pvfsd_dev.h"
#include "compat.h"

/* ---- mounts ---------------------------------------------------------- */

/* Mount options (super.c parses them; /proc/mounts shows them). */
struct pvfs_mount_opts {
	unsigned int acregmin; /* seconds attributes of files are trusted, min */
	unsigned int acregmax;
	unsigned int acdirmin; /* the same for directories (and dentries) */
	unsigned int acdirmax;
	bool noac; /* no attribute caching at all */
	bool intr; /* signals interrupt waits (else only SIGKILL) */
	bool sync; /* writes go through at once (like O_SYNC) */
	/*
	 * seconds ops wait for a (new) daemon before the grace work looks,
	 * and the daemon's wait for an answer before it sends again
	 */
	unsigned int timeo;
	/*
	 * soft: an op fails after timeo * (retrans + 1) without an answer or
	 * without a daemon, with EIO (ETIMEDOUT if softerr).  hard (!soft,
	 * the default): it waits for as long as it takes, killable.
	 */
	bool soft;
	bool softerr;
	unsigned int retrans;
	bool devices; /* device nodes may be opened (else SB_I_NODEV) */
	/*
	 * key=: the client key file pvfsd connects the mount with (NULL: the
	 * daemon's own), kmalloc'd; owned by whichever copy holds it.
	 */
	char *key;
};

/* One mounted pvfs: the superblock's s_fs_info. */
struct pvfs_sb_info {
	struct super_block *sb;
	char *source;	      /* "tcp://host:port/fs", kmalloc'd */
	char *daemon_options; /* options passed in ATTACH ("" if none) */
	struct pvfs_mount_opts opts;
	u64 root_handle; /* from ATTACH */
	u64 fs_id;
	u32 max_name;

	/* Owned by the channel (op.c/dev.c); the VFS side only reads mount_id. */
	u64 mount_id; /* set by pvfs_mount_register, never 0 */
	struct list_head mount_link;
	bool registered;
	bool failed;   /* umount -f or a soft grace expired: ops fail with fail_err */
	int fail_err;  /* -EIO, or -ETIMEDOUT for softerr's grace */
	bool attached; /* the current daemon answered its ATTACH */
	struct delayed_work grace_work; /* at timeo: logs, or fails a soft mount */
	/*
	 * The mount's identity towards the servers' reply cache (ATTACH), and
	 * its reply slots: each op that changes something holds one for its
	 * life (pvfsd_req_common.reply_slot).  Under pvfs_chan.lock.
	 */
	u64 client_id;
	DECLARE_BITMAP(reply_map, PVFSD_REPLY_SLOTS);
	wait_queue_head_t replyq;

	/*
	 * The VFS side's (file.c): the inodes with open files on the mount
	 * (pvfs_inode_info.open_link), told again to each new daemon
	 * (reclaim_work, queued by the channel at its HELLO); the CLOSEs not
	 * sent yet, a batch that close_work sends 100 ms after its first.
	 */
	spinlock_t open_lock; /* guards open_inodes, nr_open, closes, nr_closes */
	struct list_head open_inodes;
	unsigned int nr_open;
	struct work_struct reclaim_work;
	struct pvfsd_close_ref closes[PVFSD_MAX_CLOSE];
	unsigned int nr_closes;
	/* one sender of the batch at a time, none while reclaim_work queues */
	struct mutex close_mutex;
	struct delayed_work close_work;
	bool dying; /* kill_sb: no more replayed OPENs */
};

/* statfs f_type of pvfs: "PVFS" */
#define PVFS_SUPER_MAGIC 0x50564653

/*
 * Registers @sbi with the channel: gives it a mount_id and remembers its
 * source and options so that a restarted daemon gets an ATTACH for it.
 * The caller then runs the first ATTACH itself (pvfs_op_new + run).
 */
int pvfs_mount_register(struct pvfs_sb_info *sbi);
/* At kill_sb, after DETACH was sent (its failure ignored). */
void pvfs_mount_unregister(struct pvfs_sb_info *sbi);
/* umount -f: every pending op of the mount fails with -EIO now. */
void pvfs_mount_abort(struct pvfs_sb_info *sbi);

/* ---- ops --------------------------------------------------------------- */

/*
 * One request to the daemon and its answer.  Life: pvfs_op_new, fill the
 * body (and tail), maybe pvfs_op_get_slot and fill the slot, pvfs_op_run,
 * read the answer, pvfs_op_put.  The fields below are the VFS side's; the
 * rest of the struct is op.c's (struct pvfs_op is defined there).
 */
struct pvfs_op;

/*
 * A new op @opcode of mount @sbi (NULL only for ops of no mount) whose
 * upcall body (struct pvfsd_*_req + tail) is @req_len bytes, answered by a
 * downcall body of at most @resp_max bytes.  The body is zeroed and its
 * struct pvfsd_req_common is filled in (mount id, the caller's fsuid,
 * fsgid and groups).  ERR_PTR(-ENOMEM), or -EINVAL when the sizes exceed
 * PVFSD_DEV_MAX_MSG.
 */
struct pvfs_op *pvfs_op_new(struct pvfs_sb_info *sbi, enum pvfsd_op opcode, size_t req_len,
			    size_t resp_max);
/* The upcall body to fill in: @req_len bytes after the header. */
void *pvfs_op_req(struct pvfs_op *op);

/*
 * Sends the op and waits for its answer: killable, and interruptible too on
 * an "intr" mount.  An op that changes something first takes a reply slot
 * of its mount (waiting the same way).  With no daemon attached a hard
 * mount's op waits for one; a soft mount's waits at most
 * timeo * (retrans + 1).  Returns the daemon's status (0 or a negative
 * errno) or -EIO (soft mount's grace expired, umount -f; -ETIMEDOUT with
 * softerr), -EINTR/-ERESTARTSYS (signal: fine for a syscall to return,
 * never an error to store for others), -ENOTCONN (no daemon when the op is
 * for no mount).  On 0, pvfs_op_resp() is the downcall body, already
 * checked by the channel against the op's downcall rules
 * (docs/plan/kernel-client.md section 1).  An op runs once.
 */
int pvfs_op_run(struct pvfs_op *op);
/*
 * pvfs_op_run in two steps, for callers that keep several ops in flight:
 * pvfs_op_start queues the op (0, or -EIO when the mount failed and the op
 * was not sent); pvfs_op_wait waits for a started op and returns what
 * pvfs_op_run would.  Once a wait was interrupted by a signal, the
 * caller's other started ops are cancelled by their own waits, which
 * return at once: wait for every op started.
 */
int pvfs_op_start(struct pvfs_op *op);
int pvfs_op_wait(struct pvfs_op *op);
/*
 * pvfs_op_start for an op nobody waits for: @end runs once, in process
 * context, when the op ends, with pvfs_op_status() 0 and pvfs_op_resp()
 * valid, or with a negative errno (grace time over, umount -f).  It runs in
 * the daemon's write() of the answer, so it must not sleep long, or from a
 * work item.  @end takes over the caller's reference.  On an error return
 * (as pvfs_op_start's) @end is not called and the reference stays the
 * caller's.
 */
int pvfs_op_start_async(struct pvfs_op *op, void (*end)(struct pvfs_op *op), void *data);
int pvfs_op_status(const struct pvfs_op *op);
void *pvfs_op_end_data(const struct pvfs_op *op);
/* The downcall body and its length (valid after pvfs_op_run returned 0). */
const void *pvfs_op_resp(const struct pvfs_op *op);
size_t pvfs_op_resp_len(const struct pvfs_op *op);

/*
 * READ/WRITE: takes a data slot for the op, waiting (killable / intr) for
 * one to be free, and sets the slot index in the op; the caller fills
 * struct pvfsd_io_req.slot from pvfs_op_slot().  The slot stays the op's
 * until pvfs_op_put, and longer when the op was abandoned while the
 * daemon may still use it.
 */
int pvfs_op_get_slot(struct pvfs_op *op);
/* The same without waiting: -EAGAIN when every slot is taken. */
int pvfs_op_try_get_slot(struct pvfs_op *op);
unsigned int pvfs_op_slot(const struct pvfs_op *op);
/* Kernel address of the op's slot, pvfs_slot_size() bytes. */
void *pvfs_op_slot_addr(const struct pvfs_op *op);
/* Bytes per slot (0 before any daemon said HELLO). */
size_t pvfs_slot_size(void);

/*
 * WRITEs one writeback pass keeps in flight, so that pvfsd works on several
 * slots of a stream at once.  (Readahead does not wait for its READs: its
 * window, below, bounds how many are in flight.)
 */
#define PVFS_IO_DEPTH 8
/*
 * Readahead window of a mount (at least one slot): a sequential reader keeps
 * this much in slot-sized READs going.  With less, pvfsd's READs finish
 * together and it idles while the reader copies them out (bench-kernel's
 * 1 MiB reads of a 256 MiB file: 0.55 of the library's rate with 4 MiB,
 * 0.84 with 16 MiB).  Admins tune it per mount in
 * /sys/class/bdi/pvfs-N/read_ahead_kb.
 */
#define PVFS_RA_BYTES (16U << 20)
/* A mount's share of the dirty page limit, in percent (super.c). */
#define PVFS_DIRTY_RATIO 10
/* The op's tag (the gen of an OPEN). */
u64 pvfs_op_tag(const struct pvfs_op *op);
/* the workqueue of ops that fail without a waiter (op.c) */
int pvfs_op_init(void);
void pvfs_op_exit(void);

/* Drops the caller's reference (NULL and ERR_PTR are ignored). */
void pvfs_op_put(struct pvfs_op *op);

/* ---- the VFS side -------------------------------------------------------- */

struct pvfs_inode_info {
	struct inode vfs_inode;
	u64 handle;
	u32 blksize;		 /* the file's stripe size */
	unsigned long attr_time; /* jiffies of the last fresh attributes; 0: stale */
	/*
	 * jiffies of the last fresh mode and owner: what permission() needs.
	 * Not reset by pvfs_attr_stale(): our own creates, removes, renames and
	 * writes change times, sizes and link counts, never these.
	 */
	unsigned long perm_time;
	unsigned long flags; /* PVFS_INO_* bits */
	/*
	 * Writeback passes that ended with folios dirtied again to be retried
	 * (a WRITE failed transiently): fsync and close wait for a pass that
	 * leaves it unchanged (file.c).
	 */
	atomic_t wb_retries;
	/*
	 * Open file descriptions of the inode (on its mount), and what its
	 * OPEN told the daemon: the gen (that OPEN's tag) and the modes.  The
	 * first open sends OPEN, as does one that widens the modes; the last
	 * release queues a CLOSE.  Under open_mutex; open_link (on
	 * sbi->open_inodes while open_count > 0) under sbi->open_lock.
	 */
	struct mutex open_mutex;
	unsigned int open_count;
	u64 open_gen;
	u32 open_mode;
	struct list_head open_link;
};

/*
 * pvfs_inode_info.flags: a WRITE failed for good, so cached folios hold
 * bytes the servers lack; the next read, open or mmap drops them.
 */
#define PVFS_INO_DATA_INVALID 0

static inline struct pvfs_inode_info *PVFS_I(struct inode *inode)
{
	return container_of(inode, struct pvfs_inode_info, vfs_inode);
}

static inline struct pvfs_sb_info *PVFS_SB(struct super_block *sb)
{
	return sb->s_fs_info;
}

/* inode.c */
int pvfs_inode_cache_init(void);
void pvfs_inode_cache_exit(void);
struct inode *pvfs_alloc_inode(struct super_block *sb);
void pvfs_free_inode(struct inode *inode);
/* The inode of @attr's handle, created or refreshed from @attr; ERR_PTR. */
struct inode *pvfs_iget(struct super_block *sb, const struct pvfsd_attr *attr);
/*
 * Takes fresh attributes from the daemon into @inode: -EIO (logged, the
 * inode untouched) when they are of another handle or another type.
 */
int pvfs_update_inode(struct inode *inode, const struct pvfsd_attr *attr);
/* "regular file", "directory", ... for log lines */
const char *pvfs_type_name(u32 type);
/* GETATTR unless the cached attributes are young enough (or @force). */
int pvfs_revalidate(struct inode *inode, bool force);
/*
 * The attributes changed on the server (we changed them): ask next time.
 * The mode and owner stay trusted (see perm_time).
 */
static inline void pvfs_attr_stale(struct inode *inode)
{
	PVFS_I(inode)->attr_time = 0;
}

unsigned long pvfs_attr_timeout(struct inode *inode);
int pvfs_getattr(PVFS_IDMAP_T *idmap, const struct path *path, struct kstat *stat, u32 request_mask,
		 unsigned int query_flags);
int pvfs_setattr(PVFS_IDMAP_T *idmap, struct dentry *dentry, struct iattr *iattr);
int pvfs_permission(PVFS_IDMAP_T *idmap, struct inode *inode, int mask);
extern const struct inode_operations pvfs_file_iops;
extern const struct inode_operations pvfs_special_iops;

/* namei.c */
extern const struct inode_operations pvfs_dir_iops;
extern const struct inode_operations pvfs_symlink_iops;
extern const struct dentry_operations pvfs_dentry_ops;

/* dir.c */
extern const struct file_operations pvfs_dir_fops;

/* file.c */
extern const struct file_operations pvfs_file_fops;
/* The open side of a mount: set up at fill_super, ended at kill_sb. */
void pvfs_open_init(struct pvfs_sb_info *sbi);
/* Before the inodes go: no more replayed OPENs. */
void pvfs_open_stop(struct pvfs_sb_info *sbi);
/* After the inodes went, before DETACH: the last CLOSEs go now. */
void pvfs_open_end(struct pvfs_sb_info *sbi);
/*
 * An open of @inode for @file: OPEN at the inode's first open on the mount
 * (or one for more modes), else the GETATTR of close-to-open.
 */
int pvfs_open_get(struct inode *inode, struct file *file);
/* Is the release of @file the inode's last on the mount? */
bool pvfs_open_last(struct inode *inode);
/* A release: the last queues the inode's CLOSE. */
void pvfs_open_release(struct inode *inode);
/* PVFSD_OPEN_* of an open file's f_mode. */
u32 pvfs_open_bits(fmode_t fmode);
/* A CREATE's open of @inode, counted as an OPEN with @gen (open.c). */
void pvfs_open_adopt(struct inode *inode, u32 mode, u64 gen);
/* Queues a CLOSE of @handle up to @gen that no inode counts. */
void pvfs_close_handle(struct pvfs_sb_info *sbi, u64 handle, u64 gen);
/* finish_open()'s opener for a file pvfs_atomic_open created: OPEN. */
int pvfs_open_created(struct inode *inode, struct file *file);
/* The same for one its CREATE opened (pvfs_open_adopt): no OPEN. */
int pvfs_open_held(struct inode *inode, struct file *file);
extern const struct address_space_operations pvfs_aops;

/* xattr.c */
extern const struct xattr_handler *pvfs_xattr_handlers[];
ssize_t pvfs_listxattr(struct dentry *dentry, char *list, size_t size);

/* ---- the channel --------------------------------------------------------- */

int pvfs_dev_init(void);
void pvfs_dev_exit(void);
bool pvfs_dev_daemon_attached(void);

/* ---- the file system type ------------------------------------------------- */

int pvfs_fs_init(void);
void pvfs_fs_exit(void);

#endif /* PVFS_KMOD_PVFS_H */
