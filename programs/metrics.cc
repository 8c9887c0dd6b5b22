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
  Family& f = families_[name];
  if (f.samples.empty()) {
    f.help = std::string(help);
    f.type = type;
  }
  std::string sample = name;
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
