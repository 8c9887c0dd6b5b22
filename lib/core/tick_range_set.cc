#include "gryph/broker/tick_range_set.h"

#include <algorithm>

namespace gryph {

std::vector<TickRange> TickRangeSet::Intersect(TickRange range) const {
  std::vector<TickRange> out;
  auto it = ranges_.upper_bound(range.first);
  if (it != ranges_.begin()) --it;
  for (; it != ranges_.end() && it->first <= range.last; ++it) {
    if (it->second < range.first) continue;
    out.push_back({std::max(it->first, range.first), std::min(it->second, range.last)});
  }
  return out;
}

std::vector<TickRange> TickRangeSet::Add(TickRange range) {
  std::vector<TickRange> added;
  Tick cursor = range.first;  // first tick of `range` not yet accounted for
  bool done = false;
  for (const TickRange& have : Intersect(range)) {
    if (have.first > cursor) added.push_back({cursor, have.first - 1});
    if (have.last == range.last) {
      done = true;
      break;
    }
    cursor = have.last + 1;
  }
  if (!done) added.push_back({cursor, range.last});
  if (added.empty()) return added;

  // Merge with every range that overlaps or touches [first, last].
  Tick first = range.first;
  Tick last = range.last;
  auto it = ranges_.upper_bound(first);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second == kMaxTick || prev->second + 1 >= first) it = prev;
  }
  while (it != ranges_.end() && (last == kMaxTick || it->first <= last + 1)) {
    first = std::min(first, it->first);
    last = std::max(last, it->second);
    it = ranges_.erase(it);
  }
  ranges_.emplace(first, last);
  return added;
}

std::vector<TickRange> TickRangeSet::Remove(TickRange range) {
  std::vector<TickRange> removed = Intersect(range);
  if (removed.empty()) return removed;
  // Only the first and last touched ranges can stick out of `range`; btree insertion
  // invalidates iterators, so erase first and put the remnants back afterwards.
  auto first_it = ranges_.upper_bound(range.first);
  if (first_it != ranges_.begin() && std::prev(first_it)->second >= range.first) --first_it;
  auto last_it = std::prev(ranges_.upper_bound(range.last));
  const Tick head_first = first_it->first;
  const Tick tail_last = last_it->second;
  ranges_.erase(first_it, std::next(last_it));
  if (head_first < range.first) ranges_.emplace(head_first, range.first - 1);
  if (tail_last > range.last) ranges_.emplace(range.last + 1, tail_last);
  return removed;
}

bool TickRangeSet::Contains(Tick t) const {
  auto it = ranges_.upper_bound(t);
  if (it == ranges_.begin()) return false;
  --it;
  return t <= it->second;
}

uint64_t TickRangeSet::tick_count() const {
  uint64_t total = 0;
  for (const auto& [first, last] : ranges_) {
    const uint64_t n = last - first + 1;
    if (n == 0 || total + n < total) return UINT64_MAX;  // the full domain overflows
    total += n;
  }
  return total;
}

TickRange TickRangeSet::front() const { return {ranges_.begin()->first, ranges_.begin()->second}; }

void TickRangeSet::ForEach(const std::function<bool(TickRange)>& fn) const {
  for (const auto& [first, last] : ranges_) {
    if (!fn({first, last})) return;
  }
}

std::vector<TickRange> TickRangeSet::ToVector() const {
  std::vector<TickRange> out;
  out.reserve(ranges_.size());
  for (const auto& [first, last] : ranges_) out.push_back({first, last});
  return out;
}

}  // namespace gryph
