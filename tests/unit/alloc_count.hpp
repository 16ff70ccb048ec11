// Counts calls of the global operator new, which alloc_count.cpp replaces
// (malloc and free underneath), for tests that measure allocations on a
// hot path.  A program links alloc_count.cpp to have it.
#ifndef PVFS_TESTS_UNIT_ALLOC_COUNT_HPP
#define PVFS_TESTS_UNIT_ALLOC_COUNT_HPP

#include <cstddef>

namespace pvfs::test {

// Counts from zero, in every thread, until stop_counting_allocations().
void start_counting_allocations();
// Stops counting; the number of operator new calls since the start.
std::size_t stop_counting_allocations();

} // namespace pvfs::test

#endif // PVFS_TESTS_UNIT_ALLOC_COUNT_HPP
