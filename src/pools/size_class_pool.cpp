#include "mempool/size_class_pool.hpp"

#include <cstdio>

#include "mempool/detail/error.hpp"

namespace mempool {

namespace {
constexpr const char* kName = "SizeClassPool";
}  // namespace

SizeClassPool& SizeClassPool::global() {
  static SizeClassPool* const instance = new SizeClassPool();  // never deleted
  return *instance;
}

bool SizeClassPool::owns(const void* p) const noexcept {
  for (const ConcurrentFixedPool& c : classes_) {
    if (c.owns(p)) return true;
  }
  return false;
}

std::size_t SizeClassPool::bytes_reserved() const noexcept {
  std::size_t total = 0;
  for (const ConcurrentFixedPool& c : classes_)
    total += c.bytes_reserved();
  return total;
}

SizeClassPool::Stats SizeClassPool::stats() const noexcept {
  Stats s{};
  for (std::size_t c = 0; c < classes_.size(); ++c) {
    ClassStats& cs = s.classes[c];
    cs.block_size = detail::size_class_bytes(c);
    cs.live_blocks = classes_[c].live_blocks();
    cs.bytes_reserved = classes_[c].bytes_reserved();
    s.live_bytes += cs.live_blocks * cs.block_size;
    s.bytes_reserved += cs.bytes_reserved;
  }
  return s;
}

std::size_t SizeClassPool::release() noexcept {
  std::size_t released = 0;
  for (ConcurrentFixedPool& c : classes_)
    released += c.release();
  return released;
}

void SizeClassPool::check_free(void* p, std::size_t n) const noexcept {
  if (p == nullptr) return;
  const bool small = n - 1 < detail::kSizeClassMax;
  if (small && classes_[detail::size_class_of(n)].owns(p)) return;  // the class's own check follows
  for (std::size_t c = 0; c < classes_.size(); ++c) {
    if (classes_[c].owns(p)) {
      // A stack buffer: the report must not allocate.
      char problem[96];
      std::snprintf(problem, sizeof problem, "free with size %zu of a block of the %zu-byte class",
                    n, detail::size_class_bytes(c));
      detail::fatal_misuse(kName, p, problem);
    }
  }
  // Large blocks come from the heap, which checks them itself.
  if (small) detail::fatal_misuse(kName, p, "free of a pointer not from this pool");
}

}  // namespace mempool
