// The model and driver shared by the libFuzzer targets.
//
// An input is a small program. Each target first reads the pool's parameters
// (decode_* below) and checks that the constructor throws exactly when the model
// says the parameters are invalid; run_program then reads the rest as
// operations, one byte each (some take one or two more):
//
//   op (byte >> 5)  arg = byte & 31
//   0  allocate one block             (arg: the adapter's variant, e.g. try_allocate)
//   1  allocate arg + 1 blocks
//   2  free the i-th live block       (i from arg and the next byte)
//   3  free the most recent block
//   4  free (arg & 15) + 1 blocks, the most recent (arg & 16) or the first ones
//   5  verify the i-th live block and refill it with a new pattern
//                                     (i from arg and the next byte, the pattern seed from the
//                                     byte after)
//   6  arg < 16: generic probes (owns() of interior, freed and foreign pointers, a full
//      verification); arg >= 16: the adapter's own operation
//   7  move the pool (through a temporary, or move-assigned over a fresh pool)
//
// The model is the list of live blocks, each filled with its own byte pattern, and
// a map of their address ranges. Every block the pool hands out must be non-null
// (unless a bounded pool is full, where nullptr is required), aligned to
// alignment(), owned by the pool and disjoint from every live block; every block
// is verified before it is freed, so a pattern that changed means the pool gave
// the same memory out twice or wrote into a live block. Any mismatch aborts,
// which libFuzzer reports as a crash.
//
// An adapter wraps one pool for the driver:
//   void* allocate(std::uint8_t variant);        nullptr only when full (bounded pools)
//   void deallocate(void* p, std::uint8_t variant);
//   bool owns(const void* p) const;
//   std::size_t block_size() const;  std::size_t alignment() const;
//   std::size_t capacity() const;                SIZE_MAX for a growing pool
//   void check(const Model&) const;              pool invariants, after every step
//   void extra(std::uint8_t arg, Input&, Model&);  op 6 with arg >= 16
//   void move_pool(std::uint8_t variant);
// AdapterBase provides the defaults; a misuse (double free, foreign pointer) may
// only be tried by an adapter whose pool promises to detect it.
//
// A pool of many block sizes does not fit the adapter: its target drives a Model
// of variable-size blocks itself (size_class_pool_fuzz.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace mempool_fuzz {

[[noreturn]] inline void fail(const char* what, const char* file, int line) noexcept {
  std::fprintf(stderr, "%s:%d: model check failed: %s\n", file, line, what);
  std::abort();
}

#define MEMPOOL_FUZZ_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::mempool_fuzz::fail(#cond, __FILE__, __LINE__))

// Bounds on the work one input may cause.
inline constexpr std::size_t kMaxOps = 4096;
inline constexpr std::size_t kMaxLive = 8192;
inline constexpr int kMaxFullScans = 4;  // O(live) checks per input
inline constexpr int kMaxMoves = 16;
inline constexpr std::size_t kRecentlyFreed = 8;

// The input bytes, read front to back; past the end every byte reads as 0.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) noexcept : data_(data), size_(size) {}
  [[nodiscard]] bool empty() const noexcept { return pos_ >= size_; }
  [[nodiscard]] std::size_t left() const noexcept { return size_ - pos_; }
  std::uint8_t byte() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() noexcept {
    const unsigned lo = byte();
    return static_cast<std::uint16_t>(lo | (unsigned{byte()} << 8));
  }
  // The next n bytes (fewer where the input ends first) as an input of their own,
  // which this one skips.
  Input take(std::size_t n) noexcept {
    const std::size_t k = std::min(n, left());
    const Input part(data_ + pos_, k);
    pos_ += k;
    return part;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// ---- Parameters -------------------------------------------------------------

// The documented limits (docs/architecture.md, "Fixed limits").
inline constexpr std::size_t kMaxBlockSize = std::size_t{1} << 30;
inline constexpr std::size_t kMaxAlignment = 4096;

// 1..600 mostly; 0 and 1 GiB + 1 are the invalid ends.
inline std::size_t decode_block_size(Input& in) noexcept {
  const std::size_t v = in.u16() % 602;
  return v == 601 ? kMaxBlockSize + 1 : v;
}

// From the low 4 bits of a flags byte: mostly 0/8/16/64/256, a few other valid
// powers of two, and two invalid values (not a power of two, above 4096).
inline std::size_t decode_alignment(std::uint8_t flags) noexcept {
  static constexpr std::size_t kAlignments[16] = {0,  8,   16, 64, 256, 0,  8,  16,
                                                  64, 256, 1,  2,  4,   32, 24, 8192};
  return kAlignments[flags & 15];
}

// 1..5000 mostly; 0 and `too_large` are the invalid ends.
inline std::size_t decode_capacity(Input& in, std::size_t too_large) noexcept {
  const std::size_t v = in.u16() % 5002;
  return v == 5001 ? too_large : v;
}

// The exceptions a constructor may throw, as a set.
enum ErrorSet : unsigned { kNoError = 0, kInvalidArgument = 1, kLengthError = 2 };

// What FixedPool-style parameters should raise. Where several parameters are bad
// the constructor may name any of them.
inline unsigned layout_errors(std::size_t block_size, std::size_t alignment) noexcept {
  unsigned e = kNoError;
  if (block_size == 0) e |= kInvalidArgument;
  if (block_size > kMaxBlockSize) e |= kLengthError;
  if (alignment != 0 && (!std::has_single_bit(alignment) || alignment > kMaxAlignment)) {
    e |= kInvalidArgument;
  }
  return e;
}

// Runs construct() and checks that it throws one of `expected`, or succeeds when
// that is kNoError. True when it succeeded. Other exceptions (std::bad_alloc)
// escape: libFuzzer reports them.
template <class F>
bool constructs_as_expected(unsigned expected, F&& construct) {
  try {
    construct();
  } catch (const std::invalid_argument&) {
    MEMPOOL_FUZZ_CHECK((expected & kInvalidArgument) != 0);
    return false;
  } catch (const std::length_error&) {
    MEMPOOL_FUZZ_CHECK((expected & kLengthError) != 0);
    return false;
  }
  MEMPOOL_FUZZ_CHECK(expected == kNoError);
  return true;
}

// The documented layout rules: exactly the asked alignment (at least a
// pointer's), or 16-byte alignment for blocks of 16 bytes or more when none was
// asked; a power-of-two alignment that divides the block size, and no more
// padding than the alignment needs.
inline void check_layout(std::size_t asked_size, std::size_t asked_alignment, std::size_t size,
                         std::size_t alignment) noexcept {
  MEMPOOL_FUZZ_CHECK(std::has_single_bit(alignment));
  // Asked: exactly that (at least a pointer's); not asked: 16 for 16 bytes and up.
  if (asked_alignment != 0) {
    MEMPOOL_FUZZ_CHECK(alignment == std::max(asked_alignment, alignof(void*)));
  } else {
    MEMPOOL_FUZZ_CHECK(alignment >= alignof(void*));
    MEMPOOL_FUZZ_CHECK(size < 16 || alignment >= 16);
  }
  MEMPOOL_FUZZ_CHECK(alignment <= kMaxAlignment);
  MEMPOOL_FUZZ_CHECK(size >= asked_size && size >= sizeof(void*));
  MEMPOOL_FUZZ_CHECK(size % alignment == 0);
  MEMPOOL_FUZZ_CHECK(size < std::max(asked_size, sizeof(void*)) + alignment);
}

// ---- The model --------------------------------------------------------------

class Model {
 public:
  struct Block {
    unsigned char* p;
    std::size_t size;  // the bytes asked for: filled with the pattern and verified
    std::uint8_t seed;
  };

  // Blocks of block_size bytes, recorded with add(p).
  explicit Model(std::size_t block_size) noexcept : block_size_(block_size) {}
  // Blocks of any size, recorded with add(p, size, extent).
  Model() noexcept = default;

  [[nodiscard]] std::size_t live() const noexcept { return live_.size(); }
  [[nodiscard]] const std::vector<Block>& blocks() const noexcept { return live_; }
  // Blocks freed lately and not handed out again since, newest last.
  [[nodiscard]] const std::vector<void*>& recently_freed() const noexcept { return freed_; }
  [[nodiscard]] std::uint64_t allocations() const noexcept { return allocations_; }
  [[nodiscard]] std::uint64_t frees() const noexcept { return frees_; }
  [[nodiscard]] std::uint64_t peak() const noexcept { return peak_; }

  // Records a block fresh from the pool: disjoint from every live block, then
  // filled with a new pattern.
  void add(void* p) { add(p, block_size_, block_size_); }

  // The same for a block asked as `size` bytes that takes `extent` bytes (at
  // least one, and at least size): the extent must be disjoint from every live
  // block's, the first `size` bytes are filled.
  void add(void* p, std::size_t size, std::size_t extent) {
    MEMPOOL_FUZZ_CHECK(extent >= size && extent > 0);
    const auto start = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t end = start + extent;
    MEMPOOL_FUZZ_CHECK(end > start);
    const auto next = ranges_.lower_bound(start);
    MEMPOOL_FUZZ_CHECK(next == ranges_.end() || next->first >= end);
    MEMPOOL_FUZZ_CHECK(next == ranges_.begin() || std::prev(next)->second <= start);
    ranges_.emplace_hint(next, start, end);
    const auto recycled = std::find(freed_.begin(), freed_.end(), p);
    if (recycled != freed_.end()) freed_.erase(recycled);

    const Block b{static_cast<unsigned char*>(p), size,
                  static_cast<std::uint8_t>(allocations_ * 167 + 13)};
    fill(b);
    live_.push_back(b);
    ++allocations_;
    peak_ = std::max<std::uint64_t>(peak_, live_.size());
  }

  // Verifies live block i and drops it from the model; the caller frees it.
  void* take(std::size_t i) {
    verify(i);
    const Block b = live_[i];
    ranges_.erase(reinterpret_cast<std::uintptr_t>(b.p));
    live_[i] = live_.back();
    live_.pop_back();
    if (freed_.size() == kRecentlyFreed) freed_.erase(freed_.begin());
    freed_.push_back(b.p);
    ++frees_;
    return b.p;
  }

  // A changed pattern: the pool gave this memory out again, or wrote into it.
  void verify(std::size_t i) const noexcept {
    const Block& b = live_[i];
    for (std::size_t k = 0; k < b.size; ++k) {
      MEMPOOL_FUZZ_CHECK(b.p[k] == pattern(b.seed, k));
    }
  }

  void refill(std::size_t i, std::uint8_t seed) noexcept {
    live_[i].seed = seed;
    fill(live_[i]);
  }

 private:
  static std::uint8_t pattern(std::uint8_t seed, std::size_t k) noexcept {
    return static_cast<std::uint8_t>(seed + k * 7);
  }
  static void fill(const Block& b) noexcept {
    for (std::size_t k = 0; k < b.size; ++k)
      b.p[k] = pattern(b.seed, k);
  }

  std::size_t block_size_ = 0;
  std::vector<Block> live_;
  std::map<std::uintptr_t, std::uintptr_t> ranges_;  // start -> end of every live block
  std::vector<void*> freed_;
  std::uint64_t allocations_ = 0;
  std::uint64_t frees_ = 0;
  std::uint64_t peak_ = 0;
};

// ---- Adapters ---------------------------------------------------------------

// Holds the pool (in an optional, so that it can be emplaced, moved and
// destroyed) and provides the adapter defaults.
template <class P>
class AdapterBase {
 public:
  P& pool() noexcept { return *pool_; }
  const P& pool() const noexcept { return *pool_; }

  [[nodiscard]] bool owns(const void* p) const noexcept { return pool_->owns(p); }
  [[nodiscard]] std::size_t block_size() const noexcept { return pool_->block_size(); }
  [[nodiscard]] std::size_t alignment() const noexcept { return pool_->alignment(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return SIZE_MAX; }
  void check(const Model&) const noexcept {}
  void extra(std::uint8_t, Input&, Model&) {}

 protected:
  // Variant bit 0 clear: move-construct a temporary, destroy the moved-from pool
  // and move-construct back. Set: move-assign over a fresh pool that
  // make_fresh(std::optional<P>&) emplaces, then move that back.
  template <class MakeFresh>
  void move_pool_with(std::uint8_t variant, MakeFresh&& make_fresh) {
    if ((variant & 1) == 0) {
      P tmp(std::move(*pool_));
      pool_.reset();
      pool_.emplace(std::move(tmp));
    } else {
      std::optional<P> fresh;
      make_fresh(fresh);
      *fresh = std::move(*pool_);
      pool_.reset();
      pool_.emplace(std::move(*fresh));
    }
  }

  std::optional<P> pool_;
};

// ---- The driver -------------------------------------------------------------

// Checks a block the pool handed out and adds it to the model.
template <class Adapter>
void accept_allocation(const Adapter& pool, Model& model, void* p) {
  MEMPOOL_FUZZ_CHECK(p != nullptr);
  MEMPOOL_FUZZ_CHECK(reinterpret_cast<std::uintptr_t>(p) % pool.alignment() == 0);
  MEMPOOL_FUZZ_CHECK(pool.owns(p));
  model.add(p);
}

template <class Adapter>
void allocate_one(Adapter& pool, Model& model, std::uint8_t variant) {
  if (model.live() >= kMaxLive) return;
  const bool full = model.live() >= pool.capacity();
  void* p = pool.allocate(variant);
  if (full) {
    MEMPOOL_FUZZ_CHECK(p == nullptr);
  } else {
    accept_allocation(pool, model, p);
  }
  pool.check(model);
}

template <class Adapter>
void free_at(Adapter& pool, Model& model, std::size_t i, std::uint8_t variant) {
  pool.deallocate(model.take(i), variant);
  pool.check(model);
}

// owns() of pointers that are not blocks (inside a block, on the stack, null) is
// false; of freed blocks true ("the start of a block, live or free"). Up to
// kMaxFullScans times, every live block is verified too.
template <class Adapter>
void probe(const Adapter& pool, const Model& model, std::uint8_t arg, int& full_scans) {
  const int on_stack = 0;
  MEMPOOL_FUZZ_CHECK(!pool.owns(nullptr));
  MEMPOOL_FUZZ_CHECK(!pool.owns(&on_stack));
  for (void* q : model.recently_freed())
    MEMPOOL_FUZZ_CHECK(pool.owns(q));
  if (model.live() > 0) {
    const Model::Block& b = model.blocks()[arg % model.live()];
    MEMPOOL_FUZZ_CHECK(pool.owns(b.p));
    MEMPOOL_FUZZ_CHECK(!pool.owns(b.p + 1 + arg % (pool.block_size() - 1)));
  }
  if ((arg & 8) != 0 && full_scans < kMaxFullScans) {
    ++full_scans;
    for (std::size_t i = 0; i < model.live(); ++i)
      model.verify(i);
  }
}

// After a move the live blocks belong to the pool and keep their contents;
// checks a sample of at most 64.
template <class Adapter>
void check_after_move(const Adapter& pool, const Model& model) {
  const std::size_t step = model.live() / 64 + 1;
  for (std::size_t i = 0; i < model.live(); i += step) {
    MEMPOOL_FUZZ_CHECK(pool.owns(model.blocks()[i].p));
    model.verify(i);
  }
  pool.check(model);
}

// Runs the operations of the rest of the input (at most kMaxOps). Live blocks
// stay live: finish with free_all (or leave them to the pool's destructor).
template <class Adapter>
void run_program(Adapter& pool, Model& model, Input& in) {
  int full_scans = 0;
  int moves = 0;
  for (std::size_t n = 0; n < kMaxOps && !in.empty(); ++n) {
    const std::uint8_t op = in.byte();
    const auto arg = static_cast<std::uint8_t>(op & 31);
    switch (op >> 5) {
      case 0:
        allocate_one(pool, model, arg);
        break;
      case 1:
        for (unsigned k = 0; k <= arg; ++k)
          allocate_one(pool, model, static_cast<std::uint8_t>(k));
        break;
      case 2: {
        const std::size_t i = (std::size_t{arg} << 8) | in.byte();
        if (model.live() > 0) free_at(pool, model, i % model.live(), arg);
        break;
      }
      case 3:
        if (model.live() > 0) free_at(pool, model, model.live() - 1, arg);
        break;
      case 4:
        for (unsigned k = 0; k <= (arg & 15u) && model.live() > 0; ++k) {
          free_at(pool, model, (arg & 16) != 0 ? model.live() - 1 : 0,
                  static_cast<std::uint8_t>(k));
        }
        break;
      case 5: {
        const std::size_t i = (std::size_t{arg} << 8) | in.byte();
        const std::uint8_t seed = in.byte();
        if (model.live() > 0) {
          model.verify(i % model.live());
          model.refill(i % model.live(), seed);
        }
        break;
      }
      case 6:
        if (arg < 16) {
          probe(pool, model, arg, full_scans);
        } else {
          pool.extra(static_cast<std::uint8_t>(arg & 15), in, model);
          pool.check(model);
        }
        break;
      default:
        if (moves < kMaxMoves) {
          ++moves;
          pool.move_pool(arg);
          check_after_move(pool, model);
        }
        break;
    }
  }
}

// Verifies and frees every live block, alternating the free variants.
template <class Adapter>
void free_all(Adapter& pool, Model& model) {
  for (std::uint8_t k = 0; model.live() > 0; ++k)
    free_at(pool, model, model.live() - 1, k);
}

}  // namespace mempool_fuzz
