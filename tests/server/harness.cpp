// Helpers for tests with real pvfs-server processes (harness.hpp).
#include "harness.hpp"

#include "pvfs/auth.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atf-c++.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "pvfs/unique_fd.hpp"

namespace pvfs::test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::string errno_string(int error)
{
    std::array<char, 128> buf{};
    return ::strerror_r(error, buf.data(), buf.size());
}

} // namespace

void require(bool ok, std::string why)
{
    std::replace(why.begin(), why.end(), '\n', ' ');
    if (!ok)
        ATF_FAIL(why);
}

void require_rc(std::int64_t rc, std::int64_t want, const std::string &what)
{
    if (rc != want)
        ATF_FAIL(what + ": got " + std::to_string(rc) + " (" +
                 (rc < 0 ? client::error_text(rc) : std::string("bytes")) + "), expected " +
                 std::to_string(want));
}

std::uint16_t free_port()
{
    const UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid())
        throw std::runtime_error("socket failed");
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sin;
    // NOLINTBEGIN(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
    if (::bind(fd.get(), reinterpret_cast<sockaddr *>(&sin), sizeof sin) != 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr *>(&sin), &len) != 0)
        throw std::runtime_error("bind/getsockname failed");
    // NOLINTEND(cppcoreguidelines-pro-type-reinterpret-cast)
    return ntohs(sin.sin_port);
}

namespace {

ClusterFiles write_cluster_at(const fs::path &dir, const std::vector<ServerSpec> &specs,
                              const std::vector<std::string> *addresses,
                              const std::string &extra_defaults)
{
    if (addresses != nullptr && addresses->size() != specs.size())
        throw std::invalid_argument("write_cluster: one address per server");
    ClusterFiles f;
    f.dir = fs::absolute(dir);
    fs::create_directories(f.dir);
    f.key_path = (f.dir / "pvfs.key").string();
    f.config_path = (f.dir / "cluster.toml").string();
    if (const auto st = config::generate_key_file(f.key_path, true); !st.ok())
        throw std::runtime_error(st.error);
    std::string text = fmt::format("[filesystem]\nname = \"testfs\"\nid = 4242\nkey_file = "
                                   "\"{}\"\n{}\n[defaults]\n{}\n",
                                   f.key_path, filesystem_extra, extra_defaults);
    // free_port releases its socket, so the kernel may hand the same port
    // out again: each server of one config needs its own.
    std::set<std::uint16_t> taken;
    const auto own_port = [&taken] {
        for (int attempt = 0; attempt < 100; ++attempt) {
            if (const std::uint16_t p = free_port(); taken.insert(p).second)
                return p;
        }
        throw std::runtime_error("no free port after 100 tries");
    };
    for (std::size_t i = 0; i < specs.size(); ++i) {
        const ServerSpec &s = specs[i];
        std::string roles;
        if (s.metadata)
            roles += "\"metadata\"";
        if (s.data)
            roles += std::string(roles.empty() ? "" : ", ") + "\"data\"";
        const std::string address =
            addresses != nullptr ? (*addresses)[i] : fmt::format("tcp://127.0.0.1:{}", own_port());
        text += fmt::format("[[server]]\nname = \"{}\"\naddresses = [\"{}\"]\n"
                            "roles = [{}]\nstorage = \"{}\"\n{}\n\n",
                            s.name, address, roles, (f.dir / s.name).string(), s.toml);
    }
    std::ofstream(f.config_path) << text;
    config::Result r = config::load_file(f.config_path);
    if (!r.ok())
        throw std::runtime_error("test config: " + r.error);
    f.cluster = std::move(r.cluster);
    return f;
}

} // namespace

ClusterFiles write_cluster(const fs::path &dir, const std::vector<ServerSpec> &specs,
                           const std::string &extra_defaults)
{
    return write_cluster_at(dir, specs, nullptr, extra_defaults);
}

ClusterFiles write_cluster(const fs::path &dir, const std::vector<ServerSpec> &specs,
                           const std::vector<std::string> &addresses,
                           const std::string &extra_defaults)
{
    return write_cluster_at(dir, specs, &addresses, extra_defaults);
}

ServerProcess::ServerProcess(const std::string &binary, const ClusterFiles &files,
                             const std::string &name)
    : ServerProcess(binary, files, name, {})
{
}

ServerProcess::ServerProcess(const std::string &binary, const ClusterFiles &files,
                             const std::string &name, const std::vector<std::string> &wrapper)
    : log_((files.dir / (name + ".log")).string())
{
    const std::string pid_file = (files.dir / (name + ".pid")).string();
    fs::remove(pid_file);
    pid_ = ::fork(); // NOLINT(cppcoreguidelines-prefer-member-initializer): after removing a stale
                     // pid file
    if (pid_ < 0)
        throw std::runtime_error("fork failed");
    if (pid_ == 0) {
        // Dies with the test, and never holds the test's output pipes.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        const int log_fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (log_fd >= 0) {
            ::dup2(log_fd, STDOUT_FILENO);
            ::dup2(log_fd, STDERR_FILENO);
        }
        const std::string config = files.config_path;
        std::vector<std::string> args = wrapper;
        for (const std::string &a :
             {binary, std::string("-c"), config, std::string("--name"), name, std::string("--log"),
              log_, std::string("--pid-file"), pid_file})
            args.push_back(a);
        std::vector<char *> argv;
        argv.reserve(args.size() + 1);
        for (std::string &a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        if (wrapper.empty())
            ::execv(binary.c_str(), argv.data());
        else
            ::execvp(args.front().c_str(), argv.data());
        ::_exit(127);
    }
    // Ready once the pid file exists (written after it listens).
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!fs::exists(pid_file)) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            throw std::runtime_error("pvfs-server " + name + " exited at start: " + log_text());
        }
        if (std::chrono::steady_clock::now() > deadline)
            throw std::runtime_error("pvfs-server " + name + " not ready within 20 s");
        std::this_thread::sleep_for(10ms);
    }
}

ServerProcess::~ServerProcess()
{
    if (pid_ > 0)
        stop(SIGKILL);
}

int ServerProcess::stop(int signal)
{
    if (pid_ <= 0)
        return -1;
    ::kill(pid_, signal);
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, &status, 0);
            break;
        }
        std::this_thread::sleep_for(10ms);
    }
    pid_ = -1;
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

std::string ServerProcess::log_text() const
{
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// NOLINTBEGIN(concurrency-mt-unsafe): set before the test starts threads
ScopedEnv::ScopedEnv(const char *name, const std::string &value) : name_(name)
{
    ::setenv(name_, value.c_str(), 1);
}

ScopedEnv::~ScopedEnv()
{
    ::unsetenv(name_);
}
// NOLINTEND(concurrency-mt-unsafe)

std::vector<ServerSpec> servers(unsigned metadata, unsigned data)
{
    std::vector<ServerSpec> specs;
    for (unsigned i = 0; i < metadata; ++i)
        specs.push_back({"meta" + std::to_string(i), true, false});
    for (unsigned i = 0; i < data; ++i)
        specs.push_back({"data" + std::to_string(i), false, true});
    return specs;
}

client::Options fresh_attrs()
{
    client::Options o;
    o.attr_timeout = std::chrono::milliseconds(0);
    return o;
}

Cluster::Cluster(std::vector<ServerSpec> specs, const std::string &extra_defaults,
                 client::Options client)
    : files(write_cluster(fs::current_path() / "cluster", specs, extra_defaults)),
      specs_(std::move(specs)), client_(std::move(client))
{
    start_all();
}

Cluster::Cluster(std::vector<ServerSpec> specs, const std::vector<std::string> &addresses,
                 const std::string &extra_defaults, std::vector<std::vector<std::string>> wrappers,
                 client::Options client)
    : files(write_cluster(fs::current_path() / "cluster", specs, addresses, extra_defaults)),
      specs_(std::move(specs)), wrappers_(std::move(wrappers)), client_(std::move(client))
{
    if (!wrappers_.empty() && wrappers_.size() != specs_.size())
        throw std::invalid_argument("Cluster: one wrapper per server");
    start_all();
}

void Cluster::start(const std::string &name)
{
    const auto spec = std::find_if(specs_.begin(), specs_.end(),
                                   [&](const ServerSpec &s) { return s.name == name; });
    if (spec == specs_.end())
        throw std::invalid_argument("Cluster: no server " + name);
    const auto i = static_cast<std::size_t>(spec - specs_.begin());
    servers.erase(name);
    servers.emplace(name, std::make_unique<ServerProcess>(
                              PVFS_SERVER_BINARY, files, name,
                              wrappers_.empty() ? std::vector<std::string>{} : wrappers_[i]));
}

void Cluster::start_all()
{
    for (const ServerSpec &s : specs_)
        start(s.name);
}

std::unique_ptr<client::Client> Cluster::connect(std::uint32_t uid, std::uint32_t gid) const
{
    client::Options o = client_;
    o.credentials.uid = uid;
    o.credentials.gid = gid;
    return connect(std::move(o));
}

std::unique_ptr<client::Client> Cluster::connect(client::Options o) const
{
    o.target = files.config_path;
    o.use_process_credentials = false;
    std::string error;
    auto c = client::Client::connect(o, error);
    require(c != nullptr, "connect: " + error);
    return c;
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed)
{
    std::vector<std::byte> v(n);
    std::uint32_t x = seed * 2654435761U + 1U;
    for (std::size_t i = 0; i < n; ++i) {
        x = x * 1664525U + 1013904223U;
        v[i] = static_cast<std::byte>(x >> 24U);
    }
    return v;
}

namespace {

bmi::Options client_options()
{
    bmi::Options o;
    o.role = bmi::Role::client;
    return o;
}

proto::Key load_key(const std::string &path)
{
    std::string error;
    std::optional<proto::Key> key = proto::Key::load(path, error);
    if (!key)
        throw std::runtime_error(error);
    return std::move(*key);
}

std::int64_t realtime_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

} // namespace

RawClient::RawClient(const std::string &server_url, const std::string &key_path, bool encrypt)
    : bmi_(client_options()), ctx_(bmi_.open_context()), key_(load_key(key_path)),
      session_(std::random_device{}() | 1ULL << 40U), response_buffer_(std::size_t{2} << 20U)
{
    key_.set_encrypt(encrypt);
    // Its connection proves its key, as libpvfs's do (servers require it).
    auto authenticator = std::make_shared<auth::Authenticator>();
    const std::string credential = authenticator->add_client_key(key_);
    bmi_.set_authenticator(std::move(authenticator));
    int rc = 0;
    server_ = bmi_.addr_lookup(server_url, credential, &rc);
    if (server_ == bmi::no_addr)
        throw std::runtime_error("cannot look up " + server_url);
}

namespace {

const config::Server &server_named(const ClusterFiles &files, const std::string &name)
{
    const config::Server *s = files.cluster.find(name);
    if (s == nullptr)
        throw std::runtime_error("no server " + name + " in the config");
    return *s;
}

} // namespace

RawClient::RawClient(const ClusterFiles &files, const std::string &name)
    : RawClient(server_named(files, name).addresses.at(0), files.key_path, files.cluster.encrypt)
{
    to = proto::Destination{
        files.cluster.fs_id,
        static_cast<std::uint32_t>(&server_named(files, name) - files.cluster.servers.data())};
    // Kept apart from `to`: a test that unbinds the client (to.reset())
    // still signs its capabilities for this file system.  (A delegating
    // constructor cannot initialise members.)
    cap_fs_id = files.cluster.fs_id; // NOLINT(cppcoreguidelines-prefer-member-initializer)
}

proto::Request RawClient::make_request(proto::RequestBody body)
{
    proto::Request r;
    r.request_id = ++request_id_;
    r.session = session_;
    r.seq = ++seq_;
    r.time_ns = realtime_ns();
    r.cred = cred;
    r.once = once;
    r.to = to;
    r.wants_capability = wants_capability;
    r.body = std::move(body);
    if (const std::uint32_t rights = proto::capability_needed(r.op());
        rights != 0 && capabilities) {
        proto::Capability c;
        c.handle = std::visit(
            [](const auto &b) -> Handle {
                if constexpr (requires { b.handle; })
                    return b.handle;
                else
                    return no_handle;
            },
            r.body);
        c.rights = rights;
        // A client bound to a server names its file system there too.
        c.fs_id = cap_fs_id != 0 || !to ? cap_fs_id : to->fs_id;
        if (const std::optional<std::uint32_t> id = key_.id()) {
            c.keyed = true;
            c.key_id = *id;
        }
        c.expires_ns = realtime_ns() + std::int64_t{300} * 1'000'000'000;
        proto::sign_capability(proto::capability_key(key_), c);
        if (cap_hook)
            cap_hook(c);
        if (c.handle != no_handle)
            r.cap = c;
    }
    return r;
}

std::vector<std::byte> RawClient::encode(proto::RequestBody body)
{
    std::vector<std::byte> out;
    proto::encode(make_request(std::move(body)), key_, out);
    return out;
}

// NOLINTBEGIN(misc-no-recursion): session_key() calls call() with a status
// request, which has no bulk data and so never asks for a session key.
std::optional<proto::SessionKey> RawClient::session_key()
{
    if (const std::optional<bmi::Identity> id = bmi_.peer_identity(server_))
        return id->session_key;
    static_cast<void>(call(proto::StatusRequest{}));
    if (const std::optional<bmi::Identity> id = bmi_.peer_identity(server_))
        return id->session_key;
    return std::nullopt;
}

namespace {

// The tags of a stream cut every `chunk` bytes, as libpvfs makes them.
std::vector<proto::ChunkMac> tags_of(const proto::SessionKey &key,
                                     const proto::ChunkBinding &binding,
                                     std::span<const std::byte> stream, std::uint32_t chunk)
{
    std::vector<proto::ChunkMac> tags;
    for (std::size_t off = 0; off < stream.size(); off += chunk) {
        const auto piece = stream.subspan(off, std::min<std::size_t>(chunk, stream.size() - off));
        tags.push_back(proto::chunk_mac(key, binding, tags.size(), std::span(&piece, 1)));
    }
    return tags;
}

} // namespace

Call RawClient::call(proto::RequestBody body, int timeout_ms, std::span<const std::byte> send_data,
                     std::span<std::byte> receive_data, std::uint32_t chunk)
{
    Call result;
    proto::Request req = make_request(std::move(body));
    // Chunk MACs, as libpvfs makes them (see chunk_macs).
    std::vector<std::byte> altered;
    std::vector<proto::ChunkMac> inline_tags; // a write's, sent after its chunks
    std::optional<proto::SessionKey> mac_key;
    proto::ChunkBinding binding;
    auto *read_body = std::get_if<proto::ReadRequest>(&req.body);
    auto *write_body = std::get_if<proto::WriteRequest>(&req.body);
    const bool bulk = chunk > 0 && (read_body != nullptr || write_body != nullptr) &&
                      (!send_data.empty() || !receive_data.empty());
    if (chunk_macs && bulk) {
        mac_key = session_key();
        if (!mac_key) {
            result.error = "no session key: the connection was not authenticated";
            return result;
        }
        binding = proto::ChunkBinding{write_body != nullptr,
                                      to ? to->fs_id : 0,
                                      to ? to->server_index : 0,
                                      read_body != nullptr ? read_body->handle : write_body->handle,
                                      req.session,
                                      req.seq,
                                      req.request_id,
                                      chunk};
        proto::ChunkBinding tagged = binding;
        if (bind_hook)
            bind_hook(tagged);
        proto::ChunkMacs macs{proto::session_key_check(*mac_key), {}};
        macs.with_chunks = tags_with_chunks;
        if (write_body != nullptr) {
            macs.tags = tags_of(*mac_key, tagged, send_data, chunk);
            if (tags_hook)
                tags_hook(macs.tags);
            if (tags_with_chunks)
                inline_tags = std::exchange(macs.tags, {});
            write_body->macs = std::move(macs);
        } else {
            read_body->macs = std::move(macs);
        }
        if (data_hook && !send_data.empty()) {
            altered.assign(send_data.begin(), send_data.end());
            data_hook(altered);
            send_data = altered;
        }
    }
    std::vector<std::byte> bytes;
    proto::encode(req, key_, bytes);
    const bmi::Tag tag = next_tag_++;
    const bmi::Tag dtag = proto::data_tag(tag);
    constexpr std::size_t not_a_chunk = ~std::size_t{0};
    std::vector<std::pair<bmi::OpId, std::size_t>> pending; // and which chunk
    bmi::OpId response_op = bmi::no_op;
    std::size_t response_size = 0;
    bool response_done = false;

    const bmi::Post rp = bmi_.post_recv(server_, response_buffer_.data(), response_buffer_.size(),
                                        tag, nullptr, ctx_);
    if (!rp.ok()) {
        result.error = "post_recv: " + errno_string(-rp.error);
        result.transport_error = rp.error;
        return result;
    }
    if (rp.completed) {
        response_done = true;
        response_size = rp.actual_size;
    } else {
        response_op = rp.op;
    }
    const bmi::Post sp =
        bmi_.post_sendunexpected(server_, bytes.data(), bytes.size(), tag, nullptr, ctx_);
    if (!sp.ok()) {
        result.error = "post_sendunexpected: " + errno_string(-sp.error);
        result.transport_error = sp.error;
        if (response_op != bmi::no_op)
            bmi_.cancel(response_op);
        return result;
    }
    if (!sp.completed)
        pending.emplace_back(sp.op, not_a_chunk);
    // Bulk data: chunk i of the stream on the data tag, in order; with the
    // tags inline, each chunk message is its bytes and then its tag.
    const bool inline_mode = mac_key && tags_with_chunks;
    const std::size_t total = std::max(send_data.size(), receive_data.size());
    std::vector<std::vector<std::byte>> wire; // inline mode: each chunk message
    std::vector<std::size_t> arrived;         // inline mode: each read chunk's size
    for (std::size_t off = 0, i = 0; chunk > 0 && off < total; off += chunk, ++i) {
        const std::size_t n = std::min<std::size_t>(chunk, total - off);
        std::span<const std::byte> out = send_data.empty() ? send_data : send_data.subspan(off, n);
        std::span<std::byte> in =
            receive_data.empty() ? receive_data : receive_data.subspan(off, n);
        if (inline_mode) {
            auto &m = wire.emplace_back(n + proto::chunk_mac_size);
            if (!send_data.empty()) {
                std::ranges::copy(out, m.begin());
                if (i < inline_tags.size())
                    std::ranges::copy(inline_tags[i], m.begin() + static_cast<std::ptrdiff_t>(n));
                else
                    m.resize(n);
                if (chunk_message_hook)
                    chunk_message_hook(i, m);
                out = m;
            } else {
                in = m;
            }
            arrived.push_back(0);
        }
        const bmi::Post p =
            !send_data.empty()
                ? bmi_.post_send(server_, out.data(), out.size(), dtag, nullptr, ctx_)
                : bmi_.post_recv(server_, in.data(), in.size(), dtag, nullptr, ctx_);
        if (!p.ok()) {
            result.error = "bulk post: " + errno_string(-p.error);
            break;
        }
        if (!p.completed)
            pending.emplace_back(p.op, i);
        else if (inline_mode)
            arrived.back() = p.actual_size;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    std::vector<bmi::Completion> done;
    while (!response_done && std::chrono::steady_clock::now() < deadline) {
        bmi::Completion c;
        if (bmi_.test(response_op, c, 10)) {
            response_done = true;
            response_op = bmi::no_op;
            if (c.error != 0) {
                result.error = "response: " + errno_string(-c.error);
                result.transport_error = c.error;
                break;
            }
            response_size = c.actual_size;
        }
    }
    std::optional<proto::DecodeResult> decoded;
    if (response_done && result.error.empty())
        decoded =
            proto::decode(std::span(response_buffer_.data(), response_size), key_, result.response);
    // The bulk operations end with the response (or are cancelled); a
    // refused request's data is not taken, so its sends are not waited for.
    const bool accepted = decoded && *decoded && result.response.status == 0;
    for (const auto &[op, index] : pending) {
        bmi::Completion c;
        if (!bmi_.test(op, c, accepted ? 5000 : 0)) {
            bmi_.cancel(op);
            static_cast<void>(bmi_.test(op, c, 5000));
        } else if (index != not_a_chunk && index < arrived.size() && c.error == 0) {
            arrived[index] = c.actual_size;
        }
    }
    if (response_op != bmi::no_op) {
        bmi_.cancel(response_op);
        bmi::Completion c;
        static_cast<void>(bmi_.test(response_op, c, 5000));
    }
    if (!response_done || !result.error.empty())
        return result;
    if (!*decoded) {
        result.error = "decode: " + decoded->message();
        return result;
    }
    if (!proto::answers(result.response, req)) {
        result.error = "the response does not answer the request";
        return result;
    }
    result.answered = true;
    if (const auto *r = std::get_if<proto::ReadResponse>(&result.response.body);
        r != nullptr && mac_key && read_body != nullptr && result.response.status == 0) {
        std::vector<proto::ChunkMac> got;
        if (inline_mode) {
            // Each chunk message: the chunk's bytes, then its tag.
            for (std::size_t i = 0; i < wire.size(); ++i) {
                const std::size_t n = wire[i].size() - proto::chunk_mac_size;
                if (arrived[i] != wire[i].size()) {
                    result.error = "read chunk " + std::to_string(i) + " carried " +
                                   std::to_string(arrived[i]) + " bytes, expected " +
                                   std::to_string(wire[i].size());
                    return result;
                }
                std::copy_n(wire[i].begin(), n,
                            receive_data.begin() + static_cast<std::ptrdiff_t>(i * chunk));
                got.emplace_back();
                std::copy_n(wire[i].begin() + static_cast<std::ptrdiff_t>(n), proto::chunk_mac_size,
                            got.back().begin());
            }
            if (r->macs)
                result.error = "tags in the response of a read whose tags come with its chunks";
        } else if (r->macs) {
            got = *r->macs;
        }
        const std::vector<proto::ChunkMac> want = tags_of(*mac_key, binding, receive_data, chunk);
        bool ok = got.size() == want.size();
        for (std::size_t i = 0; ok && i < want.size(); ++i)
            ok = proto::same_mac(want[i], got[i]);
        if (!ok && result.error.empty())
            result.error = "the read's chunk MACs do not match the bytes that came";
    }
    return result;
}

// NOLINTEND(misc-no-recursion)

std::optional<std::vector<std::byte>> RawClient::send_raw(std::span<const std::byte> bytes,
                                                          int timeout_ms)
{
    const bmi::Tag tag = next_tag_++;
    const bmi::Post rp = bmi_.post_recv(server_, response_buffer_.data(), response_buffer_.size(),
                                        tag, nullptr, ctx_);
    if (!rp.ok())
        return std::nullopt;
    const bmi::Post sp =
        bmi_.post_sendunexpected(server_, bytes.data(), bytes.size(), tag, nullptr, ctx_);
    if (!sp.ok())
        throw std::runtime_error("post_sendunexpected failed");
    if (!sp.completed) {
        bmi::Completion c;
        static_cast<void>(bmi_.test(sp.op, c, 5000));
    }
    std::size_t size = rp.actual_size;
    bool got = rp.completed;
    if (!got) {
        bmi::Completion c;
        if (bmi_.test(rp.op, c, timeout_ms) && c.error == 0) {
            got = true;
            size = c.actual_size;
        } else {
            bmi_.cancel(rp.op);
            static_cast<void>(bmi_.test(rp.op, c, 5000));
        }
    }
    if (!got)
        return std::nullopt;
    return std::vector<std::byte>(response_buffer_.begin(),
                                  response_buffer_.begin() + static_cast<std::ptrdiff_t>(size));
}

} // namespace pvfs::test
