// Tests of lib/proto (include/pvfs/proto.hpp): round trips of every op,
// rejection of every kind of bad message (magic, version, op, flags,
// truncation at every byte, lengths over their limits, counts beyond the
// bytes left, bad values, trailing bytes, any flipped byte, another key),
// and key files.  The replay guard, once here, has replay_guard_test.
#include <atf-c++.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "pvfs/config.hpp"
#include "pvfs/proto.hpp"
#include "pvfs/types.hpp"
#include "samples.hpp"

namespace proto = pvfs::proto;
using proto::DecodeError;

namespace {

// Where fields sit in a request with the samples' max_groups groups.
constexpr std::size_t request_flags_at = 8;
constexpr std::size_t request_groups_at = 52;
constexpr std::size_t sample_body_length_at = 56 + 4 * pvfs::max_groups;
constexpr std::size_t sample_body_at = sample_body_length_at + 4;
constexpr std::size_t response_status_at = 8;
constexpr std::size_t response_body_length_at = 36;
constexpr std::size_t response_body_at = 40;

std::vector<std::byte> encoded(const proto::Request &req, const proto::Key &key)
{
    std::vector<std::byte> out;
    const std::size_t n = proto::encode(req, key, out);
    ATF_REQUIRE_EQ(n, out.size());
    return out;
}

std::vector<std::byte> encoded(const proto::Response &resp, const proto::Key &key)
{
    std::vector<std::byte> out;
    const std::size_t n = proto::encode(resp, key, out);
    ATF_REQUIRE_EQ(n, out.size());
    return out;
}

std::vector<std::byte> encoded(const proto::Request &req)
{
    return encoded(req, samples::test_key());
}

std::vector<std::byte> encoded(const proto::Response &resp)
{
    return encoded(resp, samples::test_key());
}

// Recomputes the MAC after a test changed the message on purpose, so the
// decoder's other checks are what rejects it.
void resign(std::vector<std::byte> &m)
{
    const std::span<std::byte> all(m);
    samples::test_key().sign(all.first(m.size() - proto::mac_size), all.last<proto::mac_size>());
}

void put_u32(std::vector<std::byte> &m, std::size_t at, std::uint32_t v)
{
    for (std::size_t i = 0; i < 4; ++i) {
        m.at(at + i) = static_cast<std::byte>((v >> (8 * i)) & 0xFFU);
    }
}

void put_u16(std::vector<std::byte> &m, std::size_t at, std::uint16_t v)
{
    m.at(at) = static_cast<std::byte>(v & 0xFFU);
    m.at(at + 1) = static_cast<std::byte>(v >> 8U);
}

proto::DecodeResult decode_request(std::span<const std::byte> m)
{
    proto::Request out;
    return proto::decode(m, samples::test_key(), out);
}

proto::DecodeResult decode_response(std::span<const std::byte> m)
{
    proto::Response out;
    return proto::decode(m, samples::test_key(), out);
}

void require_error(const proto::DecodeResult &r, DecodeError expected, const std::string &context)
{
    if (!(r.error == expected)) {
        std::ostringstream why;
        why << context << ": expected error " << static_cast<int>(expected) << ", got "
            << static_cast<int>(r.error) << " (" << r.message() << ")";
        ATF_FAIL(why.str());
    }
    ATF_REQUIRE(!r);
}

void require_request_error(const proto::Request &req, DecodeError expected,
                           const std::string &context)
{
    require_error(decode_request(encoded(req)), expected, context);
}

void require_response_error(const proto::Response &resp, DecodeError expected,
                            const std::string &context)
{
    require_error(decode_response(encoded(resp)), expected, context);
}

std::vector<std::vector<std::byte>> all_sample_messages()
{
    std::vector<std::vector<std::byte>> all;
    std::uint64_t n = 0;
    for (auto &body : samples::request_bodies()) {
        all.push_back(encoded(samples::request(body, ++n)));
    }
    for (auto &body : samples::response_bodies()) {
        all.push_back(encoded(samples::response(body, ++n)));
    }
    return all;
}

std::string temp_dir()
{
    std::string dir = (std::filesystem::current_path() / "keys").string();
    std::filesystem::create_directories(dir);
    return dir;
}

// Written as a key file must be: mode 0600 (Key::load refuses any other).
void write_file(const std::string &path, const std::string &contents)
{
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f << contents;
        ATF_REQUIRE(f.good());
    }
    ATF_REQUIRE(::chmod(path.c_str(), 0600) == 0);
}

// Key::load(path) fails and its error contains every one of `parts`.
void require_refused(const std::string &path, std::initializer_list<std::string> parts)
{
    std::string error;
    if (proto::Key::load(path, error)) {
        ATF_FAIL("accepted " + path);
    }
    for (const auto &part : parts) {
        if (error.find(part) == std::string::npos) {
            std::string what = "error '";
            what += error;
            what += "' lacks '";
            what += part;
            what += "'";
            ATF_FAIL(what);
        }
    }
}

} // namespace

// ---- round trips ---------------------------------------------------------

ATF_TEST_CASE_WITHOUT_HEAD(round_trip_requests);
ATF_TEST_CASE_BODY(round_trip_requests)
{
    const auto key = samples::test_key();
    const auto bodies = samples::request_bodies();
    ATF_REQUIRE_EQ(bodies.size(), std::size_t{proto::op_count});
    std::uint64_t n = 0;
    for (const auto &body : bodies) {
        const proto::Request req = samples::request(body, ++n);
        ATF_REQUIRE_EQ(static_cast<std::uint64_t>(req.op()), n);
        const auto bytes = encoded(req, key);
        proto::Request back;
        const auto r = proto::decode(bytes, key, back);
        if (!(r)) {
            std::ostringstream why;
            why << proto::op_name(req.op()) << ": " << r.message();
            ATF_FAIL(why.str());
        }
        if (!(back == req)) {
            std::ostringstream why;
            why << proto::op_name(req.op()) << " differs after a round trip";
            ATF_FAIL(why.str());
        }
        ATF_REQUIRE(back.op() == req.op());
        ATF_REQUIRE_EQ(back.cred.groups.size(), pvfs::max_groups);
    }
}

// The samples hold one body per op; a write's other shape, its data
// described for RDMA instead of inline, separately.
// Status with counters (pvfs-top): both directions round-trip, an old
// peer's layout still decodes without them, and every bound is enforced.
ATF_TEST_CASE_WITHOUT_HEAD(status_counters);
ATF_TEST_CASE_BODY(status_counters)
{
    using namespace pvfs::proto;
    const auto ask = samples::request(StatusRequest{.counters = counters_version});
    proto::Request req;
    const proto::Key &key = samples::test_key();
    ATF_REQUIRE(proto::decode(encoded(ask), key, req) && req == ask);
    ATF_REQUIRE(proto::decode(encoded(samples::request(StatusRequest{})), key, req));
    ATF_REQUIRE(!std::get<StatusRequest>(req.body).counters);
    require_request_error(samples::request(StatusRequest{.counters = 0}), DecodeError::bad_value,
                          "counters version 0");
    const OpCounters op{.op = 18, .requests = 9, .errors = 2, .latency_ns = 7, .buckets = {1, 8}};
    const auto answer = [&](ServerCounters c) {
        return samples::response(
            StatusResponse{.server_name = "d0", .version = "v", .counters = std::move(c)});
    };
    const auto full = answer({.ops = std::vector<OpCounters>(max_counter_ops, op),
                              .read_bytes = 1,
                              .write_bytes = 2,
                              .connections = 3});
    proto::Response resp;
    ATF_REQUIRE(proto::decode(encoded(full), key, resp) && resp == full);
    ATF_REQUIRE(proto::decode(encoded(samples::response(StatusResponse{})), key, resp));
    ATF_REQUIRE(!std::get<StatusResponse>(resp.body).counters);
    // Version 2's bulk stages round-trip; a version 1 answer (an older
    // server, or one asked for 1) carries none, and decodes without them.
    ServerCounters staged{.read_bytes = 4};
    staged.bulk_write = {.chunks = 5, .network_ns = 6, .storage_ns = 7, .queued_ns = 0};
    staged.bulk_read = {.chunks = 8, .network_ns = 9, .storage_ns = 10, .queued_ns = 11};
    staged.buffer_waits = 12;
    staged.buffer_wait_ns = 13;
    const auto v2 = answer(staged);
    ATF_REQUIRE(proto::decode(encoded(v2), key, resp) && resp == v2);
    ServerCounters old = staged;
    old.version = 1;
    const std::size_t v1_size = encoded(answer(old)).size();
    ATF_REQUIRE_EQ(v1_size + 10 * sizeof(std::uint64_t), encoded(v2).size());
    ATF_REQUIRE(proto::decode(encoded(answer(old)), key, resp));
    const ServerCounters &got = *std::get<StatusResponse>(resp.body).counters;
    ATF_REQUIRE_EQ(got.version, 1U);
    ATF_REQUIRE_EQ(got.read_bytes, 4U);
    ATF_REQUIRE_EQ(got.bulk_read.chunks, 0U);
    ATF_REQUIRE_EQ(got.buffer_wait_ns, 0U);
    require_response_error(answer({.version = counters_version + 1}), DecodeError::bad_value,
                           "a counters version newer than this one");
    require_response_error(answer({.ops = std::vector<OpCounters>(max_counter_ops + 1, op)}),
                           DecodeError::too_long, "65 ops");
    OpCounters bad = op;
    bad.buckets.assign(max_latency_buckets + 1, 1);
    require_response_error(answer({.ops = {bad}}), DecodeError::too_long, "29 buckets");
    bad = op;
    bad.errors = bad.requests + 1;
    require_response_error(answer({.ops = {bad}}), DecodeError::bad_value, "errors > requests");
    bad = op;
    bad.op = 0;
    require_response_error(answer({.ops = {bad}}), DecodeError::bad_value, "op 0");
}

ATF_TEST_CASE_WITHOUT_HEAD(round_trip_write_described_for_rdma);
ATF_TEST_CASE_BODY(round_trip_write_described_for_rdma)
{
    const auto key = samples::test_key();
    const proto::Request req =
        samples::request(proto::WriteRequest{.handle = 7,
                                             .regions = samples::regions(3),
                                             .chunk_size = 1U << 20U,
                                             .flags = 0,
                                             .inline_data = {},
                                             .rdma = samples::pattern(40, 5)});
    proto::Request back;
    const auto r = proto::decode(encoded(req, key), key, back);
    if (!r)
        ATF_FAIL("write described for RDMA: " + std::string(r.message()));
    ATF_REQUIRE(back == req);
}

ATF_TEST_CASE_WITHOUT_HEAD(round_trip_responses);
ATF_TEST_CASE_BODY(round_trip_responses)
{
    const auto key = samples::test_key();
    std::uint64_t n = 0;
    for (const auto &body : samples::response_bodies()) {
        const proto::Response resp = samples::response(body, ++n);
        ATF_REQUIRE_EQ(static_cast<std::uint64_t>(resp.op()), n);
        const auto bytes = encoded(resp, key);
        proto::Response back;
        const auto r = proto::decode(bytes, key, back);
        if (!(r)) {
            std::ostringstream why;
            why << proto::op_name(resp.op()) << ": " << r.message();
            ATF_FAIL(why.str());
        }
        if (!(back == resp)) {
            std::ostringstream why;
            why << proto::op_name(resp.op()) << " differs after a round trip";
            ATF_FAIL(why.str());
        }
    }
}

// A failed operation's response carries no body, whatever the struct holds.
ATF_TEST_CASE_WITHOUT_HEAD(error_responses);
ATF_TEST_CASE_BODY(error_responses)
{
    const auto key = samples::test_key();
    for (const auto &body : samples::request_bodies()) {
        const proto::Request req = samples::request(body);
        proto::Response resp = proto::response_to(req, ENOENT);
        ATF_REQUIRE(proto::answers(resp, req));
        const auto bytes = encoded(resp, key);
        ATF_REQUIRE_EQ(bytes.size(), response_body_at + proto::mac_size);
        proto::Response back;
        ATF_REQUIRE(proto::decode(bytes, key, back));
        ATF_REQUIRE(back == resp);
        ATF_REQUIRE_EQ(back.status, ENOENT);
        ATF_REQUIRE(proto::answers(back, req));
    }
    // A body is left out when status != 0, even if the struct has one.
    proto::Response with_body = samples::response(proto::ReadlinkResponse{.target = "x"});
    with_body.status = EIO;
    auto bytes = encoded(with_body, key);
    ATF_REQUIRE_EQ(bytes.size(), response_body_at + proto::mac_size);
}

ATF_TEST_CASE_WITHOUT_HEAD(answers_binds_request);
ATF_TEST_CASE_BODY(answers_binds_request)
{
    const proto::Request req = samples::request(proto::GetattrRequest{.handle = 5});
    const proto::Response ok = proto::response_to(req);
    ATF_REQUIRE(proto::answers(ok, req));
    ATF_REQUIRE(std::holds_alternative<proto::GetattrResponse>(ok.body));
    proto::Response other = ok;
    other.seq += 1;
    ATF_REQUIRE(!proto::answers(other, req));
    other = ok;
    other.session ^= 1;
    ATF_REQUIRE(!proto::answers(other, req));
    other = ok;
    other.request_id += 1;
    ATF_REQUIRE(!proto::answers(other, req));
    other = ok;
    other.body = proto::LookupResponse{};
    ATF_REQUIRE(!proto::answers(other, req));
}

ATF_TEST_CASE_WITHOUT_HEAD(op_numbers_and_names);
ATF_TEST_CASE_BODY(op_numbers_and_names)
{
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::get_config), 1);
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::read), 17);
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::list_handles), 30);
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::lookup)), "lookup");
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::xattr_set)), "xattr_set");
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::list_handles)), "list_handles");
    ATF_REQUIRE_EQ(std::string(proto::op_name(static_cast<proto::Op>(0))), "unknown");
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::mkdir_object), 31);
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::remove_dir_object), 35);
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::mkdir_object)), "mkdir_object");
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::unlink_dir)), "unlink_dir");
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::remove_dir_object)), "remove_dir_object");
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::access), 36);
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::access)), "access");
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::session), 37);
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::session)), "session");
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::open), 38);
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::close), 39);
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::orphan_done), 40);
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::list_orphans), 41);
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::open)), "open");
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::close)), "close");
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::orphan_done)), "orphan_done");
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::list_orphans)), "list_orphans");
    ATF_REQUIRE_EQ(static_cast<int>(proto::Op::capability), 42);
    ATF_REQUIRE_EQ(std::string(proto::op_name(proto::Op::capability)), "capability");
    ATF_REQUIRE_EQ(std::string(proto::op_name(static_cast<proto::Op>(43))), "unknown");
    const proto::Request req = samples::request(proto::TruncateObjectRequest{});
    ATF_REQUIRE(req.op() == proto::Op::truncate_object);
    // The op is on the wire at bytes 6..7.
    const auto bytes = encoded(req);
    ATF_REQUIRE_EQ(static_cast<int>(bytes.at(6)), 21);
    ATF_REQUIRE_EQ(static_cast<int>(bytes.at(7)), 0);
}

// Little-endian, field by field, as docs/protocol.md shows.
ATF_TEST_CASE_WITHOUT_HEAD(wire_bytes);
ATF_TEST_CASE_BODY(wire_bytes)
{
    proto::Request req{.request_id = 0x0102030405060708,
                       .session = 9,
                       .seq = 10,
                       .time_ns = -1,
                       .cred = {.uid = 0x11223344, .gid = 5, .groups = {6}},
                       .body = proto::GetattrRequest{.handle = 0xA1A2A3A4A5A6A7A8}};
    const auto m = encoded(req);
    const std::vector<unsigned> head = {
        0x50, 0x56, 0x46, 0x51, 1,    0,    4,    0,    0,    0,    0,    0,    8,    7,    6,
        5,    4,    3,    2,    1,    9,    0,    0,    0,    0,    0,    0,    0,    10,   0,
        0,    0,    0,    0,    0,    0,    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x44,
        0x33, 0x22, 0x11, 5,    0,    0,    0,    1,    0,    0,    0,    6,    0,    0,    0,
        8,    0,    0,    0,    0xA8, 0xA7, 0xA6, 0xA5, 0xA4, 0xA3, 0xA2, 0xA1};
    ATF_REQUIRE_EQ(m.size(), head.size() + proto::mac_size);
    for (std::size_t i = 0; i < head.size(); ++i) {
        ATF_REQUIRE_EQ(static_cast<unsigned>(m.at(i)), head.at(i));
    }
    const proto::Response resp{.status = 2, .request_id = 1, .session = 2, .seq = 3, .body = {}};
    const auto r = encoded(resp);
    const std::vector<unsigned> rhead = {0x50, 0x56, 0x46, 0x52, 1, 0, 1, 0, 2, 0, 0, 0};
    for (std::size_t i = 0; i < rhead.size(); ++i) {
        ATF_REQUIRE_EQ(static_cast<unsigned>(r.at(i)), rhead.at(i));
    }
}

// ---- rejections ----------------------------------------------------------

ATF_TEST_CASE_WITHOUT_HEAD(wrong_magic);
ATF_TEST_CASE_BODY(wrong_magic)
{
    const auto req = encoded(samples::request(proto::StatfsRequest{}));
    const auto resp = encoded(samples::response(proto::StatfsResponse{}));
    require_error(decode_response(req), DecodeError::bad_magic, "request as response");
    require_error(decode_request(resp), DecodeError::bad_magic, "response as request");
    for (std::size_t i = 0; i < 4; ++i) {
        auto m = req;
        m.at(i) ^= std::byte{0x20};
        resign(m);
        require_error(decode_request(m), DecodeError::bad_magic, "request magic byte");
        auto r = resp;
        r.at(i) ^= std::byte{0x20};
        resign(r);
        require_error(decode_response(r), DecodeError::bad_magic, "response magic byte");
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(wrong_version);
ATF_TEST_CASE_BODY(wrong_version)
{
    for (const std::uint16_t version : {0, 2, 0x100, 0xFFFF}) {
        auto m = encoded(samples::request(proto::StatusRequest{}));
        put_u16(m, 4, version);
        resign(m);
        const auto r = decode_request(m);
        require_error(r, DecodeError::bad_version, "request version");
        ATF_REQUIRE_EQ(r.message(), "unsupported protocol version " + std::to_string(version) +
                                        " (this build speaks 1)");
        auto resp = encoded(samples::response(proto::StatusResponse{}));
        put_u16(resp, 4, version);
        resign(resp);
        require_error(decode_response(resp), DecodeError::bad_version, "response version");
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(wrong_op);
ATF_TEST_CASE_BODY(wrong_op)
{
    for (const std::uint16_t op : {0, proto::op_count + 1, 0x1000, 0xFFFF}) {
        auto m = encoded(samples::request(proto::StatusRequest{}));
        put_u16(m, 6, op);
        resign(m);
        const auto r = decode_request(m);
        require_error(r, DecodeError::bad_op, "request op");
        ATF_REQUIRE_EQ(r.message(), "unknown op " + std::to_string(op));
        auto resp = encoded(samples::response(proto::StatusResponse{}));
        put_u16(resp, 6, op);
        resign(resp);
        require_error(decode_response(resp), DecodeError::bad_op, "response op");
    }
    // A known op with another op's body: the body does not parse.
    auto m = encoded(samples::request(proto::LookupRequest{.parent = 1, .name = "abc"}));
    put_u16(m, 6, static_cast<std::uint16_t>(proto::Op::getattr));
    resign(m);
    require_error(decode_request(m), DecodeError::trailing_bytes, "lookup body as getattr");
}

ATF_TEST_CASE_WITHOUT_HEAD(nonzero_flags);
ATF_TEST_CASE_BODY(nonzero_flags)
{
    // Bit 0 is request_has_once (once_ids below), bit 1
    // request_knows_orphaned (orphaned_field), bit 2 request_bound
    // (destination), bit 3 request_create_opens (create_open_field, here on
    // another op), bit 4 request_keyed (keyed), bit 5 request_chunk_macs
    // (chunk_macs_field, here on another op), bit 8 request_chunk_tags_inline
    // (chunk_tags_inline, here without chunk MACs); every other bit is
    // unknown.
    for (const std::uint32_t flags : {8U, 32U, 256U, 288U, 0x80000000U, 0xFFFFFFFFU}) {
        auto m = encoded(samples::request(proto::StatusRequest{}));
        put_u32(m, request_flags_at, flags);
        resign(m);
        require_error(decode_request(m), DecodeError::bad_flags, "flags");
    }
}

// Exactly-once ids travel only with the flag, and are checked.
ATF_TEST_CASE_WITHOUT_HEAD(once_ids);
ATF_TEST_CASE_BODY(once_ids)
{
    const auto key = samples::test_key();
    proto::Request req = samples::request(proto::RemoveRequest{.parent = 9, .name = "f"}, 2);
    ATF_REQUIRE(req.once.present());
    const auto with = encoded(req, key);
    proto::Request plain_req = req;
    plain_req.once = {};
    const auto without = encoded(plain_req, key);
    ATF_REQUIRE_EQ(with.size(), without.size() + 24);
    proto::Request back;
    ATF_REQUIRE(proto::decode(without, key, back));
    ATF_REQUIRE(!back.once.present());
    ATF_REQUIRE(proto::decode(with, key, back));
    ATF_REQUIRE(back.once == req.once);
    // The ids start after the timestamp: flags, request_id, session, seq, time.
    constexpr std::size_t once_at = request_flags_at + 4 + 8 + 8 + 8 + 8;
    struct Bad {
        std::size_t at;
        std::uint32_t value;
        const char *what;
    };
    for (const Bad &bad : {Bad{once_at, 0, "client 0"}, Bad{once_at + 8, proto::max_slots, "slot"},
                           Bad{once_at + 12, proto::max_steps, "step"}}) {
        auto m = with;
        put_u32(m, bad.at, bad.value);
        if (bad.at == once_at)
            put_u32(m, bad.at + 4, 0); // all 64 bits of the client id
        resign(m);
        require_error(decode_request(m), DecodeError::bad_value, bad.what);
    }
    // A retry has the same body, so the same digest; another body differs.
    std::vector<std::byte> scratch;
    const auto d1 = proto::body_digest(req.body, scratch);
    ATF_REQUIRE(d1 == proto::body_digest(back.body, scratch));
    ATF_REQUIRE(d1 != proto::body_digest(proto::RemoveRequest{.parent = 9, .name = "g"}, scratch));
    ATF_REQUIRE(d1 != proto::body_digest(proto::RmdirRequest{.parent = 9, .name = "f"}, scratch));
}

// The destination travels only with its flag, after the exactly-once ids,
// under the MAC.
ATF_TEST_CASE_WITHOUT_HEAD(destination);
ATF_TEST_CASE_BODY(destination)
{
    const auto key = samples::test_key();
    for (const bool with_once : {false, true}) {
        proto::Request req = samples::request(proto::TruncateObjectRequest{.handle = 5, .size = 0},
                                              with_once ? 2 : 1);
        ATF_REQUIRE_EQ(req.once.present(), with_once);
        req.to.reset();
        const auto unbound = encoded(req, key);
        req.to = proto::Destination{.fs_id = 0x01020304, .server_index = 7};
        const auto bound = encoded(req, key);
        ATF_REQUIRE_EQ(bound.size(), unbound.size() + 8);
        proto::Request back;
        ATF_REQUIRE(proto::decode(unbound, key, back));
        ATF_REQUIRE(!back.to);
        ATF_REQUIRE(proto::decode(bound, key, back));
        ATF_REQUIRE(back == req);
        ATF_REQUIRE(back.to && back.to->fs_id == 0x01020304 && back.to->server_index == 7);

        // flags, request_id, session, seq, time, then the once ids if any.
        const std::size_t to_at = request_flags_at + 4 + 8 + 8 + 8 + 8 + (with_once ? 24 : 0);
        ATF_REQUIRE(bound.at(to_at) == std::byte{0x04});  // fs_id, little-endian
        ATF_REQUIRE(bound.at(to_at + 4) == std::byte{7}); // server_index
        // Another server or file system in the same signed bytes: bad MAC.
        for (const std::size_t at : {to_at, to_at + 3, to_at + 4, to_at + 7}) {
            auto m = bound;
            m.at(at) ^= std::byte{1};
            require_error(decode_request(m), DecodeError::bad_mac, "destination byte flipped");
        }
        // Dropping the flag (and the 8 bytes) from a bound request: bad MAC.
        const auto cut = static_cast<std::ptrdiff_t>(to_at);
        std::vector<std::byte> stripped(bound.begin(), bound.begin() + cut);
        stripped.insert(stripped.end(), bound.begin() + cut + 8, bound.end());
        put_u32(stripped, request_flags_at,
                (with_once ? proto::request_has_once : 0U) |
                    (req.cap ? proto::request_capability : 0U));
        require_error(decode_request(stripped), DecodeError::bad_mac, "destination stripped");
    }
}

// A client key (a Key with a name) sets flag bit 4 and puts its id after the
// destination; the server chooses the key by that id (request_key_id) and
// the decoder holds the id to the key that verifies.
ATF_TEST_CASE_WITHOUT_HEAD(keyed);
ATF_TEST_CASE_BODY(keyed)
{
    const auto cluster = samples::test_key();
    std::array<std::byte, proto::key_size> a_bytes{};
    a_bytes.fill(std::byte{0x11});
    auto a = proto::Key::from_bytes(a_bytes);
    a.set_name("node-a");
    auto b = proto::Key::from_bytes(a_bytes); // the same bytes, another name
    b.set_name("node-b");
    ATF_REQUIRE(a.id() == proto::key_id("node-a") && b.id() == proto::key_id("node-b"));
    ATF_REQUIRE(a.id() != b.id());
    ATF_REQUIRE_EQ(proto::key_id("node-a"), proto::key_id(std::string("node-a")));
    ATF_REQUIRE(proto::valid_key_name("a.B-9_") && !proto::valid_key_name("") &&
                !proto::valid_key_name("a b") && !proto::valid_key_name(std::string(65, 'x')) &&
                proto::valid_key_name(std::string(64, 'x')));
    for (const bool with_once : {false, true}) {
        for (const bool with_to : {false, true}) {
            proto::Request req = samples::request(
                proto::TruncateObjectRequest{.handle = 5, .size = 0}, with_once ? 2 : 1);
            if (with_to)
                req.to = proto::Destination{.fs_id = 9, .server_index = 1};
            else
                req.to.reset();
            const auto plain = encoded(req, cluster);
            const auto keyed = encoded(req, a);
            ATF_REQUIRE_EQ(keyed.size(), plain.size() + 4);
            ATF_REQUIRE(!proto::request_key_id(plain));
            ATF_REQUIRE(proto::request_key_id(keyed) == a.id());
            const std::size_t id_at = request_flags_at + 4 + std::size_t{4} * 8 +
                                      (with_once ? 24 : 0) + (with_to ? 8 : 0);
            ATF_REQUIRE(keyed.at(id_at) == static_cast<std::byte>(*a.id() & 0xffU));
            ATF_REQUIRE((std::to_integer<unsigned>(keyed.at(request_flags_at)) & 16U) != 0);
            proto::Request back;
            ATF_REQUIRE(proto::decode(keyed, a, back));
            ATF_REQUIRE(back == req);
            // Key b's id in a's message: the id is under the MAC.
            auto renamed = keyed;
            put_u32(renamed, id_at, *b.id());
            ATF_REQUIRE(proto::request_key_id(renamed) == b.id());
            require_error(proto::decode(renamed, b, back), DecodeError::bad_mac,
                          "a's request renamed to b, checked with b");
            require_error(proto::decode(renamed, a, back), DecodeError::bad_mac,
                          "a's request renamed to b, checked with a");
            // Checked with another key than its id's, or without a name.
            require_error(proto::decode(keyed, b, back), DecodeError::bad_mac, "b for a's id");
            require_error(proto::decode(keyed, cluster, back), DecodeError::bad_mac,
                          "the cluster key for a's id");
            // An unkeyed request is never checked with a client key.
            require_error(proto::decode(plain, a, back), DecodeError::bad_mac,
                          "unkeyed, checked with a client key");
            // Every truncation of the envelope up to the id: no id read.
            for (std::size_t n = 0; n < id_at + 4; ++n)
                ATF_REQUIRE(!proto::request_key_id(std::span(keyed).first(n)));
            // Responses are MACed with the request's key.
            const proto::Response resp = proto::response_to(req, 0);
            const auto r = encoded(resp, a);
            proto::Response rback;
            ATF_REQUIRE(proto::decode(r, a, rback));
            require_error(proto::decode(r, cluster, rback), DecodeError::bad_mac,
                          "a's response checked with the cluster key");
        }
    }
    // The key's name and id move with it.
    auto moved = std::move(a);
    ATF_REQUIRE(moved.name() == "node-a" && moved.id() == proto::key_id("node-a"));
}

// RemoveResponse/RenameResponse::orphaned is a trailing field: absent, the
// body is the old one (for a client that did not say it knows it); the
// request says so with an envelope flag.
ATF_TEST_CASE_WITHOUT_HEAD(orphaned_field);
ATF_TEST_CASE_BODY(orphaned_field)
{
    const auto key = samples::test_key();
    proto::RemoveResponse body{.handle = 9, .nlink_after = 0, .layout = {65536, 1, 0}};
    const auto old_layout = encoded(samples::response(body), key);
    body.orphaned = false;
    const auto with_false = encoded(samples::response(body), key);
    body.orphaned = true;
    const auto with_true = encoded(samples::response(body), key);
    ATF_REQUIRE_EQ(with_true.size(), old_layout.size() + 1);
    proto::Response back;
    ATF_REQUIRE(proto::decode(old_layout, key, back));
    ATF_REQUIRE(!std::get<proto::RemoveResponse>(back.body).orphaned.has_value());
    ATF_REQUIRE(proto::decode(with_false, key, back));
    ATF_REQUIRE(std::get<proto::RemoveResponse>(back.body).orphaned == false);
    ATF_REQUIRE(proto::decode(with_true, key, back));
    ATF_REQUIRE(std::get<proto::RemoveResponse>(back.body).orphaned == true);
    auto bad = with_true;
    bad.at(bad.size() - proto::mac_size - 1) = std::byte{2};
    resign(bad);
    require_error(decode_response(bad), DecodeError::bad_value, "orphaned not a boolean");

    proto::Request req = samples::request(proto::RemoveRequest{.parent = 9, .name = "f"});
    req.once = {};
    req.knows_orphaned = true;
    const auto m = encoded(req, key);
    ATF_REQUIRE_EQ(static_cast<unsigned>(m.at(request_flags_at)), 2U);
    proto::Request rback;
    ATF_REQUIRE(proto::decode(m, key, rback));
    ATF_REQUIRE(rback.knows_orphaned);
    req.knows_orphaned = false;
    ATF_REQUIRE(proto::decode(encoded(req, key), key, rback));
    ATF_REQUIRE(!rback.knows_orphaned);
}

// A create's open travels at the end of its body, with the envelope flag
// that says so; the two must agree, and the open is checked as an open.
ATF_TEST_CASE_WITHOUT_HEAD(create_open_field);
ATF_TEST_CASE_BODY(create_open_field)
{
    const auto key = samples::test_key();
    proto::CreateRequest body{.parent = 9, .name = "f", .mode = 0644, .exclusive = true};
    proto::Request req = samples::request(body);
    req.once = {};
    const auto plain = encoded(req, key);
    ATF_REQUIRE_EQ(static_cast<unsigned>(plain.at(request_flags_at)), 0U);
    body.open = proto::CreateOpen{.client_id = 5, .mode = proto::open_write, .gen = 42};
    req.body = body;
    const auto with_open = encoded(req, key);
    ATF_REQUIRE_EQ(static_cast<unsigned>(with_open.at(request_flags_at)), 8U);
    ATF_REQUIRE_EQ(with_open.size(), plain.size() + 20);
    proto::Request back;
    ATF_REQUIRE(proto::decode(with_open, key, back));
    ATF_REQUIRE(back == req);
    ATF_REQUIRE(proto::decode(plain, key, back));
    ATF_REQUIRE(!std::get<proto::CreateRequest>(back.body).open.has_value());

    // The flag without the open, and the open without the flag.
    auto flag_only = plain;
    put_u32(flag_only, request_flags_at, 8);
    resign(flag_only);
    const auto r1 = decode_request(flag_only);
    require_error(r1, DecodeError::bad_value, "flag without the open");
    ATF_REQUIRE_EQ(std::string(r1.what), "create_opens flag without the open");
    auto open_only = with_open;
    put_u32(open_only, request_flags_at, 0);
    resign(open_only);
    const auto r2 = decode_request(open_only);
    require_error(r2, DecodeError::bad_value, "open without the flag");
    ATF_REQUIRE_EQ(std::string(r2.what), "create's open without the create_opens flag");
    // Cut anywhere, it is truncated, never misread.
    for (std::size_t n = 0; n < with_open.size(); ++n) {
        require_error(decode_request(std::span(with_open).first(n)), DecodeError::truncated,
                      "create with open cut to " + std::to_string(n) + " bytes");
    }
    // A partial open (the body's length cut inside it, MAC valid).
    for (std::size_t cut = 1; cut < 20; ++cut) {
        auto m = with_open;
        m.erase(m.end() - static_cast<std::ptrdiff_t>(proto::mac_size + cut),
                m.end() - static_cast<std::ptrdiff_t>(proto::mac_size));
        put_u32(m, sample_body_length_at,
                static_cast<std::uint32_t>(m.size() - sample_body_at - proto::mac_size));
        resign(m);
        require_error(decode_request(m), DecodeError::truncated,
                      "open cut by " + std::to_string(cut) + " bytes");
    }

    const auto decode_req = [&](proto::CreateOpen open) {
        proto::Request r = req;
        std::get<proto::CreateRequest>(r.body).open = open;
        return proto::decode(encoded(r, key), key, back);
    };
    require_error(decode_req({.client_id = 0, .mode = 1, .gen = 1}), DecodeError::bad_value,
                  "create's open of client 0");
    require_error(decode_req({.client_id = 1, .mode = 0, .gen = 1}), DecodeError::bad_value,
                  "create's open of mode 0");
    require_error(decode_req({.client_id = 1, .mode = 4, .gen = 1}), DecodeError::bad_value,
                  "create's open mode bit 4");
    require_error(decode_req({.client_id = 1, .mode = 3, .gen = 0}), DecodeError::bad_value,
                  "create's open of gen 0");
    ATF_REQUIRE(decode_req({.client_id = 1, .mode = 3, .gen = 1}));

    // The reply cache tells a create with an open from one without.
    std::vector<std::byte> scratch;
    proto::CreateRequest bare = body;
    bare.open.reset();
    ATF_REQUIRE(proto::body_digest(body, scratch) != proto::body_digest(bare, scratch));
}

// A capability rides in the envelope of the data ops only, under the
// request's MAC; its tag is the capability key's, over every field.
ATF_TEST_CASE_WITHOUT_HEAD(capability_field);
ATF_TEST_CASE_BODY(capability_field)
{
    const auto key = samples::test_key();
    const proto::CapabilityKey ck = proto::capability_key(key);
    proto::Request req = samples::request(
        proto::ReadRequest{.handle = 9, .regions = {{0, 4096}}, .chunk_size = 1U << 16U});
    ATF_REQUIRE(req.cap.has_value());
    req.cap = samples::capability(9, proto::cap_read);
    ATF_REQUIRE(proto::capability_signed(ck, *req.cap));
    const auto with = encoded(req, key);
    ATF_REQUIRE((static_cast<unsigned>(with.at(request_flags_at)) & proto::request_capability) !=
                0);
    proto::Request back;
    ATF_REQUIRE(proto::decode(with, key, back));
    ATF_REQUIRE(back == req);
    ATF_REQUIRE(back.cap && proto::capability_signed(ck, *back.cap));
    // Every field is under the tag.
    for (int field = 0; field < 6; ++field) {
        proto::Capability c = *req.cap;
        switch (field) {
        case 0:
            c.handle ^= 1;
            break;
        case 1:
            c.rights ^= proto::cap_write;
            break;
        case 2:
            c.fs_id ^= 1;
            break;
        case 3:
            c.keyed = true;
            c.key_id = 1;
            break;
        case 4:
            c.key_id = 5;
            break;
        default:
            c.expires_ns += 1;
            break;
        }
        ATF_REQUIRE(!proto::capability_signed(ck, c));
    }
    // Another cluster's key signs other tags.
    ATF_REQUIRE(!proto::capability_signed(proto::capability_key(samples::other_key()), *req.cap));
    // Only data ops take one.
    proto::Request lookup = samples::request(proto::LookupRequest{.parent = 1, .name = "a"});
    lookup.cap = req.cap;
    require_error(decode_request(encoded(lookup, key)), DecodeError::bad_flags,
                  "capability on lookup");
    // Rights 0 or unknown are refused.
    for (const std::uint32_t rights : {0U, 8U}) {
        proto::Request bad = req;
        bad.cap->rights = rights;
        require_error(decode_request(encoded(bad, key)), DecodeError::bad_value, "bad rights");
    }
}

// request_wants_capability: on create and open only.
ATF_TEST_CASE_WITHOUT_HEAD(wants_capability_flag);
ATF_TEST_CASE_BODY(wants_capability_flag)
{
    const auto key = samples::test_key();
    for (const proto::RequestBody &body :
         {proto::RequestBody{proto::OpenRequest{
              .handle = 7, .client_id = 1, .mode = 1, .gen = 1, .reclaim = false}},
          proto::RequestBody{proto::CreateRequest{.parent = 1,
          .name = "f",
          .mode = 0644,
          .exclusive = false,
          .layout = {},
          .open = std::nullopt}}}) {
        proto::Request req = samples::request(body);
        req.cap.reset();
        req.wants_capability = true;
        proto::Request back;
        ATF_REQUIRE(proto::decode(encoded(req, key), key, back));
        ATF_REQUIRE(back.wants_capability);
    }
    proto::Request lookup = samples::request(proto::LookupRequest{.parent = 1, .name = "f"});
    lookup.cap.reset();
    lookup.wants_capability = true;
    require_error(decode_request(encoded(lookup, key)), DecodeError::bad_flags,
                  "wants_capability on lookup");
}

// Chunk MACs travel at the end of a read's or write's body, with the
// envelope flag that says so; the two must agree, and the list is bounded.
// Tags with their chunks: the envelope flag, MACs without tags in the
// request, never with RDMA; the response then carries none either.
ATF_TEST_CASE_WITHOUT_HEAD(chunk_tags_inline);
ATF_TEST_CASE_BODY(chunk_tags_inline)
{
    const auto key = samples::test_key();
    proto::WriteRequest body{.handle = 7, .regions = {{0, 3U << 16U}}, .chunk_size = 1U << 16U};
    body.macs = proto::ChunkMacs{.key_check = 0x1122334455667788, .tags = {}, .with_chunks = true};
    proto::Request req = samples::request(body);
    req.once = {};
    req.cap.reset();
    const auto with = encoded(req, key);
    ATF_REQUIRE_EQ(static_cast<unsigned>(with.at(request_flags_at)), 32U);
    ATF_REQUIRE_EQ(static_cast<unsigned>(with.at(request_flags_at + 1)), 1U);
    proto::Request back;
    ATF_REQUIRE(proto::decode(with, key, back));
    ATF_REQUIRE(back == req);
    ATF_REQUIRE(std::get<proto::WriteRequest>(back.body).macs->with_chunks);
    // The same MACs without the flag: an ordinary write with no tags.
    auto plain = with;
    put_u32(plain, request_flags_at, 32);
    resign(plain);
    ATF_REQUIRE(proto::decode(plain, key, back));
    ATF_REQUIRE(!std::get<proto::WriteRequest>(back.body).macs->with_chunks);
    // The flag without chunk MACs is refused before the body is read.
    auto no_macs = with;
    put_u32(no_macs, request_flags_at, 256);
    resign(no_macs);
    require_error(decode_request(no_macs), DecodeError::bad_flags, "inline tags without MACs");
    const auto decode_with = [&](proto::RequestBody b) {
        proto::Request r = req;
        r.body = std::move(b);
        return proto::decode(encoded(r, key), key, back);
    };
    proto::WriteRequest tagged = body;
    proto::ChunkMac t{};
    tagged.macs->tags = {t, t, t};
    const auto r1 = decode_with(tagged);
    require_error(r1, DecodeError::bad_value, "tags in the request too");
    ATF_REQUIRE_EQ(std::string(r1.what), "tags in a request whose tags travel with its chunks");
    proto::WriteRequest rdma = body;
    rdma.rdma = samples::pattern(40, 3);
    require_error(decode_with(rdma), DecodeError::bad_value, "inline tags and RDMA");
    proto::ReadRequest read{.handle = 7, .regions = {{0, 100}}, .chunk_size = 1U << 16U};
    read.macs = proto::ChunkMacs{.key_check = 5, .tags = {}, .with_chunks = true};
    ATF_REQUIRE(decode_with(read));
    ATF_REQUIRE(back.body == proto::RequestBody(read));
    read.rdma = samples::pattern(40, 4);
    require_error(decode_with(read), DecodeError::bad_value, "read: inline tags and RDMA");
}

ATF_TEST_CASE_WITHOUT_HEAD(chunk_macs_field);
ATF_TEST_CASE_BODY(chunk_macs_field)
{
    const auto key = samples::test_key();
    proto::WriteRequest body{.handle = 7, .regions = {{0, 3U << 16U}}, .chunk_size = 1U << 16U};
    proto::Request req = samples::request(body);
    req.once = {};
    req.cap.reset();
    const auto plain = encoded(req, key);
    proto::ChunkMac t{};
    t.fill(std::byte{0xAB});
    body.macs = proto::ChunkMacs{.key_check = 0x1122334455667788, .tags = {t, t, t}};
    req.body = body;
    const auto with_macs = encoded(req, key);
    ATF_REQUIRE_EQ(static_cast<unsigned>(with_macs.at(request_flags_at)), 32U);
    ATF_REQUIRE_EQ(with_macs.size(), plain.size() + 8 + 4 + 3 * proto::chunk_mac_size);
    proto::Request back;
    ATF_REQUIRE(proto::decode(with_macs, key, back));
    ATF_REQUIRE(back == req);
    ATF_REQUIRE(proto::decode(plain, key, back));
    ATF_REQUIRE(!std::get<proto::WriteRequest>(back.body).macs.has_value());

    auto flag_only = plain;
    put_u32(flag_only, request_flags_at, 32);
    resign(flag_only);
    const auto r1 = decode_request(flag_only);
    require_error(r1, DecodeError::bad_value, "flag without the MACs");
    ATF_REQUIRE_EQ(std::string(r1.what), "chunk_macs flag without the MACs");
    auto macs_only = with_macs;
    put_u32(macs_only, request_flags_at, 0);
    resign(macs_only);
    const auto r2 = decode_request(macs_only);
    require_error(r2, DecodeError::bad_value, "MACs without the flag");
    ATF_REQUIRE_EQ(std::string(r2.what), "chunk MACs without the chunk_macs flag");
    for (std::size_t n = 0; n < with_macs.size(); ++n) {
        require_error(decode_request(std::span(with_macs).first(n)), DecodeError::truncated,
                      "write with MACs cut to " + std::to_string(n) + " bytes");
    }
    const auto decode_with = [&](proto::RequestBody b) {
        proto::Request r = req;
        r.body = std::move(b);
        return proto::decode(encoded(r, key), key, back);
    };
    proto::WriteRequest zero = body;
    zero.macs->key_check = 0;
    require_error(decode_with(zero), DecodeError::bad_value, "key check 0");
    proto::WriteRequest huge = body;
    huge.macs->tags.resize(proto::max_chunk_macs + 1);
    require_error(decode_with(huge), DecodeError::too_long, "4097 tags");
    proto::WriteRequest inline_too = body;
    inline_too.inline_data = samples::pattern(10, 1);
    require_error(decode_with(inline_too), DecodeError::bad_value, "inline data and MACs");
    // A read names the key only; its tags come in the response.
    proto::ReadRequest read{.handle = 7, .regions = {{0, 100}}, .chunk_size = 1U << 16U};
    read.macs = proto::ChunkMacs{.key_check = 5, .tags = {}};
    ATF_REQUIRE(decode_with(read));
    ATF_REQUIRE(back.body == proto::RequestBody(read));
    read.macs->tags = {t};
    require_error(decode_with(read), DecodeError::bad_value, "a read request with tags");

    // The response's tags: present exactly when sent.
    proto::Response resp = samples::response(proto::ReadResponse{.bytes = 1, .object_size = 2});
    resp.body = proto::ReadResponse{.bytes = 1, .object_size = 2, .macs = std::vector{t, t}};
    std::vector<std::byte> out;
    proto::encode(resp, key, out);
    proto::Response rback;
    ATF_REQUIRE(proto::decode(out, key, rback));
    ATF_REQUIRE(rback == resp);

    // The MAC binds every field of the binding, the index and the bytes.
    proto::SessionKey sk{};
    sk.fill(std::byte{3});
    const std::vector<std::byte> data = samples::pattern(1000, 2);
    const std::span<const std::byte> piece(data);
    const proto::ChunkBinding b0{true, 1, 2, 3, 4, 5, 6, 65536};
    const proto::ChunkMac m0 = proto::chunk_mac(sk, b0, 0, std::span(&piece, 1));
    ATF_REQUIRE(proto::same_mac(m0, proto::chunk_mac(sk, b0, 0, std::span(&piece, 1))));
    // A known answer, computed by the libsodium Poly1305 the MACs used
    // before libcrypto's: the tags on the wire never changed.
    {
        proto::SessionKey k{};
        for (std::size_t i = 0; i < k.size(); ++i)
            k.at(i) = static_cast<std::byte>(i * 7 + 1);
        std::vector<std::byte> big(70000);
        for (std::size_t i = 0; i < big.size(); ++i)
            big.at(i) = static_cast<std::byte>((i * 131 + 17) & 0xffU);
        const std::span<const std::byte> all(big);
        const proto::ChunkBinding kb{true, 0x11223344, 2, 0x0102030405060708ULL, 9, 10, 11, 65536};
        const proto::ChunkMac got = proto::chunk_mac(k, kb, 3, std::span(&all, 1));
        std::string hex;
        for (const std::byte x : got) {
            hex += "0123456789abcdef"[static_cast<unsigned>(x) >> 4U];
            hex += "0123456789abcdef"[static_cast<unsigned>(x) & 15U];
        }
        ATF_REQUIRE_EQ(hex, "ca5b43f242ae577ff42c095a33cb5e49");
    }
    // Scattered the same bytes give the same tag.
    const std::array<std::span<const std::byte>, 2> halves{piece.first(300), piece.subspan(300)};
    ATF_REQUIRE(proto::same_mac(m0, proto::chunk_mac(sk, b0, 0, halves)));
    ATF_REQUIRE(!proto::same_mac(m0, proto::chunk_mac(sk, b0, 1, std::span(&piece, 1))));
    for (int f = 0; f < 8; ++f) {
        proto::ChunkBinding b = b0;
        switch (f) {
        case 0:
            b.is_write = false;
            break;
        case 1:
            ++b.fs_id;
            break;
        case 2:
            ++b.server_index;
            break;
        case 3:
            ++b.handle;
            break;
        case 4:
            ++b.session;
            break;
        case 5:
            ++b.seq;
            break;
        case 6:
            ++b.request_id;
            break;
        default:
            ++b.chunk_size;
            break;
        }
        ATF_REQUIRE(!proto::same_mac(m0, proto::chunk_mac(sk, b, 0, std::span(&piece, 1))));
    }
    const std::span<const std::byte> shorter = piece.first(999);
    ATF_REQUIRE(!proto::same_mac(m0, proto::chunk_mac(sk, b0, 0, std::span(&shorter, 1))));
    proto::SessionKey other = sk;
    other[0] = std::byte{4};
    ATF_REQUIRE(!proto::same_mac(m0, proto::chunk_mac(other, b0, 0, std::span(&piece, 1))));
    ATF_REQUIRE(proto::session_key_check(sk) != 0);
    ATF_REQUIRE(proto::session_key_check(sk) != proto::session_key_check(other));
}

// The open-reference bodies refuse what no client sends.
ATF_TEST_CASE_WITHOUT_HEAD(open_close_values);
ATF_TEST_CASE_BODY(open_close_values)
{
    const auto key = samples::test_key();
    proto::Request back;
    const auto decode_req = [&](const proto::RequestBody &body) {
        return proto::decode(encoded(samples::request(body), key), key, back);
    };
    require_error(decode_req(proto::OpenRequest{.handle = 1, .client_id = 0}),
                  DecodeError::bad_value, "open of client 0");
    require_error(decode_req(proto::OpenRequest{.handle = 1, .client_id = 1, .mode = 4}),
                  DecodeError::bad_value, "open mode bit 4");
    require_error(decode_req(proto::CloseRequest{.client_id = 0}), DecodeError::bad_value,
                  "close of client 0");
    ATF_REQUIRE(decode_req(proto::CloseRequest{.client_id = 3}));
    ATF_REQUIRE(std::get<proto::CloseRequest>(back.body).refs.empty());
    proto::Response rback;
    require_error(proto::decode(encoded(samples::response(proto::ListOrphansResponse{
                                            .entries = {{.handle = 1, .state = 3}}}),
                                        key),
                                key, rback),
                  DecodeError::bad_value, "orphan state 3");
}

// The reply cache's body codec: every response body round-trips.
ATF_TEST_CASE_WITHOUT_HEAD(body_codec);
ATF_TEST_CASE_BODY(body_codec)
{
    std::vector<std::byte> bytes;
    std::uint16_t op = 0;
    for (const auto &body : samples::response_bodies()) {
        ++op;
        proto::encode_body(body, bytes);
        proto::ResponseBody back;
        const auto r = proto::decode_body(static_cast<proto::Op>(op), bytes, back);
        if (!r)
            ATF_FAIL(std::string(proto::op_name(static_cast<proto::Op>(op))) + ": " + r.message());
        ATF_REQUIRE(back == body);
        if (!bytes.empty()) {
            // Short by a byte: refused, or (a trailing field, such as
            // RemoveResponse::orphaned, cut off whole) another body.
            bytes.pop_back();
            ATF_REQUIRE(!proto::decode_body(static_cast<proto::Op>(op), bytes, back) ||
                        back != body);
        }
    }
    proto::ResponseBody unused;
    ATF_REQUIRE(!proto::decode_body(static_cast<proto::Op>(0), bytes, unused));
}

ATF_TEST_CASE_WITHOUT_HEAD(truncated_at_every_byte);
ATF_TEST_CASE_BODY(truncated_at_every_byte)
{
    std::vector<std::vector<std::byte>> requests;
    std::vector<std::vector<std::byte>> responses;
    const auto rb = samples::request_bodies();
    const auto sb = samples::response_bodies();
    for (const proto::Op op : {proto::Op::lookup, proto::Op::setattr, proto::Op::write,
                               proto::Op::xattr_set, proto::Op::statfs}) {
        requests.push_back(encoded(samples::request(rb.at(static_cast<std::size_t>(op) - 1))));
    }
    for (const proto::Op op : {proto::Op::status, proto::Op::getattr, proto::Op::readdir,
                               proto::Op::xattr_list, proto::Op::fsync}) {
        responses.push_back(encoded(samples::response(sb.at(static_cast<std::size_t>(op) - 1))));
    }
    for (const auto &m : requests) {
        ATF_REQUIRE(decode_request(m));
        for (std::size_t n = 0; n < m.size(); ++n) {
            require_error(decode_request(std::span(m).first(n)), DecodeError::truncated,
                          "request cut to " + std::to_string(n) + " bytes");
        }
    }
    for (const auto &m : responses) {
        ATF_REQUIRE(decode_response(m));
        for (std::size_t n = 0; n < m.size(); ++n) {
            require_error(decode_response(std::span(m).first(n)), DecodeError::truncated,
                          "response cut to " + std::to_string(n) + " bytes");
        }
    }
}

// Every length and count one above its limit, with a valid MAC.
ATF_TEST_CASE_WITHOUT_HEAD(lengths_over_limits);
ATF_TEST_CASE_BODY(lengths_over_limits)
{
    using namespace pvfs::proto;
    const std::string name256(pvfs::max_name + 1, 'n');
    require_request_error(samples::request(LookupRequest{.parent = 1, .name = name256}),
                          DecodeError::too_long, "name 256");
    require_request_error(
        samples::request(RenameRequest{
            .old_parent = 1, .old_name = "a", .new_parent = 1, .new_name = name256, .flags = 0}),
        DecodeError::too_long, "rename new name 256");
    require_request_error(
        samples::request(SymlinkRequest{
            .parent = 1, .name = "s", .target = std::string(pvfs::max_path + 1, 'p')}),
        DecodeError::too_long, "path 4096");
    require_response_error(
        samples::response(ReadlinkResponse{.target = std::string(pvfs::max_path + 1, 'p')}),
        DecodeError::too_long, "readlink 4096");

    proto::Request groups = samples::request(GetattrRequest{.handle = 1});
    groups.cred.groups.push_back(1);
    ATF_REQUIRE_EQ(groups.cred.groups.size(), std::size_t{33});
    require_request_error(groups, DecodeError::too_long, "groups 33");

    require_request_error(
        samples::request(ReadRequest{.handle = 1, .regions = samples::regions(1025)}),
        DecodeError::too_long, "read regions 1025");
    require_request_error(
        samples::request(WriteRequest{.handle = 1, .regions = samples::regions(1025)}),
        DecodeError::too_long, "write regions 1025");
    require_request_error(
        samples::request(WriteRequest{.handle = 1,
                                      .regions = samples::regions(1),
                                      .inline_data = samples::pattern(max_inline_data + 1, 0)}),
        DecodeError::too_long, "inline data 64 KiB + 1");
    require_request_error(
        samples::request(XattrSetRequest{.handle = 1,
                                         .name = "user.a",
                                         .value = samples::pattern(pvfs::max_xattr_value + 1, 0)}),
        DecodeError::too_long, "xattr value 65537");
    require_response_error(samples::response(XattrGetResponse{
                               .value = samples::pattern(pvfs::max_xattr_value + 1, 0)}),
                           DecodeError::too_long, "xattr_get value 65537");
    require_request_error(samples::request(XattrGetRequest{
                              .handle = 1, .name = std::string(pvfs::max_xattr_name + 1, 'x')}),
                          DecodeError::too_long, "xattr name 256");
    require_request_error(samples::request(ObjectSizesRequest{
                              .handles = std::vector<pvfs::Handle>(max_object_sizes + 1, 1)}),
                          DecodeError::too_long, "object_sizes 1025");
    require_response_error(samples::response(ObjectSizesResponse{
                               .sizes = std::vector<std::uint64_t>(max_object_sizes + 1, 1)}),
                           DecodeError::too_long, "object_sizes reply 1025");
    require_response_error(samples::response(ReaddirResponse{
                               .entries = std::vector<DirEntry>(max_readdir_entries + 1,
                                                                DirEntry{.name = "e", .handle = 1}),
                               .eof = false}),
                           DecodeError::too_long, "readdir 4097 entries");
    require_response_error(
        samples::response(GetConfigResponse{.config_text = std::string(max_config_text + 1, 'c')}),
        DecodeError::too_long, "config 1 MiB + 1");
    require_response_error(samples::response(ListHandlesResponse{
                               .handles = std::vector<pvfs::Handle>(max_list_handles + 1, 1)}),
                           DecodeError::too_long, "list_handles 16385");
    require_response_error(samples::response(XattrListResponse{
                               .names = std::vector<std::string>(max_xattr_names + 1, "user.x")}),
                           DecodeError::too_long, "xattr_list 4097 names");
    require_response_error(samples::response(StatusResponse{.server_name = std::string(256, 's')}),
                           DecodeError::too_long, "server name 256");

    // Exactly at the limits is fine.
    const auto at_limit =
        samples::request(XattrSetRequest{.handle = 1,
                                         .name = std::string(pvfs::max_xattr_name, 'x'),
                                         .value = samples::pattern(pvfs::max_xattr_value, 0),
                                         .flags = 0});
    ATF_REQUIRE(decode_request(encoded(at_limit)));
    const auto config = samples::response(
        GetConfigResponse{.config_text = std::string(max_config_text, 'c'), .server_index = 0});
    ATF_REQUIRE(decode_response(encoded(config)));
}

// Counts and lengths within their limits but beyond the bytes left are
// refused before anything is allocated for them.
ATF_TEST_CASE_WITHOUT_HEAD(counts_beyond_bytes_left);
ATF_TEST_CASE_BODY(counts_beyond_bytes_left)
{
    using namespace pvfs::proto;
    // The name's length (at the body's offset 8) says 200 but 3 bytes follow.
    auto m = encoded(samples::request(LookupRequest{.parent = 1, .name = "abc"}));
    put_u32(m, sample_body_at + 8, 200);
    resign(m);
    require_error(decode_request(m), DecodeError::truncated, "name length 200 of 3");

    // 1000 handles (8000 bytes) announced, 1 present.
    m = encoded(samples::request(ObjectSizesRequest{.handles = {7}}));
    put_u32(m, sample_body_at, 1000);
    resign(m);
    require_error(decode_request(m), DecodeError::truncated, "1000 handles of 1");

    // 32 groups announced with none present: the count alone is checked.
    proto::Request no_groups = samples::request(StatfsRequest{});
    no_groups.cred.groups.clear();
    m = encoded(no_groups);
    put_u32(m, request_groups_at, 32);
    resign(m);
    require_error(decode_request(m), DecodeError::truncated, "32 groups of 0");

    // 2^31 entries in a short message: over the limit, refused before any
    // reserve().
    m = encoded(samples::response(ReaddirResponse{}));
    put_u32(m, response_body_at, 0x80000000U);
    resign(m);
    const auto r = decode_response(m);
    require_error(r, DecodeError::too_long, "2^31 entries");
    ATF_REQUIRE_EQ(r.value, 0x80000000U);

    // 4096 entries (at the limit) cannot fit in 5 bytes.
    m = encoded(samples::response(ReaddirResponse{}));
    put_u32(m, response_body_at, 4096);
    resign(m);
    require_error(decode_response(m), DecodeError::truncated, "4096 entries in 5 bytes");

    // A body length larger than the message.
    m = encoded(samples::request(StatfsRequest{}));
    put_u32(m, sample_body_length_at, 0xFFFFFFFFU);
    require_error(decode_request(m), DecodeError::truncated, "body length 2^32 - 1");
    auto resp = encoded(samples::response(StatfsResponse{}));
    put_u32(resp, response_body_length_at, 1000);
    require_error(decode_response(resp), DecodeError::truncated, "response body length 1000");
}

ATF_TEST_CASE_WITHOUT_HEAD(bad_values);
ATF_TEST_CASE_BODY(bad_values)
{
    using namespace pvfs::proto;
    for (const char *name : {"", ".", "..", "a/b", "/"}) {
        require_request_error(samples::request(LookupRequest{.parent = 1, .name = name}),
                              DecodeError::bad_value, std::string("name '") + name + "'");
    }
    require_request_error(
        samples::request(MkdirRequest{.parent = 1, .name = std::string("a\0b", 3), .mode = 0}),
        DecodeError::bad_value, "name with NUL");
    require_response_error(
        samples::response(ReaddirResponse{.entries = {DirEntry{.name = "..", .handle = 1}}}),
        DecodeError::bad_value, "dirent '..'");
    require_request_error(samples::request(SymlinkRequest{.parent = 1, .name = "s", .target = ""}),
                          DecodeError::bad_value, "empty symlink target");
    require_request_error(samples::request(XattrGetRequest{.handle = 1, .name = ""}),
                          DecodeError::bad_value, "empty xattr name");
    require_request_error(samples::request(MkdirRequest{.parent = 1, .name = "d", .mode = 010000}),
                          DecodeError::bad_value, "mode 010000");
    // by_open is the only bit above the fields (an older server refuses it
    // here, never applies it unchecked).
    require_request_error(
        samples::request(SetattrRequest{.handle = 1, .mask = proto::setattr_by_open << 1U}),
        DecodeError::bad_value, "setattr mask");
    require_request_error(
        samples::request(SetattrRequest{.handle = 1, .atime = {0, 1'000'000'000}}),
        DecodeError::bad_value, "nsec 1e9");
    require_request_error(samples::request(MknodRequest{
                              .parent = 1, .name = "m", .type = pvfs::ObjectType::directory}),
                          DecodeError::bad_value, "mknod directory");
    require_request_error(
        samples::request(RenameRequest{
            .old_parent = 1, .old_name = "a", .new_parent = 1, .new_name = "b", .flags = 4}),
        DecodeError::bad_value, "rename flags 4");
    require_request_error(
        samples::request(XattrSetRequest{.handle = 1, .name = "user.a", .flags = 4}),
        DecodeError::bad_value, "xattr flags 4");
    require_request_error(samples::request(AccessRequest{.handle = 1, .mask = 8}),
                          DecodeError::bad_value, "access mask 8");
    require_request_error(samples::request(WriteRequest{.handle = 1,
                                                        .regions = {{0, 3}},
                                                        .inline_data = samples::pattern(3, 1),
                                                        .rdma = samples::pattern(24, 2)}),
                          DecodeError::bad_value, "write with inline data and RDMA");
    require_request_error(
        samples::request(ReadRequest{.handle = 1,
                                     .regions = {{0, 3}},
                                     .rdma = samples::pattern(max_rdma_descriptor + 1, 3)}),
        DecodeError::too_long, "RDMA descriptor of 32 KiB + 1");

    // The remote-directory bodies check their fields too.
    pvfs::Attr not_dir = samples::dir_attr();
    not_dir.type = pvfs::ObjectType::regular;
    require_request_error(samples::request(MkdirObjectRequest{.parent = not_dir, .mode = 0755}),
                          DecodeError::bad_value, "mkdir_object parent a file");
    require_request_error(
        samples::request(MkdirObjectRequest{.parent = samples::dir_attr(), .mode = 010000}),
        DecodeError::bad_value, "mkdir_object mode 010000");
    pvfs::Attr bad_time = samples::dir_attr();
    bad_time.mtime.nsec = 1'000'000'000;
    require_request_error(samples::request(MkdirObjectRequest{.parent = bad_time, .mode = 0755}),
                          DecodeError::bad_value, "mkdir_object parent nsec 1e9");
    for (const char *name : {"", "..", "a/b"}) {
        require_request_error(
            samples::request(LinkDirRequest{.parent = 1, .name = name, .handle = 2}),
            DecodeError::bad_value, std::string("link_dir name '") + name + "'");
        require_request_error(
            samples::request(UnlinkDirRequest{.parent = 1, .name = name, .handle = 2}),
            DecodeError::bad_value, std::string("unlink_dir name '") + name + "'");
    }
    require_request_error(
        samples::request(LinkDirRequest{.parent = 1, .name = std::string(pvfs::max_name + 1, 'n')}),
        DecodeError::too_long, "link_dir name 256");
    auto retire = encoded(samples::request(RetireDirRequest{.handle = 5, .retire = true}));
    retire.at(retire.size() - proto::mac_size - 1) = std::byte{2};
    resign(retire);
    require_error(decode_request(retire), DecodeError::bad_value, "retire_dir bool 2");

    // Object type 0 and 8, bool 2: patched into valid messages.
    auto m = encoded(samples::response(GetattrResponse{.attr = samples::attr(1)}));
    for (const unsigned type : {0U, 8U, 255U}) {
        auto t = m;
        t.at(response_body_at + 8) = static_cast<std::byte>(type);
        resign(t);
        require_error(decode_response(t), DecodeError::bad_value,
                      "object type " + std::to_string(type));
    }
    auto c = encoded(samples::response(CreateResponse{.attr = samples::attr(1), .created = true}));
    c.at(c.size() - proto::mac_size - 1) = std::byte{2};
    resign(c);
    require_error(decode_response(c), DecodeError::bad_value, "bool 2");

    // Responses: a negative status, an error with a body.
    auto neg = encoded(samples::response(FsyncResponse{}));
    put_u32(neg, response_status_at, 0xFFFFFFFEU);
    resign(neg);
    require_error(decode_response(neg), DecodeError::bad_value, "status -2");
    auto with_body = encoded(samples::response(ReadResponse{.bytes = 1, .object_size = 2}));
    put_u32(with_body, response_status_at, EIO);
    resign(with_body);
    require_error(decode_response(with_body), DecodeError::bad_value, "error with a body");
}

ATF_TEST_CASE_WITHOUT_HEAD(trailing_bytes);
ATF_TEST_CASE_BODY(trailing_bytes)
{
    for (const auto &original : all_sample_messages()) {
        auto m = original;
        m.push_back(std::byte{0});
        const bool is_request = original.at(3) == std::byte{0x51};
        const auto r = is_request ? decode_request(m) : decode_response(m);
        require_error(r, DecodeError::trailing_bytes, "a byte after the MAC");
    }
    // A byte inside the body that no field claims, with a valid MAC.
    auto m = encoded(samples::request(proto::GetattrRequest{.handle = 1}));
    m.insert(m.end() - proto::mac_size, std::byte{0});
    put_u32(m, sample_body_length_at, 9);
    resign(m);
    const auto r = decode_request(m);
    require_error(r, DecodeError::trailing_bytes, "a byte after the body");
    ATF_REQUIRE_EQ(std::string(r.what), "bytes after the body");
    auto resp = encoded(samples::response(proto::RmdirResponse{}));
    resp.insert(resp.end() - proto::mac_size, std::byte{1});
    put_u32(resp, response_body_length_at, 1);
    resign(resp);
    require_error(decode_response(resp), DecodeError::trailing_bytes, "a byte in an empty body");
}

// However a message is damaged, it is never accepted.
ATF_TEST_CASE_WITHOUT_HEAD(every_flipped_byte_rejected);
ATF_TEST_CASE_BODY(every_flipped_byte_rejected)
{
    std::size_t checked = 0;
    for (const auto &original : all_sample_messages()) {
        const bool is_request = original.at(3) == std::byte{0x51};
        // Bounded to keep the test quick: every byte of the envelope, the
        // MAC, and the first 512 body bytes.
        for (std::size_t i = 0; i < original.size(); ++i) {
            if (i > 1024 && i < original.size() - proto::mac_size) {
                continue;
            }
            for (const std::byte flip : {std::byte{0x01}, std::byte{0x80}}) {
                auto m = original;
                m.at(i) ^= flip;
                const auto r = is_request ? decode_request(m) : decode_response(m);
                if (!(!r)) {
                    std::ostringstream why;
                    why << "byte " << i << " flipped was accepted";
                    ATF_FAIL(why.str());
                }
                ++checked;
            }
        }
    }
    ATF_REQUIRE(checked > 10000);
    // Where nothing but the MAC can tell, it is the MAC that says so.
    auto m = encoded(samples::request(proto::GetattrRequest{.handle = 1}));
    m.at(sample_body_at) ^= std::byte{1};
    require_error(decode_request(m), DecodeError::bad_mac, "body byte flipped");
    m = encoded(samples::request(proto::GetattrRequest{.handle = 1}));
    m.back() ^= std::byte{1};
    require_error(decode_request(m), DecodeError::bad_mac, "MAC byte flipped");
}

ATF_TEST_CASE_WITHOUT_HEAD(wrong_key);
ATF_TEST_CASE_BODY(wrong_key)
{
    const auto other = samples::other_key();
    for (const auto &m : all_sample_messages()) {
        proto::Request req;
        proto::Response resp;
        const bool is_request = m.at(3) == std::byte{0x51};
        const auto r = is_request ? proto::decode(m, other, req) : proto::decode(m, other, resp);
        require_error(r, DecodeError::bad_mac, "another key");
    }
}

// The encoder reuses the caller's buffer: capacity is kept, contents are
// replaced, not appended.
ATF_TEST_CASE_WITHOUT_HEAD(encode_reuses_buffer);
ATF_TEST_CASE_BODY(encode_reuses_buffer)
{
    const auto key = samples::test_key();
    std::vector<std::byte> out;
    const auto big = samples::request(samples::request_bodies().at(8));
    const std::size_t big_size = proto::encode(big, key, out);
    const auto *data = out.data();
    const auto small = samples::request(proto::StatfsRequest{});
    const std::size_t small_size = proto::encode(small, key, out);
    ATF_REQUIRE(small_size < big_size);
    ATF_REQUIRE_EQ(out.size(), small_size);
    ATF_REQUIRE(out.data() == data);
    proto::Request back;
    ATF_REQUIRE(proto::decode(out, key, back));
    ATF_REQUIRE(back == small);
}

// ---- key files -------------------------------------------------------------

ATF_TEST_CASE_WITHOUT_HEAD(key_file_from_generator);
ATF_TEST_CASE_BODY(key_file_from_generator)
{
    const std::string path = temp_dir() + "/cluster.key";
    ATF_REQUIRE(pvfs::config::generate_key_file(path).ok());
    std::string error;
    const auto key = proto::Key::load(path, error);
    if (!(key)) {
        std::ostringstream why;
        why << error;
        ATF_FAIL(why.str());
    }
    // The same file gives the same key: messages signed with one verify
    // with the other; a different key file does not.
    const auto again = proto::Key::load(path, error);
    ATF_REQUIRE(again);
    const auto m = encoded(samples::request(proto::StatfsRequest{}), *key);
    proto::Request out;
    ATF_REQUIRE(proto::decode(m, *again, out));
    const std::string path2 = temp_dir() + "/other.key";
    ATF_REQUIRE(pvfs::config::generate_key_file(path2).ok());
    const auto other = proto::Key::load(path2, error);
    ATF_REQUIRE(other);
    ATF_REQUIRE(proto::decode(m, *other, out).error == DecodeError::bad_mac);
}

ATF_TEST_CASE_WITHOUT_HEAD(key_file_formats);
ATF_TEST_CASE_BODY(key_file_formats)
{
    const std::string hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    std::array<std::byte, proto::key_size> raw{};
    for (std::size_t i = 0; i < raw.size(); ++i) {
        raw.at(i) = static_cast<std::byte>(i);
    }
    const auto expected = proto::Key::from_bytes(raw);
    const auto m = encoded(samples::request(proto::StatfsRequest{}), expected);
    const std::string dir = temp_dir();
    for (const std::string &text : {hex + "\n", hex,
                                    std::string("000102030405060708090A0B0C0D0E0F"
                                                "101112131415161718191A1B1C1D1E1F")}) {
        const std::string path = dir + "/good.key";
        write_file(path, text);
        std::string error;
        const auto key = proto::Key::load(path, error);
        if (!(key)) {
            std::ostringstream why;
            why << error;
            ATF_FAIL(why.str());
        }
        proto::Request out;
        ATF_REQUIRE(proto::decode(m, *key, out));
    }
    const auto from_hex = proto::Key::from_hex(hex);
    ATF_REQUIRE(from_hex);
    proto::Request out;
    ATF_REQUIRE(proto::decode(m, *from_hex, out));

    const std::vector<std::string> bad = {
        "",        hex.substr(0, 63),   hex.substr(0, 63) + "\n", hex + "0", hex + "\n\n",
        hex + " ", " " + hex.substr(1), hex.substr(0, 62) + "g0", hex + hex};
    for (const auto &text : bad) {
        const std::string path = dir + "/bad.key";
        write_file(path, text);
        std::string error;
        if (!(!proto::Key::load(path, error))) {
            std::ostringstream why;
            why << "accepted '" << text << "'";
            ATF_FAIL(why.str());
        }
        if (!(error.find(path) == 0)) {
            std::ostringstream why;
            why << error;
            ATF_FAIL(why.str());
        }
    }
    ATF_REQUIRE(!proto::Key::from_hex(hex.substr(0, 62)));
    ATF_REQUIRE(!proto::Key::from_hex(hex.substr(0, 63) + "x"));

    std::string error;
    ATF_REQUIRE(!proto::Key::load(dir + "/missing.key", error));
    if (!(error.find(dir + "/missing.key") == 0)) {
        std::ostringstream why;
        why << error;
        ATF_FAIL(why.str());
    }
    if (!(error.find("No such file") != std::string::npos)) {
        std::ostringstream why;
        why << error;
        ATF_FAIL(why.str());
    }
    ATF_REQUIRE(::mkfifo((dir + "/fifo.key").c_str(), 0600) == 0);
    ATF_REQUIRE(!proto::Key::load(dir + "/fifo.key", error));
    ATF_REQUIRE(error.find("not a regular file") != std::string::npos);
    ATF_REQUIRE(!proto::Key::load(dir, error));
    if (!(error.find("not a regular file") != std::string::npos)) {
        std::ostringstream why;
        why << error;
        ATF_FAIL(why.str());
    }
}

ATF_TEST_CASE_WITHOUT_HEAD(key_file_permissions);
ATF_TEST_CASE_BODY(key_file_permissions)
{
    const std::string dir = temp_dir();
    const std::string path = dir + "/perm.key";
    ATF_REQUIRE(pvfs::config::generate_key_file(path, true).ok());
    std::string error;
    ATF_REQUIRE(proto::Key::load(path, error));

    // Any group or other bit is refused, with the mode and the fix named.
    for (const mode_t mode : {0640, 0604, 0644, 0620, 0602, 0601, 0610, 0700}) {
        ATF_REQUIRE(::chmod(path.c_str(), mode) == 0);
        if ((mode & 077) == 0) {
            if (!proto::Key::load(path, error)) {
                ATF_FAIL(error);
            }
            continue;
        }
        const std::string octal =
            std::to_string(mode / 64) + std::to_string((mode / 8) % 8) + std::to_string(mode % 8);
        require_refused(path, {"key file " + path, "is mode 0" + octal,
                               "readable by its owner only", "(chmod 600 " + path + ")"});
    }
    ATF_REQUIRE(::chmod(path.c_str(), 0600) == 0);
    ATF_REQUIRE(proto::Key::load(path, error));
    ATF_REQUIRE(::chmod(path.c_str(), 0400) == 0);
    ATF_REQUIRE(proto::Key::load(path, error));
    ATF_REQUIRE(::chmod(path.c_str(), 0600) == 0);

    // A symlink to a good key file is refused as a symlink; a directory
    // symlink earlier in the path is not the last component, so it is fine.
    const std::string link = dir + "/link.key";
    std::filesystem::remove(link);
    ATF_REQUIRE(::symlink(path.c_str(), link.c_str()) == 0);
    require_refused(link, {"key file " + link, "symbolic link"});
    const std::string dir_link = dir + "/dirlink";
    std::filesystem::remove(dir_link);
    ATF_REQUIRE(::symlink(dir.c_str(), dir_link.c_str()) == 0);
    if (!proto::Key::load(dir_link + "/perm.key", error)) {
        ATF_FAIL(error);
    }

    // Owned by someone else: only root can make such a file here.
    if (::geteuid() != 0) {
        std::cout << "not root: the other-owner check is not exercised (run as root)\n";
        return;
    }
    ATF_REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
    require_refused(path, {"key file " + path, "owned by uid 65534", "must be owned by root",
                           "(chown 0 " + path + ")"});
    ATF_REQUIRE(::chown(path.c_str(), 0, 0) == 0);
    ATF_REQUIRE(proto::Key::load(path, error));
}

ATF_TEST_CASE_WITHOUT_HEAD(key_moves);
ATF_TEST_CASE_BODY(key_moves)
{
    auto a = samples::test_key();
    const auto m = encoded(samples::request(proto::StatfsRequest{}), a);
    const proto::Key b = std::move(a);
    proto::Request out;
    ATF_REQUIRE(proto::decode(m, b, out));
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, round_trip_requests);
    ATF_ADD_TEST_CASE(tcs, round_trip_write_described_for_rdma);
    ATF_ADD_TEST_CASE(tcs, round_trip_responses);
    ATF_ADD_TEST_CASE(tcs, error_responses);
    ATF_ADD_TEST_CASE(tcs, answers_binds_request);
    ATF_ADD_TEST_CASE(tcs, op_numbers_and_names);
    ATF_ADD_TEST_CASE(tcs, wire_bytes);
    ATF_ADD_TEST_CASE(tcs, wrong_magic);
    ATF_ADD_TEST_CASE(tcs, wrong_version);
    ATF_ADD_TEST_CASE(tcs, wrong_op);
    ATF_ADD_TEST_CASE(tcs, nonzero_flags);
    ATF_ADD_TEST_CASE(tcs, orphaned_field);
    ATF_ADD_TEST_CASE(tcs, create_open_field);
    ATF_ADD_TEST_CASE(tcs, chunk_macs_field);
    ATF_ADD_TEST_CASE(tcs, chunk_tags_inline);
    ATF_ADD_TEST_CASE(tcs, wants_capability_flag);
    ATF_ADD_TEST_CASE(tcs, capability_field);
    ATF_ADD_TEST_CASE(tcs, open_close_values);
    ATF_ADD_TEST_CASE(tcs, once_ids);
    ATF_ADD_TEST_CASE(tcs, destination);
    ATF_ADD_TEST_CASE(tcs, keyed);
    ATF_ADD_TEST_CASE(tcs, body_codec);
    ATF_ADD_TEST_CASE(tcs, truncated_at_every_byte);
    ATF_ADD_TEST_CASE(tcs, lengths_over_limits);
    ATF_ADD_TEST_CASE(tcs, counts_beyond_bytes_left);
    ATF_ADD_TEST_CASE(tcs, bad_values);
    ATF_ADD_TEST_CASE(tcs, trailing_bytes);
    ATF_ADD_TEST_CASE(tcs, every_flipped_byte_rejected);
    ATF_ADD_TEST_CASE(tcs, wrong_key);
    ATF_ADD_TEST_CASE(tcs, encode_reuses_buffer);
    ATF_ADD_TEST_CASE(tcs, key_file_from_generator);
    ATF_ADD_TEST_CASE(tcs, key_file_formats);
    ATF_ADD_TEST_CASE(tcs, key_file_permissions);
    ATF_ADD_TEST_CASE(tcs, key_moves);
    ATF_ADD_TEST_CASE(tcs, status_counters);
}
