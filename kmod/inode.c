// SPDX-License-Identifier: GPL-2.0
/*
 * Inodes of pvfs: one per server handle.  Attributes come from the daemon
 * and are trusted for a while, as NFS does: between acregmin and acregmax
 * seconds for files (acdir* for directories), longer the longer ago the
 * file last changed; noac asks every time.  The kernel checks permissions
 * itself, on fresh attributes.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/pagemap.h>
#include <linux/slab.h>
#include <linux/uidgid.h>

#include "compat.h"
#include "pvfs.h"

static struct kmem_cache *pvfs_inode_cachep;

static void pvfs_inode_init_once(void *obj)
{
	struct pvfs_inode_info *pi = obj;

	inode_init_once(&pi->vfs_inode);
	mutex_init(&pi->open_mutex);
}

int pvfs_inode_cache_init(void)
{
	pvfs_inode_cachep =
		kmem_cache_create("pvfs_inode_cache", sizeof(struct pvfs_inode_info), 0,
				  SLAB_RECLAIM_ACCOUNT | SLAB_ACCOUNT, pvfs_inode_init_once);
	return pvfs_inode_cachep ? 0 : -ENOMEM;
}

void pvfs_inode_cache_exit(void)
{
	/* free_inode runs after an RCU grace period */
	rcu_barrier();
	kmem_cache_destroy(pvfs_inode_cachep);
}

struct inode *pvfs_alloc_inode(struct super_block *sb)
{
	struct pvfs_inode_info *pi;

	pi = alloc_inode_sb(sb, pvfs_inode_cachep, GFP_KERNEL);
	if (!pi)
		return NULL;
	pi->handle = 0;
	pi->blksize = 0;
	pi->attr_time = 0;
	pi->perm_time = 0;
	pi->flags = 0;
	atomic_set(&pi->wb_retries, 0);
	pi->open_count = 0;
	pi->open_gen = 0;
	pi->open_mode = 0;
	INIT_LIST_HEAD(&pi->open_link);
	return &pi->vfs_inode;
}

void pvfs_free_inode(struct inode *inode)
{
	kmem_cache_free(pvfs_inode_cachep, PVFS_I(inode));
}

static umode_t pvfs_type_bits(u32 type)
{
	switch (type) {
	case PVFSD_TYPE_REGULAR:
		return S_IFREG;
	case PVFSD_TYPE_DIRECTORY:
		return S_IFDIR;
	case PVFSD_TYPE_SYMLINK:
		return S_IFLNK;
	case PVFSD_TYPE_FIFO:
		return S_IFIFO;
	case PVFSD_TYPE_SOCKET:
		return S_IFSOCK;
	case PVFSD_TYPE_CHAR_DEVICE:
		return S_IFCHR;
	default:
		return S_IFBLK;
	}
}

const char *pvfs_type_name(u32 type)
{
	static const char *const names[] = {
		[PVFSD_TYPE_REGULAR] = "regular file",
		[PVFSD_TYPE_DIRECTORY] = "directory",
		[PVFSD_TYPE_SYMLINK] = "symlink",
		[PVFSD_TYPE_FIFO] = "fifo",
		[PVFSD_TYPE_SOCKET] = "socket",
		[PVFSD_TYPE_CHAR_DEVICE] = "character device",
		[PVFSD_TYPE_BLOCK_DEVICE] = "block device",
	};

	return type < ARRAY_SIZE(names) && names[type] ? names[type] : "bad type";
}

static u32 pvfs_inode_type(const struct inode *inode)
{
	u32 type;

	for (type = PVFSD_TYPE_REGULAR; type < PVFSD_TYPE_BLOCK_DEVICE; type++)
		if (pvfs_type_bits(type) == (inode->i_mode & S_IFMT))
			break;
	return type;
}

static struct timespec64 pvfs_ts(const struct pvfsd_time *t)
{
	return (struct timespec64){.tv_sec = t->sec, .tv_nsec = t->nsec};
}

unsigned long pvfs_attr_timeout(struct inode *inode)
{
	const struct pvfs_mount_opts *o = &PVFS_SB(inode->i_sb)->opts;
	unsigned int lo = S_ISDIR(inode->i_mode) ? o->acdirmin : o->acregmin;
	unsigned int hi = S_ISDIR(inode->i_mode) ? o->acdirmax : o->acregmax;
	time64_t age;

	if (o->noac)
		return 0;
	/* a file that changed long ago will likely not change soon */
	age = ktime_get_real_seconds() - pvfs_inode_mtime(inode).tv_sec;
	return clamp_t(time64_t, age / 10, lo, hi) * HZ;
}

int pvfs_update_inode(struct inode *inode, const struct pvfsd_attr *attr)
{
	struct pvfs_inode_info *pi = PVFS_I(inode);
	struct timespec64 old_mtime = pvfs_inode_mtime(inode);
	struct timespec64 mtime = pvfs_ts(&attr->mtime);
	loff_t old_size = i_size_read(inode);
	bool changed;

	/*
	 * A handle is never reused (docs/metadata.md), so its object never
	 * changes type; the VFS relies on a live inode's type staying put.
	 */
	if (attr->handle != pi->handle || pvfs_type_bits(attr->type) != (inode->i_mode & S_IFMT)) {
		pr_warn_ratelimited("%s: attributes of %#llx (a %s) for inode %#llx (a %s): EIO\n",
				    PVFS_SB(inode->i_sb)->source, attr->handle,
				    pvfs_type_name(attr->type), pi->handle,
				    pvfs_type_name(pvfs_inode_type(inode)));
		return -EIO;
	}
	inode->i_mode = pvfs_type_bits(attr->type) | (attr->mode & 07777);
	inode->i_uid = make_kuid(&init_user_ns, attr->uid);
	inode->i_gid = make_kgid(&init_user_ns, attr->gid);
	set_nlink(inode, attr->nlink);
	pvfs_set_inode_times(inode, pvfs_ts(&attr->atime), mtime, pvfs_ts(&attr->ctime));
	pi->blksize = attr->blksize;
	pi->attr_time = jiffies;
	pi->perm_time = pi->attr_time;

	if (!S_ISREG(inode->i_mode)) {
		i_size_write(inode, attr->size);
		return 0;
	}
	/*
	 * Data written here but not yet flushed may make the local size the
	 * larger one: keep it then.
	 */
	if (mapping_tagged(inode->i_mapping, PAGECACHE_TAG_DIRTY) ||
	    mapping_tagged(inode->i_mapping, PAGECACHE_TAG_WRITEBACK)) {
		if (attr->size > old_size)
			i_size_write(inode, attr->size);
		return 0;
	}
	i_size_write(inode, attr->size);
	inode->i_blocks = (attr->size + 511) >> 9;
	/* someone else changed the file: what we cached is stale */
	changed = !timespec64_equal(&old_mtime, &mtime) || old_size != (loff_t)attr->size;
	if (changed && inode->i_mapping->nrpages)
		invalidate_mapping_pages(inode->i_mapping, 0, -1);
	return 0;
}

int pvfs_revalidate(struct inode *inode, bool force)
{
	struct pvfs_inode_info *pi = PVFS_I(inode);
	const struct pvfsd_attr_resp *resp;
	struct pvfsd_handle_req *req;
	struct pvfs_op *op;
	int err;

	if (!force && pi->attr_time &&
	    time_before(jiffies, pi->attr_time + pvfs_attr_timeout(inode)))
		return 0;

	op = pvfs_op_new(PVFS_SB(inode->i_sb), PVFSD_OP_GETATTR, sizeof(*req), sizeof(*resp));
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->handle = pi->handle;
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

int pvfs_getattr(PVFS_IDMAP_T *idmap, const struct path *path, struct kstat *stat, u32 request_mask,
		 unsigned int query_flags)
{
	struct inode *inode = d_inode(path->dentry);
	bool force = (query_flags & AT_STATX_FORCE_SYNC) != 0;
	int err;

	if (!(query_flags & AT_STATX_DONT_SYNC)) {
		err = pvfs_revalidate(inode, force);
		if (err)
			return err;
	}
	pvfs_generic_fillattr(idmap, request_mask, inode, stat);
	if (PVFS_I(inode)->blksize)
		stat->blksize = PVFS_I(inode)->blksize;
	return 0;
}

int pvfs_setattr(PVFS_IDMAP_T *idmap, struct dentry *dentry, struct iattr *iattr)
{
	struct inode *inode = d_inode(dentry);
	const struct pvfsd_attr_resp *resp;
	struct pvfsd_setattr_req *req;
	struct pvfs_op *op;
	u32 mask = 0;
	int err;

	err = setattr_prepare(idmap, dentry, iattr);
	if (err)
		return err;

	if (iattr->ia_valid & ATTR_MODE)
		mask |= PVFSD_SET_MODE;
	if (iattr->ia_valid & ATTR_UID)
		mask |= PVFSD_SET_UID;
	if (iattr->ia_valid & ATTR_GID)
		mask |= PVFSD_SET_GID;
	if (iattr->ia_valid & ATTR_ATIME)
		mask |= (iattr->ia_valid & ATTR_ATIME_SET) ? PVFSD_SET_ATIME : PVFSD_SET_ATIME_NOW;
	if (iattr->ia_valid & ATTR_MTIME)
		mask |= (iattr->ia_valid & ATTR_MTIME_SET) ? PVFSD_SET_MTIME : PVFSD_SET_MTIME_NOW;
	if ((iattr->ia_valid & ATTR_SIZE) && S_ISREG(inode->i_mode)) {
		mask |= PVFSD_SET_SIZE;
		/* what is dirty below the new size must reach the servers first */
		err = filemap_write_and_wait(inode->i_mapping);
		if (err)
			return err;
	}
	if (!mask)
		return 0;

	op = pvfs_op_new(PVFS_SB(inode->i_sb), PVFSD_OP_SETATTR, sizeof(*req), sizeof(*resp));
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	if ((iattr->ia_valid & ATTR_FORCE) && mask == PVFSD_SET_MODE &&
	    (iattr->ia_mode & 07777) == (inode->i_mode & 07777 & ~(S_ISUID | S_ISGID))) {
		/*
		 * The VFS clears setuid/setgid after another user's write or
		 * chown (ATTR_FORCE: it already decided).  The server lets only
		 * the owner change the mode, so this change is asked for in the
		 * owner's name, as the kernel is trusted to assert users.
		 */
		req->common.fsuid = from_kuid(&init_user_ns, inode->i_uid);
		req->common.fsgid = from_kgid(&init_user_ns, inode->i_gid);
	}
	/*
	 * Through a file open for writing (ftruncate): the open decides, as on
	 * a local file system, and the servers check that it is held.
	 */
	if ((iattr->ia_valid & ATTR_FILE) && iattr->ia_file &&
	    (iattr->ia_file->f_mode & FMODE_WRITE))
		req->common.flags |= PVFSD_REQ_BY_FILE;
	req->handle = PVFS_I(inode)->handle;
	req->mask = mask;
	req->mode = iattr->ia_mode & 07777;
	req->uid = from_kuid(&init_user_ns, iattr->ia_uid);
	req->gid = from_kgid(&init_user_ns, iattr->ia_gid);
	req->size = iattr->ia_size;
	req->atime.sec = iattr->ia_atime.tv_sec;
	req->atime.nsec = iattr->ia_atime.tv_nsec;
	req->mtime.sec = iattr->ia_mtime.tv_sec;
	req->mtime.nsec = iattr->ia_mtime.tv_nsec;
	err = pvfs_op_run(op);
	if (!err) {
		resp = pvfs_op_resp(op);
		if (mask & PVFSD_SET_SIZE)
			truncate_setsize(inode, iattr->ia_size);
		err = pvfs_update_inode(inode, &resp->attr);
	}
	if (err == -EIO) {
		/* the server may have made the change: ask it next time */
		pvfs_attr_stale(inode);
		PVFS_I(inode)->perm_time = 0;
	}
	pvfs_op_put(op);
	return err;
}

int pvfs_permission(PVFS_IDMAP_T *idmap, struct inode *inode, int mask)
{
	struct pvfs_inode_info *pi = PVFS_I(inode);
	int err;

	/*
	 * Only read, write and execute depend on the mode; a check without them
	 * (MAY_OPEN of a file just created, with noac) needs no GETATTR.
	 */
	if ((mask & (MAY_READ | MAY_WRITE | MAY_EXEC)) &&
	    (!pi->perm_time || time_after_eq(jiffies, pi->perm_time + pvfs_attr_timeout(inode)))) {
		if (mask & MAY_NOT_BLOCK)
			return -ECHILD;
		err = pvfs_revalidate(inode, false);
		if (err)
			return err;
	}
	return generic_permission(idmap, inode, mask);
}

const struct inode_operations pvfs_file_iops = {
	.getattr = pvfs_getattr,
	.setattr = pvfs_setattr,
	.permission = pvfs_permission,
	.listxattr = pvfs_listxattr,
};

const struct inode_operations pvfs_special_iops = {
	.getattr = pvfs_getattr,
	.setattr = pvfs_setattr,
	.permission = pvfs_permission,
	.listxattr = pvfs_listxattr,
};

/* the operations a new inode gets from its type */
static void pvfs_set_ops(struct inode *inode, const struct pvfsd_attr *attr)
{
	switch (inode->i_mode & S_IFMT) {
	case S_IFREG:
		inode->i_op = &pvfs_file_iops;
		inode->i_fop = &pvfs_file_fops;
		inode->i_mapping->a_ops = &pvfs_aops;
		break;
	case S_IFDIR:
		inode->i_op = &pvfs_dir_iops;
		inode->i_fop = &pvfs_dir_fops;
		break;
	case S_IFLNK:
		inode->i_op = &pvfs_symlink_iops;
		inode_nohighmem(inode);
		break;
	default:
		inode->i_op = &pvfs_special_iops;
		init_special_inode(inode, inode->i_mode, new_decode_dev((u32)attr->rdev));
		break;
	}
}

static int pvfs_inode_test(struct inode *inode, void *data)
{
	return PVFS_I(inode)->handle == *(u64 *)data;
}

static int pvfs_inode_set(struct inode *inode, void *data)
{
	PVFS_I(inode)->handle = *(u64 *)data;
	inode->i_ino = (unsigned long)*(u64 *)data;
	return 0;
}

struct inode *pvfs_iget(struct super_block *sb, const struct pvfsd_attr *attr)
{
	u64 handle = attr->handle;
	struct inode *inode;
	int err;

	inode = iget5_locked(sb, (unsigned long)(handle ^ (handle >> 32)), pvfs_inode_test,
			     pvfs_inode_set, &handle);
	if (!inode)
		return ERR_PTR(-ENOMEM);
	if (!(inode->i_state & I_NEW)) {
		err = pvfs_update_inode(inode, attr);
		if (err) {
			iput(inode);
			return ERR_PTR(err);
		}
		return inode;
	}
	inode->i_mode = pvfs_type_bits(attr->type);
	pvfs_update_inode(inode, attr);
	pvfs_set_ops(inode, attr);
	unlock_new_inode(inode);
	return inode;
}
