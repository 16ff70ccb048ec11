// Metadata snapshots (meta_store.hpp, docs/metadata.md "Snapshots"): an
// online, compacted copy of a store, its check, and putting one back.
#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <sodium.h>

#include "detail/lmdb.hpp"
#include "detail/ops.hpp"
#include "detail/records.hpp"
#include "meta_snapshot.hpp"
#include "pvfs/types.hpp"
#include "pvfs/unique_fd.hpp"

namespace pvfs::meta {

namespace {

std::string errno_text(int error)
{
    return std::system_category().message(error);
}

int fail(std::string &error, int negative_errno, const std::string &what)
{
    error = what;
    return negative_errno;
}

int mdb_fail(std::string &error, int rc, const std::string &what)
{
    error = fmt::format("{}: {}", what, mdb_strerror(rc));
    return rc > 0 ? -rc : -EIO;
}

// The tables a snapshot must have; a store opens all of ops::Tables.
constexpr std::array<const char *, 5> required_tables{"meta", "inodes", "dirents", "order",
                                                      "symlinks"};

// Every record of `dbi` passed to `check` (key, value): 0, or the first
// failure's negative errno with `error` set.
template <typename Check>
int walk(MDB_txn *txn, MDB_dbi dbi, const char *table, std::string &error, Check &&check)
{
    lmdb::Cursor cursor;
    if (const int rc = cursor.open(txn, dbi); rc != 0)
        return fail(error, rc, fmt::format("cannot walk table {}", table));
    MDB_val key{};
    MDB_val value{};
    int rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_FIRST);
    for (; rc == 0; rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_NEXT)) {
        if (!check(lmdb::bytes(key), lmdb::bytes(value)))
            return -EIO;
    }
    if (rc != MDB_NOTFOUND)
        return mdb_fail(error, rc, fmt::format("reading table {}", table));
    return 0;
}

int check_env(MDB_env *env, const std::string &what, SnapshotInfo &info, std::string &error)
{
    lmdb::Txn txn;
    if (const int rc = txn.begin(env, nullptr, MDB_RDONLY); rc != 0)
        return fail(error, rc, what + ": cannot begin a read transaction");
    std::array<MDB_dbi, required_tables.size()> dbis{};
    for (std::size_t i = 0; i < required_tables.size(); ++i) {
        if (const int rc = mdb_dbi_open(txn.get(), required_tables.at(i), 0, &dbis.at(i)); rc != 0)
            return mdb_fail(error, rc, fmt::format("{}: table {}", what, required_tables.at(i)));
    }
    const MDB_dbi meta_table = dbis[0];
    const auto counter = [&](std::string_view name, std::uint64_t &out) {
        MDB_val key{name.size(), const_cast<char *>(name.data())}; // NOLINT: LMDB reads only
        MDB_val value{};
        if (const int rc = mdb_get(txn.get(), meta_table, &key, &value); rc != 0)
            return mdb_fail(error, rc, fmt::format("{}: counter {}", what, name));
        if (value.mv_size != 8)
            return fail(error, -EIO, fmt::format("{}: counter {} is damaged", what, name));
        out = records::load_le64(lmdb::bytes(value));
        return 0;
    };
    std::uint64_t format = 0;
    std::uint64_t server = 0;
    if (const int rc = counter(records::key_format, format); rc != 0)
        return rc;
    if (format != records::store_format)
        return fail(error, -EINVAL,
                    fmt::format("{}: store format {}, this build reads {}", what, format,
                                records::store_format));
    if (const int rc = counter(records::key_server_index, server); rc != 0)
        return rc;
    if (const int rc = counter(records::key_next_id, info.next_id); rc != 0)
        return rc;
    info.server_index = server;
    info.inodes = 0;
    info.entries = 0;
    bool root_seen = false;
    int rc =
        walk(txn.get(), dbis[1], "inodes", error, [&](records::Bytes key, records::Bytes value) {
            records::Inode inode;
            const Handle handle = key.size() == 8 ? records::load_be64(key) : no_handle;
            if (handle == no_handle || records::decode_inode(handle, value, inode) != 0) {
                error = fmt::format("{}: inode record {} is damaged", what, info.inodes);
                return false;
            }
            root_seen = root_seen || handle == root_handle;
            ++info.inodes;
            return true;
        });
    if (rc != 0)
        return rc;
    rc = walk(txn.get(), dbis[2], "dirents", error, [&](records::Bytes key, records::Bytes value) {
        records::Dirent dirent;
        if (key.size() <= 8 || records::decode_dirent(value, dirent) != 0) {
            error = fmt::format("{}: directory entry record {} is damaged", what, info.entries);
            return false;
        }
        ++info.entries;
        return true;
    });
    if (rc != 0)
        return rc;
    if (server == 0 && !root_seen)
        return fail(error, -EIO, what + ": metadata server 0's store without the root directory");
    return 0;
}

int open_file_env(lmdb::Env &env, const std::string &path, std::string &error)
{
    // A snapshot is one file and nothing else uses it: no lock file.
    if (const int rc = env.open(path.c_str(), MDB_RDONLY | MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOTLS, 0,
                                ops::table_count, 1);
        rc != 0)
        return fail(error, rc, fmt::format("{}: not an LMDB file ({})", path, errno_text(-rc)));
    return 0;
}

int fsync_dir(const std::filesystem::path &dir, std::string &error)
{
    const UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid() || ::fsync(fd.get()) != 0) {
        const int err = errno;
        return fail(error, -err, fmt::format("fsync {}: {}", dir.string(), errno_text(err)));
    }
    return 0;
}

// A snapshot is the compacted LMDB file and then a trailer: magic, the
// file's length before it (little-endian) and a BLAKE2b-256 hash of those
// bytes.  LMDB has no checksums of its own and trusts its page numbers, so
// a file is hashed before LMDB ever maps it: a truncated or flipped file is
// refused here instead of crashing the reader or restoring wrong records.
// LMDB reads only up to its last page, so the trailer does not disturb it.
constexpr std::array<unsigned char, 8> trailer_magic{'P', 'V', 'F', 'S', 'M', 'S', 'N', '1'};
constexpr std::size_t hash_bytes = crypto_generichash_BYTES; // 32
constexpr std::size_t trailer_bytes = trailer_magic.size() + 8 + hash_bytes;

int io_fail(std::string &error, const std::string &what)
{
    const int err = errno != 0 ? errno : EIO;
    return fail(error, -err, fmt::format("{}: {}", what, errno_text(err)));
}

// The hash of the first `length` bytes of `fd`.
int hash_prefix(int fd, std::uint64_t length, const std::string &path,
                std::array<unsigned char, hash_bytes> &hash, std::string &error)
{
    crypto_generichash_state state{};
    crypto_generichash_init(&state, nullptr, 0, hash.size());
    std::vector<unsigned char> buffer(std::size_t{1} << 20U);
    std::uint64_t done = 0;
    while (done < length) {
        const std::size_t want =
            static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), length - done));
        const ssize_t got = ::pread(fd, buffer.data(), want, static_cast<off_t>(done));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            if (got == 0)
                errno = EIO;
            return io_fail(error, "reading " + path);
        }
        crypto_generichash_update(&state, buffer.data(), static_cast<std::size_t>(got));
        done += static_cast<std::uint64_t>(got);
    }
    crypto_generichash_final(&state, hash.data(), hash.size());
    return 0;
}

int append_trailer(int fd, const std::string &path, std::string &error)
{
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        return io_fail(error, "stat " + path);
    const auto length = static_cast<std::uint64_t>(st.st_size);
    std::array<unsigned char, hash_bytes> hash{};
    if (const int rc = hash_prefix(fd, length, path, hash, error); rc != 0)
        return rc;
    std::array<unsigned char, trailer_bytes> trailer{};
    std::memcpy(trailer.data(), trailer_magic.data(), trailer_magic.size());
    for (std::size_t i = 0; i < 8; ++i)
        trailer.at(trailer_magic.size() + i) = static_cast<unsigned char>(length >> (8U * i));
    std::memcpy(trailer.data() + trailer_magic.size() + 8, hash.data(), hash.size());
    const ssize_t put = ::pwrite(fd, trailer.data(), trailer.size(), static_cast<off_t>(length));
    if (put != static_cast<ssize_t>(trailer.size())) {
        if (put >= 0)
            errno = ENOSPC;
        return io_fail(error, "writing " + path);
    }
    return 0;
}

// Checks the trailer and the hash of everything before it.
int check_trailer(const std::string &path, SnapshotInfo &info, std::string &error)
{
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid())
        return io_fail(error, path);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        return io_fail(error, "stat " + path);
    if (!S_ISREG(st.st_mode))
        return fail(error, -EINVAL, path + ": not a regular file");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    std::array<unsigned char, trailer_bytes> trailer{};
    if (size < trailer_bytes ||
        ::pread(fd.get(), trailer.data(), trailer.size(),
                static_cast<off_t>(size - trailer_bytes)) != static_cast<ssize_t>(trailer.size()) ||
        std::memcmp(trailer.data(), trailer_magic.data(), trailer_magic.size()) != 0)
        return fail(error, -EINVAL,
                    path + ": not a pvfs metadata snapshot (no snapshot trailer: truncated, or "
                           "another file)");
    std::uint64_t length = 0;
    for (std::size_t i = 0; i < 8; ++i)
        length |= std::uint64_t{trailer.at(trailer_magic.size() + i)} << (8U * i);
    if (length != size - trailer_bytes)
        return fail(error, -EINVAL,
                    fmt::format("{}: the trailer says {} bytes of store, the file holds {}", path,
                                length, size - trailer_bytes));
    std::array<unsigned char, hash_bytes> hash{};
    if (const int rc = hash_prefix(fd.get(), length, path, hash, error); rc != 0)
        return rc;
    if (sodium_memcmp(hash.data(), trailer.data() + trailer_magic.size() + 8, hash.size()) != 0)
        return fail(error, -EIO,
                    path + ": damaged: its bytes do not match the hash the snapshot was written "
                           "with");
    info.bytes = size;
    return 0;
}

// Moves the store file `path`'s next_id on by `skip_ids` (at most to the
// end of the id space, where creates fail with ENOSPC) and syncs it.
int advance_next_id(const std::string &path, std::uint64_t skip_ids, SnapshotInfo &info,
                    std::string &error)
{
    lmdb::Env env;
    if (const int rc =
            env.open(path.c_str(), MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOTLS, 0, ops::table_count, 1);
        rc != 0)
        return fail(error, rc, fmt::format("{}: cannot open ({})", path, errno_text(-rc)));
    lmdb::Txn txn;
    if (const int rc = txn.begin(env.get(), nullptr, 0); rc != 0)
        return fail(error, rc, path + ": cannot begin a write transaction");
    MDB_dbi meta_table = 0;
    if (const int rc = mdb_dbi_open(txn.get(), "meta", 0, &meta_table); rc != 0)
        return mdb_fail(error, rc, path + ": table meta");
    const std::uint64_t limit = handle_id_mask + 1;
    const std::uint64_t next =
        info.next_id >= limit || skip_ids >= limit - info.next_id ? limit : info.next_id + skip_ids;
    std::array<std::uint8_t, 8> value_bytes{};
    records::store_le64(value_bytes.data(), next);
    MDB_val key{records::key_next_id.size(),
                const_cast<char *>(records::key_next_id.data())}; // NOLINT: LMDB reads only
    MDB_val value{value_bytes.size(), value_bytes.data()};
    if (const int rc = mdb_put(txn.get(), meta_table, &key, &value, 0); rc != 0)
        return mdb_fail(error, rc, path + ": writing next_id");
    if (const int rc = txn.commit(); rc != 0)
        return fail(error, rc, path + ": cannot commit next_id");
    if (const int rc = mdb_env_sync(env.get(), 1); rc != 0)
        return mdb_fail(error, rc, "sync " + path);
    info.next_id = next;
    return 0;
}

} // namespace

int snapshot(const std::string &store_path, const std::string &out_path, SnapshotInfo &info,
             std::string &error)
{
    struct stat st {};
    if (::stat((std::filesystem::path(store_path) / "data.mdb").c_str(), &st) != 0) {
        const int err = errno;
        return fail(error, -err,
                    fmt::format("{}: no metadata store here ({})", store_path, errno_text(err)));
    }
    lmdb::Env env;
    // Read-only, beside the running server: LMDB's lock file coordinates
    // this reader with its writer, which goes on while the copy is made.
    if (const int rc = env.open(store_path.c_str(), MDB_RDONLY | MDB_NOTLS, 0, ops::table_count,
                                Options{}.max_readers);
        rc != 0)
        return fail(
            error, rc,
            fmt::format("{}: cannot open the metadata store ({})", store_path, errno_text(-rc)));
    if (const int rc = check_env(env.get(), store_path, info, error); rc != 0)
        return rc;
    const UniqueFd out(
        ::open(out_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!out.valid()) {
        const int err = errno;
        return fail(error, -err, fmt::format("{}: {}", out_path, errno_text(err)));
    }
    const auto discard = [&](int rc) {
        ::unlink(out_path.c_str());
        return rc;
    };
    if (const int rc = mdb_env_copyfd2(env.get(), out.get(), MDB_CP_COMPACT); rc != 0)
        return discard(mdb_fail(error, rc, fmt::format("copying {} to {}", store_path, out_path)));
    if (const int rc = append_trailer(out.get(), out_path, error); rc != 0)
        return discard(rc);
    if (::fsync(out.get()) != 0) {
        const int err = errno;
        return discard(fail(error, -err, fmt::format("fsync {}: {}", out_path, errno_text(err))));
    }
    const std::filesystem::path parent = std::filesystem::absolute(out_path).parent_path();
    if (const int rc = fsync_dir(parent, error); rc != 0)
        return discard(rc);
    // What was written is what is checked: a copy that does not read back
    // is not a snapshot.
    if (const int rc = verify_snapshot(out_path, info, error); rc != 0)
        return discard(rc);
    return 0;
}

int verify_snapshot(const std::string &path, SnapshotInfo &info, std::string &error)
{
    if (const int rc = check_trailer(path, info, error); rc != 0)
        return rc;
    lmdb::Env env;
    if (const int rc = open_file_env(env, path, error); rc != 0)
        return rc;
    return check_env(env.get(), path, info, error);
}

int restore_snapshot(const std::string &path, const std::string &store_path, std::uint64_t skip_ids,
                     SnapshotInfo &info, std::string &error)
{
    if (const int rc = verify_snapshot(path, info, error); rc != 0)
        return rc;
    const std::filesystem::path dir(store_path);
    const std::filesystem::path data = dir / "data.mdb";
    if (::access(data.c_str(), F_OK) == 0)
        return fail(error, -EEXIST,
                    fmt::format("{} already holds a store: move it away first (its server "
                                "stopped)",
                                store_path));
    const bool made = ::mkdir(dir.c_str(), 0700) == 0;
    if (!made && errno != EEXIST) {
        const int err = errno;
        return fail(error, -err, fmt::format("mkdir {}: {}", store_path, errno_text(err)));
    }
    // The store must belong to the user the server runs as, not to root
    // restoring it: the owner of the store's directory, or of the storage
    // directory above a store directory made here.
    struct stat owner {};
    if (::stat((made ? dir.parent_path() : dir).c_str(), &owner) != 0)
        return io_fail(error, "stat " + (made ? dir.parent_path() : dir).string());
    const bool give_away = ::geteuid() == 0 && owner.st_uid != 0;
    if (made && give_away && ::chown(dir.c_str(), owner.st_uid, owner.st_gid) != 0)
        return io_fail(error, "chown " + store_path);
    // A stale lock file would describe readers of the store that was there.
    ::unlink((dir / "lock.mdb").c_str());
    const std::filesystem::path partial = dir / "data.mdb.restoring";
    {
        lmdb::Env env;
        if (const int rc = open_file_env(env, path, error); rc != 0)
            return rc;
        const UniqueFd out(
            ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
        if (!out.valid()) {
            const int err = errno;
            return fail(error, -err, fmt::format("{}: {}", partial.string(), errno_text(err)));
        }
        if (give_away && ::fchown(out.get(), owner.st_uid, owner.st_gid) != 0) {
            const int rc = io_fail(error, "chown " + partial.string());
            ::unlink(partial.c_str());
            return rc;
        }
        if (const int rc = mdb_env_copyfd2(env.get(), out.get(), 0); rc != 0) {
            ::unlink(partial.c_str());
            return mdb_fail(error, rc, fmt::format("copying {} to {}", path, partial.string()));
        }
        if (::fsync(out.get()) != 0) {
            const int err = errno;
            ::unlink(partial.c_str());
            return fail(error, -err,
                        fmt::format("fsync {}: {}", partial.string(), errno_text(err)));
        }
    }
    if (const int rc = advance_next_id(partial.string(), skip_ids, info, error); rc != 0) {
        ::unlink(partial.c_str());
        return rc;
    }
    if (::rename(partial.c_str(), data.c_str()) != 0) {
        const int err = errno;
        ::unlink(partial.c_str());
        return fail(error, -err, fmt::format("rename to {}: {}", data.string(), errno_text(err)));
    }
    return fsync_dir(dir, error);
}

} // namespace pvfs::meta
