// mempool/compat/concurrent_alloc.hpp: High-Concurrency-Memory-Pool's README integration
// example, unchanged apart from its include line, and the API's behaviour through mempool.
#include "mempool/compat/concurrent_alloc.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "mempool/heap.hpp"
#include "support/test_support.hpp"

// ---- The README's "Example usage in your code", verbatim but for the include line. ----
// clang-format off
#include <vector>

struct Order {
    int id;
    explicit Order(int oid) : id(oid) {}
};

void UsePool()
{
    // RAII object
    auto order = cmp::MakeUnique<Order>(42);

    // STL container allocator adapter
    std::vector<int, cmp::PoolAllocator<int>> values;
    values.push_back(order->id);
}
// clang-format on
// ---- End of the README example. ----

namespace {

TEST(CompatConcurrentAlloc, ReadmeExample) {
  UsePool();
}

TEST(CompatConcurrentAlloc, AllocAndFreeSizedAndSizeFree) {
  for (std::size_t n : {1, 8, 24, 64, 1000, 40000, 300000}) {
    auto* p = static_cast<unsigned char*>(ConcurrentAlloc(n));
    ASSERT_NE(p, nullptr) << n;
    EXPECT_TRUE(mempool::owns(p)) << n;
    EXPECT_GE(mempool::usable_size(p), n);
    if (n >= 16) {
      EXPECT_TRUE(mempool_test::is_aligned(p, 16)) << n;
    }
    std::memset(p, 0x11, n);
    ConcurrentFree(p, n);
    void* q = ConcurrentAlloc(n);
    ConcurrentFree(q);
  }
}

// 4000 blocks of 48 bytes freed by a thread that did not allocate them: the heap
// counts them in use until then, and not after (the freeing thread's cache went back
// to the central cache when it exited).
TEST(CompatConcurrentAlloc, FreedByAnotherThread) {
  // HeapStats::classes lists the classes from class 1 (class 0 is no size).
  const std::size_t c = mempool::detail::heap_class_of(48) - 1;
  const auto in_use = [c] { return mempool::stats().classes[c].blocks_in_use; };
  ASSERT_GE(mempool::stats().classes[c].block_size, 48u);
  const std::size_t before = in_use();
  std::vector<void*> blocks;
  for (int i = 0; i < 4000; ++i)
    blocks.push_back(ConcurrentAlloc(48));
  EXPECT_EQ(in_use(), before + 4000);
  std::thread([&blocks] {
    for (void* p : blocks)
      ConcurrentFree(p, 48);
  }).join();
  EXPECT_EQ(in_use(), before);
}

struct Tracked {
  static inline int alive = 0;
  std::string name;
  int value;
  Tracked(std::string n, int v) : name(std::move(n)), value(v) { ++alive; }
  ~Tracked() { --alive; }
};

TEST(CompatConcurrentAlloc, NewAndDelete) {
  Tracked* t = cmp::New<Tracked>("order", 7);
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(mempool::owns(t));
  EXPECT_EQ(t->name, "order");
  EXPECT_EQ(t->value, 7);
  EXPECT_EQ(Tracked::alive, 1);
  cmp::Delete(t);
  EXPECT_EQ(Tracked::alive, 0);
  cmp::Delete(static_cast<Tracked*>(nullptr));
}

TEST(CompatConcurrentAlloc, MakeUniqueDestroysAndFrees) {
  const std::size_t in_use = mempool::stats().bytes_in_use;
  {
    auto p = cmp::MakeUnique<Tracked>("x", 1);
    static_assert(std::is_same_v<decltype(p)::element_type, Tracked>);
    EXPECT_TRUE(mempool::owns(p.get()));
    EXPECT_EQ(Tracked::alive, 1);
    EXPECT_GT(mempool::stats().bytes_in_use, in_use);
  }
  EXPECT_EQ(Tracked::alive, 0);
  EXPECT_EQ(mempool::stats().bytes_in_use, in_use) << "the block went back";
}

TEST(CompatConcurrentAlloc, PoolAllocatorInAVector) {
  std::vector<int, cmp::PoolAllocator<int>> v;
  for (int i = 0; i < 100000; ++i)
    v.push_back(i);
  EXPECT_TRUE(mempool::owns(v.data()));
  for (int i = 0; i < 100000; ++i)
    ASSERT_EQ(v[static_cast<std::size_t>(i)], i);
  std::vector<int, cmp::PoolAllocator<int>> w = v;
  std::vector<int, cmp::PoolAllocator<int>> moved = std::move(w);
  EXPECT_EQ(moved, v);
  EXPECT_TRUE(cmp::PoolAllocator<int>() == cmp::PoolAllocator<double>());
}

TEST(CompatConcurrentAlloc, PoolAllocatorInAMap) {
  using Alloc = cmp::PoolAllocator<std::pair<const int, std::string>>;
  std::map<int, std::string, std::less<>, Alloc> m;
  for (int i = 0; i < 5000; ++i)
    m.emplace(i, std::to_string(i));
  ASSERT_EQ(m.size(), 5000u);
  for (int i = 0; i < 5000; i += 97)
    EXPECT_EQ(m.at(i), std::to_string(i));
  for (int i = 0; i < 5000; i += 2)
    m.erase(i);
  EXPECT_EQ(m.size(), 2500u);
  EXPECT_TRUE(mempool::owns(&*m.begin()));
}

struct alignas(64) Wide {
  char bytes[64];
};

TEST(CompatConcurrentAlloc, OverAlignedTypesAreAligned) {
  std::vector<Wide, cmp::PoolAllocator<Wide>> v(10);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % 64, 0u);
  Wide* w = cmp::New<Wide>();
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(w) % 64, 0u);
  cmp::Delete(w);
  auto u = cmp::MakeUnique<Wide>();
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(u.get()) % 64, 0u);
}

}  // namespace
