// 8 threads hammer one pool: each block gets a pattern naming its owner, which is
// checked before the block is freed, and a third of the blocks are handed to
// another thread to free. A bare-pointer lock-free list gives the same block to
// two threads here (a pattern mismatch) or crashes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "mempool/bitmap_pool.hpp"
#include "mempool/concurrent_fixed_pool.hpp"
#include "mempool/detail/os.hpp"
#include "mempool/size_class_pool.hpp"
#include "support/test_support.hpp"

namespace mempool {
namespace {

constexpr int kThreads = 8;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kOpsPerThread = 60000;
#else
constexpr int kOpsPerThread = 400000;
#endif

// Blocks in flight between threads: each thread may free what others allocated.
using Exchange = mempool_test::HandOff<void*>;

// The pattern covers the first 8 words and the last word of a block: enough to
// catch two owners of one block, cheap enough for 4 KiB blocks.
void fill(void* p, std::size_t size, std::uint64_t tag) {
  auto* w = static_cast<std::uint64_t*>(p);
  const std::size_t words = size / 8;
  for (std::size_t i = 0; i < words && i < 8; ++i)
    w[i] = tag + i;
  w[words - 1] = tag + words - 1;
}

bool intact(const void* p, std::size_t size, std::uint64_t tag) {
  const auto* w = static_cast<const std::uint64_t*>(p);
  const std::size_t words = size / 8;
  for (std::size_t i = 0; i < words && i < 8; ++i) {
    if (w[i] != tag + i) return false;
  }
  return w[words - 1] == tag + words - 1;
}

struct Held {
  void* p;
  std::uint64_t tag;
};

// alloc(): a block or nullptr (pool full); release(p): frees it.
template <class Alloc, class Release>
void hammer(std::size_t size, Alloc alloc, Release release) {
  Exchange exchange;
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) * 7919 + 1);
      std::vector<Held> mine;
      std::uint64_t serial = static_cast<std::uint64_t>(t) << 48;
      for (int op = 0; op < kOpsPerThread; ++op) {
        const unsigned r = static_cast<unsigned>(rng() % 8);
        if (r < 4 || mine.empty()) {
          void* p = alloc();
          if (p == nullptr) continue;  // a fixed-capacity pool may be full
          const std::uint64_t tag = ++serial << 8;
          fill(p, size, tag);
          mine.push_back({p, tag});
        } else {
          const std::size_t i = rng() % mine.size();
          const Held h = mine[i];
          mine[i] = mine.back();
          mine.pop_back();
          if (!intact(h.p, size, h.tag)) ++corrupted;
          if (r == 7) {
            exchange.put(h.p);  // someone else frees it
          } else {
            release(h.p);
          }
        }
        if (op % 16 == 0) {
          if (void* p = exchange.try_take().value_or(nullptr)) release(p);
        }
      }
      for (const Held& h : mine) {
        if (!intact(h.p, size, h.tag)) ++corrupted;
        release(h.p);
      }
    });
  }
  for (auto& th : threads)
    th.join();
  for (void* p : exchange.drain())
    release(p);
  EXPECT_EQ(corrupted.load(), 0);
}

TEST(Stress, ConcurrentFixedPoolCrossThreadFrees) {
  ConcurrentFixedPool pool(64);
  hammer(
      64, [&] { return pool.allocate(); }, [&](void* p) { pool.deallocate(p); });
}

TEST(Stress, ConcurrentFixedPoolSmallBlocks) {
  ConcurrentFixedPool pool(8);
  hammer(
      8, [&] { return pool.allocate(); }, [&](void* p) { pool.deallocate(p); });
}

// release() runs again and again while 8 threads allocate, free and hand blocks
// across: it may only unmap chunks nobody holds a block of (a wrong unmap is a
// crash or a corrupted pattern here). What it reports is what it unmapped: whole
// pages each time, and once the threads are gone the pool's bytes reserved are
// exactly what the OS layer holds mapped for it, and the last release() gives back
// all of them but the chunk still being carved (every block is free and in the
// depot: the threads' shards went there when they exited).
TEST(Stress, ConcurrentFixedPoolReleaseUnderLoad) {
  ConcurrentFixedPool pool(128);
  // The pool's own bookkeeping (its shard table) is mapped by now; chunks come later.
  const std::size_t mapped_empty = mempool::testing::os_bytes_mapped();
  ASSERT_EQ(pool.bytes_reserved(), 0u);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::atomic<bool> done{false};
  std::size_t released = 0;
  std::size_t releases_with_bytes = 0;
  std::size_t not_whole_pages = 0;
  std::thread releaser([&] {
    while (!done.load()) {
      const std::size_t r = pool.release();
      released += r;
      releases_with_bytes += r != 0 ? 1 : 0;
      not_whole_pages += r % page != 0 ? 1 : 0;
      std::this_thread::yield();
    }
  });
  hammer(
      128, [&] { return pool.allocate(); }, [&](void* p) { pool.deallocate(p); });
  done = true;
  releaser.join();
  EXPECT_EQ(pool.live_blocks(), 0u);
  EXPECT_EQ(not_whole_pages, 0u);
  const std::size_t reserved = pool.bytes_reserved();
  EXPECT_GT(reserved, 0u);
  EXPECT_EQ(mempool::testing::os_bytes_mapped() - mapped_empty, reserved)
      << "the pool's bytes reserved are not what the OS layer has mapped for its chunks";
  // Every chunk goes but the one still being carved (chunk_arena.hpp), which is at most
  // 1 MiB (chunks double up to kMaxChunkBytes, 1 MiB; 128-byte blocks ask no more).
  constexpr std::size_t kLargestChunk = std::size_t{1} << 20;
  const std::size_t last = pool.release();
  const std::size_t kept = pool.bytes_reserved();
  EXPECT_EQ(last + kept, reserved) << "release() said it unmapped what it did not";
  EXPECT_LE(kept, kLargestChunk) << "a chunk of free blocks was kept";
  EXPECT_EQ(mempool::testing::os_bytes_mapped() - mapped_empty, kept);
  EXPECT_EQ(pool.release(), 0u) << "nothing more to give back";
  std::printf("released %zu bytes in %zu calls while under load; %zu at the end, %zu kept\n",
              released, releases_with_bytes, last, kept);
}

// Large blocks make small batches (8 blocks, a shard holds 16), so blocks cross
// the lock-free depot all the time: the ABA-safe stack under real contention.
TEST(Stress, ConcurrentFixedPoolDepotTraffic) {
  ConcurrentFixedPool pool(4096);
  ASSERT_EQ(pool.batch_size(), 8u);
  hammer(
      4096, [&] { return pool.allocate(); }, [&](void* p) { pool.deallocate(p); });
}

TEST(Stress, BitmapPoolCrossThreadFrees) {
  // Small enough to run full: allocate must answer nullptr, never a taken block.
  BitmapPool pool(64, 2000);
  hammer(
      64, [&] { return pool.allocate(); }, [&](void* p) { pool.deallocate(p); });
  EXPECT_EQ(pool.in_use(), 0u);
  for (std::size_t i = 0; i < pool.capacity(); ++i)
    ASSERT_NE(pool.allocate(), nullptr);
}

// Threads fill and drain a shared three-level BitmapPool in bursts, so whole
// groups of 4096 blocks empty and refill while others walk the summaries. A
// summary bit left set over an empty word once made claims walk forever here
// (the test then hangs until ctest's timeout).
TEST(Stress, BitmapPoolSummaryChurn) {
  BitmapPool pool(24, 131072);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<void*> live;
      for (int round = 0; round < 6; ++round) {
        for (int i = 0; i < 10000; ++i)
          live.push_back(pool.allocate());
        for (void* p : live) {
          if (p == nullptr || !pool.try_deallocate(p)) ++failures;
        }
        live.clear();
        for (int i = 0; i < 5000; ++i)
          live.push_back(pool.allocate());
        for (int r = 0; r < 2000; ++r) {
          const std::size_t k = rng() % live.size();
          pool.deallocate(live[k]);
          live[k] = pool.allocate();
          if (live[k] == nullptr) ++failures;
        }
        for (void* p : live)
          pool.deallocate(p);
        live.clear();
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(failures.load(), 0) << "8 x 10,000 blocks always fit in 131,072";
  EXPECT_EQ(pool.in_use(), 0u);
}

// 8 threads allocate blocks of random classes from the global SizeClassPool,
// write a pattern, and hand a third of them to other threads, which check the
// pattern and free them with the size they were allocated with.
TEST(Stress, SizeClassPoolRandomClassesAcrossThreads) {
  SizeClassPool& pool = SizeClassPool::global();
  struct Block {
    void* p;
    std::size_t n;
    std::uint64_t tag;
  };
  std::mutex m;
  std::vector<Block> handed;
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 99);
      std::vector<Block> mine;
      for (int op = 0; op < kOpsPerThread / 4; ++op) {
        if (rng() % 2 == 0 || mine.empty()) {
          const std::size_t n = 8 + 8 * (rng() % 64);  // whole words: 8 .. 512
          const std::uint64_t tag =
              (static_cast<std::uint64_t>(t) << 56) + static_cast<std::uint64_t>(op);
          void* p = pool.allocate(n);
          fill(p, n, tag);
          mine.push_back({p, n, tag});
          continue;
        }
        const std::size_t i = rng() % mine.size();
        const Block b = mine[i];
        mine[i] = mine.back();
        mine.pop_back();
        if (rng() % 3 == 0) {
          std::lock_guard<std::mutex> lock(m);
          handed.push_back(b);
        } else {
          if (!intact(b.p, b.n, b.tag)) ++corrupted;
          pool.deallocate(b.p, b.n);
        }
        if (op % 8 == 0) {
          Block other{};
          {
            std::lock_guard<std::mutex> lock(m);
            if (handed.empty()) continue;
            other = handed.back();
            handed.pop_back();
          }
          if (!intact(other.p, other.n, other.tag)) ++corrupted;
          pool.deallocate(other.p, other.n);
        }
      }
      for (const Block& b : mine) {
        if (!intact(b.p, b.n, b.tag)) ++corrupted;
        pool.deallocate(b.p, b.n);
      }
    });
  }
  for (auto& th : threads)
    th.join();
  for (const Block& b : handed) {
    if (!intact(b.p, b.n, b.tag)) ++corrupted;
    pool.deallocate(b.p, b.n);
  }
  EXPECT_EQ(corrupted.load(), 0);
}

// Short-lived threads, each using the pool for a moment: slots are recycled,
// the memory stays bounded, and an exited thread's blocks are not stranded.
TEST(Stress, ConcurrentFixedPoolThreadChurn) {
  ConcurrentFixedPool pool(256);
  std::size_t reserved_after_first_wave = 0;
  for (int wave = 0; wave < 40; ++wave) {
    std::barrier peak(8);  // every wave reaches the same peak: 8 x 500 blocks
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        std::vector<void*> v;
        for (int i = 0; i < 500; ++i)
          v.push_back(pool.allocate());
        peak.arrive_and_wait();
        for (void* p : v)
          pool.deallocate(p);
      });
    }
    for (auto& th : threads)
      th.join();
    if (wave == 0) reserved_after_first_wave = pool.bytes_reserved();
  }
  EXPECT_LE(pool.bytes_reserved(), 2 * reserved_after_first_wave);
  // Every thread has exited: this one thread can now have every block the pool
  // holds without the pool growing.
  const std::size_t reserved = pool.bytes_reserved();
  std::vector<void*> all(reserved / pool.block_size());
  for (void*& p : all)
    p = pool.allocate();
  EXPECT_EQ(pool.bytes_reserved(), reserved) << "blocks were stranded in exited threads' shards";
  for (void* p : all)
    pool.deallocate(p);
}

// More threads alive at once than there are shards: the extra threads share the
// depot directly and everything still balances.
TEST(Stress, MoreThreadsThanShards) {
  ConcurrentFixedPool pool(32);
  std::atomic<int> corrupted{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 300; ++t) {
    threads.emplace_back([&, t] {
      void* p = pool.allocate();
      fill(p, 32, static_cast<std::uint64_t>(t) << 16);
      ready.fetch_add(1);
      while (ready.load() < 300)
        std::this_thread::yield();
      for (int i = 0; i < 50; ++i) {
        void* q = pool.allocate();
        fill(q, 32, 99);
        pool.deallocate(q);
      }
      if (!intact(p, 32, static_cast<std::uint64_t>(t) << 16)) ++corrupted;
      pool.deallocate(p);
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(corrupted.load(), 0);
}

}  // namespace
}  // namespace mempool
