// The general heap's ways in and out, shared by its fuzzers (heap_fuzz.cpp, one thread;
// heap_threads_fuzz.cpp, several): each call picked by a byte of the input, the size
// decoder, and the checks that every block the heap hands out must pass. Both are built
// against the hardened heap too (heap_hardened_fuzz, heap_threads_hardened_fuzz:
// MEMPOOL_HARDENED=1), where this header's LLVMFuzzerInitialize guards every fresh span:
// each program has one source that includes it.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "pool_model.hpp"

#if MEMPOOL_HARDENED_BUILD
#include "heap/heap_internal.hpp"  // hardened_set_sampling
#endif

// Loops over a block's bytes are left out of libFuzzer's comparison tracing (byte loops
// under it took ~10 ms an input).
#if defined(__clang__)
#define MEMPOOL_FUZZ_NO_TRACE __attribute__((no_sanitize("coverage")))
#else
#define MEMPOOL_FUZZ_NO_TRACE
#endif

namespace mempool_fuzz {

// A block the program holds: its address, the bytes asked for (filled with the
// pattern of `seed`), and the alignment asked for (0 for none).
struct HeapBlock {
  unsigned char* p;
  std::size_t size;
  std::size_t alignment;
  std::uint64_t seed;
};

inline constexpr std::size_t kMaxHeapBlock = std::size_t{4} * 1024 * 1024;

// Mostly small: 62% up to 256 bytes, 25% up to 4 KiB, 9% up to about 320 KiB
// (across the largest classes), 3% up to `most` (4 MiB); 0 is possible.
inline std::size_t decode_heap_size(Input& in, std::size_t most = kMaxHeapBlock) noexcept {
  const std::uint8_t kind = in.byte();
  if (kind < 160) return in.byte() + (kind & 1);
  if (kind < 224) return in.u16() % 4097;
  if (kind < 248) return std::size_t{in.u16()} * 5 + in.byte();
  return (std::size_t{in.u16()} * 64 + in.byte()) % (most + 1);
}

inline std::size_t default_alignment(std::size_t n) noexcept {
  return n >= 16 ? 16 : 8;
}

// n bytes: 0 allocate, 1 try_allocate, 2 mp_malloc (how % 3). Never nullptr.
inline void* allocate_by(std::size_t n, unsigned how) {
  void* p = nullptr;
  switch (how % 3) {
    case 0:
      p = mempool::allocate(n);
      break;
    case 1:
      p = mempool::try_allocate(n);
      break;
    default:
      p = mp_malloc(n);
      break;
  }
  MEMPOOL_FUZZ_CHECK(p != nullptr);
  return p;
}

// n bytes aligned: 0 allocate, 1 try_allocate, 2 mp_aligned_alloc, 3 mp_posix_memalign
// (how % 4). nullptr only where mp_posix_memalign must refuse: an alignment below a
// pointer's (EINVAL, and the result left as it was).
inline void* allocate_aligned_by(std::size_t n, std::size_t alignment, unsigned how) {
  void* p = nullptr;
  switch (how % 4) {
    case 0:
      p = mempool::allocate(n, std::align_val_t{alignment});
      break;
    case 1:
      p = mempool::try_allocate(n, std::align_val_t{alignment});
      break;
    case 2:
      p = mp_aligned_alloc(alignment, n);
      break;
    default:
      if (alignment < sizeof(void*)) {
        void* out = &out;
        MEMPOOL_FUZZ_CHECK(mp_posix_memalign(&out, alignment, n) == EINVAL);
        MEMPOOL_FUZZ_CHECK(out == &out);
        return nullptr;
      }
      MEMPOOL_FUZZ_CHECK(mp_posix_memalign(&p, alignment, n) == 0);
      break;
  }
  MEMPOOL_FUZZ_CHECK(p != nullptr);
  return p;
}

// Every byte of p[0, n) is zero; read a word at a time (blocks run to megabytes, and
// under ThreadSanitizer each read is a call).
MEMPOOL_FUZZ_NO_TRACE inline bool all_zero(const void* p, std::size_t n) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t acc = 0;
  std::size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    std::uint64_t w;
    std::memcpy(&w, b + k, 8);
    acc |= w;
  }
  for (; k < n; ++k)
    acc |= b[k];
  return acc == 0;
}

// mp_calloc(count, size), whose product does not overflow: never nullptr, and zero.
inline void* calloc_checked(std::size_t count, std::size_t size) {
  void* p = mp_calloc(count, size);
  MEMPOOL_FUZZ_CHECK(p != nullptr);
  MEMPOOL_FUZZ_CHECK(all_zero(p, count * size));
  return p;
}

// Frees b: 0 deallocate(p), 1 sized (with its alignment when it had one), 2 mp_free
// (how % 3).
inline void free_by(const HeapBlock& b, unsigned how) noexcept {
  switch (how % 3) {
    case 0:
      mempool::deallocate(b.p);
      break;
    case 1:
      if (b.alignment != 0) {
        mempool::deallocate(b.p, b.size, std::align_val_t{b.alignment});
      } else {
        mempool::deallocate(b.p, b.size);
      }
      break;
    default:
      mp_free(b.p);
      break;
  }
}

// What every block of n bytes fresh from the heap must be: non-null, aligned (16 bytes
// from 16 bytes up, 8 below, or exactly the asked alignment), usable_size(p) >= n, the
// same through mp_usable_size. Returns its usable size.
inline std::size_t check_fresh(const void* p, std::size_t n, std::size_t alignment) noexcept {
  MEMPOOL_FUZZ_CHECK(p != nullptr);
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  MEMPOOL_FUZZ_CHECK(addr % default_alignment(n) == 0);
  if (alignment != 0) MEMPOOL_FUZZ_CHECK(addr % alignment == 0);
  const std::size_t usable = mempool::usable_size(p);
  MEMPOOL_FUZZ_CHECK(usable >= n);
  MEMPOOL_FUZZ_CHECK(mp_usable_size(p) == usable);
  return usable;
}

#if MEMPOOL_HARDENED_BUILD
inline constexpr std::uint64_t kHardenedSeed = 0x5eed;
#endif

}  // namespace mempool_fuzz

#if MEMPOOL_HARDENED_BUILD
// The hardened heap checks its guarded spans: here every fresh one is
// (MEMPOOL_HARDENED_SAMPLE=1), its blocks in the order a fixed seed gives
// (MEMPOOL_HARDENED_SEED), so that an input does what it did when it was found. Set
// after the heap's first allocation, which reads the MEMPOOL_* variables. libFuzzer (and
// replay_main.cpp) call it once, before the first input.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mp_free(mp_malloc(1));
  mempool::detail::hardened_set_sampling(mempool_fuzz::kHardenedSeed, 1);
  return 0;
}
#endif
