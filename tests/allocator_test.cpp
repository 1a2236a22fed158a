#include "mempool/allocator.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory_resource>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "support/test_support.hpp"

namespace mempool {
namespace {

using mempool_test::is_aligned;

// A pool that counts what is live, to prove every path gives memory back.
class CountingPool {
 public:
  void* allocate(std::size_t n) {
    ++live_;
    return pool_.allocate(n);
  }
  void deallocate(void* p, std::size_t n) noexcept {
    --live_;
    pool_.deallocate(p, n);
  }
  static constexpr std::size_t alignment(std::size_t n) noexcept {
    return SizeClassPool::alignment(n);
  }
  [[nodiscard]] long live() const noexcept { return live_; }
  [[nodiscard]] bool owns(const void* p) const noexcept { return pool_.owns(p); }

 private:
  SizeClassPool pool_;
  long live_ = 0;
};

struct alignas(64) Wide {
  std::uint64_t v[8];
};

template <class T>
using Vec = std::vector<T, Allocator<T>>;

TEST(Allocator, VectorDequeListMapUnorderedMapString) {
  Vec<int> v;
  for (int i = 0; i < 1000; ++i)
    v.push_back(i);
  EXPECT_EQ(v[999], 999);
  EXPECT_TRUE(mempool::owns(v.data()));

  std::deque<int, Allocator<int>> d(500, 7);
  EXPECT_EQ(d.back(), 7);
  std::list<std::string, Allocator<std::string>> l{"a", "b", "c"};
  l.pop_front();
  EXPECT_EQ(l.front(), "b");
  std::map<int, int, std::less<>, Allocator<std::pair<const int, int>>> m;
  for (int i = 0; i < 300; ++i)
    m[i] = i * 2;
  m.erase(10);
  EXPECT_EQ(m.size(), 299u);
  std::unordered_map<int, int, std::hash<int>, std::equal_to<>,
                     Allocator<std::pair<const int, int>>>
      um;
  for (int i = 0; i < 300; ++i)
    um[i] = i;
  EXPECT_EQ(um.at(123), 123);
  std::basic_string<char, std::char_traits<char>, Allocator<char>> s(100, 'x');
  s += "tail";
  EXPECT_EQ(s.size(), 104u);
}

TEST(Allocator, CopyMoveSwap) {
  Vec<int> a{1, 2, 3};
  Vec<int> b(a);
  Vec<int> c(std::move(a));
  b.swap(c);
  EXPECT_EQ(b, c);
  EXPECT_TRUE(Allocator<int>() == Allocator<double>());
}

TEST(Allocator, OverAlignedElements) {
  Vec<Wide> v(10);
  for (int i = 0; i < 100; ++i) {
    v.emplace_back();
    ASSERT_TRUE(is_aligned(v.data(), 64));
  }
  std::list<Wide, Allocator<Wide>> l(5);
  for (const Wide& w : l)
    EXPECT_TRUE(is_aligned(&w, 64));
}

TEST(Allocator, OverflowingCountThrows) {
  Allocator<Wide> a;
  EXPECT_THROW((void)a.allocate(SIZE_MAX / 2), std::bad_array_new_length);
}

TEST(PoolAllocator, AllocatesFromItsPoolAndRebinds) {
  CountingPool pool;
  {
    std::map<int, std::string, std::less<>,
             PoolAllocator<std::pair<const int, std::string>, CountingPool>>
        m{PoolAllocator<std::pair<const int, std::string>, CountingPool>(pool)};
    for (int i = 0; i < 100; ++i)
      m.emplace(i, "v");
    EXPECT_GE(pool.live(), 100) << "the map's nodes (a rebound allocator) come from the pool";
  }
  EXPECT_EQ(pool.live(), 0);
}

TEST(PoolAllocator, PropagatesOnCopyMoveAndSwap) {
  CountingPool p1;
  CountingPool p2;
  using A = PoolAllocator<int, CountingPool>;
  {
    std::vector<int, A> a({1, 2, 3}, A(p1));
    std::vector<int, A> b({4, 5}, A(p2));
    b = a;  // copy assignment: b now allocates from p1
    EXPECT_EQ(&b.get_allocator().pool(), &p1);
    std::vector<int, A> c({9}, A(p2));
    c = std::move(a);  // move assignment takes a's pool and memory
    EXPECT_EQ(&c.get_allocator().pool(), &p1);
    std::vector<int, A> d({7}, A(p2));
    c.swap(d);
    EXPECT_EQ(&c.get_allocator().pool(), &p2);
    EXPECT_EQ(&d.get_allocator().pool(), &p1);
    EXPECT_NE(A(p1), A(p2));
  }
  EXPECT_EQ(p1.live(), 0);
  EXPECT_EQ(p2.live(), 0);
}

struct Order {
  Order(int i, std::string s) : id(i), symbol(std::move(s)) {}
  int id;
  std::string symbol;
};

struct ThrowingCtor {
  explicit ThrowingCtor(int) { throw std::runtime_error("no"); }
};

TEST(UniquePtr, MakeUniqueAndAllocateUnique) {
  auto o = make_unique<Order>(42, "AAPL");
  EXPECT_EQ(o->id, 42);
  EXPECT_TRUE(mempool::owns(o.get()));
  CountingPool pool;
  {
    auto q = allocate_unique<Order>(pool, 7, "MSFT");
    EXPECT_EQ(q->symbol, "MSFT");
    EXPECT_EQ(pool.live(), 1);
  }
  EXPECT_EQ(pool.live(), 0);
  auto w = make_unique<Wide>();
  EXPECT_TRUE(is_aligned(w.get(), 64));
}

TEST(UniquePtr, ThrowingConstructorLeaksNothing) {
  CountingPool pool;
  EXPECT_THROW((void)allocate_unique<ThrowingCtor>(pool, 1), std::runtime_error);
  EXPECT_EQ(pool.live(), 0);
  EXPECT_THROW((void)make_unique<ThrowingCtor>(1), std::runtime_error);
}

TEST(SharedPtr, MakeShared) {
  auto s = make_shared<Order>(1, "X");
  auto t = s;
  EXPECT_EQ(t->symbol, "X");
  EXPECT_EQ(s.use_count(), 2);
}

TEST(PoolResource, PmrContainersAndAlignedRequests) {
  CountingPool pool;
  {
    PoolResource<CountingPool> res(pool);
    std::pmr::vector<int> v(&res);
    for (int i = 0; i < 100; ++i)
      v.push_back(i);
    std::pmr::map<int, std::pmr::string> m(&res);
    m.emplace(1, "one");
    EXPECT_GT(pool.live(), 0);
    void* p = res.allocate(40, 64);
    EXPECT_TRUE(is_aligned(p, 64)) << "over-aligned requests are never misaligned";
    EXPECT_FALSE(pool.owns(p));
    EXPECT_TRUE(mempool::owns(p)) << "what the pool cannot align comes from the general heap";
    res.deallocate(p, 40, 64);
    void* q = res.allocate(48, 16);
    EXPECT_TRUE(pool.owns(q));
    res.deallocate(q, 48, 16);
    EXPECT_TRUE(res.is_equal(res));
    PoolResource<CountingPool> other(pool);
    EXPECT_TRUE(res.is_equal(other)) << "same pool, same memory";
    EXPECT_FALSE(res.is_equal(*std::pmr::new_delete_resource()));
  }
  EXPECT_EQ(pool.live(), 0);
}

TEST(PoolResource, DefaultResource) {
  std::pmr::memory_resource* r = default_resource();
  EXPECT_EQ(r, default_resource());
  std::pmr::unordered_map<int, int> m(r);
  for (int i = 0; i < 1000; ++i)
    m[i] = i;
  EXPECT_EQ(m[500], 500);
  void* p = r->allocate(24, 8);
  EXPECT_TRUE(mempool::owns(p));
  r->deallocate(p, 24, 8);
}

}  // namespace
}  // namespace mempool
