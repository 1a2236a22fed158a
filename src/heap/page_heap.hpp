// The page heap: spans of pages over memory mapped from the OS. Free spans are
// kept by size (exact lists up to 128 pages, one best-fit list above), coalesce
// with free neighbours, and go back to the OS with madvise once they have been
// free for the decay time, or at once past the release threshold (and on
// collect()). Huge blocks get mappings of their own; freed ones are kept in a
// small cache, within a byte budget and the same decay, for the next huge block
// (trimmed or grown with mremap to its size). One mutex; it is taken only when a
// span is created or freed, never on the thread-cache path.
//
// Huge pages (MEMPOOL_THP, hugepage_filler.hpp): reservations and commits are whole
// 2 MiB huge pages, advised MADV_HUGEPAGE where the system asks for it; spans are
// placed by the filler so that partly used huge pages fill first; decay and the
// release threshold give back only whole free huge pages. A huge page is broken
// (its free pages given back, MADV_NOHUGEPAGE first so that khugepaged does not
// fill it in again) only under pressure: the memory limit, collect(), or demand
// below half its recent peak.
//
// Where huge pages are allowed (THP auto) the heap keeps two arenas, address space
// apart: the dense one, on huge pages once it holds 32 MiB (spans of blocks under
// 64 KiB, large blocks), and the sparse one on 4 KiB pages (MADV_NOHUGEPAGE; spans of
// blocks of 64-256 KiB, which a program may touch in part: a huge page would make all
// of a block resident). Each has its own free lists and reservation; free spans never
// coalesce across them. The sparse arena behaves as the heap does under THP never
// (decay gives back any free span).
//
// The soft memory limit (set_memory_limit) is checked only where the heap is about
// to grow: before it maps memory or faults in pages it gave back. Above the limit
// it first gives back its own free pages and cached mappings; if that is not
// enough, allocate and map_direct answer nullptr once (marking the calling thread,
// take_limit_refusal) so that the heap, with no lock held, can empty its caches
// into the page heap and ask again inside a GrowPastLimit scope, where growth is
// never refused: the limit never fails an allocation.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "hugepage_filler.hpp"
#include "mempool/detail/lock.hpp"
#include "span.hpp"

namespace mempool::detail {

struct PageHeapStats {
  std::size_t bytes_mapped = 0;             // from the OS, direct mappings included
  std::size_t bytes_free_resident = 0;      // free spans not given back (an upper bound)
  std::size_t bytes_free_released = 0;      // free spans given back or never touched
  std::size_t bytes_in_spans = 0;           // spans handed out (small and large), direct ones aside
  std::size_t bytes_direct = 0;             // direct mappings in use
  std::size_t bytes_direct_cached = 0;      // freed direct mappings kept for reuse (resident)
  std::size_t direct_cached = 0;            // how many
  std::size_t direct_in_use = 0;            // direct mappings in use
  std::size_t free_spans = 0;               // free spans, resident or given back
  std::size_t bytes_mapped_peak = 0;        // the most bytes_mapped has been
  std::size_t limit_hits = 0;               // growths that found the heap above the memory limit
  std::size_t bytes_huge_advised = 0;       // mapped and advised MADV_HUGEPAGE (0 under THP never)
  std::size_t bytes_free_partial_huge = 0;  // free resident pages in partly used huge pages
  std::size_t huge_pages_broken = 0;        // huge pages partly given back (MADV_NOHUGEPAGE)
};

class PageHeap {
 public:
  // A span of `pages` pages whose start is a multiple of align_pages (a power of
  // two), in `state` (kLarge, or kSmall for the central cache) with every page
  // mapped to it, its entries tagged with size_class (the central cache's class;
  // 0 for kLarge); nullptr when the OS refuses memory.
  Span* allocate(std::size_t pages, std::size_t align_pages = 1,
                 SpanState state = SpanState::kLarge, std::uint8_t size_class = 0) noexcept;
  // Whether a free resident span of at least `pages` pages waits in the arena that
  // allocate would take such a span from (false: allocate would grow the heap or fault
  // given-back pages in again). The central cache asks before it adds a span.
  [[nodiscard]] bool has_resident_free(std::size_t pages, SpanState state,
                                       std::uint8_t size_class) noexcept;
  // Takes back a span from allocate (kSmall or kLarge), free since now, or since
  // `free_since` (a clock reading of now_ms(): the central cache's kept empty spans).
  static constexpr std::uint64_t kFreedNow = ~std::uint64_t{0};
  void free(Span* s, std::uint64_t free_since = kFreedNow) noexcept;
  // Shrinks or grows a kLarge span in place to `pages` (growing takes the free
  // span after it); false when it cannot.
  bool resize(Span* s, std::size_t pages) noexcept;
  // A mapping of its own for a huge block, page-aligned and aligned to `alignment`;
  // state kDirect. A cached mapping serves it when there is one (trimmed to size,
  // or grown with mremap: only the new tail is fresh memory; `reused` is then set).
  Span* map_direct(std::size_t bytes, std::size_t alignment) noexcept;
  // Keeps the mapping in the cache (state kCached) within its budget, or gives it
  // back to the OS.
  void unmap_direct(Span* s) noexcept;

  // Gives every free resident page and every cached mapping back to the OS, huge
  // pages partly in use broken.
  void release_all() noexcept;
  // MEMPOOL_THP: applied to the address space reserved so far and to what comes
  // after. Until it is called the heap follows the system (ThpMode::kAuto).
  void set_thp_mode(ThpMode mode) noexcept;
  [[nodiscard]] bool huge_pages_enabled() const noexcept;
  void set_release_threshold(std::size_t bytes) noexcept;
  // Cached direct mappings: at most `bytes` of them (0: none, unmapped at free).
  void set_direct_cache_bytes(std::size_t bytes) noexcept;
  // Free resident pages and cached mappings unused for `ms` go back to the OS
  // (kNoDecay: never, only past the threshold and on collect()).
  void set_decay_ms(std::uint64_t ms) noexcept;
  [[nodiscard]] std::uint64_t decay_ms() const noexcept {
    return __atomic_load_n(&decay_ms_, __ATOMIC_RELAXED);
  }
  // Gives back what has been free since before now_ms - decay time (the heap
  // does this itself as it runs; tests call it with a time of their choosing).
  void decay(std::uint64_t now_ms) noexcept;
  // The clock of the decay: milliseconds, monotonic, coarse (a vDSO read).
  [[nodiscard]] static std::uint64_t now_ms() noexcept;
  [[nodiscard]] PageHeapStats stats() const noexcept;
  // p lies in the address space the heap reserved for its pages (misuse reports:
  // a pointer there that the page map does not know was freed already, its pages
  // merged into a free span). Lock-free, for error paths.
  [[nodiscard]] bool reserved(const void* p) const noexcept;

  // The soft memory limit on resident bytes (mapped minus given back), 0 for none.
  void set_memory_limit(std::size_t bytes) noexcept;
  [[nodiscard]] std::size_t memory_limit() const noexcept {
    return memory_limit_.load(std::memory_order_relaxed);
  }
  // True, once, when the last allocate or map_direct of this thread answered
  // nullptr because of the limit rather than for want of memory.
  [[nodiscard]] static bool take_limit_refusal() noexcept;
  // While one lives, this thread's allocations grow the heap past the limit (after
  // the page heap has given back its own free pages).
  class GrowPastLimit {
   public:
    GrowPastLimit() noexcept;
    ~GrowPastLimit();
    GrowPastLimit(const GrowPastLimit&) = delete;
    GrowPastLimit& operator=(const GrowPastLimit&) = delete;
  };

  static constexpr std::uint64_t kNoDecay = ~std::uint64_t{0};
  static constexpr std::size_t kMaxCachedDirect = 16;

  void lock() noexcept { mutex_.lock(); }
  void unlock() noexcept { mutex_.unlock(); }

 private:
  static constexpr std::size_t kMaxListPages = 128;
  static constexpr std::size_t kRegionPages = 1024;  // grow by at least 8 MiB
  // Address space reserved at a time (no memory: PROT_NONE, no commit charge).
  static constexpr std::size_t kReserveBytes = std::size_t{1} << 30;

  // Which sizes have a free span, resident or released: bit n for the lists of n pages.
  // find_free asks for the first size at or above a request in a few instructions; the
  // walk over 128 sizes it replaces was a quarter of the instructions of 100 threads that
  // each carved 2 MiB of 1 KiB blocks (callgrind).
  class ListSizes {
   public:
    static constexpr std::size_t npos = SIZE_MAX;
    void add(std::size_t n) noexcept { words_[n / 64] |= std::uint64_t{1} << (n % 64); }
    void remove(std::size_t n) noexcept { words_[n / 64] &= ~(std::uint64_t{1} << (n % 64)); }
    // The smallest size at or above n with a free span, or npos.
    [[nodiscard]] std::size_t first_from(std::size_t n) const noexcept {
      for (std::size_t w = n / 64; w < kWords; ++w) {
        const std::uint64_t bits =
            words_[w] & (w == n / 64 ? ~std::uint64_t{0} << (n % 64) : ~std::uint64_t{0});
        if (bits != 0) return w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      }
      return npos;
    }

   private:
    static constexpr std::size_t kWords = kMaxListPages / 64 + 1;
    std::uint64_t words_[kWords] = {};
  };
  // An arena (above): its free spans, by size, and its address space.
  struct Arena {
    SpanList resident[kMaxListPages + 1];
    SpanList released[kMaxListPages + 1];
    ListSizes sizes;
    SpanList resident_large;
    SpanList released_large;
    std::uintptr_t reserve_low = 0;      // the reservation: [reserve_low, commit_low) is unused
    std::uintptr_t commit_low = 0;       // its committed part starts here and grows down
    std::size_t reservation = SIZE_MAX;  // its entry in reservations_, if recorded
  };
  static constexpr std::uint8_t kDense = 0;
  static constexpr std::uint8_t kSparse = 1;
  static constexpr std::size_t kSparseBlockBytes = std::size_t{64} << 10;
  // The arena of a request: sparse only where huge pages are allowed (not THP never).
  [[nodiscard]] std::uint8_t arena_for(SpanState state, std::uint8_t size_class) const noexcept;

  Span* find_free(Arena& a, std::size_t pages) noexcept;
  Span* find_free(Arena& a, std::size_t pages, std::size_t align_pages) noexcept;
  bool grow(std::uint8_t arena, std::size_t pages) noexcept;
  // The page heap's address space (page_heap.cpp, "Growth").
  // The free span whose first page is the arena's committed edge, if any.
  [[nodiscard]] const Span* edge_span(const Arena& a) const noexcept;
  // Where the arena's next `bytes` go, just below the committed part of its
  // reservation; more is reserved when it runs out, directly below the last if that
  // is free, else anywhere (the old one's unused part goes back). 0: no address space.
  std::uintptr_t reserved_below(std::uint8_t arena, std::size_t bytes) noexcept;
  // Adds `pages` free pages to the arena and returns where they start (0 when
  // refused): committed at the reservation's edge, or mapped on their own when no
  // address space can be reserved.
  std::uintptr_t map_region(std::uint8_t arena, std::size_t pages) noexcept;
  Span* split(Span* s, std::size_t pages) noexcept;
  // s is unlisted and free, pages < s->pages: the `pages` pages the filler places
  // in s (`anywhere`; else its first pages, as an aligned request and THP never need), unlisted;
  // the rest of s listed free again (without metadata for the split, more than `pages`).
  Span* carve(Span* s, std::size_t pages, bool anywhere) noexcept;
  // Free spans split by a release (a released run between resident pieces) merge
  // again, so that a request bigger than each piece finds them before the heap
  // grows. False when nothing merged.
  bool merge_released_pieces() noexcept;
  // The THP advice for a range of an arena's address space (nothing in kAuto where
  // the system has no THP; MADV_NOHUGEPAGE for the sparse arena).
  void advise(std::uint8_t arena, std::uintptr_t start, std::size_t bytes) noexcept;
  void ensure_thp_mode() noexcept;
  // advise() over every reservation, [low, high).
  void advise_reservations() noexcept;
  void insert_free(Span* s) noexcept;  // coalesces, then lists
  void list(Span* s) noexcept;
  void unlist(Span* s) noexcept;
  SpanList& list_for(const Span* s) noexcept;
  // Gives a free resident span back to the OS: its whole huge pages only, split
  // from the rest (which stays resident), or everything when `breaking` (or huge
  // pages are off), the huge pages partly in use marked MADV_NOHUGEPAGE first.
  void release(Span* s, bool breaking) noexcept;
  void release_down_to(std::size_t resident_bytes, bool breaking) noexcept;
  // What huge pages would back: kAuto turns to them once this reaches kAutoFromBytes
  // (the sparse arena, which they never back, does not count).
  [[nodiscard]] std::size_t dense_mapped_bytes() const noexcept {
    return mapped_bytes_ - sparse_region_bytes_;
  }
  [[nodiscard]] bool on_huge_pages(const Span* s) const noexcept {
    return filler_.enabled() && s->arena == kDense;
  }
  // Decay, the lock held: at most every quarter of the decay time. Cached
  // mappings to unmap are handed to `out` (unmapped after the lock is dropped).
  struct Unmaps;
  void decay_locked(std::uint64_t now, Unmaps& out) noexcept;
  void uncache(Span* s) noexcept;
  Span* oldest_cached() const noexcept;
  void evict(Span* s, Unmaps& out) noexcept;
  void trim_direct(Span* s, std::size_t pages, Unmaps& out) noexcept;
  bool grow_direct(Span*& s, std::size_t pages, std::size_t alignment) noexcept;
  void unmap_direct_cached(Span* s) noexcept;
  bool drop_direct_cache() noexcept;
  void add_mapped(std::size_t bytes) noexcept;
  [[nodiscard]] std::size_t resident_bytes() const noexcept;
  // The lock held, before the heap grows its resident bytes by `bytes`: below the
  // limit, nothing; above it, gives back the free pages and the cached mappings
  // (but `keep`), then says whether the caller should answer nullptr (marked for
  // take_limit_refusal) or grow.
  enum class LimitCheck : std::uint8_t { kBelow, kGrow, kRefuse };
  LimitCheck check_limit(std::size_t bytes, const Span* keep, Unmaps& out) noexcept;

  mutable Lock mutex_;
  HugePageFiller filler_;
  bool thp_mode_set_ = false;
  bool metadata_on_huge_pages_ = false;
  static constexpr std::size_t kDenseMetadataBytes = std::size_t{256} << 20;
  std::size_t region_bytes_ = 0;         // committed for spans (direct mappings aside)
  std::size_t sparse_region_bytes_ = 0;  // of which the sparse arena's
  std::size_t huge_pages_broken_ = 0;
  // Bytes in spans at their highest since decay last looked, decaying by a quarter
  // per decay pass: demand below half of it breaks huge pages (decay_locked).
  std::size_t recent_peak_in_use_ = 0;
  Arena arenas_[2];
  // Every reservation the heap still has, [low, high), for reserved(); one extended
  // downward while it stays contiguous. Past kMaxReservations the rest go unrecorded.
  static constexpr std::size_t kMaxReservations = 64;
  struct Reservation {
    std::atomic<std::uintptr_t> low{0};
    std::atomic<std::uintptr_t> high{0};
    std::uint8_t arena = kDense;  // for advise_reservations (the lock held)
  };
  Reservation reservations_[kMaxReservations];
  std::atomic<std::size_t> reservation_count_{0};
  std::size_t free_resident_pages_ = 0;
  std::size_t free_released_pages_ = 0;
  std::size_t mapped_bytes_ = 0;
  std::size_t mapped_peak_ = 0;
  std::size_t free_spans_ = 0;
  std::size_t span_bytes_in_use_ = 0;
  std::size_t direct_bytes_ = 0;
  std::size_t direct_in_use_ = 0;
  std::size_t release_threshold_ = std::size_t{128} << 20;
  SpanList direct_cache_;  // most recently freed first
  std::size_t direct_cached_bytes_ = 0;
  std::size_t direct_cached_ = 0;
  std::size_t direct_cache_limit_ = std::size_t{256} << 20;
  std::uint64_t decay_ms_ = 1000;
  std::uint64_t next_decay_ = 0;  // now_ms() before which decay_locked does nothing
  std::atomic<std::size_t> memory_limit_{0};
  // Above the limit the caches are emptied at most once per step of growth (a
  // sixteenth of the limit, at least a region): a program whose live bytes exceed
  // the limit would otherwise empty them at every new span.
  std::size_t next_refusal_ = 0;  // resident bytes past which growth is refused again
  std::size_t limit_hits_ = 0;
};

extern constinit PageHeap g_page_heap;

// Address space for `bytes` (PROT_NONE, os_reserve) inside one page-map leaf's 2 GiB where
// it fits: a reservation across a leaf boundary puts its spans under two leaves, and where
// one of them lies outside the page map's window, its lookups go through the root (7
// instructions and a load more a free). Twice the size is reserved and the rest given
// back; where that much address space is refused (a limit on it), `bytes` anywhere.
void* reserve_in_one_leaf(std::size_t bytes) noexcept;

}  // namespace mempool::detail
