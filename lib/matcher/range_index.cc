#include "lib/matcher/range_index.h"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstring>
#include <new>
#include <utility>
#include <variant>

namespace gryph::matcher_internal {

namespace {

// Terms of a grid up to which one cell (no cuts) is cheapest: a row of comparisons.
constexpr size_t kSingleCell = 64;
// Bound values sampled to choose a grid's cuts.
constexpr size_t kSample = 4096;

}  // namespace

uint32_t RangeIndex::TargetBuckets(size_t terms) {
  // About sqrt(terms) / 4, a power of two: the cells an event visits grow as B^2 / 4 and the
  // terms it compares in row and column b as 2 * terms / B; this keeps both small next to the
  // terms it decrements.
  if (terms < kSingleCell) return 1;
  const double target = std::sqrt(static_cast<double>(terms)) / 4;
  uint32_t b = 1;
  while (b * 2 <= target && b * 2 <= kMaxBuckets) b *= 2;
  return b;
}

RangeIndex::Block* RangeIndex::Block::New(uint32_t capacity) {
  void* p = ::operator new(sizeof(Block) + capacity * (sizeof(uint32_t) + sizeof(Bounds)));
  Block* b = new (p) Block;
  b->capacity = capacity;
  b->in_arena = 0;
  return b;
}

void RangeIndex::Block::Free(void* block) { ::operator delete(block); }

size_t RangeIndex::Block::ArenaBytes(uint32_t capacity) {
  const size_t bytes = sizeof(Block) + capacity * (sizeof(uint32_t) + sizeof(Bounds));
  return (bytes + kArenaAlign - 1) & ~(kArenaAlign - 1);
}

RangeIndex::Grid::Grid(std::vector<float> c)
    : cuts(std::move(c)),
      buckets(static_cast<uint32_t>(cuts.size()) + 1),
      cells(new Cell[cell_count()]),
      rows(new std::atomic<uint64_t>[buckets]) {
  for (uint32_t i = 0; i < buckets; ++i) rows[i].store(0, std::memory_order_relaxed);
}

RangeIndex::Grid::~Grid() {
  for (size_t c = 0; c < cell_count(); ++c) {
    Block* b = cells[c].block.load(std::memory_order_relaxed);
    if (b != nullptr && !b->in_arena) Block::Free(b);
  }
}

void RangeIndex::Grid::Lay(const std::vector<uint32_t>& sizes, size_t n) {
  // Room for a quarter more (and a little for small cells): the grid is laid out again once its
  // terms have grown by a quarter, so on even growth few cells leave the arena meanwhile.
  auto room = [](uint32_t size) { return size + size / 4 + 2; };
  size_t bytes = 0;
  for (uint32_t size : sizes) {
    if (size != 0) bytes += Block::ArenaBytes(room(size));
  }
  arena.reset(new std::byte[bytes]);
  std::byte* p = arena.get();
  for (size_t c = 0; c < sizes.size(); ++c) {
    if (sizes[c] == 0) continue;
    Block* b = new (p) Block;
    b->capacity = room(sizes[c]);
    b->in_arena = 1;
    cells[c].block.store(b, std::memory_order_relaxed);
    p += Block::ArenaBytes(b->capacity);
  }
  relayout_at = std::max(kSingleCell, n + n / 4);
}

uint32_t RangeIndex::Grid::Bucket(float v) const {
  // How many cuts are <= v, by a binary search without branches: the answer stays within
  // [first - cuts, first - cuts + n].
  const float* first = cuts.data();
  size_t n = cuts.size();
  if (n == 0) return 0;
  while (n > 1) {
    const size_t half = n / 2;
    // A mask rather than a conditional, which compilers may turn back into a branch (one
    // misprediction in two on random values).
    first += half & (size_t{0} - static_cast<size_t>(first[half - 1] <= v));
    n -= half;
  }
  return static_cast<uint32_t>(first - cuts.data()) + (*first <= v ? 1 : 0);
}

size_t RangeIndex::Grid::CellOf(Bounds b) const {
  const uint32_t i = Bucket(b.lo);
  // An empty range (lo > hi, which no value satisfies) goes to (i, i), where the comparison of
  // both bounds refuses every value.
  return CellIndex(i, std::max(i, Bucket(b.hi)));
}

RangeIndex::Block* RangeIndex::Grid::File(uint32_t slot, Bounds b, size_t cell) {
  Cell& c = cells[cell];
  const uint32_t n = c.size.load(std::memory_order_relaxed);
  Block* block = c.block.load(std::memory_order_relaxed);
  Block* replaced = nullptr;
  if (block == nullptr || n == block->capacity) {
    // Full: a copy twice as large, published before the entry that needs it.
    Block* grown = Block::New(block == nullptr ? 4 : 2 * block->capacity);
    if (block != nullptr) {
      std::memcpy(grown->slots(), block->slots(), n * sizeof(uint32_t));
      std::memcpy(grown->bounds(), block->bounds(), n * sizeof(Bounds));
    }
    c.block.store(grown, std::memory_order_release);
    if (block != nullptr && !block->in_arena) replaced = block;
    block = grown;
  }
  block->slots()[n] = slot;
  block->bounds()[n] = b;
  if (slot > c.max_slot.load(std::memory_order_relaxed)) {
    c.max_slot.store(slot, std::memory_order_relaxed);
  }
  c.size.store(n + 1, std::memory_order_release);
  if (n == 0) {
    // The cell's first term: its row marks it (a mark is never taken back). The owner alone
    // writes rows, so a load and a store do: a locked read-modify-write would wait for every
    // store before it, the appends' misses among them, to complete.
    const uint32_t i = Bucket(b.lo);
    std::atomic<uint64_t>& row = rows[i];
    row.store(row.load(std::memory_order_relaxed) | (uint64_t{1} << (cell - CellIndex(i, i) + i)),
              std::memory_order_release);
  }
  return replaced;
}

template <typename F>
void RangeIndex::Grid::ForEachTerm(F f) const {
  for (size_t c = 0; c < cell_count(); ++c) {
    const uint32_t n = cells[c].size.load(std::memory_order_relaxed);
    if (n == 0) continue;
    const Block* b = cells[c].block.load(std::memory_order_relaxed);
    for (uint32_t e = 0; e < n; ++e) f(b->slots()[e], b->bounds()[e]);
  }
}

RangeIndex::~RangeIndex() {
  for (const Retired& r : retired_) r.free(r.p);
  delete table_.load(std::memory_order_relaxed);
}

void RangeIndex::Reclaim(int copy) {
  if (retired_.empty()) return;
  size_t kept = 0;
  for (const Retired& r : retired_) {
    if (r.copy == copy) {
      retired_[kept++] = r;
    } else {
      r.free(r.p);
    }
  }
  retired_.resize(kept);
}

void RangeIndex::PublishTable(int copy) {
  auto* table = new GridTable;
  for (uint32_t attr = 0; attr < grids_.size(); ++attr) {
    if (grids_[attr] != nullptr) table->emplace_back(attr, grids_[attr].get());
  }
  const GridTable* old = table_.exchange(table, std::memory_order_acq_rel);
  if (old != nullptr) {
    Retire(copy, const_cast<GridTable*>(old), [](void* p) { delete static_cast<GridTable*>(p); });
  }
}

void RangeIndex::Replace(int copy, uint32_t attr, std::unique_ptr<Grid> grid) {
  if (grids_[attr] != nullptr) {
    Retire(copy, grids_[attr].release(), [](void* p) { delete static_cast<Grid*>(p); });
  }
  grids_[attr] = std::move(grid);
}

uint32_t RangeIndex::buckets(uint32_t attr) const {
  return attr < grids_.size() && grids_[attr] != nullptr ? grids_[attr]->buckets : 0;
}

uint32_t RangeIndex::File(int copy, absl::Span<const RangeTerm> terms) {
  Reclaim(copy);
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = limit_++;
    terms_.push_back(0);
  }
  terms_[slot] = static_cast<uint8_t>(terms.size());
  filed_++;
  unflushed_copy_ = copy;
  for (const RangeTerm& t : terms) unflushed_.push_back(Unflushed{t.attr, slot, {t.lo, t.hi}});
  return slot;
}

void RangeIndex::Flush(int copy) {
  if (unflushed_.empty()) return;
  Reclaim(copy);
  // The grids first (a new attribute's has one cell until it is rebuilt), then each term's cell.
  bool added = false;
  for (Unflushed& u : unflushed_) {
    if (u.attr >= grids_.size()) grids_.resize(u.attr + 1);
    std::unique_ptr<Grid>& g = grids_[u.attr];
    if (g == nullptr) {
      g = std::make_unique<Grid>(std::vector<float>());
      g->rebuild_at = g->relayout_at = kSingleCell;
      added = true;
    }
    u.cell = static_cast<uint32_t>(g->CellOf(u.bounds));
  }
  if (added) PublishTable(copy);
  // The cells are scattered over megabytes: each term's cell header is asked for 2 * kAhead terms
  // before its append, the end of its cell's arrays kAhead terms before, so that the misses of
  // many terms overlap instead of following each other.
  constexpr size_t kAhead = 8;
  const size_t n = unflushed_.size();
  auto cell_of = [this](const Unflushed& u) -> const Cell& {
    return grids_[u.attr]->cells[u.cell];
  };
  auto fetch_cell = [&](size_t i) { __builtin_prefetch(&cell_of(unflushed_[i])); };
  auto fetch_end = [&](size_t i) {
    const Cell& c = cell_of(unflushed_[i]);
    if (const Block* b = c.block.load(std::memory_order_relaxed)) {
      const uint32_t end = c.size.load(std::memory_order_relaxed);
      if (end < b->capacity) {
        __builtin_prefetch(b->slots() + end, 1);
        __builtin_prefetch(b->bounds() + end, 1);
      }
    }
  };
  for (size_t i = 0; i < std::min(n, 2 * kAhead); ++i) fetch_cell(i);
  for (size_t i = 0; i < std::min(n, kAhead); ++i) fetch_end(i);
  for (size_t i = 0; i < n; ++i) {
    if (i + 2 * kAhead < n) fetch_cell(i + 2 * kAhead);
    if (i + kAhead < n) fetch_end(i + kAhead);
    const Unflushed& u = unflushed_[i];
    Grid& g = *grids_[u.attr];
    if (Block* replaced = g.File(u.slot, u.bounds, u.cell)) Retire(copy, replaced, &Block::Free);
    g.terms++;
  }
  // Each grid that grew past a threshold is rebuilt (new cuts), or laid out again, once.
  bool replaced = false;
  for (const Unflushed& u : unflushed_) {
    Grid& g = *grids_[u.attr];
    if (g.terms >= g.rebuild_at) {
      Replace(copy, u.attr, Rebuilt(g));
      replaced = true;
    } else if (g.terms >= g.relayout_at) {
      Replace(copy, u.attr, Relaid(g));
      replaced = true;
    }
  }
  if (replaced) PublishTable(copy);
  unflushed_.clear();
}

void RangeIndex::Enter(int copy, uint32_t slot, const Record* owner) {
  assert(unflushed_.empty() || copy == unflushed_copy_);
  Reclaim(copy);
  View& v = views_[copy];
  if (v.need.size() <= slot) {
    v.need.resize(slot + 1, 0);
    v.owners.resize(slot + 1, nullptr);
  }
  v.need[slot] = terms_[slot] & ~kLeftOne;
  v.owners[slot] = owner;
  v.live++;
}

bool RangeIndex::Leave(int copy, uint32_t slot) {
  assert(unflushed_.empty() || copy == unflushed_copy_);
  Reclaim(copy);
  View& v = views_[copy];
  v.need[slot] = 0;
  v.owners[slot] = nullptr;
  v.live--;
  while (!v.need.empty() && v.need.back() == 0) {
    v.need.pop_back();
    v.owners.pop_back();
  }
  // Each copy enters and leaves each slot once, in the same order of changes.
  if ((terms_[slot] & kLeftOne) == 0) {
    terms_[slot] |= kLeftOne;  // the other copy has yet to leave it
    return false;
  }
  terms_[slot] = 0;
  filed_--;
  dead_.push_back(slot);
  if (dead_.size() > filed_ / 2 + kSingleCell) Purge(copy);
  return true;
}

std::unique_ptr<RangeIndex::Grid> RangeIndex::Rebuilt(const Grid& g) const {
  // The filed terms' bounds, sampled evenly, choose the cuts: quantiles of the bounds, so that
  // each bucket holds about as many bounds (hence rows and columns about as many terms).
  size_t live = 0;
  g.ForEachTerm([&](uint32_t s, Bounds) { live += terms_[s] != 0; });
  if (live == 0) return nullptr;
  const uint32_t target = TargetBuckets(live);
  std::vector<float> sample;
  if (target > 1) {
    const size_t stride = std::max<size_t>(1, 2 * live / kSample);
    size_t k = 0;
    g.ForEachTerm([&](uint32_t s, Bounds b) {
      if (terms_[s] == 0 || k++ % stride != 0) return;
      for (float v : {b.lo, b.hi}) {
        if (std::isfinite(v)) sample.push_back(v);
      }
    });
    std::sort(sample.begin(), sample.end());
  }
  std::vector<float> cuts;
  if (!sample.empty()) {
    for (uint32_t q = 1; q < target; ++q) {
      const float v = sample[sample.size() * q / target];
      if (cuts.empty() || v > cuts.back()) cuts.push_back(v);
    }
  }
  auto next = std::make_unique<Grid>(std::move(cuts));
  // Sized before filing: no block of the new grid is ever replaced.
  std::vector<uint32_t> sizes(next->cell_count(), 0);
  g.ForEachTerm([&](uint32_t s, Bounds b) {
    if (terms_[s] != 0) sizes[next->CellOf(b)]++;
  });
  next->Lay(sizes, live);
  g.ForEachTerm([&](uint32_t s, Bounds b) {
    if (terms_[s] != 0) next->File(s, b, next->CellOf(b));
  });
  next->terms = live;
  next->rebuild_at = std::max(kSingleCell, 4 * live);
  return next;
}

std::unique_ptr<RangeIndex::Grid> RangeIndex::Compacted(const Grid& g) const {
  // Same cuts, same cells: each keeps its filed terms.
  std::vector<uint32_t> kept(g.cell_count(), 0);
  size_t live = 0;
  for (size_t c = 0; c < g.cell_count(); ++c) {
    const uint32_t n = g.cells[c].size.load(std::memory_order_relaxed);
    if (n == 0) continue;
    const Block* b = g.cells[c].block.load(std::memory_order_relaxed);
    for (uint32_t e = 0; e < n; ++e) kept[c] += terms_[b->slots()[e]] != 0;
    live += kept[c];
  }
  if (live == 0) return nullptr;
  auto next = std::make_unique<Grid>(g.cuts);
  next->Lay(kept, live);
  for (size_t c = 0; c < g.cell_count(); ++c) {
    if (kept[c] == 0) continue;
    const Block* b = g.cells[c].block.load(std::memory_order_relaxed);
    const uint32_t n = g.cells[c].size.load(std::memory_order_relaxed);
    for (uint32_t e = 0; e < n; ++e) {
      if (terms_[b->slots()[e]] != 0) next->File(b->slots()[e], b->bounds()[e], c);
    }
  }
  next->terms = live;
  next->rebuild_at = std::max(kSingleCell, 4 * live);
  return next;
}

std::unique_ptr<RangeIndex::Grid> RangeIndex::Relaid(const Grid& g) {
  auto next = std::make_unique<Grid>(g.cuts);
  std::vector<uint32_t> sizes(g.cell_count());
  for (size_t c = 0; c < g.cell_count(); ++c) {
    sizes[c] = g.cells[c].size.load(std::memory_order_relaxed);
  }
  next->Lay(sizes, g.terms);
  for (size_t c = 0; c < g.cell_count(); ++c) {
    const uint32_t n = sizes[c];
    if (n == 0) continue;
    const Block* from = g.cells[c].block.load(std::memory_order_relaxed);
    Cell& to = next->cells[c];
    Block* b = to.block.load(std::memory_order_relaxed);
    std::memcpy(b->slots(), from->slots(), n * sizeof(uint32_t));
    std::memcpy(b->bounds(), from->bounds(), n * sizeof(Bounds));
    to.max_slot.store(g.cells[c].max_slot.load(std::memory_order_relaxed),
                      std::memory_order_relaxed);
    to.size.store(n, std::memory_order_relaxed);
  }
  for (uint32_t i = 0; i < g.buckets; ++i) {
    next->rows[i].store(g.rows[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  next->terms = g.terms;
  next->rebuild_at = g.rebuild_at;
  return next;
}

void RangeIndex::Purge(int copy) {
  for (uint32_t attr = 0; attr < grids_.size(); ++attr) {
    const Grid* g = grids_[attr].get();
    if (g == nullptr) continue;
    std::unique_ptr<Grid> next = Compacted(*g);
    // Shrunk a lot: fewer buckets, cut for what is left.
    if (next != nullptr && TargetBuckets(next->terms) * 2 < next->buckets) next = Rebuilt(*next);
    Replace(copy, attr, std::move(next));
  }
  PublishTable(copy);
  // Dead slots become free; free slots at the top are given back, so that the slot numbers stay
  // dense.
  for (uint32_t s : dead_) free_.push_back(s);
  dead_.clear();
  while (limit_ > 0 && terms_[limit_ - 1] == 0) limit_--;
  terms_.resize(limit_);
  free_.erase(
      std::remove_if(free_.begin(), free_.end(), [this](uint32_t s) { return s >= limit_; }),
      free_.end());
}

namespace {

// Decrements the counts of the n terms of one cell that hold x: all of them in the interior
// (kLo = kHi = false), else those whose compared bounds hold it. With kClamp, slots at or past
// `limit` are counted at counts[limit].
template <bool kClamp, bool kLo, bool kHi, typename Bounds>
void MatchCell(const uint32_t* slots, const Bounds* bounds, uint32_t n, float x, uint8_t* counts,
               uint32_t limit, std::vector<uint32_t>& survivors) {
  for (uint32_t e = 0; e < n; ++e) {
    const uint32_t s = kClamp ? std::min(slots[e], limit) : slots[e];
    if constexpr (kLo) {
      if (!(bounds[e].lo <= x)) continue;
    }
    if constexpr (kHi) {
      if (!(x <= bounds[e].hi)) continue;
    }
    if (--counts[s] == 0) survivors.push_back(s);
  }
}

template <bool kClamp, typename Bounds>
void MatchCell(bool lo, bool hi, const uint32_t* slots, const Bounds* bounds, uint32_t n, float x,
               uint8_t* counts, uint32_t limit, std::vector<uint32_t>& survivors) {
  if (lo && hi) {
    MatchCell<kClamp, true, true>(slots, bounds, n, x, counts, limit, survivors);
  } else if (lo) {
    MatchCell<kClamp, true, false>(slots, bounds, n, x, counts, limit, survivors);
  } else if (hi) {
    MatchCell<kClamp, false, true>(slots, bounds, n, x, counts, limit, survivors);
  } else {
    MatchCell<kClamp, false, false>(slots, bounds, n, x, counts, limit, survivors);
  }
}

}  // namespace

void RangeIndex::Grid::Match(float x, uint8_t* counts, uint32_t limit,
                             std::vector<uint32_t>& survivors) const {
  const uint32_t b = Bucket(x);
  const uint64_t from_b = ~uint64_t{0} << b;  // columns j >= b
  for (uint32_t i = 0; i <= b; ++i) {
    uint64_t m = rows[i].load(std::memory_order_relaxed) & from_b;
    const size_t row = CellIndex(i, i) - i;  // cell (i, j) is row + j
    while (m != 0) {
      const uint32_t j = static_cast<uint32_t>(__builtin_ctzll(m));
      m &= m - 1;
      const Cell& c = cells[row + j];
      // The size first: a block and a highest slot loaded after it hold at least its entries.
      const uint32_t n = c.size.load(std::memory_order_acquire);
      if (n == 0) continue;
      const Block* block = c.block.load(std::memory_order_acquire);
      // Only row b compares lower bounds, only column b upper ones; the interior holds x.
      const bool lo = i == b, hi = j == b;
      if (c.max_slot.load(std::memory_order_relaxed) < limit) {
        MatchCell<false>(lo, hi, block->slots(), block->bounds(), n, x, counts, limit, survivors);
      } else {  // holds slots filed since this copy's counts were set
        MatchCell<true>(lo, hi, block->slots(), block->bounds(), n, x, counts, limit, survivors);
      }
    }
  }
}

bool RangeIndex::Match(int copy, const AttributeValue* const* values, RangeScratch& scratch) const {
  scratch.survivors.clear();
  const View& v = views_[copy];
  if (v.live == 0) return true;
  // Slots past this copy's counts (filed since, for the other copy) go to a sink past them.
  const uint32_t limit = static_cast<uint32_t>(v.need.size());
  if (scratch.counts.size() <= limit) scratch.counts.resize(limit + 1);
  uint8_t* counts = scratch.counts.data();
  std::memcpy(counts, v.need.data(), limit);
  counts[limit] = 0;
  bool exact = true;
  const GridTable* table = table_.load(std::memory_order_acquire);
  for (const auto& [attr, grid] : *table) {
    const AttributeValue* value = values[attr];
    if (value == nullptr) continue;
    double d;
    if (const int64_t* i = std::get_if<int64_t>(value)) {
      d = static_cast<double>(*i);
      // Exact when the double converts back (2^63 itself is out of int64's range).
      if (!(d < 0x1p63 && static_cast<int64_t>(d) == *i)) exact = false;
    } else if (const double* x = std::get_if<double>(value)) {
      d = *x;
      if (std::isnan(d)) continue;  // UNKNOWN: no term holds
    } else {
      continue;  // a string or boolean: no range term holds (FALSE)
    }
    const float x = FloatRounding::Nearest(d);
    if (static_cast<double>(x) != d) exact = false;
    grid->Match(x, counts, limit, scratch.survivors);
  }
  // The sink may have wrapped to zero.
  std::vector<uint32_t>& survivors = scratch.survivors;
  survivors.erase(std::remove(survivors.begin(), survivors.end(), limit), survivors.end());
  return exact;
}

}  // namespace gryph::matcher_internal
