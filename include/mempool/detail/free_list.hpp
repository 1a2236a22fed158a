// The intrusive free list: a singly linked stack threaded through the free blocks
// themselves, so it needs no memory of its own. Single-threaded; the thread-safe
// pools keep one per thread shard and move whole chains between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "mempool/detail/memory_checker.hpp"
#include "mempool/detail/platform.hpp"

namespace mempool::detail {

// The link stored in the first word of every free block.
//
// It may be stored encoded, next ^ key, with a key whose low three bits are not all
// zero and whose top two bytes differ (the random keys and the pools': kPoolLinkKey;
// the heap mixes in the block's address, and its default build's fixed key has
// properties of its own: heap_thread_cache.hpp). Then a decoded link is
// plausible only when it is 8-aligned and below 2^47, so bytes a program wrote into a
// freed block (zeros, a pointer, an 8-aligned integer, any one byte repeated) never
// decode as plausible: the pop that would follow the link reports "free list
// corrupted" instead of jumping. The heap's free mark, its grounds to look for a
// double free, is also kept in the block: heap_thread_cache.hpp.
//
// Under MEMPOOL_VALGRIND the accessors open the word to memcheck around their
// access (memory_checker.hpp); `next` itself is for blocks memcheck does not watch.
struct FreeBlock {
  FreeBlock* next;

  [[nodiscard]] MEMPOOL_ALWAYS_INLINE std::uintptr_t link_word() const noexcept {
    checker_open_link(this);
    const auto word = reinterpret_cast<std::uintptr_t>(next);
    checker_close_link(this);
    return word;
  }
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE FreeBlock* decoded_next(std::uintptr_t key) const noexcept {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): an encoded link is an integer by design
    return reinterpret_cast<FreeBlock*>(link_word() ^ key);
  }
  MEMPOOL_ALWAYS_INLINE void set_encoded_next(FreeBlock* n, std::uintptr_t key) noexcept {
    checker_open_link(this);
    // NOLINTNEXTLINE(performance-no-int-to-ptr): as above
    next = reinterpret_cast<FreeBlock*>(reinterpret_cast<std::uintptr_t>(n) ^ key);
    checker_close_link(this);
  }
  // Zeroes the link of a block being handed out (it stays open: the block is
  // the program's from now on).
  MEMPOOL_ALWAYS_INLINE void clear_link() noexcept {
    checker_open_link(this);
    next = nullptr;
  }

  // The word `offset` bytes in (8: the heap's free mark, heap_thread_cache.hpp),
  // read and written as the link is. memcpy: at offset 0 it is the link itself, and
  // the compiler must not reorder a store to it as a word and one as a pointer.
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE std::uintptr_t word_at(std::size_t offset) const noexcept {
    const unsigned char* w = reinterpret_cast<const unsigned char*>(this) + offset;
    std::uintptr_t word;
    checker_open_link(w);
    __builtin_memcpy(&word, w, sizeof word);
    checker_close_link(w);
    return word;
  }
  // The byte `offset` bytes in (the heap's free check, heap_thread_cache.hpp).
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE std::uint8_t byte_at(std::size_t offset) const noexcept {
    const unsigned char* w = reinterpret_cast<const unsigned char*>(this) + offset;
    checker_open_link(w);
    const std::uint8_t byte = *w;
    checker_close_link(w);
    return byte;
  }
  MEMPOOL_ALWAYS_INLINE void set_word_at(std::size_t offset, std::uintptr_t word) noexcept {
    unsigned char* w = reinterpret_cast<unsigned char*>(this) + offset;
    checker_open_link(w);
    __builtin_memcpy(w, &word, sizeof word);
    checker_close_link(w);
  }
  // Zeroes it in a block being handed out (left open, as clear_link does).
  MEMPOOL_ALWAYS_INLINE void clear_word_at(std::size_t offset) noexcept {
    unsigned char* w = reinterpret_cast<unsigned char*>(this) + offset;
    constexpr std::uintptr_t kZero = 0;
    checker_open_link(w);
    __builtin_memcpy(w, &kZero, sizeof kZero);
  }
};

// Bits that no block address has: above the 47-bit user address space, and below
// the 8-byte alignment of every block.
inline constexpr std::uintptr_t kImplausibleLinkBits =
    ~((std::uintptr_t{1} << 47) - 1) | std::uintptr_t{7};

MEMPOOL_ALWAYS_INLINE bool plausible_link(std::uintptr_t decoded) noexcept {
  return (decoded & kImplausibleLinkBits) == 0;
}
MEMPOOL_ALWAYS_INLINE bool plausible_link(const FreeBlock* decoded) noexcept {
  return plausible_link(reinterpret_cast<std::uintptr_t>(decoded));
}

// A fresh random key with the properties above (getrandom, else the kernel's
// AT_RANDOM bytes mixed with the clock).
MEMPOOL_API std::uintptr_t new_link_key() noexcept;

// splitmix64's finaliser: every input bit reaches every output bit (the key above
// hides its seed; the hardened heap spreads the draws of a counter).
constexpr std::uint64_t splitmix64_mix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
inline constexpr std::uint64_t kSplitmix64Gamma = 0x9e3779b97f4a7c15u;

// The pools' links. Plain in the default build: an ObjectPool pair is 9
// instructions, and encoding with the check on pop adds 5. Encoded and
// checked on pop where MEMPOOL_HARDENED=1, with a constant key: the pools live
// inside a program and catch its accidents (a zero, a pointer or a fill written
// into a freed block), for which any key with the properties above will do; the
// heap's key is random because as the process's malloc it faces hostile input.
inline constexpr std::uintptr_t kPoolLinkKey = kHardened ? 0x5a3c9d71e2b46f0bu : 0;
static_assert(!kHardened || (kPoolLinkKey & 7) != 0);
static_assert(!kHardened || (kPoolLinkKey >> 56) != ((kPoolLinkKey >> 48) & 0xff));

MEMPOOL_ALWAYS_INLINE FreeBlock* pool_next(const FreeBlock* b) noexcept {
  return b->decoded_next(kPoolLinkKey);
}
MEMPOOL_ALWAYS_INLINE void set_pool_next(FreeBlock* b, FreeBlock* next) noexcept {
  b->set_encoded_next(next, kPoolLinkKey);
}
// Stops the process: the link in free block b of `owner` does not decode to a block.
[[noreturn]] MEMPOOL_API void pool_free_list_corrupted(const char* owner, const void* b) noexcept;

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
  while (pool_next(c.last) != nullptr) {
    c.last = pool_next(c.last);
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
    set_pool_next(b, head_);
    head_ = b;
  }

  // Precondition: !empty(). `owner` names the pool in the report of a corrupt
  // link (hardened builds).
  MEMPOOL_ALWAYS_INLINE void* pop(const char* owner = "pool") noexcept {
    FreeBlock* b = head_;
    FreeBlock* next = pool_next(b);
    if constexpr (kHardened) {
      if (MEMPOOL_UNLIKELY(!plausible_link(next))) pool_free_list_corrupted(owner, b);
    } else {
      (void)owner;
    }
    head_ = next;
    return b;
  }

  // Prepends a whole chain in O(1).
  void push_chain(const FreeChain& chain) noexcept {
    if (chain.empty()) return;
    set_pool_next(chain.last, head_);
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
    while (count < n && pool_next(b) != nullptr) {
      b = pool_next(b);
      ++count;
    }
    head_ = pool_next(b);
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
