#include "programs/metrics.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gryph::programs {

std::string MetricsText::EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void MetricsText::Counter(const std::string& name, absl::string_view help, double value,
                          Labels labels) {
  Add(name, help, "counter", value, labels);
}

void MetricsText::Gauge(const std::string& name, absl::string_view help, double value,
                        Labels labels) {
  Add(name, help, "gauge", value, labels);
}

void MetricsText::Add(const std::string& name, absl::string_view help, const char* type,
                      double value, const Labels& labels) {
  AddSample(name, help, type, name, value, labels);
}

void MetricsText::Histogram(const std::string& name, absl::string_view help,
                            const LatencyHistogram& h, Labels labels) {
  // Every fourth bucket ends at a power of two of microseconds: those are the `le` bounds.
  uint64_t cumulative = 0;
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
    cumulative += h.bucket_count(i);
    const bool last = i + 1 == LatencyHistogram::kBuckets;
    if (!last && (i < 3 || i % 4 != 3)) continue;
    Labels with_le = labels;
    with_le.emplace_back(
        "le",
        last ? std::string("+Inf")
             : absl::StrFormat("%g", absl::ToDoubleSeconds(LatencyHistogram::BucketUpperBound(i))));
    AddSample(name, help, "histogram", name + "_bucket", static_cast<double>(cumulative), with_le);
  }
  AddSample(name, help, "histogram", name + "_sum", absl::ToDoubleSeconds(h.sum()), labels);
  AddSample(name, help, "histogram", name + "_count", static_cast<double>(h.count()), labels);
}

void MetricsText::AddSample(const std::string& family, absl::string_view help, const char* type,
                            const std::string& sample_name, double value, const Labels& labels) {
  Family& f = families_[family];
  if (f.samples.empty()) {
    f.help = std::string(help);
    f.type = type;
  }
  std::string sample = sample_name;
  if (!labels.empty()) {
    sample += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      absl::StrAppend(&sample, i == 0 ? "" : ",", labels[i].first, "=\"",
                      EscapeLabelValue(labels[i].second), "\"");
    }
    sample += '}';
  }
  // Counts exactly (a double's %g would round a large counter), anything else in full.
  if (value == std::trunc(value) && std::fabs(value) < 9.0e15) {
    absl::StrAppend(&sample, " ", static_cast<int64_t>(value));
  } else {
    absl::StrAppend(&sample, " ", absl::StrFormat("%.17g", value));
  }
  f.samples.push_back(std::move(sample));
}

std::string MetricsText::Text() const {
  std::string out;
  for (const auto& [name, f] : families_) {
    absl::StrAppend(&out, "# HELP ", name, " ", f.help, "\n# TYPE ", name, " ", f.type, "\n");
    for (const std::string& s : f.samples) absl::StrAppend(&out, s, "\n");
  }
  return out;
}

}  // namespace gryph::programs
