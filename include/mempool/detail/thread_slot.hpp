// Small per-thread numbers ("slots") that the thread-safe pools use to give every
// thread a shard of its own, and a hook that runs when a thread exits, so a pool
// can take that thread's blocks back (nothing is stranded by thread churn).
//
// Slots are recycled: a slot is free again once its thread has exited and every
// listener has emptied that slot's shards.
#pragma once

#include <cstdint>

#include "mempool/detail/platform.hpp"

namespace mempool::detail {

// Slot 0 means "none yet": its shards never hold blocks, so the first call of a
// thread falls to the slow path, which assigns one.
inline constexpr std::uint32_t kNoSlotYet = 0;
// Given to threads beyond the first kThreadSlots - 2 alive at once, and to a
// thread that is exiting; such threads use the shared lock-free lists directly.
inline constexpr std::uint32_t kSharedSlot = 255;
// Shards per pool: slots 0 .. kSharedSlot.
inline constexpr std::uint32_t kThreadSlots = 256;

// This thread's slot. constinit: reading it needs no initialisation guard.
MEMPOOL_API extern constinit thread_local std::uint32_t tls_thread_slot MEMPOOL_TLS_MODEL;

// Cold: gives the calling thread a slot (kSharedSlot if none is free or the
// thread is exiting) and arranges for the listeners to run when it exits.
MEMPOOL_API std::uint32_t acquire_thread_slot() noexcept;

// A number per thread (1, 2, 3, ... never reused), for spreading threads over a
// pool's cursors. Getting it costs one atomic increment on a thread's first call
// and nothing after: no lock, no registration, so bounded-time code may use it.
// 0: none yet.
MEMPOOL_API extern constinit thread_local std::uint32_t tls_thread_number MEMPOOL_TLS_MODEL;
MEMPOOL_API std::uint32_t assign_thread_number() noexcept;
// Added to the number when picking a cursor; move_to_another_cursor changes it
// (after a lost race: another thread shares the cursor) by a step that depends
// on the whole number, so two threads whose numbers agree in the bits that pick
// the cursor part after one move each. No lock, bounded.
MEMPOOL_API extern constinit thread_local std::uint32_t tls_cursor_skew MEMPOOL_TLS_MODEL;
MEMPOOL_API void move_to_another_cursor() noexcept;

// A pool that keeps per-slot state registers one of these for its lifetime.
// on_thread_exit runs on the exiting thread, under the registry lock, before the
// slot is handed to another thread.
class ThreadExitListener {
 public:
  virtual void on_thread_exit(std::uint32_t slot) noexcept = 0;

 protected:
  ThreadExitListener() = default;
  ~ThreadExitListener() = default;
  ThreadExitListener(const ThreadExitListener&) = delete;
  ThreadExitListener& operator=(const ThreadExitListener&) = delete;

 private:
  friend void register_thread_exit_listener(ThreadExitListener*) noexcept;
  friend void unregister_thread_exit_listener(ThreadExitListener*) noexcept;
  friend class ThreadSlotRegistry;
  ThreadExitListener* prev_ = nullptr;
  ThreadExitListener* next_ = nullptr;
};

MEMPOOL_API void register_thread_exit_listener(ThreadExitListener* listener) noexcept;
MEMPOOL_API void unregister_thread_exit_listener(ThreadExitListener* listener) noexcept;

}  // namespace mempool::detail
