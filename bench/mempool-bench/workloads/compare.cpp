// compare: the classic allocator comparison. Allocate then free at once, one
// block at a time, for 4, 64 and 4096 bytes and for mixed sizes of 8-256 bytes
// (uniform), at 1 thread and at all cores; the loop is throughput's.
#include "workloads.hpp"

namespace mempool_bench {

nlohmann::json run_compare(const RunSpec& given) {
  RunSpec spec = given;
  spec.window = false;
  if (spec.size == 0) spec.size = spec.mixed ? 256 : 64;
  const std::size_t low = spec.size < 8 ? spec.size : 8;
  const std::string text =
      (spec.mixed ? "8-" + bytes_text(spec.size) + " mixed" : bytes_text(spec.size)) + ", " +
      threads_text(spec.threads);
  return run_alloc_free_loop(spec, low, false, false, text);
}

}  // namespace mempool_bench
