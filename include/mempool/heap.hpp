// The general heap: any size, any thread, free without a size.
//
//   void* p = mempool::allocate(n);                        // std::bad_alloc when out of memory
//   void* a = mempool::allocate(n, std::align_val_t{64});  // any power-of-two alignment
//   void* q = mempool::try_allocate(n);                    // nullptr instead of throwing
//   mempool::deallocate(p);                                // size-free (the page map knows)
//   mempool::deallocate(q, n);                             // sized: skips the page-map lookup
//
// Three tiers (docs/architecture.md): a per-thread cache of free blocks per size
// class (no lock, no atomic read-modify-write), a central cache per class that
// moves blocks between threads in batches, and a page heap of spans over memory
// mapped from the OS, which gives free pages back with madvise.
//
// Blocks of 16 bytes or more are 16-byte aligned; a request of n bytes gets a
// block of at least n (usable_size says how much). Freeing a pointer the heap did
// not hand out, or a pointer into the middle of a block, stops the process with
// one line naming it; in checked builds double frees and wrong sizes do too, and
// the hardened drop-in library checks more (docs/options.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

#include "mempool/detail/heap_thread_cache.hpp"
#include "mempool/detail/platform.hpp"
#include "mempool/detail/size_classes.hpp"

namespace mempool {

namespace detail {
// Out of line (src/heap/heap.cpp): any size, and every thread-cache miss.
[[nodiscard]] MEMPOOL_API void* heap_allocate_or_throw(std::size_t n);
[[nodiscard]] MEMPOOL_API void* heap_try_allocate(std::size_t n) noexcept;
MEMPOOL_API void heap_deallocate_sized(void* p, std::size_t n) noexcept;

// True for a size the compiler knows (after inlining) and that names a class.
MEMPOOL_ALWAYS_INLINE bool heap_constant_small_size(std::size_t n) noexcept {
  return __builtin_constant_p(n) && !kChecked && !kHardened && n <= kHeapSmallMax;
}

// The inline hit: a block for a constant size, nullptr otherwise or on a miss.
MEMPOOL_ALWAYS_INLINE void* heap_pop_constant_size(std::size_t n) noexcept {
  return heap_constant_small_size(n) ? heap_pop_counted(heap_class_of(n), n) : nullptr;
}
}  // namespace detail

// allocate, try_allocate and the sized deallocate are inline for one case: a size
// the compiler knows (sizeof(T), a constant). Its class is then a constant too,
// and the thread-cache hit is a pop or push at a fixed TLS address, which the CPU
// forwards from the last store without waiting (measured: a pair in 2-3 ns
// instead of 6). Any other size, a miss and the checked and hardened builds go out
// of line.

// Throws std::bad_alloc when the system is out of memory or n is absurd (more than
// the address space can hold). allocate(0) returns a unique pointer to free later.
[[nodiscard]] MEMPOOL_ALWAYS_INLINE void* allocate(std::size_t n) {
  if (void* p = detail::heap_pop_constant_size(n); MEMPOOL_LIKELY(p != nullptr)) return p;
  return detail::heap_allocate_or_throw(n);
}
// `alignment` is any power of two; std::bad_alloc for one that is not.
[[nodiscard]] MEMPOOL_API void* allocate(std::size_t n, std::align_val_t alignment);
// The same, with nullptr instead of an exception.
[[nodiscard]] MEMPOOL_ALWAYS_INLINE void* try_allocate(std::size_t n) noexcept {
  if (void* p = detail::heap_pop_constant_size(n); MEMPOOL_LIKELY(p != nullptr)) return p;
  return detail::heap_try_allocate(n);
}
[[nodiscard]] MEMPOOL_API void* try_allocate(std::size_t n, std::align_val_t alignment) noexcept;

// Size-free: any pointer that allocate/try_allocate returned; nullptr does nothing.
MEMPOOL_API void deallocate(void* p) noexcept;
// Sized: n must be the size asked for (or anything up to usable_size(p)). A block
// from an aligned allocate must be freed with its alignment (the three-argument
// form), or without a size: deallocate(p, n) would name the wrong class.
MEMPOOL_ALWAYS_INLINE void deallocate(void* p, std::size_t n) noexcept {
  detail::ThreadCache& t = detail::this_thread_cache();
  if (detail::heap_constant_small_size(n) &&
      MEMPOOL_LIKELY(p != nullptr && t.sized_free_takes(n))) {
    detail::heap_free_to_cache(t, p, detail::heap_class_of(n));
    return;
  }
  detail::heap_deallocate_sized(p, n);
}
MEMPOOL_API void deallocate(void* p, std::size_t n, std::align_val_t alignment) noexcept;

// Bytes the block really has (>= the size asked for); 0 for nullptr.
[[nodiscard]] MEMPOOL_API std::size_t usable_size(const void* p) noexcept;

// True when p lies in a block the heap has handed out and not taken back (for
// tests and assertions: a page-map lookup, no lock).
[[nodiscard]] MEMPOOL_API bool owns(const void* p) noexcept;

// Gives free memory back to the OS now: the calling thread's cache, the central
// caches' spare batches and empty spans, and every free page of the page heap.
MEMPOOL_API void collect() noexcept;

// The heap profiler (docs/options.md, MEMPOOL_PROFILE): writes what is in use now,
// by allocation stack, to `path` in the format google-pprof reads. False when the
// profiler is off (MEMPOOL_PROFILE and MEMPOOL_PROFILE_RATE unset) or the file
// cannot be written (errno says why).
MEMPOOL_API bool profile_dump(const char* path) noexcept;
// The same, for the heap at its peak so far (to within 1/16 of its bytes in use: a
// snapshot is taken each time the estimate passes the last one's by a sixteenth, from
// 1 MiB on; an empty profile before). MEMPOOL_PROFILE writes it at exit too, beside the
// other ("x.heap": "x.peak.heap", else "x.peak").
MEMPOOL_API bool profile_dump_peak(const char* path) noexcept;

// The leak check (docs/options.md, MEMPOOL_LEAK_CHECK=1): reports on stderr the blocks
// the program can no longer reach, grouped by allocation stack, as it does at exit, and
// returns their bytes (0: none, or the check is off). The process goes on.
MEMPOOL_API std::size_t leak_check() noexcept;

// The soft memory limit (tcmalloc's): a number of resident bytes (HeapStats::
// bytes_resident: mapped and not given back to the OS), 0 for none (the default,
// or MEMPOOL_MEMORY_LIMIT). When the heap must grow past it (map memory, or fault
// in pages it gave back), it first gives back its free pages and cached mappings,
// then, at most once per sixteenth of the limit it grows by, the calling thread's
// cache and the central cache's kept batches and empty spans. If
// that is not enough it grows anyway: the limit never makes an allocation fail.
// Other threads' caches are theirs: they shrink as those threads flush.
MEMPOOL_API void set_memory_limit(std::size_t bytes) noexcept;
[[nodiscard]] MEMPOOL_API std::size_t memory_limit() noexcept;

// The heap's size classes: 1 byte to 256 KiB. Larger requests get whole pages.
inline constexpr std::size_t kHeapMaxSmallSize = std::size_t{256} * 1024;
inline constexpr std::size_t kHeapMaxClasses = 128;

// One size class. Its spans hold its blocks and a tail too short for one more:
//   bytes_reserved = (blocks_in_use + blocks_in_thread_caches + blocks_in_central_cache)
//                    x block_size + the spans' tails.
struct HeapClassStats {
  std::size_t block_size = 0;               // bytes per block of this class
  std::size_t blocks_in_use = 0;            // handed to the program and not freed
  std::size_t bytes_in_use = 0;             // blocks_in_use x block_size
  std::size_t blocks_cached = 0;            // free and ready: thread caches and kept batches
  std::size_t blocks_in_thread_caches = 0;  // free, in the threads' caches (and their spans)
  std::size_t blocks_in_central_cache = 0;  // free, in kept batches and in spans (carved or not)
  std::size_t spans = 0;                    // spans carved into this class
  std::size_t empty_spans = 0;              // of those, kept empty for the class's next span
  std::size_t bytes_reserved = 0;           // bytes of those spans
};

// A snapshot, taken without allocating, from any thread. Other threads keep
// running while it is taken, so the numbers of a busy heap are approximate; when
// the heap is quiet (no other thread allocating or freeing) each is exact and
//   bytes_mapped = bytes_in_use + bytes_in_thread_caches + bytes_in_central_cache
//                  + bytes_free_in_page_heap + bytes_returned_to_os + bytes_span_tails
// (bytes_metadata comes on top: what the heap took from the OS is their sum).
struct HeapStats {
  std::size_t bytes_in_use = 0;             // handed to the program: small blocks, large spans
                                            // and direct mappings
  std::size_t bytes_in_thread_caches = 0;   // free blocks held by thread caches (and the
                                            // local lists of the spans threads own)
  std::size_t bytes_in_central_cache = 0;   // free blocks held by the central cache and its spans
  std::size_t bytes_free_in_page_heap = 0;  // free pages still resident, cached mappings (and
                                            // the hardened heap's cached large blocks) included
  std::size_t bytes_returned_to_os = 0;     // free pages given back (madvise) or never touched
  std::size_t bytes_span_tails = 0;         // ends of small spans too short for a block
  std::size_t bytes_mapped = 0;             // everything mapped from the OS, heap metadata aside
  std::size_t bytes_mapped_peak = 0;        // the most bytes_mapped has been
  std::size_t bytes_resident = 0;           // bytes_mapped - bytes_returned_to_os: what the
                                            // memory limit compares (an upper bound)
  std::size_t bytes_metadata = 0;           // spans, page map leaves, checked-build bitmaps
  std::size_t large_blocks_in_use = 0;      // blocks over kHeapMaxSmallSize
  std::size_t direct_mappings = 0;          // of those, blocks in a mapping of their own
  std::size_t bytes_direct = 0;             // their bytes (part of bytes_in_use)
  std::size_t cached_mappings = 0;          // freed direct mappings kept for reuse
  std::size_t bytes_cached_mappings = 0;    // their bytes (part of bytes_free_in_page_heap)
  std::size_t free_spans = 0;               // runs of free pages in the page heap
  std::size_t memory_limit = 0;             // set_memory_limit (0: none)
  std::size_t memory_limit_hits = 0;        // growths that found the heap above the limit
  bool huge_pages = false;                  // the heap asks for transparent huge pages
                                            // (MEMPOOL_THP and the system allow them)
  std::size_t bytes_huge_advised = 0;       // of bytes_mapped, advised MADV_HUGEPAGE
  std::size_t bytes_free_partial_huge = 0;  // of bytes_free_in_page_heap, in huge pages
                                            // partly in use (kept until they fill or break)
  std::size_t huge_pages_broken = 0;        // huge pages partly given back under pressure
  std::size_t thread_caches = 0;            // threads with a cache now
  std::size_t class_count = 0;              // entries of `classes` in use
  HeapClassStats classes[kHeapMaxClasses];
};

[[nodiscard]] MEMPOOL_API HeapStats stats() noexcept;

// The heap as a pool object for the adapters (allocator.hpp): Allocator<T>,
// make_unique, make_shared and default_resource() use it. Stateless: every
// instance is the one process-wide heap.
class MEMPOOL_API Heap {
 public:
  [[nodiscard]] static Heap& global() noexcept;
  [[nodiscard]] void* allocate(std::size_t n) { return mempool::allocate(n); }
  [[nodiscard]] void* allocate(std::size_t n, std::align_val_t alignment) {
    return mempool::allocate(n, alignment);
  }
  [[nodiscard]] void* try_allocate(std::size_t n) noexcept { return mempool::try_allocate(n); }
  void deallocate(void* p, std::size_t n) noexcept { mempool::deallocate(p, n); }
  void deallocate(void* p, std::size_t n, std::align_val_t alignment) noexcept {
    mempool::deallocate(p, n, alignment);
  }
  // What a block of n bytes is aligned to without asking: 16 from 16 bytes on.
  [[nodiscard]] static constexpr std::size_t alignment(std::size_t n) noexcept {
    return n >= 16 ? 16 : 8;
  }
};

}  // namespace mempool
