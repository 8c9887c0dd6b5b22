#include "gryph/message.h"

#include <vector>

#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::Rng;

EventRef Order(int64_t qty) {
  Event e;
  e.SetTopic("orders/IBM").SetString("symbol", "IBM").SetInt64("quantity", qty).SetPayload("p");
  return MakeEventRef(std::move(e));
}

CheckpointToken Ct(uint32_t p, Tick t) {
  CheckpointToken ct;
  ct.Set(PubendId{p}, t);
  return ct;
}

std::vector<Message> Samples() {
  return {
      KnowledgeMessage{PubendId{3},
                       {KnowledgeSpan::Lost({1, 99}), KnowledgeSpan::Silence({100, 104}),
                        KnowledgeSpan::Data(105, Order(10)), KnowledgeSpan::Data(106, Order(20)),
                        KnowledgeSpan::Silence({107, kMaxTick})}},
      KnowledgeMessage{PubendId{0}, {}},
      KnowledgeMessage{PubendId{3}, {KnowledgeSpan::Silence({1, 99})}, {{100, 200}, {300, 300}}},
      CuriosityMessage{PubendId{7}, {{5, 9}, {12, 12}, {1000, 1u << 30}}},
      ReleaseMessage{{{PubendId{1}, 10, 20}, {PubendId{2}, 0, 0}}},
      ConnectMessage{"audit", "symbol = 'IBM' AND quantity > 1000", "orders/#", Ct(1, 500), 3,
                     true},
      ConnectedMessage{"audit", Ct(1, 500), 3},
      DeliveryMessage{"audit", PubendId{1}, DeliveryKind::kEvent, 501, Order(1500), 500},
      DeliveryMessage{"audit", PubendId{1}, DeliveryKind::kSilence, 600, nullptr, 501},
      DeliveryMessage{"audit", PubendId{1}, DeliveryKind::kGap, 700, nullptr, 0},
      AckMessage{"audit", Ct(1, 700)},
      DisconnectMessage{"audit"},
      UnsubscribeMessage{"audit"},
      SessionErrorMessage{"audit", absl::StatusCode::kOutOfRange, "checkpoint is ahead"},
      PublishMessage{7, PubendId{1}, "", Order(5)},
      PublishMessage{8, PubendId{0}, "IBM", Order(6)},
      PublishMessage{0, PubendId{0}, "", Order(7)},  // by the empty key, no idempotency
      PublishedMessage{7, PubendId{1}, Tick{1'000'001}},
      PublishedMessage{8, PubendId{2}, absl::ResourceExhaustedError("the store is full")},
      PublishedMessage{9, PubendId{2}, absl::AbortedError("")},
  };
}

TEST_CASE("every message kind round-trips through its encoding", "[message]") {
  for (const Message& m : Samples()) {
    INFO(MessageKindName(m));
    absl::StatusOr<Message> decoded = DecodeMessage(EncodeMessage(m));
    REQUIRE_OK(decoded);
    REQUIRE(*decoded == m);
  }
}

TEST_CASE("version 2 carries only a knowledge message's unanswered ranges", "[message]") {
  // A knowledge message without them, and every other message, is written as version 1.
  REQUIRE(EncodeMessage(KnowledgeMessage{PubendId{3}, {}})[0] == 1);
  REQUIRE(EncodeMessage(DisconnectMessage{"a"})[0] == 1);
  const std::string v2 = EncodeMessage(KnowledgeMessage{PubendId{3}, {}, {{7, 9}}});
  REQUIRE(v2[0] == 2);
  REQUIRE(std::get<KnowledgeMessage>(*DecodeMessage(v2)).unanswered ==
          std::vector<TickRange>{{7, 9}});
  std::string other = EncodeMessage(DisconnectMessage{"a"});
  other[0] = 2;
  REQUIRE_CODE(DecodeMessage(other), absl::StatusCode::kInvalidArgument);
  std::string zero = EncodeMessage(KnowledgeMessage{PubendId{3}, {}});
  zero[0] = 2;
  zero.push_back(0);
  REQUIRE_CODE(DecodeMessage(zero), absl::StatusCode::kInvalidArgument);
  // Unanswered ranges do not overlap the spans the message answers.
  REQUIRE_CODE(DecodeMessage(EncodeMessage(
                   KnowledgeMessage{PubendId{3}, {KnowledgeSpan::Silence({5, 10})}, {{9, 12}}})),
               absl::StatusCode::kInvalidArgument);
  // As many ranges as announced (ranges are relative to the previous one: they ascend).
  std::string bad = EncodeMessage(KnowledgeMessage{PubendId{3}, {}, {{7, 9}}});
  bad[bad.size() - 3] = 2;  // two ranges announced, one there
  REQUIRE_CODE(DecodeMessage(bad), absl::StatusCode::kInvalidArgument);
}

TEST_CASE("every truncation of every message is rejected", "[message]") {
  for (const Message& m : Samples()) {
    const std::string bytes = EncodeMessage(m);
    for (size_t n = 0; n < bytes.size(); ++n) {
      INFO(MessageKindName(m) << " prefix " << n);
      REQUIRE_CODE(DecodeMessage(bytes.substr(0, n)), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST_CASE("malformed messages are rejected with a reason", "[message]") {
  auto reason = [](const std::string& bytes) {
    absl::StatusOr<Message> m = DecodeMessage(bytes);
    REQUIRE_FALSE(m.ok());
    REQUIRE(m.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(m.status().message());
  };
  REQUIRE_THAT(reason(std::string("\x03\x01", 2)), Catch::Contains("unsupported version 3"));
  REQUIRE_THAT(reason(std::string("\x01\x63", 2)), Catch::Contains("unknown message kind 99"));
  // Knowledge with a Q span: version, kind 1, pubend 0, count 1, value 0, gap 0, length 0.
  REQUIRE_THAT(reason(std::string("\x01\x01\x00\x01\x00\x00\x00", 7)),
               Catch::Contains("is not S, D or L"));
  // Release with released above latest delivered.
  REQUIRE_THAT(reason(std::string("\x01\x03\x01\x01\x05\x04", 6)),
               Catch::Contains("above latest delivered"));
  // A delivery of an unknown kind: subscription "", pubend 1, kind 7, tick 5, previous 4.
  REQUIRE_THAT(reason(std::string("\x01\x06\x00\x01\x07\x05\x04", 7)),
               Catch::Contains("unknown delivery kind"));
  // A delivery whose previous tick is not below its tick.
  REQUIRE_THAT(reason(std::string("\x01\x06\x00\x01\x01\x05\x05", 7)),
               Catch::Contains("previous tick 5 not below it"));
  // A range that runs past the last tick.
  std::string past_end = EncodeMessage(CuriosityMessage{PubendId{1}, {{kMaxTick, kMaxTick}}});
  past_end[3] = 2;  // claim two ranges; the second must fail
  past_end += std::string("\x00\x00", 2);
  REQUIRE_THAT(reason(past_end), Catch::Contains("after the last tick"));
  REQUIRE_THAT(reason(EncodeMessage(DisconnectMessage{"x"}) + "!"), Catch::Contains("trailing"));
}

TEST_CASE("malformed publish and published messages are rejected with a reason", "[message]") {
  auto reason = [](const std::string& bytes) {
    absl::StatusOr<Message> m = DecodeMessage(bytes);
    REQUIRE_FALSE(m.ok());
    REQUIRE(m.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(m.status().message());
  };
  const std::string event = Order(1)->Encode();
  const std::string prefixed = std::string(1, static_cast<char>(event.size())) + event;
  // The well-formed ones these are mutations of.
  REQUIRE_OK(DecodeMessage(std::string("\x01\x0b\x07\x03", 4) + prefixed));
  REQUIRE_OK(DecodeMessage(std::string("\x01\x0b\x07\x00\x01k", 6) + prefixed));
  REQUIRE_OK(DecodeMessage(std::string("\x01\x0c\x07\x03\x00\x05", 6)));
  REQUIRE_OK(DecodeMessage(std::string("\x01\x0c\x07\x03\x05\x01!", 7)));
  // A key after a named pubend: read as the event, which it is not.
  REQUIRE_THAT(reason(std::string("\x01\x0b\x07\x03\x01k", 6) + prefixed),
               Catch::Contains("event"));
  // No event, or one that does not decode.
  REQUIRE_THAT(reason(std::string("\x01\x0b\x07\x03", 4)), Catch::Contains("truncated event"));
  REQUIRE_THAT(reason(std::string("\x01\x0b\x07\x03\x01\x09", 6)),
               Catch::Contains("malformed event"));
  // A pubend beyond 32 bits: 2^32 is the varint 80 80 80 80 10.
  REQUIRE_THAT(reason(std::string("\x01\x0b\x07\x80\x80\x80\x80\x10", 8) + prefixed),
               Catch::Contains("pubend 4294967296 exceeds"));
  REQUIRE_THAT(reason(EncodeMessage(PublishMessage{7, PubendId{3}, "", Order(1)}) + "!"),
               Catch::Contains("1 trailing bytes"));
  // A status code beyond absl's canonical ones (16).
  REQUIRE_THAT(reason(std::string("\x01\x0c\x07\x03\x11\x01!", 7)),
               Catch::Contains("status code 17 exceeds 16"));
  // OK at tick 0; OK followed by a message instead of a tick; an error without its message.
  REQUIRE_THAT(reason(std::string("\x01\x0c\x07\x03\x00\x00", 6)),
               Catch::Contains("published at tick 0"));
  REQUIRE_THAT(reason(std::string("\x01\x0c\x07\x03\x00\x01!", 7)),
               Catch::Contains("1 trailing bytes"));
  REQUIRE_THAT(reason(std::string("\x01\x0c\x07\x03\x05", 5)),
               Catch::Contains("truncated error message"));
  // Version 2 is the knowledge message's alone.
  std::string v2 = EncodeMessage(PublishedMessage{7, PubendId{3}, Tick{5}});
  v2[0] = 2;
  REQUIRE_THAT(reason(v2), Catch::Contains("version 2 is only for knowledge, not published"));
}

TEST_CASE("random mutations of messages never crash the decoder", "[message][fuzz]") {
  const std::vector<Message> samples = Samples();
  for (uint64_t seed : testing::Seeds(10, 20)) {
    INFO("seed " << seed << " (rerun with GRYPH_SEED=" << seed << ")");
    Rng rng(seed);
    for (int i = 0; i < 2000; ++i) {
      std::string bytes = EncodeMessage(samples[rng.Uniform(samples.size())]);
      const int flips = 1 + static_cast<int>(rng.Uniform(3));
      for (int f = 0; f < flips; ++f) {
        bytes[rng.Uniform(bytes.size())] = static_cast<char>(rng.Next());
      }
      if (rng.OneIn(4)) bytes.resize(rng.Uniform(bytes.size() + 1));
      absl::StatusOr<Message> m = DecodeMessage(bytes);
      if (m.ok()) REQUIRE(EncodeMessage(*m) == bytes);  // only canonical encodings decode
    }
  }
}

}  // namespace
}  // namespace gryph
