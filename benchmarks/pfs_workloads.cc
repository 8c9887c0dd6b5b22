// Workloads for the PFS (see gryph_bench.cc for the list).
//
//   pfs_write / subscriber_queue_write
//       The PFS against the "obvious" design it replaces (paper §1): a persistent queue per
//       durable subscriber holding a copy of every matching 250-byte event. Same LMDB (sync), same
//       transactions of 1,000 events, same events: 1,000 subscribers, each event matching a
//       random (seeded) 1%, 10% or 50% of them.
//   pfs_read
//       Batch reads of a subscriber that missed 100,000 events and matched 10% of them.
//   pfs_records
//       Records per second with n = 1, 10, 100 subscribers per record, beside a raw LMDB append
//       of 250-byte values (1,000 per sync transaction) measured in the same run.
//   pfs_open
//       Restart: the time PFS::Open takes as subscribers and history grow.
//
// Byte figures: `bytes_per_*` is what the store grew by (Storage::ApproximateBytesUsed: LMDB
// pages in use, overhead included); `written_bytes_per_*` is what the process wrote to files
// (wchar of /proc/self/io: LMDB's page writes, B-tree copy-on-write and meta pages included).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/workload.h"
#include "gryph/broker/pfs.h"
#include "gryph/storage.h"

namespace gryph::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kEventsPerTxn = 1000;
constexpr uint64_t kSubscribers = 1000;
constexpr size_t kPayloadBytes = 250;
constexpr int kRuns = 3;
// Ticks are a pubend's microseconds: 50 apart is 20,000 events/s, the paper's SHB rate. (The
// PFS stores back-pointers as tick differences, so the spacing affects record sizes.)
constexpr Tick kTickSpacing = 50;

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::abort();
  }
}

template <typename T>
T Check(absl::StatusOr<T> s, const char* what) {
  Check(s.status(), what);
  return *std::move(s);
}

// Bytes this process has written to files so far (/proc/self/io wchar), or 0 if unknown.
uint64_t ProcessWrittenBytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return 0;
}

std::unique_ptr<Storage> OpenFresh(const std::string& dir, Durability durability) {
  std::filesystem::remove_all(dir);
  StorageOptions so;
  so.path = dir;
  so.durability = durability;
  so.initial_map_bytes = uint64_t{1} << 30;
  return Check(OpenLmdbStorage(so), "OpenLmdbStorage");
}

// Sets of exactly k distinct subscribers among 1..kSubscribers, chosen at random (seeded), each
// sorted (as a matcher returns them).
class SetGenerator {
 public:
  SetGenerator(size_t k, uint64_t seed) : k_(k), rng_(seed), ids_(kSubscribers) {
    std::iota(ids_.begin(), ids_.end(), 1);
  }
  void Next(std::vector<SubscriberId>* set) {
    set->clear();
    for (size_t i = 0; i < k_; ++i) {  // partial Fisher-Yates
      std::swap(ids_[i], ids_[i + rng_() % (kSubscribers - i)]);
      set->push_back(SubscriberId{ids_[i]});
    }
    std::sort(set->begin(), set->end());
  }

 private:
  const size_t k_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> ids_;
};

std::vector<std::vector<SubscriberId>> MatchingSets(size_t k, size_t count, uint64_t seed) {
  SetGenerator gen(k, seed);
  std::vector<std::vector<SubscriberId>> sets(count);
  for (auto& set : sets) gen.Next(&set);
  return sets;
}

struct WriteFigures {
  double per_s = 0;
  double bytes = 0;          // store growth per event (record)
  double written_bytes = 0;  // bytes written to files per event (record)
};

// The run with the median rate.
WriteFigures Median(std::vector<WriteFigures> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const WriteFigures& a, const WriteFigures& b) { return a.per_s < b.per_s; });
  return runs[runs.size() / 2];
}

// The run with the median rate of kRuns.
WriteFigures Median(const std::function<WriteFigures()>& run) {
  std::vector<WriteFigures> runs;
  for (int i = 0; i < kRuns; ++i) runs.push_back(run());
  return Median(std::move(runs));
}

// Runs `txn` (which fills and commits one transaction of kEventsPerTxn events) for at least
// `seconds` and two transactions, measuring rate and bytes.
WriteFigures Measure(Storage* storage, double seconds, const std::function<void()>& txn) {
  const uint64_t bytes0 = Check(storage->ApproximateBytesUsed(), "ApproximateBytesUsed");
  const uint64_t written0 = ProcessWrittenBytes();
  uint64_t events = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    txn();
    events += kEventsPerTxn;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds || events < 2 * kEventsPerTxn);
  const uint64_t bytes1 = Check(storage->ApproximateBytesUsed(), "ApproximateBytesUsed");
  const uint64_t written1 = ProcessWrittenBytes();
  WriteFigures f;
  f.per_s = static_cast<double>(events) / elapsed;
  f.bytes = static_cast<double>(bytes1 - bytes0) / static_cast<double>(events);
  f.written_bytes = static_cast<double>(written1 - written0) / static_cast<double>(events);
  return f;
}

std::unique_ptr<PFS> OpenPfsWithSubscribers(Storage* storage) {
  PfsOptions o;
  o.pubend = PubendId{1};
  std::unique_ptr<PFS> pfs = Check(PFS::Open(o, storage), "PFS::Open");
  WriteBatch batch;
  for (uint64_t s = 1; s <= kSubscribers; ++s) {
    Check(pfs->AddSubscriber(SubscriberId{s}, &batch), "AddSubscriber");
  }
  Check(pfs->Commit(batch), "Commit");
  return pfs;
}

// The PFS path of the constream: one record per event, kEventsPerTxn per transaction.
WriteFigures PfsWriteRun(const std::string& dir, const std::vector<std::vector<SubscriberId>>& sets,
                         double seconds) {
  std::unique_ptr<Storage> storage = OpenFresh(dir, Durability::kSync);
  std::unique_ptr<PFS> pfs = OpenPfsWithSubscribers(storage.get());
  WriteBatch batch;
  uint64_t event = 0;
  return Measure(storage.get(), seconds, [&] {
    batch.Clear();
    for (size_t i = 0; i < kEventsPerTxn; ++i) {
      ++event;
      Check(pfs->Write(event * kTickSpacing, sets[event % sets.size()], &batch), "Write");
    }
    Check(storage->Commit(batch), "Commit");
    pfs->MarkCommitted(event * kTickSpacing);
  });
}

// The obvious design: each matching event copied into each matching subscriber's queue, keyed
// by (subscriber, per-subscriber sequence).
WriteFigures QueueWriteRun(const std::string& dir,
                           const std::vector<std::vector<SubscriberId>>& sets, double seconds) {
  std::unique_ptr<Storage> storage = OpenFresh(dir, Durability::kSync);
  const std::string payload(kPayloadBytes, 'e');
  std::vector<uint64_t> sequence(kSubscribers + 1, 0);
  WriteBatch batch;
  uint64_t event = 0;
  char key[16];
  auto be64 = [](char* p, uint64_t v) {
    for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xff);
  };
  return Measure(storage.get(), seconds, [&] {
    batch.Clear();
    for (size_t i = 0; i < kEventsPerTxn; ++i) {
      ++event;
      for (SubscriberId s : sets[event % sets.size()]) {
        be64(key, s.value);
        be64(key + 8, ++sequence[s.value]);
        batch.Put("queue.events", absl::string_view(key, sizeof key), payload);
      }
    }
    Check(storage->Commit(batch), "Commit");
  });
}

constexpr size_t kSets = 1000;  // distinct matching sets, cycled through

void WriteWorkload(const Context& ctx, const char* name, bool pfs) {
  for (double fraction : {0.01, 0.10, 0.50}) {
    const size_t k = static_cast<size_t>(fraction * kSubscribers + 0.5);
    const auto sets = MatchingSets(k, kSets, 42);
    const WriteFigures f = Median([&] {
      return pfs ? PfsWriteRun(ctx.scratch_dir + "/db", sets, ctx.seconds)
                 : QueueWriteRun(ctx.scratch_dir + "/db", sets, ctx.seconds);
    });
    Report(name)
        .Add("subscribers", static_cast<int64_t>(kSubscribers))
        .Add("match_fraction", fraction)
        .Add("events_per_txn", static_cast<int64_t>(kEventsPerTxn))
        .Add("tick_spacing", static_cast<int64_t>(kTickSpacing))
        .Add("events_per_s", f.per_s)
        .Add("bytes_per_event", f.bytes)
        .Add("written_bytes_per_event", f.written_bytes)
        .Print();
  }
}

}  // namespace

GRYPH_WORKLOAD(pfs_write) { WriteWorkload(ctx, "pfs_write", true); }
GRYPH_WORKLOAD(subscriber_queue_write) { WriteWorkload(ctx, "subscriber_queue_write", false); }

// A subscriber that missed 100,000 events, 10% of which matched it: its catchup stream reads
// (CT, latestDelivered] in batches of 1,000 Q ticks. Every record matches 10% of 1,000
// subscribers, so the subscriber's ~10,000 records are spread among 100,000.
GRYPH_WORKLOAD(pfs_read) {
  constexpr uint64_t kEvents = 100'000;
  constexpr size_t kBuffer = 1000;
  std::unique_ptr<Storage> storage = OpenFresh(ctx.scratch_dir + "/db", Durability::kNoSync);
  std::unique_ptr<PFS> pfs = OpenPfsWithSubscribers(storage.get());
  SetGenerator gen(kSubscribers / 10, 7);
  std::vector<SubscriberId> set;
  WriteBatch batch;
  for (uint64_t event = 1; event <= kEvents; ++event) {
    gen.Next(&set);
    Check(pfs->Write(event * kTickSpacing, set, &batch), "Write");
    if (event % kEventsPerTxn == 0) {
      Check(storage->Commit(batch), "Commit");
      pfs->MarkCommitted(event * kTickSpacing);
      batch.Clear();
    }
  }
  const SubscriberId s{1};
  uint64_t q_ticks = 0;
  PFS::ReadResult r;
  const double rate = MedianOf(kRuns, [&] {
    uint64_t ticks = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      auto reader = Check(pfs->NewReader(s, 0, kEvents * kTickSpacing), "NewReader");
      uint64_t window = 0;
      while (!reader->done()) {
        Check(reader->Read(kBuffer, &r), "Read");
        window += r.ticks.size();
      }
      q_ticks = window;
      ticks += window;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < ctx.seconds);
    return static_cast<double>(ticks) / elapsed;
  });
  Report("pfs_read")
      .Add("missed_events", static_cast<int64_t>(kEvents))
      .Add("match_fraction", 0.10)
      .Add("q_ticks", static_cast<int64_t>(q_ticks))
      .Add("buffer_ticks", static_cast<int64_t>(kBuffer))
      .Add("ticks_per_s", rate)
      .Print();
}

namespace {

// A raw LMDB append: 250-byte values under increasing 8-byte keys, kEventsPerTxn per sync
// transaction.
WriteFigures RawAppendRun(const std::string& dir, double seconds) {
  std::unique_ptr<Storage> storage = OpenFresh(dir, Durability::kSync);
  const std::string value(kPayloadBytes, 'v');
  WriteBatch batch;
  uint64_t seq = 0;
  char key[8];
  return Measure(storage.get(), seconds, [&] {
    batch.Clear();
    for (size_t i = 0; i < kEventsPerTxn; ++i) {
      uint64_t v = ++seq;
      for (int b = 7; b >= 0; --b, v >>= 8) key[b] = static_cast<char>(v & 0xff);
      batch.Put("baseline.log", absl::string_view(key, sizeof key), value);
    }
    Check(storage->Commit(batch), "Commit");
  });
}

}  // namespace

// The baseline and the PFS alternate, run for run, so that both see the same disk (fsync times
// on a shared machine drift by 2x over a minute).
GRYPH_WORKLOAD(pfs_records) {
  for (size_t n : {1, 10, 100}) {
    const auto sets = MatchingSets(n, kSets, 1234 + n);
    std::vector<WriteFigures> baseline;
    std::vector<WriteFigures> pfs;
    for (int run = 0; run < kRuns; ++run) {
      baseline.push_back(RawAppendRun(ctx.scratch_dir + "/db", ctx.seconds));
      pfs.push_back(PfsWriteRun(ctx.scratch_dir + "/db", sets, ctx.seconds));
    }
    const WriteFigures b = Median(baseline);
    const WriteFigures f = Median(pfs);
    Report("pfs_records")
        .Add("n", static_cast<int64_t>(n))
        .Add("records_per_txn", static_cast<int64_t>(kEventsPerTxn))
        .Add("tick_spacing", static_cast<int64_t>(kTickSpacing))
        .Add("records_per_s", f.per_s)
        .Add("bytes_per_record", f.bytes)
        .Add("written_bytes_per_record", f.written_bytes)
        .Add("paper_payload_bytes_per_record", static_cast<int64_t>(8 + 16 * n))
        .Add("baseline_records_per_s", b.per_s)
        .Add("baseline_bytes_per_record", b.bytes)
        .Add("baseline_written_bytes_per_record", b.written_bytes)
        .Add("ratio_to_baseline", f.per_s / b.per_s)
        .Print();
  }
}

// Restart cost: PFS::Open reads one row per subscriber and the records after the last
// checkpoint, not the history. Records match 10 random subscribers each.
GRYPH_WORKLOAD(pfs_open) {
  for (uint64_t subscribers : {uint64_t{1000}, uint64_t{100'000}}) {
    for (uint64_t records : {uint64_t{10'000}, uint64_t{100'000}}) {
      const std::string dir = ctx.scratch_dir + "/db";
      PfsOptions o;
      o.pubend = PubendId{1};
      {
        std::unique_ptr<Storage> storage = OpenFresh(dir, Durability::kNoSync);
        std::unique_ptr<PFS> pfs = Check(PFS::Open(o, storage.get()), "PFS::Open");
        WriteBatch batch;
        for (uint64_t s = 1; s <= subscribers; ++s) {
          Check(pfs->AddSubscriber(SubscriberId{s}, &batch), "AddSubscriber");
        }
        Check(pfs->Commit(batch), "Commit");
        batch.Clear();
        std::mt19937_64 rng(99);
        std::vector<SubscriberId> set;
        for (uint64_t r = 1; r <= records; ++r) {
          set.clear();
          for (int i = 0; i < 10; ++i) set.push_back(SubscriberId{1 + rng() % subscribers});
          std::sort(set.begin(), set.end());
          set.erase(std::unique(set.begin(), set.end()), set.end());
          Check(pfs->Write(r * kTickSpacing, set, &batch), "Write");
          if (r % kEventsPerTxn == 0 || r == records) {
            Check(pfs->Commit(batch), "Commit");
            batch.Clear();
          }
        }
      }
      std::unique_ptr<Storage> storage = Check(
          [&] {
            StorageOptions so;
            so.path = dir;
            so.durability = Durability::kNoSync;
            return OpenLmdbStorage(so);
          }(),
          "OpenLmdbStorage");
      size_t tail = 0;
      const double ms = MedianOf(5, [&] {
        const auto start = Clock::now();
        std::unique_ptr<PFS> pfs = Check(PFS::Open(o, storage.get()), "PFS::Open");
        const double elapsed =
            std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        tail = pfs->recovered_tail_records();
        return elapsed;
      });
      Report("pfs_open")
          .Add("subscribers", static_cast<int64_t>(subscribers))
          .Add("records", static_cast<int64_t>(records))
          .Add("tail_records", static_cast<int64_t>(tail))
          .Add("open_ms", ms)
          .Print();
    }
  }
}

}  // namespace gryph::bench
