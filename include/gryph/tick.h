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
#include <ostream>
#include <string>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"

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

// Makes an id type print as its number through `<<` and absl::StrCat. Abseil releases from
// 20230125 on read AbslStringify; the 20220623 release (Debian 12's) has no such hook, so there the
// id converts to absl::AlphaNum, StrCat's argument type (defined only there: with AbslStringify
// present, the conversion would make StrCat's argument ambiguous).
#if defined(ABSL_LTS_RELEASE_VERSION) && ABSL_LTS_RELEASE_VERSION < 20230125
#define GRYPH_ID_ALPHANUM_ \
  operator absl::AlphaNum() const { return absl::AlphaNum(value); }  // NOLINT(runtime/explicit)
#else
#define GRYPH_ID_ALPHANUM_
#endif
#define GRYPH_ID_PRINTING(Id)                                                         \
  friend std::ostream& operator<<(std::ostream& os, Id id) { return os << id.value; } \
  template <typename Sink>                                                            \
  friend void AbslStringify(Sink& sink, Id id) {                                      \
    sink.Append(absl::StrCat(id.value));                                              \
  }                                                                                   \
  GRYPH_ID_ALPHANUM_

// Identifies a pubend within a deployment. Stored on disk and sent on the wire.
//
// Printing: `os << id` and `absl::StrCat("pubend ", id)` write the number ("pubend 7").
struct PubendId {
  uint32_t value = 0;

  friend auto operator<=>(const PubendId&, const PubendId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, PubendId id) {
    return H::combine(std::move(h), id.value);
  }
  GRYPH_ID_PRINTING(PubendId)
};

// Identifies a durable subscription at a subscriber hosting broker. Stored on disk (the PFS
// records hold it as 8 bytes) and sent on the wire.
//
// Printing: `os << id` and `absl::StrCat("subscriber ", id)` write the number.
struct SubscriberId {
  uint64_t value = 0;

  friend auto operator<=>(const SubscriberId&, const SubscriberId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, SubscriberId id) {
    return H::combine(std::move(h), id.value);
  }
  GRYPH_ID_PRINTING(SubscriberId)
};

#undef GRYPH_ID_PRINTING
#undef GRYPH_ID_ALPHANUM_

// "[first,last]", for messages and logs.
std::string ToString(TickRange r);

}  // namespace gryph

#endif  // GRYPH_TICK_H_
