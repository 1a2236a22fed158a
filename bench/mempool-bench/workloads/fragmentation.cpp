// fragmentation: what an allocator keeps resident for the bytes a program holds.
// One thread, in rounds: allocate a burst of 4096 blocks of mixed sizes (16 B to
// 64 KiB, every power of two equally likely: --size changes the largest), then
// free a random half of everything live, so every block survives each round with
// probability 1/2 (random lifetimes) and the holes left are of every size. Live
// bytes are capped at 128 MiB (a burst stops there). Every block is written
// once per 4 KiB page (it is used, so it is resident, as in a real program) with
// a byte of its own, checked before it is freed (corrupt_blocks: must be 0).
// The sizes and the frees come from fixed seeds: every allocator sees the same
// program. Primary: peak resident set / peak live bytes requested (the binary
// and libraries, a few MiB, are in both runs' resident set alike); then all is
// freed, and rss_end_kib says how much went back to the system.
#include <time.h>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::size_t kBurst = 4096;
constexpr std::size_t kLiveCap = std::size_t{128} << 20;
constexpr std::size_t kPage = 4096;

struct Block {
  unsigned char* p = nullptr;
  std::size_t n = 0;
  unsigned char mark = 0;
};

void fill(const Block& b) {
  for (std::size_t i = 0; i < b.n; i += kPage)
    b.p[i] = b.mark;
  touch(b.p, b.n, b.mark);
}

bool intact(const Block& b) {
  for (std::size_t i = 0; i < b.n; i += kPage)
    if (b.p[i] != b.mark) return false;
  return b.p[b.n - 1] == b.mark;
}

template <class A>
nlohmann::json rounds(const RunSpec& spec, std::size_t low, std::size_t rounds_n,
                      const std::string& case_text) {
  const SizeSequence sizes(spec, low, spec.size, true, 1);
  Random rng(2);
  std::vector<Block> live;
  live.reserve(2 * kBurst + 1);
  std::size_t live_bytes = 0;
  std::size_t peak_live = 0;
  std::uint64_t ops = 0;
  std::uint64_t failed = 0;
  std::uint64_t corrupt = 0;
  std::uint64_t next = 0;  // the next size
  auto drop = [&](const Block& b) {
    if (!intact(b)) ++corrupt;
    A::deallocate(b.p, b.n);
    live_bytes -= b.n;
    ++ops;
  };

  Timing t;
  t.rss_before_kib = current_rss_kib();
  const std::int64_t cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  const std::int64_t wall = now_ns(CLOCK_MONOTONIC);
  for (std::size_t r = 0; r < rounds_n; ++r) {
    for (std::size_t k = 0; k < kBurst; ++k) {
      const std::size_t n = sizes[next++];
      if (live_bytes + n > kLiveCap) break;
      Block b{static_cast<unsigned char*>(A::allocate(n)), n,
              static_cast<unsigned char>(next % 255 + 1)};
      ++ops;
      if (b.p == nullptr) {
        ++failed;
        continue;
      }
      fill(b);
      live.push_back(b);
      live_bytes += n;
    }
    peak_live = std::max(peak_live, live_bytes);
    current_rss_kib();  // the peak, as seen now (VmHWM may lag)
    // A random half: the first half of a partial Fisher-Yates shuffle.
    const std::size_t half = live.size() / 2;
    for (std::size_t k = 0; k < half; ++k) {
      std::swap(live[k], live[rng.between(k, live.size() - 1)]);
      drop(live[k]);
    }
    live.erase(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(half));
  }
  t.wall_ns = now_ns(CLOCK_MONOTONIC) - wall;
  t.cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu;
  nlohmann::json metrics = timing_metrics(t, ops, 1);
  for (const Block& b : live)
    drop(b);
  const long rss_end = current_rss_kib();

  const long peak_rss = metrics["peak_rss_kib"];
  const double peak_live_kib = static_cast<double>(peak_live) / 1024;
  metrics["peak_live_kib"] = peak_live_kib;
  metrics["rss_overhead"] = peak_live > 0 ? static_cast<double>(peak_rss) / peak_live_kib : 0.0;
  metrics["rss_end_kib"] = rss_end;
  // Of what the run added to the resident set at its peak, the share given back.
  const long grown = peak_rss - t.rss_before_kib;
  metrics["returned_fraction"] =
      grown > 0 ? static_cast<double>(peak_rss - rss_end) / static_cast<double>(grown) : 0.0;
  metrics["failed_allocations"] = failed;
  metrics["corrupt_blocks"] = corrupt;
  return {{"case", case_text},
          {"primary", {{"metric", "rss_overhead"}, {"better", "lower"}}},
          {"params",
           {{"size_low", low},
            {"size_high", spec.size},
            {"burst", kBurst},
            {"rounds", rounds_n},
            {"live_cap_kib", kLiveCap >> 10}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_fragmentation(const RunSpec& given) {
  RunSpec spec = given;
  spec.threads = 1;
  spec.mixed = true;  // the point of the workload: the fixed-size pools skip
  if (spec.size == 0) spec.size = std::size_t{64} << 10;
  const std::size_t low = std::min<std::size_t>(16, spec.size);
  const std::size_t rounds_n = spec.quick ? 16 : 200;
  const std::string text =
      bytes_text(low) + "-" + bytes_text(spec.size) + ", bursts of " + std::to_string(kBurst);
  return run_or_skip(spec, text, [&]<class A>() { return rounds<A>(spec, low, rounds_n, text); });
}

}  // namespace mempool_bench
