// The keys a server accepts requests under (key_table.hpp).
#include "key_table.hpp"

#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core.hpp"
#include "pvfs/perm.hpp"

namespace pvfs::server {

Credentials Client::apply(Credentials cred) const
{
    if (uids && !uids->contains(cred.uid)) {
        cred.uid = perm::squashed_id;
        cred.gid = perm::squashed_id;
        cred.groups.clear();
    }
    if (gids) {
        if (!gids->contains(cred.gid))
            cred.gid = perm::squashed_id;
        std::erase_if(cred.groups, [this](std::uint32_t g) { return !gids->contains(g); });
    }
    return perm::squash(std::move(cred), root_squash);
}

KeyTable::KeyTable(proto::Key cluster_key, bool root_squash, std::string client_keys)
    : path_(std::move(client_keys))
{
    cluster_ = std::make_shared<const Client>(Client{
        std::move(cluster_key), root_squash, std::nullopt, false, !path_.empty(), std::nullopt});
    file_name_ = std::filesystem::path(path_).filename().string();
}

bool KeyTable::load(std::string &error, std::string &summary)
{
    if (path_.empty()) {
        return true;
    }
    config::ClientKeys loaded = config::load_client_keys(path_);
    if (!loaded.ok()) {
        error = std::move(loaded.error);
        return false;
    }
    std::unordered_map<std::uint32_t, std::shared_ptr<const Client>> next;
    next.reserve(loaded.clients.size());
    std::size_t revoked = 0;
    std::vector<std::string_view> newly_revoked;
    std::size_t added = 0;
    for (config::ClientKey &c : loaded.clients) {
        const std::uint32_t id = *c.key.id();
        // [filesystem] encrypt holds for every key (the cluster key says it).
        if (cluster_->key.encrypt())
            c.key.set_encrypt(true);
        auto client = std::make_shared<const Client>(
            Client{std::move(c.key), !c.no_root_squash, c.uids, c.revoked, false, c.gids});
        revoked += c.revoked ? 1 : 0;
        const auto old = clients_.find(id);
        if (old == clients_.end()) {
            ++added;
        } else if (c.revoked && !old->second->revoked) {
            newly_revoked.push_back(client->name());
        }
        next.emplace(id, std::move(client));
    }
    std::size_t removed = 0;
    for (const auto &old : clients_)
        removed += next.contains(old.first) ? 0 : 1;
    // Whose connections must end: keys that were good and are revoked,
    // gone or replaced by other bytes now.
    for (const auto &[id, old] : clients_) {
        if (old->revoked)
            continue;
        const auto now = next.find(id);
        if (now == next.end() || now->second->revoked || !now->second->key.same_bytes(old->key))
            shut_out_.emplace_back(old->name());
    }
    summary = fmt::format("{}: {} client keys ({} revoked); {} new, {} gone", path_, next.size(),
                          revoked, added, removed);
    for (std::size_t i = 0; i < newly_revoked.size(); ++i) {
        summary += fmt::format("{}{}", i == 0 ? "; revoked now: " : ", ", newly_revoked[i]);
    }
    clients_ = std::move(next);
    return true;
}

std::vector<std::string> KeyTable::take_shut_out()
{
    return std::exchange(shut_out_, {});
}

bool KeyTable::watch(std::string &error)
{
    if (path_.empty()) {
        return true;
    }
    UniqueFd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!fd.valid()) {
        error = fmt::format("inotify: {}", errno_text(errno));
        return false;
    }
    // The directory, not the file: an editor (or pvfs-key) writes a new file
    // and renames it over the old one, whose watch would then see nothing.
    // path_ is absolute (the config makes it so): it has a parent.
    const std::string dir = std::filesystem::path(path_).parent_path().string();
    if (::inotify_add_watch(fd.get(), dir.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_ATTRIB) < 0) {
        error = fmt::format("cannot watch {} for changes of {}: {}", dir, file_name_,
                            errno_text(errno));
        return false;
    }
    inotify_ = std::move(fd);
    return true;
}

bool KeyTable::changed()
{
    if (rewatch_) {
        // Until the directory is back nothing can be watched (the failed
        // re-read's retries say what is missing); once it is, re-read.
        std::string error;
        if (!watch(error)) {
            return false;
        }
        rewatch_ = false;
        return true;
    }
    if (!inotify_.valid()) {
        return false;
    }
    bool ours = false;
    alignas(inotify_event) std::array<char, 4096> buf{};
    for (;;) {
        const ssize_t n = ::read(inotify_.get(), buf.data(), buf.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return ours;
        }
        for (std::size_t at = 0; at + sizeof(inotify_event) <= static_cast<std::size_t>(n);) {
            inotify_event ev{};
            std::memcpy(&ev, buf.data() + at, sizeof ev);
            const std::size_t name_at = at + sizeof(inotify_event);
            if (ev.len > 0 && name_at + ev.len <= static_cast<std::size_t>(n)) {
                // The name is NUL-padded to ev.len.
                const std::string_view name(buf.data() + name_at,
                                            ::strnlen(buf.data() + name_at, ev.len));
                ours = ours || name == file_name_;
            }
            // An overflowed queue lost events: re-read to be sure.
            ours = ours || (ev.mask & IN_Q_OVERFLOW) != 0;
            // The directory went (removed, or replaced by a rename): its
            // watch is gone, and a new directory needs one of its own.
            if ((ev.mask & IN_IGNORED) != 0) {
                ours = true;
                rewatch_ = true;
            }
            at = name_at + ev.len;
        }
    }
}

std::shared_ptr<const Client> KeyTable::find(std::uint32_t id) const
{
    const auto it = clients_.find(id);
    return it == clients_.end() ? nullptr : it->second;
}

} // namespace pvfs::server
