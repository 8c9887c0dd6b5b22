#include "lib/storage/last_row.h"

namespace gryph::internal {

absl::StatusOr<std::optional<std::string>> SeekToLastBelow(Cursor& c, absl::string_view end) {
  if (end.empty()) {
    c.SeekToLast();
  } else {
    c.Seek(end);
    // A seek stands on a damaged row before the place it found (that row may be what it sought),
    // which here may be the last row below `end`: step back only from a row at or after `end`.
    const std::optional<std::string> stood = DamagedRowKey(c.status());
    if (c.Valid() || (stood && *stood >= end)) {
      c.Prev();
    } else if (!stood) {
      c.SeekToLast();  // nothing at or after `end`
    }
  }
  if (c.Valid()) return std::string(c.key());
  std::optional<std::string> damaged = DamagedRowKey(c.status());
  if (damaged) return damaged;
  if (!c.status().ok()) return c.status();
  return std::nullopt;
}

}  // namespace gryph::internal
