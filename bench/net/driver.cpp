// The shared part of the network benchmark drivers: see driver.hpp.
#include "driver.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

namespace bench {

namespace {

// The driver's name for messages, and the timeout message the SIGALRM
// handler writes: a signal handler can only reach global state.
std::string &driver_name()
{
    static std::string name = "net-driver";
    return name;
}

struct alarm_text {
    std::array<char, 256> text{};
    std::size_t size = 0;
};
alarm_text alarm_message; // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

extern "C" void on_alarm(int /*signo*/)
{
    // write(2) and _exit(2) only: async-signal-safe.
    [[maybe_unused]] const ssize_t n =
        ::write(STDERR_FILENO, alarm_message.text.data(), alarm_message.size);
    ::_exit(124);
}

constexpr std::size_t max_size = std::size_t{1} << 30;

} // namespace

std::size_t options::window_for(std::size_t size) const
{
    const std::uint64_t by_bytes = window_bytes / size;
    return static_cast<std::size_t>(
        std::max<std::uint64_t>(1, std::min<std::uint64_t>(window, by_bytes)));
}

std::uint64_t options::messages_for(std::size_t size) const
{
    return std::max<std::uint64_t>(1, total / size);
}

std::size_t options::largest() const
{
    const auto &list = which == pattern::m2o ? replies : sizes;
    return list.empty() ? 0 : *std::max_element(list.begin(), list.end());
}

int parse(int argc, char **argv, std::string_view driver, options &opts,
          const std::vector<extra_option> &extra)
{
    driver_name() = driver;
    CLI::App app{"A driver of the network benchmark; bench/net/DRIVERS.md is its contract.",
                 std::string(driver)};
    app.require_subcommand(1, 1);
    app.fallthrough();
    app.add_option("--timeout", opts.timeout, "give up after this many seconds")
        ->check(CLI::Range(1U, 86400U));

    const auto sizes = CLI::Range(std::size_t{1}, max_size);
    auto *bw = app.add_subcommand("bw", "bandwidth: a stream of one-way messages, windowed");
    bw->add_option("--sizes", opts.sizes, "message sizes in bytes, comma-separated")
        ->delimiter(',')
        ->required()
        ->check(sizes);
    bw->add_option("--total", opts.total, "bytes per point")
        ->required()
        ->check(CLI::PositiveNumber);
    bw->add_option("--window", opts.window, "messages in flight at most")
        ->check(CLI::Range(1U, 4096U));
    bw->add_option("--window-bytes", opts.window_bytes, "bytes in flight at most")
        ->check(CLI::PositiveNumber);
    bw->add_option("--reps", opts.reps, "repetitions of every point")->check(CLI::Range(1U, 1000U));

    auto *lat = app.add_subcommand("lat", "latency: ping-pong of one message each way");
    lat->add_option("--sizes", opts.sizes, "message sizes in bytes, comma-separated")
        ->delimiter(',')
        ->required()
        ->check(sizes);
    lat->add_option("--iters", opts.iters, "timed round trips per point")
        ->check(CLI::Range(1U, 100000000U));
    lat->add_option("--warmup", opts.warmup, "untimed round trips before them")
        ->check(CLI::Range(0U, 100000000U));
    lat->add_option("--reps", opts.reps, "repetitions of every point")
        ->check(CLI::Range(1U, 1000U));

    auto *m2o = app.add_subcommand("m2o", "many-to-one: clients send requests, one server replies");
    m2o->add_option("--clients", opts.clients, "client processes")
        ->required()
        ->check(CLI::Range(1U, 1024U));
    m2o->add_option("--request", opts.request, "request size in bytes (at least 32)")
        ->check(CLI::Range(std::size_t{32}, max_size));
    m2o->add_option("--replies", opts.replies, "reply sizes in bytes, one series each")
        ->delimiter(',')
        ->required()
        ->check(sizes);
    m2o->add_option("--duration", opts.duration, "seconds each client keeps sending per point")
        ->check(CLI::Range(0.001, 3600.0));
    m2o->add_option("--reps", opts.reps, "repetitions of every point")
        ->check(CLI::Range(1U, 1000U));

    for (const extra_option &x : extra) {
        CLI::Option *o = app.add_option(x.names, x.value.get(), x.help);
        if (!x.choices.empty())
            o->check(CLI::IsMember(x.choices));
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    if (bw->parsed())
        opts.which = pattern::bw;
    else if (lat->parsed())
        opts.which = pattern::lat;
    else
        opts.which = pattern::m2o;
    return -1;
}

void arm_timeout(unsigned seconds)
{
    const auto text = fmt::format("{}: error: timed out after {} s\n", driver_name(), seconds);
    const std::size_t n = std::min(text.size(), alarm_message.text.size());
    std::copy_n(text.begin(), n, alarm_message.text.begin());
    alarm_message.size = n;
    struct sigaction sa {};
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGALRM, &sa, nullptr);
    ::alarm(seconds);
}

void error(std::string_view what)
{
    fmt::print(stderr, "{}: error: {}\n", driver_name(), what);
    std::fflush(stderr);
}

double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

double cpu_seconds()
{
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    const auto secs = [](const timeval &tv) {
        return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
    };
    return secs(ru.ru_utime) + secs(ru.ru_stime);
}

void report_bw(std::size_t size, unsigned rep, std::size_t window, std::uint64_t msgs,
               double seconds, double cpu)
{
    fmt::print("bw size={} rep={} window={} msgs={} bytes={} seconds={:.9f} cpu={:.6f}\n", size,
               rep, window, msgs, msgs * size, seconds, cpu);
    std::fflush(stdout);
}

void report_lat(std::size_t size, unsigned rep, unsigned iters, double seconds)
{
    fmt::print("lat size={} rep={} iters={} seconds={:.9f}\n", size, rep, iters, seconds);
    std::fflush(stdout);
}

void report_lat(std::size_t size, unsigned rep, double seconds, std::vector<double> round_trips)
{
    if (round_trips.empty()) {
        report_lat(size, rep, 0, seconds);
        return;
    }
    const auto middle = round_trips.begin() + static_cast<std::ptrdiff_t>(round_trips.size() / 2);
    std::nth_element(round_trips.begin(), middle, round_trips.end());
    const auto [low, high] = std::minmax_element(round_trips.begin(), round_trips.end());
    constexpr double us = 1e6;
    fmt::print("lat size={} rep={} iters={} seconds={:.9f} rtt_min_us={:.3f} rtt_median_us={:.3f} "
               "rtt_max_us={:.3f}\n",
               size, rep, round_trips.size(), seconds, *low * us, *middle * us, *high * us);
    std::fflush(stdout);
}

void report_m2o(unsigned clients, std::size_t request, std::size_t reply, unsigned rep,
                unsigned client, std::uint64_t iters, double seconds)
{
    fmt::print("m2o clients={} request={} reply={} rep={} client={} iters={} seconds={:.9f}\n",
               clients, request, reply, rep, client, iters, seconds);
    std::fflush(stdout);
}

} // namespace bench
