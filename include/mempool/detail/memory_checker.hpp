// The memory checkers, told what the allocators do, so that they report leaks,
// uses after free and double frees through the heap and the pools as they do
// through malloc:
//  - Valgrind's memcheck (MEMPOOL_VALGRIND=ON): a block handed out is a malloc'd
//    block to it, a block given back a freed one, each pool a memcheck "mempool".
//    Outside valgrind each call costs a few instructions (a client request is a
//    no-op sequence the CPU runs through).
//  - AddressSanitizer (MEMPOOL_ASAN=1, which the build exports where it compiles
//    mempool itself with MEMPOOL_SANITIZE=address, and code compiled with
//    -fsanitize=address): a free block is poisoned, so a read or write through a
//    stale pointer stops the program with ASan's "use-after-poison" report. Both
//    sides must agree: the library poisons blocks that inline code hands out, and
//    the other way round.
// Without either, every call here is empty. The hardened build (MEMPOOL_HARDENED=1)
// poisons nothing: its heap reads and writes the fill and the canaries of free blocks
// (src/heap/hardened.cpp), so ASan checks only the rest of the program there (the
// heap_hardened fuzzers run it so).
//
// The allocators keep their free-list links inside free blocks, which both
// checkers then hold inaccessible: the link accessors (free_list.hpp,
// atomic_stack.hpp) open the link word around their own reads and writes.
#pragma once

#include <cstddef>

#include "mempool/detail/platform.hpp"

#if defined(MEMPOOL_VALGRIND) && MEMPOOL_VALGRIND
#include <valgrind/memcheck.h>
#define MEMPOOL_VALGRIND_BUILD 1
#else
#define MEMPOOL_VALGRIND_BUILD 0
#endif

#if defined(MEMPOOL_ASAN) && MEMPOOL_ASAN && !MEMPOOL_HARDENED_BUILD
#if defined(__SANITIZE_ADDRESS__)
#define MEMPOOL_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEMPOOL_ASAN_BUILD 1
#endif
#endif
#endif
#ifndef MEMPOOL_ASAN_BUILD
#define MEMPOOL_ASAN_BUILD 0
#endif
#if MEMPOOL_ASAN_BUILD
#include <sanitizer/asan_interface.h>
#endif

namespace mempool::detail {

inline constexpr bool kValgrind = MEMPOOL_VALGRIND_BUILD != 0;
inline constexpr bool kAddressSanitizer = MEMPOOL_ASAN_BUILD != 0;
// Whether any checker is listening: the hot paths skip computing the hooks'
// arguments otherwise.
inline constexpr bool kMemoryChecker = kValgrind || kAddressSanitizer;

MEMPOOL_ALWAYS_INLINE void asan_poison(const void* p, std::size_t bytes) noexcept {
#if MEMPOOL_ASAN_BUILD
  ASAN_POISON_MEMORY_REGION(p, bytes);
#else
  (void)p, (void)bytes;
#endif
}
MEMPOOL_ALWAYS_INLINE void asan_unpoison(const void* p, std::size_t bytes) noexcept {
#if MEMPOOL_ASAN_BUILD
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#else
  (void)p, (void)bytes;
#endif
}

// The heap's blocks: malloc-like blocks of their usable size (what
// malloc_usable_size promises the program may use).
MEMPOOL_ALWAYS_INLINE void checker_allocated(const void* p, std::size_t bytes,
                                             bool zeroed = false) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MALLOCLIKE_BLOCK(p, bytes, 0, zeroed ? 1 : 0);
#endif
  (void)zeroed;
  asan_unpoison(p, bytes);
}
MEMPOOL_ALWAYS_INLINE void checker_freed(const void* p, std::size_t bytes) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_FREELIKE_BLOCK(p, 0);
#endif
  asan_poison(p, bytes);
}
MEMPOOL_ALWAYS_INLINE void checker_resized(const void* p, std::size_t old_bytes,
                                           std::size_t new_bytes) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_RESIZEINPLACE_BLOCK(p, old_bytes, new_bytes, 0);
#endif
  const auto* bytes = static_cast<const char*>(p);
  if (new_bytes > old_bytes) {
    asan_unpoison(bytes + old_bytes, new_bytes - old_bytes);
  } else {
    asan_poison(bytes + new_bytes, old_bytes - new_bytes);
  }
}
// Bytes the heap knows to be zero (fresh pages of a calloc it did not clear).
MEMPOOL_ALWAYS_INLINE void checker_defined(const void* p, std::size_t bytes) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MAKE_MEM_DEFINED(p, bytes);
#else
  (void)p, (void)bytes;
#endif
}
// Memory going back to whoever gave it (the OS, a caller's buffer): accessible
// again, whatever the allocator had poisoned in it.
MEMPOOL_ALWAYS_INLINE void checker_returned(const void* p, std::size_t bytes) noexcept {
  checker_defined(p, bytes);
  asan_unpoison(p, bytes);
}

// The pools: each a memcheck "mempool" anchored at the pool object, so that
// destroying a pool frees what it still held, and only lost blocks are leaks.
MEMPOOL_ALWAYS_INLINE void checker_pool_created(const void* pool) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_CREATE_MEMPOOL(pool, 0, 0);
#else
  (void)pool;
#endif
}
MEMPOOL_ALWAYS_INLINE void checker_pool_destroyed(const void* pool) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_DESTROY_MEMPOOL(pool);
#else
  (void)pool;
#endif
}
MEMPOOL_ALWAYS_INLINE void checker_pool_moved(const void* from, const void* to) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MOVE_MEMPOOL(from, to);
#else
  (void)from, (void)to;
#endif
}
MEMPOOL_ALWAYS_INLINE void checker_pool_allocated(const void* pool, const void* p,
                                                  std::size_t bytes) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MEMPOOL_ALLOC(pool, p, bytes);
#endif
  (void)pool;
  asan_unpoison(p, bytes);
}
MEMPOOL_ALWAYS_INLINE void checker_pool_freed(const void* pool, const void* p,
                                              std::size_t bytes) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MEMPOOL_FREE(pool, p);
#endif
  (void)pool;
  asan_poison(p, bytes);
}

// Around the allocator's own access to the link word of a free block.
MEMPOOL_ALWAYS_INLINE void checker_open_link(const void* word) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MAKE_MEM_DEFINED(word, sizeof(void*));
#endif
  asan_unpoison(word, sizeof(void*));
}
MEMPOOL_ALWAYS_INLINE void checker_close_link(const void* word) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MAKE_MEM_NOACCESS(word, sizeof(void*));
#endif
  asan_poison(word, sizeof(void*));
}

// Around a read that may hit a block another thread has just taken (the lock-free
// stack's pop, atomic_stack.hpp): its value is thrown away if so, and opening or
// closing that block's word would change what the checker knows of a live block.
// For AddressSanitizer the reading function is excluded from instrumentation
// instead (no_sanitize("address")).
MEMPOOL_ALWAYS_INLINE void checker_quiet_begin() noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_DISABLE_ERROR_REPORTING;
#endif
}
MEMPOOL_ALWAYS_INLINE void checker_quiet_end() noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_ENABLE_ERROR_REPORTING;
#endif
}

}  // namespace mempool::detail
