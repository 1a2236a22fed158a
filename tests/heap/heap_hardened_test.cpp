// The hardened heap (MEMPOOL_HARDENED=1: libmempool-malloc-hardened.so, src/heap/hardened.cpp),
// linked into this program as its malloc and operator new (mempool::override_hardened), so
// that gtest's own allocations go through it too. What it catches beyond the default build:
// overflows and underflows (a canary after each block, checked on free), writes after free
// (freed blocks filled, checked when handed out again), double frees and uses of free
// blocks wherever the block is (the canary says "free"), sized deletes with a wrong size;
// and how: malloc_usable_size is the size asked for, spans are shuffled, large blocks have
// a guard page, freed huge blocks are unreadable. All of that in the spans it guards: this
// program runs with every span guarded (MEMPOOL_HARDENED_SAMPLE=1, tests/CMakeLists.txt);
// the sampling test lowers the rate. Every write out of bounds happens inside the death
// test's child: the parent's heap stays sound.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "heap/central_cache.hpp"
#include "heap/class_info.hpp"
#include "heap/heap_internal.hpp"
#include "heap/page_map.hpp"
#include "heap_test_util.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "options.hpp"  // kDefaultHardenedSample

// Frees and uses of freed blocks are what this file tests.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuse-after-free"
#endif

namespace mempool {
namespace {

static_assert(detail::kHardened, "built with MEMPOOL_HARDENED=1 (mempool::override_hardened)");

using heap_test::hex_pointer;
using heap_test::kKiB;
using heap_test::kMiB;

constexpr std::size_t kPage = detail::kHeapPageSize;
constexpr std::size_t kLarge = 300 * kKiB;  // past the largest class: a span of its own
constexpr std::size_t kHuge = 70 * kMiB;    // past MEMPOOL_DIRECT_MAP_THRESHOLD: a mapping

// The report about p: "mempool: heap: <problem>" and p in hex.
std::string report(const std::string& problem, const void* p) {
  return "mempool: heap: " + problem + ".*" + hex_pointer(p) + "([^0-9a-fx]|$)";
}
const std::string kOverflow = "buffer overflow \\(canary overwritten\\)";

char* bytes(void* p) {
  return static_cast<char*>(p);
}
// Writes out of bounds change the byte they touch: a canary byte is random and may
// already hold any one value (a fixed write went undetected once in 256 runs).
void flip(void* p, std::ptrdiff_t i) {
  bytes(p)[i] = static_cast<char>(~bytes(p)[i]);
}

// The compiler may not pair a malloc with its free, nor see a write it could drop.
template <class T>
T opaque(T value) {
  asm volatile("" : "+r"(value));
  return value;
}

void* checked_malloc(std::size_t n) {
  void* p = opaque(std::malloc(n));
  if (p == nullptr) std::abort();
  return p;
}

// Small blocks of several classes (64: a request of its class's size, the canary after
// it), the largest class and a large block.
constexpr std::size_t kSizes[] = {0, 1, 24, 64, 1000, 100 * kKiB, 256 * kKiB, kLarge};

TEST(HardenedHeap, UsableSizeIsTheSizeAskedFor) {
  for (std::size_t n : kSizes) {
    void* p = checked_malloc(n);
    EXPECT_EQ(malloc_usable_size(p), n) << n;
    EXPECT_EQ(mp_usable_size(p), n) << n;
    EXPECT_EQ(usable_size(p), n) << n;
    std::memset(p, 0x5a, n);  // all of it is the program's
    std::free(p);
  }
  void* aligned = std::aligned_alloc(4096, 100);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(aligned) % 4096, 0u);
  EXPECT_EQ(malloc_usable_size(aligned), 100u);
  std::free(aligned);
}

// realloc keeps the bytes, within a class in place, and the new size is what the block
// then holds (its canary moves with it).
TEST(HardenedHeap, ReallocKeepsBytesAndMovesTheCanary) {
  auto* p = static_cast<unsigned char*>(checked_malloc(100));
  for (int i = 0; i < 100; ++i)
    p[i] = static_cast<unsigned char>(i);
  // 100 and 104 bytes both take the 112-byte class.
  EXPECT_EQ(std::realloc(p, 104), p);
  EXPECT_EQ(malloc_usable_size(p), 104u);
  std::size_t size = 104;
  for (std::size_t n : {1000u, 200u * 1024u, 600u * 1024u, 500u * 1024u, 70u, 3u}) {
    p = static_cast<unsigned char*>(std::realloc(p, n));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(malloc_usable_size(p), n);
    for (std::size_t i = 0; i < std::min<std::size_t>({size, n, 100}); ++i)
      ASSERT_EQ(p[i], i) << "after realloc to " << n;
    std::memset(p + std::min<std::size_t>(size, n), 0, n - std::min<std::size_t>(size, n));
    size = n;
  }
  std::free(p);
}

// A guarded span's blocks lie 16 bytes apart beyond their class's size, so most of them
// do not have an alignment above 16 that the class's size has (a 4096-byte class's: only
// its first block): an aligned request gets an aligned block all the same, from another
// span or a large block, and the blocks it passed over go back on the list, none lost
// (this program guards every span).
TEST(HardenedHeap, AlignedRequestsGetAlignedBlocks) {
  std::vector<void*> blocks;
  blocks.reserve(4 * 4 * 50);
  const HeapStats before = stats();  // no allocation: each class's blocks in use (or lost)
  for (const std::size_t alignment : {32u, 64u, 256u, 4096u}) {
    for (const std::size_t n : {1u, 48u, 64u, 200u}) {
      for (int i = 0; i < 50; ++i) {
        void* p = nullptr;
        ASSERT_EQ(posix_memalign(&p, alignment, n), 0);
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignment, 0u) << alignment << " " << n;
        EXPECT_EQ(malloc_usable_size(p), n);
        std::memset(p, 0x5a, n);
        blocks.push_back(p);
      }
    }
  }
  for (void* p : blocks)
    std::free(p);
  // A block set aside and not pushed back would count as in use now (other counts may
  // only have dropped: the test framework frees as it goes).
  const HeapStats after = stats();
  ASSERT_EQ(after.class_count, before.class_count);
  for (std::size_t i = 0; i < after.class_count; ++i)
    EXPECT_LE(after.classes[i].blocks_in_use, before.classes[i].blocks_in_use)
        << after.classes[i].block_size << "-byte class";
}

// A guarded span holds fewer blocks than its class's spans do: the statistics count them,
// so that the identity of heap.hpp still holds (the pads between blocks are counted with
// the spans' tails).
TEST(HardenedHeap, StatsCountAGuardedSpansBlocks) {
  std::vector<void*> blocks;
  for (int i = 0; i < 1000; ++i)
    blocks.push_back(checked_malloc(64));  // every span guarded: 64 B every 80 bytes
  const HeapStats s = stats();
  EXPECT_EQ(s.bytes_mapped, s.bytes_in_use + s.bytes_in_thread_caches + s.bytes_in_central_cache +
                                s.bytes_free_in_page_heap + s.bytes_returned_to_os +
                                s.bytes_span_tails);
  const HeapClassStats* k = nullptr;
  for (std::size_t i = 0; i < s.class_count; ++i)
    if (s.classes[i].block_size == 64) k = &s.classes[i];
  ASSERT_NE(k, nullptr);
  ASSERT_GT(k->spans, 0u);
  const std::size_t per_span = k->bytes_reserved / k->spans / detail::hardened_guarded_stride(64);
  EXPECT_EQ(k->blocks_in_use + k->blocks_in_thread_caches + k->blocks_in_central_cache,
            k->spans * per_span);
  for (void* p : blocks)
    std::free(p);
}

// A freed large block that the guard cache keeps is free memory of the page heap, not a
// block in use (heap_hardened_fuzz found it counted in use: after every block was freed,
// bytes_in_use and large_blocks_in_use read as before only once collect() emptied the
// cache).
TEST(HardenedHeap, StatsCountACachedLargeBlockAsFree) {
  collect();  // the guard cache empty
  const HeapStats before = stats();
  void* p = checked_malloc(kLarge);
  const HeapStats during = stats();
  EXPECT_EQ(during.large_blocks_in_use, before.large_blocks_in_use + 1);
  EXPECT_GE(during.bytes_in_use, before.bytes_in_use + kLarge);
  std::free(p);  // kept with its guard page for the next block of its size
  const HeapStats after = stats();
  EXPECT_EQ(after.large_blocks_in_use, before.large_blocks_in_use);
  EXPECT_LE(after.bytes_in_use, before.bytes_in_use);
  EXPECT_GE(after.bytes_free_in_page_heap, before.bytes_free_in_page_heap + kLarge);
  EXPECT_EQ(after.bytes_mapped, after.bytes_in_use + after.bytes_in_thread_caches +
                                    after.bytes_in_central_cache + after.bytes_free_in_page_heap +
                                    after.bytes_returned_to_os + after.bytes_span_tails);
  void* again = checked_malloc(kLarge);
  EXPECT_EQ(again, p);  // from the cache, in use again
  EXPECT_EQ(stats().large_blocks_in_use, before.large_blocks_in_use + 1);
  std::free(again);
}

// calloc clears a freed small block (its fill) and a large block that the guard cache
// kept (the last owner's bytes).
TEST(HardenedHeap, CallocZeroesAFreedBlock) {
  void* p = checked_malloc(500);
  std::free(p);  // now filled with the free pattern
  auto* z = static_cast<unsigned char*>(std::calloc(5, 100));
  for (int i = 0; i < 500; ++i)
    ASSERT_EQ(z[i], 0) << i;
  std::free(z);
  void* large = checked_malloc(kLarge);
  std::memset(large, 0x77, kLarge);
  std::free(large);
  auto* cleared = static_cast<unsigned char*>(std::calloc(1, kLarge));
  EXPECT_EQ(cleared, large);  // the same pages, from the cache
  for (std::size_t i = 0; i < kLarge; ++i)
    ASSERT_EQ(cleared[i], 0) << i;
  std::free(cleared);
}

// A freed block holds its link, then the fill, up to byte 64 (or its canary).
TEST(HardenedHeap, FreedBlockIsFilled) {
  void* keep = checked_malloc(200);
  auto* p = static_cast<unsigned char*>(checked_malloc(200));
  std::memset(p, 0, 200);
  std::free(p);
  for (std::size_t i = 8; i < 64; ++i)
    ASSERT_EQ(opaque(p)[i], 0xdb) << i;  // reading a freed block: the allocator's own test
  std::free(keep);
}

// Every block of a fresh span is filled as a free one, each once on its free list, in a
// random order but for the span's first block, which comes last.
TEST(HardenedHeap, FreshSpanIsShuffled) {
  const std::size_t c = detail::heap_class_of(48);
  const detail::HeapClassInfo& info = detail::kHeapClasses[c];
  ASSERT_GT(info.capacity, 100u);
  std::vector<char> memory(info.span_pages * kPage + kPage);
  detail::Span s;
  s.start = (reinterpret_cast<std::uintptr_t>(memory.data()) + kPage - 1) & ~(kPage - 1);
  s.pages = info.span_pages;
  detail::hardened_prepare_span(&s, c);  // guarded: this program samples every span
  ASSERT_TRUE(s.guarded);
  // Its blocks lie 48 + 16 bytes apart, each with its canary after the class's 48 bytes.
  const std::size_t stride = detail::hardened_guarded_stride(info.size);
  EXPECT_EQ(stride, 64u);
  EXPECT_EQ(s.capacity, s.pages * kPage / stride);
  const std::uintptr_t key = detail::heap_link_key();
  std::vector<std::size_t> order;
  for (const detail::FreeBlock* b = s.free_blocks; b != nullptr; b = detail::heap_next(b, key)) {
    const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(b) - s.start;
    ASSERT_EQ(offset % stride, 0u);
    order.push_back(offset / stride);
    for (std::size_t i = 8; i < stride - 8; ++i)
      ASSERT_EQ(static_cast<unsigned char>(bytes(const_cast<detail::FreeBlock*>(b))[i]), 0xdb);
  }
  ASSERT_EQ(order.size(), s.capacity);
  EXPECT_EQ(std::set<std::size_t>(order.begin(), order.end()).size(), s.capacity);
  EXPECT_EQ(order.back(), 0u);
  std::size_t in_place = 0;
  for (std::size_t i = 0; i < order.size(); ++i)
    in_place += order[i] == i ? 1 : 0;
  EXPECT_LT(in_place, s.capacity / 4);  // a shuffle of 128 leaves about one in place
  EXPECT_EQ(s.carve, s.start + s.capacity * stride);
  EXPECT_EQ(s.carve, s.carve_end);
}

// Threads that allocate, free each other's blocks and check their bytes: no check fires
// on correct use (a block's neighbour is read while another thread writes it).
// MEMPOOL_HARDENED_SAMPLE (this program runs with 1: every span guarded). With a rate
// of n, 1 in n fresh small spans is guarded; the blocks of the others are the size of
// their class, unchecked but for what the default build checks.
struct Sampling {
  explicit Sampling(std::uint64_t sample) { detail::hardened_set_sampling(0, sample); }
  ~Sampling() { detail::hardened_set_sampling(0, 1); }
  Sampling(const Sampling&) = delete;
  Sampling& operator=(const Sampling&) = delete;
};

bool guarded(const void* p) {
  return detail::g_page_map.lookup(p)->guarded;
}

// A block of n bytes from a span that is guarded (or not); the blocks taken on the way
// stay allocated, so that fresh spans are made.
void* block_from(bool want_guarded, std::size_t n, std::vector<void*>* taken) {
  for (int i = 0; i < 100000; ++i) {
    void* p = checked_malloc(n);
    if (guarded(p) == want_guarded) return p;
    taken->push_back(p);
  }
  std::abort();
}

TEST(HardenedHeap, SampledSpansAreGuardedTheOthersAreNot) {
  const Sampling sampling(4);
  constexpr std::size_t kN = 200;  // the 208-byte class: 39 blocks a span
  const std::size_t block = detail::kHeapClasses[detail::heap_class_of(kN)].size;
  std::vector<void*> blocks;
  std::set<const detail::Span*> spans[2];
  for (int i = 0; i < 39 * 400; ++i) {
    void* p = checked_malloc(kN);
    std::memset(p, 0x5a, kN);
    blocks.push_back(p);
    const bool g = guarded(p);
    spans[g ? 1 : 0].insert(detail::g_page_map.lookup(p));
    // A guarded block holds what was asked for; another, its whole class.
    EXPECT_EQ(malloc_usable_size(p), g ? kN : block);
  }
  // About 1 in 4 of the 400 fresh spans (the lists held some guarded blocks before).
  EXPECT_GT(spans[1].size(), 40u);
  EXPECT_GT(spans[0].size(), 200u);
  for (void* p : blocks) {
    // Within its class, realloc keeps the block in both kinds.
    EXPECT_EQ(std::realloc(p, kN - 4), p);
    std::free(p);
  }
}

// The default rate, 1 in 16 fresh spans (kDefaultHardenedSample, options.hpp): of 1,600
// fresh spans of the 208-byte class, the guarded ones are binomial with mean 100 and
// standard deviation 9.7 (1,600 x 1/16 x 15/16, square root). 56 to 144 is 4.5 standard
// deviations either side: the draw is random (the heap's secret), and a correct heap
// falls outside about once in 150,000 runs; a heap that guards none, every span, or 1 in
// 8 (mean 200) or 1 in 32 (mean 50) falls outside.
TEST(HardenedHeap, TheDefaultRateGuardsAboutOneFreshSpanIn16) {
  const Sampling sampling(detail::kDefaultHardenedSample);
  constexpr std::size_t kN = 200;  // the 208-byte class: 39 blocks a span
  constexpr std::size_t kSpans = 1600;
  ASSERT_EQ(detail::kHeapClasses[detail::heap_class_of(kN)].capacity, 39u);
  std::vector<void*> blocks;
  std::set<const detail::Span*> spans[2];
  while (spans[0].size() + spans[1].size() < kSpans) {
    void* p = checked_malloc(kN);
    blocks.push_back(p);
    spans[guarded(p) ? 1 : 0].insert(detail::g_page_map.lookup(p));
  }
  EXPECT_GE(spans[1].size(), 56u) << "guarded spans of " << kSpans;
  EXPECT_LE(spans[1].size(), 144u) << "guarded spans of " << kSpans;
  for (void* p : blocks)
    std::free(p);
}

// A mapping of its own gets its guard page whatever the rate: the last page of the
// block's span, right after the slack.
TEST(HardenedHeapDeathTest, GuardPageAfterALiveDirectMappedBlockAtTheDefaultRate) {
  const Sampling sampling(detail::kDefaultHardenedSample);
  void* p = checked_malloc(kHuge);
  const detail::Span* s = detail::g_page_map.lookup(p);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->state, detail::SpanState::kDirect);
  const std::size_t guard = s->start + s->bytes() - kPage - reinterpret_cast<std::uintptr_t>(p);
  ASSERT_GE(guard, kHuge);
  std::memset(p, 7, kHuge);
  bytes(p)[guard - 1] = 1;  // the slack's page: still the block's
  EXPECT_EXIT(bytes(opaque(p))[guard] = 1, ::testing::KilledBySignal(SIGSEGV), "");
  std::free(p);
}

TEST(HardenedHeapDeathTest, SampledSpansCatchTheirMisuse) {
  // An unguarded block: a double free is caught as in the default build.
  EXPECT_DEATH(
      {
        const Sampling sampling(1000000);
        std::vector<void*> taken;
        void* p = block_from(false, 64, &taken);
        std::free(p);
        std::free(opaque(p));
      },
      "mempool: heap: double free \\(pointer 0x");
  // A guarded one: an overflow into its canary.
  EXPECT_DEATH(
      {
        const Sampling sampling(2);
        std::vector<void*> taken;
        void* p = block_from(true, 64, &taken);
        flip(p, 64);
        std::free(p);
      },
      "mempool: heap: " + kOverflow);
  // A free block whose word 1 was overwritten, in either kind of span: malloc finds no free
  // mark there, asks the page map, and stops (a guarded span's block: its fill is broken).
  for (const bool want_guarded : {false, true}) {
    EXPECT_DEATH(
        {
          const Sampling sampling(2);
          std::vector<void*> taken;
          void* p = block_from(want_guarded, 64, &taken);
          std::free(p);
          flip(opaque(p), 8);
          (void)checked_malloc(64);  // p again: the list is last in, first out
        },
        "mempool: heap: write after free \\(a free block was modified\\) \\(pointer 0x");
  }
}

// 4 threads each allocate 20,000 blocks of random sizes (a third up to 4000 bytes, the rest
// up to 120), keep 64 at a time and free the others at random; then each frees the 64 left by
// another thread. Every block carries a pattern of its own (its thread and serial number),
// checked byte for byte before it is freed, on its own thread or the other: the hardened
// heap's canaries, fills and shuffled spans must leave a live block's bytes alone, and no
// block may be handed to two owners.
TEST(HardenedHeap, ThreadsWithCrossThreadFrees) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  struct Block {
    unsigned char* p;
    std::size_t n;
    std::uint64_t seed;
  };
  std::vector<std::vector<Block>> handed(kThreads);
  std::atomic<int> damaged{0};
  const auto intact = [&damaged](const Block& b) {
    if (heap_test::first_mismatch(b.p, b.n, b.seed) == heap_test::kNoMismatch) return true;
    damaged.fetch_add(1);
    return false;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &handed, &intact] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<Block> mine;
      for (int i = 0; i < kRounds; ++i) {
        const std::size_t n = rng() % 3 == 0 ? rng() % 4000 : rng() % 120;
        auto* p = static_cast<unsigned char*>(checked_malloc(n));
        const std::uint64_t seed = (static_cast<std::uint64_t>(t) << 32) | static_cast<unsigned>(i);
        heap_test::fill_pattern(p, n, seed);
        mine.push_back({p, n, seed});
        if (mine.size() > 64) {
          std::swap(mine[rng() % mine.size()], mine.back());
          EXPECT_TRUE(intact(mine.back())) << "thread " << t << ", block of " << mine.back().n;
          std::free(mine.back().p);
          mine.pop_back();
        }
      }
      handed[t] = std::move(mine);
    });
  }
  for (std::thread& th : threads)
    th.join();
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {  // each frees the next one's blocks
    threads.emplace_back([&handed, &intact, t] {
      for (const Block& b : handed[(t + 1) % kThreads]) {
        EXPECT_TRUE(intact(b)) << "block of " << b.n << " from thread " << (t + 1) % kThreads;
        std::free(b.p);
      }
    });
  }
  for (std::thread& th : threads)
    th.join();
  EXPECT_EQ(damaged.load(), 0);
  for (const std::vector<Block>& left : handed)
    EXPECT_EQ(left.size(), 64u);  // the cross-thread frees above had blocks to free
}

// --- what it stops ----------------------------------------------------------------------

// One byte past the request: in the slack, or (24 bytes) on the canary itself; and past a
// large block's request.
TEST(HardenedHeapDeathTest, OverflowStopsFree) {
  for (std::size_t n : kSizes) {
    void* p = checked_malloc(n);
    EXPECT_DEATH(
        {
          flip(opaque(p), static_cast<std::ptrdiff_t>(n));
          std::free(p);
        },
        report(kOverflow, p))
        << n;
    std::free(p);
  }
}

// The same overflow seen by realloc and malloc_usable_size, and by a sized delete.
TEST(HardenedHeapDeathTest, OverflowStopsReallocAndUsableSize) {
  void* p = checked_malloc(40);
  EXPECT_DEATH(
      {
        flip(opaque(p), 45);
        std::printf("%p\n", std::realloc(p, 4000));
      },
      report(kOverflow, p));
  EXPECT_DEATH(
      {
        flip(opaque(p), 40);
        std::printf("%zu\n", malloc_usable_size(p));
      },
      report(kOverflow, p));
  void* q = opaque(::operator new(40));
  EXPECT_DEATH(
      {
        flip(opaque(q), 47);
        ::operator delete(q, 40);
      },
      report(kOverflow, q));
  ::operator delete(q, 40);
  std::free(p);
}

// A write before a block breaks the canary of the block below it, which its free checks.
TEST(HardenedHeapDeathTest, UnderflowStopsFree) {
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i)
    blocks.push_back(checked_malloc(64));
  int tested = 0;
  for (void* p : blocks) {
    if (detail::g_page_map.lookup(p)->start == reinterpret_cast<std::uintptr_t>(p))
      continue;  // the first block of its span has nothing of its span below it
    EXPECT_DEATH(
        {
          flip(opaque(p), -1);
          std::free(p);
        },
        report("buffer underflow \\(the canary of the block below was overwritten\\)", p));
    ++tested;
  }
  EXPECT_GT(tested, 0);
  for (void* p : blocks)
    std::free(p);
}

// A write into a free block stops the malloc that would hand it out: past its link
// (bytes 8 to 63, and its canary), or over the link itself (a whole word: one byte may
// leave a link that still decodes, free_list.hpp, and is then seen by the next pop).
TEST(HardenedHeapDeathTest, WriteAfterFreeStopsMalloc) {
  // A write of one byte flips it (each bit changes: a canary byte is random, and writing
  // 0x41 over one that held 0x41, one time in 256, changed nothing); the link is
  // overwritten with 0x41s.
  auto write_after_free = [](std::ptrdiff_t offset, bool link) {
    void* keep = checked_malloc(200);  // the class's list is this thread's own
    void* p = checked_malloc(200);
    std::free(p);
    if (link) {
      std::memset(bytes(opaque(p)) + offset, 0x41, 8);
    } else {
      flip(opaque(p), offset);
    }
    std::printf("%p %p\n", checked_malloc(200), keep);  // pops p
  };
  const std::string modified = "mempool: heap: write after free \\(a free block was modified\\)";
  EXPECT_DEATH(write_after_free(8, false), modified);
  EXPECT_DEATH(write_after_free(63, false), modified);
  // The canary of the 208-byte block: after its 208 bytes and 8 bytes of slack.
  EXPECT_DEATH(write_after_free(216, false), modified);
  EXPECT_DEATH(write_after_free(0, true), "mempool: heap: free list corrupted");
}

// Double frees, wherever the block went in between: this thread's list, a thread that has
// exited (its list went to the central cache), and large blocks. The whole sequence runs in
// the child: between a free in the parent and the statement, gtest's own allocations could
// take the block again.
TEST(HardenedHeapDeathTest, DoubleFreeIsNamed) {
  EXPECT_DEATH(
      {
        void* p = checked_malloc(64);
        std::free(p);
        std::free(opaque(p));
      },
      "mempool: heap: double free \\(pointer 0x");
  EXPECT_DEATH(
      {
        void* q = checked_malloc(1000);
        std::thread([q] { std::free(q); }).join();
        std::free(opaque(q));
      },
      "mempool: heap: double free \\(pointer 0x");
  EXPECT_DEATH(
      {
        void* d = opaque(::operator new(48));
        ::operator delete(d, 48);
        ::operator delete(opaque(d), 48);
      },
      "mempool: heap: double free \\(pointer 0x");
  EXPECT_DEATH(
      {
        void* large = checked_malloc(kLarge);
        std::free(large);
        std::free(opaque(large));
      },
      "mempool: heap: free of a block that is not allocated \\(double free\\?\\) \\(pointer 0x");
}

TEST(HardenedHeapDeathTest, UseOfAFreeBlockIsNamed) {
  EXPECT_DEATH(
      {
        void* p = checked_malloc(64);
        std::free(p);
        std::printf("%p\n", std::realloc(opaque(p), 100));
      },
      "mempool: heap: realloc of a free block \\(pointer 0x");
  EXPECT_DEATH(
      {
        void* p = checked_malloc(64);
        std::free(p);
        std::printf("%zu\n", malloc_usable_size(opaque(p)));
      },
      "mempool: heap: malloc_usable_size of a free block \\(pointer 0x");
}

// A sized delete is checked against the size the block was asked for, and against the
// page map (a pointer the heap did not hand out).
TEST(HardenedHeapDeathTest, SizedDeleteWithWrongSizeOrPointer) {
  const std::string wrong = "sized free with a size that is not the block's";
  void* p = opaque(::operator new(100));
  EXPECT_DEATH(::operator delete(p, 99), report(wrong, p));
  EXPECT_DEATH(::operator delete(p, 104), report(wrong, p));  // the same class
  EXPECT_DEATH(::operator delete(p, 4096), report(wrong, p));
  ::operator delete(p, 100);
  void* large = opaque(::operator new(kLarge));
  EXPECT_DEATH(::operator delete(large, kLarge + 1), report(wrong, large));
  ::operator delete(large, kLarge);
  void* aligned = opaque(::operator new (100, std::align_val_t{256}));
  EXPECT_DEATH(::operator delete (aligned, 64, std::align_val_t{256}), report(wrong, aligned));
  ::operator delete (aligned, 100, std::align_val_t{256});
  alignas(16) char local[64] = {};
  EXPECT_DEATH(::operator delete(opaque(local + 16), 48),
               report("free of a pointer not allocated by the mempool heap", local + 16));
}

// --- pages --------------------------------------------------------------------------------

// Inaccessible mappings (PROT_NONE) in /proc/self/maps.
int guard_mappings() {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return -1;
  char line[512];
  int n = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    n += std::strstr(line, " ---p ") != nullptr ? 1 : 0;
  std::fclose(f);
  return n;
}

// The page after a large block's last page is a guard: a write there faults. Freed, the
// block waits with its guard for the next large block of its size, which takes it over
// without a system call; collect() gives it back to the page heap, guard and all.
TEST(HardenedHeapDeathTest, GuardPageAfterLargeBlock) {
  collect();
  const int before = guard_mappings();
  void* p = checked_malloc(kLarge);
  EXPECT_EQ(guard_mappings(), before + 1);
  const std::size_t guard = (kLarge + kPage - 1) / kPage * kPage;
  bytes(p)[guard - 1] = 1;  // still the block's pages
  EXPECT_EXIT(bytes(opaque(p))[guard] = 1, ::testing::KilledBySignal(SIGSEGV), "");
  std::free(p);
  EXPECT_EQ(guard_mappings(), before + 1);
  void* q = checked_malloc(kLarge - 1000);  // the same pages
  EXPECT_EQ(q, p);
  EXPECT_EQ(malloc_usable_size(q), kLarge - 1000);
  EXPECT_EXIT(bytes(opaque(q))[guard] = 1, ::testing::KilledBySignal(SIGSEGV), "");
  std::free(q);
  EXPECT_DEATH(std::free(opaque(q)),
               report("free of a block that is not allocated \\(double free\\?\\)", q));
  collect();
  EXPECT_EQ(guard_mappings(), before);
}

// A freed huge block (a mapping of its own) stays inaccessible while the cache keeps its
// mapping; the next huge block that takes it over can use all of it.
TEST(HardenedHeapDeathTest, FreedHugeBlockIsInaccessible) {
  void* p = checked_malloc(kHuge);
  std::memset(p, 1, kHuge);
  std::free(p);
  EXPECT_EXIT(bytes(opaque(p))[kHuge / 2] = 1, ::testing::KilledBySignal(SIGSEGV), "");
  void* q = checked_malloc(kHuge);
  std::memset(q, 2, kHuge);
  EXPECT_EQ(bytes(q)[kHuge - 1], 2);
  std::free(q);
}

// Correct use of every form never trips a check.
TEST(HardenedHeapDeathTest, CorrectUseIsNotReported) {
  for (int round = 0; round < 3; ++round) {
    void* a = opaque(::operator new(64));
    void* b = checked_malloc(kMiB);
    void* c = opaque(::operator new (100, std::align_val_t{4096}));
    void* d = checked_malloc(kHuge);
    void* e = std::realloc(checked_malloc(10), 70);
    ::operator delete(a, 64);
    std::free(b);
    ::operator delete (c, 100, std::align_val_t{4096});
    std::free(d);
    std::free(e);
  }
}

}  // namespace
}  // namespace mempool
