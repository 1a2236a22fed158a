#include "system_allocator.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "../heap/span.hpp"  // address_as
#include "mempool/detail/platform.hpp"

// glibc's own free, still in libc. Weak: a fully static program links no malloc of
// glibc's (a reference would bring libc.a's malloc.o, whose malloc and free clash with
// mempool's), so it has no glibc block either, and the address is null.
extern "C" void __libc_free(void* p) noexcept  // NOLINT(readability-identifier-naming)
    __attribute__((weak));

namespace mempool::detail {

namespace {

// glibc's chunk header (malloc/malloc.c): the 16 bytes before a block hold the
// previous chunk's size (or, for a mapped chunk, the offset from the mapping's
// start) and this chunk's size with three flag bits.
struct ChunkHeader {
  std::size_t prev_size;
  std::size_t size;
};
constexpr std::size_t kPrevInUse = 1;
constexpr std::size_t kIsMapped = 2;
constexpr std::size_t kNonMainArena = 4;
constexpr std::size_t kFlags = kPrevInUse | kIsMapped | kNonMainArena;
constexpr std::size_t kMinChunk = 32;

const ChunkHeader* header_of(const void* p) noexcept {
  return reinterpret_cast<const ChunkHeader*>(static_cast<const char*>(p) - sizeof(ChunkHeader));
}

// Whether [begin, end) is mapped: mincore fails with ENOMEM on an unmapped page.
bool is_mapped(std::uintptr_t begin, std::uintptr_t end) noexcept {
  const std::uintptr_t page = mempool::detail::page_size();
  const std::uintptr_t first = begin & ~(page - 1);
  unsigned char residency[64];
  for (std::uintptr_t at = first; at < end; at += 64 * page) {
    const std::uintptr_t stop = end - at < 64 * page ? end : at + 64 * page;
    if (::mincore(address_as(at), stop - at, residency) != 0) return false;
  }
  return true;
}

// Field 47 of /proc/self/stat: where the program break (glibc's main heap)
// starts. 0 when unknown. Raw reads: this runs inside free.
std::uintptr_t read_start_brk() noexcept {
  char buf[1024];
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
  const char* c = nullptr;
  for (const char* s = buf; *s != '\0'; ++s)
    if (*s == ')') c = s;
  if (c == nullptr) return 0;
  int field = 2;
  std::uintptr_t value = 0;
  for (++c; *c != '\0'; ++c) {
    if (*c == ' ') {
      if (++field > 47) break;
    } else if (field == 47) {
      if (*c < '0' || *c > '9') return 0;
      value = value * 10 + static_cast<std::uintptr_t>(*c - '0');
    }
  }
  return field >= 47 ? value : 0;
}

std::uintptr_t start_brk() noexcept {
  static std::atomic<std::uintptr_t> cached{0};
  std::uintptr_t v = cached.load(std::memory_order_relaxed);
  if (v == 0) {
    v = read_start_brk();
    cached.store(v, std::memory_order_relaxed);
  }
  return v;
}

// A chunk of glibc's main heap, in use: inside the break, with a sane size, and
// the next chunk's "previous in use" bit set.
bool in_main_heap(std::uintptr_t chunk, const ChunkHeader* h) noexcept {
  const std::uintptr_t begin = start_brk();
  const auto end = reinterpret_cast<std::uintptr_t>(::sbrk(0));
  if (begin == 0 || chunk < begin || chunk + sizeof(ChunkHeader) > end) return false;
  if ((h->size & (kIsMapped | kNonMainArena)) != 0) return false;
  const std::size_t size = h->size & ~kFlags;
  if (size < kMinChunk || size % 16 != 0 || size > end - chunk - sizeof(ChunkHeader)) return false;
  const auto* next = address_as<const ChunkHeader>(chunk + size);
  return (next->size & kPrevInUse) != 0;
}

// A chunk glibc mapped for itself: page-granular, the mapping starting
// prev_size bytes before the chunk, all of it mapped.
bool is_mapped_chunk(std::uintptr_t chunk, const ChunkHeader* h) noexcept {
  if ((h->size & (kIsMapped | kNonMainArena)) != kIsMapped) return false;
  const std::uintptr_t page = mempool::detail::page_size();
  const std::size_t size = h->size & ~kFlags;
  const std::uintptr_t mapping = chunk - h->prev_size;
  if (h->prev_size >= size || mapping > chunk || (mapping & (page - 1)) != 0 ||
      ((h->prev_size + size) & (page - 1)) != 0)
    return false;
  return is_mapped(mapping, chunk + size);
}

}  // namespace

bool system_owns(const void* p) noexcept {
  if (&__libc_free == nullptr) return false;  // a fully static program: no glibc heap
  const auto block = reinterpret_cast<std::uintptr_t>(p);
  if (block % 16 != 0 || block < page_size()) return false;
  const std::uintptr_t chunk = block - sizeof(ChunkHeader);
  if (!is_mapped(chunk, block)) return false;  // reading the header must not fault
  const ChunkHeader* h = header_of(p);
  return in_main_heap(chunk, h) || is_mapped_chunk(chunk, h);
}

std::size_t system_usable_size(const void* p) noexcept {
  const ChunkHeader* h = header_of(p);
  const std::size_t size = h->size & ~kFlags;
  // A mapped chunk has no next chunk whose first word it may use.
  return (h->size & kIsMapped) != 0 ? size - sizeof(ChunkHeader) : size - sizeof(std::size_t);
}

void system_free(void* p) noexcept {
  __libc_free(p);
}

}  // namespace mempool::detail
