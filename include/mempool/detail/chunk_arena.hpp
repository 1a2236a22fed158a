// Where the growing pools get their blocks: chunks mapped from the OS, each twice
// the last (capped), handed out by bumping a pointer so that memory is touched
// only when a block is first used. Also answers "is this one of my blocks?" and,
// when tracking is on (checked builds), "is it allocated?".
//
// Single-threaded: the concurrent pool calls it under its growth mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mempool/detail/block_layout.hpp"
#include "mempool/detail/free_list.hpp"

namespace mempool::detail {

class MEMPOOL_API ChunkArena {
 public:
  // `track_blocks` keeps one allocated-bit per block (checked builds).
  ChunkArena(BlockLayout layout, bool track_blocks) noexcept
      : layout_(layout), track_(track_blocks) {}
  ~ChunkArena();
  ChunkArena(const ChunkArena&) = delete;
  ChunkArena& operator=(const ChunkArena&) = delete;
  ChunkArena(ChunkArena&& other) noexcept;
  ChunkArena& operator=(ChunkArena&& other) noexcept;

  // One fresh block, or nullptr when the OS refuses a new chunk.
  void* carve_one() noexcept;
  // Up to n fresh blocks as a chain (fewer only at the end of a chunk; empty when
  // the OS refuses a new chunk).
  FreeChain carve(std::size_t n) noexcept;

  // p points at the start of a block of one of our chunks.
  [[nodiscard]] bool owns(const void* p) const noexcept;

  // Tracking (only when constructed with track_blocks): flips the block's bit.
  // mark_free returns false if the block was not allocated (a double free).
  void mark_allocated(const void* p) noexcept;
  [[nodiscard]] bool mark_free(const void* p) noexcept;

  // Calls f(void*) for every block carved so far (live or free), chunk by chunk.
  template <class F>
  void for_each_carved(F&& f) const {
    for (const Chunk& c : chunks_) {
      for (std::size_t i = 0; i < c.carved; ++i)
        f(c.base + i * layout_.size);
    }
  }

  [[nodiscard]] BlockLayout layout() const noexcept { return layout_; }
  [[nodiscard]] std::size_t chunk_count() const noexcept { return chunks_.size(); }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return bytes_reserved_; }
  // Given free blocks of this arena (any order; sorted on return), unmaps every
  // chunk all of whose carved blocks are among them, except a chunk still being
  // carved, and removes those blocks from the vector. Returns the bytes unmapped.
  std::size_t release_free_chunks(std::vector<void*>& free_blocks) noexcept;

  // Unmaps every chunk: all blocks become invalid.
  void release_all() noexcept;

 private:
  struct Chunk {
    char* base;
    std::size_t bytes;
    std::size_t blocks;                                       // capacity in blocks
    std::size_t carved;                                       // blocks handed out so far (a prefix)
    std::unique_ptr<std::atomic<std::uint64_t>[]> allocated;  // tracking only
  };

  bool grow() noexcept;
  [[nodiscard]] const Chunk* find(const void* p, std::size_t* index) const noexcept;

  BlockLayout layout_;
  bool track_;
  std::vector<Chunk> chunks_;              // in mapping order; back() is being carved
  std::vector<std::uint32_t> by_address_;  // indices into chunks_, sorted by base
  std::size_t next_chunk_bytes_ = 0;
  std::size_t bytes_reserved_ = 0;
};

}  // namespace mempool::detail
