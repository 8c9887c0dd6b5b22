#include <algorithm>
#include <cstring>
#include <string>

#include "gryph/storage.h"

namespace gryph {

namespace {
// Charged per operation by ApproximateBytes(): the bookkeeping record and a share of the vector.
constexpr size_t kBytesPerOp = 48;
}  // namespace

uint32_t WriteBatch::InternTable(absl::string_view table) {
  // Batches name few tables, usually the same one many times in a row: check the last one used,
  // then scan the short list, so no string is hashed per operation.
  if (last_table_ < tables_.size() && tables_[last_table_] == table) return last_table_;
  for (uint32_t i = 0; i < tables_.size(); ++i) {
    if (tables_[i] == table) {
      last_table_ = i;
      return i;
    }
  }
  tables_.emplace_back(table);
  last_table_ = static_cast<uint32_t>(tables_.size() - 1);
  return last_table_;
}

void WriteBatch::Add(OpType type, absl::string_view table, absl::string_view key,
                     absl::string_view value) {
  Rec rec;
  rec.type = type;
  rec.table = InternTable(table);
  rec.key_offset = bytes_.size();
  rec.key_size = key.size();
  bytes_.append(key.data(), key.size());
  rec.value_offset = bytes_.size();
  rec.value_size = value.size();
  bytes_.append(value.data(), value.size());
  ops_.push_back(rec);
}

void WriteBatch::Put(absl::string_view table, absl::string_view key, absl::string_view value) {
  Add(OpType::kPut, table, key, value);
}

void WriteBatch::Delete(absl::string_view table, absl::string_view key) {
  Add(OpType::kDelete, table, key, absl::string_view());
}

void WriteBatch::DeleteRange(absl::string_view table, absl::string_view begin,
                             absl::string_view end) {
  Add(OpType::kDeleteRange, table, begin, end);
}

void WriteBatch::Append(const WriteBatch& other) {
  if (&other == this) {
    const WriteBatch copy = other;
    Append(copy);
    return;
  }
  if (empty()) {
    *this = other;
    return;
  }
  // Map other's table indexes to ours, then shift its byte offsets past our bytes.
  std::vector<uint32_t> remap(other.tables_.size());
  for (size_t i = 0; i < other.tables_.size(); ++i) remap[i] = InternTable(other.tables_[i]);
  const size_t shift = bytes_.size();
  bytes_.append(other.bytes_);
  for (Rec rec : other.ops_) {
    rec.table = remap[rec.table];
    rec.key_offset += shift;
    rec.value_offset += shift;
    ops_.push_back(rec);
  }
}

void WriteBatch::Clear() {
  tables_.clear();
  ops_.clear();
  bytes_.clear();
  last_table_ = 0;
  frees_space_ = false;
}

size_t WriteBatch::ApproximateBytes() const {
  size_t names = 0;
  for (const std::string& t : tables_) names += t.size();
  return bytes_.size() + names + ops_.size() * kBytesPerOp;
}

WriteBatch::Op WriteBatch::op(size_t i) const {
  const Rec& rec = ops_[i];
  Op op;
  op.type = rec.type;
  op.table_index = rec.table;
  op.table = tables_[rec.table];
  op.key = absl::string_view(bytes_.data() + rec.key_offset, rec.key_size);
  op.value = absl::string_view(bytes_.data() + rec.value_offset, rec.value_size);
  return op;
}

}  // namespace gryph
