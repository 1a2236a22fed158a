// Valgrind's memcheck, told what the allocators do (MEMPOOL_VALGRIND=ON): a block
// handed out is a malloc'd block to it, a block given back a freed one, so it
// reports leaks, uses after free and double frees through the heap and the pools
// as it does through malloc. Without the option every call here is empty; with
// it, outside valgrind each costs a few instructions (a client request is a
// no-op sequence the CPU runs through).
//
// The allocators keep their free-list links inside free blocks, which memcheck
// then holds inaccessible: the link accessors (free_list.hpp, atomic_stack.hpp)
// open the link word around their own reads and writes.
#pragma once

#include <cstddef>

#include "mempool/detail/platform.hpp"

#if defined(MEMPOOL_VALGRIND) && MEMPOOL_VALGRIND
#include <valgrind/memcheck.h>
#define MEMPOOL_VALGRIND_BUILD 1
#else
#define MEMPOOL_VALGRIND_BUILD 0
#endif

namespace mempool::detail {

inline constexpr bool kValgrind = MEMPOOL_VALGRIND_BUILD != 0;

// The heap's blocks: malloc-like blocks of their usable size (what
// malloc_usable_size promises the program may use).
MEMPOOL_ALWAYS_INLINE void valgrind_allocated(const void* p, std::size_t bytes,
                                              bool zeroed = false) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MALLOCLIKE_BLOCK(p, bytes, 0, zeroed ? 1 : 0);
#else
  (void)p, (void)bytes, (void)zeroed;
#endif
}
MEMPOOL_ALWAYS_INLINE void valgrind_freed(const void* p) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_FREELIKE_BLOCK(p, 0);
#else
  (void)p;
#endif
}
MEMPOOL_ALWAYS_INLINE void valgrind_resized(const void* p, std::size_t old_bytes,
                                            std::size_t new_bytes) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_RESIZEINPLACE_BLOCK(p, old_bytes, new_bytes, 0);
#else
  (void)p, (void)old_bytes, (void)new_bytes;
#endif
}
// Bytes the heap knows to be zero (fresh pages of a calloc it did not clear).
MEMPOOL_ALWAYS_INLINE void valgrind_defined(const void* p, std::size_t bytes) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MAKE_MEM_DEFINED(p, bytes);
#else
  (void)p, (void)bytes;
#endif
}

// The pools: each a memcheck "mempool" anchored at the pool object, so that
// destroying a pool frees what it still held, and only lost blocks are leaks.
MEMPOOL_ALWAYS_INLINE void valgrind_pool_created(const void* pool) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_CREATE_MEMPOOL(pool, 0, 0);
#else
  (void)pool;
#endif
}
MEMPOOL_ALWAYS_INLINE void valgrind_pool_destroyed(const void* pool) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_DESTROY_MEMPOOL(pool);
#else
  (void)pool;
#endif
}
MEMPOOL_ALWAYS_INLINE void valgrind_pool_moved(const void* from, const void* to) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MOVE_MEMPOOL(from, to);
#else
  (void)from, (void)to;
#endif
}
MEMPOOL_ALWAYS_INLINE void valgrind_pool_allocated(const void* pool, const void* p,
                                                   std::size_t bytes) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MEMPOOL_ALLOC(pool, p, bytes);
#else
  (void)pool, (void)p, (void)bytes;
#endif
}
MEMPOOL_ALWAYS_INLINE void valgrind_pool_freed(const void* pool, const void* p) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MEMPOOL_FREE(pool, p);
#else
  (void)pool, (void)p;
#endif
}

// Around the allocator's own access to the link word of a free block.
MEMPOOL_ALWAYS_INLINE void valgrind_open_link(const void* word) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MAKE_MEM_DEFINED(word, sizeof(void*));
#else
  (void)word;
#endif
}
MEMPOOL_ALWAYS_INLINE void valgrind_close_link(const void* word) noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_MAKE_MEM_NOACCESS(word, sizeof(void*));
#else
  (void)word;
#endif
}

// Around a read that may hit a block another thread has just taken (the lock-free
// stack's pop, atomic_stack.hpp): its value is thrown away if so, and opening or
// closing that block's word would change what memcheck knows of a live block.
MEMPOOL_ALWAYS_INLINE void valgrind_quiet_begin() noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_DISABLE_ERROR_REPORTING;
#endif
}
MEMPOOL_ALWAYS_INLINE void valgrind_quiet_end() noexcept {
#if MEMPOOL_VALGRIND_BUILD
  VALGRIND_ENABLE_ERROR_REPORTING;
#endif
}

}  // namespace mempool::detail
