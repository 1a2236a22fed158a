// Per-class parameters of the heap, computed at compile time from the size-class
// table: how many pages a span of the class has, how many blocks move between
// the thread caches and the central cache at once, and the interior-pointer
// divisor.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "mempool/detail/size_classes.hpp"
#include "span.hpp"

namespace mempool::detail {

struct HeapClassInfo {
  std::uint32_t size = 0;
  std::uint32_t batch = 0;        // blocks per transfer: 64 KiB worth, between 2 and 64
  std::uint32_t least_fetch = 0;  // fewest blocks a refill takes: 1 KiB worth
  std::uint32_t span_pages = 0;   // pages per span
  std::uint32_t capacity = 0;     // blocks per span
  std::uint32_t max_slots = 0;    // full batches the central cache keeps: 64 KiB worth, 1 to 64
  std::uint64_t divisor = 0;
};

constexpr HeapClassInfo make_heap_class_info(std::size_t c) noexcept {
  HeapClassInfo info;
  if (c == 0) return info;
  const std::size_t size = heap_class_bytes(c);
  info.size = static_cast<std::uint32_t>(size);
  info.batch = static_cast<std::uint32_t>(std::clamp<std::size_t>(64 * 1024 / size, 2, 64));
  info.least_fetch =
      static_cast<std::uint32_t>(std::clamp<std::size_t>(1024 / size, 1, info.batch));
  // At least 8 KiB and 8 blocks per span, then more pages until the unusable tail
  // is at most 1/16 of the span.
  std::size_t pages = std::max<std::size_t>(1, (8 * size + kHeapPageSize - 1) / kHeapPageSize);
  while ((pages * kHeapPageSize) % size > pages * kHeapPageSize / 16)
    ++pages;
  info.span_pages = static_cast<std::uint32_t>(pages);
  info.capacity = static_cast<std::uint32_t>(pages * kHeapPageSize / size);
  const std::size_t batch_bytes = std::size_t{info.batch} * size;
  info.max_slots =
      static_cast<std::uint32_t>(std::clamp<std::size_t>(64 * 1024 / batch_bytes, 1, 64));
  info.divisor = UINT64_MAX / size + 1;
  return info;
}

constexpr std::array<HeapClassInfo, kHeapClassCount> make_heap_class_infos() noexcept {
  std::array<HeapClassInfo, kHeapClassCount> infos{};
  for (std::size_t c = 0; c < kHeapClassCount; ++c)
    infos[c] = make_heap_class_info(c);
  return infos;
}

inline constexpr std::array<HeapClassInfo, kHeapClassCount> kHeapClasses = make_heap_class_infos();
inline constexpr std::uint32_t kMaxCentralSlots = 64;

// Spans stay below 4 GiB, where the divisibility test is exact.
static_assert(kHeapClasses[kHeapClassCount - 1].span_pages * kHeapPageSize <
              (std::size_t{1} << 32));

}  // namespace mempool::detail
