// SizeClassPool: small objects of many sizes, freed with their size.
//
// 64 classes of 8, 16, 24, ... 512 bytes (detail/size_classes.hpp), each a
// ConcurrentFixedPool, so any thread may allocate and any thread may free. A
// request of n bytes takes a block of class round_up(n, 8); requests above 512
// bytes, and allocate(0), go to the general heap (heap.hpp) and come back through
// it. A block is aligned to the largest power of two dividing its class size,
// at most 16 (a 24-byte block is 8-aligned, a 48-byte block 16-aligned).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "mempool/concurrent_fixed_pool.hpp"
#include "mempool/detail/platform.hpp"
#include "mempool/detail/size_classes.hpp"
#include "mempool/heap.hpp"

namespace mempool {

class MEMPOOL_API SizeClassPool {
 public:
  // Maps nothing for blocks until first use (each class maps its shard table).
  SizeClassPool() : SizeClassPool(std::make_index_sequence<detail::kSizeClassCount>{}) {}
  SizeClassPool(SizeClassPool&&) noexcept = default;
  SizeClassPool& operator=(SizeClassPool&&) noexcept = default;
  SizeClassPool(const SizeClassPool&) = delete;
  SizeClassPool& operator=(const SizeClassPool&) = delete;
  // Unmaps every class's memory. Large blocks still allocated are not tracked.
  ~SizeClassPool() = default;

  // The process-wide instance: ready on first use, never destroyed (so static
  // destructors of other objects may still free into it).
  static SizeClassPool& global();

  // n bytes; std::bad_alloc when out of memory.
  MEMPOOL_ALWAYS_INLINE void* allocate(std::size_t n) {
    if (MEMPOOL_LIKELY(n - 1 < detail::kSizeClassMax)) {  // 1..512; 0 wraps around
      return classes_[detail::size_class_of(n)].allocate();
    }
    return mempool::allocate(n);
  }

  // As allocate(), but nullptr instead of std::bad_alloc.
  MEMPOOL_ALWAYS_INLINE void* try_allocate(std::size_t n) noexcept {
    if (MEMPOOL_LIKELY(n - 1 < detail::kSizeClassMax)) {
      return classes_[detail::size_class_of(n)].try_allocate();
    }
    return mempool::try_allocate(n);
  }

  // Frees p, allocated here with the same n. nullptr is ignored. In checked
  // builds a wrong n, a double free or a pointer from elsewhere stops the process.
  MEMPOOL_ALWAYS_INLINE void deallocate(void* p, std::size_t n) noexcept {
    if constexpr (detail::kChecked) check_free(p, n);
    if (MEMPOOL_LIKELY(n - 1 < detail::kSizeClassMax)) {
      classes_[detail::size_class_of(n)].deallocate(p);
      return;
    }
    mempool::deallocate(p, n);
  }

  // The block size a request of n bytes gets (n itself above 512 bytes).
  [[nodiscard]] static constexpr std::size_t block_size(std::size_t n) noexcept {
    return n - 1 < detail::kSizeClassMax ? detail::size_class_bytes(detail::size_class_of(n)) : n;
  }
  // The alignment of a block for n bytes (above 512 bytes and for 0: the heap's,
  // 16, or 8 for allocate(0)).
  [[nodiscard]] static constexpr std::size_t alignment(std::size_t n) noexcept {
    return n - 1 < detail::kSizeClassMax ? detail::size_class_alignment(detail::size_class_of(n))
                                         : Heap::alignment(n);
  }

  // p is a block of one of the classes (live or free).
  [[nodiscard]] bool owns(const void* p) const noexcept;
  // Bytes mapped by class c (0 .. 63), and by all classes.
  [[nodiscard]] std::size_t bytes_reserved(std::size_t c) const noexcept {
    return classes_[c].bytes_reserved();
  }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept;

  struct ClassStats {
    std::size_t block_size;      // 8, 16, ... 512
    std::uint64_t live_blocks;   // allocated and not freed (a snapshot)
    std::size_t bytes_reserved;  // mapped for this class
  };
  struct Stats {
    std::array<ClassStats, detail::kSizeClassCount> classes;
    std::uint64_t live_bytes;    // sum of live_blocks x block_size
    std::size_t bytes_reserved;  // sum over the classes
  };
  // Per-class counters (large requests are not counted: the heap owns them).
  [[nodiscard]] Stats stats() const noexcept;

  // Gives back to the OS every chunk no live block uses, except blocks cached by
  // other threads (at most two batches per thread and class). Returns the bytes
  // unmapped.
  std::size_t release() noexcept;

 private:
  template <std::size_t... C>
  explicit SizeClassPool(std::index_sequence<C...> /*classes*/)
      : classes_{ConcurrentFixedPool(detail::size_class_bytes(C), detail::size_class_alignment(C),
                                     kShardBytes)...} {}

  MEMPOOL_COLD void check_free(void* p, std::size_t n) const noexcept;

  // Two batches a thread and class: 64 classes of 256 KiB each (ConcurrentFixedPool's
  // default) would let one thread keep 16 MiB.
  static constexpr std::size_t kShardBytes = 0;

  std::array<ConcurrentFixedPool, detail::kSizeClassCount> classes_;
};

}  // namespace mempool
