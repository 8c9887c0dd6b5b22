// KnowledgeStream: a node's knowledge of one pubend's ticks, as an interval map from ticks to
// values (paper §3).
//
// Every tick starts Q (unknown). Knowledge only accumulates along Q -> S/D -> L:
//   - Q may become S, D or L;
//   - S may become L; D may become L;
//   - the same knowledge again (S over S, L over L, D over D with an equal event) changes nothing;
//   - anything else is rejected and changes nothing: S over D or D over S, D with a different
//     event (InvalidArgument: the sources contradict each other), and S or D over L
//     (FailedPrecondition: the tick was already released; the caller holds stale knowledge and
//     may drop it — see LPrefix()).
// An update is applied whole or not at all.
//
// Invariants: the map covers [kFirstTick, kMaxTick] exactly; adjacent Q, S and L spans of one
// value are coalesced; every D span is a single tick carrying a non-null event. An update
// touching k existing spans costs O(log n + k).
//
// Thread-safety: thread-compatible.

#ifndef GRYPH_BROKER_KNOWLEDGE_STREAM_H_
#define GRYPH_BROKER_KNOWLEDGE_STREAM_H_

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "gryph/event.h"
#include "gryph/tick.h"

namespace gryph {

// A run of ticks with one value. For D, `range` is one tick and `event` is its event; for other
// values `event` is null.
struct KnowledgeSpan {
  TickRange range;
  TickValue value = TickValue::kQ;
  EventRef event;

  static KnowledgeSpan Silence(TickRange r) { return {r, TickValue::kS, nullptr}; }
  static KnowledgeSpan Lost(TickRange r) { return {r, TickValue::kL, nullptr}; }
  static KnowledgeSpan Data(Tick t, EventRef e) { return {{t, t}, TickValue::kD, std::move(e)}; }
};

// Equal ranges and values, and equal events by content.
bool operator==(const KnowledgeSpan& a, const KnowledgeSpan& b);

class KnowledgeStream {
  struct Entry {
    TickValue value;
    EventRef event;
  };
  using Map = absl::btree_map<Tick, Entry>;

 public:
  KnowledgeStream();

  // Accumulates `span` (S, D or L; Q is a no-op) under the rules above. Fails with
  // InvalidArgument on a malformed span (tick 0, first > last, a D span that is not one tick or
  // has no event) or contradicting knowledge, FailedPrecondition for S or D over L.
  absl::Status Accumulate(const KnowledgeSpan& span);
  absl::Status AccumulateSilence(TickRange range) {
    return Accumulate(KnowledgeSpan::Silence(range));
  }
  absl::Status AccumulateLost(TickRange range) { return Accumulate(KnowledgeSpan::Lost(range)); }
  absl::Status AccumulateData(Tick t, EventRef e) {
    return Accumulate(KnowledgeSpan::Data(t, std::move(e)));
  }

  // The maximal span holding tick t (for D, the tick itself). REQUIRES: t >= kFirstTick.
  KnowledgeSpan SpanAt(Tick t) const;
  TickValue ValueAt(Tick t) const;

  // SpanAt for a run of increasing, nearby ticks (a catchup's next matches): each lookup starts
  // from the span of the previous one and steps forward, instead of searching the whole stream.
  // Any tick may be asked (a far or lower one is searched as by SpanAt). Valid while the stream
  // is not modified.
  class Cursor {
   public:
    explicit Cursor(const KnowledgeStream& stream);
    KnowledgeSpan SpanAt(Tick t);

   private:
    const KnowledgeStream& stream_;
    Map::const_iterator it_;  // the span of the last lookup; end() before the first
  };

  // The doubt horizon from `from`: the highest tick h >= from such that no tick in (from, h] is
  // Q. Returns `from` when tick from + 1 is Q.
  Tick DoubtHorizon(Tick from) const;

  // The Q ranges inside `window`, clipped to it, in order; at most `max_ranges` of them.
  std::vector<TickRange> QRanges(TickRange window, size_t max_ranges = SIZE_MAX) const;

  // The highest tick t such that every tick in [kFirstTick, t] is L; 0 when tick 1 is not L.
  Tick LPrefix() const;

  // Calls fn for each span overlapping `window`, clipped to it, in order, until fn returns false.
  void ForEachSpan(TickRange window, const std::function<bool(const KnowledgeSpan&)>& fn) const;
  // Calls fn for each D tick in `window`, in order, until fn returns false.
  void ForEachData(TickRange window, const std::function<bool(Tick, const EventRef&)>& fn) const;

  // Forgets what is known of ticks [kFirstTick, through]: they read Q again. This is a cache
  // eviction, the one exception to "knowledge only accumulates": a node that has delivered
  // through a tick drops what it no longer needs, and may accumulate those ticks again (from a
  // nack answer) later.
  void Forget(Tick through);

  // Number of spans (memory use is proportional to it).
  size_t span_count() const { return spans_.size(); }

 private:
  // Checks that `span` may be accumulated; returns whether it would change anything.
  absl::Status Check(const KnowledgeSpan& span, bool* changes) const;
  // Ensures a span starts at t (splitting the one holding it). REQUIRES: t >= kFirstTick.
  void SplitAt(Tick t);
  // The last tick of the span starting at `it`.
  Tick LastOf(Map::const_iterator it) const;
  Map::const_iterator Holding(Tick t) const;

  Map spans_;  // first tick of each span -> its value
};

}  // namespace gryph

#endif  // GRYPH_BROKER_KNOWLEDGE_STREAM_H_
