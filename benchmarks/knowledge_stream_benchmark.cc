// Micro-benchmarks of KnowledgeStream's hot operations.

#include <benchmark/benchmark.h>

#include "gryph/broker/knowledge_stream.h"

namespace gryph {
namespace {

EventRef SomeEvent() {
  Event e;
  e.SetInt64("quantity", 100);
  return MakeEventRef(std::move(e));
}

// Appending at the head of a long stream: S range then D, as a constream receives.
void BM_AccumulateInOrder(benchmark::State& state) {
  const EventRef event = SomeEvent();
  KnowledgeStream k;
  Tick t = 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(k.AccumulateSilence({t, t + 2}));
    benchmark::DoNotOptimize(k.AccumulateData(t + 3, event));
    t += 4;
  }
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(BM_AccumulateInOrder);

// The doubt horizon right after each update, as a delivering stream asks.
void BM_DoubtHorizonAfterUpdate(benchmark::State& state) {
  const EventRef event = SomeEvent();
  KnowledgeStream k;
  Tick t = 1;
  Tick delivered = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(k.AccumulateSilence({t, t + 2}));
    benchmark::DoNotOptimize(k.AccumulateData(t + 3, event));
    delivered = k.DoubtHorizon(delivered);
    t += 4;
  }
  benchmark::DoNotOptimize(delivered);
}
BENCHMARK(BM_DoubtHorizonAfterUpdate);

// Filling holes in a stream of 100,000 spans: the nack-repair pattern.
void BM_FillHoles(benchmark::State& state) {
  const EventRef event = SomeEvent();
  for (auto _ : state) {
    state.PauseTiming();
    KnowledgeStream k;
    for (Tick t = 1; t < 400'000; t += 4) benchmark::DoNotOptimize(k.AccumulateData(t, event));
    state.ResumeTiming();
    for (Tick t = 2; t < 400'000; t += 4) benchmark::DoNotOptimize(k.AccumulateSilence({t, t + 2}));
  }
  state.SetItemsProcessed(state.iterations() * 100'000);
}
BENCHMARK(BM_FillHoles)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gryph

BENCHMARK_MAIN();
