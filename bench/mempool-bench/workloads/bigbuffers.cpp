// bigbuffers: 20 live buffers of 5 to 25 MiB; each step replaces a random one
// with a new zero-filled buffer (as std::make_unique<char[]>(n) does), the
// pattern of image, column-store and message-batch code. An allocator that maps
// and unmaps every large block page-faults the whole buffer again on each
// reuse; one that keeps freed large spans reuses them. Two cases (--replace):
//  - free-first: the old buffer is freed, then the new one allocated, 500 times;
//  - new-first: the new one is allocated first, then the old one freed, as
//    `buf = std::make_unique<char[]>(n)` does, 2,000 times (issue 13's loop):
//    21 buffers are live at the peak, and a freed one is reused only by the next step.
// (--quick: 20 replacements.) Primary: the wall time of the replacements; peak
// RSS beside it.
#include <time.h>

#include <cstring>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::size_t kLive = 20;
constexpr std::size_t kSmallest = std::size_t{5} << 20;
constexpr std::size_t kLargest = std::size_t{25} << 20;

struct Buffer {
  void* p = nullptr;
  std::size_t n = 0;
};

template <class A>
nlohmann::json buffers(std::size_t steps, bool new_first, const std::string& text) {
  Random rng(7);
  std::vector<Buffer> live(kLive);
  std::uint64_t failed = 0;
  auto fresh = [&]() -> Buffer {
    const std::size_t n = rng.between(kSmallest, kLargest);
    void* p = A::allocate(n);
    if (p == nullptr) {
      ++failed;
      return {};
    }
    // The pointer escapes first: otherwise the compiler folds malloc + memset
    // into calloc, and an allocator that hands out fresh pages skips the zeroing
    // that operator new + value-initialisation really pays.
    escape(p);
    std::memset(p, 0, n);
    return {p, n};
  };
  for (Buffer& b : live)
    b = fresh();
  Timing t;
  t.rss_before_kib = current_rss_kib();
  const std::int64_t cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  const std::int64_t wall = now_ns(CLOCK_MONOTONIC);
  std::uint64_t checksum = 0;
  for (std::size_t i = 0; i < steps; ++i) {
    Buffer& slot = live[rng.next() % kLive];
    const Buffer old = slot;
    if (new_first) slot = fresh();
    if (old.p != nullptr) {
      checksum += static_cast<unsigned char*>(old.p)[old.n - 1];  // zero, or memory was lost
      A::deallocate(old.p, old.n);
    }
    if (!new_first) slot = fresh();
    if (slot.p != nullptr) static_cast<unsigned char*>(slot.p)[slot.n - 1] = 0;
  }
  t.wall_ns = now_ns(CLOCK_MONOTONIC) - wall;
  t.cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu;
  for (Buffer& b : live)
    if (b.p != nullptr) A::deallocate(b.p, b.n);
  nlohmann::json metrics = timing_metrics(t, steps, 1);
  metrics.erase("ns_per_op");
  metrics["ms_per_replacement"] =
      static_cast<double>(t.wall_ns) * 1e-6 / static_cast<double>(steps);
  metrics["failed_allocations"] = failed;
  metrics["checksum_ok"] = checksum == 0;
  return {{"case", text},
          {"primary", {{"metric", "wall_s"}, {"better", "lower"}}},
          {"params",
           {{"live", kLive},
            {"smallest", kSmallest},
            {"largest", kLargest},
            {"replacements", steps},
            {"order", new_first ? "new-first" : "free-first"}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_bigbuffers(const RunSpec& given) {
  RunSpec spec = given;
  spec.threads = 1;
  spec.mixed = true;  // sizes vary: the fixed-size pools skip
  const bool new_first = spec.replace == "new-first";
  const std::size_t steps = spec.quick ? 20 : (new_first ? 2000 : 500);
  // Short enough for the console table's 24 columns; the rest is in params.
  const std::string text =
      std::to_string(steps) + (new_first ? " x new, then free" : " x free, then new");
  return run_or_skip(spec, text, [&]<class A>() { return buffers<A>(steps, new_first, text); });
}

}  // namespace mempool_bench
