// libFuzzer target: arbitrary bytes through the pvfs message decoders.
//
// The input is decoded as a whole request and as a whole response under a
// fixed key.  Random bytes rarely carry a valid MAC, so the input is also
// taken as a body: byte 0 picks the op, byte 1 request or response (bit 0)
// and, for a request, an envelope with a capability (bit 1), the rest is
// the body, wrapped in an envelope with a correct MAC, so that the body
// parsers see arbitrary bytes.  Whatever decodes must re-encode to the
// very same bytes (the encoding is canonical) and decode to an equal value.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "pvfs/proto.hpp"

namespace proto = pvfs::proto;

namespace {

// Envelope sizes up to the body length field (a request without groups).
constexpr std::size_t request_header = 56;
constexpr std::size_t response_header = 36;

void check(bool ok)
{
    if (!ok) {
        std::abort();
    }
}

// Also the key of the seed corpus (tests/unit/proto/samples.hpp).
const proto::Key &fuzz_key()
{
    static const proto::Key key = [] {
        std::array<std::byte, proto::key_size> bytes{};
        for (std::size_t i = 0; i < bytes.size(); ++i) {
            bytes.at(i) = static_cast<std::byte>(0xA0 + i);
        }
        return proto::Key::from_bytes(bytes);
    }();
    return key;
}

template <class Message> void round_trip(std::span<const std::byte> bytes)
{
    Message first;
    const proto::DecodeResult r = proto::decode(bytes, fuzz_key(), first);
    check(r || (r.what != nullptr && !r.message().empty()));
    if (!r) {
        return;
    }
    std::vector<std::byte> again;
    check(proto::encode(first, fuzz_key(), again) == again.size());
    check(again.size() == bytes.size() && std::equal(again.begin(), again.end(), bytes.begin()));
    Message second;
    check(static_cast<bool>(proto::decode(again, fuzz_key(), second)));
    check(second == first);
}

void put_u32(std::vector<std::byte> &m, std::size_t at, std::uint32_t v)
{
    for (std::size_t i = 0; i < 4; ++i) {
        m.at(at + i) = static_cast<std::byte>((v >> (8 * i)) & 0xFFU);
    }
}

// A signed envelope around `body` for op `op`; `with_capability`: a
// request's envelope carries a capability (and a destination), so that
// the capability decoder sees every op, data op or not.
std::vector<std::byte> wrap(bool request, std::uint16_t op, std::span<const std::byte> body,
                            bool with_capability)
{
    std::vector<std::byte> m;
    std::size_t header = 0;
    if (request && with_capability) {
        proto::Request r{.request_id = 1,
                         .session = 2,
                         .seq = 3,
                         .time_ns = 4,
                         .cred = {},
                         .body = proto::StatfsRequest{}};
        r.to = proto::Destination{7, 1};
        proto::Capability cap;
        cap.handle = 0x1234;
        cap.rights = proto::cap_read | proto::cap_write;
        cap.fs_id = 7;
        cap.keyed = true;
        cap.key_id = 0x55;
        cap.expires_ns = 1'000'000'000;
        cap.tag.fill(std::byte{0x5c});
        r.cap = cap;
        (void)proto::encode(r, fuzz_key(), m);
        // An empty body: the envelope is all but its length and the MAC.
        header = m.size() - 4 - proto::mac_size;
    } else if (request) {
        const proto::Request r{.request_id = 1,
                               .session = 2,
                               .seq = 3,
                               .time_ns = 4,
                               .cred = {},
                               .body = proto::StatfsRequest{}};
        (void)proto::encode(r, fuzz_key(), m);
        header = request_header;
    } else {
        const proto::Response r{
            .status = 0, .request_id = 1, .session = 2, .seq = 3, .body = proto::StatfsResponse{}};
        (void)proto::encode(r, fuzz_key(), m);
        header = response_header;
    }
    m.resize(header + 4);
    m.at(6) = static_cast<std::byte>(op & 0xFFU);
    m.at(7) = static_cast<std::byte>(op >> 8U);
    put_u32(m, header, static_cast<std::uint32_t>(body.size()));
    m.insert(m.end(), body.begin(), body.end());
    const std::size_t signed_size = m.size();
    m.resize(signed_size + proto::mac_size);
    const std::span<std::byte> all(m);
    fuzz_key().sign(all.first(signed_size), all.last<proto::mac_size>());
    return m;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    const std::span<const std::byte> input(reinterpret_cast<const std::byte *>(data), size);
    round_trip<proto::Request>(input);
    round_trip<proto::Response>(input);
    if (size >= 2) {
        const auto op = static_cast<std::uint16_t>(data[0] % proto::op_count + 1);
        const bool request = (data[1] & 1U) == 0;
        const bool with_capability = (data[1] & 2U) != 0;
        const std::vector<std::byte> m = wrap(request, op, input.subspan(2), with_capability);
        if (request) {
            round_trip<proto::Request>(m);
        } else {
            round_trip<proto::Response>(m);
        }
    }
    return 0;
}
