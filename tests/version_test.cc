#include "gryph/version.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

TEST_CASE("the library's version is the headers' version", "[version]") {
  const Version v = LibraryVersion();
  REQUIRE(v.major == GRYPH_VERSION_MAJOR);
  REQUIRE(v.minor == GRYPH_VERSION_MINOR);
  REQUIRE(v.patch == GRYPH_VERSION_PATCH);
  REQUIRE(std::string(v.string) == GRYPH_VERSION_STRING);
  REQUIRE(absl::StrCat(v.major, ".", v.minor, ".", v.patch) == v.string);
  REQUIRE(GRYPH_VERSION_NUMBER == v.major * 10000 + v.minor * 100 + v.patch);
}

}  // namespace
}  // namespace gryph
