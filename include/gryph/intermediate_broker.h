// IntermediateBroker: a node between a publisher hosting broker and several downstream nodes
// (subscriber hosting brokers or other intermediates), paper §3.
//
// Per pubend it keeps:
//   - a bounded knowledge cache (a KnowledgeStream of what came from upstream). The oldest part
//     beyond options.cache_ticks ticks or options.cache_events D ticks is forgotten: a forgotten
//     tick is simply unknown (Q) here again, and a nack for it goes upstream.
//   - a CuriosityStream of the nacks it could not answer, by requester (the downstream node).
//     Many downstream nacks for one range produce ONE upstream nack; when the answer arrives it
//     goes to the requesters that wanted it. Outstanding nacks are sent again on a timer, and
//     what an upstream answer leaves unanswered (its byte bound) is asked for again at once.
//   - per registered downstream node, its latest ReleaseEntry (values only move forward).
//
// Knowledge flow. Knowledge from the pubend's upstream node (and only from it) is accumulated in
// the cache. The part above everything forwarded so far (the live stream) goes to every
// registered downstream node; the part that answers outstanding nacks goes to the nodes that
// asked for it. Nacks from registered downstream nodes are answered from the cache for the ticks
// it knows (D, S, L) and consolidated upstream for the rest.
//
// D -> S filtering (opt-in). A downstream link may carry a static filter: a list of
// subscriptions. A D tick whose event matches none of them travels on that link as S. The filter
// MUST cover every subscription the downstream node may ever host, now or later, including
// subscribers that reconnect there from elsewhere: a filter missing a subscription silently turns
// that subscription's events into S, which the downstream node (and its subscribers) take as
// "nothing happened" — an event lost without a Gap. That is why filtering is opt-in and static:
// an empty filter (the default) forwards every event unchanged.
//
// Release. Every registered downstream node reports (released, latestDelivered) per pubend.
// Periodically, per pubend, the broker sends upstream released = min of released and
// latestDelivered = min of latestDelivered over all registered downstream nodes — but only once
// every registered node has reported for that pubend: until then nothing goes upstream, so no
// tick is released before a node that has not spoken yet has it. Releases from unknown senders
// are ignored and counted.
//
// Durability: none. The cache, the curiosity and the release table live in memory only. After a
// crash the broker starts empty and re-learns: downstream nodes nack again, and release waits
// until every downstream node has reported again. Correctness never depends on the cache.
//
// Thread-safety: owned by one thread, which delivers its channel's messages and calls OnTimer.

#ifndef GRYPH_INTERMEDIATE_BROKER_H_
#define GRYPH_INTERMEDIATE_BROKER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gryph/broker/knowledge_stream.h"
#include "gryph/channel.h"
#include "gryph/message.h"
#include "gryph/subscription.h"
#include "gryph/tick.h"

namespace gryph {

struct IntermediateBrokerOptions {
  struct Upstream {
    PubendId pubend;
    std::string node;  // where knowledge comes from, and nacks and releases go
  };
  struct Downstream {
    std::string node;
    // D -> S filter for this link (see the header comment): empty = forward every event. When
    // not empty, it MUST cover every subscription the node may ever host.
    std::vector<Subscription> filter;
  };
  std::vector<Upstream> pubends;       // at least one; distinct pubends
  std::vector<Downstream> downstream;  // at least one; distinct names

  // The cache keeps at most this many ticks below the highest tick seen (microseconds of pubend
  // time) and at most this many D ticks; older knowledge is forgotten.
  Tick cache_ticks = 10'000'000;
  size_t cache_events = 65'536;
  // Outstanding upstream nacks are sent again after this.
  absl::Duration renack_interval = absl::Milliseconds(200);
  // The aggregated release goes upstream this often.
  absl::Duration release_interval = absl::Milliseconds(100);
  // A knowledge message sent by this broker carries at most this many spans.
  size_t max_spans_per_message = 1024;
};

class IntermediateBroker {
 public:
  struct Stats {
    uint64_t knowledge_received = 0;         // knowledge messages accepted from upstream
    uint64_t knowledge_sent = 0;             // knowledge messages sent downstream
    uint64_t nacks_received = 0;             // curiosity messages accepted from downstream
    uint64_t ticks_answered_from_cache = 0;  // nacked ticks answered without going upstream
    uint64_t nacks_sent = 0;                 // curiosity messages sent upstream (incl. retries)
    uint64_t nack_ranges_consolidated = 0;   // nacked ranges already outstanding upstream
    uint64_t events_filtered = 0;            // D ticks sent as S on a filtered link
    uint64_t releases_sent = 0;
    uint64_t unknown_releases = 0;  // release entries from unknown senders or for unknown pubends
    uint64_t invalid_releases = 0;  // release entries with released > latest_delivered
    uint64_t unknown_senders = 0;   // knowledge not from upstream, nacks not from downstream
    uint64_t stale_knowledge = 0;   // S or D for ticks already L in the cache
    uint64_t conflicting_knowledge = 0;  // should stay 0
  };

  // Validates `options` and sets the broker as `channel`'s receiver. `channel` must outlive the
  // broker. Fails with InvalidArgument when there is no pubend or no downstream node, or a pubend
  // or downstream node appears twice.
  static absl::StatusOr<std::unique_ptr<IntermediateBroker>> Open(IntermediateBrokerOptions options,
                                                                  Channel* channel);
  virtual ~IntermediateBroker() = default;

  // Handles one message (the channel receiver calls this): knowledge from upstream, nacks and
  // releases from downstream. Anything else, or from the wrong sender, is ignored.
  virtual void HandleMessage(absl::string_view from, const Message& message) = 0;
  // Re-sends outstanding nacks and sends the aggregated releases when due. Call every few
  // milliseconds.
  virtual void OnTimer(absl::Time now) = 0;
  // When OnTimer should next run at the latest: the next renack or release due.
  virtual absl::Time NextDeadline(absl::Time now) const = 0;

  virtual const Stats& stats() const = 0;
  // The cache's knowledge of `p` (for tests and diagnostics). REQUIRES: p is served.
  virtual const KnowledgeStream& cache(PubendId p) const = 0;
  // The ranges of `p` nacked upstream and not answered yet. REQUIRES: p is served.
  virtual std::vector<TickRange> outstanding(PubendId p) const = 0;

 protected:
  IntermediateBroker() = default;
};

}  // namespace gryph

#endif  // GRYPH_INTERMEDIATE_BROKER_H_
