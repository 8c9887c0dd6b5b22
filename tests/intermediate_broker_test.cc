#include "gryph/intermediate_broker.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gryph/in_process_channel.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{1};

EventRef MakeEvent(int64_t k) {
  Event e;
  e.SetTopic("orders").SetInt64("k", k);
  return MakeEventRef(std::move(e));
}

// A PHB stand-in "phb", an intermediate "ib" and two downstream nodes "a" and "b", each
// recording what it receives.
class Fixture {
 public:
  explicit Fixture(IntermediateBrokerOptions options = Defaults()) {
    for (const char* name : {"phb", "a", "b", "x"}) {
      std::unique_ptr<Channel> c = *net_.Connect(name);
      std::string n = name;
      c->SetReceiver([this, n](absl::string_view from, Message m) {
        received_[n].push_back({std::string(from), std::move(m)});
      });
      peers_[n] = std::move(c);
    }
    ib_channel_ = *net_.Connect("ib");
    auto ib = IntermediateBroker::Open(std::move(options), ib_channel_.get());
    REQUIRE_OK(ib);
    ib_ = *std::move(ib);
  }

  static IntermediateBrokerOptions Defaults() {
    IntermediateBrokerOptions o;
    o.pubends = {{kP, "phb"}};
    o.downstream = {{"a", {}}, {"b", {}}};
    return o;
  }

  void SendFrom(const std::string& peer, Message m) {
    REQUIRE_OK(peers_.at(peer)->Send("ib", std::move(m)));
    net_.DeliverAll();
  }

  // What `peer` received of type T, and forgets everything it received.
  template <typename T>
  std::vector<T> Take(const std::string& peer) {
    std::vector<T> out;
    for (auto& [from, m] : received_[peer]) {
      REQUIRE(from == "ib");
      if (auto* t = std::get_if<T>(&m)) out.push_back(*t);
    }
    received_[peer].clear();
    return out;
  }

  // The value of every tick in `window` as `peer` was told, by accumulating what it received.
  KnowledgeStream Knowledge(const std::string& peer) {
    KnowledgeStream k;
    for (const KnowledgeMessage& m : Take<KnowledgeMessage>(peer)) {
      for (const KnowledgeSpan& s : m.spans) REQUIRE_OK(k.Accumulate(s));
    }
    return k;
  }

  void Tick(absl::Time now) {
    ib_->OnTimer(now);
    net_.DeliverAll();
  }

  IntermediateBroker& ib() { return *ib_; }

 private:
  InProcessNetwork net_;
  std::map<std::string, std::unique_ptr<Channel>> peers_;
  std::map<std::string, std::vector<std::pair<std::string, Message>>> received_;
  std::unique_ptr<Channel> ib_channel_;
  std::unique_ptr<IntermediateBroker> ib_;
};

// Ticks 1..n with D at every tick divisible by 10 (event k = tick / 10) and S elsewhere.
KnowledgeMessage Stream(Tick from, Tick to) {
  KnowledgeMessage m{kP, {}};
  Tick s = from;
  for (Tick t = from; t <= to; ++t) {
    if (t % 10 != 0) continue;
    if (s < t) m.spans.push_back(KnowledgeSpan::Silence({s, t - 1}));
    m.spans.push_back(KnowledgeSpan::Data(t, MakeEvent(static_cast<int64_t>(t / 10))));
    s = t + 1;
  }
  if (s <= to) m.spans.push_back(KnowledgeSpan::Silence({s, to}));
  return m;
}

TEST_CASE("absurd intermediate broker options are InvalidArgument at Open", "[intermediate]") {
  using Options = IntermediateBrokerOptions;
  const std::vector<std::pair<std::string, std::function<void(Options&)>>> cases = {
      {"max_spans_per_message", [](Options& o) { o.max_spans_per_message = 0; }},
      {"renack_interval", [](Options& o) { o.renack_interval = absl::ZeroDuration(); }},
      {"release_interval", [](Options& o) { o.release_interval = -absl::Seconds(1); }},
      {"upstream node", [](Options& o) { o.pubends[0].node = ""; }},
      {"downstream node", [](Options& o) { o.downstream[0].node = ""; }},
  };
  testing::RequireEachOptionRefused(Fixture::Defaults(), cases, [](const Options& o) {
    InProcessNetwork net;
    auto channel = *net.Connect("ib");
    return IntermediateBroker::Open(o, channel.get()).status();
  });
}

TEST_CASE("the intermediate forwards upstream knowledge to every downstream node",
          "[intermediate]") {
  Fixture f;
  f.SendFrom("phb", Stream(1, 30));
  for (const char* peer : {"a", "b"}) {
    KnowledgeStream k = f.Knowledge(peer);
    REQUIRE(k.DoubtHorizon(0) == 30);
    REQUIRE(k.ValueAt(10) == TickValue::kD);
    REQUIRE(std::get<int64_t>(*k.SpanAt(20).event->Find("k")) == 2);
    REQUIRE(k.ValueAt(11) == TickValue::kS);
  }
  REQUIRE(f.ib().stats().knowledge_received == 1);
}

TEST_CASE("the intermediate ignores knowledge from a node that is not upstream", "[intermediate]") {
  Fixture f;
  f.SendFrom("x", Stream(1, 30));
  REQUIRE(f.Take<KnowledgeMessage>("a").empty());
  REQUIRE(f.ib().stats().unknown_senders == 1);
  REQUIRE(f.ib().cache(kP).ValueAt(10) == TickValue::kQ);
}

TEST_CASE("the intermediate answers a nack from its cache without going upstream",
          "[intermediate]") {
  Fixture f;
  f.SendFrom("phb", Stream(1, 30));
  f.Take<KnowledgeMessage>("a");
  f.Take<KnowledgeMessage>("b");
  f.SendFrom("a", CuriosityMessage{kP, {{5, 25}}});
  KnowledgeStream k = f.Knowledge("a");
  REQUIRE(k.DoubtHorizon(4) == 25);
  REQUIRE(k.ValueAt(20) == TickValue::kD);
  REQUIRE(f.Take<KnowledgeMessage>("b").empty());  // only the requester gets the answer
  REQUIRE(f.Take<CuriosityMessage>("phb").empty());
  REQUIRE(f.ib().stats().ticks_answered_from_cache == 21);
}

TEST_CASE("two downstream nacks for one range make one upstream nack and both get the answer",
          "[intermediate]") {
  Fixture f;
  f.SendFrom("phb", Stream(1, 10));
  f.SendFrom("phb", Stream(21, 30));  // 11..20 was lost on the way
  f.Take<KnowledgeMessage>("a");
  f.Take<KnowledgeMessage>("b");
  f.SendFrom("a", CuriosityMessage{kP, {{11, 20}}});
  f.SendFrom("b", CuriosityMessage{kP, {{11, 20}}});
  std::vector<CuriosityMessage> up = f.Take<CuriosityMessage>("phb");
  REQUIRE(up.size() == 1);
  REQUIRE(up[0].ranges == std::vector<TickRange>{{11, 20}});
  REQUIRE(f.ib().stats().nack_ranges_consolidated == 1);
  REQUIRE(f.ib().outstanding(kP) == std::vector<TickRange>{{11, 20}});

  f.SendFrom("phb", Stream(11, 20));  // the PHB's answer
  for (const char* peer : {"a", "b"}) {
    KnowledgeStream k = f.Knowledge(peer);
    REQUIRE(k.DoubtHorizon(10) == 20);
    REQUIRE(k.ValueAt(20) == TickValue::kD);
  }
  REQUIRE(f.ib().outstanding(kP).empty());
}

TEST_CASE("what an upstream answer left unanswered is asked for again at once", "[intermediate]") {
  Fixture f;
  f.SendFrom("phb", Stream(1, 10));
  f.SendFrom("phb", Stream(41, 50));  // 11..40 was lost on the way
  f.Take<KnowledgeMessage>("a");
  f.Take<KnowledgeMessage>("b");
  f.SendFrom("a", CuriosityMessage{kP, {{11, 40}}});
  REQUIRE(f.Take<CuriosityMessage>("phb").size() == 1);
  // The PHB answers 11..20 and says 21..40 is left (its bound on one answer): the rest is asked
  // for now, not at the renack timer, and the part answered goes to the requester.
  KnowledgeMessage part = Stream(11, 20);
  part.unanswered = {{21, 40}};
  f.SendFrom("phb", part);
  std::vector<CuriosityMessage> up = f.Take<CuriosityMessage>("phb");
  REQUIRE(up.size() == 1);
  REQUIRE(up[0].ranges == std::vector<TickRange>{{21, 40}});
  REQUIRE(f.Knowledge("a").DoubtHorizon(10) == 20);
  // The same answer again (duplicated on the link) asks for nothing more.
  f.SendFrom("phb", part);
  REQUIRE(f.Take<CuriosityMessage>("phb").empty());
  f.SendFrom("phb", Stream(21, 40));
  REQUIRE(f.Knowledge("a").DoubtHorizon(20) == 40);
  REQUIRE(f.ib().outstanding(kP).empty());
}

TEST_CASE("an answer goes only to the downstream node that asked for it", "[intermediate]") {
  Fixture f;
  f.SendFrom("phb", Stream(1, 10));
  f.SendFrom("phb", Stream(21, 30));
  f.Take<KnowledgeMessage>("a");
  f.Take<KnowledgeMessage>("b");
  f.SendFrom("a", CuriosityMessage{kP, {{11, 15}}});
  f.SendFrom("b", CuriosityMessage{kP, {{14, 20}}});
  std::vector<CuriosityMessage> up = f.Take<CuriosityMessage>("phb");
  REQUIRE(up.size() == 2);
  REQUIRE(up[1].ranges == std::vector<TickRange>{{16, 20}});  // only what was not outstanding
  f.SendFrom("phb", Stream(11, 20));
  KnowledgeStream a = f.Knowledge("a");
  KnowledgeStream b = f.Knowledge("b");
  REQUIRE(a.QRanges({11, 20}) == std::vector<TickRange>{{16, 20}});
  REQUIRE(b.QRanges({11, 20}) == std::vector<TickRange>{{11, 13}});
}

TEST_CASE("outstanding nacks are sent upstream again on the timer", "[intermediate]") {
  Fixture f;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  f.SendFrom("a", CuriosityMessage{kP, {{1, 9}}});
  REQUIRE(f.Take<CuriosityMessage>("phb").size() == 1);
  f.Tick(t0);
  REQUIRE(f.Take<CuriosityMessage>("phb").size() == 1);
  f.Tick(t0 + absl::Milliseconds(50));
  REQUIRE(f.Take<CuriosityMessage>("phb").empty());  // not due yet
  f.Tick(t0 + absl::Milliseconds(250));
  std::vector<CuriosityMessage> again = f.Take<CuriosityMessage>("phb");
  REQUIRE(again.size() == 1);
  REQUIRE(again[0].ranges == std::vector<TickRange>{{1, 9}});
  f.SendFrom("phb", Stream(1, 9));
  f.Tick(t0 + absl::Seconds(1));
  REQUIRE(f.Take<CuriosityMessage>("phb").empty());
}

TEST_CASE("a filtered link gets S for events none of its subscriptions match", "[intermediate]") {
  IntermediateBrokerOptions o = Fixture::Defaults();
  o.downstream[0].filter = {*Subscription::Create("k = 2"), *Subscription::Create("k >= 3")};
  Fixture f(o);
  f.SendFrom("phb", Stream(1, 40));
  KnowledgeStream a = f.Knowledge("a");
  KnowledgeStream b = f.Knowledge("b");
  REQUIRE(a.ValueAt(10) == TickValue::kS);  // k = 1 matches neither
  REQUIRE(a.ValueAt(20) == TickValue::kD);
  REQUIRE(a.ValueAt(30) == TickValue::kD);
  REQUIRE(a.SpanAt(10).range == TickRange{1, 19});  // coalesced with its neighbours
  REQUIRE(b.ValueAt(10) == TickValue::kD);          // no filter: everything
  REQUIRE(f.ib().stats().events_filtered == 1);
  // Nack answers go through the filter too.
  f.SendFrom("a", CuriosityMessage{kP, {{1, 40}}});
  KnowledgeStream again = f.Knowledge("a");
  REQUIRE(again.ValueAt(10) == TickValue::kS);
  REQUIRE(again.ValueAt(40) == TickValue::kD);
}

TEST_CASE("release goes upstream as the minimum, only once every downstream node reported",
          "[intermediate]") {
  Fixture f;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  f.SendFrom("a", ReleaseMessage{{{kP, 50, 80}}});
  f.Tick(t0);
  REQUIRE(f.Take<ReleaseMessage>("phb").empty());  // b has not spoken: nothing is released
  f.SendFrom("b", ReleaseMessage{{{kP, 60, 70}}});
  f.Tick(t0 + absl::Milliseconds(100));
  std::vector<ReleaseMessage> r = f.Take<ReleaseMessage>("phb");
  REQUIRE(r.size() == 1);
  REQUIRE(r[0].entries == std::vector<ReleaseEntry>{{kP, 50, 70}});
  // Values only move forward: an older, late message changes nothing.
  f.SendFrom("a", ReleaseMessage{{{kP, 10, 20}}});
  f.SendFrom("b", ReleaseMessage{{{kP, 65, 90}}});
  f.Tick(t0 + absl::Milliseconds(150));
  REQUIRE(f.Take<ReleaseMessage>("phb").empty());  // not due yet
  f.Tick(t0 + absl::Milliseconds(200));
  r = f.Take<ReleaseMessage>("phb");
  REQUIRE(r.size() == 1);
  REQUIRE(r[0].entries == std::vector<ReleaseEntry>{{kP, 50, 80}});
  REQUIRE(f.ib().stats().releases_sent == 2);
}

TEST_CASE("releases from unknown senders are ignored and counted", "[intermediate]") {
  Fixture f;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  f.SendFrom("x", ReleaseMessage{{{kP, 50, 80}}});
  f.SendFrom("a", ReleaseMessage{{{PubendId{9}, 50, 80}}});
  f.SendFrom("a", ReleaseMessage{{{kP, 90, 80}}});
  f.Tick(t0);
  REQUIRE(f.Take<ReleaseMessage>("phb").empty());
  REQUIRE(f.ib().stats().unknown_releases == 2);
  REQUIRE(f.ib().stats().invalid_releases == 1);
}

TEST_CASE("the intermediate neither takes nor forwards publishes and their answers",
          "[intermediate]") {
  // They pass between a publisher and its PHB only: forwarded upstream, a publish would arrive
  // under the intermediate's name instead of its publisher's.
  Fixture f;
  f.SendFrom("a", PublishMessage{1, kP, "", MakeEvent(1)});
  f.SendFrom("x", PublishMessage{1, PubendId{0}, "key", MakeEvent(1)});
  f.SendFrom("phb", PublishedMessage{1, kP, Tick{5}});
  f.Tick(absl::FromUnixSeconds(1000));
  for (const char* peer : {"phb", "a", "b", "x"}) {
    INFO(peer);
    REQUIRE(f.Take<PublishMessage>(peer).empty());
    REQUIRE(f.Take<PublishedMessage>(peer).empty());
  }
  f.SendFrom("phb", Stream(1, 20));  // and it goes on as before
  REQUIRE(f.Knowledge("a").DoubtHorizon(0) == 20);
}

TEST_CASE("the cache forgets beyond its bounds and nacks a forgotten tick upstream",
          "[intermediate]") {
  IntermediateBrokerOptions o = Fixture::Defaults();
  o.cache_ticks = 1000;
  o.cache_events = 5;
  Fixture f(o);
  f.SendFrom("phb", Stream(1, 100));  // 10 events: only the newest 5 stay
  const KnowledgeStream& cache = f.ib().cache(kP);
  REQUIRE(cache.ValueAt(50) == TickValue::kQ);
  REQUIRE(cache.ValueAt(51) == TickValue::kS);
  REQUIRE(cache.ValueAt(60) == TickValue::kD);
  f.SendFrom("phb", Stream(101, 2000));  // now the tick bound applies: 2000 - 1000
  REQUIRE(cache.ValueAt(999) == TickValue::kQ);
  REQUIRE(cache.ValueAt(1990) == TickValue::kD);
  f.Take<KnowledgeMessage>("a");
  f.Take<CuriosityMessage>("phb");
  f.SendFrom("a", CuriosityMessage{kP, {{5, 15}}});
  std::vector<CuriosityMessage> up = f.Take<CuriosityMessage>("phb");
  REQUIRE(up.size() == 1);
  REQUIRE(up[0].ranges == std::vector<TickRange>{{5, 15}});
  f.SendFrom("phb", Stream(5, 15));
  KnowledgeStream a = f.Knowledge("a");
  REQUIRE(a.ValueAt(10) == TickValue::kD);
}

TEST_CASE("opening an intermediate without pubends or with a repeated node fails",
          "[intermediate]") {
  InProcessNetwork net;
  std::unique_ptr<Channel> c = *net.Connect("ib");
  IntermediateBrokerOptions o = Fixture::Defaults();
  o.pubends.clear();
  REQUIRE_CODE(IntermediateBroker::Open(o, c.get()), absl::StatusCode::kInvalidArgument);
  o = Fixture::Defaults();
  o.downstream.push_back({"a", {}});
  REQUIRE_CODE(IntermediateBroker::Open(o, c.get()), absl::StatusCode::kInvalidArgument);
  o = Fixture::Defaults();
  o.downstream.clear();
  REQUIRE_CODE(IntermediateBroker::Open(o, c.get()), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gryph
