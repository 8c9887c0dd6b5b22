#include "gryph/topic_filter.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::Rng;
using testing::Seeds;

TopicFilter MustParse(absl::string_view text) {
  auto f = TopicFilter::Parse(text);
  INFO("topic filter: " << text);
  REQUIRE_OK(f);
  return *std::move(f);
}

struct MatchCase {
  const char* filter;
  const char* topic;
  bool matches;
};

TEST_CASE("topic filters match levels exactly, '+' one level and '#' the rest", "[topic_filter]") {
  const MatchCase cases[] = {
      {"orders/us/IBM", "orders/us/IBM", true},
      {"orders/us/IBM", "orders/us/ibm", false},
      {"orders/us/IBM", "orders/us", false},
      {"orders/us/IBM", "orders/us/IBM/x", false},
      {"orders/us/IBM", "orders/us/IB", false},
      {"orders/+/IBM", "orders/us/IBM", true},
      {"orders/+/IBM", "orders/eu/IBM", true},
      {"orders/+/IBM", "orders//IBM", true},  // '+' matches an empty level
      {"orders/+/IBM", "orders/us/east/IBM", false},
      {"orders/+/IBM", "orders/IBM", false},
      {"orders/+", "orders/us", true},
      {"orders/+", "orders/", true},
      {"orders/+", "orders", false},
      {"orders/+", "orders/us/IBM", false},
      {"+", "orders", true},
      {"+", "", true},  // "" is one empty level
      {"+", "a/b", false},
      {"+/+", "a/b", true},
      {"+/+", "/", true},
      {"+/+", "a", false},
      {"orders/#", "orders", true},  // '#' matches zero levels
      {"orders/#", "orders/", true},
      {"orders/#", "orders/us", true},
      {"orders/#", "orders/us/IBM", true},
      {"orders/#", "order", false},
      {"orders/#", "ordersX/us", false},
      {"orders/#", "trades/us", false},
      {"#", "", true},
      {"#", "a", true},
      {"#", "a/b/c", true},
      {"#", "/", true},
      {"+/#", "a", true},
      {"+/#", "a/b/c", true},
      {"+/us/#", "orders/us", true},
      {"+/us/#", "orders/eu/x", false},
      {"/a", "/a", true},
      {"/a", "a", false},
      {"a/", "a/", true},
      {"a/", "a", false},
      {"a//b", "a//b", true},
      {"a//b", "a/b", false},
      {"a/+/b", "a/+/b", true},  // a topic's '+' is a plain character
      {"a/b", "a/+", false},
  };
  for (const MatchCase& c : cases) {
    INFO("filter '" << c.filter << "' topic '" << c.topic << "'");
    REQUIRE(MustParse(c.filter).Matches(c.topic) == c.matches);
  }
}

TEST_CASE("malformed topic filters are rejected with the column of the fault", "[topic_filter]") {
  const std::pair<const char*, const char*> cases[] = {
      {"", "topic filter:1:1: a topic filter cannot be empty"},
      {"a/#/b", "topic filter:1:3: '#' must be the last level (it matches all the rest)"},
      {"#/b", "topic filter:1:1: '#' must be the last level (it matches all the rest)"},
      {"a+", "topic filter:1:2: '+' must be a whole level, not part of 'a+'"},
      {"a/+b/c", "topic filter:1:3: '+' must be a whole level, not part of '+b'"},
      {"a/b#", "topic filter:1:4: '#' must be a whole level, not part of 'b#'"},
      {"##", "topic filter:1:1: '#' must be a whole level, not part of '##'"},
      {"a/++", "topic filter:1:3: '+' must be a whole level, not part of '++'"},
  };
  for (const auto& [filter, message] : cases) {
    auto f = TopicFilter::Parse(filter);
    INFO("filter '" << filter << "'");
    REQUIRE_CODE(f, absl::StatusCode::kInvalidArgument);
    REQUIRE(f.status().message() == message);
  }
}

TEST_CASE("a topic filter exposes its levels and wildcards", "[topic_filter]") {
  TopicFilter f = MustParse("orders/+/#");
  REQUIRE(f.text() == "orders/+/#");
  REQUIRE(f.levels().size() == 3);
  REQUIRE(f.levels()[0] == "orders");
  REQUIRE(f.levels()[1] == "+");
  REQUIRE(f.levels()[2] == "#");
  REQUIRE(f.has_wildcards());
  TopicFilter plain = MustParse("a//b");
  REQUIRE(plain.levels().size() == 3);
  REQUIRE(plain.levels()[1].empty());
  REQUIRE_FALSE(plain.has_wildcards());
  REQUIRE(plain == MustParse("a//b"));
  REQUIRE_FALSE(plain == f);
}

// A reference matcher over split levels.
bool ReferenceMatch(absl::string_view filter, absl::string_view topic) {
  std::vector<std::string> f = absl::StrSplit(filter, '/');
  std::vector<std::string> t = absl::StrSplit(topic, '/');
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == "#") return true;
    if (i >= t.size()) return false;
    if (f[i] != "+" && f[i] != t[i]) return false;
  }
  return f.size() == t.size();
}

TEST_CASE("topic filters agree with a reference matcher on random input", "[topic_filter]") {
  const char kAlphabet[] = {'a', 'b', '/', '+', '#'};
  for (uint64_t seed : Seeds(700, 20)) {
    INFO("seed " << seed);
    Rng rng(seed);
    for (int iter = 0; iter < 1000; ++iter) {
      std::string filter, topic;
      for (uint64_t n = rng.Uniform(8); n > 0; --n) filter += kAlphabet[rng.Uniform(5)];
      for (uint64_t n = rng.Uniform(8); n > 0; --n) topic += kAlphabet[rng.Uniform(3)];
      INFO("filter '" << filter << "' topic '" << topic << "'");
      auto f = TopicFilter::Parse(filter);
      if (!f.ok()) {
        REQUIRE(f.status().code() == absl::StatusCode::kInvalidArgument);
        continue;
      }
      REQUIRE(f->Matches(topic) == ReferenceMatch(filter, topic));
    }
  }
}

}  // namespace
}  // namespace gryph
