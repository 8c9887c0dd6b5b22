// Uses the installed gryph: encodes an event and decodes it again, and matches it against a
// subscription.
#include <cstdio>

#include "gryph/event.h"
#include "gryph/subscription.h"

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
  std::puts("consumer ok");
  return 0;
}
