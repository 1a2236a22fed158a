// mempool/compat/memory_bucket.hpp: MemoryBucket's README usage, unchanged, and its behaviour
// through mempool::SizeClassPool::global().
#include "mempool/compat/memory_bucket.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mempool/detail/platform.hpp"
#include "mempool/heap.hpp"
#include "mempool/size_class_pool.hpp"
#include "support/test_support.hpp"

namespace {

// MemoryBucket's README gives its usage as three steps in prose; these are its calls, in its
// order and spelling (deallcoate included, hence the pragma).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct Widget {
  std::string name;
  int value;
};

void readme_usage(std::size_t size) {
  // "Call MemoryBucket::initMemoryPool() once at startup to initialize all pools."
  MemoryBucket::initMemoryPool();
  // "Use MemoryBucket::allocate(size) and MemoryBucket::deallcoate(ptr, size) for raw memory
  // management."
  void* ptr = MemoryBucket::allocate(size);
  MemoryBucket::deallcoate(ptr, size);
  // "For object construction/destruction, use placement new and explicit destructor calls."
  void* raw = MemoryBucket::allocate(sizeof(Widget));
  Widget* w = new (raw) Widget{"bucket", 7};
  EXPECT_EQ(w->value, 7);
  w->~Widget();
  MemoryBucket::deallcoate(raw, sizeof(Widget));
}
#pragma GCC diagnostic pop

std::uint64_t live_blocks_of(std::size_t size) {
  // Class c holds blocks of 8 * (c + 1) bytes.
  const std::size_t c = (mempool::SizeClassPool::block_size(size) / 8) - 1;
  return mempool::SizeClassPool::global().stats().classes[c].live_blocks;
}

TEST(CompatMemoryBucket, ReadmeUsage) {
  for (std::size_t size : {1, 8, 40, 64, 512, 513, 1024, 100000})
    readme_usage(size);
}

TEST(CompatMemoryBucket, SmallBlocksComeFromTheGlobalSizeClassPool) {
  mempool::SizeClassPool& global = mempool::SizeClassPool::global();
  for (std::size_t size : {1, 8, 24, 40, 64, 200, 512}) {
    const std::uint64_t before = live_blocks_of(size);
    void* p = MemoryBucket::allocate(size);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(global.owns(p)) << size;
    EXPECT_EQ(live_blocks_of(size), before + 1) << size;
    MemoryBucket::deallocate(p, size);
    EXPECT_EQ(live_blocks_of(size), before) << size;
  }
}

TEST(CompatMemoryBucket, LargeBlocksComeFromTheGeneralHeap) {
  for (std::size_t size : {513, 4096, 300000}) {
    void* p = MemoryBucket::allocate(size);
    ASSERT_NE(p, nullptr);
    EXPECT_FALSE(mempool::SizeClassPool::global().owns(p)) << size;
    EXPECT_TRUE(mempool::owns(p)) << size;
    EXPECT_GE(mempool::usable_size(p), size);
    std::memset(p, 0x5a, size);
    MemoryBucket::deallocate(p, size);
  }
}

TEST(CompatMemoryBucket, DeprecatedAliasFrees) {
  const std::uint64_t before = live_blocks_of(48);
  void* p = MemoryBucket::allocate(48);
  EXPECT_EQ(live_blocks_of(48), before + 1);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  MemoryBucket::deallcoate(p, 48);
#pragma GCC diagnostic pop
  EXPECT_EQ(live_blocks_of(48), before);
}

TEST(CompatMemoryBucket, BlocksAreDistinctUsableAndAligned) {
  std::vector<std::pair<unsigned char*, std::size_t>> blocks;
  for (std::size_t size = 1; size <= 600; size += 7) {
    for (int i = 0; i < 8; ++i) {
      auto* p = static_cast<unsigned char*>(MemoryBucket::allocate(size));
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % mempool::SizeClassPool::alignment(size), 0u)
          << size;
      std::memset(p, static_cast<int>(blocks.size() & 0xff), size);
      blocks.emplace_back(p, size);
    }
  }
  // 16- and 32-byte blocks are 16-aligned, as malloc's.
  void* a = MemoryBucket::allocate(16);
  void* b = MemoryBucket::allocate(32);
  EXPECT_TRUE(mempool_test::is_aligned(a, 16));
  EXPECT_TRUE(mempool_test::is_aligned(b, 16));
  MemoryBucket::deallocate(a, 16);
  MemoryBucket::deallocate(b, 32);

  std::set<unsigned char*> distinct;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto [p, size] = blocks[i];
    EXPECT_TRUE(distinct.insert(p).second) << "block handed out twice";
    for (std::size_t j = 0; j < size; ++j) {
      ASSERT_EQ(p[j], static_cast<unsigned char>(i & 0xff)) << "block overlaps another";
    }
  }
  for (auto [p, size] : blocks)
    MemoryBucket::deallocate(p, size);
}

TEST(CompatMemoryBucket, AnyThreadAllocatesAndFrees) {
  constexpr int kThreads = 4;
  constexpr int kBlocks = 2000;
  std::vector<std::vector<void*>> made(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &made] {
      for (int i = 0; i < kBlocks; ++i) {
        const std::size_t size = 8 + static_cast<std::size_t>(i % 64) * 8;
        void* p = MemoryBucket::allocate(size);
        std::memset(p, t, size);
        made[t].push_back(p);
      }
    });
  }
  for (auto& th : threads)
    th.join();
  threads.clear();
  // Each thread frees the blocks another thread made.
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &made] {
      const int owner = (t + 1) % kThreads;
      for (int i = 0; i < kBlocks; ++i) {
        const std::size_t size = 8 + static_cast<std::size_t>(i % 64) * 8;
        auto* p = static_cast<unsigned char*>(made[owner][i]);
        EXPECT_EQ(p[0], owner);
        EXPECT_EQ(p[size - 1], owner);
        MemoryBucket::deallocate(p, size);
      }
    });
  }
  for (auto& th : threads)
    th.join();
}

TEST(CompatMemoryBucketDeathTest, DoubleFreeStopsTheCheckedBuild) {
  if (!mempool::detail::kChecked) GTEST_SKIP() << "detected in checked builds only";
  void* p = MemoryBucket::allocate(40);
  MemoryBucket::deallocate(p, 40);
  EXPECT_DEATH(MemoryBucket::deallocate(p, 40), "double free");
}

}  // namespace
