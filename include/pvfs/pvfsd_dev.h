/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The ABI between pvfs.ko and the client daemon pvfsd, spoken over the
 * character device /dev/pvfsd.  Plain C, shared by the kernel module and
 * user space.  Both ends run on the same host, so fields are fixed-width
 * integers in the host's byte order; structures have no implicit padding
 * (a unit test checks every size and offset).
 *
 * Versioning: PVFSD_DEV_VERSION changes whenever the meaning or layout of
 * anything in this file changes.  Each side refuses a peer of another
 * version with a clear error instead of guessing.
 */
#ifndef PVFS_PVFSD_DEV_H
#define PVFS_PVFSD_DEV_H

/* A C ABI in kernel style, compiled by C++ too: exempt from the C++ lint. */
/* NOLINTBEGIN */

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdint.h>
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
typedef int32_t __s32;
#endif

/* Name of the misc device, i.e. /dev/pvfsd.  Mode 0600, one opener. */
#define PVFSD_DEV_NAME "pvfsd"

/* "PVFS" read as a little-endian 32-bit integer. */
#define PVFSD_DEV_MAGIC 0x53465650u

/* Protocol version of this header. */
#define PVFSD_DEV_VERSION 1u

/*
 * Upper bound on one message (header + body).  Bulk file data never travels
 * in messages; it moves through buffers that pvfsd maps from the device.
 */
#define PVFSD_DEV_MAX_MSG 65536u

/*
 * Fixed header in front of every message in either direction.
 * A kernel-to-daemon message is an "upcall"; the daemon's answer, matched
 * by tag, is a "downcall".
 */
struct pvfsd_msg_hdr {
	__u32 magic;   /* PVFSD_DEV_MAGIC; anything else is rejected */
	__u16 version; /* PVFSD_DEV_VERSION of the sender */
	__u16 op;      /* operation code; a downcall repeats its upcall's op */
	__u64 tag;     /* chosen by the kernel, unique among pending upcalls;
			* the downcall carries the same tag */
	__u32 length;  /* bytes of the whole message, header included,
			* at most PVFSD_DEV_MAX_MSG */
	__s32 status;  /* downcall: 0 or a negative errno; upcall: 0 */
};

/* NOLINTEND */

#endif /* PVFS_PVFSD_DEV_H */
