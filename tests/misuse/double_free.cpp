// Double frees: at once, later, interleaved with another block's, through
// delete, from two threads, and the one no allocator can see (the block was
// handed out again in between).
#include <cstdlib>
#include <thread>

#include "misuse.hpp"

namespace misuse {

namespace {

void immediate(const Case& c) {
  void* p = allocate(c.size);
  release(p);
  release(p);
}

void delayed(const Case& c) {
  void* p = allocate(c.size);
  release(p);
  churn_other_sizes(c.size);
  release(p);
}

void interleaved(const Case& c) {
  void* a = allocate(c.size);
  void* b = allocate(c.size);
  release(a);
  release(b);
  release(a);
}

// The first free on another thread (which then exits), the second on this one.
void cross_thread(const Case& c) {
  void* p = allocate(c.size);
  std::thread([p] { release(p); }).join();
  release(p);
}

// The second free comes when the block is live again: to the allocator it is
// the new owner's valid free.
void after_reuse(const Case& c) {
  void* p = allocate(c.size);
  release(p);
  void* q = nullptr;
  for (int i = 0; i < 64 && q != p; ++i)
    q = allocate(c.size);
  if (q != p) setup_failed("the block did not come back in 64 allocations");
  release(p);
}

// realloc(p, 0) frees p (glibc and mempool return NULL), then free(p).
void realloc_zero_then_free(const Case& c) {
  void* p = allocate(c.size);
  if (reallocate(p, 0) != nullptr) setup_failed("realloc(p, 0) returned a block");
  release(p);
}

struct Widget {
  long value[4] = {1, 2, 3, 4};
};

void delete_twice(const Case& /*c*/) {
  Widget* w = opaque(new Widget);
  delete w;
  delete opaque(w);
}

void delete_array_twice(const Case& c) {
  char* a = opaque(new char[c.size]);
  delete[] a;
  delete[] opaque(a);
}

constexpr Size kSizes[] = {kSize16, kSize64, kSize1000, kSize100K, kSize10M, kSize100M};
constexpr std::span<const Size> kUpTo10M(kSizes, 5);
constexpr Size k64And100K[] = {kSize64, kSize100K};

constexpr Case kOthers[] = {
    {"double-free-after-reuse-64", after_reuse, 64, 0,
     "free(p), malloc gives p again, free(p): the new owner's block is freed",
     "the block is allocated again when the second free comes: it is a valid free of the new "
     "owner's block"},
    {"double-free-realloc-zero-64", realloc_zero_then_free, 64, 0,
     "realloc(p, 0) frees p, then free(p)"},
    {"double-free-delete", delete_twice, 0, 0, "delete of a 32-byte object twice (sized delete)"},
    {"double-free-delete-array", delete_array_twice, 100, 0, "delete[] of a char[100] twice"},
};

constexpr Grid kGrids[] = {
    {"double-free-immediate", immediate, kNoExtents, kSizes, "", "free(p) twice in a row, {s}"},
    {"double-free-delayed", delayed, kNoExtents, kUpTo10M, "",
     "free(p), other sizes come and go, free(p); {s}"},
    {"double-free-interleaved", interleaved, kNoExtents, kUpTo10M, "",
     "free(a), free(b), free(a); {s}"},
    {"double-free-cross-thread", cross_thread, kNoExtents, k64And100K, "",
     "free(p) on a thread that then exits, free(p) on the main thread; {s}"},
};

}  // namespace

void add_double_free_cases(CaseList& cases) {
  cases.add_grids(kGrids);
  cases.add(kOthers);
}

}  // namespace misuse
