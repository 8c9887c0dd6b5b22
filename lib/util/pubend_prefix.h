// Internal: the key prefix of every table partitioned by pubend (the pubend's tables, the PFS's,
// the SHB's delivered rows; docs/format.md): the pubend id, 4 bytes big-endian, so that each
// pubend's rows are contiguous and in numeric order.

#ifndef GRYPH_LIB_UTIL_PUBEND_PREFIX_H_
#define GRYPH_LIB_UTIL_PUBEND_PREFIX_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "gryph/tick.h"
#include "lib/util/coding.h"

namespace gryph::internal {

inline constexpr size_t kPubendPrefixBytes = 4;

inline std::string PubendPrefix(PubendId p) {
  std::string k;
  PutFixed32BE(&k, p.value);
  return k;
}

// The first key after every key of pubend p ("" when p is the last possible pubend: unbounded).
inline std::string PubendEnd(PubendId p) {
  return p.value == UINT32_MAX ? std::string() : PubendPrefix(PubendId{p.value + 1});
}

// Whether `key` is one of pubend p's.
inline bool HasPubendPrefix(absl::string_view key, PubendId p) {
  return key.size() >= kPubendPrefixBytes && DecodeFixed32BE(key.data()) == p.value;
}

// The key `prefix ‖ x` with x 8 bytes big-endian: the 12-byte keys of pubend p's events, PFS
// records and PFS subscribers.
inline constexpr size_t kPubendKey64Bytes = kPubendPrefixBytes + 8;
// Into out[0..kPubendKey64Bytes), for callers that build keys without allocating.
inline void EncodePubendKey64(char* out, PubendId p, uint64_t x) {
  EncodeFixed32BE(out, p.value);
  EncodeFixed64BE(out + kPubendPrefixBytes, x);
}
inline std::string PubendKey64(PubendId p, uint64_t x) {
  std::string k(kPubendKey64Bytes, '\0');
  EncodePubendKey64(k.data(), p, x);
  return k;
}

// x of a PubendKey64(p, x), or false when `key` is not one (another pubend's, or another size).
inline bool ParsePubendKey64(absl::string_view key, PubendId p, uint64_t* x) {
  if (key.size() != kPubendKey64Bytes || !HasPubendPrefix(key, p)) return false;
  *x = DecodeFixed64BE(key.data() + kPubendPrefixBytes);
  return true;
}

}  // namespace gryph::internal

#endif  // GRYPH_LIB_UTIL_PUBEND_PREFIX_H_
