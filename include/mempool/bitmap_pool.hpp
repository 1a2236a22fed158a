// BitmapPool: a fixed-capacity pool for real-time code. All memory is taken at
// construction (mapped and faulted in, or the caller's buffer) and nothing is
// allocated afterwards. allocate and deallocate are lock-free, from any thread,
// and take a bounded number of steps however full the pool is (one word per
// level of a hierarchical bitmap, at most 4 levels). Every free is checked: a
// double free or a pointer not from this pool stops the process with one line.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "mempool/detail/bitmap.hpp"
#include "mempool/detail/block_layout.hpp"
#include "mempool/detail/error.hpp"
#include "mempool/detail/memory_checker.hpp"
#include "mempool/detail/platform.hpp"
#include "mempool/detail/thread_slot.hpp"

namespace mempool {

class MEMPOOL_API BitmapPool {
 public:
  // Largest capacity: 2^24 blocks.
  static constexpr std::size_t kMaxCapacity = detail::AtomicBitmap::kMaxBits;

  // Maps block_size x capacity bytes now, with the pages faulted in. Errors:
  // std::invalid_argument for a zero block_size or capacity or a bad alignment,
  // std::length_error when they are too large or their product overflows,
  // std::bad_alloc when the OS refuses the memory.
  BitmapPool(std::size_t block_size, std::size_t capacity, std::size_t alignment = 0);

  // Over the caller's buffer, which must hold storage_bytes(...) bytes and be
  // aligned to the block alignment (std::invalid_argument naming `storage`
  // otherwise). The buffer must outlive the pool.
  BitmapPool(std::size_t block_size, std::size_t capacity, std::span<std::byte> storage,
             std::size_t alignment = 0);

  BitmapPool(BitmapPool&& other) noexcept;
  BitmapPool& operator=(BitmapPool&& other) noexcept;
  BitmapPool(const BitmapPool&) = delete;
  BitmapPool& operator=(const BitmapPool&) = delete;
  ~BitmapPool();

  // Bytes a caller's buffer needs for this configuration (same errors as the
  // constructors).
  static std::size_t storage_bytes(std::size_t block_size, std::size_t capacity,
                                   std::size_t alignment = 0);

  // A free block, or nullptr when all `capacity` blocks are in use.
  [[nodiscard]] void* allocate() noexcept {
    Cursor& c = cursor();
    bool lost_race = false;
    const std::size_t i = bits_.claim(c.word, c.home, lost_race);
    if (MEMPOOL_UNLIKELY(lost_race)) detail::move_to_another_cursor();
    if (MEMPOOL_UNLIKELY(i == detail::AtomicBitmap::npos)) return nullptr;
    char* p = base_ + (shift_ != kNoShift ? i << shift_ : i * block_size_);
    if constexpr (detail::kMemoryChecker) detail::checker_pool_allocated(base_, p, block_size_);
    return p;
  }

  // Returns the block. nullptr is ignored; a pointer that is not the start of
  // one of this pool's blocks, or a block that is not allocated, stops the
  // process with one line on stderr.
  void deallocate(void* p) noexcept {
    if (MEMPOOL_UNLIKELY(p == nullptr)) return;
    const std::size_t i = index_of(p);
    if (MEMPOOL_UNLIKELY(i == kForeign)) {
      detail::fatal_misuse("BitmapPool", p, "free of a pointer not from this pool");
    }
    if constexpr (detail::kMemoryChecker) detail::checker_pool_freed(base_, p, block_size_);
    if (MEMPOOL_UNLIKELY(!bits_.release(i))) detail::fatal_misuse("BitmapPool", p, "double free");
  }

  // The same checks as deallocate, answering false instead of stopping.
  [[nodiscard]] bool try_deallocate(void* p) noexcept {
    if (p == nullptr) return false;
    const std::size_t i = index_of(p);
    return i != kForeign && bits_.release(i);
  }

  [[nodiscard]] bool owns(const void* p) const noexcept { return index_of(p) != kForeign; }
  [[nodiscard]] std::size_t capacity() const noexcept { return bits_.size(); }
  // Blocks allocated now (a snapshot, O(capacity / 64)).
  [[nodiscard]] std::size_t in_use() const noexcept { return capacity() - bits_.count(); }
  [[nodiscard]] std::size_t block_size() const noexcept { return block_size_; }
  [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }

 private:
  static constexpr std::size_t kForeign = SIZE_MAX;

  // The block index of p, or kForeign. A shift for power-of-two block sizes, else
  // exact division through a multiply-high when it is exact for every offset in
  // the pool. (The index and the block address lie on the chain from one call
  // to the next: shifts instead of multiplies took a pair from 9.2 to 7.7 ns.)
  [[nodiscard]] std::size_t index_of(const void* p) const noexcept {
    const std::uintptr_t offset =
        reinterpret_cast<std::uintptr_t>(p) - reinterpret_cast<std::uintptr_t>(base_);
    if (MEMPOOL_UNLIKELY(offset >= bytes_)) return kForeign;  // also catches p < base_
    if (MEMPOOL_LIKELY(shift_ != kNoShift)) {
      return (offset & (block_size_ - 1)) == 0 ? offset >> shift_ : kForeign;
    }
    const std::size_t i =
        magic_ != 0
            ? static_cast<std::size_t>((static_cast<detail::uint128>(offset) * magic_) >> 64)
            : offset / block_size_;
    if (MEMPOOL_UNLIKELY(i * block_size_ != offset)) return kForeign;  // inside a block
    return i;
  }

  struct alignas(detail::kCacheLine) Cursor {
    std::atomic<std::size_t> word{0};  // the level-0 word the thread claims from now
    std::size_t home = 0;              // where its search starts when that word is empty
  };

  // Each thread claims through one of up to 16 cursors, spread evenly over the
  // words. Thread numbers are consecutive, so the cursor is the number's low 4
  // bits reversed: threads 2 and 3 take cursors half the pool apart, not
  // neighbouring slices (those overlapped at 10,000 live blocks each, and two
  // threads ran slower than new/delete). Numbers are never reused, so a new
  // thread may land on a busy thread's cursor: a thread that loses a race for a
  // bit moves to another cursor (by a step of its own, so that two threads on
  // one cursor part). The number costs one atomic increment on a thread's first
  // call, so every call stays bounded.
  [[nodiscard]] Cursor& cursor() const noexcept {
    static constexpr std::uint8_t kReversed[16] = {0, 8, 4, 12, 2, 10, 6, 14,
                                                   1, 9, 5, 13, 3, 11, 7, 15};
    std::uint32_t n = detail::tls_thread_number;
    if (MEMPOOL_UNLIKELY(n == 0)) n = detail::assign_thread_number();
    return cursors_[kReversed[(n + detail::tls_cursor_skew) & 15] >> cursor_shift_];
  }

  struct Config {
    detail::BlockLayout layout;
    std::size_t capacity;
    std::size_t bytes;
  };
  static Config validate(std::size_t block_size, std::size_t capacity, std::size_t alignment);
  BitmapPool(const Config& config, char* base, std::size_t mapped_bytes);
  void forget_blocks() noexcept;  // MEMPOOL_VALGRIND

  char* base_ = nullptr;
  std::size_t block_size_ = 0;
  std::size_t bytes_ = 0;    // block_size_ x capacity
  std::uint64_t magic_ = 0;  // ceil(2^64 / block_size_), or 0: divide
  static constexpr unsigned kNoShift = 64;
  unsigned shift_ = kNoShift;  // log2(block_size_) for a power of two
  std::size_t alignment_ = 0;
  std::size_t mapped_bytes_ = 0;  // non-zero when we own the storage
  detail::AtomicBitmap bits_;
  std::unique_ptr<Cursor[]> cursors_;
  unsigned cursor_shift_ = 0;  // 4 - log2(cursors): cursors are a power of two, at most 16
};

}  // namespace mempool
