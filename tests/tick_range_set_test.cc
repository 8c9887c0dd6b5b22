#include "gryph/broker/tick_range_set.h"

#include <set>

#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::Rng;

TEST_CASE("adding ranges coalesces overlapping and adjacent ones", "[tick_range_set]") {
  TickRangeSet s;
  REQUIRE(s.Add({5, 9}) == std::vector<TickRange>{{5, 9}});
  REQUIRE(s.Add({1, 4}) == std::vector<TickRange>{{1, 4}});
  REQUIRE(s.range_count() == 1);
  REQUIRE(s.Add({3, 12}) == std::vector<TickRange>{{10, 12}});
  REQUIRE(s.Add({2, 6}).empty());
  REQUIRE(s.ToVector() == std::vector<TickRange>{{1, 12}});
  REQUIRE(s.tick_count() == 12);
}

TEST_CASE("removing a range splits the ranges around it", "[tick_range_set]") {
  TickRangeSet s;
  s.Add({1, 20});
  REQUIRE(s.Remove({5, 8}) == std::vector<TickRange>{{5, 8}});
  REQUIRE(s.ToVector() == std::vector<TickRange>{{1, 4}, {9, 20}});
  REQUIRE(s.Remove({3, 10}) == std::vector<TickRange>{{3, 4}, {9, 10}});
  REQUIRE(s.ToVector() == std::vector<TickRange>{{1, 2}, {11, 20}});
  REQUIRE(s.Remove({30, 40}).empty());
}

TEST_CASE("a range set handles the last tick", "[tick_range_set]") {
  TickRangeSet s;
  s.Add({kMaxTick - 1, kMaxTick});
  s.Add({1, kMaxTick - 2});
  REQUIRE(s.ToVector() == std::vector<TickRange>{{1, kMaxTick}});
  REQUIRE(s.Contains(kMaxTick));
  REQUIRE(s.Remove({kMaxTick, kMaxTick}) == std::vector<TickRange>{{kMaxTick, kMaxTick}});
  REQUIRE(s.ToVector() == std::vector<TickRange>{{1, kMaxTick - 1}});
}

TEST_CASE("a range set matches a set of ticks over random operations",
          "[tick_range_set][property]") {
  for (uint64_t seed : testing::Seeds(2000, 50)) {
    INFO("seed " << seed << " (rerun with GRYPH_SEED=" << seed << ")");
    Rng rng(seed);
    TickRangeSet s;
    std::set<Tick> model;
    for (int step = 0; step < 2000; ++step) {
      const Tick a = rng.Range(1, 200);
      const TickRange r{a, a + rng.Uniform(15)};
      std::vector<TickRange> want;  // the ticks of r newly added / removed, as ranges
      auto note = [&](Tick t) {
        if (!want.empty() && want.back().last + 1 == t) {
          want.back().last = t;
        } else {
          want.push_back({t, t});
        }
      };
      if (rng.OneIn(2)) {
        for (Tick t = r.first; t <= r.last; ++t) {
          if (model.insert(t).second) note(t);
        }
        REQUIRE(s.Add(r) == want);
      } else {
        for (Tick t = r.first; t <= r.last; ++t) {
          if (model.erase(t) > 0) note(t);
        }
        REQUIRE(s.Remove(r) == want);
      }
      // Coalesced: consecutive ranges are separated by at least one missing tick.
      std::vector<TickRange> ranges = s.ToVector();
      for (size_t i = 1; i < ranges.size(); ++i) REQUIRE(ranges[i - 1].last + 1 < ranges[i].first);
      REQUIRE(s.tick_count() == model.size());
      const Tick probe = rng.Range(1, 220);
      REQUIRE(s.Contains(probe) == model.contains(probe));
    }
  }
}

}  // namespace
}  // namespace gryph
