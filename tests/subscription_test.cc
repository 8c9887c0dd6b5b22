#include "gryph/subscription.h"

#include <string>

#include "absl/strings/match.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::Rng;
using testing::Seeds;

Event Order(absl::string_view topic, int64_t qty) {
  Event e;
  e.SetTopic(topic).SetString("symbol", "IBM").SetInt64("qty", qty);
  return e;
}

TEST_CASE("a subscription needs both its topic filter and its selector", "[subscription]") {
  auto sub = Subscription::Create("qty > 100", "orders/#");
  REQUIRE_OK(sub);
  REQUIRE(sub->Matches(Order("orders/us/IBM", 150)));
  REQUIRE_FALSE(sub->Matches(Order("orders/us/IBM", 50)));
  REQUIRE_FALSE(sub->Matches(Order("trades/us/IBM", 150)));
  REQUIRE(sub->topic_filter() != nullptr);
  REQUIRE(sub->topic_filter()->text() == "orders/#");
  REQUIRE(sub->selector().text() == "qty > 100");
}

TEST_CASE("a subscription without a topic filter ignores topics", "[subscription]") {
  auto sub = Subscription::Create("symbol = 'IBM'");
  REQUIRE_OK(sub);
  REQUIRE(sub->topic_filter() == nullptr);
  REQUIRE(sub->Matches(Order("anything", 1)));
  REQUIRE(sub->Matches(Order("", 1)));
}

TEST_CASE("an empty selector with a topic filter selects by topic alone", "[subscription]") {
  auto sub = Subscription::Create("", "orders/+/IBM");
  REQUIRE_OK(sub);
  REQUIRE(sub->Matches(Order("orders/eu/IBM", 0)));
  REQUIRE_FALSE(sub->Matches(Order("orders/eu/MSFT", 0)));
  auto everything = Subscription::Create("");
  REQUIRE_OK(everything);
  REQUIRE(everything->Matches(Event()));
}

TEST_CASE("a subscription reports which of its parts does not parse", "[subscription]") {
  auto bad_selector = Subscription::Create("qty >", "orders/#");
  REQUIRE_CODE(bad_selector, absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StartsWith(bad_selector.status().message(), "selector:1:6:"));
  auto bad_filter = Subscription::Create("qty > 1", "orders/#/x");
  REQUIRE_CODE(bad_filter, absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StartsWith(bad_filter.status().message(), "topic filter:1:8:"));
}

TEST_CASE("a subscription round-trips through its encoding", "[subscription]") {
  for (auto [selector, filter] :
       {std::pair{"qty > 100 AND symbol LIKE 'I%'", "orders/#"}, std::pair{"", ""},
        std::pair{"a = 'x''y'", ""}, std::pair{"", "+"}}) {
    auto sub = Subscription::Create(selector, filter);
    REQUIRE_OK(sub);
    auto decoded = Subscription::Decode(sub->Encode());
    REQUIRE_OK(decoded);
    REQUIRE(*decoded == *sub);
    REQUIRE(decoded->selector().text() == selector);
    REQUIRE((decoded->topic_filter() == nullptr) == (absl::string_view(filter).empty()));
    REQUIRE(decoded->Matches(Order("orders/x", 150)) == sub->Matches(Order("orders/x", 150)));
  }
}

TEST_CASE("the subscription encoding is as documented", "[subscription]") {
  auto sub = Subscription::Create("a", "b/#");
  REQUIRE_OK(sub);
  REQUIRE(sub->Encode() == std::string("\x01\x01"
                                       "a"
                                       "\x03"
                                       "b/#",
                                       7));
}

TEST_CASE("every truncation of an encoded subscription is rejected", "[subscription]") {
  auto sub = Subscription::Create("qty > 100", "orders/#");
  REQUIRE_OK(sub);
  const std::string bytes = sub->Encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    INFO("prefix length " << n);
    REQUIRE_CODE(Subscription::Decode(absl::string_view(bytes).substr(0, n)),
                 absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("a malformed encoded subscription is rejected with a reason", "[subscription]") {
  auto sub = Subscription::Create("qty > 100", "orders/#");
  REQUIRE_OK(sub);
  std::string bytes = sub->Encode();

  auto trailing = Subscription::Decode(bytes + "z");
  REQUIRE_CODE(trailing, absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(trailing.status().message(), "trailing"));

  std::string version = bytes;
  version[0] = 2;
  auto bad_version = Subscription::Decode(version);
  REQUIRE_CODE(bad_version, absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(bad_version.status().message(), "unsupported version 2"));

  std::string bad_text = bytes;
  bad_text[2] = '#';  // "#ty > 100" does not parse
  auto unparsable = Subscription::Decode(bad_text);
  REQUIRE_CODE(unparsable, absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StartsWith(unparsable.status().message(), "malformed subscription: selector:1:1:"));

  auto huge = Subscription::Decode(std::string("\x01\xff\xff\xff\xff\x0f", 6));
  REQUIRE_CODE(huge, absl::StatusCode::kInvalidArgument);
}

// Found by fuzz/selector_fuzzer: an overlong varint decoded as an empty subscription that
// re-encodes differently. The shared ByteReader now accepts only the shortest form.
TEST_CASE("an overlong varint length is rejected", "[subscription]") {
  auto decoded = Subscription::Decode(std::string("\x01\x80\x00\x00", 4));
  REQUIRE_CODE(decoded, absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(decoded.status().message(), "non-minimal varint"));
  REQUIRE_OK(Subscription::Decode(std::string("\x01\x00\x00", 3)));
}

TEST_CASE("random bytes and mutations never crash the subscription decoder", "[subscription]") {
  auto sub = Subscription::Create("qty BETWEEN 1 AND 10 OR symbol IN ('a', 'b')", "x/+/#");
  REQUIRE_OK(sub);
  const std::string good = sub->Encode();
  for (uint64_t seed : Seeds(900, 10)) {
    INFO("seed " << seed);
    Rng rng(seed);
    for (int iter = 0; iter < 1000; ++iter) {
      std::string bytes = good;
      for (uint64_t k = 1 + rng.Uniform(3); k > 0; --k) {
        bytes[rng.Uniform(bytes.size())] = static_cast<char>(rng.Uniform(256));
      }
      auto decoded = Subscription::Decode(bytes);
      if (decoded.ok()) {
        REQUIRE(decoded->Encode() == bytes);  // Decode accepts only what Encode produces
      } else {
        REQUIRE(decoded.status().code() == absl::StatusCode::kInvalidArgument);
      }
    }
  }
}

}  // namespace
}  // namespace gryph
