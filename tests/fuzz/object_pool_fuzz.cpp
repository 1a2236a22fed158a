// libFuzzer target for the single-threaded pools of mempool/object_pool.hpp:
// FixedPool, BasicFixedPool<WithStats> and ObjectPool<T>.
//
// Input: a flags byte (bits 0-3: the alignment, see decode_alignment; bits 4-5:
// the pool; bit 6: ObjectPool leaves its live objects to the pool's destructor),
// the block size (2 bytes), then the operations of pool_model.hpp.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "mempool/object_pool.hpp"
#include "mempool/stats.hpp"
#include "pool_model.hpp"

namespace {

using mempool_fuzz::AdapterBase;
using mempool_fuzz::Input;
using mempool_fuzz::Model;

// FixedPool (Stats = NoStats) or BasicFixedPool<WithStats>.
template <class Stats>
class FixedAdapter : public AdapterBase<mempool::BasicFixedPool<Stats>> {
  using Pool = mempool::BasicFixedPool<Stats>;

 public:
  FixedAdapter(std::size_t block_size, std::size_t alignment) noexcept
      : asked_size_(block_size), asked_alignment_(alignment) {}

  // False when the model says the parameters are invalid (and the pool agreed).
  bool construct() {
    if (!mempool_fuzz::constructs_as_expected(
            mempool_fuzz::layout_errors(asked_size_, asked_alignment_),
            [&] { this->pool_.emplace(asked_size_, asked_alignment_); })) {
      return false;
    }
    mempool_fuzz::check_layout(asked_size_, asked_alignment_, this->block_size(),
                               this->alignment());
    return true;
  }

  void* allocate(std::uint8_t variant) {
    return (variant & 1) != 0 ? this->pool().try_allocate() : this->pool().allocate();
  }
  void deallocate(void* p, std::uint8_t /*variant*/) { this->pool().deallocate(p); }

  void check(const Model& model) const {
    const Pool& pool = this->pool();
    MEMPOOL_FUZZ_CHECK(pool.bytes_reserved() >= model.live() * pool.block_size());
    if constexpr (Stats::enabled) {
      const mempool::PoolStats s = pool.stats();
      MEMPOOL_FUZZ_CHECK(s.allocations == model.allocations());
      MEMPOOL_FUZZ_CHECK(s.frees == model.frees());
      MEMPOOL_FUZZ_CHECK(s.live == model.live());
      MEMPOOL_FUZZ_CHECK(s.peak == model.peak());
      MEMPOOL_FUZZ_CHECK(s.bytes_reserved == pool.bytes_reserved());
      MEMPOOL_FUZZ_CHECK(s.chunks > 0 || s.bytes_reserved == 0);
    }
  }

  // deallocate(nullptr) is a no-op (check() then sees the counters unchanged);
  // for_each_allocated reports exactly the live blocks (a few times per input).
  void extra(std::uint8_t arg, Input& /*in*/, Model& model) {
    this->pool().deallocate(nullptr);
    if ((arg & 1) == 0 || scans_ >= mempool_fuzz::kMaxFullScans) return;
    ++scans_;
    std::vector<const void*> reported;
    this->pool().for_each_allocated([&](void* p) { reported.push_back(p); });
    std::vector<const void*> live;
    live.reserve(model.live());
    for (const Model::Block& b : model.blocks())
      live.push_back(b.p);
    std::sort(reported.begin(), reported.end());
    std::sort(live.begin(), live.end());
    MEMPOOL_FUZZ_CHECK(reported == live);
  }

  void move_pool(std::uint8_t variant) {
    this->move_pool_with(
        variant, [&](std::optional<Pool>& fresh) { fresh.emplace(asked_size_, asked_alignment_); });
  }

 private:
  std::size_t asked_size_;
  std::size_t asked_alignment_;
  int scans_ = 0;
};

// Tracked objects alive now: ObjectPool must construct and destroy exactly once.
long g_objects = 0;

template <std::size_t N, std::size_t A>
struct alignas(A) Tracked {
  Tracked() noexcept { ++g_objects; }
  ~Tracked() { --g_objects; }
  Tracked(const Tracked&) = delete;
  Tracked& operator=(const Tracked&) = delete;
  unsigned char bytes[N];  // left uninitialised: the model fills the whole block
};

template <class T>
class ObjectAdapter : public AdapterBase<mempool::ObjectPool<T>> {
  using Pool = mempool::ObjectPool<T>;

 public:
  void construct() {
    this->pool_.emplace();
    // ObjectPool asks for alignof(T), raised to 16 for 16 bytes and up.
    mempool_fuzz::check_layout(sizeof(T),
                               mempool::detail::default_block_alignment(sizeof(T), alignof(T)),
                               this->block_size(), this->alignment());
  }

  void* allocate(std::uint8_t /*variant*/) { return this->pool().create(); }
  void deallocate(void* p, std::uint8_t /*variant*/) { this->pool().destroy(static_cast<T*>(p)); }

  void check(const Model& model) const {
    MEMPOOL_FUZZ_CHECK(g_objects >= 0 && static_cast<std::size_t>(g_objects) == model.live());
  }

  void extra(std::uint8_t /*arg*/, Input& /*in*/, Model& /*model*/) {
    this->pool().destroy(nullptr);  // a no-op: check() sees the count unchanged
  }

  void move_pool(std::uint8_t variant) {
    this->move_pool_with(variant, [](std::optional<Pool>& fresh) { fresh.emplace(); });
  }
};

template <class Stats>
void fuzz_fixed_pool(Input& in, std::size_t block_size, std::size_t alignment) {
  FixedAdapter<Stats> pool(block_size, alignment);
  if (!pool.construct()) return;
  Model model(pool.block_size());
  pool.check(model);
  mempool_fuzz::run_program(pool, model, in);
  mempool_fuzz::free_all(pool, model);
}

template <class T>
void fuzz_object_pool(Input& in, bool leave_live) {
  g_objects = 0;
  {
    ObjectAdapter<T> pool;
    pool.construct();
    Model model(pool.block_size());
    mempool_fuzz::run_program(pool, model, in);
    if (!leave_live) mempool_fuzz::free_all(pool, model);
  }  // ~ObjectPool destroys the objects still alive
  MEMPOOL_FUZZ_CHECK(g_objects == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const std::uint8_t flags = in.byte();
  const std::size_t block_size = mempool_fuzz::decode_block_size(in);
  const std::size_t alignment = mempool_fuzz::decode_alignment(flags);
  const bool leave_live = (flags & 64) != 0;
  switch ((flags >> 4) & 3) {
    case 0:
    case 1:
      fuzz_fixed_pool<mempool::NoStats>(in, block_size, alignment);
      break;
    case 2:
      fuzz_fixed_pool<mempool::WithStats>(in, block_size, alignment);
      break;
    default:
      // ObjectPool's block follows its type: the block size picks one.
      switch (block_size % 4) {
        case 0:
          fuzz_object_pool<Tracked<1, 1>>(in, leave_live);
          break;
        case 1:
          fuzz_object_pool<Tracked<24, 8>>(in, leave_live);
          break;
        case 2:
          fuzz_object_pool<Tracked<40, 64>>(in, leave_live);
          break;
        default:
          fuzz_object_pool<Tracked<600, 256>>(in, leave_live);
          break;
      }
      break;
  }
  return 0;
}
