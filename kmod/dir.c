// SPDX-License-Identifier: GPL-2.0
/*
 * Directory listing.  The file position is the server's cookie of the last
 * entry returned, plus 2 (0 and 1 are "." and ".."), so telldir/seekdir
 * return to the same place however the directory changes meanwhile; the
 * end of the directory is position LLONG_MAX.  Entries come in READDIR
 * pages of a few KiB.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>

#include "pvfs.h"

#define PVFS_DIR_EOF LLONG_MAX
/* bytes of entries asked per READDIR */
#define PVFS_READDIR_BYTES 16384u

static unsigned char pvfs_dt_type(u32 type)
{
	switch (type) {
	case PVFSD_TYPE_REGULAR:
		return DT_REG;
	case PVFSD_TYPE_DIRECTORY:
		return DT_DIR;
	case PVFSD_TYPE_SYMLINK:
		return DT_LNK;
	case PVFSD_TYPE_FIFO:
		return DT_FIFO;
	case PVFSD_TYPE_SOCKET:
		return DT_SOCK;
	case PVFSD_TYPE_CHAR_DEVICE:
		return DT_CHR;
	case PVFSD_TYPE_BLOCK_DEVICE:
		return DT_BLK;
	default:
		return DT_UNKNOWN;
	}
}

/*
 * One READDIR page from @cookie on; returns 1 at the end, 2 when the
 * caller's buffer is full, 0 for more.
 */
static int pvfs_readdir_page(struct inode *dir, struct dir_context *ctx, u64 cookie)
{
	const struct pvfsd_readdir_resp *resp;
	struct pvfsd_readdir_req *req;
	const char *pos, *end;
	struct pvfs_op *op;
	u32 i;
	int err;

	op = pvfs_op_new(PVFS_SB(dir->i_sb), PVFSD_OP_READDIR, sizeof(*req),
			 sizeof(*resp) + PVFS_READDIR_BYTES);
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->handle = PVFS_I(dir)->handle;
	req->cookie = cookie;
	req->max_bytes = PVFS_READDIR_BYTES;
	err = pvfs_op_run(op);
	if (err)
		goto out;
	resp = pvfs_op_resp(op);
	/* the channel checked every entry and the total length */
	pos = (const char *)(resp + 1);
	end = (const char *)resp + pvfs_op_resp_len(op);
	for (i = 0; i < resp->count && pos < end; i++) {
		const struct pvfsd_dirent *de = (const void *)pos;

		if (de->cookie >= PVFS_DIR_EOF - 2) {
			err = -EOVERFLOW;
			goto out;
		}
		if (!dir_emit(ctx, (const char *)(de + 1), de->name_len, (ino_t)de->handle,
			      pvfs_dt_type(de->type))) {
			err = 2; /* the caller's buffer is full */
			goto out;
		}
		ctx->pos = de->cookie + 2;
		pos += ALIGN(sizeof(*de) + de->name_len, 8);
	}
	if (resp->eof) {
		ctx->pos = PVFS_DIR_EOF;
		err = 1;
	} else if (resp->count == 0) {
		err = -EIO; /* no progress and no end: do not loop */
	}
out:
	pvfs_op_put(op);
	return err;
}

static int pvfs_iterate(struct file *file, struct dir_context *ctx)
{
	struct inode *dir = file_inode(file);
	loff_t last = -1;
	int err;

	if (!dir_emit_dots(file, ctx))
		return 0;
	while (ctx->pos != PVFS_DIR_EOF && ctx->pos != last) {
		last = ctx->pos;
		err = pvfs_readdir_page(dir, ctx, ctx->pos - 2);
		if (err < 0)
			return err;
		if (err > 0)
			break;
	}
	return 0;
}

static int pvfs_dir_open(struct inode *inode, struct file *file)
{
	/* close-to-open: a listing starts from fresh attributes */
	return pvfs_revalidate(inode, false);
}

const struct file_operations pvfs_dir_fops = {
	.open = pvfs_dir_open,
	.read = generic_read_dir,
	.iterate_shared = pvfs_iterate,
	.llseek = generic_file_llseek,
	.fsync = noop_fsync,
};
