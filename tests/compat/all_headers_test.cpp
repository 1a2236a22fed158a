// The five compatibility headers together with every public mempool header, and with
// `using namespace mempool;` in force: no name clashes, and each compat name still means the
// project's API.
#include <gtest/gtest.h>

#include <map>
#include <type_traits>
#include <vector>

#include "mempool/allocator.hpp"
#include "mempool/bitmap_pool.hpp"
#include "mempool/compat/concurrent_alloc.hpp"
#include "mempool/compat/fixed_allocator.hpp"
#include "mempool/compat/memory_bucket.hpp"
#include "mempool/compat/memory_pool.hpp"
#include "mempool/compat/pool_allocator.hpp"
#include "mempool/concurrent_fixed_pool.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "mempool/object_pool.hpp"
#include "mempool/size_class_pool.hpp"
#include "mempool/stats.hpp"

using namespace mempool;  // NOLINT(google-build-using-namespace): the point of this test

namespace {

// Three different templates named PoolAllocator.
static_assert(!std::is_same_v<::PoolAllocator<>, mempool::PoolAllocator<int>>);
static_assert(std::is_same_v<cmp::PoolAllocator<int>, mempool::Allocator<int>>);

TEST(CompatAllHeaders, EveryNameResolves) {
  ::PoolAllocator<> objects(16, 2);
  void* o = objects.allocate_object();
  EXPECT_NE(o, nullptr);
  objects.deallocate_object(o);

  SizeClassPool pool;
  std::vector<int, mempool::PoolAllocator<int>> pooled{mempool::PoolAllocator<int>(pool)};
  std::vector<int, cmp::PoolAllocator<int>> heaped;
  pooled.push_back(1);
  heaped.push_back(2);
  EXPECT_EQ(pooled[0] + heaped[0], 3);

  void* m = MemoryPool::allocate(100);  // mempool::MemoryPool via the using-directive
  MemoryPool::deallocate(m);
  void* b = MemoryBucket::allocate(100);
  MemoryBucket::deallocate(b, 100);
  void* c = ConcurrentAlloc(100);
  ConcurrentFree(c, 100);
  FixedAllocator fixed;
  EXPECT_TRUE(fixed.my_free(fixed.my_malloc()));
  void* d = mp_malloc(10);
  mp_free(d);
}

}  // namespace
