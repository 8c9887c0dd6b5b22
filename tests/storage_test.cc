#include "gryph/storage.h"

#include <lmdb.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gryph/memory_storage.h"
#include "gryph/testing/fault_injecting_storage.h"
#include "lib/storage/lmdb_storage.h"
#include "lib/util/coding.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::Rng;
using testing::TempDir;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string Key(uint64_t n) {
  std::string out;
  internal::PutFixed64BE(&out, n);
  return out;
}

uint64_t KeyNumber(absl::string_view key) {
  REQUIRE(key.size() == 8);
  return internal::DecodeFixed64BE(key.data());
}

// The contents of one table, read with a full scan.
std::map<std::string, std::string> ReadTable(Storage& storage, absl::string_view table) {
  std::map<std::string, std::string> out;
  REQUIRE_OK(storage.Scan(table, "", "", [&](absl::string_view k, absl::string_view v) {
    out.emplace(std::string(k), std::string(v));
    return true;
  }));
  return out;
}

std::optional<std::string> GetOrDie(Storage& storage, absl::string_view table,
                                    absl::string_view key) {
  auto value = storage.Get(table, key);
  REQUIRE_OK(value);
  return *value;
}

// The two implementations under the same contract. Open() may be called again after the
// previous storage was destroyed: it reopens the same data (a clean restart or a crash — commits
// are atomic, so the two are the same to the storage).
struct LmdbKind {
  TempDir dir;
  StorageOptions options;
  LmdbKind() {
    options.path = (dir.path() / "store").string();
    options.initial_map_bytes = kMiB;
  }
  void SetMaxTables(int n) { options.max_tables = n; }
  std::unique_ptr<Storage> Open() {
    auto storage = OpenLmdbStorage(options);
    REQUIRE_OK(storage);
    return std::move(*storage);
  }
};

// For long random runs: a reopen in the same process sees the same data with or without fsync,
// and fsync costs milliseconds per commit on a busy disk.
struct LmdbNoSyncKind : LmdbKind {
  LmdbNoSyncKind() { options.durability = Durability::kNoSync; }
};

struct MemoryKind {
  std::shared_ptr<MemoryStorage::State> state = MemoryStorage::NewState();
  void SetMaxTables(int n) { state = MemoryStorage::NewState(n); }
  std::unique_ptr<Storage> Open() { return std::make_unique<MemoryStorage>(state); }
};

// ---- The contract, for both implementations -----------------------------------------------------

TEMPLATE_TEST_CASE("a committed batch is visible to Get and missing keys are nullopt", "[storage]",
                   LmdbKind, MemoryKind) {
  TestType kind;
  auto storage = kind.Open();
  REQUIRE(GetOrDie(*storage, "t", "a") == std::nullopt);  // the table does not exist yet
  WriteBatch batch;
  batch.Put("t", "a", "1");
  batch.Put("t", "b", "");
  REQUIRE_OK(storage->Commit(batch));
  REQUIRE(GetOrDie(*storage, "t", "a") == "1");
  REQUIRE(GetOrDie(*storage, "t", "b") == "");  // an empty value is a value
  REQUIRE(GetOrDie(*storage, "t", "c") == std::nullopt);
  REQUIRE(GetOrDie(*storage, "other", "a") == std::nullopt);
}

TEMPLATE_TEST_CASE("a batch applies its operations in order", "[storage]", LmdbKind, MemoryKind) {
  TestType kind;
  auto storage = kind.Open();
  WriteBatch batch;
  batch.Put("t", "k", "first");
  batch.Put("t", "k", "second");
  batch.Put("t", "gone", "x");
  batch.Delete("t", "gone");
  batch.Delete("t", "never-there");
  batch.Delete("no-such-table", "k");
  batch.DeleteRange("no-such-table-either", "", "");
  REQUIRE(batch.count() == 7);
  REQUIRE_OK(storage->Commit(batch));
  REQUIRE(GetOrDie(*storage, "t", "k") == "second");
  REQUIRE(GetOrDie(*storage, "t", "gone") == std::nullopt);
  REQUIRE_OK(storage->Commit(WriteBatch()));  // empty batch
}

TEMPLATE_TEST_CASE("a batch spanning tables is all or nothing", "[storage]", LmdbKind, MemoryKind) {
  TestType kind;
  auto storage = kind.Open();
  WriteBatch good;
  good.Put("pubend.events", Key(1), "event");
  good.Put("pubend.meta", "T", Key(1));
  REQUIRE_OK(storage->Commit(good));

  // One bad operation at the end rejects the whole batch: nothing of it is applied.
  WriteBatch bad;
  bad.Put("pubend.events", Key(2), "event");
  bad.Put("pubend.meta", "T", Key(2));
  bad.Put("pubend.events", "", "empty key");
  REQUIRE_CODE(storage->Commit(bad), absl::StatusCode::kInvalidArgument);
  REQUIRE(GetOrDie(*storage, "pubend.events", Key(2)) == std::nullopt);
  REQUIRE(GetOrDie(*storage, "pubend.meta", "T") == Key(1));
}

TEMPLATE_TEST_CASE("bad table names, keys and ranges are rejected", "[storage]", LmdbKind,
                   MemoryKind) {
  TestType kind;
  auto storage = kind.Open();
  const std::string long_key(Storage::kMaxKeyBytes + 1, 'k');
  const std::string max_key(Storage::kMaxKeyBytes, 'k');
  auto commit_one = [&](auto add) {
    WriteBatch b;
    add(b);
    return storage->Commit(b);
  };
  using absl::StatusCode;
  REQUIRE_CODE(commit_one([](WriteBatch& b) { b.Put("", "k", "v"); }),
               StatusCode::kInvalidArgument);
  REQUIRE_CODE(commit_one([](WriteBatch& b) { b.Put(std::string("a\0b", 3), "k", "v"); }),
               StatusCode::kInvalidArgument);
  REQUIRE_CODE(commit_one([](WriteBatch& b) { b.Put("gryph.meta", "k", "v"); }),
               StatusCode::kInvalidArgument);
  REQUIRE_CODE(commit_one([](WriteBatch& b) { b.Put(std::string(129, 't'), "k", "v"); }),
               StatusCode::kInvalidArgument);
  REQUIRE_CODE(commit_one([&](WriteBatch& b) { b.Put("t", long_key, "v"); }),
               StatusCode::kInvalidArgument);
  REQUIRE_CODE(commit_one([](WriteBatch& b) { b.Delete("t", ""); }), StatusCode::kInvalidArgument);
  REQUIRE_CODE(commit_one([](WriteBatch& b) { b.DeleteRange("t", "b", "a"); }),
               StatusCode::kInvalidArgument);
  REQUIRE_OK(commit_one([&](WriteBatch& b) { b.Put("t", max_key, "v"); }));
  REQUIRE_OK(commit_one([](WriteBatch& b) { b.DeleteRange("t", "a", "a"); }));  // empty range

  REQUIRE_CODE(storage->Get("t", ""), StatusCode::kInvalidArgument);
  REQUIRE_CODE(storage->Get("t", long_key), StatusCode::kInvalidArgument);
  REQUIRE_CODE(storage->Get("", "k"), StatusCode::kInvalidArgument);
  REQUIRE_CODE(storage->NewCursor(""), StatusCode::kInvalidArgument);
  REQUIRE_CODE(storage->Scan("t", "b", "a", [](auto, auto) { return true; }),
               StatusCode::kInvalidArgument);
  auto cursor = storage->NewCursor("t");
  REQUIRE_OK(cursor);
  (*cursor)->Seek(long_key);
  REQUIRE_FALSE((*cursor)->Valid());
  REQUIRE((*cursor)->status().code() == StatusCode::kInvalidArgument);

  // Reading the reserved meta table is allowed, and shows the format version.
  auto version = storage->Get("gryph.meta", "format_version");
  REQUIRE_OK(version);
  REQUIRE(*version == std::string("\0\0\0\3", 4));
  REQUIRE(ReadTable(*storage, "t").size() == 1);
}

TEMPLATE_TEST_CASE("scans return keys in numeric order within half-open bounds", "[storage]",
                   LmdbKind, MemoryKind) {
  TestType kind;
  auto storage = kind.Open();
  WriteBatch batch;
  // Inserted out of order; big-endian keys sort numerically (256 after 255, not after 2).
  for (uint64_t n : {300, 2, 256, 255, 1, 1000, 70000}) batch.Put("log", Key(n), absl::StrCat(n));
  REQUIRE_OK(storage->Commit(batch));

  std::vector<uint64_t> seen;
  auto collect = [&](absl::string_view k, absl::string_view v) {
    REQUIRE(absl::StrCat(KeyNumber(k)) == v);
    seen.push_back(KeyNumber(k));
    return true;
  };
  REQUIRE_OK(storage->Scan("log", "", "", collect));
  REQUIRE(seen == std::vector<uint64_t>{1, 2, 255, 256, 300, 1000, 70000});
  seen.clear();
  REQUIRE_OK(storage->Scan("log", Key(255), Key(1000), collect));
  REQUIRE(seen == std::vector<uint64_t>{255, 256, 300});
  seen.clear();
  REQUIRE_OK(storage->Scan("log", Key(3), "", collect));
  REQUIRE(seen == std::vector<uint64_t>{255, 256, 300, 1000, 70000});
  seen.clear();
  REQUIRE_OK(storage->Scan("log", "", Key(2), collect));
  REQUIRE(seen == std::vector<uint64_t>{1});
  seen.clear();
  REQUIRE_OK(storage->Scan("missing", "", "", collect));
  REQUIRE(seen.empty());

  int calls = 0;
  REQUIRE_OK(storage->Scan("log", "", "", [&](auto, auto) { return ++calls < 3; }));
  REQUIRE(calls == 3);  // stopped when the callback said so
}

TEMPLATE_TEST_CASE("a cursor seeks, steps both ways and finds the last key", "[storage]", LmdbKind,
                   MemoryKind) {
  TestType kind;
  auto storage = kind.Open();
  WriteBatch batch;
  for (uint64_t n = 10; n <= 50; n += 10) batch.Put("log", Key(n), absl::StrCat("v", n));
  REQUIRE_OK(storage->Commit(batch));

  auto made = storage->NewCursor("log");
  REQUIRE_OK(made);
  Cursor& c = **made;
  REQUIRE_FALSE(c.Valid());
  c.SeekToLast();
  REQUIRE(c.Valid());
  REQUIRE(KeyNumber(c.key()) == 50);
  REQUIRE(c.value() == "v50");
  c.Prev();
  REQUIRE(KeyNumber(c.key()) == 40);
  c.Seek(Key(25));
  REQUIRE(KeyNumber(c.key()) == 30);
  c.Seek(Key(30));
  REQUIRE(KeyNumber(c.key()) == 30);
  c.Next();
  REQUIRE(KeyNumber(c.key()) == 40);
  c.Seek(Key(51));
  REQUIRE_FALSE(c.Valid());
  c.Seek("");
  REQUIRE(KeyNumber(c.key()) == 10);
  c.Prev();
  REQUIRE_FALSE(c.Valid());
  c.SeekToFirst();
  REQUIRE(KeyNumber(c.key()) == 10);
  int count = 0;
  for (; c.Valid(); c.Next()) ++count;
  REQUIRE(count == 5);
  REQUIRE_OK(c.status());

  auto empty = storage->NewCursor("no-such-table");
  REQUIRE_OK(empty);
  (*empty)->SeekToLast();
  REQUIRE_FALSE((*empty)->Valid());
  REQUIRE_OK((*empty)->status());
}

TEMPLATE_TEST_CASE("a cursor reads the snapshot it was opened on", "[storage]", LmdbKind,
                   MemoryKind) {
  TestType kind;
  auto storage = kind.Open();
  WriteBatch first;
  first.Put("t", "a", "old");
  first.Put("t", "b", "old");
  REQUIRE_OK(storage->Commit(first));
  auto made = storage->NewCursor("t");
  REQUIRE_OK(made);
  Cursor& c = **made;

  // Commit from another thread: a thread holding a cursor must not commit itself.
  WriteBatch second;
  second.Put("t", "a", "new");
  second.Delete("t", "b");
  second.Put("t", "c", "new");
  absl::Status committed;
  std::thread writer([&] { committed = storage->Commit(second); });
  writer.join();
  REQUIRE_OK(committed);

  std::vector<std::pair<std::string, std::string>> seen;
  for (c.SeekToFirst(); c.Valid(); c.Next()) seen.emplace_back(c.key(), c.value());
  REQUIRE(seen == std::vector<std::pair<std::string, std::string>>{{"a", "old"}, {"b", "old"}});
  REQUIRE(GetOrDie(*storage, "t", "a") == "new");
  REQUIRE(ReadTable(*storage, "t") ==
          std::map<std::string, std::string>{{"a", "new"}, {"c", "new"}});
}

TEMPLATE_TEST_CASE("DeleteRange removes exactly the half-open range", "[storage]", LmdbKind,
                   MemoryKind) {
  TestType kind;
  auto storage = kind.Open();
  auto fill = [&] {
    WriteBatch batch;
    batch.DeleteRange("log", "", "");
    for (uint64_t n = 1; n <= 2000; ++n) batch.Put("log", Key(n), std::string(40, 'x'));
    batch.Put("other", Key(5), "kept");
    REQUIRE_OK(storage->Commit(batch));
  };
  auto keys = [&] {
    std::vector<uint64_t> out;
    for (const auto& [k, v] : ReadTable(*storage, "log")) out.push_back(KeyNumber(k));
    return out;
  };
  auto delete_range = [&](absl::string_view begin, absl::string_view end) {
    WriteBatch batch;
    batch.DeleteRange("log", begin, end);
    REQUIRE_OK(storage->Commit(batch));
  };

  fill();
  delete_range(Key(1), Key(1501));  // reclaim a log prefix spanning many pages
  auto left = keys();
  REQUIRE(left.size() == 500);
  REQUIRE(left.front() == 1501);
  REQUIRE(left.back() == 2000);

  fill();
  delete_range(Key(100), Key(200));
  left = keys();
  REQUIRE(left.size() == 1900);
  REQUIRE(std::find(left.begin(), left.end(), 99) != left.end());
  REQUIRE(std::find(left.begin(), left.end(), 100) == left.end());
  REQUIRE(std::find(left.begin(), left.end(), 199) == left.end());
  REQUIRE(std::find(left.begin(), left.end(), 200) != left.end());

  fill();
  delete_range(Key(1990), "");
  REQUIRE(keys().back() == 1989);
  delete_range("", Key(11));
  REQUIRE(keys().front() == 11);
  delete_range("", "");
  REQUIRE(keys().empty());
  REQUIRE(GetOrDie(*storage, "other", Key(5)) == "kept");
}

TEMPLATE_TEST_CASE("committed data survives reopening", "[storage]", LmdbKind, MemoryKind) {
  TestType kind;
  {
    auto storage = kind.Open();
    for (uint64_t i = 1; i <= 10; ++i) {
      WriteBatch batch;
      batch.Put("log", Key(i), absl::StrCat("event ", i));
      batch.Put("meta", "last", Key(i));
      REQUIRE_OK(storage->Commit(batch));
    }
  }
  auto storage = kind.Open();
  REQUIRE(ReadTable(*storage, "log").size() == 10);
  REQUIRE(GetOrDie(*storage, "meta", "last") == Key(10));
  REQUIRE(GetOrDie(*storage, "log", Key(7)) == "event 7");
}

TEMPLATE_TEST_CASE("the number of tables is limited", "[storage]", LmdbKind, MemoryKind) {
  TestType kind;
  kind.SetMaxTables(3);
  auto storage = kind.Open();
  WriteBatch three;
  for (const char* t : {"a", "b", "c"}) three.Put(t, "k", "v");
  REQUIRE_OK(storage->Commit(three));
  WriteBatch fourth;
  fourth.Put("a", "k", "changed");
  fourth.Put("d", "k", "v");
  REQUIRE_CODE(storage->Commit(fourth), absl::StatusCode::kResourceExhausted);
  REQUIRE(GetOrDie(*storage, "a", "k") == "v");
  WriteBatch existing;
  existing.Put("c", "k2", "v");
  REQUIRE_OK(storage->Commit(existing));
}

TEMPLATE_TEST_CASE("bytes used grow with the data", "[storage]", LmdbKind, MemoryKind) {
  TestType kind;
  auto storage = kind.Open();
  auto before = storage->ApproximateBytesUsed();
  REQUIRE_OK(before);
  WriteBatch batch;
  for (uint64_t n = 0; n < 1000; ++n) batch.Put("log", Key(n), std::string(250, 'v'));
  REQUIRE_OK(storage->Commit(batch));
  auto after = storage->ApproximateBytesUsed();
  REQUIRE_OK(after);
  REQUIRE(*after >= *before + 1000 * 258);
  REQUIRE(*after <= *before + 1000 * 258 * 3);
}

TEMPLATE_TEST_CASE("concurrent readers see whole batches while a writer commits", "[storage]",
                   LmdbKind, MemoryKind) {
  TestType kind;
  auto storage = kind.Open();
  // Each batch moves "counter" forward and adds the matching log entry; a reader must never see
  // the one without the other.
  std::atomic<bool> done{false};
  std::atomic<int> violations{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        auto cursor = storage->NewCursor("log");
        if (!cursor.ok()) {
          ++violations;
          continue;
        }
        (*cursor)->SeekToLast();
        // No Catch2 assertion (KeyNumber) off the main thread.
        const uint64_t last =
            (*cursor)->Valid() ? internal::DecodeFixed64BE((*cursor)->key().data()) : 0;
        uint64_t count = 0;
        for ((*cursor)->SeekToFirst(); (*cursor)->Valid(); (*cursor)->Next()) ++count;
        if (count != last) ++violations;
      }
    });
  }
  for (uint64_t i = 1; i <= 600; ++i) {
    WriteBatch batch;
    batch.Put("log", Key(i), std::string(3000, 'x'));  // grows the 1 MiB LMDB map a few times
    REQUIRE_OK(storage->Commit(batch));
  }
  done = true;
  for (auto& t : readers) t.join();
  REQUIRE(violations.load() == 0);
  internal::LmdbStorageStats stats;
  if (internal::GetLmdbStorageStats(storage.get(), &stats)) REQUIRE(stats.map_growths >= 1);
  REQUIRE(ReadTable(*storage, "log").size() == 600);
}

// ---- Fault injection and crashes ----------------------------------------------------------------

TEMPLATE_TEST_CASE("an injected commit failure applies nothing of its batch", "[storage]", LmdbKind,
                   MemoryKind) {
  TestType kind;
  auto base = kind.Open();
  FaultInjectingStorage storage(base.get());
  storage.FailCommitNumber(2, absl::InternalError("injected"));
  auto commit = [&](uint64_t i) {
    WriteBatch batch;
    batch.Put("log", Key(i), "e");
    batch.Put("meta", "last", Key(i));
    return storage.Commit(batch);
  };
  REQUIRE_OK(commit(1));
  REQUIRE_CODE(commit(2), absl::StatusCode::kInternal);
  REQUIRE(GetOrDie(storage, "log", Key(2)) == std::nullopt);
  REQUIRE(GetOrDie(storage, "meta", "last") == Key(1));
  REQUIRE_OK(commit(3));
  REQUIRE(storage.commits_attempted() == 3);
  REQUIRE(storage.commits_succeeded() == 2);

  storage.FailNextCommitWithMapFull();
  REQUIRE_CODE(commit(4), absl::StatusCode::kResourceExhausted);
  REQUIRE_OK(commit(5));

  storage.FailCommitsAfter(5, absl::UnavailableError("disk gone"));
  REQUIRE_CODE(commit(6), absl::StatusCode::kUnavailable);
  REQUIRE_CODE(commit(7), absl::StatusCode::kUnavailable);
  storage.FailReads(absl::DataLossError("bad sector"));
  REQUIRE_CODE(storage.Get("log", Key(1)), absl::StatusCode::kDataLoss);
  REQUIRE_CODE(storage.NewCursor("log"), absl::StatusCode::kDataLoss);
  REQUIRE_CODE(storage.Scan("log", "", "", [](auto, auto) { return true; }),
               absl::StatusCode::kDataLoss);
  storage.ClearFaults();
  REQUIRE_OK(commit(8));
  std::vector<uint64_t> keys;
  for (const auto& [k, v] : ReadTable(storage, "log")) keys.push_back(KeyNumber(k));
  REQUIRE(keys == std::vector<uint64_t>{1, 3, 5, 8});
}

TEMPLATE_TEST_CASE("a crash keeps exactly the committed batches", "[storage]", LmdbKind,
                   MemoryKind) {
  TestType kind;
  {
    auto base = kind.Open();
    FaultInjectingStorage storage(base.get());
    // Commit 3 reaches the disk but its caller hears of a crash; nothing after it commits.
    storage.CrashAfterCommitNumber(3);
    for (uint64_t i = 1; i <= 5; ++i) {
      WriteBatch batch;
      batch.Put("log", Key(i), "e");
      batch.Put("meta", "last", Key(i));
      const absl::Status s = storage.Commit(batch);
      if (i < 3) {
        REQUIRE_OK(s);
      } else {
        REQUIRE_CODE(s, absl::StatusCode::kUnavailable);
      }
    }
    REQUIRE(storage.crashed());
    REQUIRE_CODE(storage.Get("log", Key(1)), absl::StatusCode::kUnavailable);
  }
  auto storage = kind.Open();  // recover
  REQUIRE(ReadTable(*storage, "log").size() == 3);
  REQUIRE(GetOrDie(*storage, "meta", "last") == Key(3));
}

// ---- LMDB specifics -----------------------------------------------------------------------------

// Writes table[key] = value with the LMDB C API, as a foreign program (or damage) would.
void RawLmdbPut(const std::string& path, const char* table, absl::string_view key,
                absl::string_view value) {
  MDB_env* env = nullptr;
  REQUIRE(mdb_env_create(&env) == 0);
  REQUIRE(mdb_env_set_maxdbs(env, 8) == 0);
  REQUIRE(mdb_env_open(env, path.c_str(), 0, 0644) == 0);
  MDB_txn* txn = nullptr;
  REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
  MDB_dbi dbi;
  REQUIRE(mdb_dbi_open(txn, table, MDB_CREATE, &dbi) == 0);
  MDB_val k{key.size(), const_cast<char*>(key.data())};
  MDB_val v{value.size(), const_cast<char*>(value.data())};
  REQUIRE(mdb_put(txn, dbi, &k, &v, 0) == 0);
  REQUIRE(mdb_txn_commit(txn) == 0);
  mdb_env_close(env);
}

std::optional<std::string> RawLmdbGet(const std::string& path, const char* table,
                                      absl::string_view key) {
  MDB_env* env = nullptr;
  REQUIRE(mdb_env_create(&env) == 0);
  REQUIRE(mdb_env_set_maxdbs(env, 8) == 0);
  REQUIRE(mdb_env_open(env, path.c_str(), MDB_RDONLY, 0644) == 0);
  MDB_txn* txn = nullptr;
  REQUIRE(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn) == 0);
  std::optional<std::string> out;
  MDB_dbi dbi;
  if (mdb_dbi_open(txn, table, 0, &dbi) == 0) {
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v;
    if (mdb_get(txn, dbi, &k, &v) == 0) out.emplace(static_cast<const char*>(v.mv_data), v.mv_size);
  }
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return out;
}

TEST_CASE("a version-2 store is upgraded at its first writable open, not at a read-only one",
          "[storage]") {
  LmdbKind kind;
  {
    auto storage = kind.Open();
    WriteBatch batch;
    batch.Put("log", Key(1), "e");
    REQUIRE_OK(storage->Commit(batch));
  }
  const std::string version_2("\0\0\0\2", 4);
  const std::string version_3("\0\0\0\3", 4);
  RawLmdbPut(kind.options.path, "gryph.meta", "format_version", version_2);
  {
    StorageOptions ro = kind.options;
    ro.read_only = true;
    auto reader = OpenLmdbStorage(ro);
    REQUIRE_OK(reader);
    auto row = (*reader)->Get("log", Key(1));
    REQUIRE_OK(row);
    REQUIRE(*row == std::optional<std::string>("e"));
  }
  REQUIRE(RawLmdbGet(kind.options.path, "gryph.meta", "format_version") == version_2);
  {
    auto writer = OpenLmdbStorage(kind.options);
    REQUIRE_OK(writer);
    auto row = (*writer)->Get("log", Key(1));
    REQUIRE_OK(row);
    REQUIRE(*row == std::optional<std::string>("e"));
  }
  REQUIRE(RawLmdbGet(kind.options.path, "gryph.meta", "format_version") == version_3);
}

TEST_CASE("a store with another format version is rejected and left unchanged", "[storage]") {
  LmdbKind kind;
  {
    auto storage = kind.Open();
    WriteBatch batch;
    batch.Put("log", Key(1), "e");
    REQUIRE_OK(storage->Commit(batch));
  }
  // Version 1 (before row checksums) and a version from the future.
  const std::string version_1("\0\0\0\1", 4);
  RawLmdbPut(kind.options.path, "gryph.meta", "format_version", version_1);
  {
    auto reopened = OpenLmdbStorage(kind.options);
    REQUIRE_CODE(reopened, absl::StatusCode::kFailedPrecondition);
    REQUIRE(absl::StrContains(reopened.status().message(), "format version 1"));
  }
  const std::string version_4("\0\0\0\4", 4);
  RawLmdbPut(kind.options.path, "gryph.meta", "format_version", version_4);
  auto reopened = OpenLmdbStorage(kind.options);
  REQUIRE_CODE(reopened, absl::StatusCode::kFailedPrecondition);
  INFO(reopened.status().message());
  REQUIRE(absl::StrContains(reopened.status().message(), "format version 4"));
  REQUIRE(absl::StrContains(reopened.status().message(), "reads only versions 2 to 3"));
  // Nothing was changed: the version is still 4 and the data is there (with its checksum).
  REQUIRE(RawLmdbGet(kind.options.path, "gryph.meta", "format_version") == version_4);
  const std::optional<std::string> row = RawLmdbGet(kind.options.path, "log", Key(1));
  REQUIRE(row);
  REQUIRE(row->size() == 5);
  REQUIRE(row->substr(0, 1) == "e");
  // Rejected again, and the directory is not left claimed by the failed open.
  REQUIRE_CODE(OpenLmdbStorage(kind.options), absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a store with a wrong magic is rejected", "[storage]") {
  LmdbKind kind;
  kind.Open().reset();
  RawLmdbPut(kind.options.path, "gryph.meta", "magic", "something-else");
  auto reopened = OpenLmdbStorage(kind.options);
  REQUIRE_CODE(reopened, absl::StatusCode::kFailedPrecondition);
  REQUIRE(absl::StrContains(reopened.status().message(), "not a gryph store"));
}

TEST_CASE("an LMDB environment of another program is not taken over", "[storage]") {
  LmdbKind kind;
  std::filesystem::create_directories(kind.options.path);
  RawLmdbPut(kind.options.path, "theirs", "k", "v");
  REQUIRE_CODE(OpenLmdbStorage(kind.options), absl::StatusCode::kFailedPrecondition);
  REQUIRE(RawLmdbGet(kind.options.path, "gryph.meta", "magic") == std::nullopt);
  REQUIRE(RawLmdbGet(kind.options.path, "theirs", "k") == "v");
}

TEST_CASE("a damaged data file is reported as data loss", "[storage]") {
  LmdbKind kind;
  kind.Open().reset();
  // Overwrite both meta pages (pages 0 and 1) with garbage.
  const std::string data = kind.options.path + "/data.mdb";
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(f.good());
    const std::string garbage(8192, '\x5a');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  REQUIRE_CODE(OpenLmdbStorage(kind.options), absl::StatusCode::kDataLoss);
}

TEST_CASE("a truncated data file is reported as data loss at open, not a crash", "[storage]") {
  LmdbKind kind;
  {
    auto storage = kind.Open();
    WriteBatch batch;
    for (uint64_t n = 0; n < 20000; ++n) batch.Put("log", Key(n), std::string(200, 'v'));
    REQUIRE_OK(storage->Commit(batch));
  }
  const std::string data = kind.options.path + "/data.mdb";
  const auto size = std::filesystem::file_size(data);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  REQUIRE(size > 600 * page);
  // Cut at a page and inside one (before, the first read of a missing page was a SIGBUS).
  for (uint64_t cut : {uint64_t{size / 2 / page * page}, uint64_t{size / 2 + 100}, 3 * page}) {
    INFO("cut at " << cut << " of " << size);
    TempDir copy_dir;
    StorageOptions o = kind.options;
    o.path = (copy_dir.path() / "store").string();
    std::filesystem::create_directories(o.path);
    std::filesystem::copy_file(data, o.path + "/data.mdb");
    std::filesystem::resize_file(o.path + "/data.mdb", cut);
    auto opened = OpenLmdbStorage(o);
    REQUIRE_CODE(opened, absl::StatusCode::kDataLoss);
    REQUIRE_THAT(std::string(opened.status().message()), Catch::Contains("truncated"));
  }
  {
    // A few pages short: that many may be allocated-and-freed pages LMDB never wrote, so the
    // store opens; the missing pages that are used read as damage, not as a crash.
    TempDir copy_dir;
    StorageOptions o = kind.options;
    o.path = (copy_dir.path() / "store").string();
    std::filesystem::create_directories(o.path);
    std::filesystem::copy_file(data, o.path + "/data.mdb");
    std::filesystem::resize_file(o.path + "/data.mdb", size - 8 * page);
    auto opened = OpenLmdbStorage(o);
    REQUIRE_OK(opened);
    REQUIRE(std::filesystem::file_size(o.path + "/data.mdb") >= size);
    REQUIRE_CODE((*opened)->Get("log", Key(19999)), absl::StatusCode::kDataLoss);
  }
  // The original opens and reads.
  auto storage = kind.Open();
  REQUIRE(GetOrDie(*storage, "log", Key(19999)) == std::string(200, 'v'));
}

TEST_CASE("a data file that is a directory is reported as data loss", "[storage]") {
  TempDir dir;
  StorageOptions o;
  o.path = (dir.path() / "store").string();
  std::filesystem::create_directories(o.path + "/data.mdb");
  REQUIRE_CODE(OpenLmdbStorage(o), absl::StatusCode::kDataLoss);
}

TEST_CASE("a corrupted page is reported as data loss, and the error is sticky", "[storage]") {
  LmdbKind kind;
  {
    auto storage = kind.Open();
    WriteBatch batch;
    for (uint64_t n = 0; n < 5; ++n) batch.Put("log", Key(n), "CORRUPT-ME-MARKER");
    batch.Put("other", "k", "v");
    REQUIRE_OK(storage->Commit(batch));
  }
  // Clear the page-type flags (mp_flags, bytes 10-11 of the page header) of every page holding
  // the marker: the log table's leaf becomes neither leaf nor branch.
  const std::string path = kind.options.path + "/data.mdb";
  std::string data;
  {
    std::ifstream in(path, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  int damaged = 0;
  for (size_t at = data.find("CORRUPT-ME-MARKER"); at != std::string::npos;
       at = data.find("CORRUPT-ME-MARKER", at + 1)) {
    const size_t start = at / page * page;
    if (start < 2 * page) continue;  // never a meta page
    data[start + 10] = 0;
    data[start + 11] = 0;
    ++damaged;
  }
  REQUIRE(damaged > 0);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  auto storage = kind.Open();  // the meta pages and the table directory are intact
  REQUIRE_CODE(storage->Get("log", Key(1)), absl::StatusCode::kDataLoss);
  // Sticky: everything fails the same way now, even what is not damaged.
  auto other = storage->Get("other", "k");
  REQUIRE_CODE(other, absl::StatusCode::kDataLoss);
  REQUIRE(absl::StrContains(other.status().message(), "MDB_CORRUPTED"));
  WriteBatch batch;
  batch.Put("other", "k2", "v");
  REQUIRE_CODE(storage->Commit(batch), absl::StatusCode::kDataLoss);
  REQUIRE_CODE(storage->NewCursor("other"), absl::StatusCode::kDataLoss);
}

// Flips one bit of the byte at `offset` of the store's data file.
void FlipBit(const std::string& store, size_t offset, int bit) {
  std::fstream f(store + "/data.mdb", std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  c = static_cast<char>(c ^ (1 << bit));
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(c);
}

// Every place `needle` is in the store's data file (a page rewritten within one commit leaves its
// old copy on a free page).
std::vector<size_t> FindAllInDataFile(const std::string& store, const std::string& needle) {
  std::ifstream in(store + "/data.mdb", std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<size_t> out;
  for (size_t at = data.find(needle); at != std::string::npos; at = data.find(needle, at + 1)) {
    out.push_back(at);
  }
  REQUIRE(!out.empty());
  return out;
}

// Where `needle` is in the store's data file (it must be there once).
size_t FindInDataFile(const std::string& store, const std::string& needle) {
  std::ifstream in(store + "/data.mdb", std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = data.find(needle);
  REQUIRE(at != std::string::npos);
  REQUIRE(data.find(needle, at + 1) == std::string::npos);
  return at;
}

TEST_CASE("a flipped bit in a value is a damaged row: reported, not returned, not sticky",
          "[storage]") {
  LmdbKind kind;
  {
    auto storage = kind.Open();
    WriteBatch batch;
    for (uint64_t n = 0; n < 5; ++n) batch.Put("log", Key(n), absl::StrCat("value-", n, "-abc"));
    batch.Put("log", Key(2), "value-TWO-marker");
    REQUIRE_OK(storage->Commit(batch));
  }
  FlipBit(kind.options.path, FindInDataFile(kind.options.path, "TWO-marker") + 1, 3);
  auto storage = kind.Open();
  // Get: DataLoss naming the row, with its key; before checksums this returned "value-TWO-marker"
  // with one letter changed.
  auto got = storage->Get("log", Key(2));
  REQUIRE_CODE(got, absl::StatusCode::kDataLoss);
  INFO(got.status().message());
  REQUIRE(absl::StrContains(got.status().message(), "damaged row in table \"log\""));
  REQUIRE(absl::StrContains(got.status().message(), "checksum mismatch"));
  REQUIRE(DamagedRowKey(got.status()) == Key(2));
  // Not sticky: other rows read and commits go on.
  REQUIRE(GetOrDie(*storage, "log", Key(3)) == "value-3-abc");
  WriteBatch more;
  more.Put("log", Key(9), "nine");
  REQUIRE_OK(storage->Commit(more));
  // A cursor stops at the damaged row; a seek past it goes on.
  auto cursor = storage->NewCursor("log");
  REQUIRE_OK(cursor);
  Cursor& c = **cursor;
  std::vector<uint64_t> seen;
  for (c.SeekToFirst(); c.Valid(); c.Next()) seen.push_back(KeyNumber(c.key()));
  REQUIRE(seen == std::vector<uint64_t>{0, 1});
  REQUIRE(DamagedRowKey(c.status()) == Key(2));
  c.Next();  // steps over the damaged row
  REQUIRE_OK(c.status());
  for (; c.Valid(); c.Next()) seen.push_back(KeyNumber(c.key()));
  REQUIRE(seen == std::vector<uint64_t>{0, 1, 3, 4, 9});
  REQUIRE_OK(c.status());
  // Backwards too.
  seen.clear();
  c.SeekToLast();
  for (;;) {
    for (; c.Valid(); c.Prev()) seen.push_back(KeyNumber(c.key()));
    if (!DamagedRowKey(c.status())) break;
    c.Prev();
  }
  REQUIRE(seen == std::vector<uint64_t>{9, 4, 3, 1, 0});
  REQUIRE_OK(c.status());
  // Scan stops there with the same error.
  auto scanned =
      storage->Scan("log", "", "", [](absl::string_view, absl::string_view) { return true; });
  REQUIRE(DamagedRowKey(scanned) == Key(2));
  // Overwriting the row repairs it.
  cursor->reset();
  WriteBatch repair;
  repair.Put("log", Key(2), "rewritten");
  REQUIRE_OK(storage->Commit(repair));
  REQUIRE(GetOrDie(*storage, "log", Key(2)) == "rewritten");
}

TEST_CASE("every single-bit flip of a stored row's value, key or checksum is detected",
          "[storage]") {
  LmdbKind kind;
  const std::string key = "key-" + std::string(8, 'K');
  const std::string value = "an event of forty bytes, more or less..";
  {
    auto storage = kind.Open();
    WriteBatch batch;
    batch.Put("log", key, value);
    REQUIRE_OK(storage->Commit(batch));
  }
  const size_t value_at = FindInDataFile(kind.options.path, value);
  const size_t key_at = FindInDataFile(kind.options.path, key);
  std::vector<size_t> offsets;
  for (size_t i = 0; i < value.size() + 4; ++i) offsets.push_back(value_at + i);  // + checksum
  for (size_t i = 0; i < key.size(); ++i) offsets.push_back(key_at + i);
  int detected = 0;
  for (size_t offset : offsets) {
    for (int bit = 0; bit < 8; ++bit) {
      FlipBit(kind.options.path, offset, bit);
      {
        auto storage = kind.Open();
        auto report = VerifyStorage(*storage);
        REQUIRE_OK(report);
        INFO("offset " << offset << " bit " << bit);
        REQUIRE(report->structure.ok());
        // A flipped key is the row at another key: damaged either way, never silently changed.
        REQUIRE(report->damaged.size() == 1);
        REQUIRE(report->damaged[0].table == "log");
        ++detected;
      }
      FlipBit(kind.options.path, offset, bit);
    }
  }
  REQUIRE(detected == static_cast<int>(offsets.size() * 8));
  auto storage = kind.Open();
  auto report = VerifyStorage(*storage);
  REQUIRE_OK(report);
  REQUIRE(report->clean());
  REQUIRE(report->rows == 1 + 2);  // the row and gryph.meta's two records
}

TEST_CASE("a damaged value length is a damaged row, not a read past the data file", "[storage]") {
  LmdbKind kind;
  const std::string key = "the-key-with-a-damaged-length";
  {
    auto storage = kind.Open();
    WriteBatch batch;
    batch.Put("log", key, "a short value");
    batch.Put("log", "other", "v");
    REQUIRE_OK(storage->Commit(batch));
  }
  // An LMDB leaf node: value size (low 16 bits, high 16 bits), flags, key size, key, value.
  // Raising the high half makes the value gigabytes long: before, its checksum read past the
  // map (SIGSEGV).
  for (size_t at : FindAllInDataFile(kind.options.path, key)) {
    std::fstream f(kind.options.path + "/data.mdb",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at - 6));
    f.put('\x7f');
  }
  auto storage = kind.Open();
  auto got = storage->Get("log", key);
  REQUIRE(DamagedRowKey(got.status()) == key);
  REQUIRE(GetOrDie(*storage, "log", "other") == "v");
  auto report = VerifyStorage(*storage);
  REQUIRE_OK(report);
  REQUIRE(report->damaged.size() == 1);
}

TEST_CASE("a damaged key in a leaf never makes an intact row read as absent", "[storage]") {
  LmdbKind kind;
  std::vector<std::string> keys;
  for (int i = 10; i <= 90; ++i) keys.push_back(absl::StrCat("row-key-", i));
  {
    auto storage = kind.Open();
    WriteBatch batch;
    for (const std::string& k : keys) batch.Put("log", k, "value of " + k);
    REQUIRE_OK(storage->Commit(batch));
  }
  // row-key-50 becomes row-key-99: out of order in its page, which misleads the binary search
  // over the page for its neighbours.
  for (size_t at : FindAllInDataFile(kind.options.path, "row-key-50")) {
    std::fstream f(kind.options.path + "/data.mdb",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + 8));
    f.write("99", 2);
  }
  auto storage = kind.Open();
  int found = 0;
  for (const std::string& k : keys) {
    INFO(k);
    auto got = storage->Get("log", k);
    if (got.ok()) {
      // Found with its own value, or reported: never "absent" with OK.
      REQUIRE(got->has_value());
      REQUIRE(**got == "value of " + k);
      ++found;
    } else {
      REQUIRE(got.status().code() == absl::StatusCode::kDataLoss);
    }
    // A seek from the key lands on it or reports damage.
    auto cursor = storage->NewCursor("log");
    REQUIRE_OK(cursor);
    (*cursor)->Seek(k);
    if ((*cursor)->Valid()) {
      REQUIRE((*cursor)->key() == k);
    } else {
      REQUIRE((*cursor)->status().code() == absl::StatusCode::kDataLoss);
    }
  }
  // The damaged key is the page's midpoint: the search for every key above it goes astray and
  // those lookups report damage; the half below reads on.
  REQUIRE(found >= 30);
}

TEST_CASE("VerifyStorage lists every damaged row of every table", "[storage]") {
  LmdbKind kind;
  {
    auto storage = kind.Open();
    WriteBatch batch;
    for (uint64_t n = 0; n < 1000; ++n) {
      batch.Put("a", Key(n), absl::StrCat("row-a-", 10000 + n));
      batch.Put("b", Key(n), absl::StrCat("row-b-", 10000 + n));
    }
    REQUIRE_OK(storage->Commit(batch));
  }
  for (const char* marker : {"row-a-10000", "row-a-10500", "row-a-10999", "row-b-10777"}) {
    for (size_t at : FindAllInDataFile(kind.options.path, marker)) {
      FlipBit(kind.options.path, at + 8, 0);
    }
  }
  auto storage = kind.Open();
  auto report = VerifyStorage(*storage);
  REQUIRE_OK(report);
  REQUIRE(report->tables == 3);
  REQUIRE(report->rows == 2000 + 2);
  REQUIRE(report->structure.ok());
  std::vector<std::pair<std::string, uint64_t>> damaged;
  for (const auto& d : report->damaged) damaged.emplace_back(d.table, KeyNumber(d.key));
  REQUIRE(damaged == std::vector<std::pair<std::string, uint64_t>>{
                         {"a", 0}, {"a", 500}, {"a", 999}, {"b", 777}});
  // The memory storage has nothing to check and verifies clean.
  MemoryStorage memory;
  auto clean = VerifyStorage(memory);
  REQUIRE_OK(clean);
  REQUIRE(clean->clean());
}

TEMPLATE_TEST_CASE("ListTables names every table, the meta table included", "[storage]", LmdbKind,
                   MemoryKind) {
  TestType kind;
  {
    auto storage = kind.Open();
    WriteBatch batch;
    batch.Put("zeta", "k", "v");
    batch.Put("alpha", "k", "v");
    batch.Delete("never", "k");  // a delete creates no table
    REQUIRE_OK(storage->Commit(batch));
  }
  auto storage = kind.Open();
  auto tables = storage->ListTables();
  REQUIRE_OK(tables);
  REQUIRE(*tables == std::vector<std::string>{"alpha", "gryph.meta", "zeta"});
}

TEST_CASE("FaultInjectingStorage reports injected damage as LMDB reports a bad checksum",
          "[storage]") {
  MemoryStorage memory;
  FaultInjectingStorage storage(&memory);
  WriteBatch batch;
  for (uint64_t n = 0; n < 4; ++n) batch.Put("t", Key(n), "v");
  REQUIRE_OK(storage.Commit(batch));
  storage.DamageRow("t", Key(1));
  REQUIRE(DamagedRowKey(storage.Get("t", Key(1)).status()) == Key(1));
  REQUIRE(GetOrDie(storage, "t", Key(2)) == "v");
  auto report = VerifyStorage(storage);
  REQUIRE_OK(report);
  REQUIRE(report->damaged.size() == 1);
  REQUIRE(report->rows == 4 + 2);
  storage.ClearFaults();
  REQUIRE(GetOrDie(storage, "t", Key(1)) == "v");
}

TEST_CASE("a damaged row fails the scans that reach it, the one of the range before it included",
          "[storage]") {
  MemoryStorage memory;
  FaultInjectingStorage storage(&memory);
  WriteBatch batch;
  for (uint64_t n = 0; n < 6; ++n) batch.Put("t", Key(n), "v");
  REQUIRE_OK(storage.Commit(batch));
  storage.DamageRow("t", Key(3));
  auto count = [&](uint64_t begin, uint64_t end) -> absl::StatusOr<int> {
    int rows = 0;
    absl::Status st =
        storage.Scan("t", Key(begin), Key(end), [&](absl::string_view, absl::string_view) {
          ++rows;
          return true;
        });
    if (!st.ok()) return st;
    return rows;
  };
  // The walk of [0, 3) steps onto row 3 to see that the range ended. Its key reads 3, but the
  // checksum covers the key: the row may be one of [0, 3) whose key was damaged. Ending the scan
  // there could drop rows silently, so it is the scan's DataLoss too.
  REQUIRE(DamagedRowKey(count(0, 3).status()) == Key(3));
  REQUIRE(*count(4, 6) == 2);
  REQUIRE(*count(0, 2) == 2);
  REQUIRE(DamagedRowKey(count(0, 4).status()) == Key(3));
  REQUIRE(DamagedRowKey(count(3, 6).status()) == Key(3));
}

TEST_CASE("a directory is open once per process", "[storage]") {
  LmdbKind kind;
  auto first = kind.Open();
  REQUIRE_CODE(OpenLmdbStorage(kind.options), absl::StatusCode::kFailedPrecondition);
  first.reset();
  REQUIRE_OK(OpenLmdbStorage(kind.options));
}

// ---- Read-only --------------------------------------------------------------------------------

std::string FileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

StorageOptions ReadOnly(StorageOptions options) {
  options.read_only = true;
  return options;
}

TEST_CASE("a read-only store reads what was committed, refuses to commit, changes nothing",
          "[storage][read_only]") {
  LmdbKind kind;
  {
    auto storage = kind.Open();
    WriteBatch batch;
    batch.Put("t", Key(1), "one");
    batch.Put("t", Key(2), "two");
    batch.Put("u", "k", "v");
    REQUIRE_OK(storage->Commit(batch));
  }
  const std::filesystem::path data = std::filesystem::path(kind.options.path) / "data.mdb";
  const std::string before = FileBytes(data);
  {
    auto reader = OpenLmdbStorage(ReadOnly(kind.options));
    REQUIRE_OK(reader);
    Storage& r = **reader;
    REQUIRE(GetOrDie(r, "t", Key(1)) == "one");
    REQUIRE(ReadTable(r, "t").size() == 2);
    REQUIRE(GetOrDie(r, "u", "k") == "v");
    // A table that does not exist reads as empty.
    REQUIRE(GetOrDie(r, "missing", "k") == std::nullopt);
    REQUIRE(ReadTable(r, "missing").empty());
    auto tables = r.ListTables();
    REQUIRE_OK(tables);
    REQUIRE(*tables == std::vector<std::string>{"gryph.meta", "t", "u"});
    absl::StatusOr<StorageVerifyReport> report = VerifyStorage(r);
    REQUIRE_OK(report);
    REQUIRE(report->clean());

    WriteBatch batch;
    batch.Put("t", Key(3), "three");
    batch.Delete("t", Key(1));
    REQUIRE_CODE(r.Commit(batch), absl::StatusCode::kFailedPrecondition);
    REQUIRE_CODE(r.Commit(WriteBatch()), absl::StatusCode::kFailedPrecondition);
    REQUIRE(ReadTable(r, "t").size() == 2);
    // Still one environment per directory per process.
    REQUIRE_CODE(OpenLmdbStorage(kind.options), absl::StatusCode::kFailedPrecondition);
  }
  REQUIRE(FileBytes(data) == before);
  auto storage = kind.Open();
  REQUIRE(ReadTable(*storage, "t").size() == 2);
  REQUIRE(GetOrDie(*storage, "t", Key(3)) == std::nullopt);
}

TEST_CASE("a read-only open of a directory without a store is refused and creates nothing",
          "[storage][read_only]") {
  TempDir dir;
  StorageOptions options;
  options.read_only = true;

  options.path = (dir.path() / "absent").string();
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kNotFound);
  REQUIRE(!std::filesystem::exists(options.path));

  const std::filesystem::path empty = dir.path() / "empty";
  std::filesystem::create_directories(empty);
  options.path = empty.string();
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kNotFound);
  REQUIRE(std::filesystem::is_empty(empty));

  // An empty data file (as a crash before LMDB's first write leaves) holds no store either.
  std::ofstream(empty / "data.mdb").close();
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kNotFound);
  REQUIRE(!std::filesystem::exists(empty / "lock.mdb"));
  REQUIRE(std::filesystem::file_size(empty / "data.mdb") == 0);

  // An LMDB environment with nothing in it: LMDB wrote its meta pages, gryph nothing.
  const std::filesystem::path bare = dir.path() / "bare";
  std::filesystem::create_directories(bare);
  {
    MDB_env* env = nullptr;
    REQUIRE(mdb_env_create(&env) == 0);
    REQUIRE(mdb_env_open(env, bare.c_str(), 0, 0644) == 0);
    mdb_env_close(env);
  }
  const std::string bare_before = FileBytes(bare / "data.mdb");
  options.path = bare.string();
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kNotFound);
  REQUIRE(FileBytes(bare / "data.mdb") == bare_before);

  // Another program's environment, as for a writer.
  const std::filesystem::path theirs = dir.path() / "theirs";
  std::filesystem::create_directories(theirs);
  RawLmdbPut(theirs.string(), "theirs", "k", "v");
  options.path = theirs.string();
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kFailedPrecondition);

  std::ofstream(dir.path() / "file") << "x";
  options.path = (dir.path() / "file").string();
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kInvalidArgument);
}

// LMDB forbids opening one environment twice in a process (its locks are per process), so the
// writer is a child process: forked before either side opens the store, it commits on the
// parent's word while the parent keeps the store open read-only.
TEST_CASE("a read-only store reads beside a writer in another process", "[storage][read_only]") {
  LmdbKind kind;  // 1 MiB maps: the writer's second batch grows the map past the reader's
  int to_child[2];
  int to_parent[2];
  REQUIRE(pipe(to_child) == 0);
  REQUIRE(pipe(to_parent) == 0);
  // Whatever fails in the parent, the child does not outlive the test.
  struct Child {
    pid_t pid = -1;
    ~Child() {
      if (pid <= 0) return;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } child;
  child.pid = fork();
  const pid_t pid = child.pid;
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(to_child[1]);
    close(to_parent[0]);
    auto step = [&](char said) {
      if (write(to_parent[1], &said, 1) != 1) _exit(10);
      char heard = 0;
      if (read(to_child[0], &heard, 1) != 1) _exit(11);
    };
    {
      auto storage = OpenLmdbStorage(kind.options);
      if (!storage.ok()) _exit(2);
      WriteBatch first;
      first.Put("t", Key(1), "one");
      if (!(*storage)->Commit(first).ok()) _exit(3);
      step('1');
      WriteBatch second;
      second.Put("t", Key(1), "uno");
      for (uint64_t i = 100; i < 100 + 3000; ++i) second.Put("t", Key(i), std::string(1000, 'x'));
      second.Put("later", "k", "v");
      if (!(*storage)->Commit(second).ok()) _exit(4);
      step('2');
    }
    _exit(0);
  }
  close(to_child[0]);
  close(to_parent[1]);
  auto await_child = [&](char want) {
    char heard = 0;
    REQUIRE(read(to_parent[0], &heard, 1) == 1);
    REQUIRE(heard == want);
  };
  auto tell_child = [&] {
    const char go = 'g';
    REQUIRE(write(to_child[1], &go, 1) == 1);
  };

  await_child('1');
  auto reader = OpenLmdbStorage(ReadOnly(kind.options));
  REQUIRE_OK(reader);
  Storage& r = **reader;
  REQUIRE(GetOrDie(r, "t", Key(1)) == "one");
  tell_child();
  await_child('2');
  // The writer, still open, committed again and grew the map past this reader's: the reader
  // adopts the new size and sees the commit.
  REQUIRE(GetOrDie(r, "t", Key(1)) == "uno");
  REQUIRE(ReadTable(r, "t").size() == 1 + 3000);
  REQUIRE_CODE(r.Commit(WriteBatch()), absl::StatusCode::kFailedPrecondition);
  // A table created after the reader opened is unknown to it until it reopens.
  REQUIRE(GetOrDie(r, "later", "k") == std::nullopt);
  tell_child();
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  child.pid = -1;
  REQUIRE(WIFEXITED(wstatus));
  REQUIRE(WEXITSTATUS(wstatus) == 0);
  close(to_child[1]);
  close(to_parent[0]);
  reader->reset();
  reader = OpenLmdbStorage(ReadOnly(kind.options));
  REQUIRE_OK(reader);
  REQUIRE(GetOrDie(**reader, "later", "k") == "v");
}

TEST_CASE("bad LMDB options are rejected", "[storage]") {
  TempDir dir;
  StorageOptions options;
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kInvalidArgument);
  options.path = dir.path().string();
  options.initial_map_bytes = 2 * kMiB;
  options.max_map_bytes = kMiB;
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kInvalidArgument);
  options.max_map_bytes = 4 * kMiB;
  options.max_tables = 0;
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kInvalidArgument);
  // Sizes whose arithmetic overflows or whose files are absurd: a map that rounds up to
  // nothing, a 128 GiB lock file, thousands of tables.
  options.max_tables = 4;
  options.initial_map_bytes = UINT64_MAX;
  options.max_map_bytes = UINT64_MAX;
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kInvalidArgument);
  options.initial_map_bytes = kMiB;
  options.max_map_bytes = 4 * kMiB;
  options.max_readers = INT_MAX;
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kInvalidArgument);
  options.max_readers = 126;
  options.max_tables = 5000;
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kInvalidArgument);
  std::ofstream(dir.path() / "file") << "x";
  options.max_tables = 4;
  options.path = (dir.path() / "file").string();
  REQUIRE_CODE(OpenLmdbStorage(options), absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a nosync store commits and reopens", "[storage]") {
  LmdbKind kind;
  kind.options.durability = Durability::kNoSync;
  {
    auto storage = kind.Open();
    WriteBatch batch;
    batch.Put("t", "k", "v");
    REQUIRE_OK(storage->Commit(batch));
  }
  auto storage = kind.Open();
  REQUIRE(GetOrDie(*storage, "t", "k") == "v");
}

TEST_CASE("the map grows from 1 MiB to hold 20 MiB without a failed commit", "[storage]") {
  LmdbKind kind;
  kind.options.initial_map_bytes = kMiB;
  auto storage = kind.Open();
  const std::string value(1000, 'v');
  uint64_t n = 0;
  for (int batch_no = 0; batch_no < 20; ++batch_no) {
    WriteBatch batch;
    for (int i = 0; i < 1000; ++i) batch.Put("log", Key(++n), value);  // ~1 MiB per batch
    REQUIRE_OK(storage->Commit(batch));
  }
  internal::LmdbStorageStats stats;
  REQUIRE(internal::GetLmdbStorageStats(storage.get(), &stats));
  REQUIRE(stats.map_growths >= 5);  // 1 -> 32 MiB
  REQUIRE(stats.map_bytes >= 20 * kMiB);

  auto check = [&](Storage& s) {
    uint64_t expect = 0;
    REQUIRE_OK(s.Scan("log", "", "", [&](absl::string_view k, absl::string_view v) {
      REQUIRE(KeyNumber(k) == ++expect);
      REQUIRE(v == value);
      return true;
    }));
    REQUIRE(expect == n);
  };
  check(*storage);
  storage.reset();
  storage = kind.Open();
  REQUIRE(internal::GetLmdbStorageStats(storage.get(), &stats));
  REQUIRE(stats.map_bytes >= 20 * kMiB);  // reopened at the grown size
  check(*storage);
}

TEST_CASE("one batch larger than the map commits after several growths", "[storage]") {
  LmdbKind kind;
  kind.options.initial_map_bytes = kMiB;
  auto storage = kind.Open();
  WriteBatch batch;
  for (uint64_t n = 0; n < 6000; ++n) batch.Put("log", Key(n), std::string(1000, 'v'));
  REQUIRE_OK(storage->Commit(batch));
  internal::LmdbStorageStats stats;
  REQUIRE(internal::GetLmdbStorageStats(storage.get(), &stats));
  REQUIRE(stats.map_growths >= 3);
  REQUIRE(stats.commit_retries >= 3);
  REQUIRE(ReadTable(*storage, "log").size() == 6000);
}

TEST_CASE("at the map ceiling a commit fails with ResourceExhausted and loses nothing",
          "[storage]") {
  LmdbKind kind;
  kind.options.initial_map_bytes = kMiB;
  kind.options.max_map_bytes = 4 * kMiB;
  auto storage = kind.Open();
  const std::string value(1000, 'v');
  uint64_t committed = 0;
  absl::Status status;
  for (int b = 0; b < 100 && status.ok(); ++b) {
    WriteBatch batch;
    for (int i = 1; i <= 200; ++i) batch.Put("log", Key(committed + i), value);
    batch.Put("meta", "last", Key(committed + 200));
    status = storage->Commit(batch);
    if (status.ok()) committed += 200;
  }
  REQUIRE_CODE(status, absl::StatusCode::kResourceExhausted);
  INFO(status.message());
  REQUIRE(absl::StrContains(status.message(), "MDB_MAP_FULL"));
  REQUIRE(absl::StrContains(status.message(), "ceiling"));
  REQUIRE(committed > 0);
  auto check = [&](Storage& s) {
    REQUIRE(ReadTable(s, "log").size() == committed);
    REQUIRE(GetOrDie(s, "meta", "last") == Key(committed));
  };
  check(*storage);
  // Not sticky: small commits may still fit, reads work.
  WriteBatch tiny;
  tiny.Put("meta", "note", "x");
  REQUIRE_OK(storage->Commit(tiny));
  storage.reset();
  storage = kind.Open();
  check(*storage);
}

TEST_CASE("at a full map a batch that frees space commits from the reserve, and makes room",
          "[storage]") {
  LmdbKind kind;
  kind.options.initial_map_bytes = kMiB;
  kind.options.max_map_bytes = 2 * kMiB;  // reserve: max / 8 = 256 KiB
  auto storage = kind.Open();
  const std::string value(1000, 'v');
  uint64_t n = 0;
  absl::Status full;
  while (full.ok() && n < 100000) {
    WriteBatch batch;
    for (int i = 0; i < 20; ++i) batch.Put("log", Key(n++), value);
    full = storage->Commit(batch);
  }
  REQUIRE_CODE(full, absl::StatusCode::kResourceExhausted);
  INFO(full.message());
  REQUIRE(absl::StrContains(full.message(), "reserve"));
  n -= 20;  // the last batch was not applied
  internal::LmdbStorageStats stats;
  REQUIRE(internal::GetLmdbStorageStats(storage.get(), &stats));
  REQUIRE(stats.map_bytes <= 2 * kMiB - 256 * 1024);
  // Releasing the older half, marked: it may commit from the reserve.
  WriteBatch release;
  release.DeleteRange("log", Key(0), Key(n / 2));
  release.set_frees_space(true);
  REQUIRE_OK(storage->Commit(release));
  REQUIRE(GetOrDie(*storage, "log", Key(n / 2 - 1)) == std::nullopt);
  REQUIRE(GetOrDie(*storage, "log", Key(n - 1)) == value);
  // The reserve is given back, and ordinary batches fit again in the freed pages.
  REQUIRE(internal::GetLmdbStorageStats(storage.get(), &stats));
  REQUIRE(stats.map_bytes < 2 * kMiB);
  for (int round = 0; round < 5; ++round) {
    WriteBatch batch;
    for (int i = 0; i < 20; ++i) batch.Put("log", Key(n++), value);
    REQUIRE_OK(storage->Commit(batch));
  }
  // A reopened full store keeps the same rule.
  storage.reset();
  storage = kind.Open();
  REQUIRE(GetOrDie(*storage, "log", Key(n - 1)) == value);
}

TEST_CASE("a full disk fails the commit with ResourceExhausted and loses nothing", "[storage]") {
  LmdbKind kind;
  auto storage = kind.Open();
  WriteBatch first;
  for (uint64_t n = 1; n <= 100; ++n) first.Put("log", Key(n), std::string(1000, 'a'));
  REQUIRE_OK(storage->Commit(first));

  // Simulate a full disk with a file-size limit: writes past it fail with EFBIG.
  const auto file_size = std::filesystem::file_size(kind.options.path + "/data.mdb");
  struct rlimit old_limit;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = file_size + 64 * 1024;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  WriteBatch big;
  for (uint64_t n = 101; n <= 2000; ++n) big.Put("log", Key(n), std::string(1000, 'b'));
  const absl::Status full = storage->Commit(big);
  REQUIRE(setrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  signal(SIGXFSZ, old_handler);

  REQUIRE_CODE(full, absl::StatusCode::kResourceExhausted);
  INFO(full.message());
  REQUIRE(absl::StrContains(full.message(), "mdb_txn_commit"));
  REQUIRE(ReadTable(*storage, "log").size() == 100);
  // With room again, the same batch commits.
  REQUIRE_OK(storage->Commit(big));
  storage.reset();
  storage = kind.Open();
  REQUIRE(ReadTable(*storage, "log").size() == 2000);
}

TEST_CASE("reader slots left by killed reader processes are reclaimed when the table is full",
          "[storage][lmdb]") {
  LmdbKind kind;
  kind.options.max_readers = 6;
  WriteBatch batch;
  batch.Put("t", "k", "v");
  REQUIRE_OK(kind.Open()->Commit(batch));
  // Readers in other processes (an inspection tool, say) fill the table and are killed while
  // reading: their slots stay taken. They are forked before this process opens the store (a
  // child must not inherit an open environment), and open theirs once it has.
  StorageOptions reader = kind.options;
  reader.read_only = true;
  int go[2];
  REQUIRE(pipe(go) == 0);
  struct Child {
    pid_t pid;
    int ready;
  };
  std::vector<Child> children;
  for (int i = 0; i < kind.options.max_readers - 1; ++i) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      close(go[1]);
      char byte = 0;
      if (read(go[0], &byte, 1) != 0) _exit(5);  // the parent closes it: go
      auto opened = OpenLmdbStorage(reader);
      if (!opened.ok()) _exit(2);
      auto cursor = (*opened)->NewCursor("t");
      if (!cursor.ok()) _exit(3);
      byte = 'r';
      if (write(fds[1], &byte, 1) != 1) _exit(4);
      for (;;) pause();
    }
    close(fds[1]);
    children.push_back({pid, fds[0]});
  }
  close(go[0]);
  auto storage = kind.Open();
  REQUIRE(GetOrDie(*storage, "t", "k") == std::optional<std::string>("v"));
  close(go[1]);
  for (const Child& c : children) {
    char ready = 0;
    REQUIRE(read(c.ready, &ready, 1) == 1);
    close(c.ready);
  }
  for (const Child& c : children) {
    kill(c.pid, SIGKILL);
    REQUIRE(waitpid(c.pid, nullptr, 0) == c.pid);
  }
  // This process needs new slots: three snapshots at once. Before, MDB_READERS_FULL
  // (kResourceExhausted) for as long as the process lived.
  std::vector<std::unique_ptr<Cursor>> cursors;
  for (int i = 0; i < 3; ++i) {
    auto cursor = storage->NewCursor("t");
    REQUIRE_OK(cursor);
    cursors.push_back(*std::move(cursor));
  }
  cursors.clear();
  REQUIRE_OK(storage->Commit(batch));
}

TEST_CASE("a reader opening a store that grows fast in another process opens", "[storage][lmdb]") {
  LmdbKind kind;
  kind.options.durability = Durability::kNoSync;
  kind.options.initial_map_bytes = uint64_t{1} << 20;
  REQUIRE_OK(kind.Open()->Commit([] {
    WriteBatch b;
    b.Put("t", "k", "v");
    return b;
  }()));
  // The reader is forked before this process opens the store (a child must not inherit an open
  // environment). It opens read-only again and again, each time sizing its map to the data file,
  // which the writer here outgrows between that and its first transaction.
  int go[2];
  REQUIRE(pipe(go) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(go[1]);
    char byte = 0;
    if (read(go[0], &byte, 1) != 1) _exit(5);
    StorageOptions reader = kind.options;
    reader.read_only = true;
    reader.initial_map_bytes = 64 << 10;
    for (int i = 0; i < 200; ++i) {
      auto opened = OpenLmdbStorage(reader);
      // Before: MDB_MAP_RESIZED at the open's first transaction (kAborted).
      if (!opened.ok()) _exit(absl::IsAborted(opened.status()) ? 3 : 2);
      auto got = (*opened)->Get("t", "k");
      if (!got.ok() || *got != std::optional<std::string>("v")) _exit(4);
    }
    _exit(0);
  }
  close(go[0]);
  auto storage = kind.Open();
  const std::string value(4096, 'x');
  REQUIRE(write(go[1], "g", 1) == 1);
  close(go[1]);
  int wstatus = 0;
  uint64_t key = 0;
  // Writes until the reader is done, at most 256 MiB.
  while (waitpid(pid, &wstatus, WNOHANG) == 0) {
    if (key < (uint64_t{256} << 20) / value.size()) {
      WriteBatch batch;
      for (int i = 0; i < 16; ++i) batch.Put("grow", Key(++key), value);
      REQUIRE_OK(storage->Commit(batch));
    } else {
      usleep(1000);
    }
  }
  REQUIRE(WIFEXITED(wstatus));
  REQUIRE(WEXITSTATUS(wstatus) == 0);
}

TEST_CASE("a killed process leaves exactly its acknowledged batches or more, whole", "[storage]") {
  // The real crash: a child commits batches and reports each acknowledgement through a pipe;
  // the parent kills it with SIGKILL at a random moment and reopens the store.
  for (uint64_t seed : testing::Seeds(1, 3)) {
    INFO("seed " << seed);
    Rng rng(seed);
    LmdbKind kind;
    kind.options.initial_map_bytes = 256 * 1024;  // growth happens in the child, too
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      auto storage = OpenLmdbStorage(kind.options);
      if (!storage.ok()) _exit(2);
      for (uint64_t i = 1;; ++i) {
        WriteBatch batch;
        for (uint64_t j = 0; j < 10; ++j) batch.Put("log", Key(i * 10 + j), std::string(500, 'e'));
        batch.Put("meta", "last", Key(i));
        if (!(*storage)->Commit(batch).ok()) _exit(3);
        if (write(fds[1], &i, sizeof(i)) != sizeof(i)) _exit(4);
      }
    }
    close(fds[1]);
    const uint64_t kill_after = rng.Range(5, 120);
    uint64_t acked = 0;
    while (acked < kill_after) {
      uint64_t i;
      REQUIRE(read(fds[0], &i, sizeof(i)) == sizeof(i));
      acked = i;
    }
    kill(pid, SIGKILL);
    int wstatus = 0;
    REQUIRE(waitpid(pid, &wstatus, 0) == pid);
    REQUIRE(WIFSIGNALED(wstatus));
    close(fds[0]);

    auto storage = kind.Open();
    auto last = GetOrDie(*storage, "meta", "last");
    REQUIRE(last.has_value());
    const uint64_t committed = KeyNumber(*last);
    REQUIRE(committed >= acked);
    REQUIRE(ReadTable(*storage, "log").size() == committed * 10);
  }
}

// ---- Property test: random batches and crashes against a model ---------------------------------

using Model = std::map<std::string, std::map<std::string, std::string>>;

std::string RandomKey(Rng& rng) {
  // Short keys from a small alphabet so that operations collide; some are 8-byte integers.
  if (rng.OneIn(2)) return Key(rng.Uniform(300));
  std::string k(rng.Range(1, 4), 'a');
  for (char& c : k) c = static_cast<char>('a' + rng.Uniform(4));
  return k;
}

void ApplyToModel(const WriteBatch& batch, Model& model) {
  for (size_t i = 0; i < batch.count(); ++i) {
    const WriteBatch::Op op = batch.op(i);
    auto& table = model[std::string(op.table)];
    switch (op.type) {
      case WriteBatch::OpType::kPut: table[std::string(op.key)] = std::string(op.value); break;
      case WriteBatch::OpType::kDelete: table.erase(std::string(op.key)); break;
      case WriteBatch::OpType::kDeleteRange: {
        auto first = op.key.empty() ? table.begin() : table.lower_bound(std::string(op.key));
        auto last = op.value.empty() ? table.end() : table.lower_bound(std::string(op.value));
        table.erase(first, last);
        break;
      }
    }
  }
}

void CheckAgainstModel(Storage& storage, const Model& model, Rng& rng) {
  for (const char* table : {"t0", "t1", "t2"}) {
    auto it = model.find(table);
    const std::map<std::string, std::string> empty;
    const auto& expect = it == model.end() ? empty : it->second;
    REQUIRE(ReadTable(storage, table) == expect);
    for (int i = 0; i < 20; ++i) {
      const std::string k = RandomKey(rng);
      auto e = expect.find(k);
      REQUIRE(GetOrDie(storage, table, k) ==
              (e == expect.end() ? std::nullopt : std::optional<std::string>(e->second)));
    }
    // A random cursor walk.
    auto made = storage.NewCursor(table);
    REQUIRE_OK(made);
    Cursor& c = **made;
    const std::string target = RandomKey(rng);
    c.Seek(target);
    auto m = expect.lower_bound(target);
    for (int step = 0; step < 10; ++step) {
      REQUIRE(c.Valid() == (m != expect.end()));
      if (!c.Valid()) break;
      REQUIRE(c.key() == m->first);
      REQUIRE(c.value() == m->second);
      if (rng.OneIn(2)) {
        c.Next();
        ++m;
      } else {
        c.Prev();
        m = m == expect.begin() ? expect.end() : std::prev(m);
      }
    }
    REQUIRE_OK(c.status());
  }
}

template <typename Kind>
void RunModelTest(uint64_t seed, int steps) {
  INFO("seed " << seed << " (rerun with GRYPH_SEED=" << seed << ")");
  Rng rng(seed);
  Kind kind;
  Model model;
  auto base = kind.Open();
  auto storage = std::make_unique<FaultInjectingStorage>(base.get());
  for (int step = 0; step < steps; ++step) {
    WriteBatch batch;
    const int ops = static_cast<int>(rng.Range(0, 30));
    for (int i = 0; i < ops; ++i) {
      const std::string table = absl::StrCat("t", rng.Uniform(3));
      const uint64_t kind_of_op = rng.Uniform(10);
      // Each random draw in its own statement: argument evaluation order differs between
      // compilers, and a seed must mean the same run everywhere.
      if (kind_of_op < 6) {
        const std::string key = RandomKey(rng);
        const size_t value_size = rng.Uniform(rng.OneIn(10) ? 3000 : 30);
        batch.Put(table, key, std::string(value_size, 'v'));
      } else if (kind_of_op < 9) {
        batch.Delete(table, RandomKey(rng));
      } else {
        std::string a = rng.OneIn(4) ? "" : RandomKey(rng);
        std::string b = rng.OneIn(4) ? "" : RandomKey(rng);
        if (!a.empty() && !b.empty() && a > b) std::swap(a, b);
        batch.DeleteRange(table, a, b);
      }
    }
    const uint64_t fault = rng.Uniform(20);
    if (fault == 0) {
      storage->FailCommitNumber(storage->commits_attempted() + 1, absl::InternalError("injected"));
    } else if (fault == 1) {
      storage->CrashAfterCommitNumber(storage->commits_attempted() + 1);
    }
    const absl::Status s = storage->Commit(batch);
    if (s.ok() || (fault == 1 && storage->crashed())) ApplyToModel(batch, model);
    if (fault == 0) REQUIRE_CODE(s, absl::StatusCode::kInternal);
    if (fault == 1 || rng.OneIn(15)) {
      // Crash (or restart) and recover from what was committed.
      storage.reset();
      base.reset();
      base = kind.Open();
      storage = std::make_unique<FaultInjectingStorage>(base.get());
      CheckAgainstModel(*storage, model, rng);
    } else if (rng.OneIn(5)) {
      CheckAgainstModel(*storage, model, rng);
    }
  }
  CheckAgainstModel(*storage, model, rng);
}

TEST_CASE("random batches and crashes match a model: memory", "[storage]") {
  for (uint64_t seed : testing::Seeds(100, 50)) RunModelTest<MemoryKind>(seed, 400);
}

TEST_CASE("random batches and crashes match a model: LMDB", "[storage]") {
  for (uint64_t seed : testing::Seeds(200, 20)) RunModelTest<LmdbNoSyncKind>(seed, 300);
}

}  // namespace
}  // namespace gryph
