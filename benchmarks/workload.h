// The scenario driver's workloads (see gryph_bench.cc for the list and the flags).
//
// A workload is a function that runs one named scenario and prints its figures as JSON lines
// through a Report. Each workload file registers itself with GRYPH_WORKLOAD; the driver runs the
// ones named on its command line, in the order named.

#ifndef GRYPH_BENCHMARKS_WORKLOAD_H_
#define GRYPH_BENCHMARKS_WORKLOAD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"

namespace gryph::bench {

// One JSON object on one line: {"workload": "<name>", "key": value, ...}, plus the build type
// and machine so that every figure states where it came from.
class Report {
 public:
  explicit Report(std::string workload) : workload_(std::move(workload)) {}
  Report& Add(absl::string_view key, double value);
  Report& Add(absl::string_view key, int64_t value);
  Report& Add(absl::string_view key, absl::string_view value);
  // A JSON true or false (not an Add overload: a string literal would convert to bool).
  Report& AddBool(absl::string_view key, bool value);
  // Prints the line to stdout and flushes.
  void Print() const;

 private:
  std::string workload_;
  std::vector<std::pair<std::string, std::variant<double, int64_t, std::string, bool>>> fields_;
};

// Where a workload may write (a fresh directory, removed after the run) and how long it should
// aim to measure.
struct Context {
  std::string scratch_dir;
  double seconds = 2.0;  // target measuring time per figure
};

using WorkloadFn = std::function<void(const Context&)>;

std::map<std::string, WorkloadFn>& Registry();

struct Registrar {
  Registrar(const char* name, WorkloadFn fn) { Registry().emplace(name, std::move(fn)); }
};

// GRYPH_WORKLOAD(knowledge_update) { ... } defines and registers a workload; the body sees
// `const Context& ctx`.
#define GRYPH_WORKLOAD(name)                                                            \
  static void GryphWorkload_##name(const ::gryph::bench::Context& ctx);                 \
  static ::gryph::bench::Registrar gryph_registrar_##name(#name, GryphWorkload_##name); \
  static void GryphWorkload_##name(const ::gryph::bench::Context& ctx)

// Latency samples in microseconds; percentiles by nearest rank.
class Histogram {
 public:
  void Add(double micros) { samples_.push_back(micros); }
  // Room for n samples, so that Add never copies the samples while a run is measured.
  void Reserve(size_t n) { samples_.reserve(n); }
  double Percentile(double p);  // p in [0, 100]
  size_t count() const { return samples_.size(); }

 private:
  std::vector<double> samples_;
  bool sorted_ = false;
};

// The median of `runs` runs of `fn`, each returning a rate.
double MedianOf(int runs, const std::function<double()>& fn);

}  // namespace gryph::bench

#endif  // GRYPH_BENCHMARKS_WORKLOAD_H_
