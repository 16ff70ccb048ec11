// Task<T> (include/pvfs/task.hpp): laziness, values and exceptions through
// chains of awaits, completion callbacks, resumption from an event loop,
// and no stack growth over long chains of tasks that finish at once.
#include <atf-c++.hpp>

#include <coroutine>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "pvfs/task.hpp"

using pvfs::Task;

namespace {

// What an engine does: tasks park here and a loop resumes them later.
class Loop {
public:
    struct Wait {
        Loop *loop;
        int *slot;
        // NOLINTNEXTLINE(readability-convert-member-functions-to-static)
        [[nodiscard]] bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) { loop->parked_.push_back({h, slot}); }
        [[nodiscard]] int await_resume() const noexcept { return *slot; }
    };
    // Suspends the awaiting task until run_one() hands it `value`.
    Wait wait(int &slot) { return Wait{this, &slot}; }

    // Resumes the oldest parked task with `value`; false when none is parked.
    bool run_one(int value)
    {
        if (parked_.empty())
            return false;
        const Parked p = parked_.front();
        parked_.pop_front();
        *p.slot = value;
        p.handle.resume();
        return true;
    }
    [[nodiscard]] std::size_t parked() const noexcept { return parked_.size(); }

private:
    struct Parked {
        std::coroutine_handle<> handle;
        int *slot;
    };
    std::deque<Parked> parked_;
};

Task<int> constant(int v, int &runs)
{
    ++runs;
    co_return v;
}

Task<int> add(int a, int b, int &runs)
{
    const int x = co_await constant(a, runs);
    const int y = co_await constant(b, runs);
    co_return x + y;
}

// `name` by value: a lazy coroutine must not keep a reference to a temporary.
Task<int> waits(Loop &loop, std::vector<std::string> &trace, std::string name)
{
    int slot = 0;
    trace.push_back(name + " starts");
    const int got = co_await loop.wait(slot);
    trace.push_back(name + " got " + std::to_string(got));
    co_return got * 2;
}

Task<int> waits_twice(Loop &loop, std::vector<std::string> &trace)
{
    const int a = co_await waits(loop, trace, "first");
    const int b = co_await waits(loop, trace, "second");
    co_return a + b;
}

Task<int> throws_after_wait(Loop &loop)
{
    int slot = 0;
    const int got = co_await loop.wait(slot);
    if (got < 0)
        throw std::runtime_error("negative");
    co_return got;
}

Task<int> catches(Loop &loop, std::string &caught)
{
    try {
        co_return co_await throws_after_wait(loop);
    } catch (const std::runtime_error &e) {
        caught = e.what();
        co_return -1;
    }
}

Task<> side_effect(int &counter)
{
    ++counter;
    co_return;
}

// A chain `depth` deep where every level finishes without suspending.
// NOLINTNEXTLINE(misc-no-recursion): the point is a chain of awaits
Task<long> chain(long depth)
{
    if (depth == 0)
        co_return 0;
    co_return 1 + co_await chain(depth - 1);
}

Task<long> loop_of_immediate(long n, int &runs)
{
    long sum = 0;
    for (long i = 0; i < n; ++i)
        sum += co_await constant(1, runs);
    co_return sum;
}

Task<long> loop_of_parked(Loop &loop, long n)
{
    long sum = 0;
    for (long i = 0; i < n; ++i) {
        int slot = 0;
        sum += co_await loop.wait(slot);
    }
    co_return sum;
}

void count_done(void *arg) noexcept
{
    ++*static_cast<int *>(arg);
}

} // namespace

ATF_TEST_CASE_WITHOUT_HEAD(lazy_until_started);
ATF_TEST_CASE_BODY(lazy_until_started)
{
    int runs = 0;
    Task<int> t = add(2, 3, runs);
    ATF_REQUIRE_EQ(runs, 0);
    ATF_REQUIRE(t.valid() && !t.done());
    int finished = 0;
    t.start(count_done, &finished);
    ATF_REQUIRE(t.done());
    ATF_REQUIRE_EQ(finished, 1);
    ATF_REQUIRE_EQ(runs, 2);
    ATF_REQUIRE_EQ(t.result(), 5);
}

ATF_TEST_CASE_WITHOUT_HEAD(resumed_by_a_loop);
ATF_TEST_CASE_BODY(resumed_by_a_loop)
{
    Loop loop;
    std::vector<std::string> trace;
    Task<int> t = waits_twice(loop, trace);
    int finished = 0;
    t.start(count_done, &finished);
    ATF_REQUIRE(!t.done());
    ATF_REQUIRE_EQ(loop.parked(), 1U);
    ATF_REQUIRE(loop.run_one(10));
    ATF_REQUIRE(!t.done());
    ATF_REQUIRE_EQ(finished, 0);
    ATF_REQUIRE(loop.run_one(7));
    ATF_REQUIRE(t.done());
    ATF_REQUIRE_EQ(finished, 1);
    ATF_REQUIRE_EQ(t.result(), 34);
    const std::vector<std::string> want{"first starts", "first got 10", "second starts",
                                        "second got 7"};
    ATF_REQUIRE(trace == want);
    ATF_REQUIRE(!loop.run_one(0));
}

ATF_TEST_CASE_WITHOUT_HEAD(many_interleaved);
ATF_TEST_CASE_BODY(many_interleaved)
{
    Loop loop;
    std::vector<std::string> trace;
    std::vector<Task<int>> tasks;
    int finished = 0;
    for (int i = 0; i < 100; ++i) {
        tasks.push_back(waits(loop, trace, "t" + std::to_string(i)));
        tasks.back().start(count_done, &finished);
    }
    ATF_REQUIRE_EQ(loop.parked(), 100U);
    for (int i = 0; i < 100; ++i)
        ATF_REQUIRE(loop.run_one(i));
    ATF_REQUIRE_EQ(finished, 100);
    for (int i = 0; i < 100; ++i)
        ATF_REQUIRE_EQ(tasks[static_cast<std::size_t>(i)].result(), 2 * i);
}

ATF_TEST_CASE_WITHOUT_HEAD(exceptions_propagate);
ATF_TEST_CASE_BODY(exceptions_propagate)
{
    Loop loop;
    std::string caught;
    Task<int> t = catches(loop, caught);
    t.start();
    ATF_REQUIRE(loop.run_one(-5));
    ATF_REQUIRE(t.done());
    ATF_REQUIRE_EQ(t.result(), -1);
    ATF_REQUIRE_EQ(caught, "negative");

    Task<int> bare = throws_after_wait(loop);
    bare.start();
    ATF_REQUIRE(loop.run_one(-1));
    ATF_REQUIRE(bare.done());
    ATF_REQUIRE_THROW(std::runtime_error, bare.result());
}

ATF_TEST_CASE_WITHOUT_HEAD(void_tasks_and_moves);
ATF_TEST_CASE_BODY(void_tasks_and_moves)
{
    int counter = 0;
    Task<> a = side_effect(counter);
    Task<> b = std::move(a);
    ATF_REQUIRE(!a.valid()); // NOLINT(bugprone-use-after-move): checking the moved-from state
    ATF_REQUIRE(b.valid());
    b.start();
    ATF_REQUIRE(b.done());
    b.result();
    ATF_REQUIRE_EQ(counter, 1);
    // A task destroyed before it started never runs.
    {
        Task<> never = side_effect(counter);
    }
    ATF_REQUIRE_EQ(counter, 1);
}

ATF_TEST_CASE_WITHOUT_HEAD(constant_stack);
ATF_TEST_CASE_BODY(constant_stack)
{
    // A million awaits of tasks that finish at once, in one loop: were each
    // finish to resume the awaiter on top of the finished task's frames,
    // the stack would overflow (it did, under ASan, which has no tail calls).
    int runs = 0;
    Task<long> t = loop_of_immediate(1000000, runs);
    t.start();
    ATF_REQUIRE(t.done());
    ATF_REQUIRE_EQ(t.result(), 1000000L);
    ATF_REQUIRE_EQ(runs, 1000000);

    // The same when an event loop resumes the task each time.
    Loop loop;
    Task<long> parked = loop_of_parked(loop, 100000);
    parked.start();
    for (int i = 0; i < 100000; ++i)
        ATF_REQUIRE(loop.run_one(1));
    ATF_REQUIRE(parked.done());
    ATF_REQUIRE_EQ(parked.result(), 100000L);

    // Nesting costs stack per level (as any recursion does); a depth far
    // beyond the client's few levels works.
    Task<long> nested = chain(1000);
    nested.start();
    ATF_REQUIRE_EQ(nested.result(), 1000L);
}

ATF_INIT_TEST_CASES(tcs)
{
    ATF_ADD_TEST_CASE(tcs, lazy_until_started);
    ATF_ADD_TEST_CASE(tcs, resumed_by_a_loop);
    ATF_ADD_TEST_CASE(tcs, many_interleaved);
    ATF_ADD_TEST_CASE(tcs, exceptions_propagate);
    ATF_ADD_TEST_CASE(tcs, void_tasks_and_moves);
    ATF_ADD_TEST_CASE(tcs, constant_stack);
}
