// The central cache: one per size class, between the thread caches and the page
// heap. It hands out and takes back blocks in batches, under a short per-class
// lock. Full batches that threads give back are kept whole (up to 1 MiB per class)
// so the next thread that needs one takes it in O(1): this is what keeps the
// producer/consumer pattern fast. Other blocks go back to their spans, and a span
// whose blocks have all come back goes back to the page heap.
#pragma once

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
};

class CentralCache {
 public:
  // Up to `want` blocks of class c, as a nullptr-terminated chain in *first;
  // returns how many (0 when the OS refuses memory).
  std::size_t remove_range(std::size_t c, std::size_t want, FreeBlock** first) noexcept;
  // Takes back `count` blocks of class c linked from `first`.
  void insert_range(std::size_t c, FreeBlock* first, std::size_t count) noexcept;
  // Returns every kept batch to its spans (collect()).
  void drain() noexcept;
  // Whether p (in a span of class c) is free here: in a kept batch or its span's list.
  [[nodiscard]] bool holds_free(std::size_t c, const void* p) const noexcept;
  // Whether p starts a block that a span of class c has handed out (carved), the class
  // locked: the carve pointer moves under the lock.
  [[nodiscard]] bool carved_block(std::size_t c, const void* p) const noexcept;
  [[nodiscard]] CentralClassCounts counts(std::size_t c) const noexcept;

  // fork(): every lock, in class order.
  void lock_all() noexcept;
  void unlock_all() noexcept;

 private:
  struct alignas(kCacheLine) Class {
    mutable Lock mutex;
    std::uint32_t batch_count = 0;
    FreeBlock* batches[kMaxCentralSlots] = {};
    SpanList nonempty;  // spans with a free block (allocated < capacity)
    std::size_t spans = 0;
    std::size_t blocks = 0;  // the spans' capacities
    std::size_t blocks_out = 0;
  };

  static Span* new_span(std::size_t c) noexcept;
  // Returns blocks to their spans; spans that become empty are chained through
  // `next` on *empty for the caller to free after unlocking.
  static void release_to_spans(Class& k, std::size_t c, FreeBlock* first, std::size_t count,
                               Span** empty) noexcept;
  static void free_spans(Span* chain) noexcept;

  Class classes_[kHeapClassCount];
};

extern constinit CentralCache g_central_cache;

// The key of every free-list link in the heap (heap_thread_cache.hpp). Blocks travel
// between thread caches, kept batches and spans as linked chains, so all of them use
// this one key: kHeapFixedLinkKey in the default build; in the hardened library, a
// random one made on first use, before the first block is carved.
std::uintptr_t heap_link_key() noexcept;

}  // namespace mempool::detail
