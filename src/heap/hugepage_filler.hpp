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
  kAuto,    // follow the system (always or madvise), once the dense arena holds kAutoFromBytes
  kAlways,  // as kAuto from the first byte, the heap's metadata too
  kNever,   // MADV_NOHUGEPAGE on the heap: 4 KiB pages even where the system says always
};

// Under kAuto the heap turns to huge pages once it has mapped this much: below it
// a huge page partly used costs more, relatively, than the TLB misses it saves.
// Huge pages from the first byte: redis with 100,000 keys took 36 MiB instead of
// 28, sqlite 36 instead of 31; from 32 MiB, 27.6 and 32.9. From 64 MiB sqlite kept
// its 31, but bigheap lost most of its gain: its 32 MiB bucket array, allocated
// first, stayed on 4 KiB pages (docs/architecture.md).
inline constexpr std::size_t kAutoFromBytes = std::size_t{32} << 20;

// A range of heap pages [first, first + count).
struct PageRange {
  std::uintptr_t first = 0;
  std::size_t count = 0;
};

class HugePageFiller {
 public:
  // Whether the heap's memory is to be on huge pages: the mode and the system
  // allowing them (always or madvise), and under kAuto the heap large enough.
  [[nodiscard]] bool enabled() const noexcept { return enabled_; }
  [[nodiscard]] bool allowed() const noexcept { return allowed_; }
  [[nodiscard]] ThpMode mode() const noexcept { return mode_; }
  void set_mode(ThpMode mode) noexcept;
  // The heap has reached kAutoFromBytes: huge pages from now on, where allowed.
  void activate() noexcept {
    active_ = true;
    enabled_ = allowed_;
  }

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
  bool allowed_ = false;  // set_mode
  bool active_ = false;   // activate
  bool enabled_ = false;
};

}  // namespace mempool::detail
