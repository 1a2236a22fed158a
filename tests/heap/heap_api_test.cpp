// The contract of the general heap (include/mempool/heap.hpp, include/mempool/mempool.h),
// function by function, through the public API only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "heap_test_util.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"

namespace mempool {
namespace {

using heap_test::fill_pattern;
using heap_test::first_mismatch;
using heap_test::kGiB;
using heap_test::kKiB;
using heap_test::kMiB;
using heap_test::kNoMismatch;

// What the heap promises without an asked alignment: 16 bytes for blocks of 16
// bytes or more, 8 below.
std::size_t default_alignment(std::size_t n) {
  return n >= 16 ? 16 : 8;
}

using mempool_test::is_aligned;

// Reading big blocks back word by word under a sanitizer costs seconds; there,
// blocks over 64 KiB are read at their edges and every 61st word.
std::size_t read_stride(std::size_t n) {
  return heap_test::kSanitized && n > 64 * kKiB ? 61 : 1;
}

// A fresh block of n bytes: not null, aligned to `alignment`, usable_size >= n;
// the whole usable size is written with the pattern of `seed`.
void check_fresh(void* p, std::size_t n, std::size_t alignment, std::uint64_t seed,
                 std::size_t* usable) {
  ASSERT_NE(p, nullptr) << "n=" << n;
  ASSERT_TRUE(is_aligned(p, alignment)) << "n=" << n << " p=" << p << " alignment " << alignment;
  *usable = usable_size(p);
  ASSERT_GE(*usable, n) << "n=" << n;
  ASSERT_EQ(mp_usable_size(p), *usable);
  fill_pattern(p, *usable, seed);
}

struct Live {
  void* p;
  std::size_t n;
  std::size_t usable;
  std::uint64_t seed;
};

// Live blocks must not overlap over their usable sizes.
void expect_disjoint(const std::vector<Live>& live) {
  std::vector<std::pair<const void*, std::size_t>> ranges;
  ranges.reserve(live.size());
  for (const Live& b : live)
    ranges.emplace_back(b.p, b.usable);
  const auto [a, b] = heap_test::find_overlap(ranges);
  EXPECT_EQ(a, b) << "blocks overlap: " << ranges[a].first << " (" << ranges[a].second
                  << " bytes) and " << ranges[b].first;
}

void check_intact(const Live& b) {
  const std::size_t at = first_mismatch(b.p, b.usable, b.seed, read_stride(b.usable));
  ASSERT_EQ(at, kNoMismatch) << "block " << b.p << " of " << b.n << " bytes changed at offset "
                             << at;
}

// Frees with the size-free, the sized and the C call in turn.
void free_variant(const Live& b, unsigned variant) {
  switch (variant % 3) {
    case 0:
      deallocate(b.p);
      break;
    case 1:
      deallocate(b.p, b.n);
      break;
    default:
      mp_free(b.p);
      break;
  }
}

// allocate, try_allocate and mp_malloc in turn.
void* allocate_variant(std::size_t n, unsigned variant) {
  switch (variant % 3) {
    case 0:
      return allocate(n);
    case 1:
      return try_allocate(n);
    default:
      return mp_malloc(n);
  }
}

void expect_consistent(const HeapStats& s);

// ---- Sizes ------------------------------------------------------------------

// Every size from 1 to 4096, all live at once: aligned, disjoint, and every byte
// of the usable size kept until the free.
TEST(HeapApi, EverySizeTo4096) {
  std::vector<Live> live;
  for (std::size_t n = 1; n <= 4096; ++n) {
    void* p = allocate_variant(n, static_cast<unsigned>(n));
    std::size_t usable = 0;
    ASSERT_NO_FATAL_FAILURE(check_fresh(p, n, default_alignment(n), n, &usable));
    live.push_back({p, n, usable, n});
  }
  expect_disjoint(live);
  for (const Live& b : live) {
    ASSERT_NO_FATAL_FAILURE(check_intact(b));
    free_variant(b, static_cast<unsigned>(b.n / 3));
  }
}

std::vector<std::size_t> sizes_4k_to_1m() {
  std::vector<std::size_t> sizes;
  std::size_t k = 0;
  for (std::size_t n = 4096; n <= kMiB; n += 7 + (k++ * 389) % 994)
    sizes.push_back(n);
  for (std::size_t edge :
       {std::size_t{8191}, std::size_t{8192}, std::size_t{8193}, std::size_t{16384},
        std::size_t{32767}, std::size_t{32768}, std::size_t{32769}, std::size_t{65535},
        std::size_t{65536}, std::size_t{65537}, std::size_t{131072}, kHeapMaxSmallSize - 1,
        kHeapMaxSmallSize, kHeapMaxSmallSize + 1, kHeapMaxSmallSize + 4096, kMiB - 1, kMiB}) {
    sizes.push_back(edge);
  }
  return sizes;
}

// Sizes from 4 KiB to 1 MiB in uneven steps (7 to 1000 bytes) and at the edges
// of the small sizes: each aligned, its whole usable size written, checked while
// the 16 blocks allocated before it are live.
TEST(HeapApi, SizesTo1MiB) {
  const std::vector<std::size_t> sizes = sizes_4k_to_1m();
  std::vector<Live> window;
  unsigned k = 0;
  for (std::size_t n : sizes) {
    ++k;
    void* p = allocate_variant(n, k);
    std::size_t usable = 0;
    ASSERT_NO_FATAL_FAILURE(check_fresh(p, n, default_alignment(n), k, &usable));
    window.push_back({p, n, usable, k});
    if (window.size() > 16) {
      expect_disjoint(window);
      // expect_disjoint sorted the window by address: free a pseudo-random one.
      const std::size_t i = (k * 7) % window.size();
      ASSERT_NO_FATAL_FAILURE(check_intact(window[i]));
      free_variant(window[i], k);
      window.erase(window.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  for (const Live& b : window) {
    ASSERT_NO_FATAL_FAILURE(check_intact(b));
    free_variant(b, 0);
  }
}

// Above 1 MiB: the whole block written up to 64 MiB; of 1 GiB the first and the
// last page.
TEST(HeapApi, HugeSizes) {
  for (std::size_t n : {2 * kMiB, 2 * kMiB + 1, 16 * kMiB, 64 * kMiB - 3}) {
    for (unsigned variant = 0; variant < 3; ++variant) {
      void* p = allocate_variant(n, variant);
      std::size_t usable = 0;
      ASSERT_NO_FATAL_FAILURE(check_fresh(p, n, 16, n + variant, &usable));
      ASSERT_NO_FATAL_FAILURE(check_intact({p, n, usable, n + variant}));
      free_variant({p, n, usable, 0}, variant);
    }
  }
  for (unsigned variant = 0; variant < 3; ++variant) {
    const std::size_t n = kGiB;
    auto* p = static_cast<unsigned char*>(allocate_variant(n, variant));
    ASSERT_NE(p, nullptr) << "1 GiB, variant " << variant;
    ASSERT_TRUE(is_aligned(p, 16));
    const std::size_t usable = usable_size(p);
    ASSERT_GE(usable, n);
    p[usable - 1] = 0x5a;
    EXPECT_EQ(p[usable - 1], 0x5a);
    fill_pattern(p, 4096, 1);
    fill_pattern(p + n - 4096, 4096, 2);
    EXPECT_EQ(first_mismatch(p, 4096, 1), kNoMismatch);
    EXPECT_EQ(first_mismatch(p + n - 4096, 4096, 2), kNoMismatch);
    free_variant({p, n, usable, 0}, variant);
  }
}

// ---- Alignment --------------------------------------------------------------

// Every power of two from 1 to 1 MiB (and 2 and 16 MiB), with sizes below, at and
// above it, through all four aligned calls: exactly that alignment (and 16 bytes
// for blocks of 16 or more), usable_size >= n, the usable size writable.
TEST(HeapApi, EveryPowerOfTwoAlignment) {
  std::vector<std::size_t> alignments;
  for (std::size_t a = 1; a <= kMiB; a *= 2)
    alignments.push_back(a);
  alignments.push_back(2 * kMiB);
  alignments.push_back(16 * kMiB);
  std::uint64_t seed = 0;
  for (std::size_t a : alignments) {
    std::vector<std::size_t> sizes = {1, 8, 16, 24, 100, 5000};
    if (a <= kMiB) {
      for (std::size_t n : {a, a + 1, 3 * a / 2 + 8})
        sizes.push_back(n);
      if (a > 1) sizes.push_back(a - 1);
    }
    if (a <= 64 * kKiB) sizes.push_back(300 * kKiB);
    std::vector<Live> live;
    for (std::size_t n : sizes) {
      for (unsigned variant = 0; variant < 4; ++variant) {
        void* p = nullptr;
        switch (variant) {
          case 0:
            p = allocate(n, std::align_val_t{a});
            break;
          case 1:
            p = try_allocate(n, std::align_val_t{a});
            break;
          case 2:
            errno = 0;
            p = mp_aligned_alloc(a, n);
            break;
          default:
            if (a < sizeof(void*)) continue;  // not a posix_memalign alignment
            ASSERT_EQ(mp_posix_memalign(&p, a, n), 0) << "alignment " << a << " n=" << n;
            break;
        }
        std::size_t usable = 0;
        ASSERT_NO_FATAL_FAILURE(
            check_fresh(p, n, std::max(a, default_alignment(n)), ++seed, &usable))
            << "alignment " << a << " variant " << variant;
        live.push_back({p, n, usable, seed});
      }
    }
    expect_disjoint(live);
    // Freed the way aligned blocks may be: sized with their alignment (the size
    // asked for or the usable size), size-free, or from C. (A sized free without
    // the alignment names another class: misuse, caught in checked builds.)
    unsigned k = 0;
    for (const Live& b : live) {
      ASSERT_NO_FATAL_FAILURE(check_intact(b));
      switch (k++ % 4) {
        case 0:
          deallocate(b.p, b.n, std::align_val_t{a});
          break;
        case 1:
          deallocate(b.p);
          break;
        case 2:
          deallocate(b.p, b.usable, std::align_val_t{a});
          break;
        default:
          mp_free(b.p);
          break;
      }
    }
  }
}

// An alignment that is not a power of two (or none can satisfy) is refused:
// std::bad_alloc from allocate, nullptr from try_allocate.
TEST(HeapApi, BadAlignmentIsRefused) {
  for (std::size_t a : {std::size_t{0}, std::size_t{3}, std::size_t{24}, std::size_t{48},
                        std::size_t{4097}, SIZE_MAX}) {
    EXPECT_THROW((void)allocate(16, std::align_val_t{a}), std::bad_alloc) << "alignment " << a;
    EXPECT_EQ(try_allocate(16, std::align_val_t{a}), nullptr) << "alignment " << a;
  }
  for (std::size_t a : {std::size_t{1} << 62, std::size_t{1} << 63}) {
    EXPECT_THROW((void)allocate(1, std::align_val_t{a}), std::bad_alloc) << "alignment " << a;
    EXPECT_EQ(try_allocate(1, std::align_val_t{a}), nullptr) << "alignment " << a;
    errno = 0;
    EXPECT_EQ(mp_aligned_alloc(a, 1), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
}

TEST(HeapApi, AlignedAllocRefusesBadAlignment) {
  for (std::size_t a : {std::size_t{0}, std::size_t{3}, std::size_t{24}, std::size_t{48},
                        std::size_t{100}, SIZE_MAX}) {
    errno = 0;
    EXPECT_EQ(mp_aligned_alloc(a, 64), nullptr) << "alignment " << a;
    EXPECT_EQ(errno, EINVAL) << "alignment " << a;
  }
}

TEST(HeapApi, PosixMemalign) {
  void* const untouched = reinterpret_cast<void*>(std::uintptr_t{0x1234560});
  // Not a power of two, or less than sizeof(void*): EINVAL, *out untouched.
  for (std::size_t a :
       {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{4},
        std::size_t{12}, std::size_t{24}, std::size_t{40}, std::size_t{4095}, SIZE_MAX}) {
    void* out = untouched;
    errno = 0;
    EXPECT_EQ(mp_posix_memalign(&out, a, 64), EINVAL) << "alignment " << a;
    EXPECT_EQ(out, untouched) << "alignment " << a;
  }
  // Out of memory: ENOMEM, *out untouched.
  for (std::size_t n : {SIZE_MAX, SIZE_MAX / 2, std::size_t{1} << 62}) {
    void* out = untouched;
    EXPECT_EQ(mp_posix_memalign(&out, 64, n), ENOMEM) << "n=" << n;
    EXPECT_EQ(out, untouched);
  }
  // Size 0: success, and what comes back can be freed.
  void* out = untouched;
  ASSERT_EQ(mp_posix_memalign(&out, 64, 0), 0);
  EXPECT_NE(out, untouched);
  EXPECT_TRUE(is_aligned(out, 64));
  mp_free(out);
}

// ---- Zero, null, absurd -----------------------------------------------------

// mp_malloc(0) and allocate(0): non-null and unique while live.
TEST(HeapApi, ZeroSizeIsUniqueAndNonNull) {
  std::set<void*> seen;
  std::vector<void*> blocks;
  for (int i = 0; i < 300; ++i) {
    void* p = i % 3 == 0 ? mp_malloc(0) : i % 3 == 1 ? allocate(0) : try_allocate(0);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(is_aligned(p, 8));
    ASSERT_TRUE(seen.insert(p).second) << "zero-size block handed out twice: " << p;
    blocks.push_back(p);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (i % 3 == 0) {
      mp_free(blocks[i]);
    } else if (i % 3 == 1) {
      deallocate(blocks[i], 0);
    } else {
      deallocate(blocks[i]);
    }
  }
}

TEST(HeapApi, NullIsIgnored) {
  mp_free(nullptr);
  deallocate(nullptr);
  deallocate(nullptr, 64);
  deallocate(nullptr, 64, std::align_val_t{128});
  EXPECT_EQ(usable_size(nullptr), 0u);
  EXPECT_EQ(mp_usable_size(nullptr), 0u);
}

// Sizes no address space can hold: nullptr and ENOMEM from C and try_allocate,
// std::bad_alloc from allocate, for every call that allocates.
TEST(HeapApi, AbsurdSizes) {
  void* keep = mp_malloc(100);
  ASSERT_NE(keep, nullptr);
  fill_pattern(keep, 100, 77);
  for (std::size_t n : {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4096, SIZE_MAX / 2, SIZE_MAX / 2 + 1,
                        std::size_t{1} << 62, std::size_t{1} << 48}) {
    EXPECT_EQ(try_allocate(n), nullptr) << "n=" << n;
    EXPECT_EQ(try_allocate(n, std::align_val_t{64}), nullptr) << "n=" << n;
    EXPECT_EQ(try_allocate(n, std::align_val_t{8 * kMiB}), nullptr) << "n=" << n;
    EXPECT_THROW((void)allocate(n), std::bad_alloc) << "n=" << n;
    EXPECT_THROW((void)allocate(n, std::align_val_t{4096}), std::bad_alloc) << "n=" << n;
    errno = 0;
    EXPECT_EQ(mp_malloc(n), nullptr) << "n=" << n;
    EXPECT_EQ(errno, ENOMEM) << "n=" << n;
    errno = 0;
    EXPECT_EQ(mp_calloc(1, n), nullptr) << "n=" << n;
    EXPECT_EQ(errno, ENOMEM) << "n=" << n;
    errno = 0;
    EXPECT_EQ(mp_aligned_alloc(64, n), nullptr) << "n=" << n;
    EXPECT_EQ(errno, ENOMEM) << "n=" << n;
    errno = 0;
    EXPECT_EQ(mp_realloc(keep, n), nullptr) << "n=" << n;
    EXPECT_EQ(errno, ENOMEM) << "n=" << n;
    EXPECT_EQ(first_mismatch(keep, 100, 77), kNoMismatch) << "a failed realloc changed the block";
    EXPECT_GE(usable_size(keep), 100u);
  }
  mp_free(keep);
}

// ---- calloc -----------------------------------------------------------------

bool all_zero(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, b + i, 8);
    if (w != 0) return false;
  }
  for (; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

TEST(HeapApi, CallocZeroesFreshBlocks) {
  for (std::size_t count : {1u, 3u, 10u, 1000u}) {
    for (std::size_t size : {1u, 8u, 13u, 64u, 1000u, 4096u, 70000u}) {
      void* p = mp_calloc(count, size);
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(is_aligned(p, default_alignment(count * size)));
      ASSERT_GE(mp_usable_size(p), count * size);
      ASSERT_TRUE(all_zero(p, count * size)) << count << " x " << size;
      mp_free(p);
    }
  }
}

// Blocks dirtied with 0xff and freed come back zeroed from calloc, again and
// again, in small, medium and large sizes (and through the thread cache, the
// central cache and the page heap).
TEST(HeapApi, CallocZeroesReusedBlocks) {
  const int rounds = heap_test::kSanitized ? 10 : 40;
  for (std::size_t n : {std::size_t{8}, std::size_t{24}, std::size_t{64}, std::size_t{100},
                        std::size_t{1000}, std::size_t{4096}, std::size_t{5000}, std::size_t{65536},
                        std::size_t{300 * kKiB}, 2 * kMiB, 9 * kMiB, 20 * kMiB}) {
    const int batch = n <= 65536 ? 64 : n <= kMiB ? 4 : 2;
    for (int round = 0; round < rounds; ++round) {
      std::vector<void*> dirty;
      for (int i = 0; i < batch; ++i) {
        void* p = mp_malloc(n);
        ASSERT_NE(p, nullptr);
        std::memset(p, 0xff, mp_usable_size(p));
        dirty.push_back(p);
      }
      for (void* p : dirty)
        mp_free(p);
      std::vector<void*> clean;
      for (int i = 0; i < batch; ++i) {
        void* p = (i & 1) != 0 ? mp_calloc(1, n) : mp_calloc(n / 4 + (n % 4 != 0), 4);
        ASSERT_NE(p, nullptr);
        ASSERT_TRUE(all_zero(p, n)) << "calloc of " << n << " bytes, round " << round;
        std::memset(p, 0xff, n);
        clean.push_back(p);
      }
      for (void* p : clean)
        mp_free(p);
    }
    if (n > 65536) collect();  // and once more from pages given back to the OS
  }
}

TEST(HeapApi, CallocOverflowIsEnomem) {
  const std::pair<std::size_t, std::size_t> cases[] = {
      {SIZE_MAX / 2 + 1, 2}, {2, SIZE_MAX / 2 + 1}, {std::size_t{1} << 33, std::size_t{1} << 33},
      {SIZE_MAX, SIZE_MAX},  {SIZE_MAX, 2},         {65537, SIZE_MAX / 65536},
  };
  for (const auto& [count, size] : cases) {
    errno = 0;
    EXPECT_EQ(mp_calloc(count, size), nullptr) << count << " x " << size;
    EXPECT_EQ(errno, ENOMEM) << count << " x " << size;
  }
  // Zero elements or zero-size elements: as mp_malloc(0) (mempool.h), a unique pointer
  // to a block of the heap, live until it is freed.
  void* zero[3] = {mp_calloc(0, 16), mp_calloc(16, 0), mp_calloc(0, SIZE_MAX)};
  for (void* p : zero) {
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(owns(p));
  }
  EXPECT_NE(zero[0], zero[1]);
  EXPECT_NE(zero[1], zero[2]);
  EXPECT_NE(zero[0], zero[2]);
  for (void* p : zero)
    mp_free(p);
}

// ---- realloc ----------------------------------------------------------------

// Reallocates one block through `sizes`: every byte of the min(old, new) prefix
// survives each step, the new block is aligned and usable over the new size.
void realloc_through(const std::vector<std::size_t>& sizes, std::uint64_t seed) {
  std::size_t n = sizes.front();
  void* p = mp_realloc(nullptr, n);
  ASSERT_NE(p, nullptr) << "realloc(NULL, " << n << ")";
  fill_pattern(p, n, seed);
  for (std::size_t i = 1; i < sizes.size(); ++i) {
    const std::size_t m = sizes[i];
    void* q = mp_realloc(p, m);
    ASSERT_NE(q, nullptr) << n << " -> " << m;
    ASSERT_TRUE(is_aligned(q, default_alignment(m))) << n << " -> " << m;
    ASSERT_GE(mp_usable_size(q), m) << n << " -> " << m;
    const std::size_t keep = std::min(n, m);
    const std::size_t at = first_mismatch(q, keep, seed, read_stride(keep));
    ASSERT_EQ(at, kNoMismatch) << "realloc " << n << " -> " << m << " lost byte " << at;
    fill_pattern(q, m, ++seed);
    p = q;
    n = m;
  }
  mp_free(p);
}

// A block allocated on one thread and reallocated on another, smaller, the same and
// larger (within its class, across classes, into large sizes and back), with the
// realloc as the new thread's very first call into the heap: the prefix survives, and
// the block the other thread ends with is freed there.
TEST(HeapApi, ReallocOfABlockFromAnotherThread) {
  const std::size_t sizes[] = {1, 24, 100, 1000, 5000, 40000, 300000, 3 * kMiB};
  for (const std::size_t n : sizes) {
    for (const std::size_t m : {n / 2 + 1, n, n + 1, 2 * n, n + 70000}) {
      const std::uint64_t seed = n * 31 + m;
      void* p = mp_malloc(n);
      ASSERT_NE(p, nullptr) << n;
      fill_pattern(p, n, seed);
      void* q = nullptr;
      std::thread([&] { q = mp_realloc(p, m); }).join();  // its first call
      ASSERT_NE(q, nullptr) << n << " -> " << m;
      ASSERT_GE(mp_usable_size(q), m) << n << " -> " << m;
      const std::size_t at = first_mismatch(q, std::min(n, m), seed);
      EXPECT_EQ(at, kNoMismatch) << n << " -> " << m << " on another thread lost byte " << at;
      mp_free(q);
    }
  }
  // And the other way: many blocks from short-lived threads, reallocated here and by a
  // second thread whose first call is a realloc.
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::thread([&blocks] {
    for (std::size_t i = 0; i < 2000; ++i) {
      const std::size_t n = 1 + (i * 37) % 3000;
      void* p = mp_malloc(n);
      fill_pattern(p, n, i);
      blocks.emplace_back(p, n);
    }
  }).join();
  std::size_t damaged = 0;
  std::thread([&blocks, &damaged] {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      auto& [p, n] = blocks[i];
      const std::size_t m = i % 2 == 0 ? n * 3 : n / 3 + 1;
      p = mp_realloc(p, m);
      if (p == nullptr || first_mismatch(p, std::min(n, m), i) != kNoMismatch) ++damaged;
      n = m;
    }
  }).join();
  EXPECT_EQ(damaged, 0u);
  for (const auto& [p, n] : blocks)
    mp_free(p);
}

TEST(HeapApi, ReallocAcrossClassesAndIntoLargeSizes) {
  const std::vector<std::size_t> up = {1,         7,
                                       8,         9,
                                       15,        16,
                                       17,        24,
                                       31,        32,
                                       33,        48,
                                       64,        65,
                                       100,       128,
                                       129,       255,
                                       256,       257,
                                       512,       513,
                                       1000,      1024,
                                       1025,      2048,
                                       2049,      4095,
                                       4096,      4097,
                                       8192,      8193,
                                       16385,     32769,
                                       65537,     131073,
                                       262143,    262144,
                                       262145,    300000,
                                       524289,    kMiB,
                                       kMiB + 1,  3 * kMiB,
                                       17 * kMiB, 17 * kMiB + 4097};
  ASSERT_NO_FATAL_FAILURE(realloc_through(up, 1));
  std::vector<std::size_t> down(up.rbegin(), up.rend());
  ASSERT_NO_FATAL_FAILURE(realloc_through(down, 1000));
  // Jumps both ways between far-apart sizes.
  const std::vector<std::size_t> jumps = {3,       5 * kMiB, 40, 300000,       16,  1 << 20,
                                          1 << 12, 70000,    9,  2 * kMiB + 3, 100, 1};
  ASSERT_NO_FATAL_FAILURE(realloc_through(jumps, 2000));
  // The same size, and the usable size: in place or not, nothing is lost.
  for (std::size_t n : {std::size_t{24}, std::size_t{1000}, std::size_t{70000}, 2 * kMiB}) {
    void* p = mp_malloc(n);
    ASSERT_NE(p, nullptr);
    const std::size_t usable = mp_usable_size(p);
    mp_free(p);
    ASSERT_NO_FATAL_FAILURE(realloc_through({n, n, usable, usable, n + 1, n}, n));
  }
}

// A random walk of sizes (log-uniform, 1 byte to 2 MiB).
TEST(HeapApi, ReallocRandomWalk) {
  std::uint64_t x = 88172645463325252ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::vector<std::size_t> sizes;
  const int steps = heap_test::kSanitized ? 400 : 2000;
  for (int i = 0; i < steps; ++i) {
    const unsigned bits = static_cast<unsigned>(next() % 21);
    sizes.push_back(1 + next() % (std::size_t{2} << bits));
  }
  ASSERT_NO_FATAL_FAILURE(realloc_through(sizes, 5));
}

// realloc of a block from the aligned calls keeps the contents too.
TEST(HeapApi, ReallocOfAlignedBlocks) {
  for (std::size_t a : {std::size_t{64}, std::size_t{4096}, std::size_t{65536}}) {
    void* p = mp_aligned_alloc(a, 200);
    ASSERT_NE(p, nullptr);
    fill_pattern(p, 200, a);
    void* q = mp_realloc(p, 100000);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(first_mismatch(q, 200, a), kNoMismatch);
    fill_pattern(q, 100000, a + 1);
    void* r = mp_realloc(q, 50);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(first_mismatch(r, 50, a + 1), kNoMismatch);
    mp_free(r);
  }
}

// A block from mp_realloc(p, m) may be freed with deallocate(q, m), the size
// asked for (mp_realloc keeps a block in place only where that stays right):
// shrinking from a large block to a small size and growing from small to large
// included. Nothing leaks, and the heap's counts come back.
TEST(HeapApi, SizedFreeAfterRealloc) {
  const std::pair<std::size_t, std::size_t> cases[] = {
      {100, 90},
      {100, 120},
      {5000, 4000},
      {4000, 70000},
      {310020, 234190},
      {300000, 200000},
      {kHeapMaxSmallSize + 1, kHeapMaxSmallSize},
      {2 * kMiB, 300000},
      {2 * kMiB, 1500000},
      {200000, 2 * kMiB},
      {20 * kMiB, 12 * kMiB},
      {20 * kMiB, 200000},
      {64, 20 * kMiB},
  };
  const HeapStats before = stats();
  for (const auto& [from, to] : cases) {
    for (int i = 0; i < 4; ++i) {
      void* p = allocate(from);
      fill_pattern(p, from, from);
      void* q = mp_realloc(p, to);
      ASSERT_NE(q, nullptr);
      ASSERT_EQ(first_mismatch(q, std::min(from, to), from), kNoMismatch);
      deallocate(q, to);
    }
    collect();  // the thread cache's blocks go back to their spans
    const HeapStats after = stats();
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use) << from << " -> " << to;
    EXPECT_EQ(after.large_blocks_in_use, before.large_blocks_in_use) << from << " -> " << to;
    expect_consistent(after);
  }
}

// realloc(p, 0) frees p and returns NULL (as glibc); realloc(NULL, n) allocates.
TEST(HeapApi, ReallocZeroFreesAndNullAllocates) {
  for (std::size_t n : {std::size_t{1}, std::size_t{64}, std::size_t{5000}, 2 * kMiB}) {
    const std::size_t before = stats().bytes_in_use;
    void* p = mp_realloc(nullptr, n);
    ASSERT_NE(p, nullptr);
    ASSERT_GE(mp_usable_size(p), n);
    fill_pattern(p, n, n);
    EXPECT_GE(stats().bytes_in_use, before + n);
    EXPECT_EQ(mp_realloc(p, 0), nullptr);
    EXPECT_EQ(stats().bytes_in_use, before) << "realloc(p, 0) did not free a block of " << n;
  }
  mp_free(mp_realloc(nullptr, 0));  // malloc(0): unique or NULL, either can be freed
}

// ---- Sized free, collect, threads -------------------------------------------

// deallocate(p, n) with the size asked for and with usable_size(p), and
// deallocate(p, n, alignment) of aligned blocks: the heap stays sound (the same
// sizes allocate again, disjoint, and bytes_in_use returns to where it was).
TEST(HeapApi, SizedDeallocate) {
  const std::size_t before = stats().bytes_in_use;
  for (int round = 0; round < 3; ++round) {
    std::vector<Live> live;
    std::uint64_t seed = 0;
    for (std::size_t n : {std::size_t{1}, std::size_t{8}, std::size_t{17}, std::size_t{100},
                          std::size_t{4000}, std::size_t{40000}, std::size_t{300000}, 3 * kMiB}) {
      for (int i = 0; i < 8; ++i) {
        void* p = allocate(n);
        std::size_t usable = 0;
        ASSERT_NO_FATAL_FAILURE(check_fresh(p, n, default_alignment(n), ++seed, &usable));
        live.push_back({p, n, usable, seed});
      }
    }
    expect_disjoint(live);
    for (std::size_t i = 0; i < live.size(); ++i) {
      ASSERT_NO_FATAL_FAILURE(check_intact(live[i]));
      deallocate(live[i].p, (i & 1) != 0 ? live[i].usable : live[i].n);
    }
  }
  for (std::size_t a : {std::size_t{32}, std::size_t{256}, std::size_t{4096}, 2 * kMiB}) {
    std::vector<void*> blocks;
    for (std::size_t n : {std::size_t{10}, std::size_t{500}, std::size_t{70000}})
      blocks.push_back(allocate(n, std::align_val_t{a}));
    deallocate(blocks[0], 10, std::align_val_t{a});
    deallocate(blocks[1], 500, std::align_val_t{a});
    deallocate(blocks[2], 70000, std::align_val_t{a});
  }
  EXPECT_EQ(stats().bytes_in_use, before);
}

// N is a compile-time constant here, so allocate(N), try_allocate(N) and
// deallocate(p, N) take heap.hpp's inline hit path (in optimised, unchecked
// builds). Their blocks must mix with every other path: freed size-free, with a
// run-time size and from another thread, and `count` of them run the thread
// cache dry and over its threshold (refills and flushes behind the inline path).
template <std::size_t N>
void mix_constant_size_with_other_paths(int count, std::uint64_t* seed) {
  const volatile std::size_t runtime_n = N;  // the same size, unknown to the compiler
  std::vector<Live> live;
  for (int i = 0; i < count; ++i) {
    void* p = (i & 1) != 0 ? try_allocate(N) : allocate(N);
    std::size_t usable = 0;
    ASSERT_NO_FATAL_FAILURE(check_fresh(p, N, default_alignment(N), ++*seed, &usable));
    live.push_back({p, N, usable, *seed});
  }
  expect_disjoint(live);
  std::vector<Live> for_other_thread;
  for (std::size_t i = 0; i < live.size(); ++i) {
    ASSERT_NO_FATAL_FAILURE(check_intact(live[i]));
    switch (i % 4) {
      case 0:
        deallocate(live[i].p, N);
        break;
      case 1:
        deallocate(live[i].p);
        break;
      case 2:
        deallocate(live[i].p, runtime_n);
        break;
      default:
        for_other_thread.push_back(live[i]);
    }
  }
  std::thread([&] {
    for (const Live& b : for_other_thread) {
      check_intact(b);
      deallocate(b.p, N);
    }
  }).join();
  // The blocks pushed by the inline path come back out of it, intact from here.
  void* again = allocate(N);
  ASSERT_NE(again, nullptr);
  deallocate(again, N);
}

TEST(HeapApi, ConstantSizesMixWithEveryOtherPath) {
  const HeapStats before = stats();
  std::uint64_t seed = 0;
  ASSERT_NO_FATAL_FAILURE(mix_constant_size_with_other_paths<1>(5000, &seed));
  ASSERT_NO_FATAL_FAILURE(mix_constant_size_with_other_paths<16>(5000, &seed));
  ASSERT_NO_FATAL_FAILURE(mix_constant_size_with_other_paths<64>(5000, &seed));
  ASSERT_NO_FATAL_FAILURE(mix_constant_size_with_other_paths<4096>(1000, &seed));
  ASSERT_NO_FATAL_FAILURE(mix_constant_size_with_other_paths<kHeapMaxSmallSize>(24, &seed));
  ASSERT_NO_FATAL_FAILURE(mix_constant_size_with_other_paths<kHeapMaxSmallSize + 1>(8, &seed));
  const HeapStats after = stats();
  expect_consistent(after);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  for (std::size_t c = 0; c < after.class_count; ++c) {
    EXPECT_EQ(after.classes[c].blocks_in_use, before.classes[c].blocks_in_use)
        << "class of " << after.classes[c].block_size << " bytes";
  }
}

// collect() gives free memory back while blocks are live: every live block keeps
// its contents, and the heap keeps working (and allocating again) afterwards.
TEST(HeapApi, CollectKeepsLiveBlocks) {
  std::vector<Live> live;
  std::uint64_t seed = 0;
  const std::size_t sizes[] = {16,    48,    200,    1024,   4000,   9000,
                               33000, 70000, 200000, 300000, 1500000};
  for (int i = 0; i < 600; ++i) {
    const std::size_t n = sizes[i % std::size(sizes)];
    void* p = allocate(n);
    std::size_t usable = 0;
    ASSERT_NO_FATAL_FAILURE(check_fresh(p, n, default_alignment(n), ++seed, &usable));
    live.push_back({p, n, usable, seed});
  }
  // Free every other block: half-used spans, free pages between live ones.
  std::vector<Live> kept;
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (i % 2 == 0) {
      kept.push_back(live[i]);
    } else {
      deallocate(live[i].p);
    }
  }
  collect();
  mp_collect();
  for (const Live& b : kept)
    ASSERT_NO_FATAL_FAILURE(check_intact(b));
  // Collect from another thread too (its own cache empty, the others' untouched).
  std::thread([] { collect(); }).join();
  for (const Live& b : kept)
    ASSERT_NO_FATAL_FAILURE(check_intact(b));
  // The memory given back is usable again.
  for (int i = 0; i < 300; ++i) {
    const std::size_t n = sizes[(i * 5) % std::size(sizes)];
    void* p = allocate(n);
    std::size_t usable = 0;
    ASSERT_NO_FATAL_FAILURE(check_fresh(p, n, default_alignment(n), ++seed, &usable));
    kept.push_back({p, n, usable, seed});
  }
  expect_disjoint(kept);
  for (const Live& b : kept) {
    ASSERT_NO_FATAL_FAILURE(check_intact(b));
    deallocate(b.p);
  }
  collect();
  const HeapStats s = stats();
  EXPECT_EQ(s.bytes_in_thread_caches, 0u) << "collect() empties the calling thread's cache";
}

// A block may be freed by any thread, including one that never allocated.
TEST(HeapApi, FreeOnAnotherThread) {
  std::vector<Live> live;
  std::thread([&] {
    std::uint64_t seed = 0;
    for (std::size_t n : {std::size_t{8}, std::size_t{64}, std::size_t{3000}, std::size_t{70000},
                          std::size_t{600000}}) {
      for (int i = 0; i < 50; ++i) {
        void* p = mp_malloc(n);
        std::size_t usable = 0;
        ASSERT_NO_FATAL_FAILURE(check_fresh(p, n, default_alignment(n), ++seed, &usable));
        live.push_back({p, n, usable, seed});
      }
    }
  }).join();
  ASSERT_EQ(live.size(), 250u);
  for (const Live& b : live) {
    ASSERT_NO_FATAL_FAILURE(check_intact(b));
    mp_free(b.p);
  }
  // And the other way round: this thread's blocks freed by a fresh thread.
  std::vector<void*> mine;
  for (int i = 0; i < 500; ++i)
    mine.push_back(allocate(static_cast<std::size_t>(16 + i * 10)));
  std::thread([&] {
    for (void* p : mine)
      deallocate(p);
  }).join();
}

// ---- Statistics -------------------------------------------------------------

void expect_consistent(const HeapStats& s) {
  EXPECT_GT(s.class_count, 0u);
  EXPECT_LE(s.class_count, kHeapMaxClasses);
  EXPECT_GE(s.bytes_mapped, s.bytes_in_use);
  EXPECT_GE(s.bytes_mapped, s.bytes_in_use + s.bytes_in_thread_caches + s.bytes_in_central_cache +
                                s.bytes_free_in_page_heap);
  std::size_t small_in_use = 0;
  std::size_t cached = 0;
  for (std::size_t c = 0; c < s.class_count && c < kHeapMaxClasses; ++c) {
    const HeapClassStats& k = s.classes[c];
    EXPECT_GT(k.block_size, 0u) << "class " << c;
    if (c > 0) {
      EXPECT_GT(k.block_size, s.classes[c - 1].block_size) << "class " << c;
    }
    EXPECT_LE(k.block_size, kHeapMaxSmallSize) << "class " << c;
    EXPECT_LE(k.empty_spans, k.spans) << "class " << c;
    EXPECT_GE(k.bytes_reserved, (k.blocks_in_use + k.blocks_cached) * k.block_size)
        << "class " << c << " (" << k.block_size << " bytes)";
    small_in_use += k.blocks_in_use * k.block_size;
    cached += k.blocks_cached * k.block_size;
  }
  EXPECT_LE(small_in_use, s.bytes_in_use);
  EXPECT_LE(cached, s.bytes_in_thread_caches + s.bytes_in_central_cache);
}

// The index of the class whose blocks have `block_size` bytes, or class_count.
std::size_t class_with_block_size(const HeapStats& s, std::size_t block_size) {
  for (std::size_t c = 0; c < s.class_count; ++c) {
    if (s.classes[c].block_size == block_size) return c;
  }
  return s.class_count;
}

// On a quiet heap: an allocation of n grows bytes_in_use by at least n (and the
// class's blocks_in_use, or large_blocks_in_use, by one); its free on the same
// thread takes them back.
TEST(HeapApi, StatsFollowAnAllocation) {
  expect_consistent(stats());
  for (std::size_t n :
       {std::size_t{1}, std::size_t{24}, std::size_t{777}, std::size_t{5000}, std::size_t{100000},
        kHeapMaxSmallSize, kHeapMaxSmallSize + 1, std::size_t{300000}, 3 * kMiB}) {
    const HeapStats before = stats();
    void* p = allocate(n);
    ASSERT_NE(p, nullptr);
    const HeapStats during = stats();
    expect_consistent(during);
    EXPECT_GE(during.bytes_in_use, before.bytes_in_use + n) << "n=" << n;
    EXPECT_GE(during.bytes_mapped, during.bytes_in_use);
    EXPECT_GE(during.thread_caches, 1u);
    if (n > kHeapMaxSmallSize) {
      EXPECT_EQ(during.large_blocks_in_use, before.large_blocks_in_use + 1) << "n=" << n;
    } else {
      EXPECT_EQ(during.large_blocks_in_use, before.large_blocks_in_use) << "n=" << n;
      const std::size_t c = class_with_block_size(during, usable_size(p));
      ASSERT_LT(c, during.class_count) << "no class of " << usable_size(p) << " bytes, n=" << n;
      EXPECT_EQ(during.classes[c].blocks_in_use, before.classes[c].blocks_in_use + 1) << "n=" << n;
    }
    deallocate(p);
    const HeapStats after = stats();
    expect_consistent(after);
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use) << "n=" << n;
    EXPECT_EQ(after.large_blocks_in_use, before.large_blocks_in_use) << "n=" << n;
  }
}

TEST(HeapApi, StatsAfterManyAllocationsAndCollect) {
  const HeapStats before = stats();
  std::vector<void*> blocks;
  std::size_t asked = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::size_t n = 1 + static_cast<std::size_t>(i * 37) % 20000;
    blocks.push_back(mp_malloc(n));
    asked += n;
  }
  const HeapStats full = stats();
  expect_consistent(full);
  EXPECT_GE(full.bytes_in_use, before.bytes_in_use + asked);
  for (void* p : blocks)
    mp_free(p);
  mp_collect();
  const HeapStats after = stats();
  expect_consistent(after);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.bytes_in_thread_caches, 0u);
  for (std::size_t c = 0; c < after.class_count; ++c)  // collect() takes the empty spans too
    EXPECT_EQ(after.classes[c].empty_spans, 0u) << "class " << after.classes[c].block_size;
}

// A thread's cache goes when the thread does.
TEST(HeapApi, ThreadCachesGoWithTheirThreads) {
  const std::size_t before = stats().thread_caches;
  std::thread([before] {
    mp_free(mp_malloc(100));
    EXPECT_GE(stats().thread_caches, before + 1);
  }).join();
  EXPECT_EQ(stats().thread_caches, before);
}

// The identity of heap.hpp, exact on a quiet heap: every mapped byte is in use,
// cached, free in the page heap, given back, or in a small span's tail; per class,
// the spans hold the blocks and the tails.
void expect_identity(const HeapStats& s, const char* when) {
  SCOPED_TRACE(when);
  EXPECT_EQ(s.bytes_mapped, s.bytes_in_use + s.bytes_in_thread_caches + s.bytes_in_central_cache +
                                s.bytes_free_in_page_heap + s.bytes_returned_to_os +
                                s.bytes_span_tails);
  EXPECT_EQ(s.bytes_resident, s.bytes_mapped - s.bytes_returned_to_os);
  EXPECT_GE(s.bytes_mapped_peak, s.bytes_mapped);
  EXPECT_LE(s.bytes_direct, s.bytes_in_use);
  EXPECT_LE(s.bytes_cached_mappings, s.bytes_free_in_page_heap);
  EXPECT_LE(s.direct_mappings, s.large_blocks_in_use);
  std::size_t tails = 0;
  std::size_t in_use = 0;
  std::size_t thread_cached = 0;
  for (std::size_t c = 0; c < s.class_count; ++c) {
    const HeapClassStats& k = s.classes[c];
    const std::size_t blocks =
        k.blocks_in_use + k.blocks_in_thread_caches + k.blocks_in_central_cache;
    EXPECT_EQ(k.bytes_in_use, k.blocks_in_use * k.block_size) << "class " << k.block_size;
    EXPECT_LE(k.blocks_in_thread_caches, k.blocks_cached) << "class " << k.block_size;
    EXPECT_EQ(k.spans == 0, k.bytes_reserved == 0) << "class " << k.block_size;
    if (k.spans == 0) {
      EXPECT_EQ(blocks, 0u) << "class " << k.block_size;
      continue;
    }
    // Every block of every span is in use, in a thread cache or in the central cache.
    const std::size_t per_span = k.bytes_reserved / k.spans / k.block_size;
    EXPECT_EQ(blocks, k.spans * per_span) << "class " << k.block_size;
    tails += k.bytes_reserved - blocks * k.block_size;
    in_use += k.bytes_in_use;
    thread_cached += k.blocks_in_thread_caches * k.block_size;
  }
  EXPECT_EQ(tails, s.bytes_span_tails);
  EXPECT_EQ(thread_cached, s.bytes_in_thread_caches);
  EXPECT_LE(in_use, s.bytes_in_use);
}

TEST(HeapApi, StatsIdentityIsExactOnAQuietHeap) {
  expect_identity(stats(), "at start");
  std::vector<void*> blocks;
  for (std::size_t n = 1; n <= 300 * kKiB; n += n / 3 + 7)
    for (int i = 0; i < 5; ++i)
      blocks.push_back(mp_malloc(n));
  blocks.push_back(mp_malloc(3 * kMiB));
  blocks.push_back(mp_malloc(80 * kMiB));  // a mapping of its own (untouched: cheap)
  const HeapStats full = stats();
  expect_identity(full, "blocks of every class, large and direct");
  EXPECT_GE(full.direct_mappings, 1u);
  EXPECT_GE(full.bytes_direct, 80 * kMiB);
  for (std::size_t i = 0; i < blocks.size(); i += 2)
    mp_free(blocks[i]);
  expect_identity(stats(), "half freed");
  for (std::size_t i = 1; i < blocks.size(); i += 2)
    mp_free(blocks[i]);
  expect_identity(stats(), "all freed");
  mp_collect();
  const HeapStats collected = stats();
  expect_identity(collected, "collected");
  EXPECT_EQ(collected.bytes_free_in_page_heap, 0u);
  EXPECT_EQ(collected.bytes_in_thread_caches, 0u);
}

// Per class: live blocks and bytes, and where the free ones are.
TEST(HeapApi, StatsCountLiveBytesPerClass) {
  constexpr std::size_t kBlocks = 300;
  void* probe = mp_malloc(20000);
  const std::size_t size = usable_size(probe);
  mp_free(probe);
  const HeapStats before = stats();
  const std::size_t c = class_with_block_size(before, size);
  ASSERT_LT(c, before.class_count);
  std::vector<void*> blocks(kBlocks);
  for (void*& p : blocks)
    p = mp_malloc(20000);
  const HeapStats live = stats();
  EXPECT_EQ(live.classes[c].blocks_in_use, before.classes[c].blocks_in_use + kBlocks);
  EXPECT_EQ(live.classes[c].bytes_in_use, before.classes[c].bytes_in_use + kBlocks * size);
  ASSERT_GT(live.classes[c].spans, 0u);
  const std::size_t per_span = live.classes[c].bytes_reserved / live.classes[c].spans / size;
  EXPECT_GE(live.classes[c].spans * per_span, kBlocks);
  for (void* p : blocks)
    mp_free(p);
  const HeapStats freed = stats();
  EXPECT_EQ(freed.classes[c].blocks_in_use, before.classes[c].blocks_in_use);
  EXPECT_EQ(freed.classes[c].bytes_in_use, before.classes[c].bytes_in_use);
  // The last frees sit in this thread's cache; the rest went to the central cache.
  EXPECT_GT(freed.classes[c].blocks_in_thread_caches, 0u);
  mp_collect();
  EXPECT_EQ(stats().classes[c].blocks_in_thread_caches, 0u);
}

// The table: totals adding up to "= mapped", the limit, and a row for every class
// that has spans, none for the others.
TEST(HeapApi, StatsPrint) {
  void* p = mp_malloc(1000);
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  const HeapStats st = stats();
  mp_stats_print(f);
  EXPECT_GT(std::ftell(f), 0) << "mp_stats_print wrote nothing";
  std::rewind(f);
  char line[512];
  std::string text;
  std::size_t rows = 0;
  bool header = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    text += line;
    if (std::strstr(line, "class size") != nullptr) header = true;
    std::size_t size, in_use, thread_cached, central, spans, reserved;
    double kib;
    if (header && std::sscanf(line, " %zu %zu %lf %zu %zu %zu %zu", &size, &in_use, &kib,
                              &thread_cached, &central, &spans, &reserved) == 7) {
      ++rows;
      const std::size_t c = class_with_block_size(st, size);
      ASSERT_LT(c, st.class_count) << line;
      EXPECT_GT(spans, 0u) << line;
      EXPECT_EQ(spans, st.classes[c].spans) << line;
      EXPECT_EQ(reserved, st.classes[c].bytes_reserved / 1024) << line;
    }
  }
  std::fclose(f);
  std::size_t used = 0;
  for (std::size_t c = 0; c < st.class_count; ++c)
    used += st.classes[c].spans != 0 ? 1 : 0;
  EXPECT_EQ(rows, used) << text;
  for (const char* label :
       {"mempool heap statistics\n  in use", "\n  thread caches ", "\n  central cache ",
        "\n  page heap, free ", "\n  returned to the OS ", "\n  span tails ", "\n  = mapped ",
        "\n  memory limit ", "\n  huge pages "})
    EXPECT_NE(text.find(label), std::string::npos) << label << " missing in\n" << text;
  mp_free(p);
}

}  // namespace
}  // namespace mempool
