// Writes past the end of a block (overflow) or before its start (underflow),
// by 1 byte, 32 bytes or 1 MiB, into neighbours still allocated (then the
// blocks are freed) or already freed (then the size is allocated again).
#include <algorithm>
#include <functional>

#include "misuse.hpp"

namespace misuse {

namespace {

enum class Then { kFree, kMalloc };

// Four blocks of c.size; the second lowest is the one written out of bounds,
// so that there are blocks on both sides of it when the allocator packs them.
// offset: where the write starts, relative to that block. An underflow comes
// after enough blocks of the size (kept) that it lands in the heap, not in
// whatever the address space holds below it: twice its extent, since blocks
// need not come in address order (a heap whose first span of the class starts
// its mapping has them exactly the extent above the edge, give or take a span).
void out_of_bounds(const Case& c, std::ptrdiff_t offset, Then then) {
  if (offset < 0) {
    for (std::size_t i = 0; i < 2 * c.extent / c.size + 16; ++i)
      allocate(c.size);
  }
  void* blocks[4];
  for (void*& b : blocks)
    b = allocate(c.size);
  std::sort(std::begin(blocks), std::end(blocks), std::less<>());
  void* p = blocks[1];
  if (then == Then::kMalloc) {
    for (void* b : blocks)
      if (b != p) release(b);
  }
  overwrite(p, offset, 0x41, c.extent);
  if (then == Then::kFree) {
    for (void* b : blocks)
      release(b);
  } else {
    release(p);
  }
  for (void*& b : blocks) {
    b = allocate(c.size);
    fill(b, 0, 0, c.size);
  }
  for (void* b : blocks)
    release(b);
}

template <Then kThen>
void overflow(const Case& c) {
  out_of_bounds(c, static_cast<std::ptrdiff_t>(c.size), kThen);
}

void underflow(const Case& c) {
  out_of_bounds(c, -static_cast<std::ptrdiff_t>(c.extent), Then::kFree);
}

constexpr Size kShort[] = {{"1", 1, "1 byte"}, {"32", 32, "32 bytes"}};
constexpr Size kFar[] = {{"1m", kMiB, "1 MiB"}};
constexpr Size kBlocks[] = {kSize24, kSize64, kSize1000, kSize100K};
constexpr std::span<const Size> kFrom64(kBlocks + 1, 3);
constexpr Size kSmallAndLarge[] = {kSize64, kSize100K};

constexpr const char* kThenFree = "{e} past a {s} block, then free it and its allocated neighbours";
constexpr const char* kThenMalloc = "{e} past a {s} block into freed neighbours, then malloc again";
constexpr const char* kUnderThenFree = "{e} before a {s} block, then free it and its neighbours";

constexpr Grid kGrids[] = {
    {"overflow", overflow<Then::kFree>, kShort, kBlocks, "-free", kThenFree},
    {"overflow", overflow<Then::kMalloc>, kShort, kBlocks, "-malloc", kThenMalloc},
    {"overflow", overflow<Then::kFree>, kFar, kSmallAndLarge, "-free", kThenFree},
    {"overflow", overflow<Then::kMalloc>, kFar, kSmallAndLarge, "-malloc", kThenMalloc},
    {"underflow", underflow, kShort, kFrom64, "-free", kUnderThenFree},
    {"underflow", underflow, kFar, std::span(kBlocks + 1, 1), "-free", kUnderThenFree},
};

}  // namespace

void add_overflow_cases(CaseList& cases) {
  cases.add_grids(kGrids);
}

}  // namespace misuse
