// Internal: memory for the matcher's many small, short-lived objects (records, trie and topic
// nodes).
//
// Pool hands out blocks in 16-byte size classes from slabs and keeps freed blocks on a free list
// per class. Millions of records and nodes come and go under subscriber churn; through malloc,
// freeing them in bulk (a batch of removals) coalesces into large free chunks, and each such free
// makes glibc sweep its fast bins — that sweep alone cost a sixth of a removal. Pooled blocks
// never reach malloc. Slabs are returned when the pool is destroyed (with its matcher), so memory
// stays at its peak until then, as it would in malloc's arenas.
//
// Slabs start at 64 KiB and double up to 2 MiB, so that a small matcher stays small and a large
// one maps its memory in few calls. Where the kernel supports it (Linux 5.14+), a new slab is
// populated at once (MADV_POPULATE_WRITE): it will be used soon, and faulting its pages in one
// call costs a third less than a fault per page on the benchmark VM (1.1 against 1.7 µs per
// 4 KiB page), which is most of what a fresh fill of millions of subscriptions spends in the
// kernel. (Transparent huge pages for the slabs or the big arrays were tried and dropped: on the
// benchmark VM a huge page faults in six times slower per byte than small pages; slabs ask for
// none.)
//
// Thread-safety: thread-compatible (the matcher's owner uses it alone).

#ifndef GRYPH_LIB_MATCHER_POOL_H_
#define GRYPH_LIB_MATCHER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gryph::matcher_internal {

class Pool {
 public:
  static constexpr size_t kMaxBlock = 512;  // larger requests go to operator new

  Pool() = default;
  ~Pool() {
    for (const Slab& s : slabs_) UnmapSlab(s.bytes, s.size);
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  void* Allocate(size_t bytes) {
    if (bytes > kMaxBlock) return ::operator new(bytes);
    const size_t c = Class(bytes);
    if (FreeBlock* b = free_[c]) {
      free_[c] = b->next;
      // Freed blocks are scattered: fetch the next one now, so that the next allocation of this
      // class does not wait for its `next` field.
      if (b->next != nullptr) __builtin_prefetch(b->next, 1);
      return b;
    }
    const size_t size = (c + 1) * kGranule;
    if (static_cast<size_t>(end_ - cursor_) < size) NewSlab();
    void* p = cursor_;
    cursor_ += size;
    return p;
  }

  // REQUIRES: `p` came from Allocate(bytes) of this pool, with the same `bytes`.
  void Free(void* p, size_t bytes) {
    if (bytes > kMaxBlock) {
      ::operator delete(p);
      return;
    }
    const size_t c = Class(bytes);
    free_[c] = new (p) FreeBlock{free_[c]};
  }

 private:
  static constexpr size_t kGranule = 16;
  struct FreeBlock {
    FreeBlock* next;
  };
  static size_t Class(size_t bytes) { return bytes == 0 ? 0 : (bytes - 1) / kGranule; }

  void NewSlab() {
    const size_t bytes = next_slab_;
    if (next_slab_ < kMaxSlab) next_slab_ *= 2;
    slabs_.reserve(slabs_.size() + 1);  // so that push_back cannot throw and leak the slab
    char* p = static_cast<char*>(MapSlab(bytes));
    slabs_.push_back(Slab{p, bytes});
    cursor_ = p;
    end_ = p + bytes;
  }

  // Slabs come from operator new (so that heap statistics count them) and are populated where
  // the kernel can; MapSlab throws std::bad_alloc when out of memory.
  static void* MapSlab(size_t bytes) {
    void* p = ::operator new(bytes);
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    // The whole pages inside the slab; failure (an older kernel) leaves them to fault on use.
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kPage - 1);
    if (end > begin) {
      (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
    }
#endif
    return p;
  }
  static void UnmapSlab(void* p, size_t bytes) { ::operator delete(p, bytes); }
  static constexpr uintptr_t kPage = 4096;

  struct Slab {
    char* bytes;
    size_t size;
  };
  static constexpr size_t kMinSlab = 64 * 1024;
  static constexpr size_t kMaxSlab = 2 * 1024 * 1024;
  FreeBlock* free_[kMaxBlock / kGranule] = {};
  std::vector<Slab> slabs_;
  size_t next_slab_ = kMinSlab;
  char* cursor_ = nullptr;
  char* end_ = nullptr;
};

}  // namespace gryph::matcher_internal

#endif  // GRYPH_LIB_MATCHER_POOL_H_
