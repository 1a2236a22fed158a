#include "mempool/bitmap_pool.hpp"

#include <algorithm>
#include <bit>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "mempool/detail/os.hpp"

namespace mempool {

namespace {
constexpr const char* kName = "BitmapPool";
}  // namespace

BitmapPool::Config BitmapPool::validate(std::size_t block_size, std::size_t capacity,
                                        std::size_t alignment) {
  const detail::BlockLayout layout = detail::make_block_layout(kName, block_size, alignment);
  if (capacity == 0) {
    throw std::invalid_argument(detail::argument_message(kName, "capacity must be greater than 0"));
  }
  if (capacity > kMaxCapacity) {
    throw std::length_error(detail::argument_message(
        kName, ("capacity " + std::to_string(capacity) + " exceeds the maximum of " +
                std::to_string(kMaxCapacity) + " blocks")
                   .c_str()));
  }
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(layout.size, capacity, &bytes) ||
      detail::align_up(bytes, detail::page_size()) == 0) {
    throw std::length_error(
        detail::argument_message(kName, "block_size x capacity overflows the address space"));
  }
  return Config{layout, capacity, bytes};
}

std::size_t BitmapPool::storage_bytes(std::size_t block_size, std::size_t capacity,
                                      std::size_t alignment) {
  return validate(block_size, capacity, alignment).bytes;
}

BitmapPool::BitmapPool(const Config& config, char* base, std::size_t mapped_bytes)
    : base_(base),
      block_size_(config.layout.size),
      bytes_(config.bytes),
      alignment_(config.layout.alignment),
      mapped_bytes_(mapped_bytes),
      bits_(config.capacity) {
  // Up to 16 cursors spread evenly over the words, fewer for small pools.
  const std::size_t cursors = std::bit_floor(std::min<std::size_t>(16, bits_.words()));
  cursors_ = std::make_unique<Cursor[]>(cursors);
  for (std::size_t k = 0; k < cursors; ++k) {
    cursors_[k].home = k * bits_.words() / cursors;
    cursors_[k].word.store(cursors_[k].home, std::memory_order_relaxed);
  }
  cursor_shift_ = 4 - static_cast<unsigned>(std::countr_zero(cursors));
  if (std::has_single_bit(block_size_))
    shift_ = static_cast<unsigned>(std::countr_zero(block_size_));
  // Multiply-high by ceil(2^64 / d) divides exactly every offset below
  // 2^64 / d (the error term offset x (magic x d - 2^64) stays under 2^64).
  std::size_t product = 0;
  if (!__builtin_mul_overflow(bytes_, block_size_, &product)) {
    magic_ = (~std::uint64_t{0}) / block_size_ + 1;
  }
  if (base_ != nullptr) detail::checker_pool_created(base_);
}

// The checkers forget the pool's blocks; a caller's buffer is the caller's again.
void BitmapPool::forget_blocks() noexcept {
  if (base_ == nullptr) return;
  detail::checker_pool_destroyed(base_);
  if (mapped_bytes_ == 0) detail::checker_returned(base_, bytes_);
}

BitmapPool::BitmapPool(std::size_t block_size, std::size_t capacity, std::size_t alignment)
    : BitmapPool(validate(block_size, capacity, alignment), nullptr, 0) {
  mapped_bytes_ = detail::align_up(bytes_, detail::page_size());
  base_ = static_cast<char*>(detail::os_map(mapped_bytes_, /*populate=*/true));
  if (base_ == nullptr) {
    mapped_bytes_ = 0;
    throw std::bad_alloc();
  }
  detail::checker_pool_created(base_);
}

BitmapPool::BitmapPool(std::size_t block_size, std::size_t capacity, std::span<std::byte> storage,
                       std::size_t alignment)
    : BitmapPool(validate(block_size, capacity, alignment), reinterpret_cast<char*>(storage.data()),
                 0) {
  if (storage.data() == nullptr || storage.size() < bytes_) {
    throw std::invalid_argument(detail::argument_message(
        kName, ("storage of " + std::to_string(storage.size()) +
                " bytes is too small: " + std::to_string(bytes_) + " needed")
                   .c_str()));
  }
  if (reinterpret_cast<std::uintptr_t>(storage.data()) % alignment_ != 0) {
    throw std::invalid_argument(detail::argument_message(
        kName, ("storage is not aligned to " + std::to_string(alignment_) + " bytes").c_str()));
  }
}

BitmapPool::BitmapPool(BitmapPool&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      block_size_(other.block_size_),
      bytes_(std::exchange(other.bytes_, 0)),
      magic_(other.magic_),
      shift_(other.shift_),
      alignment_(other.alignment_),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      bits_(std::move(other.bits_)),
      cursors_(std::move(other.cursors_)),
      cursor_shift_(other.cursor_shift_) {}

BitmapPool& BitmapPool::operator=(BitmapPool&& other) noexcept {
  if (this != &other) {
    forget_blocks();
    detail::os_unmap(base_, mapped_bytes_);
    base_ = std::exchange(other.base_, nullptr);
    block_size_ = other.block_size_;
    bytes_ = std::exchange(other.bytes_, 0);
    magic_ = other.magic_;
    shift_ = other.shift_;
    alignment_ = other.alignment_;
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    bits_ = std::move(other.bits_);
    cursors_ = std::move(other.cursors_);
    cursor_shift_ = other.cursor_shift_;
  }
  return *this;
}

BitmapPool::~BitmapPool() {
  forget_blocks();
  detail::os_unmap(base_, mapped_bytes_);
}

}  // namespace mempool
