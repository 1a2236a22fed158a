// Code written for another pool project keeps its calls: only the include changes.
#include <mempool/compat/concurrent_alloc.hpp>  // was "ConcurrentAlloc.hpp"
#include <mempool/compat/fixed_allocator.hpp>   // was "fixAlloc.h"
#include <mempool/compat/memory_bucket.hpp>     // was MemoryBucket's header
#include <mempool/compat/memory_pool.hpp>       // was "MemoryPool.h"
#include <mempool/compat/pool_allocator.hpp>    // was "custAlloc.hpp"

#include <cstdio>

int main() {
  MemoryBucket::initMemoryPool();  // a no-op now: the pools are ready on first use
  void* a = MemoryBucket::allocate(40);
  MemoryBucket::deallocate(a, 40);

  FixedAllocator fixed;  // 64 blocks of 64 bytes
  MemRange r = fixed.my_malloc();
  const bool fixed_ok = r.lo != nullptr && fixed.my_free(r) && !fixed.my_free(r);  // double free

  void* b = mempool::MemoryPool::allocate(64);
  mempool::MemoryPool::deallocate(b);

  void* c = ConcurrentAlloc(100);
  ConcurrentFree(c, 100);
  int* n = cmp::New<int>(5);
  const bool cmp_ok = *n == 5;
  cmp::Delete(n);

  PoolAllocator<true> objects(/*object_size=*/48, /*pool_size=*/2);
  void* o1 = objects.allocate_object();
  void* o2 = objects.allocate_object();
  const bool limit_ok = objects.allocate_object() == nullptr;  // pool_size reached
  objects.deallocate_object(o1);
  objects.deallocate_object(o2);
  const bool stats_ok = objects.get_allocator_stats().peak_usage == 2;

  const bool ok = a != nullptr && b != nullptr && fixed_ok && cmp_ok && limit_ok && stats_ok;
  std::printf("compat %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
