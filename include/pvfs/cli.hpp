// cli: what the command-line programs share — parsing their arguments
// (Parser, over CLI11) and printing JSON (Json, over nlohmann/json).
//
// Both libraries are header-only and large: a program that included them
// compiled for 35-45 s and took clang-tidy about 30 s more, for a few lines
// of use.  Behind this header they are compiled once, in lib/cli.
//
// Usage errors follow the tools' convention: parse() prints CLI11's message
// and "Run with --help for more information." to stderr and returns
// exit_usage (2); --help prints the help to stdout and returns 0.
#ifndef PVFS_CLI_HPP
#define PVFS_CLI_HPP

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace CLI {
class App;
class Option;
} // namespace CLI

namespace pvfs::cli {

inline constexpr int exit_usage = 2;

// One option or positional argument of a Parser; each setter returns *this so
// that they chain.  Valid as long as its Parser.
class Option {
public:
    Option &required();
    // "FILE", "N": how the help names the value.
    Option &type_name(std::string_view name);
    // The help shows the variable's value before parsing as the default.
    Option &show_default();
    // Inclusive bounds on a numeric value.
    Option &range(long long min, long long max);
    Option &range_real(double min, double max);
    Option &positive();
    Option &non_negative();
    Option &one_of(std::initializer_list<std::string_view> values);
    // A list option also splits each value at this character ("1,2,4").
    Option &delimiter(char separator);
    // Giving both is a usage error / this one requires the other.
    Option &excludes(const Option &other);
    Option &needs(const Option &other);

private:
    friend class Parser;
    explicit Option(CLI::Option *option) noexcept : option_(option) {}
    CLI::Option *option_; // owned by the Parser's CLI::App
};

class Parser {
public:
    // The description heads the help; the program's name is NAME, or when
    // empty argv[0]'s.
    explicit Parser(std::string_view description, std::string_view name = {});
    ~Parser();
    Parser(const Parser &) = delete;
    Parser &operator=(const Parser &) = delete;
    Parser(Parser &&other) noexcept;
    Parser &operator=(Parser &&other) noexcept;

    // NAMES as CLI11 takes them: "-c,--config", "--json", or "paths" for a
    // positional argument.  The variable receives the value when parsed and
    // keeps its initial value otherwise.
    Option flag(std::string_view names, bool &value, std::string_view help);
    Option option(std::string_view names, std::string &value, std::string_view help);
    Option option(std::string_view names, std::vector<std::string> &values, std::string_view help);
    Option option(std::string_view names, int &value, std::string_view help);
    Option option(std::string_view names, long &value, std::string_view help);
    Option option(std::string_view names, long long &value, std::string_view help);
    Option option(std::string_view names, unsigned short &value, std::string_view help);
    Option option(std::string_view names, unsigned &value, std::string_view help);
    Option option(std::string_view names, unsigned long &value, std::string_view help);
    Option option(std::string_view names, unsigned long long &value, std::string_view help);
    Option option(std::string_view names, double &value, std::string_view help);
    Option option(std::string_view names, std::optional<unsigned> &value, std::string_view help);

    // nullopt: parsed, go on.  Otherwise the status to exit with: 0 after
    // --help, exit_usage after a usage error (the message already printed).
    [[nodiscard]] std::optional<int> parse(int argc, const char *const *argv);

private:
    std::unique_ptr<CLI::App> app_;
};

// A JSON value to print: null, a boolean, a number, a string, an array or an
// object (printed with its members sorted by key).
class Json {
public:
    using Member = std::pair<std::string_view, Json>;

    Json();
    Json(std::nullptr_t);
    Json(bool value);
    Json(double value);
    Json(std::string_view value);
    Json(const char *value);
    Json(const std::string &value);
    template <std::integral T>
    requires(!std::same_as<T, bool>) Json(T value)
        : Json(std::signed_integral<T> ? from_signed(static_cast<std::int64_t>(value))
                                       : from_unsigned(static_cast<std::uint64_t>(value)))
    {
    }
    ~Json();
    Json(const Json &other);
    Json &operator=(const Json &other);
    Json(Json &&other) noexcept;
    Json &operator=(Json &&other) noexcept;

    [[nodiscard]] static Json object(std::initializer_list<Member> members = {});
    [[nodiscard]] static Json array();

    // An object's member (added, or replaced); *this.
    Json &set(std::string_view key, Json value);
    // An array's next element; *this.
    Json &push(Json value);
    [[nodiscard]] std::size_t size() const noexcept;
    // The text, pretty-printed with INDENT spaces per level (-1: one line).
    [[nodiscard]] std::string dump(int indent = 2) const;

private:
    struct Value;
    [[nodiscard]] static Json from_signed(std::int64_t value);
    [[nodiscard]] static Json from_unsigned(std::uint64_t value);
    std::unique_ptr<Value> value_;
};

} // namespace pvfs::cli

#endif // PVFS_CLI_HPP
