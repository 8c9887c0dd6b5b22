// Internal: finding the last row below a bound — a partitioned table's last row of one
// partition (the pubend's last event, a PFS's last record) — with damaged rows accounted for.

#ifndef GRYPH_LIB_STORAGE_LAST_ROW_H_
#define GRYPH_LIB_STORAGE_LAST_ROW_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/storage.h"

namespace gryph::internal {

// Stands `c` on the last row of its table whose key is below `end` ("" for no bound) and returns
// that row's key, or nullopt when no row lies below `end`. A damaged row there is still found by
// its key: the cursor then stands on it with the damage as its status (DamagedRowKey), so a
// caller that reads more than the key checks c.status(). Any other failure is returned.
absl::StatusOr<std::optional<std::string>> SeekToLastBelow(Cursor& c, absl::string_view end);

}  // namespace gryph::internal

#endif  // GRYPH_LIB_STORAGE_LAST_ROW_H_
