// The storage seam: every byte gryph persists goes through a Storage.
//
// A Storage is a set of named tables; each table is an ordered map from byte-string keys to
// byte-string values (keys compare with memcmp, so big-endian integers sort numerically). Writes
// are grouped in a WriteBatch that spans any number of tables and is committed atomically: after a
// crash either the whole batch is there or none of it is. Reads see a consistent snapshot of
// committed state. This is what lets the Pubend log events together with its metadata, and the
// PFS write a record together with latestDelivered, in ONE transaction.
//
// Implementations:
//   OpenLmdbStorage()   LMDB, one environment (a directory) per Storage.
//   NewMemoryStorage()  in memory, same semantics; see gryph/memory_storage.h for crash
//                       simulation (handing the committed state to a new instance).
//   FaultInjectingStorage (gryph/testing/fault_injecting_storage.h) wraps either to fail commits.
// Callers depend only on this interface; tests substitute a fake deriving from StorageWrapper.
//
// Keys are 1..kMaxKeyBytes bytes (LMDB's limit, enforced by every implementation). Values are any
// length including 0. Table names are 1..kMaxTableNameBytes bytes without NUL; names beginning
// with "gryph." are reserved for the storage layer (its "gryph.meta" table, docs/format.md).
// Because keys are never empty, an empty range bound means "unbounded".
//
// Damaged rows: LMDB keeps every value with a CRC-32C of its table, key and value
// (docs/format.md, "Storage") and checks it on every read. A row whose check fails — a flipped
// bit on disk or in memory, a value torn or moved — is never returned: Get fails with kDataLoss,
// a Cursor stops there with kDataLoss, and the status names the table and carries the key
// (DamagedRowKey). Unlike other damage this is not sticky: the rest of the store stays readable
// and writable, so the owner of the row decides what the loss of that one row means. What the
// checksum does not cover is LMDB's own page structure (branch pages, page headers, the free
// list): damage there is MDB_CORRUPTED (kDataLoss, sticky) or, where LMDB follows a damaged
// pointer without checking it, a crash. gryph checks what LMDB does not where it can: a value or
// key that would lie outside the data file is a damaged row (or, for a key, damaged structure);
// a seek that lands below its target or passes over keys at it, and a lookup whose neighbours
// contradict its "not found", are damaged structure (kDataLoss, sticky). VerifyStorage below
// finds both kinds.
//
// Thread-safety: a Storage is thread-safe. Commits are serialized; reads run concurrently with
// each other and with a commit. A Cursor is thread-compatible (one thread at a time, but it may
// move between threads). A WriteBatch is thread-compatible.
//
// LMDB's caveats are ours (see OpenLmdbStorage): one open Storage per directory per process; read
// snapshots (Cursors) must be short, because an open snapshot pins old pages and blocks map
// growth; a thread must not call Commit while it holds a Cursor of the same Storage.

#ifndef GRYPH_STORAGE_H_
#define GRYPH_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gryph {

// When a successful Commit is durable.
enum class Durability {
  // Commit returns after the data is flushed to stable storage (fsync): it survives a process
  // or machine crash. The default.
  kSync,
  // Commit returns after the data is written to the OS page cache without fsync: it survives a
  // process crash, but a machine crash (power loss, kernel panic) may lose the last commits.
  // It never corrupts the store: after a machine crash the store holds a prefix of the commits.
  kNoSync,
};

struct StorageOptions {
  // The directory that holds the store (created if missing, unless read_only). LMDB keeps
  // data.mdb and lock.mdb in it. A new store is made whole in a staging directory inside it and
  // moved in by a rename (docs/format.md): a power loss while it is created leaves no store or
  // an empty one, never a data file that does not open.
  std::string path;

  // Opens an existing store for reading only, for tools that look into a store a broker may be
  // writing at the same time (gryph-inspect): LMDB's MDB_RDONLY. Nothing is created, written or
  // grown: the directory must hold a gryph store (kNotFound otherwise), Commit fails with
  // kFailedPrecondition, and data.mdb is opened read-only, so it is never written, truncated or
  // extended. The tables are those that existed at open; one created later reads as empty. The
  // lock file is used as by any reader (it holds the reader table that keeps a writer in another
  // process from reusing the pages a snapshot reads): it is created if missing, which needs a
  // writable directory; on a read-only file system LMDB goes without it, safe only if no writer
  // runs. Still one open Storage per directory per process, a read-only one included (LMDB's
  // locks are per process: a reader and a writer of one store run in separate processes).
  // Durability and reserve_bytes have no effect.
  bool read_only = false;

  Durability durability = Durability::kSync;

  // The memory map is sized initial_map_bytes at open (or the size of the existing data file if
  // larger) and doubled whenever a commit needs more, up to max_map_bytes. The map reserves
  // address space, not disk: the file grows only with the data.
  uint64_t initial_map_bytes = uint64_t{64} << 20;  // 64 MiB
  uint64_t max_map_bytes = uint64_t{1} << 40;       // 1 TiB: growth ceiling (at most 2^47)

  // The most tables the store may ever hold (LMDB named databases).
  int max_tables = 128;

  // The most concurrent read snapshots (Get, Scan, open Cursors) of all the processes that
  // have the store open (a slot each; LMDB's reader table). Slots left by a process that died
  // while reading are freed at Open and whenever the table is found full.
  int max_readers = 126;

  // Room at the top of the map kept for batches that free space (WriteBatch::set_frees_space:
  // releases, reclaims): other commits fail with kResourceExhausted once the map would grow past
  // max_map_bytes - reserve, so that at a full map a release can still commit and make room. At
  // most max_map_bytes / 8 is kept, whatever this says; 0 keeps none.
  uint64_t reserve_bytes = uint64_t{64} << 20;  // 64 MiB
};

// An ordered list of writes to named tables, applied atomically by Storage::Commit in order
// (a later write to the same key wins).
//
// Table names are interned per batch: an operation stores a small index into tables(), so
// implementations resolve each distinct table once per commit, not once per operation.
//
// Thread-safety: thread-compatible. Copyable and movable.
class WriteBatch {
 public:
  // Not persisted: an in-memory tag only.
  enum class OpType : uint8_t { kPut, kDelete, kDeleteRange };

  // A view of one operation. All views are valid until the batch is next modified or destroyed.
  struct Op {
    OpType type;
    size_t table_index;       // index into tables()
    absl::string_view table;  // == tables()[table_index]
    // kPut, kDelete: the key. kDeleteRange: the inclusive begin bound ("" = from the first key).
    absl::string_view key;
    // kPut: the value. kDeleteRange: the exclusive end bound ("" = to the last key).
    // kDelete: empty.
    absl::string_view value;
  };

  WriteBatch() = default;
  WriteBatch(const WriteBatch&) = default;
  WriteBatch& operator=(const WriteBatch&) = default;
  WriteBatch(WriteBatch&&) noexcept = default;
  WriteBatch& operator=(WriteBatch&&) noexcept = default;

  // Sets table[key] = value. Invalid names or keys are reported by Storage::Commit, which then
  // applies nothing.
  void Put(absl::string_view table, absl::string_view key, absl::string_view value);
  // Removes table[key] if present.
  void Delete(absl::string_view table, absl::string_view key);
  // Removes every key k of `table` with begin <= k < end (half-open). An empty bound is
  // unbounded: DeleteRange(t, "", "") empties the table. Meant for reclaiming a log prefix; it
  // costs time proportional to the number of keys removed.
  void DeleteRange(absl::string_view table, absl::string_view begin, absl::string_view end);

  // Appends a copy of every operation of `other`, after this batch's own (group commit). This
  // batch's frees_space() is unchanged.
  void Append(const WriteBatch& other);
  // Removes every operation and clears frees_space().
  void Clear();

  // Marks a batch whose purpose is to free space (it deletes or releases more than it writes):
  // it may use the storage's reserve (StorageOptions::reserve_bytes), so that it commits even
  // when ordinary batches no longer fit.
  void set_frees_space(bool frees) { frees_space_ = frees; }
  bool frees_space() const { return frees_space_; }

  size_t count() const { return ops_.size(); }
  bool empty() const { return ops_.empty(); }
  // The memory the batch holds: its bytes plus a fixed overhead per operation.
  size_t ApproximateBytes() const;

  // The i-th operation. REQUIRES: i < count().
  Op op(size_t i) const;
  // The distinct table names in order of first use.
  const std::vector<std::string>& tables() const { return tables_; }

 private:
  struct Rec {
    OpType type;
    uint32_t table;
    size_t key_offset;
    size_t key_size;
    size_t value_offset;
    size_t value_size;
  };

  uint32_t InternTable(absl::string_view table);
  void Add(OpType type, absl::string_view table, absl::string_view key, absl::string_view value);

  std::vector<std::string> tables_;
  std::vector<Rec> ops_;
  std::string bytes_;  // every key and value, back to back
  uint32_t last_table_ = 0;
  bool frees_space_ = false;
};

// An ordered walk over one table of one read snapshot, in the style of leveldb's Iterator.
//
// The snapshot is taken when the cursor is created and held until it is destroyed: commits made
// meanwhile are invisible to it. Keep cursors short-lived: on LMDB an open snapshot pins the pages
// it sees and a commit that must grow the map waits until every cursor is destroyed.
//
// A cursor starts unpositioned (!Valid()). A cursor over a table that does not exist is empty:
// never Valid(), status() OK. Errors (rare: I/O, corruption) make the cursor !Valid() and are
// reported by status(). A damaged row (see the file comment) stops the cursor the same way, with
// kDataLoss carrying its key (DamagedRowKey), but the cursor stays on that row: the next move
// clears the error, so a caller that can do without the row steps over it with Next() (or
// Prev()).
//
// Thread-safety: thread-compatible. Must be destroyed before its Storage.
class Cursor {
 public:
  Cursor() = default;
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;
  virtual ~Cursor() = default;

  // Whether the cursor is at an entry.
  virtual bool Valid() const = 0;
  virtual void SeekToFirst() = 0;
  virtual void SeekToLast() = 0;
  // Positions at the first key >= target ("" is the first key). A target longer than
  // Storage::kMaxKeyBytes is an error (status() InvalidArgument).
  virtual void Seek(absl::string_view target) = 0;
  // REQUIRES: Valid(), or stopped at a damaged row.
  virtual void Next() = 0;
  // REQUIRES: Valid(), or stopped at a damaged row.
  virtual void Prev() = 0;

  // The current entry. REQUIRES: Valid(). The views stay valid until the cursor moves or is
  // destroyed.
  virtual absl::string_view key() const = 0;
  virtual absl::string_view value() const = 0;

  // OK unless an operation failed; the first error is kept (a damaged row's until the next
  // move).
  virtual absl::Status status() const = 0;
};

// The storage interface. See the file comment for the data model and thread-safety.
//
// Failure codes shared by every method:
//   kInvalidArgument    a bad table name, key or range; nothing was changed.
//   kResourceExhausted  no room: the map is at max_map_bytes, the disk or file-size limit is
//                       reached, or a limit (tables, readers, transaction size) is hit. Nothing
//                       already committed is lost; a commit that failed this way applied nothing.
//   kDataLoss           the store is damaged (corruption detected, I/O error), or one row is
//                       (DamagedRowKey says which).
//   kInternal           the storage environment is unusable (LMDB MDB_PANIC): reopen it.
//   kFailedPrecondition  misuse (e.g. store of another format, already open).
// kDataLoss (but a damaged row's) and kInternal are sticky: every later call fails with the same
// status; reopen the storage to recover.
class Storage {
 public:
  // The longest key (LMDB's default maximum key size).
  static constexpr size_t kMaxKeyBytes = 511;
  static constexpr size_t kMaxTableNameBytes = 128;
  // Table names starting with this are reserved for the storage layer.
  static constexpr absl::string_view kReservedTablePrefix = "gryph.";

  // Called for each entry of a Scan; returns false to stop. The views are valid only during the
  // call.
  using ScanFn = absl::FunctionRef<bool(absl::string_view key, absl::string_view value)>;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  virtual ~Storage() = default;

  // Applies every operation of `batch` atomically, in order: when it returns OK the whole batch
  // is committed (and durable per Durability); otherwise nothing of it is. An empty batch is a
  // no-op returning OK. On LMDB a full map is grown and the batch retried, so no error reaches the
  // caller while the disk has room. A storage opened read-only fails every Commit, an empty
  // batch's too, with kFailedPrecondition.
  // REQUIRES: the calling thread holds no Cursor of this storage.
  virtual absl::Status Commit(const WriteBatch& batch) = 0;

  // The committed value of table[key], or nullopt if absent (including when the table does not
  // exist). A damaged row is kDataLoss with DamagedRowKey(status) == key.
  virtual absl::StatusOr<std::optional<std::string>> Get(absl::string_view table,
                                                         absl::string_view key) = 0;

  // A cursor over `table` (see Cursor). Fails with kResourceExhausted when too many snapshots are
  // open.
  virtual absl::StatusOr<std::unique_ptr<Cursor>> NewCursor(absl::string_view table) = 0;

  // Calls fn(key, value) for each entry of `table` with begin <= key < end, in key order, from one
  // snapshot, until fn returns false. Empty bounds are unbounded. begin > end (both set) is
  // kInvalidArgument. A damaged row the walk reaches is its kDataLoss (DamagedRowKey), the one
  // just after the range's last row included: a row's checksum covers its key, so a damaged row's
  // key may be what is damaged and the row may belong to the range whatever its key now reads.
  // The default implementation walks NewCursor().
  virtual absl::Status Scan(absl::string_view table, absl::string_view begin, absl::string_view end,
                            ScanFn fn);

  // The name of every table that exists, in byte order, the reserved ones included.
  virtual absl::StatusOr<std::vector<std::string>> ListTables() = 0;

  // How many rows the storage's own bookkeeping says `table` holds (LMDB keeps a count apart
  // from the pages), or nullopt where it keeps none (the default). VerifyStorage compares it
  // with what a walk finds: a damaged page header can drop rows from a page with no other sign.
  virtual absl::StatusOr<std::optional<uint64_t>> RecordedRowCount(absl::string_view table) {
    (void)table;
    return std::nullopt;
  }

  // The bytes the store occupies: for LMDB the pages in use times the page size (the size the
  // data file has grown to, including free pages kept for reuse); for memory, the bytes of keys
  // and values plus a fixed per-entry overhead. For benchmarks reporting bytes per event.
  virtual absl::StatusOr<uint64_t> ApproximateBytesUsed() = 0;
};

// Forwards every call to a target Storage: derive from it and override only what you change
// (like leveldb's EnvWrapper). Thread-safety: as the target. The target must outlive the wrapper.
class StorageWrapper : public Storage {
 public:
  explicit StorageWrapper(Storage* target) : target_(target) {}

  Storage* target() const { return target_; }

  absl::Status Commit(const WriteBatch& batch) override { return target_->Commit(batch); }
  absl::StatusOr<std::optional<std::string>> Get(absl::string_view table,
                                                 absl::string_view key) override {
    return target_->Get(table, key);
  }
  absl::StatusOr<std::unique_ptr<Cursor>> NewCursor(absl::string_view table) override {
    return target_->NewCursor(table);
  }
  absl::Status Scan(absl::string_view table, absl::string_view begin, absl::string_view end,
                    ScanFn fn) override {
    return target_->Scan(table, begin, end, fn);
  }
  absl::StatusOr<std::vector<std::string>> ListTables() override { return target_->ListTables(); }
  absl::StatusOr<std::optional<uint64_t>> RecordedRowCount(absl::string_view table) override {
    return target_->RecordedRowCount(table);
  }
  absl::StatusOr<uint64_t> ApproximateBytesUsed() override {
    return target_->ApproximateBytesUsed();
  }

 private:
  Storage* const target_;
};

// The status of a damaged row: kDataLoss naming `table` and the key (escaped), with `detail`
// (what was wrong), and carrying the key for DamagedRowKey. For Storage implementations and
// wrappers.
absl::Status DamagedRowError(absl::string_view table, absl::string_view key,
                             absl::string_view detail);

// The key of the damaged row that `status` reports, or nullopt if it reports no damaged row.
std::optional<std::string> DamagedRowKey(const absl::Status& status);

// What VerifyStorage found.
struct StorageVerifyReport {
  struct DamagedRow {
    std::string table;
    std::string key;
    absl::Status status;  // kDataLoss from DamagedRowError
  };
  uint64_t tables = 0;  // tables walked
  uint64_t rows = 0;    // rows read whole and checked, damaged ones included
  std::vector<DamagedRow> damaged;
  // The first error that stopped the walk (LMDB page-structure damage, I/O), or OK when every
  // table was walked to its end.
  absl::Status structure;

  bool clean() const { return damaged.empty() && structure.ok(); }
};

// Reads every row of every table of `storage` and checks it — its checksum, that keys come in
// order, and that a lookup of its key finds it (damage to a key of a branch page misleads
// lookups while every row reads intact) — stepping over damaged rows, so the report lists each
// of them. Fails only when the tables cannot be listed; an error part-way is the report's
// `structure`. A snapshot per table, and the lookups and row counts in snapshots of their own:
// run it on a store at rest, since on one being written a commit in between can look like
// damaged structure. Memory storage has no checksums and always verifies clean.
absl::StatusOr<StorageVerifyReport> VerifyStorage(Storage& storage);

// Opens (creating if needed) the LMDB store in directory options.path; with options.read_only,
// opens an existing one for reading (see StorageOptions::read_only).
//
// Checks the "gryph.meta" table (docs/format.md, "Storage"): a fresh store gets the current magic
// and format version; a store with another magic or version, or an LMDB environment that is not
// a gryph store, fails with kFailedPrecondition and is left unchanged. Clears reader slots left by
// dead processes.
//
// Fails with kInvalidArgument for bad options (empty path, a path that is a file,
// initial_map_bytes 0 or > max_map_bytes, max_map_bytes > 2^47, max_tables not in 1..4096,
// max_readers not in 1..65536), kDataLoss for a data file shorter than its last page (truncated)
// or not a file, kFailedPrecondition if
// this process already has the directory open (LMDB allows one environment per file per
// process), kPermissionDenied, kDataLoss for a damaged file. Read-only, it fails with kNotFound
// for a missing directory or one that holds no store (no data.mdb, an empty one, or an LMDB
// environment with no table at all), creating nothing, and a data file shorter than its last
// page is kDataLoss unless only pages that are never read are missing (it cannot be extended).
//
// Map growth: when a commit fills the map (MDB_MAP_FULL), its transaction is aborted, the map
// doubled (capped at max_map_bytes) and the whole batch retried, as often as needed. Resizing
// (mdb_env_set_mapsize) needs every transaction of this process closed: commits are serialized by
// a mutex, and the resize waits until no read snapshot is open (open Cursors and running Gets and
// Scans finish; new reads are not held back while it waits, and are held only during the remap
// itself). Hence the rule that a thread must not Commit while holding a Cursor. At the ceiling
// the commit fails with kResourceExhausted (for a batch that does not free space, already at
// max_map_bytes - reserve_bytes: see StorageOptions::reserve_bytes); so does a full disk (ENOSPC,
// EDQUOT, EFBIG, or an EIO short write when the disk or file-size limit is nearly exhausted).
// Neither is sticky and neither loses anything committed before.
absl::StatusOr<std::unique_ptr<Storage>> OpenLmdbStorage(const StorageOptions& options);

// A fresh, empty in-memory storage with the same semantics as LMDB's. Equivalent to
// std::make_unique<MemoryStorage>() (gryph/memory_storage.h).
std::unique_ptr<Storage> NewMemoryStorage();

}  // namespace gryph

#endif  // GRYPH_STORAGE_H_
