// Internal: the PFS's tables and key and value layouts (docs/format.md ("PFS")).

#ifndef GRYPH_LIB_PFS_PFS_KEYS_H_
#define GRYPH_LIB_PFS_PFS_KEYS_H_

#include <algorithm>
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
// A subscriber row: registration tick (8) + lastIndex at the checkpoint (8).
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

// The fewest bytes (1..8) that hold v.
inline int BytesFor(uint64_t v) { return v == 0 ? 1 : (64 - __builtin_clzll(v) + 7) / 8; }

// The low `w` bytes of v, big-endian, at p[0..w). REQUIRES: 1 <= w <= 8, v < 2^(8w).
inline void StoreBEn(char* p, uint64_t v, int w) {
  const uint64_t be = __builtin_bswap64(v << (8 * (8 - w)));
  std::memcpy(p, &be, static_cast<size_t>(w));
}
// The big-endian integer of `w` bytes at p. REQUIRES: 1 <= w <= 8.
inline uint64_t LoadBEn(const char* p, int w) {
  uint64_t v = 0;
  std::memcpy(&v, p, static_cast<size_t>(w));
  return __builtin_bswap64(v) >> (8 * (8 - w));
}

// A record value (docs/format.md ("PFS"), "pfs.records"):
//
//   record := header:u8 entry{n}                      n >= 1
//   header := 0 iii 0 ddd    (bits 7 and 3 zero; id_bytes = iii + 1, delta_bytes = ddd + 1)
//   entry  := subscriber:id_bytes BE  delta:delta_bytes BE
//
// Entries are sorted by strictly increasing subscriber; delta = tick - previous record tick of
// that subscriber, or 0 when it has none. The widths are the fewest that hold the record's
// largest subscriber and largest delta, so the entries are fixed-width within a record (binary
// search in place) yet rarely 16 bytes.
class PfsRecordView {
 public:
  // Parses the header of `value`; false if malformed (reserved bits set, empty, or a body that
  // is not a whole number of entries).
  bool Parse(absl::string_view value) {
    if (value.size() < 2) return false;
    const uint8_t h = static_cast<uint8_t>(value[0]);
    if ((h & 0x88) != 0) return false;
    id_bytes_ = ((h >> 4) & 7) + 1;
    delta_bytes_ = (h & 7) + 1;
    entry_bytes_ = static_cast<size_t>(id_bytes_ + delta_bytes_);
    const size_t body = value.size() - 1;
    if (body % entry_bytes_ != 0) return false;
    count_ = body / entry_bytes_;
    entries_ = value.data() + 1;
    end_ = value.data() + value.size();
    return true;
  }
  size_t count() const { return count_; }
  uint64_t id(size_t i) const { return Load(entries_ + i * entry_bytes_, id_bytes_); }
  uint64_t delta(size_t i) const {
    return Load(entries_ + i * entry_bytes_ + id_bytes_, delta_bytes_);
  }
  // The index of subscriber `target`, or count() if absent. A few interpolation steps (ids are
  // spread evenly in practice, so each lands near the target and touches one cache line), then
  // binary search: O(log n) probes even for skewed ids.
  size_t Find(uint64_t target) const {
    size_t lo = 0;
    size_t hi = count_;  // the target, if present, is in [lo, hi)
    for (int step = 0; step < 3 && hi - lo > 8; ++step) {
      const uint64_t first = id(lo);
      const uint64_t last = id(hi - 1);
      if (target <= first || target >= last) {
        if (target == first) return lo;
        if (target == last) return hi - 1;
        return count_;
      }
      const double fraction =
          static_cast<double>(target - first) / static_cast<double>(last - first);
      const size_t guess =
          std::min(hi - 1, lo + static_cast<size_t>(fraction * static_cast<double>(hi - 1 - lo)));
      const uint64_t v = id(guess);
      if (v == target) return guess;
      if (v < target) {
        lo = guess + 1;
      } else {
        hi = guess;
      }
    }
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      const uint64_t v = id(mid);
      if (v < target) {
        lo = mid + 1;
      } else if (v > target) {
        hi = mid;
      } else {
        return mid;
      }
    }
    return count_;
  }

 private:
  // One unaligned 8-byte load when the value has 8 bytes from p on (all but the last entries):
  // cheaper than a variable-length copy, which defeats store forwarding.
  uint64_t Load(const char* p, int w) const {
    return end_ - p >= 8 ? LoadBE64(p) >> (8 * (8 - w)) : LoadBEn(p, w);
  }

  const char* entries_ = nullptr;
  const char* end_ = nullptr;
  size_t count_ = 0;
  size_t entry_bytes_ = 0;
  int id_bytes_ = 0;
  int delta_bytes_ = 0;
};

inline uint8_t PfsRecordHeader(int id_bytes, int delta_bytes) {
  return static_cast<uint8_t>(((id_bytes - 1) << 4) | (delta_bytes - 1));
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
