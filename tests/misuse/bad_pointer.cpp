// Frees of pointers no malloc handed out: on the stack, in the data, in read-only
// data, in a mapping of the program's own, into a block, before a block,
// unaligned, wild and far.
#include <sys/mman.h>

#include <cstdint>

#include "misuse.hpp"

namespace misuse {

namespace {

alignas(64) char g_global[256];

void free_stack(const Case& c) {
  alignas(16) char local[64] = {};
  release(at(local, kPastZeroes + static_cast<std::ptrdiff_t>(c.extent)));
}

void free_global(const Case& c) {
  release(at(g_global, kPastZeroes + static_cast<std::ptrdiff_t>(c.extent)));
}

void free_read_only(const Case& /*c*/) {
  alignas(16) static const char kText[] = "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0read-only text";
  release(at(const_cast<char*>(kText), kPastZeroes));
}

// A page of an anonymous mapping, 64 bytes in (so that the 16 bytes before the
// pointer are readable and zero).
void free_mapped(const Case& /*c*/) {
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) setup_failed("mmap failed");
  release(at(page, 64));
}

// c.extent bytes into (or, negative as a size_t, before) a block of c.size;
// 2^38 away: far from every mapping, but of the heap's shape (aligned, in the
// same region of the address space).
void free_offset(const Case& c) {
  void* blocks[4];
  for (void*& b : blocks)
    b = allocate(c.size);
  release(at(blocks[2], static_cast<std::ptrdiff_t>(c.extent)));
}

void free_address(const Case& c) {
  release(reinterpret_cast<void*>(opaque(c.extent)));
}

constexpr Size kInto[] = {{"8", 8, "8"}, {"1", 1, "1"}};
constexpr Size kBefore16[] = {{"", std::size_t{0} - 16, ""}};
constexpr Size kFarAbove[] = {{"", std::size_t{1} << 38, ""}};
constexpr Size kFarBelow[] = {{"", std::size_t{0} - (std::size_t{1} << 38), ""}};
constexpr Size kSizes[] = {kSize64, kSize1000, kSize100K};
constexpr Size k64And100K[] = {kSize64, kSize100K};

constexpr Case kCases[] = {
    {"free-stack", free_stack, 0, 0, "free of a pointer into a local array"},
    {"free-stack-unaligned", free_stack, 0, 3,
     "free of a pointer into a local array, not 8-byte aligned"},
    {"free-global", free_global, 0, 0, "free of a pointer into a global array"},
    {"free-global-unaligned", free_global, 0, 3,
     "free of a pointer into a global array, not 8-byte aligned"},
    {"free-read-only", free_read_only, 0, 0, "free of a string literal"},
    {"free-mapped", free_mapped, 0, 0, "free of a pointer into the program's own mmap"},
    {"free-interior-4096-100k", free_offset, 100 * kKiB, 4096,
     "free(p + 4096), p a 100 KiB block (a page boundary inside it)"},
    {"free-wild", free_address, 0, 0x12345678, "free((void*)0x12345678)"},
    {"free-wild-aligned", free_address, 0, 0x12345670, "free((void*)0x12345670)"},
    {"free-low-address", free_address, 0, 0x10, "free((void*)0x10)"},
    {"free-non-canonical", free_address, 0, 0xdead000000000000, "free((void*)0xdead000000000000)"},
};

constexpr Grid kGrids[] = {
    {"free-interior", free_offset, kInto, kSizes, "", "free(p + {e}), p a {s} block"},
    {"free-before-block", free_offset, kBefore16, std::span(kSizes, 2), "",
     "free(p - 16), p a {s} block"},
    {"free-far-above", free_offset, kFarAbove, k64And100K, "", "free(p + 2^38), p a {s} block"},
    {"free-far-below", free_offset, kFarBelow, std::span(kSizes, 1), "",
     "free(p - 2^38), p a {s} block"},
};

}  // namespace

void add_bad_pointer_cases(CaseList& cases) {
  cases.add(kCases);
  cases.add_grids(kGrids);
}

}  // namespace misuse
