// Stands in for fixedPoolAlloc's FixedAllocator (fixAlloc.h): 64 blocks of 64 bytes. To switch,
// include this header instead of fixAlloc.h; the calls stay. They forward to a BitmapPool.
// Where FixedAllocator was wrong, mempool differs:
// - its blocks were only 8-aligned; these are 16-aligned, as malloc's.
// - my_free accepted a pointer 2^38 bytes away (its int index wrapped); here it answers false.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mempool/bitmap_pool.hpp"

// A block: lo is its first byte, hi its last (lo + 63), as fixedPoolAlloc returned them (its
// README names neither; this is its header's layout). {nullptr, nullptr} means "full".
struct MemRange {
  std::uint8_t* lo = nullptr;
  std::uint8_t* hi = nullptr;
};

class FixedAllocator {
 public:
  static constexpr std::size_t kBlockSize = 64;
  static constexpr std::size_t kBlockCount = 64;

  // Takes the memory of all 64 blocks now; std::bad_alloc when the OS refuses it.
  FixedAllocator() : pool_(kBlockSize, kBlockCount) {}

  // A free block, or {nullptr, nullptr} when all 64 are in use. Lock-free, any thread.
  [[nodiscard]] MemRange my_malloc() noexcept {
    auto* lo = static_cast<std::uint8_t*>(pool_.allocate());
    if (lo == nullptr) return {};
    return {lo, lo + (kBlockSize - 1)};
  }

  // Returns the block that starts at block.lo: true, or false (and nothing changes) for an
  // empty range, a block that is not allocated (a double free) or a pointer that is not the
  // start of one of this allocator's blocks. Lock-free, any thread.
  bool my_free(const MemRange block) noexcept {
    if (block.lo == nullptr || block.hi == nullptr) return false;
    return pool_.try_deallocate(block.lo);
  }

 private:
  mempool::BitmapPool pool_;
};
