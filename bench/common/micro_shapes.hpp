// The foundation issue's micro workloads, shared by pools_benchmark and
// mempool-bench's micro: a 24-byte object and the sizes of Bulk and Churn.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mempool_bench {

struct Obj {
  std::uint64_t a, b, c;
};
static_assert(sizeof(Obj) == 24);

inline constexpr std::size_t kBulk = 10'000;      // allocations, then as many frees
inline constexpr std::size_t kChurnLive = 5'000;  // objects kept alive
inline constexpr std::size_t kChurnStep = 100;    // replaced per iteration, oldest first
static_assert(kChurnLive % kChurnStep == 0);

}  // namespace mempool_bench
