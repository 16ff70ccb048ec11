// pvfs-genconfig: writes a cluster config and a fresh cluster key.
//
//   pvfs-genconfig --meta tcp://m:3334 --data tcp://d0:3334 --data tcp://d1:3334
//                  --storage /var/lib/pvfs --out cluster.toml
//   pvfs-genconfig --local 3 --storage /tmp/pvfs --out /tmp/pvfs/cluster.toml
//
// The config is the library's canonical text (config::to_toml), checked by
// parsing it back before it is written and by loading the written file
// after.  Exit status: 0 done, 1 failure, 2 bad arguments.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <sodium.h>

#include "pvfs/cli.hpp"
#include "pvfs/config.hpp"
#include "pvfs/unique_fd.hpp"

namespace config = pvfs::config;

namespace {

constexpr int exit_failure = 1;
constexpr int exit_usage = 2;
constexpr int default_port_base = 3334;
constexpr unsigned max_local_servers = 1024;
constexpr mode_t config_mode = 0644;

// An error that ends the program with its own exit status.
class Exit : public std::runtime_error {
public:
    Exit(int status, const std::string &message) : std::runtime_error(message), status_(status) {}
    [[nodiscard]] int status() const noexcept { return status_; }

private:
    int status_;
};

struct Options {
    std::string fs_name = "pvfs";
    std::optional<std::uint32_t> fs_id;
    std::vector<std::string> meta;
    std::vector<std::string> data;
    std::vector<std::string> servers;
    std::optional<unsigned> local;
    std::string local_ib;
    int port_base = default_port_base;
    std::string storage;
    std::string out;
    std::string key;
    std::string stripe_size;
    std::optional<std::uint32_t> stripe_count;
    bool force = false;
};

std::string errno_text(int error)
{
    return std::error_code(error, std::generic_category()).message();
}

std::string absolute(const std::string &path)
{
    return std::filesystem::absolute(path).lexically_normal().string();
}

std::string checked_url(const std::string &url, std::string_view option)
{
    const config::Address a = config::parse_address(url);
    if (!a.ok()) {
        throw Exit{exit_usage, fmt::format("{} {}: {}", option, url, a.error)};
    }
    return a.url;
}

// NAME=URL[,URL...]:ROLES, ROLES one of metadata, data, metadata+data.
config::Server server_from_spec(const std::string &spec)
{
    const auto usage = [&](std::string_view why) {
        return Exit{exit_usage,
                    fmt::format("--server {}: {}; expected NAME=URL[,URL...]:ROLES with ROLES "
                                "metadata, data or metadata+data",
                                spec, why)};
    };
    const auto equals = spec.find('=');
    const auto colon = spec.rfind(':');
    if (equals == std::string::npos || colon == std::string::npos || colon < equals) {
        throw usage("malformed");
    }
    config::Server s;
    s.name = spec.substr(0, equals);
    std::string_view roles = std::string_view(spec).substr(colon + 1);
    while (!roles.empty()) {
        const auto plus = roles.find('+');
        const std::string_view role = roles.substr(0, plus);
        if (role == "metadata" || role == "meta") {
            s.metadata = true;
        } else if (role == "data") {
            s.data = true;
        } else {
            throw usage(fmt::format("unknown role '{}'", role));
        }
        roles = plus == std::string_view::npos ? std::string_view() : roles.substr(plus + 1);
    }
    if (!s.metadata && !s.data) {
        throw usage("no role");
    }
    std::string_view urls = std::string_view(spec).substr(equals + 1, colon - equals - 1);
    while (!urls.empty()) {
        const auto comma = urls.find(',');
        s.addresses.push_back(checked_url(std::string(urls.substr(0, comma)), "--server"));
        urls = comma == std::string_view::npos ? std::string_view() : urls.substr(comma + 1);
    }
    if (s.addresses.empty()) {
        throw usage("no address");
    }
    return s;
}

// Ports the kernel hands out for 127.0.0.1:0, all held until every one is
// chosen so they are distinct; free again when this returns (another
// program may take one before the servers start: fine for a test cluster).
std::vector<int> free_ports(unsigned count)
{
    std::vector<pvfs::UniqueFd> held;
    std::vector<int> ports;
    for (unsigned i = 0; i < count; ++i) {
        pvfs::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (!fd.valid()) {
            throw Exit{exit_failure, fmt::format("socket: {}", errno_text(errno))};
        }
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        if (::bind(fd.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
            ::getsockname(fd.get(), reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
            throw Exit{exit_failure, fmt::format("cannot bind 127.0.0.1:0: {}", errno_text(errno))};
        }
        ports.push_back(ntohs(addr.sin_port));
        held.push_back(std::move(fd));
    }
    return ports;
}

std::vector<config::Server> local_servers(unsigned data_servers, int port_base,
                                          const std::string &ib_host)
{
    const unsigned count = data_servers + 1;
    std::vector<int> ports;
    if (port_base == 0) {
        ports = free_ports(count);
    } else {
        if (port_base < 1 || port_base + static_cast<int>(count) - 1 > 65535) {
            throw Exit{exit_usage,
                       fmt::format("--port-base {}: ports {}..{} are not all in "
                                   "1..65535",
                                   port_base, port_base, port_base + static_cast<int>(count) - 1)};
        }
        for (unsigned i = 0; i < count; ++i) {
            ports.push_back(port_base + static_cast<int>(i));
        }
    }
    std::vector<config::Server> out;
    for (unsigned i = 0; i < count; ++i) {
        config::Server s;
        s.name = i == 0 ? "meta0" : fmt::format("data{}", i - 1);
        s.addresses = {fmt::format("tcp://127.0.0.1:{}", ports[i])};
        if (!ib_host.empty()) // rdma_cm's ports are not TCP's: the same number
            s.addresses.push_back(
                checked_url(fmt::format("ib://{}:{}", ib_host, ports[i]), "--local-ib"));
        s.metadata = i == 0;
        s.data = i != 0;
        out.push_back(std::move(s));
    }
    return out;
}

config::Cluster cluster_from(const Options &o)
{
    config::Cluster c;
    if (!config::valid_config_name(o.fs_name)) {
        throw Exit{exit_usage, fmt::format("--fs-name {}: use 1 to {} of A-Z a-z 0-9 _ . -",
                                           o.fs_name, config::max_name_bytes)};
    }
    c.fs_name = o.fs_name;
    c.fs_id = o.fs_id ? *o.fs_id : randombytes_random();

    if (o.local) {
        c.servers = local_servers(*o.local, o.port_base, o.local_ib);
    } else {
        for (std::size_t i = 0; i < o.meta.size(); ++i) {
            config::Server s;
            s.name = fmt::format("meta{}", i);
            s.addresses = {checked_url(o.meta[i], "--meta")};
            s.metadata = true;
            c.servers.push_back(std::move(s));
        }
        for (std::size_t i = 0; i < o.data.size(); ++i) {
            config::Server s;
            s.name = fmt::format("data{}", i);
            s.addresses = {checked_url(o.data[i], "--data")};
            s.data = true;
            c.servers.push_back(std::move(s));
        }
        for (const std::string &spec : o.servers) {
            c.servers.push_back(server_from_spec(spec));
        }
    }

    std::set<std::string> names;
    std::set<std::string> urls;
    for (config::Server &s : c.servers) {
        if (!config::valid_config_name(s.name)) {
            throw Exit{exit_usage, fmt::format("server name '{}': use 1 to {} of A-Z a-z 0-9 _ . -",
                                               s.name, config::max_name_bytes)};
        }
        if (!names.insert(s.name).second) {
            throw Exit{exit_usage, fmt::format("two servers are named {}", s.name)};
        }
        for (const std::string &url : s.addresses) {
            if (!urls.insert(url).second) {
                throw Exit{exit_usage, fmt::format("two servers have the address {}", url)};
            }
        }
        s.storage = (std::filesystem::path(absolute(o.storage)) / s.name).string();
    }
    if (c.metadata_servers().empty() || c.data_servers().empty()) {
        throw Exit{exit_usage,
                   "a cluster needs a metadata and a data server: give --local N, or --meta "
                   "and --data (or --server)"};
    }

    pvfs::Layout &layout = c.defaults.default_layout;
    if (!o.stripe_size.empty()) {
        config::Quantity q;
        const std::string &text = o.stripe_size;
        if (text.find_first_not_of("0123456789") == std::string::npos) {
            // Plain bytes on a command line; the config writes them as an integer.
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), q.value);
            if (ec != std::errc() || end != text.data() + text.size()) {
                q.error = fmt::format("'{}' is not a size", text);
            }
        } else {
            q = config::parse_size(text);
        }
        if (!q.ok()) {
            throw Exit{exit_usage, fmt::format("--stripe-size: {}", q.error)};
        }
        if (q.value < pvfs::min_stripe_size || q.value > pvfs::max_stripe_size ||
            q.value % config::stripe_alignment != 0) {
            throw Exit{exit_usage, fmt::format("--stripe-size {}: a multiple of {} in 64KiB..1GiB",
                                               o.stripe_size, config::stripe_alignment)};
        }
        layout.stripe_size = static_cast<std::uint32_t>(q.value);
    }
    const std::size_t data_count = c.data_servers().size();
    const std::uint32_t count = o.stripe_count.value_or(0);
    if (count > data_count) {
        throw Exit{exit_usage, fmt::format("--stripe-count {}: there are only {} data servers",
                                           count, data_count)};
    }
    layout.stripe_count = count == 0 ? static_cast<std::uint32_t>(data_count) : count;

    const std::filesystem::path out(absolute(o.out));
    if (o.key.empty()) {
        std::filesystem::path key = out;
        c.key_file = key.replace_extension(".key").string();
    } else {
        c.key_file = absolute(o.key);
    }
    return c;
}

// Creates `path` with `text`; with `force` replaces it atomically instead.
void write_config(const std::string &path, const std::string &text, bool force)
{
    std::string temp;
    pvfs::UniqueFd fd;
    if (force) {
        const std::filesystem::path p(path);
        temp = (p.parent_path() / ("." + p.filename().string() + ".XXXXXX")).string();
        fd.reset(::mkostemp(temp.data(), O_CLOEXEC));
    } else {
        fd.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                        config_mode));
    }
    if (!fd.valid()) {
        throw Exit{exit_failure, fmt::format("{}: cannot create: {}", path, errno_text(errno))};
    }
    const std::string &created = force ? temp : path;
    std::string_view left = text;
    std::string error;
    while (!left.empty() && error.empty()) {
        const ssize_t n = ::write(fd.get(), left.data(), left.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            error = fmt::format("cannot write: {}", errno_text(errno));
            break;
        }
        left.remove_prefix(static_cast<std::size_t>(n));
    }
    if (error.empty() && ::fchmod(fd.get(), config_mode) != 0) {
        error = fmt::format("cannot set mode 0644: {}", errno_text(errno));
    }
    if (error.empty() && ::fsync(fd.get()) != 0) {
        error = fmt::format("cannot fsync: {}", errno_text(errno));
    }
    if (error.empty() && ::close(fd.release()) != 0) {
        error = fmt::format("cannot close: {}", errno_text(errno));
    }
    if (error.empty() && force && ::rename(temp.c_str(), path.c_str()) != 0) {
        error = fmt::format("cannot rename {} over it: {}", temp, errno_text(errno));
    }
    if (!error.empty()) {
        (void)::unlink(created.c_str());
        throw Exit{exit_failure, fmt::format("{}: {}", path, error)};
    }
}

bool exists(const std::string &path)
{
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
}

void describe(const config::Cluster &c, const std::string &out)
{
    fmt::print("wrote {}: file system {} (id {}), {} metadata and {} data server{}\n", out,
               c.fs_name, c.fs_id, c.metadata_servers().size(), c.data_servers().size(),
               c.data_servers().size() == 1 ? "" : "s");
    for (const config::Server &s : c.servers) {
        std::string urls;
        for (const std::string &url : s.addresses) {
            urls += urls.empty() ? url : " " + url;
        }
        const char *roles = s.metadata && s.data ? "metadata+data"
                            : s.metadata         ? "metadata"
                                                 : "data";
        fmt::print("  {:<10} {:<13} {}  storage {}\n", s.name, roles, urls, s.storage);
    }
    fmt::print("wrote {} (mode 0600)\n", c.key_file);
}

int run(int argc, char **argv)
{
    Options o;
    pvfs::cli::Parser app{
        "Writes a pvfs cluster config (TOML) and a fresh cluster key.\n"
        "Either --local N for a test cluster on 127.0.0.1, or the servers with --meta, "
        "--data and --server.\nServers are numbered in the order --meta, --data, "
        "--server; each one's storage is DIR/<name>.",
        "pvfs-genconfig"};
    app.option("--out", o.out, "the config file to write").type_name("FILE").required();
    app.option("--storage", o.storage, "directory holding every server's storage directory")
        .type_name("DIR")
        .required();
    app.option("--fs-name", o.fs_name, "file-system name ([A-Za-z0-9_.-]{1,64})")
        .type_name("NAME")
        .show_default();
    app.option("--fs-id", o.fs_id, "file-system id (default: random)").type_name("ID");
    const pvfs::cli::Option local =
        app.option("--local", o.local,
                   "a test cluster: one metadata server and N data servers "
                   "on 127.0.0.1")
            .type_name("N")
            .range(1U, max_local_servers);
    app.option("--local-ib", o.local_ib,
               "--local: each server also listens on ib://ADDR:its port (an RDMA "
               "device's address)")
        .type_name("ADDR")
        .needs(local);
    app.option("--port-base", o.port_base,
               "--local: first port, the others follow; 0 picks free ports")
        .type_name("PORT")
        .show_default()
        .needs(local);
    app.option("--meta", o.meta, "a metadata server tcp://host:port (meta0, meta1, ...)")
        .type_name("URL")
        .excludes(local);
    app.option("--data", o.data, "a data server tcp://host:port (data0, data1, ...)")
        .type_name("URL")
        .excludes(local);
    app.option("--server", o.servers,
               "a named server NAME=URL[,URL...]:ROLES, ROLES metadata, data or "
               "metadata+data")
        .type_name("SPEC")
        .excludes(local);
    app.option("--key", o.key, "the key file to write (default: the config's name with .key)")
        .type_name("FILE");
    app.option("--stripe-size", o.stripe_size,
               "default stripe size: bytes or KiB/MiB/GiB (default 1MiB)")
        .type_name("SIZE");
    app.option("--stripe-count", o.stripe_count,
               "default stripe count (default 0: every data server)")
        .type_name("N");
    app.flag("--force", o.force, "overwrite existing config and key files");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    const config::Cluster cluster = cluster_from(o);
    const std::string out = absolute(o.out);
    const std::string text = config::to_toml(cluster);
    const config::Result check =
        config::parse(text, out, std::filesystem::path(out).parent_path().string());
    if (!check.ok() || !(check.cluster == cluster)) {
        throw Exit{exit_failure, fmt::format("internal error: the generated config does not "
                                             "parse back: {}",
                                             check.ok() ? "it differs" : check.error)};
    }
    if (!o.force) {
        for (const std::string &path : {out, cluster.key_file}) {
            if (exists(path)) {
                throw Exit{exit_failure,
                           fmt::format("{} exists; use --force to overwrite it", path)};
            }
        }
    }
    if (const config::Status key = config::generate_key_file(cluster.key_file, o.force);
        !key.ok()) {
        throw Exit{exit_failure, key.error};
    }
    try {
        write_config(out, text, o.force);
    } catch (const Exit &) {
        if (!o.force) {
            // A fresh key without its config is litter; a replaced one is
            // gone either way.
            (void)::unlink(cluster.key_file.c_str());
        }
        throw;
    }
    const config::Result written = config::load_file(out);
    if (!written.ok() || !(written.cluster == cluster)) {
        throw Exit{exit_failure, fmt::format("{} does not read back as written: {}", out,
                                             written.ok() ? "it differs" : written.error)};
    }
    describe(cluster, out);
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    try {
        if (sodium_init() < 0) {
            throw Exit{exit_failure, "libsodium cannot initialise its random source"};
        }
        return run(argc, argv);
    } catch (const Exit &e) {
        fmt::print(stderr, "pvfs-genconfig: {}\n", e.what());
        if (e.status() == exit_usage) {
            fmt::print(stderr, "Run with --help for more information.\n");
        }
        return e.status();
    } catch (const std::exception &e) {
        fmt::print(stderr, "pvfs-genconfig: {}\n", e.what());
        return exit_failure;
    }
}
