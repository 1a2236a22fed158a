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
  // Large blocks come from operator new, which this pool cannot check.
  if (small) detail::fatal_misuse(kName, p, "free of a pointer not from this pool");
}

}  // namespace mempool
