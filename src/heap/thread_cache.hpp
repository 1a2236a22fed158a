// The thread cache: per thread, one free list per size class. The hit path
// (heap_fast_path.hpp) pops or pushes a block with no lock and no atomic
// read-modify-write; everything else is here, out of line.
//
// List lengths adapt per class (tcmalloc's slow start): a list's flush threshold
// `max` starts at 0, grows by one each time the list overflows or runs dry until
// it reaches the class's batch, then by whole batches while the class stays hot,
// and shrinks again when a list keeps overflowing. The sum of max x block size is
// the thread's budget (MEMPOOL_THREAD_CACHE_BYTES, default 2 MiB): past it every
// list is halved, so one thread cannot hoard memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "mempool/detail/free_list.hpp"
#include "mempool/detail/platform.hpp"
#include "mempool/detail/size_classes.hpp"

namespace mempool::detail {

struct ThreadCacheList {
  FreeBlock* head = nullptr;
  // max - (blocks in the list): a free decrements it and flushes when it goes
  // negative, an allocation increments it, so the hit path updates one word with
  // one instruction and tests the sign. Written only by the owning thread;
  // stats() reads it from other threads with a relaxed atomic load (an aligned
  // 32-bit word: the worst it sees is a slightly old value). ThreadSanitizer
  // builds make it a real atomic, so that TSan checks everything else.
#if defined(__SANITIZE_THREAD__)
  std::atomic<std::int32_t> room{0};
#else
  std::int32_t room = 0;
#endif
  std::uint32_t max = 0;  // flush threshold; 0 until the class is first used
};

MEMPOOL_ALWAYS_INLINE std::int32_t list_room(const ThreadCacheList& l) noexcept {
#if defined(__SANITIZE_THREAD__)
  return l.room.load(std::memory_order_relaxed);
#else
  return l.room;
#endif
}
MEMPOOL_ALWAYS_INLINE void set_list_room(ThreadCacheList& l, std::int32_t room) noexcept {
#if defined(__SANITIZE_THREAD__)
  l.room.store(room, std::memory_order_relaxed);
#else
  l.room = room;
#endif
}
inline std::uint32_t list_count(const ThreadCacheList& l) noexcept {
  return static_cast<std::uint32_t>(static_cast<std::int32_t>(l.max) - list_room(l));
}
inline void set_list_count(ThreadCacheList& l, std::uint32_t count) noexcept {
  set_list_room(l, static_cast<std::int32_t>(l.max) - static_cast<std::int32_t>(count));
}
// From another thread (stats): max may be stale too, so clamp at 0.
inline std::uint32_t list_count_racy(const ThreadCacheList& l) noexcept {
#if defined(__SANITIZE_THREAD__)
  const std::int32_t room = l.room.load(std::memory_order_relaxed);
#else
  const std::int32_t room = __atomic_load_n(&l.room, __ATOMIC_RELAXED);
#endif
  const auto max = static_cast<std::int32_t>(__atomic_load_n(&l.max, __ATOMIC_RELAXED));
  return max > room ? static_cast<std::uint32_t>(max - room) : 0;
}

enum class ThreadCacheState : std::uint8_t {
  kUnset,   // the thread has not used the heap yet
  kActive,  // caching
  kExited,  // the thread is exiting (or has no exit hook): no caching any more
};

class ThreadCache {
 public:
  ThreadCacheList lists[kHeapClassCount];  // the hot part: first

  // The list of class c was empty: fetch a batch from the central cache and
  // return one block (nullptr when out of memory).
  void* refill(std::size_t c) noexcept;
  // The list of class c passed its threshold (count > max): give a batch back.
  void flush(std::size_t c) noexcept;
  // Gives every cached block back (thread exit, collect()).
  void release_all() noexcept;
  // Runs at thread exit (a pthread key destructor).
  void on_thread_exit() noexcept;

  [[nodiscard]] ThreadCacheState state() const noexcept { return state_; }
  [[nodiscard]] std::size_t cached_blocks(std::size_t c) const noexcept {
    return list_count_racy(lists[c]);
  }

  // Thread-cache registry (stats, fork).
  // Calls f on every registered cache, the registry locked.
  static void for_each(void (*f)(const ThreadCache&, void*), void* context) noexcept;
  static void lock_registry() noexcept;
  static void unlock_registry() noexcept;
  // In a forked child: only the calling thread survived; forget the others.
  static void reset_registry_after_fork() noexcept;

 private:
  bool activate() noexcept;
  void release(std::size_t c, std::size_t n) noexcept;
  void set_max(std::size_t c, std::uint32_t max) noexcept;
  void scavenge() noexcept;

  std::size_t max_bytes_ = 0;  // sum of max x block size
  std::uint8_t overflows_[kHeapClassCount] = {};
  ThreadCacheState state_ = ThreadCacheState::kUnset;
  ThreadCache* prev_ = nullptr;
  ThreadCache* next_ = nullptr;

  friend class ThreadCacheRegistry;
};

// Initial-exec TLS: one %fs-relative access, no __tls_get_addr call.
extern constinit thread_local ThreadCache tls_thread_cache
    __attribute__((tls_model("initial-exec")));

// Heap options read from the environment (src/options.cpp).
void set_thread_cache_budget(std::size_t bytes) noexcept;
// The pthread key whose destructor runs on_thread_exit; made once by heap_init.
bool create_thread_exit_key() noexcept;
// Blocks the heap gives out one by one once the calling thread has no cache.
void* allocate_uncached(std::size_t c) noexcept;

}  // namespace mempool::detail
