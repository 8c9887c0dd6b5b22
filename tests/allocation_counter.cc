// Replaces the global operator new of the test binary with one that counts, so that tests can
// check that a hot path allocates nothing (testing::AllocationCount in test_util.h). It only
// counts, then defers to malloc; a separate translation unit keeps GCC from pairing the inlined
// operators with malloc/free in its mismatched-new-delete analysis.

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace gryph::testing {

int64_t AllocationCount() { return g_allocations.load(std::memory_order_relaxed); }

}  // namespace gryph::testing
