#include "lib/util/crc32c.h"

#include <string>

#include "absl/random/random.h"
#include "catch2/catch.hpp"

namespace gryph::internal {
namespace {

TEST_CASE("CRC-32C matches the check values of RFC 3720 and the catalogue", "[crc32c]") {
  CHECK(Crc32c("") == 0u);
  CHECK(Crc32c("123456789") == 0xE3069283u);  // the catalogue's check value
  // RFC 3720 B.4: 32 bytes of zeros, of ones, ascending and descending.
  CHECK(Crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(Crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(static_cast<char>(i));
    down.push_back(static_cast<char>(31 - i));
  }
  CHECK(Crc32c(up) == 0x46DD794Eu);
  CHECK(Crc32c(down) == 0x113FDB5Cu);
}

TEST_CASE("CRC-32C: extending equals checksumming the concatenation, on both paths", "[crc32c]") {
  absl::BitGen gen;
  for (int round = 0; round < 200; ++round) {
    std::string data(absl::Uniform<size_t>(gen, 0, 300), '\0');
    for (char& c : data) c = static_cast<char>(absl::Uniform<int>(gen, 0, 256));
    const size_t cut = absl::Uniform<size_t>(gen, 0, data.size() + 1);
    const absl::string_view a(data.data(), cut);
    const absl::string_view b(data.data() + cut, data.size() - cut);
    const uint32_t whole = Crc32c(data);
    CHECK(Crc32cExtend(Crc32c(a), b) == whole);
    CHECK(Crc32cExtendPortable(Crc32cExtendPortable(0, a), b) == whole);
  }
}

TEST_CASE("CRC-32C of long values: the fast path agrees with the table at every length",
          "[crc32c]") {
  // Lengths around the blocks the fast path checksums as three stripes at once (3 x 128 bytes),
  // at every alignment, and long PFS-record-sized values.
  absl::BitGen gen;
  std::string data(8192 + 16, '\0');
  for (char& c : data) c = static_cast<char>(absl::Uniform<int>(gen, 0, 256));
  for (size_t len = 0; len <= 3 * 384 + 9; ++len) {
    const size_t offset = len % 8;
    const absl::string_view v(data.data() + offset, len);
    REQUIRE(Crc32c(v) == Crc32cExtendPortable(0, v));
  }
  for (size_t len : {1250, 2048, 4097, 8192}) {
    const absl::string_view v(data.data() + 3, len);
    REQUIRE(Crc32c(v) == Crc32cExtendPortable(0, v));
    REQUIRE(Crc32cExtend(Crc32c(v.substr(0, 500)), v.substr(500)) == Crc32c(v));
  }
  CHECK(Crc32c(std::string(4096, '\0')) == Crc32cExtendPortable(0, std::string(4096, '\0')));
}

TEST_CASE("CRC-32C detects every single-bit flip of a short value", "[crc32c]") {
  std::string data = "an event payload of some length, with a tick and a publisher";
  const uint32_t clean = Crc32c(data);
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] = static_cast<char>(data[bit / 8] ^ (1 << (bit % 8)));
    CHECK(Crc32c(data) != clean);
    data[bit / 8] = static_cast<char>(data[bit / 8] ^ (1 << (bit % 8)));
  }
}

}  // namespace
}  // namespace gryph::internal
