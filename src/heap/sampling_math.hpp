// The two functions of libm that the heap profiler's sampling needs (heap_profiler.cpp:
// the next sample's distance, -ln(u) x R, and a sample's weight, 1 / (1 - e^(-n/R))),
// written here so that the drop-in library needs nothing but libc: libm alone is
// 320 KiB resident in every process that preloads it (docs/architecture.md, "The
// drop-in library"). Both agree with glibc's to within one part in 10^14 over the
// arguments the profiler passes (tests/heap_tiers/sampling_math_test.cpp).
#pragma once

#include <bit>
#include <cstdint>

namespace mempool::detail {

inline constexpr double kLn2Hi = 0x1.62e42fefa3800p-1;  // ln 2, split so that k * kLn2Hi is exact
inline constexpr double kLn2Lo = 0x1.ef35793c76730p-45;

// ln x for a normal x > 0: x = m 2^e with m in [1/sqrt 2, sqrt 2), and
// ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1) / (m + 1), |s| < 0.172;
// eleven terms leave an error under 10^-17.
inline double sampling_log(double x) noexcept {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  double m = std::bit_cast<double>((bits & 0x000fffffffffffffu) | 0x3ff0000000000000u);
  if (m > 1.4142135623730951) {
    m *= 0.5;
    ++e;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double series = 0.0;
  for (int k = 21; k >= 1; k -= 2)
    series = series * s2 + 1.0 / k;
  return (e * kLn2Hi + 2.0 * s * series) + e * kLn2Lo;
}

// y + y^2/2! + ... + y^17/17!, by Horner's rule; for |y| < 1/2 the rest is under 10^-20.
inline double exp_minus_one_series(double y) noexcept {
  double h = 1.0;
  for (int i = 17; i >= 2; --i)
    h = 1.0 + h * y / i;
  return y * h;
}

// e^x - 1 for x <= 709, accurate near 0 as well (the profiler's -n/R is tiny for small
// blocks): the series where |x| < 1/2, else e^x - 1 with e^x = 2^k e^r, |r| <= ln2 / 2.
inline double sampling_expm1(double x) noexcept {
  if (x < -40.0) return -1.0;  // e^x is below half an ulp of 1
  if (x > -0.5 && x < 0.5) return exp_minus_one_series(x);
  const long k = static_cast<long>(x * 1.4426950408889634 + (x < 0 ? -0.5 : 0.5));
  const double r = (x - static_cast<double>(k) * kLn2Hi) - static_cast<double>(k) * kLn2Lo;
  const double two_to_k = std::bit_cast<double>(static_cast<std::uint64_t>(1023 + k) << 52);
  return (1.0 + exp_minus_one_series(r)) * two_to_k - 1.0;
}

}  // namespace mempool::detail
