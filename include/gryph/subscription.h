// A subscription's interest: a selector (include/gryph/selector.h) and an optional topic filter
// (include/gryph/topic_filter.h). An event matches when its topic matches the filter, if there is
// one, and the selector evaluates to TRUE on it.
//
//   auto sub = Subscription::Create("price > 100 AND symbol IN ('IBM', 'MSFT')", "orders/#");
//
// Subscriptions are persisted (the SHB's durable subscription table) through Encode/Decode, which
// store the two texts and parse them again on Decode:
//
//   version  1 byte  = 1 (kEncodingVersion)
//   selector varint length, then the selector text as given to Create
//   filter   varint length, then the topic filter text; length 0 means "no topic filter"
//
// Thread-safety: immutable after Create or Decode; thread-safe. Copying is cheap for the selector
// (its compiled program is shared) and copies the topic filter.

#ifndef GRYPH_SUBSCRIPTION_H_
#define GRYPH_SUBSCRIPTION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/event.h"
#include "gryph/selector.h"
#include "gryph/topic_filter.h"

namespace gryph {

namespace matcher_internal {
struct SubscriptionParts;
}  // namespace matcher_internal

// The longest durable subscription name, in bytes: names are storage keys at the SHB, which
// refuses a longer one (InvalidArgument, for that connection alone).
inline constexpr size_t kMaxSubscriptionNameBytes = 256;

class Subscription {
 public:
  // The first byte of every encoded subscription. DO NOT CHANGE: stored on disk.
  static constexpr uint8_t kEncodingVersion = 1;

  // Parses `selector` (empty: every event) with `options`, and `topic_filter` (empty: no topic
  // filter, every topic). Fails with InvalidArgument, as Selector::Parse or TopicFilter::Parse
  // do (a selector longer than options.max_length among them).
  static absl::StatusOr<Subscription> Create(absl::string_view selector,
                                             absl::string_view topic_filter = "",
                                             const SelectorOptions& options = SelectorOptions());

  // A subscription of an already parsed (or decoded, Selector::Decode) selector and
  // `topic_filter` (empty: no topic filter): nothing is parsed but the topic filter. Fails with
  // InvalidArgument as TopicFilter::Parse does.
  static absl::StatusOr<Subscription> Create(Selector selector,
                                             absl::string_view topic_filter = "");

  // Whether `event` interests this subscription: topic filter (if any) and selector TRUE.
  bool Matches(const Event& event) const;

  const Selector& selector() const { return selector_; }
  // The topic filter, or nullptr when the subscription has none. Valid as long as *this.
  const TopicFilter* topic_filter() const {
    return topic_filter_.has_value() ? &*topic_filter_ : nullptr;
  }

  // Appends the encoding (see the top of this file) to *out.
  void EncodeTo(std::string* out) const;
  std::string Encode() const;

  // Parses an encoded subscription. Accepts exactly what Encode() produces: fails with
  // InvalidArgument on a truncated or malformed input, an unknown version, a length not in its
  // shortest varint form, trailing bytes, or texts that no longer parse (the selector with
  // `options`). Never crashes or reads past `bytes`.
  static absl::StatusOr<Subscription> Decode(absl::string_view bytes,
                                             const SelectorOptions& options = SelectorOptions());

  // Same selector text and same topic filter text.
  friend bool operator==(const Subscription& a, const Subscription& b);

 private:
  friend struct matcher_internal::SubscriptionParts;  // takes the parts apart, for the matcher

  Subscription(Selector selector, std::optional<TopicFilter> topic_filter)
      : selector_(std::move(selector)), topic_filter_(std::move(topic_filter)) {}

  Selector selector_;
  std::optional<TopicFilter> topic_filter_;
};

}  // namespace gryph

#endif  // GRYPH_SUBSCRIPTION_H_
