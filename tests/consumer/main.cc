// Uses the installed gryph: encodes an event and decodes it again, matches it against a
// subscription, prints ids, and checks that headers and library are of one version.
#include <cstdio>
#include <cstring>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gryph/event.h"
#include "gryph/subscription.h"
#include "gryph/tick.h"
#include "gryph/version.h"

int main() {
  gryph::Event e;
  e.SetTopic("orders/IBM").SetInt64("quantity", 1200).SetString("side", "buy");
  auto decoded = gryph::Event::Decode(e.Encode());
  if (!decoded.ok() || !(*decoded == e)) {
    std::fprintf(stderr, "round trip failed\n");
    return 1;
  }
  auto sub = gryph::Subscription::Create("quantity > 1000 AND side IN ('buy')", "orders/#");
  if (!sub.ok() || !sub->Matches(e)) {
    std::fprintf(stderr, "subscription failed\n");
    return 1;
  }
  std::ostringstream os;
  os << gryph::PubendId{3};
  const std::string ids = absl::StrCat(os.str(), "/", gryph::SubscriberId{9});
  if (ids != "3/9") {
    std::fprintf(stderr, "ids print as %s\n", ids.c_str());
    return 1;
  }
  if (std::strcmp(gryph::LibraryVersion().string, GRYPH_VERSION_STRING) != 0) {
    std::fprintf(stderr, "headers %s, library %s\n", GRYPH_VERSION_STRING,
                 gryph::LibraryVersion().string);
    return 1;
  }
  std::printf("consumer ok, gryph %s\n", gryph::LibraryVersion().string);
  return 0;
}
