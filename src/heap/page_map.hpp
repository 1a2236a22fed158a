// The page map: a two-level radix tree from page number to span (and size
// class, in the entry's low bits), the one place
// that answers "whose block is this?". 48-bit addresses, 8 KiB pages: 2^17 root
// entries (1 MiB, in .bss, touched only where used) of leaves of 2^18 entries
// (2 MiB each, mapped on demand, each covering 2 GiB of address space).
// The root is a static member, apart from the object: the object's first word is not
// zero (hot_), which put the whole object, root and all, in .data. There the root was
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

  // The entry for the page of p: the span's address with its size class in the
  // low 7 bits (0 for a large or free span), or 0 (for any value of p).
  MEMPOOL_ALWAYS_INLINE std::uintptr_t lookup_entry(const void* p) const noexcept {
    const std::uintptr_t page = reinterpret_cast<std::uintptr_t>(p) >> kHeapPageShift;
    const std::uintptr_t root_index = page >> kLeafBits;
    // The hot leaf first (make_hot: the small blocks' newest region): its load does not
    // depend on p, so a hit leaves one load between p and its entry instead of two. That
    // chain bounds a free followed by an allocation (the free's push waits for the
    // class): measured 1 ns of a 6 ns pair with random sizes.
    const std::uintptr_t hot = hot_.load(std::memory_order_acquire);
    if (MEMPOOL_LIKELY(root_index == (hot & kHotIndexMask))) {
      // base + page * 8 is the entry's address in the hot leaf (see hot_).
      // NOLINTNEXTLINE(performance-no-int-to-ptr): the base is an integer by design
      return reinterpret_cast<const Entry*>((hot & ~kHotIndexMask) + page * sizeof(Entry))
          ->load(std::memory_order_relaxed);
    }
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

  // Maps the leaves that pages [first, first + count) need; false when the OS
  // refuses memory or the range lies beyond 48 bits. Page heap lock held. The hot
  // leaf stays as it was, but for the first leaf, which becomes the hot one.
  bool ensure(std::uintptr_t first, std::size_t count) noexcept;
  // Lookups of pages in the leaf of `page` (which ensure mapped) take the shortcut from
  // now on, and those of other leaves the root. The page heap calls it for each region
  // it maps for small blocks, not for a large block's mapping or the sparse arena's:
  // when the newest leaf was the shortcut's, one 100 MiB buffer or 100 KiB block
  // mapped in another 2 GiB of address space (where the kernel put it) sent every later
  // free of a small block through the root. Page heap lock held.
  void make_hot(std::uintptr_t page) noexcept;
  // Whether p's lookup takes the shortcut (tests).
  [[nodiscard]] bool is_hot(const void* p) const noexcept {
    const std::uintptr_t root_index = reinterpret_cast<std::uintptr_t>(p) >> kLeafAddressShift;
    return root_index == (hot_.load(std::memory_order_acquire) & kHotIndexMask);
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
  // hot_: the hot leaf (make_hot) as one word, so that no reader pairs a leaf with the wrong
  // root index. Its low 18 bits hold the leaf's root index; the rest is the leaf's
  // address less root index x kLeafSize entries, the base from which the whole page
  // number indexes the leaf. Leaves are mapped aligned to 2^18 bytes, so the base's
  // low bits are free for the index. Against the former layout (the index in the top
  // bits, 0 for none) free() takes four instructions fewer: no 64-bit mask to
  // load and apply (one imm32 `and`), no test for 0, no masking of the page number.
  static constexpr unsigned kHotIndexBits = kRootBits + 1;  // one more: kHotUnset's
  static constexpr std::uintptr_t kHotIndexMask = (std::uintptr_t{1} << kHotIndexBits) - 1;
  static constexpr std::size_t kLeafAlignment = kHotIndexMask + 1;
  static constexpr unsigned kLeafIndexShift = kLeafBits + 3;                 // root index -> bytes
  static constexpr unsigned kLeafAddressShift = kLeafBits + kHeapPageShift;  // address -> root
  static_assert(sizeof(Entry) == std::size_t{1} << 3);
  // Before the first leaf: root index 2^18 - 1, past the 48-bit address space the map
  // covers (x86-64's 47-bit user space, AArch64's 48-bit one, whose stack and mmap area
  // lie in its last root index), with the base that indexes its pages from address 0.
  // A free of a pointer from 2^49 - 2 GiB up, before the heap's first allocation,
  // would read below 2 MiB and fault there, as a null pointer does; from the first
  // leaf on such a pointer takes the slow path, which rejects it.
  static constexpr std::uintptr_t kHotUnsetIndex = kHotIndexMask;
  static_assert(kHotUnsetIndex >= kRootSize);
  static constexpr std::uintptr_t kHotUnset =
      (std::uintptr_t{0} - (kHotUnsetIndex << kLeafIndexShift)) | kHotUnsetIndex;
  static constexpr std::uintptr_t hot_word(std::uintptr_t leaf,
                                           std::uintptr_t root_index) noexcept {
    return (leaf - (root_index << kLeafIndexShift)) | root_index;
  }

  std::atomic<std::uintptr_t> hot_{kHotUnset};
  // Zero-initialised, in .bss (above); defined in page_map.cpp.
  MEMPOOL_HIDDEN static std::atomic<Leaf*> root_[kRootSize];
  std::atomic<std::size_t> leaves_{0};
  bool huge_pages_ = false;
};

// The heap's page map (src/heap/page_map.cpp); zero-initialised, never destroyed.
// Hidden: free and malloc_usable_size load its hot word with one %rip-relative load.
extern constinit MEMPOOL_HIDDEN PageMap g_page_map;

}  // namespace mempool::detail
