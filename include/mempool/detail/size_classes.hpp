// The size-class tables, written once: SizeClassPool's 64 linear classes of 8,
// 16, 24, ... 512 bytes, and the general heap's geometric classes up to 256 KiB.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>

#include "mempool/detail/platform.hpp"

namespace mempool::detail {

inline constexpr std::size_t kSizeClassGranule = 8;
inline constexpr std::size_t kSizeClassCount = 64;
inline constexpr std::size_t kSizeClassMax = kSizeClassGranule * kSizeClassCount;  // 512

// The class of a size in 1 .. kSizeClassMax: round_up(n, 8) / 8 - 1.
constexpr std::size_t size_class_of(std::size_t n) noexcept {
  return (n - 1) / kSizeClassGranule;
}

// Block size of a class.
constexpr std::size_t size_class_bytes(std::size_t c) noexcept {
  return (c + 1) * kSizeClassGranule;
}

// Alignment of a class's blocks: the largest power of two dividing its size, at
// most 16 (8 for 24, 40, ...; 16 for 16, 32, 48, ...).
constexpr std::size_t size_class_alignment(std::size_t c) noexcept {
  const std::size_t size = size_class_bytes(c);
  return std::min<std::size_t>(16, size & (~size + 1));
}

static_assert(size_class_of(1) == 0 && size_class_of(8) == 0 && size_class_of(9) == 1);
static_assert(size_class_of(kSizeClassMax) == kSizeClassCount - 1);
static_assert(size_class_alignment(size_class_of(24)) == 8);
static_assert(size_class_alignment(size_class_of(48)) == 16);

// ---------------------------------------------------------------------------
// The general heap's classes. Index 0 means "no class" (a large block); classes
// 1 .. kHeapClassCount - 1 are 16, 32, 48, ... 128 (steps of 16, so every block is
// 16-byte aligned), then eight classes per doubling up to 256 KiB: the waste is
// under 12.5% above 128 bytes and under 16 bytes at or below it. No 8-byte class:
// every free block has a second word for the free mark (heap_thread_cache.hpp), at
// the same offset in every class; an 8-byte block's mark had to be its link, read
// through a class table on each free, and read where a program's last store before
// the free usually lands (which stalled its load: 1.6 times the time of a pair).
inline constexpr std::size_t kHeapSmallMax = std::size_t{256} * 1024;
inline constexpr std::size_t kHeapClassCount = 1 + 8 + 11 * 8;  // 97

constexpr std::size_t heap_class_bytes(std::size_t c) noexcept {
  if (c == 0) return 0;
  if (c <= 8) return c * 16;              // 16 .. 128
  const std::size_t e = 7 + (c - 9) / 8;  // 2^e < size <= 2^(e+1)
  const std::size_t k = (c - 9) % 8 + 1;
  return (std::size_t{1} << e) + k * (std::size_t{1} << (e - 3));
}

// The class of n bytes, 1 <= n <= kHeapSmallMax (n = 0 is treated as 1).
constexpr std::size_t heap_class_of_computed(std::size_t n) noexcept {
  if (n <= 16) return 1;
  if (n <= 128) return (n + 15) / 16;
  const std::size_t e = std::bit_width(n - 1) - 1;  // 2^e < n <= 2^(e+1)
  const std::size_t k = ((n - 1 - (std::size_t{1} << e)) >> (e - 3)) + 1;
  return 9 + (e - 7) * 8 + (k - 1);
}

// The hot path looks every small size up in one table of bytes (tcmalloc's
// layout): sizes to 1 KiB by 8-byte granules, sizes above by 128-byte granules,
// which is exact because every class boundary above 1 KiB is a multiple of 128.
inline constexpr std::size_t kHeapFineMax = 1024;
constexpr std::size_t heap_class_index(std::size_t n) noexcept {
  // Small sizes on the straight path (GCC otherwise moves them out of line).
  if (MEMPOOL_LIKELY(n <= kHeapFineMax)) return (n + 7) >> 3;
  return (n + 127 + (120 << 7)) >> 7;
}
inline constexpr std::size_t kHeapClassIndexCount = heap_class_index(kHeapSmallMax) + 1;

struct HeapClassTable {
  unsigned char by_index[kHeapClassIndexCount];
};

constexpr HeapClassTable make_heap_class_table() noexcept {
  HeapClassTable t{};
  // Each index takes the class of the largest size that maps to it (all sizes of
  // an index share a class: the tests check every size).
  for (std::size_t i = 0; i < kHeapClassIndexCount; ++i) {
    const std::size_t largest =
        i <= kHeapFineMax / 8 ? (i == 0 ? 1 : i * 8) : (i << 7) - (120 << 7);
    t.by_index[i] = static_cast<unsigned char>(heap_class_of_computed(largest));
  }
  return t;
}
inline constexpr HeapClassTable kHeapClassTable = make_heap_class_table();

// The class of n bytes, n <= kHeapSmallMax (0 is treated as 1).
MEMPOOL_ALWAYS_INLINE constexpr std::size_t heap_class_of(std::size_t n) noexcept {
  return kHeapClassTable.by_index[heap_class_index(n)];
}

static_assert(heap_class_bytes(kHeapClassCount - 1) == kHeapSmallMax);
static_assert(heap_class_of(kHeapSmallMax) == kHeapClassCount - 1);
static_assert(heap_class_bytes(heap_class_of(129)) == 144);
static_assert(heap_class_of(0) == 1 && heap_class_of(1) == 1 && heap_class_of(16) == 1 &&
              heap_class_of(17) == 2 && heap_class_of(1025) == heap_class_of_computed(1025));
static_assert(heap_class_bytes(1) == 16 && heap_class_bytes(8) == 128 &&
              heap_class_bytes(9) == 144);

}  // namespace mempool::detail
