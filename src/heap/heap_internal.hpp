// The heap's hot paths, inlined into heap.cpp and c_api.cpp, and the entry
// points of its cold paths. One screen: size -> class, then the thread cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "mempool/detail/platform.hpp"
#include "mempool/detail/size_classes.hpp"
#include "page_map.hpp"
#include "thread_cache.hpp"

namespace mempool::detail {

// Requests above this fail at once (the address space has 2^47 bytes for users).
inline constexpr std::size_t kHeapMaxRequest = std::size_t{1} << 46;

// Options and the thread-exit key, read and made on first use.
void heap_ensure_ready() noexcept;
// Reads the options now if the heap started before the environment existed (the
// drop-in library's constructor calls it: libc sets `environ` after the dynamic
// loader's first allocations).
void heap_read_options() noexcept;
bool heap_verbose() noexcept;  // MEMPOOL_VERBOSE
// The statistics table to `out`, or to descriptor `fd` when out is nullptr.
void print_heap_stats(std::FILE* out, int fd) noexcept;
std::size_t heap_large_blocks() noexcept;
void* heap_allocate_slow(std::size_t n) noexcept;  // n > kHeapSmallMax
void* heap_allocate_aligned(std::size_t n, std::size_t alignment) noexcept;
void heap_free_slow(void* p, Span* s) noexcept;  // nullptr, large, foreign or misused
void heap_free_sized_checked(void* p, std::size_t n) noexcept;
void heap_free_aligned_checked(void* p, std::size_t n, std::size_t alignment) noexcept;
[[noreturn]] void heap_misuse(const void* p, const char* problem) noexcept;
void checked_on_free(void* p, Span* s) noexcept;
// The span of a block the program holds, misuse reported (nullptr for nullptr).
Span* heap_block_span(const void* p) noexcept;
std::size_t heap_usable_size(const void* p) noexcept;
// Bytes of a large or direct span that start at its block (0 for small spans).
bool heap_resize_in_place(void* p, Span* s, std::size_t n) noexcept;

// The miss path: refill from the central cache (nullptr when out of memory).
void* heap_allocate_class_miss(std::size_t c) noexcept;

MEMPOOL_ALWAYS_INLINE void* heap_allocate_class(std::size_t c) noexcept {
  void* p = heap_pop(c);
  if (MEMPOOL_LIKELY(p != nullptr)) return p;
  return heap_allocate_class_miss(c);
}

// The hit path alone: a block from the cache, or nullptr for anything else (the
// caller then tail-calls its own slow path, so the hit path saves no register).
MEMPOOL_ALWAYS_INLINE void* heap_try_hit(std::size_t n) noexcept {
  // Two copies of the pop, one per granule of the class table, so that neither
  // size range jumps back into the other's code (measured: 1.5-2 ns a pair).
  if (MEMPOOL_LIKELY(n <= kHeapFineMax)) return heap_pop(kHeapClassTable.by_index[(n + 7) >> 3]);
  if (n <= kHeapSmallMax) return heap_pop(kHeapClassTable.by_index[heap_class_index(n)]);
  return nullptr;
}

MEMPOOL_ALWAYS_INLINE void* heap_allocate(std::size_t n) noexcept {
  if (MEMPOOL_LIKELY(n <= kHeapSmallMax)) return heap_allocate_class(heap_class_of(n));
  return heap_allocate_slow(n);
}

MEMPOOL_ALWAYS_INLINE void heap_free(void* p) noexcept {
  const std::uintptr_t entry = g_page_map.lookup_entry(p);
  const std::size_t c = entry & kSpanTagMask;
  if (MEMPOOL_LIKELY(c != 0)) {
    const Span* s = reinterpret_cast<const Span*>(entry - c);
    // Only the start of a block may be freed: (p - start) % size == 0.
    if (MEMPOOL_UNLIKELY(reinterpret_cast<std::uintptr_t>(p) * s->divisor - s->start_divisor >=
                         s->divisor))
      heap_misuse(p, "free of a pointer into the middle of a block");
    if constexpr (kChecked) checked_on_free(p, const_cast<Span*>(s));
    heap_free_to_cache(p, c);
    return;
  }
  heap_free_slow(p, reinterpret_cast<Span*>(entry & ~kSpanTagMask));
}

// Sized free skips the page map: the size gives the class.
MEMPOOL_ALWAYS_INLINE void heap_free_sized(void* p, std::size_t n) noexcept {
  if constexpr (kChecked) {
    heap_free_sized_checked(p, n);
  } else {
    if (MEMPOOL_LIKELY(n <= kHeapSmallMax && p != nullptr)) {
      heap_free_to_cache(p, heap_class_of(n));
      return;
    }
    heap_free(p);
  }
}

}  // namespace mempool::detail
