// scaling: throughput's allocate-then-free loop at 1, 2, 4, ... up to twice the
// cores (the registry's thread counts; the counts past the cores show what
// oversubscription does to an allocator's locks and caches). Sizes mixed 8-256 B,
// uniform, as compare's mixed case (so 1 thread here is that case): what most
// programs allocate, across several size classes, where a thread cache that does
// not scale shows. --size N: fixed N bytes (where the fixed-size pools run too);
// --size-dist=mixed --size N: mixed 8 B-N. --mode=window keeps a window of live
// blocks per thread, as in throughput. ns per op is the wall time per op of one
// thread while all run: flat is perfect scaling.
#include "workloads.hpp"

namespace mempool_bench {

nlohmann::json run_scaling(const RunSpec& given) {
  RunSpec spec = given;
  if (spec.size == 0) {
    spec.mixed = true;
    spec.size = 256;
  }
  const std::size_t low = spec.size < 8 ? spec.size : 8;
  std::string text = spec.mixed ? "8-" + bytes_text(spec.size) + " mixed" : bytes_text(spec.size);
  if (spec.window) text += ", window of " + std::to_string(spec.window_size);
  text += ", " + threads_text(spec.threads);
  return run_alloc_free_loop(spec, low, false, false, text);
}

}  // namespace mempool_bench
