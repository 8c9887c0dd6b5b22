// A Storage wrapper that injects failures, for tests of everything that persists (Pubend, PFS,
// the deterministic simulator).
//
// It forwards to a target Storage and can, on command:
//   - fail the Nth commit, or every commit after the Nth, with a chosen status — the failed batch
//     never reaches the target, so nothing of it is visible (as with a real failed commit);
//   - report a full map (kResourceExhausted) on the next commit;
//   - fail reads (Get, NewCursor, Scan) with a chosen status;
//   - report chosen rows as damaged, as LMDB reports a row whose checksum fails;
//   - simulate a crash, either now or right after the Nth commit reaches the target (the commit
//     is durable but its caller sees an error, the "crash between commit and acknowledgement"
//     case). After a crash every call fails with kUnavailable; recover by destroying the wrapper
//     and its users and reopening the target's data: for a MemoryStorage a new instance on the
//     same MemoryStorage::State, for LMDB closing the Storage and calling OpenLmdbStorage on the
//     same path. Because commits are atomic, what survives is exactly the committed batches.
// It counts attempted and successful commits.
//
// Commits are numbered from 1 in the order Commit is called on the wrapper, counting every call
// (including empty batches and failed ones).
//
// Thread-safety: thread-safe. The target must outlive the wrapper.

#ifndef GRYPH_TESTING_FAULT_INJECTING_STORAGE_H_
#define GRYPH_TESTING_FAULT_INJECTING_STORAGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "gryph/storage.h"

namespace gryph {

class FaultInjectingStorage : public StorageWrapper {
 public:
  explicit FaultInjectingStorage(Storage* target) : StorageWrapper(target) {}

  // Commit number n fails with `status` without reaching the target.
  // REQUIRES: !status.ok(); n >= 1.
  void FailCommitNumber(uint64_t n, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Every commit numbered > n fails with `status` without reaching the target.
  // REQUIRES: !status.ok().
  void FailCommitsAfter(uint64_t n, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // The next commit fails as LMDB does at its map ceiling: kResourceExhausted.
  void FailNextCommitWithMapFull() ABSL_LOCKS_EXCLUDED(mu_);
  // Get, NewCursor and Scan fail with `status` until ClearFaults(). REQUIRES: !status.ok().
  void FailReads(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // From now on reads of table[key] fail as a damaged row does (DamagedRowError: kDataLoss
  // carrying the key; a Cursor stops there until its next move), until ClearFaults(). Commits
  // still reach the row.
  void DamageRow(absl::string_view table, absl::string_view key) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes every injected fault except a crash.
  void ClearFaults() ABSL_LOCKS_EXCLUDED(mu_);

  // From now on every call fails with kUnavailable ("crashed"); the target is left as it is.
  void SimulateCrash() ABSL_LOCKS_EXCLUDED(mu_);
  // Commit number n reaches the target (and commits if the target accepts it), then the storage
  // crashes: that Commit returns kUnavailable, as does every later call. REQUIRES: n >= 1.
  void CrashAfterCommitNumber(uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  bool crashed() const ABSL_LOCKS_EXCLUDED(mu_);

  // Commits called so far (the number of the last commit).
  uint64_t commits_attempted() const ABSL_LOCKS_EXCLUDED(mu_);
  // Commits that returned OK.
  uint64_t commits_succeeded() const ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status Commit(const WriteBatch& batch) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::optional<std::string>> Get(absl::string_view table,
                                                 absl::string_view key) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::unique_ptr<Cursor>> NewCursor(absl::string_view table) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Scan(absl::string_view table, absl::string_view begin, absl::string_view end,
                    ScanFn fn) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> ApproximateBytesUsed() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The status a read fails with now, or OK.
  absl::Status ReadFault() const ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  uint64_t attempted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t succeeded_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t fail_number_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none
  absl::Status fail_number_status_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> fail_after_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_after_status_ ABSL_GUARDED_BY(mu_);
  absl::Status read_status_ ABSL_GUARDED_BY(mu_);
  // (table, key) of every row reported damaged.
  std::set<std::pair<std::string, std::string>> damaged_ ABSL_GUARDED_BY(mu_);
  uint64_t crash_after_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none
  bool crashed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gryph

#endif  // GRYPH_TESTING_FAULT_INJECTING_STORAGE_H_
