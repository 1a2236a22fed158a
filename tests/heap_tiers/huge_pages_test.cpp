// The page heap on transparent huge pages (hugepage_filler.hpp, page_heap.cpp):
// the filler's arithmetic, then the page heap itself, read back from the kernel
// (/proc/self/smaps for a mapping's flags and huge pages, mincore for which pages
// are resident). ctest runs each test in a process of its own; where the system
// has no THP (enabled = never), the checks that need the kernel's huge pages skip.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "../support/test_support.hpp"
#include "heap/class_info.hpp"
#include "heap/hugepage_filler.hpp"
#include "heap/page_heap.hpp"
#include "heap/page_map.hpp"
#include "mempool/detail/os.hpp"

namespace mempool::detail {
namespace {

constexpr std::size_t kH = kHugePagePages;  // heap pages in a huge page (256)

bool system_has_thp() {
  return os_system_huge_pages() != SystemHugePages::kNever;
}

void* at_page(std::uintptr_t page) {
  return address_as(page << kHeapPageShift);
}

// ---- The filler's arithmetic --------------------------------------------------

TEST(HugePageFiller, PlacesASpanInAPartlyUsedHugePageFirst) {
  // A free span from page 10 of a huge page to page 98 of the third: 246 pages
  // in the first huge page's end, 256 whole, 98 in the third's start.
  const std::uintptr_t first = 10;
  const std::size_t count = (kH - 10) + kH + 98;
  // Fits both partial ends: the smaller (best fit), the tail.
  EXPECT_EQ(HugePageFiller::place(first, count, 50), first + count - 50);
  // Fits only the head's 246 pages.
  EXPECT_EQ(HugePageFiller::place(first, count, 100), first);
  // Fits neither: the start.
  EXPECT_EQ(HugePageFiller::place(first, count, 300), first);
  // Only whole huge pages: broken at the start.
  EXPECT_EQ(HugePageFiller::place(kH, 2 * kH, 8), kH);
  // Aligned start, partial end: the end.
  EXPECT_EQ(HugePageFiller::place(kH, kH + 44, 40), kH + kH + 44 - 40);
  // Inside one huge page: the start.
  EXPECT_EQ(HugePageFiller::place(kH + 10, 20, 5), kH + 10);
}

TEST(HugePageFiller, WholeHugePagesOfASpan) {
  PageRange r = HugePageFiller::whole_huge_pages(10, (kH - 10) + 2 * kH + 98);
  EXPECT_EQ(r.first, kH);
  EXPECT_EQ(r.count, 2 * kH);
  r = HugePageFiller::whole_huge_pages(10, 2 * kH - 20);  // ends before the second is whole
  EXPECT_EQ(r.count, 0u);
  r = HugePageFiller::whole_huge_pages(kH, kH);
  EXPECT_EQ(r.first, kH);
  EXPECT_EQ(r.count, kH);
  EXPECT_EQ(HugePageFiller::partial_bytes(10, (kH - 10) + 2 * kH + 98),
            ((kH - 10) + 98) * kHeapPageSize);
  EXPECT_EQ(HugePageFiller::round_up(1), kH);
  EXPECT_EQ(HugePageFiller::round_up(kH), kH);
  EXPECT_EQ(HugePageFiller::round_up(kH + 1), 2 * kH);
}

TEST(HugePageFiller, LargeBlocksTakeWholeHugePagesWhenLittleIsWasted) {
  HugePageFiller filler;
  filler.set_mode(ThpMode::kNever);
  EXPECT_FALSE(filler.enabled());
  EXPECT_EQ(filler.large_shape(240, 1).pages, 240u) << "off: as asked";
  EXPECT_EQ(filler.large_shape(240, 1).align_pages, 1u);
  filler.set_mode(ThpMode::kAuto);
  EXPECT_FALSE(filler.enabled()) << "auto: not before the heap is large";
  EXPECT_EQ(filler.allowed(), system_has_thp());
  filler.activate();
  ASSERT_EQ(filler.enabled(), system_has_thp());
  if (!filler.enabled()) GTEST_SKIP() << "no transparent huge pages on this system";
  // 1.875 MiB: 16 pages (1/15) short of a huge page, rounded up and aligned.
  EXPECT_EQ(filler.large_shape(240, 1).pages, kH);
  EXPECT_EQ(filler.large_shape(240, 1).align_pages, kH);
  // 2.34 MiB: rounding would waste 212 pages, more than an eighth: aligned only.
  EXPECT_EQ(filler.large_shape(300, 1).pages, 300u);
  EXPECT_EQ(filler.large_shape(300, 1).align_pages, kH);
  // Under 1 MiB: as asked.
  EXPECT_EQ(filler.large_shape(100, 1).pages, 100u);
  EXPECT_EQ(filler.large_shape(100, 1).align_pages, 1u);
  // An alignment above a huge page stays.
  EXPECT_EQ(filler.large_shape(240, 2 * kH).align_pages, 2 * kH);
}

// ---- The page heap --------------------------------------------------------------

TEST(HeapHugePages, NoCommitBoundarySplitsAHugePage) {
  g_page_heap.set_thp_mode(ThpMode::kAlways);  // kAuto waits for kAutoFromBytes
  std::vector<Span*> spans;
  // Spans of every shape, so that the heap commits several times.
  for (std::size_t pages : {1u, 3u, 200u, 1024u, 5u, 3000u, 17u}) {
    Span* s = g_page_heap.allocate(pages, 1, SpanState::kSmall);
    ASSERT_NE(s, nullptr);
    spans.push_back(s);
  }
  for (Span* s : spans) {
    // Every huge page the span touches lies whole inside one read-write mapping.
    const std::uintptr_t low = s->start & ~(kHugePageSize - 1);
    const std::uintptr_t high = (s->start + s->bytes() + kHugePageSize - 1) & ~(kHugePageSize - 1);
    const mempool_test::Mapping m = mempool_test::mapping_of(address_as(s->start));
    ASSERT_TRUE(m.found);
    EXPECT_LE(m.start, low) << "a commit boundary inside the huge page before " << s->start;
    EXPECT_GE(m.end, high) << "a commit boundary inside the huge page after " << s->start;
    EXPECT_TRUE(m.has_flag("rd") && m.has_flag("wr")) << m.flags;
    if (system_has_thp()) {
      EXPECT_TRUE(m.has_flag("hg")) << "advised MADV_HUGEPAGE: " << m.flags;
    }
  }
  EXPECT_EQ(g_page_heap.huge_pages_enabled(), system_has_thp());
  EXPECT_EQ(g_page_heap.stats().bytes_huge_advised != 0, system_has_thp());
  for (Span* s : spans)
    g_page_heap.free(s);
}

TEST(HeapHugePages, LargeSpansStartOnAHugePage) {
  g_page_heap.set_thp_mode(ThpMode::kAlways);
  if (!system_has_thp()) GTEST_SKIP() << "no transparent huge pages on this system";
  Span* pin = g_page_heap.allocate(3);  // the heap's first huge page is partly used
  Span* big = g_page_heap.allocate(600);
  ASSERT_NE(pin, nullptr);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->first_page() % kH, 0u) << "a block of 1 MiB and more starts on a huge page";
  EXPECT_EQ(big->pages, 600u);
  Span* rounded = g_page_heap.allocate(2 * kH - 20);  // 1/25 short of two huge pages
  ASSERT_NE(rounded, nullptr);
  EXPECT_EQ(rounded->pages, 2 * kH) << "rounded up to whole huge pages";
  // A small span goes into the partly used huge page after `big`, not a new one.
  Span* small = g_page_heap.allocate(8, 1, SpanState::kSmall);
  ASSERT_NE(small, nullptr);
  const std::uintptr_t big_end = big->first_page() + big->pages;
  const std::uintptr_t pin_huge = pin->first_page() / kH;
  const bool fills_partial =
      small->first_page() / kH == pin_huge || small->first_page() / kH == (big_end - 1) / kH;
  EXPECT_TRUE(fills_partial) << "the small span broke into an empty huge page";
  for (Span* s : {pin, big, rounded, small})
    g_page_heap.free(s);
}

// Touches every OS page of a span.
void touch(const Span* s) {
  std::memset(address_as(s->start), 0x5a, s->bytes());
}

TEST(HeapHugePages, DecayGivesBackWholeHugePagesAndKeepsPartlyUsedOnes) {
  g_page_heap.set_thp_mode(ThpMode::kAlways);
  if (!system_has_thp()) GTEST_SKIP() << "no transparent huge pages on this system";
  constexpr std::uint64_t kDecay = 1000;
  g_page_heap.set_decay_ms(kDecay);
  // Demand stays above half its peak (the 64 MiB), so decay does not break pages.
  Span* demand = g_page_heap.allocate(64 * kH / 2);
  Span* x = g_page_heap.allocate(3 * kH);  // three whole huge pages
  ASSERT_NE(demand, nullptr);
  ASSERT_NE(x, nullptr);
  ASSERT_EQ(x->first_page() % kH, 0u);
  touch(x);
  const std::uintptr_t first = x->first_page();
  // x keeps 300 pages: its second huge page is partly used, its third free.
  ASSERT_TRUE(g_page_heap.resize(x, kH + 44));
  const std::size_t partial_free_pages = kH - 44;
  void* partial = at_page(first + kH + 44);
  void* whole = at_page(first + 2 * kH);
  ASSERT_EQ(mempool_test::resident_bytes_in(whole, kHugePageSize), kHugePageSize);

  g_page_heap.decay(PageHeap::now_ms());  // not expired yet: nothing goes back
  EXPECT_EQ(mempool_test::resident_bytes_in(whole, kHugePageSize), kHugePageSize);
  g_page_heap.decay(PageHeap::now_ms() + kDecay + 1);
  EXPECT_EQ(mempool_test::resident_bytes_in(whole, kHugePageSize), 0u)
      << "the free huge page went back whole after the decay";
  EXPECT_EQ(mempool_test::resident_bytes_in(partial, partial_free_pages * kHeapPageSize),
            partial_free_pages * kHeapPageSize)
      << "the free pages of a partly used huge page stay (no break without pressure)";
  const PageHeapStats st = g_page_heap.stats();
  EXPECT_GE(st.bytes_free_partial_huge, partial_free_pages * kHeapPageSize);
  EXPECT_EQ(st.huge_pages_broken, 0u);
  // x freed: its huge pages are whole again and go back at the next decay.
  g_page_heap.free(x);
  g_page_heap.decay(PageHeap::now_ms() + kDecay + 1);
  EXPECT_EQ(mempool_test::resident_bytes_in(at_page(first), 2 * kHugePageSize), 0u);
  g_page_heap.free(demand);
}

TEST(HeapHugePages, CollectBreaksAPartlyUsedHugePageAndMarksIt) {
  g_page_heap.set_thp_mode(ThpMode::kAlways);
  if (!system_has_thp()) GTEST_SKIP() << "no transparent huge pages on this system";
  Span* x = g_page_heap.allocate(2 * kH);
  ASSERT_NE(x, nullptr);
  touch(x);
  ASSERT_TRUE(g_page_heap.resize(x, kH + 44));  // the second huge page partly used
  void* partial = at_page(x->first_page() + kH + 44);
  ASSERT_GT(mempool_test::resident_bytes_in(partial, (kH - 44) * kHeapPageSize), 0u);
  g_page_heap.release_all();  // collect(): pressure
  EXPECT_EQ(mempool_test::resident_bytes_in(partial, (kH - 44) * kHeapPageSize), 0u)
      << "under pressure the free part of a partly used huge page goes back";
  EXPECT_GT(g_page_heap.stats().huge_pages_broken, 0u);
  EXPECT_EQ(g_page_heap.stats().bytes_free_resident, 0u);
  // Marked MADV_NOHUGEPAGE, so that khugepaged does not fill it in again.
  const mempool_test::Mapping m = mempool_test::mapping_of(partial);
  ASSERT_TRUE(m.found);
  EXPECT_TRUE(m.has_flag("nh")) << m.flags;
  EXPECT_LE(m.start, x->start + kHugePageSize);
  EXPECT_GE(m.end, x->start + 2 * kHugePageSize);
  // The pages x still uses are intact.
  EXPECT_EQ(static_cast<unsigned char*>(address_as(x->start))[x->bytes() - 1], 0x5a);
  g_page_heap.free(x);
}

TEST(HeapHugePages, TheMemoryLimitBreaksHugePagesBeforeTheHeapGrows) {
  g_page_heap.set_thp_mode(ThpMode::kAlways);
  if (!system_has_thp()) GTEST_SKIP() << "no transparent huge pages on this system";
  g_page_heap.set_decay_ms(PageHeap::kNoDecay);
  // 32 spans of 256 KiB (8 MiB, 4 huge pages), every other one freed: 4 MiB free
  // in partly used huge pages, which decay alone would keep.
  std::vector<Span*> spans;
  for (int i = 0; i < 32; ++i) {
    Span* s = g_page_heap.allocate(32, 1, SpanState::kSmall);
    ASSERT_NE(s, nullptr);
    touch(s);
    spans.push_back(s);
  }
  for (std::size_t i = 0; i < spans.size(); i += 2)
    g_page_heap.free(spans[i]);
  const PageHeapStats before = g_page_heap.stats();
  ASSERT_GE(before.bytes_free_resident, std::size_t{4} << 20);
  // A limit of what is in use now: the next growth must give the free pages back,
  // breaking the huge pages they share with the spans in use.
  const std::size_t in_use = before.bytes_in_spans;
  g_page_heap.set_memory_limit(in_use);
  // More than every page the heap has: it must grow.
  Span* more =
      g_page_heap.allocate(HugePageFiller::round_up(before.bytes_mapped / kHeapPageSize) + kH);
  g_page_heap.set_memory_limit(0);
  EXPECT_GT(g_page_heap.stats().huge_pages_broken, 0u);
  EXPECT_EQ(g_page_heap.stats().bytes_free_resident, 0u);
  // The spans in use kept their bytes.
  for (std::size_t i = 1; i < spans.size(); i += 2)
    EXPECT_EQ(static_cast<unsigned char*>(address_as(spans[i]->start))[100], 0x5a);
  if (more != nullptr) g_page_heap.free(more);  // refused once is allowed (take_limit_refusal)
  for (std::size_t i = 1; i < spans.size(); i += 2)
    g_page_heap.free(spans[i]);
}

TEST(HeapHugePages, NeverAdvisesNoHugePages) {
  g_page_heap.release_all();  // no huge page faulted in before stays
  g_page_heap.set_thp_mode(ThpMode::kNever);
  EXPECT_FALSE(g_page_heap.huge_pages_enabled());
  Span* s = g_page_heap.allocate(8 * kH);  // 16 MiB
  ASSERT_NE(s, nullptr);
  touch(s);
  const mempool_test::Mapping m = mempool_test::mapping_of(address_as(s->start));
  ASSERT_TRUE(m.found);
  if (system_has_thp()) {
    EXPECT_TRUE(m.has_flag("nh")) << m.flags;
  }
  EXPECT_EQ(m.anon_huge_bytes, 0u) << "no huge page under THP never";
  EXPECT_EQ(g_page_heap.stats().bytes_huge_advised, 0u);
  g_page_heap.free(s);
  g_page_heap.set_thp_mode(ThpMode::kAlways);
}

TEST(HeapHugePages, AutoTurnsToHugePagesOnceTheHeapIsLarge) {
  g_page_heap.set_thp_mode(ThpMode::kAuto);
  if (!system_has_thp()) GTEST_SKIP() << "no transparent huge pages on this system";
  // The heap must start small (ctest runs each test in a process of its own; in one
  // process with the others, they have grown it past the switch already).
  if (g_page_heap.stats().bytes_mapped + 8 * kH * kHeapPageSize >= kAutoFromBytes)
    GTEST_SKIP() << "the heap is past the switch already: run this test alone";
  // A small heap: 4 KiB pages, and the heap as before huge pages.
  std::vector<Span*> spans;
  while (g_page_heap.stats().bytes_mapped + 8 * kH * kHeapPageSize < kAutoFromBytes) {
    spans.push_back(g_page_heap.allocate(kH, 1, SpanState::kSmall));
    ASSERT_NE(spans.back(), nullptr);
    EXPECT_FALSE(g_page_heap.huge_pages_enabled())
        << g_page_heap.stats().bytes_mapped << " bytes mapped";
  }
  EXPECT_EQ(g_page_heap.stats().bytes_huge_advised, 0u);
  EXPECT_FALSE(mempool_test::mapping_of(address_as(spans.front()->start)).has_flag("hg"));
  // Past kAutoFromBytes: huge pages, the address space reserved before included.
  while (g_page_heap.stats().bytes_mapped < kAutoFromBytes) {
    spans.push_back(g_page_heap.allocate(kH, 1, SpanState::kSmall));
    ASSERT_NE(spans.back(), nullptr);
  }
  EXPECT_TRUE(g_page_heap.huge_pages_enabled());
  EXPECT_GE(g_page_heap.stats().bytes_huge_advised, kAutoFromBytes);
  EXPECT_TRUE(mempool_test::mapping_of(address_as(spans.front()->start)).has_flag("hg"));
  for (Span* s : spans)
    g_page_heap.free(s);
}

// Under kAuto, spans of blocks of 64 KiB and more live in the sparse arena, address
// space advised MADV_NOHUGEPAGE; spans of smaller blocks and large blocks in the dense
// one, which turns to huge pages. THP always puts everything in the dense one.
TEST(HeapHugePages, AutoKeepsBigBlocksOffHugePages) {
  g_page_heap.set_thp_mode(ThpMode::kAuto);
  if (!system_has_thp()) GTEST_SKIP() << "no transparent huge pages on this system";
  const auto c64k = static_cast<std::uint8_t>(heap_class_of(std::size_t{64} << 10));
  const auto c8k = static_cast<std::uint8_t>(heap_class_of(std::size_t{8} << 10));
  ASSERT_GE(kHeapClasses[c64k].size, std::size_t{64} << 10);
  ASSERT_LT(kHeapClasses[c8k].size, std::size_t{64} << 10);
  Span* big_blocks =
      g_page_heap.allocate(kHeapClasses[c64k].span_pages, 1, SpanState::kSmall, c64k);
  Span* half_mib = g_page_heap.allocate(64);  // a large block of 512 KiB: dense
  Span* small_blocks =
      g_page_heap.allocate(kHeapClasses[c8k].span_pages, 1, SpanState::kSmall, c8k);
  Span* two_mib = g_page_heap.allocate(kH);
  for (Span* s : {big_blocks, half_mib, small_blocks, two_mib})
    ASSERT_NE(s, nullptr);
  const mempool_test::Mapping sparse = mempool_test::mapping_of(address_as(big_blocks->start));
  ASSERT_TRUE(sparse.found);
  EXPECT_TRUE(sparse.has_flag("nh")) << sparse.flags;
  for (Span* s : {half_mib, small_blocks, two_mib}) {
    const mempool_test::Mapping m = mempool_test::mapping_of(address_as(s->start));
    ASSERT_TRUE(m.found);
    EXPECT_FALSE(m.has_flag("nh")) << s->pages << " pages: " << m.flags;
    // Apart: no mapping holds spans of both arenas.
    EXPECT_FALSE(m.start <= big_blocks->start && big_blocks->start < m.end);
  }
  for (Span* s : {big_blocks, half_mib, small_blocks, two_mib})
    g_page_heap.free(s);

  g_page_heap.set_thp_mode(ThpMode::kAlways);
  Span* always = g_page_heap.allocate(kHeapClasses[c64k].span_pages, 1, SpanState::kSmall, c64k);
  ASSERT_NE(always, nullptr);
  const mempool_test::Mapping m = mempool_test::mapping_of(address_as(always->start));
  ASSERT_TRUE(m.found);
  EXPECT_TRUE(m.has_flag("hg")) << "THP always: on huge pages, " << m.flags;
  g_page_heap.free(always);
}

// The sparse arena gives back a free span after the decay as the heap does under
// THP never, whole, while the dense arena on huge pages keeps the free pages of a
// partly used huge page.
TEST(HeapHugePages, ASparseSpanGoesBackAfterTheDecay) {
  g_page_heap.set_thp_mode(ThpMode::kAuto);
  if (!system_has_thp()) GTEST_SKIP() << "no transparent huge pages on this system";
  constexpr std::uint64_t kDecay = 1000;
  g_page_heap.set_decay_ms(kDecay);
  // 32 MiB of dense memory: the heap turns to huge pages.
  Span* dense = g_page_heap.allocate(kAutoFromBytes / kHeapPageSize);
  ASSERT_NE(dense, nullptr);
  ASSERT_TRUE(g_page_heap.huge_pages_enabled());
  const auto c = static_cast<std::uint8_t>(heap_class_of(std::size_t{128} << 10));
  const std::size_t span_pages = kHeapClasses[c].span_pages;
  Span* pin = g_page_heap.allocate(span_pages, 1, SpanState::kSmall, c);  // off the edge
  Span* x = g_page_heap.allocate(span_pages, 1, SpanState::kSmall, c);
  Span* after = g_page_heap.allocate(span_pages, 1, SpanState::kSmall, c);
  ASSERT_NE(pin, nullptr);
  ASSERT_NE(x, nullptr);
  ASSERT_NE(after, nullptr);
  touch(x);
  void* pages = address_as(x->start);
  const std::size_t bytes = x->bytes();
  ASSERT_EQ(mempool_test::resident_bytes_in(pages, bytes), bytes);
  const std::size_t broken_before = g_page_heap.stats().huge_pages_broken;  // other tests' too
  g_page_heap.free(x);
  g_page_heap.decay(PageHeap::now_ms());  // not expired yet
  EXPECT_EQ(mempool_test::resident_bytes_in(pages, bytes), bytes);
  g_page_heap.decay(PageHeap::now_ms() + kDecay + 1);
  EXPECT_EQ(mempool_test::resident_bytes_in(pages, bytes), 0u)
      << "a free span of the sparse arena goes back after the decay";
  EXPECT_EQ(g_page_heap.stats().huge_pages_broken, broken_before);
  g_page_heap.free(pin);
  g_page_heap.free(after);
  g_page_heap.free(dense);
}

}  // namespace
}  // namespace mempool::detail
