// Uses each pool through the installed headers and library; exits non-zero on
// any wrong answer.
#include <mempool/bitmap_pool.hpp>
#include <mempool/concurrent_fixed_pool.hpp>
#include <mempool/object_pool.hpp>

#include <cstdio>
#include <string>

struct Order {
  int id;
  std::string symbol;
};

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

  std::printf("object %d shared %d bitmap %d\n", object_ok, shared_ok, bitmap_ok);
  return object_ok && shared_ok && bitmap_ok ? 0 : 1;
}
