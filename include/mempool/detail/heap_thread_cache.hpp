// The general heap's thread cache: per thread, one free list per size class.
// The hit path (heap_pop, heap_free_to_cache below) pops or pushes a block with
// no lock and no atomic read-modify-write; everything else is out of line, in
// src/heap/thread_cache.cpp. It is a public (detail) header because heap.hpp
// inlines the hit path into callers whose size is a compile-time constant.
//
// List lengths adapt per class (tcmalloc's slow start): a list's flush threshold
// `max` starts at 0, grows by one each time the list overflows or runs dry until
// it reaches the class's batch, then by whole batches while the class stays hot,
// and shrinks again when a list keeps overflowing. The sum of max x block size is
// the thread's budget, its share of MEMPOOL_TOTAL_THREAD_CACHE_BYTES (32 MiB) between
// 1 MiB and MEMPOOL_THREAD_CACHE_BYTES (8 MiB): past it the lists are halved,
// largest class first, so one thread cannot hoard memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mempool/detail/free_list.hpp"
#include "mempool/detail/memory_checker.hpp"
#include "mempool/detail/platform.hpp"
#include "mempool/detail/size_classes.hpp"

namespace mempool::detail {

enum class ThreadCacheState : std::uint8_t {
  kUnset,   // the thread has not used the heap yet
  kActive,  // caching
  kExited,  // the thread is exiting (or has no exit hook): no caching any more
};

// The heap's links: next ^ (the block's own address) ^ key. The key's properties
// (free_list.hpp) make what a program writes into a freed block decode as an
// implausible link. The address makes a forged link need the block's address, as
// glibc's safe-linking (next ^ (address >> 12)) does, and a leaked link gives away
// only next ^ address. glibc shifts the address so that its random bits also hide the
// link's low bits; here the key's do, and the shift would be two instructions more a
// malloc/free pair, which loops through several classes pay (mempool-bench rounds of
// four sizes: about 7%). The default build's key is fixed, a constant in the code:
// loaded from the thread cache, it was a load more on every malloc and every free, and
// the hottest loops are bound by their loads and stores (docs/architecture.md,
// "Hardening"). The hardened library's key is random, one a process (heap_link_key).
// The fixed key is a sign-extended 32-bit number, so that the xors and the mark's store
// take it as an immediate (a 64-bit one was two instructions more a pair: mempool-bench
// micro 6%). Its top 17 bits are ones, so zeros, pointers, positive numbers and text
// written into a freed block decode as implausible; its low three bits are neither all
// zeros nor all ones, so a fill of 0xff bytes does too. What passes: a negative number
// above -2^47 whose low three bits are the key's (1 in 8 of those).
inline constexpr std::uintptr_t kHeapFixedLinkKey = 0xffffffff9d71e2b3u;
static_assert(static_cast<std::int64_t>(kHeapFixedLinkKey) ==
              static_cast<std::int32_t>(kHeapFixedLinkKey & 0xffffffffu));
static_assert((kHeapFixedLinkKey & 7) - 1 < 6, "low three bits neither 000 nor 111");

MEMPOOL_ALWAYS_INLINE std::uintptr_t heap_block_key(const FreeBlock* b,
                                                    std::uintptr_t key) noexcept {
  return key ^ reinterpret_cast<std::uintptr_t>(b);
}
MEMPOOL_ALWAYS_INLINE FreeBlock* heap_next(const FreeBlock* b, std::uintptr_t key) noexcept {
  return b->decoded_next(heap_block_key(b, key));
}
MEMPOOL_ALWAYS_INLINE void heap_set_next(FreeBlock* b, FreeBlock* next,
                                         std::uintptr_t key) noexcept {
  b->set_encoded_next(next, heap_block_key(b, key));
}

// Where a free block says it is free: word 1, holding the link key, as glibc's tcache
// key. In the default build that is a constant a program could store into a live
// block: its free would then be searched for in the free lists and go on as usual.
// Word 1, so that free() need not read word 0: a program's last write before a
// free is often a narrow store into word 0 (a flag, a count), and a wider load of a
// word a narrow store is still writing cannot be forwarded from the store buffer; it
// waits for the store to reach the cache (measured: malloc(1024), write byte 0, free:
// 2.4 ns a pair without the checks, 8.7 with the mark in word 0, 3.0 in word 1). Every
// class has a word 1 (the smallest is 16 bytes). In the hardened library, the blocks
// of a guarded span have no mark: their word 1 holds their fill (or canary), and a
// word 1 that is not the mark sends malloc to check the block (hardened_hand_out).
inline constexpr std::size_t kHeapFreeMarkOffset = sizeof(void*);
static_assert(heap_class_bytes(1) >= kHeapFreeMarkOffset + sizeof(void*));

// Whether the hit paths reach a list head as %fs:(register) (ThreadCache::head): on
// x86-64 (not x32, whose GOT entries are 4 bytes), not under a sanitizer (GCC's macros;
// Clang's __has_feature), whose instrumentation sees only the plain access.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MEMPOOL_SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define MEMPOOL_SANITIZED_BUILD 1
#endif
#endif
#if defined(__x86_64__) && !defined(__ILP32__) && !defined(MEMPOOL_SANITIZED_BUILD)
#define MEMPOOL_TLS_HEAD_REGISTER 1
#else
#define MEMPOOL_TLS_HEAD_REGISTER 0
#endif

struct OwnedSpans;  // src/heap/thread_cache.hpp
struct Span;        // src/heap/span.hpp

// The part of the thread cache that the hit paths touch, first in ThreadCache: three
// arrays indexed by class (the hit path reaches an entry with one scaled address from
// the TLS base) and the words beside them. Standard-layout, so that the hit paths' asm
// can name its members' offsets (ThreadCache::head and note_pop below).
struct ThreadCacheHot {
  FreeBlock* heads[kHeapClassCount] = {};
  // rooms[c] = maxes[c] - (blocks in list c): a free decrements it and flushes
  // when it goes negative, an allocation increments it, so the hit path updates
  // one word with one instruction and tests the sign. Written only by the owning
  // thread; stats() reads it from other threads with a relaxed atomic load (an
  // aligned 32-bit word: the worst it sees is a slightly old value).
  // ThreadSanitizer builds make it a real atomic, so TSan checks all the rest.
#if defined(__SANITIZE_THREAD__)
  std::atomic<std::int32_t> rooms[kHeapClassCount] = {};
#else
  std::int32_t rooms[kHeapClassCount] = {};
#endif
  // Flush thresholds; 0 until a class is used. 16 bits (a list never passes 32768
  // blocks, thread_cache.cpp) keep the whole object, and so the library's static TLS
  // block that dlopen() must find room for, under glibc's surplus (docs/architecture.md,
  // "Packaging").
  std::uint16_t maxes[kHeapClassCount] = {};
  // The hardened library's link key, copied here when the cache becomes active so
  // that the hit path reaches it from the TLS base like the lists. 0 before: the one
  // block an unset cache may hold is re-encoded when it activates.
  std::uintptr_t link_key = 0;
  // The heap profiler (src/heap/heap_profiler.cpp): bytes this thread may still
  // allocate before the next sample. The hit path subtracts each request and goes
  // out of line when it turns negative; it starts at 0, so a thread's first
  // allocation sets it (to a random interval, or to "never" when profiling is off).
  std::int64_t sample_countdown = 0;
  // The largest size a sized free takes straight to the cache: kHeapSmallMax, or 0
  // while profiling, when a sampled block (a span of its own) may be any size's and
  // only the page map knows it. 0 until the cache is active: the page map answers.
  std::size_t sized_free_max = 0;
};
static_assert(std::is_standard_layout_v<ThreadCacheHot>);

class MEMPOOL_API ThreadCache : public ThreadCacheHot {
 public:
  // The key this cache's lists are encoded with; the hardened library's is read as the
  // hit paths read the heads (below), so this too must be the calling thread's cache
  // (every caller is: the hit paths and the owner's refill and flush). With the
  // compiler's own %fs: access the hardened hit paths loaded the cache's GOT entry twice.
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE std::uintptr_t key() const noexcept {
    if constexpr (kHardened) {
#if MEMPOOL_TLS_HEAD_REGISTER
      std::uintptr_t k;
      __asm__ volatile("movq %%fs:%c2(%1), %0"
                       : "=r"(k)
                       : "r"(tls_offset()), "i"(offsetof(ThreadCacheHot, link_key))
                       : "memory");
      return k;
#else
      return link_key;
#endif
    }
    return kHeapFixedLinkKey;
  }
  MEMPOOL_ALWAYS_INLINE std::int32_t room(std::size_t c) const noexcept {
#if defined(__SANITIZE_THREAD__)
    return rooms[c].load(std::memory_order_relaxed);
#else
    return rooms[c];
#endif
  }
  MEMPOOL_ALWAYS_INLINE void set_room(std::size_t c, std::int32_t room) noexcept {
#if defined(__SANITIZE_THREAD__)
    rooms[c].store(room, std::memory_order_relaxed);
#else
    rooms[c] = room;
#endif
  }
  // The head of list c, as the hit paths read and write it, and its room counter as they
  // update it; this must be the calling thread's cache. The default build on x86-64 reaches
  // every word of the hit paths (head, room, the profiler's count, the sized free's limit)
  // through one register, the cache's offset from the thread pointer loaded from its GOT
  // entry (tls_offset), and addresses the head as %fs:(register) with 8c added in, where
  // the compiler writes %fs:(offset,c,8): a segment base and an index register in one
  // address. On an Intel Xeon of family 6 model 207 those accesses, a free's store of the
  // head and the next malloc's load of it, bound a malloc/free loop: mempool-bench
  // compare's 4-byte pair took 12.5 [11.1-15.9] ns with the compiler's address and 9.7
  // [9.2-14.9] with the register, the segment alone (here) or the index alone (the
  // cache's address in a register, this_thread_cache below) as fast (docs/performance.md, "On
  // Intel"). The room counters keep the indexed form, which measured the same either way. Every
  // access is an asm, so that the compiler loads no offset of its own from the GOT beside
  // tls_offset's (an operand naming the memory would make it compute the address): a "memory"
  // clobber orders them instead, and volatile keeps each (the compiler merges no two loads of a
  // head). With that second GOT load, and the pop's two copies (heap_pop_head), compare ran 3-16%
  // slower at 4 B to 4 KiB on that Xeon.
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE FreeBlock* head(std::size_t c) const noexcept {
#if MEMPOOL_TLS_HEAD_REGISTER
    FreeBlock* b;
    __asm__ volatile("movq %%fs:(%1), %0" : "=r"(b) : "r"(head_offset(c)) : "memory");
    return b;
#else
    return heads[c];
#endif
  }
  MEMPOOL_ALWAYS_INLINE void set_head(std::size_t c, FreeBlock* b) noexcept {
#if MEMPOOL_TLS_HEAD_REGISTER
    __asm__ volatile("movq %0, %%fs:(%1)" : : "r"(b), "r"(head_offset(c)) : "memory");
#else
    heads[c] = b;
#endif
  }
  // A block popped from list c: one room more. A class the compiler knows, from a size it
  // knows, is a displacement, not an index (the "i" branch: __builtin_constant_p is false
  // without optimization, and the branch is dropped).
  MEMPOOL_ALWAYS_INLINE void note_pop(std::size_t c) noexcept {
#if MEMPOOL_TLS_HEAD_REGISTER
    if (__builtin_constant_p(c)) {
      __asm__ volatile("addl $1, %%fs:%c1(%0)"
                       :
                       : "r"(tls_offset()), "i"(room_offset(c))
                       : "memory");
    } else {
      __asm__ volatile("addl $1, %%fs:%c1(%0,%2,4)"
                       :
                       : "r"(tls_offset()), "i"(offsetof(ThreadCacheHot, rooms)), "r"(c)
                       : "memory");
    }
#else
    set_room(c, room(c) + 1);
#endif
  }
  // A block pushed on list c: one room less; true when the list is past its threshold.
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE bool note_push(std::size_t c) noexcept {
#if MEMPOOL_TLS_HEAD_REGISTER
    bool over;
    if (__builtin_constant_p(c)) {
      __asm__ volatile("subl $1, %%fs:%c2(%1)"
                       : "=@ccs"(over)
                       : "r"(tls_offset()), "i"(room_offset(c))
                       : "memory");
    } else {
      __asm__ volatile("subl $1, %%fs:%c2(%1,%3,4)"
                       : "=@ccs"(over)
                       : "r"(tls_offset()), "i"(offsetof(ThreadCacheHot, rooms)), "r"(c)
                       : "memory");
    }
    return over;
#else
    const std::int32_t left = room(c) - 1;
    set_room(c, left);
    return left < 0;
#endif
  }
  // The profiler's count less a request of n bytes; true when it turned negative.
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE bool count_down(std::size_t n) noexcept {
#if MEMPOOL_TLS_HEAD_REGISTER
    bool due;
    __asm__ volatile("subq %3, %%fs:%c2(%1)"
                     : "=@ccs"(due)
                     : "r"(tls_offset()), "i"(offsetof(ThreadCacheHot, sample_countdown)), "er"(n)
                     : "memory");
    return due;
#else
    sample_countdown = static_cast<std::int64_t>(static_cast<std::uint64_t>(sample_countdown) - n);
    return sample_countdown < 0;
#endif
  }
  // Whether a sized free of n bytes may go straight to the cache (n <= sized_free_max).
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE bool sized_free_takes(std::size_t n) const noexcept {
#if MEMPOOL_TLS_HEAD_REGISTER
    bool takes;
    __asm__ volatile("cmpq %3, %%fs:%c2(%1)"
                     : "=@ccae"(takes)
                     : "r"(tls_offset()), "i"(offsetof(ThreadCacheHot, sized_free_max)), "er"(n)
                     : "memory");
    return takes;
#else
    return n <= sized_free_max;
#endif
  }
  [[nodiscard]] std::uint32_t count(std::size_t c) const noexcept {
    return static_cast<std::uint32_t>(static_cast<std::int32_t>(maxes[c]) - room(c));
  }
  void set_count(std::size_t c, std::uint32_t n) noexcept {
    set_room(c, static_cast<std::int32_t>(maxes[c]) - static_cast<std::int32_t>(n));
  }

  // The list of class c was empty: fetch a batch from the central cache and
  // return one block (nullptr when out of memory).
  void* refill(std::size_t c) noexcept;
  // The list of class c passed its threshold (room < 0): give a batch back.
  void flush(std::size_t c) noexcept;
  // Gives every cached block back (thread exit, collect()).
  void release_all() noexcept;
  // Runs at thread exit (a pthread key destructor).
  void on_thread_exit() noexcept;

  // This thread's budget: max_bytes past it makes the lists shrink.
  [[nodiscard]] std::size_t budget() const noexcept {
    return budget_;
  }
  [[nodiscard]] std::size_t max_bytes() const noexcept {
    return max_bytes_;
  }

  [[nodiscard]] ThreadCacheState state() const noexcept {
    return state_;
  }
  // From another thread (stats): both words may be stale, so clamp at 0.
  [[nodiscard]] std::size_t cached_blocks(std::size_t c) const noexcept {
#if defined(__SANITIZE_THREAD__)
    const std::int32_t r = rooms[c].load(std::memory_order_relaxed);
#else
    const std::int32_t r = __atomic_load_n(&rooms[c], __ATOMIC_RELAXED);
#endif
    const auto m = static_cast<std::int32_t>(__atomic_load_n(&maxes[c], __ATOMIC_RELAXED));
    return (m > r ? static_cast<std::size_t>(m - r) : 0) + owned_blocks(c);
  }
  // From another thread (stats), the registry locked: class c's blocks on the local lists
  // of the spans this thread owns (thread_cache.cpp).
  [[nodiscard]] std::size_t owned_blocks(std::size_t c) const noexcept;

  // Thread-cache registry (stats, fork).
  // Calls f on every registered cache, the registry locked.
  static void for_each(void (*f)(const ThreadCache&, void*), void* context) noexcept;
  static void lock_registry() noexcept;
  static void unlock_registry() noexcept;
  // In a forked child: only the calling thread survived; forget the others.
  static void reset_registry_after_fork() noexcept;

 private:
#if MEMPOOL_TLS_HEAD_REGISTER
  // The cache's offset from the thread pointer, which the compiler's %fs: accesses load
  // from the GOT (a program's linker makes it a constant). Not volatile: the compiler
  // loads it once a function. The asm names tls_thread_cache by its mangled name, so a
  // rename must change it here (every build then fails to link until it does);
  // ThreadCacheHot is the cache's first base, at its offset 0 (the hit paths' tests read
  // every list through both).
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE static std::uintptr_t tls_offset() noexcept {
    std::uintptr_t cache;
    __asm__("movq _ZN7mempool6detail16tls_thread_cacheE@gottpoff(%%rip), %0" : "=r"(cache));
    return cache;
  }
  // heads[c]'s offset from the thread pointer; rooms[c]'s from the cache's start (a
  // displacement).
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE static std::uintptr_t head_offset(std::size_t c) noexcept {
    return tls_offset() + offsetof(ThreadCacheHot, heads) + c * sizeof(std::uintptr_t);
  }
  static constexpr std::size_t room_offset(std::size_t c) noexcept {
    return offsetof(ThreadCacheHot, rooms) + c * sizeof(std::int32_t);
  }
#endif
  bool activate() noexcept;
  void release(std::size_t c, std::size_t n) noexcept;
  void set_max(std::size_t c, std::uint32_t max) noexcept;
  void update_budget() noexcept;
  void grow(std::size_t c, std::uint32_t max) noexcept;
  void scavenge(std::size_t target, std::size_t spare = 0) noexcept;
  // Thread-owned spans (thread_cache.cpp).
  std::size_t give_to_owned_spans(std::size_t c, std::size_t n) noexcept;
  void* refill_from_owned_span(std::size_t c) noexcept;
  void keep_whole_span(std::size_t c, Span* s) noexcept;
  void give_back_local(std::size_t c, Span* s, bool whole) noexcept;
  void release_owned_spans() noexcept;

  // A list may grow past the budget by scavenging the others at most once every this
  // many refills and flushes of the thread (grow, thread_cache.cpp).
  static constexpr std::uint32_t kMissesPerScavenge = 16384;
  std::uint32_t misses_since_scavenge_ = 0;
  std::size_t max_bytes_ = 0;  // sum of max x block size
  std::size_t budget_ = 0;     // this thread's share of the total (set when active)
  std::uint8_t overflows_[kHeapClassCount] = {};
  ThreadCacheState state_ = ThreadCacheState::kUnset;
  // The spans this thread owns that hold blocks it gave back, per class; from the metadata
  // arena when the cache activates, so that the static TLS block stays under glibc's
  // surplus (docs/architecture.md, "Packaging"). nullptr: none (not active, or no memory).
  OwnedSpans* owned_ = nullptr;
  ThreadCache* prev_ = nullptr;
  ThreadCache* next_ = nullptr;

  friend class ThreadCacheRegistry;
};

// Initial-exec TLS (MEMPOOL_TLS_MODEL, platform.hpp) in every build, libmempool.so.0
// included: one %fs-relative access, no __tls_get_addr call.
MEMPOOL_API extern constinit thread_local ThreadCache tls_thread_cache MEMPOOL_TLS_MODEL;

// The calling thread's cache, which the hit paths address the lists through, each access
// with a %fs: prefix (the list heads' as %fs:(register), ThreadCache::head). The cache's
// address taken once and hidden from the compiler (GCC's -mno-tls-direct-seg-refs does the
// same) was built and shipped beside this form as libmempool-malloc-tls-pointer.so, and
// was faster on no CPU measured: 7-15% slower on an AMD EPYC of family 26 model 2 (before
// the heads' register form), then against that form 1-3% slower on an Intel Xeon of family
// 6 model 207, 1-6% on an AMD EPYC of family 25 model 17, 2-5% on an Intel Xeon reported as
// family 6 model 167 (docs/performance.md, "On Intel", "On Zen 4", "On a second Intel model").
MEMPOOL_ALWAYS_INLINE ThreadCache& this_thread_cache() noexcept {
  return tls_thread_cache;
}

// Checked builds: marks a block handed out (src/heap/heap.cpp).
MEMPOOL_API void checked_on_allocate(void* p) noexcept;
// Stops the process: the link in free block b does not decode to a block.
[[noreturn]] MEMPOOL_API void heap_free_list_corrupted(const void* b) noexcept;
// The same, declared as returning so that heap_pop jumps to it: a call to a
// [[noreturn]] function would give every malloc a stack frame (2 instructions),
// and non-null so that callers that test the result need not keep their arguments.
__attribute__((returns_nonnull)) MEMPOOL_API void* heap_pop_corrupted(const void* b) noexcept;
// The link after free block b, checked: the slow paths that walk lists use it.
inline FreeBlock* heap_checked_next(const FreeBlock* b, std::uintptr_t key) noexcept {
  FreeBlock* next = heap_next(b, key);
  if (MEMPOOL_UNLIKELY(!plausible_link(next))) heap_free_list_corrupted(b);
  return next;
}
// p's word 1 starts as the free mark does: if it holds the mark, stops the process when p
// is in this thread's list or the central cache (a double free); else frees it.
MEMPOOL_API void heap_free_suspect(void* p, std::size_t c) noexcept;

// Block b, off a free list, becomes the program's: its mark is zeroed, so that its
// free is not suspect. Its encoded link stays, as glibc leaves its safe-linked one: the
// link is encoded to catch a write after free, not to hide the key from the program
// (the hardened library zeroes it too). One store fewer on every malloc.
MEMPOOL_ALWAYS_INLINE void heap_hand_out(FreeBlock* b) noexcept {
  b->clear_word_at(kHeapFreeMarkOffset);
}

// Links free block b before `next`, marked free. Every block on any free list of the
// heap is marked (but a hardened guarded span's), so that its free is suspect wherever
// it is.
MEMPOOL_ALWAYS_INLINE void heap_link_free(FreeBlock* b, FreeBlock* next,
                                          std::uintptr_t key) noexcept {
  b->set_word_at(kHeapFreeMarkOffset, key);
  heap_set_next(b, next, key);
}

// The profiler's count, taken when a request of n bytes is about to be served: true
// when it is to be sampled instead. Two instructions, a subtract into the TLS word and
// a branch on its sign. The count is not restored then: the caller's slow path counts
// the request again, still negative, and the sample it takes draws a new count.
MEMPOOL_ALWAYS_INLINE bool heap_sample_due(ThreadCache& t, std::size_t n) noexcept {
  return MEMPOOL_UNLIKELY(t.count_down(n));
}

// Block b, the head of the calling thread's list c, off the list.
// kHandOut: the block is handed out here (its mark zeroed), and a corrupted link
// jumps to heap_pop_corrupted. The hardened heap passes false: only the link is zeroed
// (hardened_hand_out reads the mark), and a corrupted link stops the process by a
// call, since a caller that goes on with its arguments would keep them in saved
// registers for the jump: a stack frame on every call.
// kJump: a corrupted link jumps to heap_pop_corrupted (a hit path whose caller
// returns the block at once); otherwise it calls heap_free_list_corrupted, which does
// not return, so that a caller that goes on after the pop (realloc's move) keeps no
// register for a return that never comes.
template <bool kHandOut, bool kJump>
MEMPOOL_ALWAYS_INLINE void* heap_pop_head(ThreadCache& t, std::size_t c, FreeBlock* b) noexcept {
  // The link decoded as link ^ (b ^ key), b ^ key made first: one xor after the load,
  // which takes the load as its operand. The empty asms keep the compiler from its own
  // form, which kept the raw link for the prefetch's test (next == 0 as link == b ^ key):
  // two register copies more.
  std::uintptr_t block_key = heap_block_key(b, t.key());
  __asm__("" : "+r"(block_key));
  FreeBlock* next = b->decoded_next(block_key);
  __asm__("" : "+r"(next));
  if (MEMPOOL_UNLIKELY(!plausible_link(next))) {
    if constexpr (kJump) return heap_pop_corrupted(b);
    heap_free_list_corrupted(b);
  }
  t.set_head(c, next);
  // The next allocation's load of `next`'s link is a chain that waits on this one; a
  // list of blocks freed long ago, or by another thread (a container destroyed and built
  // again, a consumer's frees), misses on every link. Fetched now, the line arrives while
  // the program uses this block (tcmalloc's pop does the same). But never nullptr: where
  // the pop empties the list (a loop of one block over 512 B, whose refills take one),
  // prefetching page 0 cost 9.1-9.5 ns a pair against 5.8-7.3 with the block handed out
  // in its place (AMD EPYC family 26 model 2, KVM; a `test` and a `cmov`): likely a page
  // walk that finds no page, again on every call (no counters here to show it). Without any
  // prefetch, xmalloc and handoff ran 1.2x slower in one set of the suite, level in
  // another (docs/performance.md, "The prefetch of nullptr").
  __builtin_prefetch(next != nullptr ? next : b);
  if constexpr (kHandOut) {
    heap_hand_out(b);
  } else {
    b->clear_link();
  }
  t.note_pop(c);
  if constexpr (kChecked) checked_on_allocate(b);
  if constexpr (kMemoryChecker) checker_allocated(b, heap_class_bytes(c));
  return b;
}

// A block of class c from the calling thread's cache, or nullptr on a miss.
template <bool kHandOut = true, bool kJump = kHandOut>
MEMPOOL_ALWAYS_INLINE void* heap_pop(ThreadCache& t, std::size_t c) noexcept {
  FreeBlock* b = t.head(c);
  if (MEMPOOL_UNLIKELY(b == nullptr)) return nullptr;
  return heap_pop_head<kHandOut, kJump>(t, c, b);
}
template <bool kHandOut = true, bool kJump = kHandOut>
MEMPOOL_ALWAYS_INLINE void* heap_pop(std::size_t c) noexcept {
  return heap_pop<kHandOut, kJump>(this_thread_cache(), c);
}

// heap_pop for a request of n bytes, counted for the profiler: nullptr on a miss
// and when the request is to be sampled (the caller's slow path then serves it,
// counting it there).
template <bool kHandOut = true, bool kJump = kHandOut>
MEMPOOL_ALWAYS_INLINE void* heap_pop_counted(std::size_t c, std::size_t n) noexcept {
  ThreadCache& t = this_thread_cache();
  // A miss first, uncounted.
  FreeBlock* b = t.head(c);
  if (MEMPOOL_UNLIKELY(b == nullptr)) return nullptr;
  if (MEMPOOL_UNLIKELY(heap_sample_due(t, n))) return nullptr;
  return heap_pop_head<kHandOut, kJump>(t, c, b);
}

// Pushes p (a block of class c) on the calling thread's cache, unchecked; past
// the list's threshold a batch goes back to the central cache. Marked free, but for
// the hardened heap's guarded blocks (`marked` false).
// heap_push_keyed: with the key the caller read (the hardened library's is a load).
MEMPOOL_ALWAYS_INLINE void heap_push_keyed(ThreadCache& t, FreeBlock* b, std::size_t c,
                                           std::uintptr_t key, bool marked = true) noexcept {
  if (marked) {
    heap_link_free(b, t.head(c), key);
  } else {
    heap_set_next(b, t.head(c), key);
  }
  t.set_head(c, b);
  if (MEMPOOL_UNLIKELY(t.note_push(c))) t.flush(c);
}
MEMPOOL_ALWAYS_INLINE void heap_push_to_cache(ThreadCache& t, FreeBlock* b, std::size_t c,
                                              bool marked = true) noexcept {
  heap_push_keyed(t, b, c, t.key(), marked);
}

// free's hit path: a block that holds the free mark may be free already, and is
// looked for first. The mark's first byte is compared here, and the whole word out of
// line (heap_free_suspect) when that matches (1 in 256 live blocks at most: the key's low byte is
// never a multiple of 8, so never a zero or an aligned pointer's): a program's last store before
// free often lands in word 1 (the last byte of a 16-byte block), and a wider load overlapping a
// narrower store still in the store buffer waits for it (heap_benchmark pair16, which writes the
// block's first and last bytes: 7.8 ns a pair with the word load, 4.4 before the checks), where a
// byte load inside the store is forwarded.
MEMPOOL_ALWAYS_INLINE void heap_free_to_cache(ThreadCache& t, void* p, std::size_t c) noexcept {
  auto* b = static_cast<FreeBlock*>(p);
  if constexpr (kMemoryChecker) checker_freed(p, heap_class_bytes(c));
  const std::uintptr_t key = t.key();
  if (MEMPOOL_UNLIKELY(b->byte_at(kHeapFreeMarkOffset) == static_cast<std::uint8_t>(key))) {
    heap_free_suspect(p, c);
    return;
  }
  heap_push_keyed(t, b, c, key);
}
MEMPOOL_ALWAYS_INLINE void heap_free_to_cache(void* p, std::size_t c) noexcept {
  heap_free_to_cache(this_thread_cache(), p, c);
}

}  // namespace mempool::detail
