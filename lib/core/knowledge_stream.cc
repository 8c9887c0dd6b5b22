#include "gryph/broker/knowledge_stream.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace gryph {

bool operator==(const KnowledgeSpan& a, const KnowledgeSpan& b) {
  if (a.range != b.range || a.value != b.value) return false;
  if (a.event == b.event) return true;
  return a.event != nullptr && b.event != nullptr && *a.event == *b.event;
}

KnowledgeStream::KnowledgeStream() { spans_.emplace(kFirstTick, Entry{TickValue::kQ, nullptr}); }

KnowledgeStream::Map::const_iterator KnowledgeStream::Holding(Tick t) const {
  return std::prev(spans_.upper_bound(t));
}

Tick KnowledgeStream::LastOf(Map::const_iterator it) const {
  auto next = std::next(it);
  return next == spans_.end() ? kMaxTick : next->first - 1;
}

KnowledgeSpan KnowledgeStream::SpanAt(Tick t) const {
  auto it = Holding(std::max(t, kFirstTick));
  return {{it->first, LastOf(it)}, it->second.value, it->second.event};
}

TickValue KnowledgeStream::ValueAt(Tick t) const {
  return Holding(std::max(t, kFirstTick))->second.value;
}

KnowledgeStream::Cursor::Cursor(const KnowledgeStream& stream)
    : stream_(stream), it_(stream.spans_.end()) {}

KnowledgeSpan KnowledgeStream::Cursor::SpanAt(Tick t) {
  t = std::max(t, kFirstTick);
  const Map& spans = stream_.spans_;
  bool found = false;
  if (it_ != spans.end() && it_->first <= t) {
    // A few steps forward find the next matches of a catchup (a D span, then the S between).
    for (int step = 0; step < 4; ++step) {
      const auto next = std::next(it_);
      if (next == spans.end() || next->first > t) {
        found = true;
        break;
      }
      it_ = next;
    }
  }
  if (!found) it_ = stream_.Holding(t);
  return {{it_->first, stream_.LastOf(it_)}, it_->second.value, it_->second.event};
}

absl::Status KnowledgeStream::Check(const KnowledgeSpan& span, bool* changes) const {
  const TickRange r = span.range;
  if (r.first < kFirstTick || r.first > r.last) {
    return absl::InvalidArgumentError(absl::StrCat("malformed knowledge range ", ToString(r)));
  }
  if (span.value == TickValue::kD && (r.first != r.last || span.event == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a D span must be one tick with an event, got ", ToString(r)));
  }
  *changes = false;
  if (span.value == TickValue::kQ) return absl::OkStatus();
  for (auto it = Holding(r.first); it != spans_.end() && it->first <= r.last; ++it) {
    const TickValue have = it->second.value;
    if (have == span.value) {
      if (have == TickValue::kD &&
          !(it->second.event == span.event || *it->second.event == *span.event)) {
        return absl::InvalidArgumentError(
            absl::StrCat("conflicting knowledge: tick ", r.first, " is D with another event"));
      }
      continue;
    }
    switch (have) {
      case TickValue::kQ: break;
      case TickValue::kS:
      case TickValue::kD:
        if (span.value != TickValue::kL) {
          return absl::InvalidArgumentError(
              absl::StrCat("conflicting knowledge: ", TickValueName(span.value), " over ",
                           TickValueName(have), " at tick ", std::max(it->first, r.first)));
        }
        break;
      case TickValue::kL:
        return absl::FailedPreconditionError(
            absl::StrCat("stale knowledge: ", TickValueName(span.value), " for tick ",
                         std::max(it->first, r.first), " which is already L"));
    }
    *changes = true;
  }
  return absl::OkStatus();
}

void KnowledgeStream::SplitAt(Tick t) {
  auto it = Holding(t);
  if (it->first == t) return;
  Entry copy = it->second;  // a D span is one tick, so only Q, S and L spans are ever split
  spans_.emplace_hint(std::next(it), t, std::move(copy));
}

absl::Status KnowledgeStream::Accumulate(const KnowledgeSpan& span) {
  bool changes = false;
  if (absl::Status s = Check(span, &changes); !s.ok()) return s;
  if (!changes) return absl::OkStatus();
  const TickRange r = span.range;
  SplitAt(r.first);
  if (r.last != kMaxTick) SplitAt(r.last + 1);
  auto begin = spans_.find(r.first);
  auto end = r.last == kMaxTick ? spans_.end() : spans_.find(r.last + 1);
  auto it = spans_.erase(begin, end);
  it = spans_.emplace_hint(it, r.first, Entry{span.value, span.event});
  if (span.value == TickValue::kD) return absl::OkStatus();
  // Coalesce with equal neighbours. Erasing invalidates btree iterators, so decide first.
  auto next = std::next(it);
  const bool merge_next = next != spans_.end() && next->second.value == span.value;
  const bool merge_prev = it != spans_.begin() && std::prev(it)->second.value == span.value;
  if (merge_next) spans_.erase(r.last + 1);
  if (merge_prev) spans_.erase(r.first);
  return absl::OkStatus();
}

void KnowledgeStream::Forget(Tick through) {
  if (through < kFirstTick) return;
  if (through != kMaxTick) SplitAt(through + 1);
  auto end = through == kMaxTick ? spans_.end() : spans_.find(through + 1);
  spans_.erase(spans_.begin(), end);
  spans_.emplace(kFirstTick, Entry{TickValue::kQ, nullptr});
  if (through != kMaxTick && spans_.find(through + 1)->second.value == TickValue::kQ) {
    spans_.erase(through + 1);
  }
}

Tick KnowledgeStream::DoubtHorizon(Tick from) const {
  if (from == kMaxTick) return from;
  for (auto it = Holding(from + 1); it != spans_.end(); ++it) {
    if (it->second.value == TickValue::kQ) return std::max(from, it->first - 1);
  }
  return kMaxTick;
}

std::vector<TickRange> KnowledgeStream::QRanges(TickRange window, size_t max_ranges) const {
  std::vector<TickRange> out;
  ForEachSpan(window, [&](const KnowledgeSpan& s) {
    if (s.value == TickValue::kQ) out.push_back(s.range);
    return out.size() < max_ranges;
  });
  return out;
}

Tick KnowledgeStream::LPrefix() const {
  auto it = spans_.begin();
  return it->second.value == TickValue::kL ? LastOf(it) : 0;
}

void KnowledgeStream::ForEachSpan(TickRange window,
                                  const std::function<bool(const KnowledgeSpan&)>& fn) const {
  if (window.first > window.last) return;
  for (auto it = Holding(std::max(window.first, kFirstTick));
       it != spans_.end() && it->first <= window.last; ++it) {
    KnowledgeSpan s{{std::max(it->first, window.first), std::min(LastOf(it), window.last)},
                    it->second.value,
                    it->second.event};
    if (!fn(s)) return;
  }
}

void KnowledgeStream::ForEachData(TickRange window,
                                  const std::function<bool(Tick, const EventRef&)>& fn) const {
  ForEachSpan(window, [&](const KnowledgeSpan& s) {
    return s.value != TickValue::kD || fn(s.range.first, s.event);
  });
}

}  // namespace gryph
