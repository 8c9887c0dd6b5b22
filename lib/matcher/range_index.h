// Internal: the range index of a topic group — subscriptions that are conjunctions of several
// unselective numeric ranges, found by counting, for each of them, the ranges an event satisfies.
//
// A subscription such as `a3 BETWEEN 10 AND 260000 AND a7 BETWEEN ... AND a12 >= 5` (each range
// holding for a large share of the values) has no good single access: whichever range it were
// filed under would bring it in as a candidate for a quarter of the events or more, and verifying
// a quarter of a million candidates per event is slower than scanning them all. The range index
// files *every* range term of such a subscription instead, and an event finds, per attribute it
// carries, the terms it satisfies; a subscription matches when all of its terms are satisfied.
//
// Structure. Each subscription takes a dense slot (reused through a free list). Per attribute, a
// Grid cuts the line of floats into B buckets (B <= 64, about sqrt(terms) / 4, cut at quantiles
// of a sample of the terms' bounds) and files each term [lo, hi] in cell (bucket(lo), bucket(hi))
// of a B x B upper triangle; a cell holds its terms' slots and, in a parallel array, their
// bounds. For an event value x in bucket b, the cells (i, j) with i <= b <= j are those whose
// terms can hold x: the interior ones (i < b < j) hold x whatever the bounds, and only the cells
// of row b and column b compare a bound. A 64-bit mask per row marks its non-empty cells, so an
// event visits only those.
//
// Matching counts down: each Match copies the per-slot term counts (`need`) into a per-call
// byte array and decrements a slot's count for each satisfied term; a slot whose count reaches
// zero is a survivor. Each term is in exactly one cell and each attribute is read once, so a
// slot is decremented at most once per term and reaches zero at most once. An attribute the
// event lacks, or holds as a string, boolean or NaN, decrements nothing: a subscription with a
// term on it cannot survive, which is SQL's rule (a comparison with NULL is UNKNOWN, with a
// string FALSE, with NaN UNKNOWN — never TRUE).
//
// Exactness. Bounds are kept as floats widened outwards (lo rounded down, hi up, after the
// rounding to double of lib/matcher/plan.h's RangeValue) and event values rounded to the nearest
// float, so that `lo <= x <= hi` implies the same for the floats (every rounding is monotonic):
// the survivors are a superset of the subscriptions whose range terms are TRUE. Match reports
// whether every value it read was exactly a float; when so, a term whose bounds are inclusive
// and exactly floats holds exactly when its float comparison does, and the caller may report a
// survivor made only of such terms without verifying it (Record::ranges_proven). Any other
// survivor is verified by the caller: a proven record's terms compared exactly with the values
// (Record::RangesHold), any other record's checks.
//
// Removal is lazy: a removed slot's count becomes 0 (a count of 0 is never decremented to 0:
// it wraps), its terms stay in their cells, and the slot is not reused until a purge drops the
// dead terms of every grid — once dead slots outnumber half the live ones — so a removal costs
// O(1) amortized and needs no per-term positions. A grid is rebuilt (new cuts, terms refiled)
// whenever its terms reach 4 times what they were at its last build, so filling costs O(1)
// amortized per term too. Add asks for all of a subscription's cells, then for the ends of their
// arrays, before appending to any, so that the cache misses of its terms overlap.
//
// Invariants:
//   - need_[s] is the number of terms of the live subscription in slot s, 1..kMaxTerms, and 0
//     for a free or dead slot; owners_[s] is its record when live, kDead when dead (in dead_),
//     null when free.
//   - Every live slot s has exactly need_[s] terms filed, in the grids of distinct attributes;
//     dead slots may have terms filed; free slots have none.
//   - A term with bounds lo, hi is in cell (Bucket(lo), max(Bucket(lo), Bucket(hi))) of its
//     attribute's grid; rows[i] has bit j set if cell (i, j) holds a term (live or dead).
//   - need_ and owners_ have limit_ entries; every free slot below limit_ is in free_ (which may
//     also hold stale entries: slots at or past limit_, or in use again).
//
// Thread-safety: thread-compatible. Match is const and keeps its state in the caller's
// RangeScratch (one per thread or call), so any number of threads may match concurrently while
// nobody changes the index.

#ifndef GRYPH_LIB_MATCHER_RANGE_INDEX_H_
#define GRYPH_LIB_MATCHER_RANGE_INDEX_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "gryph/event.h"

namespace gryph::matcher_internal {

struct Record;  // lib/matcher/plan.h

// One range term of a subscription: the value of attribute `attr` within [lo, hi].
struct RangeTerm {
  uint32_t attr;
  float lo;  // rounded down; -infinity when there is no lower bound
  float hi;  // rounded up; +infinity when there is no upper bound
};

// Float rounding of the range index (and of the interval buckets' compact bounds).
struct FloatRounding {
  static constexpr float kInf = std::numeric_limits<float>::infinity();
  static constexpr double kFloatMax = std::numeric_limits<float>::max();
  // Round to nearest, out-of-range values to infinities (a plain cast of those is undefined).
  static float Nearest(double d) {
    if (d > kFloatMax) return kInf;
    if (d < -kFloatMax) return -kInf;
    return static_cast<float>(d);
  }
  static float Down(double d) {
    const float f = Nearest(d);
    return static_cast<double>(f) > d ? std::nextafter(f, -kInf) : f;
  }
  static float Up(double d) {
    const float f = Nearest(d);
    return static_cast<double>(f) < d ? std::nextafter(f, kInf) : f;
  }
};

// Per-call state of RangeIndex::Match, reused across calls.
struct RangeScratch {
  std::vector<uint8_t> counts;      // by slot: terms still to be satisfied
  std::vector<uint32_t> survivors;  // slots whose every term held, in no particular order
};

class RangeIndex {
 public:
  // Terms per subscription at most (counts are bytes; more range attributes are left to checks).
  static constexpr size_t kMaxTerms = 16;
  // Buckets per attribute at most: a row's non-empty cells fit a 64-bit mask.
  static constexpr uint32_t kMaxBuckets = 64;

  RangeIndex() = default;
  RangeIndex(const RangeIndex&) = delete;
  RangeIndex& operator=(const RangeIndex&) = delete;

  // Files a subscription made of `terms`, reported by Match as `owner`; returns its slot.
  // REQUIRES: 1 <= terms.size() <= kMaxTerms, distinct attributes, no NaN bound; owner != null.
  uint32_t Add(absl::Span<const RangeTerm> terms, const Record* owner);
  // Removes the subscription in `slot`. REQUIRES: slot was returned by Add and not removed.
  void Remove(uint32_t slot);

  // Sets scratch.survivors to the slots all of whose terms hold for the float roundings of the
  // numeric values in `values` (by attribute id; nullptr: absent; each grid's attribute id must
  // index it). Returns whether every value it read was exactly a float (see above).
  bool Match(const AttributeValue* const* values, RangeScratch& scratch) const;

  const Record* owner(uint32_t slot) const { return owners_[slot]; }
  // Live subscriptions.
  size_t size() const { return live_; }
  bool empty() const { return live_ == 0; }

  // For tests: the grids' bucket counts and the slots not yet reusable.
  uint32_t buckets(uint32_t attr) const;
  size_t dead() const { return dead_.size(); }

 private:
  // The owner of a dead slot: never reported (its count never reaches zero).
  static inline const Record* const kDead =
      reinterpret_cast<const Record*>(alignof(std::max_align_t));
  struct Bounds {
    float lo;
    float hi;
  };
  struct Cell {
    std::vector<uint32_t> slots;
    std::vector<Bounds> bounds;  // parallel to slots: read only in row and column b
  };
  struct Grid {
    std::vector<float> cuts;  // sorted, distinct: bucket(v) = how many cuts are <= v
    uint32_t buckets = 1;     // cuts.size() + 1
    std::vector<Cell> cells;  // (i, j) for i <= j, row by row
    std::vector<uint64_t> rows;
    size_t terms = 0;       // filed, live and dead
    size_t rebuild_at = 0;  // terms at which the grid is rebuilt

    uint32_t Bucket(float v) const;
    size_t CellIndex(uint32_t i, uint32_t j) const {
      return static_cast<size_t>(i) * (2 * buckets - i + 1) / 2 + (j - i);
    }
    // The cell of a term with bounds b.
    size_t CellOf(Bounds b) const;
    // Appends a term with bounds b to its cell, CellOf(b).
    void File(uint32_t slot, Bounds b, size_t cell);
    // Decrements the counts of the slots whose terms hold x (in bucket b).
    void Match(float x, uint8_t* counts, std::vector<uint32_t>& survivors) const;
  };

  // Refiles `g`'s live terms under new cuts and `buckets` (0: chosen from the live terms).
  void Rebuild(Grid& g) const;
  // Drops the dead slots' terms and makes the slots reusable.
  void Purge();
  static uint32_t TargetBuckets(size_t terms);

  absl::flat_hash_map<uint32_t, std::unique_ptr<Grid>> grids_;  // by attribute id
  std::vector<uint8_t> need_;                                   // by slot
  std::vector<const Record*> owners_;                           // by slot
  std::vector<uint32_t> free_;                                  // taken from the back
  std::vector<uint32_t> dead_;
  uint32_t limit_ = 0;
  size_t live_ = 0;
};

}  // namespace gryph::matcher_internal

#endif  // GRYPH_LIB_MATCHER_RANGE_INDEX_H_
