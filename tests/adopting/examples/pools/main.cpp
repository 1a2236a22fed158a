// Per-type pools on a hot path: one pool per object type, or per size class, owned by the
// code that allocates.
#include <mempool/allocator.hpp>
#include <mempool/object_pool.hpp>
#include <mempool/size_class_pool.hpp>

#include <cstdio>
#include <functional>
#include <map>
#include <memory_resource>
#include <string>
#include <utility>
#include <vector>

struct Order {
  Order(long id, std::string symbol) : id(id), symbol(std::move(symbol)) {}
  long id;
  std::string symbol;
};

int main() {
  // One type, one thread: create/destroy is a free-list pop/push (1.7 ns a pair).
  mempool::ObjectPool<Order, mempool::WithStats> orders;  // WithStats: counters (NoStats: none)
  std::vector<Order*> book;
  for (long i = 0; i < 1000; ++i)
    book.push_back(orders.create(i, "AAPL"));
  for (Order* o : book)
    orders.destroy(o);
  const mempool::PoolStats os = orders.stats();
  const bool object_ok = os.allocations == 1000 && os.live == 0 && os.peak == 1000;

  // Any size up to 512 bytes, any thread, sized free: SizeClassPool; the adapters over it.
  mempool::SizeClassPool pool;
  auto order = mempool::allocate_unique<Order>(pool, 7, "MSFT");  // freed into `pool`
  using Entry = std::pair<const long, Order>;
  std::map<long, Order, std::less<>, mempool::PoolAllocator<Entry>> by_id{
      mempool::PoolAllocator<Entry>(pool)};
  by_id.emplace(1, Order(1, "IBM"));
  mempool::PoolResource resource(pool);  // a std::pmr::memory_resource
  std::pmr::vector<long> ids({1, 2, 3}, &resource);
  const bool pool_ok = pool.owns(order.get()) && by_id.at(1).symbol == "IBM" && ids.size() == 3 &&
                       pool.stats().live_bytes > 0;

  // The general heap's unique_ptr when a pool of your own is not worth it.
  auto heap_order = mempool::make_unique<Order>(8, "ORCL");

  std::printf("orders: %llu allocations, peak %llu; size classes: %llu bytes live\n",
              static_cast<unsigned long long>(os.allocations),
              static_cast<unsigned long long>(os.peak),
              static_cast<unsigned long long>(pool.stats().live_bytes));
  return object_ok && pool_ok && heap_order->id == 8 ? 0 : 1;
}
