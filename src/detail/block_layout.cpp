#include "mempool/detail/block_layout.hpp"

#include <stdexcept>
#include <string>

#include "mempool/detail/error.hpp"

namespace mempool::detail {

BlockLayout make_block_layout(const char* allocator, std::size_t block_size,
                              std::size_t alignment) {
  if (block_size == 0) {
    throw std::invalid_argument(argument_message(allocator, "block_size must be greater than 0"));
  }
  if (block_size > kMaxBlockSize) {
    throw std::length_error(argument_message(
        allocator, ("block_size " + std::to_string(block_size) + " exceeds the maximum of " +
                    std::to_string(kMaxBlockSize) + " bytes")
                       .c_str()));
  }
  if (alignment != 0 && (!is_power_of_two(alignment) || alignment > kMaxPoolAlignment)) {
    throw std::invalid_argument(argument_message(
        allocator, ("alignment " + std::to_string(alignment) +
                    " must be a power of two no greater than " + std::to_string(kMaxPoolAlignment))
                       .c_str()));
  }
  // Asked: exactly that alignment (at least a pointer's: the free list lives in
  // free blocks). Not asked: what malloc gives, 16 once the block is 16 or more.
  std::size_t align = alignment < alignof(void*) ? alignof(void*) : alignment;
  std::size_t size = align_up(block_size < sizeof(void*) ? sizeof(void*) : block_size, align);
  if (alignment == 0 && size >= kMinAlignLarge) {
    align = kMinAlignLarge;
    size = align_up(size, align);
  }
  return BlockLayout{size, align};
}

}  // namespace mempool::detail
