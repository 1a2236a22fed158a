// mempool/compat/memory_pool.hpp: Memory-Pool's README API example, unchanged, and its
// behaviour through mempool's general heap.
#include "mempool/compat/memory_pool.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "mempool/heap.hpp"
#include "support/test_support.hpp"

namespace {

TEST(CompatMemoryPool, ReadmeApiUsage) {
  void* p = mempool::MemoryPool::allocate(64);  // Arbitrary size
  mempool::MemoryPool::deallocate(p);           // No need to pass size
}

TEST(CompatMemoryPool, EverySizeIsServedAndAligned) {
  // Memory-Pool's hole (32 KiB to 256 KiB answered nullptr) and its 8-byte alignment.
  std::vector<std::size_t> sizes = {0, 1, 7, 8, 16, 24, 48, 64, 100, 1000, 4096, 8192};
  for (std::size_t kib = 16; kib <= 512; kib += 16)
    sizes.push_back(kib * 1024);
  sizes.push_back(32 * 1024 + 1);
  sizes.push_back(256 * 1024 + 1);
  sizes.push_back(4 * 1024 * 1024);
  for (std::size_t n : sizes) {
    auto* p = static_cast<unsigned char*>(mempool::MemoryPool::allocate(n));
    ASSERT_NE(p, nullptr) << n;
    EXPECT_TRUE(mempool::owns(p)) << n;
    EXPECT_GE(mempool::usable_size(p), n);
    if (n >= 16) {
      EXPECT_TRUE(mempool_test::is_aligned(p, 16)) << n;
    }
    if (n > 0) {
      std::memset(p, 0xc3, n);
      EXPECT_EQ(p[n - 1], 0xc3);
    }
    mempool::MemoryPool::deallocate(p);
  }
}

TEST(CompatMemoryPool, BlocksAreDistinctAndKeepTheirContents) {
  std::vector<std::pair<unsigned char*, std::size_t>> blocks;
  std::set<unsigned char*> distinct;
  for (int i = 0; i < 3000; ++i) {
    const std::size_t n = 1 + static_cast<std::size_t>(i * 131) % 5000;
    auto* p = static_cast<unsigned char*>(mempool::MemoryPool::allocate(n));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(distinct.insert(p).second) << "block handed out twice";
    std::memset(p, i & 0xff, n);
    blocks.emplace_back(p, n);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto [p, n] = blocks[i];
    ASSERT_EQ(p[0], static_cast<unsigned char>(i & 0xff));
    ASSERT_EQ(p[n - 1], static_cast<unsigned char>(i & 0xff));
  }
  for (auto [p, n] : blocks)
    mempool::MemoryPool::deallocate(p);
}

TEST(CompatMemoryPool, NullptrIsIgnored) {
  mempool::MemoryPool::deallocate(nullptr);
}

TEST(CompatMemoryPool, BlocksFreedOnAnotherThread) {
  std::vector<void*> blocks;
  for (int i = 0; i < 5000; ++i)
    blocks.push_back(mempool::MemoryPool::allocate(64));
  std::thread([&blocks] {
    for (void* p : blocks)
      mempool::MemoryPool::deallocate(p);
  }).join();
  const mempool::HeapStats s = mempool::stats();
  EXPECT_GE(s.bytes_mapped, s.bytes_in_use);
}

// Memory-Pool lost a thread's cached blocks when the thread exited; mempool hands them to the
// central cache.
TEST(CompatMemoryPool, ThreadCacheGoesBackWhenItsThreadExits) {
  const mempool::HeapStats before = mempool::stats();
  std::size_t cached_in_thread = 0;
  std::thread([&cached_in_thread] {
    std::vector<void*> blocks;
    for (int i = 0; i < 1000; ++i)
      blocks.push_back(mempool::MemoryPool::allocate(64));
    for (void* p : blocks)
      mempool::MemoryPool::deallocate(p);
    cached_in_thread = mempool::stats().bytes_in_thread_caches;
  }).join();
  const mempool::HeapStats after = mempool::stats();
  EXPECT_GT(cached_in_thread, before.bytes_in_thread_caches);
  EXPECT_EQ(after.thread_caches, before.thread_caches);
  EXPECT_LE(after.bytes_in_thread_caches, before.bytes_in_thread_caches);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
}

TEST(CompatMemoryPoolDeathTest, FreeOfAPointerNotFromTheHeapStops) {
  alignas(16) static char local[64] = {};
  EXPECT_DEATH(mempool::MemoryPool::deallocate(local), "mempool");
}

}  // namespace
