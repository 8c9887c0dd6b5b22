#include "gryph/testing/exactly_once_checker.h"

#include "tests/test_util.h"

namespace gryph {
namespace {

using Consumed = ExactlyOnceChecker::Consumed;
constexpr PubendId kP{1};

EventRef Order(int64_t qty) {
  Event e;
  e.SetInt64("qty", qty);
  return MakeEventRef(std::move(e));
}

// Pubend 1 logged qty 5 at 10, qty 50 at 20, qty 7 at 30; the subscriber wants qty < 10.
ExactlyOnceChecker WithLog() {
  ExactlyOnceChecker c;
  c.Logged(kP, 10, Order(5));
  c.Logged(kP, 20, Order(50));
  c.Logged(kP, 30, Order(7));
  return c;
}

ExactlyOnceChecker::SubscriberRecord Subscriber(std::vector<Consumed> consumed,
                                                bool well_behaved = true) {
  ExactlyOnceChecker::SubscriberRecord r{
      "s", *Subscription::Create("qty < 10"), {}, {}, well_behaved, {}};
  r.consumed[kP] = std::move(consumed);
  return r;
}

std::vector<std::string> CheckOne(std::vector<Consumed> consumed, bool well_behaved = true,
                                  Tick released = 0) {
  ExactlyOnceChecker c = WithLog();
  if (released > 0) c.Released(kP, released);
  c.AddSubscriber(Subscriber(std::move(consumed), well_behaved));
  return c.Check();
}

TEST_CASE("the checker accepts exactly the matching events in order", "[checker]") {
  REQUIRE(CheckOne({{DeliveryKind::kEvent, 10, Order(5)},
                    {DeliveryKind::kSilence, 25, nullptr},
                    {DeliveryKind::kEvent, 30, Order(7)}})
              .empty());
}

TEST_CASE("the checker catches duplicates, skips, hidden matches and missing ends", "[checker]") {
  REQUIRE_FALSE(CheckOne({{DeliveryKind::kEvent, 10, Order(5)},
                          {DeliveryKind::kEvent, 10, Order(5)},
                          {DeliveryKind::kEvent, 30, Order(7)}})
                    .empty());
  REQUIRE_FALSE(CheckOne({{DeliveryKind::kEvent, 30, Order(7)}}).empty());  // skipped 10
  REQUIRE_FALSE(
      CheckOne({{DeliveryKind::kSilence, 15, nullptr}, {DeliveryKind::kEvent, 30, Order(7)}})
          .empty());                                                        // the Silence hid 10
  REQUIRE_FALSE(CheckOne({{DeliveryKind::kEvent, 10, Order(5)}}).empty());  // never reached 30
  REQUIRE_FALSE(
      CheckOne({{DeliveryKind::kEvent, 10, Order(6)}, {DeliveryKind::kEvent, 30, Order(7)}})
          .empty());  // not the logged event
  REQUIRE_FALSE(CheckOne({{DeliveryKind::kEvent, 10, Order(5)},
                          {DeliveryKind::kEvent, 20, Order(50)},
                          {DeliveryKind::kEvent, 30, Order(7)}})
                    .empty());  // 20 does not match
}

TEST_CASE("a Gap is honest only where something was released, and never for the well-behaved",
          "[checker]") {
  const std::vector<Consumed> gap = {{DeliveryKind::kGap, 20, nullptr},
                                     {DeliveryKind::kEvent, 30, Order(7)}};
  REQUIRE_FALSE(CheckOne(gap, /*well_behaved=*/false, /*released=*/0).empty());
  REQUIRE_FALSE(CheckOne(gap, /*well_behaved=*/true, /*released=*/15).empty());
  REQUIRE(CheckOne(gap, /*well_behaved=*/false, /*released=*/15).empty());
}

TEST_CASE(
    "a Gap judged when it came must reach below what it could excuse then, and hide no "
    "match above it",
    "[checker]") {
  // Log: matches at 10 and 30 (qty 5, 7); 20 does not match.
  auto gap = [](Tick t, Tick excusable) {
    Consumed c{DeliveryKind::kGap, t, nullptr};
    c.excusable_through = excusable;
    return c;
  };
  const Consumed e30{DeliveryKind::kEvent, 30, Order(7)};
  // 10 was released (or consumed before) when the Gap through 25 came: honest.
  REQUIRE(CheckOne({gap(25, 12), e30}, /*well_behaved=*/false).empty());
  // Only 5 could be excused then, and the Gap hid the match at 10.
  REQUIRE_FALSE(CheckOne({gap(25, 5), e30}, false).empty());
  // Nothing at all could be excused: the Gap covers nothing that was discarded.
  REQUIRE_FALSE(CheckOne({{DeliveryKind::kEvent, 10, Order(5)}, gap(25, 10), e30}, false).empty());
  // The final L prefix (35) would excuse both; the bound at the time does not.
  REQUIRE_FALSE(CheckOne({gap(25, 5), e30}, false, /*released=*/35).empty());
}

}  // namespace
}  // namespace gryph
