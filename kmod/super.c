// SPDX-License-Identifier: GPL-2.0
/*
 * The "pvfs" file system type.  Mounting goes through the fs_context API;
 * the source names the file system as tcp://host:port/fsname or
 * ib://host:port/fsname, and pvfsd connects to it when the ATTACH of the
 * new mount reaches it.  Every mount is its own superblock (its own
 * client in pvfsd), so one file system may be mounted several times.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/backing-dev.h>
#include <linux/fs.h>
#include <linux/fs_context.h>
#include <linux/fs_parser.h>
#include <linux/module.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/statfs.h>
#include <linux/string.h>

#include "pvfs.h"

/* Returns 0 when @source has the form scheme://host:port/fsname. */
static int pvfs_check_source(const char *source)
{
	const char *rest, *slash, *colon;

	if (strlen(source) > PVFSD_MAX_SOURCE)
		return -EINVAL;
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

/* ---- options ---- */

enum pvfs_param {
	Opt_acregmin,
	Opt_acregmax,
	Opt_acdirmin,
	Opt_acdirmax,
	Opt_noac,
	Opt_intr,
	Opt_nointr,
	Opt_sync,
	Opt_timeo,
	Opt_hard,
	Opt_soft,
	Opt_softerr,
	Opt_retrans,
	Opt_devices,
	Opt_nodevices,
	Opt_key,
};

static const struct fs_parameter_spec pvfs_fs_parameters[] = {
	fsparam_u32("acregmin", Opt_acregmin),
	fsparam_u32("acregmax", Opt_acregmax),
	fsparam_u32("acdirmin", Opt_acdirmin),
	fsparam_u32("acdirmax", Opt_acdirmax),
	fsparam_flag("noac", Opt_noac),
	fsparam_flag("intr", Opt_intr),
	fsparam_flag("nointr", Opt_nointr),
	fsparam_flag("sync", Opt_sync),
	fsparam_u32("timeo", Opt_timeo),
	fsparam_flag("hard", Opt_hard),
	fsparam_flag("soft", Opt_soft),
	fsparam_flag("softerr", Opt_softerr),
	fsparam_u32("retrans", Opt_retrans),
	fsparam_flag("devices", Opt_devices),
	fsparam_flag("nodevices", Opt_nodevices),
	fsparam_string("key", Opt_key),
	{}};

/* Longest a cache timeout or the grace time may be: a day. */
#define PVFS_MAX_SECONDS 86400u
/* timeo * (retrans + 1) stays within 32 bits of seconds */
#define PVFS_MAX_RETRANS 1000u

static void pvfs_default_opts(struct pvfs_mount_opts *opts)
{
	/* NFS's defaults for the attribute caches */
	opts->acregmin = 3;
	opts->acregmax = 60;
	opts->acdirmin = 30;
	opts->acdirmax = 60;
	opts->noac = false;
	opts->intr = false;
	opts->sync = false;
	opts->timeo = 30;
	opts->soft = false;
	opts->softerr = false;
	opts->retrans = 2;
	opts->devices = false;
	opts->key = NULL;
}

/*
 * key=PATH goes to pvfsd in ATTACH's comma-separated options text, so it
 * holds no comma; absolute, as pvfsd's working directory is none of the
 * mounter's business.
 */
static int pvfs_parse_key(struct fs_context *fc, struct pvfs_mount_opts *opts,
			  struct fs_parameter *param)
{
	const char *path = param->string;

	if (path[0] != '/')
		return invalfc(fc, "key=%s: the key file must be an absolute path", path);
	if (strlen(path) > PVFSD_MAX_SOURCE)
		return invalfc(fc, "key=: the path is longer than %u bytes", PVFSD_MAX_SOURCE);
	if (strchr(path, ','))
		return invalfc(fc, "key=%s: the path may not contain a comma", path);
	kfree(opts->key);
	opts->key = param->string;
	param->string = NULL;
	return 0;
}

static int pvfs_parse_param(struct fs_context *fc, struct fs_parameter *param)
{
	struct pvfs_mount_opts *opts = fc->fs_private;
	struct fs_parse_result result;
	int opt;

	opt = vfs_parse_fs_param_source(fc, param);
	if (opt != -ENOPARAM)
		return opt;

	opt = fs_parse(fc, pvfs_fs_parameters, param, &result);
	if (opt < 0)
		return opt;

	switch (opt) {
	case Opt_acregmin:
	case Opt_acregmax:
	case Opt_acdirmin:
	case Opt_acdirmax:
		if (result.uint_32 > PVFS_MAX_SECONDS)
			return invalfc(fc, "%s=%u: at most %u seconds", param->key, result.uint_32,
				       PVFS_MAX_SECONDS);
		if (opt == Opt_acregmin)
			opts->acregmin = result.uint_32;
		else if (opt == Opt_acregmax)
			opts->acregmax = result.uint_32;
		else if (opt == Opt_acdirmin)
			opts->acdirmin = result.uint_32;
		else
			opts->acdirmax = result.uint_32;
		break;
	case Opt_noac:
		opts->noac = true;
		break;
	case Opt_intr:
		opts->intr = true;
		break;
	case Opt_nointr:
		opts->intr = false;
		break;
	case Opt_sync:
		opts->sync = true;
		break;
	case Opt_timeo:
		if (result.uint_32 < 1 || result.uint_32 > PVFS_MAX_SECONDS)
			return invalfc(fc, "timeo=%u: 1 to %u seconds", result.uint_32,
				       PVFS_MAX_SECONDS);
		opts->timeo = result.uint_32;
		break;
	case Opt_hard:
		opts->soft = false;
		opts->softerr = false;
		break;
	case Opt_soft:
		opts->soft = true;
		opts->softerr = false;
		break;
	case Opt_softerr:
		/* as NFS: soft, with ETIMEDOUT instead of EIO */
		opts->soft = true;
		opts->softerr = true;
		break;
	case Opt_retrans:
		if (result.uint_32 > PVFS_MAX_RETRANS)
			return invalfc(fc, "retrans=%u: at most %u", result.uint_32,
				       PVFS_MAX_RETRANS);
		opts->retrans = result.uint_32;
		break;
	case Opt_devices:
		opts->devices = true;
		break;
	case Opt_nodevices:
		opts->devices = false;
		break;
	case Opt_key:
		return pvfs_parse_key(fc, opts, param);
	}
	return 0;
}

static int pvfs_check_opts(struct fs_context *fc, const struct pvfs_mount_opts *opts)
{
	if (opts->acregmin > opts->acregmax)
		return invalfc(fc, "acregmin=%u is above acregmax=%u", opts->acregmin,
			       opts->acregmax);
	if (opts->acdirmin > opts->acdirmax)
		return invalfc(fc, "acdirmin=%u is above acdirmax=%u", opts->acdirmin,
			       opts->acdirmax);
	return 0;
}

static int pvfs_show_options(struct seq_file *m, struct dentry *root)
{
	const struct pvfs_sb_info *sbi = root->d_sb->s_fs_info;
	const struct pvfs_mount_opts *opts = &sbi->opts;

	if (opts->noac)
		seq_puts(m, ",noac");
	else
		seq_printf(m, ",acregmin=%u,acregmax=%u,acdirmin=%u,acdirmax=%u", opts->acregmin,
			   opts->acregmax, opts->acdirmin, opts->acdirmax);
	if (opts->intr)
		seq_puts(m, ",intr");
	if (opts->softerr)
		seq_puts(m, ",softerr");
	else if (opts->soft)
		seq_puts(m, ",soft");
	else
		seq_puts(m, ",hard");
	seq_printf(m, ",timeo=%u,retrans=%u", opts->timeo, opts->retrans);
	if (opts->devices)
		seq_puts(m, ",devices");
	if (opts->key)
		seq_show_option(m, "key", opts->key);
	return 0;
}

/*
 * What pvfsd needs of the options, as ATTACH's options text: the daemon
 * retries and gives up by the same policy (docs/pvfsd.md).
 */
static char *pvfs_daemon_options(const struct pvfs_mount_opts *opts)
{
	return kasprintf(GFP_KERNEL, "%s,timeo=%u,retrans=%u%s%s",
			 opts->softerr ? "soft,softerr"
			 : opts->soft  ? "soft"
				       : "hard",
			 opts->timeo, opts->retrans, opts->key ? ",key=" : "",
			 opts->key ? opts->key : "");
}

/* ---- the superblock ---- */

static int pvfs_statfs(struct dentry *dentry, struct kstatfs *buf)
{
	struct pvfs_sb_info *sbi = dentry->d_sb->s_fs_info;
	const struct pvfsd_statfs_resp *r;
	struct pvfsd_handle_req *req;
	struct pvfs_op *op;
	int err;

	op = pvfs_op_new(sbi, PVFSD_OP_STATFS, sizeof(*req), sizeof(*r));
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->handle = sbi->root_handle;
	err = pvfs_op_run(op);
	if (!err) {
		r = pvfs_op_resp(op);
		buf->f_type = PVFS_SUPER_MAGIC;
		buf->f_bsize = r->bsize;
		buf->f_frsize = r->bsize;
		buf->f_blocks = r->blocks;
		buf->f_bfree = r->bfree;
		buf->f_bavail = r->bavail;
		buf->f_files = r->files;
		buf->f_ffree = r->ffree;
		buf->f_namelen = min(r->namelen, sbi->max_name);
		buf->f_fsid = u64_to_fsid(sbi->fs_id);
	}
	pvfs_op_put(op);
	return err;
}

static void pvfs_umount_begin(struct super_block *sb)
{
	pvfs_mount_abort(sb->s_fs_info);
}

static const struct super_operations pvfs_super_ops = {
	.alloc_inode = pvfs_alloc_inode,
	.free_inode = pvfs_free_inode,
	.drop_inode = generic_delete_inode,
	.statfs = pvfs_statfs,
	.show_options = pvfs_show_options,
	.umount_begin = pvfs_umount_begin,
};

/* Connects the new mount through pvfsd: its root, fs id and limits. */
static int pvfs_attach(struct fs_context *fc, struct pvfs_sb_info *sbi, struct pvfsd_attr *root)
{
	size_t source_len = strlen(sbi->source);
	size_t options_len = strlen(sbi->daemon_options);
	const struct pvfsd_attach_resp *resp;
	struct pvfsd_attach_req *req;
	struct pvfs_op *op;
	char *tail;
	int err;

	op = pvfs_op_new(sbi, PVFSD_OP_ATTACH, sizeof(*req) + source_len + options_len,
			 sizeof(*resp));
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->source_len = source_len;
	req->options_len = options_len;
	req->client_id = sbi->client_id;
	tail = (char *)(req + 1);
	memcpy(tail, sbi->source, source_len);
	memcpy(tail + source_len, sbi->daemon_options, options_len);

	err = pvfs_op_run(op);
	if (err && sbi->opts.key) {
		errorfc(fc,
			"pvfsd could not attach %s with key %s: error %d (pvfsd's log says why)",
			sbi->source, sbi->opts.key, err);
	} else if (err) {
		errorfc(fc, "pvfsd could not attach %s: error %d", sbi->source, err);
	} else {
		resp = pvfs_op_resp(op);
		*root = resp->root;
		sbi->root_handle = resp->root.handle;
		sbi->fs_id = resp->fs_id;
		sbi->max_name = resp->max_name;
	}
	pvfs_op_put(op);
	return err;
}

static int pvfs_fill_super(struct super_block *sb, struct fs_context *fc)
{
	struct pvfs_mount_opts *opts = fc->fs_private;
	struct pvfs_sb_info *sbi;
	struct pvfsd_attr root_attr;
	struct inode *root;
	int err;

	sbi = kzalloc(sizeof(*sbi), GFP_KERNEL);
	if (!sbi)
		return -ENOMEM;
	sb->s_fs_info = sbi;
	sbi->sb = sb;
	pvfs_open_init(sbi);
	sbi->opts = *opts;
	opts->key = NULL; /* the superblock's now */
	if (fc->sb_flags & SB_SYNCHRONOUS)
		sbi->opts.sync = true;
	sbi->source = kstrdup(fc->source, GFP_KERNEL);
	sbi->daemon_options = pvfs_daemon_options(&sbi->opts);
	if (!sbi->source || !sbi->daemon_options)
		return -ENOMEM;

	sb->s_magic = PVFS_SUPER_MAGIC;
	sb->s_op = &pvfs_super_ops;
	sb->s_d_op = &pvfs_dentry_ops;
	sb->s_xattr = pvfs_xattr_handlers;
	sb->s_time_gran = 1;
	sb->s_maxbytes = MAX_LFS_FILESIZE;
	sb->s_blocksize = PAGE_SIZE;
	sb->s_blocksize_bits = PAGE_SHIFT;
	if (sbi->opts.sync)
		sb->s_flags |= SB_SYNCHRONOUS;
	/*
	 * Device nodes on a network file system are whatever any client made
	 * them: opening one stays refused unless the mount asks for devices
	 * (mount.pvfs passes it for -o dev), also for a mount(2) that never
	 * went through mount.pvfs and so lacks nodev.
	 */
	if (!sbi->opts.devices)
		sb->s_iflags |= SB_I_NODEV;

	/*
	 * A bdi of its own: writeback, and readahead of PVFS_RA_BYTES, so that
	 * a sequential reader has several slot-sized READs in flight.
	 */
	err = super_setup_bdi(sb);
	if (err)
		return err;
	/*
	 * Writeback from the first MiBs of a file on: the writer's copies into
	 * the page cache overlap the WRITEs of what it wrote before, instead of
	 * the whole file going out at fsync or close (the global dirty limits
	 * are far above most files).  strictlimit makes the mount's own share
	 * of the dirty limit count, as FUSE does; admins tune the share in
	 * /sys/class/bdi/pvfs-N/max_ratio.  bench-kernel: 1 MiB writes of a
	 * 256 MiB file went from about 80 to 105 MB/s at 10%.
	 */
	sb->s_bdi->capabilities |= BDI_CAP_STRICTLIMIT;
	err = bdi_set_max_ratio(sb->s_bdi, PVFS_DIRTY_RATIO);
	if (err)
		return err;
	if (pvfs_slot_size()) {
		sb->s_bdi->ra_pages = max_t(size_t, PVFS_RA_BYTES, pvfs_slot_size()) >> PAGE_SHIFT;
		sb->s_bdi->io_pages = pvfs_slot_size() >> PAGE_SHIFT;
	}

	err = pvfs_mount_register(sbi);
	if (err) {
		errorfc(fc, "no pvfsd attached to /dev/pvfsd");
		return err;
	}
	err = pvfs_attach(fc, sbi, &root_attr);
	if (err)
		return err;

	root = pvfs_iget(sb, &root_attr);
	if (IS_ERR(root))
		return PTR_ERR(root);
	sb->s_root = d_make_root(root);
	if (!sb->s_root)
		return -ENOMEM;
	return 0;
}

static int pvfs_get_tree(struct fs_context *fc)
{
	int err;

	if (!fc->source)
		return invalfc(fc, "no source given; expected tcp://host:port/fsname");

	if (pvfs_check_source(fc->source))
		return invalfc(
			fc,
			"bad source '%s'; expected tcp://host:port/fsname or ib://host:port/fsname",
			fc->source);

	err = pvfs_check_opts(fc, fc->fs_private);
	if (err)
		return err;

	if (!pvfs_dev_daemon_attached()) {
		errorfc(fc, "no pvfsd attached to /dev/pvfsd");
		return -ENOTCONN;
	}

	return get_tree_nodev(fc, pvfs_fill_super);
}

static int pvfs_reconfigure(struct fs_context *fc)
{
	struct pvfs_sb_info *sbi = fc->root->d_sb->s_fs_info;
	struct pvfs_mount_opts *opts = fc->fs_private;
	int err;

	err = pvfs_check_opts(fc, opts);
	if (err)
		return err;
	/*
	 * The key is the mount's identity towards the servers: the same one
	 * again (mount(8) passes fstab's options on remount) is fine.
	 */
	if (opts->key && (!sbi->opts.key || strcmp(opts->key, sbi->opts.key)))
		return invalfc(fc, "key cannot change on remount");
	/* pvfsd got these in ATTACH: they stay what the mount began with */
	if (opts->soft != sbi->opts.soft || opts->softerr != sbi->opts.softerr ||
	    opts->retrans != sbi->opts.retrans || opts->timeo != sbi->opts.timeo ||
	    opts->devices != sbi->opts.devices)
		return invalfc(
			fc,
			"hard, soft, softerr, timeo, retrans and devices cannot change on remount");
	/* the cache timeouts and intr may change; sync follows flags */
	opts->sync = !!(fc->sb_flags & SB_SYNCHRONOUS);
	kfree(opts->key);
	opts->key = sbi->opts.key;
	sbi->opts = *opts;
	opts->key = NULL; /* still the superblock's */
	return 0;
}

static void pvfs_free_fc(struct fs_context *fc)
{
	struct pvfs_mount_opts *opts = fc->fs_private;

	if (opts)
		kfree(opts->key);
	kfree(opts);
}

static const struct fs_context_operations pvfs_context_ops = {
	.free = pvfs_free_fc,
	.parse_param = pvfs_parse_param,
	.get_tree = pvfs_get_tree,
	.reconfigure = pvfs_reconfigure,
};

static int pvfs_init_fs_context(struct fs_context *fc)
{
	struct pvfs_mount_opts *opts;

	opts = kzalloc(sizeof(*opts), GFP_KERNEL);
	if (!opts)
		return -ENOMEM;
	if (fc->purpose == FS_CONTEXT_FOR_RECONFIGURE) {
		const struct pvfs_sb_info *sbi = fc->root->d_sb->s_fs_info;

		*opts = sbi->opts;
		/* set only when the remount names one; the sbi keeps its own */
		opts->key = NULL;
	} else {
		pvfs_default_opts(opts);
	}
	fc->fs_private = opts;
	fc->ops = &pvfs_context_ops;
	return 0;
}

static void pvfs_kill_sb(struct super_block *sb)
{
	struct pvfs_sb_info *sbi = sb->s_fs_info;

	if (sbi)
		pvfs_open_stop(sbi);
	/* inodes go first: writing back their pages still needs the daemon */
	kill_anon_super(sb);
	if (!sbi)
		return;
	/* the last CLOSEs before the DETACH */
	pvfs_open_end(sbi);
	pvfs_mount_unregister(sbi);
	/* a HELLO until the unregistering may have queued it */
	cancel_work_sync(&sbi->reclaim_work);
	kfree(sbi->source);
	kfree(sbi->daemon_options);
	kfree(sbi->opts.key);
	kfree(sbi);
}

static struct file_system_type pvfs_fs_type = {
	.owner = THIS_MODULE,
	.name = "pvfs",
	.init_fs_context = pvfs_init_fs_context,
	.parameters = pvfs_fs_parameters,
	.kill_sb = pvfs_kill_sb,
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
