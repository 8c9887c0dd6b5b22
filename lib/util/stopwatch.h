// Internal: a stopwatch on the steady clock, for timing the steps of a recovery (what an
// operator reads when a restart was slow), whatever clock the broker's options name.

#ifndef GRYPH_LIB_UTIL_STOPWATCH_H_
#define GRYPH_LIB_UTIL_STOPWATCH_H_

#include <chrono>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace gryph::internal {

class Stopwatch {
 public:
  Stopwatch() : last_(std::chrono::steady_clock::now()) {}

  // The time since construction or the previous Lap; starts the next lap.
  absl::Duration Lap() {
    const auto now = std::chrono::steady_clock::now();
    const absl::Duration lap = absl::FromChrono(now - last_);
    last_ = now;
    return lap;
  }

 private:
  std::chrono::steady_clock::time_point last_;
};

// "12.3 ms": milliseconds with one decimal, for log lines.
inline std::string FormatMillis(absl::Duration d) {
  return absl::StrCat(std::round(absl::ToDoubleMilliseconds(d) * 10) / 10, " ms");
}

}  // namespace gryph::internal

#endif  // GRYPH_LIB_UTIL_STOPWATCH_H_
