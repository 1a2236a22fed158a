// The size-class table of SizeClassPool: 64 classes of 8, 16, 24, ... 512 bytes.
// Written once; every allocator that buckets small sizes uses it.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>

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

}  // namespace mempool::detail
