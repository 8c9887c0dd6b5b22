// Internal: committed PFS records that a pass over the records read, kept in memory so that the
// next pass over the same ticks reads them from memory instead of from storage.
//
// After an outage every catchup of a pubend reads the same records. PFS::ReadTogether serves the
// catchups that need matches at one moment with one pass; but their buffers drain at different
// moments (a broker's Flush steps a few of them at a time), so they ask in small groups, each
// from about where the last group read. Without this cache each group's pass read and
// checksummed the same records again: in a storm of 1,000 reconnections each record was read
// about 80 times.
//
// A chunk states: every committed record of the PFS with a tick in (lo, hi] is in it, in tick
// order (possibly none). A committed record never changes until it is chopped, so a chunk stays
// true until the chop point passes it (DropThrough); a PFS that failed a commit is reopened,
// cache and all. Chunks never overlap. Once their bytes exceed the budget, the least recently
// used chunks go.
//
// Thread-compatible, like the PFS that owns it.

#ifndef GRYPH_LIB_PFS_RECORD_CACHE_H_
#define GRYPH_LIB_PFS_RECORD_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/strings/string_view.h"
#include "gryph/tick.h"

namespace gryph::internal {

class PfsRecordCache {
 public:
  // The records of (lo, hi].
  class Chunk {
   public:
    Tick lo() const { return lo_; }
    Tick hi() const { return hi_; }
    size_t size() const { return ticks_.size(); }
    Tick tick(size_t i) const { return ticks_[i]; }
    absl::string_view value(size_t i) const {
      const size_t begin = i == 0 ? 0 : ends_[i - 1];
      return absl::string_view(bytes_).substr(begin, ends_[i] - begin);
    }
    // The index of the first record above `t` (size() if none).
    size_t UpperBound(Tick t) const;
    size_t bytes() const;

   private:
    friend class PfsRecordCache;
    Tick lo_ = 0;
    Tick hi_ = 0;
    std::vector<Tick> ticks_;
    std::vector<size_t> ends_;  // ends_[i]: where record i ends in bytes_
    std::string bytes_;
    uint64_t used_ = 0;  // the cache's clock at its last use
  };

  // Collects the records of one storage scan into chunks of a bounded size.
  class Builder {
   public:
    // A scan of the records above `from`. REQUIRES: `cache` outlives it.
    Builder(PfsRecordCache* cache, Tick from);
    // The next record read, in tick order.
    void Add(Tick t, absl::string_view value);
    // The scan saw every record in (from, through]: what it collected goes into the cache.
    // REQUIRES: through >= the last tick added.
    void Finish(Tick through);

   private:
    PfsRecordCache* const cache_;
    Chunk chunk_;
  };

  // A cache of at most (about) `max_bytes` of records; 0 keeps nothing.
  explicit PfsRecordCache(size_t max_bytes);

  bool enabled() const { return max_bytes_ > 0; }
  // The chunk whose range holds the tick after `t` (lo <= t < hi), or null. The chunk stays valid
  // until the cache next changes.
  const Chunk* Covering(Tick t);
  // The lowest lo of a chunk above `t`, or kMaxTick when none.
  Tick NextStart(Tick t) const;
  // Forgets every record at or below `t` (the PFS chopped them).
  void DropThrough(Tick t);

  size_t bytes() const { return bytes_; }
  size_t chunks() const { return chunks_.size(); }

 private:
  void Insert(Chunk chunk);
  // Returns the chunk after it.
  absl::btree_map<Tick, Chunk>::iterator Erase(absl::btree_map<Tick, Chunk>::iterator it);

  const size_t max_bytes_;
  // A chunk is split once its records reach this many bytes (a sixteenth of the budget, at most
  // 64 KiB), so that eviction frees a little at a time.
  const size_t chunk_bytes_;
  size_t bytes_ = 0;
  uint64_t clock_ = 0;
  absl::btree_map<Tick, Chunk> chunks_;  // by lo
};

}  // namespace gryph::internal

#endif  // GRYPH_LIB_PFS_RECORD_CACHE_H_
