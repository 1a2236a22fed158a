// Large blocks reused, not re-faulted: freed direct mappings kept in a cache
// within a budget, a free span grown in place at the page heap's edge, and the decay
// that gives both back to the OS; collect() still gives back everything.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "heap/heap_internal.hpp"
#include "heap/page_heap.hpp"
#include "heap/page_map.hpp"
#include "mempool/detail/os.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"

namespace mempool::detail {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Every test starts from an empty cache with the defaults, no decay (a slow
// sanitizer run must not see a mapping decay under it) and a direct-map
// threshold of 16 MiB, and leaves it so (with the default threshold).
class HeapLargeReuse : public ::testing::Test {
 protected:
  void SetUp() override {
    mp_free(mp_malloc(1));  // the heap reads its options first, not over ours later
    mempool::collect();
    threshold_ = heap_direct_map_threshold();
    heap_set_direct_map_threshold(16 * kMiB);
    g_page_heap.set_direct_cache_bytes(256 * kMiB);
    g_page_heap.set_decay_ms(PageHeap::kNoDecay);
  }
  void TearDown() override {
    heap_set_direct_map_threshold(threshold_);
    mempool::testing::fail_os_maps_after(-1);
    g_page_heap.set_direct_cache_bytes(256 * kMiB);
    g_page_heap.set_decay_ms(1000);
    mempool::collect();
  }

 private:
  std::size_t threshold_ = 0;
};

TEST_F(HeapLargeReuse, FreedDirectBlockServesTheNextOfItsSizeWithoutAMap) {
  void* p = mp_malloc(20 * kMiB);  // above the 16 MiB direct-map threshold
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x5a, 20 * kMiB);
  mp_free(p);
  const PageHeapStats cached = g_page_heap.stats();
  EXPECT_EQ(cached.direct_cached, 1u);
  EXPECT_EQ(cached.bytes_direct_cached, 20 * kMiB);
  EXPECT_GE(mempool::stats().bytes_free_in_page_heap, 20 * kMiB) << "counted as free, resident";
  const long maps = mempool::testing::os_map_count();
  const std::size_t os_mapped = mempool::testing::os_bytes_mapped();
  void* q = mp_malloc(20 * kMiB);
  EXPECT_EQ(q, p) << "the cached mapping is handed out again";
  EXPECT_EQ(mempool::testing::os_map_count(), maps) << "no new mapping";
  EXPECT_EQ(mempool::testing::os_bytes_mapped(), os_mapped);
  EXPECT_EQ(g_page_heap.stats().direct_cached, 0u);
  EXPECT_EQ(static_cast<unsigned char*>(q)[12345], 0x5a) << "the same, resident pages";
  mp_free(q);
  // calloc gets zeros from a reused mapping too (a fresh one is zero already).
  auto* z = static_cast<unsigned char*>(mp_calloc(1, 19 * kMiB));
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(static_cast<void*>(z), p);
  for (std::size_t i = 0; i < 19 * kMiB; i += 4096)
    ASSERT_EQ(z[i], 0) << i;
  EXPECT_EQ(mp_usable_size(z), 19 * kMiB) << "trimmed to size";
  mp_free(z);
}

TEST_F(HeapLargeReuse, ASmallerCachedMappingGrowsWithItsPagesKept) {
  auto* p = static_cast<unsigned char*>(mp_malloc(17 * kMiB));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x77, 17 * kMiB);
  mp_free(p);
  const std::size_t mapped = g_page_heap.stats().bytes_mapped;
  auto* q = static_cast<unsigned char*>(mp_malloc(21 * kMiB));
  ASSERT_NE(q, nullptr);
  const Span* s = g_page_map.lookup(q);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->state, SpanState::kDirect);
  EXPECT_TRUE(s->reused) << "grown from the cached mapping, not mapped afresh";
  EXPECT_EQ(q[0], 0x77);
  EXPECT_EQ(q[17 * kMiB - 1], 0x77) << "the old pages moved with it";
  EXPECT_EQ(q[21 * kMiB - 1], 0) << "the new tail is fresh";
  EXPECT_EQ(g_page_heap.stats().bytes_mapped, mapped + 4 * kMiB);
  mp_free(q);
}

TEST_F(HeapLargeReuse, CacheStaysWithinItsBudget) {
  g_page_heap.set_direct_cache_bytes(40 * kMiB);
  const std::size_t mapped_before = g_page_heap.stats().bytes_mapped;
  void* blocks[4];
  for (void*& b : blocks) {
    b = mp_malloc(17 * kMiB);
    ASSERT_NE(b, nullptr);
    std::memset(b, 1, 17 * kMiB);
  }
  for (void* b : blocks)
    mp_free(b);
  const PageHeapStats st = g_page_heap.stats();
  EXPECT_LE(st.bytes_direct_cached, 40 * kMiB);
  EXPECT_EQ(st.direct_cached, 2u);
  EXPECT_EQ(st.bytes_mapped, mapped_before + 34 * kMiB) << "the rest unmapped";
  g_page_heap.set_direct_cache_bytes(0);  // a smaller budget evicts at once
  EXPECT_EQ(g_page_heap.stats().direct_cached, 0u);
  EXPECT_EQ(g_page_heap.stats().bytes_mapped, mapped_before);
  void* p = mp_malloc(17 * kMiB);  // budget 0: unmapped at free, as before the cache
  mp_free(p);
  EXPECT_EQ(g_page_heap.stats().bytes_mapped, mapped_before);
}

TEST_F(HeapLargeReuse, DecayGivesCachedMappingsAndFreeSpansBack) {
  g_page_heap.set_decay_ms(1000);
  void* direct = mp_malloc(18 * kMiB);
  void* large = mp_malloc(3 * kMiB);  // a span of the page heap
  ASSERT_NE(direct, nullptr);
  ASSERT_NE(large, nullptr);
  std::memset(direct, 2, 18 * kMiB);
  std::memset(large, 2, 3 * kMiB);
  const std::uint64_t freed_at = PageHeap::now_ms();
  mp_free(direct);
  mp_free(large);
  const PageHeapStats kept = g_page_heap.stats();
  EXPECT_EQ(kept.bytes_direct_cached, 18 * kMiB);
  EXPECT_GE(kept.bytes_free_resident, 3 * kMiB);
  g_page_heap.decay(freed_at + 500);  // not yet
  EXPECT_EQ(g_page_heap.stats().bytes_direct_cached, 18 * kMiB);
  EXPECT_GE(g_page_heap.stats().bytes_free_resident, 3 * kMiB);
  g_page_heap.decay(freed_at + 2000);  // unused for 2 decay times: back to the OS
  const PageHeapStats after = g_page_heap.stats();
  EXPECT_EQ(after.bytes_direct_cached, 0u);
  EXPECT_EQ(after.bytes_free_resident, 0u);
  EXPECT_EQ(after.bytes_mapped, kept.bytes_mapped - 18 * kMiB);
  EXPECT_GE(after.bytes_free_released, kept.bytes_free_released + 3 * kMiB);
}

TEST_F(HeapLargeReuse, CollectGivesEverythingBackAtOnce) {
  void* a = mp_malloc(18 * kMiB);
  void* b = mp_malloc(5 * kMiB);
  std::memset(a, 3, 18 * kMiB);
  std::memset(b, 3, 5 * kMiB);
  mp_free(a);
  mp_free(b);
  EXPECT_GT(mempool::stats().bytes_free_in_page_heap, 0u);
  const std::size_t mapped = mempool::stats().bytes_mapped;
  mempool::collect();
  const HeapStats st = mempool::stats();
  EXPECT_EQ(st.bytes_free_in_page_heap, 0u);
  EXPECT_EQ(g_page_heap.stats().direct_cached, 0u);
  EXPECT_EQ(st.bytes_mapped, mapped - 18 * kMiB);
}

TEST_F(HeapLargeReuse, StatsCountCachedMappingsAsFreeNotInUse) {
  const HeapStats before = mempool::stats();
  void* p = mp_malloc(20 * kMiB);
  const HeapStats live = mempool::stats();
  EXPECT_EQ(live.bytes_in_use, before.bytes_in_use + 20 * kMiB);
  EXPECT_EQ(live.large_blocks_in_use, before.large_blocks_in_use + 1);
  mp_free(p);
  const HeapStats cached = mempool::stats();
  EXPECT_EQ(cached.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(cached.large_blocks_in_use, before.large_blocks_in_use);
  EXPECT_EQ(cached.bytes_mapped, live.bytes_mapped) << "still mapped, for reuse";
  EXPECT_EQ(cached.bytes_free_in_page_heap, before.bytes_free_in_page_heap + 20 * kMiB);
  EXPECT_GE(cached.bytes_mapped, cached.bytes_in_use + cached.bytes_in_thread_caches +
                                     cached.bytes_in_central_cache +
                                     cached.bytes_free_in_page_heap);
  EXPECT_FALSE(mempool::owns(p)) << "a cached mapping is no block";
}

TEST_F(HeapLargeReuse, OutOfMemoryDropsTheCacheAndKeepsLiveBlocks) {
  auto* live = static_cast<unsigned char*>(mp_malloc(17 * kMiB));
  ASSERT_NE(live, nullptr);
  std::memset(live, 0x3c, 17 * kMiB);
  void* spare = mp_malloc(17 * kMiB);
  ASSERT_NE(spare, nullptr);
  mp_free(spare);
  mempool::testing::fail_os_maps_after(0);
  void* again = mp_malloc(17 * kMiB);  // from the cache: no map needed
  EXPECT_NE(again, nullptr);
  mp_free(again);
  EXPECT_EQ(mp_malloc(40 * kMiB), nullptr) << "growing the cached mapping needs the OS";
  EXPECT_EQ(g_page_heap.stats().direct_cached, 0u) << "dropped before giving up";
  mempool::testing::fail_os_maps_after(-1);
  for (std::size_t i = 0; i < 17 * kMiB; i += 4096)
    ASSERT_EQ(live[i], 0x3c) << i;
  mp_free(live);
}

// A page heap of its own (the process's has a history): its growths are contiguous,
// and a request no free span fits grows the free span at the edge in place.
TEST_F(HeapLargeReuse, PageHeapGrowsTheFreeSpanAtItsEdgeInPlace) {
  static PageHeap heap;
  heap.set_decay_ms(PageHeap::kNoDecay);  // nothing given back under a slow run
  const std::size_t mapped = heap.stats().bytes_mapped;
  // Whole huge pages, which large spans are rounded to (hugepage_filler.hpp).
  Span* first = heap.allocate(1536);  // 12 MiB
  ASSERT_NE(first, nullptr);
  Span* below = heap.allocate(1536);
  ASSERT_NE(below, nullptr);
  EXPECT_EQ(below->start + below->bytes(), first->start) << "the second growth is contiguous";
  heap.free(first);
  auto* bytes = address_as<unsigned char>(below->start);
  std::memset(bytes, 0x42, below->bytes());
  const std::uintptr_t old_start = below->start;
  heap.free(below);  // one free span of 3072 pages, at the edge
  EXPECT_EQ(heap.stats().bytes_mapped, mapped + 3072 * kHeapPageSize);
  Span* bigger = heap.allocate(4864);  // 38 MiB: no free span fits
  ASSERT_NE(bigger, nullptr);
  EXPECT_EQ(heap.stats().bytes_mapped, mapped + 4864 * kHeapPageSize)
      << "only the 1792 pages missing were mapped";
  EXPECT_EQ(bigger->start + 1792 * kHeapPageSize, old_start) << "grown below, in place";
  EXPECT_EQ(bytes[0], 0x42) << "the free span's pages kept their bytes: not faulted afresh";
  EXPECT_EQ(bytes[1536 * kHeapPageSize - 1], 0x42);
  EXPECT_EQ(address_as<unsigned char>(bigger->start)[0], 0) << "the new pages are fresh";
  for (std::size_t i = 0; i < 4864; i += 97)
    ASSERT_EQ(g_page_map.lookup(address_as<unsigned char>(bigger->start) + i * kHeapPageSize),
              bigger);
  EXPECT_TRUE(heap.reserved(bytes));
  EXPECT_FALSE(heap.reserved(&mapped));
  heap.free(bigger);
  heap.release_all();
}

// When the reservation runs out and the next cannot lie right below it, the pages the
// edge span lacks are not next to it: the request still gets a span of its full size.
TEST_F(HeapLargeReuse, PageHeapGrowsElsewhereWhenTheReservationRunsOut) {
  static PageHeap heap;
  heap.set_decay_ms(PageHeap::kNoDecay);
  constexpr std::size_t kBig = 7680;  // 60 MiB: committed, never touched
  Span* first = heap.allocate(1536);
  ASSERT_NE(first, nullptr);
  // The reservation (1 GiB and a huge page) ends at most a huge page above the first
  // span's end; keep the address space below it taken, so that the next reservation
  // lands elsewhere.
  const std::uintptr_t top = first->start + first->bytes();
  std::uintptr_t low = top - (std::size_t{1} << 30) - kHugePageSize;
  while (!heap.reserved(address_as(low)))
    low += page_size();
  const std::size_t blocker_bytes = std::size_t{16} << 20;
  void* blocker = os_reserve(address_as(low - blocker_bytes), blocker_bytes);
  Span* spans[16];
  for (Span*& s : spans) {  // 16 x 60 MiB: 52 MiB of the reservation left, at most 54
    s = heap.allocate(kBig);
    ASSERT_NE(s, nullptr);
  }
  EXPECT_TRUE(heap.reserved(address_as(spans[15]->start)));
  heap.free(spans[15]);                      // the free span at the edge
  Span* grown = heap.allocate(kBig + 7168);  // lacks 56 MiB: more than is left
  ASSERT_NE(grown, nullptr) << "the lacking pages went elsewhere, yet the request is served";
  EXPECT_EQ(grown->pages, kBig + 7168);
  for (std::size_t i = 0; i < grown->pages; i += 499)
    ASSERT_EQ(g_page_map.lookup(address_as<unsigned char>(grown->start) + i * kHeapPageSize),
              grown);
  heap.free(grown);
  for (std::size_t i = 0; i < 15; ++i)
    heap.free(spans[i]);
  heap.free(first);
  heap.release_all();
  if (blocker != nullptr) os_unreserve(blocker, blocker_bytes);
}

TEST_F(HeapLargeReuse, FreePagesUpToTheBytesInUseStayResident) {
  g_page_heap.set_release_threshold(16 * kMiB);
  unsigned char* blocks[8];
  for (auto*& b : blocks) {
    b = static_cast<unsigned char*>(mp_malloc(8 * kMiB));  // page heap spans
    ASSERT_NE(b, nullptr);
    std::memset(b, 0x17, 8 * kMiB);
  }
  for (int i = 0; i < 6; i += 2)
    mp_free(blocks[i]);
  // 24 MiB free, past the 16 MiB threshold but not past the 40 MiB in use.
  EXPECT_GE(g_page_heap.stats().bytes_free_resident, 24 * kMiB);
  for (int i = 1; i < 8; i += 2)
    mp_free(blocks[i]);
  mp_free(blocks[6]);
  // Now past both: back to 3/4 of the larger, the threshold or what is left in use.
  const PageHeapStats after = g_page_heap.stats();
  EXPECT_LE(after.bytes_free_resident, std::max(16 * kMiB, after.bytes_in_spans) / 4 * 3);
  g_page_heap.set_release_threshold(128 * kMiB);
}

TEST_F(HeapLargeReuse, DoubleFreeOfACachedBlockIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        void* p = mp_malloc(20 * kMiB);
        mp_free(p);
        mp_free(p);
      },
      "double free");
}

}  // namespace
}  // namespace mempool::detail
