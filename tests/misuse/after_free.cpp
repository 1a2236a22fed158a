// Uses of a block after its free: writes over the whole block, over its first
// word only, past its first 16 bytes, into a large block, and a read.
#include <algorithm>

#include "misuse.hpp"

namespace misuse {

namespace {

// free(p), c.extent bytes of kByte written from p + kOffset (without an
// extent: up to the block's end, at most 4 KiB), then two blocks of the size
// allocated and used (their first 4 KiB filled).
template <std::ptrdiff_t kOffset, int kByte>
void write_after_free(const Case& c) {
  void* p = allocate(c.size);
  release(p);
  const std::size_t bytes = c.extent != 0 ? c.extent : std::min(c.size - kOffset, 4 * kKiB);
  fill(p, kOffset, kByte, bytes);
  void* a = allocate(c.size);
  void* b = allocate(c.size);
  fill(a, 0, 0, std::min(c.size, 4 * kKiB));
  fill(b, 0, 0, std::min(c.size, 4 * kKiB));
  release(a);
  release(b);
}

void read_after_free(const Case& c) {
  void* p = allocate(c.size);
  fill(p, 0, 0x41, c.size);
  release(p);
  volatile char* v = at(p, static_cast<std::ptrdiff_t>(c.size / 2));
  if (*v == 0x7f) say("misuse: the freed block read 0x7f");  // the read must happen
}

constexpr Size kSizes[] = {kSize16, kSize64, kSize1000, kSize100K, kSize10M, kSize100M};

constexpr Case kCases[] = {
    {"write-after-free-zero-word-64", write_after_free<0, 0>, 64, 8,
     "free(p), a zero word at p, two malloc(64)"},
    {"write-after-free-past-16-64", write_after_free<16, 0x41>, 64, 0,
     "free(p), 0x41 into bytes 16 to 63 of p, two malloc(64)"},
    {"read-after-free-64", read_after_free, 64, 0, "free(p), then a read of p[32]",
     "a read leaves no trace; only freed memory made unreadable (a page a block) would fault"},
    {"read-after-free-100k", read_after_free, 100 * kKiB, 0, "free(p), then a read of p[51200]"},
};

constexpr Grid kGrids[] = {
    {"write-after-free", write_after_free<0, 0x41>, kNoExtents, kSizes, "",
     "free(p), 0x41 over p (4 KiB at most), two malloc of {s}"},
};

}  // namespace

void add_after_free_cases(CaseList& cases) {
  cases.add_grids(kGrids);
  cases.add(kCases);
}

}  // namespace misuse
