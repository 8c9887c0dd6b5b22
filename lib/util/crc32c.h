// Internal: CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected as 0x82F63B78), the checksum of
// iSCSI (RFC 3720), ext4 metadata, leveldb blocks and Kafka record batches. Every value gryph
// stores in a table carries one (docs/format.md, "Storage").
//
// Uses the SSE4.2 crc32 instruction where the CPU has it (chosen once, at first use), three
// streams at once on values of 384 bytes and more, and a slicing-by-8 table otherwise; every path
// gives the same result.
//
// Thread-safety: the functions are thread-safe.

#ifndef GRYPH_LIB_UTIL_CRC32C_H_
#define GRYPH_LIB_UTIL_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace gryph::internal {

// The CRC-32C of the bytes that produced `crc`, followed by `data`. Extend(0, "") == 0, and
// Extend(Extend(0, a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, absl::string_view data);

inline uint32_t Crc32c(absl::string_view data) { return Crc32cExtend(0, data); }

// The same, always by the table: for tests that compare the two paths.
uint32_t Crc32cExtendPortable(uint32_t crc, absl::string_view data);

}  // namespace gryph::internal

#endif  // GRYPH_LIB_UTIL_CRC32C_H_
