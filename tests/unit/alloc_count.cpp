// The replaced global operator new of alloc_count.hpp.
#include "alloc_count.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

// NOLINTBEGIN(cppcoreguidelines-avoid-non-const-global-variables): the counter
std::atomic<bool> counting{false};
std::atomic<std::size_t> allocations{0};
// NOLINTEND(cppcoreguidelines-avoid-non-const-global-variables)

} // namespace

// NOLINTBEGIN(cppcoreguidelines-no-malloc,cppcoreguidelines-owning-memory)
void *operator new(std::size_t size)
{
    if (counting.load(std::memory_order_relaxed))
        allocations.fetch_add(1, std::memory_order_relaxed);
    if (void *p = std::malloc(size == 0 ? 1 : size))
        return p;
    throw std::bad_alloc();
}
void operator delete(void *p) noexcept
{
    std::free(p);
}
void operator delete(void *p, std::size_t /*size*/) noexcept
{
    std::free(p);
}
// NOLINTEND(cppcoreguidelines-no-malloc,cppcoreguidelines-owning-memory)

namespace pvfs::test {

void start_counting_allocations()
{
    allocations.store(0);
    counting.store(true);
}

std::size_t stop_counting_allocations()
{
    counting.store(false);
    return allocations.load();
}

} // namespace pvfs::test
