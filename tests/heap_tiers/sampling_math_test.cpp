// The heap profiler's own ln and e^x - 1 (src/heap/sampling_math.hpp), which keep the
// drop-in library off libm, against glibc's over the arguments the profiler passes:
// ln u for u in (0, 1] (53-bit uniforms), and e^(-n/R) - 1 for block sizes n from 1 byte
// to far past the sampling rate R.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "heap/sampling_math.hpp"

namespace {

using mempool::detail::sampling_expm1;
using mempool::detail::sampling_log;

double relative_error(double got, double want) {
  return want == 0.0 ? std::fabs(got) : std::fabs((got - want) / want);
}

TEST(SamplingMath, LogMatchesLibmOverTheUniformsTheProfilerDraws) {
  EXPECT_EQ(sampling_log(1.0), 0.0);
  EXPECT_LT(relative_error(sampling_log(0x1p-53), std::log(0x1p-53)), 1e-15);
  // Both sides of each power of two, and a spread of values between.
  for (int e = -53; e <= 0; ++e) {
    for (const double m : {1.0, 1.0 + 0x1p-52, 1.2, 1.41421356, 1.41421357, 1.5, 1.9999999}) {
      const double u = std::ldexp(m, e) / 2.0;
      ASSERT_LT(relative_error(sampling_log(u), std::log(u)), 1e-14) << u;
    }
  }
  std::uint64_t x = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < 100000; ++i) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    const double u = static_cast<double>(((x * 0x2545f4914f6cdd1du) >> 11) + 1) * 0x1p-53;
    ASSERT_LT(relative_error(sampling_log(u), std::log(u)), 1e-14) << u;
  }
  // Values above 1 too (not the profiler's, but the function's domain).
  EXPECT_LT(relative_error(sampling_log(10.0), std::log(10.0)), 1e-15);
  EXPECT_LT(relative_error(sampling_log(1e300), std::log(1e300)), 1e-15);
}

TEST(SamplingMath, Expm1MatchesLibmFromTinyBlocksToHugeOnes) {
  EXPECT_EQ(sampling_expm1(0.0), 0.0);
  // -n/R: n from 1 byte to 2^40, R from 1 byte to 2^30 (MEMPOOL_HEAP_PROFILE_RATE).
  for (int n = 0; n <= 40; ++n) {
    for (int r = 0; r <= 30; ++r) {
      for (const double scale : {1.0, 1.37, 1.9}) {
        const double arg = -std::ldexp(scale, n - r);
        ASSERT_LT(relative_error(sampling_expm1(arg), std::expm1(arg)), 1e-14) << arg;
      }
    }
  }
  // Where e^x - 1 computed plainly loses every digit, the series keeps them.
  EXPECT_LT(relative_error(sampling_expm1(-1e-12), std::expm1(-1e-12)), 1e-15);
  EXPECT_LT(relative_error(sampling_expm1(-0.4999), std::expm1(-0.4999)), 1e-15);
  EXPECT_LT(relative_error(sampling_expm1(-0.5), std::expm1(-0.5)), 1e-15);
  EXPECT_LT(relative_error(sampling_expm1(3.0), std::expm1(3.0)), 1e-14);
  EXPECT_EQ(sampling_expm1(-1000.0), -1.0);
}

}  // namespace
