// Latency percentiles without sorting every sample: a log-linear histogram in
// the manner of HdrHistogram. Values below 2^kSubBits nanoseconds have a bucket
// each; above, every power of two is split into 2^(kSubBits - 1) buckets, so a
// percentile is off by less than 1 / 2^(kSubBits - 1) of its value (3.2% with
// kSubBits = 6). Recording is one count increment; histograms of several threads
// merge by adding counts.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace mempool_bench {

class LatencyHistogram {
 public:
  static constexpr unsigned kSubBits = 6;
  static constexpr std::uint64_t kLinearLimit = std::uint64_t{1} << kSubBits;  // 64 ns
  static constexpr unsigned kHalf = 1u << (kSubBits - 1);
  static constexpr std::size_t kBuckets = kLinearLimit + (64 - kSubBits) * kHalf;

  void record(std::uint64_t ns) noexcept {
    ++counts_[index(ns)];
    ++count_;
    sum_ += ns;
    if (ns > max_) max_ = ns;
    if (ns < min_) min_ = ns;
  }

  void merge(const LatencyHistogram& other) noexcept {
    for (std::size_t i = 0; i < kBuckets; ++i)
      counts_[i] += other.counts_[i];
    count_ += other.count_;
    sum_ += other.sum_;
    if (other.max_ > max_) max_ = other.max_;
    if (other.min_ < min_) min_ = other.min_;
  }

  [[nodiscard]] std::uint64_t count() const noexcept { return count_; }
  [[nodiscard]] std::uint64_t max() const noexcept { return max_; }
  [[nodiscard]] double mean() const noexcept {
    return count_ == 0 ? 0.0 : static_cast<double>(sum_) / static_cast<double>(count_);
  }

  // The value at quantile q (0 < q <= 1): the smallest recorded value v such that
  // at least q of the samples are <= v, to the histogram's resolution (the
  // middle of its bucket, never past the extremes seen). 0 when empty.
  [[nodiscard]] std::uint64_t percentile(double q) const noexcept {
    if (count_ == 0) return 0;
    auto rank = static_cast<std::uint64_t>(q * static_cast<double>(count_) + 0.9999999);
    if (rank < 1) rank = 1;
    if (rank > count_) rank = count_;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        const std::uint64_t mid = lowest(i) + (width(i) - 1) / 2;
        return mid > max_ ? max_ : (mid < min_ ? min_ : mid);
      }
    }
    return max_;
  }

  // Bucket arithmetic, public for the tests.
  static constexpr std::size_t index(std::uint64_t v) noexcept {
    if (v < kLinearLimit) return static_cast<std::size_t>(v);
    const unsigned exponent = 63 - static_cast<unsigned>(std::countl_zero(v));  // >= kSubBits
    const unsigned shift = exponent - (kSubBits - 1);
    const auto sub = static_cast<std::size_t>((v >> shift) - kHalf);  // 0 .. kHalf - 1
    return kLinearLimit + (exponent - kSubBits) * kHalf + sub;
  }
  static constexpr std::uint64_t lowest(std::size_t i) noexcept {
    if (i < kLinearLimit) return i;
    const std::size_t k = i - kLinearLimit;
    const unsigned exponent = static_cast<unsigned>(k / kHalf) + kSubBits;
    const unsigned shift = exponent - (kSubBits - 1);
    return (kHalf + k % kHalf) << shift;
  }
  static constexpr std::uint64_t width(std::size_t i) noexcept {
    if (i < kLinearLimit) return 1;
    const unsigned exponent = static_cast<unsigned>((i - kLinearLimit) / kHalf) + kSubBits;
    return std::uint64_t{1} << (exponent - (kSubBits - 1));
  }

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
  std::uint64_t max_ = 0;
  std::uint64_t min_ = UINT64_MAX;
};

}  // namespace mempool_bench
