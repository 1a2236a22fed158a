// mempool as the process's malloc and operator new. The same tests run twice:
// override_preload_test under LD_PRELOAD=libmempool-malloc.so (the binary knows
// nothing of mempool and finds mp_owns with dlsym), and override_linked_test
// linked with mempool::override (MEMPOOL_TEST_LINKED).
#include <dlfcn.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
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

bool aligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

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
  EXPECT_TRUE(aligned(out, 256));
  std::free(out);
  errno = 0;
  EXPECT_EQ(std::aligned_alloc(3, 12), nullptr);
  EXPECT_EQ(errno, EINVAL);
  void* al = std::aligned_alloc(64, 100);
  EXPECT_TRUE(aligned(al, 64) && mempool_owns(al));
  std::free(al);

  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* m = ::memalign(24, 10);  // glibc rounds a non-power of two up: 32
  EXPECT_TRUE(aligned(m, 32));
  std::free(m);
  void* va = ::valloc(10);
  EXPECT_TRUE(aligned(va, page) && mempool_owns(va));
  std::free(va);
  void* pv = ::pvalloc(1);
  EXPECT_TRUE(aligned(pv, page));
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
    EXPECT_TRUE(aligned(p, alignment));
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
  std::mutex mutex;
  std::deque<Block> shared;
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
            std::lock_guard<std::mutex> lock(mutex);
            shared.push_back(b);
          } else {
            mine.push_back(b);
          }
          if (mine.size() > 64 || i % 7 == 0) {
            Block other{};
            {
              std::lock_guard<std::mutex> lock(mutex);
              if (!shared.empty()) {
                other = shared.front();
                shared.pop_front();
              }
            }
            if (other.p != nullptr) release(other);
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
  for (const Block& b : shared)
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
      ::_exit(m.empty() && big != nullptr ? 0 : 1);
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

}  // namespace
