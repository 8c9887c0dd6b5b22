// Internal: the PFS's tables and key and value layouts (docs/format.md ("PFS")).

#ifndef GRYPH_LIB_PFS_PFS_KEYS_H_
#define GRYPH_LIB_PFS_PFS_KEYS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "gryph/tick.h"
#include "lib/util/coding.h"
#include "lib/util/pubend_prefix.h"

namespace gryph::internal {

inline constexpr absl::string_view kPfsRecordsTable = "pfs.records";
inline constexpr absl::string_view kPfsSubscribersTable = "pfs.subscribers";
inline constexpr absl::string_view kPfsMetaTable = "pfs.meta";

// Meta fields. DO NOT CHANGE: stored on disk.
inline constexpr char kPfsMetaCheckpoint = 'C';  // checkpoint tick
inline constexpr char kPfsMetaChopped = 'X';     // chop point

// Key sizes: pubend (4) + tick or subscriber (8).
inline constexpr size_t kPfsRecordKeyBytes = kPubendKey64Bytes;
inline constexpr size_t kPfsSubscriberKeyBytes = kPubendKey64Bytes;
// A subscriber row: registration tick (8) + lastIndex at the checkpoint (8).
inline constexpr size_t kPfsSubscriberRowBytes = 16;

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
    return end_ - p >= 8 ? DecodeFixed64BE(p) >> (8 * (8 - w)) : DecodeFixedBE(p, w);
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

// pfs.records: prefix ‖ tick u64 BE -> a record (above).
inline std::string PfsRecordKey(PubendId p, Tick t) { return PubendKey64(p, t); }
// The tick of one of p's record keys; false for another pubend's key or a malformed one.
inline bool ParsePfsRecordKey(absl::string_view key, PubendId p, Tick* t) {
  return ParsePubendKey64(key, p, t);
}

// pfs.subscribers: prefix ‖ subscriber u64 BE -> registered_at u64 BE ‖ last_index u64 BE.
inline std::string PfsSubscriberKey(PubendId p, SubscriberId s) { return PubendKey64(p, s.value); }
inline bool ParsePfsSubscriberKey(absl::string_view key, PubendId p, uint64_t* subscriber) {
  return ParsePubendKey64(key, p, subscriber);
}
struct PfsSubscriberRow {
  Tick registered_at = 0;
  Tick last_index = 0;
};
// Into out[0..kPfsSubscriberRowBytes).
inline void EncodePfsSubscriberRow(char* out, const PfsSubscriberRow& row) {
  EncodeFixed64BE(out, row.registered_at);
  EncodeFixed64BE(out + 8, row.last_index);
}
inline bool ParsePfsSubscriberRow(absl::string_view value, PfsSubscriberRow* row) {
  return ParseFixed64BEPair(value, &row->registered_at, &row->last_index);
}

// pfs.meta: prefix ‖ field byte -> tick u64 BE.
inline std::string PfsMetaKey(PubendId p, char field) { return PubendPrefix(p) + field; }
inline std::string EncodePfsMetaTick(Tick t) { return Fixed64BE(t); }

}  // namespace gryph::internal

#endif  // GRYPH_LIB_PFS_PFS_KEYS_H_
