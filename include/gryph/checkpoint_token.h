// CheckpointToken (CT): a subscriber's position, one tick per pubend (paper §2: a vector clock).
//
// CT(s, p) is the tick up to which subscriber s has consumed pubend p's stream. A token *names*
// the pubends it says something about, each at a tick that may be 0: p:0 means "nothing of p
// consumed, every match of p from its first tick is owed" — a subscription created before its
// broker heard from p stands there. A pubend the token does not name is one the subscription has
// not covered yet (a new subscription names none). The difference matters when the subscriber
// moves: a broker that never hosted the subscription serves every pubend the CT names from that
// tick on, and refuses a CT that does not name a pubend it serves (it cannot tell where the
// subscriber stands on it); its home broker starts a pubend the CT does not name where the
// subscription first covered it there. A subscriber therefore keeps the start CT its broker
// sends with Connected (DurableSubscriber does), which names every pubend of the subscription.
//
// Get() reads a pubend the token does not name as 0. Tokens are partially ordered component by
// component, reading unnamed pubends as 0: a <= b when every pubend's tick in a is at most its
// tick in b; tokens that each lead on some pubend are unordered. `==` also compares what the
// tokens name: {p1:0} and {} are equivalent but not equal. Merge takes the component-wise maximum
// and names the union.
//
// Encoding (docs/format.md, "CheckpointToken"): version byte, varint count, then (varint pubend,
// varint tick) pairs in increasing pubend order. Version 1 cannot hold a zero tick (older readers
// read it): a token naming only non-zero ticks is written as version 1, any other as version 2.
//
// Thread-safety: thread-compatible.

#ifndef GRYPH_CHECKPOINT_TOKEN_H_
#define GRYPH_CHECKPOINT_TOKEN_H_

#include <compare>
#include <string>

#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/tick.h"

namespace gryph {

class CheckpointToken {
 public:
  // Version 1: ticks >= 1. Version 2: ticks >= 0.
  static constexpr uint8_t kEncodingVersion = 2;

  CheckpointToken() = default;

  // CT(p): 0 when the token does not name p.
  Tick Get(PubendId p) const;
  // Whether the token names p (at any tick, 0 included).
  bool Names(PubendId p) const { return ticks_.contains(p); }
  // Sets CT(p) = t and names p (t may be 0).
  void Set(PubendId p, Tick t);
  // Raises every component to at least other's, naming every pubend either names.
  void Merge(const CheckpointToken& other);

  // The pubends the token names, with their ticks, in increasing id order.
  const absl::btree_map<PubendId, Tick>& entries() const { return ticks_; }
  // Names no pubend: the CT of a subscription that has not started.
  bool empty() const { return ticks_.empty(); }

  // Component-wise partial order (see above).
  friend std::partial_ordering operator<=>(const CheckpointToken& a, const CheckpointToken& b);
  friend bool operator==(const CheckpointToken&, const CheckpointToken&) = default;

  void EncodeTo(std::string* out) const;
  std::string Encode() const;
  // Fails with InvalidArgument on malformed input (truncation, unknown version, pubends out of
  // order or repeated, a zero tick in version 1, trailing bytes).
  static absl::StatusOr<CheckpointToken> Decode(absl::string_view bytes);

  // "{p1:120, p2:0}", for logs.
  std::string ToString() const;

 private:
  absl::btree_map<PubendId, Tick> ticks_;  // the named pubends
};

}  // namespace gryph

#endif  // GRYPH_CHECKPOINT_TOKEN_H_
