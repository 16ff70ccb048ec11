// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/pvfsd: the channel between pvfs.ko and the client daemon.
 *
 * Exactly one daemon may hold the device open: a second opener would
 * split upcalls between two daemons that know nothing of each other.
 * Opening requires CAP_SYS_ADMIN on top of the 0600 mode, because the
 * opener answers file system requests on behalf of every local user.
 *
 * The daemon writes HELLO first, then read()s one upcall per call and
 * write()s one downcall per call; it maps the data slots with mmap().
 * Every downcall is checked completely before it touches the op it
 * answers: anything malformed is refused with EINVAL and logged, and the
 * op stays pending.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitops.h>
#include <linux/capability.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>

#include "chan.h"

#define PVFS_DEV_OPEN_BIT 0

static unsigned long pvfs_dev_state;

/* Per open file: whether this daemon said HELLO. */
struct pvfs_dev_file {
	bool hello;
};

bool pvfs_dev_daemon_attached(void)
{
	bool attached;

	spin_lock(&pvfs_chan.lock);
	attached = pvfs_chan.hello_done;
	spin_unlock(&pvfs_chan.lock);
	return attached;
}

static int pvfs_dev_open(struct inode *inode, struct file *file)
{
	struct pvfs_dev_file *df;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;

	df = kzalloc(sizeof(*df), GFP_KERNEL);
	if (!df)
		return -ENOMEM;

	if (test_and_set_bit_lock(PVFS_DEV_OPEN_BIT, &pvfs_dev_state)) {
		kfree(df);
		return -EBUSY;
	}
	spin_lock(&pvfs_chan.lock);
	pvfs_chan.open = true;
	spin_unlock(&pvfs_chan.lock);
	file->private_data = df;

	pr_info("daemon attached (pid %d)\n", task_tgid_nr(current));
	return nonseekable_open(inode, file);
}

static int pvfs_dev_release(struct inode *inode, struct file *file)
{
	pvfs_chan_daemon_gone();
	kfree(file->private_data);
	pr_info("daemon detached\n");
	clear_bit_unlock(PVFS_DEV_OPEN_BIT, &pvfs_dev_state);
	return 0;
}

/* ---- read: upcalls ---- */

static bool pvfs_dev_readable(void)
{
	bool readable;

	spin_lock(&pvfs_chan.lock);
	readable = pvfs_chan.hello_to_send || !list_empty(&pvfs_chan.queue);
	spin_unlock(&pvfs_chan.lock);
	return readable;
}

static ssize_t pvfs_dev_read_hello(char __user *buf, size_t count)
{
	struct {
		struct pvfsd_msg_hdr hdr;
		struct pvfsd_hello hello;
	} msg = {};

	msg.hdr.magic = PVFSD_DEV_MAGIC;
	msg.hdr.version = PVFSD_DEV_VERSION;
	msg.hdr.op = PVFSD_OP_HELLO;
	msg.hdr.length = sizeof(msg);
	msg.hello.slot_size = pvfs_chan.slot_size;
	msg.hello.slot_count = pvfs_chan.slot_count;
	msg.hello.max_inflight = 1024;
	if (copy_to_user(buf, &msg, sizeof(msg)))
		return -EFAULT;
	return sizeof(msg);
}

/* Takes the next message off the queue (hello: the HELLO answer). */
static struct pvfs_op *pvfs_dev_next(size_t count, bool *hello, int *err)
{
	struct pvfs_op *op;

	*hello = false;
	*err = 0;
	if (pvfs_chan.hello_to_send) {
		if (count < sizeof(struct pvfsd_msg_hdr) + sizeof(struct pvfsd_hello)) {
			*err = -EINVAL;
			return NULL;
		}
		pvfs_chan.hello_to_send = false;
		*hello = true;
		return NULL;
	}
	op = list_first_entry_or_null(&pvfs_chan.queue, struct pvfs_op, queue_link);
	if (!op)
		return NULL;
	if (count < op->up_len) {
		*err = -EINVAL; /* the message stays for a bigger read */
		return NULL;
	}
	list_del_init(&op->queue_link);
	if (op->kind == PVFS_KIND_CANCEL) {
		op->state = PVFS_OP_DONE; /* no answer comes */
	} else {
		op->state = PVFS_OP_SENT;
		hash_add(pvfs_chan.sent, &op->sent_link, op->tag);
		pvfs_op_get(op); /* ours, while copying */
	}
	return op;
}

static ssize_t pvfs_dev_read(struct file *file, char __user *buf, size_t count, loff_t *ppos)
{
	struct pvfs_dev_file *df = file->private_data;
	struct pvfs_op *op;
	bool hello;
	int err;

	if (!df->hello)
		return -EPROTO; /* write HELLO first */

	for (;;) {
		spin_lock(&pvfs_chan.lock);
		op = pvfs_dev_next(count, &hello, &err);
		spin_unlock(&pvfs_chan.lock);
		if (err)
			return err;
		if (hello)
			return pvfs_dev_read_hello(buf, count);
		if (op)
			break;
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		err = wait_event_interruptible(pvfs_chan.readq, pvfs_dev_readable());
		if (err)
			return err;
	}

	if (copy_to_user(buf, op->up, op->up_len)) {
		/* put it back as if never read */
		spin_lock(&pvfs_chan.lock);
		if (op->state == PVFS_OP_SENT) {
			hash_del(&op->sent_link);
			op->state = PVFS_OP_QUEUED;
			list_add(&op->queue_link, &pvfs_chan.queue);
		} else if (op->state == PVFS_OP_ABANDONED) {
			hash_del(&op->sent_link);
			op->state = PVFS_OP_DONE;
			pvfs_op_put(op); /* cannot be the last: we hold one */
		}
		spin_unlock(&pvfs_chan.lock);
		pvfs_op_put(op);
		return -EFAULT;
	}
	err = op->up_len;
	pvfs_op_put(op);
	return err;
}

/* ---- write: HELLO and downcalls ---- */

#define pvfs_bad(fmt, ...)                                                                         \
	({                                                                                         \
		pr_warn_ratelimited("refused a message from pvfsd: " fmt "\n", ##__VA_ARGS__);     \
		-EINVAL;                                                                           \
	})

static ssize_t pvfs_dev_hello(struct pvfs_dev_file *df, const void *msg, size_t len)
{
	const struct pvfsd_hello *hello = msg + sizeof(struct pvfsd_msg_hdr);
	int err;

	if (df->hello)
		return pvfs_bad("a second HELLO");
	if (((const struct pvfsd_msg_hdr *)msg)->tag != 0)
		return pvfs_bad("HELLO with a tag");
	if (len != sizeof(struct pvfsd_msg_hdr) + sizeof(*hello))
		return pvfs_bad("HELLO of %zu bytes", len);
	if (hello->slot_size < (64u << 10) || hello->slot_size > (16u << 20) ||
	    !is_power_of_2(hello->slot_size))
		return pvfs_bad("slot size %u", hello->slot_size);
	if (hello->slot_count < 1 || hello->slot_count > 1024)
		return pvfs_bad("slot count %u", hello->slot_count);
	if (hello->max_inflight < 1 || hello->pad)
		return pvfs_bad("HELLO max_inflight %u", hello->max_inflight);

	err = pvfs_chan_make_slots(hello->slot_size, hello->slot_count);
	if (err)
		return err;
	df->hello = true;
	pvfs_chan_daemon_hello();
	return len;
}

static bool pvfs_time_ok(const struct pvfsd_time *t)
{
	return t->nsec < 1000000000u && t->pad == 0;
}

static int pvfs_check_attr(const struct pvfsd_attr *a)
{
	if (a->handle == 0)
		return pvfs_bad("attributes of handle 0");
	if (a->type < PVFSD_TYPE_REGULAR || a->type > PVFSD_TYPE_BLOCK_DEVICE)
		return pvfs_bad("object type %u", a->type);
	if (a->mode & ~07777u)
		return pvfs_bad("mode %o", a->mode);
	if (!pvfs_time_ok(&a->atime) || !pvfs_time_ok(&a->mtime) || !pvfs_time_ok(&a->ctime))
		return pvfs_bad("a time with nanoseconds out of range");
	return 0;
}

/* A name from the daemon: 1..255 bytes, no NUL, no '/'. */
static int pvfs_check_name(const char *name, u32 len)
{
	if (len < 1 || len > PVFSD_MAX_NAME)
		return pvfs_bad("a name of %u bytes", len);
	if (memchr(name, '\0', len) || memchr(name, '/', len))
		return pvfs_bad("a name with NUL or '/'");
	return 0;
}

static int pvfs_check_readdir(const struct pvfs_op *op, const void *body, size_t len)
{
	const struct pvfsd_readdir_req *req = (const void *)(op->up + 1);
	const struct pvfsd_readdir_resp *resp = body;
	size_t pos = sizeof(*resp);
	u32 i;
	int err;

	if (len < sizeof(*resp))
		return pvfs_bad("READDIR answer of %zu bytes", len);
	if (resp->eof > 1)
		return pvfs_bad("READDIR eof %u", resp->eof);
	if (len - sizeof(*resp) > req->max_bytes)
		return pvfs_bad("READDIR entries beyond the %u bytes asked", req->max_bytes);
	for (i = 0; i < resp->count; i++) {
		const struct pvfsd_dirent *de = body + pos;
		size_t step;

		if (len - pos < sizeof(*de))
			return pvfs_bad("READDIR entry %u truncated", i);
		if (de->handle == 0 || de->cookie == 0)
			return pvfs_bad("READDIR entry %u: handle or cookie 0", i);
		if (de->type < PVFSD_TYPE_REGULAR || de->type > PVFSD_TYPE_BLOCK_DEVICE)
			return pvfs_bad("READDIR entry %u: type %u", i, de->type);
		if (de->name_len < 1 || de->name_len > PVFSD_MAX_NAME)
			return pvfs_bad("READDIR entry %u: name of %u bytes", i, de->name_len);
		step = ALIGN(sizeof(*de) + de->name_len, 8);
		if (len - pos < step)
			return pvfs_bad("READDIR entry %u truncated", i);
		err = pvfs_check_name((const char *)(de + 1), de->name_len);
		if (err)
			return err;
		if (memchr_inv((const char *)(de + 1) + de->name_len, 0,
			       step - sizeof(*de) - de->name_len))
			return pvfs_bad("READDIR entry %u: padding not zero", i);
		pos += step;
	}
	if (pos != len)
		return pvfs_bad("READDIR: %zu bytes after %u entries", len - pos, resp->count);
	return 0;
}

/* Checks a successful downcall's body against what @op asked. */
static int pvfs_check_body(const struct pvfs_op *op, const void *body, size_t len)
{
	const void *req = op->up + 1;
	int err;

	if (len > op->resp_max && op->opcode != PVFSD_OP_READDIR)
		return pvfs_bad("op %u: answer of %zu bytes, at most %zu expected", op->opcode, len,
				op->resp_max);

	switch (op->opcode) {
	case PVFSD_OP_ATTACH: {
		const struct pvfsd_attach_resp *r = body;

		if (len != sizeof(*r))
			return pvfs_bad("ATTACH answer of %zu bytes", len);
		err = pvfs_check_attr(&r->root);
		if (err)
			return err;
		if (r->root.type != PVFSD_TYPE_DIRECTORY)
			return pvfs_bad("ATTACH: the root is no directory");
		if (r->max_name < 1 || r->max_name > PVFSD_MAX_NAME || r->pad)
			return pvfs_bad("ATTACH: max_name %u", r->max_name);
		return 0;
	}
	case PVFSD_OP_LOOKUP:
	case PVFSD_OP_GETATTR:
	case PVFSD_OP_SETATTR:
	case PVFSD_OP_MKDIR:
	case PVFSD_OP_MKNOD:
	case PVFSD_OP_SYMLINK:
	case PVFSD_OP_LINK:
		if (len != sizeof(struct pvfsd_attr_resp))
			return pvfs_bad("op %u: attributes of %zu bytes", op->opcode, len);
		return pvfs_check_attr(body);
	case PVFSD_OP_CREATE: {
		const struct pvfsd_create_resp *r = body;

		if (len != sizeof(*r))
			return pvfs_bad("CREATE answer of %zu bytes", len);
		if (r->created > 1 || r->pad)
			return pvfs_bad("CREATE created=%u", r->created);
		err = pvfs_check_attr(&r->attr);
		if (err)
			return err;
		if (r->attr.type != PVFSD_TYPE_REGULAR)
			return pvfs_bad("CREATE: not a regular file");
		return 0;
	}
	case PVFSD_OP_DETACH:
	case PVFSD_OP_UNLINK:
	case PVFSD_OP_RMDIR:
	case PVFSD_OP_RENAME:
	case PVFSD_OP_FSYNC:
	case PVFSD_OP_XATTR_SET:
	case PVFSD_OP_XATTR_REMOVE:
		if (len)
			return pvfs_bad("op %u: %zu bytes where none belong", op->opcode, len);
		return 0;
	case PVFSD_OP_READLINK: {
		const struct pvfsd_readlink_resp *r = body;

		if (len < sizeof(*r) || r->pad)
			return pvfs_bad("READLINK answer of %zu bytes", len);
		if (r->target_len < 1 || r->target_len > PVFSD_MAX_SYMLINK ||
		    len != sizeof(*r) + r->target_len)
			return pvfs_bad("READLINK target of %u bytes in %zu", r->target_len, len);
		if (memchr(r + 1, '\0', r->target_len))
			return pvfs_bad("READLINK target with NUL");
		return 0;
	}
	case PVFSD_OP_READDIR:
		return pvfs_check_readdir(op, body, len);
	case PVFSD_OP_READ:
	case PVFSD_OP_WRITE: {
		const struct pvfsd_io_req *q = req;
		const struct pvfsd_io_resp *r = body;

		if (len != sizeof(*r) || r->pad)
			return pvfs_bad("I/O answer of %zu bytes", len);
		if (r->done > q->length)
			return pvfs_bad("I/O of %u bytes done, %u asked", r->done, q->length);
		return 0;
	}
	case PVFSD_OP_STATFS: {
		const struct pvfsd_statfs_resp *r = body;

		if (len != sizeof(*r))
			return pvfs_bad("STATFS answer of %zu bytes", len);
		if (r->bsize == 0 || r->namelen == 0 || r->namelen > PVFSD_MAX_NAME ||
		    r->bfree > r->blocks || r->bavail > r->blocks || r->ffree > r->files)
			return pvfs_bad("STATFS figures inconsistent");
		return 0;
	}
	case PVFSD_OP_XATTR_GET:
	case PVFSD_OP_XATTR_LIST: {
		const struct pvfsd_xattr_req *q = req;
		const struct pvfsd_xattr_resp *r = body;

		if (len < sizeof(*r) || r->pad)
			return pvfs_bad("xattr answer of %zu bytes", len);
		if (r->size > PVFSD_MAX_XATTR_VALUE)
			return pvfs_bad("xattr of %u bytes", r->size);
		if (q->value_len == 0) {
			if (len != sizeof(*r))
				return pvfs_bad("xattr value where only its size was asked");
			return 0;
		}
		if (r->size > q->value_len || len != sizeof(*r) + r->size)
			return pvfs_bad("xattr of %u bytes in %zu (room %u)", r->size, len,
					q->value_len);
		return 0;
	}
	default:
		return pvfs_bad("an answer to op %u", op->opcode);
	}
}

static ssize_t pvfs_dev_downcall(const void *msg, size_t len)
{
	const struct pvfsd_msg_hdr *hdr = msg;
	const void *body = hdr + 1;
	size_t body_len = len - sizeof(*hdr);
	struct pvfs_op *op;
	void *down = NULL;
	int err;

	if (hdr->status > 0 || hdr->status < -4095)
		return pvfs_bad("status %d", hdr->status);
	if (hdr->status != 0 && body_len)
		return pvfs_bad("status %d with a body", hdr->status);

	spin_lock(&pvfs_chan.lock);
	op = pvfs_chan_find_sent_locked(hdr->tag);
	if (op)
		pvfs_op_get(op);
	spin_unlock(&pvfs_chan.lock);
	if (!op)
		return pvfs_bad("no request has tag %llu", hdr->tag);
	if (op->opcode != hdr->op) {
		err = pvfs_bad("op %u answers tag %llu of op %u", hdr->op, hdr->tag, op->opcode);
		goto out;
	}
	if (hdr->status == 0) {
		err = pvfs_check_body(op, body, body_len);
		if (err)
			goto out;
	}
	if (body_len) {
		down = kvmalloc(body_len, GFP_KERNEL);
		if (!down) {
			err = -ENOMEM;
			goto out;
		}
		memcpy(down, body, body_len);
	}
	pvfs_chan_answer(op, hdr->status, down, body_len);
	err = len;
out:
	pvfs_op_put(op);
	return err;
}

static ssize_t pvfs_dev_write(struct file *file, const char __user *buf, size_t count, loff_t *ppos)
{
	struct pvfs_dev_file *df = file->private_data;
	const struct pvfsd_msg_hdr *hdr;
	void *msg;
	ssize_t ret;

	if (count < sizeof(*hdr) || count > PVFSD_DEV_MAX_MSG)
		return pvfs_bad("a write of %zu bytes", count);
	msg = kvmalloc(count, GFP_KERNEL);
	if (!msg)
		return -ENOMEM;
	if (copy_from_user(msg, buf, count)) {
		kvfree(msg);
		return -EFAULT;
	}
	hdr = msg;
	if (hdr->magic != PVFSD_DEV_MAGIC) {
		ret = pvfs_bad("magic %#x", hdr->magic);
	} else if (hdr->version != PVFSD_DEV_VERSION) {
		pr_warn_ratelimited(
			"pvfsd speaks channel version %u, this module %u: upgrade the older one\n",
			hdr->version, PVFSD_DEV_VERSION);
		ret = -EPROTO;
	} else if (hdr->length != count) {
		ret = pvfs_bad("header says %u bytes, write has %zu", hdr->length, count);
	} else if (hdr->op == PVFSD_OP_HELLO) {
		ret = pvfs_dev_hello(df, msg, count);
	} else if (!df->hello) {
		ret = pvfs_bad("op %u before HELLO", hdr->op);
	} else {
		ret = pvfs_dev_downcall(msg, count);
	}
	kvfree(msg);
	return ret;
}

static __poll_t pvfs_dev_poll(struct file *file, poll_table *wait)
{
	__poll_t mask = EPOLLOUT | EPOLLWRNORM;

	poll_wait(file, &pvfs_chan.readq, wait);
	if (pvfs_dev_readable())
		mask |= EPOLLIN | EPOLLRDNORM;
	return mask;
}

/* The data slots, whole, at offset 0. */
static int pvfs_dev_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct pvfs_dev_file *df = file->private_data;
	size_t bytes = (size_t)pvfs_chan.slot_size * pvfs_chan.slot_count;

	if (!df->hello || !pvfs_chan.slots)
		return -ENXIO;
	if (vma->vm_pgoff != 0 || vma->vm_end - vma->vm_start != bytes)
		return -EINVAL;
	pvfs_vm_flags_set(vma, VM_DONTCOPY);
	return remap_vmalloc_range(vma, pvfs_chan.slots, 0);
}

static const struct file_operations pvfs_dev_fops = {
	.owner = THIS_MODULE,
	.open = pvfs_dev_open,
	.release = pvfs_dev_release,
	.read = pvfs_dev_read,
	.write = pvfs_dev_write,
	.poll = pvfs_dev_poll,
	.mmap = pvfs_dev_mmap,
};

static struct miscdevice pvfs_miscdev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = PVFSD_DEV_NAME,
	.fops = &pvfs_dev_fops,
	.mode = 0600,
};

int pvfs_dev_init(void)
{
	int err = misc_register(&pvfs_miscdev);

	if (err)
		pr_err("cannot register /dev/%s: %d\n", PVFSD_DEV_NAME, err);
	return err;
}

void pvfs_dev_exit(void)
{
	misc_deregister(&pvfs_miscdev);
	pvfs_chan_free_slots();
}
