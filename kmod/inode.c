// SPDX-License-Identifier: GPL-2.0
/*
 * Inodes of pvfs: one per server handle.  Placeholder until the VFS side
 * lands: enough for a mount to have a root directory.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/slab.h>

#include "pvfs.h"

struct pvfs_inode_info {
	struct inode vfs_inode;
	u64 handle;
};

static struct kmem_cache *pvfs_inode_cachep;

const struct dentry_operations pvfs_dentry_ops = {};

static void pvfs_inode_init_once(void *obj)
{
	struct pvfs_inode_info *pi = obj;

	inode_init_once(&pi->vfs_inode);
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
	return &pi->vfs_inode;
}

void pvfs_free_inode(struct inode *inode)
{
	kmem_cache_free(pvfs_inode_cachep, container_of(inode, struct pvfs_inode_info, vfs_inode));
}

struct inode *pvfs_iget(struct super_block *sb, const struct pvfsd_attr *attr)
{
	struct inode *inode;

	if (attr->type != PVFSD_TYPE_DIRECTORY)
		return ERR_PTR(-EOPNOTSUPP);
	inode = new_inode(sb);
	if (!inode)
		return ERR_PTR(-ENOMEM);
	container_of(inode, struct pvfs_inode_info, vfs_inode)->handle = attr->handle;
	inode->i_ino = attr->handle;
	inode->i_mode = S_IFDIR | (attr->mode & 07777);
	inode->i_op = &simple_dir_inode_operations;
	inode->i_fop = &simple_dir_operations;
	set_nlink(inode, 2);
	return inode;
}
