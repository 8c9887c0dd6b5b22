#include "gryph/group_commit.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gryph/memory_storage.h"
#include "gryph/storage.h"
#include "gryph/testing/fault_injecting_storage.h"
#include "lib/util/coding.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::TempDir;

std::string Key(uint64_t n) {
  std::string out;
  internal::PutFixed64BE(&out, n);
  return out;
}

WriteBatch OneRecord(uint64_t n) {
  WriteBatch batch;
  batch.Put("log", Key(n), absl::StrCat("event ", n));
  return batch;
}

GroupCommitOptions Options(size_t max_records, absl::Duration max_delay,
                           std::function<absl::Time()> clock = nullptr) {
  GroupCommitOptions options;
  options.max_records = max_records;
  options.max_delay = max_delay;
  options.clock = std::move(clock);
  return options;
}

// A virtual clock for manual mode.
struct FakeClock {
  absl::Time now = absl::UnixEpoch() + absl::Hours(1);
  std::function<absl::Time()> fn() {
    return [this] { return now; };
  }
};

// Collects the statuses the callbacks receive (thread-safe: callbacks may run on the committer
// thread, where Catch2 assertions are not allowed).
class Results {
 public:
  GroupCommitter::Done Callback(size_t id) {
    return [this, id](absl::Status s) {
      absl::MutexLock lock(&mu_);
      if (statuses_.size() <= id) statuses_.resize(id + 1);
      if (statuses_[id].has_value()) ++duplicates_;  // checked by count(): exactly once
      statuses_[id] = std::move(s);
      order_.push_back(id);
    };
  }
  // The submissions whose callback ran. REQUIREs that none ran twice.
  size_t count() {
    absl::MutexLock lock(&mu_);
    REQUIRE(duplicates_ == 0);
    size_t n = 0;
    for (const auto& s : statuses_) n += s.has_value();
    return n;
  }
  // The status submission `id` received, or kUnknown "no callback yet".
  absl::Status status(size_t id) {
    absl::MutexLock lock(&mu_);
    if (id >= statuses_.size() || !statuses_[id]) return absl::UnknownError("no callback yet");
    return *statuses_[id];
  }
  std::vector<size_t> order() {
    absl::MutexLock lock(&mu_);
    return order_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::optional<absl::Status>> statuses_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> order_ ABSL_GUARDED_BY(mu_);
  int duplicates_ ABSL_GUARDED_BY(mu_) = 0;
};

std::optional<std::string> Get(Storage& storage, uint64_t n) {
  auto v = storage.Get("log", Key(n));
  REQUIRE_OK(v);
  return *v;
}

TEST_CASE("a group closes when it holds max_records records", "[group_commit]") {
  MemoryStorage storage;
  FakeClock clock;
  GroupCommitter committer(&storage, Options(10, absl::Seconds(1), clock.fn()));
  Results results;
  REQUIRE(committer.NextDeadline() == std::nullopt);
  for (uint64_t i = 0; i < 3; ++i) committer.Submit(OneRecord(i), 3, results.Callback(i));
  REQUIRE(committer.pending_records() == 9);
  REQUIRE(committer.NextDeadline() == clock.now + absl::Seconds(1));
  REQUIRE_OK(committer.FlushIfDue(clock.now));  // not due: nothing happens
  REQUIRE(results.count() == 0);
  REQUIRE(Get(storage, 0) == std::nullopt);

  committer.Submit(OneRecord(3), 1, results.Callback(3));  // 10 records: the group closes
  REQUIRE(committer.NextDeadline() == absl::InfinitePast());
  REQUIRE_OK(committer.FlushIfDue(clock.now));
  REQUIRE(results.count() == 4);
  REQUIRE(results.order() == std::vector<size_t>{0, 1, 2, 3});
  for (size_t i = 0; i < 4; ++i) REQUIRE_OK(results.status(i));
  for (uint64_t i = 0; i < 4; ++i) REQUIRE(Get(storage, i) == absl::StrCat("event ", i));
  REQUIRE(committer.stats().groups == 1);
  REQUIRE(committer.stats().records == 10);
  REQUIRE(committer.stats().max_group_records == 10);
  REQUIRE(committer.stats().commit_time.count() == 1);  // one commit timed
  REQUIRE(committer.NextDeadline() == std::nullopt);
}

TEST_CASE("SubmitInto writes into the pending group, in order with Submit", "[group_commit]") {
  MemoryStorage storage;
  FakeClock clock;
  GroupCommitter committer(&storage, Options(4, absl::Seconds(1), clock.fn()));
  Results results;
  auto into = [&](uint64_t n) {
    committer.SubmitInto(
        1, [n](WriteBatch& b) { b.Put("log", Key(n), absl::StrCat("event ", n)); },
        results.Callback(n));
  };
  into(0);  // the first of a group starts its timer
  REQUIRE(committer.NextDeadline() == clock.now + absl::Seconds(1));
  committer.Submit(OneRecord(1), 1, results.Callback(1));
  into(2);
  REQUIRE(committer.pending_records() == 3);
  into(3);  // 4 records: the group closes
  REQUIRE(committer.NextDeadline() == absl::InfinitePast());
  REQUIRE_OK(committer.FlushIfDue(clock.now));
  REQUIRE(results.order() == std::vector<size_t>{0, 1, 2, 3});
  for (uint64_t i = 0; i < 4; ++i) REQUIRE(Get(storage, i) == absl::StrCat("event ", i));
  // The next group starts empty.
  into(4);
  REQUIRE_OK(committer.Flush());
  REQUIRE(Get(storage, 4) == "event 4");
  REQUIRE(committer.stats().groups == 2);
  REQUIRE(committer.stats().records == 5);
}

TEST_CASE("JoinPending adds to a pending submission until its group is taken", "[group_commit]") {
  MemoryStorage storage;
  FakeClock clock;
  GroupCommitter committer(&storage, Options(3, absl::Seconds(1), clock.fn()));
  Results results;
  auto put = [](uint64_t n) {
    return [n](WriteBatch& b) { b.Put("log", Key(n), absl::StrCat("event ", n)); };
  };
  const uint64_t group = committer.SubmitInto(1, put(0), results.Callback(0));
  REQUIRE(committer.JoinPending(group, 1, put(1)));
  REQUIRE(committer.pending_records() == 2);
  REQUIRE(committer.NextDeadline() == clock.now + absl::Seconds(1));
  REQUIRE(committer.JoinPending(group, 1, put(2)));  // 3 records: the group is due
  REQUIRE(committer.NextDeadline() == absl::InfinitePast());
  REQUIRE_OK(committer.Flush());
  // One callback for the three records, all of them committed.
  REQUIRE(results.count() == 1);
  REQUIRE_OK(results.status(0));
  for (uint64_t i = 0; i < 3; ++i) REQUIRE(Get(storage, i) == absl::StrCat("event ", i));
  REQUIRE(committer.stats().records == 3);
  // Taken: joining fails and writes nothing, also once a new group is pending.
  bool called = false;
  REQUIRE_FALSE(committer.JoinPending(group, 1, [&](WriteBatch&) { called = true; }));
  const uint64_t next = committer.SubmitInto(1, put(3), results.Callback(1));
  REQUIRE(next != group);
  REQUIRE_FALSE(committer.JoinPending(group, 1, [&](WriteBatch&) { called = true; }));
  REQUIRE_FALSE(called);
  REQUIRE_OK(committer.Flush());
  REQUIRE(Get(storage, 3) == "event 3");
}

TEST_CASE("a group closes max_delay after its first submission", "[group_commit]") {
  MemoryStorage storage;
  FakeClock clock;
  GroupCommitter committer(&storage, Options(1000, absl::Milliseconds(5), clock.fn()));
  Results results;
  const absl::Time first = clock.now;
  committer.Submit(OneRecord(1), 1, results.Callback(0));
  clock.now += absl::Milliseconds(3);
  committer.Submit(OneRecord(2), 1, results.Callback(1));
  // The deadline counts from the first submission, not the last.
  REQUIRE(committer.NextDeadline() == first + absl::Milliseconds(5));
  REQUIRE_OK(committer.FlushIfDue(first + absl::Microseconds(4999)));
  REQUIRE(results.count() == 0);
  REQUIRE_OK(committer.FlushIfDue(first + absl::Milliseconds(5)));
  REQUIRE(results.count() == 2);
  REQUIRE(Get(storage, 2) == "event 2");
  REQUIRE(committer.stats().groups == 1);

  // The next group's clock starts at its own first submission.
  clock.now += absl::Seconds(10);
  committer.Submit(OneRecord(3), 1, results.Callback(2));
  REQUIRE(committer.NextDeadline() == clock.now + absl::Milliseconds(5));
}

TEST_CASE("Flush commits whatever is pending as one group", "[group_commit]") {
  MemoryStorage storage;
  GroupCommitter committer(&storage, Options(1000, absl::Hours(1)));
  REQUIRE_OK(committer.Flush());  // nothing pending
  REQUIRE(committer.stats().groups == 0);
  Results results;
  WriteBatch two_tables;
  two_tables.Put("log", Key(1), "e");
  two_tables.Put("meta", "last", Key(1));
  committer.Submit(two_tables, 1, results.Callback(0));
  committer.Submit(WriteBatch(), 0, results.Callback(1));  // an empty submission is fine
  committer.Submit(OneRecord(2), 1, results.Callback(2));
  REQUIRE_OK(committer.Flush());
  REQUIRE(results.count() == 3);
  REQUIRE(committer.stats().groups == 1);
  auto last = storage.Get("meta", "last");
  REQUIRE_OK(last);
  REQUIRE(*last == Key(1));
}

TEST_CASE("every submission of a failed group gets the error, and so do later ones",
          "[group_commit]") {
  MemoryStorage base;
  FaultInjectingStorage storage(&base);
  GroupCommitter committer(&storage, Options(2, absl::Hours(1)));
  Results results;
  committer.Submit(OneRecord(1), 1, results.Callback(0));
  REQUIRE_OK(committer.Flush());

  storage.FailCommitNumber(2, absl::DataLossError("disk damaged"));
  committer.Submit(OneRecord(2), 1, results.Callback(1));
  committer.Submit(OneRecord(3), 1, results.Callback(2));
  REQUIRE_CODE(committer.Flush(), absl::StatusCode::kDataLoss);
  REQUIRE(results.status(1).code() == absl::StatusCode::kDataLoss);
  REQUIRE(results.status(2).code() == absl::StatusCode::kDataLoss);
  REQUIRE(Get(base, 2) == std::nullopt);
  REQUIRE(Get(base, 3) == std::nullopt);

  // The committer is failed: a later submission is not committed (it would follow a hole).
  committer.Submit(OneRecord(4), 1, results.Callback(3));
  REQUIRE_CODE(committer.Flush(), absl::StatusCode::kDataLoss);
  REQUIRE(results.status(3).code() == absl::StatusCode::kDataLoss);
  REQUIRE(Get(base, 4) == std::nullopt);
  REQUIRE(storage.commits_attempted() == 2);
  REQUIRE_CODE(committer.status(), absl::StatusCode::kDataLoss);
  REQUIRE(results.status(0).ok());
}

TEST_CASE("with resume_after_full a full store fails that group alone", "[group_commit]") {
  MemoryStorage base;
  FaultInjectingStorage storage(&base);
  GroupCommitOptions options = Options(100, absl::Hours(1));
  options.resume_after_full = true;
  GroupCommitter committer(&storage, options);
  Results results;
  storage.FailNextCommitWithMapFull();
  committer.Submit(OneRecord(1), 1, results.Callback(0));
  REQUIRE_CODE(committer.Flush(), absl::StatusCode::kResourceExhausted);
  REQUIRE(results.status(0).code() == absl::StatusCode::kResourceExhausted);
  REQUIRE_OK(committer.status());
  committer.Submit(OneRecord(2), 1, results.Callback(1));
  REQUIRE_OK(committer.Flush());
  REQUIRE_OK(results.status(1));
  REQUIRE(Get(base, 1) == std::nullopt);
  REQUIRE(Get(base, 2) == "event 2");
  // Without the option a full store is as sticky as any other failure (the SHB relies on it).
  GroupCommitter strict(&storage, Options(100, absl::Hours(1)));
  storage.FailNextCommitWithMapFull();
  strict.Submit(OneRecord(3), 1, results.Callback(2));
  REQUIRE_CODE(strict.Flush(), absl::StatusCode::kResourceExhausted);
  REQUIRE_CODE(strict.status(), absl::StatusCode::kResourceExhausted);
}

TEST_CASE("a batch that frees space commits on its own, ahead of the pending group, marked",
          "[group_commit]") {
  MemoryStorage base;
  // Records what each commit looked like.
  class Recording : public StorageWrapper {
   public:
    using StorageWrapper::StorageWrapper;
    absl::Status Commit(const WriteBatch& batch) override {
      marks.push_back(batch.frees_space());
      sizes.push_back(batch.count());
      return StorageWrapper::Commit(batch);
    }
    std::vector<bool> marks;
    std::vector<size_t> sizes;
  } storage(&base);
  FakeClock clock;
  GroupCommitter committer(&storage, Options(100, absl::Hours(1), clock.fn()));
  Results results;
  committer.Submit(OneRecord(1), 1, results.Callback(0));
  committer.Submit(OneRecord(2), 1, results.Callback(1));
  REQUIRE(committer.NextDeadline() == clock.now + absl::Hours(1));
  WriteBatch release;
  release.Delete("log", Key(1));
  release.set_frees_space(true);
  committer.Submit(std::move(release), 0, results.Callback(2));
  // Due at once, and first.
  REQUIRE(committer.NextDeadline() == absl::InfinitePast());
  REQUIRE_OK(committer.FlushIfDue(clock.now));
  REQUIRE(storage.marks == std::vector<bool>{true, false});
  REQUIRE(storage.sizes == std::vector<size_t>{1, 2});
  REQUIRE(results.order() == std::vector<size_t>{2, 0, 1});
  REQUIRE(Get(base, 1) == "event 1");  // the delete ran before the put
}

TEST_CASE("destroying the committer drops pending submissions like a crash", "[group_commit]") {
  MemoryStorage storage;
  int calls = 0;
  {
    GroupCommitter committer(&storage, Options(100, absl::Hours(1)));
    committer.Submit(OneRecord(1), 1, [&](absl::Status) { ++calls; });
  }
  REQUIRE(calls == 0);
  REQUIRE(Get(storage, 1) == std::nullopt);
}

TEST_CASE("a callback may submit the next batch", "[group_commit]") {
  MemoryStorage storage;
  GroupCommitter committer(&storage, Options(1, absl::ZeroDuration()));
  bool second_done = false;
  committer.Submit(OneRecord(1), 1, [&](absl::Status s) {
    REQUIRE_OK(s);
    committer.Submit(OneRecord(2), 1, [&](absl::Status s2) {
      REQUIRE_OK(s2);
      second_done = true;
    });
  });
  REQUIRE_OK(committer.Flush());
  REQUIRE(committer.pending_records() == 1);
  REQUIRE_OK(committer.Flush());
  REQUIRE(second_done);
}

// ---- Background thread --------------------------------------------------------------------------

TEST_CASE("the background thread commits a lone submission after max_delay", "[group_commit]") {
  MemoryStorage storage;
  GroupCommitter committer(&storage, Options(1000, absl::Milliseconds(20)));
  committer.Start();
  absl::Notification done;
  absl::Status status = absl::UnknownError("not called");
  const absl::Time start = absl::Now();
  committer.Submit(OneRecord(1), 1, [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  REQUIRE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  REQUIRE(absl::Now() - start >= absl::Milliseconds(20));
  REQUIRE_OK(status);
  REQUIRE(Get(storage, 1) == "event 1");
  committer.Stop();
}

TEST_CASE("Stop commits what is pending", "[group_commit]") {
  MemoryStorage storage;
  GroupCommitter committer(&storage, Options(1000, absl::Hours(1)));
  committer.Start();
  Results results;
  for (uint64_t i = 0; i < 5; ++i) committer.Submit(OneRecord(i), 1, results.Callback(i));
  committer.Stop();
  REQUIRE(results.count() == 5);
  REQUIRE(Get(storage, 4) == "event 4");
  // Back in manual mode.
  committer.Submit(OneRecord(5), 1, results.Callback(5));
  REQUIRE_OK(committer.Flush());
  REQUIRE(results.count() == 6);
}

// Blocks every commit until released, to catch a submitter waiting behind a commit.
class BlockingStorage : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  absl::Status Commit(const WriteBatch& batch) override {
    if (!entered_.HasBeenNotified()) entered_.Notify();  // only the committer thread calls this
    release_.WaitForNotification();
    return StorageWrapper::Commit(batch);
  }
  absl::Notification entered_;
  absl::Notification release_;
};

TEST_CASE("a submitter never waits for a commit in progress", "[group_commit]") {
  MemoryStorage base;
  BlockingStorage storage(&base);
  GroupCommitter committer(&storage, Options(1, absl::Hours(1)));
  committer.Start();
  Results results;
  committer.Submit(OneRecord(1), 1, results.Callback(0));
  REQUIRE(storage.entered_.WaitForNotificationWithTimeout(absl::Seconds(30)));
  // The first group is stuck in Commit (an fsync that never ends); submitting still returns.
  for (uint64_t i = 1; i < 100; ++i) committer.Submit(OneRecord(i + 1), 1, results.Callback(i));
  REQUIRE(committer.pending_records() == 99);
  REQUIRE(results.count() == 0);
  storage.release_.Notify();
  committer.Stop();
  REQUIRE(results.count() == 100);
  // The 99 submissions that waited formed one group.
  REQUIRE(committer.stats().groups == 2);
  REQUIRE(Get(base, 100) == "event 100");
}

template <typename OpenFn>
void RunConcurrentSubmitters(OpenFn open) {
  std::unique_ptr<Storage> storage = open();
  GroupCommitter committer(storage.get(), Options(200, absl::Milliseconds(1)));
  committer.Start();
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 1500;
  std::vector<std::atomic<int>> calls(kThreads * kPerThread);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        const uint64_t id = static_cast<uint64_t>(t) * kPerThread + i;
        WriteBatch batch;
        batch.Put("log", Key(id), absl::StrCat("event ", id));
        committer.Submit(std::move(batch), 1, [&calls, &errors, id](absl::Status s) {
          if (!s.ok()) ++errors;
          ++calls[id];
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  committer.Stop();
  REQUIRE(errors.load() == 0);
  for (size_t id = 0; id < calls.size(); ++id) {
    INFO("submission " << id);
    REQUIRE(calls[id].load() == 1);
  }
  const auto stats = committer.stats();
  REQUIRE(stats.submissions == kThreads * kPerThread);
  REQUIRE(stats.groups < stats.submissions);  // submissions were grouped
  uint64_t count = 0;
  REQUIRE_OK(storage->Scan("log", "", "", [&](absl::string_view k, absl::string_view v) {
    REQUIRE(v == absl::StrCat("event ", internal::DecodeFixed64BE(k.data())));
    ++count;
    return true;
  }));
  REQUIRE(count == kThreads * kPerThread);
}

TEST_CASE("concurrent submitters on memory storage: every callback once, all data there",
          "[group_commit]") {
  RunConcurrentSubmitters([] { return NewMemoryStorage(); });
}

TEST_CASE("concurrent submitters on LMDB: every callback once, all data there", "[group_commit]") {
  TempDir dir;
  RunConcurrentSubmitters([&] {
    StorageOptions options;
    options.path = (dir.path() / "store").string();
    auto storage = OpenLmdbStorage(options);
    REQUIRE_OK(storage);
    return std::move(*storage);
  });
}

}  // namespace
}  // namespace gryph
