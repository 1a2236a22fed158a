// Stands in for MemoryBucket. To switch, include this header instead of MemoryBucket's; the
// calls stay. They forward to mempool::SizeClassPool::global().
// Where MemoryBucket was wrong, mempool differs:
// - its untagged lock-free free lists crashed under contention (ABA); mempool's are tagged.
// - it accepted a double free; mempool's checked build (MEMPOOL_CHECKED) stops the process.
#pragma once

#include <cstddef>

#include "mempool/size_class_pool.hpp"

// The README's MemoryBucket::allocate(size) fits a namespace or a class; this is a class with
// static members, so its calls compile as written (only `using namespace MemoryBucket;` would not).
class MemoryBucket {
 public:
  // The pools are ready on first use: nothing is left to initialise. Kept so that callers
  // compile unchanged.
  static void initMemoryPool() noexcept {}

  // size bytes (1..512 from a size class, anything else from the general heap);
  // std::bad_alloc when out of memory.
  [[nodiscard]] static void* allocate(std::size_t size) {
    return mempool::SizeClassPool::global().allocate(size);
  }

  // Frees ptr, allocated here with the same size. nullptr is ignored.
  static void deallocate(void* ptr, std::size_t size) noexcept {
    mempool::SizeClassPool::global().deallocate(ptr, size);
  }

  // MemoryBucket's own spelling, which its README documents.
  [[deprecated("misspelt: use MemoryBucket::deallocate")]] static void deallcoate(
      void* ptr, std::size_t size) noexcept {
    deallocate(ptr, size);
  }
};
