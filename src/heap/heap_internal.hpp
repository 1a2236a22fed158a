// The heap's hot paths, inlined into heap.cpp and c_api.cpp, and the entry
// points of its cold paths. One screen: size -> class, then the thread cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "class_info.hpp"
#include "leak_check.hpp"
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
// MEMPOOL_DIRECT_MAP_THRESHOLD, read and set (tests: the set is not thread-safe).
std::size_t heap_direct_map_threshold() noexcept;
void heap_set_direct_map_threshold(std::size_t bytes) noexcept;
// The statistics table to `out`, or to descriptor `fd` when out is nullptr.
void print_heap_stats(std::FILE* out, int fd) noexcept;
std::size_t heap_large_blocks() noexcept;
void* heap_allocate_slow(std::size_t n) noexcept;                            // n > kHeapSmallMax
void* heap_allocate_aligned(std::size_t n, std::size_t alignment) noexcept;  // counted
void* heap_allocate_aligned_uncounted(std::size_t n, std::size_t alignment) noexcept;
void heap_free_slow(void* p, Span* s) noexcept;  // nullptr, large, foreign or misused
void heap_free_sized_checked(void* p, std::size_t n) noexcept;
void heap_free_aligned_checked(void* p, std::size_t n, std::size_t alignment) noexcept;
[[noreturn]] void heap_misuse(const void* p, const char* problem) noexcept;
void checked_on_free(void* p, Span* s) noexcept;
// The span of a block the program holds, misuse reported (nullptr for nullptr).
Span* heap_block_span(const void* p) noexcept;
// Usable bytes of any block (large and direct ones too), misuse reported.
std::size_t heap_usable_size_slow(const void* p) noexcept;
// Bytes of a large or direct span that start at its block (0 for small spans).
bool heap_resize_in_place(void* p, Span* s, std::size_t n) noexcept;

// The profiler's slow path (heap_sample_due said so): a block of n bytes, aligned to
// `alignment` (0: the default), in a span of its own that records its allocation
// stack, or an ordinary block when the profiler is off (the countdown then set to
// "never") or busy on this thread. src/heap/heap_profiler.cpp.
void* heap_allocate_sampled(std::size_t n, std::size_t alignment) noexcept;
// Span s (large or direct, sampled) is about to be freed: its sample leaves the profile.
void heap_profile_on_free(Span* s) noexcept;
// Hardened builds: the large allocation path (a guard page, the slack filled), which a
// sampled block takes too.
void* hardened_allocate_large_block(std::size_t n, std::size_t alignment) noexcept;

// The miss path: refill from the central cache (nullptr when out of memory).
void* heap_allocate_class_miss(std::size_t c) noexcept;
// A large block (n > kHeapSmallMax, or an alignment no class gives, or a sample)
// from the page heap or a mapping of its own; hardened builds: the free of its span.
void* heap_allocate_large(std::size_t n, std::size_t alignment) noexcept;
void heap_free_large_span(Span* s) noexcept;
// The class an aligned request of n bytes gets: 0 for a large span.
std::size_t heap_aligned_class(std::size_t n, std::size_t alignment) noexcept;

// The hardened build (kHardened, src/heap/hardened.cpp): each function below
// replaces the hit path of the same name, so that every block of a guarded span is
// checked (and the others as in the default build).
void* hardened_allocate(std::size_t n) noexcept;
// Its hit path, inline below (hardened_try_hit), serves a request of n bytes from its
// class as the default build does. A guarded span lays its blocks out `kHardenedGuardedPad`
// bytes apart beyond their class's size, so that any request of the class fits with
// its canary after it (16, which keeps blocks 16-byte aligned).
inline constexpr std::size_t kHardenedGuardedPad = 16;
constexpr std::size_t hardened_guarded_stride(std::size_t size) noexcept {
  return size + kHardenedGuardedPad;
}
static_assert(heap_block_start_tests_exact(kHardenedGuardedPad));
// Block p of class c, off a list, does not hold the free mark in word 1: a block of a
// guarded span (its fill is there), checked and handed out; one of another span was
// written after its free, and its check stops the process. (Returns p: non-null, so
// that the hit path tail-calls it.)
__attribute__((returns_nonnull)) void* hardened_hand_out_unmarked(void* p, std::size_t c,
                                                                  std::size_t n) noexcept;
void* hardened_allocate_aligned(std::size_t n, std::size_t alignment) noexcept;
void hardened_free(void* p) noexcept;
void hardened_free_sized(void* p, std::size_t n) noexcept;
std::size_t hardened_usable_size(const void* p) noexcept;
// Its small blocks only (checked), 0 for anything else, with one page-map lookup.
std::size_t hardened_small_usable_size(const void* p) noexcept;
// p a block of the heap, n not 0; nullptr when out of memory (p stays valid).
void* hardened_realloc(void* p, std::size_t n) noexcept;
// A large block about to be freed (the page map's checks passed): its slack checked;
// false when it is not to be freed now (kept with its guard page for reuse).
bool hardened_release_large(void* p, Span* s) noexcept;
// Frees the large blocks kept for reuse (collect()); the lock of that cache (fork).
void hardened_collect() noexcept;
// The large blocks kept for reuse now, and their bytes: freed, though their spans are
// still lent out by the page heap (stats() counts them free, not in use).
struct HardenedCached {
  std::size_t blocks = 0;
  std::size_t bytes = 0;
};
HardenedCached hardened_cached() noexcept;
void hardened_lock() noexcept;
void hardened_unlock() noexcept;
// A fresh span of class c (central cache lock held): guarded or not (1 in `sample`
// spans, at random); a guarded one's blocks laid out at the guarded stride (its
// capacity and divisor set for it), filled as free ones and linked into s->free_blocks
// in a random order, another's left to be carved.
void hardened_prepare_span(Span* s, std::size_t c) noexcept;
// MEMPOOL_HARDENED_SEED: that order, and which spans are guarded, follow the seed
// instead of the secret (0). MEMPOOL_HARDENED_SAMPLE: 1 in `sample` fresh small spans,
// and large blocks of the page heap, is guarded (0 and 1: every one).
void hardened_set_sampling(std::uint64_t seed, std::uint64_t sample) noexcept;

MEMPOOL_ALWAYS_INLINE void* heap_allocate_class(std::size_t c) noexcept {
  void* p = heap_pop(c);
  if (MEMPOOL_LIKELY(p != nullptr)) return p;
  return heap_allocate_class_miss(c);
}

// Free block p of class c, its link zeroed, taken off a list by the hardened heap: a
// block of an unguarded span holds the free mark in word 1 (heap_thread_cache.hpp), and
// is handed out as in the default build; any other goes out of line. One compare with
// the key the pop loaded, where asking the page map would be a dozen instructions.
MEMPOOL_ALWAYS_INLINE void* hardened_hand_out(void* p, std::size_t c, std::size_t n) noexcept {
  auto* b = static_cast<FreeBlock*>(p);
  // The key first: read after the mark, the key's asm (a "memory" clobber) would make the
  // compiler load the mark into a register of its own, one instruction more.
  const std::uintptr_t key = this_thread_cache().key();
  if (MEMPOOL_LIKELY(b->word_at(kHeapFreeMarkOffset) == key)) {
    b->clear_word_at(kHeapFreeMarkOffset);
    return p;
  }
  return hardened_hand_out_unmarked(p, c, n);
}

MEMPOOL_ALWAYS_INLINE void* hardened_try_hit(std::size_t n) noexcept {
  if (MEMPOOL_UNLIKELY(n > kHeapSmallMax)) return nullptr;
  const std::size_t c = heap_class_of(n);
  void* p = heap_pop_counted<false>(c, n);
  if (MEMPOOL_UNLIKELY(p == nullptr)) return nullptr;
  return hardened_hand_out(p, c, n);
}

// The hit path alone: a block from the cache, or nullptr for anything else (the
// caller then tail-calls its own slow path, so the hit path saves no register).
MEMPOOL_ALWAYS_INLINE void* heap_try_hit(std::size_t n) noexcept {
  if constexpr (kHardened) return hardened_try_hit(n);
  // Two copies of the pop, one per granule of the class table, so that neither
  // size range jumps back into the other's code (measured: 1.5-2 ns a pair).
  if (MEMPOOL_LIKELY(n <= kHeapFineMax))
    return heap_pop_counted(kHeapClassTable.by_index[(n + 7) >> 3], n);
  if (n <= kHeapSmallMax) return heap_pop_counted(kHeapClassTable.by_index[heap_class_index(n)], n);
  return nullptr;
}

// Any request, hit or not, counted for the profiler (each allocation is counted
// once: by the hit paths above when they serve it, else here).
MEMPOOL_ALWAYS_INLINE void* heap_allocate_uncounted(std::size_t n) noexcept {
  if constexpr (kHardened) return hardened_allocate(n);
  if (MEMPOOL_LIKELY(n <= kHeapSmallMax)) return heap_allocate_class(heap_class_of(n));
  return heap_allocate_slow(n);
}
MEMPOOL_ALWAYS_INLINE void* heap_allocate(std::size_t n) noexcept {
  if (MEMPOOL_UNLIKELY(heap_sample_due(this_thread_cache(), n))) return heap_allocate_sampled(n, 0);
  return heap_allocate_uncounted(n);
}

// The interior-pointer check: p starts a block of small span s, whose page it is on.
// (p - start) * divisor (mod 2^64) is below 2^32 exactly when (p - start) % size == 0
// (span.hpp), so the test is one multiply, one subtract and one shift: no second
// read of the divisor to compare with.
MEMPOOL_ALWAYS_INLINE bool heap_starts_block(const void* p, const Span* s) noexcept {
  return ((reinterpret_cast<std::uintptr_t>(p) * s->divisor - s->start_divisor) >>
          kSpanBlockStartBits) == 0;
}
MEMPOOL_ALWAYS_INLINE void heap_check_block_start(const void* p, const Span* s,
                                                  const char* problem) noexcept {
  if (MEMPOOL_UNLIKELY(!heap_starts_block(p, s))) heap_misuse(p, problem);
}

// A small block's span from its page-map entry whose class c is not 0, with
// the check that p starts a block.
MEMPOOL_ALWAYS_INLINE Span* heap_small_block_span(const void* p, std::uintptr_t entry,
                                                  std::size_t c, const char* problem) noexcept {
  Span* s = address_as<Span>(entry - c);
  heap_check_block_start(p, s, problem);
  return s;
}

// A small block back to the thread cache (span and class from its entry).
MEMPOOL_ALWAYS_INLINE void heap_free_small(void* p, Span* s, std::size_t c) noexcept {
  if constexpr (kChecked) checked_on_free(p, s);
  (void)s;
  heap_free_to_cache(p, c);
}

MEMPOOL_ALWAYS_INLINE void heap_free(void* p) noexcept {
  if constexpr (kHardened) {
    hardened_free(p);
    return;
  }
  const std::uintptr_t entry = g_page_map.lookup_entry(p);
  const std::size_t c = entry & kSpanTagMask;
  if (MEMPOOL_LIKELY(c != 0)) {
    Span* s = heap_small_block_span(p, entry, c, "free of a pointer into the middle of a block");
    heap_free_small(p, s, c);
    return;
  }
  heap_free_slow(p, reinterpret_cast<Span*>(entry & ~kSpanTagMask));
}

// malloc_usable_size's common case (redis calls it on every allocation and
// free): a small block's size from its span, one page-map lookup and the
// interior-pointer test. 0 for anything else (nullptr, large, direct or foreign
// blocks).
MEMPOOL_ALWAYS_INLINE std::size_t heap_small_usable_size(const void* p) noexcept {
  if constexpr (kHardened) return hardened_small_usable_size(p);
  const std::uintptr_t entry = g_page_map.lookup_entry(p);
  if (MEMPOOL_UNLIKELY((entry & kSpanTagMask) == 0)) return 0;
  // The class is not needed: the span's address alone (an `and`, not a subtract).
  const Span* s = address_as<Span>(entry & ~kSpanTagMask);
  heap_check_block_start(p, s, "pointer into the middle of a block");
  const std::size_t size = s->block_size;
  if (size == 0) __builtin_unreachable();  // so that callers need not test it again
  return size;
}

MEMPOOL_ALWAYS_INLINE std::size_t heap_usable_size(const void* p) noexcept {
  if (const std::size_t n = heap_small_usable_size(p); MEMPOOL_LIKELY(n != 0)) return n;
  return heap_usable_size_slow(p);
}

// Which small reallocations keep their block.
enum class ReallocFit {
  // The new size's class is the block's: a sized free with the new size still names
  // the right class (jemalloc's rule; mp_realloc promises it, HeapApi.SizedFreeAfterRealloc).
  kSameClass,
  // Any size from just over half the block to all of it (mimalloc's and tcmalloc's
  // rule, and the heap's own for large blocks): the drop-in realloc, whose blocks only
  // ever reach free(), which looks the class up. A string grown past its block and
  // trimmed back (redis) then moves once, not twice.
  kHalfOrMore,
};

// The copy and free of heap_realloc_small_move in their usual order (heap.cpp).
__attribute__((returns_nonnull)) void* heap_realloc_move_ordered(void* p, void* q, std::size_t n,
                                                                 Span* s, std::size_t c) noexcept;

// The out-of-line halves of heap_realloc, one pair per entry point (mp_realloc, the
// drop-in's realloc), each in the allocation-entry section for the profiler's stacks.
// kSlow: everything but a small block to a small size (nullptr, size 0 or large,
// large, direct or foreign blocks, the hardened build), and a miss of the cache.
using HeapReallocSlow = void* (*)(void* p, std::size_t size) noexcept;
// kMove: heap_realloc_small_move<kSlow>, out of line.
using HeapReallocMove = void* (*)(void* p, std::size_t size, Span* s, std::size_t c,
                                  std::size_t to) noexcept;

// realloc's move of a small block to another small size: a block of class `to`
// (the new size's) from the cache, the bytes, the old block back to the cache (span
// and class c from the caller's lookup); on a miss, kSlow does it all.
template <HeapReallocSlow kSlow>
MEMPOOL_ALWAYS_INLINE void* heap_realloc_small_move(void* p, std::size_t size, Span* s,
                                                    std::size_t c, std::size_t to) noexcept {
  // The pop calls, not jumps, on a corrupted link: no register kept for a return.
  void* q = heap_pop_counted<true, false>(to, size);
  if (MEMPOOL_UNLIKELY(q == nullptr)) return kSlow(p, size);
  const std::size_t usable = s->block_size;
  const std::size_t n = size < usable ? size : usable;
  if constexpr (!kChecked && !kMemoryChecker) {
    // The usual order, a copy and then the free, keeps p and c in saved registers
    // across the copy's call. Instead: the first 16 bytes (every block has them) by
    // hand, p back to the cache (its link and mark overwrite them), and the rest copied
    // last, by a call that needs nothing kept. Only where no other thread can take p
    // before that copy ends: the push does not flush (room left) and p is not suspect
    // (no mark: the usual order looks for a double free).
    ThreadCache& t = this_thread_cache();
    auto* b = static_cast<FreeBlock*>(p);
    if (MEMPOOL_LIKELY(t.room(c) > 0 &&
                       b->byte_at(kHeapFreeMarkOffset) != static_cast<std::uint8_t>(t.key()))) {
      __builtin_memcpy(q, p, 16);
      heap_link_free(b, t.head(c), t.key());
      t.set_head(c, b);
      t.set_room(c, t.room(c) - 1);
      if (n <= 16) return q;
      return static_cast<char*>(__builtin_memcpy(static_cast<char*>(q) + 16,
                                                 static_cast<const char*>(p) + 16, n - 16)) -
             16;
    }
  }
  return heap_realloc_move_ordered(p, q, n, s, c);
}

// realloc keeps block p for n bytes. Under the leak check its table learns the new size:
// the scan reads that many bytes for pointers (a pointer stored past the old size would
// be missed, and what it points to reported as leaked).
MEMPOOL_ALWAYS_INLINE void* heap_realloc_kept(void* p, std::size_t n) noexcept {
  if (MEMPOOL_UNLIKELY(g_leak_check)) return leak_resize(p, n);
  return p;
}

// realloc's common case (redis grows and trims strings all the time): a small block
// to a small size, one page-map lookup. A block that keeps its place is answered
// here, before any register is saved; a move is a tail call to kMove, which needs
// no second lookup.
template <ReallocFit kFit, HeapReallocMove kMove, HeapReallocSlow kSlow>
MEMPOOL_ALWAYS_INLINE void* heap_realloc(void* p, std::size_t size) noexcept {
  if constexpr (kHardened) return kSlow(p, size);  // hardened_realloc
  const std::uintptr_t entry = g_page_map.lookup_entry(p);
  const std::size_t c = entry & kSpanTagMask;
  const bool small_size = size - 1 < kHeapSmallMax;  // not 0, not large
  if constexpr (kFit == ReallocFit::kSameClass) {
    if (MEMPOOL_UNLIKELY(c == 0 || !small_size)) return kSlow(p, size);
    Span* s = heap_small_block_span(p, entry, c, "realloc of a pointer into the middle of a block");
    const std::size_t to = heap_class_of(size);
    if (to == c) return heap_realloc_kept(p, size);
    return kMove(p, size, s, c, to);
  } else {
    if (MEMPOOL_UNLIKELY(c == 0)) return kSlow(p, size);
    Span* s = heap_small_block_span(p, entry, c, "realloc of a pointer into the middle of a block");
    // size in (usable / 2, usable] (usable is even): one unsigned compare, and a size
    // that passes it is small.
    const std::size_t usable = s->block_size;
    if (usable - size < usable / 2) {
      // A block that holds the free mark's first byte may be free already (realloc
      // after free): where its class would change it moves, as kSameClass does, so that
      // the move's free looks for it and names a double free.
      const auto* b = static_cast<const FreeBlock*>(p);
      if (MEMPOOL_LIKELY(b->byte_at(kHeapFreeMarkOffset) !=
                         static_cast<std::uint8_t>(this_thread_cache().key())))
        return heap_realloc_kept(p, size);
      const std::size_t to = heap_class_of(size);
      if (to == c) return heap_realloc_kept(p, size);
      return kMove(p, size, s, c, to);
    }
    if (MEMPOOL_UNLIKELY(!small_size)) return kSlow(p, size);
    return kMove(p, size, s, c, heap_class_of(size));
  }
}

// Sized free skips the page map: the size gives the class.
MEMPOOL_ALWAYS_INLINE void heap_free_sized(void* p, std::size_t n) noexcept {
  if constexpr (kChecked) {
    heap_free_sized_checked(p, n);
  } else if constexpr (kHardened) {
    hardened_free_sized(p, n);
  } else {
    ThreadCache& t = this_thread_cache();
    // The size's range first, each with its copy of the rest, as in heap_try_hit: with
    // the limit's test first, the compiler loaded the cache's offset a second time
    // where the two ranges' class lookups joined (one instruction more a sized delete).
    if (MEMPOOL_LIKELY(n <= kHeapFineMax)) {
      if (MEMPOOL_LIKELY(p != nullptr && t.sized_free_takes(n))) {
        heap_free_to_cache(t, p, kHeapClassTable.by_index[(n + 7) >> 3]);
        return;
      }
    } else if (p != nullptr && t.sized_free_takes(n)) {
      heap_free_to_cache(t, p, kHeapClassTable.by_index[heap_class_index(n)]);
      return;
    }
    heap_free(p);
  }
}

}  // namespace mempool::detail
