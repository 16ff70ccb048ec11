// libFuzzer target: arbitrary bytes as a cluster config.
//
// parse() must never crash, hang or leak, whatever the bytes; when it
// accepts them, the canonical text must parse back to an equal cluster
// (and print the same again).  The same bytes also go through the address
// and fs-URL parsers, whose canonical forms must be fixed points.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "pvfs/config.hpp"

namespace config = pvfs::config;

namespace {

void check(bool ok)
{
    if (!ok) {
        std::abort();
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    const std::string_view text(reinterpret_cast<const char *>(data), size);

    const config::Result r = config::parse(text, "fuzz.toml", "/fuzz/base");
    check(r.ok() || !r.error.empty());
    if (r.ok()) {
        const std::string canonical = config::to_toml(r.cluster);
        const config::Result back = config::parse(canonical, "canonical", "");
        check(back.ok());
        check(back.cluster == r.cluster);
        check(config::to_toml(back.cluster) == canonical);
        check(config::hash(back.cluster) == config::hash(r.cluster));
    }

    const config::Address a = config::parse_address(text);
    if (a.ok()) {
        const config::Address again = config::parse_address(a.url);
        check(again.ok() && again.url == a.url && again.port == a.port);
    }
    const config::FsUrl u = config::parse_fs_url(text);
    if (u.ok()) {
        const config::FsUrl again = config::parse_fs_url(u.address + "/" + u.fs_name);
        check(again.ok() && again.address == u.address && again.fs_name == u.fs_name);
    }
    return 0;
}
