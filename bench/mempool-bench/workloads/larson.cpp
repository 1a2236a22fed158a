// larson: Larson and Krishnan's server simulation with its generations of
// threads (larson.cpp of mimalloc-bench and Hoard). Each of the T threads owns
// 5,000 slots of live blocks (8 to 1000 B) and replaces random ones, 50,000
// times; then it exits with its blocks still live, and a new thread takes over
// its slots and goes on. So every generation frees the blocks its predecessor
// allocated (thousands of blocks of a thread that has exited) and allocates
// its own from a fresh thread: what an allocator does with a dead thread's
// cache, heap and partly used pages, and how fast a new thread gets going. Each
// slice of slots runs generations one after another (waited on by a thread of
// the benchmark, which allocates nothing) until --seconds after --warmup have
// passed. Unlike `server` (one shared array, the same threads throughout), no
// slot is touched by two threads at once. Primary: ns per replacement (per
// thread, all threads running); peak RSS.
#include <thread>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::size_t kSlotsPerThread = 5000;
constexpr std::size_t kRounds = 50'000;  // replacements per generation
constexpr std::size_t kLow = 8;
constexpr std::size_t kHigh = 1000;

// Counted by one slice each, on a cache line of its own.
struct alignas(64) Counters {
  std::uint64_t generations = 0;  // measured
  std::uint64_t inherited_frees =
      0;  // measured: blocks a thread freed that an earlier one allocated
  std::uint64_t failed = 0;
  std::uint64_t corrupt = 0;
  std::int64_t stop_ns = 0;
};

// A block's first word: its size and the generation that allocated it (a number
// no other thread has), so the freeing thread gives the size back (sized pools
// need it) and sees whose block it frees. The last byte is written too.
std::uint64_t header(std::size_t n, std::uint64_t generation) {
  return static_cast<std::uint64_t>(n) | (generation << 32);
}

template <class A>
void* make_block(std::size_t n, std::uint64_t generation) {
  void* p = A::allocate(n);
  if (p != nullptr) {
    *static_cast<std::uint64_t*>(p) = header(n, generation);
    if (n > sizeof(std::uint64_t))
      static_cast<unsigned char*>(p)[n - 1] = static_cast<unsigned char>(n);
    escape(p);
  }
  return p;
}

template <class A>
nlohmann::json larson(const RunSpec& spec, const std::string& text) {
  const auto threads = static_cast<std::size_t>(spec.threads);
  std::vector<std::vector<void*>> slots(threads, std::vector<void*>(kSlotsPerThread));
  // Filled by the main thread (generation 0), as Larson's do.
  const SizeSequence fill(spec, kLow, kHigh, false, 99);
  for (std::size_t t = 0; t < threads; ++t)
    for (std::size_t i = 0; i < kSlotsPerThread; ++i)
      slots[t][i] = make_block<A>(fill[t * kSlotsPerThread + i], 0);
  std::vector<std::unique_ptr<SizeSequence>> sizes(threads);
  std::vector<Counters> counters(threads);
  const auto warmup = static_cast<std::int64_t>(spec.warmup_s * 1e9);
  const auto measure = static_cast<std::int64_t>(spec.seconds * 1e9);

  // One generation: kRounds replacements in the slice's slots, on a new thread.
  auto generation = [&](std::size_t slice, std::uint64_t id, std::uint64_t seed, bool measured) {
    std::vector<void*>& mine = slots[slice];
    const SizeSequence& size = *sizes[slice];
    Counters& c = counters[slice];
    Random random(seed);
    std::uint64_t inherited = 0;
    for (std::size_t i = 0; i < kRounds; ++i) {
      void*& slot = mine[random.next() % kSlotsPerThread];
      if (slot != nullptr) {
        const std::uint64_t h = *static_cast<const std::uint64_t*>(slot);
        const std::size_t m = h & 0xFFFF'FFFF;
        const bool last_ok =
            m <= sizeof(std::uint64_t) ||
            static_cast<unsigned char*>(slot)[m - 1] == static_cast<unsigned char>(m);
        if (m < kLow || m > kHigh || !last_ok) {
          ++c.corrupt;  // not freed: its size is unknown
        } else {
          if ((h >> 32) != id) ++inherited;
          A::deallocate(slot, m);
        }
      }
      slot = make_block<A>(size[seed + i], id);
      if (slot == nullptr) ++c.failed;
    }
    if (measured) {
      c.inherited_frees += inherited;
      ++c.generations;
    }
  };

  auto prepare = [&](int t) {
    const auto i = static_cast<std::size_t>(t);
    sizes[i] = std::make_unique<SizeSequence>(spec, kLow, kHigh, false, i + 1);
  };
  const Timing timing_all = run_threads(spec.threads, prepare, [&](int t) {
    const auto slice = static_cast<std::size_t>(t);
    const std::int64_t begin = now_ns(CLOCK_MONOTONIC);
    std::uint64_t g = 0;
    // Generations until the warm-up is over, then until the end: at least one each.
    for (const std::int64_t until : {warmup, warmup + measure}) {
      const bool measured = until != warmup;
      do {
        // Generation ids: unique over all slices, never 0 (the main thread's fill).
        const std::uint64_t id = ++g * threads + slice;
        std::thread next(generation, slice, id, id * 7919, measured);
        next.join();
      } while (now_ns(CLOCK_MONOTONIC) - begin < until);
    }
    counters[slice].stop_ns = now_ns(CLOCK_MONOTONIC) - begin - warmup;
  });
  for (std::vector<void*>& slice : slots)
    for (void* p : slice)
      if (p != nullptr) A::deallocate(p, *static_cast<std::uint64_t*>(p) & 0xFFFF'FFFF);

  Counters total;
  for (const Counters& c : counters) {
    total.generations += c.generations;
    total.inherited_frees += c.inherited_frees;
    total.failed += c.failed;
    total.corrupt += c.corrupt;
    total.stop_ns = std::max(total.stop_ns, c.stop_ns);
  }
  Timing timing = timing_all;
  timing.wall_ns = total.stop_ns;  // warm-up end to the last slice's stop
  nlohmann::json metrics = timing_metrics(timing, total.generations * kRounds, spec.threads);
  metrics["generations"] = total.generations;
  metrics["inherited_frees"] = total.inherited_frees;
  metrics["failed_allocations"] = total.failed;
  metrics["corrupt_blocks"] = total.corrupt;
  return {{"case", text},
          {"primary", {{"metric", "ns_per_op"}, {"better", "lower"}}},
          {"params",
           {{"slots_per_thread", kSlotsPerThread},
            {"rounds_per_generation", kRounds},
            {"low", kLow},
            {"high", kHigh}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_larson(const RunSpec& given) {
  RunSpec spec = given;
  spec.mixed = true;
  const std::string text = "8-1000 B, " + threads_text(spec.threads) + ", new every " +
                           std::to_string(kRounds / 1000) + "k";
  return run_or_skip(spec, text, [&]<class A>() { return larson<A>(spec, text); });
}

}  // namespace mempool_bench
