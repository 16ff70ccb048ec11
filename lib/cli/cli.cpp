// cli: the one translation unit that compiles CLI11 and nlohmann/json for
// the command-line programs (include/pvfs/cli.hpp says why).
#include "pvfs/cli.hpp"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace pvfs::cli {

// ---- Option -----------------------------------------------------------------

Option &Option::required()
{
    option_->required();
    return *this;
}

Option &Option::type_name(std::string_view name)
{
    option_->type_name(std::string(name));
    return *this;
}

Option &Option::show_default()
{
    option_->capture_default_str();
    return *this;
}

Option &Option::range(long long min, long long max)
{
    option_->check(CLI::Range(min, max));
    return *this;
}

Option &Option::range_real(double min, double max)
{
    option_->check(CLI::Range(min, max));
    return *this;
}

Option &Option::positive()
{
    option_->check(CLI::PositiveNumber);
    return *this;
}

Option &Option::non_negative()
{
    option_->check(CLI::NonNegativeNumber);
    return *this;
}

Option &Option::one_of(std::initializer_list<std::string_view> values)
{
    std::vector<std::string> members;
    members.reserve(values.size());
    for (const std::string_view v : values)
        members.emplace_back(v);
    option_->check(CLI::IsMember(std::move(members)));
    return *this;
}

Option &Option::delimiter(char separator)
{
    option_->delimiter(separator);
    return *this;
}

Option &Option::excludes(const Option &other)
{
    option_->excludes(other.option_);
    return *this;
}

Option &Option::needs(const Option &other)
{
    option_->needs(other.option_);
    return *this;
}

// ---- Parser -----------------------------------------------------------------

Parser::Parser(std::string_view description, std::string_view name)
    : app_(std::make_unique<CLI::App>(std::string(description), std::string(name)))
{
}

Parser::~Parser() = default;
Parser::Parser(Parser &&other) noexcept = default;
Parser &Parser::operator=(Parser &&other) noexcept = default;

Option Parser::flag(std::string_view names, bool &value, std::string_view help)
{
    return Option(app_->add_flag(std::string(names), value, std::string(help)));
}

namespace {

template <typename T>
CLI::Option *add(CLI::App &app, std::string_view names, T &value, std::string_view help)
{
    return app.add_option(std::string(names), value, std::string(help));
}

} // namespace

Option Parser::option(std::string_view names, std::string &value, std::string_view help)
{
    return Option(add(*app_, names, value, help));
}

Option Parser::option(std::string_view names, std::vector<std::string> &values,
                      std::string_view help)
{
    return Option(add(*app_, names, values, help));
}

Option Parser::option(std::string_view names, int &value, std::string_view help)
{
    return Option(add(*app_, names, value, help));
}

Option Parser::option(std::string_view names, long &value, std::string_view help)
{
    return Option(add(*app_, names, value, help));
}

Option Parser::option(std::string_view names, long long &value, std::string_view help)
{
    return Option(add(*app_, names, value, help));
}

Option Parser::option(std::string_view names, unsigned short &value, std::string_view help)
{
    return Option(add(*app_, names, value, help));
}

Option Parser::option(std::string_view names, unsigned &value, std::string_view help)
{
    return Option(add(*app_, names, value, help));
}

Option Parser::option(std::string_view names, unsigned long &value, std::string_view help)
{
    return Option(add(*app_, names, value, help));
}

Option Parser::option(std::string_view names, unsigned long long &value, std::string_view help)
{
    return Option(add(*app_, names, value, help));
}

Option Parser::option(std::string_view names, double &value, std::string_view help)
{
    return Option(add(*app_, names, value, help));
}

Option Parser::option(std::string_view names, std::optional<unsigned> &value, std::string_view help)
{
    return Option(add(*app_, names, value, help));
}

std::optional<int> Parser::parse(int argc, const char *const *argv)
{
    try {
        app_->parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        // CLI11's own statuses (105, 106, 109...) say nothing to a script;
        // the tools promise 2 for every usage error.
        return app_->exit(e) == 0 ? 0 : exit_usage;
    }
    return std::nullopt;
}

// ---- Json -------------------------------------------------------------------

// nlohmann::json's destructor flattens nested values into a vector, which
// may allocate: running out of memory there ends the program, as it would
// anywhere else in a tool.
struct Json::Value { // NOLINT(bugprone-exception-escape)
    nlohmann::json j;
};

Json::Json() : value_(std::make_unique<Value>()) {}
Json::Json(std::nullptr_t) : Json() {}
Json::Json(bool value) : value_(std::make_unique<Value>(Value{value})) {}
Json::Json(double value) : value_(std::make_unique<Value>(Value{value})) {}
Json::Json(std::string_view value) : value_(std::make_unique<Value>(Value{value})) {}
Json::Json(const char *value) : Json(std::string_view(value)) {}
Json::Json(const std::string &value) : Json(std::string_view(value)) {}
Json::~Json() = default;
Json::Json(const Json &other) : value_(std::make_unique<Value>(*other.value_)) {}

Json &Json::operator=(const Json &other)
{
    if (this != &other)
        value_ = std::make_unique<Value>(*other.value_);
    return *this;
}

Json::Json(Json &&other) noexcept = default;
Json &Json::operator=(Json &&other) noexcept = default;

Json Json::from_signed(std::int64_t value)
{
    Json j;
    j.value_->j = value;
    return j;
}

Json Json::from_unsigned(std::uint64_t value)
{
    Json j;
    j.value_->j = value;
    return j;
}

Json Json::object(std::initializer_list<Member> members)
{
    Json o;
    o.value_->j = nlohmann::json::object();
    for (const Member &m : members)
        o.set(m.first, m.second);
    return o;
}

Json Json::array()
{
    Json a;
    a.value_->j = nlohmann::json::array();
    return a;
}

Json &Json::set(std::string_view key, Json value)
{
    value_->j[std::string(key)] = std::move(value.value_->j);
    return *this;
}

Json &Json::push(Json value)
{
    value_->j.push_back(std::move(value.value_->j));
    return *this;
}

std::size_t Json::size() const noexcept
{
    return value_->j.size();
}

std::string Json::dump(int indent) const
{
    return value_->j.dump(indent);
}

} // namespace pvfs::cli
