// The only code in mempool that calls mmap and munmap.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "mempool/detail/memory_checker.hpp"
#include "mempool/detail/os.hpp"
#include "mempool/detail/platform.hpp"

namespace mempool {

namespace {
std::atomic<long> g_maps_left_before_failure{-1};  // < 0: never fail
std::atomic<long> g_map_count{0};
std::atomic<std::size_t> g_bytes_mapped{0};

// Fault injection: takes one of the maps left before failure (false: this map is
// to fail), or none when injection is off. give_back_map returns it when the OS
// refused for a reason of its own, which is not a map.
bool take_map() noexcept {
  long left = g_maps_left_before_failure.load(std::memory_order_relaxed);
  while (left >= 0) {
    if (left == 0) return false;
    if (g_maps_left_before_failure.compare_exchange_weak(left, left - 1)) break;
  }
  return true;
}
void give_back_map() noexcept {
  if (g_maps_left_before_failure.load(std::memory_order_relaxed) >= 0)
    g_maps_left_before_failure.fetch_add(1);
}
void count_map(std::size_t bytes) noexcept {
  g_map_count.fetch_add(1, std::memory_order_relaxed);
  g_bytes_mapped.fetch_add(bytes, std::memory_order_relaxed);
}

// The aligned part of a mapping of `padded` = bytes + alignment bytes at `raw`: the head
// before it and the tail after it handed to `release` (os_unmap for a map, which counts
// them; munmap for a reservation, which is not counted).
char* trim_to_alignment(char* raw, std::size_t padded, std::size_t bytes, std::size_t alignment,
                        void (*release)(void*, std::size_t) noexcept) noexcept {
  const auto addr = reinterpret_cast<std::uintptr_t>(raw);
  const std::size_t head = ((addr + alignment - 1) & ~(alignment - 1)) - addr;
  if (head != 0) release(raw, head);
  if (const std::size_t tail = padded - head - bytes; tail != 0) release(raw + head + bytes, tail);
  return raw + head;
}
void unmap_uncounted(void* p, std::size_t bytes) noexcept {
  ::munmap(p, bytes);
}

}  // namespace

namespace detail {

// The two facts below are read once and cached in atomics, not in function-local statics,
// whose guard variables are libstdc++'s (the drop-in library links none of it). Two threads
// that both read the first time store the same value.
std::size_t page_size() noexcept {
  static constinit std::atomic<std::size_t> cached{0};
  std::size_t size = cached.load(std::memory_order_relaxed);
  if (MEMPOOL_UNLIKELY(size == 0)) {
    const long s = ::sysconf(_SC_PAGESIZE);
    size = s > 0 ? static_cast<std::size_t>(s) : std::size_t{4096};
    cached.store(size, std::memory_order_relaxed);
  }
  return size;
}

void* os_map(std::size_t bytes, bool populate) noexcept {
  if (bytes == 0 || !take_map()) return nullptr;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (populate) flags |= MAP_POPULATE;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  count_map(bytes);
  return p;
}

void* os_reserve(void* address, std::size_t bytes) noexcept {
  if (bytes == 0) return nullptr;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (address != nullptr) flags |= MAP_FIXED_NOREPLACE;
  void* p = ::mmap(address, bytes, PROT_NONE, flags, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (address != nullptr && p != address) {  // a kernel before 4.17 took the flag as a hint
    ::munmap(p, bytes);
    return nullptr;
  }
  return p;
}

void os_unreserve(void* p, std::size_t bytes) noexcept {
  if (p != nullptr && bytes != 0) ::munmap(p, bytes);
}

void* os_reserve_zeros(std::size_t bytes, std::size_t alignment) noexcept {
  const std::size_t padded = bytes + alignment;
  if (bytes == 0 || padded < bytes) return nullptr;
  void* raw =
      ::mmap(nullptr, padded, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  return trim_to_alignment(static_cast<char*>(raw), padded, bytes, alignment, unmap_uncounted);
}

bool os_commit(void* p, std::size_t bytes) noexcept {
  if (p == nullptr || bytes == 0 || !take_map()) return false;
  // mprotect, as glibc grows its thread arenas: on failure (ENOMEM where the kernel
  // charges commit, overcommit mode 2) the reservation stays as it was, where a
  // MAP_FIXED mmap could leave a hole that another mapping takes.
  if (::mprotect(p, bytes, PROT_READ | PROT_WRITE) != 0) return false;
  count_map(bytes);
  return true;
}

void os_unmap(void* p, std::size_t bytes) noexcept {
  if (p == nullptr || bytes == 0) return;
  // Under AddressSanitizer the range may hold poisoned free blocks; whoever maps
  // these addresses next must find them clean (memory_checker.hpp).
  asan_unpoison(p, bytes);
  ::munmap(p, bytes);
  g_bytes_mapped.fetch_sub(bytes, std::memory_order_relaxed);
}

void* os_map_aligned(std::size_t bytes, std::size_t alignment) noexcept {
  if (alignment <= page_size()) return os_map(bytes);
  const std::size_t padded = bytes + alignment;
  if (padded < bytes) return nullptr;
  auto* raw = static_cast<char*>(os_map(padded));
  if (raw == nullptr) return nullptr;
  return trim_to_alignment(raw, padded, bytes, alignment, os_unmap);
}

void* os_remap(void* p, std::size_t old_bytes, std::size_t new_bytes, void* target) noexcept {
  if (p == nullptr || new_bytes <= old_bytes) return nullptr;
  void* q;
  if (target == nullptr) {
    // In place: more memory from the OS, so the fault injection counts it as a map.
    if (!take_map()) return nullptr;
    q = ::mremap(p, old_bytes, new_bytes, 0);
    if (q == MAP_FAILED) {  // the addresses after it are taken: not a map
      give_back_map();
      return nullptr;
    }
    count_map(new_bytes - old_bytes);
    return q;
  }
  // Onto target (new_bytes from os_map, already counted): p's old range goes away.
  q = ::mremap(p, old_bytes, new_bytes, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  if (q == MAP_FAILED) return nullptr;
  asan_unpoison(p, old_bytes);  // as in os_unmap
  g_bytes_mapped.fetch_sub(old_bytes, std::memory_order_relaxed);
  return q;
}

void os_release(void* p, std::size_t bytes) noexcept {
  if (p == nullptr || bytes == 0) return;
  // Failure (EINVAL on a range that is not ours) would be a bug in the caller; the
  // memory simply stays resident, which is safe.
  ::madvise(p, bytes, MADV_DONTNEED);
}

bool os_protect(void* p, std::size_t bytes, bool accessible) noexcept {
  if (p == nullptr || bytes == 0) return true;
  return ::mprotect(p, bytes, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
}

SystemHugePages os_system_huge_pages() noexcept {
  // No allocation and no stdio: the heap may be malloc itself. The file reads
  // "always [madvise] never", the bracketed word being the mode.
  static constinit std::atomic<int> cached{-1};
  if (const int known = cached.load(std::memory_order_relaxed); MEMPOOL_LIKELY(known >= 0))
    return static_cast<SystemHugePages>(known);
  const SystemHugePages mode = [] {
    char text[128] = {};
    const int fd = ::open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return SystemHugePages::kNever;
    const ssize_t n = ::read(fd, text, sizeof text - 1);
    ::close(fd);
    if (n <= 0) return SystemHugePages::kNever;
    auto bracketed = [&](const char* word) {
      for (const char* c = text; *c != '\0'; ++c) {
        if (*c != '[') continue;
        const char* w = word;
        const char* t = c + 1;
        while (*w != '\0' && *t == *w)
          ++w, ++t;
        if (*w == '\0' && *t == ']') return true;
      }
      return false;
    };
    if (bracketed("always")) return SystemHugePages::kAlways;
    if (bracketed("madvise")) return SystemHugePages::kMadvise;
    return SystemHugePages::kNever;
  }();
  cached.store(static_cast<int>(mode), std::memory_order_relaxed);
  return mode;
}

bool os_advise_huge_pages(void* p, std::size_t bytes, bool huge) noexcept {
  if (p == nullptr || bytes == 0) return true;
  return ::madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0;
}

}  // namespace detail

namespace testing {

void fail_os_maps_after(long n) noexcept {
  g_maps_left_before_failure.store(n < 0 ? -1 : n);
}
long os_map_count() noexcept {
  return g_map_count.load(std::memory_order_relaxed);
}
std::size_t os_bytes_mapped() noexcept {
  return g_bytes_mapped.load(std::memory_order_relaxed);
}

}  // namespace testing

}  // namespace mempool
