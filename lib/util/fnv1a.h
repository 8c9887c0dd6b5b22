// Internal: FNV-1a, 64 bits. A hash that is the same in every process and on every run (unlike
// absl::Hash, which is seeded per process): for choices that must survive a restart, and for
// traces that two runs compare.

#ifndef GRYPH_LIB_UTIL_FNV1A_H_
#define GRYPH_LIB_UTIL_FNV1A_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace gryph::internal {

inline constexpr uint64_t kFnv1aOffsetBasis = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1aPrime = 0x100000001b3ull;

// `h` extended with `bytes`; start from kFnv1aOffsetBasis.
inline uint64_t Fnv1a64(uint64_t h, absl::string_view bytes) {
  for (char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= kFnv1aPrime;
  }
  return h;
}
inline uint64_t Fnv1a64(absl::string_view bytes) { return Fnv1a64(kFnv1aOffsetBasis, bytes); }

}  // namespace gryph::internal

#endif  // GRYPH_LIB_UTIL_FNV1A_H_
