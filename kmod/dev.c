// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/pvfsd: the channel between pvfs.ko and the client daemon.
 *
 * Exactly one daemon may hold the device open: a second opener would
 * split upcalls between two daemons that know nothing of each other.
 * Opening requires CAP_SYS_ADMIN on top of the 0600 mode, because the
 * opener answers file system requests on behalf of every local user.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitops.h>
#include <linux/capability.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>

#include "pvfs.h"
#include "pvfs/pvfsd_dev.h"

#define PVFS_DEV_OPEN_BIT 0

static unsigned long pvfs_dev_state;

bool pvfs_dev_daemon_attached(void)
{
	return test_bit(PVFS_DEV_OPEN_BIT, &pvfs_dev_state);
}

static int pvfs_dev_open(struct inode *inode, struct file *file)
{
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;

	if (test_and_set_bit_lock(PVFS_DEV_OPEN_BIT, &pvfs_dev_state))
		return -EBUSY;

	pr_info("daemon attached (pid %d)\n", task_tgid_nr(current));
	return nonseekable_open(inode, file);
}

static int pvfs_dev_release(struct inode *inode, struct file *file)
{
	pr_info("daemon detached\n");
	clear_bit_unlock(PVFS_DEV_OPEN_BIT, &pvfs_dev_state);
	return 0;
}

static const struct file_operations pvfs_dev_fops = {
	.owner = THIS_MODULE,
	.open = pvfs_dev_open,
	.release = pvfs_dev_release,
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
}
