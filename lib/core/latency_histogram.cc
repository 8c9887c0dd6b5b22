#include "gryph/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace gryph {

size_t LatencyHistogram::BucketOf(absl::Duration d) {
  const int64_t us = absl::ToInt64Microseconds(d);
  if (us < 4) return us < 0 ? 0 : static_cast<size_t>(us);
  const auto v = static_cast<uint64_t>(us);
  const int e = std::bit_width(v) - 1;  // 2^e <= v < 2^(e+1), e >= 2
  const size_t sub = (v >> (e - 2)) & 3;
  return std::min(kBuckets - 1, static_cast<size_t>(4 * (e - 1)) + sub);
}

absl::Duration LatencyHistogram::BucketUpperBound(size_t i) {
  if (i >= kBuckets - 1) return absl::InfiniteDuration();
  if (i < 4) return absl::Microseconds(static_cast<int64_t>(i) + 1);
  const size_t e = i / 4 + 1;
  const size_t sub = i % 4;
  return absl::Microseconds(static_cast<int64_t>((5 + sub) << (e - 2)));
}

void LatencyHistogram::Record(absl::Duration d) {
  ++counts_[BucketOf(d)];
  ++count_;
  sum_us_ += std::max<int64_t>(0, absl::ToInt64Microseconds(d));
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_us_ += other.sum_us_;
}

absl::Duration LatencyHistogram::Percentile(double p) const {
  if (count_ == 0) return absl::ZeroDuration();
  const double clamped = std::clamp(p, 0.0, 100.0);
  const uint64_t rank = std::max<uint64_t>(
      1, static_cast<uint64_t>(std::ceil(clamped / 100.0 * static_cast<double>(count_))));
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) return BucketUpperBound(i);
  }
  return BucketUpperBound(kBuckets - 1);
}

}  // namespace gryph
