// libFuzzer target for ConcurrentFixedPool (mempool/concurrent_fixed_pool.hpp).
//
// Input: a flags byte (bits 0-3: the alignment, see decode_alignment), the block
// size (2 bytes), then the operations of pool_model.hpp. The adapter's own
// operation runs a short-lived second thread that frees some live blocks and
// allocates new ones, so blocks cross threads and an exiting thread's shard goes
// back to the depot. The threads run one at a time: the model stays sequential.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "mempool/concurrent_fixed_pool.hpp"
#include "pool_model.hpp"

namespace {

using mempool::ConcurrentFixedPool;
using mempool_fuzz::AdapterBase;
using mempool_fuzz::Input;
using mempool_fuzz::Model;

constexpr int kMaxThreads = 4;  // per input: starting a thread is slow under ASan

class ConcurrentAdapter : public AdapterBase<ConcurrentFixedPool> {
 public:
  ConcurrentAdapter(std::size_t block_size, std::size_t alignment) noexcept
      : asked_size_(block_size), asked_alignment_(alignment) {}

  bool construct() {
    if (!mempool_fuzz::constructs_as_expected(
            mempool_fuzz::layout_errors(asked_size_, asked_alignment_),
            [&] { pool_.emplace(asked_size_, asked_alignment_); })) {
      return false;
    }
    mempool_fuzz::check_layout(asked_size_, asked_alignment_, block_size(), alignment());
    MEMPOOL_FUZZ_CHECK(pool().batch_size() > 0);
    return true;
  }

  void* allocate(std::uint8_t variant) {
    return (variant & 1) != 0 ? pool().try_allocate() : pool().allocate();
  }
  void deallocate(void* p, std::uint8_t /*variant*/) { pool().deallocate(p); }

  void check(const Model& model) const {
    MEMPOOL_FUZZ_CHECK(pool().bytes_reserved() >= model.live() * pool().block_size());
  }

  // Another thread frees up to 32 live blocks (chosen by the next byte) and
  // allocates up to 32 (the byte after); its blocks join the model here.
  void extra(std::uint8_t arg, Input& in, Model& model) {
    pool().deallocate(nullptr);  // a no-op
    const unsigned free_count = in.byte() % 33u;
    const unsigned allocate_count = in.byte() % 33u;
    if ((arg & 1) == 0 || threads_ >= kMaxThreads) return;
    ++threads_;
    std::vector<void*> to_free;
    for (unsigned k = 0; k < free_count && model.live() > 0; ++k) {
      to_free.push_back(model.take((k * 7u + arg) % model.live()));  // verified first
    }
    std::vector<void*> allocated;
    allocated.reserve(allocate_count);
    ConcurrentFixedPool& shared = pool();
    std::thread other([&] {
      for (void* p : to_free)
        shared.deallocate(p);
      for (unsigned k = 0; k < allocate_count; ++k)
        allocated.push_back(shared.allocate());
    });
    other.join();
    for (void* p : allocated) {
      if (model.live() >= mempool_fuzz::kMaxLive) {
        shared.deallocate(p);
        continue;
      }
      mempool_fuzz::accept_allocation(*this, model, p);
    }
  }

  void move_pool(std::uint8_t variant) {
    move_pool_with(variant, [&](std::optional<ConcurrentFixedPool>& fresh) {
      fresh.emplace(asked_size_, asked_alignment_);
    });
  }

 private:
  std::size_t asked_size_;
  std::size_t asked_alignment_;
  int threads_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const std::uint8_t flags = in.byte();
  const std::size_t block_size = mempool_fuzz::decode_block_size(in);
  ConcurrentAdapter pool(block_size, mempool_fuzz::decode_alignment(flags));
  if (!pool.construct()) return 0;
  Model model(pool.block_size());
  mempool_fuzz::run_program(pool, model, in);
  mempool_fuzz::free_all(pool, model);
  return 0;
}
