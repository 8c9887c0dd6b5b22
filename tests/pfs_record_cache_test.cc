#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "lib/pfs/record_cache.h"
#include "tests/test_util.h"

namespace gryph::internal {
namespace {

// Adds the records of `ticks` (value "v<tick>") as one scan of (from, through].
void Scan(PfsRecordCache* cache, Tick from, const std::vector<Tick>& ticks, Tick through) {
  PfsRecordCache::Builder b(cache, from);
  for (Tick t : ticks) b.Add(t, absl::StrCat("v", t));
  b.Finish(through);
}

// What the cache says of the records in (from, to]: the ticks it visits, and how far it covered
// without a hole.
std::vector<Tick> Covered(PfsRecordCache* cache, Tick from, Tick to, Tick* reached) {
  std::vector<Tick> ticks;
  Tick at = from;
  while (at < to) {
    const PfsRecordCache::Chunk* c = cache->Covering(at);
    if (c == nullptr) break;
    for (size_t i = c->UpperBound(at); i < c->size() && c->tick(i) <= to; ++i) {
      REQUIRE(c->value(i) == absl::StrCat("v", c->tick(i)));
      ticks.push_back(c->tick(i));
    }
    at = std::min(c->hi(), to);
  }
  *reached = at;
  return ticks;
}

TEST_CASE("the PFS read cache serves a scanned range, and nothing beyond it", "[pfs]") {
  PfsRecordCache cache(1 << 20);
  Scan(&cache, 10, {12, 15, 19}, 30);
  Tick reached = 0;
  CHECK(Covered(&cache, 10, 30, &reached) == std::vector<Tick>{12, 15, 19});
  CHECK(reached == 30);
  CHECK(Covered(&cache, 15, 100, &reached) == std::vector<Tick>{19});
  CHECK(reached == 30);  // (30, 100] was never scanned
  CHECK(cache.Covering(9) == nullptr);
  CHECK(cache.Covering(30) == nullptr);
  CHECK(cache.NextStart(5) == 10);
  CHECK(cache.NextStart(10) == kMaxTick);
}

TEST_CASE("a PFS read cache scan stopped early covers only what it saw", "[pfs]") {
  PfsRecordCache cache(1 << 20);
  Scan(&cache, 0, {3, 4}, 4);  // the pass stopped at 4: 5.. unknown
  Tick reached = 0;
  CHECK(Covered(&cache, 0, 10, &reached) == std::vector<Tick>{3, 4});
  CHECK(reached == 4);
  // A range without records is not kept.
  Scan(&cache, 4, {}, 9);
  CHECK(cache.Covering(4) == nullptr);
}

TEST_CASE("a new PFS read cache chunk replaces those it overlaps", "[pfs]") {
  PfsRecordCache cache(1 << 20);
  Scan(&cache, 0, {5}, 10);
  Scan(&cache, 20, {25}, 30);
  Scan(&cache, 8, {9, 25}, 26);
  CHECK(cache.chunks() == 1);
  Tick reached = 0;
  CHECK(Covered(&cache, 8, 40, &reached) == std::vector<Tick>{9, 25});
  CHECK(reached == 26);
  CHECK(cache.Covering(3) == nullptr);
}

TEST_CASE("the PFS read cache keeps its budget, evicting the least recently used", "[pfs]") {
  // A 1,600-byte budget splits chunks at 100 bytes of records.
  PfsRecordCache cache(1600);
  std::vector<Tick> ticks;
  for (Tick t = 1; t <= 400; ++t) ticks.push_back(t);
  Scan(&cache, 0, ticks, 400);
  CHECK(cache.bytes() <= 1600 + 1000);  // about: the newest chunk always stays
  CHECK(cache.chunks() > 1);
  // What stayed is whole: every chunk still answers for its range exactly.
  Tick reached = 0;
  for (Tick from = 0; from < 400; ++from) {
    if (cache.Covering(from) == nullptr) continue;
    const std::vector<Tick> got = Covered(&cache, from, 400, &reached);
    std::vector<Tick> want;
    for (Tick t = from + 1; t <= reached; ++t) want.push_back(t);
    REQUIRE(got == want);
  }
  // The newest records stayed; a chunk used again outlives one that was not.
  CHECK(cache.Covering(399) != nullptr);
  const Tick low = [&] {
    for (Tick t = 0; t < 400; ++t) {
      if (cache.Covering(t) != nullptr) return t;
    }
    return Tick{400};
  }();
  REQUIRE(low < 399);
  (void)cache.Covering(low);  // used now
  Scan(&cache, 1000, {1001, 1002, 1003, 1004}, 1004);
  CHECK(cache.Covering(low) != nullptr);
}

TEST_CASE("the PFS read cache forgets what a chop passed", "[pfs]") {
  PfsRecordCache cache(1 << 20);
  Scan(&cache, 0, {5}, 10);
  Scan(&cache, 10, {15}, 20);
  cache.DropThrough(12);  // (0, 10] went; (10, 20] straddles and stays
  CHECK(cache.Covering(5) == nullptr);
  CHECK(cache.Covering(12) != nullptr);
  cache.DropThrough(20);
  CHECK(cache.chunks() == 0);
  CHECK(cache.bytes() == 0);
}

TEST_CASE("a PFS read cache of 0 bytes keeps nothing", "[pfs]") {
  PfsRecordCache cache(0);
  Scan(&cache, 0, {1, 2}, 5);
  CHECK(cache.Covering(0) == nullptr);
  CHECK(cache.bytes() == 0);
}

}  // namespace
}  // namespace gryph::internal
