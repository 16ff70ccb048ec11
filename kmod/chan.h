/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What op.c (ops, slots, mounts) and dev.c (the device file) share; the
 * rest of the module goes through pvfs.h.
 */
#ifndef PVFS_KMOD_CHAN_H
#define PVFS_KMOD_CHAN_H

#include <linux/completion.h>
#include <linux/hashtable.h>
#include <linux/list.h>
#include <linux/refcount.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "pvfs.h"

enum pvfs_op_state {
	PVFS_OP_NEW,	/* being built by its caller */
	PVFS_OP_QUEUED, /* on pvfs_chan.queue, for the daemon's next read */
	PVFS_OP_SENT,	/* read by the daemon, in pvfs_chan.sent by tag */
	PVFS_OP_DONE,	/* answered or failed; off every list */
	/*
	 * sent, but its caller is gone: in sent until the daemon answers or
	 * dies, holding its slot
	 */
	PVFS_OP_ABANDONED,
};

/* What kind of op it is for the channel. */
enum pvfs_op_kind {
	PVFS_KIND_CALL,	  /* a caller waits in pvfs_op_run */
	PVFS_KIND_ATTACH, /* a replayed ATTACH the channel made itself */
	PVFS_KIND_DETACH, /* fire and forget, sent at kill_sb */
	PVFS_KIND_CANCEL, /* no downcall; dropped once read */
};

struct pvfs_op {
	refcount_t ref;
	enum pvfs_op_state state; /* under pvfs_chan.lock */
	enum pvfs_op_kind kind;
	u16 opcode;
	u64 tag;
	u64 mount_id;
	struct pvfs_sb_info *sbi;    /* KIND_CALL only */
	struct list_head queue_link; /* on pvfs_chan.queue */
	struct hlist_node sent_link; /* in pvfs_chan.sent */
	struct completion done;
	int status;	/* 0 or -errno, valid in DONE */
	int slot;	/* -1: none */
	int reply_slot; /* of sbi's reply slots; -1: none */

	size_t up_len; /* header + body */
	struct pvfsd_msg_hdr *up;
	size_t resp_max; /* downcall body bytes accepted */
	void *down;	 /* the downcall body, kvmalloc'd */
	size_t down_len;

	/* pvfs_op_start_async: called once when the op ends, instead of done */
	void (*end)(struct pvfs_op *op);
	void *end_data;
	struct work_struct end_work; /* runs end when the op fails */
};

struct pvfs_chan {
	spinlock_t lock; /* guards the ops, the queue, the hash, the slot map: op.c says all */
	struct list_head queue;	    /* QUEUED ops, oldest first */
	DECLARE_HASHTABLE(sent, 8); /* SENT and ABANDONED ops by tag */
	wait_queue_head_t readq;    /* the daemon's read() and poll() */
	bool open;		    /* a daemon holds the device */
	bool hello_done;	    /* ... and said HELLO */
	bool hello_to_send;	    /* the HELLO answer is the next read */
	/*
	 * PVFSD_FEAT_* both this module and the daemon offered; the last
	 * daemon's until the next one's HELLO.
	 */
	u64 features;
	u64 next_tag;
	struct list_head mounts; /* registered pvfs_sb_info */
	u64 next_mount_id;

	/* the data slots: made at the first HELLO, kept until unload */
	void *slots;
	u32 slot_size;
	u32 slot_count;
	unsigned long *slot_map; /* set bit: taken */
	wait_queue_head_t slotq;
};

extern struct pvfs_chan pvfs_chan;

/* op.c, for dev.c; "locked" ones want pvfs_chan.lock held */
void pvfs_op_get(struct pvfs_op *op);
struct pvfs_op *pvfs_chan_find_sent_locked(u64 tag);
void pvfs_chan_daemon_gone(void);
void pvfs_chan_daemon_hello(u64 features);
bool pvfs_op_fit_locked(struct pvfs_op *op);
int pvfs_chan_make_slots(u32 slot_size, u32 slot_count);
void pvfs_chan_free_slots(void);
/* Completes @op with the daemon's answer (@down is taken over). */
void pvfs_chan_answer(struct pvfs_op *op, int status, void *down, size_t down_len);

#endif /* PVFS_KMOD_CHAN_H */
