// ConcurrentFixedPool: a fixed-size pool that any thread may allocate from and
// free to, including a block another thread allocated.
//
// Each thread owns a shard of the pool (a cache-line-sized free list, no atomics),
// so the fast paths are a plain pop and push that never bounce a cache line
// between cores. A shard holds up to `shard_bytes` of blocks (256 KiB unless
// the constructor says otherwise, at least 2 batches); beyond that, a batch
// goes to the pool's shared depot (ABA-safe lock-free stacks: one CAS moves a
// whole batch), where an empty shard looks before the pool grows. Blocks that a
// thread frees and allocates again stay with it: with 2 batches a shard, two
// threads allocating and freeing 10,000 blocks each traded them through the
// depot, every block's cache line moved between cores, and they ran as slowly
// as new/delete. Growing
// (carving a new chunk) takes a mutex. When a thread exits, its shards in every
// pool go back to the depots.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "mempool/detail/free_list.hpp"
#include "mempool/detail/memory_checker.hpp"
#include "mempool/detail/platform.hpp"
#include "mempool/detail/thread_slot.hpp"

namespace mempool {

class MEMPOOL_API ConcurrentFixedPool {
 public:
  static constexpr std::size_t kDefaultShardBytes = std::size_t{256} * 1024;

  // The same parameters and errors as FixedPool. shard_bytes: what one thread's
  // shard may keep (rounded down to whole batches, at least 2 batches); blocks a
  // thread keeps are not lent to other threads until it exits or calls release().
  explicit ConcurrentFixedPool(std::size_t block_size, std::size_t alignment = 0,
                               std::size_t shard_bytes = kDefaultShardBytes);
  ConcurrentFixedPool(ConcurrentFixedPool&& other) noexcept;
  ConcurrentFixedPool& operator=(ConcurrentFixedPool&& other) noexcept;
  ConcurrentFixedPool(const ConcurrentFixedPool&) = delete;
  ConcurrentFixedPool& operator=(const ConcurrentFixedPool&) = delete;
  // Unmaps everything. No thread may be using the pool.
  ~ConcurrentFixedPool();

  // The fast path: pop this thread's shard. Throws std::bad_alloc when the OS
  // refuses a new chunk.
  MEMPOOL_ALWAYS_INLINE void* allocate() {
    Shard& s = shards_[detail::tls_thread_slot];
    if (MEMPOOL_LIKELY(!s.free.empty())) return pop_local(s);
    return allocate_slow_or_throw();
  }

  // As allocate(), but nullptr instead of std::bad_alloc.
  MEMPOOL_ALWAYS_INLINE void* try_allocate() noexcept {
    Shard& s = shards_[detail::tls_thread_slot];
    if (MEMPOOL_LIKELY(!s.free.empty())) return pop_local(s);
    return allocate_slow();
  }

  // The fast path: push onto this thread's shard. nullptr is ignored. In checked
  // builds a double free or a pointer from elsewhere stops the process.
  MEMPOOL_ALWAYS_INLINE void deallocate(void* p) noexcept {
    if (MEMPOOL_UNLIKELY(p == nullptr)) return;
    if constexpr (detail::kChecked) check_free(p);
    if constexpr (detail::kMemoryChecker) tell_checker_freed(p);
    Shard& s = shards_[detail::tls_thread_slot];
    if (MEMPOOL_LIKELY(s.count < limit_)) {
      push_local(s, p);
      return;
    }
    deallocate_slow(p);
  }

  // p is the start of a block of this pool. Takes the growth mutex.
  [[nodiscard]] bool owns(const void* p) const noexcept;
  [[nodiscard]] std::size_t block_size() const noexcept;
  [[nodiscard]] std::size_t alignment() const noexcept;
  [[nodiscard]] std::size_t bytes_reserved() const noexcept;
  // Blocks moved between a shard and the depot at a time.
  [[nodiscard]] std::size_t batch_size() const noexcept;
  // Most blocks a thread's shard keeps.
  [[nodiscard]] std::size_t shard_limit() const noexcept { return limit_; }
  // Blocks allocated and not yet freed: blocks carved minus those in the depot and
  // in the threads' shards, a snapshot (exact when no thread is allocating or
  // freeing meanwhile). Costs the fast paths nothing.
  [[nodiscard]] std::uint64_t live_blocks() const noexcept;

  // Unmaps every chunk whose blocks are all free and in the depot (blocks cached
  // by other threads' shards keep their chunk; the calling thread's own shard is
  // emptied into the depot first). Returns the bytes unmapped. Takes the growth
  // mutex; other threads may go on allocating and freeing meanwhile.
  std::size_t release() noexcept;

 private:
  // Blocks in a shard's list. Written only by the owning thread; live_blocks()
  // reads it from other threads with a relaxed atomic load (an aligned 32-bit
  // word: the worst it sees is a slightly old value). ThreadSanitizer builds make
  // it a real atomic, so that TSan checks everything else.
#if defined(__SANITIZE_THREAD__)
  using ShardCount = std::atomic<std::uint32_t>;
#else
  using ShardCount = std::uint32_t;
#endif
  struct alignas(detail::kCacheLine) Shard {
    detail::FreeList free;
    // Blocks in `free`; kReserved for slots 0 and kSharedSlot, which never cache
    // blocks, so that both fast paths send them to the slow path.
    ShardCount count;
  };
  static constexpr std::uint32_t kReserved = UINT32_MAX;
  struct State;

  MEMPOOL_ALWAYS_INLINE void push_local(Shard& s, void* p) noexcept {
    ++s.count;
    s.free.push(p);
  }

  MEMPOOL_ALWAYS_INLINE void* pop_local(Shard& s) noexcept {
    --s.count;
    void* p = s.free.pop("ConcurrentFixedPool");
    if constexpr (detail::kChecked) mark_allocated(p);
    if constexpr (detail::kMemoryChecker) tell_checker_allocated(p);
    return p;
  }

  MEMPOOL_COLD void* allocate_slow() noexcept;
  MEMPOOL_COLD void* allocate_slow_or_throw();
  MEMPOOL_COLD void deallocate_slow(void* p) noexcept;
  MEMPOOL_COLD void check_free(void* p) noexcept;
  MEMPOOL_COLD void mark_allocated(void* p) noexcept;
  // Under a memory checker (memory_checker.hpp): memcheck's pool is anchored at the
  // state, which moves with the pool.
  void tell_checker_allocated(void* p) const noexcept;
  void tell_checker_freed(void* p) const noexcept;

  Shard* shards_;        // state_->shards, kept here so the fast path is one load away
  std::uint32_t limit_;  // most blocks a shard keeps: whole batches, at least 2
  std::unique_ptr<State> state_;
};

}  // namespace mempool
