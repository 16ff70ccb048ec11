// The client library's caches (client.hpp: "Attributes and names are
// cached for a short time"): Options::attr_timeout bounds both the
// attribute cache (getattr, and the size in it) and the name cache
// (lookup).  Two clients on one real cluster: B changes things behind A's
// back; A may see the old value until its timeout passes and must see the
// new one after it; with attr_timeout 0 A sees every change at once.
// Options::layout_timeout keeps layouts for I/O apart from attributes.
#include <atf-c++.hpp>

#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "pvfs/client.hpp"

namespace {

using namespace pvfs;
using namespace std::chrono_literals;
using pvfs::test::require;
using pvfs::test::require_rc;
using Clock = std::chrono::steady_clock;

// Long enough that the "still cached" checks run well inside it even in
// the sanitizer build.
constexpr std::chrono::milliseconds cache_timeout{4000};
constexpr std::chrono::milliseconds margin{700};

struct Cluster : test::Cluster {
    Cluster()
        : test::Cluster(test::servers(1, 2), "stripe_size = \"64KiB\"\nrequest_timeout = \"10s\"\n")
    {
    }

    [[nodiscard]] std::unique_ptr<client::Client>
    connect(std::chrono::milliseconds timeout,
            std::optional<std::chrono::milliseconds> layout_timeout = std::nullopt) const
    {
        client::Options o;
        o.attr_timeout = timeout;
        o.layout_timeout = layout_timeout.value_or(timeout);
        return test::Cluster::connect(o);
    }
};

// Fails when a "still cached" check would run after the entry may have
// expired (a slow machine), rather than passing or failing by luck.
void require_within(Clock::time_point cached_at, const std::string &what)
{
    require(Clock::now() - cached_at < cache_timeout - margin,
            what + ": the machine is too slow to check the cache inside its timeout");
}

Attr make_file(client::Client &c, const std::string &name, std::size_t size)
{
    Attr a;
    require_rc(c.create(root_handle, name, 0644, true, {}, a), 0, "create " + name);
    require_rc(c.write(a.handle, 0, test::pattern(size, 1)), static_cast<std::int64_t>(size),
               "write " + name);
    return a;
}

void chmod(client::Client &c, Handle h, std::uint32_t mode)
{
    client::SetAttr s;
    s.mask = client::set_mode;
    s.mode = mode;
    Attr out;
    require_rc(c.setattr(h, s, out), 0, "chmod");
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(attributes_expire);
ATF_TEST_CASE_BODY(attributes_expire)
{
    Cluster cl;
    auto a = cl.connect(cache_timeout);
    auto b = cl.connect(0ms);
    const Attr f = make_file(*b, "f", 1000);

    Attr seen;
    require_rc(a->getattr(f.handle, seen), 0, "A getattr");
    const auto cached_at = Clock::now();
    require(seen.mode == 0644 && seen.size == 1000, "A's first view");
    chmod(*b, f.handle, 0600);
    require_rc(b->write(f.handle, 1000, test::pattern(4000, 2)), 4000, "B grows f");
    Attr fresh;
    require_rc(b->getattr(f.handle, fresh), 0, "B getattr");
    require(fresh.mode == 0600 && fresh.size == 5000, "B's view after its changes");

    Attr cached;
    require_rc(a->getattr(f.handle, cached), 0, "A getattr (cached)");
    require_within(cached_at, "attributes");
    require(cached.mode == 0644 && cached.size == 1000,
            "A did not answer from its attribute cache: mode " + std::to_string(cached.mode) +
                " size " + std::to_string(cached.size));

    std::this_thread::sleep_for(cache_timeout + margin);
    Attr after;
    require_rc(a->getattr(f.handle, after), 0, "A getattr (expired)");
    require(after.mode == 0600 && after.size == 5000,
            "A still sees old attributes after the timeout: mode " + std::to_string(after.mode) +
                " size " + std::to_string(after.size));

    // A's own change is never hidden by its cache.
    chmod(*a, f.handle, 0640);
    require_rc(a->getattr(f.handle, after), 0, "A getattr after its chmod");
    require(after.mode == 0640, "A's own chmod is hidden by its cache");
    // forget_cache() drops the cache at once.
    chmod(*b, f.handle, 0444);
    a->forget_cache();
    require_rc(a->getattr(f.handle, after), 0, "A getattr after forget_cache");
    require(after.mode == 0444, "forget_cache kept a stale attribute");
}

ATF_TEST_CASE_WITHOUT_HEAD(names_expire);
ATF_TEST_CASE_BODY(names_expire)
{
    Cluster cl;
    auto a = cl.connect(cache_timeout);
    auto b = cl.connect(0ms);
    const Attr moved = make_file(*b, "moved", 10);
    const Attr gone = make_file(*b, "gone", 10);
    const Attr old = make_file(*b, "again", 10);

    Attr seen;
    require_rc(a->lookup(root_handle, "moved", seen), 0, "A lookup moved");
    require_rc(a->lookup(root_handle, "gone", seen), 0, "A lookup gone");
    require_rc(a->lookup(root_handle, "again", seen), 0, "A lookup again");
    const auto cached_at = Clock::now();
    require(seen.handle == old.handle, "A's handle of again");

    require_rc(b->rename(root_handle, "moved", root_handle, "moved2"), 0, "B rename");
    require_rc(b->unlink(root_handle, "gone"), 0, "B unlink gone");
    require_rc(b->unlink(root_handle, "again"), 0, "B unlink again");
    const Attr recreated = make_file(*b, "again", 20);
    require(recreated.handle != old.handle, "the new file got the old handle");

    // Inside the timeout the old names may still resolve, to the old handles.
    Attr cached_moved;
    Attr cached_gone;
    Attr cached_again;
    const int moved_rc = a->lookup(root_handle, "moved", cached_moved);
    const int gone_rc = a->lookup(root_handle, "gone", cached_gone);
    const int again_rc = a->lookup(root_handle, "again", cached_again);
    require_within(cached_at, "names");
    require_rc(moved_rc, 0, "A lookup moved (cached)");
    require(cached_moved.handle == moved.handle, "A's cached name moved");
    require_rc(gone_rc, 0, "A lookup gone (cached)");
    require(cached_gone.handle == gone.handle, "A's cached name gone");
    require_rc(again_rc, 0, "A lookup again (cached)");
    require(cached_again.handle == old.handle && cached_again.size == 10, "A's cached name again");

    std::this_thread::sleep_for(cache_timeout + margin);
    Attr after;
    require_rc(a->lookup(root_handle, "moved", after), -ENOENT, "A lookup moved (expired)");
    require_rc(a->lookup(root_handle, "moved2", after), 0, "A lookup moved2");
    require(after.handle == moved.handle, "moved2 is not the moved file");
    require_rc(a->lookup(root_handle, "gone", after), -ENOENT, "A lookup gone (expired)");
    require_rc(a->lookup(root_handle, "again", after), 0, "A lookup again (expired)");
    require(after.handle == recreated.handle && after.size == 20,
            "a removed-and-recreated name still gives the old handle after the timeout");
    // The removed file's handle itself is gone on the server.
    require_rc(a->getattr(gone.handle, after), -ENOENT, "A getattr of the removed handle");
}

ATF_TEST_CASE_WITHOUT_HEAD(zero_timeout_sees_everything_at_once);
ATF_TEST_CASE_BODY(zero_timeout_sees_everything_at_once)
{
    Cluster cl;
    auto a = cl.connect(0ms);
    auto b = cl.connect(0ms);
    const Attr f = make_file(*b, "f", 1000);
    const Attr old = make_file(*b, "again", 10);

    Attr seen;
    require_rc(a->getattr(f.handle, seen), 0, "A getattr");
    require_rc(a->lookup(root_handle, "f", seen), 0, "A lookup f");
    require_rc(a->lookup(root_handle, "again", seen), 0, "A lookup again");
    chmod(*b, f.handle, 0600);
    require_rc(a->getattr(f.handle, seen), 0, "A getattr after chmod");
    require(seen.mode == 0600, "A missed B's chmod with attr_timeout 0");
    require_rc(b->write(f.handle, 1000, test::pattern(3000, 2)), 3000, "B grows f");
    require_rc(a->getattr(f.handle, seen), 0, "A getattr after growth");
    require(seen.size == 4000,
            "A missed B's write with attr_timeout 0: size " + std::to_string(seen.size));
    require_rc(b->rename(root_handle, "f", root_handle, "f2"), 0, "B rename");
    require_rc(a->lookup(root_handle, "f", seen), -ENOENT, "A lookup of the renamed name");
    require_rc(b->unlink(root_handle, "again"), 0, "B unlink again");
    const Attr recreated = make_file(*b, "again", 20);
    require_rc(a->lookup(root_handle, "again", seen), 0, "A lookup again");
    require(seen.handle == recreated.handle && seen.handle != old.handle,
            "A got the old handle of a recreated name with attr_timeout 0");
}

// Options::layout_timeout: with attributes not cached at all (as pvfsd
// runs), A keeps a file's layout for its I/O; a getattr refreshes it, and
// with layout_timeout 0 nothing is kept.
ATF_TEST_CASE_WITHOUT_HEAD(layouts_kept_until_getattr);
ATF_TEST_CASE_BODY(layouts_kept_until_getattr)
{
    Cluster cl;
    auto a = cl.connect(0ms, cache_timeout);
    auto uncached = cl.connect(0ms, 0ms);
    auto b = cl.connect(0ms);
    Attr f;
    require_rc(b->create(root_handle, "f", 0644, true, Layout{64U << 10U, 2, 0}, f), 0, "create");
    Attr seen;
    require_rc(a->getattr(f.handle, seen), 0, "A getattr");
    require_rc(uncached->getattr(f.handle, seen), 0, "uncached getattr");
    const auto cached_at = Clock::now();
    // B re-stripes the empty file onto the other server alone and fills it.
    require_rc(b->layout_set(f.handle, Layout{64U << 10U, 1, 1}), 0, "B layout_set");
    const auto data = test::pattern(256U << 10U, 3);
    require_rc(b->write(f.handle, 0, data), static_cast<std::int64_t>(data.size()), "B write");

    const client::Region whole{0, data.size()};
    std::vector<std::byte> back(data.size());
    require_rc(uncached->read_list(f.handle, std::span(&whole, 1), back),
               static_cast<std::int64_t>(data.size()), "uncached read");
    require(back == data, "a client with layout_timeout 0 read with an old layout");
    // A still stripes by what it saw: half of every 128 KiB from the wrong
    // server (the window this option opens, as documented).
    require_rc(a->read_list(f.handle, std::span(&whole, 1), back),
               static_cast<std::int64_t>(data.size()), "A read (cached layout)");
    require_within(cached_at, "layouts");
    require(back != data, "A did not use its cached layout: the test cannot see a refresh");
    require_rc(a->getattr(f.handle, seen), 0, "A getattr again");
    require(seen.layout == (Layout{64U << 10U, 1, 1}), "A's getattr shows an old layout");
    require_rc(a->read_list(f.handle, std::span(&whole, 1), back),
               static_cast<std::int64_t>(data.size()), "A read after getattr");
    require(back == data, "A's getattr did not refresh the layout its reads use");
    // Writes go by the refreshed layout too; B reads them back.
    const auto more = test::pattern(64U << 10U, 4);
    require_rc(a->write(f.handle, data.size(), more), static_cast<std::int64_t>(more.size()),
               "A write");
    std::vector<std::byte> tail(more.size());
    require_rc(b->read(f.handle, data.size(), tail), static_cast<std::int64_t>(more.size()),
               "B read of A's write");
    require(tail == more, "A wrote with a stale layout");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, layouts_kept_until_getattr);
    ATF_ADD_TEST_CASE(tcs, attributes_expire);
    ATF_ADD_TEST_CASE(tcs, names_expire);
    ATF_ADD_TEST_CASE(tcs, zero_timeout_sees_everything_at_once);
}
