// pvfs-fsck: checks that metadata and data agree, and with --repair fixes
// what it finds:
//   - data objects whose file no longer exists (a client died between
//     removing the name and removing the objects): removed;
//   - directory entries whose object is gone: reported, and removed with
//     --repair;
//   - metadata objects no entry reaches (a remote mkdir that died between
//     making the directory and naming it, docs/metadata.md "Remote
//     directories"): reported, and empty directories removed with --repair;
//   - reclaim records (docs/metadata.md "Orphans and open references"): a
//     file unlinked while open whose last holder closed or died before
//     removing its data objects: reported, and finished with --repair.
// Files unlinked while still open somewhere (held orphans) are not
// problems: they are counted and left alone.
// Run it on a quiet file system: an object renamed during the walk may be
// taken for an orphan.
// Runs as root (listing every handle is root's).  Exit status 0 when the
// file system is clean (or was repaired), 1 when problems remain.
#include <iostream>
#include <unordered_set>

#include <fmt/format.h>

#include "common.hpp"

using namespace pvfs;

namespace {

// Each finding remembers whether --repair fixed it, so the report never
// says "removed" for what is still there.
struct OrphanObject {
    std::string server;
    Handle handle = no_handle;
    bool removed = false;
};
struct DanglingEntry {
    std::string path;
    bool removed = false;
};
struct OrphanMetadata {
    std::string server;
    Attr attr;
    bool removed = false;
};
struct Reclaim {
    std::string server;
    Handle handle = no_handle;
    Layout layout;
    bool finished = false;
};

struct Findings {
    std::vector<OrphanObject> orphan_objects;
    std::vector<DanglingEntry> dangling_entries;
    std::vector<OrphanMetadata> orphan_metadata;
    std::vector<Reclaim> reclaims;
    std::unordered_set<Handle> reachable;
    std::unordered_set<Handle> held; // unlinked while open: reachable through their holders
    std::size_t objects = 0;
    std::size_t handles = 0;
    std::size_t entries = 0;
    int errors = 0;
};

// NOLINTNEXTLINE(misc-no-recursion): one level per directory, at most 4096
void walk(client::Client &c, Handle dir, const std::string &path, Findings &f, bool repair,
          int depth)
{
    if (depth > 4096) {
        fmt::print(stderr, "pvfs-fsck: {}: deeper than 4096 levels, not followed\n", path);
        ++f.errors;
        return;
    }
    std::uint64_t cookie = 0;
    bool eof = false;
    std::vector<std::pair<std::string, std::size_t>> dangling; // name, finding
    while (!eof) {
        std::vector<client::DirEntry> page;
        if (const int rc = c.readdir(dir, cookie, 0, page, eof); rc != 0) {
            tools::report("pvfs-fsck", "readdir " + path, rc);
            ++f.errors;
            return;
        }
        for (const client::DirEntry &e : page) {
            cookie = e.cookie;
            ++f.entries;
            const std::string child = path == "/" ? "/" + e.name : path + "/" + e.name;
            Attr a;
            const int rc = c.getattr(e.handle, a);
            if (rc == -ENOENT || rc == -ESTALE) {
                dangling.emplace_back(e.name, f.dangling_entries.size());
                f.dangling_entries.push_back({child, false});
                continue;
            }
            if (rc != 0) {
                tools::report("pvfs-fsck", "getattr " + child, rc);
                ++f.errors;
                continue;
            }
            f.reachable.insert(e.handle);
            if (a.type == ObjectType::directory)
                walk(c, a.handle, child, f, repair, depth + 1);
        }
    }
    for (const auto &[name, index] : dangling) {
        if (!repair)
            continue;
        DanglingEntry &entry = f.dangling_entries[index];
        if (const int rc = c.unlink(dir, name); rc != 0) {
            tools::report("pvfs-fsck", "removing the dangling entry " + entry.path, rc);
            ++f.errors;
        } else {
            entry.removed = true;
        }
    }
}

} // namespace

static int run(int argc, char **argv)
{
    cli::Parser app{"pvfs-fsck: find (and with --repair remove) data objects without a file and "
                    "directory entries without an object, and metadata objects no entry reaches"};
    tools::Target target;
    bool repair = false;
    bool json = false;
    tools::add_target_options(app, target);
    app.flag("--repair", repair, "remove what is found");
    app.flag("--json", json, "print the findings as JSON");
    if (const std::optional<int> status = app.parse(argc, argv))
        return *status;

    const auto c = tools::connect_or_exit("pvfs-fsck", target);
    const config::Cluster &cluster = c->cluster();
    Findings f;
    // Objects first, then handles: an object created after its file (always
    // the case) is never taken for an orphan by a listing race.
    std::vector<std::pair<std::uint32_t, Handle>> objects;
    const auto data = cluster.data_servers();
    for (std::uint32_t d = 0; d < data.size(); ++d) {
        std::uint64_t cookie = 0;
        for (bool eof = false; !eof;) {
            client::HandlePage page;
            if (const int rc = c->list_objects(d, cookie, 4096, page); rc != 0) {
                tools::report("pvfs-fsck",
                              "listing the objects of " + cluster.servers[data[d]].name, rc);
                return tools::exit_failure;
            }
            for (const Handle h : page.handles)
                objects.emplace_back(d, h);
            cookie = page.next_cookie;
            eof = page.eof;
        }
    }
    std::unordered_set<Handle> handles;
    const auto metas = cluster.metadata_servers();
    for (std::uint32_t m = 0; m < metas.size(); ++m) {
        std::uint64_t cookie = 0;
        for (bool eof = false; !eof;) {
            client::HandlePage page;
            if (const int rc = c->list_handles(m, cookie, 4096, page); rc != 0) {
                tools::report("pvfs-fsck",
                              "listing the handles of " + cluster.servers[metas[m]].name, rc);
                return tools::exit_failure;
            }
            handles.insert(page.handles.begin(), page.handles.end());
            cookie = page.next_cookie;
            eof = page.eof;
        }
    }
    // Orphans after handles: a file unlinked meanwhile is then either
    // named, or held here.
    std::unordered_set<Handle> reclaiming;
    for (std::uint32_t m = 0; m < metas.size(); ++m) {
        std::uint64_t cookie = 0;
        for (bool eof = false; !eof;) {
            std::vector<client::Client::Orphan> page;
            if (const int rc = c->list_orphans(m, cookie, 4096, page, eof); rc != 0) {
                tools::report("pvfs-fsck",
                              "listing the orphans of " + cluster.servers[metas[m]].name, rc);
                return tools::exit_failure;
            }
            for (const client::Client::Orphan &o : page) {
                if (o.state == client::Client::Orphan::held) {
                    f.held.insert(o.handle);
                } else {
                    f.reclaims.push_back({cluster.servers[metas[m]].name, o.handle, o.layout});
                    reclaiming.insert(o.handle);
                }
                cookie = o.handle;
            }
            if (page.empty())
                eof = true;
        }
    }
    f.objects = objects.size();
    f.handles = handles.size();
    for (Reclaim &r : f.reclaims) {
        if (!repair)
            continue;
        if (const int rc = c->finish_orphan(r.handle, r.layout); rc != 0) {
            tools::report("pvfs-fsck",
                          fmt::format("finishing orphan {:016x} on {}", r.handle, r.server), rc);
            ++f.errors;
        } else {
            r.finished = true;
        }
    }
    for (const auto &[d, h] : objects) {
        // A reclaim record's objects go with it (above).
        if (handles.contains(h) || reclaiming.contains(h))
            continue;
        const std::string &server = cluster.servers[data[d]].name;
        OrphanObject &orphan = f.orphan_objects.emplace_back(OrphanObject{server, h, false});
        if (repair) {
            if (const int rc = c->remove_object(d, h); rc != 0) {
                tools::report("pvfs-fsck", fmt::format("removing object {:016x} on {}", h, server),
                              rc);
                ++f.errors;
            } else {
                orphan.removed = true;
            }
        }
    }
    f.reachable.insert(root_handle);
    walk(*c, root_handle, "/", f, repair, 0);
    for (const Handle h : handles) {
        // Every metadata server's top directory exists unnamed; only
        // server 0's is used (the root).
        if (f.reachable.contains(h) || f.held.contains(h) || handle_id(h) == 1)
            continue;
        Attr a;
        if (const int rc = c->getattr(h, a); rc != 0) {
            if (rc != -ENOENT) { // gone since the listing
                tools::report("pvfs-fsck", fmt::format("getattr {:016x}", h), rc);
                ++f.errors;
            }
            continue;
        }
        const std::string &server = cluster.servers[metas.at(handle_server(h))].name;
        OrphanMetadata &orphan = f.orphan_metadata.emplace_back(OrphanMetadata{server, a, false});
        if (!repair)
            continue;
        if (a.type != ObjectType::directory) {
            fmt::print(stderr,
                       "pvfs-fsck: unreachable object {:016x} on {} is not a directory: "
                       "left alone\n",
                       h, server);
            ++f.errors;
        } else if (const int rc = c->remove_orphan_dir(h); rc != 0) {
            tools::report("pvfs-fsck", fmt::format("removing directory {:016x} on {}", h, server),
                          rc);
            ++f.errors;
        } else {
            orphan.removed = true;
        }
    }

    const bool problems = !f.orphan_objects.empty() || !f.dangling_entries.empty() ||
                          !f.orphan_metadata.empty() || !f.reclaims.empty();
    if (json) {
        cli::Json orphans = cli::Json::array();
        for (const OrphanObject &o : f.orphan_objects)
            orphans.push(cli::Json::object({{"server", o.server},
                                            {"handle", fmt::format("{:016x}", o.handle)},
                                            {"removed", o.removed}}));
        cli::Json dangling = cli::Json::array();
        cli::Json removed_entries = cli::Json::array();
        for (const DanglingEntry &e : f.dangling_entries) {
            dangling.push(e.path);
            if (e.removed)
                removed_entries.push(e.path);
        }
        cli::Json unreachable = cli::Json::array();
        for (const OrphanMetadata &o : f.orphan_metadata)
            unreachable.push(cli::Json::object(
                {{"server", o.server},
                 {"handle", fmt::format("{:016x}", o.attr.handle)},
                 {"type", o.attr.type == ObjectType::directory ? "directory" : "other"},
                 {"removed", o.removed}}));
        cli::Json reclaims = cli::Json::array();
        for (const Reclaim &r : f.reclaims)
            reclaims.push(cli::Json::object({{"server", r.server},
                                             {"handle", fmt::format("{:016x}", r.handle)},
                                             {"finished", r.finished}}));
        std::cout << cli::Json::object({{"objects", f.objects},
                                        {"handles", f.handles},
                                        {"entries", f.entries},
                                        {"orphan_objects", orphans},
                                        {"dangling_entries", dangling},
                                        {"removed_entries", removed_entries},
                                        {"orphan_metadata", unreachable},
                                        {"unlinked_open_files", f.held.size()},
                                        {"reclaims", reclaims},
                                        {"repaired", repair && f.errors == 0 && problems},
                                        {"errors", f.errors}})
                         .dump(2)
                  << "\n";
    } else {
        const auto outcome = [repair](bool removed) {
            return !repair ? "" : removed ? ": removed" : ": NOT removed";
        };
        for (const OrphanObject &o : f.orphan_objects)
            fmt::print("orphan data object {:016x} on {}{}\n", o.handle, o.server,
                       outcome(o.removed));
        for (const DanglingEntry &e : f.dangling_entries)
            fmt::print("entry without an object: {}{}\n", e.path, outcome(e.removed));
        for (const OrphanMetadata &o : f.orphan_metadata)
            fmt::print("{} {:016x} on {} reached by no entry{}\n",
                       o.attr.type == ObjectType::directory ? "directory" : "object", o.attr.handle,
                       o.server, outcome(o.removed));
        for (const Reclaim &r : f.reclaims)
            fmt::print("closed unlinked file {:016x} on {}: data objects still to remove{}\n",
                       r.handle, r.server,
                       !repair      ? ""
                       : r.finished ? ": removed"
                                    : ": NOT removed");
        if (!f.held.empty())
            fmt::print("{} files unlinked while open, kept for their holders: left alone\n",
                       f.held.size());
        fmt::print("{} data objects, {} handles, {} directory entries checked: {}\n", f.objects,
                   f.handles, f.entries,
                   !problems ? "clean"
                   : repair  ? (f.errors == 0 ? "repaired" : "repair incomplete")
                             : "problems found (run with --repair to fix)");
    }
    if (f.errors != 0)
        return tools::exit_failure;
    return problems && !repair ? tools::exit_failure : 0;
}

int main(int argc, char **argv)
{
    return pvfs::tools::guarded("pvfs-fsck", [&] { return run(argc, argv); });
}
