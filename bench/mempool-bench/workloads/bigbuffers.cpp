// bigbuffers: 20 live buffers of 5 to 25 MiB; each step replaces a random one
// with a new zero-filled buffer (as std::make_unique<char[]>(n) does), the
// pattern of image, column-store and message-batch code. An allocator that maps
// and unmaps every large block page-faults the whole buffer again on each
// reuse; one that keeps freed large spans reuses them. 500 replacements
// (--quick: 20) after the 20 first buffers. Primary: the wall time of the
// replacements; peak RSS beside it.
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
nlohmann::json buffers(std::size_t steps, const std::string& text) {
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
    if (slot.p != nullptr) {
      checksum += static_cast<unsigned char*>(slot.p)[slot.n - 1];  // zero, or memory was lost
      A::deallocate(slot.p, slot.n);
    }
    slot = fresh();
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
  return {
      {"case", text},
      {"primary", {{"metric", "wall_s"}, {"better", "lower"}}},
      {"params",
       {{"live", kLive}, {"smallest", kSmallest}, {"largest", kLargest}, {"replacements", steps}}},
      {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_bigbuffers(const RunSpec& given) {
  RunSpec spec = given;
  spec.threads = 1;
  spec.mixed = true;  // sizes vary: the fixed-size pools skip
  const std::size_t steps = spec.quick ? 20 : 500;
  const std::string text = "20 live of 5-25 MiB, " + std::to_string(steps) + " replaced";
  return run_or_skip(spec, text, [&]<class A>() { return buffers<A>(steps, text); });
}

}  // namespace mempool_bench
