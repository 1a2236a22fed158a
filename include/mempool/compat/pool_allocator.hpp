// Stands in for poolAllocator's PoolAllocator<StatTrak> (custAlloc.hpp). To switch, include
// this header instead of custAlloc.hpp; the calls stay. They forward to a ConcurrentFixedPool,
// with an atomic count of the blocks out to enforce pool_size.
// Where poolAllocator was wrong, mempool differs:
// - it was single-threaded; this one is thread-safe.
// - its blocks lay object_size bytes apart (a 20-byte one 4-aligned); here 16-aligned from 16.
// - it accepted a double free; mempool's checked build (MEMPOOL_CHECKED) stops the process.
// Namespace: pool_allocator, not mempool, so the class cannot clash with mempool::PoolAllocator
// (allocator.hpp). A using-declaration also names it ::PoolAllocator, where poolAllocator had
// it, so its users' code compiles unchanged; beside `using namespace mempool;` say ::PoolAllocator.
#pragma once

#include <atomic>
#include <cstddef>

#include "mempool/concurrent_fixed_pool.hpp"

namespace pool_allocator {

// StatTrak: whether get_allocator_stats() tracks the peak (poolAllocator's compile-time
// statistics switch; the count of blocks out is kept either way, since it enforces pool_size).
template <bool StatTrak = false>
class PoolAllocator {
 public:
  struct AllocatorStats {
    std::size_t total_blocks;      // pool_size
    std::size_t allocated_blocks;  // out now
    std::size_t peak_usage;        // most out at once (0 unless StatTrak)
    int fragmentation_metric;      // always 0, as in poolAllocator
  };

  // Memory is taken as blocks are first needed, up to pool_size blocks. The errors of
  // ConcurrentFixedPool(object_size): std::invalid_argument for a zero object_size.
  PoolAllocator(std::size_t object_size, std::size_t pool_size)
      : pool_(object_size), pool_size_(pool_size) {}
  PoolAllocator(const PoolAllocator&) = delete;
  PoolAllocator& operator=(const PoolAllocator&) = delete;
  PoolAllocator(PoolAllocator&&) = delete;
  PoolAllocator& operator=(PoolAllocator&&) = delete;
  ~PoolAllocator() = default;

  // A block of at least object_size bytes, or nullptr when pool_size blocks are out (or the
  // OS refuses memory).
  [[nodiscard]] void* allocate_object() noexcept {
    std::size_t out = out_.load(std::memory_order_relaxed);
    do {
      if (out >= pool_size_) return nullptr;
    } while (!out_.compare_exchange_weak(out, out + 1, std::memory_order_relaxed));
    void* p = pool_.try_allocate();
    if (p == nullptr) {
      out_.fetch_sub(1, std::memory_order_relaxed);
      return nullptr;
    }
    if constexpr (StatTrak) {
      std::size_t peak = peak_.load(std::memory_order_relaxed);
      while (out + 1 > peak &&
             !peak_.compare_exchange_weak(peak, out + 1, std::memory_order_relaxed)) {
      }
    }
    return p;
  }

  // Returns a block from allocate_object; nullptr does nothing.
  void deallocate_object(void* ptr) noexcept {
    if (ptr == nullptr) return;
    pool_.deallocate(ptr);
    out_.fetch_sub(1, std::memory_order_relaxed);
  }

  [[nodiscard]] AllocatorStats get_allocator_stats() const noexcept {
    return AllocatorStats{.total_blocks = pool_size_,
                          .allocated_blocks = out_.load(std::memory_order_relaxed),
                          .peak_usage = peak_.load(std::memory_order_relaxed),
                          .fragmentation_metric = 0};
  }

 private:
  mempool::ConcurrentFixedPool pool_;
  std::size_t pool_size_;
  std::atomic<std::size_t> out_{0};   // blocks handed out and not returned
  std::atomic<std::size_t> peak_{0};  // most out at once (StatTrak only)
};

}  // namespace pool_allocator

using pool_allocator::PoolAllocator;
