// LatencyHistogram: durations counted in buckets of a quarter octave, from 1 µs to about 18
// minutes — what a node's stats keep for publish → durable, deliver → ack and commit times.
//
// Recording is O(1) and allocation-free; a percentile is exact to within its bucket (at most 25%
// above the true value, never below it), which is what an operator's p50/p99/p99.9 needs. The
// buckets are fixed, so histograms from several nodes or intervals merge by adding counts, and
// they map onto Prometheus histogram buckets (`le`) directly.
//
// Thread-compatible: the owner of the stats it belongs to guards it.

#ifndef GRYPH_LATENCY_HISTOGRAM_H_
#define GRYPH_LATENCY_HISTOGRAM_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"

namespace gryph {

class LatencyHistogram {
 public:
  // Bucket i < 4 holds [i, i + 1) µs; above, each octave [2^e, 2^(e+1)) µs is split in four.
  // The last bucket also holds everything longer.
  static constexpr size_t kBuckets = 120;

  // Negative durations count as 0.
  void Record(absl::Duration d);
  void Merge(const LatencyHistogram& other);

  uint64_t count() const { return count_; }
  // The sum of the recorded durations, in whole microseconds each.
  absl::Duration sum() const { return absl::Microseconds(sum_us_); }
  // The upper bound of the bucket holding the sample of rank ceil(p/100 * count) (p in
  // [0, 100]); zero when empty.
  absl::Duration Percentile(double p) const;

  uint64_t bucket_count(size_t i) const { return counts_[i]; }
  // Bucket i holds durations below this (microsecond resolution); InfiniteDuration for the last.
  static absl::Duration BucketUpperBound(size_t i);
  static size_t BucketOf(absl::Duration d);

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  int64_t sum_us_ = 0;
};

}  // namespace gryph

#endif  // GRYPH_LATENCY_HISTOGRAM_H_
