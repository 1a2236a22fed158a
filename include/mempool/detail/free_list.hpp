// The intrusive free list: a singly linked stack threaded through the free blocks
// themselves, so it needs no memory of its own. Single-threaded; the thread-safe
// pools keep one per thread shard and move whole chains between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "mempool/detail/platform.hpp"

namespace mempool::detail {

// The link stored in the first word of every free block.
struct FreeBlock {
  FreeBlock* next;
};

// A detached chain of free blocks: first .. last, `count` long, last->next unspecified.
struct FreeChain {
  FreeBlock* first = nullptr;
  FreeBlock* last = nullptr;
  std::size_t count = 0;

  [[nodiscard]] bool empty() const noexcept { return first == nullptr; }
};

// The nullptr-terminated list starting at `first`, walked once to find its end.
inline FreeChain chain_from(FreeBlock* first) noexcept {
  FreeChain c;
  if (first == nullptr) return c;
  c.first = first;
  c.last = first;
  c.count = 1;
  while (c.last->next != nullptr) {
    c.last = c.last->next;
    ++c.count;
  }
  return c;
}

class FreeList {
 public:
  FreeList() = default;
  FreeList(const FreeList&) = delete;
  FreeList& operator=(const FreeList&) = delete;
  FreeList(FreeList&& other) noexcept : head_(other.head_) { other.head_ = nullptr; }
  FreeList& operator=(FreeList&& other) noexcept {
    head_ = other.head_;
    other.head_ = nullptr;
    return *this;
  }

  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }
  [[nodiscard]] FreeBlock* head() const noexcept { return head_; }

  // The fast path of every pool: one load, one store.
  MEMPOOL_ALWAYS_INLINE void push(void* block) noexcept {
    auto* b = static_cast<FreeBlock*>(block);
    b->next = head_;
    head_ = b;
  }

  // Precondition: !empty().
  MEMPOOL_ALWAYS_INLINE void* pop() noexcept {
    FreeBlock* b = head_;
    head_ = b->next;
    return b;
  }

  // Prepends a whole chain in O(1).
  void push_chain(const FreeChain& chain) noexcept {
    if (chain.empty()) return;
    chain.last->next = head_;
    head_ = chain.first;
  }

  // Takes over a nullptr-terminated list. Precondition: empty().
  void assign(FreeBlock* first) noexcept { head_ = first; }

  // Detaches up to n blocks from the front, walking them once. The chain's last
  // block still points into this list: terminate it before handing it on.
  FreeChain pop_chain(std::size_t n) noexcept {
    FreeChain c;
    if (n == 0 || head_ == nullptr) return c;
    c.first = head_;
    FreeBlock* b = head_;
    std::size_t count = 1;
    while (count < n && b->next != nullptr) {
      b = b->next;
      ++count;
    }
    head_ = b->next;
    c.last = b;
    c.count = count;
    return c;
  }

  // Detaches everything, counting the blocks on the way.
  FreeChain take_all() noexcept { return chain_from(std::exchange(head_, nullptr)); }

  void clear() noexcept { head_ = nullptr; }

 private:
  FreeBlock* head_ = nullptr;
};

}  // namespace mempool::detail
