// A span: a run of heap pages that is free, carved into blocks of one size class,
// or handed out whole as one large block. The page map points every page of a
// span in use at it, so any block pointer finds its span (no per-block header).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "mempool/detail/free_list.hpp"
#include "mempool/detail/intrusive_list.hpp"

namespace mempool::detail {

struct ProfileSite;  // src/heap/heap_profiler.cpp

// Heap pages are 8 KiB (two 4 KiB OS pages): fewer page-map entries and spans.
inline constexpr unsigned kHeapPageShift = 13;
inline constexpr std::size_t kHeapPageSize = std::size_t{1} << kHeapPageShift;

enum class SpanState : std::uint8_t {
  kFree,    // in the page heap's free lists
  kSmall,   // carved into blocks of class `size_class`, owned by the central cache
  kLarge,   // one block bigger than the largest class, from the page heap
  kDirect,  // one huge block in a mapping of its own
  kCached,  // a freed direct mapping the page heap keeps for the next huge block
};

// Aligned to 128 bytes so that a page-map entry can carry the size class in its
// low 7 bits (classes are below 128).
struct alignas(128) Span {
  // The first cache line: what free, malloc_usable_size, realloc and the central
  // cache read for every block (a tree of 100,000 nodes freed at once missed both
  // lines of each span when the interior-pointer test's two words straddled them).
  //
  // offset % block size == 0  <=>  offset * divisor < divisor (Lemire's
  // divisibility test, exact for offsets below 2^32): the interior-pointer check.
  // With start_divisor = start * divisor (mod 2^64) it is p * divisor -
  // start_divisor < divisor. Within a span (below 2^32 bytes) the product is below
  // 2^32 for a block start and at least divisor (> 2^46) otherwise, so the hit paths
  // test (p * divisor - start_divisor) >> 32 == 0 instead, which reads the divisor once
  // (kSpanBlockStartBits; class_info.hpp proves it for every class at compile time).
  std::uint64_t divisor = 0;
  std::uint64_t start_divisor = 0;
  // kSmall: the class's block size, beside the interior-pointer test's fields, so that
  // malloc_usable_size and realloc read it from the span they load anyway.
  std::uint32_t block_size = 0;
  std::uint32_t allocated = 0;  // blocks out of the span (in caches or in use)
  std::uint32_t capacity = 0;
  std::uint8_t size_class = 0;  // 0 unless kSmall; the page map carries it too
  SpanState state = SpanState::kFree;
  bool released = false;  // kFree: the pages were given back to the OS (or never touched)
  // kLarge and kDirect: the pages may hold old bytes (resident free pages, or a
  // mapping from the cache); otherwise they are fresh from the OS, all zero.
  bool reused = false;
  // Hardened builds, kSmall: the span's blocks carry canaries and a fill (a sampled
  // span, hardened.cpp); the others are checked as in the default build.
  bool guarded = false;
  // The page heap's arena (page_heap.hpp): 0 dense, on huge pages; 1 sparse, on 4 KiB
  // pages. Set when the span's pages are mapped and kept through splits and merges.
  std::uint8_t arena = 0;
  // Thread-owned spans (below): the blocks on the owner's local list.
  std::uint32_t local_count = 0;
  // Small spans: blocks come from `free_blocks`, then from [carve, carve_end),
  // which is carved lazily so untouched pages stay untouched.
  FreeBlock* free_blocks = nullptr;
  std::uintptr_t carve = 0;
  std::uintptr_t carve_end = 0;

  // The second line: the page heap's and the large blocks' fields.
  std::uintptr_t start = 0;  // page-aligned
  std::size_t pages = 0;
  Span* prev = nullptr;  // in a SpanList (free lists, the central cache's lists)
  Span* next = nullptr;
  // Each word below has a second use, by a kSmall span that a thread owns (the right-hand
  // members), in the default build only (kThreadOwnedSpans): such a span is neither free,
  // cached nor kept empty, holds no large or sampled block, and has no live bits.
  //
  // A thread-owned span: a small span that a thread's refill started (a new span, or one
  // kept empty) is that thread's. The blocks of it that the thread's own cache overflows
  // with go to `local`, not through the central cache, and the thread's next refill of the
  // class takes them back whole (thread_cache.cpp). Only the owner reads and writes local,
  // local_prev, local_next and local_count; other threads read `owner` (span_owner) only to
  // see that it is not theirs. Blocks on `local` count in `allocated` (the central cache
  // sees them as out), so a span whose `allocated` falls to 0 has none, is on no owner's
  // list, and the central cache clears `owner` as it takes the span back.
  union {
    // kFree and kCached, and a kSmall span the central cache keeps empty: when the pages
    // were last in use (page heap clock, ms), for decay.
    std::uint64_t free_since = 0;
    Span* local_prev;  // the owner's list of its spans with local blocks (OwnedSpans)
  };
  union {
    // Hardened builds, kLarge and kDirect, and sampled blocks: the bytes the program
    // asked for.
    std::size_t requested = 0;
    Span* local_next;
  };
  union {
    // Checked builds: one bit per block, set while the program holds the block.
    std::atomic<std::uint64_t>* live_bits = nullptr;
    const void* owner;  // a ThreadCache, or nullptr; read and written with span_owner
  };
  union {
    // kLarge and kDirect: the heap profiler sampled this span's block, allocated at this
    // site (its stack); `requested` holds the bytes asked for. A sampled block of any
    // size has a span of its own, so that free finds the sample in the span it reads.
    ProfileSite* profile_site = nullptr;
    FreeBlock* local;  // nullptr: not on the owner's list
  };

  [[nodiscard]] std::size_t bytes() const noexcept { return pages << kHeapPageShift; }
  // kSmall: the first block's address (= start), from the fields of the span's first
  // cache line: the central cache's walks read only that line, and `start` is on the
  // second.
  [[nodiscard]] std::uintptr_t first_block() const noexcept {
    return carve_end - std::uintptr_t{capacity} * block_size;
  }
  [[nodiscard]] std::uintptr_t first_page() const noexcept { return start >> kHeapPageShift; }
  [[nodiscard]] std::uintptr_t last_page() const noexcept { return first_page() + pages - 1; }
};

// Thread-owned spans (Span::owner) in the default build; the hardened heap (guarded spans,
// canaries checked as blocks leave its lists) and the checked builds keep every block on
// the central cache's way.
inline constexpr bool kThreadOwnedSpans = !kHardened && !kChecked;
// Only spans of one or two pages (blocks up to 2 KiB) are owned: a thread's local lists
// are bounded by nothing but the blocks it freed, which for the small classes is what
// their spans hold anyway; larger blocks keep going back through the central cache, whose
// kept batches and empty spans are bounded (central_cache.hpp).
inline constexpr std::uint32_t kOwnedSpanMaxPages = 2;

// A span's owner, read by any thread that holds one of its blocks, written by the central
// cache (its class locked) and the owner.
inline const void* span_owner(const Span* s) noexcept {
  return __atomic_load_n(&s->owner, __ATOMIC_RELAXED);
}
inline void set_span_owner(Span* s, const void* owner) noexcept {
  __atomic_store_n(&s->owner, owner, __ATOMIC_RELAXED);
}
// Where the span's carving has come to, read by its owner without the class's lock
// (ThreadCache::give_to_owned_spans) while another thread's refill may move it on.
inline std::uintptr_t span_carve(const Span* s) noexcept {
  return __atomic_load_n(&s->carve, __ATOMIC_RELAXED);
}
// A span a thread starts (new_span, or a kept empty one): `owner` (nullptr for none),
// nothing on its local list.
inline void start_span_owned(Span* s, const void* owner) noexcept {
  set_span_owner(s, owner);
  s->local = nullptr;
  s->local_prev = s->local_next = nullptr;
  s->local_count = 0;
}

inline constexpr std::uintptr_t kSpanTagMask = 127;
// (p - start) * divisor >> kSpanBlockStartBits is 0 exactly for a block start (above).
inline constexpr unsigned kSpanBlockStartBits = 32;

// The heap computes addresses as integers (page numbers, span starts); this is
// the one place that turns one back into a pointer.
template <typename T = void>
inline T* address_as(std::uintptr_t address) noexcept {
  return reinterpret_cast<T*>(address);  // NOLINT(performance-no-int-to-ptr)
}
static_assert(sizeof(Span) == 128);
static_assert(offsetof(Span, carve_end) + sizeof(std::uintptr_t) <= 64 &&
              offsetof(Span, start) == 64);

// The page heap's free lists and the central cache's lists of spans.
using SpanList = IntrusiveList<Span, &Span::prev, &Span::next>;
// An owner's spans of one class with blocks on their local lists.
using LocalSpanList = IntrusiveList<Span, &Span::local_prev, &Span::local_next>;

}  // namespace mempool::detail
