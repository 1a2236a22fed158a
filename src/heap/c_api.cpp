// The C API: the malloc family over the heap, to the letter of C and POSIX.
#include <cerrno>
#include <cstring>

#include "heap_internal.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"

using namespace mempool::detail;

namespace {

void* fail_enomem() noexcept {
  errno = ENOMEM;
  return nullptr;
}

MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* malloc_miss(std::size_t size) noexcept {
  void* p = heap_allocate(size);
  return MEMPOOL_LIKELY(p != nullptr) ? p : fail_enomem();
}

// nullptr, zero bytes, large or direct blocks, small blocks to large sizes, and
// a miss of the thread cache.
MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* realloc_slow(void* p, size_t size) noexcept {
  if (p == nullptr) return mp_malloc(size);
  if (size == 0) {  // glibc's behaviour: free, return NULL
    heap_free(p);
    return nullptr;
  }
  if constexpr (kHardened) {
    void* q = hardened_realloc(p, size);
    return q != nullptr ? q : fail_enomem();
  }
  Span* s = heap_block_span(p);
  const size_t usable = heap_usable_size_slow(p);
  // Large stays large (a sized free of the new size looks the block up): pages
  // trimmed or taken from the free span after it, or kept.
  if (s->state != SpanState::kSmall && size > kHeapSmallMax &&
      (heap_resize_in_place(p, s, size) || (size <= usable && size > usable / 2)))
    return heap_realloc_kept(p, size);
  void* q = heap_allocate(size);
  if (q == nullptr) return fail_enomem();  // p is untouched
  std::memcpy(q, p, size < usable ? size : usable);
  heap_free(p);
  return q;
}

// mp_realloc's move (heap_realloc): out of line, so that a block that keeps its
// place saves no register.
MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* realloc_move(void* p, size_t size, Span* s,
                                                             size_t c, size_t to) noexcept {
  return heap_realloc_small_move<realloc_slow>(p, size, s, c, to);
}

}  // namespace

extern "C" {

MEMPOOL_HOT_ENTRY void* mp_malloc(size_t size) noexcept {
  if (void* p = heap_try_hit(size); MEMPOOL_LIKELY(p != nullptr)) return p;
  return malloc_miss(size);
}

MEMPOOL_HOT_ENTRY void mp_free(void* p) noexcept {
  heap_free(p);
}

MEMPOOL_ALLOCATION_ENTRY void* mp_calloc(size_t count, size_t size) noexcept {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) return fail_enomem();
  void* p = heap_allocate(bytes);
  if (p == nullptr) return fail_enomem();
  // Large blocks of pages fresh from the OS are zero already: not touching them
  // keeps a big, sparsely used calloc from costing its whole size in RSS.
  const Span* s = g_page_map.lookup(p);
  if (s->state == SpanState::kSmall || s->reused) {
    std::memset(p, 0, bytes);
  } else {
    checker_defined(p, bytes);  // zero pages memcheck saw handed out as undefined
  }
  return p;
}

MEMPOOL_HOT_ENTRY void* mp_realloc(void* p, size_t size) noexcept {
  return heap_realloc<ReallocFit::kSameClass, realloc_move, realloc_slow>(p, size);
}

MEMPOOL_ALLOCATION_ENTRY void* mp_aligned_alloc(size_t alignment, size_t size) noexcept {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  void* p = heap_allocate_aligned(size, alignment);
  return p != nullptr ? p : fail_enomem();
}

MEMPOOL_ALLOCATION_ENTRY int mp_posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = heap_allocate_aligned(size, alignment);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

MEMPOOL_LINE_ALIGNED size_t mp_usable_size(const void* p) noexcept {
  return heap_usable_size(p);
}

int mp_owns(const void* p) noexcept {
  return mempool::owns(p) ? 1 : 0;
}

void mp_collect(void) noexcept {
  mempool::collect();
}

void mp_set_memory_limit(size_t bytes) noexcept {
  mempool::set_memory_limit(bytes);
}

size_t mp_memory_limit(void) noexcept {
  return mempool::memory_limit();
}

}  // extern "C"
