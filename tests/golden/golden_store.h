// The golden store: a small, fixed history written through a publisher hosting broker and a
// subscriber hosting broker on a virtual clock, so that every table of docs/format.md holds rows
// and the same code always writes the same bytes. tests/data/store-v<N>/ holds one written by
// format version N (by gryph_write_golden_store) with its listing, for tests/store_golden_test.cc.

#ifndef GRYPH_TESTS_GOLDEN_GOLDEN_STORE_H_
#define GRYPH_TESTS_GOLDEN_GOLDEN_STORE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gryph::testing {

// Writes the golden history into `dir`/phb and `dir`/shb (two LMDB stores). REQUIRES: the
// directories are absent or empty.
absl::Status WriteGoldenStore(const std::string& dir);

// Every row of the LMDB environment in `env_dir`, read with LMDB itself (not gryph), one line
// each: "<table> <key hex> <value hex>\n" in table then key order, the value as LMDB holds it
// (with gryph's row checksum). The environment is opened read-only and without a lock file, so
// that a checked-in store is read as it is.
absl::StatusOr<std::string> ListRawRows(const std::string& env_dir);

// The listing of a golden store: "[phb]\n" ListRawRows(phb) "[shb]\n" ListRawRows(shb).
absl::StatusOr<std::string> ListGoldenStore(const std::string& dir);

}  // namespace gryph::testing

#endif  // GRYPH_TESTS_GOLDEN_GOLDEN_STORE_H_
