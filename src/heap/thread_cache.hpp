// The thread cache's internal entry points; the class itself and its hit path
// are in include/mempool/detail/heap_thread_cache.hpp.
#pragma once

#include <cstddef>

#include "mempool/detail/heap_thread_cache.hpp"

namespace mempool::detail {

// Heap options read from the environment (src/options.cpp): one thread's most
// and all threads' caches together.
void set_thread_cache_budget(std::size_t max_per_thread, std::size_t total) noexcept;
// The pthread key whose destructor runs on_thread_exit; made once by heap_init.
bool create_thread_exit_key() noexcept;
// Blocks the heap gives out one by one once the calling thread has no cache.
void* allocate_uncached(std::size_t c) noexcept;

}  // namespace mempool::detail
