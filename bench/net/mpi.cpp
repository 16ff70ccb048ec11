// net-mpi: the MPICH baseline of the network benchmark (bench/net/DRIVERS.md).
//
// Started by the runner under mpiexec.mpich on 127.0.0.1 only: -n 2 for bw
// and lat (rank 0 sends and times, rank 1 receives or echoes), -n clients+1
// for m2o (rank 0 serves, ranks 1..clients are the clients).  Non-blocking
// point-to-point on MPI_COMM_WORLD: MPI_Isend, MPI_Irecv, MPI_Waitall and
// MPI_Waitsome.  Only rank 0 prints result lines; the other ranks report to
// it in messages.  The runner makes MPICH use TCP over lo (DRIVERS.md).
#include "driver.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace {

enum tag : int {
    tag_data = 1,
    tag_ack = 2,
    tag_ping = 3,
    tag_pong = 4,
    tag_go = 5,
    tag_req = 6,
    tag_reply = 7
};

// Every MPI call is checked (MPI_COMM_WORLD returns errors instead of
// aborting); a failure prints what failed and aborts the whole job.
void check(int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return;
    std::array<char, MPI_MAX_ERROR_STRING> text{};
    int len = 0;
    MPI_Error_string(rc, text.data(), &len);
    bench::error(std::string(what) + ": " +
                 std::string(text.data(), static_cast<std::size_t>(len)));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

[[noreturn]] void abort_job(const std::string &what)
{
    bench::error(what);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::terminate(); // MPI_Abort does not return
}

int count_of(std::size_t size)
{
    if (size > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        abort_job("message of " + std::to_string(size) + " bytes is too large for MPI");
    return static_cast<int>(size);
}

std::vector<std::byte> filled(std::size_t size, std::byte pattern)
{
    std::vector<std::byte> buf(size, pattern); // touched now, not while timing
    return buf;
}

// Keeps `window` operations in flight until n have been posted, then waits
// for the rest.  post(slot, request) starts operation number `i` in a slot.
template <typename Post> void windowed(std::uint64_t n, std::size_t window, Post post)
{
    std::vector<MPI_Request> reqs(window, MPI_REQUEST_NULL);
    std::vector<int> done(window);
    std::uint64_t posted = 0;
    for (std::size_t slot = 0; slot < window && posted < n; ++slot, ++posted)
        post(slot, reqs[slot]);
    const int slots = static_cast<int>(window);
    while (posted < n) {
        int count = 0;
        check(MPI_Waitsome(slots, reqs.data(), &count, done.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitsome");
        if (count == MPI_UNDEFINED)
            abort_job("MPI_Waitsome: nothing in flight");
        for (const int slot : std::span(done).first(static_cast<std::size_t>(count))) {
            if (posted == n)
                break;
            post(static_cast<std::size_t>(slot), reqs[static_cast<std::size_t>(slot)]);
            ++posted;
        }
    }
    check(MPI_Waitall(slots, reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

// ---- bw: rank 0 sends, rank 1 receives -------------------------------------

// Per point: a window of untimed messages and an ack (both ranks in step),
// then the timed stream and an ack that carries the receiver's CPU time.
void bw_sender(const bench::options &o)
{
    const std::vector<std::byte> buf = filled(o.largest(), std::byte{0x5a});
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            const std::size_t window = o.window_for(size);
            const std::uint64_t msgs = o.messages_for(size);
            const int count = count_of(size);
            const auto send = [&](std::size_t /*slot*/, MPI_Request &req) {
                check(MPI_Isend(buf.data(), count, MPI_BYTE, 1, tag_data, MPI_COMM_WORLD, &req),
                      "MPI_Isend");
            };
            double peer_cpu = 0;
            windowed(std::min<std::uint64_t>(window, msgs), window, send);
            check(MPI_Recv(&peer_cpu, 1, MPI_DOUBLE, 1, tag_ack, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv ack");

            const double t0 = bench::now();
            const double cpu0 = bench::cpu_seconds();
            windowed(msgs, window, send);
            check(MPI_Recv(&peer_cpu, 1, MPI_DOUBLE, 1, tag_ack, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv ack");
            const double seconds = bench::now() - t0;
            bench::report_bw(size, rep, window, msgs, seconds,
                             bench::cpu_seconds() - cpu0 + peer_cpu);
        }
    }
}

void bw_receiver(const bench::options &o)
{
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            const std::size_t window = o.window_for(size);
            const std::uint64_t msgs = o.messages_for(size);
            const int count = count_of(size);
            // The posted receives: one buffer per message in flight.
            std::vector<std::vector<std::byte>> bufs(window, filled(size, std::byte{0xa5}));
            const auto recv = [&](std::size_t slot, MPI_Request &req) {
                check(MPI_Irecv(bufs[slot].data(), count, MPI_BYTE, 0, tag_data, MPI_COMM_WORLD,
                                &req),
                      "MPI_Irecv");
            };
            double cpu = 0;
            windowed(std::min<std::uint64_t>(window, msgs), window, recv);
            check(MPI_Send(&cpu, 1, MPI_DOUBLE, 0, tag_ack, MPI_COMM_WORLD), "MPI_Send ack");
            const double cpu0 = bench::cpu_seconds();
            windowed(msgs, window, recv);
            cpu = bench::cpu_seconds() - cpu0;
            check(MPI_Send(&cpu, 1, MPI_DOUBLE, 0, tag_ack, MPI_COMM_WORLD), "MPI_Send ack");
        }
    }
}

// ---- lat: rank 0 pings, rank 1 echoes --------------------------------------

void lat_pinger(const bench::options &o)
{
    const std::vector<std::byte> ping = filled(o.largest(), std::byte{0x5a});
    std::vector<std::byte> pong = filled(o.largest(), std::byte{0xa5});
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            const int count = count_of(size);
            double t0 = bench::now();
            for (unsigned i = 0; i < o.warmup + o.iters; ++i) {
                if (i == o.warmup)
                    t0 = bench::now();
                std::array<MPI_Request, 2> reqs{};
                check(MPI_Irecv(pong.data(), count, MPI_BYTE, 1, tag_pong, MPI_COMM_WORLD,
                                reqs.data()),
                      "MPI_Irecv");
                check(
                    MPI_Isend(ping.data(), count, MPI_BYTE, 1, tag_ping, MPI_COMM_WORLD, &reqs[1]),
                    "MPI_Isend");
                check(MPI_Waitall(2, reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
            }
            bench::report_lat(size, rep, o.iters, bench::now() - t0);
        }
    }
}

void lat_echo(const bench::options &o)
{
    std::vector<std::byte> buf = filled(o.largest(), std::byte{0xa5});
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t size : o.sizes) {
            const int count = count_of(size);
            for (unsigned i = 0; i < o.warmup + o.iters; ++i) {
                MPI_Request req = MPI_REQUEST_NULL;
                check(MPI_Irecv(buf.data(), count, MPI_BYTE, 0, tag_ping, MPI_COMM_WORLD, &req),
                      "MPI_Irecv");
                check(MPI_Waitall(1, &req, MPI_STATUSES_IGNORE), "MPI_Waitall");
                check(MPI_Isend(buf.data(), count, MPI_BYTE, 0, tag_pong, MPI_COMM_WORLD, &req),
                      "MPI_Isend");
                check(MPI_Waitall(1, &req, MPI_STATUSES_IGNORE), "MPI_Waitall");
            }
        }
    }
}

// ---- m2o: rank 0 serves ranks 1..clients -----------------------------------

// A request is o.request bytes starting with this header; a client ends
// each point with a "bye" request that carries its count and time.
enum : std::uint32_t { op_request = 1, op_bye = 2 };
struct request_header {
    std::uint32_t op;
    std::uint32_t pad;
    std::uint64_t iters;
    std::uint64_t nanoseconds;
};

// Before each point the server sends every client the point's sequence
// number ("go"); the clients start their clocks when it arrives.
void m2o_server(const bench::options &o)
{
    const std::size_t n = o.clients;
    const int req_count = count_of(o.request);
    const std::vector<std::byte> reply = filled(o.largest(), std::byte{0x5a});
    std::vector<std::vector<std::byte>> requests(n, filled(o.request, std::byte{0}));
    // reqs[k]: the posted receive of client k's request; reqs[n + k]: the
    // go or reply being sent to it.
    std::vector<MPI_Request> reqs(2 * n, MPI_REQUEST_NULL);
    std::vector<int> done(2 * n);
    std::vector<request_header> results(n);
    const auto post_recv = [&](std::size_t k) {
        check(MPI_Irecv(requests[k].data(), req_count, MPI_BYTE, static_cast<int>(k + 1), tag_req,
                        MPI_COMM_WORLD, &reqs[k]),
              "MPI_Irecv");
    };
    std::uint32_t seq = 0;
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t reply_size : o.replies) {
            const int reply_count = count_of(reply_size);
            for (std::size_t k = 0; k < n; ++k) {
                post_recv(k);
                check(MPI_Isend(&seq, 1, MPI_UINT32_T, static_cast<int>(k + 1), tag_go,
                                MPI_COMM_WORLD, &reqs[n + k]),
                      "MPI_Isend go");
            }
            std::size_t byes = 0;
            while (byes < n) {
                int count = 0;
                check(MPI_Waitsome(static_cast<int>(2 * n), reqs.data(), &count, done.data(),
                                   MPI_STATUSES_IGNORE),
                      "MPI_Waitsome");
                if (count == MPI_UNDEFINED)
                    abort_job("MPI_Waitsome: nothing in flight");
                for (const int index : std::span(done).first(static_cast<std::size_t>(count))) {
                    const auto k = static_cast<std::size_t>(index);
                    if (k >= n)
                        continue; // a go or a reply has gone out
                    request_header h{};
                    std::memcpy(&h, requests[k].data(), sizeof h);
                    if (h.op == op_bye) {
                        results[k] = h;
                        ++byes;
                        continue;
                    }
                    if (h.op != op_request)
                        abort_job("client " + std::to_string(k) + ": unexpected request");
                    // The previous reply to k has been received by k (it
                    // sent this request after), so this wait is short.
                    check(MPI_Wait(&reqs[n + k], MPI_STATUS_IGNORE), "MPI_Wait");
                    check(MPI_Isend(reply.data(), reply_count, MPI_BYTE, static_cast<int>(k + 1),
                                    tag_reply, MPI_COMM_WORLD, &reqs[n + k]),
                          "MPI_Isend reply");
                    post_recv(k);
                }
            }
            check(MPI_Waitall(static_cast<int>(2 * n), reqs.data(), MPI_STATUSES_IGNORE),
                  "MPI_Waitall");
            for (std::size_t k = 0; k < n; ++k)
                bench::report_m2o(o.clients, o.request, reply_size, rep, static_cast<unsigned>(k),
                                  results[k].iters,
                                  static_cast<double>(results[k].nanoseconds) * 1e-9);
            ++seq;
        }
    }
}

void m2o_client(const bench::options &o)
{
    std::vector<std::byte> request = filled(o.request, std::byte{0x5a});
    std::vector<std::byte> reply = filled(o.largest(), std::byte{0xa5});
    const int req_count = count_of(o.request);
    const auto put_header = [&](const request_header &h) {
        std::memcpy(request.data(), &h, sizeof h);
    };
    std::uint32_t seq = 0;
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (const std::size_t reply_size : o.replies) {
            const int reply_count = count_of(reply_size);
            std::uint32_t go = 0;
            check(MPI_Recv(&go, 1, MPI_UINT32_T, 0, tag_go, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv go");
            if (go != seq)
                abort_job("out of step: go " + std::to_string(go) + ", expected " +
                          std::to_string(seq));
            put_header({op_request, 0, 0, 0});
            const double start = bench::now();
            double elapsed = 0;
            std::uint64_t iters = 0;
            do {
                std::array<MPI_Request, 2> reqs{};
                check(MPI_Irecv(reply.data(), reply_count, MPI_BYTE, 0, tag_reply, MPI_COMM_WORLD,
                                reqs.data()),
                      "MPI_Irecv");
                check(MPI_Isend(request.data(), req_count, MPI_BYTE, 0, tag_req, MPI_COMM_WORLD,
                                &reqs[1]),
                      "MPI_Isend");
                check(MPI_Waitall(2, reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
                ++iters;
                elapsed = bench::now() - start;
            } while (elapsed < o.duration);
            put_header({op_bye, 0, iters, static_cast<std::uint64_t>(elapsed * 1e9)});
            check(MPI_Send(request.data(), req_count, MPI_BYTE, 0, tag_req, MPI_COMM_WORLD),
                  "MPI_Send bye");
            ++seq;
        }
    }
}

void run(const bench::options &o, int rank, int size)
{
    const int want = o.which == bench::pattern::m2o ? static_cast<int>(o.clients) + 1 : 2;
    if (size != want) {
        if (rank == 0)
            bench::error("needs " + std::to_string(want) + " ranks (mpiexec -n " +
                         std::to_string(want) + "), has " + std::to_string(size));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    switch (o.which) {
    case bench::pattern::bw:
        if (rank == 0)
            bw_sender(o);
        else
            bw_receiver(o);
        break;
    case bench::pattern::lat:
        if (rank == 0)
            lat_pinger(o);
        else
            lat_echo(o);
        break;
    case bench::pattern::m2o:
        if (rank == 0)
            m2o_server(o);
        else
            m2o_client(o);
        break;
    }
}

} // namespace

int main(int argc, char **argv)
{
    bench::options o;
    if (const int status = bench::parse(argc, argv, "net-mpi", o); status >= 0)
        return status;
    bench::arm_timeout(o.timeout);
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
        bench::error("MPI_Init failed");
        return 1;
    }
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    int rank = 0;
    int size = 0;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    try {
        run(o, rank, size);
    } catch (const std::exception &e) {
        abort_job(e.what());
    }
    // No message is in flight when MPI_Finalize closes the connections
    // (mpich_ucx_close.cpp).
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    check(MPI_Finalize(), "MPI_Finalize");
    return 0;
}
