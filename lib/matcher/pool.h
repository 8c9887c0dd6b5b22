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
// Slabs are 64 KiB until the pool holds 32 MiB, then 2 MiB. Where the kernel supports it (Linux
// 5.14+), each new slab is populated at once (MADV_POPULATE_WRITE): that memory is about to be
// written, and faulting its pages in one call costs a third less than a fault per page on the
// benchmark VM (1.1-1.2 against 1.65 µs per 4 KiB page), which is most of what a fresh fill of
// millions of subscriptions spends in the kernel. (Large slabs from the start were tried: a
// matcher of 20,000 subscriptions, filled afresh 20 times over, lost a tenth of its insert rate
// to malloc mapping and unmapping them and to populating the unused end of its last slab.)
//
// Thread-safety: thread-compatible (the matcher's owner uses it alone).

#ifndef GRYPH_LIB_MATCHER_POOL_H_
#define GRYPH_LIB_MATCHER_POOL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gryph::matcher_internal {

// Faults in the whole pages of [p, p + bytes) in one call where the kernel supports it
// (MADV_POPULATE_WRITE, Linux 5.14+); otherwise, or on failure, they fault in on first use.
inline void PopulatePages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kPage - 1);
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)p;
  (void)bytes;
#endif
}

class Pool {
 public:
  static constexpr size_t kMaxBlock = 512;  // larger requests go to operator new

  Pool() = default;
  ~Pool() {
    for (const Slab& s : slabs_) ::operator delete(s.bytes);
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
    char* p = cursor_;
    cursor_ += size;
    // Blocks are carved in address order, and a fresh line's first write waits for it to be
    // fetched: ask for the lines a few blocks on, for writing, so that they are owned by then.
    for (size_t off = 0; off < size; off += 64) __builtin_prefetch(p + kWriteAhead + off, 1);
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
  static constexpr size_t kWriteAhead = 512;  // bytes; a prefetch past the slab is harmless
  struct FreeBlock {
    FreeBlock* next;
  };
  static size_t Class(size_t bytes) { return bytes == 0 ? 0 : (bytes - 1) / kGranule; }

  void NewSlab() {
    // Small slabs while the pool is small (a small matcher stays small); large ones, fetched and
    // populated in fewer calls, once it holds many megabytes.
    const size_t bytes = slab_bytes_ < kLargeFrom ? kSlab : kLargeSlab;
    slabs_.reserve(slabs_.size() + 1);  // so that push_back cannot throw and leak the slab
    char* p = static_cast<char*>(::operator new(bytes));
    PopulatePages(p, bytes);
    slabs_.push_back(Slab{p, bytes});
    slab_bytes_ += bytes;
    cursor_ = p;
    end_ = p + bytes;
  }

  struct Slab {
    char* bytes;
    size_t size;
  };
  static constexpr size_t kSlab = 64 * 1024;
  static constexpr size_t kLargeSlab = 2 * 1024 * 1024;
  static constexpr size_t kLargeFrom = 32 * 1024 * 1024;
  FreeBlock* free_[kMaxBlock / kGranule] = {};
  std::vector<Slab> slabs_;
  char* cursor_ = nullptr;
  char* end_ = nullptr;
  size_t slab_bytes_ = 0;  // in slabs_
};

}  // namespace gryph::matcher_internal

#endif  // GRYPH_LIB_MATCHER_POOL_H_
