// SPDX-License-Identifier: GPL-2.0
/*
 * Regular files: the page cache in front of the servers.  Data moves
 * between page-cache folios (or, for O_DIRECT, the caller's buffer) and a
 * data slot the daemon maps, one copy, in READ/WRITE requests of up to a
 * slot: readahead fills many folios per request and does not wait for
 * them (its window bounds how many are in flight); writeback batches
 * contiguous dirty folios into one and keeps up to PVFS_IO_DEPTH in
 * flight.  Either way pvfsd streams several slots at once.
 * Consistency is close-to-open, as in NFS: open revalidates the attributes
 * (dropping cached pages another client made stale), close writes dirty
 * pages back and reports errors.
 * Writeback never drops data it could not write for a passing reason (a
 * server or pvfsd away, a signal): those folios stay dirty, the flusher
 * retries them, and fsync and close wait, retrying, until they are written
 * or fail for good.  An error for good (ENOSPC, EIO...) goes to the
 * mapping's errseq, so fsync or close reports it once per open file
 * description, and the unwritten folios are dropped before the next read.
 * Locks (flock, POSIX) are the VFS's local ones: they hold among the
 * processes of one node only.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/mpage.h>
#include <linux/pagemap.h>
#include <linux/pagevec.h>
#include <linux/slab.h>
#include <linux/uio.h>
#include <linux/writeback.h>

#include "pvfs.h"

/* ---- one READ or WRITE through a slot ---- */

/*
 * A READ or WRITE of up to a slot at @pos.  With @may_wait false it does not
 * wait for a free slot (ERR_PTR(-EAGAIN)): a caller that holds slots of ops
 * in flight must not sleep for another, or callers could hold every slot
 * and wait for each other.
 */
static struct pvfs_op *pvfs_io_op(struct inode *inode, enum pvfsd_op opcode, loff_t pos, size_t len,
				  bool may_wait)
{
	struct pvfsd_io_req *req;
	struct pvfs_op *op;
	int err;

	op = pvfs_op_new(PVFS_SB(inode->i_sb), opcode, sizeof(*req), sizeof(struct pvfsd_io_resp));
	if (IS_ERR(op))
		return op;
	err = may_wait ? pvfs_op_get_slot(op) : pvfs_op_try_get_slot(op);
	if (err) {
		pvfs_op_put(op);
		return ERR_PTR(err);
	}
	req = pvfs_op_req(op);
	req->handle = PVFS_I(inode)->handle;
	req->offset = pos;
	req->length = min_t(size_t, len, pvfs_slot_size());
	req->slot = pvfs_op_slot(op);
	return op;
}

/* Waits for a started @op; returns the bytes done or a negative errno. */
static ssize_t pvfs_io_wait(struct pvfs_op *op)
{
	const struct pvfsd_io_resp *resp;
	int err = pvfs_op_wait(op);

	if (err)
		return err;
	resp = pvfs_op_resp(op);
	return resp->done;
}

/* Runs @op; returns the bytes done or a negative errno. */
static ssize_t pvfs_io_run(struct pvfs_op *op)
{
	int err = pvfs_op_start(op);

	return err ? err : pvfs_io_wait(op);
}

static size_t pvfs_io_len(struct pvfs_op *op)
{
	return ((struct pvfsd_io_req *)pvfs_op_req(op))->length;
}

/*
 * A READ into the page cache: readers never see past i_size, so zeros
 * beyond the end of the file do as well as a short count, and pvfsd need
 * not ask every data server for the file's size first.
 */
static struct pvfs_op *pvfs_page_read_op(struct inode *inode, loff_t pos, size_t len)
{
	struct pvfs_op *op = pvfs_io_op(inode, PVFSD_OP_READ, pos, len, true);

	if (!IS_ERR(op))
		((struct pvfsd_io_req *)pvfs_op_req(op))->common.flags |= PVFSD_REQ_ZERO_FILL;
	return op;
}

/* ---- reading into the page cache ---- */

/* Copies @done bytes of @src into @folio and zeroes the rest. */
static void pvfs_fill_folio(struct folio *folio, const char *src, size_t done)
{
	size_t size = folio_size(folio), off;

	for (off = 0; off < size; off += PAGE_SIZE) {
		char *dst = kmap_local_folio(folio, off);
		size_t n = off < done ? min_t(size_t, PAGE_SIZE, done - off) : 0;

		memcpy(dst, src + off, n);
		memset(dst + n, 0, PAGE_SIZE - n);
		kunmap_local(dst);
	}
}

/* Reads @folio (locked, not up to date) from the servers. */
static int pvfs_read_folio_sync(struct inode *inode, struct folio *folio)
{
	struct pvfs_op *op;
	ssize_t done;

	op = pvfs_page_read_op(inode, folio_pos(folio), folio_size(folio));
	if (IS_ERR(op))
		return PTR_ERR(op);
	done = pvfs_io_run(op);
	if (done >= 0) {
		pvfs_fill_folio(folio, pvfs_op_slot_addr(op), done);
		folio_mark_uptodate(folio);
	}
	pvfs_op_put(op);
	return done < 0 ? done : 0;
}

static int pvfs_read_folio(struct file *file, struct folio *folio)
{
	int err = pvfs_read_folio_sync(folio->mapping->host, folio);

	folio_unlock(folio);
	return err;
}

/*
 * Readahead does not wait for its READs: each READ carries the folios it
 * fills (locked, referenced), and its end fills them from the slot and
 * unlocks them, in pvfsd's write() of the answer (no thread waits per READ).
 * The reader returns as soon as the READs are sent, so the next window's
 * READs go out while it copies this one's data: a sequential reader keeps
 * pvfsd busy.  A READ that fails (grace time over, umount -f) leaves its
 * folios not up to date; the reader reads them again through read_folio,
 * which reports the error.
 */
struct pvfs_ra_read {
	loff_t start;
	unsigned int nr;
	struct folio *folios[];
};

static void pvfs_ra_read_end(struct pvfs_op *op)
{
	struct pvfs_ra_read *rd = pvfs_op_end_data(op);
	ssize_t done = pvfs_op_status(op);
	const char *src = pvfs_op_slot_addr(op);
	unsigned int i;

	if (!done)
		done = ((const struct pvfsd_io_resp *)pvfs_op_resp(op))->done;
	for (i = 0; i < rd->nr && done >= 0; i++) {
		struct folio *folio = rd->folios[i];
		loff_t off = folio_pos(folio) - rd->start;

		pvfs_fill_folio(folio, src + off, done > off ? done - off : 0);
		folio_mark_uptodate(folio);
	}
	/* the op first: once the folios are unlocked, umount may go on */
	pvfs_op_put(op);
	for (i = 0; i < rd->nr; i++) {
		folio_unlock(rd->folios[i]);
		folio_put(rd->folios[i]);
	}
	kfree(rd);
}

static void pvfs_readahead(struct readahead_control *rac)
{
	struct inode *inode = rac->mapping->host;
	size_t max_folios = pvfs_slot_size() >> PAGE_SHIFT;
	/*
	 * Where the next READ starts, kept here: readahead_count() still counts
	 * the folio readahead_folio() returned last until the next call.
	 */
	loff_t pos = readahead_pos(rac);
	size_t left = readahead_length(rac);
	struct pvfs_ra_read *rd;
	struct pvfs_op *op;
	struct folio *folio;
	size_t want, got;

	while (left) {
		rd = kmalloc(struct_size(rd, folios, max_folios), GFP_NOFS);
		if (!rd)
			return; /* the caller drops the folios left */
		op = pvfs_page_read_op(inode, pos, min_t(size_t, left, pvfs_slot_size()));
		if (IS_ERR(op)) {
			kfree(rd);
			return;
		}
		want = pvfs_io_len(op);
		rd->start = pos;
		rd->nr = 0;
		/* the folios of [pos, pos + want): pages, the mapping has no large folios */
		for (got = 0; got < want && rd->nr < max_folios; got += folio_size(folio)) {
			folio = readahead_folio(rac);
			if (!folio)
				break;
			folio_get(folio);
			rd->folios[rd->nr++] = folio;
		}
		pos += want;
		left -= min(left, want);
		if (pvfs_op_start_async(op, pvfs_ra_read_end, rd)) {
			/* never sent: the reader reads these through read_folio */
			pvfs_op_put(op);
			while (rd->nr) {
				folio = rd->folios[--rd->nr];
				folio_unlock(folio);
				folio_put(folio);
			}
			kfree(rd);
			return;
		}
	}
}

/* ---- writing through the page cache ---- */

static int pvfs_write_begin(struct file *file, struct address_space *mapping, loff_t pos,
			    unsigned int len, PVFS_WB_PAGE_T **pagep, void **fsdata)
{
	struct inode *inode = mapping->host;
	struct folio *folio;
	size_t from;
	int err;

	folio = pvfs_grab_folio(mapping, pos >> PAGE_SHIFT);
	if (!folio)
		return -ENOMEM;
	*pagep = pvfs_wb_from_folio(folio);
	if (folio_test_uptodate(folio))
		return 0;
	from = offset_in_folio(folio, pos);
	if (from == 0 && len >= folio_size(folio))
		return 0; /* all of it is overwritten */
	if (folio_pos(folio) >= i_size_read(inode)) {
		/* beyond the end: nothing to read */
		folio_zero_segments(folio, 0, from, from + len, folio_size(folio));
		return 0;
	}
	err = pvfs_read_folio_sync(inode, folio);
	if (err) {
		folio_unlock(folio);
		folio_put(folio);
	}
	return err;
}

static int pvfs_write_end(struct file *file, struct address_space *mapping, loff_t pos,
			  unsigned int len, unsigned int copied, PVFS_WB_PAGE_T *page, void *fsdata)
{
	struct folio *folio = pvfs_wb_to_folio(page);
	struct inode *inode = mapping->host;

	if (!folio_test_uptodate(folio)) {
		if (copied < len) {
			/* a short copy into a folio we did not read: retry */
			copied = 0;
			goto out;
		}
		folio_mark_uptodate(folio);
	}
	if (pos + copied > i_size_read(inode))
		i_size_write(inode, pos + copied);
	folio_mark_dirty(folio);
out:
	folio_unlock(folio);
	folio_put(folio);
	return copied;
}

/* Contiguous dirty folios gathered into one WRITE. */
struct pvfs_wb_batch {
	struct pvfs_op *op;
	loff_t start;
	size_t len;
	unsigned int nr;
	struct folio **folios;
};

/*
 * One writeback pass: the batch being filled is batches[(head + sent) %
 * PVFS_IO_DEPTH]; the @sent before it are WRITEs in flight, oldest first.
 */
struct pvfs_wb {
	struct inode *inode;
	unsigned int max; /* folios per batch */
	struct pvfs_wb_batch batches[PVFS_IO_DEPTH];
	unsigned int head;
	unsigned int sent;
	int err;
};

static struct pvfs_wb_batch *pvfs_wb_filling(struct pvfs_wb *wb)
{
	return &wb->batches[(wb->head + wb->sent) % PVFS_IO_DEPTH];
}

/*
 * Whether a WRITE that failed with @err may succeed when sent again: the
 * waiter was interrupted (the daemon answers a cancelled op -ECANCELED),
 * memory was short, or, on a hard mount, the daemon or a server was away.
 * Its folios stay dirty for the next pass.  A soft mount's daemon already
 * tried for timeo * (retrans + 1) and answers its limit as EIO (ETIMEDOUT
 * with softerr), as its grace does without a daemon: that is final, as are
 * ENOSPC, EDQUOT, EIO, ESTALE, EFBIG, EROFS... on any mount.
 */
static bool pvfs_wb_transient(const struct pvfs_sb_info *sbi, int err)
{
	switch (err) {
	case -EINTR:
	case -ERESTARTSYS:
	case -ERESTARTNOINTR:
	case -ERESTARTNOHAND:
	case -ERESTART_RESTARTBLOCK:
	case -ECANCELED:
	case -ENOMEM:
	case -EAGAIN:
		return true;
	case -ENOTCONN:
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -ECONNABORTED:
	case -ETIMEDOUT:
	case -EHOSTUNREACH:
	case -EHOSTDOWN:
	case -ENETUNREACH:
	case -ENETDOWN:
	case -ENETRESET:
	case -EPIPE:
	case -ESHUTDOWN:
		return !sbi->opts.soft;
	default:
		return false;
	}
}

/*
 * A WRITE failed for good: the error goes to the mapping once (each open
 * file description reports it once, at fsync or close), and the folios,
 * ended clean, must not be read as if the servers held them.
 */
static void pvfs_wb_fail(struct pvfs_wb *wb, int err)
{
	struct inode *inode = wb->inode;

	/* kernel-internal codes (ERESTARTSYS and above) mean nothing to a reader */
	if (-err >= ERESTARTSYS)
		err = -EIO;
	mapping_set_error(inode->i_mapping, err);
	set_bit(PVFS_INO_DATA_INVALID, &PVFS_I(inode)->flags);
	pvfs_attr_stale(inode);
	if (!wb->err)
		wb->err = err;
}

/*
 * Ends the writeback of @b's folios with @done bytes written or an error.
 * A folio is clean only once all of it was written.  After a transient
 * error, or past a short count, folios are dirtied again before their
 * writeback ends (truncation waits for the end, so it cannot slip in) and
 * the next pass sends them again: a short count is the daemon saying the
 * rest did not get there yet, and the retry reports the rest's error if
 * it has one.  A count of 0 (no progress and no errno) or above what was
 * sent is a daemon's fault: EIO.
 */
static void pvfs_wb_end(struct pvfs_wb *wb, struct pvfs_wb_batch *b, ssize_t done)
{
	struct address_space *mapping = wb->inode->i_mapping;
	bool transient = false;
	unsigned int i;

	if (done == 0 || done > (ssize_t)b->len)
		done = -EIO;
	if (done < 0 && pvfs_wb_transient(PVFS_SB(wb->inode->i_sb), done)) {
		transient = true;
		if (done != -ERESTARTSYS && done != -EINTR && done != -ECANCELED)
			pr_info_ratelimited(
				"inode %lu: WRITE at %lld failed (%zd); sent again later\n",
				wb->inode->i_ino, b->start, done);
	} else if (done < 0) {
		pvfs_wb_fail(wb, done);
	}
	if (transient || (done > 0 && (size_t)done < b->len)) {
		atomic_inc(&PVFS_I(wb->inode)->wb_retries);
		/* counted before any writeback ends: a waiter it wakes sees the count */
		smp_mb__after_atomic();
	}
	for (i = 0; i < b->nr; i++) {
		struct folio *folio = b->folios[i];
		loff_t end = min_t(loff_t, folio_pos(folio) + folio_size(folio), b->start + b->len);

		if (transient || (done > 0 && end - b->start > done))
			filemap_dirty_folio(mapping, folio);
		folio_end_writeback(folio);
		folio_put(folio);
	}
	pvfs_op_put(b->op);
	b->op = NULL;
	b->nr = 0;
	b->len = 0;
}

/* Waits for the oldest WRITE in flight. */
static void pvfs_wb_reap(struct pvfs_wb *wb)
{
	struct pvfs_wb_batch *b = &wb->batches[wb->head];

	pvfs_wb_end(wb, b, pvfs_io_wait(b->op));
	wb->head = (wb->head + 1) % PVFS_IO_DEPTH;
	wb->sent--;
}

/* Sends the batch being filled; at most PVFS_IO_DEPTH - 1 stay in flight. */
static void pvfs_wb_send(struct pvfs_wb *wb)
{
	struct pvfs_wb_batch *b = pvfs_wb_filling(wb);
	int err;

	if (!b->op)
		return;
	((struct pvfsd_io_req *)pvfs_op_req(b->op))->length = b->len;
	err = pvfs_op_start(b->op);
	if (err) {
		pvfs_wb_end(wb, b, err);
		return;
	}
	wb->sent++;
	if (wb->sent == PVFS_IO_DEPTH)
		pvfs_wb_reap(wb);
}

static int pvfs_wb_add(PVFS_WCP_T *page, struct writeback_control *wbc, void *data)
{
	struct folio *folio = pvfs_wcp_to_folio(page);
	struct pvfs_wb *wb = data;
	struct pvfs_wb_batch *b = pvfs_wb_filling(wb);
	loff_t size = i_size_read(wb->inode);
	loff_t pos = folio_pos(folio);
	size_t len;
	char *dst;
	size_t off;

	if (pos >= size) {
		/* truncated meanwhile: nothing to write */
		folio_unlock(folio);
		return 0;
	}
	len = min_t(loff_t, folio_size(folio), size - pos);
	if (b->op && (pos != b->start + b->len || b->nr == wb->max ||
		      b->len + folio_size(folio) > pvfs_slot_size())) {
		pvfs_wb_send(wb);
		b = pvfs_wb_filling(wb);
	}
	if (!b->op) {
		struct pvfs_op *op;

		op = pvfs_io_op(wb->inode, PVFSD_OP_WRITE, pos, pvfs_slot_size(), !wb->sent);
		if (op == ERR_PTR(-EAGAIN)) {
			/* every slot is taken: finish ours before waiting for one */
			while (wb->sent)
				pvfs_wb_reap(wb);
			op = pvfs_io_op(wb->inode, PVFSD_OP_WRITE, pos, pvfs_slot_size(), true);
		}
		if (IS_ERR(op)) {
			folio_redirty_for_writepage(wbc, folio);
			folio_unlock(folio);
			return PTR_ERR(op);
		}
		b->op = op;
		b->start = pos;
	}
	folio_start_writeback(folio);
	for (off = 0; off < len; off += PAGE_SIZE) {
		size_t n = min_t(size_t, PAGE_SIZE, len - off);

		dst = kmap_local_folio(folio, off);
		memcpy((char *)pvfs_op_slot_addr(b->op) + b->len + off, dst, n);
		kunmap_local(dst);
	}
	folio_get(folio);
	b->folios[b->nr++] = folio;
	b->len += len;
	folio_unlock(folio);
	/* a partial last folio ends the batch */
	if (len < folio_size(folio))
		pvfs_wb_send(wb);
	return 0;
}

static int pvfs_writepages(struct address_space *mapping, struct writeback_control *wbc)
{
	struct pvfs_wb *wb;
	struct folio **folios;
	unsigned int i;
	int err;

	if (!pvfs_slot_size())
		return -ENOTCONN;
	wb = kzalloc(sizeof(*wb), GFP_NOFS);
	if (!wb)
		return -ENOMEM;
	wb->inode = mapping->host;
	wb->max = pvfs_slot_size() / PAGE_SIZE;
	folios = kcalloc(array_size(wb->max, PVFS_IO_DEPTH), sizeof(*folios), GFP_NOFS);
	if (!folios) {
		kfree(wb);
		return -ENOMEM;
	}
	for (i = 0; i < PVFS_IO_DEPTH; i++)
		wb->batches[i].folios = folios + i * wb->max;
	err = write_cache_pages(mapping, wbc, pvfs_wb_add, wb);
	pvfs_wb_send(wb);
	while (wb->sent)
		pvfs_wb_reap(wb);
	err = err ? err : wb->err;
	kfree(folios);
	kfree(wb);
	pvfs_attr_stale(mapping->host);
	return err;
}

const struct address_space_operations pvfs_aops = {
	.read_folio = pvfs_read_folio,
	.readahead = pvfs_readahead,
	.write_begin = pvfs_write_begin,
	.write_end = pvfs_write_end,
	.writepages = pvfs_writepages,
	.dirty_folio = filemap_dirty_folio,
	/* O_DIRECT is served by read_iter/write_iter themselves */
	.direct_IO = noop_direct_IO,
};

/* ---- waiting for writeback ---- */

/* Pause before writeback is tried again: 100 ms, doubling up to 5 s. */
#define PVFS_WB_RETRY_MIN (HZ / 10)
#define PVFS_WB_RETRY_MAX (5 * HZ)

/* Waits for the writeback of [start, end] to end: killable, as the VFS's wait is not. */
static int pvfs_wait_writeback(struct address_space *mapping, loff_t start, loff_t end)
{
	pgoff_t index = start >> PAGE_SHIFT;
	pgoff_t last = end >> PAGE_SHIFT;
	struct folio_batch fbatch;
	unsigned int i, nr;
	int err = 0;

	folio_batch_init(&fbatch);
	while (!err) {
		nr = filemap_get_folios_tag(mapping, &index, last, PAGECACHE_TAG_WRITEBACK,
					    &fbatch);
		if (!nr)
			break;
		for (i = 0; i < nr && !err; i++)
			err = folio_wait_writeback_killable(fbatch.folios[i]);
		folio_batch_release(&fbatch);
		cond_resched();
	}
	return err;
}

/*
 * Writes [start, end] of @inode back and waits for it; with @file (fsync,
 * close) the error is the one this open file description has not seen yet
 * (errseq), else (O_DIRECT) the mapping's.  While a pass left folios dirty
 * after a transient failure (a server or pvfsd away), it waits and tries
 * again, so it returns once the data is on the servers or failed for good.
 * Every wait is killable (and interruptible on an "intr" mount); a signal
 * ends it with -EINTR or -ERESTARTSYS, which is returned, never stored.
 */
static int pvfs_write_and_wait(struct inode *inode, struct file *file, loff_t start, loff_t end)
{
	atomic_t *retries = &PVFS_I(inode)->wb_retries;
	unsigned long delay = PVFS_WB_RETRY_MIN;
	int seen, err;

	for (;;) {
		seen = atomic_read(retries);
		err = pvfs_wait_writeback(inode->i_mapping, start, end);
		if (err)
			return err;
		if (file)
			err = file_write_and_wait_range(file, start, end);
		else
			err = filemap_write_and_wait_range(inode->i_mapping, start, end);
		if (err || atomic_read(retries) == seen)
			return err;
		if (fatal_signal_pending(current))
			return -EINTR;
		if (PVFS_SB(inode->i_sb)->opts.intr && signal_pending(current))
			return -ERESTARTSYS;
		schedule_timeout_killable(delay);
		delay = min_t(unsigned long, delay * 2, PVFS_WB_RETRY_MAX);
	}
}

/*
 * A WRITE failed for good (pvfs_wb_fail): the folios it carried are clean
 * but hold bytes the servers lack.  Drop them before anyone reads them;
 * dirty folios (written since) stay, they go to the servers later.
 */
static void pvfs_drop_unwritten(struct inode *inode)
{
	if (test_and_clear_bit(PVFS_INO_DATA_INVALID, &PVFS_I(inode)->flags))
		invalidate_inode_pages2(inode->i_mapping);
}

/* ---- O_DIRECT: the caller's buffer to and from slots ---- */

static ssize_t pvfs_direct_io(struct kiocb *iocb, struct iov_iter *iter, bool write)
{
	struct inode *inode = file_inode(iocb->ki_filp);
	loff_t pos = iocb->ki_pos;
	ssize_t total = 0;
	int err;

	/*
	 * Dirty pages go to the servers first, all of them: one beyond the
	 * range may be what makes the file reach into it.
	 */
	err = pvfs_write_and_wait(inode, NULL, 0, LLONG_MAX);
	if (err)
		return err;
	while (iov_iter_count(iter)) {
		struct pvfs_op *op;
		size_t len;
		ssize_t done;

		op = pvfs_io_op(inode, write ? PVFSD_OP_WRITE : PVFSD_OP_READ, pos,
				iov_iter_count(iter), true);
		if (IS_ERR(op)) {
			err = PTR_ERR(op);
			break;
		}
		len = pvfs_io_len(op);
		if (write && copy_from_iter(pvfs_op_slot_addr(op), len, iter) != len) {
			pvfs_op_put(op);
			err = -EFAULT;
			break;
		}
		done = pvfs_io_run(op);
		if (done > 0 && !write && copy_to_iter(pvfs_op_slot_addr(op), done, iter) != done)
			done = -EFAULT;
		pvfs_op_put(op);
		if (done < 0) {
			err = done;
			break;
		}
		pos += done;
		total += done;
		if ((size_t)done < len)
			break; /* end of file */
	}
	if (write && total) {
		invalidate_inode_pages2_range(inode->i_mapping, iocb->ki_pos >> PAGE_SHIFT,
					      (pos - 1) >> PAGE_SHIFT);
		if (pos > i_size_read(inode))
			i_size_write(inode, pos);
		pvfs_attr_stale(inode);
	}
	iocb->ki_pos = pos;
	return total ? total : err;
}

/* ---- file operations ---- */

static int pvfs_open(struct inode *inode, struct file *file)
{
	int err = generic_file_open(inode, file);

	if (err)
		return err;
	pvfs_drop_unwritten(inode);
	/* OPEN or close-to-open's GETATTR: fresh attributes either way */
	return pvfs_open_get(inode, file);
}

int pvfs_open_created(struct inode *inode, struct file *file)
{
	/* the servers must hold it as any open file: OPEN, not just counted */
	return pvfs_open(inode, file);
}

int pvfs_open_held(struct inode *inode, struct file *file)
{
	/* the CREATE opened it on the servers and pvfs_open_adopt counted it */
	return generic_file_open(inode, file);
}

static int pvfs_release(struct inode *inode, struct file *file)
{
	struct address_space *mapping = inode->i_mapping;

	/*
	 * The last release on the mount: after its CLOSE the servers may
	 * destroy an unlinked file, so pages a shared mapping dirtied go
	 * first.  A failure is the flusher's to retry (or for good); the
	 * close goes anyway.
	 */
	if (pvfs_open_last(inode) && (mapping_tagged(mapping, PAGECACHE_TAG_DIRTY) ||
				      mapping_tagged(mapping, PAGECACHE_TAG_WRITEBACK)))
		pvfs_write_and_wait(inode, NULL, 0, LLONG_MAX);
	pvfs_open_release(inode);
	return 0;
}

static int pvfs_flush(struct file *file, fl_owner_t id)
{
	if (!(file->f_mode & FMODE_WRITE))
		return 0;
	return pvfs_write_and_wait(file_inode(file), file, 0, LLONG_MAX);
}

static int pvfs_fsync(struct file *file, loff_t start, loff_t end, int datasync)
{
	struct inode *inode = file_inode(file);
	struct pvfsd_fsync_req *req;
	struct pvfs_op *op;
	int err;

	err = pvfs_write_and_wait(inode, file, start, end);
	if (err)
		return err;
	op = pvfs_op_new(PVFS_SB(inode->i_sb), PVFSD_OP_FSYNC, sizeof(*req), 0);
	if (IS_ERR(op))
		return PTR_ERR(op);
	req = pvfs_op_req(op);
	req->handle = PVFS_I(inode)->handle;
	req->datasync = datasync;
	err = pvfs_op_run(op);
	pvfs_op_put(op);
	return err;
}

static ssize_t pvfs_read_iter(struct kiocb *iocb, struct iov_iter *to)
{
	struct inode *inode = file_inode(iocb->ki_filp);
	int err;

	if (!iov_iter_count(to))
		return 0;
	if (iocb->ki_flags & IOCB_DIRECT)
		return pvfs_direct_io(iocb, to, false);
	pvfs_drop_unwritten(inode);
	err = pvfs_revalidate(inode, false);
	if (err)
		return err;
	return generic_file_read_iter(iocb, to);
}

static ssize_t pvfs_write_iter(struct kiocb *iocb, struct iov_iter *from)
{
	struct inode *inode = file_inode(iocb->ki_filp);
	ssize_t ret;

	if (iocb->ki_flags & IOCB_APPEND) {
		/* append at the end as the servers know it */
		ret = pvfs_revalidate(inode, true);
		if (ret)
			return ret;
	}
	if (!(iocb->ki_flags & IOCB_DIRECT))
		return generic_file_write_iter(iocb, from);

	inode_lock(inode);
	ret = generic_write_checks(iocb, from);
	if (ret > 0) {
		int err = file_remove_privs(iocb->ki_filp);

		ret = err ? err : pvfs_direct_io(iocb, from, true);
	}
	inode_unlock(inode);
	if (ret > 0)
		ret = generic_write_sync(iocb, ret);
	return ret;
}

static loff_t pvfs_llseek(struct file *file, loff_t offset, int whence)
{
	struct inode *inode = file_inode(file);
	int err;

	if (whence == SEEK_END || whence == SEEK_DATA || whence == SEEK_HOLE) {
		err = pvfs_revalidate(inode, true);
		if (err)
			return err;
	}
	return generic_file_llseek(file, offset, whence);
}

static int pvfs_mmap(struct file *file, struct vm_area_struct *vma)
{
	pvfs_drop_unwritten(file_inode(file));
	return generic_file_mmap(file, vma);
}

const struct file_operations pvfs_file_fops = {
	.open = pvfs_open,
	.flush = pvfs_flush,
	.release = pvfs_release,
	.fsync = pvfs_fsync,
	.read_iter = pvfs_read_iter,
	.write_iter = pvfs_write_iter,
	.llseek = pvfs_llseek,
	.mmap = pvfs_mmap,
	.splice_read = pvfs_splice_read,
	.splice_write = iter_file_splice_write,
};
