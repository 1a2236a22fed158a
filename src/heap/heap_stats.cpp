// mempool::stats() and mp_stats_print: a snapshot of every tier.
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
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
    const HeapClassInfo& info = kHeapClasses[c];
    const std::size_t free_outside = k.blocks_in_batches + cached.blocks[c];
    HeapClassStats& out = st.classes[st.class_count++];
    out.block_size = info.size;
    // Thread caches are read while their threads run: never report less than 0.
    out.blocks_in_use = k.blocks_out > free_outside ? k.blocks_out - free_outside : 0;
    out.bytes_in_use = out.blocks_in_use * info.size;
    out.blocks_cached = free_outside;
    out.blocks_in_thread_caches = cached.blocks[c];
    out.blocks_in_central_cache = k.blocks_in_batches + k.blocks_in_spans;
    out.spans = k.spans;
    out.empty_spans = k.empty_spans;
    out.bytes_reserved = k.spans * info.span_pages * kHeapPageSize;
    small_span_bytes += out.bytes_reserved;
    st.bytes_in_use += out.bytes_in_use;
    st.bytes_in_thread_caches += out.blocks_in_thread_caches * info.size;
    st.bytes_in_central_cache += out.blocks_in_central_cache * info.size;
    // With a hardened library's guarded spans, their blocks' pads count here too.
    st.bytes_span_tails += out.bytes_reserved - k.blocks * info.size;
  }
  const PageHeapStats ph = g_page_heap.stats();
  const std::size_t large_spans =
      ph.bytes_in_spans > small_span_bytes ? ph.bytes_in_spans - small_span_bytes : 0;
  st.bytes_in_use += large_spans + ph.bytes_direct;
  st.large_blocks_in_use = heap_large_blocks();
  st.direct_mappings = ph.direct_in_use;
  st.bytes_direct = ph.bytes_direct;
  st.cached_mappings = ph.direct_cached;
  st.bytes_cached_mappings = ph.bytes_direct_cached;
  st.free_spans = ph.free_spans;
  st.bytes_free_in_page_heap = ph.bytes_free_resident + ph.bytes_direct_cached;
  st.bytes_returned_to_os = ph.bytes_free_released;
  st.bytes_mapped = ph.bytes_mapped;
  st.bytes_mapped_peak = ph.bytes_mapped_peak;
  st.bytes_resident = ph.bytes_mapped - ph.bytes_free_released;
  st.bytes_metadata = g_metadata.bytes_mapped() + g_page_map.bytes_mapped();
  st.memory_limit = g_page_heap.memory_limit();
  st.memory_limit_hits = ph.limit_hits;
  st.huge_pages = g_page_heap.huge_pages_enabled();
  st.bytes_huge_advised = ph.bytes_huge_advised;
  st.bytes_free_partial_huge = ph.bytes_free_partial_huge;
  st.huge_pages_broken = ph.huge_pages_broken;
  // The hardened heap's freed large blocks, kept with their guard pages for reuse: the
  // page heap still lends their spans out, but the program holds none of them.
  if constexpr (kHardened) {
    const HardenedCached kept = hardened_cached();
    st.bytes_in_use -= std::min(st.bytes_in_use, kept.bytes);
    st.bytes_free_in_page_heap += kept.bytes;
    st.large_blocks_in_use -= std::min(st.large_blocks_in_use, kept.blocks);
  }
  return st;
}

}  // namespace mempool

namespace mempool::detail {

namespace {

// One line to `out`, or straight to file descriptor `fd` when out is nullptr:
// at exit a program may have closed stderr's FILE already (GNU tools' close_stdout
// does), but descriptor 2 still works. No allocation either way.
__attribute__((format(printf, 3, 4))) void print_line(FILE* out, int fd, const char* format,
                                                      ...) noexcept {
  char line[256];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  if (n <= 0) return;
  const std::size_t length = static_cast<std::size_t>(n) < sizeof line ? n : sizeof line - 1;
  if (out != nullptr) {
    std::fwrite(line, 1, length, out);
  } else {
    [[maybe_unused]] const ssize_t written = ::write(fd, line, length);
  }
}

}  // namespace

// One table: the totals (their identity in heap.hpp: the lines above "= mapped"
// add up to it when the heap is quiet), the limit, then a row per class that has
// spans now.
void print_heap_stats(FILE* out, int fd) noexcept {
  const mempool::HeapStats st = mempool::stats();
  auto mib = [](std::size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  std::size_t small_blocks = 0;
  for (std::size_t i = 0; i < st.class_count; ++i)
    small_blocks += st.classes[i].blocks_in_use;
  print_line(out, fd, "mempool heap statistics\n");
  print_line(out, fd,
             "  in use              %10.2f MiB  (%zu small blocks, %zu large, %zu of them "
             "in mappings of their own)\n",
             mib(st.bytes_in_use), small_blocks, st.large_blocks_in_use, st.direct_mappings);
  print_line(out, fd, "  thread caches       %10.2f MiB  (%zu threads)\n",
             mib(st.bytes_in_thread_caches), st.thread_caches);
  print_line(out, fd, "  central cache       %10.2f MiB\n", mib(st.bytes_in_central_cache));
  print_line(out, fd,
             "  page heap, free     %10.2f MiB  resident (%zu free spans; %.2f MiB in %zu cached "
             "mappings)\n",
             mib(st.bytes_free_in_page_heap), st.free_spans, mib(st.bytes_cached_mappings),
             st.cached_mappings);
  print_line(out, fd, "  returned to the OS  %10.2f MiB\n", mib(st.bytes_returned_to_os));
  print_line(out, fd, "  span tails          %10.2f MiB\n", mib(st.bytes_span_tails));
  print_line(out, fd, "  = mapped            %10.2f MiB  (peak %.2f MiB; + %.2f MiB metadata)\n",
             mib(st.bytes_mapped), mib(st.bytes_mapped_peak), mib(st.bytes_metadata));
  if (st.memory_limit == 0) {
    print_line(out, fd, "  memory limit              none  (resident %.2f MiB)\n",
               mib(st.bytes_resident));
  } else {
    print_line(out, fd,
               "  memory limit        %10.2f MiB  (resident %.2f MiB; reached %zu times)\n",
               mib(st.memory_limit), mib(st.bytes_resident), st.memory_limit_hits);
  }
  if (st.huge_pages) {
    print_line(out, fd,
               "  huge pages          %10.2f MiB  advised (%.2f MiB free in partly used ones; "
               "%zu broken)\n",
               mib(st.bytes_huge_advised), mib(st.bytes_free_partial_huge), st.huge_pages_broken);
  } else {
    print_line(out, fd, "  huge pages                 off\n");
  }
  print_line(out, fd, "  %10s %12s %12s %14s %14s %8s %12s\n", "class size", "in use", "in use KiB",
             "thread caches", "central cache", "spans", "reserved KiB");
  for (std::size_t i = 0; i < st.class_count; ++i) {
    const mempool::HeapClassStats& c = st.classes[i];
    if (c.spans == 0) continue;
    print_line(out, fd, "  %10zu %12zu %12.1f %14zu %14zu %8zu %12zu\n", c.block_size,
               c.blocks_in_use, static_cast<double>(c.bytes_in_use) / 1024.0,
               c.blocks_in_thread_caches, c.blocks_in_central_cache, c.spans,
               c.bytes_reserved / 1024);
  }
  if (out != nullptr) std::fflush(out);
}

}  // namespace mempool::detail

extern "C" void mp_stats_print(FILE* out) noexcept {
  mempool::detail::print_heap_stats(out == nullptr ? stderr : out, -1);
}
