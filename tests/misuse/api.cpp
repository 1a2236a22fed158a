// realloc and malloc_usable_size of pointers they must not see, and arguments
// the allocation functions must refuse (an error return, not a stop).
#include <malloc.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "misuse.hpp"

namespace misuse {

namespace {

constexpr std::size_t kWild = 0x12345678;

// realloc(p + c.extent, 2 * c.size) of a block of c.size freed first (kFreed)
// or not.
template <bool kFreed>
void realloc_of(const Case& c) {
  void* p = allocate(c.size);
  if (kFreed) release(p);
  void* q = reallocate(at(p, static_cast<std::ptrdiff_t>(c.extent)), 2 * c.size);
  if (q == nullptr) setup_failed("realloc returned NULL");
  fill(q, 0, 0, 2 * c.size);
  release(q);
  void* a = allocate(c.size);
  void* b = allocate(c.size);
  fill(a, 0, 0x41, c.size);
  fill(b, 0, 0x42, c.size);
}

void realloc_stack(const Case& /*c*/) {
  alignas(16) char local[64] = {};
  opaque(reallocate(at(local, kPastZeroes), 128));
}

void realloc_wild(const Case& /*c*/) {
  opaque(reallocate(reinterpret_cast<void*>(opaque(kWild)), 128));
}

// q = realloc(p, c.extent) moves the block (a block allocated after p keeps it
// from growing in place); then free(p) and free(q).
void free_after_realloc_moved(const Case& c) {
  void* p = allocate(c.size);
  void* after = allocate(c.size);
  void* q = reallocate(p, c.extent);
  if (q == nullptr || q == p) setup_failed("realloc did not move the block");
  release(p);
  release(q);
  release(after);
}

// malloc_usable_size(p + c.extent) of a block of c.size, freed first (kFreed)
// or not.
template <bool kFreed>
void usable_size_of(const Case& c) {
  void* p = allocate(c.size);
  if (kFreed) release(p);
  opaque(malloc_usable_size(at(p, static_cast<std::ptrdiff_t>(c.extent))));
}

void usable_size_stack(const Case& /*c*/) {
  alignas(16) char local[64] = {};
  opaque(malloc_usable_size(at(local, kPastZeroes)));
}

void usable_size_wild(const Case& /*c*/) {
  opaque(malloc_usable_size(reinterpret_cast<void*>(opaque(kWild))));
}

// posix_memalign(&p, c.extent, c.size).
void posix_memalign_refused(const Case& c) {
  void* p = nullptr;
  const int error = posix_memalign(&p, opaque(c.extent), opaque(c.size));
  if (error != 0) error_return("posix_memalign returned", error);
  opaque(p);
}

void aligned_alloc_refused(const Case& c) {
  errno = 0;
  if (opaque(aligned_alloc(opaque(c.extent), opaque(c.size))) == nullptr)
    error_return("aligned_alloc: NULL, errno", errno);
}

// calloc(c.extent, c.size): the product wraps around.
void calloc_refused(const Case& c) {
  errno = 0;
  if (opaque(calloc(opaque(c.extent), opaque(c.size))) == nullptr)
    error_return("calloc: NULL, errno", errno);
}

void malloc_refused(const Case& c) {
  errno = 0;
  if (opaque(malloc(opaque(c.size))) == nullptr) error_return("malloc: NULL, errno", errno);
}

// realloc to an impossible size (c.extent, or c.extent * 8 by reallocarray)
// must answer NULL and leave the block as it was.
template <bool kArray>
void realloc_refused(const Case& c) {
  void* p = allocate(c.size);
  fill(p, 0, 0x5a, c.size);
  errno = 0;
  void* q = kArray ? reallocarray(opaque(p), opaque(c.extent), 8) : reallocate(p, c.extent);
  if (opaque(q) != nullptr) return;
  const int error = errno;
  for (std::size_t i = 0; i < c.size; ++i)
    if (*at(p, static_cast<std::ptrdiff_t>(i)) != 0x5a) setup_failed("the block lost its data");
  release(p);
  error_return(kArray ? "reallocarray: NULL, errno" : "realloc: NULL, errno", error);
}

void new_refused(const Case& c) {
  try {
    opaque(::operator new(opaque(c.size)));
  } catch (const std::bad_alloc&) {
    error_return("operator new threw std::bad_alloc");
  }
}

void new_nothrow_refused(const Case& c) {
  if (opaque(::operator new(opaque(c.size), std::nothrow)) == nullptr)
    error_return("operator new(nothrow) returned nullptr");
}

// new long[c.extent]: the byte count overflows.
void new_array_refused(const Case& c) {
  try {
    opaque(new long[opaque(c.extent)]);
  } catch (const std::bad_array_new_length&) {
    error_return("new[] threw std::bad_array_new_length");
  } catch (const std::bad_alloc&) {
    error_return("new[] threw std::bad_alloc");
  }
}

constexpr std::size_t kMax = SIZE_MAX;
constexpr std::size_t kWraps = kMax / 16 + 2;  // times 16 wraps to 16

constexpr Case kBadPointerCases[] = {
    {"realloc-freed-64", realloc_of<true>, 64, 0, "free(p), then realloc(p, 128)"},
    {"realloc-freed-100k", realloc_of<true>, 100 * kKiB, 0, "free(p), then realloc(p, 200 KiB)"},
    {"realloc-interior-64", realloc_of<false>, 64, 8, "realloc(p + 8, 128), p a 64 B block"},
    {"realloc-interior-100k", realloc_of<false>, 100 * kKiB, 8,
     "realloc(p + 8, 200 KiB), p a 100 KiB block"},
    {"realloc-stack", realloc_stack, 0, 0, "realloc of a local array"},
    {"realloc-wild", realloc_wild, 0, 0, "realloc((void*)0x12345678, 128)"},
    {"free-after-realloc-moved-64", free_after_realloc_moved, 64, 100 * kKiB,
     "q = realloc(p, 100 KiB) moves p (64 B), then free(p)"},
    {"free-after-realloc-moved-100k", free_after_realloc_moved, 100 * kKiB, 100 * kMiB,
     "q = realloc(p, 100 MiB) moves p (100 KiB), then free(p)"},
    {"usable-size-freed-64", usable_size_of<true>, 64, 0, "free(p), then malloc_usable_size(p)"},
    {"usable-size-freed-100k", usable_size_of<true>, 100 * kKiB, 0,
     "free(p), then malloc_usable_size(p), p 100 KiB"},
    {"usable-size-interior-64", usable_size_of<false>, 64, 8,
     "malloc_usable_size(p + 8), p a 64 B block"},
    {"usable-size-stack", usable_size_stack, 0, 0, "malloc_usable_size of a local array"},
    {"usable-size-wild", usable_size_wild, 0, 0, "malloc_usable_size((void*)0x12345678)"},
};

constexpr Case kRefusedCases[] = {
    {"posix-memalign-alignment-0", posix_memalign_refused, 64, 0,
     "posix_memalign(&p, 0, 64): must be EINVAL"},
    {"posix-memalign-alignment-4", posix_memalign_refused, 64, 4,
     "posix_memalign(&p, 4, 64), less than sizeof(void*): must be EINVAL"},
    {"posix-memalign-alignment-24", posix_memalign_refused, 64, 24,
     "posix_memalign(&p, 24, 64), not a power of two: must be EINVAL"},
    {"posix-memalign-size-max", posix_memalign_refused, kMax, 64,
     "posix_memalign(&p, 64, SIZE_MAX): must be ENOMEM"},
    {"aligned-alloc-alignment-24", aligned_alloc_refused, 48, 24,
     "aligned_alloc(24, 48), not a power of two: NULL, EINVAL (C17, glibc 2.38)"},
    {"aligned-alloc-size-max", aligned_alloc_refused, kMax, 64,
     "aligned_alloc(64, SIZE_MAX): must be NULL, ENOMEM"},
    {"calloc-overflow-to-zero", calloc_refused, std::size_t{1} << 32, std::size_t{1} << 32,
     "calloc(2^32, 2^32), the product wraps to 0: must be NULL, ENOMEM"},
    {"calloc-overflow-to-small", calloc_refused, 16, kWraps,
     "calloc(SIZE_MAX / 16 + 2, 16), the product wraps to 16: must be NULL, ENOMEM"},
    {"malloc-size-max", malloc_refused, kMax, 0, "malloc(SIZE_MAX): must be NULL, ENOMEM"},
    {"malloc-ptrdiff-max", malloc_refused, std::size_t{PTRDIFF_MAX} + 1, 0,
     "malloc(PTRDIFF_MAX + 1): must be NULL, ENOMEM"},
    {"realloc-size-max", realloc_refused<false>, 64, kMax,
     "realloc(p, SIZE_MAX): must be NULL, ENOMEM, p unchanged"},
    {"reallocarray-overflow", realloc_refused<true>, 64, kMax / 8 + 2,
     "reallocarray(p, SIZE_MAX / 8 + 2, 8), the product wraps: must be NULL, ENOMEM"},
    {"new-size-max", new_refused, kMax, 0, "operator new(SIZE_MAX): must throw std::bad_alloc"},
    {"new-nothrow-size-max", new_nothrow_refused, kMax, 0,
     "operator new(SIZE_MAX, nothrow): must return nullptr"},
    {"new-array-length-overflow", new_array_refused, 0, kMax / 4,
     "new long[SIZE_MAX / 4], the byte count overflows: must throw std::bad_array_new_length"},
};

}  // namespace

void add_realloc_cases(CaseList& cases) {
  cases.add(kBadPointerCases);
}

void add_refused_cases(CaseList& cases) {
  cases.add(kRefusedCases);
}

}  // namespace misuse
