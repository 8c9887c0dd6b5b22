// Internal: introspection of an LMDB Storage for tests and benchmarks.

#ifndef GRYPH_LIB_STORAGE_LMDB_STORAGE_H_
#define GRYPH_LIB_STORAGE_LMDB_STORAGE_H_

#include <cstdint>

#include "gryph/storage.h"

namespace gryph::internal {

struct LmdbStorageStats {
  uint64_t map_bytes = 0;       // current size of the memory map
  uint64_t map_growths = 0;     // times the map was grown since open
  uint64_t commit_retries = 0;  // batches retried after a growth
};

// Fills *stats and returns true if `storage` was made by OpenLmdbStorage; returns false
// otherwise.
bool GetLmdbStorageStats(Storage* storage, LmdbStorageStats* stats);

}  // namespace gryph::internal

#endif  // GRYPH_LIB_STORAGE_LMDB_STORAGE_H_
