// pvfs-key: the client keys of a cluster (docs/security.md "Client keys").
//
//   pvfs-key add node17 --uids 1000-1999 --out node17.key
//   pvfs-key revoke node17
//   pvfs-key list
//
// It edits the servers' client keys file ([filesystem] client_keys; --file,
// or the one -c CONFIG names): each change is a whole new file renamed
// over the old (the servers see it through inotify and re-read it), made
// under a lock on the file's directory so that two edits never lose one.
// It never prints a key.  Exit status: 0 done, 1 failure, 2 bad arguments.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <sodium.h>

#include "pvfs/cli.hpp"
#include "pvfs/client_keys.hpp"
#include "pvfs/config.hpp"
#include "pvfs/proto.hpp"
#include "pvfs/unique_fd.hpp"

namespace config = pvfs::config;
namespace proto = pvfs::proto;

namespace {

constexpr int exit_failure = 1;
constexpr const char *default_file = "/etc/pvfs/clients";

// An error that ends the program with its own exit status.
class Exit : public std::runtime_error {
public:
    Exit(int status, const std::string &message) : std::runtime_error(message), status_(status) {}
    [[nodiscard]] int status() const noexcept { return status_; }

private:
    int status_;
};

std::string errno_text(int error)
{
    return std::error_code(error, std::generic_category()).message();
}

// A string that held keys, wiped when it goes.
class Secret {
public:
    Secret() = default;
    Secret(const Secret &) = delete;
    Secret &operator=(const Secret &) = delete;
    Secret(Secret &&) = delete;
    Secret &operator=(Secret &&) = delete;
    ~Secret() { sodium_memzero(text.data(), text.size()); }
    std::string text;
};

// The client keys file, locked against other pvfs-key runs while it lives.
class Locked {
public:
    explicit Locked(const std::string &path)
    {
        std::string dir = std::filesystem::path(path).parent_path().string();
        if (dir.empty())
            dir = ".";
        lock_ = pvfs::UniqueFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!lock_.valid())
            throw Exit{exit_failure, fmt::format("{}: {}", dir, errno_text(errno))};
        while (::flock(lock_.get(), LOCK_EX) != 0) {
            if (errno != EINTR)
                throw Exit{exit_failure, fmt::format("cannot lock {}: {}", dir, errno_text(errno))};
        }
    }

private:
    pvfs::UniqueFd lock_;
};

// The file's text and its parse; a missing file is an empty table when
// `missing_ok`.
void read_table(const std::string &path, bool missing_ok, Secret &text, config::ClientKeys &table)
{
    std::string error;
    if (!proto::read_private_file(path, "client keys file", config::max_client_keys_bytes,
                                  text.text, error, proto::FileOwner::any_for_root)) {
        struct stat st {};
        if (missing_ok && ::lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
            text.text.clear();
            return;
        }
        throw Exit{exit_failure, error};
    }
    table = config::parse_client_keys(text.text, path);
    if (!table.ok())
        throw Exit{exit_failure, table.error + " (fix the file first; nothing was changed)"};
}

const config::ClientKey *find(const config::ClientKeys &table, std::string_view name)
{
    for (const config::ClientKey &c : table.clients) {
        if (c.key.name() == name)
            return &c;
    }
    return nullptr;
}

// Checks `text` parses before it replaces the file, so pvfs-key never
// writes a file the servers would refuse.
void replace(const std::string &path, const std::string &text)
{
    if (const config::ClientKeys again = config::parse_client_keys(text, path); !again.ok())
        throw Exit{exit_failure, "the new file would not parse: " + again.error};
    if (const config::Status st = config::replace_private_file(path, text); !st.ok())
        throw Exit{exit_failure, st.error};
}

// `--uids`/`--gids` LO-HI; none when not given.
std::optional<config::UidRange> id_range(std::string_view option, const std::string &text)
{
    if (text.empty())
        return std::nullopt;
    std::optional<config::UidRange> range = config::parse_uid_range(text);
    if (!range)
        throw Exit{
            pvfs::cli::exit_usage,
            fmt::format("--{} {}: expected LO-HI, two decimal ids with LO <= HI", option, text)};
    return range;
}

int add(const std::string &file, const std::string &name, bool no_root_squash, bool encrypt,
        const std::string &uids_text, const std::string &gids_text, std::string out)
{
    const std::optional<config::UidRange> uids = id_range("uids", uids_text);
    const std::optional<config::UidRange> gids = id_range("gids", gids_text);
    if (out.empty())
        out = name + ".key";
    const Locked lock(file);
    Secret text;
    config::ClientKeys table;
    read_table(file, true, text, table);
    if (find(table, name) != nullptr)
        throw Exit{exit_failure, fmt::format("{}: client '{}' exists already", file, name)};
    const std::uint32_t id = proto::key_id(name);
    for (const config::ClientKey &c : table.clients) {
        if (c.key.id() == id)
            throw Exit{exit_failure,
                       fmt::format("{}: client '{}' has the key id {:08x} of '{}'; choose "
                                   "another name",
                                   file, name, id, c.key.name())};
    }
    Secret hex;
    if (const config::Status st = config::generate_client_key_file(out, name, hex.text, encrypt);
        !st.ok())
        throw Exit{exit_failure, st.error};
    Secret next;
    next.text.reserve(text.text.size() + 256);
    next.text = text.text;
    if (!next.text.empty() && next.text.back() != '\n')
        next.text += '\n';
    next.text += config::client_key_line(name, hex.text, no_root_squash, uids, gids, encrypt);
    next.text += '\n';
    try {
        replace(file, next.text);
    } catch (...) {
        // The key was never accepted: it must not lie around.
        ::unlink(out.c_str());
        throw;
    }
    fmt::print("added client {} (key id {:08x}) to {}; its key file is {}: install it on the "
               "client node as /etc/pvfs/pvfs.key, mode 0600\n",
               name, id, file, out);
    return 0;
}

int revoke(const std::string &file, const std::string &name)
{
    const Locked lock(file);
    Secret text;
    config::ClientKeys table;
    read_table(file, false, text, table);
    const config::ClientKey *c = find(table, name);
    if (c == nullptr)
        throw Exit{exit_failure, fmt::format("{}: no client '{}'", file, name)};
    if (c->revoked) {
        fmt::print("client {} is revoked already\n", name);
        return 0;
    }
    // The line gets " revoked" before its comment, if it has one; the rest
    // of the file (comments, order, spacing) stays as the admin wrote it.
    Secret next;
    next.text.reserve(text.text.size() + 16);
    std::string_view rest = text.text;
    for (std::size_t number = 1; !rest.empty(); ++number) {
        const std::size_t newline = rest.find('\n');
        std::string_view line = rest.substr(0, newline);
        rest = newline == std::string_view::npos ? std::string_view{} : rest.substr(newline + 1);
        if (number == c->line) {
            const std::size_t hash = line.find('#');
            std::string_view fields = line.substr(0, hash);
            const std::string_view comment =
                hash == std::string_view::npos ? std::string_view{} : line.substr(hash);
            fields.remove_suffix(fields.size() - (fields.find_last_not_of(" \t") + 1));
            next.text += fields;
            next.text += " revoked";
            if (!comment.empty()) {
                next.text += ' ';
                next.text += comment;
            }
        } else {
            next.text += line;
        }
        if (newline != std::string_view::npos)
            next.text += '\n';
    }
    replace(file, next.text);
    fmt::print("revoked client {} in {}; the servers refuse its key once they have re-read the "
               "file\n",
               name, file);
    return 0;
}

int list(const std::string &file)
{
    Secret text;
    config::ClientKeys table;
    read_table(file, false, text, table);
    const auto range = [](const std::optional<config::UidRange> &r) {
        return r ? fmt::format("{}-{}", r->low, r->high) : std::string("any");
    };
    fmt::print("{:<24} {:<8} {:<14} {:<23} {:<23} {:<9} {}\n", "NAME", "KEY-ID", "ROOT", "UIDS",
               "GIDS", "WIRE", "STATE");
    for (const config::ClientKey &c : table.clients) {
        fmt::print("{:<24} {:08x} {:<14} {:<23} {:<23} {:<9} {}\n", c.key.name(), *c.key.id(),
                   c.no_root_squash ? "no_root_squash" : "root_squash", range(c.uids),
                   range(c.gids), c.key.encrypt() ? "encrypt" : "plain",
                   c.revoked ? "revoked" : "active");
    }
    return 0;
}

int run(int argc, char **argv)
{
    pvfs::cli::Parser app{
        "pvfs-key: adds, revokes and lists the client keys of a pvfs cluster (the servers' "
        "[filesystem] client_keys file).\n"
        "  pvfs-key add NAME [--no-root-squash] [--encrypt] [--uids LO-HI] [--gids LO-HI] "
        "[--out KEYFILE]\n"
        "  pvfs-key revoke NAME\n"
        "  pvfs-key list\n"
        "Keys are never printed; add writes the new client's key file."};
    std::string command;
    std::string name;
    std::string file;
    std::string config_path;
    std::string out;
    std::string uids;
    std::string gids;
    bool no_root_squash = false;
    bool encrypt = false;
    app.option("command", command, "add, revoke or list")
        .required()
        .one_of({"add", "revoke", "list"});
    app.option("name", name, "the client's name (add, revoke): 1 to 64 of A-Z a-z 0-9 . _ -");
    app.option("-f,--file", file,
               fmt::format("the client keys file (default: the config's client_keys, else {})",
                           default_file));
    app.option("-c,--config", config_path,
               "a cluster config whose [filesystem] client_keys names the file (default: "
               "$PVFS_CONFIG)");
    app.option("-o,--out", out, "add: where to write the client's key file (default: NAME.key)");
    app.option("--uids", uids, "add: the uids the client may act as, LO-HI; others become nobody");
    app.option("--gids", gids,
               "add: the gids the client may act with, LO-HI; a primary gid outside becomes "
               "nogroup, supplementary groups outside are dropped");
    app.flag("--no-root-squash", no_root_squash, "add: the client's root stays root");
    app.flag("--encrypt", encrypt,
             "add: the client's connections must be encrypted (its key file says so, so it "
             "asks; the servers refuse it plain)");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    if (command == "list" && !name.empty())
        throw Exit{pvfs::cli::exit_usage, "list takes no NAME"};
    if (command != "list" && name.empty())
        throw Exit{pvfs::cli::exit_usage, command + " needs the client's NAME"};
    if (command != "add" &&
        (!out.empty() || !uids.empty() || !gids.empty() || no_root_squash || encrypt))
        throw Exit{pvfs::cli::exit_usage,
                   "--out, --uids, --gids, --no-root-squash and --encrypt go with add only"};
    if (!name.empty() && (!proto::valid_key_name(name) || name == config::cluster_key_name))
        throw Exit{pvfs::cli::exit_usage,
                   fmt::format("'{}' is not a client name: 1 to {} characters of A-Z a-z 0-9 . _ "
                               "- (and not '{}', the cluster key's)",
                               name, proto::max_key_name, config::cluster_key_name)};
    if (file.empty()) {
        if (config_path.empty()) {
            const char *env = std::getenv("PVFS_CONFIG"); // NOLINT(concurrency-mt-unsafe)
            config_path = env != nullptr ? env : "";
        }
        if (!config_path.empty()) {
            const config::Result loaded = config::load_file(config_path);
            if (!loaded.ok())
                throw Exit{exit_failure, loaded.error};
            if (loaded.cluster.client_keys.empty())
                throw Exit{exit_failure,
                           fmt::format("{} sets no [filesystem] client_keys; add one (docs/"
                                       "config.md) or give --file",
                                       config_path)};
            file = loaded.cluster.client_keys;
        } else {
            file = default_file;
        }
    }
    if (command == "add")
        return add(file, name, no_root_squash, encrypt, uids, gids, out);
    if (command == "revoke")
        return revoke(file, name);
    return list(file);
}

} // namespace

int main(int argc, char **argv)
{
    try {
        if (sodium_init() < 0)
            throw Exit{exit_failure, "libsodium cannot initialise its random source"};
        return run(argc, argv);
    } catch (const Exit &e) {
        fmt::print(stderr, "pvfs-key: {}\n", e.what());
        if (e.status() == pvfs::cli::exit_usage)
            fmt::print(stderr, "Run with --help for more information.\n");
        return e.status();
    } catch (const std::exception &e) {
        fmt::print(stderr, "pvfs-key: {}\n", e.what());
        return exit_failure;
    }
}
