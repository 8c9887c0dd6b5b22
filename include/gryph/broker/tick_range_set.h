// TickRangeSet: a set of ticks kept as disjoint, coalesced closed ranges.
//
// Invariants: ranges are disjoint and non-adjacent (adding [5,9] to {[1,4]} gives {[1,9]}), kept
// in order of their first tick. Add and Remove are O(log n + k) for k ranges touched.
//
// Thread-safety: thread-compatible.

#ifndef GRYPH_BROKER_TICK_RANGE_SET_H_
#define GRYPH_BROKER_TICK_RANGE_SET_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/btree_map.h"
#include "gryph/tick.h"

namespace gryph {

class TickRangeSet {
 public:
  // Adds `range`; returns the parts of it that were not in the set before, in order.
  std::vector<TickRange> Add(TickRange range);
  // Removes `range`; returns the parts of it that were in the set, in order.
  std::vector<TickRange> Remove(TickRange range);
  // The parts of `range` that are in the set, in order.
  std::vector<TickRange> Intersect(TickRange range) const;

  bool Contains(Tick t) const;
  bool empty() const { return ranges_.empty(); }
  // Number of disjoint ranges.
  size_t range_count() const { return ranges_.size(); }
  // Number of ticks (saturates at UINT64_MAX).
  uint64_t tick_count() const;
  // The first range, REQUIRES: !empty().
  TickRange front() const;
  // Calls fn for each range in order until it returns false.
  void ForEach(const std::function<bool(TickRange)>& fn) const;
  std::vector<TickRange> ToVector() const;
  void Clear() { ranges_.clear(); }

  friend bool operator==(const TickRangeSet&, const TickRangeSet&) = default;

 private:
  absl::btree_map<Tick, Tick> ranges_;  // first -> last
};

}  // namespace gryph

#endif  // GRYPH_BROKER_TICK_RANGE_SET_H_
