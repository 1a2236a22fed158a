// How misuse is reported: one line on stderr naming the allocator, the pointer and
// the problem, then abort(). Written with write(2) from a stack buffer, so it works
// when the heap itself is what is broken.
#pragma once

#include <cstddef>
#include <string>

#include "mempool/detail/platform.hpp"

namespace mempool::detail {

[[noreturn]] __attribute__((cold)) MEMPOOL_API void fatal_misuse(const char* allocator,
                                                                 const void* ptr,
                                                                 const char* problem) noexcept;
// The line alone, for a caller that adds details before it aborts (the heap: the
// stacks of a profiled block).
__attribute__((cold)) MEMPOOL_API void report_misuse(const char* allocator, const void* ptr,
                                                     const char* problem) noexcept;

// Messages for std::invalid_argument / std::length_error thrown by constructors:
// "mempool::BitmapPool: capacity must be greater than 0".
MEMPOOL_API std::string argument_message(const char* allocator, const char* what);

}  // namespace mempool::detail
