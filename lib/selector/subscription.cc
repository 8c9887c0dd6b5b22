#include "gryph/subscription.h"

#include "absl/strings/str_cat.h"
#include "lib/util/coding.h"
#include "lib/util/status_macros.h"

namespace gryph {

absl::StatusOr<Subscription> Subscription::Create(absl::string_view selector,
                                                  absl::string_view topic_filter,
                                                  const SelectorOptions& options) {
  GRYPH_ASSIGN_OR_RETURN(Selector parsed, Selector::Parse(selector, options));
  std::optional<TopicFilter> filter;
  if (!topic_filter.empty()) {
    GRYPH_ASSIGN_OR_RETURN(filter, TopicFilter::Parse(topic_filter));
  }
  return Subscription(std::move(parsed), std::move(filter));
}

absl::StatusOr<Subscription> Subscription::Create(Selector selector,
                                                  absl::string_view topic_filter) {
  std::optional<TopicFilter> filter;
  if (!topic_filter.empty()) {
    GRYPH_ASSIGN_OR_RETURN(filter, TopicFilter::Parse(topic_filter));
  }
  return Subscription(std::move(selector), std::move(filter));
}

bool Subscription::Matches(const Event& event) const {
  if (topic_filter_.has_value() && !topic_filter_->Matches(event.topic())) return false;
  return selector_.Matches(event);
}

void Subscription::EncodeTo(std::string* out) const {
  out->push_back(static_cast<char>(kEncodingVersion));
  internal::PutLengthPrefixed(out, selector_.text());
  internal::PutLengthPrefixed(out, topic_filter_.has_value()
                                       ? absl::string_view(topic_filter_->text())
                                       : absl::string_view());
}

std::string Subscription::Encode() const {
  std::string out;
  EncodeTo(&out);
  return out;
}

absl::StatusOr<Subscription> Subscription::Decode(absl::string_view bytes,
                                                  const SelectorOptions& options) {
  internal::ByteReader in(bytes, "subscription");
  uint8_t version = 0;
  if (!in.ReadByte(&version, "version")) return in.status();
  if (version != kEncodingVersion) {
    in.Fail(absl::StrCat("unsupported version ", version));
    return in.status();
  }
  absl::string_view selector;
  absl::string_view topic_filter;
  if (!in.ReadLengthPrefixed(&selector, "selector") ||
      !in.ReadLengthPrefixed(&topic_filter, "topic filter") || !in.ExpectEnd()) {
    return in.status();
  }
  absl::StatusOr<Subscription> sub = Create(selector, topic_filter, options);
  if (!sub.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed subscription: ", sub.status().message()));
  }
  return sub;
}

bool operator==(const Subscription& a, const Subscription& b) {
  return a.selector_.text() == b.selector_.text() && a.topic_filter_ == b.topic_filter_;
}

}  // namespace gryph
