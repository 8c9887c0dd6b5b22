// Golden bytes: every wire and value format of docs/format.md, encoded from fixed inputs and
// checked byte for byte against encodings worked out by hand from that page (the comments give
// the derivation). A round-trip test passes whatever the bytes are; these fail when an encoding
// drifts from its specification — a reordered variant, a changed tag, a different width. The
// stored layouts are checked the same way against a store checked into the tree
// (tests/store_golden_test.cc).
//
// A failure here is a format change: either a bug, or a deliberate change that must bump the
// format's version and update docs/format.md and these bytes together.

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_replace.h"
#include "gryph/checkpoint_token.h"
#include "gryph/event.h"
#include "gryph/message.h"
#include "gryph/subscription.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

// "01 0a ff" -> the bytes 0x01 0x0a 0xff.
std::string Hex(absl::string_view spaced) {
  return absl::HexStringToBytes(absl::StrReplaceAll(spaced, {{" ", ""}}));
}

// The bytes as spaced hex, for readable failures.
std::string Spaced(absl::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    if (!out.empty()) out += ' ';
    out += absl::BytesToHexString(absl::string_view(&c, 1));
  }
  return out;
}

#define REQUIRE_BYTES(actual, spaced_hex) REQUIRE(Spaced(actual) == Spaced(Hex(spaced_hex)))

CheckpointToken Ct(std::initializer_list<std::pair<uint32_t, Tick>> entries) {
  CheckpointToken ct;
  for (const auto& [p, t] : entries) ct.Set(PubendId{p}, t);
  return ct;
}

// The smallest event: no topic, no attributes, no payload.
//   version 01, topic "" 00, count 00, payload "" 00
constexpr absl::string_view kEmptyEvent = "01 00 00 00";

EventRef EmptyEvent() { return MakeEventRef(Event()); }

TEST_CASE("golden: an event's encoding", "[format][golden]") {
  Event e;
  e.SetTopic("t").SetInt64("a", -3).SetDouble("b", 1.5).SetString("c", "xy").SetBool("d", true);
  e.SetPayload("P");
  REQUIRE_BYTES(e.Encode(),
                "01"                                 // version 1
                "01 74"                              // topic "t"
                "04"                                 // four attributes, names increasing
                "01 61  00 05"                       // "a": tag 0 int64, zigzag(-3) = 5
                "01 62  01 00 00 00 00 00 00 f8 3f"  // "b": tag 1 double, 1.5 fixed64le
                "01 63  02 02 78 79"                 // "c": tag 2 string "xy"
                "01 64  03 01"                       // "d": tag 3 bool true
                "01 50");                            // payload "P"
  REQUIRE_BYTES(Event().Encode(), kEmptyEvent);
}

TEST_CASE("golden: a checkpoint token's encoding, versions 1 and 2", "[format][golden]") {
  // Version 1: non-zero ticks only. 300 = varint ac 02.
  REQUIRE_BYTES(Ct({{1, 300}, {5, 7}}).Encode(), "01 02  01 ac 02  05 07");
  REQUIRE_BYTES(CheckpointToken().Encode(), "01 00");
  // Version 2 only for a token with a zero tick.
  REQUIRE_BYTES(Ct({{2, 0}, {4, 1}}).Encode(), "02 02  02 00  04 01");
}

TEST_CASE("golden: a subscription's encoding", "[format][golden]") {
  absl::StatusOr<Subscription> s = Subscription::Create("x = 1", "t/#");
  REQUIRE_OK(s);
  REQUIRE_BYTES(s->Encode(), "01  05 78 20 3d 20 31  03 74 2f 23");
}

// Messages: version, kind, body. Ranges are (gap from `next`, length − 1), `next` from 1.
TEST_CASE("golden: every message kind's encoding", "[format][golden]") {
  SECTION("1 knowledge") {
    KnowledgeMessage m{PubendId{3},
                       {KnowledgeSpan::Lost({1, 2}), KnowledgeSpan::Silence({3, 3}),
                        KnowledgeSpan::Data(4, EmptyEvent()), KnowledgeSpan::Silence({5, 10})}};
    REQUIRE_BYTES(EncodeMessage(m), std::string("01 01  03 04"       // pubend 3, four spans
                                                "  03 00 01"         // L [1, 2]
                                                "  01 00 00"         // S [3, 3]
                                                "  02 00 00 04 ") +  // D 4, the event's 4 bytes
                                        std::string(kEmptyEvent) +
                                        "  01 00 05");  // S [5, 10]
  }
  SECTION("1 knowledge, version 2: unanswered ranges") {
    KnowledgeMessage m{PubendId{3}, {KnowledgeSpan::Silence({1, 2})}, {{5, 6}}};
    REQUIRE_BYTES(EncodeMessage(m),
                  "02 01  03 01  01 00 01"  // S [1, 2]
                  "  01  04 01");           // one range: [5, 6], from next = 1
  }
  SECTION("2 curiosity") {
    CuriosityMessage m{PubendId{7}, {{5, 9}, {12, 12}}};
    REQUIRE_BYTES(EncodeMessage(m), "01 02  07 02  04 04  02 00");
  }
  SECTION("3 release") {
    ReleaseMessage m{{{PubendId{1}, 10, 20}, {PubendId{2}, 0, 0}}};
    REQUIRE_BYTES(EncodeMessage(m), "01 03  02  01 0a 14  02 00 00");
  }
  SECTION("4 connect") {
    ConnectMessage m{"s", "x=1", "t/#", Ct({{1, 300}}), 3, true};
    REQUIRE_BYTES(EncodeMessage(m),
                  "01 04  01 73  03 78 3d 31  03 74 2f 23"
                  "  05 01 01 01 ac 02"  // the CT, length-prefixed
                  "  03  01");           // epoch 3, create
  }
  SECTION("5 connected") {
    ConnectedMessage m{"s", CheckpointToken(), 3};
    REQUIRE_BYTES(EncodeMessage(m), "01 05  01 73  02 01 00  03");
  }
  SECTION("6 delivery: event, silence, gap") {
    // 501 = varint f5 03, 500 = f4 03, 600 = d8 04.
    DeliveryMessage e{"s", PubendId{1}, DeliveryKind::kEvent, 501, EmptyEvent(), 500};
    REQUIRE_BYTES(EncodeMessage(e), std::string("01 06  01 73  01  00  f5 03  f4 03  04 ") +
                                        std::string(kEmptyEvent));
    DeliveryMessage s{"s", PubendId{1}, DeliveryKind::kSilence, 600, nullptr, 501};
    REQUIRE_BYTES(EncodeMessage(s), "01 06  01 73  01  01  d8 04  f5 03");
    DeliveryMessage g{"s", PubendId{1}, DeliveryKind::kGap, 600, nullptr, 0};
    REQUIRE_BYTES(EncodeMessage(g), "01 06  01 73  01  02  d8 04  00");
  }
  SECTION("7 ack") {
    REQUIRE_BYTES(EncodeMessage(AckMessage{"s", Ct({{1, 300}})}),
                  "01 07  01 73  05 01 01 01 ac 02");
  }
  SECTION("8 disconnect") { REQUIRE_BYTES(EncodeMessage(DisconnectMessage{"s"}), "01 08  01 73"); }
  SECTION("9 session error") {
    SessionErrorMessage m{"s", absl::StatusCode::kOutOfRange, "m"};  // code 11
    REQUIRE_BYTES(EncodeMessage(m), "01 09  01 73  0b  01 6d");
  }
  SECTION("10 unsubscribe") {
    REQUIRE_BYTES(EncodeMessage(UnsubscribeMessage{"s"}), "01 0a  01 73");
  }
  SECTION("11 publish: to a pubend, by key") {
    // Sequence 7; a named pubend carries no key, pubend 0 is followed by the key.
    REQUIRE_BYTES(EncodeMessage(PublishMessage{7, PubendId{3}, "", EmptyEvent()}),
                  std::string("01 0b  07  03  04 ") + std::string(kEmptyEvent));
    REQUIRE_BYTES(EncodeMessage(PublishMessage{7, PubendId{0}, "k1", EmptyEvent()}),
                  std::string("01 0b  07  00  02 6b 31  04 ") + std::string(kEmptyEvent));
  }
  SECTION("12 published: a tick, an error") {
    // Code 0 and the tick (501 = varint f5 03); a code and its message otherwise.
    REQUIRE_BYTES(EncodeMessage(PublishedMessage{7, PubendId{3}, Tick{501}}),
                  "01 0c  07  03  00  f5 03");
    REQUIRE_BYTES(EncodeMessage(PublishedMessage{7, PubendId{3}, absl::NotFoundError("no!")}),
                  "01 0c  07  03  05  03 6e 6f 21");  // NotFound is code 5
  }
}

TEST_CASE("golden: the hand-worked bytes decode to the same messages", "[format][golden]") {
  // The reverse direction: a decoder that agrees with a drifted encoder fails here.
  absl::StatusOr<Message> m = DecodeMessage(Hex("01 02  07 02  04 04  02 00"));
  REQUIRE_OK(m);
  REQUIRE(*m == Message(CuriosityMessage{PubendId{7}, {{5, 9}, {12, 12}}}));
  m = DecodeMessage(Hex("01 0a  01 73"));
  REQUIRE_OK(m);
  REQUIRE(*m == Message(UnsubscribeMessage{"s"}));
  m = DecodeMessage(Hex(std::string("01 0b  07  00  02 6b 31  04 ") + std::string(kEmptyEvent)));
  REQUIRE_OK(m);
  REQUIRE(*m == Message(PublishMessage{7, PubendId{0}, "k1", EmptyEvent()}));
  m = DecodeMessage(Hex("01 0c  07  03  00  f5 03"));
  REQUIRE_OK(m);
  REQUIRE(*m == Message(PublishedMessage{7, PubendId{3}, Tick{501}}));
  m = DecodeMessage(Hex("01 0c  07  03  05  03 6e 6f 21"));
  REQUIRE_OK(m);
  REQUIRE(*m == Message(PublishedMessage{7, PubendId{3}, absl::NotFoundError("no!")}));
  absl::StatusOr<Event> e = Event::Decode(Hex("01 00 01  01 62 01 00 00 00 00 00 00 f8 3f  00"));
  REQUIRE_OK(e);
  REQUIRE(e->Find("b") != nullptr);
  REQUIRE(std::get<double>(*e->Find("b")) == 1.5);
}

}  // namespace
}  // namespace gryph
