/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The ABI between pvfs.ko and the client daemon pvfsd, spoken over the
 * character device /dev/pvfsd.  Plain C, shared by the kernel module and
 * user space.  Both ends run on the same host, so fields are fixed-width
 * integers in the host's byte order; structures have no implicit padding
 * (tests/unit/abi_test.cpp pins every size and offset).
 *
 * Versioning, as FUSE_INIT negotiates (major, minor, flags):
 *
 * - PVFSD_DEV_MAJOR, in every header's version field, names the layout of
 *   the header, HELLO and every body.  It changes when one of them changes
 *   incompatibly; each side refuses a peer of another major with a clear
 *   error naming both, instead of guessing.
 * - PVFSD_DEV_MINOR grows with each compatible addition: a new op, a new
 *   request flag or field the peer must understand, a field in what was
 *   padding.  Each such addition gets a PVFSD_FEAT_* bit.  HELLO carries
 *   each side's minor and the features it offers; both use the features
 *   both offered (the AND) and nothing else, so that a module and a daemon
 *   a minor apart work with what they have in common.  A side never sends
 *   a feature the peer did not offer, and never relies on its peer using
 *   one.  A later minor may append fields to HELLO: each side reads the
 *   fields it knows of a longer HELLO and ignores the rest.
 * - Hints a peer may ignore and still be right (PVFSD_REQ_ZERO_FILL,
 *   PVFSD_REQ_BY_FILE) need no bit.
 *
 * Traffic: the daemon read()s one upcall per call (kernel -> daemon) and
 * write()s one downcall per call (daemon -> kernel), each a struct
 * pvfsd_msg_hdr followed by the op's body.  A downcall answers the upcall
 * with the same tag and op.  File data never travels in messages: it moves
 * through the slots, a shared buffer the daemon maps with mmap() of the
 * device (docs/plan/kernel-client.md).
 *
 * Variable-length parts (names, symlink targets, xattr values, directory
 * entries) follow the fixed body as a "tail"; the fixed body says their
 * lengths, and the header's length must equal header + body + tail exactly.
 * Names are not NUL-terminated.
 */
#ifndef PVFS_PVFSD_DEV_H
#define PVFS_PVFSD_DEV_H

/* A C ABI in kernel style, compiled by C++ too: exempt from the C++ lint. */
/* NOLINTBEGIN */

/* The kernel's fixed-width types, in user space from the UAPI headers. */
#include <linux/types.h>

/* Name of the misc device, i.e. /dev/pvfsd.  Mode 0600, one opener. */
#define PVFSD_DEV_NAME "pvfsd"

/* "PVFS" read as a little-endian 32-bit integer. */
#define PVFSD_DEV_MAGIC 0x53465650u

/*
 * Protocol version of this header: the major in every message header, the
 * minor in HELLO.  Major 6 is channel version 5's messages with minor and
 * features in HELLO (5 and older knew no minor: they are refused).
 */
#define PVFSD_DEV_MAJOR 6u
#define PVFSD_DEV_MINOR 1u

/*
 * Features (pvfsd_hello.features), each with the minor that added it.
 *
 * CREATE_OPEN (minor 1): a CREATE may carry an open_mode, and the daemon
 * then opens the file in the same request to the servers (no OPEN follows
 * when it answers opened=1).  Without it the kernel sends open_mode 0 and
 * opens every file it creates with an OPEN.
 */
#define PVFSD_FEAT_CREATE_OPEN 0x1ull

/* Every feature of this header's minor; minor 0 has none. */
#define PVFSD_FEATURES_MINOR0 0ull
#define PVFSD_FEATURES_MINOR1 (PVFSD_FEATURES_MINOR0 | PVFSD_FEAT_CREATE_OPEN)
#define PVFSD_FEATURES PVFSD_FEATURES_MINOR1

/*
 * Upper bound on one message (header + body + tail): room for the largest
 * xattr value (64 KiB) with its name and headers.
 */
#define PVFSD_DEV_MAX_MSG 131072u

/* Limits both sides check (the same as the servers', include/pvfs/types.hpp). */
#define PVFSD_MAX_NAME 255u	     /* bytes in one name */
#define PVFSD_MAX_SYMLINK 4095u	     /* bytes in a symlink target */
#define PVFSD_MAX_GROUPS 32u	     /* supplementary groups carried */
#define PVFSD_MAX_XATTR_NAME 255u    /* bytes */
#define PVFSD_MAX_XATTR_VALUE 65536u /* bytes */
#define PVFSD_MAX_SOURCE 1024u	     /* bytes in a mount source or option string */

/*
 * Fixed header in front of every message in either direction.
 * A kernel-to-daemon message is an "upcall"; the daemon's answer, matched
 * by tag, is a "downcall".
 */
struct pvfsd_msg_hdr {
	__u32 magic;   /* PVFSD_DEV_MAGIC; anything else is rejected */
	__u16 version; /* PVFSD_DEV_MAJOR of the sender */
	__u16 op;      /* enum pvfsd_op; a downcall repeats its upcall's op */
	/*
	 * Chosen by the kernel, unique among pending upcalls and never reused
	 * within a boot; the downcall carries the same tag.
	 */
	__u64 tag;
	__u32 length; /* bytes of the whole message, header included, at most PVFSD_DEV_MAX_MSG */
	__s32 status; /* downcall: 0 or a negative errno (-4095..-1); upcall: 0 */
};

enum pvfsd_op {
	/*
	 * Daemon -> kernel, the first write after open(): the daemon's
	 * minor, its features and the slots it wants.  The
	 * downcall-direction message has tag 0; the kernel answers by the
	 * next read() with a HELLO upcall (tag 0) carrying its own minor and
	 * features and the slots it granted.
	 */
	PVFSD_OP_HELLO = 1,
	PVFSD_OP_ATTACH = 2, /* connect a mount to its file system */
	PVFSD_OP_DETACH = 3, /* the mount is gone; no downcall body */
	PVFSD_OP_LOOKUP = 4,
	PVFSD_OP_GETATTR = 5,
	PVFSD_OP_SETATTR = 6,
	PVFSD_OP_CREATE = 7,
	PVFSD_OP_MKDIR = 8,
	PVFSD_OP_MKNOD = 9,
	PVFSD_OP_SYMLINK = 10,
	PVFSD_OP_LINK = 11,
	PVFSD_OP_UNLINK = 12,
	PVFSD_OP_RMDIR = 13,
	PVFSD_OP_RENAME = 14,
	PVFSD_OP_READLINK = 15,
	PVFSD_OP_READDIR = 16,
	PVFSD_OP_READ = 17,
	PVFSD_OP_WRITE = 18,
	PVFSD_OP_FSYNC = 19,
	PVFSD_OP_STATFS = 20,
	PVFSD_OP_XATTR_GET = 21,
	PVFSD_OP_XATTR_SET = 22,
	PVFSD_OP_XATTR_LIST = 23,
	PVFSD_OP_XATTR_REMOVE = 24,
	/*
	 * Kernel -> daemon: give up the op whose tag is in the body (its
	 * caller was killed or interrupted).  The daemon answers the
	 * cancelled op (with -ECANCELED if it stopped it in time, else its
	 * real result); a CANCEL itself gets no downcall.
	 */
	PVFSD_OP_CANCEL = 25,
	/*
	 * The first open of a regular file on the mount (or one that widens
	 * the modes it is open for): the file's attributes, and the servers
	 * hold it for the mount until its CLOSE, so that an unlink anywhere
	 * keeps it while open (docs/metadata.md "Orphans and open
	 * references").  Replaces the GETATTR of close-to-open.
	 */
	PVFSD_OP_OPEN = 26,
	/* The last release of files on the mount: a batch of (handle, gen). */
	PVFSD_OP_CLOSE = 27,
	PVFSD_OP_COUNT = 28 /* one past the last op */
};

/* pvfsd_req_common.flags */
/*
 * Sent to an earlier daemon, which died.  On ATTACH: the kernel's own
 * re-attach of a mounted file system for a new daemon, which retries it
 * until the servers answer (a first mount's ATTACH never has it); the
 * mount's DETACH ends the retries.
 */
#define PVFSD_REQ_REPLAYED 0x1u
/*
 * READ only: the kernel fills the page cache, which it cuts at its own
 * i_size; the daemon may answer done == length with zeros past the file's
 * end instead of finding where the end is.  Without it (O_DIRECT) done
 * must stop at the end of the file.  A daemon that ignores it is right.
 */
#define PVFSD_REQ_ZERO_FILL 0x2u
/*
 * OPEN only: not a new open but one the kernel holds already, told again
 * to a daemon after its ATTACH (a new daemon learns which files the mount
 * holds, to keep them held and re-open them after a metadata server
 * restart).  Its gen is the first OPEN's.  Nothing waits for its answer.
 */
#define PVFSD_REQ_RECLAIM 0x4u
/*
 * SETATTR only: asked through a file open for writing (ATTR_FILE, as
 * ftruncate), so the kernel has decided by the open, not by the mode.  The
 * daemon claims it to the metadata server (setattr's by_open), which
 * believes it only while the mount holds the file open for writing.  A
 * daemon that ignores it is safe: the mode decides, as before.
 */
#define PVFSD_REQ_BY_FILE 0x8u

/* Who asks, and for which mount: first in every upcall body but HELLO. */
struct pvfsd_req_common {
	__u64 mount_id; /* the kernel's id of the mount (from its ATTACH) */
	__u32 fsuid;
	__u32 fsgid;
	__u32 ngroups;			/* valid entries of groups, <= PVFSD_MAX_GROUPS */
	__u32 flags;			/* PVFSD_REQ_* */
	__u32 groups[PVFSD_MAX_GROUPS]; /* the caller's first supplementary groups */
	/*
	 * Ops that change something (SETATTR, CREATE, MKDIR, MKNOD, SYMLINK,
	 * LINK, UNLINK, RMDIR, RENAME, XATTR_SET, XATTR_REMOVE, FSYNC): the
	 * mount's reply slot the op holds for its life, < PVFSD_REPLY_SLOTS.
	 * With the mount's client_id (ATTACH) and the tag as the op's xid it
	 * names the op to the servers' reply cache, so that a replay gets the
	 * first result (docs/protocol.md "Exactly once").  A replayed op keeps
	 * its tag and slot; a slot's ops have growing tags.  Other ops:
	 * PVFSD_NO_SLOT.
	 */
	__u32 reply_slot;
	__u32 pad; /* 0 */
};

/* Reply slots per mount, and pvfsd_req_common.reply_slot of other ops. */
#define PVFSD_REPLY_SLOTS 64u
#define PVFSD_NO_SLOT 0xffffffffu

/* ---- values inside bodies ---- */

struct pvfsd_time {
	__s64 sec;
	__u32 nsec; /* < 1000000000 */
	__u32 pad;  /* 0 */
};

/* Object types, as the servers number them (pvfs::ObjectType). */
enum pvfsd_type {
	PVFSD_TYPE_REGULAR = 1,
	PVFSD_TYPE_DIRECTORY = 2,
	PVFSD_TYPE_SYMLINK = 3,
	PVFSD_TYPE_FIFO = 4,
	PVFSD_TYPE_SOCKET = 5,
	PVFSD_TYPE_CHAR_DEVICE = 6,
	PVFSD_TYPE_BLOCK_DEVICE = 7
};

struct pvfsd_attr {
	__u64 handle; /* never 0 */
	__u32 type;   /* enum pvfsd_type */
	__u32 mode;   /* permission bits, setuid/setgid/sticky (07777) */
	__u32 uid;
	__u32 gid;
	__u32 nlink;
	__u32 blksize; /* the file's stripe size: st_blksize */
	__u64 size;    /* bytes; directories: entry count */
	__u64 rdev;    /* devices: new_encode_dev() form */
	struct pvfsd_time atime;
	struct pvfsd_time mtime;
	struct pvfsd_time ctime;
};

/* ---- HELLO ---- */

/* The data slots a daemon may ask for (the kernel may grant fewer). */
#define PVFSD_SLOT_SIZE_MIN (64u << 10) /* bytes; a power of two */
#define PVFSD_SLOT_SIZE_MAX (16u << 20)
#define PVFSD_SLOTS_MIN 1u
#define PVFSD_SLOTS_MAX 1024u

/*
 * There is no limit on upcalls in flight: the daemon reads them when it
 * can (a daemon that reads no more holds the rest in the kernel's queue),
 * data ops are bounded by the slots and changes by each mount's reply
 * slots.
 */
struct pvfsd_hello {
	__u32 slot_size;  /* bytes per slot, a power of two, PVFSD_SLOT_SIZE_MIN..MAX */
	__u32 slot_count; /* PVFSD_SLOTS_MIN .. PVFSD_SLOTS_MAX */
	__u32 minor;	  /* the sender's PVFSD_DEV_MINOR */
	__u32 pad;	  /* 0 */
	/*
	 * PVFSD_FEAT_* the sender offers; bits it does not know are 0.  Both
	 * sides use features & the peer's features.
	 */
	__u64 features;
};

/*
 * The kernel's HELLO upcall has the same body with the granted geometry;
 * the daemon then mmap()s slot_size * slot_count bytes at offset 0.
 */

/* ---- ATTACH / DETACH ---- */

struct pvfsd_attach_req {
	struct pvfsd_req_common common;
	__u32 source_len; /* tail: source ("tcp://host:port/fs"), then */
	/*
	 * tail: the daemon-relevant mount options as text, comma-separated:
	 * "hard" or "soft", "softerr", "timeo=T" (seconds), "retrans=N".
	 * A daemon ignores options it does not know.
	 */
	__u32 options_len;
	/*
	 * Random, made by the kernel at mount and kept while mounted: the
	 * mount's id towards the servers' reply cache, the same for every
	 * daemon that serves the mount.  Never 0.
	 */
	__u64 client_id;
};

struct pvfsd_attach_resp {
	struct pvfsd_attr root;
	__u64 fs_id;	/* the file system's id (statfs f_fsid) */
	__u32 max_name; /* <= PVFSD_MAX_NAME */
	__u32 pad;	/* 0 */
};

/* DETACH: request is pvfsd_req_common alone; the downcall has no body. */

/* ---- requests naming one object ---- */

/* GETATTR, READLINK, XATTR_LIST, STATFS (handle ignored) */
struct pvfsd_handle_req {
	struct pvfsd_req_common common;
	__u64 handle;
};

/* GETATTR's downcall, and every op answering with one object's attributes */
struct pvfsd_attr_resp {
	struct pvfsd_attr attr;
};

/* LOOKUP, UNLINK, RMDIR: a name in a directory (tail: the name) */
struct pvfsd_name_req {
	struct pvfsd_req_common common;
	__u64 parent;
	__u32 name_len; /* 1 .. PVFSD_MAX_NAME */
	__u32 pad;	/* 0 */
};

/* ---- SETATTR ---- */

#define PVFSD_SET_MODE 0x01u
#define PVFSD_SET_UID 0x02u
#define PVFSD_SET_GID 0x04u
#define PVFSD_SET_ATIME 0x08u	  /* to atime */
#define PVFSD_SET_MTIME 0x10u	  /* to mtime */
#define PVFSD_SET_ATIME_NOW 0x20u /* to the server's clock */
#define PVFSD_SET_MTIME_NOW 0x40u
#define PVFSD_SET_SIZE 0x80u /* truncate to size */
#define PVFSD_SET_ALL 0xffu

struct pvfsd_setattr_req {
	struct pvfsd_req_common common;
	__u64 handle;
	__u32 mask; /* PVFSD_SET_* */
	__u32 mode;
	__u32 uid;
	__u32 gid;
	__u64 size;
	struct pvfsd_time atime;
	struct pvfsd_time mtime;
};

/* ---- creating names (tail: the name, then for SYMLINK the target) ---- */

struct pvfsd_create_req {
	struct pvfsd_req_common common;
	__u64 parent;
	__u32 name_len;
	__u32 mode;	 /* permission bits after the umask */
	__u32 exclusive; /* 1: O_EXCL, EEXIST if the name exists */
	/*
	 * PVFSD_OPEN_*: open(O_CREAT) also opens the file for these, in the
	 * same request to the servers, with the CREATE's tag as the OPEN's gen
	 * (no OPEN follows).  0: only create.  Always 0 unless both sides
	 * offered PVFSD_FEAT_CREATE_OPEN.
	 */
	__u32 open_mode;
};

struct pvfsd_create_resp {
	struct pvfsd_attr attr;
	__u32 created; /* 1: this request made the file */
	/*
	 * 1: the servers hold the file open for the request's open_mode (gen:
	 * the tag), as after an OPEN, also when it existed (created 0).  0:
	 * not held (no open_mode, or the servers hold no open files): the
	 * kernel opens it with an OPEN as any file.
	 */
	__u32 opened;
};

/* MKDIR (type = DIRECTORY) and MKNOD (FIFO, SOCKET, devices) */
struct pvfsd_mknod_req {
	struct pvfsd_req_common common;
	__u64 parent;
	__u64 rdev;
	__u32 name_len;
	__u32 mode;
	__u32 type; /* enum pvfsd_type */
	__u32 pad;  /* 0 */
};

struct pvfsd_symlink_req {
	struct pvfsd_req_common common;
	__u64 parent;
	__u32 name_len;
	__u32 target_len; /* 1 .. PVFSD_MAX_SYMLINK */
};

struct pvfsd_link_req {
	struct pvfsd_req_common common;
	__u64 target; /* the existing object */
	__u64 new_parent;
	__u32 name_len;
	__u32 pad; /* 0 */
};

/* ---- RENAME (tail: old name, then new name) ---- */

#define PVFSD_RENAME_NOREPLACE 0x1u

struct pvfsd_rename_req {
	struct pvfsd_req_common common;
	__u64 old_parent;
	__u64 new_parent;
	__u32 old_name_len;
	__u32 new_name_len;
	__u32 flags; /* PVFSD_RENAME_* (exchange is refused by the kernel) */
	__u32 pad;   /* 0 */
};

/* READLINK's downcall: the target as the tail */
struct pvfsd_readlink_resp {
	__u32 target_len;
	__u32 pad; /* 0 */
};

/* ---- READDIR ---- */

struct pvfsd_readdir_req {
	struct pvfsd_req_common common;
	__u64 handle;
	__u64 cookie;	 /* 0: from the start; else an entry's cookie */
	__u32 max_bytes; /* room for entries in the downcall's tail */
	__u32 pad;	 /* 0 */
};

struct pvfsd_readdir_resp {
	__u32 count; /* entries in the tail */
	__u32 eof;   /* 1: no entries after the last one */
};

/*
 * One entry of READDIR's tail, followed by name_len bytes of name and
 * zero padding to a multiple of 8 bytes.
 */
struct pvfsd_dirent {
	__u64 handle;
	__u64 cookie;	/* pass back to continue after this entry; never 0 */
	__u32 type;	/* enum pvfsd_type */
	__u32 name_len; /* 1 .. PVFSD_MAX_NAME */
};

/* ---- READ / WRITE through a slot ---- */

struct pvfsd_io_req {
	struct pvfsd_req_common common;
	__u64 handle;
	__u64 offset; /* in the file */
	__u32 length; /* bytes, <= the slot size */
	__u32 slot;   /* index of the slot holding (WRITE) or receiving (READ) data */
};

struct pvfsd_io_resp {
	__u32 done; /* bytes read (short at end of file) or written; <= length */
	__u32 pad;  /* 0 */
};

/* ---- FSYNC ---- */

struct pvfsd_fsync_req {
	struct pvfsd_req_common common;
	__u64 handle;
	__u32 datasync; /* 1: fdatasync */
	__u32 pad;	/* 0 */
};

/* ---- STATFS's downcall ---- */

struct pvfsd_statfs_resp {
	__u64 blocks; /* in units of bsize */
	__u64 bfree;
	__u64 bavail;
	__u64 files;
	__u64 ffree;
	__u32 bsize;
	__u32 namelen;
};

/* ---- extended attributes (tail: name, then value for SET) ---- */

#define PVFSD_XATTR_CREATE 0x1u	 /* XATTR_CREATE */
#define PVFSD_XATTR_REPLACE 0x2u /* XATTR_REPLACE */

struct pvfsd_xattr_req {
	struct pvfsd_req_common common;
	__u64 handle;
	__u32 name_len;	 /* 1 .. PVFSD_MAX_XATTR_NAME; 0 for LIST */
	__u32 value_len; /* SET: bytes of value; GET/LIST: room the caller has (0: size only) */
	__u32 flags;	 /* SET: PVFSD_XATTR_* */
	__u32 pad;	 /* 0 */
};

/*
 * GET and LIST downcalls: size is the value's (or the NUL-separated name
 * list's) full length; the tail holds it when it fits the room asked for,
 * else the status is -ERANGE (and no tail) unless the room was 0.
 */
struct pvfsd_xattr_resp {
	__u32 size;
	__u32 pad; /* 0 */
};

/* ---- OPEN / CLOSE ---- */

#define PVFSD_OPEN_READ 0x1u  /* FMODE_READ */
#define PVFSD_OPEN_WRITE 0x2u /* FMODE_WRITE */

/*
 * OPEN's downcall is a pvfsd_attr_resp.  Both OPEN and CLOSE are
 * idempotent by gen: an OPEN or CLOSE of a handle with a gen older than
 * the latest OPEN's changes nothing, so a replay needs no reply slot.
 */
struct pvfsd_open_req {
	struct pvfsd_req_common common;
	__u64 handle;
	__u64 gen;  /* the tag of the OPEN that opened it (RECLAIM: the first's) */
	__u32 mode; /* PVFSD_OPEN_*: every mode the mount has it open for */
	__u32 pad;  /* 0 */
};

struct pvfsd_close_ref {
	__u64 handle;
	__u64 gen; /* the gen of its latest OPEN */
};

/* Most handles in one CLOSE. */
#define PVFSD_MAX_CLOSE 64u

/* CLOSE (tail: count struct pvfsd_close_ref); the downcall has no body. */
struct pvfsd_close_req {
	struct pvfsd_req_common common;
	__u32 count; /* 1 .. PVFSD_MAX_CLOSE */
	__u32 pad;   /* 0 */
};

/* ---- CANCEL ---- */

struct pvfsd_cancel_req {
	__u64 target_tag; /* the op to give up */
};

/* NOLINTEND */

#endif /* PVFS_PVFSD_DEV_H */
