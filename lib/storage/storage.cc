#include "gryph/storage.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gryph/memory_storage.h"
#include "lib/storage/storage_internal.h"
#include "lib/util/coding.h"
#include "lib/util/status_macros.h"

namespace gryph {

namespace internal {

std::string EncodeFormatVersion() {
  std::string out;
  PutFixed32BE(&out, kStorageFormatVersion);
  return out;
}

absl::Status ValidateTableName(absl::string_view table) {
  if (table.empty()) return absl::InvalidArgumentError("storage: empty table name");
  if (table.size() > Storage::kMaxTableNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("storage: table name of ", table.size(),
                                                   " bytes; the limit is ",
                                                   Storage::kMaxTableNameBytes));
  }
  if (table.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("storage: table name \"", absl::CHexEscape(table), "\" contains NUL"));
  }
  return absl::OkStatus();
}

absl::Status ValidateWritableTableName(absl::string_view table) {
  GRYPH_RETURN_IF_ERROR(ValidateTableName(table));
  if (absl::StartsWith(table, Storage::kReservedTablePrefix)) {
    return absl::InvalidArgumentError(absl::StrCat("storage: table name \"", table,
                                                   "\" is reserved (prefix \"",
                                                   Storage::kReservedTablePrefix, "\")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("storage: empty key");
  if (key.size() > Storage::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("storage: key of ", key.size(),
                                                   " bytes; the limit is ", Storage::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateRange(absl::string_view begin, absl::string_view end) {
  if (!begin.empty()) GRYPH_RETURN_IF_ERROR(ValidateKey(begin));
  if (!end.empty()) GRYPH_RETURN_IF_ERROR(ValidateKey(end));
  if (!begin.empty() && !end.empty() && begin > end) {
    return absl::InvalidArgumentError(absl::StrCat("storage: range begin \"",
                                                   absl::CHexEscape(begin), "\" > end \"",
                                                   absl::CHexEscape(end), "\""));
  }
  return absl::OkStatus();
}

absl::Status ValidateBatch(const WriteBatch& batch) {
  for (const std::string& table : batch.tables()) {
    GRYPH_RETURN_IF_ERROR(ValidateWritableTableName(table));
  }
  for (size_t i = 0; i < batch.count(); ++i) {
    const WriteBatch::Op op = batch.op(i);
    absl::Status s = op.type == WriteBatch::OpType::kDeleteRange ? ValidateRange(op.key, op.value)
                                                                 : ValidateKey(op.key);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat(s.message(), " (operation ", i, " on table \"", op.table, "\")"));
    }
  }
  return absl::OkStatus();
}

namespace {

class EmptyCursor final : public Cursor {
 public:
  bool Valid() const override { return false; }
  void SeekToFirst() override {}
  void SeekToLast() override {}
  void Seek(absl::string_view target) override {
    if (status_.ok() && target.size() > Storage::kMaxKeyBytes) status_ = ValidateKey(target);
  }
  void Next() override {}
  void Prev() override {}
  absl::string_view key() const override { return {}; }
  absl::string_view value() const override { return {}; }
  absl::Status status() const override { return status_; }

 private:
  absl::Status status_;
};

}  // namespace

std::unique_ptr<Cursor> NewEmptyCursor() { return std::make_unique<EmptyCursor>(); }

}  // namespace internal

absl::Status Storage::Scan(absl::string_view table, absl::string_view begin, absl::string_view end,
                           ScanFn fn) {
  GRYPH_RETURN_IF_ERROR(internal::ValidateTableName(table));
  GRYPH_RETURN_IF_ERROR(internal::ValidateRange(begin, end));
  GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Cursor> cursor, NewCursor(table));
  if (begin.empty()) {
    cursor->SeekToFirst();
  } else {
    cursor->Seek(begin);
  }
  for (; cursor->Valid(); cursor->Next()) {
    if (!end.empty() && cursor->key() >= end) break;
    if (!fn(cursor->key(), cursor->value())) break;
  }
  return cursor->status();
}

std::unique_ptr<Storage> NewMemoryStorage() { return std::make_unique<MemoryStorage>(); }

namespace {
// The payload of a damaged row's status: its key, raw.
constexpr absl::string_view kDamagedRowPayload = "gryph/damaged-row-key";
}  // namespace

absl::Status DamagedRowError(absl::string_view table, absl::string_view key,
                             absl::string_view detail) {
  absl::Status status =
      absl::DataLossError(absl::StrCat("storage: damaged row in table \"", table, "\" at key \"",
                                       absl::CHexEscape(key), "\": ", detail));
  status.SetPayload(kDamagedRowPayload, absl::Cord(key));
  return status;
}

std::optional<std::string> DamagedRowKey(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kDataLoss) return std::nullopt;
  auto key = status.GetPayload(kDamagedRowPayload);  // an absl::optional
  if (!key) return std::nullopt;
  return std::string(*key);
}

absl::StatusOr<StorageVerifyReport> VerifyStorage(Storage& storage) {
  GRYPH_ASSIGN_OR_RETURN(std::vector<std::string> tables, storage.ListTables());
  StorageVerifyReport report;
  for (const std::string& table : tables) {
    absl::StatusOr<std::unique_ptr<Cursor>> cursor = storage.NewCursor(table);
    if (!cursor.ok()) {
      report.structure = cursor.status();
      return report;
    }
    ++report.tables;
    const uint64_t rows_before = report.rows;
    Cursor& c = **cursor;
    c.SeekToFirst();
    std::string previous;
    for (;;) {
      for (; c.Valid(); c.Next()) {
        ++report.rows;
        // The walk follows the leaves; a lookup descends from the root. Damage to a key makes
        // the two disagree (the walk sees keys out of order, or a lookup misses a row) while
        // every row's checksum holds.
        const absl::string_view key = c.key();
        if (report.rows > 1 && !previous.empty() && key <= previous) {
          report.structure = absl::DataLossError(absl::StrCat(
              "storage: table \"", table, "\" has key \"", absl::CHexEscape(key), "\" after \"",
              absl::CHexEscape(previous), "\": its page structure is damaged"));
          return report;
        }
        previous.assign(key.data(), key.size());
        absl::StatusOr<std::optional<std::string>> looked_up = storage.Get(table, key);
        if (!looked_up.ok() || !looked_up->has_value() || **looked_up != c.value()) {
          report.structure =
              looked_up.ok()
                  ? absl::DataLossError(absl::StrCat(
                        "storage: a lookup of key \"", absl::CHexEscape(key), "\" in table \"",
                        table, "\" disagrees with a walk: its page structure is damaged"))
                  : looked_up.status();
          return report;
        }
      }
      std::optional<std::string> key = DamagedRowKey(c.status());
      if (!key) break;
      ++report.rows;
      report.damaged.push_back({table, *key, c.status()});
      c.Next();  // from the damaged row, which the cursor stands on
    }
    if (!c.status().ok() && !DamagedRowKey(c.status())) {
      report.structure = c.status();
      return report;
    }
    absl::StatusOr<std::optional<uint64_t>> recorded = storage.RecordedRowCount(table);
    if (!recorded.ok()) {
      report.structure = recorded.status();
      return report;
    }
    if (recorded->has_value() && **recorded != report.rows - rows_before) {
      report.structure = absl::DataLossError(absl::StrCat(
          "storage: table \"", table, "\" records ", **recorded, " rows but a walk finds ",
          report.rows - rows_before, ": its page structure is damaged"));
      return report;
    }
  }
  return report;
}

}  // namespace gryph
