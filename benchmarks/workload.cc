#include "benchmarks/workload.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "fmt/format.h"

namespace gryph::bench {

std::map<std::string, WorkloadFn>& Registry() {
  static auto* registry = new std::map<std::string, WorkloadFn>();
  return *registry;
}

Report& Report::Add(absl::string_view key, double value) {
  fields_.emplace_back(std::string(key), value);
  return *this;
}
Report& Report::Add(absl::string_view key, int64_t value) {
  fields_.emplace_back(std::string(key), value);
  return *this;
}
Report& Report::Add(absl::string_view key, absl::string_view value) {
  fields_.emplace_back(std::string(key), std::string(value));
  return *this;
}
Report& Report::AddBool(absl::string_view key, bool value) {
  fields_.emplace_back(std::string(key), value);
  return *this;
}

namespace {
std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
}  // namespace

void Report::Print() const {
  std::string line = fmt::format("{{\"workload\": {}", JsonString(workload_));
  for (const auto& [key, value] : fields_) {
    line += fmt::format(", {}: ", JsonString(key));
    if (const double* d = std::get_if<double>(&value)) {
      line += std::isfinite(*d) ? fmt::format("{:.6g}", *d) : "null";
    } else if (const int64_t* i = std::get_if<int64_t>(&value)) {
      line += fmt::format("{}", *i);
    } else if (const bool* b = std::get_if<bool>(&value)) {
      line += *b ? "true" : "false";
    } else {
      line += JsonString(std::get<std::string>(value));
    }
  }
#ifdef NDEBUG
  constexpr const char* kBuild = "release";
#else
  constexpr const char* kBuild = "debug";
#endif
  line += fmt::format(", \"build\": \"{}\", \"cpus\": {}}}", kBuild, sysconf(_SC_NPROCESSORS_ONLN));
  std::puts(line.c_str());
  std::fflush(stdout);
}

double Histogram::Percentile(double p) {
  if (samples_.empty()) return 0;
  if (!sorted_) {
    std::sort(samples_.begin(), samples_.end());
    sorted_ = true;
  }
  const double rank = std::ceil(p / 100.0 * static_cast<double>(samples_.size()));
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return samples_[std::min(index, samples_.size() - 1)];
}

double MedianOf(int runs, const std::function<double()>& fn) {
  std::vector<double> rates;
  for (int i = 0; i < runs; ++i) rates.push_back(fn());
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace gryph::bench
