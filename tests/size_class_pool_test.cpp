#include "mempool/size_class_pool.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include "mempool/detail/os.hpp"
#include "support/test_support.hpp"

namespace mempool {
namespace {

using mempool_test::is_aligned;

TEST(SizeClassPool, ClassTable) {
  EXPECT_EQ(SizeClassPool::block_size(1), 8u);
  EXPECT_EQ(SizeClassPool::block_size(8), 8u);
  EXPECT_EQ(SizeClassPool::block_size(9), 16u);
  EXPECT_EQ(SizeClassPool::block_size(40), 40u);
  EXPECT_EQ(SizeClassPool::block_size(505), 512u);
  EXPECT_EQ(SizeClassPool::block_size(513), 513u) << "above 512: operator new";
  EXPECT_EQ(SizeClassPool::alignment(24), 8u);
  EXPECT_EQ(SizeClassPool::alignment(40), 8u);
  EXPECT_EQ(SizeClassPool::alignment(48), 16u);
  EXPECT_EQ(SizeClassPool::alignment(512), 16u);
  EXPECT_EQ(SizeClassPool::alignment(8), 8u);
}

// Every size from 1 to 512: the block is aligned as documented, distinct from
// every other live block, and holds all n bytes.
TEST(SizeClassPool, EverySizeAndItsAlignment) {
  SizeClassPool pool;
  std::vector<std::pair<unsigned char*, std::size_t>> live;
  for (std::size_t n = 1; n <= 512; ++n) {
    for (int k = 0; k < 3; ++k) {
      auto* p = static_cast<unsigned char*>(pool.allocate(n));
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(is_aligned(p, SizeClassPool::alignment(n))) << "n=" << n;
      ASSERT_TRUE(pool.owns(p));
      std::memset(p, static_cast<int>(n & 0xff), n);
      live.emplace_back(p, n);
    }
  }
  std::set<unsigned char*> unique;
  for (auto [p, n] : live) {
    ASSERT_TRUE(unique.insert(p).second);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(p[i], n & 0xff) << "n=" << n << " i=" << i;
  }
  for (auto [p, n] : live)
    pool.deallocate(p, n);
}

TEST(SizeClassPool, FreedBlocksAreReusedByTheirClass) {
  SizeClassPool pool;
  void* a = pool.allocate(33);
  pool.deallocate(a, 33);
  EXPECT_EQ(pool.allocate(40), a) << "33 and 40 share the 40-byte class";
  pool.deallocate(a, 40);
}

TEST(SizeClassPool, ZeroAndLargeGoToOperatorNew) {
  SizeClassPool pool;
  void* zero = pool.allocate(0);
  EXPECT_NE(zero, nullptr);
  EXPECT_FALSE(pool.owns(zero));
  void* large = pool.allocate(4096);
  EXPECT_FALSE(pool.owns(large));
  std::memset(large, 1, 4096);
  EXPECT_TRUE(is_aligned(large, 16));
  pool.deallocate(large, 4096);
  pool.deallocate(zero, 0);
  pool.deallocate(nullptr, 24);
  pool.deallocate(nullptr, 1000);
  EXPECT_EQ(pool.bytes_reserved(), 0u) << "nothing mapped for blocks";
}

TEST(SizeClassPool, OutOfMemory) {
  SizeClassPool pool;
  std::vector<void*> live;
  mempool::testing::fail_os_maps_after(2);
  while (void* p = pool.try_allocate(256)) {
    std::memset(p, 0x77, 256);
    live.push_back(p);
  }
  EXPECT_THROW((void)pool.allocate(256), std::bad_alloc);
  EXPECT_EQ(pool.try_allocate(128), nullptr) << "another class needs a chunk too";
  mempool::testing::fail_os_maps_after(-1);
  ASSERT_FALSE(live.empty());
  for (void* p : live)
    ASSERT_EQ(static_cast<unsigned char*>(p)[255], 0x77);
  for (void* p : live)
    pool.deallocate(p, 256);
}

TEST(SizeClassPool, DestructionUnmapsEverything) {
  const std::size_t before = mempool::testing::os_bytes_mapped();
  {
    SizeClassPool pool;
    for (std::size_t n = 1; n <= 512; n += 7)
      (void)pool.allocate(n);
    EXPECT_GT(pool.bytes_reserved(), 0u);
  }
  EXPECT_EQ(mempool::testing::os_bytes_mapped(), before);
}

TEST(SizeClassPool, GlobalIsOneInstanceForEveryThread) {
  SizeClassPool& g = SizeClassPool::global();
  SizeClassPool* seen = nullptr;
  void* from_thread = nullptr;
  std::thread t([&] {
    seen = &SizeClassPool::global();
    from_thread = seen->allocate(72);
  });
  t.join();
  EXPECT_EQ(seen, &g);
  EXPECT_TRUE(g.owns(from_thread));
  g.deallocate(from_thread, 72);  // freed by another thread than the one that allocated
}

TEST(SizeClassPool, StatsPerClass) {
  SizeClassPool pool;
  std::vector<void*> v;
  for (int i = 0; i < 100; ++i)
    v.push_back(pool.allocate(40));
  for (int i = 0; i < 10; ++i)
    v.push_back(pool.allocate(500));
  void* large = pool.allocate(2000);
  const SizeClassPool::Stats s = pool.stats();
  EXPECT_EQ(s.classes[4].block_size, 40u);
  EXPECT_EQ(s.classes[4].live_blocks, 100u);
  EXPECT_EQ(s.classes[62].block_size, 504u) << "500 rounds up to 504";
  EXPECT_EQ(s.classes[62].live_blocks, 10u);
  EXPECT_EQ(s.classes[0].live_blocks, 0u);
  EXPECT_EQ(s.live_bytes, 100u * 40 + 10u * 504) << "large blocks are not counted";
  EXPECT_EQ(s.bytes_reserved, pool.bytes_reserved());
  EXPECT_GT(s.classes[4].bytes_reserved, 0u);
  pool.deallocate(large, 2000);
  for (int i = 0; i < 100; ++i)
    pool.deallocate(v[i], 40);
  for (int i = 100; i < 110; ++i)
    pool.deallocate(v[i], 500);
  EXPECT_EQ(pool.stats().live_bytes, 0u);
}

TEST(SizeClassPool, ReleaseReturnsFreeMemory) {
  SizeClassPool pool;
  std::thread worker([&] {
    std::vector<std::pair<void*, std::size_t>> v;
    for (int i = 0; i < 20000; ++i) {
      const std::size_t n = 8 + 8 * static_cast<std::size_t>(i % 64);
      v.emplace_back(pool.allocate(n), n);
    }
    for (auto [p, n] : v)
      pool.deallocate(p, n);
  });
  worker.join();
  const std::size_t before = pool.bytes_reserved();
  const std::size_t released = pool.release();
  EXPECT_GT(released, 0u);
  EXPECT_EQ(pool.bytes_reserved(), before - released);
  void* p = pool.allocate(64);  // still works
  pool.deallocate(p, 64);
}

TEST(SizeClassPool, MoveKeepsBlocks) {
  SizeClassPool a;
  void* p = a.allocate(100);
  SizeClassPool b(std::move(a));
  EXPECT_TRUE(b.owns(p));
  b.deallocate(p, 100);
}

}  // namespace
}  // namespace mempool
