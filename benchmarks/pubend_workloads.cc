// Workloads for the pubend (see gryph_bench.cc for the list).

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "absl/synchronization/mutex.h"
#include "benchmarks/workload.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/storage.h"

namespace gryph::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The pubend's group size, shared with the raw LMDB baseline so that they compare like for like.
constexpr size_t kBatchRecords = 1000;

// A channel that counts what is sent and drops it: the benchmarks measure the pubend, not a
// transport.
class CountingChannel : public Channel {
 public:
  const std::string& name() const override { return name_; }
  absl::Status Send(absl::string_view, Message message) override {
    if (const auto* k = std::get_if<KnowledgeMessage>(&message)) {
      for (const KnowledgeSpan& s : k->spans) spans_ += s.value == TickValue::kD ? 1 : 0;
    }
    return absl::OkStatus();
  }
  void SetReceiver(Receiver) override {}
  uint64_t data_spans() const { return spans_; }

 private:
  std::string name_ = "phb";
  std::atomic<uint64_t> spans_{0};
};

EventRef Payload250() {
  Event e;
  e.SetString("symbol", "IBM").SetInt64("quantity", 100).SetPayload(std::string(250, 'x'));
  return MakeEventRef(std::move(e));
}

struct Phb {
  Phb(const std::string& dir, Durability durability, int pubends, absl::Duration max_delay) {
    std::filesystem::remove_all(dir);
    StorageOptions so;
    so.path = dir;
    so.durability = durability;
    so.initial_map_bytes = uint64_t{1} << 30;
    storage = *OpenLmdbStorage(so);
    PublisherHostingBrokerOptions o;
    for (int i = 1; i <= pubends; ++i)
      o.pubends.push_back(PubendOptions{PubendId{static_cast<uint32_t>(i)}});
    o.group_commit.max_records = kBatchRecords;
    o.group_commit.max_delay = max_delay;
    phb = *PublisherHostingBroker::Open(std::move(o), storage.get(), &channel);
  }
  std::unique_ptr<Storage> storage;
  CountingChannel channel;
  std::unique_ptr<PublisherHostingBroker> phb;
};

// Publishes as fast as durability allows, with at most `window` publishes in flight.
double PublishRate(const std::string& dir, Durability durability, int pubends, double seconds) {
  Phb phb(dir, durability, pubends, absl::ZeroDuration());
  const EventRef event = Payload250();
  std::atomic<uint64_t> acked{0};
  std::atomic<uint64_t> failed{0};
  constexpr uint64_t kWindow = 8 * kBatchRecords;
  uint64_t sent = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    while (sent - acked.load(std::memory_order_acquire) >= kWindow) std::this_thread::yield();
    phb.phb->Publish(PubendId{static_cast<uint32_t>(1 + sent % pubends)}, "", 0, event,
                     [&](absl::StatusOr<Tick> t) {
                       if (!t.ok()) failed++;
                       acked.fetch_add(1, std::memory_order_release);
                     });
    ++sent;
  }
  while (acked.load() < sent) std::this_thread::yield();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed > 0)
    std::fprintf(stderr, "publish failures: %llu\n", (unsigned long long)failed.load());
  return static_cast<double>(sent) / secs;
}

void PublishWorkload(const Context& ctx, const char* name, Durability durability) {
  for (int pubends : {1, 4}) {
    const double rate = MedianOf(
        3, [&] { return PublishRate(ctx.scratch_dir + "/db", durability, pubends, ctx.seconds); });
    Report(name)
        .Add("pubends", int64_t{pubends})
        .Add("payload_bytes", int64_t{250})
        .Add("events_per_s", rate)
        .Print();
  }
}

}  // namespace

GRYPH_WORKLOAD(publish_sync) { PublishWorkload(ctx, "publish_sync", Durability::kSync); }
GRYPH_WORKLOAD(publish_nosync) { PublishWorkload(ctx, "publish_nosync", Durability::kNoSync); }

// Publish -> durable ack latency at a fixed offered load, paced and measured as its floor
// (lmdb_group_commit_latency) is: the publisher thread sleeps until each publish is due (with a
// 1 ns timer slack, so the rate holds) and each latency runs from the Publish call. (It used to
// spin until due and count from the due instant: on two CPUs the spinning thread held one of
// them from the commit thread and the kernel's own journal thread, and its p99 swung from 1 to
// 10 times the floor's, where the floor, paced by sleeping, held still.)
GRYPH_WORKLOAD(publish_latency) {
#if defined(__linux__)
  prctl(PR_SET_TIMERSLACK, 1UL);  // wake when due
#endif
  for (double offered : {10'000.0, 100'000.0}) {
    Phb phb(ctx.scratch_dir + "/db", Durability::kSync, 1, absl::ZeroDuration());
    const EventRef event = Payload250();
    const uint64_t total = static_cast<uint64_t>(offered * ctx.seconds);
    std::vector<double> latency(total, 0);
    std::atomic<uint64_t> acked{0};
    const auto start = Clock::now();
    const auto interval = std::chrono::duration<double>(1.0 / offered);
    for (uint64_t i = 0; i < total; ++i) {
      const auto due =
          start + std::chrono::duration_cast<Clock::duration>(interval * static_cast<double>(i));
      std::this_thread::sleep_until(due);
      const auto sent = Clock::now();
      phb.phb->Publish(PubendId{1}, "", 0, event, [&, i, sent](absl::StatusOr<Tick>) {
        latency[i] = std::chrono::duration<double, std::micro>(Clock::now() - sent).count();
        acked.fetch_add(1, std::memory_order_release);
      });
    }
    while (acked.load(std::memory_order_acquire) < total) std::this_thread::yield();
    Histogram h;
    for (double l : latency) h.Add(l);
    Report("publish_latency")
        .Add("offered_per_s", offered)
        .Add("p50_us", h.Percentile(50))
        .Add("p99_us", h.Percentile(99))
        .Add("p999_us", h.Percentile(99.9))
        .Print();
  }
}

// Answering nacks of 1,000-event ranges from the log of a pubend holding 100,000 events.
GRYPH_WORKLOAD(nack_answer) {
  Phb phb(ctx.scratch_dir + "/db", Durability::kNoSync, 1, absl::ZeroDuration());
  const EventRef event = Payload250();
  constexpr uint64_t kEvents = 100'000;
  std::atomic<uint64_t> acked{0};
  std::vector<Tick> ticks(kEvents);
  for (uint64_t i = 0; i < kEvents; ++i) {
    phb.phb->Publish(PubendId{1}, "", 0, event, [&, i](absl::StatusOr<Tick> t) {
      ticks[i] = *t;
      acked.fetch_add(1, std::memory_order_release);
    });
  }
  while (acked.load(std::memory_order_acquire) < kEvents) std::this_thread::yield();
  Pubend* pubend = phb.phb->pubend(PubendId{1});
  const double rate = MedianOf(3, [&] {
    const uint64_t before = phb.channel.data_spans();
    const auto start = Clock::now();
    uint64_t i = 0;
    while (Clock::now() - start < std::chrono::duration<double>(ctx.seconds)) {
      const uint64_t first = (i * 1000) % (kEvents - 1000);
      if (!pubend
               ->HandleCuriosity(
                   "shb", CuriosityMessage{PubendId{1}, {{ticks[first], ticks[first + 999]}}})
               .ok()) {
        std::abort();
      }
      ++i;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    return static_cast<double>(phb.channel.data_spans() - before) / secs;
  });
  Report("nack_answer").Add("range_events", int64_t{1000}).Add("events_per_s", rate).Print();
}

}  // namespace gryph::bench
