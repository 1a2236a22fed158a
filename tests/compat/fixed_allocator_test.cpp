// mempool/compat/fixed_allocator.hpp: fixedPoolAlloc's FixedAllocator over mempool::BitmapPool.
// Its README shows no code: the usage test below is the one its queue (msgQueueFixAlloc.h)
// makes of the API, a message of 1..64 bytes copied into a block and the block freed.
#include "mempool/compat/fixed_allocator.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <type_traits>
#include <vector>

#include "support/test_support.hpp"

namespace {

static_assert(std::is_same_v<decltype(FixedAllocator{}.my_malloc()), MemRange>);
static_assert(std::is_same_v<decltype(FixedAllocator{}.my_free(MemRange{})), bool>);
static_assert(std::is_same_v<decltype(MemRange{}.lo), std::uint8_t*>);

TEST(CompatFixedAllocator, QueueUsage) {
  FixedAllocator alloc;
  const char msg[] = "order 42: buy 100 AAPL";
  MemRange block = alloc.my_malloc();
  ASSERT_NE(block.lo, nullptr);
  ASSERT_LE(sizeof msg, static_cast<std::size_t>(block.hi - block.lo + 1));
  std::memcpy(block.lo, msg, sizeof msg);
  EXPECT_STREQ(reinterpret_cast<const char*>(block.lo), msg);
  EXPECT_TRUE(alloc.my_free(block));
}

TEST(CompatFixedAllocator, SixtyFourDistinctAlignedBlocksThenFull) {
  FixedAllocator alloc;
  std::vector<MemRange> blocks;
  std::set<std::uint8_t*> starts;
  for (int i = 0; i < 64; ++i) {
    MemRange r = alloc.my_malloc();
    ASSERT_NE(r.lo, nullptr) << "block " << i;
    EXPECT_EQ(r.hi, r.lo + 63);
    EXPECT_TRUE(mempool_test::is_aligned(r.lo, 16)) << "16-aligned";
    EXPECT_TRUE(starts.insert(r.lo).second) << "block handed out twice";
    std::memset(r.lo, i, 64);
    blocks.push_back(r);
  }
  // 64 blocks of 64 bytes: no two overlap.
  std::uint8_t* prev = nullptr;
  for (std::uint8_t* s : starts) {
    if (prev != nullptr) {
      EXPECT_GE(s - prev, 64);
    }
    prev = s;
  }
  MemRange full = alloc.my_malloc();
  EXPECT_EQ(full.lo, nullptr);
  EXPECT_EQ(full.hi, nullptr);
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < 64; ++j)
      ASSERT_EQ(blocks[i].lo[j], i) << "block " << i << " overwritten";
  }

  // A freed block is the one my_malloc hands out next.
  EXPECT_TRUE(alloc.my_free(blocks[17]));
  MemRange again = alloc.my_malloc();
  EXPECT_EQ(again.lo, blocks[17].lo);
  EXPECT_EQ(alloc.my_malloc().lo, nullptr);

  for (const MemRange& r : blocks)
    EXPECT_TRUE(alloc.my_free(r));
  for (int i = 0; i < 64; ++i)
    EXPECT_NE(alloc.my_malloc().lo, nullptr) << "round 2, block " << i;
}

TEST(CompatFixedAllocator, BadFreesAnswerFalseAndChangeNothing) {
  FixedAllocator alloc;
  FixedAllocator other;
  MemRange r = alloc.my_malloc();
  MemRange kept = alloc.my_malloc();
  ASSERT_NE(r.lo, nullptr);

  EXPECT_FALSE(alloc.my_free(MemRange{})) << "{nullptr, nullptr}";
  EXPECT_FALSE(alloc.my_free(MemRange{r.lo, nullptr}));
  EXPECT_FALSE(alloc.my_free(MemRange{r.lo + 1, r.hi})) << "inside a block";
  EXPECT_FALSE(other.my_free(r)) << "another allocator's block";
  alignas(16) std::uint8_t local[64] = {};
  EXPECT_FALSE(alloc.my_free(MemRange{local, local + 63})) << "not from the allocator";
  // fixedPoolAlloc accepted this one: its int block index wrapped to 0.
  auto* far = reinterpret_cast<std::uint8_t*>(reinterpret_cast<std::uintptr_t>(r.lo) +
                                              (std::uintptr_t{1} << 38));
  EXPECT_FALSE(alloc.my_free(MemRange{far, far + 63})) << "2^38 bytes away";

  EXPECT_TRUE(alloc.my_free(r));
  EXPECT_FALSE(alloc.my_free(r)) << "double free";
  EXPECT_TRUE(alloc.my_free(kept)) << "the bad frees released nothing";
}

TEST(CompatFixedAllocator, ThreadsNeverShareABlock) {
  FixedAllocator alloc;
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  std::atomic<int> held{0};
  std::atomic<int> most_held{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<MemRange> mine;
      for (int i = 0; i < kRounds; ++i) {
        if (mine.size() < 24) {
          MemRange r = alloc.my_malloc();
          if (r.lo == nullptr) continue;  // all 64 out: fine, try again later
          const int now = held.fetch_add(1) + 1;
          int seen = most_held.load();
          while (now > seen && !most_held.compare_exchange_weak(seen, now)) {
          }
          std::memset(r.lo, t + 1, 64);
          mine.push_back(r);
        } else {
          for (const MemRange& r : mine) {
            for (int j = 0; j < 64; ++j) {
              if (r.lo[j] != t + 1) failures.fetch_add(1);
            }
            held.fetch_sub(1);
            if (!alloc.my_free(r)) failures.fetch_add(1);
          }
          mine.clear();
        }
      }
      for (const MemRange& r : mine) {
        held.fetch_sub(1);
        if (!alloc.my_free(r)) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(failures.load(), 0) << "a block was shared or a valid free refused";
  EXPECT_LE(most_held.load(), 64);
  for (int i = 0; i < 64; ++i)
    EXPECT_NE(alloc.my_malloc().lo, nullptr) << "all came back";
  EXPECT_EQ(alloc.my_malloc().lo, nullptr);
}

}  // namespace
