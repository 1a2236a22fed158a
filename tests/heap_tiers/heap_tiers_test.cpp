// Unit tests of the heap's tiers, through their internal headers (src/heap/):
// the size-class table, the page map, the page heap's spans (split, coalesce,
// release) and the central cache's batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "heap/central_cache.hpp"
#include "heap/class_info.hpp"
#include "heap/page_heap.hpp"
#include "heap/page_map.hpp"
#include "heap/thread_cache.hpp"
#include "mempool/detail/os.hpp"
#include "mempool/detail/size_classes.hpp"
#include "mempool/heap.hpp"

namespace mempool::detail {
namespace {

TEST(HeapSizeClasses, EveryClassHoldsItsSizesWithBoundedWaste) {
  for (std::size_t c = 2; c < kHeapClassCount; ++c)
    ASSERT_LT(heap_class_bytes(c - 1), heap_class_bytes(c)) << "classes ascend";
  for (std::size_t n = 1; n <= kHeapSmallMax; ++n) {
    const std::size_t c = heap_class_of(n);
    ASSERT_EQ(c, heap_class_of_computed(n)) << n;  // the table agrees with the formula
    const std::size_t size = heap_class_bytes(c);
    ASSERT_GE(size, n);
    ASSERT_TRUE(c == 1 || heap_class_bytes(c - 1) < n) << "smallest class that fits " << n;
    if (n >= 16) {
      ASSERT_EQ(size % 16, 0u) << "16-byte alignment needs 16-byte multiples";
    }
    if (n > 128) {
      ASSERT_LE((size - n) * 8, n) << "waste above 12.5% at " << n;
    }
    if (n > 64 && n <= 128) {
      ASSERT_LT(size - n, 16u) << "16-byte steps up to 128: " << n;
    }
  }
}

TEST(HeapSizeClasses, SpansAndBatchesAreSane) {
  for (std::size_t c = 1; c < kHeapClassCount; ++c) {
    const HeapClassInfo& info = kHeapClasses[c];
    EXPECT_GE(info.capacity, 8u) << c;
    // 32 blocks where they fit in 16 KiB: a thread carving 1 KiB blocks takes a span
    // from the page heap every 16 blocks, not every 8.
    if (32 * info.size <= 16 * 1024) {
      EXPECT_GE(info.capacity, 32u) << c;
    }
    EXPECT_EQ(info.capacity, info.span_pages * kHeapPageSize / info.size) << c;
    // The unused tail of a span is at most 1/16 of it.
    EXPECT_LE(info.span_pages * kHeapPageSize - info.capacity * info.size,
              info.span_pages * kHeapPageSize / 16)
        << c;
    EXPECT_GE(info.batch, 2u);
    EXPECT_LE(info.batch, 64u);
    EXPECT_GE(info.max_slots, 1u);
    EXPECT_LE(info.max_slots, kMaxCentralSlots);
    // The divisibility test of the free path agrees with %, at and around blocks.
    for (std::uint64_t off : {std::uint64_t{0}, std::uint64_t{info.size}, std::uint64_t{1},
                              std::uint64_t{info.size} - 1, std::uint64_t{info.size} * 7 + 8}) {
      EXPECT_EQ(off * info.divisor < info.divisor, off % info.size == 0) << c << " " << off;
    }
  }
}

// The hit paths' form of that test, (offset * divisor) >> 32 == 0 (span.hpp), at every
// offset of a span of every class, at the class's stride and at the hardened build's
// guarded one (16 bytes more): class_info.hpp's compile-time proof, checked by brute force.
TEST(HeapSizeClasses, TheShiftedDivisibilityTestIsExactAtEveryOffset) {
  for (std::size_t c = 1; c < kHeapClassCount; ++c) {
    const HeapClassInfo& info = kHeapClasses[c];
    const std::uint64_t bytes = std::uint64_t{info.span_pages} * kHeapPageSize;
    for (const std::uint64_t stride : {std::uint64_t{info.size}, std::uint64_t{info.size} + 16}) {
      const std::uint64_t divisor = UINT64_MAX / stride + 1;
      std::uint64_t wrong = 0;
      for (std::uint64_t off = 0; off < bytes; ++off)
        wrong += ((off * divisor) >> kSpanBlockStartBits == 0) != (off % stride == 0);
      EXPECT_EQ(wrong, 0u) << "class " << c << ", stride " << stride;
    }
  }
}

TEST(HeapPageMap, FindsEveryPageOfASpanAndNothingElse) {
  const std::uintptr_t page = (std::uintptr_t{0x7000'1234'0000} >> kHeapPageShift);
  Span span;
  span.start = page << kHeapPageShift;
  span.pages = 3;
  g_page_heap.lock();  // writers hold the page heap lock
  ASSERT_TRUE(g_page_map.ensure(page, 3));
  g_page_map.set_range(page, 3, &span);
  g_page_heap.unlock();
  for (std::size_t i = 0; i < 3 * kHeapPageSize; i += 1000)
    EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(span.start + i)), &span);
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(span.start - 1)), nullptr);
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(span.start + 3 * kHeapPageSize)), nullptr);
  // Beyond 48 bits and near zero: nullptr, no crash.
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(~std::uintptr_t{0})), nullptr);
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(std::uintptr_t{1} << 60)), nullptr);
  EXPECT_EQ(g_page_map.lookup(nullptr), nullptr);
  // The top of AArch64's user space (the last root index), and the root index past it.
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>((std::uintptr_t{1} << 48) - 4096)), nullptr);
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>((std::uintptr_t{1} << 49) - 4096)), nullptr);
  g_page_heap.lock();
  g_page_map.set_range(page, 3, nullptr);
  g_page_heap.unlock();
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(span.start)), nullptr);
}

// Lookups in the window (no root load) and through the root agree for every block of
// the heap; pages just outside the window
// go through the root, and a page inside it that no leaf covers yet reads as empty.
TEST(HeapPageMap, TheWindowAndTheRootAgree) {
  std::vector<void*> blocks;
  for (const std::size_t size : {16, 64, 4096, 100000, 300000})
    for (int i = 0; i < 64; ++i)
      blocks.push_back(mempool::allocate(size));
  for (void* p : blocks) {
    const std::uintptr_t entry = g_page_map.lookup_entry(p);
    EXPECT_NE(entry, 0u) << p;
    EXPECT_EQ(g_page_map.lookup_in_root(p), entry) << p;
  }
  // The small blocks (the first three sizes) come from the region that placed the window.
  EXPECT_EQ(std::count_if(blocks.begin(), blocks.begin() + 3 * 64,
                          [](void* p) { return !g_page_map.in_window(p); }),
            0);
  const std::uintptr_t first = g_page_map.window_first_page();
  ASSERT_NE(first, 0u);
  const auto at_page = [](std::uintptr_t page) {
    return reinterpret_cast<void*>(page << kHeapPageShift);
  };
  EXPECT_TRUE(g_page_map.in_window(at_page(first)));
  EXPECT_TRUE(g_page_map.in_window(at_page(first + PageMap::kWindowPages - 1)));
  EXPECT_FALSE(g_page_map.in_window(at_page(first - 1)));
  EXPECT_FALSE(g_page_map.in_window(at_page(first + PageMap::kWindowPages)));
  // Pages at the window's ends: what the root says (0 where no leaf is), no fault.
  for (const std::uintptr_t page :
       {first - 1, first, first + PageMap::kWindowPages - 1, first + PageMap::kWindowPages})
    EXPECT_EQ(g_page_map.lookup_entry(at_page(page)), g_page_map.lookup_in_root(at_page(page)))
        << page;
  for (void* p : blocks)
    mempool::deallocate(p);
}

// A window placed where leaves exist takes their entries: both its lookups and the root's
// (which now names its slot) find them, and a later write through the root reaches it.
// A second map over the same root, as the heap's own window claimed the leaves near it.
TEST(HeapPageMap, AWindowTakesTheLeavesMappedBeforeIt) {
  const std::uintptr_t page = std::uintptr_t{0x5800'0000'0000} >> kHeapPageShift;
  Span span;
  span.start = page << kHeapPageShift;
  span.pages = 2;
  span.size_class = 5;
  g_page_heap.lock();
  ASSERT_TRUE(g_page_map.ensure(page, 2));
  g_page_map.set_range(page, 2, &span);
  static PageMap other;  // its window stays mapped, as the root now points into it
  other.claim_window(page);
  g_page_heap.unlock();
  ASSERT_TRUE(other.in_window(reinterpret_cast<void*>(span.start)));
  EXPECT_FALSE(g_page_map.in_window(reinterpret_cast<void*>(span.start)));
  for (const PageMap* m : {&other, &g_page_map}) {
    EXPECT_EQ(m->lookup(reinterpret_cast<void*>(span.start + 100)), &span);
    EXPECT_EQ(m->lookup_entry(reinterpret_cast<void*>(span.start + kHeapPageSize)) & kSpanTagMask,
              5u);
    EXPECT_EQ(m->lookup(reinterpret_cast<void*>(span.start + 2 * kHeapPageSize)), nullptr);
  }
  // Claimed once: a second call elsewhere leaves it where it is.
  g_page_heap.lock();
  other.claim_window(page + 64 * PageMap::kLeafSize);
  g_page_map.set_range(page, 2, nullptr);
  g_page_heap.unlock();
  EXPECT_TRUE(other.in_window(reinterpret_cast<void*>(span.start)));
  EXPECT_EQ(other.lookup(reinterpret_cast<void*>(span.start)), nullptr);
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(span.start)), nullptr);
}

// The window stays on the small blocks when the heap maps memory for other blocks: a
// large block (1 MiB), a block of the sparse classes (100 KiB), and a leaf far away, as
// a direct mapping in another part of the address space needs one (not a real 100 MiB
// block: its peak would change what the huge-page tests' decay does when the binary
// runs whole). When the newest leaf was the shortcut's, that leaf sent every later free
// of a small block through the root.
TEST(HeapPageMap, MemoryMappedElsewhereLeavesTheWindowOnSmallBlocks) {
  void* small = mempool::allocate(64);
  ASSERT_TRUE(g_page_map.in_window(small)) << small;
  void* big = mempool::allocate(std::size_t{1} << 20);
  void* sparse = mempool::allocate(100000);
  const std::uintptr_t far = std::uintptr_t{0x7000'0000'0000} >> kHeapPageShift;
  g_page_heap.lock();
  ASSERT_TRUE(g_page_map.ensure(far, 1));
  g_page_heap.unlock();
  EXPECT_FALSE(g_page_map.in_window(reinterpret_cast<void*>(far << kHeapPageShift)));
  EXPECT_TRUE(g_page_map.in_window(small)) << small << " after " << big << " and " << sparse;
  void* another = mempool::allocate(64);
  EXPECT_TRUE(g_page_map.in_window(another)) << another;
  EXPECT_NE(g_page_map.lookup(another), nullptr);
  // 8 MiB of small blocks, past the region the heap had: every block in the window.
  std::vector<void*> blocks(2048);
  for (void*& p : blocks)
    p = mempool::allocate(4096);
  EXPECT_EQ(
      std::count_if(blocks.begin(), blocks.end(), [](void* p) { return !g_page_map.in_window(p); }),
      0);
  for (void* p : blocks)
    mempool::deallocate(p);
  for (void* p : {small, big, sparse, another})
    mempool::deallocate(p);
}

// A heap reservation (1 GiB and a huge page) lies inside one leaf's 2 GiB: where the
// kernel would have put half of them across a boundary, the window moves. 16 of them,
// held at once so that each lands elsewhere.
TEST(HeapPageMap, AReservationLiesInsideOneLeaf) {
  constexpr std::size_t kBytes = (std::size_t{1} << 30) + kHugePageSize;
  const unsigned shift = PageMap::kLeafBits + kHeapPageShift;
  std::vector<void*> reserved;
  for (int i = 0; i < 16; ++i) {
    void* r = reserve_in_one_leaf(kBytes);
    if (r == nullptr) break;  // an address-space limit: what it got is checked
    reserved.push_back(r);
    const auto low = reinterpret_cast<std::uintptr_t>(r);
    EXPECT_EQ(low >> shift, (low + kBytes - 1) >> shift) << r;
  }
  EXPECT_FALSE(reserved.empty());
  for (void* r : reserved)
    os_unreserve(r, kBytes);
}

// set_range writes a leaf at a time: a span across two leaves (a reservation that
// straddles a 2 GiB boundary) has every page in both, and nothing beyond either end.
TEST(HeapPageMap, ASpanAcrossTwoLeavesHasEveryPageInBoth) {
  const std::uintptr_t boundary = std::uintptr_t{0x5000'0000'0000} >> kHeapPageShift;
  const std::uintptr_t first = boundary - 5;
  Span span;
  span.start = first << kHeapPageShift;
  span.pages = 12;  // 5 pages in the lower leaf, 7 in the upper
  span.size_class = 3;
  g_page_heap.lock();
  ASSERT_TRUE(g_page_map.ensure(first - 1, span.pages + 2));
  g_page_map.set_range(first, span.pages, &span);
  g_page_heap.unlock();
  for (std::size_t i = 0; i < span.pages; ++i) {
    const void* p = reinterpret_cast<void*>(span.start + i * kHeapPageSize + 8);
    EXPECT_EQ(g_page_map.lookup(p), &span) << "page " << i;
    EXPECT_EQ(g_page_map.lookup_entry(p) & kSpanTagMask, 3u) << "page " << i;
  }
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(span.start - 1)), nullptr);
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(span.start + span.bytes())), nullptr);
  g_page_heap.lock();
  g_page_map.set_range(first, span.pages, nullptr);
  g_page_heap.unlock();
  for (std::size_t i = 0; i < span.pages; ++i)
    EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(span.start + i * kHeapPageSize)), nullptr);
}

// Spans of `pages` taken from the page heap (held in `held`) until `found` accepts the
// latest ones; nullptr-free. Gives up once more than `budget` pages are held: by then
// the page heap has handed out more than the free pages it had, so it is mapping fresh
// memory rather than using what `found` looks for.
template <class Found>
bool take_until(std::size_t pages, std::size_t count, std::size_t budget, std::vector<Span*>& held,
                Found found) {
  while (held.size() * pages <= budget) {
    for (std::size_t i = 0; i < count; ++i) {
      Span* s = g_page_heap.allocate(pages);
      if (s == nullptr) return false;
      held.push_back(s);
    }
    if (found(std::span<Span*>(held).last(count))) return true;
  }
  return false;
}

// Free pages the page heap holds, resident or given back.
std::size_t free_pages() {
  const PageHeapStats st = g_page_heap.stats();
  return (st.bytes_free_resident + st.bytes_free_released) / kHeapPageSize;
}

TEST(HeapPageHeap, SplitsCoalescesAndAligns) {
  // Three neighbours of 4 pages: taken 3 at a time until the last 3 are adjacent (the
  // first 3 are, unless free spans elsewhere serve them; the budget: all of those, then
  // 3 more spans from one fresh run).
  std::vector<Span*> held;
  const auto adjacent = [](std::span<Span*> three) {
    std::sort(three.begin(), three.end(), [](Span* x, Span* y) { return x->start < y->start; });
    return three[1]->start == three[0]->start + three[0]->bytes() &&
           three[2]->start == three[1]->start + three[1]->bytes();
  };
  ASSERT_TRUE(take_until(4, 3, free_pages() + 3 * 4, held, adjacent))
      << "no three spans taken one after another were neighbours";
  Span* c = held.back();
  held.pop_back();
  Span* b = held.back();
  held.pop_back();
  Span* a = held.back();
  held.pop_back();
  EXPECT_EQ(a->state, SpanState::kLarge);
  EXPECT_EQ(a->pages, 4u);
  // Every page of a span in use maps to it.
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(b->start + i * kHeapPageSize)), b);
  const std::uintptr_t a_start = a->start;
  g_page_heap.free(a);
  g_page_heap.free(c);
  g_page_heap.free(b);  // joins both neighbours
  Span* merged = g_page_map.lookup(reinterpret_cast<void*>(a_start));
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->state, SpanState::kFree);
  EXPECT_GE(merged->pages, 12u) << "three neighbours coalesce";
  EXPECT_LE(merged->start, a_start);
  EXPECT_GE(merged->start + merged->bytes(), a_start + 12 * kHeapPageSize);
  // The middle pages of a free span map to nothing (no stale span pointers).
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(a_start + 5 * kHeapPageSize)), nullptr);
  for (Span* other : held)  // after the check: one of them may lie below a
    g_page_heap.free(other);
  Span* aligned = g_page_heap.allocate(3, 8);  // 64 KiB alignment
  ASSERT_NE(aligned, nullptr);
  EXPECT_EQ(aligned->start % (8 * kHeapPageSize), 0u);
  EXPECT_EQ(aligned->pages, 3u);
  g_page_heap.free(aligned);
}

TEST(HeapPageHeap, ResizeInPlaceAndReleaseToTheOs) {
  Span* s = g_page_heap.allocate(16);
  ASSERT_NE(s, nullptr);
  const std::uintptr_t start = s->start;
  ASSERT_TRUE(g_page_heap.resize(s, 4));  // shrink: the tail goes back
  EXPECT_EQ(s->pages, 4u);
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(start + 4 * kHeapPageSize))->state,
            SpanState::kFree);
  ASSERT_TRUE(g_page_heap.resize(s, 10));  // grow into the free pages after it
  EXPECT_EQ(s->start, start);
  EXPECT_EQ(g_page_map.lookup(reinterpret_cast<void*>(start + 9 * kHeapPageSize)), s);
  auto* bytes = reinterpret_cast<unsigned char*>(s->start);
  for (std::size_t i = 0; i < 10; ++i)
    bytes[i * kHeapPageSize] = 0xab;  // every page written
  g_page_heap.free(s);
  g_page_heap.release_all();
  const PageHeapStats st = g_page_heap.stats();
  EXPECT_EQ(st.bytes_free_resident, 0u) << "release_all gives back every free page";
  EXPECT_GT(st.bytes_free_released, 0u);
  // Released pages read as zeros when handed out again: spans of 10 pages are taken
  // until one lies over a page of the written span (all the free pages, then one more).
  std::vector<Span*> held;
  const auto over_s = [start](std::span<Span*> one) {
    return one[0]->start < start + 10 * kHeapPageSize && start < one[0]->start + one[0]->bytes();
  };
  ASSERT_TRUE(take_until(10, 1, free_pages() + 10, held, over_s))
      << "the page heap did not hand out the released pages again";
  Span* again = held.back();
  for (std::uintptr_t page = std::max(start, again->start);
       page < std::min(start + 10 * kHeapPageSize, again->start + again->bytes());
       page += kHeapPageSize)
    EXPECT_EQ(*reinterpret_cast<unsigned char*>(page), 0)
        << "page " << (page - start) / kHeapPageSize;
  for (Span* h : held)
    g_page_heap.free(h);
}

TEST(HeapCentralCache, KeepsFullBatchesAndReturnsEmptySpans) {
  const std::size_t c = heap_class_of(96);
  const std::size_t batch = kHeapClasses[c].batch;
  const CentralClassCounts before = g_central_cache.counts(c);
  FreeBlock* first = nullptr;
  ASSERT_EQ(g_central_cache.remove_range(c, batch, &first), batch);
  std::size_t n = 0;
  for (FreeBlock* b = first; b != nullptr; b = heap_next(b, heap_link_key()))
    ++n;
  EXPECT_EQ(n, batch) << "a nullptr-terminated chain of the blocks asked for";
  EXPECT_EQ(g_central_cache.counts(c).blocks_out, before.blocks_out + batch);
  g_central_cache.insert_range(c, first, batch);  // a full batch is kept whole
  EXPECT_EQ(g_central_cache.counts(c).blocks_in_batches, before.blocks_in_batches + batch);
  g_central_cache.drain();  // ...until collect() sends it back to its span
  const CentralClassCounts after = g_central_cache.counts(c);
  EXPECT_EQ(after.blocks_in_batches, 0u);
  EXPECT_EQ(after.blocks_out, before.blocks_out - before.blocks_in_batches);
}

// Blocks go back to their spans in runs (release_to_spans looks a span up once for
// the blocks that follow in it): a chain that alternates between spans, with runs
// of one and of several blocks, still returns each block to its own span, and every
// span the blocks were carved from is whole again: kept empty for the class, and given
// to the page heap by drain().
TEST(HeapCentralCache, ReturnsAChainMixingSpansBlockByBlockToItsSpans) {
  const std::size_t c = heap_class_of(1024);
  const std::size_t capacity = kHeapClasses[c].capacity;
  const std::uintptr_t key = heap_link_key();
  g_central_cache.drain();
  const CentralClassCounts before = g_central_cache.counts(c);
  std::vector<FreeBlock*> blocks;
  for (int i = 0; i < 3; ++i) {  // three spans' worth: new spans, carved whole
    FreeBlock* first = nullptr;
    ASSERT_EQ(g_central_cache.remove_range(c, capacity, &first), capacity);
    for (FreeBlock* b = first; b != nullptr; b = heap_next(b, key))
      blocks.push_back(b);
  }
  ASSERT_GE(g_central_cache.counts(c).spans, before.spans + 2);
  std::sort(blocks.begin(), blocks.end());
  // Alternate: one block of the lowest third, then three of the middle one, then
  // one of the top, and so on, so that runs of 1 and of 3 blocks cross spans.
  const std::size_t third = blocks.size() / 3;
  std::vector<FreeBlock*> order;
  for (std::size_t lo = 0, mid = third, hi = 2 * third; order.size() < blocks.size();) {
    if (lo < third) order.push_back(blocks[lo++]);
    for (int k = 0; k < 3 && mid < 2 * third; ++k)
      order.push_back(blocks[mid++]);
    if (hi < blocks.size()) order.push_back(blocks[hi++]);
  }
  for (std::size_t i = 0; i < order.size(); ++i)
    heap_set_next(order[i], i + 1 < order.size() ? order[i + 1] : nullptr, key);
  // Not a batch's count: the central cache does not keep it, it goes to the spans.
  ASSERT_NE(order.size(), kHeapClasses[c].batch);
  g_central_cache.insert_range(c, order[0], order.size());
  const CentralClassCounts after = g_central_cache.counts(c);
  EXPECT_EQ(after.blocks_out, before.blocks_out);
  EXPECT_EQ(after.spans - after.empty_spans, before.spans - before.empty_spans)
      << "a span was left with a block counted out";
  EXPECT_EQ(after.empty_spans, 3U);
  EXPECT_EQ(after.blocks_in_spans, before.blocks_in_spans + blocks.size());
  g_central_cache.drain();
  const CentralClassCounts drained = g_central_cache.counts(c);
  EXPECT_EQ(drained.spans, before.spans);
  EXPECT_EQ(drained.empty_spans, 0U);
}

// A span whose blocks all come back stays with its class, empty, and is carved again
// from its start: the class's next blocks are the same ones, in address order, and no
// span comes from the page heap. A free of one of its blocks is still a double free.
TEST(HeapCentralCache, AnEmptiedSpanIsKeptAndCarvedAgainFromItsStart) {
  if constexpr (kHardened) GTEST_SKIP() << "the hardened heap keeps no empty span";
  const std::size_t c = heap_class_of(1024);
  const std::size_t capacity = kHeapClasses[c].capacity;
  ASSERT_NE(capacity, kHeapClasses[c].batch) << "a batch would be kept whole instead";
  const std::uintptr_t key = heap_link_key();
  g_central_cache.drain();
  const CentralClassCounts before = g_central_cache.counts(c);
  const auto take = [&] {
    FreeBlock* first = nullptr;
    EXPECT_EQ(g_central_cache.remove_range(c, capacity, &first), capacity);
    std::vector<FreeBlock*> blocks;
    for (FreeBlock* b = first; b != nullptr; b = heap_next(b, key))
      blocks.push_back(b);
    return std::pair{first, blocks};
  };
  auto [first, blocks] = take();
  ASSERT_EQ(blocks.size(), capacity);
  ASSERT_EQ(g_central_cache.counts(c).spans, before.spans + 1);
  g_central_cache.insert_range(c, first, capacity);
  const CentralClassCounts kept = g_central_cache.counts(c);
  EXPECT_EQ(kept.empty_spans, 1U);
  EXPECT_EQ(kept.spans, before.spans + 1);
  EXPECT_TRUE(g_central_cache.holds_free(c, blocks[capacity / 2]));
  auto [again_first, again] = take();
  EXPECT_EQ(g_central_cache.counts(c).spans, before.spans + 1) << "a new span was taken";
  EXPECT_EQ(g_central_cache.counts(c).empty_spans, 0U);
  // A carve links each block before the one carved before it: the chain runs down.
  std::vector<FreeBlock*> ascending(again.rbegin(), again.rend());
  EXPECT_TRUE(std::is_sorted(ascending.begin(), ascending.end()));
  std::sort(blocks.begin(), blocks.end());
  EXPECT_EQ(ascending, blocks);
  g_central_cache.insert_range(c, again_first, capacity);
  g_central_cache.drain();
  EXPECT_EQ(g_central_cache.counts(c).spans, before.spans);
}

// Kept empty spans are bounded in bytes, all classes together (the rest go to the page
// heap at once), and each goes to the page heap once it has been empty for the decay
// time, not before.
TEST(HeapCentralCache, KeepsEmptySpansWithinItsBudgetAndForTheDecayTime) {
  if constexpr (kHardened) GTEST_SKIP() << "the hardened heap keeps no empty span";
  const std::uint64_t decay_ms = g_page_heap.decay_ms();
  if (decay_ms == PageHeap::kNoDecay) GTEST_SKIP() << "MEMPOOL_DECAY_MS turns decay off";
  const std::size_t c = heap_class_of(1024);
  const std::size_t capacity = kHeapClasses[c].capacity;
  const std::size_t span_bytes = std::size_t{kHeapClasses[c].span_pages} * kHeapPageSize;
  const std::size_t fits = CentralCache::kKeptEmptyBytes / span_bytes;
  g_central_cache.drain();
  const CentralClassCounts before = g_central_cache.counts(c);
  std::vector<FreeBlock*> chains;
  for (std::size_t i = 0; i < fits + 4; ++i) {
    FreeBlock* first = nullptr;
    ASSERT_EQ(g_central_cache.remove_range(c, capacity, &first), capacity);
    chains.push_back(first);
  }
  for (FreeBlock* first : chains)
    g_central_cache.insert_range(c, first, capacity);
  const CentralClassCounts kept = g_central_cache.counts(c);
  EXPECT_EQ(kept.empty_spans, fits);
  EXPECT_EQ(kept.spans, before.spans + fits);
  const std::uint64_t now = PageHeap::now_ms();
  g_central_cache.decay(now);  // empty since about now: kept
  EXPECT_EQ(g_central_cache.counts(c).empty_spans, fits);
  g_central_cache.decay(now + decay_ms + 1000);
  EXPECT_EQ(g_central_cache.counts(c).empty_spans, 0U);
  EXPECT_EQ(g_central_cache.counts(c).spans, before.spans);
}

// A big class's span (8 blocks of 64 KiB: 512 KiB) is not kept: it would pin much memory
// for few blocks.
TEST(HeapCentralCache, ABigClassSpanGoesBackToThePageHeapWhenEmpty) {
  const std::size_t c = heap_class_of(64 * 1024);
  const std::size_t capacity = kHeapClasses[c].capacity;
  ASSERT_GT(std::size_t{kHeapClasses[c].span_pages} * kHeapPageSize,
            CentralCache::kKeptEmptySpanMaxBytes);
  g_central_cache.drain();
  const CentralClassCounts before = g_central_cache.counts(c);
  FreeBlock* first = nullptr;
  ASSERT_EQ(g_central_cache.remove_range(c, capacity, &first), capacity);
  ASSERT_NE(capacity, kHeapClasses[c].batch) << "a batch would be kept whole instead";
  g_central_cache.insert_range(c, first, capacity);
  EXPECT_EQ(g_central_cache.counts(c).empty_spans, 0U);
  EXPECT_EQ(g_central_cache.counts(c).spans, before.spans);
}

// Kept empty spans cost no resident memory: before the page heap would grow (or fault
// given-back pages in) for a span, they go back to it; while it has a free resident
// span that fits, they stay.
TEST(HeapCentralCache, KeptEmptySpansGoBackBeforeThePageHeapGrows) {
  if constexpr (kHardened) GTEST_SKIP() << "the hardened heap keeps no empty span";
  const std::size_t c = heap_class_of(1024);
  const std::size_t capacity = kHeapClasses[c].capacity;
  g_central_cache.drain();
  const CentralClassCounts before = g_central_cache.counts(c);
  FreeBlock* first = nullptr;
  ASSERT_EQ(g_central_cache.remove_range(c, capacity, &first), capacity);
  g_central_cache.insert_range(c, first, capacity);
  ASSERT_EQ(g_central_cache.counts(c).empty_spans, 1U);
  // A free resident page in the page heap: a span of one page fits.
  g_page_heap.free(g_page_heap.allocate(1));
  ASSERT_TRUE(g_page_heap.has_resident_free(1, SpanState::kLarge, 0));
  g_central_cache.make_room_for(1, SpanState::kLarge, 0);
  EXPECT_EQ(g_central_cache.counts(c).empty_spans, 1U) << "given back with room to spare";
  // 4 GiB: no free span fits, the page heap would grow.
  const std::size_t huge = (std::size_t{4} << 30) >> kHeapPageShift;
  ASSERT_FALSE(g_page_heap.has_resident_free(huge, SpanState::kLarge, 0));
  g_central_cache.make_room_for(huge, SpanState::kLarge, 0);
  EXPECT_EQ(g_central_cache.counts(c).empty_spans, 0U);
  EXPECT_EQ(g_central_cache.counts(c).spans, before.spans);
}

// The kept batches are bounded per class (64 KiB of blocks): beyond that, freed
// batches go back to their spans, so free blocks of a class the program has
// stopped using do not pin spans (the fragmentation benchmark held 1.33x its
// live bytes with 1 MiB per class, 1.20x with 64 KiB).
TEST(HeapCentralCache, KeepsAtMost64KiBOfBatchesPerClass) {
  const std::size_t c = heap_class_of(64);
  const std::size_t batch = kHeapClasses[c].batch;
  g_central_cache.drain();
  std::vector<FreeBlock*> chains;
  for (int i = 0; i < 64; ++i) {  // 64 batches: 256 KiB of 64-byte blocks
    FreeBlock* first = nullptr;
    ASSERT_EQ(g_central_cache.remove_range(c, batch, &first), batch);
    chains.push_back(first);
  }
  const std::size_t out = g_central_cache.counts(c).blocks_out;
  for (FreeBlock* first : chains)
    g_central_cache.insert_range(c, first, batch);
  const CentralClassCounts counts = g_central_cache.counts(c);
  EXPECT_GT(counts.blocks_in_batches, 0u);
  EXPECT_LE(counts.blocks_in_batches * kHeapClasses[c].size, std::size_t{64} * 1024);
  // The rest went back to their spans (kept batches still count as out).
  EXPECT_EQ(counts.blocks_out, out - (64 * batch - counts.blocks_in_batches));
  g_central_cache.drain();
}

// Blocks of 64 KiB and more travel two at a time: their classes keep 1 MiB of batches
// (class_info.hpp), so that the same blocks come back instead of their spans going to
// the page heap and back. With 64 KiB they kept one batch (more only after misses, up to
// 512 KiB).
TEST(HeapCentralCache, KeepsUpTo1MiBOfBatchesOfBlocksOf64KiBAndMore) {
  for (const std::size_t bytes : {std::size_t{64} << 10, std::size_t{128} << 10, kHeapSmallMax}) {
    const std::size_t c = heap_class_of(bytes);
    const HeapClassInfo& info = kHeapClasses[c];
    ASSERT_EQ(info.batch, 2u) << bytes;
    g_central_cache.drain();
    std::vector<FreeBlock*> chains;
    for (int i = 0; i < 16; ++i) {  // 16 batches of 2 blocks: 2-8 MiB
      FreeBlock* first = nullptr;
      ASSERT_EQ(g_central_cache.remove_range(c, info.batch, &first), info.batch);
      chains.push_back(first);
    }
    for (FreeBlock* first : chains)
      g_central_cache.insert_range(c, first, info.batch);
    const std::size_t kept = g_central_cache.counts(c).blocks_in_batches * info.size;
    EXPECT_LE(kept, kHeapKeptLargeBytes) << bytes;
    EXPECT_GT(kept + 2 * info.size, kHeapKeptLargeBytes) << bytes << ": within a batch of 1 MiB";
    g_central_cache.drain();
    EXPECT_EQ(g_central_cache.counts(c).blocks_in_batches, 0u);
  }
  // The class below (60 KiB): one batch, 64 KiB at most as every smaller class
  // (KeepsAtMost64KiBOfBatchesPerClass).
  const HeapClassInfo& below = kHeapClasses[heap_class_of(std::size_t{64} << 10) - 1];
  EXPECT_LT(below.size, std::size_t{64} << 10);
  EXPECT_EQ(below.max_slots, 1u);
}

// The kept batches grow past 64 KiB when a thread asked for a batch and found none
// since they were last full (blocks flow from freeing threads to allocating ones in
// bursts), and shrink back when full again with nobody having asked.
TEST(HeapCentralCache, KeptBatchesGrowWhenAThreadFoundNoneAndShrinkWhenNotTaken) {
  const std::size_t c = heap_class_of(64);
  const HeapClassInfo& info = kHeapClasses[c];
  ASSERT_GE(info.max_grown_slots, 2 * info.max_slots);
  g_central_cache.drain();
  std::vector<FreeBlock*> chains;
  // Each of these asks for a batch and finds none.
  for (std::size_t i = 0; i < 2 * info.max_slots + 8; ++i) {
    FreeBlock* first = nullptr;
    ASSERT_EQ(g_central_cache.remove_range(c, info.batch, &first), info.batch);
    chains.push_back(first);
  }
  const auto kept = [&] { return g_central_cache.counts(c).blocks_in_batches / info.batch; };
  std::size_t i = 0;
  for (; i <= info.max_slots; ++i)
    g_central_cache.insert_range(c, chains[i], info.batch);
  EXPECT_EQ(kept(), info.max_slots + 1) << "full, after a miss: one more kept";
  for (; i < chains.size(); ++i)
    g_central_cache.insert_range(c, chains[i], info.batch);
  EXPECT_EQ(kept(), info.max_slots) << "full again, nobody asked: back to 64 KiB";
  g_central_cache.drain();
}

// A thread that gives whole batches back notes their blocks' addresses on the way
// (ThreadCache::release), and a kept batch keeps them beside it for the thread that takes
// it next (prefetch_kept_batch). The prefetch itself changes nothing a test can see; what
// could go wrong is a row naming other blocks than its batch's, or none being noted.
// The blocks are this thread's, so that the other thread's frees go to the central cache
// (not to the local lists of spans it owns).
TEST(HeapCentralCache, KeptBatchesKeepTheirBlocksAddressesInChainOrder) {
  constexpr std::size_t kBytes = 48;
  const std::size_t c = heap_class_of(kBytes);
  const HeapClassInfo& info = kHeapClasses[c];
  g_central_cache.drain();
  std::vector<void*> blocks(20 * info.batch);
  for (void*& p : blocks)
    p = mempool::allocate(kBytes);
  std::thread([&] {
    for (void* p : blocks)
      mempool::deallocate(p, kBytes);
  }).join();  // its exit gives every block back, in batches
  const std::size_t kept = g_central_cache.counts(c).blocks_in_batches / info.batch;
  ASSERT_GT(kept, 0u) << "no batch kept: the test shows nothing";
  const CentralCache::IndexedBatches rows = g_central_cache.indexed_batches(c);
  EXPECT_EQ(rows.indexed, kept) << "a kept batch without its blocks' addresses";
  EXPECT_TRUE(rows.all_match) << "a row names other blocks than its batch's chain";

  // Taken by another taker than the giver (prefetched: a nullptr-terminated chain of its
  // blocks as before), then given back without addresses (the central cache's own callers):
  // that batch has no row.
  FreeBlock* first = nullptr;
  ASSERT_EQ(g_central_cache.remove_range(c, info.batch, &first, &blocks), info.batch);
  std::size_t n = 0;
  for (FreeBlock* b = first; b != nullptr; b = heap_next(b, heap_link_key()))
    ++n;
  EXPECT_EQ(n, info.batch);
  g_central_cache.insert_range(c, first, info.batch);
  EXPECT_EQ(g_central_cache.indexed_batches(c).indexed, kept - 1);
  EXPECT_TRUE(g_central_cache.indexed_batches(c).all_match);
  g_central_cache.drain();
  EXPECT_EQ(g_central_cache.indexed_batches(c).indexed, 0u);
}

}  // namespace
}  // namespace mempool::detail

namespace mempool::detail {
namespace {

// The hit paths reach the list heads and room counters through their own asm in the
// default build (ThreadCache::head, note_pop, note_push), a class the compiler knows as a
// displacement and any other through an index: each pop and push moves its own class's
// head and count by one block and no neighbour's, as the plain members read them.
TEST(HeapThreadCache, TheHitPathsMoveTheirOwnClasssHeadAndCount) {
  constexpr std::size_t kSize = 64;
  const std::size_t c = heap_class_of(kSize);
  ThreadCache& t = tls_thread_cache;
  mempool::deallocate(mempool::allocate(kSize), kSize);  // active, one block at least
  auto counts = [&] {
    return std::vector<std::uint32_t>{t.count(c - 1), t.count(c), t.count(c + 1)};
  };
  const std::vector<std::uint32_t> before = counts();
  ASSERT_GE(before[1], 1u);
  const std::vector<std::uint32_t> one_out = {before[0], before[1] - 1, before[2]};
  volatile std::size_t unknown = kSize;  // a size the compiler does not know
  for (const bool constant : {true, false}) {
    FreeBlock* first = t.heads[c];
    EXPECT_EQ(t.head(c), first);
    void* p = constant ? mempool::allocate(kSize) : mempool::allocate(unknown);
    EXPECT_EQ(p, first) << "constant " << constant;
    EXPECT_EQ(counts(), one_out) << "constant " << constant;
    EXPECT_EQ(t.head(c), t.heads[c]);
    if (constant) {
      mempool::deallocate(p, kSize);
    } else {
      mempool::deallocate(p);
    }
    EXPECT_EQ(counts(), before) << "constant " << constant;
    EXPECT_EQ(t.heads[c], p) << "constant " << constant;
  }
}

// A large class may not fill the thread cache's budget on its own: after rounds
// that would grow its list (slow start, then whole batches), the calling thread
// still caches at most an eighth of the budget of it.
TEST(HeapThreadCache, ALargeClassTakesAtMostAnEighthOfTheBudget) {
  constexpr std::size_t kSize = 200 * 1024;
  const std::size_t c = heap_class_of(kSize);
  mempool::deallocate(mempool::allocate(kSize));  // the cache is active: its budget is set
  const std::size_t budget = tls_thread_cache.budget();
  ASSERT_GE(budget, std::size_t{1} << 20);
  std::vector<void*> blocks;
  for (int round = 0; round < 20; ++round) {
    for (std::size_t i = 0; i < 2 * budget / 8 / kSize + 8; ++i)
      blocks.push_back(mempool::allocate(kSize));
    for (void* p : blocks)
      mempool::deallocate(p);
    blocks.clear();
    ASSERT_LE(tls_thread_cache.cached_blocks(c) * kHeapClasses[c].size, budget / 8)
        << "round " << round;
  }
}

// A list that wants to grow past a full budget does not cut the others down at each
// miss (they would miss and grow back: lists that together want more than the budget
// took turns), but it is not shut out either: now and then the largest lists make
// room, so that a program whose sizes change moves its cache to the new ones.
TEST(HeapThreadCache, AListPastAFullBudgetWaitsForItsTurn) {
  std::thread([] {
    std::vector<void*> blocks;
    const auto cycle = [&blocks](std::size_t n, std::size_t count) {
      for (std::size_t i = 0; i < count; ++i)
        blocks.push_back(mempool::allocate(n));
      for (void* p : blocks)
        mempool::deallocate(p);
      blocks.clear();
    };
    cycle(64, 1);  // the cache is active: its budget is set
    const std::size_t budget = tls_thread_cache.budget();
    // Twelve classes of 70-235 KiB, each wanting an eighth of the budget, fill it.
    for (int round = 0; round < 10; ++round)
      for (std::size_t k = 0; k < 12; ++k)
        cycle(70 * 1024 + k * 15 * 1024, budget / 8 / (70 * 1024 + k * 15 * 1024) + 2);
    const std::size_t held = tls_thread_cache.max_bytes();
    // (When each growth past the budget cut the others to half of it, they held less.)
    ASSERT_GE(held, budget / 4 * 3) << "the twelve classes, wanting 1.5 budgets, do not fill it";
    // A new class misses a few times: at most one pass makes room, down to the budget.
    constexpr std::size_t kLarge = 256 * 1024;
    const std::size_t large = heap_class_of(kLarge);
    for (int i = 0; i < 20; ++i)
      cycle(kLarge, 4);
    EXPECT_GE(tls_thread_cache.max_bytes() - tls_thread_cache.maxes[large] * kLarge,
              held - budget / 4)
        << "the other lists were cut down at the new class's misses";
    // It keeps missing: within a few passes it has grown to its cap (an eighth).
    const std::size_t cap = std::max<std::size_t>(1, budget / 8 / kLarge);  // class_cap
    for (int i = 0; i < 200'000 && tls_thread_cache.maxes[large] < cap; ++i)
      cycle(kLarge, cap + 1);
    EXPECT_EQ(tls_thread_cache.maxes[large], cap) << "the new class never got room";
    EXPECT_LE(tls_thread_cache.max_bytes(), budget);
  }).join();
}

// Large classes pushing the thread past its budget are cut back first: a small
// class's list keeps most of its threshold while a dozen classes of 70-235 KiB
// grow and overflow the budget again and again, and the budget still holds.
TEST(HeapThreadCache, OverBudgetCutsTheLargestClassesFirst) {
  constexpr std::size_t kSmall = 64;
  const std::size_t small = heap_class_of(kSmall);
  std::vector<void*> blocks;
  for (int round = 0; round < 8; ++round) {  // slow start, then whole batches
    for (int i = 0; i < 512; ++i)
      blocks.push_back(mempool::allocate(kSmall));
    for (void* p : blocks)
      mempool::deallocate(p);
    blocks.clear();
  }
  const std::uint32_t small_max = tls_thread_cache.maxes[small];
  ASSERT_GE(small_max, 64u) << "the small list grew";
  // Each class grows to its cap (an eighth of the budget): twelve together are
  // one and a half budgets, so the thread goes over again and again.
  const std::size_t budget = tls_thread_cache.budget();
  for (int round = 0; round < 10; ++round) {
    for (std::size_t k = 0; k < 12; ++k) {
      const std::size_t n = 70 * 1024 + k * 15 * 1024;
      for (std::size_t i = 0; i < budget / 8 / n + 2; ++i)
        blocks.push_back(mempool::allocate(n));
      for (void* p : blocks)
        mempool::deallocate(p);
      blocks.clear();
    }
    ASSERT_LE(tls_thread_cache.max_bytes(), budget) << "round " << round;
  }
  EXPECT_GE(tls_thread_cache.maxes[small], small_max / 2)
      << "the small list was cut while large classes held the budget";
}

// A container of many thousand small blocks built and destroyed again and again stays
// in the thread's list: a small class's list grows past 16 batches while it holds at
// most 512 KiB (thread_cache.cpp, kListBytesPastBatches), so that its frees do not go
// through the central cache. A class of 256 B and more stops at 16 batches. (With 16
// batches for every class, the 24-byte list ends at one batch here; with 128 for every
// class, the 64-byte list reaches 8,064 blocks and the 512-byte one 1,664; with 256 KiB,
// the 24-byte list, of 32-byte blocks, stops at 8,192.)
TEST(HeapThreadCache, ASmallClassListGrowsPast16BatchesUpTo512KiB) {
  std::thread([] {
    const auto cycle = [](std::size_t n, std::size_t count) {
      std::vector<void*> blocks(count);
      for (int round = 0; round < 30; ++round) {
        for (void*& p : blocks)
          p = mempool::allocate(n);
        for (void* p : blocks)
          mempool::deallocate(p, n);
      }
      return heap_class_of(n);
    };
    const std::size_t small = cycle(24, 12000);
    EXPECT_GT(tls_thread_cache.maxes[small], 16 * kHeapClasses[small].batch)
        << "the list stopped at 16 batches";
    EXPECT_GE(tls_thread_cache.cached_blocks(small), 12000u)
        << "the freed blocks went to the central cache";
    EXPECT_LE(std::size_t{tls_thread_cache.maxes[small]} * kHeapClasses[small].size, 512u << 10);

    const std::size_t c64 = cycle(64, 8000);
    EXPECT_GT(tls_thread_cache.maxes[c64], 16 * kHeapClasses[c64].batch);
    EXPECT_LE(std::size_t{tls_thread_cache.maxes[c64]} * kHeapClasses[c64].size, 512u << 10);

    const std::size_t medium = cycle(512, 3000);
    EXPECT_LE(tls_thread_cache.maxes[medium], 16 * kHeapClasses[medium].batch);
  }).join();
}

// The total is shared: alone, a thread may cache up to 8 MiB (the default
// MEMPOOL_THREAD_CACHE_BYTES); among 40 threads with caches each gets its share
// of the 32 MiB total, but never less than 1 MiB.
TEST(HeapThreadCache, ThreadsShareTheTotalBudget) {
  std::size_t alone = 0;
  std::thread([&] {
    mempool::deallocate(mempool::allocate(64));
    alone = tls_thread_cache.budget();
  }).join();
  constexpr int kThreads = 40;
  std::vector<std::size_t> budgets(kThreads);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      mempool::deallocate(mempool::allocate(64));  // activates this thread's cache
      ready.fetch_add(1);
      while (!go.load())
        std::this_thread::yield();
      // Every slow path takes the share again: a miss is one.
      mempool::deallocate(mempool::allocate(100 * 1024));
      budgets[t] = tls_thread_cache.budget();
      ready.fetch_add(1);
      while (ready.load() < 2 * kThreads)
        std::this_thread::yield();  // all alive until all know
    });
  }
  while (ready.load() < kThreads)
    std::this_thread::yield();
  go.store(true);
  for (std::thread& t : threads)
    t.join();
  EXPECT_EQ(alone, std::size_t{8} << 20);
  for (std::size_t b : budgets) {
    EXPECT_GE(b, std::size_t{1} << 20);
    EXPECT_LE(b, std::max(std::size_t{1} << 20, (std::size_t{32} << 20) / kThreads));
  }
}

// Passive false sharing (Hoard's cache-scratch): this thread allocates small blocks
// side by side and hands one to each new thread, which frees it and then allocates
// its own. Had the freed block stayed in the new thread's cache, it would be that
// thread's next block, on a cache line this thread's other blocks still use, and
// every write of the two threads would move the line between their cores.
TEST(HeapThreadCache, AThreadDoesNotReuseAnotherThreadsBlockNextToItsOwner) {
  constexpr std::size_t kSize = 8;
  constexpr std::uintptr_t kLine = 64;
  constexpr int kHanded = 4;
  std::vector<void*> handed;
  for (int i = 0; i < kHanded; ++i)
    handed.push_back(mempool::allocate(kSize));
  const auto line = [&](const void* p) { return reinterpret_cast<std::uintptr_t>(p) / kLine; };
  ASSERT_EQ(line(handed[0]), line(handed[1])) << "the heap carves small blocks side by side";
  for (int i = 0; i < kHanded; ++i) {
    void* mine = nullptr;
    std::thread([&] {
      mempool::deallocate(handed[static_cast<std::size_t>(i)]);
      mine = mempool::allocate(kSize);
    }).join();
    ASSERT_NE(mine, nullptr);
    for (int j = i + 1; j < kHanded; ++j)
      EXPECT_NE(line(mine), line(handed[static_cast<std::size_t>(j)]))
          << "thread " << i << " got a block on the line of a block still in use here";
    mempool::deallocate(mine);
  }
}

}  // namespace
}  // namespace mempool::detail

namespace mempool::detail {
namespace {

// The link key (free_list.hpp): encoded nullptr, zeros, pointers and one byte
// repeated never decode to a plausible link, whatever the random key.
TEST(HeapLinkKey, WhatAProgramWritesNeverDecodesToALink) {
  for (int i = 0; i < 1000; ++i) {
    const std::uintptr_t key = i == 0 ? heap_link_key() : new_link_key();
    FreeBlock b{};
    EXPECT_FALSE(plausible_link(heap_next(&b, key))) << "a zero word";
    // The accessors close the word behind them as in a free block (AddressSanitizer
    // poisons it: memory_checker.hpp); the test writes it as a program would.
    asan_unpoison(&b, sizeof b);
    b.next = &b;
    EXPECT_FALSE(plausible_link(heap_next(&b, key))) << "a pointer";
    for (unsigned byte : {0x41u, 0xffu, 0x80u, 0x01u}) {
      asan_unpoison(&b, sizeof b);
      std::memset(&b, static_cast<int>(byte), sizeof b);
      EXPECT_FALSE(plausible_link(heap_next(&b, key))) << "byte " << byte << " repeated";
    }
    heap_set_next(&b, &b, key);
    EXPECT_EQ(heap_next(&b, key), &b);
    EXPECT_TRUE(plausible_link(heap_next(&b, key)));
  }
}

// The default build's fixed key (heap_thread_cache.hpp): no positive number written
// into a freed block decodes to a link; a negative one whose low three bits are the
// key's does, the one kind that gets through.
TEST(HeapLinkKey, TheFixedKeyLetsOnlySomeNegativeNumbersThrough) {
  alignas(16) FreeBlock b{};
  auto decodes_plausibly = [&b](std::int64_t word) {
    asan_unpoison(&b, sizeof b);
    std::memcpy(&b, &word, sizeof word);
    return plausible_link(heap_next(&b, kHeapFixedLinkKey));
  };
  for (std::int64_t v : {std::int64_t{1}, std::int64_t{3}, std::int64_t{4096},
                         (std::int64_t{1} << 47) - 5, INT64_MAX})
    EXPECT_FALSE(decodes_plausibly(v)) << v;
  const auto through = static_cast<std::int64_t>(kHeapFixedLinkKey & 7) - 8;  // -5
  EXPECT_TRUE(decodes_plausibly(through));
  EXPECT_FALSE(decodes_plausibly(through - 1));
  EXPECT_FALSE(decodes_plausibly(-(std::int64_t{1} << 47) - 5)) << "below -2^47";
}

// A live block that holds what a free one does (a plausible link, and the mark, a
// constant a program can store in the default build) is only suspect: the free looks
// for it, finds it nowhere, and frees it as usual.
TEST(HeapLinkKey, ALiveBlockThatLooksFreeIsFreedNormally) {
  auto* p = static_cast<FreeBlock*>(allocate(64));
  auto* other = static_cast<FreeBlock*>(allocate(64));
  heap_set_next(p, other, heap_link_key());              // what a free block would hold,
  p->set_word_at(kHeapFreeMarkOffset, heap_link_key());  // the mark too: the free is suspect
  deallocate(p);
  EXPECT_EQ(allocate(64), p) << "freed, and at the head of the thread's list";
  deallocate(p);
  deallocate(other);
}

// free compares the mark's first byte in line and the rest out of line
// (heap_free_suspect): a live block whose word 1 shares only that byte with the mark is
// freed there, sized or not, onto the head of the thread's list.
TEST(HeapLinkKey, ALiveBlockWithTheMarksFirstByteIsFreedNormally) {
  const std::uintptr_t first_byte_only = heap_link_key() & 0xff;
  for (const bool sized : {false, true}) {
    auto* p = static_cast<FreeBlock*>(allocate(64));
    p->set_word_at(kHeapFreeMarkOffset, first_byte_only);
    ASSERT_EQ(p->byte_at(kHeapFreeMarkOffset), static_cast<std::uint8_t>(heap_link_key()));
    if (sized) {
      deallocate(p, 64);
    } else {
      deallocate(p);
    }
    EXPECT_EQ(p->word_at(kHeapFreeMarkOffset), heap_link_key()) << "marked free, sized " << sized;
    EXPECT_EQ(allocate(64), p) << "at the head of the thread's list, sized " << sized;
    deallocate(p);
  }
}

// Thread-owned spans (span.hpp, thread_cache.cpp). A thread that frees more blocks than its
// list holds keeps those of the spans it started on their local lists: the central cache
// sees none of them come back, and the thread's next allocations take them from there.
constexpr std::size_t kOwnedBytes = 80;
constexpr std::size_t kOwnedBlocks = 20000;  // 1.6 MB: past the list's 512 KiB

// How many of `blocks` lie in spans that `owner` owns.
std::size_t owned_by(const std::vector<void*>& blocks, const ThreadCache* owner) {
  return static_cast<std::size_t>(std::count_if(blocks.begin(), blocks.end(), [&](void* p) {
    return span_owner(g_page_map.lookup(p)) == owner;
  }));
}

TEST(HeapOwnedSpans, AThreadsOverflowStaysInItsOwnSpansAndComesBackFromThem) {
  if (!kThreadOwnedSpans) GTEST_SKIP() << "no thread-owned spans in this build";
  const std::size_t c = heap_class_of(kOwnedBytes);
  std::thread([&] {
    ThreadCache& t = tls_thread_cache;
    std::vector<void*> blocks(kOwnedBlocks);
    for (void*& p : blocks)
      p = mempool::allocate(kOwnedBytes);
    // All but the first refills' blocks (spans others started) come from spans it started.
    const std::size_t owned = owned_by(blocks, &t);
    ASSERT_GT(owned, kOwnedBlocks * 9 / 10) << "the thread's fresh spans are not its own";
    // Blocks out of the central cache (its kept batches count as out).
    const auto held = [c] {
      const CentralClassCounts n = g_central_cache.counts(c);
      return n.blocks_out - n.blocks_in_batches;
    };
    const std::size_t before = held();
    for (void* p : blocks)
      mempool::deallocate(p);
    const std::size_t freed = held();
    EXPECT_LE(before - freed, kOwnedBlocks - owned)
        << "blocks of the thread's own spans went back through the central cache";
    EXPECT_GE(t.owned_blocks(c), owned - std::size_t{t.maxes[c]})
        << "its list overflowed, and the local lists do not hold the rest";
    EXPECT_GE(t.cached_blocks(c), owned) << "stats miss the local lists";

    for (void*& p : blocks)
      p = mempool::allocate(kOwnedBytes);
    EXPECT_EQ(t.owned_blocks(c), 0u) << "a refill went to the central cache before the local lists";
    EXPECT_LE(held() - freed, kOwnedBlocks - owned);
    for (void* p : blocks)
      mempool::deallocate(p);
  }).join();
}

// Another thread's frees of those blocks go through the central cache (the spans are not
// its own), and a thread's exit gives its local lists back: the central cache has every
// block it handed out back.
TEST(HeapOwnedSpans, OtherThreadsFreesAndTheOwnersExitGoThroughTheCentralCache) {
  if (!kThreadOwnedSpans) GTEST_SKIP() << "no thread-owned spans in this build";
  const std::size_t c = heap_class_of(kOwnedBytes);
  // Blocks out of the central cache (its kept batches count as out).
  const auto held = [c] {
    const CentralClassCounts n = g_central_cache.counts(c);
    return n.blocks_out - n.blocks_in_batches;
  };
  const std::size_t before = held();
  std::vector<void*> mine(kOwnedBlocks);
  std::vector<void*> theirs(kOwnedBlocks);
  std::thread([&] {
    for (void*& p : mine)
      p = mempool::allocate(kOwnedBytes);
    for (void*& p : theirs)
      p = mempool::allocate(kOwnedBytes);
    for (void* p : mine)
      mempool::deallocate(p);
    EXPECT_GT(tls_thread_cache.owned_blocks(c), 0u);
    std::thread([&] {
      for (void* p : theirs)
        mempool::deallocate(p);
      EXPECT_EQ(tls_thread_cache.owned_blocks(c), 0u) << "another thread's span taken as its own";
      EXPECT_LE(tls_thread_cache.cached_blocks(c), std::size_t{tls_thread_cache.maxes[c]});
    }).join();
  }).join();
  EXPECT_EQ(held(), before) << "blocks stayed with a thread that exited";
}

// Whole free spans stay with their owner only within what its budget leaves its lists:
// past that they go back (to the page heap, or kept empty), as the lists' blocks would.
TEST(HeapOwnedSpans, WholeFreeSpansStayOnlyWithinTheThreadsBudget) {
  if (!kThreadOwnedSpans) GTEST_SKIP() << "no thread-owned spans in this build";
  const std::size_t c = heap_class_of(kOwnedBytes);
  mempool::deallocate(mempool::allocate(64));  // the options read: they would set the budget
  set_thread_cache_budget(std::size_t{1} << 20, std::size_t{32} << 20);
  std::thread([&] {
    constexpr std::size_t kBlocks = (std::size_t{6} << 20) / kOwnedBytes;  // 6 MiB
    std::vector<void*> blocks(kBlocks);
    for (void*& p : blocks)
      p = mempool::allocate(kOwnedBytes);
    ASSERT_GT(owned_by(blocks, &tls_thread_cache), kBlocks * 9 / 10);
    const CentralClassCounts before = g_central_cache.counts(c);
    for (void* p : blocks)
      mempool::deallocate(p);
    // The budget, and the few spans that some blocks still on the list keep from being whole.
    constexpr std::size_t kMost = (std::size_t{5} << 20) / 4;
    EXPECT_LE(tls_thread_cache.cached_blocks(c) * kOwnedBytes, kMost)
        << "the thread holds more than its budget";
    const CentralClassCounts after = g_central_cache.counts(c);
    EXPECT_GE(before.blocks_out - after.blocks_out, kBlocks - kMost / kOwnedBytes)
        << "the whole spans did not go back to the central cache";
  }).join();
  set_thread_cache_budget(std::size_t{8} << 20, std::size_t{32} << 20);
}

// A block on a local list is free: its second free is found there.
TEST(HeapOwnedSpansDeathTest, ADoubleFreeOfABlockOnALocalListIsNamed) {
  if (!kThreadOwnedSpans) GTEST_SKIP() << "no thread-owned spans in this build";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        std::vector<void*> blocks(kOwnedBlocks);
        for (void*& p : blocks)
          p = mempool::allocate(kOwnedBytes);
        for (void* p : blocks)
          mempool::deallocate(p);
        void* local = nullptr;
        for (void* p : blocks) {
          const Span* s = g_page_map.lookup(p);
          std::uint32_t n = s->local_count;
          for (const FreeBlock* b = s->local; b != nullptr && n > 0 && local == nullptr;
               b = heap_next(b, heap_link_key()), --n)
            if (b == p) local = p;
          if (local != nullptr) break;
        }
        if (local == nullptr) std::_Exit(3);  // none found: the test fails on the exit status
        mempool::deallocate(local);
      },
      "double free");
}

}  // namespace
}  // namespace mempool::detail
