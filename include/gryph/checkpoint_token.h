// CheckpointToken (CT): a subscriber's position, one tick per pubend (paper §2: a vector clock).
//
// CT(s, p) is the tick up to which subscriber s has consumed pubend p's stream; a pubend the token
// does not name is at tick 0 (nothing consumed). The subscriber stores its CT in its own
// transaction and presents it on reconnection; it acknowledges messages by sending it.
//
// Tokens are partially ordered component by component: a <= b when every pubend's tick in a is at
// most its tick in b; tokens that each lead on some pubend are unordered. Merge takes the
// component-wise maximum.
//
// Encoding (docs/format.md, "CheckpointToken"): version byte, varint count, then (varint pubend,
// varint tick) pairs in increasing pubend order, zero ticks omitted.
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
  static constexpr uint8_t kEncodingVersion = 1;

  CheckpointToken() = default;

  // CT(p): 0 when the token does not name p.
  Tick Get(PubendId p) const;
  // Sets CT(p); setting 0 removes p.
  void Set(PubendId p, Tick t);
  // Raises every component to at least other's.
  void Merge(const CheckpointToken& other);

  // Pubends with a non-zero tick, in increasing id order.
  const absl::btree_map<PubendId, Tick>& entries() const { return ticks_; }
  bool empty() const { return ticks_.empty(); }

  // Component-wise partial order (see above).
  friend std::partial_ordering operator<=>(const CheckpointToken& a, const CheckpointToken& b);
  friend bool operator==(const CheckpointToken&, const CheckpointToken&) = default;

  void EncodeTo(std::string* out) const;
  std::string Encode() const;
  // Fails with InvalidArgument on malformed input (truncation, unknown version, pubends out of
  // order or repeated, a zero tick, trailing bytes).
  static absl::StatusOr<CheckpointToken> Decode(absl::string_view bytes);

  // "{p1:120, p2:95}", for logs.
  std::string ToString() const;

 private:
  absl::btree_map<PubendId, Tick> ticks_;  // never holds a zero tick
};

}  // namespace gryph

#endif  // GRYPH_CHECKPOINT_TOKEN_H_
