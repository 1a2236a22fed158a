// mempool as the process's malloc and operator new. The same tests run in three
// programs: override_preload_test under LD_PRELOAD=libmempool-malloc.so (the binary
// knows nothing of mempool and finds mp_owns with dlsym), override_linked_test linked
// with mempool::override (MEMPOOL_TEST_LINKED), and override_static_test, linked so
// too and fully static (-static, MEMPOOL_TEST_STATIC: no dynamic loader, and glibc's
// malloc not linked at all).
#include <dlfcn.h>
#include <malloc.h>
#include <sys/auxv.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../heap/heap_test_util.hpp"

#ifdef MEMPOOL_TEST_LINKED
#include "mempool/mempool.h"
#endif

extern "C" {
// glibc's own allocator, which stays in the process beside mempool.
void* __libc_malloc(std::size_t n);
void* __libc_memalign(std::size_t alignment, std::size_t n);
void __libc_free(void* p);
}

namespace {

using heap_test::fill_pattern;
using heap_test::first_mismatch;
using heap_test::kNoMismatch;

// mp_owns of the mempool in charge: linked in, or found in the preloaded library.
bool mempool_owns(const void* p) {
#ifdef MEMPOOL_TEST_LINKED
  return mp_owns(p) != 0;
#else
  using Owns = int (*)(const void*);
  static const auto owns = reinterpret_cast<Owns>(::dlsym(RTLD_DEFAULT, "mp_owns"));
  if (owns == nullptr) ADD_FAILURE() << "mp_owns not found: is libmempool-malloc.so preloaded?";
  return owns != nullptr && owns(p) != 0;
#endif
}

// Hides a value from the compiler, which would warn about the absurd sizes and
// bad frees these tests commit on purpose.
template <class T>
T opaque(T value) {
  asm volatile("" : "+r"(value));
  return value;
}

// Under the hardened library (the .hardened variants of these tests): blocks carry a
// canary, so classes and sizes differ, and freed large blocks wait in its guard cache.
bool hardened_library() {
  const char* preload = std::getenv("LD_PRELOAD");
  return preload != nullptr && std::strstr(preload, "hardened") != nullptr;
}

using mempool_test::is_aligned;

TEST(Override, AllocationsGoToMempool) {
  for (std::size_t n : {std::size_t{1}, std::size_t{24}, std::size_t{1000}, std::size_t{70000},
                        std::size_t{1} << 20, std::size_t{32} << 20}) {
    void* p = std::malloc(n);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(mempool_owns(p)) << n;
    EXPECT_GE(malloc_usable_size(p), n);
    std::free(p);
  }
  char* s = ::strdup("made by libc, which calls malloc");  // libc's own call
  EXPECT_TRUE(mempool_owns(s));
  std::free(s);
  auto text = std::make_unique<std::string>(200, 'x');  // libstdc++'s operator new
  EXPECT_TRUE(mempool_owns(text.get()));
  EXPECT_TRUE(mempool_owns(text->data()));
  std::vector<int> v(1000);
  EXPECT_TRUE(mempool_owns(v.data()));
  char stack[16];
  EXPECT_FALSE(mempool_owns(stack));
}

TEST(Override, CFunctionsFollowTheStandard) {
  void* a = std::malloc(0);
  void* b = std::malloc(0);
  EXPECT_TRUE(a != nullptr && b != nullptr && a != b);
  std::free(a);
  std::free(b);
  std::free(nullptr);
  EXPECT_EQ(malloc_usable_size(nullptr), 0u);

  errno = 0;
  EXPECT_EQ(std::malloc(opaque(SIZE_MAX)), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(std::calloc(opaque(SIZE_MAX / 2 + 1), 2), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(::reallocarray(nullptr, opaque(SIZE_MAX / 2 + 1), 2), nullptr);
  EXPECT_EQ(errno, ENOMEM);

  auto* z = static_cast<unsigned char*>(std::calloc(1000, 3));
  ASSERT_NE(z, nullptr);
  for (std::size_t i = 0; i < 3000; ++i)
    ASSERT_EQ(z[i], 0) << i;
  std::free(z);

  // realloc keeps the contents through growth (small to large) and shrinking.
  void* p = std::malloc(100);
  fill_pattern(p, 100, 7);
  for (std::size_t n : {300u, 5000u, 300000u, 50u}) {
    p = std::realloc(p, n);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(first_mismatch(p, std::min<std::size_t>(n, 100), 7), kNoMismatch) << n;
  }
  p = ::reallocarray(p, 10, 20);
  ASSERT_EQ(first_mismatch(p, 50, 7), kNoMismatch);
  std::free(p);

  void* out = &out;
  EXPECT_EQ(::posix_memalign(&out, 24, 10), EINVAL);
  EXPECT_EQ(::posix_memalign(&out, 4, 10), EINVAL);
  EXPECT_EQ(out, &out);  // untouched on failure
  ASSERT_EQ(::posix_memalign(&out, 256, 10), 0);
  EXPECT_TRUE(is_aligned(out, 256));
  std::free(out);
  errno = 0;
  EXPECT_EQ(std::aligned_alloc(3, 12), nullptr);
  EXPECT_EQ(errno, EINVAL);
  void* al = std::aligned_alloc(64, 100);
  EXPECT_TRUE(is_aligned(al, 64) && mempool_owns(al));
  std::free(al);

  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* m = ::memalign(24, 10);  // glibc rounds a non-power of two up: 32
  EXPECT_TRUE(is_aligned(m, 32));
  std::free(m);
  void* va = ::valloc(10);
  EXPECT_TRUE(is_aligned(va, page) && mempool_owns(va));
  std::free(va);
  void* pv = ::pvalloc(1);
  EXPECT_TRUE(is_aligned(pv, page));
  EXPECT_GE(malloc_usable_size(pv), page);
  std::free(pv);
  EXPECT_EQ(::malloc_trim(0), 1);
}

struct alignas(64) Line {
  char bytes[64];
};
struct alignas(4096) Page {
  char bytes[100];
};

TEST(Override, EveryNewAndDeleteForm) {
  auto check = [](void* p, std::size_t alignment) {
    EXPECT_NE(p, nullptr);
    EXPECT_TRUE(is_aligned(p, alignment));
    EXPECT_TRUE(mempool_owns(p));
  };
  int* one = new int(5);
  check(one, alignof(int));
  delete one;  // sized delete (C++14) where the compiler uses it
  ::operator delete(::operator new(40));
  ::operator delete(::operator new(40), 40);
  ::operator delete[](::operator new[](40));
  ::operator delete[](::operator new[](40), 40);
  void* nt = ::operator new(40, std::nothrow);
  check(nt, 16);
  ::operator delete(nt, std::nothrow);
  void* nta = ::operator new[](40, std::nothrow);
  check(nta, 16);
  ::operator delete[](nta, std::nothrow);
  for (auto al : {std::align_val_t{32}, std::align_val_t{64}, std::align_val_t{4096},
                  std::align_val_t{1 << 16}}) {
    const auto a = static_cast<std::size_t>(al);
    void* p = ::operator new(100, al);
    check(p, a);
    ::operator delete(p, al);
    p = ::operator new[](100, al);
    check(p, a);
    ::operator delete[](p, al);
    p = ::operator new(100, al);
    ::operator delete(p, 100, al);
    p = ::operator new[](100, al);
    ::operator delete[](p, 100, al);
    p = ::operator new(100, al, std::nothrow);
    check(p, a);
    ::operator delete(p, al, std::nothrow);
    p = ::operator new[](100, al, std::nothrow);
    check(p, a);
    ::operator delete[](p, al, std::nothrow);
  }
  auto* line = new Line[3];
  check(line, 64);
  delete[] line;
  auto* page = new Page;
  check(page, 4096);
  delete page;
}

std::atomic<int> g_handler_calls{0};

TEST(Override, NewLoopsOnTheNewHandler) {
  constexpr std::size_t kAbsurd = std::size_t{1} << 60;
  EXPECT_THROW((void)::operator new(kAbsurd), std::bad_alloc);
  EXPECT_THROW((void)::operator new[](kAbsurd, std::align_val_t{64}), std::bad_alloc);
  EXPECT_EQ(::operator new(kAbsurd, std::nothrow), nullptr);
  EXPECT_EQ(::operator new[](kAbsurd, std::align_val_t{64}, std::nothrow), nullptr);

  // A handler that gives up on its third call: new retries until then.
  g_handler_calls = 0;
  std::set_new_handler([] {
    if (++g_handler_calls == 3) std::set_new_handler(nullptr);
  });
  EXPECT_THROW((void)::operator new(kAbsurd), std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 3);
  // A handler that throws: the nothrow form answers nullptr.
  g_handler_calls = 0;
  std::set_new_handler([] {
    ++g_handler_calls;
    throw std::bad_alloc();
  });
  EXPECT_EQ(::operator new(kAbsurd, std::nothrow), nullptr);
  EXPECT_EQ(g_handler_calls, 1);
  std::set_new_handler(nullptr);
}

// 16 threads in 4 rounds (thread churn); each allocates blocks of many sizes
// with malloc and new, writes a pattern, and passes half of them to the others
// through a shared queue; whoever takes a block checks its pattern, then frees it.
TEST(Override, ThreadsWithCrossThreadFreesAndChurn) {
  struct Block {
    unsigned char* p;
    std::size_t n;
    std::uint64_t seed;
    bool from_new;
  };
  mempool_test::HandOff<Block> shared;
  std::atomic<int> bad{0};
  auto release = [&](const Block& b) {
    if (first_mismatch(b.p, b.n, b.seed) != kNoMismatch) ++bad;
    if (b.from_new) {
      delete[] b.p;
    } else {
      std::free(b.p);
    }
  };
  for (int round = 0; round < 4; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t, round] {
        std::mt19937_64 rng(static_cast<std::uint64_t>(round * 100 + t));
        std::vector<Block> mine;
        for (int i = 0; i < 3000; ++i) {
          const std::size_t n = rng() % 8 == 0 ? rng() % 70000 + 1 : rng() % 512 + 1;
          const bool from_new = (rng() & 1) != 0;
          auto* p = from_new ? new unsigned char[n] : static_cast<unsigned char*>(std::malloc(n));
          const Block b{p, n, rng(), from_new};
          fill_pattern(b.p, b.n, b.seed);
          if ((i & 1) != 0) {
            shared.put(b);
          } else {
            mine.push_back(b);
          }
          if (mine.size() > 64 || i % 7 == 0) {
            if (const std::optional<Block> other = shared.try_take()) release(*other);
            if (!mine.empty()) {
              release(mine.back());
              mine.pop_back();
            }
          }
        }
        for (const Block& b : mine)
          release(b);
      });
    }
    for (std::thread& t : threads)
      t.join();
  }
  for (const Block& b : shared.drain())
    release(b);
  EXPECT_EQ(bad, 0);
}

// fork while other threads allocate: the child allocates (also from a new
// thread), execs a shell under the same malloc, and the parent goes on.
TEST(Override, ForkWhileThreadsAllocate) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&stop, t] {
      std::vector<std::string> keep;
      for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        keep.emplace_back(16 + (i * 7 + t) % 300, 'a');
        if (keep.size() > 100) keep.erase(keep.begin(), keep.begin() + 50);
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::map<int, std::string> m;
      for (int k = 0; k < 2000; ++k)
        m[k] = std::string(static_cast<std::size_t>(k % 200), 'c');
      std::thread([&m] { m.clear(); }).join();
      void* big = std::malloc(std::size_t{1} << 20);
      std::free(big);
      if (i % 5 == 0) ::execl("/bin/sh", "sh", "-c", "exit 3", static_cast<char*>(nullptr));
      CHILD_CHECK(m.empty(), "child %d: %zu entries left after clear() on another thread", i,
                  m.size());
      CHILD_CHECK(big != nullptr, "child %d: malloc(1 MiB) failed", i);
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child " << i << " died, status " << status;
    EXPECT_EQ(WEXITSTATUS(status), i % 5 == 0 ? 3 : 0) << "child " << i;
  }
  stop = true;
  for (std::thread& t : workers)
    t.join();
}

#ifndef MEMPOOL_TEST_STATIC  // a static program loads no library, and has no glibc heap
// Blocks cross the boundary of a library loaded and unloaded 50 times.
TEST(Override, DlopenedLibraryAllocatesAcrossTheBoundary) {
  for (int i = 0; i < 50; ++i) {
    void* lib = ::dlopen(MEMPOOL_TEST_DLOPEN_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib, nullptr) << ::dlerror();
    auto new_bytes =
        reinterpret_cast<char* (*)(std::size_t, char)>(::dlsym(lib, "library_new_bytes"));
    auto dup = reinterpret_cast<char* (*)(const char*)>(::dlsym(lib, "library_strdup"));
    auto check_and_free = reinterpret_cast<bool (*)(char*, std::size_t, char)>(
        ::dlsym(lib, "library_check_and_free"));
    ASSERT_TRUE(new_bytes != nullptr && dup != nullptr && check_and_free != nullptr);
    char* a = new_bytes(300, 'q');
    EXPECT_TRUE(mempool_owns(a));
    EXPECT_EQ(a[299], 'q');
    delete[] a;
    char* s = dup("across");
    EXPECT_STREQ(s, "across");
    std::free(s);
    auto* mine = static_cast<char*>(std::malloc(5000));
    std::memset(mine, 'z', 5000);
    EXPECT_TRUE(check_and_free(mine, 5000, 'z'));
    ASSERT_EQ(::dlclose(lib), 0);
  }
}

// Blocks that glibc's malloc handed out (as to the dynamic loader, before
// mempool was there) go back to glibc: free, realloc and malloc_usable_size
// take them.
TEST(Override, SystemAllocatorBlocksGoBackToIt) {
  void* small = __libc_malloc(100);
  ASSERT_NE(small, nullptr);
  EXPECT_FALSE(mempool_owns(small));
  EXPECT_GE(malloc_usable_size(small), 100u);
  std::free(small);
  // glibc reuses the chunk it got back: proof that it really went home.
  void* again = __libc_malloc(100);
  EXPECT_EQ(again, small);
  __libc_free(again);

  void* mapped = __libc_malloc(std::size_t{4} << 20);  // glibc maps this one itself
  ASSERT_NE(mapped, nullptr);
  EXPECT_GE(malloc_usable_size(mapped), std::size_t{4} << 20);
  std::free(mapped);

  void* aligned_block = __libc_memalign(256, 1000);
  std::free(aligned_block);

  auto* moved = static_cast<unsigned char*>(__libc_malloc(300));
  fill_pattern(moved, 300, 11);
  moved = static_cast<unsigned char*>(std::realloc(moved, 5000));
  ASSERT_NE(moved, nullptr);
  EXPECT_TRUE(mempool_owns(moved));  // realloc moves it over to mempool
  EXPECT_EQ(first_mismatch(moved, 300, 11), kNoMismatch);
  std::free(moved);
}
#endif

// mallopt is mempool's, beside malloc: glibc's tunes an arena nobody allocates from, and
// a static link of it would bring glibc's whole malloc. Accepted and ignored; blocks stay
// mempool's. (And override_static_test is what it claims: no dynamic loader.)
TEST(Override, MalloptIsAcceptedAndIgnored) {
#ifdef MEMPOOL_TEST_STATIC
  EXPECT_EQ(::getauxval(AT_BASE), 0u);
#else
  Dl_info of_mallopt{};
  Dl_info of_malloc{};
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(&mallopt), &of_mallopt), 0);
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(&malloc), &of_malloc), 0);
  EXPECT_STREQ(of_mallopt.dli_fname, of_malloc.dli_fname);
#endif
  EXPECT_EQ(mallopt(M_MMAP_THRESHOLD, 0), 1);
  EXPECT_EQ(mallopt(M_ARENA_MAX, 1), 1);
  void* p = std::malloc(std::size_t{1} << 20);
  EXPECT_TRUE(mempool_owns(p));
  std::free(p);
}

// ---- What tools ask: mallinfo2, mallinfo, malloc_info, malloc_stats -----------

// mallinfo2 answers from mempool's statistics, not glibc's unused arena: blocks in
// the heap's arena grow uordblks by at least their size, a huge block (a mapping of
// its own) hblks and hblkhd; frees take them back; arena = uordblks + fordblks.
TEST(Override, MallinfoAnswersFromMempool) {
  if (hardened_library())
    GTEST_SKIP() << "the hardened library counts a freed large block in use while it waits in "
                    "its guard cache (not yet reflected in mallinfo2)";
  std::vector<void*> small;
  small.reserve(1000);
  const struct mallinfo2 before = ::mallinfo2();
  EXPECT_EQ(before.arena, before.uordblks + before.fordblks);
  for (int i = 0; i < 1000; ++i)
    small.push_back(opaque(std::malloc(100)));
  void* large = opaque(std::malloc(std::size_t{3} << 20));  // kept: no malloc/free elision
  const struct mallinfo2 during = ::mallinfo2();
  EXPECT_GE(during.uordblks, before.uordblks + 1000 * 100 + (std::size_t{3} << 20));
  EXPECT_EQ(during.arena, during.uordblks + during.fordblks);
  EXPECT_GE(during.usmblks, during.arena + during.hblkhd) << "the peak of what was mapped";
  for (void* p : small)
    std::free(p);
  std::free(large);
  const struct mallinfo2 after = ::mallinfo2();
  EXPECT_LE(after.uordblks + 1000 * 100 + (std::size_t{3} << 20), during.uordblks);
  EXPECT_EQ(after.arena, after.uordblks + after.fordblks);
  EXPECT_GT(after.smblks, 0u) << "the freed small blocks are cached";
  EXPECT_GE(after.fsmblks, after.smblks * 8);
  EXPECT_GE(after.keepcost, std::size_t{3} << 20) << "the freed 3 MiB stay resident, free";
  EXPECT_GE(after.fordblks, after.fsmblks + after.keepcost);

  void* huge = opaque(std::malloc(std::size_t{80} << 20));  // a mapping of its own, untouched
  ASSERT_NE(huge, nullptr);
  const struct mallinfo2 mapped = ::mallinfo2();
  EXPECT_EQ(mapped.hblks, after.hblks + 1);
  EXPECT_GE(mapped.hblkhd, after.hblkhd + (std::size_t{80} << 20));
  EXPECT_EQ(mapped.uordblks, after.uordblks) << "direct mappings are hblkhd, not uordblks";
  std::free(huge);
  const struct mallinfo2 unmapped = ::mallinfo2();
  EXPECT_EQ(unmapped.hblks, after.hblks);
  EXPECT_EQ(unmapped.hblkhd, after.hblkhd);
}

// mallinfo's int fields: the same numbers, saturated at INT_MAX (3 GiB, untouched).
TEST(Override, MallinfoSaturatesToInt) {
  void* huge = opaque(std::malloc(std::size_t{3} << 30));
  ASSERT_NE(huge, nullptr);
  const struct mallinfo2 wide = ::mallinfo2();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const struct mallinfo narrow = ::mallinfo();
#pragma GCC diagnostic pop
  auto saturated = [](std::size_t v) {
    return v > static_cast<std::size_t>(INT_MAX) ? INT_MAX : static_cast<int>(v);
  };
  EXPECT_GE(wide.hblkhd, std::size_t{3} << 30);
  EXPECT_EQ(narrow.hblkhd, INT_MAX);
  EXPECT_EQ(narrow.hblks, saturated(wide.hblks));
  EXPECT_EQ(narrow.arena, saturated(wide.arena));
  EXPECT_EQ(narrow.uordblks, saturated(wide.uordblks));
  EXPECT_EQ(narrow.fordblks, saturated(wide.fordblks));
  EXPECT_EQ(narrow.usmblks, saturated(wide.usmblks));
  EXPECT_EQ(narrow.keepcost, saturated(wide.keepcost));
  std::free(huge);
}

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attributes;
};

// Checks that `xml` is well-formed (one root; tags that nest and close; attributes
// name="value" with no '<', '&' or '"' in a value; only white space between tags)
// and collects its elements in document order. "" when it is, else the problem.
std::string parse_xml(const std::string& xml, std::vector<XmlElement>* elements) {
  auto is_name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_';
  };
  std::vector<std::string> open;
  int roots = 0;
  for (std::size_t i = 0; i < xml.size();) {
    if (xml[i] != '<') {
      if (std::isspace(static_cast<unsigned char>(xml[i])) == 0)
        return "text outside a tag at " + std::to_string(i);
      ++i;
      continue;
    }
    const std::size_t end = xml.find('>', i);
    if (end == std::string::npos) return "a tag without '>' at " + std::to_string(i);
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (!tag.empty() && tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1))
        return "</" + tag.substr(1) + "> closes nothing";
      open.pop_back();
      continue;
    }
    const bool empty_element = !tag.empty() && tag.back() == '/';
    if (empty_element) tag.pop_back();
    std::size_t k = 0;
    while (k < tag.size() && is_name_char(tag[k]))
      ++k;
    if (k == 0 || std::isalpha(static_cast<unsigned char>(tag[0])) == 0)
      return "bad tag <" + tag + ">";
    XmlElement e{tag.substr(0, k), {}};
    while (k < tag.size()) {
      if (tag[k] != ' ') return "no space before an attribute in <" + tag + ">";
      const std::size_t name_at = ++k;
      while (k < tag.size() && is_name_char(tag[k]))
        ++k;
      if (k == name_at || tag.compare(k, 2, "=\"") != 0) return "bad attribute in <" + tag + ">";
      const std::size_t value_at = k + 2;
      const std::size_t quote = tag.find('"', value_at);
      if (quote == std::string::npos) return "unterminated value in <" + tag + ">";
      const std::string value = tag.substr(value_at, quote - value_at);
      if (value.find_first_of("<&") != std::string::npos) return "bad value in <" + tag + ">";
      if (!e.attributes.emplace(tag.substr(name_at, k - name_at), value).second)
        return "repeated attribute in <" + tag + ">";
      k = quote + 1;
    }
    if (open.empty() && ++roots > 1) return "a second root <" + e.name + ">";
    if (!empty_element) open.push_back(e.name);
    elements->push_back(std::move(e));
  }
  if (!open.empty()) return "<" + open.back() + "> is not closed";
  return roots == 1 ? "" : "no root element";
}

std::string read_all(std::FILE* f) {
  std::string text;
  std::rewind(f);
  char buf[4096];
  std::size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0)
    text.append(buf, got);
  return text;
}

// glibc's document, with mempool's numbers: well-formed, the totals, a class per
// size in use, the identity of HeapStats in <mempool>; options other than 0 are
// EINVAL and write nothing.
TEST(Override, MallocInfoWritesWellFormedXml) {
  if (hardened_library())
    GTEST_SKIP() << "the hardened library's usable size is the size asked for, not the class's";
  void* p = opaque(std::malloc(5000));
  const std::size_t size = malloc_usable_size(p);
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(::malloc_info(0, f), 0);
  const std::string xml = read_all(f);
  std::fclose(f);
  std::vector<XmlElement> elements;
  ASSERT_EQ(parse_xml(xml, &elements), "") << xml;
  EXPECT_EQ(xml.rfind("<malloc version=\"1\" allocator=\"mempool\"", 0), 0u) << xml;
  auto find = [&](const std::string& name, const std::string& key, const std::string& value) {
    for (const XmlElement& e : elements) {
      if (e.name != name) continue;
      const auto it = e.attributes.find(key);
      if (key.empty() || (it != e.attributes.end() && it->second == value)) return &e;
    }
    return static_cast<const XmlElement*>(nullptr);
  };
  for (const char* type : {"fast", "rest", "mmap"})
    EXPECT_NE(find("total", "type", type), nullptr) << type << "\n" << xml;
  EXPECT_NE(find("heap", "nr", "0"), nullptr);
  EXPECT_NE(find("system", "type", "current"), nullptr);
  EXPECT_NE(find("aspace", "type", "total"), nullptr);
  const XmlElement* mine = find("class", "size", std::to_string(size));
  ASSERT_NE(mine, nullptr) << "no class of " << size << " bytes\n" << xml;
  EXPECT_GE(std::stoull(mine->attributes.at("in-use")), 1u);
  const XmlElement* totals = find("mempool", "", "");
  ASSERT_NE(totals, nullptr) << xml;
  auto number = [&](const char* key) { return std::stoull(totals->attributes.at(key)); };
  EXPECT_EQ(number("mapped"), number("in-use") + number("thread-caches") + number("central-cache") +
                                  number("page-heap-free") + number("returned-to-os") +
                                  number("span-tails"))
      << xml;
  EXPECT_EQ(number("resident"), number("mapped") - number("returned-to-os"));
  EXPECT_GE(number("in-use"), size);
  std::free(p);

  std::FILE* g = std::tmpfile();
  ASSERT_NE(g, nullptr);
  errno = 0;
  EXPECT_EQ(::malloc_info(1, g), EINVAL);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(std::ftell(g), 0) << "malloc_info(1, ...) wrote something";
  std::fclose(g);
}

// malloc_stats prints mempool's table on stderr (descriptor 2, captured here).
TEST(Override, MallocStatsPrintsMempoolsTable) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_GE(::dup2(::fileno(f), STDERR_FILENO), 0);
  ::malloc_stats();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  const std::string text = read_all(f);
  std::fclose(f);
  for (const char* line : {"mempool heap statistics\n  in use", "\n  thread caches ",
                           "\n  = mapped ", "\n  memory limit ", "class size"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " missing in\n" << text;
}

// realloc keeps a small block for any size from just over half of it to all of it (a
// string grown past its block and trimmed back moves once), and moves it otherwise.
TEST(Override, ReallocKeepsASmallBlockFromHalfToFull) {
  if (hardened_library()) GTEST_SKIP() << "the hardened library keeps a block in its class only";
  auto* p = static_cast<unsigned char*>(std::malloc(opaque(std::size_t{100})));
  ASSERT_NE(p, nullptr);
  for (std::size_t i = 0; i < 100; ++i)
    p[i] = static_cast<unsigned char>(i);
  auto* grown = static_cast<unsigned char*>(std::realloc(p, opaque(std::size_t{116})));
  ASSERT_NE(grown, nullptr);
  const std::size_t usable = ::malloc_usable_size(grown);
  ASSERT_GE(usable, 116u);
  grown[115] = 7;
  for (const std::size_t n : {std::size_t{100}, usable, usable / 2 + 1, std::size_t{116}}) {
    auto* q = static_cast<unsigned char*>(std::realloc(grown, opaque(n)));
    EXPECT_EQ(q, grown) << n << " bytes of a " << usable << "-byte block: kept in place";
    grown = q;
  }
  EXPECT_EQ(grown[115], 7);
  auto* halved = static_cast<unsigned char*>(std::realloc(grown, opaque(usable / 2)));
  ASSERT_NE(halved, nullptr);
  EXPECT_NE(halved, grown) << usable / 2 << " bytes of a " << usable << "-byte block: moved";
  EXPECT_LT(::malloc_usable_size(halved), usable);
  for (std::size_t i = 0; i < usable / 2 && i < 100; ++i)
    ASSERT_EQ(halved[i], static_cast<unsigned char>(i)) << i;
  std::free(halved);
}

// realloc of a freed block to a size it could keep in place, in another class: the move
// that the class change asks for finds it free (the hardened library names it itself; the
// checked build stops it when the move frees the old block).
TEST(OverrideDeathTest, ReallocAfterFreeIntoAnotherClassIsADoubleFree) {
  EXPECT_DEATH(
      {
        void* p = std::malloc(opaque(std::size_t{128}));
        std::free(p);
        std::free(std::realloc(opaque(p), opaque(std::size_t{100})));
      },
      "mempool: heap: (double free|realloc of a free block|free of a block that is not "
      "allocated \\(double free\\?\\))");
}

TEST(OverrideDeathTest, ForeignPointersStopWithOneLine) {
  alignas(16) static char not_a_block[64] = {};
  EXPECT_DEATH(std::free(opaque(not_a_block + 16)),
               "mempool: heap: free of a pointer not allocated by the mempool heap \\(pointer "
               "0x[0-9a-f]+\\)");
  EXPECT_DEATH(std::free(std::realloc(opaque(not_a_block + 16), 10)),
               "mempool: heap: realloc of a pointer not allocated by mempool or glibc");
  auto* block = static_cast<char*>(std::malloc(64));
  EXPECT_DEATH(std::free(opaque(block + 8)),
               "mempool: heap: free of a pointer into the middle of a block");
  std::free(block);
}

// Frees in exit handlers and in thread-exit destructors, after the thread's
// cache is gone: the process exits cleanly.
TEST(OverrideDeathTest, FreesAtThreadAndProcessExit) {
  EXPECT_EXIT(
      {
        static char* at_exit_block = nullptr;
        at_exit_block = static_cast<char*>(std::malloc(100));
        std::atexit([] { std::free(at_exit_block); });
        std::thread([] {
          thread_local std::unique_ptr<std::string> late(new std::string(500, 'l'));
          late->push_back('!');
        }).join();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// Teardown order, in a child process: after the test body ends the process with
// exit(0), the main thread's thread_local destructors run, then the atexit handlers and
// static destructors, while two threads go on allocating and freeing; each of those
// allocates from mempool (mp_owns), writes and checks a pattern, reallocates and frees,
// and says so on stderr. The process exits 0 and every step said "ok".
struct TeardownWork {
  const char* who;
  ~TeardownWork() { run(who); }
  static void run(const char* who) {
    bool ok = true;
    for (std::size_t n : {std::size_t{24}, std::size_t{3000}, std::size_t{300000}}) {
      auto* p = static_cast<unsigned char*>(std::malloc(n));
      ok = ok && p != nullptr && mempool_owns(p);
      if (p == nullptr) break;
      fill_pattern(p, n, n);
      p = static_cast<unsigned char*>(std::realloc(p, 2 * n));
      ok = ok && p != nullptr && first_mismatch(p, n, n) == kNoMismatch;
      std::free(p);
      auto* s = new std::string(n, 'x');
      ok = ok && mempool_owns(s->data()) && (*s)[n - 1] == 'x';
      delete s;
    }
    mempool_test::say("teardown: %s %s", who, ok ? "ok" : "FAILED");
  }
};

[[noreturn]] void exit_while_threads_run() {
  static TeardownWork at_static_destruction{"static destructor"};
  thread_local TeardownWork main_thread_local{"main thread_local"};
  (void)main_thread_local.who;  // constructed here, destroyed by exit()
  std::atexit([] { TeardownWork::run("atexit handler"); });
  std::atomic<int> started{0};
  for (int t = 0; t < 2; ++t) {
    std::thread([&started] {
      thread_local TeardownWork never{"running thread's thread_local"};  // never destroyed
      started.fetch_add(1);
      std::vector<void*> held;
      for (std::uint64_t i = 0;; ++i) {  // until the process ends
        held.push_back(std::malloc(16 + i % 4000));
        if (held.size() > 100) {
          std::free(held.front());
          held.erase(held.begin());
        }
      }
    }).detach();
  }
  while (started.load() < 2)
    std::this_thread::yield();
  std::exit(0);
}

TEST(OverrideDeathTest, AllocatesAndFreesDuringTeardownWhileThreadsRun) {
  EXPECT_EXIT(exit_while_threads_run(), ::testing::ExitedWithCode(0),
              "teardown: main thread_local ok\n(.|\n)*teardown: atexit handler ok\n(.|\n)*"
              "teardown: static destructor ok\n");
}

}  // namespace
