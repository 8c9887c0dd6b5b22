#include "gryph/memory_storage.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "lib/storage/storage_internal.h"
#include "lib/util/status_macros.h"

namespace gryph {

namespace {
// Charged per entry by ApproximateBytesUsed(), roughly a btree slot and two string headers.
constexpr uint64_t kBytesPerEntry = 64;
}  // namespace

// Invariants:
//   - tables holds the meta table and every table that ever had a Put, including ones emptied
//     since (as LMDB keeps an emptied named database): never more than max_tables + 1.
//   - A Table with snapshots > 0 is never modified: readers (cursors) walk it without the lock.
//     A commit that must change it copies it first and replaces the pointer in `tables`; the
//     old copy lives on until its last cursor is destroyed (copy on write).
//   - bytes == sum over entries of key size + value size + kBytesPerEntry.
class MemoryStorage::State {
 public:
  using Map = absl::btree_map<std::string, std::string>;
  struct Table {
    Map map;
    mutable int snapshots = 0;  // open cursors reading `map`; protected by State::mu
  };

  // The meta table holds what an LMDB store's does, so reads of it agree.
  explicit State(int table_limit) : max_tables(table_limit) {
    auto meta = std::make_shared<Table>();
    meta->map.emplace(internal::kMetaMagicKey, internal::kMetaMagic);
    meta->map.emplace(internal::kMetaFormatVersionKey, internal::EncodeFormatVersion());
    absl::MutexLock lock(&mu);
    tables.emplace(internal::kMetaTable, std::move(meta));
  }

  const int max_tables;
  absl::Mutex mu;
  absl::flat_hash_map<std::string, std::shared_ptr<Table>> tables ABSL_GUARDED_BY(mu);
  uint64_t bytes ABSL_GUARDED_BY(mu) = 0;
};

namespace {

using State = MemoryStorage::State;
using Table = State::Table;

// A cursor over one table's snapshot: it holds the Table (copy-on-write keeps it unchanged).
class MemoryCursor final : public Cursor {
 public:
  MemoryCursor(std::shared_ptr<State> state, std::shared_ptr<const Table> table)
      : state_(std::move(state)), table_(std::move(table)), it_(table_->map.end()) {}
  ~MemoryCursor() override {
    absl::MutexLock lock(&state_->mu);
    --table_->snapshots;
  }

  bool Valid() const override { return it_ != table_->map.end(); }
  void SeekToFirst() override { it_ = table_->map.begin(); }
  void SeekToLast() override {
    it_ = table_->map.empty() ? table_->map.end() : std::prev(table_->map.end());
  }
  void Seek(absl::string_view target) override {
    if (target.size() > Storage::kMaxKeyBytes) {
      if (status_.ok()) status_ = internal::ValidateKey(target);
      it_ = table_->map.end();
      return;
    }
    it_ = table_->map.lower_bound(target);
  }
  void Next() override { ++it_; }
  void Prev() override { it_ = it_ == table_->map.begin() ? table_->map.end() : std::prev(it_); }
  absl::string_view key() const override { return it_->first; }
  absl::string_view value() const override { return it_->second; }
  absl::Status status() const override { return status_; }

 private:
  const std::shared_ptr<State> state_;
  const std::shared_ptr<const Table> table_;
  State::Map::const_iterator it_;
  absl::Status status_;
};

}  // namespace

std::shared_ptr<MemoryStorage::State> MemoryStorage::NewState(int max_tables) {
  return std::make_shared<State>(max_tables);
}

MemoryStorage::MemoryStorage() : MemoryStorage(NewState()) {}

MemoryStorage::MemoryStorage(std::shared_ptr<State> state) : state_(std::move(state)) {}

MemoryStorage::~MemoryStorage() = default;

absl::Status MemoryStorage::Commit(const WriteBatch& batch) {
  GRYPH_RETURN_IF_ERROR(internal::ValidateBatch(batch));
  if (batch.empty()) return absl::OkStatus();
  State& s = *state_;
  absl::MutexLock lock(&s.mu);

  // As LMDB: only a Put creates a table. Check the table limit before changing anything.
  const std::vector<std::string>& names = batch.tables();
  std::vector<bool> has_put(names.size(), false);
  for (size_t i = 0; i < batch.count(); ++i) {
    const WriteBatch::Op op = batch.op(i);
    if (op.type == WriteBatch::OpType::kPut) has_put[op.table_index] = true;
  }
  size_t new_tables = 0;
  for (size_t t = 0; t < names.size(); ++t) {
    if (has_put[t] && !s.tables.contains(names[t])) ++new_tables;
  }
  if (s.tables.size() + new_tables > static_cast<size_t>(s.max_tables) + 1) {
    return absl::ResourceExhaustedError(
        absl::StrCat("storage: too many tables (the limit is ", s.max_tables, ")"));
  }

  // The writable table for each name of the batch, resolved (and copied if a cursor reads it)
  // on first use.
  std::vector<Table*> writable(names.size(), nullptr);
  auto resolve = [&](size_t t, bool create) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) -> Table* {
    if (writable[t] != nullptr) return writable[t];
    auto it = s.tables.find(names[t]);
    if (it == s.tables.end()) {
      if (!create) return nullptr;
      it = s.tables.emplace(names[t], std::make_shared<Table>()).first;
    } else if (it->second->snapshots > 0) {
      auto copy = std::make_shared<Table>();
      copy->map = it->second->map;
      it->second = std::move(copy);
    }
    writable[t] = it->second.get();
    return writable[t];
  };

  for (size_t i = 0; i < batch.count(); ++i) {
    const WriteBatch::Op op = batch.op(i);
    Table* table = resolve(op.table_index, op.type == WriteBatch::OpType::kPut);
    if (table == nullptr) continue;  // deleting from a table that does not exist
    State::Map& map = table->map;
    switch (op.type) {
      case WriteBatch::OpType::kPut: {
        auto [it, inserted] = map.try_emplace(std::string(op.key));
        if (inserted) {
          s.bytes += op.key.size() + kBytesPerEntry;
        } else {
          s.bytes -= it->second.size();
        }
        it->second.assign(op.value.data(), op.value.size());
        s.bytes += op.value.size();
        break;
      }
      case WriteBatch::OpType::kDelete: {
        auto it = map.find(op.key);
        if (it != map.end()) {
          s.bytes -= it->first.size() + it->second.size() + kBytesPerEntry;
          map.erase(it);
        }
        break;
      }
      case WriteBatch::OpType::kDeleteRange: {
        auto first = op.key.empty() ? map.begin() : map.lower_bound(op.key);
        auto last = op.value.empty() ? map.end() : map.lower_bound(op.value);
        for (auto it = first; it != last; ++it) {
          s.bytes -= it->first.size() + it->second.size() + kBytesPerEntry;
        }
        map.erase(first, last);
        break;
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> MemoryStorage::Get(absl::string_view table,
                                                              absl::string_view key) {
  GRYPH_RETURN_IF_ERROR(internal::ValidateTableName(table));
  GRYPH_RETURN_IF_ERROR(internal::ValidateKey(key));
  State& s = *state_;
  absl::ReaderMutexLock lock(&s.mu);
  auto t = s.tables.find(table);
  if (t == s.tables.end()) return std::nullopt;
  auto it = t->second->map.find(key);
  if (it == t->second->map.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::unique_ptr<Cursor>> MemoryStorage::NewCursor(absl::string_view table) {
  GRYPH_RETURN_IF_ERROR(internal::ValidateTableName(table));
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  auto t = s.tables.find(table);
  if (t == s.tables.end()) return internal::NewEmptyCursor();
  ++t->second->snapshots;
  return std::unique_ptr<Cursor>(std::make_unique<MemoryCursor>(state_, t->second));
}

absl::StatusOr<std::vector<std::string>> MemoryStorage::ListTables() {
  std::vector<std::string> names;
  {
    absl::ReaderMutexLock lock(&state_->mu);
    for (const auto& [name, table] : state_->tables) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<uint64_t> MemoryStorage::ApproximateBytesUsed() {
  absl::ReaderMutexLock lock(&state_->mu);
  return state_->bytes;
}

}  // namespace gryph
