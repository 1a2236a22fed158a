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
//
// The heap stores it encoded, next ^ key (the pools plainly, key 0), with a random
// key whose low three bits are not all zero and whose top two bytes differ. Then a
// decoded link is plausible only when it is 8-aligned and below 2^47, and
//  - bytes a program wrote into a freed block (zeros, a pointer, an 8-aligned
//    integer, any one byte repeated) never decode as plausible: the pop that
//    would follow the link reports "free list corrupted" instead of jumping;
//  - a live block's first word looks like a link only by a one-in-2^20 chance
//    (the heap clears it when it hands a block out), so "plausible" on free is
//    cheap grounds to look for the block in the free lists: a double free.
// glibc's safe-linking (next ^ (address >> 12)) has the first property without a
// secret; its tcache key in the second word gives the second, and the heap's
// 8-byte blocks have no second word.
struct FreeBlock {
  FreeBlock* next;

  [[nodiscard]] MEMPOOL_ALWAYS_INLINE std::uintptr_t link_word() const noexcept {
    return reinterpret_cast<std::uintptr_t>(next);
  }
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE FreeBlock* decoded_next(std::uintptr_t key) const noexcept {
    return reinterpret_cast<FreeBlock*>(link_word() ^ key);
  }
  MEMPOOL_ALWAYS_INLINE void set_encoded_next(FreeBlock* n, std::uintptr_t key) noexcept {
    next = reinterpret_cast<FreeBlock*>(reinterpret_cast<std::uintptr_t>(n) ^ key);
  }
};

// Bits that no block address has: above the 47-bit user address space, and below
// the 8-byte alignment of every block.
inline constexpr std::uintptr_t kImplausibleLinkBits =
    ~((std::uintptr_t{1} << 47) - 1) | std::uintptr_t{7};

MEMPOOL_ALWAYS_INLINE bool plausible_link(const FreeBlock* decoded) noexcept {
  return (reinterpret_cast<std::uintptr_t>(decoded) & kImplausibleLinkBits) == 0;
}

// A fresh random key with the properties above (getrandom, else the kernel's
// AT_RANDOM bytes mixed with the clock).
MEMPOOL_API std::uintptr_t new_link_key() noexcept;

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
