// "Encoding into a reused buffer does not allocate", measured: this program
// counts calls of the global operator new (alloc_count.hpp) while every
// sample request and response is encoded into one warm buffer.
#include <atf-c++.hpp>

#include <cstddef>
#include <vector>

#include "alloc_count.hpp"
#include "pvfs/proto.hpp"
#include "samples.hpp"

namespace {

// Encodes everything once; returns how many allocations that took.
std::size_t encode_all(const std::vector<pvfs::proto::Request> &requests,
                       const std::vector<pvfs::proto::Response> &responses,
                       const pvfs::proto::Key &key, std::vector<std::byte> &buffer)
{
    pvfs::test::start_counting_allocations();
    std::size_t total = 0;
    for (const auto &r : requests)
        total += pvfs::proto::encode(r, key, buffer);
    for (const auto &r : responses)
        total += pvfs::proto::encode(r, key, buffer);
    const std::size_t n = pvfs::test::stop_counting_allocations();
    ATF_REQUIRE(total > 0);
    return n;
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
