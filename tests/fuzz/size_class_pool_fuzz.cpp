// libFuzzer target for SizeClassPool (mempool/size_class_pool.hpp).
//
// Blocks of many sizes do not fit run_program's one-block-size adapters, so this
// target walks the pool itself, over pool_model.hpp's Model of variable-size
// blocks. A fresh pool maps 64 shard tables (about a millisecond under ASan), so
// one pool serves kInputsPerPool inputs, each of which frees every block it
// allocated. Input: operations, one byte each (some read more), until the input
// or kMaxOps runs out:
//
//   op (byte >> 6)  arg = byte & 63
//   0  allocate(n)                     (n from the next 2 bytes, see decode_size)
//   1  try_allocate(n)                 (the same)
//   2  deallocate the i-th live block with its size (i from arg and the next byte);
//      with none live, deallocate(nullptr, n) of some n
//   3  arg & 32: allocate (arg & 31) + 1 blocks of one size n, alternating
//      allocate and try_allocate; else free (arg & 15) + 1 blocks, the most
//      recent (arg & 16) or the first ones
//
// Every block must be non-null, aligned to alignment(n), owned by the pool
// exactly when 1 <= n <= 512 (smaller and larger requests go to operator new),
// and disjoint over block_size(n) bytes (1 for n = 0) from every live block. Its
// n bytes hold a per-block pattern, verified before it is freed with the same n.
// bytes_reserved() never decreases while blocks are live, covers the live small
// blocks (per class and in all) and is the sum over the classes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "mempool/detail/size_classes.hpp"
#include "mempool/size_class_pool.hpp"
#include "pool_model.hpp"

namespace {

using mempool::SizeClassPool;
using mempool::detail::kSizeClassCount;
using mempool::detail::kSizeClassMax;
using mempool::detail::size_class_of;
using mempool_fuzz::Input;
using mempool_fuzz::Model;

constexpr std::size_t kMaxSize = 1100;
constexpr unsigned kInputsPerPool = 64;

// 0 .. kMaxSize: about half small (1 .. 512), half large, and 0.
std::size_t decode_size(Input& in) noexcept {
  return in.u16() % (kMaxSize + 1);
}

bool is_small(std::size_t n) noexcept {
  return n >= 1 && n <= kSizeClassMax;
}

class Walk {
 public:
  explicit Walk(SizeClassPool& pool) noexcept : pool_(pool) {}

  void allocate(std::size_t n, bool try_variant) {
    if (model_.live() >= mempool_fuzz::kMaxLive) return;
    void* p = try_variant ? pool_.try_allocate(n) : pool_.allocate(n);
    MEMPOOL_FUZZ_CHECK(p != nullptr);
    MEMPOOL_FUZZ_CHECK(reinterpret_cast<std::uintptr_t>(p) % SizeClassPool::alignment(n) == 0);
    const bool small = is_small(n);
    MEMPOOL_FUZZ_CHECK(pool_.owns(p) == small);
    model_.add(p, n, n == 0 ? 1 : SizeClassPool::block_size(n));
    if (small) {
      ++class_live_[size_class_of(n)];
      small_bytes_live_ += SizeClassPool::block_size(n);
      check_class(size_class_of(n));
    }
  }

  // Verifies live block i (its pattern; a small one still owned, its interior
  // not a block) and frees it with its size.
  void free_at(std::size_t i) {
    const Model::Block b = model_.blocks()[i];
    const bool small = is_small(b.size);
    MEMPOOL_FUZZ_CHECK(pool_.owns(b.p) == small);
    if (small) MEMPOOL_FUZZ_CHECK(!pool_.owns(b.p + 1));
    pool_.deallocate(model_.take(i), b.size);
    if (small) {
      --class_live_[size_class_of(b.size)];
      small_bytes_live_ -= SizeClassPool::block_size(b.size);
    }
  }

  void free_null(std::size_t n) noexcept { pool_.deallocate(nullptr, n); }

  [[nodiscard]] std::size_t live() const noexcept { return model_.live(); }

  // After every operation: bytes_reserved() is the classes' sum, covers the live
  // small blocks, and has not shrunk since the last check while blocks were live.
  void check() {
    std::size_t sum = 0;
    for (std::size_t c = 0; c < kSizeClassCount; ++c)
      sum += pool_.bytes_reserved(c);
    const std::size_t reserved = pool_.bytes_reserved();
    MEMPOOL_FUZZ_CHECK(reserved == sum);
    MEMPOOL_FUZZ_CHECK(reserved >= small_bytes_live_);
    if (model_.live() > 0) MEMPOOL_FUZZ_CHECK(reserved >= last_reserved_);
    last_reserved_ = reserved;
  }

  void free_all() {
    while (model_.live() > 0)
      free_at(model_.live() - 1);
    check();
  }

 private:
  void check_class(std::size_t c) const noexcept {
    MEMPOOL_FUZZ_CHECK(pool_.bytes_reserved(c) >=
                       class_live_[c] * mempool::detail::size_class_bytes(c));
  }

  SizeClassPool& pool_;
  Model model_;
  std::array<std::size_t, kSizeClassCount> class_live_{};
  std::size_t small_bytes_live_ = 0;
  std::size_t last_reserved_ = 0;
};

void run(Walk& walk, Input& in) {
  for (std::size_t k = 0; k < mempool_fuzz::kMaxOps && !in.empty(); ++k) {
    const std::uint8_t op = in.byte();
    const auto arg = static_cast<unsigned>(op & 63);
    switch (op >> 6) {
      case 0:
      case 1:
        walk.allocate(decode_size(in), (op >> 6) == 1);
        break;
      case 2: {
        const std::size_t i = (std::size_t{arg} << 8) | in.byte();
        if (walk.live() > 0) {
          walk.free_at(i % walk.live());
        } else {
          walk.free_null(i % (kMaxSize + 1));
        }
        break;
      }
      default:
        if ((arg & 32) != 0) {
          const std::size_t n = decode_size(in);
          for (unsigned j = 0; j <= (arg & 31); ++j)
            walk.allocate(n, (j & 1) != 0);
        } else {
          for (unsigned j = 0; j <= (arg & 15) && walk.live() > 0; ++j)
            walk.free_at((arg & 16) != 0 ? walk.live() - 1 : 0);
        }
        break;
    }
    walk.check();
  }
}

// The pool for this input: every kInputsPerPool-th input a fresh one, which has
// mapped nothing for blocks yet. Never destroyed at exit.
SizeClassPool& pool_for_input() {
  static auto* const pool = new std::optional<SizeClassPool>();
  static unsigned inputs = 0;
  if (inputs++ % kInputsPerPool == 0) {
    pool->reset();
    pool->emplace();
    MEMPOOL_FUZZ_CHECK((*pool)->bytes_reserved() == 0);
  }
  return **pool;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  SizeClassPool& pool = pool_for_input();
  Walk walk(pool);
  run(walk, in);
  walk.free_all();
  return 0;
}
