// Stands in for Memory-Pool (C++20). To switch, include this header instead of "MemoryPool.h";
// the calls stay. They forward to mempool's general heap (mempool::allocate, deallocate).
// Where Memory-Pool was wrong, mempool differs:
// - its blocks were 8-aligned; here blocks of 16 bytes or more are 16-aligned.
// - requests of 32 KiB to 256 KiB could silently get nullptr; here every size is served.
// - a thread's cached blocks were lost at its exit; here they go back to the central cache.
// - it read a foreign pointer as a block header; here freeing one stops the process.
#pragma once

#include <cstddef>

#include "mempool/heap.hpp"

namespace mempool {

// Static members of a class in namespace mempool, as the README's
// mempool::MemoryPool::allocate(64) calls them. No mempool header declares a MemoryPool.
class MemoryPool {
 public:
  // size bytes, any size; std::bad_alloc when out of memory.
  [[nodiscard]] static void* allocate(std::size_t size) { return mempool::allocate(size); }

  // Any pointer allocate returned; nullptr does nothing. No size needed: the page map knows.
  static void deallocate(void* ptr) noexcept { mempool::deallocate(ptr); }
};

}  // namespace mempool
