// SPDX-License-Identifier: GPL-2.0
/*
 * Names: lookup, the operations that make and remove names, rename,
 * symlinks.  A dentry (also a negative one) is trusted for the directory
 * attribute timeout, then looked up again.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/namei.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "compat.h"
#include "pvfs.h"

/* A name op on @dir: the op with its pvfsd_name_req-like body filled. */
static struct pvfs_op *pvfs_name_op(struct inode *dir, enum pvfsd_op opcode,
				    const struct qstr *name, size_t resp_len)
{
	struct pvfsd_name_req *req;
	struct pvfs_op *op;

	if (name->len > PVFSD_MAX_NAME)
		return ERR_PTR(-ENAMETOOLONG);
	op = pvfs_op_new(PVFS_SB(dir->i_sb), opcode, sizeof(*req) + name->len, resp_len);
	if (IS_ERR(op))
		return op;
	req = pvfs_op_req(op);
	req->parent = PVFS_I(dir)->handle;
	req->name_len = name->len;
	memcpy(req + 1, name->name, name->len);
	return op;
}

static void pvfs_dentry_fresh(struct dentry *dentry)
{
	dentry->d_time = jiffies;
}

static struct dentry *pvfs_lookup(struct inode *dir, struct dentry *dentry, unsigned int flags)
{
	const struct pvfsd_attr_resp *resp;
	struct inode *inode = NULL;
	struct pvfs_op *op;
	int err;

	op = pvfs_name_op(dir, PVFSD_OP_LOOKUP, &dentry->d_name, sizeof(*resp));
	if (IS_ERR(op))
		return ERR_CAST(op);
	err = pvfs_op_run(op);
	if (!err) {
		resp = pvfs_op_resp(op);
		inode = pvfs_iget(dir->i_sb, &resp->attr);
	} else if (err != -ENOENT) {
		inode = ERR_PTR(err);
	}
	pvfs_op_put(op);
	if (IS_ERR(inode))
		return ERR_CAST(inode);
	pvfs_dentry_fresh(dentry);
	return d_splice_alias(inode, dentry);
}

static int pvfs_d_revalidate(struct dentry *dentry, unsigned int flags)
{
	const struct pvfsd_attr_resp *resp;
	struct inode *inode, *dir;
	struct dentry *parent;
	struct pvfs_op *op;
	int err, valid;

	/*
	 * LOOKUP_REVAL: the walk is retried because the object it found was
	 * gone (ESTALE, e.g. an OPEN of a file another client unlinked):
	 * the cached dentry is not trusted this time.
	 */
	if (flags & LOOKUP_RCU) {
		inode = d_inode_rcu(dentry);
		dir = d_inode_rcu(READ_ONCE(dentry->d_parent));
		if (dir && !(flags & LOOKUP_REVAL) &&
		    time_before(jiffies, dentry->d_time + pvfs_attr_timeout(dir)))
			return 1;
		return -ECHILD;
	}
	parent = dget_parent(dentry);
	dir = d_inode(parent);
	if (!(flags & LOOKUP_REVAL) &&
	    time_before(jiffies, dentry->d_time + pvfs_attr_timeout(dir))) {
		dput(parent);
		return 1;
	}
	op = pvfs_name_op(dir, PVFSD_OP_LOOKUP, &dentry->d_name, sizeof(*resp));
	dput(parent);
	if (IS_ERR(op))
		return PTR_ERR(op);
	err = pvfs_op_run(op);
	inode = d_inode(dentry);
	if (err == -ENOENT) {
		valid = inode ? 0 : 1;
	} else if (err) {
		valid = err;
	} else {
		resp = pvfs_op_resp(op);
		/*
		 * Another handle, or the same of another type (a lie: handles
		 * are not reused), makes the dentry invalid, as NFS and FUSE
		 * do: the VFS drops it and looks the name up again.
		 */
		valid = inode && PVFS_I(inode)->handle == resp->attr.handle &&
			pvfs_update_inode(inode, &resp->attr) == 0;
	}
	pvfs_op_put(op);
	if (valid == 1)
		pvfs_dentry_fresh(dentry);
	return valid;
}

const struct dentry_operations pvfs_dentry_ops = {
	.d_revalidate = pvfs_d_revalidate,
};

/* Instantiates @dentry with the object @attr describes. */
static int pvfs_instantiate(struct inode *dir, struct dentry *dentry, const struct pvfsd_attr *attr)
{
	struct inode *inode = pvfs_iget(dir->i_sb, attr);

	if (IS_ERR(inode))
		return PTR_ERR(inode);
	if (d_in_lookup(dentry))
		d_add(dentry, inode); /* an exclusive create without a LOOKUP: hash it too */
	else
		d_instantiate(dentry, inode);
	pvfs_dentry_fresh(dentry);
	pvfs_attr_stale(dir);
	return 0;
}

/*
 * CREATE of @dentry in @dir; *@created: this request made the file.  With
 * @open_mode (PVFSD_OPEN_*) the daemon also opens it in the same request
 * to the servers; *@gen is then that open's gen (the tag), 0 if the
 * servers do not hold it.
 */
static int pvfs_create_file(struct inode *dir, struct dentry *dentry, umode_t mode, bool excl,
			    u32 open_mode, bool *created, u64 *gen)
{
	const struct pvfsd_create_resp *resp;
	struct pvfsd_create_req *req;
	struct pvfs_op *op;
	int err;

	*gen = 0;
	if (dentry->d_name.len > PVFSD_MAX_NAME)
		return -ENAMETOOLONG;
	op = pvfs_op_new(PVFS_SB(dir->i_sb), PVFSD_OP_CREATE, sizeof(*req) + dentry->d_name.len,
			 sizeof(*resp));
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->parent = PVFS_I(dir)->handle;
	req->name_len = dentry->d_name.len;
	req->mode = mode & 07777;
	req->exclusive = excl;
	req->open_mode = open_mode;
	memcpy(req + 1, dentry->d_name.name, dentry->d_name.len);
	err = pvfs_op_run(op);
	if (!err) {
		resp = pvfs_op_resp(op);
		*created = resp->created;
		err = pvfs_instantiate(dir, dentry, &resp->attr);
		if (open_mode && resp->opened) {
			if (err) /* held, but not ours to count: it closes again */
				pvfs_close_handle(PVFS_SB(dir->i_sb), resp->attr.handle,
						  pvfs_op_tag(op));
			else
				*gen = pvfs_op_tag(op);
		}
	}
	pvfs_op_put(op);
	return err;
}

static int pvfs_create(PVFS_IDMAP_T *idmap, struct inode *dir, struct dentry *dentry, umode_t mode,
		       bool excl)
{
	bool created;
	u64 gen;

	return pvfs_create_file(dir, dentry, mode, excl, 0, &created, &gen);
}

/*
 * open(O_CREAT) of a name not in the cache, or cached as absent.  An
 * exclusive create needs no LOOKUP first: the server refuses a name that
 * exists (EEXIST).  The CREATE also opens the file (one round trip, not a
 * CREATE and an OPEN), so that the servers hold it while open; a daemon
 * that could not hold it says so, and the file is then opened with an OPEN
 * (as always with a daemon that did not offer PVFSD_FEAT_CREATE_OPEN: the
 * channel takes the open_mode out, pvfs_op_fit_locked).
 * Other opens look the name up as usual; a name found absent is created,
 * and a file that existed after all is left to the usual open (permission
 * checks, O_TRUNC, close-to-open revalidation).
 */
static int pvfs_atomic_open(struct inode *dir, struct dentry *dentry, struct file *file,
			    unsigned int open_flags, umode_t mode)
{
	bool excl = (open_flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL);
	u32 open_mode = pvfs_open_bits(file->f_mode);
	struct dentry *found = NULL;
	bool created = false;
	struct inode *inode;
	u64 gen;
	int err;

	if (d_in_lookup(dentry) && !excl) {
		found = pvfs_lookup(dir, dentry, 0);
		if (IS_ERR(found))
			return PTR_ERR(found);
		if (found)
			dentry = found;
	}
	if (!(open_flags & O_CREAT) || d_really_is_positive(dentry))
		return finish_no_open(file, found);

	err = pvfs_create_file(dir, dentry, mode, excl, open_mode, &created, &gen);
	if (err) {
		dput(found);
		return err;
	}
	inode = d_inode(dentry);
	if (gen)
		pvfs_open_adopt(inode, open_mode, gen);
	if (!created) {
		/*
		 * It existed: the usual open follows, with its own OPEN.  The
		 * hold the CREATE took is counted and released, so that its
		 * CLOSE (or the mount's later one) ends it.
		 */
		if (gen)
			pvfs_open_release(inode);
		return finish_no_open(file, found);
	}
	file->f_mode |= FMODE_CREATED;
	err = finish_open(file, dentry, gen ? pvfs_open_held : pvfs_open_created);
	/* not opened, so no release: the count the CREATE's hold took goes here */
	if (err && gen && !(file->f_mode & FMODE_OPENED))
		pvfs_open_release(inode);
	dput(found);
	return err;
}

static int pvfs_make_node(struct inode *dir, struct dentry *dentry, enum pvfsd_op opcode, u32 type,
			  umode_t mode, dev_t rdev)
{
	const struct pvfsd_attr_resp *resp;
	struct pvfsd_mknod_req *req;
	struct pvfs_op *op;
	int err;

	if (dentry->d_name.len > PVFSD_MAX_NAME)
		return -ENAMETOOLONG;
	op = pvfs_op_new(PVFS_SB(dir->i_sb), opcode, sizeof(*req) + dentry->d_name.len,
			 sizeof(*resp));
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->parent = PVFS_I(dir)->handle;
	req->rdev = new_encode_dev(rdev);
	req->name_len = dentry->d_name.len;
	req->mode = mode & 07777;
	req->type = type;
	memcpy(req + 1, dentry->d_name.name, dentry->d_name.len);
	err = pvfs_op_run(op);
	if (!err) {
		resp = pvfs_op_resp(op);
		err = pvfs_instantiate(dir, dentry, &resp->attr);
	}
	pvfs_op_put(op);
	return err;
}

static int pvfs_mkdir(PVFS_IDMAP_T *idmap, struct inode *dir, struct dentry *dentry, umode_t mode)
{
	return pvfs_make_node(dir, dentry, PVFSD_OP_MKDIR, PVFSD_TYPE_DIRECTORY, mode, 0);
}

static int pvfs_mknod(PVFS_IDMAP_T *idmap, struct inode *dir, struct dentry *dentry, umode_t mode,
		      dev_t rdev)
{
	u32 type;

	switch (mode & S_IFMT) {
	case S_IFREG:
		return pvfs_create(idmap, dir, dentry, mode, true);
	case S_IFIFO:
		type = PVFSD_TYPE_FIFO;
		break;
	case S_IFSOCK:
		type = PVFSD_TYPE_SOCKET;
		break;
	case S_IFCHR:
		type = PVFSD_TYPE_CHAR_DEVICE;
		break;
	case S_IFBLK:
		type = PVFSD_TYPE_BLOCK_DEVICE;
		break;
	default:
		return -EINVAL;
	}
	return pvfs_make_node(dir, dentry, PVFSD_OP_MKNOD, type, mode, rdev);
}

static int pvfs_symlink(PVFS_IDMAP_T *idmap, struct inode *dir, struct dentry *dentry,
			const char *target)
{
	const struct pvfsd_attr_resp *resp;
	struct pvfsd_symlink_req *req;
	size_t target_len = strlen(target);
	struct pvfs_op *op;
	int err;

	if (dentry->d_name.len > PVFSD_MAX_NAME || target_len > PVFSD_MAX_SYMLINK)
		return -ENAMETOOLONG;
	op = pvfs_op_new(PVFS_SB(dir->i_sb), PVFSD_OP_SYMLINK,
			 sizeof(*req) + dentry->d_name.len + target_len, sizeof(*resp));
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->parent = PVFS_I(dir)->handle;
	req->name_len = dentry->d_name.len;
	req->target_len = target_len;
	memcpy(req + 1, dentry->d_name.name, dentry->d_name.len);
	memcpy((char *)(req + 1) + dentry->d_name.len, target, target_len);
	err = pvfs_op_run(op);
	if (!err) {
		resp = pvfs_op_resp(op);
		err = pvfs_instantiate(dir, dentry, &resp->attr);
	}
	pvfs_op_put(op);
	return err;
}

static int pvfs_link(struct dentry *old_dentry, struct inode *dir, struct dentry *dentry)
{
	struct inode *inode = d_inode(old_dentry);
	const struct pvfsd_attr_resp *resp;
	struct pvfsd_link_req *req;
	struct pvfs_op *op;
	int err;

	if (dentry->d_name.len > PVFSD_MAX_NAME)
		return -ENAMETOOLONG;
	op = pvfs_op_new(PVFS_SB(dir->i_sb), PVFSD_OP_LINK, sizeof(*req) + dentry->d_name.len,
			 sizeof(*resp));
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->target = PVFS_I(inode)->handle;
	req->new_parent = PVFS_I(dir)->handle;
	req->name_len = dentry->d_name.len;
	memcpy(req + 1, dentry->d_name.name, dentry->d_name.len);
	err = pvfs_op_run(op);
	if (!err) {
		resp = pvfs_op_resp(op);
		err = pvfs_update_inode(inode, &resp->attr);
	}
	if (!err) {
		ihold(inode);
		d_instantiate(dentry, inode);
		pvfs_dentry_fresh(dentry);
		pvfs_attr_stale(dir);
	} else if (err == -EIO) {
		/* the link may exist all the same: ask the server next time */
		pvfs_attr_stale(inode);
		pvfs_attr_stale(dir);
	}
	pvfs_op_put(op);
	return err;
}

static int pvfs_remove(struct inode *dir, struct dentry *dentry, enum pvfsd_op opcode)
{
	struct inode *inode = d_inode(dentry);
	struct pvfs_op *op;
	int err;

	op = pvfs_name_op(dir, opcode, &dentry->d_name, 0);
	if (IS_ERR(op))
		return PTR_ERR(op);
	err = pvfs_op_run(op);
	pvfs_op_put(op);
	if (err)
		return err;
	if (opcode == PVFSD_OP_RMDIR)
		clear_nlink(inode);
	else if (inode->i_nlink)
		drop_nlink(inode);
	pvfs_attr_stale(inode);
	pvfs_attr_stale(dir);
	return 0;
}

static int pvfs_unlink(struct inode *dir, struct dentry *dentry)
{
	return pvfs_remove(dir, dentry, PVFSD_OP_UNLINK);
}

static int pvfs_rmdir(struct inode *dir, struct dentry *dentry)
{
	return pvfs_remove(dir, dentry, PVFSD_OP_RMDIR);
}

static int pvfs_rename(PVFS_IDMAP_T *idmap, struct inode *old_dir, struct dentry *old_dentry,
		       struct inode *new_dir, struct dentry *new_dentry, unsigned int flags)
{
	const struct qstr *from = &old_dentry->d_name;
	const struct qstr *to = &new_dentry->d_name;
	struct inode *target = d_inode(new_dentry);
	struct pvfsd_rename_req *req;
	struct pvfs_op *op;
	int err;

	/* RENAME_EXCHANGE would need an atomic swap on the server */
	if (flags & ~RENAME_NOREPLACE)
		return -EINVAL;
	if (to->len > PVFSD_MAX_NAME)
		return -ENAMETOOLONG;
	op = pvfs_op_new(PVFS_SB(old_dir->i_sb), PVFSD_OP_RENAME,
			 sizeof(*req) + from->len + to->len, 0);
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->old_parent = PVFS_I(old_dir)->handle;
	req->new_parent = PVFS_I(new_dir)->handle;
	req->old_name_len = from->len;
	req->new_name_len = to->len;
	req->flags = (flags & RENAME_NOREPLACE) ? PVFSD_RENAME_NOREPLACE : 0;
	memcpy(req + 1, from->name, from->len);
	memcpy((char *)(req + 1) + from->len, to->name, to->len);
	err = pvfs_op_run(op);
	pvfs_op_put(op);
	if (err)
		return err;
	if (target) {
		if (S_ISDIR(target->i_mode))
			clear_nlink(target);
		else if (target->i_nlink)
			drop_nlink(target);
		pvfs_attr_stale(target);
	}
	pvfs_attr_stale(d_inode(old_dentry));
	pvfs_attr_stale(old_dir);
	pvfs_attr_stale(new_dir);
	return 0;
}

static const char *pvfs_get_link(struct dentry *dentry, struct inode *inode,
				 struct delayed_call *done)
{
	const struct pvfsd_readlink_resp *resp;
	struct pvfsd_handle_req *req;
	struct pvfs_op *op;
	char *target;
	int err;

	if (!dentry)
		return ERR_PTR(-ECHILD);
	op = pvfs_op_new(PVFS_SB(inode->i_sb), PVFSD_OP_READLINK, sizeof(*req),
			 sizeof(*resp) + PVFSD_MAX_SYMLINK);
	if (IS_ERR(op))
		return ERR_CAST(op);
	req = pvfs_op_req(op);
	req->handle = PVFS_I(inode)->handle;
	err = pvfs_op_run(op);
	if (err) {
		pvfs_op_put(op);
		return ERR_PTR(err);
	}
	resp = pvfs_op_resp(op);
	target = kmemdup_nul((const char *)(resp + 1), resp->target_len, GFP_KERNEL);
	pvfs_op_put(op);
	if (!target)
		return ERR_PTR(-ENOMEM);
	set_delayed_call(done, kfree_link, target);
	return target;
}

const struct inode_operations pvfs_dir_iops = {
	.lookup = pvfs_lookup,
	.create = pvfs_create,
	.atomic_open = pvfs_atomic_open,
	.mkdir = pvfs_mkdir,
	.mknod = pvfs_mknod,
	.symlink = pvfs_symlink,
	.link = pvfs_link,
	.unlink = pvfs_unlink,
	.rmdir = pvfs_rmdir,
	.rename = pvfs_rename,
	.getattr = pvfs_getattr,
	.setattr = pvfs_setattr,
	.permission = pvfs_permission,
	.listxattr = pvfs_listxattr,
};

const struct inode_operations pvfs_symlink_iops = {
	.get_link = pvfs_get_link,
	.getattr = pvfs_getattr,
	.setattr = pvfs_setattr,
	.listxattr = pvfs_listxattr,
};
