// test_harness: testing your own code against gryph under seeded faults, with the public
// Simulator (gryph/testing/simulator.h).
//
// The code under test is a position keeper: it consumes fills through a durable subscription and
// keeps the net position per account and symbol. Its contract: whatever crashes, disconnections
// and network faults happen, its book ends equal to the sum of the fills that match its selector,
// each counted once. gryph delivers every matching fill exactly once only if the keeper stores its
// checkpoint token (CT) in the same transaction as its positions; this harness checks that it
// does, and that the keeper's handler is right.
//
// Each seed builds a fresh simulated world:
//   "exchange"  a PublisherHostingBroker with two pubends; its gateway publishes fills
//   "shb"       a SubscriberHostingBroker
//   "keeper"    the position keeper: a DurableSubscriber feeding the code under test
// For a few seconds of virtual time the link between the brokers loses, duplicates, delays and
// reorders messages, and the exchange, the broker and the keeper crash and restart; the keeper
// also disconnects and reconnects. What each would keep on disk survives its crashes (memory
// storage states and the keeper's database live outside the nodes). Then the faults stop, the
// gateway stops, everything settles, and the keeper's book is compared with the fills.
// Everything in a run follows from its seed: a failure prints the seed and how to replay it.
//
//   test_harness [--seeds=20] [--first_seed=1] [--verbose] [--bug]
//   GRYPH_SEED=<n> test_harness     replays seed n alone (what Simulator::ReproduceHint() says)
//
// --bug plants a classic mistake in the keeper: it saves its CT only every fifth message. The
// harness catches it; a test runs it and expects the failure report.

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gryph/durable_subscriber.h"
#include "gryph/memory_storage.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/subscriber_hosting_broker.h"
#include "gryph/subscription.h"
#include "gryph/testing/simulator.h"

ABSL_FLAG(int, seeds, 20, "how many seeds to run");
ABSL_FLAG(uint64_t, first_seed, 1, "the first seed; seeds first_seed, first_seed + 1, ... run");
ABSL_FLAG(bool, verbose, false, "print every fault as it happens");
ABSL_FLAG(bool, bug, false, "plant a bug in the keeper: it saves its CT every fifth message only");

namespace {

using namespace gryph;  // NOLINT: an example reads better without the prefix

// ===== The code under test =====

// The fills the keeper books: the equities desk's, except the house account's.
constexpr char kKeeperSelector[] = "desk = 'equities' AND account <> 'HOUSE'";

// The keeper's database. In production, tables in the keeper's own store; here, memory owned by
// the harness, so that it outlives the keeper's crashes like a disk would. Every write to it
// below happens in one step of the simulation, so it is one transaction: a crash falls before or
// after it, never inside.
struct KeeperDb {
  std::map<std::string, int64_t> positions;  // "account/symbol" -> net quantity
  CheckpointToken ct;                        // how far the positions go
  uint64_t epoch = 0;                        // of the latest keeper process
  uint64_t gaps = 0;
  bool subscribed = false;  // the broker has created the subscription
};

// The position keeper's handler: a fill is an event with account, symbol and a signed qty.
class PositionKeeper : public DurableSubscriber::Handler {
 public:
  PositionKeeper(KeeperDb* db, bool buggy) : db_(db), buggy_(buggy) {}

  void OnEvent(PubendId p, Tick t, const EventRef& fill) override {
    const auto& account = std::get<std::string>(*fill->Find("account"));
    const auto& symbol = std::get<std::string>(*fill->Find("symbol"));
    // One transaction: the position and the CT after this fill.
    db_->positions[absl::StrCat(account, "/", symbol)] += std::get<int64_t>(*fill->Find("qty"));
    SaveCheckpoint(p, t);
  }
  // Nothing for us up to t: only the CT moves.
  void OnSilence(PubendId p, Tick t) override { SaveCheckpoint(p, t); }
  // Fills up to t may be missing (retention discarded them): the book needs a reconciliation.
  void OnGap(PubendId p, Tick t) override {
    ++db_->gaps;
    SaveCheckpoint(p, t);
  }
  // A durable subscription gets what is published from its creation on.
  void OnConnected(const CheckpointToken&) override { db_->subscribed = true; }
  // The keeper's node reconnects when the session is gone.
  void OnError(const absl::Status&) override {}

 private:
  // The handler runs before the DurableSubscriber moves its CT, so it computes the CT after the
  // message itself.
  void SaveCheckpoint(PubendId p, Tick t) {
    ct_.Set(p, t);
    if (buggy_ && ++unsaved_ < 5) return;  // THE BUG (--bug): the CT lags the positions
    unsaved_ = 0;
    db_->ct = ct_;
  }

  KeeperDb* const db_;
  const bool buggy_;
  CheckpointToken ct_ = db_->ct;
  int unsaved_ = 0;
};

// ===== The harness =====

// A fill the exchange acknowledged: the ground truth the keeper's book is checked against.
struct Fill {
  PubendId pubend;
  Tick tick;
  EventRef event;
};

// Everything one seed's run keeps outside the nodes: what survives their crashes.
struct World {
  explicit World(uint64_t seed) : sim(seed) {}

  // Prints a fault as it happens, with --verbose.
  void Trace(const std::string& what) const {
    if (absl::GetFlag(FLAGS_verbose)) {
      std::printf("    [%8.3f s] %s\n", absl::ToDoubleSeconds(sim.Now() - start), what.c_str());
    }
  }

  Simulator sim;
  const absl::Time start = sim.Now();
  bool buggy = false;
  std::vector<std::string> errors;  // what went wrong in the set-up (a node that could not start)

  // The exchange's and the broker's disks.
  std::shared_ptr<MemoryStorage::State> exchange_disk = MemoryStorage::NewState();
  std::shared_ptr<MemoryStorage::State> shb_disk = MemoryStorage::NewState();

  // The gateway's state: fills not acknowledged yet are published again (with the same
  // sequence, so idempotently) when the exchange comes back.
  bool publishing = false;
  uint64_t next_sequence = 1;
  std::map<uint64_t, std::pair<PubendId, EventRef>> unacked;
  std::vector<Fill> acked;

  KeeperDb keeper_db;
  bool keeper_wants_session = true;

  struct Faults {
    int exchange_crashes = 0;
    int shb_crashes = 0;
    int keeper_crashes = 0;
    int keeper_disconnects = 0;
  } faults;
};

class ExchangeNode : public SimNode {
 public:
  ExchangeNode(SimContext& ctx, World* w) : ctx_(ctx), w_(w), disk_(w->exchange_disk) {
    PublisherHostingBrokerOptions o;
    o.pubends = {PubendOptions{PubendId{1}}, PubendOptions{PubendId{2}}};
    o.downstream = {"shb"};
    o.commit_thread = false;  // the simulator drives it: OnTimer commits
    o.group_commit.max_delay = absl::Milliseconds(1);
    o.clock = [&ctx] { return ctx.Now(); };
    absl::StatusOr<std::unique_ptr<PublisherHostingBroker>> phb =
        PublisherHostingBroker::Open(o, &disk_, &ctx.channel());
    if (!phb.ok()) {
      w->errors.push_back(absl::StrCat("exchange: ", phb.status().ToString()));
      return;
    }
    phb_ = *std::move(phb);
    for (const auto& [sequence, fill] : w->unacked) Publish(sequence, fill.first, fill.second);
    OnTimer();
  }

 private:
  void Publish(uint64_t sequence, PubendId p, EventRef fill) {
    World* w = w_;
    phb_->Publish(p, "gateway", sequence, fill, [w, sequence, p, fill](absl::StatusOr<Tick> t) {
      if (t.ok() && w->unacked.erase(sequence) > 0) w->acked.push_back({p, *t, fill});
    });
  }

  // Every millisecond: maybe a new fill, then the broker's commits and timers.
  void OnTimer() {
    if (w_->publishing && ctx_.Random() % 2 == 0) {
      static const char* const kAccounts[] = {"ACME", "GLOBEX", "HOUSE"};
      static const char* const kSymbols[] = {"IBM", "MSFT", "ORCL"};
      Event fill;
      fill.SetTopic("fills")
          .SetString("account", kAccounts[ctx_.Random() % 3])
          .SetString("symbol", kSymbols[ctx_.Random() % 3])
          .SetString("desk", ctx_.Random() % 4 == 0 ? "fx" : "equities")
          .SetInt64("qty", (static_cast<int64_t>(ctx_.Random() % 20) - 10) * 100);
      EventRef ref = MakeEventRef(std::move(fill));
      const uint64_t sequence = w_->next_sequence++;
      const PubendId p =
          PubendForKey(std::get<std::string>(*ref->Find("account")), phb_->pubend_ids());
      w_->unacked[sequence] = {p, ref};
      Publish(sequence, p, ref);
    }
    phb_->OnTimer(ctx_.Now());
    ctx_.After(absl::Milliseconds(1), [this] { OnTimer(); });
  }

  SimContext& ctx_;
  World* const w_;
  MemoryStorage disk_;
  std::unique_ptr<PublisherHostingBroker> phb_;
};

class ShbNode : public SimNode {
 public:
  ShbNode(SimContext& ctx, World* w) : ctx_(ctx), disk_(w->shb_disk) {
    SubscriberHostingBrokerOptions o;
    o.pubends = {{PubendId{1}, "exchange"}, {PubendId{2}, "exchange"}};
    o.silence_interval = absl::Milliseconds(300);
    o.event_cache_ticks = 100'000;  // 100 ms: a longer catchup nacks from the exchange
    o.clock = [&ctx] { return ctx.Now(); };
    absl::StatusOr<std::unique_ptr<SubscriberHostingBroker>> shb =
        SubscriberHostingBroker::Open(o, &disk_, &ctx.channel());
    if (!shb.ok()) {
      w->errors.push_back(absl::StrCat("shb: ", shb.status().ToString()));
      return;
    }
    shb_ = *std::move(shb);
    OnTimer();
  }

 private:
  void OnTimer() {
    shb_->OnTimer(ctx_.Now());
    ctx_.After(absl::Milliseconds(5), [this] { OnTimer(); });
  }

  SimContext& ctx_;
  MemoryStorage disk_;
  std::unique_ptr<SubscriberHostingBroker> shb_;
};

// The keeper's process: starts from its database, as a restarted process would.
class KeeperNode : public SimNode {
 public:
  KeeperNode(SimContext& ctx, World* w) : ctx_(ctx), w_(w), keeper_(&w->keeper_db, w->buggy) {
    DurableSubscriberOptions o;
    o.subscription = "position-keeper";
    o.selector = kKeeperSelector;
    o.broker = "shb";
    o.checkpoint = w->keeper_db.ct;
    o.epoch = ++w->keeper_db.epoch;  // a new process fences its predecessor's session
    o.ack_interval = absl::Milliseconds(50);
    o.keepalive_interval = absl::Milliseconds(200);  // how soon it notices a broker restart
    absl::StatusOr<std::unique_ptr<DurableSubscriber>> ds =
        DurableSubscriber::Create(o, &ctx.channel(), &keeper_);
    if (!ds.ok()) {
      w->errors.push_back(absl::StrCat("keeper: ", ds.status().ToString()));
      return;
    }
    ds_ = *std::move(ds);
    ctx.channel().SetReceiver(
        [this](absl::string_view from, Message m) { ds_->HandleMessage(from, m); });
    OnTimer();
  }

  void Disconnect() { (void)ds_->Disconnect(); }

 private:
  // Every 10 ms: (re)connect when the session is gone, and ack.
  void OnTimer() {
    const absl::Time now = ctx_.Now();
    if (w_->keeper_wants_session && !ds_->connected() &&
        now - last_connect_ >= absl::Milliseconds(100)) {
      last_connect_ = now;
      (void)ds_->Connect();
    }
    ds_->OnTimer(now);
    ctx_.After(absl::Milliseconds(10), [this] { OnTimer(); });
  }

  SimContext& ctx_;
  World* const w_;
  PositionKeeper keeper_;
  std::unique_ptr<DurableSubscriber> ds_;
  absl::Time last_connect_ = absl::InfinitePast();
};

// Every 50 ms of the faulty period, each fault strikes with its probability; crashed nodes come
// back after a random pause. Every draw comes from the simulator, so the seed fixes them all.
void FaultTick(World& w, absl::Time faults_end) {
  Simulator& sim = w.sim;
  if (sim.Now() >= faults_end) return;
  auto chance = [&sim](int percent) { return static_cast<int>(sim.Random() % 100) < percent; };
  auto pause = [&sim](int min_ms, int max_ms) {
    return absl::Milliseconds(min_ms + static_cast<int>(sim.Random() % (max_ms - min_ms + 1)));
  };
  auto crash = [&](const char* node, int* count, absl::Duration down) {
    if (!sim.is_up(node)) return;
    ++*count;
    w.Trace(absl::StrCat("crash ", node, ", back in ", absl::FormatDuration(down)));
    sim.Crash(node);
    sim.Schedule(down, [&w, node] {
      w.Trace(absl::StrCat("restart ", node));
      w.sim.Restart(node);
    });
  };
  if (chance(2)) crash("exchange", &w.faults.exchange_crashes, pause(20, 300));
  if (chance(3)) crash("shb", &w.faults.shb_crashes, pause(20, 400));
  if (chance(4)) crash("keeper", &w.faults.keeper_crashes, pause(20, 300));
  if (chance(4) && w.keeper_wants_session && sim.is_up("keeper")) {
    ++w.faults.keeper_disconnects;
    const absl::Duration away = pause(50, 500);
    w.Trace(absl::StrCat("keeper disconnects for ", absl::FormatDuration(away)));
    w.keeper_wants_session = false;
    sim.node_as<KeeperNode>("keeper")->Disconnect();
    sim.Schedule(away, [&w] { w.keeper_wants_session = true; });
  }
  sim.Schedule(absl::Milliseconds(50), [&w, faults_end] { FaultTick(w, faults_end); });
}

// Runs one seed; returns what went wrong (empty: the keeper's book is exact).
std::vector<std::string> RunSeed(uint64_t seed, bool buggy) {
  World w(seed);
  w.buggy = buggy;
  // Between the brokers: lossy, duplicating, reordering. The keeper's session keeps the default
  // link, reliable and in order: a session needs a connection like TCP's (a Delivery lost inside
  // a session would go unnoticed), so its faults are disconnections, not losses.
  LinkProfile lossy;
  lossy.min_delay = absl::Milliseconds(1);
  lossy.max_delay = absl::Milliseconds(10);
  lossy.loss = 0.05;
  lossy.duplicate = 0.02;
  lossy.fifo = false;
  w.sim.SetLink("exchange", "shb", lossy);
  w.sim.SetLink("shb", "exchange", lossy);

  // A node's factory runs at the start and at every restart.
  World* world = &w;
  (void)w.sim.AddNode("exchange",
                      [world](SimContext& c) { return std::make_unique<ExchangeNode>(c, world); });
  (void)w.sim.AddNode("shb",
                      [world](SimContext& c) { return std::make_unique<ShbNode>(c, world); });
  (void)w.sim.AddNode("keeper",
                      [world](SimContext& c) { return std::make_unique<KeeperNode>(c, world); });

  // The gateway starts once the keeper's subscription exists: the book must hold every fill.
  if (!w.sim.RunUntil([&w] { return w.keeper_db.subscribed; }, absl::Seconds(1))) {
    w.errors.push_back("the keeper never connected");
  }
  w.publishing = true;
  // Three seconds of faults, then a calm second for the last restarts.
  const absl::Duration faulty = absl::Seconds(3);
  w.sim.Schedule(absl::Milliseconds(50), [&w, end = w.sim.Now() + faulty] { FaultTick(w, end); });
  w.sim.RunFor(faulty);
  w.sim.SetLink("exchange", "shb", LinkProfile{});
  w.sim.SetLink("shb", "exchange", LinkProfile{});
  w.sim.RunFor(absl::Seconds(1));
  w.publishing = false;
  w.keeper_wants_session = true;
  for (const char* node : {"exchange", "shb", "keeper"}) w.sim.Restart(node);

  // Settled: every fill acknowledged, and the keeper's stored CT past every fill it must book.
  const Subscription selector = *Subscription::Create(kKeeperSelector);
  auto settled = [&] {
    if (!w.unacked.empty()) return false;
    for (const Fill& f : w.acked) {
      if (selector.Matches(*f.event) && w.keeper_db.ct.Get(f.pubend) < f.tick) return false;
    }
    return true;
  };
  std::vector<std::string> problems = w.errors;
  if (!w.sim.RunUntil(settled, absl::Seconds(30))) {
    problems.push_back("the keeper never caught up with the fills (30 s of virtual time)");
  }

  // The check: the book against the matching fills, position by position.
  std::map<std::string, int64_t> expected;
  int booked = 0;
  for (const Fill& f : w.acked) {
    if (!selector.Matches(*f.event)) continue;
    ++booked;
    expected[absl::StrCat(std::get<std::string>(*f.event->Find("account")), "/",
                          std::get<std::string>(*f.event->Find("symbol")))] +=
        std::get<int64_t>(*f.event->Find("qty"));
  }
  std::map<std::string, int64_t> book = w.keeper_db.positions;
  for (const auto& [key, qty] : expected) book.try_emplace(key, 0);
  for (const auto& [key, qty] : book) {
    const int64_t want = expected.contains(key) ? expected.at(key) : 0;
    if (qty != want) {
      problems.push_back(
          absl::StrFormat("position %s is %d, but its fills sum to %d", key, qty, want));
    }
  }
  if (w.keeper_db.gaps > 0) {
    problems.push_back(
        absl::StrFormat("the keeper got %d Gap(s) with no retention limit", w.keeper_db.gaps));
  }

  // Two runs of one seed are the same run: the trace hashes of a replay match.
  w.Trace(absl::StrFormat("trace hash %016x", w.sim.trace_hash()));
  const Simulator::Stats& s = w.sim.stats();
  std::printf(
      "seed %llu: %zu fills (%d to book); crashes: %d exchange, %d broker, %d keeper; "
      "%d disconnects; %llu messages lost, %llu duplicated: %s\n",
      static_cast<unsigned long long>(seed), w.acked.size(), booked, w.faults.exchange_crashes,
      w.faults.shb_crashes, w.faults.keeper_crashes, w.faults.keeper_disconnects,
      static_cast<unsigned long long>(s.lost), static_cast<unsigned long long>(s.duplicated),
      problems.empty() ? "book exact" : "FAILED");
  for (const std::string& p : problems) std::printf("    %s\n", p.c_str());
  if (!problems.empty()) {
    std::printf("    %s (or: test_harness --first_seed=%llu --seeds=1 --verbose%s)\n",
                w.sim.ReproduceHint().c_str(), static_cast<unsigned long long>(seed),
                buggy ? " --bug" : "");
  }
  return problems;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Tests a position keeper built on gryph under seeded faults in the simulator.");
  absl::ParseCommandLine(argc, argv);
  uint64_t first = absl::GetFlag(FLAGS_first_seed);
  int count = std::max(1, absl::GetFlag(FLAGS_seeds));
  if (const char* replay = std::getenv("GRYPH_SEED")) {
    first = std::strtoull(replay, nullptr, 10);
    count = 1;
  }
  const bool buggy = absl::GetFlag(FLAGS_bug);
  std::printf("position keeper under seeded faults%s; selector: %s\n",
              buggy ? " (with the planted bug)" : "", kKeeperSelector);
  int failed = 0;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(count); ++seed) {
    if (!RunSeed(seed, buggy).empty()) ++failed;
  }
  std::printf("%d of %d seeds failed\n", failed, count);
  return failed == 0 ? 0 : 1;
}
