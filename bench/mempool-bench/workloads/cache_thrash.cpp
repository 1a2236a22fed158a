// cache-thrash and cache-scratch: false sharing that the allocator causes, after
// Hoard's tests of the same names. Every thread allocates a small block (8 B;
// --size changes it), writes each of its bytes 1,000 times (read, add, write,
// through a volatile pointer), frees it, and again. On its own the block stays
// in the core's cache and a block costs about the same under any allocator; if
// the allocator gives two threads blocks on one cache line, every write moves
// the line between their cores and a block costs many times more.
// - cache-thrash: the threads only ever use blocks they allocated themselves
//   (active false sharing: blocks of different threads handed out side by side).
// - cache-scratch: the main thread first allocates one block per thread, one
//   after another (so side by side), and hands one to each thread, which frees
//   it before its loop (passive false sharing: an allocator that gives a freed
//   block to the thread that freed it hands each thread back a block that shares
//   a line with another thread's).
// Primary: ns per block (allocated, written and freed; per thread, all threads
// running). threads_sharing_a_line: of the blocks each thread used last, how
// many shared a cache line with another thread's, which says why.
#include <cstring>
#include <stdexcept>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::size_t kPasses = 1000;  // writes of each byte of a block
constexpr std::size_t kLine = 64;

// Written by one thread each, on a cache line of its own: the benchmark must not
// share lines itself.
struct alignas(64) PerThread {
  std::uintptr_t last = 0;  // the block it used last
  std::uint64_t corrupt = 0;
  std::uint64_t failed = 0;
  std::uint64_t handed_over = 0;  // scratch: the main thread's block, intact, freed here
};

// The threads whose block shares a line with another thread's.
std::uint64_t sharing_a_line(const std::vector<PerThread>& threads) {
  std::uint64_t sharing = 0;
  for (std::size_t a = 0; a < threads.size(); ++a) {
    for (std::size_t b = 0; b < threads.size(); ++b) {
      if (a != b && threads[a].last != 0 && threads[a].last / kLine == threads[b].last / kLine) {
        ++sharing;
        break;
      }
    }
  }
  return sharing;
}

template <class A>
nlohmann::json cache_thrash(const RunSpec& spec, bool scratch, const std::string& text) {
  const auto threads = static_cast<std::size_t>(spec.threads);
  const std::size_t n = spec.size;
  std::vector<PerThread> per(threads);
  // scratch: one block per thread, allocated here one after another, each
  // filled with its thread's number + 1.
  std::vector<void*> handed(threads, nullptr);
  if (scratch) {
    for (std::size_t t = 0; t < threads; ++t) {
      handed[t] = A::allocate(n);
      if (handed[t] == nullptr) throw std::runtime_error("cache-scratch: out of memory");
      std::memset(handed[t], static_cast<int>(t + 1), n);
      escape(handed[t]);
    }
  }
  auto prepare = [&](int t) {
    const auto me = static_cast<std::size_t>(t);
    if (!scratch) return;
    const auto* b = static_cast<const unsigned char*>(handed[me]);
    bool intact = true;
    for (std::size_t k = 0; k < n; ++k)
      intact = intact && b[k] == static_cast<unsigned char>(me + 1);
    per[me].handed_over += intact ? 1 : 0;
    A::deallocate(handed[me], n);
  };
  auto step = [&](int t, std::uint64_t /*i*/) {
    PerThread& mine = per[static_cast<std::size_t>(t)];
    void* p = A::allocate(n);
    if (p == nullptr) {
      ++mine.failed;
      return;
    }
    volatile auto* v = static_cast<unsigned char*>(p);
    for (std::size_t k = 0; k < n; ++k)
      v[k] = static_cast<unsigned char>(k);
    for (std::size_t pass = 0; pass < kPasses; ++pass)
      for (std::size_t k = 0; k < n; ++k)
        v[k] = static_cast<unsigned char>(v[k] + 1);
    for (std::size_t k = 0; k < n; ++k)
      if (v[k] != static_cast<unsigned char>(k + kPasses)) {
        ++mine.corrupt;
        break;
      }
    escape(p);
    mine.last = reinterpret_cast<std::uintptr_t>(p);
    A::deallocate(p, n);
  };
  const TimedResult r = run_for_seconds(spec, prepare, step);
  nlohmann::json metrics = timing_metrics(r.timing, r.ops, spec.threads);
  std::uint64_t corrupt = 0;
  std::uint64_t failed = 0;
  std::uint64_t handed_over = 0;
  for (const PerThread& p : per) {
    corrupt += p.corrupt;
    failed += p.failed;
    handed_over += p.handed_over;
  }
  metrics["threads_sharing_a_line"] = sharing_a_line(per);
  metrics["corrupt_blocks"] = corrupt;
  metrics["failed_allocations"] = failed;
  if (scratch) metrics["handed_over"] = handed_over;
  return {{"case", text},
          {"primary", {{"metric", "ns_per_op"}, {"better", "lower"}}},
          {"params", {{"size", n}, {"passes", kPasses}, {"line", kLine}}},
          {"metrics", metrics}};
}

nlohmann::json run_cache(const RunSpec& given, bool scratch) {
  RunSpec spec = given;
  spec.mixed = false;
  if (spec.size == 0) spec.size = 8;
  const std::string text = bytes_text(spec.size) + ", " + threads_text(spec.threads);
  return run_or_skip(spec, text, [&]<class A>() { return cache_thrash<A>(spec, scratch, text); });
}

}  // namespace

nlohmann::json run_cache_thrash(const RunSpec& given) {
  return run_cache(given, false);
}

nlohmann::json run_cache_scratch(const RunSpec& given) {
  return run_cache(given, true);
}

}  // namespace mempool_bench
