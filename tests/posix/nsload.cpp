// pvfs-nsload: a namespace workload whose every acknowledged operation is
// journaled, so a fault injected while it runs can be judged afterwards.
//
//   pvfs-nsload DIR --journal JDIR [--workers N] [--seconds S] [--ops N]
//               [--seed S] [--allow-errno EIO,ENOSPC,...]
//   pvfs-nsload DIR --journal JDIR --verify
//
// N worker processes each create files with a recognizable content (written
// and closed), rename them (to a new name or over another of its files) and
// unlink them in DIR/w<i>, until S seconds or N operations each.  Before an
// operation a worker appends what it is about to do to JDIR/w<i>.journal and
// fdatasyncs it; after it, the outcome: acknowledged (every system call
// returned success), "maybe" (one failed with an errno --allow-errno lists)
// or unexpected (any other errno: the worker stops and the run fails).  A
// name touched by a "maybe" operation is never used again, so its state
// stays one of a known few.  JDIR must be on a local disk, outside DIR.
//
// --verify replays the journals into what DIR must hold: every name an
// acknowledged operation left, with its exact content, no name an
// acknowledged operation removed, and no name nobody created; a name under
// a "maybe" operation (or one whose outcome never reached the journal) may
// be in either state the operation allows.  Prints "acknowledged N, lost M"
// and exits 1 when M > 0.  Exit status 2: bad usage, unusable directories,
// or journals that contradict themselves.
#include <pvfs/unique_fd.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using pvfs::UniqueFd;
using Clock = std::chrono::steady_clock;

struct Settings {
    std::string dir;
    std::string journal;
    unsigned workers = 4;
    unsigned seconds = 60;
    std::uint64_t ops = 100000;
    std::uint64_t seed = 1;
    std::set<int> allowed;
    bool verify = false;
};

// Set by SIGTERM and SIGINT: a signal handler's only way to say so.
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
volatile std::sig_atomic_t stop_requested = 0;
void on_stop(int /*sig*/)
{
    stop_requested = 1;
}

std::string worker_dir(const Settings &s, unsigned w)
{
    return s.dir + "/w" + std::to_string(w);
}
std::string journal_path(const Settings &s, unsigned w)
{
    return s.journal + "/w" + std::to_string(w) + ".journal";
}

// The content of file `id` of worker `w`: a line naming both, then filler
// from a splitmix64 stream, 64 to ~4 KiB in all, so a file's bytes say whose
// they are and a swapped or truncated file does not pass.
std::string content(unsigned w, std::uint64_t id)
{
    std::string s = "pvfs-nsload w" + std::to_string(w) + " id " + std::to_string(id) + "\n";
    std::uint64_t state = (std::uint64_t{w} << 40U) ^ id;
    const auto next = [&state] {
        state += 0x9e3779b97f4a7c15ULL;
        std::uint64_t z = state;
        z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31U);
    };
    const std::size_t len = 64 + next() % 4032;
    while (s.size() < len)
        s.push_back(static_cast<char>('a' + next() % 26));
    return s;
}

// ---- the workers --------------------------------------------------------

class Worker {
public:
    Worker(const Settings &s, unsigned w) : s_(s), w_(w), rng_(s.seed * 1000003U + w) {}

    // 0: every operation acknowledged or allowed; 1: an unexpected errno;
    // 2: the journal could not be written.
    int run()
    {
        dir_ = worker_dir(s_, w_);
        journal_ = UniqueFd(
            ::open(journal_path(s_, w_).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND, 0644));
        if (!journal_.valid())
            return fatal("journal " + journal_path(s_, w_));
        if (::mkdir(dir_.c_str(), 0755) != 0)
            return fatal("mkdir " + dir_);
        const auto deadline = Clock::now() + std::chrono::seconds(s_.seconds);
        int rc = 0;
        for (op_ = 1; op_ <= s_.ops && stop_requested == 0 && Clock::now() < deadline; ++op_) {
            rc = step();
            if (rc != 0)
                break;
        }
        std::printf("worker %u: acknowledged %llu, maybe %llu%s\n", w_,
                    static_cast<unsigned long long>(acked_),
                    static_cast<unsigned long long>(maybe_), rc == 1 ? ", STOPPED" : "");
        return rc;
    }

private:
    [[nodiscard]] int fatal(const std::string &what) const
    {
        std::printf("worker %u: %s: %s\n", w_, what.c_str(), strerrordesc_np(errno));
        return 2;
    }

    bool record(const std::string &line)
    {
        const std::string l = line + "\n";
        return ::write(journal_.get(), l.data(), l.size()) == static_cast<ssize_t>(l.size()) &&
               ::fdatasync(journal_.get()) == 0;
    }

    [[nodiscard]] std::string path(const std::string &name) const { return dir_ + "/" + name; }

    // err: 0 when every call of the op returned success, else its errno.
    int outcome(int err, const std::string &what)
    {
        const std::string k = std::to_string(op_);
        if (err == 0) {
            ++acked_;
            return record("A " + k) ? 0 : fatal("journal");
        }
        if (s_.allowed.contains(err)) {
            ++maybe_;
            return record("M " + k + " " + std::to_string(err)) ? 0 : fatal("journal");
        }
        std::printf("worker %u: %s: unexpected %s\n", w_, what.c_str(), strerrorname_np(err));
        record("X " + k + " " + std::to_string(err));
        return 1;
    }

    int create()
    {
        const std::uint64_t id = next_id_++;
        const std::string name = "f" + std::to_string(id);
        if (!record("B " + std::to_string(op_) + " c " + name + " " + std::to_string(id)))
            return fatal("journal");
        const std::string data = content(w_, id);
        int err = 0;
        UniqueFd fd(::open(path(name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
        if (!fd.valid())
            err = errno;
        for (std::size_t done = 0; err == 0 && done < data.size();) {
            const ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
            if (n < 0)
                err = errno;
            else
                done += static_cast<std::size_t>(n);
        }
        if (fd.valid() && ::close(fd.release()) != 0 && err == 0)
            err = errno;
        if (err == 0)
            live_[name] = id;
        return outcome(err, "create " + name);
    }

    // A name of the worker's live files, at random.
    std::string pick()
    {
        auto it = live_.begin();
        std::advance(it, static_cast<long>(rng_() % live_.size()));
        return it->first;
    }

    int rename(bool over)
    {
        const std::string from = pick();
        std::string to = over ? pick() : "r" + std::to_string(next_id_++);
        if (to == from)
            to = "r" + std::to_string(next_id_++);
        if (!record("B " + std::to_string(op_) + " r " + from + " " + to))
            return fatal("journal");
        const std::uint64_t id = live_[from];
        live_.erase(from);
        live_.erase(to);
        const int err = ::rename(path(from).c_str(), path(to).c_str()) == 0 ? 0 : errno;
        if (err == 0)
            live_[to] = id;
        return outcome(err, "rename " + from + " " + to);
    }

    int unlink()
    {
        const std::string name = pick();
        if (!record("B " + std::to_string(op_) + " u " + name))
            return fatal("journal");
        live_.erase(name);
        return outcome(::unlink(path(name).c_str()) == 0 ? 0 : errno, "unlink " + name);
    }

    int step()
    {
        const std::uint64_t r = rng_() % 100;
        if (live_.size() < 4 || (r < 40 && live_.size() < 64))
            return create();
        if (r < 65)
            return rename(false);
        if (r < 75)
            return rename(true);
        return unlink();
    }

    const Settings &s_;
    unsigned w_;
    std::mt19937_64 rng_;
    std::string dir_;
    UniqueFd journal_;
    std::map<std::string, std::uint64_t> live_; // acknowledged names -> content id
    std::uint64_t next_id_ = 1;
    std::uint64_t op_ = 0;
    std::uint64_t acked_ = 0;
    std::uint64_t maybe_ = 0;
};

int run(const Settings &s)
{
    ::mkdir(s.journal.c_str(), 0755);
    struct sigaction sa {};
    sa.sa_handler = on_stop; // no SA_RESTART: the parent's waitpid wakes
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);
    std::fflush(stdout);
    std::vector<pid_t> pids;
    for (unsigned w = 0; w < s.workers; ++w) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            // A worker finishes the operation in hand: no EINTR for it.
            sa.sa_flags = SA_RESTART;
            ::sigaction(SIGTERM, &sa, nullptr);
            ::sigaction(SIGINT, &sa, nullptr);
            const int rc = Worker(s, w).run();
            std::fflush(stdout);
            ::_exit(rc);
        }
        if (pid < 0) {
            std::perror("pvfs-nsload: fork");
            stop_requested = 1;
            break;
        }
        pids.push_back(pid);
    }
    int worst = 0;
    for (const pid_t pid : pids) {
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0) {
            if (errno != EINTR)
                return 2;
            for (const pid_t p : pids)
                ::kill(p, SIGTERM);
        }
        const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 2;
        worst = std::max(worst, rc);
    }
    std::printf("pvfs-nsload: %u workers done%s\n", s.workers,
                worst == 0 ? "" : ", some with errors");
    return worst;
}

// ---- verification -------------------------------------------------------

// What a name may hold: nothing, or the content of an id (a prefix of it
// when a create's write or close failed).
struct State {
    std::optional<std::uint64_t> id;
    bool prefix = false;
};
// Names under one "maybe" operation and the states they may be in together.
struct Group {
    std::string what;
    std::vector<std::string> names;
    std::vector<std::map<std::string, State>> alternatives;
};

struct Model {
    std::map<std::string, std::uint64_t> certain;
    std::vector<Group> groups;
    std::set<std::string> grouped;
    std::uint64_t acked = 0;
};

struct JournalError {
    std::string what;
};

std::optional<std::uint64_t> take(Model &m, const std::string &name, bool must_exist)
{
    if (m.grouped.contains(name))
        throw JournalError{name + " used after a maybe operation"};
    const auto it = m.certain.find(name);
    if (it == m.certain.end()) {
        if (must_exist)
            throw JournalError{name + " used but not present"};
        return std::nullopt;
    }
    const std::uint64_t id = it->second;
    m.certain.erase(it);
    return id;
}

void replay_op(Model &m, const std::string &op, char result)
{
    std::istringstream in(op);
    char kind = 0;
    std::string a;
    std::string b;
    in >> kind >> a;
    const bool ok = result == 'A';
    if (ok)
        ++m.acked;
    Group g{op, {a}, {}};
    if (kind == 'c') {
        std::uint64_t id = 0;
        in >> id;
        take(m, a, false);
        if (ok)
            m.certain[a] = id;
        g.alternatives = {{{a, State{}}}, {{a, State{id, true}}}};
    } else if (kind == 'r') {
        in >> b;
        const auto from = take(m, a, true);
        const auto to = take(m, b, false);
        if (ok)
            m.certain[b] = *from;
        g.names.push_back(b);
        g.alternatives = {{{a, State{from}}, {b, State{to}}}, {{a, State{}}, {b, State{from}}}};
    } else if (kind == 'u') {
        const auto id = take(m, a, true);
        g.alternatives = {{{a, State{id}}}, {{a, State{}}}};
    } else {
        throw JournalError{"unknown operation: " + op};
    }
    if (!ok) {
        for (const auto &n : g.names)
            m.grouped.insert(n);
        m.groups.push_back(std::move(g));
    }
}

Model replay(const std::string &journal)
{
    Model m;
    std::ifstream in(journal);
    if (!in)
        throw JournalError{"cannot read " + journal};
    std::string line;
    std::string pending; // the begun operation still without an outcome
    std::string pending_k;
    while (std::getline(in, line)) {
        if (in.eof())
            break; // a torn last line: its operation was never started
        std::istringstream l(line);
        char tag = 0;
        std::string k;
        l >> tag >> k;
        if (tag == 'B') {
            if (!pending.empty())
                throw JournalError{"operation " + pending_k + " has no outcome"};
            pending_k = k;
            std::getline(l >> std::ws, pending);
        } else if (tag == 'A' || tag == 'M' || tag == 'X') {
            if (k != pending_k || pending.empty())
                throw JournalError{"outcome of " + k + " without its operation"};
            replay_op(m, pending, tag);
            pending.clear();
        } else {
            throw JournalError{"bad line: " + line};
        }
    }
    if (!pending.empty())
        replay_op(m, pending, 'M'); // begun, outcome never recorded
    return m;
}

// The state of DIR/name: absent, or its bytes.
std::optional<std::string> read_name(const std::string &p)
{
    std::ifstream in(p, std::ios::binary);
    if (!in)
        return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool state_matches(const State &want, const std::optional<std::string> &got, unsigned w)
{
    if (!want.id)
        return !got;
    if (!got)
        return false;
    const std::string c = content(w, *want.id);
    return want.prefix ? c.starts_with(*got) : *got == c;
}

int verify(const Settings &s)
{
    std::uint64_t acked = 0;
    std::uint64_t lost = 0;
    std::uint64_t maybe = 0;
    unsigned w = 0;
    for (; ::access(journal_path(s, w).c_str(), F_OK) == 0; ++w) {
        const std::string dir = worker_dir(s, w);
        Model m;
        try {
            m = replay(journal_path(s, w));
        } catch (const JournalError &e) {
            std::printf("pvfs-nsload: %s: %s\n", journal_path(s, w).c_str(), e.what.c_str());
            return 2;
        }
        acked += m.acked;
        maybe += m.groups.size();
        const auto lose = [&](const std::string &why) {
            ++lost;
            std::printf("LOST %s: %s\n", dir.c_str(), why.c_str());
        };
        for (const auto &[name, id] : m.certain) {
            const auto got = read_name(dir + '/' += name);
            if (!got)
                lose(name + " (content id " + std::to_string(id) + ") is missing");
            else if (*got != content(w, id))
                lose(name + " does not hold content id " + std::to_string(id) + " (" +
                     std::to_string(got->size()) + " bytes)");
        }
        for (const Group &g : m.groups) {
            std::map<std::string, std::optional<std::string>> got;
            for (const auto &n : g.names)
                got[n] = read_name(dir + '/' += n);
            bool any = false;
            for (const auto &alt : g.alternatives) {
                bool all = true;
                for (const auto &[n, st] : alt)
                    all = all && state_matches(st, got[n], w);
                any = any || all;
            }
            if (!any)
                lose("after maybe-operation '" + g.what + "' its names are in no allowed state");
        }
        const std::unique_ptr<DIR, int (*)(DIR *)> d(::opendir(dir.c_str()), ::closedir);
        if (!d) {
            if (!m.certain.empty() || errno != ENOENT)
                lose(std::string("cannot list: ") + strerrordesc_np(errno));
            continue;
        }
        while (const dirent *e = ::readdir(d.get())) { // NOLINT(concurrency-mt-unsafe): one thread
            const std::string n = e->d_name;
            if (n != "." && n != ".." && !m.certain.contains(n) && !m.grouped.contains(n))
                lose(n + " is present but no acknowledged operation left it");
        }
    }
    if (w == 0) {
        std::printf("pvfs-nsload: no journals in %s\n", s.journal.c_str());
        return 2;
    }
    std::printf("acknowledged %llu, lost %llu (%u workers, %llu maybe)\n",
                static_cast<unsigned long long>(acked), static_cast<unsigned long long>(lost), w,
                static_cast<unsigned long long>(maybe));
    return lost == 0 ? 0 : 1;
}

std::optional<int> errno_named(const std::string &name)
{
    for (int e = 1; e < 4096; ++e) {
        const char *n = strerrorname_np(e);
        if (n != nullptr && name == n)
            return e;
    }
    return std::nullopt;
}

int usage()
{
    std::fprintf(stderr,
                 "usage: pvfs-nsload DIR --journal JDIR [--workers N] [--seconds S] [--ops N]\n"
                 "                   [--seed S] [--allow-errno EIO,...]\n"
                 "       pvfs-nsload DIR --journal JDIR --verify\n");
    return 2;
}

} // namespace

int main(int argc, char **argv)
{
    Settings s;
    const std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        const bool has_value = i + 1 < args.size();
        try {
            if (a == "--journal" && has_value)
                s.journal = args[++i];
            else if (a == "--workers" && has_value)
                s.workers = static_cast<unsigned>(std::stoul(args[++i]));
            else if (a == "--seconds" && has_value)
                s.seconds = static_cast<unsigned>(std::stoul(args[++i]));
            else if (a == "--ops" && has_value)
                s.ops = std::stoull(args[++i]);
            else if (a == "--seed" && has_value)
                s.seed = std::stoull(args[++i]);
            else if (a == "--allow-errno" && has_value) {
                std::istringstream list(args[++i]);
                for (std::string e; std::getline(list, e, ',');) {
                    const auto n = errno_named(e);
                    if (!n) {
                        std::fprintf(stderr, "pvfs-nsload: unknown errno %s\n", e.c_str());
                        return 2;
                    }
                    s.allowed.insert(*n);
                }
            } else if (a == "--verify")
                s.verify = true;
            else if (!a.starts_with("-") && s.dir.empty())
                s.dir = a;
            else
                return usage();
        } catch (const std::exception &) {
            return usage();
        }
    }
    if (s.dir.empty() || s.journal.empty() || s.workers == 0 || s.workers > 256)
        return usage();
    return s.verify ? verify(s) : run(s);
}
