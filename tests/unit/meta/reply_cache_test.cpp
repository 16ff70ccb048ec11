// Tests of the metadata store's sessions and reply cache
// (meta_store.hpp, "exactly once"): a reply is durable exactly when its
// operation is, a unit keeps both or neither, a new xid replaces a slot's
// steps, an older xid is stale, and ending a session removes its replies.
#include <atf-c++.hpp>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <lmdb.h>

#include "meta_store.hpp"
#include "pvfs/types.hpp"

namespace meta = pvfs::meta;
using meta::ReplyId;
using meta::ReplyMatch;
using meta::SavedReply;
using meta::Store;
using meta::WriteBatch;
using pvfs::Attr;
using pvfs::Credentials;
using pvfs::root_handle;

namespace {

const Credentials root{0, 0, {}};

meta::Options options()
{
    meta::Options o;
    o.path = "store";
    o.default_layout = pvfs::Layout{1U << 20U, 1, 0};
    o.durable = false;
    o.map_size = std::uint64_t{1} << 30U;
    return o;
}

void check(int got, int want, const std::string &what)
{
    if (got != want)
        ATF_FAIL(fmt::format("{}: got {}, want {}", what, got, want));
}

SavedReply reply(std::uint16_t op, std::int32_t status, std::uint8_t fill)
{
    SavedReply r;
    r.op = op;
    r.status = status;
    r.digest.fill(fill);
    r.body.assign(40, fill);
    return r;
}

ReplyMatch find(Store &s, const ReplyId &id, SavedReply &out)
{
    WriteBatch b = s.batch();
    ReplyMatch m = ReplyMatch::none;
    check(b.reply_find(id, m, out), 0, "reply_find");
    return m;
}

// create "name" and its reply in one unit, kept or not.
void create_with_reply(WriteBatch &b, const ReplyId &id, const std::string &name, bool keep)
{
    check(b.begin_unit(), 0, "begin_unit");
    meta::CreateResult result;
    check(b.create(root, root_handle, name, 0644, true, {}, result), 0, "create");
    check(b.reply_save(id, reply(6, 0, 0xAB)), 0, "reply_save");
    check(b.end_unit(keep), 0, "end_unit");
}

bool exists(const Store &s, const std::string &name)
{
    Attr a;
    return s.lookup(root, root_handle, name, a) == 0;
}

struct EnvCloser {
    void operator()(MDB_env *e) const noexcept { mdb_env_close(e); }
};
struct TxnAborter {
    void operator()(MDB_txn *t) const noexcept { mdb_txn_abort(t); }
};

void require_mdb(int rc, const std::string &what)
{
    if (rc != 0)
        ATF_FAIL(what + ": " + mdb_strerror(rc));
}

// Writes `value` under (client, slot) in the table "replies", where stores
// from before the replies moved to the meta table kept them, and returns
// how many records that table then holds (docs/metadata.md).
std::size_t old_table_put(std::uint64_t client, std::uint64_t slot,
                          const std::vector<std::uint8_t> *value)
{
    MDB_env *raw_env = nullptr;
    require_mdb(mdb_env_create(&raw_env), "mdb_env_create");
    const std::unique_ptr<MDB_env, EnvCloser> env(raw_env);
    require_mdb(mdb_env_set_maxdbs(env.get(), 16), "mdb_env_set_maxdbs");
    require_mdb(mdb_env_open(env.get(), "store", MDB_NOTLS, 0600), "mdb_env_open");
    MDB_txn *raw_txn = nullptr;
    require_mdb(mdb_txn_begin(env.get(), nullptr, 0, &raw_txn), "mdb_txn_begin");
    std::unique_ptr<MDB_txn, TxnAborter> txn(raw_txn);
    MDB_dbi replies = 0;
    require_mdb(mdb_dbi_open(txn.get(), "replies", 0, &replies), "mdb_dbi_open replies");
    if (value != nullptr) {
        std::array<std::uint8_t, 16> key_bytes{};
        for (std::size_t i = 0; i < 8; ++i) {
            key_bytes[i] = static_cast<std::uint8_t>(client >> (8 * (7 - i)));
            key_bytes[8 + i] = static_cast<std::uint8_t>(slot >> (8 * (7 - i)));
        }
        MDB_val key{key_bytes.size(), key_bytes.data()};
        MDB_val val{value->size(), const_cast<std::uint8_t *>(value->data())}; // NOLINT
        require_mdb(mdb_put(txn.get(), replies, &key, &val, 0), "mdb_put");
    }
    MDB_stat st{};
    require_mdb(mdb_stat(txn.get(), replies, &st), "mdb_stat");
    require_mdb(mdb_txn_commit(txn.release()), "mdb_txn_commit");
    return st.ms_entries;
}

// A slot record as docs/metadata.md gives it: one step, the body of reply().
std::vector<std::uint8_t> old_record(std::uint64_t xid, std::uint16_t op, std::uint8_t fill)
{
    std::vector<std::uint8_t> r;
    const auto le = [&r](std::uint64_t v, int bytes) {
        for (int i = 0; i < bytes; ++i)
            r.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    };
    le(1, 1);   // format
    le(xid, 8); // xid
    le(1, 1);   // steps
    le(0, 4);   // step
    le(op, 2);  // op
    le(0, 4);   // status
    r.insert(r.end(), 16, fill);
    le(40, 2);
    r.insert(r.end(), 40, fill);
    return r;
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(reply_with_its_operation);
ATF_TEST_CASE_BODY(reply_with_its_operation)
{
    Store s;
    check(s.open(options()), 0, "open");
    const ReplyId id{0x1234, 5, 100, 0};
    {
        // Unit kept, batch committed: both.
        WriteBatch b = s.batch();
        create_with_reply(b, id, "kept", true);
        check(b.commit(), 0, "commit");
    }
    SavedReply out;
    ATF_REQUIRE(find(s, id, out) == ReplyMatch::found);
    ATF_REQUIRE(out == reply(6, 0, 0xAB));
    ATF_REQUIRE(exists(s, "kept"));
    {
        // Unit dropped: neither, even though the batch commits.
        WriteBatch b = s.batch();
        create_with_reply(b, ReplyId{0x1234, 6, 101, 0}, "dropped", false);
        check(b.commit(), 0, "commit");
    }
    ATF_REQUIRE(find(s, ReplyId{0x1234, 6, 101, 0}, out) == ReplyMatch::none);
    ATF_REQUIRE(!exists(s, "dropped"));
    {
        // Batch aborted: neither.
        WriteBatch b = s.batch();
        create_with_reply(b, ReplyId{0x1234, 7, 102, 0}, "aborted", true);
        b.abort();
    }
    ATF_REQUIRE(find(s, ReplyId{0x1234, 7, 102, 0}, out) == ReplyMatch::none);
    ATF_REQUIRE(!exists(s, "aborted"));
    // Durable: still there after reopening.
    s.close();
    check(s.open(options()), 0, "reopen");
    ATF_REQUIRE(find(s, id, out) == ReplyMatch::found);
    ATF_REQUIRE(out == reply(6, 0, 0xAB));
}

ATF_TEST_CASE_WITHOUT_HEAD(failed_operation_keeps_its_reply);
ATF_TEST_CASE_BODY(failed_operation_keeps_its_reply)
{
    Store s;
    check(s.open(options()), 0, "open");
    const ReplyId id{7, 0, 1, 0};
    WriteBatch b = s.batch();
    check(b.begin_unit(), 0, "begin_unit");
    check(b.rmdir(root, root_handle, "missing"), -ENOENT, "rmdir");
    check(b.reply_save(id, reply(13, ENOENT, 1)), 0, "reply_save");
    check(b.end_unit(true), 0, "end_unit");
    check(b.commit(), 0, "commit");
    SavedReply out;
    ATF_REQUIRE(find(s, id, out) == ReplyMatch::found);
    check(out.status, ENOENT, "status");
}

// A unit's first operation runs in the unit itself, later ones nest in
// it: whichever fails is undone alone, the rest stand or fall with the unit.
ATF_TEST_CASE_WITHOUT_HEAD(operations_in_one_unit);
ATF_TEST_CASE_BODY(operations_in_one_unit)
{
    Store s;
    check(s.open(options()), 0, "open");
    meta::CreateResult result;
    {
        WriteBatch b = s.batch();
        check(b.begin_unit(), 0, "begin_unit");
        check(b.rmdir(root, root_handle, "missing"), -ENOENT, "first, failing");
        check(b.create(root, root_handle, "second", 0644, true, {}, result), 0, "second");
        check(b.create(root, root_handle, "second", 0644, true, {}, result), -EEXIST, "third");
        check(b.end_unit(true), 0, "end_unit");
        check(b.begin_unit(), 0, "begin_unit");
        check(b.create(root, root_handle, "first", 0644, true, {}, result), 0, "first");
        check(b.create(root, root_handle, "first", 0644, true, {}, result), -EEXIST, "again");
        check(b.create(root, root_handle, "later", 0644, true, {}, result), 0, "later");
        check(b.end_unit(true), 0, "end_unit");
        check(b.begin_unit(), 0, "begin_unit");
        check(b.create(root, root_handle, "dropped1", 0644, true, {}, result), 0, "dropped1");
        check(b.create(root, root_handle, "dropped2", 0644, true, {}, result), 0, "dropped2");
        check(b.end_unit(false), 0, "end_unit");
        check(b.commit(), 0, "commit");
    }
    ATF_REQUIRE(exists(s, "second"));
    ATF_REQUIRE(exists(s, "first"));
    ATF_REQUIRE(exists(s, "later"));
    ATF_REQUIRE(!exists(s, "dropped1"));
    ATF_REQUIRE(!exists(s, "dropped2"));
}

ATF_TEST_CASE_WITHOUT_HEAD(slots_steps_and_stale_xids);
ATF_TEST_CASE_BODY(slots_steps_and_stale_xids)
{
    Store s;
    check(s.open(options()), 0, "open");
    auto save = [&s](const ReplyId &id, std::uint8_t fill) {
        WriteBatch b = s.batch();
        check(b.reply_save(id, reply(31, 0, fill)), 0, "reply_save");
        check(b.commit(), 0, "commit");
    };
    save({9, 3, 50, 0}, 1);
    save({9, 3, 50, 2}, 2); // another step of the same operation
    SavedReply out;
    ATF_REQUIRE(find(s, {9, 3, 50, 0}, out) == ReplyMatch::found && out.digest[0] == 1);
    ATF_REQUIRE(find(s, {9, 3, 50, 2}, out) == ReplyMatch::found && out.digest[0] == 2);
    ATF_REQUIRE(find(s, {9, 3, 50, 1}, out) == ReplyMatch::none);
    // The slot's next operation replaces both steps.
    save({9, 3, 51, 0}, 3);
    ATF_REQUIRE(find(s, {9, 3, 51, 0}, out) == ReplyMatch::found && out.digest[0] == 3);
    ATF_REQUIRE(find(s, {9, 3, 50, 2}, out) == ReplyMatch::stale);
    ATF_REQUIRE(find(s, {9, 3, 50, 0}, out) == ReplyMatch::stale);
    // Other slots and clients are apart.
    ATF_REQUIRE(find(s, {9, 4, 51, 0}, out) == ReplyMatch::none);
    ATF_REQUIRE(find(s, {10, 3, 51, 0}, out) == ReplyMatch::none);
    // Bounds.
    WriteBatch b = s.batch();
    SavedReply big = reply(31, 0, 4);
    big.body.assign(meta::max_reply_body + 1, 0);
    check(b.reply_save({9, 5, 1, 0}, big), -E2BIG, "a body over the limit");
    for (std::uint32_t step = 0; step < meta::max_reply_steps; ++step)
        check(b.reply_save({9, 6, 1, step}, reply(31, 0, 5)), 0, "a step");
    check(b.reply_save({9, 6, 1, 99}, reply(31, 0, 5)), -E2BIG, "a step over the limit");
}

ATF_TEST_CASE_WITHOUT_HEAD(sessions);
ATF_TEST_CASE_BODY(sessions)
{
    Store s;
    check(s.open(options()), 0, "open");
    {
        WriteBatch b = s.batch();
        check(b.session_put({41, 1000, "host:/mnt/a", std::nullopt}), 0, "session_put");
        check(b.session_put({42, 2000, "", std::nullopt}), 0, "session_put");
        check(b.session_put({0, 1, "", std::nullopt}), -EINVAL, "client 0");
        check(b.session_put({43, 1, std::string(256, 'o'), std::nullopt}), -EINVAL,
              "owner too long");
        // The key that opened it; a record without one (41, 42) is how an
        // older server wrote it.
        check(b.session_put({44, 3000, "host:/mnt/b", "alpha"}), 0, "session_put with a key");
        check(b.session_put({45, 1, "", ""}), -EINVAL, "empty key name");
        check(b.session_put({45, 1, "", std::string(65, 'k')}), -EINVAL, "key name too long");
        for (std::uint32_t slot = 0; slot < 3; ++slot) {
            check(b.reply_save({41, slot, 1, 0}, reply(6, 0, 1)), 0, "reply of 41");
            check(b.reply_save({42, slot, 1, 0}, reply(6, 0, 2)), 0, "reply of 42");
        }
        check(b.commit(), 0, "commit");
    }
    std::vector<meta::SessionRecord> list;
    check(s.list_sessions(list), 0, "list_sessions");
    check(static_cast<int>(list.size()), 3, "sessions");
    ATF_REQUIRE(list[0] == (meta::SessionRecord{41, 1000, "host:/mnt/a", std::nullopt}));
    ATF_REQUIRE(list[2] == (meta::SessionRecord{44, 3000, "host:/mnt/b", "alpha"}));
    {
        WriteBatch b = s.batch();
        check(b.session_delete(41), 0, "session_delete");
        meta::SessionRecord r;
        check(b.session_get(41, r), -ENOENT, "deleted session");
        check(b.session_get(42, r), 0, "other session");
        check(b.commit(), 0, "commit");
    }
    SavedReply out;
    for (std::uint32_t slot = 0; slot < 3; ++slot) {
        ATF_REQUIRE(find(s, {41, slot, 1, 0}, out) == ReplyMatch::none);
        ATF_REQUIRE(find(s, {42, slot, 1, 0}, out) == ReplyMatch::found);
    }
    check(s.list_sessions(list), 0, "list_sessions");
    check(static_cast<int>(list.size()), 2, "sessions left");
    // The replies share their table with the store's counters: ending the
    // sessions on both sides of them in key order leaves the counters be.
    {
        WriteBatch b = s.batch();
        check(b.session_put({0xFFFFFFFFFFFFFFFFULL, 1, "", std::nullopt}), 0, "session_put");
        check(b.reply_save({0xFFFFFFFFFFFFFFFFULL, 0, 1, 0}, reply(6, 0, 3)), 0, "reply_save");
        check(b.session_delete(0xFFFFFFFFFFFFFFFFULL), 0, "session_delete last");
        check(b.session_delete(1), 0, "session_delete first (none)");
        meta::CreateResult result;
        check(b.create(root, root_handle, "after", 0644, true, {}, result), 0, "create after");
        check(b.commit(), 0, "commit");
    }
    ATF_REQUIRE(exists(s, "after"));
    ATF_REQUIRE(find(s, {0xFFFFFFFFFFFFFFFFULL, 0, 1, 0}, out) == ReplyMatch::none);
    ATF_REQUIRE(find(s, {42, 0, 1, 0}, out) == ReplyMatch::found);
    s.close();
    check(s.open(options()), 0, "reopen");
    ATF_REQUIRE(exists(s, "after"));
}

ATF_TEST_CASE_WITHOUT_HEAD(replies_of_an_older_store);
ATF_TEST_CASE_BODY(replies_of_an_older_store)
{
    {
        Store s;
        check(s.open(options()), 0, "create the store");
    }
    const std::vector<std::uint8_t> record = old_record(9, 6, 0xCD);
    ATF_REQUIRE_EQ(old_table_put(77, 3, &record), 1U);
    Store s;
    check(s.open(options()), 0, "open moves the old table's replies");
    SavedReply out;
    ATF_REQUIRE(find(s, {77, 3, 9, 0}, out) == ReplyMatch::found);
    ATF_REQUIRE(out == reply(6, 0, 0xCD));
    ATF_REQUIRE(find(s, {77, 3, 8, 0}, out) == ReplyMatch::stale);
    s.close();
    ATF_REQUIRE_EQ(old_table_put(77, 3, nullptr), 0U);
    // Still there on the next open, from its new place.
    check(s.open(options()), 0, "reopen");
    ATF_REQUIRE(find(s, {77, 3, 9, 0}, out) == ReplyMatch::found);
    s.close();
    // A damaged record in the old table stops the open with EIO.
    std::vector<std::uint8_t> damaged = record;
    damaged.pop_back();
    ATF_REQUIRE_EQ(old_table_put(78, 0, &damaged), 1U);
    check(s.open(options()), -EIO, "open with a damaged old record");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, reply_with_its_operation);
    ATF_ADD_TEST_CASE(tcs, failed_operation_keeps_its_reply);
    ATF_ADD_TEST_CASE(tcs, operations_in_one_unit);
    ATF_ADD_TEST_CASE(tcs, slots_steps_and_stale_xids);
    ATF_ADD_TEST_CASE(tcs, sessions);
    ATF_ADD_TEST_CASE(tcs, replies_of_an_older_store);
}
