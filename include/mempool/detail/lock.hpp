// A small mutex on a futex (Drepper's three-state lock): uncontended lock and
// unlock are one atomic each, a waiter sleeps in the kernel instead of spinning.
// Every lock of the heap is one (the central cache has one per size class).
// ThreadSanitizer sees it as atomics with acquire/release order, so it still
// checks everything the lock protects, but does not count it against its 64
// locks held at once: fork() holds every one of them. The futex is called
// directly, not through std::mutex or C++20 atomic wait (both reach libstdc++
// for their error paths): the drop-in library needs nothing but libc
// (docs/architecture.md, "The drop-in library").
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "mempool/detail/platform.hpp"

namespace mempool::detail {

class Lock {
 public:
  constexpr Lock() noexcept = default;
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

  MEMPOOL_ALWAYS_INLINE void lock() noexcept {
    int expected = kUnlocked;
    if (MEMPOOL_LIKELY(state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                                      std::memory_order_relaxed)))
      return;
    lock_contended();
  }

  MEMPOOL_ALWAYS_INLINE bool try_lock() noexcept {
    int expected = kUnlocked;
    return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  MEMPOOL_ALWAYS_INLINE void unlock() noexcept {
    if (state_.exchange(kUnlocked, std::memory_order_release) == kWaiters)
      futex(FUTEX_WAKE_PRIVATE);
  }

 private:
  static constexpr int kUnlocked = 0;
  static constexpr int kLocked = 1;
  static constexpr int kWaiters = 2;  // locked, and someone may sleep on it

  MEMPOOL_NOINLINE void lock_contended() noexcept {
    // A short spin first: critical sections are a few dozen instructions.
    for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      int expected = kUnlocked;
      if (state_.load(std::memory_order_relaxed) == kUnlocked &&
          state_.compare_exchange_weak(expected, kLocked, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return;
    }
    while (state_.exchange(kWaiters, std::memory_order_acquire) != kUnlocked)
      futex(FUTEX_WAIT_PRIVATE);  // returns at once if the state is no longer kWaiters
  }

  // FUTEX_WAIT sleeps while the state is kWaiters; FUTEX_WAKE wakes one sleeper.
  MEMPOOL_NOINLINE void futex(int op) noexcept {
    static_assert(sizeof(std::atomic<int>) == sizeof(int));
    ::syscall(SYS_futex, reinterpret_cast<int*>(&state_), op,
              op == FUTEX_WAKE_PRIVATE ? 1 : kWaiters, nullptr, nullptr, 0);
  }

  std::atomic<int> state_{kUnlocked};
};

}  // namespace mempool::detail
