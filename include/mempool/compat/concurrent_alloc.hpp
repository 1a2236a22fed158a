// Stands in for High-Concurrency-Memory-Pool (ConcurrentAlloc.hpp, AllocatorWrapper.hpp). To
// switch, include this header instead of either; the calls stay. They forward to mempool's
// general heap (heap.hpp) and its adapters (allocator.hpp).
// Where High-Concurrency-Memory-Pool was wrong, mempool differs:
// - a thread's cache was lost at its exit; here it goes back to the central cache.
#pragma once

#include <cstddef>
#include <utility>

#include "mempool/allocator.hpp"
#include "mempool/heap.hpp"

// size bytes, any size; std::bad_alloc when out of memory.
[[nodiscard]] inline void* ConcurrentAlloc(std::size_t size) {
  return mempool::allocate(size);
}

// Frees ptr, allocated with the same size; nullptr does nothing.
inline void ConcurrentFree(void* ptr, std::size_t size) noexcept {
  mempool::deallocate(ptr, size);
}

// Size-free as well: the README names ConcurrentFree but not its parameters, and the heap finds
// the size itself.
inline void ConcurrentFree(void* ptr) noexcept {
  mempool::deallocate(ptr);
}

namespace cmp {

// A T made in the general heap, to be freed with cmp::Delete.
template <class T, class... Args>
[[nodiscard]] T* New(Args&&... args) {
  return mempool::make_unique<T>(std::forward<Args>(args)...).release();
}

// Destroys and frees an object from cmp::New; nullptr does nothing. p must point to the
// type New made (a Base* to a Derived would free the wrong size).
template <class T>
void Delete(T* p) noexcept {
  mempool::Deleter<T>()(p);
}

// A std::unique_ptr<T, mempool::Deleter<T>> over the general heap.
template <class T, class... Args>
[[nodiscard]] mempool::unique_ptr<T> MakeUnique(Args&&... args) {
  return mempool::make_unique<T>(std::forward<Args>(args)...);
}

// The stateless STL allocator over the general heap.
template <class T>
using PoolAllocator = mempool::Allocator<T>;

}  // namespace cmp
