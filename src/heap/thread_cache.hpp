// The thread cache's internal entry points; the class itself and its hit path
// are in include/mempool/detail/heap_thread_cache.hpp.
#pragma once

#include <cstddef>

#include "mempool/detail/heap_thread_cache.hpp"
#include "span.hpp"

namespace mempool::detail {

// Thread-owned spans (Span::owner): what a thread keeps of the spans it owns. Per class,
// the spans whose local lists hold blocks, newest first, and how many blocks those lists
// hold (stats reads them from other threads).
struct OwnedSpans {
  LocalSpanList with_local[kHeapClassCount];
  std::atomic<std::uint32_t> blocks[kHeapClassCount] = {};
  // Bytes of the owned spans with every block on their local list: kept for the next
  // refills up to what the thread's budget leaves its lists (ThreadCache::keep_whole_span).
  std::size_t whole_bytes = 0;
  // The thread refilled class c from the central cache since its overflows last held no
  // block of its own spans: they may hold some now. Otherwise they go to the central cache
  // without a look at their spans (a thread that frees what others allocate: a consumer,
  // or a pool's main thread that frees its workers' blocks after they exit).
  bool may_own[kHeapClassCount] = {};
};

// Heap options read from the environment (src/options.cpp): one thread's most
// and all threads' caches together.
void set_thread_cache_budget(std::size_t max_per_thread, std::size_t total) noexcept;
// The pthread key whose destructor runs on_thread_exit; made once by heap_init.
bool create_thread_exit_key() noexcept;
// Blocks the heap gives out one by one once the calling thread has no cache.
void* allocate_uncached(std::size_t c) noexcept;

}  // namespace mempool::detail
