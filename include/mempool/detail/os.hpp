// The one door to the operating system's memory (src/os/): every pool maps and
// unmaps its chunks here, so tests can count the calls and make them fail.
#pragma once

#include <cstddef>

#include "mempool/detail/platform.hpp"

namespace mempool::detail {

// Anonymous, zero-filled, page-aligned memory; nullptr when the OS refuses.
// `populate` asks the kernel to fault the pages in now (real-time pools must not
// take page faults later).
MEMPOOL_API void* os_map(std::size_t bytes, bool populate = false) noexcept;
MEMPOOL_API void os_unmap(void* p, std::size_t bytes) noexcept;
// The same as os_map, with the start aligned to `alignment` (a power of two above
// the OS page size): maps more, then unmaps the unaligned ends.
MEMPOOL_API void* os_map_aligned(std::size_t bytes, std::size_t alignment) noexcept;
// Address space without memory (PROT_NONE, no commit charge), for os_commit to
// fill: at exactly `address` when it is not nullptr and nothing is mapped there (a
// mapping is never replaced), else where the OS puts it; nullptr when refused. Not
// a map: the fault injection and the counts below leave it out.
MEMPOOL_API void* os_reserve(void* address, std::size_t bytes) noexcept;
MEMPOOL_API void os_unreserve(void* p, std::size_t bytes) noexcept;
// Address space that reads as zeros (PROT_READ: a read maps the kernel's zero page,
// which is neither memory nor commit charge) until os_commit makes parts of it
// writable: for a table whose untouched entries must read as empty. Aligned to
// `alignment` (a power of two); nullptr when refused. Not a map, as os_reserve.
MEMPOOL_API void* os_reserve_zeros(std::size_t bytes, std::size_t alignment) noexcept;
// Makes [p, p + bytes), inside a reservation, zero-filled readable and writable
// memory: a map, as os_map's (false when the OS refuses; the range stays reserved).
// Adjacent committed ranges merge into one mapping.
MEMPOOL_API bool os_commit(void* p, std::size_t bytes) noexcept;
// Grows the mapping [p, p + old_bytes) to new_bytes, keeping its pages (only the
// new tail is fresh zero-filled memory). target nullptr: in place, when the
// addresses after it are free; otherwise onto target, a mapping of new_bytes from
// os_map that the moved pages replace (p's range is then gone). nullptr on failure,
// with both mappings as they were.
MEMPOOL_API void* os_remap(void* p, std::size_t old_bytes, std::size_t new_bytes,
                           void* target) noexcept;
// Gives the pages back (madvise MADV_DONTNEED): the range stays mapped and reads as
// zeros when touched again. p and bytes are multiples of the OS page size.
MEMPOOL_API void os_release(void* p, std::size_t bytes) noexcept;
// Makes the pages unreadable and unwritable (a guard: a touch is SIGSEGV), or
// readable and writable again. false when the OS refuses (ENOMEM: the process has
// as many separate mappings as the kernel allows). p and bytes are multiples of
// the OS page size.
MEMPOOL_API bool os_protect(void* p, std::size_t bytes, bool accessible) noexcept;

// Transparent huge pages as the system sets them
// (/sys/kernel/mm/transparent_hugepage/enabled): kNever also where the file is
// missing (no THP in the kernel). Read once.
enum class SystemHugePages : unsigned char { kNever, kMadvise, kAlways };
MEMPOOL_API SystemHugePages os_system_huge_pages() noexcept;
// Asks the kernel to back [p, p + bytes) with huge pages where it can
// (MADV_HUGEPAGE), or never to (MADV_NOHUGEPAGE: khugepaged leaves it alone too).
// Works on reserved (PROT_NONE) ranges as on committed ones; the flag stays with
// the range when parts of it are committed later. false when the kernel refuses
// (no THP support). p and bytes are multiples of the OS page size.
MEMPOOL_API bool os_advise_huge_pages(void* p, std::size_t bytes, bool huge) noexcept;

}  // namespace mempool::detail

namespace mempool::testing {

// Fault injection for tests: the next `n` maps succeed, every later one fails
// as if the system were out of memory. A negative n switches it off (the default).
MEMPOOL_API void fail_os_maps_after(long n) noexcept;
// How many maps have succeeded since the process started.
MEMPOOL_API long os_map_count() noexcept;
// Bytes mapped through os_map and not yet unmapped, by every mempool allocator.
MEMPOOL_API std::size_t os_bytes_mapped() noexcept;

}  // namespace mempool::testing
