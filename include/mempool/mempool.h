/* mempool's general heap from C (and C++): the malloc family, with the same
 * contract as the C standard and POSIX.
 *   mp_malloc(0) returns a unique pointer; mp_free(NULL) does nothing;
 *   mp_calloc zeroes and returns NULL with errno = ENOMEM when count * size overflows;
 *   mp_realloc(NULL, n) allocates; mp_realloc(p, 0) frees p and returns NULL (as glibc);
 *   a failed mp_realloc leaves p untouched, and one to a size in the block's size class
 *   returns p itself;
 *   blocks of 16 bytes or more are 16-byte aligned;
 *   mp_posix_memalign returns EINVAL for an alignment that is not a power of two multiple
 *   of sizeof(void*), ENOMEM when out of memory, and leaves *out untouched on failure;
 *   mp_aligned_alloc returns NULL with errno = EINVAL for an alignment that is not a power
 *   of two; every failed allocation sets errno = ENOMEM. */
#ifndef MEMPOOL_MEMPOOL_H
#define MEMPOOL_MEMPOOL_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#define MEMPOOL_NOEXCEPT noexcept
#else
#define MEMPOOL_NOEXCEPT
#endif

void* mp_malloc(size_t size) MEMPOOL_NOEXCEPT;
void* mp_calloc(size_t count, size_t size) MEMPOOL_NOEXCEPT;
void* mp_realloc(void* p, size_t size) MEMPOOL_NOEXCEPT;
void mp_free(void* p) MEMPOOL_NOEXCEPT;
void* mp_aligned_alloc(size_t alignment, size_t size) MEMPOOL_NOEXCEPT;
int mp_posix_memalign(void** out, size_t alignment, size_t size) MEMPOOL_NOEXCEPT;
size_t mp_usable_size(const void* p) MEMPOOL_NOEXCEPT;
/* 1 when p points into the heap's blocks (handed out, or freed and cached), 0
 * otherwise; any pointer may be asked about (a page-map lookup, no lock). In a
 * program with mempool as malloc this tells whether malloc's memory is mempool's. */
int mp_owns(const void* p) MEMPOOL_NOEXCEPT;
/* Gives free memory back to the OS now (see mempool::collect). */
void mp_collect(void) MEMPOOL_NOEXCEPT;
/* The heap profiler (MEMPOOL_PROFILE, MEMPOOL_PROFILE_RATE): writes what is in use
 * now, by allocation stack, to `path` in the format google-pprof reads. 0 on success,
 * else an errno value (EINVAL when the profiler is off). */
int mp_profile_dump(const char* path) MEMPOOL_NOEXCEPT;
/* The same for the heap at its peak so far (see mempool::profile_dump_peak). */
int mp_profile_dump_peak(const char* path) MEMPOOL_NOEXCEPT;
/* The leak check (MEMPOOL_LEAK_CHECK=1): reports on stderr the blocks the program
 * can no longer reach, as at exit, and returns their bytes (0: none, or the check is
 * off). The process goes on. */
size_t mp_leak_check(void) MEMPOOL_NOEXCEPT;
/* The soft memory limit in bytes, 0 for none (see mempool::set_memory_limit):
 * before the heap grows past it, free memory goes back to the OS and the calling
 * thread's and the central cache's blocks to the page heap; if that is not enough
 * the heap grows anyway (no allocation fails because of it). It counts resident
 * bytes: mapped and not given back. MEMPOOL_MEMORY_LIMIT sets it at start; this
 * call overrides it. */
void mp_set_memory_limit(size_t bytes) MEMPOOL_NOEXCEPT;
size_t mp_memory_limit(void) MEMPOOL_NOEXCEPT;
/* Writes the heap statistics as a table to `out` (stderr when NULL): totals, the
 * memory limit, and a row per size class that holds spans. */
void mp_stats_print(FILE* out) MEMPOOL_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#undef MEMPOOL_NOEXCEPT
#endif /* MEMPOOL_MEMPOOL_H */
