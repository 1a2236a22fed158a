#include "page_heap.hpp"

#include <initializer_list>
#include "mempool/detail/os.hpp"
#include "metadata.hpp"
#include "page_map.hpp"

namespace mempool::detail {

constinit PageHeap g_page_heap;

namespace {

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

SpanList& PageHeap::list_for(const Span* s) noexcept {
  if (s->pages <= kMaxListPages) return s->released ? released_[s->pages] : resident_[s->pages];
  return s->released ? released_large_ : resident_large_;
}

void PageHeap::list(Span* s) noexcept {
  s->state = SpanState::kFree;
  s->size_class = 0;
  list_for(s).push_front(s);
  (s->released ? free_released_pages_ : free_resident_pages_) += s->pages;
}

void PageHeap::unlist(Span* s) noexcept {
  list_for(s).remove(s);
  (s->released ? free_released_pages_ : free_resident_pages_) -= s->pages;
}

Span* PageHeap::find_free(std::size_t pages) noexcept {
  for (std::size_t n = pages; n <= kMaxListPages; ++n) {
    if (!resident_[n].empty()) return resident_[n].first();
    if (!released_[n].empty()) return released_[n].first();
  }
  // Best fit among the big ones: resident memory first, then released.
  for (SpanList* l : {&resident_large_, &released_large_}) {
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

bool PageHeap::grow(std::size_t pages) noexcept {
  std::size_t region = pages < kRegionPages ? kRegionPages : pages;
  void* memory = os_map_aligned(region << kHeapPageShift, kHeapPageSize);
  if (memory == nullptr && region > pages) {  // the big region was refused: try the need
    region = pages;
    memory = os_map_aligned(region << kHeapPageShift, kHeapPageSize);
  }
  if (memory == nullptr) return false;
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(memory) >> kHeapPageShift;
  Span* s = g_page_map.ensure(first, region) ? g_metadata.create<Span>() : nullptr;
  if (s == nullptr) {
    os_unmap(memory, region << kHeapPageShift);
    return false;
  }
  mapped_bytes_ += region << kHeapPageShift;
  s->start = reinterpret_cast<std::uintptr_t>(memory);
  s->pages = region;
  s->released = true;  // never touched: not resident
  insert_free(s);
  return true;
}

// s is unlisted and free: keeps its first `pages` pages; the rest becomes a span
// of its own, returned unlisted (nullptr, and s unchanged, without metadata).
Span* PageHeap::split(Span* s, std::size_t pages) noexcept {
  Span* rest = g_metadata.create<Span>();
  if (rest == nullptr) return nullptr;
  rest->start = s->start + (pages << kHeapPageShift);
  rest->pages = s->pages - pages;
  rest->released = s->released;
  s->pages = pages;
  return rest;
}

void PageHeap::insert_free(Span* s) noexcept {
  if (Span* left = span_at_page(s->first_page() - 1);
      left != nullptr && left->state == SpanState::kFree) {
    unlist(left);
    g_page_map.set(left->last_page(), nullptr);
    g_page_map.set(s->first_page(), nullptr);
    s->start = left->start;
    s->pages += left->pages;
    s->released = s->released && left->released;
    g_metadata.destroy(left);
  }
  if (Span* right = span_at_page(s->last_page() + 1);
      right != nullptr && right->state == SpanState::kFree) {
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

Span* PageHeap::allocate(std::size_t pages, std::size_t align_pages, SpanState state) noexcept {
  const std::size_t want = pages + align_pages - 1;
  if (pages == 0 || want < pages) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  Span* s = find_free(want);
  if (s == nullptr) {
    if (!grow(want)) return nullptr;
    s = find_free(want);
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
    if (Span* rest = split(s, pages); rest != nullptr) {
      map_free_span(rest);
      list(rest);
    }
  }
  s->released = false;
  s->state = state;
  s->size_class = 0;
  g_page_map.set_range(s->first_page(), s->pages, s);
  span_bytes_in_use_ += s->bytes();
  return s;
}

void PageHeap::free(Span* s) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  span_bytes_in_use_ -= s->bytes();
  s->size_class = 0;  // before its entries are rewritten untagged
  s->state = SpanState::kFree;
  if (s->pages > 2) g_page_map.set_range(s->first_page() + 1, s->pages - 2, nullptr);
  s->released = false;
  s->free_blocks = nullptr;
  s->carve = s->carve_end = 0;
  s->allocated = s->capacity = 0;
  s->live_bits = nullptr;
  insert_free(s);
  if ((free_resident_pages_ << kHeapPageShift) > release_threshold_)
    release_down_to(release_threshold_ / 2);
}

bool PageHeap::resize(Span* s, std::size_t pages) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pages == s->pages) return true;
  if (pages < s->pages) {
    Span* tail = split(s, pages);
    if (tail == nullptr) return false;
    g_page_map.set_range(tail->first_page(), tail->pages, nullptr);
    span_bytes_in_use_ -= tail->bytes();
    tail->released = false;
    insert_free(tail);
    return true;
  }
  Span* right = span_at_page(s->last_page() + 1);
  const std::size_t need = pages - s->pages;
  if (right == nullptr || right->state != SpanState::kFree || right->pages < need) return false;
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

void PageHeap::release(Span* s) noexcept {
  unlist(s);
  os_release(address_as(s->start), s->bytes());
  s->released = true;
  list(s);
}

void PageHeap::release_down_to(std::size_t resident_bytes) noexcept {
  while ((free_resident_pages_ << kHeapPageShift) > resident_bytes) {
    Span* victim = resident_large_.first();
    for (std::size_t n = kMaxListPages; victim == nullptr && n > 0; --n)
      victim = resident_[n].first();
    if (victim == nullptr) break;
    release(victim);
  }
}

void PageHeap::release_all() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  release_down_to(0);
}

void PageHeap::set_release_threshold(std::size_t bytes) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  release_threshold_ = bytes;
}

Span* PageHeap::map_direct(std::size_t bytes, std::size_t alignment) noexcept {
  const std::size_t pages = (bytes + kHeapPageSize - 1) >> kHeapPageShift;
  if (pages == 0 || (pages << kHeapPageShift) < bytes) return nullptr;
  void* memory = os_map_aligned(pages << kHeapPageShift,
                                alignment > kHeapPageSize ? alignment : kHeapPageSize);
  if (memory == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(memory) >> kHeapPageShift;
  Span* s = g_page_map.ensure(first, pages) ? g_metadata.create<Span>() : nullptr;
  if (s == nullptr) {
    os_unmap(memory, pages << kHeapPageShift);
    return nullptr;
  }
  s->start = reinterpret_cast<std::uintptr_t>(memory);
  s->pages = pages;
  s->state = SpanState::kDirect;
  g_page_map.set_range(first, pages, s);
  mapped_bytes_ += s->bytes();
  direct_bytes_ += s->bytes();
  return s;
}

void PageHeap::unmap_direct(Span* s) noexcept {
  void* memory = address_as(s->start);
  const std::size_t bytes = s->bytes();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    g_page_map.set_range(s->first_page(), s->pages, nullptr);
    mapped_bytes_ -= bytes;
    direct_bytes_ -= bytes;
    g_metadata.destroy(s);
  }
  os_unmap(memory, bytes);
}

PageHeapStats PageHeap::stats() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  PageHeapStats st;
  st.bytes_mapped = mapped_bytes_;
  st.bytes_free_resident = free_resident_pages_ << kHeapPageShift;
  st.bytes_free_released = free_released_pages_ << kHeapPageShift;
  st.bytes_in_spans = span_bytes_in_use_;
  st.bytes_direct = direct_bytes_;
  return st;
}

}  // namespace mempool::detail
