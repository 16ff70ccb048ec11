/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What differs between the kernels pvfs.ko builds for (Debian's 6.1 and
 * 6.12): id-mapping arguments, inode timestamp accessors, write_begin's
 * page or folio, writepage_t's page or folio, splice_read, vm_flags.
 */
#ifndef PVFS_KMOD_COMPAT_H
#define PVFS_KMOD_COMPAT_H

#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/pagemap.h>
#include <linux/version.h>
#include <linux/writeback.h>

/* idmaps replaced user namespaces in 6.3; generic_fillattr takes the request mask from 6.6 on */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
#define PVFS_IDMAP_T struct mnt_idmap
#define PVFS_NOP_IDMAP (&nop_mnt_idmap)

static inline void pvfs_generic_fillattr(struct mnt_idmap *idmap, u32 request_mask,
					 struct inode *inode, struct kstat *stat)
{
	generic_fillattr(idmap, request_mask, inode, stat);
}
#else
#define PVFS_IDMAP_T struct user_namespace
#define PVFS_NOP_IDMAP (&init_user_ns)

static inline void pvfs_generic_fillattr(struct user_namespace *idmap, u32 request_mask,
					 struct inode *inode, struct kstat *stat)
{
	generic_fillattr(idmap, inode, stat);
}
#endif

/* vm_flags is read-only from 6.3 on */
static inline void pvfs_vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, flags);
#else
	vma->vm_flags |= flags;
#endif
}

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 7, 0)
static inline void pvfs_set_inode_times(struct inode *inode, struct timespec64 atime,
					struct timespec64 mtime, struct timespec64 ctime)
{
	inode_set_atime_to_ts(inode, atime);
	inode_set_mtime_to_ts(inode, mtime);
	inode_set_ctime_to_ts(inode, ctime);
}

static inline struct timespec64 pvfs_inode_mtime(const struct inode *inode)
{
	return inode_get_mtime(inode);
}
#else
static inline void pvfs_set_inode_times(struct inode *inode, struct timespec64 atime,
					struct timespec64 mtime, struct timespec64 ctime)
{
	inode->i_atime = atime;
	inode->i_mtime = mtime;
	inode->i_ctime = ctime;
}

static inline struct timespec64 pvfs_inode_mtime(const struct inode *inode)
{
	return inode->i_mtime;
}
#endif

/* write_begin hands back a folio (6.12) or a page (6.1) */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0)
#define PVFS_WB_PAGE_T struct folio
#define pvfs_wb_to_folio(p) (p)
#define pvfs_wb_from_folio(f) (f)
#else
#define PVFS_WB_PAGE_T struct page
#define pvfs_wb_to_folio(p) page_folio(p)
#define pvfs_wb_from_folio(f) (&(f)->page)
#endif

/* writepage_t of write_cache_pages takes a folio from 6.3 on */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
#define PVFS_WCP_T struct folio
#define pvfs_wcp_to_folio(p) (p)
#else
#define PVFS_WCP_T struct page
#define pvfs_wcp_to_folio(p) page_folio(p)
#endif

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 5, 0)
#define pvfs_splice_read filemap_splice_read
#else
#define pvfs_splice_read generic_file_splice_read
#endif

#ifndef FGP_WRITEBEGIN
#define FGP_WRITEBEGIN (FGP_LOCK | FGP_WRITE | FGP_CREAT | FGP_STABLE)
#endif

/* __filemap_get_folio returns ERR_PTR from 6.4 on, NULL before */
static inline struct folio *pvfs_grab_folio(struct address_space *mapping, pgoff_t index)
{
	struct folio *folio =
		__filemap_get_folio(mapping, index, FGP_WRITEBEGIN, mapping_gfp_mask(mapping));

	if (IS_ERR_OR_NULL(folio))
		return NULL;
	return folio;
}

#endif /* PVFS_KMOD_COMPAT_H */
