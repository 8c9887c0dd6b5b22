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
// of a B x B upper triangle; a cell holds its terms' slots and, after them in the same block,
// their bounds. For an event value x in bucket b, the cells (i, j) with i <= b <= j are those whose
// terms can hold x: the interior ones (i < b < j) hold x whatever the bounds, and only the cells
// of row b and column b compare a bound. A 64-bit mask per row marks its non-empty cells, so an
// event visits only those.
//
// Matching counts down: each Match copies its copy's per-slot term counts (`need`) into a per-call
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
// survivor is verified by the caller: a proven record by its terms compared exactly
// (Record::TermsHold), any other by its checks.
//
// Layout. Matching streams through the blocks of the cells it visits, in cell order: a grid lays
// its blocks out one after the other in that order, in one arena, each with a quarter's room,
// when it is built and again whenever its terms have grown by a quarter (a copy, dead terms
// included); a cell that outgrows its place moves to a block of its own until then.
//
// Sharing. The matcher keeps two copies of its index for its readers (lib/matcher/matcher.cc,
// left-right), but one range index serves both: the terms are filed once, and each copy has its
// own view of which slots are live in it (a count per slot, 0 when not live, and the owners).
// Flush appends terms while readers of the other copy may be matching: a cell is
// an array that only grows while its grid is published (an atomic size, published after the
// entry, and an atomic pointer to the array, replaced by a larger copy when full), and a grid or
// the table of grids is replaced whole, by an atomic pointer, when rebuilt, laid out or purged. A
// reader never reports what it may see half done: a slot filed or revived since its copy's counts
// were set has count 0 there (it wraps), and a slot outside its copy's counts is counted in a sink
// that is never reported (a cell records its highest slot, so that only cells holding such
// slots check for them). What a change replaces is retired, tagged with the copy being changed,
// and freed by the first change to the other copy: the matcher changes a copy only once no
// reader is left in it, and readers that began after the change never see what it retired.
//
// Removal is lazy: Leave sets a slot's count in that copy to 0; once the slot is live in neither
// copy it is dead, its terms stay in their cells, and the slot is not reused until a purge drops
// the dead terms of every grid — once dead slots outnumber half the filed ones — so a removal
// costs O(1) amortized and needs no per-term positions. A grid is rebuilt (new cuts, terms
// refiled) whenever its terms reach 4 times what they were at its last build, so filling costs
// O(1) amortized per term too. File sets a subscription's terms aside; Flush appends a batch of
// them (a publication's), fetching each term's cell and then the end of its arrays a few terms
// ahead of its append, so that the cache misses of many terms overlap.
//
// Invariants:
//   - terms_[s] is the number of terms of a filed slot s, 1..kMaxTerms (plus kLeftOne once one
//     copy has left it), and 0 for a dead or free one; dead slots are in dead_, free ones below
//     limit_ in free_ (exactly those). Each copy enters and leaves a filed slot once, in the
//     order of the changes (an add and a remove may both reach one copy before the other): it
//     is dead once both have left it.
//   - A copy's need[s] is terms_[s] (without kLeftOne) when s is live in that copy, else 0 (need
//     has no trailing zeros); its owners[s] is the record of a slot live in it.
//   - Every filed slot s has exactly terms_[s] terms filed, in the grids of distinct attributes;
//     dead slots may have terms filed; free slots have none.
//   - A term with bounds lo, hi is in cell (Bucket(lo), max(Bucket(lo), Bucket(hi))) of its
//     attribute's grid; rows[i] has bit j set if cell (i, j) holds a term (live or dead).
//   - table_ lists exactly the grids of grids_, by attribute id.
//
// Thread-safety: File, Enter, Leave and Ref/Unref are the owner's, one thread, and change the
// view of `copy` only while no reader is matching that copy. Match is const and keeps its state
// in the caller's RangeScratch (one per thread or call): any number of threads may match a copy
// while the owner changes the other.

#ifndef GRYPH_LIB_MATCHER_RANGE_INDEX_H_
#define GRYPH_LIB_MATCHER_RANGE_INDEX_H_

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

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
  ~RangeIndex();
  RangeIndex(const RangeIndex&) = delete;
  RangeIndex& operator=(const RangeIndex&) = delete;

  // Files a subscription made of `terms`, live in neither copy yet; returns its slot. `copy` is
  // the copy being changed. The terms reach their cells at the next Flush(copy), which must come
  // before `copy` is matched or the other copy changed. REQUIRES: 1 <= terms.size() <=
  // kMaxTerms, distinct attributes, no NaN bound; no reader in `copy`.
  uint32_t File(int copy, absl::Span<const RangeTerm> terms);
  // Appends the terms filed since the last Flush to their cells, all together: the cells are
  // scattered over megabytes, and a batch fetches each ahead of its append, so that the misses
  // overlap. Rebuilds each grid that grew past its threshold. REQUIRES: no reader in `copy`.
  void Flush(int copy);
  // Whether terms filed wait for Flush.
  bool unflushed() const { return !unflushed_.empty(); }
  // Makes `slot` live in `copy`, where Match reports it as `owner` (not null).
  // REQUIRES: slot was filed and is not dead, nor live in `copy`; no reader in `copy`.
  void Enter(int copy, uint32_t slot, const Record* owner);
  // Ends `slot` in `copy`; returns whether it is now dead (left by both copies).
  // REQUIRES: slot is live in `copy`; no reader in `copy`.
  bool Leave(int copy, uint32_t slot);

  // Sets scratch.survivors to the slots live in `copy` all of whose terms hold for the float
  // roundings of the numeric values in `values` (by attribute id; nullptr: absent; each grid's
  // attribute id must index it). Returns whether every value it read was exactly a float (see
  // above).
  bool Match(int copy, const AttributeValue* const* values, RangeScratch& scratch) const;

  // The record of a survivor of Match(copy, ...).
  const Record* owner(int copy, uint32_t slot) const { return views_[copy].owners[slot]; }
  // Subscriptions live in `copy`.
  size_t size(int copy) const { return views_[copy].live; }
  bool empty(int copy) const { return views_[copy].live == 0; }

  // Shared ownership (owner only) by the groups of both index copies, and by each subscription
  // from its File until it is dead: Unref returns whether that was the last reference.
  void Ref() { refs_++; }
  bool Unref() { return --refs_ == 0; }

  // For tests: the grids' bucket counts, the slots not yet reusable, and the things retired and
  // not yet freed.
  uint32_t buckets(uint32_t attr) const;
  size_t dead() const { return dead_.size(); }
  size_t retired() const { return retired_.size(); }

 private:
  struct Bounds {
    float lo;
    float hi;
  };
  // A cell's entries: `capacity` slots, then as many bounds, in one allocation of its own or in
  // its grid's arena.
  struct Block {
    uint32_t capacity;
    uint32_t in_arena;  // freed with its grid's arena, never alone
    uint32_t* slots() { return reinterpret_cast<uint32_t*>(this + 1); }
    Bounds* bounds() { return reinterpret_cast<Bounds*>(slots() + capacity); }
    const uint32_t* slots() const { return reinterpret_cast<const uint32_t*>(this + 1); }
    const Bounds* bounds() const { return reinterpret_cast<const Bounds*>(slots() + capacity); }
    static Block* New(uint32_t capacity);
    static void Free(void* block);
    // The bytes a block of `capacity` takes in an arena (a multiple of kArenaAlign).
    static size_t ArenaBytes(uint32_t capacity);
    static constexpr size_t kArenaAlign = 16;
  };
  static_assert(sizeof(Block) % alignof(Bounds) == 0 && alignof(Bounds) <= alignof(Block));
  // Grows only while its grid is published; entries [0, size) of `block` are complete.
  struct Cell {
    std::atomic<uint32_t> size{0};
    std::atomic<uint32_t> max_slot{0};  // the highest slot of an entry
    std::atomic<Block*> block{nullptr};
  };
  struct Grid {
    explicit Grid(std::vector<float> cuts);
    ~Grid();
    Grid(const Grid&) = delete;
    Grid& operator=(const Grid&) = delete;

    const std::vector<float> cuts;  // sorted, distinct: bucket(v) = how many cuts are <= v
    const uint32_t buckets;         // cuts.size() + 1
    std::unique_ptr<Cell[]> cells;  // (i, j) for i <= j, row by row
    std::unique_ptr<std::atomic<uint64_t>[]> rows;
    // The blocks laid out when the grid was made, one after the other in cell order (the order
    // in which Match visits them), each with room to grow by a quarter; a cell that outgrows its
    // place moves to a block of its own.
    std::unique_ptr<std::byte[]> arena;
    size_t terms = 0;        // filed, live and dead (owner only)
    size_t rebuild_at = 0;   // terms at which the grid is rebuilt (owner only)
    size_t relayout_at = 0;  // terms at which it is laid out again, same cuts (owner only)

    // Gives each cell c with sizes[c] > 0 an empty block in a new arena, room included, and
    // sets relayout_at for `terms` terms. REQUIRES: no block yet.
    void Lay(const std::vector<uint32_t>& sizes, size_t terms);

    uint32_t Bucket(float v) const;
    size_t CellIndex(uint32_t i, uint32_t j) const {
      return static_cast<size_t>(i) * (2 * buckets - i + 1) / 2 + (j - i);
    }
    size_t cell_count() const { return static_cast<size_t>(buckets) * (buckets + 1) / 2; }
    // The cell of a term with bounds b.
    size_t CellOf(Bounds b) const;
    // Appends a term with bounds b to its cell, CellOf(b); returns what it replaced, if anything
    // (the cell's former block), for the caller to retire.
    Block* File(uint32_t slot, Bounds b, size_t cell);
    // Calls f(slot, bounds) for every term filed (owner only).
    template <typename F>
    void ForEachTerm(F f) const;
    // Decrements the counts of the slots whose terms hold x (in bucket b); slots at or past
    // `limit` are counted at counts[limit].
    void Match(float x, uint8_t* counts, uint32_t limit, std::vector<uint32_t>& survivors) const;
  };
  // What readers iterate: the grids, by attribute id. Replaced whole when a grid is.
  using GridTable = std::vector<std::pair<uint32_t, const Grid*>>;
  // One copy's view.
  struct View {
    std::vector<uint8_t> need;          // by slot
    std::vector<const Record*> owners;  // by slot
    size_t live = 0;
  };
  struct Retired {
    int copy;  // changed when retired: freed by a change to the other
    void* p;
    void (*free)(void*);
  };

  // Frees what changes of the other copy retired.
  void Reclaim(int copy);
  void Retire(int copy, void* p, void (*free)(void*)) { retired_.push_back({copy, p, free}); }
  // A grid of `g`'s filed terms (dead ones dropped) under new cuts for them, `g` itself
  // unchanged.
  std::unique_ptr<Grid> Rebuilt(const Grid& g) const;
  // A grid of `g`'s filed terms (dead ones dropped) under the same cuts, or null if none.
  std::unique_ptr<Grid> Compacted(const Grid& g) const;
  // A grid of all of `g`'s terms (dead ones too: a copy, no lookup per term) under the same cuts,
  // laid out anew.
  static std::unique_ptr<Grid> Relaid(const Grid& g);
  // Replaces the grid of `attr` (null: drops it), retiring the old one and the table.
  void Replace(int copy, uint32_t attr, std::unique_ptr<Grid> grid);
  // Publishes a table of grids_, retiring the old one.
  void PublishTable(int copy);
  // Drops the dead slots' terms and makes the slots reusable.
  void Purge(int copy);
  static uint32_t TargetBuckets(size_t terms);

  // In terms_[s]: one copy has left the slot.
  static constexpr uint8_t kLeftOne = 0x80;
  static_assert(kMaxTerms < kLeftOne);

  // A term filed and not yet flushed: its attribute, slot and bounds; its cell, found by Flush.
  struct Unflushed {
    uint32_t attr;
    uint32_t slot;
    Bounds bounds;
    uint32_t cell = 0;
  };

  View views_[2];
  // The owner's.
  std::vector<Unflushed> unflushed_;          // in the order filed
  int unflushed_copy_ = 0;                    // the copy that filed them
  std::vector<std::unique_ptr<Grid>> grids_;  // by attribute id (null: none)
  std::vector<uint8_t> terms_;                // by slot
  std::vector<uint32_t> free_;                // taken from the back
  std::vector<uint32_t> dead_;
  uint32_t limit_ = 0;
  size_t filed_ = 0;  // slots with terms_ != 0
  std::vector<Retired> retired_;
  int refs_ = 0;
  // The readers'.
  std::atomic<const GridTable*> table_{nullptr};
};

// A group's reference to a range index, which the group of the same topic in the other index
// copy shares (owner only).
class RangeIndexRef {
 public:
  RangeIndexRef() = default;
  explicit RangeIndexRef(RangeIndex* index) : index_(index) { index_->Ref(); }
  RangeIndexRef(const RangeIndexRef&) = delete;
  RangeIndexRef& operator=(const RangeIndexRef&) = delete;
  ~RangeIndexRef() { reset(); }

  // Refers to `index` (may be null) instead.
  void reset(RangeIndex* index = nullptr) {
    if (index != nullptr) index->Ref();
    if (index_ != nullptr && index_->Unref()) delete index_;
    index_ = index;
  }
  RangeIndex* get() const { return index_; }
  RangeIndex* operator->() const { return index_; }
  RangeIndex& operator*() const { return *index_; }

 private:
  RangeIndex* index_ = nullptr;
};

}  // namespace gryph::matcher_internal

#endif  // GRYPH_LIB_MATCHER_RANGE_INDEX_H_
