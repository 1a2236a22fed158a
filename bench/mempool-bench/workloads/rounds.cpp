// rounds: the bucketed-pool workload (MemoryBucket's, and issue 3's). T threads,
// each R rounds of K iterations; an iteration of "small" allocates objects of
// 4, 20, 40 and 80 bytes in turn, then frees the four with their sizes; one of
// "large" allocates and frees one object of 1 KiB. Total wall time, from the
// threads' common start to the last one's end. R = 100, K = 10,000 (--quick:
// 10 x 1,000), after one untimed round per thread.
#include <array>

#include <numeric>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::array<std::size_t, 4> kSmall = {4, 20, 40, 80};
constexpr std::size_t kLarge = 1024;

// One object of n bytes: allocated, written (first and last byte), escaped.
template <class A>
[[gnu::always_inline]] inline void* make(std::size_t n, unsigned char v) {
  void* p = A::allocate(n);
  if (p != nullptr) touch(p, n, v);
  return p;
}

template <class A>
nlohmann::json rounds(const RunSpec& spec, const std::vector<std::size_t>& sizes,
                      const std::string& case_text) {
  const std::size_t rounds = spec.quick ? 10 : 100;
  const std::size_t iterations = spec.quick ? 1000 : 10000;
  std::vector<std::uint64_t> failed(static_cast<std::size_t>(spec.threads), 0);
  // One round of iterations; the first, untimed, warms each thread up.
  auto round = [&](std::size_t thread, std::size_t count) {
    std::array<void*, 4> p{};
    for (std::size_t i = 0; i < count; ++i) {
      const auto v = static_cast<unsigned char>(i);
      for (std::size_t k = 0; k < sizes.size(); ++k)
        p[k] = make<A>(sizes[k], v);
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        if (p[k] == nullptr) {
          ++failed[thread];
        } else {
          A::deallocate(p[k], sizes[k]);
        }
      }
    }
  };
  const Timing t = run_threads(
      spec.threads, [&](int thread) { round(static_cast<std::size_t>(thread), iterations); },
      [&](int thread) {
        for (std::size_t r = 0; r < rounds; ++r)
          round(static_cast<std::size_t>(thread), iterations);
      });
  const std::uint64_t ops = static_cast<std::uint64_t>(spec.threads) * rounds * iterations;
  nlohmann::json metrics = timing_metrics(t, ops, spec.threads);  // an op: one iteration
  metrics["failed_allocations"] = std::accumulate(failed.begin(), failed.end(), std::uint64_t{0});
  return {{"case", case_text},
          {"primary", {{"metric", "wall_s"}, {"better", "lower"}}},
          {"params", {{"rounds", rounds}, {"iterations", iterations}, {"sizes", sizes}}},
          {"metrics", metrics}};
}

}  // namespace

// --size-dist=mixed (or the default "small" case) runs the small set; otherwise
// one object of --size bytes (default 1 KiB, "large").
nlohmann::json run_rounds(const RunSpec& given) {
  RunSpec spec = given;
  std::vector<std::size_t> sizes;
  std::string text;
  if (spec.mixed) {
    sizes.assign(kSmall.begin(), kSmall.end());
    spec.size = kSmall.back();
    text = "small (4, 20, 40, 80 B)";
  } else {
    if (spec.size == 0) spec.size = kLarge;
    sizes = {spec.size};
    text = spec.size == kLarge ? "large (1 KiB)" : bytes_text(spec.size);
  }
  text += ", " + threads_text(spec.threads);
  return run_or_skip(spec, text, [&]<class A>() { return rounds<A>(spec, sizes, text); });
}

}  // namespace mempool_bench
