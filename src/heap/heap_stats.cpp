// mempool::stats() and mp_stats_print: a snapshot of every tier.
#include <cinttypes>
#include <cstdio>

#include "central_cache.hpp"
#include "class_info.hpp"
#include "heap_internal.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "metadata.hpp"
#include "page_heap.hpp"

namespace mempool {

namespace {

struct CacheTotals {
  std::size_t blocks[detail::kHeapClassCount] = {};
  std::size_t caches = 0;
};

void add_cache(const detail::ThreadCache& cache, void* context) {
  auto* totals = static_cast<CacheTotals*>(context);
  ++totals->caches;
  for (std::size_t c = 1; c < detail::kHeapClassCount; ++c)
    totals->blocks[c] += cache.cached_blocks(c);
}

}  // namespace

HeapStats stats() noexcept {
  using namespace detail;
  CacheTotals cached;
  ThreadCache::for_each(add_cache, &cached);
  HeapStats st;
  st.thread_caches = cached.caches;
  std::size_t small_span_bytes = 0;
  for (std::size_t c = 1; c < kHeapClassCount; ++c) {
    const CentralClassCounts k = g_central_cache.counts(c);
    const std::size_t size = kHeapClasses[c].size;
    const std::size_t free_outside = k.blocks_in_batches + cached.blocks[c];
    HeapClassStats& out = st.classes[st.class_count++];
    out.block_size = size;
    // Thread caches are read while their threads run: never report less than 0.
    out.blocks_in_use = k.blocks_out > free_outside ? k.blocks_out - free_outside : 0;
    out.blocks_cached = free_outside;
    out.bytes_reserved = k.spans * kHeapClasses[c].span_pages * kHeapPageSize;
    small_span_bytes += out.bytes_reserved;
    st.bytes_in_use += out.blocks_in_use * size;
    st.bytes_in_thread_caches += cached.blocks[c] * size;
    st.bytes_in_central_cache += (k.blocks_in_batches + k.blocks_in_spans) * size;
  }
  const PageHeapStats ph = g_page_heap.stats();
  const std::size_t large_spans =
      ph.bytes_in_spans > small_span_bytes ? ph.bytes_in_spans - small_span_bytes : 0;
  st.bytes_in_use += large_spans + ph.bytes_direct;
  st.large_blocks_in_use = heap_large_blocks();
  st.bytes_free_in_page_heap = ph.bytes_free_resident;
  st.bytes_returned_to_os = ph.bytes_free_released;
  st.bytes_mapped = ph.bytes_mapped;
  st.bytes_metadata = g_metadata.bytes_mapped() + g_page_map.bytes_mapped();
  return st;
}

}  // namespace mempool

extern "C" void mp_stats_print(FILE* out) noexcept {
  if (out == nullptr) out = stderr;
  const mempool::HeapStats st = mempool::stats();
  auto mib = [](std::size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  std::fprintf(out,
               "mempool heap statistics\n"
               "  in use            %10.2f MiB (%zu large blocks)\n"
               "  thread caches     %10.2f MiB (%zu threads)\n"
               "  central cache     %10.2f MiB\n"
               "  page heap, free   %10.2f MiB resident, %.2f MiB returned to the OS\n"
               "  mapped            %10.2f MiB (+ %.2f MiB metadata)\n",
               mib(st.bytes_in_use), st.large_blocks_in_use, mib(st.bytes_in_thread_caches),
               st.thread_caches, mib(st.bytes_in_central_cache), mib(st.bytes_free_in_page_heap),
               mib(st.bytes_returned_to_os), mib(st.bytes_mapped), mib(st.bytes_metadata));
  std::fprintf(out, "  %10s %12s %12s %12s\n", "class size", "in use", "cached", "reserved KiB");
  for (std::size_t i = 0; i < st.class_count; ++i) {
    const mempool::HeapClassStats& c = st.classes[i];
    if (c.bytes_reserved == 0) continue;
    std::fprintf(out, "  %10zu %12zu %12zu %12zu\n", c.block_size, c.blocks_in_use, c.blocks_cached,
                 c.bytes_reserved / 1024);
  }
  std::fflush(out);
}
