// ThreadSanitizer builds only (GRYPH_SANITIZE=thread): makes absl::Mutex visible to TSan.
//
// Debian's Abseil is a shared library built without -fsanitize=thread, so TSan does not see
// absl::Mutex lock and unlock, and reports every access guarded by one as a race. This file
// interposes the Mutex and CondVar entry points (the executable's definitions win over the
// library's), calls the library's through dlsym(RTLD_NEXT), and tells TSan about the
// happens-before edges they create:
//   - releasing the lock exclusively publishes to the mutex's address; acquiring it (either mode)
//     acquires from there;
//   - releasing a reader lock publishes to address + 1, which only an exclusive acquire reads,
//     so readers do not synchronize with each other (reader/reader races stay visible).
// A wait (Await*, CondVar::Wait*) releases before blocking and acquires after. absl evaluates a
// waiter's Condition on the unlocking thread while that thread still holds the lock, which these
// edges already order.
//
// Lock-order (deadlock) detection is not restored; only data-race detection. absl's own
// deadlock detector is switched off: it keeps its graph under an internal lock TSan cannot see,
// and would be reported as racing with itself.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

#define GRYPH_STRINGIFY_INNER(x) #x
#define GRYPH_STRINGIFY(x) GRYPH_STRINGIFY_INNER(x)

// The library's definition of absl::<inline namespace>::<rest>, given the mangled tail `rest`
// (e.g. "5Mutex4LockEv"): the inline namespace's name comes from Abseil's options.
template <typename Fn>
Fn Next(const char* rest) {
  const std::string ns = GRYPH_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string mangled = "_ZN4absl" + std::to_string(ns.size()) + ns + rest;
  void* sym = dlsym(RTLD_NEXT, mangled.c_str());
  if (sym == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found\n", mangled.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(sym);
}

void* ReaderAddress(const void* mu) { return const_cast<char*>(static_cast<const char*>(mu)) + 1; }

void AcquireExclusive(absl::Mutex* mu) {
  __tsan_acquire(mu);
  __tsan_acquire(ReaderAddress(mu));
}
void AcquireShared(absl::Mutex* mu) { __tsan_acquire(mu); }
void ReleaseExclusive(absl::Mutex* mu) { __tsan_release(mu); }
void ReleaseShared(absl::Mutex* mu) { __tsan_release(ReaderAddress(mu)); }

using Void = void (*)(absl::Mutex*);
using Bool = bool (*)(absl::Mutex*);
using VoidCond = void (*)(absl::Mutex*, const absl::Condition&);
using BoolCondDuration = bool (*)(absl::Mutex*, const absl::Condition&, absl::Duration);
using BoolCondTime = bool (*)(absl::Mutex*, const absl::Condition&, absl::Time);
using CvWait = void (*)(absl::CondVar*, absl::Mutex*);
using CvWaitDuration = bool (*)(absl::CondVar*, absl::Mutex*, absl::Duration);
using CvWaitTime = bool (*)(absl::CondVar*, absl::Mutex*, absl::Time);

#define GRYPH_NEXT(type, mangled) static const type next = Next<type>(mangled)

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  GRYPH_NEXT(Void, "5Mutex4LockEv");
  next(this);
  AcquireExclusive(this);
}

void Mutex::Unlock() {
  GRYPH_NEXT(Void, "5Mutex6UnlockEv");
  ReleaseExclusive(this);
  next(this);
}

bool Mutex::TryLock() {
  GRYPH_NEXT(Bool, "5Mutex7TryLockEv");
  const bool locked = next(this);
  if (locked) AcquireExclusive(this);
  return locked;
}

void Mutex::ReaderLock() {
  GRYPH_NEXT(Void, "5Mutex10ReaderLockEv");
  next(this);
  AcquireShared(this);
}

void Mutex::ReaderUnlock() {
  GRYPH_NEXT(Void, "5Mutex12ReaderUnlockEv");
  ReleaseShared(this);
  next(this);
}

bool Mutex::ReaderTryLock() {
  GRYPH_NEXT(Bool, "5Mutex13ReaderTryLockEv");
  const bool locked = next(this);
  if (locked) AcquireShared(this);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  GRYPH_NEXT(VoidCond, "5Mutex8LockWhenERKNS0_9ConditionE");
  next(this, cond);
  AcquireExclusive(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  GRYPH_NEXT(VoidCond, "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  next(this, cond);
  AcquireShared(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  GRYPH_NEXT(BoolCondDuration, "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool result = next(this, cond, timeout);
  AcquireExclusive(this);  // held on return either way
  return result;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  GRYPH_NEXT(BoolCondTime, "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool result = next(this, cond, deadline);
  AcquireExclusive(this);
  return result;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  GRYPH_NEXT(BoolCondDuration, "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool result = next(this, cond, timeout);
  AcquireShared(this);
  return result;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  GRYPH_NEXT(BoolCondTime, "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool result = next(this, cond, deadline);
  AcquireShared(this);
  return result;
}

// Await* keep the mode the lock is held in; the exclusive edges are a superset of the shared
// ones, so they are used for both.
void Mutex::Await(const Condition& cond) {
  GRYPH_NEXT(VoidCond, "5Mutex5AwaitERKNS0_9ConditionE");
  ReleaseExclusive(this);
  ReleaseShared(this);
  next(this, cond);
  AcquireExclusive(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  GRYPH_NEXT(BoolCondDuration, "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  ReleaseExclusive(this);
  ReleaseShared(this);
  const bool result = next(this, cond, timeout);
  AcquireExclusive(this);
  return result;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  GRYPH_NEXT(BoolCondTime, "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  ReleaseExclusive(this);
  ReleaseShared(this);
  const bool result = next(this, cond, deadline);
  AcquireExclusive(this);
  return result;
}

void CondVar::Wait(Mutex* mu) {
  GRYPH_NEXT(CvWait, "7CondVar4WaitEPNS0_5MutexE");
  ReleaseExclusive(mu);
  next(this, mu);
  AcquireExclusive(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  GRYPH_NEXT(CvWaitDuration, "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  ReleaseExclusive(mu);
  const bool result = next(this, mu, timeout);
  AcquireExclusive(mu);
  return result;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  GRYPH_NEXT(CvWaitTime, "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  ReleaseExclusive(mu);
  const bool result = next(this, mu, deadline);
  AcquireExclusive(mu);
  return result;
}

ABSL_NAMESPACE_END
}  // namespace absl
