// churn: threads that live briefly, as in a thread pool that grows and shrinks
// or a server with a thread per connection. 200 threads (--quick: 20) run in
// waves of one per core (at least 2; --threads N above 1: N at a time). Each
// allocates 2,000 blocks of 1 KiB (--size changes it; --size-dist=mixed: 16 B up
// to it), frees every other one (so its pages stay half used), and exits with
// the rest still live; the main thread frees those once the wave has exited:
// cross-thread frees of blocks whose thread is gone. What a thread leaves behind
// (its cache, its arena, its half-used pages) has to be reused by the next
// threads or given back, not stranded. Primary: the resident set once every
// thread has exited and every block is freed (rss_after_kib); the peak is about
// one wave's blocks. std::thread itself allocates through malloc: the same for
// every allocator (the in-process ones get glibc's there).
#include <time.h>

#include <thread>

#include <numeric>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::size_t kPerThread = 2000;

struct Block {
  void* p = nullptr;
  std::size_t n = 0;
};

template <class A>
nlohmann::json waves(const RunSpec& spec, int total, std::size_t low, const std::string& text) {
  const SizeSequence sizes(spec, low, spec.size, true, 1);
  const auto wave = static_cast<std::size_t>(spec.threads);
  // Every thread's blocks, allocated here beforehand: the threads call nothing
  // but the allocator.
  std::vector<std::vector<Block>> blocks(wave, std::vector<Block>(kPerThread));
  std::vector<std::uint64_t> failed(wave, 0);
  std::vector<std::thread> running;
  running.reserve(wave);
  std::uint64_t ops = 0;
  auto body = [&](std::size_t slot, std::size_t index) {
    std::vector<Block>& mine = blocks[slot];
    for (std::size_t i = 0; i < kPerThread; ++i) {
      const std::size_t n = sizes[index * kPerThread + i];
      mine[i] = {A::allocate(n), n};
      if (mine[i].p == nullptr) {
        ++failed[slot];
        continue;
      }
      touch(mine[i].p, n, static_cast<unsigned char>(i));
    }
    for (std::size_t i = 1; i < kPerThread; i += 2)
      if (mine[i].p != nullptr) A::deallocate(mine[i].p, mine[i].n);
  };

  Timing t;
  t.rss_before_kib = current_rss_kib();
  const std::int64_t cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  const std::int64_t wall = now_ns(CLOCK_MONOTONIC);
  for (std::size_t started = 0; started < static_cast<std::size_t>(total); started += wave) {
    const std::size_t n = std::min(wave, static_cast<std::size_t>(total) - started);
    for (std::size_t s = 0; s < n; ++s)
      running.emplace_back(body, s, started + s);
    for (std::thread& th : running)
      th.join();
    running.clear();
    current_rss_kib();  // the peak: every block of the wave allocated, half still live
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t i = 0; i < kPerThread; i += 2)
        if (blocks[s][i].p != nullptr) A::deallocate(blocks[s][i].p, blocks[s][i].n);
    ops += n * 2 * kPerThread;
  }
  t.wall_ns = now_ns(CLOCK_MONOTONIC) - wall;
  t.cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu;
  const long rss_after = current_rss_kib();

  nlohmann::json metrics = timing_metrics(t, ops, 1);
  metrics.erase("ns_per_op");  // thread start and exit dominate: ops_per_s says it
  metrics["rss_after_kib"] = rss_after;
  metrics["retained_kib"] = rss_after - t.rss_before_kib;
  metrics["threads_run"] = total;
  metrics["failed_allocations"] = std::accumulate(failed.begin(), failed.end(), std::uint64_t{0});
  return {{"case", text},
          {"primary", {{"metric", "rss_after_kib"}, {"better", "lower"}}},
          {"params",
           {{"threads_total", total},
            {"wave", wave},
            {"blocks_per_thread", kPerThread},
            {"size", spec.size},
            {"size_dist", spec.mixed ? "mixed" : "fixed"}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_churn(const RunSpec& given) {
  RunSpec spec = given;
  if (spec.size == 0) spec.size = 1024;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  // The wave is the run's thread count: object-pool (one thread) skips, and
  // bitmap-pool's capacity covers a wave's blocks.
  spec.threads = spec.threads > 1 ? spec.threads : std::max(2, cores);
  const int total = spec.quick ? 20 : 200;
  const std::size_t low = std::min<std::size_t>(16, spec.size);
  const std::string text = (spec.mixed ? bytes_text(low) + "-" : "") + bytes_text(spec.size) +
                           ", " + std::to_string(total) + " threads, " +
                           std::to_string(spec.threads) + " at a time";
  return run_or_skip(spec, text, [&]<class A>() { return waves<A>(spec, total, low, text); });
}

}  // namespace mempool_bench
