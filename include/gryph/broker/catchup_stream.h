// CatchupStream: delivery to one reconnected subscriber of one pubend's past (paper §4.1).
//
// A subscriber that reconnects with CT(s,p) below the broker's latestDelivered(p) is in catchup
// mode for p. Its catchup stream walks (CT(s,p), latestDelivered(p)]: the PFS says which ticks
// matched the subscriber (every other tick is S for it), the broker's knowledge stream supplies
// the events (from its cache, or by nack upstream), and the stream delivers, in tick order:
//   - Event(t) for a matching tick whose event is known;
//   - Gap(t) where a matching event was released upstream (L), or where the PFS was chopped and
//     cannot say what matched (then the Gap covers exactly the chopped interval): one Gap per
//     run of such ticks with no delivered event between them, however the knowledge of them
//     arrives (a lost span is held until the next message or the end of the catchup shows
//     where it stops);
//   - Silence(latestDelivered) when it catches up without a message at the end, so that the
//     subscriber's CT moves.
// Once everything up to latestDelivered(p) is delivered, caught_up() holds and the broker hands
// the subscriber to the constream: the constream has delivered exactly up to latestDelivered,
// so at that instant nothing is lost or doubled.
//
// Reconnect anywhere: a subscriber that this broker never hosted has no PFS records before its
// subscription was created here. For (CT, refilter_through] the stream refilters: it looks at
// every tick, nacking unknown ones, and evaluates the subscription on each event.
//
// The stream is a sans-I/O state machine: the owner feeds it PFS batches (WantedMatches /
// AddMatches) and knowledge (Step reads the broker's knowledge stream) and sends what Step
// returns.
//
// Thread-safety: thread-compatible.

#ifndef GRYPH_BROKER_CATCHUP_STREAM_H_
#define GRYPH_BROKER_CATCHUP_STREAM_H_

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gryph/broker/knowledge_stream.h"
#include "gryph/broker/session.h"
#include "gryph/message.h"
#include "gryph/subscription.h"
#include "gryph/tick.h"

namespace gryph {

struct CatchupStreamOptions {
  // Matched ticks buffered from the PFS at a time; a read fills half of it (>= 2).
  size_t max_buffered_matches = 4096;
  // Flow control: at most this many of the next matched ticks are nacked at once.
  size_t nack_window = 256;
  // Messages delivered per Step, so one catchup cannot starve the others.
  size_t max_deliveries_per_step = 1024;
};

class CatchupStream {
 public:
  // Delivers to `subscription_name` for pubend `pubend` from `checkpoint` on. Ticks in
  // (checkpoint, refilter_through] are refiltered with `subscription` (refilter_through <=
  // checkpoint: none); matches after come from the PFS. Every message is stamped through
  // `session`, the session's stream at this pubend (SessionStream::Stamp), so what Step emits is
  // finished. `session` must outlive the catchup stream.
  CatchupStream(std::string subscription_name, PubendId pubend, Tick checkpoint,
                Tick refilter_through, Subscription subscription, SessionStream* session,
                CatchupStreamOptions options = {});

  // The window of PFS matches the stream needs next, (first - 1, last] as a TickRange
  // {first, last}, given latestDelivered; nullopt when it has enough buffered.
  std::optional<TickRange> WantedMatches(Tick latest_delivered) const;
  // The PFS's answer for (from, through] where `from` is WantedMatches()->first - 1: the matching
  // ticks in order, the tick through which the answer is complete, and the tick through which the
  // PFS no longer knows (0: nothing chopped). REQUIRES: ticks within the window, increasing.
  void AddMatches(const std::vector<Tick>& ticks, Tick through, Tick lost_through);

  // Delivers as far as `knowledge` allows, up to latest_delivered. Appends messages to *out and
  // ranges to nack to *nacks (each range at most once while outstanding).
  void Step(const KnowledgeStream& knowledge, Tick latest_delivered,
            std::vector<DeliveryMessage>* out, std::vector<TickRange>* nacks);

  // Everything through latest_delivered is delivered: hand over to the constream.
  bool caught_up(Tick latest_delivered) const { return position_ >= latest_delivered; }
  // The tick through which the subscriber has been served.
  Tick position() const { return position_; }
  PubendId pubend() const { return pubend_; }

 private:
  // Appends a message, after the Gap still held.
  void Emit(DeliveryKind kind, Tick t, EventRef event, std::vector<DeliveryMessage>* out);
  // What may have matched through `t` is lost: the held Gap reaches t.
  void Lost(Tick t);
  void EmitPendingGap(std::vector<DeliveryMessage>* out);
  // Refilter mode: walks (position_, refilter_through_].
  void StepRefilter(const KnowledgeStream& knowledge, std::vector<DeliveryMessage>* out,
                    std::vector<TickRange>* nacks, size_t* budget);

  const std::string name_;
  const PubendId pubend_;
  const Subscription subscription_;
  SessionStream* const session_;
  const CatchupStreamOptions options_;
  const Tick refilter_through_;
  Tick position_;             // served through here
  Tick last_message_;         // tick of the last message sent
  Tick pending_gap_ = 0;      // a Gap through here is owed before the next message (0: none)
  Tick matches_through_;      // PFS answers are complete through here
  Tick lost_through_ = 0;     // the PFS cannot say what matched at or below here
  std::deque<Tick> matches_;  // matched ticks in (position_, matches_through_]
  Tick nacked_through_ = 0;   // matched ticks up to here were nacked (reset on progress)
  Tick refilter_nacked_ = 0;  // refilter mode: unknown ticks nacked through here
};

}  // namespace gryph

#endif  // GRYPH_BROKER_CATCHUP_STREAM_H_
