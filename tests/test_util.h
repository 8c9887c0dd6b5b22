// Helpers shared by gryph's tests: status assertions, seeded randomness that reports its seed,
// and temporary directories that clean up after themselves.

#ifndef GRYPH_TESTS_TEST_UTIL_H_
#define GRYPH_TESTS_TEST_UTIL_H_

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gryph::testing {

inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace gryph::testing

// REQUIRE that a Status or StatusOr is OK, printing the status when it is not.
#define REQUIRE_OK(expr)                                              \
  do {                                                                \
    const ::absl::Status gryph_s_ = ::gryph::testing::StatusOf(expr); \
    INFO(gryph_s_.ToString());                                        \
    REQUIRE(gryph_s_.ok());                                           \
  } while (0)

// REQUIRE that a Status or StatusOr failed with `code`.
#define REQUIRE_CODE(expr, expected_code)                             \
  do {                                                                \
    const ::absl::Status gryph_s_ = ::gryph::testing::StatusOf(expr); \
    INFO(gryph_s_.ToString());                                        \
    REQUIRE(gryph_s_.code() == (expected_code));                      \
  } while (0)

namespace gryph::testing {

// Seeds for property tests: GRYPH_SEED=<n> reruns one seed; otherwise `count` seeds from `base`.
// Each test prints the seed it runs under (INFO), so a failure says how to reproduce it.
inline std::vector<uint64_t> Seeds(uint64_t base, int count) {
  if (const char* env = std::getenv("GRYPH_SEED")) return {std::strtoull(env, nullptr, 10)};
  std::vector<uint64_t> seeds;
  for (int i = 0; i < count; ++i) seeds.push_back(base + static_cast<uint64_t>(i));
  return seeds;
}

// Heap allocations (global operator new calls) so far, by all threads; tests/allocation_counter.cc.
// Compare two readings around code that must not allocate.
int64_t AllocationCount();
// Bytes asked of the global operator new so far (never less after a free), by all threads:
// compare two readings around code whose allocations must stay bounded.
int64_t AllocatedBytes();

// A deterministic generator (same seed, same numbers on every platform).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t Next() { return engine_(); }
  // Uniform in [0, n). REQUIRES: n > 0.
  uint64_t Uniform(uint64_t n) { return engine_() % n; }
  // Uniform in [lo, hi].
  uint64_t Range(uint64_t lo, uint64_t hi) { return lo + Uniform(hi - lo + 1); }
  bool OneIn(uint64_t n) { return Uniform(n) == 0; }

 private:
  std::mt19937_64 engine_;
};

// Each (option name, spoil) of `cases` applied to a copy of `base` makes `open` (which opens with
// the options and returns the status) fail with InvalidArgument, with a message naming the option.
template <typename Options, typename Open>
void RequireEachOptionRefused(
    const Options& base,
    const std::vector<std::pair<std::string, std::function<void(Options&)>>>& cases, Open open) {
  for (const auto& [name, spoil] : cases) {
    INFO("option " << name);
    Options o = base;
    spoil(o);
    const absl::Status st = open(o);
    INFO(st.ToString());
    REQUIRE(st.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(st.message().find(name) != absl::string_view::npos);
  }
}

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gryph-test-XXXXXX").string();
    char* made = mkdtemp(tmpl.data());
    REQUIRE(made != nullptr);
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace gryph::testing

#endif  // GRYPH_TESTS_TEST_UTIL_H_
