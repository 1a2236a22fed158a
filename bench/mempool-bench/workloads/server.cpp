// server: a Larson-style server simulation. A shared array of slots holds live
// blocks of random sizes (8 to 1000 B); every thread picks random slots, puts a
// new block in and frees the one it took out, which another thread usually
// allocated: requests handled by whichever thread is free, their buffers freed
// by another. 2,048 slots per thread, filled by the main thread beforehand.
// Primary: ns per replacement (per thread, all threads running); peak RSS.
#include <atomic>
#include <thread>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::size_t kSlotsPerThread = 2048;
constexpr std::size_t kLow = 8;
constexpr std::size_t kHigh = 1000;

// A block's first word is its size, so whichever thread frees it can give the
// size back (sized pools need it) and a corrupted block is seen.
template <class A>
void* make_block(std::size_t n) {
  void* p = A::allocate(n);
  if (p != nullptr) {
    *static_cast<std::size_t*>(p) = n;
    if (n > sizeof(std::size_t)) static_cast<unsigned char*>(p)[n - 1] = 1;  // the last byte too
  }
  return p;
}

template <class A>
nlohmann::json server(const RunSpec& spec, const std::string& text) {
  const auto threads = static_cast<std::size_t>(spec.threads);
  std::vector<std::atomic<void*>> slots(kSlotsPerThread * threads);
  const SizeSequence fill(spec, kLow, kHigh, false, 99);
  for (std::size_t i = 0; i < slots.size(); ++i)
    slots[i].store(make_block<A>(fill[i]), std::memory_order_relaxed);
  std::vector<std::unique_ptr<SizeSequence>> sizes(threads);
  std::vector<Random> randoms;
  for (std::size_t t = 0; t < threads; ++t)
    randoms.emplace_back(t + 11);
  std::vector<std::uint64_t> failed(threads, 0);
  std::vector<std::uint64_t> corrupt(threads, 0);
  auto prepare = [&](int t) {
    const auto i = static_cast<std::size_t>(t);
    sizes[i] = std::make_unique<SizeSequence>(spec, kLow, kHigh, false, i + 1);
  };
  auto step = [&](int t, std::uint64_t i) {
    const auto me = static_cast<std::size_t>(t);
    const std::size_t n = (*sizes[me])[i];
    void* fresh = make_block<A>(n);
    if (fresh == nullptr) ++failed[me];
    void* old = slots[randoms[me].next() % slots.size()].exchange(fresh, std::memory_order_acq_rel);
    if (old != nullptr) {
      const std::size_t m = *static_cast<std::size_t*>(old);
      if (m < kLow || m > kHigh) {
        ++corrupt[me];
        return;  // not freed: its size is unknown
      }
      A::deallocate(old, m);
    }
  };
  const TimedResult r = run_for_seconds(spec, prepare, step);
  for (std::atomic<void*>& s : slots) {
    void* p = s.load(std::memory_order_relaxed);
    if (p != nullptr) A::deallocate(p, *static_cast<std::size_t*>(p));
  }
  nlohmann::json metrics = timing_metrics(r.timing, r.ops, spec.threads);
  std::uint64_t total_failed = 0;
  std::uint64_t total_corrupt = 0;
  for (std::size_t t = 0; t < threads; ++t) {
    total_failed += failed[t];
    total_corrupt += corrupt[t];
  }
  metrics["failed_allocations"] = total_failed;
  metrics["corrupt_blocks"] = total_corrupt;
  return {{"case", text},
          {"primary", {{"metric", "ns_per_op"}, {"better", "lower"}}},
          {"params", {{"slots", slots.size()}, {"low", kLow}, {"high", kHigh}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_server(const RunSpec& given) {
  RunSpec spec = given;
  spec.mixed = true;
  const std::string text = "8-1000 B, " + threads_text(spec.threads);
  return run_or_skip(spec, text, [&]<class A>() { return server<A>(spec, text); });
}

}  // namespace mempool_bench
