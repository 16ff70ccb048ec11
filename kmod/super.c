// SPDX-License-Identifier: GPL-2.0
/*
 * The "pvfs" file system type.  Mounting goes through the fs_context API;
 * the source names the file system as tcp://host:port/fsname or
 * ib://host:port/fsname.  Superblock setup arrives with the kernel client
 * (issue 5): until then a well-formed mount fails with a precise errno and
 * a message in the mount's log, never by crashing or hanging.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/fs_context.h>
#include <linux/module.h>
#include <linux/string.h>

#include "pvfs.h"

/* Returns 0 when @source has the form scheme://host:port/fsname. */
static int pvfs_check_source(const char *source)
{
	const char *rest, *slash, *colon;

	if (strncmp(source, "tcp://", 6) == 0)
		rest = source + 6;
	else if (strncmp(source, "ib://", 5) == 0)
		rest = source + 5;
	else
		return -EINVAL;

	slash = strchr(rest, '/');
	if (!slash || slash == rest || slash[1] == '\0' || strchr(slash + 1, '/'))
		return -EINVAL;

	colon = strrchr(rest, ':');
	if (!colon || colon > slash || colon == rest || colon + 1 == slash)
		return -EINVAL;

	return 0;
}

static int pvfs_get_tree(struct fs_context *fc)
{
	if (!fc->source)
		return invalfc(fc, "no source given; expected tcp://host:port/fsname");

	if (pvfs_check_source(fc->source))
		return invalfc(
			fc,
			"bad source '%s'; expected tcp://host:port/fsname or ib://host:port/fsname",
			fc->source);

	if (!pvfs_dev_daemon_attached()) {
		errorfc(fc, "no pvfsd attached to /dev/pvfsd");
		return -ENOTCONN;
	}

	errorfc(fc, "this pvfs.ko cannot mount yet (kernel client not built)");
	return -EOPNOTSUPP;
}

static const struct fs_context_operations pvfs_context_ops = {
	.get_tree = pvfs_get_tree,
};

static int pvfs_init_fs_context(struct fs_context *fc)
{
	fc->ops = &pvfs_context_ops;
	return 0;
}

static struct file_system_type pvfs_fs_type = {
	.owner = THIS_MODULE,
	.name = "pvfs",
	.init_fs_context = pvfs_init_fs_context,
	.kill_sb = kill_anon_super,
};

int pvfs_fs_init(void)
{
	int err = register_filesystem(&pvfs_fs_type);

	if (err)
		pr_err("cannot register file system type: %d\n", err);
	return err;
}

void pvfs_fs_exit(void)
{
	unregister_filesystem(&pvfs_fs_type);
}

MODULE_ALIAS_FS("pvfs");
