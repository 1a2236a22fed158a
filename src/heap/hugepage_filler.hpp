// The huge-page policy of the page heap: where in a free span a new span goes, how
// large blocks round to whole huge pages, which part of a free span may go back to
// the OS without breaking a huge page, and whether the heap asks for huge pages at
// all (MEMPOOL_THP). The page heap keeps the spans; this decides, as tcmalloc's
// Temeraire filler does, so that huge pages fill up before empty ones are broken
// into, and go back to the OS whole (docs/architecture.md, "Huge pages").
//
// Everything here is plain arithmetic on page numbers; the page heap calls it under
// its lock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "span.hpp"

namespace mempool::detail {

// Transparent huge pages on x86-64 and on AArch64 with 4 KiB pages: 2 MiB.
inline constexpr unsigned kHugePageShift = 21;
inline constexpr std::size_t kHugePageSize = std::size_t{1} << kHugePageShift;
inline constexpr std::size_t kHugePagePages = kHugePageSize >> kHeapPageShift;  // 256

// MEMPOOL_THP.
enum class ThpMode : std::uint8_t {
  kAuto,    // follow the system: huge pages where `enabled` is always or madvise
  kAlways,  // as kAuto, and the heap's metadata on huge pages from the start
  kNever,   // MADV_NOHUGEPAGE on the heap: 4 KiB pages even where the system says always
};

// A range of heap pages [first, first + count).
struct PageRange {
  std::uintptr_t first = 0;
  std::size_t count = 0;
};

class HugePageFiller {
 public:
  // Whether the heap's memory is to be on huge pages: the mode, and the system
  // allowing them (always or madvise).
  [[nodiscard]] bool enabled() const noexcept { return enabled_; }
  [[nodiscard]] ThpMode mode() const noexcept { return mode_; }
  void set_mode(ThpMode mode) noexcept;

  // The pages of a free span [first, first + count) to hand out for a request of
  // `pages` (count >= pages): the end that lies in a huge page already partly in
  // use, where the request fits there (the smaller such piece: best fit); else the
  // start. A span that holds only whole huge pages is broken at its start.
  [[nodiscard]] static std::uintptr_t place(std::uintptr_t first, std::size_t count,
                                            std::size_t pages) noexcept;

  // A large block of `pages` pages: the pages to take and their alignment. From
  // 1 MiB up a block starts on a huge page; it is rounded up to whole huge pages
  // when that wastes at most an eighth, so that it leaves no piece of a huge page
  // behind and goes back whole.
  struct LargeShape {
    std::size_t pages;
    std::size_t align_pages;
  };
  [[nodiscard]] LargeShape large_shape(std::size_t pages, std::size_t align_pages) const noexcept;

  // The whole huge pages inside [first, first + count): what may go back to the OS
  // without breaking a huge page (count 0: none).
  [[nodiscard]] static PageRange whole_huge_pages(std::uintptr_t first, std::size_t count) noexcept;

  // Commits and reservations: `pages` rounded up to whole huge pages.
  [[nodiscard]] static std::size_t round_up(std::size_t pages) noexcept {
    return (pages + kHugePagePages - 1) & ~(kHugePagePages - 1);
  }
  // The bytes of a free span outside its whole huge pages: free memory held in huge
  // pages that are partly in use (statistics).
  [[nodiscard]] static std::size_t partial_bytes(std::uintptr_t first, std::size_t count) noexcept {
    return (count - whole_huge_pages(first, count).count) << kHeapPageShift;
  }

 private:
  ThpMode mode_ = ThpMode::kAuto;
  bool enabled_ = false;  // set_mode: until the options are read, 4 KiB pages
};

}  // namespace mempool::detail
