// SPDX-License-Identifier: GPL-2.0
/*
 * Extended attributes: "user.*" for everyone's use, and "pvfs.*", where
 * pvfs.layout reads and sets a file's or directory's striping
 * (docs/metadata.md).  Values live on the metadata server.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/string.h>
#include <linux/xattr.h>

#include "pvfs.h"

static struct pvfs_op *pvfs_xattr_op(struct inode *inode, enum pvfsd_op opcode, const char *name,
				     const void *value, size_t value_len, u32 room, u32 flags)
{
	size_t name_len = name ? strlen(name) : 0;
	size_t resp_max = sizeof(struct pvfsd_xattr_resp) + room;
	struct pvfsd_xattr_req *req;
	struct pvfs_op *op;

	if (name_len > PVFSD_MAX_XATTR_NAME)
		return ERR_PTR(-ERANGE);
	if (value_len > PVFSD_MAX_XATTR_VALUE)
		return ERR_PTR(-E2BIG);
	op = pvfs_op_new(PVFS_SB(inode->i_sb), opcode, sizeof(*req) + name_len + value_len,
			 resp_max);
	if (IS_ERR(op))
		return op;
	req = pvfs_op_req(op);
	req->handle = PVFS_I(inode)->handle;
	req->name_len = name_len;
	req->value_len = value ? value_len : room;
	req->flags = flags;
	memcpy(req + 1, name, name_len);
	if (value_len)
		memcpy((char *)(req + 1) + name_len, value, value_len);
	return op;
}

/* GET and LIST: the value's size, and the value when @size has room. */
static int pvfs_xattr_fetch(struct inode *inode, enum pvfsd_op opcode, const char *name,
			    void *buffer, size_t size)
{
	const struct pvfsd_xattr_resp *resp;
	u32 room = min_t(size_t, size, PVFSD_MAX_XATTR_VALUE);
	struct pvfs_op *op;
	int err;

	op = pvfs_xattr_op(inode, opcode, name, NULL, 0, room, 0);
	if (IS_ERR(op))
		return PTR_ERR(op);
	err = pvfs_op_run(op);
	if (!err) {
		resp = pvfs_op_resp(op);
		err = resp->size;
		if (size && resp->size <= size)
			memcpy(buffer, resp + 1, resp->size);
		else if (size)
			err = -ERANGE;
	}
	pvfs_op_put(op);
	return err;
}

static int pvfs_xattr_get(const struct xattr_handler *handler, struct dentry *dentry,
			  struct inode *inode, const char *name, void *buffer, size_t size)
{
	return pvfs_xattr_fetch(inode, PVFSD_OP_XATTR_GET, xattr_full_name(handler, name), buffer,
				size);
}

static int pvfs_xattr_set(const struct xattr_handler *handler, PVFS_IDMAP_T *idmap,
			  struct dentry *dentry, struct inode *inode, const char *name,
			  const void *value, size_t size, int flags)
{
	const char *full = xattr_full_name(handler, name);
	struct pvfs_op *op;
	u32 dflags = 0;
	int err;

	if (flags & XATTR_CREATE)
		dflags |= PVFSD_XATTR_CREATE;
	if (flags & XATTR_REPLACE)
		dflags |= PVFSD_XATTR_REPLACE;
	if (value)
		op = pvfs_xattr_op(inode, PVFSD_OP_XATTR_SET, full, value ?: "", size, 0, dflags);
	else
		op = pvfs_xattr_op(inode, PVFSD_OP_XATTR_REMOVE, full, NULL, 0, 0, 0);
	if (IS_ERR(op))
		return PTR_ERR(op);
	err = pvfs_op_run(op);
	pvfs_op_put(op);
	if (!err)
		pvfs_attr_stale(inode);
	return err;
}

ssize_t pvfs_listxattr(struct dentry *dentry, char *list, size_t size)
{
	return pvfs_xattr_fetch(d_inode(dentry), PVFSD_OP_XATTR_LIST, NULL, list, size);
}

static const struct xattr_handler pvfs_user_xattr = {
	.prefix = XATTR_USER_PREFIX,
	.get = pvfs_xattr_get,
	.set = pvfs_xattr_set,
};

static const struct xattr_handler pvfs_pvfs_xattr = {
	.prefix = "pvfs.",
	.get = pvfs_xattr_get,
	.set = pvfs_xattr_set,
};

const struct xattr_handler *pvfs_xattr_handlers[] = {
	&pvfs_user_xattr,
	&pvfs_pvfs_xattr,
	NULL,
};
