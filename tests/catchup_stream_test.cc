#include "gryph/broker/catchup_stream.h"

#include <string>
#include <vector>

#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{3};

EventRef MakeEvent(int id, absl::string_view color = "red") {
  Event e;
  e.SetInt64("id", id).SetString("color", color);
  return MakeEventRef(std::move(e));
}

Subscription Everything() { return *Subscription::Create(""); }

// "E12", "S30", "G10" for each message, in order; checks the fields every message shares.
std::vector<std::string> Summary(const std::vector<DeliveryMessage>& out) {
  std::vector<std::string> s;
  for (const DeliveryMessage& m : out) {
    REQUIRE(m.subscription == "sub");
    REQUIRE(m.pubend == kP);
    REQUIRE((m.event != nullptr) == (m.kind == DeliveryKind::kEvent));
    const char* k = m.kind == DeliveryKind::kEvent ? "E" : m.kind == DeliveryKind::kGap ? "G" : "S";
    s.push_back(k + std::to_string(m.tick));
  }
  return s;
}

using Strings = std::vector<std::string>;
using Ranges = std::vector<TickRange>;

// Steps `c` once against `k` and latestDelivered `ld`; returns the messages, nacks in *nacks.
Strings StepOnce(CatchupStream& c, const KnowledgeStream& k, Tick ld, Ranges* nacks = nullptr) {
  std::vector<DeliveryMessage> out;
  Ranges n;
  c.Step(k, ld, &out, &n);
  if (nacks != nullptr) {
    *nacks = n;
  } else {
    REQUIRE(n.empty());
  }
  return Summary(out);
}

TEST_CASE("catchup delivers the PFS matches with events from the knowledge stream", "[catchup]") {
  KnowledgeStream k;
  const EventRef e12 = MakeEvent(12);
  REQUIRE_OK(k.AccumulateSilence({1, 11}));
  REQUIRE_OK(k.AccumulateData(12, e12));
  REQUIRE_OK(k.AccumulateData(13, MakeEvent(13)));  // matched someone else, not us
  REQUIRE_OK(k.AccumulateSilence({14, 14}));
  REQUIRE_OK(k.AccumulateData(15, MakeEvent(15)));
  REQUIRE_OK(k.AccumulateData(20, MakeEvent(20)));

  SessionStream session;
  session.Start(10);
  CatchupStream c("sub", kP, 10, 0, Everything(), &session);
  REQUIRE(c.pubend() == kP);
  REQUIRE(c.position() == 10);
  REQUIRE_FALSE(c.caught_up(30));
  REQUIRE(c.caught_up(10));
  REQUIRE(c.WantedMatches(30) == TickRange{11, 30});
  c.AddMatches({12, 15, 20}, 30, 0);
  REQUIRE_FALSE(c.WantedMatches(30).has_value());

  std::vector<DeliveryMessage> out;
  Ranges nacks;
  c.Step(k, 30, &out, &nacks);
  // Only the PFS's matches, in order; then a Silence so that the CT reaches latestDelivered.
  REQUIRE(Summary(out) == Strings{"E12", "E15", "E20", "S30"});
  REQUIRE(out[0].event == e12);
  REQUIRE(nacks.empty());
  REQUIRE(c.position() == 30);
  REQUIRE(c.caught_up(30));
  REQUIRE_FALSE(c.caught_up(31));
  // Nothing more until latestDelivered moves.
  REQUIRE(StepOnce(c, k, 30).empty());
}

TEST_CASE("catchup nacks the matched events it lacks and delivers them in order", "[catchup]") {
  KnowledgeStream k;  // only tick 12 is known
  REQUIRE_OK(k.AccumulateData(12, MakeEvent(12)));
  SessionStream session;
  session.Start(10);
  CatchupStream c("sub", kP, 10, 0, Everything(), &session);
  c.AddMatches({12, 15, 20}, 30, 0);

  Ranges nacks;
  REQUIRE(StepOnce(c, k, 30, &nacks) == Strings{"E12"});
  REQUIRE(nacks == Ranges{{15, 15}, {20, 20}});  // the matched ticks only, not all Q
  REQUIRE(c.position() == 12);
  REQUIRE_FALSE(c.caught_up(30));
  // Outstanding nacks are not asked again.
  REQUIRE(StepOnce(c, k, 30, &nacks).empty());
  REQUIRE(nacks.empty());
  // 20 arrives first: it waits for 15.
  REQUIRE_OK(k.AccumulateData(20, MakeEvent(20)));
  REQUIRE(StepOnce(c, k, 30).empty());
  REQUIRE(c.position() == 12);
  REQUIRE_OK(k.AccumulateData(15, MakeEvent(15)));
  REQUIRE(StepOnce(c, k, 30) == Strings{"E15", "E20", "S30"});
  REQUIRE(c.caught_up(30));
}

TEST_CASE("catchup nacks at most nack_window matches at once", "[catchup]") {
  CatchupStreamOptions o;
  o.nack_window = 2;
  KnowledgeStream k;
  SessionStream session;
  session.Start(10);
  CatchupStream c("sub", kP, 10, 0, Everything(), &session, o);
  c.AddMatches({12, 13, 15, 20}, 30, 0);
  Ranges nacks;
  REQUIRE(StepOnce(c, k, 30, &nacks).empty());
  REQUIRE(nacks == Ranges{{12, 13}});  // adjacent ticks make one range
  REQUIRE_OK(k.AccumulateData(12, MakeEvent(12)));
  REQUIRE(StepOnce(c, k, 30, &nacks) == Strings{"E12"});
  REQUIRE(nacks.empty());  // 13 is still outstanding
  REQUIRE_OK(k.AccumulateData(13, MakeEvent(13)));
  REQUIRE(StepOnce(c, k, 30, &nacks) == Strings{"E13"});
  REQUIRE(nacks == Ranges{{15, 15}, {20, 20}});
}

TEST_CASE("catchup sends a Gap covering exactly what the PFS lost", "[catchup]") {
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateData(8, MakeEvent(8)));
  REQUIRE_OK(k.AccumulateData(12, MakeEvent(12)));
  SessionStream session;
  session.Start(5);
  CatchupStream c("sub", kP, 5, 0, Everything(), &session);
  REQUIRE(c.WantedMatches(20) == TickRange{6, 20});
  // The PFS was chopped through 10: it cannot say whether 6..10 matched (8 did, but the reader
  // does not know it and must not deliver it).
  c.AddMatches({8, 12}, 20, 10);
  REQUIRE(StepOnce(c, k, 20) == Strings{"G10", "E12", "S20"});
  REQUIRE(c.caught_up(20));
}

TEST_CASE("catchup whose whole window was chopped sends one Gap and no Silence", "[catchup]") {
  KnowledgeStream k;
  SessionStream session;
  session.Start(5);
  CatchupStream c("sub", kP, 5, 0, Everything(), &session);
  c.AddMatches({}, 20, 20);
  REQUIRE(StepOnce(c, k, 20) == Strings{"G20"});
  REQUIRE(c.position() == 20);
  REQUIRE(c.caught_up(20));
}

TEST_CASE("catchup turns a run of released matches into one Gap", "[catchup]") {
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateLost({1, 14}));
  REQUIRE_OK(k.AccumulateData(15, MakeEvent(15)));
  REQUIRE_OK(k.AccumulateSilence({16, 16}));  // filtered upstream: nothing to deliver
  SessionStream session;
  session.Start(10);
  CatchupStream c("sub", kP, 10, 0, Everything(), &session);
  c.AddMatches({12, 13, 15, 16}, 30, 0);
  REQUIRE(StepOnce(c, k, 30) == Strings{"G13", "E15", "S30"});
  REQUIRE(c.caught_up(30));
}

TEST_CASE("catchup sends one Gap for released matches whose knowledge arrives in parts",
          "[catchup]") {
  // The nacks go out a window at a time, and so come the answers: each part of the run of lost
  // matches must extend the one Gap, not send another.
  CatchupStreamOptions o;
  o.nack_window = 2;
  KnowledgeStream k;
  SessionStream session;
  session.Start(10);
  CatchupStream c("sub", kP, 10, 0, Everything(), &session, o);
  c.AddMatches({12, 13, 15, 20, 24, 25}, 30, 0);
  Ranges nacks;
  REQUIRE(StepOnce(c, k, 30, &nacks).empty());
  REQUIRE(nacks == Ranges{{12, 13}});
  REQUIRE_OK(k.AccumulateLost({12, 13}));
  REQUIRE(StepOnce(c, k, 30, &nacks).empty());  // the Gap is held: the run may go on
  REQUIRE(nacks == Ranges{{15, 15}, {20, 20}});
  REQUIRE_OK(k.AccumulateLost({14, 15}));
  REQUIRE_OK(k.AccumulateLost({16, 20}));
  REQUIRE(StepOnce(c, k, 30, &nacks).empty());
  REQUIRE(nacks == Ranges{{24, 25}});
  // An event ends the run: the Gap goes out before it; the next run makes a second Gap.
  REQUIRE_OK(k.AccumulateData(24, MakeEvent(24)));
  REQUIRE_OK(k.AccumulateLost({21, 23}));
  REQUIRE(StepOnce(c, k, 30) == Strings{"G20", "E24"});
  REQUIRE_OK(k.AccumulateLost({25, 25}));
  REQUIRE(StepOnce(c, k, 30) == Strings{"G25", "S30"});
  REQUIRE(c.caught_up(30));
}

TEST_CASE("catchup joins what the PFS lost and the released matches after it in one Gap",
          "[catchup]") {
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateLost({1, 14}));
  REQUIRE_OK(k.AccumulateData(16, MakeEvent(16)));
  SessionStream session;
  session.Start(5);
  CatchupStream c("sub", kP, 5, 0, Everything(), &session);
  c.AddMatches({12, 14, 16}, 20, 10);  // chopped through 10; 12 and 14 released
  REQUIRE(StepOnce(c, k, 20) == Strings{"G14", "E16", "S20"});
}

TEST_CASE("a refilter joins released spans around silence in one Gap", "[catchup]") {
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateLost({6, 8}));
  REQUIRE_OK(k.AccumulateData(9, MakeEvent(9, "blue")));  // does not match: no message
  REQUIRE_OK(k.AccumulateLost({10, 12}));
  REQUIRE_OK(k.AccumulateData(13, MakeEvent(13, "red")));
  REQUIRE_OK(k.AccumulateSilence({14, 20}));
  SessionStream session;
  session.Start(5);
  CatchupStream c("sub", kP, 5, 20, *Subscription::Create("color = 'red'"), &session);
  REQUIRE(StepOnce(c, k, 20) == Strings{"G12", "E13", "S20"});
}

TEST_CASE("catchup delivers at most max_deliveries_per_step per step", "[catchup]") {
  CatchupStreamOptions o;
  o.max_deliveries_per_step = 2;
  KnowledgeStream k;
  for (Tick t : {12, 15, 20}) REQUIRE_OK(k.AccumulateData(t, MakeEvent(static_cast<int>(t))));
  SessionStream session;
  session.Start(10);
  CatchupStream c("sub", kP, 10, 0, Everything(), &session, o);
  c.AddMatches({12, 15, 20}, 30, 0);
  REQUIRE(StepOnce(c, k, 30) == Strings{"E12", "E15"});
  REQUIRE(c.position() == 15);
  REQUIRE_FALSE(c.caught_up(30));
  REQUIRE(StepOnce(c, k, 30) == Strings{"E20", "S30"});
  REQUIRE(c.caught_up(30));
}

TEST_CASE("catchup reads the PFS in windows while latestDelivered moves", "[catchup]") {
  CatchupStreamOptions o;
  o.max_buffered_matches = 4;
  KnowledgeStream k;
  for (Tick t : {2, 4, 9}) REQUIRE_OK(k.AccumulateData(t, MakeEvent(static_cast<int>(t))));
  SessionStream session;
  session.Start(0);
  CatchupStream c("sub", kP, 0, 0, Everything(), &session, o);
  REQUIRE(c.WantedMatches(10) == TickRange{1, 10});
  c.AddMatches({2, 4}, 6, 0);                      // a partial answer, through 6
  REQUIRE_FALSE(c.WantedMatches(10).has_value());  // half the buffer is full
  REQUIRE(StepOnce(c, k, 10) == Strings{"E2", "E4"});
  REQUIRE(c.position() == 6);  // S through the end of the answer, no further
  REQUIRE_FALSE(c.caught_up(10));
  REQUIRE(c.WantedMatches(10) == TickRange{7, 10});
  c.AddMatches({9}, 10, 0);
  REQUIRE(StepOnce(c, k, 10) == Strings{"E9", "S10"});
  REQUIRE(c.caught_up(10));
  // latestDelivered moved on: the stream wants the next window, and silence there.
  REQUIRE_FALSE(c.caught_up(15));
  REQUIRE(c.WantedMatches(15) == TickRange{11, 15});
  c.AddMatches({}, 15, 0);
  REQUIRE(StepOnce(c, k, 15) == Strings{"S15"});
  REQUIRE(c.position() == 15);
}

TEST_CASE("catchup ignores matches at or below what it already has", "[catchup]") {
  KnowledgeStream k;
  for (Tick t : {4, 12}) REQUIRE_OK(k.AccumulateData(t, MakeEvent(static_cast<int>(t))));
  SessionStream session;
  session.Start(10);
  CatchupStream c("sub", kP, 10, 0, Everything(), &session);
  c.AddMatches({4, 12}, 20, 0);  // 4 is at or below the checkpoint
  REQUIRE(StepOnce(c, k, 20) == Strings{"E12", "S20"});
}

TEST_CASE("catchup refilters the span before the subscription existed here", "[catchup]") {
  KnowledgeStream k;
  const EventRef red8 = MakeEvent(8, "red");
  const EventRef red18 = MakeEvent(18, "red");
  SessionStream session;
  session.Start(5);
  CatchupStream c("sub", kP, 5, 15, *Subscription::Create("color = 'red'"), &session);
  // (5, 15] is refiltered: the PFS is asked only from 16 on.
  REQUIRE(c.WantedMatches(20) == TickRange{16, 20});
  c.AddMatches({18}, 20, 0);
  Ranges nacks;
  REQUIRE(StepOnce(c, k, 20, &nacks).empty());
  REQUIRE(nacks == Ranges{{6, 15}});  // every unknown tick of the span
  REQUIRE(StepOnce(c, k, 20, &nacks).empty());
  REQUIRE(nacks.empty());
  REQUIRE_OK(k.AccumulateSilence({6, 7}));
  REQUIRE_OK(k.AccumulateData(8, red8));
  REQUIRE_OK(k.AccumulateData(9, MakeEvent(9, "blue")));
  REQUIRE_OK(k.AccumulateSilence({10, 15}));
  REQUIRE_OK(k.AccumulateData(18, red18));
  std::vector<DeliveryMessage> out;
  c.Step(k, 20, &out, &nacks);
  REQUIRE(Summary(out) == Strings{"E8", "E18", "S20"});
  REQUIRE(out[0].event == red8);
  REQUIRE(out[1].event == red18);
  REQUIRE(nacks.empty());
}

TEST_CASE("a refilter that spends the step's budget leaves the chop's Gap to the next step",
          "[catchup]") {
  CatchupStreamOptions o;
  o.max_deliveries_per_step = 1;
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateSilence({1, 14}));
  REQUIRE_OK(k.AccumulateData(15, MakeEvent(15, "red")));
  REQUIRE_OK(k.AccumulateSilence({16, 17}));
  REQUIRE_OK(k.AccumulateData(18, MakeEvent(18, "red")));
  REQUIRE_OK(k.AccumulateData(19, MakeEvent(19, "red")));
  REQUIRE_OK(k.AccumulateSilence({20, 20}));
  SessionStream session;
  session.Start(5);
  CatchupStream c("sub", kP, 5, 15, *Subscription::Create("color = 'red'"), &session, o);
  REQUIRE(c.WantedMatches(20) == TickRange{16, 20});
  c.AddMatches({18, 19}, 20, 16);  // the PFS was chopped through 16
  // The refilter's last tick takes the whole budget: the Gap must not overdraw it.
  REQUIRE(StepOnce(c, k, 20) == Strings{"E15"});
  REQUIRE(StepOnce(c, k, 20) == Strings{"G16"});
  REQUIRE(StepOnce(c, k, 20) == Strings{"E18"});
  REQUIRE(StepOnce(c, k, 20) == Strings{"E19", "S20"});
  REQUIRE(c.caught_up(20));
}

}  // namespace
}  // namespace gryph
