#include "gryph/tick.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

TEST_CASE("ids print as their number through << and absl::StrCat", "[tick]") {
  std::ostringstream os;
  os << PubendId{7} << " " << SubscriberId{uint64_t{1} << 40};
  REQUIRE(os.str() == "7 1099511627776");
  REQUIRE(absl::StrCat("pubend ", PubendId{7}, ", subscriber ", SubscriberId{12}) ==
          "pubend 7, subscriber 12");
  std::string s = "p";
  absl::StrAppend(&s, PubendId{4294967295u});
  REQUIRE(s == "p4294967295");
  REQUIRE(absl::StrJoin(std::vector<PubendId>{{1}, {2}, {3}}, ",",
                        [](std::string* out, PubendId p) { absl::StrAppend(out, p); }) == "1,2,3");
}

TEST_CASE("tick values and ranges have their printed names", "[tick]") {
  REQUIRE(std::string(TickValueName(TickValue::kQ)) == "Q");
  REQUIRE(std::string(TickValueName(TickValue::kS)) == "S");
  REQUIRE(std::string(TickValueName(TickValue::kD)) == "D");
  REQUIRE(std::string(TickValueName(TickValue::kL)) == "L");
  REQUIRE(ToString(TickRange{3, 9}) == "[3,9]");
}

}  // namespace
}  // namespace gryph
