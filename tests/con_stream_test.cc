#include "gryph/broker/con_stream.h"

#include <string>
#include <vector>

#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{7};
const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);
const absl::Duration kInterval = absl::Seconds(1);

EventRef MakeEvent(int id) {
  Event e;
  e.SetInt64("id", id);
  return MakeEventRef(std::move(e));
}

// The D ticks of a batch, in order.
std::vector<Tick> DataTicks(const ConStream::Batch& b) {
  std::vector<Tick> ticks;
  for (const KnowledgeSpan& s : b.data) {
    REQUIRE(s.value == TickValue::kD);
    REQUIRE(s.range.first == s.range.last);
    REQUIRE(s.event != nullptr);
    ticks.push_back(s.range.first);
  }
  return ticks;
}

// "name:S<tick>" for each Silence, in order.
std::vector<std::string> Summary(const std::vector<DeliveryMessage>& out) {
  std::vector<std::string> s;
  for (const DeliveryMessage& m : out) {
    REQUIRE(m.pubend == kP);
    REQUIRE(m.kind == DeliveryKind::kSilence);
    REQUIRE(m.event == nullptr);
    s.push_back(m.subscription + ":S" + std::to_string(m.tick));
  }
  return s;
}

// S [1,4], D 5, S 6, D 7, D 8, S [9,10]; Q from 11, then D 12.
KnowledgeStream SampleKnowledge() {
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateSilence({1, 4}));
  REQUIRE_OK(k.AccumulateData(5, MakeEvent(5)));
  REQUIRE_OK(k.AccumulateSilence({6, 6}));
  REQUIRE_OK(k.AccumulateData(7, MakeEvent(7)));
  REQUIRE_OK(k.AccumulateData(8, MakeEvent(8)));
  REQUIRE_OK(k.AccumulateSilence({9, 10}));
  REQUIRE_OK(k.AccumulateData(12, MakeEvent(12)));
  return k;
}

TEST_CASE("constream proposes the D ticks up to the doubt horizon", "[constream]") {
  const KnowledgeStream k = SampleKnowledge();
  ConStream c(kP, 0);
  const ConStream::Batch b = c.Next(k, 100);
  REQUIRE(b.through == 10);  // tick 11 is Q: D 12 is beyond the horizon
  REQUIRE(DataTicks(b) == std::vector<Tick>{5, 7, 8});
  REQUIRE(b.data[1].event->Find("id") != nullptr);
  REQUIRE(std::get<int64_t>(*b.data[1].event->Find("id")) == 7);
  // Next only proposes: the position moves on Advanced.
  REQUIRE(c.latest_delivered() == 0);
  REQUIRE(c.Next(k, 100).through == 10);
}

TEST_CASE("constream with nothing known proposes nothing", "[constream]") {
  KnowledgeStream k;
  ConStream c(kP, 0);
  ConStream::Batch b = c.Next(k, 100);
  REQUIRE(b.through == 0);
  REQUIRE(b.data.empty());
  REQUIRE_OK(k.AccumulateData(2, MakeEvent(2)));  // tick 1 is still Q
  b = c.Next(k, 100);
  REQUIRE(b.through == 0);
  REQUIRE(b.data.empty());
  REQUIRE_OK(k.AccumulateSilence({1, 1}));
  b = c.Next(k, 100);
  REQUIRE(b.through == 2);
  REQUIRE(DataTicks(b) == std::vector<Tick>{2});
}

TEST_CASE("constream stops just before the first D tick that does not fit", "[constream]") {
  const KnowledgeStream k = SampleKnowledge();
  ConStream c(kP, 0);
  ConStream::Batch b = c.Next(k, 2);
  REQUIRE(b.through == 7);  // D 8 does not fit: through the tick before it
  REQUIRE(DataTicks(b) == std::vector<Tick>{5, 7});
  b = c.Next(k, 1);
  REQUIRE(b.through == 6);
  REQUIRE(DataTicks(b) == std::vector<Tick>{5});
  // Room for no D at all still moves through the silence before the first one.
  b = c.Next(k, 0);
  REQUIRE(b.through == 4);
  REQUIRE(b.data.empty());
}

TEST_CASE("constream does not go beyond the limit", "[constream]") {
  const KnowledgeStream k = SampleKnowledge();
  ConStream c(kP, 0);
  ConStream::Batch b = c.Next(k, 100, 6);
  REQUIRE(b.through == 6);
  REQUIRE(DataTicks(b) == std::vector<Tick>{5});
  b = c.Next(k, 100, 7);
  REQUIRE(b.through == 7);
  REQUIRE(DataTicks(b) == std::vector<Tick>{5, 7});
  c.Advanced(6);
  // A limit at or below the position proposes nothing.
  b = c.Next(k, 100, 3);
  REQUIRE(b.through == 6);
  REQUIRE(b.data.empty());
}

TEST_CASE("constream continues after Advanced", "[constream]") {
  KnowledgeStream k = SampleKnowledge();
  ConStream c(kP, 0);
  c.Advanced(c.Next(k, 2).through);
  REQUIRE(c.latest_delivered() == 7);
  ConStream::Batch b = c.Next(k, 100);
  REQUIRE(b.through == 10);
  REQUIRE(DataTicks(b) == std::vector<Tick>{8});
  c.Advanced(b.through);
  REQUIRE(c.Next(k, 100).through == 10);
  REQUIRE_OK(k.AccumulateSilence({11, 11}));
  b = c.Next(k, 100);
  REQUIRE(b.through == 12);
  REQUIRE(DataTicks(b) == std::vector<Tick>{12});
}

TEST_CASE("a constream restarted at a position proposes only what follows it", "[constream]") {
  const KnowledgeStream k = SampleKnowledge();
  ConStream c(kP, 5);
  REQUIRE(c.latest_delivered() == 5);
  const ConStream::Batch b = c.Next(k, 100);
  REQUIRE(b.through == 10);
  REQUIRE(DataTicks(b) == std::vector<Tick>{7, 8});
}

TEST_CASE("constream membership follows Join and Leave", "[constream]") {
  ConStream c(kP, 0);
  REQUIRE(c.member_count() == 0);
  c.Join("a", kT0);
  c.Join("b", kT0);
  c.Join("a", kT0);  // again: still one member
  REQUIRE(c.member_count() == 2);
  REQUIRE(c.IsMember("a"));
  REQUIRE(c.IsMember("b"));
  REQUIRE_FALSE(c.IsMember("c"));
  c.Leave("a");
  c.Leave("nobody");
  REQUIRE(c.member_count() == 1);
  REQUIRE_FALSE(c.IsMember("a"));
  REQUIRE(c.pubend() == kP);
}

TEST_CASE("constream sends Silence to members idle for the interval", "[constream]") {
  ConStream c(kP, 0);
  c.Join("a", kT0);
  c.Join("b", kT0);
  // Nothing delivered yet: no Silence, however long they wait.
  REQUIRE(c.Silences(kT0 + 10 * kInterval, kInterval).empty());
  c.Advanced(40);
  REQUIRE(c.Silences(kT0 + kInterval - absl::Nanoseconds(1), kInterval).empty());
  REQUIRE(Summary(c.Silences(kT0 + kInterval, kInterval)) ==
          std::vector<std::string>{"a:S40", "b:S40"});
  // Each Silence counts as a message: none again until the position moves and they idle again.
  REQUIRE(c.Silences(kT0 + 5 * kInterval, kInterval).empty());
  c.Advanced(50);
  REQUIRE(c.Silences(kT0 + 2 * kInterval - absl::Nanoseconds(1), kInterval).empty());
  REQUIRE(Summary(c.Silences(kT0 + 2 * kInterval, kInterval)) ==
          std::vector<std::string>{"a:S50", "b:S50"});
  c.Leave("a");
  c.Advanced(60);
  REQUIRE(Summary(c.Silences(kT0 + 10 * kInterval, kInterval)) ==
          std::vector<std::string>{"b:S60"});
}

TEST_CASE("constream sends no Silence at or below a member's start tick", "[constream]") {
  ConStream c(kP, 10);
  c.Join("ahead", kT0, 30);  // its CT is ahead of the constream (a broker after a crash)
  c.Join("behind", kT0, 5);  // a start below the position counts as the position
  REQUIRE(c.Silences(kT0 + kInterval, kInterval).empty());
  c.Advanced(30);
  REQUIRE(Summary(c.Silences(kT0 + kInterval, kInterval)) ==
          std::vector<std::string>{"behind:S30"});
  c.Advanced(31);
  REQUIRE(Summary(c.Silences(kT0 + 2 * kInterval, kInterval)) ==
          std::vector<std::string>{"ahead:S31", "behind:S31"});
}

TEST_CASE("a delivery resets the member's silence timer", "[constream]") {
  ConStream c(kP, 0);
  c.Join("a", kT0);
  c.Join("b", kT0);
  c.Advanced(20);
  c.NoteDelivered("a", 20, kT0 + absl::Milliseconds(500));
  c.NoteDelivered("nobody", 20, kT0);  // not a member: ignored
  REQUIRE(c.member_count() == 2);
  // "a" got a message at 20 = the position: nothing to say to it.
  REQUIRE(Summary(c.Silences(kT0 + kInterval, kInterval)) == std::vector<std::string>{"b:S20"});
  c.Advanced(25);
  // "a" heard at 0.5 s: idle for the interval only at 1.5 s.
  REQUIRE(c.Silences(kT0 + absl::Milliseconds(1499), kInterval).empty());
  REQUIRE(Summary(c.Silences(kT0 + absl::Milliseconds(1500), kInterval)) ==
          std::vector<std::string>{"a:S25"});
  // A delivery below the position still resets the timer but leaves the tick behind.
  c.Advanced(30);
  c.NoteDelivered("b", 28, kT0 + absl::Seconds(3));
  REQUIRE(Summary(c.Silences(kT0 + absl::Milliseconds(3999), kInterval)) ==
          std::vector<std::string>{"a:S30"});
  REQUIRE(Summary(c.Silences(kT0 + absl::Seconds(4), kInterval)) ==
          std::vector<std::string>{"b:S30"});
}

}  // namespace
}  // namespace gryph
