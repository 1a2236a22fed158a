// The memory checkers' hooks (memory_checker.hpp) under AddressSanitizer: every
// allocator's free blocks are poisoned, so a use after free stops the program with
// ASan's report, and a block handed out again is whole. Outside an ASan build
// (the asan preset runs these) there is nothing to observe: the tests skip.
#include "mempool/detail/memory_checker.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "mempool/bitmap_pool.hpp"
#include "mempool/concurrent_fixed_pool.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "mempool/object_pool.hpp"
#include "mempool/size_class_pool.hpp"

namespace mempool::detail {
namespace {

// Whether any byte of [p, p + n) is poisoned.
bool poisoned(const void* p, std::size_t n) {
#if MEMPOOL_ASAN_BUILD
  return __asan_region_is_poisoned(const_cast<void*>(p), n) != nullptr;
#else
  (void)p, (void)n;
  return false;
#endif
}

// A byte read so that the compiler keeps it.
char read_byte(const void* p, std::size_t offset) {
  return *(static_cast<const volatile char*>(p) + offset);
}

// One allocator: allocate a block of `bytes`, free it.
struct Allocator {
  const char* name;
  std::size_t bytes;
  std::function<void*()> allocate;
  std::function<void(void*)> free;
};

// One of each pool, and the heap's small and large blocks.
struct EveryAllocator {
  FixedPool fixed{48};
  ConcurrentFixedPool concurrent{64};
  BitmapPool bitmap{32, 16};
  SizeClassPool classes;

  std::vector<Allocator> list() {
    return {
        {"FixedPool", 48, [this] { return fixed.allocate(); },
         [this](void* p) { fixed.deallocate(p); }},
        {"ConcurrentFixedPool", 64, [this] { return concurrent.allocate(); },
         [this](void* p) { concurrent.deallocate(p); }},
        {"BitmapPool", 32, [this] { return bitmap.allocate(); },
         [this](void* p) { bitmap.deallocate(p); }},
        {"SizeClassPool", 200, [this] { return classes.allocate(200); },
         [this](void* p) { classes.deallocate(p, 200); }},
        {"heap (small)", 1000, [] { return mempool::allocate(1000); },
         [](void* p) { mempool::deallocate(p); }},
        {"heap (large)", 1 << 20, [] { return mp_malloc(1 << 20); }, [](void* p) { mp_free(p); }},
    };
  }
};

TEST(MemoryCheckerDeathTest, AddressSanitizerReportsAReadAfterFreeFromEveryAllocator) {
  if (!kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer builds only";
  EveryAllocator allocators;
  for (const Allocator& a : allocators.list()) {
    SCOPED_TRACE(a.name);
    void* p = a.allocate();
    ASSERT_NE(p, nullptr);
    a.free(p);
    // Past the link word, and at the block's last byte.
    EXPECT_DEATH(read_byte(p, 8), "AddressSanitizer: use-after-poison");
    EXPECT_DEATH(read_byte(p, a.bytes - 1), "AddressSanitizer: use-after-poison");
  }
}

TEST(MemoryCheckerDeathTest, ObjectPoolsDestroyedObjectIsPoisoned) {
  if (!kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer builds only";
  struct Order {
    long id;
    double price;
    char note[16];
  };
  ObjectPool<Order> orders;
  Order* o = orders.create(Order{7, 1.5, "x"});
  orders.destroy(o);
  EXPECT_DEATH(read_byte(o, offsetof(Order, price)), "AddressSanitizer: use-after-poison");
}

// A freed block is poisoned, and the same block handed out again is accessible
// over all its bytes, including the word that held the link: no false report.
TEST(MemoryChecker, FreedBlocksArePoisonedAndReusedBlocksAreWhole) {
  if (!kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer builds only";
  EveryAllocator allocators;
  for (const Allocator& a : allocators.list()) {
    SCOPED_TRACE(a.name);
    void* p = a.allocate();
    ASSERT_NE(p, nullptr);
    EXPECT_FALSE(poisoned(p, a.bytes));
    a.free(p);
    EXPECT_TRUE(poisoned(p, 1));
    EXPECT_TRUE(poisoned(static_cast<char*>(p) + 8, a.bytes - 8));
    void* q = a.allocate();
    EXPECT_FALSE(poisoned(q, a.bytes));
    std::memset(q, 0x5a, a.bytes);
    a.free(q);
  }
}

// A caller's buffer is the caller's again, unpoisoned, once its pool is gone.
TEST(MemoryChecker, BitmapPoolGivesBackItsCallersBufferClean) {
  if (!kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer builds only";
  const std::size_t bytes = BitmapPool::storage_bytes(64, 8);
  std::vector<std::byte> buffer(bytes + 64);
  auto* aligned = reinterpret_cast<std::byte*>(
      (reinterpret_cast<std::uintptr_t>(buffer.data()) + 63) & ~std::uintptr_t{63});
  {
    BitmapPool pool(64, 8, std::span<std::byte>(aligned, bytes));
    void* blocks[8];
    for (void*& b : blocks)
      b = pool.allocate();
    for (void* b : blocks)
      pool.deallocate(b);
    EXPECT_TRUE(poisoned(aligned, 64 * 8));
  }
  EXPECT_FALSE(poisoned(aligned, bytes));
  std::memset(aligned, 0, bytes);
}

}  // namespace
}  // namespace mempool::detail
