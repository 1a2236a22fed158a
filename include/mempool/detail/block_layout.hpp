// Block size and alignment of a fixed-size pool, validated once at construction.
#pragma once

#include <cstddef>

#include "mempool/detail/platform.hpp"

namespace mempool::detail {

// Largest block any fixed-size pool accepts; bigger requests are a length_error.
inline constexpr std::size_t kMaxBlockSize = std::size_t{1} << 30;

struct BlockLayout {
  std::size_t size;       // a multiple of alignment, at least one pointer
  std::size_t alignment;  // a power of two, at most kMaxPoolAlignment
};

// Rules (docs/architecture.md, "Alignment"): the asked alignment if there is one
// (0: none asked), else 16 once the block is 16 bytes or more (what malloc
// gives); never less than a pointer's (the free list lives in free blocks). The
// size is rounded up to a multiple of the alignment. Throws std::invalid_argument
// / std::length_error naming `allocator` and the bad parameter.
MEMPOOL_API BlockLayout make_block_layout(const char* allocator, std::size_t block_size,
                                          std::size_t alignment);

}  // namespace mempool::detail
