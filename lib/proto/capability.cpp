// Capabilities (docs/protocol.md "Capabilities"): the metadata server's
// signature over rights to one file's data objects, checked by the data
// servers.  The key is derived from the cluster key, which only servers
// hold once client_keys is set; the tag is keyed BLAKE2b-128 over a label
// and every field in a fixed layout (no length-ambiguity: all fields have
// fixed sizes).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include <sodium.h>

#include "pvfs/proto.hpp"

namespace pvfs::proto {

namespace {

constexpr std::array<char, 21> key_label{'p', 'v', 'f', 's', '-', 'c', 'a', 'p', 'a', 'b', 'i',
                                         'l', 'i', 't', 'y', '-', 'k', 'e', 'y', '-', '1'};
constexpr std::array<char, 10> tag_label{'p', 'v', 'f', 's', '-', 'c', 'a', 'p', '-', '1'};

template <typename T> void put(unsigned char *&at, T value) noexcept
{
    for (std::size_t i = 0; i < sizeof(T); ++i)
        *at++ = static_cast<unsigned char>(static_cast<std::uint64_t>(value) >> (8 * i));
}

CapabilityTag tag_of(const CapabilityKey &key, const Capability &c) noexcept
{
    // label | handle | rights | fs_id | keyed | key_id | expires_ns
    std::array<unsigned char, tag_label.size() + 8 + 4 + 4 + 1 + 4 + 8> message{};
    unsigned char *at = message.data();
    for (const char ch : tag_label)
        *at++ = static_cast<unsigned char>(ch);
    put(at, c.handle);
    put(at, c.rights);
    put(at, c.fs_id);
    put(at, static_cast<std::uint8_t>(c.keyed ? 1 : 0));
    put(at, c.key_id);
    put(at, c.expires_ns);
    CapabilityTag tag{};
    crypto_generichash(reinterpret_cast<unsigned char *>(tag.data()), tag.size(), message.data(),
                       message.size(), reinterpret_cast<const unsigned char *>(key.data()),
                       key.size());
    return tag;
}

} // namespace

CapabilityKey capability_key(const Key &cluster_key) noexcept
{
    CapabilityKey out{};
    const std::array<std::span<const std::byte>, 1> parts{std::as_bytes(std::span(key_label))};
    cluster_key.keyed_hash(parts, out);
    return out;
}

void sign_capability(const CapabilityKey &key, Capability &cap) noexcept
{
    cap.tag = tag_of(key, cap);
}

bool capability_signed(const CapabilityKey &key, const Capability &cap) noexcept
{
    const CapabilityTag want = tag_of(key, cap);
    return sodium_memcmp(want.data(), cap.tag.data(), want.size()) == 0;
}

} // namespace pvfs::proto
