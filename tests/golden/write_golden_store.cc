// gryph_write_golden_store DIR: writes the golden store (tests/golden/golden_store.h) into DIR
// with its listing, DIR/rows.txt. Run by hand for a new format version:
//
//   build/tests/gryph_write_golden_store tests/data/store-v<N>
//
// and commit the directory (data.mdb only: lock.mdb is recreated by any open).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "tests/golden/golden_store.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: gryph_write_golden_store DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_empty(dir, ec)) {
    std::cerr << dir << " exists and is not empty\n";
    return 2;
  }
  if (absl::Status s = gryph::testing::WriteGoldenStore(dir); !s.ok()) {
    std::cerr << "writing the golden store: " << s << "\n";
    return 1;
  }
  absl::StatusOr<std::string> rows = gryph::testing::ListGoldenStore(dir);
  if (!rows.ok()) {
    std::cerr << "listing the golden store: " << rows.status() << "\n";
    return 1;
  }
  std::ofstream(dir + "/rows.txt") << *rows;
  for (const char* store : {"/phb/lock.mdb", "/shb/lock.mdb"})
    std::filesystem::remove(dir + store, ec);
  return 0;
}
