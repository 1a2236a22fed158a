#include "page_heap.hpp"

#include <time.h>

#include <algorithm>
#include <initializer_list>

#include "class_info.hpp"
#include "mempool/detail/os.hpp"
#include "mempool/detail/platform.hpp"  // MEMPOOL_TLS_MODEL
#include "metadata.hpp"
#include "page_map.hpp"

namespace mempool::detail {

constinit PageHeap g_page_heap;

namespace {

// The soft memory limit's flags (page_heap.hpp): this thread's last growth was
// refused; this thread's growth is not to be refused now.
constinit thread_local bool t_limit_refused MEMPOOL_TLS_MODEL = false;
constinit thread_local bool t_grow_past_limit MEMPOOL_TLS_MODEL = false;

Span* span_at_page(std::uintptr_t page) noexcept {
  return g_page_map.lookup(address_as(page << kHeapPageShift));
}

// A free span's first and last pages point at it; the pages between are nullptr,
// so no entry ever names a span object that has been recycled.
void map_free_span(Span* s) noexcept {
  g_page_map.set(s->first_page(), s);
  g_page_map.set(s->last_page(), s);
}

}  // namespace

void* reserve_in_one_leaf(std::size_t bytes) noexcept {
  constexpr std::uintptr_t kLeafBytes = std::uintptr_t{1} << (PageMap::kLeafBits + kHeapPageShift);
  if (bytes <= kLeafBytes) {
    if (void* r = os_reserve(nullptr, 2 * bytes); r != nullptr) {
      const auto low = reinterpret_cast<std::uintptr_t>(r);
      const std::uintptr_t high = low + 2 * bytes;
      // The highest window (the heap commits from the top down): up to `high`, or up to
      // the leaf boundary below it when less than `bytes` lies above that.
      const std::uintptr_t boundary = (high - 1) & ~(kLeafBytes - 1);
      const std::uintptr_t end = high - std::max(boundary, low) >= bytes ? high : boundary;
      const std::uintptr_t start = end - bytes;
      os_unreserve(r, start - low);
      os_unreserve(address_as(end), high - end);
      return address_as(start);
    }
  }
  return os_reserve(nullptr, bytes);
}

// Mappings to give back once the lock is dropped (munmap of a resident mapping
// takes as long as its pages: no other thread should wait for that).
struct PageHeap::Unmaps {
  struct Range {
    void* p;
    std::size_t bytes;
  };
  Range ranges[kMaxCachedDirect + 2];
  std::size_t count = 0;

  void add(void* p, std::size_t bytes) noexcept {
    if (count < sizeof ranges / sizeof ranges[0]) {
      ranges[count++] = {p, bytes};
    } else {
      os_unmap(p, bytes);  // not expected: the cache holds at most kMaxCachedDirect
    }
  }
  void run() noexcept {
    for (std::size_t i = 0; i < count; ++i)
      os_unmap(ranges[i].p, ranges[i].bytes);
    count = 0;
  }
  // Declared before the lock guard, so this runs after the lock is dropped.
  ~Unmaps() { run(); }
  Unmaps() = default;
  Unmaps(const Unmaps&) = delete;
  Unmaps& operator=(const Unmaps&) = delete;
};

std::uint64_t PageHeap::now_ms() noexcept {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1000 +
         static_cast<std::uint64_t>(t.tv_nsec) / 1000000;
}

SpanList& PageHeap::list_for(const Span* s) noexcept {
  Arena& a = arenas_[s->arena];
  if (s->pages <= kMaxListPages) return s->released ? a.released[s->pages] : a.resident[s->pages];
  return s->released ? a.released_large : a.resident_large;
}

void PageHeap::list(Span* s) noexcept {
  s->state = SpanState::kFree;
  s->size_class = 0;
  list_for(s).push_front(s);
  if (s->pages <= kMaxListPages) arenas_[s->arena].sizes.add(s->pages);
  (s->released ? free_released_pages_ : free_resident_pages_) += s->pages;
  ++free_spans_;
}

void PageHeap::unlist(Span* s) noexcept {
  list_for(s).remove(s);
  const std::size_t n = s->pages;
  Arena& a = arenas_[s->arena];
  if (n <= kMaxListPages && a.resident[n].empty() && a.released[n].empty()) a.sizes.remove(n);
  (s->released ? free_released_pages_ : free_resident_pages_) -= s->pages;
  --free_spans_;
}

Span* PageHeap::find_free(Arena& a, std::size_t pages) noexcept {
  if (const std::size_t n = a.sizes.first_from(pages); n != ListSizes::npos)
    return a.resident[n].empty() ? a.released[n].first() : a.resident[n].first();
  // Best fit among the big ones: resident memory first, then released.
  for (SpanList* l : {&a.resident_large, &a.released_large}) {
    Span* best = nullptr;
    for (Span* s = l->first(); s != nullptr; s = s->next) {
      if (s->pages >= pages && (best == nullptr || s->pages < best->pages ||
                                (s->pages == best->pages && s->start < best->start)))
        best = s;
    }
    if (best != nullptr) return best;
  }
  return nullptr;
}

// `pages` pages at a multiple of align_pages: the best fit counting the pages the
// alignment skips, resident memory first. (A span of pages + align_pages - 1 always
// holds them, but asking for that passes over an aligned span of just the size, as
// every large span on huge pages is, for a bigger one: the buffer loop of bigbuffers
// then faulted 2.3 times the memory.)
Span* PageHeap::find_free(Arena& a, std::size_t pages, std::size_t align_pages) noexcept {
  if (align_pages == 1) return find_free(a, pages);
  const auto fits = [&](const Span* s) {
    const std::size_t head =
        ((s->first_page() + align_pages - 1) & ~(align_pages - 1)) - s->first_page();
    return s->pages >= head + pages;
  };
  for (std::size_t n = a.sizes.first_from(pages); n != ListSizes::npos;
       n = a.sizes.first_from(n + 1)) {
    for (SpanList* l : {&a.resident[n], &a.released[n]})
      if (Span* s = l->first(); s != nullptr && fits(s)) return s;
  }
  for (SpanList* l : {&a.resident_large, &a.released_large}) {
    Span* best = nullptr;
    for (Span* s = l->first(); s != nullptr; s = s->next) {
      if (fits(s) && (best == nullptr || s->pages < best->pages ||
                      (s->pages == best->pages && s->start < best->start)))
        best = s;
    }
    if (best != nullptr) return best;
  }
  return nullptr;
}

// Growth. The heap's pages come from one reservation of address space, committed
// downward (the kernel places mappings top-down, so the next reservation usually
// fits right below this one): successive growths are contiguous, and a free span
// coalesces with its neighbours across them, as in tcmalloc's sbrk heap. A request
// that no free span fits then grows the free span at the committed edge by just the
// pages it lacks: its pages are reused where they are and only the difference
// faults. (Mappings of their own, the way before, left the free memory in islands
// that could not merge: the free-first buffer loop kept 42 free spans, 241 MiB, and
// still mapped more. Moving a span onto a bigger mapping with mremap saved faults
// but not their time: on this VM the first write to a moved page cost as much as
// a fault.)
bool PageHeap::grow(std::uint8_t arena, std::size_t pages) noexcept {
  if (const Span* edge = edge_span(arenas_[arena]); edge != nullptr && pages >= kRegionPages) {
    // No free span fits, so the edge is smaller: it lacks pages - edge->pages. Those
    // land right below it unless the reservation ran out and the next one is
    // elsewhere (or none could be had); then they are a free span of their own, and
    // the request takes a region of its full size.
    const std::uintptr_t edge_start = edge->start;
    const std::size_t lacking =
        pages > edge->pages ? HugePageFiller::round_up(pages - edge->pages) : 0;
    if (lacking == 0) return true;  // the edge holds them (aligned requests: find_free)
    const std::uintptr_t start = map_region(arena, lacking);
    if (start == 0) return false;
    if (start + (lacking << kHeapPageShift) == edge_start) return true;
  }
  // Whole huge pages, so that the committed edge stays on a huge-page boundary.
  const std::size_t need = HugePageFiller::round_up(pages);
  const std::size_t region = need < kRegionPages ? kRegionPages : need;
  if (map_region(arena, region) != 0) return true;
  return region > need && map_region(arena, need) != 0;  // the big region was refused: the need
}

const Span* PageHeap::edge_span(const Arena& a) const noexcept {
  const Span* s = a.commit_low != 0 ? span_at_page(a.commit_low >> kHeapPageShift) : nullptr;
  return s != nullptr && s->state == SpanState::kFree && s->start == a.commit_low ? s : nullptr;
}

std::uintptr_t PageHeap::reserved_below(std::uint8_t arena, std::size_t bytes) noexcept {
  Arena& a = arenas_[arena];
  if (a.commit_low - a.reserve_low >= bytes) return a.commit_low - bytes;
  const std::size_t size = std::max(kReserveBytes, bytes);
  const std::size_t count = reservation_count_.load(std::memory_order_relaxed);
  Reservation* last = a.reservation < kMaxReservations ? &reservations_[a.reservation] : nullptr;
  ensure_thp_mode();
  if (a.reserve_low > size && os_reserve(address_as(a.reserve_low - size), size) != nullptr) {
    a.reserve_low -= size;  // contiguous with the last
    advise(arena, a.reserve_low, size);
    if (last != nullptr) last->low.store(a.reserve_low, std::memory_order_relaxed);
    return a.commit_low - bytes;
  }
  // A huge page more, so that the committed part starts on a huge-page boundary.
  void* r = reserve_in_one_leaf(size + kHugePageSize);
  if (r == nullptr) return 0;
  if (a.commit_low > a.reserve_low) {
    os_unreserve(address_as(a.reserve_low), a.commit_low - a.reserve_low);
    if (last != nullptr) last->low.store(a.commit_low, std::memory_order_relaxed);
  }
  a.reserve_low = reinterpret_cast<std::uintptr_t>(r);
  a.commit_low = (a.reserve_low + size + kHugePageSize) & ~(kHugePageSize - 1);
  advise(arena, a.reserve_low, a.commit_low - a.reserve_low);
  a.reservation = count < kMaxReservations ? count : SIZE_MAX;
  if (count < kMaxReservations) {
    reservations_[count].low.store(a.reserve_low, std::memory_order_relaxed);
    reservations_[count].high.store(a.commit_low, std::memory_order_relaxed);
    reservations_[count].arena = arena;
  }
  reservation_count_.store(count + 1, std::memory_order_release);
  return a.commit_low - bytes;
}

bool PageHeap::reserved(const void* p) const noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t count =
      std::min(reservation_count_.load(std::memory_order_acquire), kMaxReservations);
  for (std::size_t i = 0; i < count; ++i) {
    if (a >= reservations_[i].low.load(std::memory_order_relaxed) &&
        a < reservations_[i].high.load(std::memory_order_relaxed))
      return true;
  }
  return false;
}

std::uintptr_t PageHeap::map_region(std::uint8_t arena, std::size_t pages) noexcept {
  const std::size_t bytes = pages << kHeapPageShift;
  const std::uintptr_t at = reserved_below(arena, bytes);
  // No address space to reserve (an address-space limit): a mapping of its own.
  const std::uintptr_t start =
      at != 0 ? at : reinterpret_cast<std::uintptr_t>(os_map_aligned(bytes, kHugePageSize));
  if (start == 0) return 0;
  if (at == 0) advise(arena, start, bytes);
  if (arena == kDense)
    g_page_map.claim_window(start >> kHeapPageShift);  // small spans come from here
  Span* s = g_page_map.ensure(start >> kHeapPageShift, pages) ? g_metadata.create<Span>() : nullptr;
  if (s == nullptr || (at != 0 && !os_commit(address_as(at), bytes))) {
    if (s != nullptr) g_metadata.destroy(s);
    if (at == 0) os_unmap(address_as(start), bytes);
    return 0;
  }
  if (at != 0) arenas_[arena].commit_low = at;
  if (arena == kSparse) sparse_region_bytes_ += bytes;  // before add_mapped: not dense
  add_mapped(bytes);
  region_bytes_ += bytes;
  // The metadata every operation touches (page-map leaves, spans) on huge pages
  // where it is dense: from 256 MiB of spans a leaf's entries fill an eighth of its
  // huge page (the RSS it adds, under 1% of the heap's), at once under THP always.
  if (filler_.enabled() && !metadata_on_huge_pages_ &&
      (filler_.mode() == ThpMode::kAlways || region_bytes_ >= kDenseMetadataBytes)) {
    metadata_on_huge_pages_ = true;
    g_page_map.use_huge_pages();
    g_metadata.use_huge_pages();
  }
  s->start = start;
  s->pages = pages;
  s->arena = arena;
  s->released = true;  // never touched: not resident
  insert_free(s);      // coalesces with a free span at the edge
  return start;
}

// s is unlisted and free: keeps its first `pages` pages; the rest becomes a span
// of its own, returned unlisted (nullptr, and s unchanged, without metadata).
Span* PageHeap::split(Span* s, std::size_t pages) noexcept {
  Span* rest = g_metadata.create<Span>();
  if (rest == nullptr) return nullptr;
  rest->start = s->start + (pages << kHeapPageShift);
  rest->pages = s->pages - pages;
  rest->released = s->released;
  rest->free_since = s->free_since;
  rest->arena = s->arena;
  s->pages = pages;
  return rest;
}

void PageHeap::insert_free(Span* s) noexcept {
  // Arenas may lie side by side (reservations the kernel placed adjacent): never merged.
  if (Span* left = span_at_page(s->first_page() - 1);
      left != nullptr && left->state == SpanState::kFree && left->arena == s->arena) {
    unlist(left);
    g_page_map.set(left->last_page(), nullptr);
    g_page_map.set(s->first_page(), nullptr);
    s->start = left->start;
    s->pages += left->pages;
    s->released = s->released && left->released;
    g_metadata.destroy(left);
  }
  if (Span* right = span_at_page(s->last_page() + 1);
      right != nullptr && right->state == SpanState::kFree && right->arena == s->arena) {
    unlist(right);
    g_page_map.set(s->last_page(), nullptr);
    g_page_map.set(right->first_page(), nullptr);
    s->pages += right->pages;
    s->released = s->released && right->released;
    g_metadata.destroy(right);
  }
  map_free_span(s);
  list(s);
}

Span* PageHeap::allocate(std::size_t pages, std::size_t align_pages, SpanState state,
                         std::uint8_t size_class) noexcept {
  if (pages == 0 || pages + align_pages - 1 < pages) return nullptr;
  Unmaps unmaps;
  std::lock_guard<Lock> lock(mutex_);
  if (decay_ms_ != kNoDecay) decay_locked(now_ms(), unmaps);
  ensure_thp_mode();  // arena_for asks whether huge pages are allowed
  const std::uint8_t arena = arena_for(state, size_class);
  Arena& a = arenas_[arena];
  Span* s = nullptr;
  if (state == SpanState::kLarge) {
    // Whole huge pages where they fit a free span, else the pages as asked for.
    const HugePageFiller::LargeShape shape = filler_.large_shape(pages, align_pages);
    s = find_free(a, shape.pages, shape.align_pages);
    if (s != nullptr || find_free(a, pages, align_pages) == nullptr) {
      pages = shape.pages;
      align_pages = shape.align_pages;
    }
  }
  const std::size_t want = pages + align_pages - 1;
  if (s == nullptr) s = find_free(a, pages, align_pages);
  if (s == nullptr && merge_released_pieces()) s = find_free(a, pages, align_pages);
  // Growth: fresh pages, or pages given back that fault in again.
  if (s == nullptr || s->released) {
    const LimitCheck limit = check_limit(want << kHeapPageShift, nullptr, unmaps);
    if (limit == LimitCheck::kRefuse) return nullptr;
    if (limit == LimitCheck::kGrow)
      s = find_free(a, pages, align_pages);  // the free pages went back
  }
  if (s == nullptr) {
    // The heap grows at its committed edge, which is on a huge page: up to that
    // alignment it needs only `pages` more.
    const std::size_t need = align_pages <= kHugePagePages ? pages : want;
    // Out of memory: the cached mappings go first (an address-space limit counts them).
    if (!grow(arena, need) && !(drop_direct_cache() && grow(arena, need))) return nullptr;
    s = find_free(a, pages, align_pages);
    if (s == nullptr) return nullptr;
  }
  unlist(s);
  if (align_pages > 1) {
    const std::size_t head =
        ((s->first_page() + align_pages - 1) & ~(align_pages - 1)) - s->first_page();
    if (head != 0) {
      Span* rest = split(s, head);
      map_free_span(s);
      list(s);
      if (rest == nullptr) return nullptr;
      s = rest;
    }
  }
  if (s->pages > pages) {
    // Without metadata for the split the caller gets the longer span: still correct.
    s = carve(s, pages, align_pages == 1 && on_huge_pages(s));
  }
  s->reused = !s->released;  // released pages read as zeros again (MADV_DONTNEED)
  s->released = false;
  s->state = state;
  s->size_class = size_class;
  g_page_map.set_range(s->first_page(), s->pages, s);
  span_bytes_in_use_ += s->bytes();
  recent_peak_in_use_ = std::max(recent_peak_in_use_, span_bytes_in_use_);
  return s;
}

bool PageHeap::has_resident_free(std::size_t pages, SpanState state,
                                 std::uint8_t size_class) noexcept {
  std::lock_guard<Lock> lock(mutex_);
  if (free_resident_pages_ < pages) return false;
  ensure_thp_mode();  // as allocate, for arena_for
  const Arena& a = arenas_[arena_for(state, size_class)];
  for (std::size_t n = a.sizes.first_from(pages); n <= kMaxListPages;  // npos: none
       n = a.sizes.first_from(n + 1))
    if (!a.resident[n].empty()) return true;
  for (const Span* s = a.resident_large.first(); s != nullptr; s = s->next)
    if (s->pages >= pages) return true;
  return false;
}

Span* PageHeap::carve(Span* s, std::size_t pages, bool anywhere) noexcept {
  const std::uintptr_t at =
      anywhere ? HugePageFiller::place(s->first_page(), s->pages, pages) : s->first_page();
  Span* placed = s;
  // The end of s: s keeps its head, free (without metadata for the split, the
  // start of s is taken instead).
  if (at != s->first_page()) {
    if (Span* tail = split(s, at - s->first_page()); tail != nullptr) {
      map_free_span(s);
      list(s);
      placed = tail;
    }
  }
  if (placed->pages > pages) {
    // Without metadata the caller gets the longer span (see allocate).
    if (Span* rest = split(placed, pages); rest != nullptr) {
      map_free_span(rest);
      list(rest);
    }
  }
  return placed;
}

void PageHeap::free(Span* s, std::uint64_t free_since) noexcept {
  Unmaps unmaps;
  std::lock_guard<Lock> lock(mutex_);
  span_bytes_in_use_ -= s->bytes();
  s->size_class = 0;  // before its entries are rewritten untagged
  s->state = SpanState::kFree;
  if (s->pages > 2) g_page_map.set_range(s->first_page() + 1, s->pages - 2, nullptr);
  s->released = false;
  s->free_blocks = nullptr;
  s->carve = s->carve_end = 0;
  s->allocated = s->capacity = 0;
  s->live_bits = nullptr;
  const std::uint64_t now = decay_ms_ != kNoDecay ? now_ms() : 0;
  s->free_since = free_since == kFreedNow ? now : std::min(free_since, now);
  insert_free(s);
  // Free pages beyond the threshold and beyond the bytes in use go back: a
  // program that replaces big blocks keeps as much free as it uses, and reuses
  // it without faults, but one that frees everything keeps the threshold (0:
  // nothing). The biggest spans go first, down to 3/4 of the limit, so that a
  // heap hovering at the limit does not give back a span at every free.
  const std::size_t limit = release_threshold_ == 0 || release_threshold_ > span_bytes_in_use_
                                ? release_threshold_
                                : span_bytes_in_use_;
  if ((free_resident_pages_ << kHeapPageShift) > limit) release_down_to(limit / 4 * 3, false);
  if (decay_ms_ != kNoDecay) decay_locked(now, unmaps);
}

bool PageHeap::resize(Span* s, std::size_t pages) noexcept {
  std::lock_guard<Lock> lock(mutex_);
  if (pages == s->pages) return true;
  if (pages < s->pages) {
    Span* tail = split(s, pages);
    if (tail == nullptr) return false;
    g_page_map.set_range(tail->first_page(), tail->pages, nullptr);
    span_bytes_in_use_ -= tail->bytes();
    tail->released = false;
    tail->free_since = decay_ms_ != kNoDecay ? now_ms() : 0;
    insert_free(tail);
    return true;
  }
  Span* right = span_at_page(s->last_page() + 1);
  const std::size_t need = pages - s->pages;
  if (right == nullptr || right->state != SpanState::kFree || right->arena != s->arena ||
      right->pages < need)
    return false;
  unlist(right);
  if (right->pages > need) {
    Span* rest = split(right, need);
    if (rest == nullptr) {
      list(right);
      return false;
    }
    map_free_span(rest);
    list(rest);
  }
  g_page_map.set_range(right->first_page(), right->pages, s);
  s->pages += right->pages;
  span_bytes_in_use_ += right->bytes();
  g_metadata.destroy(right);
  return true;
}

void PageHeap::release(Span* s, bool breaking) noexcept {
  unlist(s);
  if (on_huge_pages(s) && !breaking) {
    // Only the whole huge pages go back; the pieces at either end, in huge pages
    // other spans use, stay resident as free spans of their own.
    const PageRange whole = HugePageFiller::whole_huge_pages(s->first_page(), s->pages);
    Span* middle = whole.count == 0 ? nullptr : s;
    if (middle != nullptr && whole.first != s->first_page()) {
      middle = split(s, whole.first - s->first_page());
      map_free_span(s);
      list(s);
    }
    if (middle != nullptr && middle->pages > whole.count) {
      if (Span* tail = split(middle, whole.count); tail != nullptr) {
        map_free_span(tail);
        list(tail);
      } else {
        map_free_span(middle);  // no metadata for the split: it stays resident
        list(middle);
        return;
      }
    }
    if (middle == nullptr) {  // nothing whole, or no metadata for the split
      if (whole.count == 0) list(s);
      return;
    }
    s = middle;
    map_free_span(s);
    // A huge page broken before (MADV_NOHUGEPAGE) may be whole again now.
    if (huge_pages_broken_ != 0) os_advise_huge_pages(address_as(s->start), s->bytes(), true);
  } else if (on_huge_pages(s)) {
    // Breaking: the huge pages the span shares with spans in use are marked first,
    // so that khugepaged does not fill their given-back pages in again.
    const PageRange whole = HugePageFiller::whole_huge_pages(s->first_page(), s->pages);
    const std::uintptr_t first_huge = s->first_page() & ~(kHugePagePages - 1);
    const std::uintptr_t end_huge = HugePageFiller::round_up(s->first_page() + s->pages);
    if (whole.count == 0 || whole.first != s->first_page()) {
      os_advise_huge_pages(address_as(first_huge << kHeapPageShift), kHugePageSize, false);
      ++huge_pages_broken_;
    }
    if (whole.first + whole.count != s->first_page() + s->pages &&
        end_huge - kHugePagePages != first_huge) {
      os_advise_huge_pages(address_as((end_huge - kHugePagePages) << kHeapPageShift), kHugePageSize,
                           false);
      ++huge_pages_broken_;
    }
  }
  os_release(address_as(s->start), s->bytes());
  s->released = true;
  list(s);
}

// The biggest spans first (those over kMaxListPages, then down the exact lists).
// Without breaking, only spans that hold a whole huge page can give any back: those
// over 2 MiB, so over kMaxListPages.
void PageHeap::release_down_to(std::size_t resident_bytes, bool breaking) noexcept {
  const auto above = [&] { return (free_resident_pages_ << kHeapPageShift) > resident_bytes; };
  const auto release_list = [&](SpanList& l) {
    // release() lists what it leaves resident at the front: behind this walk.
    for (Span* s = l.first(); s != nullptr && above();) {
      Span* next = s->next;
      release(s, breaking);
      s = next;
    }
  };
  release_list(arenas_[kSparse].resident_large);
  for (std::size_t n = kMaxListPages; n > 0 && above(); --n)
    release_list(arenas_[kSparse].resident[n]);
  release_list(arenas_[kDense].resident_large);
  if (filler_.enabled() && !breaking) return;
  for (std::size_t n = kMaxListPages; n > 0 && above(); --n)
    release_list(arenas_[kDense].resident[n]);
}

bool PageHeap::merge_released_pieces() noexcept {
  bool merged = false;
  // Released pieces are whole huge pages, so over kMaxListPages (and only in the dense
  // arena: the sparse one gives back whole spans).
  for (Span* s = arenas_[kDense].released_large.first(); s != nullptr;) {
    Span* next = s->next;
    const Span* left = span_at_page(s->first_page() - 1);
    const Span* right = span_at_page(s->last_page() + 1);
    const bool left_free =
        left != nullptr && left->state == SpanState::kFree && left->arena == s->arena;
    const bool right_free =
        right != nullptr && right->state == SpanState::kFree && right->arena == s->arena;
    if (left_free || right_free) {
      // insert_free destroys the neighbours it takes in: the walk steps past them.
      while (next != nullptr && ((left_free && next == left) || (right_free && next == right)))
        next = next->next;
      unlist(s);
      insert_free(s);  // coalesces, then lists at the front: behind this walk
      merged = true;
    }
    s = next;
  }
  return merged;
}

void PageHeap::release_all() noexcept {
  Unmaps unmaps;
  std::lock_guard<Lock> lock(mutex_);
  release_down_to(0, true);
  while (Span* s = oldest_cached())
    evict(s, unmaps);
}

void PageHeap::set_thp_mode(ThpMode mode) noexcept {
  std::lock_guard<Lock> lock(mutex_);
  filler_.set_mode(mode);
  thp_mode_set_ = true;
  if (!filler_.enabled() && filler_.allowed() && dense_mapped_bytes() >= kAutoFromBytes)
    filler_.activate();
  // The address space reserved before the options were read (the dynamic loader
  // allocates first) takes the advice now.
  advise_reservations();
}

void PageHeap::advise_reservations() noexcept {
  const std::size_t count =
      std::min(reservation_count_.load(std::memory_order_relaxed), kMaxReservations);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uintptr_t low = reservations_[i].low.load(std::memory_order_relaxed);
    const std::uintptr_t high = reservations_[i].high.load(std::memory_order_relaxed);
    if (high > low) advise(reservations_[i].arena, low, high - low);
  }
}

bool PageHeap::huge_pages_enabled() const noexcept {
  std::lock_guard<Lock> lock(mutex_);
  return filler_.enabled();
}

void PageHeap::ensure_thp_mode() noexcept {
  if (thp_mode_set_) return;
  filler_.set_mode(ThpMode::kAuto);
  thp_mode_set_ = true;
}

void PageHeap::advise(std::uint8_t arena, std::uintptr_t start, std::size_t bytes) noexcept {
  if (filler_.enabled() && arena == kDense) {
    os_advise_huge_pages(address_as(start), bytes, true);
  } else if (filler_.mode() == ThpMode::kNever || arena == kSparse) {
    os_advise_huge_pages(address_as(start), bytes, false);  // even where the system says always
  }
}

// Sparse: spans of blocks of 64 KiB or more, wherever the heap may turn to huge pages
// (from the first byte under kAuto: memory placed before the heap turns would otherwise
// stay in the dense arena, where only dense spans reuse it).
// A span of 64-byte blocks has a hundred in each 4 KiB page, so a program that uses
// any touches every page; a 256 KiB block may be touched at its first and last bytes
// only (a buffer filled in part), and on a huge page it is resident whole:
// throughput's window of 8 B-256 KiB blocks took 1.6 times the resident memory of
// THP never with every span on huge pages (docs/performance.md). From 8 KiB instead,
// handoff's blocks of up to 16 KiB went to 4 KiB pages too: with 8 threads its resident
// memory fell to 1.06-1.09x of never's from 1.30x, but it took 3.6 times the page faults
// and 8-15% more time (two runs of 3, AMD EPYC 25/1). Large blocks stay dense: with those
// under 1 MiB sparse, sqlite's peak rose from 33.0 to 37.3 MiB (never: 31.1); the buffers
// it grows with realloc past 1 MiB moved between the arenas, and each kept free memory
// the other could not use.
std::uint8_t PageHeap::arena_for(SpanState state, std::uint8_t size_class) const noexcept {
  // THP always: every span on huge pages, the speed of the TLB's reach first.
  if (!filler_.allowed() || filler_.mode() == ThpMode::kAlways) return kDense;
  return state == SpanState::kSmall && size_class != 0 &&
                 kHeapClasses[size_class].size >= kSparseBlockBytes
             ? kSparse
             : kDense;
}

void PageHeap::set_release_threshold(std::size_t bytes) noexcept {
  std::lock_guard<Lock> lock(mutex_);
  release_threshold_ = bytes;
}

void PageHeap::set_direct_cache_bytes(std::size_t bytes) noexcept {
  Unmaps unmaps;
  std::lock_guard<Lock> lock(mutex_);
  direct_cache_limit_ = bytes;
  while (direct_cached_bytes_ > direct_cache_limit_)
    evict(oldest_cached(), unmaps);
}

void PageHeap::set_decay_ms(std::uint64_t ms) noexcept {
  std::lock_guard<Lock> lock(mutex_);
  __atomic_store_n(&decay_ms_, ms, __ATOMIC_RELAXED);  // decay_ms() reads it unlocked
  next_decay_ = 0;
}

void PageHeap::decay(std::uint64_t now) noexcept {
  Unmaps unmaps;
  std::lock_guard<Lock> lock(mutex_);
  next_decay_ = 0;
  decay_locked(now, unmaps);
}

// Every free resident span and cached mapping that has been unused for the decay
// time goes back to the OS. A pass walks the free lists, so it runs at most
// every quarter of the decay time: a page goes back between 1 and 1.25 decay
// times after its last use, while the heap is in use (there is no thread of
// our own: an idle program keeps its pages until it next frees or allocates).
void PageHeap::decay_locked(std::uint64_t now, Unmaps& out) noexcept {
  if (decay_ms_ == kNoDecay || now < next_decay_) return;
  next_decay_ = now + (decay_ms_ >= 4 ? decay_ms_ / 4 : 1);
  // Demand well below its recent peak (under half) is pressure: this pass breaks
  // huge pages; otherwise only whole free huge pages go back. The peak forgets a
  // quarter a pass, and after a break starts again from the demand of now.
  const bool breaking = span_bytes_in_use_ < recent_peak_in_use_ / 2;
  recent_peak_in_use_ =
      breaking ? span_bytes_in_use_ : std::max(span_bytes_in_use_, recent_peak_in_use_ / 4 * 3);
  if (free_resident_pages_ == 0 && direct_cached_ == 0) return;
  const auto expired = [&](const Span* s) { return s->free_since + decay_ms_ <= now; };
  auto release_expired = [&](SpanList& l) {
    // release() lists what it leaves resident at the front: behind this walk.
    for (Span* s = l.first(); s != nullptr;) {
      Span* next = s->next;
      if (expired(s)) release(s, breaking);
      s = next;
    }
  };
  // Without breaking only spans over 2 MiB hold a whole huge page to give back; the
  // sparse arena, on 4 KiB pages, gives back any.
  Arena& dense = arenas_[kDense];
  Arena& sparse = arenas_[kSparse];
  for (std::size_t n = 1; n <= kMaxListPages && free_resident_pages_ != 0; ++n) {
    if (!filler_.enabled() || breaking) release_expired(dense.resident[n]);
    release_expired(sparse.resident[n]);
  }
  release_expired(dense.resident_large);
  release_expired(sparse.resident_large);
  // Oldest last: evict from the back while expired.
  while (Span* s = oldest_cached()) {
    if (!expired(s)) break;
    evict(s, out);
  }
}

// The cache is short (kMaxCachedDirect) and newest first: its last entry.
Span* PageHeap::oldest_cached() const noexcept {
  Span* s = direct_cache_.first();
  while (s != nullptr && s->next != nullptr)
    s = s->next;
  return s;
}

void PageHeap::uncache(Span* s) noexcept {
  direct_cache_.remove(s);
  direct_cached_bytes_ -= s->bytes();
  --direct_cached_;
}

// A cached mapping goes back to the OS (after the lock is dropped).
void PageHeap::evict(Span* s, Unmaps& out) noexcept {
  uncache(s);
  g_page_map.set_range(s->first_page(), s->pages, nullptr);
  mapped_bytes_ -= s->bytes();
  out.add(address_as(s->start), s->bytes());
  g_metadata.destroy(s);
}

// Out of memory: every cached mapping goes back now (the lock held; rare).
bool PageHeap::drop_direct_cache() noexcept {
  if (direct_cached_ == 0) return false;
  Unmaps unmaps;
  while (Span* s = oldest_cached())
    evict(s, unmaps);
  return true;
}

// Keeps the first `pages` pages of a cached mapping (taken from the cache); the
// tail goes back to the OS.
void PageHeap::trim_direct(Span* s, std::size_t pages, Unmaps& out) noexcept {
  const std::size_t tail_pages = s->pages - pages;
  if (tail_pages == 0) return;
  g_page_map.set_range(s->first_page() + pages, tail_pages, nullptr);
  s->pages = pages;
  mapped_bytes_ -= tail_pages << kHeapPageShift;
  out.add(address_as(s->start + (pages << kHeapPageShift)), tail_pages << kHeapPageShift);
}

// Grows a mapping taken from the cache to `pages` pages, the lock not held: in
// place when the addresses after it are free, else moved (mremap moves the page
// tables, not the bytes) onto a fresh aligned mapping. Only the new tail faults.
// False when the OS refuses: s is then unchanged, or, when no page-map leaf
// could be had for the moved mapping, given back to the OS and set to nullptr.
bool PageHeap::grow_direct(Span*& s, std::size_t pages, std::size_t alignment) noexcept {
  void* old = address_as(s->start);
  const std::size_t old_bytes = s->bytes();
  const std::size_t bytes = pages << kHeapPageShift;
  void* q = os_remap(old, old_bytes, bytes, nullptr);
  void* target = nullptr;
  if (q == nullptr) {
    target = os_map_aligned(bytes, alignment);
    if (target == nullptr) return false;
    q = os_remap(old, old_bytes, bytes, target);
    if (q == nullptr) {
      os_unmap(target, bytes);
      return false;
    }
  }
  std::lock_guard<Lock> lock(mutex_);
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(q) >> kHeapPageShift;
  if (!g_page_map.ensure(first, pages)) {  // no page-map leaf: give it all back
    if (q != old) g_page_map.set_range(s->first_page(), s->pages, nullptr);
    mapped_bytes_ -= old_bytes;
    g_metadata.destroy(s);
    s = nullptr;
    os_unmap(q, bytes);
    return false;
  }
  if (q != old) g_page_map.set_range(s->first_page(), s->pages, nullptr);
  s->start = reinterpret_cast<std::uintptr_t>(q);
  s->pages = pages;
  g_page_map.set_range(first, pages, s);
  add_mapped(bytes - old_bytes);
  return true;
}

Span* PageHeap::map_direct(std::size_t bytes, std::size_t alignment) noexcept {
  const std::size_t pages = (bytes + kHeapPageSize - 1) >> kHeapPageShift;
  if (pages == 0 || (pages << kHeapPageShift) < bytes) return nullptr;
  Span* s = nullptr;
  const std::size_t required = alignment > kHeapPageSize ? alignment : kHeapPageSize;
  std::size_t align = required;  // of a fresh mapping: a huge page where they are on
  bool huge = false;
  bool never_huge = false;
  {
    Unmaps unmaps;
    std::lock_guard<Lock> lock(mutex_);
    // On huge pages: a mapping that starts on one (the kernel then backs all of
    // it but the tail with huge pages).
    ensure_thp_mode();
    huge = filler_.enabled();
    never_huge = filler_.mode() == ThpMode::kNever;
    if (huge && align < kHugePageSize) align = kHugePageSize;
    if (decay_ms_ != kNoDecay) decay_locked(now_ms(), unmaps);
    // The cached mapping that costs least: a page too many is a page unmapped
    // (cheap), a page too few a page that faults when the mapping grows (about
    // 8 times dearer, the zeroing and the fault against a munmap).
    std::size_t best_cost = SIZE_MAX;
    for (Span* c = direct_cache_.first(); c != nullptr; c = c->next) {
      if ((c->start & (required - 1)) != 0) continue;
      const std::size_t cost = c->pages >= pages ? c->pages - pages : (pages - c->pages) * 8;
      if (cost < best_cost) {
        best_cost = cost;
        s = c;
      }
    }
    const std::size_t growth = s == nullptr ? pages : s->pages < pages ? pages - s->pages : 0;
    if (growth != 0 && check_limit(growth << kHeapPageShift, s, unmaps) == LimitCheck::kRefuse)
      return nullptr;
    if (s != nullptr) {
      uncache(s);
      s->state = SpanState::kDirect;  // ours now: a racing free of it is misuse, not a hit
      if (s->pages >= pages) {
        trim_direct(s, pages, unmaps);
        s->reused = true;
        direct_bytes_ += s->bytes();
        ++direct_in_use_;
        return s;
      }
    }
  }
  if (s != nullptr) {
    if (grow_direct(s, pages, align)) {
      std::lock_guard<Lock> lock(mutex_);
      s->reused = true;
      direct_bytes_ += s->bytes();
      ++direct_in_use_;
      return s;
    }
    // The OS refused: the old mapping goes back to the cache, a fresh one is tried.
    if (s != nullptr) unmap_direct_cached(s);
  }
  void* memory = os_map_aligned(pages << kHeapPageShift, align);
  if (memory == nullptr) {
    {
      std::lock_guard<Lock> lock(mutex_);
      if (!drop_direct_cache()) return nullptr;
    }
    memory = os_map_aligned(pages << kHeapPageShift, align);
    if (memory == nullptr) return nullptr;
  }
  if (huge || never_huge) os_advise_huge_pages(memory, pages << kHeapPageShift, huge);
  std::lock_guard<Lock> lock(mutex_);
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(memory) >> kHeapPageShift;
  s = g_page_map.ensure(first, pages) ? g_metadata.create<Span>() : nullptr;
  if (s == nullptr) {
    os_unmap(memory, pages << kHeapPageShift);
    return nullptr;
  }
  s->start = reinterpret_cast<std::uintptr_t>(memory);
  s->pages = pages;
  s->state = SpanState::kDirect;
  s->reused = false;
  g_page_map.set_range(first, pages, s);
  add_mapped(s->bytes());
  direct_bytes_ += s->bytes();
  ++direct_in_use_;
  return s;
}

// A direct span not counted in use goes (back) into the cache, or to the OS.
void PageHeap::unmap_direct_cached(Span* s) noexcept {
  void* memory = address_as(s->start);
  const std::size_t bytes = s->bytes();
  {
    Unmaps unmaps;
    std::lock_guard<Lock> lock(mutex_);
    const std::uint64_t now = decay_ms_ != kNoDecay ? now_ms() : 0;
    if (bytes <= direct_cache_limit_ && release_threshold_ != 0) {
      s->state = SpanState::kCached;
      s->reused = false;
      s->free_since = now;
      direct_cache_.push_front(s);
      direct_cached_bytes_ += bytes;
      ++direct_cached_;
      while (direct_cached_bytes_ > direct_cache_limit_ || direct_cached_ > kMaxCachedDirect)
        evict(oldest_cached(), unmaps);
      decay_locked(now, unmaps);
      return;
    }
    g_page_map.set_range(s->first_page(), s->pages, nullptr);
    mapped_bytes_ -= bytes;
    g_metadata.destroy(s);
  }
  os_unmap(memory, bytes);
}

void PageHeap::unmap_direct(Span* s) noexcept {
  {
    std::lock_guard<Lock> lock(mutex_);
    direct_bytes_ -= s->bytes();
    --direct_in_use_;
  }
  unmap_direct_cached(s);
}

PageHeapStats PageHeap::stats() const noexcept {
  std::lock_guard<Lock> lock(mutex_);
  PageHeapStats st;
  st.bytes_mapped = mapped_bytes_;
  st.bytes_free_resident = free_resident_pages_ << kHeapPageShift;
  st.bytes_free_released = free_released_pages_ << kHeapPageShift;
  st.bytes_in_spans = span_bytes_in_use_;
  st.bytes_direct = direct_bytes_;
  st.bytes_direct_cached = direct_cached_bytes_;
  st.direct_cached = direct_cached_;
  st.direct_in_use = direct_in_use_;
  st.free_spans = free_spans_;
  st.bytes_mapped_peak = mapped_peak_;
  st.limit_hits = limit_hits_;
  if (filler_.enabled()) {
    st.bytes_huge_advised =
        region_bytes_ - sparse_region_bytes_ + direct_bytes_ + direct_cached_bytes_;
    const auto add_partial = [&](const SpanList& l) {
      for (const Span* s = l.first(); s != nullptr; s = s->next)
        st.bytes_free_partial_huge += HugePageFiller::partial_bytes(s->first_page(), s->pages);
    };
    add_partial(arenas_[kDense].resident_large);
    for (std::size_t n = 1; n <= kMaxListPages; ++n)
      add_partial(arenas_[kDense].resident[n]);
  }
  st.huge_pages_broken = huge_pages_broken_;
  return st;
}

void PageHeap::add_mapped(std::size_t bytes) noexcept {
  mapped_bytes_ += bytes;
  if (mapped_bytes_ > mapped_peak_) mapped_peak_ = mapped_bytes_;
  // Large enough for huge pages (MEMPOOL_THP=auto): what is reserved takes the
  // advice now, its pages faulted in already stay as they are (khugepaged may
  // collapse them later), and the filler's placement and release start.
  if (!filler_.enabled() && filler_.allowed() && dense_mapped_bytes() >= kAutoFromBytes) {
    filler_.activate();
    advise_reservations();
  }
}

// Mapped and not given back: free pages given back (or never touched) aside. An
// upper bound of what the heap holds in memory (blocks in use may be untouched).
std::size_t PageHeap::resident_bytes() const noexcept {
  return mapped_bytes_ - (free_released_pages_ << kHeapPageShift);
}

void PageHeap::set_memory_limit(std::size_t bytes) noexcept {
  std::lock_guard<Lock> lock(mutex_);
  memory_limit_.store(bytes, std::memory_order_relaxed);
  next_refusal_ = 0;
}

bool PageHeap::take_limit_refusal() noexcept {
  const bool refused = t_limit_refused;
  t_limit_refused = false;
  return refused;
}

PageHeap::GrowPastLimit::GrowPastLimit() noexcept {
  t_grow_past_limit = true;
}

PageHeap::GrowPastLimit::~GrowPastLimit() {
  t_grow_past_limit = false;
}

// tcmalloc's soft limit: above it, memory the heap holds but nobody uses goes
// back before the heap grows; below it, or when that is not enough, it grows.
PageHeap::LimitCheck PageHeap::check_limit(std::size_t bytes, const Span* keep,
                                           Unmaps& out) noexcept {
  const std::size_t limit = memory_limit_.load(std::memory_order_relaxed);
  if (limit == 0 || resident_bytes() + bytes <= limit) {
    next_refusal_ = 0;
    return LimitCheck::kBelow;
  }
  ++limit_hits_;
  release_down_to(0, true);
  for (Span* s = direct_cache_.first(); s != nullptr;) {
    Span* next = s->next;  // evict() takes s off the list
    if (s != keep) evict(s, out);
    s = next;
  }
  const std::size_t after = resident_bytes() + bytes;
  if (after <= limit || after <= next_refusal_ || t_grow_past_limit) return LimitCheck::kGrow;
  // The caches are emptied now; not again before the heap has grown by a step.
  const std::size_t step =
      limit / 16 > (kRegionPages << kHeapPageShift) ? limit / 16 : kRegionPages << kHeapPageShift;
  next_refusal_ = after + step;
  t_limit_refused = true;
  return LimitCheck::kRefuse;
}

}  // namespace mempool::detail
