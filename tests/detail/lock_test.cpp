#include "mempool/detail/lock.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

namespace mempool::detail {
namespace {

TEST(Lock, TryLockFailsWhileHeld) {
  Lock lock;
  ASSERT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock());
  lock.unlock();
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

// More threads than cores, so holders are preempted and waiters must sleep and
// be woken: a lost wake-up hangs the test, a broken exclusion loses increments.
TEST(Lock, ExcludesUnderContention) {
  Lock lock;
  long counter = 0;  // plain: only the lock protects it (TSan checks that too)
  constexpr int kThreads = 8;
  constexpr long kIncrements = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (long i = 0; i < kIncrements; ++i) {
        std::lock_guard<Lock> guard(lock);
        counter = counter + 1;
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  EXPECT_EQ(counter, kThreads * kIncrements);
}

}  // namespace
}  // namespace mempool::detail
