// Internal: byte encodings shared by every gryph format (docs/format.md).
//
// Varints are LEB128 (7 bits a byte, low group first), at most 10 bytes for a uint64, and only
// the shortest encoding of a value is accepted.
// Keys use big-endian fixed-width integers so that memcmp order is numeric order. This is the one
// coding layer: every component's keys (lib/*/*_keys.h) are built from it.
// ByteReader consumes an input with bounds checks; its first failure is sticky.

#ifndef GRYPH_LIB_UTIL_CODING_H_
#define GRYPH_LIB_UTIL_CODING_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gryph::internal {

static_assert(std::endian::native == std::endian::little || std::endian::native == std::endian::big,
              "gryph's encodings assume a little- or big-endian host");

// Fixed-width big-endian integers, at a pointer (Encode*, Decode*: the caller owns the bytes) or
// appended to a string (Put*). Keys use them so that memcmp order is numeric order.
inline uint64_t ToBigEndian64(uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap64(v);
  return v;
}
inline uint32_t ToBigEndian32(uint32_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap32(v);
  return v;
}

inline void EncodeFixed64BE(char* dst, uint64_t v) {
  v = ToBigEndian64(v);
  std::memcpy(dst, &v, 8);
}
inline void EncodeFixed32BE(char* dst, uint32_t v) {
  v = ToBigEndian32(v);
  std::memcpy(dst, &v, 4);
}
inline uint64_t DecodeFixed64BE(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return ToBigEndian64(v);
}
inline uint32_t DecodeFixed32BE(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return ToBigEndian32(v);
}

// The fewest bytes (1..8) that hold v.
inline int BytesFor(uint64_t v) { return v == 0 ? 1 : (64 - __builtin_clzll(v) + 7) / 8; }

// The low `width` bytes of v, big-endian, at dst[0..width). REQUIRES: 1 <= width <= 8,
// v < 2^(8 width).
inline void EncodeFixedBE(char* dst, uint64_t v, int width) {
  const uint64_t be = ToBigEndian64(v << (8 * (8 - width)));
  std::memcpy(dst, &be, static_cast<size_t>(width));
}
// The big-endian integer of `width` bytes at p. REQUIRES: 1 <= width <= 8.
inline uint64_t DecodeFixedBE(const char* p, int width) {
  uint64_t v = 0;
  std::memcpy(&v, p, static_cast<size_t>(width));
  return ToBigEndian64(v) >> (8 * (8 - width));
}

inline void PutFixed64BE(std::string* out, uint64_t v) {
  char buf[8];
  EncodeFixed64BE(buf, v);
  out->append(buf, 8);
}
inline void PutFixed32BE(std::string* out, uint32_t v) {
  char buf[4];
  EncodeFixed32BE(buf, v);
  out->append(buf, 4);
}
inline void PutFixed16BE(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v & 0xff));
}
inline uint16_t DecodeFixed16BE(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) << 8 | static_cast<uint8_t>(p[1]));
}
// v as 8 big-endian bytes.
inline std::string Fixed64BE(uint64_t v) {
  std::string s(8, '\0');
  EncodeFixed64BE(s.data(), v);
  return s;
}

// Two 8-byte big-endian integers: the 16-byte values of several tables (docs/format.md).
inline std::string Fixed64BEPair(uint64_t first, uint64_t second) {
  std::string s(16, '\0');
  EncodeFixed64BE(s.data(), first);
  EncodeFixed64BE(s.data() + 8, second);
  return s;
}
// False, changing nothing, unless `value` is 16 bytes.
inline bool ParseFixed64BEPair(absl::string_view value, uint64_t* first, uint64_t* second) {
  if (value.size() != 16) return false;
  *first = DecodeFixed64BE(value.data());
  *second = DecodeFixed64BE(value.data() + 8);
  return true;
}

void PutVarint64(std::string* out, uint64_t v);
void PutFixed64LE(std::string* out, uint64_t v);
// Varint length followed by the bytes.
void PutLengthPrefixed(std::string* out, absl::string_view bytes);

inline uint64_t ZigZagEncode(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t ZigZagDecode(uint64_t v) { return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1)); }

// Reads an input front to back. Every Read* returns false once any read has failed; status()
// then says what failed, naming `what` and the byte offset.
class ByteReader {
 public:
  // `context` names the format in error messages ("event", "message"). The input must outlive
  // the reader and any string_view it returns.
  ByteReader(absl::string_view input, absl::string_view context)
      : input_(input), rest_(input), context_(context) {}

  bool ReadByte(uint8_t* v, absl::string_view what);
  bool ReadVarint64(uint64_t* v, absl::string_view what);
  // A varint that must fit `max`.
  bool ReadVarintAtMost(uint64_t max, uint64_t* v, absl::string_view what);
  bool ReadFixed64LE(uint64_t* v, absl::string_view what);
  bool ReadBytes(size_t n, absl::string_view* v, absl::string_view what);
  bool ReadLengthPrefixed(absl::string_view* v, absl::string_view what);

  // Records a semantic error at the current offset (e.g. "unknown type tag 7").
  bool Fail(absl::string_view what);
  // Fails unless the whole input was consumed.
  bool ExpectEnd();

  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  size_t offset() const { return input_.size() - rest_.size(); }
  size_t remaining() const { return rest_.size(); }

 private:
  absl::string_view input_;
  absl::string_view rest_;
  absl::string_view context_;
  absl::Status status_;
};

}  // namespace gryph::internal

#endif  // GRYPH_LIB_UTIL_CODING_H_
