// Platform helpers shared by every allocator: branch hints, inlining control,
// the cache-line size, the OS page size and the small bit tricks the pools use.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <new>

#define MEMPOOL_LIKELY(x) __builtin_expect(!!(x), 1)
#define MEMPOOL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define MEMPOOL_ALWAYS_INLINE inline __attribute__((always_inline))
#define MEMPOOL_NOINLINE __attribute__((noinline))
// Out-of-line code that runs rarely (refills, growth, error reports).
#define MEMPOOL_COLD __attribute__((noinline, cold))
// What libmempool.so exports: it is built with -fvisibility=hidden, so only what the
// headers declare with this (and mp_*) is visible; the heap's tiers stay inside.
#define MEMPOOL_API __attribute__((visibility("default")))
// Internal data the hit paths read, in every build of the library: the compiler then
// addresses it directly (one %rip-relative load) instead of through the GOT, which
// -fPIC code needs for a symbol another module might define.
#define MEMPOOL_HIDDEN __attribute__((visibility("hidden")))
// Every thread_local of mempool, in libmempool.a and in every shared library
// (libmempool.so.0, the drop-ins), and in code compiled against them: initial-exec
// TLS, one %fs-relative access and never a call to __tls_get_addr (tcmalloc and
// jemalloc do the same). A shared library with it is marked STATIC_TLS: a dlopen()
// after start-up takes its block from glibc's surplus static TLS
// (docs/architecture.md, "Packaging"). The test tls_model checks the libraries.
#define MEMPOOL_TLS_MODEL __attribute__((tls_model("initial-exec")))
// The functions between a program's call to malloc or free (or new, delete, mp_malloc)
// and the heap profiler's stack capture: the linker gathers them into one section, and
// the profiler drops the frames inside it, so that a stack starts at the program's
// caller (gperftools marks its entry points with a section of its own for the same reason).
#define MEMPOOL_ALLOCATION_ENTRY __attribute__((section("mempool_allocation_entry")))
// The entry points a program calls for every block (malloc, free, new, delete, and the
// C and C++ APIs' own) start on a cache line, as tcmalloc's do. Otherwise where each
// starts moves with any change to the code before it, and the hit path's time with it:
// on AMD EPYC family 26 model 2, a 24-byte pair took 7% longer with malloc 16 bytes past
// a line and 15% with free 48 bytes past one (docs/performance.md, "Entry points on a
// cache line"). The test entry_alignment checks the libraries.
#define MEMPOOL_LINE_ALIGNED __attribute__((aligned(64)))
#define MEMPOOL_HOT_ENTRY MEMPOOL_ALLOCATION_ENTRY MEMPOOL_LINE_ALIGNED

#if defined(MEMPOOL_CHECKED) && MEMPOOL_CHECKED
#define MEMPOOL_CHECKED_BUILD 1
#else
#define MEMPOOL_CHECKED_BUILD 0
#endif

#if defined(MEMPOOL_HARDENED) && MEMPOOL_HARDENED
#define MEMPOOL_HARDENED_BUILD 1
#else
#define MEMPOOL_HARDENED_BUILD 0
#endif

namespace mempool::detail {

// 128-bit integers for multiply-high and the 16-byte CAS (a GCC/Clang extension).
__extension__ typedef unsigned __int128 uint128;  // NOLINT(modernize-use-using)

// True in builds configured with MEMPOOL_CHECKED=ON (the `checked` preset): the
// pools verify every free against their own metadata.
inline constexpr bool kChecked = MEMPOOL_CHECKED_BUILD != 0;

// True where MEMPOOL_HARDENED=1 is defined: the hardened drop-in library,
// libmempool-malloc-hardened.so (src/heap/hardened.cpp), whose blocks carry a
// canary, freed blocks a fill that is checked on reuse, large blocks a guard page;
// and code built against mempool with it, whose pools encode and check their
// free-list links (free_list.hpp). Every other build compiles those branches away.
inline constexpr bool kHardened = MEMPOOL_HARDENED_BUILD != 0;
static_assert(!(kChecked && kHardened), "the checked and hardened builds are separate builds");

// 64 bytes on every x86-64 and most AArch64 parts. std::hardware_destructive_
// interference_size is not used because GCC warns that it may change between
// compiler versions, which would change our ABI.
inline constexpr std::size_t kCacheLine = 64;

// The smallest alignment a block of 16 bytes or more gets (what malloc promises).
inline constexpr std::size_t kMinAlignLarge = alignof(std::max_align_t);

// Largest alignment the pools honour: one page on every Linux we target.
inline constexpr std::size_t kMaxPoolAlignment = 4096;

// The OS page size, read once (sysconf) and cached.
MEMPOOL_API std::size_t page_size() noexcept;

constexpr bool is_power_of_two(std::size_t x) noexcept {
  return std::has_single_bit(x);
}

// Rounds x up to a multiple of a power-of-two alignment. Returns 0 on overflow so
// that callers can report it instead of wrapping around.
constexpr std::size_t align_up(std::size_t x, std::size_t alignment) noexcept {
  const std::size_t mask = alignment - 1;
  if (x > SIZE_MAX - mask) return 0;
  return (x + mask) & ~mask;
}

// The default alignment of a block: the type's own, and at least 16 once the
// block is 16 bytes or more (as malloc does), so SIMD payloads just work.
constexpr std::size_t default_block_alignment(std::size_t block_size,
                                              std::size_t type_alignment) noexcept {
  std::size_t a = type_alignment;
  if (block_size >= kMinAlignLarge && a < kMinAlignLarge) a = kMinAlignLarge;
  return a;
}

// Sized ::operator delete where the compiler offers it (GCC does by default;
// clang before 19 only with -fsized-deallocation, which the CMake target adds),
// the unsized one otherwise: both free what ::operator new gave.
inline void sized_operator_delete(void* p, std::size_t bytes) noexcept {
#if defined(__cpp_sized_deallocation)
  ::operator delete(p, bytes);
#else
  (void)bytes;
  ::operator delete(p);
#endif
}

inline void sized_operator_delete(void* p, std::size_t bytes, std::align_val_t align) noexcept {
#if defined(__cpp_sized_deallocation)
  ::operator delete(p, bytes, align);
#else
  (void)bytes;
  ::operator delete(p, align);
#endif
}

}  // namespace mempool::detail
