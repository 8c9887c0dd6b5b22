// GateStorage: a storage whose commits wait at a gate, for tests that hold a commit in progress
// (an fsync that has not returned) while the code under test goes on.

#ifndef GRYPH_TESTS_GATE_STORAGE_H_
#define GRYPH_TESTS_GATE_STORAGE_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gryph/storage.h"

namespace gryph::testing {

// Commits pass while the gate is open (it starts open); while it is closed they wait, except for
// those let through one at a time by PassOne(). (CondVars, not absl::Condition: only the waiting
// thread reads the guarded state, which the TSan build can follow; see tests/tsan_absl_mutex.cc.)
class GateStorage : public StorageWrapper {
 public:
  explicit GateStorage(Storage* target) : StorageWrapper(target) {}

  absl::Status Commit(const WriteBatch& batch) override {
    {
      absl::MutexLock lock(&mu_);
      ++waiting_;
      changed_.SignalAll();
      while (!open_ && passes_ == 0) changed_.Wait(&mu_);
      if (!open_) --passes_;
      --waiting_;
      changed_.SignalAll();
    }
    return StorageWrapper::Commit(batch);
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
    changed_.SignalAll();
  }
  // Lets one commit through the closed gate (one waiting now, or the next to arrive).
  void PassOne() {
    absl::MutexLock lock(&mu_);
    ++passes_;
    changed_.SignalAll();
  }
  // Whether a commit is waiting at the closed gate within `timeout`.
  bool AwaitBlockedCommit(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    while (waiting_ == 0 || passes_ > 0) {
      if (changed_.WaitWithDeadline(&mu_, deadline)) return waiting_ > 0 && passes_ == 0;
    }
    return true;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar changed_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  int passes_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gryph::testing

#endif  // GRYPH_TESTS_GATE_STORAGE_H_
