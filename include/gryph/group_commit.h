// Group commit: many small submissions, one storage transaction (and one fsync) per group.
//
// Submitters hand a WriteBatch, the number of records it carries and a completion callback to
// Submit(). Pending submissions form the next group; the group closes when it holds max_records
// records or when max_delay has passed since its first submission, whichever comes first. A closed
// group is merged into one batch, committed with one Storage::Commit, and then every callback of
// the group runs with the commit's status, in submission order. A group closes at max_records but
// is not split: everything pending when the committer gets to it goes into one commit.
//
// Guarantees:
//   - Every submission's callback runs exactly once (unless the committer is destroyed first,
//     see ~GroupCommitter), after its group's commit returned, with that commit's status.
//   - Nothing is acknowledged (OK) that was not committed.
//   - Submissions commit in submission order, and the committed submissions are always a prefix
//     of the submitted ones: after a commit fails, the committer is failed — every later
//     submission's callback gets the same error without touching storage. (A log whose record i
//     failed must not commit record i+1.) Build a new GroupCommitter, after re-reading what was
//     committed, to continue.
//   - Unless resume_after_full is set: then a commit that fails for want of room
//     (kResourceExhausted, which applies nothing) fails only its own group, and later groups
//     commit as usual. For submitters whose batches never build on each other's (the Pubend's
//     rows are each written by the one commit they describe); a submitter whose later batches
//     assume the earlier ones committed (the SHB's rounds) needs the prefix rule.
//   - A batch marked frees_space (WriteBatch::set_frees_space: a release, a reclaim) commits in a
//     group of its own, ahead of the ordinary group pending with it, and may use the storage's
//     reserve: so that a full store can make room. Such a batch must not depend on ordinary
//     submissions still pending (a release names only committed ticks).
//
// Two ways to drive it:
//   - Manual (sans-I/O), for the deterministic simulator and single-threaded owners: call
//     FlushIfDue(now) whenever time passes or after submitting, and arm a timer for
//     NextDeadline(). Flush() commits whatever is pending right now. Callbacks run on the thread
//     that flushes.
//   - Background thread: Start() launches a thread that commits groups as they close while new
//     submissions accumulate for the next group (double buffering), so a submitter never waits
//     for an fsync: Submit only appends to the pending group under a short lock. Callbacks run on
//     that thread. Stop() commits what is pending and joins the thread. Flush() may still be
//     called; commits never overlap.
//
// The committer does not bound what is pending: the owner limits its in-flight submissions
// (pending_records() helps).
//
// Thread-safety: thread-safe. Callbacks may call Submit() but must not call Flush(),
// FlushIfDue(), Stop() or destroy the committer (they run under the commit lock).

#ifndef GRYPH_GROUP_COMMIT_H_
#define GRYPH_GROUP_COMMIT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gryph/latency_histogram.h"
#include "gryph/storage.h"

namespace gryph {

struct GroupCommitOptions {
  // A group closes once it holds this many records (N). REQUIRES: > 0.
  size_t max_records = 1000;
  // ... or once this long has passed since its first submission (T). Zero: close at once.
  absl::Duration max_delay = absl::Milliseconds(2);
  // The time source for max_delay; null means absl::Now. The simulator passes its virtual clock
  // (and drives the committer manually). The background thread sleeps in real time, so it should
  // use the real clock.
  std::function<absl::Time()> clock;
  // Runs after the callbacks of each group, on the committing thread (e.g. to send downstream,
  // in one message, what the whole group made durable). Same rules as callbacks.
  std::function<void()> after_group;
  // A full store (kResourceExhausted) fails only that group; the committer goes on (see the
  // guarantees above for who may set this).
  bool resume_after_full = false;
};

class GroupCommitter {
 public:
  // Receives the commit's status; invoked exactly once.
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // Statistics, for operators, tests and benchmarks.
  struct Stats {
    uint64_t groups = 0;             // commits attempted (one per group)
    uint64_t submissions = 0;        // submissions whose callback has run
    uint64_t records = 0;            // records of those submissions
    uint64_t max_group_records = 0;  // the largest group committed
    // How long each group's Storage::Commit took (with its fsync), on the real clock.
    LatencyHistogram commit_time;
  };

  // `storage` must outlive the committer.
  GroupCommitter(Storage* storage, GroupCommitOptions options);
  GroupCommitter(const GroupCommitter&) = delete;
  GroupCommitter& operator=(const GroupCommitter&) = delete;
  // Stops the background thread if running (letting its current commit finish), then drops
  // whatever is still pending WITHOUT committing it and WITHOUT running its callbacks, as a crash
  // would. Call Flush() or Stop() first to commit pending submissions.
  ~GroupCommitter();

  // Adds `batch`, carrying `records` records (counted against max_records), to the pending
  // group; `done` runs after the group's commit. Never blocks on storage and never runs `done`
  // itself. An empty batch is allowed (its callback reports the group's status).
  void Submit(WriteBatch batch, size_t records, Done done) ABSL_LOCKS_EXCLUDED(mu_, commit_mu_);
  // As Submit, but `fill` writes the submission's operations straight into the pending group's
  // batch (no batch of its own to build and copy). It runs under the committer's lock, so it
  // should only append; it must not call the committer. Returns the number of the group the
  // submission joined, for JoinPending.
  uint64_t SubmitInto(size_t records, absl::FunctionRef<void(WriteBatch&)> fill, Done done)
      ABSL_LOCKS_EXCLUDED(mu_, commit_mu_);
  // Adds `records` more records, written by `fill`, to the submission that returned `group`,
  // if that group is still pending: they commit with it and its callback reports them. Returns
  // false (and calls nothing) once the committer has taken the group. A submitter that joins
  // must make sure nothing it submitted after that submission commits before what it joins.
  bool JoinPending(uint64_t group, size_t records, absl::FunctionRef<void(WriteBatch&)> fill)
      ABSL_LOCKS_EXCLUDED(mu_, commit_mu_);

  // Commits everything pending now as one group and runs its callbacks; returns the commit's
  // status (OK when nothing was pending and the committer has not failed).
  absl::Status Flush() ABSL_LOCKS_EXCLUDED(mu_, commit_mu_);
  // Flush() if the pending group is due at `now` (max_records reached, or now >= first
  // submission + max_delay); otherwise does nothing and returns OK.
  absl::Status FlushIfDue(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_, commit_mu_);
  // When the pending group is due: nullopt if nothing is pending, absl::InfinitePast() if it is
  // due already (max_records reached), else first submission + max_delay.
  std::optional<absl::Time> NextDeadline() const ABSL_LOCKS_EXCLUDED(mu_);

  // Runs the callback of everything pending with `status` (an error), without committing it,
  // and fails the committer with it: what is submitted later gets it too. For an owner that
  // closes without committing (a manually driven broker's destructor) but must not leave its
  // submitters unanswered. REQUIRES: !status.ok(); not called from a callback; not started.
  void Abandon(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_, commit_mu_);

  // Starts the background committer thread. REQUIRES: not started.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Commits what is pending, then stops and joins the thread (no-op if not started). Afterwards
  // the committer is in manual mode again. REQUIRES: not called from a callback.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_, commit_mu_);

  // OK, or the error of the commit that failed the committer.
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t pending_records() const ABSL_LOCKS_EXCLUDED(mu_);
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Group {
    WriteBatch batch;
    size_t records = 0;
    std::vector<Done> callbacks;
  };

  absl::Time Now() const;
  // Adds a submission whose operations are in pending_.batch already.
  void AddedLocked(absl::Time now, bool was_empty, size_t records, Done done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `records` more records into the pending group; wakes the thread when it fills up.
  void CountLocked(size_t records) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DueLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Group TakePendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether anything (ordinary or freeing) is pending.
  bool HasPendingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits `group` (unless the committer has failed) and runs its callbacks.
  absl::Status CommitGroupLocked(Group group, bool frees_space)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes both pending groups and commits them: the freeing one first. Returns the ordinary
  // group's status (the freeing one's if there is no ordinary one).
  absl::Status CommitPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  void ThreadMain() ABSL_LOCKS_EXCLUDED(mu_, commit_mu_);
  // Stops the thread, committing what is pending iff `flush`.
  void StopThread(bool flush) ABSL_LOCKS_EXCLUDED(mu_, commit_mu_);

  // Constant after construction.
  Storage* const storage_;
  const GroupCommitOptions options_;

  // Held for a whole commit and its callbacks, so commits (and callback runs) never overlap.
  // Acquired before mu_ when both are needed.
  absl::Mutex commit_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  // Wakes the thread: a first submission, a full group, or a stop request. (A CondVar, not a
  // Condition, so that only the waiting thread reads the guarded state; see
  // tests/tsan_absl_mutex.cc.)
  absl::CondVar work_;
  Group pending_ ABSL_GUARDED_BY(mu_);
  // The frees_space submissions pending, committed ahead of pending_; due at once.
  Group freeing_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_number_ ABSL_GUARDED_BY(mu_) = 1;  // pending_'s number (SubmitInto)
  absl::Time first_pending_ ABSL_GUARDED_BY(mu_);     // when pending_ got its first submission
  absl::Status status_ ABSL_GUARDED_BY(mu_);          // sticky failure
  Stats stats_ ABSL_GUARDED_BY(mu_);
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool flush_on_stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // touched only by Start/StopThread, which callers do not race
};

}  // namespace gryph

#endif  // GRYPH_GROUP_COMMIT_H_
