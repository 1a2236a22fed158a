// libFuzzer target for the general heap (mempool/heap.hpp, mempool/mempool.h), and
// heap_hardened_fuzz: the same against the hardened heap, every span guarded.
//
// A random walk over a model of live blocks (address, size, asked alignment,
// pattern seed; pool_model.hpp's Input and checks). Blocks here run to megabytes,
// so the model fills and verifies them a word at a time (above 64 KiB, a sample
// of the words on every page), in functions left out of libFuzzer's comparison
// tracing (byte loops under it took ~10 ms an input). The
// heap is process-wide: every input frees every block it allocated, and the
// heap's statistics must then read as they did before the input. Input:
// operations, one byte each (some read more), until the input or kMaxOps runs
// out:
//
//   op (byte >> 5)  arg = byte & 31
//   0  allocate(n): allocate, try_allocate, mp_malloc (arg % 3)   n: decode_heap_size
//   1  aligned allocate(n, 2^(arg % 21)): allocate, try_allocate, mp_aligned_alloc,
//      mp_posix_memalign (the next byte % 4)
//   2  free the i-th live block (i from arg and the next byte): deallocate(p),
//      deallocate(p, n) (with the alignment when it had one), mp_free (arg % 3)
//   3  realloc the i-th live block to n (i from arg and the next byte); with none
//      live, or arg == 31, mp_realloc(NULL, n); n == 0 frees it
//   4  mp_calloc(count, size): count from arg, size from decode_heap_size, or an
//      overflowing pair (arg == 31)
//   5  arg & 16: allocate (arg & 15) + 1 blocks of one size n; else free (arg & 7) + 1
//      blocks, the most recent (arg & 8) or the first ones
//   6  verify the i-th live block and fill it with a new pattern (i from arg and the
//      next byte)
//   7  arg & 1: collect(); arg & 2: check the statistics; arg & 4: verify every live
//      block (at most kMaxFullScans per input); arg & 8: usable_size(nullptr) and
//      frees of nullptr
//
// Every block must be non-null (except for an overflowing calloc, which must
// fail with ENOMEM), aligned (16 bytes from 16 bytes up, 8 below, or exactly the
// asked alignment), usable_size(p) >= n, and disjoint over usable_size(p) bytes
// from every live block. Its n bytes hold a per-block pattern, verified before
// it is freed or reallocated; a calloc'd block reads zero first; a reallocated
// block keeps its first min(old, new) bytes.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <new>
#include <vector>

#include "heap_ops.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "pool_model.hpp"

namespace {

using mempool_fuzz::decode_heap_size;
using mempool_fuzz::HeapBlock;
using mempool_fuzz::Input;

std::uint64_t pattern_word(std::uint64_t seed, std::size_t i) noexcept {
  std::uint64_t x = seed * 0xD1B54A32D192ED03ull + i * 0x9E3779B97F4A7C15ull + 1;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

// The words of a block of n bytes that carry its pattern: all of them up to
// 64 KiB; beyond, the first and the last 4 KiB and every 64th word between (one
// per 512 bytes: every page is written and read, at a sixtieth of the cost).
inline std::size_t next_word(std::size_t i, std::size_t words) noexcept {
  if (words <= 8192 || i < 511 || i + 513 >= words) return i + 1;
  const std::size_t up = (i + 64) & ~std::size_t{63};
  return up + 512 >= words ? words - 512 : up;
}

// Writes the pattern of `seed` over a block of n bytes (and its last n % 8 bytes).
MEMPOOL_FUZZ_NO_TRACE void fill(unsigned char* p, std::size_t n, std::uint64_t seed) noexcept {
  const std::size_t words = n / 8;
  for (std::size_t i = 0; i < words; i = next_word(i, words)) {
    const std::uint64_t w = pattern_word(seed, i);
    std::memcpy(p + 8 * i, &w, 8);
  }
  const std::uint64_t last = pattern_word(seed, words);
  std::memcpy(p + 8 * words, &last, n % 8);
}

// True when the pattern written by fill(p, n, seed) is intact over p[0, limit).
MEMPOOL_FUZZ_NO_TRACE bool holds(const unsigned char* p, std::size_t n, std::uint64_t seed,
                                 std::size_t limit) noexcept {
  const std::size_t words = n / 8;
  bool ok = true;
  for (std::size_t i = 0; i < words && 8 * i + 8 <= limit; i = next_word(i, words)) {
    std::uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    ok &= w == pattern_word(seed, i);
  }
  if (n <= limit) {
    std::uint64_t w = 0;
    std::uint64_t want = 0;
    const std::uint64_t last = pattern_word(seed, words);
    std::memcpy(&w, p + 8 * words, n % 8);
    std::memcpy(&want, &last, n % 8);
    ok &= w == want;
  }
  return ok;
}

// The live blocks: each filled with its own pattern over the bytes asked for,
// and disjoint from every other over its usable size.
class Model {
 public:
  [[nodiscard]] std::size_t live() const noexcept { return live_.size(); }
  [[nodiscard]] const HeapBlock& block(std::size_t i) const noexcept { return live_[i]; }

  void add(void* p, std::size_t size, std::size_t extent, std::size_t alignment) {
    const auto start = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t end = start + (extent > 0 ? extent : 1);
    MEMPOOL_FUZZ_CHECK(end > start);
    const auto next = ranges_.lower_bound(start);
    MEMPOOL_FUZZ_CHECK(next == ranges_.end() || next->first >= end);
    MEMPOOL_FUZZ_CHECK(next == ranges_.begin() || std::prev(next)->second <= start);
    ranges_.emplace_hint(next, start, end);
    const HeapBlock b{static_cast<unsigned char*>(p), size, alignment, ++seeds_};
    fill(b.p, b.size, b.seed);
    live_.push_back(b);
  }

  void verify(std::size_t i) const noexcept {
    MEMPOOL_FUZZ_CHECK(holds(live_[i].p, live_[i].size, live_[i].seed, live_[i].size));
  }

  // Verifies block i and drops it (the last block takes its index).
  HeapBlock take(std::size_t i) {
    verify(i);
    const HeapBlock b = live_[i];
    ranges_.erase(reinterpret_cast<std::uintptr_t>(b.p));
    live_[i] = live_.back();
    live_.pop_back();
    return b;
  }

  void refill(std::size_t i) noexcept {
    live_[i].seed = ++seeds_;
    fill(live_[i].p, live_[i].size, live_[i].seed);
  }

 private:
  std::vector<HeapBlock> live_;
  std::map<std::uintptr_t, std::uintptr_t> ranges_;  // start -> end of every live block
  std::uint64_t seeds_ = 0;
};

// Live bytes asked for, at most, so that an input stays fast under ASan.
constexpr std::size_t kMaxLiveBytes = std::size_t{48} * 1024 * 1024;

class Walk {
 public:
  Walk() : before_(mempool::stats()) {}

  [[nodiscard]] std::size_t live() const noexcept { return model_.live(); }

  // allocate_by(n, how) (heap_ops.hpp).
  void allocate(std::size_t n, unsigned how) {
    if (!room_for(n)) return;
    accept(mempool_fuzz::allocate_by(n, how), n, 0);
  }

  // allocate_aligned_by(n, alignment, how), which may refuse as it must.
  void allocate_aligned(std::size_t n, std::size_t alignment, unsigned how) {
    if (!room_for(n)) return;
    if (void* p = mempool_fuzz::allocate_aligned_by(n, alignment, how)) accept(p, n, alignment);
  }

  void calloc(std::size_t count, std::size_t size) {
    const std::size_t n = count * size;
    if (!room_for(n)) return;
    accept(mempool_fuzz::calloc_checked(count, size), n, 0);
  }

  void calloc_overflow(std::size_t size) {
    errno = 0;
    MEMPOOL_FUZZ_CHECK(mp_calloc(SIZE_MAX / (size | 2) + 1, size | 2) == nullptr);
    MEMPOOL_FUZZ_CHECK(errno == ENOMEM);
  }

  // Verifies live block i and frees it: free_by(block, how).
  void free_at(std::size_t i, unsigned how) { mempool_fuzz::free_by(take(i), how); }

  // realloc of live block i to n: the first min(old, n) bytes survive; n == 0
  // frees the block and answers NULL.
  void realloc_at(std::size_t i, std::size_t n) {
    if (n > model_.block(i).size && !room_for(n - model_.block(i).size)) return;
    const HeapBlock b = take(i);
    void* q = mp_realloc(b.p, n);
    if (n == 0) {
      MEMPOOL_FUZZ_CHECK(q == nullptr);
      return;
    }
    MEMPOOL_FUZZ_CHECK(q != nullptr);
    MEMPOOL_FUZZ_CHECK(holds(static_cast<const unsigned char*>(q), b.size, b.seed, n));
    accept(q, n, 0);
  }

  void realloc_null(std::size_t n) {
    if (!room_for(n)) return;
    void* p = mp_realloc(nullptr, n);
    if (n == 0 && p == nullptr) return;  // malloc(0) may answer either way
    accept(p, n, 0);
  }

  void verify_and_refill(std::size_t i) {
    model_.verify(i);
    model_.refill(i);
  }

  void verify_all() {
    if (full_scans_++ >= mempool_fuzz::kMaxFullScans) return;
    for (std::size_t i = 0; i < model_.live(); ++i)
      model_.verify(i);
  }

  void nulls() {
    MEMPOOL_FUZZ_CHECK(mempool::usable_size(nullptr) == 0);
    MEMPOOL_FUZZ_CHECK(mp_usable_size(nullptr) == 0);
    mp_free(nullptr);
    mempool::deallocate(nullptr);
    mempool::deallocate(nullptr, 16);
  }

  // The heap serves this input alone: what it hands out now is at least what the
  // model holds, and never more than what it has mapped.
  void check_stats() const {
    const mempool::HeapStats s = mempool::stats();
    MEMPOOL_FUZZ_CHECK(s.bytes_in_use >= before_.bytes_in_use + live_bytes_);
    MEMPOOL_FUZZ_CHECK(s.bytes_mapped >= s.bytes_in_use);
    MEMPOOL_FUZZ_CHECK(s.class_count > 0 && s.class_count <= mempool::kHeapMaxClasses);
  }

  // Frees what is left; the statistics read as before the input.
  void free_all() {
    while (model_.live() > 0)
      free_at(model_.live() - 1, static_cast<unsigned>(model_.live()));
    const mempool::HeapStats s = mempool::stats();
    MEMPOOL_FUZZ_CHECK(s.bytes_in_use == before_.bytes_in_use);
    MEMPOOL_FUZZ_CHECK(s.large_blocks_in_use == before_.large_blocks_in_use);
  }

 private:
  bool room_for(std::size_t n) const noexcept {
    return model_.live() < mempool_fuzz::kMaxLive && live_bytes_ + n <= kMaxLiveBytes;
  }

  void accept(void* p, std::size_t n, std::size_t alignment) {
    const std::size_t usable = mempool_fuzz::check_fresh(p, n, alignment);
    model_.add(p, n, usable, alignment);
    live_bytes_ += n;
  }

  HeapBlock take(std::size_t i) {
    live_bytes_ -= model_.block(i).size;
    return model_.take(i);
  }

  Model model_;
  std::size_t live_bytes_ = 0;
  int full_scans_ = 0;
  mempool::HeapStats before_;
};

std::size_t pick(Walk& walk, unsigned arg, Input& in) {
  return ((std::size_t{arg} << 8) | in.byte()) % walk.live();
}

void run(Walk& walk, Input& in) {
  for (std::size_t k = 0; k < mempool_fuzz::kMaxOps && !in.empty(); ++k) {
    const std::uint8_t op = in.byte();
    const auto arg = static_cast<unsigned>(op & 31);
    switch (op >> 5) {
      case 0:
        walk.allocate(decode_heap_size(in), arg);
        break;
      case 1: {
        const unsigned how = in.byte();
        walk.allocate_aligned(decode_heap_size(in), std::size_t{1} << (arg % 21), how);
        break;
      }
      case 2:
        if (walk.live() > 0) {
          walk.free_at(pick(walk, arg, in), arg);
        } else {
          walk.nulls();
        }
        break;
      case 3:
        if (walk.live() > 0 && arg != 31) {
          const std::size_t i = pick(walk, arg, in);
          walk.realloc_at(i, decode_heap_size(in));
        } else {
          walk.realloc_null(decode_heap_size(in));
        }
        break;
      case 4:
        if (arg == 31) {
          walk.calloc_overflow(decode_heap_size(in));
        } else {
          walk.calloc(arg + 1, decode_heap_size(in) / (arg + 1));
        }
        break;
      case 5:
        if ((arg & 16) != 0) {
          const std::size_t n = decode_heap_size(in);
          for (unsigned j = 0; j <= (arg & 15); ++j)
            walk.allocate(n, j);
        } else {
          for (unsigned j = 0; j <= (arg & 7) && walk.live() > 0; ++j)
            walk.free_at((arg & 8) != 0 ? walk.live() - 1 : 0, j);
        }
        break;
      case 6:
        if (walk.live() > 0) {
          walk.verify_and_refill(pick(walk, arg, in));
        }
        break;
      default:
        if ((arg & 1) != 0) mempool::collect();
        if ((arg & 2) != 0) walk.check_stats();
        if ((arg & 4) != 0) walk.verify_all();
        if ((arg & 8) != 0) walk.nulls();
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  Walk walk;
  run(walk, in);
  walk.check_stats();
  walk.free_all();
  return 0;
}
