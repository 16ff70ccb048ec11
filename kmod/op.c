// SPDX-License-Identifier: GPL-2.0
/*
 * Ops: requests from the VFS side to pvfsd, their queue, their tags, the
 * data slots and reply slots they use, and the mounts they belong to.
 * What happens when the daemon dies lives here too: sent ops go back to
 * the queue to be replayed to the next daemon (keeping tag and reply slot,
 * so the servers' reply cache answers a change done already), and each
 * soft mount's grace work fails its ops when no daemon took them over
 * within timeo * (retrans + 1) seconds; a hard mount's ops wait.
 *
 * Locking: pvfs_chan.lock (a spinlock) guards every op's state, the queue,
 * the hash of sent ops, the slot bitmaps and each mount's channel fields.
 * pvfs_mounts_mutex serialises changes of the mount list with a daemon's
 * HELLO, which builds an ATTACH per mount and so cannot hold the spinlock.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitmap.h>
#include <linux/cred.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/random.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uidgid.h>
#include <linux/vmalloc.h>

#include "chan.h"

struct pvfs_chan pvfs_chan = {
	.lock = __SPIN_LOCK_UNLOCKED(pvfs_chan.lock),
	.queue = LIST_HEAD_INIT(pvfs_chan.queue),
	.readq = __WAIT_QUEUE_HEAD_INITIALIZER(pvfs_chan.readq),
	.mounts = LIST_HEAD_INIT(pvfs_chan.mounts),
	.slotq = __WAIT_QUEUE_HEAD_INITIALIZER(pvfs_chan.slotq),
	.next_tag = 1,
	.next_mount_id = 1,
};

static DEFINE_MUTEX(pvfs_mounts_mutex);

/* runs the end of async ops that fail (their answers end them in place) */
static struct workqueue_struct *pvfs_end_wq;

static unsigned int max_slot_mib = 256;
module_param(max_slot_mib, uint, 0444);
MODULE_PARM_DESC(max_slot_mib, "Most MiB of data slots shared with pvfsd (default 256)");

/* ---- allocation and references ---- */

static struct pvfs_op *pvfs_op_alloc(enum pvfs_op_kind kind, u16 opcode, u64 mount_id,
				     size_t body_len, size_t resp_max, gfp_t gfp)
{
	struct pvfs_op *op;
	size_t up_len = sizeof(struct pvfsd_msg_hdr) + body_len;

	if (up_len > PVFSD_DEV_MAX_MSG ||
	    resp_max > PVFSD_DEV_MAX_MSG - sizeof(struct pvfsd_msg_hdr))
		return ERR_PTR(-EINVAL);

	op = kzalloc(sizeof(*op), gfp);
	if (!op)
		return ERR_PTR(-ENOMEM);
	op->up = kvzalloc(up_len, gfp);
	if (!op->up) {
		kfree(op);
		return ERR_PTR(-ENOMEM);
	}
	refcount_set(&op->ref, 1);
	op->state = PVFS_OP_NEW;
	op->kind = kind;
	op->opcode = opcode;
	op->mount_id = mount_id;
	op->slot = -1;
	op->reply_slot = -1;
	op->up_len = up_len;
	op->resp_max = resp_max;
	INIT_LIST_HEAD(&op->queue_link);
	INIT_HLIST_NODE(&op->sent_link);
	init_completion(&op->done);

	spin_lock(&pvfs_chan.lock);
	op->tag = pvfs_chan.next_tag++;
	spin_unlock(&pvfs_chan.lock);

	op->up->magic = PVFSD_DEV_MAGIC;
	op->up->version = PVFSD_DEV_MAJOR;
	op->up->op = opcode;
	op->up->tag = op->tag;
	op->up->length = up_len;
	op->up->status = 0;
	return op;
}

void pvfs_op_get(struct pvfs_op *op)
{
	refcount_inc(&op->ref);
}

/* ---- reply slots ---- */

/*
 * Ops that change something: the servers' reply cache knows them by the
 * mount's client_id, a reply slot and the tag, so that a replay to a new
 * daemon (or the daemon's own retry) gets the first result instead of
 * running again.
 */
static bool pvfs_op_changes(u16 opcode)
{
	switch (opcode) {
	case PVFSD_OP_SETATTR:
	case PVFSD_OP_CREATE:
	case PVFSD_OP_MKDIR:
	case PVFSD_OP_MKNOD:
	case PVFSD_OP_SYMLINK:
	case PVFSD_OP_LINK:
	case PVFSD_OP_UNLINK:
	case PVFSD_OP_RMDIR:
	case PVFSD_OP_RENAME:
	case PVFSD_OP_XATTR_SET:
	case PVFSD_OP_XATTR_REMOVE:
	case PVFSD_OP_FSYNC:
		return true;
	default:
		return false;
	}
}

/*
 * True when @op got a reply slot, or waiting is pointless (*err set).  The
 * op takes a new tag with it, under the same lock: the tags of one slot's
 * ops grow, as the reply cache wants of their xids.
 */
static bool pvfs_try_take_reply_slot(struct pvfs_op *op, int *err)
{
	struct pvfs_sb_info *sbi = op->sbi;
	struct pvfsd_req_common *common = pvfs_op_req(op);
	unsigned long bit;
	bool stop = false;

	spin_lock(&pvfs_chan.lock);
	if (sbi->failed) {
		*err = sbi->fail_err;
		stop = true;
	} else {
		bit = find_first_zero_bit(sbi->reply_map, PVFSD_REPLY_SLOTS);
		if (bit < PVFSD_REPLY_SLOTS) {
			set_bit(bit, sbi->reply_map);
			op->reply_slot = bit;
			op->tag = pvfs_chan.next_tag++;
			op->up->tag = op->tag;
			common->reply_slot = bit;
			stop = true;
		}
	}
	spin_unlock(&pvfs_chan.lock);
	return stop;
}

static int pvfs_get_reply_slot(struct pvfs_op *op)
{
	struct pvfs_sb_info *sbi = op->sbi;
	int err = 0, ret;

	if (op->reply_slot >= 0 || !pvfs_op_changes(op->opcode))
		return 0;
	if (sbi->opts.intr)
		ret = wait_event_interruptible(sbi->replyq, pvfs_try_take_reply_slot(op, &err));
	else
		ret = wait_event_killable(sbi->replyq, pvfs_try_take_reply_slot(op, &err));
	return ret ? ret : err;
}

/*
 * At the op's last put: the daemon is done with it (answered, or died and
 * the op was not replayed), so the servers may forget its reply.
 */
static void pvfs_put_reply_slot(struct pvfs_op *op)
{
	struct pvfs_sb_info *sbi = NULL;

	spin_lock(&pvfs_chan.lock);
	if (op->reply_slot >= 0) {
		sbi = op->sbi;
		clear_bit(op->reply_slot, sbi->reply_map);
		op->reply_slot = -1;
	}
	spin_unlock(&pvfs_chan.lock);
	if (sbi)
		wake_up(&sbi->replyq);
}

void pvfs_op_put(struct pvfs_op *op)
{
	if (IS_ERR_OR_NULL(op) || !refcount_dec_and_test(&op->ref))
		return;

	if (op->slot >= 0) {
		spin_lock(&pvfs_chan.lock);
		clear_bit(op->slot, pvfs_chan.slot_map);
		spin_unlock(&pvfs_chan.lock);
		wake_up(&pvfs_chan.slotq);
	}
	pvfs_put_reply_slot(op);
	kvfree(op->down);
	kvfree(op->up);
	kfree(op);
}

static void pvfs_fill_common(struct pvfsd_req_common *common, u64 mount_id)
{
	const struct cred *cred = current_cred();
	const struct group_info *groups = cred->group_info;
	unsigned int i, n = 0;

	common->mount_id = mount_id;
	common->fsuid = from_kuid_munged(&init_user_ns, cred->fsuid);
	common->fsgid = from_kgid_munged(&init_user_ns, cred->fsgid);
	if (groups)
		n = min_t(unsigned int, groups->ngroups, PVFSD_MAX_GROUPS);
	for (i = 0; i < n; i++)
		common->groups[i] = from_kgid_munged(&init_user_ns, groups->gid[i]);
	common->ngroups = n;
	common->reply_slot = PVFSD_NO_SLOT;
}

struct pvfs_op *pvfs_op_new(struct pvfs_sb_info *sbi, enum pvfsd_op opcode, size_t req_len,
			    size_t resp_max)
{
	struct pvfs_op *op;

	if (!sbi || req_len < sizeof(struct pvfsd_req_common) || opcode == PVFSD_OP_HELLO ||
	    opcode == PVFSD_OP_CANCEL || opcode >= PVFSD_OP_COUNT)
		return ERR_PTR(-EINVAL);

	op = pvfs_op_alloc(PVFS_KIND_CALL, opcode, sbi->mount_id, req_len, resp_max, GFP_KERNEL);
	if (IS_ERR(op))
		return op;
	op->sbi = sbi;
	pvfs_fill_common(pvfs_op_req(op), sbi->mount_id);
	return op;
}

void *pvfs_op_req(struct pvfs_op *op)
{
	return op->up + 1;
}

const void *pvfs_op_resp(const struct pvfs_op *op)
{
	return op->down;
}

size_t pvfs_op_resp_len(const struct pvfs_op *op)
{
	return op->down_len;
}

/* ---- running ---- */

/* With the lock held: put @op at the end of the queue; the chan's ref is taken. */
static void pvfs_queue_locked(struct pvfs_op *op)
{
	op->state = PVFS_OP_QUEUED;
	list_add_tail(&op->queue_link, &pvfs_chan.queue);
}

static struct pvfs_op *pvfs_make_cancel(u64 target_tag)
{
	struct pvfs_op *cancel;
	struct pvfsd_cancel_req *body;

	cancel = pvfs_op_alloc(PVFS_KIND_CANCEL, PVFSD_OP_CANCEL, 0, sizeof(*body), 0, GFP_KERNEL);
	if (IS_ERR(cancel))
		return NULL;
	body = pvfs_op_req(cancel);
	body->target_tag = target_tag;
	return cancel;
}

int pvfs_op_start(struct pvfs_op *op)
{
	struct pvfs_sb_info *sbi = op->sbi;
	int err;

	if (op->kind != PVFS_KIND_CALL || op->state != PVFS_OP_NEW)
		return -EINVAL;
	err = pvfs_get_reply_slot(op);
	if (err)
		return err;

	spin_lock(&pvfs_chan.lock);
	if (sbi->failed) {
		spin_unlock(&pvfs_chan.lock);
		return sbi->fail_err;
	}
	pvfs_op_get(op); /* the channel's reference */
	pvfs_queue_locked(op);
	spin_unlock(&pvfs_chan.lock);
	wake_up(&pvfs_chan.readq);
	return 0;
}

int pvfs_op_start_async(struct pvfs_op *op, void (*end)(struct pvfs_op *op), void *data)
{
	op->end = end;
	op->end_data = data;
	return pvfs_op_start(op);
}

u64 pvfs_op_tag(const struct pvfs_op *op)
{
	return op->tag;
}

int pvfs_op_status(const struct pvfs_op *op)
{
	return op->status;
}

void *pvfs_op_end_data(const struct pvfs_op *op)
{
	return op->end_data;
}

static void pvfs_op_end_work(struct work_struct *work)
{
	struct pvfs_op *op = container_of(work, struct pvfs_op, end_work);

	op->end(op);
}

int pvfs_op_init(void)
{
	pvfs_end_wq = alloc_workqueue("pvfs_end", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	return pvfs_end_wq ? 0 : -ENOMEM;
}

void pvfs_op_exit(void)
{
	destroy_workqueue(pvfs_end_wq);
}

int pvfs_op_run(struct pvfs_op *op)
{
	int err = pvfs_op_start(op);

	return err ? err : pvfs_op_wait(op);
}

int pvfs_op_wait(struct pvfs_op *op)
{
	struct pvfs_sb_info *sbi = op->sbi;
	struct pvfs_op *cancel;
	int err;

	if (op->kind != PVFS_KIND_CALL || op->state == PVFS_OP_NEW)
		return -EINVAL;

	if (sbi->opts.intr)
		err = wait_for_completion_interruptible(&op->done);
	else
		err = wait_for_completion_killable(&op->done);
	if (!err)
		return op->status;

	cancel = pvfs_make_cancel(op->tag);
	spin_lock(&pvfs_chan.lock);
	switch (op->state) {
	case PVFS_OP_QUEUED:
		/* the daemon never saw it: forget it, the caller may retry */
		list_del_init(&op->queue_link);
		op->state = PVFS_OP_DONE;
		spin_unlock(&pvfs_chan.lock);
		pvfs_op_put(op);
		pvfs_op_put(cancel);
		return -ERESTARTSYS;
	case PVFS_OP_SENT:
		/*
		 * the daemon works on it: keep the op (and its slot) until it
		 * answers or dies, and ask it to stop
		 */
		op->state = PVFS_OP_ABANDONED;
		if (cancel && pvfs_chan.hello_done) {
			pvfs_queue_locked(cancel);
			cancel = NULL;
		}
		spin_unlock(&pvfs_chan.lock);
		pvfs_op_put(cancel);
		wake_up(&pvfs_chan.readq);
		return -EINTR;
	default:
		/* answered while we were being interrupted */
		spin_unlock(&pvfs_chan.lock);
		pvfs_op_put(cancel);
		return op->status;
	}
}

/* ---- answers ---- */

struct pvfs_op *pvfs_chan_find_sent_locked(u64 tag)
{
	struct pvfs_op *op;

	hash_for_each_possible(pvfs_chan.sent, op, sent_link, tag)
		if (op->tag == tag)
			return op;
	return NULL;
}

static struct pvfs_sb_info *pvfs_find_mount_locked(u64 mount_id)
{
	struct pvfs_sb_info *sbi;

	list_for_each_entry(sbi, &pvfs_chan.mounts, mount_link)
		if (sbi->mount_id == mount_id)
			return sbi;
	return NULL;
}

static void pvfs_mount_attached_locked(u64 mount_id)
{
	struct pvfs_sb_info *sbi = pvfs_find_mount_locked(mount_id);

	if (!sbi)
		return;
	sbi->attached = true;
	if (sbi->failed)
		pr_info("%s: daemon attached again; the mount works again\n", sbi->source);
	sbi->failed = false;
	cancel_delayed_work(&sbi->grace_work);
}

void pvfs_chan_answer(struct pvfs_op *op, int status, void *down, size_t down_len)
{
	bool drop = false, end = false;

	spin_lock(&pvfs_chan.lock);
	if (op->state != PVFS_OP_SENT && op->state != PVFS_OP_ABANDONED) {
		/* someone answered or failed it meanwhile */
		spin_unlock(&pvfs_chan.lock);
		kvfree(down);
		return;
	}
	hash_del(&op->sent_link);
	if (op->opcode == PVFSD_OP_ATTACH && status == 0)
		pvfs_mount_attached_locked(op->mount_id);
	/* -ECANCELED: the mount went while the daemon was still trying */
	if (op->kind == PVFS_KIND_ATTACH && status != 0 && status != -ECANCELED)
		pr_warn("mount %llu: the new daemon could not attach it: %d\n", op->mount_id,
			status);

	if (op->state == PVFS_OP_SENT && op->kind == PVFS_KIND_CALL) {
		op->down = down;
		op->down_len = down_len;
		op->status = status;
		down = NULL;
		op->state = PVFS_OP_DONE;
		if (op->end)
			end = true;
		else
			complete(&op->done);
	} else {
		op->state = PVFS_OP_DONE;
	}
	drop = true;
	spin_unlock(&pvfs_chan.lock);
	kvfree(down);
	if (end)
		op->end(op); /* the caller's reference goes with it */
	if (drop)
		pvfs_op_put(op); /* the channel's reference */
}

/* With the lock held: @op fails with @status now; its caller returns. */
static void pvfs_fail_locked(struct pvfs_op *op, int status, struct list_head *to_put)
{
	op->status = status;
	if (op->state == PVFS_OP_QUEUED) {
		list_del_init(&op->queue_link);
		op->state = PVFS_OP_DONE;
		list_add_tail(&op->queue_link, to_put);
	} else if (op->state == PVFS_OP_SENT) {
		/* the daemon may still fill its slot: keep it until it answers */
		op->state = PVFS_OP_ABANDONED;
	}
	if (op->end) {
		/* not under the lock: the end puts the op */
		INIT_WORK(&op->end_work, pvfs_op_end_work);
		queue_work(pvfs_end_wq, &op->end_work);
	} else {
		complete(&op->done);
	}
}

static void pvfs_put_list(struct list_head *list)
{
	struct pvfs_op *op, *next;

	list_for_each_entry_safe(op, next, list, queue_link) {
		list_del_init(&op->queue_link);
		pvfs_op_put(op);
	}
}

/* Fails every pending op of @sbi with @err and every later one too. */
static void pvfs_fail_mount(struct pvfs_sb_info *sbi, int err)
{
	struct pvfs_op *op, *next;
	struct hlist_node *tmp;
	LIST_HEAD(to_put);
	unsigned int bkt;

	spin_lock(&pvfs_chan.lock);
	sbi->failed = true;
	sbi->fail_err = err;
	list_for_each_entry_safe(op, next, &pvfs_chan.queue, queue_link)
		if (op->kind == PVFS_KIND_CALL && op->sbi == sbi)
			pvfs_fail_locked(op, err, &to_put);
	hash_for_each_safe(pvfs_chan.sent, bkt, tmp, op, sent_link)
		if (op->kind == PVFS_KIND_CALL && op->sbi == sbi && op->state == PVFS_OP_SENT)
			pvfs_fail_locked(op, err, &to_put);
	spin_unlock(&pvfs_chan.lock);
	pvfs_put_list(&to_put);
	wake_up(&pvfs_chan.slotq);
	wake_up(&sbi->replyq);
}

/* How long a mount's ops wait for a daemon before the grace work runs. */
static unsigned long pvfs_grace_jiffies(const struct pvfs_sb_info *sbi)
{
	unsigned long seconds = sbi->opts.timeo;

	if (sbi->opts.soft)
		seconds *= sbi->opts.retrans + 1;
	return seconds * HZ;
}

static void pvfs_grace_expired(struct work_struct *work)
{
	struct pvfs_sb_info *sbi =
		container_of(to_delayed_work(work), struct pvfs_sb_info, grace_work);
	bool attached;

	spin_lock(&pvfs_chan.lock);
	attached = sbi->attached;
	spin_unlock(&pvfs_chan.lock);
	if (attached)
		return;
	if (!sbi->opts.soft) {
		pr_warn("%s: no pvfsd took over within %u s; requests wait for one (hard mount)\n",
			sbi->source, sbi->opts.timeo);
		return;
	}
	pr_warn("%s: no pvfsd took over within %lu s; requests fail with %s until one does\n",
		sbi->source, pvfs_grace_jiffies(sbi) / HZ, sbi->opts.softerr ? "ETIMEDOUT" : "EIO");
	pvfs_fail_mount(sbi, sbi->opts.softerr ? -ETIMEDOUT : -EIO);
}

/* ---- the daemon comes and goes ---- */

void pvfs_chan_daemon_gone(void)
{
	struct pvfs_op *op, *next;
	struct pvfs_sb_info *sbi;
	struct hlist_node *tmp;
	LIST_HEAD(replay);
	LIST_HEAD(to_put);
	unsigned int bkt, replayed = 0;

	spin_lock(&pvfs_chan.lock);
	pvfs_chan.open = false;
	pvfs_chan.hello_done = false;
	pvfs_chan.hello_to_send = false;

	hash_for_each_safe(pvfs_chan.sent, bkt, tmp, op, sent_link) {
		struct pvfsd_req_common *common = pvfs_op_req(op);

		hash_del(&op->sent_link);
		if (op->kind == PVFS_KIND_CALL && op->state == PVFS_OP_SENT &&
		    op->opcode == PVFSD_OP_OPEN && (common->flags & PVFSD_REQ_RECLAIM)) {
			/*
			 * Not replayed: the next daemon is told the files open
			 * then (open.c), and a replay could follow the CLOSE
			 * of its file (this loop keeps no order) and hold it
			 * for ever.
			 */
			op->status = -ENOTCONN;
			op->state = PVFS_OP_DONE;
			list_add_tail(&op->queue_link, &to_put);
			if (op->end) {
				INIT_WORK(&op->end_work, pvfs_op_end_work);
				queue_work(pvfs_end_wq, &op->end_work);
			} else {
				complete(&op->done);
			}
		} else if (op->kind == PVFS_KIND_CALL && op->state == PVFS_OP_SENT) {
			/*
			 * On ATTACH the flag means a re-attach, which the
			 * daemon retries until the servers answer: a first
			 * mount's must fail instead, or mount(8) hangs.
			 */
			if (op->opcode != PVFSD_OP_ATTACH)
				common->flags |= PVFSD_REQ_REPLAYED;
			op->state = PVFS_OP_QUEUED;
			list_add_tail(&op->queue_link, &replay);
			replayed++;
		} else {
			/* abandoned, or made for the dead daemon alone */
			op->state = PVFS_OP_DONE;
			list_add_tail(&op->queue_link, &to_put);
		}
	}
	list_for_each_entry_safe(op, next, &pvfs_chan.queue, queue_link) {
		if (op->kind == PVFS_KIND_CALL)
			continue;
		list_del(&op->queue_link);
		op->state = PVFS_OP_DONE;
		list_add_tail(&op->queue_link, &to_put);
	}
	list_splice(&replay, &pvfs_chan.queue);

	list_for_each_entry(sbi, &pvfs_chan.mounts, mount_link) {
		sbi->attached = false;
		mod_delayed_work(system_wq, &sbi->grace_work, pvfs_grace_jiffies(sbi));
	}
	spin_unlock(&pvfs_chan.lock);

	pvfs_put_list(&to_put);
	wake_up(&pvfs_chan.slotq);
	if (replayed)
		pr_info("%u request(s) wait for the next daemon\n", replayed);
}

static struct pvfs_op *pvfs_make_attach(struct pvfs_sb_info *sbi, enum pvfs_op_kind kind)
{
	size_t source_len = strlen(sbi->source);
	size_t options_len = strlen(sbi->daemon_options);
	struct pvfsd_attach_req *req;
	struct pvfs_op *op;
	char *tail;

	op = pvfs_op_alloc(kind, PVFSD_OP_ATTACH, sbi->mount_id,
			   sizeof(*req) + source_len + options_len,
			   sizeof(struct pvfsd_attach_resp), GFP_KERNEL);
	if (IS_ERR(op))
		return op;
	req = pvfs_op_req(op);
	pvfs_fill_common(&req->common, sbi->mount_id);
	/* the mount was attached before: the daemon keeps trying */
	req->common.flags |= PVFSD_REQ_REPLAYED;
	req->source_len = source_len;
	req->options_len = options_len;
	req->client_id = sbi->client_id;
	tail = (char *)(req + 1);
	memcpy(tail, sbi->source, source_len);
	memcpy(tail + source_len, sbi->daemon_options, options_len);
	return op;
}

/*
 * Fits @op to the daemon's features before it is sent: one made before
 * this daemon's HELLO may ask for a feature it did not offer.  An op never
 * sent does without (CREATE without CREATE_OPEN: only create; the kernel
 * then opens the file with an OPEN, as when a daemon could not hold it).
 * A replay cannot: the servers' reply cache knows it by its ids and
 * refuses one that differs from the first, so it does not fit (false).
 */
bool pvfs_op_fit_locked(struct pvfs_op *op)
{
	struct pvfsd_create_req *create;

	if (op->kind != PVFS_KIND_CALL || op->opcode != PVFSD_OP_CREATE ||
	    (pvfs_chan.features & PVFSD_FEAT_CREATE_OPEN))
		return true;
	create = pvfs_op_req(op);
	if (!create->open_mode)
		return true;
	if (create->common.flags & PVFSD_REQ_REPLAYED)
		return false;
	create->open_mode = 0;
	return true;
}

void pvfs_chan_daemon_hello(u64 features)
{
	struct pvfs_op *op, *next;
	struct pvfs_sb_info *sbi;
	unsigned int unfit = 0;
	LIST_HEAD(attaches);
	LIST_HEAD(to_put);

	mutex_lock(&pvfs_mounts_mutex);
	/* the list cannot change: adding or removing takes the mutex */
	list_for_each_entry(sbi, &pvfs_chan.mounts, mount_link) {
		op = pvfs_make_attach(sbi, PVFS_KIND_ATTACH);
		if (IS_ERR(op)) {
			pr_warn("%s: no memory to re-attach; it fails at timeo\n", sbi->source);
			continue;
		}
		op->state = PVFS_OP_QUEUED;
		list_add_tail(&op->queue_link, &attaches);
	}
	spin_lock(&pvfs_chan.lock);
	pvfs_chan.features = features;
	pvfs_chan.hello_done = true;
	pvfs_chan.hello_to_send = true;
	list_for_each_entry_safe(op, next, &pvfs_chan.queue, queue_link) {
		if (!pvfs_op_fit_locked(op)) {
			pvfs_fail_locked(op, -EIO, &to_put);
			unfit++;
		}
	}
	/* ATTACHes first, then what the last daemon left */
	list_splice(&attaches, &pvfs_chan.queue);
	spin_unlock(&pvfs_chan.lock);
	pvfs_put_list(&to_put);
	if (unfit)
		pr_warn("%u replayed request(s) need a feature the new daemon lacks: EIO\n", unfit);
	/*
	 * Then the files each mount holds open, which the daemon needs to
	 * know (file.c); they wait in it for their mount's ATTACH.
	 */
	list_for_each_entry(sbi, &pvfs_chan.mounts, mount_link)
		schedule_work(&sbi->reclaim_work);
	mutex_unlock(&pvfs_mounts_mutex);
	wake_up(&pvfs_chan.readq);
}

/* ---- mounts ---- */

int pvfs_mount_register(struct pvfs_sb_info *sbi)
{
	INIT_DELAYED_WORK(&sbi->grace_work, pvfs_grace_expired);
	init_waitqueue_head(&sbi->replyq);
	bitmap_zero(sbi->reply_map, PVFSD_REPLY_SLOTS);
	/* outlives any daemon: a replay reaches the servers under the same id */
	do {
		sbi->client_id = get_random_u64();
	} while (!sbi->client_id);
	mutex_lock(&pvfs_mounts_mutex);
	spin_lock(&pvfs_chan.lock);
	if (!pvfs_chan.hello_done) {
		spin_unlock(&pvfs_chan.lock);
		mutex_unlock(&pvfs_mounts_mutex);
		return -ENOTCONN;
	}
	sbi->mount_id = pvfs_chan.next_mount_id++;
	sbi->failed = false;
	sbi->attached = false;
	sbi->registered = true;
	list_add_tail(&sbi->mount_link, &pvfs_chan.mounts);
	spin_unlock(&pvfs_chan.lock);
	mutex_unlock(&pvfs_mounts_mutex);
	return 0;
}

/*
 * The daemon holds a re-attach of the mount: it retries that until the
 * servers answer, so it must hear of the umount (DETACH) to stop.
 */
static bool pvfs_reattach_sent_locked(u64 mount_id)
{
	struct pvfs_op *op;
	unsigned int bkt;

	hash_for_each(pvfs_chan.sent, bkt, op, sent_link) {
		if (op->kind == PVFS_KIND_ATTACH && op->mount_id == mount_id)
			return true;
	}
	return false;
}

void pvfs_mount_unregister(struct pvfs_sb_info *sbi)
{
	struct pvfs_op *detach = NULL;
	struct pvfsd_req_common *common;
	struct pvfs_op *op, *next;
	struct hlist_node *tmp;
	LIST_HEAD(to_put);
	unsigned int bkt;

	if (!sbi->registered)
		return;

	/* DETACH goes unanswered-for: umount never waits on the daemon */
	detach = pvfs_op_alloc(PVFS_KIND_DETACH, PVFSD_OP_DETACH, sbi->mount_id, sizeof(*common), 0,
			       GFP_KERNEL);
	if (!IS_ERR(detach)) {
		common = pvfs_op_req(detach);
		pvfs_fill_common(common, sbi->mount_id);
	}

	mutex_lock(&pvfs_mounts_mutex);
	spin_lock(&pvfs_chan.lock);
	list_del(&sbi->mount_link);
	sbi->registered = false;
	list_for_each_entry_safe(op, next, &pvfs_chan.queue, queue_link) {
		if (op->kind == PVFS_KIND_ATTACH && op->mount_id == sbi->mount_id) {
			list_del(&op->queue_link);
			op->state = PVFS_OP_DONE;
			list_add_tail(&op->queue_link, &to_put);
		}
	}
	/* abandoned ops outlive the mount: their reply slots go with it */
	hash_for_each_safe(pvfs_chan.sent, bkt, tmp, op, sent_link) {
		if (op->kind == PVFS_KIND_CALL && op->sbi == sbi)
			op->reply_slot = -1;
	}
	if (!IS_ERR(detach) && pvfs_chan.hello_done &&
	    (sbi->attached || pvfs_reattach_sent_locked(sbi->mount_id))) {
		pvfs_queue_locked(detach);
		detach = NULL;
	}
	spin_unlock(&pvfs_chan.lock);
	mutex_unlock(&pvfs_mounts_mutex);

	wake_up(&pvfs_chan.readq);
	cancel_delayed_work_sync(&sbi->grace_work);
	pvfs_put_list(&to_put);
	pvfs_op_put(detach);
}

void pvfs_mount_abort(struct pvfs_sb_info *sbi)
{
	pr_info("%s: forced unmount; pending requests fail with EIO\n", sbi->source);
	pvfs_fail_mount(sbi, -EIO);
}

/* ---- slots ---- */

int pvfs_chan_make_slots(u32 slot_size, u32 slot_count)
{
	unsigned long *map;
	void *area;
	u64 bytes;

	if (pvfs_chan.slots)
		return 0; /* a daemon restarted: it maps the same slots */

	bytes = (u64)slot_size * slot_count;
	while (slot_count > 1 && bytes > ((u64)max_slot_mib << 20)) {
		slot_count /= 2;
		bytes = (u64)slot_size * slot_count;
	}
	if (bytes > ((u64)max_slot_mib << 20)) {
		pr_warn("slots of %u bytes exceed max_slot_mib=%u\n", slot_size, max_slot_mib);
		return -EINVAL;
	}
	area = vmalloc_user(bytes);
	if (!area)
		return -ENOMEM;
	map = bitmap_zalloc(slot_count, GFP_KERNEL);
	if (!map) {
		vfree(area);
		return -ENOMEM;
	}
	spin_lock(&pvfs_chan.lock);
	pvfs_chan.slots = area;
	pvfs_chan.slot_map = map;
	pvfs_chan.slot_size = slot_size;
	pvfs_chan.slot_count = slot_count;
	spin_unlock(&pvfs_chan.lock);
	pr_info("%u data slots of %u KiB\n", slot_count, slot_size >> 10);
	return 0;
}

void pvfs_chan_free_slots(void)
{
	vfree(pvfs_chan.slots);
	bitmap_free(pvfs_chan.slot_map);
	pvfs_chan.slots = NULL;
	pvfs_chan.slot_map = NULL;
	pvfs_chan.slot_count = 0;
	pvfs_chan.slot_size = 0;
}

/* True when @op got a slot, or waiting is pointless (*err set). */
static bool pvfs_try_take_slot(struct pvfs_op *op, int *err)
{
	unsigned long bit;
	bool stop = false;

	spin_lock(&pvfs_chan.lock);
	if (op->sbi->failed) {
		*err = op->sbi->fail_err;
		stop = true;
	} else if (!pvfs_chan.slot_count) {
		*err = -ENOTCONN;
		stop = true;
	} else {
		bit = find_first_zero_bit(pvfs_chan.slot_map, pvfs_chan.slot_count);
		if (bit < pvfs_chan.slot_count) {
			set_bit(bit, pvfs_chan.slot_map);
			op->slot = bit;
			stop = true;
		}
	}
	spin_unlock(&pvfs_chan.lock);
	return stop;
}

int pvfs_op_try_get_slot(struct pvfs_op *op)
{
	int err = 0;

	if (op->slot >= 0)
		return 0;
	if (op->kind != PVFS_KIND_CALL)
		return -EINVAL;
	if (!pvfs_try_take_slot(op, &err))
		return -EAGAIN;
	return err;
}

int pvfs_op_get_slot(struct pvfs_op *op)
{
	int err = 0, ret;

	if (op->slot >= 0)
		return 0;
	if (op->kind != PVFS_KIND_CALL)
		return -EINVAL;
	if (op->sbi->opts.intr)
		ret = wait_event_interruptible(pvfs_chan.slotq, pvfs_try_take_slot(op, &err));
	else
		ret = wait_event_killable(pvfs_chan.slotq, pvfs_try_take_slot(op, &err));
	return ret ? ret : err;
}

unsigned int pvfs_op_slot(const struct pvfs_op *op)
{
	return op->slot;
}

void *pvfs_op_slot_addr(const struct pvfs_op *op)
{
	return (char *)pvfs_chan.slots + (size_t)op->slot * pvfs_chan.slot_size;
}

size_t pvfs_slot_size(void)
{
	return pvfs_chan.slot_size;
}
