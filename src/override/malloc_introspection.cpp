// What programs and tools ask the C library about its heap, answered from
// mempool's statistics (mempool::stats()) instead of glibc's unused arena:
// mallinfo2 and mallinfo, malloc_info (glibc's XML) and malloc_stats; and mallopt,
// accepted and ignored. None of them allocates; malloc_info writes through the
// caller's FILE, whose buffer stdio may allocate (from mempool, no lock of the heap
// held).
//
// mallinfo2's fields (glibc's meaning, then mempool's numbers):
//   arena     memory the allocator holds in its heap: bytes mapped for the page
//             heap (cached direct mappings included), direct mappings in use aside
//   ordblks   free chunks: the page heap's free spans and cached mappings
//   smblks    free small blocks: those in the thread caches and the central cache
//   hblks     mmapped blocks: blocks in a mapping of their own (64 MiB and up)
//   hblkhd    their bytes
//   usmblks   (glibc: always 0) the most bytes the heap has had mapped
//   fsmblks   bytes of the free small blocks (thread caches and central cache)
//   uordblks  bytes in use in `arena`: small blocks and large spans
//   fordblks  free bytes in `arena`: arena - uordblks (caches, free pages resident
//             or given back to the OS, the tails of small spans)
//   keepcost  what malloc_trim gives back for certain: free resident pages and
//             cached mappings
// so, as in glibc, arena = uordblks + fordblks, and arena + hblkhd is every byte
// mapped (heap metadata aside). mallinfo gives the same, each saturated to INT_MAX.
#include <malloc.h>

#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>

#include "mempool/heap.hpp"
#include "mempool/mempool.h"

#ifndef MEMPOOL_VERSION_STRING
#define MEMPOOL_VERSION_STRING "unknown"
#endif

namespace {

using mempool::HeapStats;

std::size_t free_small_blocks(const HeapStats& st) noexcept {
  std::size_t blocks = 0;
  for (std::size_t i = 0; i < st.class_count; ++i)
    blocks += st.classes[i].blocks_in_thread_caches + st.classes[i].blocks_in_central_cache;
  return blocks;
}

struct mallinfo2 to_mallinfo2(const HeapStats& st) noexcept {
  struct mallinfo2 mi {};
  mi.arena = st.bytes_mapped - st.bytes_direct;
  mi.ordblks = st.free_spans + st.cached_mappings;
  mi.smblks = free_small_blocks(st);
  mi.hblks = st.direct_mappings;
  mi.hblkhd = st.bytes_direct;
  mi.usmblks = st.bytes_mapped_peak;
  mi.fsmblks = st.bytes_in_thread_caches + st.bytes_in_central_cache;
  mi.uordblks = st.bytes_in_use - st.bytes_direct;
  mi.fordblks = mi.arena > mi.uordblks ? mi.arena - mi.uordblks : 0;
  mi.keepcost = st.bytes_free_in_page_heap;
  return mi;
}

int saturate(std::size_t v) noexcept {
  return v > static_cast<std::size_t>(INT_MAX) ? INT_MAX : static_cast<int>(v);
}

// glibc's document (one <heap>, its <sizes> the free blocks by class), then
// mempool's own per-class counts and the totals of HeapStats.
void write_malloc_info(const HeapStats& st, std::FILE* fp) noexcept {
  const struct mallinfo2 mi = to_mallinfo2(st);
  std::fprintf(fp, "<malloc version=\"1\" allocator=\"mempool\" mempool-version=\"%s\">\n",
               MEMPOOL_VERSION_STRING);
  std::fprintf(fp, "<heap nr=\"0\">\n<sizes>\n");
  std::size_t from = 1;
  for (std::size_t i = 0; i < st.class_count; ++i) {
    const mempool::HeapClassStats& c = st.classes[i];
    const std::size_t free_blocks = c.blocks_in_thread_caches + c.blocks_in_central_cache;
    if (c.spans != 0) {
      std::fprintf(fp, "  <size from=\"%zu\" to=\"%zu\" total=\"%zu\" count=\"%zu\"/>\n", from,
                   c.block_size, free_blocks * c.block_size, free_blocks);
    }
    from = c.block_size + 1;
  }
  std::fprintf(fp, "</sizes>\n<classes>\n");
  for (std::size_t i = 0; i < st.class_count; ++i) {
    const mempool::HeapClassStats& c = st.classes[i];
    if (c.spans == 0) continue;
    std::fprintf(fp,
                 "  <class size=\"%zu\" in-use=\"%zu\" in-use-bytes=\"%zu\" "
                 "thread-caches=\"%zu\" central-cache=\"%zu\" spans=\"%zu\" reserved=\"%zu\"/>\n",
                 c.block_size, c.blocks_in_use, c.bytes_in_use, c.blocks_in_thread_caches,
                 c.blocks_in_central_cache, c.spans, c.bytes_reserved);
  }
  std::fprintf(fp, "</classes>\n");
  // Free memory: "fast" the small blocks the caches hold, "rest" the free pages.
  const std::size_t free_pages = st.bytes_free_in_page_heap + st.bytes_returned_to_os;
  for (int level = 0; level < 2; ++level) {
    const std::size_t mapped = level == 0 ? mi.arena : st.bytes_mapped;
    std::fprintf(fp, "<total type=\"fast\" count=\"%zu\" size=\"%zu\"/>\n", mi.smblks, mi.fsmblks);
    std::fprintf(fp, "<total type=\"rest\" count=\"%zu\" size=\"%zu\"/>\n", mi.ordblks, free_pages);
    if (level == 1)
      std::fprintf(fp, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n", mi.hblks, mi.hblkhd);
    std::fprintf(fp, "<system type=\"current\" size=\"%zu\"/>\n", mapped);
    std::fprintf(fp, "<system type=\"max\" size=\"%zu\"/>\n", st.bytes_mapped_peak);
    std::fprintf(fp, "<aspace type=\"total\" size=\"%zu\"/>\n", mapped);
    std::fprintf(fp, "<aspace type=\"mprotect\" size=\"%zu\"/>\n", mapped);
    if (level == 0) std::fprintf(fp, "</heap>\n");
  }
  std::fprintf(fp,
               "<mempool in-use=\"%zu\" thread-caches=\"%zu\" central-cache=\"%zu\" "
               "page-heap-free=\"%zu\" returned-to-os=\"%zu\" span-tails=\"%zu\" mapped=\"%zu\" "
               "mapped-peak=\"%zu\" resident=\"%zu\" metadata=\"%zu\" large-blocks=\"%zu\" "
               "memory-limit=\"%zu\" memory-limit-hits=\"%zu\" threads=\"%zu\"/>\n",
               st.bytes_in_use, st.bytes_in_thread_caches, st.bytes_in_central_cache,
               st.bytes_free_in_page_heap, st.bytes_returned_to_os, st.bytes_span_tails,
               st.bytes_mapped, st.bytes_mapped_peak, st.bytes_resident, st.bytes_metadata,
               st.large_blocks_in_use, st.memory_limit, st.memory_limit_hits, st.thread_caches);
  std::fprintf(fp, "</malloc>\n");
}

}  // namespace

extern "C" {

struct mallinfo2 mallinfo2(void) noexcept {
  return to_mallinfo2(mempool::stats());
}

struct mallinfo mallinfo(void) noexcept {
  const struct mallinfo2 m = mallinfo2();
  struct mallinfo mi {};
  mi.arena = saturate(m.arena);
  mi.ordblks = saturate(m.ordblks);
  mi.smblks = saturate(m.smblks);
  mi.hblks = saturate(m.hblks);
  mi.hblkhd = saturate(m.hblkhd);
  mi.usmblks = saturate(m.usmblks);
  mi.fsmblks = saturate(m.fsmblks);
  mi.uordblks = saturate(m.uordblks);
  mi.fordblks = saturate(m.fordblks);
  mi.keepcost = saturate(m.keepcost);
  return mi;
}

// options must be 0: glibc returns EINVAL otherwise (we set errno too, as its
// manual page says), and so do we for a null stream.
int malloc_info(int options, FILE* fp) noexcept {
  if (options != 0 || fp == nullptr) {
    errno = EINVAL;
    return EINVAL;
  }
  const HeapStats st = mempool::stats();
  write_malloc_info(st, fp);
  return 0;
}

// glibc's name for printing statistics on stderr: mempool's table.
void malloc_stats(void) noexcept {
  mp_stats_print(stderr);
}

// glibc's tuning of its own arenas (M_ARENA_MAX, M_MMAP_THRESHOLD, ...), which mempool
// does not have: accepted and ignored, 1 ("success") as glibc answers for a parameter
// it does not know and tcmalloc for any. Defined so that a fully static program that
// calls it links: libc.a's mallopt would bring glibc's whole malloc.o, whose malloc and
// free then clash with these (docs/usage.md, "A fully static program").
int mallopt(int /*param*/, int /*value*/) noexcept {
  return 1;
}

}  // extern "C"
