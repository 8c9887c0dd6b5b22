#include "gryph/event.h"

#include <string>

#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::Rng;

Event SampleOrder() {
  Event e;
  e.SetTopic("orders/us/IBM")
      .SetString("symbol", "IBM")
      .SetInt64("quantity", 1500)
      .SetDouble("price", 131.25)
      .SetBool("urgent", true)
      .SetPayload(std::string(250, 'x'));
  return e;
}

TEST_CASE("an event round-trips through its encoding", "[event]") {
  Event e = SampleOrder();
  e.SetInt64("min", INT64_MIN).SetInt64("max", INT64_MAX).SetDouble("neg", -0.5);
  auto decoded = Event::Decode(e.Encode());
  REQUIRE_OK(decoded);
  REQUIRE(*decoded == e);
}

TEST_CASE("an empty event round-trips", "[event]") {
  Event e;
  auto decoded = Event::Decode(e.Encode());
  REQUIRE_OK(decoded);
  REQUIRE(*decoded == e);
}

TEST_CASE("attributes are found by exact, case-sensitive name", "[event]") {
  Event e = SampleOrder();
  REQUIRE(e.Find("quantity") != nullptr);
  REQUIRE(std::get<int64_t>(*e.Find("quantity")) == 1500);
  REQUIRE(e.Find("Quantity") == nullptr);
  REQUIRE(e.Find("absent") == nullptr);
}

TEST_CASE("setting an attribute again replaces its value and type", "[event]") {
  Event e;
  e.SetInt64("a", 1).SetString("a", "one");
  REQUIRE(e.attributes().size() == 1);
  REQUIRE(std::get<std::string>(*e.Find("a")) == "one");
}

TEST_CASE("attributes are kept sorted by name", "[event]") {
  Event e;
  e.SetInt64("c", 3).SetInt64("a", 1).SetInt64("b", 2);
  REQUIRE(e.attributes()[0].name == "a");
  REQUIRE(e.attributes()[1].name == "b");
  REQUIRE(e.attributes()[2].name == "c");
}

TEST_CASE("every truncation of an encoded event is rejected", "[event]") {
  const std::string bytes = SampleOrder().Encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto decoded = Event::Decode(absl::string_view(bytes).substr(0, n));
    INFO("prefix length " << n);
    REQUIRE_CODE(decoded, absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("trailing bytes are rejected", "[event]") {
  std::string bytes = SampleOrder().Encode() + "z";
  auto decoded = Event::Decode(bytes);
  REQUIRE_CODE(decoded, absl::StatusCode::kInvalidArgument);
  REQUIRE(decoded.status().message().find("trailing") != absl::string_view::npos);
}

TEST_CASE("an unknown version is rejected", "[event]") {
  std::string bytes = SampleOrder().Encode();
  bytes[0] = 2;
  auto decoded = Event::Decode(bytes);
  REQUIRE_CODE(decoded, absl::StatusCode::kInvalidArgument);
  REQUIRE(decoded.status().message().find("version") != absl::string_view::npos);
}

TEST_CASE("an unknown type tag and a bad bool are rejected", "[event]") {
  Event e;
  e.SetBool("b", true);
  std::string bytes = e.Encode();
  // version, topic length 0, count 1, name length 1, "b", tag, value, payload length 0
  REQUIRE(bytes.size() == 8);
  std::string bad_tag = bytes;
  bad_tag[5] = 9;
  REQUIRE_CODE(Event::Decode(bad_tag), absl::StatusCode::kInvalidArgument);
  std::string bad_bool = bytes;
  bad_bool[6] = 2;
  REQUIRE_CODE(Event::Decode(bad_bool), absl::StatusCode::kInvalidArgument);
}

TEST_CASE("repeated or unsorted attribute names are rejected", "[event]") {
  Event e;
  e.SetInt64("a", 1).SetInt64("b", 2);
  std::string bytes = e.Encode();
  // Rename "b" to "a": names must be strictly increasing.
  const size_t pos = bytes.rfind('b');
  bytes[pos] = 'a';
  REQUIRE_CODE(Event::Decode(bytes), absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a huge declared length is rejected without allocating", "[event]") {
  std::string bytes;
  bytes.push_back(1);
  bytes += "\xff\xff\xff\xff\xff\xff\xff\xff\x7f";  // topic length near 2^63
  REQUIRE_CODE(Event::Decode(bytes), absl::StatusCode::kInvalidArgument);
  std::string overflow = "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f";
  REQUIRE_CODE(Event::Decode(overflow), absl::StatusCode::kInvalidArgument);
}

TEST_CASE("random byte strings and mutations never crash the decoder", "[event][fuzz]") {
  const std::string good = SampleOrder().Encode();
  for (uint64_t seed : testing::Seeds(1, 20)) {
    INFO("seed " << seed << " (rerun with GRYPH_SEED=" << seed << ")");
    Rng rng(seed);
    for (int i = 0; i < 2000; ++i) {
      std::string bytes = good;
      const int flips = 1 + static_cast<int>(rng.Uniform(4));
      for (int f = 0; f < flips; ++f)
        bytes[rng.Uniform(bytes.size())] = static_cast<char>(rng.Next());
      if (rng.OneIn(3)) bytes.resize(rng.Uniform(bytes.size()));
      auto decoded = Event::Decode(bytes);
      if (decoded.ok()) REQUIRE(decoded->Encode() == bytes);  // decode accepts only canonical input
    }
  }
}

}  // namespace
}  // namespace gryph
