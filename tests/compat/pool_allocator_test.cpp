// mempool/compat/pool_allocator.hpp: poolAllocator's PoolAllocator over
// mempool::ConcurrentFixedPool with a capacity. Its README shows no code: the usage test below
// is the one its benchmark makes of the API (PoolAllocator<false>(sizeof(obj), POOL_SIZE)).
#include "mempool/compat/pool_allocator.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <set>
#include <thread>
#include <type_traits>
#include <vector>

#include "mempool/allocator.hpp"
#include "mempool/detail/platform.hpp"
#include "support/test_support.hpp"

namespace {

struct obj {
  long long data1;
  long long data2;
  int data3;
};

constexpr std::size_t POOL_SIZE = 10000;

// The same class under both names; mempool's STL adapter is another template.
static_assert(std::is_same_v<::PoolAllocator<false>, pool_allocator::PoolAllocator<false>>);
static_assert(!std::is_same_v<::PoolAllocator<false>, mempool::PoolAllocator<int>>);

TEST(CompatPoolAllocator, BenchmarkUsage) {
  PoolAllocator<false> allocator(sizeof(obj), POOL_SIZE);
  std::vector<void*> objects;
  objects.reserve(POOL_SIZE);
  for (std::size_t i = 0; i < POOL_SIZE; ++i)
    objects.push_back(allocator.allocate_object());
  for (void* p : objects)
    allocator.deallocate_object(p);
  void* p = allocator.allocate_object();
  allocator.deallocate_object(p);
}

TEST(CompatPoolAllocator, PoolSizeBlocksThenNullptr) {
  PoolAllocator allocator(sizeof(obj), 100);  // the default: PoolAllocator<false>
  static_assert(std::is_same_v<decltype(allocator), PoolAllocator<false>>);
  std::vector<obj*> blocks;
  std::set<void*> distinct;
  for (int i = 0; i < 100; ++i) {
    void* p = allocator.allocate_object();
    ASSERT_NE(p, nullptr) << "block " << i;
    EXPECT_TRUE(mempool_test::is_aligned(p, 16)) << "16-aligned";
    EXPECT_TRUE(distinct.insert(p).second) << "block handed out twice";
    blocks.push_back(new (p) obj{i, -i, i * 3});
  }
  EXPECT_EQ(allocator.allocate_object(), nullptr);
  EXPECT_EQ(allocator.allocate_object(), nullptr);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(blocks[i]->data1, i);
    ASSERT_EQ(blocks[i]->data2, -i);
    ASSERT_EQ(blocks[i]->data3, i * 3);
  }
  EXPECT_EQ(allocator.get_allocator_stats().allocated_blocks, 100u);

  allocator.deallocate_object(blocks[40]);
  void* again = allocator.allocate_object();
  EXPECT_NE(again, nullptr);
  EXPECT_EQ(allocator.allocate_object(), nullptr);
  blocks[40] = static_cast<obj*>(again);

  allocator.deallocate_object(nullptr);  // ignored: the count stays
  EXPECT_EQ(allocator.allocate_object(), nullptr);

  for (obj* p : blocks)
    allocator.deallocate_object(p);
  EXPECT_EQ(allocator.get_allocator_stats().allocated_blocks, 0u);
  for (int i = 0; i < 100; ++i) {
    blocks[i] = static_cast<obj*>(allocator.allocate_object());
    ASSERT_NE(blocks[i], nullptr) << "round 2, block " << i;
  }
  EXPECT_EQ(allocator.allocate_object(), nullptr);
  for (obj* p : blocks)
    allocator.deallocate_object(p);
}

TEST(CompatPoolAllocator, SmallAndOddSizes) {
  for (std::size_t size : {1, 7, 8, 20, 100, 4096}) {
    PoolAllocator<> allocator(size, 3);
    void* a = allocator.allocate_object();
    void* b = allocator.allocate_object();
    void* c = allocator.allocate_object();
    ASSERT_TRUE(a && b && c) << size;
    EXPECT_EQ(allocator.allocate_object(), nullptr) << size;
    if (size >= 16) {
      EXPECT_TRUE(mempool_test::is_aligned(a, 16)) << size;
    }
    std::memset(a, 1, size);
    std::memset(b, 2, size);
    std::memset(c, 3, size);
    EXPECT_EQ(static_cast<unsigned char*>(a)[size - 1], 1) << size;
    EXPECT_EQ(static_cast<unsigned char*>(b)[size - 1], 2) << size;
    allocator.deallocate_object(a);
    allocator.deallocate_object(b);
    allocator.deallocate_object(c);
  }
  PoolAllocator<> empty(64, 0);
  EXPECT_EQ(empty.allocate_object(), nullptr);
}

TEST(CompatPoolAllocator, StatisticsWhenTracked) {
  pool_allocator::PoolAllocator<true> allocator(32, 10);
  std::vector<void*> blocks;
  for (int i = 0; i < 7; ++i)
    blocks.push_back(allocator.allocate_object());
  for (int i = 0; i < 4; ++i) {
    allocator.deallocate_object(blocks.back());
    blocks.pop_back();
  }
  blocks.push_back(allocator.allocate_object());
  const auto stats = allocator.get_allocator_stats();
  EXPECT_EQ(stats.total_blocks, 10u);
  EXPECT_EQ(stats.allocated_blocks, 4u);
  EXPECT_EQ(stats.peak_usage, 7u);
  EXPECT_EQ(stats.fragmentation_metric, 0);
  for (void* p : blocks)
    allocator.deallocate_object(p);
  EXPECT_EQ(PoolAllocator<false>(32, 10).get_allocator_stats().peak_usage, 0u);
}

// Threads allocate, write, check and free, some freeing each other's blocks; never more than
// pool_size out at once, no block shared, and every block back at the end.
TEST(CompatPoolAllocator, ThreadSafeWithACapacity) {
  constexpr std::size_t kCapacity = 64;
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  PoolAllocator<true> allocator(48, kCapacity);
  std::atomic<int> held{0};
  std::atomic<int> over{0};
  std::atomic<int> corrupt{0};
  std::atomic<void*> handoff[kThreads] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const unsigned char mark = static_cast<unsigned char>(t + 1);
      std::vector<void*> mine;
      for (int i = 0; i < kRounds; ++i) {
        if (mine.size() < 24) {
          void* p = allocator.allocate_object();
          if (p == nullptr) continue;
          if (held.fetch_add(1) + 1 > static_cast<int>(kCapacity)) over.fetch_add(1);
          std::memset(p, mark, 48);
          mine.push_back(p);
        } else {
          for (void* p : mine) {
            const auto* bytes = static_cast<unsigned char*>(p);
            if (bytes[0] != mark || bytes[47] != mark) corrupt.fetch_add(1);
          }
          // One block goes to the next thread to free; the rest are freed here.
          std::memset(mine.back(), 0, 48);
          void* given = handoff[(t + 1) % kThreads].exchange(mine.back());
          if (given != nullptr) {
            held.fetch_sub(1);
            allocator.deallocate_object(given);
          }
          mine.pop_back();
          for (void* p : mine) {
            held.fetch_sub(1);
            allocator.deallocate_object(p);
          }
          mine.clear();
          if (void* p = handoff[t].exchange(nullptr); p != nullptr) {
            held.fetch_sub(1);
            allocator.deallocate_object(p);
          }
        }
      }
      for (void* p : mine) {
        held.fetch_sub(1);
        allocator.deallocate_object(p);
      }
    });
  }
  for (auto& th : threads)
    th.join();
  for (auto& h : handoff) {
    if (void* p = h.exchange(nullptr); p != nullptr) {
      held.fetch_sub(1);
      allocator.deallocate_object(p);
    }
  }
  EXPECT_EQ(over.load(), 0) << "more than pool_size blocks out at once";
  EXPECT_EQ(corrupt.load(), 0) << "a block was shared";
  EXPECT_EQ(held.load(), 0);
  const auto stats = allocator.get_allocator_stats();
  EXPECT_EQ(stats.allocated_blocks, 0u);
  EXPECT_LE(stats.peak_usage, kCapacity);
  EXPECT_GE(stats.peak_usage, 24u);
  std::vector<void*> all;
  for (std::size_t i = 0; i < kCapacity; ++i) {
    all.push_back(allocator.allocate_object());
    ASSERT_NE(all.back(), nullptr) << "capacity lost: block " << i;
  }
  EXPECT_EQ(allocator.allocate_object(), nullptr);
  for (void* p : all)
    allocator.deallocate_object(p);
}

TEST(CompatPoolAllocator, CoexistsWithMempoolPoolAllocator) {
  mempool::SizeClassPool pool;
  std::vector<int, mempool::PoolAllocator<int>> v{mempool::PoolAllocator<int>(pool)};
  v.push_back(1);
  ::PoolAllocator<> objects(sizeof(int), 1);
  void* p = objects.allocate_object();
  EXPECT_NE(p, nullptr);
  objects.deallocate_object(p);
  EXPECT_EQ(v.front(), 1);
}

TEST(CompatPoolAllocatorDeathTest, DoubleFreeStopsTheCheckedBuild) {
  if (!mempool::detail::kChecked) GTEST_SKIP() << "detected in checked builds only";
  PoolAllocator<> allocator(64, 4);
  void* p = allocator.allocate_object();
  allocator.deallocate_object(p);
  EXPECT_DEATH(allocator.deallocate_object(p), "double free");
}

}  // namespace
