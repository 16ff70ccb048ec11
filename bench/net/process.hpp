// Forked peers of the network benchmark drivers (bench/net/DRIVERS.md,
// "Processes and addresses"): children die with their parent and a parent
// never leaves a child behind, whatever path it takes out.
#pragma once

#include "driver.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace bench {

// A fork()ed child: killed and reaped if still running when destroyed, so
// that no error path leaves a peer behind.
class child_process {
public:
    explicit child_process(pid_t pid) noexcept : pid_(pid) {}
    child_process(const child_process &) = delete;
    child_process &operator=(const child_process &) = delete;
    child_process(child_process &&other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
    child_process &operator=(child_process &&) = delete;
    ~child_process()
    {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
    }
    // Waits for the child; throws unless it exited with status 0.
    void join(const std::string &what)
    {
        int status = 0;
        pid_t got = -1;
        while ((got = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
        }
        if (got < 0)
            throw std::system_error(errno, std::generic_category(), "waitpid " + what);
        pid_ = -1;
        if (WIFSIGNALED(status))
            throw std::runtime_error(what + " killed by signal " +
                                     std::to_string(WTERMSIG(status)));
        if (WEXITSTATUS(status) != 0)
            throw std::runtime_error(what + " exited with status " +
                                     std::to_string(WEXITSTATUS(status)));
    }

private:
    pid_t pid_;
};

// Runs body() in a child process that dies with its parent; the child
// never returns from here and never runs its copy of the parent's
// destructors (it leaves with _exit).
template <typename Body> child_process spawn(const std::string &what, Body &&body)
{
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0)
        throw std::system_error(errno, std::generic_category(), "fork " + what);
    if (pid == 0) {
        int status = 1;
        if (::prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && ::getppid() == parent) {
            try {
                std::forward<Body>(body)();
                status = 0;
            } catch (const std::exception &e) {
                error(what + ": " + e.what());
            } catch (...) {
                error(what + ": unknown exception");
            }
        }
        ::_exit(status);
    }
    return child_process(pid);
}

} // namespace bench
