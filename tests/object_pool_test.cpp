#include "mempool/object_pool.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "mempool/detail/os.hpp"
#include "support/test_support.hpp"

namespace mempool {
namespace {

struct Order {
  Order(int i, std::string s) : id(i), symbol(std::move(s)) {}
  int id;
  std::string symbol;
  double price = 0;
};

using mempool_test::is_aligned;

TEST(ObjectPool, CreateConstructsAndDestroyRecycles) {
  ObjectPool<Order> pool;
  Order* o = pool.create(42, "AAPL");
  EXPECT_EQ(o->id, 42);
  EXPECT_EQ(o->symbol, "AAPL");
  EXPECT_TRUE(pool.owns(o));
  pool.destroy(o);
  Order* again = pool.create(7, "MSFT");
  EXPECT_EQ(again, o) << "the freed block is reused first";
  pool.destroy(again);
  pool.destroy(nullptr);
}

TEST(ObjectPool, BlocksAreDistinctAlignedAndHoldTheirData) {
  ObjectPool<Order> pool;
  std::vector<Order*> all;
  for (int i = 0; i < 5000; ++i) {
    all.push_back(pool.create(i, std::to_string(i)));
    ASSERT_TRUE(is_aligned(all.back(), 16));
  }
  std::set<Order*> unique(all.begin(), all.end());
  EXPECT_EQ(unique.size(), all.size());
  for (int i = 0; i < 5000; ++i) {
    EXPECT_EQ(all[i]->id, i);
    EXPECT_EQ(all[i]->symbol, std::to_string(i));
  }
  for (Order* o : all)
    pool.destroy(o);
}

TEST(ObjectPool, RawAllocateDeallocate) {
  ObjectPool<std::uint64_t> pool;
  void* raw = pool.allocate();
  std::memset(raw, 0xab, sizeof(std::uint64_t));
  pool.deallocate(raw);
  EXPECT_EQ(pool.allocate(), raw);
  pool.deallocate(nullptr);
}

struct alignas(64) Wide {
  char bytes[64];
};
struct alignas(256) Wider {
  char c;
};

TEST(ObjectPool, HonoursOverAlignedTypes) {
  ObjectPool<Wide> wide;
  ObjectPool<Wider> wider;
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(is_aligned(wide.allocate(), 64));
    EXPECT_TRUE(is_aligned(wider.allocate(), 256));
  }
  EXPECT_EQ(wider.block_size(), 256u);
}

TEST(ObjectPool, SmallTypesGetPointerSizedBlocks) {
  ObjectPool<char> pool;
  EXPECT_EQ(pool.block_size(), sizeof(void*));
  char* a = pool.create('a');
  char* b = pool.create('b');
  EXPECT_EQ(*a, 'a');
  EXPECT_EQ(*b, 'b');
}

struct Throws {
  explicit Throws(bool t) {
    if (t) throw std::runtime_error("ctor");
  }
};

TEST(ObjectPool, ThrowingConstructorReturnsTheBlock) {
  ObjectPool<Throws, WithStats> pool;
  EXPECT_THROW((void)pool.create(true), std::runtime_error);
  EXPECT_EQ(pool.stats().live, 0u);
  Throws* ok = pool.create(false);
  EXPECT_EQ(pool.stats().live, 1u);
  pool.destroy(ok);
}

struct Counted {
  static inline int alive = 0;
  Counted() { ++alive; }
  ~Counted() { --alive; }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;
};

TEST(ObjectPool, DestroysObjectsStillAliveAtTeardown) {
  {
    ObjectPool<Counted> pool;
    std::vector<Counted*> v;
    for (int i = 0; i < 300; ++i)
      v.push_back(pool.create());
    for (int i = 0; i < 300; i += 2)
      pool.destroy(v[i]);
    EXPECT_EQ(Counted::alive, 150);
  }
  EXPECT_EQ(Counted::alive, 0);
}

TEST(ObjectPool, StatsCountEverything) {
  ObjectPool<Order, WithStats> pool;
  std::vector<Order*> v;
  for (int i = 0; i < 1000; ++i)
    v.push_back(pool.create(i, "x"));
  for (int i = 0; i < 400; ++i)
    pool.destroy(v[i]);
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.allocations, 1000u);
  EXPECT_EQ(s.frees, 400u);
  EXPECT_EQ(s.live, 600u);
  EXPECT_EQ(s.peak, 1000u);
  EXPECT_GE(s.chunks, 2u);
  EXPECT_GE(s.bytes_reserved, 1000u * pool.block_size());
  for (int i = 400; i < 1000; ++i)
    pool.destroy(v[i]);
}

// WithStats is opt-in at no cost: NoStats adds no byte (and, per the callgrind
// numbers in bench/, no instruction).
TEST(ObjectPool, NoStatsAddsNoSize) {
  static_assert(std::is_empty_v<NoStats>);
  EXPECT_EQ(sizeof(FixedPool),
            sizeof(detail::FreeList) + sizeof(detail::ChunkArena) + sizeof(const char*));
  EXPECT_GT(sizeof(BasicFixedPool<WithStats>), sizeof(FixedPool));
}

TEST(ObjectPool, MoveTransfersTheBlocks) {
  ObjectPool<Order> a;
  Order* o = a.create(1, "one");
  ObjectPool<Order> b(std::move(a));
  EXPECT_TRUE(b.owns(o));
  EXPECT_EQ(o->symbol, "one");
  ObjectPool<Order> c;
  c = std::move(b);
  EXPECT_TRUE(c.owns(o));
  c.destroy(o);
}

TEST(ObjectPool, OutOfMemoryThrowsAndKeepsLiveBlocks) {
  ObjectPool<Order, WithStats> pool;
  std::vector<Order*> live;
  mempool::testing::fail_os_maps_after(3);
  try {
    for (;;)
      live.push_back(pool.create(static_cast<int>(live.size()), "live"));
  } catch (const std::bad_alloc&) {
  }
  mempool::testing::fail_os_maps_after(-1);
  ASSERT_FALSE(live.empty());
  EXPECT_EQ(pool.stats().chunks, 3u);
  for (std::size_t i = 0; i < live.size(); ++i) {
    ASSERT_EQ(live[i]->id, static_cast<int>(i));
    ASSERT_EQ(live[i]->symbol, "live");
  }
  for (Order* o : live)
    pool.destroy(o);
}

TEST(FixedPool, RuntimeSizeAndAlignment) {
  FixedPool fixed(48, 16);
  EXPECT_EQ(fixed.block_size(), 48u);
  EXPECT_EQ(fixed.alignment(), 16u);
  std::vector<void*> v;
  for (int i = 0; i < 1000; ++i) {
    void* p = fixed.allocate();
    ASSERT_TRUE(is_aligned(p, 16));
    std::memset(p, i & 0xff, 48);
    v.push_back(p);
  }
  for (int i = 0; i < 1000; ++i) {
    const auto* bytes = static_cast<const unsigned char*>(v[i]);
    for (int k = 0; k < 48; ++k)
      ASSERT_EQ(bytes[k], i & 0xff);
  }
  for (void* p : v)
    fixed.deallocate(p);
}

TEST(FixedPool, PageAlignedBlocks) {
  FixedPool fixed(100, 4096);
  for (int i = 0; i < 10; ++i)
    EXPECT_TRUE(is_aligned(fixed.allocate(), 4096));
}

TEST(FixedPool, TryAllocateReturnsNullWhenTheOsRefuses) {
  FixedPool fixed(64);
  mempool::testing::fail_os_maps_after(0);
  EXPECT_EQ(fixed.try_allocate(), nullptr);
  EXPECT_THROW((void)fixed.allocate(), std::bad_alloc);
  mempool::testing::fail_os_maps_after(-1);
  EXPECT_NE(fixed.try_allocate(), nullptr);
}

TEST(FixedPool, BadArguments) {
  EXPECT_THROW(FixedPool(0), std::invalid_argument);
  EXPECT_THROW(FixedPool(64, 3), std::invalid_argument);
  EXPECT_THROW(FixedPool(64, 8192), std::invalid_argument);
  EXPECT_THROW(FixedPool(SIZE_MAX), std::length_error);
  // The message names the pool and the bad value.
  EXPECT_THROW(
      {
        try {
          FixedPool bad(64, 48);
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("mempool::FixedPool: alignment 48"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      std::invalid_argument);
}

TEST(FixedPool, DestructionUnmapsEverything) {
  const long maps_before = mempool::testing::os_map_count();
  const std::size_t bytes_before = mempool::testing::os_bytes_mapped();
  {
    FixedPool fixed(64);
    for (int i = 0; i < 100000; ++i)
      (void)fixed.allocate();
    EXPECT_GT(mempool::testing::os_map_count(), maps_before);
    EXPECT_EQ(mempool::testing::os_bytes_mapped() - bytes_before, fixed.bytes_reserved());
    EXPECT_GE(fixed.bytes_reserved(), 6400000u);
  }
  EXPECT_EQ(mempool::testing::os_bytes_mapped(), bytes_before);
}

}  // namespace
}  // namespace mempool
