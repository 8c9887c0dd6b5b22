// restart: how long a broker takes, from opening its storage to serving again, as its state grows.
//
// SHB: 10^4, 10^5 and 10^6 durable subscriptions with content selectors (content_world.h, the
// match_content mix), each registered at 4 pubends, with 10^6 and then 10^7 PFS records spread
// over those pubends (10 subscribers per record). Serving: a subscriber of an existing
// subscription connects (its CT at latestDelivered) and has its Connected answer.
// PHB: one pubend retaining 10^6 and then 10^7 events of 100-byte payloads, published by 10^5
// publishers (its idempotence table). Serving: the next publish (sync durability) of one of those
// publishers acknowledged.
//
// The state is written once per size through the brokers' own code (the PFS, the pubend) and
// their row encodings, without fsync, then flushed (sync(2)); each figure opens it anew (a
// process restart on a warm page cache; the SHB opens in a forked process, on a fresh heap).
// Keys, one line per state size:
//   role, subscriptions, pfs_records, retained_events, publishers, pubends, runs, recovery_threads
//   (the SHB option, --restart_recovery_threads), stored_programs (--restart_stored_programs:
//   whether the rows hold their selectors' programs, as the broker writes them, or only the texts);
//   open_ms: from opening the storage to serving (the median of `runs` opens);
//   storage_ms (opening LMDB), recover_ms (the broker's Open) and serve_ms (the first Connected or
//   acknowledgement), which add up to open_ms;
//   the broker's own split of its recovery (SubscriberHostingBroker::Recovery, PubendRecovery):
//   SHB pfs_ms (lastIndex and the tail of every pubend's PFS), subscriptions_ms (reading the
//   rows), selectors_ms (decoding or parsing them), positions_ms, matcher_ms; PHB log_ms,
//   release_table_ms (the publisher sequences are read per publisher at its first publish, in
//   serve_ms for the probe's); rss_mb (the opening process's resident set after the open), store_mb
//   (data.mdb), generate_s (writing the state).

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "benchmarks/content_world.h"
#include "benchmarks/workload.h"
#include "gryph/broker/pfs.h"
#include "gryph/durable_subscriber.h"
#include "gryph/in_process_channel.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/selector.h"
#include "gryph/storage.h"
#include "gryph/subscriber_hosting_broker.h"
#include "lib/shb/shb_keys.h"

ABSL_FLAG(std::string, restart_subscriptions, "10000,100000,1000000",
          "restart: the SHB subscription counts, comma-separated");
ABSL_FLAG(std::string, restart_pfs_records, "1000000,10000000",
          "restart: the SHB PFS record counts (ascending), comma-separated");
ABSL_FLAG(std::string, restart_recovery_threads, "2",
          "restart: the SHB's recovery_threads, comma-separated (a line for each, interleaved)");
ABSL_FLAG(bool, restart_stored_programs, true,
          "restart: the SHB rows store their selectors' programs, as the broker writes them "
          "(false: as rows written before that, whose selectors an open parses)");
ABSL_FLAG(std::string, restart_retained_events, "1000000,10000000",
          "restart: the PHB retained event counts (ascending), comma-separated");

namespace gryph::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPubends = 4;
constexpr int kSubscribersPerRecord = 10;
constexpr Tick kTickSpacing = 10;
constexpr uint64_t kPublishers = 100'000;
constexpr size_t kPayloadBytes = 100;
constexpr uint64_t kSelectorSeed = 11;

template <typename T>
T Check(absl::StatusOr<T> v, absl::string_view what) {
  if (!v.ok()) {
    std::fprintf(stderr, "restart: %.*s: %s\n", static_cast<int>(what.size()), what.data(),
                 v.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(v);
}
void Check(const absl::Status& s, absl::string_view what) {
  if (!s.ok()) Check(absl::StatusOr<int>(s), what);
}

std::vector<uint64_t> Counts(const std::string& flag) {
  std::vector<uint64_t> counts;
  for (absl::string_view w : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(w, &n) || n == 0) {
      std::fprintf(stderr, "restart: bad count '%.*s'\n", static_cast<int>(w.size()), w.data());
      std::exit(2);
    }
    counts.push_back(n);
  }
  return counts;
}

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Millis(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

std::unique_ptr<Storage> OpenStore(const std::string& dir, Durability durability) {
  StorageOptions so;
  so.path = dir;
  so.durability = durability;
  so.initial_map_bytes = uint64_t{1} << 30;
  return Check(OpenLmdbStorage(so), "OpenLmdbStorage");
}

double StoreMb(const std::string& dir) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(dir + "/data.mdb", ec);
  return ec ? 0 : static_cast<double>(bytes) / (1 << 20);
}

double RssMb() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages = 0;
  long resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * 4096.0 / (1 << 20) : 0;
}

PubendId PubendOf(int k) { return PubendId{static_cast<uint32_t>(k + 1)}; }

// ---- SHB ---------------------------------------------------------------------------------------

// Writes `subscriptions` subscriptions (ids 1..n), registered at every pubend, as the SHB stores
// them. The PFS records come after (AppendRecords).
void WriteSubscriptions(const std::string& dir, uint64_t subscriptions) {
  std::unique_ptr<Storage> storage = OpenStore(dir, Durability::kNoSync);
  ContentWorld world(kSelectorSeed);
  std::vector<std::unique_ptr<PFS>> pfs;
  for (int k = 0; k < kPubends; ++k) {
    PfsOptions po;
    po.pubend = PubendOf(k);
    pfs.push_back(Check(PFS::Open(po, storage.get()), "PFS::Open"));
  }
  WriteBatch batch;
  auto commit = [&] {
    Check(storage->Commit(batch), "Commit");
    batch.Clear();
  };
  for (uint64_t id = 1; id <= subscriptions; ++id) {
    const std::string selector = world.Selector();
    const std::string program =
        absl::GetFlag(FLAGS_restart_stored_programs)
            ? Check(Selector::Parse(selector), "Selector::Parse").EncodeProgram()
            : std::string();
    batch.Put(internal::kShbSubscriptionsTable, absl::StrCat("sub-", id),
              internal::EncodeSubscriptionRow({id, 1, selector, "", program}));
    for (int k = 0; k < kPubends; ++k) {
      Check(pfs[k]->AddSubscriber(SubscriberId{id}, &batch), "AddSubscriber");
      batch.Put(internal::kShbPositionsTable, internal::PositionKey(SubscriberId{id}, PubendOf(k)),
                internal::EncodePositionRow({0, 0}));
    }
    if (id % 20'000 == 0) commit();
  }
  batch.Put(internal::kShbMetaTable, internal::kShbNextIdKey,
            internal::EncodeNextId(subscriptions + 1));
  commit();
}

// Appends PFS records until the pubends hold `total` of them together, each naming 10 random
// subscribers, and moves latestDelivered to the last.
void AppendRecords(const std::string& dir, uint64_t subscriptions, uint64_t from, uint64_t total) {
  std::unique_ptr<Storage> storage = OpenStore(dir, Durability::kNoSync);
  Rand r(from + 7);
  std::vector<SubscriberId> set;
  for (int k = 0; k < kPubends; ++k) {
    PfsOptions po;
    po.pubend = PubendOf(k);
    std::unique_ptr<PFS> pfs = Check(PFS::Open(po, storage.get()), "PFS::Open");
    Tick t = pfs->last_timestamp();
    WriteBatch batch;
    for (uint64_t i = from / kPubends; i < total / kPubends; ++i) {
      set.clear();
      for (int j = 0; j < kSubscribersPerRecord; ++j) {
        set.push_back(SubscriberId{1 + r.Uniform(subscriptions)});
      }
      std::sort(set.begin(), set.end());
      set.erase(std::unique(set.begin(), set.end()), set.end());
      t += kTickSpacing;
      Check(pfs->Write(t, set, &batch), "PFS::Write");
      if (i % 10'000 == 9'999) {
        Check(pfs->Commit(batch), "PFS::Commit");
        batch.Clear();
      }
    }
    batch.Put(internal::kShbDeliveredTable, internal::DeliveredKey(po.pubend),
              internal::EncodeDeliveredRow({t, t}));
    Check(pfs->Commit(batch), "PFS::Commit");
  }
}

struct ShbOpen {
  double open_ms = 0;
  double storage_ms = 0;
  double recover_ms = 0;
  double serve_ms = 0;
  double rss_mb = 0;  // the opening process's resident set, once serving
  SubscriberHostingBroker::Recovery recovery;
};

struct NoHandler : DurableSubscriber::Handler {
  void OnEvent(PubendId, Tick, const EventRef&) override {}
  void OnGap(PubendId, Tick) override {}
  void OnError(const absl::Status& st) override { Check(st, "subscriber"); }
};

ShbOpen OpenShb(const std::string& dir, uint64_t recovery_threads) {
  ShbOpen r;
  InProcessNetwork net;
  std::unique_ptr<Channel> channel = Check(net.Connect("shb"), "Connect");
  std::unique_ptr<Channel> sub_channel = Check(net.Connect("client"), "Connect");
  const auto start = Clock::now();
  std::unique_ptr<Storage> storage = OpenStore(dir, Durability::kSync);
  const auto opened = Clock::now();
  SubscriberHostingBrokerOptions so;
  for (int k = 0; k < kPubends; ++k) so.pubends.push_back({PubendOf(k), "phb"});
  so.commit_thread = true;
  so.recovery_threads = recovery_threads;
  std::unique_ptr<SubscriberHostingBroker> shb =
      Check(SubscriberHostingBroker::Open(so, storage.get(), channel.get()), "SHB Open");
  const auto recovered = Clock::now();
  // Subscription 1, resuming where the broker is.
  CheckpointToken ct;
  for (int k = 0; k < kPubends; ++k) ct.Set(PubendOf(k), shb->latest_delivered(PubendOf(k)));
  DurableSubscriberOptions o;
  o.subscription = "sub-1";
  o.selector = ContentWorld(kSelectorSeed).Selector();  // sub-1's (WriteSubscriptions)
  o.broker = "shb";
  o.checkpoint = ct;
  o.epoch = 2;
  NoHandler handler;
  std::unique_ptr<DurableSubscriber> ds =
      Check(DurableSubscriber::Create(o, sub_channel.get(), &handler), "DurableSubscriber");
  sub_channel->SetReceiver(
      [&ds](absl::string_view from, Message m) { ds->HandleMessage(from, m); });
  Check(ds->Connect(), "Connect");
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!ds->connected() && Clock::now() < deadline) {
    net.DeliverAll();
    shb->Flush();
  }
  if (!ds->connected()) Check(absl::DeadlineExceededError("no Connected"), "serving");
  const auto served = Clock::now();
  r.open_ms = Millis(served - start);
  r.storage_ms = Millis(opened - start);
  r.recover_ms = Millis(recovered - opened);
  r.serve_ms = Millis(served - recovered);
  r.recovery = shb->recovery();
  return r;
}

// OpenShb in a child process, as a restart is: on a fresh heap, whose pages are faulted in anew
// (a second open in one process reuses what the first one freed, and seemed up to 2 times
// faster for it).
ShbOpen OpenShbInChild(const std::string& dir, uint64_t recovery_threads) {
  static_assert(std::is_trivially_copyable_v<ShbOpen>);
  int fds[2];
  if (pipe(fds) != 0) Check(absl::InternalError("pipe failed"), "OpenShbInChild");
  const pid_t pid = fork();
  if (pid < 0) Check(absl::InternalError("fork failed"), "OpenShbInChild");
  if (pid == 0) {
    close(fds[0]);
    ShbOpen r = OpenShb(dir, recovery_threads);
    r.rss_mb = RssMb();
    const bool sent = write(fds[1], &r, sizeof(r)) == static_cast<ssize_t>(sizeof(r));
    _exit(sent ? 0 : 1);
  }
  close(fds[1]);
  ShbOpen r;
  size_t got = 0;
  while (got < sizeof(r)) {
    const ssize_t n = read(fds[0], reinterpret_cast<char*>(&r) + got, sizeof(r) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != sizeof(r) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Check(absl::InternalError("the opening process failed"), "OpenShbInChild");
  }
  return r;
}

void ShbRestart(const Context& ctx, uint64_t subscriptions, const std::vector<uint64_t>& records) {
  const std::string dir = ctx.scratch_dir + "/shb";
  std::filesystem::remove_all(dir);
  auto gen_start = Clock::now();
  WriteSubscriptions(dir, subscriptions);
  uint64_t written = 0;
  for (uint64_t total : records) {
    AppendRecords(dir, subscriptions, written, total);
    ::sync();  // what the generation left unwritten is not the restart's to flush
    written = total;
    const double generate_s = Millis(Clock::now() - gen_start) / 1000;
    // Opens of a million subscriptions take seconds each: one is enough to see it.
    const int runs = subscriptions >= 1'000'000 ? 1 : 3;
    std::vector<uint64_t> threads = Counts(absl::GetFlag(FLAGS_restart_recovery_threads));
    std::vector<std::vector<ShbOpen>> opens(threads.size());
    for (int i = 0; i < runs; ++i) {
      for (size_t t = 0; t < threads.size(); ++t)
        opens[t].push_back(OpenShbInChild(dir, threads[t]));
    }
    for (size_t t = 0; t < threads.size(); ++t) {
      std::sort(opens[t].begin(), opens[t].end(),
                [](const ShbOpen& a, const ShbOpen& b) { return a.open_ms < b.open_ms; });
      const ShbOpen& m = opens[t][opens[t].size() / 2];
      Report("restart")
          .Add("role", "shb")
          .Add("subscriptions", static_cast<int64_t>(subscriptions))
          .Add("pfs_records", static_cast<int64_t>(total))
          .Add("pubends", int64_t{kPubends})
          .Add("recovery_threads", static_cast<int64_t>(threads[t]))
          .Add("stored_programs", absl::GetFlag(FLAGS_restart_stored_programs) ? "yes" : "no")
          .Add("runs", static_cast<int64_t>(runs))
          .Add("open_ms", m.open_ms)
          .Add("storage_ms", m.storage_ms)
          .Add("recover_ms", m.recover_ms)
          .Add("serve_ms", m.serve_ms)
          .Add("pfs_ms", Millis(m.recovery.pfs))
          .Add("subscriptions_ms", Millis(m.recovery.subscriptions))
          .Add("selectors_ms", Millis(m.recovery.selectors))
          .Add("positions_ms", Millis(m.recovery.positions))
          .Add("matcher_ms", Millis(m.recovery.matcher))
          .Add("rss_mb", m.rss_mb)
          .Add("store_mb", StoreMb(dir))
          .Add("generate_s", generate_s)
          .Print();
    }
    gen_start = Clock::now();
  }
  std::filesystem::remove_all(dir);
}

// ---- PHB ---------------------------------------------------------------------------------------

constexpr PubendId kPhbPubend{1};

std::unique_ptr<PublisherHostingBroker> OpenPhb(Storage* storage, Channel* channel) {
  PublisherHostingBrokerOptions po;
  po.pubends.push_back(PubendOptions{kPhbPubend});
  po.downstream = {"shb"};  // holds every event: nothing is released
  po.commit_thread = false;
  return Check(PublisherHostingBroker::Open(po, storage, channel), "PHB Open");
}

EventRef Payload(uint64_t i) {
  Event e;
  e.SetTopic("t");
  e.SetInt64("i", static_cast<int64_t>(i));
  e.SetPayload(std::string(kPayloadBytes, 'x'));
  return MakeEventRef(std::move(e));
}

constexpr absl::string_view kProbePublisher = "restart-probe";

// Publishes events from + 1 .. total, round-robin over kPublishers publishers, then a window of
// the probe publisher's, whose sequences *probe_sequence counts.
void AppendEvents(const std::string& dir, uint64_t from, uint64_t total, uint64_t* probe_sequence) {
  std::unique_ptr<Storage> storage = OpenStore(dir, Durability::kNoSync);
  InProcessNetwork net;
  std::unique_ptr<Channel> channel = Check(net.Connect("phb"), "Connect");
  std::unique_ptr<PublisherHostingBroker> phb = OpenPhb(storage.get(), channel.get());
  uint64_t failed = 0;
  for (uint64_t i = from + 1; i <= total; ++i) {
    phb->Publish(kPhbPubend, absl::StrCat("publisher-", i % kPublishers), 1 + i / kPublishers,
                 Payload(i), [&failed](absl::StatusOr<Tick> t) { failed += t.ok() ? 0 : 1; });
    if (i % 10'000 == 0) Check(phb->Flush(), "Flush");
  }
  for (size_t i = 0; i < Pubend::kSequenceWindow; ++i) {
    phb->Publish(kPhbPubend, kProbePublisher, ++*probe_sequence, Payload(0),
                 [&failed](absl::StatusOr<Tick> t) { failed += t.ok() ? 0 : 1; });
  }
  Check(phb->Flush(), "Flush");
  if (failed > 0) Check(absl::InternalError(absl::StrCat(failed, " publishes failed")), "publish");
}

struct PhbOpen {
  double open_ms = 0;
  double storage_ms = 0;
  double recover_ms = 0;
  double serve_ms = 0;
  PubendRecovery recovery;
};

PhbOpen OpenPhbTimed(const std::string& dir, uint64_t sequence) {
  PhbOpen r;
  InProcessNetwork net;
  std::unique_ptr<Channel> channel = Check(net.Connect("phb"), "Connect");
  const auto start = Clock::now();
  std::unique_ptr<Storage> storage = OpenStore(dir, Durability::kSync);
  const auto opened = Clock::now();
  std::unique_ptr<PublisherHostingBroker> phb = OpenPhb(storage.get(), channel.get());
  const auto recovered = Clock::now();
  bool acked = false;
  // A publisher that published before, with its next sequence: its stored window is read.
  phb->Publish(kPhbPubend, kProbePublisher, sequence, Payload(0), [&acked](absl::StatusOr<Tick> t) {
    Check(t.status(), "probe publish");
    acked = true;
  });
  Check(phb->Flush(), "Flush");
  if (!acked) Check(absl::InternalError("the probe publish was not acknowledged"), "serving");
  const auto served = Clock::now();
  r.open_ms = Millis(served - start);
  r.storage_ms = Millis(opened - start);
  r.recover_ms = Millis(recovered - opened);
  r.serve_ms = Millis(served - recovered);
  r.recovery = phb->recovery();
  return r;
}

void PhbRestart(const Context& ctx, const std::vector<uint64_t>& retained) {
  const std::string dir = ctx.scratch_dir + "/phb";
  std::filesystem::remove_all(dir);
  uint64_t written = 0;
  uint64_t probe = 0;
  for (uint64_t total : retained) {
    auto gen_start = Clock::now();
    AppendEvents(dir, written, total, &probe);
    ::sync();
    written = total;
    const double generate_s = Millis(Clock::now() - gen_start) / 1000;
    std::vector<PhbOpen> opens;
    for (int i = 0; i < 3; ++i) opens.push_back(OpenPhbTimed(dir, ++probe));
    std::sort(opens.begin(), opens.end(),
              [](const PhbOpen& a, const PhbOpen& b) { return a.open_ms < b.open_ms; });
    const PhbOpen& m = opens[opens.size() / 2];
    Report("restart")
        .Add("role", "phb")
        .Add("retained_events", static_cast<int64_t>(total))
        .Add("publishers", static_cast<int64_t>(kPublishers))
        .Add("pubends", int64_t{1})
        .Add("runs", int64_t{3})
        .Add("open_ms", m.open_ms)
        .Add("storage_ms", m.storage_ms)
        .Add("recover_ms", m.recover_ms)
        .Add("serve_ms", m.serve_ms)
        .Add("log_ms", Millis(m.recovery.log))
        .Add("release_table_ms", Millis(m.recovery.downstream))
        .Add("rss_mb", RssMb())
        .Add("store_mb", StoreMb(dir))
        .Add("generate_s", generate_s)
        .Print();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

GRYPH_WORKLOAD(restart) {
  const std::vector<uint64_t> records = Counts(absl::GetFlag(FLAGS_restart_pfs_records));
  for (uint64_t n : Counts(absl::GetFlag(FLAGS_restart_subscriptions))) {
    ShbRestart(ctx, n, records);
  }
  PhbRestart(ctx, Counts(absl::GetFlag(FLAGS_restart_retained_events)));
}

}  // namespace gryph::bench
