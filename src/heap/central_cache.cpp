#include "central_cache.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "heap_internal.hpp"
#include "metadata.hpp"
#include "page_heap.hpp"
#include "page_map.hpp"
#include "thread_cache.hpp"

namespace mempool::detail {

constinit CentralCache g_central_cache;

namespace {
constinit std::atomic<std::uintptr_t> g_link_key{0};

MEMPOOL_COLD std::uintptr_t make_heap_link_key() noexcept {
  std::uintptr_t expected = 0;
  const std::uintptr_t key = new_link_key();  // never 0: its low bits are not
  // Two threads carving their first spans at once agree on the first key stored.
  return g_link_key.compare_exchange_strong(expected, key, std::memory_order_acq_rel) ? key
                                                                                      : expected;
}
}  // namespace

std::uintptr_t heap_link_key() noexcept {
  if constexpr (!kHardened) return kHeapFixedLinkKey;
  const std::uintptr_t key = g_link_key.load(std::memory_order_acquire);
  return MEMPOOL_LIKELY(key != 0) ? key : make_heap_link_key();
}

Span* CentralCache::new_span(std::size_t c) noexcept {
  const HeapClassInfo& info = kHeapClasses[c];
  // The page heap sets the state under its lock (it reads its neighbours' states),
  // and tags every page with the class: the free path reads it from the page map.
  Span* s =
      g_page_heap.allocate(info.span_pages, 1, SpanState::kSmall, static_cast<std::uint8_t>(c));
  if (s == nullptr) return nullptr;
  if constexpr (kChecked) {
    const std::size_t words = (info.capacity + 63) / 64;
    s->live_bits = static_cast<std::atomic<std::uint64_t>*>(
        g_metadata.allocate(words * sizeof(std::uint64_t)));
    if (s->live_bits == nullptr) {
      g_page_heap.free(s);
      return nullptr;
    }
  }
  s->capacity = info.capacity;
  s->divisor = info.divisor;
  s->carve = s->start;
  s->carve_end = s->start + std::size_t{info.capacity} * info.size;
  s->allocated = 0;
  s->free_blocks = nullptr;
  if constexpr (kThreadOwnedSpans) start_span_owned(s, nullptr);
  s->start_divisor = s->start * info.divisor;
  s->block_size = info.size;
  if constexpr (kHardened) hardened_prepare_span(s, c);
  return s;
}

// The walk of a span's list in remove_range is a chain of dependent loads of blocks that
// came back in whatever order the program freed them, long out of cache: in mempool-bench
// tree, 60% of the refills' time went to that one load, one miss after another (perf,
// cpu-clock). Where the list holds a quarter of the span or more and the walk will take
// at least half of it, the line of every carved block's link is asked for at once
// instead (every line, for blocks under 64 bytes), so that the misses overlap; the walk
// and then the program write those lines. Otherwise most of them would not be read.
void CentralCache::prefetch_listed_blocks(const Span* s, std::size_t taken) noexcept {
  const std::uintptr_t size = s->block_size;
  const std::uintptr_t span_bytes = std::uintptr_t{s->capacity} * size;
  const std::uintptr_t listed = (s->capacity - s->allocated) * size - (s->carve_end - s->carve);
  if (listed < span_bytes / 4 || listed > 2 * taken * size) return;
  const std::uintptr_t stride = size < kCacheLine ? kCacheLine : size;
  for (std::uintptr_t a = s->first_block(); a < s->carve; a += stride)
    __builtin_prefetch(address_as<const char>(a));
}

// The rows beside the kept batches (central_cache.hpp), made when the class first keeps
// a batch; the class locked (the metadata arena's lock comes after the classes', as at fork).
void CentralCache::make_rows(Class& k, std::size_t c) noexcept {
  const HeapClassInfo& info = kHeapClasses[c];
  static_assert(std::size_t{kMaxCentralSlots} * (kHeapMaxBatch + 1) * sizeof(void*) <=
                MetadataArena::kMaxBytes);
  k.rows = static_cast<const void**>(
      g_metadata.allocate(std::size_t{info.max_grown_slots} * (info.batch + 1) * sizeof(void*)));
}

// A kept batch that another thread gave back has its blocks' lines in that thread's
// core's cache, written there by its frees, and the taker's pops would miss on them one
// after another: each pop's load of the next link waits for the last (in mempool-bench
// xmalloc, 2 threads allocating and 2 freeing, the producers spent 86% of malloc's time on
// that one load, and malloc was 28% of the run). Asked for all at once from the row's
// addresses, the misses overlap; with intent to write, since the taker writes each block as
// it hands it out (a prefetchw where the target has one, else a plain prefetch: measured
// alike on AMD EPYC family 26 model 2). A batch the taker gave back itself is in its own
// cache, and is not prefetched (mempool-bench micro's Bulk cycles its own batches).
void CentralCache::prefetch_kept_batch(const Class& k, std::size_t c, std::uint32_t slot,
                                       const void* taker) noexcept {
  if (k.rows == nullptr || taker == nullptr) return;
  const std::uint32_t batch = kHeapClasses[c].batch;
  const void* const* row = k.rows + std::size_t{slot} * (batch + 1);
  if (row[0] == nullptr || row[0] == taker) return;
  for (std::uint32_t i = 1; i <= batch; ++i)
    __builtin_prefetch(row[i], 1);
}

std::size_t CentralCache::remove_range(std::size_t c, std::size_t want, FreeBlock** first,
                                       const void* taker) noexcept {
  const HeapClassInfo& info = kHeapClasses[c];
  Class& k = classes_[c];
  std::lock_guard<Lock> lock(k.mutex);
  if (want >= info.batch) {
    if (k.batch_count > 0) {
      const std::uint32_t slot = --k.batch_count;
      prefetch_kept_batch(k, c, slot, taker);
      *first = k.batches[slot];
      return info.batch;
    }
    k.batch_missed = true;
  }
  const std::uintptr_t key = heap_link_key();
  FreeBlock* head = nullptr;
  std::size_t got = 0;
  while (got < want) {
    Span* s = k.nonempty.first();
    if (s == nullptr) {
      s = k.empty.first();
      if (s != nullptr) {
        k.empty.remove(s);
        --k.empty_spans;
        kept_empty_bytes_.fetch_sub(s->bytes(), std::memory_order_relaxed);
      } else {
        make_room_for(info.span_pages, SpanState::kSmall, static_cast<std::uint8_t>(c));
        s = new_span(c);
        if (s == nullptr) break;
        ++k.spans;
        k.blocks += s->capacity;
      }
      // A fresh span is the refilling thread's (span.hpp, thread_cache.cpp).
      if constexpr (kThreadOwnedSpans)
        start_span_owned(s, info.span_pages <= kOwnedSpanMaxPages ? taker : nullptr);
      k.nonempty.push_front(s);
    }
    // The span's fields in locals: the stores to the blocks might alias them.
    const std::size_t before = got;
    FreeBlock* list = s->free_blocks;
    if (list != nullptr) prefetch_listed_blocks(s, want - got);
    for (; got < want && list != nullptr; ++got) {
      FreeBlock* b = list;
      list = heap_checked_next(b, key);
      heap_set_next(b, head, key);
      head = b;
    }
    s->free_blocks = list;
    if (got < want && s->carve < s->carve_end) {
      std::uintptr_t carve = s->carve;
      const std::uintptr_t end = std::min(s->carve_end, carve + (want - got) * info.size);
      for (; carve < end; carve += info.size, ++got) {
        auto* b = address_as<FreeBlock>(carve);
        // Marked: a free of it before it is handed out is a double free, as for any other.
        heap_link_free(b, head, key);
        head = b;
      }
      // Atomic: a thread that owns the span reads it without the lock (span_carve).
      __atomic_store_n(&s->carve, carve, __ATOMIC_RELAXED);
    }
    s->allocated += static_cast<std::uint32_t>(got - before);
    if (s->allocated == s->capacity) k.nonempty.remove(s);
  }
  k.blocks_out += got;
  *first = head;
  return got;
}

void CentralCache::release_to_spans(Class& k, std::size_t c, FreeBlock* first, std::size_t count,
                                    Span** empty) noexcept {
  const std::uintptr_t key = heap_link_key();
  FreeBlock* b = first;
  std::size_t left = count;
  while (left != 0) {
    Span* s = g_page_map.lookup(b);
    // A link overwritten with a plausible address of another class's block.
    if (MEMPOOL_UNLIKELY(s == nullptr || s->state != SpanState::kSmall || s->size_class != c))
      heap_free_list_corrupted(b);
    // The run of blocks that follow in [lo, carve) are s's too (lo is at or above its
    // start, also for a hardened guarded span): they skip the page map and the class
    // checks, and the span's list and count stay in registers until the run ends (a
    // thread that exits returns its blocks in the order it carved them).
    // free(p + 4096) of a small p lands on a block boundary of the span, which the hit
    // path accepts; a block past the carved end was never handed out (nor is a block of
    // a span with none out). Checked here, on the way back, at no cost to free.
    const std::uintptr_t carved = s->carve;
    const std::uintptr_t lo = s->first_block();
    std::uint32_t allocated = s->allocated;
    if (MEMPOOL_UNLIKELY(reinterpret_cast<std::uintptr_t>(b) >= carved || allocated == 0))
      heap_misuse(b, "free of a block the heap never handed out");
    const bool was_full = allocated == s->capacity;
    FreeBlock* list = s->free_blocks;
    do {
      FreeBlock* next = --left != 0 ? heap_checked_next(b, key) : nullptr;
      heap_set_next(b, list, key);
      list = b;
      b = next;
    } while (--allocated != 0 && left != 0 &&
             reinterpret_cast<std::uintptr_t>(b) - lo < carved - lo);
    s->free_blocks = list;
    s->allocated = allocated;
    if (was_full) k.nonempty.push_front(s);
    if (allocated == 0) {
      // No block of it is out, none on its owner's list: nobody's now.
      if constexpr (kThreadOwnedSpans) set_span_owner(s, nullptr);
      k.nonempty.remove(s);
      if (!keep_empty(k, s)) {
        --k.spans;
        k.blocks -= s->capacity;
        s->next = *empty;
        *empty = s;
      }
    }
  }
  k.blocks_out -= count;
}

// The class locked, its kept batches full. A thread asked for a batch and found none
// since they were last full: the class's blocks flow from threads that free them to
// threads that allocate them, in bursts (many-to-one frees: a thread scheduled out
// while the others run), and twice as many batches even them out, up to
// max_grown_slots. Otherwise nobody took them since: half as many (down to max_slots),
// and the batches past that go to their spans, so a class the program stopped using
// goes back to 64 KiB of batches. (One more or one fewer at a time did not keep up:
// xmalloc with 4 threads each way ran as slowly as with a fixed 64 KiB.) A known limit:
// in one burst of frees with no allocation between them, the insert after a doubling
// finds nothing missed and halves the limit again (docs/architecture.md, "Planned").
void CentralCache::resize_slots(Class& k, std::size_t c, Span** empty) noexcept {
  const HeapClassInfo& info = kHeapClasses[c];
  if (k.slot_limit < info.max_slots) {  // the class's first batches
    k.slot_limit = info.max_slots;
    if (k.rows == nullptr) make_rows(k, c);
    if (k.batch_count < k.slot_limit) return;
  }
  if (k.batch_missed) {
    k.slot_limit = std::min(k.slot_limit * 2, info.max_grown_slots);
  } else if (k.slot_limit > info.max_slots) {
    k.slot_limit = std::max(k.slot_limit / 2, info.max_slots);
    while (k.batch_count > k.slot_limit)
      release_to_spans(k, c, k.batches[--k.batch_count], info.batch, empty);
  }
  k.batch_missed = false;
}

void CentralCache::insert_span_list(std::size_t c, Span* s, FreeBlock* first,
                                    std::size_t count) noexcept {
  Class& k = classes_[c];
  Span* empty = nullptr;
  {
    std::lock_guard<Lock> lock(k.mutex);
    if (s->free_blocks != nullptr) {  // other threads gave blocks back here: one by one
      release_to_spans(k, c, first, count, &empty);
    } else {
      const bool was_full = s->allocated == s->capacity;
      s->free_blocks = first;
      s->allocated -= static_cast<std::uint32_t>(count);
      k.blocks_out -= count;
      if (s->allocated == 0) {
        if constexpr (kThreadOwnedSpans) set_span_owner(s, nullptr);
        if (!was_full) k.nonempty.remove(s);
        if (!keep_empty(k, s)) {
          --k.spans;
          k.blocks -= s->capacity;
          s->next = empty;
          empty = s;
        }
      } else if (was_full) {
        k.nonempty.push_front(s);
      }
    }
  }
  free_spans(empty);
  decay_if_due();
}

// The class locked; s has no block out.
bool CentralCache::keep_empty(Class& k, Span* s) noexcept {
  // The hardened heap draws whether to guard each fresh span (hardened_prepare_span):
  // spans used again would draw less often.
  if constexpr (kHardened) return false;
  if (g_page_heap.decay_ms() == 0) return false;  // kept for no time
  const std::size_t bytes = s->bytes();
  if (bytes > kKeptEmptySpanMaxBytes) return false;
  if (kept_empty_bytes_.load(std::memory_order_relaxed) + bytes > kKeptEmptyBytes) return false;
  kept_empty_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  // Carved again from its start: its blocks come out in address order, and each is
  // written (marked and linked) as it is carved, not read first from a list.
  s->free_blocks = nullptr;
  s->carve = s->first_block();
  s->free_since = PageHeap::now_ms();
  k.empty.push_front(s);
  ++k.empty_spans;
  return true;
}

// The class locked: kept span s leaves the class, chained on *chain for the page heap.
void CentralCache::give_up_empty(Class& k, Span* s, Span** chain) noexcept {
  k.empty.remove(s);
  --k.empty_spans;
  --k.spans;
  k.blocks -= s->capacity;
  kept_empty_bytes_.fetch_sub(s->bytes(), std::memory_order_relaxed);
  s->next = *chain;
  *chain = s;
}

void CentralCache::free_spans(Span* chain, bool keep_age) noexcept {
  while (chain != nullptr) {
    Span* s = chain;
    chain = chain->next;
    if constexpr (kChecked) {
      g_metadata.deallocate(s->live_bits, (s->capacity + 63) / 64 * sizeof(std::uint64_t));
    }
    g_page_heap.free(s, keep_age ? s->free_since : PageHeap::kFreedNow);
  }
}

// A class locked by another thread keeps its spans until the next call: the caller may
// hold a class lock (remove_range), and a thread holding another class's lock may be
// waiting for the page heap.
void CentralCache::give_back_empty(std::uint64_t kept_since) noexcept {
  for (std::size_t c = 1; c < kHeapClassCount; ++c) {
    Class& k = classes_[c];
    Span* chain = nullptr;
    if (!k.mutex.try_lock()) continue;
    for (Span* s = k.empty.first(); s != nullptr;) {
      Span* next = SpanList::next(s);
      if (s->free_since <= kept_since) give_up_empty(k, s, &chain);
      s = next;
    }
    k.mutex.unlock();
    // As old as they are: the page heap's next decay pass gives them back.
    free_spans(chain, true);
  }
}

void CentralCache::make_room_for(std::size_t pages, SpanState state,
                                 std::uint8_t size_class) noexcept {
  if (kept_empty_bytes_.load(std::memory_order_relaxed) == 0) return;
  if (g_page_heap.has_resident_free(pages, state, size_class)) return;
  give_back_empty(kKeptSinceAny);
}

void CentralCache::decay(std::uint64_t now) noexcept {
  const std::uint64_t ms = g_page_heap.decay_ms();
  if (ms == PageHeap::kNoDecay) return;
  next_empty_decay_.store(now + (ms >= 4 ? ms / 4 : 1), std::memory_order_relaxed);
  if (now >= ms) give_back_empty(now - ms);
}

void CentralCache::decay_if_due() noexcept {
  if (kept_empty_bytes_.load(std::memory_order_relaxed) == 0) return;
  const std::uint64_t now = PageHeap::now_ms();
  if (now < next_empty_decay_.load(std::memory_order_relaxed)) return;
  decay(now);
}

void CentralCache::insert_range(std::size_t c, FreeBlock* first, std::size_t count,
                                FreeBlock* const* blocks, const void* giver) noexcept {
  const HeapClassInfo& info = kHeapClasses[c];
  Class& k = classes_[c];
  Span* empty = nullptr;
  {
    std::lock_guard<Lock> lock(k.mutex);
    if (count == info.batch) {
      if (k.batch_count >= k.slot_limit) resize_slots(k, c, &empty);
      if (k.batch_count < k.slot_limit) {
        const std::uint32_t slot = k.batch_count++;
        k.batches[slot] = first;
        if (k.rows != nullptr) {
          const void** row = k.rows + std::size_t{slot} * (info.batch + 1);
          row[0] = blocks != nullptr ? giver : nullptr;
          if (row[0] != nullptr) std::memcpy(row + 1, blocks, count * sizeof(void*));
        }
        return;
      }
    }
    release_to_spans(k, c, first, count, &empty);
  }
  free_spans(empty);
  decay_if_due();
}

void CentralCache::drain() noexcept {
  for (std::size_t c = 1; c < kHeapClassCount; ++c) {
    Class& k = classes_[c];
    Span* empty = nullptr;
    {
      std::lock_guard<Lock> lock(k.mutex);
      while (k.batch_count > 0)
        release_to_spans(k, c, k.batches[--k.batch_count], kHeapClasses[c].batch, &empty);
      k.slot_limit = 0;  // grows again from 64 KiB
      k.batch_missed = false;
      while (Span* s = k.empty.first())
        give_up_empty(k, s, &empty);
    }
    free_spans(empty);
  }
}

bool CentralCache::holds_free(std::size_t c, const void* p) const noexcept {
  const Class& k = classes_[c];
  const std::uintptr_t key = heap_link_key();
  const std::size_t batch = kHeapClasses[c].batch;
  std::lock_guard<Lock> lock(k.mutex);
  for (std::uint32_t i = 0; i < k.batch_count; ++i) {
    const FreeBlock* b = k.batches[i];
    for (std::size_t n = 0; n < batch; ++n, b = heap_checked_next(b, key))
      if (b == p) return true;
  }
  // The span's own list: its state and class are stable while the class is locked.
  const Span* s = g_page_map.lookup(p);
  if (s == nullptr || s->state != SpanState::kSmall || s->size_class != c) return false;
  // Nothing at or past the carve pointer is out: a marked block there was freed before
  // its span emptied and was set to be carved again (keep_empty).
  if (reinterpret_cast<std::uintptr_t>(p) >= s->carve) return true;
  for (const FreeBlock* b = s->free_blocks; b != nullptr; b = heap_checked_next(b, key))
    if (b == p) return true;
  return false;
}

CentralCache::IndexedBatches CentralCache::indexed_batches(std::size_t c) const noexcept {
  const Class& k = classes_[c];
  const std::uint32_t batch = kHeapClasses[c].batch;
  const std::uintptr_t key = heap_link_key();
  std::lock_guard<Lock> lock(k.mutex);
  IndexedBatches result;
  if (k.rows == nullptr) return result;
  for (std::uint32_t slot = 0; slot < k.batch_count; ++slot) {
    const void* const* row = k.rows + std::size_t{slot} * (batch + 1);
    if (row[0] == nullptr) continue;
    ++result.indexed;
    const FreeBlock* b = k.batches[slot];
    for (std::uint32_t i = 1; i <= batch; ++i, b = b != nullptr ? heap_next(b, key) : nullptr)
      if (row[i] != b) result.all_match = false;
    if (b != nullptr) result.all_match = false;  // the chain is longer than the row
  }
  return result;
}

bool CentralCache::carved_block(std::size_t c, const void* p) const noexcept {
  // The span's state and class are stable while p is out; its carve pointer is not.
  const Span* s = g_page_map.lookup(p);
  if (s == nullptr || s->state != SpanState::kSmall || s->size_class != c) return false;
  if (!heap_starts_block(p, s)) return false;
  std::lock_guard<Lock> lock(classes_[c].mutex);
  return reinterpret_cast<std::uintptr_t>(p) < s->carve;
}

CentralClassCounts CentralCache::counts(std::size_t c) const noexcept {
  const Class& k = classes_[c];
  std::lock_guard<Lock> lock(k.mutex);
  CentralClassCounts n;
  n.spans = k.spans;
  n.blocks = k.blocks;
  n.blocks_out = k.blocks_out;
  n.blocks_in_batches = std::size_t{k.batch_count} * kHeapClasses[c].batch;
  n.blocks_in_spans = k.blocks - k.blocks_out;
  n.empty_spans = k.empty_spans;
  return n;
}

void CentralCache::lock_all() noexcept {
  for (std::size_t c = 1; c < kHeapClassCount; ++c)
    classes_[c].mutex.lock();
}

void CentralCache::unlock_all() noexcept {
  for (std::size_t c = kHeapClassCount - 1; c >= 1; --c)
    classes_[c].mutex.unlock();
}

}  // namespace mempool::detail
