// The latency histogram against exact percentiles of known data.
#include "latency_histogram.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace mempool_bench {
namespace {

// The exact value at quantile q: the smallest sample with at least q of all at
// or below it.
std::uint64_t exact(std::vector<std::uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::max<std::size_t>(rank, 1) - 1];
}

void expect_close(const std::vector<std::uint64_t>& samples) {
  LatencyHistogram h;
  for (std::uint64_t s : samples)
    h.record(s);
  for (double q : {0.5, 0.9, 0.95, 0.99, 0.999, 1.0}) {
    const double want = static_cast<double>(exact(samples, q));
    const double got = static_cast<double>(h.percentile(q));
    // Half a bucket: 1/64 of the value above 64 ns, exact below.
    EXPECT_LE(std::abs(got - want), want / 64 + 0.5) << "q " << q;
  }
  EXPECT_EQ(h.count(), samples.size());
  EXPECT_EQ(h.max(), *std::max_element(samples.begin(), samples.end()));
}

TEST(LatencyHistogram, UniformSamples) {
  std::vector<std::uint64_t> v;
  for (std::uint64_t i = 1; i <= 100000; ++i)
    v.push_back(i);
  expect_close(v);
}

TEST(LatencyHistogram, HeavyTailedSamples) {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> d(5.0, 1.5);  // median ~150 ns, tail to milliseconds
  std::vector<std::uint64_t> v;
  for (int i = 0; i < 200000; ++i)
    v.push_back(static_cast<std::uint64_t>(d(rng)) + 1);
  expect_close(v);
}

TEST(LatencyHistogram, SmallValuesAreExact) {
  LatencyHistogram h;
  for (std::uint64_t v : {3, 3, 7, 20, 63})
    h.record(v);
  EXPECT_EQ(h.percentile(0.2), 3u);
  EXPECT_EQ(h.percentile(0.6), 7u);
  EXPECT_EQ(h.percentile(0.8), 20u);
  EXPECT_EQ(h.percentile(1.0), 63u);
  EXPECT_DOUBLE_EQ(h.mean(), (3 + 3 + 7 + 20 + 63) / 5.0);
}

TEST(LatencyHistogram, MergeEqualsRecordingEverything) {
  LatencyHistogram a, b, both;
  for (std::uint64_t i = 0; i < 5000; ++i) {
    a.record(i * 7);
    both.record(i * 7);
    b.record(i * 1000 + 5);
    both.record(i * 1000 + 5);
  }
  a.merge(b);
  for (double q : {0.1, 0.5, 0.99, 1.0})
    EXPECT_EQ(a.percentile(q), both.percentile(q));
  EXPECT_EQ(a.count(), both.count());
  EXPECT_EQ(a.max(), both.max());
}

TEST(LatencyHistogram, EmptyAnswersZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.percentile(0.99), 0u);
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
}

TEST(LatencyHistogram, BucketsTileTheRange) {
  // Every bucket starts where the previous one ends, up to 2^63.
  for (std::size_t i = 1; i < LatencyHistogram::kBuckets; ++i)
    ASSERT_EQ(LatencyHistogram::lowest(i),
              LatencyHistogram::lowest(i - 1) + LatencyHistogram::width(i - 1))
        << i;
  for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{63}, std::uint64_t{64},
                          std::uint64_t{1000}, std::uint64_t{1} << 40, UINT64_MAX}) {
    const std::size_t i = LatencyHistogram::index(v);
    ASSERT_LT(i, LatencyHistogram::kBuckets);
    EXPECT_GE(v, LatencyHistogram::lowest(i));
    EXPECT_LE(v - LatencyHistogram::lowest(i), LatencyHistogram::width(i) - 1);
  }
}

}  // namespace
}  // namespace mempool_bench
