#include "mempool/concurrent_fixed_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "mempool/detail/os.hpp"
#include "support/test_support.hpp"

namespace mempool {
namespace {

TEST(ConcurrentFixedPool, AllocatesDistinctAlignedBlocks) {
  ConcurrentFixedPool pool(64);
  EXPECT_EQ(pool.block_size(), 64u);
  EXPECT_EQ(pool.alignment(), 16u);
  std::set<void*> seen;
  for (int i = 0; i < 10000; ++i) {
    void* p = pool.allocate();
    ASSERT_TRUE(mempool_test::is_aligned(p, 16));
    ASSERT_TRUE(seen.insert(p).second);
    ASSERT_TRUE(pool.owns(p));
  }
  for (void* p : seen)
    pool.deallocate(p);
  pool.deallocate(nullptr);
}

TEST(ConcurrentFixedPool, ReusesFreedBlocksBeforeGrowing) {
  ConcurrentFixedPool pool(32);
  std::vector<void*> v;
  for (int i = 0; i < 5000; ++i)
    v.push_back(pool.allocate());
  const std::size_t reserved = pool.bytes_reserved();
  for (void* p : v)
    pool.deallocate(p);
  for (int i = 0; i < 5000; ++i)
    v[i] = pool.allocate();
  EXPECT_EQ(pool.bytes_reserved(), reserved);
  for (void* p : v)
    pool.deallocate(p);
}

TEST(ConcurrentFixedPool, OwnsRejectsForeignAndInteriorPointers) {
  ConcurrentFixedPool pool(48);
  char* p = static_cast<char*>(pool.allocate());
  EXPECT_TRUE(pool.owns(p));
  EXPECT_FALSE(pool.owns(p + 8));
  int local = 0;
  EXPECT_FALSE(pool.owns(&local));
  pool.deallocate(p);
}

// A thread's shard keeps up to shard_bytes of what the thread freed (its next
// allocations find them there, warm); only the surplus goes to the depot for
// other threads. With shard_bytes 0 a shard keeps 2 batches.
TEST(ConcurrentFixedPool, AShardKeepsWhatItsThreadFrees) {
  constexpr int kBlocks = 3000;
  auto reused_by_another_thread = [](ConcurrentFixedPool& pool) {
    std::vector<void*> freed;
    std::thread([&] {
      for (int i = 0; i < kBlocks; ++i)
        freed.push_back(pool.allocate());
      for (void* p : freed)
        pool.deallocate(p);
      // This thread stays alive (its shard full) while the other allocates.
      std::set<void*> mine(freed.begin(), freed.end());
      std::size_t reused = 0;
      std::thread([&] {
        std::vector<void*> v;
        for (int i = 0; i < kBlocks; ++i)
          v.push_back(pool.allocate());
        for (void* p : v)
          reused += mine.count(p);
        for (void* p : v)
          pool.deallocate(p);
      }).join();
      freed.assign(1, reinterpret_cast<void*>(reused));
    }).join();
    return reinterpret_cast<std::size_t>(freed[0]);
  };
  ConcurrentFixedPool small_shards(32, 0, 0);
  EXPECT_EQ(small_shards.shard_limit(), 2 * small_shards.batch_size());
  EXPECT_GE(reused_by_another_thread(small_shards), kBlocks - small_shards.shard_limit());
  ConcurrentFixedPool pool(32, 0, 64 * 1024);  // 2,048 blocks of 32 bytes
  EXPECT_EQ(pool.shard_limit(), 2048u);
  // The shard keeps at least limit - batch blocks, some of them never handed out.
  EXPECT_LE(reused_by_another_thread(pool), kBlocks - pool.shard_limit() + 2 * pool.batch_size());
  EXPECT_EQ(ConcurrentFixedPool(64).shard_limit() * 64, ConcurrentFixedPool::kDefaultShardBytes);
}

// One thread allocates, another frees: the blocks flow back through the depot
// and the pool stops growing.
TEST(ConcurrentFixedPool, ProducerConsumerDoesNotGrowWithoutBound) {
  ConcurrentFixedPool pool(64);
  constexpr int kRounds = 50;
  constexpr int kPerRound = 4000;
  std::size_t reserved_after_first = 0;
  for (int r = 0; r < kRounds; ++r) {
    std::vector<void*> v;
    for (int i = 0; i < kPerRound; ++i)
      v.push_back(pool.allocate());
    std::thread consumer([&] {
      for (void* p : v)
        pool.deallocate(p);
    });
    consumer.join();
    if (r == 0) reserved_after_first = pool.bytes_reserved();
  }
  EXPECT_LE(pool.bytes_reserved(), 2 * reserved_after_first);
}

// 4 threads share 8 pools (blocks of 16 to 72 bytes). Each round a thread takes a block
// from every pool, writes a pattern of its own over the whole block and hands it to the
// next thread, which checks the pattern and that the block is its pool's, then frees it
// there: every block is freed by a thread that did not allocate it. At the end every
// block came back (live_blocks() 0 in each pool) and each was checked once.
TEST(ConcurrentFixedPool, ManyPoolsManyThreads) {
  constexpr int kPools = 8;
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  struct Handed {
    int pool;
    void* p;
    std::uint64_t seed;
  };
  std::vector<ConcurrentFixedPool> pools;
  for (int i = 0; i < kPools; ++i)
    pools.emplace_back(16 + 8 * i);
  std::vector<mempool_test::HandOff<Handed>> boxes(kThreads);
  std::atomic<int> checked{0};
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (int i = 0; i < kPools; ++i) {
          void* p = pools[i].allocate();
          const auto seed = static_cast<std::uint64_t>((t * kRounds + round) * kPools + i);
          mempool_test::fill_pattern(p, pools[i].block_size(), seed);
          boxes[(t + 1) % kThreads].put({i, p, seed});
        }
        // The previous thread puts kPools blocks a round here, so these takes end.
        for (int k = 0; k < kPools; ++k) {
          const Handed h = *boxes[t].take();
          ConcurrentFixedPool& pool = pools[h.pool];
          if (!pool.owns(h.p) || mempool_test::first_mismatch(h.p, pool.block_size(), h.seed) !=
                                     mempool_test::kNoMismatch)
            bad.fetch_add(1);
          checked.fetch_add(1);
          pool.deallocate(h.p);
        }
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(checked.load(), kThreads * kRounds * kPools);
  for (const ConcurrentFixedPool& pool : pools)
    EXPECT_EQ(pool.live_blocks(), 0u) << "pool of " << pool.block_size() << "-byte blocks";
}

TEST(ConcurrentFixedPool, MoveKeepsBlocksValid) {
  ConcurrentFixedPool a(64);
  void* p = a.allocate();
  ConcurrentFixedPool b(std::move(a));
  EXPECT_TRUE(b.owns(p));
  b.deallocate(p);
  ConcurrentFixedPool c(32);
  c = std::move(b);
  EXPECT_EQ(c.block_size(), 64u);
  EXPECT_EQ(c.allocate(), p);
}

TEST(ConcurrentFixedPool, OutOfMemory) {
  ConcurrentFixedPool pool(1024);
  std::vector<void*> live;
  mempool::testing::fail_os_maps_after(2);
  while (void* p = pool.try_allocate()) {
    std::memset(p, static_cast<int>(live.size() & 0xff), 1024);
    live.push_back(p);
  }
  EXPECT_THROW((void)pool.allocate(), std::bad_alloc);
  mempool::testing::fail_os_maps_after(-1);
  ASSERT_FALSE(live.empty());
  for (std::size_t i = 0; i < live.size(); ++i) {
    ASSERT_EQ(static_cast<unsigned char*>(live[i])[1023], i & 0xff);
  }
  for (void* p : live)
    pool.deallocate(p);
}

TEST(ConcurrentFixedPool, LiveBlocksCountsEveryThread) {
  ConcurrentFixedPool pool(64);
  std::vector<void*> mine;
  for (int i = 0; i < 1000; ++i)
    mine.push_back(pool.allocate());
  EXPECT_EQ(pool.live_blocks(), 1000u);
  std::thread other([&] {
    for (int i = 0; i < 500; ++i)
      pool.deallocate(mine[i]);  // frees by another thread
    for (int i = 0; i < 300; ++i)
      (void)pool.allocate();  // left live
  });
  other.join();
  EXPECT_EQ(pool.live_blocks(), 800u);
  for (int i = 500; i < 1000; ++i)
    pool.deallocate(mine[i]);
  EXPECT_EQ(pool.live_blocks(), 300u);
}

// Chunks whose blocks are all free go back to the OS; chunks with a live block
// stay, and the live blocks keep their contents.
TEST(ConcurrentFixedPool, ReleaseUnmapsFreeChunksOnly) {
  ConcurrentFixedPool pool(64);
  std::vector<void*> pinned;
  std::thread worker([&] {
    std::vector<void*> v;
    for (int i = 0; i < 100000; ++i)
      v.push_back(pool.allocate());
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i < 20000 && i % 4000 == 0) {
        std::memset(v[i], static_cast<int>(i / 4000 + 1), 64);
        pinned.push_back(v[i]);  // a few live blocks in the first chunks
      } else {
        pool.deallocate(v[i]);
      }
    }
  });  // exiting hands the worker's shard to the depot
  worker.join();
  const std::size_t reserved = pool.bytes_reserved();
  const std::size_t mapped = mempool::testing::os_bytes_mapped();
  const std::size_t released = pool.release();
  EXPECT_GT(released, reserved / 2);
  EXPECT_EQ(pool.bytes_reserved(), reserved - released);
  EXPECT_EQ(mempool::testing::os_bytes_mapped(), mapped - released);
  EXPECT_EQ(pool.live_blocks(), pinned.size());
  for (std::size_t k = 0; k < pinned.size(); ++k) {
    EXPECT_TRUE(pool.owns(pinned[k]));
    EXPECT_EQ(static_cast<unsigned char*>(pinned[k])[63], k + 1);
  }
  // Still a working pool: the blocks left in the depot and fresh chunks.
  std::vector<void*> again;
  for (int i = 0; i < 50000; ++i) {
    again.push_back(pool.allocate());
    std::memset(again.back(), 0x3c, 64);
  }
  for (std::size_t k = 0; k < pinned.size(); ++k) {
    EXPECT_EQ(static_cast<unsigned char*>(pinned[k])[0], k + 1);
  }
  for (void* p : again)
    pool.deallocate(p);
  for (void* p : pinned)
    pool.deallocate(p);
  EXPECT_EQ(pool.live_blocks(), 0u);
  // All free, this thread's shard included: only the chunk still being carved stays.
  (void)pool.release();
  EXPECT_LE(pool.bytes_reserved(), std::size_t{1} << 20);
}

TEST(ConcurrentFixedPool, BadArguments) {
  EXPECT_THROW(ConcurrentFixedPool(0), std::invalid_argument);
  EXPECT_THROW(ConcurrentFixedPool(64, 12), std::invalid_argument);
  EXPECT_THROW(ConcurrentFixedPool(std::size_t{1} << 40), std::length_error);
}

TEST(ConcurrentFixedPool, DestructionUnmapsEverything) {
  const std::size_t before = mempool::testing::os_bytes_mapped();
  {
    ConcurrentFixedPool pool(64);
    for (int i = 0; i < 50000; ++i)
      (void)pool.allocate();
    EXPECT_GT(mempool::testing::os_bytes_mapped(), before);
  }
  EXPECT_EQ(mempool::testing::os_bytes_mapped(), before);
}

}  // namespace
}  // namespace mempool
