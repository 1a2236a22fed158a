// The leak check (src/heap/leak_check.cpp) through the heap's own API, in every preset
// (tests/leak/ runs it as the process's malloc, beside LeakSanitizer): what it reports
// and what it does not, with threads stopped and scanned, across fork(), its exit status,
// and misuse reports that name the stacks. Each test runs in a fresh process with
// MEMPOOL_LEAK_CHECK=1 set before the heap starts. This program's own malloc is glibc's,
// whose memory the check does not scan: the tests keep mempool's blocks in globals, on
// stacks and in mempool's blocks only.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "support/test_support.hpp"

namespace {

// A pointer the check cannot see: kept inverted, so that the test can still free it.
constexpr std::uintptr_t kHidden = ~std::uintptr_t{0};
std::uintptr_t hide(void* p) {
  return reinterpret_cast<std::uintptr_t>(p) ^ kHidden;
}
void* reveal(std::uintptr_t h) {
  return reinterpret_cast<void*>(h ^ kHidden);  // NOLINT(performance-no-int-to-ptr)
}

// Overwrites the dead stack below the caller, and so the copies of a hidden pointer that
// calls left there (a conservative scan would take them for references). Not
// instrumented: AddressSanitizer puts redzones around the array, which the loop would
// not overwrite (at -O1 one held a list node's address that a call had saved there).
__attribute__((noinline, no_sanitize_address)) void scrub_stack() {
  volatile char bytes[32 * 1024];
  for (std::size_t i = 0; i < sizeof bytes; ++i)
    bytes[i] = 0;
}

void* volatile g_kept = nullptr;
void* volatile g_first = nullptr;

void start_check(const char* exit_code) {
  ::setenv("MEMPOOL_LEAK_CHECK", "1", 1);                 // NOLINT(concurrency-mt-unsafe)
  ::setenv("MEMPOOL_LEAK_CHECK_EXITCODE", exit_code, 1);  // NOLINT(concurrency-mt-unsafe)
  // The heap starts, and reads them. The block is kept: freed, its address would be the
  // next block's, and a stale copy of it on this stack would keep that one.
  g_first = mp_malloc(1);
}

}  // namespace

// Extern "C" and never inlined: the report names them (the program exports its symbols).
extern "C" {
__attribute__((noipa)) std::uintptr_t leak_check_lost_block(std::size_t n) {
  return hide(mp_malloc(n));
}
// A block of 40 bytes grown to 48 in place, then lost.
__attribute__((noipa)) std::uintptr_t leak_check_lost_grown_block(bool* moved) {
  void* p = mp_malloc(40);
  void* q = mp_realloc(p, 48);
  *moved = q != p;
  return hide(q);
}
// A lost list of `n` nodes: the head is a direct leak, the others indirect.
__attribute__((noipa)) std::uintptr_t leak_check_lost_list(int n) {
  void* head = nullptr;
  for (int i = 0; i < n; ++i) {
    auto** node = static_cast<void**>(mp_malloc(64));
    node[0] = head;
    head = node;
  }
  return hide(head);
}
// Not a tail call, so that the function is on the stack during the allocation.
__attribute__((noipa)) void* leak_check_kept_block(std::size_t n) {
  void* p = mp_malloc(n);
  asm volatile("" ::: "memory");
  return p;
}
__attribute__((noipa)) void leak_check_free(void* p) {
  mp_free(p);
  asm volatile("" ::: "memory");
}
__attribute__((noipa)) void leak_check_free_again(void* p) {
  mp_free(p);
  asm volatile("" ::: "memory");
}
}

namespace {

void free_list(void* head) {
  while (head != nullptr) {
    void* next = *static_cast<void**>(head);
    mp_free(head);
    head = next;
  }
}

// Lost blocks are reported with their bytes, kept ones (a global, a kept block's
// pointer, this stack) are not, and freeing the lost ones leaves nothing to report.
[[noreturn]] void reports_child() {
  start_check("23");
  CHILD_CHECK(mempool::leak_check() == 0, "leaks before any were made");
  const std::uintptr_t lost = leak_check_lost_block(1000);
  const std::uintptr_t list = leak_check_lost_list(3);
  auto** holder = static_cast<void**>(leak_check_kept_block(32));
  holder[0] = leak_check_kept_block(200);  // reachable through a reachable block
  g_kept = holder;
  void* volatile on_stack = leak_check_kept_block(300);
  scrub_stack();
  const std::size_t leaked = mempool::leak_check();
  CHILD_CHECK(leaked == 1000 + 3 * 64, "%zu bytes reported, 1192 lost", leaked);
  CHILD_CHECK(mp_leak_check() == leaked, "the C API disagrees");
  mp_free(reveal(lost));
  free_list(reveal(list));
  scrub_stack();
  CHILD_CHECK(mempool::leak_check() == 0, "freed blocks reported");
  mp_free(static_cast<void**>(g_kept)[0]);
  mp_free(g_kept);
  mp_free(on_stack);
  ::_exit(0);
}

TEST(HeapLeakCheck, ReportsTheBlocksNoLongerReachable) {
  IN_FRESH_PROCESS(reports_child(),
                   "Direct leak of 1000 byte\\(s\\) in 1 object\\(s\\) allocated from:\n"
                   "    #0 0x[0-9a-f]+ in [^\n]*leak_check_lost_block(.*\n)*"
                   "Direct leak of 64 byte\\(s\\) in 1 object\\(s\\)(.*\n)*"
                   "Indirect leak of 128 byte\\(s\\) in 2 object\\(s\\) allocated from:\n"
                   "    #0 0x[0-9a-f]+ in [^\n]*leak_check_lost_list(.*\n)*"
                   "SUMMARY: mempool: 1192 byte\\(s\\) leaked in 4 allocation\\(s\\)");
}

// At exit: the report, then the exit status (the program's 0 replaced).
TEST(HeapLeakCheck, ExitsWithTheStatusItIsGiven) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        start_check("42");
        // Lost on a thread that ended: no copy of the pointer on this thread's stack or in
        // its registers as it exits.
        std::thread([] {
          static_cast<void>(leak_check_lost_block(100));
          scrub_stack();
        }).join();
        std::exit(0);  // NOLINT(concurrency-mt-unsafe): the only thread left
      },
      ::testing::ExitedWithCode(42), "Direct leak of 100 byte\\(s\\)");
}

// Blocks held on the stacks of running threads (stopped and scanned), lost by threads
// that ended, and freed on other threads than their own, with threads coming and going.
std::atomic<int> g_waiting{0};
std::atomic<bool> g_release{false};
std::atomic<std::uintptr_t> g_handoff[8];

__attribute__((noinline)) void hold_until_released(int i) {
  void* volatile held = leak_check_kept_block(100 + static_cast<std::size_t>(i));
  g_waiting.fetch_add(1);
  while (!g_release.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  mp_free(held);
}

[[noreturn]] void threads_child() {
  start_check("23");
  // Churn: blocks allocated on one thread and freed on another, threads ending.
  for (int round = 0; round < 20; ++round) {
    std::thread producers[4];
    for (int t = 0; t < 4; ++t) {
      producers[t] = std::thread([t] {
        for (int i = 0; i < 2; ++i)
          g_handoff[t * 2 + i].store(hide(leak_check_kept_block(16 + 16 * i)));
        scrub_stack();
      });
    }
    for (std::thread& t : producers)
      t.join();
    std::thread consumer([] {
      for (std::atomic<std::uintptr_t>& h : g_handoff)
        mp_free(reveal(h.exchange(0)));
      scrub_stack();
    });
    consumer.join();
  }
  // Every thread scrubs its stack as it ends: the holders below reuse those stacks, where a
  // stale copy of a freed block's address would keep the lost block allocated there since.
  std::thread lost([] {
    static_cast<void>(leak_check_lost_block(777));
    scrub_stack();
  });
  lost.join();
  std::thread holders[4];
  for (int i = 0; i < 4; ++i)
    holders[i] = std::thread(hold_until_released, i);
  while (g_waiting.load() != 4)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  scrub_stack();
  const std::size_t leaked = mempool::leak_check();
  CHILD_CHECK(leaked == 777, "%zu bytes reported, 777 lost (the held ones are on stacks)", leaked);
  g_release.store(true);
  for (std::thread& t : holders)
    t.join();
  ::_exit(0);
}

TEST(HeapLeakCheck, ScansTheStacksOfRunningThreads) {
  IN_FRESH_PROCESS(threads_child(), "Direct leak of 777 byte\\(s\\) in 1 object\\(s\\)");
}

// A forked child checks its own heap, as the parent does its own.
[[noreturn]] void fork_child() {
  start_check("23");
  const std::uintptr_t lost_before = leak_check_lost_block(50);
  const pid_t child = ::fork();
  CHILD_CHECK(child >= 0, "fork failed");
  if (child == 0) {
    const std::uintptr_t lost_in_child = leak_check_lost_block(60);
    scrub_stack();
    const std::size_t leaked = mempool::leak_check();
    CHILD_CHECK(leaked == 110, "the child reported %zu bytes, 110 lost", leaked);
    mp_free(reveal(lost_in_child));
    ::_exit(0);
  }
  int status = 0;
  CHILD_CHECK(
      ::waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
      "the forked child failed: status %d", status);
  scrub_stack();
  const std::size_t leaked = mempool::leak_check();
  CHILD_CHECK(leaked == 50, "the parent reported %zu bytes, 50 lost", leaked);
  mp_free(reveal(lost_before));
  ::_exit(0);
}

TEST(HeapLeakCheck, ForkedChildrenCheckTheirOwnHeap) {
  IN_FRESH_PROCESS(fork_child());
}

// Under the leak check every block is tracked: a double free names where the block was
// allocated and where it was first freed.
TEST(HeapLeakCheckDeathTest, MisuseReportsSayWhere) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        start_check("23");
        void* p = leak_check_kept_block(48);
        leak_check_free(p);
        leak_check_free_again(p);
      },
      "double free[^\n]*\n"
      "mempool: heap: the block was allocated at:\n    #0 [^\n]*leak_check_kept_block[^\n]*\n"
      "(.*\n)*mempool: heap: and first freed at:\n    #0 [^\n]*leak_check_free\\+");
}

// realloc that keeps a block in place tells the check its new size: the scan reads the
// grown bytes (a pointer stored there keeps its block), and a lost block is reported
// with its size now.
[[noreturn]] void realloc_in_place_child() {
  start_check("23");
  // 40 bytes take the 48-byte class, and 48 stay there.
  void* holder = leak_check_kept_block(40);
  CHILD_CHECK(mp_realloc(holder, 48) == holder, "realloc within the class moved the block");
  // Scanned whole: no stale word in it may point at the lost block.
  std::memset(holder, 0, 48);
  void* kept = leak_check_kept_block(100);
  std::memset(kept, 0, 100);
  static_cast<void**>(holder)[5] = kept;  // bytes 40-47
  kept = nullptr;
  g_kept = holder;
  // Lost on a thread that ends: no copy of the pointer in this thread's registers.
  bool moved = true;
  std::uintptr_t lost = 0;
  std::thread([&] {
    lost = leak_check_lost_grown_block(&moved);
    scrub_stack();
  }).join();
  CHILD_CHECK(!moved, "the lost block moved");
  scrub_stack();
  const std::size_t leaked = mempool::leak_check();
  CHILD_CHECK(leaked == 48,
              "%zu bytes reported, 48 lost (the grown block's pointer keeps "
              "its block)",
              leaked);
  mp_free(static_cast<void**>(g_kept)[5]);
  mp_free(g_kept);
  mp_free(reveal(lost));
  ::_exit(0);
}

TEST(HeapLeakCheck, ReallocInPlaceUpdatesTheSize) {
  IN_FRESH_PROCESS(realloc_in_place_child());
}

TEST(HeapLeakCheck, ReturnsZeroWhenOff) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): no thread sets the environment
  if (std::getenv("MEMPOOL_LEAK_CHECK") != nullptr) GTEST_SKIP() << "the check is on here";
  void* lost = mp_malloc(10);
  EXPECT_EQ(mempool::leak_check(), 0u);
  EXPECT_EQ(mp_leak_check(), 0u);
  mp_free(lost);
}

}  // namespace
