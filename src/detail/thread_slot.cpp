#include "mempool/detail/thread_slot.hpp"

#include <atomic>
#include <bitset>
#include <mutex>
#include <type_traits>

#include "mempool/detail/intrusive_list.hpp"

namespace mempool::detail {

constinit thread_local std::uint32_t tls_thread_slot MEMPOOL_TLS_MODEL = kNoSlotYet;
constinit thread_local std::uint32_t tls_thread_number MEMPOOL_TLS_MODEL = 0;
constinit thread_local std::uint32_t tls_cursor_skew MEMPOOL_TLS_MODEL = 0;

namespace {
std::atomic<std::uint32_t> g_next_thread_number{1};
}  // namespace

std::uint32_t assign_thread_number() noexcept {
  std::uint32_t n = g_next_thread_number.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = g_next_thread_number.fetch_add(1, std::memory_order_relaxed);  // wrapped
  return tls_thread_number = n;
}

void move_to_another_cursor() noexcept {
  tls_cursor_skew += 1 + (tls_thread_number >> 4);
}

class ThreadSlotRegistry {
 public:
  std::uint32_t acquire() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::uint32_t s = 1; s < kSharedSlot; ++s) {
      if (!used_[s]) {
        used_[s] = true;
        return s;
      }
    }
    return kSharedSlot;
  }

  // Runs on the exiting thread: every pool empties the slot's shard, then the
  // slot is free for the next thread.
  void release(std::uint32_t slot) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    for (ThreadExitListener* l = listeners_.first(); l != nullptr; l = Listeners::next(l))
      l->on_thread_exit(slot);
    if (slot != kSharedSlot) used_[slot] = false;
  }

  void add(ThreadExitListener* l) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    listeners_.push_front(l);
  }

  void remove(ThreadExitListener* l) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    listeners_.remove(l);
  }

 private:
  using Listeners =
      IntrusiveList<ThreadExitListener, &ThreadExitListener::prev_, &ThreadExitListener::next_>;
  std::mutex mutex_;
  Listeners listeners_;
  std::bitset<kThreadSlots> used_;
};

namespace {

// Constant-initialised with a trivial destructor: threads that exit during or
// after static destruction still find it intact.
constinit ThreadSlotRegistry g_registry;
static_assert(std::is_trivially_destructible_v<ThreadSlotRegistry>);
ThreadSlotRegistry& registry() noexcept {
  return g_registry;
}

// Its destructor is the thread-exit hook.
struct SlotOwner {
  std::uint32_t slot = kNoSlotYet;
  SlotOwner() = default;
  SlotOwner(const SlotOwner&) = delete;
  SlotOwner& operator=(const SlotOwner&) = delete;
  ~SlotOwner() {
    // From here on the thread uses the shared lists; it never gets a slot again.
    tls_thread_slot = kSharedSlot;
    registry().release(slot);
  }
};

}  // namespace

std::uint32_t acquire_thread_slot() noexcept {
  if (tls_thread_slot != kNoSlotYet) return tls_thread_slot;
  thread_local SlotOwner owner MEMPOOL_TLS_MODEL;  // constructed now, destroyed at thread exit
  owner.slot = registry().acquire();
  tls_thread_slot = owner.slot;
  return owner.slot;
}

void register_thread_exit_listener(ThreadExitListener* listener) noexcept {
  registry().add(listener);
}

void unregister_thread_exit_listener(ThreadExitListener* listener) noexcept {
  registry().remove(listener);
}

}  // namespace mempool::detail
