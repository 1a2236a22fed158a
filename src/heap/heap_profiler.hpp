// The heap profiler's entry points for the rest of the heap (heap_profiler.cpp); the
// sampling hooks themselves are in heap_internal.hpp (heap_allocate_sampled,
// heap_profile_on_free) and the thread cache (heap_sample_due).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mempool::detail {

struct Span;

// One allocation stack and what its samples add up to (estimates; counts in 1/65536
// of a block, so that a small block's large weight keeps its fraction).
struct ProfileSite {
  ProfileSite* next = nullptr;  // in its bucket
  std::uint64_t hash = 0;
  std::atomic<std::uint64_t> live_count{0};
  std::atomic<std::uint64_t> live_bytes{0};
  std::atomic<std::uint64_t> total_count{0};
  std::atomic<std::uint64_t> total_bytes{0};
  // In use when the heap was last at its peak (the profiler's lock): heap_profiler.cpp.
  std::uint64_t peak_count = 0;
  std::uint64_t peak_bytes = 0;
  void* const* frames = nullptr;  // return addresses, innermost first
  std::uint32_t depth = 0;
};

// MEMPOOL_PROFILE_RATE and MEMPOOL_PROFILE, from the options (init mutex held; rate 0
// leaves the profiler off).
void heap_profiler_configure(std::size_t rate, const char* path) noexcept;
// Once configured, outside the init mutex (it may allocate): warms up the unwinder,
// registers the dump at exit, and turns the calling thread's sized frees to the page map.
void heap_profiler_start() noexcept;
bool heap_profiler_active() noexcept;
// The site table's lock, held across fork().
void heap_profiler_lock() noexcept;
void heap_profiler_unlock() noexcept;
// A sampled block's usable size: its class's size for a small request (as if it had
// not been sampled, so that programs counting malloc_usable_size see no difference),
// the span's bytes for a large one.
std::size_t heap_sampled_usable_size(const Span* s) noexcept;
// The leak check (leak_check.hpp) is on and block p is being freed (or p is a block it
// never tracked): p leaves the leak table, its free stack goes to the ring of freed blocks.
void heap_tracked_free(const void* p) noexcept;
// Marks the calling thread busy (its allocations are neither sampled nor tracked) or not;
// returns what it was.
bool heap_profiler_set_busy(bool busy) noexcept;
// After a misuse report on p: the stack that allocated p, if p is a sampled block in
// use or a block the leak check tracks, or was one freed recently (then the stack that freed it
// too), on stderr.
void heap_profile_explain(const void* p) noexcept;

}  // namespace mempool::detail
