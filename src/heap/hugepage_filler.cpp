#include "hugepage_filler.hpp"

#include "mempool/detail/os.hpp"

namespace mempool::detail {

void HugePageFiller::set_mode(ThpMode mode) noexcept {
  mode_ = mode;
  allowed_ = mode != ThpMode::kNever && os_system_huge_pages() != SystemHugePages::kNever;
  enabled_ = allowed_ && (mode == ThpMode::kAlways || active_);
}

std::uintptr_t HugePageFiller::place(std::uintptr_t first, std::size_t count,
                                     std::size_t pages) noexcept {
  const std::uintptr_t end = first + count;
  // The pieces of huge pages at either end that other spans use part of.
  const std::size_t head = ((first + kHugePagePages - 1) & ~(kHugePagePages - 1)) - first;
  const std::size_t tail = end - (end & ~(kHugePagePages - 1));
  const bool head_fits = head != 0 && head >= pages && head < count;
  const bool tail_fits = tail != 0 && tail >= pages && tail < count;
  if (tail_fits && (!head_fits || tail < head)) return end - pages;
  return first;
}

HugePageFiller::LargeShape HugePageFiller::large_shape(std::size_t pages,
                                                       std::size_t align_pages) const noexcept {
  if (!enabled_ || pages < kHugePagePages / 2 || align_pages > kHugePagePages)
    return {pages, align_pages};
  const std::size_t whole = round_up(pages);
  return {whole - pages <= pages / 8 ? whole : pages, kHugePagePages};
}

PageRange HugePageFiller::whole_huge_pages(std::uintptr_t first, std::size_t count) noexcept {
  const std::uintptr_t low = (first + kHugePagePages - 1) & ~(kHugePagePages - 1);
  const std::uintptr_t high = (first + count) & ~(kHugePagePages - 1);
  if (high <= low) return {low, 0};
  return {low, high - low};
}

}  // namespace mempool::detail
