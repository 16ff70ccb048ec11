// SPDX-License-Identifier: GPL-2.0
/*
 * pvfs.ko: module entry points.  The module registers the "pvfs" file
 * system type and the /dev/pvfsd channel to the client daemon.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/init.h>
#include <linux/module.h>

#include "pvfs.h"
#include "pvfs/pvfsd_dev.h"

static int __init pvfs_init(void)
{
	int err;

	err = pvfs_inode_cache_init();
	if (err)
		return err;

	err = pvfs_op_init();
	if (err)
		goto out_inode_cache_exit;

	err = pvfs_dev_init();
	if (err)
		goto out_op_exit;

	err = pvfs_fs_init();
	if (err)
		goto out_dev_exit;

	pr_info("loaded (channel protocol %u.%u)\n", PVFSD_DEV_MAJOR, PVFSD_DEV_MINOR);
	return 0;

out_dev_exit:
	pvfs_dev_exit();
out_op_exit:
	pvfs_op_exit();
out_inode_cache_exit:
	pvfs_inode_cache_exit();
	return err;
}

static void __exit pvfs_exit(void)
{
	pvfs_fs_exit();
	pvfs_dev_exit();
	pvfs_op_exit();
	pvfs_inode_cache_exit();
	pr_info("unloaded\n");
}

module_init(pvfs_init);
module_exit(pvfs_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("pvfs parallel file system client");
MODULE_AUTHOR("The pvfs developers");
