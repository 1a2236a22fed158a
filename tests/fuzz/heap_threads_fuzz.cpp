// libFuzzer target for the general heap across threads (mempool/heap.hpp,
// mempool/mempool.h), and heap_threads_hardened_fuzz: the same against the hardened
// heap, every span guarded.
//
// An input runs 2 to 4 worker threads at once, each on a slice of the input, with one
// box between them (test_support.hpp's HandOff): a block allocated on one thread is
// freed or reallocated on another, often after the thread that allocated it has ended;
// threads start, allocate and exit while others hold their blocks. Every block holds a
// pattern of its own (test_support.hpp's fill_pattern) over the bytes asked for, checked
// before every free and realloc on whichever thread does it (first_mismatch), so a block
// handed out twice, one the heap wrote into, or a realloc that lost bytes stops the
// fuzzer with the block, its size and the first byte that differs. All threads are
// joined before the input ends, and every block freed: the heap's statistics must then
// read as they did before it. How the threads interleave is not in the input, so a
// crash may need a few runs to come back.
//
// Input: byte 0 gives the number of workers (2 + byte % 3) and how many times each runs
// its slice (1 + byte / 3 % 4, keeping what it holds from one time to the next); the
// rest is cut into that many slices, one a worker, each read as operations, one byte
// each (some read more), until the slice or kMaxOps runs out. The workers start
// together (a latch). A burst is 4 x (arg - 15) blocks, 4 to 64 (enough to move whole
// batches between a thread's cache and the central cache):
//
//   op (byte >> 5)  arg = byte & 31
//   0  arg < 16: allocate(n): allocate, try_allocate, mp_malloc (arg % 3); else a burst
//      of blocks of n bytes (each way in turn)   n: decode_heap_size
//   1  aligned allocate(n, 2^(arg % 17)): allocate, try_allocate, mp_aligned_alloc,
//      mp_posix_memalign (the next byte % 4)
//   2  arg < 16: free the i-th block this thread holds (i from arg and the next byte):
//      deallocate(p), sized, mp_free (arg % 3); else free a burst, the newest first
//   3  mp_realloc the i-th block to n (n == 0 frees it); with none held, mp_realloc(NULL, n)
//   4  arg < 16: put the i-th block into the box; else a burst, the newest first
//   5  take a block from the box (arg >= 16: a burst), as long as there is one:
//      arg % 4 == 0 free it (arg / 4 picks how), 1 mp_realloc it to n, else keep it
//   6  churn: a thread of its own runs the next 4 x (arg + 1) bytes of the slice as
//      operations, and as it ends puts every block it still holds into the box; this
//      thread goes on at once with the bytes after them (kMaxThreads threads an input:
//      past them, this thread runs those bytes itself)
//   7  arg & 1: mp_calloc(arg / 2 + 1, n) reads zero; arg & 2: verify every block
//      held and give it a new pattern (kMaxFullScans times a thread); arg & 4: collect();
//      arg & 8: stats() while the other threads run
//
// A worker, as it ends, puts what it holds into the box and joins its churn threads;
// the input's own thread then verifies and frees what is left in the box.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <latch>
#include <optional>
#include <thread>
#include <vector>

#include "heap_ops.hpp"
#include "pool_model.hpp"
#include "support/test_support.hpp"

namespace {

using mempool_fuzz::HeapBlock;
using mempool_fuzz::Input;

// Bounds that keep an input fast under ASan: a thread holds at most kMaxHeld blocks
// and kMaxHeldBytes bytes, a block has at most kMaxThreadBlock bytes, and an input
// starts at most kMaxThreads threads.
constexpr std::size_t kMaxHeld = 1024;
constexpr std::size_t kMaxHeldBytes = 8 * mempool_test::kMiB;
constexpr std::size_t kMaxThreadBlock = mempool_test::kMiB;
constexpr int kMaxThreads = 16;
// From this size a block's pattern is checked on every 8th word (and its first and
// last 4 KiB).
constexpr std::size_t kSampledFrom = 64 * mempool_test::kKiB;

// Stops the fuzzer unless the first n bytes of b hold its pattern.
void verify(const HeapBlock& b, std::size_t n, const char* when) {
  const std::size_t at = mempool_test::first_mismatch(b.p, n, b.seed, n >= kSampledFrom ? 8 : 1);
  if (at == mempool_test::kNoMismatch) return;
  char what[192];
  std::snprintf(what, sizeof what, "%s: block %p of %zu bytes differs from its pattern at byte %zu",
                when, static_cast<void*>(b.p), b.size, at);
  mempool_fuzz::fail(what, __FILE__, __LINE__);
}

// What the threads of one input share.
struct Shared {
  explicit Shared(unsigned workers) : start(workers) {}
  std::latch start;  // the workers begin together
  mempool_test::HandOff<HeapBlock> box;
  std::atomic<std::uint64_t> seeds{0};
  std::atomic<int> threads_left{kMaxThreads};
};

// One thread's walk over its slice of the input.
class Worker {
 public:
  Worker(Shared& shared, Input in) noexcept : shared_(shared), in_(in) {}
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void run(unsigned times = 1) {
    const Input program = in_;
    for (unsigned r = 0; r < times; ++r) {
      in_ = program;
      for (std::size_t k = 0; k < mempool_fuzz::kMaxOps && !in_.empty(); ++k)
        step();
    }
    for (const HeapBlock& b : held_)
      shared_.box.put(b);
    held_.clear();
    for (std::thread& t : churn_)
      t.join();
  }

 private:
  void step() {
    const std::uint8_t op = in_.byte();
    const auto arg = static_cast<unsigned>(op & 31);
    switch (op >> 5) {
      case 0:
        if (arg < 16) {
          allocate(decode_size(), arg);
        } else {
          const std::size_t n = decode_size();
          for (unsigned j = 0; j < burst(arg); ++j)
            allocate(n, j);
        }
        break;
      case 1: {
        const unsigned how = in_.byte();
        allocate_aligned(decode_size(), std::size_t{1} << (arg % 17), how);
        break;
      }
      case 2:
        if (arg < 16) {
          if (!held_.empty()) free_block(take_held(pick(arg)), arg);
        } else {
          for (unsigned j = 0; j < burst(arg) && !held_.empty(); ++j)
            free_block(take_held(held_.size() - 1), j);
        }
        break;
      case 3:
        if (held_.empty()) {
          realloc_null(decode_size());
        } else {
          const std::size_t i = pick(arg);
          realloc_block(i, decode_size());
        }
        break;
      case 4:
        if (arg < 16) {
          if (!held_.empty()) shared_.box.put(take_held(pick(arg)));
        } else {
          for (unsigned j = 0; j < burst(arg) && !held_.empty(); ++j)
            shared_.box.put(take_held(held_.size() - 1));
        }
        break;
      case 5: {
        const unsigned most = arg < 16 ? 1 : burst(arg);
        for (unsigned j = 0; j < most; ++j) {
          if (!receive(arg)) break;
        }
        break;
      }
      case 6:
        churn(in_.take(4 * (std::size_t{arg} + 1)));
        break;
      default:
        if ((arg & 1) != 0) calloc(arg / 2 + 1, decode_size() / (arg / 2 + 1));
        if ((arg & 2) != 0) verify_and_refill_all();
        if ((arg & 4) != 0) mempool::collect();
        if ((arg & 8) != 0) check_stats();
        break;
    }
  }

  std::size_t decode_size() noexcept {
    return mempool_fuzz::decode_heap_size(in_, kMaxThreadBlock);
  }

  static unsigned burst(unsigned arg) noexcept { return 4 * (arg - 15); }

  std::size_t pick(unsigned arg) noexcept {
    return ((std::size_t{arg} << 8) | in_.byte()) % held_.size();
  }

  bool room_for(std::size_t n) const noexcept {
    return held_.size() < kMaxHeld && held_bytes_ + n <= kMaxHeldBytes;
  }

  void allocate(std::size_t n, unsigned how) {
    if (room_for(n)) keep_fresh(mempool_fuzz::allocate_by(n, how), n, 0);
  }

  void allocate_aligned(std::size_t n, std::size_t alignment, unsigned how) {
    if (!room_for(n)) return;
    if (void* p = mempool_fuzz::allocate_aligned_by(n, alignment, how)) keep_fresh(p, n, alignment);
  }

  void calloc(std::size_t count, std::size_t size) {
    const std::size_t n = count * size;
    if (!room_for(n)) return;
    keep_fresh(mempool_fuzz::calloc_checked(count, size), n, 0);
  }

  // A block fresh from the heap: checked, given a pattern of its own, held.
  void keep_fresh(void* p, std::size_t n, std::size_t alignment) {
    mempool_fuzz::check_fresh(p, n, alignment);
    HeapBlock b{static_cast<unsigned char*>(p), n, alignment, 0};
    repattern(b);
    keep(b);
  }

  void keep(const HeapBlock& b) {
    held_.push_back(b);
    held_bytes_ += b.size;
  }

  void repattern(HeapBlock& b) noexcept {
    b.seed = shared_.seeds.fetch_add(1, std::memory_order_relaxed) + 1;
    mempool_test::fill_pattern(b.p, b.size, b.seed);
  }

  // Block i, no longer held here (the last block takes its index).
  HeapBlock take_held(std::size_t i) noexcept {
    const HeapBlock b = held_[i];
    held_[i] = held_.back();
    held_.pop_back();
    held_bytes_ -= b.size;
    return b;
  }

  void free_block(const HeapBlock& b, unsigned how) {
    verify(b, b.size, "before free");
    mempool_fuzz::free_by(b, how);
  }

  // mp_realloc of held block i to n: the first min(old, n) bytes survive; n == 0 frees
  // the block and answers NULL.
  void realloc_block(std::size_t i, std::size_t n) {
    if (n > held_[i].size && !room_for(n - held_[i].size)) return;
    realloc_taken(take_held(i), n);
  }

  // The same for b, held by no one.
  void realloc_taken(const HeapBlock& b, std::size_t n) {
    verify(b, b.size, "before realloc");
    void* q = mp_realloc(b.p, n);
    if (n == 0) {
      MEMPOOL_FUZZ_CHECK(q == nullptr);
      return;
    }
    MEMPOOL_FUZZ_CHECK(q != nullptr);
    HeapBlock moved = b;
    moved.p = static_cast<unsigned char*>(q);
    verify(moved, std::min(b.size, n), "after realloc");
    mempool_fuzz::check_fresh(q, n, 0);
    moved.size = n;
    moved.alignment = 0;
    repattern(moved);
    keep(moved);
  }

  void realloc_null(std::size_t n) {
    if (!room_for(n)) return;
    void* p = mp_realloc(nullptr, n);
    if (n == 0 && p == nullptr) return;  // malloc(0) may answer either way
    keep_fresh(p, n, 0);
  }

  // A block another thread put into the box (that thread may have ended since); freed
  // where this thread has no room to keep it. False when the box was empty.
  bool receive(unsigned arg) {
    const std::optional<HeapBlock> got = shared_.box.try_take();
    if (!got) return false;
    const HeapBlock& b = *got;
    const std::size_t n = arg % 4 == 1 ? decode_size() : b.size;
    if (arg % 4 == 0 || !room_for(n)) {
      free_block(b, arg / 4);
    } else if (arg % 4 == 1) {
      realloc_taken(b, n);
    } else {
      verify(b, b.size, "on arrival");
      keep(b);
    }
    return true;
  }

  // Runs `part` on a thread of its own while this one goes on (on this one where the
  // input has started all the threads it may).
  void churn(Input part) {
    if (shared_.threads_left.fetch_sub(1, std::memory_order_relaxed) <= 0) {
      Worker(shared_, part).run();
      return;
    }
    Shared& shared = shared_;
    churn_.emplace_back([&shared, part] { Worker(shared, part).run(); });
  }

  void verify_and_refill_all() {
    if (full_scans_++ >= mempool_fuzz::kMaxFullScans) return;
    for (HeapBlock& b : held_) {
      verify(b, b.size, "in a full scan");
      repattern(b);
    }
  }

  // Other threads allocate and free meanwhile: no count can be checked but its bounds.
  static void check_stats() noexcept {
    const mempool::HeapStats s = mempool::stats();
    MEMPOOL_FUZZ_CHECK(s.class_count > 0 && s.class_count <= mempool::kHeapMaxClasses);
  }

  Shared& shared_;
  Input in_;
  std::vector<HeapBlock> held_;
  std::size_t held_bytes_ = 0;
  std::vector<std::thread> churn_;
  int full_scans_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const mempool::HeapStats before = mempool::stats();
  Input in(data, size);
  const std::uint8_t first = in.byte();
  const unsigned workers = 2 + first % 3u;
  const unsigned times = 1 + first / 3u % 4u;
  const std::size_t slice = in.left() / workers;
  Shared shared(workers);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w) {
    const Input part = in.take(w + 1 < workers ? slice : in.left());
    threads.emplace_back([&shared, part, times] {
      shared.start.arrive_and_wait();
      Worker(shared, part).run(times);
    });
  }
  for (std::thread& t : threads)
    t.join();
  // What the threads left, freed by one that allocated none of it.
  unsigned how = 0;
  for (const HeapBlock& b : shared.box.drain()) {
    verify(b, b.size, "after the threads ended");
    mempool_fuzz::free_by(b, how++);
  }
  const mempool::HeapStats after = mempool::stats();
  MEMPOOL_FUZZ_CHECK(after.bytes_in_use == before.bytes_in_use);
  MEMPOOL_FUZZ_CHECK(after.large_blocks_in_use == before.large_blocks_in_use);
  return 0;
}
