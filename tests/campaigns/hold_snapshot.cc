// gryph_hold_snapshot DATA_DIR SECONDS: opens a broker's store read-only, as another process
// would (a backup, a dump, a custom tool), takes one read snapshot and holds it for SECONDS
// before exiting. The abuse campaign (tests/process/abuse.sh, GRYPH_HOLD_SECONDS) measures what
// such a reader costs a broker that writes meanwhile: LMDB reuses no page freed after the oldest
// open snapshot began.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "gryph/storage.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gryph_hold_snapshot DATA_DIR SECONDS\n");
    return 2;
  }
  gryph::StorageOptions o;
  o.path = argv[1];
  o.read_only = true;
  auto storage = gryph::OpenLmdbStorage(o);
  if (!storage.ok()) {
    std::fprintf(stderr, "gryph_hold_snapshot: %s\n", storage.status().ToString().c_str());
    return 1;
  }
  auto cursor = (*storage)->NewCursor("pubend.events");
  if (!cursor.ok()) {
    std::fprintf(stderr, "gryph_hold_snapshot: %s\n", cursor.status().ToString().c_str());
    return 1;
  }
  (*cursor)->SeekToFirst();
  std::this_thread::sleep_for(std::chrono::seconds(std::atoi(argv[2])));
  return 0;
}
