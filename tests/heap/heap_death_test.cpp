// Misuse of the heap stops the process with one line naming "mempool" and the
// pointer: always for a pointer the heap did not hand out and for a pointer into
// the middle of a block (size-free frees: deallocate(p), mp_free), for a double
// free of a small block and for a free-list link overwritten after free; in
// checked builds (MEMPOOL_CHECKED, the `checked` preset) also double frees of large
// blocks, sized frees of foreign pointers and sized frees with a wrong size.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "heap_test_util.hpp"
#include "mempool/detail/memory_checker.hpp"
#include "mempool/detail/platform.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"

namespace mempool {
namespace {

using heap_test::hex_pointer;
using heap_test::kMiB;

// The one-line report about pointer p: "mempool" and p in hex, nothing more of
// the line pinned down (the wording is the heap's).
std::string report_of(const void* p) {
  return "mempool.*" + hex_pointer(p) + "([^0-9a-fx]|$)";
}

char* offset(void* p, std::size_t bytes) {
  return static_cast<char*>(p) + bytes;
}

TEST(HeapDeathTest, FreeOfStackPointer) {
  alignas(16) char local[64] = {};
  EXPECT_DEATH(deallocate(local), report_of(local));
  EXPECT_DEATH(mp_free(local), report_of(local));
  EXPECT_DEATH(mp_free(local + 16), report_of(local + 16));
}

// Memory from glibc's malloc and from (the not replaced) operator new is not the
// heap's.
TEST(HeapDeathTest, FreeOfLibcPointer) {
  void* g = std::malloc(64);
  ASSERT_NE(g, nullptr);
  EXPECT_DEATH(deallocate(g), report_of(g));
  EXPECT_DEATH(mp_free(g), report_of(g));
  int* i = new int(7);
  EXPECT_DEATH(mp_free(i), report_of(i));
  delete i;
  std::free(g);
}

// A pointer into the middle of a small block: 8 and 16 bytes into a 64-byte
// block (also one in the middle of its span).
TEST(HeapDeathTest, FreeOfInteriorPointerOfSmallBlock) {
  void* blocks[8];
  for (void*& b : blocks)
    b = allocate(64);
  void* p = blocks[5];
  EXPECT_DEATH(deallocate(offset(p, 8)), report_of(offset(p, 8)));
  EXPECT_DEATH(mp_free(offset(p, 16)), report_of(offset(p, 16)));
  EXPECT_DEATH(deallocate(offset(p, 63)), report_of(offset(p, 63)));
  void* q = allocate(5000);
  EXPECT_DEATH(deallocate(offset(q, 4096)), report_of(offset(q, 4096)));
  deallocate(q);
  for (void* b : blocks)
    deallocate(b);
}

// A pointer into the middle of a large block: a page in, 16 bytes in, the last
// page.
TEST(HeapDeathTest, FreeOfInteriorPointerOfLargeBlock) {
  void* p = allocate(kMiB);
  EXPECT_DEATH(deallocate(offset(p, 4096)), report_of(offset(p, 4096)));
  EXPECT_DEATH(mp_free(offset(p, 16)), report_of(offset(p, 16)));
  EXPECT_DEATH(deallocate(offset(p, kMiB - 4096)), report_of(offset(p, kMiB - 4096)));
  void* a = allocate(100, std::align_val_t{64 * 1024});
  EXPECT_DEATH(deallocate(offset(a, 64)), report_of(offset(a, 64)));
  deallocate(a);
  deallocate(p);
}

// A pointer to a block of a span that the heap has not handed out yet (issue 28, item
// 4): its free is taken into the thread cache as any other (the hit path checks only
// that it starts a block), and stopped when the cache gives its blocks back to their
// spans, where every block's address is compared with the span's carved end. In a
// fresh process, so that the span of class 64 has carved its first blocks only (a
// first refill takes 1 KiB: 16 blocks; p + 4096 is the 65th of a span of 8 KiB at least).
TEST(HeapDeathTest, FreeOfABlockNeverHandedOut) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        void* p = mp_malloc(64);
        void* never = offset(p, 4096);
        mp_free(never);
        mempool::collect();  // the cache's blocks back to their spans
      },
      "mempool: heap: .*(never handed out|not allocated)");
}

// Far from anything the heap mapped (2^38 bytes away, and the top of the user
// address space): reported, not a crash in the lookup.
TEST(HeapDeathTest, FreeOfFarPointer) {
  void* p = allocate(64);
  void* far = offset(p, std::size_t{1} << 38);
  EXPECT_DEATH(deallocate(far), report_of(far));
  void* top = reinterpret_cast<void*>(std::uintptr_t{0x7ffffffff000});
  EXPECT_DEATH(mp_free(top), report_of(top));
  void* kernel = reinterpret_cast<void*>(~std::uintptr_t{0xfff});
  EXPECT_DEATH(mp_free(kernel), report_of(kernel));
  deallocate(p);
}

// Double frees of small blocks are stopped in every build (the free mark every
// free block carries makes its second free suspect: heap_thread_cache.hpp);
// checked builds also know large blocks exactly.
TEST(HeapDeathTest, DoubleFree) {
  void* small = allocate(64);
  deallocate(small);
  EXPECT_DEATH(deallocate(small), report_of(small));
  void* c = mp_malloc(3000);
  mp_free(c);
  EXPECT_DEATH(mp_free(c), report_of(c));
  void* sized = allocate(200);
  deallocate(sized, 200);
  EXPECT_DEATH(deallocate(sized, 200), report_of(sized));
  void* tiny = allocate(8);  // a block with no room for anything but the link
  deallocate(tiny);
  EXPECT_DEATH(deallocate(tiny), report_of(tiny));
  if (!detail::kChecked) return;
  void* large = allocate(kMiB);
  deallocate(large);
  EXPECT_DEATH(deallocate(large), report_of(large));
}

// The message names the misuse: "double free", in the default build.
std::string double_free_of(const void* p) {
  return detail::kChecked ? report_of(p) : "mempool: heap: double free.*" + hex_pointer(p);
}

// Allocations and frees of other classes between the two frees, and frees of
// the block's own class that push it deeper into the thread's list.
TEST(HeapDeathTest, DelayedDoubleFree) {
  std::vector<void*> same;
  for (int i = 0; i < 10; ++i)
    same.push_back(allocate(48));
  void* p = allocate(48);
  deallocate(p);
  std::vector<void*> others;
  for (std::size_t i = 0; i < 200; ++i)
    others.push_back(allocate(i % 2 == 0 ? 16 : 100 + i * 8));
  for (std::size_t i = 0; i < others.size(); i += 2)
    deallocate(others[i]);
  for (void* q : same)
    deallocate(q);
  EXPECT_DEATH(deallocate(p), double_free_of(p));
  for (std::size_t i = 1; i < others.size(); i += 2)
    deallocate(others[i]);
}

// free(a); free(b); free(a): a is no longer the list's head.
TEST(HeapDeathTest, InterleavedDoubleFree) {
  void* a = mp_malloc(100);
  void* b = mp_malloc(100);
  mp_free(a);
  mp_free(b);
  EXPECT_DEATH(mp_free(a), double_free_of(a));
}

// The free mark is word 1, apart from the link in word 0: a double free is still
// caught when the program wrote over the freed block's first word in between (with
// the mark in word 0 that free was not suspect, and the block went on its list twice).
TEST(HeapDeathTest, DoubleFreeAfterAWriteOverTheLink) {
  if (detail::kAddressSanitizer) GTEST_SKIP() << "the write itself is reported";
  void* keep = allocate(64);
  void* p = allocate(64);
  deallocate(p);
  EXPECT_DEATH(
      {
        std::memset(p, 0, sizeof(void*));
        deallocate(p);
      },
      double_free_of(p));
  deallocate(keep);
}

// The first free's block has left the thread cache: collect() sent it back to
// its span (kept alive by a neighbour), or its thread exited and the cache went
// to the central cache.
TEST(HeapDeathTest, DoubleFreeOfBlockInTheCentralCache) {
  void* neighbour = allocate(320);
  void* p = allocate(320);
  deallocate(p);
  collect();
  EXPECT_DEATH(deallocate(p), double_free_of(p));
  void* q = allocate(320);
  std::thread([q] { deallocate(q); }).join();
  EXPECT_DEATH(deallocate(q), double_free_of(q));
  deallocate(neighbour);
}

// A write into a freed block overwrites its link: the allocation that would
// follow it stops with its own message instead of jumping through it. Zeros, a
// valid pointer and a repeated byte all decode to an impossible link. Under
// AddressSanitizer the freed block is poisoned (memory_checker.hpp): the write
// itself is reported.
TEST(HeapDeathTest, WriteAfterFreeIsCaughtWhenTheLinkIsFollowed) {
  const std::string corrupted =
      detail::kAddressSanitizer ? "AddressSanitizer: use-after-poison"
                                : "mempool: heap: free list corrupted \\(write after free\\?\\)";
  auto write_after_free = [](int fill, bool pointer) {
    void* keep = allocate(64);  // a live block of the class, so the list is its own
    void* p = allocate(64);
    deallocate(p);
    if (pointer) {
      std::memcpy(p, &keep, sizeof keep);
    } else {
      std::memset(p, fill, 64);
    }
    void* a = allocate(64);  // pops p, following the link written over
    void* b = allocate(64);
    std::printf("%p %p\n", a, b);
  };
  EXPECT_DEATH(write_after_free(0x41, false), corrupted);
  EXPECT_DEATH(write_after_free(0, false), corrupted);
  EXPECT_DEATH(write_after_free(0xff, false), corrupted);
  EXPECT_DEATH(write_after_free(0, true), corrupted);
}

TEST(HeapDeathTest, SizedFreeWithWrongSize) {
  if (!detail::kChecked) GTEST_SKIP() << "detected in checked builds only";
  void* p = allocate(64);
  EXPECT_DEATH(deallocate(p, 4096), report_of(p));
  EXPECT_DEATH(deallocate(p, kMiB), report_of(p));
  void* large = allocate(kMiB);
  EXPECT_DEATH(deallocate(large, 8 * kMiB), report_of(large));
  // A block from an aligned call lives in a class chosen for its alignment: a
  // sized free without the alignment names another class.
  void* aligned = allocate(24, std::align_val_t{4096});
  EXPECT_DEATH(deallocate(aligned, 24), report_of(aligned));
  deallocate(aligned, 24, std::align_val_t{4096});
  deallocate(large, kMiB);
  deallocate(p, 64);
}

// deallocate(p, n, alignment) with an n the block cannot have.
TEST(HeapDeathTest, AlignedSizedFreeWithWrongSize) {
  if (!detail::kChecked) GTEST_SKIP() << "detected in checked builds only";
  void* small = allocate(100, std::align_val_t{64});
  EXPECT_DEATH(deallocate(small, 4096, std::align_val_t{64}), report_of(small));
  void* large = allocate(kMiB, std::align_val_t{4096});
  EXPECT_DEATH(deallocate(large, 8 * kMiB, std::align_val_t{4096}), report_of(large));
  deallocate(large, kMiB, std::align_val_t{4096});
  deallocate(small, 100, std::align_val_t{64});
}

TEST(HeapDeathTest, SizedFreeOfForeignPointer) {
  if (!detail::kChecked) GTEST_SKIP() << "detected in checked builds only";
  alignas(16) char local[64] = {};
  EXPECT_DEATH(deallocate(local, 64), report_of(local));
  void* p = allocate(64);
  EXPECT_DEATH(deallocate(offset(p, 16), 48), report_of(offset(p, 16)));
  deallocate(p);
}

// Correct use, including reuse of freed blocks, never trips the checks.
TEST(HeapDeathTest, CorrectUseIsNotReported) {
  for (int round = 0; round < 3; ++round) {
    void* a = allocate(64);
    void* b = mp_malloc(kMiB);
    void* c = allocate(100, std::align_val_t{4096});
    deallocate(a, 64);
    mp_free(b);
    deallocate(c, 100, std::align_val_t{4096});
  }
  SUCCEED();
}

}  // namespace
}  // namespace mempool
