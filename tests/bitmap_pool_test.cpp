#include "mempool/bitmap_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "mempool/detail/os.hpp"
#include "mempool/detail/thread_slot.hpp"
#include "support/test_support.hpp"

namespace mempool {
namespace {

TEST(BitmapPool, AllocatesExactlyCapacityBlocks) {
  BitmapPool rt(64, 4096);
  EXPECT_EQ(rt.capacity(), 4096u);
  EXPECT_EQ(rt.block_size(), 64u);
  std::set<void*> seen;
  for (int i = 0; i < 4096; ++i) {
    void* p = rt.allocate();
    ASSERT_NE(p, nullptr) << i;
    ASSERT_TRUE(mempool_test::is_aligned(p, 16));
    ASSERT_TRUE(seen.insert(p).second);
    ASSERT_TRUE(rt.owns(p));
  }
  EXPECT_EQ(rt.in_use(), 4096u);
  EXPECT_EQ(rt.allocate(), nullptr) << "full is nullptr, not a crash";
  for (void* p : seen)
    rt.deallocate(p);
  EXPECT_EQ(rt.in_use(), 0u);
}

TEST(BitmapPool, TakesAllItsMemoryAtConstruction) {
  const long maps = mempool::testing::os_map_count();
  BitmapPool rt(48, 1000);
  EXPECT_EQ(mempool::testing::os_map_count(), maps + 1);
  for (int i = 0; i < 1000; ++i)
    ASSERT_NE(rt.allocate(), nullptr);
  EXPECT_EQ(mempool::testing::os_map_count(), maps + 1) << "no allocation after construction";
}

TEST(BitmapPool, CapacityTwoToTheEighteen) {
  constexpr std::size_t kCap = std::size_t{1} << 18;
  BitmapPool rt(16, kCap);
  std::vector<void*> v;
  v.reserve(kCap);
  for (std::size_t i = 0; i < kCap; ++i) {
    void* p = rt.allocate();
    ASSERT_NE(p, nullptr);
    v.push_back(p);
  }
  EXPECT_EQ(rt.allocate(), nullptr);
  rt.deallocate(v[kCap / 2 + 7]);
  EXPECT_EQ(rt.allocate(), v[kCap / 2 + 7]) << "the one free block is found";
  for (void* p : v)
    rt.deallocate(p);
  EXPECT_EQ(rt.in_use(), 0u);
}

TEST(BitmapPool, OverCallerStorage) {
  alignas(64) static std::byte storage[64 * 1024];
  BitmapPool rt(64, 1024, std::span<std::byte>(storage));
  void* p = rt.allocate();
  EXPECT_GE(static_cast<std::byte*>(p), storage);
  EXPECT_LT(static_cast<std::byte*>(p), storage + sizeof storage);
  std::memset(p, 1, 64);
  rt.deallocate(p);
  EXPECT_EQ(BitmapPool::storage_bytes(64, 1024), sizeof storage);
}

TEST(BitmapPool, RejectsBadStorage) {
  alignas(64) static std::byte storage[4096 + 64];
  EXPECT_THROW(BitmapPool(64, 1024, std::span<std::byte>(storage, 4096)), std::invalid_argument);
  try {
    BitmapPool bad(64, 16, std::span<std::byte>(storage + 8, 1024));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("storage is not aligned"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BitmapPool(64, 1, std::span<std::byte>()), std::invalid_argument);
}

TEST(BitmapPool, BadArgumentsNameTheParameter) {
  try {
    BitmapPool bad(64, 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("capacity"), std::string::npos);
  }
  EXPECT_THROW(BitmapPool(0, 16), std::invalid_argument);
  EXPECT_THROW(BitmapPool(64, 16, 100), std::invalid_argument);
  EXPECT_THROW(BitmapPool(64, BitmapPool::kMaxCapacity + 1), std::length_error);
  EXPECT_THROW(BitmapPool(std::size_t{1} << 31, 16), std::length_error) << "block_size > 1 GiB";
  // The largest valid product (2^30 x 2^24) cannot overflow; the OS refuses it.
  EXPECT_THROW(BitmapPool(std::size_t{1} << 30, BitmapPool::kMaxCapacity), std::bad_alloc);
}

TEST(BitmapPool, TryDeallocateReportsMisuse) {
  BitmapPool rt(40, 100);
  char* p = static_cast<char*>(rt.allocate());
  EXPECT_FALSE(rt.try_deallocate(p + 8)) << "inside a block";
  EXPECT_FALSE(rt.try_deallocate(p + (std::uintptr_t{1} << 38))) << "far outside";
  EXPECT_FALSE(rt.try_deallocate(p - 48));
  int local = 0;
  EXPECT_FALSE(rt.try_deallocate(&local));
  EXPECT_FALSE(rt.try_deallocate(nullptr));
  EXPECT_TRUE(rt.try_deallocate(p));
  EXPECT_FALSE(rt.try_deallocate(p)) << "double free";
  EXPECT_EQ(rt.in_use(), 0u);
}

// Odd block sizes divide by a multiply-high, powers of two by a shift: both find
// every block and refuse every pointer inside one.
TEST(BitmapPool, EveryBlockSizeDividesExactly) {
  for (std::size_t size : {24u, 48u, 80u, 112u, 1000u, 4000u, 16u, 64u, 256u, 4096u}) {
    BitmapPool rt(size, 300);
    std::vector<char*> v;
    for (int i = 0; i < 300; ++i)
      v.push_back(static_cast<char*>(rt.allocate()));
    std::sort(v.begin(), v.end());
    for (std::size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(v[i], v[0] + i * rt.block_size()) << "size " << size;
      ASSERT_TRUE(rt.owns(v[i]));
      ASSERT_FALSE(rt.owns(v[i] + 8)) << "size " << size;
      ASSERT_FALSE(rt.owns(v[i] + rt.block_size() / 2 + 1)) << "size " << size;
      ASSERT_FALSE(rt.try_deallocate(v[i] + 8)) << "size " << size;
    }
    for (char* p : v)
      ASSERT_TRUE(rt.try_deallocate(p));
  }
}

// Threads claim in parts of their own: two consecutive threads start at least a
// quarter of the pool apart (the cursor is the thread number's low bits
// reversed), and a thread that moves to another cursor (after losing a race for
// a bit) claims from another part.
TEST(BitmapPool, ThreadsClaimInPartsOfTheirOwn) {
  constexpr std::size_t kPart = 64 * 64;  // 16 cursors, 64 words each
  std::vector<std::byte> storage(BitmapPool::storage_bytes(64, 16 * kPart));
  BitmapPool rt(64, 16 * kPart, std::span<std::byte>(storage));
  auto part = [&](void* p) {
    return static_cast<std::size_t>(static_cast<std::byte*>(p) - storage.data()) / 64 / kPart;
  };
  std::size_t first = 0, after_move = 0, next_thread = 0;
  std::thread([&] {
    void* a = rt.allocate();
    first = part(a);
    detail::move_to_another_cursor();
    void* b = rt.allocate();
    after_move = part(b);
    rt.deallocate(a);
    rt.deallocate(b);
  }).join();
  std::thread([&] {
    void* c = rt.allocate();
    next_thread = part(c);
    rt.deallocate(c);
  }).join();
  EXPECT_NE(after_move, first);
  const std::size_t apart = next_thread > first ? next_thread - first : first - next_thread;
  EXPECT_GE(apart, 4u) << "parts " << first << " and " << next_thread;
  EXPECT_EQ(rt.in_use(), 0u);
}

TEST(BitmapPool, MoveKeepsTheBlocks) {
  BitmapPool a(64, 8);
  void* p = a.allocate();
  BitmapPool b(std::move(a));
  EXPECT_TRUE(b.owns(p));
  EXPECT_EQ(b.in_use(), 1u);
  BitmapPool c(32, 2);
  c = std::move(b);
  EXPECT_TRUE(c.try_deallocate(p));
}

TEST(BitmapPool, OutOfMemoryAtConstruction) {
  mempool::testing::fail_os_maps_after(0);
  EXPECT_THROW(BitmapPool(64, 16), std::bad_alloc);
  mempool::testing::fail_os_maps_after(-1);
}

}  // namespace
}  // namespace mempool
