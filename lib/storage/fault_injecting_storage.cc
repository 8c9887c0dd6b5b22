#include "gryph/testing/fault_injecting_storage.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gryph {

namespace {
absl::Status CrashedError() {
  return absl::UnavailableError("FaultInjectingStorage: the storage has crashed; reopen it");
}
}  // namespace

void FaultInjectingStorage::FailCommitNumber(uint64_t n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_number_ = n;
  fail_number_status_ = std::move(status);
}

void FaultInjectingStorage::FailCommitsAfter(uint64_t n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_after_ = n;
  fail_after_status_ = std::move(status);
}

void FaultInjectingStorage::FailNextCommitWithMapFull() {
  absl::MutexLock lock(&mu_);
  fail_number_ = attempted_ + 1;
  fail_number_status_ = absl::ResourceExhaustedError(
      "mdb_put: MDB_MAP_FULL: Environment mapsize limit reached (injected by "
      "FaultInjectingStorage)");
}

void FaultInjectingStorage::FailReads(absl::Status status) {
  absl::MutexLock lock(&mu_);
  read_status_ = std::move(status);
}

void FaultInjectingStorage::ClearFaults() {
  absl::MutexLock lock(&mu_);
  fail_number_ = 0;
  fail_number_status_ = absl::OkStatus();
  fail_after_.reset();
  fail_after_status_ = absl::OkStatus();
  read_status_ = absl::OkStatus();
  crash_after_ = 0;
  damaged_.clear();
}

void FaultInjectingStorage::SimulateCrash() {
  absl::MutexLock lock(&mu_);
  crashed_ = true;
}

void FaultInjectingStorage::CrashAfterCommitNumber(uint64_t n) {
  absl::MutexLock lock(&mu_);
  crash_after_ = n;
}

bool FaultInjectingStorage::crashed() const {
  absl::MutexLock lock(&mu_);
  return crashed_;
}

uint64_t FaultInjectingStorage::commits_attempted() const {
  absl::MutexLock lock(&mu_);
  return attempted_;
}

uint64_t FaultInjectingStorage::commits_succeeded() const {
  absl::MutexLock lock(&mu_);
  return succeeded_;
}

absl::Status FaultInjectingStorage::Commit(const WriteBatch& batch) {
  bool crash_after = false;
  {
    absl::MutexLock lock(&mu_);
    const uint64_t number = ++attempted_;
    if (crashed_) return CrashedError();
    if (number == fail_number_) return fail_number_status_;
    if (fail_after_ && number > *fail_after_) return fail_after_status_;
    crash_after = number == crash_after_;
  }
  absl::Status status = StorageWrapper::Commit(batch);
  absl::MutexLock lock(&mu_);
  if (crash_after) {
    crashed_ = true;
    return CrashedError();
  }
  if (crashed_) return CrashedError();  // crashed while the commit ran: its caller never hears
  if (status.ok()) ++succeeded_;
  return status;
}

absl::Status FaultInjectingStorage::ReadFault() const {
  absl::MutexLock lock(&mu_);
  if (crashed_) return CrashedError();
  return read_status_;
}

void FaultInjectingStorage::DamageRow(absl::string_view table, absl::string_view key) {
  absl::MutexLock lock(&mu_);
  damaged_.emplace(std::string(table), std::string(key));
}

namespace {

// A cursor of the target that stops at the rows of `damaged` as at a failed checksum.
class DamagingCursor final : public Cursor {
 public:
  DamagingCursor(std::unique_ptr<Cursor> target, std::string table, std::set<std::string> damaged)
      : target_(std::move(target)), table_(std::move(table)), damaged_(std::move(damaged)) {}

  bool Valid() const override { return damage_.ok() && target_->Valid(); }
  void SeekToFirst() override { Moved(&Cursor::SeekToFirst); }
  void SeekToLast() override { Moved(&Cursor::SeekToLast); }
  void Seek(absl::string_view target) override {
    damage_ = absl::OkStatus();
    target_->Seek(target);
    Check();
  }
  // From a damaged row too: the target stands on it.
  void Next() override { Moved(&Cursor::Next); }
  void Prev() override { Moved(&Cursor::Prev); }
  absl::string_view key() const override { return target_->key(); }
  absl::string_view value() const override { return target_->value(); }
  absl::Status status() const override {
    return target_->status().ok() ? damage_ : target_->status();
  }

 private:
  void Moved(void (Cursor::*move)()) {
    damage_ = absl::OkStatus();
    ((*target_).*move)();
    Check();
  }
  void Check() {
    if (target_->Valid() && damaged_.contains(std::string(target_->key()))) {
      damage_ = DamagedRowError(table_, target_->key(), "injected damage");
    }
  }

  std::unique_ptr<Cursor> target_;
  const std::string table_;
  const std::set<std::string> damaged_;
  absl::Status damage_;
};

}  // namespace

absl::StatusOr<std::optional<std::string>> FaultInjectingStorage::Get(absl::string_view table,
                                                                      absl::string_view key) {
  if (absl::Status s = ReadFault(); !s.ok()) return s;
  absl::StatusOr<std::optional<std::string>> value = StorageWrapper::Get(table, key);
  if (value.ok() && value->has_value()) {
    absl::MutexLock lock(&mu_);
    if (damaged_.contains({std::string(table), std::string(key)})) {
      return DamagedRowError(table, key, "injected damage");
    }
  }
  return value;
}

absl::StatusOr<std::unique_ptr<Cursor>> FaultInjectingStorage::NewCursor(absl::string_view table) {
  if (absl::Status s = ReadFault(); !s.ok()) return s;
  std::set<std::string> damaged;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [t, k] : damaged_) {
      if (t == table) damaged.insert(k);
    }
  }
  absl::StatusOr<std::unique_ptr<Cursor>> cursor = StorageWrapper::NewCursor(table);
  if (!cursor.ok() || damaged.empty()) return cursor;
  return std::unique_ptr<Cursor>(
      std::make_unique<DamagingCursor>(*std::move(cursor), std::string(table), std::move(damaged)));
}

absl::Status FaultInjectingStorage::Scan(absl::string_view table, absl::string_view begin,
                                         absl::string_view end, ScanFn fn) {
  if (absl::Status s = ReadFault(); !s.ok()) return s;
  bool any_damaged = false;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [t, k] : damaged_) any_damaged |= t == table;
  }
  // Through this wrapper's cursors when some row of the table is damaged.
  if (any_damaged) return Storage::Scan(table, begin, end, fn);
  return StorageWrapper::Scan(table, begin, end, fn);
}

absl::StatusOr<uint64_t> FaultInjectingStorage::ApproximateBytesUsed() {
  {
    absl::MutexLock lock(&mu_);
    if (crashed_) return CrashedError();
  }
  return StorageWrapper::ApproximateBytesUsed();
}

}  // namespace gryph
