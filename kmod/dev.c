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
 * answers: anything malformed is refused with EINVAL and logged.  A
 * message that names no pending op of its opcode (bad header, unknown tag,
 * another op) leaves every op as it was; a refused answer to a pending op
 * also ends that op with EIO, because the daemon will not answer it again.
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
	msg.hdr.version = PVFSD_DEV_MAJOR;
	msg.hdr.op = PVFSD_OP_HELLO;
	msg.hdr.length = sizeof(msg);
	msg.hello.slot_size = pvfs_chan.slot_size;
	msg.hello.slot_count = pvfs_chan.slot_count;
	msg.hello.minor = PVFSD_DEV_MINOR;
	/* what this module offers: the daemon takes the AND, as we did */
	msg.hello.features = PVFSD_FEATURES;
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
	/* (a replay that does not fit failed at the HELLO) */
	pvfs_op_fit_locked(op);
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

/*
 * The daemon's HELLO.  One of a later minor may be longer: what follows
 * the fields this module knows is that minor's, and ignored.
 */
static ssize_t pvfs_dev_hello(struct pvfs_dev_file *df, const void *msg, size_t len)
{
	const struct pvfsd_hello *hello = msg + sizeof(struct pvfsd_msg_hdr);
	size_t known = sizeof(struct pvfsd_msg_hdr) + sizeof(*hello);
	u64 features;
	int err;

	if (df->hello)
		return pvfs_bad("a second HELLO");
	if (((const struct pvfsd_msg_hdr *)msg)->tag != 0)
		return pvfs_bad("HELLO with a tag");
	if (len < known || (len > known && hello->minor <= PVFSD_DEV_MINOR))
		return pvfs_bad("HELLO of %zu bytes for minor %u", len,
				len < known ? 0 : hello->minor);
	if (hello->slot_size < PVFSD_SLOT_SIZE_MIN || hello->slot_size > PVFSD_SLOT_SIZE_MAX ||
	    !is_power_of_2(hello->slot_size))
		return pvfs_bad("slot size %u", hello->slot_size);
	if (hello->slot_count < PVFSD_SLOTS_MIN || hello->slot_count > PVFSD_SLOTS_MAX)
		return pvfs_bad("slot count %u", hello->slot_count);
	if (hello->pad)
		return pvfs_bad("HELLO pad %u", hello->pad);

	err = pvfs_chan_make_slots(hello->slot_size, hello->slot_count);
	if (err)
		return err;
	features = hello->features & PVFSD_FEATURES;
	pr_info("pvfsd minor %u, features 0x%llx; using 0x%llx (this module: minor %u, 0x%llx)\n",
		hello->minor, hello->features, features, PVFSD_DEV_MINOR, PVFSD_FEATURES);
	pvfs_chan_daemon_hello(features);
	/* only now may a read() take an op: the features are set */
	df->hello = true;
	return len;
}

/*
 * Checks of an answer to a pending op say why they refuse it in a buffer
 * of PVFS_WHY_LEN bytes: the caller logs one line naming the op.
 */
#define PVFS_WHY_LEN 128
#define pvfs_why(why, fmt, ...)                                                                    \
	({                                                                                         \
		snprintf(why, PVFS_WHY_LEN, fmt, ##__VA_ARGS__);                                   \
		-EINVAL;                                                                           \
	})

static const char *const pvfs_op_names[PVFSD_OP_COUNT] = {
	[PVFSD_OP_HELLO] = "HELLO",
	[PVFSD_OP_ATTACH] = "ATTACH",
	[PVFSD_OP_DETACH] = "DETACH",
	[PVFSD_OP_LOOKUP] = "LOOKUP",
	[PVFSD_OP_GETATTR] = "GETATTR",
	[PVFSD_OP_SETATTR] = "SETATTR",
	[PVFSD_OP_CREATE] = "CREATE",
	[PVFSD_OP_MKDIR] = "MKDIR",
	[PVFSD_OP_MKNOD] = "MKNOD",
	[PVFSD_OP_SYMLINK] = "SYMLINK",
	[PVFSD_OP_LINK] = "LINK",
	[PVFSD_OP_UNLINK] = "UNLINK",
	[PVFSD_OP_RMDIR] = "RMDIR",
	[PVFSD_OP_RENAME] = "RENAME",
	[PVFSD_OP_READLINK] = "READLINK",
	[PVFSD_OP_READDIR] = "READDIR",
	[PVFSD_OP_READ] = "READ",
	[PVFSD_OP_WRITE] = "WRITE",
	[PVFSD_OP_FSYNC] = "FSYNC",
	[PVFSD_OP_STATFS] = "STATFS",
	[PVFSD_OP_XATTR_GET] = "XATTR_GET",
	[PVFSD_OP_XATTR_SET] = "XATTR_SET",
	[PVFSD_OP_XATTR_LIST] = "XATTR_LIST",
	[PVFSD_OP_XATTR_REMOVE] = "XATTR_REMOVE",
	[PVFSD_OP_CANCEL] = "CANCEL",
	[PVFSD_OP_OPEN] = "OPEN",
	[PVFSD_OP_CLOSE] = "CLOSE",
};

static const char *pvfs_op_name(u16 opcode)
{
	return opcode < PVFSD_OP_COUNT && pvfs_op_names[opcode] ? pvfs_op_names[opcode] : "?";
}

static bool pvfs_time_ok(const struct pvfsd_time *t)
{
	return t->nsec < 1000000000u && t->pad == 0;
}

static bool pvfs_type_ok(u32 type)
{
	return type >= PVFSD_TYPE_REGULAR && type <= PVFSD_TYPE_BLOCK_DEVICE;
}

static int pvfs_check_attr(const struct pvfsd_attr *a, char *why)
{
	if (a->handle == 0)
		return pvfs_why(why, "attributes of handle 0");
	if (!pvfs_type_ok(a->type))
		return pvfs_why(why, "object type %u", a->type);
	if (a->mode & ~07777u)
		return pvfs_why(why, "mode %o", a->mode);
	/* i_size is signed: 2^63 and above would be a negative size */
	if (a->size > (u64)MAX_LFS_FILESIZE)
		return pvfs_why(why, "size %llu", a->size);
	/* (u32)-1 is no id: make_kuid() would give INVALID_UID */
	if (a->uid == (u32)-1 || a->gid == (u32)-1)
		return pvfs_why(why, "uid %u gid %u", a->uid, a->gid);
	/* new_decode_dev() takes 32 bits; more would be cut silently */
	if ((a->type == PVFSD_TYPE_CHAR_DEVICE || a->type == PVFSD_TYPE_BLOCK_DEVICE) &&
	    a->rdev > U32_MAX)
		return pvfs_why(why, "device number %#llx", a->rdev);
	if (!pvfs_time_ok(&a->atime) || !pvfs_time_ok(&a->mtime) || !pvfs_time_ok(&a->ctime))
		return pvfs_why(why, "a time with nanoseconds out of range");
	return 0;
}

/*
 * The object an answer describes must be the one its request named (GETATTR,
 * SETATTR, LINK) or of the kind it made; a name never resolves to the
 * directory it is in (the VFS resolves "." and ".." itself).
 */
static int pvfs_check_object(const struct pvfs_op *op, const struct pvfsd_attr *a, char *why)
{
	const void *req = op->up + 1;
	u64 want = 0, parent = 0;
	u32 type = 0;

	switch (op->opcode) {
	case PVFSD_OP_GETATTR:
		want = ((const struct pvfsd_handle_req *)req)->handle;
		break;
	case PVFSD_OP_OPEN:
		want = ((const struct pvfsd_open_req *)req)->handle;
		type = PVFSD_TYPE_REGULAR;
		break;
	case PVFSD_OP_SETATTR:
		want = ((const struct pvfsd_setattr_req *)req)->handle;
		break;
	case PVFSD_OP_LINK:
		want = ((const struct pvfsd_link_req *)req)->target;
		if (a->type == PVFSD_TYPE_DIRECTORY)
			return pvfs_why(why, "a hard link to a directory");
		break;
	case PVFSD_OP_LOOKUP:
		parent = ((const struct pvfsd_name_req *)req)->parent;
		break;
	case PVFSD_OP_CREATE:
		parent = ((const struct pvfsd_create_req *)req)->parent;
		type = PVFSD_TYPE_REGULAR;
		break;
	case PVFSD_OP_MKDIR:
	case PVFSD_OP_MKNOD:
		parent = ((const struct pvfsd_mknod_req *)req)->parent;
		type = ((const struct pvfsd_mknod_req *)req)->type;
		break;
	case PVFSD_OP_SYMLINK:
		parent = ((const struct pvfsd_symlink_req *)req)->parent;
		type = PVFSD_TYPE_SYMLINK;
		break;
	}
	if (want && a->handle != want)
		return pvfs_why(why, "handle %#llx where %#llx was asked", a->handle, want);
	if (parent && a->handle == parent)
		return pvfs_why(why, "handle %#llx is the directory itself", a->handle);
	if (type && a->type != type)
		return pvfs_why(why, "a %s where a %s was asked", pvfs_type_name(a->type),
				pvfs_type_name(type));
	return 0;
}

/* A name from the daemon: 1..255 bytes, no NUL, no '/'. */
static int pvfs_check_name(const char *name, u32 len, char *why)
{
	if (len < 1 || len > PVFSD_MAX_NAME)
		return pvfs_why(why, "a name of %u bytes", len);
	if (memchr(name, '\0', len) || memchr(name, '/', len))
		return pvfs_why(why, "a name with NUL or '/'");
	return 0;
}

static int pvfs_check_readdir(const struct pvfs_op *op, const void *body, size_t len, char *why)
{
	const struct pvfsd_readdir_req *req = (const void *)(op->up + 1);
	const struct pvfsd_readdir_resp *resp = body;
	size_t pos = sizeof(*resp);
	u32 i;
	int err;

	if (len < sizeof(*resp))
		return pvfs_why(why, "%zu bytes", len);
	if (resp->eof > 1)
		return pvfs_why(why, "eof %u", resp->eof);
	if (len - sizeof(*resp) > req->max_bytes)
		return pvfs_why(why, "entries beyond the %u bytes asked", req->max_bytes);
	for (i = 0; i < resp->count; i++) {
		const struct pvfsd_dirent *de = body + pos;
		size_t step;

		if (len - pos < sizeof(*de))
			return pvfs_why(why, "entry %u truncated", i);
		if (de->handle == 0 || de->cookie == 0)
			return pvfs_why(why, "entry %u: handle or cookie 0", i);
		if (!pvfs_type_ok(de->type))
			return pvfs_why(why, "entry %u: type %u", i, de->type);
		if (de->name_len < 1 || de->name_len > PVFSD_MAX_NAME)
			return pvfs_why(why, "entry %u: name of %u bytes", i, de->name_len);
		step = ALIGN(sizeof(*de) + de->name_len, 8);
		if (len - pos < step)
			return pvfs_why(why, "entry %u truncated", i);
		err = pvfs_check_name((const char *)(de + 1), de->name_len, why);
		if (err)
			return err;
		if (memchr_inv((const char *)(de + 1) + de->name_len, 0,
			       step - sizeof(*de) - de->name_len))
			return pvfs_why(why, "entry %u: padding not zero", i);
		pos += step;
	}
	if (pos != len)
		return pvfs_why(why, "%zu bytes after %u entries", len - pos, resp->count);
	return 0;
}

/* Checks a successful downcall's body against what @op asked. */
static int pvfs_check_body(const struct pvfs_op *op, const void *body, size_t len, char *why)
{
	const void *req = op->up + 1;
	int err;

	if (len > op->resp_max && op->opcode != PVFSD_OP_READDIR)
		return pvfs_why(why, "%zu bytes, at most %zu expected", len, op->resp_max);

	switch (op->opcode) {
	case PVFSD_OP_ATTACH: {
		const struct pvfsd_attach_resp *r = body;

		if (len != sizeof(*r))
			return pvfs_why(why, "%zu bytes", len);
		err = pvfs_check_attr(&r->root, why);
		if (err)
			return err;
		if (r->root.type != PVFSD_TYPE_DIRECTORY)
			return pvfs_why(why, "the root is a %s", pvfs_type_name(r->root.type));
		if (r->max_name < 1 || r->max_name > PVFSD_MAX_NAME || r->pad)
			return pvfs_why(why, "max_name %u", r->max_name);
		return 0;
	}
	case PVFSD_OP_LOOKUP:
	case PVFSD_OP_GETATTR:
	case PVFSD_OP_OPEN:
	case PVFSD_OP_SETATTR:
	case PVFSD_OP_MKDIR:
	case PVFSD_OP_MKNOD:
	case PVFSD_OP_SYMLINK:
	case PVFSD_OP_LINK: {
		const struct pvfsd_attr_resp *r = body;

		if (len != sizeof(*r))
			return pvfs_why(why, "attributes of %zu bytes", len);
		err = pvfs_check_attr(&r->attr, why);
		return err ? err : pvfs_check_object(op, &r->attr, why);
	}
	case PVFSD_OP_CREATE: {
		const struct pvfsd_create_resp *r = body;

		if (len != sizeof(*r))
			return pvfs_why(why, "%zu bytes", len);
		if (r->created > 1 || r->opened > 1)
			return pvfs_why(why, "created=%u opened=%u", r->created, r->opened);
		/* a hold not asked for (no open_mode, or not the daemon's feature) */
		if (r->opened && !((const struct pvfsd_create_req *)(op->up + 1))->open_mode)
			return pvfs_why(why, "opened=1 without an open_mode");
		err = pvfs_check_attr(&r->attr, why);
		return err ? err : pvfs_check_object(op, &r->attr, why);
	}
	case PVFSD_OP_DETACH:
	case PVFSD_OP_CLOSE:
	case PVFSD_OP_UNLINK:
	case PVFSD_OP_RMDIR:
	case PVFSD_OP_RENAME:
	case PVFSD_OP_FSYNC:
	case PVFSD_OP_XATTR_SET:
	case PVFSD_OP_XATTR_REMOVE:
		if (len)
			return pvfs_why(why, "%zu bytes where none belong", len);
		return 0;
	case PVFSD_OP_READLINK: {
		const struct pvfsd_readlink_resp *r = body;

		if (len < sizeof(*r) || r->pad)
			return pvfs_why(why, "%zu bytes", len);
		if (r->target_len < 1 || r->target_len > PVFSD_MAX_SYMLINK ||
		    len != sizeof(*r) + r->target_len)
			return pvfs_why(why, "a target of %u bytes in %zu", r->target_len, len);
		if (memchr(r + 1, '\0', r->target_len))
			return pvfs_why(why, "a target with NUL");
		return 0;
	}
	case PVFSD_OP_READDIR:
		return pvfs_check_readdir(op, body, len, why);
	case PVFSD_OP_READ:
	case PVFSD_OP_WRITE: {
		const struct pvfsd_io_req *q = req;
		const struct pvfsd_io_resp *r = body;

		if (len != sizeof(*r) || r->pad)
			return pvfs_why(why, "%zu bytes", len);
		if (r->done > q->length)
			return pvfs_why(why, "%u bytes done, %u asked", r->done, q->length);
		return 0;
	}
	case PVFSD_OP_STATFS: {
		const struct pvfsd_statfs_resp *r = body;

		if (len != sizeof(*r))
			return pvfs_why(why, "%zu bytes", len);
		if (r->bsize == 0 || r->namelen == 0 || r->namelen > PVFSD_MAX_NAME ||
		    r->bfree > r->blocks || r->bavail > r->blocks || r->ffree > r->files)
			return pvfs_why(why, "figures inconsistent");
		return 0;
	}
	case PVFSD_OP_XATTR_GET:
	case PVFSD_OP_XATTR_LIST: {
		const struct pvfsd_xattr_req *q = req;
		const struct pvfsd_xattr_resp *r = body;

		if (len < sizeof(*r) || r->pad)
			return pvfs_why(why, "%zu bytes", len);
		if (r->size > PVFSD_MAX_XATTR_VALUE)
			return pvfs_why(why, "a value of %u bytes", r->size);
		if (q->value_len == 0) {
			if (len != sizeof(*r))
				return pvfs_why(why, "a value where only its size was asked");
			return 0;
		}
		if (r->size > q->value_len || len != sizeof(*r) + r->size)
			return pvfs_why(why, "a value of %u bytes in %zu (room %u)", r->size, len,
					q->value_len);
		return 0;
	}
	default:
		return pvfs_why(why, "no answer belongs to this op");
	}
}

/* The status and body of an answer to @op. */
static int pvfs_check_answer(const struct pvfs_op *op, const struct pvfsd_msg_hdr *hdr,
			     const void *body, size_t len, char *why)
{
	if (hdr->status > 0 || hdr->status < -4095)
		return pvfs_why(why, "status %d", hdr->status);
	if (hdr->status != 0)
		return len ? pvfs_why(why, "status %d with a body", hdr->status) : 0;
	return pvfs_check_body(op, body, len, why);
}

static ssize_t pvfs_dev_downcall(const void *msg, size_t len)
{
	const struct pvfsd_msg_hdr *hdr = msg;
	const void *body = hdr + 1;
	size_t body_len = len - sizeof(*hdr);
	char why[PVFS_WHY_LEN];
	struct pvfs_op *op;
	void *down = NULL;
	int err;

	spin_lock(&pvfs_chan.lock);
	op = pvfs_chan_find_sent_locked(hdr->tag);
	if (op)
		pvfs_op_get(op);
	spin_unlock(&pvfs_chan.lock);
	if (!op)
		return pvfs_bad("no request has tag %llu", hdr->tag);
	if (op->opcode != hdr->op) {
		/* no answer to this op: it stays pending */
		err = pvfs_bad("op %u answers tag %llu of op %u", hdr->op, hdr->tag, op->opcode);
		goto out;
	}
	err = pvfs_check_answer(op, hdr, body, body_len, why);
	if (err) {
		/*
		 * The daemon answered and will not answer again: left pending,
		 * the op would hold its caller until SIGKILL.
		 */
		pr_warn_ratelimited(
			"refused pvfsd's answer to %s tag %llu: %s; the request fails with EIO\n",
			pvfs_op_name(op->opcode), hdr->tag, why);
		pvfs_chan_answer(op, -EIO, NULL, 0);
		goto out;
	}
	if (body_len) {
		down = kvmalloc(body_len, GFP_KERNEL);
		if (!down) {
			/* for the same reason: the answer is lost */
			pvfs_chan_answer(op, -ENOMEM, NULL, 0);
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
	} else if (hdr->version != PVFSD_DEV_MAJOR) {
		pr_warn_ratelimited(
			"pvfsd speaks channel %u, this module %u.%u: upgrade the older one\n",
			hdr->version, PVFSD_DEV_MAJOR, PVFSD_DEV_MINOR);
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
