#include "gryph/broker/con_stream.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gryph/memory_storage.h"
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

// "name:E<tick>/<previous>" (S for a Silence, G for a Gap) for each message, in order; the peer
// is the subscription's name with "@".
std::vector<std::string> Summary(const std::vector<Channel::Outgoing>& out) {
  std::vector<std::string> s;
  for (const Channel::Outgoing& o : out) {
    const auto& m = std::get<DeliveryMessage>(o.message);
    REQUIRE(m.pubend == kP);
    REQUIRE(o.peer == "@" + m.subscription);
    REQUIRE((m.event != nullptr) == (m.kind == DeliveryKind::kEvent));
    const char* kind = m.kind == DeliveryKind::kEvent     ? "E"
                       : m.kind == DeliveryKind::kSilence ? "S"
                                                          : "G";
    s.push_back(m.subscription + ":" + kind + std::to_string(m.tick) + "/" +
                std::to_string(m.previous));
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
  // A limit at or below the position proposes nothing.
  const ConStream at6(kP, 6);
  b = at6.Next(k, 100, 3);
  REQUIRE(b.through == 6);
  REQUIRE(b.data.empty());
}

TEST_CASE("a constream restarted at a position proposes only what follows it", "[constream]") {
  const KnowledgeStream k = SampleKnowledge();
  ConStream c(kP, 5);
  REQUIRE(c.latest_delivered() == 5);
  const ConStream::Batch b = c.Next(k, 100);
  REQUIRE(b.through == 10);
  REQUIRE(DataTicks(b) == std::vector<Tick>{7, 8});
}

// A constream with its parts: subscriptions in a matcher, a PFS in memory, and each member's
// session stream.
class Fixture {
 public:
  explicit Fixture(Tick position = 0) : c_(kP, position) {
    storage_ = std::make_unique<MemoryStorage>(MemoryStorage::NewState());
    PfsOptions po;
    po.pubend = kP;
    auto pfs = PFS::Open(po, storage_.get());
    REQUIRE_OK(pfs);
    pfs_ = *std::move(pfs);
  }

  // Subscriber `id` named `name` with `selector` (on "id", the tick), a member from `start`.
  void Join(uint64_t id, const std::string& name, absl::string_view selector, absl::Time now,
            Tick start = 0) {
    if (!names_.contains(name)) {
      auto sub = Subscription::Create(selector, "");
      REQUIRE_OK(sub);
      REQUIRE_OK(matcher_.Add(SubscriberId{id}, *std::move(sub)));
      matcher_.Publish();
      WriteBatch wb;
      REQUIRE_OK(pfs_->AddSubscriber(SubscriberId{id}, &wb));
      REQUIRE_OK(storage_->Commit(wb));
      names_[name] = id;
      peers_[name] = "@" + name;
    }
    sessions_[name].Start(std::max(start, c_.latest_delivered()));
    c_.Join(SubscriberId{id}, name, peers_[name], &sessions_[name], now, start);
  }

  // One round: what the knowledge allows, delivered, committed.
  ConStream::Round Round(const KnowledgeStream& k, absl::Time now, uint64_t max_unacked = 1000,
                         size_t max_data = 100) {
    const ConStream::Batch batch = c_.Next(k, max_data);
    WriteBatch wb;
    ConStream::Round round;
    REQUIRE_OK(c_.Deliver(batch, matcher_, *pfs_, &wb, now, max_unacked, &round));
    REQUIRE_OK(storage_->Commit(wb));
    pfs_->MarkCommitted(pfs_->last_timestamp());
    REQUIRE(c_.latest_delivered() == batch.through);
    return round;
  }

  // Moves the position to `t` through silence.
  void SilenceThrough(Tick t, absl::Time now) {
    REQUIRE_OK(silence_.AccumulateSilence({silenced_ + 1, t}));
    silenced_ = t;
    REQUIRE(Round(silence_, now).messages.empty());
  }

  ConStream& c() { return c_; }
  PFS& pfs() { return *pfs_; }
  SessionStream& session(const std::string& name) { return sessions_[name]; }

 private:
  std::unique_ptr<Storage> storage_;
  std::unique_ptr<PFS> pfs_;
  Matcher matcher_;
  std::map<std::string, uint64_t> names_;
  std::map<std::string, std::string> peers_;
  std::map<std::string, SessionStream> sessions_;
  KnowledgeStream silence_;
  Tick silenced_ = 0;
  ConStream c_;
};

TEST_CASE("constream membership follows Join and Leave", "[constream]") {
  Fixture f;
  ConStream& c = f.c();
  REQUIRE(c.member_count() == 0);
  f.Join(1, "a", "", kT0);
  f.Join(2, "b", "", kT0);
  f.Join(1, "a", "", kT0);  // again: still one member
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

TEST_CASE("a constream round delivers each event to the members that matched, finished",
          "[constream]") {
  Fixture f;
  f.Join(1, "odd", "id IN (5, 7)", kT0);
  f.Join(2, "all", "", kT0);
  f.Join(3, "gone", "", kT0);
  f.c().Leave("gone");  // not a member: nothing sent, but its matches are still recorded
  const ConStream::Round r = f.Round(SampleKnowledge(), kT0);
  REQUIRE(Summary(r.messages) ==
          std::vector<std::string>{"odd:E5/0", "all:E5/0", "odd:E7/5", "all:E7/5", "all:E8/7"});
  REQUIRE(f.c().latest_delivered() == 10);
  REQUIRE(r.pfs_records == 3);  // one per tick that matched, members or not
  REQUIRE(r.gaps == 0);
  REQUIRE(r.over_bound.empty());
  // Each session's books: the chain and the Events counted for flow control.
  REQUIRE(f.session("odd").sent_through() == 7);
  REQUIRE(f.session("odd").unacked() == 2);
  REQUIRE(f.session("all").unacked() == 3);
}

TEST_CASE("a constream continues after a round", "[constream]") {
  Fixture f;
  KnowledgeStream k = SampleKnowledge();
  f.Round(k, kT0, 1000, /*max_data=*/2);
  REQUIRE(f.c().latest_delivered() == 7);
  ConStream::Batch b = f.c().Next(k, 100);
  REQUIRE(b.through == 10);
  REQUIRE(DataTicks(b) == std::vector<Tick>{8});
  f.Round(k, kT0);
  REQUIRE(f.c().Next(k, 100).through == 10);
  REQUIRE_OK(k.AccumulateSilence({11, 11}));
  b = f.c().Next(k, 100);
  REQUIRE(b.through == 12);
  REQUIRE(DataTicks(b) == std::vector<Tick>{12});
}

TEST_CASE("a constream round reports the members it left over the flow-control bound",
          "[constream]") {
  Fixture f;
  f.Join(1, "all", "", kT0);
  f.Join(2, "one", "id = 5", kT0);
  const ConStream::Round r = f.Round(SampleKnowledge(), kT0, /*max_unacked=*/2);
  REQUIRE(r.over_bound == std::vector<std::string>{"all"});  // 3 Events unacked, "one" has 1
}

TEST_CASE("a constream round gives every member a Gap through an L span above its position",
          "[constream]") {
  Fixture f;
  f.Join(1, "a", "id = 999", kT0);
  f.Join(2, "b", "id = 999", kT0);
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateSilence({1, 4}));
  REQUIRE_OK(k.AccumulateLost({5, 6}));  // an event upstream could not serve
  REQUIRE_OK(k.AccumulateSilence({7, 8}));
  const ConStream::Round r = f.Round(k, kT0);
  REQUIRE(Summary(r.messages) == std::vector<std::string>{"a:G6/0", "b:G6/0"});
  REQUIRE(r.gaps == 2);
  REQUIRE(r.pfs_records == 1);  // naming everyone, for catching-up subscribers to learn it
}

TEST_CASE("a constream sends nothing a member's session has already been sent", "[constream]") {
  // A member that resumed after a CT ahead of the constream (a broker after a crash).
  Fixture f;
  f.Join(1, "ahead", "", kT0, /*start=*/7);
  const ConStream::Round r = f.Round(SampleKnowledge(), kT0);
  REQUIRE(Summary(r.messages) == std::vector<std::string>{"ahead:E8/7"});
}

TEST_CASE("constream sends Silence to members idle for the interval", "[constream]") {
  Fixture f;
  f.Join(1, "a", "", kT0);
  f.Join(2, "b", "", kT0);
  ConStream& c = f.c();
  // Nothing delivered yet: no Silence, however long they wait.
  REQUIRE(c.Silences(kT0 + 10 * kInterval, kInterval).empty());
  f.SilenceThrough(40, kT0);
  REQUIRE(c.Silences(kT0 + kInterval - absl::Nanoseconds(1), kInterval).empty());
  REQUIRE(Summary(c.Silences(kT0 + kInterval, kInterval)) ==
          std::vector<std::string>{"a:S40/0", "b:S40/0"});
  // Each Silence counts as a message: none again until the position moves and they idle again.
  REQUIRE(c.Silences(kT0 + 5 * kInterval, kInterval).empty());
  f.SilenceThrough(50, kT0);
  REQUIRE(c.Silences(kT0 + 2 * kInterval - absl::Nanoseconds(1), kInterval).empty());
  REQUIRE(Summary(c.Silences(kT0 + 2 * kInterval, kInterval)) ==
          std::vector<std::string>{"a:S50/40", "b:S50/40"});
  c.Leave("a");
  f.SilenceThrough(60, kT0);
  REQUIRE(Summary(c.Silences(kT0 + 10 * kInterval, kInterval)) ==
          std::vector<std::string>{"b:S60/50"});
}

TEST_CASE("constream sends no Silence at or below a member's start tick", "[constream]") {
  Fixture f;
  f.SilenceThrough(10, kT0);
  f.Join(1, "ahead", "", kT0, 30);  // its CT is ahead of the constream (a broker after a crash)
  f.Join(2, "behind", "", kT0, 5);  // a start below the position counts as the position
  ConStream& c = f.c();
  REQUIRE(c.Silences(kT0 + kInterval, kInterval).empty());
  f.SilenceThrough(30, kT0);
  REQUIRE(Summary(c.Silences(kT0 + kInterval, kInterval)) ==
          std::vector<std::string>{"behind:S30/10"});
  f.SilenceThrough(31, kT0);
  REQUIRE(Summary(c.Silences(kT0 + 2 * kInterval, kInterval)) ==
          std::vector<std::string>{"ahead:S31/30", "behind:S31/30"});
}

TEST_CASE("a delivery resets the member's silence timer", "[constream]") {
  Fixture f;
  f.Join(1, "a", "id = 20", kT0);
  f.Join(2, "b", "id = 999", kT0);
  ConStream& c = f.c();
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateSilence({1, 19}));
  REQUIRE_OK(k.AccumulateData(20, MakeEvent(20)));
  REQUIRE(Summary(f.Round(k, kT0 + absl::Milliseconds(500)).messages) ==
          std::vector<std::string>{"a:E20/0"});
  // "a" got a message at 20 = the position: nothing to say to it.
  REQUIRE(Summary(c.Silences(kT0 + kInterval, kInterval)) == std::vector<std::string>{"b:S20/0"});
  REQUIRE_OK(k.AccumulateSilence({21, 25}));
  REQUIRE(f.Round(k, kT0).messages.empty());
  // "a" heard at 0.5 s: idle for the interval only at 1.5 s.
  REQUIRE(c.Silences(kT0 + absl::Milliseconds(1499), kInterval).empty());
  REQUIRE(Summary(c.Silences(kT0 + absl::Milliseconds(1500), kInterval)) ==
          std::vector<std::string>{"a:S25/20"});
}

}  // namespace
}  // namespace gryph
