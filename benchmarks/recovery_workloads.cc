// shb_recovery: an SHB back from a crash catching up a backlog from its pubend by nacks, with the
// pubend's answers bounded at several sizes (PubendOptions::max_nack_answer_bytes), against the
// same backlog answered whole (see gryph_bench.cc for the list).
//
// One process, one thread, the in-process channel, sync durability: a PHB with one pubend on
// LMDB and an SHB on LMDB (its own commit thread, as deployed) hosting 10 durable subscribers,
// each matching a tenth of the events. The SHB is closed (a crash: what it committed stays), the
// PHB logs 100,000 events of 250 bytes, the SHB reopens, and the figure is the rate from the
// reopening until its latestDelivered reaches the pubend's last tick — the nacks, the answers,
// matching, the PFS and delivery to the reconnected subscribers.

#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmarks/workload.h"
#include "gryph/durable_subscriber.h"
#include "gryph/testing/topology.h"

namespace gryph::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr PubendId kPubend{1};
constexpr int kSubscribers = 10;
constexpr int kBacklog = 100'000;

struct Counter : DurableSubscriber::Handler {
  void OnEvent(PubendId, Tick, const EventRef&) override { ++events; }
  void OnGap(PubendId, Tick) override { ++gaps; }
  void OnError(const absl::Status&) override {}
  uint64_t events = 0;
  uint64_t gaps = 0;
};

struct Result {
  double events_per_s = 0;
  uint64_t nacks_sent = 0;
  uint64_t nacks_followed_up = 0;
  uint64_t deliveries = 0;
};

Result RunOnce(const std::string& dir, uint64_t max_nack_answer_bytes) {
  std::filesystem::remove_all(dir);
  // The shared harness (gryph/testing/topology.h), on the real clock and LMDB.
  TopologyOptions to;
  to.pubends = {kPubend};
  to.real_time = true;
  to.storage_dir = dir;
  to.storage.initial_map_bytes = uint64_t{1} << 30;
  to.pubend_options = [&](PubendOptions& p) { p.max_nack_answer_bytes = max_nack_answer_bytes; };
  to.phb_options = [](PublisherHostingBrokerOptions& po) { po.group_commit.max_records = 1000; };
  to.shb_options = [](SubscriberHostingBrokerOptions& so) { so.commit_thread = true; };
  std::unique_ptr<Topology> t = *Topology::Create(std::move(to));

  std::vector<Counter> counters(kSubscribers);
  std::vector<DurableSubscriber*> subs;
  for (int i = 0; i < kSubscribers; ++i) {
    DurableSubscriberOptions o;
    o.subscription = absl::StrCat("sub-", i);
    o.selector = absl::StrCat("k = ", i);
    o.broker = "shb";
    subs.push_back(*t->StartSubscriber(o, &counters[i]));
  }
  Event e;
  e.SetPayload(std::string(250, 'x'));
  uint64_t seq = 1;
  auto publish = [&](int n) {
    for (int i = 0; i < n; ++i) {
      e.SetInt64("k", static_cast<int64_t>(seq % kSubscribers));
      t->Publish(kPubend, "gateway", seq++, MakeEventRef(e));
      if (i % 1000 == 999) (void)t->phb().Flush();
    }
    (void)t->phb().Flush();
  };
  // Warm: every subscriber connected and served by the constream.
  publish(100);
  for (int i = 0; i < 50; ++i) t->Step();

  // The crash, and the backlog it misses.
  t->CrashShb("shb");
  publish(kBacklog);
  t->Step();
  const Tick last = t->phb().pubend(kPubend)->committed_tick();

  const auto start = Clock::now();
  if (absl::Status st = t->RestartShb("shb"); !st.ok()) return Result{};
  for (DurableSubscriber* ds : subs) (void)ds->Connect();  // no session there: it restarted
  SubscriberHostingBroker& shb = t->shb("shb");
  const auto deadline = start + std::chrono::seconds(120);
  while (shb.latest_delivered(kPubend) < last && Clock::now() < deadline) t->Step();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  Result r;
  r.events_per_s = shb.latest_delivered(kPubend) >= last ? kBacklog / secs : 0;
  r.nacks_sent = shb.stats().nacks_sent;
  r.nacks_followed_up = shb.stats().nacks_followed_up;
  for (const Counter& c : counters) r.deliveries += c.events;
  return r;
}

GRYPH_WORKLOAD(shb_recovery) {
  // The whole backlog in one answer (it is about 30 MB), then bounded answers.
  const uint64_t whole = uint64_t{1} << 30;
  double whole_rate = 0;
  for (uint64_t bytes :
       {whole, uint64_t{64} << 20, uint64_t{1} << 20, uint64_t{64} << 10, uint64_t{4} << 10}) {
    std::vector<Result> runs;
    const double rate = MedianOf(3, [&] {
      runs.push_back(RunOnce(ctx.scratch_dir + "/run", bytes));
      return runs.back().events_per_s;
    });
    if (bytes == whole) whole_rate = rate;
    Report("shb_recovery")
        .Add("max_nack_answer_bytes", static_cast<int64_t>(bytes))
        .Add("backlog_events", static_cast<int64_t>(kBacklog))
        .Add("events_per_s", rate)
        .Add("ratio_to_whole", whole_rate > 0 ? rate / whole_rate : 0.0)
        .Add("nacks_sent", static_cast<int64_t>(runs.back().nacks_sent))
        .Add("nacks_followed_up", static_cast<int64_t>(runs.back().nacks_followed_up))
        .Print();
  }
  std::filesystem::remove_all(ctx.scratch_dir + "/run");
}

}  // namespace
}  // namespace gryph::bench
