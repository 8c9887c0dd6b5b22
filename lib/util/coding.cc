#include "lib/util/coding.h"

#include "absl/strings/str_cat.h"

namespace gryph::internal {

void PutVarint64(std::string* out, uint64_t v) {
  char buf[10];
  int n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  out->append(buf, n);
}

void PutFixed64LE(std::string* out, uint64_t v) {
  char buf[8];
  for (int i = 0; i < 8; ++i) {
    buf[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  out->append(buf, 8);
}

void PutLengthPrefixed(std::string* out, absl::string_view bytes) {
  PutVarint64(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

bool ByteReader::Fail(absl::string_view what) {
  if (status_.ok()) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("malformed ", context_, " at byte ", offset(), ": ", what));
  }
  return false;
}

bool ByteReader::ReadByte(uint8_t* v, absl::string_view what) {
  if (!ok()) return false;
  if (rest_.empty()) return Fail(absl::StrCat("truncated ", what));
  *v = static_cast<uint8_t>(rest_[0]);
  rest_.remove_prefix(1);
  return true;
}

bool ByteReader::ReadVarint64(uint64_t* v, absl::string_view what) {
  if (!ok()) return false;
  uint64_t result = 0;
  for (int i = 0; i < 10; ++i) {
    if (static_cast<size_t>(i) >= rest_.size()) return Fail(absl::StrCat("truncated ", what));
    const uint8_t b = static_cast<uint8_t>(rest_[i]);
    // The tenth byte may only carry the top bit of a uint64.
    if (i == 9 && b > 1) return Fail(absl::StrCat("varint overflow in ", what));
    result |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) {
      // Only the shortest encoding is accepted, so that every value has one encoding.
      if (b == 0 && i > 0) return Fail(absl::StrCat("non-minimal varint in ", what));
      rest_.remove_prefix(i + 1);
      *v = result;
      return true;
    }
  }
  return Fail(absl::StrCat("varint overflow in ", what));
}

bool ByteReader::ReadVarintAtMost(uint64_t max, uint64_t* v, absl::string_view what) {
  if (!ReadVarint64(v, what)) return false;
  if (*v > max) return Fail(absl::StrCat(what, " ", *v, " exceeds ", max));
  return true;
}

bool ByteReader::ReadFixed64LE(uint64_t* v, absl::string_view what) {
  if (!ok()) return false;
  if (rest_.size() < 8) return Fail(absl::StrCat("truncated ", what));
  uint64_t r = 0;
  for (int i = 7; i >= 0; --i) r = (r << 8) | static_cast<uint8_t>(rest_[i]);
  rest_.remove_prefix(8);
  *v = r;
  return true;
}

bool ByteReader::ReadBytes(size_t n, absl::string_view* v, absl::string_view what) {
  if (!ok()) return false;
  if (rest_.size() < n) return Fail(absl::StrCat("truncated ", what));
  *v = rest_.substr(0, n);
  rest_.remove_prefix(n);
  return true;
}

bool ByteReader::ReadLengthPrefixed(absl::string_view* v, absl::string_view what) {
  uint64_t n;
  if (!ReadVarint64(&n, what)) return false;
  if (n > rest_.size()) return Fail(absl::StrCat("length of ", what, " exceeds the input"));
  return ReadBytes(static_cast<size_t>(n), v, what);
}

bool ByteReader::ExpectEnd() {
  if (!ok()) return false;
  if (!rest_.empty()) return Fail(absl::StrCat(rest_.size(), " trailing bytes"));
  return true;
}

}  // namespace gryph::internal
