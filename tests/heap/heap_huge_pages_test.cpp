// The heap on transparent huge pages through its public API, each test in a
// freshly executed process (so MEMPOOL_THP and MEMPOOL_DECAY_MS are read anew and
// no other test's heap shows): MEMPOOL_THP=never keeps huge pages away, the
// default puts a large heap on them, a freed burst comes back down as far under
// the default as under never, and fork() of a heap on huge pages.
//
// The page heap's own huge-page policy (placement, whole release, breaking) is
// tested in tests/heap_tiers/huge_pages_test.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "heap_test_util.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"

namespace mempool {
namespace {

using heap_test::kKiB;
using heap_test::kMiB;

bool system_has_thp() {
  return heap_test::system_thp_mode() != "never";
}

double mib(std::size_t bytes) {
  return static_cast<double>(bytes) / static_cast<double>(kMiB);
}

// 64 MiB of 4 KiB blocks, every byte written: the shape of a big heap of small
// objects, on the heap's small spans.
constexpr std::size_t kBlock = 4 * kKiB;
constexpr std::size_t kHeapBytes = 64 * kMiB;

std::vector<void*> fill_heap(std::uint64_t seed) {
  std::vector<void*> blocks(kHeapBytes / kBlock);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i] = mp_malloc(kBlock);
    CHILD_CHECK(blocks[i] != nullptr, "block %zu", i);
    heap_test::fill_pattern(blocks[i], kBlock, seed + i);
  }
  return blocks;
}

// The bytes of the heap's mappings that hold the blocks on huge pages (each
// mapping counted once).
std::size_t anon_huge_bytes_of(const std::vector<void*>& blocks) {
  std::size_t total = 0;
  std::uintptr_t last_start = 0;
  for (std::size_t i = 0; i < blocks.size(); i += 64) {
    const heap_test::Mapping m = heap_test::mapping_of(blocks[i]);
    if (!m.found || m.start == last_start) continue;
    last_start = m.start;
    total += m.anon_huge_bytes;
  }
  return total;
}

[[noreturn]] void never_child() {
  ::setenv("MEMPOOL_THP", "never", 1);  // NOLINT(concurrency-mt-unsafe): one thread yet
  const std::vector<void*> blocks = fill_heap(1);
  const HeapStats st = stats();
  CHILD_CHECK(!st.huge_pages, "MEMPOOL_THP=never, yet the heap asks for huge pages");
  CHILD_CHECK(st.bytes_huge_advised == 0, "%zu bytes advised", st.bytes_huge_advised);
  const heap_test::Mapping m = heap_test::mapping_of(blocks[0]);
  CHILD_CHECK(m.found, "no mapping holds the first block");
  if (system_has_thp()) CHILD_CHECK(m.has_flag("nh"), "VmFlags %s", m.flags.c_str());
  const std::size_t huge = anon_huge_bytes_of(blocks);
  CHILD_CHECK(huge == 0, "%.1f MiB of the heap on huge pages", mib(huge));
  ::_exit(0);
}

TEST(HeapHugePages, NeverKeepsTheHeapOffHugePages) {
  IN_FRESH_PROCESS(never_child());
}

[[noreturn]] void default_child() {
  ::unsetenv("MEMPOOL_THP");  // NOLINT(concurrency-mt-unsafe): one thread yet
  const std::vector<void*> blocks = fill_heap(2);
  const HeapStats st = stats();
  CHILD_CHECK(st.huge_pages, "the system has THP, yet the heap does not ask for huge pages");
  CHILD_CHECK(st.bytes_huge_advised >= kHeapBytes, "%.1f MiB advised", mib(st.bytes_huge_advised));
  // The kernel gives a huge page where it has one free (compaction may fail on a
  // busy machine): a quarter of the heap at least.
  const std::size_t huge = anon_huge_bytes_of(blocks);
  CHILD_CHECK(huge >= kHeapBytes / 4, "only %.1f MiB of %.1f MiB on huge pages", mib(huge),
              mib(kHeapBytes));
  ::_exit(0);
}

TEST(HeapHugePages, ALargeHeapIsOnHugePagesByDefault) {
  if (!system_has_thp()) GTEST_SKIP() << "no transparent huge pages on this system";
  if (heap_test::kSanitized) GTEST_SKIP() << "the sanitizers' shadow memory skews the mappings";
  IN_FRESH_PROCESS(default_child());
}

// A burst of 96 MiB freed: after the decay time (200 ms here) the heap gives it back
// without collect(). 96 MiB stays under the release threshold (128 MiB,
// MEMPOOL_RELEASE_THRESHOLD), so only the decay can give it back. The residue allowed
// is the same under both modes: the thread cache's budget (8 MiB,
// MEMPOOL_THREAD_CACHE_BYTES) plus the central cache's kept batches (64 KiB a class)
// and 2 MiB for a huge page left partly used.
[[noreturn]] void burst_child(const char* thp) {
  ::setenv("MEMPOOL_THP", thp, 1);         // NOLINT(concurrency-mt-unsafe): one thread yet
  ::setenv("MEMPOOL_DECAY_MS", "200", 1);  // NOLINT(concurrency-mt-unsafe): one thread yet
  mp_free(mp_malloc(64));                  // the heap starts, options read
  const std::size_t before = heap_test::resident_bytes();
  std::vector<void*> blocks(96 * kMiB / (64 * kKiB));
  for (void*& p : blocks) {
    p = mp_malloc(64 * kKiB);
    CHILD_CHECK(p != nullptr, "mp_malloc(64 KiB)");
    heap_test::fill_pattern(p, 64 * kKiB, 3);
  }
  const std::size_t peak = heap_test::resident_bytes();
  for (void* p : blocks)
    mp_free(p);
  // The decay runs when the page heap next allocates or frees: a large block.
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * 200 + 50));
  mp_free(mp_malloc(4 * kMiB));
  std::this_thread::sleep_for(std::chrono::milliseconds(200 + 50));
  mp_free(mp_malloc(4 * kMiB));
  const std::size_t after = heap_test::resident_bytes();
  const std::size_t allowed = 8 * kMiB + std::size_t{98} * 64 * kKiB + 2 * kMiB;
  std::fprintf(stderr, "MEMPOOL_THP=%s: resident %.1f MiB before, %.1f at the peak, %.1f after\n",
               thp, mib(before), mib(peak), mib(after));
  CHILD_CHECK(peak >= before + 80 * kMiB, "the burst did not show (%.1f MiB)", mib(peak));
  CHILD_CHECK(after <= before + allowed, "%.1f MiB more resident than before the burst",
              mib(after - before));
  ::_exit(0);
}

TEST(HeapHugePages, AFreedBurstComesBackDownAsWithNever) {
  if (heap_test::kSanitized) GTEST_SKIP() << "the sanitizers hold freed memory themselves";
  IN_FRESH_PROCESS(burst_child("never"));
  IN_FRESH_PROCESS(burst_child("auto"));
}

// fork() of a heap on huge pages: the child sees the parent's blocks, writes,
// frees and allocates; each keeps its own bytes (copy on write of 2 MiB pages).
[[noreturn]] void fork_child() {
  ::unsetenv("MEMPOOL_THP");  // NOLINT(concurrency-mt-unsafe): one thread yet
  std::vector<void*> blocks = fill_heap(4);
  const pid_t pid = ::fork();
  CHILD_CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      CHILD_CHECK(heap_test::first_mismatch(blocks[i], kBlock, 4 + i) == heap_test::kNoMismatch,
                  "block %zu differs in the forked child", i);
    }
    for (std::size_t i = 0; i < blocks.size(); i += 2)
      heap_test::fill_pattern(blocks[i], kBlock, 100 + i);
    for (std::size_t i = 1; i < blocks.size(); i += 4) {
      mp_free(blocks[i]);
      blocks[i] = mp_malloc(kBlock);
      CHILD_CHECK(blocks[i] != nullptr, "mp_malloc in the forked child");
      heap_test::fill_pattern(blocks[i], kBlock, 200 + i);
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const std::uint64_t seed = i % 2 == 0 ? 100 + i : i % 4 == 1 ? 200 + i : 4 + i;
      CHILD_CHECK(heap_test::first_mismatch(blocks[i], kBlock, seed) == heap_test::kNoMismatch,
                  "block %zu lost its bytes in the forked child", i);
    }
    ::_exit(0);
  }
  int status = 0;
  CHILD_CHECK(::waitpid(pid, &status, 0) == pid, "waitpid");
  CHILD_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the forked child failed (%d)",
              status);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    CHILD_CHECK(heap_test::first_mismatch(blocks[i], kBlock, 4 + i) == heap_test::kNoMismatch,
                "the child's writes showed in the parent's block %zu", i);
  }
  for (void* p : blocks)
    mp_free(p);
  ::_exit(0);
}

TEST(HeapHugePages, ForkOfAHeapOnHugePages) {
  IN_FRESH_PROCESS(fork_child());
}

}  // namespace
}  // namespace mempool
