// The server's check of a request's envelope key against what its
// connection proved (server/key_check.hpp): the proved key passes, another
// key does not, and a peer that proved nothing is refused rather than
// believed (it failed open before).
#include <atf-c++.hpp>

#include "../../server/key_check.hpp"

#include <optional>

ATF_TEST_CASE_WITHOUT_HEAD(proved_key_passes);
ATF_TEST_CASE_BODY(proved_key_passes)
{
    bmi::Identity id;
    id.name = "alpha";
    ATF_REQUIRE(pvfs::server::envelope_key_proved(id, "alpha"));
}

ATF_TEST_CASE_WITHOUT_HEAD(other_key_refused);
ATF_TEST_CASE_BODY(other_key_refused)
{
    bmi::Identity id;
    id.name = "alpha";
    ATF_REQUIRE(!pvfs::server::envelope_key_proved(id, "beta"));
    ATF_REQUIRE(!pvfs::server::envelope_key_proved(id, "cluster"));
}

ATF_TEST_CASE_WITHOUT_HEAD(no_identity_refused);
ATF_TEST_CASE_BODY(no_identity_refused)
{
    ATF_REQUIRE(!pvfs::server::envelope_key_proved(std::nullopt, "alpha"));
    ATF_REQUIRE(!pvfs::server::envelope_key_proved(std::nullopt, "cluster"));
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, proved_key_passes);
    ATF_ADD_TEST_CASE(tcs, other_key_refused);
    ATF_ADD_TEST_CASE(tcs, no_identity_refused);
}
