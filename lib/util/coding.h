// Internal: byte encodings shared by every gryph format (docs/format.md).
//
// Varints are LEB128 (7 bits a byte, low group first), at most 10 bytes for a uint64, and only
// the shortest encoding of a value is accepted.
// Keys use big-endian fixed-width integers so that memcmp order is numeric order.
// ByteReader consumes an input with bounds checks; its first failure is sticky.

#ifndef GRYPH_LIB_UTIL_CODING_H_
#define GRYPH_LIB_UTIL_CODING_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gryph::internal {

void PutVarint64(std::string* out, uint64_t v);
void PutFixed64BE(std::string* out, uint64_t v);
void PutFixed32BE(std::string* out, uint32_t v);
void PutFixed64LE(std::string* out, uint64_t v);
// Varint length followed by the bytes.
void PutLengthPrefixed(std::string* out, absl::string_view bytes);

uint64_t DecodeFixed64BE(const char* p);
uint32_t DecodeFixed32BE(const char* p);

inline uint64_t ZigZagEncode(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t ZigZagDecode(uint64_t v) {
  return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
}

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
