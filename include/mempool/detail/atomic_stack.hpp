// An ABA-safe lock-free stack of free blocks (Treiber stack with a tagged head).
//
// The head is a {pointer, tag} pair swapped with one 16-byte compare-and-swap;
// every successful change bumps the 64-bit tag, so a pop that read head A, was
// preempted while A was popped, reused and pushed back, fails its CAS instead of
// installing a stale `next` (the ABA bug of bare-pointer lock-free free lists).
//
// Nodes are free blocks linked through word kLinkWord of each block: word 0 (the
// FreeBlock link) for a stack of single blocks; word 1 for a stack of batches,
// whose first blocks keep their own chain in word 0. A popper may read the link
// of a block that another thread has just popped and is writing into; that value
// is discarded when the CAS fails, and the memory stays mapped for the pool's
// lifetime, so the read is harmless (see load_link).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mempool/detail/free_list.hpp"
#include "mempool/detail/platform.hpp"

#if !defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16)
#error \
    "mempool needs a 16-byte compare-and-swap: compile with -mcx16 on x86-64 (the mempool::mempool CMake target adds it)"
#endif

namespace mempool::detail {

template <std::size_t kLinkWord>
class BasicAtomicStack {
 public:
  BasicAtomicStack() = default;
  BasicAtomicStack(const BasicAtomicStack&) = delete;
  BasicAtomicStack& operator=(const BasicAtomicStack&) = delete;

  void push(void* block) noexcept {
    auto* b = static_cast<FreeBlock*>(block);
    push_linked(b, b);
  }

  // Pushes a whole chain with one CAS (kLinkWord 0 only: the chain's own links
  // become the stack's).
  void push_chain(const FreeChain& chain) noexcept requires(kLinkWord == 0) {
    if (chain.empty()) return;
    push_linked(chain.first, chain.last);
  }

  // nullptr when empty.
  [[nodiscard]] void* pop() noexcept {
    Head expected = load();
    for (;;) {
      if (expected.top == nullptr) return nullptr;
      FreeBlock* next = load_link(expected.top);
      if (cas(expected, Head{next, expected.tag + 1})) return expected.top;
    }
  }

  // Detaches every block with one CAS, counting them afterwards (they are ours).
  [[nodiscard]] FreeChain pop_all() noexcept requires(kLinkWord == 0) {
    Head expected = load();
    for (;;) {
      if (expected.top == nullptr) return FreeChain{};
      if (cas(expected, Head{nullptr, expected.tag + 1})) break;
    }
    return chain_from(expected.top);
  }

  [[nodiscard]] bool empty() const noexcept {
    return __atomic_load_n(&head_.top, __ATOMIC_ACQUIRE) == nullptr;
  }

 private:
  struct alignas(16) Head {
    FreeBlock* top;
    std::uint64_t tag;
  };

  // Two 8-byte atomic loads: a torn pair only makes the next CAS fail.
  [[nodiscard]] Head load() const noexcept {
    Head h;
    h.tag = __atomic_load_n(&head_.tag, __ATOMIC_ACQUIRE);
    h.top = __atomic_load_n(&head_.top, __ATOMIC_ACQUIRE);
    return h;
  }

  // On failure, `expected` receives the current head.
  bool cas(Head& expected, Head desired) noexcept {
    uint128 e = 0;
    uint128 d = 0;
    std::memcpy(&e, &expected, sizeof e);
    std::memcpy(&d, &desired, sizeof d);
    auto* target = reinterpret_cast<uint128*>(&head_);
    const uint128 seen = __sync_val_compare_and_swap(target, e, d);
    if (seen == e) return true;
    std::memcpy(&expected, &seen, sizeof seen);
    return false;
  }

  // Links first .. last (already linked to each other) on top with one CAS.
  void push_linked(FreeBlock* first, FreeBlock* last) noexcept {
    Head expected = load();
    for (;;) {
      store_link(last, expected.top);
      if (cas(expected, Head{first, expected.tag + 1})) return;
    }
  }

  static FreeBlock** link(FreeBlock* b) noexcept {
    return reinterpret_cast<FreeBlock**>(b) + kLinkWord;
  }
  // The racy read described at the top: another thread may be writing the
  // block right now, or have handed it out. Excluded from ThreadSanitizer and
  // AddressSanitizer (which would see a free block's poisoned word, or a live one's
  // the read must not unpoison: memory_checker.hpp) because the value is only used
  // if the CAS proves nobody did.
  // Links are encoded like the pools' lists (kPoolLinkKey), whose chains become
  // the stack's; a stale read may decode to anything, so nothing checks it here.
  __attribute__((no_sanitize("thread"), no_sanitize("address"))) static FreeBlock* load_link(
      FreeBlock* b) noexcept {
    checker_quiet_begin();
    const auto word = reinterpret_cast<std::uintptr_t>(__atomic_load_n(link(b), __ATOMIC_RELAXED));
    checker_quiet_end();
    return reinterpret_cast<FreeBlock*>(word ^ kPoolLinkKey);
  }
  static void store_link(FreeBlock* b, FreeBlock* next) noexcept {
    checker_open_link(link(b));
    __atomic_store_n(
        link(b),
        reinterpret_cast<FreeBlock*>(reinterpret_cast<std::uintptr_t>(next) ^ kPoolLinkKey),
        __ATOMIC_RELAXED);
    checker_close_link(link(b));
  }

  Head head_{nullptr, 0};
};

// A stack of single blocks, linked through their FreeBlock word.
using AtomicStack = BasicAtomicStack<0>;

// A stack of batches: each node is the first block of a chain of free blocks
// (linked through word 0 as usual) and is stacked through its second word, so a
// whole batch moves with one CAS. Blocks must hold two pointers.
class BatchStack {
 public:
  void push(FreeBlock* first) noexcept { stack_.push(first); }
  // The first block of a batch, its chain intact; nullptr when empty.
  [[nodiscard]] FreeBlock* pop() noexcept { return static_cast<FreeBlock*>(stack_.pop()); }
  [[nodiscard]] bool empty() const noexcept { return stack_.empty(); }

 private:
  BasicAtomicStack<1> stack_;
};

}  // namespace mempool::detail
