// Workloads for KnowledgeStream (see gryph_bench.cc for the list).

#include <chrono>
#include <random>
#include <vector>

#include "benchmarks/workload.h"
#include "gryph/broker/knowledge_stream.h"

namespace gryph::bench {
namespace {

constexpr Tick kStreamTicks = 1'000'000;

// The updates a subscriber-side stream receives for 1,000,000 ticks: every 4th tick is D, the
// ticks between are S ranges; `shuffle_window` > 1 delivers them out of order within windows
// (what nack repairs and multi-path delivery produce).
std::vector<KnowledgeSpan> MakeUpdates(size_t shuffle_window) {
  Event e;
  e.SetString("symbol", "IBM").SetInt64("quantity", 100).SetPayload(std::string(250, 'x'));
  const EventRef event = MakeEventRef(std::move(e));
  std::vector<KnowledgeSpan> updates;
  for (Tick t = 1; t + 3 <= kStreamTicks; t += 4) {
    updates.push_back(KnowledgeSpan::Silence({t, t + 2}));
    updates.push_back(KnowledgeSpan::Data(t + 3, event));
  }
  if (shuffle_window > 1) {
    std::mt19937_64 rng(42);
    for (size_t i = 0; i < updates.size(); i += shuffle_window) {
      const size_t end = std::min(updates.size(), i + shuffle_window);
      std::shuffle(updates.begin() + static_cast<ptrdiff_t>(i),
                   updates.begin() + static_cast<ptrdiff_t>(end), rng);
    }
  }
  return updates;
}

double UpdatesPerSecond(const std::vector<KnowledgeSpan>& updates) {
  KnowledgeStream k;
  const auto start = std::chrono::steady_clock::now();
  for (const KnowledgeSpan& s : updates) {
    if (!k.Accumulate(s).ok()) std::abort();
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(updates.size()) / secs;
}

}  // namespace

GRYPH_WORKLOAD(knowledge_update) {
  (void)ctx;
  for (size_t window : {size_t{1}, size_t{64}}) {
    const std::vector<KnowledgeSpan> updates = MakeUpdates(window);
    const double rate = MedianOf(5, [&] { return UpdatesPerSecond(updates); });
    Report("knowledge_update")
        .Add("ticks", static_cast<int64_t>(kStreamTicks))
        .Add("order", window == 1 ? "in_order" : "shuffled_64")
        .Add("updates_per_s", rate)
        .Print();
  }
}

}  // namespace gryph::bench
