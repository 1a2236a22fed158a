#include "thread_cache.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "central_cache.hpp"
#include "class_info.hpp"
#include "heap_internal.hpp"
#include "heap_profiler.hpp"
#include "leak_check.hpp"
#include "mempool/detail/intrusive_list.hpp"
#include "mempool/detail/lock.hpp"
#include "metadata.hpp"

namespace mempool::detail {

constinit thread_local ThreadCache tls_thread_cache MEMPOOL_TLS_MODEL;

namespace {

constinit Lock g_registry_mutex;
// A thread's budget is its share of the total, kept between kMinBudget and
// g_max_budget: one or a few threads cache up to 8 MiB each, which programs
// that cycle blocks of 64-256 KiB need (a window of mixed sizes ran 70 ns an
// operation at 2 MiB, 47 at 8), while a thousand threads hold 1 MiB each.
constexpr std::size_t kMinBudget = std::size_t{1} << 20;
constinit std::size_t g_max_budget = std::size_t{8} << 20;
constinit std::size_t g_total_budget = std::size_t{32} << 20;
constinit std::size_t g_caches = 0;  // registered (active) caches; registry mutex
// The share, recomputed when a cache comes or goes; every slow path reads it.
constinit std::atomic<std::size_t> g_share{std::size_t{8} << 20};

// Registry mutex held (or before any thread has a cache).
void update_share() noexcept {
  const std::size_t share = g_total_budget / std::max<std::size_t>(1, g_caches);
  g_share.store(std::clamp(share, std::min(kMinBudget, g_max_budget), g_max_budget),
                std::memory_order_relaxed);
}

std::size_t budget_share() noexcept {
  return g_share.load(std::memory_order_relaxed);
}

pthread_key_t g_exit_key;
constinit bool g_have_exit_key = false;

// A list may grow to 16 batches, or past that while it holds at most kListBytesPastBatches
// (the classes below 256 B), and never past kMaxListLength blocks. A program that
// allocates many thousand small blocks and then frees them all (a container built and
// destroyed: mempool-bench micro's Bulk, 10,000 blocks of 24 B) then keeps them in its
// own list instead of sending all but 1,024 through the central cache and carving them
// again: Bulk took 9.1 ns a pair with 16 batches, 6.1 with 256 KiB, mimalloc 4.0
// (docs/performance.md, "On Zen 5"). 256 KiB still sent Bulk's last 1,808 blocks
// through the central cache, 1.2 ns a pair more than 512 KiB (AMD EPYC family 26 model 2,
// 5 rounds: 5.95 [5.56-6.01] against 4.73 [4.57-5.46], mimalloc 5.17 [4.23-5.75]; "...and
// lists to 512 KiB" there). The bound is in bytes so that the classes of 256 B and more
// keep theirs (16 batches, up to 1 MiB): lists of every class allowed 128 batches made 8
// threads of mempool-bench server 6-9% slower (why was not looked into); 512 KiB for the
// small classes did not (684 [672-767] against 694 [675-735] ns, 7 rounds). The thread's
// budget still bounds every list (class_cap).
constexpr std::uint32_t kMaxListLength = 32768;
constexpr std::size_t kListBytesPastBatches = std::size_t{512} << 10;
static_assert(kMaxListLength <= UINT16_MAX, "ThreadCache::maxes holds 16 bits");

// No class may hold more than an eighth of the budget: otherwise a few hot large
// classes (blocks of 64-256 KiB) fill it on their own, and every scavenge then
// halves the small classes' lists too (mixed sizes to 256 KiB in a window of
// live blocks spent most of their time refilling and flushing).
std::uint32_t class_cap(std::size_t c, std::size_t budget) noexcept {
  const std::size_t blocks = budget / 8 / kHeapClasses[c].size;
  return static_cast<std::uint32_t>(std::clamp<std::size_t>(blocks, 1, kMaxListLength));
}

void thread_exit_hook(void* cache) {
  static_cast<ThreadCache*>(cache)->on_thread_exit();
}

}  // namespace

class ThreadCacheRegistry {
 public:
  using List = IntrusiveList<ThreadCache, &ThreadCache::prev_, &ThreadCache::next_>;

  static void add(ThreadCache* t) noexcept {
    std::lock_guard<Lock> lock(g_registry_mutex);
    caches().push_front(t);
    ++g_caches;
    update_share();
  }
  static void remove(ThreadCache* t) noexcept {
    std::lock_guard<Lock> lock(g_registry_mutex);
    if (t->prev_ != nullptr || caches().first() == t) {  // a member only
      caches().remove(t);
      --g_caches;
      update_share();
    }
  }
  static ThreadCache* first() noexcept { return caches().first(); }
  static ThreadCache* next(const ThreadCache* t) noexcept { return List::next(t); }
  static void reset_to(ThreadCache* survivor) noexcept {
    caches().clear();
    g_caches = 0;
    if (survivor->state_ == ThreadCacheState::kActive) {
      caches().push_front(survivor);
      g_caches = 1;
    }
    update_share();
  }

 private:
  static List& caches() noexcept {
    static constinit List list;
    return list;
  }
};

void set_thread_cache_budget(std::size_t max_per_thread, std::size_t total) noexcept {
  std::lock_guard<Lock> lock(g_registry_mutex);
  g_max_budget = max_per_thread;
  g_total_budget = total;
  update_share();
}

bool create_thread_exit_key() noexcept {
  g_have_exit_key = ::pthread_key_create(&g_exit_key, thread_exit_hook) == 0;
  return g_have_exit_key;
}

// The block a refill returns. The hardened heap zeroes its link alone: its mark (or, in
// a guarded span, the fill in its place) is for hardened_hand_out to read.
void hand_out_first(FreeBlock* b) noexcept {
  if constexpr (kHardened) {
    b->clear_link();
  } else {
    heap_hand_out(b);
  }
}

void* allocate_uncached(std::size_t c) noexcept {
  FreeBlock* b = nullptr;
  if (g_central_cache.remove_range(c, 1, &b) == 0) return nullptr;
  hand_out_first(b);
  return b;
}

bool ThreadCache::activate() noexcept {
  // The heap's set-up may allocate (pthread_atfork), and so activate this cache.
  heap_ensure_ready();
  if (state_ != ThreadCacheState::kUnset) return state_ == ThreadCacheState::kActive;
  // The hardened library's frees before this one pushed blocks marked and linked with
  // key 0 (one per list: each push overflowed at once): re-encode them with the heap's.
  if constexpr (kHardened) {
    const std::uintptr_t key = heap_link_key();
    for (std::size_t c = 1; c < kHeapClassCount; ++c) {
      for (FreeBlock* b = heads[c]; b != nullptr;) {
        FreeBlock* next = heap_checked_next(b, link_key);
        // (A block of a guarded span has no mark: hardened_hand_out.)
        if (g_page_map.lookup(b)->guarded) {
          heap_set_next(b, next, key);
        } else {
          heap_link_free(b, next, key);
        }
        b = next;
      }
    }
    link_key = key;
  }
  // Uncached while registering: as the process's malloc, pthread_setspecific's
  // own calloc (for keys past the first 32) comes back here. Without an exit
  // hook the cache would be stranded when the thread ends: it stays uncached.
  state_ = ThreadCacheState::kExited;
  if (!g_have_exit_key || ::pthread_setspecific(g_exit_key, this) != 0) return false;
  state_ = ThreadCacheState::kActive;
  // Without it (no memory) the thread's overflows go to the central cache, as before spans
  // were owned.
  if constexpr (kThreadOwnedSpans) owned_ = g_metadata.create<OwnedSpans>();
  // While profiling, a sized free must ask the page map (a sample may be any size).
  sized_free_max = heap_profiler_active() ? 0 : kHeapSmallMax;
  ThreadCacheRegistry::add(this);
  budget_ = budget_share();
  return true;
}

void ThreadCache::set_max(std::size_t c, std::uint32_t max) noexcept {
  const std::size_t size = kHeapClasses[c].size;
  max_bytes_ = max_bytes_ - maxes[c] * size + max * size;
  const std::uint32_t n = count(c);
  // stats() reads it. max <= kMaxListLength: every caller clamps it (class_cap).
  __atomic_store_n(&maxes[c], static_cast<std::uint16_t>(max), __ATOMIC_RELAXED);
  set_count(c, n);
}

// Gives the first n blocks of list c to the central cache, whole batches first; those of
// spans this thread owns to their spans' local lists instead (give_to_owned_spans).
void ThreadCache::release(std::size_t c, std::size_t n) noexcept {
  // Only while the thread may own spans of the class (OwnedSpans::may_own).
  if (kThreadOwnedSpans && owned_ != nullptr && owned_->may_own[c] &&
      state_ == ThreadCacheState::kActive) {
    n = give_to_owned_spans(c, n);
    if (n == 0) return;
  }
  const std::size_t batch = kHeapClasses[c].batch;
  std::uint32_t left = count(c);
  // The blocks' addresses, noted on the walk that finds the batch's end: kept whole, the
  // batch keeps them beside it for the thread that takes it (prefetch_kept_batch).
  FreeBlock* blocks[kHeapMaxBatch];
  while (n > 0) {
    const std::size_t take = n < batch ? n : batch;
    FreeBlock* first = heads[c];
    FreeBlock* last = first;
    blocks[0] = first;
    for (std::size_t i = 1; i < take; ++i)
      blocks[i] = last = heap_checked_next(last, key());
    heads[c] = heap_checked_next(last, key());
    heap_set_next(last, nullptr, key());  // batches travel as nullptr-terminated chains
    left -= static_cast<std::uint32_t>(take);
    set_count(c, left);
    g_central_cache.insert_range(c, first, take, blocks, this);
    n -= take;
  }
}

void* ThreadCache::refill(std::size_t c) noexcept {
  if (state_ != ThreadCacheState::kActive && (state_ == ThreadCacheState::kExited || !activate()))
    return allocate_uncached(c);
  // The leak check: no block stays in a thread cache (see flush).
  if (MEMPOOL_UNLIKELY(g_leak_check)) return allocate_uncached(c);
  update_budget();
  ++misses_since_scavenge_;
  const std::uint32_t batch = kHeapClasses[c].batch;
  // Slow start: one more block per miss up to a batch, then whole batches. But
  // never fewer than 1 KiB's worth: blocks are carved in the order threads ask,
  // and single small blocks handed to two threads in turn would share cache lines
  // (false sharing that made two threads 3x slower in the mixed-size benchmark).
  const std::uint32_t least = kHeapClasses[c].least_fetch;
  std::uint32_t max = maxes[c];
  if (max < least) {
    max = least;
  } else if (max < batch) {
    ++max;
  } else if (max + batch <= kMaxListLength &&
             (max < 16 * batch ||
              std::size_t{max + batch} * kHeapClasses[c].size <= kListBytesPastBatches)) {
    max += batch;
  }
  grow(c, std::min(max, class_cap(c, budget_)));
  if constexpr (kThreadOwnedSpans) {
    if (owned_ != nullptr) {
      if (void* p = refill_from_owned_span(c)) return p;
      owned_->may_own[c] = true;
    }
  }
  const std::size_t want = maxes[c] < batch ? (maxes[c] == 0 ? 1 : maxes[c]) : batch;
  FreeBlock* first = nullptr;
  const std::size_t got = g_central_cache.remove_range(c, want, &first, this);
  if (got == 0) return nullptr;
  heads[c] = heap_next(first, key());  // the central cache checked the chain
  hand_out_first(first);
  set_count(c, static_cast<std::uint32_t>(got - 1));
  return first;
}

// An allocation entry (platform.hpp): under the leak check, free stacks are taken below it.
MEMPOOL_ALLOCATION_ENTRY void ThreadCache::flush(std::size_t c) noexcept {
  // The leak check: every free comes here (the list's max stays 0, so the push that
  // called this overflowed), and the block just pushed leaves the leak table.
  if (MEMPOOL_UNLIKELY(g_leak_check)) {
    heap_tracked_free(heads[c]);
    release(c, count(c));
    leak_scrub_stack();
    return;
  }
  if (state_ != ThreadCacheState::kActive && (state_ == ThreadCacheState::kExited || !activate())) {
    release(c, count(c));
    return;
  }
  // This thread has not allocated from class c (its max is still 0), so the block is
  // another thread's, carved among that thread's blocks. Kept here, it would be this
  // thread's next block of the class, and two threads would write one cache line
  // (passive false sharing: a worker frees the input it was handed, then allocates;
  // Hoard's cache-scratch). It goes back to its span; the refill that follows takes
  // it first and so hands it out last. Later frees of the class are kept as usual,
  // so a thread that only frees (a consumer) still gives blocks back in batches.
  // Only a block its span says is a block of class c moves: a sized free names the
  // class without asking the page map, and what such a free gets wrong stays as
  // undetected here as on every later free (the misuse table records it so).
  if (maxes[c] == 0) {
    grow(c, 1);
    if (maxes[c] == 0) {
      release(c, count(c));  // the budget is full: the class stays uncached (grow)
      return;
    }
    if (g_central_cache.carved_block(c, heads[c])) release(c, 1);
    return;
  }
  update_budget();
  ++misses_since_scavenge_;
  const std::uint32_t batch = kHeapClasses[c].batch;
  if (maxes[c] < batch && maxes[c] < class_cap(c, budget_)) {
    grow(c, maxes[c] + 1);  // slow start
    if (count(c) <= maxes[c]) return;
  } else if (maxes[c] > batch && ++overflows_[c] > 3) {
    // Overflowing again and again: the program frees more than it allocates here.
    set_max(c, maxes[c] - batch);
    overflows_[c] = 0;
  }
  const std::uint32_t n = count(c);
  release(c, n < batch ? n : batch);
}

// The thread's share of the total, read again on every refill and flush (threads come
// and go). When it shrank below what the lists may hold, they are cut to half of it.
void ThreadCache::update_budget() noexcept {
  const std::size_t share = budget_share();
  const bool shrank = share < budget_;
  budget_ = share;
  if (shrank && max_bytes_ > share) scavenge(share / 2);
}

// Class c's threshold to max, within the budget. Past it the list does not grow (its
// threshold stays; a class still at 0 goes uncached: every block to and from the
// central cache), except once every kMissesPerScavenge refills and flushes, when the
// largest other lists are cut back to make room (scavenge), so that a program whose
// sizes change still moves its cache to the new ones. Scavenging on every growth past
// the budget made lists that together want more than it take turns: blocks of 8 B to
// 256 KiB in a window of 1024 live ones (mempool-bench throughput), where the classes
// above 64 KiB alone want more, scavenged once every 300 operations, each pass halving
// some 30 lists, which then missed and grew back (a threshold reset in 1 operation of
// 2; the allocator ran 153 instructions an operation, 121 with this).
void ThreadCache::grow(std::size_t c, std::uint32_t max) noexcept {
  const std::uint32_t before = maxes[c];
  set_max(c, max);
  if (max_bytes_ <= budget_) return;
  if (misses_since_scavenge_ >= kMissesPerScavenge) {
    misses_since_scavenge_ = 0;
    scavenge(budget_, c);
    if (max_bytes_ <= budget_) return;
  }
  set_max(c, before);
}

// Halves the lists from the largest class down until the thresholds sum to `target`
// (half the budget when the thread's share shrank; the budget in grow, which spares
// the class that grows). Largest first, because a few blocks of 64-256 KiB weigh as
// much as every small list together: halving all lists each time let large classes
// push the small ones down again and again (mixed sizes to 256 KiB in a window: 1 in
// 40 operations scavenged, and most small frees flushed).
void ThreadCache::scavenge(std::size_t target, std::size_t spare) noexcept {
  for (std::size_t c = kHeapClassCount - 1; c >= 1 && max_bytes_ > target; --c) {
    if (maxes[c] == 0 || c == spare) continue;
    set_max(c, maxes[c] / 2);
    const std::uint32_t n = count(c);
    if (n > maxes[c]) release(c, n - maxes[c]);
  }
}

void ThreadCache::release_all() noexcept {
  for (std::size_t c = 1; c < kHeapClassCount; ++c) {
    release(c, count(c));
    set_max(c, 0);
    overflows_[c] = 0;
  }
  release_owned_spans();
}

namespace {
// Written by the owner only; stats reads it from other threads.
void add_owned_blocks(OwnedSpans& o, std::size_t c, std::int64_t n) noexcept {
  o.blocks[c].store(static_cast<std::uint32_t>(o.blocks[c].load(std::memory_order_relaxed) + n),
                    std::memory_order_relaxed);
}
}  // namespace

// Thread-owned spans (span.hpp). A thread's frees go to its list as always; what overflows
// it would go through the central cache, and most of it, past the batches the central cache
// keeps whole, back to the blocks' spans under the class's lock, to be taken out again by
// the next refill (in mempool-bench tree, which frees 97,800 nodes at once, about 70 of the
// allocator's 134 instructions a node). Of the first n blocks of list c, those of spans this
// thread owns go to their spans' local lists instead, no lock taken, and the thread's next
// refill of the class takes a span's local list whole. The others stay first on the list,
// in their order, for the central cache; returns how many. (Offering each batch to the
// central cache's kept batches first, and only the rest here, walked every block once more
// and was no faster in mempool-bench churn, whose kept batches are full.)
std::size_t ThreadCache::give_to_owned_spans(std::size_t c, std::size_t n) noexcept {
  OwnedSpans& o = *owned_;
  const std::uintptr_t key = this->key();
  FreeBlock* b = heads[c];
  FreeBlock* others = nullptr;
  FreeBlock* others_last = nullptr;
  std::size_t stay = 0;
  std::int64_t given = 0;  // added to o.blocks once, or before a span goes back
  for (std::size_t i = 0; i < n; ++i) {
    FreeBlock* next = heap_checked_next(b, key);
    Span* s = g_page_map.lookup(b);
    // The class too: a sized free with a wrong size puts another class's block here; and
    // one the span has carved: a block past it was never handed out (the central cache
    // reports both: release_to_spans).
    if (s != nullptr && span_owner(s) == this && s->size_class == c &&
        reinterpret_cast<std::uintptr_t>(b) < span_carve(s)) {
      if (s->local == nullptr) o.with_local[c].push_front(s);
      heap_set_next(b, s->local, key);
      s->local = b;
      ++given;
      if (++s->local_count == s->capacity) {
        add_owned_blocks(o, c, given);
        given = 0;
        keep_whole_span(c, s);
      }
    } else {
      if (others == nullptr) {
        others = b;
      } else {
        heap_set_next(others_last, b, key);
      }
      others_last = b;
      ++stay;
    }
    b = next;
  }
  if (others != nullptr) {
    heap_set_next(others_last, b, key);
    b = others;
  }
  heads[c] = b;
  set_count(c, count(c) - static_cast<std::uint32_t>(n - stay));
  add_owned_blocks(o, c, given);
  // None of its own (and some looked at: release_all passes empty lists): stop looking until
  // the next refill from the central cache.
  if (stay == n && n != 0) o.may_own[c] = false;
  return stay;
}

// Owned span s of class c has every block on its local list. It stays for the thread's next
// refills while the bytes of such spans fit in what the thread's budget leaves its lists
// (all of an 8 MiB budget but the lists' 512 KiB in mempool-bench tree); past that it goes
// back now (its blocks through the central cache, so the span to the page heap or the kept
// empty spans), so that a thread holds no more memory than its budget, as before spans were
// owned.
void ThreadCache::keep_whole_span(std::size_t c, Span* s) noexcept {
  OwnedSpans& o = *owned_;
  const std::size_t bytes = s->bytes();
  const std::size_t room = budget_ > max_bytes_ ? budget_ - max_bytes_ : 0;
  if (o.whole_bytes + bytes <= room) {
    o.whole_bytes += bytes;
    return;
  }
  give_back_local(c, s, false);
}

// Owned span s's local list to the central cache; `whole`: it was counted in whole_bytes.
// The list becomes the span's own, none of its blocks walked where the span's list is empty
// (a thread's exit in mempool-bench churn, whose threads free half their blocks, otherwise
// sent each block on to its span, after it had gone to the local list).
void ThreadCache::give_back_local(std::size_t c, Span* s, bool whole) noexcept {
  OwnedSpans& o = *owned_;
  if (whole) o.whole_bytes -= s->bytes();
  FreeBlock* first = s->local;
  const std::uint32_t n = s->local_count;
  o.with_local[c].remove(s);
  s->local = nullptr;
  s->local_count = 0;
  add_owned_blocks(o, c, -static_cast<std::int64_t>(n));
  g_central_cache.insert_span_list(c, s, first, n);
}

// The list of class c is empty (its threshold grown as for any refill): the newest owned
// span with local blocks gives it as many of them as the threshold takes, at least one.
// nullptr when no owned span of the class has any.
void* ThreadCache::refill_from_owned_span(std::size_t c) noexcept {
  OwnedSpans& o = *owned_;
  Span* s = o.with_local[c].first();
  if (s == nullptr) return nullptr;
  const std::uint32_t n = s->local_count;
  const std::uint32_t take = std::clamp<std::uint32_t>(maxes[c], 1, n);
  const std::uintptr_t key = this->key();
  FreeBlock* first = s->local;
  if (n == s->capacity) o.whole_bytes -= s->bytes();
  if (take == n) {
    o.with_local[c].remove(s);
    s->local = nullptr;
    s->local_count = 0;
  } else {
    FreeBlock* last = first;
    for (std::uint32_t i = 1; i < take; ++i)
      last = heap_checked_next(last, key);
    s->local = heap_checked_next(last, key);
    heap_set_next(last, nullptr, key);
    s->local_count = n - take;
  }
  add_owned_blocks(o, c, -static_cast<std::int64_t>(take));
  heads[c] = heap_checked_next(first, key);
  set_count(c, take - 1);
  hand_out_first(first);
  return first;
}

// Every owned span's local list to the central cache (thread exit, collect()). The spans
// stay owned: blocks of them this thread still holds go to their local lists when its list
// overflows, and a span whose last block comes back is nobody's (release_to_spans).
void ThreadCache::release_owned_spans() noexcept {
  if (owned_ == nullptr) return;
  for (std::size_t c = 1; c < kHeapClassCount; ++c) {
    while (Span* s = owned_->with_local[c].first())
      give_back_local(c, s, s->local_count == s->capacity);
  }
}

std::size_t ThreadCache::owned_blocks(std::size_t c) const noexcept {
  return owned_ != nullptr ? owned_->blocks[c].load(std::memory_order_relaxed) : 0;
}

void ThreadCache::on_thread_exit() noexcept {
  // Later frees on this thread (other exit hooks) see max == 0 and kExited and go
  // straight to the central cache.
  state_ = ThreadCacheState::kExited;
  release_all();
  ThreadCacheRegistry::remove(this);
  if (owned_ != nullptr) {
    OwnedSpans* o = owned_;
    owned_ = nullptr;
    g_metadata.destroy(o);
  }
}

void heap_free_suspect(void* p, std::size_t c) noexcept {
  ThreadCache& t = tls_thread_cache;
  if (static_cast<FreeBlock*>(p)->word_at(kHeapFreeMarkOffset) != t.key()) {
    heap_push_to_cache(t, static_cast<FreeBlock*>(p), c);  // the first byte only
    return;
  }
  std::uint32_t n = t.heads[c] != nullptr ? t.count(c) : 0;
  for (const FreeBlock* b = t.heads[c]; b != nullptr && n > 0;
       b = heap_checked_next(b, t.key()), --n)
    if (b == p) heap_misuse(p, "double free");
  if constexpr (kThreadOwnedSpans) {
    const Span* s = g_page_map.lookup(p);
    if (s != nullptr && span_owner(s) == &t) {
      std::uint32_t m = s->local_count;
      for (const FreeBlock* b = s->local; b != nullptr && m > 0;
           b = heap_checked_next(b, t.key()), --m)
        if (b == p) heap_misuse(p, "double free");
    }
  }
  if (g_central_cache.holds_free(c, p)) heap_misuse(p, "double free");
  // Its mark only looked like a link (or another thread's cache holds it,
  // which cannot be searched without stopping that thread).
  heap_push_to_cache(t, static_cast<FreeBlock*>(p), c);
}

void ThreadCache::for_each(void (*f)(const ThreadCache&, void*), void* context) noexcept {
  std::lock_guard<Lock> lock(g_registry_mutex);
  for (ThreadCache* t = ThreadCacheRegistry::first(); t != nullptr;
       t = ThreadCacheRegistry::next(t))
    f(*t, context);
}

void ThreadCache::lock_registry() noexcept {
  g_registry_mutex.lock();
}
void ThreadCache::unlock_registry() noexcept {
  g_registry_mutex.unlock();
}

void ThreadCache::reset_registry_after_fork() noexcept {
  ThreadCacheRegistry::reset_to(&tls_thread_cache);
}

}  // namespace mempool::detail
