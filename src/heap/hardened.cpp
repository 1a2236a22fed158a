// The hardened heap (MEMPOOL_HARDENED=1: libmempool-malloc-hardened.so, docs/options.md):
// what malloc, free, realloc and malloc_usable_size do there instead of the hit paths
// of heap_internal.hpp. Compiled into the hardened library only.
//
// A request of n bytes takes a block of its class (size S), as in the default build.
// 1 in MEMPOOL_HARDENED_SAMPLE fresh spans is guarded: its blocks lie S + 16 bytes
// apart (the stride T), and a block of one holds
//
//   [0, n)               the program's bytes
//   [n, n + 8)           slack, filled with kPattern (as far as the canary)
//   [T - 8, T)           the canary: n in both halves, XORed with a secret and the address
//
// and once free:
//
//   [0, 8)               the free-list link (encoded: free_list.hpp)
//   [8, 64)              filled with kPattern (as far as the canary)
//   [T - 8, T)           the canary of a free block (n = kFreedMark)
//
// free checks the canary (a free block's: "double free"; one that does not decode, or
// slack that is not the pattern: "buffer overflow") and the canary of the block just
// below (an underflow of this block, or an overflow of that one); malloc checks that a
// block it takes from a free list still holds a free block's canary and fill ("write
// after free"). Every block of a guarded span is filled so from the start, and the
// span's free list is shuffled: the order of the blocks a program gets tells nothing
// about where the next one lies. The canary's secret is the heap's link key: a program
// cannot forge either. The blocks of other spans are the default build's, with the
// free mark in word 1; both kinds share the class's lists, and a block without the mark
// is checked as a guarded one (hardened_hand_out).
//
// A large block keeps n in its span, 64 bytes of slack after it, and (1 in the sample
// rate, or a mapping of its own always) a guard page (PROT_NONE) after its last page: a
// write past the slack faults at once. Freed, it keeps its guard in a small cache for the
// next large block of its size.
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "../options.hpp"
#include "central_cache.hpp"
#include "class_info.hpp"
#include "heap_internal.hpp"
#include "mempool/detail/lock.hpp"
#include "mempool/detail/os.hpp"

namespace mempool::detail {

namespace {

constexpr std::size_t kCanaryBytes = 8;
static_assert(kHardenedGuardedPad >= kCanaryBytes && kHardenedGuardedPad % 16 == 0);
// A large block's slack checked after the program's bytes (an overflow is seen by its
// first byte); a small block's is the word after them, or the bytes before its canary.
constexpr std::size_t kLargeSlack = 64;
// A free block's fill: the words from byte 8 (after the link) to byte 64, or to its
// canary. The first fields of a structure written through a stale pointer, without
// filling and reading the whole of a large class's block on every free and malloc.
constexpr std::size_t kFillEnd = 64;
constexpr unsigned char kPattern = 0xdb;
constexpr std::uint64_t kPatternWord = 0x0101010101010101u * kPattern;
constexpr std::uint32_t kFreedMark = 0xffffffffu;
constexpr std::size_t kSmallMax = kHeapSmallMax;

// The distance between the blocks of a guarded span of class c.
std::size_t stride_of(std::size_t c) noexcept {
  return hardened_guarded_stride(kHeapClasses[c].size);
}

const char* const kOverflow = "buffer overflow (canary overwritten)";

// The canary's secret: the link key (central_cache.cpp), rotated. Set before the first
// block exists (hardened_prepare_span) and never changed.
constinit std::atomic<std::uint64_t> g_secret{0};

char* bytes_of(void* p) noexcept {
  return static_cast<char*>(p);
}

std::uint64_t load_word(const void* p) noexcept {
  std::uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}
void store_word(void* p, std::uint64_t w) noexcept {
  std::memcpy(p, &w, sizeof w);
}

// The canary of a block at `block` holding n bytes (kFreedMark: a free block).
std::uint64_t canary_of(const void* block, std::uint32_t n) noexcept {
  return ((std::uint64_t{n} << 32) | n) ^ g_secret.load(std::memory_order_relaxed) ^
         reinterpret_cast<std::uintptr_t>(block);
}

// The canary word of a block of `size` bytes. Neighbours read it (the check of the
// block below), while the thread that owns that block may write it: relaxed atomics,
// plain moves on every machine we target.
std::uint64_t* canary_slot(void* block, std::size_t size) noexcept {
  return reinterpret_cast<std::uint64_t*>(bytes_of(block) + size - kCanaryBytes);
}
std::uint64_t load_canary(void* block, std::size_t size) noexcept {
  return __atomic_load_n(canary_slot(block, size), __ATOMIC_RELAXED);
}
void store_canary(void* block, std::size_t size, std::uint32_t n) noexcept {
  __atomic_store_n(canary_slot(block, size), canary_of(block, n), __ATOMIC_RELAXED);
}

// The n a canary word holds (kFreedMark for a free block), or false when the word was
// overwritten: its two halves then differ, but for a one-in-2^32 chance.
bool decode_canary(const void* block, std::uint64_t word, std::uint32_t* n) noexcept {
  const std::uint64_t v = word ^ canary_of(block, 0);
  *n = static_cast<std::uint32_t>(v);
  return static_cast<std::uint32_t>(v >> 32) == *n;
}

// Large blocks: bytes [from, to) filled with the pattern, and checked.
void fill(void* p, std::size_t from, std::size_t to) noexcept {
  if (from < to) std::memset(bytes_of(p) + from, kPattern, to - from);
}
bool holds_pattern(void* p, std::size_t from, std::size_t to) noexcept {
  const char* b = bytes_of(p);
  std::uint64_t diff = 0;
  std::size_t i = from;
  for (; i + 8 <= to; i += 8)
    diff |= load_word(b + i) ^ kPatternWord;
  for (; i < to; ++i)
    diff |= static_cast<unsigned char>(b[i]) ^ kPattern;
  return diff == 0;
}
std::size_t slack_end(std::size_t n, std::size_t end) noexcept {
  return n + kLargeSlack < end ? n + kLargeSlack : end;
}

// --- small blocks --------------------------------------------------------------------

// A small block's slack: the 8 bytes after its n, or the bytes between n and the canary
// when fewer, as one word (at offset `at`: n, or the word before the canary when n is
// closer to it) and the mask of those bytes in it. No branch: with mixed sizes one
// would go either way at random.
struct Slack {
  std::size_t at;
  std::uint64_t mask;
};
// kBelow[k]: the mask of bytes [0, k) of a word.
constexpr std::uint64_t kBelow[9] = {0,
                                     0xff,
                                     0xffff,
                                     0xffffff,
                                     0xffffffff,
                                     0xffffffffff,
                                     0xffffffffffff,
                                     0xffffffffffffff,
                                     ~std::uint64_t{0}};
Slack slack_of(std::size_t n, std::size_t size) noexcept {
  const std::size_t canary = size - kCanaryBytes;
  const std::size_t at = n < canary - 8 ? n : canary - 8;
  const std::size_t end = n + 8 < canary ? n + 8 : canary;
  return {at, kBelow[end - at] & ~kBelow[n - at]};
}
void write_slack(void* p, std::size_t n, std::size_t size) noexcept {
  const Slack s = slack_of(n, size);
  const std::uint64_t w = load_word(bytes_of(p) + s.at);
  store_word(bytes_of(p) + s.at, (w & ~s.mask) | (kPatternWord & s.mask));
}
bool slack_intact(void* p, std::size_t n, std::size_t size) noexcept {
  const Slack s = slack_of(n, size);
  return ((load_word(bytes_of(p) + s.at) ^ kPatternWord) & s.mask) == 0;
}

// A free block's fill: the words [8, min(kFillEnd, size - 8)).
std::size_t fill_words(std::size_t size) noexcept {
  return ((size - kCanaryBytes < kFillEnd ? size - kCanaryBytes : kFillEnd) - 8) / 8;
}
// Most classes have room for the whole fill: a fixed count of words, unrolled.
constexpr std::size_t kFillWords = (kFillEnd - 8) / 8;
void write_fill(void* p, std::size_t size) noexcept {
  auto* w = reinterpret_cast<std::uint64_t*>(bytes_of(p) + 8);
  if (MEMPOOL_LIKELY(size >= kFillEnd + kCanaryBytes)) {
    for (std::size_t i = 0; i < kFillWords; ++i)
      w[i] = kPatternWord;
    return;
  }
  for (std::size_t i = 0, k = fill_words(size); i < k; ++i)
    w[i] = kPatternWord;
}
bool fill_intact(void* p, std::size_t size) noexcept {
  const auto* w = reinterpret_cast<const std::uint64_t*>(bytes_of(p) + 8);
  std::uint64_t diff = 0;
  if (MEMPOOL_LIKELY(size >= kFillEnd + kCanaryBytes)) {
    for (std::size_t i = 0; i < kFillWords; ++i)
      diff |= w[i] ^ kPatternWord;
    return diff == 0;
  }
  for (std::size_t i = 0, k = fill_words(size); i < k; ++i)
    diff |= w[i] ^ kPatternWord;
  return diff == 0;
}

// Sampling: 1 in g_sample fresh small spans is guarded (hardened_prepare_span), and 1
// in g_sample large blocks of the page heap (allocate_large).
constinit std::atomic<std::uint64_t> g_sample{kDefaultHardenedSample};
constinit std::atomic<std::uint64_t> g_large_draws{0};

bool draw_guard() noexcept {
  const std::uint64_t sample = g_sample.load(std::memory_order_relaxed);
  if (sample <= 1) return true;
  const std::uint64_t draw = g_large_draws.fetch_add(1, std::memory_order_relaxed);
  return splitmix64_mix(g_secret.load(std::memory_order_relaxed) + draw * kSplitmix64Gamma) %
             sample ==
         0;
}

// Block p of class size `size` taken from a free list: still a free block? Then it
// becomes one of n bytes.
void* hand_out(void* p, std::size_t size, std::size_t n) noexcept {
  if (MEMPOOL_UNLIKELY(load_canary(p, size) != canary_of(p, kFreedMark) || !fill_intact(p, size)))
    heap_misuse(p, "write after free (a free block was modified)");
  write_slack(p, n, size);
  store_canary(p, size, static_cast<std::uint32_t>(n));
  return p;
}

void* allocate_small(std::size_t c, std::size_t n) noexcept {
  void* p = heap_pop<false>(c);
  if (MEMPOOL_UNLIKELY(p == nullptr)) {
    p = heap_allocate_class_miss(c);
    if (p == nullptr) return nullptr;
  }
  return hardened_hand_out(p, c, n);
}

// A block of class c aligned to `alignment`, above 16. Only a guarded span's blocks can
// be misaligned (they lie 16 bytes apart beyond the class's size): those are set aside
// and pushed back unchecked (they are checked when handed out), and after a few of
// them the request takes a large block. nullptr when out of memory.
void* allocate_small_aligned(std::size_t c, std::size_t n, std::size_t alignment) noexcept;

// The bytes the program asked for in block p of stride `size`, which it holds:
// stops the process if the block is free (`freed_problem`) or its canary or slack
// was overwritten.
std::size_t live_size(void* p, std::size_t size, const char* freed_problem) noexcept {
  std::uint32_t n;
  if (MEMPOOL_LIKELY(decode_canary(p, load_canary(p, size), &n))) {
    if (MEMPOOL_UNLIKELY(n == kFreedMark)) heap_misuse(p, freed_problem);
    if (MEMPOOL_LIKELY(n <= size - kHardenedGuardedPad && slack_intact(p, n, size))) return n;
  }
  heap_misuse(p, kOverflow);
}

// The canary of the block just below p in its span (live or free, every block of a
// span has one) must decode: a write before p, or past the end of that block, broke it.
void check_block_below(void* p, const Span* s, std::size_t size) noexcept {
  if (reinterpret_cast<std::uintptr_t>(p) == s->start) return;
  void* below = bytes_of(p) - size;
  std::uint32_t n;
  if (MEMPOOL_UNLIKELY(!decode_canary(below, load_canary(below, size), &n) ||
                       (n != kFreedMark && n > size - kHardenedGuardedPad)))
    heap_misuse(p, "buffer underflow (the canary of the block below was overwritten)");
}

// Block p of class c, from a guarded span, becomes a free block on this thread's list.
void release_small(void* p, std::size_t c, std::size_t size) noexcept {
  write_fill(p, size);
  store_canary(p, size, kFreedMark);
  heap_push_to_cache(tls_thread_cache, static_cast<FreeBlock*>(p), c, false);
}

// Block p of class c from a guarded span s, which the program holds, or the process
// stops. Returns the bytes it asked for.
std::size_t check_guarded(void* p, const Span* s, std::size_t c, const char* freed) noexcept {
  const std::size_t size = stride_of(c);
  const std::size_t n = live_size(p, size, freed);
  check_block_below(p, s, size);
  return n;
}

// --- large blocks --------------------------------------------------------------------

// Where a large block's guard page starts, as an offset from its start.
std::size_t guard_offset(const Span* s) noexcept {
  return s->bytes() - kHeapPageSize;
}

// Span::requested of a freed large block that the cache below keeps.
constexpr std::size_t kCachedMark = SIZE_MAX;

// Freed large blocks of the page heap keep their guard page in a small cache, newest
// last, for the next large block of about their size: a program that frees and
// allocates blocks of one size (a buffer of 256 KiB, which its canary makes large)
// then pays no mprotect for either, where it would pay two.
constexpr std::size_t kCachedSpans = 8;
constexpr std::size_t kCachedBytes = std::size_t{32} << 20;
struct GuardedCache {
  Lock lock;
  Span* spans[kCachedSpans] = {};
  std::size_t count = 0;
  std::size_t bytes = 0;
};
constinit GuardedCache g_guarded;

void remove_cached(std::size_t i) noexcept {
  g_guarded.bytes -= g_guarded.spans[i]->bytes();
  for (--g_guarded.count; i < g_guarded.count; ++i)
    g_guarded.spans[i] = g_guarded.spans[i + 1];
}

// A cached span with room for `pages` pages before its guard, and at most a quarter more.
Span* take_cached(std::size_t pages) noexcept {
  std::lock_guard<Lock> lock(g_guarded.lock);
  for (std::size_t i = g_guarded.count; i-- > 0;) {
    Span* s = g_guarded.spans[i];
    if (s->pages - 1 >= pages && s->pages - 1 <= pages + pages / 4) {
      remove_cached(i);
      return s;
    }
  }
  return nullptr;
}

// Keeps s; returns the span to free now instead (s, or the oldest), or nullptr.
Span* keep_cached(Span* s) noexcept {
  if (s->bytes() > kCachedBytes) return s;
  std::lock_guard<Lock> lock(g_guarded.lock);
  g_guarded.spans[g_guarded.count++] = s;
  g_guarded.bytes += s->bytes();
  if (g_guarded.count < kCachedSpans && g_guarded.bytes <= kCachedBytes) return nullptr;
  Span* oldest = g_guarded.spans[0];
  remove_cached(0);
  return oldest;
}

// A span leaving the cache goes back to the page heap, its guard page accessible again
// (or, if the kernel refuses that, nowhere: never handed out again).
void free_guarded(Span* s) noexcept {
  if (os_protect(address_as(s->start + guard_offset(s)), kHeapPageSize, true))
    heap_free_large_span(s);
}

void* allocate_large(std::size_t n, std::size_t alignment) noexcept {
  if (n > kHeapMaxRequest) return nullptr;
  // Whole pages for n (at least one), then the guard page.
  const std::size_t pages = n == 0 ? 1 : (n + kHeapPageSize - 1) >> kHeapPageShift;
  Span* s = alignment <= kHeapPageSize ? take_cached(pages) : nullptr;
  if (s != nullptr) {
    s->reused = true;  // it holds the last block's bytes: calloc must clear them
  } else {
    void* p = heap_allocate_large((pages + 1) << kHeapPageShift, alignment);
    if (p == nullptr) return nullptr;
    s = g_page_map.lookup(p);
    // A mapping from the direct cache was made inaccessible when its block was freed.
    // The whole of a mapping changes, never a part of it: no mapping is split, and the
    // kernel has no reason to refuse.
    if (s->state == SpanState::kDirect && s->reused) os_protect(p, s->bytes(), true);
    // A block of the page heap gets its guard page as spans do, 1 in g_sample (a loop of
    // mixed sizes up to 256 KiB made 16,000 mprotect calls a run with every block
    // guarded, 7,300 sampled); a mapping of its own always. Refused (the process has as
    // many mappings as the kernel allows): no guard.
    s->guarded = s->state == SpanState::kDirect || draw_guard();
    if (s->guarded) os_protect(address_as(s->start + guard_offset(s)), kHeapPageSize, false);
  }
  s->requested = n;
  void* p = address_as(s->start);
  fill(p, n, slack_end(n, guard_offset(s)));
  return p;
}

void check_large_slack(void* p, const Span* s) noexcept {
  const std::size_t n = s->requested;
  if (!holds_pattern(p, n, slack_end(n, guard_offset(s)))) heap_misuse(p, kOverflow);
}

// The span of large block p, which the program holds: stops the process if it is not
// one (`freed_problem` for one in the cache above), or its slack was overwritten.
Span* large_block_span(void* p, const char* freed_problem) noexcept {
  Span* s = heap_block_span(p);
  if (s->requested == kCachedMark) heap_misuse(p, freed_problem);
  check_large_slack(p, s);
  return s;
}

void* allocate_small_aligned(std::size_t c, std::size_t n, std::size_t alignment) noexcept {
  constexpr int kTries = 4;
  FreeBlock* aside[kTries];
  int count = 0;
  void* result = nullptr;
  while (count < kTries) {
    void* p = heap_pop<false>(c);
    if (p == nullptr) {
      p = heap_allocate_class_miss(c);
      if (p == nullptr) break;
    }
    if ((reinterpret_cast<std::uintptr_t>(p) & (alignment - 1)) == 0) {
      result = hardened_hand_out(p, c, n);
      break;
    }
    aside[count++] = static_cast<FreeBlock*>(p);
  }
  for (int i = count; i-- > 0;)
    heap_push_to_cache(tls_thread_cache, aside[i], c, false);
  if (result != nullptr || count < kTries) return result;
  return allocate_large(n, alignment);
}

}  // namespace

// Without asking the page map: a block of an unguarded span whose mark was overwritten
// does not hold a free block's canary either (which takes the secret to forge), and
// hand_out reports the write after free as it does for a guarded one.
void* hardened_hand_out_unmarked(void* p, std::size_t c, std::size_t n) noexcept {
  return hand_out(p, stride_of(c), n);
}

void* hardened_allocate_large_block(std::size_t n, std::size_t alignment) noexcept {
  return allocate_large(n, alignment);
}

void* hardened_allocate(std::size_t n) noexcept {
  if (MEMPOOL_LIKELY(n <= kSmallMax)) return allocate_small(heap_class_of(n), n);
  return allocate_large(n, kHeapPageSize);
}

void* hardened_allocate_aligned(std::size_t n, std::size_t alignment) noexcept {
  if (alignment == 0 || !is_power_of_two(alignment)) return nullptr;
  if (n <= kSmallMax) {
    if (const std::size_t c = heap_aligned_class(n, alignment); c != 0) {
      return alignment <= kHardenedGuardedPad ? allocate_small(c, n)
                                              : allocate_small_aligned(c, n, alignment);
    }
  }
  return allocate_large(n, alignment);
}

namespace {

// Out of line, so that the free of an unguarded block needs no stack frame.
MEMPOOL_NOINLINE void free_guarded_block(void* p, const Span* s, std::size_t c) noexcept {
  check_guarded(p, s, c, "double free");
  release_small(p, c, stride_of(c));
}

}  // namespace

MEMPOOL_HOT_ENTRY void hardened_free(void* p) noexcept {
  const std::uintptr_t entry = g_page_map.lookup_entry(p);
  const std::size_t c = entry & kSpanTagMask;
  if (MEMPOOL_LIKELY(c != 0)) {
    Span* s = heap_small_block_span(p, entry, c, "free of a pointer into the middle of a block");
    if (MEMPOOL_UNLIKELY(s->guarded)) {
      free_guarded_block(p, s, c);
      return;
    }
    heap_free_small(p, s, c);
    return;
  }
  heap_free_slow(p, reinterpret_cast<Span*>(entry & ~kSpanTagMask));
}

MEMPOOL_HOT_ENTRY void hardened_free_sized(void* p, std::size_t n) noexcept {
  const std::uintptr_t entry = g_page_map.lookup_entry(p);
  const std::size_t c = entry & kSpanTagMask;
  const char* const wrong_size = "sized free with a size that is not the block's";
  if (MEMPOOL_LIKELY(c != 0)) {
    Span* s = heap_small_block_span(p, entry, c, "free of a pointer into the middle of a block");
    if (MEMPOOL_LIKELY(!s->guarded)) {
      // The size asked for is not kept: the block must at least hold it (an aligned
      // block's class may be larger than the size's).
      if (n > kSmallMax || heap_class_of(n) > c) heap_misuse(p, wrong_size);
      heap_free_small(p, s, c);
      return;
    }
    if (check_guarded(p, s, c, "double free") != n) heap_misuse(p, wrong_size);
    release_small(p, c, stride_of(c));
    return;
  }
  const Span* s = reinterpret_cast<const Span*>(entry & ~kSpanTagMask);
  if (s != nullptr && (s->state == SpanState::kLarge || s->state == SpanState::kDirect) &&
      reinterpret_cast<std::uintptr_t>(p) == s->start && s->requested != n &&
      s->requested != kCachedMark)  // that one is a double free: heap_free_slow says so
    heap_misuse(p, wrong_size);
  heap_free_slow(p, reinterpret_cast<Span*>(entry & ~kSpanTagMask));
}

namespace {

// The bytes the program may use in small block p (class c, not 0), which it holds:
// the size it asked for in a guarded span (checked), the class's size in another.
std::size_t small_size(void* p, std::uintptr_t entry, std::size_t c, const char* interior,
                       const char* freed) noexcept {
  const Span* s = heap_small_block_span(p, entry, c, interior);
  if (MEMPOOL_LIKELY(!s->guarded)) return s->block_size;
  return check_guarded(p, s, c, freed);
}

}  // namespace

std::size_t hardened_small_usable_size(const void* p) noexcept {
  const std::uintptr_t entry = g_page_map.lookup_entry(p);
  const std::size_t c = entry & kSpanTagMask;
  if (c == 0) return 0;
  return small_size(const_cast<void*>(p), entry, c, "pointer into the middle of a block",
                    "malloc_usable_size of a free block");
}

std::size_t hardened_usable_size(const void* p) noexcept {
  if (p == nullptr) return 0;
  void* q = const_cast<void*>(p);  // read only: the checks write nothing
  const std::uintptr_t entry = g_page_map.lookup_entry(p);
  if (const std::size_t c = entry & kSpanTagMask; c != 0) {
    return small_size(q, entry, c, "pointer into the middle of a block",
                      "malloc_usable_size of a free block");
  }
  return large_block_span(q, "malloc_usable_size of a free block")->requested;
}

MEMPOOL_ALLOCATION_ENTRY void* hardened_realloc(void* p, std::size_t n) noexcept {
  const std::uintptr_t entry = g_page_map.lookup_entry(p);
  std::size_t old;
  if (const std::size_t c = entry & kSpanTagMask; c != 0) {
    old = small_size(p, entry, c, "realloc of a pointer into the middle of a block",
                     "realloc of a free block");
    // In place while the size stays in the block's class, so that a sized free with
    // the new size still names the right class (as the default build does).
    if (n <= kSmallMax && heap_class_of(n) == c) {
      const std::size_t size = stride_of(c);
      if (address_as<Span>(entry - c)->guarded) {
        write_slack(p, n, size);
        store_canary(p, size, static_cast<std::uint32_t>(n));
      }
      return heap_realloc_kept(p, n);
    }
  } else {
    Span* s = large_block_span(p, "realloc of a free block");
    old = s->requested;
    // In place while it fits before the guard page and still fills half of it.
    const std::size_t room = guard_offset(s);
    if (n > kSmallMax && n <= room && n > room / 2 && s->profile_site == nullptr) {
      fill(p, n, slack_end(n, room));
      s->requested = n;
      return heap_realloc_kept(p, n);
    }
  }
  void* q = heap_allocate(n);  // counted for the profiler
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, old < n ? old : n);
  hardened_free(p);
  return q;
}

bool hardened_release_large(void* p, Span* s) noexcept {
  large_block_span(p, "free of a block that is not allocated (double free?)");
  // A direct mapping stays inaccessible while the direct cache keeps it, so that a write
  // after free faults. A page-heap span waits in the cache above with its guard page.
  if (s->state == SpanState::kDirect) {
    os_protect(p, s->bytes(), false);
    return true;
  }
  if (!s->guarded) return true;
  s->requested = kCachedMark;
  Span* victim = keep_cached(s);
  if (victim == nullptr) return false;
  if (victim == s) return os_protect(bytes_of(p) + guard_offset(s), kHeapPageSize, true);
  free_guarded(victim);
  return false;
}

void hardened_collect() noexcept {
  for (;;) {
    Span* s = nullptr;
    {
      std::lock_guard<Lock> lock(g_guarded.lock);
      if (g_guarded.count == 0) return;
      s = g_guarded.spans[0];
      remove_cached(0);
    }
    free_guarded(s);
  }
}

HardenedCached hardened_cached() noexcept {
  std::lock_guard<Lock> lock(g_guarded.lock);
  return {g_guarded.count, g_guarded.bytes};
}

void hardened_lock() noexcept {
  g_guarded.lock.lock();
}

void hardened_unlock() noexcept {
  g_guarded.lock.unlock();
}

namespace {
constinit std::atomic<std::uint64_t> g_seed{0};
constinit std::atomic<std::uint64_t> g_spans{0};
}  // namespace

void hardened_set_sampling(std::uint64_t seed, std::uint64_t sample) noexcept {
  g_seed.store(seed, std::memory_order_relaxed);
  g_sample.store(sample, std::memory_order_relaxed);
}

// Draws whether s is guarded; a guarded span's blocks are filled as free ones and linked
// in a Fisher-Yates order of the block indexes but the first, with a generator seeded
// from the heap's secret (or MEMPOOL_HARDENED_SEED) and a count of spans (splitmix64:
// one multiply-xorshift a block).
void hardened_prepare_span(Span* s, std::size_t c) noexcept {
  const HeapClassInfo& info = kHeapClasses[c];
  const std::uintptr_t key = heap_link_key();
  g_secret.store(std::rotl(std::uint64_t{key}, 32), std::memory_order_relaxed);
  const std::uint64_t seed = g_seed.load(std::memory_order_relaxed);
  std::uint64_t state =
      (seed != 0 ? seed : key) ^ (g_spans.fetch_add(1, std::memory_order_relaxed) << 32);
  const auto next_random = [&state]() noexcept {
    return splitmix64_mix(state += kSplitmix64Gamma);
  };
  static constexpr std::size_t kMaxCapacity = [] {
    std::uint32_t most = 0;
    for (const HeapClassInfo& i : kHeapClasses)
      most = i.capacity > most ? i.capacity : most;
    return most;
  }();
  // Drawn only when sampling: with every span guarded, a seed gives the order it gave
  // before sampling was added (the misuse suite's expected outcomes depend on it).
  const std::uint64_t sample = g_sample.load(std::memory_order_relaxed);
  s->guarded = sample <= 1 || next_random() % sample == 0;
  // Another span is carved as in the default build, in address order and lazily: a
  // shuffled one costs its locality (a producer-consumer loop of 64-byte blocks took
  // 1.5 times as long with every span shuffled as with the guarded ones alone).
  if (!s->guarded) return;
  // Fewer blocks, further apart: the span's interior-pointer test and its count of
  // blocks follow (the class's 8 blocks a span at least leave 7 here).
  const std::size_t size = hardened_guarded_stride(info.size);
  const std::size_t capacity = s->bytes() / size;
  s->capacity = static_cast<std::uint32_t>(capacity);
  s->divisor = UINT64_MAX / size + 1;
  s->start_divisor = s->start * s->divisor;
  std::uint16_t order[kMaxCapacity];
  static_assert(kMaxCapacity <= UINT16_MAX + 1);
  for (std::size_t i = 0; i < capacity; ++i)
    order[i] = static_cast<std::uint16_t>(i);
  // Block 0 stays first in `order`, so it is pushed first and handed out last: no
  // canary lies below it (the memory below a span is another's), and while its span
  // has another free block no program holds it. The others come in a random order.
  for (std::size_t i = capacity - 1; i > 1; --i) {
    const std::size_t j = 1 + static_cast<std::size_t>(next_random() % i);
    const std::uint16_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  FreeBlock* head = nullptr;
  for (std::size_t i = 0; i < capacity; ++i) {
    auto* b = address_as<FreeBlock>(s->start + std::size_t{order[i]} * size);
    write_fill(b, size);
    store_canary(b, size, kFreedMark);
    heap_set_next(b, head, key);
    head = b;
  }
  s->free_blocks = head;
  s->carve = s->carve_end = s->start + capacity * size;  // nothing left to carve
}

}  // namespace mempool::detail
