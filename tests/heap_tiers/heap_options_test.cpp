// The heap's MEMPOOL_* environment variables. Each case runs in a fresh process
// (gtest's "threadsafe" death-test style re-executes the binary), so the heap
// starts there and reads the variables the parent set. A failed check in a child
// says which (CHILD_CHECK) before it exits 1.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "support/test_support.hpp"

namespace {

class HeapOptions : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  void TearDown() override {
    for (const char* name : {"MEMPOOL_RELEASE_THRESHOLD", "MEMPOOL_VERBOSE", "MEMPOOL_SHOW_STATS",
                             "MEMPOOL_THREAD_CACHE_BYTES", "MEMPOOL_TOTAL_THREAD_CACHE_BYTES",
                             "MEMPOOL_DIRECT_MAP_THRESHOLD", "MEMPOOL_DIRECT_CACHE_BYTES",
                             "MEMPOOL_DECAY_MS", "MEMPOOL_MEMORY_LIMIT", "MEMPOOL_HARDENED_SEED"})
      unsetenv(name);
  }
};

TEST_F(HeapOptions, BadValuesAreReportedAndIgnored) {
  setenv("MEMPOOL_RELEASE_THRESHOLD", "12x", 1);
  setenv("MEMPOOL_VERBOSE", "maybe", 1);
  setenv("MEMPOOL_TOTAL_THREAD_CACHE_BYTES", "lots", 1);
  setenv("MEMPOOL_DIRECT_MAP_THRESHOLD", "1K", 1);  // below its 256K minimum
  EXPECT_EXIT(
      {
        void* p = mp_malloc(100);
        mp_free(p);
        CHILD_CHECK(p != nullptr, "mp_malloc(100) failed");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "ignoring MEMPOOL_VERBOSE=maybe(.|\n)*ignoring MEMPOOL_RELEASE_THRESHOLD=12x(.|\n)*"
      "ignoring MEMPOOL_TOTAL_THREAD_CACHE_BYTES=lots(.|\n)*"
      "ignoring MEMPOOL_DIRECT_MAP_THRESHOLD=1K");
}

TEST_F(HeapOptions, BadCacheAndDecayValuesAreReportedAndIgnored) {
  setenv("MEMPOOL_DIRECT_CACHE_BYTES", "lots", 1);
  setenv("MEMPOOL_DECAY_MS", "soon", 1);
  setenv("MEMPOOL_VERBOSE", "1", 1);
  EXPECT_EXIT(
      {
        void* p = mp_malloc(100);
        mp_free(p);
        CHILD_CHECK(p != nullptr, "mp_malloc(100) failed");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "ignoring MEMPOOL_DIRECT_CACHE_BYTES=lots(.|\n)*ignoring MEMPOOL_DECAY_MS=soon(.|\n)*"
      "MEMPOOL_DIRECT_CACHE_BYTES=268435456 MEMPOOL_DECAY_MS=1000");
}

// The heap's first use in a fresh process (which reads the options), then exit 0.
[[noreturn]] void allocate_once_and_exit() {
  void* p = mp_malloc(100);
  mp_free(p);
  CHILD_CHECK(p != nullptr, "mp_malloc(100) failed");
  std::exit(0);
}

// MEMPOOL_HARDENED_SEED (read by every build, used by the hardened library): a decimal
// number, shown among the options when set; anything else is ignored.
TEST_F(HeapOptions, HardenedSeedIsADecimalNumber) {
  setenv("MEMPOOL_HARDENED_SEED", "42", 1);
  setenv("MEMPOOL_VERBOSE", "1", 1);
  EXPECT_EXIT(allocate_once_and_exit(), ::testing::ExitedWithCode(0),
              "options: MEMPOOL_HARDENED_SEED=42\n");
  setenv("MEMPOOL_HARDENED_SEED", "42x", 1);
  EXPECT_EXIT(allocate_once_and_exit(), ::testing::ExitedWithCode(0),
              "ignoring MEMPOOL_HARDENED_SEED=42x");
}

TEST_F(HeapOptions, DecayNeverKeepsCachedMappingsUntilCollect) {
  setenv("MEMPOOL_DECAY_MS", "never", 1);
  setenv("MEMPOOL_DIRECT_CACHE_BYTES", "32M", 1);
  setenv("MEMPOOL_DIRECT_MAP_THRESHOLD", "16M", 1);
  EXPECT_EXIT(
      {
        void* p = mempool::allocate(20 << 20);
        mempool::deallocate(p);
        const std::size_t kept = mempool::stats().bytes_free_in_page_heap;
        CHILD_CHECK(kept >= (20 << 20), "%zu bytes kept after freeing 20 MiB", kept);
        void* q = mempool::allocate(40 << 20);  // over the budget: unmapped at free
        mempool::deallocate(q);
        const std::size_t bounded = mempool::stats().bytes_free_in_page_heap;
        CHILD_CHECK(bounded < (40 << 20), "%zu bytes kept after freeing 40 MiB", bounded);
        mempool::collect();
        const std::size_t left = mempool::stats().bytes_free_in_page_heap;
        CHILD_CHECK(left == 0, "%zu bytes kept after collect()", left);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// The table at exit: every total, the limit, and the row of a class the program
// used with its live blocks (300 blocks of 20000 bytes, a size nothing else asks
// for) and their KiB.
TEST_F(HeapOptions, ShowStatsPrintsTheTableAtExit) {
  setenv("MEMPOOL_SHOW_STATS", "1", 1);
  setenv("MEMPOOL_MEMORY_LIMIT", "1G", 1);
  void* probe = mp_malloc(20000);
  const std::size_t size = mempool::usable_size(probe);
  mp_free(probe);
  char kib[32];
  std::snprintf(kib, sizeof kib, "%.1f", 300.0 * static_cast<double>(size) / 1024.0);
  const std::string row =
      "\n +" + std::to_string(size) + " +300 +" + kib + " +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+\n";
  EXPECT_EXIT(
      {
        for (int i = 0; i < 300; ++i)
          static_cast<void>(mp_malloc(20000));  // live at exit
        mp_free(mp_malloc(1 << 20));
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "mempool heap statistics\n  in use +[0-9.]+ MiB  \\([0-9]+ small blocks, [0-9]+ large"
      "(.|\n)*\n  thread caches +[0-9.]+ MiB  \\(1 threads\\)\n  central cache +[0-9.]+ MiB\n"
      "  page heap, free +[0-9.]+ MiB  resident(.|\n)*\n  returned to the OS +[0-9.]+ MiB\n"
      "  span tails +[0-9.]+ MiB\n  = mapped +[0-9.]+ MiB  \\(peak [0-9.]+ MiB; \\+ [0-9.]+ MiB "
      "metadata\\)\n  memory limit +1024.00 MiB(.|\n)*\n +class size +in use +in use KiB +thread "
      "caches +central cache +spans +reserved KiB(.|\n)*" +
          row);
}

TEST_F(HeapOptions, MemoryLimitTakesByteSuffixes) {
  setenv("MEMPOOL_MEMORY_LIMIT", "150M", 1);
  setenv("MEMPOOL_VERBOSE", "1", 1);
  EXPECT_EXIT(
      {
        mp_free(mp_malloc(100));
        constexpr std::size_t k150M = std::size_t{150} << 20;
        CHILD_CHECK(mp_memory_limit() == k150M, "mp_memory_limit() %zu", mp_memory_limit());
        CHILD_CHECK(mempool::memory_limit() == k150M, "memory_limit() %zu",
                    mempool::memory_limit());
        CHILD_CHECK(mempool::stats().memory_limit == k150M, "stats().memory_limit %zu",
                    mempool::stats().memory_limit);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "MEMPOOL_MEMORY_LIMIT=157286400");
}

TEST_F(HeapOptions, BadMemoryLimitIsReportedAndIgnored) {
  for (const char* bad : {"lots", "-1", "12Q", "99999999999999999999"}) {
    setenv("MEMPOOL_MEMORY_LIMIT", bad, 1);
    EXPECT_EXIT(
        {
          mp_free(mp_malloc(100));
          CHILD_CHECK(mp_memory_limit() == 0, "a limit of %zu", mp_memory_limit());
          std::exit(0);
        },
        ::testing::ExitedWithCode(0), std::string("ignoring MEMPOOL_MEMORY_LIMIT=") + bad)
        << bad;
  }
}

// The call wins over the variable, even made before the heap's first allocation;
// 0 takes the limit away.
TEST_F(HeapOptions, MemoryLimitCallOverridesTheVariable) {
  setenv("MEMPOOL_MEMORY_LIMIT", "1G", 1);
  EXPECT_EXIT(
      {
        mempool::set_memory_limit(std::size_t{64} << 20);
        mp_free(mp_malloc(100));
        CHILD_CHECK(mp_memory_limit() == (std::size_t{64} << 20),
                    "the call's limit is not in force: %zu", mp_memory_limit());
        mp_set_memory_limit(0);
        CHILD_CHECK(mempool::memory_limit() == 0, "a limit of %zu after setting 0",
                    mempool::memory_limit());
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(HeapOptions, VerboseReportsTheValuesAndMisuseDetails) {
  setenv("MEMPOOL_VERBOSE", "1", 1);
  setenv("MEMPOOL_RELEASE_THRESHOLD", "32M", 1);
  EXPECT_DEATH(
      {
        auto* p = static_cast<char*>(mp_malloc(64));
        mp_free(p + 8);
      },
      "MEMPOOL_RELEASE_THRESHOLD=33554432(.|\n)*8 bytes into a block of 64 bytes(.|\n)*"
      "middle of a block");
}

TEST_F(HeapOptions, ReleaseThresholdZeroGivesFreePagesBackAtOnce) {
  setenv("MEMPOOL_RELEASE_THRESHOLD", "0", 1);
  EXPECT_EXIT(
      {
        void* p = mempool::allocate(4 << 20);  // a large span from the page heap
        static_cast<char*>(p)[0] = 1;
        mempool::deallocate(p);
        const std::size_t kept = mempool::stats().bytes_free_in_page_heap;
        CHILD_CHECK(kept == 0, "%zu free bytes kept with a threshold of 0", kept);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(HeapOptions, DirectMapThresholdSendsBigBlocksToTheirOwnMapping) {
  setenv("MEMPOOL_DIRECT_MAP_THRESHOLD", "1M", 1);
  setenv("MEMPOOL_DIRECT_CACHE_BYTES", "0", 1);  // no cache: unmapped at free
  EXPECT_EXIT(
      {
        const std::size_t mapped = mempool::stats().bytes_mapped;
        void* p = mempool::allocate(2 << 20);
        const std::size_t with = mempool::stats().bytes_mapped;
        CHILD_CHECK(with >= mapped + (2 << 20), "mapped %zu -> %zu for a 2 MiB block", mapped,
                    with);
        mempool::deallocate(p);  // unmapped at once
        const std::size_t after = mempool::stats().bytes_mapped;
        CHILD_CHECK(after < mapped + (2 << 20), "mapped %zu after its free (%zu before)", after,
                    mapped);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// MEMPOOL_THREAD_CACHE_BYTES bounds one thread's cache: after cycling blocks of
// every class to 256 KiB, the thread holds at most that much.
TEST_F(HeapOptions, ThreadCacheBytesBoundsOneThreadsCache) {
  setenv("MEMPOOL_THREAD_CACHE_BYTES", "1M", 1);
  EXPECT_EXIT(
      {
        for (int round = 0; round < 4; ++round) {
          std::vector<void*> blocks;
          for (std::size_t n = 8; n <= (256 << 10); n += n / 4 + 8)
            for (int i = 0; i < 16; ++i)
              blocks.push_back(mempool::allocate(n));
          for (void* p : blocks)
            mempool::deallocate(p);
        }
        const std::size_t cached = mempool::stats().bytes_in_thread_caches;
        CHILD_CHECK(cached > 0 && cached <= (1 << 20), "%zu bytes cached (limit 1 MiB)", cached);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
