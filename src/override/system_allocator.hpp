// Blocks of the system allocator (glibc's malloc) in a process where mempool
// has replaced malloc: whatever got memory from glibc before mempool took over,
// or called __libc_malloc directly, may hand it to our free, realloc or
// malloc_usable_size. Such blocks go back to glibc; anything else that mempool
// does not own is misuse.
#pragma once

#include <cstddef>

namespace mempool::detail {

// True when p is the start of a block that glibc's malloc handed out: a chunk in
// its main heap (between the program break's start and its end) or a chunk it
// mapped on its own, judged by glibc's chunk header after checking that the
// header's memory is mapped. Cold: the first call reads /proc/self/stat.
[[nodiscard]] bool system_owns(const void* p) noexcept;

// For a block system_owns: its usable bytes, and giving it back to glibc.
[[nodiscard]] std::size_t system_usable_size(const void* p) noexcept;
void system_free(void* p) noexcept;

}  // namespace mempool::detail
