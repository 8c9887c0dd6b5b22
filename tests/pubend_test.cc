#include "gryph/pubend.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gryph/in_process_channel.h"
#include "gryph/memory_storage.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/testing/fault_injecting_storage.h"
#include "lib/pubend/pubend_keys.h"
#include "lib/storage/lmdb_storage.h"
#include "tests/gate_storage.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{1};
const absl::Time kT0 = absl::FromUnixMicros(1'000'000);

EventRef Order(int64_t id) {
  Event e;
  e.SetInt64("id", id).SetPayload(std::string(50, 'x'));
  return MakeEventRef(std::move(e));
}

// What a downstream node sees: the knowledge stream it accumulates from the pubend.
struct Downstream {
  explicit Downstream(std::unique_ptr<Channel> c) : channel(std::move(c)) {
    channel->SetReceiver([this](absl::string_view, Message m) {
      if (auto* k = std::get_if<KnowledgeMessage>(&m)) {
        ++messages;
        max_spans = std::max(max_spans, k->spans.size());
        unanswered = k->unanswered;
        for (const KnowledgeSpan& s : k->spans) {
          absl::Status st = knowledge.Accumulate(s);
          if (!st.ok()) errors.push_back(st);
        }
      }
    });
  }
  std::unique_ptr<Channel> channel;
  KnowledgeStream knowledge;
  std::vector<absl::Status> errors;
  size_t messages = 0;
  size_t max_spans = 0;
  std::vector<TickRange> unanswered;  // of the last knowledge message
};

// A PHB with one pubend over a memory storage that survives Restart(), driven by hand.
struct Harness {
  explicit Harness(PubendOptions po = {kP}) : options(po) {
    shb1 = std::make_unique<Downstream>(*net.Connect("shb1"));
    shb2 = std::make_unique<Downstream>(*net.Connect("shb2"));
    Open();
  }
  void Open() {
    storage = std::make_unique<MemoryStorage>(state);
    faults = std::make_unique<FaultInjectingStorage>(storage.get());
    channel = *net.Connect("phb");
    PublisherHostingBrokerOptions o;
    o.pubends = {options};
    o.downstream = {"shb1", "shb2"};
    o.commit_thread = false;
    o.group_commit.max_records = 1000;
    o.group_commit.max_delay = absl::Milliseconds(1);
    o.clock = [this] { return now; };
    auto opened = PublisherHostingBroker::Open(o, faults.get(), channel.get());
    REQUIRE_OK(opened);
    phb = *std::move(opened);
  }
  // A crash: everything in memory is gone, only committed batches remain.
  void Restart() {
    phb.reset();
    channel.reset();
    faults.reset();
    storage.reset();
    Open();
  }
  Pubend& pubend() { return *phb->pubend(kP); }

  // Publishes and returns a slot that the acknowledgement fills.
  std::shared_ptr<std::optional<absl::StatusOr<Tick>>> Publish(EventRef e, std::string who = "",
                                                               uint64_t seq = 0) {
    auto slot = std::make_shared<std::optional<absl::StatusOr<Tick>>>();
    phb->Publish(kP, who, seq, std::move(e), [slot](absl::StatusOr<Tick> r) { *slot = r; });
    return slot;
  }
  Tick PublishAndCommit(EventRef e, std::string who = "", uint64_t seq = 0) {
    auto slot = Publish(std::move(e), std::move(who), seq);
    REQUIRE_OK(phb->Flush());
    net.DeliverAll();
    REQUIRE(slot->has_value());
    REQUIRE_OK(**slot);
    return ***slot;
  }
  // Time passes: timers run and whatever they submitted is committed.
  void Advance(absl::Duration d) {
    now += d;
    phb->OnTimer(now);
    REQUIRE_OK(phb->Flush());
    net.DeliverAll();
  }
  absl::Status Release(const std::string& from, Tick released, Tick delivered) {
    return phb->HandleMessage(from, ReleaseMessage{{{kP, released, delivered}}});
  }
  size_t StoredEvents() {
    size_t n = 0;
    REQUIRE_OK(storage->Scan("pubend.events", "", "", [&](absl::string_view, absl::string_view) {
      ++n;
      return true;
    }));
    return n;
  }

  PubendOptions options;
  absl::Time now = kT0;
  InProcessNetwork net;
  std::shared_ptr<MemoryStorage::State> state = MemoryStorage::NewState();
  std::unique_ptr<MemoryStorage> storage;
  std::unique_ptr<FaultInjectingStorage> faults;
  std::unique_ptr<Channel> channel;
  std::unique_ptr<PublisherHostingBroker> phb;
  std::unique_ptr<Downstream> shb1;
  std::unique_ptr<Downstream> shb2;
};

TEST_CASE("a publish is acknowledged only after its group commit", "[pubend]") {
  Harness h;
  auto slot = h.Publish(Order(1));
  REQUIRE_FALSE(slot->has_value());
  REQUIRE(h.StoredEvents() == 0);
  REQUIRE_OK(h.phb->Flush());
  REQUIRE(slot->has_value());
  REQUIRE_OK(**slot);
  REQUIRE(***slot == static_cast<Tick>(absl::ToUnixMicros(kT0)));
  REQUIRE(h.StoredEvents() == 1);
}

TEST_CASE("ticks strictly increase, even when the clock stands still or goes back", "[pubend]") {
  Harness h;
  const Tick a = h.PublishAndCommit(Order(1));
  const Tick b = h.PublishAndCommit(Order(2));
  h.now -= absl::Seconds(5);
  const Tick c = h.PublishAndCommit(Order(3));
  REQUIRE(a < b);
  REQUIRE(b < c);
  h.Restart();  // and across a restart with a clock that went back
  const Tick d = h.PublishAndCommit(Order(4));
  REQUIRE(c < d);
}

TEST_CASE("the committed stream flows downstream as D ticks and S between them", "[pubend]") {
  Harness h;
  Tick last = 0;
  for (int i = 0; i < 5; ++i) {
    h.now += absl::Microseconds(10);
    last = h.PublishAndCommit(Order(i));
  }
  for (Downstream* d : {h.shb1.get(), h.shb2.get()}) {
    REQUIRE(d->errors.empty());
    REQUIRE(d->knowledge.DoubtHorizon(h.pubend().l_prefix()) == last);
    std::vector<int64_t> ids;
    d->knowledge.ForEachData({1, last}, [&](Tick, const EventRef& e) {
      ids.push_back(std::get<int64_t>(*e->Find("id")));
      return true;
    });
    REQUIRE(ids == std::vector<int64_t>{0, 1, 2, 3, 4});
  }
}

TEST_CASE("one group commit sends one knowledge message per node", "[pubend]") {
  Harness h;
  for (int i = 0; i < 100; ++i) h.Publish(Order(i));
  REQUIRE_OK(h.phb->Flush());
  h.net.DeliverAll();
  REQUIRE(h.shb1->messages == 1);
  REQUIRE(h.shb1->knowledge.DoubtHorizon(0) == h.pubend().committed_tick());
}

TEST_CASE(
    "a committed group goes downstream at once, while later publishes still wait for "
    "their commit",
    "[pubend][threads]") {
  // Downstream latency: a group's events must not wait for the publishes that arrived during its
  // commit (under steady load some always have).
  InProcessNetwork net;
  Downstream shb(*net.Connect("shb1"));
  MemoryStorage base;
  testing::GateStorage gate(&base);
  auto channel = *net.Connect("phb");
  PublisherHostingBrokerOptions o;
  o.pubends = {PubendOptions{kP}};
  o.downstream = {"shb1"};
  o.group_commit.max_delay = absl::ZeroDuration();
  o.commit_thread = true;
  auto phb = PublisherHostingBroker::Open(o, &gate, channel.get());
  REQUIRE_OK(phb);
  // Whatever the test's end, the gate opens before the broker goes: its destructor commits what
  // is pending and would wait at a closed gate for ever.
  struct OpenAtExit {
    testing::GateStorage& gate;
    ~OpenAtExit() { gate.Open(); }
  } open_at_exit{gate};
  // Open's own commit (the downstream row) is done before the gate closes: the commit held at
  // the gate below must be the first publish's.
  REQUIRE_OK((*phb)->Flush());
  absl::Notification first_acked;
  absl::Notification second_acked;
  std::atomic<Tick> first{0};
  gate.Close();
  (*phb)->Publish(kP, "", 0, Order(1), [&](absl::StatusOr<Tick> t) {
    first = t.ok() ? *t : 0;
    first_acked.Notify();
  });
  REQUIRE(gate.AwaitBlockedCommit(absl::Seconds(30)));  // the first group is being committed
  (*phb)->Publish(kP, "", 0, Order(2), [&](absl::StatusOr<Tick>) { second_acked.Notify(); });
  gate.PassOne();
  REQUIRE(first_acked.WaitForNotificationWithTimeout(absl::Seconds(30)));
  REQUIRE(first.load() > 0);
  REQUIRE(gate.AwaitBlockedCommit(absl::Seconds(30)));  // the second one waits at the gate
  REQUIRE_FALSE(second_acked.HasBeenNotified());
  net.DeliverAll();
  REQUIRE(shb.errors.empty());
  REQUIRE(shb.knowledge.DoubtHorizon(0) == first.load());
  std::vector<int64_t> ids;
  shb.knowledge.ForEachData({1, first.load()}, [&](Tick, const EventRef& e) {
    ids.push_back(std::get<int64_t>(*e->Find("id")));
    return true;
  });
  REQUIRE(ids == std::vector<int64_t>{1});
  gate.Open();
  REQUIRE(second_acked.WaitForNotificationWithTimeout(absl::Seconds(30)));
  phb->reset();
}

TEST_CASE("an idle pubend announces silence, and a restart is repaired by nacks", "[pubend]") {
  Harness h;
  const Tick t = h.PublishAndCommit(Order(1));
  h.Advance(absl::Milliseconds(200));  // idle: the heartbeat announces silence up to now
  const Tick announced = h.pubend().committed_tick();
  REQUIRE(announced > t);
  REQUIRE(h.shb1->knowledge.DoubtHorizon(0) == announced);

  // An event is committed, but its knowledge is lost with a crash of the PHB.
  h.now += absl::Milliseconds(1);
  auto slot = h.Publish(Order(2));
  REQUIRE_OK(h.phb->Flush());
  const Tick missed = ***slot;
  h.shb1.reset();  // the queued knowledge dies with the link
  h.shb1 = std::make_unique<Downstream>(*h.net.Connect("shb1"));
  REQUIRE_OK(h.shb1->knowledge.AccumulateSilence({1, announced}));  // what it knew before
  h.Restart();
  REQUIRE(h.pubend().committed_tick() == missed);

  // The first heartbeat after the restart shows the hole; a nack fills it from the log.
  h.Advance(absl::Milliseconds(200));
  REQUIRE(h.shb1->knowledge.QRanges({1, h.pubend().committed_tick()}) ==
          std::vector<TickRange>{{announced + 1, missed}});
  REQUIRE_OK(h.phb->HandleMessage("shb1", CuriosityMessage{kP, {{announced + 1, missed}}}));
  h.net.DeliverAll();
  REQUIRE(h.shb1->knowledge.ValueAt(missed) == TickValue::kD);
  REQUIRE(h.shb1->knowledge.DoubtHorizon(0) == h.pubend().committed_tick());
}

TEST_CASE("a retried publish returns the original tick and logs nothing", "[pubend]") {
  Harness h;
  auto first = h.Publish(Order(1), "trader-1", 7);
  auto retry_pending = h.Publish(Order(1), "trader-1", 7);  // before the commit
  REQUIRE_OK(h.phb->Flush());
  REQUIRE_OK(**first);
  REQUIRE_OK(**retry_pending);
  REQUIRE(***retry_pending == ***first);
  auto retry_committed = h.Publish(Order(1), "trader-1", 7);
  REQUIRE(retry_committed->has_value());  // answered at once
  REQUIRE(***retry_committed == ***first);
  REQUIRE(h.StoredEvents() == 1);

  h.Restart();
  auto retry_after_restart = h.Publish(Order(1), "trader-1", 7);
  REQUIRE(***retry_after_restart == ***first);
  REQUIRE(h.StoredEvents() == 1);
  // A sequence below the latest that was never logged (the window, not full, holds every
  // sequence logged), and one older than the window.
  auto never = h.Publish(Order(2), "trader-1", 3);
  REQUIRE_CODE(**never, absl::StatusCode::kInvalidArgument);
  for (uint64_t s = 8; s < 8 + 2 * Pubend::kSequenceWindow; s += 2)
    h.Publish(Order(s), "trader-1", s);
  REQUIRE_OK(h.phb->Flush());
  REQUIRE_CODE(**h.Publish(Order(9), "trader-1", 9), absl::StatusCode::kInvalidArgument);
  REQUIRE_CODE(**h.Publish(Order(1), "trader-1", 7), absl::StatusCode::kAlreadyExists);
  // Another publisher has its own sequences.
  auto other = h.Publish(Order(1), "trader-2", 7);
  REQUIRE_OK(h.phb->Flush());
  REQUIRE_OK(**other);
  REQUIRE(***other != ***first);
}

TEST_CASE("a sequence that overtook an earlier one does not pass that one off as logged",
          "[pubend]") {
  // Before, a sequence below the first of a window not yet full was answered AlreadyExists
  // ("was logged"), so a publisher whose publish of 1 was lost while 2 arrived took 1 for logged.
  Harness h;
  auto second = h.Publish(Order(2), "trader-1", 2);
  auto first_pending = h.Publish(Order(1), "trader-1", 1);  // 2 pending, 1 never accepted
  REQUIRE(first_pending->has_value());
  REQUIRE_CODE(**first_pending, absl::StatusCode::kInvalidArgument);
  REQUIRE_OK(h.phb->Flush());
  REQUIRE_OK(**second);
  for (int restart = 0; restart < 2; ++restart) {
    INFO("restart " << restart);
    REQUIRE_CODE(**h.Publish(Order(1), "trader-1", 1), absl::StatusCode::kInvalidArgument);
    h.Restart();
  }
  // A full window knows nothing below it.
  for (uint64_t s = 3; s < 3 + Pubend::kSequenceWindow; ++s) h.Publish(Order(3), "trader-1", s);
  REQUIRE_OK(h.phb->Flush());
  REQUIRE_CODE(**h.Publish(Order(1), "trader-1", 1), absl::StatusCode::kAlreadyExists);
  REQUIRE(h.StoredEvents() == 1 + Pubend::kSequenceWindow);
}

TEST_CASE("absurd pubend and PHB options are InvalidArgument at Open, naming the option",
          "[pubend]") {
  using Options = PublisherHostingBrokerOptions;
  const std::vector<std::pair<std::string, std::function<void(Options&)>>> cases = {
      {"max_retain", [](Options& o) { o.pubends[0].max_retain = -absl::Seconds(1); }},
      {"heartbeat", [](Options& o) { o.pubends[0].heartbeat = absl::ZeroDuration(); }},
      {"heartbeat", [](Options& o) { o.pubends[0].heartbeat = absl::InfiniteDuration(); }},
      {"max_spans_per_message", [](Options& o) { o.pubends[0].max_spans_per_message = 0; }},
      {"max_bytes_per_message", [](Options& o) { o.pubends[0].max_bytes_per_message = 0; }},
      {"max_nack_answer_bytes", [](Options& o) { o.pubends[0].max_nack_answer_bytes = 0; }},
      {"group_commit.max_records", [](Options& o) { o.group_commit.max_records = 0; }},
      {"group_commit.max_delay", [](Options& o) { o.group_commit.max_delay = -absl::Seconds(1); }},
      {"downstream",
       [](Options& o) {
         o.downstream = {"shb", ""};
       }},
      {"simulated_commit_thread", [](Options& o) { o.simulated_commit_thread = true; }},
  };
  Options base;
  base.pubends = {PubendOptions{kP}};
  base.downstream = {"shb"};
  base.commit_thread = false;
  testing::RequireEachOptionRefused(base, cases, [](const Options& o) {
    InProcessNetwork net;
    auto channel = *net.Connect("phb");
    MemoryStorage storage;
    return PublisherHostingBroker::Open(o, &storage, channel.get()).status();
  });
}

TEST_CASE("a publisher name too long for a storage key fails that publish alone", "[pubend]") {
  // Before, the name reached the group commit's key and failed it: every publish of the group,
  // and the pubend for good.
  Harness h;
  auto innocent = h.Publish(Order(1), "trader-1", 1);
  auto bad = h.Publish(Order(2), std::string(600, 'p'), 1);
  REQUIRE(bad->has_value());  // answered at once
  REQUIRE_CODE(**bad, absl::StatusCode::kInvalidArgument);
  REQUIRE_OK(h.phb->Flush());
  REQUIRE_OK(**innocent);
  REQUIRE_OK(h.pubend().status());
  REQUIRE(h.StoredEvents() == 1);
  auto longest = h.Publish(Order(3), std::string(Pubend::kMaxPublisherNameBytes, 'p'), 1);
  REQUIRE_OK(h.phb->Flush());
  REQUIRE_OK(**longest);
}

TEST_CASE("nacks are answered from the log in bounded messages", "[pubend]") {
  PubendOptions po{kP};
  po.max_spans_per_message = 16;
  Harness h(po);
  for (int i = 0; i < 100; ++i) {
    h.now += absl::Microseconds(3);
    h.Publish(Order(i));
  }
  REQUIRE_OK(h.phb->Flush());
  const Tick last = h.pubend().committed_tick();
  auto nacker = std::make_unique<Downstream>(*h.net.Connect("nacker"));
  REQUIRE_OK(h.phb->HandleMessage("nacker", CuriosityMessage{kP, {{1, last + 1000}}}));
  h.net.DeliverAll();
  REQUIRE(nacker->errors.empty());
  REQUIRE(nacker->max_spans <= 16);
  REQUIRE(nacker->messages >= 100 * 2 / 16);
  REQUIRE(nacker->knowledge.DoubtHorizon(0) == last);  // nothing claimed beyond T(p)
  size_t events = 0;
  nacker->knowledge.ForEachData({1, last}, [&](Tick, const EventRef&) { return ++events > 0; });
  REQUIRE(events == 100);
  REQUIRE_CODE(h.phb->HandleMessage("nacker", CuriosityMessage{PubendId{9}, {{1, 2}}}),
               absl::StatusCode::kNotFound);
}

TEST_CASE("a damaged event is answered L up to the good rows around it, and reported",
          "[pubend][damage]") {
  Harness h;
  std::vector<Tick> ticks;
  for (int i = 0; i < 5; ++i) {
    h.now += absl::Microseconds(10);
    ticks.push_back(h.PublishAndCommit(Order(i)));
  }
  h.faults->DamageRow("pubend.events", internal::EventKey(kP, ticks[2]));
  auto nacker = std::make_unique<Downstream>(*h.net.Connect("nacker"));
  REQUIRE_OK(h.phb->HandleMessage("nacker", CuriosityMessage{kP, {{1, ticks[4]}}}));
  h.net.DeliverAll();
  REQUIRE(nacker->errors.empty());
  // Before: the whole answer failed with DataLoss, nothing was sent, every nack through the tick
  // went unanswered for good, and the pubend's status stayed OK.
  REQUIRE(nacker->knowledge.DoubtHorizon(0) == ticks[4]);  // all answered
  std::vector<Tick> data;
  nacker->knowledge.ForEachData({1, ticks[4]}, [&](Tick t, const EventRef&) {
    data.push_back(t);
    return true;
  });
  REQUIRE(data == std::vector<Tick>{ticks[0], ticks[1], ticks[3], ticks[4]});
  // Which tick a damaged row held is known only as "between the good rows around it" (its key
  // may be what was damaged): all of that is L.
  for (Tick t : {ticks[1] + 1, ticks[2] - 1, ticks[2], ticks[2] + 1, ticks[3] - 1}) {
    REQUIRE(nacker->knowledge.ValueAt(t) == TickValue::kL);
  }
  REQUIRE(h.pubend().damaged_events() == 1);
  REQUIRE(h.pubend().nacks_answered() == 1);
  REQUIRE(h.pubend().nack_events_sent() == 4);  // the damaged one is not sent
  REQUIRE(DamagedRowKey(h.pubend().damage()) == internal::EventKey(kP, ticks[2]));
  REQUIRE_OK(h.pubend().status());  // the pubend serves on
  // Asked again: the same answer, counted once.
  REQUIRE_OK(h.phb->HandleMessage("nacker", CuriosityMessage{kP, {{ticks[2], ticks[2]}}}));
  h.net.DeliverAll();
  REQUIRE(h.pubend().damaged_events() == 1);
  h.now += absl::Microseconds(10);
  h.PublishAndCommit(Order(5));
}

TEST_CASE("a flipped bit in a logged event on disk reaches no subscriber as data",
          "[pubend][damage]") {
  testing::TempDir dir;
  StorageOptions so;
  so.path = (dir.path() / "store").string();
  so.initial_map_bytes = uint64_t{1} << 20;
  InProcessNetwork net;
  auto nacker = std::make_unique<Downstream>(*net.Connect("nacker"));
  PublisherHostingBrokerOptions o;
  o.pubends = {PubendOptions{kP}};
  o.commit_thread = false;
  absl::Time now = kT0;
  o.clock = [&now] { return now; };
  std::vector<Tick> ticks;
  {
    auto storage = OpenLmdbStorage(so);
    REQUIRE_OK(storage);
    auto channel = *net.Connect("phb");
    auto phb = PublisherHostingBroker::Open(o, storage->get(), channel.get());
    REQUIRE_OK(phb);
    for (int i = 0; i < 3; ++i) {
      Event e;
      e.SetInt64("id", i).SetPayload(i == 1 ? "PAYLOAD-TO-DAMAGE" : "an ordinary payload");
      now += absl::Microseconds(10);
      auto slot = std::make_shared<std::optional<absl::StatusOr<Tick>>>();
      (*phb)->Publish(kP, "", 0, MakeEventRef(std::move(e)),
                      [slot](absl::StatusOr<Tick> r) { *slot = r; });
      REQUIRE_OK((*phb)->Flush());
      REQUIRE(slot->has_value());
      REQUIRE_OK(**slot);
      ticks.push_back(***slot);
    }
  }
  {
    std::ifstream in(so.path + "/data.mdb", std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fstream f(so.path + "/data.mdb", std::ios::in | std::ios::out | std::ios::binary);
    // Every copy (LMDB leaves old versions of pages on free pages).
    int copies = 0;
    for (size_t at = data.find("PAYLOAD-TO-DAMAGE"); at != std::string::npos;
         at = data.find("PAYLOAD-TO-DAMAGE", at + 1), ++copies) {
      f.seekp(static_cast<std::streamoff>(at + 3));
      f.put('X');  // "PAYXOAD": before checksums, served as the event
    }
    REQUIRE(copies >= 1);
  }
  auto storage = OpenLmdbStorage(so);
  REQUIRE_OK(storage);
  auto channel = *net.Connect("phb");
  auto phb = PublisherHostingBroker::Open(o, storage->get(), channel.get());
  REQUIRE_OK(phb);
  REQUIRE_OK((*phb)->HandleMessage("nacker", CuriosityMessage{kP, {{1, ticks[2]}}}));
  net.DeliverAll();
  REQUIRE(nacker->errors.empty());
  REQUIRE(nacker->knowledge.ValueAt(ticks[0]) == TickValue::kD);
  REQUIRE(nacker->knowledge.ValueAt(ticks[1]) == TickValue::kL);
  REQUIRE(nacker->knowledge.ValueAt(ticks[2]) == TickValue::kD);
  REQUIRE((*phb)->pubend(kP)->damaged_events() == 1);
  auto report = VerifyStorage(**storage);
  REQUIRE_OK(report);
  REQUIRE(report->damaged.size() == 1);
  REQUIRE(report->damaged[0].table == "pubend.events");
}

// A PHB with one pubend on an LMDB store, driven by hand, its downstream node "shb" handing the
// knowledge it receives to `on_knowledge` (if set). Reopen() opens it again on the same store.
struct LmdbPhb {
  explicit LmdbPhb(StorageOptions so) : storage_options(std::move(so)) {
    shb = *net.Connect("shb");
    shb->SetReceiver([this](absl::string_view, Message m) {
      const auto* k = std::get_if<KnowledgeMessage>(&m);
      if (k != nullptr && on_knowledge) on_knowledge(*k);
    });
    Reopen();
  }
  void Reopen() {
    phb.reset();
    channel.reset();
    storage.reset();
    auto s = OpenLmdbStorage(storage_options);
    REQUIRE_OK(s);
    storage = *std::move(s);
    channel = *net.Connect("phb");
    PublisherHostingBrokerOptions o;
    o.pubends = {PubendOptions{kP}};
    o.downstream = {"shb"};
    o.commit_thread = false;
    o.clock = [this] { return now; };
    auto p = PublisherHostingBroker::Open(o, storage.get(), channel.get());
    REQUIRE_OK(p);
    phb = *std::move(p);
  }
  // Publishes an event with `payload` as sequence `sequence` of "writer", and commits it.
  absl::StatusOr<Tick> Publish(uint64_t sequence, std::string payload) {
    Event e;
    e.SetPayload(std::move(payload));
    now += absl::Microseconds(10);
    auto slot = std::make_shared<std::optional<absl::StatusOr<Tick>>>();
    phb->Publish(kP, "writer", sequence, MakeEventRef(std::move(e)),
                 [slot](absl::StatusOr<Tick> r) { *slot = r; });
    (void)phb->Flush();
    net.DeliverAll();
    REQUIRE(slot->has_value());
    return **slot;
  }
  // Downstream acknowledges everything through `t`; the timers run (the release, then the
  // reclaim, commit from the reserve) until `publish` succeeds, at most 200 rounds of 10 ms.
  absl::Status ReleaseUntil(Tick t, const std::function<absl::Status()>& publish) {
    REQUIRE_OK(phb->HandleMessage("shb", ReleaseMessage{{{kP, t, t}}}));
    absl::Status again = absl::UnknownError("not tried");
    for (int round = 0; round < 200 && !again.ok(); ++round) {
      now += absl::Milliseconds(10);
      phb->OnTimer(now);
      (void)phb->Flush();
      net.DeliverAll();
      again = publish();
    }
    return again;
  }
  Pubend& pubend() { return *phb->pubend(kP); }

  const StorageOptions storage_options;
  absl::Time now = kT0;
  std::function<void(const KnowledgeMessage&)> on_knowledge;
  InProcessNetwork net;
  std::unique_ptr<Channel> shb;
  std::unique_ptr<Storage> storage;
  std::unique_ptr<Channel> channel;
  std::unique_ptr<PublisherHostingBroker> phb;  // last: closed before what it uses
};

TEST_CASE(
    "a pubend at a full store fails those publishes, releases from the reserve, and "
    "publishes again, also after a reopen",
    "[pubend][release]") {
  testing::TempDir dir;
  StorageOptions so;
  so.path = (dir.path() / "store").string();
  so.initial_map_bytes = uint64_t{1} << 20;
  so.max_map_bytes = uint64_t{4} << 20;  // a reserve of 512 KiB
  LmdbPhb t(so);
  uint64_t sequence = 0;
  auto publish = [&] { return t.Publish(++sequence, std::string(1000, 'p')); };
  absl::Status full;
  Tick last = 0;
  for (int i = 0; i < 20000 && full.ok(); ++i) {
    absl::StatusOr<Tick> tick = publish();
    if (tick.ok()) {
      last = *tick;
    } else {
      full = tick.status();
    }
  }
  REQUIRE_CODE(full, absl::StatusCode::kResourceExhausted);
  REQUIRE(last > 0);
  // Before: the failed commit failed the pubend for good.
  REQUIRE_OK(t.pubend().status());
  // The failed sequence may be retried (it was not logged): it fails the same way, not as
  // "below its latest and never logged".
  --sequence;
  REQUIRE_CODE(publish(), absl::StatusCode::kResourceExhausted);

  // The wedge: reopened full, one publish before the release.
  t.Reopen();
  REQUIRE_CODE(publish(), absl::StatusCode::kResourceExhausted);
  REQUIRE_OK(t.ReleaseUntil(last, [&] { return publish().status(); }));
  REQUIRE(t.pubend().l_prefix() == last);
  REQUIRE_OK(t.pubend().status());
  // And it keeps publishing into the room the release made.
  for (int i = 0; i < 100; ++i) REQUIRE_OK(publish());
}

TEST_CASE(
    "storage limits: stores grown from a tiny map to a random ceiling, filled, released and "
    "filled again, lose nothing acknowledged",
    "[pubend][release][campaign]") {
  const uint64_t seed = testing::Seeds(41, 1)[0];
  INFO("seed " << seed << " (rerun with GRYPH_SEED=" << seed << ")");
  testing::Rng rng(seed);
  uint64_t growths = 0;
  int cycles = 0;
  for (; cycles < 40 && growths < 100; ++cycles) {
    INFO("cycle " << cycles);
    testing::TempDir dir;
    StorageOptions so;
    so.path = (dir.path() / "store").string();
    so.durability = Durability::kNoSync;
    so.initial_map_bytes = uint64_t{32} << 10;
    so.max_map_bytes = uint64_t{1} << (20 + rng.Range(0, 2));  // 1, 2 or 4 MiB
    LmdbPhb t(so);
    std::map<Tick, std::string> answered;  // the events a nack brings back, by tick
    t.on_knowledge = [&answered](const KnowledgeMessage& k) {
      for (const KnowledgeSpan& span : k.spans) {
        if (span.value == TickValue::kD) answered[span.range.first] = span.event->payload();
      }
    };
    uint64_t sequence = 0;
    std::map<Tick, std::string> acked;
    auto publish = [&]() -> absl::Status {
      std::string payload = absl::StrCat(sequence + 1, ":", std::string(rng.Range(50, 3000), 'p'));
      absl::StatusOr<Tick> tick = t.Publish(sequence + 1, payload);
      if (!tick.ok()) return tick.status();  // not logged: the sequence is free again
      ++sequence;
      acked[*tick] = std::move(payload);
      return absl::OkStatus();
    };
    // Every acknowledged event that is not released comes back whole when nacked.
    auto check = [&](Tick released) {
      answered.clear();
      REQUIRE_OK(t.phb->HandleMessage("shb", CuriosityMessage{kP, {{1, kMaxTick - 1}}}));
      (void)t.phb->Flush();
      t.net.DeliverAll();
      for (const auto& [tick, payload] : acked) {
        if (tick <= released) continue;
        auto it = answered.find(tick);
        REQUIRE(it != answered.end());
        REQUIRE(it->second == payload);
      }
    };
    Tick released = 0;
    for (int fill = 0; fill < 2; ++fill) {
      absl::Status full;
      for (int i = 0; i < 100'000 && full.ok(); ++i) full = publish();
      REQUIRE_CODE(full, absl::StatusCode::kResourceExhausted);
      REQUIRE_OK(t.pubend().status());
      check(released);
      // Downstream acknowledges all of it: the release commits from the reserve and makes room.
      released = acked.rbegin()->first;
      REQUIRE_OK(t.ReleaseUntil(released, publish));
      REQUIRE(t.pubend().l_prefix() == released);
    }
    check(released);
    internal::LmdbStorageStats stats;
    REQUIRE(internal::GetLmdbStorageStats(t.storage.get(), &stats));
    growths += stats.map_growths;
  }
  INFO(cycles << " stores, " << growths << " map growths");
  REQUIRE(growths >= 100);
}

TEST_CASE(
    "a publish that failed for a full store is never taken for logged, also after a "
    "restart, while later ones are",
    "[pubend]") {
  Harness h;
  auto publish = [&](uint64_t seq) {
    h.now += absl::Microseconds(10);
    auto slot = h.Publish(Order(static_cast<int64_t>(seq)), "writer", seq);
    (void)h.phb->Flush();
    h.net.DeliverAll();
    REQUIRE(slot->has_value());
    return **slot;
  };
  const absl::StatusOr<Tick> first = publish(1);
  REQUIRE_OK(first);
  h.faults->FailNextCommitWithMapFull();
  REQUIRE_CODE(publish(2), absl::StatusCode::kResourceExhausted);
  const absl::StatusOr<Tick> third = publish(3);
  REQUIRE_OK(third);  // the committer and the pubend went on
  for (int restart = 0; restart < 2; ++restart) {
    INFO("restart " << restart);
    // Sequence 2 was not logged: a retry must not be answered with a tick (before, the window
    // row written with 3 named 2 as logged), and 1 and 3 answer their ticks.
    REQUIRE_CODE(publish(2), absl::StatusCode::kInvalidArgument);
    REQUIRE(publish(1) == first);
    REQUIRE(publish(3) == third);
    h.Restart();
  }
}

TEST_CASE("a publisher's stored sequence rows stay bounded and its window survives a restart",
          "[pubend]") {
  Harness h;
  std::vector<Tick> ticks;
  for (uint64_t seq = 1; seq <= 200; ++seq) {
    h.now += absl::Microseconds(10);
    auto slot = h.Publish(Order(static_cast<int64_t>(seq)), "writer", seq);
    REQUIRE_OK(h.phb->Flush());
    REQUIRE(slot->has_value());
    REQUIRE_OK(**slot);
    ticks.push_back(***slot);
  }
  h.Advance(absl::Milliseconds(1));
  size_t rows = 0;
  REQUIRE_OK(
      h.storage->Scan("pubend.publishers", "", "", [&](absl::string_view, absl::string_view) {
        ++rows;
        return true;
      }));
  REQUIRE(rows <= 2 * Pubend::kSequenceWindow);
  h.Restart();
  for (uint64_t seq = 200 - Pubend::kSequenceWindow + 1; seq <= 200; ++seq) {
    auto slot = h.Publish(Order(0), "writer", seq);
    REQUIRE(slot->has_value());
    REQUIRE_OK(**slot);
    REQUIRE(***slot == ticks[seq - 1]);
  }
  auto old = h.Publish(Order(0), "writer", 200 - Pubend::kSequenceWindow);
  REQUIRE(old->has_value());
  REQUIRE_CODE(**old, absl::StatusCode::kAlreadyExists);
}

TEST_CASE("a nack for a long span is answered in part, and asking again gets the rest",
          "[pubend]") {
  PubendOptions po{kP};
  po.max_nack_answer_bytes = 1000;  // a few events' worth (each is about 80 bytes encoded)
  Harness h(po);
  std::vector<Tick> ticks;
  for (int i = 0; i < 100; ++i) {
    h.now += absl::Microseconds(3);
    ticks.push_back(h.PublishAndCommit(Order(i)));
  }
  const Tick last = h.pubend().committed_tick();
  auto nacker = std::make_unique<Downstream>(*h.net.Connect("nacker"));
  size_t nacks = 0;
  while (nacker->knowledge.DoubtHorizon(0) < last) {
    REQUIRE(++nacks <= 100);
    const Tick from = nacker->knowledge.DoubtHorizon(0) + 1;
    REQUIRE_OK(h.phb->HandleMessage("nacker", CuriosityMessage{kP, {{from, last}}}));
    h.net.DeliverAll();
    // Each answer is a prefix that stops right before an event it did not read: no Silence is
    // claimed past what was read.
    const Tick horizon = nacker->knowledge.DoubtHorizon(0);
    REQUIRE(horizon > from - 1);
    REQUIRE((horizon == last || std::find(ticks.begin(), ticks.end(), horizon + 1) != ticks.end()));
    // The last message of a part names what it left unanswered, so that the nacker asks again at
    // once; the one that completes the answer names nothing.
    if (horizon == last) {
      REQUIRE(nacker->unanswered.empty());
    } else {
      REQUIRE(nacker->unanswered == std::vector<TickRange>{{horizon + 1, last}});
    }
  }
  REQUIRE(nacks >= 100 * 80 / 1000 / 2);
  REQUIRE(nacker->errors.empty());
  size_t events = 0;
  nacker->knowledge.ForEachData({1, last}, [&](Tick, const EventRef&) { return ++events > 0; });
  REQUIRE(events == 100);
}

TEST_CASE("a whole-history nack, again and again, costs the pubend a bounded amount per answer",
          "[pubend][abuse]") {
  PubendOptions po{kP};
  po.max_nack_answer_bytes = 16 << 10;
  Harness h(po);
  constexpr int kEvents = 5000;  // of 1,000 bytes: a history 300 times the answer bound
  for (int i = 0; i < kEvents; ++i) {
    h.now += absl::Microseconds(3);
    Event e;
    e.SetInt64("id", i).SetPayload(std::string(1000, 'x'));
    h.PublishAndCommit(MakeEventRef(std::move(e)));
  }
  const Tick last = h.pubend().committed_tick();
  // A peer that asks for everything from tick 1, again and again, and never asks for the rest.
  auto mallory = *h.net.Connect("mallory");
  size_t answered = 0;
  mallory->SetReceiver([&answered](absl::string_view, Message m) {
    if (const auto* k = std::get_if<KnowledgeMessage>(&m)) {
      for (const KnowledgeSpan& s : k->spans) {
        if (s.value == TickValue::kD) answered += s.event->payload().size();
      }
    }
  });
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    answered = 0;
    const int64_t before = testing::AllocatedBytes();
    REQUIRE_OK(h.phb->HandleMessage("mallory", CuriosityMessage{kP, {{1, last}}}));
    h.net.DeliverAll();
    const int64_t allocated = testing::AllocatedBytes() - before;  // 0 where not counted
    // At most the bound and the event that crosses it, read and sent: never the 5 MB history.
    REQUIRE(answered > 0);
    REQUIRE(answered <= po.max_nack_answer_bytes + 1000);
    REQUIRE(allocated <= int64_t{16} * static_cast<int64_t>(po.max_nack_answer_bytes));
  }
  REQUIRE_OK(h.pubend().status());
}

TEST_CASE("a nack with a malformed range is InvalidArgument and answered with nothing",
          "[pubend]") {
  Harness h;
  h.now += absl::Microseconds(10);
  const Tick t = h.PublishAndCommit(Order(1));
  auto nacker = std::make_unique<Downstream>(*h.net.Connect("nacker"));
  for (const std::vector<TickRange>& ranges :
       {std::vector<TickRange>{{0, t}}, {{t, t - 1}}, {{t, t}, {1, 2}}, {{1, t}, {t, t + 1}}}) {
    REQUIRE_CODE(h.phb->HandleMessage("nacker", CuriosityMessage{kP, ranges}),
                 absl::StatusCode::kInvalidArgument);
  }
  h.net.DeliverAll();
  REQUIRE(nacker->messages == 0);
}

TEST_CASE("release waits for every registered node, then reclaims storage", "[pubend][release]") {
  Harness h;
  std::vector<Tick> ticks;
  for (int i = 0; i < 10; ++i) {
    h.now += absl::Microseconds(10);
    ticks.push_back(h.PublishAndCommit(Order(i)));
  }
  REQUIRE_OK(h.Release("shb1", ticks[5], ticks[9]));
  h.Advance(absl::Milliseconds(1));
  REQUIRE(h.pubend().l_prefix() == 0);  // shb2 has not released anything
  REQUIRE_OK(h.Release("shb2", ticks[3], ticks[9]));
  h.Advance(absl::Milliseconds(1));
  REQUIRE(h.pubend().released_min() == ticks[3]);
  REQUIRE(h.pubend().l_prefix() == ticks[3]);
  REQUIRE(h.StoredEvents() == 6);
  REQUIRE(h.shb1->knowledge.LPrefix() == ticks[3]);
  // Releases never move back, and restart keeps the table and the L prefix.
  REQUIRE_OK(h.Release("shb2", ticks[1], ticks[2]));
  h.Restart();
  REQUIRE(h.pubend().l_prefix() == ticks[3]);
  REQUIRE(h.pubend().released_min() == ticks[3]);
  REQUIRE(h.pubend().delivered_min() == ticks[9]);
  REQUIRE(h.pubend().downstream() == std::vector<std::string>{"shb1", "shb2"});
  // A nack below the L prefix is answered L.
  auto nacker = std::make_unique<Downstream>(*h.net.Connect("nacker"));
  REQUIRE_OK(h.phb->HandleMessage("nacker", CuriosityMessage{kP, {{1, ticks[5]}}}));
  h.net.DeliverAll();
  REQUIRE(nacker->knowledge.LPrefix() == ticks[3]);
  REQUIRE(nacker->knowledge.ValueAt(ticks[4]) == TickValue::kD);
  // Removing a node lifts its hold.
  REQUIRE_OK(h.pubend().RemoveDownstream("shb2"));
  h.Advance(absl::Milliseconds(1));
  h.Advance(absl::Milliseconds(1));
  REQUIRE(h.pubend().l_prefix() == ticks[5]);
}

TEST_CASE("a nack is answered L only below the durable L prefix", "[pubend][release]") {
  Harness h;
  std::vector<Tick> ticks;
  for (int i = 0; i < 6; ++i) {
    h.now += absl::Microseconds(10);
    ticks.push_back(h.PublishAndCommit(Order(i)));
  }
  REQUIRE_OK(h.Release("shb1", ticks[3], ticks[5]));
  REQUIRE_OK(h.Release("shb2", ticks[3], ticks[5]));  // the new L prefix is submitted
  REQUIRE(h.pubend().l_prefix() == 0);                // and not committed
  auto nacker = std::make_unique<Downstream>(*h.net.Connect("nacker"));
  REQUIRE_OK(h.phb->HandleMessage("nacker", CuriosityMessage{kP, {{1, ticks[5]}}}));
  h.net.DeliverAll();
  // A crash now would keep these events: they are still D.
  REQUIRE(nacker->knowledge.LPrefix() == 0);
  REQUIRE(nacker->knowledge.ValueAt(ticks[2]) == TickValue::kD);
  h.Restart();  // the releases were not committed either: the SHBs send them again
  REQUIRE(h.pubend().l_prefix() == 0);
  REQUIRE_OK(h.Release("shb1", ticks[3], ticks[5]));
  REQUIRE_OK(h.Release("shb2", ticks[3], ticks[5]));
  // Once committed, they are L.
  h.Advance(absl::Milliseconds(1));
  REQUIRE(h.pubend().l_prefix() == ticks[3]);
  auto again = std::make_unique<Downstream>(*h.net.Connect("again"));
  REQUIRE_OK(h.phb->HandleMessage("again", CuriosityMessage{kP, {{1, ticks[5]}}}));
  h.net.DeliverAll();
  REQUIRE(again->knowledge.LPrefix() == ticks[3]);
  REQUIRE(again->knowledge.ValueAt(ticks[4]) == TickValue::kD);
}

TEST_CASE("bad release messages are rejected and change nothing", "[pubend][release]") {
  Harness h;
  const Tick t = h.PublishAndCommit(Order(1));
  REQUIRE_CODE(h.Release("stranger", t, t), absl::StatusCode::kNotFound);
  REQUIRE_CODE(h.Release("shb1", t, t + 1), absl::StatusCode::kInvalidArgument);
  REQUIRE_CODE(h.phb->HandleMessage("shb1", ReleaseMessage{{{PubendId{5}, 1, 1}}}),
               absl::StatusCode::kNotFound);
  REQUIRE_CODE(h.pubend().AddDownstream("shb1"), absl::StatusCode::kAlreadyExists);
  REQUIRE_CODE(h.pubend().RemoveDownstream("stranger"), absl::StatusCode::kNotFound);
  REQUIRE(h.pubend().released_min() == 0);
  REQUIRE(h.pubend().delivered_min() == 0);
}

TEST_CASE("early release follows maxRetain exactly at its boundary", "[pubend][release]") {
  PubendOptions po{kP};
  po.max_retain = absl::Microseconds(1000);
  Harness h(po);
  std::vector<Tick> ticks;
  for (int i = 0; i < 10; ++i) {
    h.now += absl::Microseconds(100);
    ticks.push_back(h.PublishAndCommit(Order(i)));  // ticks 100 us apart
  }
  // shb1 delivered everything and released nothing; shb2 delivered through ticks[6].
  REQUIRE_OK(h.Release("shb1", 0, ticks[9]));
  REQUIRE_OK(h.Release("shb2", 0, ticks[6]));
  // Condition: t <= Tr or (t <= Td and T(p) - t > maxRetain). With T(p) = ticks[3] + 1000,
  // ticks[3] has T - t == maxRetain: not released; ticks[2] is.
  h.now = absl::FromUnixMicros(static_cast<int64_t>(ticks[3]) + 1000);
  h.Advance(absl::ZeroDuration());
  h.Advance(absl::ZeroDuration());
  REQUIRE(h.pubend().l_prefix() == ticks[3] - 1);
  // Far in the future: never beyond Td = ticks[6] while a node has not delivered more.
  h.now += absl::Seconds(10);
  h.Advance(absl::ZeroDuration());
  h.Advance(absl::ZeroDuration());
  REQUIRE(h.pubend().l_prefix() == ticks[6]);
}

// What a log sink received, as "E: message" lines.
struct LogLines {
  std::vector<std::string> lines;
  LogSink Sink() {
    return [this](const LogRecord& r) {
      lines.push_back(absl::StrCat(LogLevelLetter(r.level), " ", r.node, ": ", r.message));
    };
  }
  size_t Count(absl::string_view part) const {
    size_t n = 0;
    for (const std::string& l : lines) n += absl::StrContains(l, part) ? 1 : 0;
    return n;
  }
};

TEST_CASE("a pubend logs early release beyond acknowledgements when it begins, damage and failure",
          "[pubend][log]") {
  LogLines log;
  PubendOptions po{kP};
  po.max_retain = absl::Microseconds(1000);
  po.log = log.Sink();
  Harness h(po);
  std::vector<Tick> ticks;
  for (int i = 0; i < 10; ++i) {
    h.now += absl::Microseconds(100);
    ticks.push_back(h.PublishAndCommit(Order(i)));
  }
  REQUIRE_OK(h.Release("shb1", ticks[1], ticks[9]));
  REQUIRE_OK(h.Release("shb2", ticks[1], ticks[9]));
  h.Advance(absl::ZeroDuration());
  REQUIRE(log.lines.empty());  // releasing what both acknowledged is not news
  h.now += absl::Seconds(1);
  h.Advance(absl::ZeroDuration());
  h.now += absl::Milliseconds(1);
  h.Advance(absl::ZeroDuration());
  REQUIRE(h.pubend().l_prefix() > ticks[1]);
  REQUIRE(log.Count("W pubend 1: releasing through tick") == 1);  // once, as it began

  // (Events published after the release: the released ones are answered L without a read.)
  const Tick damaged = h.PublishAndCommit(Order(10));
  const Tick good = h.PublishAndCommit(Order(11));
  h.faults->DamageRow("pubend.events", internal::EventKey(kP, damaged));
  auto nacker = std::make_unique<Downstream>(*h.net.Connect("nacker"));
  for (int i = 0; i < 2; ++i) {
    REQUIRE_OK(h.phb->HandleMessage("nacker", CuriosityMessage{kP, {{damaged, good}}}));
    h.net.DeliverAll();
  }
  REQUIRE(log.Count("E pubend 1: a damaged log row") == 1);  // each row once

  h.faults->FailCommitNumber(h.faults->commits_attempted() + 1,
                             absl::DataLossError("disk on fire"));
  (void)h.Publish(Order(20));
  (void)h.phb->Flush();
  (void)h.Publish(Order(21));
  (void)h.phb->Flush();
  REQUIRE(log.Count("E pubend 1: failed: DATA_LOSS: disk on fire") == 1);
}

TEST_CASE("the PHB's stats count publishes and time each to durable", "[pubend][stats]") {
  Harness h;
  auto a = h.Publish(Order(1));
  h.now += absl::Milliseconds(3);  // the commit comes 3 ms after the publish
  REQUIRE_OK(h.phb->Flush());
  REQUIRE_OK(**a);
  h.PublishAndCommit(Order(2));
  const PublisherHostingBroker::Stats stats = h.phb->stats();
  REQUIRE(stats.publishes == 2);
  REQUIRE(stats.failed == 0);
  REQUIRE(stats.publish_to_durable.count() == 2);
  REQUIRE(stats.publish_to_durable.sum() == absl::Milliseconds(3));
  REQUIRE(h.phb->committer().stats().commit_time.count() == 2);
}

TEST_CASE(
    "a PHB's restart reads no publisher sequences; each publisher's are read at its "
    "first publish since",
    "[pubend][stats][restart]") {
  Harness h;
  Tick logged[4] = {};
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    auto a = h.Publish(Order(1), "gateway", seq);
    auto b = h.Publish(Order(2), "desk", seq);
    REQUIRE_OK(h.phb->Flush());
    logged[seq] = ***a;
    REQUIRE_OK(**b);
  }
  h.Restart();
  const PubendRecovery& r = h.phb->recovery();
  CHECK(r.total >= r.log + r.downstream);
  CHECK(r.log > absl::ZeroDuration());
  // The gateway's retries are recognised after the restart, and so is its next sequence.
  REQUIRE(***h.Publish(Order(1), "gateway", 2) == logged[2]);
  REQUIRE(***h.Publish(Order(1), "gateway", 3) == logged[3]);
  REQUIRE(***h.Publish(Order(1), "gateway", 1) == logged[1]);
  REQUIRE(h.PublishAndCommit(Order(4), "gateway", 4) > logged[3]);
  REQUIRE_OK(**h.Publish(Order(2), "desk", 2));
}

TEST_CASE("a damaged publisher row fails the publishers whose rows it may be, not the pubend",
          "[pubend][damage]") {
  // Rows are in key order (a name's length, then the name): "desk" < "desl" < "desm". A row's
  // checksum covers its key, so the damaged row may be desl's or, its key damaged, one more of
  // desk's (the publisher just before it): both are refused, as sequences it may hold could
  // otherwise be accepted twice. desm's range ends before it: desm publishes on.
  Harness h;
  h.PublishAndCommit(Order(1), "desl", 1);
  h.PublishAndCommit(Order(2), "desk", 1);
  h.PublishAndCommit(Order(3), "desm", 1);
  h.Restart();
  h.faults->DamageRow("pubend.publishers", internal::PublisherSequenceKey(kP, "desl", 1));
  auto desl = h.Publish(Order(4), "desl", 2);
  auto desk = h.Publish(Order(5), "desk", 2);
  REQUIRE(desl->has_value());
  REQUIRE(desk->has_value());
  REQUIRE_CODE(**desl, absl::StatusCode::kDataLoss);
  REQUIRE_CODE(**desk, absl::StatusCode::kDataLoss);
  REQUIRE_OK(h.pubend().status());
  h.PublishAndCommit(Order(6), "desm", 2);
  h.PublishAndCommit(Order(7), "new", 1);
}

TEST_CASE("a failed commit fails the publisher and acknowledges nothing", "[pubend]") {
  Harness h;
  h.PublishAndCommit(Order(1));
  const uint64_t next = h.faults->commits_attempted() + 1;
  h.faults->FailCommitNumber(next, absl::DataLossError("disk on fire"));
  auto a = h.Publish(Order(2));
  auto b = h.Publish(Order(3));
  REQUIRE_FALSE(h.phb->Flush().ok());
  h.net.DeliverAll();
  REQUIRE_CODE(**a, absl::StatusCode::kDataLoss);
  REQUIRE_CODE(**b, absl::StatusCode::kDataLoss);
  REQUIRE(h.StoredEvents() == 1);
  REQUIRE(h.shb1->knowledge.DoubtHorizon(0) == h.pubend().committed_tick());
  REQUIRE_CODE(**h.Publish(Order(4)), absl::StatusCode::kDataLoss);  // failed for good
  h.Restart();                                                       // reopening recovers
  REQUIRE_OK(h.pubend().status());
  h.PublishAndCommit(Order(5));
  REQUIRE(h.StoredEvents() == 2);
}

TEST_CASE("a crash keeps every acknowledged event and nothing half-done", "[pubend]") {
  Harness h;
  std::vector<Tick> acked;
  for (int i = 0; i < 20; ++i) acked.push_back(h.PublishAndCommit(Order(i)));
  auto unacked = h.Publish(Order(100));
  h.Restart();  // the pending group was never committed
  REQUIRE(h.StoredEvents() == 20);
  REQUIRE(h.pubend().committed_tick() == acked.back());
  auto nacker = std::make_unique<Downstream>(*h.net.Connect("nacker"));
  REQUIRE_OK(h.phb->HandleMessage("nacker", CuriosityMessage{kP, {{1, acked.back()}}}));
  h.net.DeliverAll();
  for (Tick t : acked) REQUIRE(nacker->knowledge.ValueAt(t) == TickValue::kD);
}

TEST_CASE(
    "publishers on two threads with the commit thread: every publish answered once, in "
    "tick order per pubend, all logged and sent downstream",
    "[pubend][threads]") {
  // The publishes of a group join one submission while the commit thread may be committing the
  // previous group and running its callback (run under TSan in CI).
  InProcessNetwork net;
  std::map<uint32_t, KnowledgeStream> knowledge;  // what "shb" hears, per pubend
  std::vector<absl::Status> errors;
  auto shb = *net.Connect("shb");
  shb->SetReceiver([&](absl::string_view, Message m) {
    if (auto* k = std::get_if<KnowledgeMessage>(&m)) {
      for (const KnowledgeSpan& s : k->spans) {
        if (absl::Status st = knowledge[k->pubend.value].Accumulate(s); !st.ok()) {
          errors.push_back(st);
        }
      }
    }
  });
  MemoryStorage storage;
  auto channel = *net.Connect("phb");
  PublisherHostingBrokerOptions o;
  o.pubends = {PubendOptions{PubendId{1}}, PubendOptions{PubendId{2}}};
  o.downstream = {"shb"};
  o.group_commit.max_records = 64;
  o.group_commit.max_delay = absl::ZeroDuration();
  o.commit_thread = true;
  auto phb = PublisherHostingBroker::Open(o, &storage, channel.get());
  REQUIRE_OK(phb);
  constexpr int kPerThread = 3000;
  absl::Mutex mu;
  std::map<uint32_t, std::vector<Tick>> acked;  // per pubend, in the order of the answers
  int failures = 0;
  std::atomic<int> answered{0};
  auto publish = [&](uint32_t p) {
    for (int i = 0; i < kPerThread; ++i) {
      (*phb)->Publish(PubendId{p}, "", 0, Order(i), [&, p](absl::StatusOr<Tick> t) {
        absl::MutexLock lock(&mu);
        if (t.ok()) {
          acked[p].push_back(*t);
        } else {
          ++failures;
        }
        answered.fetch_add(1);
      });
    }
  };
  std::thread a(publish, 1);
  std::thread b(publish, 2);
  a.join();
  b.join();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (answered.load() < 2 * kPerThread && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(1));
  REQUIRE(answered.load() == 2 * kPerThread);
  phb->reset();  // stops the commit thread
  net.DeliverAll();
  absl::MutexLock lock(&mu);
  REQUIRE(failures == 0);
  for (uint32_t p : {1u, 2u}) {
    REQUIRE(acked[p].size() == static_cast<size_t>(kPerThread));
    for (size_t i = 1; i < acked[p].size(); ++i) REQUIRE(acked[p][i - 1] < acked[p][i]);
  }
  size_t stored = 0;
  REQUIRE_OK(storage.Scan("pubend.events", "", "", [&](absl::string_view, absl::string_view) {
    ++stored;
    return true;
  }));
  REQUIRE(stored == 2 * static_cast<size_t>(kPerThread));
  REQUIRE(errors.empty());
  for (uint32_t p : {1u, 2u}) {
    size_t events = 0;
    knowledge[p].ForEachData({1, acked[p].back()}, [&](Tick, const EventRef&) {
      ++events;
      return true;
    });
    REQUIRE(events == static_cast<size_t>(kPerThread));
  }
}

TEST_CASE("keys map to pubends stably", "[pubend]") {
  const std::vector<PubendId> ids = {PubendId{1}, PubendId{2}, PubendId{3}, PubendId{4}};
  std::map<uint32_t, int> count;
  for (int i = 0; i < 4000; ++i) ++count[PubendForKey("account-" + std::to_string(i), ids).value];
  for (auto& [id, n] : count) REQUIRE(n > 800);
  REQUIRE(PubendForKey("IBM", ids) == PubendForKey("IBM", ids));
  REQUIRE(PubendForKey("IBM", ids).value == 2);  // fixed forever: the hash is FNV-1a
}

}  // namespace
}  // namespace gryph

namespace gryph {
namespace {

TEST_CASE("released events are reclaimed in bounded chunks, also across a restart",
          "[pubend][release]") {
  Harness h;
  const size_t total = 2 * Pubend::kReclaimChunk + 100;
  for (size_t i = 0; i < total; ++i) h.Publish(Order(static_cast<int64_t>(i)));
  REQUIRE_OK(h.phb->Flush());
  const Tick last = h.pubend().committed_tick();
  REQUIRE_OK(h.Release("shb1", last, last));
  REQUIRE_OK(h.Release("shb2", last, last));
  h.Advance(absl::Milliseconds(1));  // the L prefix moves; the first chunk goes
  REQUIRE(h.pubend().l_prefix() == last);
  REQUIRE(h.StoredEvents() == total - Pubend::kReclaimChunk);
  h.Restart();
  REQUIRE(h.pubend().l_prefix() == last);
  for (int i = 0; i < 4; ++i) h.Advance(absl::Milliseconds(1));
  REQUIRE(h.StoredEvents() == 0);
}

TEST_CASE("a manually driven PHB closed with publishes pending answers each with Aborted",
          "[pubend]") {
  Harness h;
  auto committed = h.Publish(Order(1));
  REQUIRE_OK(h.phb->Flush());
  auto pending = h.Publish(Order(2), "app", 7);
  REQUIRE(!pending->has_value());
  h.Restart();  // closes the broker (and opens it again on what was committed)
  REQUIRE(committed->has_value());
  REQUIRE_OK(**committed);
  REQUIRE(pending->has_value());
  REQUIRE_CODE(**pending, absl::StatusCode::kAborted);
  // Nothing of it was committed: the retry is a new publish.
  REQUIRE(h.StoredEvents() == 1);
  auto retry = h.Publish(Order(2), "app", 7);
  REQUIRE_OK(h.phb->Flush());
  REQUIRE(retry->has_value());
  REQUIRE_OK(**retry);
  REQUIRE(h.StoredEvents() == 2);
}

}  // namespace
}  // namespace gryph

namespace gryph {
namespace {

// A publisher in another process, as the PHB sees it: a peer on the network that sends Publish
// messages and collects the Published answers.
struct Peer {
  Peer(InProcessNetwork& net, const std::string& name) : channel(*net.Connect(name)) {
    channel->SetReceiver([this](absl::string_view from, Message m) {
      REQUIRE(from == "phb");
      REQUIRE(std::holds_alternative<PublishedMessage>(m));
      answers.push_back(std::get<PublishedMessage>(std::move(m)));
    });
  }
  void Publish(uint64_t sequence, PubendId p, EventRef e, std::string key = "") {
    REQUIRE_OK(channel->Send("phb", PublishMessage{sequence, p, std::move(key), std::move(e)}));
  }
  // The only answer received since the last call.
  PublishedMessage TakeAnswer() {
    REQUIRE(answers.size() == 1);
    PublishedMessage m = std::move(answers[0]);
    answers.clear();
    return m;
  }
  std::unique_ptr<Channel> channel;
  std::vector<PublishedMessage> answers;
};

TEST_CASE("a publish from a peer is logged under its name, answered with its tick once durable",
          "[pubend][remote]") {
  Harness h;
  Peer gateway(h.net, "gateway");
  gateway.Publish(7, kP, Order(1));
  h.net.DeliverAll();
  REQUIRE(gateway.answers.empty());  // not before the commit
  REQUIRE(h.StoredEvents() == 0);
  REQUIRE_OK(h.phb->Flush());
  h.net.DeliverAll();
  const PublishedMessage first = gateway.TakeAnswer();
  REQUIRE(first.sequence == 7);
  REQUIRE(first.pubend == kP);
  REQUIRE_OK(first.result);
  REQUIRE(h.StoredEvents() == 1);
  REQUIRE(h.shb1->knowledge.ValueAt(*first.result) == TickValue::kD);

  // A retry (its answer was lost, say) gets the same tick at once and logs nothing.
  gateway.Publish(7, kP, Order(1));
  h.net.DeliverAll();
  REQUIRE(gateway.TakeAnswer() == first);
  // The publisher is the peer's name: an in-process publish under it is the same publisher.
  auto same = h.Publish(Order(1), "gateway", 7);
  REQUIRE(same->has_value());
  REQUIRE(**same == first.result);
  // The same sequence from another peer is another publisher's: a new event.
  Peer other(h.net, "other");
  other.Publish(7, kP, Order(2));
  h.net.DeliverAll();
  REQUIRE_OK(h.phb->Flush());
  h.net.DeliverAll();
  const PublishedMessage theirs = other.TakeAnswer();
  REQUIRE_OK(theirs.result);
  REQUIRE(*theirs.result > *first.result);
  REQUIRE(gateway.answers.empty());
  REQUIRE(h.StoredEvents() == 2);

  // After a restart the retry is recognised from what was logged.
  h.Restart();
  gateway.Publish(7, kP, Order(1));
  h.net.DeliverAll();
  REQUIRE(gateway.TakeAnswer() == first);
  REQUIRE(h.StoredEvents() == 2);
}

TEST_CASE("a bad publish from a peer is answered with its error and logs nothing",
          "[pubend][remote]") {
  Harness h;
  Peer gateway(h.net, "gateway");
  // Publishes `e` as `sequence` to `p`, commits, and returns the answer's result.
  auto answer = [&](Peer& peer, uint64_t sequence, PubendId p, EventRef e) {
    peer.Publish(sequence, p, std::move(e));
    h.net.DeliverAll();
    (void)h.phb->Flush();
    h.net.DeliverAll();
    PublishedMessage m = peer.TakeAnswer();
    REQUIRE(m.sequence == sequence);
    REQUIRE(m.pubend == p);
    return m.result;
  };
  REQUIRE_CODE(answer(gateway, 1, PubendId{9}, Order(1)), absl::StatusCode::kNotFound);
  REQUIRE_CODE(answer(gateway, 2, kP, nullptr), absl::StatusCode::kInvalidArgument);
  REQUIRE(h.StoredEvents() == 0);
  // HandleMessage returns those two refusals too, and sends the answer.
  REQUIRE_CODE(h.phb->HandleMessage("gateway", PublishMessage{3, PubendId{9}, "", Order(1)}),
               absl::StatusCode::kNotFound);
  REQUIRE_CODE(h.phb->HandleMessage("gateway", PublishMessage{3, kP, "", nullptr}),
               absl::StatusCode::kInvalidArgument);
  h.net.DeliverAll();
  REQUIRE(gateway.answers.size() == 2);
  gateway.answers.clear();

  // The pubend's own refusals: a sequence below the latest that was never logged, a name too
  // long to be a publisher's, a full store.
  REQUIRE_OK(answer(gateway, 5, kP, Order(5)));
  REQUIRE_CODE(answer(gateway, 4, kP, Order(4)), absl::StatusCode::kInvalidArgument);
  Peer long_name(h.net, std::string(Pubend::kMaxPublisherNameBytes + 1, 'p'));
  REQUIRE_CODE(answer(long_name, 1, kP, Order(1)), absl::StatusCode::kInvalidArgument);
  h.faults->FailNextCommitWithMapFull();
  REQUIRE_CODE(answer(gateway, 6, kP, Order(6)), absl::StatusCode::kResourceExhausted);
  REQUIRE(h.StoredEvents() == 1);
  // Nor does a PHB take the answers.
  REQUIRE_CODE(h.phb->HandleMessage("gateway", PublishedMessage{5, kP, Tick{5}}),
               absl::StatusCode::kInvalidArgument);

  // A publish still pending when the broker closes (driven by hand) is answered Aborted, and was
  // not logged: its retry is a new publish.
  gateway.Publish(6, kP, Order(6));
  h.net.DeliverAll();
  h.Restart();
  h.net.DeliverAll();
  REQUIRE_CODE(gateway.TakeAnswer().result, absl::StatusCode::kAborted);
  REQUIRE(h.StoredEvents() == 1);
  REQUIRE_OK(answer(gateway, 6, kP, Order(6)));
  REQUIRE(h.StoredEvents() == 2);
}

TEST_CASE("a publish by key from a peer goes to the key's pubend, and its answer says which",
          "[pubend][remote]") {
  const std::vector<PubendId> ids = {PubendId{1}, PubendId{2}};
  std::string key;  // one that is not on the first pubend, so that a wrong choice shows
  for (int i = 0; PubendForKey(key, ids) != PubendId{2}; ++i) key = "account-" + std::to_string(i);
  InProcessNetwork net;
  MemoryStorage storage;
  auto channel = *net.Connect("phb");
  PublisherHostingBrokerOptions o;
  o.pubends = {PubendOptions{ids[0]}, PubendOptions{ids[1]}};
  o.commit_thread = false;
  auto phb = PublisherHostingBroker::Open(o, &storage, channel.get());
  REQUIRE_OK(phb);
  Peer gateway(net, "gateway");
  gateway.Publish(1, PubendId{0}, Order(1), key);
  net.DeliverAll();
  REQUIRE_OK((*phb)->Flush());
  net.DeliverAll();
  const PublishedMessage m = gateway.TakeAnswer();
  REQUIRE(m.pubend == PubendId{2});
  REQUIRE_OK(m.result);
  REQUIRE((*phb)->pubend(PubendId{2})->committed_tick() == *m.result);
  REQUIRE((*phb)->pubend(PubendId{1})->committed_tick() == 0);
  // The retry names the same key and gets the same tick.
  gateway.Publish(1, PubendId{0}, Order(1), key);
  net.DeliverAll();
  REQUIRE(gateway.TakeAnswer() == m);
}

TEST_CASE("with a commit thread, a peer's publish is answered from it",
          "[pubend][remote][threads]") {
  InProcessNetwork net;
  MemoryStorage storage;
  auto channel = *net.Connect("phb");
  PublisherHostingBrokerOptions o;
  o.pubends = {PubendOptions{kP}};
  o.group_commit.max_delay = absl::ZeroDuration();
  auto phb = PublisherHostingBroker::Open(o, &storage, channel.get());
  REQUIRE_OK(phb);
  Peer gateway(net, "gateway");
  for (uint64_t s = 1; s <= 10; ++s) gateway.Publish(s, kP, Order(static_cast<int64_t>(s)));
  net.DeliverAll();
  // The answers come from the commit thread: wait for them.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (gateway.answers.size() < 10 && absl::Now() < deadline) {
    if (net.Wait(0, absl::Milliseconds(10))) net.DeliverAll();
  }
  REQUIRE(gateway.answers.size() == 10);
  Tick last = 0;
  for (uint64_t s = 1; s <= 10; ++s) {
    const PublishedMessage& m = gateway.answers[s - 1];  // in commit order, which is the sequence's
    REQUIRE(m.sequence == s);
    REQUIRE_OK(m.result);
    REQUIRE(*m.result > last);
    last = *m.result;
  }
  phb->reset();
}

}  // namespace
}  // namespace gryph
