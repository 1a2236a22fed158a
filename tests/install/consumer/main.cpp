// Uses each pool, the heap's inline thread-cache path and the C API through the
// installed headers and library (shared or static); exits non-zero on any wrong answer
// and says whether malloc is mempool's.
#include <mempool/mempool.h>
#include <mempool/bitmap_pool.hpp>
#include <mempool/concurrent_fixed_pool.hpp>
#include <mempool/heap.hpp>
#include <mempool/object_pool.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

struct Order {
  int id;
  std::string symbol;
};

// A constant size: allocate and the sized deallocate inline the thread-cache hit,
// which reads the library's thread_local from this program's code.
static bool heap_round_trip() {
  bool ok = true;
  for (int i = 0; i < 1000; ++i) {
    void* p = mempool::allocate(48);
    ok = ok && mempool::owns(p) && mempool::usable_size(p) >= 48;
    mempool::deallocate(p, 48);
  }
  return ok;
}

int main() {
  mempool::ObjectPool<Order> orders;
  Order* o = orders.create(42, "AAPL");
  const bool object_ok = o->id == 42 && o->symbol == "AAPL" && orders.owns(o);
  orders.destroy(o);

  mempool::ConcurrentFixedPool shared(64);
  void* s = shared.allocate();
  const bool shared_ok = shared.owns(s);
  shared.deallocate(s);

  mempool::BitmapPool rt(64, 16);
  void* r = rt.allocate();
  const bool bitmap_ok = rt.in_use() == 1 && rt.try_deallocate(r) && rt.in_use() == 0;

  bool thread_ok = false;
  std::thread t([&] { thread_ok = heap_round_trip(); });
  t.join();
  void* c = mp_malloc(100);
  const bool heap_ok = thread_ok && heap_round_trip() && mp_owns(c) == 1;
  mp_free(c);

  // Whether malloc is mempool's: 0 when linked with the library (only libmempool-malloc
  // replaces malloc), 1 under LD_PRELOAD of it; the test scripts check which.
  void* m = std::malloc(100);
  const int malloc_is_mempool = mp_owns(m);
  std::free(m);

  std::printf("object %d shared %d bitmap %d heap %d malloc-is-mempool %d\n", object_ok, shared_ok,
              bitmap_ok, heap_ok, malloc_is_mempool);
  return object_ok && shared_ok && bitmap_ok && heap_ok ? 0 : 1;
}
