#include "mempool/detail/free_list.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace mempool::detail {
namespace {

struct Blocks {
  std::vector<FreeBlock> storage = std::vector<FreeBlock>(16);
  void* operator[](std::size_t i) { return &storage[i]; }
};

TEST(FreeList, PopsInLifoOrder) {
  Blocks b;
  FreeList list;
  EXPECT_TRUE(list.empty());
  list.push(b[0]);
  list.push(b[1]);
  list.push(b[2]);
  EXPECT_EQ(list.pop(), b[2]);
  EXPECT_EQ(list.pop(), b[1]);
  EXPECT_EQ(list.pop(), b[0]);
  EXPECT_TRUE(list.empty());
}

TEST(FreeList, PopChainTakesAtMostN) {
  Blocks b;
  FreeList list;
  for (int i = 0; i < 5; ++i)
    list.push(b[i]);
  const FreeChain c = list.pop_chain(3);
  EXPECT_EQ(c.count, 3u);
  EXPECT_EQ(c.first, b[4]);
  EXPECT_EQ(c.last, b[2]);
  EXPECT_EQ(list.pop(), b[1]);
  const FreeChain rest = list.pop_chain(10);
  EXPECT_EQ(rest.count, 1u);
  EXPECT_EQ(rest.first, b[0]);
  EXPECT_TRUE(list.empty());
  EXPECT_TRUE(list.pop_chain(4).empty());
}

TEST(FreeList, PushChainSplicesInFront) {
  Blocks b;
  FreeList a;
  FreeList other;
  a.push(b[0]);
  other.push(b[1]);
  other.push(b[2]);
  a.push_chain(other.take_all());
  EXPECT_TRUE(other.empty());
  EXPECT_EQ(a.pop(), b[2]);
  EXPECT_EQ(a.pop(), b[1]);
  EXPECT_EQ(a.pop(), b[0]);
  a.push_chain(FreeChain{});  // an empty chain changes nothing
  EXPECT_TRUE(a.empty());
}

TEST(FreeList, TakeAllCounts) {
  Blocks b;
  FreeList list;
  for (int i = 0; i < 7; ++i)
    list.push(b[i]);
  const FreeChain c = list.take_all();
  EXPECT_EQ(c.count, 7u);
  EXPECT_EQ(c.last, b[0]);
  EXPECT_TRUE(list.empty());
}

TEST(FreeList, MoveTransfersOwnership) {
  Blocks b;
  FreeList a;
  a.push(b[3]);
  FreeList moved(std::move(a));
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): documented state
  EXPECT_EQ(moved.pop(), b[3]);
}

}  // namespace
}  // namespace mempool::detail
