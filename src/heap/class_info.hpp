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

// The most blocks a batch has (the smallest classes').
inline constexpr std::uint32_t kHeapMaxBatch = 64;

struct HeapClassInfo {
  std::uint32_t size = 0;
  std::uint32_t batch = 0;        // blocks per transfer: 64 KiB worth, between 2 and 64
  std::uint32_t least_fetch = 0;  // fewest blocks a refill takes: 1 KiB worth
  std::uint32_t span_pages = 0;   // pages per span
  std::uint32_t capacity = 0;     // blocks per span
  // Full batches the central cache keeps: 64 KiB worth (1 MiB for blocks of 64 KiB and
  // more), 1 to 64; and after it grows them, 512 KiB worth (at least max_slots), up to 64.
  std::uint32_t max_slots = 0;
  std::uint32_t max_grown_slots = 0;
  std::uint64_t divisor = 0;
};

// The classes of blocks this large keep up to kHeapKeptLargeBytes of batches in the
// central cache, not 64 KiB (make_heap_class_info).
inline constexpr std::size_t kHeapKeptLargeMin = std::size_t{64} << 10;
inline constexpr std::size_t kHeapKeptLargeBytes = std::size_t{1} << 20;

constexpr HeapClassInfo make_heap_class_info(std::size_t c) noexcept {
  HeapClassInfo info;
  if (c == 0) return info;
  const std::size_t size = heap_class_bytes(c);
  info.size = static_cast<std::uint32_t>(size);
  info.batch =
      static_cast<std::uint32_t>(std::clamp<std::size_t>(64 * 1024 / size, 2, kHeapMaxBatch));
  info.least_fetch =
      static_cast<std::uint32_t>(std::clamp<std::size_t>(1024 / size, 1, info.batch));
  // At least 8 KiB and 8 blocks per span, and 32 blocks where that stays within 16 KiB,
  // then more pages until the unusable tail is at most 1/16 of the span. (Spans of 8
  // blocks of 1 KiB cost a page-heap allocation and free every 8 blocks: 100 threads
  // that each carved and freed 2 MiB of them ran 65 million instructions, 51 with 16
  // blocks a span; mimalloc 45. A 32 KiB bound gave 44, but sqlite's peak RSS grew 5%.)
  const std::size_t least_bytes = std::max(8 * size, std::min(32 * size, std::size_t{16} << 10));
  std::size_t pages = std::max<std::size_t>(1, (least_bytes + kHeapPageSize - 1) / kHeapPageSize);
  while ((pages * kHeapPageSize) % size > pages * kHeapPageSize / 16)
    ++pages;
  info.span_pages = static_cast<std::uint32_t>(pages);
  info.capacity = static_cast<std::uint32_t>(pages * kHeapPageSize / size);
  const std::size_t batch_bytes = std::size_t{info.batch} * size;
  // Blocks of 64 KiB and more move two at a time (128-512 KiB a batch), so 64 KiB of kept
  // batches was one batch: most of their frees went back to the spans, their spans to the
  // page heap, and the next allocations took them again, a lock and a carve each time
  // (mempool-bench throughput, 8 B-256 KiB in a window of 1024 live blocks:
  // remove_range and insert_range 22% of the time). With 1 MiB a class, as tcmalloc's
  // transfer cache keeps, the same blocks come back instead of fresh spans: AMD EPYC family
  // 26 model 2, 5 rounds, 54.4 [47.9-54.6] -> 45.1 [44.4-49.4] ns an operation, peak RSS
  // 74.5 [71.1-79.8] -> 57.5 [50.1-58.7] MiB (docs/performance.md, "Kept batches of
  // 1 MiB"). Only these 17 classes: 1 MiB for every class held the fragmentation
  // benchmark at 1.33x its live bytes, not 1.20x (heap_tiers_test), and for the classes
  // from 16 KiB up, 2 MiB more of its peak. The cost: kept batches pin their spans, and with
  // blocks up to 256 KiB (`fragmentation --size=262144`) its peak is 4.7% higher.
  const std::size_t kept_bytes = size >= kHeapKeptLargeMin ? kHeapKeptLargeBytes : 64 * 1024;
  info.max_slots =
      static_cast<std::uint32_t>(std::clamp<std::size_t>(kept_bytes / batch_bytes, 1, 64));
  info.max_grown_slots = static_cast<std::uint32_t>(
      std::clamp<std::size_t>(512 * 1024 / batch_bytes, info.max_slots, 64));
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

// The hit paths test (offset * divisor) >> kSpanBlockStartBits == 0 (span.hpp): exact
// for every offset into a span of `bytes` whose blocks lie `stride` apart when, with
// e = stride * divisor - 2^64 (the rounding, below stride) and k + 1 blocks at most:
// a block start k * stride gives k * e, below 2^32; any other offset k * stride + r
// gives r * divisor + k * e without wrapping ((k + 1) * e < divisor), at least the
// divisor, which is at least 2^32. (Checked over every offset by heap_api_test too.)
constexpr bool heap_block_start_test_exact(std::size_t stride, std::size_t bytes) noexcept {
  const std::uint64_t divisor = UINT64_MAX / stride + 1;
  const std::uint64_t e = stride * divisor;
  const std::uint64_t blocks = bytes / stride + 1;
  const std::uint64_t limit = std::uint64_t{1} << kSpanBlockStartBits;
  return bytes < limit && blocks * e < limit && blocks * e < divisor && divisor >= limit;
}
// Every class, at its own stride and at a wider one (the hardened build's guarded
// spans lay blocks `pad` bytes further apart).
constexpr bool heap_block_start_tests_exact(std::size_t pad) noexcept {
  for (std::size_t c = 1; c < kHeapClassCount; ++c) {
    const std::size_t bytes = std::size_t{kHeapClasses[c].span_pages} * kHeapPageSize;
    if (!heap_block_start_test_exact(kHeapClasses[c].size + pad, bytes)) return false;
  }
  return true;
}
static_assert(heap_block_start_tests_exact(0));

}  // namespace mempool::detail
