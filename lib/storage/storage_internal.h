// Internal: the checks and helpers every Storage implementation shares, so that LMDB and memory
// storage accept and reject exactly the same inputs.

#ifndef GRYPH_LIB_STORAGE_STORAGE_INTERNAL_H_
#define GRYPH_LIB_STORAGE_STORAGE_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gryph/storage.h"

namespace gryph::internal {

// The storage layer's own table (docs/format.md, "Storage"), and its records.
inline constexpr absl::string_view kMetaTable = "gryph.meta";
inline constexpr absl::string_view kMetaMagicKey = "magic";
inline constexpr absl::string_view kMetaMagic = "gryph-storage";
inline constexpr absl::string_view kMetaFormatVersionKey = "format_version";
// Rewritten after a batch that frees space at a full map (lmdb_storage.cc, Commit): a uint64,
// big-endian, counting such rewrites since the store was last opened. Carries no meaning.
inline constexpr absl::string_view kMetaFreedKey = "freed";
// The storage format this build writes. Bump it, with docs/format.md and a compatibility test,
// whenever a stored layout changes. 3: an SHB subscription row may end with its selector's
// program (lib/shb/shb_keys.h), which version 2 builds refuse.
inline constexpr uint32_t kStorageFormatVersion = 3;
// The oldest format this build reads. A store of an older version than kStorageFormatVersion is
// upgraded (its format_version record rewritten) at its first writable open: every version-2
// layout is a version-3 layout, and from then on a version-2 build refuses the store instead of
// misreading its rows.
inline constexpr uint32_t kOldestReadableStorageFormatVersion = 2;
// The value of the format_version record: kStorageFormatVersion as 4 big-endian bytes.
std::string EncodeFormatVersion();

// A table name a caller may read: 1..kMaxTableNameBytes bytes, no NUL.
absl::Status ValidateTableName(absl::string_view table);
// A table name a caller may write: as above and not reserved.
absl::Status ValidateWritableTableName(absl::string_view table);
// A key: 1..kMaxKeyBytes bytes.
absl::Status ValidateKey(absl::string_view key);
// Range bounds: each empty or a valid key, and begin <= end when both are set.
absl::Status ValidateRange(absl::string_view begin, absl::string_view end);
// Every table name and key of `batch`.
absl::Status ValidateBatch(const WriteBatch& batch);

// Whether `key` lies in [begin, end), an empty bound being unbounded.
inline bool InRange(absl::string_view key, absl::string_view begin, absl::string_view end) {
  return (begin.empty() || key >= begin) && (end.empty() || key < end);
}

// The cursor over a table that does not exist: valid, always empty.
std::unique_ptr<Cursor> NewEmptyCursor();

}  // namespace gryph::internal

#endif  // GRYPH_LIB_STORAGE_STORAGE_INTERNAL_H_
