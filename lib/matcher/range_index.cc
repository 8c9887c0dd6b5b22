#include "lib/matcher/range_index.h"

#include <algorithm>
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

uint32_t RangeIndex::Grid::Bucket(float v) const {
  return static_cast<uint32_t>(std::upper_bound(cuts.begin(), cuts.end(), v) - cuts.begin());
}

size_t RangeIndex::Grid::CellOf(Bounds b) const {
  const uint32_t i = Bucket(b.lo);
  // An empty range (lo > hi, which no value satisfies) goes to (i, i), where the comparison of
  // both bounds refuses every value.
  return CellIndex(i, std::max(i, Bucket(b.hi)));
}

void RangeIndex::Grid::File(uint32_t slot, Bounds b, size_t cell) {
  Cell& c = cells[cell];
  c.slots.push_back(slot);
  c.bounds.push_back(b);
  const uint32_t i = Bucket(b.lo);
  rows[i] |= uint64_t{1} << (cell - CellIndex(i, i) + i);
}

uint32_t RangeIndex::buckets(uint32_t attr) const {
  auto it = grids_.find(attr);
  return it == grids_.end() ? 0 : it->second->buckets;
}

uint32_t RangeIndex::Add(absl::Span<const RangeTerm> terms, const Record* owner) {
  // The free list may hold slots since given back past limit_, or taken again (see Purge).
  uint32_t slot = limit_;
  while (!free_.empty()) {
    const uint32_t s = free_.back();
    free_.pop_back();
    if (s < limit_ && owners_[s] == nullptr) {
      slot = s;
      break;
    }
  }
  if (slot == limit_) {
    limit_++;
    need_.push_back(0);
    owners_.push_back(nullptr);
  }
  need_[slot] = static_cast<uint8_t>(terms.size());
  owners_[slot] = owner;
  live_++;
  // The terms' cells are scattered over megabytes: first each cell's header is asked for, then
  // the ends of its arrays, then the terms are appended, so that the misses of all the terms
  // overlap instead of following each other.
  Grid* grids[kMaxTerms];
  size_t cells[kMaxTerms];
  const size_t n = terms.size();
  for (size_t k = 0; k < n; ++k) {
    std::unique_ptr<Grid>& g = grids_[terms[k].attr];
    if (g == nullptr) {
      g = std::make_unique<Grid>();
      g->cells.resize(1);
      g->rows.resize(1);
      g->rebuild_at = kSingleCell;
    }
    grids[k] = g.get();
    cells[k] = g->CellOf(Bounds{terms[k].lo, terms[k].hi});
    __builtin_prefetch(&g->cells[cells[k]]);
  }
  for (size_t k = 0; k < n; ++k) {
    const Cell& c = grids[k]->cells[cells[k]];
    __builtin_prefetch(c.slots.data() + c.slots.size(), 1);
    __builtin_prefetch(c.bounds.data() + c.bounds.size(), 1);
  }
  for (size_t k = 0; k < n; ++k) {
    Grid& g = *grids[k];
    g.File(slot, Bounds{terms[k].lo, terms[k].hi}, cells[k]);
    if (++g.terms >= g.rebuild_at) Rebuild(g);
  }
  return slot;
}

void RangeIndex::Remove(uint32_t slot) {
  need_[slot] = 0;
  owners_[slot] = kDead;
  live_--;
  dead_.push_back(slot);
  if (live_ == 0) {
    // Nothing left: drop everything at once.
    grids_.clear();
    need_.clear();
    owners_.clear();
    free_.clear();
    dead_.clear();
    limit_ = 0;
    return;
  }
  if (dead_.size() > live_ / 2 + kSingleCell) Purge();
}

void RangeIndex::Rebuild(Grid& g) const {
  // The live terms' bounds, sampled evenly, choose the cuts: quantiles of the bounds, so that
  // each bucket holds about as many bounds (hence rows and columns about as many terms).
  size_t live = 0;
  for (const Cell& c : g.cells) {
    for (uint32_t s : c.slots) live += need_[s] != 0;
  }
  const uint32_t target = TargetBuckets(live);
  std::vector<float> sample;
  if (target > 1) {
    const size_t stride = std::max<size_t>(1, 2 * live / kSample);
    size_t k = 0;
    for (const Cell& c : g.cells) {
      for (size_t e = 0; e < c.slots.size(); ++e) {
        if (need_[c.slots[e]] == 0) continue;
        if (k++ % stride != 0) continue;
        for (float v : {c.bounds[e].lo, c.bounds[e].hi}) {
          if (std::isfinite(v)) sample.push_back(v);
        }
      }
    }
    std::sort(sample.begin(), sample.end());
  }
  std::vector<float> cuts;
  if (!sample.empty()) {
    for (uint32_t q = 1; q < target; ++q) {
      const float v = sample[sample.size() * q / target];
      if (cuts.empty() || v > cuts.back()) cuts.push_back(v);
    }
  }
  Grid next;
  next.cuts = std::move(cuts);
  next.buckets = static_cast<uint32_t>(next.cuts.size()) + 1;
  next.cells.resize(static_cast<size_t>(next.buckets) * (next.buckets + 1) / 2);
  next.rows.assign(next.buckets, 0);
  for (const Cell& c : g.cells) {
    for (size_t e = 0; e < c.slots.size(); ++e) {
      if (need_[c.slots[e]] != 0) next.File(c.slots[e], c.bounds[e], next.CellOf(c.bounds[e]));
    }
  }
  next.terms = live;
  next.rebuild_at = std::max(kSingleCell, 4 * live);
  g = std::move(next);
}

void RangeIndex::Purge() {
  for (auto it = grids_.begin(); it != grids_.end();) {
    Grid& g = *it->second;
    size_t live = 0;
    for (uint32_t i = 0; i < g.buckets; ++i) {
      for (uint32_t j = i; j < g.buckets; ++j) {
        Cell& c = g.cells[g.CellIndex(i, j)];
        size_t kept = 0;
        for (size_t e = 0; e < c.slots.size(); ++e) {
          if (need_[c.slots[e]] == 0) continue;
          c.slots[kept] = c.slots[e];
          c.bounds[kept] = c.bounds[e];
          kept++;
        }
        c.slots.resize(kept);
        c.bounds.resize(kept);
        if (c.slots.capacity() > 16 && kept < c.slots.capacity() / 4) {
          c.slots.shrink_to_fit();
          c.bounds.shrink_to_fit();
        }
        if (kept == 0) g.rows[i] &= ~(uint64_t{1} << j);
        live += kept;
      }
    }
    g.terms = live;
    if (live == 0) {
      grids_.erase(it++);
      continue;
    }
    // Shrunk a lot: fewer buckets (and cuts from what is left).
    if (TargetBuckets(live) * 2 < g.buckets) Rebuild(g);
    g.rebuild_at = std::max(kSingleCell, 4 * live);
    ++it;
  }
  // Dead slots become free; free slots at the top are given back, so that Match copies and
  // counts only up to the highest slot in use. Entries of free_ past limit_ (or taken again
  // since, once limit_ grew back over them) are dropped when popped: Add checks each.
  for (uint32_t s : dead_) {
    owners_[s] = nullptr;
    free_.push_back(s);
  }
  dead_.clear();
  while (limit_ > 0 && owners_[limit_ - 1] == nullptr) limit_--;
  need_.resize(limit_);
  owners_.resize(limit_);
  if (free_.size() > 2 * static_cast<size_t>(limit_) + kSingleCell) {
    free_.clear();  // mostly stale: list the free slots afresh
    for (uint32_t s = limit_; s-- > 0;) {
      if (owners_[s] == nullptr) free_.push_back(s);
    }
  }
}

void RangeIndex::Grid::Match(float x, uint8_t* counts, std::vector<uint32_t>& survivors) const {
  const uint32_t b = Bucket(x);
  const uint64_t from_b = ~uint64_t{0} << b;  // columns j >= b
  for (uint32_t i = 0; i <= b; ++i) {
    uint64_t m = rows[i] & from_b;
    const size_t row = CellIndex(i, i) - i;  // cell (i, j) is row + j
    while (m != 0) {
      const uint32_t j = static_cast<uint32_t>(__builtin_ctzll(m));
      m &= m - 1;
      const Cell& c = cells[row + j];
      const uint32_t* slots = c.slots.data();
      const size_t n = c.slots.size();
      if (i < b && j > b) {
        // Interior: every term holds x.
        for (size_t e = 0; e < n; ++e) {
          if (--counts[slots[e]] == 0) survivors.push_back(slots[e]);
        }
        continue;
      }
      const Bounds* bounds = c.bounds.data();
      if (i == b && j == b) {
        for (size_t e = 0; e < n; ++e) {
          if (bounds[e].lo <= x && x <= bounds[e].hi && --counts[slots[e]] == 0) {
            survivors.push_back(slots[e]);
          }
        }
      } else if (i == b) {
        for (size_t e = 0; e < n; ++e) {
          if (bounds[e].lo <= x && --counts[slots[e]] == 0) survivors.push_back(slots[e]);
        }
      } else {
        for (size_t e = 0; e < n; ++e) {
          if (x <= bounds[e].hi && --counts[slots[e]] == 0) survivors.push_back(slots[e]);
        }
      }
    }
  }
}

bool RangeIndex::Match(const AttributeValue* const* values, RangeScratch& scratch) const {
  scratch.survivors.clear();
  if (live_ == 0) return true;
  if (scratch.counts.size() < limit_) scratch.counts.resize(limit_);
  uint8_t* counts = scratch.counts.data();
  std::memcpy(counts, need_.data(), limit_);
  bool exact = true;
  for (const auto& [attr, grid] : grids_) {
    const AttributeValue* v = values[attr];
    if (v == nullptr) continue;
    double d;
    if (const int64_t* i = std::get_if<int64_t>(v)) {
      d = static_cast<double>(*i);
      // Exact when the double converts back (2^63 itself is out of int64's range).
      if (!(d < 0x1p63 && static_cast<int64_t>(d) == *i)) exact = false;
    } else if (const double* x = std::get_if<double>(v)) {
      d = *x;
      if (std::isnan(d)) continue;  // UNKNOWN: no term holds
    } else {
      continue;  // a string or boolean: no range term holds (FALSE)
    }
    const float x = FloatRounding::Nearest(d);
    if (static_cast<double>(x) != d) exact = false;
    grid->Match(x, counts, scratch.survivors);
  }
  return exact;
}

}  // namespace gryph::matcher_internal
