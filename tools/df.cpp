// pvfs-df: space and objects per server and in total.
#include <iostream>

#include <fmt/format.h>

#include "common.hpp"

using namespace pvfs;

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-df: show free space on each server of a pvfs file system"};
    tools::Target target;
    bool json = false;
    bool human = false;
    tools::add_target_options(app, target);
    app.flag("--json", json, "print as JSON (bytes)");
    app.flag("-H,--human", human, "sizes in KiB, MiB, GiB...");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    const auto client = tools::connect_or_exit("pvfs-df", target);
    const std::vector<client::ServerStatus> all = client->status_all();
    auto size = [&](std::uint64_t b) { return human ? tools::human_bytes(b) : std::to_string(b); };
    int status = 0;
    std::uint64_t total = 0;
    std::uint64_t avail = 0;
    std::uint64_t used = 0;
    cli::Json out = cli::Json::array();
    if (!json)
        fmt::print("{:<16} {:<14} {:>16} {:>16} {:>16} {:>5}\n", "server", "roles", "size", "used",
                   "available", "use%");
    for (const client::ServerStatus &s : all) {
        if (s.error != 0) {
            status = tools::exit_failure;
            if (json)
                out.push(
                    cli::Json::object({{"name", s.name}, {"error", client::error_text(s.error)}}));
            else
                fmt::print("{:<16} FAILED: {}\n", s.name, client::error_text(s.error));
            continue;
        }
        const std::uint64_t u = s.total_bytes - s.free_bytes;
        const bool data = (s.status.roles & client::role_data) != 0;
        const bool meta = (s.status.roles & client::role_metadata) != 0;
        const std::string roles = data && meta ? "metadata,data" : data ? "data" : "metadata";
        if (data) {
            total += s.total_bytes;
            avail += s.avail_bytes;
            used += u;
        }
        const unsigned pct =
            s.total_bytes == 0
                ? 0U
                : static_cast<unsigned>((u * 100 + s.total_bytes - 1) / s.total_bytes);
        if (json) {
            out.push(cli::Json::object({{"name", s.name},
                                        {"roles", roles},
                                        {"total_bytes", s.total_bytes},
                                        {"used_bytes", u},
                                        {"available_bytes", s.avail_bytes},
                                        {"total_objects", s.total_objects},
                                        {"free_objects", s.free_objects}}));
        } else {
            fmt::print("{:<16} {:<14} {:>16} {:>16} {:>16} {:>4}%\n", s.name, roles,
                       size(s.total_bytes), size(u), size(s.avail_bytes), pct);
        }
    }
    if (json)
        std::cout << cli::Json::object({{"servers", out},
                                        {"data_total_bytes", total},
                                        {"data_used_bytes", used},
                                        {"data_available_bytes", avail}})
                         .dump(2)
                  << "\n";
    else
        fmt::print("{:<16} {:<14} {:>16} {:>16} {:>16}\n", "total", "data", size(total), size(used),
                   size(avail));
    return status;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-df", [&] { return run(argc, argv); });
}
