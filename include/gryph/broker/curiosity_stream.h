// CuriosityStream: the nacks a node holds for one pubend (paper §3).
//
// A node is curious about ticks that are Q in its knowledge stream: for itself (a gap in what it
// received) or on behalf of downstream nodes whose nacks it could not answer. The stream keeps,
// per requester, the ranges it asked for, and the union of all of them: what is outstanding
// upstream. Many requesters asking for the same range produce one upstream nack (consolidation).
// When knowledge resolves a range, the stream says which requesters wanted which parts of it, so
// the node can forward the answer to them, and forgets that curiosity.
//
// Requesters are named by strings: downstream peer names, or any name the node uses for its own
// curiosity (e.g. "self").
//
// Thread-safety: thread-compatible.

#ifndef GRYPH_BROKER_CURIOSITY_STREAM_H_
#define GRYPH_BROKER_CURIOSITY_STREAM_H_

#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/strings/string_view.h"
#include "gryph/broker/knowledge_stream.h"
#include "gryph/broker/tick_range_set.h"

namespace gryph {

class CuriosityStream {
 public:
  // A part of a range that `requester` asked for.
  struct Interest {
    std::string requester;
    TickRange range;
    friend bool operator==(const Interest&, const Interest&) = default;
  };

  // Records that `requester` wants `range` resolved. Returns the parts of `range` that were not
  // outstanding before: the nacks to send upstream now. REQUIRES: range.first >= kFirstTick.
  std::vector<TickRange> Add(absl::string_view requester, TickRange range);

  // Knowledge for `range` arrived: drops all curiosity in it. Returns, for each requester, the
  // parts of `range` it had asked for (requesters in name order, ranges in tick order).
  std::vector<Interest> Resolve(TickRange range);

  // Drops the curiosity for every tick that `knowledge` knows (anything but Q), as Resolve does
  // for each such span, and returns the interests resolved.
  std::vector<Interest> Prune(const KnowledgeStream& knowledge);

  // Forgets a requester (it went away). Returns the ranges no longer wanted by anyone, which the
  // node may stop pursuing upstream.
  std::vector<TickRange> RemoveRequester(absl::string_view requester);

  // The outstanding ranges in tick order, at most `max_ranges`: what to nack again after a timeout.
  std::vector<TickRange> Outstanding(size_t max_ranges = SIZE_MAX) const;
  // An answer stopped short, leaving `unanswered` (KnowledgeMessage::unanswered). Returns what to
  // nack again now, in tick order, disjoint, at most `max_ranges`: the parts still outstanding,
  // except a part asked for again already from the same tick (the answer is a duplicate, or made
  // no progress: the renack timer retries it); of a part that starts below what was asked last
  // for it, only what lies below (the message that answered it was lost). Each part returned is
  // remembered, by its last tick, until its ticks are resolved.
  std::vector<TickRange> FollowUp(const std::vector<TickRange>& unanswered,
                                  size_t max_ranges = SIZE_MAX);

  bool empty() const { return outstanding_.empty(); }
  const TickRangeSet& outstanding() const { return outstanding_; }

 private:
  TickRangeSet outstanding_;                               // union of all requesters' ranges
  absl::btree_map<std::string, TickRangeSet> requesters_;  // never holds an empty set
  // Follow-ups sent (FollowUp): last tick -> the first tick asked for.
  absl::btree_map<Tick, Tick> followed_up_;
};

}  // namespace gryph

#endif  // GRYPH_BROKER_CURIOSITY_STREAM_H_
