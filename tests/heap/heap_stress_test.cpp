// The heap under 16 threads: mixed sizes (mostly small, some up to 1 MiB), blocks
// freed by other threads (including threads that start after the allocating one
// has exited), threads created and joined in waves, collect() and stats() running
// alongside. Every block carries a pattern derived from its address and size,
// checked before it is freed or reallocated: a block handed out twice, or memory
// the heap wrote into while it was live, shows up as a mismatch.
//
// MEMPOOL_HEAP_STRESS_PERCENT (default 100) scales the work; the sanitizer
// builds run a third of it.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "heap_test_util.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"

namespace mempool {
namespace {

using heap_test::kKiB;
using heap_test::kMiB;
using heap_test::pattern_word;

constexpr int kThreads = 16;

// Operations per thread, scaled for the build and by the environment.
int scaled(int release_count) {
  int percent = 100;
  if (const char* env = std::getenv("MEMPOOL_HEAP_STRESS_PERCENT")) percent = std::atoi(env);
  long n = static_cast<long>(release_count) * percent / 100;
  if (heap_test::kSanitized) n /= 3;
  return static_cast<int>(n < 1 ? 1 : n);
}

struct Block {
  void* p;
  std::size_t n;
  std::size_t alignment;  // 0: none asked
};

std::uint64_t seed_of(const void* p, std::size_t n) {
  return reinterpret_cast<std::uintptr_t>(p) ^ (std::uint64_t{n} << 40);
}

// The pattern covers a whole block up to 512 bytes; of a bigger one the first and
// the last 64 bytes and one word in every 4 KiB (so every page is touched).
template <class F>
void for_each_pattern_word(std::size_t n, F&& f) {
  const std::size_t words = n / 8;
  if (n <= 512) {
    for (std::size_t i = 0; i < words; ++i)
      f(i);
    return;
  }
  for (std::size_t i = 0; i < 8; ++i)
    f(i);
  for (std::size_t i = 512; i < words - 8; i += 512)
    f(i);
  for (std::size_t i = words - 8; i < words; ++i)
    f(i);
}

void fill(const Block& b) {
  auto* w = static_cast<unsigned char*>(b.p);
  const std::uint64_t seed = seed_of(b.p, b.n);
  for_each_pattern_word(b.n, [&](std::size_t i) {
    const std::uint64_t v = pattern_word(seed, i);
    std::memcpy(w + 8 * i, &v, 8);
  });
  if (b.n % 8 != 0) w[b.n - 1] = static_cast<unsigned char>(seed);
}

// Checks the pattern of b (written for a block at `written_at` of `written_n`
// bytes) over its first `limit` bytes; "" when intact.
std::string check(const void* p, const void* written_at, std::size_t written_n, std::size_t limit) {
  const auto* w = static_cast<const unsigned char*>(p);
  const std::uint64_t seed = seed_of(written_at, written_n);
  std::size_t bad = SIZE_MAX;
  for_each_pattern_word(written_n, [&](std::size_t i) {
    if (bad != SIZE_MAX || 8 * i + 8 > limit) return;
    std::uint64_t v;
    std::memcpy(&v, w + 8 * i, 8);
    if (v != pattern_word(seed, i)) bad = 8 * i;
  });
  if (bad == SIZE_MAX && written_n % 8 != 0 && written_n <= limit &&
      w[written_n - 1] != static_cast<unsigned char>(seed)) {
    bad = written_n - 1;
  }
  if (bad == SIZE_MAX) return {};
  char msg[160];
  std::snprintf(msg, sizeof msg, "block %p of %zu bytes (written at %p) changed at offset %zu", p,
                written_n, written_at, bad);
  return msg;
}

class Failures {
 public:
  void record(const std::string& what) {
    if (what.empty()) return;
    std::lock_guard<std::mutex> lock(m_);
    if (first_.empty()) first_ = what;
    ++count_;
  }
  [[nodiscard]] int count() {
    std::lock_guard<std::mutex> lock(m_);
    return count_;
  }
  [[nodiscard]] std::string first() {
    std::lock_guard<std::mutex> lock(m_);
    return first_;
  }

 private:
  std::mutex m_;
  std::string first_;
  int count_ = 0;
};

// 8 bytes to 64 KiB, mostly small; 1 in 100 up to 1 MiB.
std::size_t random_size(std::mt19937_64& rng) {
  const unsigned r = static_cast<unsigned>(rng() % 100);
  if (r < 75) return 8 + rng() % 505;
  if (r < 93) return 513 + rng() % (8 * kKiB - 512);
  if (r < 99) return 8 * kKiB + rng() % (56 * kKiB + 1);
  return 64 * kKiB + rng() % (960 * kKiB + 1);
}

// Allocates n bytes through one of the six calls; calloc'd blocks are checked
// to be zero where the pattern will go.
Block allocate_block(std::mt19937_64& rng, Failures& failures) {
  const std::size_t n = random_size(rng);
  const unsigned how = static_cast<unsigned>(rng() % 16);
  Block b{nullptr, n, 0};
  switch (how) {
    case 0:
    case 1:
    case 2:
    case 3:
      b.p = allocate(n);
      break;
    case 4:
    case 5:
    case 6:
      b.p = try_allocate(n);
      break;
    case 7:
    case 8:
    case 9:
    case 10:
      b.p = mp_malloc(n);
      break;
    case 11:
    case 12: {
      b.p = mp_calloc(1, n);
      if (b.p == nullptr) break;
      const auto* c = static_cast<const unsigned char*>(b.p);
      bool zero = true;
      for_each_pattern_word(n, [&](std::size_t i) {
        std::uint64_t v;
        std::memcpy(&v, c + 8 * i, 8);
        zero = zero && v == 0;
      });
      if (!zero || c[n - 1] != 0) failures.record("calloc returned a block that is not zeroed");
      break;
    }
    case 13:
    case 14:
      b.alignment = 64;
      b.p = allocate(n, std::align_val_t{64});
      break;
    default:
      b.alignment = 4096;
      b.p = mp_aligned_alloc(4096, n);
      break;
  }
  if (b.p == nullptr) {
    failures.record("allocation of " + std::to_string(n) + " bytes failed");
    return b;
  }
  const std::size_t align = b.alignment != 0 ? b.alignment : n >= 16 ? 16 : 8;
  if (reinterpret_cast<std::uintptr_t>(b.p) % align != 0) {
    char msg[128];
    std::snprintf(msg, sizeof msg, "block %p of %zu bytes (call %u) is not %zu-byte aligned", b.p,
                  n, how, align);
    failures.record(msg);
  }
  if (usable_size(b.p) < n) failures.record("usable_size below the size asked");
  fill(b);
  return b;
}

// Checks b and frees it through one of the free calls that fit how it was made.
void free_block(const Block& b, std::mt19937_64& rng, Failures& failures) {
  failures.record(check(b.p, b.p, b.n, b.n));
  switch (rng() % 3) {
    case 0:
      deallocate(b.p);
      break;
    case 1:
      if (b.alignment != 0) {
        deallocate(b.p, b.n, std::align_val_t{b.alignment});
      } else {
        deallocate(b.p, b.n);
      }
      break;
    default:
      mp_free(b.p);
      break;
  }
}

// Reallocates b to a new random size; the prefix both sizes share keeps its
// pattern.
Block realloc_block(const Block& b, std::mt19937_64& rng, Failures& failures) {
  const std::size_t m = random_size(rng);
  failures.record(check(b.p, b.p, b.n, b.n));
  void* q = mp_realloc(b.p, m);
  if (q == nullptr) {
    failures.record("realloc to " + std::to_string(m) + " bytes failed");
    return b;
  }
  failures.record(check(q, b.p, b.n, std::min(b.n, m)));
  Block nb{q, m, 0};
  fill(nb);
  return nb;
}

// A mutex-protected box of blocks that some thread slot frees next.
struct Inbox {
  std::mutex m;
  std::vector<Block> items;

  void put(const Block& b) {
    std::lock_guard<std::mutex> lock(m);
    items.push_back(b);
  }
  std::vector<Block> take_all() {
    std::lock_guard<std::mutex> lock(m);
    std::vector<Block> out;
    out.swap(items);
    return out;
  }
};

// Takes block i out of `mine` (the last one takes its place).
Block take(std::vector<Block>& mine, std::size_t i) {
  const Block b = mine[i];
  mine[i] = mine.back();
  mine.pop_back();
  return b;
}

// Frees every block in the inbox.
void free_inbox(Inbox& box, std::mt19937_64& rng, Failures& failures) {
  for (const Block& b : box.take_all())
    free_block(b, rng, failures);
}

// Frees what is left in every inbox, once the threads are gone.
template <std::size_t N>
void free_inboxes(std::array<Inbox, N>& inboxes, Failures& failures) {
  std::mt19937_64 rng(1);
  for (Inbox& box : inboxes)
    free_inbox(box, rng, failures);
}

// 16 threads per wave, waves one after the other. Each thread allocates,
// reallocates, frees its own blocks, sends a quarter of them to another slot's
// inbox, and frees what arrives in its own; when it exits, its live blocks go to
// the inboxes, for threads of the next wave to free. A 17th thread calls
// collect() and stats() all along.
TEST(HeapStress, MixedSizesCrossThreadFreesAndThreadChurn) {
  const std::size_t in_use_before = stats().bytes_in_use;
  const int waves = heap_test::kSanitized ? 3 : 5;
  const int ops = scaled(30000);
  std::array<Inbox, kThreads> inboxes;
  Failures failures;
  std::atomic<bool> done{false};
  std::atomic<long> collects{0};
  std::thread collector([&] {
    while (!done.load()) {
      collect();
      const HeapStats s = stats();
      if (s.class_count == 0) failures.record("stats() under load: no classes");
      collects.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  for (int wave = 0; wave < waves; ++wave) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t, wave] {
        std::mt19937_64 rng(static_cast<std::uint64_t>(wave * kThreads + t) * 1000003 + 17);
        std::vector<Block> mine;
        for (int op = 0; op < ops; ++op) {
          const unsigned r = static_cast<unsigned>(rng() % 32);
          if (mine.empty() || (r < 15 && mine.size() < 256)) {
            const Block b = allocate_block(rng, failures);
            if (b.p != nullptr) mine.push_back(b);
          } else {
            const std::size_t i = rng() % mine.size();
            if (r < 17) {
              mine[i] = realloc_block(mine[i], rng, failures);
              continue;
            }
            const Block b = take(mine, i);
            if (r < 24) {
              failures.record(check(b.p, b.p, b.n, b.n));
              inboxes[(t + 1 + rng() % (kThreads - 1)) % kThreads].put(b);
            } else {
              free_block(b, rng, failures);
            }
          }
          if (op % 32 == 0) free_inbox(inboxes[t], rng, failures);
        }
        // Left to the next wave: blocks outlive the thread that allocated them.
        for (const Block& b : mine)
          inboxes[rng() % kThreads].put(b);
      });
    }
    for (auto& th : threads)
      th.join();
  }
  done = true;
  collector.join();
  free_inboxes(inboxes, failures);
  EXPECT_EQ(failures.count(), 0) << failures.first();
  EXPECT_GT(collects.load(), 0);
  EXPECT_EQ(stats().bytes_in_use, in_use_before) << "bytes in use after every block was freed";
}

// The soft memory limit under threads: with a limit every growth is above, each
// growth gives back the page heap's free pages and, once per step, the growing
// thread's cache and the central cache's batches, while 4 threads allocate and
// free each other's blocks and a 5th reads stats(). Nothing fails, no block
// changes, the limit is reached.
TEST(HeapStress, MemoryLimitUnderThreads) {
  constexpr int kWorkers = 4;
  const int ops = scaled(20000);
  collect();  // every free page given back: the first span the workers need is a growth
  const std::size_t hits_before = stats().memory_limit_hits;
  set_memory_limit(1);
  std::array<Inbox, kWorkers> inboxes;
  Failures failures;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const HeapStats s = stats();
      if (s.memory_limit != 1) failures.record("stats() under load: the limit changed");
      if (s.bytes_resident > s.bytes_mapped || s.bytes_direct > s.bytes_in_use)
        failures.record("stats() under load: resident or direct bytes out of bounds");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kWorkers; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) * 7919 + 3);
      std::vector<Block> mine;
      for (int op = 0; op < ops; ++op) {
        if (mine.size() < 512 && rng() % 3 != 0) {
          const Block b = allocate_block(rng, failures);
          if (b.p != nullptr) mine.push_back(b);
        } else if (!mine.empty()) {
          const Block b = take(mine, rng() % mine.size());
          if (rng() % 4 == 0) {
            inboxes[(t + 1) % kWorkers].put(b);
          } else {
            free_block(b, rng, failures);
          }
        }
        if (op % 64 == 0) free_inbox(inboxes[t], rng, failures);
      }
      for (const Block& b : mine)
        free_block(b, rng, failures);
    });
  }
  for (auto& th : workers)
    th.join();
  done = true;
  reader.join();
  free_inboxes(inboxes, failures);
  const HeapStats after = stats();
  set_memory_limit(0);
  EXPECT_EQ(failures.count(), 0) << failures.first();
  EXPECT_GT(after.memory_limit_hits, hits_before);
  EXPECT_EQ(memory_limit(), 0u);
}

// 8 producers allocate, 8 consumers free: every free is of a block another
// thread allocated, through a bounded queue.
TEST(HeapStress, ProducersAndConsumers) {
  const int per_producer = scaled(40000);
  constexpr int kProducers = 8;
  constexpr int kConsumers = 8;
  std::mutex m;
  std::condition_variable not_empty;
  std::condition_variable not_full;
  std::deque<Block> queue;
  int producers_left = kProducers;
  Failures failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kProducers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 5);
      for (int i = 0; i < per_producer; ++i) {
        const Block b = allocate_block(rng, failures);
        if (b.p == nullptr) continue;
        std::unique_lock<std::mutex> lock(m);
        not_full.wait(lock, [&] { return queue.size() < 4096; });
        queue.push_back(b);
        not_empty.notify_one();
      }
      std::lock_guard<std::mutex> lock(m);
      if (--producers_left == 0) not_empty.notify_all();
    });
  }
  for (int t = 0; t < kConsumers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 500);
      for (;;) {
        std::vector<Block> got;
        {
          std::unique_lock<std::mutex> lock(m);
          not_empty.wait(lock, [&] { return !queue.empty() || producers_left == 0; });
          if (queue.empty()) return;
          for (int k = 0; k < 64 && !queue.empty(); ++k) {
            got.push_back(queue.front());
            queue.pop_front();
          }
          not_full.notify_all();
        }
        for (const Block& b : got)
          free_block(b, rng, failures);
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_TRUE(queue.empty());
  EXPECT_EQ(failures.count(), 0) << failures.first();
}

// Many short-lived threads in waves of 8, each leaving half its blocks to the
// next wave: the thread caches go with their threads, the blocks they held are
// reused (the mapping stays bounded), and everything balances at the end.
TEST(HeapStress, ShortLivedThreadsInWaves) {
  const HeapStats before = stats();
  const int waves = heap_test::kSanitized ? 25 : 100;
  std::mutex m;
  std::vector<Block> handed;
  Failures failures;
  std::size_t mapped_after_warmup = 0;
  for (int wave = 0; wave < waves; ++wave) {
    std::vector<Block> from_last_wave;
    {
      std::lock_guard<std::mutex> lock(m);
      from_last_wave.swap(handed);
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t, wave] {
        std::mt19937_64 rng(static_cast<std::uint64_t>(wave) * 8 + static_cast<std::uint64_t>(t));
        // Free a share of what the last wave left.
        for (std::size_t i = static_cast<std::size_t>(t); i < from_last_wave.size(); i += 8)
          free_block(from_last_wave[i], rng, failures);
        std::vector<Block> mine;
        for (int i = 0; i < 200; ++i) {
          Block b{nullptr, 8 + rng() % 2000, 0};
          b.p = mp_malloc(b.n);
          if (b.p == nullptr) {
            failures.record("mp_malloc failed");
            continue;
          }
          fill(b);
          mine.push_back(b);
        }
        for (std::size_t i = 1; i < mine.size(); i += 2)
          free_block(mine[i], rng, failures);
        std::lock_guard<std::mutex> lock(m);
        for (std::size_t i = 0; i < mine.size(); i += 2)
          handed.push_back(mine[i]);
      });
    }
    for (auto& th : threads)
      th.join();
    if (wave == 4) mapped_after_warmup = stats().bytes_mapped;
  }
  std::mt19937_64 rng(3);
  for (const Block& b : handed)
    free_block(b, rng, failures);
  EXPECT_EQ(failures.count(), 0) << failures.first();
  const HeapStats after = stats();
  EXPECT_LE(after.thread_caches, before.thread_caches + 1)
      << "caches of exited threads are still counted";
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_LE(after.bytes_mapped, 2 * mapped_after_warmup + 8 * kMiB)
      << "the mapping kept growing with the number of threads that came and went";
}

}  // namespace
}  // namespace mempool
