// Replaces the global operator new of the test binary with one that counts, so that tests can
// check that a hot path allocates nothing, or how much it asks for (testing::AllocationCount and
// testing::AllocatedBytes in test_util.h). It only counts, then defers to malloc; a separate
// translation unit keeps GCC from pairing the inlined operators with malloc/free in its
// mismatched-new-delete analysis.

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace {
std::atomic<int64_t> g_allocations{0};
std::atomic<int64_t> g_allocated_bytes{0};
}  // namespace

namespace {

void* CountedAllocate(size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_allocated_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}

void* CountedAllocateOrThrow(size_t size) {
  if (void* p = CountedAllocate(size)) return p;
  throw std::bad_alloc();
}

}  // namespace

// Every non-aligned form is replaced, so that no block allocated by one allocator is freed by
// another (ASan checks). The aligned forms keep their defaults, which pair with each other.
void* operator new(size_t size) { return CountedAllocateOrThrow(size); }
void* operator new[](size_t size) { return CountedAllocateOrThrow(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept { return CountedAllocate(size); }
void* operator new[](size_t size, const std::nothrow_t&) noexcept { return CountedAllocate(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace gryph::testing {

int64_t AllocationCount() { return g_allocations.load(std::memory_order_relaxed); }
int64_t AllocatedBytes() { return g_allocated_bytes.load(std::memory_order_relaxed); }

}  // namespace gryph::testing
