// A topic filter: selects events by their hierarchical topic (Event::topic()).
//
// A topic is a sequence of levels separated by '/': "orders/us/IBM". A filter is written the same
// way, and some of its levels may be wildcards:
//
//   '+'  matches exactly one level, whatever it holds (an empty level too);
//   '#'  matches all remaining levels, zero or more; it may only be the last level.
//
//   "orders/+/IBM"  matches "orders/us/IBM", not "orders/us/east/IBM" nor "orders/IBM"
//   "orders/#"      matches "orders", "orders/us" and "orders/us/IBM", not "order"
//   "#"             matches every topic, the empty one included
//
// Levels compare byte for byte, case-sensitively. Empty levels are ordinary levels: "a//b" has
// three levels, "" has one (empty) level, "/a" has two. A wildcard must be a whole level ("a+" and
// "#a" are errors); topics themselves are never parsed, so a '+' or '#' in a topic is a plain
// character.
//
// Thread-safety: immutable after Parse; thread-safe. Copies are independent values.

#ifndef GRYPH_TOPIC_FILTER_H_
#define GRYPH_TOPIC_FILTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gryph {

class TopicFilter {
 public:
  // Parses `text`. Fails with InvalidArgument, in the form "topic filter:1:COLUMN: message"
  // (columns count bytes), when `text` is empty, a '+' or '#' shares its level with other
  // characters, or a '#' is not the last level.
  static absl::StatusOr<TopicFilter> Parse(absl::string_view text);

  // Whether `topic` matches the filter. Does not allocate.
  bool Matches(absl::string_view topic) const;

  // The text given to Parse.
  const std::string& text() const { return text_; }

  // The levels, in order; a wildcard level is exactly "+" or "#" (for the matcher's topic tree).
  absl::Span<const std::string> levels() const { return levels_; }

  // Whether any level is a wildcard.
  bool has_wildcards() const { return has_wildcards_; }

  friend bool operator==(const TopicFilter& a, const TopicFilter& b) { return a.text_ == b.text_; }

 private:
  TopicFilter() = default;

  std::string text_;
  std::vector<std::string> levels_;  // at least one
  bool has_wildcards_ = false;
};

}  // namespace gryph

#endif  // GRYPH_TOPIC_FILTER_H_
