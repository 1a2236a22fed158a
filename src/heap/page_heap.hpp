// The page heap: spans of pages over memory mapped from the OS. Free spans are
// kept by size (exact lists up to 128 pages, one best-fit list above), coalesce
// with free neighbours, and go back to the OS with madvise once the free resident
// memory passes the release threshold (or on collect()). One mutex; it is taken
// only when a span is created or freed, never on the thread-cache path.
#pragma once

#include <cstddef>
#include <mutex>

#include "span.hpp"

namespace mempool::detail {

struct PageHeapStats {
  std::size_t bytes_mapped = 0;         // from the OS, direct mappings included
  std::size_t bytes_free_resident = 0;  // free spans not given back (an upper bound)
  std::size_t bytes_free_released = 0;  // free spans given back or never touched
  std::size_t bytes_in_spans = 0;       // spans handed out (small and large), direct ones aside
  std::size_t bytes_direct = 0;         // direct mappings
};

class PageHeap {
 public:
  // A span of `pages` pages whose start is a multiple of align_pages (a power of
  // two), in `state` (kLarge, or kSmall for the central cache) with every page
  // mapped to it; nullptr when the OS refuses memory.
  Span* allocate(std::size_t pages, std::size_t align_pages = 1,
                 SpanState state = SpanState::kLarge) noexcept;
  // Takes back a span from allocate (kSmall or kLarge).
  void free(Span* s) noexcept;
  // Shrinks or grows a kLarge span in place to `pages` (growing takes the free
  // span after it); false when it cannot.
  bool resize(Span* s, std::size_t pages) noexcept;
  // A mapping of its own for a huge block, page-aligned and aligned to `alignment`;
  // state kDirect. Freed with unmap_direct, which gives it straight back to the OS.
  Span* map_direct(std::size_t bytes, std::size_t alignment) noexcept;
  void unmap_direct(Span* s) noexcept;

  // Gives every free resident page back to the OS.
  void release_all() noexcept;
  void set_release_threshold(std::size_t bytes) noexcept;
  [[nodiscard]] PageHeapStats stats() const noexcept;

  void lock() noexcept { mutex_.lock(); }
  void unlock() noexcept { mutex_.unlock(); }

 private:
  static constexpr std::size_t kMaxListPages = 128;
  static constexpr std::size_t kRegionPages = 1024;  // grow by at least 8 MiB

  Span* find_free(std::size_t pages) noexcept;
  bool grow(std::size_t pages) noexcept;
  Span* split(Span* s, std::size_t pages) noexcept;
  void insert_free(Span* s) noexcept;  // coalesces, then lists
  void list(Span* s) noexcept;
  void unlist(Span* s) noexcept;
  SpanList& list_for(const Span* s) noexcept;
  void release(Span* s) noexcept;
  void release_down_to(std::size_t resident_bytes) noexcept;

  mutable std::mutex mutex_;
  SpanList resident_[kMaxListPages + 1];
  SpanList released_[kMaxListPages + 1];
  SpanList resident_large_;
  SpanList released_large_;
  std::size_t free_resident_pages_ = 0;
  std::size_t free_released_pages_ = 0;
  std::size_t mapped_bytes_ = 0;
  std::size_t span_bytes_in_use_ = 0;
  std::size_t direct_bytes_ = 0;
  std::size_t release_threshold_ = std::size_t{64} << 20;
};

extern constinit PageHeap g_page_heap;

}  // namespace mempool::detail
