// The C allocator of the whole process: malloc and its family, exported under
// their standard names, over the general heap. Built into libmempool-malloc.so
// (LD_PRELOAD) and into programs that link mempool::override.
//
// glibc documents this replacement ("Replacing malloc" in its manual): every
// function below must be replaced together, and libc's own calls (strdup,
// fopen, the dynamic loader after relocation) then land here too.
#include <malloc.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "../heap/heap_internal.hpp"
#include "../options.hpp"
#include "mempool/mempool.h"
#include "system_allocator.hpp"

using namespace mempool::detail;

#ifndef MEMPOOL_VERSION_STRING
#define MEMPOOL_VERSION_STRING "unknown"
#endif

// Misuse and foreign blocks: a pointer the heap does not own is glibc's when its
// chunk header says so (given back to glibc), otherwise a bad free.
extern "C" bool mempool_free_foreign(void* p) noexcept {
  if (!system_owns(p)) return false;
  system_free(p);
  return true;
}

namespace {

bool is_heap_block(const void* p) noexcept {
  return g_page_map.lookup(p) != nullptr;
}

// realloc of a glibc block: the new block comes from mempool, so the program
// moves over to mempool as it reallocates.
MEMPOOL_COLD MEMPOOL_ALLOCATION_ENTRY void* realloc_foreign(void* p, std::size_t n) noexcept {
  if (!system_owns(p)) heap_misuse(p, "realloc of a pointer not allocated by mempool or glibc");
  const std::size_t old = system_usable_size(p);
  if (n == 0) {
    system_free(p);
    return nullptr;
  }
  void* q = mp_malloc(n);
  if (q == nullptr) return nullptr;  // p stays valid, errno = ENOMEM
  __builtin_memcpy(q, p, old < n ? old : n);
  system_free(p);
  return q;
}

// realloc of anything but a small block to a small size: nullptr, size 0 or large,
// large, direct and glibc blocks (heap_realloc).
MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* realloc_other(void* p, std::size_t n) noexcept {
  if (MEMPOOL_UNLIKELY(p != nullptr && !is_heap_block(p))) return realloc_foreign(p, n);
  return mp_realloc(p, n);
}

// realloc's move of a small block (heap_realloc): out of line, so that a block that
// keeps its place saves no register; on a miss of the thread cache, mp_realloc.
MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* realloc_move(void* p, std::size_t n, Span* s,
                                                             std::size_t c,
                                                             std::size_t to) noexcept {
  return heap_realloc_small_move<mp_realloc>(p, n, s, c, to);
}

// malloc_usable_size of nullptr, a large block or a glibc block.
MEMPOOL_NOINLINE std::size_t usable_size_slow(void* p) noexcept {
  if (p != nullptr && !is_heap_block(p)) {
    if (!system_owns(p)) heap_misuse(p, "malloc_usable_size of a pointer not allocated by mempool");
    return system_usable_size(p);
  }
  return mp_usable_size(p);
}

// glibc's memalign accepts any alignment: a non-power of two is rounded up.
MEMPOOL_ALLOCATION_ENTRY void* memalign_any(std::size_t alignment, std::size_t n) noexcept {
  if (alignment > (std::size_t{1} << 62)) {
    errno = EINVAL;
    return nullptr;
  }
  std::size_t a = alignment < sizeof(void*) ? sizeof(void*) : alignment;
  if ((a & (a - 1)) != 0) a = std::size_t{1} << (64 - __builtin_clzll(a));
  return mp_aligned_alloc(a, n);
}

// MEMPOOL_VERBOSE=1 says, as the program starts, that mempool is its malloc, and whether
// it is the hardened library.
__attribute__((constructor)) void announce() noexcept {
  heap_read_options();
  if (heap_verbose()) {
    write_stderr_line("version " MEMPOOL_VERSION_STRING
                      " active as malloc and operator new in this process",
                      kHardened ? " (hardened)" : "");
  }
}

}  // namespace

extern "C" {

// The hit paths inline, so a program's call lands on them without a jump more;
// a miss (or a large block) goes through mp_malloc, which sets errno.
MEMPOOL_HOT_ENTRY void* malloc(size_t n) noexcept {
  if (void* p = heap_try_hit(n); MEMPOOL_LIKELY(p != nullptr)) return p;
  return mp_malloc(n);
}

MEMPOOL_HOT_ENTRY void free(void* p) noexcept {
  heap_free(p);
}

MEMPOOL_ALLOCATION_ENTRY void* calloc(size_t count, size_t n) noexcept {
  return mp_calloc(count, n);
}

MEMPOOL_HOT_ENTRY void* realloc(void* p, size_t n) noexcept {
  return heap_realloc<ReallocFit::kHalfOrMore, realloc_move, realloc_other>(p, n);
}

MEMPOOL_ALLOCATION_ENTRY void* reallocarray(void* p, size_t count, size_t n) noexcept {
  size_t bytes;
  if (__builtin_mul_overflow(count, n, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, bytes);
}

MEMPOOL_ALLOCATION_ENTRY void* aligned_alloc(size_t alignment, size_t n) noexcept {
  return mp_aligned_alloc(alignment, n);
}

MEMPOOL_ALLOCATION_ENTRY int posix_memalign(void** out, size_t alignment, size_t n) noexcept {
  return mp_posix_memalign(out, alignment, n);
}

MEMPOOL_ALLOCATION_ENTRY void* memalign(size_t alignment, size_t n) noexcept {
  return memalign_any(alignment, n);
}

MEMPOOL_ALLOCATION_ENTRY void* valloc(size_t n) noexcept {
  return mp_aligned_alloc(page_size(), n);
}

MEMPOOL_ALLOCATION_ENTRY void* pvalloc(size_t n) noexcept {
  const std::size_t page = page_size();
  if (n > SIZE_MAX - page) {
    errno = ENOMEM;
    return nullptr;
  }
  return mp_aligned_alloc(page, n == 0 ? page : (n + page - 1) & ~(page - 1));
}

MEMPOOL_LINE_ALIGNED size_t malloc_usable_size(void* p) noexcept {
  if (const size_t n = heap_small_usable_size(p); MEMPOOL_LIKELY(n != 0)) return n;
  return usable_size_slow(p);
}

// glibc's name for giving memory back (malloc_introspection.cpp has its
// statistics: mallinfo2, mallinfo, malloc_info, malloc_stats).
int malloc_trim(size_t /*pad*/) noexcept {
  mp_collect();
  return 1;
}

}  // extern "C"
