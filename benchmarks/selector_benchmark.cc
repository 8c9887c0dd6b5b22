// Micro-benchmarks for selectors and topic filters: parsing, and evaluation of typical shapes.
//
//   build/benchmarks/selector_benchmark --benchmark_format=json
//
// Evaluation figures are per event and include attribute lookup (a binary search over the event's
// sorted attributes). State the machine and build type with any figure you publish.
//
//   BM_Parse/0, BM_Decode/0   a match_ranges selector (five BETWEEN conjuncts), parsed from its
//                             text and decoded from Selector::Encode (BM_Parse/1, BM_Decode/1:
//                             the conjunction of IN, arithmetic, LIKE and NOT of BM_ParseSelector)
//
// The worst cases (docs/benchmarks-history.md, "Selector worst cases"):
//   BM_EvaluateLikeLongSuffix/N, BM_EvaluateLikeLongInfix/N
//       `s LIKE '%aa...ab'` and `s LIKE '%aa...ab%'`, a literal of N/2 bytes, against N bytes of
//       'a': every position of the text starts a near match of the literal
//   BM_ParseDeepParens, BM_ParseDeepParensNoLengthLimit
//       a megabyte of `(`: refused by the length limit, and without it, at the depth limit

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gryph/event.h"
#include "gryph/selector.h"
#include "gryph/topic_filter.h"

namespace gryph {
namespace {

Event Order() {
  Event e;
  e.SetTopic("orders/us/IBM")
      .SetString("symbol", "IBM")
      .SetInt64("qty", 1500)
      .SetDouble("price", 131.25)
      .SetString("region", "us-east-1")
      .SetBool("urgent", true)
      .SetString("trader", "alice")
      .SetInt64("account", 77312);
  return e;
}

Selector MustParse(absl::string_view text, const SelectorOptions& options = SelectorOptions()) {
  auto s = Selector::Parse(text, options);
  if (!s.ok()) std::abort();
  return *std::move(s);
}

void BM_ParseSelector(benchmark::State& state) {
  const std::string text =
      "symbol IN ('IBM', 'MSFT', 'AAPL') AND qty * price BETWEEN 1000 AND 1e6 AND region LIKE "
      "'us-%' AND NOT urgent";
  for (auto _ : state) {
    auto s = Selector::Parse(text);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_ParseSelector);

// The match_ranges workload's shape (benchmarks/matcher_workloads.cc): five BETWEEN conjuncts.
constexpr absl::string_view kRanges =
    "a3 BETWEEN 120345 AND 370345 AND a7 BETWEEN 5012 AND 255012 AND a11 BETWEEN 700000 AND "
    "950000 AND a14 BETWEEN 31337 AND 281337 AND a19 BETWEEN 400001 AND 650001";

// Parse and Decode of the same selectors: the typical conjunction above and the ranges.
void BM_Parse(benchmark::State& state) {
  const std::string text = state.range(0) == 0
                               ? std::string(kRanges)
                               : "symbol IN ('IBM', 'MSFT', 'AAPL') AND qty * price BETWEEN 1000 "
                                 "AND 1e6 AND region LIKE 'us-%' AND NOT urgent";
  for (auto _ : state) {
    auto s = Selector::Parse(text);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_Parse)->Arg(0)->Arg(1);

void BM_Decode(benchmark::State& state) {
  const std::string text = state.range(0) == 0
                               ? std::string(kRanges)
                               : "symbol IN ('IBM', 'MSFT', 'AAPL') AND qty * price BETWEEN 1000 "
                                 "AND 1e6 AND region LIKE 'us-%' AND NOT urgent";
  const std::string bytes = MustParse(text).Encode();
  for (auto _ : state) {
    auto s = Selector::Decode(bytes);
    benchmark::DoNotOptimize(s);
  }
  state.counters["encoded_bytes"] = static_cast<double>(bytes.size());
}
BENCHMARK(BM_Decode)->Arg(0)->Arg(1);

void Evaluate(benchmark::State& state, absl::string_view text) {
  const Selector s = MustParse(text);
  const Event e = Order();
  for (auto _ : state) benchmark::DoNotOptimize(s.Evaluate(e));
}

void BM_EvaluateStringEquality(benchmark::State& state) { Evaluate(state, "symbol = 'IBM'"); }
BENCHMARK(BM_EvaluateStringEquality);

void BM_EvaluateNumericRange(benchmark::State& state) {
  Evaluate(state, "qty > 1000 AND price <= 200.5");
}
BENCHMARK(BM_EvaluateNumericRange);

void BM_EvaluateTypicalConjunction(benchmark::State& state) {
  Evaluate(state,
           "symbol IN ('IBM', 'MSFT', 'AAPL') AND qty * price BETWEEN 1000 AND 1e6 AND region "
           "LIKE 'us-%' AND NOT urgent = FALSE");
}
BENCHMARK(BM_EvaluateTypicalConjunction);

void BM_EvaluateLike(benchmark::State& state) { Evaluate(state, "region LIKE '%east%1'"); }
BENCHMARK(BM_EvaluateLike);

SelectorOptions NoLengthLimit() {
  SelectorOptions options;
  options.max_length = SIZE_MAX;
  return options;
}

// `s LIKE 'prefix literal suffix'` with a literal of state.range(0) / 2 bytes, 'aa...ab',
// against state.range(0) bytes of 'a'; never matches.
void LikeLongLiteral(benchmark::State& state, absl::string_view prefix, absl::string_view suffix) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::string literal = std::string(n / 2 - 1, 'a') + "b";
  const Selector s =
      MustParse(absl::StrCat("s LIKE '", prefix, literal, suffix, "'"), NoLengthLimit());
  Event e;
  e.SetString("s", std::string(n, 'a'));
  for (auto _ : state) {
    if (s.Evaluate(e) != Truth::kFalse) std::abort();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_EvaluateLikeLongSuffix(benchmark::State& state) { LikeLongLiteral(state, "%", ""); }
BENCHMARK(BM_EvaluateLikeLongSuffix)
    ->Arg(1 << 10)
    ->Arg(16 << 10)
    ->Arg(256 << 10)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMicrosecond);

void BM_EvaluateLikeLongInfix(benchmark::State& state) { LikeLongLiteral(state, "%", "%"); }
BENCHMARK(BM_EvaluateLikeLongInfix)
    ->Arg(1 << 10)
    ->Arg(16 << 10)
    ->Arg(256 << 10)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMicrosecond);

void ParseDeepParens(benchmark::State& state, const SelectorOptions& options) {
  const std::string text(size_t{1} << 20, '(');
  for (auto _ : state) {
    auto s = Selector::Parse(text, options);
    if (s.ok()) std::abort();
    benchmark::DoNotOptimize(s);
  }
}

void BM_ParseDeepParens(benchmark::State& state) { ParseDeepParens(state, SelectorOptions()); }
BENCHMARK(BM_ParseDeepParens)->Unit(benchmark::kMicrosecond);

void BM_ParseDeepParensNoLengthLimit(benchmark::State& state) {
  ParseDeepParens(state, NoLengthLimit());
}
BENCHMARK(BM_ParseDeepParensNoLengthLimit)->Unit(benchmark::kMicrosecond);

void BM_EvaluateStringIn(benchmark::State& state) {
  std::string text = "trader IN ('t0'";
  for (int64_t i = 1; i < state.range(0); ++i) absl::StrAppend(&text, ", 't", i, "'");
  absl::StrAppend(&text, ", 'alice')");
  Evaluate(state, text);
}
BENCHMARK(BM_EvaluateStringIn)->Arg(4)->Arg(64)->Arg(4096);

void BM_TopicFilterMatch(benchmark::State& state) {
  auto f = TopicFilter::Parse("orders/+/#");
  if (!f.ok()) std::abort();
  const std::string topic = "orders/us/IBM";
  for (auto _ : state) benchmark::DoNotOptimize(f->Matches(topic));
}
BENCHMARK(BM_TopicFilterMatch);

}  // namespace
}  // namespace gryph

BENCHMARK_MAIN();
