#include "tests/simulation/world.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "gryph/subscription.h"
#include "gryph/testing/exactly_once_checker.h"
#include "gryph/testing/fault_injecting_storage.h"
#include "lib/util/coding.h"

namespace gryph::sim {

namespace {

// Records every event and L prefix the pubends commit: the log the oracle checks against.
class RecordingStorage : public StorageWrapper {
 public:
  RecordingStorage(Storage* target, Log* log) : StorageWrapper(target), log_(log) {}

  absl::Status Commit(const WriteBatch& batch) override {
    absl::Status st = StorageWrapper::Commit(batch);
    if (!st.ok()) return st;
    for (size_t i = 0; i < batch.count(); ++i) {
      const WriteBatch::Op op = batch.op(i);
      if (op.type != WriteBatch::OpType::kPut) continue;
      if (op.table == "pubend.events" && op.key.size() == 12) {
        const PubendId p{internal::DecodeFixed32BE(op.key.data())};
        const Tick t = internal::DecodeFixed64BE(op.key.data() + 4);
        absl::StatusOr<Event> e = Event::Decode(op.value);
        if (!e.ok()) {
          log_->errors.push_back(absl::StrCat("pubend ", p.value,
                                              " logged an undecodable event at ", t, ": ",
                                              e.status().message()));
          continue;
        }
        EventRef ref = MakeEventRef(*std::move(e));
        auto [it, fresh] = log_->events[p].emplace(t, ref);
        if (!fresh && !(*it->second == *ref)) {
          log_->errors.push_back(
              absl::StrCat("pubend ", p.value, " logged another event at tick ", t));
        }
      } else if (op.table == "pubend.meta" && op.key.size() == 5 && op.key[4] == 'L') {
        const PubendId p{internal::DecodeFixed32BE(op.key.data())};
        Tick& l = log_->l_prefix[p];
        l = std::max(l, internal::DecodeFixed64BE(op.value.data()));
      }
    }
    return st;
  }

 private:
  Log* log_;
};

const char* const kSelectors[] = {
    "",  // everything
    "k < 3",
    "g = 'a' OR k = 7",
    "k BETWEEN 2 AND 5 AND g <> 'c'",
    "v > 0.5",
    "g IN ('b', 'c') AND NOT k = 4",
    "k = 9",
    "id IS NOT NULL AND k >= 8",
};

// Plays a broker's commit thread on the virtual clock, as the runtime's thread runs it: once the
// committer has a group due, the commit runs a drawn fsync time later, in an event of its own
// between the node's handlers (where a thread's completion lands among them), and its callbacks
// report back as they would from the thread. A crash of the node drops the pending group,
// uncommitted and unanswered.
class SimCommitThread {
 public:
  // `committer` names the node's committer (the SHB's changes when a full store reopens it).
  SimCommitThread(SimContext& ctx, std::function<GroupCommitter*()> committer)
      : ctx_(ctx), committer_(std::move(committer)) {
    Poll();
  }

 private:
  void Poll() {
    std::optional<absl::Time> due = committer_()->NextDeadline();
    if (!due) {
      ctx_.After(absl::Microseconds(250), [this] { Poll(); });  // the thread waits for work
      return;
    }
    const absl::Duration wait = std::max(*due - ctx_.Now(), absl::ZeroDuration());
    const absl::Duration fsync =
        absl::Microseconds(20 + static_cast<int64_t>(ctx_.Random() % 2000));
    ctx_.After(wait + fsync, [this] {
      (void)committer_()->Flush();  // a failure reaches the broker through the callbacks
      Poll();
    });
  }

  SimContext& ctx_;
  const std::function<GroupCommitter*()> committer_;
};

}  // namespace

// The publisher hosting broker and the publishing application that lives beside it.
class PhbNode : public SimNode {
 public:
  PhbNode(SimContext& ctx, World* w)
      : ctx_(ctx), w_(w), storage_(w->phb_state_), recording_(&storage_, &w->log_) {
    PublisherHostingBrokerOptions o;
    for (int i = 1; i <= w->options_.pubends; ++i) {
      PubendOptions po{PubendId{static_cast<uint32_t>(i)}};
      po.max_retain = w->options_.max_retain;
      po.heartbeat = absl::Milliseconds(50);
      po.max_spans_per_message = 64;
      po.max_nack_answer_bytes = 4096;  // long nacks are answered in parts, asked again
      o.pubends.push_back(po);
    }
    if (w->options_.intermediate) {
      o.downstream = {"ib"};
    } else {
      o.downstream = w->ShbNames();
    }
    o.commit_thread = w->options_.commit_thread;
    o.simulated_commit_thread = w->options_.commit_thread;
    o.group_commit.max_records = 64;
    o.group_commit.max_delay = absl::Milliseconds(1);
    o.clock = [&ctx] { return ctx.Now(); };
    auto phb = PublisherHostingBroker::Open(std::move(o), &recording_, &ctx.channel());
    if (!phb.ok()) std::abort();
    phb_ = *std::move(phb);
    if (w->options_.commit_thread) {
      commit_thread_ =
          std::make_unique<SimCommitThread>(ctx, [this] { return &phb_->committer(); });
    }
    // The application retries whatever was not acknowledged before a crash: idempotent.
    for (const auto& [seq, pe] : w_->publisher_.unacked) Publish(seq, pe.first, pe.second);
    Tick();
  }

 private:
  void Publish(uint64_t seq, PubendId p, EventRef e) {
    World* w = w_;
    SimContext* ctx = &ctx_;
    phb_->Publish(p, "app", seq, std::move(e), [w, ctx, seq, p](absl::StatusOr<gryph::Tick> t) {
      if (!t.ok()) return;
      // The application takes note a little later: a crash in between leaves a logged event it
      // believes unacknowledged, which it publishes again after the restart (idempotent).
      const gryph::Tick tick = *t;
      ctx->After(absl::Microseconds(static_cast<int64_t>(ctx->Random() % 2000)), [w, seq, p, tick] {
        if (w->publisher_.unacked.erase(seq) > 0) ++w->publisher_.acked;
        auto [it, fresh] = w->publisher_.acked_at.emplace(seq, std::make_pair(p, tick));
        if (!fresh && it->second != std::make_pair(p, tick)) {
          w->publisher_.errors.push_back(absl::StrCat("publish ", seq, " acknowledged at tick ",
                                                      it->second.second, " and again at ", tick));
        }
      });
    });
  }

  void Tick() {
    if (w_->publishing) {
      const int64_t per_ms =
          std::max<int64_t>(1, absl::ToInt64Milliseconds(w_->options_.publish_interval));
      for (int i = 1; i <= w_->options_.pubends; ++i) {
        if (ctx_.Random() % per_ms != 0) continue;
        const uint64_t seq = w_->publisher_.next_seq++;
        Event e;
        static const char* const kGroups[] = {"a", "b", "c"};
        e.SetTopic("orders")
            .SetInt64("id", static_cast<int64_t>(seq))
            .SetInt64("k", static_cast<int64_t>(ctx_.Random() % 10))
            .SetString("g", kGroups[ctx_.Random() % 3])
            .SetDouble("v", static_cast<double>(ctx_.Random() % 1000) / 1000.0)
            .SetPayload("order");
        EventRef ref = MakeEventRef(std::move(e));
        const PubendId p{static_cast<uint32_t>(i)};
        w_->publisher_.unacked[seq] = {p, ref};
        Publish(seq, p, ref);
      }
    }
    phb_->OnTimer(ctx_.Now());
    ctx_.After(absl::Milliseconds(1), [this] { Tick(); });
  }

  SimContext& ctx_;
  World* w_;
  MemoryStorage storage_;
  RecordingStorage recording_;
  std::unique_ptr<PublisherHostingBroker> phb_;
  std::unique_ptr<SimCommitThread> commit_thread_;  // with WorldOptions::commit_thread
};

class ShbNode : public SimNode {
 public:
  ShbNode(SimContext& ctx, World* w)
      : ctx_(ctx), world_(w), storage_(w->shb_states_.at(ctx.name())), faults_(&storage_) {
    w->shb_nodes_[ctx.name()] = this;
    SubscriberHostingBrokerOptions o;
    const char* upstream = w->options_.intermediate ? "ib" : "phb";
    for (int i = 1; i <= w->options_.pubends; ++i) {
      o.pubends.push_back({PubendId{static_cast<uint32_t>(i)}, upstream});
    }
    o.silence_interval = absl::Milliseconds(300);
    o.event_cache_ticks = 200'000;  // 200 ms: catchups beyond it nack from the PHB
    o.catchup.max_buffered_matches = 64;
    o.catchup.nack_window = 16;
    o.pfs_checkpoint_interval = 32;
    // Small enough that busy subscribers pass it between acks: demotion to catchup, paced
    // catchup and the return to the constream run all the time.
    o.max_unacked_events = 24;
    o.full_store_wait = absl::Milliseconds(100);
    o.clock = [&ctx] { return ctx.Now(); };
    if (std::getenv("GRYPH_SIM_LOG") != nullptr) {  // the SHBs' logs, on the virtual clock
      o.log = [&ctx](const LogRecord& r) {
        std::fprintf(stderr, "%s %s: %s\n", absl::FormatTime(ctx.Now()).c_str(), ctx.name().c_str(),
                     r.message.c_str());
      };
    }
    if (w->options_.commit_thread) {
      o.commit_thread = true;
      o.simulated_commit_thread = true;
      o.commit_interval = absl::Milliseconds(2);
      // The runtime's wake-up: the loop picks the completion up in a Flush of its own.
      o.on_commit = [this] { ctx_.After(absl::ZeroDuration(), [this] { (void)shb_->Flush(); }); };
    }
    auto shb = SubscriberHostingBroker::Open(std::move(o), &faults_, &ctx.channel());
    if (!shb.ok()) {
      std::fprintf(stderr, "%s: %s\n", ctx.name().c_str(), shb.status().ToString().c_str());
      std::abort();
    }
    shb_ = *std::move(shb);
    if (w->options_.commit_thread) {
      commit_thread_ =
          std::make_unique<SimCommitThread>(ctx, [this] { return &shb_->committer(); });
    }
    Tick();
  }
  ~ShbNode() override {
    world_->shb_nodes_.erase(ctx_.name());
    world_->resumed_ahead_ += shb_->stats().resumed_ahead;
    world_->demotions_ += shb_->stats().demotions;
  }
  SubscriberHostingBroker* shb() { return shb_.get(); }

  // The next commit fails as if the process died inside it: whatever that round sent to the
  // subscribers is not durable. The node then crashes and restarts.
  void CrashDuringNextCommit() {
    faults_.FailCommitNumber(faults_.commits_attempted() + 1,
                             absl::UnavailableError("simulated crash during a commit"));
  }
  // The next commit fails as at a full store; the broker reads its state again and waits for
  // room (gryph/subscriber_hosting_broker.h).
  void FillStoreAtNextCommit() { faults_.FailNextCommitWithMapFull(); }
  void DisarmFaults() { faults_.ClearFaults(); }

 private:
  void Tick() {
    shb_->OnTimer(ctx_.Now());
    if (!shb_->status().ok()) {
      // The process died inside the commit; what it sent before had left it (the simulator
      // drops a crashed node's in-flight messages, so the crash waits out the link delay).
      World* w = world_;
      const std::string name = ctx_.name();
      w->sim_.Schedule(absl::Milliseconds(2), [w, name] {
        w->sim_.Crash(name);
        w->sim_.Schedule(absl::Milliseconds(50), [w, name] { w->sim_.Restart(name); });
      });
      return;
    }
    ctx_.After(absl::Milliseconds(5), [this] { Tick(); });
  }

  SimContext& ctx_;
  World* const world_;
  MemoryStorage storage_;
  FaultInjectingStorage faults_;
  std::unique_ptr<SubscriberHostingBroker> shb_;
  std::unique_ptr<SimCommitThread> commit_thread_;  // with WorldOptions::commit_thread
};

// The intermediate broker between the PHB and the two SHBs. It keeps nothing across a crash.
class IbNode : public SimNode {
 public:
  IbNode(SimContext& ctx, World* w) : ctx_(ctx) {
    IntermediateBrokerOptions o;
    for (int i = 1; i <= w->options_.pubends; ++i) {
      o.pubends.push_back({PubendId{static_cast<uint32_t>(i)}, "phb"});
    }
    for (const std::string& shb : w->ShbNames()) {
      IntermediateBrokerOptions::Downstream d{shb, {}};
      if (w->options_.ib_filters) {
        for (const SubscriberApp& app : w->subs_) {
          if (app.broker == shb || (w->options_.subscriber_move > 0 && !app.steady)) {
            d.filter.push_back(*Subscription::Create(app.selector));
          }
        }
      }
      o.downstream.push_back(std::move(d));
    }
    o.cache_ticks = 300'000;  // 300 ms: older nacks go on to the PHB
    o.cache_events = 1024;
    o.max_spans_per_message = 64;
    auto ib = IntermediateBroker::Open(std::move(o), &ctx.channel());
    if (!ib.ok()) std::abort();
    ib_ = *std::move(ib);
    Tick();
  }
  IntermediateBroker* ib() { return ib_.get(); }

 private:
  void Tick() {
    ib_->OnTimer(ctx_.Now());
    ctx_.After(absl::Milliseconds(5), [this] { Tick(); });
  }

  SimContext& ctx_;
  std::unique_ptr<IntermediateBroker> ib_;
};

class SubscriberNode : public SimNode, public DurableSubscriber::Handler {
 public:
  SubscriberNode(SimContext& ctx, World* w, SubscriberApp* app) : ctx_(ctx), world_(w), app_(app) {
    DurableSubscriberOptions o;
    o.subscription = app->name;
    o.selector = app->selector;
    o.broker = app->broker;
    o.checkpoint = app->ct;
    o.epoch = ++app->epoch;
    o.ack_interval = absl::Milliseconds(50);
    o.keepalive_interval = absl::Milliseconds(200);
    auto ds = DurableSubscriber::Create(std::move(o), &ctx.channel(), this);
    if (!ds.ok()) std::abort();
    ds_ = *std::move(ds);
    ctx.channel().SetReceiver(
        [this](absl::string_view from, Message m) { ds_->HandleMessage(from, m); });
    Tick();
  }

  ~SubscriberNode() override { app_->resyncs += ds_->resyncs(); }

  void Disconnect() { (void)ds_->Disconnect(); }
  // Connects again, with this process (its CT and epoch), after Disconnect.
  void Reconnect() { (void)ds_->Connect(); }
  // Reconnect anywhere, with this process: the DurableSubscriber goes to `broker` with its CT.
  void MoveTo(const std::string& broker) { (void)ds_->ConnectTo(broker); }
  uint64_t resyncs() const { return ds_->resyncs(); }

  void OnEvent(PubendId p, gryph::Tick t, const EventRef& event) override {
    Record(p, {DeliveryKind::kEvent, t, event});
  }
  void OnSilence(PubendId p, gryph::Tick t) override {
    Record(p, {DeliveryKind::kSilence, t, nullptr});
  }
  void OnGap(PubendId p, gryph::Tick t) override { Record(p, {DeliveryKind::kGap, t, nullptr}); }
  void OnConnected(const CheckpointToken& start) override {
    if (std::getenv("GRYPH_SIM_VERBOSE") != nullptr) {
      std::fprintf(stderr, "%s %s connected at %s (ct %s)\n", absl::FormatTime(ctx_.Now()).c_str(),
                   app_->name.c_str(), start.ToString().c_str(), app_->ct.ToString().c_str());
    }
    if (!app_->started) {
      app_->started = true;
      app_->start = start;
      app_->ct = start;
      if (app_->move_after_start) {
        // Before any delivery: the case a start CT that left pubends at 0 out got wrong.
        app_->move_after_start = false;
        World* w = world_;
        SubscriberApp* a = app_;
        const bool restart = ctx_.Random() % 2 == 0;
        w->sim_.Schedule(absl::Microseconds(static_cast<int64_t>(ctx_.Random() % 3000)),
                         [w, a, restart] {
                           if (!w->sim_.is_up(a->name)) return;
                           ++w->early_moves_;
                           w->Move(a, restart);
                         });
      }
    }
  }
  void OnError(const absl::Status& status) override {
    if (std::getenv("GRYPH_SIM_VERBOSE") != nullptr) {
      std::fprintf(stderr, "%s %s: %s\n", absl::FormatTime(ctx_.Now()).c_str(), app_->name.c_str(),
                   status.ToString().c_str());
    }
    if (absl::IsDataLoss(status)) app_->errors.push_back(std::string(status.message()));
    // The broker ended the session over a lost delivery it no longer caches: a reconnection.
    if (absl::IsUnavailable(status)) app_->well_behaved = false;
  }

 private:
  // The application's transaction: the message's effect and the CT, together.
  void Record(PubendId p, Consumed c) {
    if (std::getenv("GRYPH_SIM_VERBOSE") != nullptr) {
      std::fprintf(stderr, "%s %s p%u %s %llu\n", absl::FormatTime(ctx_.Now()).c_str(),
                   app_->name.c_str(), p.value, DeliveryKindName(c.kind),
                   static_cast<unsigned long long>(c.tick));
    }
    if (c.kind == DeliveryKind::kGap) {
      auto lp = app_->log->l_prefix.find(p);
      const gryph::Tick released =
          app_->log->early_release && lp != app_->log->l_prefix.end() ? lp->second : 0;
      c.excusable_through = std::max(app_->high_water.Get(p), released);
    }
    app_->ct.Set(p, c.tick);
    app_->high_water.Set(p, std::max(app_->high_water.Get(p), c.tick));
    app_->consumed[p].push_back(std::move(c));
  }

  void Tick() {
    const absl::Time now = ctx_.Now();
    if (ds_->resyncs() > 0) app_->well_behaved = false;  // it reconnected
    if (app_->want_connected && !ds_->connected() &&
        now - last_attempt_ >= absl::Milliseconds(150)) {
      last_attempt_ = now;
      (void)ds_->Connect();
    }
    ds_->OnTimer(now);
    if (now - last_snapshot_ >= absl::Milliseconds(200) && app_->started) {
      last_snapshot_ = now;
      app_->snapshots.push_back(app_->ct);
      if (app_->snapshots.size() > 5) app_->snapshots.erase(app_->snapshots.begin());
    }
    ctx_.After(absl::Milliseconds(10), [this] { Tick(); });
  }

  SimContext& ctx_;
  World* const world_;
  SubscriberApp* app_;
  std::unique_ptr<DurableSubscriber> ds_;
  absl::Time last_attempt_ = absl::InfinitePast();
  absl::Time last_snapshot_ = absl::InfinitePast();
};

World::World(uint64_t seed, WorldOptions options) : options_(options), sim_(seed) {
  log_.early_release = options_.max_retain != absl::InfiniteDuration();
  for (const auto& [a, b] : BrokerLinks()) {
    sim_.SetLink(a, b, options_.broker_link);
    sim_.SetLink(b, a, options_.broker_link);
  }
  subs_.resize(options_.subscribers);
  for (int i = 0; i < options_.subscribers; ++i) {
    subs_[i].name = absl::StrCat("sub-", i);
    subs_[i].log = &log_;
    subs_[i].selector = kSelectors[i % std::size(kSelectors)];
    subs_[i].broker = two_shbs() ? (i % 2 == 1 ? "shb-a" : "shb-b") : "shb";
    subs_[i].steady = i < options_.steady_subscribers;
    // Seeded like everything else: which subscribers move right after they first connect.
    subs_[i].move_after_start =
        options_.subscriber_move > 0 && !subs_[i].steady && sim_.Random() % 3 == 0;
    if (options_.late_subscribers > 0 && !subs_[i].steady &&
        static_cast<double>(sim_.Random() % 1000) < options_.late_subscribers * 1000) {
      SubscriberApp* a = &subs_[i];
      a->want_connected = false;
      sim_.Schedule(absl::Milliseconds(static_cast<int64_t>(sim_.Random() % 1000)),
                    [a] { a->want_connected = true; });
    }
    const LinkProfile link = subs_[i].steady ? LinkProfile{} : options_.subscriber_link;
    for (const std::string& shb : ShbNames()) {
      sim_.SetLink(subs_[i].name, shb, link);
      sim_.SetLink(shb, subs_[i].name, link);
    }
  }
  for (const std::string& shb : ShbNames()) shb_states_[shb] = MemoryStorage::NewState();
  if (!sim_.AddNode("phb", [this](SimContext& c) { return std::make_unique<PhbNode>(c, this); })
           .ok()) {
    std::abort();
  }
  if (options_.intermediate &&
      !sim_.AddNode("ib", [this](SimContext& c) { return std::make_unique<IbNode>(c, this); })
           .ok()) {
    std::abort();
  }
  for (const std::string& shb : ShbNames()) {
    if (!sim_.AddNode(shb, [this](SimContext& c) { return std::make_unique<ShbNode>(c, this); })
             .ok()) {
      std::abort();
    }
  }
  for (SubscriberApp& app : subs_) {
    SubscriberApp* a = &app;
    if (!sim_.AddNode(
                 app.name,
                 [this, a](SimContext& c) { return std::make_unique<SubscriberNode>(c, this, a); })
             .ok()) {
      std::abort();
    }
  }
}

std::vector<std::string> World::ShbNames() const {
  if (two_shbs()) return {"shb-a", "shb-b"};
  return {"shb"};
}

std::vector<std::string> World::BrokerNames() const {
  std::vector<std::string> names = {"phb"};
  if (options_.intermediate) names.push_back("ib");
  for (std::string& shb : ShbNames()) names.push_back(std::move(shb));
  return names;
}

std::vector<std::pair<std::string, std::string>> World::BrokerLinks() const {
  if (options_.intermediate) return {{"phb", "ib"}, {"ib", "shb-a"}, {"ib", "shb-b"}};
  if (options_.two_shbs) return {{"phb", "shb-a"}, {"phb", "shb-b"}};
  return {{"phb", "shb"}};
}

void World::Move(SubscriberApp* a, bool restart) {
  a->well_behaved = false;
  a->broker = a->broker == "shb-a" ? "shb-b" : "shb-a";
  ++moves_;
  if (restart) {
    // The application restarts there from its stored state, as a new process (higher epoch).
    sim_.Crash(a->name);
    sim_.Restart(a->name);
  } else if (auto* node = sim_.node_as<SubscriberNode>(a->name)) {
    node->MoveTo(a->broker);
  }
}

SubscriberHostingBroker* World::shb(const std::string& name) {
  ShbNode* n = sim_.node_as<ShbNode>(name);
  return n == nullptr ? nullptr : n->shb();
}

IntermediateBroker* World::ib() {
  IbNode* n = sim_.node_as<IbNode>("ib");
  return n == nullptr ? nullptr : n->ib();
}

namespace {
uint64_t CountConsumed(const std::vector<SubscriberApp>& subs, DeliveryKind kind) {
  uint64_t n = 0;
  for (const SubscriberApp& a : subs) {
    for (const auto& [p, list] : a.consumed) {
      for (const Consumed& c : list) n += c.kind == kind ? 1 : 0;
    }
  }
  return n;
}
}  // namespace

uint64_t World::events_consumed() const { return CountConsumed(subs_, DeliveryKind::kEvent); }
uint64_t World::gaps_consumed() const { return CountConsumed(subs_, DeliveryKind::kGap); }

uint64_t World::well_behaved_through_release() const {
  bool released = false;
  for (const auto& [p, l] : log_.l_prefix) released |= l > 0;
  if (!released) return 0;
  uint64_t n = 0;
  for (int i = 0; i < options_.steady_subscribers && i < static_cast<int>(subs_.size()); ++i) {
    n += subs_[i].well_behaved ? 1 : 0;
  }
  return n;
}

void World::FaultTick() {
  if (!faults_on_) return;
  auto chance = [this](double p) {
    return p > 0 && static_cast<double>(sim_.Random() % 1'000'000) < p * 1'000'000;
  };
  auto later = [this](int min_ms, int max_ms) {
    return absl::Milliseconds(min_ms + static_cast<int>(sim_.Random() % (max_ms - min_ms + 1)));
  };
  for (size_t i = static_cast<size_t>(std::max(0, options_.steady_subscribers)); i < subs_.size();
       ++i) {
    SubscriberApp& app = subs_[i];
    SubscriberApp* a = &app;
    if (!sim_.is_up(app.name)) continue;
    if (chance(options_.subscriber_disconnect)) {
      a->well_behaved = false;
      a->want_connected = false;
      sim_.node_as<SubscriberNode>(app.name)->Disconnect();
      if (chance(options_.subscriber_reconnect_in_place)) {
        sim_.Schedule(later(20, 600), [this, a] {
          a->want_connected = true;
          // Unless it crashed meanwhile (then its restart connects it).
          if (sim_.is_up(a->name)) sim_.node_as<SubscriberNode>(a->name)->Reconnect();
        });
        continue;
      }
      const bool old_ct = chance(options_.subscriber_old_checkpoint);
      sim_.Schedule(later(20, 600), [this, a, old_ct] {
        // Reconnect as a restarted application would: from its stored state, or from an older
        // snapshot of it (a restore from backup), which rolls its consumption back too.
        if (old_ct && !a->snapshots.empty()) {
          // Snapshots taken after the restored one belong to the discarded future.
          a->snapshots.resize(1 + sim_.Random() % a->snapshots.size());
          const CheckpointToken snap = a->snapshots.back();
          a->ct = snap;
          for (auto& [p, list] : a->consumed) {
            while (!list.empty() && list.back().tick > snap.Get(p)) list.pop_back();
          }
        }
        a->want_connected = true;
        sim_.Crash(a->name);
        sim_.Restart(a->name);
      });
    } else if (two_shbs() && chance(options_.subscriber_move)) {
      Move(a, sim_.Random() % 2 == 0);
    } else if (chance(options_.subscriber_crash)) {
      a->well_behaved = false;
      sim_.Crash(app.name);
      sim_.Schedule(later(20, 400), [this, a] { sim_.Restart(a->name); });
    }
  }
  for (auto& [name, node] : shb_nodes_) {
    if (!sim_.is_up(name) || !chance(options_.shb_store_full)) continue;
    // Its sessions end as at a crash.
    for (SubscriberApp& app : subs_) {
      if (!two_shbs() || app.broker == name) app.well_behaved = false;
    }
    node->FillStoreAtNextCommit();
  }
  if (!two_shbs()) {
    if (sim_.is_up("shb") && chance(options_.shb_crash)) {
      shb_crashed_ever_ = true;
      for (SubscriberApp& app : subs_) app.well_behaved = false;
      CrashShb("shb");
    }
  } else {
    for (const std::string& shb : ShbNames()) {
      if (!sim_.is_up(shb) || !chance(options_.shb_crash)) continue;
      shb_crashed_ever_ = true;
      for (SubscriberApp& app : subs_) {
        if (app.broker == shb) app.well_behaved = false;
      }
      CrashShb(shb);
    }
    // An intermediate crash ends no session: its subscribers stay well behaved.
    if (options_.intermediate && sim_.is_up("ib") && chance(options_.ib_crash)) {
      ib_crashed_ever_ = true;
      sim_.Crash("ib");
      sim_.Schedule(later(20, 300), [this] { sim_.Restart("ib"); });
    }
  }
  if (sim_.is_up("phb") && chance(options_.phb_crash)) {
    sim_.Crash("phb");
    sim_.Schedule(later(20, 300), [this] { sim_.Restart("phb"); });
  }
  sim_.Schedule(absl::Milliseconds(50), [this] { FaultTick(); });
}

uint64_t World::resyncs() const {
  uint64_t n = 0;
  for (const SubscriberApp& app : subs_) {
    n += app.resyncs;
    if (const auto* node = sim_.node_as<SubscriberNode>(app.name)) n += node->resyncs();
  }
  return n;
}

uint64_t World::demotions() const {
  uint64_t n = demotions_;
  for (const auto& [name, node] : shb_nodes_) n += node->shb()->stats().demotions;
  return n;
}

uint64_t World::resumed_ahead() const {
  uint64_t n = resumed_ahead_;
  for (const auto& [name, node] : shb_nodes_) n += node->shb()->stats().resumed_ahead;
  return n;
}

void World::CrashShb(const std::string& shb) {
  // Half the crashes happen inside a commit, after the round was sent (the SHB sends before its
  // commit, under its delivery lease); the others between rounds.
  auto node = shb_nodes_.find(shb);
  if (node != shb_nodes_.end() && sim_.Random() % 2 == 0) {
    node->second->CrashDuringNextCommit();
    return;
  }
  sim_.Crash(shb);
  sim_.Schedule(absl::Milliseconds(20 + static_cast<int64_t>(sim_.Random() % 380)),
                [this, shb] { sim_.Restart(shb); });
}

void World::Run(absl::Duration faulty, absl::Duration settle) {
  sim_.Schedule(absl::Milliseconds(50), [this] { FaultTick(); });
  sim_.RunFor(faulty);
  faults_on_ = false;
  for (const auto& [a, b] : BrokerLinks()) {
    sim_.SetLink(a, b, LinkProfile{});
    sim_.SetLink(b, a, LinkProfile{});
  }
  for (const SubscriberApp& app : subs_) {
    for (const std::string& shb : ShbNames()) {
      sim_.SetLink(app.name, shb, LinkProfile{});
      sim_.SetLink(shb, app.name, LinkProfile{});
    }
  }
  for (auto& [name, node] : shb_nodes_) node->DisarmFaults();
  // Let pending restarts happen, then make sure everything is up and connected.
  sim_.RunFor(absl::Seconds(1));
  for (const std::string& n : BrokerNames()) sim_.Restart(n);
  for (SubscriberApp& app : subs_) {
    app.want_connected = true;
    sim_.Restart(app.name);
  }
  publishing = false;
  sim_.RunFor(settle);
}

std::vector<std::string> World::Check() const {
  ExactlyOnceChecker checker;
  for (const auto& [p, events] : log_.events) {
    for (const auto& [t, e] : events) checker.Logged(p, t, e);
  }
  for (int i = 1; i <= options_.pubends; ++i) {
    const PubendId p{static_cast<uint32_t>(i)};
    checker.AddPubend(p);
    auto lp = log_.l_prefix.find(p);
    if (log_.early_release && lp != log_.l_prefix.end()) checker.Released(p, lp->second);
  }
  std::vector<std::string> bad = log_.errors;
  // The publishing side: every publish acknowledged once the run settled, each at the tick that
  // logged it, and no publish logged twice (a retry after a crash is idempotent).
  for (const std::string& e : publisher_.errors) bad.push_back(e);
  if (!publisher_.unacked.empty()) {
    bad.push_back(absl::StrCat(publisher_.unacked.size(),
                               " publishes never acknowledged, the first ",
                               publisher_.unacked.begin()->first));
  }
  for (const auto& [seq, at] : publisher_.acked_at) {
    auto pit = log_.events.find(at.first);
    const EventRef* e = nullptr;
    if (pit != log_.events.end()) {
      auto eit = pit->second.find(at.second);
      if (eit != pit->second.end()) e = &eit->second;
    }
    const auto* id = e != nullptr ? std::get_if<int64_t>((*e)->Find("id")) : nullptr;
    if (id == nullptr || *id != static_cast<int64_t>(seq)) {
      bad.push_back(absl::StrCat("publish ", seq, " acknowledged at pubend ", at.first.value,
                                 " tick ", at.second, ", which does not hold it"));
    }
  }
  for (const auto& [p, events] : log_.events) {
    std::map<int64_t, Tick> ids;
    for (const auto& [t, e] : events) {
      const auto* id = std::get_if<int64_t>(e->Find("id"));
      if (id == nullptr) continue;
      auto [it, fresh] = ids.emplace(*id, t);
      if (!fresh) {
        bad.push_back(absl::StrCat("pubend ", p.value, " logged publish ", *id, " twice, at ",
                                   it->second, " and ", t));
      }
    }
  }
  for (const SubscriberApp& a : subs_) {
    for (const std::string& e : a.errors) bad.push_back(absl::StrCat(a.name, ": ", e));
    if (!a.started) {
      bad.push_back(absl::StrCat(a.name, " never connected"));
      continue;
    }
    ExactlyOnceChecker::SubscriberRecord r{
        a.name, *Subscription::Create(a.selector), a.start, a.high_water, a.well_behaved, {}};
    for (const auto& [p, list] : a.consumed) {
      for (const Consumed& c : list) {
        r.consumed[p].push_back({c.kind, c.tick, c.event, std::nullopt});
        if (c.kind == DeliveryKind::kGap)
          r.consumed[p].back().excusable_through = c.excusable_through;
      }
    }
    checker.AddSubscriber(std::move(r));
  }
  for (std::string& b : checker.Check()) bad.push_back(std::move(b));
  return bad;
}

}  // namespace gryph::sim
