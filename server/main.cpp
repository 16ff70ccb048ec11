// pvfs-server: serves the roles the cluster config gives it.
//
//   pvfs-server -c /etc/pvfs/cluster.toml --name data1
//
// It runs in the foreground (systemd, `make up` and the tests start it);
// SIGTERM or SIGINT stop it after the requests in progress finish; SIGHUP
// re-reads the client keys file ([filesystem] client_keys).  With a metrics
// file (--metrics-file or the config's metrics_file) it keeps metrics and
// rewrites that file every interval (docs/metrics.md).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "pvfs/cli.hpp"
#include "pvfs/gossip.hpp"
#include "pvfs/metrics.hpp"
#include "server.hpp"

namespace {

std::atomic<bool> g_stop{false};   // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)
std::atomic<bool> g_reload{false}; // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

extern "C" void on_stop_signal(int /*signal*/)
{
    g_stop.store(true);
}

extern "C" void on_reload_signal(int /*signal*/)
{
    g_reload.store(true);
}

// Written once the server listens, so that whoever started it can wait for
// the file; replaced atomically, through a temporary with a random name
// created O_EXCL|O_NOFOLLOW in the same directory (the metrics file's
// writer): a FIFO, symbolic link or file that others placed at a fixed
// PATH.tmp in a shared directory (/run, /tmp) would otherwise have blocked
// the start or had the pid written through it into their target.
bool write_pid_file(const std::string &path, std::string &error)
{
    return pvfs::metrics::write_file_atomically(path, fmt::format("{}\n", ::getpid()), error) == 0;
}

} // namespace

static int run(int argc, char **argv)
{
    pvfs::cli::Parser app{
        "pvfs-server: a metadata and/or data server of a pvfs cluster (roles from the "
        "cluster config)"};
    pvfs::server::ServerOptions options;
    std::string log_file;
    std::string debug;
    std::string pid_file;
    const char *env_config = std::getenv("PVFS_CONFIG"); // NOLINT(concurrency-mt-unsafe)
    if (env_config != nullptr)
        options.config_path = env_config;
    app.option("-c,--config", options.config_path, "cluster config (default: $PVFS_CONFIG)");
    app.option("-n,--name", options.name,
               "which server of the config this is (needed when it lists several)");
    app.option("--log", log_file, "log to this file instead of stderr");
    app.option("--debug", debug, "debug masks, e.g. server,storage or all (default: $PVFS_DEBUG)");
    app.option("--pid-file", pid_file, "write the process id here once listening");
    app.option("--metrics-file", options.metrics_file,
               "write metrics in the Prometheus text format to this file (default: the "
               "config's metrics_file; none)");
    app.option("--metrics-interval", options.metrics_interval,
               "rewrite the metrics file this often, e.g. 10s or 500ms (default: the config's "
               "metrics_interval; 10s)");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    if (options.config_path.empty()) {
        std::fputs("pvfs-server: no config: give -c CONFIG or set PVFS_CONFIG\n", stderr);
        return 2;
    }
    if (!log_file.empty()) {
        if (const auto st = pvfs::gossip::log_to_file(log_file); !st.ok()) {
            std::fprintf(stderr, "pvfs-server: %s\n", st.error.c_str());
            return 1;
        }
    }
    const auto configured =
        debug.empty() ? pvfs::gossip::configure_from_env() : pvfs::gossip::configure(debug);
    if (!configured.ok()) {
        std::fprintf(stderr, "pvfs-server: %s\n", configured.error.c_str());
        return 2;
    }

    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    struct sigaction hup {};
    hup.sa_handler = on_reload_signal;
    ::sigemptyset(&hup.sa_mask);
    ::sigaction(SIGHUP, &hup, nullptr);
    ::signal(SIGPIPE, SIG_IGN); // NOLINT(cert-err33-c): the old handler does not matter

    std::string error;
    const std::unique_ptr<pvfs::server::Server> server =
        pvfs::server::Server::create(options, error);
    if (!server) {
        pvfs::gossip::error(pvfs::gossip::Mask::server, "pvfs-server: {}", error);
        std::fprintf(stderr, "pvfs-server: %s\n", error.c_str());
        return 1;
    }
    if (!pid_file.empty() && !write_pid_file(pid_file, error)) {
        std::fprintf(stderr, "pvfs-server: pid file %s\n", error.c_str());
        return 1;
    }
    std::string addresses;
    for (const std::string &a : server->listen_addresses())
        addresses += (addresses.empty() ? "" : " ") + a;
    pvfs::gossip::warning(pvfs::gossip::Mask::server, "{}: listening on {}", server->name(),
                          addresses);
    const int status = server->run(g_stop, &g_reload);
    if (!pid_file.empty())
        ::unlink(pid_file.c_str());
    pvfs::gossip::flush();
    return status;
}

int main(int argc, char **argv)
{
    try {
        return run(argc, argv);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "pvfs-server: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "pvfs-server: unknown error\n");
    }
    return 1;
}
