#include "mempool/detail/intrusive_list.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace mempool::detail {
namespace {

struct Node {
  int id = 0;
  Node* prev = nullptr;
  Node* next = nullptr;
};
using List = IntrusiveList<Node, &Node::prev, &Node::next>;

// The ids from first to last, walking next, checking every prev link on the way.
std::vector<int> ids(const List& list) {
  std::vector<int> out;
  const Node* before = nullptr;
  for (Node* n = list.first(); n != nullptr; n = List::next(n)) {
    EXPECT_EQ(n->prev, before) << "prev link of " << n->id;
    out.push_back(n->id);
    before = n;
  }
  return out;
}

TEST(IntrusiveList, PushFrontPutsNewestFirst) {
  Node a{1}, b{2}, c{3};
  List list;
  EXPECT_TRUE(list.empty());
  list.push_front(&a);
  list.push_front(&b);
  list.push_front(&c);
  EXPECT_FALSE(list.empty());
  EXPECT_EQ(ids(list), (std::vector<int>{3, 2, 1}));
}

TEST(IntrusiveList, RemovesFromHeadMiddleAndTail) {
  Node n[5] = {{0}, {1}, {2}, {3}, {4}};
  List list;
  for (Node& x : n)
    list.push_front(&x);
  list.remove(&n[2]);  // middle
  EXPECT_EQ(ids(list), (std::vector<int>{4, 3, 1, 0}));
  list.remove(&n[4]);  // head
  EXPECT_EQ(ids(list), (std::vector<int>{3, 1, 0}));
  list.remove(&n[0]);  // tail
  EXPECT_EQ(ids(list), (std::vector<int>{3, 1}));
  // A removed element has no links left, so it can join another list at once.
  EXPECT_EQ(n[2].prev, nullptr);
  EXPECT_EQ(n[2].next, nullptr);
  list.remove(&n[3]);
  list.remove(&n[1]);
  EXPECT_TRUE(list.empty());
  list.push_front(&n[2]);
  EXPECT_EQ(ids(list), (std::vector<int>{2}));
}

TEST(IntrusiveList, ClearForgetsEveryElement) {
  Node a{1}, b{2};
  List list;
  list.push_front(&a);
  list.push_front(&b);
  list.clear();
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.first(), nullptr);
}

}  // namespace
}  // namespace mempool::detail
