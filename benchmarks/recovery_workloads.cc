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
#include "gryph/in_process_channel.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/storage.h"
#include "gryph/subscriber_hosting_broker.h"

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
  StorageOptions so;
  so.initial_map_bytes = uint64_t{1} << 30;
  so.path = dir + "/phb";
  auto phb_storage = *OpenLmdbStorage(so);
  InProcessNetwork net;
  auto phb_channel = *net.Connect("phb");
  PublisherHostingBrokerOptions po;
  PubendOptions pe{kPubend};
  pe.max_nack_answer_bytes = max_nack_answer_bytes;
  po.pubends = {pe};
  po.downstream = {"shb"};
  po.commit_thread = false;  // the loop commits, in OnTimer
  po.group_commit.max_records = 1000;
  auto phb = *PublisherHostingBroker::Open(po, phb_storage.get(), phb_channel.get());

  SubscriberHostingBrokerOptions sho;
  sho.pubends = {{kPubend, "phb"}};
  sho.commit_thread = true;
  std::unique_ptr<Storage> shb_storage;
  std::unique_ptr<Channel> shb_channel;
  std::unique_ptr<SubscriberHostingBroker> shb;
  auto open_shb = [&] {
    so.path = dir + "/shb";
    shb_storage = *OpenLmdbStorage(so);
    shb_channel = *net.Connect("shb");
    shb = *SubscriberHostingBroker::Open(sho, shb_storage.get(), shb_channel.get());
  };
  open_shb();

  std::vector<Counter> counters(kSubscribers);
  std::vector<std::unique_ptr<Channel>> channels;
  std::vector<std::unique_ptr<DurableSubscriber>> subs;
  for (int i = 0; i < kSubscribers; ++i) {
    channels.push_back(*net.Connect(absl::StrCat("client-", i)));
    DurableSubscriberOptions o;
    o.subscription = absl::StrCat("sub-", i);
    o.selector = absl::StrCat("k = ", i);
    o.broker = "shb";
    subs.push_back(*DurableSubscriber::Create(o, channels.back().get(), &counters[i]));
    DurableSubscriber* ds = subs.back().get();
    channels.back()->SetReceiver(
        [ds](absl::string_view from, Message m) { ds->HandleMessage(from, m); });
    (void)ds->Connect();
  }
  auto pump = [&] {
    const absl::Time now = absl::Now();
    phb->OnTimer(now);
    net.DeliverAll();
    if (shb != nullptr) {
      while (shb->Flush()) net.DeliverAll();
      shb->OnTimer(now);
    }
    net.DeliverAll();
    for (auto& ds : subs) ds->OnTimer(now);
    net.DeliverAll();
  };
  Event e;
  e.SetPayload(std::string(250, 'x'));
  uint64_t seq = 1;
  auto publish = [&](int n) {
    for (int i = 0; i < n; ++i) {
      e.SetInt64("k", static_cast<int64_t>(seq % kSubscribers));
      phb->Publish(kPubend, "gateway", seq++, MakeEventRef(e), [](absl::StatusOr<Tick>) {});
      if (i % 1000 == 999) (void)phb->Flush();
    }
    (void)phb->Flush();
  };
  // Warm: every subscriber connected and served by the constream.
  publish(100);
  for (int i = 0; i < 50; ++i) pump();

  // The crash, and the backlog it misses.
  shb.reset();
  shb_channel.reset();
  shb_storage.reset();
  publish(kBacklog);
  pump();
  const Tick last = phb->pubend(kPubend)->committed_tick();

  const auto start = Clock::now();
  open_shb();
  for (auto& ds : subs) (void)ds->Connect();  // the broker answers: no session (it restarted)
  const auto deadline = start + std::chrono::seconds(120);
  while (shb->latest_delivered(kPubend) < last && Clock::now() < deadline) pump();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  Result r;
  r.events_per_s = shb->latest_delivered(kPubend) >= last ? kBacklog / secs : 0;
  r.nacks_sent = shb->stats().nacks_sent;
  r.nacks_followed_up = shb->stats().nacks_followed_up;
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
