// ExactlyOnceChecker: the oracle for durable subscriptions, for tests and demos.
//
// Feed it what the pubends logged (every committed event with its tick) and, per subscriber,
// the messages its application consumed in order; Check() then verifies, per subscriber and
// pubend, the guarantees of paper §2:
//   - ticks strictly increase after the subscriber's starting point (no duplicate, no reorder);
//   - Event(t): the pubend logged exactly this event at t, it matches the subscription, and no
//     matching event lies between the previous message and t;
//   - Silence(t): no matching event lies between the previous message and t (inclusive);
//   - Gap(t): allowed only for a subscriber that was not well-behaved, and only where something
//     was released (at or below the pubend's L prefix) or the subscriber had already consumed
//     (it came back with an older checkpoint). A Gap recorded with the most it could excuse then
//     (Consumed::excusable_through) must also reach below it and hide no match above it;
//     without, the pubend's final L prefix is the bound;
//   - completeness: the last message reaches the last matching event.
//
// Thread-safety: thread-compatible.

#ifndef GRYPH_TESTING_EXACTLY_ONCE_CHECKER_H_
#define GRYPH_TESTING_EXACTLY_ONCE_CHECKER_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gryph/checkpoint_token.h"
#include "gryph/event.h"
#include "gryph/message.h"
#include "gryph/subscription.h"

namespace gryph {

class ExactlyOnceChecker {
 public:
  struct Consumed {
    DeliveryKind kind;
    Tick tick;
    EventRef event;  // for kEvent
    // For kGap, when known: the highest tick the Gap may hide matches at or below — the
    // pubend's durable L prefix and the subscriber's high-water mark when the Gap arrived.
    std::optional<Tick> excusable_through = std::nullopt;
  };
  struct SubscriberRecord {
    std::string name;
    Subscription subscription;
    CheckpointToken start;       // where the subscription started
    CheckpointToken high_water;  // the highest tick ever consumed, across rollbacks
    bool well_behaved = true;    // never disconnected
    std::map<PubendId, std::vector<Consumed>> consumed;  // in consumption order
  };

  // Checks pubend p even if it logged nothing (so that an Event from it is caught).
  void AddPubend(PubendId p) { log_[p]; }
  // Records that pubend p committed `event` at tick t.
  void Logged(PubendId p, Tick t, EventRef event) { log_[p].emplace(t, std::move(event)); }
  // Records that pubend p released everything at or below t (its L prefix).
  void Released(PubendId p, Tick t);
  void AddSubscriber(SubscriberRecord record) { subscribers_.push_back(std::move(record)); }

  // The violations found, at most `max` of them (empty: all guarantees held).
  std::vector<std::string> Check(size_t max = 20) const;

  const std::map<PubendId, std::map<Tick, EventRef>>& log() const { return log_; }

 private:
  std::map<PubendId, std::map<Tick, EventRef>> log_;
  std::map<PubendId, Tick> released_;
  std::vector<SubscriberRecord> subscribers_;
};

}  // namespace gryph

#endif  // GRYPH_TESTING_EXACTLY_ONCE_CHECKER_H_
