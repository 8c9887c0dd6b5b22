// Storage workloads: raw LMDB baselines and the same work through gryph's Storage seam.
//
//   lmdb_append           raw LMDB C API: sync appends of 250-byte values under 8-byte
//                         big-endian keys, kPubendBatchRecords per transaction
//                         (records_per_s, bytes_per_record)
//   lmdb_commit           raw LMDB C API: one such record per sync transaction
//                         (p50_us, p99_us, commits_per_s)
//   storage_append        as lmdb_append through OpenLmdbStorage + WriteBatch + Commit
//                         (records_per_s, bytes_per_record, overhead_pct vs lmdb_append of the
//                         same run)
//   storage_commit        as lmdb_commit through Storage::Commit, alternating with raw commits
//                         (p50_us, p99_us, lmdb_p50_us, lmdb_p99_us)
//   lmdb_group_commit_latency  raw LMDB group commit fed one record at a time at 10,000/s: the
//                         floor under a publish's latency (offered_per_s, p50_us, p99_us)
//   e2e_floor             the same, each group then handed through two more threads as an
//                         event's knowledge and deliveries are: the floor under e2e_latency
//                         (offered_per_s, hops, p50_us, p99_us)
//   storage_group_commit  one record per Submit through a background GroupCommitter
//                         (max_records = kPubendBatchRecords, max_delay 2 ms) from two submitter
//                         threads (records_per_s, records_per_group, ack_p50_us, ack_p99_us)
//
// Every store starts empty in the scratch directory and is removed after the run. Rates are the
// median of 3 runs; each run lasts about --seconds.

#include <lmdb.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmarks/workload.h"
#include "gryph/group_commit.h"
#include "gryph/storage.h"
#include "lib/util/coding.h"

namespace gryph::bench {
namespace {

// The pubend's batch size: how many events it logs per group commit (one LMDB transaction).
constexpr int kPubendBatchRecords = 1000;
constexpr size_t kValueBytes = 250;
constexpr int kRuns = 3;
constexpr const char* kTable = "pubend.events";

std::string Key(uint64_t n) {
  std::string out;
  internal::PutFixed64BE(&out, n);
  return out;
}

void Check(int rc, const char* what) {
  if (rc != 0) {
    std::fprintf(stderr, "%s: %s\n", what, mdb_strerror(rc));
    std::exit(1);
  }
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// A fresh directory for one run; removed when the run ends.
class RunDir {
 public:
  RunDir(const Context& ctx, const char* name, int run)
      : path_((std::filesystem::path(ctx.scratch_dir) / (name + std::to_string(run))).string()) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~RunDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- Raw LMDB baselines -------------------------------------------------------------------------

struct RawEnv {
  MDB_env* env = nullptr;
  MDB_dbi dbi = 0;

  explicit RawEnv(const std::string& path) {
    Check(mdb_env_create(&env), "mdb_env_create");
    Check(mdb_env_set_maxdbs(env, 4), "mdb_env_set_maxdbs");
    Check(mdb_env_set_mapsize(env, uint64_t{16} << 30), "mdb_env_set_mapsize");
    Check(mdb_env_open(env, path.c_str(), 0, 0644), "mdb_env_open");  // sync: fsync per commit
    MDB_txn* txn;
    Check(mdb_txn_begin(env, nullptr, 0, &txn), "mdb_txn_begin");
    Check(mdb_dbi_open(txn, kTable, MDB_CREATE, &dbi), "mdb_dbi_open");
    Check(mdb_txn_commit(txn), "mdb_txn_commit");
  }
  ~RawEnv() { mdb_env_close(env); }

  // One transaction putting keys [first, first + n).
  void Append(uint64_t first, int n, const std::string& value) {
    MDB_txn* txn;
    Check(mdb_txn_begin(env, nullptr, 0, &txn), "mdb_txn_begin");
    for (int i = 0; i < n; ++i) {
      const std::string key = Key(first + static_cast<uint64_t>(i));
      MDB_val k{key.size(), const_cast<char*>(key.data())};
      MDB_val v{value.size(), const_cast<char*>(value.data())};
      Check(mdb_put(txn, dbi, &k, &v, 0), "mdb_put");
    }
    Check(mdb_txn_commit(txn), "mdb_txn_commit");
  }

  uint64_t BytesUsed() {
    MDB_envinfo info;
    MDB_stat st;
    Check(mdb_env_info(env, &info), "mdb_env_info");
    Check(mdb_env_stat(env, &st), "mdb_env_stat");
    return (static_cast<uint64_t>(info.me_last_pgno) + 1) * st.ms_psize;
  }
};

// Appends batches of `batch` records for about `seconds`; returns records per second and sets
// *bytes_per_record.
double RawAppendRun(const Context& ctx, int run, int batch, double* bytes_per_record) {
  RunDir dir(ctx, "lmdb_append", run);
  RawEnv env(dir.path());
  const std::string value(kValueBytes, 'v');
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(ctx.seconds);
  uint64_t records = 0;
  while (absl::Now() < end) {
    env.Append(records, batch, value);
    records += static_cast<uint64_t>(batch);
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  *bytes_per_record = static_cast<double>(env.BytesUsed()) / static_cast<double>(records);
  return static_cast<double>(records) / seconds;
}

double LmdbAppendRate(const Context& ctx, double* bytes_per_record) {
  int run = 0;
  return MedianOf(kRuns,
                  [&] { return RawAppendRun(ctx, run++, kPubendBatchRecords, bytes_per_record); });
}

// ---- Through the Storage seam -------------------------------------------------------------------

std::unique_ptr<Storage> OpenStorage(const std::string& path) {
  StorageOptions options;
  options.path = path;
  options.durability = Durability::kSync;
  auto storage = OpenLmdbStorage(options);
  Check(storage.status());
  return std::move(*storage);
}

double StorageAppendRun(const Context& ctx, int run, double* bytes_per_record) {
  RunDir dir(ctx, "storage_append", run);
  std::unique_ptr<Storage> storage = OpenStorage(dir.path());
  const std::string value(kValueBytes, 'v');
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(ctx.seconds);
  uint64_t records = 0;
  WriteBatch batch;
  while (absl::Now() < end) {
    batch.Clear();
    for (int i = 0; i < kPubendBatchRecords; ++i) batch.Put(kTable, Key(records++), value);
    Check(storage->Commit(batch));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  auto bytes = storage->ApproximateBytesUsed();
  Check(bytes.status());
  *bytes_per_record = static_cast<double>(*bytes) / static_cast<double>(records);
  return static_cast<double>(records) / seconds;
}

// Commits one record per transaction for about `seconds`, recording each commit's latency.
template <typename CommitFn>
void OneRecordCommits(const Context& ctx, const char* workload, CommitFn commit) {
  Histogram latency;
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(ctx.seconds);
  uint64_t n = 0;
  while (absl::Now() < end) {
    const absl::Time t0 = absl::Now();
    commit(n++);
    latency.Add(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  Report(workload)
      .Add("p50_us", latency.Percentile(50))
      .Add("p99_us", latency.Percentile(99))
      .Add("commits_per_s", static_cast<double>(n) / seconds)
      .Add("commits", static_cast<int64_t>(n))
      .Add("value_bytes", static_cast<int64_t>(kValueBytes))
      .Print();
}

}  // namespace

GRYPH_WORKLOAD(lmdb_append) {
  double bytes_per_record = 0;
  const double rate = LmdbAppendRate(ctx, &bytes_per_record);
  Report("lmdb_append")
      .Add("records_per_s", rate)
      .Add("bytes_per_record", bytes_per_record)
      .Add("records_per_txn", static_cast<int64_t>(kPubendBatchRecords))
      .Add("value_bytes", static_cast<int64_t>(kValueBytes))
      .Add("durability", "sync")
      .Print();
}

GRYPH_WORKLOAD(lmdb_commit) {
  RunDir dir(ctx, "lmdb_commit", 0);
  RawEnv env(dir.path());
  const std::string value(kValueBytes, 'v');
  OneRecordCommits(ctx, "lmdb_commit", [&](uint64_t n) { env.Append(n, 1, value); });
}

namespace {

using Clock = std::chrono::steady_clock;

// A hand-off between two threads: the sender appends submission times, the receiver (asleep
// while there are none) takes them all.
class Relay {
 public:
  void Push(const std::vector<Clock::time_point>& times) {
    absl::MutexLock lock(&mu_);
    if (times_.empty()) arrived_.Signal();
    times_.insert(times_.end(), times.begin(), times.end());
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    arrived_.Signal();
  }
  // Blocks until there are times (swapped into *out) or the relay is closed and empty (false).
  bool Pop(std::vector<Clock::time_point>* out) {
    out->clear();
    absl::MutexLock lock(&mu_);
    while (times_.empty() && !closed_) arrived_.Wait(&mu_);
    if (times_.empty()) return false;
    out->swap(times_);
    return true;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar arrived_;
  std::vector<Clock::time_point> times_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// Raw LMDB group commit at a fixed 10,000 records/s: one committer thread takes whatever one
// submitter thread queued while it was committing and commits it in one sync transaction (no
// gryph code). After each commit the group's submission times pass through `hops` more threads,
// each woken by the one before (as knowledge goes from a PHB's commit thread to the brokers'
// thread, and deliveries from there to the subscribers' thread), and the last one records each
// record's latency from its submission. Returns the latencies in us.
Histogram GroupCommitAtFixedRate(const Context& ctx, const char* name, int hops) {
  constexpr double kRate = 10'000;
  RunDir dir(ctx, name, 0);
  RawEnv env(dir.path());
  const std::string value(kValueBytes, 'v');
  absl::Mutex mu;
  absl::CondVar submitted;
  std::vector<Clock::time_point> queue;  // guarded by mu
  bool done = false;                     // guarded by mu
  Histogram latency;                     // the last thread's
  auto record = [&latency](const std::vector<Clock::time_point>& times) {
    const Clock::time_point now = Clock::now();
    for (const Clock::time_point t : times) {
      latency.Add(std::chrono::duration<double, std::micro>(now - t).count());
    }
  };
  // relays[i] feeds hop i; the committer pushes into relays[0].
  std::vector<std::unique_ptr<Relay>> relays;
  for (int i = 0; i < hops; ++i) relays.push_back(std::make_unique<Relay>());
  std::vector<std::thread> hop_threads;
  for (int i = 0; i < hops; ++i) {
    hop_threads.emplace_back([&, i] {
      std::vector<Clock::time_point> times;
      while (relays[i]->Pop(&times)) {
        if (i + 1 < hops) {
          relays[i + 1]->Push(times);
        } else {
          record(times);
        }
      }
      if (i + 1 < hops) relays[i + 1]->Close();
    });
  }
  std::thread committer([&] {
    uint64_t next = 0;
    std::vector<Clock::time_point> group;
    for (;;) {
      {
        absl::MutexLock lock(&mu);
        while (queue.empty() && !done) submitted.Wait(&mu);
        if (queue.empty()) break;
        group.swap(queue);
      }
      env.Append(next, static_cast<int>(group.size()), value);
      next += group.size();
      if (hops > 0) {
        relays[0]->Push(group);
      } else {
        record(group);
      }
      group.clear();
    }
    if (hops > 0) relays[0]->Close();
  });
#if defined(__linux__)
  prctl(PR_SET_TIMERSLACK, 1UL);  // wake when due
#endif
  const Clock::time_point start = Clock::now();
  for (uint64_t i = 0;; ++i) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(static_cast<double>(i) / kRate));
    if (due - start > std::chrono::duration<double>(ctx.seconds)) break;
    std::this_thread::sleep_until(due);
    absl::MutexLock lock(&mu);
    if (queue.empty()) submitted.Signal();
    queue.push_back(Clock::now());
  }
  {
    absl::MutexLock lock(&mu);
    done = true;
    submitted.Signal();
  }
  committer.join();
  for (std::thread& t : hop_threads) t.join();
  return latency;
}

}  // namespace

// The floor under a publish's latency at a fixed rate: the group commit alone.
GRYPH_WORKLOAD(lmdb_group_commit_latency) {
  Histogram latency = GroupCommitAtFixedRate(ctx, "lmdb_group_commit_latency", 0);
  Report("lmdb_group_commit_latency")
      .Add("offered_per_s", 10'000.0)
      .Add("p50_us", latency.Percentile(50))
      .Add("p99_us", latency.Percentile(99))
      .Print();
}

// The floor under e2e_latency on this machine: the group commit, then the two thread hops that
// every event takes after its pubend's commit (to the brokers' thread, then to the subscribers'
// thread), with no work at all. lmdb_commit in the same run is the baseline.
GRYPH_WORKLOAD(e2e_floor) {
  Histogram latency = GroupCommitAtFixedRate(ctx, "e2e_floor", 2);
  Report("e2e_floor")
      .Add("offered_per_s", 10'000.0)
      .Add("hops", int64_t{2})
      .Add("p50_us", latency.Percentile(50))
      .Add("p99_us", latency.Percentile(99))
      .Print();
}

GRYPH_WORKLOAD(storage_append) {
  // Interleave baseline and seam runs so that both see the same machine conditions.
  std::vector<double> raw, seam;
  double raw_bytes = 0, seam_bytes = 0;
  for (int run = 0; run < kRuns; ++run) {
    raw.push_back(RawAppendRun(ctx, run, kPubendBatchRecords, &raw_bytes));
    seam.push_back(StorageAppendRun(ctx, run, &seam_bytes));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double raw_rate = median(raw);
  const double seam_rate = median(seam);
  Report("storage_append")
      .Add("records_per_s", seam_rate)
      .Add("bytes_per_record", seam_bytes)
      .Add("lmdb_records_per_s", raw_rate)
      .Add("overhead_pct", (raw_rate - seam_rate) / raw_rate * 100.0)
      .Add("records_per_txn", static_cast<int64_t>(kPubendBatchRecords))
      .Add("value_bytes", static_cast<int64_t>(kValueBytes))
      .Add("durability", "sync")
      .Print();
}

GRYPH_WORKLOAD(storage_commit) {
  // Alternates a raw LMDB commit and a Storage commit, each to its own store on the same disk,
  // so that both latency distributions see the same fsync conditions (the disk is shared).
  RunDir raw_dir(ctx, "storage_commit_raw", 0);
  RunDir seam_dir(ctx, "storage_commit", 0);
  RawEnv raw(raw_dir.path());
  std::unique_ptr<Storage> storage = OpenStorage(seam_dir.path());
  const std::string value(kValueBytes, 'v');
  Histogram raw_latency, seam_latency;
  const absl::Time end = absl::Now() + absl::Seconds(ctx.seconds);
  uint64_t n = 0;
  while (absl::Now() < end) {
    absl::Time t0 = absl::Now();
    raw.Append(n, 1, value);
    raw_latency.Add(absl::ToDoubleMicroseconds(absl::Now() - t0));
    t0 = absl::Now();
    WriteBatch batch;
    batch.Put(kTable, Key(n), value);
    Check(storage->Commit(batch));
    seam_latency.Add(absl::ToDoubleMicroseconds(absl::Now() - t0));
    ++n;
  }
  Report("storage_commit")
      .Add("p50_us", seam_latency.Percentile(50))
      .Add("p99_us", seam_latency.Percentile(99))
      .Add("lmdb_p50_us", raw_latency.Percentile(50))
      .Add("lmdb_p99_us", raw_latency.Percentile(99))
      .Add("commits", static_cast<int64_t>(n))
      .Add("value_bytes", static_cast<int64_t>(kValueBytes))
      .Print();
}

GRYPH_WORKLOAD(storage_group_commit) {
  constexpr int kSubmitters = 2;
  // A submitter stops submitting while this many of its records are unacknowledged, as a pubend
  // bounds its in-flight events.
  constexpr uint64_t kMaxInFlight = 2 * kPubendBatchRecords;
  double last_per_group = 0;
  Histogram ack_latency;
  absl::Mutex latency_mu;
  int run_no = 0;
  const double rate = MedianOf(kRuns, [&] {
    RunDir dir(ctx, "storage_group_commit", run_no++);
    std::unique_ptr<Storage> storage = OpenStorage(dir.path());
    GroupCommitOptions options;
    options.max_records = kPubendBatchRecords;
    options.max_delay = absl::Milliseconds(2);
    GroupCommitter committer(storage.get(), options);
    committer.Start();
    const std::string value(kValueBytes, 'v');
    std::atomic<uint64_t> acked{0};
    const absl::Time start = absl::Now();
    const absl::Time end = start + absl::Seconds(ctx.seconds);
    std::vector<std::thread> threads;
    for (int t = 0; t < kSubmitters; ++t) {
      threads.emplace_back([&, t] {
        std::atomic<uint64_t> my_acked{0};
        uint64_t submitted = 0;
        while (absl::Now() < end) {
          if (submitted - my_acked.load(std::memory_order_acquire) >= kMaxInFlight) {
            std::this_thread::yield();
            continue;
          }
          WriteBatch batch;
          batch.Put(kTable, Key((submitted << 8) | static_cast<uint64_t>(t)), value);
          const absl::Time t0 = absl::Now();
          const bool sample = submitted % 64 == 0;
          committer.Submit(std::move(batch), 1, [&, t0, sample](absl::Status s) {
            Check(s);
            if (sample) {
              absl::MutexLock lock(&latency_mu);
              ack_latency.Add(absl::ToDoubleMicroseconds(absl::Now() - t0));
            }
            my_acked.fetch_add(1, std::memory_order_release);
            acked.fetch_add(1, std::memory_order_relaxed);
          });
          ++submitted;
        }
        // Wait for this thread's callbacks (they reference my_acked) before leaving.
        while (my_acked.load(std::memory_order_acquire) < submitted) std::this_thread::yield();
      });
    }
    for (auto& th : threads) th.join();
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    committer.Stop();
    const GroupCommitter::Stats stats = committer.stats();
    last_per_group = static_cast<double>(stats.records) / static_cast<double>(stats.groups);
    return static_cast<double>(acked.load()) / seconds;
  });
  absl::MutexLock lock(&latency_mu);
  Report("storage_group_commit")
      .Add("records_per_s", rate)
      .Add("records_per_group", last_per_group)
      .Add("ack_p50_us", ack_latency.Percentile(50))
      .Add("ack_p99_us", ack_latency.Percentile(99))
      .Add("submitters", static_cast<int64_t>(kSubmitters))
      .Add("max_records", static_cast<int64_t>(kPubendBatchRecords))
      .Add("max_delay_ms", static_cast<int64_t>(2))
      .Add("value_bytes", static_cast<int64_t>(kValueBytes))
      .Add("durability", "sync")
      .Print();
}

}  // namespace gryph::bench
