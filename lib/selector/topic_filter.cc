#include "gryph/topic_filter.h"

#include "absl/strings/str_cat.h"
#include "lib/selector/lexer.h"

namespace gryph {

namespace {

absl::Status FilterError(absl::string_view text, size_t offset, absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("topic filter:", selector_ast::PositionOf(text, offset), ": ", message));
}

}  // namespace

absl::StatusOr<TopicFilter> TopicFilter::Parse(absl::string_view text) {
  if (text.empty()) return FilterError(text, 0, "a topic filter cannot be empty");
  TopicFilter filter;
  filter.text_ = std::string(text);
  size_t begin = 0;
  while (true) {
    size_t end = text.find('/', begin);
    const bool last = end == absl::string_view::npos;
    if (last) end = text.size();
    const absl::string_view level = text.substr(begin, end - begin);
    if (level == "+" || level == "#") {
      filter.has_wildcards_ = true;
      if (level == "#" && !last) {
        return FilterError(text, begin, "'#' must be the last level (it matches all the rest)");
      }
    } else {
      const size_t wildcard = level.find_first_of("+#");
      if (wildcard != absl::string_view::npos) {
        return FilterError(text, begin + wildcard,
                           absl::StrCat("'", level.substr(wildcard, 1),
                                        "' must be a whole level, not part of '", level, "'"));
      }
    }
    filter.levels_.emplace_back(level);
    if (last) return filter;
    begin = end + 1;
  }
}

bool TopicFilter::Matches(absl::string_view topic) const {
  size_t begin = 0;  // start of the next topic level; topic.size() + 1 once all are consumed
  for (const std::string& level : levels_) {
    if (level == "#") return true;           // zero or more remaining levels
    if (begin > topic.size()) return false;  // the topic has fewer levels
    size_t end = topic.find('/', begin);
    if (end == absl::string_view::npos) end = topic.size();
    if (level != "+" && topic.substr(begin, end - begin) != level) return false;
    begin = end + 1;
  }
  return begin == topic.size() + 1;  // and the topic has no more levels
}

}  // namespace gryph
