// Metrics in the Prometheus text exposition format, for node_exporter's textfile collector.
//
// Why a file and not an HTTP /metrics endpoint: a broker then opens no port that must be
// secured (a scrape port on a broker host is one more thing an attacker reaches), links no HTTP
// server, and needs no scrape to be configured per process: node_exporter, already on most
// hosts, reads every *.prom file of its textfile directory on each scrape and serves them with
// the host's own metrics. The file is replaced atomically (written beside it, renamed), so a
// scrape never reads half of it. Its age is the freshness: node_exporter exports each file's
// mtime (node_textfile_mtime_seconds), which an alert can watch.
//
// Thread-compatible.

#ifndef GRYPH_PROGRAMS_METRICS_H_
#define GRYPH_PROGRAMS_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "gryph/latency_histogram.h"

namespace gryph::programs {

class MetricsText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // One sample of metric `name` (gryph_ and a snake_case name; counters end in _total).
  // `help` and the type are written once per name, before its first sample; samples of one
  // name are written together, in the order added.
  void Counter(const std::string& name, absl::string_view help, double value, Labels labels = {});
  void Gauge(const std::string& name, absl::string_view help, double value, Labels labels = {});
  // A histogram in seconds (`name` ends in _seconds): cumulative buckets at each power of two
  // of microseconds, _sum and _count.
  void Histogram(const std::string& name, absl::string_view help, const LatencyHistogram& h,
                 Labels labels = {});

  // The exposition: "# HELP", "# TYPE" and the samples of each metric, by name.
  std::string Text() const;

  // A label value with \, " and newline escaped, as the format requires.
  static std::string EscapeLabelValue(absl::string_view value);

 private:
  struct Family {
    std::string help;
    const char* type;
    std::vector<std::string> samples;  // "name{labels} value"
  };
  void Add(const std::string& name, absl::string_view help, const char* type, double value,
           const Labels& labels);
  // Appends one sample line of family `family` (type `type`), named `sample_name`.
  void AddSample(const std::string& family, absl::string_view help, const char* type,
                 const std::string& sample_name, double value, const Labels& labels);
  std::map<std::string, Family> families_;
};

}  // namespace gryph::programs

#endif  // GRYPH_PROGRAMS_METRICS_H_
