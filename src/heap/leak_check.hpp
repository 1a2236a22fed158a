// The leak check (MEMPOOL_LEAK_CHECK=1, src/heap/leak_check.cpp): the heap tracks every
// block with its allocation stack, and at exit reports the blocks the program can no
// longer reach, as LeakSanitizer does.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mempool::detail {

struct ProfileSite;

// On once configured (before the first tracked allocation), never off again. While on,
// every allocation comes to the profiler's slow path (heap_allocate_sampled, which
// tracks it) and the thread caches hold no block: each free flushes (ThreadCache::flush,
// which calls heap_tracked_free), each refill takes one block.
extern constinit bool g_leak_check;

// MEMPOOL_LEAK_CHECK, MEMPOOL_LEAK_CHECK_EXITCODE and MEMPOOL_LEAK_CHECK_SUPPRESSIONS (a
// file of `leak:PATTERN` lines, or nullptr), from the options (init mutex held).
void leak_check_configure(int exit_code, const char* suppressions) noexcept;
// Once configured, outside the init mutex: registers the check at exit.
void leak_check_start() noexcept;

// Block p of n bytes, allocated at `site`, is the program's now. Out of memory for the
// table, p is left untracked (never reported).
void leak_track(const void* p, std::size_t n, const ProfileSite* site) noexcept;
// Tracked block p now holds n bytes: realloc kept it in place (the scan reads n bytes,
// and the report counts them). Returns p, so that realloc reaches it by a tail call and
// keeps no stack frame for it.
void* leak_resize(void* p, std::size_t n) noexcept;
// Block p is being freed: its site, or nullptr when p was not tracked.
const ProfileSite* leak_untrack(const void* p) noexcept;
// The site of tracked block p (its start), or nullptr.
const ProfileSite* leak_site_of(const void* p) noexcept;

// Zeroes the dead stack below the caller, where the heap's own frames just held the
// addresses of spans and pages: a span's start is its first block's address, and left
// there it would look like a reference to that block to the scan of this stack. Called
// after every tracked allocation and free.
void leak_scrub_stack() noexcept;

// The table's locks, held across fork().
void leak_check_lock() noexcept;
void leak_check_unlock() noexcept;

// Runs the check now, as at exit: reports the leaks on stderr and returns their bytes,
// less the suppressed ones (0: none). mp_leak_check / mempool::leak_check.
std::size_t leak_check_run() noexcept;

}  // namespace mempool::detail
