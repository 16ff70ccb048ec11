// Tests of the programs' argument parser and JSON printer (include/pvfs/cli.hpp):
// the exit statuses the tools promise and JSON that parsers read back.
#include <atf-c++.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "pvfs/cli.hpp"

namespace cli = pvfs::cli;

namespace {

std::optional<int> parse(cli::Parser &p, std::vector<const char *> args)
{
    args.insert(args.begin(), "prog");
    return p.parse(static_cast<int>(args.size()), args.data());
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(parser_values);
ATF_TEST_CASE_BODY(parser_values)
{
    cli::Parser p("test");
    bool flag = false;
    std::string name = "default";
    unsigned count = 1;
    std::vector<std::string> rest;
    std::optional<unsigned> maybe;
    p.flag("-f,--flag", flag, "a flag");
    p.option("-n,--name", name, "a name");
    p.option("--count", count, "a count").range(1, 10);
    p.option("--maybe", maybe, "optional");
    p.option("rest", rest, "the rest");
    ATF_REQUIRE(!parse(p, {"--flag", "--count", "7", "a", "b"}).has_value());
    ATF_REQUIRE(flag);
    ATF_REQUIRE_EQ(name, "default");
    ATF_REQUIRE_EQ(count, 7U);
    ATF_REQUIRE(!maybe.has_value());
    ATF_REQUIRE_EQ(rest.size(), 2U);
    ATF_REQUIRE_EQ(rest.at(1), "b");
}

// Every usage error is status 2 (CLI11's own are 100 and up); --help is 0.
ATF_TEST_CASE_WITHOUT_HEAD(parser_statuses);
ATF_TEST_CASE_BODY(parser_statuses)
{
    const auto run = [](std::vector<const char *> args) {
        cli::Parser p("test");
        unsigned count = 1;
        std::string need;
        std::string a;
        std::string b;
        p.option("--count", count, "a count").range(1, 10);
        p.option("--need", need, "required").required();
        const cli::Option oa = p.option("--a", a, "a");
        p.option("--b", b, "b").excludes(oa);
        return parse(p, std::move(args)).value_or(-1); // -1: parsed
    };
    ATF_REQUIRE_EQ(run({"--need", "x"}), -1);
    ATF_REQUIRE_EQ(run({"--help"}), 0);
    ATF_REQUIRE_EQ(run({}), cli::exit_usage);
    ATF_REQUIRE_EQ(run({"--need", "x", "--count", "11"}), cli::exit_usage);
    ATF_REQUIRE_EQ(run({"--need", "x", "--count", "-1"}), cli::exit_usage);
    ATF_REQUIRE_EQ(run({"--need", "x", "--bogus"}), cli::exit_usage);
    ATF_REQUIRE_EQ(run({"--need", "x", "--a", "1", "--b", "2"}), cli::exit_usage);
}

ATF_TEST_CASE_WITHOUT_HEAD(json_values);
ATF_TEST_CASE_BODY(json_values)
{
    cli::Json list = cli::Json::array();
    list.push(std::numeric_limits<std::uint64_t>::max());
    list.push(std::int64_t{-5});
    list.push(1.5);
    list.push(true);
    list.push(nullptr);
    list.push("quote \" and \n");
    cli::Json o = cli::Json::object({{"z", 1}, {"a", list}});
    o.set("m", cli::Json::object({{"k", std::string("v")}}));
    o.set("z", 2U);
    ATF_REQUIRE_EQ(list.size(), 6U);
    ATF_REQUIRE_EQ(o.size(), 3U);
    ATF_REQUIRE_EQ(o.dump(-1), "{\"a\":[18446744073709551615,-5,1.5,true,null,\"quote \\\" and "
                               "\\n\"],\"m\":{\"k\":\"v\"},\"z\":2}");
    const cli::Json copy = o;
    o.set("z", 3);
    ATF_REQUIRE(copy.dump(-1).find("\"z\":2") != std::string::npos);
    ATF_REQUIRE_EQ(cli::Json().dump(), "null");
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, parser_values);
    ATF_ADD_TEST_CASE(tcs, parser_statuses);
    ATF_ADD_TEST_CASE(tcs, json_values);
}
