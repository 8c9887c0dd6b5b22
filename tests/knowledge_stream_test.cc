#include "gryph/broker/knowledge_stream.h"

#include <map>
#include <vector>

#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::Rng;

EventRef MakeEvent(int id) {
  Event e;
  e.SetInt64("id", id);
  return MakeEventRef(std::move(e));
}

TEST_CASE("a new knowledge stream is all Q", "[knowledge]") {
  KnowledgeStream k;
  REQUIRE(k.ValueAt(1) == TickValue::kQ);
  REQUIRE(k.ValueAt(kMaxTick) == TickValue::kQ);
  REQUIRE(k.DoubtHorizon(0) == 0);
  REQUIRE(k.LPrefix() == 0);
  REQUIRE(k.span_count() == 1);
}

TEST_CASE("knowledge moves Q to S, D and L and coalesces", "[knowledge]") {
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateSilence({1, 4}));
  REQUIRE_OK(k.AccumulateData(5, MakeEvent(5)));
  REQUIRE_OK(k.AccumulateSilence({6, 9}));
  REQUIRE(k.DoubtHorizon(0) == 9);
  REQUIRE(k.DoubtHorizon(5) == 9);
  REQUIRE(k.ValueAt(5) == TickValue::kD);
  REQUIRE(k.SpanAt(2).range == TickRange{1, 4});
  REQUIRE_OK(k.AccumulateLost({1, 7}));
  REQUIRE(k.LPrefix() == 7);
  REQUIRE(k.SpanAt(8).range == TickRange{8, 9});
  REQUIRE_OK(k.AccumulateLost({8, 9}));
  REQUIRE(k.LPrefix() == 9);
  REQUIRE(k.span_count() == 2);  // [1,9] L and [10,max] Q
}

TEST_CASE("contradicting knowledge is rejected and changes nothing", "[knowledge]") {
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateData(5, MakeEvent(1)));
  REQUIRE_OK(k.AccumulateSilence({6, 8}));
  REQUIRE_CODE(k.AccumulateSilence({1, 6}), absl::StatusCode::kInvalidArgument);
  REQUIRE(k.ValueAt(1) == TickValue::kQ);  // not applied in part
  REQUIRE_CODE(k.AccumulateData(5, MakeEvent(2)), absl::StatusCode::kInvalidArgument);
  REQUIRE_CODE(k.AccumulateData(7, MakeEvent(2)), absl::StatusCode::kInvalidArgument);
  REQUIRE_OK(k.AccumulateData(5, MakeEvent(1)));  // the same event again is a duplicate
  REQUIRE_OK(k.AccumulateLost({1, 8}));
  REQUIRE_CODE(k.AccumulateData(5, MakeEvent(1)), absl::StatusCode::kFailedPrecondition);
  REQUIRE_CODE(k.AccumulateSilence({8, 9}), absl::StatusCode::kFailedPrecondition);
  REQUIRE(k.ValueAt(9) == TickValue::kQ);
}

TEST_CASE("malformed spans are rejected", "[knowledge]") {
  KnowledgeStream k;
  REQUIRE_CODE(k.AccumulateSilence({0, 3}), absl::StatusCode::kInvalidArgument);
  REQUIRE_CODE(k.AccumulateSilence({5, 3}), absl::StatusCode::kInvalidArgument);
  REQUIRE_CODE(k.Accumulate({{3, 4}, TickValue::kD, MakeEvent(1)}),
               absl::StatusCode::kInvalidArgument);
  REQUIRE_CODE(k.AccumulateData(3, nullptr), absl::StatusCode::kInvalidArgument);
}

TEST_CASE("knowledge reaches the last tick", "[knowledge]") {
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateSilence({10, kMaxTick}));
  REQUIRE(k.DoubtHorizon(9) == kMaxTick);
  REQUIRE(k.DoubtHorizon(kMaxTick) == kMaxTick);
  REQUIRE(k.QRanges({1, kMaxTick}) == std::vector<TickRange>{{1, 9}});
  REQUIRE_OK(k.AccumulateData(5, MakeEvent(1)));
  REQUIRE_OK(k.AccumulateLost({1, kMaxTick}));
  REQUIRE(k.LPrefix() == kMaxTick);
  REQUIRE(k.span_count() == 1);
}

TEST_CASE("forgetting a prefix makes it Q again and keeps the rest", "[knowledge]") {
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateLost({1, 3}));
  REQUIRE_OK(k.AccumulateSilence({4, 6}));
  REQUIRE_OK(k.AccumulateData(7, MakeEvent(7)));
  k.Forget(5);
  REQUIRE(k.ValueAt(1) == TickValue::kQ);
  REQUIRE(k.SpanAt(1).range == TickRange{1, 5});
  REQUIRE(k.ValueAt(6) == TickValue::kS);
  REQUIRE(k.ValueAt(7) == TickValue::kD);
  REQUIRE_OK(k.AccumulateData(2, MakeEvent(2)));  // may be learned again
  k.Forget(6);
  REQUIRE(k.SpanAt(3).range == TickRange{1, 6});
  k.Forget(kMaxTick);
  REQUIRE(k.span_count() == 1);
  REQUIRE(k.ValueAt(7) == TickValue::kQ);
}

TEST_CASE("Q ranges are clipped to the window and capped", "[knowledge]") {
  KnowledgeStream k;
  REQUIRE_OK(k.AccumulateSilence({3, 4}));
  REQUIRE_OK(k.AccumulateSilence({8, 9}));
  REQUIRE(k.QRanges({2, 10}) == std::vector<TickRange>{{2, 2}, {5, 7}, {10, 10}});
  REQUIRE(k.QRanges({2, 10}, 2) == std::vector<TickRange>{{2, 2}, {5, 7}});
}

// The naive model: one value (and event id) per tick over a small domain; ticks above it stay Q.
constexpr Tick kDomain = 300;

struct Model {
  std::vector<TickValue> value = std::vector<TickValue>(kDomain + 1, TickValue::kQ);
  std::vector<int> event = std::vector<int>(kDomain + 1, -1);

  absl::StatusCode Apply(TickRange r, TickValue v, int id) {
    for (Tick t = r.first; t <= r.last; ++t) {
      const TickValue have = value[t];
      if (have == v && (v != TickValue::kD || event[t] == id)) continue;
      if (have == TickValue::kQ) continue;
      if (have == TickValue::kL) return absl::StatusCode::kFailedPrecondition;
      if (v != TickValue::kL) return absl::StatusCode::kInvalidArgument;
    }
    for (Tick t = r.first; t <= r.last; ++t) {
      if (value[t] == TickValue::kL) continue;
      value[t] = v;
      event[t] = v == TickValue::kD ? id : -1;
    }
    return absl::StatusCode::kOk;
  }
};

void CheckAgainstModel(const KnowledgeStream& k, const Model& m) {
  // Every tick's value, D events, and maximal coalescing of equal non-D neighbours.
  Tick expected_first = 1;
  k.ForEachSpan({1, kDomain}, [&](const KnowledgeSpan& s) {
    REQUIRE(s.range.first == expected_first);
    for (Tick t = s.range.first; t <= s.range.last; ++t) REQUIRE(m.value[t] == s.value);
    if (s.value == TickValue::kD) {
      REQUIRE(s.range.first == s.range.last);
      REQUIRE(std::get<int64_t>(*s.event->Find("id")) == m.event[s.range.first]);
    } else if (s.range.first > 1) {
      REQUIRE(m.value[s.range.first - 1] != s.value);
    }
    expected_first = s.range.last + 1;
    return true;
  });
  REQUIRE(k.ValueAt(kDomain + 1) == TickValue::kQ);
  // LPrefix.
  Tick l = 0;
  while (l < kDomain && m.value[l + 1] == TickValue::kL) ++l;
  REQUIRE(k.LPrefix() == l);
}

TEST_CASE("knowledge stream matches a per-tick model over random operations",
          "[knowledge][property]") {
  int operations = 0;
  for (uint64_t seed : testing::Seeds(1000, 100)) {
    INFO("seed " << seed << " (rerun with GRYPH_SEED=" << seed << ")");
    Rng rng(seed);
    KnowledgeStream k;
    Model m;
    for (int step = 0; step < 1200; ++step, ++operations) {
      const Tick a = rng.Range(1, kDomain);
      const Tick b = std::min(kDomain, a + rng.Uniform(rng.OneIn(4) ? 60 : 6));
      const uint64_t op = rng.Uniform(10);
      if (op < 4) {
        REQUIRE(k.AccumulateSilence({a, b}).code() == m.Apply({a, b}, TickValue::kS, -1));
      } else if (op < 7) {
        const int id = static_cast<int>(rng.Uniform(3));  // repeats, and sometimes conflicts
        REQUIRE(k.AccumulateData(a, MakeEvent(id)).code() == m.Apply({a, a}, TickValue::kD, id));
      } else if (op < 8) {
        // Release a prefix, as a pubend does, or an arbitrary range.
        const Tick first = rng.OneIn(2) ? 1 : a;
        REQUIRE(k.AccumulateLost({first, b}).code() == m.Apply({first, b}, TickValue::kL, -1));
      } else {
        // Queries: doubt horizon and Q ranges from a random point.
        const Tick from = rng.Uniform(kDomain);
        Tick h = from;
        while (h < kDomain && m.value[h + 1] != TickValue::kQ) ++h;
        REQUIRE(k.DoubtHorizon(from) == h);
        std::vector<TickRange> want;
        for (Tick t = a; t <= b; ++t) {
          if (m.value[t] != TickValue::kQ) continue;
          if (!want.empty() && want.back().last == t - 1) {
            want.back().last = t;
          } else {
            want.push_back({t, t});
          }
        }
        REQUIRE(k.QRanges({a, b}) == want);
        std::vector<Tick> data;
        k.ForEachData({a, b}, [&](Tick t, const EventRef&) {
          data.push_back(t);
          return true;
        });
        std::vector<Tick> want_data;
        for (Tick t = a; t <= b; ++t) {
          if (m.value[t] == TickValue::kD) want_data.push_back(t);
        }
        REQUIRE(data == want_data);
        // A cursor answers as SpanAt does: mostly small steps forward, sometimes far or back.
        KnowledgeStream::Cursor cursor(k);
        Tick t = a;
        for (int i = 0; i < 20; ++i) {
          const KnowledgeSpan got = cursor.SpanAt(t);
          const KnowledgeSpan want_span = k.SpanAt(t);
          REQUIRE(got.range == want_span.range);
          REQUIRE(got.value == want_span.value);
          REQUIRE(got.event == want_span.event);
          t = rng.OneIn(5) ? rng.Range(1, kDomain + 5) : std::min(kDomain + 5, t + rng.Uniform(8));
        }
      }
      CheckAgainstModel(k, m);
    }
  }
  REQUIRE(operations >= 100000);
}

}  // namespace
}  // namespace gryph
