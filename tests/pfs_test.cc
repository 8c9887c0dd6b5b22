#include "gryph/broker/pfs.h"

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gryph/memory_storage.h"
#include "gryph/storage.h"
#include "gryph/testing/fault_injecting_storage.h"
#include "lib/pfs/pfs_keys.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{7};

SubscriberId S(uint64_t id) { return SubscriberId{id}; }

std::vector<SubscriberId> Subs(std::initializer_list<uint64_t> ids) {
  std::vector<SubscriberId> out;
  for (uint64_t id : ids) out.push_back(S(id));
  return out;
}

// Where the PFS's data lives across simulated crashes: a memory state or an LMDB directory.
class Backend {
 public:
  virtual ~Backend() = default;
  // The storage as committed so far (a fresh instance after Close()).
  virtual Storage* Open() = 0;
  virtual void Close() = 0;
};

class MemoryBackend : public Backend {
 public:
  Storage* Open() override {
    storage_ = std::make_unique<MemoryStorage>(state_);
    return storage_.get();
  }
  void Close() override { storage_.reset(); }

 private:
  std::shared_ptr<MemoryStorage::State> state_ = MemoryStorage::NewState();
  std::unique_ptr<MemoryStorage> storage_;
};

class LmdbBackend : public Backend {
 public:
  Storage* Open() override {
    StorageOptions so;
    so.path = dir_.path().string();
    so.durability = Durability::kNoSync;  // a process crash is simulated, not a machine crash
    so.initial_map_bytes = 1 << 20;
    auto opened = OpenLmdbStorage(so);
    REQUIRE_OK(opened);
    storage_ = *std::move(opened);
    return storage_.get();
  }
  void Close() override { storage_.reset(); }

 private:
  testing::TempDir dir_;
  std::unique_ptr<Storage> storage_;
};

// A PFS over a fault-injecting storage that survives Restart().
struct Harness {
  explicit Harness(PfsOptions o = Options(), std::unique_ptr<Backend> b = nullptr)
      : options(o), backend(b ? std::move(b) : std::make_unique<MemoryBackend>()) {
    Open();
  }
  static PfsOptions Options() {
    PfsOptions o;
    o.pubend = kP;
    return o;
  }
  ~Harness() {
    pfs.reset();
    faults.reset();
    backend->Close();
  }
  void Open() {
    storage = backend->Open();
    faults = std::make_unique<FaultInjectingStorage>(storage);
    auto opened = PFS::Open(options, faults.get());
    REQUIRE_OK(opened);
    pfs = *std::move(opened);
  }
  absl::Status TryOpen() {
    storage = backend->Open();
    faults = std::make_unique<FaultInjectingStorage>(storage);
    auto opened = PFS::Open(options, faults.get());
    if (opened.ok()) pfs = *std::move(opened);
    return opened.status();
  }
  // A crash: everything in memory is gone, only committed batches remain.
  void Restart() {
    pfs.reset();
    faults.reset();
    backend->Close();
    Open();
  }
  void Add(uint64_t id) {
    WriteBatch b;
    REQUIRE_OK(pfs->AddSubscriber(S(id), &b));
    REQUIRE_OK(pfs->Commit(b));
  }
  void Remove(uint64_t id) {
    WriteBatch b;
    REQUIRE_OK(pfs->RemoveSubscriber(S(id), &b));
    REQUIRE_OK(pfs->Commit(b));
  }
  void Write(Tick t, std::initializer_list<uint64_t> ids) {
    WriteBatch b;
    REQUIRE_OK(pfs->Write(t, Subs(ids), &b));
    REQUIRE_OK(pfs->Commit(b));
  }
  void Chop(Tick t) {
    WriteBatch b;
    REQUIRE_OK(pfs->Chop(t, &b));
    REQUIRE_OK(pfs->Commit(b));
  }
  // Reads the whole window with a buffer of `buffer` ticks; *lost gets the largest lost_through.
  std::vector<Tick> ReadAll(uint64_t id, Tick from, Tick to, size_t buffer = 1000,
                            Tick* lost = nullptr) {
    auto reader = pfs->NewReader(S(id), from, to);
    REQUIRE_OK(reader);
    std::vector<Tick> out;
    PFS::ReadResult r;
    while (!(*reader)->done()) {
      REQUIRE_OK((*reader)->Read(buffer, &r));
      REQUIRE(r.ticks.size() <= buffer);
      if (lost != nullptr) *lost = std::max(*lost, r.lost_through);
      out.insert(out.end(), r.ticks.begin(), r.ticks.end());
    }
    return out;
  }
  absl::Status ReadAllStatus(uint64_t id, Tick from, Tick to) {
    auto reader = pfs->NewReader(S(id), from, to);
    if (!reader.ok()) return reader.status();
    PFS::ReadResult r;
    while (!(*reader)->done()) {
      absl::Status s = (*reader)->Read(1000, &r);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  std::optional<std::string> Record(Tick t) {
    auto v = storage->Get("pfs.records", internal::PfsRecordKey(kP, t));
    REQUIRE_OK(v);
    return *v;
  }
  size_t StoredRecords() {
    size_t n = 0;
    REQUIRE_OK(storage->Scan("pfs.records", "", "", [&](absl::string_view, absl::string_view) {
      ++n;
      return true;
    }));
    return n;
  }

  PfsOptions options;
  std::unique_ptr<Backend> backend;
  Storage* storage = nullptr;
  std::unique_ptr<FaultInjectingStorage> faults;
  std::unique_ptr<PFS> pfs;
};

// A record value as docs/format.md ("PFS") specifies it, written independently of the PFS: a header
// with the widths, then (subscriber, tick - previous tick or 0) pairs, big-endian.
std::string Rec(Tick t, std::vector<std::pair<uint64_t, Tick>> entries) {
  auto width = [](uint64_t v) {
    int w = 1;
    while (w < 8 && (v >> (8 * w)) != 0) ++w;
    return w;
  };
  uint64_t max_delta = 0;
  for (const auto& [id, prev] : entries) {
    if (prev != 0) max_delta = std::max(max_delta, t - prev);
  }
  const int iw = width(entries.back().first);
  const int dw = width(max_delta);
  std::string out(1, static_cast<char>(((iw - 1) << 4) | (dw - 1)));
  for (const auto& [id, prev] : entries) {
    for (int i = iw - 1; i >= 0; --i) out += static_cast<char>(id >> (8 * i));
    const uint64_t delta = prev == 0 ? 0 : t - prev;
    for (int i = dw - 1; i >= 0; --i) out += static_cast<char>(delta >> (8 * i));
  }
  return out;
}

// ---- Unit tests ---------------------------------------------------------------------------------

TEST_CASE("a PFS record holds the tick and each subscriber's previous record, compactly", "[pfs]") {
  Harness h;
  for (uint64_t id : {1, 2, 3}) h.Add(id);
  h.Write(10, {2, 1});
  h.Write(20, {3, 1});
  h.Write(30, {1});
  // The key is pubend ‖ tick; the value a header with the field widths, then (subscriber,
  // tick - previous tick) pairs sorted by subscriber, 0 for "no previous record".
  REQUIRE(h.Record(10) == std::string("\x00\x01\x00\x02\x00", 5));
  REQUIRE(h.Record(20) == std::string("\x00\x01\x0a\x03\x00", 5));
  REQUIRE(h.Record(30) == Rec(30, {{1, 20}}));
  REQUIRE(h.pfs->last_timestamp() == 30);
  REQUIRE(h.pfs->last_index(S(1)) == Tick{30});
  REQUIRE(h.pfs->last_index(S(2)) == Tick{10});
  REQUIRE(h.pfs->last_index(S(3)) == Tick{20});
  REQUIRE(h.pfs->last_index(S(4)) == std::nullopt);
  // Wide ids and deltas widen every entry of their record (5-byte ids, 2-byte deltas here).
  const uint64_t big = 0x123456789;
  h.Add(big);
  h.Write(1000, {big});
  h.Write(1300, {big, 3});
  REQUIRE(h.Record(1300) ==
          std::string("\x41\x00\x00\x00\x00\x03\x05\x00\x01\x23\x45\x67\x89\x01\x2c", 15));
  REQUIRE(h.Record(1300) == Rec(1300, {{3, 20}, {big, 1000}}));
}

TEST_CASE("a PFS record finds each of its subscribers, however their ids are spread", "[pfs]") {
  testing::Rng rng(5);
  for (int shape = 0; shape < 4; ++shape) {
    for (size_t n : {1, 2, 9, 10, 100, 1000}) {
      std::set<uint64_t> ids;
      while (ids.size() < n) {
        const uint64_t r = rng.Next();
        switch (shape) {
          case 0: ids.insert(1 + r % (n * 10)); break;               // even
          case 1: ids.insert(uint64_t{1} << (r % 64)); break;        // exponential
          case 2: ids.insert(r % 2 ? 1 + r % 50 : (r >> 1)); break;  // two clusters
          default: ids.insert(r == 0 ? 1 : r); break;                // full 64-bit range
        }
        if (shape == 1 && ids.size() == 64) break;
      }
      std::vector<std::pair<uint64_t, Tick>> entries;
      for (uint64_t id : ids) entries.emplace_back(id, 0);
      const std::string value = Rec(1000, entries);
      internal::PfsRecordView view;
      REQUIRE(view.Parse(value));
      REQUIRE(view.count() == ids.size());
      size_t i = 0;
      for (uint64_t id : ids) {
        INFO("shape " << shape << " n " << n << " id " << id);
        REQUIRE(view.Find(id) == i++);
        if (!ids.contains(id + 1)) REQUIRE(view.Find(id + 1) == view.count());
        if (id > 1 && !ids.contains(id - 1)) REQUIRE(view.Find(id - 1) == view.count());
      }
      REQUIRE(view.Find(0) == view.count());
    }
  }
}

TEST_CASE("the PFS writes no record for a tick that matched nobody", "[pfs]") {
  Harness h;
  h.Add(1);
  WriteBatch b;
  REQUIRE_OK(h.pfs->Write(5, {}, &b));
  REQUIRE(b.empty());
  REQUIRE(h.pfs->last_timestamp() == 0);
  h.Write(6, {1});
  REQUIRE(h.StoredRecords() == 1);
}

TEST_CASE("a PFS write at or below lastTimestamp is a no-op, as a replay after a crash", "[pfs]") {
  Harness h;
  h.Add(1);
  h.Add(2);
  h.Write(10, {1});
  WriteBatch b;
  REQUIRE_OK(h.pfs->Write(10, Subs({1, 2}), &b));
  REQUIRE_OK(h.pfs->Write(9, Subs({2}), &b));
  REQUIRE(b.empty());
  REQUIRE(h.pfs->last_index(S(2)) == Tick{0});
  REQUIRE(h.Record(10) == Rec(10, {{1, 0}}));
}

TEST_CASE("bad PFS writes fail and change nothing", "[pfs]") {
  Harness h;
  h.Add(1);
  h.Add(2);
  WriteBatch b;
  REQUIRE_CODE(h.pfs->Write(5, Subs({1, 9}), &b), absl::StatusCode::kNotFound);
  REQUIRE_CODE(h.pfs->Write(5, Subs({1, 2, 1}), &b), absl::StatusCode::kInvalidArgument);
  REQUIRE(b.empty());
  REQUIRE(h.pfs->last_timestamp() == 0);
  REQUIRE(h.pfs->last_index(S(1)) == Tick{0});
  REQUIRE_CODE(h.pfs->AddSubscriber(S(1), &b), absl::StatusCode::kAlreadyExists);
  REQUIRE_CODE(h.pfs->RemoveSubscriber(S(3), &b), absl::StatusCode::kNotFound);
  REQUIRE(b.empty());
  REQUIRE_CODE(h.pfs->NewReader(S(3), 0, 10), absl::StatusCode::kNotFound);
  REQUIRE_CODE(h.pfs->NewReader(S(1), 10, 5), absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a PFS batch read returns the subscriber's Q ticks of the window in order", "[pfs]") {
  Harness h;
  h.Add(1);
  h.Add(2);
  for (Tick t = 1; t <= 100; ++t) {
    if (t % 3 == 0) {
      h.Write(t, {1, 2});
    } else if (t % 5 == 0) {
      h.Write(t, {2});
    }
  }
  std::vector<Tick> want;
  for (Tick t = 31; t <= 70; ++t) {
    if (t % 3 == 0) want.push_back(t);
  }
  REQUIRE(h.ReadAll(1, 30, 70) == want);
  // S ticks are implied: one read reports the whole window.
  auto reader = h.pfs->NewReader(S(1), 30, 70);
  REQUIRE_OK(reader);
  PFS::ReadResult r;
  REQUIRE_OK((*reader)->Read(1000, &r));
  REQUIRE(r.ticks == want);
  REQUIRE(r.through == 70);
  REQUIRE(r.lost_through == 0);
  REQUIRE((*reader)->done());
  // A window past the last record reports S up to its end.
  REQUIRE(h.ReadAll(1, 99, 150).empty());
  REQUIRE(h.ReadAll(1, 0, 0).empty());
}

TEST_CASE("a long PFS window is read in several calls that continue where the last stopped",
          "[pfs]") {
  Harness h;
  h.Add(1);
  for (Tick t = 1; t <= 50; ++t) h.Write(t * 2, {1});
  auto reader = h.pfs->NewReader(S(1), 10, 80);
  REQUIRE_OK(reader);
  PFS::ReadResult r;
  REQUIRE_OK((*reader)->Read(4, &r));
  REQUIRE(r.ticks == std::vector<Tick>{12, 14, 16, 18});
  REQUIRE(r.through == 18);  // (10, 18] reported; 19.. not yet
  REQUIRE((*reader)->position() == 18);
  REQUIRE_OK((*reader)->Read(4, &r));
  REQUIRE(r.ticks == std::vector<Tick>{20, 22, 24, 26});
  std::vector<Tick> rest;
  while (!(*reader)->done()) {
    REQUIRE_OK((*reader)->Read(4, &r));
    rest.insert(rest.end(), r.ticks.begin(), r.ticks.end());
  }
  REQUIRE(rest.front() == 28);
  REQUIRE(rest.back() == 80);
  REQUIRE(r.through == 80);
}

TEST_CASE("a PFS reader walks a long window in bounded chunks", "[pfs]") {
  PfsOptions o = Harness::Options();
  o.reader_chunk_ticks = 4;
  Harness h(o);
  h.Add(1);
  h.Add(2);
  std::vector<Tick> want;
  for (Tick t = 1; t <= 200; ++t) {
    if (t % 7 == 0 || t % 11 == 0) {
      h.Write(t, {1});
      if (t > 5 && t <= 190) want.push_back(t);
    } else {
      h.Write(t, {2});
    }
  }
  for (size_t buffer : {1, 3, 4, 5, 100}) {
    INFO("buffer " << buffer);
    REQUIRE(h.ReadAll(1, 5, 190, buffer) == want);
  }
}

TEST_CASE("a PFS reader reaches records written after it was created", "[pfs]") {
  Harness h;
  h.Add(1);
  h.Write(10, {1});
  h.Write(20, {1});
  auto reader = h.pfs->NewReader(S(1), 0, 20);
  REQUIRE_OK(reader);
  PFS::ReadResult r;
  REQUIRE_OK((*reader)->Read(1, &r));
  REQUIRE(r.ticks == std::vector<Tick>{10});
  // The constream moves on while the catchup stream delivers.
  h.Write(30, {1});
  h.Write(40, {1});
  (*reader)->ExtendTo(35);
  h.Write(50, {1});
  (*reader)->ExtendTo(60);
  std::vector<Tick> got;
  while (!(*reader)->done()) {
    REQUIRE_OK((*reader)->Read(1, &r));
    got.insert(got.end(), r.ticks.begin(), r.ticks.end());
  }
  REQUIRE(got == std::vector<Tick>{20, 30, 40, 50});
  // Once done, a later extension walks only the new part.
  h.Write(70, {1});
  (*reader)->ExtendTo(70);
  REQUIRE_OK((*reader)->Read(10, &r));
  REQUIRE(r.ticks == std::vector<Tick>{70});
  REQUIRE((*reader)->done());
  // A window end beyond what existed at creation (the caller wrote S ticks since).
  auto late = h.pfs->NewReader(S(1), 45, 100);
  REQUIRE_OK(late);
  h.Write(80, {1});
  REQUIRE_OK((*late)->Read(10, &r));
  REQUIRE(r.ticks == std::vector<Tick>{50, 70, 80});
}

TEST_CASE("PFS reads see records whose batch has not committed yet", "[pfs]") {
  Harness h;
  h.Add(1);
  h.Write(10, {1});
  WriteBatch pending;
  REQUIRE_OK(h.pfs->Write(20, Subs({1}), &pending));
  REQUIRE_OK(h.pfs->Write(30, Subs({1}), &pending));
  REQUIRE(h.ReadAll(1, 0, 30) == std::vector<Tick>{10, 20, 30});
  REQUIRE(h.ReadAll(1, 0, 25) == std::vector<Tick>{10, 20});
  REQUIRE_OK(h.faults->Commit(pending));
  h.pfs->MarkCommitted(30);
  REQUIRE(h.ReadAll(1, 0, 30) == std::vector<Tick>{10, 20, 30});
  h.Restart();
  REQUIRE(h.ReadAll(1, 0, 30) == std::vector<Tick>{10, 20, 30});
}

TEST_CASE("PFS records and latestDelivered commit in the caller's one transaction", "[pfs]") {
  Harness h;
  h.Add(1);
  WriteBatch b;
  REQUIRE_OK(h.pfs->Write(10, Subs({1}), &b));
  b.Put("shb.meta", "latestDelivered", internal::Fixed64BE(10));
  // The caller's commit fails: the PFS is reopened and recovers exactly the committed state.
  h.faults->FailCommitNumber(h.faults->commits_attempted() + 1, absl::UnavailableError("disk"));
  REQUIRE_CODE(h.faults->Commit(b), absl::StatusCode::kUnavailable);
  h.Restart();
  REQUIRE(h.pfs->last_timestamp() == 0);
  REQUIRE(h.pfs->last_index(S(1)) == Tick{0});
  REQUIRE_OK(h.pfs->Write(10, Subs({1}), &b));  // the replay writes it again
  REQUIRE_OK(h.faults->Commit(b));
  h.Restart();
  REQUIRE(h.pfs->last_index(S(1)) == Tick{10});
  auto ld = h.storage->Get("shb.meta", "latestDelivered");
  REQUIRE_OK(ld);
  REQUIRE(ld->has_value());
}

TEST_CASE("a failed convenience commit fails the PFS until it is reopened", "[pfs]") {
  Harness h;
  h.Add(1);
  h.faults->FailNextCommitWithMapFull();
  WriteBatch b;
  REQUIRE_OK(h.pfs->Write(10, Subs({1}), &b));
  REQUIRE_CODE(h.pfs->Commit(b), absl::StatusCode::kResourceExhausted);
  REQUIRE_CODE(h.pfs->status(), absl::StatusCode::kFailedPrecondition);
  WriteBatch other;
  REQUIRE_CODE(h.pfs->Write(11, Subs({1}), &other), absl::StatusCode::kFailedPrecondition);
  REQUIRE_CODE(h.pfs->NewReader(S(1), 0, 10), absl::StatusCode::kFailedPrecondition);
  h.Restart();
  REQUIRE_OK(h.pfs->status());
  REQUIRE(h.pfs->last_index(S(1)) == Tick{0});
}

TEST_CASE("PFS lastIndex is recovered from the checkpoint plus a bounded tail", "[pfs]") {
  PfsOptions o = Harness::Options();
  o.checkpoint_interval = 10;
  Harness h(o);
  for (uint64_t id = 1; id <= 20; ++id) h.Add(id);
  std::map<uint64_t, Tick> want;
  testing::Rng rng(1);
  for (Tick t = 1; t <= 137; ++t) {
    std::vector<SubscriberId> subs;
    for (uint64_t id = 1; id <= 20; ++id) {
      if (rng.OneIn(4)) {
        subs.push_back(S(id));
        want[id] = t;
      }
    }
    if (subs.empty()) continue;
    WriteBatch b;
    REQUIRE_OK(h.pfs->Write(t, subs, &b));
    REQUIRE_OK(h.pfs->Commit(b));
  }
  h.Restart();
  REQUIRE(h.pfs->recovered_tail_records() < 10);
  REQUIRE(h.pfs->last_timestamp() == 137);
  for (uint64_t id = 1; id <= 20; ++id) REQUIRE(h.pfs->last_index(S(id)) == want[id]);
  // An explicit checkpoint leaves no tail.
  WriteBatch b;
  REQUIRE_OK(h.pfs->Checkpoint(&b));
  REQUIRE_OK(h.pfs->Commit(b));
  h.Restart();
  REQUIRE(h.pfs->recovered_tail_records() == 0);
  for (uint64_t id = 1; id <= 20; ++id) REQUIRE(h.pfs->last_index(S(id)) == want[id]);
}

TEST_CASE("a PFS window starting below the chop point reports that part lost", "[pfs]") {
  Harness h;
  h.Add(1);
  h.Add(2);
  for (Tick t = 10; t <= 100; t += 10) h.Write(t, {1});
  h.Write(105, {2});
  h.Chop(45);
  REQUIRE(h.pfs->chopped_through() == 45);
  REQUIRE(!h.Record(40).has_value());
  REQUIRE(h.Record(50).has_value());
  Tick lost = 0;
  REQUIRE(h.ReadAll(1, 20, 100, 1000, &lost) == std::vector<Tick>{50, 60, 70, 80, 90, 100});
  REQUIRE(lost == 45);
  // A window entirely above it loses nothing; one entirely below it is all lost.
  lost = 0;
  REQUIRE(h.ReadAll(1, 60, 100, 1000, &lost) == std::vector<Tick>{70, 80, 90, 100});
  REQUIRE(lost == 0);
  lost = 0;
  REQUIRE(h.ReadAll(1, 10, 30, 1000, &lost).empty());
  REQUIRE(lost == 30);
  // Subscriber 2's chain points into the chopped part: the walk stops there.
  REQUIRE(h.ReadAll(2, 0, 105) == std::vector<Tick>{105});
  h.Restart();
  REQUIRE(h.pfs->chopped_through() == 45);
  lost = 0;
  REQUIRE(h.ReadAll(1, 0, 60, 1000, &lost) == std::vector<Tick>{50, 60});
  REQUIRE(lost == 45);
}

// Readers of subscriber `id` over (from, to], owned by the caller.
std::vector<std::unique_ptr<PFS::Reader>> NewReaders(Harness& h,
                                                     std::initializer_list<uint64_t> ids, Tick from,
                                                     Tick to) {
  std::vector<std::unique_ptr<PFS::Reader>> readers;
  for (uint64_t id : ids) {
    auto r = h.pfs->NewReader(S(id), from, to);
    REQUIRE_OK(r);
    readers.push_back(*std::move(r));
  }
  return readers;
}

std::vector<PFS::Reader*> Raw(const std::vector<std::unique_ptr<PFS::Reader>>& readers) {
  std::vector<PFS::Reader*> raw;
  for (const auto& r : readers) raw.push_back(r.get());
  return raw;
}

TEST_CASE("a PFS pass over records a pass read lately reads them from memory", "[pfs]") {
  Harness h;
  for (uint64_t id = 1; id <= 4; ++id) h.Add(id);
  for (Tick t = 1; t <= 100; ++t) h.Write(t, {1, 2, 3, 4});
  std::vector<PFS::ReadResult> results;
  auto first = NewReaders(h, {1, 2}, 0, 100);
  REQUIRE_OK(h.pfs->ReadTogether(Raw(first), 60, &results));
  REQUIRE(results[0].through == 60);
  // The next group of catchups asks for the same records: storage is not asked again.
  h.faults->FailReads(absl::UnavailableError("storage read"));
  auto second = NewReaders(h, {3, 4}, 10, 100);
  REQUIRE_OK(h.pfs->ReadTogether(Raw(second), 30, &results));
  REQUIRE(results[1].through == 40);
  REQUIRE(results[1].ticks.size() == 30);
  REQUIRE(results[1].ticks.front() == 11);
  // Beyond what was read, it is.
  REQUIRE(h.pfs->ReadTogether(Raw(second), 30, &results).code() == absl::StatusCode::kUnavailable);
  h.faults->ClearFaults();
  REQUIRE_OK(h.pfs->ReadTogether(Raw(second), 30, &results));
  REQUIRE(results[0].ticks.front() == 41);
  REQUIRE(results[0].through == 70);
}

TEST_CASE("a PFS pass stops once its records' bytes pass max_bytes, after one record at least",
          "[pfs]") {
  Harness h;
  for (uint64_t id = 1; id <= 4; ++id) h.Add(id);
  for (Tick t = 1; t <= 40; ++t) h.Write(t, {1, 2, 3, 4});
  h.Restart();  // from storage, not the records still in memory
  for (uint64_t id = 5; id <= 6; ++id) h.Add(id);
  WriteBatch uncommitted;  // and records only in memory
  for (Tick t = 41; t <= 60; ++t) REQUIRE_OK(h.pfs->Write(t, Subs({1, 2, 5, 6}), &uncommitted));
  std::vector<PFS::ReadResult> results;
  auto readers = NewReaders(h, {1, 2}, 0, 60);
  // A bound below one record's size: a record per pass, none skipped, storage and memory alike.
  std::vector<Tick> read;
  for (Tick t = 1; t <= 60; ++t) {
    REQUIRE_OK(h.pfs->ReadTogether(Raw(readers), 1000, &results, /*max_bytes=*/1));
    REQUIRE(results[0].through == t);
    REQUIRE(results[1].through == t);
    REQUIRE(results[1].ticks == std::vector<Tick>{t});
    read.insert(read.end(), results[0].ticks.begin(), results[0].ticks.end());
  }
  REQUIRE(read.size() == 60);
  REQUIRE(read.back() == 60);
  // Larger bounds read more records per pass, never fewer.
  size_t last = 1;
  for (size_t max_bytes : {size_t{64}, size_t{256}, size_t{1024}, SIZE_MAX}) {
    auto again = NewReaders(h, {1, 2}, 0, 60);
    REQUIRE_OK(h.pfs->ReadTogether(Raw(again), 1000, &results, max_bytes));
    INFO("max_bytes " << max_bytes);
    REQUIRE(results[0].through >= last);
    REQUIRE(results[0].ticks.size() == results[0].through);
    last = results[0].through;
  }
  REQUIRE(last == 60);
}

TEST_CASE("a PFS pass starts above the chop point even where memory still holds older records",
          "[pfs]") {
  Harness h;
  h.Add(1);
  h.Add(2);
  for (Tick t = 1; t <= 100; ++t) h.Write(t, {1, 2});
  std::vector<PFS::ReadResult> results;
  auto all = NewReaders(h, {1, 2}, 0, 100);
  REQUIRE_OK(h.pfs->ReadTogether(Raw(all), 1000, &results));  // (0, 100] kept
  h.Chop(50);
  // A reader whose window the chop took whole starts the pass low, yet the pass counts only
  // records that still exist: the other reader gets its two.
  auto gone = NewReaders(h, {1}, 0, 40);
  auto live = NewReaders(h, {2}, 50, 100);
  std::vector<PFS::Reader*> both = {gone[0].get(), live[0].get()};
  REQUIRE_OK(h.pfs->ReadTogether(absl::MakeSpan(both), 2, &results));
  REQUIRE(results[1].ticks == std::vector<Tick>{51, 52});
}

TEST_CASE("a chop reaching into a PFS reader's unread window is reported by its next read",
          "[pfs]") {
  Harness h;
  h.Add(1);
  for (Tick t = 1; t <= 20; ++t) h.Write(t, {1});
  auto reader = h.pfs->NewReader(S(1), 0, 20);
  REQUIRE_OK(reader);
  PFS::ReadResult r;
  REQUIRE_OK((*reader)->Read(3, &r));
  REQUIRE(r.ticks == std::vector<Tick>{1, 2, 3});
  h.Chop(8);
  REQUIRE_OK((*reader)->Read(3, &r));
  REQUIRE(r.lost_through == 8);
  REQUIRE(r.ticks == std::vector<Tick>{9, 10, 11});
}

TEST_CASE("a PFS read that fails after a chop still reports the chop on the next read", "[pfs]") {
  PfsOptions o = Harness::Options();
  o.reader_chunk_ticks = 4;  // the read after the chop walks storage again
  Harness h(o);
  h.Add(1);
  for (Tick t = 1; t <= 20; ++t) h.Write(t, {1});
  h.Restart();  // the records are only in storage
  auto reader = h.pfs->NewReader(S(1), 0, 20);
  REQUIRE_OK(reader);
  PFS::ReadResult r;
  REQUIRE_OK((*reader)->Read(3, &r));
  REQUIRE(r.ticks == std::vector<Tick>{1, 2, 3});
  h.Chop(8);
  h.faults->FailReads(absl::UnavailableError("injected read failure"));
  REQUIRE_CODE((*reader)->Read(3, &r), absl::StatusCode::kUnavailable);
  h.faults->ClearFaults();
  REQUIRE_OK((*reader)->Read(3, &r));
  REQUIRE(r.lost_through == 8);  // (3, 8] is still owed as lost, not taken for silence
  REQUIRE(r.ticks == std::vector<Tick>{9, 10, 11});
}

TEST_CASE("chopping the whole PFS log keeps lastTimestamp and lastIndex across a restart",
          "[pfs]") {
  Harness h;
  h.Add(1);
  h.Write(10, {1});
  h.Write(20, {1});
  h.Chop(50);
  REQUIRE(h.StoredRecords() == 0);
  REQUIRE(h.pfs->last_timestamp() == 50);
  WriteBatch b;
  REQUIRE_OK(h.pfs->Write(40, Subs({1}), &b));  // at or below the chop point: a no-op
  REQUIRE(b.empty());
  h.Restart();
  REQUIRE(h.pfs->last_timestamp() == 50);
  REQUIRE(h.pfs->last_index(S(1)) == Tick{20});
  h.Write(60, {1});
  REQUIRE(h.ReadAll(1, 0, 60) == std::vector<Tick>{60});
}

TEST_CASE("a removed PFS subscriber is unknown and a reused id starts a fresh chain", "[pfs]") {
  Harness h;
  h.Add(1);
  h.Add(2);
  h.Write(10, {1, 2});
  h.Write(20, {1});
  auto reader = h.pfs->NewReader(S(1), 0, 20);
  REQUIRE_OK(reader);
  h.Remove(1);
  REQUIRE(h.pfs->last_index(S(1)) == std::nullopt);
  PFS::ReadResult r;
  REQUIRE_CODE((*reader)->Read(10, &r), absl::StatusCode::kNotFound);
  REQUIRE_CODE(h.pfs->NewReader(S(1), 0, 20), absl::StatusCode::kNotFound);
  WriteBatch b;
  REQUIRE_CODE(h.pfs->Write(30, Subs({1}), &b), absl::StatusCode::kNotFound);
  h.Add(1);  // the id is reused
  REQUIRE_CODE((*reader)->Read(10, &r), absl::StatusCode::kNotFound);
  REQUIRE(h.pfs->last_index(S(1)) == Tick{0});
  REQUIRE(h.ReadAll(1, 0, 20).empty());
  h.Write(30, {1, 2});
  REQUIRE(h.Record(30) == Rec(30, {{1, 0}, {2, 10}}));
  REQUIRE(h.ReadAll(1, 0, 30) == std::vector<Tick>{30});
  h.Restart();
  REQUIRE(h.pfs->last_index(S(1)) == Tick{30});
  REQUIRE(h.ReadAll(1, 0, 30) == std::vector<Tick>{30});
  REQUIRE(h.ReadAll(2, 0, 30) == std::vector<Tick>{10, 30});
}

TEST_CASE("a PFS subscriber removed after the checkpoint is not revived by recovery", "[pfs]") {
  PfsOptions o = Harness::Options();
  o.checkpoint_interval = 2;
  Harness h(o);
  h.Add(1);
  h.Add(2);
  h.Write(10, {1});
  h.Write(20, {1, 2});  // checkpoint: lastIndex(1) = 20
  h.Write(30, {1});
  h.Remove(1);
  h.Restart();
  REQUIRE(h.pfs->last_index(S(1)) == std::nullopt);
  h.Add(1);
  h.Restart();
  REQUIRE(h.pfs->last_index(S(1)) == Tick{0});  // not 30 from the old registration's record
  REQUIRE(h.ReadAll(1, 0, 30).empty());
}

TEST_CASE("the PFS of pubends sharing one storage keep separate logs", "[pfs]") {
  auto storage = NewMemoryStorage();
  PfsOptions a;
  a.pubend = PubendId{1};
  PfsOptions b = a;
  b.pubend = PubendId{2};
  auto pa = PFS::Open(a, storage.get());
  auto pb = PFS::Open(b, storage.get());
  REQUIRE_OK(pa);
  REQUIRE_OK(pb);
  WriteBatch batch;
  REQUIRE_OK((*pa)->AddSubscriber(S(1), &batch));
  REQUIRE_OK((*pb)->AddSubscriber(S(1), &batch));
  REQUIRE_OK((*pa)->Write(10, Subs({1}), &batch));
  REQUIRE_OK((*pb)->Write(5, Subs({1}), &batch));
  REQUIRE_OK((*pb)->Write(15, Subs({1}), &batch));
  REQUIRE_OK((*pb)->Chop(5, &batch));
  REQUIRE_OK(storage->Commit(batch));
  pa->reset();
  pb->reset();
  pa = PFS::Open(a, storage.get());
  pb = PFS::Open(b, storage.get());
  REQUIRE_OK(pa);
  REQUIRE_OK(pb);
  REQUIRE((*pa)->last_timestamp() == 10);
  REQUIRE((*pa)->chopped_through() == 0);
  REQUIRE((*pb)->last_timestamp() == 15);
  REQUIRE((*pb)->last_index(S(1)) == Tick{15});
}

TEST_CASE("a damaged PFS record next to a pubend's last one is DataLoss, never a wrong lastIndex",
          "[pfs][damage]") {
  // Recovery finds a pubend's last record by seeking to the next pubend's first key and stepping
  // back. A damaged row there once made it take the table's last row instead, see another
  // pubend's key, skip the tail replay and open with lastIndex silently wrong. A damaged row's key
  // may itself be what is damaged, so the replay cannot tell whether it lies inside the pubend's
  // range: the open fails with DataLoss naming it.
  auto memory = NewMemoryStorage();
  FaultInjectingStorage storage(memory.get());
  PfsOptions a;
  a.pubend = PubendId{1};
  PfsOptions b = a;
  b.pubend = PubendId{2};
  {
    auto pa = PFS::Open(a, &storage);
    auto pb = PFS::Open(b, &storage);
    REQUIRE_OK(pa);
    REQUIRE_OK(pb);
    WriteBatch batch;
    REQUIRE_OK((*pa)->AddSubscriber(S(1), &batch));
    REQUIRE_OK((*pb)->AddSubscriber(S(1), &batch));
    REQUIRE_OK((*pa)->Write(10, Subs({1}), &batch));
    REQUIRE_OK((*pa)->Write(20, Subs({1}), &batch));
    REQUIRE_OK((*pb)->Write(5, Subs({1}), &batch));
    REQUIRE_OK((*pb)->Write(15, Subs({1}), &batch));
    REQUIRE_OK(storage.Commit(batch));
  }
  const std::string next = internal::PfsRecordKey(PubendId{2}, 5);
  storage.DamageRow("pfs.records", next);
  absl::StatusOr<std::unique_ptr<PFS>> pa = PFS::Open(a, &storage);
  REQUIRE(absl::IsDataLoss(pa.status()));
  REQUIRE(DamagedRowKey(pa.status()) == next);

  // Its own last record damaged: the same.
  storage.ClearFaults();
  const std::string last = internal::PfsRecordKey(PubendId{1}, 20);
  storage.DamageRow("pfs.records", last);
  pa = PFS::Open(a, &storage);
  REQUIRE(absl::IsDataLoss(pa.status()));
  REQUIRE(DamagedRowKey(pa.status()) == last);

  // Undamaged, it opens with what the records say.
  storage.ClearFaults();
  pa = PFS::Open(a, &storage);
  REQUIRE_OK(pa);
  CHECK((*pa)->last_timestamp() == 20);
  CHECK((*pa)->last_index(S(1)) == Tick{20});
}

TEST_CASE("damaged PFS data is reported as DataLoss", "[pfs]") {
  PfsOptions o = Harness::Options();
  o.checkpoint_interval = 100;
  Harness h(o);
  h.Add(1);
  h.Add(2);
  for (Tick t = 1; t <= 10; ++t) h.Write(t, {1, 2});
  auto put = [&](absl::string_view table, const std::string& key, const std::string& value) {
    WriteBatch b;
    b.Put(table, key, value);
    REQUIRE_OK(h.storage->Commit(b));
  };

  SECTION("a record with a reserved header bit set") {
    put("pfs.records", internal::PfsRecordKey(kP, 5), std::string("\x80\x01\x01", 3));
    h.pfs.reset();
    REQUIRE_CODE(h.TryOpen(), absl::StatusCode::kDataLoss);
  }
  SECTION("a record that is not a whole number of entries") {
    put("pfs.records", internal::PfsRecordKey(kP, 5), std::string("\x00\x01\x02\x03", 4));
    h.pfs.reset();
    REQUIRE_CODE(h.TryOpen(), absl::StatusCode::kDataLoss);
  }
  SECTION("a back-pointer that disagrees with the rebuilt lastIndex") {
    put("pfs.records", internal::PfsRecordKey(kP, 5), Rec(5, {{1, 3}, {2, 4}}));
    h.pfs.reset();
    REQUIRE_CODE(h.TryOpen(), absl::StatusCode::kDataLoss);
  }
  SECTION("a back-pointer to a missing record, found by a read") {
    WriteBatch cp;
    REQUIRE_OK(h.pfs->Checkpoint(&cp));
    REQUIRE_OK(h.pfs->Commit(cp));
    WriteBatch del;
    del.Delete("pfs.records", internal::PfsRecordKey(kP, 6));
    REQUIRE_OK(h.storage->Commit(del));
    h.Restart();  // after the checkpoint, recovery scans nothing and opens fine
    auto reader = h.pfs->NewReader(S(1), 0, 10);
    REQUIRE_OK(reader);
    PFS::ReadResult r;
    REQUIRE_CODE((*reader)->Read(100, &r), absl::StatusCode::kDataLoss);
    REQUIRE((*reader)->position() == 0);
  }
  SECTION("a record that does not hold the subscriber whose chain leads to it") {
    WriteBatch cp;
    REQUIRE_OK(h.pfs->Checkpoint(&cp));
    REQUIRE_OK(h.pfs->Commit(cp));
    put("pfs.records", internal::PfsRecordKey(kP, 6), Rec(6, {{2, 5}}));
    h.Restart();
    REQUIRE_CODE(h.ReadAllStatus(1, 0, 10), absl::StatusCode::kDataLoss);
  }
  SECTION("a subscriber row of the wrong size") {
    put("pfs.subscribers", internal::PfsSubscriberKey(kP, S(1)), std::string(8, '\0'));
    h.pfs.reset();
    REQUIRE_CODE(h.TryOpen(), absl::StatusCode::kDataLoss);
  }
  SECTION("a meta value of the wrong size") {
    put("pfs.meta", internal::PfsMetaKey(kP, 'C'), "short");
    h.pfs.reset();
    REQUIRE_CODE(h.TryOpen(), absl::StatusCode::kDataLoss);
  }
}

TEST_CASE("the PFS persists on LMDB across a reopen", "[pfs][lmdb]") {
  PfsOptions o = Harness::Options();
  o.checkpoint_interval = 4;
  Harness h(o, std::make_unique<LmdbBackend>());
  h.Add(1);
  h.Add(2);
  for (Tick t = 1; t <= 30; ++t) h.Write(t * 10, {t % 2 == 0 ? 1u : 2u});
  h.Chop(55);
  h.Restart();
  REQUIRE(h.pfs->last_timestamp() == 300);
  REQUIRE(h.pfs->last_index(S(1)) == Tick{300});
  REQUIRE(h.pfs->last_index(S(2)) == Tick{290});
  Tick lost = 0;
  const std::vector<Tick> got = h.ReadAll(1, 0, 300, 3, &lost);
  REQUIRE(lost == 55);
  REQUIRE(got.size() == 15 - 2);  // 60, 80, ..., 300
  REQUIRE(got.front() == 60);
}

// ---- Property tests against a naive model -------------------------------------------------------

// The naive model: tick -> set of subscribers for every record ever written (a chop hides
// records from reads but not from lastIndex), the registrations, and the chop point.
struct Model {
  struct Registration {
    Tick added_at = 0;
    uint64_t incarnation = 0;
  };
  std::map<Tick, std::set<uint64_t>> records;
  std::map<uint64_t, Registration> subs;
  Tick last = 0;     // lastTimestamp: the last record, or the chop point if higher
  Tick written = 0;  // the caller's latestDelivered: every tick up to here was written
  Tick chopped = 0;

  Tick LastIndex(uint64_t id) const {
    const Tick added_at = subs.at(id).added_at;
    for (auto it = records.rbegin(); it != records.rend() && it->first > added_at; ++it) {
      if (it->second.contains(id)) return it->first;
    }
    return 0;
  }
  // The Q ticks of `id` in (lo, hi] that a read may report.
  std::vector<Tick> Q(uint64_t id, Tick lo, Tick hi) const {
    lo = std::max({lo, chopped, subs.at(id).added_at});
    std::vector<Tick> out;
    for (auto it = records.upper_bound(lo); it != records.end() && it->first <= hi; ++it) {
      if (it->second.contains(id)) out.push_back(it->first);
    }
    return out;
  }
};

// What happens to a commit.
enum class Fate {
  kCommit,
  kFail,         // the commit fails; nothing of the batch is stored
  kCrashBefore,  // the process dies before the commit
  kCrashAfter,   // the batch is durable but the process dies before it learns so
};

// Random writes, reads (random windows, small buffers, continuation and extension), chops,
// checkpoints and subscriber churn, with commits that fail or crash as `fate` says. Checks every
// read against the model, lastIndex after every step, and the recovered state after every
// crash.
class PropertyRun {
 public:
  static constexpr uint64_t kPool = 12;  // subscriber ids 1..kPool

  PropertyRun(uint64_t seed, std::unique_ptr<Backend> backend, std::function<Fate(uint64_t)> fate)
      : rng_(seed), fate_(std::move(fate)), h_(RandomOptions(seed), std::move(backend)) {}

  static PfsOptions RandomOptions(uint64_t seed) {
    testing::Rng rng(seed * 7919 + 1);
    PfsOptions o = Harness::Options();
    o.checkpoint_interval = rng.Range(1, 6);
    o.reader_chunk_ticks = rng.OneIn(3) ? 1000 : rng.Range(1, 5);
    // No read cache, one so small that it splits and evicts all the time, or the default.
    o.read_cache_bytes = rng.OneIn(4) ? 0 : rng.OneIn(2) ? rng.Range(16, 2000) : o.read_cache_bytes;
    return o;
  }

  void Run(int steps) {
    for (int step = 0; step < steps; ++step) {
      INFO("step " << step);
      const uint64_t op = rng_.Uniform(100);
      if (op < 35) {
        Write();
      } else if (op < 42) {
        Add();
      } else if (op < 47) {
        Remove();
      } else if (op < 48) {
        Chop();
      } else if (op < 54) {
        REQUIRE_OK(h_.pfs->Checkpoint(&batch_));
      } else if (op < 68) {
        Commit();
      } else if (op < 76) {
        NewReader();
      } else if (op < 90) {
        AdvanceReader();
      } else if (op < 98) {
        ReadTogether();
      } else {
        Crash();  // with a batch still open
      }
      CheckLastIndex(pending_);
    }
  }

  uint64_t commits() const { return commits_; }

 private:
  struct LiveReader {
    std::unique_ptr<PFS::Reader> reader;
    uint64_t id;
    uint64_t incarnation;
  };

  std::vector<SubscriberId> RandomRegistered() {
    std::vector<SubscriberId> out;
    for (const auto& [id, reg] : pending_.subs) {
      if (rng_.OneIn(2)) out.push_back(S(id));
    }
    for (size_t i = out.size(); i > 1; --i) std::swap(out[i - 1], out[rng_.Uniform(i)]);
    return out;
  }

  void Write() {
    const size_t ops = batch_.count();
    if (rng_.OneIn(10) && pending_.last > 0) {  // a replay
      const Tick last = h_.pfs->last_timestamp();
      REQUIRE_OK(h_.pfs->Write(rng_.Range(1, pending_.last), RandomRegistered(), &batch_));
      REQUIRE(batch_.count() == ops);
      REQUIRE(h_.pfs->last_timestamp() == last);
      return;
    }
    const Tick t = pending_.written + rng_.Range(1, 3);
    std::vector<SubscriberId> subs = RandomRegistered();
    if (rng_.OneIn(15) && pending_.subs.size() < kPool) {
      uint64_t unknown = rng_.Range(1, kPool);
      while (pending_.subs.contains(unknown)) unknown = unknown % kPool + 1;
      subs.push_back(S(unknown));
      REQUIRE_CODE(h_.pfs->Write(t, subs, &batch_), absl::StatusCode::kNotFound);
      REQUIRE(batch_.count() == ops);
      return;
    }
    if (rng_.OneIn(15) && !subs.empty()) {
      subs.push_back(subs[rng_.Uniform(subs.size())]);
      REQUIRE_CODE(h_.pfs->Write(t, subs, &batch_), absl::StatusCode::kInvalidArgument);
      REQUIRE(batch_.count() == ops);
      return;
    }
    REQUIRE_OK(h_.pfs->Write(t, subs, &batch_));
    pending_.written = t;
    if (!subs.empty()) {
      for (SubscriberId s : subs) pending_.records[t].insert(s.value);
      pending_.last = t;
    }
    REQUIRE(h_.pfs->last_timestamp() == pending_.last);
  }

  void Add() {
    const uint64_t id = rng_.Range(1, kPool);
    if (pending_.subs.contains(id)) {
      REQUIRE_CODE(h_.pfs->AddSubscriber(S(id), &batch_), absl::StatusCode::kAlreadyExists);
      return;
    }
    REQUIRE_OK(h_.pfs->AddSubscriber(S(id), &batch_));
    pending_.subs[id] = {pending_.last, next_incarnation_++};
  }

  void Remove() {
    const uint64_t id = rng_.Range(1, kPool);
    if (!pending_.subs.contains(id)) {
      REQUIRE_CODE(h_.pfs->RemoveSubscriber(S(id), &batch_), absl::StatusCode::kNotFound);
      return;
    }
    REQUIRE_OK(h_.pfs->RemoveSubscriber(S(id), &batch_));
    pending_.subs.erase(id);
  }

  void Chop() {
    // Mostly well behind the written point, as the released point is; sometimes anywhere.
    const Tick t = rng_.OneIn(5)
                       ? rng_.Range(0, pending_.written)
                       : pending_.written - std::min<Tick>(pending_.written, rng_.Range(30, 100));
    REQUIRE_OK(h_.pfs->Chop(t, &batch_));
    if (t > pending_.chopped) {
      pending_.chopped = t;
      pending_.last = std::max(pending_.last, t);
    }
    REQUIRE(h_.pfs->chopped_through() == pending_.chopped);
  }

  void Commit() {
    ++commits_;
    const Fate fate = fate_(commits_);
    const uint64_t number = h_.faults->commits_attempted() + 1;
    // The caller's own state rides in the same transaction.
    batch_.Put("shb.meta", "latestDelivered", internal::Fixed64BE(pending_.written));
    const bool convenience = rng_.OneIn(5);
    auto commit = [&] { return convenience ? h_.pfs->Commit(batch_) : h_.faults->Commit(batch_); };
    switch (fate) {
      case Fate::kCommit:
        REQUIRE_OK(commit());
        committed_ = pending_;
        batch_.Clear();
        if (!convenience && !rng_.OneIn(4)) h_.pfs->MarkCommitted(pending_.written);
        return;
      case Fate::kFail:
        h_.faults->FailCommitNumber(number, absl::UnavailableError("injected commit failure"));
        REQUIRE_CODE(commit(), absl::StatusCode::kUnavailable);
        break;
      case Fate::kCrashBefore:
        h_.faults->SimulateCrash();
        REQUIRE_CODE(commit(), absl::StatusCode::kUnavailable);
        break;
      case Fate::kCrashAfter:
        h_.faults->CrashAfterCommitNumber(number);
        REQUIRE_CODE(commit(), absl::StatusCode::kUnavailable);
        committed_ = pending_;
        break;
    }
    Crash();
  }

  // Everything in memory is lost; the PFS is reopened from what committed and must agree with
  // the model at the last committed batch.
  void Crash() {
    readers_.clear();
    batch_.Clear();
    h_.Restart();
    pending_ = committed_;
    REQUIRE(h_.pfs->last_timestamp() == committed_.last);
    REQUIRE(h_.pfs->chopped_through() == committed_.chopped);
    REQUIRE(h_.pfs->recovered_tail_records() < h_.options.checkpoint_interval);
    REQUIRE(h_.pfs->subscriber_count() == committed_.subs.size());
    CheckLastIndex(committed_);
  }

  void CheckLastIndex(const Model& model) {
    for (uint64_t id = 1; id <= kPool; ++id) {
      INFO("subscriber " << id);
      if (model.subs.contains(id)) {
        REQUIRE(h_.pfs->last_index(S(id)) == model.LastIndex(id));
      } else {
        REQUIRE(h_.pfs->last_index(S(id)) == std::nullopt);
      }
    }
  }

  void NewReader() {
    const uint64_t id = rng_.Range(1, kPool);
    // Mostly recent windows (as a catchup's), sometimes anywhere.
    const Tick w = pending_.written;
    const Tick from = rng_.OneIn(3) ? rng_.Range(0, w) : rng_.Range(w - std::min<Tick>(w, 80), w);
    const Tick to = rng_.Range(from, w);
    auto reader = h_.pfs->NewReader(S(id), from, to);
    if (!pending_.subs.contains(id)) {
      REQUIRE_CODE(reader, absl::StatusCode::kNotFound);
      return;
    }
    REQUIRE_OK(reader);
    if (readers_.size() >= 4) readers_.erase(readers_.begin());
    readers_.push_back({*std::move(reader), id, pending_.subs.at(id).incarnation});
  }

  void AdvanceReader() {
    if (readers_.empty()) return NewReader();
    const size_t i = rng_.Uniform(readers_.size());
    PFS::Reader& reader = *readers_[i].reader;
    if (rng_.OneIn(4)) {
      reader.ExtendTo(rng_.Range(reader.end(), pending_.written));
      return;
    }
    // One read, or the rest of the window (several calls, each checked).
    const bool drain = rng_.OneIn(3);
    do {
      if (!ReadOnce(i)) return;
    } while (drain && !readers_[i].reader->done());
  }

  // What a read of subscriber `id`'s window (position, end] reported, against the model: the
  // chopped part lost, then exactly its Q ticks through r.through, at most `max` of them.
  void CheckRead(uint64_t id, Tick position, Tick end, size_t max, const PFS::ReadResult& r) {
    const Tick lost =
        pending_.chopped > position && position < end ? std::min(pending_.chopped, end) : 0;
    REQUIRE(r.lost_through == lost);
    const Tick lo = std::max(position, lost);
    REQUIRE(r.through >= lo);
    REQUIRE(r.through <= end);
    REQUIRE(r.ticks.size() <= max);
    REQUIRE(r.ticks == pending_.Q(id, lo, r.through));
  }

  // One Read on readers_[i], checked against the model; false if the reader was dropped.
  bool ReadOnce(size_t i) {
    LiveReader& live = readers_[i];
    PFS::Reader& reader = *live.reader;
    const size_t max = rng_.Range(1, 6);
    const Tick position = reader.position();
    const Tick end = reader.end();
    PFS::ReadResult r;
    const absl::Status s = reader.Read(max, &r);
    auto reg = pending_.subs.find(live.id);
    if (reg == pending_.subs.end() || reg->second.incarnation != live.incarnation) {
      REQUIRE_CODE(s, absl::StatusCode::kNotFound);
      readers_.erase(readers_.begin() + static_cast<ptrdiff_t>(i));
      return false;
    }
    REQUIRE_OK(s);
    INFO("subscriber " << live.id << " window (" << position << ", " << end << "] max " << max);
    CheckRead(live.id, position, end, max, r);
    if (r.through < end) {  // stopped early only with a full buffer, at its last tick
      REQUIRE(r.ticks.size() == max);
      REQUIRE(r.ticks.back() == r.through);
    }
    REQUIRE(reader.position() == r.through);
    return true;
  }

  // One ReadTogether over a random subset of the readers, each result checked against the
  // model as a Read of the part of its window the pass covered.
  void ReadTogether() {
    if (readers_.empty()) return NewReader();
    std::vector<size_t> chosen;
    for (size_t i = 0; i < readers_.size(); ++i) {
      if (rng_.OneIn(2) || readers_.size() == 1) chosen.push_back(i);
    }
    if (chosen.empty()) chosen.push_back(rng_.Uniform(readers_.size()));
    std::vector<PFS::Reader*> readers;
    std::vector<Tick> positions;
    bool stale = false;
    for (size_t i : chosen) {
      readers.push_back(readers_[i].reader.get());
      positions.push_back(readers_[i].reader->position());
      auto reg = pending_.subs.find(readers_[i].id);
      stale |= reg == pending_.subs.end() || reg->second.incarnation != readers_[i].incarnation;
    }
    const size_t max_records = rng_.Range(1, 6);
    // Sometimes a byte bound too, down to a record per pass.
    const size_t max_bytes = rng_.OneIn(2) ? SIZE_MAX : rng_.Range(1, 200);
    std::vector<PFS::ReadResult> results;
    const absl::Status s =
        h_.pfs->ReadTogether(absl::MakeSpan(readers), max_records, &results, max_bytes);
    if (stale) {
      REQUIRE_CODE(s, absl::StatusCode::kNotFound);
      for (size_t k = 0; k < chosen.size(); ++k) REQUIRE(readers[k]->position() == positions[k]);
      // Drop the stale readers, as a caller would.
      for (size_t k = chosen.size(); k-- > 0;) {
        auto reg = pending_.subs.find(readers_[chosen[k]].id);
        if (reg == pending_.subs.end() ||
            reg->second.incarnation != readers_[chosen[k]].incarnation) {
          readers_.erase(readers_.begin() + static_cast<ptrdiff_t>(chosen[k]));
        }
      }
      return;
    }
    REQUIRE_OK(s);
    REQUIRE(results.size() == chosen.size());
    bool any_open = false;
    bool any_moved = false;
    for (size_t k = 0; k < chosen.size(); ++k) {
      const LiveReader& live = readers_[chosen[k]];
      const PFS::ReadResult& r = results[k];
      const Tick position = positions[k];
      const Tick end = live.reader->end();
      INFO("subscriber " << live.id << " window (" << position << ", " << end << "] max records "
                         << max_records);
      any_open |= position < end;
      REQUIRE(live.reader->position() == r.through);
      if (r.through == position) {  // the pass stopped below this reader (or it was done)
        REQUIRE(r.ticks.empty());
        REQUIRE(r.lost_through == 0);
        continue;
      }
      any_moved = true;
      CheckRead(live.id, position, end, max_records, r);
    }
    // The reader lowest in the log always moves.
    REQUIRE(any_moved == any_open);
  }

  testing::Rng rng_;
  std::function<Fate(uint64_t)> fate_;
  Harness h_;
  Model committed_;
  Model pending_;
  WriteBatch batch_;
  std::vector<LiveReader> readers_;
  uint64_t next_incarnation_ = 1;
  uint64_t commits_ = 0;
};

Fate RandomFate(testing::Rng* rng) {
  const uint64_t r = rng->Uniform(20);
  if (r < 17) return Fate::kCommit;
  if (r == 17) return Fate::kFail;
  if (r == 18) return Fate::kCrashBefore;
  return Fate::kCrashAfter;
}

TEST_CASE("the PFS matches a naive model under random writes, reads, chops, churn and crashes",
          "[pfs][property]") {
  for (uint64_t seed : testing::Seeds(1000, 40)) {
    INFO("seed " << seed);
    testing::Rng fates(seed ^ 0x5eed);
    PropertyRun run(seed, std::make_unique<MemoryBackend>(),
                    [&](uint64_t) { return RandomFate(&fates); });
    run.Run(600);
  }
}

TEST_CASE(
    "after a crash or failed commit at every commit point, PFS lastIndex is exactly the "
    "last committed one",
    "[pfs][property][recovery]") {
  for (uint64_t seed : testing::Seeds(2000, 4)) {
    INFO("seed " << seed);
    uint64_t commits = 0;
    {
      PropertyRun dry(seed, std::make_unique<MemoryBackend>(),
                      [](uint64_t) { return Fate::kCommit; });
      dry.Run(150);
      commits = dry.commits();
    }
    REQUIRE(commits > 10);
    for (uint64_t n = 1; n <= commits; ++n) {
      for (Fate fate : {Fate::kFail, Fate::kCrashBefore, Fate::kCrashAfter}) {
        INFO("commit " << n << " fate " << static_cast<int>(fate));
        PropertyRun run(seed, std::make_unique<MemoryBackend>(),
                        [&](uint64_t i) { return i == n ? fate : Fate::kCommit; });
        run.Run(150);
      }
    }
  }
}

TEST_CASE("the PFS matches the model on LMDB too", "[pfs][property][lmdb]") {
  for (uint64_t seed : testing::Seeds(3000, 2)) {
    INFO("seed " << seed);
    testing::Rng fates(seed ^ 0x5eed);
    PropertyRun run(seed, std::make_unique<LmdbBackend>(),
                    [&](uint64_t) { return RandomFate(&fates); });
    run.Run(300);
  }
}

}  // namespace
}  // namespace gryph
