/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internal header of pvfs.ko: what the module's files share.
 * The ABI towards pvfsd lives in include/pvfs/pvfsd_dev.h.
 */
#ifndef PVFS_KMOD_PVFS_H
#define PVFS_KMOD_PVFS_H

#include <linux/types.h>

/* dev.c: the /dev/pvfsd channel */
int pvfs_dev_init(void);
void pvfs_dev_exit(void);
bool pvfs_dev_daemon_attached(void);

/* super.c: the "pvfs" file system type */
int pvfs_fs_init(void);
void pvfs_fs_exit(void);

#endif /* PVFS_KMOD_PVFS_H */
