// The heap's public C++ API, its cold paths (large blocks, misuse, checked-build
// bookkeeping) and its set-up: options, the thread-exit key, fork handlers.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>  // environ

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "../options.hpp"
#include "central_cache.hpp"
#include "class_info.hpp"
#include "heap_internal.hpp"
#include "heap_profiler.hpp"
#include "leak_check.hpp"
#include "mempool/detail/error.hpp"
#include "mempool/detail/lock.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "metadata.hpp"
#include "page_heap.hpp"

namespace mempool::detail {

namespace {

constinit std::atomic<bool> g_ready{false};
constinit Lock g_init_mutex;
constinit std::size_t g_direct_map_threshold = std::size_t{64} << 20;
constinit bool g_verbose = false;
constinit std::atomic<std::size_t> g_large_blocks{0};

void before_fork() noexcept {
  heap_profiler_lock();
  leak_check_lock();
  if constexpr (kHardened) hardened_lock();
  ThreadCache::lock_registry();
  g_central_cache.lock_all();
  g_page_heap.lock();
  g_metadata.lock();
}

void after_fork_in_parent() noexcept {
  g_metadata.unlock();
  g_page_heap.unlock();
  g_central_cache.unlock_all();
  ThreadCache::unlock_registry();
  if constexpr (kHardened) hardened_unlock();
  leak_check_unlock();
  heap_profiler_unlock();
}

void after_fork_in_child() noexcept {
  // Only this thread lives on in the child: the other threads' caches (and the
  // blocks in them) are forgotten.
  ThreadCache::reset_registry_after_fork();
  after_fork_in_parent();
}

// MEMPOOL_SHOW_STATS=1 prints to a copy of stderr's descriptor taken at start:
// a program may close stderr before the exit handlers run (GNU tools' atexit
// close_stdout closes it), and the statistics must still come out.
constinit int g_stats_fd = STDERR_FILENO;

void print_stats_at_exit() noexcept {
  print_heap_stats(nullptr, g_stats_fd);
}

// Reads the MEMPOOL_* variables and applies them, once; g_init_mutex held.
// Returns whether to print statistics at exit. The heap as the process's malloc
// may start before libc has set up `environ` (the dynamic loader allocates
// first): then nothing is read yet, and heap_read_options() comes back later.
constinit bool g_options_read = false;
constinit bool g_profiler_to_start = false;  // heap_profiler_start, once the mutex is free

void start_profiler_if_configured() noexcept {
  bool start = false;
  {
    std::lock_guard<Lock> lock(g_init_mutex);
    start = g_profiler_to_start;
    g_profiler_to_start = false;
  }
  if (start) heap_profiler_start();
}
bool apply_options() noexcept {
  if (g_options_read || environ == nullptr) return false;
  g_options_read = true;
  const HeapOptions options = read_heap_options();
  g_page_heap.set_release_threshold(options.release_threshold);
  g_page_heap.set_direct_cache_bytes(options.direct_cache_bytes);
  g_page_heap.set_decay_ms(options.decay_ms == kNeverDecay ? PageHeap::kNoDecay : options.decay_ms);
  g_page_heap.set_thp_mode(options.thp == ThpOption::kNever    ? ThpMode::kNever
                           : options.thp == ThpOption::kAlways ? ThpMode::kAlways
                                                               : ThpMode::kAuto);
  set_thread_cache_budget(options.thread_cache_bytes, options.total_thread_cache_bytes);
  // Only when set: a limit the program set before the heap started stays.
  if (options.memory_limit != 0) g_page_heap.set_memory_limit(options.memory_limit);
  g_direct_map_threshold = options.direct_map_threshold;
  g_verbose = options.verbose;
  if constexpr (kHardened) hardened_set_sampling(options.hardened_seed, options.hardened_sample);
  if (options.leak_check) {
    // Every block tracked: the profiler's samples would only add spans of their own.
    if (options.profile_rate != 0) {
      write_stderr_line(
          "MEMPOOL_LEAK_CHECK is on: MEMPOOL_PROFILE and MEMPOOL_PROFILE_RATE are ignored");
    }
    leak_check_configure(options.leak_check_exit_code, options.leak_check_suppressions);
    g_profiler_to_start = true;
  } else {
    heap_profiler_configure(options.profile_rate, options.profile_path);
    g_profiler_to_start = options.profile_rate != 0;
  }
  if (options.show_stats) {
    const int copy = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    if (copy >= 0) g_stats_fd = copy;
  }
  return options.show_stats;
}

// Cold: the options and the thread-exit key, once.
MEMPOOL_COLD void heap_init() noexcept {
  bool show_stats = false;
  {
    std::lock_guard<Lock> lock(g_init_mutex);
    if (g_ready.load(std::memory_order_relaxed)) return;
    show_stats = apply_options();
    if (!create_thread_exit_key())
      write_stderr_line("no pthread key for thread exit: threads allocate without a cache");
    g_ready.store(true, std::memory_order_release);
  }
  // These may allocate (and so re-enter the heap, which is ready by now).
  ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  if (show_stats) std::atexit(print_stats_at_exit);
  start_profiler_if_configured();
}

MEMPOOL_ALWAYS_INLINE void ensure_ready() noexcept {
  if (MEMPOOL_UNLIKELY(!g_ready.load(std::memory_order_acquire))) heap_init();
}

// The page heap refused to grow past the soft memory limit (page_heap.hpp). With
// no lock held, the calling thread's cache and the central cache's kept batches
// go back, and the spans they empty with them; then the heap may grow. Other
// threads' caches are left to their threads.
MEMPOOL_COLD bool give_back_for_limit() noexcept {
  if (!PageHeap::take_limit_refusal()) return false;  // out of memory, not the limit
  if (tls_thread_cache.state() == ThreadCacheState::kActive) tls_thread_cache.release_all();
  g_central_cache.drain();
  return true;
}

Span* allocate_span(std::size_t n, std::size_t alignment) noexcept {
  // The central cache's old empty spans first, so that the page heap's decay, which
  // may run now, finds them (a program that stopped using small blocks).
  g_central_cache.decay_if_due();
  if (n >= g_direct_map_threshold) return g_page_heap.map_direct(n, alignment);
  const std::size_t pages = (n + kHeapPageSize - 1) >> kHeapPageShift;
  const std::size_t align_pages = alignment > kHeapPageSize ? alignment >> kHeapPageShift : 1;
  g_central_cache.make_room_for(pages + align_pages - 1, SpanState::kLarge, 0);
  return g_page_heap.allocate(pages, align_pages);
}

void* allocate_large(std::size_t n, std::size_t alignment) noexcept {
  ensure_ready();
  if (n > kHeapMaxRequest || alignment > kHeapMaxRequest) return nullptr;
  Span* s = allocate_span(n, alignment);
  if (s == nullptr && give_back_for_limit()) {
    PageHeap::GrowPastLimit grow;
    s = allocate_span(n, alignment);
  }
  if (s == nullptr) return nullptr;
  g_large_blocks.fetch_add(1, std::memory_order_relaxed);
  checker_allocated(address_as(s->start), s->bytes());
  return address_as(s->start);
}

void free_large(Span* s) noexcept {
  checker_freed(address_as(s->start), s->bytes());
  g_central_cache.decay_if_due();  // as in allocate_span
  g_large_blocks.fetch_sub(1, std::memory_order_relaxed);
  if (s->state == SpanState::kDirect) {
    g_page_heap.unmap_direct(s);
  } else {
    g_page_heap.free(s);
  }
}

std::size_t block_index(const void* p, const Span* s) noexcept {
  return (reinterpret_cast<std::uintptr_t>(p) - s->start) / kHeapClasses[s->size_class].size;
}

}  // namespace

void* heap_allocate_large(std::size_t n, std::size_t alignment) noexcept {
  return allocate_large(n, alignment);
}

#if MEMPOOL_HARDENED_BUILD
void heap_free_large_span(Span* s) noexcept {
  free_large(s);
}
#endif

std::size_t heap_large_blocks() noexcept {
  return g_large_blocks.load(std::memory_order_relaxed);
}

namespace {
// MEMPOOL_VERBOSE=1: what the page map knows of a misused pointer, one line
// before the fatal one (snprintf into a stack buffer: no allocation).
void describe_pointer(const void* p) noexcept {
  char line[256];
  const Span* s = g_page_map.lookup(p);
  if (s == nullptr) {
    std::snprintf(line, sizeof line, "heap: details: no heap span covers %p\n", p);
  } else {
    static constexpr const char* kStates[] = {"free", "small", "large", "direct", "cached direct"};
    const auto offset = reinterpret_cast<std::uintptr_t>(p) - s->start;
    std::size_t block = s->size_class != 0 ? kHeapClasses[s->size_class].size : s->bytes();
    if (kHardened && s->size_class != 0 && s->guarded) block = hardened_guarded_stride(block);
    std::snprintf(line, sizeof line,
                  "heap: details: %p is %zu bytes into a %s span at %p of %zu pages, "
                  "%zu bytes into a block of %zu bytes\n",
                  p, static_cast<std::size_t>(offset), kStates[static_cast<int>(s->state)],
                  address_as(s->start), s->pages, static_cast<std::size_t>(offset % block), block);
  }
  write_stderr_line(line);
}
}  // namespace

void heap_misuse(const void* p, const char* problem) noexcept {
  if (g_verbose) describe_pointer(p);
  report_misuse("heap", p, problem);
  heap_profile_explain(p);  // where a profiled block was allocated (and first freed)
  std::abort();
}

void heap_free_list_corrupted(const void* b) noexcept {
  heap_misuse(b, "free list corrupted (write after free?)");
}

void* heap_pop_corrupted(const void* b) noexcept {
  heap_free_list_corrupted(b);
}

namespace {
// A refill the memory limit refused: once more, after the caches went back.
MEMPOOL_COLD void* refill_past_limit(std::size_t c) noexcept {
  if (!give_back_for_limit()) return nullptr;
  PageHeap::GrowPastLimit grow;
  return tls_thread_cache.refill(c);
}
}  // namespace

void* heap_allocate_class_miss(std::size_t c) noexcept {
  void* p = tls_thread_cache.refill(c);
  if (MEMPOOL_UNLIKELY(p == nullptr)) p = refill_past_limit(c);
  if constexpr (kChecked) {
    if (p != nullptr) checked_on_allocate(p);
  }
  if constexpr (kMemoryChecker) {
    if (p != nullptr) checker_allocated(p, heap_class_bytes(c));
  }
  return p;
}

void* heap_allocate_slow(std::size_t n) noexcept {
  return allocate_large(n, kHeapPageSize);
}

// The class an aligned request gets: 0 for a large span. Blocks sit at span
// start (page-aligned) + k x size, so a class whose size is a multiple of the
// alignment gives aligned blocks; the power of two at or above max(n, alignment)
// is such a class, so the search is short.
std::size_t heap_aligned_class(std::size_t n, std::size_t alignment) noexcept {
  if (alignment <= kMinAlignLarge) {
    // Every class is 16-byte aligned.
    return n <= kHeapSmallMax ? heap_class_of(n) : 0;
  }
  if (alignment > kHeapPageSize || n > kHeapSmallMax) return 0;
  std::size_t c = heap_class_of(n < alignment ? alignment : n);
  while (kHeapClasses[c].size % alignment != 0)
    ++c;
  return c;
}

MEMPOOL_ALLOCATION_ENTRY void* heap_allocate_aligned(std::size_t n,
                                                     std::size_t alignment) noexcept {
  if (MEMPOOL_UNLIKELY(heap_sample_due(tls_thread_cache, n)) && alignment != 0 &&
      is_power_of_two(alignment))
    return heap_allocate_sampled(n, alignment);
  return heap_allocate_aligned_uncounted(n, alignment);
}

void* heap_allocate_aligned_uncounted(std::size_t n, std::size_t alignment) noexcept {
  if constexpr (kHardened) return hardened_allocate_aligned(n, alignment);
  if (alignment == 0 || !is_power_of_two(alignment)) return nullptr;
  if (const std::size_t c = heap_aligned_class(n, alignment); c != 0) return heap_allocate_class(c);
  return allocate_large(n == 0 ? 1 : n, alignment);
}

Span* heap_block_span(const void* p) noexcept {
  if (p == nullptr) return nullptr;
  Span* s = g_page_map.lookup(p);
  if (s == nullptr) {
    // In the heap's address space but unknown to the page map: the middle of a free span.
    if (g_page_heap.reserved(p)) heap_misuse(p, "block is not allocated (double free?)");
    heap_misuse(p, "pointer not allocated by the mempool heap");
  }
  switch (s->state) {
    case SpanState::kSmall: {
      const std::uint64_t offset = reinterpret_cast<std::uintptr_t>(p) - s->start;
      if (offset * s->divisor >= s->divisor) heap_misuse(p, "pointer into the middle of a block");
      return s;
    }
    case SpanState::kLarge:
    case SpanState::kDirect:
      if (reinterpret_cast<std::uintptr_t>(p) != s->start)
        heap_misuse(p, "pointer into the middle of a block");
      return s;
    case SpanState::kFree:
    case SpanState::kCached:
      break;
  }
  heap_misuse(p, "block is not allocated (double free?)");
}

}  // namespace mempool::detail

// Defined by the drop-in library (src/override/), which hands blocks of the
// system allocator back to it: true when p was one. Weak: the plain library
// has none, and every foreign pointer is misuse.
extern "C" bool mempool_free_foreign(void* p) noexcept __attribute__((weak));

namespace mempool::detail {

MEMPOOL_ALLOCATION_ENTRY void heap_free_slow(void* p, Span* s) noexcept {
  if (p == nullptr) return;
  if (s == nullptr) {
    if (mempool_free_foreign != nullptr && mempool_free_foreign(p)) return;
    if (g_page_heap.reserved(p))
      heap_misuse(p, "free of a block that is not allocated (double free?)");
    heap_misuse(p, "free of a pointer not allocated by the mempool heap");
  }
  if (s->state == SpanState::kFree || s->state == SpanState::kCached)
    heap_misuse(p, "free of a block that is not allocated (double free?)");
  if (s->state == SpanState::kSmall) {  // size_class not yet published: a racing bad free
    heap_misuse(p, "free of a block that is not allocated");
  }
  if (reinterpret_cast<std::uintptr_t>(p) != s->start)
    heap_misuse(p, "free of a pointer into the middle of a block");
  if (s->profile_site != nullptr) heap_profile_on_free(s);
  if (MEMPOOL_UNLIKELY(g_leak_check)) heap_tracked_free(p);
  if constexpr (kHardened) {
    if (!hardened_release_large(p, s)) return;
  }
  free_large(s);
  if (MEMPOOL_UNLIKELY(g_leak_check)) leak_scrub_stack();
}

void heap_free_aligned_checked(void* p, std::size_t n, std::size_t alignment) noexcept {
  if (p == nullptr) return;
  const Span* s = heap_block_span(p);
  const std::size_t c = heap_aligned_class(n, alignment);
  if (n > heap_usable_size(p) || (c != s->size_class && s->profile_site == nullptr))
    heap_misuse(p, "sized free with a size that is not the block's");
  heap_free(p);
}

void heap_free_sized_checked(void* p, std::size_t n) noexcept {
  if (p == nullptr) return;
  Span* s = heap_block_span(p);
  const std::size_t usable = heap_usable_size(p);
  const bool wrong = s->size_class != 0           ? heap_class_of(n) != s->size_class
                     : s->profile_site != nullptr ? false  // a sample: any size up to usable
                                                  : n <= kHeapSmallMax;
  if (n > usable || wrong) heap_misuse(p, "sized free with a size that is not the block's");
  heap_free(p);
}

void checked_on_allocate(void* p) noexcept {
  Span* s = g_page_map.lookup(p);
  const std::size_t i = block_index(p, s);
  const std::uint64_t bit = std::uint64_t{1} << (i % 64);
  if ((s->live_bits[i / 64].fetch_or(bit, std::memory_order_relaxed) & bit) != 0)
    heap_misuse(p, "block handed out twice (the heap's free lists are corrupt)");
}

void checked_on_free(void* p, Span* s) noexcept {
  const std::size_t i = block_index(p, s);
  const std::uint64_t bit = std::uint64_t{1} << (i % 64);
  if ((s->live_bits[i / 64].fetch_and(~bit, std::memory_order_relaxed) & bit) == 0)
    heap_misuse(p, "free of a block that is not allocated (double free?)");
}

MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* heap_realloc_move_ordered(void* p, void* q,
                                                                          std::size_t n, Span* s,
                                                                          std::size_t c) noexcept {
  std::memcpy(q, p, n);
  heap_free_small(p, s, c);
  return q;
}

std::size_t heap_usable_size_slow(const void* p) noexcept {
  if constexpr (kHardened) return hardened_usable_size(p);
  const Span* s = heap_block_span(p);
  if (s == nullptr) return 0;
  if (s->state == SpanState::kSmall) return kHeapClasses[s->size_class].size;
  if (s->profile_site != nullptr) return heap_sampled_usable_size(s);
  return s->bytes();
}

bool heap_resize_in_place(void* p, Span* s, std::size_t n) noexcept {
  // Not a sample: its size is in the profile.
  if (s->state != SpanState::kLarge || n <= kHeapSmallMax || n >= g_direct_map_threshold ||
      s->profile_site != nullptr)
    return false;
  const std::size_t old_bytes = s->bytes();
  if (!g_page_heap.resize(s, (n + kHeapPageSize - 1) >> kHeapPageShift)) return false;
  checker_resized(p, old_bytes, s->bytes());
  return true;
}

void heap_ensure_ready() noexcept {
  ensure_ready();
}

void heap_read_options() noexcept {
  ensure_ready();
  bool show_stats = false;
  {
    std::lock_guard<Lock> lock(g_init_mutex);
    show_stats = apply_options();
  }
  if (show_stats) std::atexit(print_stats_at_exit);
  start_profiler_if_configured();
}

bool heap_verbose() noexcept {
  return g_verbose;
}

std::size_t heap_direct_map_threshold() noexcept {
  return g_direct_map_threshold;
}

void heap_set_direct_map_threshold(std::size_t bytes) noexcept {
  g_direct_map_threshold = bytes;
}

}  // namespace mempool::detail

namespace mempool {

using detail::heap_allocate;
using detail::heap_allocate_aligned;

MEMPOOL_HOT_ENTRY void* detail::heap_try_allocate(std::size_t n) noexcept {
  if (void* p = detail::heap_try_hit(n); MEMPOOL_LIKELY(p != nullptr)) return p;
  return heap_allocate(n);
}

MEMPOOL_ALLOCATION_ENTRY void* try_allocate(std::size_t n, std::align_val_t alignment) noexcept {
  return heap_allocate_aligned(n, static_cast<std::size_t>(alignment));
}

MEMPOOL_HOT_ENTRY void deallocate(void* p) noexcept {
  detail::heap_free(p);
}

MEMPOOL_HOT_ENTRY void detail::heap_deallocate_sized(void* p, std::size_t n) noexcept {
  detail::heap_free_sized(p, n);
}

void deallocate(void* p, std::size_t n, std::align_val_t alignment) noexcept {
  if constexpr (detail::kChecked) {
    detail::heap_free_aligned_checked(p, n, static_cast<std::size_t>(alignment));
  } else if constexpr (detail::kHardened) {
    (void)alignment;
    detail::hardened_free_sized(p, n);  // the block knows its size
  } else {
    (void)n;
    (void)alignment;
    detail::heap_free(p);  // the class may differ from n's: look it up
  }
}

std::size_t usable_size(const void* p) noexcept {
  return detail::heap_usable_size(p);
}

bool owns(const void* p) noexcept {
  const detail::Span* s = detail::g_page_map.lookup(p);
  return s != nullptr && s->state != detail::SpanState::kFree &&
         s->state != detail::SpanState::kCached &&
         (s->state == detail::SpanState::kSmall
              ? s->size_class != 0 && reinterpret_cast<std::uintptr_t>(p) < s->carve
              : true);
}

Heap& Heap::global() noexcept {
  static constinit Heap heap;
  return heap;
}

void set_memory_limit(std::size_t bytes) noexcept {
  detail::heap_ensure_ready();  // MEMPOOL_MEMORY_LIMIT first, so that this call wins
  detail::g_page_heap.set_memory_limit(bytes);
}

std::size_t memory_limit() noexcept {
  return detail::g_page_heap.memory_limit();
}

void collect() noexcept {
  using namespace detail;
  if (tls_thread_cache.state() == ThreadCacheState::kActive) tls_thread_cache.release_all();
  if constexpr (kHardened) hardened_collect();
  g_central_cache.drain();
  g_page_heap.release_all();
}

}  // namespace mempool
