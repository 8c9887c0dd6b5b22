// trading_demo: gryph's main demo — durable, content-based order flow with faults, checked.
//
// A publisher hosting broker with 4 pubends publishes orders (symbol, side, price, quantity,
// account) at a steady rate. A subscriber hosting broker serves 200 durable subscribers with
// realistic JMS selectors. While it runs, subscribers disconnect and reconnect at random, one
// subscriber stays away long enough for the retention policy (maxRetain) to discard what it
// missed, and the subscriber hosting broker crashes and restarts in the middle. At the end every
// subscriber's messages are checked against the pubends' logs: exactly once, in order, with a
// Gap only where the retention policy discarded events — or the program exits non-zero.
//
// Everything is embedded: LMDB under a temporary directory (kept with --data_dir), the
// in-process channel, no configuration. `trading_demo --help` lists the flags.
//
// The progress line on stderr is rewritten every second; the crash, the long absence, the Gap
// it earns and the return are printed as lines of their own when they happen. SIGTERM or SIGINT
// ends publishing early: the demo lets the subscribers catch up, prints its summary and verdict
// and removes its temporary directory (a second signal skips the catching up and the check).
// --json=FILE writes the run as JSON lines, one per second, for plotting
// (scripts/plot-demo-timeline turns them into an SVG).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "gryph/durable_subscriber.h"
#include "gryph/in_process_channel.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/storage.h"
#include "gryph/subscriber_hosting_broker.h"
#include "gryph/testing/exactly_once_checker.h"

ABSL_FLAG(double, duration, 20, "seconds of publishing");
ABSL_FLAG(double, rate, 2000, "orders published per second, over all pubends");
ABSL_FLAG(int, subscribers, 200, "durable subscribers");
ABSL_FLAG(std::string, data_dir, "", "where LMDB keeps its files; default: a temp dir, removed");
ABSL_FLAG(double, max_retain, 3, "seconds a pubend keeps events for absent subscribers");
ABSL_FLAG(uint64_t, seed, 1, "seed for selectors, orders and faults");
ABSL_FLAG(
    std::string, json, "",
    "write the timeline here as JSON lines, one per second (t, publishing, published, delivered, "
    "deliveries_per_s, catching_up, connected, p50_ms, p99_ms, and marks: what happened when)");

namespace {

using namespace gryph;  // NOLINT: an example reads better without the prefix
using Clock = std::chrono::steady_clock;

constexpr int kPubends = 4;
const char* const kSymbols[] = {"IBM", "MSFT", "AAPL", "GOOG", "AMZN", "ORCL", "INTC", "CSCO"};
const char* const kAccounts[] = {"HF-ALPHA", "HF-BETA", "PB-001", "PB-002", "RETAIL-7", "MM-3"};

// SIGTERM and SIGINT received so far: the first ends publishing, the second the catching up.
volatile std::sig_atomic_t g_signals = 0;
extern "C" void OnSignal(int) { g_signals = g_signals + 1; }

// A subscriber application: the messages it consumed (its "database") and its latencies.
struct App : DurableSubscriber::Handler {
  std::string name;
  std::string selector;
  std::unique_ptr<Channel> channel;
  std::unique_ptr<DurableSubscriber> ds;
  bool started = false;
  bool away = false;
  Clock::time_point back_at;
  CheckpointToken start;
  CheckpointToken high_water;
  bool well_behaved = true;
  std::map<PubendId, std::vector<ExactlyOnceChecker::Consumed>> consumed;
  std::map<PubendId, std::vector<double>> latency_us;
  std::vector<double>* second_latency_us = nullptr;  // the current second's, for the timeline
  uint64_t gaps = 0;
  uint64_t connects = 0;  // Connected answers received

  void Record(PubendId p, DeliveryKind k, Tick t, EventRef e) {
    high_water.Set(p, std::max(high_water.Get(p), t));
    consumed[p].push_back({k, t, std::move(e)});
  }
  void OnEvent(PubendId p, Tick t, const EventRef& e) override {
    const auto* ts = std::get_if<int64_t>(e->Find("published_us"));
    if (ts != nullptr) {
      const double us = static_cast<double>(absl::ToUnixMicros(absl::Now()) - *ts);
      latency_us[p].push_back(us);
      second_latency_us->push_back(us);
    }
    Record(p, DeliveryKind::kEvent, t, e);
  }
  void OnSilence(PubendId p, Tick t) override { Record(p, DeliveryKind::kSilence, t, nullptr); }
  void OnGap(PubendId p, Tick t) override {
    ++gaps;
    Record(p, DeliveryKind::kGap, t, nullptr);
  }
  void OnConnected(const CheckpointToken& s) override {
    if (!started) start = s;
    started = true;
    ++connects;
  }
  void OnError(const absl::Status&) override {}  // the main loop reconnects
};

std::string MakeSelector(std::mt19937_64& rng) {
  auto pick = [&](auto& arr) { return arr[rng() % std::size(arr)]; };
  switch (rng() % 6) {
    case 0:
      return absl::StrCat("symbol IN ('", pick(kSymbols), "','", pick(kSymbols),
                          "') AND quantity > ", 500 + rng() % 1000);
    case 1: return "account LIKE 'HF-%'";
    case 2: return absl::StrCat("side = 'BUY' AND price > ", 100 + rng() % 80);
    case 3: return absl::StrCat("symbol = '", pick(kSymbols), "'");
    case 4:
      return absl::StrCat("quantity BETWEEN ", 100 * (1 + rng() % 5), " AND ",
                          1000 * (1 + rng() % 3), " AND side = 'SELL'");
    default:
      return absl::StrCat("account = '", pick(kAccounts), "' OR (symbol = '", pick(kSymbols),
                          "' AND price < 120)");
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100 * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gryph's demo: durable content-based order flow with subscriber churn, a broker crash and "
      "a retention Gap, checked for exactly-once delivery.");
  absl::ParseCommandLine(argc, argv);
  const double duration = absl::GetFlag(FLAGS_duration);
  const int subscriber_count = std::max(1, absl::GetFlag(FLAGS_subscribers));
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::string dir = absl::GetFlag(FLAGS_data_dir);
  const bool keep = !dir.empty();
  if (!keep) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gryph-demo-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return 1;
    dir = tmpl;
  }
  std::FILE* json = nullptr;
  if (!absl::GetFlag(FLAGS_json).empty()) {
    json = std::fopen(absl::GetFlag(FLAGS_json).c_str(), "w");
    if (json == nullptr) {
      std::fprintf(stderr, "--json: cannot write %s\n", absl::GetFlag(FLAGS_json).c_str());
      return 2;
    }
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  auto open = [&](const std::string& name) {
    StorageOptions so;
    so.path = dir + "/" + name;
    std::filesystem::create_directories(so.path);
    absl::StatusOr<std::unique_ptr<Storage>> s = OpenLmdbStorage(so);
    if (!s.ok()) {
      std::fprintf(stderr, "opening %s: %s\n", so.path.c_str(), s.status().ToString().c_str());
      std::exit(1);
    }
    return *std::move(s);
  };

  // The publisher hosting broker: 4 pubends, group commit on its own thread.
  InProcessNetwork net;
  std::unique_ptr<Storage> phb_storage = open("phb");
  std::unique_ptr<Channel> phb_channel = *net.Connect("phb");
  PublisherHostingBrokerOptions po;
  for (int i = 1; i <= kPubends; ++i) {
    PubendOptions p{PubendId{static_cast<uint32_t>(i)}};
    p.max_retain = absl::Seconds(absl::GetFlag(FLAGS_max_retain));
    po.pubends.push_back(p);
  }
  po.downstream = {"shb"};
  po.group_commit.max_delay = absl::ZeroDuration();
  auto phb = *PublisherHostingBroker::Open(std::move(po), phb_storage.get(), phb_channel.get());

  // The subscriber hosting broker, which the demo crashes and reopens.
  std::unique_ptr<Storage> shb_storage;
  std::unique_ptr<Channel> shb_channel;
  std::unique_ptr<SubscriberHostingBroker> shb;
  auto open_shb = [&] {
    shb_storage = open("shb");
    shb_channel = *net.Connect("shb");
    SubscriberHostingBrokerOptions so;
    for (int i = 1; i <= kPubends; ++i)
      so.pubends.push_back({PubendId{static_cast<uint32_t>(i)}, "phb"});
    so.event_cache_ticks = 1'000'000;  // 1 s of events cached for catchups; older ones are nacked
    so.commit_thread = true;  // fsyncs off the delivery loop, which polls for their completion
    shb = *SubscriberHostingBroker::Open(std::move(so), shb_storage.get(), shb_channel.get());
  };
  open_shb();

  std::vector<std::unique_ptr<App>> apps;
  std::vector<double> second_latency_us;
  for (int i = 0; i < subscriber_count; ++i) {
    auto app = std::make_unique<App>();
    app->second_latency_us = &second_latency_us;
    app->name = absl::StrCat("sub-", i);
    app->selector = i == 0 ? "account LIKE 'HF-%'" : MakeSelector(rng);
    app->channel = *net.Connect(absl::StrCat("client-", i));
    DurableSubscriberOptions o;
    o.subscription = app->name;
    o.selector = app->selector;
    o.broker = "shb";
    app->ds = *DurableSubscriber::Create(o, app->channel.get(), app.get());
    DurableSubscriber* ds = app->ds.get();
    app->channel->SetReceiver(
        [ds](absl::string_view from, Message m) { ds->HandleMessage(from, m); });
    (void)ds->Connect();
    apps.push_back(std::move(app));
  }

  // The publishing application: orders keyed by account, each with its publish time.
  std::atomic<bool> publishing{true};
  std::atomic<uint64_t> published{0};
  absl::Mutex log_mu;
  ExactlyOnceChecker checker;
  std::map<PubendId, uint64_t> published_per_pubend;
  std::thread publisher([&] {
    std::mt19937_64 orng(absl::GetFlag(FLAGS_seed) * 7919);
    const auto interval = std::chrono::duration<double>(1.0 / absl::GetFlag(FLAGS_rate));
    const auto start = Clock::now();
    for (uint64_t seq = 1; publishing; ++seq) {
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Clock::duration>(interval * static_cast<double>(seq)));
      Event e;
      const char* account = kAccounts[orng() % std::size(kAccounts)];
      e.SetTopic("orders")
          .SetString("symbol", kSymbols[orng() % std::size(kSymbols)])
          .SetString("side", orng() % 2 ? "BUY" : "SELL")
          .SetDouble("price", 80 + static_cast<double>(orng() % 12000) / 100)
          .SetInt64("quantity", static_cast<int64_t>(100 * (1 + orng() % 30)))
          .SetString("account", account)
          .SetInt64("published_us", absl::ToUnixMicros(absl::Now()))
          .SetPayload(std::string(200, 'o'));
      EventRef ref = MakeEventRef(std::move(e));
      const PubendId p = PubendForKey(account, phb->pubend_ids());
      phb->Publish(p, "order-gateway", seq, ref, [&, p, ref](absl::StatusOr<Tick> t) {
        if (!t.ok()) return;
        absl::MutexLock l(&log_mu);
        checker.Logged(p, *t, ref);
        ++published_per_pubend[p];
        ++published;
      });
    }
  });

  // The event loop: deliver messages, run timers, inject faults, show progress.
  const auto begin = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - begin).count(); };
  bool crashed = false;
  bool long_absent_gone = false;
  bool long_absent_back = false;
  int crashes = 0;
  uint64_t catchups_before_crash = 0;
  auto last_timer = Clock::now();
  auto last_progress = Clock::now();
  auto last_fault = Clock::now();
  uint64_t last_delivered = 0;
  auto delivered = [&] {
    uint64_t n = 0;
    for (auto& a : apps) {
      for (auto& [p, v] : a->latency_us) n += v.size();
    }
    return n;
  };
  auto settled = [&] {
    for (int i = 1; i <= kPubends; ++i) {
      Pubend* pe = phb->pubend(PubendId{static_cast<uint32_t>(i)});
      if (shb->latest_delivered(pe->id()) < pe->committed_tick()) return false;
    }
    for (auto& a : apps) {
      if (!a->ds->connected()) return false;
    }
    return shb->catching_up() == 0 && net.pending() == 0;
  };
  // Marks: what happened, on a line of its own (the progress line is rewritten in place), and in
  // the timeline's next line.
  std::vector<std::pair<double, std::string>> marks;
  auto mark = [&](double t, const std::string& key, const std::string& text) {
    std::fprintf(stderr, "\r[%5.1fs] %-78s\n", t, text.c_str());
    marks.emplace_back(t, key);
  };
  double stopped_at = duration;  // when publishing ended
  double crashed_at = -1;        // when the SHB crashed, until everyone has caught up again
  std::map<PubendId, Tick> committed_at_crash;
  std::vector<uint64_t> connects_at_crash;
  double absent_since = 0;        // when apps[0] went away
  double absent_for = 0;          // and for how long
  uint64_t long_absent_gaps = 0;  // Gaps of apps[0] already marked
  bool interrupted = false;       // a second signal: no catching up, no check
  bool more = false;              // the SHB's catchups have more to send at once
  for (;;) {
    const double t = elapsed();
    if (g_signals > 0 && publishing) {
      stopped_at = t;
      mark(t, "stop", "signal: publishing stops; catching up, then the summary");
      long_absent_back = long_absent_gone;  // the long-absent subscriber returns now
    }
    if (g_signals > 1) {
      interrupted = true;
      break;
    }
    if (t >= stopped_at && publishing) publishing = false;
    if (!publishing && (settled() || t > stopped_at + 30)) break;
    if (net.Deliver(10'000) == 0 && !more)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    more = shb->Flush();  // one commit for whatever knowledge the batch brought
    const auto now = Clock::now();
    if (now - last_timer >= std::chrono::milliseconds(5)) {
      last_timer = now;
      const absl::Time wall = absl::Now();
      phb->OnTimer(wall);
      shb->OnTimer(wall);
      for (auto& a : apps) {
        if (a->away && now >= a->back_at && !(a.get() == apps[0].get() && !long_absent_back)) {
          a->away = false;
          if (a.get() == apps[0].get()) {
            absent_for = t - absent_since;
            mark(
                t, "return",
                absl::StrCat(a->name, " returns after ", std::lround(t - absent_since), " s away"));
          }
        }
        if (!a->away && !a->ds->connected()) (void)a->ds->Connect();
        a->ds->OnTimer(wall);
      }
    }
    // Faults, while publishing: churn, one long absence, one broker crash.
    if (publishing && now - last_fault >= std::chrono::milliseconds(250)) {
      last_fault = now;
      for (size_t i = 1; i < apps.size(); ++i) {
        App& a = *apps[i];
        if (!a.away && rng() % 100 == 0) {
          a.away = true;
          a.well_behaved = false;
          a.back_at = now + std::chrono::milliseconds(300 + rng() % 2000);
          (void)a.ds->Disconnect();
        }
      }
    }
    if (!long_absent_gone && t > duration * 0.1 && publishing) {
      long_absent_gone = true;
      apps[0]->away = true;
      apps[0]->well_behaved = false;
      (void)apps[0]->ds->Disconnect();
      absent_since = t;
      mark(t, "absence",
           absl::StrCat(apps[0]->name, " goes away for ", std::lround(duration * 0.65),
                        " s, past maxRetain (", absl::GetFlag(FLAGS_max_retain), " s)"));
    }
    if (apps[0]->gaps > long_absent_gaps) {
      long_absent_gaps = apps[0]->gaps;
      mark(t, "gap",
           absl::StrCat(apps[0]->name, " gets a Gap (", long_absent_gaps,
                        " so far): retention discarded what it missed"));
    }
    if (long_absent_gone && !long_absent_back && t > duration * 0.75) long_absent_back = true;
    if (!crashed && t > duration * 0.5 && publishing) {
      crashed = true;
      crashed_at = t;
      for (int i = 1; i <= kPubends; ++i) {
        const PubendId p{static_cast<uint32_t>(i)};
        committed_at_crash[p] = phb->pubend(p)->committed_tick();
      }
      connects_at_crash.clear();
      for (auto& a : apps) connects_at_crash.push_back(a->connects);
      mark(t, "crash", "the subscriber hosting broker crashes and reopens its store");
      ++crashes;
      catchups_before_crash = shb->stats().catchups_started;
      for (auto& a : apps) a->well_behaved = false;  // every session breaks
      shb.reset();  // the crash: memory gone, only what was committed survives
      shb_channel.reset();
      shb_storage.reset();
      open_shb();
    }
    // Recovered: the SHB has heard everything committed before the crash, and every subscriber
    // not away has connected again and caught up.
    auto recovered = [&] {
      for (auto& [p, tick] : committed_at_crash) {
        if (shb->latest_delivered(p) < tick) return false;
      }
      for (size_t i = 0; i < apps.size(); ++i) {
        if (!apps[i]->away && apps[i]->connects == connects_at_crash[i]) return false;
      }
      return shb->catching_up() == 0;
    };
    if (crashed_at >= 0 && recovered()) {
      mark(t, "recovered",
           absl::StrCat("every connected subscriber has caught up, ",
                        absl::StrFormat("%.1f", t - crashed_at), " s after the crash"));
      crashed_at = -1;
    }
    if (now - last_progress >= std::chrono::seconds(1)) {
      const uint64_t d = delivered();
      const double rate = static_cast<double>(d - last_delivered) /
                          std::chrono::duration<double>(now - last_progress).count();
      size_t connected = 0;
      for (auto& a : apps) connected += a->ds->connected() ? 1 : 0;
      std::fprintf(
          stderr,
          "\r[%5.1fs] published %8llu  delivered %9llu  catching up %3zu  %8.0f deliveries/s ", t,
          static_cast<unsigned long long>(published.load()), static_cast<unsigned long long>(d),
          shb->catching_up(), rate);
      if (json != nullptr) {
        std::fprintf(
            json,
            "{\"t\": %.1f, \"publishing\": %s, \"published\": %llu, \"delivered\": %llu, "
            "\"deliveries_per_s\": %.0f, \"catching_up\": %zu, \"connected\": %zu, "
            "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"marks\": [%s]}\n",
            t, publishing ? "true" : "false", static_cast<unsigned long long>(published.load()),
            static_cast<unsigned long long>(d), rate, shb->catching_up(), connected,
            Percentile(second_latency_us, 50) / 1000, Percentile(second_latency_us, 99) / 1000,
            absl::StrJoin(marks, ", ",
                          [](std::string* out, const std::pair<double, std::string>& m) {
                            absl::StrAppend(out, absl::StrFormat("{\"at\": %.1f, ", m.first),
                                            "\"what\": \"", m.second, "\"}");
                          })
                .c_str());
        std::fflush(json);
      }
      marks.clear();
      second_latency_us.clear();
      last_progress = now;
      last_delivered = d;
    }
  }
  publishing = false;
  publisher.join();
  std::fprintf(stderr, "\n");

  // The verdict.
  for (int i = 1; i <= kPubends; ++i) {
    const PubendId p{static_cast<uint32_t>(i)};
    checker.AddPubend(p);
    checker.Released(p, phb->pubend(p)->l_prefix());
  }
  std::map<PubendId, uint64_t> delivered_per;
  std::map<PubendId, uint64_t> gaps_per;
  std::map<PubendId, std::vector<double>> lat_per;
  std::vector<double> lat_all;
  for (auto& a : apps) {
    checker.AddSubscriber({a->name, *Subscription::Create(a->selector), a->start, a->high_water,
                           a->well_behaved, a->consumed});
    for (auto& [p, list] : a->consumed) {
      for (auto& c : list) {
        if (c.kind == DeliveryKind::kEvent) ++delivered_per[p];
        if (c.kind == DeliveryKind::kGap) ++gaps_per[p];
      }
    }
    for (auto& [p, v] : a->latency_us) {
      lat_per[p].insert(lat_per[p].end(), v.begin(), v.end());
      lat_all.insert(lat_all.end(), v.begin(), v.end());
    }
  }
  const uint64_t total_published = published.load();
  const double phb_bytes = static_cast<double>(phb_storage->ApproximateBytesUsed().value_or(0));
  const double shb_bytes = static_cast<double>(shb_storage->ApproximateBytesUsed().value_or(0));
  const uint64_t pfs_records = shb->stats().pfs_records;
  std::printf(
      "\ngryph trading demo: %d pubends, %d durable subscribers, %.0f s at %.0f orders/s, "
      "%d broker crash, data in %s%s\n\n",
      kPubends, subscriber_count, stopped_at, absl::GetFlag(FLAGS_rate), crashes, dir.c_str(),
      keep ? "" : " (removed)");
  std::printf("  %-8s %10s %11s %6s %10s %10s\n", "pubend", "published", "delivered", "gaps",
              "p50 ms", "p99 ms");
  for (int i = 1; i <= kPubends; ++i) {
    const PubendId p{static_cast<uint32_t>(i)};
    std::printf("  %-8u %10llu %11llu %6llu %10.2f %10.2f\n", i,
                static_cast<unsigned long long>(published_per_pubend[p]),
                static_cast<unsigned long long>(delivered_per[p]),
                static_cast<unsigned long long>(gaps_per[p]), Percentile(lat_per[p], 50) / 1000,
                Percentile(lat_per[p], 99) / 1000);
  }
  uint64_t gaps_total = 0;
  for (auto& [p, g] : gaps_per) gaps_total += g;
  uint64_t delivered_total = 0;
  for (auto& [p, d] : delivered_per) delivered_total += d;
  std::printf("  %-8s %10llu %11llu %6llu %10.2f %10.2f\n", "all",
              static_cast<unsigned long long>(total_published),
              static_cast<unsigned long long>(delivered_total),
              static_cast<unsigned long long>(gaps_total), Percentile(lat_all, 50) / 1000,
              Percentile(lat_all, 99) / 1000);
  std::printf(
      "  (latency from publish to the subscriber's handler; the p99 includes orders delivered\n"
      "   on catch-up after a subscriber's absence or the broker's crash)\n");
  std::printf(
      "\n  catchups: %llu (subscribers that reconnected behind the constream and caught up "
      "from the PFS)\n",
      static_cast<unsigned long long>(catchups_before_crash + shb->stats().catchups_started));
  std::printf(
      "\n  PHB store: %.0f bytes per published event (events are logged once, released ones "
      "reclaimed)\n",
      total_published ? phb_bytes / static_cast<double>(total_published) : 0.0);
  std::printf(
      "  SHB store: %.0f bytes per PFS record (%llu records, with subscriptions and positions)\n",
      pfs_records ? shb_bytes / static_cast<double>(pfs_records) : 0.0,
      static_cast<unsigned long long>(pfs_records));
  std::printf("  long-absent subscriber %s (away %.0f s, maxRetain %.0f s): %llu Gap(s)\n",
              apps[0]->name.c_str(), long_absent_gone ? absent_for : 0.0,
              absl::GetFlag(FLAGS_max_retain), static_cast<unsigned long long>(apps[0]->gaps));
  if (json != nullptr) std::fclose(json);
  if (interrupted) {
    if (!keep) std::filesystem::remove_all(dir);
    std::printf("\n  exactly-once check: skipped (interrupted again before catching up)\n");
    return 128 + SIGINT;
  }
  const std::vector<std::string> bad = checker.Check();
  if (!keep) std::filesystem::remove_all(dir);
  if (!bad.empty()) {
    std::printf("\n  exactly-once check: VIOLATED\n");
    for (const std::string& b : bad) std::printf("    %s\n", b.c_str());
    return 1;
  }
  std::printf(
      "\n  exactly-once check: every subscriber got every matching order exactly once, in order;\n"
      "  Gaps only where the retention policy discarded what a subscriber never acknowledged.\n");
  return 0;
}
