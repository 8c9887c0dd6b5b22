// The LMDB implementation of Storage.
//
// Layout: one LMDB environment per directory; each table is a named database (MDB_dbi), opened
// once and cached by name; "gryph.meta" holds the magic and format version (docs/format.md).
// Every value of a writable table is stored followed by its row checksum (RowChecksum), checked
// on every read; the meta table's records are stored bare, so that any build can read them.
//
// Locking (see also the Invariants of LmdbStorage):
//   write_mu_  serializes commits: LMDB allows one write transaction at a time, and map growth
//              must happen with no write transaction open.
//   gate_      counts the operations that touch the memory map (read snapshots, the write
//              transaction, env info). Growing the map (mdb_env_set_mapsize: munmap + mmap) may
//              only happen with no transaction active in the process, so the grower waits in
//              the gate until the count is zero and holds new entrants off while it remaps.
//              Readers are not held back while the grower waits (reader preference): a thread
//              that takes a second snapshot while holding one cannot deadlock against a waiting
//              grower. The price is that a grower can wait as long as snapshots overlap; they
//              are short by contract.
//   dbi_mu_    protects the table-name -> MDB_dbi cache. Handles are added only after the write
//              transaction that created them committed, and only the commit path (under
//              write_mu_) and Open call mdb_dbi_open, as LMDB requires.
//   pool_mu_   protects the idle read transactions kept for reuse (mdb_txn_reset/renew saves
//              a malloc and a reader-slot search per read).
// Lock order: write_mu_ before the gate; dbi_mu_ and pool_mu_ are leaves.

#include "lib/storage/lmdb_storage.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gryph/storage.h"
#include "lib/storage/lmdb_handle.h"
#include "lib/storage/storage_internal.h"
#include "lib/util/coding.h"
#include "lib/util/crc32c.h"
#include "lib/util/status_macros.h"

namespace gryph {

namespace {

using internal::FromMdbVal;
using internal::LmdbCursor;
using internal::LmdbEnv;
using internal::LmdbTxn;
using internal::ToMdbVal;

// Idle read transactions kept for reuse. Each keeps its reader slot, so this stays well below
// StorageOptions::max_readers.
constexpr size_t kMaxIdleReadTxns = 8;
// How often an operation re-adopts a map grown by another process before giving up.
constexpr int kMaxMapResizedRetries = 8;

// ---- One open environment per directory per process -------------------------------------------

// LMDB forbids opening the same environment twice in one process (its locks are per process):
// directories are tracked by device and inode.
class OpenDirectories {
 public:
  static OpenDirectories& Get() {
    static auto* dirs = new OpenDirectories();
    return *dirs;
  }
  bool Claim(std::pair<uint64_t, uint64_t> id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return open_.insert(id).second;
  }
  void Release(std::pair<uint64_t, uint64_t> id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    open_.erase(id);
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<std::pair<uint64_t, uint64_t>> open_ ABSL_GUARDED_BY(mu_);
};

// Releases a claimed directory on destruction.
class DirectoryClaim {
 public:
  DirectoryClaim() = default;
  explicit DirectoryClaim(std::pair<uint64_t, uint64_t> id) : id_(id) {}
  DirectoryClaim(DirectoryClaim&& other) noexcept : id_(std::exchange(other.id_, std::nullopt)) {}
  DirectoryClaim& operator=(DirectoryClaim&&) = delete;
  ~DirectoryClaim() {
    if (id_) OpenDirectories::Get().Release(*id_);
  }

 private:
  std::optional<std::pair<uint64_t, uint64_t>> id_;
};

// ---- The map gate -------------------------------------------------------------------------------

// Counts the users of the memory map; Exclusive() runs a function while there are none.
// (A CondVar rather than a Condition: absl evaluates a Condition on whichever thread unlocks,
// which TSan cannot follow with Debian's uninstrumented Abseil; see tests/tsan_absl_mutex.cc.)
class MapGate {
 public:
  void Enter() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ++users_;
  }
  void Exit() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (--users_ == 0) empty_.SignalAll();
  }
  // Waits until no one is inside, then runs fn() while keeping everyone out.
  template <typename Fn>
  int Exclusive(Fn fn) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    while (users_ != 0) empty_.Wait(&mu_);
    return fn();
  }

 private:
  absl::Mutex mu_;
  absl::CondVar empty_;  // signalled when users_ drops to 0
  int users_ ABSL_GUARDED_BY(mu_) = 0;
};

// Holds a place in the gate for its lifetime.
class GateEntry {
 public:
  explicit GateEntry(MapGate* gate) : gate_(gate) { gate_->Enter(); }
  GateEntry(GateEntry&& other) noexcept : gate_(std::exchange(other.gate_, nullptr)) {}
  GateEntry& operator=(GateEntry&&) = delete;
  ~GateEntry() {
    if (gate_ != nullptr) gate_->Exit();
  }

 private:
  MapGate* gate_;
};

uint64_t RoundUp(uint64_t n, uint64_t unit) { return (n + unit - 1) / unit * unit; }

// Before a read-only open: `dir` is a directory with a data file that is not empty. Given an
// empty one, LMDB (0.9.24) creates the lock file beside it and then tries to write a new
// environment's meta pages into it (EBADF); given none, it says ENOENT, which a caller could
// not tell from a missing directory.
absl::Status CheckHoldsDataFile(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat("OpenLmdbStorage: no directory ", dir));
    }
    return internal::LmdbStatus("stat", errno, dir);
  }
  const std::string data = (std::filesystem::path(dir) / "data.mdb").string();
  if (::stat(data.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("OpenLmdbStorage: ", dir, " holds no store (no data.mdb)"));
    }
    return internal::LmdbStatus("stat", errno, data);
  }
  if (S_ISREG(st.st_mode) && st.st_size == 0) {
    return absl::NotFoundError(
        absl::StrCat("OpenLmdbStorage: ", dir, " holds no store (data.mdb is empty)"));
  }
  return absl::OkStatus();
}

// Where a new store is made before it is moved into its directory (LmdbStorage::CreateIfAbsent).
constexpr char kStagingDirectory[] = ".gryph-creating";

absl::Status SyncDirectory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return internal::LmdbStatus("opening the directory", errno, dir.string());
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) return internal::LmdbStatus("fsync of the directory", error, dir.string());
  return absl::OkStatus();
}

// A magic record a few flipped bits away from gryph's: damage, not another program's store.
bool NearlyMagic(absl::string_view value) {
  const absl::string_view magic = internal::kMetaMagic;
  if (value.size() != magic.size() || value == magic) return false;
  int bits = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    bits += __builtin_popcount(static_cast<unsigned char>(value[i] ^ magic[i]));
  }
  return bits <= 4;
}

// ---- Row checksums ------------------------------------------------------------------------------

constexpr size_t kChecksumBytes = 4;

// The CRC-32C of a row: its table name, a NUL, the key's length (4 bytes, big-endian), the key
// and the value. The table and key are covered so that a value read from the wrong place (a
// damaged page pointer, a moved node) fails as surely as a flipped bit.
// What a table contributes to its rows' checksums, computed once per table and cursor.
struct TableSeed {
  bool checksummed;  // false for the reserved tables, whose records are bare
  uint32_t crc;      // the CRC-32C of the table name and a NUL
};

TableSeed SeedOf(absl::string_view table) {
  return {!absl::StartsWith(table, Storage::kReservedTablePrefix),
          internal::Crc32cExtend(internal::Crc32c(table), absl::string_view("\0", 1))};
}

uint32_t RowChecksum(const TableSeed& seed, absl::string_view key, absl::string_view value) {
  char length[4];
  internal::EncodeFixed32BE(length, static_cast<uint32_t>(key.size()));
  uint32_t crc = internal::Crc32cExtend(seed.crc, absl::string_view(length, sizeof(length)));
  crc = internal::Crc32cExtend(crc, key);
  return internal::Crc32cExtend(crc, value);
}

// The value of a stored row of `table`, or the damaged-row error if its checksum fails.
absl::StatusOr<absl::string_view> CheckRow(absl::string_view table, const TableSeed& seed,
                                           absl::string_view key, absl::string_view stored) {
  if (!seed.checksummed) return stored;
  if (stored.size() < kChecksumBytes) {
    return DamagedRowError(
        table, key,
        absl::StrCat("a stored value of ", stored.size(), " bytes cannot hold its checksum"));
  }
  const absl::string_view value = stored.substr(0, stored.size() - kChecksumBytes);
  const uint32_t want = internal::DecodeFixed32BE(stored.data() + value.size());
  const uint32_t got = RowChecksum(seed, key, value);
  if (want != got) {
    return DamagedRowError(
        table, key,
        absl::StrCat("checksum mismatch (stored ", absl::Hex(want, absl::kZeroPad8), ", computed ",
                     absl::Hex(got, absl::kZeroPad8), ")"));
  }
  return value;
}

class LmdbStorage;

// A read snapshot: a place in the gate plus a read transaction borrowed from the pool.
// Destruction returns the transaction, then leaves the gate.
class ReadSnapshot {
 public:
  ReadSnapshot(LmdbStorage* storage, GateEntry entry, MDB_txn* txn)
      : storage_(storage), entry_(std::move(entry)), txn_(txn) {}
  ReadSnapshot(ReadSnapshot&& other) noexcept
      : storage_(other.storage_),
        entry_(std::move(other.entry_)),
        txn_(std::exchange(other.txn_, nullptr)) {}
  ReadSnapshot& operator=(ReadSnapshot&&) = delete;
  ~ReadSnapshot();

  MDB_txn* txn() const { return txn_; }

 private:
  LmdbStorage* storage_;
  GateEntry entry_;
  MDB_txn* txn_;
};

// Invariants:
//   - dbis_ maps a table name to a handle only once the transaction that opened it committed.
//   - map_bytes_ is the map size LMDB uses; it only changes under write_mu_ inside
//     gate_.Exclusive().
//   - Once failed_ is set, sticky_ holds the first fatal error and every operation returns it.
//   - Every transaction and cursor is gone before env_ closes (Cursors must not outlive the
//     storage; idle read transactions are aborted by the destructor).
//   - With options_.read_only no write transaction is ever begun (Commit refuses first), so
//     the map never grows: it only adopts the size a writer in another process grew it to.
class LmdbStorage final : public Storage {
 public:
  static absl::StatusOr<std::unique_ptr<Storage>> Open(const StorageOptions& options);
  ~LmdbStorage() override;
  // A directory without a data file gets a new store, made in a staging directory inside it and
  // moved in by a rename once its first commit is durable (see the definition).
  static absl::Status CreateIfAbsent(const StorageOptions& options);

  absl::Status Commit(const WriteBatch& batch) override ABSL_LOCKS_EXCLUDED(write_mu_);
  absl::StatusOr<std::optional<std::string>> Get(absl::string_view table,
                                                 absl::string_view key) override;
  absl::StatusOr<std::unique_ptr<Cursor>> NewCursor(absl::string_view table) override;
  absl::StatusOr<std::vector<std::string>> ListTables() override;
  absl::StatusOr<std::optional<uint64_t>> RecordedRowCount(absl::string_view table) override;
  absl::StatusOr<uint64_t> ApproximateBytesUsed() override;

  internal::LmdbStorageStats stats() ABSL_LOCKS_EXCLUDED(write_mu_) {
    absl::MutexLock lock(&write_mu_);
    return stats_;
  }

  // Translates `rc` for `operation`, recording it as the sticky error if it is fatal.
  absl::Status Fail(absl::string_view operation, int rc) ABSL_LOCKS_EXCLUDED(sticky_mu_);
  // Returns a read transaction to the pool.
  void ReleaseReadTxn(MDB_txn* txn) ABSL_LOCKS_EXCLUDED(pool_mu_);

 private:
  // The LMDB code of a failed step and the function that returned it.
  struct Outcome {
    int rc = MDB_SUCCESS;
    const char* operation = "";
  };

  LmdbStorage(StorageOptions options, DirectoryClaim claim)
      : options_(std::move(options)), claim_(std::move(claim)) {}

  absl::Status Init();
  // Checks the meta table (writing it into a fresh store) and opens every table.
  // DataLoss for a data file shorter than the environment's last page (see the definition).
  absl::Status CheckDataFileSize() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Where the environment's last page ends, in bytes, and the page size.
  absl::Status LastPageEnd(uint64_t* end, uint64_t* page);
  absl::Status CheckFormatAndOpenTables();
  absl::Status CheckSticky() const ABSL_LOCKS_EXCLUDED(sticky_mu_);

 public:
  // Whether `v` lies within the pages committed so far. A node whose size or offset is damaged
  // can point past the data file, where reading it would be a SIGBUS or SIGSEGV, not an error.
  bool InData(const MDB_val& v);
  // The sticky DataLoss of a damaged page structure found by gryph's own checks.
  absl::Status FailStructure(absl::string_view table, absl::string_view what)
      ABSL_LOCKS_EXCLUDED(sticky_mu_);

 private:
  // Records where the committed pages end now (for InData).
  void NoteDataEnd();
  // Where the data file is mapped in this process, or null if that cannot be found.
  const char* FindMapAddress() const;
  // After mdb_get found no `key`: checks that its neighbours agree (the entry at or after it is
  // after it, the one before is before it). A damaged branch key makes the search look in the
  // wrong page and report an existing key absent, with no error.
  absl::Status ConfirmAbsent(MDB_txn* txn, MDB_dbi dbi, absl::string_view table,
                             absl::string_view key);

 public:
  // The value of the entry (k, v) of `table` if it is intact: else the damaged-row error if its
  // value is damaged, the sticky structure error if its key lies outside the data file.
  absl::StatusOr<absl::string_view> CheckEntry(absl::string_view table, const TableSeed& seed,
                                               const MDB_val& k, const MDB_val& v);

 private:
  std::optional<MDB_dbi> FindDbi(absl::string_view table) const ABSL_LOCKS_EXCLUDED(dbi_mu_);

  absl::StatusOr<ReadSnapshot> BeginRead() ABSL_LOCKS_EXCLUDED(write_mu_, pool_mu_);
  int AcquireReadTxn(MDB_txn** txn) ABSL_LOCKS_EXCLUDED(pool_mu_);

  // One attempt at committing `batch` in one write transaction.
  Outcome TryCommit(const WriteBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  static Outcome DeleteRange(MDB_txn* txn, MDB_dbi dbi, absl::string_view begin,
                             absl::string_view end);
  // The status of a commit that failed with `outcome`: LmdbStatus, except that an EIO when the
  // disk (or the file-size limit) is nearly full is a full disk.
  absl::Status CommitFailure(const Outcome& outcome, const WriteBatch& batch);
  // Doubles the map (up to the ceiling) after `operation` returned MDB_MAP_FULL.
  absl::Status GrowMap(absl::string_view operation, bool frees_space)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Rewrites gryph.meta's "freed" record in a transaction of its own (see Commit).
  absl::Status CommitFreedMark() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // How far the map may grow for a batch that does (not) free space: max_map_bytes, less the
  // reserve for the others (StorageOptions::reserve_bytes), in whole OS pages.
  uint64_t Ceiling(bool frees_space) const;
  // Adopts a map size grown by another process (after MDB_MAP_RESIZED).
  absl::Status AdoptMapSize() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Sets the map size with no transaction active; updates map_bytes_.
  absl::Status SetMapSize(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // Constant after Open.
  const StorageOptions options_;
  const DirectoryClaim claim_;
  LmdbEnv env_;  // declared before everything that refers to the environment
  uint64_t os_page_bytes_ = 4096;

  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(dbi_mu_, pool_mu_);
  uint64_t map_bytes_ ABSL_GUARDED_BY(write_mu_) = 0;
  uint64_t freed_marks_ ABSL_GUARDED_BY(write_mu_) = 0;  // CommitFreedMark's since open
  // The last ordinary batch failed at its ceiling (and none has committed since).
  bool ordinary_full_ ABSL_GUARDED_BY(write_mu_) = false;
  // The memory map's address and where its committed pages end (InData). The address changes
  // only in a remap, when no read is active; the end only grows.
  std::atomic<const char*> map_addr_{nullptr};
  std::atomic<uint64_t> data_end_{0};
  internal::LmdbStorageStats stats_ ABSL_GUARDED_BY(write_mu_);

  MapGate gate_;

  mutable absl::Mutex dbi_mu_;
  absl::flat_hash_map<std::string, MDB_dbi> dbis_ ABSL_GUARDED_BY(dbi_mu_);

  absl::Mutex pool_mu_;
  std::vector<MDB_txn*> idle_read_txns_ ABSL_GUARDED_BY(pool_mu_);

  std::atomic<bool> failed_{false};
  mutable absl::Mutex sticky_mu_;
  absl::Status sticky_ ABSL_GUARDED_BY(sticky_mu_);
};

ReadSnapshot::~ReadSnapshot() {
  if (txn_ != nullptr) storage_->ReleaseReadTxn(txn_);
  // entry_ leaves the gate after the transaction is reset.
}

// A Cursor over one table of one read snapshot.
class LmdbStorageCursor final : public Cursor {
 public:
  LmdbStorageCursor(LmdbStorage* storage, std::string table, ReadSnapshot snapshot,
                    LmdbCursor cursor)
      : storage_(storage),
        table_(std::move(table)),
        seed_(SeedOf(table_)),
        snapshot_(std::move(snapshot)),
        cursor_(std::move(cursor)) {}

  bool Valid() const override { return valid_; }
  void SeekToFirst() override { Move(MDB_FIRST, {}); }
  void SeekToLast() override { Move(MDB_LAST, {}); }
  void Seek(absl::string_view target) override {
    if (target.empty()) {
      Move(MDB_FIRST, {});
    } else if (target.size() > Storage::kMaxKeyBytes) {
      valid_ = false;
      if (status_.ok()) status_ = internal::ValidateKey(target);
    } else {
      Move(MDB_SET_RANGE, target);
      // An exact hit found what was asked for; nothing lies between.
      if (valid_ && key_ != target) CheckOrder(target);
    }
  }
  void Next() override { Step(MDB_NEXT); }
  void Prev() override { Step(MDB_PREV); }
  absl::string_view key() const override { return key_; }
  absl::string_view value() const override { return value_; }
  absl::Status status() const override { return status_.ok() ? damage_ : status_; }

 private:
  void Move(MDB_cursor_op op, absl::string_view target) {
    valid_ = false;
    damage_ = absl::OkStatus();  // the cursor stands on a damaged row; any move leaves it
    if (op != MDB_NEXT && op != MDB_PREV) last_good_ = {};
    if (!status_.ok()) return;
    MDB_val k = ToMdbVal(target);
    MDB_val v{0, nullptr};
    const int rc = cursor_.Get(&k, &v, op);
    if (rc == MDB_SUCCESS) {
      absl::StatusOr<absl::string_view> value = storage_->CheckEntry(table_, seed_, k, v);
      if (!value.ok()) {
        if (DamagedRowKey(value.status())) {
          key_ = FromMdbVal(k);  // the cursor stands on it
          damage_ = value.status();
        } else {
          status_ = value.status();
        }
        return;
      }
      key_ = FromMdbVal(k);
      valid_ = true;
      value_ = *value;
      last_good_ = key_;
    } else if (rc != MDB_NOTFOUND) {
      status_ = storage_->Fail("mdb_cursor_get", rc);
    }
  }

  // Next or Prev. The walk follows the leaves through their parents, and a damaged page number
  // in a branch page sends it into the wrong subtree with no error: each step must move past the
  // last good key, else the table's structure is damaged. (A damaged entry's own key may be out
  // of order — it is reported as a damaged row — so the comparison is with the last good one.)
  void Step(MDB_cursor_op op) {
    const absl::string_view last_good = last_good_;
    Move(op, {});
    if (last_good.empty()) return;
    const absl::string_view now = valid_ ? key_ : (damage_.ok() ? absl::string_view() : key_);
    if (now.empty()) return;
    if (op == MDB_NEXT ? now > last_good : now < last_good) return;
    if (!valid_) return;  // a damaged row out of place: reported as such
    valid_ = false;
    status_ = storage_->FailStructure(table_, "a walk came back to keys it had passed");
  }

  // After a seek to `target` found key_: LMDB's search trusts the keys of branch and leaf pages,
  // and a damaged one sends it to the wrong place with no error — the key it returns is below
  // the target, or the entry before it is not (an event the seek skipped would be answered as
  // silence). Both are checked; either is damage to the table's page structure.
  void CheckOrder(absl::string_view target) {
    if (key_ < target) {
      valid_ = false;
      status_ = storage_->FailStructure(table_, "a seek landed below its target");
      return;
    }
    MDB_val k{0, nullptr};
    MDB_val v{0, nullptr};
    int rc = cursor_.Get(&k, &v, MDB_PREV);
    if (rc == MDB_SUCCESS) {
      // A damaged entry just before may be one whose key the damage moved below the target
      // (the search took it for smaller and passed it): stand on it, reported, so that a walk
      // from here does not skip what it held.
      if (absl::Status row = storage_->CheckEntry(table_, seed_, k, v).status(); !row.ok()) {
        valid_ = false;
        key_ = FromMdbVal(k);
        last_good_ = {};
        if (DamagedRowKey(row)) {
          damage_ = std::move(row);
        } else {
          status_ = std::move(row);
        }
        return;
      }
      const bool wrong = FromMdbVal(k) >= target;
      rc = cursor_.Get(&k, &v, MDB_NEXT);  // back to key_
      if (wrong || rc != MDB_SUCCESS || !storage_->InData(k) || FromMdbVal(k) != key_) {
        valid_ = false;
        status_ = storage_->FailStructure(table_, "a seek passed over keys at its target");
      }
      return;
    }
    if (rc != MDB_NOTFOUND) {
      valid_ = false;
      status_ = storage_->Fail("mdb_cursor_get", rc);
      return;
    }
    // key_ is the first entry; stand on it again.
    k = ToMdbVal(key_);
    rc = cursor_.Get(&k, &v, MDB_SET_KEY);
    if (rc != MDB_SUCCESS) {
      valid_ = false;
      status_ = rc == MDB_NOTFOUND
                    ? storage_->FailStructure(table_, "a key found once is not found again")
                    : storage_->Fail("mdb_cursor_get", rc);
    }
  }

  LmdbStorage* const storage_;
  const std::string table_;
  const TableSeed seed_;
  ReadSnapshot snapshot_;
  LmdbCursor cursor_;  // declared after snapshot_: closed before the transaction is returned
  bool valid_ = false;
  absl::string_view key_;
  absl::string_view value_;
  absl::Status status_;          // kept: the first error of the snapshot
  absl::Status damage_;          // the damaged row the cursor stands on, until the next move
  absl::string_view last_good_;  // the last intact key a move stood on (empty after none)
};

// ---- Open and close -----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Storage>> LmdbStorage::Open(const StorageOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("OpenLmdbStorage: empty path");
  if (options.initial_map_bytes == 0 || options.initial_map_bytes > options.max_map_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("OpenLmdbStorage: need 0 < initial_map_bytes <= max_map_bytes, got ",
                     options.initial_map_bytes, " and ", options.max_map_bytes));
  }
  // Bounds that keep the arithmetic and the files sane: a map beyond the address space (or one
  // whose size overflows when rounded to pages), a lock file of gigabytes for the readers.
  constexpr uint64_t kMaxMapBytes = uint64_t{1} << 47;  // x86-64's user address space
  if (options.max_map_bytes > kMaxMapBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OpenLmdbStorage: max_map_bytes is ", options.max_map_bytes, "; at most ", kMaxMapBytes));
  }
  if (options.max_tables < 1 || options.max_tables > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("OpenLmdbStorage: max_tables is ",
                                                   options.max_tables, "; it must be 1 to 4096"));
  }
  if (options.max_readers < 1 || options.max_readers > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("OpenLmdbStorage: max_readers is ",
                                                   options.max_readers, "; it must be 1 to 65536"));
  }
  std::error_code ec;
  if (std::filesystem::exists(options.path, ec) &&
      !std::filesystem::is_directory(options.path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("OpenLmdbStorage: ", options.path, " exists and is not a directory"));
  }
  if (options.read_only) {
    GRYPH_RETURN_IF_ERROR(CheckHoldsDataFile(options.path));
  } else {
    std::filesystem::create_directories(options.path, ec);
    if (ec) return internal::LmdbStatus("create_directories", ec.value(), options.path);
  }
  struct stat st;
  if (::stat(options.path.c_str(), &st) != 0) {
    return internal::LmdbStatus("stat", errno, options.path);
  }
  const std::pair<uint64_t, uint64_t> id{static_cast<uint64_t>(st.st_dev),
                                         static_cast<uint64_t>(st.st_ino)};
  if (!OpenDirectories::Get().Claim(id)) {
    return absl::FailedPreconditionError(
        absl::StrCat("OpenLmdbStorage: ", options.path,
                     " is already open in this process (LMDB allows one environment per file "
                     "per process; close the other Storage first)"));
  }
  if (!options.read_only) GRYPH_RETURN_IF_ERROR(CreateIfAbsent(options));
  std::unique_ptr<LmdbStorage> storage(new LmdbStorage(options, DirectoryClaim(id)));
  GRYPH_RETURN_IF_ERROR(storage->Init());
  return std::unique_ptr<Storage>(std::move(storage));
}

absl::Status LmdbStorage::CreateIfAbsent(const StorageOptions& options) {
  // LMDB writes a new data file's first pages without syncing them, so a power loss before the
  // first commit is durable could leave a data file of zeros that no open accepts ("not an LMDB
  // file"), though nothing was ever stored. A new store is made whole beside its place instead
  // (the format records committed and synced) and moved in by one rename: after a power loss the
  // directory holds either no data file (and the next open creates it) or a complete one.
  const std::filesystem::path dir(options.path);
  const std::filesystem::path data = dir / "data.mdb";
  std::error_code ec;
  if (std::filesystem::exists(data, ec) || ec) return absl::OkStatus();  // Init reports errors
  // The staging store itself is made in place (it is not yet anyone's).
  if (dir.filename() == kStagingDirectory) return absl::OkStatus();
  const std::filesystem::path staging = dir / kStagingDirectory;
  std::filesystem::remove_all(staging, ec);  // a creation cut short
  if (!ec) std::filesystem::create_directory(staging, ec);
  if (ec) {
    return internal::LmdbStatus("creating the staging directory", ec.value(), staging.string());
  }
  {
    StorageOptions o = options;
    o.path = staging.string();
    o.durability = Durability::kSync;
    GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Storage> created, Open(o));
  }
  if (::rename((staging / "data.mdb").c_str(), data.c_str()) != 0) {
    return internal::LmdbStatus("rename", errno, data.string());
  }
  GRYPH_RETURN_IF_ERROR(SyncDirectory(dir));
  std::filesystem::remove_all(staging, ec);  // its lock file; a leftover goes at the next creation
  return absl::OkStatus();
}

absl::Status LmdbStorage::Init() {
  const std::string& path = options_.path;
  int rc = env_.Create();
  if (rc != MDB_SUCCESS) return Fail("mdb_env_create", rc);
  MDB_env* env = env_.get();
  if ((rc = mdb_env_set_maxdbs(env, static_cast<MDB_dbi>(options_.max_tables) + 1)) != 0) {
    return Fail("mdb_env_set_maxdbs", rc);
  }
  if ((rc = mdb_env_set_maxreaders(env, static_cast<unsigned>(options_.max_readers))) != 0) {
    return Fail("mdb_env_set_maxreaders", rc);
  }
  const long page = sysconf(_SC_PAGESIZE);
  os_page_bytes_ = page > 0 ? static_cast<uint64_t>(page) : 4096;
  // Start at least as large as the data already there, so reopening a grown store does not
  // regrow it step by step.
  uint64_t map_bytes = std::min(options_.initial_map_bytes, Ceiling(false));
  struct stat st;
  if (::stat((std::filesystem::path(path) / "data.mdb").c_str(), &st) == 0) {
    map_bytes = std::max(map_bytes, static_cast<uint64_t>(st.st_size));
  }
  map_bytes = RoundUp(map_bytes, os_page_bytes_);
  if ((rc = mdb_env_set_mapsize(env, map_bytes)) != 0) return Fail("mdb_env_set_mapsize", rc);
  unsigned int flags = MDB_NOTLS;
  if (options_.durability == Durability::kNoSync) flags |= MDB_NOSYNC;
  // Read-only, LMDB opens data.mdb O_RDONLY and maps it PROT_READ: this process cannot change
  // it. It still opens (or creates) lock.mdb for writing, to take a reader slot there.
  if (options_.read_only) flags |= MDB_RDONLY;
  if ((rc = mdb_env_open(env, path.c_str(), flags, 0644)) != 0) {
    if (options_.read_only && (rc == EACCES || rc == EPERM)) {
      return absl::PermissionDeniedError(absl::StrCat(
          internal::LmdbStatus("mdb_env_open", rc, path).message(),
          "; a reader too needs lock.mdb open for writing (it takes a slot in its reader table)"));
    }
    return Fail("mdb_env_open", rc);
  }
  int dead_readers = 0;
  if ((rc = mdb_reader_check(env, &dead_readers)) != 0) return Fail("mdb_reader_check", rc);
  MDB_envinfo info;
  if ((rc = mdb_env_info(env, &info)) != 0) return Fail("mdb_env_info", rc);
  {
    absl::MutexLock lock(&write_mu_);
    map_bytes_ = info.me_mapsize;
    stats_.map_bytes = map_bytes_;
  }
  map_addr_.store(FindMapAddress(), std::memory_order_release);
  GRYPH_RETURN_IF_ERROR(CheckFormatAndOpenTables());
  NoteDataEnd();
  return absl::OkStatus();
}

absl::Status LmdbStorage::ConfirmAbsent(MDB_txn* txn, MDB_dbi dbi, absl::string_view table,
                                        absl::string_view key) {
  LmdbCursor cursor;
  int rc = cursor.Open(txn, dbi);
  if (rc != MDB_SUCCESS) return Fail("mdb_cursor_open", rc);
  const TableSeed seed = SeedOf(table);
  MDB_val k = ToMdbVal(key);
  MDB_val v{0, nullptr};
  // A damaged entry beside the place of `key` may be `key` itself, its key damaged (the search
  // took it for another): then `key` is not known to be absent.
  rc = cursor.Get(&k, &v, MDB_SET_RANGE);
  if (rc == MDB_SUCCESS) {
    GRYPH_RETURN_IF_ERROR(CheckEntry(table, seed, k, v).status());
    if (FromMdbVal(k) <= key) {
      return FailStructure(table, "a lookup and a seek disagree about a key");
    }
  } else if (rc != MDB_NOTFOUND) {
    return Fail("mdb_cursor_get", rc);
  }
  // The entry before the place (the last, if nothing is at or after it) must be below `key`.
  rc = cursor.Get(&k, &v, rc == MDB_SUCCESS ? MDB_PREV : MDB_LAST);
  if (rc == MDB_NOTFOUND) return absl::OkStatus();
  if (rc != MDB_SUCCESS) return Fail("mdb_cursor_get", rc);
  GRYPH_RETURN_IF_ERROR(CheckEntry(table, seed, k, v).status());
  if (FromMdbVal(k) >= key) {
    return FailStructure(table, "a lookup passed over keys at its target");
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::string_view> LmdbStorage::CheckEntry(absl::string_view table,
                                                          const TableSeed& seed, const MDB_val& k,
                                                          const MDB_val& v) {
  if (!InData(k)) return FailStructure(table, "a key outside the data file");
  if (!InData(v)) {
    return DamagedRowError(table, FromMdbVal(k), "its value lies outside the data file");
  }
  return CheckRow(table, seed, FromMdbVal(k), FromMdbVal(v));
}

void LmdbStorage::NoteDataEnd() {
  uint64_t end = 0;
  uint64_t page = 0;
  if (!LastPageEnd(&end, &page).ok()) return;
  uint64_t seen = data_end_.load(std::memory_order_relaxed);
  while (end > seen && !data_end_.compare_exchange_weak(seen, end, std::memory_order_release)) {
  }
}

const char* LmdbStorage::FindMapAddress() const {
  // LMDB does not say where it mapped the data file (MDB_envinfo::me_mapaddr is the address
  // asked for with MDB_FIXEDMAP, else null): find the mapping of data.mdb at offset 0.
  const std::string data = (std::filesystem::path(options_.path) / "data.mdb").string();
  struct stat st;
  if (::stat(data.c_str(), &st) != 0) return nullptr;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // start-end perms offset dev inode path
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    char perms[8] = {0};
    unsigned dev_major = 0, dev_minor = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu", &start, &end, perms, &offset,
                    &dev_major, &dev_minor, &inode) != 7) {
      continue;
    }
    if (offset == 0 && inode == static_cast<unsigned long long>(st.st_ino) &&
        makedev(dev_major, dev_minor) == st.st_dev) {
      return reinterpret_cast<const char*>(static_cast<uintptr_t>(start));
    }
  }
  return nullptr;
}

bool LmdbStorage::InData(const MDB_val& v) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    const char* base = map_addr_.load(std::memory_order_acquire);
    if (base == nullptr) return true;  // not found: no check
    const uint64_t end = data_end_.load(std::memory_order_acquire);
    const char* p = static_cast<const char*>(v.mv_data);
    if (v.mv_size == 0 ||
        (p >= base && v.mv_size <= end && static_cast<uint64_t>(p - base) <= end - v.mv_size)) {
      return true;
    }
    NoteDataEnd();  // another process may have committed since
  }
  return false;
}

absl::Status LmdbStorage::FailStructure(absl::string_view table, absl::string_view what) {
  absl::Status status = absl::DataLossError(
      absl::StrCat("storage: the page structure of table \"", table, "\" is damaged (", what,
                   ") in ", options_.path, "; restore the store from a copy"));
  absl::MutexLock lock(&sticky_mu_);
  if (sticky_.ok()) sticky_ = status;
  failed_.store(true, std::memory_order_release);
  return sticky_;
}

absl::Status LmdbStorage::CheckDataFileSize() {
  // A data file shorter than the pages its meta page claims (cut by a copy, a full disk or an
  // operator) would make the first read of a missing page a SIGBUS in the mapping. (LMDB reads
  // the meta pages with read(), not through the map, so opening got this far.) A few pages may
  // legitimately be missing at the end: pages a transaction allocated and freed again ("loose")
  // count in the last page number but are never written. Up to kLooseTailPages of them are
  // allocated as zeros — an unused page is never read, and a used one that is missing then
  // reads as damage (MDB_CORRUPTED, DataLoss) instead of a crash; more is a truncated file.
  // Called under the write transaction that checks the format, so no writer in another process
  // runs meanwhile; fallocate only ever extends, so it would lose nothing anyway. (Read-only,
  // under a read transaction: a writer may run, but it only ever adds pages after the last
  // one that its committed meta page names.)
  constexpr uint64_t kLooseTailPages = 256;
  uint64_t used_bytes = 0;
  uint64_t page = 0;
  GRYPH_RETURN_IF_ERROR(LastPageEnd(&used_bytes, &page));
  const std::string data = (std::filesystem::path(options_.path) / "data.mdb").string();
  struct stat st;
  if (::stat(data.c_str(), &st) != 0) return internal::LmdbStatus("stat", errno, data);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size >= used_bytes) return absl::OkStatus();
  if (used_bytes - size > kLooseTailPages * page) {
    return absl::DataLossError(absl::StrCat("OpenLmdbStorage: ", data, " is ", size,
                                            " bytes but its last page ends at ", used_bytes,
                                            ": the file was truncated; restore it from a copy"));
  }
  // A reader may not extend the file (and a writer may be running): it opens the store as it
  // is, the missing pages most likely the unused ones.
  if (options_.read_only) return absl::OkStatus();
  const int fd = ::open(data.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return internal::LmdbStatus("open", errno, data);
  // fallocate(2) itself, not glibc's emulation (which writes zeros over whatever is there):
  // where the file system cannot, or the disk is full, the store opens as it is — the missing
  // pages are most likely the unused ones.
  const int rc_fallocate =
      ::fallocate(fd, 0, static_cast<off_t>(size), static_cast<off_t>(used_bytes - size));
  const int err = rc_fallocate == 0 ? 0 : errno;
  ::close(fd);
  if (err != 0 && err != EOPNOTSUPP && err != ENOSPC && err != EDQUOT) {
    return internal::LmdbStatus("fallocate", err, data);
  }
  return absl::OkStatus();
}

absl::Status LmdbStorage::CheckFormatAndOpenTables() {
  const std::string& path = options_.path;
  absl::MutexLock lock(&write_mu_);
  LmdbTxn txn;
  int rc = txn.Begin(env_.get(), options_.read_only ? MDB_RDONLY : 0);
  // A writer in another process may have grown the store past this map since it was sized (a
  // reader opening a live store that grows fast): adopt the writer's size, as BeginRead does.
  for (int attempt = 0; rc == MDB_MAP_RESIZED && attempt < kMaxMapResizedRetries; ++attempt) {
    GRYPH_RETURN_IF_ERROR(AdoptMapSize());
    rc = txn.Begin(env_.get(), options_.read_only ? MDB_RDONLY : 0);
  }
  if (rc != MDB_SUCCESS) return Fail("mdb_txn_begin", rc);
  GRYPH_RETURN_IF_ERROR(CheckDataFileSize());  // before anything reads a page through the map
  const std::string meta_name(internal::kMetaTable);
  MDB_dbi main_dbi;
  if ((rc = mdb_dbi_open(txn.get(), nullptr, 0, &main_dbi)) != 0) return Fail("mdb_dbi_open", rc);
  MDB_dbi meta;
  rc = mdb_dbi_open(txn.get(), meta_name.c_str(), 0, &meta);
  if (rc == MDB_NOTFOUND) {
    // No meta table: only an empty environment may become a gryph store.
    MDB_stat st;
    if ((rc = mdb_stat(txn.get(), main_dbi, &st)) != 0) return Fail("mdb_stat", rc);
    if (st.ms_entries != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "OpenLmdbStorage: ", path, " holds an LMDB environment that is not a gryph store (no ",
          internal::kMetaTable, " table); refusing to change it"));
    }
    if (options_.read_only) {
      return absl::NotFoundError(absl::StrCat(
          "OpenLmdbStorage: ", path, " holds no store (an LMDB environment without tables)"));
    }
    if ((rc = mdb_dbi_open(txn.get(), meta_name.c_str(), MDB_CREATE, &meta)) != 0) {
      return Fail("mdb_dbi_open", rc);
    }
    const std::string version = internal::EncodeFormatVersion();
    for (const auto& [k, v] :
         {std::pair(internal::kMetaMagicKey, internal::kMetaMagic),
          std::pair(internal::kMetaFormatVersionKey, absl::string_view(version))}) {
      MDB_val key = ToMdbVal(k);
      MDB_val value = ToMdbVal(v);
      if ((rc = mdb_put(txn.get(), meta, &key, &value, 0)) != 0) return Fail("mdb_put", rc);
    }
  } else if (rc != MDB_SUCCESS) {
    return Fail("mdb_dbi_open", rc);
  } else {
    MDB_val key = ToMdbVal(internal::kMetaMagicKey);
    MDB_val value;
    rc = mdb_get(txn.get(), meta, &key, &value);
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) return Fail("mdb_get", rc);
    if (rc == MDB_SUCCESS && NearlyMagic(FromMdbVal(value))) {
      return absl::DataLossError(absl::StrCat(
          "OpenLmdbStorage: ", path, ": the magic record of ", internal::kMetaTable,
          " is damaged (\"", absl::CHexEscape(FromMdbVal(value)), "\"); restore the store"));
    }
    if (rc == MDB_NOTFOUND || FromMdbVal(value) != internal::kMetaMagic) {
      return absl::FailedPreconditionError(absl::StrCat(
          "OpenLmdbStorage: ", path, " is not a gryph store: its ", internal::kMetaTable,
          " table lacks the magic \"", internal::kMetaMagic, "\""));
    }
    key = ToMdbVal(internal::kMetaFormatVersionKey);
    rc = mdb_get(txn.get(), meta, &key, &value);
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) return Fail("mdb_get", rc);
    if (rc == MDB_NOTFOUND || value.mv_size != 4) {
      return absl::FailedPreconditionError(absl::StrCat("OpenLmdbStorage: ", path,
                                                        " has no valid format version record in ",
                                                        internal::kMetaTable));
    }
    const uint32_t version = internal::DecodeFixed32BE(static_cast<const char*>(value.mv_data));
    if (version < internal::kOldestReadableStorageFormatVersion ||
        version > internal::kStorageFormatVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "OpenLmdbStorage: ", path, " has storage format version ", version,
          "; this build reads only versions ", internal::kOldestReadableStorageFormatVersion,
          " to ", internal::kStorageFormatVersion, " (the store was left unchanged)"));
    }
    if (version < internal::kStorageFormatVersion && !options_.read_only) {
      // An older layout this build reads as it is: the store becomes this version's (see
      // kOldestReadableStorageFormatVersion), committed with the rest of the open.
      const std::string current = internal::EncodeFormatVersion();
      MDB_val upgraded = ToMdbVal(current);
      if ((rc = mdb_put(txn.get(), meta, &key, &upgraded, 0)) != 0) return Fail("mdb_put", rc);
    }
  }

  // Every key of the main database names a table: open them all now, so that reads never need
  // mdb_dbi_open. (Committing a read transaction keeps the handles it opened, as a write's
  // does; a table created later by a writer in another process stays unknown here.)
  std::vector<std::string> names;
  {
    LmdbCursor cursor;
    if ((rc = cursor.Open(txn.get(), main_dbi)) != 0) return Fail("mdb_cursor_open", rc);
    MDB_val k, v;
    for (rc = cursor.Get(&k, &v, MDB_FIRST); rc == MDB_SUCCESS; rc = cursor.Get(&k, &v, MDB_NEXT)) {
      names.emplace_back(FromMdbVal(k));
    }
    if (rc != MDB_NOTFOUND) return Fail("mdb_cursor_get", rc);
  }
  std::vector<std::pair<std::string, MDB_dbi>> opened;
  for (const std::string& name : names) {
    MDB_dbi dbi;
    // The magic and version are a gryph store's: a name that is not a table is damage.
    if (name.find('\0') != std::string::npos ||
        (rc = mdb_dbi_open(txn.get(), name.c_str(), 0, &dbi)) == MDB_INCOMPATIBLE ||
        rc == MDB_NOTFOUND) {
      return absl::DataLossError(absl::StrCat(
          "OpenLmdbStorage: ", path, ": the table directory is damaged: it holds \"",
          absl::CHexEscape(name), "\", which is not a table; restore the store from a copy"));
    }
    if (rc != MDB_SUCCESS) return Fail("mdb_dbi_open", rc);
    opened.emplace_back(name, dbi);
  }
  if ((rc = txn.Commit()) != 0) return Fail("mdb_txn_commit", rc);
  absl::MutexLock dbi_lock(&dbi_mu_);
  for (auto& [name, dbi] : opened) dbis_.emplace(std::move(name), dbi);
  return absl::OkStatus();
}

LmdbStorage::~LmdbStorage() {
  absl::MutexLock lock(&pool_mu_);
  for (MDB_txn* txn : idle_read_txns_) mdb_txn_abort(txn);
  idle_read_txns_.clear();
  // env_ closes after this body; claim_ is released last.
}

// ---- Errors
// --------------------------------------------------------------------------------------

absl::Status LmdbStorage::Fail(absl::string_view operation, int rc) {
  absl::Status status = internal::LmdbStatus(operation, rc, options_.path);
  if (internal::LmdbErrorIsFatal(rc)) {
    absl::MutexLock lock(&sticky_mu_);
    if (sticky_.ok()) sticky_ = status;
    failed_.store(true, std::memory_order_release);
  }
  return status;
}

absl::Status LmdbStorage::CheckSticky() const {
  if (!failed_.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&sticky_mu_);
  return sticky_;
}

std::optional<MDB_dbi> LmdbStorage::FindDbi(absl::string_view table) const {
  absl::ReaderMutexLock lock(&dbi_mu_);
  auto it = dbis_.find(table);
  if (it == dbis_.end()) return std::nullopt;
  return it->second;
}

// ---- Reads
// ---------------------------------------------------------------------------------------

int LmdbStorage::AcquireReadTxn(MDB_txn** txn) {
  MDB_txn* idle = nullptr;
  {
    absl::MutexLock lock(&pool_mu_);
    if (!idle_read_txns_.empty()) {
      idle = idle_read_txns_.back();
      idle_read_txns_.pop_back();
    }
  }
  if (idle != nullptr) {
    const int rc = mdb_txn_renew(idle);
    if (rc == MDB_SUCCESS) {
      *txn = idle;
      return rc;
    }
    mdb_txn_abort(idle);
    if (rc == MDB_MAP_RESIZED) return rc;
  }
  return mdb_txn_begin(env_.get(), nullptr, MDB_RDONLY, txn);
}

void LmdbStorage::ReleaseReadTxn(MDB_txn* txn) {
  mdb_txn_reset(txn);
  {
    absl::MutexLock lock(&pool_mu_);
    if (idle_read_txns_.size() < kMaxIdleReadTxns) {
      idle_read_txns_.push_back(txn);
      return;
    }
  }
  mdb_txn_abort(txn);
}

absl::StatusOr<ReadSnapshot> LmdbStorage::BeginRead() {
  for (int attempt = 0;; ++attempt) {
    GRYPH_RETURN_IF_ERROR(CheckSticky());
    GateEntry entry(&gate_);
    MDB_txn* txn = nullptr;
    int rc = AcquireReadTxn(&txn);
    if (rc == MDB_READERS_FULL) {
      // Slots may be held by readers in processes that died (killed while reading): free them
      // and try once more. (Open frees them too, but this process may outlive many such.)
      int dead = 0;
      if (mdb_reader_check(env_.get(), &dead) == MDB_SUCCESS && dead > 0) {
        rc = mdb_txn_begin(env_.get(), nullptr, MDB_RDONLY, &txn);
      }
    }
    if (rc == MDB_SUCCESS) return ReadSnapshot(this, std::move(entry), txn);
    if (rc != MDB_MAP_RESIZED || attempt == kMaxMapResizedRetries) {
      return Fail("mdb_txn_begin", rc);
    }
    // Another process grew the map: adopt its size (outside the gate) and retry.
    { GateEntry leave = std::move(entry); }
    absl::MutexLock lock(&write_mu_);
    GRYPH_RETURN_IF_ERROR(AdoptMapSize());
  }
}

absl::StatusOr<std::optional<std::string>> LmdbStorage::Get(absl::string_view table,
                                                            absl::string_view key) {
  GRYPH_RETURN_IF_ERROR(internal::ValidateTableName(table));
  GRYPH_RETURN_IF_ERROR(internal::ValidateKey(key));
  // Look the table up before taking the snapshot: a handle in the cache belongs to a committed
  // transaction, so the snapshot taken next knows it.
  const std::optional<MDB_dbi> dbi = FindDbi(table);
  if (!dbi) {
    GRYPH_RETURN_IF_ERROR(CheckSticky());
    return std::nullopt;
  }
  GRYPH_ASSIGN_OR_RETURN(ReadSnapshot snapshot, BeginRead());
  MDB_val k = ToMdbVal(key);
  MDB_val v;
  const int rc = mdb_get(snapshot.txn(), *dbi, &k, &v);
  if (rc == MDB_NOTFOUND) {
    GRYPH_RETURN_IF_ERROR(ConfirmAbsent(snapshot.txn(), *dbi, table, key));
    return std::nullopt;
  }
  if (rc != MDB_SUCCESS) return Fail("mdb_get", rc);
  if (!InData(v)) return DamagedRowError(table, key, "its value lies outside the data file");
  GRYPH_ASSIGN_OR_RETURN(absl::string_view value,
                         CheckRow(table, SeedOf(table), key, FromMdbVal(v)));
  return std::string(value);
}

absl::StatusOr<std::unique_ptr<Cursor>> LmdbStorage::NewCursor(absl::string_view table) {
  GRYPH_RETURN_IF_ERROR(internal::ValidateTableName(table));
  const std::optional<MDB_dbi> dbi = FindDbi(table);
  if (!dbi) {
    GRYPH_RETURN_IF_ERROR(CheckSticky());
    return internal::NewEmptyCursor();
  }
  GRYPH_ASSIGN_OR_RETURN(ReadSnapshot snapshot, BeginRead());
  LmdbCursor cursor;
  const int rc = cursor.Open(snapshot.txn(), *dbi);
  if (rc != MDB_SUCCESS) return Fail("mdb_cursor_open", rc);
  return std::unique_ptr<Cursor>(std::make_unique<LmdbStorageCursor>(
      this, std::string(table), std::move(snapshot), std::move(cursor)));
}

absl::StatusOr<std::optional<uint64_t>> LmdbStorage::RecordedRowCount(absl::string_view table) {
  GRYPH_RETURN_IF_ERROR(internal::ValidateTableName(table));
  const std::optional<MDB_dbi> dbi = FindDbi(table);
  if (!dbi) {
    GRYPH_RETURN_IF_ERROR(CheckSticky());
    return std::optional<uint64_t>(0);
  }
  GRYPH_ASSIGN_OR_RETURN(ReadSnapshot snapshot, BeginRead());
  MDB_stat st;
  const int rc = mdb_stat(snapshot.txn(), *dbi, &st);
  if (rc != MDB_SUCCESS) return Fail("mdb_stat", rc);
  return std::optional<uint64_t>(st.ms_entries);
}

absl::StatusOr<std::vector<std::string>> LmdbStorage::ListTables() {
  GRYPH_RETURN_IF_ERROR(CheckSticky());
  std::vector<std::string> names;
  {
    absl::ReaderMutexLock lock(&dbi_mu_);
    for (const auto& [name, dbi] : dbis_) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<uint64_t> LmdbStorage::ApproximateBytesUsed() {
  GRYPH_RETURN_IF_ERROR(CheckSticky());
  GateEntry entry(&gate_);
  uint64_t end = 0;
  uint64_t page = 0;
  GRYPH_RETURN_IF_ERROR(LastPageEnd(&end, &page));
  return end;
}

absl::Status LmdbStorage::LastPageEnd(uint64_t* end, uint64_t* page) {
  MDB_envinfo info;
  int rc = mdb_env_info(env_.get(), &info);
  if (rc != MDB_SUCCESS) return Fail("mdb_env_info", rc);
  MDB_stat st;
  rc = mdb_env_stat(env_.get(), &st);
  if (rc != MDB_SUCCESS) return Fail("mdb_env_stat", rc);
  *page = st.ms_psize;
  *end = (static_cast<uint64_t>(info.me_last_pgno) + 1) * st.ms_psize;
  return absl::OkStatus();
}

// ---- Writes
// --------------------------------------------------------------------------------------

absl::Status LmdbStorage::Commit(const WriteBatch& batch) {
  if (options_.read_only) {
    return absl::FailedPreconditionError(
        absl::StrCat("Storage::Commit: the store in ", options_.path, " was opened read-only"));
  }
  GRYPH_RETURN_IF_ERROR(internal::ValidateBatch(batch));
  absl::MutexLock lock(&write_mu_);
  GRYPH_RETURN_IF_ERROR(CheckSticky());
  if (batch.empty()) return absl::OkStatus();
  int resized = 0;
  for (;;) {
    const Outcome outcome = TryCommit(batch);
    if (outcome.rc == MDB_SUCCESS) {
      NoteDataEnd();
      if (!batch.frees_space()) {
        ordinary_full_ = false;
      } else if (ordinary_full_ || map_bytes_ > Ceiling(false)) {
        // Ordinary batches no longer fit. LMDB lets a transaction reuse only the pages freed
        // two commits before it (the one just before may still be read): commit once more, so
        // that what this batch freed is room for the next ordinary batch at once. (The batch is
        // applied whatever becomes of that.)
        CommitFreedMark().IgnoreError();
        // The reserve is given back once the data fits below the others' ceiling again.
        if (map_bytes_ > Ceiling(false) &&
            data_end_.load(std::memory_order_acquire) <= Ceiling(false)) {
          GRYPH_RETURN_IF_ERROR(SetMapSize(Ceiling(false)));
        }
      }
      return absl::OkStatus();
    }
    if (outcome.rc == MDB_MAP_FULL) {
      // The transaction is gone (aborted); grow and replay the whole batch.
      if (absl::Status grown = GrowMap(outcome.operation, batch.frees_space()); !grown.ok()) {
        if (!batch.frees_space() && absl::IsResourceExhausted(grown)) ordinary_full_ = true;
        return grown;
      }
    } else if (outcome.rc == MDB_MAP_RESIZED && ++resized <= kMaxMapResizedRetries) {
      GRYPH_RETURN_IF_ERROR(AdoptMapSize());
    } else {
      return CommitFailure(outcome, batch);
    }
    ++stats_.commit_retries;
  }
}

LmdbStorage::Outcome LmdbStorage::TryCommit(const WriteBatch& batch) {
  GateEntry entry(&gate_);
  LmdbTxn txn;
  int rc = txn.Begin(env_.get(), 0);
  if (rc != MDB_SUCCESS) return {rc, "mdb_txn_begin"};

  // Resolve each table once. Only a Put creates a table; deleting from a table that does not
  // exist is a no-op.
  const std::vector<std::string>& names = batch.tables();
  std::vector<bool> has_put(names.size(), false);
  for (size_t i = 0; i < batch.count(); ++i) {
    const WriteBatch::Op op = batch.op(i);
    if (op.type == WriteBatch::OpType::kPut) has_put[op.table_index] = true;
  }
  std::vector<TableSeed> seeds;
  seeds.reserve(names.size());
  for (const std::string& name : names) seeds.push_back(SeedOf(name));
  std::vector<std::optional<MDB_dbi>> dbis(names.size());
  std::vector<std::pair<std::string, MDB_dbi>> created;
  for (size_t t = 0; t < names.size(); ++t) {
    dbis[t] = FindDbi(names[t]);
    if (dbis[t]) continue;
    MDB_dbi dbi;
    rc = mdb_dbi_open(txn.get(), names[t].c_str(), has_put[t] ? MDB_CREATE : 0, &dbi);
    if (rc == MDB_NOTFOUND && !has_put[t]) continue;
    if (rc != MDB_SUCCESS) return {rc, "mdb_dbi_open"};
    dbis[t] = dbi;
    created.emplace_back(names[t], dbi);
  }

  for (size_t i = 0; i < batch.count(); ++i) {
    const WriteBatch::Op op = batch.op(i);
    const std::optional<MDB_dbi> dbi = dbis[op.table_index];
    if (!dbi) continue;
    MDB_val key = ToMdbVal(op.key);
    switch (op.type) {
      case WriteBatch::OpType::kPut: {
        // Reserved, then filled in place: the value and its checksum without a copy of both.
        MDB_val value{op.value.size() + kChecksumBytes, nullptr};
        rc = mdb_put(txn.get(), *dbi, &key, &value, MDB_RESERVE);
        if (rc != MDB_SUCCESS) return {rc, "mdb_put"};
        char* out = static_cast<char*>(value.mv_data);
        if (!op.value.empty()) std::memcpy(out, op.value.data(), op.value.size());
        const uint32_t crc = RowChecksum(seeds[op.table_index], op.key, op.value);
        internal::EncodeFixed32BE(out + op.value.size(), crc);
        break;
      }
      case WriteBatch::OpType::kDelete:
        rc = mdb_del(txn.get(), *dbi, &key, nullptr);
        if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) return {rc, "mdb_del"};
        break;
      case WriteBatch::OpType::kDeleteRange: {
        const Outcome outcome = DeleteRange(txn.get(), *dbi, op.key, op.value);
        if (outcome.rc != MDB_SUCCESS) return outcome;
        break;
      }
    }
  }
  rc = txn.Commit();
  if (rc != MDB_SUCCESS) return {rc, "mdb_txn_commit"};
  if (!created.empty()) {
    absl::MutexLock lock(&dbi_mu_);
    for (auto& [name, dbi] : created) dbis_.emplace(std::move(name), dbi);
  }
  return {};
}

LmdbStorage::Outcome LmdbStorage::DeleteRange(MDB_txn* txn, MDB_dbi dbi, absl::string_view begin,
                                              absl::string_view end) {
  LmdbCursor cursor;
  int rc = cursor.Open(txn, dbi);
  if (rc != MDB_SUCCESS) return {rc, "mdb_cursor_open"};
  MDB_val k = ToMdbVal(begin);
  MDB_val v;
  rc = cursor.Get(&k, &v, begin.empty() ? MDB_FIRST : MDB_SET_RANGE);
  while (rc == MDB_SUCCESS) {
    if (!end.empty() && FromMdbVal(k) >= end) return {};
    rc = mdb_cursor_del(cursor.get(), 0);
    if (rc != MDB_SUCCESS) return {rc, "mdb_cursor_del"};
    // After a delete the cursor already stands on the following entry; MDB_NEXT returns it.
    rc = cursor.Get(&k, &v, MDB_NEXT);
  }
  if (rc != MDB_NOTFOUND) return {rc, "mdb_cursor_get"};
  return {};
}

absl::Status LmdbStorage::CommitFailure(const Outcome& outcome, const WriteBatch& batch) {
  // LMDB reports a short write as EIO, and a write that runs out of disk (or into RLIMIT_FSIZE)
  // part-way is a short write. The transaction was aborted before its meta page was written, so
  // the store is intact: call it a full disk when there is too little room left for the batch.
  // A margin covers the pages a commit rewrites besides the batch's own bytes.
  if (outcome.rc == EIO && std::string_view(outcome.operation) == "mdb_txn_commit") {
    const uint64_t margin = 2 * batch.ApproximateBytes() + (uint64_t{16} << 20);
    std::string why;
    struct statvfs vfs;
    if (::statvfs(options_.path.c_str(), &vfs) == 0 &&
        static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize < margin) {
      why = absl::StrCat("the disk has ", static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize,
                         " bytes free");
    }
    struct rlimit limit;
    std::error_code ec;
    const uint64_t file_bytes =
        std::filesystem::file_size(std::filesystem::path(options_.path) / "data.mdb", ec);
    if (why.empty() && !ec && ::getrlimit(RLIMIT_FSIZE, &limit) == 0 &&
        limit.rlim_cur != RLIM_INFINITY && file_bytes + margin >= limit.rlim_cur) {
      why = absl::StrCat("the data file (", file_bytes, " bytes) is at the file-size limit (",
                         static_cast<uint64_t>(limit.rlim_cur), " bytes)");
    }
    if (!why.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat(internal::LmdbStatus(outcome.operation, outcome.rc, options_.path).message(),
                       ": a short write, ", why, "; the batch was not applied"));
    }
  }
  return Fail(outcome.operation, outcome.rc);
}

absl::Status LmdbStorage::SetMapSize(uint64_t bytes) {
  // The new address is published before any read can start in the new map.
  const int rc = gate_.Exclusive([&] {
    const int set = mdb_env_set_mapsize(env_.get(), bytes);
    map_addr_.store(set == MDB_SUCCESS ? FindMapAddress() : nullptr, std::memory_order_release);
    return set;
  });
  if (rc != MDB_SUCCESS) {
    // A failed remap may leave the environment without a map: make the failure sticky.
    absl::Status status = internal::LmdbStatus("mdb_env_set_mapsize", rc, options_.path);
    status = absl::InternalError(absl::StrCat(status.message(), "; the storage must be reopened"));
    absl::MutexLock lock(&sticky_mu_);
    if (sticky_.ok()) sticky_ = status;
    failed_.store(true, std::memory_order_release);
    return status;
  }
  MDB_envinfo info;
  const int info_rc = mdb_env_info(env_.get(), &info);
  map_bytes_ = info_rc == MDB_SUCCESS ? info.me_mapsize : bytes;
  stats_.map_bytes = map_bytes_;
  return absl::OkStatus();
}

absl::Status LmdbStorage::CommitFreedMark() {
  for (int attempt = 0;; ++attempt) {
    GateEntry entry(&gate_);
    LmdbTxn txn;
    int rc = txn.Begin(env_.get(), 0);
    if (rc == MDB_SUCCESS) {
      MDB_dbi meta;
      const std::string meta_name(internal::kMetaTable);
      rc = mdb_dbi_open(txn.get(), meta_name.c_str(), 0, &meta);
      if (rc == MDB_SUCCESS) {
        ++freed_marks_;
        std::string count;
        internal::PutFixed64BE(&count, freed_marks_);
        MDB_val key = ToMdbVal(internal::kMetaFreedKey);
        MDB_val value = ToMdbVal(count);
        rc = mdb_put(txn.get(), meta, &key, &value, 0);
      }
      if (rc == MDB_SUCCESS) rc = txn.Commit();
    }
    if (rc == MDB_SUCCESS) {
      NoteDataEnd();
      return absl::OkStatus();
    }
    // It needs a page or two: from the reserve if the map has none left.
    if (rc == MDB_MAP_FULL && attempt == 0) {
      { GateEntry leave = std::move(entry); }
      GRYPH_RETURN_IF_ERROR(GrowMap("mdb_put", /*frees_space=*/true));
      continue;
    }
    return Fail("mdb_txn_commit", rc);
  }
}

uint64_t LmdbStorage::Ceiling(bool frees_space) const {
  const uint64_t hard =
      std::max(options_.max_map_bytes / os_page_bytes_ * os_page_bytes_, os_page_bytes_);
  if (frees_space) return hard;
  const uint64_t reserve = std::min(options_.reserve_bytes, options_.max_map_bytes / 8) /
                           os_page_bytes_ * os_page_bytes_;
  return std::max(hard - reserve, os_page_bytes_);
}

absl::Status LmdbStorage::GrowMap(absl::string_view operation, bool frees_space) {
  const uint64_t ceiling = Ceiling(frees_space);
  if (map_bytes_ >= ceiling) {
    if (!frees_space && Ceiling(true) > ceiling) {
      return absl::ResourceExhaustedError(absl::StrCat(
          operation, ": MDB_MAP_FULL: the map is at its ceiling of ", map_bytes_,
          " bytes (StorageOptions::max_map_bytes = ", options_.max_map_bytes,
          ", less the reserve kept for batches that free space); the batch was not applied (",
          options_.path, ")"));
    }
    return absl::ResourceExhaustedError(
        absl::StrCat(operation, ": MDB_MAP_FULL: the map is at its ceiling of ", map_bytes_,
                     " bytes (StorageOptions::max_map_bytes = ", options_.max_map_bytes,
                     "); the batch was not applied (", options_.path, ")"));
  }
  const uint64_t next = map_bytes_ >= ceiling / 2 ? ceiling : map_bytes_ * 2;
  GRYPH_RETURN_IF_ERROR(SetMapSize(next));
  ++stats_.map_growths;
  return absl::OkStatus();
}

absl::Status LmdbStorage::AdoptMapSize() { return SetMapSize(0); }

}  // namespace

absl::StatusOr<std::unique_ptr<Storage>> OpenLmdbStorage(const StorageOptions& options) {
  return LmdbStorage::Open(options);
}

namespace internal {

bool GetLmdbStorageStats(Storage* storage, LmdbStorageStats* stats) {
  auto* lmdb = dynamic_cast<LmdbStorage*>(storage);
  if (lmdb == nullptr) return false;
  *stats = lmdb->stats();
  return true;
}

}  // namespace internal

}  // namespace gryph
