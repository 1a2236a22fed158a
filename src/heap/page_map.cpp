#include "page_map.hpp"

#include <algorithm>
#include <cstdint>

#include "mempool/detail/os.hpp"

namespace mempool::detail {

constinit PageMap g_page_map;
constinit std::atomic<PageMap::Leaf*> PageMap::root_[PageMap::kRootSize] = {};
constinit std::uintptr_t PageMap::ensured_low_ = UINTPTR_MAX;
constinit std::uintptr_t PageMap::ensured_high_ = 0;

bool PageMap::ensure(std::uintptr_t first, std::size_t count) noexcept {
  const std::uintptr_t last = first + count - 1;
  if (count == 0 || last < first || (last >> kLeafBits) >= kRootSize) return false;
  ensured_low_ = std::min(ensured_low_, first);
  ensured_high_ = std::max(ensured_high_, last);
  for (std::uintptr_t i = first >> kLeafBits; i <= (last >> kLeafBits); ++i) {
    if (root_[i].load(std::memory_order_relaxed) != nullptr) continue;
    // Zero-filled by the OS: every entry starts as nullptr. Aligned to its size,
    // 2 MiB: one huge page, where it can be (the window's slots are too).
    Leaf* leaf = window_slot(i);
    if (leaf != nullptr
            ? !os_commit(leaf, sizeof(Leaf))
            : (leaf = static_cast<Leaf*>(os_map_aligned(sizeof(Leaf), sizeof(Leaf)))) == nullptr)
      return false;
    if (huge_pages_) os_advise_huge_pages(leaf, sizeof(Leaf), true);
    root_[i].store(leaf, std::memory_order_release);
    leaves_.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

void PageMap::claim_window(std::uintptr_t page) noexcept {
  if (window_ != nullptr) return;
  const std::uintptr_t top = page >> kLeafBits;
  if (top >= kRootSize) return;
  // The leaf above and 14 below, inside the root's range.
  std::uintptr_t low = top + 2 > kWindowLeaves ? top + 2 - kWindowLeaves : 0;
  if (low > kRootSize - kWindowLeaves) low = kRootSize - kWindowLeaves;
  auto* slots = static_cast<Leaf*>(os_reserve_zeros(kWindowLeaves * sizeof(Leaf), sizeof(Leaf)));
  if (slots == nullptr) return;
  // Leaves already mapped in its range: their entries into its slots (writers hold the
  // page heap lock, as here). The old leaf stays mapped: a reader may have loaded its
  // address from the root, and reads there what the slot holds.
  for (std::size_t k = 0; k < kWindowLeaves; ++k) {
    const Leaf* old = root_[low + k].load(std::memory_order_relaxed);
    if (old == nullptr) continue;
    if (!os_commit(&slots[k], sizeof(Leaf))) {
      // Nothing points into it yet. The slots committed so far were counted as maps.
      for (std::size_t j = 0; j < k; ++j)
        if (root_[low + j].load(std::memory_order_relaxed) != nullptr)
          os_unmap(&slots[j], sizeof(Leaf));
      os_unreserve(slots, kWindowLeaves * sizeof(Leaf));
      return;
    }
    // Only the pages ensure() was asked for can hold an entry.
    const std::uintptr_t leaf_first = (low + k) << kLeafBits;
    const std::uintptr_t leaf_last = leaf_first + kLeafSize - 1;
    if (ensured_low_ <= leaf_last && ensured_high_ >= leaf_first) {
      const std::uintptr_t to = std::min(ensured_high_, leaf_last) - leaf_first;
      for (std::uintptr_t e = std::max(ensured_low_, leaf_first) - leaf_first; e <= to; ++e) {
        if (const std::uintptr_t v = old->entries[e].load(std::memory_order_relaxed); v != 0)
          slots[k].entries[e].store(v, std::memory_order_relaxed);
      }
    }
    if (huge_pages_) os_advise_huge_pages(&slots[k], sizeof(Leaf), true);
  }
  for (std::size_t k = 0; k < kWindowLeaves; ++k) {
    if (root_[low + k].load(std::memory_order_relaxed) != nullptr) {
      root_[low + k].store(&slots[k], std::memory_order_release);
      leaves_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  window_ = slots;
  window_root_ = low;
  window_entries_.store(reinterpret_cast<std::uintptr_t>(slots), std::memory_order_relaxed);
  // Release: a reader that sees first sees the address and the slots' entries.
  window_first_.store(low << kLeafBits, std::memory_order_release);
}

void PageMap::use_huge_pages() noexcept {
  if (huge_pages_) return;
  huge_pages_ = true;
  for (std::size_t i = 0; i < kRootSize; ++i) {
    if (Leaf* leaf = root_[i].load(std::memory_order_relaxed); leaf != nullptr)
      os_advise_huge_pages(leaf, sizeof(Leaf), true);
  }
}

}  // namespace mempool::detail
