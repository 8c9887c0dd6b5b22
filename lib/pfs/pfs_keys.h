// Internal: the PFS's tables and key and value layouts (docs/pfs_format.md).

#ifndef GRYPH_LIB_PFS_PFS_KEYS_H_
#define GRYPH_LIB_PFS_PFS_KEYS_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "gryph/tick.h"

namespace gryph::internal {

inline constexpr absl::string_view kPfsRecordsTable = "pfs.records";
inline constexpr absl::string_view kPfsSubscribersTable = "pfs.subscribers";
inline constexpr absl::string_view kPfsMetaTable = "pfs.meta";

// Meta fields. DO NOT CHANGE: stored on disk.
inline constexpr char kPfsMetaCheckpoint = 'C';  // checkpoint tick
inline constexpr char kPfsMetaChopped = 'X';     // chop point

// Key sizes: pubend (4) + tick or subscriber (8).
inline constexpr size_t kPfsRecordKeyBytes = 12;
inline constexpr size_t kPfsSubscriberKeyBytes = 12;
// A record entry: subscriber (8) + previous tick (8). A subscriber row: registration tick (8) +
// lastIndex at the checkpoint (8).
inline constexpr size_t kPfsEntryBytes = 16;
inline constexpr size_t kPfsSubscriberRowBytes = 16;

inline void StoreBE64(char* p, uint64_t v) {
  v = __builtin_bswap64(v);
  std::memcpy(p, &v, 8);
}
inline void StoreBE32(char* p, uint32_t v) {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}
inline uint64_t LoadBE64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}
inline uint32_t LoadBE32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return __builtin_bswap32(v);
}

// pubend u32 BE ‖ x u64 BE, written into out[0..12).
inline void EncodePfsKey(char* out, PubendId p, uint64_t x) {
  StoreBE32(out, p.value);
  StoreBE64(out + 4, x);
}

inline std::string PfsRecordKey(PubendId p, Tick t) {
  std::string k(kPfsRecordKeyBytes, '\0');
  EncodePfsKey(k.data(), p, t);
  return k;
}

inline std::string PfsSubscriberKey(PubendId p, SubscriberId s) {
  std::string k(kPfsSubscriberKeyBytes, '\0');
  EncodePfsKey(k.data(), p, s.value);
  return k;
}

inline std::string PfsPubendPrefix(PubendId p) {
  std::string k(4, '\0');
  StoreBE32(k.data(), p.value);
  return k;
}

// The first key after every key of pubend p in a PFS table ("" when p is the last possible
// pubend: unbounded).
inline std::string PfsPubendEnd(PubendId p) {
  return p.value == UINT32_MAX ? std::string() : PfsPubendPrefix(PubendId{p.value + 1});
}

inline std::string PfsMetaKey(PubendId p, char field) { return PfsPubendPrefix(p) + field; }

inline std::string EncodeBE64(uint64_t v) {
  std::string s(8, '\0');
  StoreBE64(s.data(), v);
  return s;
}

}  // namespace gryph::internal

#endif  // GRYPH_LIB_PFS_PFS_KEYS_H_
