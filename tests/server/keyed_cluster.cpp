#include "keyed_cluster.hpp"

#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include <fmt/format.h>

namespace pvfs::test {

namespace {

std::string read_text(const std::string &path)
{
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
}

} // namespace

int pvfs_key(const std::vector<std::string> &args, std::string &out)
{
    std::string command = PVFS_KEY_BINARY;
    for (const std::string &a : args)
        command += " '" + a + "'";
    command += " 2>&1";
    // NOLINTNEXTLINE(cert-env33-c): runs the tool under test
    FILE *p = ::popen(command.c_str(), "r");
    require(p != nullptr, "popen pvfs-key");
    out.clear();
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p) != nullptr)
        out += buf;
    const int status = ::pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

void key_ok(const std::vector<std::string> &args)
{
    std::string out;
    const int rc = pvfs_key(args, out);
    require(rc == 0, fmt::format("pvfs-key {}: status {}: {}", args.front(), rc, out));
}

KeyedCluster::KeyedCluster(const std::vector<std::vector<std::string>> &keys,
                           const std::function<void(Cluster &)> &before_keys,
                           const std::string &extra, std::vector<ServerSpec> specs)
    : Cluster(std::move(specs), "request_timeout = \"10s\"\n" + extra, fresh_attrs())
{
    if (before_keys)
        before_keys(*this);
    dir = files.dir.string();
    clients = dir + "/clients";
    for (const auto &k : keys) {
        std::vector<std::string> args{"add",   k.at(0), "--file",
                                      clients, "--out", key_path(k.at(0))};
        args.insert(args.end(), k.begin() + 1, k.end());
        key_ok(args);
    }
    for (auto &[name, server] : servers)
        require(server->stop(SIGTERM) == 0, "clean stop of " + name);
    servers.clear();
    std::string config = read_text(files.config_path);
    const std::size_t at = config.find("key_file =");
    require(at != std::string::npos, "config without key_file");
    config.insert(at, fmt::format("client_keys = \"{}\"\n", clients));
    std::ofstream(files.config_path) << config;
    start_all();
}

std::string KeyedCluster::key_path(const std::string &name) const
{
    return dir + "/" + name + ".key";
}

std::unique_ptr<client::Client> KeyedCluster::as(const std::string &name, std::uint32_t uid,
                                                 std::uint32_t gid) const
{
    return connect_as(name, uid, gid, {});
}

std::unique_ptr<client::Client> KeyedCluster::connect_as(const std::string &name, std::uint32_t uid,
                                                         std::uint32_t gid,
                                                         std::vector<std::uint32_t> groups) const
{
    client::Options o = fresh_attrs();
    o.request_timeout = std::chrono::seconds(10);
    o.key_file = key_path(name);
    o.credentials.uid = uid;
    o.credentials.gid = gid;
    o.credentials.groups = std::move(groups);
    return connect(std::move(o));
}

RawClient KeyedCluster::raw(const std::string &key_file) const
{
    return {files.cluster.servers.at(0).addresses.at(0), key_file};
}

std::unique_ptr<RawClient> KeyedCluster::meta(const std::string &name) const
{
    auto r =
        std::make_unique<RawClient>(files.cluster.servers.at(0).addresses.at(0), key_path(name));
    r->to = proto::Destination{files.cluster.fs_id, 0};
    return r;
}

std::string KeyedCluster::log() const
{
    return servers.at(files.cluster.servers.at(0).name)->log_text();
}

} // namespace pvfs::test
