// The page map: a two-level radix tree from page number to span (and size
// class, in the entry's low bits), the one place
// that answers "whose block is this?". 48-bit addresses, 8 KiB pages: 2^17 root
// entries (1 MiB, in .bss, touched only where used) of leaves of 2^18 entries
// (2 MiB each, mapped on demand, each covering 2 GiB of address space).
// The root is a static member, apart from the object: the object's first word is not
// zero (window_first_), which put the whole object, root and all, in .data. There the root was
// 1 MiB of the library's file, and reading it (use_huge_pages, a lookup of a foreign
// pointer) faulted its file pages in: 612 KiB resident in a program that allocated one
// block. In .bss, a page of it that is only read is the kernel's zero page.
//
// Writers hold the page heap lock. Readers take no lock: a thread looks up only
// pointers it holds, whose entries do not change while the block is live.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "mempool/detail/platform.hpp"
#include "span.hpp"

namespace mempool::detail {

class PageMap {
 public:
  static constexpr unsigned kAddressBits = 48;
  static constexpr unsigned kLeafBits = 18;
  static constexpr unsigned kRootBits = kAddressBits - kHeapPageShift - kLeafBits;
  static constexpr std::size_t kRootSize = std::size_t{1} << kRootBits;
  static constexpr std::size_t kLeafSize = std::size_t{1} << kLeafBits;
  // The window (claim_window): leaves in one mapping that one compare finds.
  static constexpr std::size_t kWindowLeaves = 16;
  static constexpr std::uintptr_t kWindowPages = kWindowLeaves * kLeafSize;

  // The entry for the page of p: the span's address with its size class in the
  // low 7 bits (0 for a large or free span), or 0 (for any value of p).
  MEMPOOL_ALWAYS_INLINE std::uintptr_t lookup_entry(const void* p) const noexcept {
    // The window first (claim_window: 32 GiB of address space around the small blocks'
    // first region): one compare of the page's offset in it, exact for any p, and the
    // entry at that offset. The window's words do not depend on p, so one load follows
    // p, the entry's: that chain bounds a free followed by an allocation (the free's
    // push waits for the class), where one load fewer took 1 ns off a 6 ns pair of
    // random sizes. 8 instructions; the one word that named a hot leaf took 11.
    const std::uintptr_t offset = (reinterpret_cast<std::uintptr_t>(p) >> kHeapPageShift) -
                                  window_first_.load(std::memory_order_acquire);
    if (MEMPOOL_LIKELY(offset < kWindowPages)) {
      // NOLINTNEXTLINE(performance-no-int-to-ptr): the window's address is an integer
      return reinterpret_cast<const Entry*>(window_entries_.load(std::memory_order_relaxed) +
                                            offset * sizeof(Entry))
          ->load(std::memory_order_relaxed);
    }
    return lookup_in_root(p);
  }
  // Through the root: what lies outside the window.
  MEMPOOL_ALWAYS_INLINE std::uintptr_t lookup_in_root(const void* p) const noexcept {
    std::uintptr_t address = reinterpret_cast<std::uintptr_t>(p);
    // The page number again, not the window's: kept from above, it cost the window's
    // hit path a register copy (GCC 12).
    asm("" : "+r"(address));
    const std::uintptr_t page = address >> kHeapPageShift;
    const std::uintptr_t root_index = page >> kLeafBits;
    if (MEMPOOL_UNLIKELY(root_index >= kRootSize)) return 0;
    const Leaf* leaf = root_[root_index].load(std::memory_order_acquire);
    if (MEMPOOL_UNLIKELY(leaf == nullptr)) return 0;
    return leaf->entries[page & (kLeafSize - 1)].load(std::memory_order_relaxed);
  }
  // The span holding the page of p, or nullptr.
  MEMPOOL_ALWAYS_INLINE Span* lookup(const void* p) const noexcept {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): an entry is a tagged address
    return reinterpret_cast<Span*>(lookup_entry(p) & ~kSpanTagMask);
  }

  // Places the window around the leaf of `page`, once: the page heap calls it for each
  // region it maps for small blocks, so that the first one decides (not a large block's
  // own mapping nor the sparse arena's, which the kernel may put anywhere). The window
  // covers that leaf, the one above and 14 below, where the heap grows (downward);
  // leaves mapped there before become its own (their entries copied). Page heap lock
  // held. Without address space for it, lookups take the root until a later call.
  void claim_window(std::uintptr_t page) noexcept;
  // Maps the leaves that pages [first, first + count) need (inside the window: its
  // slots, made writable); false when the OS refuses memory or the range lies beyond
  // 48 bits. Page heap lock held.
  bool ensure(std::uintptr_t first, std::size_t count) noexcept;
  // The window's first page, 0 before claim_window placed it (tests).
  [[nodiscard]] std::uintptr_t window_first_page() const noexcept {
    const std::uintptr_t first = window_first_.load(std::memory_order_acquire);
    return first == kNoWindow ? 0 : first;
  }
  // Whether p's lookup takes the window (tests).
  [[nodiscard]] bool in_window(const void* p) const noexcept {
    const std::uintptr_t page = reinterpret_cast<std::uintptr_t>(p) >> kHeapPageShift;
    return page - window_first_.load(std::memory_order_acquire) < kWindowPages;
  }
  // The leaves exist (ensure succeeded for the range); the span is the caller's
  // (page heap lock held, or a span the central cache owns). Tags the entry with
  // s->size_class.
  void set(std::uintptr_t page, Span* s) noexcept {
    const std::uintptr_t entry = entry_for(s);
    root_[page >> kLeafBits]
        .load(std::memory_order_relaxed)
        ->entries[page & (kLeafSize - 1)]
        .store(entry, std::memory_order_relaxed);
  }
  // The entry once and each leaf once: a span of 32 pages was 8 instructions a page
  // through set(), and a span's trip out of the page heap and back writes its pages
  // three times.
  void set_range(std::uintptr_t first, std::size_t count, Span* s) noexcept {
    const std::uintptr_t entry = entry_for(s);
    while (count != 0) {
      Entry* e = root_[first >> kLeafBits].load(std::memory_order_relaxed)->entries;
      const std::size_t at = first & (kLeafSize - 1);
      const std::size_t n = count < kLeafSize - at ? count : kLeafSize - at;
      for (std::size_t i = at; i < at + n; ++i)
        e[i].store(entry, std::memory_order_relaxed);
      first += n;
      count -= n;
    }
  }
  // Every leaf, those mapped so far and those to come, advised MADV_HUGEPAGE (a
  // leaf is one huge page, mapped aligned): the page heap asks once the heap is
  // large enough that its entries fill them. Page heap lock held.
  void use_huge_pages() noexcept;
  // The root's bytes (the leak check does not scan them for pointers).
  [[nodiscard]] static const auto& root() noexcept { return root_; }
  // Bytes of leaves mapped (metadata statistics).
  [[nodiscard]] std::size_t bytes_mapped() const noexcept {
    return leaves_.load(std::memory_order_relaxed) * sizeof(Leaf);
  }

 private:
  using Entry = std::atomic<std::uintptr_t>;
  // The span's address tagged with its size class (0 for none).
  static std::uintptr_t entry_for(const Span* s) noexcept {
    return s == nullptr ? 0 : reinterpret_cast<std::uintptr_t>(s) | s->size_class;
  }
  struct Leaf {
    Entry entries[kLeafSize];
  };
  // The window: kWindowLeaves consecutive leaves in one mapping, so that one compare
  // and one address serve them all. Set once (claim_window), the address before first, so a
  // reader that sees first sees the address; they never change after, so no reader pairs
  // one window's first page with another's address. Before: first is 2^63, which no page
  // number minus it brings below kWindowPages. The mapping reads as zeros where no
  // leaf is committed yet, so a foreign pointer in its range finds entry 0, as it
  // would through the root.
  static constexpr std::uintptr_t kNoWindow = std::uintptr_t{1} << 63;
  static_assert(kWindowLeaves <= kRootSize);
  // The window's slot for root index i, or nullptr outside it.
  [[nodiscard]] Leaf* window_slot(std::uintptr_t i) const noexcept {
    return window_ != nullptr && i - window_root_ < kWindowLeaves ? &window_[i - window_root_]
                                                                  : nullptr;
  }

  std::atomic<std::uintptr_t> window_first_{kNoWindow};
  std::atomic<std::uintptr_t> window_entries_{0};  // the window's address
  Leaf* window_ = nullptr;                         // writers only
  std::uintptr_t window_root_ = 0;                 // root index of window_[0]
  // Zero-initialised, in .bss (above); defined in page_map.cpp.
  MEMPOOL_HIDDEN static std::atomic<Leaf*> root_[kRootSize];
  // The lowest and highest page ensure() was asked for (writers only): the entries any
  // leaf can hold, so that claim_window copies those and not whole leaves (a leaf read
  // whole was 1.5 million instructions and 512 faults on its untouched pages, in every
  // C++ program, whose first mapping is the sparse arena's: libstdc++'s emergency pool).
  MEMPOOL_HIDDEN static std::uintptr_t ensured_low_;
  MEMPOOL_HIDDEN static std::uintptr_t ensured_high_;
  std::atomic<std::size_t> leaves_{0};
  bool huge_pages_ = false;
};

// The heap's page map (src/heap/page_map.cpp); zero-initialised, never destroyed.
// Hidden: free and malloc_usable_size load its hot word with one %rip-relative load.
extern constinit MEMPOOL_HIDDEN PageMap g_page_map;

}  // namespace mempool::detail
