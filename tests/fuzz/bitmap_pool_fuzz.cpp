// libFuzzer target for BitmapPool (mempool/bitmap_pool.hpp).
//
// Input: a flags byte (bits 0-3: the alignment, see decode_alignment; bits 4-5:
// the storage: mapped by the pool, a caller's buffer of exactly storage_bytes(),
// one byte too small, or misaligned), the block size (2 bytes), the capacity
// (2 bytes), then the operations of pool_model.hpp.
//
// BitmapPool is bounded: allocate must return nullptr exactly when the model is
// full. It checks every free, so here, and only here, the adapter also tries
// misuse: try_deallocate of freed, interior, foreign and null pointers must
// answer false and change nothing (in_use() is compared after every step).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>

#include "mempool/bitmap_pool.hpp"
#include "pool_model.hpp"

namespace {

using mempool::BitmapPool;
using mempool_fuzz::AdapterBase;
using mempool_fuzz::Input;
using mempool_fuzz::Model;

enum class Storage { kMapped, kCallerExact, kCallerTooSmall, kCallerMisaligned };

// Caller buffers, aligned to the largest pool alignment.
constexpr std::align_val_t kBufferAlignment{mempool_fuzz::kMaxAlignment};
struct BufferDelete {
  void operator()(std::byte* p) const noexcept { ::operator delete(p, kBufferAlignment); }
};
using Buffer = std::unique_ptr<std::byte, BufferDelete>;

unsigned bitmap_errors(std::size_t block_size, std::size_t capacity, std::size_t alignment) {
  unsigned e = mempool_fuzz::layout_errors(block_size, alignment);
  if (capacity == 0) e |= mempool_fuzz::kInvalidArgument;
  if (capacity > BitmapPool::kMaxCapacity) e |= mempool_fuzz::kLengthError;
  return e;
}

class BitmapAdapter : public AdapterBase<BitmapPool> {
 public:
  BitmapAdapter(std::size_t block_size, std::size_t capacity, std::size_t alignment,
                Storage storage) noexcept
      : asked_size_(block_size),
        asked_capacity_(capacity),
        asked_alignment_(alignment),
        storage_(storage) {}
  BitmapAdapter(const BitmapAdapter&) = delete;
  BitmapAdapter& operator=(const BitmapAdapter&) = delete;
  ~BitmapAdapter() { pool_.reset(); }  // before the buffer it may use

  // False when the model says the parameters are invalid (and the pool agreed).
  bool construct() {
    unsigned expected = bitmap_errors(asked_size_, asked_capacity_, asked_alignment_);
    std::size_t bytes = 0;
    const bool valid = mempool_fuzz::constructs_as_expected(expected, [&] {
      bytes = BitmapPool::storage_bytes(asked_size_, asked_capacity_, asked_alignment_);
    });
    bool built = false;
    if (storage_ == Storage::kMapped) {
      built = mempool_fuzz::constructs_as_expected(
          expected, [&] { pool_.emplace(asked_size_, asked_capacity_, asked_alignment_); });
    } else {
      // Exactly as many bytes as the pool may use, so that ASan sees a block past
      // the end; any size when the parameters are invalid anyway.
      std::size_t size = valid ? bytes : 64;
      std::size_t offset = 0;
      if (storage_ == Storage::kCallerTooSmall) {
        size -= 1;
        expected |= mempool_fuzz::kInvalidArgument;
      } else if (storage_ == Storage::kCallerMisaligned) {
        offset = 1;
        expected |= mempool_fuzz::kInvalidArgument;
      }
      buffer_.reset(static_cast<std::byte*>(::operator new(size + offset, kBufferAlignment)));
      const std::span<std::byte> storage(buffer_.get() + offset, size);
      built = mempool_fuzz::constructs_as_expected(expected, [&] {
        pool_.emplace(asked_size_, asked_capacity_, storage, asked_alignment_);
      });
    }
    if (!built) return false;
    MEMPOOL_FUZZ_CHECK(valid);
    mempool_fuzz::check_layout(asked_size_, asked_alignment_, block_size(), alignment());
    MEMPOOL_FUZZ_CHECK(pool().capacity() == asked_capacity_);
    MEMPOOL_FUZZ_CHECK(bytes == block_size() * asked_capacity_);
    MEMPOOL_FUZZ_CHECK(pool().in_use() == 0);
    return true;
  }

  [[nodiscard]] std::size_t capacity() const noexcept { return pool().capacity(); }

  void* allocate(std::uint8_t /*variant*/) { return pool().allocate(); }
  void deallocate(void* p, std::uint8_t variant) {
    if ((variant & 1) != 0) {
      MEMPOOL_FUZZ_CHECK(pool().try_deallocate(p));
    } else {
      pool().deallocate(p);
    }
  }

  void check(const Model& model) const { MEMPOOL_FUZZ_CHECK(pool().in_use() == model.live()); }

  // Misuse that BitmapPool must refuse: freeing a freed block (try_deallocate),
  // a pointer inside a live block, one from elsewhere, or null.
  void extra(std::uint8_t arg, Input& in, Model& model) {
    const std::uint8_t pick = in.byte();
    BitmapPool& pool = this->pool();
    pool.deallocate(nullptr);  // a no-op
    MEMPOOL_FUZZ_CHECK(!pool.try_deallocate(nullptr));
    for (void* q : model.recently_freed())
      MEMPOOL_FUZZ_CHECK(!pool.try_deallocate(q));
    int on_stack = 0;
    MEMPOOL_FUZZ_CHECK(!pool.try_deallocate(&on_stack));
    if (model.live() > 0) {
      const Model::Block& b = model.blocks()[pick % model.live()];
      MEMPOOL_FUZZ_CHECK(!pool.try_deallocate(b.p + 1 + arg % (block_size() - 1)));
      model.verify(pick % model.live());
    }
  }

  void move_pool(std::uint8_t variant) {
    move_pool_with(variant, [&](std::optional<BitmapPool>& fresh) {
      fresh.emplace(asked_size_, asked_capacity_, asked_alignment_);
    });
  }

 private:
  std::size_t asked_size_;
  std::size_t asked_capacity_;
  std::size_t asked_alignment_;
  Storage storage_;
  Buffer buffer_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const std::uint8_t flags = in.byte();
  const std::size_t block_size = mempool_fuzz::decode_block_size(in);
  const std::size_t capacity = mempool_fuzz::decode_capacity(in, BitmapPool::kMaxCapacity + 1);
  BitmapAdapter pool(block_size, capacity, mempool_fuzz::decode_alignment(flags),
                     static_cast<Storage>((flags >> 4) & 3));
  if (!pool.construct()) return 0;
  Model model(pool.block_size());
  mempool_fuzz::run_program(pool, model, in);
  mempool_fuzz::free_all(pool, model);
  MEMPOOL_FUZZ_CHECK(pool.pool().in_use() == 0);
  return 0;
}
