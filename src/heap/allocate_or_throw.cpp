// The heap's C++ entry points that throw std::bad_alloc. Apart from heap.cpp, which
// the drop-in library links, compiled without exceptions (it links nothing of
// libstdc++: docs/architecture.md, "The drop-in library").
#include <new>

#include "heap_internal.hpp"
#include "mempool/heap.hpp"

namespace mempool {

using detail::heap_allocate;
using detail::heap_allocate_aligned;

namespace {
MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* allocate_miss(std::size_t n) {
  void* p = heap_allocate(n);
  if (MEMPOOL_UNLIKELY(p == nullptr)) throw std::bad_alloc();
  return p;
}
}  // namespace

MEMPOOL_HOT_ENTRY void* detail::heap_allocate_or_throw(std::size_t n) {
  if (void* p = detail::heap_try_hit(n); MEMPOOL_LIKELY(p != nullptr)) return p;
  return allocate_miss(n);
}

MEMPOOL_ALLOCATION_ENTRY void* allocate(std::size_t n, std::align_val_t alignment) {
  void* p = heap_allocate_aligned(n, static_cast<std::size_t>(alignment));
  if (MEMPOOL_UNLIKELY(p == nullptr)) throw std::bad_alloc();
  return p;
}

}  // namespace mempool
