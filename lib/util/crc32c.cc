#include "lib/util/crc32c.h"

#include <array>
#include <cstddef>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace gryph::internal {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // 0x1EDC6F41 bit-reversed

// kTables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ ((crc & 1) != 0 ? kPolynomial : 0);
    t[0][b] = crc;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

uint64_t LoadLE64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // x86-64 and every other target gryph builds on are little-endian
}

// Both paths work on the inverted register; the public functions invert at the ends.
uint32_t UpdatePortable(uint32_t crc, const unsigned char* p, size_t n) {
  while (n >= 8) {
    const uint64_t v = LoadLE64(p) ^ crc;
    crc = kTables[7][v & 0xff] ^ kTables[6][(v >> 8) & 0xff] ^ kTables[5][(v >> 16) & 0xff] ^
          kTables[4][(v >> 24) & 0xff] ^ kTables[3][(v >> 32) & 0xff] ^
          kTables[2][(v >> 40) & 0xff] ^ kTables[1][(v >> 48) & 0xff] ^ kTables[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
// The crc32 instruction takes 3 cycles and can start one every cycle: three streams at once go
// about three times as fast as one. A block of 3 * kStripe bytes is checksummed as three stripes
// in parallel, the second and third from a zero register, and then combined: the register after
// A B is the register after A followed by |B| zero bytes, xor the register of B alone (the CRC
// is linear). Moving a register past kStripe zero bytes is itself linear, so it is four table
// lookups: kShift[k][b] is byte b in byte position k of the register, moved so.
constexpr size_t kStripe = 128;

using ShiftTables = std::array<std::array<uint32_t, 256>, 4>;

ShiftTables MakeShiftTables() {
  ShiftTables t{};
  const unsigned char zeros[kStripe] = {};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      t[static_cast<size_t>(k)][b] = UpdatePortable(b << (8 * k), zeros, kStripe);
    }
  }
  return t;
}

const ShiftTables& Shift() {
  static const ShiftTables* tables = new ShiftTables(MakeShiftTables());
  return *tables;
}

uint32_t ShiftPastStripe(const ShiftTables& t, uint32_t crc) {
  return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

__attribute__((target("sse4.2"))) uint32_t UpdateSse42(uint32_t crc, const unsigned char* p,
                                                       size_t n) {
  uint64_t c = crc;
  if (n >= 3 * kStripe) {
    const ShiftTables& t = Shift();
    while (n >= 3 * kStripe) {
      uint64_t c1 = 0;
      uint64_t c2 = 0;
      for (size_t i = 0; i < kStripe; i += 8) {
        c = _mm_crc32_u64(c, LoadLE64(p + i));
        c1 = _mm_crc32_u64(c1, LoadLE64(p + kStripe + i));
        c2 = _mm_crc32_u64(c2, LoadLE64(p + 2 * kStripe + i));
      }
      const uint32_t ab = ShiftPastStripe(t, static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1);
      c = ShiftPastStripe(t, ab) ^ static_cast<uint32_t>(c2);
      p += 3 * kStripe;
      n -= 3 * kStripe;
    }
  }
  while (n >= 8) {
    c = _mm_crc32_u64(c, LoadLE64(p));
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

using UpdateFn = uint32_t (*)(uint32_t, const unsigned char*, size_t);

UpdateFn ChooseUpdate() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2") ? UpdateSse42 : UpdatePortable;
}
#endif

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t crc, absl::string_view data) {
  return ~UpdatePortable(~crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

uint32_t Crc32cExtend(uint32_t crc, absl::string_view data) {
#if defined(__x86_64__)
  static const UpdateFn update = ChooseUpdate();
  return ~update(~crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
#else
  return Crc32cExtendPortable(crc, data);
#endif
}

}  // namespace gryph::internal
