// operator new and delete of the whole process, every C++17 form, over the
// general heap. The throwing forms loop on the new-handler as the standard says
// ([new.delete.single]) and throw std::bad_alloc when there is none; the
// nothrow forms run the same loop and answer nullptr instead.
#include <cstddef>
#include <new>

#include "../heap/heap_internal.hpp"
#include "mempool/heap.hpp"

using namespace mempool::detail;

namespace {

// alignment 0: the default (16 from 16 bytes on).
MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* new_slow(std::size_t n, std::size_t alignment) {
  for (;;) {
    void* p = alignment == 0 ? heap_allocate(n) : heap_allocate_aligned(n, alignment);
    if (MEMPOOL_LIKELY(p != nullptr)) return p;
    const std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();  // frees memory, throws, or ends the program
  }
}

MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* new_nothrow_slow(std::size_t n,
                                                                 std::size_t alignment) noexcept {
  try {
    return new_slow(n, alignment);
  } catch (...) {
    return nullptr;
  }
}

MEMPOOL_ALWAYS_INLINE void* new_default(std::size_t n) {
  if (void* p = heap_try_hit(n); MEMPOOL_LIKELY(p != nullptr)) return p;
  return new_slow(n, 0);
}

MEMPOOL_ALWAYS_INLINE void* new_default_nothrow(std::size_t n) noexcept {
  if (void* p = heap_try_hit(n); MEMPOOL_LIKELY(p != nullptr)) return p;
  return new_nothrow_slow(n, 0);
}

std::size_t as_size(std::align_val_t alignment) noexcept {
  return static_cast<std::size_t>(alignment);
}

}  // namespace

MEMPOOL_ALLOCATION_ENTRY void* operator new(std::size_t n) {
  return new_default(n);
}
MEMPOOL_ALLOCATION_ENTRY void* operator new[](std::size_t n) {
  return new_default(n);
}
MEMPOOL_ALLOCATION_ENTRY void* operator new(std::size_t n, const std::nothrow_t& /*tag*/) noexcept {
  return new_default_nothrow(n);
}
MEMPOOL_ALLOCATION_ENTRY void* operator new[](std::size_t n,
                                              const std::nothrow_t& /*tag*/) noexcept {
  return new_default_nothrow(n);
}
MEMPOOL_ALLOCATION_ENTRY void* operator new(std::size_t n, std::align_val_t alignment) {
  return new_slow(n, as_size(alignment));
}
MEMPOOL_ALLOCATION_ENTRY void* operator new[](std::size_t n, std::align_val_t alignment) {
  return new_slow(n, as_size(alignment));
}
MEMPOOL_ALLOCATION_ENTRY void* operator new(std::size_t n, std::align_val_t alignment,
                                            const std::nothrow_t& /*tag*/) noexcept {
  return new_nothrow_slow(n, as_size(alignment));
}
MEMPOOL_ALLOCATION_ENTRY void* operator new[](std::size_t n, std::align_val_t alignment,
                                              const std::nothrow_t& /*tag*/) noexcept {
  return new_nothrow_slow(n, as_size(alignment));
}

MEMPOOL_ALLOCATION_ENTRY void operator delete(void* p) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete[](void* p) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete(void* p, const std::nothrow_t& /*tag*/) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete[](void* p, const std::nothrow_t& /*tag*/) noexcept {
  heap_free(p);
}
// Sized: the size names the class, so the page map is not read (checked builds
// verify it).
MEMPOOL_ALLOCATION_ENTRY void operator delete(void* p, std::size_t n) noexcept {
  heap_free_sized(p, n);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete[](void* p, std::size_t n) noexcept {
  heap_free_sized(p, n);
}
// Aligned blocks may sit in a larger class than their size names: look them up.
MEMPOOL_ALLOCATION_ENTRY void operator delete(void* p, std::align_val_t /*alignment*/) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete[](void* p, std::align_val_t /*alignment*/) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete(void* p, std::size_t n,
                                              std::align_val_t alignment) noexcept {
  mempool::deallocate(p, n, alignment);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete[](void* p, std::size_t n,
                                                std::align_val_t alignment) noexcept {
  mempool::deallocate(p, n, alignment);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete(void* p, std::align_val_t /*alignment*/,
                                              const std::nothrow_t& /*tag*/) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete[](void* p, std::align_val_t /*alignment*/,
                                                const std::nothrow_t& /*tag*/) noexcept {
  heap_free(p);
}
