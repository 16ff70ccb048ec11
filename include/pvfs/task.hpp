// Task<T>: the coroutine type of libpvfs's asynchronous core.
//
// An operation of the client library is a C++20 coroutine returning
// Task<T> (T is usually int, a negative errno or 0).  Tasks are lazy: a
// task runs when it is co_awaited by another task or started with start().
// A task awaited by another runs inside the await; if it finishes without
// suspending, the awaiter simply goes on (no resumption, so a loop awaiting
// a million tasks that finish at once uses constant stack, with or without
// the compiler's tail calls -- ASan builds have none).  A task that
// suspended resumes its awaiter when it finishes, or calls the completion
// callback given to start().
//
// Nothing here knows about I/O: a task suspends on an awaitable of the
// client's engine (a batch of requests) and the engine resumes it from its
// poll loop.  One thread drives a set of tasks; none of this is
// thread-safe, on purpose (pvfsd runs one event loop).
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

namespace pvfs {

template <typename T = void> class Task;

namespace task_detail {

// What a top-level task calls when it finishes (see Task::start).
using DoneCallback = void (*)(void *arg) noexcept;

struct PromiseBase {
    std::coroutine_handle<> continuation;
    // True while the awaiter runs this task inside its await_suspend: a
    // finish then returns there instead of resuming the awaiter.
    bool running_inline = false;
    DoneCallback on_done = nullptr;
    void *on_done_arg = nullptr;
    std::exception_ptr error;

    // Non-static (as the other hooks below): tidy 14 flags the coroutine
    // machinery's implicit calls of static hooks through the object.
    // NOLINTNEXTLINE(readability-convert-member-functions-to-static)
    [[nodiscard]] std::suspend_always initial_suspend() const noexcept { return {}; }

    struct FinalAwaiter {
        // NOLINTNEXTLINE(readability-convert-member-functions-to-static)
        [[nodiscard]] bool await_ready() const noexcept { return false; }
        template <typename Promise>
        std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> self) noexcept
        {
            PromiseBase &p = self.promise();
            if (p.running_inline)
                return std::noop_coroutine();
            if (p.continuation)
                return p.continuation;
            if (p.on_done != nullptr)
                p.on_done(p.on_done_arg);
            return std::noop_coroutine();
        }
        void await_resume() const noexcept {}
    };
    // NOLINTNEXTLINE(readability-convert-member-functions-to-static)
    [[nodiscard]] FinalAwaiter final_suspend() const noexcept { return {}; }

    void unhandled_exception() noexcept { error = std::current_exception(); }
};

template <typename T> struct Promise : PromiseBase {
    std::optional<T> value;
    Task<T> get_return_object() noexcept;
    template <typename U> void return_value(U &&v) { value.emplace(std::forward<U>(v)); }
    T take()
    {
        if (error)
            std::rethrow_exception(error);
        return std::move(*value);
    }
};

template <> struct Promise<void> : PromiseBase {
    Task<void> get_return_object() noexcept;
    void return_void() const noexcept {}
    void take() const
    {
        if (error)
            std::rethrow_exception(error);
    }
};

} // namespace task_detail

template <typename T> class [[nodiscard]] Task {
public:
    using promise_type = task_detail::Promise<T>;
    using Handle = std::coroutine_handle<promise_type>;

    Task() noexcept = default;
    explicit Task(Handle h) noexcept : handle_(h) {}
    Task(Task &&other) noexcept : handle_(std::exchange(other.handle_, {})) {}
    Task &operator=(Task &&other) noexcept
    {
        if (this != &other) {
            destroy();
            handle_ = std::exchange(other.handle_, {});
        }
        return *this;
    }
    Task(const Task &) = delete;
    Task &operator=(const Task &) = delete;
    // Destroying a task that has started and not finished is a bug of the
    // caller (whatever it waits on would resume a freed frame); the engine's
    // owners keep tasks until they are done.
    ~Task() { destroy(); }

    [[nodiscard]] bool valid() const noexcept { return static_cast<bool>(handle_); }
    [[nodiscard]] bool done() const noexcept { return handle_ && handle_.done(); }

    // Runs a top-level task until its first suspension.  `on_done(arg)` is
    // called when it finishes (possibly before start returns).
    void start(task_detail::DoneCallback on_done = nullptr, void *arg = nullptr)
    {
        handle_.promise().on_done = on_done;
        handle_.promise().on_done_arg = arg;
        handle_.resume();
    }

    // The finished task's value; rethrows what escaped it.
    T result() { return handle_.promise().take(); }

    // co_await task: runs it, resumes the awaiter with its value when it ends.
    auto operator co_await() &&noexcept
    {
        struct Awaiter {
            Handle callee;
            // NOLINTNEXTLINE(readability-convert-member-functions-to-static)
            [[nodiscard]] bool await_ready() const noexcept { return false; }
            // false: the callee finished at once, the caller goes on.
            bool await_suspend(std::coroutine_handle<> caller) noexcept
            {
                promise_type &p = callee.promise();
                p.continuation = caller;
                p.running_inline = true;
                callee.resume();
                p.running_inline = false;
                return !callee.done();
            }
            T await_resume() { return callee.promise().take(); }
        };
        return Awaiter{handle_};
    }

private:
    void destroy() noexcept
    {
        if (handle_)
            std::exchange(handle_, {}).destroy();
    }
    Handle handle_;
};

namespace task_detail {
template <typename T> Task<T> Promise<T>::get_return_object() noexcept
{
    return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}
inline Task<void> Promise<void>::get_return_object() noexcept
{
    return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}
} // namespace task_detail

} // namespace pvfs
