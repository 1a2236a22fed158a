// The heap's MEMPOOL_* environment variables. Each case runs in a fresh process
// (gtest's "threadsafe" death-test style re-executes the binary), so the heap
// starts there and reads the variables the parent set.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "mempool/heap.hpp"
#include "mempool/mempool.h"

namespace {

class HeapOptions : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  void TearDown() override {
    for (const char* name : {"MEMPOOL_RELEASE_THRESHOLD", "MEMPOOL_VERBOSE", "MEMPOOL_SHOW_STATS",
                             "MEMPOOL_THREAD_CACHE_BYTES", "MEMPOOL_TOTAL_THREAD_CACHE_BYTES",
                             "MEMPOOL_DIRECT_MAP_THRESHOLD", "MEMPOOL_DIRECT_CACHE_BYTES",
                             "MEMPOOL_DECAY_MS", "MEMPOOL_HARDENED_SEED"})
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
        std::exit(p != nullptr ? 0 : 1);
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
        std::exit(p != nullptr ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "ignoring MEMPOOL_DIRECT_CACHE_BYTES=lots(.|\n)*ignoring MEMPOOL_DECAY_MS=soon(.|\n)*"
      "MEMPOOL_DIRECT_CACHE_BYTES=268435456 MEMPOOL_DECAY_MS=1000");
}

// The heap's first use in a fresh process (which reads the options), then exit 0.
[[noreturn]] void allocate_once_and_exit() {
  void* p = mp_malloc(100);
  mp_free(p);
  std::exit(p != nullptr ? 0 : 1);
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
        const bool kept = mempool::stats().bytes_free_in_page_heap >= (20 << 20);
        void* q = mempool::allocate(40 << 20);  // over the budget: unmapped at free
        mempool::deallocate(q);
        const bool bounded = mempool::stats().bytes_free_in_page_heap < (40 << 20);
        mempool::collect();
        const bool released = mempool::stats().bytes_free_in_page_heap == 0;
        std::exit(kept && bounded && released ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(HeapOptions, ShowStatsPrintsTheTableAtExit) {
  setenv("MEMPOOL_SHOW_STATS", "1", 1);
  EXPECT_EXIT(
      {
        void* p = mp_malloc(100);
        mp_free(p);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "mempool heap statistics(.|\n)*class size");
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
        std::exit(mempool::stats().bytes_free_in_page_heap == 0 ? 0 : 1);
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
        const bool grew = mempool::stats().bytes_mapped >= mapped + (2 << 20);
        mempool::deallocate(p);  // unmapped at once
        const bool shrank = mempool::stats().bytes_mapped < mapped + (2 << 20);
        std::exit(grew && shrank ? 0 : 1);
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
        std::exit(cached > 0 && cached <= (1 << 20) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
