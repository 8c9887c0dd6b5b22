#include "gryph/latency_histogram.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "catch2/catch.hpp"

namespace gryph {
namespace {

TEST_CASE("latency buckets tile the durations without gaps or overlaps", "[histogram]") {
  absl::Duration lower = absl::ZeroDuration();
  for (size_t i = 0; i + 1 < LatencyHistogram::kBuckets; ++i) {
    const absl::Duration upper = LatencyHistogram::BucketUpperBound(i);
    REQUIRE(upper > lower);
    REQUIRE(LatencyHistogram::BucketOf(lower) == i);
    REQUIRE(LatencyHistogram::BucketOf(upper - absl::Microseconds(1)) == i);
    REQUIRE(LatencyHistogram::BucketOf(upper) == i + 1);
    // A quarter octave: the width is at most a quarter of the lower bound (above 4 µs).
    if (lower >= absl::Microseconds(4)) REQUIRE((upper - lower) * 4 <= lower);
    lower = upper;
  }
  REQUIRE(LatencyHistogram::BucketOf(absl::Hours(24)) == LatencyHistogram::kBuckets - 1);
  REQUIRE(LatencyHistogram::BucketOf(-absl::Seconds(1)) == 0);
}

TEST_CASE("latency percentiles lie in [true value, 1.25 x true value] against sorted samples",
          "[histogram]") {
  const uint32_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> micros(6.0, 2.0);  // ~400 µs, a long tail
  for (int round = 0; round < 20; ++round) {
    LatencyHistogram h;
    std::vector<int64_t> samples;
    const int n = 1 + static_cast<int>(rng() % 5000);
    for (int i = 0; i < n; ++i) {
      const auto us = static_cast<int64_t>(std::min(micros(rng), 1e9));
      samples.push_back(us);
      h.Record(absl::Microseconds(us));
    }
    std::sort(samples.begin(), samples.end());
    REQUIRE(h.count() == samples.size());
    int64_t sum = 0;
    for (int64_t s : samples) sum += s;
    REQUIRE(h.sum() == absl::Microseconds(sum));
    for (double p : {0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0}) {
      const size_t rank = std::max<size_t>(1, static_cast<size_t>(std::ceil(p / 100.0 * n)));
      const int64_t truth = samples[rank - 1];
      const int64_t got = absl::ToInt64Microseconds(h.Percentile(p));
      INFO("p" << p << " truth " << truth << " got " << got);
      REQUIRE(got > truth);  // an upper bound of the bucket: above every sample in it
      REQUIRE(static_cast<double>(got) <= std::max(1.25 * static_cast<double>(truth), truth + 1.0));
    }
  }
  REQUIRE(LatencyHistogram().Percentile(50) == absl::ZeroDuration());
}

TEST_CASE("latency histograms merge by adding their buckets", "[histogram]") {
  LatencyHistogram a;
  LatencyHistogram b;
  LatencyHistogram both;
  for (int us : {1, 7, 300, 5000}) {
    a.Record(absl::Microseconds(us));
    both.Record(absl::Microseconds(us));
  }
  for (int us : {2, 9000, 120'000}) {
    b.Record(absl::Microseconds(us));
    both.Record(absl::Microseconds(us));
  }
  a.Merge(b);
  REQUIRE(a.count() == both.count());
  REQUIRE(a.sum() == both.sum());
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
    REQUIRE(a.bucket_count(i) == both.bucket_count(i));
  }
}

}  // namespace
}  // namespace gryph
