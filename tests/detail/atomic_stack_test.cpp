#include "mempool/detail/atomic_stack.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace mempool::detail {
namespace {

TEST(AtomicStack, PushPopSingleThread) {
  std::vector<FreeBlock> b(4);
  AtomicStack s;
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.pop(), nullptr);
  s.push(&b[0]);
  s.push(&b[1]);
  EXPECT_FALSE(s.empty());
  EXPECT_EQ(s.pop(), &b[1]);
  EXPECT_EQ(s.pop(), &b[0]);
  EXPECT_EQ(s.pop(), nullptr);
}

TEST(AtomicStack, ChainsAndPopAll) {
  std::vector<FreeBlock> b(6);
  FreeList local;
  for (auto& x : b)
    local.push(&x);
  AtomicStack s;
  s.push_chain(local.pop_chain(4));
  s.push_chain(local.take_all());
  const FreeChain all = s.pop_all();
  EXPECT_EQ(all.count, 6u);
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(s.pop_all().empty());
}

// Threads pop blocks, scribble over their first word (as a user would), and
// push them back. An untagged stack hands the same block to two threads here.
TEST(AtomicStack, ConcurrentPopPushNeverDuplicates) {
  constexpr int kThreads = 8;
  constexpr int kBlocks = 64;
  constexpr int kRounds = 20000;
  std::vector<FreeBlock> b(kBlocks);
  std::vector<std::atomic<int>> owner(kBlocks);
  AtomicStack s;
  for (auto& x : b)
    s.push(&x);
  std::atomic<bool> duplicate{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        void* p = s.pop();
        if (p == nullptr) continue;
        const auto i = static_cast<FreeBlock*>(p) - b.data();
        int expected = 0;
        if (!owner[i].compare_exchange_strong(expected, t + 1)) duplicate = true;
        owner[i].store(0);
        s.push(p);
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_FALSE(duplicate.load());
  std::set<void*> seen;
  while (void* p = s.pop())
    EXPECT_TRUE(seen.insert(p).second);
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kBlocks));
}

}  // namespace
}  // namespace mempool::detail
