// Single-threaded fixed-size pools: FixedPool (block size chosen at run time) and
// ObjectPool<T> (typed, constructs in place). A pop from an intrusive free list
// allocates, a push frees; fresh blocks are carved from chunks that double in
// size (capped at 1 MiB). Not thread-safe: use ConcurrentFixedPool for that.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "mempool/detail/block_layout.hpp"
#include "mempool/detail/chunk_arena.hpp"
#include "mempool/detail/error.hpp"
#include "mempool/detail/free_list.hpp"
#include "mempool/detail/memory_checker.hpp"
#include "mempool/detail/platform.hpp"
#include "mempool/stats.hpp"

namespace mempool {

// A pool of blocks of one size. `Stats` is NoStats or WithStats.
template <class Stats = NoStats>
class BasicFixedPool {
 public:
  // block_size > 0 and at most 1 GiB; alignment 0 (the default: 16 for blocks of
  // 16 bytes or more, 8 below) or the exact alignment wanted, a power of two up to
  // 4096 (FixedPool(24, 8) packs 24-byte blocks). Throws std::invalid_argument or
  // std::length_error naming the bad parameter. Maps nothing until first use.
  explicit BasicFixedPool(std::size_t block_size, std::size_t alignment = 0)
      : BasicFixedPool("FixedPool", block_size, alignment) {}

  BasicFixedPool(const BasicFixedPool&) = delete;
  BasicFixedPool& operator=(const BasicFixedPool&) = delete;
  BasicFixedPool(BasicFixedPool&& other) noexcept
      : free_(std::move(other.free_)),
        stats_(std::exchange(other.stats_, Stats{})),
        arena_(std::move(other.arena_)),
        name_(other.name_) {
    // Memcheck's record of the blocks moves too; `other` starts an empty one.
    detail::checker_pool_moved(&other, this);
    detail::checker_pool_created(&other);
  }
  BasicFixedPool& operator=(BasicFixedPool&& other) noexcept {
    if (this == &other) return *this;
    free_ = std::move(other.free_);
    stats_ = std::exchange(other.stats_, Stats{});
    arena_ = std::move(other.arena_);  // unmaps what this pool held
    name_ = other.name_;
    detail::checker_pool_destroyed(this);
    detail::checker_pool_moved(&other, this);
    detail::checker_pool_created(&other);
    return *this;
  }
  // Unmaps every chunk: blocks still allocated become invalid.
  ~BasicFixedPool() { detail::checker_pool_destroyed(this); }

  // The fast path: pop the free list. Throws std::bad_alloc when the OS refuses
  // a new chunk; live blocks are untouched.
  MEMPOOL_ALWAYS_INLINE void* allocate() {
    if (MEMPOOL_LIKELY(!free_.empty())) return on_allocated(free_.pop(name_));
    return allocate_slow_or_throw();
  }

  // As allocate(), but nullptr instead of std::bad_alloc.
  MEMPOOL_ALWAYS_INLINE void* try_allocate() noexcept {
    if (MEMPOOL_LIKELY(!free_.empty())) return on_allocated(free_.pop(name_));
    return allocate_slow();
  }

  // The fast path: push onto the free list. nullptr is ignored. In checked
  // builds a double free or a pointer from elsewhere stops the process.
  MEMPOOL_ALWAYS_INLINE void deallocate(void* p) noexcept {
    if (MEMPOOL_UNLIKELY(p == nullptr)) return;
    if constexpr (detail::kChecked) check_free(p);
    if constexpr (detail::kMemoryChecker) detail::checker_pool_freed(this, p, block_size());
    stats_.on_free();
    free_.push(p);
  }

  // p is the start of a block of this pool (live or free). O(log chunks).
  [[nodiscard]] bool owns(const void* p) const noexcept { return arena_.owns(p); }
  [[nodiscard]] std::size_t block_size() const noexcept { return arena_.layout().size; }
  [[nodiscard]] std::size_t alignment() const noexcept { return arena_.layout().alignment; }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return arena_.bytes_reserved(); }

  // Counters; only with WithStats.
  [[nodiscard]] PoolStats stats() const noexcept requires(Stats::enabled) {
    PoolStats s = stats_.snapshot();
    s.chunks = arena_.chunk_count();
    s.bytes_reserved = arena_.bytes_reserved();
    return s;
  }

  // Calls f(void*) for every block that is allocated now. O(blocks) time and a
  // temporary vector of the free blocks; meant for teardown (ObjectPool uses it
  // to run destructors), not for hot code.
  template <class F>
  void for_each_allocated(F&& f) const {
    std::vector<const void*> free_blocks;
    for (const detail::FreeBlock* b = free_.head(); b != nullptr; b = detail::pool_next(b)) {
      free_blocks.push_back(b);
    }
    std::sort(free_blocks.begin(), free_blocks.end());
    arena_.for_each_carved([&](void* block) {
      if (!std::binary_search(free_blocks.begin(), free_blocks.end(), block)) f(block);
    });
  }

 protected:
  BasicFixedPool(const char* name, std::size_t block_size, std::size_t alignment)
      : arena_(detail::make_block_layout(name, block_size, alignment), detail::kChecked),
        name_(name) {
    detail::checker_pool_created(this);
  }

 private:
  MEMPOOL_ALWAYS_INLINE void* on_allocated(void* p) noexcept {
    stats_.on_allocate();
    if constexpr (detail::kChecked) arena_.mark_allocated(p);
    if constexpr (detail::kMemoryChecker) detail::checker_pool_allocated(this, p, block_size());
    return p;
  }

  // Cold: a fresh block from the arena, which maps a chunk when it runs dry.
  MEMPOOL_COLD void* allocate_slow() noexcept {
    void* p = arena_.carve_one();
    return p == nullptr ? nullptr : on_allocated(p);
  }
  MEMPOOL_COLD void* allocate_slow_or_throw() {
    void* p = allocate_slow();
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }

  MEMPOOL_COLD void check_free(void* p) noexcept {
    if (!arena_.owns(p)) detail::fatal_misuse(name_, p, "free of a pointer not from this pool");
    if (!arena_.mark_free(p)) detail::fatal_misuse(name_, p, "double free");
  }

  detail::FreeList free_;  // hot: the only member the fast paths touch (with stats_)
  [[no_unique_address]] Stats stats_;
  detail::ChunkArena arena_;
  const char* name_;
};

// The run-time-sized pool without statistics.
using FixedPool = BasicFixedPool<NoStats>;

// A pool of T: blocks of sizeof(T) aligned to alignof(T) (and 16 once T is 16
// bytes or more). When the pool is destroyed, objects still alive in it are
// destroyed too (as boost::object_pool does), then all its memory is unmapped.
template <class T, class Stats = NoStats>
class ObjectPool : private BasicFixedPool<Stats> {
  static_assert(alignof(T) <= detail::kMaxPoolAlignment, "ObjectPool: alignof(T) exceeds 4096");
  using Base = BasicFixedPool<Stats>;

 public:
  using value_type = T;

  ObjectPool()
      : Base("ObjectPool", sizeof(T), detail::default_block_alignment(sizeof(T), alignof(T))) {}
  ObjectPool(ObjectPool&&) noexcept = default;
  ObjectPool& operator=(ObjectPool&& other) noexcept {
    if (this != &other) {
      destroy_live_objects();
      Base::operator=(std::move(other));
    }
    return *this;
  }
  ~ObjectPool() { destroy_live_objects(); }

  // Constructs a T in a block. Throws std::bad_alloc when out of memory, or what
  // T's constructor throws (the block is returned first).
  template <class... Args>
  [[nodiscard]] T* create(Args&&... args) {
    void* p = Base::allocate();
    if constexpr (std::is_nothrow_constructible_v<T, Args&&...>) {
      return ::new (p) T(std::forward<Args>(args)...);
    } else {
      try {
        return ::new (p) T(std::forward<Args>(args)...);
      } catch (...) {
        Base::deallocate(p);
        throw;
      }
    }
  }

  // Destroys *p and recycles its block; nullptr is ignored.
  void destroy(T* p) noexcept {
    if (p == nullptr) return;
    p->~T();
    Base::deallocate(p);
  }

  using Base::alignment;
  using Base::allocate;
  using Base::block_size;
  using Base::bytes_reserved;
  using Base::deallocate;
  using Base::owns;
  using Base::stats;
  using Base::try_allocate;

 private:
  void destroy_live_objects() noexcept {
    if constexpr (!std::is_trivially_destructible_v<T>) {
      try {
        Base::for_each_allocated([](void* p) { static_cast<T*>(p)->~T(); });
      } catch (const std::bad_alloc&) {
        // No memory to find the live objects: their memory is still released.
      }
    }
  }
};

}  // namespace mempool
