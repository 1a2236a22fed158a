// Misuse that stops the process with one line: always for BitmapPool, and in
// checked builds (MEMPOOL_CHECKED, the `checked` preset) for the other pools.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "mempool/bitmap_pool.hpp"
#include "mempool/concurrent_fixed_pool.hpp"
#include "mempool/object_pool.hpp"
#include "mempool/size_class_pool.hpp"

namespace mempool {
namespace {

constexpr std::uintptr_t kFar = std::uintptr_t{1} << 38;

char* far_from(void* p) {
  return static_cast<char*>(p) + kFar;
}

TEST(MisuseDeathTest, BitmapPoolDoubleFree) {
  BitmapPool rt(64, 16);
  void* p = rt.allocate();
  rt.deallocate(p);
  EXPECT_DEATH(rt.deallocate(p), "^mempool: BitmapPool: double free \\(pointer 0x[0-9a-f]+\\)\n$");
}

TEST(MisuseDeathTest, BitmapPoolForeignPointers) {
  BitmapPool rt(64, 16);
  char* p = static_cast<char*>(rt.allocate());
  int local = 0;
  EXPECT_DEATH(rt.deallocate(&local), "BitmapPool: free of a pointer not from this pool");
  EXPECT_DEATH(rt.deallocate(p + 1), "BitmapPool: free of a pointer not from this pool");
  EXPECT_DEATH(rt.deallocate(far_from(p)), "BitmapPool: free of a pointer not from this pool");
}

TEST(MisuseDeathTest, BitmapPoolForeignBlockOfAnotherPool) {
  BitmapPool a(64, 16);
  BitmapPool b(64, 16);
  void* p = a.allocate();
  EXPECT_DEATH(b.deallocate(p), "BitmapPool: free of a pointer not from this pool");
}

TEST(MisuseDeathTest, ObjectPoolDoubleFree) {
  if (!detail::kChecked) GTEST_SKIP() << "detected in checked builds only";
  ObjectPool<int> pool;
  int* p = pool.create(1);
  pool.destroy(p);
  EXPECT_DEATH(pool.deallocate(p),
               "^mempool: ObjectPool: double free \\(pointer 0x[0-9a-f]+\\)\n$");
}

TEST(MisuseDeathTest, ObjectPoolForeignPointers) {
  if (!detail::kChecked) GTEST_SKIP() << "detected in checked builds only";
  ObjectPool<std::uint64_t> pool;
  void* p = pool.allocate();
  alignas(16) char local[64] = {};
  EXPECT_DEATH(pool.deallocate(local), "ObjectPool: free of a pointer not from this pool");
  EXPECT_DEATH(pool.deallocate(far_from(p)), "ObjectPool: free of a pointer not from this pool");
  EXPECT_DEATH(pool.deallocate(static_cast<char*>(p) + 4),
               "ObjectPool: free of a pointer not from this pool");
}

TEST(MisuseDeathTest, FixedPoolDoubleAndForeignFree) {
  if (!detail::kChecked) GTEST_SKIP() << "detected in checked builds only";
  FixedPool pool(48);
  FixedPool other(48);
  void* p = pool.allocate();
  EXPECT_DEATH(other.deallocate(p), "FixedPool: free of a pointer not from this pool");
  pool.deallocate(p);
  EXPECT_DEATH(pool.deallocate(p), "FixedPool: double free");
}

TEST(MisuseDeathTest, ConcurrentFixedPoolDoubleAndForeignFree) {
  if (!detail::kChecked) GTEST_SKIP() << "detected in checked builds only";
  ConcurrentFixedPool pool(64);
  void* p = pool.allocate();
  alignas(16) char local[64] = {};
  EXPECT_DEATH(pool.deallocate(local), "ConcurrentFixedPool: free of a pointer not from this pool");
  EXPECT_DEATH(pool.deallocate(far_from(p)),
               "ConcurrentFixedPool: free of a pointer not from this pool");
  pool.deallocate(p);
  EXPECT_DEATH(pool.deallocate(p), "ConcurrentFixedPool: double free");
}

TEST(MisuseDeathTest, SizeClassPoolWrongSizeDoubleAndForeignFree) {
  if (!detail::kChecked) GTEST_SKIP() << "detected in checked builds only";
  SizeClassPool pool;
  void* p = pool.allocate(40);
  EXPECT_DEATH(pool.deallocate(p, 24),
               "^mempool: SizeClassPool: free with size 24 of a block of the 40-byte class "
               "\\(pointer 0x[0-9a-f]+\\)\n$");
  EXPECT_DEATH(pool.deallocate(p, 4096), "SizeClassPool: free with size 4096 of a block of the 40");
  alignas(16) char local[64] = {};
  EXPECT_DEATH(pool.deallocate(local, 40), "SizeClassPool: free of a pointer not from this pool");
  EXPECT_DEATH(pool.deallocate(far_from(p), 40),
               "SizeClassPool: free of a pointer not from this pool");
  pool.deallocate(p, 33);  // the same class: a correct size
  EXPECT_DEATH(pool.deallocate(p, 40), "double free");
}

TEST(MisuseDeathTest, CheckedPoolsAcceptCorrectUse) {
  // The checks must not fire on valid frees, including after reuse.
  ObjectPool<int> pool;
  for (int round = 0; round < 3; ++round) {
    int* a = pool.create(1);
    int* b = pool.create(2);
    pool.destroy(a);
    pool.destroy(b);
  }
  ConcurrentFixedPool shared(64);
  for (int i = 0; i < 1000; ++i)
    shared.deallocate(shared.allocate());
  SUCCEED();
}

// Hardened builds (MEMPOOL_HARDENED=1): the pools' links are encoded, so a
// write into a freed block is caught by the allocation that would follow it.
TEST(MisuseDeathTest, PoolsCatchAWriteAfterFreeWhenHardened) {
  if (!detail::kHardened) GTEST_SKIP() << "pools check their links in hardened builds only";
  const char* corrupted = "free list corrupted \\(write after free\\?\\)";
  FixedPool fixed(64);
  void* p = fixed.allocate();
  fixed.deallocate(p);
  std::memset(p, 0, 64);
  EXPECT_DEATH((void)fixed.allocate(), std::string("^mempool: FixedPool: ") + corrupted);
  ConcurrentFixedPool concurrent(64);
  void* q = concurrent.allocate();
  concurrent.deallocate(q);
  std::memset(q, 0x41, 64);
  EXPECT_DEATH((void)concurrent.allocate(),
               std::string("^mempool: ConcurrentFixedPool: ") + corrupted);
  SizeClassPool classes;
  void* r = classes.allocate(100);
  classes.deallocate(r, 100);
  std::memcpy(r, &q, sizeof q);  // a valid pointer, written raw
  EXPECT_DEATH((void)classes.allocate(100), corrupted);
}

}  // namespace
}  // namespace mempool
