// Scenario workloads for the subscriber side, the paper's §5 side by side (see gryph_bench.cc).
//
// One process, the in-process channel, sync durability everywhere: a PHB with 4 pubends on
// LMDB (its own commit thread), an SHB on LMDB (its own commit thread), and 400 durable
// subscribers, each matching the events of one pubend — a quarter of all events, so that every
// event matches 100 subscribers. A publisher thread publishes 250-byte events with a bounded
// window in flight; the main thread runs the brokers (lane 0 of the network) and a client thread
// runs the subscribers (lane 1), as separate processes would.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <thread>
#include <vector>
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "benchmarks/workload.h"
#include "gryph/durable_subscriber.h"
#include "gryph/in_process_channel.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/runtime.h"
#include "gryph/storage.h"
#include "gryph/subscriber_hosting_broker.h"

namespace gryph::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kPubends = 4;
constexpr int kSubscribers = 400;

class CountingHandler : public DurableSubscriber::Handler {
 public:
  void OnEvent(PubendId, Tick, const EventRef& e) override {
    events.fetch_add(1, std::memory_order_relaxed);
    if (record_latency) {
      const auto* ts = std::get_if<int64_t>(e->Find("published_ns"));
      if (ts != nullptr) {
        latency->Add(
            static_cast<double>(std::chrono::steady_clock::now().time_since_epoch().count() - *ts) /
            1000.0);
      }
    }
  }
  bool record_latency = false;
  Histogram* latency = nullptr;
  void OnGap(PubendId, Tick) override { ++gaps; }
  void OnError(const absl::Status&) override { ++errors; }
  std::atomic<uint64_t> events{0};  // read by the other threads
  uint64_t gaps = 0;
  uint64_t errors = 0;
};

constexpr size_t kBrokerLane = 0;
constexpr size_t kClientLane = 1;
constexpr size_t kOtherClientLane = 2;  // RuntimeScenario: another process's subscribers

// What both scenarios run: a PHB and an SHB over 4 pubends on LMDB (sync), in `dir`.
std::unique_ptr<Storage> OpenStore(const std::string& path) {
  StorageOptions so;
  so.initial_map_bytes = uint64_t{1} << 30;
  so.path = path;
  return *OpenLmdbStorage(so);
}
PublisherHostingBrokerOptions PhbOptions() {
  PublisherHostingBrokerOptions po;
  for (int i = 1; i <= kPubends; ++i)
    po.pubends.push_back(PubendOptions{PubendId{static_cast<uint32_t>(i)}});
  po.downstream = {"shb"};
  po.group_commit.max_records = 1000;
  po.group_commit.max_delay = absl::ZeroDuration();
  return po;
}
SubscriberHostingBrokerOptions ShbOptions() {
  SubscriberHostingBrokerOptions so;
  for (int i = 1; i <= kPubends; ++i)
    so.pubends.push_back({PubendId{static_cast<uint32_t>(i)}, "phb"});
  return so;
}

struct Scenario {
  // `subscriber_count` durable subscribers, spread evenly over the pubends.
  explicit Scenario(const std::string& dir, int subscriber_count = kSubscribers) {
    std::filesystem::remove_all(dir);
    phb_storage = OpenStore(dir + "/phb");
    shb_storage = OpenStore(dir + "/shb");
    phb_channel = *net.Connect("phb", kBrokerLane);
    shb_channel = *net.Connect("shb", kBrokerLane);
    phb = *PublisherHostingBroker::Open(PhbOptions(), phb_storage.get(), phb_channel.get());
    SubscriberHostingBrokerOptions so2 = ShbOptions();
    so2.commit_thread = true;  // the loop below polls, so no on_commit wake-up is needed
    shb = *SubscriberHostingBroker::Open(std::move(so2), shb_storage.get(), shb_channel.get());
    handlers = std::vector<CountingHandler>(subscriber_count);
    for (int i = 0; i < subscriber_count; ++i) {
      channels.push_back(*net.Connect(absl::StrCat("client-", i), kClientLane));
      DurableSubscriberOptions o;
      o.subscription = absl::StrCat("sub-", i);
      o.selector = absl::StrCat("pubend = ", 1 + i % kPubends);
      o.broker = "shb";
      subscribers.push_back(*DurableSubscriber::Create(o, channels.back().get(), &handlers[i]));
      DurableSubscriber* ds = subscribers.back().get();
      channels.back()->SetReceiver(
          [ds](absl::string_view from, Message m) { ds->HandleMessage(from, m); });
      (void)ds->Connect();
    }
    while (net.DeliverAll(kBrokerLane) + net.DeliverAll(kClientLane) > 0) shb->Flush();
  }

  // One round of the brokers' event loop: a bounded number of messages, then timers every 5 ms.
  void PumpBrokers(absl::Time now) {
    if (net.Deliver(20'000, kBrokerLane) == 0 && !more_) {
      net.Wait(kBrokerLane, absl::Milliseconds(1));
    }
    more_ = shb->Flush();
    if (now - last_broker_timer < absl::Milliseconds(5)) return;
    last_broker_timer = now;
    shb->OnTimer(now);
    phb->OnTimer(now);
  }

  // One round of the subscribers' event loop, on its own thread.
  void PumpClients(absl::Time now) {
    if (net.Deliver(20'000, kClientLane) == 0) net.Wait(kClientLane, absl::Milliseconds(1));
    if (now - last_client_timer < absl::Milliseconds(5)) return;
    last_client_timer = now;
    for (auto& s : subscribers) s->OnTimer(now);
  }

  uint64_t Delivered() const {
    uint64_t n = 0;
    for (const auto& h : handlers) n += h.events.load(std::memory_order_relaxed);
    return n;
  }

  InProcessNetwork net{2};
  bool more_ = false;  // the SHB's last Flush left catchup messages to send
  absl::Time last_broker_timer = absl::InfinitePast();
  absl::Time last_client_timer = absl::InfinitePast();
  std::unique_ptr<Storage> phb_storage;
  std::unique_ptr<Storage> shb_storage;
  std::unique_ptr<Channel> phb_channel;
  std::unique_ptr<Channel> shb_channel;
  std::unique_ptr<PublisherHostingBroker> phb;
  std::unique_ptr<SubscriberHostingBroker> shb;
  std::vector<std::unique_ptr<Channel>> channels;
  std::vector<CountingHandler> handlers;
  std::vector<std::unique_ptr<DurableSubscriber>> subscribers;
};

enum class Mode { kSteady, kChurn, kAllCatchup };

// Publishes as fast as the system sustains (bounded in flight: the window is the SHB's
// latestDelivered lag) for `seconds`, and returns deliveries per second: over the whole run, or
// for kAllCatchup while the subscribers catch up — from their reconnection until the broker has
// no catchup stream left (or the run ends), as the paper measures its SHB's rate "when all
// subscribers have a separate catchup stream" (§5). The disconnected period before it delivers
// nothing by construction and is not part of that rate.
double Run(const Context& ctx, Mode mode) {
  Scenario s(ctx.scratch_dir + "/db");
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};
  // Flow control, so that the publisher runs at the rate the system sustains: at most kWindow
  // events published but not yet through the SHB's constream (one PFS record each), at most
  // kMaxBacklog messages queued towards the subscribers, and at most `allowance` deliveries owed
  // (every event matches kFanout subscribers) and not yet handled: kWindow events' worth,
  // unlimited while the subscribers of kAllCatchup are away (the constream keeps recording for
  // them, as the scenario asks), and after they are back the backlog they left plus kWindow
  // events' worth, so that publishing goes on at the rate at which the catchups drain.
  constexpr uint64_t kWindow = 4'000;
  constexpr size_t kMaxBacklog = 400'000;
  constexpr uint64_t kFanout = kSubscribers / kPubends;
  std::atomic<uint64_t> shb_events{0};
  std::atomic<uint64_t> published{0};
  std::atomic<uint64_t> allowance{kWindow * kFanout};
  const uint64_t delivered_at_start = s.Delivered();
  auto owed = [&] { return published.load() * kFanout - (s.Delivered() - delivered_at_start); };
  std::thread publisher([&] {
    Event e;
    e.SetPayload(std::string(250, 'x'));
    uint64_t seq = 0;
    bool owe_too_much = false;  // checked every 256 events: Delivered() reads 400 counters
    while (!stop.load()) {
      if (seq % 256 == 0) owe_too_much = owed() > allowance.load();
      if (seq - shb_events.load() > kWindow || s.net.pending() > kMaxBacklog || owe_too_much) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        owe_too_much = owe_too_much && owed() > allowance.load();
        continue;
      }
      const int p = 1 + static_cast<int>(seq % kPubends);
      Event ev = e;
      ev.SetInt64("pubend", p).SetInt64("seq", static_cast<int64_t>(seq));
      s.phb->Publish(PubendId{static_cast<uint32_t>(p)}, "", 0, MakeEventRef(std::move(ev)),
                     [&](absl::StatusOr<Tick>) { acked++; });
      ++seq;
      published = seq;
    }
  });
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(ctx.seconds);
  const uint64_t before = s.Delivered();
  std::atomic<bool> clients_done{false};
  // kAllCatchup: when the subscribers reconnected (ns since start; 0 = not yet), and the
  // deliveries handled by then.
  std::atomic<int64_t> reconnected_ns{0};
  std::atomic<uint64_t> delivered_at_reconnect{0};
  // The subscribers' thread: their messages, timers, and the disconnections of the mode.
  std::thread clients([&] {
#if defined(__linux__)
    prctl(PR_SET_NAME, "clients");
#endif
    bool all_down = false;
    bool all_back = false;
    uint64_t churn_next = 0;
    while (!clients_done.load()) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (mode == Mode::kAllCatchup && !all_down && elapsed > ctx.seconds * 0.1) {
        allowance = std::numeric_limits<uint64_t>::max();
        for (auto& sub : s.subscribers) (void)sub->Disconnect();
        all_down = true;
      }
      if (mode == Mode::kAllCatchup && all_down && !all_back && elapsed > ctx.seconds * 0.3) {
        delivered_at_reconnect = s.Delivered();
        reconnected_ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
        allowance = owed() + kWindow * kFanout;
        for (auto& sub : s.subscribers) (void)sub->Connect();
        all_back = true;
      }
      if (mode == Mode::kChurn) {
        // Each subscriber disconnects in turn and reconnects ~1,000 of its events later, so that
        // some subscriber is always catching up.
        const uint64_t slot = static_cast<uint64_t>(elapsed * 40);
        while (churn_next <= slot) {
          auto& down = s.subscribers[churn_next % kSubscribers];
          (void)down->Disconnect();
          auto& up = s.subscribers[(churn_next + kSubscribers - 4) % kSubscribers];
          if (!up->connected()) (void)up->Connect();
          ++churn_next;
        }
      }
      s.PumpClients(absl::Now());
    }
  });
#if defined(__linux__)
  prctl(PR_SET_NAME, "brokers");
#endif
  uint64_t iterations = 0;
  bool catching_up_seen = false;
  std::optional<Clock::time_point> caught_up_at;
  uint64_t delivered_at_caught_up = 0;
  while (Clock::now() < end) {
    s.PumpBrokers(absl::Now());
    shb_events = s.shb->stats().pfs_records;
    ++iterations;
    if (mode == Mode::kAllCatchup && reconnected_ns.load() != 0 && !caught_up_at) {
      if (s.shb->catching_up() > 0) {
        catching_up_seen = true;
      } else if (catching_up_seen) {
        caught_up_at = Clock::now();
        delivered_at_caught_up = s.Delivered();
      }
    }
  }
  clients_done = true;
  clients.join();
  const auto finished = Clock::now();
  double secs = std::chrono::duration<double>(finished - start).count();
  uint64_t delivered = s.Delivered() - before;
  if (mode == Mode::kAllCatchup && reconnected_ns.load() != 0) {
    // From the reconnection until the catchups were over, or the run was.
    const auto from = start + std::chrono::nanoseconds(reconnected_ns.load());
    secs = std::chrono::duration<double>(caught_up_at.value_or(finished) - from).count();
    delivered = (caught_up_at ? delivered_at_caught_up : s.Delivered()) - delivered_at_reconnect;
  }
  if (std::getenv("GRYPH_BENCH_VERBOSE") != nullptr) {
    const auto& st = s.shb->stats();
    uint64_t dups = 0;
    uint64_t resyncs = 0;
    size_t connected = 0;
    for (auto& sub : s.subscribers) {
      dups += sub->duplicates_dropped();
      resyncs += sub->resyncs();
      connected += sub->connected() ? 1 : 0;
    }
    std::fprintf(stderr, "%.2f s measured (whole run: %.2f M deliveries/s), connected %zu, ", secs,
                 static_cast<double>(s.Delivered() - before) /
                     std::chrono::duration<double>(finished - start).count() / 1e6,
                 connected);
    std::fprintf(stderr, "duplicates %llu, resyncs %llu, resent %llu, ", (unsigned long long)dups,
                 (unsigned long long)resyncs, (unsigned long long)st.resent);
    std::fprintf(
        stderr,
        "iterations %llu, published %llu, shb delivered %llu, handled %llu, pending %zu, ld %llu\n",
        (unsigned long long)iterations, (unsigned long long)acked.load(),
        (unsigned long long)st.events_delivered, (unsigned long long)delivered, s.net.pending(),
        (unsigned long long)s.shb->latest_delivered(PubendId{1}));
  }
  stop = true;
  publisher.join();
  return static_cast<double>(delivered) / secs;
}

void Workload(const Context& ctx, const char* name, Mode mode) {
  const double rate = MedianOf(3, [&] { return Run(ctx, mode); });
  Report(name)
      .Add("pubends", int64_t{kPubends})
      .Add("subscribers", int64_t{kSubscribers})
      .Add("deliveries_per_s", rate)
      .Print();
}

}  // namespace

namespace {

// The brokers and the subscribers on two Runtimes, as separate processes would run: the PHB and
// the SHB (4 pubends, LMDB, sync) on one (lane 0 of the network), the subscribers on another
// (lane 1); the brokers commit on their own threads. Subscribers select `pubend = n`.
class RuntimeScenario {
 public:
  explicit RuntimeScenario(const std::string& dir)
      : net_(3),
        broker_lane_(&net_, kBrokerLane),
        client_lane_(&net_, kClientLane),
        other_lane_(&net_, kOtherClientLane) {
    std::filesystem::remove_all(dir);
    phb_storage_ = OpenStore(dir + "/phb");
    shb_storage_ = OpenStore(dir + "/shb");
    phb_channel_ = *net_.Connect("phb", kBrokerLane);
    shb_channel_ = *net_.Connect("shb", kBrokerLane);
    brokers = *Runtime::Create();
    clients = *Runtime::Create();
    other_clients = *Runtime::Create();
    brokers->AddSource(&broker_lane_);
    clients->AddSource(&client_lane_);
    other_clients->AddSource(&other_lane_);
    phb =
        *brokers->OpenPublisherHostingBroker(PhbOptions(), phb_storage_.get(), phb_channel_.get());
    shb =
        *brokers->OpenSubscriberHostingBroker(ShbOptions(), shb_storage_.get(), shb_channel_.get());
  }
  ~RuntimeScenario() {
    // The nodes go with their runtimes, before the channels and storage they use.
    other_clients.reset();
    clients.reset();
    brokers.reset();
  }

  // Before Start, or through the runtime's Call. `other`: on other_clients (another process's
  // subscribers), else on clients.
  DurableSubscriber* Subscribe(const std::string& name, int pubend, CountingHandler* handler,
                               bool other = false) {
    channels_.push_back(*net_.Connect("client-" + name, other ? kOtherClientLane : kClientLane));
    DurableSubscriberOptions o;
    o.subscription = name;
    o.selector = absl::StrCat("pubend = ", pubend);
    o.broker = "shb";
    return *(other ? other_clients : clients)
                ->OpenDurableSubscriber(o, channels_.back().get(), handler);
  }

  void Start() {
    if (!brokers->Start().ok() || !clients->Start().ok() || !other_clients->Start().ok()) {
      std::abort();
    }
  }

  // Waits (at most 60 s) until every one of `subs` (of `runtime`) is connected.
  void AwaitConnected(const std::vector<DurableSubscriber*>& subs, Runtime* runtime) {
    for (int tries = 0; tries < 6000; ++tries) {
      size_t connected = 0;
      runtime->Call([&] {
        for (DurableSubscriber* d : subs) connected += d->connected() ? 1 : 0;
      });
      if (connected == subs.size()) return;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }

  // Publishes at `rate` events/s round robin over the pubends from a thread of its own until
  // the returned function is called; each event carries its publish time (published_ns).
  // `acked` (optional, on the commit thread) gets publish -> acknowledgement in microseconds.
  std::function<void()> PublishAtRate(double rate, Histogram* acked) {
    auto stop = std::make_shared<std::atomic<bool>>(false);
    auto thread = std::make_shared<std::thread>([this, rate, acked, stop] {
#if defined(__linux__)
      prctl(PR_SET_TIMERSLACK, 1UL);  // wake when due, not up to 50 us later
#endif
      Event e;
      e.SetPayload(std::string(250, 'x'));
      const auto start = Clock::now();
      for (uint64_t seq = 0; !stop->load(); ++seq) {
        const auto due =
            start + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(static_cast<double>(seq) / rate));
        std::this_thread::sleep_until(due);
        const int p = 1 + static_cast<int>(seq % kPubends);
        Event ev = e;
        const auto called = Clock::now();
        ev.SetInt64("pubend", p).SetInt64("published_ns", called.time_since_epoch().count());
        phb->Publish(PubendId{static_cast<uint32_t>(p)}, "", 0, MakeEventRef(std::move(ev)),
                     [acked, called](absl::StatusOr<Tick>) {
                       if (acked != nullptr) {
                         acked->Add(static_cast<double>((Clock::now() - called).count()) / 1000.0);
                       }
                     });
      }
    });
    return [stop, thread] {
      stop->store(true);
      thread->join();
    };
  }

 private:
  InProcessNetwork net_;
  InProcessLane broker_lane_;
  InProcessLane client_lane_;
  InProcessLane other_lane_;
  std::unique_ptr<Storage> phb_storage_;
  std::unique_ptr<Storage> shb_storage_;
  std::unique_ptr<Channel> phb_channel_;
  std::unique_ptr<Channel> shb_channel_;
  std::vector<std::unique_ptr<Channel>> channels_;

 public:
  std::unique_ptr<Runtime> brokers;
  std::unique_ptr<Runtime> clients;
  std::unique_ptr<Runtime> other_clients;
  PublisherHostingBroker* phb = nullptr;
  SubscriberHostingBroker* shb = nullptr;
};

// Publish -> deliver latency at a fixed 10,000 events/s through PHB and SHB (sync at both), with
// `subscribers` subscribers, each event reaching a quarter of them; the latency of every
// delivery is measured from the Publish call (the publisher thread sleeps until each event is
// due with a 1 ns timer slack, so the rate holds; how late it wakes is the benchmark's own and is
// not counted). On the Runtime (RuntimeScenario). lmdb_commit and e2e_floor in the same run are
// the baselines.
void LatencyWorkload(const Context& ctx, const char* name, int subscribers) {
  std::vector<CountingHandler> handlers(static_cast<size_t>(subscribers));
  Histogram latency;
  Histogram acked_latency;  // publish -> the PHB's acknowledgement: the part before the SHB
  constexpr double kRate = 10'000;
  const double events = kRate * (ctx.seconds + 2);
  latency.Reserve(static_cast<size_t>(events * subscribers / kPubends));
  acked_latency.Reserve(static_cast<size_t>(events));
  {
    RuntimeScenario s(ctx.scratch_dir + "/db");
    std::vector<DurableSubscriber*> subs;
    for (int i = 0; i < subscribers; ++i) {
      handlers[static_cast<size_t>(i)].record_latency = true;
      handlers[static_cast<size_t>(i)].latency = &latency;
      subs.push_back(s.Subscribe(absl::StrCat("sub-", i), 1 + i % kPubends,
                                 &handlers[static_cast<size_t>(i)]));
    }
    s.Start();
    s.AwaitConnected(subs, s.clients.get());
    std::function<void()> stop = s.PublishAtRate(kRate, &acked_latency);
    std::this_thread::sleep_for(std::chrono::duration<double>(ctx.seconds));
    stop();
    s.clients->Shutdown();  // no delivery is counted after this
    s.brokers->Shutdown();
  }
  Report(name)
      .Add("offered_per_s", kRate)
      .Add("subscribers", int64_t{subscribers})
      .Add("deliveries", static_cast<int64_t>(latency.count()))
      .Add("p50_us", latency.Percentile(50))
      .Add("p99_us", latency.Percentile(99))
      .Add("acked_p50_us", acked_latency.Percentile(50))
      .Print();
}

}  // namespace

// 100 caught-up subscribers receiving at 10,000 events/s (each event reaches 25 of them), then
// the same while 1,000 other subscriptions reconnect at once with CTs a whole phase old (each
// catching up about 2,500 events from the PFS; their process is another runtime on another
// lane): the steady subscribers' delivery rate and p99 in each phase. What reconnections cost
// the broker's loop (a commit each, PFS reads, catchup deliveries) shows here.
GRYPH_WORKLOAD(reconnect_storm) {
  constexpr int kSteady = 100;
  constexpr int kStorm = 1000;
  constexpr double kRate = 10'000;
  std::vector<CountingHandler> steady_handlers(kSteady);
  std::vector<CountingHandler> storm_handlers(kStorm);
  Histogram steady_latency;
  Histogram storm_latency;
  const double per_phase = kRate * ctx.seconds * kSteady / kPubends;
  steady_latency.Reserve(static_cast<size_t>(per_phase * 1.5));
  storm_latency.Reserve(static_cast<size_t>(per_phase * 1.5));
  double steady_rate = 0;
  double storm_rate = 0;
  uint64_t storm_caught_up = 0;
  {
    RuntimeScenario s(ctx.scratch_dir + "/db");
    std::vector<DurableSubscriber*> steady;
    std::vector<DurableSubscriber*> storm;
    for (int i = 0; i < kSteady; ++i) {
      steady_handlers[i].record_latency = true;
      steady_handlers[i].latency = &steady_latency;
      steady.push_back(
          s.Subscribe(absl::StrCat("steady-", i), 1 + i % kPubends, &steady_handlers[i]));
    }
    for (int i = 0; i < kStorm; ++i) {
      storm.push_back(
          s.Subscribe(absl::StrCat("storm-", i), 1 + i % kPubends, &storm_handlers[i], true));
    }
    s.Start();
    s.AwaitConnected(steady, s.clients.get());
    s.AwaitConnected(storm, s.other_clients.get());
    // The storm's subscriptions leave; what is published meanwhile is their backlog.
    s.other_clients->Call([&] {
      for (DurableSubscriber* d : storm) (void)d->Disconnect();
    });
    std::function<void()> stop = s.PublishAtRate(kRate, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // warm
    auto delivered = [&] {
      uint64_t n = 0;
      for (const auto& h : steady_handlers) n += h.events.load(std::memory_order_relaxed);
      return n;
    };
    auto measure = [&](Histogram* latency, const std::function<void()>& at_start) {
      s.clients->Call([&] {
        for (auto& h : steady_handlers) h.latency = latency;
        at_start();
      });
      const uint64_t before = delivered();
      const auto t0 = Clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(ctx.seconds));
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      return static_cast<double>(delivered() - before) / secs;
    };
    steady_rate = measure(&steady_latency, [] {});
    storm_rate = measure(&storm_latency, [&] {
      s.other_clients->Post([&] {
        for (DurableSubscriber* d : storm) (void)d->Connect();  // from their old CTs
      });
    });
    s.clients->Call([&] {
      for (auto& h : steady_handlers) h.record_latency = false;
    });
    s.other_clients->Call([&] {
      for (DurableSubscriber* d : storm) storm_caught_up += d->connected() ? 1 : 0;
    });
    stop();
    s.other_clients->Shutdown();
    s.clients->Shutdown();
    s.brokers->Shutdown();
  }
  uint64_t storm_events = 0;
  for (const auto& h : storm_handlers) storm_events += h.events.load();
  Report("reconnect_storm")
      .Add("steady_subscribers", int64_t{kSteady})
      .Add("reconnecting", int64_t{kStorm})
      .Add("offered_per_s", kRate)
      .Add("steady_deliveries_per_s", steady_rate)
      .Add("storm_deliveries_per_s", storm_rate)
      .Add("steady_p99_us", steady_latency.Percentile(99))
      .Add("storm_p99_us", storm_latency.Percentile(99))
      .Add("storm_connected", static_cast<int64_t>(storm_caught_up))
      .Add("storm_events_delivered", static_cast<int64_t>(storm_events))
      .Print();
}

GRYPH_WORKLOAD(e2e_latency) { LatencyWorkload(ctx, "e2e_latency", kSubscribers); }

namespace {

#if defined(__linux__)
// One wake-up every 200 us: the sender signals, the sleeping receiver notes how long it took to
// run. Threads pinned to `sender_cpu` and `receiver_cpu`. Returns the latencies in us.
Histogram WakeLatencies(int sender_cpu, int receiver_cpu, int wakes) {
  auto pin = [](int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  };
  absl::Mutex mu;
  absl::CondVar signalled;
  uint64_t sent = 0;          // guarded by mu
  Clock::time_point sent_at;  // guarded by mu
  bool stop = false;          // guarded by mu
  Histogram latency;
  latency.Reserve(static_cast<size_t>(wakes));
  std::thread receiver([&] {
    pin(receiver_cpu);
    uint64_t seen = 0;
    absl::MutexLock lock(&mu);
    for (;;) {
      while (sent == seen && !stop) signalled.Wait(&mu);
      if (stop) return;
      seen = sent;
      latency.Add(std::chrono::duration<double, std::micro>(Clock::now() - sent_at).count());
    }
  });
  pin(sender_cpu);
  for (int i = 0; i < wakes; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    absl::MutexLock lock(&mu);
    ++sent;
    sent_at = Clock::now();
    signalled.Signal();
  }
  {
    absl::MutexLock lock(&mu);
    stop = true;
    signalled.Signal();
  }
  receiver.join();
  return latency;
}
#endif

}  // namespace

// What one hop between threads costs on this machine: a thread waking one that sleeps on the
// other CPU, and on its own. Every step of the e2e path after the PHB's fsync is such a hop (the
// commit thread, the brokers' thread, the subscribers' thread). On a VM whose idle CPUs halt
// (no guest halt polling), a sleeping CPU takes tens of microseconds to wake.
GRYPH_WORKLOAD(thread_wake_latency) {
#if defined(__linux__)
  const int wakes = std::max(1000, static_cast<int>(ctx.seconds * 4000));
  // On one CPU there is no other: the "cross" figure is then the same-CPU one.
  Histogram cross = WakeLatencies(0, std::thread::hardware_concurrency() > 1 ? 1 : 0, wakes);
  Histogram same = WakeLatencies(0, 0, wakes);
  Report("thread_wake_latency")
      .Add("cross_cpu_p50_us", cross.Percentile(50))
      .Add("cross_cpu_p99_us", cross.Percentile(99))
      .Add("same_cpu_p50_us", same.Percentile(50))
      .Print();
#else
  (void)ctx;
#endif
}
// The same with 40 subscribers (each event matches 10): 100,000 deliveries per second instead
// of 1,000,000, so that the CPU the deliveries take on this machine leaves the path alone.
GRYPH_WORKLOAD(e2e_latency_fanout10) { LatencyWorkload(ctx, "e2e_latency_fanout10", 40); }

GRYPH_WORKLOAD(shb_steady) { Workload(ctx, "shb_steady", Mode::kSteady); }
GRYPH_WORKLOAD(shb_churn) { Workload(ctx, "shb_churn", Mode::kChurn); }
GRYPH_WORKLOAD(shb_all_catchup) { Workload(ctx, "shb_all_catchup", Mode::kAllCatchup); }

}  // namespace gryph::bench
