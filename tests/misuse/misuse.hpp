// The misuse suite (docs/misuse.md): one misuse of the C and C++ allocation
// functions a case, each run as a process of its own by run_misuse.py, plain
// (glibc) or with a drop-in malloc in LD_PRELOAD. The program links nothing of
// mempool.
//
// What the runner reads: a case that returns made nothing stop it, and main
// prints "misuse: reached end"; a case that sees an allocation function refuse
// (NULL, EINVAL, std::bad_alloc) prints "misuse: error-return: <what>" and
// exits 0; otherwise the process dies (the allocator's message is on stderr).
// Output goes through write(2), never stdio, which allocates.
#pragma once

#include <cstddef>
#include <span>

namespace misuse {

inline constexpr std::size_t kKiB = 1024;
inline constexpr std::size_t kMiB = 1024 * kKiB;

struct Case {
  const char* name;
  void (*run)(const Case&);
  std::size_t size;    // the block's size, where the case has one
  std::size_t extent;  // how far it writes or points away, where it has one
  const char* what;    // one line for --list and docs/misuse.md
  // Why no allocator can see this misuse (a valid-looking call, or no call at
  // all), where that is so: run_misuse.py --table prints it below the table.
  const char* out_of_reach = nullptr;
};

// A size or a distance as a case's name has it ("100k") and as its description
// does ("100 KiB").
struct Size {
  const char* label;
  std::size_t bytes;
  const char* text;
};

inline constexpr Size kSize16{"16", 16, "16 B"};
inline constexpr Size kSize24{"24", 24, "24 B"};
inline constexpr Size kSize64{"64", 64, "64 B"};
inline constexpr Size kSize1000{"1000", 1000, "1000 B"};
inline constexpr Size kSize100K{"100k", 100 * kKiB, "100 KiB"};
inline constexpr Size kSize10M{"10m", 10 * kMiB, "10 MiB"};
inline constexpr Size kSize100M{"100m", 100 * kMiB, "100 MiB"};

// The cases that differ only by size (and extent): one for each extent and
// size, named "<prefix>-<extent label>-<size label><suffix>" ("<prefix>-<size
// label><suffix>" without extents), doing `what`, in which "{e}" and "{s}"
// stand for the extent's and the size's text.
struct Grid {
  const char* prefix;
  void (*run)(const Case&);
  std::span<const Size> extents;
  std::span<const Size> sizes;
  const char* suffix;
  const char* what;
};
inline constexpr std::span<const Size> kNoExtents;
// Every case, in static storage, as are their names and descriptions: a case's
// wild writes into the heap cannot reach them, and the heap holds nothing of the
// program's own when a case starts.
class CaseList {
 public:
  void begin_group(const char* name) { group_ = name; }
  void add(std::span<const Case> more);
  void add_grids(std::span<const Grid> grids);
  std::size_t size() const { return count_; }
  const Case& operator[](std::size_t i) const { return cases_[i]; }
  const char* group(std::size_t i) const { return groups_[i]; }

 private:
  void push(const Case& c);
  // Appends text to the storage, with "{e}" and "{s}" replaced; finish() ends
  // the string made since the last finish() and returns it.
  void append(const char* text, const char* e = "", const char* s = "");
  const char* finish();

  static constexpr std::size_t kMaxCases = 256;
  Case cases_[kMaxCases] = {};
  const char* groups_[kMaxCases] = {};
  std::size_t count_ = 0;
  const char* group_ = "";
  char text_[32 * 1024] = {};
  std::size_t used_ = 0;
  std::size_t start_ = 0;
};

// Each file's cases, added in the order of the table.
void add_double_free_cases(CaseList& cases);
void add_bad_pointer_cases(CaseList& cases);
void add_overflow_cases(CaseList& cases);
void add_after_free_cases(CaseList& cases);
void add_mismatch_cases(CaseList& cases);
void add_realloc_cases(CaseList& cases);  // and malloc_usable_size
void add_refused_cases(CaseList& cases);

// Hides a value from the optimizer: it can neither fold a free of a pointer it
// knows is on the stack, nor pair a malloc with its free, nor warn about either.
template <class T>
T opaque(T value) {
  asm volatile("" : "+r"(value));
  return value;
}

// How far into a zeroed array the cases put pointers to the stack or to data,
// so that what glibc reads as the chunk header before them is the same in every
// run and build.
inline constexpr std::ptrdiff_t kPastZeroes = 16;

// malloc, free and realloc, called so that the compiler keeps every call.
// allocate zeroes the block's first 4 KiB, as a program writes its data (and
// so that what glibc reads in a block as a header is the same in every run).
void* allocate(std::size_t n);  // a NULL answer is a broken setup: exit 2
void release(void* p);
void* reallocate(void* p, std::size_t n);
// memset of [p + offset, p + offset + n) that the compiler keeps, offset may be
// negative (underflows).
void fill(void* p, std::ptrdiff_t offset, int byte, std::size_t n);
// The same, except that a byte already holding `byte` gets its complement: every
// byte changes. A write that changes nothing cannot be caught, and what lies past
// a block (a random canary, an encoded link) holds `byte` by chance 1 time in 256.
void overwrite(void* p, std::ptrdiff_t offset, int byte, std::size_t n);
char* at(void* p, std::ptrdiff_t offset);

// Allocations and frees of sizes other than n, from 40 bytes to 2 MiB, so that
// the caches and free lists move on.
void churn_other_sizes(std::size_t n);

void say(const char* line);
// "misuse: error-return: <what>" (and " <error's name>" with error, an errno
// value), then exit 0.
[[noreturn]] void error_return(const char* what);
[[noreturn]] void error_return(const char* what, int error);
[[noreturn]] void setup_failed(const char* what);

}  // namespace misuse
