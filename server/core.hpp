// What the parts of pvfs-server share: where a request came from, how a
// part is told that one of its BMI operations finished, and the door back to
// the event loop (sending responses, posting bulk transfers).  Internal to
// server/: the services include it, nothing outside does.
#ifndef PVFS_SERVER_CORE_HPP
#define PVFS_SERVER_CORE_HPP

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "bmi/bmi.hpp"
#include "pvfs/proto.hpp"

namespace pvfs::server {

// The tag of a request's bulk data: a bmi::Tag.
using proto::data_tag;
static_assert(std::is_same_v<bmi::Tag, decltype(data_tag(0))>);

struct Client; // key_table.hpp

// Who asked, and what a response must echo.
struct Origin {
    bmi::Addr peer = bmi::no_addr;
    bmi::Tag tag = 0;
    std::uint64_t request_id = 0;
    std::uint64_t session = 0;
    std::uint64_t seq = 0;
    proto::Op op = proto::Op::status;
    // The request's flag request_knows_orphaned: its reply may say a file
    // was orphaned.
    bool knows_orphaned = false;
    // The key the request was verified with, which MACs the response too;
    // null: the cluster key.
    std::shared_ptr<const Client> client;
    // When it arrived (ServerMetrics::now_ns), for its latency; 0 when
    // the server keeps no metrics.
    std::uint64_t arrived_ns = 0;
    // The request's flag request_wants_capability: a create's reply may
    // carry a capability for the file it made.
    bool wants_capability = false;
};

// Anything that posts BMI operations on the server's context: the
// completion's user_ptr points at one of these.
class Waiter {
public:
    Waiter() = default;
    Waiter(const Waiter &) = delete;
    Waiter &operator=(const Waiter &) = delete;
    Waiter(Waiter &&) = delete;
    Waiter &operator=(Waiter &&) = delete;
    virtual ~Waiter() = default;
    virtual void on_bmi(const bmi::Completion &done) = 0;
};

// The event loop, as the services see it.
class Loop {
public:
    Loop() = default;
    Loop(const Loop &) = delete;
    Loop &operator=(const Loop &) = delete;
    Loop(Loop &&) = delete;
    Loop &operator=(Loop &&) = delete;

    [[nodiscard]] virtual bmi::Bmi &bmi() noexcept = 0;
    [[nodiscard]] virtual bmi::ContextId context() const noexcept = 0;

    // Sends `body` (status 0) or, with a non-zero positive errno, an error
    // response of the origin's op.  Never fails from the caller's view: a
    // response that cannot be sent is logged (the client's deadline ends it).
    virtual void respond(const Origin &origin, proto::ResponseBody body) = 0;
    virtual void respond_error(const Origin &origin, int error) = 0;
    // Logs why a request's bulk data was refused (a chunk whose MAC fails,
    // a request without MACs), with the peer's key name, at most once a
    // minute per peer: a forger must not be able to flood the log.
    virtual void log_bulk_refusal(const Origin &origin, const std::string &why) = 0;
    virtual ~Loop() = default;
};

// strerror(3) of a positive errno, thread-safe.
[[nodiscard]] inline std::string errno_text(int error)
{
    std::array<char, 128> buf{};
    return ::strerror_r(error, buf.data(), buf.size());
}

} // namespace pvfs::server

#endif // PVFS_SERVER_CORE_HPP
