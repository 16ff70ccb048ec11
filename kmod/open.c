// SPDX-License-Identifier: GPL-2.0
/*
 * Open files and the daemon: the first open of a regular file on a mount
 * sends OPEN (the servers then keep the file while it is open, even once
 * unlinked anywhere: docs/metadata.md "Orphans and open references"), the
 * last release queues a CLOSE.  CLOSEs go in batches of up to
 * PVFSD_MAX_CLOSE, 100 ms after the first, and nobody waits for them, as
 * for DETACH.  A new daemon is told each open file again (OPEN with
 * PVFSD_REQ_RECLAIM): it renews the holds and re-opens them after a
 * metadata server restart.
 *
 * Locking: pi->open_mutex lets one OPEN of an inode go at a time;
 * sbi->open_lock (a spinlock) guards the counts, the list of open inodes
 * and the batch of CLOSEs, so that a release never sleeps on a daemon.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "pvfs.h"

/* The delay that batches CLOSEs. */
#define PVFS_CLOSE_DELAY (HZ / 10)

u32 pvfs_open_bits(fmode_t fmode)
{
	u32 mode = 0;

	if (fmode & FMODE_READ)
		mode |= PVFSD_OPEN_READ;
	if (fmode & FMODE_WRITE)
		mode |= PVFSD_OPEN_WRITE;
	return mode;
}

static void pvfs_async_end(struct pvfs_op *op)
{
	pvfs_op_put(op);
}

/* OPEN of @inode for @mode; on success its attributes are fresh. */
static int pvfs_send_open(struct inode *inode, u32 mode, u64 *gen)
{
	struct pvfs_inode_info *pi = PVFS_I(inode);
	const struct pvfsd_attr_resp *resp;
	struct pvfsd_open_req *req;
	struct pvfs_op *op;
	int err;

	op = pvfs_op_new(PVFS_SB(inode->i_sb), PVFSD_OP_OPEN, sizeof(*req), sizeof(*resp));
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->handle = pi->handle;
	req->gen = pvfs_op_tag(op);
	req->mode = mode;
	*gen = req->gen;
	err = pvfs_op_run(op);
	if (!err) {
		resp = pvfs_op_resp(op);
		err = pvfs_update_inode(inode, &resp->attr);
	} else if (err == -ENOENT) {
		err = -ESTALE;
	}
	pvfs_op_put(op);
	return err;
}

/* Sends the CLOSEs queued so far, in batches. */
static void pvfs_send_closes(struct pvfs_sb_info *sbi)
{
	struct pvfsd_close_req *req;
	struct pvfs_op *op;
	unsigned int n;
	bool more;

	mutex_lock(&sbi->close_mutex);
	spin_lock(&sbi->open_lock);
	n = sbi->nr_closes;
	spin_unlock(&sbi->open_lock);
	if (!n)
		goto out;
	op = pvfs_op_new(sbi, PVFSD_OP_CLOSE, sizeof(*req) + n * sizeof(struct pvfsd_close_ref), 0);
	if (IS_ERR(op)) {
		/* kept for the next try */
		schedule_delayed_work(&sbi->close_work, PVFS_CLOSE_DELAY);
		goto out;
	}
	req = pvfs_op_req(op);
	req->count = n;
	/* only a sender takes from the batch: the first n are still there */
	spin_lock(&sbi->open_lock);
	memcpy(req + 1, sbi->closes, n * sizeof(struct pvfsd_close_ref));
	sbi->nr_closes -= n;
	memmove(sbi->closes, sbi->closes + n, sbi->nr_closes * sizeof(struct pvfsd_close_ref));
	more = sbi->nr_closes > 0;
	spin_unlock(&sbi->open_lock);
	/*
	 * On failure (the mount failed) the servers let the holds go at the
	 * end of their lease, or when the daemon detaches the mount.
	 */
	if (pvfs_op_start_async(op, pvfs_async_end, NULL))
		pvfs_op_put(op);
	if (more)
		mod_delayed_work(system_wq, &sbi->close_work, 0);
out:
	mutex_unlock(&sbi->close_mutex);
}

static void pvfs_close_work(struct work_struct *work)
{
	pvfs_send_closes(container_of(to_delayed_work(work), struct pvfs_sb_info, close_work));
}

/*
 * A CLOSE of @handle's opens up to @gen, for a hold no inode counts (a
 * CREATE that opened a file the kernel could not instantiate).
 */
void pvfs_close_handle(struct pvfs_sb_info *sbi, u64 handle, u64 gen)
{
	struct pvfsd_close_ref *ref;

	for (;;) {
		spin_lock(&sbi->open_lock);
		if (sbi->nr_closes < PVFSD_MAX_CLOSE)
			break;
		spin_unlock(&sbi->open_lock);
		pvfs_send_closes(sbi);
	}
	ref = &sbi->closes[sbi->nr_closes++];
	ref->handle = handle;
	ref->gen = gen;
	spin_unlock(&sbi->open_lock);
	schedule_delayed_work(&sbi->close_work, PVFS_CLOSE_DELAY);
}

/*
 * An open the daemon made with the CREATE of @inode (pvfs_atomic_open):
 * counted as an OPEN of @mode would be, with the CREATE's tag @gen as its
 * gen.  The servers keep the greatest gen of the mount's opens, so the
 * inode does too (a slower OPEN may end after this).
 */
void pvfs_open_adopt(struct inode *inode, u32 mode, u64 gen)
{
	struct pvfs_sb_info *sbi = PVFS_SB(inode->i_sb);
	struct pvfs_inode_info *pi = PVFS_I(inode);

	spin_lock(&sbi->open_lock);
	pi->open_gen = max(pi->open_gen, gen);
	pi->open_mode = pi->open_count ? pi->open_mode | mode : mode;
	if (!pi->open_count++) {
		list_add_tail(&pi->open_link, &sbi->open_inodes);
		sbi->nr_open++;
	}
	spin_unlock(&sbi->open_lock);
}

/* One open file description of @inode less; the last queues a CLOSE. */
void pvfs_open_release(struct inode *inode)
{
	struct pvfs_sb_info *sbi = PVFS_SB(inode->i_sb);
	struct pvfs_inode_info *pi = PVFS_I(inode);
	struct pvfsd_close_ref *ref;

	for (;;) {
		spin_lock(&sbi->open_lock);
		if (pi->open_count > 1) {
			pi->open_count--;
			spin_unlock(&sbi->open_lock);
			return;
		}
		if (sbi->nr_closes < PVFSD_MAX_CLOSE)
			break;
		/* a full batch: it goes now, from here */
		spin_unlock(&sbi->open_lock);
		pvfs_send_closes(sbi);
	}
	if (!WARN_ON_ONCE(pi->open_count == 0)) {
		pi->open_count = 0;
		pi->open_mode = 0;
		list_del_init(&pi->open_link);
		sbi->nr_open--;
		ref = &sbi->closes[sbi->nr_closes++];
		ref->handle = pi->handle;
		ref->gen = pi->open_gen;
	}
	spin_unlock(&sbi->open_lock);
	schedule_delayed_work(&sbi->close_work, PVFS_CLOSE_DELAY);
}

int pvfs_open_get(struct inode *inode, struct file *file)
{
	struct pvfs_sb_info *sbi = PVFS_SB(inode->i_sb);
	struct pvfs_inode_info *pi = PVFS_I(inode);
	u32 mode = pvfs_open_bits(file->f_mode);
	bool opened = false;
	u64 gen;
	int err;

	err = mutex_lock_killable(&pi->open_mutex);
	if (err)
		return err;
	spin_lock(&sbi->open_lock);
	if (pi->open_count && !(mode & ~pi->open_mode)) {
		pi->open_count++;
		opened = true;
	} else {
		mode |= pi->open_mode;
	}
	spin_unlock(&sbi->open_lock);
	if (opened) {
		mutex_unlock(&pi->open_mutex);
		/* close-to-open: see what other clients wrote before we opened */
		err = pvfs_revalidate(inode, true);
		if (err)
			pvfs_open_release(inode);
		return err;
	}

	err = pvfs_send_open(inode, mode, &gen);
	/* counted as a CREATE's open is: that one may have a later tag */
	if (!err)
		pvfs_open_adopt(inode, mode, gen);
	mutex_unlock(&pi->open_mutex);
	return err;
}

bool pvfs_open_last(struct inode *inode)
{
	struct pvfs_sb_info *sbi = PVFS_SB(inode->i_sb);
	bool last;

	spin_lock(&sbi->open_lock);
	last = PVFS_I(inode)->open_count == 1;
	spin_unlock(&sbi->open_lock);
	return last;
}

/*
 * A new daemon: tell it every file the mount has open.  The close mutex
 * is held from the snapshot until the last OPEN is queued, so that the
 * CLOSE of a file released after the snapshot is queued behind its OPEN;
 * pvfsd sends a CLOSE to the servers only once the OPENs of that file
 * before it have ended there, so that no OPEN adds a hold after the CLOSE
 * that ends it.  (The channel does not replay these OPENs to a later
 * daemon: that one gets a snapshot of its own.)
 */
static void pvfs_reclaim_work(struct work_struct *work)
{
	struct pvfs_sb_info *sbi = container_of(work, struct pvfs_sb_info, reclaim_work);
	struct pvfs_inode_info *pi;
	struct pvfsd_open_req *opens, *req;
	unsigned int n = 0, i, want;
	struct pvfs_op *op;

	if (READ_ONCE(sbi->dying))
		return;
	mutex_lock(&sbi->close_mutex);
	for (;;) {
		spin_lock(&sbi->open_lock);
		want = sbi->nr_open;
		spin_unlock(&sbi->open_lock);
		if (!want)
			goto out;
		opens = kvmalloc_array(want, sizeof(*opens), GFP_KERNEL);
		if (!opens) {
			pr_warn("%s: no memory to tell the daemon the open files\n", sbi->source);
			goto out;
		}
		n = 0;
		spin_lock(&sbi->open_lock);
		if (sbi->nr_open <= want) {
			list_for_each_entry(pi, &sbi->open_inodes, open_link) {
				opens[n].handle = pi->handle;
				opens[n].gen = pi->open_gen;
				opens[n].mode = pi->open_mode;
				n++;
			}
			spin_unlock(&sbi->open_lock);
			break;
		}
		spin_unlock(&sbi->open_lock);
		kvfree(opens);
	}
	for (i = 0; i < n; i++) {
		op = pvfs_op_new(sbi, PVFSD_OP_OPEN, sizeof(*req), sizeof(struct pvfsd_attr_resp));
		if (IS_ERR(op)) {
			pr_warn("%s: no memory to tell the daemon an open file\n", sbi->source);
			continue;
		}
		req = pvfs_op_req(op);
		req->common.flags |= PVFSD_REQ_RECLAIM;
		req->handle = opens[i].handle;
		req->gen = opens[i].gen;
		req->mode = opens[i].mode;
		if (pvfs_op_start_async(op, pvfs_async_end, NULL))
			pvfs_op_put(op);
	}
	kvfree(opens);
out:
	mutex_unlock(&sbi->close_mutex);
}

void pvfs_open_init(struct pvfs_sb_info *sbi)
{
	spin_lock_init(&sbi->open_lock);
	INIT_LIST_HEAD(&sbi->open_inodes);
	INIT_WORK(&sbi->reclaim_work, pvfs_reclaim_work);
	mutex_init(&sbi->close_mutex);
	INIT_DELAYED_WORK(&sbi->close_work, pvfs_close_work);
}

void pvfs_open_stop(struct pvfs_sb_info *sbi)
{
	WRITE_ONCE(sbi->dying, true);
	cancel_work_sync(&sbi->reclaim_work);
}

void pvfs_open_end(struct pvfs_sb_info *sbi)
{
	cancel_delayed_work_sync(&sbi->close_work);
	pvfs_send_closes(sbi);
	/* more than one batch: the rest went to the work again */
	while (cancel_delayed_work_sync(&sbi->close_work))
		pvfs_send_closes(sbi);
}
