// "Encoding into a reused buffer does not allocate", measured: this program
// replaces the global operator new and counts calls while every sample
// request and response is encoded into one warm buffer.
#include <atf-c++.hpp>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

#include "pvfs/proto.hpp"
#include "samples.hpp"

namespace {

// NOLINTBEGIN(cppcoreguidelines-avoid-non-const-global-variables): the counter
std::atomic<bool> counting{false};
std::atomic<std::size_t> allocations{0};
// NOLINTEND(cppcoreguidelines-avoid-non-const-global-variables)

} // namespace

// NOLINTBEGIN(cppcoreguidelines-no-malloc,cppcoreguidelines-owning-memory)
void *operator new(std::size_t size)
{
    if (counting.load(std::memory_order_relaxed))
        allocations.fetch_add(1, std::memory_order_relaxed);
    if (void *p = std::malloc(size == 0 ? 1 : size))
        return p;
    throw std::bad_alloc();
}
void operator delete(void *p) noexcept
{
    std::free(p);
}
void operator delete(void *p, std::size_t /*size*/) noexcept
{
    std::free(p);
}
// NOLINTEND(cppcoreguidelines-no-malloc,cppcoreguidelines-owning-memory)

namespace {

// Encodes everything once; returns how many allocations that took.
std::size_t encode_all(const std::vector<pvfs::proto::Request> &requests,
                       const std::vector<pvfs::proto::Response> &responses,
                       const pvfs::proto::Key &key, std::vector<std::byte> &buffer)
{
    allocations.store(0);
    counting.store(true);
    std::size_t total = 0;
    for (const auto &r : requests)
        total += pvfs::proto::encode(r, key, buffer);
    for (const auto &r : responses)
        total += pvfs::proto::encode(r, key, buffer);
    counting.store(false);
    ATF_REQUIRE(total > 0);
    return allocations.load();
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(encode_warm_buffer_no_allocation);
ATF_TEST_CASE_BODY(encode_warm_buffer_no_allocation)
{
    const auto key = samples::test_key();
    std::vector<pvfs::proto::Request> requests;
    std::vector<pvfs::proto::Response> responses;
    std::uint64_t n = 0;
    for (auto &b : samples::request_bodies())
        requests.push_back(samples::request(b, ++n));
    for (auto &b : samples::response_bodies())
        responses.push_back(samples::response(b, ++n));

    std::vector<std::byte> buffer;
    // The counter works: a cold buffer has to grow.
    ATF_REQUIRE(encode_all(requests, responses, key, buffer) > 0);
    // Warm: the same messages again, and again, without one allocation.
    ATF_REQUIRE_EQ(encode_all(requests, responses, key, buffer), std::size_t{0});
    ATF_REQUIRE_EQ(encode_all(requests, responses, key, buffer), std::size_t{0});
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, encode_warm_buffer_no_allocation);
}
