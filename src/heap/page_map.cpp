#include "page_map.hpp"

#include "mempool/detail/os.hpp"

namespace mempool::detail {

constinit PageMap g_page_map;
constinit std::atomic<PageMap::Leaf*> PageMap::root_[PageMap::kRootSize] = {};

bool PageMap::ensure(std::uintptr_t first, std::size_t count) noexcept {
  const std::uintptr_t last = first + count - 1;
  if (count == 0 || last < first || (last >> kLeafBits) >= kRootSize) return false;
  for (std::uintptr_t i = first >> kLeafBits; i <= (last >> kLeafBits); ++i) {
    if (root_[i].load(std::memory_order_relaxed) != nullptr) continue;
    // Zero-filled by the OS: every entry starts as nullptr.
    // Aligned to its size, 2 MiB: one huge page, where it can be.
    static_assert(sizeof(Leaf) >= kLeafAlignment);
    void* memory = os_map_aligned(sizeof(Leaf), sizeof(Leaf));
    if (memory == nullptr) return false;
    if (huge_pages_) os_advise_huge_pages(memory, sizeof(Leaf), true);
    root_[i].store(static_cast<Leaf*>(memory), std::memory_order_release);
    leaves_.fetch_add(1, std::memory_order_relaxed);
    // The first leaf is hot until make_hot names another: the unset word's shortcut
    // reads below 2 MiB for the pointers of its root index (page_map.hpp).
    if (hot_.load(std::memory_order_relaxed) == kHotUnset) make_hot(i << kLeafBits);
  }
  return true;
}

void PageMap::make_hot(std::uintptr_t page) noexcept {
  const std::uintptr_t i = page >> kLeafBits;
  const Leaf* leaf = root_[i].load(std::memory_order_relaxed);
  // Release: a reader that takes the shortcut sees the leaf as ensure() mapped it.
  if (leaf != nullptr)
    hot_.store(hot_word(reinterpret_cast<std::uintptr_t>(leaf), i), std::memory_order_release);
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
