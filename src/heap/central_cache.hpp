// The central cache: one per size class, between the thread caches and the page
// heap. It hands out and takes back blocks in batches, under a short per-class
// lock. Full batches that threads give back are kept whole (64 KiB a class, up to
// 512 KiB while threads run out of them: resize_slots; 1 MiB for blocks of 64 KiB and
// more: class_info.hpp) so the next thread that needs
// one takes it in O(1): this is what keeps the producer/consumer pattern fast (with the
// blocks' addresses beside it, so that a thread taking a batch another thread freed asks
// for all their lines at once: prefetch_kept_batch). Other
// blocks go back to their spans. A small span whose blocks have all come back is kept
// empty for the class's next span (keep_empty), else it goes back to the page heap.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "mempool/detail/lock.hpp"

#include "class_info.hpp"
#include "mempool/detail/free_list.hpp"
#include "mempool/detail/platform.hpp"
#include "span.hpp"

namespace mempool::detail {

struct CentralClassCounts {
  std::size_t spans = 0;
  std::size_t blocks = 0;             // in those spans (a hardened guarded span has fewer)
  std::size_t blocks_out = 0;         // given to thread caches (cached there or in use)
  std::size_t blocks_in_batches = 0;  // free, in the kept batches
  std::size_t blocks_in_spans = 0;    // free in the spans, carved or not
  std::size_t empty_spans = 0;        // of `spans`, kept empty for reuse
};

class CentralCache {
 public:
  // Empty spans kept for their classes' next spans, all classes together. A span that
  // empties goes to the page heap and back each time a class's blocks cycle through it
  // otherwise: about 800 instructions a span there (the page heap's lock, its free lists,
  // coalescing and splitting, the page map), a fifth of the work of 100 short-lived
  // threads that each carve and free 2 MiB of 1 KiB blocks (docs/performance.md). Kept,
  // the span is carved again from its start, in address order. Bounded, because another
  // class or a large block cannot use them; and for the decay time, as the page heap's
  // free pages (decay_if_due); and given back before the page heap grows (make_room_for).
  static constexpr std::size_t kKeptEmptyBytes = std::size_t{4} << 20;
  // Only spans this small are kept (spans of one or two pages: the small classes),
  // which cycle most often for their bytes. Kept spans of every class (up to 512 KiB a
  // span, for 8 blocks of 64 KiB) made mempool-bench fragmentation's peak 2% higher
  // (125.2 -> 127.7 MiB).
  static constexpr std::size_t kKeptEmptySpanMaxBytes = std::size_t{16} << 10;

  // Up to `want` blocks of class c, as a nullptr-terminated chain in *first;
  // returns how many (0 when the OS refuses memory). `taker`: the calling thread's
  // cache (kept batches another thread gave back are prefetched for it, and a fresh span
  // it starts becomes its own: Span::owner), or nullptr.
  std::size_t remove_range(std::size_t c, std::size_t want, FreeBlock** first,
                           const void* taker = nullptr) noexcept;
  // Takes back `count` blocks of class c linked from `first`. `blocks`: their addresses
  // in chain order, or nullptr; `giver`: the calling thread's cache, or nullptr.
  void insert_range(std::size_t c, FreeBlock* first, std::size_t count,
                    FreeBlock* const* blocks = nullptr, const void* giver = nullptr) noexcept;
  // The `count` blocks of span s (class c) linked from `first`, a local list its owner gives
  // back (ThreadCache::give_back_local): it becomes the span's list where that is empty, so
  // no block is walked, and a span with no block left out is kept empty or freed.
  void insert_span_list(std::size_t c, Span* s, FreeBlock* first, std::size_t count) noexcept;
  // Returns every kept batch to its spans, and every kept empty span to the page heap
  // (collect(), the memory limit).
  void drain() noexcept;
  // Gives the empty spans kept longer than the page heap's decay time back to it, at
  // most every quarter of that time. The central cache calls it as it keeps spans; the
  // heap calls it before it allocates or frees a large span, so that the page heap's
  // decay, which runs then, finds them.
  void decay_if_due() noexcept;
  // The same now, with a time of the caller's choosing (tests, as PageHeap::decay).
  void decay(std::uint64_t now_ms) noexcept;
  // Before a span of `pages` pages is taken from the page heap: when no free resident
  // span there fits it, the kept empty spans go back first (those of classes not locked
  // now), so that they serve it rather than new memory. Kept spans cost no resident
  // memory that way, only the page heap's choice of them.
  void make_room_for(std::size_t pages, SpanState state, std::uint8_t size_class) noexcept;
  // Whether p (in a span of class c) is free here: in a kept batch or its span's list.
  [[nodiscard]] bool holds_free(std::size_t c, const void* p) const noexcept;
  // Whether p starts a block that a span of class c has handed out (carved), the class
  // locked: the carve pointer moves under the lock.
  [[nodiscard]] bool carved_block(std::size_t c, const void* p) const noexcept;
  [[nodiscard]] CentralClassCounts counts(std::size_t c) const noexcept;
  // Tests: how many of class c's kept batches have their blocks' addresses kept beside
  // them, and whether each such list names exactly its batch's chain, in order.
  struct IndexedBatches {
    std::size_t indexed = 0;
    bool all_match = true;
  };
  [[nodiscard]] IndexedBatches indexed_batches(std::size_t c) const noexcept;

  // fork(): every lock, in class order.
  void lock_all() noexcept;
  void unlock_all() noexcept;

 private:
  struct alignas(kCacheLine) Class {
    mutable Lock mutex;
    std::uint32_t batch_count = 0;
    // Batches kept at most: max_slots to max_grown_slots (resize_slots); 0 until the
    // class is first full (then max_slots at least).
    std::uint32_t slot_limit = 0;
    bool batch_missed = false;  // a batch was asked for and none was kept
    FreeBlock* batches[kMaxCentralSlots] = {};
    // Beside each kept batch, one row of 1 + batch words: the giver (the thread cache
    // that gave it back; nullptr: the row is not filled) and the addresses of its blocks
    // in chain order. From the metadata arena when the class first keeps a batch,
    // max_grown_slots rows; nullptr if that failed (batches then go unprefetched).
    const void** rows = nullptr;
    SpanList nonempty;  // spans with a free block (allocated < capacity)
    // Spans whose blocks all came back, reset to be carved again from their start
    // (newest first; free_since says since when).
    SpanList empty;
    std::uint32_t empty_spans = 0;
    std::size_t spans = 0;
    std::size_t blocks = 0;  // the spans' capacities
    std::size_t blocks_out = 0;
  };

  static Span* new_span(std::size_t c) noexcept;
  static void make_rows(Class& k, std::size_t c) noexcept;
  static void prefetch_kept_batch(const Class& k, std::size_t c, std::uint32_t slot,
                                  const void* taker) noexcept;
  static void prefetch_listed_blocks(const Span* s, std::size_t taken) noexcept;
  // Returns blocks to their spans; spans that become empty are kept (keep_empty) or
  // chained through `next` on *empty for the caller to free after unlocking.
  void release_to_spans(Class& k, std::size_t c, FreeBlock* first, std::size_t count,
                        Span** empty) noexcept;
  void resize_slots(Class& k, std::size_t c, Span** empty) noexcept;
  bool keep_empty(Class& k, Span* s) noexcept;
  void give_up_empty(Class& k, Span* s, Span** chain) noexcept;
  // Gives the page heap back the spans chained on `chain`; keep_age: as free since
  // their free_since (kept empty spans), not since now.
  static void free_spans(Span* chain, bool keep_age = false) noexcept;
  // The kept empty spans of every class, kept since kept_since or before
  // (PageHeap::now_ms()), to the page heap.
  static constexpr std::uint64_t kKeptSinceAny = ~std::uint64_t{0};
  void give_back_empty(std::uint64_t kept_since) noexcept;

  Class classes_[kHeapClassCount];
  std::atomic<std::size_t> kept_empty_bytes_{0};
  std::atomic<std::uint64_t> next_empty_decay_{0};  // PageHeap::now_ms()
};

extern constinit CentralCache g_central_cache;

// The key of every free-list link in the heap (heap_thread_cache.hpp). Blocks travel
// between thread caches, kept batches and spans as linked chains, so all of them use
// this one key: kHeapFixedLinkKey in the default build; in the hardened library, a
// random one made on first use, before the first block is carved.
std::uintptr_t heap_link_key() noexcept;

}  // namespace mempool::detail
