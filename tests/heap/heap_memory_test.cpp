// The heap's use of memory, each test in a process of its own: resident memory
// after many short-lived threads and after collect(), out of memory under
// RLIMIT_AS, the soft memory limit, and fork while other threads allocate.
//
// The resident-memory tests run in a fresh process (a re-executed death-test
// child), so nothing another test did to the heap shows in their numbers. The
// children report a failure on stderr and exit with a non-zero status.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <new>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "heap_test_util.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"

namespace mempool {
namespace {

using heap_test::fill_pattern;
using heap_test::first_mismatch;
using heap_test::kKiB;
using heap_test::kMiB;
using heap_test::kNoMismatch;

using mempool_test::say;

double mib(std::size_t bytes) {
  return static_cast<double>(bytes) / static_cast<double>(kMiB);
}

// ---- Resident memory ---------------------------------------------------------

// 200 threads, 4 at a time, each allocating 2,000 blocks of 1 KiB, freeing them
// all and exiting: what the exited threads cached must not pile up.
[[noreturn]] void short_lived_threads_child() {
  const std::size_t before = heap_test::resident_bytes();
  constexpr int kThreadsInAll = 200;
  constexpr int kAtOnce = 4;
  for (int started = 0; started < kThreadsInAll; started += kAtOnce) {
    std::vector<std::thread> wave;
    for (int t = 0; t < kAtOnce; ++t) {
      wave.emplace_back([] {
        std::vector<void*> blocks(2000);
        for (void*& p : blocks) {
          p = mp_malloc(kKiB);
          CHILD_CHECK(p != nullptr, "mp_malloc(1 KiB) failed");
          std::memset(p, 0x5c, kKiB);
        }
        for (void* p : blocks)
          mp_free(p);
      });
    }
    for (std::thread& th : wave)
      th.join();
  }
  const std::size_t after = heap_test::resident_bytes();
  const HeapStats s = stats();
  say("resident: %.1f MiB before, %.1f MiB after 200 threads; heap: %.1f MiB mapped, "
      "%.1f MiB in thread caches, %.1f MiB in the central cache, %zu thread caches",
      mib(before), mib(after), mib(s.bytes_mapped), mib(s.bytes_in_thread_caches),
      mib(s.bytes_in_central_cache), s.thread_caches);
  CHILD_CHECK(before > 0 && after > 0, "VmRSS unreadable");
  CHILD_CHECK(after < before + 32 * kMiB, "resident memory grew by %.1f MiB (limit 32 MiB)",
              mib(after - before));
  CHILD_CHECK(s.thread_caches <= 1, "%zu thread caches after every thread but main exited",
              s.thread_caches);
  CHILD_CHECK(s.bytes_in_use == 0, "%zu bytes still in use", s.bytes_in_use);
  ::_exit(0);
}

TEST(HeapMemory, ShortLivedThreadsLeaveLittleResident) {
  if (heap_test::kSanitized) GTEST_SKIP() << "shadow memory makes resident sizes meaningless";
  IN_FRESH_PROCESS(short_lived_threads_child());
}

// 256 MiB in mixed sizes, all touched, all freed, collect(): resident memory is
// back within 10% + 8 MiB of where it started.
[[noreturn]] void collect_returns_memory_child() {
  const std::size_t before = heap_test::resident_bytes();
  static constexpr std::size_t kSizes[] = {
      16,       24,   48,    64,    100,   128,    256,    500,    1024,   2000,
      4096,     6000, 10000, 20000, 40000, 100000, 200000, 300000, 700000, 1500000,
      3 * kMiB, 32,   80,    160,   333,   777,    3000,   12000,  60000,  250000};
  std::vector<void*> blocks;
  blocks.reserve(200000);
  std::size_t total = 0;
  std::mt19937_64 rng(42);
  while (total < 256 * kMiB) {
    // Sizes drawn so that small blocks hold about half the bytes.
    const std::size_t n = (rng() % 2 == 0) ? kSizes[rng() % 10] : kSizes[rng() % std::size(kSizes)];
    void* p = mp_malloc(n);
    CHILD_CHECK(p != nullptr, "mp_malloc(%zu) failed", n);
    std::memset(p, 0x3d, n);
    blocks.push_back(p);
    total += n;
  }
  const std::size_t peak = heap_test::resident_bytes();
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (void* p : blocks)
    mp_free(p);
  blocks.clear();
  blocks.shrink_to_fit();
  collect();
  const std::size_t after = heap_test::resident_bytes();
  const HeapStats s = stats();
  say("resident: %.1f MiB before, %.1f MiB with 256 MiB live, %.1f MiB after free and "
      "collect; heap: %.1f MiB mapped, %.1f MiB returned to the OS, %.1f MiB free in the page "
      "heap, %.1f MiB in the central cache, %.1f MiB metadata",
      mib(before), mib(peak), mib(after), mib(s.bytes_mapped), mib(s.bytes_returned_to_os),
      mib(s.bytes_free_in_page_heap), mib(s.bytes_in_central_cache), mib(s.bytes_metadata));
  CHILD_CHECK(before > 0 && after > 0, "VmRSS unreadable");
  CHILD_CHECK(peak >= before + 200 * kMiB,
              "the blocks were not resident: the test measures nothing");
  CHILD_CHECK(after <= before + before / 10 + 8 * kMiB,
              "resident memory %.1f MiB after collect, limit %.1f MiB", mib(after),
              mib(before + before / 10 + 8 * kMiB));
  CHILD_CHECK(s.bytes_in_use == 0, "%zu bytes still in use", s.bytes_in_use);
  ::_exit(0);
}

TEST(HeapMemory, CollectReturnsMemory) {
  if (heap_test::kSanitized) GTEST_SKIP() << "shadow memory makes resident sizes meaningless";
  IN_FRESH_PROCESS(collect_returns_memory_child());
}

// calloc of big blocks fresh from the OS (a span of the page heap, then a
// mapping of its own) leaves their pages untouched: zeros without the resident
// set growing by their size. Dirtied, freed and calloc'd again, they are zeroed.
[[noreturn]] void big_calloc_child() {
  for (const std::size_t n : {48 * kMiB, 96 * kMiB}) {
    collect();
    const std::size_t before = heap_test::resident_bytes();
    auto* p = static_cast<unsigned char*>(mp_calloc(1, n));
    CHILD_CHECK(p != nullptr, "mp_calloc(%.0f MiB) failed", mib(n));
    const std::size_t after = heap_test::resident_bytes();
    CHILD_CHECK(after < before + 8 * kMiB, "calloc(%.0f MiB) made %.1f MiB resident", mib(n),
                mib(after - before));
    for (std::size_t i = 0; i < n; i += 4096)
      CHILD_CHECK(p[i] == 0, "byte %zu of a fresh calloc is %d", i, p[i]);
    std::memset(p, 0xee, n);
    mp_free(p);
    p = static_cast<unsigned char*>(mp_calloc(1, n));  // the same pages, resident
    CHILD_CHECK(p != nullptr, "mp_calloc(%.0f MiB) failed", mib(n));
    for (std::size_t i = 0; i < n; i += 512)
      CHILD_CHECK(p[i] == 0, "byte %zu of a reused calloc is %d", i, p[i]);
    mp_free(p);
  }
  ::_exit(0);
}

TEST(HeapMemory, BigCallocLeavesFreshPagesUntouched) {
  if (heap_test::kSanitized) GTEST_SKIP() << "shadow memory makes resident sizes meaningless";
  IN_FRESH_PROCESS(big_calloc_child());
}

// The decay (MEMPOOL_DECAY_MS=200 here), seen in the process's resident pages and not
// in the heap's counters: a 32 MiB block, written, then freed, stays resident (32 MiB is
// below the 128 MiB release threshold and the 64 MiB direct-map threshold: its pages
// wait in the page heap); 600 ms later (past 1.25 decay times, the latest a page goes
// back, with 350 ms to spare for a slow machine) one allocation of another span, the
// event that runs the decay, and no collect(): the 32 MiB are no longer resident.
[[noreturn]] void decay_child() {
  constexpr std::size_t kBlock = 32 * kMiB;
  auto* p = static_cast<unsigned char*>(mp_malloc(kBlock));
  CHILD_CHECK(p != nullptr, "mp_malloc(32 MiB) failed");
  std::memset(p, 0x3c, kBlock);
  const std::size_t written = heap_test::resident_bytes_in(p, kBlock);
  CHILD_CHECK(written == kBlock, "%.1f MiB of the 32 MiB written are resident", mib(written));
  mp_free(p);
  // Still resident: nothing is given back before the decay time (or the threshold).
  const std::size_t kept = heap_test::resident_bytes_in(p, kBlock);
  const std::size_t rss_kept = heap_test::resident_bytes();
  CHILD_CHECK(kept == kBlock, "%.1f MiB of the freed 32 MiB went back before the decay time",
              mib(kBlock - kept));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  void* other = mp_malloc(kMiB);  // a large span: the page heap's decay check runs
  CHILD_CHECK(other != nullptr, "mp_malloc(1 MiB) failed");
  const std::size_t left = heap_test::resident_bytes_in(p, kBlock);
  const std::size_t rss_left = heap_test::resident_bytes();
  say("decay: %.1f MiB of the freed 32 MiB resident after 600 ms (VmRSS %.1f -> %.1f MiB)",
      mib(left), mib(rss_kept), mib(rss_left));
  // The 1 MiB block may have been carved from those pages, untouched: 0 resident.
  CHILD_CHECK(left == 0, "%.1f MiB of the freed 32 MiB still resident after the decay time",
              mib(left));
  // VmRSS falls by the 32 MiB, less 2 MiB for what else the process touched meanwhile
  // (the 1 MiB span's metadata, stacks, the heap's bookkeeping: well under 2 MiB).
  CHILD_CHECK(heap_test::kSanitized || rss_left + 30 * kMiB <= rss_kept,
              "VmRSS fell by %.1f MiB only (32 MiB decayed)",
              mib(rss_kept - std::min(rss_kept, rss_left)));
  mp_free(other);
  ::_exit(0);
}

TEST(HeapMemory, DecayReturnsResidentPagesWithoutCollect) {
  ::setenv("MEMPOOL_DECAY_MS", "200", 1);
  IN_FRESH_PROCESS(decay_child());
  ::unsetenv("MEMPOOL_DECAY_MS");
}

// A producer thread allocates batches of 1000 blocks (16 to 1024 bytes: 16 small
// classes, 0.5 MiB a batch) and hands each to a consumer thread, which checks and frees
// them: every block is freed on the other thread, for 1000 rounds, at most 2 batches in
// flight. The producer's allocations must come from what the consumer freed (through the
// central cache), so the heap stops growing once the caches are full.
[[noreturn]] void steady_cross_thread_frees_child() {
  constexpr int kRounds = heap_test::kSanitized ? 300 : 1000;
  constexpr int kWarmRounds = 100;
  constexpr std::size_t kBatch = 1000;
  struct Batch {
    std::vector<std::pair<void*, std::size_t>> blocks;
    int round;
  };
  mempool_test::HandOff<Batch> full;
  mempool_test::HandOff<int> done;
  std::size_t mapped_warm = 0;
  std::size_t rss_warm = 0;
  std::size_t mapped_peak_after_warm = 0;
  const std::size_t mapped_start = stats().bytes_mapped;
  std::atomic<int> damaged{0};
  std::thread consumer([&] {
    while (std::optional<Batch> b = full.take()) {
      for (const auto& [p, n] : b->blocks) {
        if (first_mismatch(p, n, reinterpret_cast<std::uintptr_t>(p)) != kNoMismatch)
          damaged.fetch_add(1);
        mp_free(p);
      }
      done.put(b->round);
    }
  });
  std::thread producer([&] {
    for (int round = 0; round < kRounds; ++round) {
      if (round >= 2) (void)done.take();  // at most 2 batches in flight
      if (round == kWarmRounds) {
        mapped_warm = stats().bytes_mapped;
        rss_warm = heap_test::resident_bytes();
      }
      if (round > kWarmRounds)
        mapped_peak_after_warm = std::max(mapped_peak_after_warm, stats().bytes_mapped);
      Batch b{{}, round};
      b.blocks.reserve(kBatch);
      for (std::size_t i = 0; i < kBatch; ++i) {
        const std::size_t n = 16 + (i * 64 + static_cast<std::size_t>(round)) % 1009;
        void* p = mp_malloc(n);
        CHILD_CHECK(p != nullptr, "mp_malloc(%zu) failed", n);
        fill_pattern(p, n, reinterpret_cast<std::uintptr_t>(p));
        b.blocks.emplace_back(p, n);
      }
      full.put(std::move(b));
    }
    full.close();
  });
  producer.join();
  consumer.join();
  const std::size_t mapped_end = stats().bytes_mapped;
  const std::size_t rss_end = heap_test::resident_bytes();
  say("cross-thread frees: mapped %.1f MiB after %d rounds, %.1f MiB peak after, %.1f MiB "
      "after %d (%.1f MiB at the start); VmRSS %.1f -> %.1f MiB",
      mib(mapped_warm), kWarmRounds, mib(mapped_peak_after_warm), mib(mapped_end), kRounds,
      mib(mapped_start), mib(rss_warm), mib(rss_end));
  CHILD_CHECK(damaged.load() == 0, "%d blocks damaged between the threads", damaged.load());
  // In flight: at most 2 batches, 1000 blocks of at most 1024 bytes each: 2 MiB. Cached:
  // the two threads' caches, 8 MiB each at most (MEMPOOL_THREAD_CACHE_BYTES). The
  // central cache and partly used spans: up to 8 MiB more. 2 + 16 + 8 = 26 MiB over the
  // start, however many rounds run; a consumer's frees that the producer never got back
  // would add 0.5 MiB a round, 450 MiB over the 900 rounds after the warm-up.
  constexpr std::size_t kBound = 26 * kMiB;
  CHILD_CHECK(mapped_peak_after_warm <= mapped_start + kBound,
              "mapped %.1f MiB over the start (bound %.1f MiB)",
              mib(mapped_peak_after_warm - mapped_start), mib(kBound));
  // After the warm-up (caches full, the flow settled) growth is at most one batch in
  // flight more than was seen then, and the span granularity: 1 + 2 MiB.
  CHILD_CHECK(mapped_peak_after_warm <= mapped_warm + 3 * kMiB,
              "mapped grew by %.1f MiB after round %d (bound 3 MiB)",
              mib(mapped_peak_after_warm - mapped_warm), kWarmRounds);
  CHILD_CHECK(heap_test::kSanitized || rss_end <= rss_warm + 3 * kMiB,
              "VmRSS grew by %.1f MiB after round %d (bound 3 MiB)",
              mib(rss_end - std::min(rss_end, rss_warm)), kWarmRounds);
  ::_exit(0);
}

TEST(HeapMemory, SteadyCrossThreadFreesStayBounded) {
  IN_FRESH_PROCESS(steady_cross_thread_frees_child());
}

// ---- Out of memory -----------------------------------------------------------

// Waits for child `pid`; a failure names how it ended.
void expect_child_succeeded(pid_t pid, const char* what) {
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid) << what;
  if (WIFSIGNALED(status)) {
    ADD_FAILURE() << what << ": child killed by signal " << WTERMSIG(status)
                  << (WTERMSIG(status) == SIGALRM ? " (timed out: a deadlock?)" : "");
  } else {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << what << ": child exited with status " << WEXITSTATUS(status) << " (see its stderr)";
  }
}

// A live block and the seed of its pattern.
struct Known {
  void* p;
  std::size_t n;
  std::uint64_t seed;
};

// Allocates with `alloc` until it fails, at most `limit` times, keeping the
// blocks in `hoard` (reserved beforehand). Returns whether it failed.
template <class Alloc>
bool allocate_until_failure(std::vector<void*>& hoard, std::size_t limit, Alloc alloc) {
  for (std::size_t i = 0; i < limit; ++i) {
    errno = 0;
    void* p = alloc();
    if (p == nullptr) return true;
    CHILD_CHECK(hoard.size() < hoard.capacity(), "hoard full");
    hoard.push_back(p);
  }
  return false;
}

[[noreturn]] void out_of_memory_child() {
  alarm(60);
  std::vector<Known> known;
  std::uint64_t seed = 0;
  for (std::size_t n :
       {std::size_t{24}, std::size_t{1000}, std::size_t{70000}, std::size_t{300000}, 3 * kMiB}) {
    void* p = mp_malloc(n);
    CHILD_CHECK(p != nullptr, "mp_malloc(%zu) before the limit", n);
    fill_pattern(p, n, ++seed);
    known.push_back({p, n, seed});
  }
  std::vector<void*> hoard;
  hoard.reserve(9 * 1024 * 1024);  // before the limit: the test's own memory
  const std::size_t vsize = heap_test::virtual_bytes();
  CHILD_CHECK(vsize > 0, "VmSize unreadable");
  rlimit lim{};
  CHILD_CHECK(getrlimit(RLIMIT_AS, &lim) == 0, "getrlimit");
  lim.rlim_cur = vsize + 64 * kMiB;
  CHILD_CHECK(setrlimit(RLIMIT_AS, &lim) == 0, "setrlimit(RLIMIT_AS, %zu)", vsize + 64 * kMiB);

  // Large, page-sized and small blocks, each until the heap says no.
  CHILD_CHECK(allocate_until_failure(hoard, 16384, [] { return mp_malloc(kMiB); }),
              "16 GiB of 1 MiB blocks allocated under an address-space limit 64 MiB above use");
  CHILD_CHECK(errno == ENOMEM, "errno %d after mp_malloc(1 MiB) failed", errno);
  CHILD_CHECK(allocate_until_failure(hoard, 4 * 1024 * 1024, [] { return mp_malloc(4096); }),
              "mp_malloc(4096) never failed");
  CHILD_CHECK(errno == ENOMEM, "errno %d after mp_malloc(4096) failed", errno);
  CHILD_CHECK(allocate_until_failure(hoard, 4 * 1024 * 1024 - 1, [] { return mp_malloc(64); }),
              "mp_malloc(64) never failed");
  CHILD_CHECK(errno == ENOMEM, "errno %d after mp_malloc(64) failed", errno);
  const std::size_t hoarded = hoard.size();

  // Every call that allocates answers the same way.
  bool threw = false;
  try {
    void* p = allocate(64 * kMiB);
    mp_free(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHILD_CHECK(threw, "mempool::allocate(64 MiB) did not throw std::bad_alloc");
  threw = false;
  try {
    void* p = allocate(kMiB, std::align_val_t{kMiB});
    mp_free(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHILD_CHECK(threw, "mempool::allocate(1 MiB, 1 MiB aligned) did not throw std::bad_alloc");
  CHILD_CHECK(try_allocate(64 * kMiB) == nullptr, "try_allocate(64 MiB)");
  CHILD_CHECK(try_allocate(2 * kMiB, std::align_val_t{4096}) == nullptr, "try_allocate aligned");
  errno = 0;
  CHILD_CHECK(mp_calloc(1, 64 * kMiB) == nullptr && errno == ENOMEM, "mp_calloc");
  errno = 0;
  CHILD_CHECK(mp_aligned_alloc(4096, 64 * kMiB) == nullptr && errno == ENOMEM, "aligned_alloc");
  void* out = &out;
  CHILD_CHECK(mp_posix_memalign(&out, 64, 64 * kMiB) == ENOMEM && out == &out, "posix_memalign");
  errno = 0;
  CHILD_CHECK(mp_realloc(known[1].p, 64 * kMiB) == nullptr && errno == ENOMEM, "realloc");

  // The live blocks are intact and can be freed.
  for (const Known& k : known) {
    const std::size_t at = first_mismatch(k.p, k.n, k.seed);
    CHILD_CHECK(at == kNoMismatch, "block of %zu bytes changed at %zu while out of memory", k.n,
                at);
    CHILD_CHECK(usable_size(k.p) >= k.n, "usable_size of a live block");
  }
  for (void* p : hoard)
    mp_free(p);
  // Freed memory is reused under the same limit.
  void* again = mp_malloc(kMiB);
  CHILD_CHECK(again != nullptr, "mp_malloc(1 MiB) failed after %zu blocks were freed", hoarded);
  std::memset(again, 1, kMiB);
  mp_free(again);
  for (const Known& k : known)
    mp_free(k.p);
  say("out of memory after %zu blocks; every call answered ENOMEM / bad_alloc", hoarded);
  ::_exit(0);
}

TEST(HeapMemory, OutOfMemoryUnderAddressSpaceLimit) {
  if (heap_test::kSanitized) GTEST_SKIP() << "sanitizers reserve terabytes of address space";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) out_of_memory_child();
  expect_child_succeeded(pid, "out of memory under RLIMIT_AS");
}

// ---- The soft memory limit ----------------------------------------------------

// Runs `body` in a fresh process whose heap never decays (a page given back by the
// decay, on a slow machine, would make the runs without a limit look limited).
#define IN_FRESH_PROCESS_WITHOUT_DECAY(body)  \
  do {                                        \
    ::setenv("MEMPOOL_DECAY_MS", "never", 1); \
    IN_FRESH_PROCESS(body);                   \
    ::unsetenv("MEMPOOL_DECAY_MS");           \
  } while (0)

// 64 pairs of 1 MiB blocks, written; the first of each pair freed (64 MiB of holes
// no 4 MiB block fits in, kept resident: below the release threshold); then 16
// blocks of 4 MiB. Without a limit the heap ends with 192 MiB resident; with one
// 160 MiB above where it started, it gives the holes back when it reaches it and
// ends with 128 MiB. Resident is HeapStats::bytes_resident, and VmRSS agrees.
[[noreturn]] void memory_limit_holes_child(bool limited) {
  const std::size_t base = stats().bytes_resident;
  const std::size_t rss_base = heap_test::resident_bytes();
  const std::size_t limit = base + 160 * kMiB;
  if (limited) set_memory_limit(limit);
  std::vector<void*> keep;
  std::vector<void*> holes;
  keep.reserve(128);
  holes.reserve(64);
  for (int i = 0; i < 64; ++i) {
    holes.push_back(mp_malloc(kMiB));
    keep.push_back(mp_malloc(kMiB));
    CHILD_CHECK(holes.back() != nullptr && keep.back() != nullptr, "mp_malloc(1 MiB) failed");
    std::memset(holes.back(), 0x11, kMiB);
    std::memset(keep.back(), 0x22, kMiB);
  }
  for (void* p : holes)
    mp_free(p);
  std::size_t peak = 0;
  for (int i = 0; i < 16; ++i) {
    void* p = mp_malloc(4 * kMiB);
    CHILD_CHECK(p != nullptr, "mp_malloc(4 MiB) failed with a memory limit");
    std::memset(p, 0x33, 4 * kMiB);
    keep.push_back(p);
    peak = std::max(peak, stats().bytes_resident);
  }
  const HeapStats s = stats();
  const std::size_t rss = heap_test::resident_bytes() - rss_base;
  say("%s: resident %.1f MiB above the start at the end, %.1f MiB at the peak (limit %.1f); "
      "VmRSS +%.1f MiB; the limit was reached %zu times",
      limited ? "limited" : "unlimited", mib(s.bytes_resident - base), mib(peak - base),
      mib(limit - base), mib(rss), s.memory_limit_hits);
  if (limited) {
    CHILD_CHECK(s.memory_limit == limit, "memory_limit %zu", s.memory_limit);
    CHILD_CHECK(s.memory_limit_hits > 0, "the limit was never reached");
    CHILD_CHECK(peak <= limit + 4 * kMiB, "resident %.1f MiB past the limit", mib(peak - limit));
    CHILD_CHECK(s.bytes_resident <= base + 136 * kMiB, "the holes were not given back");
    CHILD_CHECK(heap_test::kSanitized || rss <= 150 * kMiB, "VmRSS grew by %.1f MiB", mib(rss));
  } else {
    CHILD_CHECK(s.memory_limit == 0 && s.memory_limit_hits == 0, "a limit without one");
    CHILD_CHECK(s.bytes_resident >= base + 190 * kMiB,
                "the holes went back without a limit: the test measures nothing");
    CHILD_CHECK(heap_test::kSanitized || rss >= 180 * kMiB, "VmRSS grew by %.1f MiB", mib(rss));
  }
  for (void* p : keep)
    mp_free(p);
  ::_exit(0);
}

TEST(HeapMemory, MemoryLimitGivesFreePagesBackBeforeTheHeapGrows) {
  IN_FRESH_PROCESS_WITHOUT_DECAY(memory_limit_holes_child(false));
  IN_FRESH_PROCESS_WITHOUT_DECAY(memory_limit_holes_child(true));
}

// Free blocks of one class in this thread's cache (its list and the local lists of the
// spans it owns) and in the central cache's kept batches (the blocks of another thread's
// spans that this one frees); a 32 MiB block that needs fresh pages. Without a limit the
// caches keep their blocks; above one, they go back before the heap grows.
[[noreturn]] void memory_limit_caches_child() {
  std::vector<void*> blocks(20000);
  std::vector<void*> others(20000);
  for (void*& p : blocks)
    p = mp_malloc(64);
  std::thread([&] {
    for (void*& p : others)
      p = mp_malloc(64);
  }).join();
  for (void* p : blocks)
    mp_free(p);
  for (void* p : others)
    mp_free(p);
  const HeapStats before = stats();
  std::size_t c = 0;
  while (c < before.class_count && before.classes[c].block_size != 64)
    ++c;
  CHILD_CHECK(c < before.class_count, "no class of 64 bytes");
  CHILD_CHECK(before.classes[c].blocks_in_thread_caches > 0, "nothing in this thread's cache");
  CHILD_CHECK(before.classes[c].blocks_cached > before.classes[c].blocks_in_thread_caches,
              "no batch kept by the central cache");

  void* unlimited = mp_malloc(32 * kMiB);  // no limit: the caches stay
  CHILD_CHECK(unlimited != nullptr, "mp_malloc(32 MiB) failed");
  const HeapStats kept = stats();
  CHILD_CHECK(kept.classes[c].blocks_cached == before.classes[c].blocks_cached,
              "the caches changed without a limit: %zu blocks, %zu before",
              kept.classes[c].blocks_cached, before.classes[c].blocks_cached);

  set_memory_limit(1);  // every growth is above it
  void* limited = mp_malloc(32 * kMiB);
  CHILD_CHECK(limited != nullptr, "mp_malloc(32 MiB) failed with a limit");
  const HeapStats after = stats();
  CHILD_CHECK(after.memory_limit_hits > 0, "the limit was never reached");
  CHILD_CHECK(after.classes[c].blocks_in_thread_caches == 0,
              "%zu blocks left in this thread's cache", after.classes[c].blocks_in_thread_caches);
  CHILD_CHECK(after.classes[c].blocks_cached == 0, "%zu blocks left in kept batches",
              after.classes[c].blocks_cached);
  CHILD_CHECK(after.bytes_in_thread_caches == 0, "%zu bytes in this thread's cache",
              after.bytes_in_thread_caches);
  CHILD_CHECK(after.bytes_free_in_page_heap == 0, "%zu free bytes kept resident",
              after.bytes_free_in_page_heap);
  mp_free(limited);
  mp_free(unlimited);
  ::_exit(0);
}

TEST(HeapMemory, MemoryLimitEmptiesTheCachesBeforeTheHeapGrows) {
  IN_FRESH_PROCESS_WITHOUT_DECAY(memory_limit_caches_child());
}

// A limit far below what the program holds: every allocation still succeeds
// (small, large, aligned, direct, realloc), the heap just gives back what it can
// at every growth; the blocks keep their contents.
[[noreturn]] void memory_limit_never_fails_child() {
  set_memory_limit(kMiB);
  std::mt19937_64 rng(7);
  std::vector<Known> live;
  std::uint64_t seed = 0;
  for (int i = 0; i < 10000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      const std::size_t k = rng() % live.size();
      const Known b = live[k];
      CHILD_CHECK(first_mismatch(b.p, std::min<std::size_t>(b.n, 256), b.seed) == kNoMismatch,
                  "a block of %zu bytes changed", b.n);
      live[k] = live.back();
      live.pop_back();
      mp_free(b.p);
      continue;
    }
    const unsigned r = static_cast<unsigned>(rng() % 1000);
    const std::size_t n = r < 900   ? 1 + rng() % 2000
                          : r < 998 ? 2000 + rng() % (2 * kMiB)
                                    : 64 * kMiB + rng() % (8 * kMiB);
    void* p = r % 7 == 0 ? mp_aligned_alloc(4096, n) : mp_malloc(n);
    CHILD_CHECK(p != nullptr, "allocation %d of %zu bytes failed under the limit", i, n);
    fill_pattern(p, std::min<std::size_t>(n, 256), ++seed);
    live.push_back({p, n, seed});
  }
  const HeapStats s = stats();
  CHILD_CHECK(s.memory_limit_hits > 0, "the limit was never reached");
  CHILD_CHECK(s.bytes_resident > s.memory_limit, "the test never went past the limit");
  for (const Known& b : live) {
    CHILD_CHECK(first_mismatch(b.p, std::min<std::size_t>(b.n, 256), b.seed) == kNoMismatch,
                "a block of %zu bytes changed", b.n);
    mp_free(b.p);
  }
  ::_exit(0);
}

TEST(HeapMemory, MemoryLimitNeverFailsAnAllocation) {
  IN_FRESH_PROCESS(memory_limit_never_fails_child());
}

// ---- fork ----------------------------------------------------------------------

// Allocates and frees, in sizes that need new spans and pages, checking what it
// wrote; then frees blocks the parent allocated before the fork.
[[noreturn]] void forked_child(const std::vector<Known>& from_parent) {
  alarm(heap_test::kSanitized ? 25 : 10);
  std::vector<Known> blocks;
  blocks.reserve(12000);
  std::uint64_t seed = 100;
  for (int i = 0; i < 12000; ++i) {
    const std::size_t n = 16 + static_cast<std::size_t>(i * 131) % 6000;
    void* p = mp_malloc(n);
    CHILD_CHECK(p != nullptr, "mp_malloc(%zu) in the child", n);
    fill_pattern(p, std::min<std::size_t>(n, 64), ++seed);
    blocks.push_back({p, n, seed});
  }
  for (int i = 0; i < 24; ++i) {
    const std::size_t n = 300 * kKiB + static_cast<std::size_t>(i) * 97 * kKiB;
    void* p = allocate(n);
    fill_pattern(p, std::min<std::size_t>(n, 64), ++seed);
    std::memset(static_cast<char*>(p) + 64, 0x11, n - 64);
    blocks.push_back({p, n, seed});
  }
  for (const Known& b : blocks) {
    CHILD_CHECK(first_mismatch(b.p, std::min<std::size_t>(b.n, 64), b.seed) == kNoMismatch,
                "block of %zu bytes changed in the child", b.n);
    mp_free(b.p);
  }
  for (const Known& b : from_parent) {
    CHILD_CHECK(first_mismatch(b.p, b.n, b.seed) == kNoMismatch,
                "block of %zu bytes from before the fork changed", b.n);
    deallocate(b.p);
  }
  collect();
  void* p = mp_malloc(5 * kMiB);
  CHILD_CHECK(p != nullptr, "mp_malloc(5 MiB) after collect in the child");
  mp_free(p);
  ::_exit(0);
}

// 4 threads allocate and free (and collect) all the time; the main thread forks
// 8 times. Each child uses the heap heavily, on its own, and must exit 0 (not
// deadlock on a lock a parent thread held at the fork, not crash); the parent
// keeps going.
TEST(HeapMemory, ForkWhileThreadsAllocate) {
  std::atomic<bool> stop{false};
  std::atomic<long> work{0};
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      std::vector<Known> mine;
      std::uint64_t seed = static_cast<std::uint64_t>(t) << 40;
      while (!stop.load(std::memory_order_relaxed)) {
        if (mine.size() < 200 && rng() % 2 == 0) {
          const unsigned r = static_cast<unsigned>(rng() % 100);
          const std::size_t n = r < 90   ? 8 + rng() % 2000
                                : r < 98 ? 4096 + rng() % 60000
                                         : 300 * kKiB + rng() % kMiB;
          void* p = mp_malloc(n);
          if (p == nullptr) {
            ++corrupted;
            continue;
          }
          fill_pattern(p, std::min<std::size_t>(n, 64), ++seed);
          mine.push_back({p, n, seed});
        } else if (!mine.empty()) {
          const std::size_t i = rng() % mine.size();
          const Known b = mine[i];
          mine[i] = mine.back();
          mine.pop_back();
          if (first_mismatch(b.p, std::min<std::size_t>(b.n, 64), b.seed) != kNoMismatch) {
            ++corrupted;
          }
          mp_free(b.p);
        }
        if (rng() % 4096 == 0) collect();
        work.fetch_add(1, std::memory_order_relaxed);
      }
      for (const Known& b : mine) {
        if (first_mismatch(b.p, std::min<std::size_t>(b.n, 64), b.seed) != kNoMismatch) {
          ++corrupted;
        }
        mp_free(b.p);
      }
    });
  }
  std::vector<Known> before_fork;
  std::uint64_t seed = 0;
  for (std::size_t n : {std::size_t{8}, std::size_t{100}, std::size_t{5000}, std::size_t{400000}}) {
    void* p = allocate(n);
    fill_pattern(p, n, ++seed);
    before_fork.push_back({p, n, seed});
  }
  for (int i = 0; i < 8; ++i) {
    const long seen = work.load();
    while (work.load() < seen + 2000)  // the threads are busy right now
      std::this_thread::yield();
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) forked_child(before_fork);
    expect_child_succeeded(pid, "child forked while 4 threads allocate");
    // The parent keeps working.
    for (int k = 0; k < 1000; ++k)
      mp_free(mp_malloc(static_cast<std::size_t>(k) * 13 + 1));
  }
  stop = true;
  for (std::thread& th : threads)
    th.join();
  EXPECT_EQ(corrupted.load(), 0);
  for (const Known& b : before_fork) {
    EXPECT_EQ(first_mismatch(b.p, b.n, b.seed), kNoMismatch);
    deallocate(b.p);
  }
}

}  // namespace
}  // namespace mempool
