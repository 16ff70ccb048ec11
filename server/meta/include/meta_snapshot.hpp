// Metadata snapshots (docs/metadata.md "Snapshots"): an online, compacted,
// hashed copy of a metadata store, its check, and putting one back.
#ifndef PVFS_META_SNAPSHOT_HPP
#define PVFS_META_SNAPSHOT_HPP

#include <cstdint>
#include <string>

namespace pvfs::meta {

// Each returns 0, or a negative errno with `error` saying what failed.

struct SnapshotInfo {
    std::uint64_t bytes = 0;        // the snapshot file's size
    std::uint64_t server_index = 0; // the metadata server whose store it is
    std::uint64_t inodes = 0;
    std::uint64_t entries = 0; // directory entries
    std::uint64_t next_id = 0; // the id the store's next object takes
};

// What a restore skips by default: ids the lost store may have handed out
// after the snapshot (see restore_snapshot); 2^40 of the 2^48 a server has.
inline constexpr std::uint64_t default_restore_skip_ids = std::uint64_t{1} << 40U;

// Copies the store in directory `store_path` (a metadata server's
// <storage>/meta, its server running or not) into the new file `out_path`
// (EEXIST if it exists): one committed state of the store, the one a read
// transaction sees while the server's writes go on, compacted, followed by
// a trailer with a BLAKE2b hash of it, mode 0600, fsynced with its
// directory; then checked as verify_snapshot does, and
// removed if the check fails.  Another process than the store's server
// must call it: LMDB does not take one environment opened twice by one
// process.
[[nodiscard]] int snapshot(const std::string &store_path, const std::string &out_path,
                           SnapshotInfo &info, std::string &error);

// Checks a snapshot's trailer and hash (a truncated or altered file is
// refused before LMDB maps it), then opens it read-only and decodes every
// inode and directory
// entry record; the store format must be this build's and metadata server
// 0's snapshot must hold the root directory.
[[nodiscard]] int verify_snapshot(const std::string &path, SnapshotInfo &info, std::string &error);

// Checks the snapshot, then makes `store_path` a store holding it
// (written beside, fsynced, renamed into place).  The store's server must
// be stopped, and `store_path` must hold no store (EEXIST): an admin moves
// the old one away, never this call.  The restored store's `next_id` moves
// on by `skip_ids`: the lost store handed out ids after the snapshot, and
// the data servers may still hold those files' objects, so a new file must
// never take one of them (it would show the lost file's bytes).
[[nodiscard]] int restore_snapshot(const std::string &path, const std::string &store_path,
                                   std::uint64_t skip_ids, SnapshotInfo &info, std::string &error);

} // namespace pvfs::meta

#endif // PVFS_META_SNAPSHOT_HPP
