// The heap profiler's entry points for the rest of the heap (heap_profiler.cpp); the
// sampling hooks themselves are in heap_internal.hpp (heap_allocate_sampled,
// heap_profile_on_free) and the thread cache (heap_sample_due).
#pragma once

#include <cstddef>

namespace mempool::detail {

struct Span;

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
// After a misuse report on p: the stack that allocated p, if p is a sampled block in
// use, or was one freed recently (then the stack that freed it too), on stderr.
void heap_profile_explain(const void* p) noexcept;

}  // namespace mempool::detail
