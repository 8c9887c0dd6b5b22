// Internal: move-only RAII owners of LMDB's C handles, and the one place where LMDB return codes
// become absl::Status.
//
// LmdbEnv closes its environment, LmdbTxn aborts a transaction still open when it goes out of
// scope (commits are explicit), LmdbCursor closes its cursor. A cursor of a write transaction must
// be destroyed before that transaction commits or aborts (LMDB frees write cursors with their
// transaction); a cursor of a read transaction before the transaction is reset or aborted.
//
// Thread-safety: the owners are thread-compatible; what LMDB allows per handle applies (a write
// transaction belongs to one thread; with MDB_NOTLS a read transaction may move between threads
// but is used by one at a time).

#ifndef GRYPH_LIB_STORAGE_LMDB_HANDLE_H_
#define GRYPH_LIB_STORAGE_LMDB_HANDLE_H_

#include <lmdb.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gryph::internal {

// Translates an LMDB return code (an MDB_* code or an errno value) into a Status whose message
// names `operation` (the LMDB function, e.g. "mdb_txn_commit") and the code:
//   MDB_SUCCESS                                    OK
//   MDB_NOTFOUND                                   kNotFound
//   MDB_KEYEXIST                                   kAlreadyExists
//   MDB_MAP_FULL, MDB_DBS_FULL, MDB_READERS_FULL,
//   MDB_TLS_FULL, MDB_TXN_FULL, ENOSPC, EDQUOT,
//   EFBIG, ENOMEM                                  kResourceExhausted
//   MDB_CORRUPTED, MDB_PAGE_NOTFOUND, MDB_INVALID,
//   EIO                                            kDataLoss
//   MDB_PANIC                                      kInternal ("reopen the storage")
//   MDB_CURSOR_FULL, MDB_PAGE_FULL, MDB_BAD_RSLOT,
//   MDB_BAD_TXN, MDB_BAD_DBI                       kInternal
//   MDB_VERSION_MISMATCH, MDB_INCOMPATIBLE         kFailedPrecondition
//   MDB_MAP_RESIZED                                kAborted (retried internally)
//   MDB_BAD_VALSIZE, EINVAL                        kInvalidArgument
//   EACCES, EPERM, EROFS                           kPermissionDenied
//   ENOENT, ENOTDIR                                kNotFound
//   EAGAIN, EBUSY                                  kUnavailable
//   anything else                                  kUnknown
// `context` (e.g. the store's path), when not empty, is appended to the message.
absl::Status LmdbStatus(absl::string_view operation, int rc, absl::string_view context = {});

// Whether `rc` leaves the environment unusable or untrustworthy, so that the failure must be
// sticky: MDB_PANIC, MDB_CORRUPTED, MDB_PAGE_NOTFOUND, MDB_INVALID, EIO.
bool LmdbErrorIsFatal(int rc);

inline MDB_val ToMdbVal(absl::string_view s) {
  MDB_val v;
  v.mv_size = s.size();
  v.mv_data = const_cast<char*>(s.data());  // LMDB never writes through a key or value it is given
  return v;
}

inline absl::string_view FromMdbVal(const MDB_val& v) {
  return absl::string_view(static_cast<const char*>(v.mv_data), v.mv_size);
}

// Owns an MDB_env.
class LmdbEnv {
 public:
  LmdbEnv() = default;
  explicit LmdbEnv(MDB_env* env) : env_(env) {}
  LmdbEnv(LmdbEnv&& other) noexcept : env_(std::exchange(other.env_, nullptr)) {}
  LmdbEnv& operator=(LmdbEnv&& other) noexcept {
    if (this != &other) {
      Close();
      env_ = std::exchange(other.env_, nullptr);
    }
    return *this;
  }
  LmdbEnv(const LmdbEnv&) = delete;
  LmdbEnv& operator=(const LmdbEnv&) = delete;
  ~LmdbEnv() { Close(); }

  // mdb_env_create. Returns the LMDB code.
  int Create() {
    Close();
    return mdb_env_create(&env_);
  }
  // REQUIRES: every transaction and cursor of the environment is gone.
  void Close() {
    if (env_ != nullptr) mdb_env_close(std::exchange(env_, nullptr));
  }
  MDB_env* get() const { return env_; }

 private:
  MDB_env* env_ = nullptr;
};

// Owns an MDB_txn: aborts it on destruction unless committed or released.
class LmdbTxn {
 public:
  LmdbTxn() = default;
  explicit LmdbTxn(MDB_txn* txn) : txn_(txn) {}
  LmdbTxn(LmdbTxn&& other) noexcept : txn_(std::exchange(other.txn_, nullptr)) {}
  LmdbTxn& operator=(LmdbTxn&& other) noexcept {
    if (this != &other) {
      Abort();
      txn_ = std::exchange(other.txn_, nullptr);
    }
    return *this;
  }
  LmdbTxn(const LmdbTxn&) = delete;
  LmdbTxn& operator=(const LmdbTxn&) = delete;
  ~LmdbTxn() { Abort(); }

  // mdb_txn_begin. Returns the LMDB code; on failure the owner stays empty.
  int Begin(MDB_env* env, unsigned int flags) {
    Abort();
    return mdb_txn_begin(env, nullptr, flags, &txn_);
  }
  // mdb_txn_commit. The transaction is gone afterwards whatever the result (LMDB frees it on
  // failure too). Returns the LMDB code.
  int Commit() { return mdb_txn_commit(std::exchange(txn_, nullptr)); }
  void Abort() {
    if (txn_ != nullptr) mdb_txn_abort(std::exchange(txn_, nullptr));
  }
  // Gives up ownership.
  MDB_txn* release() { return std::exchange(txn_, nullptr); }
  MDB_txn* get() const { return txn_; }

 private:
  MDB_txn* txn_ = nullptr;
};

// Owns an MDB_cursor.
class LmdbCursor {
 public:
  LmdbCursor() = default;
  LmdbCursor(LmdbCursor&& other) noexcept : cursor_(std::exchange(other.cursor_, nullptr)) {}
  LmdbCursor& operator=(LmdbCursor&& other) noexcept {
    if (this != &other) {
      Close();
      cursor_ = std::exchange(other.cursor_, nullptr);
    }
    return *this;
  }
  LmdbCursor(const LmdbCursor&) = delete;
  LmdbCursor& operator=(const LmdbCursor&) = delete;
  ~LmdbCursor() { Close(); }

  // mdb_cursor_open. Returns the LMDB code; on failure the owner stays empty.
  int Open(MDB_txn* txn, MDB_dbi dbi) {
    Close();
    return mdb_cursor_open(txn, dbi, &cursor_);
  }
  void Close() {
    if (cursor_ != nullptr) mdb_cursor_close(std::exchange(cursor_, nullptr));
  }
  // mdb_cursor_get. Returns the LMDB code.
  int Get(MDB_val* key, MDB_val* value, MDB_cursor_op op) {
    return mdb_cursor_get(cursor_, key, value, op);
  }
  MDB_cursor* get() const { return cursor_; }

 private:
  MDB_cursor* cursor_ = nullptr;
};

}  // namespace gryph::internal

#endif  // GRYPH_LIB_STORAGE_LMDB_HANDLE_H_
