#include "gryph/group_commit.h"

#include <algorithm>
#include <utility>
#if defined(__linux__)
#include <pthread.h>
#endif

namespace gryph {

GroupCommitter::GroupCommitter(Storage* storage, GroupCommitOptions options)
    : storage_(storage), options_(std::move(options)) {}

GroupCommitter::~GroupCommitter() {
  StopThread(/*flush=*/false);
  // pending_ (batch and callbacks) is destroyed without running anything: a crash.
}

absl::Time GroupCommitter::Now() const { return options_.clock ? options_.clock() : absl::Now(); }

void GroupCommitter::Submit(WriteBatch batch, size_t records, Done done) {
  const absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  if (batch.frees_space()) {
    const bool idle = !HasPendingLocked();
    if (freeing_.callbacks.empty()) {
      freeing_.batch = std::move(batch);
    } else {
      freeing_.batch.Append(batch);
    }
    freeing_.records += records;
    freeing_.callbacks.push_back(std::move(done));
    if (idle) first_pending_ = now;
    work_.Signal();  // due at once
    return;
  }
  const bool was_empty = pending_.callbacks.empty();
  if (was_empty) {
    pending_.batch = std::move(batch);
  } else {
    pending_.batch.Append(batch);
  }
  AddedLocked(now, was_empty, records, std::move(done));
}

uint64_t GroupCommitter::SubmitInto(size_t records, absl::FunctionRef<void(WriteBatch&)> fill,
                                    Done done) {
  const absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  const bool was_empty = pending_.callbacks.empty();
  fill(pending_.batch);
  AddedLocked(now, was_empty, records, std::move(done));
  return pending_number_;
}

bool GroupCommitter::JoinPending(uint64_t group, size_t records,
                                 absl::FunctionRef<void(WriteBatch&)> fill) {
  absl::MutexLock lock(&mu_);
  if (group != pending_number_ || pending_.callbacks.empty()) return false;
  fill(pending_.batch);
  CountLocked(records);
  return true;
}

void GroupCommitter::AddedLocked(absl::Time now, bool was_empty, size_t records, Done done) {
  if (was_empty && freeing_.callbacks.empty()) first_pending_ = now;
  pending_.callbacks.push_back(std::move(done));
  if (was_empty) work_.Signal();  // a new group to time
  CountLocked(records);
}

void GroupCommitter::CountLocked(size_t records) {
  const bool was_full = pending_.records >= options_.max_records;
  pending_.records += records;
  if (!was_full && pending_.records >= options_.max_records) work_.Signal();  // it filled up
}

bool GroupCommitter::HasPendingLocked() const {
  return !pending_.callbacks.empty() || !freeing_.callbacks.empty();
}

bool GroupCommitter::DueLocked(absl::Time now) const {
  if (!freeing_.callbacks.empty()) return true;
  if (pending_.callbacks.empty()) return false;
  return pending_.records >= options_.max_records || now >= first_pending_ + options_.max_delay;
}

GroupCommitter::Group GroupCommitter::TakePendingLocked() {
  Group group = std::move(pending_);
  pending_ = Group();
  ++pending_number_;
  return group;
}

absl::Status GroupCommitter::CommitGroupLocked(Group group, bool frees_space) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = status_;
  }
  if (status.ok()) {
    group.batch.set_frees_space(frees_space);
    const absl::Time start = absl::Now();
    status = storage_->Commit(group.batch);
    const absl::Duration took = absl::Now() - start;
    absl::MutexLock lock(&mu_);
    ++stats_.groups;
    stats_.commit_time.Record(took);
    stats_.max_group_records = std::max<uint64_t>(stats_.max_group_records, group.records);
    const bool resumable = options_.resume_after_full && absl::IsResourceExhausted(status);
    if (!status.ok() && !resumable && status_.ok()) status_ = status;
  }
  for (Done& done : group.callbacks) std::move(done)(status);
  if (options_.after_group) options_.after_group();
  absl::MutexLock lock(&mu_);
  stats_.submissions += group.callbacks.size();
  stats_.records += group.records;
  return status;
}

absl::Status GroupCommitter::CommitPendingLocked() {
  Group freeing;
  Group ordinary;
  {
    absl::MutexLock lock(&mu_);
    freeing = std::move(freeing_);
    freeing_ = Group();
    ordinary = TakePendingLocked();
  }
  absl::Status status;
  if (!freeing.callbacks.empty()) status = CommitGroupLocked(std::move(freeing), true);
  if (!ordinary.callbacks.empty()) status = CommitGroupLocked(std::move(ordinary), false);
  return status;
}

absl::Status GroupCommitter::Flush() {
  // The group is taken only once commit_mu_ is held, so groups commit in the order they were
  // formed. Submitters never wait for commit_mu_: they only append under mu_.
  absl::MutexLock commit_lock(&commit_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!HasPendingLocked()) return status_;
  }
  return CommitPendingLocked();
}

void GroupCommitter::Abandon(absl::Status status) {
  absl::MutexLock commit_lock(&commit_mu_);
  Group freeing;
  Group ordinary;
  {
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = status;
    freeing = std::move(freeing_);
    freeing_ = Group();
    ordinary = TakePendingLocked();
  }
  for (Group* g : {&freeing, &ordinary}) {
    for (Done& done : g->callbacks) std::move(done)(status);
  }
  absl::MutexLock lock(&mu_);
  stats_.submissions += freeing.callbacks.size() + ordinary.callbacks.size();
  stats_.records += freeing.records + ordinary.records;
}

absl::Status GroupCommitter::FlushIfDue(absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    if (!DueLocked(now)) return absl::OkStatus();
  }
  return Flush();
}

std::optional<absl::Time> GroupCommitter::NextDeadline() const {
  absl::MutexLock lock(&mu_);
  if (!freeing_.callbacks.empty()) return absl::InfinitePast();
  if (pending_.callbacks.empty()) return std::nullopt;
  if (pending_.records >= options_.max_records) return absl::InfinitePast();
  return first_pending_ + options_.max_delay;
}

void GroupCommitter::Start() {
  absl::MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  stop_requested_ = false;
  thread_ = std::thread([this] {
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "gryph-commit");  // as top -H and perf show it
#endif
    ThreadMain();
  });
}

void GroupCommitter::Stop() { StopThread(/*flush=*/true); }

void GroupCommitter::StopThread(bool flush) {
  {
    absl::MutexLock lock(&mu_);
    if (!started_) return;
    stop_requested_ = true;
    flush_on_stop_ = flush;
    work_.Signal();
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  started_ = false;
  stop_requested_ = false;
}

void GroupCommitter::ThreadMain() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      // Sleep until the pending group is due or a stop is requested.
      for (;;) {
        if (stop_requested_) break;
        if (!HasPendingLocked()) {
          work_.Wait(&mu_);
          continue;
        }
        if (!freeing_.callbacks.empty() || pending_.records >= options_.max_records) break;
        const absl::Duration left = first_pending_ + options_.max_delay - Now();
        if (left <= absl::ZeroDuration()) break;
        work_.WaitWithTimeout(&mu_, left);
      }
      if (stop_requested_ && (!flush_on_stop_ || !HasPendingLocked())) return;
    }
    absl::MutexLock commit_lock(&commit_mu_);
    // (Nothing is taken if a Flush() took it meanwhile.) Submissions arriving from here on form
    // the next group while this one commits.
    CommitPendingLocked().IgnoreError();
  }
}

absl::Status GroupCommitter::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

size_t GroupCommitter::pending_records() const {
  absl::MutexLock lock(&mu_);
  return pending_.records;
}

GroupCommitter::Stats GroupCommitter::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace gryph
