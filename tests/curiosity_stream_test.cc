#include "gryph/broker/curiosity_stream.h"

#include <map>
#include <set>

#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::Rng;
using Interest = CuriosityStream::Interest;

TEST_CASE("overlapping nacks from many nodes become one upstream nack", "[curiosity]") {
  CuriosityStream c;
  REQUIRE(c.Add("shb1", {10, 20}) == std::vector<TickRange>{{10, 20}});
  REQUIRE(c.Add("shb2", {10, 20}).empty());
  REQUIRE(c.Add("shb3", {15, 25}) == std::vector<TickRange>{{21, 25}});
  REQUIRE(c.Outstanding() == std::vector<TickRange>{{10, 25}});
}

TEST_CASE("resolving a range says who wanted which part", "[curiosity]") {
  CuriosityStream c;
  c.Add("a", {10, 20});
  c.Add("b", {18, 30});
  REQUIRE(c.Resolve({15, 19}) == std::vector<Interest>{{"a", {15, 19}}, {"b", {18, 19}}});
  REQUIRE(c.Outstanding() == std::vector<TickRange>{{10, 14}, {20, 30}});
  REQUIRE(c.Resolve({100, 200}).empty());
}

TEST_CASE("pruning drops what the knowledge stream knows", "[curiosity]") {
  CuriosityStream c;
  c.Add("self", {1, 10});
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateSilence({3, 5}));
  Event e;
  REQUIRE_OK(k.AccumulateData(8, MakeEventRef(e)));
  REQUIRE(c.Prune(k) == std::vector<Interest>{{"self", {3, 5}}, {"self", {8, 8}}});
  REQUIRE(c.Outstanding() == std::vector<TickRange>{{1, 2}, {6, 7}, {9, 10}});
}

TEST_CASE("removing a requester keeps what others still want", "[curiosity]") {
  CuriosityStream c;
  c.Add("a", {1, 10});
  c.Add("b", {5, 6});
  REQUIRE(c.RemoveRequester("a") == std::vector<TickRange>{{1, 4}, {7, 10}});
  REQUIRE(c.Outstanding() == std::vector<TickRange>{{5, 6}});
  REQUIRE(c.RemoveRequester("nobody").empty());
}

TEST_CASE("curiosity matches a per-requester model over random operations",
          "[curiosity][property]") {
  const std::vector<std::string> names = {"a", "b", "c"};
  for (uint64_t seed : testing::Seeds(3000, 50)) {
    INFO("seed " << seed << " (rerun with GRYPH_SEED=" << seed << ")");
    Rng rng(seed);
    CuriosityStream c;
    std::map<std::string, std::set<Tick>> model;
    auto all = [&] {
      std::set<Tick> u;
      for (auto& [n, s] : model) u.insert(s.begin(), s.end());
      return u;
    };
    for (int step = 0; step < 1000; ++step) {
      const Tick a = rng.Range(1, 100);
      const TickRange r{a, a + rng.Uniform(10)};
      const std::string& who = names[rng.Uniform(names.size())];
      const uint64_t op = rng.Uniform(3);
      if (op == 0) {
        const std::set<Tick> before = all();
        uint64_t fresh = 0;
        for (Tick t = r.first; t <= r.last; ++t) {
          model[who].insert(t);
          fresh += before.contains(t) ? 0 : 1;
        }
        uint64_t got = 0;
        for (TickRange x : c.Add(who, r)) {
          for (Tick t = x.first; t <= x.last; ++t) REQUIRE_FALSE(before.contains(t));
          got += x.size();
        }
        REQUIRE(got == fresh);
      } else if (op == 1) {
        std::map<std::string, uint64_t> want;
        for (auto& [n, s] : model) {
          for (Tick t = r.first; t <= r.last; ++t) want[n] += s.erase(t);
        }
        std::map<std::string, uint64_t> got;
        for (const Interest& i : c.Resolve(r)) got[i.requester] += i.range.size();
        for (auto& [n, count] : want) REQUIRE(got[n] == count);
      } else if (rng.OneIn(10)) {
        model.erase(who);
        c.RemoveRequester(who);
      }
      uint64_t outstanding = 0;
      for (TickRange x : c.Outstanding()) outstanding += x.size();
      REQUIRE(outstanding == all().size());
    }
  }
}

}  // namespace
}  // namespace gryph
