// The vocabulary of a pubend's time: ticks, their values, and the identities of pubends and
// subscribers.
//
// A pubend is one persistent, ordered event stream; its timestamps are ticks. Every tick has a
// value: Q (unknown), S (silence: no event, or filtered out upstream), D (data: an event) or
// L (lost: discarded by the release protocol). Knowledge only moves Q -> S/D -> L.
//
// Tick 0 is "before the first tick": it is the starting point of a fresh checkpoint token and
// never carries a value. Real ticks are 1..kMaxTick.
//
// Thread-safety: all types here are plain values (thread-compatible).

#ifndef GRYPH_TICK_H_
#define GRYPH_TICK_H_

#include <compare>
#include <cstdint>
#include <limits>
#include <string>

namespace gryph {

using Tick = uint64_t;

inline constexpr Tick kFirstTick = 1;
inline constexpr Tick kMaxTick = std::numeric_limits<Tick>::max();

// The value of a tick. DO NOT CHANGE the numbers: they are stored on disk and sent on the wire.
enum class TickValue : uint8_t {
  kQ = 0,  // unknown
  kS = 1,  // silence
  kD = 2,  // data
  kL = 3,  // lost
};

// "Q", "S", "D" or "L".
const char* TickValueName(TickValue v);

// A closed range of ticks [first, last]. REQUIRES: first <= last for a non-empty range.
struct TickRange {
  Tick first = kFirstTick;
  Tick last = kFirstTick;

  uint64_t size() const { return last - first + 1; }
  bool Contains(Tick t) const { return first <= t && t <= last; }
  friend bool operator==(const TickRange&, const TickRange&) = default;
};

// Identifies a pubend within a deployment. Stored on disk and sent on the wire.
struct PubendId {
  uint32_t value = 0;

  friend auto operator<=>(const PubendId&, const PubendId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, PubendId id) {
    return H::combine(std::move(h), id.value);
  }
};

// Identifies a durable subscription at a subscriber hosting broker. Stored on disk (the PFS
// records hold it as 8 bytes) and sent on the wire.
struct SubscriberId {
  uint64_t value = 0;

  friend auto operator<=>(const SubscriberId&, const SubscriberId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, SubscriberId id) {
    return H::combine(std::move(h), id.value);
  }
};

// "[first,last]", for messages and logs.
std::string ToString(TickRange r);

}  // namespace gryph

#endif  // GRYPH_TICK_H_
